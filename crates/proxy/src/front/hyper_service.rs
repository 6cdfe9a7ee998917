//! The hyper front end: requests hyper has read (HTTP/2, HTTP/1.1 with bodies or upgrades,
//! unusual heads) through the pipeline's stages: [`admit`](crate::pipeline::admit) →
//! [`route`](crate::pipeline::route) → [`upstream`](crate::upstream) → response.
//!
//! Per request: one snapshot load, a route lookup, the header policy applied while the
//! upstream head is written, and the upstream round trip.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::{Instant, SystemTime};

use bytes::Bytes;
use http::header::{
    ACCESS_CONTROL_REQUEST_METHOD, CONTENT_LENGTH, CONTENT_TYPE, HOST, LOCATION, ORIGIN,
    TRANSFER_ENCODING, UPGRADE, VIA,
};
use http::uri::PathAndQuery;
use http::{HeaderValue, Method, Request, Response, StatusCode, Version};
use http_body::Body as _;
use hyper::body::Incoming;

use crate::body::{Completion, RequestBody, ResponseBody};
use crate::context::ConnCtx;
use crate::errors::error_response;
use crate::front::websocket;
use crate::observe::access_log::LogRecord;
use crate::observe::metrics::UpstreamErrorKind;
use crate::pipeline::admit::{self, Facts};
use crate::pipeline::affinity;
use crate::pipeline::auth;
use crate::pipeline::decision::{Decision, Forward, decide, destination};
use crate::pipeline::header_policy::{self, ConnectionOptions, Framing, UpstreamRequest};
use crate::pipeline::mirror;
use crate::pipeline::route::{self, Routed, Routing};
use crate::pipeline::route_policy;
use crate::snapshot::Snapshot;
use crate::upstream::balancer;
use crate::upstream::body::ReturnTo;
use crate::upstream::{self, Outgoing};
use sluice_routing::{Policy, RequestInfo, UpstreamProtocol};

/// Serves one request. Never fails: every problem becomes an error page. `routing`: the
/// request's routing when the own HTTP/1.1 loop made it already (and handed the request
/// over): it is not routed again.
pub(crate) async fn handle(
    ctx: Arc<ConnCtx>,
    mut request: Request<Incoming>,
    routing: Option<Routing>,
) -> Result<Response<ResponseBody>, Infallible> {
    let start = Instant::now();

    let host = request_host(&request);
    let host_str = host.to_str().unwrap_or("");
    // Matching and every policy see the normalised path; upstream gets the target as sent.
    let normalized = admit::request_path(request.uri().path());
    let admitted = admit::admit(facts(&request), &ctx.shared.policy)
        .and_then(|()| normalized.as_ref().map(|_| ()).map_err(|refusal| *refusal));
    let path: &str = normalized.as_deref().unwrap_or("/");
    let (snapshot, routed) = match routing {
        Some(Routing { snapshot, routed }) => (snapshot, routed),
        None => {
            let snapshot = ctx.shared.table.snapshot();
            let routed = route_by_hyper(&snapshot, &request, host_str, path, ctx.tls);
            (snapshot, routed)
        }
    };
    let log = ctx.shared.access_log.as_ref().map(|_| {
        Box::new(LogRecord {
            time: SystemTime::now(),
            client: ctx.peer.ip(),
            method: request.method().clone(),
            host: host.clone(),
            path: path_and_query(&request),
        })
    });
    // The request's accounting owns the connection and snapshot references from here on
    // (moved, not cloned: no extra reference counting per request).
    let mut done = Completion::new(ctx, snapshot, start, log);
    done.method = crate::observe::metrics::method_index(request.method().as_str().as_bytes());
    done.request_bytes = request
        .headers()
        .get(http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let ctx = &*done.ctx;
    let grpc = is_grpc(&request);
    if let Err(refusal) = admitted {
        tracing::debug!(peer = %ctx.peer, ?refusal, "request refused");
        return Ok(fail(done, grpc, host_str, refusal.status()));
    }
    let (id, entry, fixed) = match destination(routed, &mut done.backend, &mut done.entry) {
        Ok(destination) => destination,
        Err(status) => return Ok(fail(done, grpc, host_str, status)),
    };
    let route_entry = done.snapshot.table.entry(entry);
    let route_policy = &*route_entry.policy;
    let origin = request.headers().get(ORIGIN).map(HeaderValue::as_bytes);
    let view = route_policy::Request {
        tls: ctx.tls,
        method: request.method().as_str().as_bytes(),
        host: host_str,
        path,
        target: request
            .uri()
            .path_and_query()
            .map_or("/", PathAndQuery::as_str),
        client: ctx.peer.ip(),
        origin,
        preflight: request
            .headers()
            .contains_key(ACCESS_CONTROL_REQUEST_METHOD),
    };
    let query = request.uri().query();
    let Forward {
        limit_slot,
        rewritten,
        response_fields,
    } = match decide(ctx, route_entry, &view, query, fixed, start) {
        Decision::Forward(forward) => forward,
        Decision::Page(status) => return Ok(fail(done, grpc, host_str, status)),
        Decision::Answer(answer) => return Ok(answered(done, host_str, answer)),
    };
    done.limit_slot = limit_slot;
    let mut auth_fields = Vec::new();
    if let Some(external) = &route_policy.auth {
        let original = auth::Original {
            method: request.method(),
            headers: request.headers(),
            scheme: if ctx.tls { "https" } else { "http" },
            host: host_str,
            uri: view.target,
            client: view.client,
        };
        match auth::check(external, &ctx.shared, &done.snapshot, &original).await {
            auth::Verdict::Allow(fields) => auth_fields = fields,
            auth::Verdict::Deny(answer) => return Ok(answered(done, host_str, answer)),
            auth::Verdict::Fail(status) => return Ok(fail(done, grpc, host_str, status)),
        }
    }
    let body_limit = match route_policy.body_limit {
        Some(0) => None,
        Some(limit) => Some(limit),
        None => ctx.shared.body_limit,
    };
    if let Some(limit) = body_limit
        && request.body().size_hint().lower() > limit
    {
        return Ok(fail(done, grpc, host_str, StatusCode::PAYLOAD_TOO_LARGE));
    }

    let mut connection = ConnectionOptions::default();
    for value in request.headers().get_all(http::header::CONNECTION) {
        connection.add(value.as_bytes());
    }
    // Only WebSocket is relayed as an upgrade; any other `Upgrade` is dropped on the way.
    let websocket = request.version() == Version::HTTP_11
        && connection.upgrade
        && request
            .headers()
            .get(UPGRADE)
            .is_some_and(|v| header_policy::is_websocket_upgrade(v.as_bytes()));
    let client_upgrade = websocket.then(|| hyper::upgrade::on(&mut request));

    let http2 = request.version() == Version::HTTP_2;
    let (parts, body) = request.into_parts();
    let body = if body.is_end_stream() {
        RequestBody::Empty
    } else {
        RequestBody::streaming(body, body_limit, ctx.shared.client_body_timeout)
    };
    let framing = match &body {
        // An explicit empty body keeps its `Content-Length: 0` (a bodiless POST needs it).
        RequestBody::Empty if parts.headers.contains_key(CONTENT_LENGTH) => Framing::Length(0),
        RequestBody::Empty => Framing::None,
        RequestBody::Streaming { inner, .. } => match inner.size_hint().exact() {
            Some(length) => Framing::Length(length),
            None => Framing::Chunked,
        },
    };
    let target = match &rewritten {
        Some(target) => target.as_str(),
        None => parts.uri.path_and_query().map_or("/", PathAndQuery::as_str),
    };
    // The route's request fields, then those the auth service sent (they win).
    let request_set: std::borrow::Cow<'_, [(http::HeaderName, HeaderValue)]> =
        if auth_fields.is_empty() {
            std::borrow::Cow::Borrowed(&route_policy.request_headers)
        } else {
            let mut fields = route_policy.request_headers.clone();
            fields.retain(|(name, _)| !auth_fields.iter().any(|(n, _)| n == name));
            fields.extend(auth_fields);
            std::borrow::Cow::Owned(fields)
        };
    let preference = if route_policy.affinity.is_some() || route_policy.hash_by.is_some() {
        let facts = affinity::Facts {
            headers: &parts.headers,
            client: ctx.peer.ip(),
            uri: &parts.uri,
            host: host_str,
        };
        let balancer = &done.snapshot.backends[id].balancer;
        affinity::preference(route_policy, balancer, balancer::now_millis(start), &facts)
    } else {
        affinity::Preference::default()
    };
    let outgoing = Outgoing {
        head: UpstreamRequest {
            method: parts.method.as_str().as_bytes(),
            target: target.as_bytes(),
            host: host.as_bytes(),
            fields: &parts.headers,
            connection_names: connection.names_fields,
            websocket,
            http2,
            framing,
            set: &request_set,
            vhost: route_policy.upstream_vhost.as_ref(),
            forwarded_prefix: route_policy.forwarded_prefix.as_ref(),
            add: &route_policy.request_headers_add,
            remove: &route_policy.request_headers_remove,
        },
        forwarded: &ctx.forwarded,
        policy: &ctx.shared.policy,
        body,
        idempotent: matches!(
            parts.method,
            Method::GET | Method::HEAD | Method::OPTIONS | Method::TRACE
        ),
        head_request: parts.method == Method::HEAD,
        retry: &route_policy.next_upstream,
        prefer: preference.endpoint,
        balance: route_policy.load_balance,
        try_timeout: route_policy.backend_request_timeout,
    };

    let upstreams = &route_policy::upstreams(&ctx.shared.upstreams, route_policy);
    let header_timeout =
        route_policy::header_timeout(route_policy, ctx.shared.upstream_header_timeout);
    if !route_entry.mirrors.is_empty() {
        let copying = mirror::Copying {
            forwarded: &ctx.forwarded,
            policy: &ctx.shared.policy,
            metrics: &ctx.shared.metrics,
            connect_timeout: upstreams.connect_timeout,
            deadline: header_timeout,
        };
        mirror::copy(&route_entry.mirrors, &outgoing.head, &copying);
    }
    let request_timeout = route_policy.request_timeout;
    let protocol = upstream::client::protocol(&done.snapshot, id, entry);
    if protocol != UpstreamProtocol::Http {
        let mut outgoing = outgoing;
        // Upgrades are relayed to plain HTTP/1.1 backends only.
        outgoing.head.websocket = false;
        let snapshot = &*done.snapshot;
        let answer = match upstream::client::target(snapshot, id, protocol, route_policy) {
            Some(target) => {
                let state = &snapshot.backends[id];
                let sending = upstream::client::send(
                    upstreams,
                    state,
                    &target,
                    outgoing,
                    start,
                    header_timeout,
                );
                upstream::within(request_timeout, start, sending).await
            }
            None => Err(upstream::Failure::BadGateway),
        };
        let balancer = &done.snapshot.backends[id].balancer;
        let cookie = answer.as_ref().ok().and_then(|answer| {
            affinity::set_cookie(route_policy, balancer, &preference, answer.endpoint)
        });
        let got = (answer, cookie, upstreams.read_timeout);
        let edits = edits_of(&route_entry.policy);
        return Ok(from_client(
            done,
            grpc,
            host_str,
            got,
            response_fields,
            edits,
        ));
    }
    let mut state = &done.snapshot.backends[id];
    let sending = upstream::send(upstreams, state, outgoing, start, header_timeout);
    let answer = upstream::within(request_timeout, start, sending).await;
    let mut answer = match answer {
        Ok(answer) => answer,
        Err(failure) => return Ok(fail(done, grpc, host_str, failure.status())),
    };
    if let Some(fallback) = route_policy::intercept(route_entry, answer.head.status.as_u16()) {
        // custom-http-errors: this status is answered by the default backend (nginx's
        // error_page internal redirect, which turns the request into a GET).
        state.balancer.release(answer.endpoint);
        let status = answer.head.status.as_u16();
        drop(answer);
        let accept = parts
            .headers
            .get(http::header::ACCEPT)
            .map(HeaderValue::as_bytes);
        let original = parts.uri.path_and_query().map_or("/", PathAndQuery::as_str);
        let fields = route_policy::error_fields(status, accept, original, route_entry);
        let outgoing = Outgoing {
            head: UpstreamRequest {
                // nginx's error_page keeps HEAD and turns every other method into GET.
                method: if parts.method == Method::HEAD {
                    b"HEAD"
                } else {
                    b"GET"
                },
                target: original.as_bytes(),
                host: host.as_bytes(),
                fields: &parts.headers,
                connection_names: connection.names_fields,
                websocket: false,
                http2,
                framing: Framing::None,
                set: &fields,
                vhost: None,
                forwarded_prefix: None,
                add: &[],
                remove: &[],
            },
            forwarded: &ctx.forwarded,
            policy: &ctx.shared.policy,
            body: RequestBody::Empty,
            idempotent: true,
            head_request: parts.method == Method::HEAD,
            retry: &route_policy.next_upstream,
            prefer: None,
            balance: None,
            try_timeout: route_policy.backend_request_timeout,
        };
        done.backend = Some(fallback.id);
        state = &done.snapshot.backends[fallback.id];
        let sending = upstream::send(upstreams, state, outgoing, start, header_timeout);
        answer = match upstream::within(request_timeout, start, sending).await {
            Ok(answer) => answer,
            Err(failure) => return Ok(fail(done, grpc, host_str, failure.status())),
        };
    }
    done.endpoint = Some(answer.endpoint);
    let answer_endpoint = answer.endpoint;
    let upstream::Answer {
        head, conn, addr, ..
    } = answer;
    let status = head.status;
    let mut response = Response::new(());
    *response.status_mut() = status;
    if status.canonical_reason().is_none() {
        // hyper writes `<none>` for a code it has no phrase for: keep the upstream's.
        let reason = hyper::ext::ReasonPhrase::try_from(Bytes::copy_from_slice(head.reason()))
            .unwrap_or_else(|_| hyper::ext::ReasonPhrase::from_static(b"Unknown"));
        response.extensions_mut().insert(reason);
    }
    *response.headers_mut() = match head.header_map() {
        Ok(headers) => headers,
        Err(error) => {
            state.metrics.upstream_error(UpstreamErrorKind::Io);
            tracing::warn!(
                service = %state.metrics.service, upstream = %addr, %error,
                "invalid upstream response"
            );
            return Ok(fail(done, grpc, host_str, StatusCode::BAD_GATEWAY));
        }
    };

    for (name, value) in response_fields {
        // Replaces the upstream's (nginx `more_set_headers`).
        response.headers_mut().insert(name, value);
    }
    route_policy::edit_response(route_policy, response.headers_mut());
    if done.backend == Some(id)
        && let Some(cookie) =
            affinity::set_cookie(route_policy, &state.balancer, &preference, answer_endpoint)
    {
        response
            .headers_mut()
            .append(http::header::SET_COOKIE, cookie);
    }

    if status == StatusCode::SWITCHING_PROTOCOLS {
        let Some(client_upgrade) = client_upgrade else {
            // An upgrade nobody asked for cannot be relayed.
            return Ok(fail(done, grpc, host_str, StatusCode::BAD_GATEWAY));
        };
        websocket::bridge(&done.ctx.shared, client_upgrade, conn);
        done.count(host_str, status.as_u16());
        return Ok(response.map(|()| ResponseBody::fixed(None, done)));
    }

    let body = upstream::body::start(
        conn,
        head.body,
        ReturnTo {
            pool: upstreams.pool,
            addr,
            reusable: head.reusable,
            read_timeout: upstreams.read_timeout,
        },
    );
    done.count(host_str, status.as_u16());
    Ok(response.map(|()| ResponseBody::upstream(body, done)))
}

/// The route's policy when it adds or removes response fields (Gateway API
/// `ResponseHeaderModifier`), for a response built after the request's accounting took the
/// snapshot.
fn edits_of(policy: &Arc<Policy>) -> Option<Arc<Policy>> {
    (!policy.response_headers_add.is_empty() || !policy.response_headers_remove.is_empty())
        .then(|| Arc::clone(policy))
}

/// Routes a request hyper has read (not kept across an await: the header lookup is not
/// `Sync`). `path` is the normalised path.
fn route_by_hyper(
    snapshot: &Snapshot,
    request: &Request<Incoming>,
    host: &str,
    path: &str,
    tls: bool,
) -> Routed {
    let info = RequestInfo {
        https: tls,
        host,
        path,
        query: request.uri().query().unwrap_or(""),
        method: request.method().as_str(),
        headers: &route::MapHeaders(request.headers()),
    };
    route::route(snapshot, &info, |rule| {
        let headers = request.headers();
        let header = rule
            .header
            .as_ref()
            .and_then(|name| headers.get(name))
            .map(HeaderValue::as_bytes);
        let cookies = headers.get_all(http::header::COOKIE).iter();
        let cookie = rule
            .cookie
            .as_deref()
            .and_then(|name| route::cookie(cookies.map(HeaderValue::as_bytes), name));
        rule.chooses(header, cookie, route::roll(rule.weight_total))
    })
}

/// What admission needs to know of a request hyper has read.
fn facts(request: &Request<Incoming>) -> Facts<'_, impl Iterator<Item = &[u8]>> {
    let mut hosts = request.headers().get_all(HOST).iter();
    let host = hosts.next();
    let version = match request.version() {
        Version::HTTP_2 => admit::Version::Http2,
        Version::HTTP_10 | Version::HTTP_09 => admit::Version::Http10,
        _ => admit::Version::Http11,
    };
    Facts {
        method: request.method().as_str().as_bytes(),
        version,
        hosts: usize::from(host.is_some()) + hosts.count(),
        host: host.map(HeaderValue::as_bytes),
        authority: request.uri().authority().map(|a| a.as_str().as_bytes()),
        length_and_chunked: request.headers().contains_key(CONTENT_LENGTH)
            && request.headers().contains_key(TRANSFER_ENCODING),
        via: request
            .headers()
            .get_all(VIA)
            .iter()
            .map(HeaderValue::as_bytes),
    }
}

/// The host the client asked for: `:authority` for HTTP/2 (Host if absent), the Host header
/// for HTTP/1 (the absolute-form authority if absent); empty if neither.
fn request_host(request: &Request<Incoming>) -> HeaderValue {
    let from_authority = || {
        request
            .uri()
            .authority()
            .and_then(|a| HeaderValue::from_str(a.as_str()).ok())
    };
    let from_header = || request.headers().get(HOST).cloned();
    let found = if request.version() == Version::HTTP_2 {
        from_authority().or_else(from_header)
    } else {
        from_header().or_else(from_authority)
    };
    found.unwrap_or_else(|| HeaderValue::from_static(""))
}

/// The request's path and query (for the access log).
fn path_and_query(request: &Request<Incoming>) -> PathAndQuery {
    request
        .uri()
        .path_and_query()
        .cloned()
        .unwrap_or_else(|| PathAndQuery::from_static("/"))
}

/// An answer of the policy stage (redirect, 403, CORS preflight), counted like a page.
fn answered(
    mut done: Completion,
    host: &str,
    answer: route_policy::Answer,
) -> Response<ResponseBody> {
    done.count(host, answer.status.as_u16());
    let bodiless = answer.status == StatusCode::NO_CONTENT;
    let mut response = error_response(answer.status, |page: Bytes| {
        ResponseBody::fixed((!bodiless).then_some(page), done)
    });
    if bodiless {
        response.headers_mut().remove(http::header::CONTENT_TYPE);
    }
    if let Some(location) = answer.location {
        response.headers_mut().insert(LOCATION, location);
    }
    for (name, value) in answer.fields {
        response.headers_mut().insert(name, value);
    }
    response
}

/// An error page, counted in the metrics of the routed backend (or as unrouted).
/// For a gRPC request the failure is answered in gRPC's shape instead (see
/// [`grpc_error`]); the metrics still count the HTTP status.
fn fail(
    mut done: Completion,
    grpc: bool,
    host: &str,
    status: StatusCode,
) -> Response<ResponseBody> {
    done.count(host, status.as_u16());
    if grpc {
        return grpc_error(status, done);
    }
    error_response(status, |page: Bytes| ResponseBody::fixed(Some(page), done))
}

/// A gRPC request (`content-type: application/grpc` or `application/grpc+proto` etc.).
fn is_grpc(request: &Request<Incoming>) -> bool {
    request
        .headers()
        .get(CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"application/grpc"))
}

/// A failure as gRPC clients understand it: HTTP 200 with the status in a trailers-only
/// response (`grpc-status`, `grpc-message`), as Envoy and ingress-nginx answer. The code
/// follows gRPC's "HTTP to gRPC Status Code Mapping" (doc/http-grpc-status-mapping.md):
/// 502, 503 and 504 become UNAVAILABLE (14).
fn grpc_error(status: StatusCode, done: Completion) -> Response<ResponseBody> {
    let code: &'static str = match status.as_u16() {
        400 => "13",
        401 => "16",
        403 => "7",
        404 => "12",
        429 | 502 | 503 | 504 => "14",
        _ => "2",
    };
    let mut response = Response::new(ResponseBody::fixed(None, done));
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/grpc"));
    headers.insert("grpc-status", HeaderValue::from_static(code));
    let message = match status.canonical_reason() {
        Some(reason) => HeaderValue::from_static(reason),
        None => HeaderValue::from_static("upstream error"),
    };
    headers.insert("grpc-message", message);
    response
}

/// The response of an HTTPS, HTTP/2 or gRPC backend ([`upstream_client`]): it streams
/// back with its trailers.
fn from_client(
    mut done: Completion,
    grpc: bool,
    host: &str,
    (answer, cookie, read_timeout): (
        Result<upstream::client::Answer, upstream::Failure>,
        Option<HeaderValue>,
        std::time::Duration,
    ),
    response_fields: Vec<(http::HeaderName, HeaderValue)>,
    edits: Option<Arc<Policy>>,
) -> Response<ResponseBody> {
    let answer = match answer {
        Ok(answer) => answer,
        Err(failure) => return fail(done, grpc, host, failure.status()),
    };
    done.endpoint = Some(answer.endpoint);
    let (mut parts, body) = answer.response.into_parts();
    parts.version = Version::default();
    parts.extensions = http::Extensions::new();
    header_policy::drop_hop_by_hop(&mut parts.headers);
    for (name, value) in response_fields {
        parts.headers.insert(name, value);
    }
    if let Some(edits) = edits {
        route_policy::edit_response(&edits, &mut parts.headers);
    }
    if let Some(cookie) = cookie {
        // Added to the upstream's own cookies, never replacing them.
        parts.headers.append(http::header::SET_COOKIE, cookie);
    }
    let status = parts.status.as_u16();
    done.count(host, status);
    Response::from_parts(parts, ResponseBody::streamed(body, read_timeout, done))
}

//! The hyper front end: requests hyper has read (HTTP/2, HTTP/1.1 with bodies or upgrades,
//! unusual heads) through the [`pipeline`](crate::pipeline), and the answer written as
//! hyper's response: a page, the proxy's own answer, or a backend's response streamed back
//! (a WebSocket bridged when the backend switched protocols).

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use http::header::{
    ACCEPT_ENCODING, CONNECTION, CONTENT_LENGTH, CONTENT_TYPE, HOST, LOCATION, RANGE,
    TRANSFER_ENCODING, UPGRADE, USER_AGENT, VIA,
};
use http::request::Parts;
use http::uri::PathAndQuery;
use http::{HeaderValue, Request, Response, StatusCode, Version};
use http_body::Body as _;
use hyper::body::Incoming;

use crate::body;
use crate::body::upstream::ReturnTo;
use crate::body::{Completion, ResponseBody};
use crate::compress::{self, encoder::Compressing, negotiate};
use crate::context::ConnCtx;
use crate::errors::error_response;
use crate::front::websocket;
use crate::http::header_policy::{self, ConnectionOptions, Framing, UpstreamRequest};
use crate::http::request_fields::RequestFields;
use crate::http::response_head::BodyKind;
use crate::observe::metrics::UpstreamErrorKind;
use crate::pipeline::admit::{self, Facts};
use crate::pipeline::route::Routing;
use crate::pipeline::route_policy;
use crate::pipeline::view::RequestView;
use crate::pipeline::{self, Proxied, Reply};
use crate::upstream;

/// A request hyper has read (its body apart), as the pipeline reads it.
pub(crate) struct HyperRequest {
    /// Method, target, version, fields.
    parts: Parts,
    /// The host the client asked for ([`request_host`]).
    host: HeaderValue,
    /// The `Connection` field's names, as the header policy takes them.
    connection_names: bool,
    /// A WebSocket upgrade to relay.
    websocket: bool,
    /// How the body is framed upstream.
    framing: Framing,
}

impl<'a> RequestView<'a> for &'a HyperRequest {
    fn method(self) -> &'a str {
        self.parts.method.as_str()
    }

    fn host(self) -> &'a str {
        // Hosts hyper accepted are visible ASCII; anything else matches no route.
        self.host.to_str().unwrap_or("")
    }

    fn target(self) -> &'a str {
        self.parts
            .uri
            .path_and_query()
            .map_or("/", PathAndQuery::as_str)
    }

    fn path(self) -> &'a str {
        self.parts.uri.path()
    }

    fn query(self) -> Option<&'a str> {
        self.parts.uri.query()
    }

    fn field(self, name: &[u8]) -> Option<&'a [u8]> {
        let name = std::str::from_utf8(name).ok()?;
        self.parts.headers.get(name).map(HeaderValue::as_bytes)
    }

    fn fields(self) -> RequestFields<'a> {
        RequestFields::Map(&self.parts.headers)
    }

    fn facts(self) -> Facts<'a, impl Iterator<Item = &'a [u8]>> {
        let headers = &self.parts.headers;
        let mut hosts = headers.get_all(HOST).iter();
        let host = hosts.next();
        let version = match self.parts.version {
            Version::HTTP_2 => admit::Version::Http2,
            Version::HTTP_10 | Version::HTTP_09 => admit::Version::Http10,
            _ => admit::Version::Http11,
        };
        Facts {
            method: self.parts.method.as_str().as_bytes(),
            version,
            hosts: usize::from(host.is_some()) + hosts.count(),
            host: host.map(HeaderValue::as_bytes),
            authority: self.parts.uri.authority().map(|a| a.as_str().as_bytes()),
            length_and_chunked: headers.contains_key(CONTENT_LENGTH)
                && headers.contains_key(TRANSFER_ENCODING),
            via: headers.get_all(VIA).iter().map(HeaderValue::as_bytes),
        }
    }

    fn upstream_request(self) -> UpstreamRequest<'a, RequestFields<'a>> {
        UpstreamRequest {
            method: self.parts.method.as_str().as_bytes(),
            target: self.target().as_bytes(),
            host: self.host.as_bytes(),
            fields: RequestFields::Map(&self.parts.headers),
            connection_names: self.connection_names,
            websocket: self.websocket,
            http2: self.parts.version == Version::HTTP_2,
            framing: self.framing,
            set: &[],
            vhost: None,
            forwarded_prefix: None,
            connection: None,
            http10: false,
            add: &[],
            remove: &[],
        }
    }
}

/// Serves one request. Never fails: every problem becomes an error page. `routing`: the
/// request's routing when the own HTTP/1.1 loop made it already (and handed the request
/// over): it is not routed again.
pub(crate) async fn handle(
    ctx: Arc<ConnCtx>,
    request: Request<Incoming>,
    routing: Option<Routing>,
) -> Result<Response<ResponseBody>, Infallible> {
    // nginx's `keepalive_requests` (HTTP/1 only; HTTP/2 has its own limits).
    let last = request.version() < Version::HTTP_2 && ctx.last_request();
    let mut response = respond(ctx, request, routing).await?;
    if last && response.status() != StatusCode::SWITCHING_PROTOCOLS {
        response
            .headers_mut()
            .insert(CONNECTION, HeaderValue::from_static("close"));
    }
    Ok(response)
}

/// The answer to one request.
async fn respond(
    ctx: Arc<ConnCtx>,
    mut request: Request<Incoming>,
    routing: Option<Routing>,
) -> Result<Response<ResponseBody>, Infallible> {
    let start = Instant::now();
    let mut connection = ConnectionOptions::default();
    for value in request.headers().get_all(CONNECTION) {
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
    let (parts, body) = request.into_parts();
    let framing = if body.is_end_stream() {
        // An explicit empty body keeps its `Content-Length: 0` (a bodiless POST needs it).
        if parts.headers.contains_key(CONTENT_LENGTH) {
            Framing::Length(0)
        } else {
            Framing::None
        }
    } else {
        match body.size_hint().exact() {
            Some(length) => Framing::Length(length),
            None => Framing::Chunked,
        }
    };
    let host = request_host(&parts);
    let request = HyperRequest {
        parts,
        host,
        connection_names: connection.names_fields,
        websocket,
        framing,
    };
    let request = &request;
    let grpc = request.grpc();
    let arrived = pipeline::arrive(&ctx, request, routing);
    let (done, reply) = pipeline::run(&ctx, request, arrived, Some(body), start).await;
    let host = request.host();
    let proxied = match reply {
        Reply::Page(status) => return Ok(fail(done, grpc, host, status)),
        Reply::Answer(answer) => return Ok(answered(done, host, answer)),
        Reply::Client(proxied) => {
            let asked = asked(&done, &request.parts);
            return Ok(from_client(done, host, proxied, asked));
        }
        Reply::Upstream(proxied) => proxied,
    };
    let asked = asked(&done, &request.parts);
    Ok(from_upstream(
        done,
        grpc,
        host,
        proxied,
        client_upgrade,
        asked,
    ))
}

/// The request half of compression: `None` when the route's response cannot be
/// compressed for this request (nothing is parsed when compression is off).
fn asked(done: &Completion, request: &Parts) -> Option<negotiate::Asked> {
    let settings = &done.snapshot.settings.compression;
    let route = done
        .entry
        .and_then(|entry| done.snapshot.table.entry(entry).policy.compression);
    if route.is_none() && !settings.any_enabled() {
        return None;
    }
    let headers = &request.headers;
    let facts = negotiate::RequestFacts {
        head: request.method == http::Method::HEAD,
        http10: request.version < Version::HTTP_11,
        range: headers.contains_key(RANGE),
        user_agent: headers.get(USER_AGENT).map(HeaderValue::as_bytes),
    };
    let accept = headers
        .get_all(ACCEPT_ENCODING)
        .iter()
        .map(HeaderValue::as_bytes);
    negotiate::asked(settings, route, facts, accept)
}

/// The response half: edits `headers` for the coding chosen (or only `Vary`) and returns
/// the encoder for the body.
fn compression(
    done: &Completion,
    asked: Option<negotiate::Asked>,
    status: StatusCode,
    headers: &mut http::HeaderMap,
    length: Option<u64>,
) -> Option<Compressing> {
    let asked = asked?;
    let settings = &done.snapshot.settings.compression;
    let fields = headers
        .iter()
        .map(|(name, value)| (name.as_str().as_bytes(), value.as_bytes()));
    let facts = compress::facts_of(status.as_u16(), fields, length);
    let mut outcome = negotiate::outcome(settings, &asked, facts);
    let encoder = outcome
        .coding
        .and_then(|coding| Compressing::new(coding, settings).ok());
    match (&encoder, outcome.coding) {
        (Some(_), Some(coding)) => done.ctx.shared.metrics.compressed(coding),
        _ => outcome.coding = None,
    }
    compress::edit_headers(headers, outcome);
    encoder
}

/// The response of a plain HTTP/1.1 backend: its head with the edits, the body streamed
/// back; a WebSocket bridged when the backend switched protocols for a client that asked.
fn from_upstream(
    mut done: Completion,
    grpc: bool,
    host: &str,
    proxied: Proxied<upstream::Answer>,
    client_upgrade: Option<hyper::upgrade::OnUpgrade>,
    asked: Option<negotiate::Asked>,
) -> Response<ResponseBody> {
    let upstream::Answer {
        response: upstream::Response { head, conn },
        addr,
        ..
    } = proxied.answer;
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
            if let Some(backend) = done.backend {
                let state = &done.snapshot.backends[backend];
                state.metrics.upstream_error(UpstreamErrorKind::Io);
                tracing::warn!(
                    service = %state.metrics.service, upstream = %addr, %error,
                    "invalid upstream response"
                );
            }
            return fail(done, grpc, host, StatusCode::BAD_GATEWAY);
        }
    };
    let edits = proxied.edits;
    edits
        .resolve(&done.snapshot, status.as_u16())
        .apply(response.headers_mut());

    if status == StatusCode::SWITCHING_PROTOCOLS {
        let Some(client_upgrade) = client_upgrade else {
            // An upgrade nobody asked for cannot be relayed.
            return fail(done, grpc, host, StatusCode::BAD_GATEWAY);
        };
        websocket::bridge(&done.ctx.shared, client_upgrade, conn);
        done.count(host, status.as_u16());
        return response.map(|()| ResponseBody::fixed(None, done));
    }

    let length = match head.body {
        BodyKind::Length(length) => Some(length),
        BodyKind::Empty => Some(0),
        BodyKind::Chunked | BodyKind::UntilClose => None,
    };
    let encoder = compression(&done, asked, status, response.headers_mut(), length);
    let body = body::upstream::start(
        conn,
        head.body,
        ReturnTo {
            pool: done.snapshot.settings.pool(done.ctx.shared.upstreams.pool),
            addr,
            reusable: head.reusable,
            read_timeout: proxied.read_timeout,
        },
        // `proxy-buffering: "on"`: read ahead of the client.
        done.entry
            .and_then(|entry| done.snapshot.table.entry(entry).policy.response_buffer),
    );
    done.count(host, status.as_u16());
    response.map(|()| ResponseBody::upstream(body, done).compressed(encoder))
}

/// The host the client asked for: `:authority` for HTTP/2 (Host if absent), the Host header
/// for HTTP/1 (the absolute-form authority if absent); empty if neither.
fn request_host(request: &Parts) -> HeaderValue {
    let from_authority = || {
        request
            .uri
            .authority()
            .and_then(|a| HeaderValue::from_str(a.as_str()).ok())
    };
    let from_header = || request.headers.get(HOST).cloned();
    let found = if request.version == Version::HTTP_2 {
        from_authority().or_else(from_header)
    } else {
        from_header().or_else(from_authority)
    };
    found.unwrap_or_else(|| HeaderValue::from_static(""))
}

/// An answer of the policy stage (redirect, 403, CORS preflight), counted like a page.
fn answered(
    mut done: Completion,
    host: &str,
    answer: route_policy::Answer,
) -> Response<ResponseBody> {
    done.count(host, answer.status.as_u16());
    let bodiless = answer.status == StatusCode::NO_CONTENT;
    // A snippet's `return` text, else the proxy's page.
    let text = answer.body;
    let mut response = error_response(answer.status, |page: Bytes| {
        ResponseBody::fixed((!bodiless).then_some(text.unwrap_or(page)), done)
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

/// The response of an HTTPS, HTTP/2 or gRPC backend ([`upstream::client`]): it streams
/// back with its trailers.
fn from_client(
    mut done: Completion,
    host: &str,
    proxied: Proxied<upstream::client::Answer>,
    asked: Option<negotiate::Asked>,
) -> Response<ResponseBody> {
    let (mut parts, body) = proxied.answer.response.into_parts();
    parts.version = Version::default();
    parts.extensions = http::Extensions::new();
    header_policy::drop_hop_by_hop(&mut parts.headers);
    proxied
        .edits
        .resolve(&done.snapshot, parts.status.as_u16())
        .apply(&mut parts.headers);
    let length = body.size_hint().exact();
    let encoder = compression(&done, asked, parts.status, &mut parts.headers, length);
    let status = parts.status.as_u16();
    done.count(host, status);
    let read_timeout = proxied.read_timeout;
    let body = ResponseBody::streamed(body, read_timeout, done).compressed(encoder);
    Response::from_parts(parts, body)
}

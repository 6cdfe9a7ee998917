//! The phases every request passes, written once for both front ends: a front end parses a
//! head into a [`RequestView`](view::RequestView), calls [`run`], and writes the
//! [`Reply`]. In order:
//!
//! 1. `admit`: what a well-formed head may still not ask for, and the path as nginx
//!    normalises it before matching.
//! 2. `route`: the request to a route entry and a backend of the current snapshot (one
//!    atomic load); a canary or a weighted split is drawn here, once. A request the own
//!    loop hands to hyper carries this routing.
//! 3. `decision`: the route's own answers (`route_policy`), its snippets' request-time rules
//!    (`snippet`: `return`, `rewrite`, fields with variables), its fixed status, the rewrite,
//!    the rate limits (their state in `crate::rate_limit`) and the response fields: answer
//!    now, or forward; then the global rate limit (`crate::global_rate_limit`, a store
//!    shared by the replicas).
//! 4. `client_cert`, `basic_auth`, `digest_auth` and `auth`: the host's client
//!    certificate check (`auth-tls-*`), basic or digest authentication from a Secret, and
//!    the external auth service (`auth-url`), when the route has them.
//! 5. `outgoing`: the upstream request, built in one place (`affinity` picks the preferred
//!    endpoint; `http::header_policy` decides which fields cross, both directions); `mirror`
//!    sends copies.
//! 6. `exchange`: the upstream step ([`upstream`](crate::upstream)) within the route's
//!    timeouts, and the custom-error intercept.
//! 7. `response_edits`: what the response head gets on its way out, applied by the
//!    front end's writer.

pub(crate) mod admit;
pub(crate) mod affinity;
pub(crate) mod auth;
pub(crate) mod basic_auth;
pub(crate) mod client_cert;
pub(crate) mod cookie;
pub(crate) mod decision;
pub(crate) mod digest_auth;
pub(crate) mod digest_nonce;
pub(crate) mod exchange;
pub(crate) mod mirror;
pub(crate) mod outgoing;
pub(crate) mod response_edits;
pub(crate) mod route;
pub(crate) mod route_policy;
pub(crate) mod snippet;
pub(crate) mod view;

use std::borrow::Cow;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use http::uri::PathAndQuery;
use http::{HeaderValue, Method, StatusCode};
use http_body::Body as _;
use hyper::body::Incoming;
use sluice_routing::UpstreamProtocol;

use crate::body::{Completion, RequestBody};
use crate::context::ConnCtx;
use crate::observe::access_log::{AccessFormat, Captured, LogRecord};
use crate::pipeline::decision::{Decision, Forward, decide, destination};
use crate::pipeline::response_edits::Edits;
use crate::pipeline::route::{Routed, Routing};
use crate::pipeline::view::RequestView;
use crate::upstream;

/// A request through phases 1 and 2: admitted or refused, and routed.
pub(crate) struct Arrived<'r> {
    /// The path matching and every policy see (nginx's normalised `$uri`), or why the
    /// request is refused.
    path: Result<Cow<'r, str>, admit::Refusal>,
    /// The routing, made once.
    pub(crate) routing: Routing,
}

impl Arrived<'_> {
    /// Whether the route's answer comes from hyper's client (HTTPS, h2c and gRPC
    /// backends), which only the hyper front end writes: the own loop hands the request
    /// over with its routing then.
    pub(crate) fn needs_hyper(&self) -> bool {
        match self.routing.routed {
            Routed::Backend { backend, entry } => {
                route::needs_hyper(&self.routing.snapshot, backend, entry)
            }
            _ => false,
        }
    }
}

/// Phases 1 and 2: admission, and routing on the current snapshot (one atomic load), or
/// the `routing` the own loop made before it handed the request over.
pub(crate) fn arrive<'r, V: RequestView<'r>>(
    ctx: &ConnCtx,
    request: V,
    routing: Option<Routing>,
) -> Arrived<'r> {
    // Matching and every policy see the normalised path; upstream gets the target as
    // sent (unless rewritten).
    let Some(routing) = routing else {
        let snapshot = ctx.shared.table.snapshot();
        let path = admit::admit(request.facts(), &snapshot.settings.policy)
            .and_then(|()| admit::request_path(request.path()));
        let normalized = path.as_deref().unwrap_or("/");
        let routed = route::lookup(
            &snapshot,
            request,
            normalized,
            ctx.tls,
            ctx.gateway,
            ctx.sni.as_deref(),
        );
        let routing = Routing { snapshot, routed };
        return Arrived { path, routing };
    };
    let path = admit::admit(request.facts(), &routing.snapshot.settings.policy)
        .and_then(|()| admit::request_path(request.path()));
    Arrived { path, routing }
}

/// What the front end writes.
// Moved once, from the pipeline to the writer: boxing the large variant would cost an
// allocation per proxied request instead.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Reply {
    /// The proxy's page for this status (gRPC's shape for a gRPC request).
    Page(StatusCode),
    /// The proxy's own answer (a refusal, a redirect, a CORS preflight).
    Answer(route_policy::Answer),
    /// A plain HTTP/1.1 backend's response head; its body follows on the connection.
    Upstream(Proxied<upstream::Answer>),
    /// The response of a backend behind hyper's client (HTTPS, h2c, gRPC).
    Client(Proxied<upstream::client::Answer>),
}

/// A backend's answer with what its head gets on the way out.
pub(crate) struct Proxied<A> {
    /// The answer.
    pub(crate) answer: A,
    /// The response's edits.
    pub(crate) edits: Edits,
    /// Longest wait between two reads of the body (the route's `proxy-read-timeout`).
    pub(crate) read_timeout: Duration,
}

/// Phases 3 to 7 for a request that `arrived` at `start`, with its `body` (hyper only):
/// the answer to write, and the request's books (they account for it when dropped).
pub(crate) async fn run<'r, V: RequestView<'r>>(
    ctx: &Arc<ConnCtx>,
    request: V,
    arrived: Arrived<'r>,
    body: Option<Incoming>,
    start: Instant,
) -> (Completion, Reply) {
    let shared = &ctx.shared;
    let Arrived { path, routing } = arrived;
    let Routing { snapshot, routed } = routing;
    // Read from the snapshot the request holds anyway: the ConfigMap's keys over the flags.
    let settings = Arc::clone(&snapshot.settings);
    let client = client_address(&settings, ctx.peer.ip(), request);
    let log = (settings.access_log && shared.access_log.is_some()).then(|| {
        let format = settings.access_log_format.as_ref();
        Box::new(log_record(
            request,
            client,
            ctx,
            format,
            path.as_deref().ok(),
        ))
    });
    // The request's books own the connection and snapshot references from here on, and
    // account for it when dropped, on every path.
    let mut done = Completion::new(Arc::clone(ctx), snapshot, start, log);
    done.method = crate::observe::metrics::method_index(request.method().as_bytes());
    done.request_bytes = request.declared_length();
    let path = match &path {
        Ok(path) => &**path,
        Err(refusal) => {
            tracing::debug!(peer = %ctx.peer, ?refusal, "request refused");
            return (done, Reply::Page(refusal.status()));
        }
    };
    let (id, entry, fixed) = match destination(routed, &mut done.backend, &mut done.entry) {
        Ok(destination) => destination,
        Err(status) => return (done, Reply::Page(status)),
    };
    let route_entry = done.snapshot.table.entry(entry);
    let route_policy = &*route_entry.policy;
    if route_policy.access_log_off {
        // `enable-access-log: "false"`.
        done.log = None;
    }
    // Tracing: off, this is the one branch a request pays.
    if let Some(tracer) = &done.snapshot.tracer
        && tracer.traces(route_policy.opentelemetry)
    {
        done.trace = Some(tracer.start(&crate::trace::Started {
            method: request.method(),
            host: request.host(),
            uri: path,
            route: &route_entry.source,
            service: &done.snapshot.backends[id].metrics.service,
            traceparent: request.field(b"traceparent"),
            tracestate: request.field(b"tracestate"),
            trust: route_policy.opentelemetry_trust_incoming_span,
        }));
    }

    // The host's client certificate check (nginx checks it in the `server`, before any
    // location): only on the shared HTTPS listener, where `auth-tls-*` hosts are served.
    let mut auth_fields = Vec::new();
    // The auth service's `Set-Cookie` values, for the response.
    let mut auth_cookies = Vec::new();
    if ctx.tls
        && ctx.gateway.is_none()
        && let Some(auth) = done.snapshot.table.client_cert_auth(request.host())
    {
        let verifier = done.snapshot.client_cert_verifier(auth);
        let shown = ctx.client_certificates.as_deref().unwrap_or_default();
        match client_cert::check(auth, verifier, shown) {
            client_cert::Verdict::Allow(fields) => auth_fields.extend(fields),
            client_cert::Verdict::Deny(answer) => return (done, Reply::Answer(answer)),
        }
    }

    // 3. The route's own answers, rewrite, limits.
    let cors = route_policy.cors.is_some();
    let facts = route_policy::Request {
        tls: ctx.tls,
        method: request.method().as_bytes(),
        host: request.host(),
        path,
        target: request.target(),
        client,
        // Only a CORS route looks at these: no field walk per request otherwise.
        origin: cors.then(|| request.field(b"origin")).flatten(),
        asked_method: cors
            .then(|| request.field(b"access-control-request-method"))
            .flatten(),
        asked_headers: cors
            .then(|| request.field(b"access-control-request-headers"))
            .flatten(),
        user_agent: (!route_policy.block_user_agents.is_empty())
            .then(|| request.field(b"user-agent"))
            .flatten(),
        referer: (!route_policy.block_referers.is_empty())
            .then(|| request.field(b"referer"))
            .flatten(),
    };
    // The route's snippets (`configuration-snippet`, `server-snippet`): one pure run, only
    // for routes that have request-time rules.
    let mut snippet_outcome = route_policy
        .snippet
        .as_deref()
        .map(|rules| snippet::run(rules, request, path, ctx.tls, facts.client));
    let snippet_request = snippet_outcome
        .as_mut()
        .map(|o| std::mem::take(&mut o.request_set))
        .unwrap_or_default();
    let decided = decide(
        ctx,
        &settings,
        route_entry,
        &facts,
        fixed,
        start,
        snippet_outcome.as_mut(),
    );
    let Forward {
        limit_slot,
        rewritten,
        response_fields,
        snippet_response,
    } = match decided {
        Decision::Forward(forward) => forward,
        Decision::Page(status) => return (done, Reply::Page(status)),
        Decision::Answer(answer) => return (done, Reply::Answer(answer)),
    };
    done.limit_slot = limit_slot;
    // The global rate limit (one store round trip at most), after the local limits: a
    // request they refuse never costs a store command.
    if let (Some(limit), Some(store)) =
        (&route_policy.global_rate_limit, &done.snapshot.global_store)
    {
        let sample = crate::global_rate_limit::key::Request {
            client: facts.client,
            host: facts.host,
            path,
            field: |name: &[u8]| request.field(name),
        };
        // Boxed: only routes with a global limit pay for the larger future.
        if let Some(status) = Box::pin(shared.global_limiter.check(store, limit, &sample)).await {
            // The ConfigMap's `global-rate-limit-status-code` over the flag's.
            let status = settings.global_rate_limit_status.unwrap_or(status);
            return (done, Reply::Page(status));
        }
    }

    // 4. Authentication: basic or digest, then external. With `satisfy: any`, a client
    // the source ranges allow needs neither (`route_policy::answer` left the ranges to
    // this step).
    let range_suffices =
        route_policy.satisfy_any && route_policy::source_range_allows(route_policy, facts.client);
    if let Some(basic) = route_policy.basic_auth.as_ref().filter(|_| !range_suffices) {
        match Box::pin(basic_auth::check(basic, request.field(b"authorization"))).await {
            basic_auth::Verdict::Allow => {
                auth_fields.push((http::header::AUTHORIZATION, HeaderValue::from_static("")));
            }
            basic_auth::Verdict::Deny(answer) => return (done, Reply::Answer(answer)),
            basic_auth::Verdict::Fail(status) => return (done, Reply::Page(status)),
        }
    }
    if let Some(digest) = route_policy
        .digest_auth
        .as_ref()
        .filter(|_| !range_suffices)
    {
        let asked = digest_auth::Asked {
            method: request.method(),
            target: request.target(),
            authorization: request.field(b"authorization"),
            now: SystemTime::now()
                .duration_since(SystemTime::UNIX_EPOCH)
                .map_or(0, |since| since.as_secs()),
        };
        match digest_auth::check(digest, &asked) {
            basic_auth::Verdict::Allow => {
                auth_fields.push((http::header::AUTHORIZATION, HeaderValue::from_static("")));
            }
            basic_auth::Verdict::Deny(answer) => return (done, Reply::Answer(answer)),
            basic_auth::Verdict::Fail(status) => return (done, Reply::Page(status)),
        }
    }
    if let Some(external) = route_policy.auth.as_ref().filter(|_| !range_suffices) {
        let sample = crate::global_rate_limit::key::Request {
            client: facts.client,
            host: facts.host,
            path,
            field: |name: &[u8]| request.field(name),
        };
        let original = auth::Original {
            method: request.method(),
            fields: request.fields(),
            scheme: if ctx.tls { "https" } else { "http" },
            host: request.host(),
            uri: request.target(),
            client: facts.client,
            cache_key: external.cache.as_ref().map(|cache| {
                let expanded = crate::global_rate_limit::key::expand_template(&cache.key, &sample);
                let host = crate::global_rate_limit::key::host_without_port(facts.host);
                crate::auth_cache::key(&cache.location, host, &expanded)
            }),
            // `auth-proxy-set-headers`, expanded for this request.
            set_fields: external
                .proxy_set_headers
                .iter()
                .map(|(name, parts)| {
                    let value = crate::global_rate_limit::key::expand_template(parts, &sample);
                    (name, value)
                })
                .collect(),
        };
        // Boxed: a rare branch, kept out of every request's future.
        match Box::pin(auth::check(external, shared, &done.snapshot, &original)).await {
            auth::Verdict::Allow(fields, cookies) => {
                auth_fields.extend(fields);
                auth_cookies = cookies;
            }
            auth::Verdict::Deny(answer) => return (done, Reply::Answer(answer)),
            auth::Verdict::Fail(status) => return (done, Reply::Page(status)),
        }
    }

    // 5. The upstream request.
    let body_limit = match route_policy.body_limit {
        Some(0) => None,
        Some(limit) => Some(limit),
        None => shared.body_limit,
    };
    let mut body = match body {
        Some(body) if body.size_hint().lower() > body_limit.unwrap_or(u64::MAX) => {
            return (done, Reply::Page(StatusCode::PAYLOAD_TOO_LARGE));
        }
        Some(body) if !body.is_end_stream() => {
            RequestBody::streaming(body, body_limit, settings.client_body_timeout)
        }
        _ => RequestBody::Empty,
    };
    // `proxy-request-buffering: "on"`: the whole body is read (within the body limit and
    // the client body timeout) before the upstream is asked, and sent with its length.
    let mut buffered = None;
    // HTTP/1.0 towards the upstream (`proxy-http-version`) has no chunked coding: nginx
    // buffers the body then too.
    // `mirror-request-body: on` too: nginx reads the whole body before the copies start.
    let mirror_body = route_policy.mirror_request_body && !route_entry.mirrors.is_empty();
    let buffer = route_policy.request_buffering || route_policy.upstream_http10 || mirror_body;
    // The body the copies carry (shared with the upstream request, not copied).
    let mut copied_body = None;
    if buffer && matches!(body, RequestBody::Streaming { .. }) {
        match Box::pin(http_body_util::BodyExt::collect(body)).await {
            Ok(collected) => {
                let bytes = collected.to_bytes();
                buffered = Some(bytes.len() as u64);
                if mirror_body {
                    copied_body = Some(bytes.clone());
                }
                body = RequestBody::Buffered(Some(bytes));
            }
            Err(error) => {
                let status = if error.is::<crate::body::BodyTooLarge>() {
                    StatusCode::PAYLOAD_TOO_LARGE
                } else if error.is::<crate::body::ClientBodyTimeout>() {
                    StatusCode::REQUEST_TIMEOUT
                } else {
                    StatusCode::BAD_REQUEST
                };
                return (done, Reply::Page(status));
            }
        }
    }
    let mut request_set = outgoing::request_fields(&route_policy.request_headers, auth_fields);
    if !snippet_request.is_empty() {
        // `proxy_set_header` with variables: set like the route's constant fields.
        let set = request_set.to_mut();
        set.retain(|(name, _)| !snippet_request.iter().any(|(n, _)| n == name));
        set.extend(snippet_request);
    }
    if let Some(span) = &done.trace {
        // The backend's spans are children of this request's.
        request_set.to_mut().extend(span.fields());
    }
    let balancer = &done.snapshot.backends[id].balancer;
    let side = affinity::Side::of(route_entry, id);
    let preference = if route_policy.affinity.is_some() || route_policy.hash_by.is_some() {
        let now = crate::backend::balancer::now_millis(start);
        affinity::preference(route_policy, balancer, now, request, facts.client, side)
    } else {
        affinity::Preference::default()
    };
    let sending = outgoing::Sending {
        ctx,
        settings: &settings,
        route_policy,
        target: rewritten.as_deref(),
        set: &request_set,
        prefer: preference.endpoint,
    };
    let mut outgoing = sending.request(request, body);
    if let Some(length) = buffered {
        outgoing.head.framing = crate::http::header_policy::Framing::Length(length);
    }
    let mut upstreams = route_policy::upstreams(&shared.upstreams, route_policy);
    // The ConfigMap's `upstream-keepalive-*` (the flags' `--idle-timeout` otherwise).
    upstreams.pool = settings.pool(upstreams.pool);
    let upstreams = &upstreams;
    let header_timeout = route_policy::header_timeout(route_policy, shared.upstream_header_timeout);
    if !route_entry.mirrors.is_empty() {
        let copying = mirror::Copying {
            forwarded: &ctx.forwarded,
            policy: &settings.policy,
            metrics: &shared.metrics,
            connect_timeout: upstreams.connect_timeout,
            deadline: header_timeout,
            host: route_policy.mirror_host.as_ref(),
            body: copied_body.as_ref(),
        };
        mirror::copy(&route_entry.mirrors, &outgoing.head, &copying);
    }

    // 6. The upstream step.
    let step = exchange::Step {
        upstreams,
        header_timeout,
        request_timeout: route_policy.request_timeout,
        start,
    };
    // What either transport's answer gets on its way out.
    let read_timeout = upstreams.read_timeout;
    let auth_cookies_always = route_policy
        .auth
        .as_ref()
        .is_some_and(|auth| auth.always_set_cookie);
    let edits = move |cookie: Option<HeaderValue>| {
        let mut cookies: Vec<HeaderValue> = cookie.into_iter().collect();
        let auth_cookies_sent = auth_cookies.len();
        cookies.extend(auth_cookies);
        Edits {
            set: response_fields,
            entry,
            cookies,
            auth_cookies: auth_cookies_sent,
            auth_cookies_always,
            snippet: snippet_response,
        }
    };
    let protocol = upstream::client::protocol(&done.snapshot, id, entry);
    let asked = done.trace.as_ref().map(|_| Instant::now());
    if protocol != UpstreamProtocol::Http {
        // Boxed: the own loop never takes this branch (it hands such requests to hyper),
        // and its future would otherwise size every request's.
        let answer =
            Box::pin(step.client(&done.snapshot, id, protocol, route_policy, outgoing)).await;
        let answer = match answer {
            Ok(answer) => answer,
            Err(failure) => return (done, Reply::Page(failure.status())),
        };
        done.endpoint = Some(answer.endpoint);
        if let (Some(span), Some(asked)) = (&mut done.trace, asked) {
            span.upstream_answered(asked.elapsed());
        }
        let cookie = side
            .affinity()
            .then(|| affinity::set_cookie(route_policy, balancer, &preference, answer.endpoint))
            .flatten();
        let edits = edits(cookie);
        let proxied = Proxied {
            answer,
            edits,
            read_timeout,
        };
        return (done, Reply::Client(proxied));
    }
    let answer = step
        .http1(&done.snapshot, id, route_entry, outgoing, request, &sending)
        .await;
    let (answer, from) = match answer {
        Ok(answered) => answered,
        Err((failure, from)) => {
            done.backend = Some(from);
            return (done, Reply::Page(failure.status()));
        }
    };
    done.backend = Some(from);
    done.endpoint = Some(answer.endpoint);
    if let (Some(span), Some(asked)) = (&mut done.trace, asked) {
        span.upstream_answered(asked.elapsed());
    }
    // The affinity cookie names an endpoint of the route's own backend only.
    let cookie = (from == id && side.affinity())
        .then(|| affinity::set_cookie(route_policy, balancer, &preference, answer.endpoint))
        .flatten();
    let edits = edits(cookie);
    let proxied = Proxied {
        answer,
        edits,
        read_timeout,
    };
    (done, Reply::Upstream(proxied))
}

/// The access log's record of a request.
/// The client's address as the route's policies, limits and log see it: nginx's realip
/// `$remote_addr` (the peer, or the client a trusted peer names).
fn client_address<'r, V: RequestView<'r>>(
    settings: &crate::settings::Settings,
    peer: std::net::IpAddr,
    request: V,
) -> std::net::IpAddr {
    use crate::http::header_policy::Fields as _;
    let name = settings.policy.forwarded_for.as_str().as_bytes();
    let values = request
        .fields()
        .iter()
        .filter(move |(field, _)| field.eq_ignore_ascii_case(name))
        .map(|(_, value)| value);
    settings.policy.client_address(peer, values)
}

/// The access log's record of a request, with what `format` needs of it.
fn log_record<'r, V: RequestView<'r>>(
    request: V,
    client: std::net::IpAddr,
    ctx: &ConnCtx,
    format: Option<&Arc<AccessFormat>>,
    uri: Option<&str>,
) -> LogRecord {
    LogRecord {
        time: SystemTime::now(),
        client,
        method: Method::from_bytes(request.method().as_bytes()).unwrap_or(Method::GET),
        host: HeaderValue::from_str(request.host()).unwrap_or(HeaderValue::from_static("")),
        path: PathAndQuery::try_from(request.target())
            .unwrap_or_else(|_| PathAndQuery::from_static("/")),
        captured: format.map(|format| Box::new(captured(request, ctx, format, uri))),
    }
}

/// What `log-format-upstream` needs of the request, and only that (the format says which).
fn captured<'r, V: RequestView<'r>>(
    request: V,
    ctx: &ConnCtx,
    format: &Arc<AccessFormat>,
    uri: Option<&str>,
) -> Captured {
    use crate::http::header_policy::Fields as _;
    let facts = request.facts();
    let version = match facts.version {
        admit::Version::Http10 => http::Version::HTTP_10,
        admit::Version::Http11 => http::Version::HTTP_11,
        admit::Version::Http2 => http::Version::HTTP_2,
    };
    let fields = format
        .fields
        .iter()
        .map(|name| {
            let mut joined: Option<Vec<u8>> = None;
            for (field, value) in request.fields().iter() {
                if field.eq_ignore_ascii_case(name.as_bytes()) {
                    let out = joined.get_or_insert_with(Vec::new);
                    if !out.is_empty() {
                        out.extend_from_slice(b", ");
                    }
                    out.extend_from_slice(value);
                }
            }
            joined.map(Vec::into_boxed_slice)
        })
        .collect();
    // nginx's `$request_length`: the request line, the fields and the body.
    let request_length = if format.keeps_length {
        let line = request.method().len() + request.target().len() + 12;
        let head: usize = request
            .fields()
            .iter()
            .map(|(name, value)| name.len() + value.len() + 4)
            .sum();
        (line + head + 2) as u64 + request.declared_length()
    } else {
        0
    };
    Captured {
        format: Arc::clone(format),
        tls: ctx.tls,
        version,
        remote_port: ctx.peer.port(),
        server_port: ctx
            .forwarded
            .port
            .to_str()
            .ok()
            .and_then(|p| p.parse().ok())
            .unwrap_or(0),
        tls_names: ctx.tls_names,
        uri: format.keeps_uri.then(|| uri.map(Into::into)).flatten(),
        // nginx's `$remote_user`: the user an `Authorization: Basic` field names.
        user: format
            .keeps_user
            .then(|| request.field(b"authorization"))
            .flatten()
            .and_then(sluice_routing::basic_credentials)
            .map(|(user, _)| user.into()),
        // ingress-nginx's `$req_id`: `X-Request-ID` when sent, else a new id.
        req_id: format.keeps_req_id.then(|| request_id(request)),
        request_length,
        fields,
    }
}

/// The client's `X-Request-ID`, or 32 random hex digits (nginx's `$request_id`).
fn request_id<'r, V: RequestView<'r>>(request: V) -> Box<str> {
    use ring::rand::{SecureRandom as _, SystemRandom};
    if let Some(id) = request
        .field(b"x-request-id")
        .filter(|id| !id.is_empty())
        .and_then(|id| std::str::from_utf8(id).ok())
    {
        return id.into();
    }
    let mut bytes = [0u8; 16];
    let _ = SystemRandom::new().fill(&mut bytes);
    bytes
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect::<String>()
        .into()
}

//! The request path: route, rewrite headers, send upstream, stream the answer back.
//!
//! Per request: one snapshot load, a route lookup, a few header inserts, and the upstream
//! round trip. Everything that can be prepared earlier is: per connection (client IP and
//! port header values), per snapshot (balancer state, metric labels).

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use bytes::Bytes;
use http::header::{CONTENT_LENGTH, HOST};
use http::uri::PathAndQuery;
use http::{HeaderValue, Method, Request, Response, StatusCode, Version};
use http_body::Body as _;
use hyper::body::Incoming;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::access_log::{AccessLog, LogRecord};
use crate::body::{Completion, RequestBody, ResponseBody};
use crate::errors::error_response;
use crate::headers::{self, Forwarded, Framing, RequestHead};
use crate::metrics::{Metrics, UpstreamErrorKind};
use crate::snapshot::TableShared;
use crate::upstream::{self, Failure, HeadSource, Outgoing, Upstreams};
use crate::upstream_body::{self, ReturnTo};
use crate::websocket;

/// Everything requests share, for the whole life of the proxy.
#[derive(Debug)]
pub(crate) struct Shared {
    /// The swappable routing snapshot.
    pub(crate) table: Arc<TableShared>,
    /// How upstreams are reached (pool, connect timeout).
    pub(crate) upstreams: Upstreams,
    /// Metric families.
    pub(crate) metrics: Arc<Metrics>,
    /// The access log, when enabled.
    pub(crate) access_log: Option<AccessLog>,
    /// `--upstream-header-timeout`.
    pub(crate) upstream_header_timeout: Duration,
    /// `--max-body-bytes` (`None`: unlimited).
    pub(crate) body_limit: Option<u64>,
    /// Upgraded (WebSocket) tunnels, so shutdown can wait for and then cut them.
    pub(crate) tunnels: TaskTracker,
    /// Cancelled when tunnels must close.
    pub(crate) tunnels_stop: CancellationToken,
}

/// One client connection.
#[derive(Debug)]
pub(crate) struct ConnCtx {
    /// Proxy-wide state.
    pub(crate) shared: Arc<Shared>,
    /// The client's address.
    pub(crate) peer: SocketAddr,
    /// Forwarding header values of this connection.
    pub(crate) forwarded: Forwarded,
}

/// Serves one request. Never fails: every problem becomes an error page.
pub(crate) async fn handle(
    ctx: Arc<ConnCtx>,
    mut request: Request<Incoming>,
) -> Result<Response<ResponseBody>, Infallible> {
    let start = Instant::now();
    let snapshot = ctx.shared.table.current.load_full();

    let host = request_host(&request);
    let host_str = host.to_str().unwrap_or("");
    let backend = snapshot
        .table
        .route(host_str, request.uri().path())
        .map(|backend| (backend.id, backend.endpoints.is_empty()));
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
    let ctx = &*done.ctx;
    let Some((id, no_endpoints)) = backend else {
        return Ok(fail(done, host_str, StatusCode::NOT_FOUND));
    };
    done.backend = Some(id);
    if no_endpoints {
        return Ok(fail(done, host_str, StatusCode::SERVICE_UNAVAILABLE));
    }
    if let Some(limit) = ctx.shared.body_limit
        && request.body().size_hint().lower() > limit
    {
        return Ok(fail(done, host_str, StatusCode::PAYLOAD_TOO_LARGE));
    }

    let upgrading =
        request.version() == Version::HTTP_11 && headers::wants_upgrade(request.headers());
    let client_upgrade = upgrading.then(|| hyper::upgrade::on(&mut request));

    let http2 = request.version() == Version::HTTP_2;
    let (parts, body) = request.into_parts();
    let body = if body.is_end_stream() {
        RequestBody::Empty
    } else {
        RequestBody::streaming(body, ctx.shared.body_limit)
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
    let root = PathAndQuery::from_static("/");
    let path = parts.uri.path_and_query().unwrap_or(&root);
    let outgoing = Outgoing {
        head: HeadSource::Map(RequestHead {
            method: &parts.method,
            path,
            headers: &parts.headers,
            host: &host,
            forwarded: &ctx.forwarded,
            upgrading,
            http2,
            framing,
        }),
        body,
        idempotent: matches!(
            parts.method,
            Method::GET | Method::HEAD | Method::OPTIONS | Method::TRACE
        ),
        head_request: parts.method == Method::HEAD,
    };

    let state = &done.snapshot.backends[id];
    let answer = upstream::send(
        &ctx.shared.upstreams,
        state,
        outgoing,
        start,
        ctx.shared.upstream_header_timeout,
    )
    .await;
    let answer = match answer {
        Ok(answer) => answer,
        Err(failure) => {
            let status = match failure {
                Failure::BadGateway => StatusCode::BAD_GATEWAY,
                Failure::Timeout => StatusCode::GATEWAY_TIMEOUT,
                Failure::BodyTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            };
            return Ok(fail(done, host_str, status));
        }
    };
    done.endpoint = Some(answer.endpoint);
    let upstream::Answer {
        head, conn, addr, ..
    } = answer;
    let status = head.status;
    let mut response = Response::new(());
    *response.status_mut() = status;
    *response.headers_mut() = match head.header_map() {
        Ok(headers) => headers,
        Err(error) => {
            done.snapshot.backends[id]
                .metrics
                .upstream_error(UpstreamErrorKind::Io);
            tracing::debug!(%error, "invalid upstream response");
            return Ok(fail(done, host_str, StatusCode::BAD_GATEWAY));
        }
    };

    if status == StatusCode::SWITCHING_PROTOCOLS {
        let Some(client_upgrade) = client_upgrade else {
            // An upgrade nobody asked for cannot be relayed.
            return Ok(fail(done, host_str, StatusCode::BAD_GATEWAY));
        };
        websocket::bridge(&done.ctx.shared, client_upgrade, conn);
        state.metrics.count_request(host_str, status.as_u16());
        done.status = status.as_u16();
        return Ok(response.map(|()| ResponseBody::fixed(None, done)));
    }

    let body = upstream_body::start(
        conn,
        head.body,
        ReturnTo {
            pool: ctx.shared.upstreams.pool,
            addr,
            reusable: head.reusable,
        },
    );
    state.metrics.count_request(host_str, status.as_u16());
    done.status = status.as_u16();
    Ok(response.map(|()| ResponseBody::upstream(body, done)))
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

/// An error page, counted in the metrics of the routed backend (or as unrouted).
fn fail(mut done: Completion, host: &str, status: StatusCode) -> Response<ResponseBody> {
    done.count(host, status.as_u16());
    error_response(status, |page: Bytes| ResponseBody::fixed(Some(page), done))
}

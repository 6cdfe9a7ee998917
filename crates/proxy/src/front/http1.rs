//! The proxy's own HTTP/1.1 server loop, for plain requests.
//!
//! Most of what an ingress serves is small bodiless requests on keep-alive connections. For
//! those this loop does the whole exchange in the connection's task: the request head is
//! parsed in place ([`crate::front::request_head`]), the upstream head is written from the same
//! bytes, and the response head goes straight to the client followed by the body
//! ([`crate::front::response_out`]). No task per request, no header map or body channel on the
//! client side.
//!
//! The first request that is not plain (a body, an upgrade, `Expect`, unusual or malformed
//! bytes, a head over the size limit) hands the connection to hyper together with every
//! byte read but not yet answered ([`Outcome::Handoff`]): hyper serves it and the rest of
//! the connection exactly as if it had read those bytes itself.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime};

use bytes::{Buf as _, Bytes, BytesMut};
use http::uri::PathAndQuery;
use http::{HeaderValue, Method, StatusCode};
use sluice_routing::RequestInfo;
use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWrite, AsyncWriteExt as _};
use tracing::debug;

use crate::body::{Completion, RequestBody};
use crate::chunked;
use crate::context::ConnCtx;
use crate::errors::page_for;
use crate::front::request_head::{self, Parsed, PlainHead, PlainHeaders};
use crate::front::response_out::{self, ClientFraming, ClientSide, ResponseEdits};
use crate::observe::access_log::LogRecord;
use crate::pipeline::admit::{self, Facts};
use crate::pipeline::decision::{Decision, Forward, decide, destination};
use crate::pipeline::mirror;
use crate::pipeline::route::{self, Routed, Routing};
use crate::pipeline::route_policy;
use crate::upstream::body::{ReturnTo, Started};
use crate::upstream::{self, Outgoing};

/// Bytes asked for per read of the client connection: a typical head fits.
const READ_SIZE: usize = 4096;

/// Buffers that grew beyond this (a large head, a chunked body) are not kept while the
/// connection waits for its next request: idle keep-alive connections stay small.
const KEEP_BUFFER: usize = 16 * 1024;

/// How a connection left the loop.
pub(crate) enum Outcome<I> {
    /// It is over.
    Closed,
    /// Serve the rest with hyper: the stream, the bytes read but not answered, and the
    /// routing of the first of them when the loop routed it already.
    Handoff(I, Bytes, Option<Routing>),
}

/// What the connection's watchers (drain, idle check) and the loop tell each other.
#[derive(Debug, Default)]
pub(crate) struct Signals {
    /// Set by the watchers: close after the current response.
    pub(crate) closing: AtomicBool,
    /// Set by the loop: waiting for a request with nothing read, so closing now loses
    /// nothing.
    pub(crate) idle: AtomicBool,
}

/// Client-side limits.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    /// `--max-header-bytes`: a longer head goes to hyper, which answers 431.
    pub(crate) max_head: usize,
    /// `--client-header-timeout`: from the first byte of a head to its end.
    pub(crate) header_timeout: Duration,
}

/// Serves requests on `io` (with `buf` already read from it) until the connection ends or
/// a request needs hyper.
pub(crate) async fn serve<I>(
    mut io: I,
    mut buf: BytesMut,
    ctx: &Arc<ConnCtx>,
    limits: Limits,
    signals: &Signals,
) -> Outcome<I>
where
    I: AsyncRead + AsyncWrite + Unpin,
{
    let mut out = Vec::with_capacity(1024);
    let mut head_since: Option<tokio::time::Instant> = None;
    loop {
        let parsed = request_head::parse(&buf);
        let ambiguous = match parsed {
            Parsed::Partial => false,
            Parsed::Plain(_) => request_head::has_bare_lf(&buf),
            Parsed::Other => {
                request_head::has_bare_lf(&buf) || request_head::length_and_chunked(&buf)
            }
        };
        if ambiguous {
            // Heads that hyper would read one way and another server another: bare LF line
            // ends (RFC 9112 §2.2 lets a recipient accept them) and Content-Length with
            // Transfer-Encoding (§6.1 lets it ignore the length; hyper does). Refused, as
            // nginx does, before anything reaches a backend.
            return refuse(io, StatusCode::BAD_REQUEST, &mut out).await;
        }
        let head = match parsed {
            Parsed::Plain(head) if head.len <= limits.max_head => head,
            // Over the limit (hyper answers 431), or not plain.
            Parsed::Plain(_) | Parsed::Other => return Outcome::Handoff(io, buf.freeze(), None),
            Parsed::Partial if buf.len() > limits.max_head => {
                return Outcome::Handoff(io, buf.freeze(), None);
            }
            Parsed::Partial if buf.is_empty() => {
                // Between requests: the watchers' idle check bounds this wait.
                if signals.closing.load(Ordering::Relaxed) {
                    return close(io).await;
                }
                head_since = None;
                buf.reserve(READ_SIZE);
                signals.idle.store(true, Ordering::Relaxed);
                let read = io.read_buf(&mut buf).await;
                signals.idle.store(false, Ordering::Relaxed);
                match read {
                    Ok(0) | Err(_) => return Outcome::Closed,
                    Ok(_) => continue,
                }
            }
            Parsed::Partial => {
                // Part of a head: the rest must come within the header timeout.
                let since = *head_since.get_or_insert_with(tokio::time::Instant::now);
                buf.reserve(READ_SIZE);
                let read =
                    tokio::time::timeout_at(since + limits.header_timeout, io.read_buf(&mut buf));
                match read.await {
                    Ok(Ok(n)) if n > 0 => continue,
                    Ok(_) => return Outcome::Closed,
                    Err(_) => {
                        debug!(peer = %ctx.peer, "request head not complete within the header timeout");
                        return Outcome::Closed;
                    }
                }
            }
        };
        head_since = None;
        let client = ClientSide {
            http10: head.http10,
            keep_alive: head.keep_alive && !signals.closing.load(Ordering::Relaxed),
        };
        let closing = &signals.closing;
        let keep_alive = match exchange(&mut io, &buf, &head, client, closing, ctx, &mut out).await
        {
            Ok(keep_alive) => keep_alive,
            Err(routing) => return Outcome::Handoff(io, buf.freeze(), Some(routing)),
        };
        buf.advance(head.len);
        if !keep_alive {
            return close(io).await;
        }
        if out.capacity() > KEEP_BUFFER {
            out = Vec::with_capacity(1024);
        }
        if buf.is_empty() && buf.capacity() > KEEP_BUFFER {
            buf = BytesMut::new();
        }
    }
}

/// Answers a head that cannot be read safely with the proxy's page for `status`, and
/// closes: nothing after it on the connection can be trusted to start a request.
async fn refuse<I: AsyncWrite + Unpin, J>(
    mut io: I,
    status: StatusCode,
    out: &mut Vec<u8>,
) -> Outcome<J> {
    out.clear();
    let client = ClientSide {
        http10: false,
        keep_alive: false,
    };
    response_out::encode_page(status, page_for(status).as_bytes(), false, client, out);
    let _ = write_out(&mut io, out).await;
    close(io).await
}

/// Ends the connection: our side is shut down first so the client reads everything sent.
async fn close<I: AsyncWrite + Unpin, J>(mut io: I) -> Outcome<J> {
    let _ = io.shutdown().await;
    Outcome::Closed
}

/// Serves one plain request (head at the front of `buf`). Returns whether the connection
/// may carry another request (`closing`: the watchers want it closed), or the request's
/// routing when the request is for hyper (its route needs hyper's upstream step): nothing
/// was sent then, and hyper goes on from that routing.
async fn exchange<I>(
    io: &mut I,
    buf: &[u8],
    head: &PlainHead,
    client: ClientSide,
    closing: &AtomicBool,
    ctx: &Arc<ConnCtx>,
    out: &mut Vec<u8>,
) -> Result<bool, Routing>
where
    I: AsyncRead + AsyncWrite + Unpin,
{
    let start = Instant::now();
    let shared = &ctx.shared;
    let snapshot = shared.table.snapshot();
    let host = head.host(buf);
    let method = head.method(buf);
    let head_request = method == "HEAD";
    let admitted = admit::admit(
        Facts {
            method: method.as_bytes(),
            version: if head.http10 {
                admit::Version::Http10
            } else {
                admit::Version::Http11
            },
            hosts: 1,
            host: Some(host.as_bytes()),
            authority: None,
            length_and_chunked: false,
            via: head.via(buf),
        },
        &shared.policy,
    );
    // Matching and every policy see the normalised path; upstream gets the target as sent.
    let normalized = admit::request_path(head.path(buf));
    let admitted = admitted.and_then(|()| normalized.as_ref().map(|_| ()).map_err(|r| *r));
    let path: &str = normalized.as_deref().unwrap_or("/");
    let query = head.target(buf).split_once('?').map(|(_, query)| query);
    // Not kept across an await: the header lookup is not `Sync`.
    let routed = {
        let info = RequestInfo {
            https: ctx.tls,
            host,
            path,
            query: query.unwrap_or(""),
            method,
            headers: &PlainHeaders { head, buf },
        };
        route::route(&snapshot, &info, |rule| {
            let header = rule
                .header
                .as_ref()
                .and_then(|name| head.field(buf, name.as_str().as_bytes()));
            let cookie = rule
                .cookie
                .as_deref()
                .and_then(|name| route::cookie(cookie_values(head, buf), name));
            rule.chooses(header, cookie, route::roll(rule.weight_total))
        })
    };
    if let Routed::Backend { backend, entry } = routed
        && route::needs_hyper(&snapshot, backend, entry)
    {
        // HTTPS, HTTP/2 and gRPC backends, and routes with session affinity.
        return Err(Routing { snapshot, routed });
    }
    let log = shared
        .access_log
        .as_ref()
        .map(|_| Box::new(log_record(ctx, buf, head)));
    // Accounts for the request when dropped, on every path out of here.
    let mut done = Completion::new(Arc::clone(ctx), snapshot, start, log);
    done.method = crate::observe::metrics::method_index(method.as_bytes());
    if let Err(refusal) = admitted {
        debug!(peer = %ctx.peer, ?refusal, "request refused");
        let status = refusal.status();
        return Ok(page(io, out, &mut done, host, status, head_request, client).await);
    }
    let (id, entry, fixed) = match destination(routed, &mut done.backend, &mut done.entry) {
        Ok(destination) => destination,
        Err(status) => {
            return Ok(page(io, out, &mut done, host, status, head_request, client).await);
        }
    };
    let route_entry = done.snapshot.table.entry(entry);
    let route_policy = &*route_entry.policy;
    // Only a CORS route looks at Origin: no field walk per request otherwise.
    let origin = route_policy
        .cors
        .as_ref()
        .and_then(|_| head.field(buf, b"origin"));
    let view = route_policy::Request {
        tls: ctx.tls,
        method: method.as_bytes(),
        host,
        path,
        target: head.target(buf),
        client: ctx.peer.ip(),
        origin,
        preflight: origin.is_some() && head.field(buf, b"access-control-request-method").is_some(),
    };
    let Forward {
        limit_slot,
        rewritten,
        response_fields,
    } = match decide(ctx, route_entry, &view, query, fixed, start) {
        Decision::Forward(forward) => forward,
        Decision::Page(status) => {
            return Ok(page(io, out, &mut done, host, status, head_request, client).await);
        }
        Decision::Answer(answer) => {
            return Ok(answered(io, out, &mut done, host, answer, head_request, client).await);
        }
    };
    done.limit_slot = limit_slot;
    let upstreams = route_policy::upstreams(&shared.upstreams, route_policy);
    let mut request = head.upstream_request(buf);
    if let Some(target) = &rewritten {
        request.target = target.as_bytes();
    }
    request.vhost = route_policy.upstream_vhost.as_ref();
    request.set = &route_policy.request_headers;
    request.forwarded_prefix = route_policy.forwarded_prefix.as_ref();
    request.add = &route_policy.request_headers_add;
    request.remove = &route_policy.request_headers_remove;
    let outgoing = Outgoing {
        head: request,
        forwarded: &ctx.forwarded,
        policy: &shared.policy,
        body: RequestBody::Empty,
        idempotent: head.idempotent(buf),
        head_request,
        retry: &route_policy.next_upstream,
        prefer: None,
        balance: route_policy.load_balance,
        try_timeout: route_policy.backend_request_timeout,
    };
    let timeout = route_policy::header_timeout(route_policy, shared.upstream_header_timeout);
    if !route_entry.mirrors.is_empty() {
        let copying = mirror::Copying {
            forwarded: &ctx.forwarded,
            policy: &shared.policy,
            metrics: &shared.metrics,
            connect_timeout: upstreams.connect_timeout,
            deadline: timeout,
        };
        mirror::copy(&route_entry.mirrors, &outgoing.head, &copying);
    }
    let request_timeout = route_policy.request_timeout;
    let state = &done.snapshot.backends[id];
    let sending = upstream::send(&upstreams, state, outgoing, start, timeout);
    let answer = upstream::within(request_timeout, start, sending).await;
    // A drain that began while the upstream was working is announced in this answer.
    let client = ClientSide {
        keep_alive: client.keep_alive && !closing.load(Ordering::Relaxed),
        ..client
    };
    let mut answer = match answer {
        Ok(answer) => answer,
        Err(failure) => {
            let status = failure.status();
            return Ok(page(io, out, &mut done, host, status, head_request, client).await);
        }
    };
    if let Some(fallback) = route_policy::intercept(route_entry, answer.head.status.as_u16()) {
        // custom-http-errors: this status is answered by the default backend (nginx's
        // error_page internal redirect, which turns the request into a GET).
        state.balancer.release(answer.endpoint);
        let status = answer.head.status.as_u16();
        drop(answer);
        let original = head.target(buf);
        let accept = head.field(buf, b"accept");
        let fields = route_policy::error_fields(status, accept, original, route_entry);
        let mut request = head.upstream_request(buf);
        // nginx's error_page keeps HEAD and turns every other method into GET.
        request.method = if head_request { b"HEAD" } else { b"GET" };
        request.framing = crate::pipeline::header_policy::Framing::None;
        request.set = &fields;
        let outgoing = Outgoing {
            head: request,
            forwarded: &ctx.forwarded,
            policy: &shared.policy,
            body: RequestBody::Empty,
            idempotent: true,
            head_request,
            retry: &route_policy.next_upstream,
            prefer: None,
            balance: None,
            try_timeout: route_policy.backend_request_timeout,
        };
        done.backend = Some(fallback.id);
        let state = &done.snapshot.backends[fallback.id];
        let sending = upstream::send(&upstreams, state, outgoing, start, timeout);
        answer = match upstream::within(request_timeout, start, sending).await {
            Ok(answer) => answer,
            Err(failure) => {
                let status = failure.status();
                return Ok(page(io, out, &mut done, host, status, head_request, client).await);
            }
        };
    }
    done.endpoint = Some(answer.endpoint);
    let upstream::Answer {
        head: response,
        conn,
        addr,
        ..
    } = answer;
    if response.status == StatusCode::SWITCHING_PROTOCOLS {
        // No upgrade was asked for on this path: one cannot be relayed.
        let status = StatusCode::BAD_GATEWAY;
        return Ok(page(io, out, &mut done, host, status, head_request, client).await);
    }
    let status = response.status;

    let body = upstream::body::start(
        conn,
        response.body,
        ReturnTo {
            pool: shared.upstreams.pool,
            addr,
            reusable: response.reusable,
            read_timeout: upstreams.read_timeout,
        },
    );
    out.clear();
    let edits = ResponseEdits {
        set: &response_fields,
        add: &route_policy.response_headers_add,
        remove: &route_policy.response_headers_remove,
    };
    let (framing, keep_alive) = response_out::encode_head(&response, client, edits, out);
    drop(response);
    done.count(host, status.as_u16());
    let sent = match body {
        Started::Complete(bytes) => {
            // Only empty and length-delimited bodies complete with the head, so they go out
            // as they are: head and body in one write.
            if let Some(bytes) = bytes {
                done.bytes = bytes.len() as u64;
                out.extend_from_slice(&bytes);
            }
            write_out(io, out).await
        }
        Started::Streaming(mut body) => {
            stream_body(io, out, &mut body, framing, &mut done.bytes).await
        }
    };
    Ok(sent && keep_alive)
}

/// The values of the request's `Cookie` fields.
fn cookie_values<'b>(head: &'b PlainHead, buf: &'b [u8]) -> impl Iterator<Item = &'b [u8]> {
    crate::pipeline::header_policy::Fields::iter(head.fields(buf))
        .filter(|(name, _)| name.eq_ignore_ascii_case(b"cookie"))
        .map(|(_, value)| value)
}

/// Writes `out` and flushes (TLS keeps records until flushed). False if the client is gone.
async fn write_out<I: AsyncWrite + Unpin>(io: &mut I, out: &[u8]) -> bool {
    match io.write_all(out).await {
        Ok(()) => io.flush().await.is_ok(),
        Err(_) => false,
    }
}

/// Sends the head already in `out`, then the upstream body as it arrives. False if either
/// side broke off (the client then sees the connection close before the body's end).
async fn stream_body<I: AsyncWrite + Unpin>(
    io: &mut I,
    out: &mut Vec<u8>,
    body: &mut upstream::body::UpstreamBody,
    framing: ClientFraming,
    bytes: &mut u64,
) -> bool {
    if !write_out(io, out).await {
        return false;
    }
    while let Some(data) = std::future::poll_fn(|cx| body.poll_data(cx)).await {
        let data = match data {
            Ok(data) => data,
            Err(error) => {
                debug!(%error, "upstream body failed");
                return false;
            }
        };
        *bytes += data.len() as u64;
        let written = if framing == ClientFraming::Chunked {
            out.clear();
            out.extend_from_slice(&chunked::chunk_header(data.len()));
            out.extend_from_slice(&data);
            out.extend_from_slice(chunked::CHUNK_END);
            io.write_all(out).await
        } else {
            io.write_all(&data).await
        };
        if written.is_err() {
            return false;
        }
    }
    if framing == ClientFraming::Chunked && io.write_all(chunked::LAST_CHUNK).await.is_err() {
        return false;
    }
    io.flush().await.is_ok()
}

/// Answers with the proxy's own page for `status`, counted in the routed backend's metrics
/// (or as unrouted).
async fn page<I: AsyncWrite + Unpin>(
    io: &mut I,
    out: &mut Vec<u8>,
    done: &mut Completion,
    host: &str,
    status: StatusCode,
    head_request: bool,
    client: ClientSide,
) -> bool {
    done.count(host, status.as_u16());
    let body = page_for(status).as_bytes();
    if !head_request {
        done.bytes = body.len() as u64;
    }
    out.clear();
    let keep_alive = response_out::encode_page(status, body, head_request, client, out);
    write_out(io, out).await && keep_alive
}

/// Answers with the policy stage's own response (redirect, 403, CORS preflight).
async fn answered<I: AsyncWrite + Unpin>(
    io: &mut I,
    out: &mut Vec<u8>,
    done: &mut Completion,
    host: &str,
    answer: route_policy::Answer,
    head_request: bool,
    client: ClientSide,
) -> bool {
    done.count(host, answer.status.as_u16());
    let mut fields = answer.fields;
    if let Some(location) = answer.location {
        fields.push((http::header::LOCATION, location));
    }
    let body = page_for(answer.status).as_bytes();
    out.clear();
    let keep_alive =
        response_out::encode_answer(answer.status, &fields, body, head_request, client, out);
    write_out(io, out).await && keep_alive
}

/// The access log's record of a plain request.
fn log_record(ctx: &ConnCtx, buf: &[u8], head: &PlainHead) -> LogRecord {
    LogRecord {
        time: SystemTime::now(),
        client: ctx.peer.ip(),
        method: Method::from_bytes(head.method(buf).as_bytes()).unwrap_or(Method::GET),
        host: HeaderValue::from_str(head.host(buf)).unwrap_or(HeaderValue::from_static("")),
        path: PathAndQuery::try_from(head.target(buf))
            .unwrap_or_else(|_| PathAndQuery::from_static("/")),
    }
}

//! The proxy's own HTTP/1.1 server loop, for plain requests.
//!
//! Most of what an ingress serves is small bodiless requests on keep-alive connections. For
//! those this loop does the whole exchange in the connection's task: the request head is
//! parsed in place ([`crate::http::request_head`]), the upstream head is written from the same
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
use std::time::{Duration, Instant};

use bytes::{Buf as _, Bytes, BytesMut};
use http::StatusCode;
use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWrite, AsyncWriteExt as _};
use tracing::debug;

use crate::body;
use crate::body::Completion;
use crate::body::upstream::{ReturnTo, Started};
use crate::chunked;
use crate::compress::encoder::{Compressing, Failure};
use crate::compress::{self, negotiate};
use crate::context::ConnCtx;
use crate::errors::page_for;
use crate::front::response_out::{self, ClientFraming, ClientSide};
use crate::http::header_policy::{Fields as _, UpstreamRequest};
use crate::http::request_fields::RequestFields;
use crate::http::request_head::{self, Parsed, PlainHead};
use crate::http::response_head::BodyKind;
use crate::pipeline::admit::{Facts, Version};
use crate::pipeline::route::Routing;
use crate::pipeline::route_policy;
use crate::pipeline::view::RequestView;
use crate::pipeline::{self, Reply};
use crate::upstream;

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
        let last = ctx.last_request();
        let client = ClientSide {
            http10: head.http10,
            keep_alive: head.keep_alive && !last && !signals.closing.load(Ordering::Relaxed),
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
/// routing when its answer comes from hyper's client: nothing was sent then, and hyper
/// goes on from that routing.
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
    let request = PlainRequest::new(head, buf);
    let arrived = pipeline::arrive(ctx, request, None);
    if arrived.needs_hyper() {
        return Err(arrived.routing);
    }
    let (mut done, reply) = pipeline::run(ctx, request, arrived, None, start).await;
    let host = request.host();
    let head_request = request.method() == "HEAD";
    // A drain that began while the upstream was working is announced in this answer.
    let client = ClientSide {
        keep_alive: client.keep_alive && !closing.load(Ordering::Relaxed),
        ..client
    };
    let proxied = match reply {
        Reply::Upstream(proxied) => proxied,
        Reply::Page(status) => {
            return Ok(page(io, out, &mut done, host, status, head_request, client).await);
        }
        Reply::Answer(answer) => {
            return Ok(answered(io, out, &mut done, host, answer, head_request, client).await);
        }
        Reply::Client(_) => {
            // Not reached: such routes went to hyper above.
            let status = StatusCode::BAD_GATEWAY;
            return Ok(page(io, out, &mut done, host, status, head_request, client).await);
        }
    };
    let upstream::Answer {
        response: upstream::Response {
            head: response,
            conn,
        },
        addr,
        ..
    } = proxied.answer;
    if response.status == StatusCode::SWITCHING_PROTOCOLS {
        // No upgrade was asked for on this path: one cannot be relayed.
        let status = StatusCode::BAD_GATEWAY;
        return Ok(page(io, out, &mut done, host, status, head_request, client).await);
    }
    let status = response.status;
    let (outcome, encoder) = compression(&done, request, &response);
    let body = body::upstream::start(
        conn,
        response.body,
        ReturnTo {
            pool: done.snapshot.settings.pool(ctx.shared.upstreams.pool),
            addr,
            reusable: response.reusable,
            read_timeout: proxied.read_timeout,
        },
        // `proxy-buffering: "on"`: read ahead of the client.
        done.entry
            .and_then(|entry| done.snapshot.table.entry(entry).policy.response_buffer),
    );
    out.clear();
    let edits = proxied.edits.resolve(&done.snapshot, status.as_u16());
    let (framing, keep_alive) = response_out::encode_head(&response, client, edits, outcome, out);
    drop(response);
    done.count(host, status.as_u16());
    // `limit-rate`: the body goes out paced (nginx `limit_rate`).
    let limit = done
        .entry
        .and_then(|entry| done.snapshot.table.entry(entry).policy.limit_rate);
    let (body, encoder) = match (body, encoder) {
        // A body that came whole is compressed whole, and goes out as one chunk.
        (Started::Complete(bytes), Some(encoder)) => {
            let Ok(compressed) = encoder.whole(bytes.as_deref().unwrap_or_default()) else {
                // The codec writes to memory and does not fail; if it did, nothing was
                // sent yet and closing is all that is left.
                return Ok(false);
            };
            let sent = write_whole_chunk(io, out, &compressed, limit, &mut done.bytes).await;
            return Ok(sent && keep_alive);
        }
        other => other,
    };
    let sent = match (body, limit) {
        (Started::Complete(Some(bytes)), Some(limit)) => {
            let mut pace = Paced::new(limit);
            write_out(io, out).await
                && pace
                    .write(io, out, &bytes, ClientFraming::AsIs, &mut done.bytes)
                    .await
                && io.flush().await.is_ok()
        }
        (Started::Complete(bytes), _) => {
            // Only empty and length-delimited bodies complete with the head, so they go out
            // as they are: head and body in one write.
            if let Some(bytes) = bytes {
                done.bytes = bytes.len() as u64;
                out.extend_from_slice(&bytes);
            }
            write_out(io, out).await
        }
        (Started::Streaming(mut body), limit) => {
            let pace = limit.map(Paced::new);
            let body = &mut body;
            stream_body(io, out, body, encoder, framing, &mut done.bytes, pace).await
        }
    };
    Ok(sent && keep_alive)
}

/// Compression of the upstream's `response` to `request`: the head's changes and the
/// body's encoder (`None` when it goes out as it is).
fn compression(
    done: &Completion,
    request: PlainRequest<'_>,
    response: &crate::http::response_head::ResponseHead,
) -> (negotiate::Outcome, Option<Compressing>) {
    let settings = &done.snapshot.settings.compression;
    let route = done
        .entry
        .and_then(|entry| done.snapshot.table.entry(entry).policy.compression);
    if route.is_none() && !settings.any_enabled() {
        return Default::default();
    }
    let facts = negotiate::RequestFacts {
        head: request.method == "HEAD",
        http10: request.head.http10,
        range: request.field(b"range").is_some(),
        user_agent: request.field(b"user-agent"),
    };
    // Every Accept-Encoding field: together they are one list (RFC 9110 §5.3).
    let accept = request
        .head
        .fields(request.buf)
        .iter()
        .filter(|(name, _)| name.eq_ignore_ascii_case(b"accept-encoding"))
        .map(|(_, value)| value);
    let Some(asked) = negotiate::asked(settings, route, facts, accept) else {
        return Default::default();
    };
    let length = match response.body {
        BodyKind::Length(length) => Some(length),
        BodyKind::Empty => Some(0),
        BodyKind::Chunked | BodyKind::UntilClose => None,
    };
    let facts = compress::facts_of(response.status.as_u16(), response.fields(), length);
    let mut outcome = negotiate::outcome(settings, &asked, facts);
    let encoder = outcome
        .coding
        .and_then(|coding| Compressing::new(coding, settings).ok());
    match (&encoder, outcome.coding) {
        (Some(_), Some(coding)) => done.ctx.shared.metrics.compressed(coding),
        _ => outcome.coding = None,
    }
    (outcome, encoder)
}

/// Sends the head already in `out`, then `data` as one chunk and the last chunk (paced
/// under `limit`). False if the client is gone.
async fn write_whole_chunk<I: AsyncWrite + Unpin>(
    io: &mut I,
    out: &mut Vec<u8>,
    data: &[u8],
    limit: Option<sluice_routing::LimitRate>,
    bytes: &mut u64,
) -> bool {
    if let Some(limit) = limit {
        let mut pace = Paced::new(limit);
        return write_out(io, out).await
            && pace
                .write(io, out, data, ClientFraming::Chunked, bytes)
                .await
            && write_out(io, chunked::LAST_CHUNK).await;
    }
    if !data.is_empty() {
        out.extend_from_slice(&chunked::chunk_header(data.len()));
        out.extend_from_slice(data);
        out.extend_from_slice(chunked::CHUNK_END);
    }
    out.extend_from_slice(chunked::LAST_CHUNK);
    *bytes += data.len() as u64;
    write_out(io, out).await
}

/// A plain head with the buffer it was parsed from: the own loop's request as the
/// pipeline reads it.
#[derive(Clone, Copy)]
pub(crate) struct PlainRequest<'b> {
    /// The head.
    head: &'b PlainHead,
    /// The buffer it was parsed from.
    buf: &'b [u8],
    /// The method, Host and target as text, checked once (every phase reads them).
    method: &'b str,
    host: &'b str,
    target: &'b str,
}

impl<'b> PlainRequest<'b> {
    /// The request whose head was parsed from `buf`.
    fn new(head: &'b PlainHead, buf: &'b [u8]) -> PlainRequest<'b> {
        PlainRequest {
            head,
            buf,
            method: head.method(buf),
            host: head.host(buf),
            target: head.target(buf),
        }
    }
}

impl<'b> RequestView<'b> for PlainRequest<'b> {
    fn method(self) -> &'b str {
        self.method
    }

    fn host(self) -> &'b str {
        self.host
    }

    fn target(self) -> &'b str {
        self.target
    }

    fn field(self, name: &[u8]) -> Option<&'b [u8]> {
        self.head.field(self.buf, name)
    }

    fn fields(self) -> RequestFields<'b> {
        RequestFields::Plain(self.head.fields(self.buf))
    }

    fn facts(self) -> Facts<'b, impl Iterator<Item = &'b [u8]>> {
        Facts {
            method: self.method.as_bytes(),
            version: if self.head.http10 {
                Version::Http10
            } else {
                Version::Http11
            },
            hosts: 1,
            host: Some(self.host.as_bytes()),
            authority: None,
            length_and_chunked: false,
            via: self.head.via(self.buf),
        }
    }

    fn upstream_request(self) -> UpstreamRequest<'b, RequestFields<'b>> {
        self.head
            .upstream_request(self.buf)
            .with_fields(RequestFields::Plain)
    }

    fn declared_length(self) -> u64 {
        // Plain requests have no body.
        0
    }
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
    body: &mut body::upstream::UpstreamBody,
    mut encoder: Option<Compressing>,
    framing: ClientFraming,
    bytes: &mut u64,
    mut pace: Option<Paced>,
) -> bool {
    if !write_out(io, out).await {
        return false;
    }
    loop {
        let next = std::future::poll_fn(|cx| match &mut encoder {
            None => body
                .poll_data(cx)
                .map(|next| next.map(|piece| piece.map_err(Failure::Upstream))),
            Some(encoder) => encoder.poll_next(cx, |cx| body.poll_data(cx)),
        });
        let data = match next.await {
            None => break,
            Some(Ok(data)) => data,
            Some(Err(Failure::Upstream(error))) => {
                debug!(%error, "upstream body failed");
                return false;
            }
            Some(Err(Failure::Encoder(error))) => {
                debug!(%error, "compressing the response failed");
                return false;
            }
        };

        if let Some(pace) = &mut pace {
            if !pace.write(io, out, &data, framing, bytes).await {
                return false;
            }
            continue;
        }
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

/// A response body's pace under the route's `limit-rate` (nginx `limit_rate`).
struct Paced {
    limit: sluice_routing::LimitRate,
    started: std::time::Instant,
    sent: u64,
}

impl Paced {
    fn new(limit: sluice_routing::LimitRate) -> Paced {
        Paced {
            limit,
            started: std::time::Instant::now(),
            sent: 0,
        }
    }

    /// Writes `data` (framed as `framing` says) in pieces of a tenth of a second's worth,
    /// each once the bytes before it are due. False if the client is gone.
    async fn write<I: AsyncWrite + Unpin>(
        &mut self,
        io: &mut I,
        out: &mut Vec<u8>,
        data: &[u8],
        framing: ClientFraming,
        bytes: &mut u64,
    ) -> bool {
        for piece in data.chunks(self.limit.piece()) {
            if let Some(wait) = self.limit.delay(self.sent, self.started.elapsed()) {
                tokio::time::sleep(wait).await;
            }
            let written = if framing == ClientFraming::Chunked {
                out.clear();
                out.extend_from_slice(&chunked::chunk_header(piece.len()));
                out.extend_from_slice(piece);
                out.extend_from_slice(chunked::CHUNK_END);
                write_out(io, out).await
            } else {
                write_out(io, piece).await
            };
            if !written {
                return false;
            }
            self.sent += piece.len() as u64;
            *bytes += piece.len() as u64;
        }
        true
    }
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
    // A snippet's `return` text, else the proxy's page.
    let body = answer
        .body
        .as_deref()
        .unwrap_or(page_for(answer.status).as_bytes());
    out.clear();
    let keep_alive =
        response_out::encode_answer(answer.status, &fields, body, head_request, client, out);
    write_out(io, out).await && keep_alive
}

//! Sending one request to a backend over HTTP/1.1: endpoint choice, a pooled or new
//! connection, the exchange up to the response head, timeouts and retries.
//!
//! The exchange runs inside the request's own task: the head is written with one system
//! call, the response head is read and parsed here, and the body is read later by the
//! response body itself ([`crate::upstream::body`]). No connection task, no channel.
//!
//! Retries only happen for requests without a body (the body cannot be replayed) and only
//! where they cannot duplicate non-idempotent work: when the connection could not be
//! established (the request was never sent, so any method is safe), or, for idempotent
//! methods (GET, HEAD, OPTIONS, TRACE), when the connection failed before a response head
//! arrived (like nginx's default `proxy_next_upstream error`). At most [`crate::upstream::balancer::MAX_ATTEMPTS`].

pub(crate) mod balancer;
pub(crate) mod body;
pub(crate) mod client;
pub(crate) mod pool;
pub(crate) mod response_head;
pub(crate) mod retry;
pub(crate) mod tls;

use std::io;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use http_body_util::BodyExt as _;
use tokio::io::AsyncWriteExt as _;
use tokio::net::{TcpSocket, TcpStream};

use http::StatusCode;
use sluice_routing::{LoadBalance, NextUpstream};

use crate::body::{BodyTooLarge, ClientBodyTimeout, RequestBody};
use crate::chunked;
use crate::context::Upstreams;
use crate::observe::metrics::UpstreamErrorKind;
use crate::pipeline::header_policy::{
    self, Fields, Forwarded, Framing, HeaderPolicy, UpstreamRequest,
};
use crate::snapshot::BackendState;
use crate::upstream::retry::{Failed, GiveUp, Retries};
use pool::Conn;
use response_head::ResponseHead;

/// Read size for response heads.
const HEAD_READ: usize = 8 * 1024;

/// Initial capacity of a connection's write buffer: most request heads fit.
const WRITE_BUF: usize = 1024;

/// Why no usable response came back.
#[derive(Debug)]
pub(crate) enum Failure {
    /// Every attempt failed to get a response (502).
    BadGateway,
    /// No response head within the upstream header timeout (504).
    Timeout,
    /// The client's body went over the limit while streaming (413).
    BodyTooLarge,
    /// The client's body was malformed or cut off (400).
    ClientBody,
    /// The client's body stalled past `--client-body-timeout` (408).
    ClientTimeout,
}

impl From<GiveUp> for Failure {
    fn from(give_up: GiveUp) -> Failure {
        match give_up {
            GiveUp::BadGateway => Failure::BadGateway,
            GiveUp::Timeout => Failure::Timeout,
        }
    }
}

impl Failure {
    /// The status the client gets (the same on every front end).
    pub(crate) fn status(&self) -> StatusCode {
        match self {
            Failure::BadGateway => StatusCode::BAD_GATEWAY,
            Failure::Timeout => StatusCode::GATEWAY_TIMEOUT,
            Failure::BodyTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            Failure::ClientBody => StatusCode::BAD_REQUEST,
            Failure::ClientTimeout => StatusCode::REQUEST_TIMEOUT,
        }
    }
}

/// A response head, the connection its body follows on, and the endpoint (index in the
/// backend) that gave it; the endpoint's in-flight count stays taken until the caller
/// releases it.
pub(crate) struct Answer {
    pub(crate) head: ResponseHead,
    pub(crate) conn: Conn,
    pub(crate) endpoint: usize,
    pub(crate) addr: SocketAddr,
}

/// A request ready to send: its head (before the header policy) and its body.
pub(crate) struct Outgoing<'a, F> {
    /// The head, encoded into the connection's write buffer at each attempt.
    pub(crate) head: UpstreamRequest<'a, F>,
    /// The connection's forwarding values.
    pub(crate) forwarded: &'a Forwarded,
    /// The proxy's header policy.
    pub(crate) policy: &'a HeaderPolicy,
    /// The body (framed as `head.framing` says).
    pub(crate) body: RequestBody,
    /// GET, HEAD, OPTIONS or TRACE: safe to send again after a failure.
    pub(crate) idempotent: bool,
    /// A HEAD request (its response has no body).
    pub(crate) head_request: bool,
    /// When to try another endpoint (the route's `proxy-next-upstream`).
    pub(crate) retry: &'a NextUpstream,
    /// The endpoint to try first (session affinity, `upstream-hash-by`).
    pub(crate) prefer: Option<usize>,
    /// The route's `load-balance` (`None`: the default choice).
    pub(crate) balance: Option<LoadBalance>,
    /// Bound on each try, from sending to the response head (Gateway API
    /// `timeouts.backendRequest`): a try over it counts as a timeout, and the last one
    /// fails the request with 504.
    pub(crate) try_timeout: Option<Duration>,
}

impl<'a, 'f, F> Outgoing<'a, F>
where
    F: Fields<'f>,
{
    fn encode(&self, endpoint: SocketAddr, out: &mut Vec<u8>) {
        header_policy::encode_request_head(&self.head, self.forwarded, self.policy, endpoint, out);
    }
}

/// How one attempt failed.
enum AttemptError {
    /// No connection could be made (nothing was sent).
    Connect(io::Error),
    /// A pooled connection turned out dead while the head was written: the request did
    /// not reach the upstream, so sending it again is safe for any method.
    Stale(io::Error),
    /// The exchange failed before a response head.
    Io(io::Error),
    /// The upstream's answer was not valid HTTP.
    Protocol(response_head::HeadError),
    /// The client's body broke the limit.
    BodyTooLarge,
    /// Reading the client's body failed.
    ClientBody,
    /// The client's body stalled.
    ClientTimeout,
    /// The upstream stopped taking the request.
    SendTimeout,
    /// No response head within the header timeout after the body was sent.
    HeadTimeout,
    /// The try took longer than the route's `try_timeout`.
    TryTimeout,
}

/// Sends `outgoing` to an endpoint of `backend`, trying others on connect failure.
/// `deadline` bounds the wait for the response head over all attempts.
pub(crate) async fn send<'a, 'f, F>(
    upstreams: &Upstreams,
    backend: &BackendState,
    outgoing: Outgoing<'a, F>,
    start: Instant,
    deadline: Duration,
) -> Result<Answer, Failure>
where
    F: Fields<'f>,
{
    // The attempts are boxed: a future is copied whole each time it moves (into a timeout,
    // into `within`, into an await), and theirs is the largest state on the request path.
    // A profile of small keep-alive GETs had ~7% of the proxy's CPU in those copies.
    if !matches!(outgoing.body, RequestBody::Empty) {
        // An upload can take long, each step bounded by its own timeout (client body,
        // upstream send); the wait for the head starts once the body is through.
        return Box::pin(attempts(upstreams, backend, outgoing, Some(deadline))).await;
    }
    let deadline = tokio::time::Instant::from_std(start + deadline);
    let attempts = Box::pin(attempts(upstreams, backend, outgoing, None));
    match tokio::time::timeout_at(deadline, attempts).await {
        Ok(result) => result,
        Err(_elapsed) => {
            // The attempt in progress was dropped with its connection; its endpoint's
            // in-flight count was released by the guard in `attempts`.
            backend.metrics.upstream_error(UpstreamErrorKind::Timeout);
            tracing::debug!("upstream response head timed out");
            Err(Failure::Timeout)
        }
    }
}

/// Runs `exchange` (the upstream steps up to the response head) within `limit` counted
/// from the request's `start` (Gateway API `timeouts.request`): 504 when it runs out.
pub(crate) async fn within<T>(
    limit: Option<Duration>,
    start: Instant,
    exchange: impl Future<Output = Result<T, Failure>>,
) -> Result<T, Failure> {
    let Some(limit) = limit else {
        return exchange.await;
    };
    let deadline = tokio::time::Instant::from_std(start + limit);
    match tokio::time::timeout_at(deadline, exchange).await {
        Ok(result) => result,
        Err(_elapsed) => {
            tracing::debug!("request timed out before a response head");
            Err(Failure::Timeout)
        }
    }
}

/// Releases an endpoint's in-flight count unless disarmed (dropped on timeout too).
/// The endpoint a try goes to.
pub(crate) struct Chosen<'a> {
    /// Its in-flight count, given back when dropped unless the answer took it over.
    pub(crate) in_flight: InFlight<'a>,
    /// Its index in the backend's balancer.
    pub(crate) index: usize,
    /// Its address.
    pub(crate) addr: SocketAddr,
    /// When it was chosen (the balancer's clock).
    pub(crate) now_ms: u64,
}

pub(crate) struct InFlight<'a> {
    pub(crate) backend: &'a BackendState,
    pub(crate) index: Option<usize>,
}

impl<'a, F> Outgoing<'a, F> {
    /// The endpoint of the next try of `retries` among the endpoints it has not skipped:
    /// the preferred one on the first try when it is up, else the route's balancing
    /// choice. Its in-flight count is taken; the guard gives it back. `None` when no try or
    /// no endpoint is left.
    pub(crate) fn next_endpoint<'b>(
        &self,
        backend: &'b BackendState,
        retries: &mut Retries<'_>,
    ) -> Option<Chosen<'b>> {
        let attempt = retries.next_try()?;
        let now_ms = balancer::now_millis(Instant::now());
        let balancer = &backend.balancer;
        let tried = retries.tried();
        let preferred = self
            .prefer
            .filter(|&i| attempt == 1 && balancer.take(i, tried, now_ms));
        let index = preferred.or_else(|| balancer.pick_with(self.balance, tried, now_ms))?;
        Some(Chosen {
            in_flight: InFlight {
                backend,
                index: Some(index),
            },
            index,
            addr: balancer.get(index).addr,
            now_ms,
        })
    }

    /// Feeds the latency of an answer to `load-balance: ewma`.
    pub(crate) fn answered(&self, backend: &BackendState, index: usize, sent_at: Instant) {
        if self.balance == Some(LoadBalance::Ewma) {
            let now = balancer::now_millis(Instant::now());
            backend.balancer.observe(index, sent_at.elapsed(), now);
        }
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        if let Some(index) = self.index {
            self.backend.balancer.release(index);
        }
    }
}

async fn attempts<'a, 'f, F>(
    upstreams: &Upstreams,
    backend: &BackendState,
    mut outgoing: Outgoing<'a, F>,
    head_timeout: Option<Duration>,
) -> Result<Answer, Failure>
where
    F: Fields<'f>,
{
    let balancer = &backend.balancer;
    let body = std::mem::replace(&mut outgoing.body, RequestBody::Empty);
    let bodiless = matches!(body, RequestBody::Empty);
    let mut retries = Retries::new(outgoing.retry, outgoing.idempotent, bodiless);
    if !bodiless {
        // The body goes into the first try, a failed connect included.
        retries = retries.one_try();
    }
    let mut body = Some(body);
    while let Some(chosen) = outgoing.next_endpoint(backend, &mut retries) {
        let Chosen {
            mut in_flight,
            index,
            addr,
            now_ms,
        } = chosen;
        let body = body.take().unwrap_or(RequestBody::Empty);
        let sent_at = Instant::now();
        let exchanged = exchange(upstreams, backend, addr, &outgoing, body, head_timeout);
        let exchanged = match outgoing.try_timeout {
            Some(limit) => tokio::time::timeout(limit, exchanged)
                .await
                .unwrap_or(Err(AttemptError::TryTimeout)),
            None => exchanged.await,
        };
        let error = match exchanged {
            Ok((head, _conn))
                if retries.retries_status(head.status.as_u16(), index, balancer.len()) =>
            {
                // proxy_next_upstream http_5xx: this answer is dropped with its connection
                // and the next endpoint asked.
                tracing::debug!(upstream = %addr, status = %head.status, "next upstream");
                continue;
            }
            Ok((head, conn)) => {
                outgoing.answered(backend, index, sent_at);
                in_flight.index = None;
                return Ok(Answer {
                    head,
                    conn,
                    endpoint: index,
                    addr,
                });
            }
            Err(error) => error,
        };
        drop(in_flight);
        let failed = match &error {
            AttemptError::BodyTooLarge => return Err(Failure::BodyTooLarge),
            AttemptError::ClientBody => return Err(Failure::ClientBody),
            AttemptError::ClientTimeout => {
                tracing::debug!(upstream = %addr, "client body timed out");
                return Err(Failure::ClientTimeout);
            }
            AttemptError::HeadTimeout => {
                backend.metrics.upstream_error(UpstreamErrorKind::Timeout);
                tracing::debug!(upstream = %addr, "upstream response head timed out");
                return Err(Failure::Timeout);
            }
            AttemptError::SendTimeout => {
                backend.metrics.upstream_error(UpstreamErrorKind::Timeout);
                tracing::debug!(upstream = %addr, "upstream stopped reading the request");
                return Err(Failure::Timeout);
            }
            AttemptError::TryTimeout => Failed::TryTimeout,
            AttemptError::Connect(error) => Failed::Connect(error),
            AttemptError::Stale(error) => Failed::Stale(error),
            AttemptError::Protocol(error) => Failed::Protocol(error),
            AttemptError::Io(error) => Failed::Io(error),
        };
        retries.after_failure(failed, backend, index, addr, now_ms)?;
    }
    Err(Failure::BadGateway)
}

/// Opens a connection to `addr` within `timeout`.
pub(crate) async fn connect(addr: SocketAddr, timeout: Duration) -> io::Result<TcpStream> {
    let socket = if addr.is_ipv4() {
        TcpSocket::new_v4()?
    } else {
        TcpSocket::new_v6()?
    };
    socket.set_keepalive(true)?;
    let stream = tokio::time::timeout(timeout, socket.connect(addr))
        .await
        .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "connect timed out"))??;
    // Small requests must not wait for Nagle.
    stream.set_nodelay(true)?;
    Ok(stream)
}

/// One attempt: a connection (pooled, else new), the request written, the response head
/// read. 1xx heads other than 101 are skipped.
async fn exchange<'a, 'f, F>(
    upstreams: &Upstreams,
    backend: &BackendState,
    addr: SocketAddr,
    head: &Outgoing<'a, F>,
    body: RequestBody,
    head_timeout: Option<Duration>,
) -> Result<(ResponseHead, Conn), AttemptError>
where
    F: Fields<'f>,
{
    let framing = head.head.framing;
    let head_request = head.head_request;
    let mut conn = match pool::checkout(upstreams.pool, addr) {
        Some(conn) => conn,
        None => {
            let started = Instant::now();
            let stream = connect(addr, upstreams.connect_timeout)
                .await
                .map_err(AttemptError::Connect)?;
            backend.metrics.observe_connect(started.elapsed());
            Conn {
                stream,
                buf: BytesMut::new(),
                wbuf: Vec::with_capacity(WRITE_BUF),
                reused: false,
            }
        }
    };
    let sent_at = Instant::now();
    tracing::trace!(upstream = %addr, reused = conn.reused, "sending request");
    conn.wbuf.clear();
    head.encode(addr, &mut conn.wbuf);
    let send_timeout = upstreams.send_timeout;
    let written = write_request(&mut conn, framing, body, head_request, send_timeout).await;
    match written {
        Ok(None) => {}
        Ok(Some(mut early)) => {
            // Answered before the body was complete: the connection is out of step.
            early.reusable = false;
            return Ok((early, conn));
        }
        Err(AttemptError::Io(error)) if framing != Framing::None => {
            // The upstream may have answered early (e.g. 413) and closed while we were still
            // sending the body; that answer is worth more than the write error.
            return match read_head(&mut conn, head_request).await {
                Ok(mut response) => {
                    response.reusable = false;
                    Ok((response, conn))
                }
                Err(_) => Err(AttemptError::Io(error)),
            };
        }
        Err(error) => return Err(error),
    }
    let response = match head_timeout {
        Some(limit) => tokio::time::timeout(limit, read_head(&mut conn, head_request))
            .await
            .map_err(|_| AttemptError::HeadTimeout)??,
        None => read_head(&mut conn, head_request).await?,
    };
    backend.metrics.observe_header(sent_at.elapsed());
    Ok((response, conn))
}

/// Writes the encoded head (`conn.wbuf`), then the body with its framing. Returns a final
/// response head if the upstream answered before the body was through (a 413 or 401 to a
/// large upload): waiting for the body to drain into an upstream that stopped reading would
/// only end in a timeout.
async fn write_request(
    conn: &mut Conn,
    framing: Framing,
    body: RequestBody,
    head_request: bool,
    send_timeout: Duration,
) -> Result<Option<ResponseHead>, AttemptError> {
    let reused = conn.reused;
    let head = tokio::time::timeout(send_timeout, conn.stream.write_all(&conn.wbuf));
    head.await
        .map_err(|_| AttemptError::SendTimeout)?
        .map_err(|error| {
            if reused {
                AttemptError::Stale(error)
            } else {
                AttemptError::Io(error)
            }
        })?;
    if matches!(body, RequestBody::Empty) {
        return Ok(None);
    }
    let (reader, mut writer) = conn.stream.split();
    tokio::select! {
        biased;
        sent = send_body(&mut writer, framing, body, send_timeout) => sent.map(|()| None),
        early = early_head(&reader, &mut conn.buf, head_request) => early.map(Some),
    }
}

/// Streams the client's body to the upstream with the head's framing.
async fn send_body(
    writer: &mut tokio::net::tcp::WriteHalf<'_>,
    framing: Framing,
    mut body: RequestBody,
    send_timeout: Duration,
) -> Result<(), AttemptError> {
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|error| {
            if error.is::<BodyTooLarge>() {
                AttemptError::BodyTooLarge
            } else if error.is::<ClientBodyTimeout>() {
                AttemptError::ClientTimeout
            } else {
                tracing::debug!(%error, "reading the client's body failed");
                AttemptError::ClientBody
            }
        })?;
        // Trailers from the client are dropped: the upstream request is plain HTTP/1.1.
        let Ok(data) = frame.into_data() else {
            continue;
        };
        if data.is_empty() {
            continue;
        }
        if framing == Framing::Chunked {
            write(writer, &chunked::chunk_header(data.len()), send_timeout).await?;
            write(writer, &data, send_timeout).await?;
            write(writer, chunked::CHUNK_END, send_timeout).await?;
        } else {
            write(writer, &data, send_timeout).await?;
        }
    }
    if framing == Framing::Chunked {
        write(writer, chunked::LAST_CHUNK, send_timeout).await?;
    }
    Ok(())
}

/// Writes `bytes` to the upstream; each write must make progress within `send_timeout`
/// (nginx `proxy_send_timeout`: a limit between two successive writes, not on the whole).
async fn write(
    writer: &mut tokio::net::tcp::WriteHalf<'_>,
    bytes: &[u8],
    send_timeout: Duration,
) -> Result<(), AttemptError> {
    match tokio::time::timeout(send_timeout, writer.write_all(bytes)).await {
        Ok(written) => written.map_err(AttemptError::Io),
        Err(_) => Err(AttemptError::SendTimeout),
    }
}

/// Watches for a response while the body is still being sent; interim (1xx) heads are
/// consumed and watching goes on. Only returns once a final head has arrived (or the
/// connection failed).
async fn early_head(
    reader: &tokio::net::tcp::ReadHalf<'_>,
    buf: &mut BytesMut,
    head_request: bool,
) -> Result<ResponseHead, AttemptError> {
    loop {
        reader.readable().await.map_err(AttemptError::Io)?;
        buf.reserve(HEAD_READ);
        match reader.try_read_buf(buf) {
            Ok(0) => {
                return Err(AttemptError::Io(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "upstream closed the connection while the body was being sent",
                )));
            }
            Ok(_) => {}
            Err(error) if error.kind() == io::ErrorKind::WouldBlock => continue,
            Err(error) => return Err(AttemptError::Io(error)),
        }
        while !buf.is_empty() {
            match response_head::parse(buf, head_request) {
                Ok(Some(head)) if is_interim(&head) => {}
                Ok(Some(head)) => return Ok(head),
                Ok(None) => break,
                Err(error) => return Err(AttemptError::Protocol(error)),
            }
        }
    }
}

/// A 1xx head other than 101: informational, the real answer follows.
fn is_interim(head: &ResponseHead) -> bool {
    head.status.is_informational() && head.status != http::StatusCode::SWITCHING_PROTOCOLS
}

/// Reads until a final (non-1xx, or 101) response head is parsed off `conn.buf`.
async fn read_head(conn: &mut Conn, head_request: bool) -> Result<ResponseHead, AttemptError> {
    loop {
        if !conn.buf.is_empty() {
            match response_head::parse(&mut conn.buf, head_request) {
                Ok(Some(head)) if is_interim(&head) => continue,
                Ok(Some(head)) => return Ok(head),
                Ok(None) => {}
                Err(error) => return Err(AttemptError::Protocol(error)),
            }
        }
        conn.buf.reserve(HEAD_READ);
        let n = tokio::io::AsyncReadExt::read_buf(&mut conn.stream, &mut conn.buf)
            .await
            .map_err(AttemptError::Io)?;
        if n == 0 {
            return Err(AttemptError::Io(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "upstream closed the connection before a response",
            )));
        }
    }
}

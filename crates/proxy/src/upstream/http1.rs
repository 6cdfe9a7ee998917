//! The proxy's own HTTP/1.1 client, one try at a time for the [driver](super::driver): a
//! pooled connection of this thread (`backend::pool`) or a new one, the head written with
//! one system call from the request's own task, the body streamed, and the response head
//! read and parsed here ([`response_head`](crate::http::response_head)); the body is read
//! later by the response body ([`body::upstream`](crate::body::upstream)). No connection
//! task, no channel.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use http_body_util::BodyExt as _;
use tokio::io::AsyncWriteExt as _;

use crate::backend::pool::{self, Conn};
use crate::body::{BodyTooLarge, ClientBodyTimeout, RequestBody};
use crate::chunked;
use crate::context::Upstreams;
use crate::http::header_policy::Framing;
use crate::http::response_head::{self, ResponseHead};
use crate::observe::metrics::UpstreamErrorKind;
use crate::snapshot::BackendState;
use crate::upstream::driver::{Retryable, Transport, Try, TryFailed};
use crate::upstream::{Failure, Response, connect};

/// Read size for response heads.
const HEAD_READ: usize = 8 * 1024;

/// Initial capacity of a connection's write buffer: most request heads fit.
const WRITE_BUF: usize = 1024;

/// The own HTTP/1.1 client as a transport.
pub(crate) struct Http1<'u> {
    /// The route's upstream settings.
    pub(crate) upstreams: &'u Upstreams,
    /// Bound on the wait for the response head once a body is through (a bodiless
    /// request's head wait is the driver's).
    pub(crate) head_timeout: Option<Duration>,
}

impl Transport for Http1<'_> {
    type Response = Response;

    fn status(response: &Response) -> u16 {
        response.head.status.as_u16()
    }

    fn exchange(
        &mut self,
        at: Try<'_, '_>,
    ) -> impl Future<Output = Result<Response, TryFailed>> + Send {
        exchange(self.upstreams, at, self.head_timeout)
    }
}

/// How the body or the response head failed.
enum AttemptError {
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
}

impl AttemptError {
    /// What the failure means for the request.
    fn into_try_failed(self, backend: &BackendState, addr: SocketAddr) -> TryFailed {
        match self {
            AttemptError::Io(error) => TryFailed::Retry(Retryable::Io(Box::new(error)), None),
            AttemptError::Protocol(error) => {
                TryFailed::Retry(Retryable::Protocol(Box::new(error)), None)
            }
            AttemptError::BodyTooLarge => TryFailed::Fail(Failure::BodyTooLarge),
            AttemptError::ClientBody => TryFailed::Fail(Failure::ClientBody),
            AttemptError::ClientTimeout => {
                tracing::debug!(upstream = %addr, "client body timed out");
                TryFailed::Fail(Failure::ClientTimeout)
            }
            AttemptError::HeadTimeout => {
                backend.metrics.upstream_error(UpstreamErrorKind::Timeout);
                tracing::debug!(upstream = %addr, "upstream response head timed out");
                TryFailed::Fail(Failure::Timeout)
            }
            AttemptError::SendTimeout => {
                backend.metrics.upstream_error(UpstreamErrorKind::Timeout);
                tracing::debug!(upstream = %addr, "upstream stopped reading the request");
                TryFailed::Fail(Failure::Timeout)
            }
        }
    }
}

/// One try: a connection (pooled, else new), the request written, the response head read.
/// 1xx heads other than 101 are skipped. The body comes back when no connection could be
/// made or a pooled one turned out closed: nothing of it was sent.
async fn exchange(
    upstreams: &Upstreams,
    at: Try<'_, '_>,
    head_timeout: Option<Duration>,
) -> Result<Response, TryFailed> {
    let Try {
        backend,
        addr,
        outgoing,
        body,
    } = at;
    let framing = outgoing.head.framing;
    let head_request = outgoing.head_request;
    let mut conn = match pool::checkout(upstreams.pool, addr) {
        Some(conn) => conn,
        None => {
            let started = Instant::now();
            let stream = match connect(addr, upstreams.connect_timeout).await {
                Ok(stream) => stream,
                Err(error) => return Err(TryFailed::Retry(Retryable::Connect(error), Some(body))),
            };
            backend.metrics.observe_connect(started.elapsed());
            Conn::new(stream, BytesMut::new(), Vec::with_capacity(WRITE_BUF))
        }
    };
    let sent_at = Instant::now();
    tracing::trace!(upstream = %addr, reused = conn.reused, "sending request");
    conn.wbuf.clear();
    outgoing.encode(addr, &mut conn.wbuf);
    let send_timeout = upstreams.send_timeout;
    let failed = |error: AttemptError| error.into_try_failed(backend, addr);
    match tokio::time::timeout(send_timeout, conn.stream.write_all(&conn.wbuf)).await {
        Ok(Ok(())) => {}
        Ok(Err(error)) if conn.reused => {
            // A pooled connection the upstream had closed: the request never reached it.
            return Err(TryFailed::Retry(
                Retryable::Stale(Box::new(error)),
                Some(body),
            ));
        }
        Ok(Err(error)) => return Err(failed(AttemptError::Io(error))),
        Err(_elapsed) => return Err(failed(AttemptError::SendTimeout)),
    }
    let written = if matches!(body, RequestBody::Empty) {
        Ok(None)
    } else {
        write_body(&mut conn, framing, body, head_request, send_timeout).await
    };
    match written {
        Ok(None) => {}
        Ok(Some(mut early)) => {
            // Answered before the body was complete: the connection is out of step.
            early.reusable = false;
            let head = Box::new(early);
            return Ok(Response { head, conn });
        }
        Err(AttemptError::Io(error)) if framing != Framing::None => {
            // The upstream may have answered early (e.g. 413) and closed while we were still
            // sending the body; that answer is worth more than the write error.
            return match read_head(&mut conn, head_request).await {
                Ok(mut response) => {
                    response.reusable = false;
                    let head = Box::new(response);
                    Ok(Response { head, conn })
                }
                Err(_) => Err(failed(AttemptError::Io(error))),
            };
        }
        Err(error) => return Err(failed(error)),
    }
    let response = match head_timeout {
        Some(limit) => {
            match tokio::time::timeout(limit, read_head(&mut conn, head_request)).await {
                Ok(read) => read.map_err(failed)?,
                Err(_elapsed) => return Err(failed(AttemptError::HeadTimeout)),
            }
        }
        None => read_head(&mut conn, head_request).await.map_err(failed)?,
    };
    backend.metrics.observe_header(sent_at.elapsed());
    let head = Box::new(response);
    Ok(Response { head, conn })
}

/// Writes the body with its framing after the head. Returns a final response head if the
/// upstream answered before the body was through (a 413 or 401 to a large upload): waiting
/// for the body to drain into an upstream that stopped reading would only end in a timeout.
async fn write_body(
    conn: &mut Conn,
    framing: Framing,
    body: RequestBody,
    head_request: bool,
    send_timeout: Duration,
) -> Result<Option<ResponseHead>, AttemptError> {
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

//! An upstream response body read straight off the upstream connection, in the task that
//! sends it to the client; at its end the connection goes back to the pool.

use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use bytes::Bytes;
use http_body::SizeHint;

use crate::backend::pool::{self, Conn, PoolConfig};
use crate::body::read_ahead::{self, ReadAhead};
use crate::chunked::{ChunkedDecoder, Decoded};
use crate::http::response_head::BodyKind;
use crate::stall::StallTimer;

/// Read size for body bytes: large enough that a 1 MiB body takes few reads.
const READ_CHUNK: usize = 64 * 1024;

/// The upstream ended or broke the body early.
#[derive(Debug, thiserror::Error)]
pub(crate) enum BodyError {
    /// The connection closed before the announced end.
    #[error("upstream closed the connection mid-body")]
    Truncated,
    /// Chunked framing was invalid.
    #[error(transparent)]
    Chunked(#[from] crate::chunked::ChunkedError),
    /// Reading failed.
    #[error("reading the upstream body: {0}")]
    Io(#[from] std::io::Error),
    /// Nothing arrived for `--upstream-read-timeout`.
    #[error("upstream body timed out")]
    Timeout,
}

/// Remaining framing of the body.
#[derive(Debug)]
enum Remaining {
    /// This many bytes.
    Length(u64),
    /// Chunked, decoding.
    Chunked(ChunkedDecoder),
    /// Until the upstream closes.
    UntilClose,
}

/// Where a finished connection goes.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ReturnTo {
    /// The pool.
    pub(crate) pool: PoolConfig,
    /// The endpoint it is connected to.
    pub(crate) addr: SocketAddr,
    /// Whether the response allows another request on it.
    pub(crate) reusable: bool,
    /// Longest wait between two reads (nginx `proxy_read_timeout`).
    pub(crate) read_timeout: Duration,
}

/// The body of one upstream response.
#[derive(Debug)]
pub(crate) struct UpstreamBody {
    /// `None` once the body is over.
    conn: Option<Conn>,
    remaining: Remaining,
    return_to: ReturnTo,
    /// Runs while a read waits (reset after every read, so time the client took to take
    /// the last piece does not count).
    stall: StallTimer,
    /// `proxy-buffering: "on"`: the body as a task of its own reads it ahead (the fields
    /// above are unused then).
    ahead: Option<Box<ReadAhead<UpstreamBody>>>,
}

/// A body, either already complete in the bytes read with the head (the common case for
/// small responses: the connection is back in the pool before the client sees a byte),
/// or still to be read.
// Moved once into the response body: boxing the streaming variant would cost an allocation
// per streamed response instead.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub(crate) enum Started {
    /// The whole body (possibly empty).
    Complete(Option<Bytes>),
    /// The body continues on the connection.
    Streaming(UpstreamBody),
}

/// Starts reading the body of a response whose head was just parsed off `conn.buf`;
/// `read_ahead`: the bytes a task may read ahead of the client (`proxy-buffering: "on"`).
pub(crate) fn start(
    mut conn: Conn,
    kind: BodyKind,
    return_to: ReturnTo,
    read_ahead: Option<u64>,
) -> Started {
    let remaining = match kind {
        BodyKind::Empty => {
            finish(conn, return_to);
            return Started::Complete(None);
        }
        BodyKind::Length(n) if (conn.buf.len() as u64) >= n => {
            // n fits in usize: it is at most the buffer's length.
            let body = conn.buf.split_to(n as usize).freeze();
            finish(conn, return_to);
            return Started::Complete((n > 0).then_some(body));
        }
        BodyKind::Length(n) => Remaining::Length(n),
        BodyKind::Chunked => Remaining::Chunked(ChunkedDecoder::default()),
        BodyKind::UntilClose => Remaining::UntilClose,
    };
    let body = UpstreamBody {
        conn: Some(conn),
        remaining,
        return_to,
        stall: StallTimer::default(),
        ahead: None,
    };
    match read_ahead {
        None => Started::Streaming(body),
        Some(limit) => Started::Streaming(UpstreamBody {
            conn: None,
            remaining: Remaining::UntilClose,
            return_to,
            stall: StallTimer::default(),
            ahead: Some(Box::new(read_ahead::spawn(body, limit))),
        }),
    }
}

fn finish(conn: Conn, return_to: ReturnTo) {
    // Bytes past the end of the response (a 204 that sent a body anyway, say) would be read
    // as the next response: such a connection is not reused.
    if return_to.reusable && conn.buf.is_empty() {
        pool::checkin(return_to.pool, return_to.addr, conn);
    }
}

impl read_ahead::Source for UpstreamBody {
    type Error = BodyError;

    fn poll_data(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<Bytes, BodyError>>> {
        UpstreamBody::poll_data(self, cx)
    }

    fn exact_length(&self) -> Option<u64> {
        self.size_hint().exact()
    }

    fn truncated() -> BodyError {
        BodyError::Truncated
    }
}

impl UpstreamBody {
    /// Whether the body is over.
    pub(crate) fn is_end_stream(&self) -> bool {
        if let Some(ahead) = &self.ahead {
            return ahead.is_end_stream();
        }
        self.conn.is_none() || matches!(self.remaining, Remaining::Length(0))
    }

    /// Exact when the length is known.
    pub(crate) fn size_hint(&self) -> SizeHint {
        if let Some(ahead) = &self.ahead {
            return ahead.size_hint();
        }
        match self.remaining {
            Remaining::Length(n) => SizeHint::with_exact(n),
            _ if self.conn.is_none() => SizeHint::with_exact(0),
            _ => SizeHint::default(),
        }
    }

    fn done(&mut self) {
        if let Some(conn) = self.conn.take() {
            finish(conn, self.return_to);
        }
    }

    /// The next piece of the body, `None` at its end.
    pub(crate) fn poll_data(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Bytes, BodyError>>> {
        if let Some(ahead) = &mut self.ahead {
            return ahead.poll_data(cx);
        }
        loop {
            let Some(conn) = self.conn.as_mut() else {
                return Poll::Ready(None);
            };
            let buffered = !conn.buf.is_empty();
            match &mut self.remaining {
                Remaining::Length(0) => {
                    self.done();
                    return Poll::Ready(None);
                }
                Remaining::Length(left) if buffered => {
                    let take = usize::try_from(*left)
                        .unwrap_or(usize::MAX)
                        .min(conn.buf.len());
                    let data = conn.buf.split_to(take).freeze();
                    *left -= take as u64;
                    if *left == 0 {
                        self.done();
                    }
                    return Poll::Ready(Some(Ok(data)));
                }
                Remaining::Chunked(decoder) if buffered || decoder.is_done() => {
                    match decoder.decode(&mut conn.buf) {
                        Ok(Decoded::Data(data)) => return Poll::Ready(Some(Ok(data))),
                        Ok(Decoded::Done) => {
                            self.done();
                            return Poll::Ready(None);
                        }
                        Ok(Decoded::NeedMore) => {}
                        Err(error) => {
                            self.conn = None;
                            return Poll::Ready(Some(Err(error.into())));
                        }
                    }
                }
                Remaining::UntilClose if buffered => {
                    let data = conn.buf.split().freeze();
                    return Poll::Ready(Some(Ok(data)));
                }
                _ => {}
            }
            // Need more bytes from the upstream.
            let conn = self.conn.as_mut().expect("checked above");
            let want = match self.remaining {
                Remaining::Length(left) => usize::try_from(left).unwrap_or(READ_CHUNK),
                _ => READ_CHUNK,
            };
            conn.buf.reserve(want.clamp(1, READ_CHUNK));
            let read = match tokio_util::io::poll_read_buf(
                Pin::new(&mut conn.stream),
                cx,
                &mut conn.buf,
            ) {
                Poll::Ready(read) => read,
                Poll::Pending => {
                    ready!(self.stall.poll_stalled(cx, self.return_to.read_timeout));
                    self.conn = None;
                    return Poll::Ready(Some(Err(BodyError::Timeout)));
                }
            };
            self.stall.progressed();
            match read {
                Ok(0) => {
                    self.conn = None;
                    return Poll::Ready(match self.remaining {
                        Remaining::UntilClose => None,
                        _ => Some(Err(BodyError::Truncated)),
                    });
                }
                Ok(_) => {}
                Err(error) => {
                    self.conn = None;
                    return Poll::Ready(Some(Err(error.into())));
                }
            }
        }
    }
}

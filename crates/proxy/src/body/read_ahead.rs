//! nginx's `proxy_buffering on` (ingress-nginx's `proxy-buffering: "on"`): a task of its
//! own reads the upstream response body ahead of the client, holding at most the route's
//! buffer (`proxy-buffers-number` times `proxy-buffer-size`, plus the one read in hand),
//! so a response that fits is off the upstream connection, and the connection back in the
//! pool, while a slow client is still taking it. A larger one goes at the client's pace
//! once the buffer is full (nginx with `proxy_max_temp_file_size 0`: sluice never writes
//! a response to disk).
//!
//! The bytes held are counted by a semaphore: each piece carries its permits to the
//! writer, which gives them back when it takes the piece. A client that goes away drops
//! the pieces and the receiver: the task ends at its next send, dropping the upstream
//! connection unless the body was over.

use std::sync::Arc;
use std::task::{Context, Poll, ready};

use bytes::Bytes;
use http_body::SizeHint;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc};

/// A body that can be read ahead: the upstream's, as its own client reads it.
pub(crate) trait Source: Send + 'static {
    /// Why reading failed.
    type Error: Send + 'static;
    /// The next piece, `None` at the end.
    fn poll_data(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<Bytes, Self::Error>>>;
    /// The bytes still to come, when known.
    fn exact_length(&self) -> Option<u64>;
    /// The error for a body that ended before its announced length.
    fn truncated() -> Self::Error;
}

/// A piece read ahead, with the permits that count it.
type Piece<E> = Result<(Bytes, OwnedSemaphorePermit), E>;

/// The client's side of a body read ahead.
#[derive(Debug)]
pub(crate) struct ReadAhead<S: Source> {
    pieces: mpsc::UnboundedReceiver<Piece<S::Error>>,
    /// Bytes still to come, where the upstream said how many.
    left: Option<u64>,
    /// The task has ended and every piece was taken.
    ended: bool,
}

/// Starts reading `body` ahead, holding at most `limit` bytes (and the piece in hand).
pub(crate) fn spawn<S: Source>(mut body: S, limit: u64) -> ReadAhead<S> {
    let left = body.exact_length();
    let permits = usize::try_from(limit)
        .unwrap_or(usize::MAX)
        .clamp(1, Semaphore::MAX_PERMITS);
    let budget = Arc::new(Semaphore::new(permits));
    let (sender, pieces) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        loop {
            let next = std::future::poll_fn(|cx| body.poll_data(cx)).await;
            let data = match next {
                // The body is over: its connection is back in the pool already.
                None => return,
                Some(Err(error)) => {
                    let _ = sender.send(Err(error));
                    return;
                }
                Some(Ok(data)) => data,
            };
            // A piece larger than the whole budget takes all of it.
            let want = u32::try_from(data.len().min(permits)).unwrap_or(u32::MAX);
            let Ok(permit) = Arc::clone(&budget).acquire_many_owned(want).await else {
                return;
            };
            if sender.send(Ok((data, permit))).is_err() {
                // The client went away.
                return;
            }
        }
    });
    ReadAhead {
        pieces,
        left,
        ended: false,
    }
}

impl<S: Source> ReadAhead<S> {
    /// The next piece of the body, `None` at its end.
    pub(crate) fn poll_data(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Bytes, S::Error>>> {
        if self.ended {
            return Poll::Ready(None);
        }
        match ready!(self.pieces.poll_recv(cx)) {
            // Taken by the writer: its permits go back for the task to read more.
            Some(Ok((data, _permit))) => {
                if let Some(left) = &mut self.left {
                    *left = left.saturating_sub(data.len() as u64);
                }
                Poll::Ready(Some(Ok(data)))
            }
            Some(Err(error)) => {
                self.ended = true;
                Poll::Ready(Some(Err(error)))
            }
            None => {
                self.ended = true;
                // A task that ended before the announced length (it cannot, short of a
                // panic) must not look like a complete body.
                match self.left {
                    Some(left) if left > 0 => Poll::Ready(Some(Err(S::truncated()))),
                    _ => Poll::Ready(None),
                }
            }
        }
    }

    /// Whether the body is over.
    pub(crate) fn is_end_stream(&self) -> bool {
        self.ended || self.left == Some(0)
    }

    /// Exact when the length is known.
    pub(crate) fn size_hint(&self) -> SizeHint {
        match self.left {
            Some(left) => SizeHint::with_exact(left),
            None => SizeHint::default(),
        }
    }
}

//! A client stream wrapper that counts reads and writes (so an idle connection can be told
//! from a busy one without a timer per operation) and bounds how long a write may wait on a
//! peer that stopped reading (nginx `send_timeout`).

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll, ready};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::stall::StallTimer;

/// An I/O stream that counts its operations and fails a write stalled for `send_timeout`.
pub(crate) struct ActivityIo<T> {
    inner: T,
    activity: Arc<AtomicU64>,
    send_timeout: Option<Duration>,
    /// Runs while a write waits.
    stall: StallTimer,
}

impl<T> ActivityIo<T> {
    /// Wraps `inner`, counting into `activity`; writes that make no progress for
    /// `send_timeout` fail with `TimedOut` (never, when `None`).
    pub(crate) fn new(inner: T, activity: Arc<AtomicU64>, send_timeout: Option<Duration>) -> Self {
        ActivityIo {
            inner,
            activity,
            send_timeout,
            stall: StallTimer::default(),
        }
    }

    fn touch(&self) {
        // Relaxed: only "has it changed since the last check" matters.
        self.activity.fetch_add(1, Ordering::Relaxed);
    }

    /// After a write-side operation finished: stop the stall timer, and count it if it
    /// moved bytes (flushes are not counted: HTTP/2 flushes on every poll of its
    /// connection, which would make an idle connection look busy).
    fn progressed(&mut self, moved: bool) {
        if moved {
            self.touch();
        }
        self.stall.progressed();
    }

    /// A write is waiting: runs the stall timer, ready with an error once it expired.
    fn poll_stall(&mut self, cx: &mut Context<'_>) -> Poll<io::Error> {
        let Some(limit) = self.send_timeout else {
            return Poll::Pending;
        };
        ready!(self.stall.poll_stalled(cx, limit));
        Poll::Ready(io::Error::new(
            io::ErrorKind::TimedOut,
            "the peer took nothing for the send timeout",
        ))
    }

    /// Runs a write-side operation under the stall timer.
    fn guarded<R>(
        &mut self,
        cx: &mut Context<'_>,
        moves: bool,
        op: impl FnOnce(Pin<&mut T>, &mut Context<'_>) -> Poll<io::Result<R>>,
    ) -> Poll<io::Result<R>>
    where
        T: Unpin,
    {
        match op(Pin::new(&mut self.inner), cx) {
            Poll::Ready(result) => {
                self.progressed(moves);
                Poll::Ready(result)
            }
            Poll::Pending => self.poll_stall(cx).map(Err),
        }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for ActivityIo<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let result = Pin::new(&mut this.inner).poll_read(cx, buf);
        if result.is_ready() {
            this.touch();
        }
        result
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for ActivityIo<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.get_mut()
            .guarded(cx, true, |io, cx| io.poll_write(cx, buf))
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        self.get_mut()
            .guarded(cx, true, |io, cx| io.poll_write_vectored(cx, bufs))
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.get_mut()
            .guarded(cx, false, |io, cx| io.poll_flush(cx))
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.get_mut()
            .guarded(cx, false, |io, cx| io.poll_shutdown(cx))
    }
}

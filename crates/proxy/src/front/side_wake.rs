//! Polling a rarely-ready future beside a busy one without polling it on every wake-up.
//!
//! A connection task wakes several times per request; `tokio::select!` would poll the
//! drain, force and idle-timer futures each time too. [`SideWake`] gives the side future a
//! waker of its own that records that it fired, so it is polled only when it has something
//! to say (and once at the start, to register).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll, Wake, Waker};

use futures::task::AtomicWaker;

/// The side future's waker: marks it woken and wakes the task.
#[derive(Default)]
struct Flag {
    woken: AtomicBool,
    task: AtomicWaker,
}

impl Wake for Flag {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.woken.store(true, Ordering::Release);
        self.task.wake();
    }
}

/// Per-task state for polling one side future at a time.
pub(crate) struct SideWake {
    flag: Arc<Flag>,
    waker: Waker,
}

impl SideWake {
    /// A fresh one; the first side future is polled at once.
    pub(crate) fn new() -> SideWake {
        let flag = Arc::new(Flag::default());
        flag.woken.store(true, Ordering::Relaxed);
        let waker = Waker::from(Arc::clone(&flag));
        SideWake { flag, waker }
    }

    /// Polls `side` if its waker fired since it was last polled (or it was never polled).
    /// Call on every poll of the task; `cx` is the task's context.
    pub(crate) fn poll<F: Future>(&self, side: Pin<&mut F>, cx: &Context<'_>) -> Poll<F::Output> {
        self.flag.task.register(cx.waker());
        if !self.flag.woken.swap(false, Ordering::AcqRel) {
            return Poll::Pending;
        }
        side.poll(&mut Context::from_waker(&self.waker))
    }

    /// Makes the next [`SideWake::poll`] poll its future (after replacing it).
    pub(crate) fn rearm(&self) {
        self.flag.woken.store(true, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;
    use std::time::Duration;

    #[tokio::test]
    async fn side_is_polled_only_when_woken() {
        let polls = Cell::new(0);
        let side = async {
            polls.set(polls.get() + 1);
            tokio::time::sleep(Duration::from_millis(30)).await;
            polls.set(polls.get() + 1);
            "side"
        };
        tokio::pin!(side);
        let wake = SideWake::new();
        let mut main_polls = 0;
        let result = std::future::poll_fn(|cx| {
            main_polls += 1;
            if let Poll::Ready(out) = wake.poll(side.as_mut(), cx) {
                return Poll::Ready(out);
            }
            // A busy main future: wakes the task again at once, a few hundred times.
            if main_polls < 300 {
                cx.waker().wake_by_ref();
            }
            Poll::Pending
        })
        .await;
        assert_eq!(result, "side");
        assert!(main_polls >= 300, "{main_polls}");
        // Once to start the sleep, once when it fired: not once per task wake-up.
        assert_eq!(polls.get(), 2);
    }
}

//! "No progress for this long": the timer behind the client body, upstream body and send
//! timeouts (nginx measures each between two successive reads or writes, not over the
//! whole transfer).

use std::future::Future as _;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::time::{Instant, Sleep};

/// Armed when a wait begins, disarmed by progress; allocated at the first wait only.
#[derive(Debug, Default)]
pub(crate) struct StallTimer {
    sleep: Option<Pin<Box<Sleep>>>,
    /// Set for the wait in progress (so time spent while nobody waited does not count).
    armed: bool,
}

impl StallTimer {
    /// A wait is in progress: ready once it has lasted `limit` since it began.
    pub(crate) fn poll_stalled(&mut self, cx: &mut Context<'_>, limit: Duration) -> Poll<()> {
        let deadline = Instant::now() + limit;
        let sleep = self
            .sleep
            .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline)));
        if !self.armed {
            sleep.as_mut().reset(deadline);
            self.armed = true;
        }
        sleep.as_mut().poll(cx)
    }

    /// Progress was made: the next wait starts a new period.
    pub(crate) fn progressed(&mut self) {
        self.armed = false;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whether the timer is still waiting (polled once, now).
    async fn pending(timer: &mut StallTimer, limit: Duration) -> bool {
        std::future::poll_fn(|cx| Poll::Ready(timer.poll_stalled(cx, limit).is_pending())).await
    }

    #[tokio::test(start_paused = true)]
    async fn a_wait_expires_after_the_limit_and_progress_restarts_it() {
        let limit = Duration::from_secs(10);
        let mut timer = StallTimer::default();
        assert!(pending(&mut timer, limit).await);
        tokio::time::advance(Duration::from_secs(6)).await;
        assert!(pending(&mut timer, limit).await);
        // Progress: the next wait gets a whole period again.
        timer.progressed();
        tokio::time::advance(Duration::from_secs(6)).await;
        assert!(pending(&mut timer, limit).await);
        tokio::time::advance(Duration::from_secs(6)).await;
        assert!(pending(&mut timer, limit).await);
        tokio::time::advance(Duration::from_secs(5)).await;
        assert!(
            !pending(&mut timer, limit).await,
            "stalled for the whole limit"
        );
    }
}

//! [`CatchUp`]: a rebuild once status-only updates have stopped coming.
//!
//! A status-only update compiles nothing ([`crate::status_only`]): the compiler keeps the
//! older object, which reads the same. Its last inputs fall behind the stores, and the next
//! real change has to tell every such object apart from a change (after sluice's first
//! status round over 10,000 routes, all of them: tens of milliseconds added to the first
//! change's propagation). Once status updates have been quiet for a while, one rebuild takes
//! them in, off the path of any change; it swaps no table and sends no report when nothing
//! is served differently. While changes keep coming their own rebuilds take
//! the updates in, and none is added.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tokio::sync::Notify;

/// How long status updates must have been quiet before the rebuild that takes them in.
pub(crate) const QUIET: Duration = Duration::from_secs(1);

/// Whether objects were updated since the last rebuild, and a wake-up for each update.
#[derive(Debug, Default)]
pub(crate) struct CatchUp {
    /// An object whose status sluice writes was added or updated since the last rebuild.
    behind: AtomicBool,
    touched: Notify,
}

impl CatchUp {
    /// An object whose status sluice writes was added or updated (maybe its status only).
    pub(crate) fn touched(&self) {
        self.behind.store(true, Ordering::Release);
        self.touched.notify_one();
    }

    /// A rebuild starts: it lists the stores, updates so far included.
    pub(crate) fn rebuilding(&self) {
        self.behind.store(false, Ordering::Release);
    }

    /// Returns once `quiet` has passed without an update, after an update that no rebuild
    /// has taken in since.
    pub(crate) async fn due(&self, quiet: Duration) {
        loop {
            self.touched.notified().await;
            while tokio::time::timeout(quiet, self.touched.notified())
                .await
                .is_ok()
            {}
            if self.behind.swap(false, Ordering::AcqRel) {
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use tokio::time::{Instant, sleep, timeout};

    const Q: Duration = Duration::from_millis(1000);

    #[tokio::test(start_paused = true)]
    async fn due_once_updates_have_been_quiet() {
        let catch_up = Arc::new(CatchUp::default());
        let start = Instant::now();
        let touching = {
            let catch_up = Arc::clone(&catch_up);
            tokio::spawn(async move {
                // Five updates 400 ms apart: never quiet for a second until the last.
                for _ in 0..5 {
                    catch_up.touched();
                    sleep(Q * 2 / 5).await;
                }
            })
        };
        catch_up.due(Q).await;
        assert_eq!(
            start.elapsed(),
            Q * 8 / 5 + Q,
            "a second after the fifth update"
        );
        touching.await.expect("the updates");
    }

    #[tokio::test(start_paused = true)]
    async fn not_due_when_a_rebuild_took_the_updates_in() {
        let catch_up = CatchUp::default();
        catch_up.touched();
        catch_up.rebuilding();
        assert!(timeout(Q * 10, catch_up.due(Q)).await.is_err());
        // A later update is due again.
        catch_up.touched();
        assert!(timeout(Q * 2, catch_up.due(Q)).await.is_ok());
    }

    #[tokio::test(start_paused = true)]
    async fn not_due_without_updates() {
        let catch_up = CatchUp::default();
        assert!(timeout(Q * 10, catch_up.due(Q)).await.is_err());
    }
}

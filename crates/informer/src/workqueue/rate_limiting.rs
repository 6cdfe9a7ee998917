//! A delaying work queue with per-item rate limiting (client-go `RateLimitingInterface`).

use std::{ops::Deref, sync::Arc};

use super::{
    delaying::DelayingQueue,
    queue::{QueueItem, WorkQueue},
    rate_limiter::{RateLimiter, default_controller_rate_limiter},
};

/// A [`DelayingQueue`] plus a [`RateLimiter`]: failed items come back after the limiter's delay.
/// Derefs to the [`DelayingQueue`] (and so to the [`WorkQueue`]). Cheap to clone.
pub struct RateLimitingQueue<T> {
    queue: DelayingQueue<T>,
    limiter: Arc<dyn RateLimiter<T>>,
}

impl<T> Clone for RateLimitingQueue<T> {
    fn clone(&self) -> Self {
        Self {
            queue: self.queue.clone(),
            limiter: self.limiter.clone(),
        }
    }
}

impl<T> std::fmt::Debug for RateLimitingQueue<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RateLimitingQueue")
            .field("queue", &self.queue)
            .finish()
    }
}

impl<T> Deref for RateLimitingQueue<T> {
    type Target = DelayingQueue<T>;
    fn deref(&self) -> &DelayingQueue<T> {
        &self.queue
    }
}

impl<T: QueueItem> RateLimitingQueue<T> {
    /// A queue using `limiter`.
    ///
    /// # Panics
    /// When called outside a tokio runtime.
    pub fn new(limiter: impl RateLimiter<T> + 'static) -> Self {
        Self {
            queue: DelayingQueue::new(),
            limiter: Arc::new(limiter),
        }
    }

    /// A queue using [`default_controller_rate_limiter`].
    ///
    /// # Panics
    /// When called outside a tokio runtime.
    pub fn with_default_rate_limiter() -> Self {
        Self::new(default_controller_rate_limiter())
    }

    /// Adds `item` after the delay the rate limiter assigns to it.
    pub fn add_rate_limited(&self, item: T) {
        let delay = self.limiter.when(&item);
        self.queue.add_after(item, delay);
    }

    /// Resets the rate limiter's memory of `item` (call it when the item succeeded).
    pub fn forget(&self, item: &T) {
        self.limiter.forget(item);
    }

    /// How many times `item` was rate limited since it was last forgotten.
    pub fn num_requeues(&self, item: &T) -> u32 {
        self.limiter.num_requeues(item)
    }

    /// The underlying work queue.
    pub fn work_queue(&self) -> &WorkQueue<T> {
        self.queue.queue()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workqueue::rate_limiter::ItemExponentialFailureRateLimiter;
    use std::time::Duration;
    use tokio::time::Instant;

    #[tokio::test(start_paused = true)]
    async fn rate_limited_requeues_back_off_exponentially() {
        let q = RateLimitingQueue::new(ItemExponentialFailureRateLimiter::new(
            Duration::from_millis(5),
            Duration::from_secs(1000),
        ));
        q.add("k");
        let mut item = q.get().await.unwrap();
        let mut delays = Vec::new();
        for _ in 0..5 {
            q.add_rate_limited(item);
            q.done(&item);
            let t = Instant::now();
            item = q.get().await.unwrap();
            delays.push(t.elapsed().as_millis());
        }
        assert_eq!(delays, vec![5, 10, 20, 40, 80]);
        assert_eq!(q.num_requeues(&item), 5);
        q.forget(&item);
        assert_eq!(q.num_requeues(&item), 0);
        q.done(&item);
    }
}

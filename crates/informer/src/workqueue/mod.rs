//! Work queues (client-go `util/workqueue`).
//!
//! Three layers, each wrapping (and dereferencing to) the one before:
//!
//! - [`WorkQueue`]: FIFO with dedup (dirty set) and a processing set, so a key is never handed
//!   to two workers at once and a key re-added during processing comes back after
//!   [`WorkQueue::done`]; [`WorkQueue::shut_down`] and [`WorkQueue::shut_down_with_drain`].
//! - [`DelayingQueue`]: adds [`DelayingQueue::add_after`].
//! - [`RateLimitingQueue`]: adds [`RateLimitingQueue::add_rate_limited`],
//!   [`RateLimitingQueue::forget`] and [`RateLimitingQueue::num_requeues`], using a
//!   [`RateLimiter`] (see [`rate_limiter`]).
//!
//! A typical worker:
//!
//! ```no_run
//! # async fn demo(queue: sluice_informer::workqueue::RateLimitingQueue<String>) {
//! while let Some(key) = queue.get().await {
//!     let ok = true; // reconcile(&key)
//!     if ok { queue.forget(&key) } else { queue.add_rate_limited(key.clone()) }
//!     queue.done(&key);
//! }
//! # }
//! ```

pub mod delaying;
pub mod queue;
pub mod rate_limiter;
pub mod rate_limiting;

pub use delaying::DelayingQueue;
pub use queue::{QueueItem, WorkQueue};
pub use rate_limiter::{
    BucketRateLimiter, ItemExponentialFailureRateLimiter, ItemFastSlowRateLimiter,
    MaxOfRateLimiter, RateLimiter, default_controller_rate_limiter,
};
pub use rate_limiting::RateLimitingQueue;

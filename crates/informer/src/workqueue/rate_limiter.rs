//! Rate limiters deciding how long a failed item waits before it is retried
//! (client-go `workqueue.RateLimiter` and implementations).
//!
//! - [`ItemExponentialFailureRateLimiter`]: `base * 2^failures`, capped at `max`, per item.
//! - [`BucketRateLimiter`]: a token bucket (`qps` refill, `burst` capacity) shared by all items,
//!   with the arithmetic of Go's `rate.Limiter.Reserve().Delay()`.
//! - [`MaxOfRateLimiter`]: the longest delay of several limiters.
//! - [`ItemFastSlowRateLimiter`]: a short delay for the first attempts, a long one after.
//! - [`default_controller_rate_limiter`]: max of exponential(5 ms .. 1000 s) and bucket(10 qps, 100).
//!
//! Time comes from `tokio::time::Instant` (pausable in tests); [`BucketRateLimiter::reserve_at`]
//! takes the clock as a parameter.

use std::{collections::HashMap, hash::Hash, time::Duration};

use parking_lot::Mutex;
use tokio::time::Instant;

/// Decides the retry delay of an item (client-go `RateLimiter`).
pub trait RateLimiter<T>: Send + Sync {
    /// How long `item` should wait now; counts as one more failure of it.
    fn when(&self, item: &T) -> Duration;
    /// Stops tracking `item` (it succeeded or was given up).
    fn forget(&self, item: &T);
    /// How many times `item` has been rate limited since it was last forgotten.
    fn num_requeues(&self, item: &T) -> u32;
}

impl<T, R: RateLimiter<T> + ?Sized> RateLimiter<T> for Box<R> {
    fn when(&self, item: &T) -> Duration {
        (**self).when(item)
    }
    fn forget(&self, item: &T) {
        (**self).forget(item)
    }
    fn num_requeues(&self, item: &T) -> u32 {
        (**self).num_requeues(item)
    }
}

/// `base * 2^failures`, capped at `max`, per item.
pub fn exponential_delay(base: Duration, max: Duration, failures: u32) -> Duration {
    if failures >= 64 {
        return max;
    }
    let nanos = base.as_nanos().saturating_mul(1u128 << failures);
    if nanos >= max.as_nanos() {
        max
    } else {
        // nanos < max, which fits in a Duration.
        Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX))
    }
}

/// Per-item exponential backoff (client-go `ItemExponentialFailureRateLimiter`).
#[derive(Debug)]
pub struct ItemExponentialFailureRateLimiter<T> {
    base: Duration,
    max: Duration,
    failures: Mutex<HashMap<T, u32>>,
}

impl<T: Eq + Hash> ItemExponentialFailureRateLimiter<T> {
    /// Delays of `base`, `2 base`, `4 base`, ... up to `max`.
    pub fn new(base: Duration, max: Duration) -> Self {
        Self {
            base,
            max,
            failures: Mutex::new(HashMap::new()),
        }
    }
}

impl<T: Eq + Hash + Clone + Send + Sync> RateLimiter<T> for ItemExponentialFailureRateLimiter<T> {
    fn when(&self, item: &T) -> Duration {
        let mut f = self.failures.lock();
        let n = f.entry(item.clone()).or_insert(0);
        let exp = *n;
        *n = n.saturating_add(1);
        exponential_delay(self.base, self.max, exp)
    }

    fn forget(&self, item: &T) {
        self.failures.lock().remove(item);
    }

    fn num_requeues(&self, item: &T) -> u32 {
        self.failures.lock().get(item).copied().unwrap_or(0)
    }
}

/// `fast` delay for the first `max_fast_attempts` failures of an item, `slow` after
/// (client-go `ItemFastSlowRateLimiter`).
#[derive(Debug)]
pub struct ItemFastSlowRateLimiter<T> {
    fast: Duration,
    slow: Duration,
    max_fast_attempts: u32,
    failures: Mutex<HashMap<T, u32>>,
}

impl<T: Eq + Hash> ItemFastSlowRateLimiter<T> {
    /// A fast/slow limiter.
    pub fn new(fast: Duration, slow: Duration, max_fast_attempts: u32) -> Self {
        Self {
            fast,
            slow,
            max_fast_attempts,
            failures: Mutex::new(HashMap::new()),
        }
    }
}

impl<T: Eq + Hash + Clone + Send + Sync> RateLimiter<T> for ItemFastSlowRateLimiter<T> {
    fn when(&self, item: &T) -> Duration {
        let mut f = self.failures.lock();
        let n = f.entry(item.clone()).or_insert(0);
        *n = n.saturating_add(1);
        if *n <= self.max_fast_attempts {
            self.fast
        } else {
            self.slow
        }
    }

    fn forget(&self, item: &T) {
        self.failures.lock().remove(item);
    }

    fn num_requeues(&self, item: &T) -> u32 {
        self.failures.lock().get(item).copied().unwrap_or(0)
    }
}

#[derive(Debug)]
struct Bucket {
    tokens: f64,
    last: Instant,
}

/// A token bucket shared by all items (client-go `BucketRateLimiter` over Go's `rate.Limiter`).
#[derive(Debug)]
pub struct BucketRateLimiter {
    qps: f64,
    burst: u32,
    bucket: Mutex<Bucket>,
}

impl BucketRateLimiter {
    /// A full bucket of `burst` tokens refilled at `qps` tokens per second.
    pub fn new(qps: f64, burst: u32) -> Self {
        Self::new_at(qps, burst, Instant::now())
    }

    /// Like [`BucketRateLimiter::new`] with an explicit start time.
    pub fn new_at(qps: f64, burst: u32, now: Instant) -> Self {
        Self {
            qps,
            burst,
            bucket: Mutex::new(Bucket {
                tokens: f64::from(burst),
                last: now,
            }),
        }
    }

    /// Takes one token at time `now` and returns how long to wait until it is really available.
    pub fn reserve_at(&self, now: Instant) -> Duration {
        let mut b = self.bucket.lock();
        let elapsed = now.saturating_duration_since(b.last);
        let mut tokens = b.tokens + elapsed.as_secs_f64() * self.qps;
        let burst = f64::from(self.burst);
        if tokens > burst {
            tokens = burst;
        }
        tokens -= 1.0;
        b.tokens = tokens;
        if now > b.last {
            b.last = now;
        }
        if tokens >= 0.0 || self.qps <= 0.0 {
            Duration::ZERO
        } else {
            Duration::from_secs_f64(-tokens / self.qps)
        }
    }
}

impl<T> RateLimiter<T> for BucketRateLimiter {
    fn when(&self, _item: &T) -> Duration {
        self.reserve_at(Instant::now())
    }

    fn forget(&self, _item: &T) {}

    fn num_requeues(&self, _item: &T) -> u32 {
        0
    }
}

/// The longest delay among several limiters (client-go `MaxOfRateLimiter`).
pub struct MaxOfRateLimiter<T> {
    limiters: Vec<Box<dyn RateLimiter<T>>>,
}

impl<T> std::fmt::Debug for MaxOfRateLimiter<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MaxOfRateLimiter")
            .field("limiters", &self.limiters.len())
            .finish()
    }
}

impl<T> MaxOfRateLimiter<T> {
    /// Combines `limiters`; each is consulted on every call.
    pub fn new(limiters: Vec<Box<dyn RateLimiter<T>>>) -> Self {
        Self { limiters }
    }
}

impl<T> RateLimiter<T> for MaxOfRateLimiter<T> {
    fn when(&self, item: &T) -> Duration {
        self.limiters
            .iter()
            .map(|l| l.when(item))
            .max()
            .unwrap_or(Duration::ZERO)
    }

    fn forget(&self, item: &T) {
        for l in &self.limiters {
            l.forget(item);
        }
    }

    fn num_requeues(&self, item: &T) -> u32 {
        self.limiters
            .iter()
            .map(|l| l.num_requeues(item))
            .max()
            .unwrap_or(0)
    }
}

/// client-go's `DefaultControllerRateLimiter`: max of per-item exponential (5 ms doubling to
/// 1000 s) and a 10 qps / burst 100 token bucket.
pub fn default_controller_rate_limiter<T: Eq + Hash + Clone + Send + Sync + 'static>()
-> MaxOfRateLimiter<T> {
    MaxOfRateLimiter::new(vec![
        Box::new(ItemExponentialFailureRateLimiter::new(
            Duration::from_millis(5),
            Duration::from_secs(1000),
        )),
        Box::new(BucketRateLimiter::new(10.0, 100)),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn exponential_per_item() {
        let l = ItemExponentialFailureRateLimiter::new(5 * MS, Duration::from_secs(1000));
        let want = [5, 10, 20, 40, 80, 160, 320, 640];
        for w in want {
            assert_eq!(l.when(&"a"), w * MS);
        }
        assert_eq!(l.num_requeues(&"a"), 8);
        assert_eq!(l.when(&"b"), 5 * MS, "items are independent");
        l.forget(&"a");
        assert_eq!(l.num_requeues(&"a"), 0);
        assert_eq!(l.when(&"a"), 5 * MS);
        // the cap: 5ms * 2^18 = 1310.72 s > 1000 s
        let l = ItemExponentialFailureRateLimiter::new(5 * MS, Duration::from_secs(1000));
        let mut last = Duration::ZERO;
        for i in 0..200u32 {
            let d = l.when(&1);
            assert!(d >= last);
            if i < 18 {
                assert_eq!(d, 5 * MS * 2u32.pow(i));
            } else {
                assert_eq!(d, Duration::from_secs(1000));
            }
            last = d;
        }
    }

    proptest! {
        #[test]
        fn exponential_formula(base_ms in 1u64..1000, max_s in 1u64..100_000, n in 0u32..300) {
            let base = Duration::from_millis(base_ms);
            let max = Duration::from_secs(max_s);
            let d = exponential_delay(base, max, n);
            let exact = (base_ms as f64) * 2f64.powi(n as i32) / 1000.0;
            let want = exact.min(max_s as f64);
            prop_assert!((d.as_secs_f64() - want).abs() <= want * 1e-9 + 1e-9);
        }
    }

    #[test]
    fn fast_slow() {
        let l = ItemFastSlowRateLimiter::new(MS, Duration::from_secs(10), 3);
        assert_eq!(l.when(&1), MS);
        assert_eq!(l.when(&1), MS);
        assert_eq!(l.when(&1), MS);
        assert_eq!(l.when(&1), Duration::from_secs(10));
        assert_eq!(l.num_requeues(&1), 4);
        l.forget(&1);
        assert_eq!(l.when(&1), MS);
    }

    #[test]
    fn bucket_burst_then_qps() {
        let t0 = Instant::now();
        let b = BucketRateLimiter::new_at(10.0, 100, t0);
        for _ in 0..100 {
            assert_eq!(b.reserve_at(t0), Duration::ZERO);
        }
        // 101st token: 0.1 s away, then 0.2 s, ...
        for i in 1..=10u32 {
            let d = b.reserve_at(t0);
            assert!(
                (d.as_secs_f64() - f64::from(i) * 0.1).abs() < 1e-9,
                "{i}: {d:?}"
            );
        }
        // after 1 s, ten tokens were refilled and all were already reserved: next waits 0.1 s
        let d = b.reserve_at(t0 + Duration::from_secs(1));
        assert!((d.as_secs_f64() - 0.1).abs() < 1e-9, "{d:?}");
        // a long idle period refills to burst only
        let t1 = t0 + Duration::from_secs(1000);
        for _ in 0..100 {
            assert_eq!(b.reserve_at(t1), Duration::ZERO);
        }
        assert!(b.reserve_at(t1) > Duration::ZERO);
    }

    #[tokio::test(start_paused = true)]
    async fn default_controller_limiter_is_max_of_both() {
        let l = default_controller_rate_limiter::<u32>();
        // Distinct items: exponential gives 5ms each; the bucket is free for 100 items.
        for i in 0..100 {
            assert_eq!(l.when(&i), 5 * MS);
        }
        // Item 100: exponential says 5ms, the bucket says 100ms.
        let d = l.when(&100);
        assert!((d.as_secs_f64() - 0.1).abs() < 1e-9, "{d:?}");
        // One item failing repeatedly: the exponential part dominates once large.
        tokio::time::advance(Duration::from_secs(100)).await;
        let mut d = Duration::ZERO;
        for _ in 0..12 {
            d = l.when(&7);
        }
        // 7 failed once above, so this is its 13th failure: 5ms * 2^12
        assert_eq!(d, 5 * MS * 4096);
        assert_eq!(l.num_requeues(&7), 13);
        l.forget(&7);
        assert_eq!(l.num_requeues(&7), 0);
    }
}

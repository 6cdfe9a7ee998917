//! Request rate limits per client address (ingress-nginx's `limit-rps` and `limit-rpm`,
//! which are nginx `limit_req ... burst=<rate * limit-burst-multiplier> nodelay`).
//!
//! The arithmetic is GCRA, the leaky bucket kept as one number per key: the theoretical
//! arrival time (TAT) of the next request. A request at `now` is admitted while
//! `max(TAT, now) - now <= burst * interval`, and then moves TAT one interval on. Like
//! nginx's `limit_req` with `nodelay`, that admits `burst + 1` requests at once and then
//! one per interval; nothing is queued.
//!
//! State lives in one fixed table of atomics for the whole process (every worker; like an
//! nginx shared-memory zone, so per sluice instance): no lock, no allocation, bounded
//! memory whatever the number of clients. Keys hash into [`SLOTS`] slots; two active
//! clients that collide share a bucket (stricter, never looser), which at 65,536 slots is
//! rare. Stale slots need no cleanup: a TAT in the past counts as an empty bucket.

use std::net::IpAddr;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::Instant;

use sluice_routing::RateLimit;

/// Buckets in the table (a power of two).
pub(crate) const SLOTS: usize = 1 << 16;

/// One GCRA step, in nanoseconds: the new TAT if a request at `now` is admitted.
pub(crate) fn gcra(tat: u64, now: u64, interval: u64, tolerance: u64) -> Option<u64> {
    let start = tat.max(now);
    if start - now > tolerance {
        None
    } else {
        Some(start.saturating_add(interval))
    }
}

/// Interval and tolerance (ns) of `rate` requests per `period_ns` with a burst of
/// `rate * multiplier`.
pub(crate) fn shape(rate: u32, period_ns: u64, multiplier: u32) -> (u64, u64) {
    let interval = period_ns / u64::from(rate.max(1));
    let burst = u64::from(rate).saturating_mul(u64::from(multiplier));
    (interval, interval.saturating_mul(burst))
}

/// The process's rate-limit buckets.
pub(crate) struct Limiter {
    slots: Box<[AtomicU64]>,
    /// Requests in progress per (zone, client), for `limit-connections`.
    in_progress: Box<[AtomicU32]>,
    epoch: Instant,
}

impl std::fmt::Debug for Limiter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Limiter").finish_non_exhaustive()
    }
}

impl Default for Limiter {
    fn default() -> Self {
        Limiter {
            slots: (0..SLOTS).map(|_| AtomicU64::new(0)).collect(),
            in_progress: (0..SLOTS).map(|_| AtomicU32::new(0)).collect(),
            epoch: Instant::now(),
        }
    }
}

impl Limiter {
    /// Whether `client` may send a request at `now` under `limit` (both `limit-rps` and
    /// `limit-rpm` when both are set). Clients of the allow list always may.
    pub(crate) fn admit(&self, limit: &RateLimit, client: IpAddr, now: Instant) -> bool {
        if limit.allow.iter().any(|net| net.contains(client)) {
            return true;
        }
        // +1: a TAT of 0 means "never used", which must read as an empty bucket.
        let now = u64::try_from(now.saturating_duration_since(self.epoch).as_nanos())
            .unwrap_or(u64::MAX)
            .saturating_add(1);
        let windows = [
            (limit.rps, 1_000_000_000, 1),
            (limit.rpm, 60_000_000_000, 2),
        ];
        for (rate, period, kind) in windows {
            let Some(rate) = rate else { continue };
            let (interval, tolerance) = shape(rate, period, limit.burst_multiplier);
            let slot = &self.slots[slot(limit.zone, kind, client)];
            let mut tat = slot.load(Ordering::Relaxed);
            loop {
                let Some(next) = gcra(tat, now, interval, tolerance) else {
                    return false;
                };
                match slot.compare_exchange_weak(tat, next, Ordering::Relaxed, Ordering::Relaxed) {
                    Ok(_) => break,
                    Err(current) => tat = current,
                }
            }
        }
        true
    }
}

impl Limiter {
    /// Counts a request in progress for `client` under `limit-connections` (nginx
    /// `limit_conn`): `Ok(Some(slot))` to release with [`Limiter::leave`] when the request
    /// is over, `Ok(None)` when no count applies, `Err(())` when the client is at the limit.
    pub(crate) fn enter(&self, limit: &RateLimit, client: IpAddr) -> Result<Option<usize>, ()> {
        let Some(max) = limit.connections else {
            return Ok(None);
        };
        if limit.allow.iter().any(|net| net.contains(client)) {
            return Ok(None);
        }
        let slot = slot(limit.zone, 3, client);
        let counter = &self.in_progress[slot];
        if counter.fetch_add(1, Ordering::Relaxed) >= max {
            counter.fetch_sub(1, Ordering::Relaxed);
            return Err(());
        }
        Ok(Some(slot))
    }

    /// Ends a request counted by [`Limiter::enter`].
    pub(crate) fn leave(&self, slot: usize) {
        if let Some(counter) = self.in_progress.get(slot) {
            counter.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

/// The slot of (zone, window, client): a multiplicative hash of the three.
fn slot(zone: u64, kind: u64, client: IpAddr) -> usize {
    let address = match client {
        IpAddr::V4(v4) => u128::from(v4.to_bits()),
        IpAddr::V6(v6) => v6.to_bits(),
    };
    let mut hash = zone ^ kind.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    for part in [address as u64, (address >> 64) as u64] {
        hash = (hash ^ part).wrapping_mul(0xff51_afd7_ed55_8ccd);
        hash ^= hash >> 33;
    }
    (hash as usize) & (SLOTS - 1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn limit(rps: Option<u32>, rpm: Option<u32>, multiplier: u32) -> RateLimit {
        RateLimit {
            rps,
            rpm,
            burst_multiplier: multiplier,
            connections: None,
            allow: Vec::new(),
            zone: 7,
        }
    }

    /// nginx `limit_req burst=b nodelay`: b + 1 at once, then one per interval.
    #[test]
    fn burst_then_steady_rate_like_limit_req_nodelay() {
        let limiter = Limiter::default();
        let client: IpAddr = "10.0.0.1".parse().unwrap();
        let at = limiter.epoch + Duration::from_secs(10);
        // 2 rps, multiplier 2: burst 4, so 5 at once.
        let l = limit(Some(2), None, 2);
        let admitted = (0..10).filter(|_| limiter.admit(&l, client, at)).count();
        assert_eq!(admitted, 5);
        // Half a second later one more interval has drained: one more.
        let later = at + Duration::from_millis(500);
        assert!(limiter.admit(&l, client, later));
        assert!(!limiter.admit(&l, client, later));
        // Another client has its own bucket.
        assert!(limiter.admit(&l, "10.0.0.2".parse().unwrap(), later));
        // After a quiet spell the whole burst is back, no more.
        let quiet = later + Duration::from_secs(60);
        assert_eq!(
            (0..10).filter(|_| limiter.admit(&l, client, quiet)).count(),
            5
        );
    }

    #[test]
    fn rpm_and_rps_both_apply() {
        let limiter = Limiter::default();
        let client: IpAddr = "2001:db8::1".parse().unwrap();
        let at = limiter.epoch + Duration::from_secs(1);
        let l = limit(Some(100), Some(1), 1);
        // rpm 1, burst 1: two at once, then nothing for 60 s although rps would allow.
        assert!(limiter.admit(&l, client, at));
        assert!(limiter.admit(&l, client, at));
        assert!(!limiter.admit(&l, client, at + Duration::from_secs(10)));
        assert!(limiter.admit(&l, client, at + Duration::from_secs(61)));
    }

    #[test]
    fn allow_list_is_never_limited() {
        let limiter = Limiter::default();
        let mut l = limit(Some(1), None, 1);
        l.allow = vec![sluice_routing::parse_cidr("10.0.0.0/8").unwrap()];
        let at = limiter.epoch + Duration::from_secs(1);
        let client = "10.1.2.3".parse().unwrap();
        assert!((0..100).all(|_| limiter.admit(&l, client, at)));
    }

    /// Over any window, admitted <= burst + 1 + window / interval (the GCRA bound).
    #[test]
    fn gcra_never_exceeds_its_bound() {
        let (interval, tolerance) = shape(10, 1_000_000_000, 3);
        let mut state = 0;
        let mut admitted = 0u64;
        let mut now = 1;
        // A request every 7 ms for 10 s: 1,428 asked, at most 31 + 100 admitted.
        for _ in 0..1_428 {
            if let Some(next) = gcra(state, now, interval, tolerance) {
                state = next;
                admitted += 1;
            }
            now += 7_000_000;
        }
        let window_ns = now - 1;
        assert!(admitted <= 31 + window_ns / interval, "{admitted}");
        assert!(admitted >= window_ns / interval, "{admitted}");
    }

    #[test]
    fn slots_spread_clients() {
        let mut used = std::collections::HashSet::new();
        for i in 0..1000u32 {
            used.insert(slot(
                1,
                1,
                IpAddr::V4(std::net::Ipv4Addr::from(0x0a00_0000 + i)),
            ));
        }
        assert!(used.len() > 985, "{}", used.len());
    }

    #[test]
    fn connections_are_counted_and_given_back() {
        let limiter = Limiter::default();
        let mut l = limit(None, None, 1);
        l.connections = Some(2);
        let client: IpAddr = "10.0.0.9".parse().unwrap();
        let a = limiter.enter(&l, client).unwrap().unwrap();
        let b = limiter.enter(&l, client).unwrap().unwrap();
        assert!(limiter.enter(&l, client).is_err());
        assert!(limiter.admit(&l, client, Instant::now()), "no rate set");
        limiter.leave(a);
        let c = limiter.enter(&l, client).unwrap().unwrap();
        limiter.leave(b);
        limiter.leave(c);
        assert!(limiter.enter(&l, client).unwrap().is_some());
    }
}

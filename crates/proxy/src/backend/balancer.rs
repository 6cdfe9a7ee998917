//! Endpoint choice within a backend: power of two choices on in-flight requests.
//!
//! Two random endpoints are drawn and the one with fewer requests in flight wins; that tracks
//! the least-loaded endpoint almost as well as a full scan at O(1) cost and without herding
//! (all proxies piling onto the one "least loaded" endpoint). An endpoint whose connect just
//! failed is avoided for [`DOWN_FOR`] unless nothing else is left.
//!
//! [`Endpoint`]s live in `Arc`s that are carried from one table snapshot into the next for
//! the same address, so in-flight counts and down marks survive table swaps.

use std::cell::Cell;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use sluice_routing::LoadBalance;

use super::endpoint_index::EndpointIndex;

/// How long an endpoint is avoided after a failed connect (passive health check).
pub(crate) const DOWN_FOR: Duration = Duration::from_secs(2);

/// At most one warning per endpoint this often for its failures ([`Balancer::warn_due`]).
pub(crate) const WARN_EVERY: Duration = Duration::from_secs(10);

/// Most endpoints tried for one request (the first attempt included).
pub(crate) const MAX_ATTEMPTS: usize = 8;

/// One ready address of a backend.
#[derive(Debug)]
pub(crate) struct Endpoint {
    /// Where to connect.
    pub(crate) addr: SocketAddr,
    /// [`endpoint_key`] of `addr`, worked out once per address rather than per table.
    key: u64,
    /// Requests sent here whose response has not finished yet.
    in_flight: AtomicUsize,
    /// Milliseconds since [`epoch`] until which this endpoint is avoided; 0 = never failed.
    down_until: AtomicU64,
    /// Peak-EWMA of response-head latency in microseconds (`f64` bits; 0: no sample yet),
    /// for `load-balance: ewma`.
    ewma: AtomicU64,
    /// When `ewma` was last updated, in milliseconds since [`epoch`].
    ewma_at: AtomicU64,
    /// When a failure of this endpoint was last logged at warn, in milliseconds since
    /// [`epoch`] plus one (0: never).
    warned_at: AtomicU64,
}

impl Endpoint {
    pub(super) fn new(addr: SocketAddr) -> Endpoint {
        Endpoint {
            addr,
            key: endpoint_key(addr),
            in_flight: AtomicUsize::new(0),
            down_until: AtomicU64::new(0),
            ewma: AtomicU64::new(0),
            ewma_at: AtomicU64::new(0),
            warned_at: AtomicU64::new(0),
        }
    }

    /// Requests in flight (for tests and debugging).
    #[cfg(test)]
    pub(crate) fn in_flight(&self) -> usize {
        self.in_flight.load(Ordering::Relaxed)
    }
}

/// The process-wide reference point of [`now_millis`].
fn epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

/// Milliseconds since [`epoch`] at `at` (used for down marks).
pub(crate) fn now_millis(at: Instant) -> u64 {
    u64::try_from(at.saturating_duration_since(epoch()).as_millis()).unwrap_or(u64::MAX)
}

/// The endpoints of one backend, in the table's order.
#[derive(Debug, Default)]
pub(crate) struct Balancer {
    endpoints: Box<[Arc<Endpoint>]>,
    /// [`endpoint_key`] of each endpoint (session cookies, consistent hashing).
    keys: Box<[u64]>,
    /// The next turn of `load-balance: round_robin`.
    turn: AtomicUsize,
}

/// How fast old latency samples fade (ingress-nginx's and linkerd's 10 s decay).
const EWMA_DECAY_MS: f64 = 10_000.0;

/// The peak-EWMA step (pure): a sample above the average replaces it at once (peaks are
/// believed immediately), a lower one is blended in by how long ago the last one was.
pub(crate) fn peak_ewma(previous: f64, sample: f64, elapsed_ms: f64) -> f64 {
    if previous == 0.0 || sample > previous {
        return sample;
    }
    let w = (-elapsed_ms / EWMA_DECAY_MS).exp();
    previous * w + sample * (1.0 - w)
}

/// A stable 64-bit name of an endpoint address (FNV-1a of `ip:port`): the same in every
/// sluice instance, so a session cookie set by one is understood by all.
pub(crate) fn endpoint_key(addr: SocketAddr) -> u64 {
    use std::io::Write;
    // The longest `[v6%scope]:port` is 64 bytes: formatted on the stack, not allocated.
    let mut buf = [0u8; 96];
    let mut cursor = std::io::Cursor::new(&mut buf[..]);
    let text: std::borrow::Cow<'_, [u8]> = match write!(cursor, "{addr}") {
        Ok(()) => {
            let len = usize::try_from(cursor.position()).unwrap_or(0);
            std::borrow::Cow::Borrowed(&buf[..len])
        }
        Err(_) => std::borrow::Cow::Owned(addr.to_string().into_bytes()),
    };
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for &byte in text.iter() {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    hash
}

/// Mixes a request key with an endpoint key (rendezvous hashing's weight).
fn weight(key: u64, endpoint: u64) -> u64 {
    let mut x = key ^ endpoint.rotate_left(17);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

impl Balancer {
    /// Builds the balancer for `addrs`, with the state of the [`Endpoint`]s `index` has
    /// live at those addresses (new ones for the others, recorded there for the next
    /// backend naming the same address).
    pub(crate) fn new(addrs: &[SocketAddr], index: &mut EndpointIndex) -> Balancer {
        let endpoints: Box<[Arc<Endpoint>]> = addrs.iter().map(|&a| index.endpoint(a)).collect();
        Balancer::of(endpoints)
    }

    /// A balancer over the same endpoints (and their state) as `self`, for the next table
    /// when a backend's addresses did not change.
    pub(crate) fn same_endpoints(&self) -> Balancer {
        Balancer::of(self.endpoints.clone())
    }

    /// Whether this balancer's endpoints are `addrs`, in that order.
    pub(crate) fn has_addrs(&self, addrs: &[SocketAddr]) -> bool {
        self.endpoints.len() == addrs.len()
            && self.endpoints.iter().zip(addrs).all(|(e, a)| e.addr == *a)
    }

    fn of(endpoints: Box<[Arc<Endpoint>]>) -> Balancer {
        let keys = endpoints.iter().map(|e| e.key).collect();
        Balancer {
            endpoints,
            keys,
            turn: AtomicUsize::new(0),
        }
    }

    /// The stable key of endpoint `index`.
    pub(crate) fn key(&self, index: usize) -> u64 {
        self.keys[index]
    }

    /// The endpoint whose key is `key`, if it is still here.
    pub(crate) fn find(&self, key: u64) -> Option<usize> {
        self.keys.iter().position(|&k| k == key)
    }

    /// The endpoint a request key maps to by rendezvous (highest random weight) hashing
    /// over the endpoints not down: adding or removing an endpoint moves only the keys that
    /// belong to it.
    pub(crate) fn rendezvous(&self, key: u64, now_ms: u64) -> Option<usize> {
        (0..self.endpoints.len())
            .filter(|&i| self.endpoints[i].down_until.load(Ordering::Relaxed) <= now_ms)
            .max_by_key(|&i| weight(key, self.keys[i]))
    }

    /// Takes endpoint `index` for a request, like [`Self::pick`], unless it is down or in
    /// `tried`.
    pub(crate) fn take(&self, index: usize, tried: &[usize], now_ms: u64) -> bool {
        let Some(endpoint) = self.endpoints.get(index) else {
            return false;
        };
        if tried.contains(&index) || endpoint.down_until.load(Ordering::Relaxed) > now_ms {
            return false;
        }
        endpoint.in_flight.fetch_add(1, Ordering::Relaxed);
        true
    }

    /// All endpoints.
    #[cfg(test)]
    pub(crate) fn endpoints(&self) -> &[Arc<Endpoint>] {
        &self.endpoints
    }

    /// Number of endpoints.
    pub(crate) fn len(&self) -> usize {
        self.endpoints.len()
    }

    /// Endpoint `index` (as returned by [`Self::pick`]).
    pub(crate) fn get(&self, index: usize) -> &Endpoint {
        &self.endpoints[index]
    }

    /// Picks an endpoint not in `tried`, counts a request in flight on it and returns its
    /// index; `None` when every endpoint was tried. Pair with [`Self::release`].
    pub(crate) fn pick(&self, tried: &[usize], now_ms: u64) -> Option<usize> {
        let chosen = self.choose(tried, now_ms)?;
        self.endpoints[chosen]
            .in_flight
            .fetch_add(1, Ordering::Relaxed);
        Some(chosen)
    }

    /// [`Self::pick`] with a route's `load-balance` algorithm (`None`: the default).
    pub(crate) fn pick_with(
        &self,
        mode: Option<LoadBalance>,
        tried: &[usize],
        now_ms: u64,
    ) -> Option<usize> {
        let chosen = match mode {
            None => return self.pick(tried, now_ms),
            Some(LoadBalance::RoundRobin) => self.round_robin(tried, now_ms),
            Some(LoadBalance::Ewma) => self.least_latency(tried, now_ms),
        }?;
        self.endpoints[chosen]
            .in_flight
            .fetch_add(1, Ordering::Relaxed);
        Some(chosen)
    }

    /// Records a response head after `latency` from endpoint `index` (`load-balance: ewma`).
    pub(crate) fn observe(&self, index: usize, latency: Duration, now_ms: u64) {
        let Some(e) = self.endpoints.get(index) else {
            return;
        };
        let previous = f64::from_bits(e.ewma.load(Ordering::Relaxed));
        let elapsed = now_ms.saturating_sub(e.ewma_at.swap(now_ms, Ordering::Relaxed));
        let next = peak_ewma(previous, latency.as_secs_f64() * 1e6, elapsed as f64);
        e.ewma.store(next.to_bits(), Ordering::Relaxed);
    }

    fn usable(&self, i: usize, tried: &[usize], now_ms: u64) -> bool {
        !tried.contains(&i) && self.endpoints[i].down_until.load(Ordering::Relaxed) <= now_ms
    }

    /// The next endpoint in turn that is neither tried nor down (else any not tried).
    fn round_robin(&self, tried: &[usize], now_ms: u64) -> Option<usize> {
        let n = self.endpoints.len();
        let start = self.turn.fetch_add(1, Ordering::Relaxed);
        (0..n)
            .map(|k| (start + k) % n)
            .find(|&i| self.usable(i, tried, now_ms))
            .or_else(|| (0..n).map(|k| (start + k) % n).find(|i| !tried.contains(i)))
    }

    /// Two random usable endpoints; the lower `ewma * (in flight + 1)` wins (an endpoint
    /// without a sample yet costs nothing, so it gets tried).
    fn least_latency(&self, tried: &[usize], now_ms: u64) -> Option<usize> {
        let n = self.endpoints.len();
        let cost = |i: usize| {
            let e = &self.endpoints[i];
            let ewma = f64::from_bits(e.ewma.load(Ordering::Relaxed));
            ewma * (e.in_flight.load(Ordering::Relaxed) + 1) as f64
        };
        let usable: Vec<usize> = (0..n).filter(|&i| self.usable(i, tried, now_ms)).collect();
        match usable.len() {
            0 => self.choose(tried, now_ms),
            1 => Some(usable[0]),
            m => {
                let a = usable[random_below(m)];
                let b = usable[(random_below(m - 1)
                    + 1
                    + usable.iter().position(|&x| x == a).unwrap_or(0))
                    % m];
                Some(if cost(b) < cost(a) { b } else { a })
            }
        }
    }

    /// Ends the in-flight request counted by [`Self::pick`].
    pub(crate) fn release(&self, index: usize) {
        self.endpoints[index]
            .in_flight
            .fetch_sub(1, Ordering::Relaxed);
    }

    /// Avoids endpoint `index` for a while after a failed connect.
    /// Whether a failure of endpoint `index` at `now_ms` is logged at warn: the first, and
    /// then one per [`WARN_EVERY`], so that a dead backend cannot flood the log (nginx
    /// writes every upstream failure to its error log; an operator needs the cause, not
    /// every copy of it).
    pub(crate) fn warn_due(&self, index: usize, now_ms: u64) -> bool {
        let warned_at = &self.endpoints[index].warned_at;
        let last = warned_at.load(Ordering::Relaxed);
        let due = last == 0 || now_ms + 1 >= last.saturating_add(WARN_EVERY.as_millis() as u64);
        // One thread wins the slot when several fail at once.
        due && warned_at
            .compare_exchange(last, now_ms + 1, Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
    }

    pub(crate) fn mark_down(&self, index: usize, now_ms: u64) {
        let until = now_ms.saturating_add(DOWN_FOR.as_millis() as u64);
        self.endpoints[index]
            .down_until
            .store(until, Ordering::Relaxed);
    }

    fn choose(&self, tried: &[usize], now_ms: u64) -> Option<usize> {
        let n = self.endpoints.len();
        // Lower is better: healthy before down, then fewer in flight.
        let key = |i: usize| {
            let e = &self.endpoints[i];
            let down = e.down_until.load(Ordering::Relaxed) > now_ms;
            (down, e.in_flight.load(Ordering::Relaxed))
        };
        match n {
            0 => None,
            1 => (!tried.contains(&0)).then_some(0),
            _ => {
                let a = random_below(n);
                let b = (a + 1 + random_below(n - 1)) % n;
                // On a tie the first draw wins (not the lower index, which would be biased).
                let best = match (tried.contains(&a), tried.contains(&b)) {
                    (false, false) => Some(if key(b) < key(a) { b } else { a }),
                    (false, true) => Some(a),
                    (true, false) => Some(b),
                    (true, true) => None,
                };
                match best.map(|i| (key(i), i)) {
                    Some(((false, _), i)) => Some(i),
                    // Both draws were tried or down: look at every endpoint instead.
                    _ => (0..n)
                        .filter(|i| !tried.contains(i))
                        .map(|i| (key(i), i))
                        .min()
                        .map(|(_, i)| i),
                }
            }
        }
    }
}

/// A uniformly distributed number in `0..n` (`n > 0`) from a per-thread xorshift generator:
/// fast, lock-free, and good enough for choosing endpoints.
pub(crate) fn random_below(n: usize) -> usize {
    thread_local! {
        static STATE: Cell<u64> = const { Cell::new(0) };
    }
    STATE.with(|state| {
        let mut x = state.get();
        if x == 0 {
            // Seed from the clock and the thread-local's address, distinct per thread.
            let nanos = epoch().elapsed().as_nanos() as u64;
            x = (nanos ^ (state as *const Cell<u64> as u64)).wrapping_mul(0x9E37_79B9_7F4A_7C15)
                | 1;
        }
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        state.set(x);
        ((u128::from(x) * n as u128) >> 64) as usize
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addrs(n: u16) -> Vec<SocketAddr> {
        (0..n)
            .map(|i| SocketAddr::from(([127, 0, 0, 1], 1000 + i)))
            .collect()
    }

    /// The key is FNV-1a of the address as text (what session cookies carry, so it must not
    /// change between versions): formatted on the stack, the same as through a `String`,
    /// for IPv4, IPv6, scoped and the longest IPv6 text.
    #[test]
    fn endpoint_keys_are_fnv1a_of_the_address_text() {
        fn reference(addr: SocketAddr) -> u64 {
            let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
            for byte in addr.to_string().bytes() {
                hash ^= u64::from(byte);
                hash = hash.wrapping_mul(0x0100_0000_01b3);
            }
            hash
        }
        let mut cases: Vec<SocketAddr> = vec![
            "10.0.0.1:80".parse().unwrap(),
            "255.255.255.255:65535".parse().unwrap(),
            "[::1]:8080".parse().unwrap(),
            "[ffff:ffff:ffff:ffff:ffff:ffff:255.255.255.255]:65535"
                .parse()
                .unwrap(),
        ];
        cases.push(SocketAddr::V6(std::net::SocketAddrV6::new(
            "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff".parse().unwrap(),
            65535,
            0,
            u32::MAX,
        )));
        for i in 0..2000u32 {
            let ip = std::net::Ipv4Addr::from(i.wrapping_mul(2_654_435_761));
            cases.push(SocketAddr::from((ip, (i % 65536) as u16)));
        }
        for addr in cases {
            assert_eq!(endpoint_key(addr), reference(addr), "{addr}");
        }
    }

    /// A backend whose addresses did not change keeps its endpoints' state.
    #[test]
    fn a_balancer_over_the_same_addresses_shares_their_state() {
        let mut prev = EndpointIndex::default();
        let b = Balancer::new(&addrs(3), &mut prev);
        assert!(b.has_addrs(&addrs(3)));
        assert!(!b.has_addrs(&addrs(2)));
        let again = b.same_endpoints();
        for i in 0..3 {
            assert!(Arc::ptr_eq(&b.endpoints()[i], &again.endpoints()[i]));
            assert_eq!(b.key(i), again.key(i));
        }
    }

    #[test]
    fn failures_are_warned_once_per_endpoint_and_period() {
        let mut prev = EndpointIndex::default();
        let b = Balancer::new(&addrs(2), &mut prev);
        let every = WARN_EVERY.as_millis() as u64;
        assert!(b.warn_due(0, 0), "the first failure at time 0 is warned");
        assert!(!b.warn_due(0, 1));
        assert!(!b.warn_due(0, every - 1));
        assert!(b.warn_due(1, 5), "each endpoint on its own");
        assert!(b.warn_due(0, every));
        assert!(!b.warn_due(0, every + 1));
        assert!(b.warn_due(0, 3 * every));
    }

    #[test]
    fn single_and_empty() {
        let mut prev = EndpointIndex::default();
        assert_eq!(Balancer::new(&[], &mut prev).pick(&[], 0), None);
        let b = Balancer::new(&addrs(1), &mut prev);
        assert_eq!(b.pick(&[], 0), Some(0));
        assert_eq!(b.pick(&[0], 0), None);
    }

    #[test]
    fn prefers_less_loaded() {
        let mut prev = EndpointIndex::default();
        let b = Balancer::new(&addrs(2), &mut prev);
        // Endpoint 0 busy: every pick of the pair must go to 1.
        for _ in 0..5 {
            b.endpoints[0].in_flight.fetch_add(1, Ordering::Relaxed);
        }
        for _ in 0..4 {
            assert_eq!(b.pick(&[], 0), Some(1));
        }
        assert_eq!(b.endpoints[1].in_flight(), 4);
    }

    #[test]
    fn spreads_evenly_when_released() {
        let mut prev = EndpointIndex::default();
        let b = Balancer::new(&addrs(4), &mut prev);
        let mut hits = [0usize; 4];
        for _ in 0..4000 {
            let i = b.pick(&[], 0).unwrap();
            hits[i] += 1;
            b.release(i);
        }
        assert!(hits.iter().all(|&h| h > 700), "{hits:?}");
    }

    #[test]
    fn skips_tried_and_down() {
        let mut prev = EndpointIndex::default();
        let b = Balancer::new(&addrs(3), &mut prev);
        b.mark_down(0, 1000);
        for _ in 0..50 {
            let i = b.pick(&[1], 1000).unwrap();
            assert_eq!(i, 2);
            b.release(i);
        }
        // Only down endpoints left: still used.
        assert_eq!(b.pick(&[1, 2], 1000), Some(0));
        assert_eq!(b.pick(&[0, 1, 2], 1000), None);
        // The mark expires.
        let later = 1000 + DOWN_FOR.as_millis() as u64 + 1;
        b.release(0);
        let mut seen0 = false;
        for _ in 0..100 {
            let i = b.pick(&[], later).unwrap();
            seen0 |= i == 0;
            b.release(i);
        }
        assert!(seen0);
    }

    /// The next table's balancer over some of the same addresses (a backend whose
    /// endpoints changed, or another backend naming them) shares their state.
    #[test]
    fn state_carries_over() {
        let mut index = EndpointIndex::default();
        let b1 = Balancer::new(&addrs(2), &mut index);
        let i = b1.pick(&[], 0).unwrap();
        let b2 = Balancer::new(&addrs(3), &mut index);
        assert_eq!(b2.endpoints[i].in_flight(), 1);
        b2.release(i);
        assert_eq!(b1.endpoints[i].in_flight(), 0);
        assert_eq!(b2.endpoints[2].in_flight(), 0);
    }

    #[test]
    fn random_is_in_range() {
        for n in 1..20 {
            for _ in 0..100 {
                assert!(random_below(n) < n);
            }
        }
    }

    #[test]
    fn peak_ewma_takes_peaks_at_once_and_decays_in_ten_seconds() {
        assert_eq!(peak_ewma(0.0, 500.0, 0.0), 500.0);
        assert_eq!(peak_ewma(100.0, 900.0, 1.0), 900.0);
        let after_one = peak_ewma(900.0, 100.0, 10_000.0);
        // One decay time: e^-1 of the old value remains.
        assert!((after_one - (900.0 * (-1f64).exp() + 100.0 * (1.0 - (-1f64).exp()))).abs() < 1e-9);
        assert!((peak_ewma(900.0, 100.0, 0.0) - 900.0).abs() < 1e-9);
    }

    #[test]
    fn round_robin_takes_turns_and_skips_down_endpoints() {
        let mut prev = EndpointIndex::default();
        let b = Balancer::new(&addrs(3), &mut prev);
        let turns: Vec<usize> = (0..6)
            .map(|_| {
                let i = b.pick_with(Some(LoadBalance::RoundRobin), &[], 0).unwrap();
                b.release(i);
                i
            })
            .collect();
        assert_eq!(turns, [0, 1, 2, 0, 1, 2]);
        b.mark_down(1, 0);
        let turns: Vec<usize> = (0..4)
            .map(|_| {
                let i = b.pick_with(Some(LoadBalance::RoundRobin), &[], 1).unwrap();
                b.release(i);
                i
            })
            .collect();
        assert!(!turns.contains(&1), "{turns:?}");
    }

    #[test]
    fn ewma_prefers_the_faster_endpoint() {
        let mut prev = EndpointIndex::default();
        let b = Balancer::new(&addrs(2), &mut prev);
        b.observe(0, Duration::from_millis(1), 1);
        b.observe(1, Duration::from_millis(50), 1);
        let fast = (0..100)
            .filter(|_| {
                let i = b.pick_with(Some(LoadBalance::Ewma), &[], 2).unwrap();
                b.release(i);
                i == 0
            })
            .count();
        assert_eq!(fast, 100);
    }
}

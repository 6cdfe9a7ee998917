//! The sliding-window arithmetic of lua-resty-global-throttle (what ingress-nginx's
//! global rate limit runs), pure: times in milliseconds of the wall clock, so that every
//! replica agrees on where a window starts.
//!
//! Time is cut in fixed windows of `window` (window `n` is `[n * window, (n + 1) * window)`);
//! each key has one counter per window in the store. The rate of the previous window,
//! spread over what remains of the current one, estimates the count the current window will
//! end with: `last * remaining / window + count`. A request is refused while that estimate
//! reaches the limit, or the current count alone does; the refusal lasts until the estimate
//! drops under the limit (`remaining - (limit - count) * window / last`), or to the end of
//! the window when the count alone reached it. The previous count is capped at the limit
//! (counts over it come from racing replicas and would over-punish).
//!
//! One difference, for one round trip per request: lua-resty-global-throttle reads the
//! counter, and increments it only for a request it admits (three store commands in
//! turn); sluice increments first and judges the count before its own increment, then
//! takes a refused request's increment back off the request path. The decision cache in
//! front keeps those few: once a key is refused, the replica answers it locally until the
//! refusal ends.

/// What to do with a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Let it through.
    Admit,
    /// Refuse it, and every request of its key for this many milliseconds (> 0).
    Refuse {
        /// How long the refusal lasts.
        for_ms: u64,
    },
}

/// The window time `now_ms` falls in.
pub(crate) fn window_id(now_ms: u64, window_ms: u64) -> u64 {
    now_ms / window_ms.max(1)
}

/// Milliseconds from `now_ms` to the end of its window, in `1..=window_ms`.
pub(crate) fn remaining_ms(now_ms: u64, window_ms: u64) -> u64 {
    let window_ms = window_ms.max(1);
    window_ms - now_ms % window_ms
}

/// lua-resty-global-throttle's `process_sample` for a request at `now_ms`: `count` is the
/// current window's count before this request, `last` the previous window's count.
pub(crate) fn judge(limit: u64, window_ms: u64, now_ms: u64, count: u64, last: u64) -> Verdict {
    let window_ms = window_ms.max(1);
    let remaining = remaining_ms(now_ms, window_ms);
    if count >= limit {
        return Verdict::Refuse { for_ms: remaining };
    }
    let last = u128::from(last.min(limit));
    let headroom = u128::from(limit - count) * u128::from(window_ms);
    // Estimated final count `last * remaining / window + count` against the limit, in
    // integers. At exactly the limit the library computes a delay of 0, which admits.
    if last * u128::from(remaining) <= headroom {
        return Verdict::Admit;
    }
    // `last > 0` here. The estimate falls under the limit after this long.
    let until_under = u64::try_from(headroom / last).unwrap_or(u64::MAX);
    Verdict::Refuse {
        for_ms: remaining.saturating_sub(until_under).max(1),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const S: u64 = 1000;

    #[test]
    fn windows_are_cut_on_the_wall_clock() {
        assert_eq!(window_id(0, 2 * S), 0);
        assert_eq!(window_id(1999, 2 * S), 0);
        assert_eq!(window_id(2000, 2 * S), 1);
        assert_eq!(remaining_ms(2000, 2 * S), 2000);
        assert_eq!(remaining_ms(3999, 2 * S), 1);
        assert_eq!(remaining_ms(5, 0), 1, "a zero window never divides by zero");
    }

    #[test]
    fn first_window_admits_exactly_the_limit() {
        let at = 60 * S;
        for count in 0..10 {
            assert_eq!(judge(10, 60 * S, at, count, 0), Verdict::Admit, "{count}");
        }
        assert_eq!(
            judge(10, 60 * S, at, 10, 0),
            Verdict::Refuse { for_ms: 60 * S }
        );
        assert_eq!(
            judge(10, 60 * S, at + 45 * S, 12, 0),
            Verdict::Refuse { for_ms: 15 * S }
        );
    }

    #[test]
    fn the_previous_window_weighs_on_the_start_of_the_next() {
        // The previous window was full (10 of 10): at the start of the next its rate alone
        // fills the estimate; half-way through, half the limit is left.
        let w = 10 * S;
        let start = 100 * w;
        // At the very start the estimate is exactly 10 for the first request (a delay of
        // 0: admitted); the second is refused until 10 * r / 10 + 1 < 10, r < 9 s: 1 s.
        assert_eq!(judge(10, w, start, 0, 10), Verdict::Admit);
        assert_eq!(judge(10, w, start, 1, 10), Verdict::Refuse { for_ms: S });
        let half = start + w / 2;
        for count in 0..5 {
            assert_eq!(judge(10, w, half, count, 10), Verdict::Admit, "{count}");
        }
        // At 5: 10 * 5 / 10 + 5 = 10, exactly the limit: the library's delay is 0, admitted.
        assert_eq!(judge(10, w, half, 5, 10), Verdict::Admit);
        // At 6: refused until 10 * r / 10 + 6 < 10, r < 4 s: for 1 s.
        assert_eq!(judge(10, w, half, 6, 10), Verdict::Refuse { for_ms: S });
        // A previous count over the limit counts as the limit.
        assert_eq!(judge(10, w, half, 6, 1000), Verdict::Refuse { for_ms: S });
    }

    #[test]
    fn refusals_end_within_the_window() {
        for limit in 1..6u64 {
            for count in 0..8 {
                for last in 0..8 {
                    for now in (0..4 * S).step_by(97) {
                        if let Verdict::Refuse { for_ms } = judge(limit, 2 * S, now, count, last) {
                            assert!(for_ms >= 1 && for_ms <= remaining_ms(now, 2 * S));
                            // After the refusal, the same count is admitted (or the window
                            // changed).
                            let later = now + for_ms;
                            if count < limit && window_id(later, 2 * S) == window_id(now, 2 * S) {
                                assert_eq!(
                                    judge(limit, 2 * S, later, count, last),
                                    Verdict::Admit,
                                    "{limit} {count} {last} {now}"
                                );
                            }
                        }
                    }
                }
            }
        }
    }

    /// A store shared by any number of replicas, simulated: requests at arbitrary times,
    /// each incrementing the counter of its window first and judged on the count before.
    fn simulate(limit: u64, window_ms: u64, gaps: &[u64]) -> Vec<(u64, bool)> {
        let mut counts = std::collections::HashMap::<u64, u64>::new();
        let mut now = 7;
        let mut out = Vec::new();
        for gap in gaps {
            now += gap;
            let id = window_id(now, window_ms);
            let last = id
                .checked_sub(1)
                .and_then(|p| counts.get(&p))
                .copied()
                .unwrap_or(0);
            let counter = counts.entry(id).or_default();
            let count = *counter;
            *counter += 1;
            out.push((
                now,
                judge(limit, window_ms, now, count, last) == Verdict::Admit,
            ));
        }
        out
    }

    proptest! {
        /// No fixed window admits more than the limit, and no sliding window of the same
        /// length more than twice the limit; a key idle for a whole window gets its full
        /// limit in the next.
        #[test]
        fn never_more_than_the_limit_per_window(
            limit in 1u64..20,
            window_s in 1u64..5,
            gaps in proptest::collection::vec(0u64..700, 1..400),
        ) {
            let window_ms = window_s * S;
            let log = simulate(limit, window_ms, &gaps);
            let mut per_window = std::collections::HashMap::<u64, u64>::new();
            for &(at, admitted) in &log {
                if admitted {
                    *per_window.entry(window_id(at, window_ms)).or_default() += 1;
                }
            }
            for (&id, &n) in &per_window {
                prop_assert!(n <= limit, "window {id}: {n} > {limit}");
            }
            for (i, &(at, _)) in log.iter().enumerate() {
                let admitted = log[i..]
                    .iter()
                    .take_while(|(t, _)| *t < at + window_ms)
                    .filter(|(_, ok)| *ok)
                    .count() as u64;
                prop_assert!(admitted <= 2 * limit);
            }
            // After an idle window, the first `limit` requests of a window pass.
            let mut seen = std::collections::HashMap::<u64, u64>::new();
            for &(at, admitted) in &log {
                let id = window_id(at, window_ms);
                let idle_before = id == 0 || !log.iter().any(|(t, _)| window_id(*t, window_ms) == id - 1);
                let nth = seen.entry(id).or_default();
                if idle_before && *nth < limit {
                    prop_assert!(admitted, "request {nth} of window {id} after an idle one");
                }
                *nth += 1;
            }
        }
    }
}

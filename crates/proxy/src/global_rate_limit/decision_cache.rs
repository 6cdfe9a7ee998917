//! What a replica remembers per key so that most requests cost at most one store command,
//! none for a refused client (ingress-nginx's `global_throttle_cache` shared dict):
//!
//! - a refusal and when it ends: until then the key is refused without asking the store;
//! - the previous window's count, read once per window: a window's count no longer grows
//!   once it is over, so later requests only increment the current counter.
//!
//! One map for the whole process (every worker), in shards each behind a lock held only to
//! read or write an entry, never across a store round trip. Bounded: a full shard drops its
//! stale entries, and if none is stale, everything (a forgotten entry costs one store read,
//! never a wrong answer).

use std::collections::HashMap;
use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::sync::{Mutex, PoisonError};

/// Shards (a power of two).
const SHARDS: usize = 64;
/// Entries per shard at most: 65,536 keys in all (as many as the per-replica limiter's
/// slots), a few MiB.
const PER_SHARD: usize = 1024;

/// One shard: keys to what is known of them.
type Shard = Mutex<HashMap<Box<str>, Entry>>;

#[derive(Debug, Clone, Copy, Default)]
struct Entry {
    /// Refused until this time (ms); 0: not refused.
    refused_until: u64,
    /// The count of window `last_window`, if read.
    last: Option<(u64, u64)>,
}

/// What the cache knows of a key now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Known {
    /// Refused: answer without asking the store.
    Refused,
    /// Not refused; the previous window's count when already read.
    Open {
        /// The previous window's count.
        last: Option<u64>,
    },
}

/// The process's decision cache.
#[derive(Debug)]
pub(crate) struct DecisionCache {
    shards: Box<[Shard]>,
    hasher: RandomState,
}

impl Default for DecisionCache {
    fn default() -> Self {
        DecisionCache {
            shards: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
            hasher: RandomState::new(),
        }
    }
}

impl DecisionCache {
    fn shard(&self, key: &str) -> &Shard {
        let index = (self.hasher.hash_one(key) as usize) & (SHARDS - 1);
        &self.shards[index]
    }

    /// What is known of `key` at `now_ms`, with `last_window` the id of the previous window.
    pub(crate) fn lookup(&self, key: &str, now_ms: u64, last_window: u64) -> Known {
        let shard = self
            .shard(key)
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        match shard.get(key) {
            Some(entry) if entry.refused_until > now_ms => Known::Refused,
            Some(entry) => Known::Open {
                last: entry
                    .last
                    .filter(|(id, _)| *id == last_window)
                    .map(|(_, count)| count),
            },
            None => Known::Open { last: None },
        }
    }

    /// Records what a store answer taught: the count of window `last_window` (when read)
    /// and a refusal until `refused_until` (when refused).
    pub(crate) fn record(
        &self,
        key: &str,
        now_ms: u64,
        last: Option<(u64, u64)>,
        refused_until: Option<u64>,
    ) {
        if last.is_none() && refused_until.is_none() {
            return;
        }
        let mut shard = self
            .shard(key)
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if shard.len() >= PER_SHARD && !shard.contains_key(key) {
            // A window is at least a second: an entry neither refused nor holding the count
            // of a window that ended less than a window ago is of no more use.
            shard.retain(|_, entry| entry.refused_until > now_ms);
            if shard.len() >= PER_SHARD {
                shard.clear();
            }
        }
        let entry = shard.entry(Box::from(key)).or_default();
        if let Some(last) = last {
            entry.last = Some(last);
        }
        if let Some(until) = refused_until {
            entry.refused_until = entry.refused_until.max(until);
        }
    }

    /// Entries held, for tests.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.shards
            .iter()
            .map(|s| s.lock().unwrap_or_else(PoisonError::into_inner).len())
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_is_answered_locally_until_it_ends() {
        let cache = DecisionCache::default();
        assert_eq!(cache.lookup("k", 1000, 0), Known::Open { last: None });
        cache.record("k", 1000, None, Some(1500));
        assert_eq!(cache.lookup("k", 1000, 0), Known::Refused);
        assert_eq!(cache.lookup("k", 1499, 0), Known::Refused);
        assert_eq!(cache.lookup("k", 1500, 0), Known::Open { last: None });
        assert_eq!(cache.lookup("other", 1000, 0), Known::Open { last: None });
        // A shorter refusal never shortens a longer one.
        cache.record("k", 1000, None, Some(3000));
        cache.record("k", 1000, None, Some(2000));
        assert_eq!(cache.lookup("k", 2500, 0), Known::Refused);
    }

    #[test]
    fn the_previous_count_is_kept_for_its_window_only() {
        let cache = DecisionCache::default();
        cache.record("k", 5000, Some((4, 17)), None);
        assert_eq!(cache.lookup("k", 5001, 4), Known::Open { last: Some(17) });
        assert_eq!(cache.lookup("k", 6001, 5), Known::Open { last: None });
        cache.record("k", 6001, Some((5, 3)), None);
        assert_eq!(cache.lookup("k", 6002, 5), Known::Open { last: Some(3) });
        // Nothing to record, nothing stored.
        cache.record("n", 1, None, None);
        assert_eq!(cache.len(), 1);
    }

    #[test]
    fn memory_is_bounded() {
        let cache = DecisionCache::default();
        for i in 0..(SHARDS * PER_SHARD * 2) {
            cache.record(&format!("key{i}"), 10, Some((1, 1)), None);
        }
        assert!(cache.len() <= SHARDS * PER_SHARD);
        // Live refusals survive a sweep while there is room for them.
        cache.record("refused", 10, None, Some(1_000_000));
        for i in 0..(PER_SHARD * 4) {
            cache.record(&format!("more{i}"), 20, Some((1, 1)), None);
        }
        assert_eq!(cache.lookup("refused", 30, 0), Known::Refused);
    }
}

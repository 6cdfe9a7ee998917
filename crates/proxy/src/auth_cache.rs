//! The auth service's answers kept per key (ingress-nginx's `auth-cache-key` and
//! `auth-cache-duration`, its `proxy_cache auth_cache` zone): one map for the whole process
//! (every worker), in shards each behind a lock held only to read or write an entry, never
//! across a round trip to the auth service. Bounded: a full shard drops its expired
//! entries, and if none has expired, everything (a forgotten answer costs one more auth
//! request, never a wrong one). An entry is never used after its time: an allow no more
//! than a deny.

use std::collections::HashMap;
use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use http::header::{CACHE_CONTROL, SET_COOKIE};
use http::{HeaderMap, StatusCode};

/// Shards (a power of two).
const SHARDS: usize = 64;
/// Entries per shard at most: 16,384 answers in all.
const PER_SHARD: usize = 256;

/// One kept answer: what the auth check decides from, and until when.
#[derive(Debug, Clone)]
struct Kept {
    status: StatusCode,
    headers: HeaderMap,
    until: Instant,
}

type Shard = Mutex<HashMap<Box<[u8]>, Kept>>;

/// The process's kept auth answers.
#[derive(Debug)]
pub(crate) struct AuthAnswers {
    shards: Box<[Shard]>,
    hasher: RandomState,
}

impl Default for AuthAnswers {
    fn default() -> Self {
        AuthAnswers {
            shards: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
            hasher: RandomState::new(),
        }
    }
}

/// The cache key of a request: the location, the request's host (lower case, without
/// port) and the expanded `auth-cache-key`, as ingress-nginx's starts with the server
/// name and the location's auth path. NUL separates them (no host or field holds one).
pub(crate) fn key(location: &str, host: &str, expanded: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(location.len() + host.len() + expanded.len() + 2);
    out.extend_from_slice(location.as_bytes());
    out.push(0);
    out.extend(host.bytes().map(|b| b.to_ascii_lowercase()));
    out.push(0);
    out.extend_from_slice(expanded);
    out
}

/// How long nginx's proxy cache keeps an answer that `proxy_cache_valid` gives `ttl`: not
/// at all with `Set-Cookie` or `Cache-Control: no-store`, `no-cache` or `private`; no
/// longer than its `max-age` (sluice never keeps it longer than `ttl`).
pub(crate) fn keep_for(headers: &HeaderMap, ttl: Duration) -> Option<Duration> {
    if headers.contains_key(SET_COOKIE) {
        return None;
    }
    let mut ttl = ttl;
    for value in headers.get_all(CACHE_CONTROL) {
        let value = value.to_str().ok()?;
        for directive in value.split(',').map(|d| d.trim().to_ascii_lowercase()) {
            match directive.split_once('=') {
                None if matches!(directive.as_str(), "no-store" | "no-cache" | "private") => {
                    return None;
                }
                Some(("max-age" | "s-maxage", seconds)) => {
                    let seconds: u64 = seconds.trim_matches('"').parse().ok()?;
                    ttl = ttl.min(Duration::from_secs(seconds));
                }
                _ => {}
            }
        }
    }
    (!ttl.is_zero()).then_some(ttl)
}

impl AuthAnswers {
    fn shard(&self, key: &[u8]) -> &Shard {
        let index = (self.hasher.hash_one(key) as usize) & (SHARDS - 1);
        &self.shards[index]
    }

    /// The answer kept under `key`, unless its time is over at `now`.
    pub(crate) fn get(&self, key: &[u8], now: Instant) -> Option<(StatusCode, HeaderMap)> {
        let mut shard = self
            .shard(key)
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        match shard.get(key) {
            Some(kept) if kept.until > now => Some((kept.status, kept.headers.clone())),
            Some(_) => {
                shard.remove(key);
                None
            }
            None => None,
        }
    }

    /// Keeps `status` and `headers` under `key` from `now` for `ttl`.
    pub(crate) fn put(
        &self,
        key: &[u8],
        status: StatusCode,
        headers: HeaderMap,
        now: Instant,
        ttl: Duration,
    ) {
        let Some(until) = now.checked_add(ttl) else {
            return;
        };
        let mut shard = self
            .shard(key)
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if shard.len() >= PER_SHARD && !shard.contains_key(key) {
            shard.retain(|_, kept| kept.until > now);
            if shard.len() >= PER_SHARD {
                shard.clear();
            }
        }
        shard.insert(
            Box::from(key),
            Kept {
                status,
                headers,
                until,
            },
        );
    }

    /// Answers held, for tests.
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

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        pairs
            .iter()
            .map(|(k, v)| {
                (
                    http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                    http::HeaderValue::from_str(v).unwrap(),
                )
            })
            .collect()
    }

    /// A kept answer, allow or deny, is not used after its time.
    #[test]
    fn answers_are_kept_for_their_time_only() {
        let answers = AuthAnswers::default();
        let now = Instant::now();
        let allow = key("default/app /", "App.example.com", b"token-a");
        let deny = key("default/app /", "app.example.com", b"token-b");
        answers.put(
            &allow,
            StatusCode::OK,
            HeaderMap::new(),
            now,
            Duration::from_secs(5),
        );
        answers.put(
            &deny,
            StatusCode::UNAUTHORIZED,
            HeaderMap::new(),
            now,
            Duration::from_secs(2),
        );
        assert_eq!(answers.get(&allow, now).map(|a| a.0), Some(StatusCode::OK));
        let later = now + Duration::from_secs(2);
        assert_eq!(answers.get(&deny, later), None);
        assert_eq!(
            answers.get(&allow, later).map(|a| a.0),
            Some(StatusCode::OK)
        );
        assert_eq!(answers.get(&allow, now + Duration::from_secs(5)), None);
        assert_eq!(answers.len(), 0);
        // Hosts compare without case; locations and keys do not run into each other.
        assert_eq!(allow, key("default/app /", "app.example.com", b"token-a"));
        assert_ne!(key("a", "b", b"c"), key("a", "", b"b\0c"));
    }

    #[test]
    fn the_store_stays_bounded() {
        let answers = AuthAnswers::default();
        let now = Instant::now();
        for i in 0..(SHARDS * PER_SHARD * 2) {
            let key = key("l", "h", i.to_string().as_bytes());
            answers.put(
                &key,
                StatusCode::OK,
                HeaderMap::new(),
                now,
                Duration::from_secs(60),
            );
        }
        assert!(answers.len() <= SHARDS * PER_SHARD);
    }

    /// nginx's proxy cache: `Set-Cookie` and `Cache-Control` (no-store, no-cache,
    /// private, max-age) decide before `proxy_cache_valid`'s time, never beyond it.
    #[test]
    fn cache_control_shortens_or_prevents_keeping() {
        let ttl = Duration::from_secs(300);
        assert_eq!(keep_for(&headers(&[]), ttl), Some(ttl));
        assert_eq!(keep_for(&headers(&[("set-cookie", "s=1")]), ttl), None);
        for no in [
            "no-store",
            "private",
            "No-Cache",
            "max-age=0",
            "public, no-cache",
        ] {
            assert_eq!(
                keep_for(&headers(&[("cache-control", no)]), ttl),
                None,
                "{no}"
            );
        }
        let short = headers(&[("cache-control", "public, max-age=10")]);
        assert_eq!(keep_for(&short, ttl), Some(Duration::from_secs(10)));
        let long = headers(&[("cache-control", "max-age=3600")]);
        assert_eq!(keep_for(&long, ttl), Some(ttl));
        assert_eq!(
            keep_for(&headers(&[("cache-control", "max-age=x")]), ttl),
            None
        );
    }
}

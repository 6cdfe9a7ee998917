//! The global rate limit: ingress-nginx's `global-rate-limit*` annotations, counted in a
//! store every replica shares (memcached, as ingress-nginx, or Redis), so N replicas admit
//! `global-rate-limit` requests per window in all, not N times that.
//!
//! Per request, on a route with the annotations and a configured store:
//!
//! 1. a client in `global-rate-limit-ignored-cidrs` passes, uncounted;
//! 2. the key (`global-rate-limit-key`, [`key`]) is looked up in the [`decision_cache`]: a
//!    key refused recently is refused again with no store command;
//! 3. otherwise one round trip increments the window's counter (and reads the previous
//!    window's count, once per window), and [`window`] judges the count; a refused
//!    request's increment is taken back by a task of its own, off the request path;
//! 4. a store that does not answer within `--global-rate-limit-memcached-connect-timeout`
//!    lets the request through (ingress-nginx's choice), or refuses it with 503 under
//!    `--global-rate-limit-fail-closed`; either way
//!    `sluice_global_rate_limit_store_errors_total` counts it and a warning names the store
//!    (at most one every 10 s).
//!
//! No lock is held across the round trip, and the store is asked with async I/O: a worker
//! serves other requests meanwhile.

pub(crate) mod config;
mod decision_cache;
pub(crate) mod key;
mod memcached;
mod redis;
mod window;

use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use http::StatusCode;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;
use sluice_routing::GlobalRateLimit;

use config::{GlobalRateLimitArgs, GlobalRateLimitBackend};
use decision_cache::{DecisionCache, Known};
use window::Verdict;

/// Least time between two warnings about the store.
const WARN_EVERY_MS: u64 = 10_000;

/// Why the store gave no count.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum StoreError {
    /// No connection could be opened.
    Unreachable(String),
    /// Connecting or a command took longer than the timeout.
    Timeout,
    /// The command failed or its answer made no sense.
    Failed(String),
}

impl std::fmt::Display for StoreError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StoreError::Unreachable(why) => write!(f, "unreachable: {why}"),
            StoreError::Timeout => f.write_str("no answer within the timeout"),
            StoreError::Failed(why) => write!(f, "command failed: {why}"),
        }
    }
}

/// The store of the counters.
#[derive(Debug)]
enum Store {
    Memcached(memcached::Memcached),
    Redis(redis::Redis),
}

impl Store {
    /// Takes back a refused request's increment, off the request path (a task of its
    /// own); if that fails the count stays one higher, which only makes the limit stricter.
    fn uncount(&self, key: String) {
        match self {
            Store::Memcached(store) => {
                let store = store.clone();
                tokio::spawn(async move { store.uncount(&key).await });
            }
            Store::Redis(store) => {
                let store = store.clone();
                tokio::spawn(async move { store.uncount(&key).await });
            }
        }
    }

    async fn count(
        &self,
        key: &str,
        last_key: Option<&str>,
        ttl_secs: u64,
    ) -> Result<(u64, Option<u64>), StoreError> {
        match self {
            Store::Memcached(store) => store.count(key, last_key, ttl_secs).await,
            Store::Redis(store) => store.count(key, last_key, ttl_secs).await,
        }
    }
}

/// Labels of `sluice_global_rate_limit_store_errors_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StoreLabels {
    /// `memcached` or `redis`.
    store: &'static str,
}

/// Labels of `sluice_global_rate_limit_refused_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RefusedLabels {
    /// `store`: judged on a store answer; `cache`: a cached refusal.
    by: &'static str,
}

/// The store of the global rate limit, as the flags and the ConfigMap's
/// `global-rate-limit-memcached-*` keys say: rebuilt when they change (the routing snapshot
/// holds the one in force).
#[derive(Debug)]
pub(crate) struct StoreHandle {
    store: Store,
    /// For logs: `memcached host:port` or `redis <address>`.
    name: String,
    /// `memcached` or `redis`, for the error metric.
    label: &'static str,
}

impl StoreHandle {
    /// The store `args` name; `None` without a store address (the annotations then count
    /// nothing, as in ingress-nginx).
    pub(crate) fn new(args: &GlobalRateLimitArgs) -> anyhow::Result<Option<StoreHandle>> {
        static NEXT_ID: AtomicU64 = AtomicU64::new(1);
        let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        let timeout = args.global_rate_limit_memcached_connect_timeout;
        let (store, name, label) = match args.global_rate_limit_backend {
            GlobalRateLimitBackend::Memcached => {
                let host = args.global_rate_limit_memcached_host.trim();
                if host.is_empty() {
                    return Ok(None);
                }
                let address = match host.parse::<std::net::Ipv6Addr>() {
                    Ok(v6) => format!("[{v6}]:{}", args.global_rate_limit_memcached_port),
                    Err(_) => format!("{host}:{}", args.global_rate_limit_memcached_port),
                };
                let store = memcached::Memcached {
                    id,
                    address: address.clone(),
                    timeout,
                    pool_size: args.global_rate_limit_memcached_pool_size,
                    max_idle: args.global_rate_limit_memcached_max_idle_timeout,
                };
                (
                    Store::Memcached(store),
                    format!("memcached {address}"),
                    "memcached",
                )
            }
            GlobalRateLimitBackend::Redis => {
                let Some(address) = args.global_rate_limit_redis_addr.as_deref() else {
                    anyhow::bail!(
                        "--global-rate-limit-backend redis needs --global-rate-limit-redis-addr"
                    );
                };
                let url = if address.contains("://") {
                    address.to_owned()
                } else {
                    format!("redis://{address}")
                };
                let client = ::redis::Client::open(url.as_str()).map_err(|e| {
                    anyhow::anyhow!("--global-rate-limit-redis-addr {address:?}: {e}")
                })?;
                let store = redis::Redis {
                    id,
                    client,
                    timeout,
                };
                (Store::Redis(store), format!("redis {address}"), "redis")
            }
        };
        Ok(Some(StoreHandle { store, name, label }))
    }
}

/// The global rate limit of one proxy: the decision cache and the metrics, whatever store
/// is in force.
#[derive(Debug)]
pub(crate) struct GlobalLimiter {
    cache: DecisionCache,
    /// `--global-rate-limit-status-code`.
    status: StatusCode,
    /// `--global-rate-limit-fail-closed`.
    fail_closed: bool,
    store_errors: Family<StoreLabels, Counter>,
    refused_by_store: Counter,
    refused_by_cache: Counter,
    /// When the last warning about the store was logged (ms since the epoch).
    last_warning: AtomicU64,
}

impl GlobalLimiter {
    /// The limiter of the flags, its metrics registered in `registry`.
    pub(crate) fn new(args: &GlobalRateLimitArgs, registry: &mut Registry) -> GlobalLimiter {
        let errors: Family<StoreLabels, Counter> = Family::default();
        // The flags' store shows from the start (at 0), so an alert can tell "no errors"
        // from "no data".
        let store = match args.global_rate_limit_backend {
            GlobalRateLimitBackend::Memcached => "memcached",
            GlobalRateLimitBackend::Redis => "redis",
        };
        drop(errors.get_or_create(&StoreLabels { store }));
        let refused: Family<RefusedLabels, Counter> = Family::default();
        let refused_by_store = refused
            .get_or_create(&RefusedLabels { by: "store" })
            .clone();
        let refused_by_cache = refused
            .get_or_create(&RefusedLabels { by: "cache" })
            .clone();
        let registry = registry.sub_registry_with_prefix("sluice");
        registry.register(
            "global_rate_limit_store_errors",
            "Requests whose global rate limit the store could not count (unreachable, timed \
             out or failed), let through or refused as --global-rate-limit-fail-closed says",
            errors.clone(),
        );
        registry.register(
            "global_rate_limit_refused",
            "Requests refused by a global rate limit, by what decided (store: a count just \
             read; cache: a refusal remembered until it ends)",
            refused,
        );
        GlobalLimiter {
            cache: DecisionCache::default(),
            status: StatusCode::from_u16(args.global_rate_limit_status_code)
                .unwrap_or(StatusCode::TOO_MANY_REQUESTS),
            fail_closed: args.global_rate_limit_fail_closed,
            store_errors: errors,
            refused_by_store,
            refused_by_cache,
            last_warning: AtomicU64::new(0),
        }
    }

    /// Whether `request` may go on under `limit`: `None` when it may, else the status to
    /// answer.
    pub(crate) async fn check<'a, F>(
        &self,
        store: &StoreHandle,
        limit: &GlobalRateLimit,
        request: &key::Request<'a, F>,
    ) -> Option<StatusCode>
    where
        F: Fn(&[u8]) -> Option<&'a [u8]>,
    {
        if ignored(limit, request.client) {
            return None;
        }
        let sample = key::expand(&limit.key, request);
        let base = key::base(&limit.namespace, &sample);
        let now_ms = now_ms();
        let window_ms = u64::from(limit.window_secs) * 1000;
        let id = window::window_id(now_ms, window_ms);
        let last_id = id.wrapping_sub(1);
        let known_last = match self.cache.lookup(&base, now_ms, last_id) {
            Known::Refused => {
                self.refused_by_cache.inc();
                return Some(self.status);
            }
            Known::Open { last } => last,
        };
        let current = key::counter(&base, id);
        let last_key = known_last.is_none().then(|| key::counter(&base, last_id));
        // The counter outlives its window by one: it is the next window's "previous".
        let ttl = 2 * u64::from(limit.window_secs);
        let (count, read_last) = match store.store.count(&current, last_key.as_deref(), ttl).await {
            Ok(answer) => answer,
            Err(error) => return self.store_failed(store, &error),
        };
        let last = known_last.or(read_last).unwrap_or(0);
        let verdict = window::judge(
            u64::from(limit.limit),
            window_ms,
            now_ms,
            count.saturating_sub(1),
            last,
        );
        let refused_until = match verdict {
            Verdict::Admit => None,
            Verdict::Refuse { for_ms } => Some(now_ms.saturating_add(for_ms)),
        };
        self.cache.record(
            &base,
            now_ms,
            read_last.map(|count| (last_id, count)),
            refused_until,
        );
        match verdict {
            Verdict::Admit => None,
            Verdict::Refuse { .. } => {
                // lua-resty-global-throttle counts only what it admits.
                store.store.uncount(current);
                self.refused_by_store.inc();
                Some(self.status)
            }
        }
    }

    /// The answer when the store could not count: counted, logged at most every 10 s, and
    /// open or closed as configured.
    fn store_failed(&self, store: &StoreHandle, error: &StoreError) -> Option<StatusCode> {
        self.store_errors
            .get_or_create(&StoreLabels { store: store.label })
            .inc();
        let now = now_ms();
        let last = self.last_warning.load(Ordering::Relaxed);
        if now.saturating_sub(last) >= WARN_EVERY_MS
            && self
                .last_warning
                .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            let then = if self.fail_closed {
                "refusing with 503 (--global-rate-limit-fail-closed)"
            } else {
                "letting requests through (fail open)"
            };
            tracing::warn!(
                store = %store.name,
                "global rate limit store did not count a request ({error}); {then}"
            );
        }
        self.fail_closed.then_some(StatusCode::SERVICE_UNAVAILABLE)
    }
}

/// Whether `client` is in `global-rate-limit-ignored-cidrs`.
fn ignored(limit: &GlobalRateLimit, client: IpAddr) -> bool {
    limit.ignored.iter().any(|net| net.contains(client))
}

/// Wall-clock milliseconds since the epoch: every replica cuts the same windows.
fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or(Duration::ZERO)
        .as_millis()
        .try_into()
        .unwrap_or(u64::MAX)
}

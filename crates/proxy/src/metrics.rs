//! Prometheus metrics of the data plane, shaped so the request path never allocates for them.
//!
//! Label sets are resolved once per backend (and per host seen on it) and the resulting
//! counter handles are cached; a request then costs a few relaxed atomic adds. Durations use
//! [`AtomicHistogram`], a lock-free histogram, because prometheus-client's own takes a mutex
//! on every observation.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use arc_swap::ArcSwap;
use prometheus_client::encoding::{EncodeLabelSet, EncodeMetric, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::{MetricType, TypedMetric};
use prometheus_client::registry::Registry;

/// Upper bounds (seconds) of the request duration histogram.
const REQUEST_BUCKETS: &[f64] = &[
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
    60.0,
];

/// Upper bounds (seconds) of the table rebuild duration histogram.
const REBUILD_BUCKETS: &[f64] = &[
    0.0001, 0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0,
];

/// Most distinct `host` label values one backend gets; the rest count as `"_other"`, so a
/// wildcard rule cannot blow up the series count.
const MAX_HOSTS_PER_BACKEND: usize = 16;

/// Status classes used as the `status` label.
const STATUS_CLASSES: [&str; 5] = ["1xx", "2xx", "3xx", "4xx", "5xx"];

/// Index into [`STATUS_CLASSES`] for a status code.
fn class_index(status: u16) -> usize {
    (usize::from(status / 100)).clamp(1, 5) - 1
}

/// Kinds of upstream failures (`kind` label of `sluice_upstream_errors_total`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum UpstreamErrorKind {
    /// The TCP connection could not be established (refused, unreachable, connect timeout).
    Connect = 0,
    /// The upstream sent no response head within `--upstream-header-timeout`.
    Timeout = 1,
    /// The connection failed after it was established (reset, closed early, bad response).
    Io = 2,
}

impl UpstreamErrorKind {
    const ALL: [UpstreamErrorKind; 3] = [Self::Connect, Self::Timeout, Self::Io];

    fn label(self) -> &'static str {
        match self {
            Self::Connect => "connect",
            Self::Timeout => "timeout",
            Self::Io => "io",
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    host: String,
    service: String,
    status: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ServiceLabels {
    service: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ErrorLabels {
    service: String,
    kind: &'static str,
}

/// A histogram of durations whose observations are a few relaxed atomic adds.
///
/// Clones share the same buckets (like prometheus-client's metrics).
#[derive(Clone, Debug)]
pub(crate) struct AtomicHistogram {
    inner: Arc<HistogramInner>,
}

#[derive(Debug)]
struct HistogramInner {
    /// Upper bounds in seconds; the `+Inf` bucket is implicit.
    bounds: &'static [f64],
    /// The same bounds in nanoseconds, compared against observations.
    bounds_nanos: Box<[u64]>,
    /// Per-bucket (not cumulative) counts; one more than `bounds` for `+Inf`.
    counts: Box<[AtomicU64]>,
    /// Sum of all observations in nanoseconds (584 years before it wraps).
    sum_nanos: AtomicU64,
}

impl AtomicHistogram {
    fn new(bounds: &'static [f64]) -> Self {
        AtomicHistogram {
            inner: Arc::new(HistogramInner {
                bounds,
                bounds_nanos: bounds.iter().map(|b| (b * 1e9) as u64).collect(),
                counts: (0..=bounds.len()).map(|_| AtomicU64::new(0)).collect(),
                sum_nanos: AtomicU64::new(0),
            }),
        }
    }

    /// Records one duration.
    pub(crate) fn observe(&self, elapsed: Duration) {
        let nanos = u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX);
        let inner = &*self.inner;
        let bucket = inner
            .bounds_nanos
            .iter()
            .position(|&bound| nanos <= bound)
            .unwrap_or(inner.bounds_nanos.len());
        inner.counts[bucket].fetch_add(1, Ordering::Relaxed);
        inner.sum_nanos.fetch_add(nanos, Ordering::Relaxed);
    }

    /// Number of observations so far.
    #[cfg(test)]
    pub(crate) fn count(&self) -> u64 {
        self.inner
            .counts
            .iter()
            .map(|c| c.load(Ordering::Relaxed))
            .sum()
    }
}

impl TypedMetric for AtomicHistogram {
    const TYPE: MetricType = MetricType::Histogram;
}

impl EncodeMetric for AtomicHistogram {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        let inner = &*self.inner;
        let buckets: Vec<(f64, u64)> = inner
            .bounds
            .iter()
            .copied()
            .chain(std::iter::once(f64::INFINITY))
            .zip(inner.counts.iter().map(|c| c.load(Ordering::Relaxed)))
            .collect();
        let count = buckets.iter().map(|(_, c)| c).sum();
        let sum = inner.sum_nanos.load(Ordering::Relaxed) as f64 / 1e9;
        encoder.encode_histogram::<NoLabelSet>(sum, count, &buckets, None)
    }

    fn metric_type(&self) -> MetricType {
        Self::TYPE
    }
}

fn request_histogram() -> AtomicHistogram {
    AtomicHistogram::new(REQUEST_BUCKETS)
}

/// The labelled metric families; cheap to clone (they are `Arc`s inside).
#[derive(Clone, Debug)]
struct Families {
    requests: Family<RequestLabels, Counter>,
    durations: Family<ServiceLabels, AtomicHistogram, fn() -> AtomicHistogram>,
    upstream_errors: Family<ErrorLabels, Counter>,
}

impl Families {
    fn host_counters(&self, host: &str, service: &str) -> HostCounters {
        HostCounters {
            host: host.into(),
            by_class: STATUS_CLASSES.map(|status| {
                self.requests.get_or_create_owned(&RequestLabels {
                    host: host.to_owned(),
                    service: service.to_owned(),
                    status,
                })
            }),
        }
    }
}

/// Every metric of the proxy. Shared (`Arc`) by the request path and the admin server.
#[derive(Debug)]
pub(crate) struct Metrics {
    families: Families,
    /// Table swaps done through [`crate::TableHandle::update`].
    pub(crate) rebuilds: Counter,
    /// Compile times reported with each swap.
    pub(crate) rebuild_duration: AtomicHistogram,
    /// Labels for requests that matched no route: host `"_"`, service `""`.
    unrouted: BackendMetrics,
}

impl Metrics {
    /// Creates the metrics and registers them in `registry`.
    pub(crate) fn new(registry: &mut Registry) -> Arc<Metrics> {
        let families = Families {
            requests: Family::default(),
            durations: Family::new_with_constructor(request_histogram as fn() -> AtomicHistogram),
            upstream_errors: Family::default(),
        };
        let rebuilds = Counter::default();
        let rebuild_duration = AtomicHistogram::new(REBUILD_BUCKETS);
        // Names carry no prefix here; "sluice_" comes from the sub-registry.
        let registry = registry.sub_registry_with_prefix("sluice");
        registry.register(
            "requests",
            "Requests answered, by routed host, backend service and status class",
            families.requests.clone(),
        );
        registry.register(
            "request_duration_seconds",
            "Time from request head to the end of the response body, by backend service",
            families.durations.clone(),
        );
        registry.register(
            "upstream_errors",
            "Failed attempts to get a response from an endpoint, by service and kind",
            families.upstream_errors.clone(),
        );
        registry.register(
            "table_rebuilds",
            "Routing tables swapped in",
            rebuilds.clone(),
        );
        registry.register(
            "table_rebuild_duration_seconds",
            "Time taken to compile the routing tables that were swapped in",
            rebuild_duration.clone(),
        );
        let mut unrouted = BackendMetrics::new(&families, String::new());
        // Unrouted requests have one fixed host label, so resolve it right away.
        unrouted.fixed_host = Some(families.host_counters("_", ""));
        Arc::new(Metrics {
            families,
            rebuilds,
            rebuild_duration,
            unrouted,
        })
    }

    /// Label handles for requests that matched no route.
    pub(crate) fn unrouted(&self) -> &BackendMetrics {
        &self.unrouted
    }

    /// Creates the cached label handles of one backend service (`"ns/name:port"`).
    pub(crate) fn backend(&self, service: String) -> BackendMetrics {
        BackendMetrics::new(&self.families, service)
    }
}

/// Request counters of one `(host, service)` pair, one per status class.
#[derive(Debug)]
pub(crate) struct HostCounters {
    host: Box<str>,
    by_class: [Counter; 5],
}

/// Cached metric handles of one backend service.
#[derive(Debug)]
pub(crate) struct BackendMetrics {
    /// `"ns/name:port"`, also used in access log lines.
    pub(crate) service: String,
    families: Families,
    duration: AtomicHistogram,
    errors: [Counter; 3],
    /// Counters per host seen so far, at most [`MAX_HOSTS_PER_BACKEND`] (+ `"_other"`).
    hosts: ArcSwap<Vec<Arc<HostCounters>>>,
    /// Serializes additions to `hosts` (rare: first request of a new host).
    adding: Mutex<()>,
    /// Used instead of `hosts` when the host label is fixed (unrouted requests).
    fixed_host: Option<HostCounters>,
}

impl BackendMetrics {
    fn new(families: &Families, service: String) -> Self {
        let duration = families.durations.get_or_create_owned(&ServiceLabels {
            service: service.clone(),
        });
        let errors = UpstreamErrorKind::ALL.map(|kind| {
            families.upstream_errors.get_or_create_owned(&ErrorLabels {
                service: service.clone(),
                kind: kind.label(),
            })
        });
        BackendMetrics {
            service,
            families: families.clone(),
            duration,
            errors,
            hosts: ArcSwap::from_pointee(Vec::new()),
            adding: Mutex::new(()),
            fixed_host: None,
        }
    }

    /// Counts one answered request for `host` (as received; normalized here).
    pub(crate) fn count_request(&self, host: &str, status: u16) {
        let class = class_index(status);
        if let Some(fixed) = &self.fixed_host {
            fixed.by_class[class].inc();
            return;
        }
        let host = sluice_routing::normalize_request_host(host);
        let hosts = self.hosts.load();
        if let Some(found) = hosts.iter().find(|h| *h.host == *host) {
            found.by_class[class].inc();
            return;
        }
        if hosts.len() > MAX_HOSTS_PER_BACKEND
            && let Some(other) = hosts.iter().find(|h| &*h.host == "_other")
        {
            other.by_class[class].inc();
            return;
        }
        drop(hosts);
        self.add_host(&host).by_class[class].inc();
    }

    /// Slow path of [`Self::count_request`]: registers a new host label set.
    fn add_host(&self, host: &str) -> Arc<HostCounters> {
        let _adding = self.adding.lock().unwrap_or_else(|e| e.into_inner());
        let current = self.hosts.load_full();
        let label = if current.len() >= MAX_HOSTS_PER_BACKEND {
            "_other"
        } else {
            host
        };
        if let Some(found) = current.iter().find(|h| &*h.host == label) {
            return Arc::clone(found);
        }
        let counters = Arc::new(self.families.host_counters(label, &self.service));
        let mut next = Vec::with_capacity(current.len() + 1);
        next.extend(current.iter().cloned());
        next.push(Arc::clone(&counters));
        self.hosts.store(Arc::new(next));
        counters
    }

    /// Records the total time of one request.
    pub(crate) fn observe_duration(&self, elapsed: Duration) {
        self.duration.observe(elapsed);
    }

    /// Counts one failed upstream attempt.
    pub(crate) fn upstream_error(&self, kind: UpstreamErrorKind) {
        self.errors[kind as usize].inc();
    }

    /// The duration histogram (for tests).
    #[cfg(test)]
    pub(crate) fn duration(&self) -> &AtomicHistogram {
        &self.duration
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn render(registry: &Registry) -> String {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, registry).unwrap();
        out
    }

    #[test]
    fn histogram_buckets() {
        let h = AtomicHistogram::new(&[0.001, 0.01]);
        h.observe(Duration::from_micros(500));
        h.observe(Duration::from_millis(5));
        h.observe(Duration::from_secs(1));
        assert_eq!(h.count(), 3);
        let c: Vec<u64> = h
            .inner
            .counts
            .iter()
            .map(|c| c.load(Ordering::Relaxed))
            .collect();
        assert_eq!(c, vec![1, 1, 1]);
    }

    #[test]
    fn request_counters_and_rendering() {
        let mut registry = Registry::default();
        let metrics = Metrics::new(&mut registry);
        let backend = metrics.backend("default/web:80".into());
        backend.count_request("Example.COM:8080", 200);
        backend.count_request("example.com", 204);
        backend.count_request("example.com", 503);
        backend.observe_duration(Duration::from_millis(3));
        backend.upstream_error(UpstreamErrorKind::Connect);
        metrics.unrouted().count_request("whatever", 404);
        metrics.rebuilds.inc();
        assert_eq!(backend.duration().count(), 1);
        let text = render(&registry);
        assert!(
            text.contains(
                r#"sluice_requests_total{host="example.com",service="default/web:80",status="2xx"} 2"#
            ),
            "{text}"
        );
        assert!(text.contains(
            r#"sluice_requests_total{host="example.com",service="default/web:80",status="5xx"} 1"#
        ));
        assert!(text.contains(r#"sluice_requests_total{host="_",service="",status="4xx"} 1"#));
        assert!(text.contains(
            r#"sluice_upstream_errors_total{service="default/web:80",kind="connect"} 1"#
        ));
        assert!(text.contains("sluice_table_rebuilds_total 1"));
        assert!(
            text.contains(r#"sluice_request_duration_seconds_count{service="default/web:80"} 1"#)
        );
        assert!(text.contains("sluice_table_rebuild_duration_seconds_count 0"));
    }

    #[test]
    fn host_labels_are_bounded() {
        let mut registry = Registry::default();
        let metrics = Metrics::new(&mut registry);
        let backend = metrics.backend("default/web:80".into());
        for i in 0..100 {
            backend.count_request(&format!("h{i}.example.com"), 200);
        }
        assert_eq!(backend.hosts.load().len(), MAX_HOSTS_PER_BACKEND + 1);
        let text = render(&registry);
        assert!(text.contains(
            r#"sluice_requests_total{host="_other",service="default/web:80",status="2xx"} 84"#
        ));
    }
}

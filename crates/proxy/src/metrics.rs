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
use prometheus_client::metrics::gauge::Gauge;
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

/// What became of a Gateway API `RequestMirror` copy (`result` label of
/// `sluice_mirror_requests_total`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum MirrorResult {
    /// Sent, and a response head came back (then discarded).
    Ok = 0,
    /// Connecting, sending or reading failed, or it took too long.
    Error = 1,
    /// Not sent: too many copies were in flight already.
    Dropped = 2,
    /// Not sent: the request has a body, or the mirror backend has no ready endpoint.
    Skipped = 3,
}

impl MirrorResult {
    const ALL: [MirrorResult; 4] = [Self::Ok, Self::Error, Self::Dropped, Self::Skipped];

    fn label(self) -> &'static str {
        match self {
            Self::Ok => "ok",
            Self::Error => "error",
            Self::Dropped => "dropped",
            Self::Skipped => "skipped",
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct MirrorLabels {
    result: &'static str,
}

/// Labels of the request series: the route (namespace, Ingress, Service port), the host as
/// received (bounded per route), the method (a fixed set) and the exact status. The path is
/// never a label: it is unbounded.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    namespace: String,
    ingress: String,
    service: String,
    host: String,
    method: &'static str,
    status: u16,
}

/// Labels of per-route figures without host, method or status.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RouteLabels {
    namespace: String,
    ingress: String,
    service: String,
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

/// Methods that get their own `method` label value; every other method counts as `"other"`.
const METHODS: [&str; 10] = [
    "other", "GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "CONNECT", "TRACE",
];

/// Index into [`METHODS`] of a request method.
pub(crate) fn method_index(method: &[u8]) -> u8 {
    METHODS
        .iter()
        .position(|m| m.as_bytes() == method)
        .map_or(0, |i| i as u8)
}

/// Most distinct (method, status) series per host of a route; more count as method
/// `"other"`, status 0, so a backend inventing statuses cannot blow up the series count.
const MAX_SERIES_PER_HOST: usize = 32;

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

    /// Per-bucket (not cumulative) counts, `+Inf` last.
    fn buckets(&self) -> impl Iterator<Item = u64> + '_ {
        self.inner.counts.iter().map(|c| c.load(Ordering::Relaxed))
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

thread_local! {
    /// This worker thread's `sluice_worker_requests_total` (unset on other threads). Its own
    /// counter, so counting is not a write to a cache line other workers write too.
    static WORKER_REQUESTS: std::cell::OnceCell<Counter> = const { std::cell::OnceCell::new() };
}

/// Makes `requests` the calling worker thread's `sluice_worker_requests_total`.
pub(crate) fn set_worker_requests(requests: Counter) {
    WORKER_REQUESTS.with(|r| {
        let _ = r.set(requests);
    });
}

/// Counts one answered request for the worker thread this runs on, if any.
fn count_worker_request() {
    WORKER_REQUESTS.with(|requests| {
        if let Some(requests) = requests.get() {
            requests.inc();
        }
    });
}

/// The labelled metric families; cheap to clone (they are `Arc`s inside).
#[derive(Clone, Debug)]
struct Families {
    requests: Family<RequestLabels, Counter>,
    durations: Family<RequestLabels, AtomicHistogram, fn() -> AtomicHistogram>,
    request_bytes: Family<RouteLabels, Counter>,
    response_bytes: Family<RouteLabels, Counter>,
    upstream_errors: Family<ErrorLabels, Counter>,
    upstream_connect: Family<ServiceLabels, AtomicHistogram, fn() -> AtomicHistogram>,
    upstream_header: Family<ServiceLabels, AtomicHistogram, fn() -> AtomicHistogram>,
}

/// Every metric of the proxy. Shared (`Arc`) by the request path and the admin server.
#[derive(Debug)]
pub(crate) struct Metrics {
    families: Families,
    /// Table swaps done through [`crate::TableHandle::update`].
    pub(crate) rebuilds: Counter,
    /// Compile times reported with each swap.
    pub(crate) rebuild_duration: AtomicHistogram,
    /// The generation of the routing table being served (1 for the first swap).
    pub(crate) generation: Gauge,
    /// When the table being served was swapped in (Unix seconds).
    pub(crate) last_swap: Gauge,
    /// Client connections accepted.
    pub(crate) connections_accepted: Counter,
    /// Client connections open now.
    pub(crate) connections_active: Gauge,
    /// Requests that matched no route: every route label empty.
    unrouted: Arc<RouteMetrics>,
    /// `sluice_mirror_requests_total`, indexed by [`MirrorResult`].
    mirror_requests: [Counter; 4],
}

impl Metrics {
    /// Creates the metrics and registers them in `registry`.
    pub(crate) fn new(registry: &mut Registry) -> Arc<Metrics> {
        let histogram = request_histogram as fn() -> AtomicHistogram;
        let families = Families {
            requests: Family::default(),
            durations: Family::new_with_constructor(histogram),
            request_bytes: Family::default(),
            response_bytes: Family::default(),
            upstream_errors: Family::default(),
            upstream_connect: Family::new_with_constructor(histogram),
            upstream_header: Family::new_with_constructor(histogram),
        };
        let rebuilds = Counter::default();
        let rebuild_duration = AtomicHistogram::new(REBUILD_BUCKETS);
        let generation = Gauge::default();
        let last_swap = Gauge::default();
        let connections_accepted = Counter::default();
        let connections_active = Gauge::default();
        // Names carry no prefix here; "sluice_" comes from the sub-registry.
        let registry = registry.sub_registry_with_prefix("sluice");
        registry.register(
            "requests",
            "Requests answered, by namespace, ingress, service, host, method and status",
            families.requests.clone(),
        );
        registry.register(
            "request_duration_seconds",
            "Time from request head to the end of the response body, by namespace, ingress, \
             service, host, method and status",
            families.durations.clone(),
        );
        registry.register(
            "request_bytes",
            "Request body bytes received (as declared by Content-Length), by route",
            families.request_bytes.clone(),
        );
        registry.register(
            "response_bytes",
            "Response body bytes sent, by route",
            families.response_bytes.clone(),
        );
        registry.register(
            "upstream_errors",
            "Failed attempts to get a response from an endpoint, by service and kind",
            families.upstream_errors.clone(),
        );
        registry.register(
            "upstream_connect_duration_seconds",
            "Time to open a new connection to an endpoint (TCP, and TLS for HTTPS backends), \
             by service",
            families.upstream_connect.clone(),
        );
        registry.register(
            "upstream_header_duration_seconds",
            "Time from sending a request upstream to its response head, by service",
            families.upstream_header.clone(),
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
        registry.register(
            "table_generation",
            "Generation of the routing table being served (counts swaps since start)",
            generation.clone(),
        );
        registry.register(
            "table_last_swap_timestamp_seconds",
            "When the routing table being served was swapped in (Unix time)",
            last_swap.clone(),
        );
        registry.register(
            "connections_accepted",
            "Client connections accepted",
            connections_accepted.clone(),
        );
        registry.register(
            "connections_active",
            "Client connections open now",
            connections_active.clone(),
        );
        let mirrors: Family<MirrorLabels, Counter> = Family::default();
        let mirror_requests = MirrorResult::ALL.map(|result| {
            mirrors
                .get_or_create(&MirrorLabels {
                    result: result.label(),
                })
                .clone()
        });
        registry.register(
            "mirror_requests",
            "Copies of requests for Gateway API RequestMirror filters, by result (ok, error, \
             dropped: too many in flight, skipped: a body or no endpoint)",
            mirrors,
        );
        let unrouted = Arc::new(RouteMetrics::new(&families, "", "", String::new()));
        Arc::new(Metrics {
            mirror_requests,
            families,
            rebuilds,
            rebuild_duration,
            generation,
            last_swap,
            connections_accepted,
            connections_active,
            unrouted,
        })
    }

    /// Counts one mirror copy's fate.
    pub(crate) fn mirror(&self, result: MirrorResult) {
        self.mirror_requests[result as usize].inc();
    }

    /// Label handles for requests that matched no route.
    pub(crate) fn unrouted(&self) -> &Arc<RouteMetrics> {
        &self.unrouted
    }

    /// Creates the cached label handles of one backend service (`"ns/name:port"`).
    pub(crate) fn backend(&self, service: String) -> BackendMetrics {
        BackendMetrics::new(&self.families, service)
    }

    /// Creates the cached label handles of one route: an Ingress and a backend service.
    pub(crate) fn route(&self, namespace: &str, ingress: &str, service: String) -> RouteMetrics {
        RouteMetrics::new(&self.families, namespace, ingress, service)
    }
}

/// Cached metric handles of one backend service: what is about the Service and its
/// endpoints, whichever Ingress sent the request.
#[derive(Debug)]
pub(crate) struct BackendMetrics {
    /// `"ns/name:port"`, also used in access log lines.
    pub(crate) service: String,
    errors: [Counter; 3],
    connect: AtomicHistogram,
    header: AtomicHistogram,
}

impl BackendMetrics {
    fn new(families: &Families, service: String) -> Self {
        let labels = ServiceLabels {
            service: service.clone(),
        };
        let errors = UpstreamErrorKind::ALL.map(|kind| {
            families.upstream_errors.get_or_create_owned(&ErrorLabels {
                service: service.clone(),
                kind: kind.label(),
            })
        });
        BackendMetrics {
            connect: families.upstream_connect.get_or_create_owned(&labels),
            header: families.upstream_header.get_or_create_owned(&labels),
            service,
            errors,
        }
    }

    /// Counts one failed upstream attempt.
    pub(crate) fn upstream_error(&self, kind: UpstreamErrorKind) {
        self.errors[kind as usize].inc();
    }

    /// Records the time a new upstream connection took to open.
    pub(crate) fn observe_connect(&self, elapsed: Duration) {
        self.connect.observe(elapsed);
    }

    /// Records the time from sending a request upstream to its response head.
    pub(crate) fn observe_header(&self, elapsed: Duration) {
        self.header.observe(elapsed);
    }
}

/// One request series: its count and its durations.
#[derive(Debug)]
pub(crate) struct Series {
    /// `method index << 16 | status`.
    key: u32,
    requests: Counter,
    duration: AtomicHistogram,
}

impl Series {
    /// Records the total time of the request this series counted.
    pub(crate) fn observe_duration(&self, elapsed: Duration) {
        self.duration.observe(elapsed);
    }
}

/// The series of one host of a route, added as (method, status) pairs are first seen.
#[derive(Debug)]
struct HostSeries {
    host: Box<str>,
    series: ArcSwap<Vec<Arc<Series>>>,
    /// Serializes additions to `series` (rare: first request of a new pair).
    adding: Mutex<()>,
}

/// Cached metric handles of one route: an Ingress (namespace and name) and the backend
/// service it sent a request to. Shared by later snapshots with the same labels, so counts
/// survive table swaps.
#[derive(Debug)]
pub(crate) struct RouteMetrics {
    labels: RouteLabels,
    families: Families,
    /// Per host seen so far, at most [`MAX_HOSTS_PER_BACKEND`] (+ `"_other"`).
    hosts: ArcSwap<Vec<Arc<HostSeries>>>,
    /// Serializes additions to `hosts` (rare: first request of a new host).
    adding: Mutex<()>,
    request_bytes: Counter,
    response_bytes: Counter,
}

impl RouteMetrics {
    fn new(families: &Families, namespace: &str, ingress: &str, service: String) -> Self {
        let labels = RouteLabels {
            namespace: namespace.to_owned(),
            ingress: ingress.to_owned(),
            service,
        };
        RouteMetrics {
            request_bytes: families.request_bytes.get_or_create_owned(&labels),
            response_bytes: families.response_bytes.get_or_create_owned(&labels),
            labels,
            families: families.clone(),
            hosts: ArcSwap::from_pointee(Vec::new()),
            adding: Mutex::new(()),
        }
    }

    /// (namespace, Ingress, service): what identifies these handles across snapshots.
    pub(crate) fn key(&self) -> (String, String, String) {
        (
            self.labels.namespace.clone(),
            self.labels.ingress.clone(),
            self.labels.service.clone(),
        )
    }

    /// Counts one answered request for `host` (as received; normalized here) and returns
    /// its series, for the duration observed when the request is over.
    pub(crate) fn count_request(&self, host: &str, method: u8, status: u16) -> Arc<Series> {
        count_worker_request();
        let host = if self.labels.ingress.is_empty() && self.labels.service.is_empty() {
            // Unrouted: hosts nobody configured are unbounded.
            std::borrow::Cow::Borrowed("_")
        } else {
            sluice_routing::normalize_request_host(host)
        };
        let hosts = self.hosts.load();
        let found = hosts.iter().find(|h| *h.host == *host).or_else(|| {
            (hosts.len() > MAX_HOSTS_PER_BACKEND)
                .then(|| hosts.iter().find(|h| &*h.host == "_other"))
                .flatten()
        });
        let host_series = match found {
            Some(found) => Arc::clone(found),
            None => {
                drop(hosts);
                self.add_host(&host)
            }
        };
        let key = (u32::from(method) << 16) | u32::from(status);
        let series = {
            let all = host_series.series.load();
            let hit = all.iter().find(|s| s.key == key).or_else(|| {
                (all.len() >= MAX_SERIES_PER_HOST)
                    .then(|| all.iter().find(|s| s.key == 0))
                    .flatten()
            });
            match hit {
                Some(series) => Arc::clone(series),
                None => {
                    drop(all);
                    self.add_series(&host_series, key)
                }
            }
        };
        series.requests.inc();
        series
    }

    /// Slow path of [`Self::count_request`]: registers a new host.
    fn add_host(&self, host: &str) -> Arc<HostSeries> {
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
        let added = Arc::new(HostSeries {
            host: label.into(),
            series: ArcSwap::from_pointee(Vec::new()),
            adding: Mutex::new(()),
        });
        let mut next = Vec::with_capacity(current.len() + 1);
        next.extend(current.iter().cloned());
        next.push(Arc::clone(&added));
        self.hosts.store(Arc::new(next));
        added
    }

    /// Slow path of [`Self::count_request`]: registers a new (method, status) pair.
    fn add_series(&self, host: &HostSeries, key: u32) -> Arc<Series> {
        let _adding = host.adding.lock().unwrap_or_else(|e| e.into_inner());
        let current = host.series.load_full();
        let key = if current.len() >= MAX_SERIES_PER_HOST {
            0
        } else {
            key
        };
        if let Some(found) = current.iter().find(|s| s.key == key) {
            return Arc::clone(found);
        }
        let labels = RequestLabels {
            namespace: self.labels.namespace.clone(),
            ingress: self.labels.ingress.clone(),
            service: self.labels.service.clone(),
            host: host.host.to_string(),
            method: METHODS[(key >> 16) as usize % METHODS.len()],
            status: (key & 0xffff) as u16,
        };
        let added = Arc::new(Series {
            key,
            requests: self.families.requests.get_or_create_owned(&labels),
            duration: self.families.durations.get_or_create_owned(&labels),
        });
        let mut next = Vec::with_capacity(current.len() + 1);
        next.extend(current.iter().cloned());
        next.push(Arc::clone(&added));
        host.series.store(Arc::new(next));
        added
    }

    /// Counts the body bytes of one request and its response.
    pub(crate) fn count_bytes(&self, received: u64, sent: u64) {
        if received > 0 {
            self.request_bytes.inc_by(received);
        }
        if sent > 0 {
            self.response_bytes.inc_by(sent);
        }
    }

    /// Totals over every host, method and status so far, for the dashboard: requests,
    /// 5xx answers, and the duration histogram's per-bucket counts (summed).
    pub(crate) fn totals(&self) -> RouteTotals {
        let mut totals = RouteTotals {
            requests: 0,
            errors: 0,
            buckets: vec![0; REQUEST_BUCKETS.len() + 1],
        };
        for host in self.hosts.load().iter() {
            for series in host.series.load().iter() {
                let count = series.requests.get();
                totals.requests += count;
                if (500..600).contains(&(series.key & 0xffff)) {
                    totals.errors += count;
                }
                for (sum, bucket) in totals.buckets.iter_mut().zip(series.duration.buckets()) {
                    *sum += bucket;
                }
            }
        }
        totals
    }
}

/// Cumulative figures of one route (see [`RouteMetrics::totals`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RouteTotals {
    /// Requests answered.
    pub(crate) requests: u64,
    /// Of which 5xx.
    pub(crate) errors: u64,
    /// Duration observations per bucket of [`REQUEST_BUCKETS`] (`+Inf` last), not cumulative.
    pub(crate) buckets: Vec<u64>,
}

/// Upper bounds (seconds) of the buckets in [`RouteTotals::buckets`], `+Inf` excluded.
pub(crate) fn request_bucket_bounds() -> &'static [f64] {
    REQUEST_BUCKETS
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
    fn request_series_and_rendering() {
        let mut registry = Registry::default();
        let metrics = Metrics::new(&mut registry);
        let route = metrics.route("shop", "web", "shop/web:80".into());
        let get = method_index(b"GET");
        route.count_request("Example.COM:8080", get, 200);
        route.count_request("example.com", get, 200);
        let post = route.count_request("example.com", method_index(b"POST"), 503);
        post.observe_duration(Duration::from_millis(3));
        route.count_request("example.com", method_index(b"BREW"), 418);
        route.count_bytes(10, 1000);
        let backend = metrics.backend("shop/web:80".into());
        backend.upstream_error(UpstreamErrorKind::Connect);
        backend.observe_connect(Duration::from_millis(1));
        backend.observe_header(Duration::from_millis(2));
        metrics.unrouted().count_request("whatever", get, 404);
        metrics.rebuilds.inc();
        let text = render(&registry);
        let base = r#"namespace="shop",ingress="web",service="shop/web:80",host="example.com""#;
        for line in [
            format!(r#"sluice_requests_total{{{base},method="GET",status="200"}} 2"#),
            format!(r#"sluice_requests_total{{{base},method="POST",status="503"}} 1"#),
            format!(r#"sluice_requests_total{{{base},method="other",status="418"}} 1"#),
            format!(r#"sluice_request_duration_seconds_count{{{base},method="POST",status="503"}} 1"#),
            r#"sluice_requests_total{namespace="",ingress="",service="",host="_",method="GET",status="404"} 1"#.into(),
            r#"sluice_request_bytes_total{namespace="shop",ingress="web",service="shop/web:80"} 10"#.into(),
            r#"sluice_response_bytes_total{namespace="shop",ingress="web",service="shop/web:80"} 1000"#.into(),
            r#"sluice_upstream_errors_total{service="shop/web:80",kind="connect"} 1"#.into(),
            r#"sluice_upstream_connect_duration_seconds_count{service="shop/web:80"} 1"#.into(),
            r#"sluice_upstream_header_duration_seconds_count{service="shop/web:80"} 1"#.into(),
            "sluice_table_rebuilds_total 1".into(),
            "sluice_table_rebuild_duration_seconds_count 0".into(),
        ] {
            assert!(text.contains(&line), "{line} missing in\n{text}");
        }
        let totals = route.totals();
        assert_eq!((totals.requests, totals.errors), (4, 1));
        assert_eq!(totals.buckets.iter().sum::<u64>(), 1);
    }

    #[test]
    fn host_and_status_labels_are_bounded() {
        let mut registry = Registry::default();
        let metrics = Metrics::new(&mut registry);
        let route = metrics.route("shop", "web", "shop/web:80".into());
        for i in 0..100 {
            route.count_request(&format!("h{i}.example.com"), 1, 200);
        }
        assert_eq!(route.hosts.load().len(), MAX_HOSTS_PER_BACKEND + 1);
        for status in 100..700 {
            route.count_request("h0.example.com", 1, status);
        }
        let text = render(&registry);
        assert!(text.contains(
            r#"sluice_requests_total{namespace="shop",ingress="web",service="shop/web:80",host="_other",method="GET",status="200"} 84"#
        ), "{text}");
        let h0 = text
            .lines()
            .filter(|l| {
                l.starts_with("sluice_requests_total{") && l.contains(r#"host="h0.example.com""#)
            })
            .count();
        assert_eq!(h0, MAX_SERIES_PER_HOST + 1, "{text}");
        assert!(text.contains(r#"host="h0.example.com",method="other",status="0"}"#));
    }
}

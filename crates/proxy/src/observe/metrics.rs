//! Prometheus metrics of the data plane, shaped so the request path never allocates for them.
//!
//! Label sets are resolved once per backend (and per host seen on it) and the resulting
//! counter handles are cached; a request then costs a few relaxed atomic adds, each on the
//! worker's own cache line ([`crate::runtime::shard`]), and no reference count. Durations use
//! [`ShardedHistogram`] because prometheus-client's own histogram takes a mutex on every
//! observation.

use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use crate::compress::negotiate::Coding;
use crate::runtime::shard::{
    HistogramShards, MAX_BOUNDS, ShardedCounter, ShardedGauge, ShardedHistogram, Shards,
};

/// Upper bounds (seconds) of the request duration histogram.
const REQUEST_BUCKETS: &[f64] = &[
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
    60.0,
];

/// Upper bounds (seconds) of the table rebuild duration histogram.
const REBUILD_BUCKETS: &[f64] = &[
    0.0001, 0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0,
];

// Every histogram fits a shard's row.
const _: () = assert!(REQUEST_BUCKETS.len() <= MAX_BOUNDS && REBUILD_BUCKETS.len() <= MAX_BOUNDS);

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

/// The label of `sluice_compressed_responses_total`: the `Content-Encoding` applied.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct EncodingLabels {
    encoding: &'static str,
}

/// Labels of the request series: the route (namespace, kind and name of the object that
/// defined it, Service port), the host as received (bounded per route), the method (a fixed
/// set) and the exact status. The path is never a label: it is unbounded.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct RequestLabels {
    /// The route's namespace.
    pub(crate) namespace: String,
    /// The route's object kind (`Ingress`, `HTTPRoute`, `GRPCRoute`; empty when unrouted),
    /// so routes of different kinds with one name do not share series.
    pub(crate) kind: &'static str,
    /// The route's object name (named as ingress-nginx names it, whatever the kind).
    pub(crate) ingress: String,
    /// The backend, `"ns/name:port"`.
    pub(crate) service: String,
    /// The host as received, normalized and bounded.
    pub(crate) host: String,
    /// The method, or `"other"`.
    pub(crate) method: &'static str,
    /// The status answered (0: the overflow series).
    pub(crate) status: u16,
}

/// Where [`Families`] keeps every request series as it is created, for encodings read at
/// scrape time (the ingress-nginx names). Locked only when a series is
/// first seen and when scraped, never per request.
pub(crate) type SeriesLog = Arc<Mutex<Vec<LoggedSeries>>>;

/// One request series' labels and its handles (clones share the counts).
#[derive(Clone, Debug)]
pub(crate) struct LoggedSeries {
    pub(crate) labels: RequestLabels,
    pub(crate) requests: ShardedCounter,
    pub(crate) duration: ShardedHistogram,
}

/// Labels of per-route figures without host, method or status.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RouteLabels {
    namespace: String,
    kind: &'static str,
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
    requests: Family<RequestLabels, ShardedCounter, Shards>,
    durations: Family<RequestLabels, ShardedHistogram, HistogramShards>,
    request_bytes: Family<RouteLabels, ShardedCounter, Shards>,
    response_bytes: Family<RouteLabels, ShardedCounter, Shards>,
    upstream_errors: Family<ErrorLabels, ShardedCounter, Shards>,
    upstream_connect: Family<ServiceLabels, ShardedHistogram, HistogramShards>,
    upstream_header: Family<ServiceLabels, ShardedHistogram, HistogramShards>,
    streams: Family<StreamLabels, ShardedCounter, Shards>,
    series_log: SeriesLog,
}

/// Labels of `sluice_stream_connections_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StreamLabels {
    service: String,
    /// `tcp` (TCPRoute, TLSRoute) or `udp` (UDPRoute sessions).
    transport: &'static str,
}

/// What a stream route carries (`transport` label of `sluice_stream_connections_total`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum StreamTransport {
    /// A TCP connection piped (TCPRoute, TLSRoute).
    Tcp = 0,
    /// A client's UDP session (UDPRoute).
    Udp = 1,
}

/// Every metric of the proxy. Shared (`Arc`) by the request path and the admin server.
#[derive(Debug)]
pub(crate) struct Metrics {
    families: Families,
    /// Table swaps done through [`crate::TableHandle::update`].
    pub(crate) rebuilds: Counter,
    /// Those of them whose table was compiled in part (the hosts a change touched).
    pub(crate) partial_rebuilds: Counter,
    /// Compile times reported with each swap.
    pub(crate) rebuild_duration: ShardedHistogram,
    /// The generation of the routing table being served (1 for the first swap).
    pub(crate) generation: Gauge,
    /// When the table being served was swapped in (Unix seconds).
    pub(crate) last_swap: Gauge,
    /// Client connections accepted.
    pub(crate) connections_accepted: ShardedCounter,
    /// Client connections open now.
    pub(crate) connections_active: ShardedGauge,
    /// Requests that matched no route: every route label empty.
    unrouted: Arc<RouteMetrics>,
    /// `sluice_mirror_requests_total`, indexed by [`MirrorResult`].
    mirror_requests: [Counter; 4],
    /// `sluice_compressed_responses_total`, indexed by [`Coding`] (gzip, br, zstd).
    compressed_responses: [Counter; 3],
    /// `sluice_ssl_certificate_expiry_timestamp_seconds`: each certificate of the table
    /// being served, set on every swap.
    certificate_expiry: Family<CertificateLabels, Gauge>,
    /// The same expiries, readable at scrape time (a `Family` cannot be listed).
    certificates: Mutex<Vec<(CertificateLabels, i64)>>,
    /// `sluice_leader`'s gauge, once the controller registered it.
    leader: OnceLock<Gauge>,
}

/// `sluice_leader`: 1 while this replica holds the leader Lease (ingress-nginx:
/// `nginx_ingress_controller_leader_election_status`). Registered by the controller only.
#[derive(Clone, Debug, Default)]
pub struct LeaderStatus(Gauge);

impl LeaderStatus {
    /// Registers the gauge (0 until set) in `registry`; `metrics` also reads it (for the
    /// ingress-nginx names).
    pub(crate) fn register(registry: &mut Registry, metrics: &Metrics) -> LeaderStatus {
        let status = LeaderStatus::default();
        let _ = metrics.leader.set(status.0.clone());
        registry.register(
            "sluice_leader",
            "1 while this replica holds the leader Lease (writes status and Events), else 0",
            status.0.clone(),
        );
        status
    }

    /// Whether this replica leads now.
    pub fn set(&self, leading: bool) {
        self.0.set(i64::from(leading));
    }
}

/// The label of `sluice_build_info`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BuildLabels {
    version: &'static str,
}

/// Labels of a certificate's expiry: its Secret.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct CertificateLabels {
    /// The Secret's namespace.
    pub(crate) namespace: String,
    /// The Secret's name (ingress-nginx's `secret_name`).
    pub(crate) secret: String,
    /// The leaf's first DNS name (its common name when it has none).
    pub(crate) host: String,
}

impl Metrics {
    /// Creates the metrics and registers them in `registry`; what the request path updates
    /// gets one shard per worker thread ([`Shards`]).
    pub(crate) fn new(registry: &mut Registry, shards: Shards) -> Arc<Metrics> {
        let histogram = HistogramShards {
            shards,
            bounds: REQUEST_BUCKETS,
        };
        let families = Families {
            requests: Family::new_with_constructor(shards),
            durations: Family::new_with_constructor(histogram),
            request_bytes: Family::new_with_constructor(shards),
            response_bytes: Family::new_with_constructor(shards),
            upstream_errors: Family::new_with_constructor(shards),
            upstream_connect: Family::new_with_constructor(histogram),
            upstream_header: Family::new_with_constructor(histogram),
            streams: Family::new_with_constructor(shards),
            series_log: SeriesLog::default(),
        };
        let rebuilds = Counter::default();
        let partial_rebuilds = Counter::default();
        // Observed by the control plane only: one shard.
        let rebuild_duration = Shards::new(1).histogram(REBUILD_BUCKETS);
        let generation = Gauge::default();
        let last_swap = Gauge::default();
        let connections_accepted = shards.counter();
        let connections_active = shards.gauge();
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
            "stream_connections",
            "Connections (TCP, TLS) and UDP sessions of Gateway stream routes relayed to an \
             endpoint, by service and transport",
            families.streams.clone(),
        );
        registry.register(
            "table_rebuilds",
            "Routing tables swapped in",
            rebuilds.clone(),
        );
        registry.register(
            "table_partial_rebuilds",
            "Routing tables swapped in that were compiled in part: only the hosts a change of \
             Ingresses or routes touched, or the backends of changed endpoints",
            partial_rebuilds.clone(),
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
        let encodings: Family<EncodingLabels, Counter> = Family::default();
        let compressed_responses = [Coding::Gzip, Coding::Brotli, Coding::Zstd].map(|coding| {
            encodings
                .get_or_create(&EncodingLabels {
                    encoding: coding.token(),
                })
                .clone()
        });
        registry.register(
            "compressed_responses",
            "Responses compressed by the proxy, by Content-Encoding (gzip, br, zstd)",
            encodings,
        );
        let build: Family<BuildLabels, Gauge> = Family::default();
        build
            .get_or_create(&BuildLabels {
                version: env!("CARGO_PKG_VERSION"),
            })
            .set(1);
        registry.register(
            "build_info",
            "Always 1; the version of the sluice build (ingress-nginx: nginx_ingress_controller_build_info)",
            build,
        );
        let certificate_expiry: Family<CertificateLabels, Gauge> = Family::default();
        registry.register(
            "ssl_certificate_expiry_timestamp_seconds",
            "When each certificate of the routing table expires (Unix time), by Secret and \
             host (ingress-nginx: nginx_ingress_controller_ssl_expire_time_seconds)",
            certificate_expiry.clone(),
        );
        let unrouted = Arc::new(RouteMetrics::new(&families, "", "", "", String::new()));
        Arc::new(Metrics {
            certificate_expiry,
            certificates: Mutex::default(),
            leader: OnceLock::new(),
            mirror_requests,
            compressed_responses,
            families,
            rebuilds,
            partial_rebuilds,
            rebuild_duration,
            generation,
            last_swap,
            connections_accepted,
            connections_active,
            unrouted,
        })
    }

    /// Sets the expiry gauges to the certificates of a table being swapped in (those of
    /// certificates no longer served are removed).
    pub(crate) fn set_certificates(&self, expiries: Vec<(CertificateLabels, i64)>) {
        self.certificate_expiry.clear();
        for (labels, not_after) in &expiries {
            self.certificate_expiry
                .get_or_create(labels)
                .set(*not_after);
        }
        *self
            .certificates
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = expiries;
    }

    /// Every request series so far (labels and shared handles), for scrape-time encodings.
    pub(crate) fn request_series(&self) -> Vec<LoggedSeries> {
        self.families
            .series_log
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// The expiry of each certificate being served (as `set_certificates` last set them).
    pub(crate) fn certificate_expiries(&self) -> Vec<(CertificateLabels, i64)> {
        self.certificates
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Whether this replica leads (`None`: it takes no part in leader election).
    pub(crate) fn leading(&self) -> Option<i64> {
        self.leader.get().map(Gauge::get)
    }

    /// Counts one response compressed with `coding`.
    pub(crate) fn compressed(&self, coding: Coding) {
        self.compressed_responses[coding as usize].inc();
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

    /// Creates the cached label handles of one route: its object (kind, namespace, name)
    /// and a backend service.
    pub(crate) fn route(
        &self,
        kind: &'static str,
        namespace: &str,
        ingress: &str,
        service: String,
    ) -> RouteMetrics {
        RouteMetrics::new(&self.families, kind, namespace, ingress, service)
    }
}

/// Cached metric handles of one backend service: what is about the Service and its
/// endpoints, whichever Ingress sent the request.
///
/// Each series is made the first time it counts something, not with the table: a cluster
/// has thousands of Services, most of them without errors or streams, and seven series
/// each (two of them histograms) for every one made `/metrics` megabytes long. Making one
/// takes its family's lock, once per backend and series for the life of the process (the
/// handles follow the service from table to table), as a route's host series do.
#[derive(Debug)]
pub(crate) struct BackendMetrics {
    /// `"ns/name:port"`, also used in access log lines.
    pub(crate) service: String,
    families: Families,
    errors: [OnceLock<ShardedCounter>; 3],
    connect: OnceLock<ShardedHistogram>,
    header: OnceLock<ShardedHistogram>,
    /// Indexed by [`StreamTransport`].
    streams: [OnceLock<ShardedCounter>; 2],
}

impl BackendMetrics {
    fn new(families: &Families, service: String) -> Self {
        BackendMetrics {
            service,
            families: families.clone(),
            errors: std::array::from_fn(|_| OnceLock::new()),
            connect: OnceLock::new(),
            header: OnceLock::new(),
            streams: std::array::from_fn(|_| OnceLock::new()),
        }
    }

    fn labels(&self) -> ServiceLabels {
        ServiceLabels {
            service: self.service.clone(),
        }
    }

    /// Counts one failed upstream attempt.
    pub(crate) fn upstream_error(&self, kind: UpstreamErrorKind) {
        self.errors[kind as usize]
            .get_or_init(|| {
                self.families
                    .upstream_errors
                    .get_or_create_owned(&ErrorLabels {
                        service: self.service.clone(),
                        kind: kind.label(),
                    })
            })
            .inc();
    }

    /// Records the time a new upstream connection took to open.
    pub(crate) fn observe_connect(&self, elapsed: Duration) {
        self.connect
            .get_or_init(|| {
                self.families
                    .upstream_connect
                    .get_or_create_owned(&self.labels())
            })
            .observe(elapsed);
    }

    /// Counts one stream route connection or session relayed to an endpoint.
    pub(crate) fn count_stream(&self, transport: StreamTransport) {
        let label = match transport {
            StreamTransport::Tcp => "tcp",
            StreamTransport::Udp => "udp",
        };
        self.streams[transport as usize]
            .get_or_init(|| {
                self.families.streams.get_or_create_owned(&StreamLabels {
                    service: self.service.clone(),
                    transport: label,
                })
            })
            .inc();
    }

    /// Records the time from sending a request upstream to its response head.
    pub(crate) fn observe_header(&self, elapsed: Duration) {
        self.header
            .get_or_init(|| {
                self.families
                    .upstream_header
                    .get_or_create_owned(&self.labels())
            })
            .observe(elapsed);
    }
}

/// One request series: its count and its durations.
#[derive(Debug)]
struct Series {
    /// `method index << 16 | status`; 0 for the overflow series.
    key: u32,
    requests: ShardedCounter,
    duration: ShardedHistogram,
}

/// Where [`RouteMetrics::count_request`] counted a request: the host and series slots, for
/// [`RouteMetrics::observe_duration`] when the request is over. Plain indexes, so keeping
/// one costs no reference count (a write every worker would share).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct SeriesAt {
    host: u8,
    series: u8,
}

/// Slots of a route's hosts: [`MAX_HOSTS_PER_BACKEND`] for hosts as they are first seen,
/// then `"_other"`.
const HOST_SLOTS: usize = MAX_HOSTS_PER_BACKEND + 1;

/// Slots of a host's series: [`MAX_SERIES_PER_HOST`] (method, status) pairs as they are
/// first seen, then the overflow series (method `"other"`, status 0).
const SERIES_SLOTS: usize = MAX_SERIES_PER_HOST + 1;

/// The series of one host of a route. Slots fill in order and are never emptied, so a
/// lookup scans the filled prefix and an index stays valid for the route's lifetime.
#[derive(Debug)]
struct HostSeries {
    host: Box<str>,
    series: [OnceLock<Series>; SERIES_SLOTS],
}

/// Finds `wanted` among the filled slots of `slots[..open]`, filling the first empty one
/// with `make()` when it is not there; when all are full, `slots[open]` (the overflow
/// slot) is filled with `overflow()` and used. Lock-free: two threads adding at once race
/// for a slot with `OnceLock`, and the loser moves on to the next, so no value is added twice.
fn find_or_add<T>(
    slots: &[OnceLock<T>],
    is_wanted: impl Fn(&T) -> bool,
    make: impl FnOnce() -> T,
    overflow: impl FnOnce() -> T,
) -> usize {
    let open = slots.len() - 1;
    let mut make = Some(make);
    for (index, slot) in slots[..open].iter().enumerate() {
        let value = match slot.get() {
            Some(value) => value,
            None => slot.get_or_init(|| (make.take().expect("make is used once"))()),
        };
        if is_wanted(value) {
            return index;
        }
        // `make` is only taken by a slot that then holds the wanted value.
    }
    slots[open].get_or_init(overflow);
    open
}

/// (kind, namespace, name, service) of a route's metric handles.
pub(crate) type RouteKey = (&'static str, String, String, String);

/// Cached metric handles of one route: an Ingress (namespace and name) and the backend
/// service it sent a request to. Shared by later snapshots with the same labels, so counts
/// survive table swaps.
#[derive(Debug)]
pub(crate) struct RouteMetrics {
    labels: RouteLabels,
    families: Families,
    /// Per host seen so far (see [`HOST_SLOTS`]).
    hosts: [OnceLock<Box<HostSeries>>; HOST_SLOTS],
    /// Made with the first body bytes counted (see [`BackendMetrics`] for why).
    request_bytes: OnceLock<ShardedCounter>,
    response_bytes: OnceLock<ShardedCounter>,
}

impl RouteMetrics {
    fn new(
        families: &Families,
        kind: &'static str,
        namespace: &str,
        ingress: &str,
        service: String,
    ) -> Self {
        let labels = RouteLabels {
            namespace: namespace.to_owned(),
            kind,
            ingress: ingress.to_owned(),
            service,
        };
        RouteMetrics {
            request_bytes: OnceLock::new(),
            response_bytes: OnceLock::new(),
            labels,
            families: families.clone(),
            hosts: std::array::from_fn(|_| OnceLock::new()),
        }
    }

    /// What identifies these handles across snapshots.
    pub(crate) fn key(&self) -> RouteKey {
        (
            self.labels.kind,
            self.labels.namespace.clone(),
            self.labels.ingress.clone(),
            self.labels.service.clone(),
        )
    }

    /// [`RouteMetrics::key`] borrowed: for finding handles without allocating.
    pub(crate) fn borrowed_key(&self) -> (&'static str, &str, &str, &str) {
        (
            self.labels.kind,
            &self.labels.namespace,
            &self.labels.ingress,
            &self.labels.service,
        )
    }

    /// Counts one answered request for `host` (as received; normalized here) and says
    /// where, for the duration observed when the request is over.
    pub(crate) fn count_request(&self, host: &str, method: u8, status: u16) -> SeriesAt {
        count_worker_request();
        let host = if self.labels.ingress.is_empty() && self.labels.service.is_empty() {
            // Unrouted: hosts nobody configured are unbounded.
            std::borrow::Cow::Borrowed("_")
        } else {
            sluice_routing::normalize_request_host(host)
        };
        let new_host = |label: &str| {
            Box::new(HostSeries {
                host: label.into(),
                series: std::array::from_fn(|_| OnceLock::new()),
            })
        };
        let host_at = find_or_add(
            &self.hosts,
            |h| *h.host == *host,
            || new_host(&host),
            || new_host("_other"),
        );
        let host_series = self.host(host_at);
        let key = (u32::from(method) << 16) | u32::from(status);
        let series_at = find_or_add(
            &host_series.series,
            |s| s.key == key,
            || self.new_series(&host_series.host, key),
            || self.new_series(&host_series.host, 0),
        );
        host_series.series[series_at]
            .get()
            .expect("find_or_add fills the slot it returns")
            .requests
            .inc();
        SeriesAt {
            host: host_at as u8,
            series: series_at as u8,
        }
    }

    /// The host in slot `at`, filled by [`find_or_add`].
    fn host(&self, at: usize) -> &HostSeries {
        self.hosts[at]
            .get()
            .expect("find_or_add fills the slot it returns")
    }

    /// Registers the series of (`host`, `key`) in the families.
    fn new_series(&self, host: &str, key: u32) -> Series {
        let labels = RequestLabels {
            namespace: self.labels.namespace.clone(),
            kind: self.labels.kind,
            ingress: self.labels.ingress.clone(),
            service: self.labels.service.clone(),
            host: host.to_owned(),
            method: METHODS[(key >> 16) as usize % METHODS.len()],
            status: (key & 0xffff) as u16,
        };
        let series = Series {
            key,
            requests: self.families.requests.get_or_create_owned(&labels),
            duration: self.families.durations.get_or_create_owned(&labels),
        };
        self.families
            .series_log
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(LoggedSeries {
                labels,
                requests: series.requests.clone(),
                duration: series.duration.clone(),
            });
        series
    }

    /// Records the total time of the request counted at `at`.
    pub(crate) fn observe_duration(&self, at: SeriesAt, elapsed: Duration) {
        let series = self.hosts[usize::from(at.host)]
            .get()
            .and_then(|host| host.series[usize::from(at.series)].get());
        if let Some(series) = series {
            series.duration.observe(elapsed);
        }
    }

    /// Counts the body bytes of one request and its response.
    pub(crate) fn count_bytes(&self, received: u64, sent: u64) {
        if received > 0 {
            self.request_bytes
                .get_or_init(|| {
                    self.families
                        .request_bytes
                        .get_or_create_owned(&self.labels)
                })
                .inc_by(received);
        }
        if sent > 0 {
            self.response_bytes
                .get_or_init(|| {
                    self.families
                        .response_bytes
                        .get_or_create_owned(&self.labels)
                })
                .inc_by(sent);
        }
    }

    /// Every series counted so far.
    fn series(&self) -> impl Iterator<Item = &Series> {
        self.hosts
            .iter()
            .filter_map(OnceLock::get)
            .flat_map(|host| host.series.iter().filter_map(OnceLock::get))
    }

    /// Totals over every host, method and status so far, for the dashboard: requests,
    /// 5xx answers, and the duration histogram's per-bucket counts (summed).
    pub(crate) fn totals(&self) -> RouteTotals {
        let mut totals = RouteTotals {
            requests: 0,
            errors: 0,
            buckets: vec![0; REQUEST_BUCKETS.len() + 1],
        };
        for series in self.series() {
            let count = series.requests.get();
            totals.requests += count;
            if (500..600).contains(&(series.key & 0xffff)) {
                totals.errors += count;
            }
            for (sum, bucket) in totals.buckets.iter_mut().zip(series.duration.buckets()) {
                *sum += bucket;
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
        let h = Shards::new(1).histogram(&[0.001, 0.01]);
        h.observe(Duration::from_micros(500));
        h.observe(Duration::from_millis(5));
        h.observe(Duration::from_secs(1));
        assert_eq!(h.count(), 3);
        assert_eq!(h.buckets(), vec![1, 1, 1]);
    }

    /// A backend's and a route's series appear when they first count something: thousands
    /// of Services without traffic export nothing, and counting is unchanged.
    #[test]
    fn series_are_made_when_they_first_count() {
        let mut registry = Registry::default();
        let metrics = Metrics::new(&mut registry, Shards::new(2));
        let idle = metrics.backend("shop/idle:80".into());
        let busy = metrics.backend("shop/web:80".into());
        let route = metrics.route("Ingress", "shop", "web", "shop/web:80".into());
        let text = render(&registry);
        assert!(!text.contains("shop/"), "no series yet:\n{text}");

        busy.upstream_error(UpstreamErrorKind::Timeout);
        busy.upstream_error(UpstreamErrorKind::Timeout);
        busy.observe_connect(Duration::from_millis(2));
        busy.count_stream(StreamTransport::Udp);
        route.count_bytes(0, 7);
        let text = render(&registry);
        for line in [
            r#"sluice_upstream_errors_total{service="shop/web:80",kind="timeout"} 2"#,
            r#"sluice_upstream_connect_duration_seconds_count{service="shop/web:80"} 1"#,
            r#"sluice_stream_connections_total{service="shop/web:80",transport="udp"} 1"#,
            r#"sluice_response_bytes_total{namespace="shop",kind="Ingress",ingress="web",service="shop/web:80"} 7"#,
        ] {
            assert!(text.contains(line), "{line} missing:\n{text}");
        }
        for absent in [
            "shop/idle:80",
            r#"kind="connect""#,
            "sluice_upstream_header_duration_seconds_count{",
            r#"transport="tcp""#,
            "sluice_request_bytes_total{",
        ] {
            assert!(!text.contains(absent), "{absent} present:\n{text}");
        }
        drop(idle);
    }

    #[test]
    fn request_series_and_rendering() {
        let mut registry = Registry::default();
        let metrics = Metrics::new(&mut registry, Shards::new(2));
        let route = metrics.route("Ingress", "shop", "web", "shop/web:80".into());
        let get = method_index(b"GET");
        route.count_request("Example.COM:8080", get, 200);
        route.count_request("example.com", get, 200);
        let post = route.count_request("example.com", method_index(b"POST"), 503);
        route.observe_duration(post, Duration::from_millis(3));
        route.count_request("example.com", method_index(b"BREW"), 418);
        route.count_bytes(10, 1000);
        let backend = metrics.backend("shop/web:80".into());
        backend.upstream_error(UpstreamErrorKind::Connect);
        backend.observe_connect(Duration::from_millis(1));
        backend.observe_header(Duration::from_millis(2));
        metrics.unrouted().count_request("whatever", get, 404);
        metrics.rebuilds.inc();
        let text = render(&registry);
        let base = r#"namespace="shop",kind="Ingress",ingress="web",service="shop/web:80",host="example.com""#;
        for line in [
            format!(r#"sluice_requests_total{{{base},method="GET",status="200"}} 2"#),
            format!(r#"sluice_requests_total{{{base},method="POST",status="503"}} 1"#),
            format!(r#"sluice_requests_total{{{base},method="other",status="418"}} 1"#),
            format!(r#"sluice_request_duration_seconds_count{{{base},method="POST",status="503"}} 1"#),
            r#"sluice_requests_total{namespace="",kind="",ingress="",service="",host="_",method="GET",status="404"} 1"#.into(),
            r#"sluice_request_bytes_total{namespace="shop",kind="Ingress",ingress="web",service="shop/web:80"} 10"#.into(),
            r#"sluice_response_bytes_total{namespace="shop",kind="Ingress",ingress="web",service="shop/web:80"} 1000"#.into(),
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
        let metrics = Metrics::new(&mut registry, Shards::new(2));
        let route = metrics.route("Ingress", "shop", "web", "shop/web:80".into());
        for i in 0..100 {
            route.count_request(&format!("h{i}.example.com"), 1, 200);
        }
        assert_eq!(
            route.hosts.iter().filter(|h| h.get().is_some()).count(),
            HOST_SLOTS
        );
        for status in 100..700 {
            route.count_request("h0.example.com", 1, status);
        }
        let text = render(&registry);
        assert!(text.contains(
            r#"sluice_requests_total{namespace="shop",kind="Ingress",ingress="web",service="shop/web:80",host="_other",method="GET",status="200"} 84"#
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

//! `--metrics-compat ingress-nginx`: the proxy's figures also under ingress-nginx's metric
//! names, labels and histogram buckets (`internal/ingress/metric/collectors/{socket,
//! controller,nginx_status}.go`), so its Grafana dashboards and alerts keep working.
//!
//! Nothing is counted twice: this is a collector that reads sluice's own counters when
//! `/metrics` is scraped and encodes them again. Request series are grouped by their
//! ingress-nginx labels (summed: an Ingress and an HTTPRoute of one name share them, as
//! ingress-nginx has no kind), and durations are re-bucketed exactly: every bound of
//! ingress-nginx's default `--time-buckets` is a bound of sluice's histogram.
//!
//! Counters are sent with ingress-nginx's own sample names (`..._requests`, not
//! `..._requests_total`) and OpenMetrics type `unknown`: OpenMetrics counters must end in
//! `_total`, and the dashboards query the names the Go client exposes.

use std::collections::BTreeMap;
use std::sync::Arc;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;

use crate::config::MetricsCompat;
use crate::observe::metrics::{Metrics, request_bucket_bounds};

/// ingress-nginx's metric name prefix (`PrometheusNamespace`).
const PREFIX: &str = "nginx_ingress_controller";

/// ingress-nginx's default `--time-buckets` (Prometheus' `DefBuckets`).
pub(crate) const TIME_BUCKETS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// No labels beyond the controller's.
const NO_LABELS: [(&str, &str); 0] = [];

/// Registers the collector in `registry` when `mode` asks for ingress-nginx's names.
/// `controller_class` is the IngressClass `spec.controller` value the process serves
/// (`--controller-class`), as ingress-nginx fills it with its own `--controller-class`.
pub(crate) fn register(
    mode: MetricsCompat,
    controller_class: &str,
    registry: &mut Registry,
    metrics: &Arc<Metrics>,
) {
    if mode == MetricsCompat::IngressNginx {
        registry.register_collector(Box::new(IngressNginxCollector {
            metrics: Arc::clone(metrics),
            controller: ControllerLabels::from_env(controller_class),
        }));
    }
}

/// ingress-nginx's constant labels: which controller replica answered. The pod's name and
/// namespace come from the environment ingress-nginx reads (`POD_NAME`, `POD_NAMESPACE`,
/// set by the Downward API).
#[derive(Clone, Debug, Default, Hash, PartialEq, Eq, PartialOrd, Ord, EncodeLabelSet)]
struct ControllerLabels {
    controller_class: String,
    controller_namespace: String,
    controller_pod: String,
}

impl ControllerLabels {
    fn from_env(controller_class: &str) -> ControllerLabels {
        let var = |name: &str| std::env::var(name).unwrap_or_default();
        ControllerLabels {
            controller_class: controller_class.to_owned(),
            controller_namespace: var("POD_NAMESPACE"),
            controller_pod: var("POD_NAME"),
        }
    }
}

/// ingress-nginx's `requestTags` (with `host`: `--metrics-per-host` is on by default).
/// `path` and `canary` stay empty: sluice's series carry neither (the path is unbounded).
#[derive(Clone, Debug, Hash, PartialEq, Eq, PartialOrd, Ord, EncodeLabelSet)]
struct RequestLabels {
    canary: String,
    host: String,
    ingress: String,
    method: &'static str,
    namespace: String,
    path: String,
    service: String,
    status: String,
}

/// Labels of `nginx_ingress_controller_ssl_expire_time_seconds` (`sslLabelHost`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CertificateLabels {
    namespace: String,
    class: String,
    host: String,
    secret_name: String,
    identifier: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BuildLabels {
    release: &'static str,
    build: &'static str,
    repository: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StateLabel {
    state: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct LeaseLabel {
    name: &'static str,
}

/// The Service's name in a sluice service label (`"ns/name:port"` -> `"name"`), as
/// ingress-nginx's `service` label has it.
pub(crate) fn service_name(service: &str) -> &str {
    let name = service.split_once('/').map_or(service, |(_, rest)| rest);
    name.rsplit_once(':').map_or(name, |(name, _)| name)
}

/// Per-bucket counts over `from` bounds (`+Inf` last) regrouped into buckets over `to`
/// bounds, `+Inf` last; every bound of `to` must be one of `from` for this to be exact
/// (counts between two `to` bounds are summed into the upper one).
pub(crate) fn rebucket(from: &[f64], counts: &[u64], to: &'static [f64]) -> Vec<(f64, u64)> {
    let mut out: Vec<(f64, u64)> = to
        .iter()
        .copied()
        .chain(std::iter::once(f64::INFINITY))
        .map(|bound| (bound, 0))
        .collect();
    let bounds = from.iter().copied().chain(std::iter::once(f64::INFINITY));
    for (bound, count) in bounds.zip(counts) {
        let at = out
            .iter()
            .position(|(upper, _)| bound <= *upper)
            .unwrap_or(out.len() - 1);
        out[at].1 += count;
    }
    out
}

/// One ingress-nginx request series: requests, and the duration histogram.
#[derive(Debug, Default)]
struct Figures {
    requests: u64,
    sum_seconds: f64,
    /// Per sluice bucket, `+Inf` last.
    buckets: Vec<u64>,
}

/// Reads [`Metrics`] at each scrape and encodes ingress-nginx's families.
#[derive(Debug)]
struct IngressNginxCollector {
    metrics: Arc<Metrics>,
    controller: ControllerLabels,
}

impl IngressNginxCollector {
    /// sluice's request series grouped under ingress-nginx's labels.
    fn request_figures(&self) -> BTreeMap<RequestLabels, Figures> {
        let mut grouped: BTreeMap<RequestLabels, Figures> = BTreeMap::new();
        for series in self.metrics.request_series() {
            let labels = &series.labels;
            let key = RequestLabels {
                canary: String::new(),
                host: labels.host.clone(),
                ingress: labels.ingress.clone(),
                method: labels.method,
                namespace: labels.namespace.clone(),
                path: String::new(),
                service: service_name(&labels.service).to_owned(),
                status: labels.status.to_string(),
            };
            let figures = grouped.entry(key).or_default();
            figures.requests += series.requests.get();
            figures.sum_seconds += series.duration.sum_seconds();
            let buckets = series.duration.buckets();
            if figures.buckets.len() < buckets.len() {
                figures.buckets.resize(buckets.len(), 0);
            }
            for (sum, count) in figures.buckets.iter_mut().zip(buckets) {
                *sum += count;
            }
        }
        grouped
    }

    /// A family of one sample with the controller's labels and `extra`.
    fn controller_sample(
        &self,
        encoder: &mut DescriptorEncoder,
        (name, help, kind): (&str, &str, MetricType),
        extra: impl EncodeLabelSet,
        value: i64,
    ) -> Result<(), std::fmt::Error> {
        let mut family = encoder.encode_descriptor(name, help, None, kind)?;
        family
            .encode_family(&(self.controller.clone(), extra))?
            .encode_gauge(&value)
    }
}

impl Collector for IngressNginxCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let requests = self.request_figures();
        let name = |suffix: &str| format!("{PREFIX}_{suffix}");

        let mut family = encoder.encode_descriptor(
            "nginx_ingress_controller_requests",
            "The total number of client requests",
            None,
            MetricType::Unknown,
        )?;
        for (labels, figures) in &requests {
            family
                .encode_family(&(self.controller.clone(), labels.clone()))?
                .encode_gauge(&figures.requests)?;
        }

        let mut family = encoder.encode_descriptor(
            "nginx_ingress_controller_request_duration_seconds",
            "The request processing time in seconds",
            None,
            MetricType::Histogram,
        )?;
        for (labels, figures) in &requests {
            let buckets = rebucket(request_bucket_bounds(), &figures.buckets, TIME_BUCKETS);
            let count = buckets.iter().map(|(_, c)| c).sum();
            family
                .encode_family(&(self.controller.clone(), labels.clone()))?
                .encode_histogram::<NoLabelSet>(figures.sum_seconds, count, &buckets, None)?;
        }

        let mut family = encoder.encode_descriptor(
            "nginx_ingress_controller_ssl_expire_time_seconds",
            "Number of seconds since 1970 to the SSL Certificate expire",
            None,
            MetricType::Gauge,
        )?;
        for (certificate, not_after) in self.metrics.certificate_expiries() {
            let labels = CertificateLabels {
                namespace: certificate.namespace,
                class: self.controller.controller_class.clone(),
                host: certificate.host,
                secret_name: certificate.secret,
                identifier: String::new(),
            };
            family.encode_family(&labels)?.encode_gauge(&not_after)?;
        }

        let build = BuildLabels {
            release: env!("CARGO_PKG_VERSION"),
            build: "",
            repository: env!("CARGO_PKG_REPOSITORY"),
        };
        self.controller_sample(
            &mut encoder,
            (
                &name("build_info"),
                "A metric with a constant '1' labeled with information about the build",
                MetricType::Gauge,
            ),
            build,
            1,
        )?;
        if let Some(leading) = self.metrics.leading() {
            self.controller_sample(
                &mut encoder,
                (
                    &name("leader_election_status"),
                    "Gauge reporting status of the leader election, 0 indicates follower, 1 \
                     indicates leader",
                    MetricType::Gauge,
                ),
                LeaseLabel { name: "" },
                leading,
            )?;
        }

        // Table swaps are ingress-nginx's reloads; a table that does not compile is never
        // swapped in, so every "reload" succeeded.
        let metrics = &*self.metrics;
        let swaps = i64::try_from(metrics.rebuilds.get()).unwrap_or(i64::MAX);
        let generation = metrics.generation.get();
        for (suffix, help, kind, value) in [
            (
                "success",
                "Cumulative number of Ingress controller reload operations",
                MetricType::Unknown,
                swaps,
            ),
            (
                "config_last_reload_successful",
                "Whether the last configuration reload attempt was successful",
                MetricType::Gauge,
                i64::from(generation > 0),
            ),
            (
                "config_last_reload_successful_timestamp_seconds",
                "Timestamp of the last successful configuration reload",
                MetricType::Gauge,
                metrics.last_swap.get(),
            ),
            (
                "config_hash",
                "Running configuration hash actually running (sluice: the table's generation)",
                MetricType::Gauge,
                generation,
            ),
        ] {
            self.controller_sample(&mut encoder, (&name(suffix), help, kind), NO_LABELS, value)?;
        }

        self.controller_sample(
            &mut encoder,
            (
                &name("nginx_process_connections"),
                "current number of client connections with state {active, reading, writing, \
                 waiting}",
                MetricType::Gauge,
            ),
            StateLabel { state: "active" },
            metrics.connections_active.get(),
        )?;
        let accepted = i64::try_from(metrics.connections_accepted.get()).unwrap_or(i64::MAX);
        let mut family = encoder.encode_descriptor(
            "nginx_ingress_controller_nginx_process_connections_total",
            "total number of connections with state {accepted, handled}",
            None,
            MetricType::Unknown,
        )?;
        for state in ["accepted", "handled"] {
            family
                .encode_family(&(self.controller.clone(), StateLabel { state }))?
                .encode_gauge(&accepted)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// ingress-nginx has no kind: an Ingress and an HTTPRoute of one name and Service
    /// share its series (summed), while sluice's own series keep them apart.
    #[test]
    fn routes_of_two_kinds_with_one_name_are_summed() {
        let mut registry = Registry::default();
        let metrics = Metrics::new(&mut registry, crate::runtime::shard::Shards::new(2));
        register(
            MetricsCompat::IngressNginx,
            "example.com/ingress",
            &mut registry,
            &metrics,
        );
        let get = crate::observe::metrics::method_index(b"GET");
        let ingress = metrics.route("Ingress", "shop", "web", "shop/web:80".into());
        let route = metrics.route("HTTPRoute", "shop", "web", "shop/web:80".into());
        for _ in 0..2 {
            let at = ingress.count_request("example.com", get, 200);
            ingress.observe_duration(at, std::time::Duration::from_millis(7));
        }
        let at = route.count_request("example.com", get, 200);
        route.observe_duration(at, std::time::Duration::from_secs(20));
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        let labels = r#"canary="",host="example.com",ingress="web",method="GET",namespace="shop",path="",service="web",status="200"}"#;
        let has = |prefix: &str, rest: &str| {
            text.lines()
                .any(|l| l.starts_with(prefix) && l.ends_with(&format!("{labels} {rest}")))
        };
        assert!(has("nginx_ingress_controller_requests{", "3"), "{text}");
        assert!(
            has(
                "nginx_ingress_controller_request_duration_seconds_count{",
                "3"
            ),
            "{text}"
        );
        // 7 ms: in the 0.01 bucket; 20 s: above 10 s, in +Inf only.
        let bucket = |le: &str| {
            format!(r#"nginx_ingress_controller_request_duration_seconds_bucket{{le="{le}","#)
        };
        assert!(has(&bucket("0.005"), "0"), "{text}");
        assert!(has(&bucket("0.01"), "2"), "{text}");
        assert!(has(&bucket("10.0"), "2"), "{text}");
        assert!(has(&bucket("+Inf"), "3"), "{text}");
        for kind in ["Ingress", "HTTPRoute"] {
            let own =
                format!(r#"sluice_requests_total{{namespace="shop",kind="{kind}",ingress="web","#);
            assert!(text.lines().any(|l| l.starts_with(&own)), "{kind}: {text}");
        }
    }

    #[test]
    fn service_name_is_the_services_name() {
        assert_eq!(service_name("shop/web:80"), "web");
        assert_eq!(service_name("shop/web:http"), "web");
        assert_eq!(service_name("default/:0"), "");
        assert_eq!(service_name(""), "");
    }

    /// Every bound of ingress-nginx's `--time-buckets` default is one of sluice's, so the
    /// derived histogram is exact.
    #[test]
    fn time_buckets_are_sluice_bounds() {
        for bound in TIME_BUCKETS {
            assert!(request_bucket_bounds().contains(bound), "{bound}");
        }
    }

    #[test]
    fn rebucket_sums_into_the_upper_bound() {
        let from = [0.001, 0.005, 0.01, 30.0];
        let to: &'static [f64] = &[0.005, 0.01];
        // 0.001 and 0.005 -> 0.005; 0.01 -> 0.01; 30 and +Inf -> +Inf.
        assert_eq!(
            rebucket(&from, &[1, 2, 3, 4, 5], to),
            vec![(0.005, 3), (0.01, 3), (f64::INFINITY, 9)]
        );
    }

    proptest::proptest! {
        /// Re-bucketing keeps every observation, and the cumulative count at each target
        /// bound equals the source's cumulative count at that bound.
        #[test]
        fn rebucket_keeps_cumulative_counts(counts in proptest::collection::vec(0u64..1000, 17)) {
            let from = request_bucket_bounds();
            let out = rebucket(from, &counts, TIME_BUCKETS);
            proptest::prop_assert_eq!(out.iter().map(|(_, c)| c).sum::<u64>(), counts.iter().sum::<u64>());
            for (at, bound) in TIME_BUCKETS.iter().enumerate() {
                let source: u64 = from.iter().zip(&counts).filter(|(b, _)| *b <= bound).map(|(_, c)| c).sum();
                let target: u64 = out[..=at].iter().map(|(_, c)| c).sum();
                proptest::prop_assert_eq!(source, target);
            }
        }
    }
}

//! The tracing flags, named and valued as ingress-nginx's ConfigMap keys (`enable-opentelemetry`,
//! `opentelemetry-*`, `otlp-collector-*`, `otel-*`): each field is its key with `_`.

use std::time::Duration;

use super::sampler::{OtelSampler, Sampling};

/// `otel-sampler-ratio`: a share within 0 to 1 (a newtype so the flags stay `Eq`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SamplerRatio(pub f64);

impl Eq for SamplerRatio {}

impl Default for SamplerRatio {
    /// ingress-nginx's default, 0.01.
    fn default() -> Self {
        SamplerRatio(0.01)
    }
}

/// Parses `otel-sampler-ratio`: a number from 0 to 1.
pub fn parse_sampler_ratio(text: &str) -> Result<SamplerRatio, String> {
    match text.trim().parse::<f64>() {
        Ok(ratio) if (0.0..=1.0).contains(&ratio) => Ok(SamplerRatio(ratio)),
        _ => Err(format!("{text:?} is not a number from 0 to 1")),
    }
}

/// Distributed tracing (W3C Trace Context, OpenTelemetry spans exported over OTLP/gRPC).
/// Off unless a collector host is set; then `enable-opentelemetry` (or the Ingress
/// annotation of that name) decides per route.
#[derive(clap::Args, Clone, Debug, PartialEq, Eq)]
pub struct Tracing {
    /// Trace every route's requests (ingress-nginx's `enable-opentelemetry`); an Ingress's
    /// `enable-opentelemetry` annotation overrides it. Needs `--otlp-collector-host`.
    #[arg(long, default_value = "false", value_name = "BOOL", value_parser = sluice_units::parse_bool, num_args = 0..=1,
          require_equals = true, default_missing_value = "true")]
    pub enable_opentelemetry: bool,

    /// Continue the caller's trace from its `traceparent`/`tracestate` (ingress-nginx's
    /// `opentelemetry-trust-incoming-span`); `false`: every request starts a new trace and
    /// nothing of the caller's is kept. The annotation of that name overrides it.
    #[arg(long, default_value = "true", value_name = "BOOL", value_parser = sluice_units::parse_bool, num_args = 0..=1,
          require_equals = true, default_missing_value = "true")]
    pub opentelemetry_trust_incoming_span: bool,

    /// Name of the server span; may use `$request_method`, `$namespace`, `$service_name`,
    /// `$ingress_name`, `$host` and `$uri`. Empty: `HTTP <method> <namespace>/<service>`
    /// (ingress-nginx's `opentelemetry-operation-name`).
    #[arg(long, value_name = "TEMPLATE", default_value = "")]
    pub opentelemetry_operation_name: String,

    /// Host of the OTLP/gRPC collector the spans go to; empty: tracing off
    /// (ingress-nginx's `otlp-collector-host`).
    #[arg(long, value_name = "HOST", default_value = "")]
    pub otlp_collector_host: String,

    /// Port of the OTLP/gRPC collector (ingress-nginx's `otlp-collector-port`).
    #[arg(long, value_name = "PORT", default_value_t = 4317)]
    pub otlp_collector_port: u16,

    /// `service.name` of the spans (ingress-nginx's `otel-service-name`, there `nginx`).
    #[arg(long, value_name = "NAME", default_value = "sluice")]
    pub otel_service_name: String,

    /// Which spans are sampled: `AlwaysOn`, `AlwaysOff` or `TraceIdRatioBased`
    /// (ingress-nginx's `otel-sampler`).
    #[arg(long, value_enum, default_value = "AlwaysOff", ignore_case = true)]
    pub otel_sampler: OtelSampler,

    /// Share of the traces `TraceIdRatioBased` samples, 0 to 1 (ingress-nginx's
    /// `otel-sampler-ratio`).
    #[arg(long, value_name = "RATIO", default_value = "0.01", value_parser = parse_sampler_ratio)]
    pub otel_sampler_ratio: SamplerRatio,

    /// A trusted caller's `sampled` flag decides, the sampler only starts new traces
    /// (ingress-nginx's `otel-sampler-parent-based`).
    #[arg(long, default_value = "false", value_name = "BOOL", value_parser = sluice_units::parse_bool, num_args = 0..=1,
          require_equals = true, default_missing_value = "true")]
    pub otel_sampler_parent_based: bool,

    /// Spans waiting for export at most; more are dropped (ingress-nginx's
    /// `otel-max-queuesize`).
    #[arg(long, value_name = "N", default_value_t = 2048)]
    pub otel_max_queuesize: usize,

    /// Time between two exports, in milliseconds (ingress-nginx's
    /// `otel-schedule-delay-millis`).
    #[arg(long, value_name = "MILLISECONDS", default_value_t = 5000)]
    pub otel_schedule_delay_millis: u64,

    /// Spans per export at most (ingress-nginx's `otel-max-export-batch-size`).
    #[arg(long, value_name = "N", default_value_t = 512)]
    pub otel_max_export_batch_size: usize,
}

impl Default for Tracing {
    /// The same values as the flag defaults.
    fn default() -> Self {
        Tracing {
            enable_opentelemetry: false,
            opentelemetry_trust_incoming_span: true,
            opentelemetry_operation_name: String::new(),
            otlp_collector_host: String::new(),
            otlp_collector_port: 4317,
            otel_service_name: "sluice".to_owned(),
            otel_sampler: OtelSampler::AlwaysOff,
            otel_sampler_ratio: SamplerRatio::default(),
            otel_sampler_parent_based: false,
            otel_max_queuesize: 2048,
            otel_schedule_delay_millis: 5000,
            otel_max_export_batch_size: 512,
        }
    }
}

impl Tracing {
    /// The collector's gRPC endpoint, when one is set.
    pub(crate) fn endpoint(&self) -> Option<String> {
        let host = self.otlp_collector_host.trim();
        if host.is_empty() {
            return None;
        }
        // An IPv6 literal needs its brackets in a URI.
        let host = if host.contains(':') && !host.starts_with('[') {
            format!("[{host}]")
        } else {
            host.to_owned()
        };
        Some(format!("http://{host}:{}", self.otlp_collector_port))
    }

    /// The sampling settings.
    pub(crate) fn sampling(&self) -> Sampling {
        Sampling {
            sampler: self.otel_sampler,
            ratio: self.otel_sampler_ratio.0,
            parent_based: self.otel_sampler_parent_based,
        }
    }

    /// `otel-schedule-delay-millis`.
    pub(crate) fn schedule_delay(&self) -> Duration {
        Duration::from_millis(self.otel_schedule_delay_millis.max(1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        tracing: Tracing,
    }

    #[test]
    fn defaults_are_ingress_nginx_s_but_the_service_name() {
        let cli = Cli::try_parse_from(["x"]).expect("parses");
        assert_eq!(cli.tracing, Tracing::default());
        assert_eq!(cli.tracing.endpoint(), None);
    }

    #[test]
    fn flags_take_the_configmap_values() {
        let cli = Cli::try_parse_from([
            "x",
            "--enable-opentelemetry",
            "--opentelemetry-trust-incoming-span=false",
            "--otlp-collector-host",
            "otel-coll-collector.otel.svc",
            "--otlp-collector-port",
            "4318",
            "--otel-sampler",
            "TraceIdRatioBased",
            "--otel-sampler-ratio",
            "0.5",
            "--otel-sampler-parent-based=true",
            "--otel-max-queuesize",
            "10",
        ])
        .expect("parses");
        let t = cli.tracing;
        assert!(t.enable_opentelemetry);
        assert!(!t.opentelemetry_trust_incoming_span);
        assert_eq!(
            t.endpoint().as_deref(),
            Some("http://otel-coll-collector.otel.svc:4318")
        );
        assert_eq!(t.otel_sampler, OtelSampler::TraceIdRatioBased);
        assert_eq!(t.otel_sampler_ratio, SamplerRatio(0.5));
        assert!(t.otel_sampler_parent_based);
        assert_eq!(t.otel_max_queuesize, 10);
        for bad in ["1.5", "-0.1", "x"] {
            assert!(
                Cli::try_parse_from(["x", "--otel-sampler-ratio", bad]).is_err(),
                "{bad}"
            );
        }
        let v6 = Tracing {
            otlp_collector_host: "::1".into(),
            ..Tracing::default()
        };
        assert_eq!(v6.endpoint().as_deref(), Some("http://[::1]:4317"));
    }
}

//! Distributed tracing, as ingress-nginx's OpenTelemetry support: W3C Trace Context
//! (`traceparent`, `tracestate`) read from the client and written towards the backend, and
//! one server span per request, exported by the OpenTelemetry SDK's batch processor over
//! OTLP/gRPC.
//!
//! * `settings`: the flags ([`Tracing`]), named after ingress-nginx's ConfigMap keys.
//! * `context`: the `traceparent` value, parsed and formatted (pure).
//! * `sampler`: which spans are sampled (pure), as the SDK's sampler.
//!
//! Off (no collector host), the proxy holds no [`Tracer`] and a request pays one branch on
//! that `None`. On, a traced request allocates its span (boxed, in the request's books),
//! its name, and the outgoing `traceparent`; the span ends when the books close, with the
//! status and the upstream's address and timing. A span is made for a request that was
//! routed (one that is refused before a route is found has none).

pub(crate) mod context;
pub(crate) mod sampler;
pub(crate) mod settings;

use std::net::SocketAddr;
use std::time::Duration;

use http::{HeaderName, HeaderValue};
use opentelemetry::trace::{
    Span as _, SpanContext, SpanId, SpanKind, Status, TraceContextExt as _, TraceFlags, TraceId,
    TraceState, Tracer as _, TracerProvider as _,
};
use opentelemetry::{Context, KeyValue};
use opentelemetry_otlp::WithExportConfig as _;
use opentelemetry_sdk::trace::{
    BatchConfigBuilder, BatchSpanProcessor, SdkTracer, SdkTracerProvider,
};

pub use sampler::OtelSampler;
pub use settings::{SamplerRatio, Tracing, parse_sampler_ratio};

use context::TraceParent;

/// How long shutting down may take to export what is queued.
const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(5);

/// The proxy's tracer: the SDK's provider with its OTLP exporter, and the settings a
/// request reads. Exists only when a collector host is set.
#[derive(Debug)]
pub(crate) struct Tracer {
    provider: SdkTracerProvider,
    tracer: SdkTracer,
    /// `enable-opentelemetry`: whether routes without the annotation are traced.
    enabled: bool,
    /// `opentelemetry-trust-incoming-span`, for routes without the annotation.
    trust: bool,
    /// `opentelemetry-operation-name`; empty: `HTTP <method> <namespace>/<service>`.
    operation_name: String,
}

/// What a request's span starts with.
pub(crate) struct Started<'a> {
    /// Request method.
    pub(crate) method: &'a str,
    /// Host as received.
    pub(crate) host: &'a str,
    /// The normalised path (nginx's `$uri`).
    pub(crate) uri: &'a str,
    /// The Ingress or HTTPRoute of the route.
    pub(crate) route: &'a sluice_routing::ObjectRef,
    /// The backend service, `namespace/name:port`.
    pub(crate) service: &'a str,
    /// The client's `traceparent`.
    pub(crate) traceparent: Option<&'a [u8]>,
    /// The client's `tracestate`.
    pub(crate) tracestate: Option<&'a [u8]>,
    /// The route's `opentelemetry-trust-incoming-span` annotation.
    pub(crate) trust: Option<bool>,
}

/// How the request ended, for its span.
pub(crate) struct Ended<'a> {
    /// Response status (0: none was sent).
    pub(crate) status: u16,
    /// The backend service that answered, `namespace/name:port`.
    pub(crate) service: &'a str,
    /// The endpoint that answered.
    pub(crate) upstream: Option<SocketAddr>,
}

impl Tracer {
    /// The tracer of `settings`; `None` without a collector host. Needs a Tokio runtime
    /// (the exporter's gRPC channel runs on it).
    pub(crate) fn new(settings: &Tracing) -> anyhow::Result<Option<Tracer>> {
        let Some(endpoint) = settings.endpoint() else {
            if settings.enable_opentelemetry {
                tracing::warn!("--enable-opentelemetry without --otlp-collector-host: no spans");
            }
            return Ok(None);
        };
        if tokio::runtime::Handle::try_current().is_err() {
            anyhow::bail!("tracing's exporter needs a Tokio runtime: build the proxy within one");
        }
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_tonic()
            .with_endpoint(endpoint)
            .with_timeout(Duration::from_secs(10))
            .build()?;
        let batch = BatchConfigBuilder::default()
            .with_max_queue_size(settings.otel_max_queuesize.max(1))
            .with_max_export_batch_size(
                settings
                    .otel_max_export_batch_size
                    .clamp(1, settings.otel_max_queuesize.max(1)),
            )
            .with_scheduled_delay(settings.schedule_delay())
            .build();
        let resource = opentelemetry_sdk::Resource::builder_empty()
            .with_service_name(settings.otel_service_name.clone())
            .build();
        let provider = SdkTracerProvider::builder()
            .with_span_processor(BatchSpanProcessor::new(exporter, batch))
            .with_sampler(settings.sampling())
            .with_resource(resource)
            .build();
        let tracer = provider.tracer("sluice");
        Ok(Some(Tracer {
            provider,
            tracer,
            enabled: settings.enable_opentelemetry,
            trust: settings.opentelemetry_trust_incoming_span,
            operation_name: settings.opentelemetry_operation_name.clone(),
        }))
    }

    /// Whether a route with this `enable-opentelemetry` annotation is traced.
    pub(crate) fn traces(&self, annotation: Option<bool>) -> bool {
        annotation.unwrap_or(self.enabled)
    }

    /// Starts the server span of a traced request.
    pub(crate) fn start(&self, request: &Started<'_>) -> Box<RequestSpan> {
        let trust = request.trust.unwrap_or(self.trust);
        let parent = request
            .traceparent
            .filter(|_| trust)
            .and_then(TraceParent::parse);
        let parent_cx = match parent {
            Some(parent) => {
                // A `tracestate` the SDK cannot read is left out of the span (it is still
                // forwarded as the client sent it).
                let state = request
                    .tracestate
                    .and_then(|s| std::str::from_utf8(s).ok())
                    .and_then(|s| s.parse::<TraceState>().ok())
                    .unwrap_or_default();
                Context::new().with_remote_span_context(SpanContext::new(
                    TraceId::from_bytes(parent.trace_id),
                    SpanId::from_bytes(parent.parent_id),
                    TraceFlags::new(parent.flags),
                    true,
                    state,
                ))
            }
            None => Context::new(),
        };
        let name = self.operation_name(request);
        let route = format!("{}/{}", request.route.namespace, request.route.name);
        let attributes = vec![
            KeyValue::new("http.request.method", request.method.to_owned()),
            KeyValue::new("server.address", request.host.to_owned()),
            KeyValue::new("url.path", request.uri.to_owned()),
            KeyValue::new("http.route", route),
            KeyValue::new("sluice.route.kind", request.route.kind),
        ];
        let span = self
            .tracer
            .span_builder(name)
            .with_kind(SpanKind::Server)
            .with_attributes(attributes)
            .start_with_context(&self.tracer, &parent_cx);
        let own = span.span_context();
        let traceparent = TraceParent {
            trace_id: own.trace_id().to_bytes(),
            parent_id: own.span_id().to_bytes(),
            flags: own.trace_flags().to_u8(),
        };
        let traceparent = HeaderValue::from_bytes(&traceparent.format())
            .expect("a formatted traceparent is a valid field value");
        Box::new(RequestSpan {
            span,
            traceparent,
            new_trace: parent.is_none(),
            upstream_header: None,
        })
    }

    /// The span's name: `opentelemetry-operation-name` with its variables, or
    /// `HTTP <method> <namespace>/<service>`.
    fn operation_name(&self, request: &Started<'_>) -> String {
        let service = request.service.split(':').next().unwrap_or("");
        if self.operation_name.is_empty() {
            return format!("HTTP {} {service}", request.method);
        }
        let (namespace, name) = service.split_once('/').unwrap_or(("", service));
        // Longest names first, so `$uri` never eats part of another.
        [
            ("$request_method", request.method),
            ("$service_name", name),
            ("$ingress_name", request.route.name.as_str()),
            ("$namespace", namespace),
            ("$host", request.host),
            ("$uri", request.uri),
        ]
        .iter()
        .fold(self.operation_name.clone(), |text, (var, value)| {
            text.replace(var, value)
        })
    }

    /// Exports what is queued and stops the exporter, on this thread (at most a few
    /// seconds).
    pub(crate) fn shutdown_blocking(&self) {
        if let Err(error) = self.provider.shutdown_with_timeout(SHUTDOWN_TIMEOUT) {
            tracing::debug!(%error, "stopping a replaced span exporter");
        }
    }

    /// Exports what is queued and stops the exporter (blocking, at most a few seconds).
    pub(crate) async fn shutdown(&self) {
        let provider = self.provider.clone();
        let stopped =
            tokio::task::spawn_blocking(move || provider.shutdown_with_timeout(SHUTDOWN_TIMEOUT))
                .await;
        if let Ok(Err(error)) = stopped {
            tracing::warn!(%error, "exporting the last spans");
        }
    }
}

/// The server span of one request, kept in its books until they close.
#[derive(Debug)]
pub(crate) struct RequestSpan {
    span: opentelemetry_sdk::trace::Span,
    /// The `traceparent` the backend gets: this span's trace, its id and flags.
    traceparent: HeaderValue,
    /// The caller's trace was not continued: its `tracestate` is not forwarded either.
    new_trace: bool,
    /// Time from asking the upstream to its response head.
    upstream_header: Option<Duration>,
}

impl RequestSpan {
    /// The fields the upstream request sets: `traceparent`, and an empty `tracestate`
    /// (the field is not sent) when the caller's trace was not continued.
    pub(crate) fn fields(&self) -> impl Iterator<Item = (HeaderName, HeaderValue)> + '_ {
        let tracestate = self.new_trace.then(|| {
            (
                HeaderName::from_static("tracestate"),
                HeaderValue::from_static(""),
            )
        });
        std::iter::once((
            HeaderName::from_static("traceparent"),
            self.traceparent.clone(),
        ))
        .chain(tracestate)
    }

    /// The upstream sent its response head `took` after it was asked.
    pub(crate) fn upstream_answered(&mut self, took: Duration) {
        self.upstream_header = Some(took);
    }

    /// Ends the span with how the request went.
    pub(crate) fn end(mut self, ended: &Ended<'_>) {
        if self.span.is_recording() {
            if ended.status != 0 {
                self.span.set_attribute(KeyValue::new(
                    "http.response.status_code",
                    i64::from(ended.status),
                ));
            }
            if !ended.service.is_empty() {
                self.span
                    .set_attribute(KeyValue::new("sluice.service", ended.service.to_owned()));
            }
            if let Some(upstream) = ended.upstream {
                self.span.set_attribute(KeyValue::new(
                    "sluice.upstream.address",
                    upstream.to_string(),
                ));
            }
            if let Some(took) = self.upstream_header {
                self.span.set_attribute(KeyValue::new(
                    "sluice.upstream.header_time_ms",
                    took.as_secs_f64() * 1000.0,
                ));
            }
            // Server spans: a 5xx is an error, a 4xx is the client's (OpenTelemetry's
            // HTTP conventions).
            if ended.status >= 500 || ended.status == 0 {
                self.span.set_status(Status::error(""));
            }
        }
        self.span.end();
    }
}

//! Distributed tracing through the real proxy, as ingress-nginx's "OpenTelemetry" page
//! describes it: W3C `traceparent`/`tracestate` propagated to the backend and one server
//! span per request, exported over OTLP/gRPC to a collector this test starts (a tonic
//! `TraceService` on a loopback port, recording what it is sent). Spans are read after the
//! proxy's graceful shutdown, which exports everything queued: counts are exact.

mod common;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use common::*;
use http::Request;
use http_body_util::Full;
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::trace::v1::Span;
use sluice_proxy::{OtelSampler, ProxyArgs, SamplerRatio, Tracing};

const HOST: &str = "traced.example";
const H2C_HOST: &str = "h2c.traced.example";
/// A caller's trace and span.
const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const PARENT: &str = "00f067aa0ba902b7";

/// A span as the collector got it, with its resource's `service.name`.
#[derive(Clone, Debug)]
struct Got {
    service_name: String,
    span: Span,
}

impl Got {
    fn trace_id(&self) -> String {
        hex(&self.span.trace_id)
    }

    fn span_id(&self) -> String {
        hex(&self.span.span_id)
    }

    fn parent_id(&self) -> String {
        hex(&self.span.parent_span_id)
    }

    fn attributes(&self) -> BTreeMap<String, String> {
        self.span
            .attributes
            .iter()
            .map(|kv| {
                let value = match kv.value.as_ref().and_then(|v| v.value.as_ref()) {
                    Some(Value::StringValue(s)) => s.clone(),
                    Some(Value::IntValue(i)) => i.to_string(),
                    Some(Value::DoubleValue(d)) => format!("{d}"),
                    Some(Value::BoolValue(b)) => b.to_string(),
                    other => format!("{other:?}"),
                };
                (kv.key.clone(), value)
            })
            .collect()
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The OTLP trace receiver: records every span exported to it.
#[derive(Clone, Default)]
struct Receiver {
    spans: Arc<Mutex<Vec<Got>>>,
}

#[tonic::async_trait]
impl TraceService for Receiver {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        let mut spans = self.spans.lock().expect("not poisoned");
        for resource in request.into_inner().resource_spans {
            let service_name = resource
                .resource
                .iter()
                .flat_map(|r| &r.attributes)
                .find(|kv| kv.key == "service.name")
                .and_then(|kv| kv.value.as_ref()?.value.as_ref())
                .map(|v| match v {
                    Value::StringValue(s) => s.clone(),
                    other => format!("{other:?}"),
                })
                .unwrap_or_default();
            for scope in resource.scope_spans {
                for span in scope.spans {
                    spans.push(Got {
                        service_name: service_name.clone(),
                        span,
                    });
                }
            }
        }
        Ok(tonic::Response::new(ExportTraceServiceResponse {
            partial_success: None,
        }))
    }
}

/// The collector on a loopback port; stops on drop.
struct Collector {
    addr: SocketAddr,
    receiver: Receiver,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Collector {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Collector {
    async fn start() -> Collector {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let incoming = futures::stream::unfold(listener, |listener| async move {
            let accepted = listener.accept().await.map(|(stream, _)| stream);
            Some((accepted, listener))
        });
        let receiver = Receiver::default();
        let service = TraceServiceServer::new(receiver.clone());
        let task = tokio::spawn(async move {
            let _ = tonic::transport::Server::builder()
                .add_service(service)
                .serve_with_incoming(incoming)
                .await;
        });
        Collector {
            addr,
            receiver,
            task,
        }
    }

    fn spans(&self) -> Vec<Got> {
        self.receiver.spans.lock().expect("not poisoned").clone()
    }

    /// Tracing flags sending to this collector: on, every span sampled.
    fn tracing(&self) -> Tracing {
        Tracing {
            enable_opentelemetry: true,
            otlp_collector_host: self.addr.ip().to_string(),
            otlp_collector_port: self.addr.port(),
            otel_sampler: OtelSampler::AlwaysOn,
            otel_schedule_delay_millis: 50,
            ..Tracing::default()
        }
    }
}

fn args(tracing: Tracing) -> ProxyArgs {
    ProxyArgs {
        tracing,
        ..ProxyArgs::loopback()
    }
}

/// `method /path` to `host` with `headers`, over a fresh HTTP/1.1 connection (a GET goes
/// through the own loop, a POST with a body through hyper).
async fn request(proxy: &TestProxy, method: &str, host: &str, headers: &[(&str, &str)]) -> Answer {
    let mut sender = http1_connect(proxy.http).await;
    let body = if method == "POST" { "x=1" } else { "" };
    let mut builder = Request::builder()
        .method(method)
        .uri("/traced/path")
        .header("host", host);
    for (name, value) in headers {
        builder = builder.header(*name, *value);
    }
    send(
        &mut sender,
        builder.body(Full::new(Bytes::from(body))).unwrap(),
    )
    .await
}

/// `GET /traced/path` to `host` over HTTP/2 (h2c, prior knowledge).
async fn request_h2(proxy: &TestProxy, host: &str) -> Answer {
    let stream = tokio::net::TcpStream::connect(proxy.http).await.unwrap();
    let (mut sender, connection) = hyper::client::conn::http2::handshake(
        hyper_util::rt::TokioExecutor::new(),
        hyper_util::rt::TokioIo::new(stream),
    )
    .await
    .expect("h2c handshake");
    let connection = tokio::spawn(connection);
    let request = Request::get(format!("http://{host}/traced/path"))
        .body(Full::new(Bytes::new()))
        .unwrap();
    let response = sender.send_request(request).await.expect("h2 response");
    let answer = collect(response).await;
    connection.abort();
    answer
}

/// The `traceparent` the backend got: (trace id, parent id, flags).
fn backend_traceparent(answer: &Answer) -> (String, String, String) {
    let report = answer.report();
    let value = report
        .headers
        .get("traceparent")
        .unwrap_or_else(|| panic!("backend got no traceparent: {:?}", report.headers));
    let parts: Vec<&str> = value.split('-').collect();
    assert_eq!(parts.len(), 4, "{value}");
    assert_eq!(parts[0], "00", "{value}");
    (
        parts[1].to_owned(),
        parts[2].to_owned(),
        parts[3].to_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn opentelemetry_a_request_makes_one_server_span_with_its_route_backend_and_timing() {
    bounded(async {
        let collector = Collector::start().await;
        let backend = echo("traced", "pod-a").await;
        let proxy = TestProxy::start(args(collector.tracing())).await;
        proxy.route(&[
            Route::new(HOST, "traced", vec![backend.addr()]),
            // A backend behind hyper's client (h2c), the other upstream transport.
            Route::new(H2C_HOST, "traced", vec![backend.addr()])
                .with_annotation("nginx.ingress.kubernetes.io/backend-protocol", "H2C"),
        ]);
        // The own HTTP/1.1 loop, hyper's HTTP/1.1 front end, HTTP/2; an h2c backend.
        let get = request(&proxy, "GET", HOST, &[]).await;
        let post = request(&proxy, "POST", HOST, &[]).await;
        let h2 = request_h2(&proxy, HOST).await;
        let h2c = request(&proxy, "GET", H2C_HOST, &[]).await;
        for answer in [&get, &post, &h2, &h2c] {
            assert_eq!(answer.status, 200);
        }
        assert_eq!(h2c.report().protocol, "HTTP/2");
        proxy.shutdown().await;

        let spans = collector.spans();
        assert_eq!(spans.len(), 4, "{spans:#?}");
        let requests = [
            (&get, "GET", HOST, "ing-0"),
            (&post, "POST", HOST, "ing-0"),
            (&h2, "GET", HOST, "ing-0"),
            (&h2c, "GET", H2C_HOST, "ing-1"),
        ];
        // Spans are exported as they end, which need not be the order of the requests:
        // each is found by the trace its backend was told.
        for (answer, method, host, ingress) in requests {
            let (trace, _, _) = backend_traceparent(answer);
            let span = spans
                .iter()
                .find(|span| span.trace_id() == trace)
                .unwrap_or_else(|| panic!("no span of trace {trace}: {spans:#?}"));
            assert_eq!(span.service_name, "sluice");
            assert_eq!(span.span.name, format!("HTTP {method} default/traced"));
            // SPAN_KIND_SERVER.
            assert_eq!(span.span.kind, 2);
            assert_eq!(span.parent_id(), "", "a new trace");
            let attributes = span.attributes();
            assert_eq!(attributes["http.request.method"], method);
            assert_eq!(attributes["http.route"], format!("default/{ingress}"));
            assert_eq!(attributes["sluice.route.kind"], "Ingress");
            assert_eq!(attributes["server.address"], host);
            assert_eq!(attributes["url.path"], "/traced/path");
            assert_eq!(attributes["sluice.service"], "default/traced:80");
            assert_eq!(
                attributes["sluice.upstream.address"],
                backend.addr().to_string()
            );
            assert_eq!(attributes["http.response.status_code"], "200");
            let header_ms: f64 = attributes["sluice.upstream.header_time_ms"]
                .parse()
                .unwrap();
            assert!((0.0..60_000.0).contains(&header_ms), "{header_ms}");
            assert!(span.span.end_time_unix_nano >= span.span.start_time_unix_nano);
            // The backend's spans are children of this one.
            let (trace, parent, flags) = backend_traceparent(answer);
            assert_eq!(trace, span.trace_id());
            assert_eq!(parent, span.span_id());
            assert_eq!(flags, "01");
        }
        assert_ne!(spans[0].trace_id(), spans[1].trace_id());
        assert_ne!(spans[1].trace_id(), spans[2].trace_id());
        assert_ne!(spans[2].trace_id(), spans[3].trace_id());
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn opentelemetry_an_incoming_traceparent_makes_the_span_its_child() {
    bounded(async {
        let collector = Collector::start().await;
        let backend = echo("traced", "pod-a").await;
        let proxy = TestProxy::start(args(collector.tracing())).await;
        proxy.route(&[Route::new(HOST, "traced", vec![backend.addr()])]);
        let traceparent = format!("00-{TRACE}-{PARENT}-01");
        let answer = request(
            &proxy,
            "GET",
            HOST,
            &[
                ("traceparent", &traceparent),
                ("tracestate", "vendor=opaque,other=1"),
            ],
        )
        .await;
        assert_eq!(answer.status, 200);
        proxy.shutdown().await;

        let spans = collector.spans();
        assert_eq!(spans.len(), 1, "{spans:#?}");
        let span = &spans[0];
        assert_eq!(span.trace_id(), TRACE);
        assert_eq!(span.parent_id(), PARENT);
        assert_eq!(span.span.trace_state, "vendor=opaque,other=1");
        let (trace, parent, flags) = backend_traceparent(&answer);
        assert_eq!(trace, TRACE);
        assert_eq!(parent, span.span_id());
        assert_ne!(parent, PARENT);
        assert_eq!(flags, "01");
        assert_eq!(
            answer
                .report()
                .headers
                .get("tracestate")
                .map(String::as_str),
            Some("vendor=opaque,other=1")
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn opentelemetry_trust_incoming_span_off_starts_a_new_trace() {
    bounded(async {
        let collector = Collector::start().await;
        let backend = echo("traced", "pod-a").await;
        // Off by flag (every route), and by annotation (one route, the flag on).
        let untrusting = TestProxy::start(args(Tracing {
            opentelemetry_trust_incoming_span: false,
            ..collector.tracing()
        }))
        .await;
        untrusting.route(&[Route::new(HOST, "traced", vec![backend.addr()])]);
        let annotated = TestProxy::start(args(collector.tracing())).await;
        annotated.route(&[
            Route::new(HOST, "traced", vec![backend.addr()]).with_annotation(
                "nginx.ingress.kubernetes.io/opentelemetry-trust-incoming-span",
                "false",
            ),
        ]);
        let traceparent = format!("00-{TRACE}-{PARENT}-01");
        let headers = [
            ("traceparent", traceparent.as_str()),
            ("tracestate", "vendor=opaque"),
        ];
        let answers = [
            request(&untrusting, "GET", HOST, &headers).await,
            request(&annotated, "GET", HOST, &headers).await,
        ];
        untrusting.shutdown().await;
        annotated.shutdown().await;

        let spans = collector.spans();
        assert_eq!(spans.len(), 2, "{spans:#?}");
        for answer in &answers {
            let (trace, parent, _) = backend_traceparent(answer);
            assert_ne!(trace, TRACE);
            let span = spans
                .iter()
                .find(|s| s.trace_id() == trace)
                .expect("the backend's trace is the span's");
            assert_eq!(parent, span.span_id());
            assert_eq!(span.parent_id(), "");
            assert_eq!(span.span.trace_state, "");
            // Nothing of the caller's is kept.
            assert_eq!(answer.report().headers.get("tracestate"), None);
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn opentelemetry_off_for_an_ingress_or_unconfigured_passes_traceparent_through() {
    bounded(async {
        let collector = Collector::start().await;
        let backend = echo("traced", "pod-a").await;
        let traceparent = format!("00-{TRACE}-{PARENT}-01");
        let headers = [
            ("traceparent", traceparent.as_str()),
            ("tracestate", "vendor=opaque"),
        ];
        // `enable-opentelemetry: "false"` on one Ingress, the flag on: no span for it, the
        // caller's fields go through as any other; the other Ingress is traced.
        let proxy = TestProxy::start(args(collector.tracing())).await;
        proxy.route(&[
            Route::new("quiet.example", "traced", vec![backend.addr()])
                .with_annotation("nginx.ingress.kubernetes.io/enable-opentelemetry", "false"),
            Route::new(HOST, "traced", vec![backend.addr()]),
        ]);
        let quiet = request(&proxy, "GET", "quiet.example", &headers).await;
        let traced = request(&proxy, "GET", HOST, &headers).await;
        // No collector configured (the default): tracing is off entirely.
        let plain = TestProxy::start(ProxyArgs::loopback()).await;
        plain.route(&[Route::new(HOST, "traced", vec![backend.addr()])]);
        let untraced = request(&plain, "GET", HOST, &headers).await;
        // `enable-opentelemetry: "true"` on an Ingress, the flag off: traced.
        let opted_in = TestProxy::start(args(Tracing {
            enable_opentelemetry: false,
            ..collector.tracing()
        }))
        .await;
        opted_in.route(&[
            Route::new(HOST, "traced", vec![backend.addr()])
                .with_annotation("nginx.ingress.kubernetes.io/enable-opentelemetry", "true"),
            Route::new("quiet.example", "traced", vec![backend.addr()]),
        ]);
        let opted = request(&opted_in, "GET", HOST, &headers).await;
        let not_opted = request(&opted_in, "GET", "quiet.example", &headers).await;
        proxy.shutdown().await;
        plain.shutdown().await;
        opted_in.shutdown().await;

        for answer in [&quiet, &untraced, &not_opted] {
            let report = answer.report();
            assert_eq!(report.headers.get("traceparent"), Some(&traceparent));
            assert_eq!(
                report.headers.get("tracestate").map(String::as_str),
                Some("vendor=opaque")
            );
        }
        let spans = collector.spans();
        assert_eq!(spans.len(), 2, "{spans:#?}");
        for (span, answer) in spans.iter().zip([&traced, &opted]) {
            assert_eq!(span.attributes()["server.address"], HOST);
            let (trace, parent, _) = backend_traceparent(answer);
            assert_eq!((trace.as_str(), span.trace_id().as_str()), (TRACE, TRACE));
            assert_eq!(parent, span.span_id());
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn opentelemetry_sampler_always_off_exports_nothing_and_still_propagates() {
    bounded(async {
        let collector = Collector::start().await;
        let backend = echo("traced", "pod-a").await;
        let proxy = TestProxy::start(args(Tracing {
            otel_sampler: OtelSampler::AlwaysOff,
            ..collector.tracing()
        }))
        .await;
        proxy.route(&[Route::new(HOST, "traced", vec![backend.addr()])]);
        let traceparent = format!("00-{TRACE}-{PARENT}-01");
        let answer = request(&proxy, "GET", HOST, &[("traceparent", &traceparent)]).await;
        let fresh = request(&proxy, "GET", HOST, &[]).await;
        proxy.shutdown().await;
        assert_eq!(collector.spans().len(), 0, "{:#?}", collector.spans());
        // The trace goes on, marked not sampled, with the proxy's (unexported) span id.
        let (trace, parent, flags) = backend_traceparent(&answer);
        assert_eq!(trace, TRACE);
        assert_ne!(parent, PARENT);
        assert_eq!(flags, "00");
        let (trace, _, flags) = backend_traceparent(&fresh);
        assert_ne!(trace, TRACE);
        assert_eq!(flags, "00");
    })
    .await;
}

/// A `traceparent` whose trace id's low half is `low`.
fn traceparent_with_low(low: u64, flags: &str) -> String {
    format!("00-0123456789abcdef{low:016x}-{PARENT}-{flags}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn opentelemetry_ratio_sampling_is_decided_by_the_trace_id() {
    bounded(async {
        let collector = Collector::start().await;
        let backend = echo("traced", "pod-a").await;
        // Half the traces: those whose trace id's low 63 bits (after the shift) are below
        // 2^62. The caller's flag does not count (not parent based).
        let proxy = TestProxy::start(args(Tracing {
            otel_sampler: OtelSampler::TraceIdRatioBased,
            otel_sampler_ratio: SamplerRatio(0.5),
            ..collector.tracing()
        }))
        .await;
        proxy.route(&[Route::new(HOST, "traced", vec![backend.addr()])]);
        let kept = traceparent_with_low(0x10, "00");
        let dropped = traceparent_with_low(0xf000_0000_0000_0000, "01");
        let mut flags = Vec::new();
        for value in [&kept, &dropped, &kept] {
            let answer = request(&proxy, "GET", HOST, &[("traceparent", value)]).await;
            flags.push(backend_traceparent(&answer).2);
        }
        proxy.shutdown().await;
        assert_eq!(flags, ["01", "00", "01"]);
        let spans = collector.spans();
        assert_eq!(spans.len(), 2, "{spans:#?}");
        for span in &spans {
            assert_eq!(span.trace_id(), &kept[3..35]);
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn opentelemetry_parent_based_sampling_follows_the_callers_flag() {
    bounded(async {
        let collector = Collector::start().await;
        let backend = echo("traced", "pod-a").await;
        let proxy = TestProxy::start(args(Tracing {
            otel_sampler: OtelSampler::AlwaysOff,
            otel_sampler_parent_based: true,
            ..collector.tracing()
        }))
        .await;
        proxy.route(&[Route::new(HOST, "traced", vec![backend.addr()])]);
        let sampled = traceparent_with_low(0xf000_0000_0000_0000, "01");
        let unsampled = traceparent_with_low(0x10, "00");
        for value in [&sampled, &unsampled] {
            request(&proxy, "GET", HOST, &[("traceparent", value)]).await;
        }
        // No caller: the sampler (AlwaysOff) decides.
        request(&proxy, "GET", HOST, &[]).await;
        proxy.shutdown().await;
        let spans = collector.spans();
        assert_eq!(spans.len(), 1, "{spans:#?}");
        assert_eq!(spans[0].trace_id(), &sampled[3..35]);
    })
    .await;
}

/// ingress-nginx's ConfigMap keys `enable-opentelemetry`, `otlp-collector-host`/`-port`,
/// `otel-sampler`, `otel-service-name`, `otel-schedule-delay-millis`: tracing switched on
/// live, without flags; a changed setting gets a new exporter and the old one sends what it
/// queued.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn opentelemetry_configmap_keys_turn_tracing_on_live() {
    bounded(async {
        let collector = Collector::start().await;
        let backend = echo("traced", "pod-a").await;
        let proxy = TestProxy::start(ProxyArgs::loopback()).await;
        let routes = [Route::new(HOST, "traced", vec![backend.addr()])];
        let host = collector.addr.ip().to_string();
        let port = collector.addr.port().to_string();
        let install = |service: &str| {
            let data = [
                ("enable-opentelemetry", "true"),
                ("otlp-collector-host", host.as_str()),
                ("otlp-collector-port", port.as_str()),
                ("otel-sampler", "AlwaysOn"),
                ("otel-schedule-delay-millis", "50"),
                ("otel-service-name", service),
            ];
            proxy.table.update(
                table_with(&routes, &data),
                std::time::Duration::from_millis(1),
            );
        };
        proxy.route(&routes);
        let untraced = request(&proxy, "GET", HOST, &[]).await;
        assert_eq!(untraced.status, 200);

        install("first");
        let first = request(&proxy, "GET", HOST, &[]).await;
        backend_traceparent(&first);
        install("second");
        let second = request(&proxy, "GET", HOST, &[]).await;
        backend_traceparent(&second);
        proxy.shutdown().await;

        let spans = collector.spans();
        // The replaced exporter sends from its own thread: wait for it, bounded.
        let mut names: Vec<String> = spans.iter().map(|g| g.service_name.clone()).collect();
        for _ in 0..50 {
            if names.len() >= 2 {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            names = collector
                .spans()
                .iter()
                .map(|g| g.service_name.clone())
                .collect();
        }
        names.sort();
        assert_eq!(
            names,
            ["first", "second"],
            "one span each, none before the keys"
        );
    })
    .await;
}

//! `route()` among 10,000 hosts x 5 paths (goal < 500 ns) and `compile` of 10,000 Ingresses
//! (goal < 200 ms); the same for 10,000 Gateway API HTTPRoutes (`route_request`, with header
//! and method matches), which should stay within the Ingress figures' order of magnitude.
//!
//! Every benchmark runs twice: `wall/...` measures wall-clock time (criterion's default), and
//! `cpu/...` the CPU time of the benchmarking thread, which stays meaningful on a shared
//! machine where the process is descheduled part of the time.

use std::hint::black_box;
use std::sync::Arc;

use criterion::measurement::{Measurement, ValueFormatter};
use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use k8s_openapi::api::core::v1::{Secret, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::networking::v1::{Ingress, IngressClass};
use serde_json::{Value, json};
use sluice_routing::gateway::{Gateway, GatewayClass, HttpRoute};
use sluice_routing::{
    CompileKind, CompileOptions, HeaderLookup, IncrementalCompiler, Inputs, RequestInfo, compile,
};

const N: usize = 10_000;

fn from<T: k8s_openapi::serde::de::DeserializeOwned>(v: Value) -> Arc<T> {
    Arc::new(serde_json::from_value(v).expect("valid object"))
}

fn inputs() -> Inputs {
    let mut inputs = Inputs {
        ingress_classes: vec![from::<IngressClass>(json!({
            "metadata": {"name": "sluice"},
            "spec": {"controller": "sluice.dev/ingress-controller"}
        }))]
        .into(),
        ..Inputs::default()
    };
    for i in 0..N {
        let ns = format!("ns{}", i % 50);
        let svc = format!("svc{i}");
        let backend = |port: &str| json!({"service": {"name": svc, "port": {"name": port}}});
        inputs.ingresses.push(from::<Ingress>(json!({
            "metadata": {
                "namespace": ns, "name": format!("ing{i}"),
                // A policy on every route: what "route + policy" is measured with.
                "annotations": {
                    "nginx.ingress.kubernetes.io/proxy-body-size": "8m",
                    "nginx.ingress.kubernetes.io/allowlist-source-range": "10.0.0.0/8, 192.168.0.0/16",
                    "nginx.ingress.kubernetes.io/enable-cors": "true",
                    "nginx.ingress.kubernetes.io/x-forwarded-prefix": "/p",
                    "nginx.ingress.kubernetes.io/proxy-read-timeout": "30",
                },
                "creationTimestamp": format!("2024-01-01T{:02}:{:02}:{:02}Z", i / 3600 % 24, i / 60 % 60, i % 60)
            },
            "spec": {
                "ingressClassName": "sluice",
                "tls": [{"hosts": [format!("host{i}.example.com")], "secretName": "tls"}],
                "rules": [{"host": format!("host{i}.example.com"), "http": {"paths": [
                    {"path": "/", "pathType": "Prefix", "backend": backend("http")},
                    {"path": "/api", "pathType": "Prefix", "backend": backend("api")},
                    {"path": "/api/v1/", "pathType": "Prefix", "backend": backend("api")},
                    {"path": "/static", "pathType": "ImplementationSpecific", "backend": backend("http")},
                    {"path": "/healthz", "pathType": "Exact", "backend": backend("http")},
                ]}}]
            }
        })));
        inputs.services.push(from::<Service>(json!({
            "metadata": {"namespace": ns, "name": svc},
            "spec": {"ports": [{"name": "http", "port": 80}, {"name": "api", "port": 8080}]}
        })));
        let ip = |k: usize| format!("10.{}.{}.{}", (i >> 8) & 0xff, i & 0xff, k);
        inputs.endpoint_slices.push(from::<EndpointSlice>(json!({
            "metadata": {"namespace": ns, "name": format!("{svc}-abcde"),
                         "labels": {"kubernetes.io/service-name": svc}},
            "addressType": "IPv4",
            "ports": [{"name": "http", "port": 8080}, {"name": "api", "port": 9090}],
            "endpoints": [
                {"addresses": [ip(1)], "conditions": {"ready": true}},
                {"addresses": [ip(2)], "conditions": {"ready": true}},
                {"addresses": [ip(3)], "conditions": {"ready": false}},
            ]
        })));
    }
    for n in 0..50 {
        let mut secret = Secret::default();
        secret.metadata.namespace = Some(format!("ns{n}"));
        secret.metadata.name = Some("tls".to_owned());
        secret.string_data = Some(
            [
                ("tls.crt".to_owned(), CERT_PEM.to_owned()),
                ("tls.key".to_owned(), KEY_PEM.to_owned()),
            ]
            .into(),
        );
        inputs.secrets.push(Arc::new(secret));
    }
    inputs
}

/// `ingress` with its first rule's host (and TLS host) renamed to `host`.
fn renamed_host(ingress: &Ingress, host: &str) -> Arc<Ingress> {
    let mut ingress = ingress.clone();
    if let Some(spec) = ingress.spec.as_mut() {
        for rule in spec.rules.iter_mut().flatten() {
            rule.host = Some(host.to_owned());
        }
        for tls in spec.tls.iter_mut().flatten() {
            tls.hosts = Some(vec![host.to_owned()]);
        }
    }
    Arc::new(ingress)
}

/// 10,000 HTTPRoutes on one Gateway, one host name each, five matches per route (an exact
/// path, three prefixes, one with a header condition, one with a method), over the same
/// Services as [`inputs`].
fn gateway_inputs() -> Inputs {
    let mut inputs = inputs();
    inputs.ingresses = Default::default();
    inputs.gateway_classes = vec![from::<GatewayClass>(json!({
        "metadata": {"name": "sluice"},
        "spec": {"controllerName": "sluice.dev/gateway-controller"}
    }))]
    .into();
    inputs.gateways = vec![from::<Gateway>(json!({
        "metadata": {"namespace": "ns0", "name": "gw"},
        "spec": {"gatewayClassName": "sluice", "listeners": [
            {"name": "http", "port": 80, "protocol": "HTTP", "allowedRoutes": {"namespaces": {"from": "All"}}}
        ]}
    }))].into();
    for i in 0..N {
        let ns = format!("ns{}", i % 50);
        let svc = format!("svc{i}");
        inputs.http_routes.push(from::<HttpRoute>(json!({
            "metadata": {"namespace": ns, "name": format!("route{i}"),
                "creationTimestamp": format!("2024-01-01T{:02}:{:02}:{:02}Z", i / 3600 % 24, i / 60 % 60, i % 60)},
            "spec": {
                "parentRefs": [{"name": "gw", "namespace": "ns0"}],
                "hostnames": [format!("host{i}.example.com")],
                "rules": [
                    {"matches": [{"path": {"type": "Exact", "value": "/healthz"}}],
                     "backendRefs": [{"name": svc, "port": 80}]},
                    {"matches": [{"path": {"type": "PathPrefix", "value": "/"}},
                                 {"path": {"type": "PathPrefix", "value": "/static"}}],
                     "filters": [{"type": "ResponseHeaderModifier", "responseHeaderModifier": {"set": [{"name": "x-served-by", "value": "sluice"}]}}],
                     "backendRefs": [{"name": svc, "port": 80}]},
                    {"matches": [{"path": {"type": "PathPrefix", "value": "/api"}, "headers": [{"name": "x-version", "value": "2"}]},
                                 {"path": {"type": "PathPrefix", "value": "/api"}, "method": "POST"}],
                     "backendRefs": [{"name": svc, "port": 8080, "weight": 9}, {"name": svc, "port": 80, "weight": 1}]},
                ]
            }
        })));
    }
    inputs
}

struct OneHeader(&'static str, &'static str);

impl HeaderLookup for OneHeader {
    fn header(&self, name: &str) -> Option<&[u8]> {
        (name == self.0).then_some(self.1.as_bytes())
    }
}

const CERT_PEM: &str = "-----BEGIN CERTIFICATE-----\nMAMCAQE=\n-----END CERTIFICATE-----\n";
const KEY_PEM: &str = "-----BEGIN PRIVATE KEY-----\nMAMCAQI=\n-----END PRIVATE KEY-----\n";

/// CPU time consumed by the calling thread (`CLOCK_THREAD_CPUTIME_ID`).
struct ThreadCpuTime;

fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; the clock id is a constant the kernel knows.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_THREAD_CPUTIME_ID)");
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

impl Measurement for ThreadCpuTime {
    type Intermediate = u64;
    type Value = u64;
    fn start(&self) -> u64 {
        thread_cpu_ns()
    }
    fn end(&self, start: u64) -> u64 {
        thread_cpu_ns().saturating_sub(start)
    }
    fn add(&self, a: &u64, b: &u64) -> u64 {
        a + b
    }
    fn zero(&self) -> u64 {
        0
    }
    fn to_f64(&self, v: &u64) -> f64 {
        *v as f64
    }
    fn formatter(&self) -> &dyn ValueFormatter {
        &Nanoseconds
    }
}

struct Nanoseconds;

impl ValueFormatter for Nanoseconds {
    fn scale_values(&self, typical: f64, values: &mut [f64]) -> &'static str {
        let (factor, unit) = if typical < 1e3 {
            (1.0, "ns")
        } else if typical < 1e6 {
            (1e-3, "µs")
        } else if typical < 1e9 {
            (1e-6, "ms")
        } else {
            (1e-9, "s")
        };
        values.iter_mut().for_each(|v| *v *= factor);
        unit
    }
    fn scale_throughputs(&self, _: f64, _: &Throughput, values: &mut [f64]) -> &'static str {
        self.scale_values(values.first().copied().unwrap_or(1.0), values)
    }
    fn scale_for_machines(&self, _: &mut [f64]) -> &'static str {
        "ns"
    }
}

fn wall(c: &mut Criterion) {
    benches(c, "wall");
}

fn cpu(c: &mut Criterion<ThreadCpuTime>) {
    benches(c, "cpu");
}

fn benches<M: Measurement>(c: &mut Criterion<M>, clock: &str) {
    let inputs = inputs();
    let options = CompileOptions::default();
    let compiled = compile(&inputs, &options);
    assert_eq!(compiled.ours.len(), N);
    assert!(
        compiled.diagnostics.is_empty(),
        "{:?}",
        compiled.diagnostics.first()
    );
    assert_eq!(compiled.table.certificates().count(), 50);
    let table = compiled.table;

    // A spread of requests over all hosts, with ports, case and several path shapes.
    let paths = [
        "/",
        "/api/v1/users/42",
        "/static/css/site.css",
        "/healthz",
        "/nope/deeper/still",
    ];
    let requests: Vec<(String, &str)> = (0..4096)
        .map(|k| {
            let i = (k * 7919) % N;
            let host = if k % 3 == 0 {
                format!("Host{i}.Example.com:8443")
            } else {
                format!("host{i}.example.com")
            };
            (host, paths[k % paths.len()])
        })
        .collect();
    for (host, path) in &requests {
        assert!(table.route_backend(host, path).is_some());
    }

    let mut group = c.benchmark_group(clock);
    group.bench_function("route 10k hosts x 5 paths", |b| {
        let mut k = 0usize;
        b.iter(|| {
            let (host, path) = &requests[k % requests.len()];
            k += 1;
            black_box(table.route_backend(black_box(host), black_box(path)))
        })
    });
    // The request-time reads of a policy the proxy does: source range, redirect, CORS.
    let client: std::net::IpAddr = "10.1.2.3".parse().unwrap();
    group.bench_function(
        "route + policy 10k hosts x 5 paths (every route annotated)",
        |b| {
            let mut k = 0usize;
            b.iter(|| {
                let (host, path) = &requests[k % requests.len()];
                k += 1;
                let entry = table.route(black_box(host), black_box(path));
                black_box(entry.map(|e| {
                    let p = &*e.policy;
                    let allowed = p.deny.iter().all(|n| !n.contains(client))
                        && (p.allow.is_empty() || p.allow.iter().any(|n| n.contains(client)));
                    (allowed, p.https_redirect, p.cors.is_some(), p.body_limit)
                }))
            })
        },
    );
    group.bench_function("route miss (unknown host, 404)", |b| {
        b.iter(|| {
            black_box(table.route_backend(black_box("unknown.example.org"), black_box("/x/y")))
        })
    });

    // Gateway API: the same Services behind 10k HTTPRoutes.
    let gw_inputs = gateway_inputs();
    let gw = compile(&gw_inputs, &options);
    assert_eq!(gw.gateway.routes.len(), N);
    assert!(
        gw.gateway
            .routes
            .iter()
            .all(|r| r.parents[0].conditions.iter().all(|c| c.status)),
        "{:?}",
        gw.gateway.routes.first()
    );
    let headers = [OneHeader("x-version", "2"), OneHeader("x-other", "1")];
    for (k, (host, path)) in requests.iter().enumerate() {
        let info = RequestInfo {
            listener: None,
            https: false,
            host,
            path,
            query: "",
            method: if k.is_multiple_of(7) { "POST" } else { "GET" },
            headers: &headers[k % 2],
        };
        assert!(gw.table.route_request(&info).is_some(), "{host} {path}");
    }
    group.bench_function("route_request 10k HTTPRoutes x 5 matches", |b| {
        let mut k = 0usize;
        b.iter(|| {
            let (host, path) = &requests[k % requests.len()];
            let info = RequestInfo {
                listener: None,
                https: false,
                host,
                path,
                query: "",
                method: if k.is_multiple_of(7) { "POST" } else { "GET" },
                headers: &headers[k % 2],
            };
            k += 1;
            black_box(gw.table.route_request(black_box(&info)))
        })
    });

    group.sample_size(10);
    group.bench_function("compile 10k ingresses", |b| {
        // The previous table is dropped outside the timed region (in the controller that
        // happens after the swap, off the compile path).
        b.iter_with_large_drop(|| compile(black_box(&inputs), &options))
    });
    group.bench_function("compile 10k HTTPRoutes", |b| {
        b.iter_with_large_drop(|| compile(black_box(&gw_inputs), &options))
    });
    // What the controller does per change of one Ingress: the previous compile kept, one
    // Ingress's host changed (back and forth), only its hosts compiled again.
    let versions = [
        Arc::clone(&inputs.ingresses[0]),
        renamed_host(&inputs.ingresses[0], "moved.example.com"),
    ];
    bench_incremental(
        &mut group,
        "incremental compile, 1 of 10k ingresses changed",
        (&inputs, &options),
        Some(1),
        |changing, turn| changing.ingresses[0] = Arc::clone(&versions[turn % 2]),
    );
    // One Ingress created, then deleted again: the list of our Ingresses changes too.
    let added = {
        let mut ingress = (*inputs.ingresses[0]).clone();
        ingress.metadata.name = Some("added".to_owned());
        renamed_host(&ingress, "added.example.com")
    };
    bench_incremental(
        &mut group,
        "incremental compile, 1 ingress added to or removed from 10k",
        (&inputs, &options),
        None,
        |changing, turn| {
            if turn % 2 == 1 {
                changing.ingresses.push(Arc::clone(&added));
            } else {
                changing.ingresses.pop();
            }
        },
    );
    // The same for one HTTPRoute among 10k: its host name's rules, its status and the
    // listener's attachedRoutes.
    let route_versions = [
        Arc::clone(&gw_inputs.http_routes[0]),
        Arc::new({
            let mut route = (*gw_inputs.http_routes[0]).clone();
            route.spec.hostnames = vec!["moved.example.com".to_owned()];
            route
        }),
    ];
    bench_incremental(
        &mut group,
        "incremental compile, 1 of 10k HTTPRoutes changed",
        (&gw_inputs, &options),
        Some(1),
        |changing, turn| changing.http_routes[0] = Arc::clone(&route_versions[turn % 2]),
    );
    // One EndpointSlice among those of 10k Ingresses' Services: that Service's backends.
    let slice_versions = [Arc::clone(&inputs.endpoint_slices[0]), {
        let mut slice = (*inputs.endpoint_slices[0]).clone();
        slice.endpoints.truncate(1);
        Arc::new(slice)
    }];
    bench_incremental(
        &mut group,
        "incremental compile, 1 EndpointSlice of 10k ingresses' changed",
        (&inputs, &options),
        None,
        |changing, turn| changing.endpoint_slices[0] = Arc::clone(&slice_versions[turn % 2]),
    );
    group.finish();
}

/// Times [`IncrementalCompiler::compile_shared`] after `change(inputs, turn)`, made outside
/// the timed region (the controller lists its informers and hands the inputs over shared);
/// every call must compile in part (of `objects` objects, when given).
fn bench_incremental<M: Measurement>(
    group: &mut criterion::BenchmarkGroup<'_, M>,
    name: &str,
    (inputs, options): (&Inputs, &CompileOptions),
    objects: Option<usize>,
    mut change: impl FnMut(&mut Inputs, usize),
) {
    let mut compiler = IncrementalCompiler::new();
    let mut changing = inputs.clone();
    compiler.compile(&changing, options);
    let mut turn = 0;
    group.bench_function(name, |b| {
        b.iter_batched(
            || {
                turn += 1;
                change(&mut changing, turn);
                Arc::new(changing.clone())
            },
            |shared| {
                let compiled = compiler.compile_shared(black_box(&shared), options);
                let partial = match compiler.last_kind() {
                    CompileKind::Incremental { objects: n } => objects.is_none_or(|o| o == n),
                    CompileKind::Full => false,
                };
                assert!(partial, "{name}: compiled whole or of other objects");
                (compiled, shared)
            },
            BatchSize::LargeInput,
        )
    });
}

criterion_group!(wall_clock, wall);
criterion_group! {
    name = cpu_time;
    config = Criterion::default().with_measurement(ThreadCpuTime);
    targets = cpu
}
criterion_main!(wall_clock, cpu_time);

//! Shared test fixtures: Kubernetes objects → routing tables, a proxy on loopback ports that
//! is torn down on drop, echo backends, and small HTTP clients.
#![allow(dead_code)]

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, Request, StatusCode};
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::TokioIo;
use serde_json::json;
use sluice_echo::{EchoReport, EchoServer, Identity};
use sluice_proxy::{Proxy, ProxyArgs, Readiness, TableHandle};
use sluice_routing::{CompileOptions, Inputs, RouteTable, compile};
use tokio::net::TcpStream;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// Namespace of every test object.
pub const NS: &str = "default";

/// Upper bound for any single test body.
pub const TEST_TIMEOUT: Duration = Duration::from_secs(60);

/// Runs a test body with a time bound, so a hang fails instead of blocking CI.
pub async fn bounded<F: Future>(body: F) -> F::Output {
    tokio::time::timeout(TEST_TIMEOUT, body)
        .await
        .expect("test exceeded its time bound")
}

/// One routing rule: `host` + Prefix `path` → Service `service` port 80 with `endpoints`.
#[derive(Clone, Debug)]
pub struct Route {
    pub host: String,
    pub path: String,
    pub service: String,
    pub endpoints: Vec<SocketAddr>,
    /// PEM certificate chain and key for `host` (a kubernetes.io/tls Secret).
    pub tls: Option<(String, String)>,
    /// The Ingress's annotations.
    pub annotations: std::collections::BTreeMap<String, String>,
    /// The path's `pathType` (`Prefix` unless [`Route::with_path_type`]).
    pub path_type: &'static str,
}

impl Route {
    pub fn new(host: &str, service: &str, endpoints: Vec<SocketAddr>) -> Route {
        Route {
            host: host.to_owned(),
            path: "/".to_owned(),
            service: service.to_owned(),
            endpoints,
            tls: None,
            annotations: Default::default(),
            path_type: "Prefix",
        }
    }

    /// The route's path with another `pathType`.
    #[allow(dead_code)] // not every test binary uses it
    pub fn with_path_type(mut self, path_type: &'static str) -> Route {
        self.path_type = path_type;
        self
    }

    /// Adds an annotation to the route's Ingress.
    pub fn with_annotation(mut self, key: &str, value: &str) -> Route {
        self.annotations.insert(key.to_owned(), value.to_owned());
        self
    }

    /// The route on another path (Prefix).
    pub fn with_path(mut self, path: &str) -> Route {
        self.path = path.to_owned();
        self
    }

    pub fn with_tls(mut self, cert_pem: String, key_pem: String) -> Route {
        self.tls = Some((cert_pem, key_pem));
        self
    }
}

fn object<T: k8s_openapi::serde::de::DeserializeOwned>(value: serde_json::Value) -> Arc<T> {
    Arc::new(serde_json::from_value(value).expect("valid Kubernetes object"))
}

/// Adds Gateway API objects to `inputs`: the GatewayClass `sluice` (the default
/// controller name), a Gateway `gw` in [`NS`] with this `spec` (its class filled in), and
/// HTTPRoutes in [`NS`] (`name` and `spec` each).
#[allow(dead_code)] // not every test binary uses it
pub fn add_gateway(
    inputs: &mut Inputs,
    mut spec: serde_json::Value,
    routes: &[(&str, serde_json::Value)],
) {
    spec["gatewayClassName"] = json!("sluice");
    inputs.gateway_classes = vec![object(json!({"metadata": {"name": "sluice"},
        "spec": {"controllerName": "sluice.dev/gateway-controller"}}))]
    .into();
    inputs.gateways = vec![object(
        json!({"metadata": {"namespace": NS, "name": "gw"}, "spec": spec}),
    )]
    .into();
    inputs.http_routes = routes
        .iter()
        .map(|(name, spec)| {
            object(json!({"metadata": {"namespace": NS, "name": name}, "spec": spec}))
        })
        .collect();
}

/// The cluster objects for `routes`: our IngressClass, one Ingress per route, and one Service
/// + Endpoints (+ TLS Secret) per distinct service.
pub fn inputs(routes: &[Route]) -> Inputs {
    let mut inputs = Inputs {
        ingress_classes: vec![object(json!({
            "apiVersion": "networking.k8s.io/v1",
            "kind": "IngressClass",
            "metadata": {"name": "sluice"},
            "spec": {"controller": "sluice.dev/ingress-controller"}
        }))]
        .into(),
        ..Inputs::default()
    };
    let mut services = std::collections::BTreeMap::new();
    for (i, route) in routes.iter().enumerate() {
        let mut spec = json!({
            "ingressClassName": "sluice",
            "rules": [{
                "host": route.host,
                "http": {"paths": [{
                    "path": route.path,
                    "pathType": route.path_type,
                    "backend": {"service": {"name": route.service, "port": {"number": 80}}}
                }]}
            }]
        });
        if route.tls.is_some() {
            spec["tls"] = json!([{"hosts": [route.host], "secretName": format!("tls-{i}")}]);
            let (crt, key) = route.tls.clone().unwrap();
            inputs.secrets.push(object(json!({
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"name": format!("tls-{i}"), "namespace": NS},
                "type": "kubernetes.io/tls",
                "stringData": {"tls.crt": crt, "tls.key": key}
            })));
        }
        inputs.ingresses.push(object(json!({
            "apiVersion": "networking.k8s.io/v1",
            "kind": "Ingress",
            "metadata": {
                "name": format!("ing-{i}"),
                "namespace": NS,
                "creationTimestamp": format!("2026-01-01T00:00:{:02}Z", i % 60),
                "annotations": route.annotations,
            },
            "spec": spec
        })));
        services.insert(route.service.clone(), route.endpoints.clone());
    }
    for (name, endpoints) in services {
        inputs.services.push(object(json!({
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": name, "namespace": NS},
            "spec": {"ports": [{"port": 80, "protocol": "TCP"}]}
        })));
        let subsets: Vec<_> = endpoints
            .iter()
            .map(|a| json!({"addresses": [{"ip": a.ip().to_string()}], "ports": [{"port": a.port()}]}))
            .collect();
        inputs.endpoints.push(object(json!({
            "apiVersion": "v1",
            "kind": "Endpoints",
            "metadata": {"name": name, "namespace": NS},
            "subsets": subsets
        })));
    }
    inputs
}

/// Compiles `routes` into a table with the default options.
pub fn table(routes: &[Route]) -> RouteTable {
    compile(&inputs(routes), &CompileOptions::default()).table
}

/// `routes` compiled with ingress-nginx's ConfigMap holding `data`.
pub fn table_with(routes: &[Route], data: &[(&str, &str)]) -> RouteTable {
    let mut inputs = inputs(routes);
    inputs.nginx_config_map = Some(Arc::new(k8s_openapi::api::core::v1::ConfigMap {
        metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
            name: Some("ingress-nginx-controller".into()),
            namespace: Some("ingress-nginx".into()),
            ..Default::default()
        },
        data: Some(
            data.iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
        ),
        ..Default::default()
    }));
    let compiled = compile(&inputs, &CompileOptions::default());
    assert!(
        compiled
            .diagnostics
            .iter()
            .all(|d| d.object.kind != "ConfigMap"),
        "every key applied: {:?}",
        compiled.diagnostics
    );
    compiled.table
}

/// A proxy serving on loopback ports, shut down (or aborted) when dropped.
pub struct TestProxy {
    pub http: SocketAddr,
    pub https: SocketAddr,
    pub admin: SocketAddr,
    pub table: TableHandle,
    pub readiness: Readiness,
    pub default_cert: rustls::pki_types::CertificateDer<'static>,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<anyhow::Result<()>>>,
}

impl TestProxy {
    /// Starts a proxy with `args` (addresses should be port 0 on loopback).
    pub async fn start(args: ProxyArgs) -> TestProxy {
        let proxy = Proxy::new(args).expect("proxy builds");
        let bound = proxy.bind().await.expect("proxy binds");
        let (stop, stopped) = oneshot::channel::<()>();
        let http = bound.http_addr();
        let https = bound.https_addr();
        let admin = bound.admin_addr();
        let table = bound.table_handle();
        let readiness = bound.readiness();
        let default_cert = bound.default_certificate().clone();
        let task = tokio::spawn(bound.serve(async move {
            let _ = stopped.await;
        }));
        TestProxy {
            http,
            https,
            admin,
            table,
            readiness,
            default_cert,
            stop: Some(stop),
            task: Some(task),
        }
    }

    /// Starts a proxy with default loopback arguments, routing `routes`.
    pub async fn with_routes(routes: &[Route]) -> TestProxy {
        let proxy = TestProxy::start(ProxyArgs::loopback()).await;
        proxy.route(routes);
        proxy
    }

    /// Installs a table for `routes`.
    pub fn route(&self, routes: &[Route]) {
        self.table.update(table(routes), Duration::from_millis(1));
    }

    /// Asks for a graceful shutdown and returns the serving task to await.
    pub fn begin_shutdown(&mut self) -> JoinHandle<anyhow::Result<()>> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        self.task.take().expect("proxy still running")
    }

    /// Graceful shutdown, waiting (bounded) for the proxy to finish.
    pub async fn shutdown(mut self) {
        let task = self.begin_shutdown();
        tokio::time::timeout(Duration::from_secs(40), task)
            .await
            .expect("proxy shut down in time")
            .expect("proxy task did not panic")
            .expect("proxy served without error");
    }
}

impl Drop for TestProxy {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

/// An echo backend on a loopback port (stops on drop).
pub async fn echo(service: &str, pod: &str) -> EchoServer {
    EchoServer::start("127.0.0.1:0", Identity::new(service, pod))
        .await
        .expect("echo backend starts")
}

/// An address on which nothing listens (a port bound and released again).
pub async fn closed_port() -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    addr
}

/// A response with its whole body.
#[derive(Debug)]
pub struct Answer {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Bytes,
}

impl Answer {
    /// The body as an echo report.
    pub fn report(&self) -> EchoReport {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| {
            panic!(
                "not an echo report ({e}): {} {}",
                self.status,
                String::from_utf8_lossy(&self.body)
            )
        })
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// An HTTP/1.1 connection to `addr` (one keep-alive connection; requests go in sequence).
pub async fn http1_connect(
    addr: SocketAddr,
) -> hyper::client::conn::http1::SendRequest<http_body_util::Full<Bytes>> {
    let stream = TcpStream::connect(addr).await.expect("connect to proxy");
    let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .expect("HTTP/1.1 handshake");
    tokio::spawn(async move {
        let _ = connection.with_upgrades().await;
    });
    sender
}

/// Sends `request` on `sender` and reads the whole response.
pub async fn send(
    sender: &mut hyper::client::conn::http1::SendRequest<http_body_util::Full<Bytes>>,
    request: Request<http_body_util::Full<Bytes>>,
) -> Answer {
    sender.ready().await.expect("connection ready");
    let response = sender.send_request(request).await.expect("response");
    collect(response).await
}

/// Reads a whole response.
pub async fn collect<B>(response: http::Response<B>) -> Answer
where
    B: http_body::Body,
    B::Error: std::fmt::Debug,
{
    let (parts, body) = response.into_parts();
    let body = body.collect().await.expect("response body").to_bytes();
    Answer {
        status: parts.status,
        headers: parts.headers,
        body,
    }
}

/// `GET path` with `Host: host` over a fresh HTTP/1.1 connection to `addr`.
pub async fn get(addr: SocketAddr, host: &str, path: &str) -> Answer {
    let mut sender = http1_connect(addr).await;
    let request = Request::get(path)
        .header("host", host)
        .body(http_body_util::Full::new(Bytes::new()))
        .unwrap();
    send(&mut sender, request).await
}

/// A pooled HTTP/1.1 client for load loops.
pub fn pooled_client() -> hyper_util::client::legacy::Client<
    hyper_util::client::legacy::connect::HttpConnector,
    Empty<Bytes>,
> {
    hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .pool_max_idle_per_host(16)
        .build_http()
}

/// Fetches an admin path, returning status and body text.
pub async fn admin_get(admin: SocketAddr, path: &str) -> (StatusCode, String) {
    let answer = get(admin, "localhost", path).await;
    (answer.status, answer.text())
}

/// A CA and a leaf for `host` signed by it: (CA, leaf, leaf key).
fn issue(
    host: &str,
) -> (
    rcgen::CertifiedIssuer<'static, rcgen::KeyPair>,
    rcgen::Certificate,
    rcgen::KeyPair,
) {
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "sluice test CA");
    let ca = rcgen::CertifiedIssuer::self_signed(ca_params, ca_key).unwrap();
    let leaf_key = rcgen::KeyPair::generate().unwrap();
    let leaf_params = rcgen::CertificateParams::new(vec![host.to_owned()]).unwrap();
    let leaf = leaf_params.signed_by(&leaf_key, &ca).unwrap();
    (ca, leaf, leaf_key)
}

/// A CA and a leaf for `host` signed by it, as PEM (leaf cert, leaf key) plus the CA's DER.
pub fn ca_and_leaf(host: &str) -> (String, String, rustls::pki_types::CertificateDer<'static>) {
    let (ca, leaf, leaf_key) = issue(host);
    (leaf.pem(), leaf_key.serialize_pem(), ca.der().clone())
}

/// A CA and a leaf for `host` signed by it, all PEM: (CA cert, leaf cert, leaf key).
#[allow(dead_code)] // Not every test binary uses it.
pub fn ca_pem_and_leaf(host: &str) -> (String, String, String) {
    let (ca, leaf, leaf_key) = issue(host);
    (ca.pem(), leaf.pem(), leaf_key.serialize_pem())
}

/// Logs to the test output when `RUST_LOG` is set (e.g. `RUST_LOG=sluice_proxy=debug`).
pub fn init_tracing() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
}

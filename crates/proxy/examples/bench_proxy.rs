//! A stand-alone sluice proxy for benchmarks (`bench/proxy.sh`): every host and path routes
//! to the given backend addresses, as an Ingress without host would.
//!
//! ```text
//! cargo run --release -p sluice-proxy --example bench_proxy -- \
//!     --backend 127.0.0.1:9000 --http-addr 127.0.0.1:8080 --https-addr 127.0.0.1:8443 --workers 1
//! ```
//!
//! `--backend-protocol GRPC` (or any value of ingress-nginx's `backend-protocol` annotation)
//! puts that annotation on the route, as `bench/grpc.sh` does.
//!
//! `--tcp-listen ADDR` adds a Gateway API `TCP` listener there whose TCPRoute pipes to the
//! backends; `--passthrough-listen ADDR --tls-backend ADDR` a TLS `Passthrough` listener whose
//! TLSRoute pipes to the TLS backend (`bench/proxy.sh` scenarios `tcp` and `passthrough`).
//!
//! Runs until SIGINT or SIGTERM, then drains like the real thing.

/// mimalloc, as the `sluice` binary uses (see its main.rs).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use anyhow::Context as _;
use clap::Parser;
use serde_json::json;
use sluice_proxy::{Proxy, ProxyArgs};
use sluice_routing::{CompileOptions, Inputs, compile};

#[derive(Parser, Debug)]
#[command(about = "sluice proxy with a fixed route, for benchmarks")]
struct Cli {
    /// Backend endpoint (repeat for several).
    #[arg(long = "backend", required = true)]
    backends: Vec<SocketAddr>,

    /// `nginx.ingress.kubernetes.io/backend-protocol` on the Ingress (HTTP when absent).
    #[arg(long)]
    backend_protocol: Option<String>,

    /// A Gateway `TCP` listener on this address (its IP is the Gateway's), piped to the
    /// backends.
    #[arg(long)]
    tcp_listen: Option<SocketAddr>,

    /// A Gateway TLS `Passthrough` listener on this address, piped to `--tls-backend`.
    #[arg(long, requires = "tls_backend")]
    passthrough_listen: Option<SocketAddr>,

    /// The TLS backend of `--passthrough-listen`.
    #[arg(long)]
    tls_backend: Option<SocketAddr>,

    #[command(flatten)]
    proxy: ProxyArgs,
}

/// Adds a Gateway with the stream listeners asked for, and their TCPRoute and TLSRoute.
fn add_streams(inputs: &mut Inputs, cli: &Cli) {
    let mut listeners = Vec::new();
    let mut addresses = Vec::new();
    if let Some(addr) = cli.tcp_listen {
        listeners.push(json!({"name": "tcp", "port": addr.port(), "protocol": "TCP"}));
        addresses.push(addr.ip());
        inputs.tcp_routes.push(object(json!({
            "metadata": {"name": "bench", "namespace": "default"},
            "spec": {"parentRefs": [{"name": "bench", "sectionName": "tcp"}],
                     "rules": [{"backendRefs": [{"name": "bench", "port": 80}]}]}
        })));
    }
    if let (Some(addr), Some(backend)) = (cli.passthrough_listen, cli.tls_backend) {
        listeners.push(
            json!({"name": "tls", "port": addr.port(), "protocol": "TLS",
            "tls": {"mode": "Passthrough"}}),
        );
        addresses.push(addr.ip());
        inputs.tls_routes.push(object(json!({
            "metadata": {"name": "bench", "namespace": "default"},
            "spec": {"parentRefs": [{"name": "bench", "sectionName": "tls"}],
                     "rules": [{"backendRefs": [{"name": "bench-tls", "port": 443}]}]}
        })));
        inputs.services.push(object(json!({
            "metadata": {"name": "bench-tls", "namespace": "default"},
            "spec": {"ports": [{"port": 443}]}
        })));
        inputs.endpoints.push(object(json!({
            "metadata": {"name": "bench-tls", "namespace": "default"},
            "subsets": [{"addresses": [{"ip": backend.ip().to_string()}],
                         "ports": [{"port": backend.port()}]}]
        })));
    }
    if listeners.is_empty() {
        return;
    }
    addresses.dedup();
    let addresses: Vec<_> = addresses
        .iter()
        .map(|ip| json!({"type": "IPAddress", "value": ip.to_string()}))
        .collect();
    inputs
        .gateway_classes
        .push(object(json!({"metadata": {"name": "sluice"},
        "spec": {"controllerName": "sluice.dev/gateway-controller"}})));
    inputs.gateways.push(object(json!({
        "metadata": {"name": "bench", "namespace": "default"},
        "spec": {"gatewayClassName": "sluice", "addresses": addresses, "listeners": listeners}
    })));
}

fn object<T: k8s_openapi::serde::de::DeserializeOwned>(value: serde_json::Value) -> Arc<T> {
    Arc::new(serde_json::from_value(value).expect("valid object"))
}

/// One host-less Ingress routing `/` (Prefix) to Service `bench` port 80 on `backends`,
/// with the `backend-protocol` annotation when `protocol` is given.
fn inputs(backends: &[SocketAddr], protocol: Option<&str>) -> Inputs {
    let subsets: Vec<_> = backends
        .iter()
        .map(|a| json!({"addresses": [{"ip": a.ip().to_string()}], "ports": [{"port": a.port()}]}))
        .collect();
    let annotations = match protocol {
        Some(p) => json!({"nginx.ingress.kubernetes.io/backend-protocol": p}),
        None => json!({}),
    };
    Inputs {
        ingress_classes: vec![object(json!({
            "metadata": {"name": "sluice"},
            "spec": {"controller": "sluice.dev/ingress-controller"}
        }))]
        .into(),
        ingresses: vec![object(json!({
            "metadata": {"name": "bench", "namespace": "default", "annotations": annotations},
            "spec": {
                "ingressClassName": "sluice",
                "rules": [{"http": {"paths": [{
                    "path": "/", "pathType": "Prefix",
                    "backend": {"service": {"name": "bench", "port": {"number": 80}}}
                }]}}]
            }
        }))]
        .into(),
        services: vec![object(json!({
            "metadata": {"name": "bench", "namespace": "default"},
            "spec": {"ports": [{"port": 80}]}
        }))]
        .into(),
        endpoints: vec![object(json!({
            "metadata": {"name": "bench", "namespace": "default"},
            "subsets": subsets
        }))]
        .into(),
        ..Inputs::default()
    }
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_new(sluice_proxy::log_filter(
                &std::env::var("RUST_LOG").unwrap_or_else(|_| "warn".into()),
            ))
            .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .init();
    let runtime = cli.proxy.build_runtime().context("building the runtime")?;
    runtime.block_on(async move {
        let started = Instant::now();
        let mut inputs = inputs(&cli.backends, cli.backend_protocol.as_deref());
        add_streams(&mut inputs, &cli);
        let compiled = compile(&inputs, &CompileOptions::default());
        anyhow::ensure!(
            compiled.diagnostics.is_empty(),
            "bench table has problems: {:?}",
            compiled.diagnostics
        );
        let proxy = Proxy::new(cli.proxy)?;
        let failures = proxy
            .table_handle()
            .update(compiled.table, started.elapsed());
        anyhow::ensure!(
            failures.is_empty(),
            "stream listeners not bound: {failures:?}"
        );
        proxy.readiness().set_ready(true);
        let bound = proxy.bind().await?;
        println!(
            "listening http={} https={} admin={}",
            bound.http_addr(),
            bound.https_addr(),
            bound.admin_addr()
        );
        bound
            .serve(async {
                let mut term =
                    tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
                        .expect("SIGTERM handler");
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = term.recv() => {}
                }
            })
            .await
    })
}

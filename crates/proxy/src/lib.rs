//! sluice's data plane: an HTTP/1.1 + HTTP/2 reverse proxy that routes by a swappable table.
//!
//! # How it fits together
//!
//! The controller compiles Kubernetes objects into a [`sluice_routing::RouteTable`] and hands
//! each new table to [`TableHandle::update`]. The proxy derives everything it needs from the
//! table (per-backend balancer state, metric labels, parsed TLS keys for SNI) and swaps the
//! result in with a single atomic store. Requests never lock: each one loads the current
//! snapshot once and keeps it until its response is over.
//!
//! ```text
//! client ─TCP/TLS─▶ listener ─▶ handler ─route(host, path)─▶ backend ─p2c─▶ endpoint
//!                   (h1, h2,     (headers,                      (balancer)  (pooled
//!                    h2c, SNI)    limits)                                    HTTP/1.1)
//! ```
//!
//! * Plain port: HTTP/1.1 and h2c (prior knowledge). TLS port: ALPN `h2` / `http/1.1`, with
//!   the certificate chosen by SNI from the table; unknown names get a self-signed default.
//! * HTTP/1.1 clients: plain requests (no body, no upgrade) are served by the proxy's own
//!   loop (`http1`: `request_head` parses in place, `response_out` writes the answer); the
//!   first other request hands the connection with its unread bytes to hyper, which serves
//!   HTTP/2, bodies and upgrades (`handler`).
//! * Upstream: HTTP/1.1 spoken by the request's own task (no connection task, no channel):
//!   `headers` encodes the head, `upstream` sends it and reads the response head
//!   (`response_head`), `upstream_body` streams the body (`chunked` decodes) and hands the
//!   connection back to a per-thread keep-alive `pool`. Endpoint choice is
//!   power-of-two-choices on in-flight requests; connect failures are retried on other
//!   endpoints when the request has no body. No route: 404; no endpoints: 503; upstream
//!   failure: 502; slow head: 504.
//! * WebSocket upgrades are relayed; bodies stream both ways with the size limit enforced.
//! * An admin listener serves `/metrics`, `/healthz` and `/readyz` ([`Readiness`]).
//!
//! # Using it
//!
//! ```no_run
//! # async fn demo() -> anyhow::Result<()> {
//! use sluice_proxy::{Proxy, ProxyArgs};
//! let proxy = Proxy::new(ProxyArgs::default())?;
//! let table = proxy.table_handle();       // give this to whatever compiles tables
//! proxy.readiness().set_ready(true);      // once the first real table is in
//! proxy.serve(async { let _ = tokio::signal::ctrl_c().await; }).await?;
//! # drop(table); Ok(()) }
//! ```
//!
//! Tests bind to port 0 with [`ProxyArgs::loopback`] and [`Proxy::bind`], then read the
//! real addresses from [`BoundProxy`].

#![warn(missing_docs)]

mod access_log;
mod admin;
mod balancer;
mod body;
mod chunked;
mod config;
mod errors;
mod handler;
mod headers;
mod http1;
mod listener;
mod metrics;
mod pool;
mod request_head;
mod response_head;
mod response_out;
mod shutdown;
mod side_wake;
mod snapshot;
mod tls;
mod upstream;
mod upstream_body;
mod websocket;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::Context as _;
use prometheus_client::registry::Registry;
use rustls::pki_types::CertificateDer;
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::info;

pub use admin::Readiness;
pub use config::{
    DEFAULT_ADMIN_ADDR, DEFAULT_HTTP_ADDR, DEFAULT_HTTPS_ADDR, Http1Server, ProxyArgs,
    parse_duration, parse_size, parse_switch,
};
pub use snapshot::TableHandle;
pub use tls::DEFAULT_CERT_NAME;

use handler::Shared;
use listener::{Protocols, Transport};
use metrics::Metrics;
use shutdown::Phases;

/// A configured proxy, not yet listening.
///
/// Hand out its [`TableHandle`] and [`Readiness`] first, then [`Proxy::serve`] (or
/// [`Proxy::bind`] and [`BoundProxy::serve`] to learn the bound addresses).
pub struct Proxy {
    args: ProxyArgs,
    registry: Registry,
    shared: Arc<Shared>,
    table: TableHandle,
    readiness: Readiness,
    tls: TlsAcceptor,
    default_cert: CertificateDer<'static>,
}

impl std::fmt::Debug for Proxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Proxy")
            .field("args", &self.args)
            .finish_non_exhaustive()
    }
}

/// The listeners a proxy serves on, for callers that bind them themselves.
#[derive(Debug)]
pub struct Listeners {
    /// Plain HTTP (HTTP/1.1 and h2c).
    pub http: TcpListener,
    /// HTTPS.
    pub https: TcpListener,
    /// Admin endpoints.
    pub admin: TcpListener,
}

impl Proxy {
    /// Builds a proxy from its flags: metrics, an empty routing table (every request 404),
    /// the TLS configuration with a freshly generated default certificate, the upstream pool
    /// and, with `--access-log`, the access log writer.
    pub fn new(args: ProxyArgs) -> anyhow::Result<Proxy> {
        let mut registry = Registry::default();
        let metrics = Metrics::new(&mut registry);
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let table = TableHandle::new(Arc::clone(&metrics), Arc::clone(&provider));
        let default_key =
            tls::default_certificate(&provider).context("generating the default certificate")?;
        let default_cert = tls::leaf(&default_key);
        let tls_config = tls::server_config(provider, Arc::clone(&table.shared), default_key)
            .context("building the TLS configuration")?;
        let access_log = if args.access_log {
            Some(access_log::AccessLog::spawn().context("starting the access log writer")?)
        } else {
            None
        };
        let shared = Arc::new(Shared {
            table: Arc::clone(&table.shared),
            upstreams: upstream::Upstreams {
                pool: pool::PoolConfig {
                    id: pool::PoolId::next(),
                    idle_timeout: args.idle_timeout,
                },
                connect_timeout: args.connect_timeout,
            },
            metrics,
            access_log,
            upstream_header_timeout: args.upstream_header_timeout,
            body_limit: args.body_limit(),
            tunnels: TaskTracker::new(),
            tunnels_stop: CancellationToken::new(),
        });
        Ok(Proxy {
            args,
            registry,
            shared,
            table,
            readiness: Readiness::default(),
            tls: TlsAcceptor::from(tls_config),
            default_cert,
        })
    }

    /// The handle through which new routing tables are installed.
    pub fn table_handle(&self) -> TableHandle {
        self.table.clone()
    }

    /// The readiness flag reported by `/readyz` (starts not ready).
    pub fn readiness(&self) -> Readiness {
        self.readiness.clone()
    }

    /// The metric registry served at `/metrics`; other components may register their
    /// metrics here before the proxy is bound.
    pub fn registry_mut(&mut self) -> &mut Registry {
        &mut self.registry
    }

    /// The self-signed certificate presented for unknown or absent SNI names.
    pub fn default_certificate(&self) -> &CertificateDer<'static> {
        &self.default_cert
    }

    /// The flags this proxy was built with.
    pub fn args(&self) -> &ProxyArgs {
        &self.args
    }

    /// Binds the HTTP, HTTPS and admin addresses of the flags.
    pub async fn bind(self) -> anyhow::Result<BoundProxy> {
        let bind = |addr: SocketAddr, what: &'static str| async move {
            TcpListener::bind(addr)
                .await
                .with_context(|| format!("binding the {what} listener on {addr}"))
        };
        let listeners = Listeners {
            http: bind(self.args.http_addr, "HTTP").await?,
            https: bind(self.args.https_addr, "HTTPS").await?,
            admin: bind(self.args.admin_addr, "admin").await?,
        };
        self.with_listeners(listeners)
    }

    /// Uses listeners bound by the caller instead of the flag addresses.
    pub fn with_listeners(self, listeners: Listeners) -> anyhow::Result<BoundProxy> {
        let addrs = [
            listeners.http.local_addr()?,
            listeners.https.local_addr()?,
            listeners.admin.local_addr()?,
        ];
        Ok(BoundProxy {
            proxy: self,
            listeners,
            addrs,
        })
    }

    /// Binds and serves until `shutdown` completes, then drains (see [`BoundProxy::serve`]).
    pub async fn serve(self, shutdown: impl Future<Output = ()>) -> anyhow::Result<()> {
        self.bind().await?.serve(shutdown).await
    }
}

/// A proxy with bound listeners, ready to serve.
#[derive(Debug)]
pub struct BoundProxy {
    proxy: Proxy,
    listeners: Listeners,
    addrs: [SocketAddr; 3],
}

impl BoundProxy {
    /// The bound plain HTTP address.
    pub fn http_addr(&self) -> SocketAddr {
        self.addrs[0]
    }

    /// The bound HTTPS address.
    pub fn https_addr(&self) -> SocketAddr {
        self.addrs[1]
    }

    /// The bound admin address.
    pub fn admin_addr(&self) -> SocketAddr {
        self.addrs[2]
    }

    /// The handle through which new routing tables are installed.
    pub fn table_handle(&self) -> TableHandle {
        self.proxy.table_handle()
    }

    /// The readiness flag reported by `/readyz`.
    pub fn readiness(&self) -> Readiness {
        self.proxy.readiness()
    }

    /// The self-signed certificate presented for unknown or absent SNI names.
    pub fn default_certificate(&self) -> &CertificateDer<'static> {
        self.proxy.default_certificate()
    }

    /// Serves until `shutdown` completes. Then: `/readyz` turns 503, the listeners close,
    /// in-flight requests (and WebSockets) get up to `--drain-timeout` to finish, and the
    /// rest is cut. Returns once everything is closed.
    pub async fn serve(self, shutdown: impl Future<Output = ()>) -> anyhow::Result<()> {
        let BoundProxy {
            proxy,
            listeners,
            addrs,
        } = self;
        let Proxy {
            args,
            registry,
            shared,
            readiness,
            tls,
            ..
        } = proxy;
        let phases = Phases::default();
        let connections = TaskTracker::new();
        let protocols = Arc::new(Protocols::new(&args));
        let admin_stop = CancellationToken::new();
        info!(
            http = %addrs[0], https = %addrs[1], admin = %addrs[2],
            "proxy listening"
        );

        let accept = |listener, transport| {
            tokio::spawn(listener::accept_loop(
                listener,
                transport,
                Arc::clone(&shared),
                Arc::clone(&protocols),
                phases.clone(),
                connections.clone(),
            ))
        };
        let http = accept(listeners.http, Transport::Plain);
        let https = accept(listeners.https, Transport::Tls(tls));
        let admin = tokio::spawn(admin::serve(
            listeners.admin,
            Arc::new(registry),
            readiness.clone(),
            admin_stop.clone(),
        ));

        shutdown.await;
        info!("shutting down");
        readiness.set_ready(false);
        // Accept loops end as soon as they see the phase; wait so listeners are closed.
        let drained = shutdown::drain(
            &phases,
            &connections,
            &shared.tunnels,
            &shared.tunnels_stop,
            args.drain_timeout,
        );
        let (_, _, _) = tokio::join!(drained, http, https);
        admin_stop.cancel();
        let _ = admin.await;
        Ok(())
    }
}

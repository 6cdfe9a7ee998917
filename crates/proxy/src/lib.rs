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
//! client ─TCP/TLS─▶ front ─▶ pipeline ───────────────────────────────▶ upstream ─▶ front
//!                  (parse)  (admit, route, decision, auth, outgoing,   (driver,    (write)
//!                            mirror, exchange)                         transports)
//! ```
//!
//! # Where to start: one folder per concept, each using only those below it
//!
//! From the top (`tests/module_graph.rs` checks that no folder reaches up):
//!
//! * `serve/`: the servers `lib.rs` starts: thread-per-core `workers` and the `admin`
//!   listener (metrics, health, readiness, the `dashboard`).
//! * `front/`: read requests, write answers. `listener` accepts, reads a PROXY protocol
//!   header (`proxy_protocol`), terminates TLS (`tls`) and picks a front end: `http1`, the
//!   proxy's own HTTP/1.1 loop for plain bodiless requests (`response_out` writes), or
//!   `hyper_service` for what hyper reads (HTTP/2, bodies, upgrades). A front end does
//!   nothing but parse a head into a `pipeline::view::RequestView`, call the pipeline, and
//!   write its `Reply`. The own loop hands a connection to hyper, with the unread bytes and
//!   the first request's routing, when a request is not plain or its backend is behind
//!   hyper's client.
//! * `pipeline/`: the phases, in the order `pipeline/mod.rs` lists them, written once:
//!   `admit` (refusals, nginx's path normalisation), `route` (one atomic snapshot load,
//!   one draw of a split or canary), `decision` (the route's own answers via
//!   `route_policy`, fixed status, rewrite, rate limits, response fields), `auth`
//!   (`auth-url`), `outgoing` (the upstream request, in one place; `affinity`, `mirror`),
//!   `exchange` (the upstream step within the route's timeouts, and the custom-error
//!   intercept), `response_edits` (the response head's edits).
//! * `upstream/`: `driver`, the tries of a request written once for every transport (the
//!   retry rules in `retry`: `proxy_next_upstream`, Gateway API per-try timeouts; the head
//!   timeout); the transports, one try each: `http1`, the own HTTP/1.1 client, and
//!   `client`, hyper's clients for HTTPS, h2c and gRPC.
//! * `body/`: the request body, the response body (which closes the request's books when
//!   it ends) and an upstream response body as the own client reads it (`upstream`).
//! * `context` (what every phase may read), then `snapshot` (the swappable table and its
//!   derived state, the Gateway sockets it names).
//! * `backend/`: per-backend state kept across requests: endpoint choice (`balancer`:
//!   power of two choices, EWMA, round robin), idle connections (`pool`), client TLS
//!   (`tls`).
//! * `observe/`: metrics, access log, `explain`'s view, the log filter.
//! * `runtime/`: per-thread state (`shard`), socket binding (`bind`), the Gateway sockets
//!   (`gateway_sockets`), graceful shutdown.
//! * `http/`: messages: the request head parsed in place (`request_head`), a request's
//!   fields (`request_fields`), the upstream response head (`response_head`), and which
//!   fields cross the proxy (`header_policy`).
//! * `compress/`: response compression (gzip, brotli, zstd): the settings, the
//!   `Accept-Encoding` negotiation, the streaming body encoder; used by both front ends'
//!   writers and the response body.
//! * `global_rate_limit/`: the rate limit counted in a store all replicas share (memcached,
//!   Redis), with its decision cache and its flags.
//! * `trace/`: distributed tracing (W3C Trace Context, OpenTelemetry server spans over
//!   OTLP), with its flags; a request pays one branch when it is off.
//! * Leaves: `rate_limit` (the limiters' state), `chunked`, `stall`, `errors` (the
//!   pages), `config` (flags).
//!
//! Timeouts on every phase: client head, client body, connect, upstream send, upstream
//! head, upstream body, sending to the client (`front::activity`), WebSocket idle,
//! keep-alive idle. No route: 404; no endpoints: 503; upstream failure: 502; slow upstream:
//! 504; loops: 508. An admin listener serves `/metrics`, `/healthz` and `/readyz`
//! ([`Readiness`]).
//!
//! # Gateway API slots of the route IR
//!
//! `RouteEntry::split`: `pipeline::route` draws one backend by weight (weight 0 never; an
//! unusable one answers 500, one without ready endpoints 503; canaries and
//! `default-backend` are Ingress-only). `RouteEntry::fixed_status` (and the 500 of an
//! unusable draw): answered by `decision` right after `route_policy::answer`, so a
//! `RequestRedirect` still wins. The policy's `request_redirect`: in
//! `route_policy::answer`, after ingress-nginx's redirects, its `Location` from the
//! listener's scheme and the request's host (port stripped), path and query.
//! `path_rewrite`: `route_policy::upstream_target` (before `rewrite-target`, the query
//! kept). `request_headers_add`/`_remove`: `header_policy::encode_request_head`, after the
//! route's set fields (set, add, remove; names in any case). `response_headers_add`/
//! `_remove`: `response_edits`, after the set fields. `request_timeout`:
//! `upstream::within` around the whole upstream step (retries included) from the
//! request's start, 504; it is also the head wait unless `proxy-read-timeout` is set.
//! `backend_request_timeout`: `Outgoing::try_timeout`, each try (a timed-out try is
//! retried like a connect timeout; the last one answers 504). `RouteEntry::mirrors`:
//! `mirror::copy`, just before the primary goes upstream: bodiless requests only (others
//! count as `skipped`), one random endpoint per mirror, a task of its own, at most
//! `mirror::MAX_IN_FLIGHT` copies per process (more are `dropped`), counted in
//! `sluice_mirror_requests_total{result}`.
//!
//! The policy's `snippet` (interpreted `configuration-snippet`/`server-snippet`):
//! `pipeline::snippet` runs its rules once per request; `decision` answers its `return`
//! or redirect right after `route_policy::answer`, sends its rewritten path (before
//! `rewrite-target`, which a `break` skips), adds its fields with variables to the set
//! fields of both directions, and `response_edits` applies its `add_header`s (on nginx's
//! statuses unless `always`) and wildcard clears.
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

mod auth_cache;
mod backend;
mod body;
mod chunked;
mod compress;
mod config;
mod context;
mod errors;
mod front;
mod global_rate_limit;
mod http;
mod observe;
mod pipeline;
mod rate_limit;
mod retired;
mod runtime;
mod serve;
mod settings;
mod snapshot;
mod stall;
mod trace;
mod upstream;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::Context as _;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::registry::Registry;
use rustls::pki_types::CertificateDer;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::info;

pub use compress::{
    Compression, DEFAULT_BROTLI_TYPES, DEFAULT_GZIP_TYPES, MediaTypes, UserAgents, parse_types,
    parse_user_agents,
};
pub use config::{
    Cidr, DEFAULT_ADMIN_ADDR, DEFAULT_HTTP_ADDR, DEFAULT_HTTPS_ADDR, Http1Server, MetricsCompat,
    ProxyArgs, is_legacy_bool, parse_bool, parse_cidr, parse_duration, parse_listen_addr,
    parse_size, parse_timeout,
};
pub use front::tls::DEFAULT_CERT_NAME;
pub use global_rate_limit::config::{GlobalRateLimitArgs, GlobalRateLimitBackend, parse_millis};
pub use observe::control_info::{Explainer, Warning};
pub use observe::log_filter::log_filter;
pub use observe::metrics::LeaderStatus;
pub use runtime::gateway_sockets::BindFailures;
pub use serve::admin::Readiness;
pub use snapshot::TableHandle;
pub use trace::{OtelSampler, SamplerRatio, Tracing, parse_sampler_ratio};

use backend::pool;
use context::Shared;
use front::{listener, tls};
use listener::{Listening, Protocols, Transport};
use metrics::Metrics;
use observe::{access_log, metrics};
use runtime::{bind, gateway_sockets, shard, shutdown};
use serve::{admin, dashboard, workers};
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
    tls: tls::TlsConfigs,
    default_cert: CertificateDer<'static>,
    /// Where Gateway sockets go once bound: one per worker, or one in all.
    gateway_sockets: Vec<tokio::sync::mpsc::UnboundedReceiver<gateway_sockets::NewSocket>>,
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
        let shards = shard::Shards::new(args.workers.unwrap_or(1));
        let metrics = Metrics::new(&mut registry, shards);
        observe::ingress_nginx_metrics::register(
            args.metrics_compat,
            &args.controller_class,
            &mut registry,
            &metrics,
        );
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let (sockets, gateway_sockets) =
            gateway_sockets::GatewaySockets::new(args.workers.unwrap_or(1));
        let tracer = trace::Tracer::new(&args.tracing).context("setting up tracing")?;
        let proxy_id = match &args.proxy_id {
            Some(id) => id.clone(),
            None => random_proxy_id(),
        };
        let table = TableHandle::new(
            Arc::clone(&metrics),
            Arc::clone(&provider),
            sockets,
            snapshot::Flags {
                args: args.clone(),
                proxy_id,
            },
            tracer,
            global_rate_limit::StoreHandle::new(&args.global_rate_limit)
                .context("setting up the global rate limit")?,
        );
        let default_key =
            tls::default_certificate(&provider).context("generating the default certificate")?;
        let default_cert = tls::leaf(&default_key);
        let tls_configs = tls::server_configs(provider, Arc::clone(&table.shared), default_key)
            .context("building the TLS configuration")?;
        // Always started: the ConfigMap's `disable-access-log` can turn logging on later.
        let access_log =
            Some(access_log::AccessLog::spawn().context("starting the access log writer")?);
        let global_limiter =
            global_rate_limit::GlobalLimiter::new(&args.global_rate_limit, &mut registry);
        let shared = Arc::new(Shared {
            table: Arc::clone(&table.shared),
            upstreams: context::Upstreams {
                pool: pool::PoolConfig::new(pool::PoolId::next(), args.idle_timeout),
                connect_timeout: args.connect_timeout,
                send_timeout: args.upstream_send_timeout,
                read_timeout: args.upstream_read_timeout,
            },
            metrics,
            access_log,
            upstream_header_timeout: args.upstream_header_timeout,
            websocket_idle_timeout: args.websocket_idle_timeout,
            body_limit: args.body_limit(),
            limiter: rate_limit::Limiter::default(),
            global_limiter,
            auth_timeout: args.auth_timeout,
            auth_answers: auth_cache::AuthAnswers::default(),
            tunnels: TaskTracker::new(),
            tunnels_stop: CancellationToken::new(),
        });
        Ok(Proxy {
            args,
            registry,
            shared,
            table,
            readiness: Readiness::default(),
            tls: tls_configs,
            default_cert,
            gateway_sockets,
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

    /// Registers `sluice_leader` (for a replica that takes part in leader election) and
    /// returns its handle.
    pub fn leader_status(&mut self) -> observe::metrics::LeaderStatus {
        observe::metrics::LeaderStatus::register(&mut self.registry, &self.shared.metrics)
    }

    /// The self-signed certificate presented for unknown or absent SNI names while the
    /// routing table has no default certificate of its own (`--default-ssl-certificate`).
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
            TcpListener::bind(addr).await.map_err(|e| {
                let context = bind::bind_failure(what, addr, &e);
                anyhow::Error::new(e).context(context)
            })
        };
        let Some(count) = self.args.workers else {
            let listeners = Listeners {
                http: bind(self.args.http_addr, "HTTP").await?,
                https: bind(self.args.https_addr, "HTTPS").await?,
                admin: bind(self.args.admin_addr, "admin").await?,
            };
            return self.with_listeners(listeners);
        };
        // Thread-per-core: every worker gets its own socket on each address.
        let count = count.max(1);
        let many = |addr: SocketAddr, what: &'static str| {
            bind::bind_many(addr, count).map_err(|e| {
                let context = bind::bind_failure(what, addr, &e);
                anyhow::Error::new(e).context(context)
            })
        };
        let http = many(self.args.http_addr, "HTTP")?;
        let https = many(self.args.https_addr, "HTTPS")?;
        let admin = bind(self.args.admin_addr, "admin").await?;
        let addrs = [
            http[0].local_addr()?,
            https[0].local_addr()?,
            admin.local_addr()?,
        ];
        let sockets = http
            .into_iter()
            .zip(https)
            .map(|(http, https)| workers::WorkerSockets { http, https })
            .collect();
        Ok(BoundProxy {
            proxy: self,
            data: DataListeners::Workers(sockets),
            admin,
            addrs,
        })
    }

    /// Uses listeners bound by the caller instead of the flag addresses.
    pub fn with_listeners(self, listeners: Listeners) -> anyhow::Result<BoundProxy> {
        let addrs = [
            listeners.http.local_addr()?,
            listeners.https.local_addr()?,
            listeners.admin.local_addr()?,
        ];
        let Listeners { http, https, admin } = listeners;
        Ok(BoundProxy {
            proxy: self,
            data: DataListeners::Shared { http, https },
            admin,
            addrs,
        })
    }

    /// Binds and serves until `shutdown` completes, then drains (see [`BoundProxy::serve`]).
    pub async fn serve(self, shutdown: impl Future<Output = ()>) -> anyhow::Result<()> {
        self.bind().await?.serve(shutdown).await
    }
}

/// A proxy id unlike any other proxy's: `sluice-` and 8 hex digits from the process's
/// random hasher keys, the process id and the time.
fn random_proxy_id() -> String {
    use std::hash::{BuildHasher as _, Hasher as _};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u32(std::process::id());
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    hasher.write_u128(now);
    format!("sluice-{:08x}", hasher.finish() as u32)
}

/// The `worker` label of per-worker metrics.
#[derive(Clone, Debug, Hash, PartialEq, Eq, prometheus_client::encoding::EncodeLabelSet)]
struct WorkerLabel {
    worker: String,
}

/// A proxy with bound listeners, ready to serve.
#[derive(Debug)]
pub struct BoundProxy {
    proxy: Proxy,
    data: DataListeners,
    admin: TcpListener,
    addrs: [SocketAddr; 3],
}

/// Where requests are accepted.
#[derive(Debug)]
enum DataListeners {
    /// One listener per address, served on the caller's runtime.
    Shared {
        http: TcpListener,
        https: TcpListener,
    },
    /// `--workers`: sockets per worker thread.
    Workers(Vec<workers::WorkerSockets>),
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

    /// The self-signed certificate presented for unknown or absent SNI names while the
    /// routing table has no default certificate of its own (`--default-ssl-certificate`).
    pub fn default_certificate(&self) -> &CertificateDer<'static> {
        self.proxy.default_certificate()
    }

    /// Serves until `shutdown` completes. Then: `/readyz` turns 503, the listeners close,
    /// in-flight requests (and WebSockets) get up to `--drain-timeout` to finish, and the
    /// rest is cut. Returns once everything is closed.
    pub async fn serve(self, shutdown: impl Future<Output = ()>) -> anyhow::Result<()> {
        let BoundProxy {
            proxy,
            data,
            admin,
            addrs,
        } = self;
        let Proxy {
            args,
            registry,
            shared,
            readiness,
            tls,
            gateway_sockets,
            ..
        } = proxy;
        let phases = Phases::default();
        let connections = TaskTracker::new();
        let protocols = Arc::new(Protocols::new(
            &args,
            &shared.table.current.load().settings.connections,
        ));
        let admin_stop = CancellationToken::new();
        let worker_count = match &data {
            DataListeners::Shared { .. } => 0,
            DataListeners::Workers(sockets) => sockets.len(),
        };
        info!(
            http = %addrs[0], https = %addrs[1], admin = %addrs[2], workers = worker_count,
            "proxy listening"
        );

        // Per-worker figures are registered before the registry is shared with the admin
        // server.
        let mut registry = registry;
        let per_worker: prometheus_client::metrics::family::Family<WorkerLabel, Counter> =
            Default::default();
        let per_worker_requests: prometheus_client::metrics::family::Family<WorkerLabel, Counter> =
            Default::default();
        if worker_count > 0 {
            registry.register(
                "sluice_worker_connections_accepted",
                "Client connections accepted, by worker thread",
                per_worker.clone(),
            );
            registry.register(
                "sluice_worker_requests",
                "Requests answered, by worker thread (how evenly the kernel spreads load)",
                per_worker_requests.clone(),
            );
        }
        let history = Arc::new(dashboard::History::default());
        let admin = tokio::spawn(admin::serve(
            admin,
            admin::Admin {
                registry: Arc::new(registry),
                readiness: readiness.clone(),
                table: Arc::clone(&shared.table),
                history: Arc::clone(&history),
            },
            admin_stop.clone(),
        ));
        let sampler = tokio::spawn(admin::sample(
            Arc::clone(&shared.table),
            history,
            admin_stop.clone(),
        ));

        let finished = CancellationToken::new();
        let mut shared_loops = Vec::new();
        let mut threads = Vec::new();
        match data {
            DataListeners::Shared { http, https } => {
                let accept = |listening| {
                    tokio::spawn(listener::accept_loop(
                        listening,
                        Arc::clone(&shared),
                        Arc::clone(&protocols),
                        phases.clone(),
                        connections.clone(),
                        None,
                    ))
                };
                shared_loops.push(accept(Listening::shared(http, Transport::Plain)));
                shared_loops.push(accept(Listening::shared(
                    https,
                    Transport::Tls(tls.clone()),
                )));
                for new_sockets in gateway_sockets {
                    shared_loops.push(tokio::spawn(listener::accept_gateway_sockets(
                        new_sockets,
                        tls.clone(),
                        Arc::clone(&shared),
                        Arc::clone(&protocols),
                        phases.clone(),
                        connections.clone(),
                        None,
                    )));
                }
            }
            DataListeners::Workers(sockets) => {
                let context = workers::WorkerContext {
                    shared: Arc::clone(&shared),
                    protocols: Arc::clone(&protocols),
                    tls,
                    phases: phases.clone(),
                    connections: connections.clone(),
                    finished: finished.clone(),
                    pin: args.pin_workers,
                };
                for (index, (sockets, gateway)) in
                    sockets.into_iter().zip(gateway_sockets).enumerate()
                {
                    let label = WorkerLabel {
                        worker: index.to_string(),
                    };
                    let counters = workers::WorkerCounters {
                        accepted: per_worker.get_or_create(&label).clone(),
                        requests: per_worker_requests.get_or_create(&label).clone(),
                    };
                    match workers::spawn(index, sockets, gateway, &context, counters) {
                        Ok(thread) => threads.push(thread),
                        Err(error) => {
                            finished.cancel();
                            phases.stop_accepting.cancel();
                            return Err(anyhow::anyhow!("starting worker {index}: {error}"));
                        }
                    }
                }
            }
        }

        shutdown.await;
        info!("shutting down");
        readiness.set_ready(false);
        // Accept loops end as soon as they see the phase; wait so listeners are closed.
        shutdown::drain(
            &phases,
            &connections,
            &shared.tunnels,
            &shared.tunnels_stop,
            args.drain_timeout,
        )
        .await;
        for accept in shared_loops {
            let _ = accept.await;
        }
        // Workers stop their runtimes (what is left on them is dropped) and exit.
        finished.cancel();
        let _ = tokio::task::spawn_blocking(move || {
            for thread in threads {
                let _ = thread.join();
            }
        })
        .await;
        let tracer = shared.table.current.load().tracer.clone();
        if let Some(tracer) = tracer {
            // The spans still queued go to the collector.
            tracer.shutdown().await;
        }
        admin_stop.cancel();
        let _ = admin.await;
        let _ = sampler.await;
        Ok(())
    }
}

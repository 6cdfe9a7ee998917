//! `sluice controller`: the Ingress controller on Kubernetes.
//!
//! One informer factory watches Ingress, IngressClass, Service, EndpointSlice (or Endpoints
//! where discovery.k8s.io/v1 is not served) and TLS Secrets; every change enqueues one
//! coalesced rebuild ([`crate::rebuild`]); the new table is swapped into the proxy. The
//! leader of a Lease ([`sluice_informer::leader_election`]) writes Ingress status
//! ([`status`]) and Events ([`events`]); every replica serves traffic from its own cache.

pub mod events;
pub mod gateway_service;
pub mod gateway_status;
pub mod status;
pub mod status_scope;
pub mod webhook;

use crate::control::ControlRuntime;
use crate::rebuild::Rebuilder;
use crate::serve::{ClassArgs, DefaultsArgs};
use crate::sources::IngressInformers;
use anyhow::Context;
use sluice_informer::SharedInformerFactory;
use sluice_informer::leader_election::{LeaderElectionArgs, LeaderElector};
use sluice_proxy::{Proxy, ProxyArgs};
use status::{Publish, StatusWriter};
use status_scope::Scope;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// Flags of `sluice controller`.
#[derive(clap::Args, Clone, Debug)]
pub struct ControllerArgs {
    /// kubeconfig file; default: `KUBECONFIG`, then `~/.kube/config`, then in-cluster.
    #[arg(long, value_name = "FILE")]
    pub kubeconfig: Option<PathBuf>,

    /// Watch only this namespace (default: all).
    #[arg(long, value_name = "NAMESPACE",
          value_parser = clap::builder::NonEmptyStringValueParser::new())]
    pub watch_namespace: Option<String>,

    /// Which Ingresses are ours (class flags).

    #[command(flatten)]
    pub class: ClassArgs,

    /// Cluster-wide defaults (default backend, certificate).

    #[command(flatten)]
    pub defaults: DefaultsArgs,

    /// Publish the address of this Service (`NAMESPACE/NAME`) in Ingress status.
    #[arg(long, value_name = "NAMESPACE/NAME")]
    pub publish_service: Option<String>,

    /// Publish these addresses (comma-separated IPs or host names) in Ingress status.
    #[arg(long, value_name = "ADDRESSES")]
    pub publish_status_address: Option<String>,

    /// Leader election: the leader writes Ingress status and Events; every replica serves.
    /// The Lease is `sluice-leader` unless `--election-id` says otherwise.
    #[command(flatten)]
    pub election: LeaderElectionArgs,

    /// After SIGTERM, how long `/readyz` reports unready while listeners still accept, so
    /// that load balancers stop sending before connections are refused.
    #[arg(long, default_value = "5s", value_name = "DURATION",
          value_parser = sluice_proxy::parse_duration)]
    pub shutdown_delay: Duration,

    /// Gateway API (GatewayClass, Gateway, HTTPRoute, ReferenceGrant): `auto` watches them
    /// when the cluster serves their CRDs (and says once that it does not), `on` requires
    /// them, `off` never watches them.
    #[arg(long, value_enum, default_value = "auto")]
    pub gateway_api: GatewayApi,

    /// With `--gateway-api=auto` and no Gateway API CRDs at start: how often to ask the API
    /// server again; once they are served, the Gateway API kinds are watched without a
    /// restart.
    #[arg(long, default_value = "30s", value_name = "DURATION",
          value_parser = sluice_proxy::parse_timeout)]
    pub gateway_api_recheck: Duration,

    /// How long to wait for the caches to fill at start.
    #[arg(long, default_value = "60s", value_name = "DURATION",
          value_parser = sluice_proxy::parse_timeout)]
    pub sync_timeout: Duration,

    /// Serve the validating admission webhook on this address (HTTPS, `POST /validate`),
    /// e.g. `0.0.0.0:8443` or `:8443` (ingress-nginx's flag of the same name): Ingresses
    /// and routes of ours that would not be served as written are refused at `kubectl
    /// apply`, with the diagnostics of the Events. Off unless set; needs
    /// --validating-webhook-certificate and --validating-webhook-key.
    // The `--webhook-*` spellings are those of earlier releases, warned about by the binary.
    #[arg(long = "validating-webhook", alias = "webhook-addr", value_name = "IP:PORT",
          value_parser = sluice_proxy::parse_listen_addr,
          requires_all = ["webhook_cert_file", "webhook_key_file"])]
    pub webhook_addr: Option<std::net::SocketAddr>,

    /// The webhook's serving certificate (PEM, the chain; e.g. `tls.crt` of a mounted
    /// Secret), read again when it changes.
    #[arg(
        long = "validating-webhook-certificate",
        alias = "webhook-cert-file",
        value_name = "FILE",
        requires = "webhook_addr"
    )]
    pub webhook_cert_file: Option<PathBuf>,

    /// The webhook's private key (PEM; e.g. `tls.key` of a mounted Secret).
    #[arg(
        long = "validating-webhook-key",
        alias = "webhook-key-file",
        value_name = "FILE",
        requires = "webhook_addr"
    )]
    pub webhook_key_file: Option<PathBuf>,

    /// Makes a Service per Gateway of ours, of this type (`ClusterIP`, `NodePort`,
    /// `LoadBalancer`), selecting the proxy's pods (`--gateway-service-selector`) with a
    /// port per listener port and the Gateway's `spec.infrastructure` labels and
    /// annotations; `None` (the default): none.
    #[arg(long, value_enum, default_value = "None")]
    pub gateway_service_type: gateway_service::GatewayServiceType,

    /// The labels of the proxy's pods, for the Services of `--gateway-service-type`.
    #[arg(long, value_name = "KEY=VALUE,...", default_value = "app.kubernetes.io/name=sluice",
          value_parser = parse_labels)]
    pub gateway_service_selector: Labels,

    /// The data plane's settings.

    #[command(flatten)]
    pub proxy: ProxyArgs,
}

/// `--gateway-service-selector`: labels, `KEY=VALUE` comma-separated.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Labels(pub std::collections::BTreeMap<String, String>);

/// Parses `KEY=VALUE,...` (at least one; keys and values non-empty).
fn parse_labels(value: &str) -> Result<Labels, String> {
    let mut out = std::collections::BTreeMap::new();
    for pair in value.split(',') {
        match pair.trim().split_once('=') {
            Some((k, v)) if !k.trim().is_empty() && !v.trim().is_empty() => {
                out.insert(k.trim().to_owned(), v.trim().to_owned());
            }
            _ => return Err(format!("{pair:?} is not KEY=VALUE")),
        }
    }
    Ok(Labels(out))
}

/// `--gateway-api`.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum GatewayApi {
    /// Watch the Gateway API kinds when the cluster serves them.
    Auto,
    /// Require them: fail at start when they are not served.
    On,
    /// Never watch them.
    Off,
}

/// Logged (info, once at start) when `--gateway-api=auto` finds no Gateway API CRDs.
pub const GATEWAY_API_NOT_SERVED: &str = "Gateway API CRDs not served, serving Ingress only";

/// Logged (info) when `--gateway-api=auto` finds the CRDs served after start.
pub const GATEWAY_API_NOW_SERVED: &str = "Gateway API CRDs now served, watching them too";

/// Whether the cluster serves the Gateway API kinds sluice reads: GatewayClass, Gateway
/// and HTTPRoute at `gateway.networking.k8s.io/v1`, ReferenceGrant at `v1beta1`.
///
/// A group version the server does not know (404) means no; any other failure is an
/// error, so that a discovery call that merely failed does not turn the Gateway API off
/// for the life of the process.
pub async fn gateway_api_served(client: &kube::Client) -> anyhow::Result<bool> {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::APIResourceList;
    async fn kinds(client: &kube::Client, gv: &str) -> anyhow::Result<Option<APIResourceList>> {
        match client.list_api_group_resources(gv).await {
            Ok(list) => Ok(Some(list)),
            Err(kube::Error::Api(e)) if e.code == 404 => Ok(None),
            Err(e) => Err(anyhow::anyhow!("discovery of {gv}: {e}")),
        }
    }
    let has = |list: &Option<APIResourceList>, wanted: &[&str]| {
        list.as_ref().is_some_and(|list| {
            wanted
                .iter()
                .all(|k| list.resources.iter().any(|r| r.kind == *k))
        })
    };
    let v1 = kinds(client, "gateway.networking.k8s.io/v1").await?;
    // GRPCRoute is in v1 since Gateway API v1.1 (2024).
    if !has(&v1, &["GatewayClass", "Gateway", "HTTPRoute", "GRPCRoute"]) {
        return Ok(false);
    }
    let v1beta1 = kinds(client, "gateway.networking.k8s.io/v1beta1").await?;
    Ok(has(&v1beta1, &["ReferenceGrant"]))
}

/// The optional Gateway API route kinds the cluster serves at v1 (see
/// [`crate::sources::OptionalKinds`]).
pub async fn optional_gateway_kinds(client: &kube::Client) -> crate::sources::OptionalKinds {
    let list = client
        .list_api_group_resources("gateway.networking.k8s.io/v1")
        .await
        .ok();
    let has = |kind: &str| {
        list.as_ref()
            .is_some_and(|l| l.resources.iter().any(|r| r.kind == kind))
    };
    crate::sources::OptionalKinds {
        tcp_route: has("TCPRoute"),
        tls_route: has("TLSRoute"),
        udp_route: has("UDPRoute"),
        backend_tls_policy: has("BackendTLSPolicy"),
        listener_set: has("ListenerSet"),
    }
}

/// The Kubernetes minor versions (1.x) sluice's tests run against.
pub const TESTED_KUBE_MINORS: std::ops::RangeInclusive<u32> = 34..=37;

/// Logged (warning, once at start) when the API server's version is outside
/// [`TESTED_KUBE_MINORS`] or unreadable.
pub const UNTESTED_KUBE_VERSION: &str = "the API server's Kubernetes version is outside the \
     range sluice is tested against (1.34 to 1.37)";

/// Whether `/version`'s `major` and `minor` name a tested release. Providers append to the
/// minor (`"37+"`), so only its leading digits count.
pub fn kube_version_tested(major: &str, minor: &str) -> bool {
    let digits = |s: &str| -> Option<u32> {
        let end = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
        s[..end].parse().ok()
    };
    digits(major) == Some(1) && digits(minor).is_some_and(|m| TESTED_KUBE_MINORS.contains(&m))
}

/// Reads the API server's `/version` and warns when sluice was not tested against it.
async fn warn_if_untested_version(client: &kube::Client) {
    match client.apiserver_version().await {
        Ok(info) if kube_version_tested(&info.major, &info.minor) => {
            tracing::info!(version = %info.git_version, "API server");
        }
        Ok(info) => {
            tracing::warn!(version = %info.git_version, "{UNTESTED_KUBE_VERSION}");
        }
        Err(e) => tracing::warn!(error = %e, "{UNTESTED_KUBE_VERSION}: /version unreadable"),
    }
}

/// The Lease the controller's replicas elect their leader on, unless `--election-id`.
pub const DEFAULT_ELECTION_ID: &str = "sluice-leader";

/// A bound, running controller; see [`Controller::serve`].
///
/// The proxy serves on the caller's runtime; informers, compiling, leader election, status
/// and Events run on the controller's own [`ControlRuntime`], so a huge object or a slow
/// compile never stalls a proxy worker.
pub struct Controller {
    bound: sluice_proxy::BoundProxy,
    readiness: sluice_proxy::Readiness,
    informers: IngressInformers,
    rebuilder: Arc<Rebuilder>,
    stop: CancellationToken,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    shutdown_delay: Duration,
    webhook_addr: Option<std::net::SocketAddr>,
    // Last field: dropped after everything that may still hold tasks on it.
    control: ControlRuntime,
}

impl Controller {
    /// Connects the informers, waits for the caches, builds the first table, binds the
    /// listeners and starts leader election, status and Events. Not serving yet.
    pub async fn start(args: ControllerArgs, client: kube::Client) -> anyhow::Result<Controller> {
        Self::start_on(ControlRuntime::new()?, args, client).await
    }

    /// As [`Controller::start`], with the control plane on `control` (where `client` was
    /// best built too: a kube client's connections run on the runtime that built it).
    pub async fn start_on(
        control: ControlRuntime,
        args: ControllerArgs,
        client: kube::Client,
    ) -> anyhow::Result<Controller> {
        let publish = Publish::from_flags(
            args.publish_service.as_deref(),
            args.publish_status_address.as_deref(),
        )?;
        // Checked before anything starts: a timing that cannot work is a usage error.
        let election_timing = args.election.config()?;
        let mut proxy = Proxy::new(args.class.proxy_args(&args.proxy))?;
        let leader_status = proxy.leader_status();
        let readiness = proxy.readiness();
        let (informers, rebuilder) = control
            .run(start_informers(
                args.clone(),
                client.clone(),
                proxy.table_handle(),
            ))
            .await??;
        let bound = proxy.bind().await.context("binding the listeners")?;
        let webhook = match (
            args.webhook_addr,
            args.webhook_cert_file.clone(),
            args.webhook_key_file.clone(),
        ) {
            (Some(addr), Some(cert), Some(key)) => Some(
                control
                    .run(webhook::Webhook::bind(addr, cert, key))
                    .await??,
            ),
            (None, None, None) => None,
            _ => anyhow::bail!(
                "--validating-webhook, --validating-webhook-certificate and --validating-webhook-key go together"
            ),
        };
        let webhook_addr = webhook.as_ref().map(|w| w.local_addr()).transpose()?;

        let stop = CancellationToken::new();
        let lock = args.election.lock(
            client.clone(),
            DEFAULT_ELECTION_ID,
            args.watch_namespace.as_deref(),
        );
        let election = LeaderElector::new(lock, election_timing)?;
        let identity = election.lock().identity().to_string();
        let tasks = control
            .run(start_loops(
                args.clone(),
                client,
                Leadership {
                    elector: election,
                    status: leader_status,
                },
                publish,
                informers.clone(),
                rebuilder.clone(),
                stop.clone(),
            ))
            .await?;
        let mut tasks = tasks;
        if let Some(webhook) = webhook {
            let (r, stop) = (rebuilder.clone(), stop.clone());
            tasks.push(control.spawn(webhook.serve(r, stop)));
        }

        tracing::info!(
            webhook = ?webhook_addr,
            http = %bound.http_addr(),
            https = %bound.https_addr(),
            admin = %bound.admin_addr(),
            identity,
            "sluice controller ready"
        );
        readiness.set_ready(true);
        Ok(Controller {
            bound,
            readiness,
            informers,
            rebuilder,
            stop,
            tasks,
            shutdown_delay: args.shutdown_delay,
            webhook_addr,
            control,
        })
    }

    /// The admission webhook's address, when `--validating-webhook` is set.
    pub fn webhook_addr(&self) -> Option<std::net::SocketAddr> {
        self.webhook_addr
    }

    /// The plain HTTP address.
    pub fn http_addr(&self) -> std::net::SocketAddr {
        self.bound.http_addr()
    }

    /// The HTTPS address.
    pub fn https_addr(&self) -> std::net::SocketAddr {
        self.bound.https_addr()
    }

    /// The admin address (`/metrics`, `/healthz`, `/readyz`).
    pub fn admin_addr(&self) -> std::net::SocketAddr {
        self.bound.admin_addr()
    }

    /// Whether the Gateway API kinds are watched (`--gateway-api`, and for `auto` whether
    /// the cluster serves their CRDs, at start or since).
    pub fn gateway_api(&self) -> bool {
        self.informers.gateway().is_some()
    }

    /// Serves until `shutdown`; then turns unready, keeps accepting for the shutdown delay,
    /// drains in-flight requests, releases the Lease and stops the informers.
    pub async fn serve(
        self,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> anyhow::Result<()> {
        let readiness = self.readiness.clone();
        let delay = self.shutdown_delay;
        let stop = self.stop.clone();
        let result = self
            .bound
            .serve(async move {
                shutdown.await;
                readiness.set_ready(false);
                tracing::info!(?delay, "unready; listeners close after the shutdown delay");
                tokio::time::sleep(delay).await;
            })
            .await;
        stop.cancel();
        let (rebuilder, tasks, informers) = (self.rebuilder, self.tasks, self.informers);
        self.control
            .run(async move {
                rebuilder.queue().shut_down();
                for t in tasks {
                    // Status and Events loops end with the rebuilder's reports; the rest with
                    // `stop`.
                    let _ = tokio::time::timeout(Duration::from_secs(5), t).await;
                }
                informers.shutdown().await;
            })
            .await?;
        result
    }
}

/// On the control runtime: informers connected and synced, the first table installed.
async fn start_informers(
    args: ControllerArgs,
    client: kube::Client,
    table: sluice_proxy::TableHandle,
) -> anyhow::Result<(IngressInformers, Arc<Rebuilder>)> {
    warn_if_untested_version(&client).await;
    let gateway_api = match args.gateway_api {
        GatewayApi::Off => false,
        wanted => {
            let served = gateway_api_served(&client)
                .await
                .context("--gateway-api: is the Gateway API served?")?;
            if !served && wanted == GatewayApi::On {
                anyhow::bail!(
                    "--gateway-api=on, but the cluster does not serve the Gateway API CRDs \
                     (gateway.networking.k8s.io/v1 GatewayClass, Gateway, HTTPRoute, GRPCRoute and \
                     v1beta1 ReferenceGrant): install them (deploy/gateway-api/)"
                );
            }
            if !served {
                // Once per process; `watch_for_gateway_api` says when that changes.
                tracing::info!("{GATEWAY_API_NOT_SERVED}");
            }
            served
        }
    };
    let optional = if gateway_api {
        Some(optional_gateway_kinds(&client).await)
    } else {
        None
    };
    tracing::info!(gateway_api, ?optional, namespace = ?args.watch_namespace, "watching");
    let factory = SharedInformerFactory::new(client);
    let mut informers =
        IngressInformers::from_cluster(&factory, args.watch_namespace.as_deref(), optional);
    if let Some(config) = &args.class.configmap {
        informers.watch_nginx_config_in_cluster(&factory, &config.namespace, &config.name);
    }
    let rebuilder = Arc::new(Rebuilder::new(
        informers.clone(),
        args.defaults
            .apply(args.class.compile_options(args.watch_namespace.clone())),
        table,
    ));
    informers.start();
    if !informers.wait_for_sync(args.sync_timeout).await {
        let unsynced = informers.unsynced().join(", ");
        informers.shutdown().await;
        anyhow::bail!(
            "caches did not sync within {:?} ({unsynced}): is the API server reachable, and \
             may this identity list and watch Ingresses, IngressClasses, Services, \
             EndpointSlices and Secrets?",
            args.sync_timeout,
        );
    }
    rebuilder.rebuild_now();
    Ok((informers, rebuilder))
}

/// On the control runtime: the rebuild loop, leader election, the status and Events loops.
/// This replica's part in leader election: the elector, and the `sluice_leader` gauge that
/// follows it.
struct Leadership {
    elector: LeaderElector,
    status: sluice_proxy::LeaderStatus,
}

async fn start_loops(
    args: ControllerArgs,
    client: kube::Client,
    leadership: Leadership,
    publish: Publish,
    informers: IngressInformers,
    rebuilder: Arc<Rebuilder>,
    stop: CancellationToken,
) -> Vec<tokio::task::JoinHandle<()>> {
    let mut tasks = Vec::new();
    {
        let r = rebuilder.clone();
        tasks.push(tokio::spawn(async move { r.run().await }));
    }
    let Leadership {
        elector: election,
        status: leader_status,
    } = leadership;
    let identity = election.lock().identity().to_string();
    let (leading, election_task) = election.spawn(stop.clone());
    tasks.push(election_task);
    {
        // `sluice_leader` follows the election.
        let mut leading = leading.clone();
        tasks.push(tokio::spawn(async move {
            loop {
                leader_status.set(*leading.borrow_and_update());
                if leading.changed().await.is_err() {
                    break;
                }
            }
        }));
    }

    let writer = StatusWriter::new(
        client.clone(),
        informers.ingresses.store().clone(),
        informers.services.store().clone(),
        publish,
    );
    if args.gateway_api == GatewayApi::Auto && informers.gateway().is_none() {
        tasks.push(tokio::spawn(watch_for_gateway_api(
            client.clone(),
            args.clone(),
            informers.clone(),
            rebuilder.clone(),
            stop.clone(),
        )));
    }
    let gateway_writer = GatewayWriterSlot {
        client: client.clone(),
        controller_name: args.class.gateway_controller_name.clone(),
        services: gateway_service::GatewayServices {
            type_: args.gateway_service_type,
            selector: args.gateway_service_selector.0.clone(),
            shared_ports: (args.proxy.http_addr.port(), args.proxy.https_addr.port()),
        },
        informers: informers.clone(),
        writer: None,
    };
    tasks.push(tokio::spawn(status_loop(
        writer,
        gateway_writer,
        rebuilder.reports(),
        rebuilder.status_changes(),
        leading.clone(),
        stop,
    )));
    let publisher = events::EventPublisher::new(
        client,
        &args.class.controller_name,
        &identity,
        informers.ingresses.store().clone(),
    );
    tasks.push(tokio::spawn(publisher.run(rebuilder.reports(), leading)));
    tasks
}

/// `--gateway-api=auto` without the CRDs at start: asks discovery every
/// `--gateway-api-recheck` until they are served, then watches the Gateway API kinds too.
async fn watch_for_gateway_api(
    client: kube::Client,
    args: ControllerArgs,
    informers: IngressInformers,
    rebuilder: Arc<Rebuilder>,
    stop: CancellationToken,
) {
    let every = args.gateway_api_recheck.max(Duration::from_millis(100));
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(every) => {}
        }
        match gateway_api_served(&client).await {
            Ok(true) => break,
            Ok(false) => {}
            Err(error) => tracing::debug!(%error, "Gateway API discovery failed; asking again"),
        }
    }
    tracing::info!("{GATEWAY_API_NOW_SERVED}");
    let optional = optional_gateway_kinds(&client).await;
    let factory = SharedInformerFactory::new(client);
    if !informers.add_gateway(&factory, args.watch_namespace.as_deref(), optional) {
        return;
    }
    if !informers.wait_for_sync(args.sync_timeout).await {
        tracing::warn!(
            unsynced = ?informers.unsynced(),
            "Gateway API caches not synced yet; routes follow as they fill"
        );
    }
    rebuilder.rebuild_now();
}

/// The Gateway API status writer, made once the Gateway API kinds are watched.
struct GatewayWriterSlot {
    client: kube::Client,
    controller_name: String,
    services: gateway_service::GatewayServices,
    informers: IngressInformers,
    writer: Option<gateway_status::GatewayStatusWriter>,
}

impl GatewayWriterSlot {
    fn get(&mut self) -> Option<&gateway_status::GatewayStatusWriter> {
        if self.writer.is_none()
            && let Some(g) = self.informers.gateway()
        {
            self.writer = Some(gateway_status::GatewayStatusWriter::with_services(
                self.client.clone(),
                self.controller_name.clone(),
                g.clone(),
                self.services.clone(),
            ));
        }
        self.writer.as_ref()
    }
}

async fn status_loop(
    writer: StatusWriter,
    mut gateway_writer: GatewayWriterSlot,
    mut reports: tokio::sync::watch::Receiver<Arc<crate::rebuild::RebuildReport>>,
    status_changes: Arc<crate::StatusChanges>,
    mut leading: tokio::sync::watch::Receiver<bool>,
    stop: CancellationToken,
) {
    let mut status_ticks = status_changes.subscribe();
    // The report of the last round that wrote everything it had to: the next round visits
    // only what changed since (`None`: visit everything).
    let mut finished: Option<Arc<crate::rebuild::RebuildReport>> = None;
    loop {
        let lead = *leading.borrow_and_update();
        status_ticks.borrow_and_update();
        let touched = status_changes.take();
        if !lead {
            finished = None;
        } else {
            let report = reports.borrow_and_update().clone();
            let scope = match &finished {
                Some(since) => Scope::Changes {
                    since,
                    touched: &touched,
                },
                None => Scope::Everything,
            };
            // Ingress and Gateway API status are written independently: a failing Ingress
            // write must not keep a Gateway's conditions stale, nor the other way round.
            let ingresses = writer.sync(&report.ours, scope).await;
            // A writer made this round (the Gateway API found served) starts from everything.
            let gateway_scope = if gateway_writer.writer.is_some() {
                scope
            } else {
                Scope::Everything
            };
            let gateway = match gateway_writer.get() {
                Some(g) => match writer.published_addresses().await {
                    Ok(addresses) => g.sync(&report.gateway, &addresses, gateway_scope).await,
                    Err(e) => Err(e),
                },
                None => Ok(0),
            };
            if let Ok(n @ 1..) = gateway {
                tracing::info!(written = n, "gateway api status updated");
            }
            let written = match (ingresses, gateway) {
                (Ok(n), Ok(_)) => Ok(n),
                (Err(e), _) | (_, Err(e)) => Err(e),
            };
            match written {
                Ok(n) => {
                    if n > 0 {
                        tracing::info!(written = n, "ingress status updated");
                    }
                    finished = Some(report);
                }
                Err(e) => {
                    tracing::warn!(error = %e, "status update failed; retrying");
                    finished = None;
                    tokio::select! {
                        _ = stop.cancelled() => break,
                        _ = tokio::time::sleep(Duration::from_secs(1)) => continue,
                    }
                }
            }
        }
        let trail = tokio::select! {
            _ = stop.cancelled() => break,
            r = reports.changed() => if r.is_err() { break } else { true },
            // An object of a status-written kind was added or updated (a status someone
            // else wrote, our own write coming back, a recreated object): checked.
            s = status_ticks.changed() => if s.is_err() { break } else { true },
            l = leading.changed() => if l.is_err() { break } else { false },
        };
        if trail {
            tokio::select! {
                _ = stop.cancelled() => break,
                _ = tokio::time::sleep(STATUS_TRAIL) => {}
            }
        }
    }
}

/// How long a status round waits after the change that woke it. The change's own table is
/// served first: its rebuild runs on the same thread, and the writes make the API server
/// busy on the cores the proxy answers from. Changes within the wait share one round.
const STATUS_TRAIL: Duration = Duration::from_millis(50);

/// How long [`connect`] waits for the API server's `/version`.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// A client for the API server of `kubeconfig` (or the usual inference), once that server
/// answers: an unreachable one is an error naming it, before anything else asks it.
async fn connect(kubeconfig: Option<&std::path::Path>) -> anyhow::Result<kube::Client> {
    let config = sluice_informer::client::config_from(kubeconfig).await?;
    let url = config.cluster_url.to_string();
    let client = kube::Client::try_from(config)?;
    match tokio::time::timeout(CONNECT_TIMEOUT, client.apiserver_version()).await {
        // Answered, even with an error status: reachable, and the rest reports any error.
        Ok(Ok(_)) | Ok(Err(kube::Error::Api(_))) => Ok(client),
        Ok(Err(e)) => Err(anyhow::anyhow!(
            "cannot reach the API server at {url}: {e} (from {})",
            kubeconfig.map_or(
                "the in-cluster config or KUBECONFIG".to_owned(),
                |p| format!("--kubeconfig {}", p.display())
            )
        )),
        Err(_) => Err(anyhow::anyhow!(
            "the API server at {url} did not answer within {CONNECT_TIMEOUT:?}"
        )),
    }
}

/// `sluice controller`: connect, then serve until `shutdown`.
pub async fn run(
    args: ControllerArgs,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let control = ControlRuntime::new()?;
    // Built on the control runtime, so that its connections (TLS, reading watch streams of
    // any size) run there too, not on a proxy worker.
    let kubeconfig = args.kubeconfig.clone();
    let client = control
        .run(async move { connect(kubeconfig.as_deref()).await })
        .await??;
    Controller::start_on(control, args, client)
        .await?
        .serve(shutdown)
        .await
}

#[cfg(test)]
mod tests {
    use super::kube_version_tested;

    #[test]
    fn tested_versions_are_1_34_to_1_37_with_provider_suffixes() {
        for (major, minor, tested) in [
            ("1", "34", true),
            ("1", "37", true),
            ("1", "37+", true),
            ("1", "33", false),
            ("1", "38", false),
            ("2", "35", false),
            ("", "", false),
            ("1", "x", false),
        ] {
            assert_eq!(kube_version_tested(major, minor), tested, "{major}.{minor}");
        }
    }
}

//! `sluice serve --manifests DIR`: the data plane fed from a directory of manifests instead
//! of an API server. The same informers, compiler and proxy as in a cluster.

use crate::control::ControlRuntime;
use crate::diagnostics::Seen;
use crate::manifest_dir::{ManifestDir, Scanner};
use crate::rebuild::Rebuilder;
use crate::sources::{IngressInformers, manifest_kinds};
use anyhow::Context;
use sluice_proxy::{Proxy, ProxyArgs, TableHandle};
use sluice_routing::{CompileOptions, ObjectRef};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// Flags of `sluice serve`.
#[derive(clap::Args, Clone, Debug)]
pub struct ServeArgs {
    /// Directory of YAML/JSON manifests (Ingress, IngressClass, Service, Endpoints,
    /// EndpointSlice, TLS Secret); changes are picked up within a second.
    #[arg(long, value_name = "DIR")]
    pub manifests: PathBuf,

    /// How often the directory is checked for changes.
    #[arg(long, default_value = "250ms", value_name = "DURATION",
          value_parser = sluice_proxy::parse_timeout)]
    pub poll_interval: Duration,

    /// Largest manifest file read; a larger one is refused (by its size, unread) and its last
    /// good objects keep serving.
    #[arg(long, value_name = "SIZE", default_value = "16MiB", value_parser = sluice_proxy::parse_size)]
    pub max_manifest_bytes: u64,

    /// Which Ingresses are ours (class flags).

    #[command(flatten)]
    pub class: ClassArgs,

    /// Cluster-wide defaults (default backend, certificate).

    #[command(flatten)]
    pub defaults: DefaultsArgs,

    /// The data plane's settings.

    #[command(flatten)]
    pub proxy: ProxyArgs,
}

/// Which Ingresses are ours.
#[derive(clap::Args, Clone, Debug)]
pub struct ClassArgs {
    /// Name of our IngressClass (also matched against the legacy annotation
    /// `kubernetes.io/ingress.class`).
    #[arg(long, value_name = "NAME", default_value = "sluice",
          value_parser = clap::builder::NonEmptyStringValueParser::new())]
    pub ingress_class: String,

    /// The `spec.controller` value of IngressClasses we serve (ingress-nginx's flag of the
    /// same name; also the `controller_class` label of `--metrics-compat ingress-nginx`).
    // `--controller-name`: the spelling of earlier releases, warned about by the binary.
    #[arg(
        long = "controller-class",
        alias = "controller-name",
        value_name = "VALUE",
        default_value = "sluice.dev/ingress-controller",
        value_parser = clap::builder::NonEmptyStringValueParser::new(),
    )]
    pub controller_name: String,

    /// Also serve Ingresses with neither `spec.ingressClassName` nor the annotation
    /// `kubernetes.io/ingress.class`, even when our IngressClass is not the default class.
    #[arg(long, default_value = "false", value_name = "BOOL", value_parser = sluice_proxy::parse_bool, num_args = 0..=1,
          require_equals = true, default_missing_value = "true")]
    pub watch_ingress_without_class: bool,

    /// The `spec.controllerName` of Gateway API GatewayClasses we serve.
    #[arg(long, value_name = "VALUE", default_value = sluice_routing::DEFAULT_GATEWAY_CONTROLLER_NAME,
          value_parser = clap::builder::NonEmptyStringValueParser::new())]
    pub gateway_controller_name: String,

    /// Gives each Gateway without `spec.addresses` an address of its own from these
    /// (comma-separated CIDRs or addresses, e.g. `192.0.2.0/28`): its listeners are bound
    /// there, each on its own port, and only its routes answer there. Without it such
    /// Gateways share the proxy's HTTP and HTTPS listeners with the Ingresses.
    #[arg(long, value_name = "CIDRS")]
    pub gateway_address_pool: Option<sluice_routing::gateway::AddressPool>,

    /// Behave as ingress-nginx where it departs from the Ingress spec (off: the spec holds).
    /// Today one behaviour: `/my-path` answers 301 to `/my-path/` when an Exact, Prefix or
    /// ImplementationSpecific path of its host is `/my-path/` and none is `/my-path`, never
    /// on a host with regex paths (`use-regex`, `rewrite-target`). `sluice migrate` names the
    /// Ingresses this changes.
    #[arg(long, default_value = "false", value_name = "BOOL", value_parser = sluice_proxy::parse_bool, num_args = 0..=1,
          require_equals = true, default_missing_value = "true")]
    pub ingress_nginx_compat: bool,

    /// ingress-nginx's ConfigMap of global settings, read live (in `sluice serve`, from the
    /// manifest directory): the keys that are also annotations become every Ingress's
    /// default, `block-cidrs` applies to every Ingress route, and each other key gets an
    /// Event saying what to use instead (docs/configmap.md).
    #[arg(long, value_name = "NAMESPACE/NAME", value_parser = parse_namespaced_name)]
    pub configmap: Option<NamespacedName>,

    /// Honour the `ssl-passthrough` annotation (ingress-nginx's flag of the same name): TLS
    /// connections for those hosts go to the backend of their `/` path untouched. Off: the
    /// annotation is reported and TLS is terminated.
    #[arg(long, default_value = "false", value_name = "BOOL", value_parser = sluice_proxy::parse_bool, num_args = 0..=1,
          require_equals = true, default_missing_value = "true")]
    pub enable_ssl_passthrough: bool,
}

impl ClassArgs {
    /// `proxy` with the controller class it names in ingress-nginx's `controller_class`
    /// metric label (`--metrics-compat ingress-nginx`).
    pub fn proxy_args(&self, proxy: &ProxyArgs) -> ProxyArgs {
        ProxyArgs {
            controller_class: self.controller_name.clone(),
            ..proxy.clone()
        }
    }

    /// The compiler options these flags select.
    pub fn compile_options(&self, watch_namespace: Option<String>) -> CompileOptions {
        CompileOptions {
            controller_name: self.controller_name.clone(),
            ingress_class: self.ingress_class.clone(),
            watch_namespace,
            watch_ingress_without_class: self.watch_ingress_without_class,
            gateway_controller_name: self.gateway_controller_name.clone(),
            gateway_address_pool: self.gateway_address_pool.clone(),
            ingress_nginx_compat: self.ingress_nginx_compat,
            enable_ssl_passthrough: self.enable_ssl_passthrough,
            ..CompileOptions::default()
        }
    }
}

/// What serves the requests and TLS names no Ingress claims (ingress-nginx's flags of the
/// same names). Problems with the objects they name are logged, naming the flag.
#[derive(clap::Args, Clone, Debug, Default)]
pub struct DefaultsArgs {
    /// Service whose first port gets the requests no rule matches, when no Ingress of ours
    /// has `spec.defaultBackend` (instead of a 404 page); 503 while it does not exist.
    #[arg(long, value_name = "NAMESPACE/NAME", value_parser = parse_namespaced_name)]
    pub default_backend_service: Option<NamespacedName>,

    /// `kubernetes.io/tls` Secret served for unknown or absent SNI names and for TLS hosts
    /// without a usable Secret of their own (instead of the generated self-signed
    /// certificate, which stands in while the Secret is missing or invalid).
    #[arg(long, value_name = "NAMESPACE/NAME", value_parser = parse_namespaced_name)]
    pub default_ssl_certificate: Option<NamespacedName>,
}

impl DefaultsArgs {
    /// `options` with these flags' objects added.
    pub fn apply(&self, options: CompileOptions) -> CompileOptions {
        CompileOptions {
            default_backend_service: self
                .default_backend_service
                .as_ref()
                .map(|n| ObjectRef::service(&n.namespace, &n.name)),
            default_certificate: self
                .default_ssl_certificate
                .as_ref()
                .map(|n| ObjectRef::secret(&n.namespace, &n.name)),
            ..options
        }
    }
}

/// A flag's `NAMESPACE/NAME`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NamespacedName {
    /// The namespace.
    pub namespace: String,
    /// The name.
    pub name: String,
}

/// Parses `NAMESPACE/NAME`: both parts non-empty, one `/`.
pub fn parse_namespaced_name(value: &str) -> Result<NamespacedName, String> {
    match value.split_once('/') {
        Some((namespace, name))
            if !namespace.is_empty() && !name.is_empty() && !name.contains('/') =>
        {
            Ok(NamespacedName {
                namespace: namespace.to_owned(),
                name: name.to_owned(),
            })
        }
        _ => Err(format!("expected NAMESPACE/NAME, got {value:?}")),
    }
}

/// Serves the manifests in `args.manifests` until `shutdown` completes, then drains.
///
/// The proxy runs on the caller's runtime; reading and parsing the manifests, the informers
/// and compiling run on a [`ControlRuntime`] of their own, so that a huge file delays the
/// next table but never a request.
pub async fn serve(
    args: ServeArgs,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let proxy = Proxy::new(args.class.proxy_args(&args.proxy))?;
    let readiness = proxy.readiness();
    let control = ControlRuntime::new()?;
    let (informers, rebuilder, worker) = control
        .run(start_control(args.clone(), proxy.table_handle()))
        .await??;
    let bound = proxy.bind().await?;
    tracing::info!(
        http = %bound.http_addr(),
        https = %bound.https_addr(),
        admin = %bound.admin_addr(),
        manifests = %args.manifests.display(),
        "sluice serving"
    );
    readiness.set_ready(true);
    let result = bound.serve(shutdown).await;
    control
        .run(async move {
            rebuilder.queue().shut_down();
            let _ = worker.await;
            informers.shutdown().await;
        })
        .await?;
    result
}

/// The control plane of `serve`, on the control runtime: the first scan, informers synced,
/// the first table installed, then the rebuild loop and diagnostics logging running.
async fn start_control(
    args: ServeArgs,
    table: TableHandle,
) -> anyhow::Result<(
    IngressInformers,
    Arc<Rebuilder>,
    tokio::task::JoinHandle<()>,
)> {
    let scanner = Scanner::new(&args.manifests, manifest_kinds())
        .with_max_file_bytes(args.max_manifest_bytes);
    let dir = ManifestDir::start(scanner, args.poll_interval).with_context(|| {
        format!(
            "cannot read manifest directory {}",
            args.manifests.display()
        )
    })?;
    let mut informers = IngressInformers::from_manifests(&dir);
    if let Some(config) = &args.class.configmap {
        informers.watch_nginx_config_in_manifests(&dir, &config.namespace, &config.name);
    }
    let rebuilder = Arc::new(
        Rebuilder::new(
            informers.clone(),
            args.defaults.apply(args.class.compile_options(None)),
            table,
        )
        .explain_unserved(),
    );
    informers.start();
    if !informers.wait_for_sync(Duration::from_secs(10)).await {
        informers.shutdown().await;
        anyhow::bail!("manifest informers did not sync");
    }
    rebuilder.rebuild_now();
    let mut reports = rebuilder.reports();
    tokio::spawn(async move {
        let mut seen = Seen::default();
        // Each Ingress no class selects is named once, with why, until it is served or
        // gone, or the reason changes (an edit that still leaves it unserved, differently).
        let mut unserved = std::collections::BTreeSet::new();
        loop {
            let report = reports.borrow_and_update().clone();
            for d in seen.appeared(&report.diagnostics) {
                tracing::warn!(object = %d.object, field = %d.field, reason = d.reason.as_str(), "{}", d.message);
            }
            for (ingress, why) in &report.unserved {
                if !unserved.contains(&(ingress.clone(), why.clone())) {
                    tracing::warn!(object = %ingress, reason = "NotSelectedByClass", "{why}");
                }
            }
            unserved = report
                .unserved
                .iter()
                .map(|(i, w)| (i.clone(), w.clone()))
                .collect();
            if reports.changed().await.is_err() {
                break;
            }
        }
    });
    let worker = {
        let r = rebuilder.clone();
        tokio::spawn(async move { r.run().await })
    };
    Ok((informers, rebuilder, worker))
}

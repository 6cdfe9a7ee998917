//! `sluice migrate --to gateway-api`: the Gateway API objects that say what existing
//! (ingress-nginx) Ingresses say, as ingress2gateway's ingress-nginx provider emits them, and
//! per Ingress what could not be carried.
//!
//! `convert.rs` is the whole mapping, a pure function (Ingresses and Services in, objects
//! and a report out); `annotations.rs` reads one Ingress's annotations; `output.rs` writes
//! YAML and the report. Here: the flags, and reading the Ingresses (a directory of
//! manifests, as `sluice migrate` reads it, or the cluster).
//!
//! An Ingress whose access restrictions (source ranges, basic auth, auth-url, client
//! certificates) have no Gateway API form is emitted closed: its rules keep their matches
//! and filters but have no backendRefs, so the route answers 500 instead of answering
//! everyone, unless `--allow-open` is given. The same holds for what ingress-nginx's
//! ConfigMap (`--configmap`) restricted on every Ingress: its default source ranges, its
//! `block-*` lists and its global external auth.

mod annotations;
mod convert;
mod output;
#[cfg(test)]
mod tests;

pub use annotations::NotCarried;
pub use convert::{
    ConfigMapInForce, Conversion, ConvertOptions, Emitted, HTTP_LISTENER, IngressOutcome, Object,
    convert, https_listener,
};
pub use output::{document, file_name, report, to_yaml, write_dir};

use crate::client::list_all;
use crate::exit_status::{EXIT_CHANGES, EXIT_CLEAN, EXIT_ERROR};
use crate::manifest_dir::{Scanner, decode_into};
use crate::sources::manifest_kinds;
use anyhow::Context;
use k8s_openapi::api::core::v1::{ConfigMap, Service};
use k8s_openapi::api::networking::v1::Ingress;
use kube::Api;
use std::io::Write;
use std::path::{Path, PathBuf};

/// What `sluice migrate --to` emits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum MigrateTarget {
    /// Gateway API objects (Gateway, HTTPRoute, GRPCRoute, ReferenceGrant,
    /// BackendTLSPolicy), as ingress2gateway does.
    GatewayApi,
}

/// The flags of `sluice migrate --to gateway-api`.
#[derive(clap::Args, Clone, Debug, Default)]
pub struct GatewayArgs {
    /// Emit objects instead of the report: `gateway-api` writes the Gateway API objects
    /// that say what the Ingresses say (YAML on stdout, the per-Ingress report of what
    /// could not be carried on stderr).
    #[arg(long, value_enum, value_name = "TARGET")]
    pub to: Option<MigrateTarget>,

    /// With `--to`: one file per object in this directory (the report on stdout).
    #[arg(long, value_name = "DIR", requires = "to")]
    pub output_dir: Option<PathBuf>,

    /// With `--to`: emit routes of Ingresses whose access restrictions (source ranges,
    /// auth) cannot be carried with their backends, open to everyone. Default: closed (no
    /// backendRefs, 500).
    #[arg(long, requires = "to", default_value = "false", value_name = "BOOL", value_parser = sluice_proxy::parse_bool, num_args = 0..=1,
          require_equals = true, default_missing_value = "true")]
    pub allow_open: bool,

    /// With `--to`: the namespace of the Gateways (default: the Ingresses' namespace when
    /// they share one, else `default`).
    #[arg(long, value_name = "NS", requires = "to")]
    pub gateway_namespace: Option<String>,

    /// With `--to`: the GatewayClass of the Gateways.
    #[arg(long, value_name = "NAME", default_value = "sluice")]
    pub gateway_class: String,
}

/// Where the Ingresses come from (`sluice migrate`'s own flags).
#[derive(Debug, Clone)]
pub struct Source<'a> {
    /// `--manifests`: a directory read as `sluice serve --manifests` reads it.
    pub manifests: Option<&'a Path>,
    /// `--kubeconfig`, for the cluster when no directory is given.
    pub kubeconfig: Option<&'a Path>,
    /// `--watch-namespace`: only this namespace's Ingresses.
    pub namespace: Option<&'a str>,
    /// The IngressClass sluice serves (`--ingress-class`).
    pub default_class: String,
    /// `--configmap`: ingress-nginx's ConfigMap, applied to every Ingress.
    pub config_map: Option<&'a crate::serve::NamespacedName>,
}

/// The Ingresses and Services to convert, and what could not be read.
#[derive(Default)]
struct Input {
    ingresses: Vec<Ingress>,
    services: Vec<Service>,
    /// The ConfigMap `--configmap` names, when found.
    config_map: Option<ConfigMap>,
    errors: Vec<String>,
}

/// Reads `dir` as `sluice serve --manifests` does.
fn from_manifests(
    dir: &Path,
    namespace: Option<&str>,
    config_map: Option<&crate::serve::NamespacedName>,
) -> std::io::Result<Input> {
    let mut scanner = Scanner::new(dir, manifest_kinds());
    scanner.scan()?;
    let snapshot = scanner.snapshot();
    let mut input = Input::default();
    for (path, error) in &snapshot.errors {
        input.errors.push(format!("{}: {error}", path.display()));
    }
    for (key, value) in &snapshot.objects {
        if namespace.is_some_and(|ns| ns != key.namespace) {
            continue;
        }
        if key.api_version == "networking.k8s.io/v1" && key.kind == "Ingress" {
            decode_into(key, value, &mut input.ingresses, &mut input.errors);
        } else if key.api_version == "v1" && key.kind == "Service" {
            decode_into(key, value, &mut input.services, &mut input.errors);
        }
    }
    if let Some(name) = config_map {
        input.config_map = crate::manifest_dir::config_map_in(
            &snapshot,
            &name.namespace,
            &name.name,
            &mut input.errors,
        );
    }
    Ok(input)
}

/// Lists the Ingresses and Services of `namespace` (or all). Services that cannot be
/// listed (RBAC) only cost named ports their resolution, which the report says.
async fn from_cluster(
    client: &kube::Client,
    namespace: Option<&str>,
    config_map: Option<&crate::serve::NamespacedName>,
) -> anyhow::Result<Input> {
    let (ingresses, services): (Api<Ingress>, Api<Service>) = match namespace {
        Some(ns) => (
            Api::namespaced(client.clone(), ns),
            Api::namespaced(client.clone(), ns),
        ),
        None => (Api::all(client.clone()), Api::all(client.clone())),
    };
    let ingresses = list_all(&ingresses)
        .await
        .context("cannot list Ingresses")?;
    let services = list_all(&services).await.unwrap_or_default();
    let config_map = match config_map {
        Some(name) => Api::<ConfigMap>::namespaced(client.clone(), &name.namespace)
            .get_opt(&name.name)
            .await
            .with_context(|| format!("cannot read ConfigMap {}/{}", name.namespace, name.name))?,
        None => None,
    };
    Ok(Input {
        ingresses,
        services,
        config_map,
        errors: Vec::new(),
    })
}

/// `sluice migrate --to gateway-api`: reads, converts, writes the objects (stdout or
/// `--output-dir`) and the report (stderr, or stdout with `--output-dir`). Exit status:
/// [`EXIT_CLEAN`] when every Ingress was carried whole, [`EXIT_CHANGES`] when something
/// was not, [`EXIT_ERROR`] when the Ingresses could not all be read or written.
pub async fn run(
    gateway: &GatewayArgs,
    source: &Source<'_>,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> i32 {
    let namespace = source.namespace;
    let input = match source.manifests {
        Some(dir) => from_manifests(dir, namespace, source.config_map)
            .with_context(|| format!("cannot read manifest directory {}", dir.display())),
        None => match crate::client::client_from(source.kubeconfig).await {
            Ok(client) => from_cluster(&client, namespace, source.config_map).await,
            Err(e) => Err(e),
        },
    };
    let mut input = match input {
        Ok(input) => input,
        Err(e) => {
            let _ = writeln!(err, "sluice migrate: {e:#}");
            return EXIT_ERROR;
        }
    };
    // A ConfigMap named but not found stops the conversion: objects converted without it
    // would drop whatever it restricted (and `... | kubectl apply -f -` ignores the exit
    // status).
    let config_map = match (source.config_map, input.config_map.take()) {
        (None, _) => None,
        (Some(name), Some(map)) => Some(ConfigMapInForce {
            config: sluice_routing::config_map::read(&map, None).0,
            name: format!("{}/{}", name.namespace, name.name),
        }),
        (Some(name), None) => {
            let _ = writeln!(
                err,
                "sluice migrate: ConfigMap {}/{} (--configmap) not found; nothing converted \
                 (the routes would lose what it restricts)",
                name.namespace, name.name
            );
            return EXIT_ERROR;
        }
    };
    let options = ConvertOptions {
        gateway_class: gateway.gateway_class.clone(),
        gateway_namespace: gateway.gateway_namespace.clone(),
        default_class: source.default_class.clone(),
        allow_open: gateway.allow_open,
        config_map,
    };
    let conversion = convert(&input.ingresses, &input.services, &options);
    let mut text = String::new();
    for error in &input.errors {
        text.push_str(&format!("error: {error}\n"));
    }
    text.push_str(&report(&conversion));
    let written = match &gateway.output_dir {
        Some(dir) => write_dir(&conversion, dir)
            .map(|paths| {
                for path in paths {
                    text.push_str(&format!("wrote {}\n", path.display()));
                }
            })
            .map_err(|e| format!("cannot write to {}: {e}", dir.display()))
            .and_then(|()| out.write_all(text.as_bytes()).map_err(|e| e.to_string())),
        None => to_yaml(&conversion).and_then(|yaml| {
            out.write_all(yaml.as_bytes())
                .and_then(|()| out.flush())
                .map_err(|e| e.to_string())?;
            err.write_all(text.as_bytes()).map_err(|e| e.to_string())
        }),
    };
    if let Err(e) = written {
        let _ = writeln!(err, "sluice migrate: {e}");
        return EXIT_ERROR;
    }
    if !input.errors.is_empty() {
        EXIT_ERROR
    } else if conversion.complete() {
        EXIT_CLEAN
    } else {
        EXIT_CHANGES
    }
}

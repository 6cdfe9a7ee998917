//! Compiling again after a change, reading only what the change touches.
//!
//! [`IncrementalCompiler::compile`] gives what [`crate::compile`] gives for the same inputs.
//! When only Ingresses changed since its last call (every other list holds the same
//! `Arc`s), it compiles the changed Ingresses together with every Ingress that shares a
//! host with them (and, in turn, with those: the closure, `index.rs`), and grafts the
//! rules, certificates and client certificate checks of those hosts into a copy of the
//! previous table (`graft.rs`, which moves the partial table's entries and backends in with
//! `moved.rs`). Which names an Ingress bears on is `footprint.rs`. A host's rules depend
//! only on the Ingresses that name it, so the result is the full compile's; the proof is
//! the property test `tests/incremental.rs`, which compares the two after every random
//! change.
//!
//! When only HTTPRoutes and GRPCRoutes changed, `route_partial.rs` does the same for the
//! Gateway rules of the host names the changed routes may be served under (`routes.rs`),
//! grafted by `gateway_graft.rs`, and carries their statuses and the listeners'
//! `attachedRoutes` over (proof: `tests/incremental_gateway.rs`).
//!
//! When only EndpointSlices and Endpoints changed, `endpoint_partial.rs` resolves the
//! backends of their Services again, and nothing else.
//!
//! Anything else compiles everything: a change to any other object (Services, Secrets,
//! classes, Gateways, the ConfigMap), to both Ingresses and routes, to the options, a
//! BackendTLSPolicy present while routes change (its status names the Gateways of every
//! route sending to its Services), an Ingress with a
//! `spec.defaultBackend` (the oldest one in the whole cluster wins), an `ssl-passthrough`
//! host (its target may be the default backend) or, while one exists, a change to a
//! wildcard or catch-all host (which may give one its target), a change to more than an eighth of the
//! Ingresses, and now and then to give back the slots and backends grafts leave behind.

mod endpoint_partial;
mod footprint;
mod gateway_graft;
mod graft;
mod index;
mod listing;
mod moved;
mod route_partial;
mod routes;
mod unchanged;

pub use unchanged::ReadAlike;

use std::sync::Arc;

use k8s_openapi::api::networking::v1::Ingress;
use sluice_persistent::SortedChunks;

use crate::host::HostPattern;
use crate::ingress::annotations::{NGINX_PREFIX, SLUICE_PREFIX};
use crate::{CompileOptions, Compiled, Inputs, ObjectRef, RouteTable, compile};
use graft::{BackendsByService, backends_by_service, graft};
use index::{IngressIndex, name_of};
use routes::RouteIndex;
use unchanged::{Except, same_except};

/// How a call of [`IncrementalCompiler::compile`] compiled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CompileKind {
    /// Everything.
    Full,
    /// The rules of the hosts some changed Ingresses, or some changed HTTPRoutes and
    /// GRPCRoutes, bear on, or the backends of Services whose endpoints changed.
    Incremental {
        /// Ingresses, or routes, compiled (the changed ones and those sharing hosts with
        /// them), or backends resolved again.
        objects: usize,
    },
}

/// Compiles like [`crate::compile`], reusing the previous result where only Ingresses,
/// only routes or only endpoints changed (see the module docs).
#[derive(Default)]
pub struct IncrementalCompiler {
    last: Option<Last>,
    kind: Option<CompileKind>,
}

/// What the last compile read and made.
struct Last {
    inputs: Arc<Inputs>,
    options: CompileOptions,
    table: RouteTable,
    diagnostics: Vec<crate::Diagnostic>,
    ours: SortedChunks<ObjectRef>,
    flag_diagnostics: Vec<crate::Diagnostic>,
    gateway: crate::gateway::GatewayStatuses,
    nginx_config: Option<Arc<crate::nginx_config::NginxConfig>>,
    trailing_slash_redirects: Arc<Vec<crate::TrailingSlashRedirect>>,
    index: IngressIndex,
    routes: RouteIndex,
    /// The Services (with their endpoints) of the inputs by name.
    services: ServicesByName,
    by_service: BackendsByService,
    /// Entry slots no rule reaches.
    free: Vec<u32>,
    /// Backends grafts added since the last full compile (some no longer used).
    added_backends: usize,
}

impl IncrementalCompiler {
    /// A compiler whose first call compiles everything.
    pub fn new() -> Self {
        Self::default()
    }

    /// How the last call compiled (`Full` before the first).
    pub fn last_kind(&self) -> CompileKind {
        self.kind.unwrap_or(CompileKind::Full)
    }

    /// [`crate::compile`] of `inputs`, made from the previous call's result when only
    /// Ingresses, only routes or only endpoints changed.
    pub fn compile(&mut self, inputs: &Inputs, options: &CompileOptions) -> Compiled {
        self.compile_shared(&Arc::new(inputs.clone()), options)
    }

    /// [`IncrementalCompiler::compile`] of inputs the caller keeps too: kept until the
    /// next call without a copy (at 10,000 routes, copying and dropping the lists is a
    /// millisecond per change).
    pub fn compile_shared(&mut self, inputs: &Arc<Inputs>, options: &CompileOptions) -> Compiled {
        if let Some(last) = self.last.as_mut()
            && last.options == *options
        {
            let partial = if same_except(&last.inputs, inputs, Except::Ingresses) {
                last.partial(inputs, options)
            } else if same_except(&last.inputs, inputs, Except::Routes) {
                last.partial_routes(inputs, options)
            } else if same_except(&last.inputs, inputs, Except::Endpoints) {
                last.partial_endpoints(inputs, options)
            } else {
                None
            };
            if let Some(objects) = partial {
                self.kind = Some(CompileKind::Incremental { objects });
                return last.compiled();
            }
        }
        let compiled = compile(inputs, options);
        self.kind = Some(CompileKind::Full);
        let last = Last {
            inputs: Arc::clone(inputs),
            options: options.clone(),
            table: compiled.table.clone(),
            diagnostics: compiled.diagnostics.clone(),
            ours: compiled.ours.clone(),
            flag_diagnostics: compiled.flag_diagnostics.clone(),
            gateway: compiled.gateway.clone(),
            nginx_config: compiled.nginx_config.clone(),
            trailing_slash_redirects: compiled.trailing_slash_redirects.clone(),
            index: IngressIndex::new(&inputs.ingresses),
            routes: RouteIndex::new(inputs),
            services: services_by_name(inputs),
            by_service: backends_by_service(&compiled.table),
            free: Vec::new(),
            added_backends: 0,
        };
        self.last = Some(last);
        compiled
    }
}

impl Last {
    /// The result as [`crate::compile`] returns it.
    fn compiled(&self) -> Compiled {
        Compiled {
            table: self.table.clone(),
            diagnostics: self.diagnostics.clone(),
            ours: self.ours.clone(),
            flag_diagnostics: self.flag_diagnostics.clone(),
            gateway: self.gateway.clone(),
            nginx_config: self.nginx_config.clone(),
            trailing_slash_redirects: self.trailing_slash_redirects.clone(),
        }
    }

    /// Compiles the Ingresses of `inputs` that changed, with those sharing hosts with
    /// them, into this result; the number of Ingresses read, or `None` (nothing changed
    /// yet) when everything must be compiled.
    fn partial(&mut self, inputs: &Arc<Inputs>, options: &CompileOptions) -> Option<usize> {
        // Slots and backends grafts left behind are given back by a full compile.
        if worn(self) {
            return None;
        }
        let changes = self
            .index
            .diff_from(&self.inputs.ingresses, &inputs.ingresses);
        if changes.len() == 0 {
            self.inputs = Arc::clone(inputs);
            return Some(0);
        }
        if changes.len() > (self.index.len() / 8).max(16) {
            return None;
        }
        // The hosts the changed Ingresses bore on and bear on.
        let mut hosts = Vec::new();
        for ingress in changes.changed.iter().chain(&changes.removed) {
            hosts.extend_from_slice(self.index.hosts(&name_of(ingress)));
        }
        let old: Vec<Arc<Ingress>> = changes
            .changed
            .iter()
            .filter_map(|i| self.index.get(&name_of(i)).cloned())
            .chain(changes.removed.iter().cloned())
            .collect();
        if old.iter().any(|i| !partial_compile_decides(i, options)) {
            return None;
        }
        // From here on the index is the new inputs' (when this returns `None`, the full
        // compile replaces `self`, index included).
        for ingress in &changes.removed {
            self.index.remove(&name_of(ingress));
        }
        for ingress in &changes.changed {
            self.index.insert(Arc::clone(ingress));
            hosts.extend_from_slice(self.index.hosts(&name_of(ingress)));
        }
        let limit = (self.index.len() / 4).max(64);
        let (hosts, mut names) = self.index.closure(hosts, limit)?;
        // An `ssl-passthrough` host's target is the entry of its `/`, which a wildcard or
        // catch-all host's rules may give: those rules change only with everything.
        if options.enable_ssl_passthrough
            && hosts.iter().any(|h| !matches!(h, HostPattern::Exact(_)))
            && self.index.ingresses().any(|i| ssl_passthrough(i))
        {
            return None;
        }
        names.extend(changes.changed.iter().map(|i| name_of(i)));
        names.sort();
        names.dedup();
        let read: Vec<Arc<Ingress>> = names
            .iter()
            .filter_map(|name| self.index.get(name).cloned())
            .collect();
        if read.iter().any(|i| !partial_compile_decides(i, options)) {
            return None;
        }

        let count = read.len();
        let partial_inputs = partial_inputs(inputs, &self.services, read);
        let partial_options = CompileOptions {
            default_backend_service: None,
            default_certificate: None,
            ..options.clone()
        };
        let partial = compile(&partial_inputs, &partial_options);
        // Grafted in place: when the graft fails, the full compile that follows replaces
        // all of `self`.
        let grafted = graft(
            &mut self.table,
            partial.table,
            &hosts,
            &mut self.free,
            &mut self.by_service,
        )
        .ok()?;
        self.added_backends += grafted.added_backends;

        // Everything about the Ingresses read comes from the partial compile.
        let removed = changes.removed.iter().map(|i| name_of(i));
        let mut touched: Vec<ObjectRef> = names
            .into_iter()
            .chain(removed)
            .map(|(namespace, name)| ObjectRef::ingress(namespace, name))
            .collect();
        touched.sort();
        touched.dedup();
        let is_touched = |o: &ObjectRef| touched.binary_search(o).is_ok();
        // Each list is sorted by object first: the touched objects' runs are cut out.
        remove_runs(&mut self.diagnostics, &touched, |d| &d.object);
        self.diagnostics.extend(
            partial
                .diagnostics
                .into_iter()
                .filter(|d| is_touched(&d.object)),
        );
        crate::diagnostic::sort(&mut self.diagnostics);
        replace_objects(&mut self.ours, &touched, &partial.ours);
        replace_runs(
            &mut self.trailing_slash_redirects,
            &touched,
            &partial.trailing_slash_redirects,
            |r| &r.ingress,
        );
        self.inputs = Arc::clone(inputs);
        Some(count)
    }
}

/// Too much left behind by grafts: slots and backends to give back with a full compile.
fn worn(last: &Last) -> bool {
    last.added_backends > (last.table.backends.len() / 8).max(64)
        || last.free.len() > (last.table.entries.len() / 4).max(256)
}

/// In sorted `list`, the items of `objects` (sorted) become `items` (sorted, of those
/// objects); the list is copied only when they differ from the ones it has (a shared list
/// stays shared while a change adds or removes none).
fn replace_runs<T: Ord + Clone>(
    list: &mut Arc<Vec<T>>,
    objects: &[ObjectRef],
    items: &[T],
    object: impl Fn(&T) -> &ObjectRef,
) {
    let had: Vec<&T> = objects
        .iter()
        .flat_map(|wanted| {
            let start = list.partition_point(|item| object(item) < wanted);
            let end = start + list[start..].partition_point(|item| object(item) == wanted);
            &list[start..end]
        })
        .collect();
    if had.len() == items.len() && had.iter().zip(items).all(|(a, b)| *a == b) {
        return;
    }
    let list = Arc::make_mut(list);
    remove_runs(list, objects, &object);
    insert_sorted(list, items.to_vec());
}

/// In `list`, whether each of `objects` is there becomes whether it is in `now` (a subset
/// of `objects`): only the chunks of the objects that came or went are copied.
fn replace_objects(
    list: &mut SortedChunks<ObjectRef>,
    objects: &[ObjectRef],
    now: &SortedChunks<ObjectRef>,
) {
    fn itself(o: &ObjectRef) -> &ObjectRef {
        o
    }
    for object in objects {
        match (list.get(object, itself).is_some(), now.get(object, itself)) {
            (false, Some(came)) => list.put(came.clone(), itself),
            (true, None) => {
                list.remove(object, itself);
            }
            _ => {}
        }
    }
}

/// Adds `items` to sorted `list`, where they keep it sorted (each once).
fn insert_sorted<T: Ord>(list: &mut Vec<T>, items: Vec<T>) {
    for item in items {
        if let Err(at) = list.binary_search(&item) {
            list.insert(at, item);
        }
    }
}

/// Removes from `list`, sorted by `object`, the items of the objects in `objects` (sorted).
fn remove_runs<T>(list: &mut Vec<T>, objects: &[ObjectRef], object: impl Fn(&T) -> &ObjectRef) {
    for wanted in objects {
        let start = list.partition_point(|item| object(item) < wanted);
        let end = start + list[start..].partition_point(|item| object(item) == wanted);
        list.drain(start..end);
    }
}

/// Whether the rules of Ingress `ingress`'s hosts depend on it alone among the objects a
/// partial compile leaves out: not with a `spec.defaultBackend` (the oldest in the
/// cluster serves every host's unmatched requests) or, with passthrough on, an
/// `ssl-passthrough` annotation (whose target may be the default backend).
fn partial_compile_decides(ingress: &Ingress, options: &CompileOptions) -> bool {
    let default_backend = ingress
        .spec
        .as_ref()
        .is_some_and(|s| s.default_backend.is_some());
    let passthrough = options.enable_ssl_passthrough && ssl_passthrough(ingress);
    !default_backend && !passthrough
}

/// Whether `ingress` has an `ssl-passthrough` annotation (whatever its value).
fn ssl_passthrough(ingress: &Ingress) -> bool {
    ingress
        .metadata
        .annotations
        .iter()
        .flatten()
        .any(|(key, _)| {
            [NGINX_PREFIX, SLUICE_PREFIX]
                .iter()
                .any(|prefix| key.strip_prefix(prefix) == Some("ssl-passthrough"))
        })
}

/// `inputs` without the Gateway API objects (a partial compile makes Ingress rules only;
/// the previous table's Gateway rules stay as they are), and of the Services, their
/// EndpointSlices and Endpoints only those `ingresses` may name: a partial compile then
/// costs what its Ingresses name, not what the cluster holds.
fn partial_inputs(
    inputs: &Inputs,
    by_name: &ServicesByName,
    ingresses: Vec<Arc<Ingress>>,
) -> Inputs {
    let mut partial = Inputs {
        ingresses: Default::default(),
        ingress_classes: inputs.ingress_classes.clone(),
        secrets: inputs.secrets.clone(),
        backend_tls_policies: inputs.backend_tls_policies.clone(),
        config_maps: inputs.config_maps.clone(),
        annotation_config_maps: inputs.annotation_config_maps.clone(),
        nginx_config_map: inputs.nginx_config_map.clone(),
        nginx_config_previous: inputs.nginx_config_previous.clone(),
        namespaces: inputs.namespaces.clone(),
        ..Inputs::default()
    };
    for name in named_services(&ingresses, inputs.nginx_config_map.as_deref()) {
        if let Some(objects) = by_name.get(name) {
            partial.services.extend(objects.services.iter().cloned());
            partial
                .endpoint_slices
                .extend(objects.slices.iter().cloned());
            partial.endpoints.extend(objects.endpoints.iter().cloned());
        }
    }
    partial.ingresses = ingresses.into();
    partial
}

/// The Services, EndpointSlices and Endpoints of one Service name (any namespace).
#[derive(Default)]
struct NamedServices {
    services: Vec<Arc<k8s_openapi::api::core::v1::Service>>,
    slices: Vec<Arc<k8s_openapi::api::discovery::v1::EndpointSlice>>,
    endpoints: Vec<Arc<k8s_openapi::api::core::v1::Endpoints>>,
}

/// [`NamedServices`] by Service name: made with each full compile (a partial compile
/// happens only while these lists hold the same objects).
type ServicesByName = crate::key::FastMap<String, NamedServices>;

/// [`ServicesByName`] of `inputs`.
fn services_by_name(inputs: &Inputs) -> ServicesByName {
    fn entry<'m>(out: &'m mut ServicesByName, name: Option<&String>) -> &'m mut NamedServices {
        out.entry(name.cloned().unwrap_or_default()).or_default()
    }
    let mut out = ServicesByName::default();
    for service in &inputs.services {
        entry(&mut out, service.metadata.name.as_ref())
            .services
            .push(Arc::clone(service));
    }
    for slice in &inputs.endpoint_slices {
        let labels = slice.metadata.labels.as_ref();
        entry(
            &mut out,
            labels.and_then(|l| l.get(crate::SERVICE_NAME_LABEL)),
        )
        .slices
        .push(Arc::clone(slice));
    }
    for endpoints in &inputs.endpoints {
        entry(&mut out, endpoints.metadata.name.as_ref())
            .endpoints
            .push(Arc::clone(endpoints));
    }
    out
}

/// Every name a Service `ingresses` refer to may have, over-approximated: the Services of
/// their backends, and every word of their annotations' values (`default-backend`,
/// `mirror-target`'s URL, ...) and of ingress-nginx's ConfigMap (annotation defaults).
fn named_services<'a>(
    ingresses: &'a [Arc<Ingress>],
    config_map: Option<&'a k8s_openapi::api::core::v1::ConfigMap>,
) -> std::collections::HashSet<&'a str> {
    let words = |value: &'a str| {
        value
            .split(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
            .filter(|w| !w.is_empty())
    };
    let mut out = std::collections::HashSet::new();
    for ingress in ingresses {
        let spec = ingress.spec.as_ref();
        let backends = spec
            .and_then(|s| s.rules.as_ref())
            .into_iter()
            .flatten()
            .flat_map(|rule| rule.http.iter().flat_map(|h| h.paths.iter()))
            .map(|path| &path.backend)
            .chain(spec.and_then(|s| s.default_backend.as_ref()));
        out.extend(
            backends
                .filter_map(|backend| backend.service.as_ref())
                .map(|service| service.name.as_str()),
        );
        for value in ingress
            .metadata
            .annotations
            .iter()
            .flatten()
            .map(|(_, v)| v)
        {
            out.extend(words(value));
        }
    }
    for value in config_map
        .and_then(|c| c.data.as_ref())
        .into_iter()
        .flatten()
    {
        out.extend(words(value.1));
    }
    out
}

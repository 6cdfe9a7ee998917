//! Compiling again after EndpointSlices (or Endpoints) alone changed.
//!
//! Endpoints decide nothing but the endpoints of the backends of their Service: no rule,
//! status or diagnostic reads them. So the backends of the Services whose endpoints
//! changed are resolved again, each as the full compile resolves it (its
//! [`BackendKind`]), and every entry and stream target that sends to one of them is
//! pointed at the new one. Backend ids stay: the proxy keeps the state of every other
//! backend.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::{Last, NamedServices};
use crate::backend::{Backend, BackendKind, ServiceIndex};
use crate::rules::{StreamRoutes, StreamTarget};
use crate::{CompileOptions, Inputs, ObjectList, SERVICE_NAME_LABEL};

/// `(namespace, Service name)`.
type ServiceName = (String, String);

impl Last {
    /// Resolves again the backends of the Services whose endpoints changed between the
    /// last inputs and `inputs`; the number of backends that changed, or `None` when
    /// everything must be compiled.
    pub(super) fn partial_endpoints(
        &mut self,
        inputs: &Arc<Inputs>,
        options: &CompileOptions,
    ) -> Option<usize> {
        let watched = |meta: &ObjectMeta| match &options.watch_namespace {
            Some(ns) => meta.namespace.as_deref().unwrap_or("") == ns,
            None => true,
        };
        // The Services whose EndpointSlices or Endpoints changed, and the lists of
        // `services` brought up to date.
        let mut changed: HashSet<ServiceName> = HashSet::new();
        let slice_service = |meta: &ObjectMeta| {
            let label = meta.labels.as_ref()?.get(SERVICE_NAME_LABEL)?;
            Some(label.clone())
        };
        let (gone, added) = diff(&self.inputs.endpoint_slices, &inputs.endpoint_slices);
        for slice in gone {
            let name = slice_service(&slice.metadata).unwrap_or_default();
            changed.insert((namespace(&slice.metadata), name.clone()));
            named(&mut self.services, &name)
                .slices
                .retain(|s| !Arc::ptr_eq(s, &slice));
        }
        for slice in added {
            let name = slice_service(&slice.metadata).unwrap_or_default();
            changed.insert((namespace(&slice.metadata), name.clone()));
            named(&mut self.services, &name).slices.push(slice);
        }
        let (gone, added) = diff(&self.inputs.endpoints, &inputs.endpoints);
        for endpoints in gone {
            let name = endpoints.metadata.name.clone().unwrap_or_default();
            changed.insert((namespace(&endpoints.metadata), name.clone()));
            named(&mut self.services, &name)
                .endpoints
                .retain(|e| !Arc::ptr_eq(e, &endpoints));
        }
        for endpoints in added {
            let name = endpoints.metadata.name.clone().unwrap_or_default();
            changed.insert((namespace(&endpoints.metadata), name.clone()));
            named(&mut self.services, &name).endpoints.push(endpoints);
        }
        self.inputs = Arc::clone(inputs);
        if changed.is_empty() {
            return Some(0);
        }

        // The changed Services' objects, as the full compile indexes them.
        let names: HashSet<&str> = changed.iter().map(|(_, name)| name.as_str()).collect();
        let objects: Vec<&NamedServices> =
            names.iter().filter_map(|n| self.services.get(*n)).collect();
        let in_changed = |meta: &ObjectMeta, name: &str| {
            watched(meta) && changed.contains(&(namespace(meta), name.to_owned()))
        };
        let index = ServiceIndex::new(
            objects
                .iter()
                .flat_map(|o| &o.services)
                .map(|s| &**s)
                .filter(|s| in_changed(&s.metadata, s.metadata.name.as_deref().unwrap_or(""))),
            objects
                .iter()
                .flat_map(|o| &o.slices)
                .map(|s| &**s)
                .filter(|s| watched(&s.metadata)),
            objects
                .iter()
                .flat_map(|o| &o.endpoints)
                .map(|e| &**e)
                .filter(|e| watched(&e.metadata)),
        );

        // Their backends, resolved again.
        let mut replaced: HashMap<usize, Arc<Backend>> = HashMap::new();
        let changed_names: HashSet<(&str, &str)> = changed
            .iter()
            .map(|(namespace, name)| (namespace.as_str(), name.as_str()))
            .collect();
        for backend in &self.table.backends {
            let service = (
                backend.service.namespace.as_str(),
                backend.service.name.as_str(),
            );
            if !changed_names.contains(&service) {
                continue;
            }
            let resolved = match backend.kind {
                BackendKind::Endpoints => index.resolve(&backend.service),
                BackendKind::ClusterIp => index.resolve_cluster_ip(&backend.service),
                BackendKind::Placeholder => continue,
            };
            // A reference that does not resolve keeps its backend without endpoints, and
            // endpoints do not make it resolve.
            let (endpoints, not_ready) = match resolved {
                Ok(r) => (r.endpoints, r.not_ready),
                Err(_) => (Vec::new(), 0),
            };
            if endpoints == backend.endpoints && not_ready == backend.not_ready {
                continue;
            }
            replaced.insert(
                backend.id,
                Arc::new(Backend {
                    id: backend.id,
                    service: backend.service.clone(),
                    endpoints,
                    not_ready,
                    protocol: backend.protocol,
                    tls: backend.tls.clone(),
                    kind: backend.kind,
                }),
            );
        }
        if replaced.is_empty() {
            return Some(0);
        }
        repoint(&mut self.table, &replaced);
        Some(replaced.len())
    }
}

/// Points the table's backends, and every entry and stream target sending to one of
/// them, at `replaced`'s backend of the same id.
fn repoint(table: &mut crate::RouteTable, replaced: &HashMap<usize, Arc<Backend>>) {
    let new = |b: &Arc<Backend>| replaced.get(&b.id).cloned();
    for (id, backend) in replaced {
        if let Some(slot) = table.backends.get_mut(*id) {
            *slot = Arc::clone(backend);
        }
    }
    let sends = |b: &Arc<Backend>| replaced.contains_key(&b.id);
    // Only the chunks of the entries that change are copied.
    let touched: Vec<usize> = table
        .entries
        .iter()
        .enumerate()
        .filter(|(_, entry)| {
            sends(&entry.backend)
                || entry.fallback.as_ref().is_some_and(sends)
                || entry.canary.as_ref().is_some_and(|c| sends(&c.backend))
                || entry.split.iter().any(|t| sends(&t.backend))
                || entry.mirrors.iter().any(|m| sends(&m.backend))
        })
        .map(|(id, _)| id)
        .collect();
    for id in touched {
        let Some(entry) = table.entries.get_mut(id) else {
            continue;
        };
        let e = Arc::make_mut(entry);
        if let Some(b) = new(&e.backend) {
            e.backend = b;
        }
        if let Some(b) = e.fallback.as_ref().and_then(new) {
            e.fallback = Some(b);
        }
        if let Some(canary) = &mut e.canary
            && let Some(b) = new(&canary.backend)
        {
            canary.backend = b;
        }
        for target in &mut e.split {
            if let Some(b) = new(&target.backend) {
                target.backend = b;
            }
        }
        for mirror in &mut e.mirrors {
            if let Some(b) = new(&mirror.backend) {
                mirror.backend = b;
            }
        }
    }
    let retarget = |target: &mut Arc<StreamTarget>| {
        if target
            .split
            .iter()
            .any(|t| replaced.contains_key(&t.backend.id))
        {
            let mut split = target.split.clone();
            for part in &mut split {
                if let Some(b) = new(&part.backend) {
                    part.backend = b;
                }
            }
            *target = Arc::new(StreamTarget {
                split,
                source: target.source.clone(),
                terminate: target.terminate,
            });
        }
    };
    for target in table.passthrough.values_mut() {
        retarget(target);
    }
    if let Some(gateway) = &mut table.gateway
        && gateway.listeners.values().any(|l| {
            stream_targets(&l.streams)
                .any(|t| t.split.iter().any(|p| replaced.contains_key(&p.backend.id)))
        })
    {
        let gateway = Arc::make_mut(gateway);
        for listener in gateway.listeners.values_mut() {
            let streams = &mut listener.streams;
            streams
                .exact
                .values_mut()
                .chain(streams.wildcard.values_mut())
                .chain(streams.any.iter_mut())
                .for_each(retarget);
        }
    }
}

/// Every target of a socket's stream routes.
fn stream_targets(streams: &StreamRoutes) -> impl Iterator<Item = &Arc<StreamTarget>> {
    streams
        .exact
        .values()
        .chain(streams.wildcard.values())
        .chain(streams.any.iter())
}

/// The namespace of an object.
fn namespace(meta: &ObjectMeta) -> String {
    meta.namespace.clone().unwrap_or_default()
}

/// The [`NamedServices`] of `name`, made when absent.
fn named<'m>(services: &'m mut super::ServicesByName, name: &str) -> &'m mut NamedServices {
    services.entry(name.to_owned()).or_default()
}

/// The objects of `old` that `new` lacks, and those of `new` that `old` lacks (by
/// identity: the informers' stores hand out what they hold).
fn diff<T>(old: &ObjectList<T>, new: &ObjectList<T>) -> (Vec<Arc<T>>, Vec<Arc<T>>) {
    // The items the two listings do not line up, when few: those, less any on both sides
    // (an object moved), are the diff.
    let (old, new): (Vec<&Arc<T>>, Vec<&Arc<T>>) =
        match super::listing::unmatched(old, new, super::index::FEW) {
            Some(unmatched) => {
                let (gone, came) = (unmatched.gone, unmatched.came);
                let in_gone: HashSet<*const T> = gone.iter().map(Arc::as_ptr).collect();
                let in_came: HashSet<*const T> = came.iter().map(Arc::as_ptr).collect();
                let gone = gone
                    .into_iter()
                    .filter(|a| !in_came.contains(&Arc::as_ptr(a)));
                let came = came
                    .into_iter()
                    .filter(|b| !in_gone.contains(&Arc::as_ptr(b)));
                return (gone.collect(), came.collect());
            }
            None => (old.iter().collect(), new.iter().collect()),
        };
    let in_old: HashSet<*const T> = old.iter().map(|a| Arc::as_ptr(a)).collect();
    let in_new: HashSet<*const T> = new.iter().map(|b| Arc::as_ptr(b)).collect();
    let gone = old
        .iter()
        .filter(|a| !in_new.contains(&Arc::as_ptr(a)))
        .map(|a| Arc::clone(a))
        .collect();
    let added = new
        .iter()
        .filter(|b| !in_old.contains(&Arc::as_ptr(b)))
        .map(|b| Arc::clone(b))
        .collect();
    (gone, added)
}

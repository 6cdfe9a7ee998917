//! Compiling again after HTTPRoutes and GRPCRoutes alone changed.
//!
//! The changed routes, with every route that may be served under a host name they were or
//! are served under (and, in turn, the host names of those: the closure of `routes.rs`),
//! are compiled with all the Gateways, and their Gateway rules grafted in place of the
//! previous ones for those host names. A host name's rules depend only on the routes
//! served under it, and a route's status only on itself and the listeners, so the rules
//! and statuses are the full compile's. `attachedRoutes` counts every route that attaches
//! to a listener: the counts of the routes read, before and after the change, are taken
//! out and put in.

use std::collections::HashMap;
use std::sync::Arc;

use super::gateway_graft::graft_gateway;
use super::routes::AnyRoute;
use super::{Last, ServicesByName, remove_runs, worn};
use crate::gateway::{GatewayStatuses, ListenerStatus};
use crate::{CompileOptions, Inputs, ObjectRef, compile};

impl Last {
    /// Compiles the routes of `inputs` that changed, with those sharing host names with
    /// them, into this result; the number of routes read, or `None` (nothing changed yet)
    /// when everything must be compiled.
    pub(super) fn partial_routes(
        &mut self,
        inputs: &Arc<Inputs>,
        options: &CompileOptions,
    ) -> Option<usize> {
        // A BackendTLSPolicy's status names the Gateways of every route to its Services.
        if !inputs.backend_tls_policies.is_empty() || worn(self) {
            return None;
        }
        let changes = self.routes.diff_from(&self.inputs, inputs);
        if changes.len() == 0 {
            self.inputs = Arc::clone(inputs);
            return Some(0);
        }
        if changes.len() > (self.routes.len() / 8).max(16) {
            return None;
        }
        // The last objects of the changed routes, and the host names they bore on.
        let mut before: HashMap<ObjectRef, AnyRoute> = HashMap::new();
        let mut hosts = Vec::new();
        for route in changes.changed.iter().chain(&changes.removed) {
            if let Some(last) = self.routes.get(&route.object()) {
                hosts.extend(self.routes.hosts_of(last));
                before.insert(route.object(), last.clone());
            }
        }
        // From here on the index is the new inputs' (when this returns `None`, the full
        // compile replaces `self`, index included).
        for route in &changes.removed {
            self.routes.remove(&route.object());
        }
        for route in &changes.changed {
            hosts.extend(self.routes.hosts_of(route));
            self.routes.insert(route.clone());
        }
        let limit = (self.routes.len() / 4).max(64);
        let (hosts, mut names) = self.routes.closure(hosts, limit)?;
        names.extend(changes.changed.iter().map(AnyRoute::object));
        names.sort();
        names.dedup();
        let read: Vec<AnyRoute> = names
            .iter()
            .filter_map(|name| self.routes.get(name).cloned())
            .collect();
        // The same routes as they were (the removed ones included).
        let mut read_before: Vec<AnyRoute> = names
            .iter()
            .filter_map(|name| match before.get(name) {
                Some(last) => Some(last.clone()),
                None if changes.changed.iter().any(|c| c.object() == *name) => None,
                None => self.routes.get(name).cloned(),
            })
            .collect();
        read_before.extend(changes.removed.iter().cloned());

        let partial_options = CompileOptions {
            default_backend_service: None,
            default_certificate: None,
            ..options.clone()
        };
        let now = compile(
            &route_inputs(inputs, Some(&self.services), &read),
            &partial_options,
        );
        // Only the listeners' counts are read from the routes as they were.
        let then = compile(&route_inputs(inputs, None, &read_before), &partial_options);
        // Counted and grafted in place: when either fails, the full compile that follows
        // replaces all of `self`.
        count_attached(&mut self.gateway, &then.gateway, -1)?;
        count_attached(&mut self.gateway, &now.gateway, 1)?;
        let grafted = graft_gateway(
            &mut self.table,
            now.table,
            &hosts,
            &mut self.free,
            &mut self.by_service,
        )
        .ok()?;
        self.added_backends += grafted.added_backends;

        // Everything about the routes read comes from the partial compile.
        let mut touched: Vec<ObjectRef> = names;
        touched.extend(changes.removed.iter().map(AnyRoute::object));
        touched.sort();
        touched.dedup();
        let is_touched = |o: &ObjectRef| touched.binary_search(o).is_ok();
        for object in &touched {
            self.gateway.routes.remove(object, |s| &s.object);
        }
        for status in now.gateway.routes.iter() {
            self.gateway.routes.put(Arc::clone(status), |s| &s.object);
        }
        remove_runs(&mut self.diagnostics, &touched, |d| &d.object);
        self.diagnostics.extend(
            now.diagnostics
                .into_iter()
                .filter(|d| is_touched(&d.object)),
        );
        crate::diagnostic::sort(&mut self.diagnostics);
        self.inputs = Arc::clone(inputs);
        Some(read.len())
    }
}

/// Adds `sign` times the `attachedRoutes` of `from`'s listeners to `into`'s (the same
/// Gateways and ListenerSets, in the same order); `None` when they differ.
fn count_attached(into: &mut GatewayStatuses, from: &GatewayStatuses, sign: i32) -> Option<()> {
    fn add(into: &mut [ListenerStatus], from: &[ListenerStatus], sign: i32) -> Option<()> {
        if into.len() != from.len() {
            return None;
        }
        for (to, from) in into.iter_mut().zip(from) {
            if to.name != from.name {
                return None;
            }
            to.attached_routes += sign * from.attached_routes;
        }
        Some(())
    }
    if into.gateways.len() != from.gateways.len()
        || into.listener_sets.len() != from.listener_sets.len()
    {
        return None;
    }
    for (to, from) in into.gateways.iter_mut().zip(&from.gateways) {
        if to.gateway.object != from.gateway.object {
            return None;
        }
        add(&mut to.listeners, &from.listeners, sign)?;
    }
    for (to, from) in into.listener_sets.iter_mut().zip(&from.listener_sets) {
        if to.listener_set.object != from.listener_set.object {
            return None;
        }
        add(&mut to.listeners, &from.listeners, sign)?;
    }
    Some(())
}

/// `inputs` with `routes` for its HTTPRoutes and GRPCRoutes, without the Ingresses, and of
/// the Services, EndpointSlices and Endpoints only those `routes` may name (none without
/// `by_name`: for what does not depend on them).
fn route_inputs(inputs: &Inputs, by_name: Option<&ServicesByName>, routes: &[AnyRoute]) -> Inputs {
    // Stream routes are left out too: their rules are not grafted, and their share of
    // `attachedRoutes` is the same before and after.
    let mut partial = Inputs {
        ingress_classes: inputs.ingress_classes.clone(),
        secrets: inputs.secrets.clone(),
        gateway_classes: inputs.gateway_classes.clone(),
        gateways: inputs.gateways.clone(),
        reference_grants: inputs.reference_grants.clone(),
        listener_sets: inputs.listener_sets.clone(),
        backend_tls_policies: inputs.backend_tls_policies.clone(),
        config_maps: inputs.config_maps.clone(),
        annotation_config_maps: inputs.annotation_config_maps.clone(),
        nginx_config_map: inputs.nginx_config_map.clone(),
        nginx_config_previous: inputs.nginx_config_previous.clone(),
        namespaces: inputs.namespaces.clone(),
        ..Inputs::default()
    };
    for route in routes {
        match route {
            AnyRoute::Http(r) => partial.http_routes.push(Arc::clone(r)),
            AnyRoute::Grpc(r) => partial.grpc_routes.push(Arc::clone(r)),
        }
    }
    let Some(by_name) = by_name else {
        return partial;
    };
    let mut names: Vec<String> = routes.iter().flat_map(AnyRoute::words).collect();
    names.sort();
    names.dedup();
    for name in names {
        if let Some(objects) = by_name.get(&name) {
            partial.services.extend(objects.services.iter().cloned());
            partial
                .endpoint_slices
                .extend(objects.slices.iter().cloned());
            partial.endpoints.extend(objects.endpoints.iter().cloned());
        }
    }
    partial
}

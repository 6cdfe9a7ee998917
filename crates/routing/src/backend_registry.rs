//! The one backend registry of a table: a backend per Service port, shared by every route
//! that names it, whichever API the route came from (the Ingress compiler adds the Service
//! ports of Ingresses first, the Gateway API compiler then the ones only its routes name).

use std::collections::HashMap;
use std::sync::Arc;

use crate::backend::{Backend, BackendKind, Resolved, ServiceIndex};
use crate::{RouteTable, ServiceRef};

/// The backends of a table, one per Service port, each with its id (its index).
#[derive(Default)]
pub(crate) struct BackendRegistry {
    backends: Vec<Arc<Backend>>,
    by_service: HashMap<ServiceRef, usize>,
    /// Backends without endpoints for references that do not resolve, kept apart: the same
    /// Service port may be a valid reference of another route (a ReferenceGrant lets one
    /// namespace in and not another).
    placeholders: HashMap<ServiceRef, usize>,
}

impl BackendRegistry {
    /// The registry of `table`'s backends, taken out of it (the Gateway API compiler adds
    /// to what the Ingress compiler made; [`Self::into_backends`] gives them back).
    pub(crate) fn new(table: &mut RouteTable) -> Self {
        let backends: Vec<Arc<Backend>> = std::mem::take(&mut table.backends)
            .iter()
            .cloned()
            .collect();
        let by_service = backends
            .iter()
            .enumerate()
            .map(|(i, b)| (b.service.clone(), i))
            .collect();
        BackendRegistry {
            backends,
            by_service,
            placeholders: HashMap::new(),
        }
    }

    /// The backend of a Service port, resolved.
    pub(crate) fn get(&mut self, services: &ServiceIndex<'_>, sref: ServiceRef) -> Arc<Backend> {
        if let Some(&i) = self.by_service.get(&sref) {
            return Arc::clone(&self.backends[i]);
        }
        // A Service port that does not resolve still gets a real (endpointless) backend:
        // `check_backend` vouched for the reference, so it answers 503 like any empty one.
        let resolved = services.resolve(&sref).ok().unwrap_or(Resolved {
            endpoints: Vec::new(),
            not_ready: 0,
            protocol: None,
            tls: None,
            cluster_ip: false,
        });
        self.push(sref, Some(resolved))
    }

    /// A backend without endpoints for a reference (`sref`, as written) that does not
    /// resolve.
    pub(crate) fn placeholder(&mut self, sref: ServiceRef) -> Arc<Backend> {
        if let Some(&i) = self.placeholders.get(&sref) {
            return Arc::clone(&self.backends[i]);
        }
        let backend = self.push(sref.clone(), None);
        self.placeholders.insert(sref, backend.id);
        backend
    }

    /// Adds a backend; `resolved: None` (a placeholder) is not found by [`Self::get`].
    /// The Ingress compiler adds its backends in `ServiceRef` order, so that ids do not
    /// depend on the order objects came in.
    pub(crate) fn push(&mut self, sref: ServiceRef, resolved: Option<Resolved>) -> Arc<Backend> {
        let id = self.backends.len();
        let resolved_kind = resolved.is_some();
        let kind = if resolved_kind {
            BackendKind::Endpoints
        } else {
            BackendKind::Placeholder
        };
        let (endpoints, not_ready, protocol, tls) = match resolved {
            Some(r) => (r.endpoints, r.not_ready, r.protocol, r.tls),
            None => (Vec::new(), 0, None, None),
        };
        let backend = Arc::new(Backend {
            id,
            service: sref.clone(),
            endpoints,
            not_ready,
            protocol,
            tls,
            kind,
        });
        self.backends.push(Arc::clone(&backend));
        if resolved_kind {
            self.by_service.insert(sref, id);
        }
        backend
    }

    /// Adds a backend that [`Self::get`] never finds: `service-upstream`'s ClusterIP
    /// backend, which only the Ingress asking for it uses.
    pub(crate) fn push_unshared(&mut self, sref: ServiceRef, resolved: Resolved) -> Arc<Backend> {
        let backend = Arc::new(Backend {
            id: self.backends.len(),
            service: sref,
            endpoints: resolved.endpoints,
            not_ready: resolved.not_ready,
            protocol: resolved.protocol,
            tls: resolved.tls,
            kind: BackendKind::ClusterIp,
        });
        self.backends.push(Arc::clone(&backend));
        backend
    }

    /// Every backend, `backends[i].id == i`.
    pub(crate) fn into_backends(self) -> Vec<Arc<Backend>> {
        self.backends
    }
}

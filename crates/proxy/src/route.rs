//! Routing: a request's host and path to a backend of the current snapshot. The same
//! function for every front end.

use crate::snapshot::Snapshot;

/// Where a request goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Routed {
    /// No rule matches and there is no default backend (404).
    NotFound,
    /// The backend (its index in the snapshot) has no ready endpoint (503).
    NoEndpoints(usize),
    /// The backend (its index) to send to, and the route entry (its index in the table)
    /// whose policy applies.
    Backend {
        /// Backend index.
        backend: usize,
        /// Entry index ([`sluice_routing::RouteTable::entry`]).
        entry: usize,
    },
}

/// Looks up `host` (without port handling: the table strips it) and `path`.
pub(crate) fn route(snapshot: &Snapshot, host: &str, path: &str) -> Routed {
    let Some(entry) = snapshot.table.route_id(host, path) else {
        return Routed::NotFound;
    };
    let route = snapshot.table.entry(entry);
    let mut backend = &route.backend;
    if backend.endpoints.is_empty() {
        // ingress-nginx's `default-backend` annotation: it answers when the Service has no
        // ready endpoint.
        match &route.fallback {
            Some(fallback) if !fallback.endpoints.is_empty() => backend = fallback,
            _ => return Routed::NoEndpoints(backend.id),
        }
    }
    Routed::Backend {
        backend: backend.id,
        entry,
    }
}

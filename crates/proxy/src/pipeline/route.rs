//! Routing: a request (listener, host, path, query, method, headers) to a backend of the
//! current snapshot, a route's canary (ingress-nginx's canary Ingresses) chosen or not, and
//! a Gateway API route's weighted `backendRefs` drawn. The same functions for every front
//! end.

use sluice_routing::{Canary, RequestInfo, RouteEntry, WeightedBackend};

use crate::pipeline::affinity;
use crate::pipeline::cookie::cookie;

use crate::pipeline::view::{RequestView, ViewHeaders};
use crate::snapshot::{Snapshot, SnapshotRef};

/// Where a request goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Routed {
    /// No rule matches and there is no default backend (404).
    NotFound,
    /// The request is for a host of another `HTTPS` listener than the one its TLS
    /// connection's SNI chose (421, Gateway API).
    Misdirected,
    /// The backend has no ready endpoint (503).
    NoEndpoints {
        /// Backend index.
        backend: usize,
        /// Entry index ([`sluice_routing::RouteTable::entry`]).
        entry: usize,
    },
    /// The backend (its index) to send to, and the route entry (its index in the table)
    /// whose policy applies.
    Backend {
        /// Backend index.
        backend: usize,
        /// Entry index ([`sluice_routing::RouteTable::entry`]).
        entry: usize,
    },
    /// The route answers `status` itself once its policy's answers (redirects, refusals)
    /// are through: the entry's `fixed_status`, or 500 for a Gateway API `backendRef` that
    /// cannot be used (the spec's answer for a request drawn for one).
    Status {
        /// Backend index (for the metrics).
        backend: usize,
        /// Entry index ([`sluice_routing::RouteTable::entry`]).
        entry: usize,
        /// The status to answer.
        status: u16,
    },
}

/// A request's routing as one front end made it, carried with the request when the own
/// HTTP/1.1 loop hands it to hyper: the request is routed, and a weighted split or canary
/// drawn, exactly once.
pub(crate) struct Routing {
    /// The snapshot the decision was made on (entry and backend indices point into it).
    pub(crate) snapshot: SnapshotRef,
    /// The decision.
    pub(crate) routed: Routed,
}

/// Looks up a request (the table strips the host's port). When the route has a canary,
/// `canary` says whether this request goes to it (see [`sluice_routing::CanaryRule::chooses`]); a canary
/// without ready endpoints sends everything to the main backend. A route with Gateway API
/// `backendRefs` sends the request to one of them, drawn by weight.
fn route(
    snapshot: &Snapshot,
    request: &RequestInfo<'_>,
    canary: impl FnOnce(&RouteEntry, &Canary) -> bool,
) -> Routed {
    let Some(entry) = snapshot.table.route_request(request) else {
        return Routed::NotFound;
    };
    let route = snapshot.table.entry(entry);
    if let Some(status) = route.fixed_status {
        return Routed::Status {
            backend: route.backend.id,
            entry,
            status,
        };
    }
    if !route.split.is_empty() {
        return split(route, entry);
    }
    if let Some(alternative) = &route.canary
        && !alternative.backend.endpoints.is_empty()
        && canary(route, alternative)
    {
        return Routed::Backend {
            backend: alternative.backend.id,
            entry,
        };
    }
    let mut backend = &route.backend;
    if backend.endpoints.is_empty() {
        // ingress-nginx's `default-backend` annotation: it answers when the Service has no
        // ready endpoint.
        match &route.fallback {
            Some(fallback) if !fallback.endpoints.is_empty() => backend = fallback,
            _ => {
                return Routed::NoEndpoints {
                    backend: backend.id,
                    entry,
                };
            }
        }
    }
    Routed::Backend {
        backend: backend.id,
        entry,
    }
}

/// Gateway API weighted `backendRefs`: one drawn with probability weight / total (weight
/// 0: never); an unusable reference answers 500, a usable one without ready endpoints 503
/// (no fallback: that is ingress-nginx's).
fn split(route: &RouteEntry, entry: usize) -> Routed {
    match draw(&route.split) {
        Some(target) if !target.usable => Routed::Status {
            backend: target.backend.id,
            entry,
            status: 500,
        },
        Some(target) if target.backend.endpoints.is_empty() => Routed::NoEndpoints {
            backend: target.backend.id,
            entry: target.entry.unwrap_or(entry),
        },
        // A backendRef with filters of its own has an entry of its own.
        Some(target) => Routed::Backend {
            backend: target.backend.id,
            entry: target.entry.unwrap_or(entry),
        },
        // Every weight 0: the spec's 500.
        None => Routed::Status {
            backend: route.backend.id,
            entry,
            status: 500,
        },
    }
}

/// One of `split` drawn by weight; `None` when the weights sum to 0.
pub(crate) fn draw(split: &[WeightedBackend]) -> Option<&WeightedBackend> {
    let total: u64 = split.iter().map(|target| u64::from(target.weight)).sum();
    if total == 0 {
        return None;
    }
    let total = usize::try_from(total).unwrap_or(usize::MAX);
    let mut roll = crate::backend::balancer::random_below(total) as u64;
    for target in split {
        let weight = u64::from(target.weight);
        if roll < weight {
            return Some(target);
        }
        roll -= weight;
    }
    None
}

/// Routes a request (`path`: its normalised path) on `snapshot`; a canary's header and
/// cookie are read from the request, and a weighted split or canary weight drawn here,
/// once per request.
pub(crate) fn lookup<'a, V: RequestView<'a>>(
    snapshot: &Snapshot,
    request: V,
    path: &str,
    tls: bool,
    gateway: Option<std::net::SocketAddr>,
    sni: Option<&str>,
) -> Routed {
    if let (Some(socket), Some(sni)) = (gateway, sni)
        && snapshot.table.misdirected(socket, sni, request.host())
    {
        return Routed::Misdirected;
    }
    let info = RequestInfo {
        listener: gateway,
        https: tls,
        host: request.host(),
        path,
        query: request.query().unwrap_or(""),
        method: request.method(),
        headers: &ViewHeaders(request, std::marker::PhantomData),
    };
    route(snapshot, &info, |entry, alternative| {
        // ingress-nginx's balancer.lua: a client with an affinity cookie of the main
        // backend stays there, one of the canary (`sticky`) on the canary, whatever the
        // canary's header, cookie and weight say.
        if let Some(affinity_rule) = &entry.policy.affinity {
            let session = affinity::session_on_canary(
                affinity_rule,
                alternative.rule.legacy_affinity,
                &snapshot.backends[entry.backend.id].balancer,
                &snapshot.backends[alternative.backend.id].balancer,
                cookie(request.cookies(), &affinity_rule.cookie),
            );
            if let Some(on_canary) = session {
                return on_canary;
            }
        }
        let rule = &alternative.rule;
        let header = rule
            .header
            .as_ref()
            .and_then(|name| request.field(name.as_str().as_bytes()));
        let cookie = rule
            .cookie
            .as_deref()
            .and_then(|name| cookie(request.cookies(), name));
        rule.chooses(header, cookie, roll(rule.weight_total))
    })
}

/// Whether a routed request needs hyper's client (a backend that is not plain HTTP/1.1,
/// [`crate::upstream::client`]), whose answer only the hyper front end writes. Every other
/// phase runs alike in both front ends.
pub(crate) fn needs_hyper(snapshot: &Snapshot, backend: usize, entry: usize) -> bool {
    crate::upstream::client::protocol(snapshot, backend, entry)
        != sluice_routing::UpstreamProtocol::Http
}

/// A number uniform in `0..total` for `canary-weight`.
pub(crate) fn roll(total: u32) -> u32 {
    crate::backend::balancer::random_below(total.max(1) as usize) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    fn weighted(weights: &[u32]) -> Vec<WeightedBackend> {
        weights
            .iter()
            .enumerate()
            .map(|(id, &weight)| WeightedBackend {
                backend: std::sync::Arc::new(sluice_routing::Backend {
                    id,
                    service: sluice_routing::ServiceRef {
                        namespace: "default".into(),
                        name: format!("s{id}"),
                        port: sluice_routing::PortRef::Number(80),
                    },
                    endpoints: Vec::new(),
                    not_ready: 0,
                    protocol: None,
                    tls: None,
                    kind: sluice_routing::BackendKind::Endpoints,
                }),
                weight,
                usable: true,
                entry: None,
            })
            .collect()
    }

    #[test]
    fn draws_follow_the_weights_and_never_pick_weight_zero() {
        let split = weighted(&[3, 0, 1]);
        let mut counts = [0u32; 3];
        for _ in 0..40_000 {
            counts[draw(&split).unwrap().backend.id] += 1;
        }
        assert_eq!(counts[1], 0, "{counts:?}");
        // 30,000 and 10,000 expected, standard deviation ~87.
        assert!((29_400..=30_600).contains(&counts[0]), "{counts:?}");
        assert!(draw(&weighted(&[0, 0])).is_none());
    }

    #[test]
    fn rolls_are_uniform() {
        let mut counts = [0u32; 10];
        for _ in 0..100_000 {
            counts[roll(10) as usize] += 1;
        }
        for count in counts {
            // 10,000 expected, standard deviation ~95: 5 sigma either way.
            assert!((9_500..=10_500).contains(&count), "{counts:?}");
        }
    }
}

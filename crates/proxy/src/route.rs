//! Routing: a request's host and path to a backend of the current snapshot, and a route's
//! canary (ingress-nginx's canary Ingresses) chosen or not. The same functions for every
//! front end.

use sluice_routing::CanaryRule;

use crate::snapshot::Snapshot;

/// Where a request goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Routed {
    /// No rule matches and there is no default backend (404).
    NotFound,
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
}

/// Looks up `host` (without port handling: the table strips it) and `path`. When the route
/// has a canary, `canary` says whether this request goes to it (see
/// [`CanaryRule::chooses`]); a canary without ready endpoints sends everything to the main
/// backend.
pub(crate) fn route(
    snapshot: &Snapshot,
    host: &str,
    path: &str,
    canary: impl FnOnce(&CanaryRule) -> bool,
) -> Routed {
    let Some(entry) = snapshot.table.route_id(host, path) else {
        return Routed::NotFound;
    };
    let route = snapshot.table.entry(entry);
    if let Some(alternative) = &route.canary
        && !alternative.backend.endpoints.is_empty()
        && canary(&alternative.rule)
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

/// Whether a routed request needs the hyper front end's upstream step: a backend that is
/// not plain HTTP/1.1 ([`crate::upstream_client`]), a route whose endpoint choice reads
/// cookies and sets them (session affinity, `upstream-hash-by`), or one that asks an
/// external auth service first.
pub(crate) fn needs_hyper(snapshot: &Snapshot, backend: usize, entry: usize) -> bool {
    let policy = &snapshot.table.entry(entry).policy;
    policy.affinity.is_some()
        || policy.hash_by.is_some()
        || policy.auth.is_some()
        || crate::upstream_client::protocol(snapshot, backend, entry)
            != sluice_routing::UpstreamProtocol::Http
}

/// A number uniform in `0..total` for `canary-weight`.
pub(crate) fn roll(total: u32) -> u32 {
    crate::balancer::random_below(total.max(1) as usize) as u32
}

/// The value of cookie `name` in `Cookie` field values (`a=1; b=2`).
pub(crate) fn cookie<'a>(values: impl Iterator<Item = &'a [u8]>, name: &str) -> Option<&'a [u8]> {
    values
        .flat_map(|value| value.split(|&b| b == b';'))
        .map(<[u8]>::trim_ascii)
        .find_map(|pair| {
            let (key, value) = pair.split_at(pair.iter().position(|&b| b == b'=')?);
            (key == name.as_bytes()).then(|| &value[1..])
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cookies_are_found_by_exact_name() {
        let values: [&[u8]; 2] = [b"a=1; canary=always", b"other=x"];
        assert_eq!(cookie(values.into_iter(), "canary"), Some(&b"always"[..]));
        assert_eq!(cookie(values.into_iter(), "other"), Some(&b"x"[..]));
        assert_eq!(cookie(values.into_iter(), "canar"), None);
        let empty: [&[u8]; 1] = [b"flag; canary="];
        assert_eq!(cookie(empty.into_iter(), "canary"), Some(&b""[..]));
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

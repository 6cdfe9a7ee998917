//! Gateway API host names: listener and route host names, and their intersection.
//!
//! Unlike Ingress, a Gateway API wildcard `*.example.com` covers one *or more* labels
//! (`a.example.com`, `a.b.example.com`), never `example.com` itself. Host names are parsed
//! with the Ingress parser (same syntax, same canonical form); only coverage differs.

use crate::host::{HostError, HostPattern, parse_rule_host};

/// Parses a listener or route host name (`None`: every host).
pub(crate) fn parse(raw: Option<&str>) -> Result<HostPattern, HostError> {
    parse_rule_host(raw)
}

/// Whether every name `inner` matches is also matched by `outer`.
pub(crate) fn covers(outer: &HostPattern, inner: &HostPattern) -> bool {
    match (outer, inner) {
        (HostPattern::Any, _) => true,
        (_, HostPattern::Any) => false,
        (HostPattern::Exact(o), HostPattern::Exact(i)) => o == i,
        (HostPattern::Exact(_), HostPattern::Wildcard(_)) => false,
        (HostPattern::Wildcard(suffix), HostPattern::Exact(name)) => below(name, suffix),
        (HostPattern::Wildcard(outer), HostPattern::Wildcard(inner)) => {
            inner == outer || below(inner, outer)
        }
    }
}

/// `name` ends with `.suffix` and has at least one label before it.
fn below(name: &str, suffix: &str) -> bool {
    name.len() > suffix.len() + 1
        && name.ends_with(suffix)
        && name.as_bytes()[name.len() - suffix.len() - 1] == b'.'
}

/// The host names a route serves on a listener: the route's host names intersected with
/// the listener's (Gateway API `HTTPRoute.spec.hostnames`). Empty: the route does not
/// attach to this listener (`NoMatchingListenerHostname`).
///
/// A route host name inside the listener's is kept; a route wildcard that covers the
/// listener's host name yields the listener's. No route host names: the listener's.
pub(crate) fn intersect(listener: &HostPattern, route: &[HostPattern]) -> Vec<HostPattern> {
    if route.is_empty() {
        return vec![listener.clone()];
    }
    let mut out: Vec<HostPattern> = Vec::new();
    for host in route {
        let served = if covers(listener, host) {
            Some(host.clone())
        } else if covers(host, listener) {
            Some(listener.clone())
        } else {
            None
        };
        if let Some(served) = served
            && !out.contains(&served)
        {
            out.push(served);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(s: &str) -> HostPattern {
        parse(Some(s)).unwrap_or_else(|e| panic!("{s}: {e}"))
    }

    #[test]
    fn gateway_api_wildcards_cover_one_or_more_labels() {
        let w = h("*.example.com");
        assert!(covers(&w, &h("a.example.com")));
        assert!(covers(&w, &h("a.b.example.com")));
        assert!(!covers(&w, &h("example.com")));
        assert!(!covers(&w, &h("aexample.com")));
        assert!(covers(&w, &h("*.foo.example.com")));
        assert!(covers(&w, &w));
        assert!(!covers(&h("*.foo.example.com"), &w));
        assert!(covers(&HostPattern::Any, &w));
        assert!(!covers(&w, &HostPattern::Any));
    }

    /// The examples of the HTTPRoute `hostnames` documentation and the conformance test
    /// HTTPRouteHostnameIntersection.
    #[test]
    fn intersection_follows_the_spec_examples() {
        let listener = h("*.example.com");
        assert_eq!(
            intersect(&listener, &[h("foo.example.com"), h("bar.org")]),
            vec![h("foo.example.com")]
        );
        assert_eq!(intersect(&listener, &[h("bar.org")]), vec![]);
        assert_eq!(intersect(&listener, &[]), vec![listener.clone()]);
        assert_eq!(
            intersect(&h("foo.example.com"), &[h("*.example.com")]),
            vec![h("foo.example.com")]
        );
        assert_eq!(
            intersect(&HostPattern::Any, &[h("a.org"), h("a.org")]),
            vec![h("a.org")]
        );
        assert_eq!(
            intersect(&h("*.example.com"), &[h("*.foo.example.com")]),
            vec![h("*.foo.example.com")]
        );
        assert_eq!(
            intersect(&h("*.foo.example.com"), &[h("*.example.com")]),
            vec![h("*.foo.example.com")]
        );
    }
}

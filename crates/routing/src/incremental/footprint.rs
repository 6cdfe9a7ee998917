//! The host names an Ingress may bear on: every name whose rule set, certificate, client
//! certificate check or passthrough target could change with the Ingress.
//!
//! An over-approximation is always safe (a larger partial compile); leaving a name out is
//! not. So beside its rule and TLS hosts an Ingress counts the names its annotations add
//! (`server-alias`; the `www.` twin of each rule host, whether or not it asks for
//! `from-to-www-redirect`). Names are compared as written patterns: the compiler never
//! relates `*.x` to `a.x` (that is the request lookup's business), so neither does this.

use k8s_openapi::api::networking::v1::Ingress;

use crate::host::{HostPattern, parse_rule_host};
use crate::ingress::annotations::{NGINX_PREFIX, SLUICE_PREFIX};

/// The names Ingress `ingress` bears on, sorted, each once.
pub(crate) fn footprint(ingress: &Ingress) -> Vec<HostPattern> {
    let mut out = Vec::new();
    let spec = ingress.spec.as_ref();
    let rule_hosts = spec
        .and_then(|s| s.rules.as_ref())
        .into_iter()
        .flatten()
        .map(|rule| rule.host.as_deref());
    for host in rule_hosts {
        let Ok(pattern) = parse_rule_host(host) else {
            continue;
        };
        if let HostPattern::Exact(name) = &pattern {
            let twin = match name.strip_prefix("www.") {
                Some(bare) => bare.to_owned(),
                None => format!("www.{name}"),
            };
            if let Ok(twin @ HostPattern::Exact(_)) = parse_rule_host(Some(&twin)) {
                out.push(twin);
            }
        }
        out.push(pattern);
    }
    let tls_hosts = spec
        .and_then(|s| s.tls.as_ref())
        .into_iter()
        .flatten()
        .flat_map(|tls| tls.hosts.iter().flatten());
    for host in tls_hosts {
        if let Ok(pattern) = parse_rule_host(Some(host)) {
            out.push(pattern);
        }
    }
    let annotations = ingress.metadata.annotations.iter().flatten();
    let aliases = annotations
        .filter(|(key, _)| {
            [NGINX_PREFIX, SLUICE_PREFIX]
                .iter()
                .any(|prefix| key.strip_prefix(prefix) == Some("server-alias"))
        })
        .flat_map(|(_, value)| value.split(','));
    for alias in aliases {
        if let Ok(pattern) = parse_rule_host(Some(alias.trim())) {
            out.push(pattern);
        }
    }
    out.sort();
    out.dedup();
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ingress(value: serde_json::Value) -> Ingress {
        serde_json::from_value(value).expect("an Ingress")
    }

    fn exact(name: &str) -> HostPattern {
        HostPattern::Exact(name.to_owned())
    }

    fn wildcard(suffix: &str) -> HostPattern {
        HostPattern::Wildcard(suffix.to_owned())
    }

    #[test]
    fn rule_hosts_count_with_their_www_twins() {
        let i = ingress(json!({
            "metadata": {"name": "a"},
            "spec": {"rules": [{"host": "Shop.Example.com."}, {"host": "*.example.com"}, {}]}
        }));
        assert_eq!(
            footprint(&i),
            vec![
                exact("shop.example.com"),
                exact("www.shop.example.com"),
                wildcard("example.com"),
                HostPattern::Any,
            ]
        );
    }

    #[test]
    fn a_www_host_counts_its_bare_twin() {
        let i = ingress(json!({
            "metadata": {"name": "a"},
            "spec": {"rules": [{"host": "www.example.com"}]}
        }));
        assert_eq!(
            footprint(&i),
            vec![exact("example.com"), exact("www.example.com")]
        );
    }

    #[test]
    fn tls_hosts_and_server_aliases_of_either_prefix_count() {
        let i = ingress(json!({
            "metadata": {"name": "a", "annotations": {
                "nginx.ingress.kubernetes.io/server-alias": "one.test, *.two.test",
                "sluice.dev/server-alias": "three.test",
                "nginx.ingress.kubernetes.io/rewrite-target": "four.test",
            }},
            "spec": {"tls": [{"hosts": ["secure.test"]}]}
        }));
        assert_eq!(
            footprint(&i),
            vec![
                exact("one.test"),
                exact("secure.test"),
                exact("three.test"),
                wildcard("two.test"),
            ]
        );
    }

    #[test]
    fn invalid_hosts_and_empty_ingresses_bear_on_nothing_or_the_catch_all() {
        let invalid = ingress(json!({
            "metadata": {"name": "a"},
            "spec": {"rules": [{"host": "bad host!"}], "tls": [{"hosts": ["also bad!"]}]}
        }));
        assert_eq!(footprint(&invalid), Vec::<HostPattern>::new());
        let empty = ingress(json!({"metadata": {"name": "a"}}));
        assert_eq!(footprint(&empty), Vec::<HostPattern>::new());
    }
}

//! The annotations that give a host's rules more names (ingress-nginx docs "Server Alias"
//! and "Redirect from/to www"): `server-alias` adds names to the host's server, and
//! `from-to-www-redirect` answers the `www.` twin of a host (or the bare name of a `www.`
//! host) with a redirect to the host.

use super::*;

use crate::host::{HostPattern, parse_rule_host};

/// `server-alias`: comma-separated host names, exact or `*.` wildcards (nginx's regex
/// server names, `~...`, are refused); duplicates dropped, sorted as ingress-nginx sorts
/// them.
pub(crate) fn parse_server_alias(value: &str) -> Result<Vec<HostPattern>, String> {
    let mut out = Vec::new();
    for alias in value.split(',').map(str::trim).filter(|a| !a.is_empty()) {
        if alias.starts_with('~') {
            return Err(format!(
                "{} is an nginx regular expression; sluice takes host names and *. wildcards",
                shown(alias)
            ));
        }
        match parse_rule_host(Some(alias)) {
            Ok(HostPattern::Any) => {}
            Ok(host) => out.push(host),
            Err(error) => return Err(error.to_string()),
        }
    }
    if out.is_empty() {
        return Err("lists no host name".to_owned());
    }
    out.sort();
    out.dedup();
    Ok(out)
}

/// The name `from-to-www-redirect` redirects from, for a rule host (ingress-nginx's
/// `BuildRedirects`): `example.com` for `www.example.com`, `www.example.com` for
/// `example.com`; none for a wildcard or host-less rule, or a bare `www.`.
pub(crate) fn www_counterpart(host: &HostPattern) -> Option<HostPattern> {
    let HostPattern::Exact(name) = host else {
        return None;
    };
    let other = match name.strip_prefix("www.") {
        Some("") => return None,
        Some(bare) => bare.to_owned(),
        None => format!("www.{name}"),
    };
    match parse_rule_host(Some(&other)) {
        Ok(pattern @ HostPattern::Exact(_)) => Some(pattern),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exact(name: &str) -> HostPattern {
        HostPattern::Exact(name.to_owned())
    }

    /// ingress-nginx docs, "Redirect from/to www": the direction depends on the rule's host.
    #[test]
    fn www_counterparts_go_both_ways_and_only_for_exact_hosts() {
        assert_eq!(
            www_counterpart(&exact("example.com")),
            Some(exact("www.example.com"))
        );
        assert_eq!(
            www_counterpart(&exact("www.example.com")),
            Some(exact("example.com"))
        );
        assert_eq!(
            www_counterpart(&exact("www.www.example.com")),
            Some(exact("www.example.com"))
        );
        assert_eq!(
            www_counterpart(&exact("localhost")),
            Some(exact("www.localhost"))
        );
        assert_eq!(www_counterpart(&exact("www.")), None);
        assert_eq!(
            www_counterpart(&HostPattern::Wildcard("example.com".into())),
            None
        );
        assert_eq!(www_counterpart(&HostPattern::Any), None);
        // 252 characters: the www. twin would be longer than 253.
        let long = format!(
            "{}.{}.com",
            vec!["a".repeat(62); 3].join("."),
            "b".repeat(59)
        );
        assert_eq!(long.len(), 252);
        assert_eq!(www_counterpart(&exact(&long)), None);
        // Every counterpart leads back.
        for name in ["a.b", "www.a.b", "x-y.example", "www.www.a"] {
            let there = www_counterpart(&exact(name)).unwrap();
            let back = www_counterpart(&there).unwrap();
            if name.starts_with("www.") {
                assert_eq!(www_counterpart(&back), Some(there), "{name}");
            } else {
                assert_eq!(back, exact(name), "{name}");
            }
        }
    }

    /// ingress-nginx docs, "Server Alias": comma-separated names, trimmed, deduplicated.
    #[test]
    fn server_aliases_are_host_names() {
        assert_eq!(
            parse_server_alias(" b.example.com, A.example.com ,,a.example.com,*.w.example"),
            Ok(vec![
                exact("a.example.com"),
                exact("b.example.com"),
                HostPattern::Wildcard("w.example".into()),
            ])
        );
        for bad in [
            "~^www\\d+\\.example\\.com$",
            "10.0.0.1",
            "a..b",
            "",
            " , ",
            "a.*.b",
        ] {
            assert!(parse_server_alias(bad).is_err(), "{bad:?}");
        }
    }
}

//! Host names: normalising the Host header of a request, and validating the hosts of rules.
//!
//! Both sides end up in the same canonical form (ASCII lowercase, no port, no trailing dot) so
//! that matching is a plain hash lookup: first the exact name, then, for a wildcard
//! `*.example.com`, the name with its first label removed (`a.example.com` -> `example.com`).
//! Because only the first label is removed, a wildcard covers exactly one label.

use std::borrow::Cow;
use std::net::IpAddr;

/// What a rule's `host` (or a TLS entry's host) matches, in canonical form.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum HostPattern {
    /// Exactly this name.
    Exact(String),
    /// `*.suffix`: any name made of one label followed by `.suffix`; holds `suffix`.
    Wildcard(String),
    /// No host in the rule: matches every host (the catch-all rules).
    Any,
}

impl std::fmt::Display for HostPattern {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HostPattern::Exact(h) => f.write_str(h),
            HostPattern::Wildcard(s) => write!(f, "*.{s}"),
            HostPattern::Any => f.write_str("*"),
        }
    }
}

/// Why a rule host was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum HostError {
    #[error("host {0:?} is an IP address; Ingress hosts must be DNS names")]
    IpAddress(String),
    #[error("host {0:?} is longer than 253 characters")]
    TooLong(String),
    #[error("host {0:?} has a wildcard that is not the whole leftmost label")]
    MisplacedWildcard(String),
    #[error("host {0:?} is not a valid DNS name (labels of 1-63 characters a-z, 0-9, '-')")]
    NotDns(String),
}

/// Parses a rule host. `None` and `""` both mean "no host" ([`HostPattern::Any`]).
///
/// Case is folded and one trailing dot is ignored (`Example.COM.` == `example.com`), the same
/// normalisation [`normalize_request_host`] applies, so both sides compare equal.
pub(crate) fn parse_rule_host(raw: Option<&str>) -> Result<HostPattern, HostError> {
    let raw = match raw {
        None | Some("") => return Ok(HostPattern::Any),
        Some(r) => r,
    };
    let trimmed = raw.strip_suffix('.').unwrap_or(raw);
    let lower: Cow<'_, str> = if trimmed.bytes().any(|b| b.is_ascii_uppercase()) {
        Cow::Owned(trimmed.to_ascii_lowercase())
    } else {
        Cow::Borrowed(trimmed)
    };
    if lower.len() > 253 {
        return Err(HostError::TooLong(raw.to_owned()));
    }
    // An IP literal passes the label syntax check ("10.0.0.1"), so reject it explicitly:
    // the Kubernetes API does, and a request addressed by IP belongs to the catch-all rules.
    if lower.parse::<IpAddr>().is_ok() {
        return Err(HostError::IpAddress(raw.to_owned()));
    }
    let (wildcard, name) = match lower.strip_prefix("*.") {
        Some(rest) => (true, rest),
        None => (false, &*lower),
    };
    if name.contains('*') {
        return Err(HostError::MisplacedWildcard(raw.to_owned()));
    }
    if name.is_empty() || !name.split('.').all(valid_label) {
        return Err(HostError::NotDns(raw.to_owned()));
    }
    Ok(if wildcard {
        HostPattern::Wildcard(name.to_owned())
    } else {
        HostPattern::Exact(name.to_owned())
    })
}

/// A DNS-1123 label: 1-63 characters of `a-z0-9-`, not starting or ending with `-`.
fn valid_label(label: &str) -> bool {
    let b = label.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b[0] != b'-'
        && b[b.len() - 1] != b'-'
        && b.iter()
            .all(|&c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-')
}

/// Canonical form of a request's Host header / `:authority` (or a TLS SNI name): port removed,
/// one trailing dot removed, ASCII lowercase. Borrows when nothing needs lowercasing, which is
/// the common case, so the request path allocates nothing.
///
/// IPv6 literals keep their brackets (`[::1]:8080` -> `[::1]`); they never equal a rule host,
/// since rule hosts cannot be IP addresses, so such requests go to the catch-all rules.
pub fn normalize_request_host(host: &str) -> Cow<'_, str> {
    let host = strip_port(host);
    let host = host.strip_suffix('.').unwrap_or(host);
    if host.bytes().any(|b| b.is_ascii_uppercase()) {
        Cow::Owned(host.to_ascii_lowercase())
    } else {
        Cow::Borrowed(host)
    }
}

/// [`normalize_request_host`] without allocating: lowercasing is done in `buf` when the name
/// fits (any valid DNS name does), so the request path stays allocation-free.
pub(crate) fn normalize_request_host_in<'b>(host: &'b str, buf: &'b mut [u8; 256]) -> Cow<'b, str> {
    let host = strip_port(host);
    let host = host.strip_suffix('.').unwrap_or(host);
    if !host.bytes().any(|b| b.is_ascii_uppercase()) {
        return Cow::Borrowed(host);
    }
    let Some(out) = buf.get_mut(..host.len()) else {
        // Longer than any DNS name (it may still match a wildcard through its suffix).
        return Cow::Owned(host.to_ascii_lowercase());
    };
    for (o, b) in out.iter_mut().zip(host.bytes()) {
        *o = b.to_ascii_lowercase();
    }
    // ASCII lowercasing keeps UTF-8 valid, so this cannot fail; but never panic.
    match std::str::from_utf8(out) {
        Ok(lower) => Cow::Borrowed(lower),
        Err(_) => Cow::Owned(host.to_ascii_lowercase()),
    }
}

fn strip_port(host: &str) -> &str {
    if host.starts_with('[') {
        return match host.find(']') {
            Some(end) => &host[..=end],
            None => host,
        };
    }
    match host.rfind(':') {
        // A second colon means an unbracketed IPv6 address, which has no port to strip.
        Some(i) if !host[..i].contains(':') => &host[..i],
        _ => host,
    }
}

/// The suffix a one-label wildcard would need to cover `host`: `a.example.com` ->
/// `example.com`. `None` for a single-label host or an empty first label.
pub(crate) fn wildcard_suffix(host: &str) -> Option<&str> {
    match host.split_once('.') {
        Some((first, rest)) if !first.is_empty() && !rest.is_empty() => Some(rest),
        _ => None,
    }
}

/// The Gateway API wildcard suffixes (one or more labels) that may cover request host
/// `host`, most specific first:
/// `a.b.example.com` -> `b.example.com`, `example.com`, `com`.
pub(crate) fn wildcard_suffixes(host: &str) -> impl Iterator<Item = &str> {
    host.match_indices('.').map(move |(at, _)| &host[at + 1..])
}

#[cfg(test)]
mod tests {
    #[test]
    fn gateway_wildcard_suffixes_go_from_most_to_least_specific() {
        let all: Vec<&str> = super::wildcard_suffixes("a.b.example.com").collect();
        assert_eq!(all, ["b.example.com", "example.com", "com"]);
        assert_eq!(super::wildcard_suffixes("localhost").count(), 0);
    }

    use super::*;

    #[test]
    fn rule_hosts() {
        use HostPattern::*;
        let cases: &[(Option<&str>, Result<HostPattern, ()>)] = &[
            (None, Ok(Any)),
            (Some(""), Ok(Any)),
            (Some("example.com"), Ok(Exact("example.com".into()))),
            (Some("Example.COM"), Ok(Exact("example.com".into()))),
            (Some("example.com."), Ok(Exact("example.com".into()))),
            (Some("*.example.com"), Ok(Wildcard("example.com".into()))),
            (Some("*.Example.com."), Ok(Wildcard("example.com".into()))),
            (Some("localhost"), Ok(Exact("localhost".into()))),
            (Some("a-b.c0"), Ok(Exact("a-b.c0".into()))),
            (Some("*"), Err(())),
            (Some("*."), Err(())),
            (Some("a.*.example.com"), Err(())),
            (Some("*a.example.com"), Err(())),
            (Some("**.example.com"), Err(())),
            (Some("foo bar.com"), Err(())),
            (Some("10.0.0.1"), Err(())),
            (Some("::1"), Err(())),
            (Some("[::1]"), Err(())),
            (Some("example.com:80"), Err(())),
            (Some("-a.com"), Err(())),
            (Some("a-.com"), Err(())),
            (Some("a..com"), Err(())),
            (Some(".a.com"), Err(())),
            (Some("a_b.com"), Err(())),
            (Some("ünicode.com"), Err(())),
            (Some("."), Err(())),
        ];
        for (input, want) in cases {
            let got = parse_rule_host(*input).map_err(|_| ());
            assert_eq!(&got, want, "input {input:?}");
        }
        let long = format!("{}.com", vec!["a".repeat(63); 4].join("."));
        assert!(matches!(
            parse_rule_host(Some(&long)),
            Err(HostError::TooLong(_))
        ));
        assert!(parse_rule_host(Some(&"a".repeat(64))).is_err());
        assert!(parse_rule_host(Some(&"a".repeat(63))).is_ok());
    }

    #[test]
    fn request_hosts() {
        let cases = [
            ("example.com", "example.com"),
            ("Example.COM", "example.com"),
            ("example.com:8080", "example.com"),
            ("EXAMPLE.com.:443", "example.com"),
            ("example.com.", "example.com"),
            ("[::1]:8080", "[::1]"),
            ("[::1]", "[::1]"),
            ("[FE80::1]", "[fe80::1]"),
            ("::1", "::1"),
            ("10.0.0.1:80", "10.0.0.1"),
            ("", ""),
            (":80", ""),
        ];
        for (input, want) in cases {
            assert_eq!(normalize_request_host(input), want, "input {input:?}");
        }
        assert!(matches!(normalize_request_host("a.b:1"), Cow::Borrowed(_)));
        for (input, want) in cases {
            let mut buf = [0u8; 256];
            assert_eq!(
                normalize_request_host_in(input, &mut buf),
                want,
                "{input:?}"
            );
        }
        let mut buf = [0u8; 256];
        assert_eq!(normalize_request_host_in("Ünï.X", &mut buf), "Ünï.x");
        let long = format!("{}.Example.COM", "A".repeat(300));
        let mut buf = [0u8; 256];
        assert_eq!(
            normalize_request_host_in(&long, &mut buf),
            long.to_ascii_lowercase()
        );
    }

    #[test]
    fn wildcard_suffixes() {
        assert_eq!(wildcard_suffix("a.example.com"), Some("example.com"));
        assert_eq!(wildcard_suffix("a.b.example.com"), Some("b.example.com"));
        assert_eq!(wildcard_suffix("example"), None);
        assert_eq!(wildcard_suffix(".example.com"), None);
        assert_eq!(wildcard_suffix("a."), None);
    }
}

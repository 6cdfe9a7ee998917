//! The global rate limit: `global-rate-limit`, `global-rate-limit-window`,
//! `global-rate-limit-key`, `global-rate-limit-ignored-cidrs` (ingress-nginx's
//! `internal/ingress/annotations/globalratelimit`, counted by lua-resty-global-throttle).

use std::sync::Arc;

use super::*;
use crate::policy::{GlobalRateLimit, KeyPart};

/// The four keys, with ingress-nginx's rules: both `global-rate-limit` and
/// `global-rate-limit-window` are needed (either alone is reported and sets nothing); an
/// invalid window closes the routes (ingress-nginx denies the location); an invalid key is
/// reported and `$remote_addr` counts instead (ingress-nginx's fallback); invalid ignored
/// CIDRs are reported and nobody is exempt (never wider than asked). The namespace is set
/// by the compiler, which knows the Ingress.
pub(super) fn global_rate_limit(cx: &mut Cx<'_>) -> Option<Arc<GlobalRateLimit>> {
    let limit = cx.take("global-rate-limit");
    let window = cx.take("global-rate-limit-window");
    let key = cx.take("global-rate-limit-key");
    let ignored = cx.take("global-rate-limit-ignored-cidrs");
    let (limit_entry, window_entry) = match (limit, window) {
        (Some(limit), Some(window)) => (limit, window),
        (limit, window) => {
            let missing = if limit.is_none() {
                "global-rate-limit"
            } else {
                "global-rate-limit-window"
            };
            for entry in [limit, window, key, ignored].into_iter().flatten() {
                cx.invalid(entry, format!("has no effect without {missing}"));
            }
            return None;
        }
    };
    let window_secs = match parse_window(window_entry.value) {
        Ok(secs) => {
            cx.applied(window_entry);
            secs
        }
        Err(detail) => {
            cx.fail_closed(window_entry, detail);
            for entry in [Some(limit_entry), key, ignored].into_iter().flatten() {
                cx.invalid(entry, "has no effect: global-rate-limit-window is invalid");
            }
            return None;
        }
    };
    let limit = cx.parse_entry(limit_entry, |v| parse_rate(v, "global-rate-limit"))?;
    let key = key
        .and_then(|entry| {
            cx.parse_entry(entry, |v| {
                parse_key(v).map_err(|e| format!("{e}; $remote_addr is counted instead"))
            })
        })
        .unwrap_or_else(|| vec![KeyPart::ClientAddress]);
    let ignored = ignored
        .and_then(|entry| {
            cx.parse_entry(entry, |v| {
                parse_cidrs(v).map_err(|e| format!("{e}; no client is exempt"))
            })
        })
        .unwrap_or_default();
    Some(Arc::new(GlobalRateLimit {
        limit,
        window_secs,
        key,
        ignored,
        namespace: String::new(),
    }))
}

/// A duration of at least one second, in whole seconds (ingress-nginx keeps
/// `int(window.Seconds())`).
pub(super) fn parse_window(value: &str) -> Result<u32, String> {
    let duration = parse_duration(value)?;
    match u32::try_from(duration.as_secs()) {
        Ok(0) => Err(format!(
            "value {} is shorter than a second (the window is counted in whole seconds)",
            shown(value)
        )),
        Ok(secs) => Ok(secs),
        Err(_) => Err(format!("value {} is too long", shown(value))),
    }
}

/// The nginx variables a key may use, for the diagnostic.
const KEY_VARIABLES: &str = "$remote_addr, $binary_remote_addr, $http_<name>, $host, $uri";

/// A key template: literal text and `$name` or `${name}` variables (nginx's complex value,
/// as ingress-nginx's `util.parse_complex_value`); `\$` is a literal `$`. Only variables
/// sluice can compute are accepted: any other is refused, named.
pub(crate) fn parse_key(value: &str) -> Result<Vec<KeyPart>, String> {
    let mut parts: Vec<KeyPart> = Vec::new();
    let mut text = String::new();
    let mut rest = value;
    while let Some(at) = rest.find(['$', '\\']) {
        text.push_str(&rest[..at]);
        rest = &rest[at..];
        if let Some(after) = rest.strip_prefix("\\$") {
            text.push('$');
            rest = after;
            continue;
        }
        if let Some(after) = rest.strip_prefix('\\') {
            text.push('\\');
            rest = after;
            continue;
        }
        let after = &rest[1..];
        let (name, tail) = if let Some(braced) = after.strip_prefix('{') {
            match braced.find('}') {
                Some(end) => (&braced[..end], &braced[end + 1..]),
                None => return Err(format!("value {} has an unclosed ${{", shown(value))),
            }
        } else {
            let end = after
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(after.len());
            (&after[..end], &after[end..])
        };
        if name.is_empty() {
            // nginx's complex value takes a lone `$` as text.
            text.push('$');
            rest = after;
            continue;
        }
        let part = variable(name).ok_or_else(|| {
            format!("variable ${name} is not supported in a key (supported: {KEY_VARIABLES})")
        })?;
        if !text.is_empty() {
            parts.push(KeyPart::Text(std::mem::take(&mut text)));
        }
        parts.push(part);
        rest = tail;
    }
    text.push_str(rest);
    if !text.is_empty() {
        parts.push(KeyPart::Text(text));
    }
    if parts.is_empty() {
        return Err("it is empty".to_owned());
    }
    Ok(parts)
}

/// The part of nginx variable `name`, if sluice computes it.
fn variable(name: &str) -> Option<KeyPart> {
    match name {
        "remote_addr" => Some(KeyPart::ClientAddress),
        "binary_remote_addr" => Some(KeyPart::BinaryClientAddress),
        "host" => Some(KeyPart::Host),
        "uri" => Some(KeyPart::Path),
        _ => {
            let header = name.strip_prefix("http_")?;
            let header = header.replace('_', "-").to_ascii_lowercase();
            http::HeaderName::from_bytes(header.as_bytes())
                .ok()
                .map(KeyPart::Header)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::parse;
    use super::*;

    fn parsed(pairs: &[(&str, &str)]) -> Parsed {
        let map = pairs
            .iter()
            .map(|(k, v)| (format!("{NGINX_PREFIX}{k}"), (*v).to_owned()))
            .collect();
        parse(&map)
    }

    fn header(name: &str) -> KeyPart {
        KeyPart::Header(http::HeaderName::from_bytes(name.as_bytes()).unwrap())
    }

    /// ingress-nginx docs, "Global Rate Limiting": limit and window required, key
    /// defaults to `$remote_addr`.
    #[test]
    fn global_rate_limiting_limit_window_and_default_key() {
        let p = parsed(&[
            ("global-rate-limit", "100"),
            ("global-rate-limit-window", "1m"),
        ]);
        assert!(p.problems.is_empty(), "{:?}", p.problems);
        let g = p.policy.global_rate_limit.unwrap();
        assert_eq!((g.limit, g.window_secs), (100, 60));
        assert_eq!(g.key, vec![KeyPart::ClientAddress]);
        assert!(g.ignored.is_empty());
        let p = parsed(&[
            ("global-rate-limit", "5"),
            ("global-rate-limit-window", "1m30s"),
            (
                "global-rate-limit-key",
                "${remote_addr}-${http_x_api_client}",
            ),
            ("global-rate-limit-ignored-cidrs", "10.0.0.0/8, 192.168.1.1"),
        ]);
        assert!(p.problems.is_empty(), "{:?}", p.problems);
        let g = p.policy.global_rate_limit.unwrap();
        assert_eq!(g.window_secs, 90);
        assert_eq!(
            g.key,
            vec![
                KeyPart::ClientAddress,
                KeyPart::Text("-".into()),
                header("x-api-client")
            ]
        );
        assert_eq!(g.ignored.len(), 2);
    }

    #[test]
    fn global_rate_limiting_needs_both_limit_and_window() {
        let p = parsed(&[("global-rate-limit", "10")]);
        assert!(p.policy.global_rate_limit.is_none());
        assert_eq!(p.problems.len(), 1);
        assert!(
            p.problems[0]
                .detail
                .contains("without global-rate-limit-window")
        );
        assert!(p.problems[0].annotation.ends_with("/global-rate-limit"));
        let p = parsed(&[
            ("global-rate-limit-window", "1m"),
            ("global-rate-limit-key", "$host"),
        ]);
        assert!(p.policy.global_rate_limit.is_none());
        assert_eq!(p.problems.len(), 2);
        assert!(
            p.problems
                .iter()
                .all(|x| x.detail.contains("without global-rate-limit"))
        );
    }

    #[test]
    fn global_rate_limiting_invalid_values_are_named() {
        // An invalid window closes the routes, as ingress-nginx denies the location.
        let p = parsed(&[
            ("global-rate-limit", "10"),
            ("global-rate-limit-window", "soon"),
        ]);
        assert!(p.policy.global_rate_limit.is_none());
        assert!(p.policy.fail_closed);
        let window = p
            .problems
            .iter()
            .find(|x| x.annotation.ends_with("global-rate-limit-window"))
            .unwrap();
        assert_eq!(window.reason, Reason::FailedClosed);
        assert!(window.detail.contains("soon"), "{}", window.detail);
        let p = parsed(&[
            ("global-rate-limit", "10"),
            ("global-rate-limit-window", "500ms"),
        ]);
        assert!(p.policy.fail_closed);
        // A bad limit: reported, nothing limited.
        for bad in ["0", "-1", "ten"] {
            let p = parsed(&[
                ("global-rate-limit", bad),
                ("global-rate-limit-window", "1s"),
            ]);
            assert!(p.policy.global_rate_limit.is_none(), "{bad}");
            assert_eq!(p.problems.len(), 1, "{bad}");
            assert_eq!(p.problems[0].reason, Reason::InvalidAnnotation);
        }
        // An unknown variable: named, and the client address counts instead.
        let p = parsed(&[
            ("global-rate-limit", "10"),
            ("global-rate-limit-window", "1s"),
            ("global-rate-limit-key", "$cookie_session"),
        ]);
        let g = p.policy.global_rate_limit.unwrap();
        assert_eq!(g.key, vec![KeyPart::ClientAddress]);
        assert_eq!(p.problems.len(), 1);
        assert!(
            p.problems[0].detail.contains("$cookie_session"),
            "{}",
            p.problems[0].detail
        );
        // Bad CIDRs: reported, nobody exempt, the limit stays.
        let p = parsed(&[
            ("global-rate-limit", "10"),
            ("global-rate-limit-window", "1s"),
            ("global-rate-limit-ignored-cidrs", "10.0.0.0/99"),
        ]);
        assert!(p.policy.global_rate_limit.unwrap().ignored.is_empty());
        assert_eq!(p.problems.len(), 1);
    }

    #[test]
    fn keys_take_nginx_complex_values() {
        assert_eq!(
            parse_key("$remote_addr").unwrap(),
            vec![KeyPart::ClientAddress]
        );
        assert_eq!(
            parse_key("$binary_remote_addr").unwrap(),
            vec![KeyPart::BinaryClientAddress]
        );
        assert_eq!(
            parse_key("api:$host$uri").unwrap(),
            vec![KeyPart::Text("api:".into()), KeyPart::Host, KeyPart::Path]
        );
        assert_eq!(
            parse_key("$http_X_Tenant.x").unwrap(),
            vec![header("x-tenant"), KeyPart::Text(".x".into())]
        );
        assert_eq!(
            parse_key("static").unwrap(),
            vec![KeyPart::Text("static".into())]
        );
        assert_eq!(
            parse_key("a\\$b $").unwrap(),
            vec![KeyPart::Text("a$b $".into())]
        );
        for (bad, named) in [
            ("$request_uri", "$request_uri"),
            ("${arg_id}", "$arg_id"),
            ("x-$cookie_a", "$cookie_a"),
        ] {
            let error = parse_key(bad).unwrap_err();
            assert!(error.contains(named), "{bad}: {error}");
        }
        assert!(parse_key("${host").is_err());
        assert!(parse_key("").is_err());
    }

    #[test]
    fn windows_are_whole_seconds() {
        assert_eq!(parse_window("1m"), Ok(60));
        assert_eq!(parse_window("10s"), Ok(10));
        assert_eq!(parse_window("1.5s"), Ok(1));
        assert_eq!(parse_window("2"), Ok(2));
        assert!(parse_window("0").is_err());
        assert!(parse_window("999ms").is_err());
    }
}

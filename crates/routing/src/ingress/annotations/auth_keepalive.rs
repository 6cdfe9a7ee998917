//! `auth-keepalive`, `auth-keepalive-requests`, `auth-keepalive-timeout` and
//! `auth-keepalive-share-vars` (ingress-nginx docs, "External Authentication"; its
//! `authreq` parser): connections to the `auth-url` service kept open for further checks,
//! as the `upstream` block with `keepalive` ingress-nginx writes for it. The default, 0,
//! opens a new connection for every check.

use super::*;

use crate::policy::AuthKeepalive;

/// ingress-nginx's `defaultKeepaliveRequests`.
const DEFAULT_REQUESTS: u32 = 1000;
/// ingress-nginx's `defaultKeepaliveTimeout`, seconds.
const DEFAULT_TIMEOUT_SECS: u64 = 60;

/// An integer annotation as ingress-nginx's `GetIntAnnotation` reads it; `None` (with a
/// diagnostic naming `default`) when it does not parse.
fn int<'a>(cx: &mut Cx<'a>, entry: Entry<'a>, default: &str) -> Option<i64> {
    match entry.value.trim().parse::<i64>() {
        Ok(value) => Some(value),
        Err(_) => {
            let why = format!(
                "value {} is not an integer; {default} applies",
                shown(entry.value)
            );
            cx.report(entry, Reason::InvalidAnnotation, why);
            None
        }
    }
}

/// Reads the four keys; `None`: a new connection per check (ingress-nginx's 0, also what
/// a non-positive `auth-keepalive-requests` or `auth-keepalive-timeout` leaves).
pub(super) fn auth_keepalive(cx: &mut Cx<'_>, has_url: bool) -> Option<AuthKeepalive> {
    let entries = [
        cx.take("auth-keepalive"),
        cx.take("auth-keepalive-requests"),
        cx.take("auth-keepalive-timeout"),
        cx.take("auth-keepalive-share-vars"),
    ];
    if !has_url {
        for entry in entries.into_iter().flatten() {
            cx.invalid(entry, "has no effect without a valid auth-url");
        }
        return None;
    }
    let [connections, requests, timeout, share_vars] = entries;
    let mut off: Option<String> = None;
    let connections = match connections {
        None => 0,
        Some(entry) => match int(cx, entry, "0") {
            Some(n) if n < 0 => {
                cx.invalid(entry, "is negative; 0 applies (a new connection per check)");
                0
            }
            Some(n) => {
                cx.applied(entry);
                usize::try_from(n).unwrap_or(usize::MAX)
            }
            None => 0,
        },
    };
    let requests = match requests {
        None => DEFAULT_REQUESTS,
        Some(entry) => match int(cx, entry, "1000") {
            Some(n) if n <= 0 => {
                off = Some(format!("auth-keepalive-requests is {n}"));
                cx.invalid(entry, "is not above 0; auth-keepalive 0 applies");
                0
            }
            Some(n) => {
                cx.applied(entry);
                u32::try_from(n).unwrap_or(u32::MAX)
            }
            None => DEFAULT_REQUESTS,
        },
    };
    let timeout = match timeout {
        None => DEFAULT_TIMEOUT_SECS,
        Some(entry) => match int(cx, entry, "60") {
            Some(n) if n <= 0 => {
                off = Some(format!("auth-keepalive-timeout is {n}"));
                cx.invalid(entry, "is not above 0; auth-keepalive 0 applies");
                0
            }
            Some(n) => {
                cx.applied(entry);
                n.unsigned_abs()
            }
            None => DEFAULT_TIMEOUT_SECS,
        },
    };
    let share_vars = match share_vars {
        None => false,
        Some(entry) => match entry.value.trim() {
            "true" => {
                cx.applied(entry);
                true
            }
            "false" => {
                cx.applied(entry);
                false
            }
            other => {
                let why = format!("value {} is not true or false; false applies", shown(other));
                cx.invalid(entry, why);
                false
            }
        },
    };
    if connections == 0 || off.is_some() {
        return None;
    }
    Some(AuthKeepalive {
        connections,
        requests,
        timeout: Duration::from_secs(timeout),
        share_vars,
    })
}

#[cfg(test)]
mod tests {
    use super::super::parse;
    use super::*;

    fn keepalive(pairs: &[(&str, &str)]) -> (Option<AuthKeepalive>, Vec<String>) {
        let mut map: BTreeMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (format!("{NGINX_PREFIX}{k}"), (*v).to_owned()))
            .collect();
        map.insert(
            format!("{NGINX_PREFIX}auth-url"),
            "http://auth.example/".into(),
        );
        let parsed = parse(&map);
        let problems = parsed
            .problems
            .iter()
            .map(|p| p.annotation.trim_start_matches(NGINX_PREFIX).to_owned())
            .collect();
        (parsed.policy.auth.and_then(|a| a.keepalive), problems)
    }

    /// ingress-nginx's `authreq` defaults: 0 connections (none kept), 1000 requests, 60 s.
    #[test]
    fn keepalive_with_ingress_nginx_defaults() {
        assert_eq!(keepalive(&[]), (None, Vec::new()));
        let (got, problems) = keepalive(&[("auth-keepalive", "10")]);
        assert!(problems.is_empty(), "{problems:?}");
        assert_eq!(
            got,
            Some(AuthKeepalive {
                connections: 10,
                requests: 1000,
                timeout: Duration::from_secs(60),
                share_vars: false,
            })
        );
        let (got, problems) = keepalive(&[
            ("auth-keepalive", "2"),
            ("auth-keepalive-requests", "5"),
            ("auth-keepalive-timeout", "3"),
            ("auth-keepalive-share-vars", "true"),
        ]);
        assert!(problems.is_empty(), "{problems:?}");
        let got = got.unwrap();
        assert_eq!((got.connections, got.requests), (2, 5));
        assert_eq!(got.timeout, Duration::from_secs(3));
        assert!(got.share_vars);
    }

    /// ingress-nginx: negative keepalive is 0; non-positive requests or timeout turn
    /// keepalive off; values that do not parse take the default; each is reported.
    #[test]
    fn keepalive_values_ingress_nginx_turns_off() {
        for (pairs, bad) in [
            (&[("auth-keepalive", "-1")][..], "auth-keepalive"),
            (&[("auth-keepalive", "x")][..], "auth-keepalive"),
            (
                &[("auth-keepalive", "4"), ("auth-keepalive-requests", "0")][..],
                "auth-keepalive-requests",
            ),
            (
                &[("auth-keepalive", "4"), ("auth-keepalive-timeout", "-5")][..],
                "auth-keepalive-timeout",
            ),
        ] {
            let (got, problems) = keepalive(pairs);
            assert_eq!(got, None, "{pairs:?}");
            assert_eq!(problems, [bad], "{pairs:?}");
        }
        let (got, problems) =
            keepalive(&[("auth-keepalive", "4"), ("auth-keepalive-requests", "x")]);
        assert_eq!(got.unwrap().requests, 1000);
        assert_eq!(problems, ["auth-keepalive-requests"]);
    }
}

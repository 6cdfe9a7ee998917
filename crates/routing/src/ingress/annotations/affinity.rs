//! Session affinity and consistent hashing (ingress-nginx's `affinity: cookie` with the
//! `session-cookie-*` keys, and `upstream-hash-by`), parsed once per Ingress.

use super::*;

use crate::policy::{Affinity, AffinityMode, HashBy};

use std::collections::BTreeMap;

/// The `affinity` family of keys (without prefix).
pub(crate) const AFFINITY_KEYS: &[&str] = &[
    "affinity-mode",
    "session-cookie-name",
    "session-cookie-path",
    "session-cookie-domain",
    "session-cookie-samesite",
    "session-cookie-secure",
    "session-cookie-max-age",
    "session-cookie-expires",
    "session-cookie-change-on-failure",
    "session-cookie-conditional-samesite-none",
];

/// Parses `affinity`'s companions (under `affinity: cookie`). Returns the settings and, per
/// key, a problem sentence for values that do not parse (their defaults then apply).
pub(crate) fn parse_affinity(
    values: &BTreeMap<&str, &str>,
) -> (Affinity, Vec<(&'static str, String)>) {
    let mut problems = Vec::new();
    let get = |key: &str| values.get(key).map(|v| v.trim());
    let token = |v: &str| {
        !v.is_empty()
            && v.bytes()
                .all(|b| b.is_ascii_graphic() && !b"()<>@,;:\\\"[]?={}".contains(&b))
    };
    let mut cookie = "INGRESSCOOKIE".to_owned();
    if let Some(name) = get("session-cookie-name") {
        if token(name) && !name.contains('/') {
            cookie = name.to_owned();
        } else {
            problems.push((
                "session-cookie-name",
                format!("{name:?} is not a cookie name"),
            ));
        }
    }
    let mut attributes = String::new();
    let path = match get("session-cookie-path") {
        Some(path) if path.starts_with('/') && token(path) => path,
        Some(path) => {
            problems.push((
                "session-cookie-path",
                format!("{path:?} is not a path; / is used"),
            ));
            "/"
        }
        None => "/",
    };
    attributes.push_str("; Path=");
    attributes.push_str(path);
    if let Some(domain) = get("session-cookie-domain") {
        if token(domain) && !domain.contains('/') {
            attributes.push_str("; Domain=");
            attributes.push_str(domain);
        } else {
            problems.push((
                "session-cookie-domain",
                format!("{domain:?} is not a domain"),
            ));
        }
    }
    let seconds = |key: &'static str, problems: &mut Vec<(&'static str, String)>| {
        let value = get(key)?;
        match value.parse::<u64>() {
            Ok(n) => Some(n),
            Err(_) => {
                problems.push((key, format!("{value:?} is not a number of seconds")));
                None
            }
        }
    };
    if let Some(max_age) = seconds("session-cookie-max-age", &mut problems) {
        attributes.push_str(&format!("; Max-Age={max_age}"));
    }
    let expires = seconds("session-cookie-expires", &mut problems);
    if let Some(samesite) = get("session-cookie-samesite") {
        match samesite.to_ascii_lowercase().as_str() {
            "none" => attributes.push_str("; SameSite=None"),
            "lax" => attributes.push_str("; SameSite=Lax"),
            "strict" => attributes.push_str("; SameSite=Strict"),
            _ => problems.push((
                "session-cookie-samesite",
                format!("{samesite:?} is not None, Lax or Strict"),
            )),
        }
    }
    let flag = |key: &'static str, problems: &mut Vec<(&'static str, String)>| match get(key) {
        None => false,
        Some(v) => match v.to_ascii_lowercase().as_str() {
            "true" | "1" | "t" => true,
            "false" | "0" | "f" => false,
            _ => {
                problems.push((key, format!("{v:?} is not a boolean")));
                false
            }
        },
    };
    if flag("session-cookie-secure", &mut problems) {
        attributes.push_str("; Secure");
    }
    // ingress-nginx's sticky cookies are always HttpOnly.
    attributes.push_str("; HttpOnly");
    let change_on_failure = flag("session-cookie-change-on-failure", &mut problems);
    let conditional_samesite_none = flag("session-cookie-conditional-samesite-none", &mut problems);
    let mode = match get("affinity-mode") {
        None | Some("balanced") => AffinityMode::Balanced,
        Some("persistent") => AffinityMode::Persistent,
        Some(other) => {
            problems.push((
                "affinity-mode",
                format!("{other:?} is not balanced or persistent; balanced is used"),
            ));
            AffinityMode::Balanced
        }
    };
    let affinity = Affinity {
        cookie,
        attributes,
        expires,
        mode,
        change_on_failure,
        conditional_samesite_none,
    };
    (affinity, problems)
}

/// `upstream-hash-by`: one nginx variable (ingress-nginx allows any nginx expression;
/// sluice takes the common single variables).
pub(crate) fn parse_hash_by(value: &str) -> Result<HashBy, String> {
    let v = value.trim();
    let bad = || {
        format!(
            "value {v:?} is not one of $remote_addr, $binary_remote_addr, $http_<name>, \
             $cookie_<name>, $request_uri, $uri, $host"
        )
    };
    match v {
        "$remote_addr" | "$binary_remote_addr" => Ok(HashBy::ClientAddress),
        "$request_uri" => Ok(HashBy::RequestUri),
        "$uri" => Ok(HashBy::Path),
        "$host" => Ok(HashBy::Host),
        _ => {
            if let Some(name) = v.strip_prefix("$http_") {
                let name = name.replace('_', "-").to_ascii_lowercase();
                return http::HeaderName::from_bytes(name.as_bytes())
                    .map(HashBy::Header)
                    .map_err(|_| bad());
            }
            if let Some(name) = v.strip_prefix("$cookie_")
                && !name.is_empty()
                && name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
            {
                return Ok(HashBy::Cookie(name.to_owned()));
            }
            Err(bad())
        }
    }
}

/// `affinity: cookie` and its `session-cookie-*` companions ([`crate::ingress::annotations::affinity`]).
pub(super) fn affinity(cx: &mut Cx<'_>) -> Option<Affinity> {
    let enabled = cx.value("affinity", |v| match v.trim() {
        "cookie" => Ok(true),
        other => Err(format!(
            "value {other:?} is not cookie (the only affinity type)"
        )),
    });
    let entries: Vec<_> = AFFINITY_KEYS
        .iter()
        .filter_map(|name| cx.take(name).map(|entry| (*name, entry)))
        .collect();
    if enabled != Some(true) {
        for (_, entry) in entries {
            cx.invalid(entry, "has no effect without affinity: cookie");
        }
        return None;
    }
    let values = entries
        .iter()
        .map(|(name, entry)| (*name, entry.value))
        .collect();
    let (settings, problems) = affinity::parse_affinity(&values);
    for (name, entry) in entries {
        match problems.iter().find(|(bad, _)| *bad == name) {
            Some((_, why)) => cx.invalid(entry, why.clone()),
            None => cx.applied(entry),
        }
    }
    Some(settings)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cookie_attributes_like_ingress_nginx() {
        let values: BTreeMap<&str, &str> = [
            ("session-cookie-name", "route"),
            ("session-cookie-max-age", "172800"),
            ("session-cookie-expires", "172800"),
            ("session-cookie-samesite", "Lax"),
            ("session-cookie-secure", "true"),
            ("affinity-mode", "persistent"),
        ]
        .into_iter()
        .collect();
        let (a, problems) = parse_affinity(&values);
        assert!(problems.is_empty(), "{problems:?}");
        assert_eq!(a.cookie, "route");
        assert_eq!(
            a.attributes,
            "; Path=/; Max-Age=172800; SameSite=Lax; Secure; HttpOnly"
        );
        assert_eq!(a.expires, Some(172_800));
        assert_eq!(a.mode, AffinityMode::Persistent);
        let (defaults, _) = parse_affinity(&BTreeMap::new());
        assert_eq!(defaults.cookie, "INGRESSCOOKIE");
        assert_eq!(defaults.mode, AffinityMode::Balanced);
        assert_eq!(defaults.attributes, "; Path=/; HttpOnly");
    }

    #[test]
    fn bad_values_are_problems_and_defaults_apply() {
        let values: BTreeMap<&str, &str> = [
            ("session-cookie-name", "a b"),
            ("session-cookie-samesite", "sometimes"),
            ("affinity-mode", "sticky"),
        ]
        .into_iter()
        .collect();
        let (a, problems) = parse_affinity(&values);
        assert_eq!(problems.len(), 3);
        assert_eq!(a.cookie, "INGRESSCOOKIE");
    }

    #[test]
    fn hash_by_variables() {
        assert_eq!(parse_hash_by("$remote_addr"), Ok(HashBy::ClientAddress));
        assert_eq!(
            parse_hash_by("$http_x_user_id"),
            Ok(HashBy::Header(http::HeaderName::from_static("x-user-id")))
        );
        assert_eq!(
            parse_hash_by("$cookie_sid"),
            Ok(HashBy::Cookie("sid".into()))
        );
        assert_eq!(parse_hash_by("$request_uri"), Ok(HashBy::RequestUri));
        assert!(parse_hash_by("$remote_addr$uri").is_err());
    }
}

//! Canary Ingresses (ingress-nginx's `canary: "true"` and `canary-*`): a second Ingress for
//! the same host and path whose backend gets part of the traffic of the main one.
//!
//! ingress-nginx's precedence: `canary-by-header`, then `canary-by-cookie`, then
//! `canary-weight`. A header (or cookie) value `always` sends the request to the canary and
//! `never` keeps it on the main backend; with `canary-by-header-value` (or, failing that,
//! `canary-by-header-pattern`) a matching value means the canary and any other value falls
//! through to the next rule. The canary's other annotations are ignored: the main
//! Ingress's policy applies to both backends.
//!
//! With cookie affinity on the main Ingress (`affinity-canary-behavior`, on the canary
//! Ingress): a client whose cookie names the main backend stays there; `sticky` (default)
//! also keeps a client whose cookie names the canary on the canary, `legacy` gives the
//! canary no affinity, so its clients are decided anew on each request (ingress-nginx's
//! `balancer.lua` `route_to_alternative_balancer` and `mergeAlternativeBackend`).

use super::*;

use crate::table::CanaryRule;

use std::collections::BTreeMap;

use http::{HeaderName, HeaderValue};

/// The `canary-*` keys (without prefix), which only matter with `canary: "true"`.
pub(crate) const CANARY_KEYS: &[&str] = &[
    "canary-by-header",
    "canary-by-header-value",
    "canary-by-header-pattern",
    "canary-by-cookie",
    "canary-weight",
    "canary-weight-total",
    "affinity-canary-behavior",
];

/// Parses the `canary-*` values (already known to be under `canary: "true"`). Returns the
/// rule and, per key, a problem sentence for values that do not parse.
pub(crate) fn parse_rule(
    values: &BTreeMap<&str, &str>,
) -> (CanaryRule, Vec<(&'static str, String)>) {
    let mut rule = CanaryRule {
        weight_total: 100,
        ..CanaryRule::default()
    };
    let mut problems = Vec::new();
    let get = |key: &str| values.get(key).map(|v| v.trim());
    if let Some(name) = get("canary-by-header") {
        match HeaderName::from_bytes(name.as_bytes()) {
            Ok(name) => rule.header = Some(name),
            Err(_) => problems.push(("canary-by-header", format!("{name:?} is not a header name"))),
        }
    }
    if let Some(value) = get("canary-by-header-value") {
        match HeaderValue::from_str(value) {
            Ok(value) if !value.is_empty() => rule.header_value = Some(value),
            _ => problems.push(("canary-by-header-value", "not a header value".to_owned())),
        }
    }
    if let Some(pattern) = get("canary-by-header-pattern") {
        match regex::Regex::new(pattern) {
            Ok(regex) => rule.header_pattern = Some(regex),
            Err(e) => problems.push((
                "canary-by-header-pattern",
                format!("not a regular expression: {e}"),
            )),
        }
    }
    if let Some(cookie) = get("canary-by-cookie") {
        let valid = !cookie.is_empty()
            && cookie
                .bytes()
                .all(|b| b.is_ascii_graphic() && !b"()<>@,;:\\\"/[]?={}".contains(&b));
        if valid {
            rule.cookie = Some(cookie.to_owned());
        } else {
            problems.push((
                "canary-by-cookie",
                format!("{cookie:?} is not a cookie name"),
            ));
        }
    }
    if let Some(total) = get("canary-weight-total") {
        match total.parse::<u32>() {
            Ok(total) if total > 0 => rule.weight_total = total,
            _ => problems.push((
                "canary-weight-total",
                format!("{total:?} is not a whole number > 0; 100 is used"),
            )),
        }
    }
    if let Some(weight) = get("canary-weight") {
        match weight.parse::<u32>() {
            Ok(weight) if weight <= rule.weight_total => rule.weight = weight,
            _ => problems.push((
                "canary-weight",
                format!(
                    "{weight:?} is not a whole number from 0 to {}; the weight is 0",
                    rule.weight_total
                ),
            )),
        }
    }
    // ingress-nginx's `sessionaffinity` parser: `sticky` (default) or `legacy`.
    if let Some(behavior) = get("affinity-canary-behavior") {
        match behavior {
            "sticky" => rule.legacy_affinity = false,
            "legacy" => rule.legacy_affinity = true,
            _ => problems.push((
                "affinity-canary-behavior",
                format!("{behavior:?} is not sticky or legacy; sticky is used"),
            )),
        }
    }
    (rule, problems)
}

/// `canary` and the `canary-*` keys ([`crate::ingress::annotations::canary`]).
pub(super) fn canary(cx: &mut Cx<'_>) -> Option<CanaryRule> {
    let enabled = cx
        .value("canary", |v| {
            parse_bool(v).map_err(|e| format!("{e}; the Ingress is not a canary"))
        })
        .unwrap_or(false);
    let entries: Vec<_> = CANARY_KEYS
        .iter()
        .filter_map(|name| cx.take(name).map(|entry| (*name, entry)))
        .collect();
    if !enabled {
        for (_, entry) in entries {
            cx.invalid(entry, "has no effect without canary: \"true\"");
        }
        return None;
    }
    let values = entries
        .iter()
        .map(|(name, entry)| (*name, entry.value))
        .collect();
    let (rule, problems) = canary::parse_rule(&values);
    for (name, entry) in entries {
        match problems.iter().find(|(bad, _)| *bad == name) {
            Some((_, why)) => cx.invalid(entry, why.clone()),
            None => cx.applied(entry),
        }
    }
    Some(rule)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(pairs: &[(&str, &str)]) -> CanaryRule {
        let values: BTreeMap<&str, &str> = pairs.iter().copied().collect();
        let (rule, problems) = parse_rule(&values);
        assert!(problems.is_empty(), "{problems:?}");
        rule
    }

    /// ingress-nginx's precedence: header, then cookie, then weight.
    #[test]
    fn header_then_cookie_then_weight() {
        let r = rule(&[
            ("canary-by-header", "x-canary"),
            ("canary-by-cookie", "canary"),
            ("canary-weight", "30"),
        ]);
        assert!(r.chooses(Some(b"always"), Some(b"never"), 99));
        assert!(!r.chooses(Some(b"never"), Some(b"always"), 0));
        // Another header value falls through to the cookie, then to the weight.
        assert!(r.chooses(Some(b"maybe"), Some(b"always"), 99));
        assert!(!r.chooses(Some(b"maybe"), Some(b"never"), 0));
        assert!(r.chooses(None, Some(b"other"), 29));
        assert!(!r.chooses(None, None, 30));
    }

    /// ingress-nginx "Session Affinity": `affinity-canary-behavior` is `sticky` unless
    /// `legacy`.
    #[test]
    fn affinity_canary_behavior_sticky_by_default() {
        assert!(!rule(&[]).legacy_affinity);
        assert!(!rule(&[("affinity-canary-behavior", "sticky")]).legacy_affinity);
        assert!(rule(&[("affinity-canary-behavior", "legacy")]).legacy_affinity);
        let values: BTreeMap<&str, &str> = [("affinity-canary-behavior", "Legacy")].into();
        let (rule, problems) = parse_rule(&values);
        assert!(!rule.legacy_affinity);
        assert_eq!(problems[0].0, "affinity-canary-behavior");
    }

    #[test]
    fn header_value_and_pattern() {
        let r = rule(&[
            ("canary-by-header", "x-region"),
            ("canary-by-header-value", "eu"),
            ("canary-by-header-pattern", "^us-.*"),
        ]);
        assert!(r.chooses(Some(b"eu"), None, 0));
        // With a value set, the pattern is not used, and `always` is just another value.
        assert!(!r.chooses(Some(b"us-east"), None, 0));
        assert!(!r.chooses(Some(b"always"), None, 0));
        let r = rule(&[
            ("canary-by-header", "x-region"),
            ("canary-by-header-pattern", "^us-.*"),
        ]);
        assert!(r.chooses(Some(b"us-east"), None, 0));
        assert!(!r.chooses(Some(b"eu"), None, 0));
    }

    #[test]
    fn weight_out_of_total() {
        let r = rule(&[("canary-weight", "1"), ("canary-weight-total", "1000")]);
        assert_eq!(
            (0..1000)
                .filter(|&roll| r.chooses(None, None, roll))
                .count(),
            1
        );
        let none = rule(&[]);
        assert!((0..100).all(|roll| !none.chooses(None, None, roll)));
    }

    #[test]
    fn invalid_values_are_problems() {
        let values: BTreeMap<&str, &str> = [
            ("canary-weight", "150"),
            ("canary-by-header", "bad header"),
            ("canary-by-header-pattern", "("),
        ]
        .into_iter()
        .collect();
        let (rule, problems) = parse_rule(&values);
        assert_eq!(rule.weight, 0);
        assert_eq!(problems.len(), 3, "{problems:?}");
    }
}

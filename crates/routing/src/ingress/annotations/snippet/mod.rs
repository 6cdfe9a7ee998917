//! `configuration-snippet` (and `server-snippet`), interpreted: the nginx directives people
//! put there (`more_set_headers`, `more_clear_headers`, `add_header`, `proxy_set_header`,
//! `more_set_input_headers`, `more_clear_input_headers`, `return`, `rewrite`, and `if`
//! around `return`/`rewrite`/response fields) become the same policy values the other
//! annotations produce, or request-time [`crate::SnippetRules`]. Nothing of the text is ever
//! configuration: each directive is read, checked and lowered, or refused with an Event
//! naming it and its line.
//!
//! Only with ingress-nginx's own switches in its ConfigMap: `allow-snippet-annotations:
//! "true"` and, as ingress-nginx >= 1.12 requires for these Critical-risk annotations,
//! `annotations-risk-level: Critical`. Otherwise every snippet is refused as before.
//!
//! A refused directive that restricts access (`deny`, `auth_*`, a `return 403` in an `if`
//! sluice cannot read, ...) closes the routes (`fail_closed.rs`); otherwise the rest of
//! the snippet applies.

mod lower;
mod parse;

use std::sync::Arc;

pub(crate) use lower::Level;

use super::fail_closed::restricting_directive;
use super::{Cx, Entry, SNIPPET_DETAIL};
use crate::diagnostic::Reason;
use crate::policy::Policy;

/// The ConfigMap settings that let snippets through, in the Event of a refused one.
pub(crate) const HOW_TO_ALLOW: &str = "to have sluice interpret its directives, set \
allow-snippet-annotations: \"true\" and annotations-risk-level: Critical in the ingress-nginx \
ConfigMap (as ingress-nginx >= 1.12 requires)";

/// What a snippet annotation came to, for `sluice migrate`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SnippetReport {
    /// `line N: directive` of each directive interpreted.
    pub interpreted: Vec<String>,
    /// `line N: directive: why` of each refused.
    pub refused: Vec<String>,
}

/// Reads `configuration-snippet` into `policy`. Returns the report for `sluice migrate`.
pub(super) fn configuration_snippet(cx: &mut Cx<'_>, policy: &mut Policy) -> Option<SnippetReport> {
    let entry = cx.take("configuration-snippet")?;
    let Read::Applied(lowered) = read(cx, entry, Level::Location) else {
        return None;
    };
    let report = report_of(&lowered);
    apply(*lowered, entry.value, policy);
    Some(report)
}

/// Reads `server-snippet`: its rules, for the compiler to give every route of the
/// Ingress's hosts (the oldest Ingress of a host that sets one decides, as ingress-nginx).
pub(super) fn server_snippet(cx: &mut Cx<'_>) -> Option<(Arc<Policy>, SnippetReport)> {
    let entry = cx.take("server-snippet")?;
    let lowered = match read(cx, entry, Level::Server) {
        Read::Applied(lowered) => lowered,
        // nginx would restrict the whole server: every route of the hosts closes, those
        // of other Ingresses too.
        Read::Closed => {
            let closed = Policy {
                fail_closed: true,
                ..Policy::default()
            };
            return Some((Arc::new(closed), SnippetReport::default()));
        }
        Read::Refused => return None,
    };
    let report = report_of(&lowered);
    let mut policy = Policy::default();
    apply(*lowered, entry.value, &mut policy);
    Some((Arc::new(policy), report))
}

/// What reading a snippet came to.
enum Read {
    /// Its directives, some perhaps refused (and reported).
    Applied(Box<lower::Lowered>),
    /// Refused in a way that restricts access: the routes are closed (and it is reported).
    Closed,
    /// Refused whole (and reported).
    Refused,
}

/// Parses and lowers a snippet, reporting what is refused.
fn read<'a>(cx: &mut Cx<'a>, entry: Entry<'a>, level: Level) -> Read {
    let directives = match parse::parse(entry.value) {
        Ok(directives) => directives,
        Err(why) => {
            let detail = format!("not valid nginx configuration: {why}; nothing of it applies");
            return refuse_all(cx, entry, detail, entry.value);
        }
    };
    let lowered = lower::lower(&directives, level);
    // A refused directive that restricts access closes the routes: applying the rest would
    // leave them more open than written.
    if let Some(restricting) = lowered
        .refused
        .iter()
        .find_map(|r| restricting_directive(&r.text).map(|d| (r, d)))
    {
        let (refused, directive) = restricting;
        let detail = format!(
            "line {} ({}) is not interpreted ({}) and restricts access ({directive:?})",
            refused.line, refused.name, refused.why
        );
        cx.fail_closed(entry, detail);
        return Read::Closed;
    }
    for refused in &lowered.refused {
        cx.report(
            entry,
            Reason::SnippetRefused,
            format!(
                "line {}: directive {} is not applied: {}; the rest of the snippet applies",
                refused.line, refused.name, refused.why
            ),
        );
    }
    if lowered.refused.is_empty() {
        cx.applied(entry);
    }
    Read::Applied(Box::new(lowered))
}

/// Refuses a whole snippet (fail closed when it restricts access).
fn refuse_all<'a>(cx: &mut Cx<'a>, entry: Entry<'a>, detail: String, text: &str) -> Read {
    match restricting_directive(text) {
        Some(directive) => {
            cx.fail_closed(
                entry,
                format!("{detail}, and it restricts access ({directive:?})"),
            );
            Read::Closed
        }
        None => {
            cx.report(entry, Reason::SnippetRefused, detail);
            Read::Refused
        }
    }
}

/// The detail of a snippet refused because the ConfigMap does not allow snippets.
pub(super) fn not_allowed_detail(name: &str) -> String {
    let hint = if name == "configuration-snippet" {
        " (to set request or response fields without snippets, use sluice.dev/request-headers \
         or sluice.dev/response-headers)"
    } else {
        ""
    };
    format!("{SNIPPET_DETAIL}{hint}; {HOW_TO_ALLOW}")
}

fn report_of(lowered: &lower::Lowered) -> SnippetReport {
    SnippetReport {
        interpreted: lowered.interpreted.clone(),
        refused: lowered
            .refused
            .iter()
            .map(|r| format!("line {}: {}: {}", r.line, r.name, r.why))
            .collect(),
    }
}

/// Puts what a snippet lowered to into `policy`.
fn apply(lowered: lower::Lowered, source: &str, policy: &mut Policy) {
    let lower::Lowered {
        request_set,
        request_remove,
        upstream_vhost,
        response_set,
        response_remove,
        response_add,
        mut rules,
        ..
    } = lowered;
    set_fields(&mut policy.request_headers, request_set);
    policy.request_headers_remove.extend(request_remove);
    if upstream_vhost.is_some() {
        policy.upstream_vhost = upstream_vhost;
    }
    set_fields(&mut policy.response_headers, response_set);
    policy.response_headers_remove.extend(response_remove);
    policy.response_headers_add.extend(response_add);
    let dynamic = !rules.steps.is_empty()
        || !rules.request_set.is_empty()
        || !rules.response_set.is_empty()
        || !rules.response_add.is_empty()
        || !rules.response_clear.is_empty();
    if dynamic {
        rules.source.push(source.to_owned());
        policy.snippet = Some(Arc::new(rules));
    }
}

/// Sets fields, a later one replacing an earlier one of the same name.
fn set_fields(
    fields: &mut Vec<(http::HeaderName, http::HeaderValue)>,
    new: Vec<(http::HeaderName, http::HeaderValue)>,
) {
    for (name, value) in new {
        fields.retain(|(n, _)| *n != name);
        fields.push((name, value));
    }
}

/// Merges a host's server snippet into a route's policy: its request-time rules run
/// before the route's own (nginx's server rewrite phase comes first), its fields apply
/// where the route sets none of the same name.
pub(crate) fn merge_server(route: &Policy, server: &Policy) -> Policy {
    let mut out = route.clone();
    out.fail_closed |= server.fail_closed;
    for (name, value) in &server.response_headers {
        if !out.response_headers.iter().any(|(n, _)| n == name) {
            out.response_headers
                .insert(0, (name.clone(), value.clone()));
        }
    }
    out.response_headers_remove
        .extend(server.response_headers_remove.iter().cloned());
    out.response_headers_add
        .extend(server.response_headers_add.iter().cloned());
    if let Some(server_rules) = &server.snippet {
        let mut rules = (**server_rules).clone();
        if let Some(own) = &route.snippet {
            rules.source.extend(own.source.iter().cloned());
            rules.steps.extend(own.steps.iter().cloned());
            rules.request_set.extend(own.request_set.iter().cloned());
            rules.response_set.extend(own.response_set.iter().cloned());
            rules.response_add.extend(own.response_add.iter().cloned());
            rules
                .response_clear
                .extend(own.response_clear.iter().cloned());
        }
        out.snippet = Some(Arc::new(rules));
    }
    out
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use k8s_openapi::api::core::v1::ConfigMap;

    use super::super::{NGINX_PREFIX, check_annotations, parse_with_snippets};
    use crate::ingress::config_map::read;

    fn config_map(data: &[(&str, &str)]) -> ConfigMap {
        ConfigMap {
            data: Some(
                data.iter()
                    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                    .collect(),
            ),
            ..Default::default()
        }
    }

    /// ingress-nginx >= 1.12: `allow-snippet-annotations: "true"` and
    /// `annotations-risk-level: Critical` (any case, `StringRiskToRisk`) both needed.
    #[test]
    fn the_configmap_switch_needs_both_keys() {
        for (data, allowed) in [
            (&[][..], false),
            (&[("allow-snippet-annotations", "true")][..], false),
            (&[("annotations-risk-level", "Critical")][..], false),
            (
                &[
                    ("allow-snippet-annotations", "true"),
                    ("annotations-risk-level", "critical"),
                ][..],
                true,
            ),
            (
                &[
                    ("allow-snippet-annotations", "false"),
                    ("annotations-risk-level", "Critical"),
                ][..],
                false,
            ),
            (
                &[
                    ("allow-snippet-annotations", "true"),
                    ("annotations-risk-level", "High"),
                ][..],
                false,
            ),
        ] {
            let (config, problems) = read(&config_map(data), None);
            assert!(problems.is_empty(), "{problems:?}");
            assert_eq!(config.snippets_allowed(), allowed, "{data:?}");
        }
        // A value that does not parse keeps the previous one, and is said.
        let both = [
            ("allow-snippet-annotations", "true"),
            ("annotations-risk-level", "Critical"),
        ];
        let (on, _) = read(&config_map(&both), None);
        let bad = [
            ("allow-snippet-annotations", "yes please"),
            ("annotations-risk-level", "Critical"),
        ];
        let (still, problems) = read(&config_map(&bad), Some(&on));
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(still.snippets_allowed());
    }

    #[test]
    fn a_snippet_is_applied_only_when_allowed() {
        let annotations = BTreeMap::from([(
            format!("{NGINX_PREFIX}configuration-snippet"),
            "more_set_headers 'X-A: 1';".to_owned(),
        )]);
        let off = parse_with_snippets(&annotations, false);
        assert!(off.policy.response_headers.is_empty());
        assert_eq!(off.problems.len(), 1);
        assert!(
            off.problems[0]
                .detail
                .contains("annotations-risk-level: Critical")
        );
        let on = parse_with_snippets(&annotations, true);
        assert_eq!(on.policy.response_headers.len(), 1);
        assert!(on.problems.is_empty(), "{:?}", on.problems);
        // The migration report says what would be interpreted.
        let report = check_annotations(&annotations);
        assert_eq!(report.snippets.len(), 1);
        assert_eq!(
            report.snippets[0].1.interpreted,
            ["line 1: more_set_headers"]
        );
    }
}

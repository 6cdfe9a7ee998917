//! One HTTPRoute rule: its matches, filters (as [`Policy`] fields) and timeouts, checked.
//!
//! What the API server's CEL rules would refuse on a newer cluster is refused here too
//! (v1.20 and other old servers do not run them): a problem makes the route
//! `Accepted=False` with reason `UnsupportedValue` and a message naming the field.

use std::time::Duration;

use http::{HeaderName, HeaderValue};

use super::types::{
    HttpHeaderFilter, HttpPathModifier, HttpRouteFilter, HttpRouteMatch, HttpRouteRule,
};
use crate::path::{PathKind, parse_rule_path};
use crate::policy::{PathRewrite, Policy};
use crate::rules::{PathCond, ValueMatch, ValueTest};

/// A match, checked: the path condition and the other conditions.
#[derive(Debug)]
pub(crate) struct MatchOut {
    pub path: PathCond,
    pub method: Option<String>,
    pub headers: Vec<(String, TestSpec)>,
    pub query: Vec<(String, TestSpec)>,
}

/// A value test before compilation (regexes are compiled once per table).
#[derive(Debug, Clone)]
pub(crate) enum TestSpec {
    Exact(String),
    Regex(String),
}

impl TestSpec {
    pub(crate) fn build(&self) -> Option<ValueTest> {
        Some(match self {
            TestSpec::Exact(v) => ValueTest::Exact(v.as_str().into()),
            TestSpec::Regex(p) => ValueTest::Regex(full_match(p)?),
        })
    }
}

/// A regex that must match the whole value (what Envoy-based implementations do).
pub(crate) fn full_match(pattern: &str) -> Option<regex::Regex> {
    regex::Regex::new(&format!("^(?:{pattern})$")).ok()
}

/// Builds the conditions of a match into matcher values.
pub(crate) fn build_conditions(list: &[(String, TestSpec)]) -> Box<[ValueMatch]> {
    list.iter()
        .filter_map(|(name, test)| {
            Some(ValueMatch {
                name: name.as_str().into(),
                test: test.build()?,
            })
        })
        .collect()
}

/// A path modifier before the matched prefix is known.
#[derive(Debug, Clone)]
pub(crate) enum PathModSpec {
    Full(String),
    Prefix(String),
}

impl PathModSpec {
    /// The modifier for a match whose path condition is `path`.
    pub(crate) fn for_match(&self, path: &PathCond) -> PathRewrite {
        match self {
            PathModSpec::Full(full) => PathRewrite::Full(full.clone()),
            PathModSpec::Prefix(replacement) => PathRewrite::Prefix {
                matched: match path {
                    PathCond::Prefix(key) => key.clone(),
                    // CEL allows ReplacePrefixMatch only with PathPrefix matches; anything
                    // else is refused in `checked_rule`, so this is never used.
                    PathCond::Exact(p) | PathCond::Regex(p) | PathCond::StringPrefix(p) => {
                        p.clone()
                    }
                },
                replacement: replacement.clone(),
            },
        }
    }
}

/// A redirect before the listener port and matched prefix are known.
#[derive(Debug, Clone)]
pub(crate) struct RedirectSpec {
    pub scheme: Option<String>,
    pub hostname: Option<String>,
    pub port: Option<u16>,
    pub path: Option<PathModSpec>,
    pub status: u16,
}

/// A mirror before its backend is resolved.
#[derive(Debug, Clone)]
pub(crate) struct MirrorSpec {
    pub filter: usize,
    pub numerator: u32,
    pub denominator: u32,
}

/// The header filters of one `backendRefs[]` entry: applied after the rule's to requests
/// sent to that backend (Gateway API `HTTPRouteBackendRequestHeaderModification`).
#[derive(Debug, Clone, Default)]
pub(crate) struct BackendEdits {
    /// `RequestHeaderModifier`: set, add, remove.
    pub request: Option<HeaderEdits>,
    /// `ResponseHeaderModifier`: set, add, remove.
    pub response: Option<HeaderEdits>,
}

/// One header modifier's set, add and remove lists.
pub(crate) type HeaderEdits = (Headers, Headers, Vec<HeaderName>);

impl BackendEdits {
    /// `policy` (the rule's) with these edits after its own.
    pub(crate) fn applied_to(&self, policy: &Policy) -> Policy {
        let mut out = policy.clone();
        if let Some(edits) = &self.request {
            merge(
                edits,
                &mut out.request_headers,
                &mut out.request_headers_add,
                &mut out.request_headers_remove,
            );
        }
        if let Some(edits) = &self.response {
            merge(
                edits,
                &mut out.response_headers,
                &mut out.response_headers_add,
                &mut out.response_headers_remove,
            );
        }
        out
    }
}

/// A later modifier over an earlier one: what it sets or removes replaces the earlier's
/// set and added values of that name; what it adds comes after.
fn merge(
    (set, add, remove): &HeaderEdits,
    to_set: &mut Headers,
    to_add: &mut Headers,
    to_remove: &mut Vec<HeaderName>,
) {
    let replaced = |name: &HeaderName| set.iter().any(|(n, _)| n == name) || remove.contains(name);
    to_set.retain(|(name, _)| !replaced(name));
    to_add.retain(|(name, _)| !replaced(name));
    to_set.extend(set.iter().cloned());
    to_add.extend(add.iter().cloned());
    for name in remove {
        if !to_remove.contains(name) {
            to_remove.push(name.clone());
        }
    }
}

/// A rule, checked.
#[derive(Debug)]
pub(crate) struct RuleOut {
    pub matches: Vec<MatchOut>,
    /// Header modifiers, URL rewrite host name, timeouts.
    pub policy: Policy,
    pub redirect: Option<RedirectSpec>,
    pub rewrite_path: Option<PathModSpec>,
    pub mirrors: Vec<MirrorSpec>,
    /// Per `backendRefs[]` entry, in order: its own header filters, if any.
    pub backend_edits: Vec<Option<BackendEdits>>,
}

/// Checks rule `index` of a route. `Err`: a sentence naming the field.
pub(crate) fn checked_rule(index: usize, rule: &HttpRouteRule) -> Result<RuleOut, String> {
    let field = format!("spec.rules[{index}]");
    let default_match = [HttpRouteMatch::default()];
    let matches: &[HttpRouteMatch] = if rule.matches.is_empty() {
        &default_match
    } else {
        &rule.matches
    };
    let matches = matches
        .iter()
        .enumerate()
        .map(|(m, matched)| checked_match(&format!("{field}.matches[{m}]"), matched))
        .collect::<Result<Vec<_>, _>>()?;
    let mut out = RuleOut {
        matches,
        policy: Policy::default(),
        redirect: None,
        rewrite_path: None,
        mirrors: Vec::new(),
        backend_edits: Vec::new(),
    };
    let mut seen: Vec<&str> = Vec::new();
    for (f, filter) in rule.filters.iter().enumerate() {
        let at = format!("{field}.filters[{f}]");
        if filter.type_ != "RequestMirror" {
            if seen.contains(&filter.type_.as_str()) {
                return Err(format!("{at}: filter {} is given twice", filter.type_));
            }
            seen.push(&filter.type_);
        }
        apply_filter(&at, f, filter, &mut out)?;
    }
    if out.redirect.is_some() && (out.rewrite_path.is_some() || out.policy.upstream_vhost.is_some())
    {
        return Err(format!(
            "{field}.filters: RequestRedirect and URLRewrite cannot be used together"
        ));
    }
    let prefix_modifier = matches!(out.rewrite_path, Some(PathModSpec::Prefix(_)))
        || matches!(
            out.redirect.as_ref().and_then(|r| r.path.as_ref()),
            Some(PathModSpec::Prefix(_))
        );
    if prefix_modifier
        && out
            .matches
            .iter()
            .any(|m| !matches!(m.path, PathCond::Prefix(_)))
    {
        return Err(format!(
            "{field}: ReplacePrefixMatch needs every match of the rule to be of type PathPrefix"
        ));
    }
    if let Some(timeouts) = &rule.timeouts {
        out.policy.request_timeout = timeouts
            .request
            .as_deref()
            .map(|d| {
                duration(d).ok_or_else(|| {
                    format!("{field}.timeouts.request: {d:?} is not a Gateway API duration")
                })
            })
            .transpose()?
            .flatten();
        out.policy.backend_request_timeout = timeouts
            .backend_request
            .as_deref()
            .map(|d| {
                duration(d).ok_or_else(|| {
                    format!("{field}.timeouts.backendRequest: {d:?} is not a Gateway API duration")
                })
            })
            .transpose()?
            .flatten();
        if let (Some(request), Some(backend)) = (
            out.policy.request_timeout,
            out.policy.backend_request_timeout,
        ) && backend > request
        {
            return Err(format!(
                "{field}.timeouts: backendRequest must not be longer than request"
            ));
        }
    }
    if let Some(retry) = &rule.retry {
        out.policy.next_upstream = super::retry::retry(&format!("{field}.retry"), retry)?;
    }
    for (b, backend) in rule.backend_refs.iter().enumerate() {
        let edits = backend_edits(&format!("{field}.backendRefs[{b}]"), &backend.filters)?;
        out.backend_edits.push(edits);
    }
    Ok(out)
}

/// The filters of one `backendRefs[]` entry (at `at`): header modifiers, each at most once.
fn backend_edits(at: &str, filters: &[HttpRouteFilter]) -> Result<Option<BackendEdits>, String> {
    if filters.is_empty() {
        return Ok(None);
    }
    let mut edits = BackendEdits::default();
    for (f, filter) in filters.iter().enumerate() {
        let at = format!("{at}.filters[{f}]");
        let (slot, modifier, field) = match filter.type_.as_str() {
            "RequestHeaderModifier" => (
                &mut edits.request,
                &filter.request_header_modifier,
                "requestHeaderModifier",
            ),
            "ResponseHeaderModifier" => (
                &mut edits.response,
                &filter.response_header_modifier,
                "responseHeaderModifier",
            ),
            other => {
                return Err(format!(
                    "{at}.type: filter {other:?} is not supported on a backendRef (supported \
                     there: RequestHeaderModifier, ResponseHeaderModifier); put it on the rule"
                ));
            }
        };
        if slot.is_some() {
            return Err(format!("{at}: filter {} is given twice", filter.type_));
        }
        let modifier = modifier
            .as_ref()
            .ok_or_else(|| format!("{at}: type {} needs field {field}", filter.type_))?;
        *slot = Some(header_modifier(&format!("{at}.{field}"), modifier)?);
    }
    Ok(Some(edits))
}

fn checked_match(field: &str, matched: &HttpRouteMatch) -> Result<MatchOut, String> {
    let path = match &matched.path {
        None => PathCond::Prefix(String::new()),
        Some(p) => {
            let value = p.value.as_deref().unwrap_or("/");
            match p.type_.as_deref().unwrap_or("PathPrefix") {
                "Exact" | "PathPrefix" => {
                    let ty = if p.type_.as_deref() == Some("Exact") {
                        "Exact"
                    } else {
                        "Prefix"
                    };
                    let rule = parse_rule_path(Some(value), ty)
                        .map_err(|e| format!("{field}.path.value: {e}"))?;
                    match rule.kind {
                        PathKind::Exact => PathCond::Exact(rule.key),
                        _ => PathCond::Prefix(rule.key),
                    }
                }
                "RegularExpression" => {
                    full_match(value).ok_or_else(|| {
                        format!("{field}.path.value: {value:?} is not a valid regular expression")
                    })?;
                    PathCond::Regex(value.to_owned())
                }
                other => {
                    return Err(format!(
                        "{field}.path.type: {other:?} is not Exact, PathPrefix or RegularExpression"
                    ));
                }
            }
        }
    };
    let method = match matched.method.as_deref() {
        None => None,
        Some(m) if !m.is_empty() && m.bytes().all(|b| b.is_ascii_uppercase()) => Some(m.to_owned()),
        Some(m) => return Err(format!("{field}.method: {m:?} is not an HTTP method")),
    };
    let headers = conditions(&format!("{field}.headers"), &matched.headers, true)?;
    let query = conditions(
        &format!("{field}.queryParams"),
        &matched.query_params,
        false,
    )?;
    Ok(MatchOut {
        path,
        method,
        headers,
        query,
    })
}

/// Header (names folded to lower case) or query parameter conditions. Only the first
/// condition of a name counts, as the spec says.
fn conditions(
    field: &str,
    list: &[super::types::HttpHeaderMatch],
    header: bool,
) -> Result<Vec<(String, TestSpec)>, String> {
    let mut out: Vec<(String, TestSpec)> = Vec::new();
    for (i, c) in list.iter().enumerate() {
        let name = if header {
            if HeaderName::from_bytes(c.name.as_bytes()).is_err() {
                return Err(format!(
                    "{field}[{i}].name: {:?} is not a header name",
                    c.name
                ));
            }
            c.name.to_ascii_lowercase()
        } else {
            c.name.clone()
        };
        if name.is_empty() {
            return Err(format!("{field}[{i}].name is empty"));
        }
        let test = match c.type_.as_deref().unwrap_or("Exact") {
            "Exact" => TestSpec::Exact(c.value.clone()),
            "RegularExpression" => {
                full_match(&c.value).ok_or_else(|| {
                    format!(
                        "{field}[{i}].value: {:?} is not a valid regular expression",
                        c.value
                    )
                })?;
                TestSpec::Regex(c.value.clone())
            }
            other => {
                return Err(format!(
                    "{field}[{i}].type: {other:?} is not Exact or RegularExpression"
                ));
            }
        };
        if !out.iter().any(|(n, _)| *n == name) {
            out.push((name, test));
        }
    }
    Ok(out)
}

fn apply_filter(
    at: &str,
    index: usize,
    filter: &HttpRouteFilter,
    out: &mut RuleOut,
) -> Result<(), String> {
    let missing = |what: &str| format!("{at}: type {} needs field {what}", filter.type_);
    match filter.type_.as_str() {
        "RequestHeaderModifier" => {
            let m = filter
                .request_header_modifier
                .as_ref()
                .ok_or_else(|| missing("requestHeaderModifier"))?;
            let (set, add, remove) = header_modifier(&format!("{at}.requestHeaderModifier"), m)?;
            out.policy.request_headers = set;
            out.policy.request_headers_add = add;
            out.policy.request_headers_remove = remove;
        }
        "ResponseHeaderModifier" => {
            let m = filter
                .response_header_modifier
                .as_ref()
                .ok_or_else(|| missing("responseHeaderModifier"))?;
            let (set, add, remove) = header_modifier(&format!("{at}.responseHeaderModifier"), m)?;
            out.policy.response_headers = set;
            out.policy.response_headers_add = add;
            out.policy.response_headers_remove = remove;
        }
        "RequestRedirect" => {
            let r = filter
                .request_redirect
                .as_ref()
                .ok_or_else(|| missing("requestRedirect"))?;
            let at = format!("{at}.requestRedirect");
            let scheme = match r.scheme.as_deref() {
                None => None,
                Some(s @ ("http" | "https")) => Some(s.to_owned()),
                Some(other) => return Err(format!("{at}.scheme: {other:?} is not http or https")),
            };
            let hostname = match r.hostname.as_deref() {
                None => None,
                Some(h) => match super::hostname::parse(Some(h)) {
                    Ok(crate::host::HostPattern::Exact(h)) => Some(h),
                    _ => return Err(format!("{at}.hostname: {h:?} is not a DNS name")),
                },
            };
            let port = match r.port {
                None => None,
                Some(p) => Some(
                    u16::try_from(p)
                        .ok()
                        .filter(|p| *p > 0)
                        .ok_or_else(|| format!("{at}.port: {p} is not a port"))?,
                ),
            };
            let status = match r.status_code.unwrap_or(302) {
                s @ (301 | 302 | 303 | 307 | 308) => s as u16,
                other => {
                    return Err(format!(
                        "{at}.statusCode: {other} is not 301, 302, 303, 307 or 308"
                    ));
                }
            };
            let path = r
                .path
                .as_ref()
                .map(|p| path_modifier(&format!("{at}.path"), p))
                .transpose()?;
            out.redirect = Some(RedirectSpec {
                scheme,
                hostname,
                port,
                path,
                status,
            });
        }
        "URLRewrite" => {
            let r = filter
                .url_rewrite
                .as_ref()
                .ok_or_else(|| missing("urlRewrite"))?;
            let at = format!("{at}.urlRewrite");
            if let Some(h) = &r.hostname {
                match super::hostname::parse(Some(h)) {
                    Ok(crate::host::HostPattern::Exact(h)) => {
                        out.policy.upstream_vhost = Some(
                            HeaderValue::from_str(&h)
                                .map_err(|_| format!("{at}.hostname: {h:?} is not a host name"))?,
                        );
                    }
                    _ => return Err(format!("{at}.hostname: {h:?} is not a DNS name")),
                }
            }
            if let Some(p) = &r.path {
                out.rewrite_path = Some(path_modifier(&format!("{at}.path"), p)?);
            }
        }
        "RequestMirror" => {
            let m = filter
                .request_mirror
                .as_ref()
                .ok_or_else(|| missing("requestMirror"))?;
            let at = format!("{at}.requestMirror");
            let (numerator, denominator) = match (m.percent, &m.fraction) {
                (Some(_), Some(_)) => {
                    return Err(format!("{at}: percent and fraction are mutually exclusive"));
                }
                (Some(p), None) if (0..=100).contains(&p) => (p as u32, 100),
                (Some(p), None) => return Err(format!("{at}.percent: {p} is not 0-100")),
                (None, Some(f)) => {
                    let d = f.denominator.unwrap_or(100);
                    if d <= 0 || f.numerator < 0 || f.numerator > d {
                        return Err(format!(
                            "{at}.fraction: {}/{d} is not a fraction between 0 and 1",
                            f.numerator
                        ));
                    }
                    (f.numerator as u32, d as u32)
                }
                (None, None) => (1, 1),
            };
            out.mirrors.push(MirrorSpec {
                filter: index,
                numerator,
                denominator,
            });
            // A copy of the request carries its body (read whole first, within the body
            // limit, as nginx's `mirror_request_body on`); without it, requests with a
            // body were not mirrored at all. GRPCRoutes stay bodiless (a streaming call
            // cannot be read whole first): see the GRPCRoute compiler.
            out.policy.mirror_request_body = true;
        }
        "CORS" => {
            let c = filter.cors.as_ref().ok_or_else(|| missing("cors"))?;
            out.policy.cors = Some(super::cors::cors(&format!("{at}.cors"), c)?);
        }
        other => {
            return Err(format!(
                "{at}.type: filter {other:?} is not supported (supported: RequestHeaderModifier, \
                 ResponseHeaderModifier, RequestRedirect, URLRewrite, RequestMirror, CORS)"
            ));
        }
    }
    Ok(())
}

type Headers = Vec<(HeaderName, HeaderValue)>;

fn header_modifier(
    at: &str,
    m: &HttpHeaderFilter,
) -> Result<(Headers, Headers, Vec<HeaderName>), String> {
    let pairs = |list: &[super::types::HttpHeader], field: &str| {
        list.iter()
            .enumerate()
            .map(|(i, h)| {
                let name = HeaderName::from_bytes(h.name.as_bytes()).map_err(|_| {
                    format!("{at}.{field}[{i}].name: {:?} is not a header name", h.name)
                })?;
                let value = HeaderValue::from_str(&h.value).map_err(|_| {
                    format!(
                        "{at}.{field}[{i}].value: {:?} is not a header value",
                        h.value
                    )
                })?;
                Ok((name, value))
            })
            .collect::<Result<Vec<_>, String>>()
    };
    let set = pairs(&m.set, "set")?;
    let add = pairs(&m.add, "add")?;
    let remove = m
        .remove
        .iter()
        .enumerate()
        .map(|(i, n)| {
            HeaderName::from_bytes(n.as_bytes())
                .map_err(|_| format!("{at}.remove[{i}]: {n:?} is not a header name"))
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok((set, add, remove))
}

fn path_modifier(at: &str, p: &HttpPathModifier) -> Result<PathModSpec, String> {
    let check = |value: &str, field: &str| {
        if value.starts_with('/') {
            Ok(value.to_owned())
        } else {
            Err(format!("{at}.{field}: {value:?} does not start with '/'"))
        }
    };
    match p.type_.as_str() {
        "ReplaceFullPath" => Ok(PathModSpec::Full(check(
            p.replace_full_path.as_deref().unwrap_or("/"),
            "replaceFullPath",
        )?)),
        "ReplacePrefixMatch" => Ok(PathModSpec::Prefix(check(
            p.replace_prefix_match.as_deref().unwrap_or("/"),
            "replacePrefixMatch",
        )?)),
        other => Err(format!(
            "{at}.type: {other:?} is not ReplaceFullPath or ReplacePrefixMatch"
        )),
    }
}

/// A Gateway API duration (`1h`, `500ms`, `1m30s`: up to four number+unit parts of h, m,
/// s, ms). `Some(None)`: zero, meaning no timeout. `None`: not a duration.
pub(crate) fn duration(text: &str) -> Option<Option<Duration>> {
    let mut total = Duration::ZERO;
    let mut rest = text;
    let mut parts = 0;
    while !rest.is_empty() {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 || digits > 5 {
            return None;
        }
        let n: u64 = rest[..digits].parse().ok()?;
        rest = &rest[digits..];
        let (unit, len) = if rest.starts_with("ms") {
            (Duration::from_millis(1), 2)
        } else if rest.starts_with('h') {
            (Duration::from_secs(3600), 1)
        } else if rest.starts_with('m') {
            (Duration::from_secs(60), 1)
        } else if rest.starts_with('s') {
            (Duration::from_secs(1), 1)
        } else {
            return None;
        };
        rest = &rest[len..];
        total += unit * u32::try_from(n).ok()?;
        parts += 1;
    }
    if parts == 0 || parts > 4 {
        return None;
    }
    Some((!total.is_zero()).then_some(total))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gateway_api_durations() {
        assert_eq!(duration("1h"), Some(Some(Duration::from_secs(3600))));
        assert_eq!(duration("1m30s"), Some(Some(Duration::from_secs(90))));
        assert_eq!(duration("500ms"), Some(Some(Duration::from_millis(500))));
        assert_eq!(duration("0s"), Some(None));
        assert_eq!(duration(""), None);
        assert_eq!(duration("1.5s"), None);
        assert_eq!(duration("10"), None);
        assert_eq!(duration("1h1m1s1ms1s"), None);
        assert_eq!(duration("123456s"), None);
    }

    fn rule(v: serde_json::Value) -> HttpRouteRule {
        serde_json::from_value(v).expect("rule")
    }

    #[test]
    fn matches_default_to_path_prefix_slash() {
        let out = checked_rule(0, &rule(serde_json::json!({}))).expect("ok");
        assert_eq!(out.matches.len(), 1);
        assert_eq!(out.matches[0].path, PathCond::Prefix(String::new()));
        let out = checked_rule(
            0,
            &rule(
                serde_json::json!({"matches": [{"path": {"type": "PathPrefix", "value": "/foo/"}},
                {"path": {"type": "Exact", "value": "/x"}, "method": "POST",
                 "headers": [{"name": "X-A", "value": "1"}, {"name": "x-a", "value": "2"}]}]}),
            ),
        )
        .expect("ok");
        assert_eq!(out.matches[0].path, PathCond::Prefix("/foo".into()));
        assert_eq!(out.matches[1].path, PathCond::Exact("/x".into()));
        assert_eq!(out.matches[1].method.as_deref(), Some("POST"));
        // Only the first condition of a header name counts.
        assert_eq!(out.matches[1].headers.len(), 1);
        assert_eq!(out.matches[1].headers[0].0, "x-a");
    }

    /// Gateway API: a backendRef's filters run after the rule's, on requests sent to that
    /// backend (conformance test HTTPRouteRequestHeaderModifierBackendWeights).
    #[test]
    fn backend_filters_come_after_the_rule_filters() {
        let out = checked_rule(
            0,
            &rule(serde_json::json!({
                "filters": [{"type": "RequestHeaderModifier", "requestHeaderModifier": {
                    "set": [{"name": "X-Rule", "value": "r"}, {"name": "X-Both", "value": "rule"}],
                    "add": [{"name": "X-Gone", "value": "a"}]}}],
                "backendRefs": [
                    {"name": "a", "port": 80, "filters": [
                        {"type": "RequestHeaderModifier", "requestHeaderModifier": {
                            "set": [{"name": "X-Both", "value": "backend"}],
                            "add": [{"name": "X-Added", "value": "b"}],
                            "remove": ["X-Gone"]}},
                        {"type": "ResponseHeaderModifier", "responseHeaderModifier": {
                            "set": [{"name": "X-Out", "value": "o"}]}}]},
                    {"name": "b", "port": 80}]
            })),
        )
        .unwrap();
        assert!(out.backend_edits[1].is_none());
        let policy = out.backend_edits[0]
            .as_ref()
            .unwrap()
            .applied_to(&out.policy);
        let pairs = |list: &[(HeaderName, HeaderValue)]| {
            list.iter()
                .map(|(n, v)| format!("{n}={}", v.to_str().unwrap()))
                .collect::<Vec<_>>()
        };
        assert_eq!(
            pairs(&policy.request_headers),
            ["x-rule=r", "x-both=backend"]
        );
        assert_eq!(pairs(&policy.request_headers_add), ["x-added=b"]);
        assert_eq!(policy.request_headers_remove, ["x-gone"]);
        assert_eq!(pairs(&policy.response_headers), ["x-out=o"]);
        // The rule's own policy is untouched.
        assert_eq!(
            pairs(&out.policy.request_headers),
            ["x-rule=r", "x-both=rule"]
        );
    }

    #[test]
    fn what_cel_would_refuse_is_refused_with_the_field() {
        let cases = [
            (
                serde_json::json!({"filters": [{"type": "ExtensionRef"}]}),
                "spec.rules[0].filters[0].type",
            ),
            (
                serde_json::json!({"filters": [{"type": "RequestRedirect"}]}),
                "needs field requestRedirect",
            ),
            (
                serde_json::json!({"filters": [{"type": "RequestRedirect", "requestRedirect": {"scheme": "ftp"}}]}),
                "scheme",
            ),
            (
                serde_json::json!({"filters": [{"type": "RequestRedirect", "requestRedirect": {}},
                                            {"type": "URLRewrite", "urlRewrite": {"hostname": "a.b"}}]}),
                "cannot be used together",
            ),
            (
                serde_json::json!({"matches": [{"path": {"type": "Exact", "value": "/a"}}],
                                "filters": [{"type": "URLRewrite", "urlRewrite": {"path": {"type": "ReplacePrefixMatch", "replacePrefixMatch": "/b"}}}]}),
                "ReplacePrefixMatch needs",
            ),
            (
                serde_json::json!({"matches": [{"path": {"type": "PathPrefix", "value": "a"}}]}),
                "matches[0].path.value",
            ),
            (
                serde_json::json!({"matches": [{"path": {"type": "RegularExpression", "value": "(["}}]}),
                "not a valid regular expression",
            ),
            (
                serde_json::json!({"timeouts": {"request": "1s", "backendRequest": "2s"}}),
                "backendRequest must not be longer",
            ),
            (
                serde_json::json!({"timeouts": {"request": "soon"}}),
                "timeouts.request",
            ),
            (
                serde_json::json!({"backendRefs": [{"name": "a", "port": 80, "filters": [{"type": "RequestHeaderModifier"}]}]}),
                "spec.rules[0].backendRefs[0].filters[0]: type RequestHeaderModifier needs field",
            ),
            (
                serde_json::json!({"backendRefs": [{"name": "a", "port": 80, "filters": [{"type": "RequestMirror"}]}]}),
                "spec.rules[0].backendRefs[0].filters[0].type",
            ),
            (
                serde_json::json!({"filters": [{"type": "RequestMirror", "requestMirror": {"backendRef": {"name": "m", "port": 80}, "percent": 101}}]}),
                "percent",
            ),
        ];
        for (value, expected) in cases {
            let err = checked_rule(0, &rule(value.clone())).expect_err(&value.to_string());
            assert!(err.contains(expected), "{value}: {err}");
        }
    }
}

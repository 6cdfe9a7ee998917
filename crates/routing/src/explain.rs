//! `sluice explain`: which Ingress rule a request matches, and why every other rule does not.
//!
//! The answer comes from the compiled table ([`RouteTable::matched`]), so it is what the proxy
//! does, not a second implementation of the matching rules. The reasons for the rules that
//! lose are worked out per rule from the same parts the compiler uses (class selection, host
//! patterns, path kinds), in the order the crate docs give: class, host, which host owns the
//! request (no fallthrough), path, then precedence among the matches.

use std::fmt;
use std::net::SocketAddr;
use std::sync::Arc;

use k8s_openapi::api::networking::v1::Ingress;

pub use crate::explain_check::Check;
use crate::host::{HostPattern, normalize_request_host, parse_rule_host, wildcard_suffix};
use crate::ingress::class::ClassSelector;
use crate::ingress::compile::compile;
use crate::path::{PathKind, parse_rule_path, path_regex};
use crate::refs::{ObjectRef, ServiceRef};
use crate::rules::prefix_matches;
use crate::table::{Route, RouteTable};
use crate::{CompileOptions, Diagnostic, Inputs};

/// The answer to "where does this request go, and why?".
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Explanation {
    /// The request host as matched (lowercase, no port, no trailing dot).
    pub host: String,
    /// The request path as matched.
    pub path: String,
    /// Where the request goes.
    pub answer: Answer,
    /// Every rule path of every Ingress, with why it was or was not used; Ingresses that are
    /// not ours appear once, with the class reason. Sorted by Ingress, then field.
    pub checks: Vec<Check>,
    /// Problems the compiler reported on the Ingress that answers (from its Events).
    pub problems: Vec<Diagnostic>,
}

/// Where a request goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// A rule matched.
    Route {
        /// The Ingress whose rule it is.
        ingress: ObjectRef,
        /// The rule as the table lists it.
        route: Route,
        /// The backend and its endpoints.
        backend: BackendView,
        /// What the route's policy changes ([`crate::Policy::summary`]).
        policy: Vec<String>,
        /// A canary Ingress that takes part of these requests, and its backend.
        canary: Option<Box<(ObjectRef, BackendView)>>,
    },
    /// No rule matched; a default backend answers.
    DefaultBackend {
        /// The Ingress whose `spec.defaultBackend` it is (or the Service of
        /// `--default-backend-service`).
        source: ObjectRef,
        /// The backend and its endpoints.
        backend: BackendView,
    },
    /// No rule matched and there is no default backend: the proxy answers 404.
    NotFound,
}

/// A backend as explained: the Service port and its endpoints.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackendView {
    /// The Service port.
    pub service: ServiceRef,
    /// Ready endpoints (what requests go to).
    pub ready: Vec<SocketAddr>,
    /// Endpoints listed as not ready.
    pub not_ready: usize,
    /// A Gateway API `backendRef` that cannot be used (unknown Service or kind, not
    /// permitted across namespaces): requests drawn for it get 500.
    pub invalid: bool,
}

/// The request `sluice explain` asks about: a plain-HTTP `GET` of a host and path, or
/// more (`-X`, `-H`, a query, `https://`), for the rules that match on them (Gateway API
/// method, header and query matches, the HTTPS listeners).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ExplainRequest {
    /// Host, as a client sends it (any case, may carry a port).
    pub host: String,
    /// Path, without query.
    pub path: String,
    /// Query, without `?` (empty for none).
    pub query: String,
    /// Method; empty means `GET`.
    pub method: String,
    /// Arrives over HTTPS.
    pub https: bool,
    /// Header fields (name, value), in order.
    pub headers: Vec<(String, String)>,
}

impl ExplainRequest {
    /// A plain-HTTP `GET` of `host` and `path`.
    pub fn get(host: &str, path: &str) -> ExplainRequest {
        ExplainRequest {
            host: host.to_owned(),
            path: path.to_owned(),
            ..ExplainRequest::default()
        }
    }
}

impl crate::request::HeaderLookup for ExplainRequest {
    fn header(&self, name: &str) -> Option<&[u8]> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_bytes())
    }
}

/// Explains where a plain-HTTP `GET` for `host` and `path` goes with these inputs (see
/// [`explain_request`]).
pub fn explain(inputs: &Inputs, options: &CompileOptions, host: &str, path: &str) -> Explanation {
    explain_request(inputs, options, &ExplainRequest::get(host, path))
}

/// Explains where `request` goes with these inputs. Pure: compiles `inputs` itself (a few
/// milliseconds for thousands of Ingresses).
pub fn explain_request(
    inputs: &Inputs,
    options: &CompileOptions,
    request: &ExplainRequest,
) -> Explanation {
    let (host, path) = (request.host.as_str(), request.path.as_str());
    let compiled = compile(inputs, options);
    let table = &compiled.table;
    let host = normalize_request_host(host).into_owned();
    let path = if path.is_empty() { "/" } else { path };
    // Matched as the proxy matches it: normalised as nginx does (a path the proxy refuses
    // with 400 is explained as written).
    let path = crate::normalize_request_path(path)
        .map_or_else(|_| path.to_owned(), std::borrow::Cow::into_owned);
    let matched = table.matched(&host, &path);
    let found = table.route_request(&request_info(&host, &path, request));
    let answer = answer(table, &host, &path, request, matched.as_ref());
    let classes = ClassSelector::new(inputs.ingress_classes.iter().map(|c| &**c), options);
    let mut ingresses: Vec<&Ingress> = inputs.ingresses.iter().map(|i| &**i).collect();
    ingresses.sort_by_key(|i| object_of(i));
    let owner = owner(table, &host);
    // Hosts whose paths are regular expressions (use-regex / rewrite-target), as listed.
    let regex_hosts: Vec<String> = table
        .routes()
        .into_iter()
        .filter(|r| r.path_type == "Regex")
        .map(|r| r.host)
        .collect();
    let mut checks = Vec::new();
    for ingress in ingresses {
        let object = object_of(ingress);
        if let Some(watched) = &options.watch_namespace
            && object.namespace != *watched
        {
            checks.push(Check {
                ingress: object,
                field: "metadata.namespace".into(),
                rule: String::new(),
                selected: false,
                reason: format!("namespace not watched (--watch-namespace={watched})"),
            });
            continue;
        }
        if let Some(reason) = classes.why_not(ingress) {
            checks.push(Check {
                ingress: object,
                field: "spec.ingressClassName".into(),
                rule: String::new(),
                selected: false,
                reason,
            });
            continue;
        }
        let rules = ingress.spec.as_ref().and_then(|s| s.rules.as_deref());
        for (r, rule) in rules.unwrap_or_default().iter().enumerate() {
            let paths = rule.http.as_ref().map(|h| h.paths.as_slice());
            for (p, rule_path) in paths.unwrap_or_default().iter().enumerate() {
                let verdict = verdict(
                    &object,
                    rule.host.as_deref(),
                    rule_path.path.as_deref(),
                    &rule_path.path_type,
                    &host,
                    &path,
                    &owner,
                    matched.as_ref(),
                    table,
                    &regex_hosts,
                );
                checks.push(Check {
                    ingress: object.clone(),
                    field: format!("spec.rules[{r}].http.paths[{p}]"),
                    rule: format!(
                        "{} {} {}",
                        rule.host
                            .as_deref()
                            .filter(|h| !h.is_empty())
                            .unwrap_or("*"),
                        rule_path.path_type,
                        rule_path.path.as_deref().unwrap_or("/"),
                    ),
                    selected: verdict.0,
                    reason: verdict.1,
                });
            }
        }
    }
    checks.extend(crate::explain_routes::route_checks(
        inputs,
        &compiled.gateway,
        table,
        found,
        &host,
    ));
    let answering = match &answer {
        Answer::Route { ingress, .. } => Some(ingress.clone()),
        Answer::DefaultBackend { source, .. } => Some(source.clone()),
        Answer::NotFound => None,
    };
    let problems = compiled
        .diagnostics
        .into_iter()
        .filter(|d| Some(&d.object) == answering.as_ref())
        .collect();
    Explanation {
        host,
        path,
        answer,
        checks,
        problems,
    }
}

fn object_of(ingress: &Ingress) -> ObjectRef {
    ObjectRef::ingress(
        ingress.metadata.namespace.as_deref().unwrap_or(""),
        ingress.metadata.name.as_deref().unwrap_or(""),
    )
}

fn view(backend: &crate::Backend) -> BackendView {
    BackendView {
        service: backend.service.clone(),
        ready: backend.endpoints.clone(),
        not_ready: backend.not_ready,
        invalid: false,
    }
}

/// An Ingress rule's policy in words, its `rewrite-target` included (kept beside the
/// policy in the entry).
fn ingress_policy(entry: &crate::RouteEntry) -> Vec<String> {
    let mut policy = entry.policy.summary();
    if let Some(rewrite) = &entry.rewrite {
        policy.push(format!(
            "path sent upstream rewritten to {}",
            rewrite.target
        ));
    }
    policy
}

/// The request as the table looks it up (on the shared listeners).
fn request_info<'a>(
    host: &'a str,
    path: &'a str,
    asked: &'a ExplainRequest,
) -> crate::request::RequestInfo<'a> {
    crate::request::RequestInfo {
        listener: None,
        https: asked.https,
        host,
        path,
        query: &asked.query,
        method: if asked.method.is_empty() {
            "GET"
        } else {
            &asked.method
        },
        headers: asked,
    }
}

fn answer(
    table: &RouteTable,
    host: &str,
    path: &str,
    asked: &ExplainRequest,
    matched: Option<&(Route, usize)>,
) -> Answer {
    // Gateway API routes first, as the proxy looks them up, with the request's method,
    // header fields, query and scheme.
    let Some(found) = table.route_request(&request_info(host, path, asked)) else {
        return Answer::NotFound;
    };
    let entry = table.entry(found);
    if matches!(entry.source.kind, "HTTPRoute" | "GRPCRoute") {
        let route = table
            .routes_with_entries()
            .into_iter()
            .find(|(_, id)| *id == found)
            .map(|(route, _)| route);
        if let Some(route) = route {
            let mut policy = entry.policy.summary();
            if !entry.split.is_empty() {
                let shares: Vec<String> = entry
                    .split
                    .iter()
                    .map(|b| {
                        let usable = if b.usable { "" } else { " (invalid: 500)" };
                        format!("{} weight {}{usable}", b.backend.service, b.weight)
                    })
                    .collect();
                policy.push(format!("backends by weight: {}", shares.join(", ")));
            }
            if let Some(status) = entry.fixed_status
                && entry.policy.request_redirect.is_none()
            {
                policy.push(format!("answers {status} itself (no usable backendRefs)"));
            }
            // Requests drawn for an invalid reference get 500, not the 503 of a Service
            // without endpoints.
            let mut backend = view(&entry.backend);
            backend.invalid = entry
                .split
                .iter()
                .any(|b| Arc::ptr_eq(&b.backend, &entry.backend) && !b.usable);
            return Answer::Route {
                ingress: entry.source.clone(),
                route,
                backend,
                policy,
                canary: None,
            };
        }
    }
    if let Some((route, id)) = matched {
        let entry = table.entry(*id);
        return Answer::Route {
            ingress: entry.source.clone(),
            route: route.clone(),
            backend: view(&entry.backend),
            policy: ingress_policy(entry),
            canary: entry
                .canary
                .as_ref()
                .map(|c| Box::new((c.source.clone(), view(&c.backend)))),
        };
    }
    match table.route_id(host, path) {
        Some(id) => {
            let entry = table.entry(id);
            Answer::DefaultBackend {
                source: entry.source.clone(),
                backend: view(&entry.backend),
            }
        }
        None => Answer::NotFound,
    }
}

/// Which rule set owns requests for `host` (see "precedence" in the crate docs).
fn owner(table: &RouteTable, host: &str) -> Option<HostPattern> {
    let hosts = table.hosts();
    if hosts.iter().any(|h| h == host) {
        return Some(HostPattern::Exact(host.to_owned()));
    }
    if let Some(suffix) = wildcard_suffix(host)
        && hosts.iter().any(|h| h.strip_prefix("*.") == Some(suffix))
    {
        return Some(HostPattern::Wildcard(suffix.to_owned()));
    }
    hosts
        .iter()
        .any(String::is_empty)
        .then_some(HostPattern::Any)
}

/// Whether one rule path is the one that answers, and why (not).
#[allow(clippy::too_many_arguments)]
fn verdict(
    ingress: &ObjectRef,
    rule_host: Option<&str>,
    rule_path: Option<&str>,
    path_type: &str,
    host: &str,
    path: &str,
    owner: &Option<HostPattern>,
    matched: Option<&(Route, usize)>,
    table: &RouteTable,
    regex_hosts: &[String],
) -> (bool, String) {
    let pattern = match parse_rule_host(rule_host) {
        Ok(pattern) => pattern,
        Err(error) => return (false, format!("invalid host, rule not served: {error}")),
    };
    let host_matches = match &pattern {
        HostPattern::Exact(h) => h == host,
        HostPattern::Wildcard(suffix) => wildcard_suffix(host) == Some(suffix.as_str()),
        HostPattern::Any => true,
    };
    if !host_matches {
        // Worth saying only when the name is under the wildcard's domain.
        let why = match &pattern {
            HostPattern::Wildcard(suffix)
                if host == suffix || host.ends_with(&format!(".{suffix}")) =>
            {
                " (a wildcard covers exactly one label, and not the bare domain)"
            }
            _ => "",
        };
        return (false, format!("host {pattern} does not match {host}{why}"));
    }
    if owner.as_ref() != Some(&pattern) {
        let owner = match owner {
            Some(HostPattern::Any) | None => "the rules without host".to_owned(),
            Some(o) => format!("the rules of host {o}"),
        };
        return (
            false,
            format!(
                "{owner} own this request: an exact host beats a wildcard, a wildcard beats \
                 rules without host, and there is no fallthrough between them"
            ),
        );
    }
    let is_regex = regex_hosts
        .iter()
        .any(|listed| route_host_matches(listed, &pattern));
    let path_matches = if is_regex && path_type != "Exact" {
        match path_regex(rule_path.unwrap_or("/")) {
            Ok(re) => re.is_match(path),
            Err(error) => return (false, format!("invalid path, rule not served: {error}")),
        }
    } else {
        match parse_rule_path(rule_path, path_type) {
            Ok(rule) => match rule.kind {
                PathKind::Exact => rule.key == path,
                PathKind::Prefix => prefix_matches(&rule.key, path),
                PathKind::StringPrefix => path.starts_with(&rule.key),
                PathKind::Regex => false,
            },
            Err(error) => return (false, format!("invalid path, rule not served: {error}")),
        }
    };
    let shown = rule_path.unwrap_or("/");
    if !path_matches {
        let why = match path_type {
            "Exact" => format!("Exact {shown} does not equal {path} (byte for byte)"),
            _ if is_regex => {
                format!("regular expression ^{shown} (use-regex) does not match {path}")
            }
            "ImplementationSpecific" => format!(
                "ImplementationSpecific {shown} is not a string prefix of {path} (nginx's \
                 location {shown})"
            ),
            _ => format!(
                "{path_type} {shown} does not match {path} (Prefix matches whole path segments)"
            ),
        };
        return (false, why);
    }
    let Some((winner, id)) = matched else {
        return (
            false,
            "matches, but was not compiled (see its Events)".into(),
        );
    };
    let source = &table.entry(*id).source;
    let same_rule = route_host_matches(&winner.host, &pattern)
        && same_path(winner, rule_path.unwrap_or("/"), path_type, is_regex);
    if same_rule && source == ingress {
        return (true, "matches: this rule answers".into());
    }
    if same_rule {
        return (
            false,
            format!(
                "the same rule is also in {source}, which is older and owns it (or this \
                 Ingress is a canary of it)"
            ),
        );
    }
    (
        false,
        format!(
            "matches, but {} {} is more specific (longest path wins, Exact before Prefix)",
            winner.path_type, winner.path
        ),
    )
}

/// Whether a host as listed in [`Route::host`] is `pattern`.
fn route_host_matches(listed: &str, pattern: &HostPattern) -> bool {
    match pattern {
        HostPattern::Any => listed.is_empty(),
        HostPattern::Exact(h) => listed == h,
        HostPattern::Wildcard(s) => listed.strip_prefix("*.") == Some(s.as_str()),
    }
}

/// Whether a rule path is the route the table lists.
fn same_path(route: &Route, path: &str, path_type: &str, is_regex: bool) -> bool {
    if is_regex && path_type != "Exact" {
        return route.path_type == "Regex" && route.path == path;
    }
    let Ok(rule) = parse_rule_path(Some(path), path_type) else {
        return false;
    };
    let (kind, key) = match rule.kind {
        PathKind::Exact => ("Exact", rule.key),
        PathKind::Prefix if rule.key.is_empty() => ("Prefix", "/".to_owned()),
        PathKind::Prefix => ("Prefix", rule.key),
        PathKind::StringPrefix => ("ImplementationSpecific", rule.key),
        PathKind::Regex => ("Regex", rule.key),
    };
    route.path_type == kind && route.path == key
}

impl fmt::Display for BackendView {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.service.name.is_empty() {
            // A Gateway API rule without backendRefs (a redirect, or 500).
            return f.write_str("none (the rule has no backendRefs)");
        }
        if self.invalid {
            return write!(
                f,
                "Service {} (an invalid backendRef: requests drawn for it get 500)",
                self.service
            );
        }
        let total = self.ready.len() + self.not_ready;
        write!(
            f,
            "Service {}, {}/{} endpoints ready",
            self.service,
            self.ready.len(),
            total
        )?;
        if !self.ready.is_empty() {
            let list: Vec<String> = self.ready.iter().map(ToString::to_string).collect();
            write!(f, ": {}", list.join(" "))?;
        } else {
            f.write_str(" (requests get 503)")?;
        }
        Ok(())
    }
}

impl fmt::Display for Explanation {
    /// The text `sluice explain` prints.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "request: host {} path {}", self.host, self.path)?;
        match &self.answer {
            Answer::Route {
                ingress,
                route,
                backend,
                policy,
                canary,
            } => {
                let host = if route.host.is_empty() {
                    "*"
                } else {
                    &route.host
                };
                writeln!(
                    f,
                    "answer:  {ingress}, rule {host} {} {}",
                    route.path_type, route.path
                )?;
                writeln!(f, "backend: {backend}")?;
                if let Some((canary, backend)) = canary.as_deref() {
                    writeln!(f, "canary:  {canary} takes part: {backend}")?;
                }
                if policy.is_empty() {
                    writeln!(f, "policy:  none")?;
                } else {
                    writeln!(f, "policy:  {}", policy.join("; "))?;
                }
            }
            Answer::DefaultBackend { source, backend } => {
                writeln!(f, "answer:  no rule matches; default backend of {source}")?;
                writeln!(f, "backend: {backend}")?;
            }
            Answer::NotFound => {
                writeln!(
                    f,
                    "answer:  no rule matches and there is no default backend: 404"
                )?;
            }
        }
        for problem in &self.problems {
            writeln!(f, "problem: {}", problem.message)?;
        }
        if !self.checks.is_empty() {
            writeln!(f, "rules:")?;
        }
        for check in &self.checks {
            let mark = if check.selected { "=>" } else { "  " };
            let rule = if check.rule.is_empty() {
                String::new()
            } else {
                format!(" ({})", check.rule)
            };
            writeln!(
                f,
                "{mark} {} {}{rule}: {}",
                check.ingress, check.field, check.reason
            )?;
        }
        Ok(())
    }
}

//! `sluice explain`'s list of Gateway API rules: every match of every HTTPRoute and
//! GRPCRoute of sluice's Gateways, named by its field (`spec.rules[1].matches[0]`), with
//! whether it answers the request and why not.

use crate::Inputs;
use crate::explain_check::Check;
use crate::gateway::{GatewayStatuses, GrpcRoute, HttpRoute, RouteStatus};
use crate::host::HostPattern;
use crate::table::{RouteTable, RuleIndex};

/// The checks of the routes `statuses` lists; `found`: the entry that answers (if any),
/// `host`: the request's host, canonical.
pub(crate) fn route_checks(
    inputs: &Inputs,
    statuses: &GatewayStatuses,
    table: &RouteTable,
    found: Option<usize>,
    host: &str,
) -> Vec<Check> {
    let answering = found.map(|id| table.entry(id));
    let mut checks = Vec::new();
    for status in &statuses.routes {
        let object = &status.object;
        let same = |meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta| {
            meta.namespace.as_deref() == Some(object.namespace.as_str())
                && meta.name.as_deref() == Some(object.name.as_str())
        };
        let (hostnames, rules): (&[String], Vec<(usize, Vec<String>)>) = match object.kind {
            "HTTPRoute" => match inputs.http_routes.iter().find(|r| same(&r.metadata)) {
                Some(route) => (&route.spec.hostnames, http_rules(route)),
                None => continue,
            },
            "GRPCRoute" => match inputs.grpc_routes.iter().find(|r| same(&r.metadata)) {
                Some(route) => (&route.spec.hostnames, grpc_rules(route)),
                None => continue,
            },
            _ => continue,
        };
        let refused = not_accepted(status);
        let host_listed = hostnames.is_empty()
            || hostnames.iter().any(|h| {
                crate::gateway::hostname::parse(Some(h)).is_ok_and(|pattern| {
                    crate::gateway::hostname::covers(&pattern, &HostPattern::Exact(host.to_owned()))
                })
            });
        for (r, matches) in rules {
            for (m, text) in matches.into_iter().enumerate() {
                let at = RuleIndex {
                    rule: r,
                    matched: m,
                };
                let selected = answering.is_some_and(|e| e.source == *object && e.rule == Some(at));
                let reason = if selected {
                    "answers this request".to_owned()
                } else if let Some(why) = &refused {
                    format!("the route is not accepted: {why}")
                } else if !host_listed {
                    format!("{host} is not in spec.hostnames")
                } else {
                    "its conditions do not match, or a more specific rule answers".to_owned()
                };
                checks.push(Check {
                    ingress: object.clone(),
                    field: format!("spec.rules[{r}].matches[{m}]"),
                    rule: format!("{} {text}", hosts(hostnames)),
                    selected,
                    reason,
                });
            }
        }
    }
    checks
}

/// Why no parent accepted the route, if none did.
fn not_accepted(status: &RouteStatus) -> Option<String> {
    let accepted = |p: &&crate::gateway::RouteParentStatus| {
        p.conditions
            .iter()
            .any(|c| c.type_ == "Accepted" && c.status)
    };
    if status.parents.iter().any(|p| accepted(&p)) {
        return None;
    }
    status
        .parents
        .iter()
        .flat_map(|p| &p.conditions)
        .find(|c| c.type_ == "Accepted" && !c.status)
        .map(|c| format!("{}: {}", c.reason, c.message))
        .or_else(|| Some("no parentRef names a Gateway of sluice's".to_owned()))
}

fn hosts(hostnames: &[String]) -> String {
    if hostnames.is_empty() {
        "*".to_owned()
    } else {
        hostnames.join(",")
    }
}

/// Each rule's matches in words (a rule without matches: `PathPrefix /`).
fn http_rules(route: &HttpRoute) -> Vec<(usize, Vec<String>)> {
    let default_rule = [Default::default()];
    let rules: &[crate::gateway::HttpRouteRule] = if route.spec.rules.is_empty() {
        &default_rule
    } else {
        &route.spec.rules
    };
    rules
        .iter()
        .enumerate()
        .map(|(r, rule)| {
            let default_match = [Default::default()];
            let matches: &[crate::gateway::HttpRouteMatch] = if rule.matches.is_empty() {
                &default_match
            } else {
                &rule.matches
            };
            let texts = matches
                .iter()
                .map(|m| {
                    let path = m.path.as_ref();
                    let mut text = format!(
                        "{} {}",
                        path.and_then(|p| p.type_.as_deref())
                            .unwrap_or("PathPrefix"),
                        path.and_then(|p| p.value.as_deref()).unwrap_or("/")
                    );
                    if let Some(method) = &m.method {
                        text.push_str(&format!(" method {method}"));
                    }
                    for h in &m.headers {
                        text.push_str(&format!(" header {}={}", h.name, h.value));
                    }
                    for q in &m.query_params {
                        text.push_str(&format!(" query {}={}", q.name, q.value));
                    }
                    text
                })
                .collect();
            (r, texts)
        })
        .collect()
}

/// Each rule's matches in words (a rule without matches: every call).
fn grpc_rules(route: &GrpcRoute) -> Vec<(usize, Vec<String>)> {
    route
        .spec
        .rules
        .iter()
        .enumerate()
        .map(|(r, rule)| {
            if rule.matches.is_empty() {
                return (r, vec!["every call".to_owned()]);
            }
            let texts = rule
                .matches
                .iter()
                .map(|m| {
                    let mut text = match &m.method {
                        Some(method) => format!(
                            "{}/{}",
                            method.service.as_deref().unwrap_or("*"),
                            method.method.as_deref().unwrap_or("*")
                        ),
                        None => "every call".to_owned(),
                    };
                    for h in &m.headers {
                        text.push_str(&format!(" header {}={}", h.name, h.value));
                    }
                    text
                })
                .collect();
            (r, texts)
        })
        .collect()
}

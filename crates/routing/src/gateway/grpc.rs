//! GRPCRoute as the HTTPRoute it is on the wire: a gRPC call is an HTTP/2 POST to
//! `/<package.Service>/<Method>`, so a method match is a path match and everything else
//! (hostnames, header matches, filters, weighted backends, statuses) is the HTTPRoute
//! machinery unchanged. Its backends are spoken to in gRPC (HTTP/2), whatever their
//! `appProtocol`.
//!
//! Gateway API v1.6 `GRPCMethodMatch`: `Exact` (default) with service and/or method, or
//! `RegularExpression` (each part a whole-string pattern); neither given matches every
//! call.

use super::types::{
    GrpcMethodMatch, GrpcRoute, GrpcRouteRule, HttpPathMatch, HttpRoute, HttpRouteMatch,
    HttpRouteRule, HttpRouteSpec,
};

/// The HTTPRoute `route` compiles as, and the first problem of its matches (a sentence
/// naming the GRPCRoute's field), which makes the route `Accepted=False`.
pub(crate) fn as_http_route(route: &GrpcRoute) -> (HttpRoute, Option<String>) {
    let mut problem = None;
    let rules = route
        .spec
        .rules
        .iter()
        .enumerate()
        .map(|(r, rule)| {
            let (rule, why) = as_http_rule(r, rule);
            if problem.is_none() {
                problem = why;
            }
            rule
        })
        .collect();
    let http = HttpRoute {
        metadata: route.metadata.clone(),
        spec: HttpRouteSpec {
            parent_refs: route.spec.parent_refs.clone(),
            hostnames: route.spec.hostnames.clone(),
            rules,
        },
        status: None,
    };
    (http, problem)
}

fn as_http_rule(index: usize, rule: &GrpcRouteRule) -> (HttpRouteRule, Option<String>) {
    let mut problem = None;
    let matches = rule
        .matches
        .iter()
        .enumerate()
        .map(|(m, matched)| {
            let path = match &matched.method {
                None => None,
                Some(method) => match method_path(method) {
                    Ok(path) => path,
                    Err(why) => {
                        problem.get_or_insert(format!(
                            "spec.rules[{index}].matches[{m}].method: {why}"
                        ));
                        None
                    }
                },
            };
            HttpRouteMatch {
                path,
                headers: matched.headers.clone(),
                query_params: Vec::new(),
                method: None,
            }
        })
        .collect();
    let http = HttpRouteRule {
        matches,
        filters: rule.filters.clone(),
        backend_refs: rule.backend_refs.clone(),
        timeouts: None,
        retry: None,
    };
    (http, problem)
}

/// The path condition of a method match (`None`: every path).
fn method_path(method: &GrpcMethodMatch) -> Result<Option<HttpPathMatch>, String> {
    let path = |type_: &str, value: String| {
        Some(HttpPathMatch {
            type_: Some(type_.to_owned()),
            value: Some(value),
        })
    };
    let service = method.service.as_deref().filter(|s| !s.is_empty());
    let name = method.method.as_deref().filter(|m| !m.is_empty());
    match method.type_.as_deref().unwrap_or("Exact") {
        "Exact" => {
            for (field, part) in [("service", service), ("method", name)] {
                if let Some(part) = part
                    && (part.contains('/') || part.chars().any(char::is_whitespace))
                {
                    return Err(format!("{field}: {part:?} is not a gRPC name"));
                }
            }
            Ok(match (service, name) {
                (Some(s), Some(m)) => path("Exact", format!("/{s}/{m}")),
                (Some(s), None) => path("PathPrefix", format!("/{s}/")),
                (None, Some(m)) => {
                    path("RegularExpression", format!("/[^/]+/{}", regex::escape(m)))
                }
                (None, None) => None,
            })
        }
        "RegularExpression" => {
            for (field, part) in [("service", service), ("method", name)] {
                if let Some(part) = part
                    && regex::Regex::new(part).is_err()
                {
                    return Err(format!("{field}: {part:?} is not a regular expression"));
                }
            }
            let service = service.unwrap_or("[^/]+");
            let name = name.unwrap_or("[^/]+");
            Ok(path(
                "RegularExpression",
                format!("/(?:{service})/(?:{name})"),
            ))
        }
        other => Err(format!("type {other:?} is not Exact or RegularExpression")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn route(rules: serde_json::Value) -> GrpcRoute {
        serde_json::from_value(serde_json::json!({
            "metadata": {"namespace": "ns", "name": "g"},
            "spec": {"parentRefs": [{"name": "gw"}], "rules": rules}
        }))
        .unwrap()
    }

    fn paths(route: &HttpRoute) -> Vec<Option<(String, String)>> {
        route.spec.rules[0]
            .matches
            .iter()
            .map(|m| {
                m.path
                    .as_ref()
                    .map(|p| (p.type_.clone().unwrap(), p.value.clone().unwrap()))
            })
            .collect()
    }

    /// Gateway API GRPCRoute: a call is `POST /<service>/<method>`; `Exact` with both parts
    /// is one path, a service alone every method of it, a method alone that method of any
    /// service; `RegularExpression` matches each part whole.
    #[test]
    fn method_matches_are_path_matches() {
        let (http, problem) = as_http_route(&route(serde_json::json!([{"matches": [
            {"method": {"service": "pkg.Echo", "method": "Echo"}},
            {"method": {"service": "pkg.Echo"}},
            {"method": {"method": "Echo.Two"}},
            {"method": {"type": "RegularExpression", "service": "pkg\\..*", "method": "Echo.*"}},
            {"method": {"type": "RegularExpression", "method": "Echo"}},
            {"headers": [{"name": "version", "value": "2"}]},
        ]}])));
        assert_eq!(problem, None);
        let s = |t: &str, v: &str| Some((t.to_owned(), v.to_owned()));
        assert_eq!(
            paths(&http),
            [
                s("Exact", "/pkg.Echo/Echo"),
                s("PathPrefix", "/pkg.Echo/"),
                s("RegularExpression", "/[^/]+/Echo\\.Two"),
                s("RegularExpression", "/(?:pkg\\..*)/(?:Echo.*)"),
                s("RegularExpression", "/(?:[^/]+)/(?:Echo)"),
                None,
            ]
        );
        assert_eq!(http.spec.rules[0].matches[5].headers[0].name, "version");
        let regex = regex::Regex::new("^(?:/(?:pkg\\..*)/(?:Echo.*))$").unwrap();
        assert!(regex.is_match("/pkg.v1.Echo/EchoTwo"));
        assert!(!regex.is_match("/other.Echo/Echo"));
    }

    #[test]
    fn bad_matches_name_the_field() {
        for (rules, want) in [
            (
                serde_json::json!([{"matches": [{}, {"method": {"service": "a/b"}}]}]),
                "spec.rules[0].matches[1].method: service",
            ),
            (
                serde_json::json!([{}, {"matches": [{"method": {"type": "RegularExpression", "method": "("}}]}]),
                "spec.rules[1].matches[0].method: method",
            ),
            (
                serde_json::json!([{"matches": [{"method": {"type": "Prefix", "method": "x"}}]}]),
                "spec.rules[0].matches[0].method: type",
            ),
        ] {
            let (_, problem) = as_http_route(&route(rules));
            let problem = problem.expect("a problem");
            assert!(problem.starts_with(want), "{problem}");
        }
    }
}

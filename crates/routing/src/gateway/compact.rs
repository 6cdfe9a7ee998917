//! Routes as an informer caches them: every list exactly as long as its items.
//!
//! serde reads a JSON array into a `Vec` by pushing, and a `Vec` that grows from empty
//! takes room for four items at once: a route with one rule, one match and one backend
//! keeps three unused rules, matches and backends (a rule is some 150 bytes, a filter more).
//! At 10,000 HTTPRoutes that slack was 18 MB of the controller's heap. The controller's
//! informers run these functions on every route as it arrives (client-go's `SetTransform`),
//! so the slack is freed before the object is stored; nothing is dropped.

use super::types::{
    GrpcRoute, GrpcRouteMatch, GrpcRouteRule, HttpBackendRef, HttpCorsFilter, HttpHeaderFilter,
    HttpRoute, HttpRouteFilter, HttpRouteMatch, HttpRouteRule,
};

/// `route` with no list holding room for more items than it has.
pub fn http_route(mut route: HttpRoute) -> HttpRoute {
    let spec = &mut route.spec;
    spec.parent_refs.shrink_to_fit();
    spec.hostnames.shrink_to_fit();
    fit_each(&mut spec.rules, http_rule);
    route
}

/// `route` with no list holding room for more items than it has.
pub fn grpc_route(mut route: GrpcRoute) -> GrpcRoute {
    let spec = &mut route.spec;
    spec.parent_refs.shrink_to_fit();
    spec.hostnames.shrink_to_fit();
    fit_each(&mut spec.rules, grpc_rule);
    route
}

/// Shrinks `items` and fits each item with `fit`.
fn fit_each<T>(items: &mut Vec<T>, fit: fn(&mut T)) {
    items.shrink_to_fit();
    items.iter_mut().for_each(fit);
}

fn http_rule(rule: &mut HttpRouteRule) {
    fit_each(&mut rule.matches, http_match);
    fit_each(&mut rule.filters, filter);
    fit_each(&mut rule.backend_refs, backend_ref);
    if let Some(retry) = &mut rule.retry {
        retry.codes.shrink_to_fit();
    }
}

fn grpc_rule(rule: &mut GrpcRouteRule) {
    fit_each(&mut rule.matches, grpc_match);
    fit_each(&mut rule.filters, filter);
    fit_each(&mut rule.backend_refs, backend_ref);
}

fn http_match(m: &mut HttpRouteMatch) {
    m.headers.shrink_to_fit();
    m.query_params.shrink_to_fit();
}

fn grpc_match(m: &mut GrpcRouteMatch) {
    m.headers.shrink_to_fit();
}

fn backend_ref(backend: &mut HttpBackendRef) {
    fit_each(&mut backend.filters, filter);
}

fn filter(f: &mut HttpRouteFilter) {
    for headers in [
        &mut f.request_header_modifier,
        &mut f.response_header_modifier,
    ]
    .into_iter()
    .flatten()
    {
        header_filter(headers);
    }
    if let Some(cors) = &mut f.cors {
        cors_filter(cors);
    }
}

fn header_filter(f: &mut HttpHeaderFilter) {
    f.set.shrink_to_fit();
    f.add.shrink_to_fit();
    f.remove.shrink_to_fit();
}

fn cors_filter(f: &mut HttpCorsFilter) {
    f.allow_origins.shrink_to_fit();
    f.allow_methods.shrink_to_fit();
    f.allow_headers.shrink_to_fit();
    f.expose_headers.shrink_to_fit();
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A route with every list this module fits, each with one to three items; read from
    /// text, as an informer reads it (serde then grows each list from room for four).
    /// `matches` are the kind's own.
    fn route_json(matches: serde_json::Value) -> serde_json::Value {
        let headers = json!({
            "set": [{"name": "a", "value": "1"}],
            "add": [{"name": "b", "value": "2"}, {"name": "c", "value": "3"}],
            "remove": ["d"]
        });
        let filters = json!([
            {"type": "RequestHeaderModifier", "requestHeaderModifier": headers},
            {"type": "ResponseHeaderModifier", "responseHeaderModifier": headers},
            {"type": "CORS", "cors": {
                "allowOrigins": ["https://a.example"], "allowMethods": ["GET", "PUT"],
                "allowHeaders": ["x-a"], "exposeHeaders": ["x-b", "x-c", "x-d"]
            }}
        ]);
        json!({
            "metadata": {"name": "r", "namespace": "ns"},
            "spec": {
                "parentRefs": [{"name": "gw"}],
                "hostnames": ["a.example", "b.example"],
                "rules": [{
                    "matches": matches,
                    "filters": filters,
                    "backendRefs": [{"name": "svc", "port": 80, "filters": filters}],
                    "retry": {"codes": [502, 503]}
                }]
            }
        })
    }

    fn fitted<T>(v: &Vec<T>) -> bool {
        v.capacity() == v.len()
    }

    fn filters_fitted(filters: &Vec<HttpRouteFilter>) -> bool {
        fitted(filters)
            && filters.iter().all(|f| {
                [&f.request_header_modifier, &f.response_header_modifier]
                    .into_iter()
                    .flatten()
                    .all(|h| fitted(&h.set) && fitted(&h.add) && fitted(&h.remove))
                    && f.cors.as_ref().is_none_or(|c| {
                        [
                            &c.allow_origins,
                            &c.allow_methods,
                            &c.allow_headers,
                            &c.expose_headers,
                        ]
                        .into_iter()
                        .all(fitted)
                    })
            })
    }

    #[test]
    fn http_route_keeps_every_item_and_no_room() {
        let matches = json!([
            {"path": {"type": "PathPrefix", "value": "/a"},
             "headers": [{"name": "x", "value": "y"}],
             "queryParams": [{"name": "q", "value": "v"}]}
        ]);
        let read: HttpRoute = serde_json::from_str(&route_json(matches).to_string()).unwrap();
        // The premise: serde left room (else this test proves nothing).
        assert!(read.spec.rules.capacity() > read.spec.rules.len());
        let route = http_route(read.clone());
        assert_eq!(route, read, "nothing is lost or changed");
        let spec = &route.spec;
        assert!(fitted(&spec.parent_refs));
        assert!(fitted(&spec.hostnames));
        assert!(fitted(&spec.rules));
        for rule in &spec.rules {
            assert!(fitted(&rule.matches));
            for m in &rule.matches {
                assert!(fitted(&m.headers));
                assert!(fitted(&m.query_params));
            }
            assert!(filters_fitted(&rule.filters));
            assert!(fitted(&rule.backend_refs));
            assert!(rule.backend_refs.iter().all(|b| filters_fitted(&b.filters)));
            let codes = &rule.retry.as_ref().unwrap().codes;
            assert!(fitted(codes));
        }
    }

    #[test]
    fn grpc_route_keeps_every_item_and_no_room() {
        let matches = json!([
            {"method": {"service": "s", "method": "M"}, "headers": [{"name": "x", "value": "y"}]}
        ]);
        let read: GrpcRoute = serde_json::from_str(&route_json(matches).to_string()).unwrap();
        assert!(read.spec.rules.capacity() > read.spec.rules.len());
        let route = grpc_route(read.clone());
        assert_eq!(route, read, "nothing is lost or changed");
        let spec = &route.spec;
        assert!(fitted(&spec.parent_refs));
        assert!(fitted(&spec.hostnames));
        assert!(fitted(&spec.rules));
        for rule in &spec.rules {
            assert!(fitted(&rule.matches));
            assert!(rule.matches.iter().all(|m| fitted(&m.headers)));
            assert!(filters_fitted(&rule.filters));
            assert!(fitted(&rule.backend_refs));
            assert!(rule.backend_refs.iter().all(|b| filters_fitted(&b.filters)));
        }
    }

    #[test]
    fn empty_route_stays_empty() {
        assert_eq!(http_route(HttpRoute::default()), HttpRoute::default());
        assert_eq!(grpc_route(GrpcRoute::default()), GrpcRoute::default());
    }
}

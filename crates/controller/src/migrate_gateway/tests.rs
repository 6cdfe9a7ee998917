//! The mapping, one annotation family per test, as ingress2gateway's ingress-nginx provider
//! maps them (its `ingressnginx` package: canary, redirects, rewrites, headers, CORS,
//! timeouts, backend protocol), plus the output: sorted, and parsed back by sluice's own
//! Gateway API types and compiler.

use super::*;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use sluice_routing::gateway::{
    BackendTlsPolicy, Gateway, GatewayClass, GrpcRoute, HttpRoute, HttpRouteRule, ReferenceGrant,
};
use std::sync::Arc;

fn ingresses(yaml: &str) -> Vec<Ingress> {
    yaml_serde::Deserializer::from_str(yaml)
        .map(|doc| serde::Deserialize::deserialize(doc).expect("an Ingress"))
        .collect()
}

fn options() -> ConvertOptions {
    ConvertOptions {
        gateway_class: "sluice".into(),
        gateway_namespace: None,
        default_class: "sluice".into(),
        allow_open: false,
        config_map: None,
    }
}

fn run(yaml: &str) -> Conversion {
    convert(&ingresses(yaml), &[], &options())
}

/// An Ingress `default/name` with `annotations` (YAML map body) and one host `host` with
/// `paths` (YAML list items, already indented).
fn one(name: &str, annotations: &str, host: &str, paths: &str) -> String {
    format!(
        "apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: {name}
  namespace: default
  annotations: {{{annotations}}}
spec:
  rules:
  - host: {host}
    http:
      paths:
{paths}"
    )
}

const ROOT_TO_WEB: &str =
    "      - {path: /, pathType: Prefix, backend: {service: {name: web, port: {number: 80}}}}\n";

fn route<'a>(c: &'a Conversion, name: &str) -> &'a HttpRoute {
    c.objects
        .iter()
        .find_map(|e| match &e.object {
            Object::HttpRoute(r) if r.metadata.name.as_deref() == Some(name) => Some(r),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no HTTPRoute {name} in {:#?}", names(c)))
}

fn names(c: &Conversion) -> Vec<String> {
    c.objects.iter().map(|e| e.object.display_name()).collect()
}

fn outcome<'a>(c: &'a Conversion, name: &str) -> &'a IngressOutcome {
    c.ingresses
        .iter()
        .find(|i| i.name == name)
        .unwrap_or_else(|| panic!("no outcome for {name}"))
}

fn not_carried(c: &Conversion, name: &str) -> Vec<String> {
    outcome(c, name)
        .not_carried
        .iter()
        .map(|n| format!("{}: {}", n.what, n.why))
        .collect()
}

fn rule_json(rule: &HttpRouteRule) -> serde_json::Value {
    serde_json::to_value(rule).expect("serializes")
}

/// ingress2gateway: one Gateway per IngressClass, an HTTP listener and an HTTPS listener per
/// TLS host with its Secret; a Secret of another namespace than the Gateway's gets a
/// ReferenceGrant, and the listeners admit routes of all namespaces then.
#[test]
fn a_gateway_per_class_with_https_listeners_and_reference_grants() {
    let yaml = "apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: {name: shop, namespace: shop}
spec:
  ingressClassName: nginx
  tls: [{hosts: [shop.test], secretName: shop-tls}]
  rules:
  - host: shop.test
    http: {paths: [{path: /, pathType: Prefix, backend: {service: {name: web, port: {number: 80}}}}]}
---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: {name: blog, namespace: blog}
spec:
  ingressClassName: nginx
  tls: [{hosts: ['*.blog.test'], secretName: blog-tls}]
  rules:
  - host: '*.blog.test'
    http: {paths: [{path: /, pathType: Prefix, backend: {service: {name: web, port: {number: 80}}}}]}
";
    let c = convert(
        &ingresses(yaml),
        &[],
        &ConvertOptions {
            gateway_namespace: Some("edge".into()),
            ..options()
        },
    );
    let gateways: Vec<&Gateway> = c
        .objects
        .iter()
        .filter_map(|e| match &e.object {
            Object::Gateway(g) => Some(&**g),
            _ => None,
        })
        .collect();
    assert_eq!(gateways.len(), 1, "{:?}", names(&c));
    let g = gateways[0];
    assert_eq!(g.metadata.name.as_deref(), Some("nginx"));
    assert_eq!(g.metadata.namespace.as_deref(), Some("edge"));
    assert_eq!(g.spec.gateway_class_name, "sluice");
    let listeners: Vec<(String, i32, String, Option<String>)> = g
        .spec
        .listeners
        .iter()
        .map(|l| {
            (
                l.name.clone(),
                l.port,
                l.protocol.clone(),
                l.hostname.clone(),
            )
        })
        .collect();
    assert_eq!(
        listeners,
        [
            ("http".to_owned(), 80, "HTTP".to_owned(), None),
            (
                "https-wildcard.blog.test".into(),
                443,
                "HTTPS".into(),
                Some("*.blog.test".to_owned())
            ),
            (
                "https-shop.test".into(),
                443,
                "HTTPS".into(),
                Some("shop.test".into())
            ),
        ]
    );
    let shop = g
        .spec
        .listeners
        .iter()
        .find(|l| l.name == "https-shop.test")
        .expect("listener");
    let cert = &shop.tls.as_ref().expect("tls").certificate_refs[0];
    assert_eq!(
        (cert.name.as_str(), cert.namespace.as_deref()),
        ("shop-tls", Some("shop"))
    );
    assert!(g.spec.listeners.iter().all(|l| {
        l.allowed_routes
            .as_ref()
            .and_then(|a| a.namespaces.as_ref())
            .and_then(|n| n.from.as_deref())
            == Some("All")
    }));
    let grants: Vec<&ReferenceGrant> = c
        .objects
        .iter()
        .filter_map(|e| match &e.object {
            Object::ReferenceGrant(g) => Some(g),
            _ => None,
        })
        .collect();
    assert_eq!(grants.len(), 2);
    let shop_grant = grants
        .iter()
        .find(|g| g.metadata.namespace.as_deref() == Some("shop"))
        .expect("grant in shop");
    assert_eq!(shop_grant.spec.from[0].kind, "Gateway");
    assert_eq!(shop_grant.spec.from[0].namespace, "edge");
    assert_eq!(shop_grant.spec.to[0].kind, "Secret");
    assert_eq!(shop_grant.spec.to[0].name.as_deref(), Some("shop-tls"));
    // The routes name the Gateway in its namespace.
    let r = route(&c, "shop");
    assert_eq!(r.spec.parent_refs[0].namespace.as_deref(), Some("edge"));
    assert_eq!(r.spec.hostnames, ["shop.test"]);
}

/// Ingress path types: Exact and Prefix as themselves, ImplementationSpecific as nginx's
/// string-prefix location (RegularExpression), use-regex paths as nginx's case-insensitive
/// regex location anchored at the start; a named port from the Service, else said.
#[test]
fn paths_and_backends_map_to_matches_and_backend_refs() {
    let paths = "      - {path: /exact, pathType: Exact, backend: {service: {name: web, port: {number: 80}}}}
      - {path: /prefix/, pathType: Prefix, backend: {service: {name: web, port: {name: http}}}}
      - {path: /impl.v1, pathType: ImplementationSpecific, backend: {service: {name: api, port: {name: grpc}}}}
";
    let service: Service = serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {"ports": [{"name": "http", "port": 8080}]}
    }))
    .expect("service");
    let c = convert(
        &ingresses(&one("app", "", "app.test", paths)),
        &[service],
        &options(),
    );
    let r = route(&c, "app");
    let m: Vec<serde_json::Value> = r
        .spec
        .rules
        .iter()
        .map(|rule| serde_json::to_value(&rule.matches[0].path).expect("json"))
        .collect();
    assert_eq!(
        m,
        [
            serde_json::json!({"type": "Exact", "value": "/exact"}),
            serde_json::json!({"type": "PathPrefix", "value": "/prefix"}),
            serde_json::json!({"type": "RegularExpression", "value": "/impl\\.v1.*"}),
        ]
    );
    assert_eq!(r.spec.rules[1].backend_refs[0].backend.port, Some(8080));
    assert!(r.spec.rules[2].backend_refs.is_empty());
    let problems = not_carried(&c, "app");
    assert!(
        problems.iter().any(|p| p.contains("port name \"grpc\"")),
        "{problems:?}"
    );

    let c = run(&one(
        "re",
        "nginx.ingress.kubernetes.io/use-regex: 'true'",
        "re.test",
        "      - {path: '/v[0-9]+', pathType: ImplementationSpecific, backend: {service: {name: web, port: {number: 80}}}}\n",
    ));
    let r = route(&c, "re");
    assert_eq!(
        serde_json::to_value(&r.spec.rules[0].matches[0].path).expect("json"),
        serde_json::json!({"type": "RegularExpression", "value": "(?i)(?:/v[0-9]+).*"})
    );
}

/// ingress-nginx's default ssl-redirect for TLS hosts (308): a redirect route on the HTTP
/// listener and the route itself on the HTTPS listener only; `ssl-redirect: "false"` keeps
/// both listeners on the route.
#[test]
fn ssl_redirect_becomes_a_redirect_route_on_the_http_listener() {
    let tls = |name: &str, annotations: &str| {
        format!(
            "apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: {{name: {name}, namespace: default, annotations: {{{annotations}}}}}
spec:
  tls: [{{hosts: [{name}.test], secretName: tls}}]
  rules:
  - host: {name}.test
    http: {{paths: [{{path: /, pathType: Prefix, backend: {{service: {{name: web, port: {{number: 80}}}}}}}}]}}
"
        )
    };
    let c = run(&tls("a", ""));
    let redirect = route(&c, "a-https-redirect");
    assert_eq!(
        redirect.spec.parent_refs[0].section_name.as_deref(),
        Some("http")
    );
    assert_eq!(
        rule_json(&redirect.spec.rules[0])["filters"][0],
        serde_json::json!({"type": "RequestRedirect",
                           "requestRedirect": {"scheme": "https", "statusCode": 308}})
    );
    let main = route(&c, "a");
    let sections: Vec<_> = main
        .spec
        .parent_refs
        .iter()
        .map(|p| p.section_name.clone().unwrap_or_default())
        .collect();
    assert_eq!(sections, ["https-a.test"]);

    let c = run(&tls(
        "b",
        "nginx.ingress.kubernetes.io/ssl-redirect: 'false'",
    ));
    assert!(
        !names(&c).iter().any(|n| n.contains("redirect")),
        "{:?}",
        names(&c)
    );
    let sections: Vec<_> = route(&c, "b")
        .spec
        .parent_refs
        .iter()
        .map(|p| p.section_name.clone().unwrap_or_default())
        .collect();
    assert_eq!(sections, ["http", "https-b.test"]);
    assert!(
        outcome(&c, "b").not_carried.is_empty(),
        "{:?}",
        not_carried(&c, "b")
    );
}

/// `permanent-redirect` (301), `temporal-redirect` (302, wins over permanent, as in
/// ingress-nginx) with their codes, and `app-root` (302 for `/` only): RequestRedirect.
#[test]
fn redirect_annotations_become_request_redirects() {
    let c = run(&one(
        "moved",
        "nginx.ingress.kubernetes.io/permanent-redirect: 'https://new.test:8443/landing'",
        "old.test",
        ROOT_TO_WEB,
    ));
    let rule = rule_json(&route(&c, "moved").spec.rules[0]);
    assert_eq!(
        rule["filters"][0]["requestRedirect"],
        serde_json::json!({"scheme": "https", "hostname": "new.test", "port": 8443,
            "path": {"type": "ReplaceFullPath", "replaceFullPath": "/landing"}, "statusCode": 301})
    );
    assert_eq!(rule["backendRefs"], serde_json::json!([]));

    let c = run(&one(
        "temp",
        "nginx.ingress.kubernetes.io/permanent-redirect: 'https://p.test/',
         nginx.ingress.kubernetes.io/temporal-redirect: 'http://t.test/x',
         nginx.ingress.kubernetes.io/temporal-redirect-code: '307'",
        "temp.test",
        ROOT_TO_WEB,
    ));
    let rule = rule_json(&route(&c, "temp").spec.rules[0]);
    assert_eq!(rule["filters"][0]["requestRedirect"]["hostname"], "t.test");
    assert_eq!(rule["filters"][0]["requestRedirect"]["statusCode"], 307);
    assert!(not_carried(&c, "temp")[0].contains("temporal-redirect is also set"));

    // A query has no RequestRedirect form.
    let c = run(&one(
        "q",
        "nginx.ingress.kubernetes.io/permanent-redirect: 'https://new.test/?a=1'",
        "q.test",
        ROOT_TO_WEB,
    ));
    assert!(
        not_carried(&c, "q")[0].contains("query"),
        "{:?}",
        not_carried(&c, "q")
    );
    assert!(route(&c, "q").spec.rules[0].backend_refs.len() == 1);

    let c = run(&one(
        "root",
        "nginx.ingress.kubernetes.io/app-root: /app",
        "root.test",
        ROOT_TO_WEB,
    ));
    let rules = &route(&c, "root").spec.rules;
    assert_eq!(
        rule_json(&rules[0]),
        serde_json::json!({"matches": [{"path": {"type": "Exact", "value": "/"}, "headers": [], "queryParams": []}],
            "filters": [{"type": "RequestRedirect", "requestRedirect": {
                "path": {"type": "ReplaceFullPath", "replaceFullPath": "/app"}, "statusCode": 302}}],
            "backendRefs": []})
    );
    assert_eq!(rules[1].backend_refs[0].backend.name, "web");
}

/// `rewrite-target`: the `/prefix(/|$)(.*)` -> `/$2` idiom is ReplacePrefixMatch (the same
/// paths); a target without captures is nginx's whole-URI `rewrite` (ReplaceFullPath);
/// other captures are not carried. `upstream-vhost` is URLRewrite's hostname.
#[test]
fn rewrite_target_and_upstream_vhost_become_url_rewrites() {
    let c = run(&one(
        "strip",
        "nginx.ingress.kubernetes.io/rewrite-target: /$2,
         nginx.ingress.kubernetes.io/use-regex: 'true',
         nginx.ingress.kubernetes.io/upstream-vhost: internal.test",
        "rw.test",
        "      - {path: '/api(/|$)(.*)', pathType: ImplementationSpecific, backend: {service: {name: web, port: {number: 80}}}}\n",
    ));
    let rule = rule_json(&route(&c, "strip").spec.rules[0]);
    assert_eq!(
        rule["matches"][0]["path"],
        serde_json::json!({"type": "PathPrefix", "value": "/api"})
    );
    assert_eq!(
        rule["filters"][0],
        serde_json::json!({"type": "URLRewrite", "urlRewrite": {"hostname": "internal.test",
            "path": {"type": "ReplacePrefixMatch", "replacePrefixMatch": "/"}}})
    );
    assert!(
        outcome(&c, "strip").not_carried.is_empty(),
        "{:?}",
        not_carried(&c, "strip")
    );

    let c = run(&one(
        "full",
        "nginx.ingress.kubernetes.io/rewrite-target: /index.html",
        "full.test",
        "      - {path: /old, pathType: Prefix, backend: {service: {name: web, port: {number: 80}}}}\n",
    ));
    let rule = rule_json(&route(&c, "full").spec.rules[0]);
    assert_eq!(
        rule["filters"][0]["urlRewrite"]["path"],
        serde_json::json!({"type": "ReplaceFullPath", "replaceFullPath": "/index.html"})
    );
    // rewrite-target makes the host's paths regex locations (ingress-nginx).
    assert_eq!(rule["matches"][0]["path"]["type"], "RegularExpression");

    let c = run(&one(
        "captures",
        "nginx.ingress.kubernetes.io/rewrite-target: /$1/x",
        "cap.test",
        "      - {path: '/(a|b)/.*', pathType: ImplementationSpecific, backend: {service: {name: web, port: {number: 80}}}}\n",
    ));
    let problems = not_carried(&c, "captures");
    assert!(problems[0].contains("regex captures"), "{problems:?}");
    assert!(route(&c, "captures").spec.rules.is_empty());
}

/// `x-forwarded-prefix` and `sluice.dev/request-headers` are RequestHeaderModifier `set`,
/// `sluice.dev/response-headers` ResponseHeaderModifier `set` (the policies sluice gives
/// both APIs).
#[test]
fn header_annotations_become_header_modifiers() {
    let c = run(&one(
        "hdr",
        "nginx.ingress.kubernetes.io/x-forwarded-prefix: /shop,
         sluice.dev/request-headers: \"X-Team: shop\\nX-Env: prod\",
         sluice.dev/response-headers: \"Cache-Control: no-store\"",
        "hdr.test",
        ROOT_TO_WEB,
    ));
    let rule = rule_json(&route(&c, "hdr").spec.rules[0]);
    assert_eq!(rule["filters"][0]["type"], "RequestHeaderModifier");
    let set: std::collections::BTreeSet<(String, String)> =
        rule["filters"][0]["requestHeaderModifier"]["set"]
            .as_array()
            .expect("set")
            .iter()
            .map(|h| {
                (
                    h["name"].as_str().unwrap_or("").to_owned(),
                    h["value"].as_str().unwrap_or("").to_owned(),
                )
            })
            .collect();
    assert_eq!(
        set,
        [
            ("X-Env".to_owned(), "prod".to_owned()),
            ("X-Forwarded-Prefix".into(), "/shop".into()),
            ("X-Team".into(), "shop".into())
        ]
        .into_iter()
        .collect()
    );
    assert_eq!(
        rule["filters"][1],
        serde_json::json!({"type": "ResponseHeaderModifier", "responseHeaderModifier": {
            "set": [{"name": "Cache-Control", "value": "no-store"}], "add": [], "remove": []}})
    );
}

/// ingress-nginx canaries (docs "Canary"): `canary-weight` of `canary-weight-total` is the
/// weights of the main rule's backendRefs (0 and 100 included); `canary-by-header` is a
/// rule matching the header (`always`; `never` keeps the main backend); a value is an exact
/// match; a cookie is not carried.
#[test]
fn canaries_become_weights_and_header_rules() {
    let canary = |name: &str, annotations: &str, service: &str| {
        one(
            name,
            &if annotations.is_empty() {
                "nginx.ingress.kubernetes.io/canary: 'true'".to_owned()
            } else {
                format!("nginx.ingress.kubernetes.io/canary: 'true', {annotations}")
            },
            "app.test",
            &format!(
                "      - {{path: /, pathType: Prefix, backend: {{service: {{name: {service}, port: {{number: 80}}}}}}}}\n"
            ),
        )
    };
    let yaml = format!(
        "{}---\n{}",
        one("main", "", "app.test", ROOT_TO_WEB),
        canary(
            "main-canary",
            "nginx.ingress.kubernetes.io/canary-weight: '0',
             nginx.ingress.kubernetes.io/canary-by-header: x-canary,
             nginx.ingress.kubernetes.io/canary-by-cookie: beta",
            "canary"
        )
    );
    let c = run(&yaml);
    assert!(
        !names(&c).iter().any(|n| n.contains("main-canary")),
        "{:?}",
        names(&c)
    );
    let rules = &route(&c, "main").spec.rules;
    // (header matches, backends with weights) per rule.
    type RuleSummary = (serde_json::Value, Vec<(String, Option<i32>)>);
    let summary: Vec<RuleSummary> = rules
        .iter()
        .map(|r| {
            (
                serde_json::to_value(&r.matches[0].headers).expect("json"),
                r.backend_refs
                    .iter()
                    .map(|b| (b.backend.name.clone(), b.weight))
                    .collect(),
            )
        })
        .collect();
    assert_eq!(
        summary,
        [
            (
                serde_json::json!([{"name": "x-canary", "value": "always"}]),
                vec![("canary".to_owned(), None)]
            ),
            (
                serde_json::json!([]),
                vec![
                    ("web".to_owned(), Some(100)),
                    ("canary".to_owned(), Some(0))
                ]
            ),
        ]
    );
    let problems = not_carried(&c, "main-canary");
    assert!(
        problems.len() == 1 && problems[0].contains("canary-by-cookie"),
        "{problems:?}"
    );
    assert!(
        outcome(&c, "main")
            .carried
            .iter()
            .any(|c| c.contains("canary Ingress"))
    );

    // Weight 100 with a header value: the header value is an exact match; `never` keeps
    // the main backend while the weight sends the rest to the canary.
    let yaml = format!(
        "{}---\n{}---\n{}",
        one("main", "", "app.test", ROOT_TO_WEB),
        canary(
            "main-canary",
            "nginx.ingress.kubernetes.io/canary-weight: '100',
             nginx.ingress.kubernetes.io/canary-by-header: x-canary",
            "canary"
        ),
        canary("orphan", "", "canary").replace("app.test", "none.test")
    );
    let c = run(&yaml);
    let rules = &route(&c, "main").spec.rules;
    assert_eq!(rules.len(), 3);
    assert_eq!(rules[1].matches[0].headers[0].value, "never");
    assert_eq!(rules[1].backend_refs[0].backend.name, "web");
    assert_eq!(rules[2].backend_refs[0].weight, Some(0));
    assert_eq!(rules[2].backend_refs[1].weight, Some(100));
    assert!(not_carried(&c, "orphan")[0].contains("no main Ingress"));
}

/// `enable-cors` with ingress-nginx's defaults (`cors/main.go`: methods, headers,
/// credentials true, max age 1728000), and the `cors-*` values: the CORS filter.
#[test]
fn cors_annotations_become_the_cors_filter() {
    let c = run(&one(
        "cors",
        "nginx.ingress.kubernetes.io/enable-cors: 'true'",
        "cors.test",
        ROOT_TO_WEB,
    ));
    assert_eq!(
        rule_json(&route(&c, "cors").spec.rules[0])["filters"][0],
        serde_json::json!({"type": "CORS", "cors": {
            "allowOrigins": ["*"],
            "allowMethods": ["GET", "PUT", "POST", "DELETE", "PATCH", "OPTIONS"],
            "allowHeaders": ["DNT", "Keep-Alive", "User-Agent", "X-Requested-With",
                "If-Modified-Since", "Cache-Control", "Content-Type", "Range", "Authorization"],
            "exposeHeaders": [], "allowCredentials": true, "maxAge": 1728000}})
    );
    let c = run(&one(
        "cors2",
        "nginx.ingress.kubernetes.io/enable-cors: 'true',
         nginx.ingress.kubernetes.io/cors-allow-origin: 'https://a.test, https://*.b.test',
         nginx.ingress.kubernetes.io/cors-allow-methods: 'get, post',
         nginx.ingress.kubernetes.io/cors-expose-headers: X-Id,
         nginx.ingress.kubernetes.io/cors-allow-credentials: 'false',
         nginx.ingress.kubernetes.io/cors-max-age: '60'",
        "cors.test",
        ROOT_TO_WEB,
    ));
    let cors = &rule_json(&route(&c, "cors2").spec.rules[0])["filters"][0]["cors"];
    assert_eq!(
        cors["allowOrigins"],
        serde_json::json!(["https://a.test", "https://*.b.test"])
    );
    assert_eq!(cors["allowMethods"], serde_json::json!(["GET", "POST"]));
    assert_eq!(cors["exposeHeaders"], serde_json::json!(["X-Id"]));
    assert_eq!(cors["allowCredentials"], false);
    assert_eq!(cors["maxAge"], 60);
    assert!(outcome(&c, "cors2").not_carried.is_empty());
}

/// `proxy-read-timeout`/`proxy-send-timeout` (seconds) as `timeouts.backendRequest` (the
/// larger), `proxy-next-upstream-tries` (tries in all) as `retry.attempts` (tries after
/// the first) with `http_5xx` tokens as codes.
#[test]
fn timeouts_and_retries_become_rule_timeouts_and_retry() {
    let c = run(&one(
        "slow",
        "nginx.ingress.kubernetes.io/proxy-read-timeout: '120',
         nginx.ingress.kubernetes.io/proxy-send-timeout: '30',
         nginx.ingress.kubernetes.io/proxy-next-upstream: 'error timeout http_502 http_503',
         nginx.ingress.kubernetes.io/proxy-next-upstream-tries: '3'",
        "slow.test",
        ROOT_TO_WEB,
    ));
    let rule = rule_json(&route(&c, "slow").spec.rules[0]);
    assert_eq!(
        rule["timeouts"],
        serde_json::json!({"backendRequest": "120s"})
    );
    assert_eq!(
        rule["retry"],
        serde_json::json!({"codes": [502, 503], "attempts": 2})
    );
}

/// What has no Gateway API form is listed with the reason, per Ingress: rate limits, body
/// size, cookie affinity (sessionPersistence, which sluice does not serve), snippets.
#[test]
fn annotations_without_a_gateway_api_form_are_listed_with_why() {
    let c = run(&one(
        "misc",
        "nginx.ingress.kubernetes.io/limit-rps: '5',
         nginx.ingress.kubernetes.io/proxy-body-size: 8m,
         nginx.ingress.kubernetes.io/affinity: cookie,
         nginx.ingress.kubernetes.io/configuration-snippet: 'return 200;'",
        "misc.test",
        ROOT_TO_WEB,
    ));
    let problems = not_carried(&c, "misc");
    let find = |key: &str| {
        problems
            .iter()
            .find(|p| p.starts_with(&format!("nginx.ingress.kubernetes.io/{key}:")))
            .unwrap_or_else(|| panic!("{key} not listed: {problems:?}"))
            .clone()
    };
    assert!(find("limit-rps").contains("rate limits"));
    assert!(find("proxy-body-size").contains("body limit"));
    assert!(find("affinity").contains("sessionPersistence"));
    assert!(find("configuration-snippet").contains("sluice does not apply it either"));
    assert!(!outcome(&c, "misc").restricts_access);
    assert_eq!(route(&c, "misc").spec.rules[0].backend_refs.len(), 1);
}

/// Access restrictions (source ranges, basic auth, auth-url, client certificates) have no
/// Gateway API form: the Ingress is flagged, and its routes are emitted with no
/// backendRefs (500, closed) and a comment saying why, unless `--allow-open`.
#[test]
fn access_restrictions_close_the_route_unless_allow_open() {
    let yaml = one(
        "private",
        "nginx.ingress.kubernetes.io/whitelist-source-range: 10.0.0.0/8,
         nginx.ingress.kubernetes.io/auth-type: basic,
         nginx.ingress.kubernetes.io/auth-secret: users",
        "private.test",
        ROOT_TO_WEB,
    );
    let c = run(&yaml);
    let o = outcome(&c, "private");
    assert!(o.restricts_access && o.closed);
    assert!(route(&c, "private").spec.rules[0].backend_refs.is_empty());
    let comments = &c
        .objects
        .iter()
        .find(|e| e.object.display_name() == "HTTPRoute default/private")
        .expect("route")
        .comments;
    assert!(
        comments.iter().any(|c| c.starts_with("CLOSED")),
        "{comments:?}"
    );
    let text = report(&c);
    assert!(
        text.contains("ACCESS") && text.contains("NO backendRefs"),
        "{text}"
    );
    assert!(
        to_yaml(&c)
            .expect("yaml")
            .contains("# CLOSED: Ingress default/private")
    );

    let open = convert(
        &ingresses(&yaml),
        &[],
        &ConvertOptions {
            allow_open: true,
            ..options()
        },
    );
    assert!(!outcome(&open, "private").closed);
    assert_eq!(route(&open, "private").spec.rules[0].backend_refs.len(), 1);
    assert!(report(&open).contains("ANSWER EVERYONE"));
}

/// `backend-protocol: GRPC` is a GRPCRoute (a path `/pkg.Service` a service match);
/// `HTTPS` a BackendTLSPolicy, with `proxy-ssl-secret`'s CA (as a ConfigMap) and
/// `proxy-ssl-name` when verified; unverified TLS has no Gateway API form, said.
#[test]
fn backend_protocols_become_grpc_routes_and_backend_tls_policies() {
    let c = run(&one(
        "rpc",
        "nginx.ingress.kubernetes.io/backend-protocol: GRPC",
        "rpc.test",
        "      - {path: /shop.Cart, pathType: Prefix, backend: {service: {name: cart, port: {number: 50051}}}}\n",
    ));
    let grpc: &GrpcRoute = c
        .objects
        .iter()
        .find_map(|e| match &e.object {
            Object::GrpcRoute(r) => Some(r),
            _ => None,
        })
        .expect("GRPCRoute");
    assert_eq!(
        serde_json::to_value(&grpc.spec.rules[0].matches).expect("json"),
        serde_json::json!([{"method": {"type": "Exact", "service": "shop.Cart"}, "headers": []}])
    );
    assert_eq!(grpc.spec.rules[0].backend_refs[0].backend.port, Some(50051));

    let c = run(&one(
        "tls",
        "nginx.ingress.kubernetes.io/backend-protocol: HTTPS,
         nginx.ingress.kubernetes.io/proxy-ssl-verify: 'on',
         nginx.ingress.kubernetes.io/proxy-ssl-secret: default/backend-ca,
         nginx.ingress.kubernetes.io/proxy-ssl-name: api.internal",
        "tls.test",
        ROOT_TO_WEB,
    ));
    let policy: &BackendTlsPolicy = c
        .objects
        .iter()
        .find_map(|e| match &e.object {
            Object::BackendTlsPolicy(p) => Some(&**p),
            _ => None,
        })
        .expect("BackendTLSPolicy");
    assert_eq!(policy.spec.target_refs[0].name, "web");
    assert_eq!(policy.spec.validation.hostname, "api.internal");
    assert_eq!(
        policy.spec.validation.ca_certificate_refs[0].kind,
        "ConfigMap"
    );
    assert_eq!(
        policy.spec.validation.ca_certificate_refs[0].name,
        "backend-ca"
    );
    assert!(
        outcome(&c, "tls").not_carried.is_empty(),
        "{:?}",
        not_carried(&c, "tls")
    );

    let c = run(&one(
        "unverified",
        "nginx.ingress.kubernetes.io/backend-protocol: HTTPS",
        "u.test",
        ROOT_TO_WEB,
    ));
    let problems = not_carried(&c, "unverified");
    assert!(problems[0].contains("proxy-ssl-verify"), "{problems:?}");
    assert!(
        !names(&c).iter().any(|n| n.starts_with("BackendTLSPolicy")),
        "{:?}",
        names(&c)
    );
}

/// `mirror-target` naming a Service (`http://svc.ns:port$request_uri`) is RequestMirror;
/// `sluice.dev/compression` stays the same annotation on the HTTPRoute.
#[test]
fn mirror_target_and_compression_are_carried() {
    let c = run(&one(
        "mirror",
        "nginx.ingress.kubernetes.io/mirror-target: 'http://shadow.test-ns:8080$request_uri',
         sluice.dev/compression: 'on'",
        "m.test",
        ROOT_TO_WEB,
    ));
    let r = route(&c, "mirror");
    assert_eq!(
        rule_json(&r.spec.rules[0])["filters"][0],
        serde_json::json!({"type": "RequestMirror", "requestMirror": {
            "backendRef": {"name": "shadow", "namespace": "test-ns", "port": 8080}}})
    );
    assert_eq!(
        r.metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get("sluice.dev/compression"))
            .map(String::as_str),
        Some("on")
    );
    // A value sluice refuses is not carried either, and says why.
    let c = run(&one(
        "bad",
        "sluice.dev/compression: gzip",
        "b.test",
        ROOT_TO_WEB,
    ));
    assert!(route(&c, "bad").metadata.annotations.is_none());
    assert!(
        not_carried(&c, "bad")[0].contains("not on or off"),
        "{:?}",
        not_carried(&c, "bad")
    );
}

/// The output is sorted and the same whatever the input order; every document parses back
/// into sluice's Gateway API types as the same object, and sluice's Gateway compiler
/// accepts every route on the Gateway.
#[test]
fn output_is_sorted_parses_back_and_is_accepted_by_sluices_compiler() {
    let yaml = [
        one(
            "b",
            "nginx.ingress.kubernetes.io/enable-cors: 'true',
             nginx.ingress.kubernetes.io/rewrite-target: /$2",
            "b.test",
            "      - {path: '/x(/|$)(.*)', pathType: ImplementationSpecific, backend: {service: {name: web, port: {number: 80}}}}\n",
        ),
        one(
            "a",
            "nginx.ingress.kubernetes.io/app-root: /home,
             nginx.ingress.kubernetes.io/proxy-read-timeout: '5'",
            "a.test",
            ROOT_TO_WEB,
        ),
        "apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: {name: t, namespace: default}
spec:
  tls: [{hosts: [t.test], secretName: t-tls}]
  defaultBackend: {service: {name: web, port: {number: 80}}}
  rules:
  - host: t.test
    http: {paths: [{path: /api, pathType: Prefix, backend: {service: {name: web, port: {number: 80}}}}]}
"
        .to_owned(),
    ];
    let forward = convert(&ingresses(&yaml.join("---\n")), &[], &options());
    let mut reversed_input = yaml.clone();
    reversed_input.reverse();
    let reversed = convert(&ingresses(&reversed_input.join("---\n")), &[], &options());
    let text = to_yaml(&forward).expect("yaml");
    assert_eq!(text, to_yaml(&reversed).expect("yaml"));
    let order: Vec<String> = names(&forward);
    let mut sorted = order.clone();
    let rank = |n: &String| {
        [
            "Gateway ",
            "ReferenceGrant ",
            "HTTPRoute ",
            "GRPCRoute ",
            "BackendTLSPolicy ",
        ]
        .iter()
        .position(|k| n.starts_with(k))
    };
    sorted.sort_by(|a, b| (rank(a), a).cmp(&(rank(b), b)));
    assert_eq!(order, sorted);

    let mut inputs = sluice_routing::Inputs::default();
    inputs.gateway_classes.push(Arc::new(GatewayClass {
        metadata: ObjectMeta {
            name: Some("sluice".into()),
            ..ObjectMeta::default()
        },
        spec: sluice_routing::gateway::GatewayClassSpec {
            controller_name: sluice_routing::DEFAULT_GATEWAY_CONTROLLER_NAME.into(),
            parameters_ref: None,
        },
        status: None,
    }));
    let docs: Vec<serde_json::Value> = yaml_serde::Deserializer::from_str(&text)
        .map(|d| serde::Deserialize::deserialize(d).expect("a YAML document"))
        .collect();
    assert_eq!(docs.len(), forward.objects.len());
    for (doc, emitted) in docs.into_iter().zip(&forward.objects) {
        match (&emitted.object, doc["kind"].as_str()) {
            (Object::Gateway(g), Some("Gateway")) => {
                let back: Gateway = serde_json::from_value(doc).expect("Gateway");
                assert_eq!(&back, &**g);
                inputs.gateways.push(Arc::new(back));
            }
            (Object::HttpRoute(r), Some("HTTPRoute")) => {
                let back: HttpRoute = serde_json::from_value(doc).expect("HTTPRoute");
                assert_eq!(&back, r);
                inputs.http_routes.push(Arc::new(back));
            }
            (other, kind) => panic!("{} read back as {kind:?}", other.display_name()),
        }
    }
    let compiled = sluice_routing::compile(&inputs, &sluice_routing::CompileOptions::default());
    let routes = &compiled.gateway.routes;
    assert_eq!(routes.len(), inputs.http_routes.len());
    for route in routes {
        for parent in &route.parents {
            let accepted = parent.conditions.iter().find(|c| c.type_ == "Accepted");
            assert!(
                accepted.is_some_and(|c| c.status),
                "{:?} {:?}: {:?}",
                route.object,
                parent.parent_ref,
                parent.conditions
            );
        }
        assert!(
            !route.parents.is_empty(),
            "{:?} attached nowhere",
            route.object
        );
    }
}

/// More paths than the CRDs' 16 rules per route: the host's rules are split over routes
/// with the same hostnames and parents, in order.
#[test]
fn more_than_16_rules_are_split_over_routes() {
    let paths: String = (0..20)
        .map(|i| {
            format!(
                "      - {{path: /p{i}, pathType: Prefix, backend: {{service: {{name: web, port: {{number: 80}}}}}}}}\n"
            )
        })
        .collect();
    let c = run(&one("many", "", "many.test", &paths));
    let first = route(&c, "many");
    let second = route(&c, "many-2");
    assert_eq!((first.spec.rules.len(), second.spec.rules.len()), (16, 4));
    assert_eq!(first.spec.hostnames, second.spec.hostnames);
    assert_eq!(first.spec.parent_refs, second.spec.parent_refs);
    assert_eq!(
        second.spec.rules[3].matches[0]
            .path
            .as_ref()
            .and_then(|p| p.value.as_deref()),
        Some("/p19")
    );
    assert_eq!(
        outcome(&c, "many").objects,
        ["HTTPRoute default/many", "HTTPRoute default/many-2"]
    );
}

/// The seconds a Gateway API duration denotes, if it matches the CRD's pattern
/// `^([0-9]{1,5}(h|m|s|ms)){1,4}$` (no `ms` is ever written here).
fn duration_seconds(d: &str) -> Option<u64> {
    let (mut total, mut parts, mut digits) = (0u64, 0, String::new());
    for c in d.chars() {
        if c.is_ascii_digit() {
            digits.push(c);
            continue;
        }
        if digits.is_empty() || digits.len() > 5 {
            return None;
        }
        let n: u64 = digits.parse().ok()?;
        total += n * match c {
            'h' => 3600,
            'm' => 60,
            's' => 1,
            _ => return None,
        };
        digits.clear();
        parts += 1;
    }
    (digits.is_empty() && (1..=4).contains(&parts)).then_some(total)
}

proptest::proptest! {
    /// Every timeout nginx could be given (up to 99,999 hours) is written as a duration the
    /// CRD accepts, denoting the same number of seconds.
    #[test]
    fn timeouts_are_valid_gateway_api_durations(secs in 1u64..99_999 * 3600) {
        let d = super::annotations::gateway_duration(secs);
        proptest::prop_assert_eq!(duration_seconds(&d), Some(secs), "{}", d);
    }
}

/// `ConvertOptions::config_map` from a ConfigMap's `data`.
fn with_config_map(data: &[(&str, &str)]) -> ConvertOptions {
    let map: k8s_openapi::api::core::v1::ConfigMap = serde_json::from_value(serde_json::json!({
        "metadata": {"namespace": "ingress-nginx", "name": "controller"},
        "data": data.iter().map(|(k, v)| (k.to_string(), v.to_string()))
            .collect::<std::collections::BTreeMap<String, String>>(),
    }))
    .expect("ConfigMap");
    ConvertOptions {
        config_map: Some(super::ConfigMapInForce {
            name: "ingress-nginx/controller".into(),
            config: sluice_routing::config_map::read(&map, None).0,
        }),
        ..options()
    }
}

/// What ingress-nginx's ConfigMap restricted on every Ingress (ingress-nginx docs
/// "ConfigMaps": `global-auth-url`, `whitelist-source-range`, `block-user-agents`) is a
/// restriction of each Ingress it applies to: the route is emitted closed, unless
/// `--allow-open`, and the report names the ConfigMap. An Ingress the global auth does
/// not guard (`enable-global-auth: "false"`, or an `auth-url` of its own) is not closed by
/// it.
#[test]
fn the_config_maps_restrictions_close_the_routes_they_applied_to() {
    let yaml = [
        one("plain", "", "plain.test", ROOT_TO_WEB),
        one(
            "opted-out",
            "nginx.ingress.kubernetes.io/enable-global-auth: \"false\"",
            "out.test",
            ROOT_TO_WEB,
        ),
        one(
            "own-auth",
            "nginx.ingress.kubernetes.io/auth-url: http://mine.test/check",
            "own.test",
            ROOT_TO_WEB,
        ),
    ]
    .join("---\n");
    let ingresses = ingresses(&yaml);

    // Without the ConfigMap, nothing restricts the first two.
    let none = convert(&ingresses, &[], &options());
    assert!(!outcome(&none, "plain").closed);
    assert!(!outcome(&none, "opted-out").closed);

    let auth = convert(
        &ingresses,
        &[],
        &with_config_map(&[("global-auth-url", "http://auth.test/check")]),
    );
    let plain = outcome(&auth, "plain");
    assert!(plain.restricts_access && plain.closed);
    assert!(route(&auth, "plain").spec.rules[0].backend_refs.is_empty());
    assert!(
        not_carried(&auth, "plain")
            .iter()
            .any(|n| n.contains("ConfigMap ingress-nginx/controller global-auth-url")),
        "{:?}",
        not_carried(&auth, "plain")
    );
    assert!(
        to_yaml(&auth)
            .expect("yaml")
            .contains("global-auth-url (ConfigMap ingress-nginx/controller)")
    );
    assert!(!outcome(&auth, "opted-out").closed);
    assert_eq!(
        route(&auth, "opted-out").spec.rules[0].backend_refs.len(),
        1
    );
    // Closed by its own auth-url, not named as guarded by the global one.
    assert!(outcome(&auth, "own-auth").closed);
    assert!(
        !not_carried(&auth, "own-auth")
            .iter()
            .any(|n| n.contains("global-auth-url")),
    );

    // A source range of the ConfigMap is every Ingress's default, named as the ConfigMap's.
    let ranges = convert(
        &ingresses,
        &[],
        &with_config_map(&[("whitelist-source-range", "10.0.0.0/8")]),
    );
    for name in ["plain", "opted-out", "own-auth"] {
        assert!(outcome(&ranges, name).closed, "{name}");
    }
    assert!(
        not_carried(&ranges, "plain").iter().any(|n| n
            .contains("whitelist-source-range (default of ConfigMap ingress-nginx/controller)")),
        "{:?}",
        not_carried(&ranges, "plain")
    );

    // The block lists refuse clients on every route.
    let blocked = convert(
        &ingresses,
        &[],
        &with_config_map(&[("block-user-agents", "~*curl")]),
    );
    assert!(outcome(&blocked, "opted-out").closed);

    // --allow-open emits them open, and says so.
    let open = convert(
        &ingresses,
        &[],
        &ConvertOptions {
            allow_open: true,
            ..with_config_map(&[("global-auth-url", "http://auth.test/check")])
        },
    );
    assert!(!outcome(&open, "plain").closed);
    assert!(report(&open).contains("ANSWER EVERYONE"));
}

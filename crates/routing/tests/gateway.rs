//! Gateway API compiled into the route table: the GATEWAY-HTTP and GATEWAY-GRPC conformance scenarios that
//! are a pure function of the objects (class, listeners, attachment, host name
//! intersection, match precedence, backends and filters), and the statuses they produce.
//! The same scenarios run end to end against a real API server in the controller's tests.

mod common;

use std::collections::HashMap;
use std::sync::Arc;

use common::*;
use serde_json::{Value, json};
use sluice_routing::gateway::{
    Condition, Gateway, GatewayClass, GatewayStatuses, HttpRoute, ReferenceGrant,
};
use sluice_routing::{Compiled, HeaderLookup, Inputs, RequestInfo, RouteTable, compile};

const GW_CONTROLLER: &str = "sluice.dev/gateway-controller";

fn from<T: serde::de::DeserializeOwned>(v: Value) -> Arc<T> {
    Arc::new(serde_json::from_value(v).expect("test object deserialises"))
}

fn class(name: &str, controller: &str) -> Arc<GatewayClass> {
    from(
        json!({"metadata": {"name": name, "generation": 3}, "spec": {"controllerName": controller}}),
    )
}

fn gateway(ns: &str, name: &str, listeners: Value) -> Arc<Gateway> {
    from(
        json!({"metadata": {"namespace": ns, "name": name, "generation": 2},
        "spec": {"gatewayClassName": "sluice", "listeners": listeners}}),
    )
}

fn http_listener(name: &str, hostname: Option<&str>) -> Value {
    let mut l = json!({"name": name, "port": 80, "protocol": "HTTP"});
    if let Some(h) = hostname {
        l["hostname"] = json!(h);
    }
    l
}

fn route(ns: &str, name: &str, age: u32, spec: Value) -> Arc<HttpRoute> {
    from(
        json!({"metadata": {"namespace": ns, "name": name, "generation": 5,
        "creationTimestamp": ts(age)}, "spec": spec}),
    )
}

fn backend(name: &str, port: i32) -> Value {
    json!({"name": name, "port": port})
}

/// Inputs with our GatewayClass, Services `web`, `api`, `v2` (port 80, one ready endpoint
/// each) in namespaces `default` and `other`, and the given objects.
fn world(gateways: Vec<Arc<Gateway>>, routes: Vec<Arc<HttpRoute>>) -> Inputs {
    let mut inputs = Inputs {
        gateway_classes: vec![
            class("sluice", GW_CONTROLLER),
            class("theirs", "example.com/other"),
        ]
        .into(),
        gateways: gateways.into(),
        http_routes: routes.into(),
        ..Inputs::default()
    };
    let mut ip = 1;
    for ns in ["default", "other"] {
        for svc in ["web", "api", "v2"] {
            inputs.services.push(service(ns, svc, &[(None, 80)]));
            let addr = format!("10.0.0.{ip}");
            ip += 1;
            inputs.endpoint_slices.push(slice(
                ns,
                &format!("{svc}-1"),
                svc,
                &[(None, 8080)],
                &[(&[addr.as_str()], Some(true))],
            ));
        }
    }
    inputs
}

struct Headers(Vec<(&'static str, &'static str)>);

impl HeaderLookup for Headers {
    fn header(&self, name: &str) -> Option<&[u8]> {
        self.0
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_bytes())
    }
}

/// A request; `target` is `path?query`.
struct Req {
    https: bool,
    listener: Option<std::net::SocketAddr>,
    host: &'static str,
    target: &'static str,
    method: &'static str,
    headers: Headers,
}

fn get(host: &'static str, target: &'static str) -> Req {
    Req {
        https: false,
        listener: None,
        host,
        target,
        method: "GET",
        headers: Headers(Vec::new()),
    }
}

impl Req {
    fn header(mut self, name: &'static str, value: &'static str) -> Req {
        self.headers.0.push((name, value));
        self
    }
    fn method(mut self, method: &'static str) -> Req {
        self.method = method;
        self
    }
    fn https(mut self) -> Req {
        self.https = true;
        self
    }
    /// Arrives on a Gateway's own socket.
    fn on(mut self, socket: &str) -> Req {
        self.listener = Some(socket.parse().expect("socket address"));
        self
    }
}

/// `source route/service` of the entry a request gets, or `None` (404).
fn answer(table: &RouteTable, req: &Req) -> Option<String> {
    let (path, query) = req.target.split_once('?').unwrap_or((req.target, ""));
    let info = RequestInfo {
        listener: req.listener,
        https: req.https,
        host: req.host,
        path,
        query,
        method: req.method,
        headers: &req.headers,
    };
    let id = table.route_request(&info)?;
    let entry = table.entry(id);
    Some(format!(
        "{}->{}",
        entry.source.name, entry.backend.service.name
    ))
}

fn conditions(list: &[Condition]) -> Vec<(&'static str, bool, &'static str)> {
    list.iter().map(|c| (c.type_, c.status, c.reason)).collect()
}

fn route_status<'a>(
    s: &'a GatewayStatuses,
    name: &str,
) -> &'a sluice_routing::gateway::RouteStatus {
    s.routes
        .iter()
        .find(|r| r.object.name == name)
        .unwrap_or_else(|| panic!("no status for route {name}: {s:#?}"))
}

fn accepted(s: &GatewayStatuses, name: &str) -> (bool, &'static str) {
    let c = &route_status(s, name).parents[0].conditions[0];
    assert_eq!(c.type_, "Accepted");
    (c.status, c.reason)
}

fn resolved(s: &GatewayStatuses, name: &str) -> (bool, &'static str) {
    let c = &route_status(s, name).parents[0].conditions[1];
    assert_eq!(c.type_, "ResolvedRefs");
    (c.status, c.reason)
}

fn compiled(inputs: &Inputs) -> Compiled {
    compile(inputs, &sluice_routing::CompileOptions::default())
}

#[test]
fn gateway_class_status_is_written_only_for_ours() {
    let mut inputs = world(vec![], vec![]);
    inputs.gateway_classes.push(from(json!({"metadata": {"name": "params", "generation": 1},
        "spec": {"controllerName": GW_CONTROLLER, "parametersRef": {"group": "x", "kind": "y", "name": "z"}}})));
    let out = compiled(&inputs);
    let names: Vec<&str> = out
        .gateway
        .classes
        .iter()
        .map(|c| c.object.name.as_str())
        .collect();
    assert_eq!(names, ["params", "sluice"]);
    let ours = &out.gateway.classes[1];
    assert_eq!(ours.generation, Some(3), "observedGeneration");
    assert_eq!(
        conditions(&ours.conditions)[0],
        ("Accepted", true, "Accepted")
    );
    assert_eq!(
        conditions(&out.gateway.classes[0].conditions)[0],
        ("Accepted", false, "InvalidParameters")
    );
}

#[test]
fn gateways_of_other_classes_are_left_alone() {
    let mut theirs = (*gateway("default", "theirs", json!([http_listener("http", None)]))).clone();
    theirs.spec.gateway_class_name = "theirs".into();
    let inputs = world(
        vec![
            Arc::new(theirs),
            gateway("default", "gw", json!([http_listener("http", None)])),
        ],
        vec![route(
            "default",
            "r",
            1,
            json!({"parentRefs": [{"name": "theirs"}],
            "rules": [{"backendRefs": [backend("web", 80)]}]}),
        )],
    );
    let out = compiled(&inputs);
    assert_eq!(out.gateway.gateways.len(), 1);
    assert_eq!(out.gateway.gateways[0].gateway.object.name, "gw");
    assert!(out.gateway.routes.is_empty(), "{:?}", out.gateway.routes);
    assert_eq!(answer(&out.table, &get("a.example", "/")), None);
}

#[test]
fn listener_conditions_and_attached_routes() {
    let inputs = world(
        vec![gateway(
            "default",
            "gw",
            json!([
                http_listener("http", None),
                {"name": "sctp", "port": 9000, "protocol": "SCTP"},
                {"name": "https", "port": 443, "protocol": "HTTPS", "hostname": "secure.example",
                 "tls": {"certificateRefs": [{"name": "missing"}]}},
                {"name": "kinds", "port": 8080, "protocol": "HTTP",
                 "allowedRoutes": {"kinds": [{"kind": "TCPRoute"}]}},
            ]),
        )],
        vec![
            route(
                "default",
                "a",
                1,
                json!({"parentRefs": [{"name": "gw"}], "rules": [{"backendRefs": [backend("web", 80)]}]}),
            ),
            route(
                "default",
                "b",
                2,
                json!({"parentRefs": [{"name": "gw", "sectionName": "http"}], "rules": [{"backendRefs": [backend("api", 80)]}]}),
            ),
        ],
    );
    let out = compiled(&inputs);
    let gw = &out.gateway.gateways[0];
    assert_eq!(gw.gateway.generation, Some(2));
    // One listener (sctp) is not Accepted, others are: Accepted True, ListenersNotValid
    // (Gateway API conformance GatewayListenerUnsupportedProtocol).
    assert_eq!(
        conditions(&gw.gateway.conditions),
        [
            ("Accepted", true, "ListenersNotValid"),
            ("Programmed", true, "Programmed")
        ]
    );
    let by_name: HashMap<&str, _> = gw.listeners.iter().map(|l| (l.name.as_str(), l)).collect();
    assert_eq!(by_name["http"].attached_routes, 2);
    assert_eq!(by_name["http"].supported_kinds[0].kind, "HTTPRoute");
    assert_eq!(
        conditions(&by_name["sctp"].conditions)[0],
        ("Accepted", false, "UnsupportedProtocol")
    );
    assert!(by_name["sctp"].supported_kinds.is_empty());
    assert_eq!(
        conditions(&by_name["https"].conditions)[2],
        ("ResolvedRefs", false, "InvalidCertificateRef")
    );
    assert_eq!(
        conditions(&by_name["kinds"].conditions)[2],
        ("ResolvedRefs", false, "InvalidRouteKinds")
    );
    assert!(by_name["kinds"].supported_kinds.is_empty());
    for l in ["sctp", "kinds"] {
        assert_eq!(by_name[l].attached_routes, 0, "{l}");
    }
    // Accepted with an unresolved certificate: route `a` attaches (and is counted) but is
    // not served there (Gateway API conformance GatewayWithAttachedRoutes, "AttachedRoutes
    // set even when Gateway has unresolved refs").
    assert_eq!(by_name["https"].attached_routes, 1);
    assert_eq!(
        conditions(&by_name["https"].conditions)[1],
        ("Programmed", false, "Invalid")
    );
    assert_eq!(
        answer(&out.table, &get("secure.example", "/").https()),
        None
    );
}

/// Gateway API conformance GatewayListenerUnsupportedProtocol: a Gateway none of whose
/// listeners is Accepted is not Accepted (ListenersNotValid), and a listener of an
/// unsupported protocol supports no route kind.
#[test]
fn a_gateway_without_an_accepted_listener_is_not_accepted() {
    let inputs = world(
        vec![gateway(
            "default",
            "gw",
            json!([{"name": "invalid", "port": 1111, "protocol": "INVALID"}]),
        )],
        vec![],
    );
    let out = compiled(&inputs);
    let gw = &out.gateway.gateways[0];
    assert_eq!(
        conditions(&gw.gateway.conditions),
        [
            ("Accepted", false, "ListenersNotValid"),
            ("Programmed", false, "Invalid")
        ]
    );
    assert!(gw.listeners[0].supported_kinds.is_empty());
}

/// Gateway API conformance GatewayInvalidParametersRef: sluice takes no infrastructure
/// parameters, so a Gateway naming some is not Accepted (InvalidParameters), and serves
/// and takes no routes.
#[test]
fn a_gateway_with_infrastructure_parameters_is_refused() {
    let with_params: Arc<Gateway> = from(json!({
        "metadata": {"namespace": "default", "name": "gw", "generation": 1},
        "spec": {"gatewayClassName": "sluice", "listeners": [http_listener("http", None)],
                 "infrastructure": {"parametersRef":
                     {"group": "invalid.io", "kind": "InvalidParameters", "name": "invalid"}}},
    }));
    let inputs = world(
        vec![with_params],
        vec![route(
            "default",
            "r",
            1,
            json!({"parentRefs": [{"name": "gw"}], "rules": [{"backendRefs": [backend("web", 80)]}]}),
        )],
    );
    let out = compiled(&inputs);
    let gw = &out.gateway.gateways[0];
    assert_eq!(
        conditions(&gw.gateway.conditions),
        [
            ("Accepted", false, "InvalidParameters"),
            ("Programmed", false, "Invalid")
        ]
    );
    assert_eq!(gw.listeners[0].attached_routes, 0);
    assert_eq!(
        accepted(&out.gateway, "r"),
        (false, "NotAllowedByListeners")
    );
    assert_eq!(answer(&out.table, &get("any.example", "/")), None);
}

#[test]
fn same_namespace_by_default_all_and_selector() {
    let mut inputs = world(
        vec![gateway(
            "default",
            "gw",
            json!([
                {"name": "same", "port": 80, "protocol": "HTTP", "hostname": "same.example"},
                {"name": "all", "port": 80, "protocol": "HTTP", "hostname": "all.example",
                 "allowedRoutes": {"namespaces": {"from": "All"}}},
                {"name": "sel", "port": 80, "protocol": "HTTP", "hostname": "sel.example",
                 "allowedRoutes": {"namespaces": {"from": "Selector", "selector": {"matchLabels": {"team": "a"}}}}},
            ]),
        )],
        vec![
            route(
                "other",
                "r",
                1,
                json!({"parentRefs": [{"name": "gw", "namespace": "default"}],
                "rules": [{"backendRefs": [backend("web", 80)]}]}),
            ),
            route(
                "other",
                "only-same",
                2,
                json!({"parentRefs": [{"name": "gw", "namespace": "default", "sectionName": "same"}],
                "rules": [{"backendRefs": [backend("web", 80)]}]}),
            ),
        ],
    );
    inputs.namespaces = vec![from(
        json!({"metadata": {"name": "other", "labels": {"team": "a"}}}),
    )]
    .into();
    let out = compiled(&inputs);
    assert_eq!(accepted(&out.gateway, "r"), (true, "Accepted"));
    assert_eq!(
        accepted(&out.gateway, "only-same"),
        (false, "NotAllowedByListeners")
    );
    assert_eq!(
        answer(&out.table, &get("all.example", "/")).as_deref(),
        Some("r->web")
    );
    assert_eq!(
        answer(&out.table, &get("sel.example", "/")).as_deref(),
        Some("r->web")
    );
    assert_eq!(answer(&out.table, &get("same.example", "/")), None);

    // The namespace loses its label: the selector no longer admits the route.
    inputs.namespaces = vec![from(
        json!({"metadata": {"name": "other", "labels": {"team": "b"}}}),
    )]
    .into();
    let out = compiled(&inputs);
    assert_eq!(answer(&out.table, &get("sel.example", "/")), None);
    assert_eq!(
        answer(&out.table, &get("all.example", "/")).as_deref(),
        Some("r->web")
    );
}

#[test]
fn section_name_and_port_must_name_a_listener() {
    let inputs = world(
        vec![gateway(
            "default",
            "gw",
            json!([http_listener("http", None)]),
        )],
        vec![
            route(
                "default",
                "bad-section",
                1,
                json!({"parentRefs": [{"name": "gw", "sectionName": "nope"}]}),
            ),
            route(
                "default",
                "bad-port",
                2,
                json!({"parentRefs": [{"name": "gw", "port": 81}]}),
            ),
            route(
                "default",
                "good-port",
                3,
                json!({"parentRefs": [{"name": "gw", "port": 80}]}),
            ),
        ],
    );
    let out = compiled(&inputs);
    assert_eq!(
        accepted(&out.gateway, "bad-section"),
        (false, "NoMatchingParent")
    );
    assert_eq!(
        accepted(&out.gateway, "bad-port"),
        (false, "NoMatchingParent")
    );
    assert_eq!(accepted(&out.gateway, "good-port"), (true, "Accepted"));
    // A rule without backendRefs answers 500 (the spec).
    let id = out
        .table
        .route_request(&RequestInfo {
            listener: None,
            https: false,
            host: "x",
            path: "/",
            query: "",
            method: "GET",
            headers: &Headers(vec![]),
        })
        .expect("routed");
    assert_eq!(out.table.entry(id).fixed_status, Some(500));
}

/// Conformance: HTTPRouteHostnameIntersection and HTTPRouteListenerHostnameMatching.
#[test]
fn host_names_intersect_with_listeners() {
    let inputs = world(
        vec![gateway(
            "default",
            "gw",
            json!([
                {"name": "wild", "port": 80, "protocol": "HTTP", "hostname": "*.wildcard.io"},
                {"name": "exact", "port": 80, "protocol": "HTTP", "hostname": "very.specific.com"},
            ]),
        )],
        vec![
            route(
                "default",
                "specific",
                1,
                json!({"parentRefs": [{"name": "gw"}],
                "hostnames": ["non.matching.com", "*.nonmatchingwildcard.io", "very.specific.com"],
                "rules": [{"backendRefs": [backend("web", 80)]}]}),
            ),
            route(
                "default",
                "wild-sub",
                2,
                json!({"parentRefs": [{"name": "gw"}],
                "hostnames": ["*.anotherwildcard.io", "foo.wildcard.io", "bar.wildcard.io"],
                "rules": [{"backendRefs": [backend("api", 80)]}]}),
            ),
            route(
                "default",
                "wider",
                3,
                json!({"parentRefs": [{"name": "gw"}],
                "hostnames": ["*.io"],
                "rules": [{"backendRefs": [backend("v2", 80)]}]}),
            ),
            route(
                "default",
                "none",
                4,
                json!({"parentRefs": [{"name": "gw"}],
                "hostnames": ["nothing.example"],
                "rules": [{"backendRefs": [backend("v2", 80)]}]}),
            ),
        ],
    );
    let out = compiled(&inputs);
    let t = &out.table;
    assert_eq!(
        answer(t, &get("very.specific.com", "/")).as_deref(),
        Some("specific->web")
    );
    assert_eq!(answer(t, &get("non.matching.com", "/")), None);
    assert_eq!(
        answer(t, &get("foo.wildcard.io", "/")).as_deref(),
        Some("wild-sub->api")
    );
    assert_eq!(
        answer(t, &get("bar.wildcard.io", "/")).as_deref(),
        Some("wild-sub->api")
    );
    // `*.io` ∩ `*.wildcard.io` = `*.wildcard.io`, several labels deep.
    assert_eq!(
        answer(t, &get("a.b.wildcard.io", "/")).as_deref(),
        Some("wider->v2")
    );
    assert_eq!(answer(t, &get("wildcard.io", "/")), None);
    assert_eq!(answer(t, &get("x.anotherwildcard.io", "/")), None);
    assert_eq!(
        accepted(&out.gateway, "none"),
        (false, "NoMatchingListenerHostname")
    );
    assert_eq!(accepted(&out.gateway, "wider"), (true, "Accepted"));
}

/// Conformance: HTTPRouteMatching, HTTPRouteHeaderMatching, HTTPRouteQueryParamMatching,
/// HTTPRouteMethodMatching, HTTPRouteMatchingAcrossRoutes.
#[test]
fn match_precedence_follows_the_spec() {
    let gw = gateway("default", "gw", json!([http_listener("http", None)]));
    let routes = vec![
        route(
            "default",
            "paths",
            1,
            json!({"parentRefs": [{"name": "gw"}], "hostnames": ["m.example"],
            "rules": [
                {"matches": [{"path": {"type": "PathPrefix", "value": "/"}}], "backendRefs": [backend("web", 80)]},
                {"matches": [{"path": {"type": "Exact", "value": "/v2"}}], "backendRefs": [backend("v2", 80)]},
                {"matches": [{"path": {"type": "PathPrefix", "value": "/v2/"}}], "backendRefs": [backend("api", 80)]},
                {"matches": [{"path": {"type": "RegularExpression", "value": "/re/[0-9]+"}}], "backendRefs": [backend("v2", 80)]},
            ]}),
        ),
        route(
            "default",
            "headers",
            2,
            json!({"parentRefs": [{"name": "gw"}], "hostnames": ["m.example"],
            "rules": [
                {"matches": [{"path": {"value": "/h"}, "headers": [{"name": "version", "value": "one"}]}], "backendRefs": [backend("web", 80)]},
                {"matches": [{"path": {"value": "/h"}, "headers": [{"name": "version", "value": "two"}, {"name": "color", "value": "orange"}]}], "backendRefs": [backend("v2", 80)]},
                {"matches": [{"path": {"value": "/h"}, "headers": [{"name": "color", "type": "RegularExpression", "value": "ora.*"}]}], "backendRefs": [backend("api", 80)]},
                {"matches": [{"path": {"value": "/h"}, "queryParams": [{"name": "animal", "value": "whale"}]}], "backendRefs": [backend("v2", 80)]},
                {"matches": [{"path": {"value": "/h"}, "method": "POST"}], "backendRefs": [backend("web", 80)]},
            ]}),
        ),
        // Younger route, same path as `paths`' first rule: the older one wins.
        route(
            "default",
            "younger",
            3,
            json!({"parentRefs": [{"name": "gw"}], "hostnames": ["m.example"],
            "rules": [{"matches": [{"path": {"value": "/"}}], "backendRefs": [backend("api", 80)]}]}),
        ),
    ];
    let out = compiled(&world(vec![gw], routes));
    let t = &out.table;
    let a = |req: Req| answer(t, &req).unwrap_or_else(|| "404".into());
    assert_eq!(a(get("m.example", "/")), "paths->web");
    assert_eq!(
        a(get("m.example", "/v2")),
        "paths->v2",
        "Exact beats PathPrefix"
    );
    assert_eq!(a(get("m.example", "/v2/x")), "paths->api", "longest prefix");
    assert_eq!(
        a(get("m.example", "/v2x")),
        "paths->web",
        "prefixes match whole elements"
    );
    assert_eq!(
        a(get("m.example", "/re/42")),
        "paths->v2",
        "regex matches the whole path"
    );
    assert_eq!(a(get("m.example", "/re/42x")), "paths->web");
    // Headers: more header matches first; a method match before any header count.
    assert_eq!(
        a(get("m.example", "/h").header("Version", "one")),
        "headers->web"
    );
    assert_eq!(
        a(get("m.example", "/h")
            .header("version", "two")
            .header("color", "orange")),
        "headers->v2"
    );
    assert_eq!(
        a(get("m.example", "/h")
            .header("version", "two")
            .header("color", "orangered")),
        "headers->api"
    );
    assert_eq!(
        a(get("m.example", "/h").header("version", "two")),
        "paths->web",
        "falls back to a shorter path"
    );
    assert_eq!(a(get("m.example", "/h?animal=whale")), "headers->v2");
    assert_eq!(a(get("m.example", "/h?animal=dolphin")), "paths->web");
    assert_eq!(
        a(get("m.example", "/h")
            .method("POST")
            .header("version", "one")),
        "headers->web"
    );
    assert_eq!(
        a(get("other.example", "/")),
        "404",
        "no route for other host names"
    );
}

#[test]
fn http_and_https_listeners_serve_their_own_routes_and_ingress_shares_the_table() {
    let mut inputs = world(
        vec![gateway(
            "default",
            "gw",
            json!([
                {"name": "http", "port": 80, "protocol": "HTTP", "hostname": "plain.example"},
                {"name": "https", "port": 443, "protocol": "HTTPS", "hostname": "secure.example",
                 "tls": {"certificateRefs": [{"name": "cert"}]}},
            ]),
        )],
        vec![route(
            "default",
            "r",
            1,
            json!({"parentRefs": [{"name": "gw"}],
            "rules": [{"backendRefs": [backend("api", 80)]}]}),
        )],
    );
    inputs.secrets = vec![tls_secret("default", "cert", CERT_PEM, PKCS8_PEM)].into();
    inputs.ingress_classes = vec![our_class()].into();
    inputs.ingresses = vec![ingress(
        "default",
        "ing",
        Some(1),
        rules(vec![
            rule("ingress.example", vec![path("/", "Prefix", "web", 80)]),
            rule("secure.example", vec![path("/", "Prefix", "web", 80)]),
        ]),
    )]
    .into();
    let out = compiled(&inputs);
    let t = &out.table;
    assert_eq!(
        answer(t, &get("plain.example", "/")).as_deref(),
        Some("r->api")
    );
    assert_eq!(
        answer(t, &get("secure.example", "/").https()).as_deref(),
        Some("r->api")
    );
    // On plain HTTP, secure.example is not a Gateway host: the Ingress rule answers.
    assert_eq!(
        answer(t, &get("secure.example", "/")).as_deref(),
        Some("ing->web")
    );
    assert_eq!(answer(t, &get("plain.example", "/").https()), None);
    assert_eq!(
        answer(t, &get("ingress.example", "/x")).as_deref(),
        Some("ing->web")
    );
    assert_eq!(
        answer(t, &get("ingress.example", "/x").https()).as_deref(),
        Some("ing->web")
    );
    assert!(t.certificate("secure.example").is_some());
    let routes: Vec<String> = t
        .routes()
        .iter()
        .map(|r| format!("{} {} {}", r.host, r.path_type, r.path))
        .collect();
    assert!(
        routes.contains(&"secure.example Prefix /".to_owned()),
        "{routes:?}"
    );
}

/// Conformance: HTTPRouteWeight, HTTPRouteInvalidBackendRefUnknownKind,
/// HTTPRouteInvalidCrossNamespaceBackendRef, HTTPRouteReferenceGrant,
/// HTTPRouteInvalidNonExistentBackendRef.
#[test]
fn backends_weights_and_invalid_references() {
    let gw = gateway("default", "gw", json!([http_listener("http", None)]));
    let routes = vec![
        route(
            "default",
            "weights",
            1,
            json!({"parentRefs": [{"name": "gw"}], "hostnames": ["w.example"],
            "rules": [{"backendRefs": [
                {"name": "web", "port": 80, "weight": 70},
                {"name": "api", "port": 80, "weight": 30},
                {"name": "v2", "port": 80, "weight": 0}]}]}),
        ),
        route(
            "default",
            "zero",
            2,
            json!({"parentRefs": [{"name": "gw"}], "hostnames": ["z.example"],
            "rules": [{"backendRefs": [{"name": "web", "port": 80, "weight": 0}]}]}),
        ),
        route(
            "default",
            "kind",
            3,
            json!({"parentRefs": [{"name": "gw"}], "hostnames": ["k.example"],
            "rules": [{"backendRefs": [{"group": "unknown.io", "kind": "Thing", "name": "web", "port": 80}]}]}),
        ),
        route(
            "default",
            "missing",
            4,
            json!({"parentRefs": [{"name": "gw"}], "hostnames": ["m.example"],
            "rules": [{"backendRefs": [backend("nope", 80)]}]}),
        ),
        route(
            "default",
            "cross",
            5,
            json!({"parentRefs": [{"name": "gw"}], "hostnames": ["c.example"],
            "rules": [{"backendRefs": [{"name": "web", "namespace": "other", "port": 80}]}]}),
        ),
    ];
    let mut inputs = world(vec![gw], routes);
    let out = compiled(&inputs);
    let t = &out.table;
    let entry = |host: &'static str| {
        let id = t
            .route_request(&RequestInfo {
                listener: None,
                https: false,
                host,
                path: "/",
                query: "",
                method: "GET",
                headers: &Headers(vec![]),
            })
            .expect("routed");
        t.entry(id)
    };
    let w = entry("w.example");
    let split: Vec<(String, u32, bool)> = w
        .split
        .iter()
        .map(|b| (b.backend.service.name.clone(), b.weight, b.usable))
        .collect();
    assert_eq!(
        split,
        [
            ("web".into(), 70, true),
            ("api".into(), 30, true),
            ("v2".into(), 0, true)
        ]
    );
    assert_eq!(
        entry("z.example").fixed_status,
        Some(500),
        "all weights 0 -> 500"
    );
    assert!(!entry("k.example").split[0].usable);
    assert_eq!(resolved(&out.gateway, "kind"), (false, "InvalidKind"));
    assert!(!entry("m.example").split[0].usable);
    assert_eq!(
        resolved(&out.gateway, "missing"),
        (false, "BackendNotFound")
    );
    assert!(!entry("c.example").split[0].usable);
    assert_eq!(resolved(&out.gateway, "cross"), (false, "RefNotPermitted"));
    assert_eq!(
        accepted(&out.gateway, "cross"),
        (true, "Accepted"),
        "still accepted"
    );
    assert_eq!(resolved(&out.gateway, "weights"), (true, "ResolvedRefs"));

    // A ReferenceGrant in `other` allows the cross-namespace reference.
    let grant: Arc<ReferenceGrant> = from(json!({"metadata": {"namespace": "other", "name": "g"},
        "spec": {"from": [{"group": "gateway.networking.k8s.io", "kind": "HTTPRoute", "namespace": "default"}],
                 "to": [{"group": "", "kind": "Service"}]}}));
    inputs.reference_grants = vec![grant].into();
    let out = compiled(&inputs);
    assert_eq!(resolved(&out.gateway, "cross"), (true, "ResolvedRefs"));
    let id = out
        .table
        .route_request(&RequestInfo {
            listener: None,
            https: false,
            host: "c.example",
            path: "/",
            query: "",
            method: "GET",
            headers: &Headers(vec![]),
        })
        .expect("routed");
    let e = out.table.entry(id);
    assert!(e.split.is_empty(), "one usable backend: no draw");
    assert_eq!(e.backend.service.namespace, "other");
    assert_eq!(e.backend.endpoints.len(), 1);
}

/// Conformance: HTTPRouteRedirect*, HTTPRouteRewrite*, HTTPRouteRequestHeaderModifier,
/// HTTPRouteResponseHeaderModifier, HTTPRouteRequestMirror, HTTPRouteTimeout*.
#[test]
fn filters_become_policy() {
    let gw = gateway(
        "default",
        "gw",
        json!([{"name": "http", "port": 8080, "protocol": "HTTP"}]),
    );
    let routes = vec![route(
        "default",
        "f",
        1,
        json!({"parentRefs": [{"name": "gw"}],
        "rules": [
            {"matches": [{"path": {"value": "/redirect"}}],
             "filters": [{"type": "RequestRedirect", "requestRedirect": {"hostname": "example.org",
                "path": {"type": "ReplacePrefixMatch", "replacePrefixMatch": "/new"}}}]},
            {"matches": [{"path": {"value": "/https"}}],
             "filters": [{"type": "RequestRedirect", "requestRedirect": {"scheme": "https", "statusCode": 301}}]},
            {"matches": [{"path": {"value": "/rewrite"}}],
             "filters": [{"type": "URLRewrite", "urlRewrite": {"hostname": "internal.example",
                "path": {"type": "ReplacePrefixMatch", "replacePrefixMatch": "/"}}}],
             "backendRefs": [backend("web", 80)]},
            {"matches": [{"path": {"value": "/headers"}}],
             "filters": [
                {"type": "RequestHeaderModifier", "requestHeaderModifier": {"set": [{"name": "X-Set", "value": "s"}],
                    "add": [{"name": "x-add", "value": "a"}], "remove": ["x-remove"]}},
                {"type": "ResponseHeaderModifier", "responseHeaderModifier": {"add": [{"name": "x-resp", "value": "r"}]}},
                {"type": "RequestMirror", "requestMirror": {"backendRef": {"name": "api", "port": 80}, "percent": 25}}],
             "timeouts": {"request": "10s", "backendRequest": "2s"},
             "backendRefs": [backend("web", 80)]},
        ]}),
    )];
    let out = compiled(&world(vec![gw], routes));
    assert_eq!(accepted(&out.gateway, "f"), (true, "Accepted"));
    let t = &out.table;
    let entry = |target: &'static str| {
        let id = t
            .route_request(&RequestInfo {
                listener: None,
                https: false,
                host: "h.example",
                path: target,
                query: "",
                method: "GET",
                headers: &Headers(vec![]),
            })
            .expect("routed");
        t.entry(id)
    };
    let redirect = entry("/redirect")
        .policy
        .request_redirect
        .clone()
        .expect("redirect");
    assert_eq!(redirect.status, 302);
    // No scheme, no port: the listener's port (8080) is kept.
    assert_eq!(
        redirect.location("http", "h.example", "/redirect/a", "q=1"),
        "http://example.org:8080/new/a?q=1"
    );
    let https = entry("/https")
        .policy
        .request_redirect
        .clone()
        .expect("redirect");
    assert_eq!(https.status, 301);
    // Scheme https without a port: 443, which is left out.
    assert_eq!(
        https.location("http", "h.example", "/https", ""),
        "https://h.example/https"
    );
    let rewrite = entry("/rewrite/x");
    assert_eq!(
        rewrite
            .policy
            .upstream_vhost
            .as_ref()
            .map(|v| v.to_str().unwrap_or("")),
        Some("internal.example")
    );
    let path = rewrite.policy.path_rewrite.as_ref().expect("path rewrite");
    assert_eq!(path.apply("/rewrite/x"), "/x");
    assert_eq!(path.apply("/rewrite"), "/");
    let h = entry("/headers");
    assert_eq!(h.policy.request_headers[0].0.as_str(), "x-set");
    assert_eq!(h.policy.request_headers_add[0].0.as_str(), "x-add");
    assert_eq!(h.policy.request_headers_remove[0].as_str(), "x-remove");
    assert_eq!(h.policy.response_headers_add[0].0.as_str(), "x-resp");
    assert_eq!(h.mirrors.len(), 1);
    assert_eq!(
        (
            h.mirrors[0].backend.service.name.as_str(),
            h.mirrors[0].numerator,
            h.mirrors[0].denominator
        ),
        ("api", 25, 100)
    );
    // The copies carry the request body (as nginx's `mirror_request_body on`); a route
    // without a mirror keeps streaming bodies.
    assert!(h.policy.mirror_request_body);
    assert!(!rewrite.policy.mirror_request_body);
    assert_eq!(
        h.policy.request_timeout,
        Some(std::time::Duration::from_secs(10))
    );
    assert_eq!(
        h.policy.backend_request_timeout,
        Some(std::time::Duration::from_secs(2))
    );
}

/// The HTTPRoute filter and the equivalent ingress-nginx / sluice annotation compile to
/// the same policy value.
#[test]
fn filters_and_annotations_produce_the_same_policy() {
    let gw = gateway("default", "gw", json!([http_listener("http", None)]));
    let routes = vec![route(
        "default",
        "f",
        1,
        json!({"parentRefs": [{"name": "gw"}], "hostnames": ["gw.example"],
        "rules": [{"filters": [
            {"type": "URLRewrite", "urlRewrite": {"hostname": "internal.example"}},
            {"type": "RequestHeaderModifier", "requestHeaderModifier": {"set": [{"name": "x-team", "value": "blue"}]}}],
          "backendRefs": [backend("web", 80)]}]}),
    )];
    let mut inputs = world(vec![gw], routes);
    inputs.ingress_classes = vec![our_class()].into();
    inputs.ingresses = vec![raw_ingress(
        "default",
        "ing",
        Some(1),
        json!({"nginx.ingress.kubernetes.io/upstream-vhost": "internal.example",
               "sluice.dev/request-headers": "x-team: blue"}),
        json!({"ingressClassName": "sluice", "rules": [rule("ing.example", vec![path("/", "Prefix", "web", 80)])]}),
    )].into();
    let out = compiled(&inputs);
    let t = &out.table;
    let gw_policy = &t
        .entry(
            t.route_request(&RequestInfo {
                listener: None,
                https: false,
                host: "gw.example",
                path: "/",
                query: "",
                method: "GET",
                headers: &Headers(vec![]),
            })
            .expect("gw"),
        )
        .policy;
    let ing_policy = &t.route("ing.example", "/").expect("ingress").policy;
    assert!(out.diagnostics.is_empty(), "{:?}", out.diagnostics);
    assert_eq!(**gw_policy, **ing_policy);
}

#[test]
fn invalid_routes_are_refused_alone() {
    let gw = gateway("default", "gw", json!([http_listener("http", None)]));
    let routes = vec![
        route(
            "default",
            "bad",
            1,
            json!({"parentRefs": [{"name": "gw"}], "hostnames": ["bad.example"],
            "rules": [{"filters": [{"type": "ExtensionRef"}], "backendRefs": [backend("web", 80)]}]}),
        ),
        route(
            "default",
            "good",
            2,
            json!({"parentRefs": [{"name": "gw"}], "hostnames": ["good.example"],
            "rules": [{"backendRefs": [backend("web", 80)]}]}),
        ),
    ];
    let out = compiled(&world(vec![gw], routes));
    assert_eq!(accepted(&out.gateway, "bad"), (false, "UnsupportedValue"));
    let message = &route_status(&out.gateway, "bad").parents[0].conditions[0].message;
    assert!(
        message.contains("spec.rules[0].filters[0].type"),
        "{message}"
    );
    assert_eq!(answer(&out.table, &get("bad.example", "/")), None);
    assert_eq!(
        answer(&out.table, &get("good.example", "/")).as_deref(),
        Some("good->web")
    );
    assert_eq!(
        out.gateway
            .routes
            .iter()
            .map(|r| r.generation)
            .collect::<Vec<_>>(),
        [Some(5), Some(5)]
    );
}

#[test]
fn compile_is_independent_of_input_order() {
    let gw = gateway("default", "gw", json!([http_listener("http", None)]));
    let mut routes = Vec::new();
    for (i, name) in ["a", "b", "c", "d"].into_iter().enumerate() {
        routes.push(route("default", name, (i % 2) as u32, json!({"parentRefs": [{"name": "gw"}],
            "rules": [{"matches": [{"path": {"value": "/"}}, {"path": {"type": "Exact", "value": "/x"}}],
                       "backendRefs": [backend(["web", "api", "v2", "web"][i], 80)]}]})));
    }
    let forward = compiled(&world(vec![gw.clone()], routes.clone()));
    routes.reverse();
    let backward = compiled(&world(vec![gw], routes));
    for target in ["/", "/x", "/y"] {
        assert_eq!(
            answer(&forward.table, &get("h", target)),
            answer(&backward.table, &get("h", target))
        );
    }
    // Oldest first (a and c are age 0), then namespace/name: a.
    assert_eq!(
        answer(&forward.table, &get("h", "/")).as_deref(),
        Some("a->web")
    );
    assert_eq!(forward.gateway, backward.gateway);
}

mod precedence_oracle {
    //! The matcher against a brute-force reading of the spec's precedence rules: every
    //! candidate that matches is collected and the smallest by (path specificity, method,
    //! header count, query count, route age, route name, rule, match) must be the answer.
    use super::*;
    use proptest::prelude::*;

    /// (path rank, no method, fewer headers, fewer query, age, route, rule, match).
    type Key = ((u8, usize), bool, usize, usize, u32, usize, usize, usize);

    const PATHS: [&str; 5] = ["/", "/a", "/a/b", "/b", "/a/b/c"];
    const HEADERS: [(&str, &str); 2] = [("x-a", "1"), ("x-b", "2")];
    const QUERY: [(&str, &str); 2] = [("q", "1"), ("r", "2")];

    #[derive(Debug, Clone)]
    struct M {
        exact: bool,
        path: usize,
        method: bool,
        headers: Vec<bool>,
        query: Vec<bool>,
    }

    fn arb_match() -> impl Strategy<Value = M> {
        (
            any::<bool>(),
            0..PATHS.len(),
            any::<bool>(),
            prop::collection::vec(any::<bool>(), 2),
            prop::collection::vec(any::<bool>(), 2),
        )
            .prop_map(|(exact, path, method, headers, query)| M {
                exact,
                path,
                method,
                headers,
                query,
            })
    }

    fn match_json(m: &M) -> Value {
        let mut v = json!({"path": {"type": if m.exact {"Exact"} else {"PathPrefix"}, "value": PATHS[m.path]}});
        if m.method {
            v["method"] = json!("POST");
        }
        let headers: Vec<Value> = HEADERS
            .iter()
            .zip(&m.headers)
            .filter(|(_, on)| **on)
            .map(|((n, val), _)| json!({"name": n, "value": val}))
            .collect();
        let query: Vec<Value> = QUERY
            .iter()
            .zip(&m.query)
            .filter(|(_, on)| **on)
            .map(|((n, val), _)| json!({"name": n, "value": val}))
            .collect();
        v["headers"] = json!(headers);
        v["queryParams"] = json!(query);
        v
    }

    fn prefix_len(rule: &str, path: &str) -> Option<usize> {
        let key = rule.trim_end_matches('/');
        let ok = path == key || path.starts_with(&format!("{key}/")) || key.is_empty();
        ok.then_some(key.len())
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]
        #[test]
        fn matcher_agrees_with_the_spec_precedence(
            routes in prop::collection::vec((0u32..3, prop::collection::vec(prop::collection::vec(arb_match(), 1..3), 1..3)), 1..5),
            path in 0..PATHS.len(),
            suffix in any::<bool>(),
            post in any::<bool>(),
            headers in prop::collection::vec(any::<bool>(), 2),
            query in prop::collection::vec(any::<bool>(), 2),
        ) {
            let gw = gateway("default", "gw", json!([http_listener("http", None)]));
            let objects: Vec<Arc<HttpRoute>> = routes.iter().enumerate().map(|(r, (age, rules))| {
                let rules: Vec<Value> = rules.iter().enumerate().map(|(i, matches)| json!({
                    "matches": matches.iter().map(match_json).collect::<Vec<_>>(),
                    "backendRefs": [{"name": format!("svc-{r}-{i}"), "port": 80}],
                })).collect();
                route("default", &format!("r{r}"), *age, json!({"parentRefs": [{"name": "gw"}], "rules": rules}))
            }).collect();
            let out = compiled(&world(vec![gw], objects));
            let req_path = format!("{}{}", PATHS[path], if suffix { "/z" } else { "" }).replace("//", "/");
            let mut hs: Vec<(&'static str, &'static str)> = Vec::new();
            for (on, h) in headers.iter().zip(HEADERS) { if *on { hs.push(h); } }
            let q: Vec<String> = query.iter().zip(QUERY).filter(|(on, _)| **on).map(|(_, (n, v))| format!("{n}={v}")).collect();
            let q = q.join("&");
            let method = if post { "POST" } else { "GET" };
            let info = RequestInfo { https: false, listener: None, host: "any.example", path: &req_path, query: &q, method, headers: &Headers(hs.clone()) };
            let got = out.table.route_request(&info).map(|id| out.table.entry(id).backend.service.name.clone());

            // The oracle.
            let mut best: Option<Key> = None;
            let mut best_name = None;
            for (r, (age, rules)) in routes.iter().enumerate() {
                for (i, matches) in rules.iter().enumerate() {
                    for (mi, m) in matches.iter().enumerate() {
                        let rule_path = PATHS[m.path];
                        let path_rank = if m.exact {
                            if req_path != rule_path { continue; }
                            (0u8, 0usize)
                        } else {
                            match prefix_len(rule_path, &req_path) {
                                Some(len) => (1, usize::MAX - len),
                                None => continue,
                            }
                        };
                        if m.method && !post { continue; }
                        let needs_h = HEADERS.iter().zip(&m.headers).filter(|(_, on)| **on);
                        if !needs_h.clone().all(|(h, _)| hs.contains(h)) { continue; }
                        let needs_q = QUERY.iter().zip(&m.query).filter(|(_, on)| **on);
                        if !needs_q.clone().all(|((n, v), _)| q.split('&').any(|p| p == format!("{n}={v}"))) { continue; }
                        let key = (path_rank, !m.method, usize::MAX - needs_h.count(), usize::MAX - needs_q.count(), *age, r, i, mi);
                        if best.as_ref().is_none_or(|b| key < *b) {
                            best = Some(key);
                            best_name = Some(format!("svc-{r}-{i}"));
                        }
                    }
                }
            }
            prop_assert_eq!(got, best_name, "request {} {}?{} {:?}", method, req_path, q, hs);
        }
    }
}

#[test]
fn explain_answers_with_the_http_route() {
    let gw = gateway("default", "gw", json!([http_listener("http", None)]));
    let routes = vec![route(
        "default",
        "shop",
        1,
        json!({"parentRefs": [{"name": "gw"}], "hostnames": ["shop.example"],
        "rules": [{"matches": [{"path": {"value": "/cart"}}],
                   "filters": [{"type": "URLRewrite", "urlRewrite": {"path": {"type": "ReplacePrefixMatch", "replacePrefixMatch": "/"}}}],
                   "backendRefs": [backend("api", 80)]},
                  {"matches": [{"path": {"type": "Exact", "value": "/"}}, {"method": "POST"}],
                   "backendRefs": [backend("web", 80)]}]}),
    )];
    let inputs = world(vec![gw], routes);
    let e = sluice_routing::explain(
        &inputs,
        &sluice_routing::CompileOptions::default(),
        "shop.example",
        "/cart/1",
    );
    let text = e.to_string();
    assert!(text.contains("HTTPRoute default/shop"), "{text}");
    assert!(text.contains("ReplacePrefixMatch /cart -> /"), "{text}");
    // #33: the route's rules are listed, each match by its field, the answering one marked.
    let rules: Vec<(String, bool)> = e
        .checks
        .iter()
        .filter(|c| c.ingress.kind == "HTTPRoute")
        .map(|c| (c.field.clone(), c.selected))
        .collect();
    assert_eq!(
        rules,
        [
            ("spec.rules[0].matches[0]".to_owned(), true),
            ("spec.rules[1].matches[0]".to_owned(), false),
            ("spec.rules[1].matches[1]".to_owned(), false),
        ]
    );
    assert!(
        text.contains("=> HTTPRoute default/shop spec.rules[0].matches[0] (shop.example PathPrefix /cart): answers"),
        "{text}"
    );
    assert!(
        text.contains("spec.rules[1].matches[1] (shop.example PathPrefix / method POST)"),
        "{text}"
    );
    let other_host = sluice_routing::explain(
        &inputs,
        &sluice_routing::CompileOptions::default(),
        "else.example",
        "/cart",
    );
    assert!(
        other_host
            .to_string()
            .contains("else.example is not in spec.hostnames"),
        "{other_host}"
    );
    let miss = sluice_routing::explain(
        &inputs,
        &sluice_routing::CompileOptions::default(),
        "shop.example",
        "/other",
    );
    assert_eq!(
        miss.answer,
        sluice_routing::Answer::NotFound,
        "the Gateway host owns the request"
    );
}

/// #33: `sluice explain -X METHOD -H 'Name: value' URL?query` explains the rule the proxy
/// would pick for that request (Gateway API method, header and query matches), and a rule
/// whose only backendRef is invalid answers 500, which explain says (not 503).
#[test]
fn explain_takes_the_method_headers_and_query_and_says_500_for_an_invalid_reference() {
    let gw = gateway("default", "gw", json!([http_listener("http", None)]));
    let routes = vec![route(
        "default",
        "shop",
        1,
        json!({"parentRefs": [{"name": "gw"}], "hostnames": ["shop.example"],
        "rules": [
            {"backendRefs": [backend("web", 80)]},
            {"matches": [{"headers": [{"name": "X-Version", "value": "2"}]}],
             "backendRefs": [backend("v2", 80)]},
            {"matches": [{"method": "DELETE"}], "backendRefs": [backend("api", 80)]},
            {"matches": [{"queryParams": [{"name": "gone", "value": "1"}]}],
             "backendRefs": [backend("missing", 80)]}]}),
    )];
    let inputs = world(vec![gw], routes);
    let options = sluice_routing::CompileOptions::default();
    let ask = |request: sluice_routing::ExplainRequest| {
        sluice_routing::explain_request(&inputs, &options, &request).to_string()
    };
    let get = sluice_routing::ExplainRequest::get("shop.example", "/");
    assert!(
        ask(get.clone()).contains("backend: Service default/web:80"),
        "{}",
        ask(get.clone())
    );
    let header = sluice_routing::ExplainRequest {
        headers: vec![("x-version".into(), "2".into())],
        ..get.clone()
    };
    assert!(
        ask(header.clone()).contains("backend: Service default/v2:80"),
        "{}",
        ask(header)
    );
    let delete = sluice_routing::ExplainRequest {
        method: "DELETE".into(),
        ..get.clone()
    };
    assert!(
        ask(delete.clone()).contains("backend: Service default/api:80"),
        "{}",
        ask(delete)
    );
    let query = sluice_routing::ExplainRequest {
        query: "gone=1".into(),
        ..get.clone()
    };
    let text = ask(query);
    assert!(
        text.contains(
            "Service default/missing:80 (an invalid backendRef: requests drawn for it get 500)"
        ),
        "{text}"
    );
    assert!(!text.contains("503"), "{text}");
}

/// One route may not reach a Service (no ReferenceGrant for its namespace) while another
/// may: the refused reference must not take the Service's endpoints away from the other.
#[test]
fn a_refused_reference_does_not_shadow_a_permitted_one() {
    let gw = gateway(
        "default",
        "gw",
        json!([{"name": "http", "port": 80, "protocol": "HTTP",
        "allowedRoutes": {"namespaces": {"from": "All"}}}]),
    );
    let routes = vec![
        route(
            "default",
            "cross",
            1,
            json!({"parentRefs": [{"name": "gw"}], "hostnames": ["cross.example"],
            "rules": [{"backendRefs": [{"name": "web", "namespace": "other", "port": 80}]}]}),
        ),
        route(
            "other",
            "local",
            2,
            json!({"parentRefs": [{"name": "gw", "namespace": "default"}], "hostnames": ["local.example"],
            "rules": [{"backendRefs": [backend("web", 80)]}]}),
        ),
    ];
    let out = compiled(&world(vec![gw], routes));
    let entry = |host: &'static str| {
        let id = out
            .table
            .route_request(&RequestInfo {
                listener: None,
                https: false,
                host,
                path: "/",
                query: "",
                method: "GET",
                headers: &Headers(vec![]),
            })
            .expect("routed");
        out.table.entry(id)
    };
    assert!(!entry("cross.example").split[0].usable);
    let local = entry("local.example");
    assert!(local.split.is_empty());
    assert_eq!(local.backend.endpoints.len(), 1, "{:?}", local.backend);
    // Backend ids stay dense.
    for (i, b) in out.table.backends().iter().enumerate() {
        assert_eq!(b.id, i);
    }
}

/// Several Gateways of our class share the one data plane; listeners of one Gateway that
/// share a port conflict by protocol or by host name (`Conflicted`) and are not served.
#[test]
fn several_gateways_and_conflicting_listeners() {
    let first = gateway(
        "default",
        "first",
        json!([{"name": "a", "port": 80, "protocol": "HTTP", "hostname": "a.example"}]),
    );
    let second = gateway(
        "default",
        "second",
        json!([
            {"name": "b", "port": 80, "protocol": "HTTP", "hostname": "b.example"},
            {"name": "dup", "port": 80, "protocol": "HTTP", "hostname": "b.example"},
            {"name": "tls", "port": 80, "protocol": "HTTPS", "hostname": "c.example", "tls": {"certificateRefs": [{"name": "x"}]}},
        ]),
    );
    let routes = vec![
        route(
            "default",
            "to-first",
            1,
            json!({"parentRefs": [{"name": "first"}], "rules": [{"backendRefs": [backend("web", 80)]}]}),
        ),
        route(
            "default",
            "to-second",
            2,
            json!({"parentRefs": [{"name": "second", "sectionName": "b"}], "rules": [{"backendRefs": [backend("api", 80)]}]}),
        ),
    ];
    let out = compiled(&world(vec![first, second], routes));
    assert_eq!(
        answer(&out.table, &get("a.example", "/")).as_deref(),
        Some("to-first->web")
    );
    assert_eq!(out.gateway.gateways.len(), 2);
    let second = &out.gateway.gateways[1];
    let conflicted: Vec<(&str, bool, &str)> = second
        .listeners
        .iter()
        .map(|l| {
            let c = l
                .conditions
                .iter()
                .find(|c| c.type_ == "Conflicted")
                .expect("Conflicted");
            (l.name.as_str(), c.status, c.reason)
        })
        .collect();
    assert_eq!(
        conflicted,
        [
            ("b", true, "ProtocolConflict"),
            ("dup", true, "ProtocolConflict"),
            ("tls", true, "ProtocolConflict"),
        ]
    );
    // Conflicted listeners take no routes.
    assert_eq!(
        accepted(&out.gateway, "to-second"),
        (false, "NotAllowedByListeners")
    );
    assert_eq!(answer(&out.table, &get("b.example", "/")), None);
}

/// Same port and protocol, same host name: `HostnameConflict` on both; a distinct host
/// name on the same port is fine.
#[test]
fn listeners_with_the_same_host_name_conflict() {
    let gw = gateway(
        "default",
        "third",
        json!([
            {"name": "x", "port": 80, "protocol": "HTTP", "hostname": "x.example"},
            {"name": "x2", "port": 80, "protocol": "HTTP", "hostname": "x.example"},
            {"name": "y", "port": 80, "protocol": "HTTP", "hostname": "y.example"},
        ]),
    );
    let out = compiled(&world(vec![gw], vec![]));
    let reasons: Vec<&str> = out.gateway.gateways[0]
        .listeners
        .iter()
        .map(|l| {
            l.conditions
                .iter()
                .find(|c| c.type_ == "Conflicted")
                .map_or("", |c| c.reason)
        })
        .collect();
    assert_eq!(
        reasons,
        ["HostnameConflict", "HostnameConflict", "NoConflicts"]
    );
}

/// Gateway API conformance GatewayWithAttachedRoutes / HTTPRouteHostnameIntersection run
/// several Gateways with port-80 listeners: each Gateway is served on an address of its
/// own (here from the pool), and a route answers only on its Gateway's sockets.
#[test]
fn gateways_with_addresses_of_their_own_answer_only_their_routes() {
    let aged = |name: &str, age: u32, listeners: Value| -> Arc<Gateway> {
        from(
            json!({"metadata": {"namespace": "default", "name": name, "generation": 1,
            "creationTimestamp": ts(age)},
            "spec": {"gatewayClassName": "sluice", "listeners": listeners}}),
        )
    };
    let a = aged("a", 1, json!([http_listener("http", None)]));
    let b = aged(
        "b",
        2,
        json!([http_listener("http", None), {"name": "alt", "port": 8080, "protocol": "HTTP"}]),
    );
    // c asks for an address outside the pool; d for a hostname, which no proxy can bind.
    let c = from(
        json!({"metadata": {"namespace": "default", "name": "c", "generation": 1,
        "creationTimestamp": ts(3)},
        "spec": {"gatewayClassName": "sluice", "listeners": [http_listener("http", None)],
                 "addresses": [{"type": "IPAddress", "value": "192.0.2.7"}]}}),
    );
    let d = from(
        json!({"metadata": {"namespace": "default", "name": "d", "generation": 1,
        "creationTimestamp": ts(4)},
        "spec": {"gatewayClassName": "sluice", "listeners": [http_listener("http", None)],
                 "addresses": [{"type": "Hostname", "value": "gw.example"}]}}),
    );
    let inputs = world(
        vec![a, b, c, d],
        vec![
            route(
                "default",
                "ra",
                1,
                json!({"parentRefs": [{"name": "a"}],
                "hostnames": ["shop.example"], "rules": [{"backendRefs": [backend("web", 80)]}]}),
            ),
            route(
                "default",
                "rb",
                2,
                json!({"parentRefs": [{"name": "b", "port": 80}],
                "hostnames": ["shop.example"], "rules": [{"backendRefs": [backend("api", 80)]}]}),
            ),
            route(
                "default",
                "rc",
                3,
                json!({"parentRefs": [{"name": "c"}],
                "rules": [{"backendRefs": [backend("v2", 80)]}]}),
            ),
        ],
    );
    let options = sluice_routing::CompileOptions {
        gateway_address_pool: Some("127.1.0.0/29".parse().expect("pool")),
        ..Default::default()
    };
    let out = compile(&inputs, &options);
    let t = &out.table;
    // The oldest Gateway gets the pool's first address.
    assert_eq!(
        t.gateway_sockets(),
        [
            (
                "127.1.0.1:80".parse().unwrap(),
                sluice_routing::SocketKind::Http
            ),
            (
                "127.1.0.2:80".parse().unwrap(),
                sluice_routing::SocketKind::Http
            ),
            (
                "127.1.0.2:8080".parse().unwrap(),
                sluice_routing::SocketKind::Http
            ),
            (
                "192.0.2.7:80".parse().unwrap(),
                sluice_routing::SocketKind::Http
            ),
        ]
    );
    let shop = || get("shop.example", "/");
    assert_eq!(
        answer(t, &shop().on("127.1.0.1:80")).as_deref(),
        Some("ra->web")
    );
    assert_eq!(
        answer(t, &shop().on("127.1.0.2:80")).as_deref(),
        Some("rb->api")
    );
    // rb names port 80 only: b's other listener has no route; nor has the shared listener.
    assert_eq!(answer(t, &shop().on("127.1.0.2:8080")), None);
    assert_eq!(answer(t, &shop()), None);
    assert_eq!(
        answer(t, &shop().on("127.1.0.9:80")),
        None,
        "a socket no table names"
    );
    assert_eq!(
        answer(t, &get("any.example", "/").on("192.0.2.7:80")).as_deref(),
        Some("rc->v2")
    );

    let status = |name: &str| {
        out.gateway
            .gateways
            .iter()
            .find(|g| g.gateway.object.name == name)
            .unwrap_or_else(|| panic!("no status for {name}"))
    };
    let ip = |s: &str| s.parse::<std::net::IpAddr>().unwrap();
    assert_eq!(status("a").addresses, Some(vec![ip("127.1.0.1")]));
    assert_eq!(status("b").addresses, Some(vec![ip("127.1.0.2")]));
    assert_eq!(
        status("b").listeners[1].binds,
        ["127.1.0.2:8080".parse().unwrap()]
    );
    assert_eq!(status("c").addresses, Some(vec![ip("192.0.2.7")]));
    assert_eq!(
        conditions(&status("d").gateway.conditions),
        [
            ("Accepted", false, "UnsupportedAddress"),
            ("Programmed", false, "Invalid")
        ]
    );
    assert!(
        status("d").gateway.conditions[0]
            .message
            .contains("spec.addresses[0]: type \"Hostname\""),
        "{:?}",
        status("d").gateway.conditions
    );

    // What the proxy could not bind marks the listener and its Gateway, naming the socket.
    let mut statuses = out.gateway.clone();
    statuses.mark_unbound(
        &[(
            "192.0.2.7:80".parse().unwrap(),
            "Cannot assign requested address".to_owned(),
        )]
        .into(),
    );
    let c = statuses
        .gateways
        .iter()
        .find(|g| g.gateway.object.name == "c")
        .unwrap();
    assert_eq!(
        conditions(&c.gateway.conditions),
        [
            ("Accepted", true, "Accepted"),
            ("Programmed", false, "AddressNotUsable")
        ]
    );
    assert!(
        c.gateway.conditions[1]
            .message
            .contains("192.0.2.7:80: Cannot assign")
    );
    assert_eq!(c.listeners[0].conditions[1].reason, "AddressNotUsable");
    let a = statuses
        .gateways
        .iter()
        .find(|g| g.gateway.object.name == "a")
        .unwrap();
    assert_eq!(a.gateway.conditions[1].reason, "Programmed");
}

/// Gateway API conformance GatewayHTTPListenerIsolation ("intersecting hostnames are
/// configured in listeners and HTTPRoutes"): a request belongs to the listener with the
/// most specific matching hostname, and only routes attached to that listener answer it,
/// even when a route of a broader listener names the host too.
#[test]
fn listeners_isolate_their_host_names() {
    let all = json!([
        "bar.com",
        "*.example.com",
        "*.foo.example.com",
        "abc.foo.example.com"
    ]);
    let to = |name: &'static str, section: &str, path: &str| {
        route(
            "default",
            name,
            1,
            json!({"parentRefs": [{"name": "gw", "sectionName": section}], "hostnames": all,
                   "rules": [{"matches": [{"path": {"type": "PathPrefix", "value": path}}],
                              "backendRefs": [backend("web", 80)]}]}),
        )
    };
    let inputs = world(
        vec![gateway(
            "default",
            "gw",
            json!([
                http_listener("empty", None),
                http_listener("wild", Some("*.example.com")),
                http_listener("wild-foo", Some("*.foo.example.com")),
                http_listener("abc", Some("abc.foo.example.com")),
            ]),
        )],
        vec![
            to("e", "empty", "/empty"),
            to("w", "wild", "/wild"),
            to("f", "wild-foo", "/wild-foo"),
            to("a", "abc", "/abc"),
        ],
    );
    let out = compiled(&inputs);
    for r in ["e", "w", "f", "a"] {
        assert_eq!(accepted(&out.gateway, r), (true, "Accepted"), "{r}");
    }
    let cases = [
        ("bar.com", "/empty", Some("e->web")),
        ("bar.example.com", "/empty", None),
        ("bar.example.com", "/wild", Some("w->web")),
        ("bar.foo.example.com", "/empty", None),
        ("bar.foo.example.com", "/wild", None),
        ("bar.foo.example.com", "/wild-foo", Some("f->web")),
        ("abc.foo.example.com", "/wild-foo", None),
        ("abc.foo.example.com", "/wild", None),
        ("abc.foo.example.com", "/abc", Some("a->web")),
    ];
    for (host, path, want) in cases {
        assert_eq!(
            answer(&out.table, &get(host, path)).as_deref(),
            want,
            "{host}{path}"
        );
    }
}

/// Gateway API GRPCRoute (GATEWAY-GRPC): a call is `POST /<service>/<method>` and is
/// routed by its method match and headers exactly like an HTTPRoute's path and headers; its
/// backends are spoken to in gRPC; HTTP listeners take both kinds unless `allowedRoutes`
/// narrows them, and a listener that allows only HTTPRoute refuses a GRPCRoute
/// (`NotAllowedByListeners`).
#[test]
fn grpc_routes_route_calls_by_service_method_and_headers() {
    let mut inputs = world(
        vec![gateway(
            "default",
            "gw",
            json!([
                http_listener("http", None),
                {"name": "http-only", "port": 8080, "protocol": "HTTP",
                 "allowedRoutes": {"kinds": [{"kind": "HTTPRoute"}]}},
            ]),
        )],
        vec![],
    );
    let grpc = |name: &str, age: u32, spec: Value| -> Arc<sluice_routing::gateway::GrpcRoute> {
        from(
            json!({"metadata": {"namespace": "default", "name": name, "generation": 1,
            "creationTimestamp": ts(age)}, "spec": spec}),
        )
    };
    inputs.grpc_routes = vec![
        grpc(
            "echo",
            1,
            json!({"parentRefs": [{"name": "gw", "sectionName": "http"}], "hostnames": ["grpc.example"],
                "rules": [
                    {"matches": [{"method": {"service": "pkg.Echo", "method": "Echo"}}],
                     "backendRefs": [backend("web", 80)]},
                    {"matches": [{"method": {"service": "pkg.Echo"},
                                  "headers": [{"name": "version", "value": "two"}]}],
                     "backendRefs": [backend("v2", 80)]},
                    {"matches": [{"method": {"type": "RegularExpression", "service": "pkg\\.Ad.*"}}],
                     "backendRefs": [backend("api", 80)]}]}),
        ),
        grpc(
            "refused",
            2,
            json!({"parentRefs": [{"name": "gw", "sectionName": "http-only"}],
                "rules": [{"backendRefs": [backend("web", 80)]}]}),
        ),
    ].into();
    let out = compiled(&inputs);
    let post = |target: &'static str| get("grpc.example", target).method("POST");
    let table = &out.table;
    assert_eq!(
        answer(table, &post("/pkg.Echo/Echo")).as_deref(),
        Some("echo->web")
    );
    assert_eq!(
        answer(table, &post("/pkg.Echo/EchoTwo").header("version", "two")).as_deref(),
        Some("echo->v2")
    );
    assert_eq!(
        answer(table, &post("/pkg.Echo/EchoTwo")),
        None,
        "no rule: 404"
    );
    assert_eq!(
        answer(table, &post("/pkg.Admin/Get")).as_deref(),
        Some("echo->api")
    );
    assert_eq!(answer(table, &post("/other.Echo/Echo")), None);
    let id = table
        .route_request(&RequestInfo {
            listener: None,
            https: false,
            host: "grpc.example",
            path: "/pkg.Echo/Echo",
            query: "",
            method: "POST",
            headers: &Headers(Vec::new()),
        })
        .expect("routed");
    assert_eq!(table.entry(id).source.kind, "GRPCRoute");
    assert_eq!(
        table.entry(id).policy.protocol,
        Some(sluice_routing::UpstreamProtocol::Grpc),
        "gRPC to the backend"
    );

    let gw = &out.gateway.gateways[0];
    let by_name: HashMap<&str, _> = gw.listeners.iter().map(|l| (l.name.as_str(), l)).collect();
    let kinds = |l: &str| -> Vec<String> {
        by_name[l]
            .supported_kinds
            .iter()
            .map(|k| k.kind.clone())
            .collect()
    };
    assert_eq!(kinds("http"), ["HTTPRoute", "GRPCRoute"]);
    assert_eq!(kinds("http-only"), ["HTTPRoute"]);
    assert_eq!(by_name["http"].attached_routes, 1);
    assert_eq!(accepted(&out.gateway, "echo"), (true, "Accepted"));
    assert_eq!(route_status(&out.gateway, "echo").object.kind, "GRPCRoute");
    assert_eq!(
        accepted(&out.gateway, "refused"),
        (false, "NotAllowedByListeners")
    );

    // A GRPCRoute's mirror copies go out without the call's messages: a streaming call
    // cannot be read whole before it is forwarded.
    inputs.grpc_routes = vec![grpc(
        "mirrored",
        3,
        json!({"parentRefs": [{"name": "gw", "sectionName": "http"}], "hostnames": ["m.example"],
            "rules": [{"filters": [{"type": "RequestMirror",
                "requestMirror": {"backendRef": {"name": "api", "port": 80}}}],
                "backendRefs": [backend("web", 80)]}]}),
    )]
    .into();
    let out = compiled(&inputs);
    let id = out
        .table
        .route_request(&RequestInfo {
            listener: None,
            https: false,
            host: "m.example",
            path: "/pkg.Echo/Echo",
            query: "",
            method: "POST",
            headers: &Headers(vec![("content-type", "application/grpc")]),
        })
        .expect("routed");
    let entry = out.table.entry(id);
    assert_eq!(entry.mirrors.len(), 1);
    assert!(!entry.policy.mirror_request_body);

    // A method match that cannot be compiled refuses the route, naming the field.
    inputs.grpc_routes = vec![grpc(
        "bad",
        3,
        json!({"parentRefs": [{"name": "gw"}], "rules": [{"matches": [
            {"method": {"type": "RegularExpression", "method": "("}}]}]}),
    )]
    .into();
    let out = compiled(&inputs);
    assert_eq!(accepted(&out.gateway, "bad"), (false, "UnsupportedValue"));
    let message = &route_status(&out.gateway, "bad").parents[0].conditions[0].message;
    assert!(
        message.starts_with("spec.rules[0].matches[0].method: method"),
        "{message}"
    );
}

/// Gateway API GATEWAY-TCP / -TLS / -UDP statuses: a TCP listener takes TCPRoutes, a TLS
/// listener (Passthrough or Terminate) TLSRoutes and a UDP listener UDPRoutes (their
/// `supportedKinds`); a TCPRoute does not attach to an HTTP listener;
/// a stream listener of a Gateway without an address of its own is not programmed (the
/// shared listeners speak HTTP), and says how to give it one.
#[test]
fn tcp_and_tls_listeners_take_their_route_kinds() {
    let listeners = json!([
        http_listener("http", None),
        {"name": "tcp", "port": 9000, "protocol": "TCP"},
        {"name": "tls", "port": 9443, "protocol": "TLS", "tls": {"mode": "Passthrough"}},
        {"name": "udp", "port": 5300, "protocol": "UDP"},
        {"name": "terminate", "port": 9444, "protocol": "TLS",
         "tls": {"certificateRefs": [{"name": "missing"}]}},
    ]);
    let mut inputs = world(vec![gateway("default", "gw", listeners)], vec![]);
    let tcp = |name: &str, section: &str, rules: Value| -> Arc<sluice_routing::gateway::TcpRoute> {
        from(
            json!({"metadata": {"namespace": "default", "name": name, "generation": 1},
            "spec": {"parentRefs": [{"name": "gw", "sectionName": section}], "rules": rules}}),
        )
    };
    let one = json!([{"backendRefs": [backend("web", 80)]}]);
    inputs.tcp_routes = vec![
        tcp("ok", "tcp", one.clone()),
        tcp("on-http", "http", one.clone()),
        tcp(
            "two-rules",
            "tcp",
            json!([{"backendRefs": [backend("web", 80)]}, {"backendRefs": [backend("api", 80)]}]),
        ),
    ]
    .into();
    inputs.tls_routes = vec![from(
        json!({"metadata": {"namespace": "default", "name": "pass"},
        "spec": {"parentRefs": [{"name": "gw", "sectionName": "tls"}], "hostnames": ["a.example"],
                 "rules": [{"backendRefs": [backend("web", 80)]}]}}),
    )]
    .into();
    let out = compiled(&inputs);
    let gw = &out.gateway.gateways[0];
    let by_name: HashMap<&str, _> = gw.listeners.iter().map(|l| (l.name.as_str(), l)).collect();
    let kinds = |l: &str| -> Vec<String> {
        by_name[l]
            .supported_kinds
            .iter()
            .map(|k| k.kind.clone())
            .collect()
    };
    assert_eq!(kinds("tcp"), ["TCPRoute"]);
    assert_eq!(kinds("tls"), ["TLSRoute"]);
    assert_eq!(kinds("udp"), ["UDPRoute"]);
    // TLS Terminate is served (TLSRouteModeTerminate); this one's certificate is missing.
    assert_eq!(kinds("terminate"), ["TLSRoute"]);
    assert_eq!(
        conditions(&by_name["terminate"].conditions),
        [
            ("Accepted", true, "Accepted"),
            ("Programmed", false, "Invalid"),
            ("ResolvedRefs", false, "InvalidCertificateRef"),
            ("Conflicted", false, "NoConflicts")
        ]
    );
    assert_eq!(accepted(&out.gateway, "ok"), (true, "Accepted"));
    assert_eq!(accepted(&out.gateway, "pass"), (true, "Accepted"));
    assert_eq!(
        accepted(&out.gateway, "on-http"),
        (false, "NotAllowedByListeners")
    );
    assert_eq!(
        accepted(&out.gateway, "two-rules"),
        (false, "UnsupportedValue")
    );
    assert_eq!(route_status(&out.gateway, "ok").object.kind, "TCPRoute");
    // No pool and no spec.addresses: the stream listeners are not programmed.
    let programmed = &by_name["tcp"].conditions[1];
    assert_eq!((programmed.type_, programmed.status), ("Programmed", false));
    assert!(
        programmed.message.contains("--gateway-address-pool"),
        "{}",
        programmed.message
    );
    assert!(out.table.gateway_sockets().is_empty());

    // With an address: bound as stream sockets, and the routes found by socket and SNI.
    let options = sluice_routing::CompileOptions {
        gateway_address_pool: Some("127.1.0.0/30".parse().unwrap()),
        ..Default::default()
    };
    let out = compile(&inputs, &options);
    let sockets = out.table.gateway_sockets();
    let kind_of = |port: u16| {
        sockets
            .iter()
            .find(|(a, _)| a.port() == port)
            .map(|(_, k)| *k)
    };
    assert_eq!(kind_of(9000), Some(sluice_routing::SocketKind::Tcp));
    assert_eq!(kind_of(9443), Some(sluice_routing::SocketKind::Tls));
    assert_eq!(kind_of(5300), Some(sluice_routing::SocketKind::Udp));
    let tcp_socket = sockets.iter().find(|(a, _)| a.port() == 9000).unwrap().0;
    let tls_socket = sockets.iter().find(|(a, _)| a.port() == 9443).unwrap().0;
    let target = out
        .table
        .stream_target(tcp_socket, None)
        .expect("TCP route");
    assert_eq!(target.source.name, "ok");
    assert_eq!(target.split[0].backend.service.name, "web");
    assert!(
        out.table
            .stream_target(tls_socket, Some("A.Example"))
            .is_some()
    );
    assert!(
        out.table
            .stream_target(tls_socket, Some("b.example"))
            .is_none()
    );
    assert!(out.table.stream_target(tls_socket, None).is_none());
}

fn config_map(ns: &str, name: &str, ca: &str) -> Arc<k8s_openapi::api::core::v1::ConfigMap> {
    from(json!({"metadata": {"namespace": ns, "name": name}, "data": {"ca.crt": ca}}))
}

/// Gateway API `GatewayFrontendClientCertificateValidation` and its conformance tests
/// (GatewayInvalidFrontendClientCertificateValidation): `perPort` replaces `default` on its
/// port; a reference that cannot be used leaves the listener not Accepted
/// (`NoValidCACertificate`) and not served; `AllowInsecureFallback` sets the Gateway's
/// `InsecureFrontendValidationMode` condition; on the shared HTTPS socket it is refused.
#[test]
fn frontend_client_certificate_validation_by_port() {
    let https = |name: &str, port: i32, host: &str| {
        json!({"name": name, "port": port, "protocol": "HTTPS", "hostname": host,
               "tls": {"certificateRefs": [{"name": "cert"}]}})
    };
    let ca_ref = |name: &str| json!({"kind": "ConfigMap", "group": "", "name": name});
    let mut gw: Gateway = (*gateway(
        "default",
        "gw",
        json!([
            https("default", 443, "a.example"),
            https("per-port", 8443, "b.example"),
            https("missing", 7443, "c.example"),
            https("kind", 6443, "d.example"),
            https("grant", 5443, "e.example"),
            http_listener("http", None),
        ]),
    ))
    .clone();
    gw.spec.tls = serde_json::from_value(json!({"frontend": {
    "default": {"validation": {"caCertificateRefs": [ca_ref("ca")]}},
    "perPort": [
        {"port": 8443, "tls": {"validation": {"mode": "AllowInsecureFallback",
            "caCertificateRefs": [ca_ref("ca")]}}},
        {"port": 7443, "tls": {"validation": {"caCertificateRefs": [ca_ref("nope")]}}},
        {"port": 6443, "tls": {"validation": {"caCertificateRefs": [
            {"kind": "Service", "group": "", "name": "web"}]}}},
        {"port": 5443, "tls": {"validation": {"caCertificateRefs": [
            {"kind": "ConfigMap", "group": "", "name": "ca", "namespace": "other"}]}}},
        {"port": 80, "tls": {"validation": {"caCertificateRefs": [ca_ref("nope")]}}},
    ]}}))
    .expect("tls");
    let mut inputs = world(vec![Arc::new(gw)], vec![]);
    inputs.secrets = vec![tls_secret("default", "cert", CERT_PEM, PKCS8_PEM)].into();
    inputs.config_maps = vec![
        config_map("default", "ca", CERT_PEM),
        config_map("other", "ca", CERT_PEM),
    ]
    .into();

    // On the shared HTTPS socket (no address of its own): not programmed.
    let out = compiled(&inputs);
    let listeners = &out.gateway.gateways[0].listeners;
    let default = listeners.iter().find(|l| l.name == "default").unwrap();
    assert_eq!(
        conditions(&default.conditions)[1],
        ("Programmed", false, "Invalid")
    );
    assert!(
        default.conditions[1]
            .message
            .contains("--gateway-address-pool"),
        "{}",
        default.conditions[1].message
    );

    let options = sluice_routing::CompileOptions {
        gateway_address_pool: Some("127.1.0.0/30".parse().unwrap()),
        ..Default::default()
    };
    let out = compile(&inputs, &options);
    let gateway = &out.gateway.gateways[0];
    assert!(
        conditions(&gateway.gateway.conditions).contains(&(
            "InsecureFrontendValidationMode",
            true,
            "ConfigurationChanged"
        )),
        "{:?}",
        gateway.gateway.conditions
    );
    let listener = |name: &str| {
        let l = gateway.listeners.iter().find(|l| l.name == name).unwrap();
        conditions(&l.conditions)
    };
    for name in ["default", "per-port", "http"] {
        assert_eq!(
            listener(name)[..3],
            [
                ("Accepted", true, "Accepted"),
                ("Programmed", true, "Programmed"),
                ("ResolvedRefs", true, "ResolvedRefs")
            ],
            "{name}"
        );
    }
    for (name, reason) in [
        ("missing", "InvalidCACertificateRef"),
        ("kind", "InvalidCACertificateKind"),
        ("grant", "RefNotPermitted"),
    ] {
        assert_eq!(
            listener(name)[..3],
            [
                ("Accepted", false, "NoValidCACertificate"),
                ("Programmed", false, "Invalid"),
                ("ResolvedRefs", false, reason)
            ],
            "{name}"
        );
    }
    // Served sockets: 443 and 8443 check client certificates, 80 (HTTP) does not; the
    // broken ports are not bound at all.
    let sockets = out.table.gateway_sockets();
    let socket = |port: u16| sockets.iter().find(|(a, _)| a.port() == port).map(|s| s.0);
    for port in [7443, 6443, 5443] {
        assert_eq!(socket(port), None, "{port}");
    }
    let strict = out.table.client_validation(socket(443).unwrap()).unwrap();
    assert!(!strict.insecure_fallback);
    assert_eq!(strict.roots.len(), 1);
    assert_eq!(strict.sources[0].to_string(), "ConfigMap default/ca");
    let fallback = out.table.client_validation(socket(8443).unwrap()).unwrap();
    assert!(fallback.insecure_fallback);
    assert!(out.table.client_validation(socket(80).unwrap()).is_none());
}

fn backend_tls_policy(
    name: &str,
    age: u32,
    section: Option<&str>,
    ca: Value,
) -> Arc<sluice_routing::gateway::BackendTlsPolicy> {
    let mut target = json!({"group": "", "kind": "Service", "name": "web"});
    if let Some(section) = section {
        target["sectionName"] = json!(section);
    }
    from(json!({
        "metadata": {"namespace": "default", "name": name, "generation": 4,
                     "creationTimestamp": ts(age)},
        "spec": {"targetRefs": [target],
                 "validation": {"caCertificateRefs": [ca], "hostname": "web.example"}}}))
}

/// Gateway API BackendTLSPolicy and its conformance tests (BackendTLSPolicy,
/// -ConflictResolution, -InvalidKind, -InvalidCACertificateRef): the Service port is
/// reached over TLS, verified against the ConfigMap's CA and the policy's hostname; the
/// oldest of two policies for one port wins; a policy whose CA cannot be used is not
/// Accepted and its port trusts nothing; ancestors are the Gateways routing to the Service.
#[test]
fn backend_tls_policies_attach_to_service_ports() {
    let ca = |name: &str| json!({"group": "", "kind": "ConfigMap", "name": name});
    let mut inputs = world(
        vec![gateway(
            "default",
            "gw",
            json!([http_listener("http", None)]),
        )],
        vec![route(
            "default",
            "r",
            1,
            json!({"parentRefs": [{"name": "gw"}], "rules": [{"backendRefs": [backend("web", 80)]}]}),
        )],
    );
    inputs.config_maps = vec![config_map("default", "ca", CERT_PEM)].into();
    inputs.backend_tls_policies = vec![
        backend_tls_policy("first", 1, None, ca("ca")),
        backend_tls_policy("second", 2, None, ca("ca")),
        backend_tls_policy(
            "kind",
            3,
            Some("other"),
            json!({"kind": "Secret", "name": "x"}),
        ),
        backend_tls_policy("missing", 4, Some("another"), ca("nope")),
    ]
    .into();
    let out = compiled(&inputs);
    let web = out
        .table
        .backends()
        .iter()
        .find(|b| b.service.name == "web" && b.service.namespace == "default")
        .expect("web");
    assert_eq!(web.protocol, Some(sluice_routing::UpstreamProtocol::Https));
    let tls = web.tls.as_ref().expect("policy applied");
    assert!(tls.verify && tls.server_name);
    assert_eq!(tls.name.as_deref(), Some("web.example"));
    assert_eq!(tls.trusted.len(), 1);
    assert_eq!(tls.policy.as_ref().unwrap().name, "first");

    let status = |name: &str| {
        let p = out
            .gateway
            .policies
            .iter()
            .find(|p| p.object.name == name)
            .unwrap_or_else(|| panic!("{name} has a status"));
        assert_eq!(p.generation, Some(4));
        assert_eq!(p.ancestors.len(), 1, "{name}");
        assert_eq!(p.ancestors[0].parent_ref.name, "gw");
        conditions(&p.ancestors[0].conditions)
    };
    assert_eq!(
        status("first"),
        [
            ("Accepted", true, "Accepted"),
            ("ResolvedRefs", true, "ResolvedRefs")
        ]
    );
    assert_eq!(status("second")[0], ("Accepted", false, "Conflicted"));
    assert_eq!(
        status("kind"),
        [
            ("Accepted", false, "NoValidCACertificate"),
            ("ResolvedRefs", false, "InvalidKind")
        ]
    );
    assert_eq!(
        status("missing"),
        [
            ("Accepted", false, "NoValidCACertificate"),
            ("ResolvedRefs", false, "InvalidCACertificateRef")
        ]
    );
}

/// Gateway API `GatewayBackendClientCertificate` and conformance
/// GatewayInvalidTLSBackendConfiguration: the Gateway's `spec.tls.backend` certificate goes
/// with its routes' entries (shown to backends connected to over TLS); a reference that
/// cannot be used is the Gateway's `ResolvedRefs: False` while it stays Accepted.
#[test]
fn gateway_backend_client_certificate() {
    let with_backend_cert = |name: &str, cert_ref: Value| {
        let mut gw: Gateway =
            (*gateway("default", name, json!([http_listener("http", None)]))).clone();
        gw.spec.tls =
            serde_json::from_value(json!({"backend": {"clientCertificateRef": cert_ref}}))
                .expect("tls");
        Arc::new(gw)
    };
    let mut inputs = world(
        vec![
            with_backend_cert("ok", json!({"name": "client"})),
            with_backend_cert("missing", json!({"name": "nope"})),
            with_backend_cert("kind", json!({"kind": "ConfigMap", "name": "client"})),
            with_backend_cert("grant", json!({"name": "client", "namespace": "other"})),
        ],
        vec![route(
            "default",
            "r",
            1,
            json!({"parentRefs": [{"name": "ok"}], "hostnames": ["a.example"],
                   "rules": [{"backendRefs": [backend("web", 80)]}]}),
        )],
    );
    inputs.secrets = vec![
        tls_secret("default", "client", CERT_PEM, PKCS8_PEM),
        tls_secret("other", "client", CERT_PEM, PKCS8_PEM),
    ]
    .into();
    let out = compiled(&inputs);
    let gateway_conditions = |name: &str| {
        let g = out
            .gateway
            .gateways
            .iter()
            .find(|g| g.gateway.object.name == name)
            .unwrap();
        conditions(&g.gateway.conditions)
    };
    assert_eq!(
        gateway_conditions("ok"),
        [
            ("Accepted", true, "Accepted"),
            ("Programmed", true, "Programmed"),
            ("ResolvedRefs", true, "ResolvedRefs")
        ]
    );
    for (name, reason) in [
        ("missing", "InvalidClientCertificateRef"),
        ("kind", "InvalidClientCertificateRef"),
        ("grant", "RefNotPermitted"),
    ] {
        assert_eq!(gateway_conditions(name)[0], ("Accepted", true, "Accepted"));
        assert_eq!(
            gateway_conditions(name)[2],
            ("ResolvedRefs", false, reason),
            "{name}"
        );
    }
    let headers = Headers(Vec::new());
    let info = RequestInfo {
        listener: None,
        https: false,
        host: "a.example",
        path: "/",
        query: "",
        method: "GET",
        headers: &headers,
    };
    let entry = out
        .table
        .route_request(&info)
        .map(|id| out.table.entry(id))
        .expect("routed");
    let cert = entry
        .policy
        .backend_client_certificate
        .as_ref()
        .expect("cert");
    assert_eq!(cert.secret.to_string(), "Secret default/client");
}

fn listener_set(
    ns: &str,
    name: &str,
    age: u32,
    listeners: Value,
) -> Arc<sluice_routing::gateway::ListenerSet> {
    from(json!({
        "metadata": {"namespace": ns, "name": name, "generation": 3, "creationTimestamp": ts(age)},
        "spec": {"parentRef": {"name": "gw", "namespace": "default"}, "listeners": listeners}}))
}

/// Gateway API ListenerSet and its conformance tests (ListenerSetDefaultNotAllowed,
/// -AllowedNamespaceSame, -HTTPRouting, -HostnameConflict, -ProtocolConflict): a Gateway
/// takes none unless `allowedListeners` says so; a ListenerSet's listeners serve the routes
/// naming the ListenerSet, not those naming the Gateway; a listener that clashes with an
/// earlier one (the Gateway's, then older ListenerSets') is refused alone.
#[test]
fn listener_sets_add_listeners_to_gateways_that_allow_them() {
    let http = |name: &str, host: &str| {
        json!({"name": name, "port": 80, "protocol": "HTTP", "hostname": host,
               "allowedRoutes": {"namespaces": {"from": "All"}}})
    };
    let mut gw: Gateway = (*gateway("default", "gw", json!([http("own", "gw.example")]))).clone();
    let routes = vec![
        route(
            "default",
            "to-gateway",
            1,
            json!({"parentRefs": [{"name": "gw"}], "rules": [{"backendRefs": [backend("web", 80)]}]}),
        ),
        route(
            "default",
            "to-set",
            2,
            json!({"parentRefs": [{"kind": "ListenerSet", "name": "a"}],
                   "rules": [{"backendRefs": [backend("api", 80)]}]}),
        ),
    ];
    let sets = vec![
        listener_set(
            "default",
            "a",
            1,
            json!([http("a", "a.example"), http("clash", "gw.example"),
                   {"name": "tcp", "port": 80, "protocol": "TCP"}]),
        ),
        listener_set("default", "b", 2, json!([http("b", "a.example")])),
        listener_set("other", "c", 3, json!([http("c", "c.example")])),
    ];

    // Not allowed by default.
    let mut inputs = world(vec![Arc::new(gw.clone())], routes.clone());
    inputs.listener_sets = sets.clone().into();
    let out = compiled(&inputs);
    for set in &out.gateway.listener_sets {
        assert_eq!(
            conditions(&set.listener_set.conditions),
            [
                ("Accepted", false, "NotAllowed"),
                ("Programmed", false, "NotAllowed")
            ]
        );
    }
    assert_eq!(answer(&out.table, &get("a.example", "/")), None);

    gw.spec.allowed_listeners =
        serde_json::from_value(json!({"namespaces": {"from": "Same"}})).expect("allowed");
    let mut inputs = world(vec![Arc::new(gw)], routes);
    inputs.listener_sets = sets.into();
    let out = compiled(&inputs);
    let set = |name: &str| {
        out.gateway
            .listener_sets
            .iter()
            .find(|s| s.listener_set.object.name == name)
            .unwrap()
    };
    assert_eq!(
        conditions(&set("a").listener_set.conditions),
        [
            ("Accepted", true, "Accepted"),
            ("Programmed", true, "Programmed")
        ]
    );
    let listener = |s: &str, l: &str| {
        conditions(
            &set(s)
                .listeners
                .iter()
                .find(|x| x.name == l)
                .unwrap()
                .conditions,
        )
    };
    assert_eq!(listener("a", "a")[0], ("Accepted", true, "Accepted"));
    assert_eq!(set("a").listeners[0].attached_routes, 1);
    // Clashes with the Gateway's own listener: refused alone, the Gateway keeps its own.
    assert_eq!(
        listener("a", "clash")[0],
        ("Accepted", false, "HostnameConflict")
    );
    assert_eq!(
        listener("a", "tcp")[0],
        ("Accepted", false, "ProtocolConflict")
    );
    // `b` names the host `a` has: the older one keeps it, `b` has no valid listener.
    assert_eq!(
        conditions(&set("b").listener_set.conditions),
        [
            ("Accepted", false, "ListenersNotValid"),
            ("Programmed", false, "ListenersNotValid")
        ]
    );
    assert_eq!(
        conditions(&set("c").listener_set.conditions)[0],
        ("Accepted", false, "NotAllowed")
    );
    let gateway = &out.gateway.gateways[0];
    assert_eq!(gateway.attached_listener_sets, Some(1));
    assert_eq!(
        gateway.listeners.len(),
        1,
        "the Gateway lists its own listeners only"
    );
    assert_eq!(gateway.listeners[0].attached_routes, 1);
    // Each route on its own parent's listeners only.
    assert_eq!(
        answer(&out.table, &get("a.example", "/")).as_deref(),
        Some("to-set->api")
    );
    assert_eq!(
        answer(&out.table, &get("gw.example", "/")).as_deref(),
        Some("to-gateway->web")
    );
}

/// An HTTPRoute with `sluice.dev/compression: value` sending every path to `web`.
fn compression_route(name: &str, host: &str, value: &str) -> Arc<HttpRoute> {
    from(
        json!({"metadata": {"namespace": "default", "name": name, "generation": 1,
        "creationTimestamp": ts(1), "annotations": {"sluice.dev/compression": value}},
        "spec": {"parentRefs": [{"name": "gw"}], "hostnames": [host],
            "rules": [{"backendRefs": [backend("web", 80)]}]}}),
    )
}

#[test]
fn sluice_compression_annotation_on_an_http_route_switches_its_rules() {
    let gw = gateway("default", "gw", json!([http_listener("http", None)]));
    let routes = vec![
        compression_route("on", "on.example", "on"),
        compression_route("off", "off.example", "off"),
        compression_route("bad", "bad.example", "gzip"),
    ];
    let out = compiled(&world(vec![gw], routes));
    let policy = |host: &'static str| {
        let id = out
            .table
            .route_request(&RequestInfo {
                listener: None,
                https: false,
                host,
                path: "/",
                query: "",
                method: "GET",
                headers: &Headers(vec![]),
            })
            .expect("routed");
        out.table.entry(id).policy.compression
    };
    assert_eq!(policy("on.example"), Some(true));
    assert_eq!(policy("off.example"), Some(false));
    // Invalid: the global setting stays, the route is still served, and a diagnostic
    // (a Warning Event) names the route and the key.
    assert_eq!(policy("bad.example"), None);
    assert_eq!(accepted(&out.gateway, "bad"), (true, "Accepted"));
    let problems: Vec<_> = out
        .diagnostics
        .iter()
        .filter(|d| d.object.kind == "HTTPRoute")
        .collect();
    assert_eq!(problems.len(), 1, "{problems:#?}");
    assert_eq!(problems[0].object.name, "bad");
    assert_eq!(
        problems[0].reason,
        sluice_routing::Reason::InvalidAnnotation
    );
    assert_eq!(
        problems[0].field,
        "metadata.annotations[sluice.dev/compression]"
    );
    assert!(
        problems[0].message.contains("is not on or off"),
        "{}",
        problems[0].message
    );
}

//! Proves that `IncrementalCompiler` is indistinguishable from a full `compile` when
//! Gateway API routes change: after every edit of a generated cluster (HTTPRoutes and
//! GRPCRoutes created, updated, deleted, recreated, touched by a status write and
//! reordered; now and then an EndpointSlice, a Service, the HTTPS listener's Secret, the
//! Gateway or an Ingress sharing their hosts changed) both results route every probe alike
//! (HTTP and HTTPS, GET, header and gRPC requests), pick the same certificates and report
//! the same diagnostics and Gateway API statuses. An EndpointSlice change resolves its
//! backends again; a change to anything else but routes and Ingresses compiles
//! everything; a step that changes nothing the compiler reads (a status
//! write, a reordering) compiles nothing.
//!
//! The deterministic tests at the end say that a route-only edit is compiled in part (the
//! routes of its host names, grafted into the previous table).

mod common;

use std::fmt::Debug;
use std::sync::Arc;

use common::compare::{canon, eq_or_fail, lists_eq};
use common::*;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::networking::v1::Ingress;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use proptest::prelude::*;
use proptest::sample::Index;
use serde_json::{Value, json};
use sluice_routing::gateway::{
    BackendTlsPolicy, Gateway, GatewayClass, GatewayStatuses, GrpcRoute, HttpRoute, ReferenceGrant,
};
use sluice_routing::{
    CompileKind, CompileOptions, Compiled, HeaderLookup, IncrementalCompiler, Inputs, ObjectList,
    ObjectRef, RequestInfo, RouteTable, compile,
};

// ---------------------------------------------------------------------------------------------
// The cluster: a GatewayClass of ours, Gateways `n1/edge` and `n2/other` (shared listeners:
// no `spec.addresses`), Services, EndpointSlices, the HTTPS certificate, a few bystander
// routes and, in some cases, Ingresses on the routes' hosts; generated routes.
// ---------------------------------------------------------------------------------------------

const NAMESPACES: &[&str] = &["n1", "n2"];
/// Route host names: few, so that routes share them (and `edge`'s `wild` listener and
/// `other`'s `*.test` listener intersect with them).
const HOSTNAMES: &[&str] = &["a.test", "b.test", "x.wild.test", "*.test", "*.wild.test"];
/// `sectionName`s of a parentRef to `edge`: its listeners and one it does not have.
const SECTIONS: &[&str] = &["http", "wild", "https", "nope"];
const PREFIXES: &[&str] = &["/", "/api", "/api/v1", "/web/", "/pkg.Echo"];
const EXACTS: &[&str] = &["/", "/api", "/x", "/pkg.Admin/Get"];
/// The last does not compile: the route is refused.
const REGEXES: &[&str] = &["/api/.*", "/x[0-9]*", "/("];
const METHODS: &[&str] = &["GET", "POST"];
/// `s1`, `s2`: ready endpoints; `s3`: no ready endpoint; `gone`: no such Service.
const SERVICES: &[&str] = &["s1", "s2", "s3", "gone"];
const LIVE_SERVICES: &[&str] = &["s1", "s2", "s3"];
const WEIGHTS: &[u32] = &[0, 1, 3, 50];
const GRPC_SERVICES: &[&str] = &["pkg.Echo", "pkg.Admin"];
const GRPC_METHODS: &[&str] = &["Echo", "Get"];
/// `sluice.dev/compression` values: valid, and one that is not (a diagnostic).
const COMPRESSION: &[&str] = &["on", "off", "gzip"];
const COMPRESSION_KEY: &str = "sluice.dev/compression";
/// The Secret (in `n1`) `edge`'s HTTPS listener names; present at first.
const CERT: &str = "cert";

const PROBE_HOSTS: &[&str] = &[
    "a.test",
    "b.test",
    "c.test",
    "x.wild.test",
    "y.wild.test",
    "deep.x.wild.test",
    "wild.test",
    "f0.bystander.test",
    "ing.bystander.test",
    "example.org",
];
const PROBE_PATHS: &[&str] = &[
    "/",
    "/api",
    "/api/v1/x",
    "/web",
    "/web/",
    "/x",
    "/x12",
    "/nothing",
    "/pkg.Echo/Echo",
    "/pkg.Admin/Get",
];
/// (method, headers) of the probes: a plain GET, one matching the generated header
/// matches, and a gRPC call.
const PROBE_KINDS: &[(&str, &[(&str, &str)])] = &[
    ("GET", &[]),
    ("GET", &[("x-v", "1")]),
    (
        "POST",
        &[("content-type", "application/grpc"), ("x-v", "1")],
    ),
];

fn from<T: serde::de::DeserializeOwned>(v: Value) -> Arc<T> {
    Arc::new(serde_json::from_value(v).expect("test object deserialises"))
}

fn gateway_class(name: &str, controller: &str) -> Arc<GatewayClass> {
    from(json!({"metadata": {"name": name, "generation": 1},
        "spec": {"controllerName": controller}}))
}

/// Gateway `n1/edge` in one of three shapes:
/// 0: `http` (port 80, any host, routes from all namespaces), `wild` (port 80,
///    `*.wild.test`, routes from `n1` only), `https` (443, any host, all namespaces);
/// 1: `wild` takes routes from all namespaces and `https` serves `a.test` only;
/// 2: no `wild` listener, and `http` takes routes from `n1` only.
fn edge(shape: u8, generation: i64) -> Arc<Gateway> {
    let all = || json!({"namespaces": {"from": "All"}});
    let https = |host: Option<&str>| {
        let mut l = json!({"name": "https", "port": 443, "protocol": "HTTPS",
            "tls": {"certificateRefs": [{"name": CERT}]}, "allowedRoutes": all()});
        if let Some(host) = host {
            l["hostname"] = json!(host);
        }
        l
    };
    let http = json!({"name": "http", "port": 80, "protocol": "HTTP", "allowedRoutes": all()});
    let listeners = match shape % 3 {
        0 => json!([
            http,
            {"name": "wild", "port": 80, "protocol": "HTTP", "hostname": "*.wild.test"},
            https(None),
        ]),
        1 => json!([
            http,
            {"name": "wild", "port": 80, "protocol": "HTTP", "hostname": "*.wild.test",
             "allowedRoutes": all()},
            https(Some("a.test")),
        ]),
        _ => json!([{"name": "http", "port": 80, "protocol": "HTTP"}, https(None)]),
    };
    from(json!({
        "metadata": {"namespace": "n1", "name": "edge", "generation": generation},
        "spec": {"gatewayClassName": "sluice", "listeners": listeners},
    }))
}

/// Gateway `n2/other`: a listener for `*.test` taking routes from all namespaces, and one
/// for `b.test` taking them from the namespaces labelled `team: blue` (`n2`).
fn other_gateway() -> Arc<Gateway> {
    from(json!({
        "metadata": {"namespace": "n2", "name": "other", "generation": 1},
        "spec": {"gatewayClassName": "sluice", "listeners": [
            {"name": "web", "port": 80, "protocol": "HTTP", "hostname": "*.test",
             "allowedRoutes": {"namespaces": {"from": "All"}}},
            {"name": "sel", "port": 80, "protocol": "HTTP", "hostname": "b.test",
             "allowedRoutes": {"namespaces": {"from": "Selector",
                "selector": {"matchLabels": {"team": "blue"}}}}}]},
    }))
}

/// Namespaces `n1` and `n2`; `n2` alone labelled `team: blue`.
fn namespaces() -> Vec<Arc<Namespace>> {
    vec![
        from(json!({"metadata": {"name": "n1"}})),
        from(json!({"metadata": {"name": "n2", "labels": {"team": "blue"}}})),
    ]
}

/// A ReferenceGrant in `n2` letting HTTPRoutes and GRPCRoutes of `n1` send to its Services
/// (the other way round stays refused).
fn reference_grant() -> Arc<ReferenceGrant> {
    from(json!({
        "metadata": {"namespace": "n2", "name": "from-n1"},
        "spec": {
            "from": [
                {"group": "gateway.networking.k8s.io", "kind": "HTTPRoute", "namespace": "n1"},
                {"group": "gateway.networking.k8s.io", "kind": "GRPCRoute", "namespace": "n1"},
            ],
            "to": [{"group": "", "kind": "Service"}],
        },
    }))
}

/// A BackendTLSPolicy for Service `n1/s2`, trusting ConfigMap `n1/ca`.
fn backend_tls_policy() -> (Arc<BackendTlsPolicy>, Arc<ConfigMap>) {
    let policy = from(json!({
        "metadata": {"namespace": "n1", "name": "s2-tls", "generation": 1,
            "creationTimestamp": ts(0)},
        "spec": {
            "targetRefs": [{"group": "", "kind": "Service", "name": "s2"}],
            "validation": {"caCertificateRefs": [{"group": "", "kind": "ConfigMap", "name": "ca"}],
                "hostname": "s2.internal"},
        },
    }));
    let ca = from(json!({"metadata": {"namespace": "n1", "name": "ca"},
        "data": {"ca.crt": CERT_PEM}}));
    (policy, ca)
}

/// The EndpointSlice of `svc`: one endpoint `10.<n>.0.<last>`, ready or not.
fn svc_slice(ns: &str, svc: &str, last: u8, ready: bool) -> Arc<EndpointSlice> {
    let n = if ns == "n1" { 1 } else { 2 };
    let addr = format!("10.{n}.0.{last}");
    slice(
        ns,
        &format!("{svc}-abcde"),
        svc,
        &[(Some("http"), 8080)],
        &[(&[addr.as_str()], Some(ready))],
    )
}

/// A route spec sending every request for `host` to `svc` port 80, attached to `edge`.
fn one_host_spec(host: &str, svc: &str) -> Value {
    json!({"parentRefs": [{"name": "edge", "namespace": "n1"}], "hostnames": [host],
        "rules": [{"backendRefs": [{"name": svc, "port": 80}]}]})
}

/// HTTPRoutes `n1/by<i>` of hosts no generated route names: what a partial compile must
/// leave as it was.
fn bystander_routes() -> Vec<Arc<HttpRoute>> {
    (0..3)
        .map(|i| {
            from(json!({
                "metadata": {"namespace": "n1", "name": format!("by{i}"), "generation": 1,
                    "creationTimestamp": ts(i)},
                "spec": one_host_spec(&format!("f{i}.bystander.test"), "s2"),
            }))
        })
        .collect()
}

/// Ingress `n1/ing-a` in one of two shapes: `a.test /` to `s1`, or `a.test` Exact `/api`
/// to `s2` and `b.test /` to `s1`.
fn ingress_a(shape: bool) -> Arc<Ingress> {
    let spec = if shape {
        rules(vec![
            rule("a.test", vec![path("/api", "Exact", "s2", 80)]),
            rule("b.test", vec![path("/", "Prefix", "s1", 80)]),
        ])
    } else {
        rules(vec![rule("a.test", vec![path("/", "Prefix", "s1", 80)])])
    };
    ingress("n1", "ing-a", Some(1), spec)
}

/// The Ingresses of a cluster that has them: `ing-a`, one on `*.wild.test` and one on a
/// host of its own.
fn ingresses() -> Vec<Arc<Ingress>> {
    vec![
        ingress_a(false),
        ingress(
            "n2",
            "ing-wild",
            Some(2),
            rules(vec![rule(
                "*.wild.test",
                vec![path("/web/", "Prefix", "s2", 80)],
            )]),
        ),
        ingress(
            "n2",
            "ing-by",
            Some(3),
            rules(vec![rule(
                "ing.bystander.test",
                vec![path("/", "Prefix", "s1", 80)],
            )]),
        ),
    ]
}

// ---------------------------------------------------------------------------------------------
// Generated routes.
// ---------------------------------------------------------------------------------------------

#[derive(Clone, Debug)]
enum Parent {
    /// `n1/edge`, with a `sectionName` or not.
    Edge(Option<&'static str>),
    /// `n2/other`.
    Other,
    /// A Gateway that does not exist.
    Missing,
}

impl Parent {
    fn json(&self) -> Value {
        match self {
            Parent::Edge(None) => json!({"name": "edge", "namespace": "n1"}),
            Parent::Edge(Some(section)) => {
                json!({"name": "edge", "namespace": "n1", "sectionName": section})
            }
            Parent::Other => json!({"name": "other", "namespace": "n2"}),
            Parent::Missing => json!({"name": "nowhere"}),
        }
    }
}

#[derive(Clone, Debug)]
struct BackendSpec {
    svc: &'static str,
    weight: Option<u32>,
    /// An explicit namespace (another one than the route's is refused: no ReferenceGrant).
    namespace: Option<&'static str>,
}

impl BackendSpec {
    fn json(&self) -> Value {
        let mut b = json!({"name": self.svc, "port": 80});
        if let Some(w) = self.weight {
            b["weight"] = json!(w);
        }
        if let Some(ns) = self.namespace {
            b["namespace"] = json!(ns);
        }
        b
    }
}

#[derive(Clone, Debug)]
enum Filter {
    Redirect,
    /// `ReplacePrefixMatch`: refused on a rule without a `PathPrefix` match.
    Rewrite,
    Headers,
    Mirror(&'static str),
}

impl Filter {
    fn json(&self) -> Value {
        match self {
            Filter::Redirect => json!({"type": "RequestRedirect",
                "requestRedirect": {"hostname": "moved.test", "statusCode": 301}}),
            Filter::Rewrite => json!({"type": "URLRewrite", "urlRewrite": {
                "hostname": "internal.test",
                "path": {"type": "ReplacePrefixMatch", "replacePrefixMatch": "/"}}}),
            Filter::Headers => json!({"type": "RequestHeaderModifier",
                "requestHeaderModifier": {"set": [{"name": "x-team", "value": "blue"}]}}),
            Filter::Mirror(svc) => json!({"type": "RequestMirror",
                "requestMirror": {"backendRef": {"name": svc, "port": 80}}}),
        }
    }
}

#[derive(Clone, Debug)]
struct HttpMatch {
    /// (type, value).
    path: Option<(&'static str, &'static str)>,
    /// `x-v: 1`.
    header: bool,
    method: Option<&'static str>,
}

impl HttpMatch {
    fn json(&self) -> Value {
        let mut m = json!({});
        if let Some((ty, value)) = self.path {
            m["path"] = json!({"type": ty, "value": value});
        }
        if self.header {
            m["headers"] = json!([{"name": "x-v", "value": "1"}]);
        }
        if let Some(method) = self.method {
            m["method"] = json!(method);
        }
        m
    }
}

#[derive(Clone, Debug)]
struct GrpcMatch {
    service: Option<&'static str>,
    method: Option<&'static str>,
    /// `RegularExpression` with service `pkg\.Ad.*`.
    regex: bool,
    /// `x-v: 1`.
    header: bool,
}

impl GrpcMatch {
    fn json(&self) -> Value {
        let method = if self.regex {
            json!({"type": "RegularExpression", "service": "pkg\\.Ad.*"})
        } else {
            let mut m = json!({});
            if let Some(s) = self.service {
                m["service"] = json!(s);
            }
            if let Some(name) = self.method {
                m["method"] = json!(name);
            }
            m
        };
        let mut m = json!({ "method": method });
        if self.header {
            m["headers"] = json!([{"name": "x-v", "value": "1"}]);
        }
        m
    }
}

#[derive(Clone, Debug)]
struct Rule<M> {
    /// Empty: the rule's default match.
    matches: Vec<M>,
    backends: Vec<BackendSpec>,
    filter: Option<Filter>,
}

impl<M> Rule<M> {
    fn json(&self, match_json: impl Fn(&M) -> Value) -> Value {
        let backends: Vec<Value> = self.backends.iter().map(BackendSpec::json).collect();
        let mut r = json!({ "backendRefs": backends });
        if !self.matches.is_empty() {
            r["matches"] = Value::Array(self.matches.iter().map(match_json).collect());
        }
        if let Some(f) = &self.filter {
            r["filters"] = json!([f.json()]);
        }
        r
    }
}

/// A route's spec and metadata as generated; whether it is an HTTPRoute or a GRPCRoute is
/// decided when it is created (`http` or `grpc` rules are used accordingly).
#[derive(Clone, Debug)]
struct RouteSpec {
    parents: Vec<Parent>,
    hostnames: Vec<&'static str>,
    http: Vec<Rule<HttpMatch>>,
    grpc: Vec<Rule<GrpcMatch>>,
    compression: Option<&'static str>,
    /// `creationTimestamp` (`None`: none); few values, so that ages tie.
    age: Option<u32>,
}

impl RouteSpec {
    fn json(&self, grpc: bool) -> Value {
        let parents: Vec<Value> = self.parents.iter().map(Parent::json).collect();
        let rules: Vec<Value> = if grpc {
            self.grpc.iter().map(|r| r.json(GrpcMatch::json)).collect()
        } else {
            self.http.iter().map(|r| r.json(HttpMatch::json)).collect()
        };
        json!({"parentRefs": parents, "hostnames": self.hostnames, "rules": rules})
    }
}

fn arb_parent() -> impl Strategy<Value = Parent> {
    prop_oneof![
        6 => Just(Parent::Edge(None)),
        4 => prop::sample::select(SECTIONS).prop_map(|s| Parent::Edge(Some(s))),
        2 => Just(Parent::Other),
        1 => Just(Parent::Missing),
    ]
}

fn arb_backend() -> impl Strategy<Value = BackendSpec> {
    (
        prop::sample::select(SERVICES),
        prop::option::weighted(0.4, prop::sample::select(WEIGHTS)),
        prop::option::weighted(0.1, prop::sample::select(NAMESPACES)),
    )
        .prop_map(|(svc, weight, namespace)| BackendSpec {
            svc,
            weight,
            namespace,
        })
}

fn arb_backends() -> impl Strategy<Value = Vec<BackendSpec>> {
    prop_oneof![
        1 => Just(Vec::new()),
        8 => prop::collection::vec(arb_backend(), 1..=3),
    ]
}

fn arb_filter() -> impl Strategy<Value = Option<Filter>> {
    prop::option::weighted(
        0.3,
        prop_oneof![
            Just(Filter::Redirect),
            Just(Filter::Rewrite),
            Just(Filter::Headers),
            prop::sample::select(SERVICES).prop_map(Filter::Mirror),
        ],
    )
}

fn arb_path() -> impl Strategy<Value = (&'static str, &'static str)> {
    prop_oneof![
        4 => prop::sample::select(PREFIXES).prop_map(|v| ("PathPrefix", v)),
        2 => prop::sample::select(EXACTS).prop_map(|v| ("Exact", v)),
        1 => prop::sample::select(REGEXES).prop_map(|v| ("RegularExpression", v)),
    ]
}

fn arb_http_rule() -> impl Strategy<Value = Rule<HttpMatch>> {
    let m = (
        prop::option::weighted(0.9, arb_path()),
        prop::bool::weighted(0.2),
        prop::option::weighted(0.15, prop::sample::select(METHODS)),
    )
        .prop_map(|(path, header, method)| HttpMatch {
            path,
            header,
            method,
        });
    (
        prop::collection::vec(m, 0..=2),
        arb_backends(),
        arb_filter(),
    )
        .prop_map(|(matches, backends, filter)| Rule {
            matches,
            backends,
            filter,
        })
}

fn arb_grpc_rule() -> impl Strategy<Value = Rule<GrpcMatch>> {
    let m = (
        prop::option::weighted(0.8, prop::sample::select(GRPC_SERVICES)),
        prop::option::weighted(0.5, prop::sample::select(GRPC_METHODS)),
        prop::bool::weighted(0.15),
        prop::bool::weighted(0.2),
    )
        .prop_map(|(service, method, regex, header)| GrpcMatch {
            service,
            method,
            regex,
            header,
        });
    (
        prop::collection::vec(m, 0..=2),
        arb_backends(),
        arb_filter(),
    )
        .prop_map(|(matches, backends, filter)| Rule {
            matches,
            backends,
            filter,
        })
}

fn arb_route() -> impl Strategy<Value = RouteSpec> {
    (
        prop::collection::vec(arb_parent(), 1..=2),
        prop_oneof![
            1 => Just(Vec::new()),
            3 => prop::collection::vec(prop::sample::select(HOSTNAMES), 1..=2),
        ],
        prop::collection::vec(arb_http_rule(), 1..=3),
        prop::collection::vec(arb_grpc_rule(), 1..=3),
        prop::option::weighted(0.15, prop::sample::select(COMPRESSION)),
        prop::option::weighted(0.9, 0u32..3),
    )
        .prop_map(
            |(parents, hostnames, http, grpc, compression, age)| RouteSpec {
                parents,
                hostnames,
                http,
                grpc,
                compression,
                age,
            },
        )
}

// ---------------------------------------------------------------------------------------------
// The world: the inputs and what the generated routes are.
// ---------------------------------------------------------------------------------------------

/// A generated route as it is in the cluster.
#[derive(Clone, Debug)]
struct Live {
    grpc: bool,
    ns: &'static str,
    name: String,
    age: Option<u32>,
    generation: i64,
    compression: Option<&'static str>,
    spec: Value,
}

impl Live {
    fn http(ns: &'static str, name: &str, age: Option<u32>, spec: Value) -> Live {
        Live {
            grpc: false,
            ns,
            name: name.to_owned(),
            age,
            generation: 1,
            compression: None,
            spec,
        }
    }

    fn grpc(ns: &'static str, name: &str, age: Option<u32>, spec: Value) -> Live {
        Live {
            grpc: true,
            ..Live::http(ns, name, age, spec)
        }
    }

    fn generated(grpc: bool, ns: &'static str, name: String, spec: &RouteSpec) -> Live {
        Live {
            grpc,
            ns,
            name,
            age: spec.age,
            generation: 1,
            compression: spec.compression,
            spec: spec.json(grpc),
        }
    }

    fn kind(&self) -> &'static str {
        if self.grpc { "GRPCRoute" } else { "HTTPRoute" }
    }

    /// What the compiler reads of it (all but `resourceVersion` and `status`).
    fn read(&self) -> (Option<u32>, i64, Option<&'static str>, &Value) {
        (self.age, self.generation, self.compression, &self.spec)
    }

    /// The object, at `resourceVersion` `version`.
    fn object(&self, version: u64) -> Value {
        let mut meta = json!({"namespace": self.ns, "name": self.name,
            "generation": self.generation, "resourceVersion": version.to_string()});
        if let Some(age) = self.age {
            meta["creationTimestamp"] = json!(ts(age));
        }
        if let Some(value) = self.compression {
            let mut annotations = serde_json::Map::new();
            annotations.insert(COMPRESSION_KEY.to_owned(), json!(value));
            meta["annotations"] = Value::Object(annotations);
        }
        json!({"metadata": meta, "spec": self.spec})
    }
}

fn position<T>(
    list: &ObjectList<T>,
    meta: impl Fn(&T) -> &ObjectMeta,
    ns: &str,
    name: &str,
) -> Option<usize> {
    list.iter().position(|o| {
        let m = meta(o.as_ref());
        m.namespace.as_deref() == Some(ns) && m.name.as_deref() == Some(name)
    })
}

/// Puts `object` in place of the one of its name in `list`, or at the end.
fn replace_or_push<T>(list: &mut ObjectList<T>, meta: impl Fn(&T) -> &ObjectMeta, object: Arc<T>) {
    let m = meta(object.as_ref());
    let (ns, name) = (
        m.namespace.clone().unwrap_or_default(),
        m.name.clone().unwrap_or_default(),
    );
    match position(list, meta, &ns, &name) {
        Some(i) => list[i] = object,
        None => list.push(object),
    }
}

struct World {
    inputs: Inputs,
    /// The generated routes, oldest edit first (what an edit's `Index` picks from).
    routes: Vec<Live>,
    edge_shape: u8,
    edge_generation: i64,
    /// Whether the cluster has the Ingresses of [`ingresses`].
    with_ingresses: bool,
    ingress_shape: bool,
    /// The next `resourceVersion`.
    version: u64,
}

impl World {
    fn new(with_ingresses: bool) -> World {
        World::with(with_ingresses, false)
    }

    /// A world with the Ingresses or not, and a BackendTLSPolicy or not.
    fn with(with_ingresses: bool, with_policy: bool) -> World {
        let mut inputs = Inputs {
            gateway_classes: vec![
                gateway_class("sluice", &CompileOptions::default().gateway_controller_name),
                gateway_class("theirs", "example.com/other"),
            ]
            .into(),
            gateways: vec![edge(0, 1), other_gateway()].into(),
            http_routes: bystander_routes().into(),
            secrets: vec![tls_secret("n1", CERT, CERT_PEM, PKCS8_PEM)].into(),
            namespaces: namespaces().into(),
            reference_grants: vec![reference_grant()].into(),
            ..Inputs::default()
        };
        if with_policy {
            let (policy, ca) = backend_tls_policy();
            inputs.backend_tls_policies = vec![policy].into();
            inputs.config_maps = vec![ca].into();
        }
        for ns in NAMESPACES {
            for (i, svc) in LIVE_SERVICES.iter().enumerate() {
                inputs
                    .services
                    .push(service(ns, svc, &[(Some("http"), 80)]));
                let last = u8::try_from(i).expect("few services") + 1;
                inputs
                    .endpoint_slices
                    .push(svc_slice(ns, svc, last, *svc != "s3"));
            }
        }
        if with_ingresses {
            inputs.ingress_classes = vec![our_class()].into();
            inputs.ingresses = ingresses().into();
        }
        World {
            inputs,
            routes: Vec::new(),
            edge_shape: 0,
            edge_generation: 1,
            with_ingresses,
            ingress_shape: false,
            version: 1,
        }
    }

    fn next_version(&mut self) -> u64 {
        self.version += 1;
        self.version
    }

    /// Writes `self.routes[i]` into the inputs (a new object, a new `resourceVersion`).
    fn put(&mut self, i: usize) {
        let version = self.next_version();
        let live = &self.routes[i];
        let object = live.object(version);
        if live.grpc {
            let r: Arc<GrpcRoute> = from(object);
            replace_or_push(&mut self.inputs.grpc_routes, |r| &r.metadata, r);
        } else {
            let r: Arc<HttpRoute> = from(object);
            replace_or_push(&mut self.inputs.http_routes, |r| &r.metadata, r);
        }
    }

    fn add(&mut self, live: Live) {
        self.routes.push(live);
        self.put(self.routes.len() - 1);
    }

    /// Removes `self.routes[i]` from the cluster.
    fn remove(&mut self, i: usize) -> Live {
        let live = self.routes.remove(i);
        let (ns, name) = (live.ns, live.name.as_str());
        if live.grpc {
            let p = position(&self.inputs.grpc_routes, |r| &r.metadata, ns, name)
                .expect("a live GRPCRoute is in the inputs");
            self.inputs.grpc_routes.remove(p);
        } else {
            let p = position(&self.inputs.http_routes, |r| &r.metadata, ns, name)
                .expect("a live HTTPRoute is in the inputs");
            self.inputs.http_routes.remove(p);
        }
        live
    }

    /// A status write to `self.routes[i]`: a new object whose `resourceVersion` and
    /// `status` alone differ.
    fn touch(&mut self, i: usize) {
        let version = self.next_version().to_string();
        let status = json!({"parents": [{"parentRef": {"name": "edge"},
            "controllerName": CompileOptions::default().gateway_controller_name,
            "conditions": [{"type": "Accepted", "status": "True", "reason": "Accepted"}]}]});
        let live = &self.routes[i];
        if live.grpc {
            let list = &mut self.inputs.grpc_routes;
            let p = position(list, |r| &r.metadata, live.ns, &live.name).expect("live");
            let mut r = (*list[p]).clone();
            r.metadata.resource_version = Some(version);
            r.status = Some(status.into());
            list[p] = Arc::new(r);
        } else {
            let list = &mut self.inputs.http_routes;
            let p = position(list, |r| &r.metadata, live.ns, &live.name).expect("live");
            let mut r = (*list[p]).clone();
            r.metadata.resource_version = Some(version);
            r.status = Some(status.into());
            list[p] = Arc::new(r);
        }
    }

    /// A status write to every route of the inputs (bystanders too).
    fn touch_all(&mut self) {
        for i in 0..self.routes.len() {
            self.touch(i);
        }
        for i in 0..self.inputs.http_routes.len() {
            let version = self.next_version().to_string();
            let mut r = (*self.inputs.http_routes[i]).clone();
            r.metadata.resource_version = Some(version);
            r.status = Some(json!({"parents": []}).into());
            self.inputs.http_routes[i] = Arc::new(r);
        }
    }

    fn index(&self, ns: &str, name: &str) -> usize {
        self.routes
            .iter()
            .position(|r| r.ns == ns && r.name == name)
            .expect("a route of that name")
    }

    /// Every generated route as JSON, sorted by kind, namespace and name, and the state
    /// of the rest: the cluster a failure happened in.
    fn dump(&self) -> String {
        let mut routes: Vec<&Live> = self.routes.iter().collect();
        routes.sort_by_key(|r| (r.kind(), r.ns, r.name.clone()));
        let mut out = String::new();
        for r in routes {
            out.push_str(&format!("  {} {}\n", r.kind(), r.object(0)));
        }
        let cert = position(&self.inputs.secrets, |s| &s.metadata, "n1", CERT).is_some();
        out.push_str(&format!(
            "  edge shape {} (generation {}), Secret n1/{CERT} present: {cert}, Ingresses: {}, \
             BackendTLSPolicy: {}\n",
            self.edge_shape,
            self.edge_generation,
            match (self.with_ingresses, self.ingress_shape) {
                (false, _) => "none",
                (true, false) => "ing-a shape 0",
                (true, true) => "ing-a shape 1",
            },
            !self.inputs.backend_tls_policies.is_empty(),
        ));
        out
    }
}

// ---------------------------------------------------------------------------------------------
// Edits.
// ---------------------------------------------------------------------------------------------

#[derive(Clone, Debug)]
enum Edit {
    /// A new route `c<step>` (in a batch `c<step>-<k>`) in `ns`.
    Create {
        ns: &'static str,
        grpc: bool,
        spec: RouteSpec,
    },
    /// Another spec and annotations for a generated route (its kind and age stay; its
    /// generation moves when the spec or annotations change).
    Update { which: Index, spec: RouteSpec },
    /// Deletes a generated route.
    Delete { which: Index },
    /// A status write: a new `Arc` with another `resourceVersion` and a `status`. Not a
    /// change.
    Touch { which: Index },
    /// Deletes a route and creates another of the same name and kind (a new age).
    Recreate { which: Index, spec: RouteSpec },
    /// Several route edits before one compile (as a debounced controller sees them).
    Batch(Vec<Edit>),
    /// Replaces the EndpointSlice of a Service.
    Slice {
        ns: &'static str,
        svc: &'static str,
        last: u8,
        ready: bool,
    },
    /// Replaces a Service with an equal copy (Services count by identity).
    TouchService { ns: &'static str, svc: &'static str },
    /// Removes the HTTPS listener's Secret if present, else adds it.
    ToggleCert,
    /// Gives `edge` another of its shapes (`shift` 1 or 2 on), with a new generation.
    Gateway { shift: u8 },
    /// Gives Ingress `ing-a` its other shape (nothing where the cluster has no Ingresses).
    Ingress,
}

/// What an edit changes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Scope {
    /// HTTPRoutes and GRPCRoutes only.
    Routes,
    /// An Ingress only.
    Ingresses,
    /// Something else: the compile must be full.
    Other,
}

impl Edit {
    fn scope(&self) -> Scope {
        match self {
            Edit::Create { .. }
            | Edit::Update { .. }
            | Edit::Delete { .. }
            | Edit::Touch { .. }
            | Edit::Recreate { .. }
            | Edit::Batch(_) => Scope::Routes,
            Edit::Ingress => Scope::Ingresses,
            Edit::Slice { .. }
            | Edit::TouchService { .. }
            | Edit::ToggleCert
            | Edit::Gateway { .. } => Scope::Other,
        }
    }
}

fn arb_route_edit() -> impl Strategy<Value = Edit> {
    prop_oneof![
        6 => (prop::sample::select(NAMESPACES), prop::bool::weighted(0.3), arb_route())
            .prop_map(|(ns, grpc, spec)| Edit::Create { ns, grpc, spec }),
        6 => (any::<Index>(), arb_route()).prop_map(|(which, spec)| Edit::Update { which, spec }),
        4 => any::<Index>().prop_map(|which| Edit::Delete { which }),
        2 => any::<Index>().prop_map(|which| Edit::Touch { which }),
        1 => (any::<Index>(), arb_route()).prop_map(|(which, spec)| Edit::Recreate { which, spec }),
    ]
}

fn arb_other_edit() -> impl Strategy<Value = Edit> {
    let ns = || prop::sample::select(NAMESPACES);
    prop_oneof![
        (
            ns(),
            prop::sample::select(LIVE_SERVICES),
            10u8..14,
            any::<bool>()
        )
            .prop_map(|(ns, svc, last, ready)| Edit::Slice {
                ns,
                svc,
                last,
                ready
            }),
        (ns(), prop::sample::select(LIVE_SERVICES))
            .prop_map(|(ns, svc)| Edit::TouchService { ns, svc }),
        Just(Edit::ToggleCert),
        (1u8..=2).prop_map(|shift| Edit::Gateway { shift }),
    ]
}

fn arb_edit() -> impl Strategy<Value = Edit> {
    prop_oneof![
        16 => arb_route_edit(),
        2 => prop::collection::vec(arb_route_edit(), 2..=4).prop_map(Edit::Batch),
        2 => arb_other_edit(),
        1 => Just(Edit::Ingress),
    ]
}

/// A step: an edit, then (when a seed is given) a shuffle of every list of routes and of
/// the Ingresses.
type Step = (Edit, Option<u64>);

#[derive(Clone, Debug)]
struct Case {
    with_ingresses: bool,
    /// A BackendTLSPolicy in the cluster (with one, route edits may compile everything).
    with_policy: bool,
    /// (namespace, GRPCRoute rather than HTTPRoute, spec) of `r0`, `r1`, ... (numbered by
    /// kind).
    base: Vec<(&'static str, bool, RouteSpec)>,
    steps: Vec<Step>,
}

fn arb_case() -> impl Strategy<Value = Case> {
    (
        prop::bool::weighted(0.7),
        prop::bool::weighted(0.2),
        prop::collection::vec(
            (
                prop::sample::select(NAMESPACES),
                prop::bool::weighted(0.3),
                arb_route(),
            ),
            3..=10,
        ),
        prop::collection::vec(
            (arb_edit(), prop::option::weighted(0.25, any::<u64>())),
            4..=12,
        ),
    )
        .prop_map(|(with_ingresses, with_policy, base, steps)| Case {
            with_ingresses,
            with_policy,
            base,
            steps,
        })
}

/// `list` in the order [`shuffle`] gives.
fn shuffle_list<T>(list: &mut ObjectList<T>, seed: u64) {
    let mut items = list.to_vec();
    shuffle(&mut items, seed);
    *list = items.into();
}

/// Deterministic Fisher-Yates from a seed (xorshift64*).
fn shuffle<T>(v: &mut [T], seed: u64) {
    let mut x = seed | 1;
    for i in (1..v.len()).rev() {
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        let r = x.wrapping_mul(0x2545_F491_4F6C_DD1D);
        let j = usize::try_from(r % (i as u64 + 1)).expect("small");
        v.swap(i, j);
    }
}

/// Applies `edit` (step `tag`) to `world`, keeping every unchanged object the same `Arc`.
/// Returns whether something the compiler reads changed.
fn apply(world: &mut World, tag: &str, edit: &Edit) -> bool {
    match edit {
        Edit::Batch(edits) => {
            let mut changed = false;
            for (k, edit) in edits.iter().enumerate() {
                changed |= apply(world, &format!("{tag}-{k}"), edit);
            }
            changed
        }
        Edit::Create { ns, grpc, spec } => {
            world.add(Live::generated(*grpc, ns, format!("c{tag}"), spec));
            true
        }
        Edit::Update { which, spec } => {
            if world.routes.is_empty() {
                return false;
            }
            let i = which.index(world.routes.len());
            let live = &mut world.routes[i];
            let spec_json = spec.json(live.grpc);
            let changed = spec_json != live.spec || spec.compression != live.compression;
            if changed {
                live.generation += 1;
            }
            live.spec = spec_json;
            live.compression = spec.compression;
            world.put(i);
            changed
        }
        Edit::Delete { which } => {
            if world.routes.is_empty() {
                return false;
            }
            let i = which.index(world.routes.len());
            world.remove(i);
            true
        }
        Edit::Touch { which } => {
            if !world.routes.is_empty() {
                let i = which.index(world.routes.len());
                world.touch(i);
            }
            false
        }
        Edit::Recreate { which, spec } => {
            if world.routes.is_empty() {
                return false;
            }
            let i = which.index(world.routes.len());
            let old = world.remove(i);
            let new = Live::generated(old.grpc, old.ns, old.name.clone(), spec);
            let changed = old.read() != new.read();
            world.add(new);
            changed
        }
        Edit::Slice {
            ns,
            svc,
            last,
            ready,
        } => {
            let name = format!("{svc}-abcde");
            let slices = &mut world.inputs.endpoint_slices;
            let i = position(slices, |s| &s.metadata, ns, &name)
                .expect("every live Service has a slice");
            slices[i] = svc_slice(ns, svc, *last, *ready);
            true
        }
        Edit::TouchService { ns, svc } => {
            let services = &mut world.inputs.services;
            let i = position(services, |s| &s.metadata, ns, svc).expect("live Service");
            services[i] = Arc::new((*services[i]).clone());
            true
        }
        Edit::ToggleCert => {
            let secrets = &mut world.inputs.secrets;
            match position(secrets, |s| &s.metadata, "n1", CERT) {
                Some(i) => {
                    secrets.remove(i);
                }
                None => secrets.push(tls_secret("n1", CERT, CERT_PEM, PKCS8_PEM)),
            }
            true
        }
        Edit::Gateway { shift } => {
            world.edge_shape = (world.edge_shape + shift) % 3;
            world.edge_generation += 1;
            let gw = edge(world.edge_shape, world.edge_generation);
            replace_or_push(&mut world.inputs.gateways, |g| &g.metadata, gw);
            true
        }
        Edit::Ingress => {
            if !world.with_ingresses {
                return false;
            }
            world.ingress_shape = !world.ingress_shape;
            let ing = ingress_a(world.ingress_shape);
            replace_or_push(&mut world.inputs.ingresses, |i| &i.metadata, ing);
            true
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Comparison.
// ---------------------------------------------------------------------------------------------

struct Headers(&'static [(&'static str, &'static str)]);

impl HeaderLookup for Headers {
    fn header(&self, name: &str) -> Option<&[u8]> {
        self.0
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_bytes())
    }
}

fn request(
    table: &RouteTable,
    https: bool,
    host: &str,
    path: &str,
    (method, headers): (&str, &'static [(&'static str, &'static str)]),
) -> Option<usize> {
    table.route_request(&RequestInfo {
        https,
        listener: None,
        host,
        path,
        query: "",
        method,
        headers: &Headers(headers),
    })
}

/// Everything observable about the two compilations, compared part by part: the table's
/// answers (Ingress-style lookups, and Gateway requests over HTTP and HTTPS with and
/// without headers, gRPC calls included), certificates, hosts, backends, diagnostics and
/// the Gateway API statuses.
fn compare(a: &Compiled, b: &Compiled) -> Result<(), TestCaseError> {
    let (ta, tb) = (&a.table, &b.table);
    lists_eq("table.routes()", &ta.routes(), &tb.routes())?;

    let entries_a: Vec<String> = ta.entries().iter().map(canon).collect();
    let entries_b: Vec<String> = tb.entries().iter().map(canon).collect();
    let entry = |entries: &[String], id: Option<usize>| id.map(|id| entries[id].clone());
    for host in PROBE_HOSTS {
        for path in PROBE_PATHS {
            eq_or_fail(
                &format!("table.route({host:?}, {path:?})"),
                &entry(&entries_a, ta.route_id(host, path)),
                &entry(&entries_b, tb.route_id(host, path)),
            )?;
            for https in [true, false] {
                for probe in PROBE_KINDS {
                    eq_or_fail(
                        &format!(
                            "table.route_request(https: {https}, {host:?}, {path:?}, {probe:?})"
                        ),
                        &entry(&entries_a, request(ta, https, host, path, *probe)),
                        &entry(&entries_b, request(tb, https, host, path, *probe)),
                    )?;
                }
            }
        }
        eq_or_fail(
            &format!("table.certificate({host:?}).secret"),
            &ta.certificate(host).map(|c| c.secret.clone()),
            &tb.certificate(host).map(|c| c.secret.clone()),
        )?;
    }
    eq_or_fail(
        "table.default_certificate().secret",
        &ta.default_certificate().map(|c| c.secret.clone()),
        &tb.default_certificate().map(|c| c.secret.clone()),
    )?;
    let secrets =
        |t: &RouteTable| -> Vec<ObjectRef> { t.certificates().map(|c| c.secret.clone()).collect() };
    lists_eq("table.certificates()", &secrets(ta), &secrets(tb))?;
    lists_eq("table.hosts()", &ta.hosts(), &tb.hosts())?;
    lists_eq(
        "table.gateway_sockets()",
        &ta.gateway_sockets(),
        &tb.gateway_sockets(),
    )?;
    let forwarded = |t: &RouteTable| {
        let mut v: Vec<_> = t
            .forwarded_backends()
            .into_iter()
            .map(|b| (format!("{:?}", b.service), b.endpoints.clone()))
            .collect();
        v.sort();
        v
    };
    lists_eq(
        "table.forwarded_backends() (sorted)",
        &forwarded(ta),
        &forwarded(tb),
    )?;
    eq_or_fail(
        "table.default_backend().service",
        &ta.default_backend().map(|b| b.service.clone()),
        &tb.default_backend().map(|b| b.service.clone()),
    )?;
    lists_eq("diagnostics", &a.diagnostics, &b.diagnostics)?;
    lists_eq(
        "ours",
        &a.ours.iter().collect::<Vec<_>>(),
        &b.ours.iter().collect::<Vec<_>>(),
    )?;
    lists_eq(
        "trailing_slash_redirects",
        &a.trailing_slash_redirects,
        &b.trailing_slash_redirects,
    )?;
    lists_eq("flag_diagnostics", &a.flag_diagnostics, &b.flag_diagnostics)?;
    let routes = |g: &GatewayStatuses| g.routes.iter().cloned().collect::<Vec<_>>();
    lists_eq("gateway.routes", &routes(&a.gateway), &routes(&b.gateway))?;
    lists_eq("gateway.gateways", &a.gateway.gateways, &b.gateway.gateways)?;
    eq_or_fail("gateway statuses", &a.gateway, &b.gateway)?;
    Ok(())
}

/// The count an `Incremental` compile reports (`None` for `Full`), whatever its field is
/// called (`ingresses` before the route path, `objects` after): read off `Debug`, as
/// `matches!` cannot bind a field without naming it.
fn incremental_count(kind: CompileKind) -> Option<usize> {
    let text = format!("{kind:?}");
    let fields = text.strip_prefix("Incremental {")?.strip_suffix('}')?;
    let (_, count) = fields.split_once(':')?;
    Some(count.trim().parse().expect("a count"))
}

/// Runs one case: the base compile, then each step, comparing the incremental compiler
/// with a full compile after every one.
fn run_case(case: &Case) -> Result<(), TestCaseError> {
    let opts = CompileOptions::default();
    let mut world = World::with(case.with_ingresses, case.with_policy);
    // Numbered by kind: an HTTPRoute and a GRPCRoute may share a namespace and name (and
    // an age: their order is then the full compile's, HTTPRoutes first).
    let mut numbers = [0usize; 2];
    for (ns, grpc, spec) in &case.base {
        let number = &mut numbers[usize::from(*grpc)];
        world.add(Live::generated(*grpc, ns, format!("r{number}"), spec));
        *number += 1;
    }
    let mut inc = IncrementalCompiler::new();
    let a = inc.compile(&world.inputs, &opts);
    let b = compile(&world.inputs, &opts);
    compare(&a, &b).map_err(|e| {
        TestCaseError::fail(format!("base compile: {e}\ncluster:\n{}", world.dump()))
    })?;
    prop_assert_eq!(
        inc.last_kind(),
        CompileKind::Full,
        "the first compile is full"
    );

    for (step, (edit, seed)) in case.steps.iter().enumerate() {
        let changed = apply(&mut world, &step.to_string(), edit);
        if let Some(seed) = seed {
            shuffle_list(&mut world.inputs.http_routes, *seed);
            shuffle_list(&mut world.inputs.grpc_routes, seed.rotate_left(21));
            shuffle_list(&mut world.inputs.ingresses, seed.rotate_left(42));
        }
        let a = inc.compile(&world.inputs, &opts);
        let b = compile(&world.inputs, &opts);
        let kind = inc.last_kind();
        compare(&a, &b).map_err(|e| {
            TestCaseError::fail(format!(
                "step {step} ({edit:?}, reordered: {}, compiled {kind:?}): {e}\ncluster:\n{}",
                seed.is_some(),
                world.dump()
            ))
        })?;
        if matches!(edit, Edit::Slice { .. }) {
            // Endpoints alone: their backends are resolved again, nothing else is read.
            prop_assert!(
                matches!(kind, CompileKind::Incremental { .. }),
                "step {} ({:?}) changed only an EndpointSlice: compiled {:?}",
                step,
                edit,
                kind
            );
        } else if edit.scope() == Scope::Other {
            prop_assert_eq!(
                kind,
                CompileKind::Full,
                "step {} ({:?}) changed more than routes and Ingresses: the compile must be full",
                step,
                edit
            );
        } else if !changed {
            prop_assert!(
                matches!(kind, CompileKind::Incremental { .. }),
                "step {} ({:?}, reordered: {}) changed nothing the compiler reads (a status \
                 write or a reordering) and compiled {:?}",
                step,
                edit,
                seed.is_some(),
                kind
            );
        }
        if let Some(count) = incremental_count(kind) {
            let objects = world.inputs.http_routes.len()
                + world.inputs.grpc_routes.len()
                + world.inputs.ingresses.len();
            prop_assert!(
                count <= objects,
                "step {}: Incremental read {} objects of {}",
                step,
                count,
                objects
            );
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, max_shrink_iters: 2048, ..ProptestConfig::default() })]

    #[test]
    fn an_incremental_compile_after_route_edits_equals_a_full_compile(case in arb_case()) {
        run_case(&case)?;
    }
}

// ---------------------------------------------------------------------------------------------
// Deterministic cases.
// ---------------------------------------------------------------------------------------------

/// `compare`, as a panic.
fn assert_same(inc: &Compiled, full: &Compiled, when: &str) {
    if let Err(e) = compare(inc, full) {
        panic!("{when}: {e}");
    }
}

/// (route, Service) of what a plain HTTP GET of `host` `path` reaches, or `None` (404).
fn served(table: &RouteTable, host: &str, path: &str) -> Option<(String, String)> {
    let id = request(table, false, host, path, ("GET", &[]))?;
    let entry = table.entry(id);
    Some((
        entry.source.name.clone(),
        entry.backend.service.name.clone(),
    ))
}

fn pair(route: &str, svc: &str) -> Option<(String, String)> {
    Some((route.to_owned(), svc.to_owned()))
}

#[test]
fn one_route_created_among_200_unrelated_is_compiled_alone() {
    let opts = CompileOptions::default();
    let mut world = World::new(false);
    for i in 0..200 {
        world.add(Live::http(
            "n1",
            &format!("r{i}"),
            Some(1),
            one_host_spec(&format!("r{i}.test"), "s1"),
        ));
    }
    let mut inc = IncrementalCompiler::new();
    inc.compile(&world.inputs, &opts);
    assert_eq!(inc.last_kind(), CompileKind::Full);

    world.add(Live::http(
        "n2",
        "new",
        Some(2),
        one_host_spec("new.test", "s2"),
    ));
    let created = inc.compile(&world.inputs, &opts);
    let created_kind = inc.last_kind();
    assert_same(
        &created,
        &compile(&world.inputs, &opts),
        "after the creation",
    );
    assert_eq!(
        served(&created.table, "new.test", "/anything"),
        pair("new", "s2")
    );

    let last = world.routes.len() - 1;
    world.remove(last);
    let deleted = inc.compile(&world.inputs, &opts);
    let deleted_kind = inc.last_kind();
    assert_same(
        &deleted,
        &compile(&world.inputs, &opts),
        "after the deletion",
    );
    assert_eq!(served(&deleted.table, "new.test", "/anything"), None);
    assert_eq!(served(&deleted.table, "r5.test", "/"), pair("r5", "s1"));
    for i in 0..200 {
        let host = format!("r{i}.test");
        assert_eq!(
            served(&deleted.table, &host, "/").map(|(route, _)| route),
            Some(format!("r{i}")),
            "{host} still routes"
        );
    }

    // Needs the route path of `IncrementalCompiler` (until then route edits compile
    // everything): the results above are a full compile's either way.
    assert_eq!(
        incremental_count(created_kind),
        Some(1),
        "only the new route names new.test: it alone is compiled ({created_kind:?})"
    );
    assert!(
        matches!(deleted_kind, CompileKind::Incremental { .. }),
        "a deletion is route-only: {deleted_kind:?}"
    );
}

/// A cluster where routes (and Ingresses) share host names, for the tests below.
fn shared_hosts_world() -> World {
    let mut world = World::new(true);
    let to = |host: &str, path: &str, svc: &str| {
        json!({"parentRefs": [{"name": "edge", "namespace": "n1"}], "hostnames": [host],
            "rules": [{"matches": [{"path": {"type": "PathPrefix", "value": path}}],
                "backendRefs": [{"name": svc, "port": 80}]}]})
    };
    world.add(Live::http("n1", "a-root", Some(1), to("a.test", "/", "s1")));
    world.add(Live::http(
        "n2",
        "a-api",
        Some(2),
        to("a.test", "/api", "s2"),
    ));
    world.add(Live::http(
        "n1",
        "wild",
        Some(1),
        to("*.wild.test", "/", "s1"),
    ));
    world.add(Live::http("n2", "star", Some(3), to("*.test", "/x", "s2")));
    world.add(Live::grpc(
        "n1",
        "echo",
        Some(1),
        json!({"parentRefs": [{"name": "edge", "namespace": "n1", "sectionName": "http"}],
            "hostnames": ["b.test"],
            "rules": [{"matches": [{"method": {"service": "pkg.Echo"}}],
                "backendRefs": [{"name": "s2", "port": 80}]}]}),
    ));
    for i in 0..40 {
        world.add(Live::http(
            "n2",
            &format!("u{i}"),
            Some(4),
            to(&format!("u{i}.test"), "/", "s1"),
        ));
    }
    world
}

#[test]
fn a_status_write_to_every_route_is_compiled_incrementally_reading_nothing() {
    let opts = CompileOptions::default();
    let mut world = shared_hosts_world();
    let mut inc = IncrementalCompiler::new();
    let before = inc.compile(&world.inputs, &opts);
    world.touch_all();
    let after = inc.compile(&world.inputs, &opts);
    let kind = inc.last_kind();
    assert_same(
        &after,
        &compile(&world.inputs, &opts),
        "after the status writes",
    );
    assert_eq!(
        after.gateway, before.gateway,
        "a status write changes no status"
    );
    assert_eq!(
        incremental_count(kind),
        Some(0),
        "status writes read nothing: {kind:?}"
    );
}

/// Route-only edits among routes (and Ingresses) that share host names: each compiled in
/// part, each giving what a full compile gives.
#[test]
fn route_edits_on_shared_hosts_are_compiled_in_part() {
    let opts = CompileOptions::default();
    let mut world = shared_hosts_world();
    let mut inc = IncrementalCompiler::new();
    inc.compile(&world.inputs, &opts);
    let mut kinds = Vec::new();
    let mut check = |world: &World, inc: &mut IncrementalCompiler, what: &str| {
        let out = inc.compile(&world.inputs, &opts);
        kinds.push((what.to_owned(), inc.last_kind()));
        assert_same(&out, &compile(&world.inputs, &opts), what);
        out
    };

    // A path of a route sharing a.test with another route and an Ingress.
    let i = world.index("n2", "a-api");
    world.routes[i].spec["rules"][0]["matches"][0]["path"]["value"] = json!("/web/");
    world.routes[i].generation += 1;
    world.put(i);
    let out = check(&world, &mut inc, "a-api's path changed");
    assert_eq!(served(&out.table, "a.test", "/web/x"), pair("a-api", "s2"));

    // A GRPCRoute created on b.test, beside `echo`.
    world.add(Live::grpc(
        "n2",
        "admin",
        Some(5),
        json!({"parentRefs": [{"name": "edge", "namespace": "n1"}], "hostnames": ["b.test"],
            "rules": [{"matches": [{"method": {"service": "pkg.Admin"}}],
                "backendRefs": [{"name": "s1", "port": 80}]}]}),
    ));
    check(&world, &mut inc, "GRPCRoute admin created");

    // A route moved from a.test to b.test: both hosts' rules change.
    let i = world.index("n1", "a-root");
    world.routes[i].spec["hostnames"] = json!(["b.test"]);
    world.routes[i].generation += 1;
    world.put(i);
    let out = check(&world, &mut inc, "a-root moved to b.test");
    assert_eq!(served(&out.table, "b.test", "/"), pair("a-root", "s1"));

    // The wildcard route deleted.
    let i = world.index("n1", "wild");
    world.remove(i);
    let out = check(&world, &mut inc, "wild deleted");
    assert_eq!(served(&out.table, "y.wild.test", "/"), None);

    // A status write to one route and a spec change to another in one step.
    let touched = world.index("n2", "u3");
    world.touch(touched);
    let i = world.index("n2", "star");
    world.routes[i].spec["rules"][0]["backendRefs"][0]["name"] = json!("s3");
    world.routes[i].generation += 1;
    world.put(i);
    check(&world, &mut inc, "u3 touched, star's backend changed");

    for (what, kind) in &kinds {
        assert!(
            incremental_count(*kind).is_some_and(|n| n < 40),
            "{what}: a route-only edit is compiled in part, without the 40 unrelated routes: \
             {kind:?}"
        );
    }
}

/// Gateway API HTTPRoute precedence across routes: among matches of equal specificity the
/// oldest route (by `creationTimestamp`) wins, then the first in alphabetical order of
/// `{namespace}/{name}`; a longer prefix match wins whatever the ages. Edits that change
/// which route is oldest change the answer, incrementally as in a full compile.
#[test]
fn a_route_edit_keeps_precedence_oldest_route_first_then_namespace_name() {
    let opts = CompileOptions::default();
    let mut world = World::new(false);
    let to = |path: &str, svc: &str| {
        json!({"parentRefs": [{"name": "edge", "namespace": "n1"}], "hostnames": ["p.test"],
            "rules": [{"matches": [{"path": {"type": "PathPrefix", "value": path}}],
                "backendRefs": [{"name": svc, "port": 80}]}]})
    };
    world.add(Live::http("n2", "zeta", Some(1), to("/", "s1")));
    world.add(Live::http("n1", "alpha", Some(2), to("/", "s2")));
    world.add(Live::http("n2", "beta", Some(2), to("/", "s1")));
    let mut inc = IncrementalCompiler::new();
    let mut step = |world: &World, what: &str| {
        let out = inc.compile(&world.inputs, &opts);
        assert_same(&out, &compile(&world.inputs, &opts), what);
        out
    };
    let winner = |out: &Compiled, path: &str| served(&out.table, "p.test", path).map(|(r, _)| r);

    let out = step(&world, "base");
    assert_eq!(
        winner(&out, "/").as_deref(),
        Some("zeta"),
        "the oldest wins"
    );

    let i = world.index("n2", "zeta");
    world.remove(i);
    let out = step(&world, "zeta deleted");
    assert_eq!(
        winner(&out, "/").as_deref(),
        Some("alpha"),
        "same age: n1/alpha before n2/beta"
    );

    let i = world.index("n1", "alpha");
    let old = world.remove(i);
    world.add(Live {
        age: Some(3),
        ..old
    });
    let out = step(&world, "alpha recreated, now the youngest");
    assert_eq!(winner(&out, "/").as_deref(), Some("beta"));

    world.add(Live::http("n1", "aaa", Some(2), to("/", "s2")));
    let out = step(&world, "n1/aaa created as old as beta");
    assert_eq!(
        winner(&out, "/").as_deref(),
        Some("aaa"),
        "same age: n1/aaa before n2/beta"
    );

    let i = world.index("n1", "aaa");
    world.routes[i].spec = to("/api", "s2");
    world.routes[i].generation += 1;
    world.put(i);
    let out = step(&world, "aaa's prefix lengthened");
    assert_eq!(winner(&out, "/").as_deref(), Some("beta"));
    assert_eq!(
        winner(&out, "/api/x").as_deref(),
        Some("aaa"),
        "a longer prefix wins over age"
    );

    world.touch_all();
    let out = step(&world, "every route's status written");
    assert_eq!(winner(&out, "/").as_deref(), Some("beta"));
}

/// What grafts leave behind (free entry slots, added backends) must not pile up when one
/// route's host name goes back and forth: every edit stays a partial compile of that route.
#[test]
fn a_route_moved_back_and_forth_300_times_stays_a_partial_compile() {
    let opts = CompileOptions::default();
    let mut world = World::new(false);
    for i in 0..100 {
        world.add(Live::http(
            "n1",
            &format!("r{i}"),
            Some(1),
            one_host_spec(&format!("r{i}.test"), "s1"),
        ));
    }
    // One route whose backendRefs have filters of their own: entries only its rule's entry
    // names, which must be given back with it.
    world.add(Live::http(
        "n1",
        "split",
        Some(1),
        json!({"parentRefs": [{"name": "edge", "namespace": "n1"}], "hostnames": ["split.test"],
        "rules": [{"backendRefs": [
            {"name": "s1", "port": 80, "weight": 1, "filters": [{"type": "RequestHeaderModifier",
                "requestHeaderModifier": {"set": [{"name": "x-to", "value": "s1"}]}}]},
            {"name": "s2", "port": 80, "weight": 1, "filters": [{"type": "RequestHeaderModifier",
                "requestHeaderModifier": {"set": [{"name": "x-to", "value": "s2"}]}}]}
        ]}]}),
    ));
    let at = world.inputs.http_routes.len() - 1;
    let mut inc = IncrementalCompiler::new();
    inc.compile(&world.inputs, &opts);
    let first = world.inputs.http_routes[at].clone();
    let mut moved = (*first).clone();
    moved.spec.hostnames = vec!["moved.test".to_owned()];
    let versions = [first, Arc::new(moved)];
    let mut last = None;
    for turn in 1..=300 {
        world.inputs.http_routes[at] = Arc::clone(&versions[turn % 2]);
        last = Some(inc.compile(&world.inputs, &opts));
        assert_eq!(
            incremental_count(inc.last_kind()),
            Some(1),
            "edit {turn} compiled {:?}",
            inc.last_kind()
        );
    }
    let last = last.expect("300 compiles");
    let full = compile(&world.inputs, &opts);
    assert_same(&last, &full, "after 300 edits");
    // The entries of the route's last version, and those of its previous one left free.
    assert!(
        last.table.entries().len() <= full.table.entries().len() + 8,
        "{} entries after 300 edits, {} in a full compile",
        last.table.entries().len(),
        full.table.entries().len()
    );
}

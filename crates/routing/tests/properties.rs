//! Property tests: `route()` against a naive reference matcher, `compile` totality, and
//! independence from input order.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use common::*;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{
    EndpointAddress, EndpointPort, EndpointSubset, Endpoints, Secret, Service, ServicePort,
    ServiceSpec, TypedLocalObjectReference,
};
use k8s_openapi::api::discovery::v1::{Endpoint, EndpointConditions, EndpointSlice};
use k8s_openapi::api::networking::v1::{
    HTTPIngressPath, HTTPIngressRuleValue, Ingress, IngressBackend, IngressClass, IngressClassSpec,
    IngressRule, IngressServiceBackend, IngressSpec, IngressTLS, ServiceBackendPort,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use proptest::prelude::*;
use serde_json::json;
use sluice_routing::{Compiled, Inputs, RouteTable, ServiceRef};

// ---------------------------------------------------------------------------------------------
// (1) route() agrees with a naive reference matcher.
// ---------------------------------------------------------------------------------------------

/// A rule host as the reference sees it: `None` = invalid.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum RefHost {
    Exact(&'static str),
    Wild(&'static str),
    Any,
}

/// (raw host in the rule, what it means). Small alphabet, so hosts collide a lot.
const RULE_HOSTS: &[(Option<&str>, Option<RefHost>)] = &[
    (Some("a.x"), Some(RefHost::Exact("a.x"))),
    (Some("A.X."), Some(RefHost::Exact("a.x"))),
    (Some("b.x"), Some(RefHost::Exact("b.x"))),
    (Some("a.b.x"), Some(RefHost::Exact("a.b.x"))),
    (Some("x"), Some(RefHost::Exact("x"))),
    (Some("*.x"), Some(RefHost::Wild("x"))),
    (Some("*.X"), Some(RefHost::Wild("x"))),
    (Some("*.b.x"), Some(RefHost::Wild("b.x"))),
    (None, Some(RefHost::Any)),
    (Some(""), Some(RefHost::Any)),
    (Some("bad host"), None),
    (Some("1.2.3.4"), None),
    (Some("a.*.x"), None),
];

const REQUEST_HOSTS: &[&str] = &[
    "a.x",
    "A.x:80",
    "a.x.",
    "b.x",
    "B.X.:8443",
    "c.x",
    "a.b.x",
    "c.b.x",
    "x",
    "X.",
    "[::1]:80",
    "1.2.3.4",
    "y",
    "",
];

const PATH_TYPES: &[&str] = &["Exact", "Prefix", "ImplementationSpecific", "", "Regex"];
const SEGMENTS: &[&str] = &["a", "b", "ab"];
/// Services: all exist in both namespaces; "ext" is ExternalName (unsupported).
const SERVICES: &[&str] = &["s1", "s2", "s3", "ext"];
const NAMESPACES: &[&str] = &["n1", "n2"];

/// A rule path as generated: `Ok(path)` is valid (`None` = field absent), `Err(raw)` invalid.
fn rule_path() -> impl Strategy<Value = Result<Option<String>, String>> {
    let valid = (
        prop::collection::vec(prop::sample::select(SEGMENTS), 0..4),
        any::<bool>(),
    )
        .prop_map(|(segs, slash)| {
            let mut p = format!("/{}", segs.join("/"));
            if slash && !segs.is_empty() {
                p.push('/');
            }
            Ok(Some(p))
        });
    prop_oneof![
        8 => valid,
        1 => Just(Ok(None)),
        1 => Just(Ok(Some(String::new()))),
        1 => Just(Err("a/b".to_owned())),
        1 => Just(Err("/a//b".to_owned())),
    ]
}

fn request_path() -> impl Strategy<Value = String> {
    let segs = prop::collection::vec(prop::sample::select(&["a", "b", "ab", "", "A"][..]), 0..5);
    prop_oneof![
        10 => segs.prop_map(|s| format!("/{}", s.join("/"))),
        1 => Just(String::new()),
        1 => Just("*".to_owned()),
    ]
}

#[derive(Clone, Debug)]
enum RefBackend {
    Service(&'static str),
    Resource,
}

fn ref_backend() -> impl Strategy<Value = RefBackend> {
    prop_oneof![
        6 => prop::sample::select(SERVICES).prop_map(RefBackend::Service),
        1 => Just(RefBackend::Resource),
    ]
}

#[derive(Clone, Debug)]
struct RefPath {
    path: Result<Option<String>, String>,
    path_type: &'static str,
    backend: RefBackend,
}

#[derive(Clone, Debug)]
struct RefIngress {
    namespace: &'static str,
    name: String,
    age: Option<u32>,
    ours: bool,
    default_backend: Option<RefBackend>,
    rules: Vec<(usize, Vec<RefPath>)>, // (index into RULE_HOSTS, paths)
}

fn ref_ingresses() -> impl Strategy<Value = Vec<RefIngress>> {
    let path = (rule_path(), prop::sample::select(PATH_TYPES), ref_backend()).prop_map(
        |(path, path_type, backend)| RefPath {
            path,
            path_type,
            backend,
        },
    );
    let rule = (0..RULE_HOSTS.len(), prop::collection::vec(path, 0..4));
    let ing = (
        prop::sample::select(NAMESPACES),
        prop::option::weighted(0.8, 0u32..4),
        prop::bool::weighted(0.9),
        prop::option::weighted(0.25, ref_backend()),
        prop::collection::vec(rule, 0..4),
    );
    prop::collection::vec(ing, 0..6).prop_map(|v| {
        v.into_iter()
            .enumerate()
            .map(
                |(i, (namespace, age, ours, default_backend, rules))| RefIngress {
                    namespace,
                    name: format!("i{i}"),
                    age,
                    ours,
                    default_backend,
                    rules,
                },
            )
            .collect()
    })
}

fn backend_json(b: &RefBackend) -> serde_json::Value {
    match b {
        RefBackend::Service(s) => svc_backend(s, 80),
        RefBackend::Resource => json!({"resource": {"kind": "Bucket", "name": "b"}}),
    }
}

fn build_inputs(ings: &[RefIngress]) -> Inputs {
    let ingresses = ings
        .iter()
        .map(|ri| {
            let rules: Vec<serde_json::Value> = ri
                .rules
                .iter()
                .map(|(h, paths)| {
                    let paths: Vec<serde_json::Value> = paths
                        .iter()
                        .map(|p| {
                            let mut v = json!({"backend": backend_json(&p.backend)});
                            if !p.path_type.is_empty() {
                                v["pathType"] = json!(p.path_type);
                            }
                            match &p.path {
                                Ok(Some(s)) | Err(s) => v["path"] = json!(s),
                                Ok(None) => {}
                            }
                            v
                        })
                        .collect();
                    let mut r = json!({"http": {"paths": paths}});
                    if let Some(host) = RULE_HOSTS[*h].0 {
                        r["host"] = json!(host);
                    }
                    r
                })
                .collect();
            let mut spec = json!({
                "rules": rules,
                "ingressClassName": if ri.ours { "sluice" } else { "other" },
            });
            if let Some(b) = &ri.default_backend {
                spec["defaultBackend"] = backend_json(b);
            }
            raw_ingress(ri.namespace, &ri.name, ri.age, json!({}), spec)
        })
        .collect();
    let mut services = Vec::new();
    for ns in NAMESPACES {
        for s in SERVICES {
            let mut svc = (*service(ns, s, &[(None, 80)])).clone();
            if *s == "ext" {
                svc.spec.as_mut().unwrap().type_ = Some("ExternalName".into());
            }
            services.push(Arc::new(svc));
        }
    }
    Inputs {
        ingresses,
        ingress_classes: vec![our_class(), class("other", "example.com/other", false)].into(),
        services: services.into(),
        ..Inputs::default()
    }
}

/// The spec, implemented literally: scan every rule of every Ingress.
fn reference_route(ings: &[RefIngress], host: &str, path: &str) -> Option<ServiceRef> {
    let mut ours: Vec<&RefIngress> = ings.iter().filter(|i| i.ours).collect();
    ours.sort_by_key(|i| (i.age.is_none(), i.age, i.namespace, i.name.clone()));
    let usable = |b: &RefBackend| matches!(b, RefBackend::Service(s) if *s != "ext");
    let sref = |ns: &str, b: &RefBackend| match b {
        RefBackend::Service(s) => ServiceRef {
            namespace: ns.to_owned(),
            name: (*s).to_owned(),
            port: sluice_routing::PortRef::Number(80),
        },
        RefBackend::Resource => unreachable!(),
    };

    // Request host: drop the port, the trailing dot, the case.
    let mut h = host.to_owned();
    if !h.starts_with('[')
        && let Some((name, _port)) = h.rsplit_once(':')
    {
        h = name.to_owned();
    }
    if h.starts_with('[')
        && let Some(end) = h.find(']')
    {
        h.truncate(end + 1);
    }
    if h.ends_with('.') {
        h.pop();
    }
    let h = h.to_lowercase();

    // All valid rules, oldest Ingress first, in document order.
    struct Rule {
        host: RefHost,
        exact: bool,
        /// ImplementationSpecific: nginx's `location /path`, a string prefix.
        string_prefix: bool,
        path: String,
        sref: ServiceRef,
    }
    let mut rules = Vec::new();
    let mut hosts = BTreeSet::new();
    for ing in &ours {
        for (hi, paths) in &ing.rules {
            let Some(rh) = RULE_HOSTS[*hi].1.clone() else {
                continue;
            };
            hosts.insert(rh.clone());
            for p in paths {
                let Ok(path) = &p.path else { continue };
                let (exact, string_prefix) = match p.path_type {
                    "Exact" => (true, false),
                    "Prefix" => (false, false),
                    "ImplementationSpecific" => (false, true),
                    _ => continue,
                };
                if !usable(&p.backend) {
                    continue;
                }
                let path = match path.as_deref() {
                    None | Some("") => "/".to_owned(),
                    Some(p) => p.to_owned(),
                };
                rules.push(Rule {
                    host: rh.clone(),
                    exact,
                    string_prefix,
                    path,
                    sref: sref(ing.namespace, &p.backend),
                });
            }
        }
    }

    // The one rule set that owns the request.
    let owner = if hosts
        .iter()
        .any(|x| matches!(x, RefHost::Exact(e) if *e == h))
    {
        Some(
            hosts
                .iter()
                .find(|x| matches!(x, RefHost::Exact(e) if *e == h))
                .unwrap()
                .clone(),
        )
    } else {
        let wild = h.split_once('.').and_then(|(first, rest)| {
            (!first.is_empty() && !rest.is_empty()).then(|| {
                hosts
                    .iter()
                    .find(|x| matches!(x, RefHost::Wild(w) if *w == rest))
                    .cloned()
            })?
        });
        wild.or_else(|| hosts.contains(&RefHost::Any).then_some(RefHost::Any))
    };

    let path = if path.is_empty() { "/" } else { path };
    // nginx's order: an exact location first, then the longest prefix location, where
    // Prefix `/p` is `location /p/` (and `= /p`) and ImplementationSpecific `/p` is
    // `location /p`; at equal length the ImplementationSpecific one.
    let mut best: Option<((bool, usize, bool), &Rule)> = None;
    if let Some(owner) = owner {
        for r in rules.iter().filter(|r| r.host == owner) {
            let score = if r.exact {
                (path == r.path).then_some((true, r.path.len(), false))
            } else if r.string_prefix {
                path.starts_with(&r.path)
                    .then_some((false, r.path.len(), true))
            } else {
                let p = r.path.strip_suffix('/').unwrap_or(&r.path);
                (path == p || path.starts_with(&format!("{p}/"))).then_some((
                    false,
                    p.len() + 1,
                    false,
                ))
            };
            let Some(score) = score else { continue };
            // Strictly better only: on a tie the earlier (older) rule stays.
            if best.is_none_or(|(b, _)| score > b) {
                best = Some((score, r));
            }
        }
    }
    if let Some((_, r)) = best {
        return Some(r.sref.clone());
    }
    ours.iter().find_map(|i| {
        i.default_backend
            .as_ref()
            .filter(|b| usable(b))
            .map(|b| sref(i.namespace, b))
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn route_agrees_with_reference(
        ings in ref_ingresses(),
        requests in prop::collection::vec((prop::sample::select(REQUEST_HOSTS), request_path()), 1..24),
    ) {
        let compiled = run(&build_inputs(&ings));
        for (host, path) in &requests {
            let got = compiled.table.route_backend(host, path).map(|b| b.service.clone());
            let want = reference_route(&ings, host, path);
            prop_assert_eq!(got, want, "host {:?} path {:?}\nroutes {:#?}", host, path, compiled.table.routes());
        }
    }
}

// ---------------------------------------------------------------------------------------------
// (2) compile never panics, (3) compile does not depend on input order.
// ---------------------------------------------------------------------------------------------

fn odd_string() -> impl Strategy<Value = String> {
    prop_oneof![
        prop::sample::select(
            &[
                "",
                "/",
                "*",
                "*.",
                ".",
                "a.x",
                "A.X.",
                "*.x",
                "a.*.x",
                "x:80",
                "[::1]",
                "::1",
                "1.2.3.4",
                "/a",
                "/a/",
                "//",
                "/a/../b",
                "/%2F",
                "é.x",
                "a b",
                "-a.x",
                "Exact",
                "Prefix",
                "ImplementationSpecific",
                "http",
                "s1",
                "s2",
                "ext",
                "10.0.0.1",
                "fd00::1",
                "nope",
            ][..]
        )
        .prop_map(str::to_owned),
        "[a-zA-Z0-9.*:/ %_-]{0,12}",
        "\\PC{0,8}",
    ]
}

fn opt<T: std::fmt::Debug + Clone>(
    s: impl Strategy<Value = T>,
) -> impl Strategy<Value = Option<T>> {
    prop::option::of(s)
}

fn meta(ns: Option<String>, name: String) -> ObjectMeta {
    ObjectMeta {
        namespace: ns,
        name: Some(name),
        ..ObjectMeta::default()
    }
}

fn namespace() -> impl Strategy<Value = Option<String>> {
    opt(prop::sample::select(&["a", "b", ""][..]).prop_map(str::to_owned))
}

fn arb_backend() -> impl Strategy<Value = IngressBackend> {
    let port = (
        opt(odd_string()),
        opt(prop_oneof![Just(80), Just(443), any::<i32>()]),
    )
        .prop_map(|(name, number)| ServiceBackendPort { name, number });
    let service =
        (odd_string(), opt(port)).prop_map(|(name, port)| IngressServiceBackend { name, port });
    let resource = odd_string().prop_map(|name| TypedLocalObjectReference {
        name,
        ..TypedLocalObjectReference::default()
    });
    (opt(service), prop::option::weighted(0.1, resource))
        .prop_map(|(service, resource)| IngressBackend { service, resource })
}

fn arb_ingress_spec() -> impl Strategy<Value = IngressSpec> {
    let path =
        (opt(odd_string()), odd_string(), arb_backend()).prop_map(|(path, path_type, backend)| {
            HTTPIngressPath {
                path,
                path_type,
                backend,
            }
        });
    let rule =
        (opt(odd_string()), opt(prop::collection::vec(path, 0..4))).prop_map(|(host, paths)| {
            IngressRule {
                host,
                http: paths.map(|paths| HTTPIngressRuleValue { paths }),
            }
        });
    let tls = (
        opt(prop::collection::vec(odd_string(), 0..3)),
        opt(odd_string()),
    )
        .prop_map(|(hosts, secret_name)| IngressTLS { hosts, secret_name });
    (
        opt(prop::collection::vec(rule, 0..4)),
        opt(prop::collection::vec(tls, 0..3)),
        prop::option::weighted(0.2, arb_backend()),
        opt(prop::sample::select(&["sluice", "other", "", "missing"][..]).prop_map(str::to_owned)),
    )
        .prop_map(
            |(rules, tls, default_backend, ingress_class_name)| IngressSpec {
                rules,
                tls,
                default_backend,
                ingress_class_name,
            },
        )
}

fn arb_ingresses() -> impl Strategy<Value = Vec<Arc<Ingress>>> {
    let one = (
        namespace(),
        opt(0u32..4),
        opt(prop::sample::select(&["sluice", "nginx", ""][..]).prop_map(str::to_owned)),
        opt(arb_ingress_spec()),
    );
    prop::collection::vec(one, 0..8).prop_map(|v| {
        v.into_iter()
            .enumerate()
            .map(|(i, (ns, age, legacy, spec))| {
                let mut m = meta(ns, format!("i{i}"));
                m.creation_timestamp = age.map(|a| Time(ts(a).parse().unwrap()));
                m.annotations =
                    legacy.map(|l| [("kubernetes.io/ingress.class".to_owned(), l)].into());
                Arc::new(Ingress {
                    metadata: m,
                    spec,
                    ..Ingress::default()
                })
            })
            .collect()
    })
}

fn arb_classes() -> impl Strategy<Value = Vec<Arc<IngressClass>>> {
    let one = (
        prop::sample::select(&["sluice", "other", ""][..]),
        opt(prop::sample::select(&[CONTROLLER, "example.com/other"][..])),
        any::<bool>(),
    );
    prop::collection::btree_map(
        prop::sample::select(&["sluice", "other", "x"][..]),
        one,
        0..3,
    )
    .prop_map(|m| {
        m.into_iter()
            .map(|(name, (_, controller, default))| {
                let mut meta = ObjectMeta {
                    name: Some(name.to_owned()),
                    ..ObjectMeta::default()
                };
                if default {
                    meta.annotations = Some(
                        [(
                            "ingressclass.kubernetes.io/is-default-class".to_owned(),
                            "true".to_owned(),
                        )]
                        .into(),
                    );
                }
                Arc::new(IngressClass {
                    metadata: meta,
                    spec: Some(IngressClassSpec {
                        controller: controller.map(str::to_owned),
                        parameters: None,
                    }),
                })
            })
            .collect()
    })
}

/// Objects keyed by (namespace, name), so the generated keys are unique.
/// Objects by (namespace, name), unique as in a store: a missing namespace and `""` are the
/// same key, so at most one of the two is kept.
fn keyed<T: std::fmt::Debug + Clone>(
    item: impl Strategy<Value = T>,
) -> impl Strategy<Value = BTreeMap<(Option<String>, String), T>> {
    prop::collection::btree_map(
        (
            namespace(),
            prop::sample::select(&["s1", "s2", "ext", "nope", "tls"][..]).prop_map(str::to_owned),
        ),
        item,
        0..6,
    )
    .prop_map(|all| {
        let mut seen = std::collections::BTreeSet::new();
        all.into_iter()
            .filter(|((ns, name), _)| seen.insert((ns.clone().unwrap_or_default(), name.clone())))
            .collect()
    })
}

fn arb_services() -> impl Strategy<Value = Vec<Arc<Service>>> {
    let port = (
        opt(odd_string()),
        prop_oneof![Just(80), Just(443), any::<i32>()],
    )
        .prop_map(|(name, port)| ServicePort {
            name,
            port,
            ..ServicePort::default()
        });
    let spec = (
        opt(prop::collection::vec(port, 0..3)),
        opt(prop::sample::select(&["ExternalName", "ClusterIP"][..])),
    )
        .prop_map(|(ports, ty)| ServiceSpec {
            ports,
            type_: ty.map(str::to_owned),
            ..ServiceSpec::default()
        });
    keyed(opt(spec)).prop_map(|m| {
        m.into_iter()
            .map(|((ns, name), spec)| {
                Arc::new(Service {
                    metadata: meta(ns, name),
                    spec,
                    ..Service::default()
                })
            })
            .collect()
    })
}

fn address() -> impl Strategy<Value = String> {
    prop_oneof![
        prop::sample::select(&["10.0.0.1", "10.0.0.2", "fd00::1", "host.example", ""][..])
            .prop_map(str::to_owned),
        any::<std::net::IpAddr>().prop_map(|ip| ip.to_string()),
    ]
}

fn arb_slices() -> impl Strategy<Value = Vec<Arc<EndpointSlice>>> {
    let port = (opt(odd_string()), opt(any::<i32>())).prop_map(|(name, port)| {
        k8s_openapi::api::discovery::v1::EndpointPort {
            name,
            port,
            ..Default::default()
        }
    });
    let endpoint = (
        prop::collection::vec(address(), 0..3),
        opt(opt(any::<bool>())),
    )
        .prop_map(|(addresses, ready)| Endpoint {
            addresses,
            conditions: ready.map(|ready| EndpointConditions {
                ready,
                ..Default::default()
            }),
            ..Endpoint::default()
        });
    let slice = (
        namespace(),
        opt(prop::sample::select(&["s1", "s2", "ext"][..]).prop_map(str::to_owned)),
        opt(prop::collection::vec(port, 0..3)),
        prop::collection::vec(endpoint, 0..3),
    );
    prop::collection::vec(slice, 0..5).prop_map(|v| {
        v.into_iter()
            .enumerate()
            .map(|(i, (ns, svc, ports, endpoints))| {
                let mut m = meta(ns, format!("slice{i}"));
                m.labels = svc.map(|s| [("kubernetes.io/service-name".to_owned(), s)].into());
                Arc::new(EndpointSlice {
                    metadata: m,
                    ports,
                    endpoints,
                    address_type: "IPv4".into(),
                })
            })
            .collect()
    })
}

fn arb_endpoints() -> impl Strategy<Value = Vec<Arc<Endpoints>>> {
    let addr = || {
        address().prop_map(|ip| EndpointAddress {
            ip,
            ..EndpointAddress::default()
        })
    };
    let port = (opt(odd_string()), any::<i32>()).prop_map(|(name, port)| EndpointPort {
        name,
        port,
        ..EndpointPort::default()
    });
    let subset = (
        opt(prop::collection::vec(addr(), 0..3)),
        opt(prop::collection::vec(addr(), 0..2)),
        opt(prop::collection::vec(port, 0..3)),
    )
        .prop_map(|(addresses, not_ready_addresses, ports)| EndpointSubset {
            addresses,
            not_ready_addresses,
            ports,
        });
    keyed(opt(prop::collection::vec(subset, 0..3))).prop_map(|m| {
        m.into_iter()
            .map(|((ns, name), subsets)| {
                Arc::new(Endpoints {
                    metadata: meta(ns, name),
                    subsets,
                })
            })
            .collect()
    })
}

fn arb_secrets() -> impl Strategy<Value = Vec<Arc<Secret>>> {
    let value = prop_oneof![
        prop::sample::select(
            &[
                CERT_PEM, CHAIN_PEM, PKCS8_PEM, PKCS1_PEM, SEC1_PEM, "", "junk"
            ][..]
        )
        .prop_map(|s| s.as_bytes().to_vec()),
        prop::collection::vec(any::<u8>(), 0..40),
    ];
    let data = prop::collection::btree_map(
        prop::sample::select(&["tls.crt", "tls.key", "ca.crt"][..]).prop_map(str::to_owned),
        value.prop_map(ByteString),
        0..3,
    );
    keyed(opt(data)).prop_map(|m| {
        m.into_iter()
            .map(|((ns, name), data)| {
                Arc::new(Secret {
                    metadata: meta(ns, name),
                    data,
                    ..Secret::default()
                })
            })
            .collect()
    })
}

fn arb_inputs() -> impl Strategy<Value = Inputs> {
    (
        arb_ingresses(),
        arb_classes(),
        arb_services(),
        arb_endpoints(),
        arb_slices(),
        arb_secrets(),
    )
        .prop_map(
            |(ingresses, ingress_classes, services, endpoints, endpoint_slices, secrets)| Inputs {
                ingresses: ingresses.into(),
                ingress_classes: ingress_classes.into(),
                services: services.into(),
                endpoints: endpoints.into(),
                endpoint_slices: endpoint_slices.into(),
                secrets: secrets.into(),
                ..Inputs::default()
            },
        )
}

/// Everything observable about a compilation, in comparable form.
fn observe(c: &Compiled) -> impl PartialEq + std::fmt::Debug + use<> {
    let backends: Vec<_> = c
        .table
        .backends()
        .iter()
        .map(|b| (b.id, b.service.clone(), b.endpoints.clone()))
        .collect();
    let certs: Vec<_> = c
        .table
        .certificates()
        .map(|t| {
            (
                t.secret.clone(),
                t.cert_chain.clone(),
                t.key.secret_der().to_vec(),
            )
        })
        .collect();
    (
        c.table.routes(),
        c.table.hosts(),
        backends,
        certs,
        c.diagnostics.clone(),
        c.ours.clone(),
    )
}

fn probe(table: &RouteTable, host: &str, path: &str) {
    let _ = table.route_backend(host, path);
    let _ = table.certificate(host);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 384, ..ProptestConfig::default() })]

    #[test]
    fn compile_never_panics(inputs in arb_inputs(), host in odd_string(), path in odd_string()) {
        let out = run(&inputs);
        probe(&out.table, &host, &path);
        for d in &out.diagnostics {
            prop_assert!(d.message.contains(&d.field));
        }
        for (i, b) in out.table.backends().iter().enumerate() {
            prop_assert_eq!(b.id, i);
            prop_assert!(b.endpoints.windows(2).all(|w| w[0] < w[1]));
        }
    }

    #[test]
    fn compile_is_independent_of_input_order(
        (inputs, shuffled) in arb_inputs().prop_flat_map(|i| {
            let s = (
                Just(i.ingresses.to_vec()).prop_shuffle(),
                Just(i.ingress_classes.to_vec()).prop_shuffle(),
                Just(i.services.to_vec()).prop_shuffle(),
                Just(i.endpoints.to_vec()).prop_shuffle(),
                Just(i.endpoint_slices.to_vec()).prop_shuffle(),
                Just(i.secrets.to_vec()).prop_shuffle(),
            )
                .prop_map(|(ingresses, ingress_classes, services, endpoints, endpoint_slices, secrets)| Inputs {
                    ingresses: ingresses.into(), ingress_classes: ingress_classes.into(), services: services.into(), endpoints: endpoints.into(), endpoint_slices: endpoint_slices.into(), secrets: secrets.into(),
                    ..Inputs::default()
                });
            (Just(i), s)
        })
    ) {
        let a = run(&inputs);
        let b = run(&shuffled);
        prop_assert_eq!(observe(&a), observe(&b));
    }

    #[test]
    fn structured_inputs_are_order_independent(ings in ref_ingresses()) {
        let inputs = build_inputs(&ings);
        let mut reversed = inputs.clone();
        reversed.ingresses = inputs.ingresses.iter().rev().cloned().collect();
        reversed.services = inputs.services.iter().rev().cloned().collect();
        prop_assert_eq!(observe(&run(&inputs)), observe(&run(&reversed)));
    }
}

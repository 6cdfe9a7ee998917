//! Proves that `IncrementalCompiler` is indistinguishable from a full `compile`: after every
//! edit of a generated cluster (Ingresses created, updated, touched, deleted and reordered;
//! now and then an EndpointSlice, a Service or a Secret changed) both tables route, pick
//! certificates and report diagnostics alike, Ingress-only and EndpointSlice-only edits are
//! compiled incrementally and any other change forces a full compile.

mod common;

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::sync::Arc;

use common::compare::{canon, eq_or_fail, lists_eq};
use common::*;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::api::networking::v1::Ingress;
use proptest::prelude::*;
use proptest::sample::Index;
use serde_json::{Value, json};
use sluice_routing::{
    CompileKind, CompileOptions, Compiled, HeaderLookup, IncrementalCompiler, Inputs, ObjectRef,
    RequestInfo, RouteTable, compile,
};

// ---------------------------------------------------------------------------------------------
// The cluster: fixed Services, EndpointSlices and Secrets; generated Ingresses.
// ---------------------------------------------------------------------------------------------

const NAMESPACES: &[&str] = &["n1", "n2"];
/// Rule hosts ("" = no host): few, so that Ingresses share hosts.
const HOSTS: &[&str] = &["a.test", "b.test", "www.a.test", "*.test", "x.a.test", ""];
const TLS_HOSTS: &[&str] = &["a.test", "b.test", "www.a.test", "*.test", "x.a.test"];
/// `server-alias` values: hosts of the pool and one no rule names.
const ALIASES: &[&str] = &["a.test", "b.test", "www.a.test", "y.test"];
const PATHS: &[&str] = &["/", "/api", "/api/v1", "/web/", "/x"];
const PATH_TYPES: &[&str] = &["Prefix", "Exact", "ImplementationSpecific"];
/// `s1`, `s2`: ready endpoints; `s3`: no ready endpoint; `gone`: no such Service.
const SERVICES: &[&str] = &["s1", "s2", "s3", "gone"];
const LIVE_SERVICES: &[&str] = &["s1", "s2", "s3"];
/// `tls`: a valid TLS Secret with a `ca.crt` (present at first); `missing`: absent at first.
const SECRETS: &[&str] = &["tls", "missing"];
const NGINX: &str = "nginx.ingress.kubernetes.io/";

const PROBE_HOSTS: &[&str] = &[
    "a.test",
    "b.test",
    "www.a.test",
    "x.a.test",
    "z.test",
    "",
    "www.b.test",
    "other.test",
    "y.test",
    "example.org",
    "f0.bystander.test",
];
const PROBE_PATHS: &[&str] = &[
    "/",
    "/api",
    "/api/v1/x",
    "/api/q",
    "/web",
    "/web/",
    "/x",
    "/nothing",
];

/// A TLS Secret that also holds a CA bundle (for `auth-tls-secret`).
fn tls_ca_secret(ns: &str, name: &str) -> Arc<Secret> {
    let mut secret = (*tls_secret(ns, name, CERT_PEM, PKCS8_PEM)).clone();
    secret.data.get_or_insert_with(BTreeMap::new).insert(
        "ca.crt".to_owned(),
        ByteString(CERT_PEM.as_bytes().to_vec()),
    );
    Arc::new(secret)
}

/// The EndpointSlice of `svc`: one endpoint `10.<n>.0.<last>`, ready or not.
fn svc_slice(
    ns: &str,
    svc: &str,
    last: u8,
    ready: bool,
) -> Arc<k8s_openapi::api::discovery::v1::EndpointSlice> {
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

/// Services `s1`..`s3` in both namespaces (port 80 named `http`), their slices, the `tls`
/// Secrets, our IngressClass and another controller's.
fn base_inputs() -> Inputs {
    let mut inputs = Inputs {
        ingress_classes: vec![our_class(), class("other", "example.com/other", false)].into(),
        ..Inputs::default()
    };
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
        inputs.secrets.push(tls_ca_secret(ns, "tls"));
    }
    inputs
}

/// Ingresses `f<i>` of hosts no generated Ingress names: what a partial compile must leave
/// as it was.
fn bystanders() -> Vec<Arc<Ingress>> {
    (0..6)
        .map(|i| {
            ingress(
                "n2",
                &format!("f{i}"),
                Some(i),
                rules(vec![rule(
                    &format!("f{i}.bystander.test"),
                    vec![path("/", "Prefix", "s2", 80)],
                )]),
            )
        })
        .collect()
}

// ---------------------------------------------------------------------------------------------
// Generated Ingresses.
// ---------------------------------------------------------------------------------------------

#[derive(Clone, Debug)]
struct Backend {
    svc: &'static str,
    /// By port name (`http`) rather than number (80).
    named: bool,
}

#[derive(Clone, Debug)]
struct PathSpec {
    path: &'static str,
    ty: &'static str,
    backend: Backend,
}

/// The `nginx.ingress.kubernetes.io/*` annotations an Ingress carries.
#[derive(Clone, Debug, Default)]
struct Annotations {
    canary_weight: Option<u32>,
    server_alias: Option<&'static str>,
    www_redirect: bool,
    use_regex: bool,
    /// `rewrite-target: /$1`, with a path `/api/(.*)` added to the first rule.
    rewrite: bool,
    no_ssl_redirect: bool,
    force_ssl_redirect: bool,
    default_backend: Option<&'static str>,
    auth_tls: Option<(&'static str, &'static str)>,
    passthrough: bool,
    whitelist: bool,
    permanent_redirect: bool,
}

#[derive(Clone, Debug)]
struct IngSpec {
    /// `ingressClassName: sluice` rather than another controller's class.
    ours: bool,
    age: Option<u32>,
    rules: Vec<(&'static str, Vec<PathSpec>)>,
    default_backend: Option<Backend>,
    /// `spec.tls`: hosts and `secretName` (`None`: the listener's default certificate).
    tls: Option<(Vec<&'static str>, Option<&'static str>)>,
    ann: Annotations,
}

fn backend_json(b: &Backend) -> Value {
    if b.named {
        json!({"service": {"name": b.svc, "port": {"name": "http"}}})
    } else {
        svc_backend(b.svc, 80)
    }
}

fn annotations_json(a: &Annotations) -> Value {
    let mut m = serde_json::Map::new();
    let mut set = |k: &str, v: String| {
        m.insert(format!("{NGINX}{k}"), Value::String(v));
    };
    if let Some(w) = a.canary_weight {
        set("canary", "true".into());
        set("canary-weight", w.to_string());
    }
    if let Some(alias) = a.server_alias {
        set("server-alias", alias.into());
    }
    if a.www_redirect {
        set("from-to-www-redirect", "true".into());
    }
    if a.use_regex {
        set("use-regex", "true".into());
    }
    if a.rewrite {
        set("rewrite-target", "/$1".into());
    }
    if a.no_ssl_redirect {
        set("ssl-redirect", "false".into());
    }
    if a.force_ssl_redirect {
        set("force-ssl-redirect", "true".into());
    }
    if let Some(svc) = a.default_backend {
        set("default-backend", svc.into());
    }
    if let Some((ns, secret)) = a.auth_tls {
        set("auth-tls-secret", format!("{ns}/{secret}"));
    }
    if a.passthrough {
        set("ssl-passthrough", "true".into());
    }
    if a.whitelist {
        set("whitelist-source-range", "10.0.0.0/8".into());
    }
    if a.permanent_redirect {
        set("permanent-redirect", "https://example.com".into());
    }
    Value::Object(m)
}

fn build_ingress(ns: &str, name: &str, age: Option<u32>, spec: &IngSpec) -> Arc<Ingress> {
    let rules: Vec<Value> = spec
        .rules
        .iter()
        .enumerate()
        .map(|(i, (host, paths))| {
            let mut ps: Vec<Value> = paths
                .iter()
                .map(|p| json!({"path": p.path, "pathType": p.ty, "backend": backend_json(&p.backend)}))
                .collect();
            if spec.ann.rewrite
                && i == 0
                && let Some(first) = paths.first()
            {
                ps.push(json!({
                    "path": "/api/(.*)",
                    "pathType": "ImplementationSpecific",
                    "backend": backend_json(&first.backend),
                }));
            }
            rule(host, ps)
        })
        .collect();
    let mut s = json!({
        "rules": rules,
        "ingressClassName": if spec.ours { "sluice" } else { "other" },
    });
    if let Some(b) = &spec.default_backend {
        s["defaultBackend"] = backend_json(b);
    }
    if let Some((hosts, secret)) = &spec.tls {
        s["tls"] = match secret {
            Some(secret) => json!([{"hosts": hosts, "secretName": secret}]),
            None => json!([{ "hosts": hosts }]),
        };
    }
    raw_ingress(ns, name, age, annotations_json(&spec.ann), s)
}

fn arb_backend() -> impl Strategy<Value = Backend> {
    (prop::sample::select(SERVICES), any::<bool>()).prop_map(|(svc, named)| Backend { svc, named })
}

fn arb_annotations() -> impl Strategy<Value = Annotations> {
    const P: f64 = 0.12;
    let w = || prop::bool::weighted(P);
    (
        (
            prop::option::weighted(P, 0u32..=100),
            prop::option::weighted(P, prop::sample::select(ALIASES)),
            w(),
            w(),
            w(),
            w(),
        ),
        (
            w(),
            prop::option::weighted(P, prop::sample::select(SERVICES)),
            prop::option::weighted(
                P,
                (
                    prop::sample::select(NAMESPACES),
                    prop::sample::select(SECRETS),
                ),
            ),
            w(),
            w(),
            prop::bool::weighted(P / 2.0),
        ),
    )
        .prop_map(
            |(
                (canary_weight, server_alias, www_redirect, use_regex, rewrite, no_ssl_redirect),
                (
                    force_ssl_redirect,
                    default_backend,
                    auth_tls,
                    passthrough,
                    whitelist,
                    permanent_redirect,
                ),
            )| Annotations {
                canary_weight,
                server_alias,
                www_redirect,
                use_regex,
                rewrite,
                no_ssl_redirect,
                force_ssl_redirect,
                default_backend,
                auth_tls,
                passthrough,
                whitelist,
                permanent_redirect,
            },
        )
}

fn arb_ingress() -> impl Strategy<Value = IngSpec> {
    let path = (
        prop::sample::select(PATHS),
        prop::sample::select(PATH_TYPES),
        arb_backend(),
    )
        .prop_map(|(path, ty, backend)| PathSpec { path, ty, backend });
    let rule = (
        prop::sample::select(HOSTS),
        prop::collection::vec(path, 1..=3),
    );
    let rules = prop_oneof![
        1 => Just(Vec::new()),
        8 => prop::collection::vec(rule, 1..=2),
    ];
    let tls = (
        prop::collection::vec(prop::sample::select(TLS_HOSTS), 1..=2),
        prop::option::weighted(0.8, prop::sample::select(SECRETS)),
    );
    (
        prop::bool::weighted(0.9),
        prop::option::weighted(0.85, 0u32..3),
        rules,
        prop::option::weighted(0.05, arb_backend()),
        prop::option::weighted(0.25, tls),
        arb_annotations(),
    )
        .prop_map(|(ours, age, rules, default_backend, tls, ann)| IngSpec {
            ours,
            age,
            rules,
            default_backend,
            tls,
            ann,
        })
}

// ---------------------------------------------------------------------------------------------
// Edits.
// ---------------------------------------------------------------------------------------------

#[derive(Clone, Debug)]
enum Edit {
    /// A new Ingress `c<step>` (in a batch `c<step>-<k>`) in `ns`.
    Create { ns: &'static str, spec: IngSpec },
    /// Another spec and annotations for an existing Ingress (its age stays).
    Update { which: Index, spec: IngSpec },
    /// Deletes an existing Ingress.
    Delete { which: Index },
    /// Replaces an Ingress with an equal copy (a new `Arc`, as after a resync).
    Touch { which: Index },
    /// Deletes an Ingress and creates another of the same name (a new age).
    Recreate { which: Index, spec: IngSpec },
    /// Several Ingress edits before one compile (as a debounced controller sees them).
    Batch(Vec<Edit>),
    /// Replaces the EndpointSlice of a Service (not an Ingress change).
    Slice {
        ns: &'static str,
        svc: &'static str,
        last: u8,
        ready: bool,
    },
    /// Adds the Secret if absent, else removes it (not an Ingress change).
    ToggleSecret {
        ns: &'static str,
        name: &'static str,
    },
    /// Replaces a Service with an equal copy (not an Ingress change).
    TouchService { ns: &'static str, svc: &'static str },
}

impl Edit {
    fn ingress_only(&self) -> bool {
        match self {
            Edit::Create { .. }
            | Edit::Update { .. }
            | Edit::Delete { .. }
            | Edit::Touch { .. }
            | Edit::Recreate { .. } => true,
            Edit::Batch(edits) => edits.iter().all(Edit::ingress_only),
            Edit::Slice { .. } | Edit::ToggleSecret { .. } | Edit::TouchService { .. } => false,
        }
    }
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
        (ns(), prop::sample::select(SECRETS))
            .prop_map(|(ns, name)| Edit::ToggleSecret { ns, name }),
        (ns(), prop::sample::select(LIVE_SERVICES))
            .prop_map(|(ns, svc)| Edit::TouchService { ns, svc }),
    ]
}

fn arb_ingress_edit() -> impl Strategy<Value = Edit> {
    prop_oneof![
        6 => (prop::sample::select(NAMESPACES), arb_ingress())
            .prop_map(|(ns, spec)| Edit::Create { ns, spec }),
        6 => (any::<Index>(), arb_ingress()).prop_map(|(which, spec)| Edit::Update { which, spec }),
        4 => any::<Index>().prop_map(|which| Edit::Delete { which }),
        1 => any::<Index>().prop_map(|which| Edit::Touch { which }),
        1 => (any::<Index>(), arb_ingress())
            .prop_map(|(which, spec)| Edit::Recreate { which, spec }),
    ]
}

fn arb_edit() -> impl Strategy<Value = Edit> {
    prop_oneof![
        8 => arb_ingress_edit(),
        1 => prop::collection::vec(arb_ingress_edit(), 2..=4).prop_map(Edit::Batch),
        1 => arb_other_edit(),
    ]
}

/// A step: an edit, then (when a seed is given) a shuffle of the Ingress list.
type Step = (Edit, Option<u64>);

#[derive(Clone, Debug)]
struct Case {
    /// (namespace, spec) of `i0`, `i1`, ...
    base: Vec<(&'static str, IngSpec)>,
    steps: Vec<Step>,
}

fn arb_case() -> impl Strategy<Value = Case> {
    (
        prop::collection::vec((prop::sample::select(NAMESPACES), arb_ingress()), 4..=12),
        prop::collection::vec(
            (arb_edit(), prop::option::weighted(0.3, any::<u64>())),
            6..=15,
        ),
    )
        .prop_map(|(base, steps)| Case { base, steps })
}

/// The flags a case runs with: 0 default, 1..=4 one flag each, 5 all of them.
fn options(choice: u8) -> CompileOptions {
    let mut o = CompileOptions::default();
    if matches!(choice, 1 | 5) {
        o.default_backend_service = Some(ObjectRef::service("n1", "s1"));
    }
    if matches!(choice, 2 | 5) {
        o.default_certificate = Some(ObjectRef::secret("n1", "tls"));
    }
    if matches!(choice, 3 | 5) {
        o.enable_ssl_passthrough = true;
    }
    if matches!(choice, 4 | 5) {
        o.ingress_nginx_compat = true;
    }
    o
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

fn key_of(ing: &Ingress) -> (String, String) {
    (
        ing.metadata.namespace.clone().unwrap_or_default(),
        ing.metadata.name.clone().unwrap_or_default(),
    )
}

/// Applies `edit` (step `step`) to `inputs`, keeping every unchanged object the same `Arc`.
/// Returns whether something changed.
fn apply(
    inputs: &mut Inputs,
    ages: &mut BTreeMap<(String, String), Option<u32>>,
    tag: &str,
    edit: &Edit,
) -> bool {
    match edit {
        Edit::Batch(edits) => {
            let mut changed = false;
            for (k, edit) in edits.iter().enumerate() {
                changed |= apply(inputs, ages, &format!("{tag}-{k}"), edit);
            }
            changed
        }
        Edit::Create { ns, spec } => {
            let name = format!("c{tag}");
            ages.insert(((*ns).to_owned(), name.clone()), spec.age);
            inputs
                .ingresses
                .push(build_ingress(ns, &name, spec.age, spec));
            true
        }
        Edit::Update { which, spec } => {
            if inputs.ingresses.is_empty() {
                return false;
            }
            let i = which.index(inputs.ingresses.len());
            let (ns, name) = key_of(&inputs.ingresses[i]);
            let age = ages[&(ns.clone(), name.clone())];
            inputs.ingresses[i] = build_ingress(&ns, &name, age, spec);
            true
        }
        Edit::Delete { which } => {
            if inputs.ingresses.is_empty() {
                return false;
            }
            let i = which.index(inputs.ingresses.len());
            let gone = inputs.ingresses.remove(i);
            ages.remove(&key_of(&gone));
            true
        }
        Edit::Recreate { which, spec } => {
            if inputs.ingresses.is_empty() {
                return false;
            }
            let i = which.index(inputs.ingresses.len());
            let (ns, name) = key_of(&inputs.ingresses[i]);
            ages.insert((ns.clone(), name.clone()), spec.age);
            inputs.ingresses[i] = build_ingress(&ns, &name, spec.age, spec);
            true
        }
        Edit::Touch { which } => {
            if inputs.ingresses.is_empty() {
                return false;
            }
            let i = which.index(inputs.ingresses.len());
            inputs.ingresses[i] = Arc::new((*inputs.ingresses[i]).clone());
            true
        }
        Edit::Slice {
            ns,
            svc,
            last,
            ready,
        } => {
            let name = format!("{svc}-abcde");
            let i = inputs
                .endpoint_slices
                .iter()
                .position(|s| {
                    s.metadata.namespace.as_deref() == Some(*ns)
                        && s.metadata.name.as_deref() == Some(name.as_str())
                })
                .expect("every live Service has a slice");
            inputs.endpoint_slices[i] = svc_slice(ns, svc, *last, *ready);
            true
        }
        Edit::ToggleSecret { ns, name } => {
            let found = inputs.secrets.iter().position(|s| {
                s.metadata.namespace.as_deref() == Some(*ns)
                    && s.metadata.name.as_deref() == Some(*name)
            });
            match found {
                Some(i) => {
                    inputs.secrets.remove(i);
                }
                None => inputs.secrets.push(tls_ca_secret(ns, name)),
            }
            true
        }
        Edit::TouchService { ns, svc } => {
            let i = inputs
                .services
                .iter()
                .position(|s| {
                    s.metadata.namespace.as_deref() == Some(*ns)
                        && s.metadata.name.as_deref() == Some(*svc)
                })
                .expect("live Service");
            inputs.services[i] = Arc::new((*inputs.services[i]).clone());
            true
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Comparison.
// ---------------------------------------------------------------------------------------------

struct NoHeaders;

impl HeaderLookup for NoHeaders {
    fn header(&self, _: &str) -> Option<&[u8]> {
        None
    }
}

fn request(table: &RouteTable, https: bool, host: &str, path: &str) -> Option<usize> {
    table.route_request(&RequestInfo {
        https,
        listener: None,
        host,
        path,
        query: "",
        method: "GET",
        headers: &NoHeaders,
    })
}

/// Everything observable about the two compilations, compared part by part.
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
                eq_or_fail(
                    &format!("table.route_request(https: {https}, {host:?}, {path:?})"),
                    &entry(&entries_a, request(ta, https, host, path)),
                    &entry(&entries_b, request(tb, https, host, path)),
                )?;
            }
        }
        eq_or_fail(
            &format!("table.certificate({host:?}).secret"),
            &ta.certificate(host).map(|c| c.secret.clone()),
            &tb.certificate(host).map(|c| c.secret.clone()),
        )?;
        eq_or_fail(
            &format!("table.client_cert_auth({host:?})"),
            &ta.client_cert_auth(host).map(canon),
            &tb.client_cert_auth(host).map(canon),
        )?;
        eq_or_fail(
            &format!("table.passthrough_target({host:?})"),
            &ta.passthrough_target(host).map(canon),
            &tb.passthrough_target(host).map(canon),
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
    let auths = |t: &RouteTable| -> Vec<String> {
        let mut v: Vec<String> = t.client_cert_auths().map(canon).collect();
        v.sort();
        v
    };
    lists_eq("table.client_cert_auths() (sorted)", &auths(ta), &auths(tb))?;
    eq_or_fail(
        "table.has_passthrough()",
        &ta.has_passthrough(),
        &tb.has_passthrough(),
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
    Ok(())
}

/// The Ingresses as JSON lines, sorted by key: the cluster a failure happened in.
fn dump(inputs: &Inputs) -> String {
    let mut ings: Vec<&Arc<Ingress>> = inputs.ingresses.iter().collect();
    ings.sort_by_key(|i| key_of(i));
    let mut out = String::new();
    for ing in ings {
        let meta = json!({
            "namespace": ing.metadata.namespace,
            "name": ing.metadata.name,
            "creationTimestamp": ing.metadata.creation_timestamp,
            "annotations": ing.metadata.annotations,
        });
        let line = json!({"metadata": meta, "spec": ing.spec});
        out.push_str(&format!("  {line}\n"));
    }
    let secrets: Vec<_> = inputs
        .secrets
        .iter()
        .map(|s| key_of_meta(&s.metadata))
        .collect();
    out.push_str(&format!("  secrets: {secrets:?}\n"));
    out
}

fn key_of_meta(m: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> String {
    format!(
        "{}/{}",
        m.namespace.as_deref().unwrap_or_default(),
        m.name.as_deref().unwrap_or_default()
    )
}

/// Whether an Ingress may make an Ingress-only edit compile everything: by design, one with
/// a `spec.defaultBackend` (the oldest in the cluster answers every host) or, with
/// `--enable-ssl-passthrough`, an `ssl-passthrough` one (its target may be the default
/// backend). Edits in a cluster with one do not count towards "some were incremental".
fn forces_full(ing: &Ingress, opts: &CompileOptions) -> bool {
    let default_backend = ing
        .spec
        .as_ref()
        .is_some_and(|s| s.default_backend.is_some());
    let passthrough = opts.enable_ssl_passthrough
        && ing
            .metadata
            .annotations
            .as_ref()
            .is_some_and(|a| a.contains_key(&format!("{NGINX}ssl-passthrough")));
    default_backend || passthrough
}

/// Runs one case: the base compile, then each step, comparing the incremental compiler
/// with a full compile after every one.
fn run_case(case: &Case, opts: &CompileOptions) -> Result<(), TestCaseError> {
    let mut inputs = base_inputs();
    let mut ages = BTreeMap::new();
    for (age, b) in (0..).zip(bystanders()) {
        ages.insert(key_of(&b), Some(age));
        inputs.ingresses.push(b);
    }
    for (i, (ns, spec)) in case.base.iter().enumerate() {
        let name = format!("i{i}");
        ages.insert(((*ns).to_owned(), name.clone()), spec.age);
        inputs
            .ingresses
            .push(build_ingress(ns, &name, spec.age, spec));
    }
    let mut inc = IncrementalCompiler::new();
    let a = inc.compile(&inputs, opts);
    let b = compile(&inputs, opts);
    compare(&a, &b).map_err(|e| {
        TestCaseError::fail(format!("base compile: {e}\ncluster:\n{}", dump(&inputs)))
    })?;
    prop_assert_eq!(
        inc.last_kind(),
        CompileKind::Full,
        "the first compile is full"
    );

    let mut ingress_only = 0usize;
    let mut incremental = 0usize;
    let mut kinds = Vec::new();
    for (step, (edit, seed)) in case.steps.iter().enumerate() {
        let forced_before = inputs.ingresses.iter().any(|i| forces_full(i, opts));
        let changed = apply(&mut inputs, &mut ages, &step.to_string(), edit);
        let forced = forced_before || inputs.ingresses.iter().any(|i| forces_full(i, opts));
        if let Some(seed) = seed {
            let mut ingresses: Vec<_> = inputs.ingresses.iter().cloned().collect();
            shuffle(&mut ingresses, *seed);
            inputs.ingresses = ingresses.into();
        }
        let a = inc.compile(&inputs, opts);
        let b = compile(&inputs, opts);
        let kind = inc.last_kind();
        kinds.push(kind);
        compare(&a, &b).map_err(|e| {
            TestCaseError::fail(format!(
                "step {step} ({edit:?}, compiled {kind:?}): {e}\ncluster:\n{}",
                dump(&inputs)
            ))
        })?;
        if edit.ingress_only() {
            if changed && !forced {
                ingress_only += 1;
            }
            if let CompileKind::Incremental { objects } = kind {
                incremental += 1;
                prop_assert!(
                    objects <= inputs.ingresses.len(),
                    "step {}: Incremental read {} Ingresses of {}",
                    step,
                    objects,
                    inputs.ingresses.len()
                );
            }
        } else if matches!(edit, Edit::Slice { .. }) {
            // Endpoints alone: their backends are resolved again, nothing else is read.
            prop_assert!(
                matches!(kind, CompileKind::Incremental { .. }),
                "step {} ({:?}) changed only an EndpointSlice: compiled {:?}",
                step,
                edit,
                kind
            );
        } else {
            prop_assert_eq!(
                kind,
                CompileKind::Full,
                "step {} ({:?}) changed more than Ingresses: the compile must be full",
                step,
                edit
            );
        }
    }
    if ingress_only >= 3 {
        prop_assert!(
            incremental >= 1,
            "{} Ingress-only edits in a cluster without a spec.defaultBackend (or, with \
             --enable-ssl-passthrough, an ssl-passthrough Ingress) and not one was compiled \
             incrementally: {:?}\ncluster:\n{}",
            ingress_only,
            kinds,
            dump(&inputs)
        );
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, max_shrink_iters: 4096, ..ProptestConfig::default() })]

    #[test]
    fn incremental_compile_equals_full_compile_with_default_options(case in arb_case()) {
        run_case(&case, &CompileOptions::default())?;
    }

    #[test]
    fn incremental_compile_equals_full_compile_with_flags(case in arb_case(), choice in 1u8..=5) {
        run_case(&case, &options(choice))?;
    }
}

// ---------------------------------------------------------------------------------------------
// One Ingress among many.
// ---------------------------------------------------------------------------------------------

#[test]
fn one_ingress_created_among_200_unrelated_compiles_alone_and_its_deletion_404s_only_its_host() {
    let opts = CompileOptions::default();
    let mut inputs = base_inputs();
    for i in 0..200 {
        inputs.ingresses.push(ingress(
            "n1",
            &format!("bulk{i}"),
            Some(1),
            rules(vec![rule(
                &format!("h{i}.bulk.test"),
                vec![path("/", "Prefix", "s1", 80)],
            )]),
        ));
    }
    let mut inc = IncrementalCompiler::new();
    let first = inc.compile(&inputs, &opts);
    assert_eq!(inc.last_kind(), CompileKind::Full);

    inputs.ingresses.push(ingress(
        "n2",
        "new",
        Some(2),
        rules(vec![rule(
            "new.bulk.test",
            vec![path("/", "Prefix", "s2", 80)],
        )]),
    ));
    let created = inc.compile(&inputs, &opts);
    assert_eq!(
        inc.last_kind(),
        CompileKind::Incremental { objects: 1 },
        "only the new Ingress shares its host"
    );
    assert_eq!(
        routed(&created.table, "new.bulk.test", "/anything").as_deref(),
        Some("n2/s2:80")
    );
    assert_eq!(
        created.table.routes(),
        compile(&inputs, &opts).table.routes()
    );

    inputs.ingresses.pop();
    let deleted = inc.compile(&inputs, &opts);
    assert!(
        matches!(inc.last_kind(), CompileKind::Incremental { .. }),
        "a deletion is Ingress-only: {:?}",
        inc.last_kind()
    );
    assert_eq!(routed(&deleted.table, "new.bulk.test", "/anything"), None);
    for i in 0..200 {
        assert_eq!(
            routed(&deleted.table, &format!("h{i}.bulk.test"), "/").as_deref(),
            Some("n1/s1:80"),
            "h{i}.bulk.test still routes"
        );
    }
    assert_eq!(
        deleted.table.routes(),
        compile(&inputs, &opts).table.routes()
    );
    assert_eq!(deleted.ours, compile(&inputs, &opts).ours);

    // The list of our Ingresses is copied only around the one that came or went: the
    // entries before it are the very same objects (not copies) in all three results.
    let same_objects = |a: &Compiled, b: &Compiled| {
        a.ours
            .iter()
            .zip(b.ours.iter())
            .filter(|(x, y)| std::ptr::eq(*x, *y))
            .count()
    };
    assert_eq!(created.ours.len(), 201);
    assert!(same_objects(&first, &created) >= 100, "shared on creation");
    assert!(
        same_objects(&created, &deleted) >= 100,
        "shared on deletion"
    );
}

/// ingress-nginx passes an `ssl-passthrough` host's connections to the backend of the host's
/// `/` location; a host without one of its own takes the catch-all rules'. Removing the
/// catch-all Ingress must take the passthrough target away, though the two share no host.
#[test]
fn removing_the_catch_all_a_passthrough_host_fell_back_to_takes_its_target_away() {
    let opts = options(3);
    let mut inputs = base_inputs();
    inputs.ingresses.push(raw_ingress(
        "n1",
        "passthrough",
        Some(1),
        json!({
            "nginx.ingress.kubernetes.io/canary": "true",
            "nginx.ingress.kubernetes.io/canary-weight": "0",
            "nginx.ingress.kubernetes.io/ssl-passthrough": "true",
        }),
        json!({"ingressClassName": "sluice", "rules": [rule("x.a.test", vec![path("/", "Prefix", "s1", 80)])]}),
    ));
    inputs.ingresses.push(ingress(
        "n1",
        "catch-all",
        Some(2),
        rules(vec![rule("", vec![path("/", "Prefix", "s1", 80)])]),
    ));
    let mut inc = IncrementalCompiler::new();
    let before = inc.compile(&inputs, &opts);
    assert!(before.table.passthrough_target("x.a.test").is_some());

    inputs.ingresses.pop();
    let after = inc.compile(&inputs, &opts);
    assert_eq!(inc.last_kind(), CompileKind::Full);
    assert!(after.table.passthrough_target("x.a.test").is_none());
    assert!(
        compile(&inputs, &opts)
            .table
            .passthrough_target("x.a.test")
            .is_none()
    );
}

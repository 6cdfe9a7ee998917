//! The controller flags that reach the compiler: `--watch-ingress-without-class`,
//! `--default-backend-service` and `--default-ssl-certificate` (ingress-nginx's meanings).

mod common;

use std::sync::Arc;

use common::*;
use serde_json::json;
use sluice_routing::{CompileOptions, Compiled, Inputs, ObjectRef, compile};

fn with(inputs: &Inputs, options: CompileOptions) -> Compiled {
    compile(inputs, &options)
}

/// (object, field, reason) of every flag diagnostic.
fn flag_summary(out: &Compiled) -> Vec<(String, String, &'static str)> {
    out.flag_diagnostics
        .iter()
        .map(|d| (d.object.to_string(), d.field.clone(), d.reason.as_str()))
        .collect()
}

#[test]
fn watch_ingress_without_class_serves_classless_ingresses_only() {
    let spec = |host: &str, class: Option<&str>| {
        let mut s = rules(vec![rule(host, vec![path("/", "Prefix", "svc", 80)])]);
        if let Some(c) = class {
            s["ingressClassName"] = json!(c);
        }
        s
    };
    let legacy = |v: &str| json!({"kubernetes.io/ingress.class": v});
    let ingresses = vec![
        raw_ingress("ns", "classless", Some(1), json!({}), spec("none.io", None)),
        raw_ingress(
            "ns",
            "empty-name",
            Some(1),
            json!({}),
            spec("empty.io", Some("")),
        ),
        raw_ingress(
            "ns",
            "ours",
            Some(1),
            json!({}),
            spec("ours.io", Some("sluice")),
        ),
        raw_ingress(
            "ns",
            "theirs",
            Some(1),
            json!({}),
            spec("theirs.io", Some("nginx")),
        ),
        raw_ingress(
            "ns",
            "unknown",
            Some(1),
            json!({}),
            spec("unk.io", Some("gone")),
        ),
        raw_ingress(
            "ns",
            "legacy-ours",
            Some(1),
            legacy("sluice"),
            spec("lo.io", None),
        ),
        raw_ingress(
            "ns",
            "legacy-theirs",
            Some(1),
            legacy("nginx"),
            spec("lt.io", None),
        ),
        raw_ingress(
            "ns",
            "legacy-empty",
            Some(1),
            legacy(""),
            spec("le.io", None),
        ),
    ];
    // Some other controller's class is the cluster default; ours is not.
    let inp = Inputs {
        ingresses: ingresses.clone().into(),
        ingress_classes: vec![
            class("sluice", CONTROLLER, false),
            class("nginx", "k8s.io/ingress-nginx", true),
        ]
        .into(),
        services: vec![service("ns", "svc", &[(None, 80)])].into(),
        ..Inputs::default()
    };
    let names =
        |out: &Compiled| -> Vec<String> { out.ours.iter().map(|o| o.name.clone()).collect() };

    let off = with(&inp, CompileOptions::default());
    assert_eq!(names(&off), ["legacy-ours", "ours"]);
    assert!(off.table.route_backend("none.io", "/").is_none());

    let flag = || CompileOptions {
        watch_ingress_without_class: true,
        ..CompileOptions::default()
    };
    let on = with(&inp, flag());
    // Neither a class name (an empty one counts as none) nor the annotation: now ours. A
    // class name of someone else's (or of no known class) or a foreign annotation still
    // wins over the flag.
    assert_eq!(
        names(&on),
        ["classless", "empty-name", "legacy-ours", "ours"]
    );
    assert_eq!(
        routed(&on.table, "none.io", "/").as_deref(),
        Some("ns/svc:80")
    );
    assert_eq!(
        routed(&on.table, "empty.io", "/").as_deref(),
        Some("ns/svc:80")
    );
    for host in ["theirs.io", "unk.io", "lt.io", "le.io"] {
        assert!(on.table.route_backend(host, "/").is_none(), "{host}");
    }

    // Without any IngressClass of ours at all, the flag alone makes class-less ones ours.
    let bare = Inputs {
        ingress_classes: vec![class("nginx", "k8s.io/ingress-nginx", false)].into(),
        ..inp.clone()
    };
    assert_eq!(
        names(&with(&bare, flag())),
        ["classless", "empty-name", "legacy-ours"]
    );
    assert_eq!(
        names(&with(&bare, CompileOptions::default())),
        ["legacy-ours"]
    );
}

#[test]
fn default_backend_service_takes_unmatched_requests() {
    let fallback = ObjectRef::service("infra", "fallback");
    let flag = |svc: &ObjectRef| CompileOptions {
        default_backend_service: Some(svc.clone()),
        ..CompileOptions::default()
    };
    let mut inp = inputs(vec![ingress(
        "ns",
        "web",
        Some(1),
        rules(vec![rule("h", vec![path("/a", "Exact", "a", 80)])]),
    )]);
    inp.services = vec![
        service("ns", "a", &[(None, 80)]),
        // The first port is the one used, whatever its name or number.
        service(
            "infra",
            "fallback",
            &[(Some("web"), 8080), (Some("other"), 9090)],
        ),
    ]
    .into();
    inp.endpoint_slices = vec![slice(
        "infra",
        "fallback-1",
        "fallback",
        &[(Some("web"), 3000), (Some("other"), 4000)],
        &[(&["10.0.0.7"], Some(true))],
    )]
    .into();

    // Without the flag: 404 (no route).
    let out = run(&inp);
    assert!(out.table.route("x", "/").is_none());
    assert!(out.flag_diagnostics.is_empty());

    let out = with(&inp, flag(&fallback));
    for (host, p) in [("unknown", "/"), ("h", "/b"), ("", "/a/deeper")] {
        assert_eq!(
            routed(&out.table, host, p).as_deref(),
            Some("infra/fallback:8080"),
            "{host}{p}"
        );
    }
    assert_eq!(routed(&out.table, "h", "/a").as_deref(), Some("ns/a:80"));
    let entry = out.table.route("unknown", "/").expect("default backend");
    assert_eq!(entry.source, fallback);
    assert_eq!(
        entry.backend.endpoints,
        vec!["10.0.0.7:3000".parse().unwrap()]
    );
    assert_eq!(
        out.table.default_backend().map(|b| b.service.to_string()),
        Some("infra/fallback:8080".to_owned())
    );
    assert!(
        out.flag_diagnostics.is_empty(),
        "{:?}",
        out.flag_diagnostics
    );
    assert!(out.diagnostics.is_empty(), "{:?}", out.diagnostics);

    // A rule naming the same Service port shares the backend.
    let mut shared = inp.clone();
    shared.ingresses.push(ingress(
        "infra",
        "direct",
        Some(2),
        rules(vec![rule("d", vec![path("/", "Prefix", "fallback", 8080)])]),
    ));
    let out = with(&shared, flag(&fallback));
    let direct = out.table.route_backend("d", "/").expect("rule");
    let default = out.table.route_backend("x", "/").expect("default");
    assert!(Arc::ptr_eq(direct, default));
    assert_eq!(out.table.backends().len(), 2);

    // An Ingress's spec.defaultBackend wins over the flag.
    let mut own = inp.clone();
    let mut s = rules(vec![]);
    s["defaultBackend"] = svc_backend("a", 80);
    own.ingresses.push(ingress("ns", "own-default", Some(5), s));
    let out = with(&own, flag(&fallback));
    assert_eq!(routed(&out.table, "x", "/").as_deref(), Some("ns/a:80"));
    assert!(out.flag_diagnostics.is_empty());

    // A missing Service: 503 (a backend without endpoints) and a diagnostic naming the flag
    // and the Service, not an Ingress's.
    let missing = ObjectRef::service("infra", "nope");
    let out = with(&inp, flag(&missing));
    let backend = out.table.route_backend("x", "/").expect("still routed");
    assert_eq!(backend.service.to_string(), "infra/nope:0");
    assert!(backend.endpoints.is_empty());
    assert_eq!(
        flag_summary(&out),
        [(
            "Service infra/nope".to_owned(),
            "--default-backend-service".to_owned(),
            "ServiceNotFound"
        )]
    );
    let message = &out.flag_diagnostics[0].message;
    assert!(
        message.contains("infra/nope") && message.contains("503"),
        "{message}"
    );
    assert!(out.diagnostics.is_empty());

    // Outside the watched namespace it cannot be seen, and the message says why.
    let out = with(
        &inp,
        CompileOptions {
            watch_namespace: Some("ns".into()),
            ..flag(&fallback)
        },
    );
    assert!(
        out.table
            .route_backend("x", "/")
            .unwrap()
            .endpoints
            .is_empty()
    );
    assert!(
        out.flag_diagnostics[0]
            .message
            .contains("--watch-namespace"),
        "{:?}",
        out.flag_diagnostics
    );

    // A Service without ports: 503; an ExternalName Service: not routed (404).
    let mut odd = inp.clone();
    odd.services.push(service("infra", "portless", &[]));
    odd.services
        .push(Arc::new(serde_json::from_value(json!({
            "metadata": {"namespace": "infra", "name": "external"},
            "spec": {"type": "ExternalName", "externalName": "example.com", "ports": [{"port": 80}]},
        }))
        .unwrap()));
    let out = with(&odd, flag(&ObjectRef::service("infra", "portless")));
    assert!(
        out.table
            .route_backend("x", "/")
            .unwrap()
            .endpoints
            .is_empty()
    );
    assert_eq!(flag_summary(&out)[0].2, "PortNotFound");
    let out = with(&odd, flag(&ObjectRef::service("infra", "external")));
    assert!(out.table.route("x", "/").is_none());
    assert_eq!(flag_summary(&out)[0].2, "UnsupportedBackend");
}

#[test]
fn default_certificate_comes_from_the_flag_secret() {
    let secret = ObjectRef::secret("infra", "wildcard");
    let flag = |s: &ObjectRef| CompileOptions {
        default_certificate: Some(s.clone()),
        ..CompileOptions::default()
    };
    let mut s = rules(vec![rule("own.io", vec![path("/", "Prefix", "svc", 80)])]);
    s["tls"] = json!([{"hosts": ["own.io"], "secretName": "own"}, {"hosts": ["bare.io"]}]);
    let mut inp = inputs(vec![ingress("ns", "web", Some(1), s)]);
    inp.services = vec![service("ns", "svc", &[(None, 80)])].into();
    inp.secrets = vec![
        tls_secret("ns", "own", CERT_PEM, PKCS8_PEM),
        tls_secret("infra", "wildcard", CHAIN_PEM, SEC1_PEM),
    ]
    .into();

    let out = run(&inp);
    assert!(out.table.default_certificate().is_none());
    assert_eq!(out.table.certificates().count(), 1);

    let out = with(&inp, flag(&secret));
    let default = out
        .table
        .default_certificate()
        .expect("default certificate");
    assert_eq!(default.secret, secret);
    assert_eq!(default.cert_chain.len(), 2);
    // It is one of the table's certificates (the proxy parses those), once.
    let all: Vec<_> = out.table.certificates().collect();
    assert_eq!(all.len(), 2);
    assert!(all.iter().any(|c| Arc::ptr_eq(c, default)));
    // SNI lookups are unchanged: names without a certificate of their own get `None`, and
    // the listener presents the default certificate.
    assert_eq!(out.table.certificate("own.io").unwrap().secret.name, "own");
    assert!(out.table.certificate("bare.io").is_none());
    assert!(out.table.certificate("unknown.io").is_none());
    assert!(out.flag_diagnostics.is_empty());

    // An Ingress naming the same Secret shares the certificate.
    let mut same = inp.clone();
    let mut s = rules(vec![]);
    s["tls"] = json!([{"hosts": ["w.io"], "secretName": "wildcard"}]);
    same.ingresses.push(ingress("infra", "w", Some(2), s));
    let out = with(&same, flag(&secret));
    let default = out.table.default_certificate().unwrap();
    assert!(Arc::ptr_eq(default, out.table.certificate("w.io").unwrap()));
    assert_eq!(out.table.certificates().count(), 2);

    // Missing or invalid: no default certificate, and a diagnostic naming flag and Secret.
    let out = with(&inp, flag(&ObjectRef::secret("infra", "absent")));
    assert!(out.table.default_certificate().is_none());
    assert_eq!(
        flag_summary(&out),
        [(
            "Secret infra/absent".to_owned(),
            "--default-ssl-certificate".to_owned(),
            "TlsSecretMissing"
        )]
    );
    assert!(out.flag_diagnostics[0].message.contains("generated"));
    let mut broken = inp.clone();
    broken.secrets[1] = tls_secret("infra", "wildcard", "not pem", PKCS8_PEM);
    let out = with(&broken, flag(&secret));
    assert!(out.table.default_certificate().is_none());
    assert_eq!(out.table.certificates().count(), 1);
    assert_eq!(flag_summary(&out)[0].2, "TlsSecretInvalid");
    assert!(out.diagnostics.is_empty(), "{:?}", out.diagnostics);
}

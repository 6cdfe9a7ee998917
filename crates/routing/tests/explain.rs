//! `explain`: the answer agrees with the table, and every losing rule gets the right reason
//! (the Ingress conformance cases: exact vs prefix, wildcard hosts, default backend, class).

mod common;

use common::*;
use serde_json::json;
use sluice_routing::{Answer, CompileOptions, Explanation, Inputs, explain};

fn reason<'a>(e: &'a Explanation, ingress: &str, field: &str) -> &'a str {
    e.checks
        .iter()
        .find(|c| {
            format!("{}/{}", c.ingress.namespace, c.ingress.name) == ingress && c.field == field
        })
        .map(|c| c.reason.as_str())
        .unwrap_or_else(|| panic!("no check for {ingress} {field} in\n{e}"))
}

fn selected(e: &Explanation) -> Vec<String> {
    e.checks
        .iter()
        .filter(|c| c.selected)
        .map(|c| format!("{}/{} {}", c.ingress.namespace, c.ingress.name, c.field))
        .collect()
}

fn with_backends(mut inputs: Inputs) -> Inputs {
    inputs.services = vec![
        service("default", "web", &[(None, 80)]),
        service("default", "api", &[(None, 80)]),
    ]
    .into();
    inputs.endpoint_slices = vec![slice(
        "default",
        "api-1",
        "api",
        &[(None, 8080)],
        &[(&["10.0.0.1"], Some(true)), (&["10.0.0.2"], Some(false))],
    )]
    .into();
    inputs
}

#[test]
fn exact_versus_prefix_and_longest_path() {
    let inputs = with_backends(inputs(vec![ingress(
        "default",
        "shop",
        Some(1),
        rules(vec![rule(
            "shop.example",
            vec![
                path("/", "Prefix", "web", 80),
                path("/api", "Prefix", "api", 80),
                path("/status", "Exact", "api", 80),
            ],
        )]),
    )]));
    let options = CompileOptions::default();

    let e = explain(&inputs, &options, "Shop.Example:8080", "/api/orders");
    assert_eq!(e.host, "shop.example");
    let Answer::Route {
        ingress,
        route,
        backend,
        ..
    } = &e.answer
    else {
        panic!("not routed:\n{e}");
    };
    assert_eq!(ingress.name, "shop");
    assert_eq!((route.path_type, route.path.as_str()), ("Prefix", "/api"));
    assert_eq!(backend.service.name, "api");
    assert_eq!(backend.ready.len(), 1);
    assert_eq!(backend.not_ready, 1);
    assert_eq!(
        selected(&e),
        ["default/shop spec.rules[0].http.paths[1]"],
        "{e}"
    );
    let shorter = reason(&e, "default/shop", "spec.rules[0].http.paths[0]");
    assert!(
        shorter.contains("Prefix /api is more specific"),
        "{shorter}"
    );
    let exact = reason(&e, "default/shop", "spec.rules[0].http.paths[2]");
    assert!(exact.contains("Exact /status does not equal"), "{exact}");
    let text = e.to_string();
    assert!(
        text.contains("1/2 endpoints ready: 10.0.0.1:8080"),
        "{text}"
    );

    // Prefix matches whole segments: /apiary goes to `/`.
    let e = explain(&inputs, &options, "shop.example", "/apiary");
    assert_eq!(
        selected(&e),
        ["default/shop spec.rules[0].http.paths[0]"],
        "{e}"
    );
    let api = reason(&e, "default/shop", "spec.rules[0].http.paths[1]");
    assert!(api.contains("whole path segments"), "{api}");

    // Exact /status answers /status, not /status/.
    let e = explain(&inputs, &options, "shop.example", "/status");
    assert_eq!(
        selected(&e),
        ["default/shop spec.rules[0].http.paths[2]"],
        "{e}"
    );
    let e = explain(&inputs, &options, "shop.example", "/status/");
    assert_eq!(
        selected(&e),
        ["default/shop spec.rules[0].http.paths[0]"],
        "{e}"
    );
}

#[test]
fn wildcard_hosts_cover_one_label_and_exact_hosts_own_their_requests() {
    let inputs = inputs(vec![
        ingress(
            "default",
            "wild",
            Some(1),
            rules(vec![rule(
                "*.apps.example",
                vec![path("/", "Prefix", "web", 80)],
            )]),
        ),
        ingress(
            "default",
            "exact",
            Some(2),
            rules(vec![rule(
                "a.apps.example",
                vec![path("/only", "Exact", "api", 80)],
            )]),
        ),
    ]);
    let options = CompileOptions::default();

    let e = explain(&inputs, &options, "b.apps.example", "/x");
    assert_eq!(
        selected(&e),
        ["default/wild spec.rules[0].http.paths[0]"],
        "{e}"
    );
    let other = reason(&e, "default/exact", "spec.rules[0].http.paths[0]");
    assert!(other.contains("does not match b.apps.example"), "{other}");

    // Two labels: the wildcard does not cover it.
    let e = explain(&inputs, &options, "x.b.apps.example", "/x");
    assert_eq!(e.answer, Answer::NotFound, "{e}");
    let wild = reason(&e, "default/wild", "spec.rules[0].http.paths[0]");
    assert!(wild.contains("exactly one label"), "{wild}");

    // a.apps.example has exact rules: the wildcard is not consulted, no fallthrough.
    let e = explain(&inputs, &options, "a.apps.example", "/x");
    assert_eq!(e.answer, Answer::NotFound, "{e}");
    let wild = reason(&e, "default/wild", "spec.rules[0].http.paths[0]");
    assert!(
        wild.contains("host a.apps.example own this request"),
        "{wild}"
    );
    assert!(wild.contains("no fallthrough"), "{wild}");
    assert!(e.to_string().contains("404"), "{e}");
}

#[test]
fn default_backend_and_conflicts() {
    let mut inputs = with_backends(inputs(vec![
        ingress(
            "default",
            "old",
            Some(1),
            json!({
                "defaultBackend": svc_backend("web", 80),
                "rules": [rule("x.example", vec![path("/a", "Prefix", "api", 80)])],
            }),
        ),
        ingress(
            "default",
            "new",
            Some(2),
            rules(vec![rule(
                "x.example",
                vec![path("/a", "Prefix", "web", 80)],
            )]),
        ),
    ]));
    let options = CompileOptions::default();

    let e = explain(&inputs, &options, "x.example", "/a/b");
    assert_eq!(
        selected(&e),
        ["default/old spec.rules[0].http.paths[0]"],
        "{e}"
    );
    let lost = reason(&e, "default/new", "spec.rules[0].http.paths[0]");
    assert!(
        lost.contains("Ingress default/old, which is older"),
        "{lost}"
    );
    // The loser's conflict is not the answering Ingress's problem.
    assert!(e.problems.is_empty(), "{:?}", e.problems);

    let e = explain(&inputs, &options, "x.example", "/b");
    match &e.answer {
        Answer::DefaultBackend { source, backend } => {
            assert_eq!(source.name, "old");
            assert_eq!(backend.service.name, "web");
        }
        other => panic!("{other:?}\n{e}"),
    }
    assert!(
        e.to_string()
            .contains("default backend of Ingress default/old")
    );

    // The answering Ingress's problems are part of the answer.
    inputs.services.clear();
    let e = explain(&inputs, &options, "x.example", "/a");
    let text = e.to_string();
    assert!(
        text.contains("problem: Ingress default/old: spec.rules[0].http.paths[0].backend.service.name: Service default/api not found"),
        "{text}"
    );
    assert!(
        text.contains("0/0 endpoints ready (requests get 503)"),
        "{text}"
    );
}

#[test]
fn class_mismatches_name_the_reason() {
    let mut inputs = inputs(vec![
        ingress(
            "default",
            "ours",
            Some(1),
            rules(vec![rule(
                "x.example",
                vec![path("/", "Prefix", "web", 80)],
            )]),
        ),
        ingress(
            "default",
            "theirs",
            Some(2),
            json!({"ingressClassName": "nginx",
                   "rules": [rule("x.example", vec![path("/", "Prefix", "web", 80)])]}),
        ),
        raw_ingress(
            "default",
            "classless",
            Some(3),
            json!({}),
            rules(vec![rule(
                "x.example",
                vec![path("/", "Prefix", "web", 80)],
            )]),
        ),
        raw_ingress(
            "default",
            "legacy",
            Some(4),
            json!({"kubernetes.io/ingress.class": "nginx"}),
            rules(vec![rule(
                "x.example",
                vec![path("/", "Prefix", "web", 80)],
            )]),
        ),
    ]);
    inputs
        .ingress_classes
        .push(class("nginx", "k8s.io/ingress-nginx", false));
    let options = CompileOptions::default();
    let e = explain(&inputs, &options, "x.example", "/");
    assert_eq!(
        selected(&e),
        ["default/ours spec.rules[0].http.paths[0]"],
        "{e}"
    );
    let theirs = reason(&e, "default/theirs", "spec.ingressClassName");
    assert!(
        theirs.contains("\"nginx\" is not an IngressClass of this controller"),
        "{theirs}"
    );
    let classless = reason(&e, "default/classless", "spec.ingressClassName");
    assert!(classless.contains("is-default-class"), "{classless}");
    let legacy = reason(&e, "default/legacy", "spec.ingressClassName");
    assert!(legacy.contains("kubernetes.io/ingress.class"), "{legacy}");

    // --watch-namespace hides other namespaces, and says so.
    let options = CompileOptions {
        watch_namespace: Some("prod".into()),
        ..CompileOptions::default()
    };
    let e = explain(&inputs, &options, "x.example", "/");
    assert_eq!(e.answer, Answer::NotFound);
    assert!(reason(&e, "default/ours", "metadata.namespace").contains("not watched"));
}

#[test]
fn explanation_agrees_with_the_table_on_many_requests() {
    let inputs = with_backends(inputs(vec![
        ingress(
            "default",
            "a",
            Some(1),
            rules(vec![
                rule(
                    "h.example",
                    vec![
                        path("/", "Prefix", "web", 80),
                        path("/x", "Exact", "api", 80),
                        path("/x/y", "Prefix", "api", 80),
                    ],
                ),
                rule("", vec![path("/z", "Prefix", "web", 80)]),
            ]),
        ),
        ingress(
            "default",
            "b",
            Some(2),
            rules(vec![rule(
                "*.example",
                vec![path("/", "Prefix", "api", 80)],
            )]),
        ),
    ]));
    let options = CompileOptions::default();
    let table = run(&inputs).table;
    for host in ["h.example", "g.example", "other", "a.b.example"] {
        for path in ["/", "/x", "/x/", "/x/y", "/x/yz", "/z", "/z/1", ""] {
            let e = explain(&inputs, &options, host, path);
            let expected = routed(&table, host, path);
            let got = match &e.answer {
                Answer::Route { backend, .. } | Answer::DefaultBackend { backend, .. } => {
                    Some(backend.service.to_string())
                }
                Answer::NotFound => None,
            };
            assert_eq!(got, expected, "{host}{path}\n{e}");
            let chosen = selected(&e).len();
            let routed_by_rule = matches!(e.answer, Answer::Route { .. });
            assert_eq!(chosen, usize::from(routed_by_rule), "{host}{path}\n{e}");
        }
    }
}

/// #33: `rewrite-target` is part of what explain says about the answering rule (it is kept
/// beside the policy, and was shown as "policy: none").
#[test]
fn rewrite_target_is_explained() {
    let annotations = json!({
        "kubernetes.io/ingress.class": "sluice",
        "nginx.ingress.kubernetes.io/rewrite-target": "/$2",
    });
    let inputs = with_backends(inputs(vec![raw_ingress(
        "default",
        "api",
        Some(1),
        annotations,
        rules(vec![rule(
            "shop.example",
            vec![path("/api(/|$)(.*)", "ImplementationSpecific", "api", 80)],
        )]),
    )]));
    let text = explain(
        &inputs,
        &CompileOptions::default(),
        "shop.example",
        "/api/orders",
    )
    .to_string();
    assert!(text.contains("answer:  Ingress default/api"), "{text}");
    assert!(
        text.contains("path sent upstream rewritten to /$2"),
        "{text}"
    );
    assert!(!text.contains("policy:  none"), "{text}");
}

/// #33: with its TLS Secret missing, a TLS host is still served over HTTPS (with the
/// default certificate) and plain HTTP to it is still redirected, as in ingress-nginx; the
/// explanation's policy and its problem say the same (the problem no longer claims plain
/// HTTP only).
#[test]
fn a_missing_tls_secret_is_explained_without_contradiction() {
    let mut spec = rules(vec![rule(
        "secure.example",
        vec![path("/", "Prefix", "api", 80)],
    )]);
    spec["tls"] = json!([{"hosts": ["secure.example"], "secretName": "gone"}]);
    let inputs = with_backends(inputs(vec![ingress("default", "secure", Some(1), spec)]));
    let e = explain(&inputs, &CompileOptions::default(), "secure.example", "/");
    let text = e.to_string();
    assert!(
        text.contains("plain HTTP redirected to HTTPS (308)"),
        "{text}"
    );
    assert!(
        text.contains("spec.tls[0].secretName: Secret default/gone not found"),
        "{text}"
    );
    assert!(
        text.contains("served over HTTPS with the default certificate"),
        "{text}"
    );
    assert!(!text.contains("plain HTTP only"), "{text}");
}

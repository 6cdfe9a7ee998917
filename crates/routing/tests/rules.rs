//! Table-driven tests of every matching, selection and diagnostic rule, through `compile`.

mod common;

use std::sync::Arc;

use common::*;
use serde_json::json;
use sluice_routing::{
    CompileOptions, Inputs, ObjectRef, PortRef, Reason, RouteTable, ServiceRef, compile,
};

fn table_of(specs: Vec<serde_json::Value>) -> RouteTable {
    let ingresses = specs
        .into_iter()
        .enumerate()
        .map(|(i, spec)| ingress("ns", &format!("ing{i}"), Some(i as u32), spec))
        .collect();
    run(&inputs(ingresses)).table
}

fn check(table: &RouteTable, cases: &[(&str, &str, Option<&str>)]) {
    for (host, path, want) in cases {
        assert_eq!(
            routed(table, host, path).as_deref(),
            *want,
            "host {host:?} path {path:?}"
        );
    }
}

#[test]
fn hosts_exact_wildcard_case_port_trailing_dot() {
    let table = table_of(vec![rules(vec![
        rule("foo.example.com", vec![path("/", "Prefix", "exact", 80)]),
        rule("*.example.com", vec![path("/", "Prefix", "wild", 80)]),
        rule("", vec![path("/", "Prefix", "any", 80)]),
    ])]);
    check(
        &table,
        &[
            ("foo.example.com", "/", Some("ns/exact:80")),
            ("FOO.Example.COM", "/x", Some("ns/exact:80")),
            ("foo.example.com:8080", "/", Some("ns/exact:80")),
            ("foo.example.com.", "/", Some("ns/exact:80")),
            ("Foo.Example.Com.:443", "/", Some("ns/exact:80")),
            ("bar.example.com", "/", Some("ns/wild:80")),
            ("BAR.example.com:80", "/", Some("ns/wild:80")),
            ("bar.example.com.", "/", Some("ns/wild:80")),
            // A wildcard covers exactly one label.
            ("a.b.example.com", "/", Some("ns/any:80")),
            ("example.com", "/", Some("ns/any:80")),
            (".example.com", "/", Some("ns/any:80")),
            ("other.org", "/", Some("ns/any:80")),
            ("[::1]:8080", "/", Some("ns/any:80")),
            ("[::1]", "/", Some("ns/any:80")),
            ("10.0.0.1:80", "/", Some("ns/any:80")),
            ("", "/", Some("ns/any:80")),
        ],
    );
}

#[test]
fn rule_hosts_are_case_and_dot_insensitive() {
    let table = table_of(vec![rules(vec![
        rule("Foo.Example.COM.", vec![path("/", "Prefix", "a", 80)]),
        rule("*.Wild.Org", vec![path("/", "Prefix", "b", 80)]),
    ])]);
    check(
        &table,
        &[
            ("foo.example.com", "/", Some("ns/a:80")),
            ("x.wild.org", "/", Some("ns/b:80")),
            ("wild.org", "/", None),
        ],
    );
}

#[test]
fn matched_host_owns_request_no_fallthrough() {
    let mut spec = rules(vec![
        rule("foo.example.com", vec![path("/api", "Prefix", "api", 80)]),
        rule("*.example.com", vec![path("/wild", "Prefix", "wild", 80)]),
        rule("", vec![path("/", "Prefix", "any", 80)]),
        // Names a host, but has no paths: still owns that host's requests.
        json!({"host": "empty.example.com"}),
    ]);
    spec["defaultBackend"] = svc_backend("default", 80);
    let table = table_of(vec![spec]);
    check(
        &table,
        &[
            ("foo.example.com", "/api/x", Some("ns/api:80")),
            // Exact host matched but no path: default backend, not wildcard nor catch-all.
            ("foo.example.com", "/wild", Some("ns/default:80")),
            ("foo.example.com", "/", Some("ns/default:80")),
            ("bar.example.com", "/wild", Some("ns/wild:80")),
            // Wildcard matched but no path: default backend, not catch-all.
            ("bar.example.com", "/", Some("ns/default:80")),
            ("empty.example.com", "/", Some("ns/default:80")),
            ("other.org", "/anything", Some("ns/any:80")),
        ],
    );
    assert_eq!(
        table.hosts(),
        vec!["", "*.example.com", "empty.example.com", "foo.example.com"]
    );
}

#[test]
fn no_match_and_no_default_is_none() {
    let table = table_of(vec![rules(vec![rule(
        "foo.example.com",
        vec![path("/api", "Prefix", "api", 80)],
    )])]);
    check(
        &table,
        &[
            ("foo.example.com", "/", None),
            ("bar.example.com", "/api", None),
        ],
    );
    assert!(RouteTable::empty().route_backend("x", "/").is_none());
    assert!(RouteTable::empty().backends().is_empty());
}

#[test]
fn exact_and_prefix_paths() {
    let table = table_of(vec![rules(vec![rule(
        "h",
        vec![
            path("/exact", "Exact", "exact", 80),
            path("/exact-slash/", "Exact", "exactslash", 80),
            path("/prefix", "Prefix", "prefix", 80),
            path("/trailing/", "Prefix", "trailing", 80),
            path("/impl", "ImplementationSpecific", "impl", 80),
            json!({"pathType": "Prefix", "backend": svc_backend("nopath", 80), "path": ""}),
        ],
    )])]);
    check(
        &table,
        &[
            ("h", "/exact", Some("ns/exact:80")),
            ("h", "/exact/", Some("ns/nopath:80")),
            ("h", "/Exact", Some("ns/nopath:80")),
            ("h", "/exact/x", Some("ns/nopath:80")),
            ("h", "/exact-slash/", Some("ns/exactslash:80")),
            ("h", "/exact-slash", Some("ns/nopath:80")),
            ("h", "/prefix", Some("ns/prefix:80")),
            ("h", "/prefix/", Some("ns/prefix:80")),
            ("h", "/prefix/a/b", Some("ns/prefix:80")),
            ("h", "/prefixes", Some("ns/nopath:80")),
            ("h", "/Prefix", Some("ns/nopath:80")),
            ("h", "/trailing", Some("ns/trailing:80")),
            ("h", "/trailing/", Some("ns/trailing:80")),
            ("h", "/trailing/x", Some("ns/trailing:80")),
            ("h", "/trailingx", Some("ns/nopath:80")),
            ("h", "/impl/x", Some("ns/impl:80")),
            // ImplementationSpecific: nginx's `location /impl`, a string prefix
            // (ingress-nginx docs, "Ingress Path Matching").
            ("h", "/implx", Some("ns/impl:80")),
            ("h", "/imp", Some("ns/nopath:80")),
            // An empty path in the rule means "/"; an empty request path counts as "/".
            ("h", "/", Some("ns/nopath:80")),
            ("h", "", Some("ns/nopath:80")),
        ],
    );
}

#[test]
fn slash_prefix_catches_everything() {
    let table = table_of(vec![rules(vec![rule(
        "h",
        vec![path("/", "Prefix", "root", 80)],
    )])]);
    for p in ["/", "/a", "/a/b/c/", "//", "/%2F", ""] {
        assert_eq!(routed(&table, "h", p).as_deref(), Some("ns/root:80"), "{p}");
    }
    // Not an absolute path (e.g. `OPTIONS *`): no rule matches.
    assert_eq!(routed(&table, "h", "*"), None);
}

#[test]
fn longest_wins_and_exact_beats_prefix() {
    let table = table_of(vec![rules(vec![rule(
        "h",
        vec![
            path("/", "Prefix", "root", 80),
            path("/a", "Prefix", "a", 80),
            path("/a/b", "Prefix", "ab", 80),
            path("/a/b", "Exact", "ab-exact", 80),
            path("/a/b/c/", "Prefix", "abc", 80),
            path("/a/b/c", "Exact", "abc-exact", 80),
            path("/x/", "Prefix", "x-prefix", 80),
            path("/x", "Exact", "x-exact", 80),
        ],
    )])]);
    check(
        &table,
        &[
            ("h", "/", Some("ns/root:80")),
            ("h", "/ab", Some("ns/root:80")),
            ("h", "/a", Some("ns/a:80")),
            ("h", "/a/", Some("ns/a:80")),
            ("h", "/a/bc", Some("ns/a:80")),
            ("h", "/a/b", Some("ns/ab-exact:80")),
            ("h", "/a/b/", Some("ns/ab:80")),
            ("h", "/a/b/x", Some("ns/ab:80")),
            ("h", "/a/b/c", Some("ns/abc-exact:80")),
            ("h", "/a/b/c/", Some("ns/abc:80")),
            ("h", "/a/b/c/d", Some("ns/abc:80")),
            // Prefix "/x/" counts as "/x": equal length, Exact wins.
            ("h", "/x", Some("ns/x-exact:80")),
            ("h", "/x/", Some("ns/x-prefix:80")),
        ],
    );
}

#[test]
fn paths_merge_across_ingresses() {
    let table = table_of(vec![
        rules(vec![rule("h", vec![path("/a", "Prefix", "one", 80)])]),
        rules(vec![rule("h", vec![path("/a/b", "Prefix", "two", 80)])]),
        rules(vec![rule("H.", vec![path("/a/b", "Exact", "three", 80)])]),
    ]);
    check(
        &table,
        &[
            ("h", "/a", Some("ns/one:80")),
            ("h", "/a/b/c", Some("ns/two:80")),
            ("h", "/a/b", Some("ns/three:80")),
        ],
    );
}

#[test]
fn conflicts_go_to_the_oldest() {
    let spec = |svc: &str| rules(vec![rule("h", vec![path("/p", "Prefix", svc, 80)])]);
    // (ns, name, age, svc) in input order; expected winner svc and loser names.
    type Ing<'a> = (&'a str, &'a str, Option<u32>, &'a str);
    let cases: &[(&[Ing], &str, &[&str])] = &[
        (
            &[("ns", "young", Some(5), "y"), ("ns", "old", Some(1), "o")],
            "o",
            &["young"],
        ),
        (
            &[("ns", "old", Some(1), "o"), ("ns", "young", Some(5), "y")],
            "o",
            &["young"],
        ),
        // Missing creationTimestamp counts as newest.
        (
            &[("ns", "none", None, "n"), ("ns", "dated", Some(50), "d")],
            "d",
            &["none"],
        ),
        // Equal age: namespace, then name.
        (
            &[("b", "x", Some(1), "b"), ("a", "x", Some(1), "a")],
            "a",
            &["x"],
        ),
        (
            &[("ns", "z", Some(1), "z"), ("ns", "m", Some(1), "m")],
            "m",
            &["z"],
        ),
        (
            &[("ns", "z", None, "z"), ("ns", "m", None, "m")],
            "m",
            &["z"],
        ),
        (
            &[
                ("ns", "c", Some(3), "c"),
                ("ns", "b", Some(2), "b"),
                ("ns", "a", Some(9), "a"),
            ],
            "b",
            &["a", "c"],
        ),
    ];
    for (ings, winner, losers) in cases {
        let mut inp = inputs(
            ings.iter()
                .map(|(ns, name, age, svc)| ingress(ns, name, *age, spec(svc)))
                .collect(),
        );
        for (ns, _, _, svc) in ings.iter() {
            inp.services.push(service(ns, svc, &[(None, 80)]));
        }
        let out = run(&inp);
        let got = out
            .table
            .route_backend("h", "/p/q")
            .map(|b| b.service.name.clone());
        assert_eq!(got.as_deref(), Some(*winner), "{ings:?}");
        let conflicts = find(&out.diagnostics, "ConflictLost");
        let mut names: Vec<&str> = conflicts.iter().map(|d| d.object.name.as_str()).collect();
        names.sort();
        assert_eq!(names, *losers, "{ings:?}");
        let winner_ref = ings.iter().find(|i| i.3 == *winner).unwrap();
        for d in conflicts {
            assert_eq!(d.field, "spec.rules[0].http.paths[0]");
            assert_eq!(
                conflict_winner(d),
                format!("Ingress {}/{}", winner_ref.0, winner_ref.1)
            );
            assert!(d.message.contains(&d.object.to_string()), "{}", d.message);
        }
        assert_eq!(out.diagnostics.len(), losers.len(), "{:?}", out.diagnostics);
    }
}

#[test]
fn conflict_is_same_host_path_and_effective_type() {
    let table_and_diags = |a: serde_json::Value, b: serde_json::Value| {
        let out = run(&inputs(vec![
            ingress("ns", "old", Some(1), rules(vec![rule("h", vec![a])])),
            ingress("ns", "new", Some(2), rules(vec![rule("h", vec![b])])),
        ]));
        let conflicts = find(&out.diagnostics, "ConflictLost").len();
        (out.table, conflicts)
    };
    // Prefix "/p" and "/p/" are the same rule.
    let (t, n) = table_and_diags(
        path("/p", "Prefix", "old", 80),
        path("/p/", "Prefix", "new", 80),
    );
    assert_eq!(
        (routed(&t, "h", "/p").as_deref(), n),
        (Some("ns/old:80"), 1)
    );
    // ImplementationSpecific "/p" is a string prefix (nginx `location /p`), not Prefix
    // "/p" (`location /p/`): two rules, the longer location wins.
    let (t, n) = table_and_diags(
        path("/p", "Prefix", "old", 80),
        path("/p", "ImplementationSpecific", "new", 80),
    );
    assert_eq!(n, 0);
    assert_eq!(routed(&t, "h", "/p/x").as_deref(), Some("ns/old:80"));
    assert_eq!(routed(&t, "h", "/px").as_deref(), Some("ns/new:80"));
    // Exact and Prefix of the same path are distinct rules: no conflict.
    let (t, n) = table_and_diags(
        path("/p", "Prefix", "old", 80),
        path("/p", "Exact", "new", 80),
    );
    assert_eq!(n, 0);
    assert_eq!(routed(&t, "h", "/p").as_deref(), Some("ns/new:80"));
    assert_eq!(routed(&t, "h", "/p/x").as_deref(), Some("ns/old:80"));
    // Exact "/p/" and Exact "/p" are distinct.
    let (_, n) = table_and_diags(
        path("/p/", "Exact", "old", 80),
        path("/p", "Exact", "new", 80),
    );
    assert_eq!(n, 0);
    // Same host in another case is the same host.
    let out = run(&inputs(vec![
        ingress(
            "ns",
            "old",
            Some(1),
            rules(vec![rule("h.io", vec![path("/", "Prefix", "o", 80)])]),
        ),
        ingress(
            "ns",
            "new",
            Some(2),
            rules(vec![rule("H.IO.", vec![path("/", "Prefix", "n", 80)])]),
        ),
    ]));
    assert_eq!(find(&out.diagnostics, "ConflictLost").len(), 1);
    // An invalid (skipped) path claims nothing: the newer valid one is used, no conflict.
    let out = run(&inputs(vec![
        ingress(
            "ns",
            "old",
            Some(1),
            rules(vec![rule(
                "h",
                vec![
                    json!({"path": "/p", "pathType": "Prefix", "backend": {"resource": {"kind": "Bucket", "name": "b"}}}),
                ],
            )]),
        ),
        ingress(
            "ns",
            "new",
            Some(2),
            rules(vec![rule("h", vec![path("/p", "Prefix", "n", 80)])]),
        ),
    ]));
    assert_eq!(routed(&out.table, "h", "/p").as_deref(), Some("ns/n:80"));
    assert!(find(&out.diagnostics, "ConflictLost").is_empty());
}

#[test]
fn default_backend_fallback_and_conflict() {
    let with_default = |svc: &str| {
        let mut s = rules(vec![rule("h", vec![path("/a", "Exact", "a", 80)])]);
        s["defaultBackend"] = svc_backend(svc, 80);
        s
    };
    let services = || {
        ["a", "d", "d-new", "d-old"]
            .map(|n| service("ns", n, &[(None, 80)]))
            .to_vec()
    };
    let mut inp = inputs(vec![
        ingress("ns", "newer", Some(9), with_default("d-new")),
        ingress("ns", "older", Some(2), with_default("d-old")),
    ]);
    inp.services = services().into();
    let out = run(&inp);
    check(
        &out.table,
        &[
            ("h", "/a", Some("ns/a:80")),
            ("h", "/b", Some("ns/d-old:80")),
            ("other", "/", Some("ns/d-old:80")),
        ],
    );
    assert_eq!(
        out.table.default_backend().map(|b| b.service.name.as_str()),
        Some("d-old")
    );
    let conflicts = find(&out.diagnostics, "ConflictLost");
    // The rule "/a" also conflicts; look at the default backend one.
    let d = conflicts
        .iter()
        .find(|d| d.field == "spec.defaultBackend")
        .expect("defaultBackend conflict");
    assert_eq!(d.object, ObjectRef::ingress("ns", "newer"));
    assert_eq!(conflict_winner(d), "Ingress ns/older");

    // An invalid older default backend does not block a valid newer one.
    let mut bad = rules(vec![]);
    bad["defaultBackend"] = json!({"service": {"name": "", "port": {"number": 80}}});
    let mut inp = inputs(vec![
        ingress("ns", "older", Some(1), bad),
        ingress("ns", "newer", Some(2), with_default("d")),
    ]);
    inp.services = services().into();
    let out = run(&inp);
    assert_eq!(routed(&out.table, "x", "/").as_deref(), Some("ns/d:80"));
    assert_eq!(
        diag_summary(&out.diagnostics),
        vec![(
            "older".to_owned(),
            "spec.defaultBackend.service.name".to_owned(),
            "InvalidBackend"
        )]
    );
}

#[test]
fn class_selection() {
    let spec = |svc: &str, class: Option<&str>| {
        let mut s = rules(vec![rule(
            &format!("{svc}.io"),
            vec![path("/", "Prefix", svc, 80)],
        )]);
        if let Some(c) = class {
            s["ingressClassName"] = json!(c);
        }
        s
    };
    let legacy = |v: &str| json!({"kubernetes.io/ingress.class": v});
    // (className, legacy annotation, default class is ours, other controller's class is default, ours?)
    type Case<'a> = (Option<&'a str>, Option<&'a str>, bool, bool, bool);
    let cases: &[Case] = &[
        (Some("sluice"), None, false, false, true),
        (Some("sluice-2"), None, false, false, true),
        (Some("nginx"), None, false, false, false),
        (Some("nginx"), None, true, false, false),
        (Some("unknown"), None, true, false, false),
        (Some("sluice"), Some("nginx"), false, false, true),
        (None, Some("sluice"), false, false, true),
        (None, Some("nginx"), false, false, false),
        (None, Some("nginx"), true, false, false),
        (None, Some(""), true, false, false),
        (Some("nginx"), Some("sluice"), false, false, true),
        (None, None, false, false, false),
        (None, None, true, false, true),
        (None, None, false, true, false),
        (Some(""), None, true, false, true),
    ];
    for (i, (class_name, annotation, our_default, their_default, ours)) in cases.iter().enumerate()
    {
        let annotations = annotation.map(legacy).unwrap_or(json!({}));
        // Also broken, to check that foreign Ingresses yield no diagnostics.
        let mut s = spec("svc", *class_name);
        s["rules"][0]["http"]["paths"][0]["pathType"] = json!("Bogus");
        s["rules"]
            .as_array_mut()
            .unwrap()
            .push(rule("good.io", vec![path("/", "Prefix", "svc", 80)]));
        let ing = raw_ingress("ns", "ing", Some(1), annotations, s);
        let inp = Inputs {
            ingresses: vec![ing].into(),
            ingress_classes: vec![
                class("sluice", CONTROLLER, false),
                class("sluice-2", CONTROLLER, *our_default),
                class("nginx", "k8s.io/ingress-nginx", *their_default),
            ]
            .into(),
            services: vec![service("ns", "svc", &[(None, 80)])].into(),
            ..Inputs::default()
        };
        let out = run(&inp);
        assert_eq!(!out.ours.is_empty(), *ours, "case {i}");
        assert_eq!(
            out.table.route_backend("good.io", "/").is_some(),
            *ours,
            "case {i}"
        );
        assert_eq!(out.diagnostics.len(), usize::from(*ours), "case {i}");
    }
}

#[test]
fn options_controller_class_and_namespace() {
    let spec = |host: &str| rules(vec![rule(host, vec![path("/", "Prefix", "s", 80)])]);
    let inp = Inputs {
        ingresses: vec![
            raw_ingress("a", "by-class", Some(1), json!({}), {
                let mut s = spec("one.io");
                s["ingressClassName"] = json!("mine");
                s
            }),
            raw_ingress(
                "b",
                "by-annotation",
                Some(1),
                json!({"kubernetes.io/ingress.class": "custom"}),
                spec("two.io"),
            ),
            ingress("a", "default-named", Some(1), spec("three.io")),
        ]
        .into(),
        ingress_classes: vec![class("mine", "example.com/custom", false), our_class()].into(),
        ..Inputs::default()
    };
    let opts = CompileOptions {
        controller_name: "example.com/custom".into(),
        ingress_class: "custom".into(),
        watch_namespace: None,
        ..CompileOptions::default()
    };
    let out = compile(&inp, &opts);
    assert_eq!(
        out.ours.iter().cloned().collect::<Vec<_>>(),
        vec![
            ObjectRef::ingress("a", "by-class"),
            ObjectRef::ingress("b", "by-annotation")
        ]
    );
    let out = compile(
        &inp,
        &CompileOptions {
            watch_namespace: Some("a".into()),
            ..opts
        },
    );
    assert_eq!(
        out.ours.iter().cloned().collect::<Vec<_>>(),
        vec![ObjectRef::ingress("a", "by-class")]
    );
    assert!(out.table.route_backend("two.io", "/").is_none());
    let defaults = CompileOptions::default();
    assert_eq!(defaults.controller_name, "sluice.dev/ingress-controller");
    assert_eq!(defaults.ingress_class, "sluice");
    assert_eq!(defaults.watch_namespace, None);
    let out = compile(&inp, &defaults);
    assert_eq!(
        out.ours.iter().cloned().collect::<Vec<_>>(),
        vec![ObjectRef::ingress("a", "default-named")]
    );
}

#[test]
fn watch_namespace_ignores_other_namespaces_services_and_secrets() {
    let mut s = rules(vec![rule("h", vec![path("/", "Prefix", "svc", 80)])]);
    s["tls"] = json!([{"hosts": ["h"], "secretName": "cert"}]);
    let mut inp = inputs(vec![ingress("a", "ing", Some(1), s)]);
    inp.services.push(service("a", "svc", &[(None, 80)]));
    inp.services.push(service("b", "svc", &[(None, 80)]));
    inp.secrets
        .push(tls_secret("b", "cert", CERT_PEM, PKCS8_PEM));
    let opts = CompileOptions {
        watch_namespace: Some("a".into()),
        ..CompileOptions::default()
    };
    let out = compile(&inp, &opts);
    assert_eq!(routed(&out.table, "h", "/").as_deref(), Some("a/svc:80"));
    assert!(out.table.certificate("h").is_none());
    assert_eq!(
        diag_summary(&out.diagnostics),
        vec![(
            "ing".into(),
            "spec.tls[0].secretName".into(),
            "TlsSecretMissing"
        )]
    );
}

#[test]
fn ports_by_number_and_name() {
    let mut inp = inputs(vec![ingress(
        "ns",
        "ing",
        Some(1),
        rules(vec![rule(
            "h",
            vec![
                path("/num", "Prefix", "web", 8080),
                path_named("/name", "Prefix", "web", "metrics"),
                path("/bad-num", "Prefix", "web", 9999),
                path_named("/bad-name", "Prefix", "web", "nope"),
                path("/missing", "Prefix", "ghost", 80),
            ],
        )]),
    )]);
    inp.services.push(service(
        "ns",
        "web",
        &[(Some("http"), 8080), (Some("metrics"), 9090)],
    ));
    inp.endpoint_slices.push(slice(
        "ns",
        "web-1",
        "web",
        &[(Some("http"), 80), (Some("metrics"), 9091)],
        &[(&["10.0.0.1"], Some(true))],
    ));
    let out = run(&inp);
    let t = &out.table;
    let ep = |p: &str| {
        t.route_backend("h", p).map(|b| {
            (
                b.service.port.clone(),
                b.endpoints
                    .iter()
                    .map(|e| e.to_string())
                    .collect::<Vec<_>>(),
            )
        })
    };
    assert_eq!(
        ep("/num"),
        Some((PortRef::Number(8080), vec!["10.0.0.1:80".into()]))
    );
    assert_eq!(
        ep("/name"),
        Some((
            PortRef::Name("metrics".into()),
            vec!["10.0.0.1:9091".into()]
        ))
    );
    // Unknown port or Service: still routed, no endpoints (503), with a diagnostic.
    assert_eq!(ep("/bad-num"), Some((PortRef::Number(9999), vec![])));
    assert_eq!(
        ep("/bad-name"),
        Some((PortRef::Name("nope".into()), vec![]))
    );
    assert_eq!(ep("/missing"), Some((PortRef::Number(80), vec![])));
    assert_eq!(
        diag_summary(&out.diagnostics),
        vec![
            (
                "ing".into(),
                "spec.rules[0].http.paths[2].backend.service.port.number".into(),
                "PortNotFound"
            ),
            (
                "ing".into(),
                "spec.rules[0].http.paths[3].backend.service.port.name".into(),
                "PortNotFound"
            ),
            (
                "ing".into(),
                "spec.rules[0].http.paths[4].backend.service.name".into(),
                "ServiceNotFound"
            ),
        ]
    );
    let msg = &out.diagnostics[1].message;
    assert!(
        msg.contains("Ingress ns/ing") && msg.contains("port.name") && msg.contains("nope"),
        "{msg}"
    );
}

#[test]
fn endpoint_slices_ready_filtering_and_port_names() {
    let mut inp = inputs(vec![ingress(
        "ns",
        "ing",
        Some(1),
        rules(vec![rule(
            "h",
            vec![
                path("/single", "Prefix", "single", 80),
                path_named("/http", "Prefix", "multi", "http"),
                path_named("/admin", "Prefix", "multi", "admin"),
            ],
        )]),
    )]);
    inp.services.push(service("ns", "single", &[(None, 80)]));
    inp.services.push(service(
        "ns",
        "multi",
        &[(Some("http"), 80), (Some("admin"), 81)],
    ));
    // Unnamed single port: the slice's port name is absent or "".
    inp.endpoint_slices.push(slice(
        "ns",
        "single-a",
        "single",
        &[(None, 8080)],
        &[
            (&["10.0.0.2", "10.0.0.1"], Some(true)),
            (&["10.0.0.3"], None),
            (&["10.0.0.4"], Some(false)),
            (&["not-an-ip"], Some(true)),
        ],
    ));
    inp.endpoint_slices.push(slice(
        "ns",
        "single-b",
        "single",
        &[(Some(""), 8080)],
        &[(&["fd00::1", "10.0.0.1"], Some(true))],
    ));
    inp.endpoint_slices.push(slice(
        "ns",
        "multi-a",
        "multi",
        &[(Some("http"), 8080), (Some("admin"), 9000)],
        &[(&["10.1.0.1"], Some(true)), (&["10.1.0.2"], Some(false))],
    ));
    // Wrong namespace, and an unlabelled slice: ignored.
    inp.endpoint_slices.push(slice(
        "other",
        "x",
        "multi",
        &[(Some("http"), 1)],
        &[(&["9.9.9.9"], None)],
    ));
    let mut unlabelled = (*slice(
        "ns",
        "y",
        "multi",
        &[(Some("http"), 1)],
        &[(&["9.9.9.8"], None)],
    ))
    .clone();
    unlabelled.metadata.labels = None;
    inp.endpoint_slices.push(Arc::new(unlabelled));
    // Endpoints are ignored once slices exist.
    inp.endpoints.push(endpoints(
        "ns",
        "multi",
        json!([{"addresses": [{"ip": "8.8.8.8"}], "ports": [{"name": "http", "port": 1}]}]),
    ));
    let out = run(&inp);
    assert!(out.diagnostics.is_empty(), "{:?}", out.diagnostics);
    let eps = |p: &str| -> Vec<String> {
        out.table
            .route_backend("h", p)
            .unwrap()
            .endpoints
            .iter()
            .map(|e| e.to_string())
            .collect()
    };
    assert_eq!(
        eps("/single"),
        vec![
            "10.0.0.1:8080",
            "10.0.0.2:8080",
            "10.0.0.3:8080",
            "[fd00::1]:8080"
        ]
    );
    assert_eq!(eps("/http"), vec!["10.1.0.1:8080"]);
    assert_eq!(eps("/admin"), vec!["10.1.0.1:9000"]);
}

#[test]
fn endpoints_fallback_excludes_not_ready() {
    let mut inp = inputs(vec![ingress(
        "ns",
        "ing",
        Some(1),
        rules(vec![rule(
            "h",
            vec![
                path_named("/web", "Prefix", "web", "web"),
                path("/plain", "Prefix", "plain", 80),
                path("/none", "Prefix", "none", 80),
            ],
        )]),
    )]);
    inp.services.push(service(
        "ns",
        "web",
        &[(Some("web"), 80), (Some("other"), 81)],
    ));
    inp.services.push(service("ns", "plain", &[(None, 80)]));
    inp.services.push(service("ns", "none", &[(None, 80)]));
    inp.endpoints.push(endpoints(
        "ns",
        "web",
        json!([
            {"addresses": [{"ip": "10.0.0.2"}, {"ip": "fd00::2"}],
             "notReadyAddresses": [{"ip": "10.0.0.9"}],
             "ports": [{"name": "other", "port": 7000}, {"name": "web", "port": 8000}]},
            {"addresses": [{"ip": "10.0.0.1"}, {"ip": "10.0.0.2"}],
             "ports": [{"name": "web", "port": 8001}]},
            {"addresses": [{"ip": "10.0.0.3"}],
             "ports": [{"name": "other", "port": 7000}]},
            {"notReadyAddresses": [{"ip": "10.0.0.4"}],
             "ports": [{"name": "web", "port": 8000}]}
        ]),
    ));
    inp.endpoints.push(endpoints(
        "ns",
        "plain",
        json!([{"addresses": [{"ip": "10.0.1.1"}], "ports": [{"port": 8080}]}]),
    ));
    let out = run(&inp);
    assert!(out.diagnostics.is_empty());
    let eps = |p: &str| -> Vec<String> {
        out.table
            .route_backend("h", p)
            .unwrap()
            .endpoints
            .iter()
            .map(|e| e.to_string())
            .collect()
    };
    assert_eq!(
        eps("/web"),
        vec![
            "10.0.0.1:8001",
            "10.0.0.2:8000",
            "10.0.0.2:8001",
            "[fd00::2]:8000"
        ]
    );
    assert_eq!(eps("/plain"), vec!["10.0.1.1:8080"]);
    assert!(eps("/none").is_empty());
}

#[test]
fn identical_service_refs_share_one_backend() {
    let mut inp = inputs(vec![
        ingress(
            "ns",
            "a",
            Some(1),
            rules(vec![rule(
                "a",
                vec![path("/", "Prefix", "s", 80), path("/x", "Prefix", "t", 80)],
            )]),
        ),
        ingress(
            "ns",
            "b",
            Some(2),
            rules(vec![rule(
                "b",
                vec![
                    path("/", "Prefix", "s", 80),
                    path_named("/n", "Prefix", "s", "http"),
                ],
            )]),
        ),
        ingress(
            "other",
            "c",
            Some(3),
            rules(vec![rule("c", vec![path("/", "Prefix", "s", 80)])]),
        ),
    ]);
    inp.services.push(service("ns", "s", &[(Some("http"), 80)]));
    let out = run(&inp);
    let t = &out.table;
    let a = t.route_backend("a", "/").unwrap();
    let b = t.route_backend("b", "/").unwrap();
    assert!(Arc::ptr_eq(a, b));
    assert!(!Arc::ptr_eq(a, t.route_backend("b", "/n").unwrap()));
    assert!(!Arc::ptr_eq(a, t.route_backend("c", "/").unwrap()));
    let backends = t.backends();
    assert_eq!(backends.len(), 4);
    for (i, backend) in backends.iter().enumerate() {
        assert_eq!(backend.id, i);
    }
    let names: Vec<String> = backends.iter().map(|b| b.service.to_string()).collect();
    assert_eq!(names, vec!["ns/s:80", "ns/s:http", "ns/t:80", "other/s:80"]);
    assert!(Arc::ptr_eq(&backends[a.id], a));
}

#[test]
fn unsupported_and_invalid_backends() {
    let mut inp = inputs(vec![ingress(
        "ns",
        "ing",
        Some(1),
        rules(vec![rule(
            "h",
            vec![
                path("/", "Prefix", "fallback", 80),
                json!({"path": "/res", "pathType": "Prefix", "backend": {"resource": {"apiGroup": "k8s.example.com", "kind": "Bucket", "name": "b"}}}),
                path("/ext", "Prefix", "external", 80),
                json!({"path": "/noname", "pathType": "Prefix", "backend": {"service": {"name": "", "port": {"number": 80}}}}),
                json!({"path": "/noport", "pathType": "Prefix", "backend": {"service": {"name": "fallback"}}}),
                json!({"path": "/both", "pathType": "Prefix", "backend": {"service": {"name": "fallback", "port": {"number": 80, "name": "http"}}}}),
                json!({"path": "/nothing", "pathType": "Prefix", "backend": {}}),
                json!({"path": "/emptyport", "pathType": "Prefix", "backend": {"service": {"name": "fallback", "port": {}}}}),
            ],
        )]),
    )]);
    inp.services.push(service("ns", "fallback", &[(None, 80)]));
    let mut ext = (*service("ns", "external", &[(None, 80)])).clone();
    ext.spec.as_mut().unwrap().type_ = Some("ExternalName".into());
    ext.spec.as_mut().unwrap().external_name = Some("example.org".into());
    inp.services.push(Arc::new(ext));
    let out = run(&inp);
    for p in [
        "/res",
        "/ext",
        "/noname",
        "/noport",
        "/both",
        "/nothing",
        "/emptyport",
    ] {
        assert_eq!(
            routed(&out.table, "h", p).as_deref(),
            Some("ns/fallback:80"),
            "{p}"
        );
    }
    let base = "spec.rules[0].http.paths";
    let want: Vec<(String, String, &str)> = vec![
        (format!("{base}[1].backend.resource"), "UnsupportedBackend"),
        (
            format!("{base}[2].backend.service.name"),
            "UnsupportedBackend",
        ),
        (format!("{base}[3].backend.service.name"), "InvalidBackend"),
        (format!("{base}[4].backend.service.port"), "InvalidBackend"),
        (format!("{base}[5].backend.service.port"), "InvalidBackend"),
        (format!("{base}[6].backend"), "InvalidBackend"),
        (format!("{base}[7].backend.service.port"), "InvalidBackend"),
    ]
    .into_iter()
    .map(|(f, r)| ("ing".to_owned(), f, r))
    .collect();
    assert_eq!(diag_summary(&out.diagnostics), want);
}

#[test]
fn invalid_hosts_and_paths_are_skipped_alone() {
    let spec = rules(vec![
        rule("bad host.com", vec![path("/", "Prefix", "s", 80)]),
        rule("10.0.0.1", vec![path("/", "Prefix", "s", 80)]),
        rule("a.*.example.com", vec![path("/", "Prefix", "s", 80)]),
        rule(
            "good.com",
            vec![
                path("relative", "Prefix", "s", 80),
                json!({"path": "/no-type", "backend": svc_backend("s", 80)}),
                path("/weird", "Regex", "s", 80),
                path("/a//b", "Prefix", "s", 80),
                path("/ok", "Exact", "ok", 80),
            ],
        ),
    ]);
    let mut inp = inputs(vec![
        ingress("ns", "bad", Some(1), spec),
        ingress(
            "ns",
            "fine",
            Some(2),
            rules(vec![rule("other.com", vec![path("/", "Prefix", "s", 80)])]),
        ),
    ]);
    inp.services.push(service("ns", "s", &[(None, 80)]));
    inp.services.push(service("ns", "ok", &[(None, 80)]));
    let out = run(&inp);
    assert_eq!(
        routed(&out.table, "good.com", "/ok").as_deref(),
        Some("ns/ok:80")
    );
    assert_eq!(routed(&out.table, "good.com", "/no-type"), None);
    assert_eq!(
        routed(&out.table, "other.com", "/").as_deref(),
        Some("ns/s:80")
    );
    assert_eq!(routed(&out.table, "10.0.0.1", "/"), None);
    let r = "spec.rules";
    let want: Vec<(String, String, &str)> = vec![
        (format!("{r}[0].host"), "InvalidHost"),
        (format!("{r}[1].host"), "InvalidHost"),
        (format!("{r}[2].host"), "InvalidHost"),
        (format!("{r}[3].http.paths[0].path"), "InvalidPath"),
        (format!("{r}[3].http.paths[1].pathType"), "InvalidPath"),
        (format!("{r}[3].http.paths[2].pathType"), "InvalidPath"),
        (format!("{r}[3].http.paths[3].path"), "InvalidPath"),
    ]
    .into_iter()
    .map(|(f, r)| ("bad".to_owned(), f, r))
    .collect();
    assert_eq!(diag_summary(&out.diagnostics), want);
    for d in &out.diagnostics {
        assert!(
            d.message.starts_with("Ingress ns/bad: spec."),
            "{}",
            d.message
        );
        assert!(d.message.contains(&d.field), "{}", d.message);
    }
    assert_eq!(
        out.ours.iter().cloned().collect::<Vec<_>>(),
        vec![
            ObjectRef::ingress("ns", "bad"),
            ObjectRef::ingress("ns", "fine")
        ]
    );
}

fn tls_spec(entries: serde_json::Value, hosts: &[&str]) -> serde_json::Value {
    let mut s = rules(
        hosts
            .iter()
            .map(|h| rule(h, vec![path("/", "Prefix", "s", 80)]))
            .collect(),
    );
    s["tls"] = entries;
    s
}

#[test]
fn tls_certificates_by_sni() {
    let mut inp = inputs(vec![ingress(
        "ns",
        "ing",
        Some(1),
        tls_spec(
            json!([
                {"hosts": ["www.example.com", "API.example.com"], "secretName": "exact"},
                {"hosts": ["*.example.com"], "secretName": "wild"},
                {"hosts": ["sni-only.example.com"]},
            ]),
            &["www.example.com"],
        ),
    )]);
    inp.services.push(service("ns", "s", &[(None, 80)]));
    inp.secrets
        .push(tls_secret("ns", "exact", CHAIN_PEM, PKCS8_PEM));
    inp.secrets
        .push(tls_secret("ns", "wild", CERT_PEM, SEC1_PEM));
    let out = run(&inp);
    assert!(out.diagnostics.is_empty(), "{:?}", out.diagnostics);
    let t = &out.table;
    let cert = |sni: &str| t.certificate(sni).map(|c| c.secret.name.clone());
    let cases = [
        ("www.example.com", Some("exact")),
        ("WWW.Example.com.", Some("exact")),
        ("api.example.com", Some("exact")),
        ("other.example.com", Some("wild")),
        ("sni-only.example.com", Some("wild")),
        ("a.b.example.com", None),
        ("example.com", None),
        ("unknown.org", None),
    ];
    for (sni, want) in cases {
        assert_eq!(cert(sni).as_deref(), want, "{sni}");
    }
    let exact = t.certificate("www.example.com").unwrap();
    assert_eq!(exact.cert_chain.len(), 2);
    assert_eq!(
        exact.cert_chain[0].as_ref(),
        &[0x30, 0x03, 0x02, 0x01, 0x01]
    );
    assert_eq!(exact.key.secret_der(), &[0x30, 0x03, 0x02, 0x01, 0x02]);
    assert!(matches!(
        exact.key,
        rustls_pki_types::PrivateKeyDer::Pkcs8(_)
    ));
    assert!(matches!(
        t.certificate("x.example.com").unwrap().key,
        rustls_pki_types::PrivateKeyDer::Sec1(_)
    ));
    // One Arc per Secret, listed once each.
    assert!(Arc::ptr_eq(
        exact,
        t.certificate("api.example.com").unwrap()
    ));
    let listed: Vec<String> = t.certificates().map(|c| c.secret.to_string()).collect();
    assert_eq!(listed, vec!["Secret ns/exact", "Secret ns/wild"]);
}

#[test]
fn tls_secret_problems() {
    let no_key = {
        let mut s = (*tls_secret("ns", "no-key", CERT_PEM, "")).clone();
        s.data.as_mut().unwrap().remove("tls.key");
        Arc::new(s)
    };
    let mut inp = inputs(vec![ingress(
        "ns",
        "ing",
        Some(1),
        tls_spec(
            json!([
                {"hosts": ["missing.io"], "secretName": "nope"},
                {"hosts": ["nokey.io"], "secretName": "no-key"},
                {"hosts": ["garbage.io"], "secretName": "garbage"},
                {"hosts": ["keyonly.io"], "secretName": "key-as-cert"},
                {"hosts": ["notder.io"], "secretName": "not-der"},
                {"hosts": ["rsa.io", "bad host", "1.2.3.4", ""], "secretName": "rsa"},
                {"hosts": ["other-ns.io"], "secretName": "elsewhere"},
            ]),
            &["missing.io", "nokey.io"],
        ),
    )]);
    inp.services.push(service("ns", "s", &[(None, 80)]));
    inp.secrets.push(no_key);
    inp.secrets
        .push(tls_secret("ns", "garbage", "hello", "world"));
    inp.secrets
        .push(tls_secret("ns", "key-as-cert", PKCS8_PEM, PKCS8_PEM));
    inp.secrets.push(tls_secret(
        "ns",
        "not-der",
        "-----BEGIN CERTIFICATE-----\naGVsbG8=\n-----END CERTIFICATE-----\n",
        PKCS8_PEM,
    ));
    inp.secrets
        .push(tls_secret("ns", "rsa", CERT_PEM, PKCS1_PEM));
    inp.secrets
        .push(tls_secret("other", "elsewhere", CERT_PEM, PKCS1_PEM));
    let out = run(&inp);
    let want: Vec<(String, String, &str)> = vec![
        ("spec.tls[0].secretName", "TlsSecretMissing"),
        ("spec.tls[1].secretName", "TlsSecretInvalid"),
        ("spec.tls[2].secretName", "TlsSecretInvalid"),
        ("spec.tls[3].secretName", "TlsSecretInvalid"),
        ("spec.tls[4].secretName", "TlsSecretInvalid"),
        ("spec.tls[5].hosts[1]", "InvalidHost"),
        ("spec.tls[5].hosts[2]", "InvalidHost"),
        ("spec.tls[5].hosts[3]", "InvalidHost"),
        ("spec.tls[6].secretName", "TlsSecretMissing"),
    ]
    .into_iter()
    .map(|(f, r)| ("ing".to_owned(), f.to_owned(), r))
    .collect();
    assert_eq!(diag_summary(&out.diagnostics), want);
    let t = &out.table;
    for sni in [
        "missing.io",
        "nokey.io",
        "garbage.io",
        "keyonly.io",
        "notder.io",
        "other-ns.io",
    ] {
        assert!(t.certificate(sni).is_none(), "{sni}");
    }
    assert!(matches!(
        t.certificate("rsa.io").unwrap().key,
        rustls_pki_types::PrivateKeyDer::Pkcs1(_)
    ));
    // Hosts whose Secret is broken are still routed (over HTTP).
    assert_eq!(routed(t, "missing.io", "/").as_deref(), Some("ns/s:80"));
    assert_eq!(routed(t, "nokey.io", "/").as_deref(), Some("ns/s:80"));
    let missing = &out.diagnostics[0].message;
    assert!(missing.contains("Secret ns/nope"), "{missing}");
}

#[test]
fn tls_string_data_and_conflicts() {
    let mut by_string = k8s_openapi::api::core::v1::Secret::default();
    by_string.metadata.namespace = Some("ns".into());
    by_string.metadata.name = Some("str".into());
    by_string.string_data = Some(
        [
            ("tls.crt".to_owned(), CERT_PEM.to_owned()),
            ("tls.key".to_owned(), PKCS8_PEM.to_owned()),
        ]
        .into(),
    );
    let mut inp = inputs(vec![
        ingress(
            "ns",
            "newer",
            Some(5),
            tls_spec(
                json!([{"hosts": ["h.io", "*.w.io"], "secretName": "new"}]),
                &[],
            ),
        ),
        ingress(
            "ns",
            "older",
            Some(1),
            tls_spec(
                json!([{"hosts": ["h.io", "*.W.io"], "secretName": "str"}]),
                &[],
            ),
        ),
        ingress(
            "ns",
            "same",
            Some(9),
            tls_spec(json!([{"hosts": ["h.io"], "secretName": "str"}]), &[]),
        ),
    ]);
    inp.secrets.push(Arc::new(by_string));
    inp.secrets
        .push(tls_secret("ns", "new", CERT_PEM, PKCS8_PEM));
    let out = run(&inp);
    assert_eq!(out.table.certificate("h.io").unwrap().secret.name, "str");
    assert_eq!(out.table.certificate("x.w.io").unwrap().secret.name, "str");
    // The same Secret for the same host is no conflict.
    let conflicts: Vec<_> = out
        .diagnostics
        .iter()
        .map(|d| (d.object.name.as_str(), d.field.as_str(), conflict_winner(d)))
        .collect();
    assert_eq!(
        conflicts,
        vec![
            (
                "newer",
                "spec.tls[0].hosts[0]",
                "Ingress ns/older".to_owned()
            ),
            (
                "newer",
                "spec.tls[0].hosts[1]",
                "Ingress ns/older".to_owned()
            ),
        ]
    );
    // Only certificates actually in use are listed.
    let listed: Vec<String> = out
        .table
        .certificates()
        .map(|c| c.secret.name.clone())
        .collect();
    assert_eq!(listed, vec!["str"]);
}

#[test]
fn input_order_does_not_matter() {
    let mut d1 = rules(vec![rule("h", vec![path("/", "Prefix", "a", 80)])]);
    d1["defaultBackend"] = svc_backend("a", 80);
    let mut d2 = tls_spec(json!([{"hosts": ["h"], "secretName": "c"}]), &["h", "*.h"]);
    d2["defaultBackend"] = svc_backend("b", 80);
    let ings = vec![
        ingress("ns", "one", None, d1),
        ingress("ns", "two", None, d2),
        ingress(
            "ns",
            "three",
            Some(3),
            rules(vec![rule(
                "h",
                vec![path("/", "Prefix", "c", 80), path("/x", "Exact", "c", 80)],
            )]),
        ),
        ingress(
            "ms",
            "four",
            Some(3),
            rules(vec![rule("h", vec![path("/x", "Exact", "d", 80)])]),
        ),
    ];
    let mut inp = inputs(ings);
    inp.services = vec![
        service("ns", "a", &[(None, 80)]),
        service("ns", "b", &[(None, 80)]),
    ]
    .into();
    inp.secrets = vec![tls_secret("ns", "c", CERT_PEM, PKCS8_PEM)].into();
    let a = run(&inp);
    inp.ingresses = inp.ingresses.iter().rev().cloned().collect();
    inp.services = inp.services.iter().rev().cloned().collect();
    let b = run(&inp);
    assert_eq!(a.table.routes(), b.table.routes());
    assert_eq!(a.diagnostics, b.diagnostics);
    assert_eq!(a.ours, b.ours);
    assert!(!a.diagnostics.is_empty());
    assert_eq!(routed(&a.table, "h", "/x").as_deref(), Some("ms/d:80"));
}

#[test]
fn routes_listing() {
    let table = table_of(vec![rules(vec![
        rule(
            "b.io",
            vec![
                path("/x/", "ImplementationSpecific", "s", 80),
                path("/", "Exact", "s", 80),
            ],
        ),
        rule("*.a.io", vec![path("/", "Prefix", "t", 80)]),
        rule("", vec![path("/p/q", "Prefix", "t", 80)]),
    ])]);
    let got: Vec<String> = table
        .routes()
        .iter()
        .map(|r| format!("{} {} {} {}", r.host, r.path_type, r.path, r.backend))
        .collect();
    assert_eq!(
        got,
        vec![
            " Prefix /p/q ns/t:80",
            "*.a.io Prefix / ns/t:80",
            "b.io Exact / ns/s:80",
            "b.io ImplementationSpecific /x/ ns/s:80",
        ]
    );
}

#[test]
fn empty_and_skeletal_objects_never_panic() {
    let inp = Inputs {
        ingresses: vec![
            Arc::new(Default::default()),
            raw_ingress("", "", None, json!(null), json!({})),
            ingress(
                "ns",
                "x",
                None,
                json!({"rules": [{}, {"http": {"paths": []}}, {"host": ""}], "tls": [{}], "defaultBackend": {}}),
            ),
        ].into(),
        ingress_classes: vec![
            Arc::new(Default::default()),
            our_class(),
            class("", CONTROLLER, true),
        ].into(),
        services: vec![Arc::new(Default::default())].into(),
        endpoints: vec![Arc::new(Default::default())].into(),
        endpoint_slices: vec![Arc::new(Default::default())].into(),
        secrets: vec![Arc::new(Default::default())].into(),
        config_maps: vec![Arc::new(Default::default())].into(),
        annotation_config_maps: vec![Arc::new(Default::default())].into(),
        backend_tls_policies: vec![Arc::new(Default::default())].into(),
        listener_sets: vec![Arc::new(Default::default())].into(),
        nginx_config_map: Some(Arc::new(Default::default())),
        nginx_config_previous: None,
        gateway_classes: vec![Arc::new(Default::default())].into(),
        gateways: vec![Arc::new(Default::default())].into(),
        http_routes: vec![Arc::new(Default::default())].into(),
        grpc_routes: vec![Arc::new(Default::default())].into(),
        tcp_routes: vec![Arc::new(Default::default())].into(),
        tls_routes: vec![Arc::new(Default::default())].into(),
        udp_routes: vec![Arc::new(Default::default())].into(),
        reference_grants: vec![Arc::new(Default::default())].into(),
        namespaces: vec![Arc::new(Default::default())].into(),
    };
    let out = run(&inp);
    // The two nameless Ingresses are one ObjectRef.
    assert_eq!(out.ours.len(), 2);
    assert_eq!(
        diag_summary(&out.diagnostics),
        vec![("x".into(), "spec.defaultBackend".into(), "InvalidBackend")]
    );
}

#[test]
fn names_and_reasons() {
    let s = ServiceRef {
        namespace: "ns".into(),
        name: "web".into(),
        port: PortRef::Name("http".into()),
    };
    assert_eq!(s.to_string(), "ns/web:http");
    let s = ServiceRef {
        port: PortRef::Number(8080),
        ..s
    };
    assert_eq!(s.to_string(), "ns/web:8080");
    assert_eq!(
        ObjectRef::ingress("ns", "web").to_string(),
        "Ingress ns/web"
    );
    let reasons = [
        (Reason::ServiceNotFound, "ServiceNotFound"),
        (Reason::PortNotFound, "PortNotFound"),
        (Reason::InvalidPath, "InvalidPath"),
        (Reason::InvalidHost, "InvalidHost"),
        (
            Reason::ConflictLost {
                winner: ObjectRef::ingress("a", "b"),
            },
            "ConflictLost",
        ),
        (Reason::TlsSecretMissing, "TlsSecretMissing"),
        (Reason::TlsSecretInvalid, "TlsSecretInvalid"),
        (Reason::UnsupportedBackend, "UnsupportedBackend"),
        (Reason::InvalidBackend, "InvalidBackend"),
    ];
    for (r, s) in reasons {
        assert_eq!(r.as_str(), s);
    }
}

#[test]
fn table_is_send_and_sync() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<RouteTable>();
    assert_send_sync::<sluice_routing::Compiled>();
    assert_send_sync::<Inputs>();
}

/// ingress-nginx `configureCertificates`: a server alias and the name of a from/to-www
/// redirect are served with their host's certificate (unless they have one of their own),
/// so `https://www.shop.example/` can redirect without a certificate error; plain HTTP to
/// an alias of a TLS host is redirected to HTTPS as the host is (one server).
#[test]
fn aliases_and_www_names_borrow_the_hosts_certificate() {
    let spec = json!({
        "ingressClassName": "sluice",
        "tls": [{"hosts": ["shop.example"], "secretName": "shop"}],
        "rules": [rule("shop.example", vec![path("/", "Prefix", "s", 80)])],
    });
    let annotations = json!({
        "nginx.ingress.kubernetes.io/server-alias": "store.example",
        "nginx.ingress.kubernetes.io/from-to-www-redirect": "true",
    });
    let mut inp = inputs(vec![raw_ingress("ns", "ing", Some(1), annotations, spec)]);
    inp.services.push(service("ns", "s", &[(None, 80)]));
    inp.secrets
        .push(tls_secret("ns", "shop", CERT_PEM, PKCS8_PEM));
    let out = run(&inp);
    assert!(out.diagnostics.is_empty(), "{:?}", out.diagnostics);
    let t = &out.table;
    for sni in ["shop.example", "store.example", "www.shop.example"] {
        assert_eq!(
            t.certificate(sni).map(|c| c.secret.name.as_str()),
            Some("shop"),
            "{sni}"
        );
    }
    assert!(t.certificate("www.store.example").is_none());
    let alias = t.route("store.example", "/x").unwrap();
    assert_eq!(alias.policy.https_redirect, Some(308));
    assert_eq!(alias.backend.service.name, "s");
    let www = t.route("www.shop.example", "/x").unwrap();
    assert_eq!(www.policy.www_redirect.as_deref(), Some("shop.example"));
}

/// A ConfigMap of ingress-nginx's (the `--configmap` one) with these keys.
fn nginx_config_map(data: serde_json::Value) -> Arc<k8s_openapi::api::core::v1::ConfigMap> {
    Arc::new(
        serde_json::from_value(json!({
            "metadata": {"namespace": "ingress-nginx", "name": "ingress-nginx-controller"},
            "data": data,
        }))
        .unwrap(),
    )
}

/// ingress-nginx docs, "ConfigMaps" `global-auth-url` and `no-auth-locations`, and
/// annotations "Global External Authentication" (`enable-global-auth`); its template's
/// `shouldApplyGlobalAuth` and `isLocationInLocationList`: the global auth guards every
/// route of an Ingress without an `auth-url` of its own that does not opt out; a rule path
/// starting with a no-auth location gets no external auth at all (its own `auth-url`
/// neither); Gateway API routes are not Ingresses and are not guarded.
#[test]
fn global_auth_guards_ingresses_without_their_own_auth_url() {
    let spec = |host: &str| {
        json!({
            "ingressClassName": "sluice",
            "rules": [rule(host, vec![
                path("/", "Prefix", "s", 80),
                path("/.well-known/acme-challenge/token", "Exact", "s", 80),
                path("/healthz", "Prefix", "s", 80),
            ])],
        })
    };
    let own = json!({"nginx.ingress.kubernetes.io/auth-url": "http://own.auth/check"});
    let opt_out = json!({"nginx.ingress.kubernetes.io/enable-global-auth": "false"});
    let mut inp = inputs(vec![
        raw_ingress("ns", "plain", Some(1), json!({}), spec("plain.test")),
        raw_ingress("ns", "own", Some(2), own, spec("own.test")),
        raw_ingress("ns", "out", Some(3), opt_out, spec("out.test")),
    ]);
    inp.services.push(service("ns", "s", &[(None, 80)]));
    inp.nginx_config_map = Some(nginx_config_map(json!({
        "global-auth-url": "http://global.auth/verify",
        "global-auth-method": "POST",
        "global-auth-always-set-cookie": "true",
    })));
    let out = run(&inp);
    assert!(out.diagnostics.is_empty(), "{:?}", out.diagnostics);
    let auth_of = |host: &str, path: &str| {
        let entry = out.table.route(host, path).expect("routed");
        assert!(!entry.policy.fail_closed);
        entry.policy.auth.as_ref().map(|a| a.url.to_string())
    };
    let global = Some("http://global.auth/verify".to_owned());
    assert_eq!(auth_of("plain.test", "/app"), global);
    assert_eq!(auth_of("plain.test", "/healthz"), global);
    let entry = out.table.route("plain.test", "/").unwrap();
    let auth = entry.policy.auth.as_ref().unwrap();
    assert_eq!(auth.method, http::Method::POST);
    assert!(auth.always_set_cookie);
    assert_eq!(
        auth_of("own.test", "/app").as_deref(),
        Some("http://own.auth/check")
    );
    assert_eq!(auth_of("out.test", "/app"), None);
    // ingress-nginx's default no-auth location: neither global nor own auth.
    for host in ["plain.test", "own.test"] {
        assert_eq!(auth_of(host, "/.well-known/acme-challenge/token"), None);
    }

    // `no-auth-locations` set: its own list replaces the default.
    inp.nginx_config_map = Some(nginx_config_map(json!({
        "global-auth-url": "http://global.auth/verify",
        "no-auth-locations": "/healthz",
    })));
    let out = run(&inp);
    assert!(out.diagnostics.is_empty(), "{:?}", out.diagnostics);
    let auth_of = |host: &str, path: &str| {
        let entry = out.table.route(host, path).expect("routed");
        entry.policy.auth.as_ref().map(|a| a.url.to_string())
    };
    assert_eq!(auth_of("plain.test", "/healthz/live"), None);
    assert_eq!(auth_of("own.test", "/healthz"), None);
    assert_eq!(
        auth_of("plain.test", "/.well-known/acme-challenge/token"),
        Some("http://global.auth/verify".to_owned())
    );
    assert!(auth_of("plain.test", "/").is_some());
}

/// Fail closed: a `global-auth-url` that does not parse (and has no earlier value in
/// force) closes the routes it would guard, with a `FailedClosed` Event on each such
/// Ingress and an `InvalidAnnotation` Event on the ConfigMap; the Ingresses with their own
/// `auth-url` or `enable-global-auth: "false"` are served as before.
#[test]
fn a_global_auth_url_that_does_not_parse_closes_what_it_would_guard() {
    let spec = |host: &str| {
        json!({
            "ingressClassName": "sluice",
            "rules": [rule(host, vec![path("/", "Prefix", "s", 80)])],
        })
    };
    let own = json!({"nginx.ingress.kubernetes.io/auth-url": "http://own.auth/check"});
    let opt_out = json!({"nginx.ingress.kubernetes.io/enable-global-auth": "no"});
    let mut inp = inputs(vec![
        raw_ingress("ns", "plain", Some(1), json!({}), spec("plain.test")),
        raw_ingress("ns", "own", Some(2), own, spec("own.test")),
        raw_ingress("ns", "out", Some(3), opt_out, spec("out.test")),
    ]);
    inp.services.push(service("ns", "s", &[(None, 80)]));
    inp.nginx_config_map = Some(nginx_config_map(json!({"global-auth-url": "/verify"})));
    let out = run(&inp);
    let closed = find(&out.diagnostics, "FailedClosed");
    assert_eq!(closed.len(), 2, "{:?}", out.diagnostics);
    for d in &closed {
        assert!(
            d.message
                .contains("ConfigMap ingress-nginx/ingress-nginx-controller")
                && d.message.contains("global-auth-url"),
            "{}",
            d.message
        );
    }
    let mut names: Vec<_> = closed.iter().map(|d| d.object.name.as_str()).collect();
    names.sort();
    // "out" says "no", which is not a boolean: enable-global-auth stays true, as in
    // ingress-nginx, and the value gets its own Event.
    assert_eq!(names, ["out", "plain"]);
    assert!(
        out.diagnostics
            .iter()
            .any(|d| d.field == "data[global-auth-url]" && d.reason.as_str() == "InvalidAnnotation")
    );
    assert!(
        out.table
            .route("plain.test", "/")
            .unwrap()
            .policy
            .fail_closed
    );
    assert!(!out.table.route("own.test", "/").unwrap().policy.fail_closed);
}

/// ingress-nginx gives each location of a canary Ingress its own canary backend: two main
/// paths to one Service, whose canary Ingress sends them to two Services, each take their
/// own, whichever Ingress comes first in the inputs.
#[test]
fn a_canary_ingress_with_two_services_gives_each_main_path_its_own() {
    let main = ingress(
        "ns",
        "main",
        Some(1),
        json!({"rules": [rule("shop.test", vec![
            path("/a", "Prefix", "stable", 80),
            path("/b", "Prefix", "stable", 80),
        ])]}),
    );
    let canary = raw_ingress(
        "ns",
        "canary",
        Some(2),
        json!({"nginx.ingress.kubernetes.io/canary": "true",
               "nginx.ingress.kubernetes.io/canary-weight": "10"}),
        json!({"ingressClassName": "sluice", "rules": [rule("shop.test", vec![
            path("/a", "Prefix", "canary-a", 80),
            path("/b", "Prefix", "canary-b", 80),
        ])]}),
    );
    for order in [
        vec![main.clone(), canary.clone()],
        vec![canary.clone(), main.clone()],
    ] {
        let table = run(&inputs(order)).table;
        let canary_of = |p: &str| {
            table
                .route("shop.test", p)
                .and_then(|e| e.canary.as_ref())
                .map(|c| c.backend.service.to_string())
        };
        assert_eq!(canary_of("/a").as_deref(), Some("ns/canary-a:80"));
        assert_eq!(canary_of("/b").as_deref(), Some("ns/canary-b:80"));
    }
}

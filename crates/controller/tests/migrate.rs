//! `sluice migrate` end to end, through the same entry point the binary calls
//! (`sluice_controller::migrate::run` with parsed flags): a directory of mixed ingress-nginx
//! Ingresses, the text and JSON reports and the exit status; an unreadable directory, a
//! broken file and an unreachable cluster; the real API server; and the annotation
//! table against what the checker supports.

use clap::Parser;
use serde_json::{Value, json};
use sluice_controller::migrate::{EXIT_CHANGES, EXIT_CLEAN, EXIT_ERROR, MigrateArgs, run};
use sluice_routing::supported_annotations;
use std::path::Path;

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    args: MigrateArgs,
}

/// Runs `sluice migrate ARGS`: (exit status, stdout, stderr).
async fn migrate(args: &[&str]) -> (i32, String, String) {
    let cli = Cli::try_parse_from(std::iter::once("migrate").chain(args.iter().copied()))
        .expect("flags parse");
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let code = run(&cli.args, &mut out, &mut err).await;
    (
        code,
        String::from_utf8(out).unwrap(),
        String::from_utf8(err).unwrap(),
    )
}

const CLEAN: &str = r#"apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: clean
  namespace: shop
  annotations:
    nginx.ingress.kubernetes.io/ssl-redirect: "true"
    nginx.ingress.kubernetes.io/proxy-body-size: 8m
    nginx.ingress.kubernetes.io/enable-cors: "true"
spec:
  ingressClassName: sluice
  tls:
  - hosts: [shop.example.com]
    secretName: shop-tls
  rules:
  - host: shop.example.com
    http:
      paths:
      - path: /
        pathType: Prefix
        backend: {service: {name: web, port: {number: 80}}}
"#;

const MIXED: &str = r#"apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: rewrite
  namespace: shop
  annotations:
    nginx.ingress.kubernetes.io/rewrite-target: /$2
    nginx.ingress.kubernetes.io/auth-type: basic
spec:
  ingressClassName: sluice
  rules:
  - host: api.example.com
    http:
      paths:
      - path: /api
        pathType: Prefix
        backend: {service: {name: api, port: {number: 80}}}
---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: snippet
  annotations:
    kubernetes.io/ingress.class: nginx
    nginx.ingress.kubernetes.io/configuration-snippet: |
      more_set_headers "X-Frame-Options: DENY";
    nginx.ingress.kubernetes.io/proxy-body-size: 10 XB
spec:
  rules:
  - host: blog.example.com
    http:
      paths:
      - path: /
        pathType: Prefix
        backend: {service: {name: blog, port: {number: 80}}}
"#;

fn dir_with(files: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for (name, text) in files {
        std::fs::write(dir.path().join(name), text).unwrap();
    }
    dir
}

fn path(dir: &tempfile::TempDir) -> &str {
    dir.path().to_str().unwrap()
}

fn assert_lines(text: &str, lines: &[&str]) {
    for line in lines {
        assert!(text.contains(line), "{line:?} not in:\n{text}");
    }
}

fn nginx(key: &str) -> String {
    format!("nginx.ingress.kubernetes.io/{key}")
}

#[tokio::test]
async fn a_fully_supported_ingress_alone_exits_zero() {
    let dir = dir_with(&[("clean.yaml", CLEAN)]);
    let (code, text, err) = migrate(&["--manifests", path(&dir)]).await;
    assert_eq!(code, EXIT_CLEAN, "{text}{err}");
    assert_eq!(err, "");
    assert_lines(
        &text,
        &[
            &format!(
                "sluice migrate: 1 Ingress from manifests in {} (--ingress-class sluice, \
                 --controller-class sluice.dev/ingress-controller)\n",
                path(&dir)
            ),
            "note: no IngressClass with spec.controller sluice.dev/ingress-controller found: \
             assuming the one deploy/ creates (IngressClass sluice), made the default class by \
             deploy/overlays/default-class",
            "\nshop/clean: fully supported\n",
            "  class        sluice (spec.ingressClassName): served: IngressClass sluice has \
             spec.controller sluice.dev/ingress-controller (as deploy/ creates it)\n",
            "  honoured     nginx.ingress.kubernetes.io/enable-cors\n",
            "  honoured     nginx.ingress.kubernetes.io/proxy-body-size\n",
            "  honoured     nginx.ingress.kubernetes.io/ssl-redirect\n",
        ],
    );
    // ssl-redirect is set explicitly: no note about its default.
    assert!(!text.contains("  note "), "{text}");
    assert!(
        text.ends_with("\n1 Ingress, 1 fully supported, 0 with problems\n"),
        "{text}"
    );

    let (code, json, _) = migrate(&["--manifests", path(&dir), "-o", "json"]).await;
    assert_eq!(code, EXIT_CLEAN);
    let v: Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v["exit_code"], 0);
    assert_eq!(
        v["summary"],
        json!({"ingresses": 1, "fully_supported": 1, "with_problems": 0, "errors": 0})
    );
    let clean = &v["ingresses"][0];
    assert_eq!(clean["namespace"], "shop");
    assert_eq!(clean["name"], "clean");
    assert_eq!(clean["class"]["served"], true);
    assert_eq!(clean["class"]["ingress_class_name"], "sluice");
    assert_eq!(clean["class"]["fix"], Value::Null);
    assert_eq!(
        clean["honoured"],
        json!([
            nginx("enable-cors"),
            nginx("proxy-body-size"),
            nginx("ssl-redirect")
        ])
    );
    assert_eq!(clean["problems"], json!([]));
    assert_eq!(clean["fully_supported"], true);
}

#[tokio::test]
async fn a_mixed_directory_reports_every_problem_and_exits_one() {
    let dir = dir_with(&[("clean.yaml", CLEAN), ("mixed.yaml", MIXED)]);
    let (code, text, err) = migrate(&["--manifests", path(&dir)]).await;
    assert_eq!(code, EXIT_CHANGES, "{text}{err}");
    assert_eq!(err, "");

    // rewrite-target is being implemented: the report follows the checker either way.
    let rewrite_supported = supported_annotations().contains(&"rewrite-target");
    let rewrite_line = if rewrite_supported {
        "  honoured     nginx.ingress.kubernetes.io/rewrite-target\n".to_owned()
    } else {
        "  unsupported  nginx.ingress.kubernetes.io/rewrite-target: not supported by sluice"
            .to_owned()
    };
    assert_lines(
        &text,
        &[
            "sluice migrate: 3 Ingresses from manifests in ",
            "\nshop/clean: fully supported\n",
            // No namespace in the manifest: `default`, as `sluice serve` reads it; sorted.
            "\ndefault/snippet: 3 problems\n",
            "  class        nginx (kubernetes.io/ingress.class): NOT served: the legacy \
             annotation kubernetes.io/ingress.class: nginx is not sluice's class \
             (--ingress-class sluice)\n",
            "  fix          replace the annotation kubernetes.io/ingress.class: nginx with \
             spec.ingressClassName: sluice (or set it to sluice, or run sluice with \
             --ingress-class nginx)\n",
            "  refused      nginx.ingress.kubernetes.io/configuration-snippet: snippets are \
             nginx configuration text; sluice never applies annotation values as \
             configuration (to set request or response fields without snippets, use \
             sluice.dev/request-headers or sluice.dev/response-headers); to have sluice \
             interpret its directives, set allow-snippet-annotations: \"true\" and \
             annotations-risk-level: Critical in the ingress-nginx ConfigMap (as \
             ingress-nginx >= 1.12 requires)\n",
            "  invalid      nginx.ingress.kubernetes.io/proxy-body-size: value \"10 XB\" is \
             not a size; expected bytes with an optional unit: k, m, g (nginx), KiB, MiB, GiB, \
             KB, MB, GB\n",
            "  class        sluice (spec.ingressClassName): served",
            "  CLOSED       nginx.ingress.kubernetes.io/auth-type: auth-type: basic without \
             auth-secret; the Ingress's routes answer 503 to every request until it is \
             removed (fail closed)\n",
            &rewrite_line,
        ],
    );
    let rewrite_heading = if rewrite_supported {
        "\nshop/rewrite: 1 problem\n"
    } else {
        "\nshop/rewrite: 2 problems\n"
    };
    assert!(text.contains(rewrite_heading), "{text}");
    let order: Vec<usize> = ["\ndefault/snippet:", "\nshop/clean:", "\nshop/rewrite:"]
        .iter()
        .map(|h| text.find(h).unwrap())
        .collect();
    assert!(order.windows(2).all(|w| w[0] < w[1]), "{text}");
    assert!(
        text.ends_with("\n3 Ingresses, 1 fully supported, 2 with problems\n"),
        "{text}"
    );

    let (code, json, _) = migrate(&["--manifests", path(&dir), "--output", "json"]).await;
    assert_eq!(code, EXIT_CHANGES);
    let v: Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v["exit_code"], 1);
    assert_eq!(
        v["summary"],
        json!({"ingresses": 3, "fully_supported": 1, "with_problems": 2, "errors": 0})
    );
    let names: Vec<String> = v["ingresses"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| {
            format!(
                "{}/{}",
                i["namespace"].as_str().unwrap(),
                i["name"].as_str().unwrap()
            )
        })
        .collect();
    assert_eq!(names, ["default/snippet", "shop/clean", "shop/rewrite"]);

    let snippet = &v["ingresses"][0];
    assert_eq!(snippet["class"]["served"], false);
    assert_eq!(snippet["class"]["legacy_annotation"], "nginx");
    assert_eq!(snippet["class"]["ingress_class_name"], Value::Null);
    let problems: Vec<(String, String)> = snippet["problems"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["annotation"].as_str().unwrap().to_owned(),
                p["reason"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert_eq!(
        problems,
        [
            (nginx("configuration-snippet"), "SnippetRefused".to_owned()),
            (nginx("proxy-body-size"), "InvalidAnnotation".to_owned()),
        ]
    );
    assert_eq!(snippet["fully_supported"], false);

    let rewrite = &v["ingresses"][2];
    assert_eq!(rewrite["class"]["served"], true);
    let problem_keys: Vec<&str> = rewrite["problems"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["annotation"].as_str().unwrap())
        .collect();
    if rewrite_supported {
        assert_eq!(problem_keys, [nginx("auth-type")]);
        assert_eq!(rewrite["honoured"], json!([nginx("rewrite-target")]));
    } else {
        assert_eq!(problem_keys, [nginx("auth-type"), nginx("rewrite-target")]);
        assert_eq!(rewrite["problems"][1]["reason"], "UnsupportedAnnotation");
    }
    assert_eq!(rewrite["problems"][0]["reason"], "FailedClosed");
}

#[tokio::test]
async fn the_class_flags_change_the_verdict() {
    let dir = dir_with(&[("mixed.yaml", MIXED)]);
    let (_, json, _) = migrate(&[
        "--manifests",
        path(&dir),
        "-o",
        "json",
        "--ingress-class",
        "nginx",
    ])
    .await;
    let v: Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v["ingress_class"], "nginx");
    // The legacy annotation `nginx` is ours now; `ingressClassName: sluice` no longer is
    // (the assumed IngressClass is named after --ingress-class).
    assert_eq!(v["ingresses"][0]["name"], "snippet");
    assert_eq!(v["ingresses"][0]["class"]["served"], true);
    assert_eq!(v["ingresses"][1]["name"], "rewrite");
    assert_eq!(v["ingresses"][1]["class"]["served"], false);

    // --watch-namespace filters.
    let (_, json, _) = migrate(&["--manifests", path(&dir), "-o", "json", "-n", "shop"]).await;
    let v: Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v["summary"]["ingresses"], 1);
    assert_eq!(v["ingresses"][0]["name"], "rewrite");
}

#[tokio::test]
async fn an_unreadable_directory_exits_two() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing");
    let (code, out, err) = migrate(&["--manifests", missing.to_str().unwrap()]).await;
    assert_eq!(code, EXIT_ERROR);
    assert_eq!(out, "");
    assert!(
        err.starts_with(&format!(
            "sluice migrate: cannot read manifest directory {}: ",
            missing.display()
        )),
        "{err}"
    );
}

#[tokio::test]
async fn a_broken_file_exits_two_and_the_rest_is_still_reported() {
    let dir = dir_with(&[("clean.yaml", CLEAN), ("broken.yaml", "kind: [unclosed\n")]);
    let (code, text, _) = migrate(&["--manifests", path(&dir)]).await;
    assert_eq!(code, EXIT_ERROR, "{text}");
    let broken = dir.path().join("broken.yaml");
    assert_lines(
        &text,
        &[
            &format!("error: {}: document 1: invalid YAML", broken.display()),
            "\nshop/clean: fully supported\n",
        ],
    );
    assert!(
        text.ends_with("\n1 Ingress, 1 fully supported, 0 with problems, 1 error\n"),
        "{text}"
    );
    let (code, json, _) = migrate(&["--manifests", path(&dir), "-o", "json"]).await;
    assert_eq!(code, EXIT_ERROR);
    let v: Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v["summary"]["errors"], 1);
    assert_eq!(v["exit_code"], 2);
}

#[tokio::test]
async fn an_unreachable_cluster_exits_two() {
    // A kubeconfig naming a port nothing listens on.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let dir = dir_with(&[(
        "kubeconfig",
        &format!(
            "apiVersion: v1
kind: Config
clusters: [{{name: c, cluster: {{server: \"https://127.0.0.1:{port}\", insecure-skip-tls-verify: true}}}}]
users: [{{name: u, user: {{token: t}}}}]
contexts: [{{name: x, context: {{cluster: c, user: u}}}}]
current-context: x
"
        ),
    )]);
    let kubeconfig = dir.path().join("kubeconfig");
    let (code, out, err) = migrate(&["--kubeconfig", kubeconfig.to_str().unwrap()]).await;
    assert_eq!(code, EXIT_ERROR, "{out}{err}");
    assert_eq!(out, "");
    assert!(
        err.starts_with("sluice migrate: cannot list Ingresses: "),
        "{err}"
    );
}

#[tokio::test]
async fn reads_ingresses_and_classes_from_the_api_server() -> anyhow::Result<()> {
    let cp = sluice_testenv::ControlPlane::shared().await?;
    let client = cp.client();
    let ns = cp.create_namespace("migrate").await?;
    let nginx_class = format!("nginx-{ns}");
    let yaml = format!(
        "apiVersion: networking.k8s.io/v1
kind: IngressClass
metadata: {{name: {nginx_class}}}
spec: {{controller: k8s.io/ingress-nginx}}
---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: legacy
  namespace: {ns}
  annotations:
    nginx.ingress.kubernetes.io/enable-cors: \"true\"
    nginx.ingress.kubernetes.io/auth-type: basic
spec:
  ingressClassName: {nginx_class}
  defaultBackend: {{service: {{name: web, port: {{number: 80}}}}}}
---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: {{name: ready, namespace: {ns}}}
spec:
  ingressClassName: sluice
  defaultBackend: {{service: {{name: web, port: {{number: 80}}}}}}
"
    );
    sluice_testenv::apply_yaml(&client, &yaml).await?;

    let kubeconfig = cp.kubeconfig_path().to_str().unwrap().to_owned();
    let (code, json, err) = migrate(&[
        "--kubeconfig",
        &kubeconfig,
        "--watch-namespace",
        &ns,
        "-o",
        "json",
    ])
    .await;
    assert_eq!(code, EXIT_CHANGES, "{json}{err}");
    let v: Value = serde_json::from_str(&json)?;
    assert_eq!(v["source"], format!("the cluster, namespace {ns}"));
    assert_eq!(v["summary"]["ingresses"], 2);
    let legacy = &v["ingresses"][0];
    assert_eq!(legacy["name"], "legacy");
    assert_eq!(legacy["class"]["served"], false);
    assert_eq!(
        legacy["class"]["detail"],
        format!("IngressClass {nginx_class} belongs to spec.controller k8s.io/ingress-nginx")
    );
    assert_eq!(legacy["honoured"], json!([nginx("enable-cors")]));
    assert_eq!(legacy["problems"][0]["annotation"], nginx("auth-type"));
    assert_eq!(legacy["problems"][0]["reason"], "FailedClosed");
    assert_eq!(
        legacy["problems"][0]["detail"],
        "auth-type: basic without auth-secret; the Ingress's routes answer 503 to every \
         request until it is removed (fail closed)"
    );
    let ready = &v["ingresses"][1];
    assert_eq!(ready["name"], "ready");
    assert_eq!(ready["class"]["served"], true);
    assert_eq!(ready["fully_supported"], true);

    // The text report of the same.
    let (code, text, _) = migrate(&["--kubeconfig", &kubeconfig, "-n", &ns]).await;
    assert_eq!(code, EXIT_CHANGES);
    assert_lines(
        &text,
        &[
            &format!("sluice migrate: 2 Ingresses from the cluster, namespace {ns}"),
            &format!("\n{ns}/legacy: 2 problems\n"),
            &format!("\n{ns}/ready: fully supported\n"),
        ],
    );
    Ok(())
}

/// The annotation table of docs/annotations.md names exactly the keys the checker honours.
#[test]
fn the_docs_list_every_supported_annotation() {
    let section = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/annotations.md"),
    )
    .expect("docs/annotations.md");
    let table: Vec<&str> = section.lines().filter(|l| l.starts_with("| `")).collect();
    let mut documented: Vec<String> = Vec::new();
    for row in &table {
        let first = row.split('|').nth(1).unwrap_or("");
        for key in first.split('`').skip(1).step_by(2) {
            documented.push(key.trim_start_matches("sluice.dev/").to_owned());
        }
    }
    for key in supported_annotations() {
        assert!(
            documented.iter().any(|d| d == key),
            "supported annotation {key} is not in the table of docs/annotations.md ({documented:?})"
        );
    }
    for key in &documented {
        assert!(
            supported_annotations().contains(&key.as_str()),
            "docs/annotations.md lists {key}, which sluice does not support"
        );
    }
    // The count the section states (ingress-nginx's keys: all but the three sluice.dev/ ones).
    let count = supported_annotations().len() - 3;
    let stated = format!("sluice honours **{count} ingress-nginx annotations**");
    assert!(
        section.contains(&stated),
        "docs/annotations.md does not say \"{stated}\" (the count of supported_annotations())"
    );
}

/// #33: a `kubectl get ingress -A -o yaml` dump (`kind: List`) is read as its items, in a
/// subdirectory too (like `kubectl apply -R`), and a Deployment beside an Ingress is named
/// and left out while the Ingress is reported.
#[tokio::test]
async fn a_kubectl_list_dump_and_other_kinds_beside_an_ingress_are_read() {
    let item = CLEAN
        .lines()
        .map(|l| format!("  {l}"))
        .collect::<Vec<_>>()
        .join("\n");
    let dump = format!(
        "apiVersion: v1\nkind: List\nmetadata: {{resourceVersion: \"\"}}\nitems:\n- {}\n",
        item.trim_start()
    );
    let deployment = format!(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {{name: web, namespace: shop}}\n---\n{}",
        CLEAN
            .replace("name: clean", "name: beside")
            .replace("shop.example.com", "beside.example.com")
    );
    let dir = dir_with(&[]);
    std::fs::create_dir_all(dir.path().join("exported")).unwrap();
    std::fs::write(dir.path().join("exported/ingresses.yaml"), dump).unwrap();
    std::fs::write(dir.path().join("app.yaml"), deployment).unwrap();
    let (code, text, err) = migrate(&["--manifests", path(&dir)]).await;
    assert_eq!(code, EXIT_CLEAN, "{text}{err}");
    assert!(text.contains("2 Ingresses from manifests"), "{text}");
    assert!(text.contains("\nshop/clean: fully supported\n"), "{text}");
    assert!(text.contains("\nshop/beside: fully supported\n"), "{text}");
    assert!(
        text.contains(
            "app.yaml: document 1 (apps/v1 Deployment shop/web): not a kind sluice reads; skipped"
        ),
        "{text}"
    );
}

/// #33: a second canary for one host and path is not served (the older canary keeps it),
/// so `migrate` must not call it fully supported: what serving drops from an Ingress's
/// rules is reported with the field, as its Event says in a cluster.
#[tokio::test]
async fn a_second_canary_for_a_path_is_reported_not_honoured() {
    let ingress = |name: &str, age: &str, canary: bool| {
        let annotations = if canary {
            "    nginx.ingress.kubernetes.io/canary: \"true\"\n    nginx.ingress.kubernetes.io/canary-weight: \"10\"\n"
        } else {
            ""
        };
        format!(
            "apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: {name}
  namespace: shop
  creationTimestamp: \"{age}\"
  annotations:
    kubernetes.io/ingress.class: sluice
{annotations}spec:
  rules:
  - host: shop.example.com
    http:
      paths:
      - path: /
        pathType: Prefix
        backend: {{service: {{name: {name}, port: {{number: 80}}}}}}
---
"
        )
    };
    let text = [
        ingress("main", "2024-01-01T00:00:00Z", false),
        ingress("canary-a", "2024-01-01T00:00:01Z", true),
        ingress("canary-b", "2024-01-01T00:00:02Z", true),
    ]
    .concat();
    let dir = dir_with(&[("canaries.yaml", &text)]);
    let (code, out, err) = migrate(&["--manifests", path(&dir)]).await;
    assert_eq!(code, EXIT_CHANGES, "{out}{err}");
    assert!(out.contains("\nshop/canary-a: fully supported\n"), "{out}");
    let b = out
        .split("\nshop/canary-b:")
        .nth(1)
        .unwrap_or_default()
        .split("\nshop/")
        .next()
        .unwrap_or_default()
        .to_owned();
    assert!(!b.starts_with(" fully supported"), "{out}");
    assert!(
        b.contains("ConflictLost") || b.contains("already has the canary"),
        "{out}"
    );
    assert!(b.contains("spec.rules[0].http.paths[0]"), "{out}");
    assert!(b.contains("Ingress shop/canary-a"), "{out}");
}

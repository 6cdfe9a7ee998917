//! `sluice explain URL` on the conformance-style cases (exact vs prefix, wildcard host,
//! default backend, class mismatch), from a directory of manifests and from a running
//! `sluice serve`'s admin port: both give the same answer, and the exit status says whether
//! the request is answered (0), gets 404 (1), or could not be explained (2).

use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const MANIFESTS: &str = "\
apiVersion: networking.k8s.io/v1
kind: IngressClass
metadata: {name: sluice}
spec: {controller: sluice.dev/ingress-controller}
---
apiVersion: v1
kind: Service
metadata: {name: web}
spec: {ports: [{name: http, port: 80}]}
---
apiVersion: v1
kind: Endpoints
metadata: {name: web}
subsets: [{addresses: [{ip: 10.0.0.1}], notReadyAddresses: [{ip: 10.0.0.2}], ports: [{name: http, port: 8080}]}]
---
apiVersion: v1
kind: Service
metadata: {name: api}
spec: {ports: [{name: http, port: 80}]}
---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: {name: shop, annotations: {nginx.ingress.kubernetes.io/limit-rps: \"5\"}}
spec:
  ingressClassName: sluice
  rules:
  - host: shop.example
    http:
      paths:
      - {path: /, pathType: Prefix, backend: {service: {name: web, port: {name: http}}}}
      - {path: /api, pathType: Prefix, backend: {service: {name: api, port: {name: http}}}}
      - {path: /status, pathType: Exact, backend: {service: {name: api, port: {name: http}}}}
  - host: \"*.apps.example\"
    http:
      paths:
      - {path: /, pathType: Prefix, backend: {service: {name: web, port: {name: http}}}}
---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: {name: fallback}
spec:
  ingressClassName: sluice
  defaultBackend: {service: {name: web, port: {name: http}}}
---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: {name: elsewhere}
spec:
  ingressClassName: nginx
  rules:
  - host: other.example
    http:
      paths:
      - {path: /, pathType: Prefix, backend: {service: {name: web, port: {name: http}}}}
";

fn sluice() -> Command {
    Command::new(env!("CARGO_BIN_EXE_sluice"))
}

fn explain(args: &[&str]) -> (i32, String, String) {
    let Output {
        status,
        stdout,
        stderr,
    } = sluice()
        .arg("explain")
        .args(args)
        .output()
        .expect("sluice runs");
    (
        status.code().unwrap_or(-1),
        String::from_utf8_lossy(&stdout).into_owned(),
        String::from_utf8_lossy(&stderr).into_owned(),
    )
}

/// A `sluice serve` child, killed on drop (panics included).
struct Serving(Child);

impl Drop for Serving {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// (URL, expected exit status, lines the answer must contain).
fn cases() -> Vec<(&'static str, i32, Vec<&'static str>)> {
    vec![
        (
            "http://shop.example/api/orders",
            0,
            vec![
                "answer:  Ingress default/shop, rule shop.example Prefix /api",
                "backend: Service default/api:http, 0/0 endpoints ready (requests get 503)",
                "policy:  rate limit 5 req/s",
                "=> Ingress default/shop spec.rules[0].http.paths[1]",
                "spec.rules[0].http.paths[0] (shop.example Prefix /): matches, but Prefix /api is more specific",
                "Ingress default/elsewhere spec.ingressClassName: class: spec.ingressClassName \"nginx\" is not an IngressClass of this controller",
            ],
        ),
        (
            // Exact /status does not take /status/ (a trailing slash is another path).
            "http://shop.example/status/",
            0,
            vec![
                "answer:  Ingress default/shop, rule shop.example Prefix /",
                "backend: Service default/web:http, 1/2 endpoints ready: 10.0.0.1:8080",
                "(shop.example Exact /status): Exact /status does not equal /status/ (byte for byte)",
            ],
        ),
        (
            "https://a.apps.example:8443/x",
            0,
            vec!["answer:  Ingress default/shop, rule *.apps.example Prefix /"],
        ),
        (
            // Two labels: the wildcard does not cover it; the default backend answers.
            "http://a.b.apps.example/x",
            0,
            vec![
                "answer:  no rule matches; default backend of Ingress default/fallback",
                "(*.apps.example Prefix /): host *.apps.example does not match a.b.apps.example (a wildcard covers exactly one label",
            ],
        ),
    ]
}

fn write_manifests(dir: &Path) {
    std::fs::write(dir.join("all.yaml"), MANIFESTS).expect("manifests written");
}

#[test]
fn explains_from_manifests_and_from_a_running_sluice_alike() {
    let dir = tempfile::tempdir().unwrap();
    write_manifests(dir.path());
    let manifests = dir.path().to_str().unwrap();
    let mut answers = Vec::new();
    for (url, code, lines) in cases() {
        let (status, out, err) = explain(&["--manifests", manifests, url]);
        assert_eq!(status, code, "{url}\n{out}\n{err}");
        for line in lines {
            assert!(out.contains(line), "{url}: missing {line:?} in\n{out}");
        }
        answers.push(out);
    }

    // The same answers from a running sluice's admin port.
    let admin = format!("127.0.0.1:{}", free_port());
    let child = sluice()
        .args(["serve", "--manifests", manifests])
        .args(["--http-addr", "127.0.0.1:0", "--https-addr", "127.0.0.1:0"])
        .args(["--admin-addr", &admin])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("sluice serve starts");
    let _serving = Serving(child);
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut first = explain(&["--admin-addr", &admin, cases()[0].0]);
    while first.0 != 0 || !first.1.contains("rule shop.example Prefix /api") {
        assert!(
            Instant::now() < deadline,
            "sluice serve never answered: {first:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
        first = explain(&["--admin-addr", &admin, cases()[0].0]);
    }
    for ((url, code, _), expected) in cases().into_iter().zip(&answers) {
        let (status, out, err) = explain(&["--admin-addr", &admin, url]);
        assert_eq!(status, code, "{url}\n{err}");
        assert_eq!(
            &out, expected,
            "{url}: the admin port and the manifests disagree"
        );
    }
}

#[test]
fn not_found_and_unanswerable_have_their_own_exit_status() {
    let dir = tempfile::tempdir().unwrap();
    write_manifests(dir.path());
    // No default backend for this one: move it away.
    let text = MANIFESTS.replace("defaultBackend:", "# defaultBackend:");
    std::fs::write(dir.path().join("all.yaml"), text).unwrap();
    let manifests = dir.path().to_str().unwrap();
    let (status, out, _) = explain(&["--manifests", manifests, "http://nowhere.example/"]);
    assert_eq!(status, 1, "{out}");
    assert!(
        out.contains("no rule matches and there is no default backend: 404"),
        "{out}"
    );

    // Nothing listens there.
    let closed = format!("127.0.0.1:{}", free_port());
    let (status, _, err) = explain(&["--admin-addr", &closed, "http://shop.example/"]);
    assert_eq!(status, 2);
    assert!(err.contains("is sluice running there?"), "{err}");
    // A URL without a host.
    let (status, _, err) = explain(&["--manifests", manifests, "http:///x"]);
    assert_eq!(status, 2);
    assert!(err.contains("has no host"), "{err}");
}

//! ingress-nginx docs, "Enable Access Log": `enable-access-log: "false"` keeps an Ingress's
//! requests out of the access log (nginx `access_log off` in its locations), while the other
//! Ingresses' requests are logged. Runs the `sluice serve` binary with `--access-log` and
//! reads its stdout.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A port free right now on loopback.
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn ingress(name: &str, host: &str, annotations: &str) -> String {
    format!(
        "apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: {name}
  namespace: default
  annotations: {{{annotations}}}
spec:
  ingressClassName: sluice
  rules:
  - host: {host}
    http:
      paths:
      - path: /
        pathType: Prefix
        backend: {{service: {{name: gone, port: {{number: 80}}}}}}
---
"
    )
}

/// GET `path` on `host`; the status (a Service without endpoints answers 503).
fn get(port: u16, host: &str, path: &str) -> Option<u16> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    let request = format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).ok()?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer).ok()?;
    answer.split_whitespace().nth(1)?.parse().ok()
}

struct Serve(Child);

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn enable_access_log_false_keeps_an_ingress_out_of_the_access_log() {
    let dir = tempfile::tempdir().unwrap();
    let mut manifests = String::from(
        "apiVersion: networking.k8s.io/v1
kind: IngressClass
metadata: {name: sluice}
spec: {controller: sluice.dev/ingress-controller}
---
",
    );
    manifests += &ingress("logged", "logged.test", "");
    manifests += &ingress(
        "quiet",
        "quiet.test",
        "nginx.ingress.kubernetes.io/enable-access-log: \"false\"",
    );
    std::fs::write(dir.path().join("all.yaml"), manifests).unwrap();
    let (http, admin) = (free_port(), free_port());
    let mut child = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["serve", "--manifests"])
        .arg(dir.path())
        .args(["--http-addr", &format!("127.0.0.1:{http}")])
        .args(["--https-addr", "127.0.0.1:0"])
        .args(["--admin-addr", &format!("127.0.0.1:{admin}")])
        .args(["--access-log", "--workers", "1"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("sluice runs");
    let stdout = child.stdout.take().unwrap();
    let _serve = Serve(child);
    let (lines_tx, lines_rx) = std::sync::mpsc::channel::<String>();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if lines_tx.send(line).is_err() {
                return;
            }
        }
    });
    // Until both hosts are routed (503: their Service has no endpoints).
    let deadline = Instant::now() + Duration::from_secs(30);
    while get(http, "quiet.test", "/warm-up") != Some(503)
        || get(http, "logged.test", "/warm-up") != Some(503)
    {
        assert!(
            Instant::now() < deadline,
            "sluice serve did not route in time"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    for _ in 0..3 {
        assert_eq!(get(http, "quiet.test", "/secret-path"), Some(503));
        assert_eq!(get(http, "logged.test", "/seen-path"), Some(503));
    }
    let mut seen = 0;
    let mut lines = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    while seen < 3 && Instant::now() < deadline {
        if let Ok(line) = lines_rx.recv_timeout(Duration::from_millis(200)) {
            seen += usize::from(line.contains("/seen-path"));
            lines.push(line);
        }
    }
    // The writer thread batches lines: give a quiet line the same time to show up.
    while let Ok(line) = lines_rx.recv_timeout(Duration::from_millis(500)) {
        lines.push(line);
    }
    assert_eq!(seen, 3, "the logged Ingress's requests: {lines:#?}");
    assert!(
        lines.iter().all(|l| !l.contains("quiet.test")),
        "enable-access-log: \"false\" was logged: {lines:#?}"
    );
}

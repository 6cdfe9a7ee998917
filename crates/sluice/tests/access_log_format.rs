//! ingress-nginx docs, "ConfigMaps" (`log-format-upstream`, `log-format-escape-json`) and
//! "Log format": the access log line is the ConfigMap's nginx `log_format` rendered, read
//! live. Runs the `sluice serve` binary with `--access-log` and `--configmap` over a
//! manifests directory, in front of a real echo backend, and reads its stdout.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::Receiver;
use std::time::{Duration, Instant};

use sluice_echo::{EchoServer, Identity};

/// ingress-nginx's default `log-format-upstream` (`internal/ingress/controller/config/config.go`).
const INGRESS_NGINX_DEFAULT: &str = "$remote_addr - $remote_user [$time_local] \"$request\" \
     $status $body_bytes_sent \"$http_referer\" \"$http_user_agent\" $request_length \
     $request_time [$proxy_upstream_name] [$proxy_alternative_upstream_name] $upstream_addr \
     $upstream_response_length $upstream_response_time $upstream_status $req_id";

/// A JSON format as ingress-nginx users write it (with `log-format-escape-json: "true"`).
const JSON_FORMAT: &str = r#"{"time":"$time_iso8601","remote_addr":"$remote_addr","remote_user":"$remote_user","request":"$request","method":"$request_method","uri":"$uri","args":"$args","host":"$host","scheme":"$scheme","protocol":"$server_protocol","status":$status,"bytes":$body_bytes_sent,"agent":"$http_user_agent","upstream":"$proxy_upstream_name","namespace":"$namespace","ingress":"$ingress_name","service":"$service_name","port":"$service_port","req_id":"$req_id","request_time":$request_time,"server_port":"$server_port","ssl_protocol":"$ssl_protocol","ssl_cipher":"$ssl_cipher"}"#;

/// A port free right now on loopback.
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A CA and a leaf for app.test signed by it: (CA DER, leaf PEM, leaf key PEM).
fn certificates() -> (Vec<u8>, String, String) {
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let ca = rcgen::CertifiedIssuer::self_signed(ca_params, ca_key).unwrap();
    let leaf_key = rcgen::KeyPair::generate().unwrap();
    let leaf = rcgen::CertificateParams::new(vec!["app.test".to_owned()])
        .unwrap()
        .signed_by(&leaf_key, &ca)
        .unwrap();
    (ca.der().to_vec(), leaf.pem(), leaf_key.serialize_pem())
}

fn manifests(dir: &Path, web: SocketAddr, canary: SocketAddr, cert: &str, key: &str) {
    use base64::Engine as _;
    let b64 = |pem: &str| base64::engine::general_purpose::STANDARD.encode(pem);
    let all = format!(
        "apiVersion: networking.k8s.io/v1
kind: IngressClass
metadata: {{name: sluice}}
spec: {{controller: sluice.dev/ingress-controller}}
---
apiVersion: v1
kind: Service
metadata: {{name: web, namespace: default}}
spec: {{ports: [{{name: http, port: 80}}]}}
---
apiVersion: v1
kind: Endpoints
metadata: {{name: web, namespace: default}}
subsets: [{{addresses: [{{ip: 127.0.0.1}}], ports: [{{name: http, port: {}}}]}}]
---
apiVersion: v1
kind: Service
metadata: {{name: canary, namespace: default}}
spec: {{ports: [{{name: http, port: 80}}]}}
---
apiVersion: v1
kind: Endpoints
metadata: {{name: canary, namespace: default}}
subsets: [{{addresses: [{{ip: 127.0.0.1}}], ports: [{{name: http, port: {}}}]}}]
---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: app-canary
  namespace: default
  annotations:
    nginx.ingress.kubernetes.io/canary: \"true\"
    nginx.ingress.kubernetes.io/canary-by-header: X-Canary
spec:
  ingressClassName: sluice
  rules:
  - host: app.test
    http:
      paths:
      - {{path: /, pathType: Prefix, backend: {{service: {{name: canary, port: {{number: 80}}}}}}}}
---
apiVersion: v1
kind: Secret
metadata: {{name: app-tls, namespace: default}}
type: kubernetes.io/tls
data: {{tls.crt: {}, tls.key: {}}}
---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: app
  namespace: default
  annotations: {{nginx.ingress.kubernetes.io/ssl-redirect: \"false\"}}
spec:
  ingressClassName: sluice
  tls: [{{hosts: [app.test], secretName: app-tls}}]
  rules:
  - host: app.test
    http:
      paths:
      - {{path: /, pathType: Prefix, backend: {{service: {{name: web, port: {{number: 80}}}}}}}}
",
        web.port(),
        canary.port(),
        b64(cert),
        b64(key)
    );
    std::fs::write(dir.join("all.yaml"), all).unwrap();
}

/// Writes `config.json`: ingress-nginx's ConfigMap `default/nginx` with `data`, by rename.
fn write_config_map(dir: &Path, data: &[(&str, &str)]) {
    let data: serde_json::Map<String, serde_json::Value> = data
        .iter()
        .map(|(k, v)| ((*k).to_owned(), serde_json::Value::from(*v)))
        .collect();
    let map = serde_json::json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "nginx", "namespace": "default"},
        "data": data,
    });
    let tmp = dir.join(".config.json.tmp");
    std::fs::write(&tmp, map.to_string()).unwrap();
    std::fs::rename(&tmp, dir.join("config.json")).unwrap();
}

/// GET `target` on app.test with `fields`; the status.
fn get(port: u16, target: &str, fields: &str) -> Option<u16> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    let request =
        format!("GET {target} HTTP/1.1\r\nHost: App.Test:80\r\n{fields}Connection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).ok()?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer).ok()?;
    answer.split_whitespace().nth(1)?.parse().ok()
}

/// GET `target` on app.test over TLS with only `version` offered, trusting `ca`; the status.
fn get_tls(
    port: u16,
    ca: &[u8],
    version: &'static rustls::SupportedProtocolVersion,
    target: &str,
) -> Option<u16> {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(ca.to_vec().into()).ok()?;
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&[version])
        .ok()?
        .with_root_certificates(roots)
        .with_no_client_auth();
    let name = rustls::pki_types::ServerName::try_from("app.test").ok()?;
    let conn = rustls::ClientConnection::new(std::sync::Arc::new(config), name).ok()?;
    let tcp = TcpStream::connect(("127.0.0.1", port)).ok()?;
    tcp.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    let mut tls = rustls::StreamOwned::new(conn, tcp);
    let request = format!("GET {target} HTTP/1.1\r\nHost: app.test\r\nConnection: close\r\n\r\n");
    tls.write_all(request.as_bytes()).ok()?;
    let mut answer = Vec::new();
    let _ = tls.read_to_end(&mut answer);
    String::from_utf8_lossy(&answer)
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// Asks `target` (every 100 ms, 20 s at most) until a line holding `marker` is logged.
fn logged(port: u16, lines: &Receiver<String>, target: &str, fields: &str, marker: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut seen = Vec::new();
    while Instant::now() < deadline {
        let _ = get(port, target, fields);
        while let Ok(line) = lines.recv_timeout(Duration::from_millis(100)) {
            if line.contains(marker) {
                return line;
            }
            seen.push(line);
        }
    }
    panic!("no access log line with {marker:?}; seen: {seen:#?}");
}

struct Serve(Child);

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn log_format_upstream_renders_each_line_and_follows_configmap_edits() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let web = runtime
        .block_on(EchoServer::start(
            "127.0.0.1:0",
            Identity::new("web", "web-1"),
        ))
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let canary = runtime
        .block_on(EchoServer::start(
            "127.0.0.1:0",
            Identity::new("canary", "canary-1"),
        ))
        .unwrap();
    let (ca, cert, key) = certificates();
    manifests(dir.path(), web.addr(), canary.addr(), &cert, &key);
    write_config_map(
        dir.path(),
        &[("log-format-upstream", INGRESS_NGINX_DEFAULT)],
    );
    let (http, https, admin) = (free_port(), free_port(), free_port());
    let mut child = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["serve", "--manifests"])
        .arg(dir.path())
        .args(["--configmap", "default/nginx"])
        .args(["--http-addr", &format!("127.0.0.1:{http}")])
        .args(["--https-addr", &format!("127.0.0.1:{https}")])
        .args(["--admin-addr", &format!("127.0.0.1:{admin}")])
        .args(["--access-log", "--workers", "1"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("sluice runs");
    let stdout = child.stdout.take().unwrap();
    let stderr = child.stderr.take().unwrap();
    let serve = Serve(child);
    let (lines_tx, lines_rx) = std::sync::mpsc::channel::<String>();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if lines_tx.send(line).is_err() {
                return;
            }
        }
    });
    let (said_tx, said_rx) = std::sync::mpsc::channel::<String>();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if said_tx.send(line).is_err() {
                return;
            }
        }
    });

    // ingress-nginx's default format: nginx's escaping (`"` as \x22), `-` for no referer,
    // `$remote_user` from the Basic credentials, `$req_id` from X-Request-ID.
    let fields = "User-Agent: curl \"8\"\r\nAuthorization: Basic YWxpY2U6c2VjcmV0\r\n\
                  X-Request-ID: id-default-1\r\n";
    let line = logged(http, &lines_rx, "/default?q=1", fields, "id-default-1");
    let backend = web.addr().to_string();
    assert!(line.starts_with("127.0.0.1 - alice ["), "{line}");
    assert!(
        line.contains("\"GET /default?q=1 HTTP/1.1\" 200 "),
        "{line}"
    );
    assert!(line.contains("\"-\" \"curl \\x228\\x22\""), "{line}");
    assert!(
        line.contains(&format!("[default-web-80] [] {backend} ")),
        "{line}"
    );
    assert!(line.ends_with(" 200 id-default-1"), "{line}");
    // `$time_local`: `dd/Mon/yyyy:hh:mm:ss +0000`.
    let time = line.split('[').nth(1).and_then(|t| t.split(']').next());
    assert_eq!(time.map(str::len), Some(26), "{line}");
    assert!(time.unwrap().ends_with(" +0000"), "{line}");

    // ingress-nginx's `$proxy_alternative_upstream_name`: the canary's upstream when it
    // took the request (the route's own stays in `$proxy_upstream_name`).
    let fields = "X-Canary: always\r\nX-Request-ID: id-canary-1\r\n";
    let line = logged(http, &lines_rx, "/canary", fields, "id-canary-1");
    assert!(
        line.contains(&format!(
            "[default-web-80] [default-canary-80] {} ",
            canary.addr()
        )),
        "{line}"
    );

    // Edited live: a JSON format with log-format-escape-json; every line is JSON, whatever
    // the client sent.
    write_config_map(
        dir.path(),
        &[
            ("log-format-upstream", JSON_FORMAT),
            ("log-format-escape-json", "true"),
        ],
    );
    let fields = "User-Agent: a\"b\\c\r\nX-Request-ID: id-json-1\r\n";
    // Until the edit is read: the marker is only in the JSON format's lines.
    let marker = r#""req_id":"id-json-1""#;
    let line = logged(http, &lines_rx, "/json/../json/x?a=1&b=2", fields, marker);
    let v: serde_json::Value =
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line}"));
    assert_eq!(v["remote_addr"], "127.0.0.1");
    assert_eq!(v["remote_user"], "-");
    assert_eq!(v["request"], "GET /json/../json/x?a=1&b=2 HTTP/1.1");
    assert_eq!(v["method"], "GET");
    assert_eq!(v["uri"], "/json/x", "nginx's normalised $uri");
    assert_eq!(v["args"], "a=1&b=2");
    assert_eq!(v["host"], "app.test", "$host: lower case, no port");
    assert_eq!(v["scheme"], "http");
    assert_eq!(v["protocol"], "HTTP/1.1");
    assert_eq!(v["status"], 200);
    assert!(v["bytes"].as_u64().is_some_and(|b| b > 0), "{line}");
    assert_eq!(v["agent"], "a\"b\\c");
    assert_eq!(v["upstream"], "default-web-80");
    assert_eq!(v["namespace"], "default");
    assert_eq!(v["ingress"], "app");
    assert_eq!(v["service"], "web");
    assert_eq!(v["port"], "80");
    assert!(v["request_time"].as_f64().is_some(), "{line}");
    assert_eq!(v["server_port"], http.to_string());
    assert_eq!(v["ssl_protocol"], "-", "no TLS: missing, as nginx");
    assert!(
        v["time"]
            .as_str()
            .is_some_and(|t| t.len() == 25 && t.ends_with("+00:00")),
        "{line}"
    );

    // Over TLS: nginx's `$ssl_protocol` and `$ssl_cipher` (OpenSSL's names), `$scheme`.
    for (version, protocol, cipher_prefix) in [
        (&rustls::version::TLS13, "TLSv1.3", "TLS_"),
        (&rustls::version::TLS12, "TLSv1.2", "ECDHE-"),
    ] {
        let target = format!("/tls-{protocol}");
        let deadline = Instant::now() + Duration::from_secs(20);
        let line = loop {
            assert!(Instant::now() < deadline, "no line for {target}");
            let _ = get_tls(https, &ca, version, &target);
            if let Ok(line) = lines_rx.recv_timeout(Duration::from_millis(200))
                && line.contains(&target)
            {
                break line;
            }
        };
        let v: serde_json::Value =
            serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line}"));
        assert_eq!(v["scheme"], "https", "{line}");
        assert_eq!(v["ssl_protocol"], protocol, "{line}");
        assert!(
            v["ssl_cipher"]
                .as_str()
                .is_some_and(|c| c.starts_with(cipher_prefix)),
            "{line}"
        );
        assert_eq!(v["server_port"], https.to_string());
    }

    // A format naming a variable sluice cannot supply is refused: the JSON format stays.
    write_config_map(
        dir.path(),
        &[
            ("log-format-upstream", "$remote_addr $ssl_client_s_dn"),
            ("log-format-escape-json", "true"),
        ],
    );
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let said = said_rx.recv_timeout(Duration::from_millis(200));
        if said.is_ok_and(|l| l.contains("log-format-upstream") && l.contains("$ssl_client_s_dn")) {
            break;
        }
        assert!(Instant::now() < deadline, "the refused format was not said");
    }
    // Without `$req_id` from the client, ingress-nginx makes one (32 hex digits).
    let line = logged(http, &lines_rx, "/kept", "", "/kept");
    let v: serde_json::Value =
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line}"));
    let id = v["req_id"].as_str().unwrap_or_default();
    assert!(
        id.len() == 32 && id.bytes().all(|b| b.is_ascii_hexdigit()),
        "{line}"
    );

    // The key removed: sluice's own JSON line again.
    write_config_map(dir.path(), &[]);
    let line = logged(http, &lines_rx, "/own", "", "duration_ms");
    let v: serde_json::Value =
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line}"));
    assert_eq!(v["host"], "App.Test:80");

    drop(serve);
    runtime.block_on(web.shutdown()).unwrap();
    runtime.block_on(canary.shutdown()).unwrap();
}

//! Standalone mode end to end: `serve()` over a directory of manifests, echo backends on
//! loopback, real HTTP. Reloads within a second of a file change, keeps open connections,
//! and keeps serving the last good configuration when a file turns bad or too big; the
//! manifests are read and parsed on the control plane's thread, never the proxy's.

mod standalone;
mod tls_support;

use http_body_util::{BodyExt, Empty};
use hyper::body::Bytes;
use sluice_controller::serve::serve;
use sluice_echo::{EchoServer, Identity};
use standalone::serve_args;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

fn manifests(dir: &Path, web: SocketAddr, api: SocketAddr) {
    let services = format!(
        "apiVersion: networking.k8s.io/v1
kind: IngressClass
metadata: {{name: sluice, annotations: {{ingressclass.kubernetes.io/is-default-class: \"true\"}}}}
spec: {{controller: sluice.dev/ingress-controller}}
---
apiVersion: v1
kind: Service
metadata: {{name: web}}
spec: {{ports: [{{name: http, port: 80}}]}}
---
apiVersion: v1
kind: Endpoints
metadata: {{name: web}}
subsets: [{{addresses: [{{ip: 127.0.0.1}}], ports: [{{name: http, port: {}}}]}}]
---
apiVersion: v1
kind: Service
metadata: {{name: api}}
spec: {{ports: [{{name: http, port: 80}}]}}
---
apiVersion: v1
kind: Endpoints
metadata: {{name: api}}
subsets: [{{addresses: [{{ip: 127.0.0.1}}], ports: [{{name: http, port: {}}}]}}]
",
        web.port(),
        api.port()
    );
    std::fs::write(dir.join("services.yaml"), services).unwrap();
    write_ingress(dir, "web");
}

fn write_ingress(dir: &Path, service: &str) {
    let ingress = format!(
        "apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: {{name: app}}
spec:
  rules:
  - host: app.test
    http:
      paths:
      - {{path: /, pathType: Prefix, backend: {{service: {{name: {service}, port: {{name: http}}}}}}}}
"
    );
    // Write then rename, as editors and config tools do: never a half-written file.
    let tmp = dir.join(".ingress.yaml.tmp");
    std::fs::write(&tmp, ingress).unwrap();
    std::fs::rename(&tmp, dir.join("ingress.yaml")).unwrap();
}

type Conn = hyper::client::conn::http1::SendRequest<Empty<Bytes>>;

async fn connect(addr: SocketAddr) -> Conn {
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (send, conn) = hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tcp))
        .await
        .unwrap();
    tokio::spawn(conn);
    send
}

/// (status, service that answered) over an existing keep-alive connection.
async fn ask(conn: &mut Conn) -> (u16, String) {
    let req = hyper::Request::get("/")
        .header("host", "app.test")
        .body(Empty::new())
        .unwrap();
    let resp = tokio::time::timeout(Duration::from_secs(5), conn.send_request(req))
        .await
        .unwrap()
        .unwrap();
    let status = resp.status().as_u16();
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    let json: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
    (status, json["service"].as_str().unwrap_or("").to_string())
}

/// Every log line of this test binary (with thread names), for the tests to look into.
fn logs() -> &'static Arc<Mutex<Vec<u8>>> {
    static LOGS: OnceLock<Arc<Mutex<Vec<u8>>>> = OnceLock::new();
    LOGS.get_or_init(|| {
        let logs = Arc::new(Mutex::new(Vec::new()));
        let sink = logs.clone();
        let _ = tracing_subscriber::fmt()
            .with_env_filter("sluice_controller=info")
            .with_thread_names(true)
            .with_ansi(false)
            .with_writer(move || LogWriter(sink.clone()))
            .try_init();
        logs
    })
}

struct LogWriter(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for LogWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Log lines that contain `needle`.
fn log_lines(needle: &str) -> Vec<String> {
    let logs = logs().lock().unwrap_or_else(|e| e.into_inner());
    String::from_utf8_lossy(&logs)
        .lines()
        .filter(|l| l.contains(needle))
        .map(str::to_string)
        .collect()
}

#[tokio::test]
async fn a_file_over_the_size_limit_is_refused_and_manifests_are_parsed_off_the_proxy() {
    logs();
    let web = EchoServer::start("127.0.0.1:0", Identity::new("web", "web-1"))
        .await
        .unwrap();
    let api = EchoServer::start("127.0.0.1:0", Identity::new("api", "api-1"))
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    manifests(dir.path(), web.addr(), api.addr());
    let (args, addr) = serve_args(dir.path(), &["--max-manifest-bytes", "64KiB"]);
    assert_eq!(args.max_manifest_bytes, 64 << 10);
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(serve(args, async move {
        let _ = stopped.await;
    }));
    sluice_testenv::eventually(Duration::from_secs(10), "listening", || async {
        tokio::net::TcpStream::connect(addr).await.ok().map(drop)
    })
    .await
    .unwrap();
    let mut conn = connect(addr).await;
    assert_eq!(ask(&mut conn).await, (200, "web".to_string()));

    // 1 MiB of valid YAML (a comment) over a 64 KiB limit, next to a change that is fine.
    let big = dir.path().join("big.yaml");
    std::fs::write(&big, format!("#{}\n", "x".repeat((1 << 20) - 2))).unwrap();
    write_ingress(dir.path(), "api");
    // On the connection opened before: the proxy kept serving while big.yaml was looked at.
    let changed = Instant::now();
    while ask(&mut conn).await != (200, "api".to_string()) {
        assert!(
            changed.elapsed() < Duration::from_secs(5),
            "change not applied"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    tokio::time::sleep(Duration::from_millis(600)).await; // a few more polls
    let refused = log_lines(&format!(
        "{}: file is 1048576 bytes, over --max-manifest-bytes (65536)",
        big.display()
    ));
    assert_eq!(refused.len(), 1, "refused once, by name: {refused:?}");

    // Everything read from the directory was read on the control plane's thread.
    let dir_name = dir.path().display().to_string();
    let reads: Vec<String> = log_lines(&dir_name)
        .into_iter()
        .filter(|l| l.contains("manifests loaded") || l.contains("manifest file rejected"))
        .collect();
    assert!(reads.len() >= 3, "{reads:?}");
    for line in &reads {
        assert!(
            line.contains(" sluice-control "),
            "not on the control thread: {line}"
        );
    }

    let _ = stop.send(());
    tokio::time::timeout(Duration::from_secs(10), server)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    web.shutdown().await.unwrap();
    api.shutdown().await.unwrap();
}

#[tokio::test]
async fn reloads_on_change_keeps_connections_and_survives_a_bad_file() {
    logs();
    let web = EchoServer::start("127.0.0.1:0", Identity::new("web", "web-1"))
        .await
        .unwrap();
    let api = EchoServer::start("127.0.0.1:0", Identity::new("api", "api-1"))
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    manifests(dir.path(), web.addr(), api.addr());
    let (args, addr) = serve_args(dir.path(), &[]);
    assert_eq!(args.max_manifest_bytes, 16 << 20, "default limit");
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(serve(args, async move {
        let _ = stopped.await;
    }));
    sluice_testenv::eventually(Duration::from_secs(10), "listening", || async {
        tokio::net::TcpStream::connect(addr).await.ok().map(drop)
    })
    .await
    .unwrap();

    let mut conn = connect(addr).await;
    assert_eq!(ask(&mut conn).await, (200, "web".to_string()));

    // A change is served within a second, on the connection that was already open.
    write_ingress(dir.path(), "api");
    let changed = Instant::now();
    loop {
        if ask(&mut conn).await == (200, "api".to_string()) {
            break;
        }
        assert!(
            changed.elapsed() < Duration::from_secs(5),
            "change not applied"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    eprintln!(
        "standalone reload: change served after {:?}",
        changed.elapsed()
    );

    // A bad file: reported, and the last good configuration keeps serving.
    std::fs::write(
        dir.path().join("ingress.yaml"),
        "apiVersion: networking.k8s.io/v1\nkind: Ingress\n  oops: [",
    )
    .unwrap();
    tokio::time::sleep(Duration::from_millis(800)).await;
    for _ in 0..5 {
        assert_eq!(
            ask(&mut conn).await,
            (200, "api".to_string()),
            "last good configuration serves"
        );
    }
    // Fixed again: applied.
    write_ingress(dir.path(), "web");
    sluice_testenv::eventually(Duration::from_secs(5), "fixed file applied", || async {
        let mut c = connect(addr).await;
        (ask(&mut c).await == (200, "web".to_string())).then_some(())
    })
    .await
    .unwrap();

    let _ = stop.send(());
    tokio::time::timeout(Duration::from_secs(10), server)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    web.shutdown().await.unwrap();
    api.shutdown().await.unwrap();
}

/// (status, service that answered) of `GET /` with `Host: host` on a new connection.
async fn ask_host(addr: SocketAddr, host: &str) -> (u16, String) {
    let mut conn = connect(addr).await;
    let req = hyper::Request::get("/")
        .header("host", host)
        .body(Empty::new())
        .unwrap();
    let resp = tokio::time::timeout(Duration::from_secs(5), conn.send_request(req))
        .await
        .unwrap()
        .unwrap();
    let status = resp.status().as_u16();
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    let json: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
    (status, json["service"].as_str().unwrap_or("").to_string())
}

/// Writes `default-tls.json`, a TLS Secret, by rename.
fn write_default_secret(dir: &Path, cert: &str, key: &str) {
    use base64::Engine;
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    let secret = serde_json::json!({
        "apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
        "metadata": {"name": "default-tls"},
        "data": {"tls.crt": b64(cert), "tls.key": b64(key)},
    });
    let tmp = dir.join(".default-tls.json.tmp");
    std::fs::write(&tmp, secret.to_string()).unwrap();
    std::fs::rename(&tmp, dir.join("default-tls.json")).unwrap();
}

#[tokio::test]
async fn default_backend_default_certificate_and_class_less_ingresses_from_flags() {
    logs();
    let web = EchoServer::start("127.0.0.1:0", Identity::new("web", "web-1"))
        .await
        .unwrap();
    let fallback = EchoServer::start("127.0.0.1:0", Identity::new("fallback", "fallback-1"))
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    // Our IngressClass is not the default class, and the Ingress names no class.
    let objects = format!(
        "apiVersion: networking.k8s.io/v1
kind: IngressClass
metadata: {{name: sluice}}
spec: {{controller: sluice.dev/ingress-controller}}
---
apiVersion: v1
kind: Service
metadata: {{name: web}}
spec: {{ports: [{{name: http, port: 80}}]}}
---
apiVersion: v1
kind: Endpoints
metadata: {{name: web}}
subsets: [{{addresses: [{{ip: 127.0.0.1}}], ports: [{{name: http, port: {}}}]}}]
---
apiVersion: v1
kind: Service
metadata: {{name: fallback}}
spec: {{ports: [{{name: web, port: 8080}}, {{name: other, port: 9090}}]}}
---
apiVersion: v1
kind: Endpoints
metadata: {{name: fallback}}
subsets: [{{addresses: [{{ip: 127.0.0.1}}], ports: [{{name: web, port: {}}}]}}]
---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: {{name: app}}
spec:
  rules:
  - host: app.test
    http:
      paths:
      - {{path: /, pathType: Prefix, backend: {{service: {{name: web, port: {{name: http}}}}}}}}
",
        web.addr().port(),
        fallback.addr().port()
    );
    std::fs::write(dir.path().join("objects.yaml"), objects).unwrap();
    let https_port = sluice_testenv::free_port().unwrap();
    let https_flag = format!("127.0.0.1:{https_port}");
    let https = SocketAddr::from(([127, 0, 0, 1], https_port));
    let (args, addr) = serve_args(
        dir.path(),
        &[
            "--https-addr",
            &https_flag,
            "--watch-ingress-without-class",
            "--default-backend-service",
            "default/fallback",
            "--default-ssl-certificate",
            "default/default-tls",
        ],
    );
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(serve(args, async move {
        let _ = stopped.await;
    }));
    sluice_testenv::eventually(Duration::from_secs(10), "listening", || async {
        tokio::net::TcpStream::connect(addr).await.ok().map(drop)
    })
    .await
    .unwrap();

    // The class-less Ingress is ours; what no rule matches goes to the fallback Service.
    assert_eq!(ask_host(addr, "app.test").await, (200, "web".to_string()));
    assert_eq!(
        ask_host(addr, "other.test").await,
        (200, "fallback".to_string())
    );

    // The Secret is missing: said so, naming the flag and the Secret; the generated
    // certificate is served meanwhile.
    let missing = log_lines("--default-ssl-certificate");
    assert!(
        missing
            .iter()
            .any(|l| l.contains("Secret default/default-tls") && l.contains("not found")),
        "{missing:?}"
    );
    let (cert, key, ca) = tls_support::ca_and_leaf(&["unknown.test"]).unwrap();
    assert!(
        tls_support::tls_get(https, &ca, "unknown.test")
            .await
            .is_err()
    );

    // The Secret appears in the directory, then is renewed: followed both times.
    write_default_secret(dir.path(), &cert, &key);
    tls_support::until_tls(https, &ca, "unknown.test", "fallback", 200)
        .await
        .unwrap();
    let (cert2, key2, ca2) = tls_support::ca_and_leaf(&["unknown.test"]).unwrap();
    write_default_secret(dir.path(), &cert2, &key2);
    tls_support::until_tls(https, &ca2, "unknown.test", "fallback", 200)
        .await
        .unwrap();

    let _ = stop.send(());
    tokio::time::timeout(Duration::from_secs(10), server)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    web.shutdown().await.unwrap();
    fallback.shutdown().await.unwrap();
}

/// Writes `lonely.yaml`: Ingress `lonely` for host lonely.test, with `class` as its
/// spec.ingressClassName (none when `None`), by rename.
fn write_lonely_ingress(dir: &Path, class: Option<&str>) {
    let class = class
        .map(|c| format!("  ingressClassName: {c}\n"))
        .unwrap_or_default();
    let ingress = format!(
        "apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: {{name: lonely}}
spec:
{class}  rules:
  - host: lonely.test
    http:
      paths:
      - {{path: /, pathType: Prefix, backend: {{service: {{name: web, port: {{name: http}}}}}}}}
"
    );
    let tmp = dir.join(".lonely.yaml.tmp");
    std::fs::write(&tmp, ingress).unwrap();
    std::fs::rename(&tmp, dir.join("lonely.yaml")).unwrap();
}

#[tokio::test]
async fn an_ingress_no_class_selects_is_named_once_per_change_with_what_to_add() {
    logs();
    let web = EchoServer::start("127.0.0.1:0", Identity::new("web", "web-1"))
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    // Our IngressClass exists but is not the default class; the Ingress names no class.
    let objects = format!(
        "apiVersion: networking.k8s.io/v1
kind: IngressClass
metadata: {{name: sluice}}
spec: {{controller: sluice.dev/ingress-controller}}
---
apiVersion: v1
kind: Service
metadata: {{name: web}}
spec: {{ports: [{{name: http, port: 80}}]}}
---
apiVersion: v1
kind: Endpoints
metadata: {{name: web}}
subsets: [{{addresses: [{{ip: 127.0.0.1}}], ports: [{{name: http, port: {}}}]}}]
",
        web.addr().port()
    );
    std::fs::write(dir.path().join("objects.yaml"), objects).unwrap();
    write_lonely_ingress(dir.path(), None);
    let (args, addr) = serve_args(dir.path(), &[]);
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(serve(args, async move {
        let _ = stopped.await;
    }));
    let warned = |needle: &'static str| {
        log_lines("Ingress default/lonely is not served")
            .into_iter()
            .filter(|l| l.contains(needle))
            .collect::<Vec<_>>()
    };
    let no_class = "it has no spec.ingressClassName and IngressClass sluice is not the default \
                    class. Add spec.ingressClassName: sluice, or annotate IngressClass sluice \
                    with ingressclass.kubernetes.io/is-default-class: \"true\"";
    sluice_testenv::eventually(Duration::from_secs(10), "the warning", || async {
        (!warned(no_class).is_empty()).then_some(())
    })
    .await
    .unwrap();
    assert!(
        warned(no_class)[0].contains("WARN"),
        "{:?}",
        warned(no_class)
    );
    assert_eq!(ask_host(addr, "lonely.test").await.0, 404, "not served");

    // Reloads that do not change it stay silent: another Ingress comes and is served.
    let other = "apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: {name: other}
spec:
  ingressClassName: sluice
  rules:
  - host: other.test
    http:
      paths:
      - {path: /, pathType: Prefix, backend: {service: {name: web, port: {name: http}}}}
";
    std::fs::write(dir.path().join("other.yaml"), other).unwrap();
    sluice_testenv::eventually(Duration::from_secs(10), "other.test served", || async {
        (ask_host(addr, "other.test").await == (200, "web".to_string())).then_some(())
    })
    .await
    .unwrap();
    std::fs::write(
        dir.path().join("other.yaml"),
        other.replace("other.test", "other2.test"),
    )
    .unwrap();
    sluice_testenv::eventually(Duration::from_secs(10), "other2.test served", || async {
        (ask_host(addr, "other2.test").await.0 == 200).then_some(())
    })
    .await
    .unwrap();
    assert_eq!(warned("").len(), 1, "{:?}", warned(""));

    // Changed to a class that does not exist: named again, with the new reason.
    write_lonely_ingress(dir.path(), Some("nginx"));
    let unknown = "spec.ingressClassName: nginx, and the manifests hold no IngressClass nginx. \
                   Set spec.ingressClassName: sluice";
    sluice_testenv::eventually(Duration::from_secs(10), "the second warning", || async {
        (!warned(unknown).is_empty()).then_some(())
    })
    .await
    .unwrap();
    assert_eq!(
        ask_host(addr, "lonely.test").await.0,
        404,
        "still not served"
    );

    // Fixed as told: served, and nothing more is said about it.
    write_lonely_ingress(dir.path(), Some("sluice"));
    sluice_testenv::eventually(Duration::from_secs(10), "lonely.test served", || async {
        (ask_host(addr, "lonely.test").await == (200, "web".to_string())).then_some(())
    })
    .await
    .unwrap();
    let all = warned("");
    assert_eq!(all.len(), 2, "one line per change: {all:?}");
    assert_eq!(warned(no_class).len(), 1);
    assert_eq!(warned(unknown).len(), 1);

    let _ = stop.send(());
    tokio::time::timeout(Duration::from_secs(10), server)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    web.shutdown().await.unwrap();
}

/// Standalone mode reads the Gateway API kinds from the directory too: a GatewayClass of
/// the default controller name, a Gateway, an HTTPRoute (at `v1beta1`, which the API
/// serves too) and a Namespace route requests next to the Ingresses, and a later edit of
/// the route is applied like any other file.
#[tokio::test]
async fn gateway_api_manifests_route_next_to_ingresses() {
    logs();
    let web = EchoServer::start("127.0.0.1:0", Identity::new("web", "web-1"))
        .await
        .unwrap();
    let api = EchoServer::start("127.0.0.1:0", Identity::new("api", "api-1"))
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    manifests(dir.path(), web.addr(), api.addr());
    let gateway = |service: &str| {
        format!(
            "apiVersion: v1
kind: Namespace
metadata: {{name: default, labels: {{team: shop}}}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {{name: sluice}}
spec: {{controllerName: sluice.dev/gateway-controller}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: edge}}
spec:
  gatewayClassName: sluice
  listeners:
  - {{name: http, port: 80, protocol: HTTP, allowedRoutes: {{namespaces: {{from: Selector, selector: {{matchLabels: {{team: shop}}}}}}}}}}
---
apiVersion: gateway.networking.k8s.io/v1beta1
kind: HTTPRoute
metadata: {{name: gw}}
spec:
  parentRefs: [{{name: edge}}]
  hostnames: [gw.test]
  rules:
  - backendRefs: [{{name: {service}, port: 80}}]
"
        )
    };
    let write = |service: &str| {
        let tmp = dir.path().join(".gateway.yaml.tmp");
        std::fs::write(&tmp, gateway(service)).unwrap();
        std::fs::rename(&tmp, dir.path().join("gateway.yaml")).unwrap();
    };
    write("api");
    let (args, addr) = serve_args(dir.path(), &[]);
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(serve(args, async move {
        let _ = stopped.await;
    }));
    sluice_testenv::eventually(Duration::from_secs(10), "HTTPRoute served", || async {
        tokio::net::TcpStream::connect(addr).await.ok()?;
        (ask_host(addr, "gw.test").await == (200, "api".to_string())).then_some(())
    })
    .await
    .unwrap();
    assert_eq!(ask_host(addr, "app.test").await, (200, "web".to_string()));

    write("web");
    sluice_testenv::eventually(Duration::from_secs(5), "edited route applied", || async {
        (ask_host(addr, "gw.test").await == (200, "web".to_string())).then_some(())
    })
    .await
    .unwrap();

    let _ = stop.send(());
    tokio::time::timeout(Duration::from_secs(10), server)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    web.shutdown().await.unwrap();
    api.shutdown().await.unwrap();
}

/// Writes `config.yaml`: ingress-nginx's ConfigMap `default/nginx` with `data`, by rename.
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

/// ingress-nginx "ConfigMaps" (`--configmap`): a key that is also an annotation is every
/// Ingress's default, read live; an Ingress's own annotation wins; a key of the whole
/// proxy applies live too; `block-cidrs` refuses its clients everywhere; a value that stops
/// parsing keeps the previous one, and is said.
#[tokio::test]
async fn the_ingress_nginx_configmap_sets_defaults_live() {
    logs();
    let web = EchoServer::start("127.0.0.1:0", Identity::new("web", "web-1"))
        .await
        .unwrap();
    let api = EchoServer::start("127.0.0.1:0", Identity::new("api", "api-1"))
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    manifests(dir.path(), web.addr(), api.addr());
    // A second Ingress whose own annotation lets loopback in.
    std::fs::write(
        dir.path().join("own.yaml"),
        "apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: own
  annotations: {nginx.ingress.kubernetes.io/whitelist-source-range: 127.0.0.0/8}
spec:
  rules:
  - host: own.test
    http:
      paths:
      - {path: /, pathType: Prefix, backend: {service: {name: api, port: {name: http}}}}
",
    )
    .unwrap();
    write_config_map(dir.path(), &[("whitelist-source-range", "10.0.0.0/8")]);
    let (args, addr) = serve_args(dir.path(), &["--configmap", "default/nginx"]);
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(serve(args, async move {
        let _ = stopped.await;
    }));
    sluice_testenv::eventually(Duration::from_secs(10), "listening", || async {
        tokio::net::TcpStream::connect(addr).await.ok().map(drop)
    })
    .await
    .unwrap();
    let status = |host: &'static str| async move { ask_host(addr, host).await.0 };
    sluice_testenv::eventually(Duration::from_secs(10), "the ConfigMap's range", || async {
        (status("app.test").await == 403).then_some(())
    })
    .await
    .unwrap();
    assert_eq!(status("own.test").await, 200, "the annotation wins");

    // Changed: followed without a restart.
    write_config_map(dir.path(), &[("whitelist-source-range", "127.0.0.1/32")]);
    sluice_testenv::eventually(Duration::from_secs(10), "the new range", || async {
        (status("app.test").await == 200).then_some(())
    })
    .await
    .unwrap();

    // A bad value: the previous one stays, and the log names the key.
    write_config_map(
        dir.path(),
        &[
            ("whitelist-source-range", "not-a-cidr"),
            ("use-gzip", "true"),
        ],
    );
    sluice_testenv::eventually(Duration::from_secs(10), "the bad value said", || async {
        (!log_lines("data[whitelist-source-range]").is_empty()).then_some(())
    })
    .await
    .unwrap();
    assert_eq!(status("app.test").await, 200, "127.0.0.1/32 stays in force");

    // A key of the whole proxy, live: with use-forwarded-headers the range checks the
    // client a trusted peer names (ingress-nginx's realip `$remote_addr`).
    write_config_map(
        dir.path(),
        &[
            ("whitelist-source-range", "203.0.113.0/24"),
            ("use-forwarded-headers", "true"),
            ("proxy-real-ip-cidr", "127.0.0.1/32"),
        ],
    );
    let forwarded = |client: &'static str| async move {
        let mut conn = connect(addr).await;
        let req = hyper::Request::get("/")
            .header("host", "app.test")
            .header("x-forwarded-for", client)
            .body(Empty::new())
            .unwrap();
        tokio::time::timeout(Duration::from_secs(5), conn.send_request(req))
            .await
            .unwrap()
            .unwrap()
            .status()
            .as_u16()
    };
    // Until the new ConfigMap is read, loopback itself is allowed (127.0.0.1/32).
    sluice_testenv::eventually(Duration::from_secs(10), "the forwarded client", || async {
        (forwarded("198.51.100.5").await == 403).then_some(())
    })
    .await
    .unwrap();
    assert_eq!(forwarded("203.0.113.5").await, 200);

    // block-cidrs refuses loopback on every route, annotations or not.
    write_config_map(dir.path(), &[("block-cidrs", "127.0.0.0/8")]);
    sluice_testenv::eventually(Duration::from_secs(10), "blocked", || async {
        (status("app.test").await == 403 && status("own.test").await == 403).then_some(())
    })
    .await
    .unwrap();

    let _ = stop.send(());
    tokio::time::timeout(Duration::from_secs(10), server)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    web.shutdown().await.unwrap();
    api.shutdown().await.unwrap();
}

/// ingress-nginx `allow-snippet-annotations` (with `annotations-risk-level: Critical`, as
/// ingress-nginx >= 1.12 requires for snippets), read live: turning it on makes an Ingress's
/// `configuration-snippet` apply without a restart, turning it off refuses it again.
#[tokio::test]
async fn allow_snippet_annotations_applies_a_configuration_snippet_live() {
    logs();
    let web = EchoServer::start("127.0.0.1:0", Identity::new("web", "web-1"))
        .await
        .unwrap();
    let api = EchoServer::start("127.0.0.1:0", Identity::new("api", "api-1"))
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    manifests(dir.path(), web.addr(), api.addr());
    std::fs::write(
        dir.path().join("snippet.yaml"),
        "apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: snippet
  annotations:
    nginx.ingress.kubernetes.io/configuration-snippet: |
      return 307 https://moved.test$request_uri;
spec:
  rules:
  - host: snippet.test
    http:
      paths:
      - {path: /, pathType: Prefix, backend: {service: {name: api, port: {name: http}}}}
",
    )
    .unwrap();
    write_config_map(dir.path(), &[("allow-snippet-annotations", "false")]);
    let (args, addr) = serve_args(dir.path(), &["--configmap", "default/nginx"]);
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(serve(args, async move {
        let _ = stopped.await;
    }));
    sluice_testenv::eventually(Duration::from_secs(10), "listening", || async {
        tokio::net::TcpStream::connect(addr).await.ok().map(drop)
    })
    .await
    .unwrap();
    let status = |host: &'static str| async move { ask_host(addr, host).await.0 };
    sluice_testenv::eventually(
        Duration::from_secs(10),
        "served, snippet refused",
        || async { (status("snippet.test").await == 200).then_some(()) },
    )
    .await
    .unwrap();

    write_config_map(
        dir.path(),
        &[
            ("allow-snippet-annotations", "true"),
            ("annotations-risk-level", "Critical"),
        ],
    );
    sluice_testenv::eventually(Duration::from_secs(10), "the snippet's return", || async {
        (status("snippet.test").await == 307).then_some(())
    })
    .await
    .unwrap();

    write_config_map(dir.path(), &[("allow-snippet-annotations", "true")]);
    sluice_testenv::eventually(Duration::from_secs(10), "refused again", || async {
        (status("snippet.test").await == 200).then_some(())
    })
    .await
    .unwrap();

    let _ = stop.send(());
    tokio::time::timeout(Duration::from_secs(10), server)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    web.shutdown().await.unwrap();
    api.shutdown().await.unwrap();
}

/// ingress-nginx docs, "External Authentication" (`auth-proxy-set-headers`): the ConfigMap
/// an annotation names is read from the manifest directory, live. Missing, the route is
/// closed (503, as ingress-nginx denies the location); once its file is there, the auth
/// check runs (an echo server answering 200 stands for the auth service) and lets in.
#[tokio::test]
async fn annotation_config_maps_come_from_the_manifest_directory() {
    logs();
    let web = EchoServer::start("127.0.0.1:0", Identity::new("web", "web-1"))
        .await
        .unwrap();
    let api = EchoServer::start("127.0.0.1:0", Identity::new("api", "api-1"))
        .await
        .unwrap();
    let auth = EchoServer::start("127.0.0.1:0", Identity::new("auth", "auth-1"))
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    manifests(dir.path(), web.addr(), api.addr());
    std::fs::write(
        dir.path().join("guarded.yaml"),
        format!(
            "apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: guarded
  annotations:
    nginx.ingress.kubernetes.io/auth-url: http://{}/verify
    nginx.ingress.kubernetes.io/auth-proxy-set-headers: auth-headers
spec:
  rules:
  - host: guarded.test
    http:
      paths:
      - {{path: /, pathType: Prefix, backend: {{service: {{name: api, port: {{name: http}}}}}}}}
",
            auth.addr()
        ),
    )
    .unwrap();
    let (args, addr) = serve_args(dir.path(), &[]);
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(serve(args, async move {
        let _ = stopped.await;
    }));
    sluice_testenv::eventually(Duration::from_secs(10), "listening", || async {
        tokio::net::TcpStream::connect(addr).await.ok().map(drop)
    })
    .await
    .unwrap();
    let status = |host: &'static str| async move { ask_host(addr, host).await.0 };
    sluice_testenv::eventually(
        Duration::from_secs(10),
        "closed without its ConfigMap",
        || async { (status("guarded.test").await == 503).then_some(()) },
    )
    .await
    .unwrap();
    std::fs::write(
        dir.path().join("auth-headers.yaml"),
        "apiVersion: v1
kind: ConfigMap
metadata: {name: auth-headers, namespace: default}
data: {X-Tenant: acme}
",
    )
    .unwrap();
    sluice_testenv::eventually(
        Duration::from_secs(10),
        "open with its ConfigMap",
        || async {
            (ask_host(addr, "guarded.test").await == (200, "api".to_owned())).then_some(())
        },
    )
    .await
    .unwrap();

    let _ = stop.send(());
    tokio::time::timeout(Duration::from_secs(10), server)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    for echo in [web, api, auth] {
        echo.shutdown().await.unwrap();
    }
}

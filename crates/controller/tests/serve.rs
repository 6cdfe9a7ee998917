//! Standalone mode end to end: `serve()` over a directory of manifests, echo backends on
//! loopback, real HTTP. Reloads within a second of a file change, keeps open connections,
//! and keeps serving the last good configuration when a file turns bad.

use clap::Parser;
use http_body_util::{BodyExt, Empty};
use hyper::body::Bytes;
use sluice_controller::serve::{ServeArgs, serve};
use sluice_echo::{EchoServer, Identity};
use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    args: ServeArgs,
}

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

#[tokio::test]
async fn reloads_on_change_keeps_connections_and_survives_a_bad_file() {
    let web = EchoServer::start("127.0.0.1:0", Identity::new("web", "web-1"))
        .await
        .unwrap();
    let api = EchoServer::start("127.0.0.1:0", Identity::new("api", "api-1"))
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    manifests(dir.path(), web.addr(), api.addr());
    let (http, admin) = (
        sluice_testenv::free_port().unwrap(),
        sluice_testenv::free_port().unwrap(),
    );
    let args = Cli::try_parse_from([
        "serve",
        "--manifests",
        dir.path().to_str().unwrap(),
        "--http-addr",
        &format!("127.0.0.1:{http}"),
        "--https-addr",
        "127.0.0.1:0",
        "--admin-addr",
        &format!("127.0.0.1:{admin}"),
    ])
    .unwrap()
    .args;
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(serve(args, async move {
        let _ = stopped.await;
    }));
    let addr = SocketAddr::from(([127, 0, 0, 1], http));
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

//! The two security regressions of the ingress-nginx drop-in, end to end through `sluice
//! serve` (manifests compiled as the controller compiles them, the real proxy, echo backends
//! on loopback), on both front ends: a bodiless GET (sluice's own HTTP/1.1 loop) and a POST
//! with a body (hyper's path).
//!
//! 1. Matching sees the path as nginx does before it matches locations (ngx_http_parse_complex_uri:
//!    `%XX` decoded, `.`/`..` resolved, slashes merged; 400 for a path above the root), for
//!    Ingress and Gateway API routes alike, so `/%61dmin`, `//admin`, `/./admin` and
//!    `/x/../admin` meet the access rules of `/admin`. Upstream gets the request target as the
//!    client sent it (nginx's `proxy_pass` without a URI part).
//! 2. Access annotations sluice does not implement fail closed: ingress-nginx marks such a
//!    location denied and answers 503; it never serves it open.

mod standalone;

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use sluice_controller::serve::serve;
use sluice_echo::{EchoServer, Identity};
use standalone::serve_args;
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

/// (label, method, body): one request shape per front end.
const SHAPES: [(&str, &str, &str); 2] =
    [("own loop GET", "GET", ""), ("hyper POST", "POST", "x=1")];

/// The objects: `app.test` with `/admin` open to 10.0.0.0/8 only and `/` open to all;
/// `basic.test` with basic authentication whose Secret is missing (closed); `snippet.test` whose
/// refused snippet holds `deny`; `gw.test`, an HTTPRoute with `/admin` -> admin and `/` ->
/// web.
fn write_manifests(dir: &Path, web: SocketAddr, admin: SocketAddr) {
    let service = |name: &str, port: u16| {
        format!(
            "apiVersion: v1
kind: Service
metadata: {{name: {name}}}
spec: {{ports: [{{name: http, port: 80}}]}}
---
apiVersion: v1
kind: Endpoints
metadata: {{name: {name}}}
subsets: [{{addresses: [{{ip: 127.0.0.1}}], ports: [{{name: http, port: {port}}}]}}]
---
"
        )
    };
    let ingress = |name: &str, host: &str, path: &str, svc: &str, annotations: &str| {
        format!(
            "apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: {name}
  annotations: {{{annotations}}}
spec:
  ingressClassName: sluice
  rules:
  - host: {host}
    http:
      paths:
      - {{path: {path}, pathType: Prefix, backend: {{service: {{name: {svc}, port: {{name: http}}}}}}}}
---
"
        )
    };
    let nginx = "nginx.ingress.kubernetes.io";
    let mut all = String::from(
        "apiVersion: networking.k8s.io/v1
kind: IngressClass
metadata: {name: sluice}
spec: {controller: sluice.dev/ingress-controller}
---
",
    );
    all += &service("web", web.port());
    all += &service("admin", admin.port());
    all += &ingress(
        "admin",
        "app.test",
        "/admin",
        "admin",
        &format!("{nginx}/whitelist-source-range: 10.0.0.0/8"),
    );
    all += &ingress("site", "app.test", "/", "web", "");
    all += &ingress(
        "basic",
        "basic.test",
        "/",
        "web",
        &format!(
            "{nginx}/auth-type: basic, {nginx}/auth-secret: htpasswd, {nginx}/auth-realm: Staff"
        ),
    );
    all += &ingress(
        "snippet",
        "snippet.test",
        "/",
        "web",
        &format!("\"{nginx}/configuration-snippet\": \"allow 10.0.0.0/8; deny all;\""),
    );
    all += "apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {name: sluice}
spec: {controllerName: sluice.dev/gateway-controller}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: edge}
spec:
  gatewayClassName: sluice
  listeners:
  - {name: http, port: 80, protocol: HTTP}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: gw}
spec:
  parentRefs: [{name: edge}]
  hostnames: [gw.test]
  rules:
  - matches: [{path: {type: PathPrefix, value: /admin}}]
    backendRefs: [{name: admin, port: 80}]
  - matches: [{path: {type: PathPrefix, value: /}}]
    backendRefs: [{name: web, port: 80}]
";
    std::fs::write(dir.join("all.yaml"), all).unwrap();
}

/// An answer: status, and for echo answers the Service and the path the backend received.
#[derive(Debug, PartialEq, Eq)]
struct Seen {
    status: u16,
    service: String,
    path: String,
}

async fn ask(addr: SocketAddr, (method, body): (&str, &str), host: &str, path: &str) -> Seen {
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (mut send, conn) = hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tcp))
        .await
        .unwrap();
    tokio::spawn(conn);
    // The target goes on the wire byte for byte as written here.
    let request = hyper::Request::builder()
        .method(method)
        .uri(path)
        .header("host", host)
        .body(Full::new(Bytes::from(body.to_owned())))
        .unwrap();
    let response = tokio::time::timeout(Duration::from_secs(5), send.send_request(request))
        .await
        .expect("answer within 5 s")
        .expect("a response");
    let status = response.status().as_u16();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    let json: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
    Seen {
        status,
        service: json["service"].as_str().unwrap_or("").to_owned(),
        path: json["path"].as_str().unwrap_or("").to_owned(),
    }
}

#[tokio::test]
async fn matching_sees_the_path_as_nginx_does_and_access_annotations_fail_closed() {
    let web = EchoServer::start("127.0.0.1:0", Identity::new("web", "web-1"))
        .await
        .unwrap();
    let admin = EchoServer::start("127.0.0.1:0", Identity::new("admin", "admin-1"))
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    write_manifests(dir.path(), web.addr(), admin.addr());
    let (args, addr) = serve_args(dir.path(), &[]);
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(serve(args, async move {
        let _ = stopped.await;
    }));
    // Dropped on every path out, panics included: the server task stops with the runtime.
    sluice_testenv::eventually(Duration::from_secs(10), "routes served", || async {
        tokio::net::TcpStream::connect(addr).await.ok()?;
        let shape = ("GET", "");
        (ask(addr, shape, "gw.test", "/").await.status == 200).then_some(())
    })
    .await
    .unwrap();

    for (label, method, body) in SHAPES {
        let shape = (method, body);
        // ingress-nginx: `/admin` is open to 10.0.0.0/8 only; the client is 127.0.0.1.
        for path in [
            "/admin",
            "/%61dmin",
            "/%61%64%6D%69%6E/x",
            "//admin",
            "///admin//x",
            "/./admin",
            "/x/../admin",
            "/x/%2e%2e/admin",
            "/admin%2Fx",
            "/public/.%2E/admin",
        ] {
            let seen = ask(addr, shape, "app.test", path).await;
            assert_eq!(seen.status, 403, "{label}: {path} meets /admin's allowlist");
        }
        // nginx answers 400 for a path above the root; an encoded slash next to dot
        // segments has no safe reading.
        for path in [
            "/../admin",
            "/a/../../admin",
            "/%2e%2e/admin",
            "/a%2F..%2Fadmin",
            "/a%zz",
            "/a%00",
        ] {
            let seen = ask(addr, shape, "app.test", path).await;
            assert_eq!(seen.status, 400, "{label}: {path}");
        }
        // What passes goes upstream as the client sent it (nginx's proxy_pass without URI).
        for (path, sent) in [
            ("/public", "/public"),
            ("/x/../public", "/x/../public"),
            ("//public", "//public"),
            ("/%70ublic", "/%70ublic"),
            ("/administrator", "/administrator"),
        ] {
            let seen = ask(addr, shape, "app.test", path).await;
            assert_eq!(
                (seen.status, seen.service.as_str(), seen.path.as_str()),
                (200, "web", sent),
                "{label}: {path}"
            );
        }
        // Gateway API: the same normalised path picks the rule.
        for path in [
            "/admin",
            "/%61dmin",
            "//admin/x",
            "/x/../admin",
            "/./admin/",
        ] {
            let seen = ask(addr, shape, "gw.test", path).await;
            assert_eq!(
                (seen.status, seen.service.as_str()),
                (200, "admin"),
                "{label}: gw.test {path}"
            );
        }
        let seen = ask(addr, shape, "gw.test", "/adminx").await;
        assert_eq!(
            (seen.status, seen.service.as_str()),
            (200, "web"),
            "{label}"
        );
        let seen = ask(addr, shape, "gw.test", "/../admin").await;
        assert_eq!(seen.status, 400, "{label}: gw.test above the root");

        // Basic authentication without its Secret: closed (503), never served open.
        for path in ["/", "/anything"] {
            let seen = ask(addr, shape, "basic.test", path).await;
            assert_eq!(seen.status, 503, "{label}: basic.test{path}");
        }
        // A refused snippet that held `allow`/`deny`: closed as well.
        let seen = ask(addr, shape, "snippet.test", "/").await;
        assert_eq!(seen.status, 503, "{label}: snippet.test");
    }

    let _ = stop.send(());
    tokio::time::timeout(Duration::from_secs(10), server)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    web.shutdown().await.unwrap();
    admin.shutdown().await.unwrap();
}

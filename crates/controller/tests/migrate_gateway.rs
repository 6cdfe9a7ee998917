//! `sluice migrate --to gateway-api` end to end, the proof of ingress2gateway's promise:
//! the same requests get the same answers through the Ingresses and through the emitted
//! Gateway API objects. A realistic set of ingress-nginx Ingresses (several hosts, TLS,
//! Prefix/Exact paths, redirects, a rewrite, canaries by weight 0/100 and by header,
//! header annotations, CORS) is served by `sluice serve` once as Ingresses and once as the
//! objects `sluice migrate --to gateway-api --output-dir` wrote (through the same entry
//! point as the binary), with the same echo backends; a fixed list of requests, over
//! plain HTTP and over the real TLS listener where the Ingress has TLS, compares status,
//! Location, the backend that answered, and the path, Host and header fields it saw.

mod standalone;
mod tls_support;

use clap::Parser;
use rustls::pki_types::CertificateDer;
use sluice_controller::migrate::{EXIT_CHANGES, MigrateArgs, run};
use sluice_controller::serve::serve;
use sluice_echo::{EchoServer, Identity};
use standalone::serve_args;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    args: MigrateArgs,
}

/// Services, endpoints (the echo backends) and the TLS Secret both directories share.
fn shared(backends: &[(&str, SocketAddr)], cert: &str, key: &str) -> String {
    use base64::Engine;
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    let mut out = String::new();
    for (name, addr) in backends {
        out.push_str(&format!(
            "apiVersion: v1
kind: Service
metadata: {{name: {name}}}
spec: {{ports: [{{name: http, port: 80}}]}}
---
apiVersion: v1
kind: Endpoints
metadata: {{name: {name}}}
subsets: [{{addresses: [{{ip: 127.0.0.1}}], ports: [{{name: http, port: {}}}]}}]
---
",
            addr.port()
        ));
    }
    out.push_str(&format!(
        "apiVersion: v1
kind: Secret
type: kubernetes.io/tls
metadata: {{name: shop-tls}}
data: {{tls.crt: {}, tls.key: {}}}
",
        b64(cert),
        b64(key)
    ));
    out
}

/// The Ingresses, as an ingress-nginx user has them (class `nginx`, which sluice's
/// IngressClass takes over in the Ingress run).
const INGRESSES: &str = r#"apiVersion: networking.k8s.io/v1
kind: IngressClass
metadata: {name: nginx, annotations: {ingressclass.kubernetes.io/is-default-class: "true"}}
spec: {controller: sluice.dev/ingress-controller}
---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: shop
  annotations:
    nginx.ingress.kubernetes.io/enable-cors: "true"
    nginx.ingress.kubernetes.io/cors-allow-origin: "https://app.test"
    sluice.dev/request-headers: "X-Team: shop"
    sluice.dev/response-headers: "X-Served-By: shop"
spec:
  ingressClassName: nginx
  tls: [{hosts: [shop.test], secretName: shop-tls}]
  rules:
  - host: shop.test
    http:
      paths:
      - {path: /, pathType: Prefix, backend: {service: {name: web, port: {number: 80}}}}
      - {path: /api, pathType: Prefix, backend: {service: {name: api, port: {name: http}}}}
      - {path: /exact, pathType: Exact, backend: {service: {name: api, port: {number: 80}}}}
---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: shop-canary
  annotations:
    nginx.ingress.kubernetes.io/canary: "true"
    nginx.ingress.kubernetes.io/canary-weight: "100"
spec:
  ingressClassName: nginx
  rules:
  - host: shop.test
    http:
      paths:
      - {path: /api, pathType: Prefix, backend: {service: {name: canary, port: {number: 80}}}}
---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: {name: beta}
spec:
  ingressClassName: nginx
  rules:
  - host: beta.test
    http:
      paths:
      - {path: /, pathType: Prefix, backend: {service: {name: web, port: {number: 80}}}}
---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: beta-canary
  annotations:
    nginx.ingress.kubernetes.io/canary: "true"
    nginx.ingress.kubernetes.io/canary-by-header: x-beta
    nginx.ingress.kubernetes.io/canary-weight: "0"
spec:
  ingressClassName: nginx
  rules:
  - host: beta.test
    http:
      paths:
      - {path: /, pathType: Prefix, backend: {service: {name: canary, port: {number: 80}}}}
---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: moved
  annotations:
    nginx.ingress.kubernetes.io/permanent-redirect: "https://new.test/landing"
spec:
  ingressClassName: nginx
  rules:
  - host: moved.test
    http:
      paths:
      - {path: /, pathType: Prefix, backend: {service: {name: web, port: {number: 80}}}}
---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: home
  annotations:
    nginx.ingress.kubernetes.io/app-root: /app
spec:
  ingressClassName: nginx
  rules:
  - host: home.test
    http:
      paths:
      - {path: /, pathType: Prefix, backend: {service: {name: web, port: {number: 80}}}}
---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: rewrite
  annotations:
    nginx.ingress.kubernetes.io/use-regex: "true"
    nginx.ingress.kubernetes.io/rewrite-target: /$2
    nginx.ingress.kubernetes.io/upstream-vhost: internal.test
    nginx.ingress.kubernetes.io/x-forwarded-prefix: /api
spec:
  ingressClassName: nginx
  rules:
  - host: rw.test
    http:
      paths:
      - {path: "/api(/|$)(.*)", pathType: ImplementationSpecific, backend: {service: {name: api, port: {number: 80}}}}
---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: private
  annotations:
    nginx.ingress.kubernetes.io/whitelist-source-range: 10.0.0.0/8
spec:
  ingressClassName: nginx
  rules:
  - host: private.test
    http:
      paths:
      - {path: /, pathType: Prefix, backend: {service: {name: web, port: {number: 80}}}}
"#;

/// The GatewayClass the emitted Gateways name (created once per cluster, not per Ingress).
const GATEWAY_CLASS: &str = "apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {name: sluice}
spec: {controllerName: sluice.dev/gateway-controller}
";

/// One request of the fixed list.
#[derive(Clone, Copy, Debug)]
struct Req {
    https: bool,
    method: &'static str,
    host: &'static str,
    path: &'static str,
    headers: &'static [(&'static str, &'static str)],
}

const fn get(https: bool, host: &'static str, path: &'static str) -> Req {
    Req {
        https,
        method: "GET",
        host,
        path,
        headers: &[],
    }
}

const REQUESTS: &[Req] = &[
    // TLS host: plain HTTP is redirected (ingress-nginx's default ssl-redirect, 308).
    get(false, "shop.test", "/"),
    get(false, "shop.test", "/api/items?page=2"),
    // Over TLS: Prefix, the canary at weight 100, Exact, header annotations.
    get(true, "shop.test", "/"),
    get(true, "shop.test", "/cart/1"),
    get(true, "shop.test", "/api"),
    get(true, "shop.test", "/api/items"),
    get(true, "shop.test", "/apiary"),
    get(true, "shop.test", "/exact"),
    get(true, "shop.test", "/exact/"),
    // CORS: an allowed origin, another, a preflight.
    Req {
        https: true,
        method: "GET",
        host: "shop.test",
        path: "/api/items",
        headers: &[("origin", "https://app.test")],
    },
    Req {
        https: true,
        method: "GET",
        host: "shop.test",
        path: "/",
        headers: &[("origin", "https://evil.test")],
    },
    Req {
        https: true,
        method: "OPTIONS",
        host: "shop.test",
        path: "/api/items",
        headers: &[
            ("origin", "https://app.test"),
            ("access-control-request-method", "PUT"),
        ],
    },
    // Canary by header at weight 0.
    get(false, "beta.test", "/"),
    Req {
        https: false,
        method: "GET",
        host: "beta.test",
        path: "/x",
        headers: &[("x-beta", "always")],
    },
    Req {
        https: false,
        method: "GET",
        host: "beta.test",
        path: "/x",
        headers: &[("x-beta", "never")],
    },
    Req {
        https: false,
        method: "GET",
        host: "beta.test",
        path: "/x",
        headers: &[("x-beta", "maybe")],
    },
    // permanent-redirect, app-root.
    get(false, "moved.test", "/"),
    get(false, "moved.test", "/some/page"),
    get(false, "home.test", "/"),
    get(false, "home.test", "/app"),
    get(false, "home.test", "/other"),
    // rewrite-target /$2 of /api(/|$)(.*), upstream-vhost, x-forwarded-prefix.
    get(false, "rw.test", "/api"),
    get(false, "rw.test", "/api/"),
    get(false, "rw.test", "/api/users/7"),
    get(false, "rw.test", "/apix"),
    get(false, "rw.test", "/other"),
    // No Ingress names it.
    get(false, "unknown.test", "/"),
];

/// What is compared: everything a client or backend can tell apart.
#[derive(Debug, PartialEq, Eq)]
struct Answer {
    status: u16,
    /// Absolute (a relative Location resolved against the request's URL).
    location: Option<String>,
    /// CORS and configured response fields.
    fields: BTreeMap<String, String>,
    /// The echo backend's service, and the path, Host and fields it saw.
    backend: Option<(String, String, String, BTreeMap<String, String>)>,
}

/// Response fields compared (others, like Date or Content-Length, differ by nature).
const RESPONSE_FIELDS: &[&str] = &[
    "access-control-allow-origin",
    "access-control-allow-credentials",
    "x-served-by",
];
/// Request fields the backend saw that are compared.
const REQUEST_FIELDS: &[&str] = &["x-team", "x-forwarded-prefix"];

async fn exchange(
    stream: &mut (impl AsyncReadExt + AsyncWriteExt + Unpin),
    req: &Req,
) -> anyhow::Result<String> {
    let mut head = format!(
        "{} {} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n",
        req.method, req.path, req.host
    );
    for (name, value) in req.headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes()).await?;
    let mut buf = Vec::new();
    // A peer may close TLS without close_notify; what arrived is the answer.
    let _ = tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut buf)).await?;
    Ok(String::from_utf8_lossy(&buf).into_owned())
}

/// `req` to the HTTP or HTTPS address (verifying the certificate against `ca`).
async fn send(
    http: SocketAddr,
    https: SocketAddr,
    ca: &CertificateDer<'static>,
    req: &Req,
) -> Answer {
    try_send(http, https, ca, req)
        .await
        .unwrap_or_else(|e| panic!("{req:?}: {e:#}"))
}

async fn try_send(
    http: SocketAddr,
    https: SocketAddr,
    ca: &CertificateDer<'static>,
    req: &Req,
) -> anyhow::Result<Answer> {
    let raw = if req.https {
        let mut roots = rustls::RootCertStore::empty();
        roots.add(ca.clone())?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .with_root_certificates(roots)
            .with_no_client_auth();
        let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
        let tcp = tokio::net::TcpStream::connect(https).await?;
        let name = rustls::pki_types::ServerName::try_from(req.host.to_owned())?;
        let mut tls =
            tokio::time::timeout(Duration::from_secs(10), connector.connect(name, tcp)).await??;
        exchange(&mut tls, req).await?
    } else {
        let mut tcp = tokio::net::TcpStream::connect(http).await?;
        exchange(&mut tcp, req).await?
    };
    let (head, body) = raw.split_once("\r\n\r\n").unwrap_or((&raw, ""));
    let mut lines = head.lines();
    let status = lines
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let mut fields = BTreeMap::new();
    let mut location = None;
    for line in lines {
        if let Some((name, value)) = line.split_once(':') {
            let name = name.trim().to_ascii_lowercase();
            let value = value.trim().to_owned();
            if name == "location" {
                location = Some(absolute(&value, req));
            } else if RESPONSE_FIELDS.contains(&name.as_str()) {
                fields.insert(name, value);
            }
        }
    }
    // The echo backend's JSON, with any chunk framing around it cut off.
    let json = match (body.find('{'), body.rfind('}')) {
        (Some(start), Some(end)) if start < end => &body[start..=end],
        _ => "",
    };
    let backend = serde_json::from_str::<sluice_echo::EchoReport>(json)
        .ok()
        .map(|echo| {
            let seen = REQUEST_FIELDS
                .iter()
                .filter_map(|n| echo.headers.get(*n).map(|v| ((*n).to_owned(), v.clone())))
                .collect();
            (echo.service, echo.path, echo.host.unwrap_or_default(), seen)
        });
    Ok(Answer {
        status,
        location,
        fields,
        backend,
    })
}

/// `location` as an absolute URL: a relative one resolved against the request's URL, and
/// an empty path written `/` (RFC 3986 6.2.3: for http(s) they are the same URL; nginx's
/// ssl-redirect drops the URI's final `/`, so `/` becomes empty).
fn absolute(location: &str, req: &Req) -> String {
    if location.starts_with('/') {
        let scheme = if req.https { "https" } else { "http" };
        return format!("{scheme}://{}{location}", req.host);
    }
    match location.split_once("://") {
        Some((scheme, rest)) if !rest.contains(['/', '?']) => format!("{scheme}://{rest}/"),
        _ => location.to_owned(),
    }
}

/// A running `sluice serve` over `dir`: its HTTP and HTTPS addresses and its stop.
struct Served {
    http: SocketAddr,
    https: SocketAddr,
    stop: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<anyhow::Result<()>>,
}

async fn start(dir: &Path) -> Served {
    let https_port = sluice_testenv::free_port().expect("port");
    let https_flag = format!("127.0.0.1:{https_port}");
    let (args, http) = serve_args(dir, &["--https-addr", &https_flag]);
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(serve(args, async move {
        let _ = stopped.await;
    }));
    Served {
        http,
        https: SocketAddr::from(([127, 0, 0, 1], https_port)),
        stop,
        task,
    }
}

impl Served {
    async fn stop(self) {
        let _ = self.stop.send(());
        tokio::time::timeout(Duration::from_secs(10), self.task)
            .await
            .expect("stopped within 10 s")
            .expect("joined")
            .expect("served without error");
    }
}

/// ingress2gateway's promise, checked the way it cannot be by looking at YAML: the emitted
/// objects answer every request of the list as the Ingresses do.
#[tokio::test]
async fn emitted_gateway_api_objects_answer_as_the_ingresses_mirrors_ingress2gateway() {
    let mut echoes = Vec::new();
    for name in ["web", "api", "canary"] {
        echoes.push(
            EchoServer::start("127.0.0.1:0", Identity::new(name, format!("{name}-1")))
                .await
                .expect("echo backend"),
        );
    }
    let backends: Vec<(&str, SocketAddr)> = ["web", "api", "canary"]
        .into_iter()
        .zip(echoes.iter().map(|e| e.addr()))
        .collect();
    let (cert, key, ca) = tls_support::ca_and_leaf(&["shop.test"]).expect("certificate");
    let common = shared(&backends, &cert, &key);

    let ingress_dir = tempfile::tempdir().expect("dir");
    std::fs::write(ingress_dir.path().join("shared.yaml"), &common).expect("write");
    std::fs::write(ingress_dir.path().join("ingresses.yaml"), INGRESSES).expect("write");

    // sluice migrate --manifests DIR --to gateway-api --output-dir GATEWAY_DIR
    let gateway_dir = tempfile::tempdir().expect("dir");
    let emitted = gateway_dir.path();
    let cli = Cli::try_parse_from([
        "migrate",
        "--manifests",
        ingress_dir.path().to_str().expect("path"),
        "--to",
        "gateway-api",
        "--output-dir",
        emitted.to_str().expect("path"),
    ])
    .expect("flags parse");
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let code = run(&cli.args, &mut out, &mut err).await;
    let report = String::from_utf8_lossy(&out).into_owned();
    assert_eq!(
        code,
        EXIT_CHANGES,
        "private's source range is not carried: {report}{}",
        String::from_utf8_lossy(&err)
    );
    assert!(report.contains("default/private:\n  ACCESS"), "{report}");
    let files: Vec<String> = std::fs::read_dir(emitted)
        .expect("output dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        files.contains(&"gateway-default-nginx.yaml".to_owned()),
        "{files:?}"
    );
    assert!(
        files.contains(&"httproute-default-shop.yaml".to_owned()),
        "{files:?}"
    );
    std::fs::write(gateway_dir.path().join("shared.yaml"), &common).expect("write");
    std::fs::write(gateway_dir.path().join("class.yaml"), GATEWAY_CLASS).expect("write");

    let ingresses = start(ingress_dir.path()).await;
    let gateway = start(gateway_dir.path()).await;
    // Both served: the TLS host answers from its backend over the real TLS listener.
    for served in [&ingresses, &gateway] {
        sluice_testenv::eventually(Duration::from_secs(15), "routes served", || async {
            let a = try_send(served.http, served.https, &ca, &get(true, "shop.test", "/"))
                .await
                .ok()?;
            (a.status == 200 && a.backend.is_some()).then_some(())
        })
        .await
        .expect("served");
    }

    let mut differences = Vec::new();
    for req in REQUESTS {
        let through_ingress = send(ingresses.http, ingresses.https, &ca, req).await;
        let through_gateway = send(gateway.http, gateway.https, &ca, req).await;
        if through_ingress != through_gateway {
            differences.push(format!(
                "{req:?}\n  Ingress: {through_ingress:?}\n  Gateway: {through_gateway:?}"
            ));
        }
    }
    assert!(differences.is_empty(), "{}", differences.join("\n"));

    // The list is not vacuous: it saw redirects, each backend, a rewrite and CORS.
    let shop_api = send(ingresses.http, ingresses.https, &ca, &REQUESTS[5]).await;
    assert_eq!(
        shop_api.backend.as_ref().map(|b| b.0.as_str()),
        Some("canary")
    );
    let redirect = send(gateway.http, gateway.https, &ca, &REQUESTS[0]).await;
    assert_eq!(
        (redirect.status, redirect.location.as_deref()),
        (308, Some("https://shop.test/"))
    );
    let rewritten = send(gateway.http, gateway.https, &ca, &REQUESTS[23]).await;
    let (service, path, host, seen) = rewritten.backend.expect("echo");
    assert_eq!(
        (service.as_str(), path.as_str(), host.as_str()),
        ("api", "/users/7", "internal.test")
    );
    assert_eq!(
        seen.get("x-forwarded-prefix").map(String::as_str),
        Some("/api")
    );
    let cors = send(gateway.http, gateway.https, &ca, &REQUESTS[9]).await;
    assert_eq!(
        cors.fields
            .get("access-control-allow-origin")
            .map(String::as_str),
        Some("https://app.test")
    );

    // What could not be carried stays closed: the source range refuses 127.0.0.1 through
    // the Ingress (403), and the emitted route has no backends (500): neither answers from
    // the backend.
    let private = get(false, "private.test", "/");
    let refused = send(ingresses.http, ingresses.https, &ca, &private).await;
    let closed = send(gateway.http, gateway.https, &ca, &private).await;
    assert_eq!((refused.status, refused.backend), (403, None));
    assert_eq!((closed.status, closed.backend), (500, None));

    ingresses.stop().await;
    gateway.stop().await;
    for echo in echoes {
        echo.shutdown().await.expect("echo stopped");
    }
}

/// More of what ingress-nginx users write, for the CRD check below: gRPC over TLS with a
/// verified CA, HTTPS backends, a wildcard TLS host, ImplementationSpecific and named
/// ports, a default backend, host-less rules, timeouts, a mirror, a canary by header
/// pattern and weight, a temporal redirect with its code.
const MORE_INGRESSES: &str = r#"apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: rpc
  annotations:
    nginx.ingress.kubernetes.io/backend-protocol: GRPCS
    nginx.ingress.kubernetes.io/proxy-ssl-verify: "on"
    nginx.ingress.kubernetes.io/proxy-ssl-secret: backend-ca
    nginx.ingress.kubernetes.io/proxy-ssl-name: cart.internal
spec:
  ingressClassName: nginx
  rules:
  - host: rpc.test
    http:
      paths:
      - {path: /shop.Cart, pathType: Prefix, backend: {service: {name: cart, port: {number: 50051}}}}
      - {path: /shop.Orders/Get, pathType: Exact, backend: {service: {name: cart, port: {number: 50051}}}}
---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: legacy
  annotations:
    nginx.ingress.kubernetes.io/backend-protocol: HTTPS
    nginx.ingress.kubernetes.io/proxy-read-timeout: "120"
    nginx.ingress.kubernetes.io/mirror-target: "http://shadow:8080$request_uri"
spec:
  ingressClassName: nginx
  defaultBackend: {service: {name: web, port: {number: 80}}}
  tls: [{hosts: ["*.legacy.test"], secretName: legacy-tls}]
  rules:
  - host: "*.legacy.test"
    http:
      paths:
      - {path: /static, pathType: ImplementationSpecific, backend: {service: {name: web, port: {name: http}}}}
  - http:
      paths:
      - {path: /, pathType: Prefix, backend: {service: {name: web, port: {number: 80}}}}
---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: legacy-canary
  annotations:
    nginx.ingress.kubernetes.io/canary: "true"
    nginx.ingress.kubernetes.io/canary-by-header: x-version
    nginx.ingress.kubernetes.io/canary-by-header-pattern: "v2.*"
    nginx.ingress.kubernetes.io/canary-weight: "10"
spec:
  ingressClassName: nginx
  rules:
  - host: "*.legacy.test"
    http:
      paths:
      - {path: /static, pathType: ImplementationSpecific, backend: {service: {name: canary, port: {number: 80}}}}
---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: temp
  annotations:
    nginx.ingress.kubernetes.io/temporal-redirect: "https://other.test:8443/x"
    nginx.ingress.kubernetes.io/temporal-redirect-code: "307"
spec:
  ingressClassName: nginx
  rules:
  - host: temp.test
    http:
      paths:
      - {path: /, pathType: Prefix, backend: {service: {name: web, port: {number: 80}}}}
"#;

/// Every document of a YAML stream as JSON, with `metadata.namespace` set to `ns`.
fn in_namespace(yaml: &str, ns: &str) -> Vec<serde_json::Value> {
    yaml_serde::Deserializer::from_str(yaml)
        .map(|doc| {
            let mut v: serde_json::Value =
                serde::Deserialize::deserialize(doc).expect("a YAML document");
            v["metadata"]["namespace"] = serde_json::Value::from(ns);
            v
        })
        .collect()
}

/// Gateway API v1.6.1's own validation (the CRDs of `deploy/gateway-api` as they are, CEL
/// rules included) accepts every object emitted for the Ingresses of a real API server
/// (read through `--kubeconfig`, Services included for named ports), with the Gateway in
/// another namespace (so its listeners admit all namespaces and the certificates get
/// ReferenceGrants): `kubectl apply` would take the output.
#[tokio::test]
async fn emitted_objects_pass_the_gateway_api_crds_validation_on_a_real_api_server()
-> anyhow::Result<()> {
    let cp = sluice_testenv::ControlPlane::shared().await?;
    let client = cp.client();
    for crd in [
        include_str!("../../../deploy/gateway-api/gatewayclasses.yaml"),
        include_str!("../../../deploy/gateway-api/gateways.yaml"),
        include_str!("../../../deploy/gateway-api/httproutes.yaml"),
        include_str!("../../../deploy/gateway-api/grpcroutes.yaml"),
        include_str!("../../../deploy/gateway-api/referencegrants.yaml"),
        include_str!("../../../deploy/gateway-api/backendtlspolicies.yaml"),
    ] {
        sluice_testenv::apply_yaml(&client, crd).await?;
    }
    let ns = cp.create_namespace("migrate-gw").await?;
    let edge = cp.create_namespace("migrate-edge").await?;
    let mut objects = in_namespace(INGRESSES, &ns);
    objects.retain(|o| o["kind"] == "Ingress");
    objects.extend(in_namespace(MORE_INGRESSES, &ns));
    objects.push(serde_json::json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "web", "namespace": ns},
        "spec": {"ports": [{"name": "http", "port": 8080}]}
    }));
    for object in &objects {
        sluice_testenv::apply_yaml(&client, &object.to_string()).await?;
    }

    let kubeconfig = cp.kubeconfig_path().to_str().expect("path").to_owned();
    let cli = Cli::try_parse_from([
        "migrate",
        "--kubeconfig",
        &kubeconfig,
        "--watch-namespace",
        &ns,
        "--to",
        "gateway-api",
        "--gateway-namespace",
        &edge,
    ])?;
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let code = run(&cli.args, &mut out, &mut err).await;
    let (yaml, report) = (
        String::from_utf8(out)?,
        String::from_utf8_lossy(&err).into_owned(),
    );
    assert_eq!(code, EXIT_CHANGES, "{report}");
    let kinds: std::collections::BTreeSet<String> = yaml_serde::Deserializer::from_str(&yaml)
        .map(|doc| {
            let v: serde_json::Value = serde::Deserialize::deserialize(doc).expect("document");
            v["kind"].as_str().unwrap_or("").to_owned()
        })
        .collect();
    assert_eq!(
        kinds,
        [
            "BackendTLSPolicy",
            "GRPCRoute",
            "Gateway",
            "HTTPRoute",
            "ReferenceGrant"
        ]
        .map(String::from)
        .into_iter()
        .collect()
    );
    // The named port came from the Service the cluster has.
    assert!(yaml.contains("port: 8080"), "{yaml}");
    // Discovery may take a moment to serve freshly installed CRDs: until then the dry run
    // cannot find the kind; a validation error is final.
    let mut last = String::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        match sluice_testenv::validate_yaml(&client, &yaml).await {
            Ok(()) => break,
            Err(e) => {
                last = format!("{e:#}");
                if !last.contains("discover") || tokio::time::Instant::now() > deadline {
                    panic!("the API server refused the output: {last}\n{yaml}");
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(last.is_empty() || last.contains("discover"));
    Ok(())
}

/// `--configmap` with `--to gateway-api`: the ConfigMap in the manifests is applied to
/// every Ingress (ingress-nginx's global external auth guards this one, so its route is
/// emitted closed, with no backendRefs); a ConfigMap named but not in the manifests stops
/// the conversion with nothing emitted, rather than emitting routes without what it
/// restricted (a pipe into `kubectl apply` would not see the exit status).
#[tokio::test]
async fn the_config_map_restricts_the_emitted_routes_and_a_missing_one_stops_the_conversion() {
    let dir = tempfile::tempdir().expect("dir");
    std::fs::write(
        dir.path().join("objects.yaml"),
        "apiVersion: v1
kind: ConfigMap
metadata: {name: controller, namespace: ingress-nginx}
data: {global-auth-url: \"http://auth.test/check\"}
---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: {name: shop, namespace: default}
spec:
  ingressClassName: nginx
  rules:
  - host: shop.test
    http:
      paths:
      - {path: /, pathType: Prefix, backend: {service: {name: web, port: {number: 80}}}}
",
    )
    .expect("write");
    let manifests = dir.path().to_str().expect("path");
    let migrate = |config_map: &str| {
        let cli = Cli::try_parse_from([
            "migrate",
            "--manifests",
            manifests,
            "--to",
            "gateway-api",
            "--configmap",
            config_map,
        ])
        .expect("flags parse");
        async move {
            let (mut out, mut err) = (Vec::new(), Vec::new());
            let code = run(&cli.args, &mut out, &mut err).await;
            (
                code,
                String::from_utf8_lossy(&out).into_owned(),
                String::from_utf8_lossy(&err).into_owned(),
            )
        }
    };

    let (code, yaml, report) = migrate("ingress-nginx/controller").await;
    assert_eq!(code, EXIT_CHANGES, "{report}");
    assert!(
        yaml.contains("# CLOSED: Ingress default/shop restricts access (global-auth-url (ConfigMap ingress-nginx/controller))"),
        "{yaml}"
    );
    assert!(yaml.contains("backendRefs: []"), "{yaml}");
    assert!(!yaml.contains("name: web"), "no backend is named: {yaml}");
    assert!(
        report.contains("ConfigMap ingress-nginx/controller global-auth-url"),
        "{report}"
    );

    let (code, yaml, report) = migrate("ingress-nginx/missing").await;
    assert_eq!(code, sluice_controller::migrate::EXIT_ERROR, "{report}");
    assert!(yaml.is_empty(), "{yaml}");
    assert!(
        report
            .contains("ConfigMap ingress-nginx/missing (--configmap) not found; nothing converted"),
        "{report}"
    );
}

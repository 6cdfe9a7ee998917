//! ingress-nginx's backend-side annotations through the real proxy, by the docs section
//! (`docs/user-guide/nginx-configuration/annotations.md`) they come from:
//! - "Backend Certificate Authentication": `proxy-ssl-ciphers`, `proxy-ssl-protocols` and
//!   `proxy-ssl-verify-depth` against real TLS backends (rustls servers offering one suite,
//!   one version, or a long chain): outside what the route allows the handshake fails and
//!   the proxy answers 502, inside it the request goes through.

mod common;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex, OnceLock};

use common::*;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use serde_json::json;
use sluice_routing::Inputs;

const NGINX: &str = "nginx.ingress.kubernetes.io/";
const HOST: &str = "web.test";

// --- logs ----------------------------------------------------------------------------------

/// Every log line of this test binary at `sluice::rewrite=info` (and warnings), kept for the
/// tests to look into: every test calls this first, so the capturing subscriber is the one
/// installed.
fn init_logs() -> &'static Arc<Mutex<Vec<u8>>> {
    static LOGS: OnceLock<Arc<Mutex<Vec<u8>>>> = OnceLock::new();
    LOGS.get_or_init(|| {
        let logs = Arc::new(Mutex::new(Vec::new()));
        let sink = Arc::clone(&logs);
        let _ = tracing_subscriber::fmt()
            .with_env_filter("warn,sluice::rewrite=info")
            .with_ansi(false)
            .with_writer(move || LogWriter(Arc::clone(&sink)))
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
    let logs = init_logs().lock().unwrap_or_else(|e| e.into_inner());
    String::from_utf8_lossy(&logs)
        .lines()
        .filter(|l| l.contains(needle))
        .map(str::to_owned)
        .collect()
}

// --- TLS backends -------------------------------------------------------------------------

/// An HTTP/1.1-over-TLS backend answering `version=<TLS version> suite=<IANA name>`.
struct TlsBackend {
    addr: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for TlsBackend {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// What a backend offers: its certificate chain (leaf first), versions and suites.
struct Offer {
    chain: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
    versions: Vec<&'static rustls::SupportedProtocolVersion>,
    /// `None`: every suite of the ring provider.
    suites: Option<Vec<rustls::SupportedCipherSuite>>,
}

/// An offer with a self-signed leaf for `backend.test` (ECDSA P-256, rcgen's default key).
fn self_signed() -> Offer {
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = rcgen::CertificateParams::new(vec!["backend.test".to_owned()])
        .unwrap()
        .self_signed(&key)
        .unwrap();
    Offer {
        chain: vec![cert.der().clone()],
        key: PrivateKeyDer::try_from(key.serialize_der()).unwrap(),
        versions: rustls::ALL_VERSIONS.to_vec(),
        suites: None,
    }
}

async fn tls_backend(offer: Offer) -> TlsBackend {
    let mut provider = rustls::crypto::ring::default_provider();
    if let Some(suites) = offer.suites {
        provider = CryptoProvider {
            cipher_suites: suites,
            ..provider
        };
    }
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(provider))
        .with_protocol_versions(&offer.versions)
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(offer.chain, offer.key)
        .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let task = tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                return;
            };
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let (_, conn) = tls.get_ref();
                let version = conn
                    .protocol_version()
                    .map_or_else(|| "-".to_owned(), |v| format!("{v:?}"));
                let suite = conn
                    .negotiated_cipher_suite()
                    .and_then(|s| s.suite().as_str())
                    .unwrap_or("-");
                let body = format!("version={version} suite={suite}");
                let service = hyper::service::service_fn(move |_: http::Request<_>| {
                    let body = body.clone();
                    async move {
                        Ok::<_, std::convert::Infallible>(http::Response::new(
                            http_body_util::Full::new(bytes::Bytes::from(body)),
                        ))
                    }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(tls), service)
                    .await;
            });
        }
    });
    TlsBackend { addr, task }
}

/// An HTTPS route to `backend` with `annotations` (names without prefix).
fn https_route(backend: SocketAddr, annotations: &[(&str, &str)]) -> Route {
    let mut route = Route::new(HOST, "web", vec![backend])
        .with_annotation(&format!("{NGINX}backend-protocol"), "HTTPS");
    for (name, value) in annotations {
        route = route.with_annotation(&format!("{NGINX}{name}"), value);
    }
    route
}

/// One GET through a fresh proxy serving `inputs` (fresh: no pooled connection from an
/// earlier case can answer).
async fn through_fresh_proxy(inputs: &Inputs) -> Answer {
    let proxy = TestProxy::start(sluice_proxy::ProxyArgs::loopback()).await;
    let compiled = sluice_routing::compile(inputs, &sluice_routing::CompileOptions::default());
    proxy
        .table
        .update(compiled.table, std::time::Duration::from_millis(1));
    get(proxy.http, HOST, "/").await
}

async fn through(route: Route) -> Answer {
    through_fresh_proxy(&inputs(&[route])).await
}

// --- Backend Certificate Authentication ------------------------------------------------------

/// nginx's `proxy_ssl_ciphers`: the TLS 1.2 suites offered to the backend are the
/// OpenSSL list's; a backend accepting only a suite outside it fails the handshake (502).
#[tokio::test]
async fn backend_certificate_authentication_proxy_ssl_ciphers() {
    init_logs();
    bounded(async {
        let only_aes256 = || Offer {
            versions: vec![&rustls::version::TLS12],
            suites: Some(vec![
                rustls::crypto::ring::cipher_suite::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
            ]),
            ..self_signed()
        };
        let backend = tls_backend(only_aes256()).await;
        for outside in [
            "ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-ECDSA-CHACHA20-POLY1305",
            "HIGH:!AES256",
            "ECDHE+AESGCM+AES128",
        ] {
            let answer =
                through(https_route(backend.addr, &[("proxy-ssl-ciphers", outside)])).await;
            assert_eq!(answer.status, 502, "{outside}: {}", answer.text());
        }
        for inside in [
            "ECDHE-ECDSA-AES256-GCM-SHA384",
            "AES128:AES256",
            "HIGH:!aNULL:!MD5",
        ] {
            let answer = through(https_route(backend.addr, &[("proxy-ssl-ciphers", inside)])).await;
            assert_eq!(answer.status, 200, "{inside}: {}", answer.text());
            assert_eq!(
                answer.text(),
                "version=TLSv1_2 suite=TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384"
            );
        }
        // TLS 1.3 suites are not the cipher list's business, as in OpenSSL: a TLS 1.3
        // backend is reached whatever TLS 1.2 suite the list names.
        let tls13 = tls_backend(Offer {
            versions: vec![&rustls::version::TLS13],
            ..self_signed()
        })
        .await;
        let answer = through(https_route(
            tls13.addr,
            &[("proxy-ssl-ciphers", "ECDHE-RSA-AES128-GCM-SHA256")],
        ))
        .await;
        assert_eq!(answer.status, 200, "{}", answer.text());
        assert!(
            answer.text().starts_with("version=TLSv1_3"),
            "{}",
            answer.text()
        );
    })
    .await;
}

/// nginx's `proxy_ssl_protocols`: only the versions listed are offered.
#[tokio::test]
async fn backend_certificate_authentication_proxy_ssl_protocols() {
    init_logs();
    bounded(async {
        let tls12 = tls_backend(Offer {
            versions: vec![&rustls::version::TLS12],
            ..self_signed()
        })
        .await;
        let tls13 = tls_backend(Offer {
            versions: vec![&rustls::version::TLS13],
            ..self_signed()
        })
        .await;
        let status = |backend: &TlsBackend, protocols: &'static str| {
            let route = https_route(backend.addr, &[("proxy-ssl-protocols", protocols)]);
            async move { through(route).await }
        };
        assert_eq!(status(&tls12, "TLSv1.3").await.status, 502);
        assert_eq!(status(&tls13, "TLSv1.2").await.status, 502);
        let answer = status(&tls12, "TLSv1.2").await;
        assert_eq!(answer.status, 200, "{}", answer.text());
        assert!(answer.text().starts_with("version=TLSv1_2"));
        let answer = status(&tls13, "TLSv1.3").await;
        assert_eq!(answer.status, 200, "{}", answer.text());
        assert!(answer.text().starts_with("version=TLSv1_3"));
        // TLSv1.1 is not in rustls: reported, the rest of the list applies.
        let answer = status(&tls12, "TLSv1.1 TLSv1.2").await;
        assert_eq!(answer.status, 200, "{}", answer.text());
        assert_eq!(status(&tls13, "TLSv1.1 TLSv1.2").await.status, 502);
    })
    .await;
}

/// A root, `n` intermediate CAs and a leaf for `backend.test`: (root PEM, the leaf's chain
/// leaf first, the leaf's key).
fn long_chain(n: usize) -> (String, Vec<CertificateDer<'static>>, PrivateKeyDer<'static>) {
    let ca = |name: &str| {
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, name);
        params
    };
    let root_key = rcgen::KeyPair::generate().unwrap();
    let root_params = ca("sluice test root");
    let root = root_params.self_signed(&root_key).unwrap();
    let mut issuer = rcgen::Issuer::new(root_params, root_key);
    let mut intermediates = Vec::new();
    for i in 0..n {
        let key = rcgen::KeyPair::generate().unwrap();
        let params = ca(&format!("sluice test intermediate {i}"));
        let cert = params.signed_by(&key, &issuer).unwrap();
        intermediates.insert(0, cert.der().clone());
        issuer = rcgen::Issuer::new(params, key);
    }
    let key = rcgen::KeyPair::generate().unwrap();
    let leaf = rcgen::CertificateParams::new(vec!["backend.test".to_owned()])
        .unwrap()
        .signed_by(&key, &issuer)
        .unwrap();
    let mut chain = vec![leaf.der().clone()];
    chain.extend(intermediates);
    (
        root.pem(),
        chain,
        PrivateKeyDer::try_from(key.serialize_der()).unwrap(),
    )
}

/// The `proxy-ssl-secret` `upstream-ca`: only `ca.crt`.
fn ca_secret(ca_pem: &str) -> Arc<k8s_openapi::api::core::v1::Secret> {
    Arc::new(
        serde_json::from_value(json!({
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "upstream-ca", "namespace": NS},
            "stringData": {"ca.crt": ca_pem}
        }))
        .unwrap(),
    )
}

/// nginx's `proxy_ssl_verify_depth` (ingress-nginx's default 1): with
/// `proxy-ssl-verify: on`, a backend chain with more intermediates than the depth fails
/// (502); OpenSSL's depth counts the intermediates.
#[tokio::test]
async fn backend_certificate_authentication_proxy_ssl_verify_depth() {
    init_logs();
    bounded(async {
        let (root, chain, key) = long_chain(2);
        let backend = tls_backend(Offer {
            chain,
            key,
            versions: rustls::ALL_VERSIONS.to_vec(),
            suites: None,
        })
        .await;
        let case = |depth: Option<&'static str>| {
            let mut annotations = vec![
                ("proxy-ssl-verify", "on"),
                ("proxy-ssl-name", "backend.test"),
                ("proxy-ssl-secret", "upstream-ca"),
            ];
            if let Some(depth) = depth {
                annotations.push(("proxy-ssl-verify-depth", depth));
            }
            let mut inputs = inputs(&[https_route(backend.addr, &annotations)]);
            inputs.secrets.push(ca_secret(&root));
            async move { through_fresh_proxy(&inputs).await }
        };
        // One intermediate is within the default depth.
        let (short_root, short_chain, short_key) = long_chain(1);
        let short = tls_backend(Offer {
            chain: short_chain,
            key: short_key,
            versions: rustls::ALL_VERSIONS.to_vec(),
            suites: None,
        })
        .await;
        let mut within = inputs(&[https_route(
            short.addr,
            &[
                ("proxy-ssl-verify", "on"),
                ("proxy-ssl-name", "backend.test"),
                ("proxy-ssl-secret", "upstream-ca"),
            ],
        )]);
        within.secrets.push(ca_secret(&short_root));
        let answer = through_fresh_proxy(&within).await;
        assert_eq!(answer.status, 200, "{}", answer.text());

        // Default depth 1 and an explicit 1: two intermediates are too many.
        assert_eq!(case(None).await.status, 502);
        assert_eq!(case(Some("1")).await.status, 502);
        for enough in ["2", "5"] {
            let answer = case(Some(enough)).await;
            assert_eq!(answer.status, 200, "depth {enough}: {}", answer.text());
        }
    })
    .await;
}

// --- Service Upstream ------------------------------------------------------------------------

/// `inputs` with the Service `web` given `cluster_ip` and, as its only port, `port` (the
/// Ingress's backend port follows): the endpoints stay those of the route.
fn with_cluster_ip(mut inputs: Inputs, cluster_ip: &str, port: u16) -> Inputs {
    for ingress in inputs.ingresses.iter_mut() {
        let ingress = Arc::make_mut(ingress);
        for rule in ingress.spec.as_mut().unwrap().rules.as_mut().unwrap() {
            for path in &mut rule.http.as_mut().unwrap().paths {
                let service = path.backend.service.as_mut().unwrap();
                service.port.as_mut().unwrap().number = Some(i32::from(port));
            }
        }
    }
    inputs.services = vec![Arc::new(
        serde_json::from_value(json!({
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "web", "namespace": NS},
            "spec": {"clusterIP": cluster_ip, "ports": [{"port": port, "protocol": "TCP"}]}
        }))
        .unwrap(),
    )]
    .into();
    inputs
}

/// ingress-nginx "Service Upstream": `service-upstream: "true"` sends to the Service's
/// ClusterIP and port instead of the endpoints; without it (or `"false"`) the endpoints
/// are used; a headless Service (`clusterIP: None`) keeps its endpoints, as ingress-nginx
/// falls back to them.
#[tokio::test]
async fn service_upstream_sends_to_the_cluster_ip() {
    init_logs();
    bounded(async {
        // The "ClusterIP": another loopback address, so it cannot be an endpoint.
        let cluster = sluice_echo::EchoServer::start(
            "127.0.0.2:0",
            sluice_echo::Identity::new("web", "cluster-ip"),
        )
        .await
        .expect("an echo server on 127.0.0.2");
        let pod = echo("web", "endpoint").await;
        let port = cluster.addr().port();
        let case = |value: Option<&str>, cluster_ip: &str| {
            let mut route = Route::new(HOST, "web", vec![pod.addr()]);
            if let Some(value) = value {
                route = route.with_annotation(&format!("{NGINX}service-upstream"), value);
            }
            // The endpoints keep their own address and port (the pod's).
            let inputs = with_cluster_ip(inputs(&[route]), cluster_ip, port);
            async move { through_fresh_proxy(&inputs).await }
        };
        let answer = case(Some("true"), "127.0.0.2").await;
        assert_eq!(answer.status, 200, "{}", answer.text());
        assert_eq!(answer.report().pod, "cluster-ip");
        for off in [None, Some("false")] {
            let answer = case(off, "127.0.0.2").await;
            assert_eq!(answer.status, 200, "{}", answer.text());
            assert_eq!(answer.report().pod, "endpoint", "{off:?}");
        }
        let answer = case(Some("true"), "None").await;
        assert_eq!(answer.status, 200, "{}", answer.text());
        assert_eq!(answer.report().pod, "endpoint");
    })
    .await;
}

/// "Service Upstream" per Ingress: another Ingress naming the same Service port without the
/// annotation still balances over the endpoints, and a headless Service is reported.
#[test]
fn service_upstream_is_per_ingress_and_a_headless_service_is_reported() {
    let endpoint: SocketAddr = "127.0.0.1:9".parse().unwrap();
    let routes = [
        Route::new("a.test", "web", vec![endpoint])
            .with_annotation(&format!("{NGINX}service-upstream"), "true"),
        Route::new("b.test", "web", vec![endpoint]),
    ];
    let compiled = sluice_routing::compile(
        &with_cluster_ip(inputs(&routes), "10.0.0.7", 8080),
        &sluice_routing::CompileOptions::default(),
    );
    assert!(
        compiled.diagnostics.is_empty(),
        "{:?}",
        compiled.diagnostics
    );
    let mut endpoints: Vec<Vec<SocketAddr>> = compiled
        .table
        .backends()
        .iter()
        .map(|b| b.endpoints.clone())
        .collect();
    endpoints.sort();
    assert_eq!(
        endpoints,
        vec![
            vec!["10.0.0.7:8080".parse().unwrap()],
            vec!["127.0.0.1:9".parse().unwrap()],
        ]
    );

    let compiled = sluice_routing::compile(
        &with_cluster_ip(inputs(&routes[..1]), "None", 8080),
        &sluice_routing::CompileOptions::default(),
    );
    let diagnostic = compiled
        .diagnostics
        .iter()
        .find(|d| d.reason == sluice_routing::Reason::InvalidAnnotation)
        .expect("a diagnostic on service-upstream");
    assert_eq!(
        diagnostic.field,
        format!("metadata.annotations[{NGINX}service-upstream]")
    );
    assert!(
        diagnostic.message.contains("has no ClusterIP"),
        "{}",
        diagnostic.message
    );
}

// --- Session Affinity ----------------------------------------------------------------------

/// `GET /` on `HOST` with `Cookie: <cookie>` when given.
async fn get_with_cookie(proxy: &TestProxy, cookie: Option<&str>) -> Answer {
    let mut sender = http1_connect(proxy.http).await;
    let mut request = http::Request::get("/").header("host", HOST);
    if let Some(cookie) = cookie {
        request = request.header("cookie", cookie);
    }
    let request = request
        .body(http_body_util::Full::new(bytes::Bytes::new()))
        .unwrap();
    send(&mut sender, request).await
}

/// The `route=<value>` pair of the answer's affinity cookie, if it set one.
fn affinity_cookie(answer: &Answer) -> Option<String> {
    answer
        .headers
        .get_all("set-cookie")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find(|v| v.starts_with("route="))
        .map(|v| v.split(';').next().unwrap_or(v).to_owned())
}

/// A main Ingress with cookie affinity (`session-cookie-name: route`) and a canary Ingress
/// with `canary-weight: 50` and `affinity-canary-behavior: behavior` (unset: the default).
async fn canary_proxy(
    main: &sluice_echo::EchoServer,
    canary: &sluice_echo::EchoServer,
    behavior: Option<&str>,
) -> TestProxy {
    let main_route = Route::new(HOST, "web", vec![main.addr()])
        .with_annotation(&format!("{NGINX}affinity"), "cookie")
        .with_annotation(&format!("{NGINX}session-cookie-name"), "route");
    let mut canary_route = Route::new(HOST, "web-canary", vec![canary.addr()])
        .with_annotation(&format!("{NGINX}canary"), "true")
        .with_annotation(&format!("{NGINX}canary-weight"), "50");
    if let Some(behavior) = behavior {
        canary_route =
            canary_route.with_annotation(&format!("{NGINX}affinity-canary-behavior"), behavior);
    }
    TestProxy::with_routes(&[main_route, canary_route]).await
}

/// Requests without a cookie until one is answered by `pod`, returning that answer (each
/// request has even odds with canary weight 50: 64 tries fail with odds 2^-64).
async fn first_answer_from(proxy: &TestProxy, pod: &str) -> Answer {
    for _ in 0..64 {
        let answer = get_with_cookie(proxy, None).await;
        assert_eq!(answer.status, 200, "{}", answer.text());
        if answer.report().pod == pod {
            return answer;
        }
    }
    panic!("64 requests and none answered by {pod}");
}

/// ingress-nginx "Session Affinity", `affinity-canary-behavior: sticky` (the default): a
/// client the canary served keeps going to the canary, one the main backend served stays
/// there, whatever the canary weight draws (balancer.lua `route_to_alternative_balancer`).
#[tokio::test]
async fn session_affinity_sticky_canary_keeps_its_clients() {
    init_logs();
    bounded(async {
        let main = echo("web", "main").await;
        let canary = echo("web-canary", "canary").await;
        for behavior in [None, Some("sticky")] {
            let proxy = canary_proxy(&main, &canary, behavior).await;
            for pod in ["canary", "main"] {
                let first = first_answer_from(&proxy, pod).await;
                let cookie = affinity_cookie(&first)
                    .unwrap_or_else(|| panic!("{behavior:?}: {pod} sets the affinity cookie"));
                for i in 0..20 {
                    let answer = get_with_cookie(&proxy, Some(&cookie)).await;
                    assert_eq!(answer.report().pod, pod, "{behavior:?} request {i}");
                }
            }
        }
    })
    .await;
}

/// ingress-nginx "Session Affinity", `affinity-canary-behavior: legacy`: the canary has no
/// affinity (it sets no cookie, and a canary cookie counts for nothing: each request is
/// decided by the weight again); a client of the main backend still stays there.
#[tokio::test]
async fn session_affinity_legacy_canary_decides_each_request() {
    init_logs();
    bounded(async {
        let main = echo("web", "main").await;
        let canary = echo("web-canary", "canary").await;
        // A canary session cookie, made where the canary is sticky.
        let sticky = canary_proxy(&main, &canary, None).await;
        let canary_cookie = affinity_cookie(&first_answer_from(&sticky, "canary").await)
            .expect("a sticky canary sets the cookie");
        drop(sticky);

        let proxy = canary_proxy(&main, &canary, Some("legacy")).await;
        let from_canary = first_answer_from(&proxy, "canary").await;
        assert_eq!(
            affinity_cookie(&from_canary),
            None,
            "a legacy canary sets no cookie"
        );
        // 40 requests with the canary cookie: both backends answer (all on one side has
        // odds 2^-39).
        let mut pods = std::collections::BTreeSet::new();
        for _ in 0..40 {
            pods.insert(
                get_with_cookie(&proxy, Some(&canary_cookie))
                    .await
                    .report()
                    .pod,
            );
        }
        assert_eq!(pods.len(), 2, "{pods:?}");
        // The main backend's clients stay there.
        let main_cookie = affinity_cookie(&first_answer_from(&proxy, "main").await)
            .expect("the main backend sets the cookie");
        for i in 0..20 {
            let answer = get_with_cookie(&proxy, Some(&main_cookie)).await;
            assert_eq!(answer.report().pod, "main", "request {i}");
        }
    })
    .await;
}

// --- Enable Rewrite Log --------------------------------------------------------------------

/// ingress-nginx "Enable Rewrite Log" (nginx's `rewrite_log on`): each rewrite of a route
/// with `enable-rewrite-log: "true"` is logged at info level under `sluice::rewrite`, with
/// the route, the path and the new target; other routes' rewrites are not.
#[tokio::test]
async fn enable_rewrite_log_logs_each_rewrite_of_the_route() {
    init_logs();
    bounded(async {
        let backend = echo("web", "web-1").await;
        let logged = Route::new("logged.test", "web", vec![backend.addr()])
            .with_path("/logged-old")
            .with_annotation(&format!("{NGINX}rewrite-target"), "/logged-new")
            .with_annotation(&format!("{NGINX}enable-rewrite-log"), "true");
        let quiet = Route::new("quiet.test", "web", vec![backend.addr()])
            .with_path("/quiet-old")
            .with_annotation(&format!("{NGINX}rewrite-target"), "/quiet-new");
        let proxy = TestProxy::with_routes(&[logged, quiet]).await;
        for _ in 0..2 {
            let answer = get(proxy.http, "logged.test", "/logged-old").await;
            assert_eq!(answer.report().path, "/logged-new");
            let answer = get(proxy.http, "quiet.test", "/quiet-old").await;
            assert_eq!(answer.report().path, "/quiet-new");
        }
        let lines = log_lines("/logged-old");
        assert_eq!(lines.len(), 2, "{lines:?}");
        for line in &lines {
            assert!(line.contains(" INFO sluice::rewrite"), "{line}");
            assert!(line.contains("/logged-new"), "{line}");
            assert!(line.contains("default/ing-0"), "{line}");
        }
        assert_eq!(log_lines("/quiet-old"), Vec::<String>::new());
    })
    .await;
}

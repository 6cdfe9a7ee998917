//! Gateway API extended HTTPRoute features through the real proxy, from HTTPRoute objects
//! compiled by the routing crate: the `CORS` filter, `retry` (codes, attempts, backoff) and
//! a `backendRef`'s own header filters. Each mirrors a conformance test of Gateway API
//! v1.6 (named on the test) and checks what that test cannot see: the number of tries the
//! backend got, both front ends (a bodiless GET on sluice's own loop, a POST with a body on
//! hyper's).

mod common;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::*;
use http::Request;
use http_body_util::Full;
use serde_json::json;
use sluice_proxy::ProxyArgs;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpListener;

/// Installs one Gateway (an HTTP listener) with these HTTPRoutes, beside Ingresses for
/// `services` (which also make their Services and endpoints).
fn install(proxy: &TestProxy, services: &[Route], routes: &[(&str, serde_json::Value)]) {
    let mut inputs = inputs(services);
    add_gateway(
        &mut inputs,
        json!({"listeners": [{"name": "http", "port": 80, "protocol": "HTTP"}]}),
        routes,
    );
    let compiled = sluice_routing::compile(&inputs, &sluice_routing::CompileOptions::default());
    proxy.table.update(compiled.table, Duration::from_millis(1));
}

/// `method path` on `host` with `headers`, over a fresh connection; a POST carries a body.
async fn ask(
    proxy: &TestProxy,
    method: &str,
    host: &str,
    path: &str,
    headers: &[(&str, &str)],
) -> Answer {
    let mut sender = http1_connect(proxy.http).await;
    let mut builder = Request::builder()
        .method(method)
        .uri(path)
        .header("host", host);
    for (name, value) in headers {
        builder = builder.header(*name, *value);
    }
    let body = if method == "POST" { "x=1" } else { "" };
    send(
        &mut sender,
        builder.body(Full::new(Bytes::from(body))).unwrap(),
    )
    .await
}

fn field(answer: &Answer, name: &str) -> Option<String> {
    answer
        .headers
        .get(name)
        .map(|v| v.to_str().unwrap().to_owned())
}

fn cors_route() -> serde_json::Value {
    json!({"parentRefs": [{"name": "gw"}], "hostnames": ["cors.example"], "rules": [
        {"matches": [{"path": {"type": "PathPrefix", "value": "/cors-1"}}],
         "filters": [{"type": "CORS", "cors": {
            "allowOrigins": ["https://www.foo.com", "https://*.bar.com"],
            "allowMethods": ["GET", "OPTIONS"],
            "allowHeaders": ["x-header-1", "x-header-2"],
            "exposeHeaders": ["x-header-3"],
            "allowCredentials": true, "maxAge": 3600}}],
         "backendRefs": [{"name": "web", "port": 80}]},
        {"matches": [{"path": {"type": "PathPrefix", "value": "/any"}}],
         "filters": [{"type": "CORS", "cors": {
            "allowOrigins": ["*"], "allowMethods": ["*"], "allowHeaders": ["*"],
            "allowCredentials": true}}],
         "backendRefs": [{"name": "web", "port": 80}]},
        {"matches": [{"path": {"type": "PathPrefix", "value": "/open"}}],
         "filters": [{"type": "CORS", "cors": {"allowOrigins": ["*"], "allowMethods": ["PUT"]}}],
         "backendRefs": [{"name": "web", "port": 80}]}]})
}

/// Gateway API conformance HTTPRouteCORS: a preflight is answered by the proxy with the
/// filter's fields for an allowed origin (exact, or a `*.` wildcard over any number of
/// labels) and without `Access-Control-Allow-Origin` for another; `*` with credentials
/// is answered with what the preflight asks for; without credentials `*` stays and no
/// `Access-Control-Allow-Credentials` is sent; simple requests reach the backend and
/// carry the origin's fields back.
#[tokio::test]
async fn gateway_cors_filter_answers_preflights_and_marks_simple_requests() {
    init_tracing();
    bounded(async {
        let web = echo("web", "web-0").await;
        let proxy = TestProxy::start(ProxyArgs::loopback()).await;
        install(
            &proxy,
            &[Route::new("web.example", "web", vec![web.addr()])],
            &[("cors", cors_route())],
        );

        for origin in ["https://www.foo.com", "https://xpto.www.bar.com"] {
            let pre = ask(
                &proxy,
                "OPTIONS",
                "cors.example",
                "/cors-1",
                &[
                    ("origin", origin),
                    ("access-control-request-method", "GET"),
                    ("access-control-request-headers", "x-header-1, x-header-2"),
                ],
            )
            .await;
            assert!(
                matches!(pre.status.as_u16(), 200 | 204),
                "{origin}: {}",
                pre.status
            );
            assert_eq!(
                field(&pre, "access-control-allow-origin").as_deref(),
                Some(origin)
            );
            assert_eq!(
                field(&pre, "access-control-allow-methods").as_deref(),
                Some("GET, OPTIONS")
            );
            assert_eq!(
                field(&pre, "access-control-allow-headers").as_deref(),
                Some("x-header-1, x-header-2")
            );
            assert_eq!(
                field(&pre, "access-control-expose-headers").as_deref(),
                Some("x-header-3")
            );
            assert_eq!(
                field(&pre, "access-control-max-age").as_deref(),
                Some("3600")
            );
            assert_eq!(
                field(&pre, "access-control-allow-credentials").as_deref(),
                Some("true")
            );
        }
        let refused = ask(
            &proxy,
            "OPTIONS",
            "cors.example",
            "/cors-1",
            &[
                ("origin", "https://foobar.com"),
                ("access-control-request-method", "GET"),
            ],
        )
        .await;
        assert_eq!(field(&refused, "access-control-allow-origin"), None);

        let echoed = ask(
            &proxy,
            "OPTIONS",
            "cors.example",
            "/any",
            &[
                ("origin", "https://other.foo.com"),
                ("access-control-request-method", "PUT"),
                ("access-control-request-headers", "x-header-1, x-header-2"),
            ],
        )
        .await;
        assert_eq!(
            field(&echoed, "access-control-allow-origin").as_deref(),
            Some("https://other.foo.com")
        );
        assert_eq!(
            field(&echoed, "access-control-allow-methods").as_deref(),
            Some("PUT")
        );
        assert_eq!(
            field(&echoed, "access-control-allow-headers").as_deref(),
            Some("x-header-1, x-header-2")
        );
        let open = ask(
            &proxy,
            "OPTIONS",
            "cors.example",
            "/open",
            &[
                ("origin", "https://foobar.com:12345"),
                ("access-control-request-method", "PUT"),
            ],
        )
        .await;
        assert_eq!(
            field(&open, "access-control-allow-origin").as_deref(),
            Some("*")
        );
        assert_eq!(
            field(&open, "access-control-allow-methods").as_deref(),
            Some("PUT")
        );
        assert_eq!(field(&open, "access-control-allow-credentials"), None);
        assert_eq!(
            field(&open, "access-control-max-age").as_deref(),
            Some("5"),
            "the spec's default"
        );

        for method in ["GET", "POST"] {
            let simple = ask(
                &proxy,
                method,
                "cors.example",
                "/cors-1",
                &[("origin", "https://www.foo.com")],
            )
            .await;
            assert_eq!(simple.status, 200, "{method}");
            assert_eq!(
                simple.report().pod,
                "web-0",
                "{method}: the backend answers"
            );
            assert_eq!(
                field(&simple, "access-control-allow-origin").as_deref(),
                Some("https://www.foo.com")
            );
            let other = ask(
                &proxy,
                method,
                "cors.example",
                "/cors-1",
                &[("origin", "https://foobar.com")],
            )
            .await;
            assert_eq!(other.status, 200, "{method}");
            assert_eq!(
                field(&other, "access-control-allow-origin"),
                None,
                "{method}"
            );
        }
        proxy.shutdown().await;
    })
    .await;
}

/// A backend that answers `fail` (a status) to the first `fails` requests and 200 after,
/// counting every request it gets.
async fn flaky(fail: u16, fails: usize) -> (SocketAddr, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let count = Arc::new(AtomicUsize::new(0));
    let seen = Arc::clone(&count);
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let seen = Arc::clone(&seen);
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                loop {
                    while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
                        match stream.read(&mut chunk).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buf.extend_from_slice(&chunk[..n]),
                        }
                    }
                    buf.clear();
                    let n = seen.fetch_add(1, Ordering::SeqCst);
                    let status = if n < fails { fail } else { 200 };
                    let head = format!("HTTP/1.1 {status} X\r\ncontent-length: 0\r\n\r\n");
                    if stream.write_all(head.as_bytes()).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    (addr, count)
}

/// (codes, attempts, failing status, failures, status the client gets, tries made)
type RetryCase = (&'static [u16], u16, u16, usize, u16, usize);

fn retry_route(retry: serde_json::Value) -> serde_json::Value {
    json!({"parentRefs": [{"name": "gw"}], "hostnames": ["retry.example"], "rules": [
        {"retry": retry, "backendRefs": [{"name": "flaky", "port": 80}]}]})
}

/// Gateway API conformance HTTPRouteRetry: `attempts` counts the tries after the first,
/// only the listed `codes` are tried again, and the last answer is the client's when the
/// tries run out; `backoff` waits between tries. Bodiless requests (a request whose body
/// went out is never sent twice).
#[tokio::test]
async fn gateway_retry_repeats_listed_codes_up_to_attempts_with_backoff() {
    init_tracing();
    bounded(async {
        let proxy = TestProxy::start(ProxyArgs::loopback()).await;
        let cases: [RetryCase; 5] = [
            (&[500], 3, 500, 2, 200, 3),
            (&[500], 3, 500, 4, 500, 4),
            (&[500], 3, 503, 2, 503, 1),
            (&[500, 502, 503, 504], 2, 504, 1, 200, 2),
            (&[500, 502, 503, 504], 2, 502, 3, 502, 3),
        ];
        for (codes, attempts, fail, fails, want, tries) in cases {
            let (addr, count) = flaky(fail, fails).await;
            install(
                &proxy,
                &[Route::new("flaky.example", "flaky", vec![addr])],
                &[(
                    "retries",
                    retry_route(json!({"codes": codes, "attempts": attempts})),
                )],
            );
            let answer = ask(&proxy, "GET", "retry.example", "/", &[]).await;
            let case = format!("codes {codes:?} attempts {attempts}, {fails} x {fail}");
            assert_eq!(answer.status, want, "{case}");
            assert_eq!(count.load(Ordering::SeqCst), tries, "{case}: tries");
        }

        let (addr, count) = flaky(500, 2).await;
        install(
            &proxy,
            &[Route::new("flaky.example", "flaky", vec![addr])],
            &[(
                "retries",
                retry_route(json!({"codes": [500], "attempts": 2, "backoff": "150ms"})),
            )],
        );
        let started = Instant::now();
        let answer = ask(&proxy, "GET", "retry.example", "/", &[]).await;
        assert_eq!(answer.status, 200);
        assert_eq!(count.load(Ordering::SeqCst), 3);
        assert!(
            started.elapsed() >= Duration::from_millis(300),
            "two waits of 150 ms: {:?}",
            started.elapsed()
        );
        proxy.shutdown().await;
    })
    .await;
}

/// Gateway API conformance HTTPRouteRequestHeaderModifierBackendWeights: each backendRef's
/// own `RequestHeaderModifier` reaches only the requests sent to that backend, after the
/// rule's filters; a `ResponseHeaderModifier` there marks only its backend's answers.
#[tokio::test]
async fn gateway_backend_ref_filters_apply_to_their_backend_only() {
    init_tracing();
    bounded(async {
        let v1 = echo("v1", "v1-0").await;
        let v2 = echo("v2", "v2-0").await;
        let proxy = TestProxy::start(ProxyArgs::loopback()).await;
        let set = |value: &str| json!([{"type": "RequestHeaderModifier",
            "requestHeaderModifier": {"set": [{"name": "Backend", "value": value}]}},
            {"type": "ResponseHeaderModifier",
            "responseHeaderModifier": {"set": [{"name": "X-Served-By", "value": value}]}}]);
        install(
            &proxy,
            &[
                Route::new("v1.example", "v1", vec![v1.addr()]),
                Route::new("v2.example", "v2", vec![v2.addr()]),
            ],
            &[("weights", json!({"parentRefs": [{"name": "gw"}], "hostnames": ["split.example"],
                "rules": [{
                    "filters": [{"type": "RequestHeaderModifier", "requestHeaderModifier": {
                        "set": [{"name": "Backend", "value": "rule"}, {"name": "X-Rule", "value": "r"}]}}],
                    "backendRefs": [
                        {"name": "v1", "port": 80, "weight": 10, "filters": set("v1")},
                        {"name": "v2", "port": 80, "weight": 10, "filters": set("v2")}]}]}))],
        );
        let mut seen = std::collections::BTreeSet::new();
        for i in 0..40 {
            let method = if i % 2 == 0 { "GET" } else { "POST" };
            let answer = ask(&proxy, method, "split.example", "/", &[]).await;
            assert_eq!(answer.status, 200);
            let report = answer.report();
            let service = report.service.clone();
            assert_eq!(report.headers.get("backend"), Some(&service), "{method}");
            assert_eq!(report.headers.get("x-rule").map(String::as_str), Some("r"), "{method}");
            assert_eq!(field(&answer, "x-served-by"), Some(service.clone()), "{method}");
            seen.insert(service);
        }
        assert_eq!(seen.len(), 2, "both backends drawn in 40 requests: {seen:?}");
        proxy.shutdown().await;
    })
    .await;
}

/// Accepts any server certificate: the listener a connection lands on is chosen by its SNI,
/// which is what these tests vary, not the certificate.
#[derive(Debug)]
struct AnyCertificate;

impl rustls::client::danger::ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _: &rustls::pki_types::CertificateDer<'_>,
        _: &[rustls::pki_types::CertificateDer<'_>],
        _: &rustls::pki_types::ServerName<'_>,
        _: &[u8],
        _: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        _: &[u8],
        _: &rustls::pki_types::CertificateDer<'_>,
        _: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        Ok(rustls::client::danger::HandshakeSignatureValid::assertion())
    }

    fn verify_tls13_signature(
        &self,
        _: &[u8],
        _: &rustls::pki_types::CertificateDer<'_>,
        _: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        Ok(rustls::client::danger::HandshakeSignatureValid::assertion())
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        rustls::crypto::ring::default_provider()
            .signature_verification_algorithms
            .supported_schemes()
    }
}

/// `GET /detect` for `host` on a TLS connection to `addr` with SNI `sni`, over HTTP/1.1
/// (sluice's own loop) or HTTP/2 (hyper).
async fn tls_get(addr: SocketAddr, sni: &str, host: &str, h2: bool) -> Answer {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(AnyCertificate))
        .with_no_client_auth();
    config.alpn_protocols = vec![if h2 {
        b"h2".to_vec()
    } else {
        b"http/1.1".to_vec()
    }];
    let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let name = rustls::pki_types::ServerName::try_from(sni.to_owned()).unwrap();
    let tls = tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(name, stream)
        .await
        .expect("TLS handshake");
    let io = hyper_util::rt::TokioIo::new(tls);
    if h2 {
        let (mut sender, connection) =
            hyper::client::conn::http2::handshake(hyper_util::rt::TokioExecutor::new(), io)
                .await
                .unwrap();
        let connection = tokio::spawn(connection);
        let request = Request::get(format!("https://{host}/detect"))
            .body(Full::new(Bytes::new()))
            .unwrap();
        let answer = collect(sender.send_request(request).await.unwrap()).await;
        connection.abort();
        answer
    } else {
        let (mut sender, connection) = hyper::client::conn::http1::handshake(io).await.unwrap();
        let connection = tokio::spawn(connection);
        let request = Request::get("/detect")
            .header("host", host)
            .body(Full::new(Bytes::new()))
            .unwrap();
        let answer = send(&mut sender, request).await;
        connection.abort();
        answer
    }
}

/// Gateway API conformance HTTPRouteHTTPSListenerDetectMisdirectedRequests: HTTPS
/// listeners sharing a Gateway's socket, one without a host name, one exact, one wildcard
/// and one exact name under that wildcard. A request whose Host falls under another
/// listener than the one its connection's SNI chose is answered 421 (RFC 9110 15.5.20);
/// one under the same listener is routed (or 404). The conformance test's cases, with
/// `.example` names, over HTTP/1.1 and HTTP/2.
#[tokio::test]
async fn gateway_https_listeners_answer_misdirected_requests_421() {
    init_tracing();
    bounded(async {
        let v1 = echo("v1", "v1-0").await;
        let v2 = echo("v2", "v2-0").await;
        let v3 = echo("v3", "v3-0").await;
        let (cert, key, _) = ca_and_leaf("example.org");
        let proxy = TestProxy::start(ProxyArgs::loopback()).await;
        let mut inputs = inputs(&[
            Route::new("v1.internal", "v1", vec![v1.addr()]).with_tls(cert, key),
            Route::new("v2.internal", "v2", vec![v2.addr()]),
            Route::new("v3.internal", "v3", vec![v3.addr()]),
        ]);
        let listener = |name: &str, hostname: Option<&str>| {
            let mut l = json!({"name": name, "port": 18443, "protocol": "HTTPS",
                "tls": {"certificateRefs": [{"kind": "Secret", "name": "tls-0"}]}});
            if let Some(h) = hostname {
                l["hostname"] = json!(h);
            }
            l
        };
        let route = |section: &str, hostnames: serde_json::Value, service: &str| {
            json!({"parentRefs": [{"name": "gw", "sectionName": section}], "hostnames": hostnames,
                "rules": [{"matches": [{"path": {"type": "PathPrefix", "value": "/detect"}}],
                           "backendRefs": [{"name": service, "port": 80}]}]})
        };
        add_gateway(
            &mut inputs,
            json!({"listeners": [
                listener("https", None),
                listener("https-with-hostname", Some("second.example")),
                listener("https-with-wildcard-hostname", Some("*.wild.example")),
                listener("https-with-hostname-matching-wildcard", Some("fourth.wild.example")),
            ]}),
            &[
                ("test-1", route("https", json!(["first.example"]), "v1")),
                ("test-2", route("https-with-hostname", json!([]), "v2")),
                (
                    "test-3",
                    route("https-with-wildcard-hostname", json!([]), "v3"),
                ),
                (
                    "test-4",
                    route("https-with-hostname-matching-wildcard", json!([]), "v1"),
                ),
            ],
        );
        let options = sluice_routing::CompileOptions {
            gateway_address_pool: Some("127.86.0.1".parse().expect("pool")),
            ..Default::default()
        };
        let compiled = sluice_routing::compile(&inputs, &options);
        let failures = proxy.table.update(compiled.table, Duration::from_millis(1));
        assert!(failures.is_empty(), "{failures:?}");
        let socket: SocketAddr = "127.86.0.1:18443".parse().unwrap();
        // (SNI, Host, status, backend)
        let cases = [
            ("first.example", "first.example", 200, "v1"),
            ("first.example", "second.example", 421, ""),
            ("first.example", "unknown.example", 404, ""),
            ("second.example", "second.example", 200, "v2"),
            ("second.example", "first.example", 421, ""),
            ("second.example", "unknown.example", 421, ""),
            ("third.wild.example", "third.wild.example", 200, "v3"),
            ("third.wild.example", "fifth.wild.example", 200, "v3"),
            ("third.wild.example", "fourth.wild.example", 421, ""),
            ("third.wild.example", "second.example", 421, ""),
            ("third.wild.example", "unknown.example", 421, ""),
            ("fourth.wild.example", "fourth.wild.example", 200, "v1"),
            ("fourth.wild.example", "fifth.wild.example", 421, ""),
            ("unknown.example", "first.example", 200, "v1"),
            ("unknown.example", "unknown.example", 404, ""),
        ];
        for h2 in [false, true] {
            for (sni, host, status, backend) in cases {
                let answer = tls_get(socket, sni, host, h2).await;
                let case = format!("SNI {sni}, Host {host}, h2 {h2}");
                assert_eq!(answer.status, status, "{case}");
                if status == 200 {
                    assert_eq!(answer.report().service, backend, "{case}");
                }
            }
        }
        proxy.shutdown().await;
    })
    .await;
}

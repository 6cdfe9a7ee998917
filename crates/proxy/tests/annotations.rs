//! ingress-nginx annotations through the real proxy: each answer (status, Location, headers,
//! which backend) compared with ingress-nginx's documented behaviour. Every case runs as a
//! bodiless GET (sluice's own HTTP/1.1 loop) and as a POST with a body (hyper's path), since
//! both front ends must apply a route's policy alike.

mod common;

use bytes::Bytes;
use common::*;
use http::Request;
use http_body_util::Full;
use sluice_echo::EchoServer;
use sluice_proxy::ProxyArgs;
use sluice_routing::{CompileOptions, Reason, compile};

const NGINX: &str = "nginx.ingress.kubernetes.io/";

/// A request of each front end's kind: (label, method, body).
const SHAPES: [(&str, &str, &str); 2] =
    [("own loop GET", "GET", ""), ("hyper POST", "POST", "x=1")];

/// Every front end: [`SHAPES`] (HTTP/1.1) and HTTP/2 (h2c with prior knowledge, a GET).
const FRONT_ENDS: [(&str, &str, &str); 3] = [SHAPES[0], SHAPES[1], ("h2c GET", H2, "")];

/// The method of [`FRONT_ENDS`] that stands for a GET over HTTP/2.
const H2: &str = "H2";

/// [`request`], and over HTTP/2 when `method` is [`H2`] (`:authority` is `host`).
async fn request_any(
    proxy: &TestProxy,
    (method, body): (&str, &str),
    host: &str,
    path: &str,
    headers: &[(&str, &str)],
) -> Answer {
    if method != H2 {
        return request(proxy, (method, body), host, path, headers).await;
    }
    let stream = tokio::net::TcpStream::connect(proxy.http).await.unwrap();
    let (mut sender, connection) = hyper::client::conn::http2::handshake(
        hyper_util::rt::TokioExecutor::new(),
        hyper_util::rt::TokioIo::new(stream),
    )
    .await
    .expect("h2c handshake");
    let connection = tokio::spawn(async move {
        let _ = connection.await;
    });
    let mut builder = Request::builder()
        .method("GET")
        .uri(format!("http://{host}{path}"));
    for (name, value) in headers {
        builder = builder.header(*name, *value);
    }
    let request = builder.body(Full::new(Bytes::new())).unwrap();
    let response = sender.send_request(request).await.expect("h2 response");
    let answer = collect(response).await;
    connection.abort();
    answer
}

/// Sends `method path` with `Host: host`, extra `headers` and `body`.
async fn request(
    proxy: &TestProxy,
    (method, body): (&str, &str),
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
    let request = builder
        .body(Full::new(Bytes::from(body.to_owned())))
        .unwrap();
    send(&mut sender, request).await
}

/// A proxy routing `host` to a fresh echo backend with the given annotations (keys without
/// prefix get ingress-nginx's).
async fn proxy_with(host: &str, annotations: &[(&str, &str)]) -> (TestProxy, EchoServer) {
    proxy_with_args(ProxyArgs::loopback(), host, annotations).await
}

async fn proxy_with_args(
    args: ProxyArgs,
    host: &str,
    annotations: &[(&str, &str)],
) -> (TestProxy, EchoServer) {
    let backend = echo("web", "web-0").await;
    let proxy = TestProxy::start(args).await;
    proxy.route(&[annotated(
        Route::new(host, "web", vec![backend.addr()]),
        annotations,
    )]);
    (proxy, backend)
}

fn annotated(mut route: Route, annotations: &[(&str, &str)]) -> Route {
    for (key, value) in annotations {
        let key = if key.contains('/') {
            (*key).to_owned()
        } else {
            format!("{NGINX}{key}")
        };
        route = route.with_annotation(&key, value);
    }
    route
}

#[tokio::test]
async fn ssl_redirect_is_308_for_hosts_with_tls_unless_turned_off() {
    init_tracing();
    bounded(async {
        let (cert, key, _) = ca_and_leaf("secure.example.com");
        let backend = echo("web", "web-0").await;
        let proxy = TestProxy::start(ProxyArgs::loopback()).await;
        proxy.route(&[
            Route::new("secure.example.com", "web", vec![backend.addr()])
                .with_tls(cert.clone(), key.clone()),
            annotated(
                Route::new("optout.example.com", "web", vec![backend.addr()]).with_tls(cert, key),
                &[("ssl-redirect", "false")],
            ),
            Route::new("plain.example.com", "web", vec![backend.addr()]),
        ]);
        for (label, method, body) in SHAPES {
            let got = request(
                &proxy,
                (method, body),
                "secure.example.com:8080",
                "/a/b?c=d",
                &[],
            )
            .await;
            assert_eq!(got.status, 308, "{label}");
            assert_eq!(
                got.headers["location"], "https://secure.example.com/a/b?c=d",
                "{label}"
            );
            let got = request(&proxy, (method, body), "optout.example.com", "/", &[]).await;
            assert_eq!(got.status, 200, "{label}: ssl-redirect false");
            let got = request(&proxy, (method, body), "plain.example.com", "/", &[]).await;
            assert_eq!(got.status, 200, "{label}: no TLS, no redirect");
        }
    })
    .await;
}

#[tokio::test]
async fn force_ssl_redirect_redirects_without_tls() {
    init_tracing();
    bounded(async {
        let (proxy, _backend) =
            proxy_with("f.example.com", &[("force-ssl-redirect", "true")]).await;
        for (label, method, body) in SHAPES {
            let got = request(&proxy, (method, body), "f.example.com", "/x", &[]).await;
            assert_eq!(got.status, 308, "{label}");
            assert_eq!(
                got.headers["location"], "https://f.example.com/x",
                "{label}"
            );
        }
    })
    .await;
}

#[tokio::test]
async fn permanent_and_temporal_redirects_with_their_codes() {
    init_tracing();
    bounded(async {
        let cases: [(&[(&str, &str)], u16); 4] = [
            (&[("permanent-redirect", "https://new.example.com/")], 301),
            (
                &[
                    ("permanent-redirect", "https://new.example.com/"),
                    ("permanent-redirect-code", "308"),
                ],
                308,
            ),
            (&[("temporal-redirect", "https://new.example.com/")], 302),
            // An invalid code is reported and the default used.
            (
                &[
                    ("permanent-redirect", "https://new.example.com/"),
                    ("permanent-redirect-code", "999"),
                ],
                301,
            ),
        ];
        for (annotations, status) in cases {
            let (proxy, _backend) = proxy_with("r.example.com", annotations).await;
            for (label, method, body) in SHAPES {
                let got = request(&proxy, (method, body), "r.example.com", "/old/path", &[]).await;
                assert_eq!(got.status, status, "{label} {annotations:?}");
                // nginx `return`: the configured URL as is, the request path not appended.
                assert_eq!(
                    got.headers["location"], "https://new.example.com/",
                    "{label}"
                );
            }
        }
    })
    .await;
}

#[tokio::test]
async fn app_root_redirects_only_the_root_with_302() {
    init_tracing();
    bounded(async {
        let (proxy, _backend) = proxy_with("a.example.com", &[("app-root", "/app1")]).await;
        for (label, method, body) in SHAPES {
            let got = request(&proxy, (method, body), "a.example.com", "/", &[]).await;
            assert_eq!(got.status, 302, "{label}");
            assert_eq!(got.headers["location"], "/app1", "{label}");
            let got = request(&proxy, (method, body), "a.example.com", "/app1", &[]).await;
            assert_eq!(got.status, 200, "{label}");
        }
    })
    .await;
}

#[tokio::test]
async fn source_ranges_answer_403_like_nginx_allow_and_deny() {
    init_tracing();
    bounded(async {
        let cases: [(&[(&str, &str)], u16); 5] = [
            (
                &[("whitelist-source-range", "10.0.0.0/8, 192.168.0.0/16")],
                403,
            ),
            (&[("allowlist-source-range", "127.0.0.0/8")], 200),
            (&[("denylist-source-range", "127.0.0.1/32")], 403),
            (
                &[
                    ("allowlist-source-range", "127.0.0.0/8"),
                    ("denylist-source-range", "127.0.0.1"),
                ],
                403,
            ),
            // An invalid range fails closed, as ingress-nginx denies such a location.
            (&[("allowlist-source-range", "10.0.0.0/40")], 403),
        ];
        for (annotations, status) in cases {
            let (proxy, _backend) = proxy_with("s.example.com", annotations).await;
            for (label, method, body) in SHAPES {
                let got = request(&proxy, (method, body), "s.example.com", "/", &[]).await;
                assert_eq!(got.status, status, "{label} {annotations:?}");
            }
        }
    })
    .await;
}

#[tokio::test]
async fn proxy_body_size_413_uses_nginx_size_syntax() {
    init_tracing();
    bounded(async {
        let (proxy, _backend) = proxy_with("b.example.com", &[("proxy-body-size", "1k")]).await;
        let small = "x".repeat(1000);
        let large = "x".repeat(2000);
        let got = request(&proxy, ("POST", &small), "b.example.com", "/", &[]).await;
        assert_eq!(got.status, 200);
        let got = request(&proxy, ("POST", &large), "b.example.com", "/", &[]).await;
        assert_eq!(got.status, 413);
        // "0" lifts the proxy-wide limit for this route (nginx client_max_body_size 0).
        let mut args = ProxyArgs::loopback();
        args.max_body_bytes = 100;
        let (proxy, _backend) =
            proxy_with_args(args, "u.example.com", &[("proxy-body-size", "0")]).await;
        let got = request(&proxy, ("POST", &large), "u.example.com", "/", &[]).await;
        assert_eq!(got.status, 200);
    })
    .await;
}

#[tokio::test]
async fn proxy_read_timeout_gives_504_per_route() {
    init_tracing();
    bounded(async {
        let (proxy, _backend) = proxy_with("t.example.com", &[("proxy-read-timeout", "1")]).await;
        for (label, method, body) in SHAPES {
            let got = request(&proxy, (method, body), "t.example.com", "/delay/3000", &[]).await;
            assert_eq!(got.status, 504, "{label}");
            let got = request(&proxy, (method, body), "t.example.com", "/delay/10", &[]).await;
            assert_eq!(got.status, 200, "{label}");
        }
    })
    .await;
}

#[tokio::test]
async fn cors_preflight_and_response_fields_like_ingress_nginx_enable_cors() {
    init_tracing();
    bounded(async {
        let (proxy, _backend) = proxy_with(
            "c.example.com",
            &[
                ("enable-cors", "true"),
                (
                    "cors-allow-origin",
                    "https://app.example.com, https://*.partner.example",
                ),
                ("cors-max-age", "600"),
            ],
        )
        .await;
        let preflight = [
            ("origin", "https://app.example.com"),
            ("access-control-request-method", "PUT"),
        ];
        let got = request(&proxy, ("OPTIONS", ""), "c.example.com", "/api", &preflight).await;
        assert_eq!(got.status, 204);
        assert_eq!(
            got.headers["access-control-allow-origin"],
            "https://app.example.com"
        );
        assert_eq!(got.headers["access-control-max-age"], "600");
        assert_eq!(got.headers["access-control-allow-credentials"], "true");
        assert!(got.headers.contains_key("access-control-allow-methods"));
        assert!(got.body.is_empty());
        for (label, method, body) in SHAPES {
            let origin = [("origin", "https://x.partner.example")];
            let got = request(&proxy, (method, body), "c.example.com", "/api", &origin).await;
            assert_eq!(got.status, 200, "{label}");
            assert_eq!(
                got.headers["access-control-allow-origin"], "https://x.partner.example",
                "{label}"
            );
            let evil = [("origin", "https://evil.example")];
            let got = request(&proxy, (method, body), "c.example.com", "/api", &evil).await;
            assert_eq!(got.status, 200, "{label}");
            assert!(
                !got.headers.contains_key("access-control-allow-origin"),
                "{label}"
            );
        }
    })
    .await;
}

#[tokio::test]
async fn upstream_vhost_prefix_and_header_annotations_reach_the_backend() {
    init_tracing();
    bounded(async {
        let (proxy, _backend) = proxy_with(
            "h.example.com",
            &[
                ("upstream-vhost", "internal.svc"),
                ("x-forwarded-prefix", "/shop"),
                ("sluice.dev/request-headers", "X-Team: blue\nX-Env: prod"),
                ("sluice.dev/response-headers", "X-Frame-Options: DENY"),
            ],
        )
        .await;
        for (label, method, body) in SHAPES {
            let got = request(
                &proxy,
                (method, body),
                "h.example.com",
                "/",
                &[("x-team", "evil")],
            )
            .await;
            assert_eq!(got.status, 200, "{label}");
            assert_eq!(got.headers["x-frame-options"], "DENY", "{label}");
            let report = got.report();
            assert_eq!(report.host.as_deref(), Some("internal.svc"), "{label}");
            assert_eq!(report.headers["x-forwarded-prefix"], "/shop", "{label}");
            assert_eq!(report.headers["x-team"], "blue", "{label}");
            assert_eq!(report.headers["x-env"], "prod", "{label}");
            // The client asked for h.example.com: that is what X-Forwarded-Host says.
            assert_eq!(
                report.headers["x-forwarded-host"], "h.example.com",
                "{label}"
            );
        }
    })
    .await;
}

#[test]
fn unsupported_invalid_and_snippet_annotations_become_diagnostics_and_the_route_stays() {
    let route = annotated(
        Route::new("d.example.com", "web", vec!["127.0.0.1:1".parse().unwrap()]),
        &[
            ("configuration-snippet", "more_set_headers \"X: y\";"),
            ("proxy-body-size", "12x"),
            ("http2-push-preload", "true"),
        ],
    );
    let compiled = compile(&inputs(&[route]), &CompileOptions::default());
    let reasons: Vec<(&str, &Reason)> = compiled
        .diagnostics
        .iter()
        .map(|d| (d.field.as_str(), &d.reason))
        .collect();
    let field = |key: &str| format!("metadata.annotations[{NGINX}{key}]");
    assert!(
        reasons.contains(&(
            field("configuration-snippet").as_str(),
            &Reason::SnippetRefused
        )),
        "{reasons:?}"
    );
    assert!(
        reasons.contains(&(
            field("proxy-body-size").as_str(),
            &Reason::InvalidAnnotation
        )),
        "{reasons:?}"
    );
    assert!(
        reasons.contains(&(
            field("http2-push-preload").as_str(),
            &Reason::UnsupportedAnnotation
        )),
        "{reasons:?}"
    );
    // The rest of the Ingress keeps working.
    assert!(compiled.table.route("d.example.com", "/").is_some());
    for d in &compiled.diagnostics {
        assert!(d.message.contains("default/ing-0"), "{}", d.message);
    }
}

#[tokio::test]
async fn rewrite_target_with_captures_like_ingress_nginx_docs() {
    init_tracing();
    bounded(async {
        let backend = echo("web", "web-0").await;
        let proxy = TestProxy::start(ProxyArgs::loopback()).await;
        // The example of ingress-nginx's rewrite documentation.
        proxy.route(&[annotated(
            Route::new("rewrite.bar.com", "web", vec![backend.addr()])
                .with_path("/something(/|$)(.*)"),
            &[("use-regex", "true"), ("rewrite-target", "/$2")],
        )]);
        for (label, method, body) in SHAPES {
            for (asked, sent, query) in [
                ("/something", "/", None),
                ("/something/", "/", None),
                ("/something/new?x=1", "/new", Some("x=1")),
                ("/SomeThing/a/b", "/a/b", None),
            ] {
                let got = request(&proxy, (method, body), "rewrite.bar.com", asked, &[]).await;
                assert_eq!(got.status, 200, "{label} {asked}");
                let report = got.report();
                assert_eq!(report.path, sent, "{label} {asked}");
                assert_eq!(report.query.as_deref(), query, "{label} {asked}");
            }
            // Not matched by the regex location: the host's default (404 here).
            let got = request(&proxy, (method, body), "rewrite.bar.com", "/other", &[]).await;
            assert_eq!(got.status, 404, "{label}");
        }
    })
    .await;
}

#[tokio::test]
async fn use_regex_makes_every_path_of_the_host_a_regex_longest_first() {
    init_tracing();
    bounded(async {
        let versioned = echo("versioned", "v-0").await;
        let plain = echo("plain", "p-0").await;
        let proxy = TestProxy::start(ProxyArgs::loopback()).await;
        proxy.route(&[
            annotated(
                Route::new("re.example.com", "versioned", vec![versioned.addr()])
                    .with_path("/api/v[0-9]+/.*"),
                &[("use-regex", "true")],
            ),
            // No annotation, same host: its Prefix path becomes a regex too
            // (ingress-nginx applies use-regex to every path of the host).
            Route::new("re.example.com", "plain", vec![plain.addr()]).with_path("/api"),
        ]);
        for (label, method, body) in SHAPES {
            let pick =
                |path: &'static str| request(&proxy, (method, body), "re.example.com", path, &[]);
            assert_eq!(
                pick("/api/v2/users").await.report().service,
                "versioned",
                "{label}"
            );
            assert_eq!(
                pick("/api/vx/users").await.report().service,
                "plain",
                "{label}"
            );
            // A regex location is a prefix of the path, case-insensitive: /APIX matches /api.
            assert_eq!(pick("/APIX").await.report().service, "plain", "{label}");
        }
    })
    .await;
}

#[test]
fn an_invalid_regex_path_is_an_invalid_path_diagnostic() {
    let route = annotated(
        Route::new(
            "bad.example.com",
            "web",
            vec!["127.0.0.1:1".parse().unwrap()],
        )
        .with_path("/a(b"),
        &[("use-regex", "true")],
    );
    let compiled = compile(&inputs(&[route]), &CompileOptions::default());
    assert!(
        compiled
            .diagnostics
            .iter()
            .any(|d| d.reason == Reason::InvalidPath && d.message.contains("regular expression")),
        "{:?}",
        compiled.diagnostics
    );
}

#[tokio::test]
async fn default_backend_answers_when_the_service_has_no_endpoint_and_custom_http_errors() {
    init_tracing();
    bounded(async {
        let web = echo("web", "web-0").await;
        let errors = echo("errors", "errors-0").await;
        let proxy = TestProxy::start(ProxyArgs::loopback()).await;
        proxy.route(&[
            // A Service with no ready endpoint: its default-backend answers instead of 503.
            annotated(
                Route::new("empty.example.com", "empty", vec![]),
                &[("default-backend", "errors")],
            ),
            annotated(
                Route::new("pages.example.com", "web", vec![web.addr()]),
                &[
                    ("default-backend", "errors"),
                    ("custom-http-errors", "404,503"),
                ],
            ),
            annotated(
                Route::new("through.example.com", "web", vec![web.addr()]),
                &[
                    ("default-backend", "errors"),
                    ("custom-http-errors", "404,503"),
                    ("disable-proxy-intercept-errors", "true"),
                ],
            ),
            // Makes the `errors` Service exist.
            Route::new("errors.example.com", "errors", vec![errors.addr()]),
        ]);
        for (label, method, body) in SHAPES {
            let got = request(&proxy, (method, body), "empty.example.com", "/x", &[]).await;
            assert_eq!(got.status, 200, "{label}");
            assert_eq!(got.report().service, "errors", "{label}");

            // Listed statuses go to the default backend as a GET with ingress-nginx's
            // custom-errors fields; the rest pass through.
            let accept = [("accept", "application/json")];
            let got = request(
                &proxy,
                (method, body),
                "pages.example.com",
                "/status/404",
                &accept,
            )
            .await;
            let report = got.report();
            assert_eq!(report.service, "errors", "{label}");
            assert_eq!(report.method, "GET", "{label}");
            assert_eq!(report.headers["x-code"], "404", "{label}");
            assert_eq!(report.headers["x-format"], "application/json", "{label}");
            assert_eq!(report.headers["x-original-uri"], "/status/404", "{label}");
            assert_eq!(report.headers["x-namespace"], "default", "{label}");
            assert_eq!(report.headers["x-ingress-name"], "ing-1", "{label}");
            assert_eq!(report.headers["x-service-name"], "web", "{label}");
            assert_eq!(report.headers["x-service-port"], "80", "{label}");
            let got = request(
                &proxy,
                (method, body),
                "pages.example.com",
                "/status/418",
                &[],
            )
            .await;
            assert_eq!(got.status, 418, "{label}");
            assert_eq!(got.report().service, "web", "{label}");
            // ingress-nginx's `disable-proxy-intercept-errors`: no `proxy_intercept_errors`,
            // the upstream's 404 passes through.
            let got = request(
                &proxy,
                (method, body),
                "through.example.com",
                "/status/404",
                &[],
            )
            .await;
            assert_eq!(got.status, 404, "{label}");
            assert_eq!(got.report().service, "web", "{label}");
        }
    })
    .await;
}

/// A backend that answers every request with 502 (keep-alive), until dropped.
struct Always502 {
    addr: std::net::SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl Always502 {
    async fn start() -> Always502 {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let task = tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let mut buf = Vec::new();
                    let mut chunk = [0u8; 4096];
                    loop {
                        let Ok(n) = stream.read(&mut chunk).await else {
                            return;
                        };
                        if n == 0 {
                            return;
                        }
                        buf.extend_from_slice(&chunk[..n]);
                        // Bodiless requests only: one answer per complete head.
                        while let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                            buf.drain(..end + 4);
                            let answer = b"HTTP/1.1 502 Bad Gateway\r\ncontent-length: 0\r\n\r\n";
                            if stream.write_all(answer).await.is_err() {
                                return;
                            }
                        }
                    }
                });
            }
        });
        Always502 { addr, task }
    }
}

impl Drop for Always502 {
    fn drop(&mut self) {
        self.task.abort();
    }
}

#[tokio::test]
async fn proxy_next_upstream_sends_listed_statuses_to_the_next_endpoint() {
    init_tracing();
    bounded(async {
        let bad = Always502::start().await;
        let good = echo("web", "web-0").await;
        let endpoints = vec![bad.addr, good.addr()];
        for (annotations, all_ok) in [
            (
                &[("proxy-next-upstream", "error timeout http_502")][..],
                true,
            ),
            (&[][..], false),
        ] {
            let proxy = TestProxy::start(ProxyArgs::loopback()).await;
            proxy.route(&[annotated(
                Route::new("n.example.com", "web", endpoints.clone()),
                annotations,
            )]);
            let mut statuses = Vec::new();
            // Bounded: 30 requests; the balancer spreads them over both endpoints.
            for _ in 0..30 {
                let got = request(&proxy, ("GET", ""), "n.example.com", "/", &[]).await;
                statuses.push(got.status.as_u16());
            }
            if all_ok {
                assert!(
                    statuses.iter().all(|&s| s == 200),
                    "{annotations:?}: {statuses:?}"
                );
            } else {
                // nginx's default (error timeout) passes a 502 answer through.
                assert!(statuses.contains(&502), "{statuses:?}");
            }
        }
    })
    .await;
}

/// `limit-rpm` with `limit-burst-multiplier`: nginx `limit_req burst=rpm*multiplier
/// nodelay` admits burst + 1 requests at once, the next gets 503 (ingress-nginx's default
/// `limit-req-status-code`); another Ingress has its own zone; `limit-allowlist` is never
/// limited. Per minute, so the test cannot race a refill.
#[tokio::test]
async fn limit_rpm_with_burst_like_nginx_limit_req_nodelay() {
    init_tracing();
    bounded(async {
        let backend = echo("web", "web-0").await;
        let proxy = TestProxy::start(ProxyArgs::loopback()).await;
        let limited = [("limit-rpm", "1"), ("limit-burst-multiplier", "2")];
        proxy.route(&[
            annotated(
                Route::new("limited.example.com", "web", vec![backend.addr()]),
                &limited,
            ),
            annotated(
                Route::new("other.example.com", "web", vec![backend.addr()]),
                &limited,
            ),
            annotated(
                Route::new("trusted.example.com", "web", vec![backend.addr()]),
                &[("limit-rps", "1"), ("limit-allowlist", "127.0.0.0/8")],
            ),
        ]);
        // Both front ends draw from the same bucket: 3 admitted in all.
        let mut statuses = Vec::new();
        for (_, method, body) in SHAPES.iter().chain(&SHAPES) {
            let got = request(&proxy, (method, body), "limited.example.com", "/", &[]).await;
            statuses.push(got.status.as_u16());
        }
        assert_eq!(statuses, [200, 200, 200, 503]);
        let got = request(&proxy, ("GET", ""), "other.example.com", "/", &[]).await;
        assert_eq!(got.status, 200, "another Ingress, another zone");
        for _ in 0..10 {
            let got = request(&proxy, ("GET", ""), "trusted.example.com", "/", &[]).await;
            assert_eq!(got.status, 200, "allow-listed client");
        }
    })
    .await;
}

#[tokio::test]
async fn limit_req_status_code_flag_sets_the_refusal_status() {
    init_tracing();
    bounded(async {
        let mut args = ProxyArgs::loopback();
        args.limit_req_status_code = 429;
        let (proxy, _backend) =
            proxy_with_args(args, "limited.example.com", &[("limit-rpm", "1")]).await;
        let mut statuses = Vec::new();
        for _ in 0..8 {
            let got = request(&proxy, ("GET", ""), "limited.example.com", "/", &[]).await;
            statuses.push(got.status.as_u16());
        }
        // Default multiplier 5: 6 at once.
        assert_eq!(statuses, [200, 200, 200, 200, 200, 200, 429, 429]);
    })
    .await;
}

/// A main Ingress and its canary (ingress-nginx's canary annotations): `canary-by-header`
/// wins over `canary-by-cookie`, which wins over `canary-weight`; `always`/`never` on
/// both front ends; the weight's share lands within 2 points over 10,000 requests.
#[tokio::test]
async fn canary_by_header_then_cookie_then_weight_like_ingress_nginx() {
    init_tracing();
    bounded(async {
        let main = echo("web", "web-0").await;
        let canary = echo("web-canary", "canary-0").await;
        let proxy = TestProxy::start(ProxyArgs::loopback()).await;
        proxy.route(&[
            Route::new("shop.example.com", "web", vec![main.addr()]),
            annotated(
                Route::new("shop.example.com", "web-canary", vec![canary.addr()]),
                &[
                    ("canary", "true"),
                    ("canary-by-header", "x-canary"),
                    ("canary-by-cookie", "use-canary"),
                    ("canary-weight", "20"),
                ],
            ),
        ]);
        let service = |answer: Answer| answer.report().service;
        let cases: [(&[(&str, &str)], &str); 5] = [
            (&[("x-canary", "always")], "web-canary"),
            (
                &[("x-canary", "never"), ("cookie", "use-canary=always")],
                "web",
            ),
            (&[("cookie", "a=1; use-canary=always")], "web-canary"),
            (
                &[("x-canary", "other"), ("cookie", "use-canary=always")],
                "web-canary",
            ),
            (&[("x-canary", "never")], "web"),
        ];
        for (label, method, body) in SHAPES {
            for (headers, expected) in cases {
                for _ in 0..20 {
                    let got =
                        request(&proxy, (method, body), "shop.example.com", "/", headers).await;
                    assert_eq!(service(got), expected, "{label} {headers:?}");
                }
            }
        }
        // The weight, over one keep-alive connection.
        let mut sender = http1_connect(proxy.http).await;
        let mut to_canary = 0;
        const N: u32 = 10_000;
        for _ in 0..N {
            let request = http::Request::get("/")
                .header("host", "shop.example.com")
                .body(Full::new(Bytes::new()))
                .unwrap();
            if service(send(&mut sender, request).await) == "web-canary" {
                to_canary += 1;
            }
        }
        let share = f64::from(to_canary) / f64::from(N);
        assert!((0.18..=0.22).contains(&share), "canary share {share}");
    })
    .await;
}

#[test]
fn a_canary_without_a_main_ingress_is_a_diagnostic() {
    let canary = annotated(
        Route::new(
            "lonely.example.com",
            "web",
            vec!["127.0.0.1:1".parse().unwrap()],
        ),
        &[("canary", "true"), ("canary-weight", "50")],
    );
    let compiled = compile(&inputs(&[canary]), &CompileOptions::default());
    assert!(
        compiled
            .diagnostics
            .iter()
            .any(|d| d.reason == Reason::CanaryWithoutMain),
        "{:?}",
        compiled.diagnostics
    );
    assert!(compiled.table.route("lonely.example.com", "/").is_none());
}

/// The `name=value` part of the response's `Set-Cookie` for `name`, if any.
fn set_cookie(answer: &Answer, name: &str) -> Option<String> {
    answer
        .headers
        .get_all("set-cookie")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find(|v| v.starts_with(&format!("{name}=")))
        .map(|v| v.split(';').next().unwrap_or("").to_owned())
}

/// ingress-nginx's `affinity: cookie` in `persistent` mode: the first answer sets an
/// HttpOnly cookie, 1,000 requests with it (both front ends) reach the same pod, and when
/// that pod's endpoint leaves, the session fails over to a live one and the cookie is
/// pointed there.
#[tokio::test]
async fn affinity_cookie_sticks_and_fails_over_when_the_endpoint_leaves() {
    init_tracing();
    bounded(async {
        let pods = [
            echo("web", "web-0").await,
            echo("web", "web-1").await,
            echo("web", "web-2").await,
        ];
        let proxy = TestProxy::start(ProxyArgs::loopback()).await;
        let sticky = [
            ("affinity", "cookie"),
            ("affinity-mode", "persistent"),
            ("session-cookie-name", "route"),
            ("session-cookie-max-age", "3600"),
        ];
        let route_to = |pods: &[&EchoServer]| {
            annotated(
                Route::new(
                    "sticky.example.com",
                    "web",
                    pods.iter().map(|p| p.addr()).collect(),
                ),
                &sticky,
            )
        };
        proxy.route(&[route_to(&[&pods[0], &pods[1], &pods[2]])]);
        let first = request(&proxy, ("GET", ""), "sticky.example.com", "/", &[]).await;
        let raw = first.headers["set-cookie"].to_str().unwrap().to_owned();
        assert!(raw.contains("; Path=/; Max-Age=3600; HttpOnly"), "{raw}");
        let cookie = set_cookie(&first, "route").expect("a session cookie");
        let pod = first.report().pod;
        for i in 0..1_000 {
            let (_, method, body) = SHAPES[i % 2];
            let got = request(
                &proxy,
                (method, body),
                "sticky.example.com",
                "/",
                &[("cookie", &format!("a=b; {cookie}"))],
            )
            .await;
            assert_eq!(got.report().pod, pod, "request {i}");
            assert!(
                set_cookie(&got, "route").is_none(),
                "no new cookie while it holds"
            );
        }
        // The pod's endpoint leaves the Service.
        let rest: Vec<&EchoServer> = pods
            .iter()
            .enumerate()
            .filter(|(i, _)| format!("web-{i}") != pod)
            .map(|(_, p)| p)
            .collect();
        proxy.route(&[route_to(&rest)]);
        let moved = request(
            &proxy,
            ("GET", ""),
            "sticky.example.com",
            "/",
            &[("cookie", &cookie)],
        )
        .await;
        let new_pod = moved.report().pod;
        assert_ne!(new_pod, pod);
        let new_cookie = set_cookie(&moved, "route").expect("the cookie follows the session");
        for _ in 0..50 {
            let got = request(
                &proxy,
                ("GET", ""),
                "sticky.example.com",
                "/",
                &[("cookie", &new_cookie)],
            )
            .await;
            assert_eq!(got.report().pod, new_pod);
        }
    })
    .await;
}

/// `balanced` mode (ingress-nginx's default) keeps each session on one pod and spreads
/// sessions over all pods; `upstream-hash-by` does the same for a header's value.
#[tokio::test]
async fn balanced_affinity_and_upstream_hash_by_spread_sessions_and_keep_them() {
    init_tracing();
    bounded(async {
        let pods = [
            echo("web", "web-0").await,
            echo("web", "web-1").await,
            echo("web", "web-2").await,
        ];
        let addrs: Vec<_> = pods.iter().map(|p| p.addr()).collect();
        let proxy = TestProxy::start(ProxyArgs::loopback()).await;
        proxy.route(&[
            annotated(
                Route::new("balanced.example.com", "web", addrs.clone()),
                &[("affinity", "cookie")],
            ),
            annotated(
                Route::new("hashed.example.com", "web", addrs.clone()),
                &[("upstream-hash-by", "$http_x_user")],
            ),
        ]);
        let mut seen = std::collections::HashSet::new();
        for _ in 0..60 {
            let first = request(&proxy, ("GET", ""), "balanced.example.com", "/", &[]).await;
            let cookie = set_cookie(&first, "INGRESSCOOKIE").expect("default cookie name");
            let pod = first.report().pod;
            seen.insert(pod.clone());
            for _ in 0..5 {
                let got = request(
                    &proxy,
                    ("GET", ""),
                    "balanced.example.com",
                    "/",
                    &[("cookie", &cookie)],
                )
                .await;
                assert_eq!(got.report().pod, pod);
            }
        }
        assert_eq!(seen.len(), 3, "sessions spread over every pod");
        let mut seen = std::collections::HashSet::new();
        for user in 0..60 {
            let user = format!("user-{user}");
            let pod = request(
                &proxy,
                ("GET", ""),
                "hashed.example.com",
                "/",
                &[("x-user", &user)],
            )
            .await
            .report()
            .pod;
            seen.insert(pod.clone());
            for _ in 0..5 {
                let got = request(
                    &proxy,
                    ("POST", "x"),
                    "hashed.example.com",
                    "/",
                    &[("x-user", &user)],
                )
                .await;
                assert_eq!(got.report().pod, pod, "{user}");
            }
        }
        assert_eq!(seen.len(), 3, "users spread over every pod");
    })
    .await;
}

/// A plain HTTP/1.1 server on a loopback port answering with `handler`; stops on drop.
struct TestServer {
    addr: std::net::SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

type Reply = http::Response<Full<Bytes>>;

async fn test_server<F, Fut>(handler: F) -> TestServer
where
    F: Fn(http::Request<hyper::body::Incoming>) -> Fut + Clone + Send + Sync + 'static,
    Fut: std::future::Future<Output = Reply> + Send + 'static,
{
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let task = tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                return;
            };
            let handler = handler.clone();
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |request| {
                    let reply = handler(request);
                    async move { Ok::<_, std::convert::Infallible>(reply.await) }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(tcp), service)
                    .await;
            });
        }
    });
    TestServer { addr, task }
}

/// A small auth service, like oauth2-proxy behind ingress-nginx's `auth-url`: decides by
/// `Authorization`, and tells what it saw in `x-auth-saw`.
async fn auth_service() -> TestServer {
    test_server(|request: http::Request<hyper::body::Incoming>| async move {
        let header = |name: &str| {
            request
                .headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("")
                .to_owned()
        };
        let saw = format!(
            "{} {} {} host={} from={}",
            request.method(),
            header("x-original-method"),
            header("x-original-url"),
            header("host"),
            header("x-sent-from"),
        );
        let mut response = http::Response::builder().header("x-auth-saw", saw);
        let status = match header("authorization").as_str() {
            "Bearer good" => {
                response = response.header("x-user", "alice");
                200
            }
            "Bearer forbidden" => 403,
            "Bearer broken" => 500,
            "Bearer slow" => {
                tokio::time::sleep(std::time::Duration::from_secs(3)).await;
                200
            }
            _ => {
                response = response.header("www-authenticate", "Bearer realm=\"test\"");
                401
            }
        };
        response
            .status(status)
            .body(Full::new(Bytes::from_static(b"auth")))
            .unwrap()
    })
    .await
}

/// ingress-nginx's `auth-url` (nginx `auth_request`): 2xx lets the request through with
/// `auth-response-headers` (a client cannot smuggle them in), 401 passes the challenge or
/// redirects to `auth-signin` with `rd`, 403 stays 403, a failing or slow auth service is
/// a 500. Both front ends; a POST body still reaches the backend.
#[tokio::test]
async fn auth_url_allows_denies_redirects_and_copies_headers() {
    init_tracing();
    bounded(async {
        let auth = auth_service().await;
        let backend = echo("web", "web-0").await;
        let mut args = ProxyArgs::loopback();
        args.auth_timeout = std::time::Duration::from_millis(500);
        let proxy = TestProxy::start(args).await;
        let url = format!("http://{}/verify?via=sluice", auth.addr);
        proxy.route(&[
            annotated(
                Route::new("app.example.com", "web", vec![backend.addr()]),
                &[
                    ("auth-url", &url),
                    ("auth-response-headers", "X-User, X-Auth-Saw, X-Email"),
                ],
            ),
            annotated(
                Route::new("signin.example.com", "web", vec![backend.addr()]),
                &[
                    ("auth-url", &url),
                    ("auth-signin", "https://login.example.com/start"),
                ],
            ),
            // oauth2-proxy's form from ingress-nginx's docs: variables expanded, `rd` kept.
            annotated(
                Route::new("oauth.example.com", "web", vec![backend.addr()]),
                &[
                    ("auth-url", &url),
                    (
                        "auth-signin",
                        "https://$host/oauth2/start?rd=$escaped_request_uri",
                    ),
                ],
            ),
            annotated(
                Route::new("down.example.com", "web", vec![backend.addr()]),
                &[("auth-url", &format!("http://{}/", closed_port().await))],
            ),
        ]);
        for (label, method, body) in SHAPES {
            let shape = (method, body);
            let got = request(
                &proxy,
                shape,
                "app.example.com",
                "/orders?id=7",
                &[
                    ("authorization", "Bearer good"),
                    ("x-user", "mallory"),
                    ("x-email", "mallory@example.com"),
                ],
            )
            .await;
            assert_eq!(got.status, 200, "{label}: {}", got.text());
            let report = got.report();
            assert_eq!(report.headers["x-user"], "alice", "{label}");
            assert!(!report.headers.contains_key("x-email"), "{label}: smuggled");
            assert_eq!(
                report.headers["x-auth-saw"],
                format!(
                    "GET {method} http://app.example.com/orders?id=7 host={} from=nginx-ingress-controller",
                    auth.addr
                ),
                "{label}"
            );
            assert_eq!(report.body_bytes, body.len() as u64, "{label}");

            let got = request(&proxy, shape, "app.example.com", "/", &[]).await;
            assert_eq!(got.status, 401, "{label}");
            assert_eq!(got.headers["www-authenticate"], "Bearer realm=\"test\"");

            let got = request(&proxy, shape, "signin.example.com", "/a?b=c", &[]).await;
            assert_eq!(got.status, 302, "{label}");
            assert_eq!(
                got.headers["location"],
                "https://login.example.com/start?rd=http%3A%2F%2Fsignin.example.com%2Fa%3Fb%3Dc"
            );

            let got = request(&proxy, shape, "oauth.example.com", "/a?b=c", &[]).await;
            assert_eq!(got.status, 302, "{label}");
            assert_eq!(
                got.headers["location"],
                "https://oauth.example.com/oauth2/start?rd=%2Fa%3Fb%3Dc"
            );

            let forbidden = [("authorization", "Bearer forbidden")];
            let got = request(&proxy, shape, "app.example.com", "/", &forbidden).await;
            assert_eq!(got.status, 403, "{label}");
            let broken = [("authorization", "Bearer broken")];
            let got = request(&proxy, shape, "app.example.com", "/", &broken).await;
            assert_eq!(got.status, 500, "{label}: auth service error");
            let slow = [("authorization", "Bearer slow")];
            let got = request(&proxy, shape, "app.example.com", "/", &slow).await;
            assert_eq!(got.status, 500, "{label}: --auth-timeout");
            let got = request(&proxy, shape, "down.example.com", "/", &[]).await;
            assert_eq!(got.status, 500, "{label}: auth service unreachable");
        }
    })
    .await;
}

/// A backend answering `body` after `delay`, for load-balancing tests.
async fn slow_server(delay: std::time::Duration, body: &'static str) -> TestServer {
    test_server(move |_| async move {
        tokio::time::sleep(delay).await;
        http::Response::new(Full::new(Bytes::from_static(body.as_bytes())))
    })
    .await
}

/// ingress-nginx's `load-balance`: `round_robin` takes endpoints in turn; `ewma` (peak
/// EWMA of latency, as ingress-nginx and linkerd) sends most requests to the fast endpoint
/// once it has seen both.
#[tokio::test]
async fn load_balance_round_robin_and_ewma() {
    init_tracing();
    bounded(async {
        let pods = [
            slow_server(std::time::Duration::ZERO, "a").await,
            slow_server(std::time::Duration::ZERO, "b").await,
            slow_server(std::time::Duration::ZERO, "c").await,
        ];
        let fast = slow_server(std::time::Duration::ZERO, "fast").await;
        let slow = slow_server(std::time::Duration::from_millis(30), "slow").await;
        let proxy = TestProxy::start(ProxyArgs::loopback()).await;
        proxy.route(&[
            annotated(
                Route::new(
                    "rr.example.com",
                    "rr",
                    pods.iter().map(|p| p.addr).collect(),
                ),
                &[("load-balance", "round_robin")],
            ),
            annotated(
                Route::new("ewma.example.com", "ewma", vec![fast.addr, slow.addr]),
                &[("load-balance", "ewma")],
            ),
        ]);
        let mut counts = std::collections::BTreeMap::new();
        for i in 0..30 {
            let (_, method, body) = SHAPES[i % 2];
            let got = request(&proxy, (method, body), "rr.example.com", "/", &[]).await;
            *counts.entry(got.text()).or_insert(0) += 1;
        }
        assert_eq!(
            counts.values().copied().collect::<Vec<_>>(),
            [10, 10, 10],
            "{counts:?}"
        );
        let mut fast_answers = 0;
        for _ in 0..100 {
            let got = request(&proxy, ("GET", ""), "ewma.example.com", "/", &[]).await;
            if got.text() == "fast" {
                fast_answers += 1;
            }
        }
        assert!(
            fast_answers >= 85,
            "fast endpoint answered {fast_answers} of 100"
        );
    })
    .await;
}

/// ingress-nginx's `limit-connections` (nginx `limit_conn`): requests in progress at once
/// per client address; one over gets 503 while the others run, and the count is given
/// back when they finish.
#[tokio::test]
async fn limit_connections_counts_requests_in_progress() {
    init_tracing();
    bounded(async {
        let (proxy, _backend) = proxy_with("conn.example.com", &[("limit-connections", "2")]).await;
        let slow = |proxy: &TestProxy| {
            let addr = proxy.http;
            tokio::spawn(async move {
                let mut sender = http1_connect(addr).await;
                let request = http::Request::get("/delay/800")
                    .header("host", "conn.example.com")
                    .body(Full::new(Bytes::new()))
                    .unwrap();
                send(&mut sender, request).await.status
            })
        };
        let first = slow(&proxy);
        let second = slow(&proxy);
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        for (_, method, body) in SHAPES {
            let got = request(&proxy, (method, body), "conn.example.com", "/", &[]).await;
            assert_eq!(got.status, 503, "{method}: a third request in progress");
        }
        assert_eq!(first.await.unwrap(), 200);
        assert_eq!(second.await.unwrap(), 200);
        let got = request(&proxy, ("GET", ""), "conn.example.com", "/", &[]).await;
        assert_eq!(got.status, 200, "the count was given back");
    })
    .await;
}

/// ingress-nginx docs, "Ingress Path Matching": an ImplementationSpecific path without regex
/// is written as nginx's `location /foo`, a string prefix, and the longest location wins
/// (Prefix `/foo` is `location /foo/`).
#[tokio::test]
async fn ingress_path_matching_implementation_specific_is_a_string_prefix() {
    init_tracing();
    bounded(async {
        let specific = echo("specific", "s-0").await;
        let prefix = echo("prefix", "p-0").await;
        let root = echo("root", "r-0").await;
        let proxy = TestProxy::start(ProxyArgs::loopback()).await;
        proxy.route(&[
            Route::new("is.example.com", "specific", vec![specific.addr()])
                .with_path("/foo")
                .with_path_type("ImplementationSpecific"),
            Route::new("is.example.com", "prefix", vec![prefix.addr()]).with_path("/foo/bar"),
            Route::new("is.example.com", "root", vec![root.addr()]),
        ]);
        for (label, method, body) in FRONT_ENDS {
            for (path, want) in [
                ("/foo", "specific"),
                ("/foobar", "specific"),
                ("/foo/x", "specific"),
                ("/foo/bar", "prefix"),
                ("/foo/bar/x", "prefix"),
                ("/foo/barx", "specific"),
                ("/fo", "root"),
            ] {
                let got = request_any(&proxy, (method, body), "is.example.com", path, &[]).await;
                assert_eq!(got.status, 200, "{label} {path}");
                assert_eq!(got.report().service, want, "{label} {path}");
            }
        }
    })
    .await;
}

/// ingress-nginx docs, "Ingress Path Matching" and `rewrite-target`: a rewrite on one
/// Ingress makes every path of its host a case-insensitive regex, without `use-regex`,
/// unless the target equals the path (ingress-nginx's `needsRewrite`).
#[tokio::test]
async fn ingress_path_matching_rewrite_target_alone_makes_the_hosts_paths_regexes() {
    init_tracing();
    bounded(async {
        let rewritten = echo("rewritten", "w-0").await;
        let plain = echo("plain", "p-0").await;
        let proxy = TestProxy::start(ProxyArgs::loopback()).await;
        proxy.route(&[
            annotated(
                Route::new("rw.example.com", "rewritten", vec![rewritten.addr()])
                    .with_path("/app(/|$)(.*)"),
                &[("rewrite-target", "/$2")],
            ),
            Route::new("rw.example.com", "plain", vec![plain.addr()]).with_path("/api"),
            // Target equal to the path: no rewrite, so no regex host.
            annotated(
                Route::new("same.example.com", "rewritten", vec![rewritten.addr()])
                    .with_path("/app"),
                &[("rewrite-target", "/app")],
            ),
            Route::new("same.example.com", "plain", vec![plain.addr()]).with_path("/api"),
        ]);
        for (label, method, body) in FRONT_ENDS {
            let got = request_any(&proxy, (method, body), "rw.example.com", "/app/x", &[]).await;
            assert_eq!(
                (got.report().service.as_str(), got.report().path.as_str()),
                ("rewritten", "/x"),
                "{label}"
            );
            // The other Ingress's Prefix /api is the regex ^/api, case-insensitive.
            let got = request_any(&proxy, (method, body), "rw.example.com", "/APIX", &[]).await;
            assert_eq!(got.report().service, "plain", "{label}");
            let got = request_any(&proxy, (method, body), "same.example.com", "/APIX", &[]).await;
            assert_eq!(got.status, 404, "{label}: Prefix /api stays whole-segment");
            let got = request_any(&proxy, (method, body), "same.example.com", "/api/x", &[]).await;
            assert_eq!(got.report().service, "plain", "{label}");
        }
    })
    .await;
}

/// nginx `location` (`proxy_pass` with a location ending in `/`: "a permanent redirect with
/// the code 301 will be returned to the requested URI with the slash appended"), which
/// ingress-nginx does for Exact and Prefix paths ending in `/`: only with
/// `--ingress-nginx-compat`; by default the Ingress spec holds (Exact `/exact/` does not
/// match `/exact`, Prefix `/my-path/` serves `/my-path`). Never for regex paths.
#[tokio::test]
async fn ingress_path_matching_trailing_slash_301_only_with_ingress_nginx_compat() {
    init_tracing();
    bounded(async {
        let web = echo("web", "web-0").await;
        let root = echo("root", "root-0").await;
        let proxy = TestProxy::start(ProxyArgs::loopback()).await;
        let routes = [
            Route::new("slash.example.com", "web", vec![web.addr()]).with_path("/my-path/"),
            Route::new("slash.example.com", "web", vec![web.addr()])
                .with_path("/exact/")
                .with_path_type("Exact"),
            Route::new("slash.example.com", "root", vec![root.addr()]),
            annotated(
                Route::new("regex.example.com", "web", vec![web.addr()]).with_path("/my-path/"),
                &[("use-regex", "true")],
            ),
            Route::new("regex.example.com", "root", vec![root.addr()]),
        ];
        let install = |compat: bool| {
            let options = CompileOptions {
                ingress_nginx_compat: compat,
                ..CompileOptions::default()
            };
            let compiled = compile(&inputs(&routes), &options);
            // Named whatever the setting, for `sluice migrate`.
            let named: Vec<(String, String)> = compiled
                .trailing_slash_redirects
                .iter()
                .map(|r| (r.host.clone(), r.path.clone()))
                .collect();
            assert_eq!(
                named,
                [
                    ("slash.example.com".to_owned(), "/my-path".to_owned()),
                    ("slash.example.com".to_owned(), "/exact".to_owned()),
                ]
            );
            proxy
                .table
                .update(compiled.table, std::time::Duration::from_millis(1));
        };
        install(false);
        for (label, method, body) in FRONT_ENDS {
            let got =
                request_any(&proxy, (method, body), "slash.example.com", "/my-path", &[]).await;
            assert_eq!(
                (got.status.as_u16(), got.report().service.as_str()),
                (200, "web"),
                "{label}"
            );
            let got = request_any(&proxy, (method, body), "slash.example.com", "/exact", &[]).await;
            assert_eq!(
                got.report().service,
                "root",
                "{label}: Exact /exact/ is not /exact"
            );
        }
        install(true);
        for (label, method, body) in FRONT_ENDS {
            let host = "slash.example.com:8080";
            let got = request_any(&proxy, (method, body), host, "/my-path?a=1", &[]).await;
            assert_eq!(got.status, 301, "{label}");
            assert_eq!(
                got.headers["location"], "http://slash.example.com/my-path/?a=1",
                "{label}"
            );
            let got = request_any(&proxy, (method, body), host, "/exact", &[]).await;
            assert_eq!(got.status, 301, "{label}");
            assert_eq!(
                got.headers["location"], "http://slash.example.com/exact/",
                "{label}"
            );
            // The paths themselves, and others, are served as before.
            for (path, want) in [
                ("/my-path/", "web"),
                ("/exact/", "web"),
                ("/my-pathx", "root"),
            ] {
                let got = request_any(&proxy, (method, body), host, path, &[]).await;
                assert_eq!(
                    (got.status.as_u16(), got.report().service.as_str()),
                    (200, want),
                    "{label} {path}"
                );
            }
            // A regex location never redirects.
            let got =
                request_any(&proxy, (method, body), "regex.example.com", "/my-path", &[]).await;
            assert_eq!(
                (got.status.as_u16(), got.report().service.as_str()),
                (200, "root"),
                "{label}"
            );
        }
    })
    .await;
}

/// `Authorization: Basic` for `user:password`.
fn basic(user: &str, password: &str) -> String {
    use base64::Engine as _;
    let encoded = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
    format!("Basic {encoded}")
}

/// An Opaque Secret in the test namespace with these string values.
fn opaque_secret(
    name: &str,
    data: &[(&str, &str)],
) -> std::sync::Arc<k8s_openapi::api::core::v1::Secret> {
    let data: std::collections::BTreeMap<&str, &str> = data.iter().copied().collect();
    std::sync::Arc::new(
        serde_json::from_value(serde_json::json!({
            "apiVersion": "v1", "kind": "Secret", "type": "Opaque",
            "metadata": {"name": name, "namespace": NS},
            "stringData": data,
        }))
        .unwrap(),
    )
}

/// ingress-nginx docs, "Authentication" (`auth-type: basic`, `auth-secret`,
/// `auth-secret-type`, `auth-realm`), nginx `auth_basic` / `auth_basic_user_file`: 401 with
/// the realm's challenge without valid credentials, the hash schemes `htpasswd` writes
/// (`$apr1$` by default, bcrypt `$2y$` with -B, `{SHA}` with -s), `auth-map`, and the
/// `Authorization` field never reaches the backend. A Secret that cannot be read closes the
/// route (503), never opens it.
#[tokio::test]
async fn authentication_basic_auth_from_a_secret() {
    init_tracing();
    bounded(async {
        let web = echo("web", "web-0").await;
        let proxy = TestProxy::start(ProxyArgs::loopback()).await;
        let auth = |secret: &str| {
            vec![
                ("auth-type", "basic".to_owned()),
                ("auth-secret", secret.to_owned()),
                ("auth-realm", "Authentication Required - foo".to_owned()),
            ]
        };
        let route = |host: &str, annotations: &[(&str, String)]| {
            let pairs: Vec<(&str, &str)> =
                annotations.iter().map(|(k, v)| (*k, v.as_str())).collect();
            annotated(Route::new(host, "web", vec![web.addr()]), &pairs)
        };
        let mut map = auth("users-map");
        map.push(("auth-secret-type", "auth-map".to_owned()));
        let routes = [
            route("file.example.com", &auth("basic-auth")),
            route("map.example.com", &map),
            route("missing.example.com", &auth("no-such-secret")),
        ];
        let mut objects = inputs(&routes);
        objects.secrets.push(opaque_secret(
            "basic-auth",
            &[(
                "auth",
                "# htpasswd -c auth foo\n\
                 foo:$apr1$lZL6V/ci$eIMz/iKDkbtys/uU7LEK00\n\
                 sha:{SHA}W6ph5Mm5Pz8GgiULbPgzG37mj9g=\n\
                 odd:$9$not-a-scheme\n",
            )],
        ));
        objects.secrets.push(opaque_secret(
            "users-map",
            &[(
                "bcrypt",
                "$2y$05$bvIG6Nmid91Mu9RcmmWZfO5HJIMCT8riNW0hEp8f6/FuA2/mHZFpe",
            )],
        ));
        let compiled = compile(&objects, &CompileOptions::default());
        let closed: Vec<_> = compiled
            .diagnostics
            .iter()
            .filter(|d| d.reason == Reason::FailedClosed)
            .collect();
        assert_eq!(closed.len(), 1, "{:?}", compiled.diagnostics);
        assert!(
            closed[0].message.contains("no-such-secret not found"),
            "{}",
            closed[0].message
        );
        proxy
            .table
            .update(compiled.table, std::time::Duration::from_millis(1));

        let challenge = "Basic realm=\"Authentication Required - foo\"";
        for (label, method, body) in FRONT_ENDS {
            let shape = (method, body);
            for (host, credentials) in [
                ("file.example.com", None),
                ("file.example.com", Some(basic("foo", "wrong"))),
                ("file.example.com", Some(basic("nobody", "password"))),
                ("file.example.com", Some("Bearer token".to_owned())),
                ("map.example.com", Some(basic("foo", "password"))),
                ("map.example.com", Some(basic("bcrypt", "Password"))),
            ] {
                let headers: Vec<(&str, &str)> = credentials
                    .iter()
                    .map(|c| ("authorization", c.as_str()))
                    .collect();
                let got = request_any(&proxy, shape, host, "/", &headers).await;
                assert_eq!(got.status, 401, "{label} {host} {credentials:?}");
                assert_eq!(got.headers["www-authenticate"], challenge, "{label} {host}");
            }
            for (host, user) in [
                ("file.example.com", "foo"),
                ("file.example.com", "sha"),
                ("map.example.com", "bcrypt"),
            ] {
                let credentials = basic(user, "password");
                let headers = [("authorization", credentials.as_str())];
                let got = request_any(&proxy, shape, host, "/x", &headers).await;
                assert_eq!(got.status, 200, "{label} {host} {user}");
                let report = got.report();
                assert!(
                    !report.headers.contains_key("authorization"),
                    "{label}: the credentials reach the backend: {:?}",
                    report.headers
                );
            }
            // A hash of no scheme: nginx's 500, not 200.
            let credentials = basic("odd", "password");
            let headers = [("authorization", credentials.as_str())];
            let got = request_any(&proxy, shape, "file.example.com", "/", &headers).await;
            assert_eq!(got.status, 500, "{label}");
            // No Secret: closed, whatever the credentials.
            let credentials = basic("foo", "password");
            let headers = [("authorization", credentials.as_str())];
            let got = request_any(&proxy, shape, "missing.example.com", "/", &headers).await;
            assert_eq!(got.status, 503, "{label}");
        }
    })
    .await;
}

/// ingress-nginx's `satisfy` annotation (nginx `satisfy any|all`) with
/// `whitelist-source-range` and basic authentication: `any` lets a client of the range in
/// without credentials and one outside it in with them; `all` wants both (403 outside the
/// range, whatever the credentials).
#[tokio::test]
async fn satisfy_any_or_all_with_source_ranges_and_basic_auth() {
    init_tracing();
    bounded(async {
        let web = echo("web", "web-0").await;
        let proxy = TestProxy::start(ProxyArgs::loopback()).await;
        let route = |host: &str, range: &str, satisfy: &str| {
            annotated(
                Route::new(host, "web", vec![web.addr()]),
                &[
                    ("auth-type", "basic"),
                    ("auth-secret", "basic-auth"),
                    ("whitelist-source-range", range),
                    ("satisfy", satisfy),
                ],
            )
        };
        let routes = [
            route("any-inside.example.com", "127.0.0.0/8", "any"),
            route("any-outside.example.com", "10.0.0.0/8", "any"),
            route("all-inside.example.com", "127.0.0.0/8", "all"),
            route("all-outside.example.com", "10.0.0.0/8", "all"),
        ];
        let mut objects = inputs(&routes);
        objects.secrets.push(opaque_secret(
            "basic-auth",
            &[("auth", "foo:{PLAIN}password\n")],
        ));
        let compiled = compile(&objects, &CompileOptions::default());
        assert!(
            compiled
                .diagnostics
                .iter()
                .all(|d| d.reason != Reason::FailedClosed),
            "{:?}",
            compiled.diagnostics
        );
        proxy
            .table
            .update(compiled.table, std::time::Duration::from_millis(1));
        let good = basic("foo", "password");
        let bad = basic("foo", "nope");
        for (label, method, body) in FRONT_ENDS {
            for (host, credentials, want) in [
                ("any-inside.example.com", None, 200),
                ("any-inside.example.com", Some(&bad), 200),
                ("any-outside.example.com", None, 401),
                ("any-outside.example.com", Some(&bad), 401),
                ("any-outside.example.com", Some(&good), 200),
                ("all-inside.example.com", None, 401),
                ("all-inside.example.com", Some(&good), 200),
                ("all-outside.example.com", Some(&good), 403),
                ("all-outside.example.com", None, 403),
            ] {
                let headers: Vec<(&str, &str)> = credentials
                    .iter()
                    .map(|c| ("authorization", c.as_str()))
                    .collect();
                let got = request_any(&proxy, (method, body), host, "/", &headers).await;
                assert_eq!(got.status, want, "{label} {host} {credentials:?}");
            }
        }
    })
    .await;
}

/// ingress-nginx docs, "Server Alias": the aliases are more names of the host's server, so
/// every path of the host (from every Ingress on it) answers under them; an alias that is
/// the host of an Ingress rule keeps its own rules.
#[tokio::test]
async fn server_alias_serves_the_hosts_rules_under_more_names() {
    init_tracing();
    bounded(async {
        let web = echo("web", "web-0").await;
        let api = echo("api", "api-0").await;
        let taken = echo("taken", "taken-0").await;
        let proxy = TestProxy::start(ProxyArgs::loopback()).await;
        let routes = [
            annotated(
                Route::new("main.example.com", "web", vec![web.addr()]),
                &[(
                    "server-alias",
                    "other.example.com, *.wild.example, taken.example.com",
                )],
            ),
            // Another Ingress on the same host: its path is served under the aliases too.
            Route::new("main.example.com", "api", vec![api.addr()]).with_path("/api"),
            Route::new("taken.example.com", "taken", vec![taken.addr()]),
        ];
        let compiled = compile(&inputs(&routes), &CompileOptions::default());
        let ignored: Vec<_> = compiled
            .diagnostics
            .iter()
            .filter(|d| d.field.contains("server-alias"))
            .collect();
        assert_eq!(ignored.len(), 1, "{:?}", compiled.diagnostics);
        assert!(
            ignored[0].message.contains("taken.example.com"),
            "{}",
            ignored[0].message
        );
        proxy
            .table
            .update(compiled.table, std::time::Duration::from_millis(1));
        for (label, method, body) in FRONT_ENDS {
            for (host, path, want) in [
                ("main.example.com", "/", "web"),
                ("other.example.com", "/x", "web"),
                ("OTHER.example.com:8080", "/api/v1", "api"),
                ("a.wild.example", "/api", "api"),
                ("taken.example.com", "/", "taken"),
            ] {
                let got = request_any(&proxy, (method, body), host, path, &[]).await;
                assert_eq!(got.status, 200, "{label} {host}{path}");
                assert_eq!(got.report().service, want, "{label} {host}{path}");
            }
            let got = request_any(&proxy, (method, body), "unlisted.example.com", "/", &[]).await;
            assert_eq!(got.status, 404, "{label}");
        }
    })
    .await;
}

/// ingress-nginx docs, "Redirect from/to www": `www.` + host redirects to a host without
/// `www.`, and the bare name to a `www.` host, with ingress-nginx's 308 (its
/// `http-redirect-code`), the request URI without its final `/` (`ngx_srv_redirect.lua`);
/// a name that has rules of its own keeps them.
#[tokio::test]
async fn redirect_from_to_www_is_308_to_the_rule_host() {
    init_tracing();
    bounded(async {
        let web = echo("web", "web-0").await;
        let other = echo("other", "other-0").await;
        let proxy = TestProxy::start(ProxyArgs::loopback()).await;
        let www = [("from-to-www-redirect", "true")];
        let routes = [
            annotated(
                Route::new("shop.example.com", "web", vec![web.addr()]),
                &www,
            ),
            annotated(
                Route::new("www.blog.example.com", "web", vec![web.addr()]),
                &www,
            ),
            annotated(
                Route::new("kept.example.com", "web", vec![web.addr()]),
                &www,
            ),
            Route::new("www.kept.example.com", "other", vec![other.addr()]),
        ];
        proxy.route(&routes);
        for (label, method, body) in FRONT_ENDS {
            for (host, path, location) in [
                (
                    "www.shop.example.com:8080",
                    "/a/b?x=1",
                    "http://shop.example.com:8080/a/b?x=1",
                ),
                ("www.shop.example.com", "/a/", "http://shop.example.com/a"),
                ("www.shop.example.com", "/", "http://shop.example.com"),
                (
                    "blog.example.com",
                    "/post",
                    "http://www.blog.example.com/post",
                ),
            ] {
                let got = request_any(&proxy, (method, body), host, path, &[]).await;
                assert_eq!(got.status, 308, "{label} {host}{path}");
                assert_eq!(got.headers["location"], location, "{label} {host}{path}");
            }
            for (host, want) in [
                ("shop.example.com", "web"),
                ("www.blog.example.com", "web"),
                ("www.kept.example.com", "other"),
            ] {
                let got = request_any(&proxy, (method, body), host, "/", &[]).await;
                assert_eq!(
                    (got.status.as_u16(), got.report().service.as_str()),
                    (200, want),
                    "{label} {host}"
                );
            }
        }
    })
    .await;
}

/// ingress-nginx docs, "Proxy redirect", "Proxy cookie domain", "Proxy cookie path" (nginx
/// `proxy_redirect`, `proxy_cookie_domain`, `proxy_cookie_path`): the upstream's
/// `Location`, `Refresh` and `Set-Cookie` reach the client rewritten; other fields and
/// other values pass as they came.
#[tokio::test]
async fn proxy_redirect_and_proxy_cookie_rewrite_the_upstreams_answer() {
    init_tracing();
    bounded(async {
        let app = test_server(
            |_request: http::Request<hyper::body::Incoming>| async move {
                http::Response::builder()
                    .status(302)
                    .header("location", "http://app.internal:8080/login?next=/")
                    .header("refresh", "3; url=http://app.internal:8080/later")
                    .header(
                        "set-cookie",
                        "sid=1; Domain=app.internal; Path=/app/a; HttpOnly",
                    )
                    .header("set-cookie", "other=2; Domain=elsewhere.example; Path=/b")
                    .header("x-kept", "http://app.internal:8080/")
                    .body(Full::new(Bytes::new()))
                    .unwrap()
            },
        )
        .await;
        let proxy = TestProxy::start(ProxyArgs::loopback()).await;
        proxy.route(&[
            annotated(
                Route::new("rw.example.com", "app", vec![app.addr]),
                &[
                    ("proxy-redirect-from", "http://app.internal:8080/"),
                    ("proxy-redirect-to", "https://rw.example.com/"),
                    ("proxy-cookie-domain", "app.internal rw.example.com"),
                    ("proxy-cookie-path", "/app/ /"),
                ],
            ),
            Route::new("plain.example.com", "app", vec![app.addr]),
        ]);
        for (label, method, body) in FRONT_ENDS {
            let got = request_any(&proxy, (method, body), "rw.example.com", "/", &[]).await;
            assert_eq!(got.status, 302, "{label}");
            let all = |name: &str| -> Vec<String> {
                got.headers
                    .get_all(name)
                    .iter()
                    .map(|v| v.to_str().unwrap().to_owned())
                    .collect()
            };
            assert_eq!(
                all("location"),
                ["https://rw.example.com/login?next=/"],
                "{label}"
            );
            assert_eq!(
                all("refresh"),
                ["3; url=https://rw.example.com/later"],
                "{label}"
            );
            assert_eq!(
                all("set-cookie"),
                [
                    "sid=1; Domain=rw.example.com; Path=/a; HttpOnly",
                    "other=2; Domain=elsewhere.example; Path=/b",
                ],
                "{label}"
            );
            assert_eq!(all("x-kept"), ["http://app.internal:8080/"], "{label}");
            // Without the annotations: as the upstream sent them.
            let got = request_any(&proxy, (method, body), "plain.example.com", "/", &[]).await;
            assert_eq!(
                got.headers["location"], "http://app.internal:8080/login?next=/",
                "{label}"
            );
        }
    })
    .await;
}

/// ingress-nginx docs, "Connection proxy header": the `Connection` field the upstream gets
/// is the annotation's (nginx `proxy_set_header Connection <value>`), whatever the client
/// sent; without it the client's never crosses (hop-by-hop).
#[tokio::test]
async fn connection_proxy_header_sets_the_upstream_connection_field() {
    init_tracing();
    bounded(async {
        let web = echo("web", "web-0").await;
        let proxy = TestProxy::start(ProxyArgs::loopback()).await;
        proxy.route(&[
            annotated(
                Route::new("conn.example.com", "web", vec![web.addr()]),
                &[("connection-proxy-header", "keep-alive")],
            ),
            Route::new("plain.example.com", "web", vec![web.addr()]),
        ]);
        for (label, method, body) in FRONT_ENDS {
            let got = request_any(&proxy, (method, body), "conn.example.com", "/", &[]).await;
            let report = got.report();
            assert_eq!(
                report.headers.get("connection").map(String::as_str),
                Some("keep-alive"),
                "{label}: {:?}",
                report.headers
            );
            let got = request_any(&proxy, (method, body), "plain.example.com", "/", &[]).await;
            assert_eq!(got.report().headers.get("connection"), None, "{label}");
        }
    })
    .await;
}

/// ingress-nginx docs, "Proxy buffering" (`proxy-request-buffering`, nginx
/// `proxy_request_buffering on`): the whole body is read before the upstream is asked, so a
/// chunked upload reaches it with its `Content-Length`, and one over `proxy-body-size` is
/// refused (413) without the upstream ever seeing it. Without it the body streams through
/// as it came (chunked).
#[tokio::test]
async fn proxy_request_buffering_reads_the_body_before_the_upstream_sees_it() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    init_tracing();
    bounded(async {
        let seen = Arc::new(AtomicUsize::new(0));
        let counter = Arc::clone(&seen);
        let app = test_server(move |request: http::Request<hyper::body::Incoming>| {
            let counter = Arc::clone(&counter);
            async move {
                counter.fetch_add(1, Ordering::SeqCst);
                let framing = match (
                    request.headers().get("content-length"),
                    request.headers().get("transfer-encoding"),
                ) {
                    (Some(length), None) => format!("length {}", length.to_str().unwrap()),
                    (None, Some(coding)) => format!("coding {}", coding.to_str().unwrap()),
                    other => format!("{other:?}"),
                };
                let body = http_body_util::BodyExt::collect(request.into_body())
                    .await
                    .map(|c| c.to_bytes())
                    .unwrap_or_default();
                let text = format!("{framing}; {}", String::from_utf8_lossy(&body));
                http::Response::new(Full::new(Bytes::from(text)))
            }
        })
        .await;
        let proxy = TestProxy::start(ProxyArgs::loopback()).await;
        proxy.route(&[
            annotated(
                Route::new("buffered.example.com", "app", vec![app.addr]),
                &[("proxy-request-buffering", "on")],
            ),
            annotated(
                Route::new("small.example.com", "app", vec![app.addr]),
                &[("proxy-request-buffering", "on"), ("proxy-body-size", "8")],
            ),
            Route::new("streamed.example.com", "app", vec![app.addr]),
        ]);
        // A chunked upload in two pieces, the second after a pause.
        let upload = |host: &'static str| async move {
            let mut tcp = tokio::net::TcpStream::connect(proxy.http).await.unwrap();
            let head = format!(
                "POST /up HTTP/1.1\r\nHost: {host}\r\nTransfer-Encoding: chunked\r\n\
                 Connection: close\r\n\r\n5\r\nhello\r\n"
            );
            tcp.write_all(head.as_bytes()).await.unwrap();
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
            tcp.write_all(b"6\r\n world\r\n0\r\n\r\n").await.unwrap();
            let mut answer = Vec::new();
            let _ = tcp.read_to_end(&mut answer).await;
            String::from_utf8_lossy(&answer).into_owned()
        };
        let answer = upload("buffered.example.com").await;
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        assert!(answer.ends_with("length 11; hello world"), "{answer}");
        let answer = upload("streamed.example.com").await;
        assert!(answer.ends_with("coding chunked; hello world"), "{answer}");
        let before = seen.load(Ordering::SeqCst);
        let answer = upload("small.example.com").await;
        assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
        assert_eq!(seen.load(Ordering::SeqCst), before, "the upstream saw it");
    })
    .await;
}

/// ingress-nginx docs, "Proxy HTTP version" (nginx `proxy_http_version`): `1.0` speaks
/// HTTP/1.0 to the upstream, a chunked upload arriving there with its `Content-Length`
/// (HTTP/1.0 has no chunked coding); the default stays HTTP/1.1.
#[tokio::test]
async fn proxy_http_version_1_0_towards_the_upstream() {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    init_tracing();
    bounded(async {
        let app = test_server(|request: http::Request<hyper::body::Incoming>| async move {
            let version = format!("{:?}", request.version());
            let length = request
                .headers()
                .get("content-length")
                .map(|v| v.to_str().unwrap().to_owned());
            let body = http_body_util::BodyExt::collect(request.into_body())
                .await
                .map(|c| c.to_bytes())
                .unwrap_or_default();
            let text = format!("{version} {length:?} {}", String::from_utf8_lossy(&body));
            http::Response::new(Full::new(Bytes::from(text)))
        })
        .await;
        let proxy = TestProxy::start(ProxyArgs::loopback()).await;
        proxy.route(&[
            annotated(
                Route::new("old.example.com", "app", vec![app.addr]),
                &[("proxy-http-version", "1.0")],
            ),
            Route::new("new.example.com", "app", vec![app.addr]),
        ]);
        for (label, method, body) in FRONT_ENDS {
            for _ in 0..2 {
                let got = request_any(&proxy, (method, body), "old.example.com", "/", &[]).await;
                assert_eq!(got.status, 200, "{label}");
                assert!(
                    got.text().starts_with("HTTP/1.0 "),
                    "{label}: {}",
                    got.text()
                );
            }
            let got = request_any(&proxy, (method, body), "new.example.com", "/", &[]).await;
            assert!(
                got.text().starts_with("HTTP/1.1 "),
                "{label}: {}",
                got.text()
            );
        }
        let mut tcp = tokio::net::TcpStream::connect(proxy.http).await.unwrap();
        tcp.write_all(
            b"POST / HTTP/1.1\r\nHost: old.example.com\r\nTransfer-Encoding: chunked\r\n\
              Connection: close\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
        )
        .await
        .unwrap();
        let mut answer = Vec::new();
        let _ = tcp.read_to_end(&mut answer).await;
        let answer = String::from_utf8_lossy(&answer);
        assert!(answer.ends_with("HTTP/1.0 Some(\"5\") hello"), "{answer}");
    })
    .await;
}

/// ingress-nginx's `limit-rate` and `limit-rate-after` (kilobytes; nginx `limit_rate`,
/// `limit_rate_after`): the first kilobyte leaves at once, the next two at 1 KB/s, so the
/// body takes about two seconds, whole; without them it is at once.
#[tokio::test]
async fn limit_rate_paces_the_response_after_limit_rate_after() {
    init_tracing();
    bounded(async {
        let web = echo("web", "web-0").await;
        let proxy = TestProxy::start(ProxyArgs::loopback()).await;
        proxy.route(&[
            annotated(
                Route::new("slow.example.com", "web", vec![web.addr()]),
                &[("limit-rate", "1"), ("limit-rate-after", "1")],
            ),
            Route::new("fast.example.com", "web", vec![web.addr()]),
        ]);
        for (label, method, body) in FRONT_ENDS {
            let started = std::time::Instant::now();
            let got = request_any(
                &proxy,
                (method, body),
                "slow.example.com",
                "/bytes/3072",
                &[],
            )
            .await;
            let took = started.elapsed();
            assert_eq!(got.status, 200, "{label}");
            assert_eq!(got.body.len(), 3072, "{label}");
            assert!(
                took >= std::time::Duration::from_millis(1500)
                    && took < std::time::Duration::from_secs(10),
                "{label}: 2 KB at 1 KB/s took {took:?}"
            );
            let started = std::time::Instant::now();
            let got = request_any(
                &proxy,
                (method, body),
                "fast.example.com",
                "/bytes/3072",
                &[],
            )
            .await;
            assert_eq!(got.body.len(), 3072, "{label}");
            assert!(
                started.elapsed() < std::time::Duration::from_millis(1000),
                "{label}"
            );
        }
    })
    .await;
}

/// A mirror stand-in: records each request head it gets (lower-cased) with the body its
/// `content-length` announces (at most 64 KiB), and answers 200.
async fn mirror_recorder() -> (
    std::net::SocketAddr,
    std::sync::Arc<std::sync::Mutex<Vec<String>>>,
) {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let heads = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = std::sync::Arc::clone(&heads);
    tokio::spawn(async move {
        while let Ok((mut tcp, _)) = listener.accept().await {
            let seen = std::sync::Arc::clone(&seen);
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                let end = loop {
                    if let Some(at) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                        break at + 4;
                    }
                    match tcp.read(&mut chunk).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => buf.extend_from_slice(&chunk[..n]),
                    }
                };
                let mut head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
                let length: usize = head
                    .lines()
                    .find_map(|l| l.strip_prefix("content-length: "))
                    .and_then(|n| n.trim().parse().ok())
                    .unwrap_or(0)
                    .min(64 * 1024);
                while buf.len() < end + length {
                    match tcp.read(&mut chunk).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => buf.extend_from_slice(&chunk[..n]),
                    }
                }
                head.push_str(&String::from_utf8_lossy(&buf[end..]));
                seen.lock().unwrap().push(head);
                let _ = tcp
                    .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n")
                    .await;
            });
        }
    });
    (addr, heads)
}

/// ingress-nginx docs, "Mirror" (nginx `mirror`): every request of the Ingress is copied
/// to `mirror-target`'s Service with the request's URI and, as Host, the target's host (or
/// `mirror-host`); the client gets the primary's answer. `mirror-request-body` (default
/// `on`, nginx `mirror_request_body`): copies carry the request's body; with `off`
/// requests with a body are not copied.
#[tokio::test]
async fn mirror_target_copies_requests_to_a_service() {
    init_tracing();
    bounded(async {
        let web = echo("web", "web-0").await;
        let (shadow, heads) = mirror_recorder().await;
        let proxy = TestProxy::start(ProxyArgs::loopback()).await;
        let routes = [
            annotated(
                Route::new("mirrored.example.com", "web", vec![web.addr()]),
                &[(
                    "mirror-target",
                    "http://shadow.default.svc.cluster.local$request_uri",
                )],
            ),
            annotated(
                Route::new("hosted.example.com", "web", vec![web.addr()]).with_path("/h"),
                &[
                    ("mirror-target", "http://shadow$request_uri"),
                    ("mirror-host", "test.env.com"),
                    ("mirror-request-body", "off"),
                ],
            ),
            // The Service the copies go to.
            Route::new("shadow.example.com", "shadow", vec![shadow]),
        ];
        let compiled = compile(&inputs(&routes), &CompileOptions::default());
        assert!(
            compiled.diagnostics.is_empty(),
            "{:?}",
            compiled.diagnostics
        );
        proxy
            .table
            .update(compiled.table, std::time::Duration::from_millis(1));
        let wait_for = |n: usize| {
            let heads = std::sync::Arc::clone(&heads);
            async move {
                for _ in 0..200 {
                    if heads.lock().unwrap().len() >= n {
                        break;
                    }
                    tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                }
                heads.lock().unwrap().clone()
            }
        };
        let mut expected = 0;
        for (label, method, body) in FRONT_ENDS {
            let got = request_any(
                &proxy,
                (method, body),
                "mirrored.example.com",
                "/m?x=1",
                &[],
            )
            .await;
            assert_eq!(
                got.report().service,
                "web",
                "{label}: the client gets the primary"
            );
            assert_eq!(got.report().body_bytes, body.len() as u64, "{label}");
            expected += 1;
            let seen = wait_for(expected).await;
            assert_eq!(seen.len(), expected, "{label}: {seen:?}");
            let last = &seen[expected - 1];
            let wire = if method == H2 {
                "get".to_owned()
            } else {
                method.to_lowercase()
            };
            let line = format!("{wire} /m?x=1 http/1.1\r\n");
            assert!(last.starts_with(&line), "{label}: {last}");
            assert!(
                last.contains("\r\nhost: shadow.default.svc.cluster.local\r\n"),
                "{label}: {last}"
            );
            // The copy carries the body, with its length.
            assert!(
                last.ends_with(&format!("\r\n\r\n{body}")),
                "{label}: {last}"
            );
            if !body.is_empty() {
                assert!(
                    last.contains(&format!("\r\ncontent-length: {}\r\n", body.len())),
                    "{label}: {last}"
                );
            }
            let got = request_any(&proxy, (method, body), "hosted.example.com", "/h/1", &[]).await;
            assert_eq!(got.status, 200, "{label}");
            assert_eq!(got.report().body_bytes, body.len() as u64, "{label}");
            if !body.is_empty() {
                // `mirror-request-body: off`: a request with a body is not copied.
                continue;
            }
            expected += 1;
            let seen = wait_for(expected).await;
            let last = &seen[expected - 1];
            assert!(last.starts_with("get /h/1 http/1.1\r\n"), "{label}: {last}");
            assert!(
                last.contains("\r\nhost: test.env.com\r\n"),
                "{label}: {last}"
            );
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        assert_eq!(
            heads.lock().unwrap().len(),
            expected,
            "the POST with mirror-request-body: off was not copied"
        );
    })
    .await;
}

/// ingress-nginx docs, "Mirror" (`mirror-request-body`, default `on`; nginx's mirror
/// subrequests never hold the main request): with a mirror that accepts connections and
/// never reads, requests with a 256 KiB body all get the primary's answer at once (the
/// copies wait on their own, bounded by the route's `proxy-read-timeout`).
#[tokio::test]
async fn mirror_request_body_copies_never_delay_the_client() {
    init_tracing();
    bounded(async {
        let web = echo("web", "web-0").await;
        // Accepts connections (the kernel's backlog) and never reads or answers.
        let stalled = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let stalled_addr = stalled.local_addr().unwrap();
        let proxy = TestProxy::start(ProxyArgs::loopback()).await;
        proxy.route(&[
            annotated(
                Route::new("mirrored.example.com", "web", vec![web.addr()]),
                &[
                    ("mirror-target", "http://stalled$request_uri"),
                    ("proxy-read-timeout", "1"),
                ],
            ),
            Route::new("stalled.example.com", "stalled", vec![stalled_addr]),
        ]);
        let body = "b".repeat(256 * 1024);
        let started = std::time::Instant::now();
        for _ in 0..10 {
            let got = request(&proxy, ("POST", &body), "mirrored.example.com", "/", &[]).await;
            assert_eq!(got.status, 200);
            assert_eq!(got.report().body_bytes, body.len() as u64);
        }
        let took = started.elapsed();
        assert!(
            took < std::time::Duration::from_millis(900),
            "10 requests took {took:?}"
        );
        drop(stalled);
    })
    .await;
}

/// ingress-nginx docs, "Preserve trailing slash" (`lua_ingress.lua`'s HTTPS redirect): the
/// redirect drops the request URI's final `/` unless `preserve-trailing-slash: "true"`.
#[tokio::test]
async fn preserve_trailing_slash_in_the_https_redirect() {
    init_tracing();
    bounded(async {
        let web = echo("web", "web-0").await;
        let proxy = TestProxy::start(ProxyArgs::loopback()).await;
        proxy.route(&[
            annotated(
                Route::new("strip.example.com", "web", vec![web.addr()]),
                &[("force-ssl-redirect", "true")],
            ),
            annotated(
                Route::new("keep.example.com", "web", vec![web.addr()]),
                &[
                    ("force-ssl-redirect", "true"),
                    ("preserve-trailing-slash", "true"),
                ],
            ),
        ]);
        for (label, method, body) in FRONT_ENDS {
            for (host, path, location) in [
                (
                    "strip.example.com",
                    "/dir/",
                    "https://strip.example.com/dir",
                ),
                (
                    "strip.example.com",
                    "/dir/?a=b/",
                    "https://strip.example.com/dir/?a=b",
                ),
                ("strip.example.com", "/", "https://strip.example.com"),
                ("strip.example.com", "/x", "https://strip.example.com/x"),
                ("keep.example.com", "/dir/", "https://keep.example.com/dir/"),
                ("keep.example.com", "/", "https://keep.example.com/"),
            ] {
                let got = request_any(&proxy, (method, body), host, path, &[]).await;
                assert_eq!(got.status, 308, "{label} {host}{path}");
                assert_eq!(got.headers["location"], location, "{label} {host}{path}");
            }
        }
    })
    .await;
}

/// ingress-nginx's `proxy-next-upstream-timeout` (nginx `proxy_next_upstream_timeout`):
/// once the limit has passed since the first try began, no next endpoint is tried. An
/// upstream answering 502 after 600 ms with `http_502` retries: three tries without the
/// limit, two with one second.
#[tokio::test]
async fn proxy_next_upstream_timeout_stops_the_retries() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    init_tracing();
    bounded(async {
        let tries = Arc::new(AtomicUsize::new(0));
        let counter = Arc::clone(&tries);
        let slow = test_server(move |_request: http::Request<hyper::body::Incoming>| {
            let counter = Arc::clone(&counter);
            async move {
                counter.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(std::time::Duration::from_millis(600)).await;
                http::Response::builder()
                    .status(502)
                    .body(Full::new(Bytes::new()))
                    .unwrap()
            }
        })
        .await;
        let proxy = TestProxy::start(ProxyArgs::loopback()).await;
        let retry = [("proxy-next-upstream", "error timeout http_502")];
        proxy.route(&[
            annotated(
                Route::new("limited.example.com", "slow", vec![slow.addr]),
                &{
                    let mut a = retry.to_vec();
                    a.push(("proxy-next-upstream-timeout", "1"));
                    a
                },
            ),
            annotated(
                Route::new("unlimited.example.com", "slow", vec![slow.addr]),
                &retry,
            ),
        ]);
        for (host, want) in [("unlimited.example.com", 3), ("limited.example.com", 2)] {
            tries.store(0, Ordering::SeqCst);
            let got = request_any(&proxy, ("GET", ""), host, "/", &[]).await;
            assert_eq!(got.status, 502, "{host}");
            assert_eq!(tries.load(Ordering::SeqCst), want, "{host}");
        }
    })
    .await;
}

/// ingress-nginx's `session-cookie-conditional-samesite-none` (`util/same_site.lua`): the
/// affinity cookie's `SameSite=None` is left out for clients known to reject it (Chrome 51
/// to 66, iOS 12, Safari on macOS 10.14) and kept for the others; without the annotation it
/// is always there.
#[tokio::test]
async fn session_cookie_conditional_samesite_none_by_user_agent() {
    init_tracing();
    bounded(async {
        let web = echo("web", "web-0").await;
        let proxy = TestProxy::start(ProxyArgs::loopback()).await;
        let sticky = [
            ("affinity", "cookie"),
            ("session-cookie-samesite", "None"),
            ("session-cookie-secure", "true"),
        ];
        proxy.route(&[
            annotated(Route::new("cond.example.com", "web", vec![web.addr()]), &{
                let mut a = sticky.to_vec();
                a.push(("session-cookie-conditional-samesite-none", "true"));
                a
            }),
            annotated(
                Route::new("always.example.com", "web", vec![web.addr()]),
                &sticky,
            ),
        ]);
        let old_chrome = "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) \
                          Chrome/66.0.3359.181 Safari/537.36";
        let new_chrome = "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) \
                          Chrome/120.0.0.0 Safari/537.36";
        for (label, method, body) in FRONT_ENDS {
            for (host, agent, samesite) in [
                ("cond.example.com", old_chrome, false),
                ("cond.example.com", new_chrome, true),
                ("always.example.com", old_chrome, true),
            ] {
                let got =
                    request_any(&proxy, (method, body), host, "/", &[("user-agent", agent)]).await;
                let cookie = got.headers["set-cookie"].to_str().unwrap().to_owned();
                assert!(cookie.starts_with("INGRESSCOOKIE="), "{label}: {cookie}");
                assert!(cookie.contains("; Secure"), "{label}: {cookie}");
                assert_eq!(
                    cookie.contains("; SameSite=None"),
                    samesite,
                    "{label} {host} {agent}: {cookie}"
                );
            }
        }
    })
    .await;
}

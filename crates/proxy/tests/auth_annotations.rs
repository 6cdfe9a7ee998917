//! ingress-nginx's authentication annotations through the real proxy, named after the
//! sections of its annotations documentation ("Authentication", "External
//! Authentication"), with real exchanges computed in the test independently of sluice.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use bytes::Bytes;
use common::*;
use http::Request;
use http_body_util::Full;
use md5::{Digest as _, Md5};
use sluice_proxy::ProxyArgs;
use sluice_routing::{CompileOptions, Reason, compile};

const NGINX: &str = "nginx.ingress.kubernetes.io/";

/// A request of each front end: (label, method, body); `H2` is a GET over h2c.
const FRONT_ENDS: [(&str, &str, &str); 3] = [
    ("own loop GET", "GET", ""),
    ("hyper POST", "POST", "x=1"),
    ("h2c GET", "H2", ""),
];

/// Sends `method path` to `host` with extra `headers` over HTTP/1.1, or a GET over h2c
/// (prior knowledge, `:authority` the host) when `method` is `H2`.
async fn request(
    proxy: &TestProxy,
    (method, body): (&str, &str),
    host: &str,
    path: &str,
    headers: &[(&str, &str)],
) -> Answer {
    let h2 = method == "H2";
    let mut builder = if h2 {
        Request::get(format!("http://{host}{path}"))
    } else {
        Request::builder()
            .method(method)
            .uri(path)
            .header("host", host)
    };
    for (name, value) in headers {
        builder = builder.header(*name, *value);
    }
    let request = builder
        .body(Full::new(Bytes::from(body.to_owned())))
        .unwrap();
    if !h2 {
        let mut sender = http1_connect(proxy.http).await;
        return send(&mut sender, request).await;
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
    let response = sender.send_request(request).await.expect("h2 response");
    let answer = collect(response).await;
    connection.abort();
    answer
}

/// The method the proxy sees for a front end's request.
fn wire_method(method: &str) -> &str {
    if method == "H2" { "GET" } else { method }
}

fn annotated(mut route: Route, annotations: &[(&str, &str)]) -> Route {
    for (key, value) in annotations {
        route = route.with_annotation(&format!("{NGINX}{key}"), value);
    }
    route
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

fn md5_hex(text: &str) -> String {
    Md5::digest(text.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The parameters of a `WWW-Authenticate: Digest ...` challenge, read loosely (by name).
fn challenge_param(challenge: &str, name: &str) -> Option<String> {
    let at = challenge.find(&format!("{name}="))? + name.len() + 1;
    let rest = &challenge[at..];
    Some(match rest.strip_prefix('"') {
        Some(quoted) => quoted[..quoted.find('"')?].to_owned(),
        None => rest.split([',', ' ']).next()?.to_owned(),
    })
}

/// A client's answer to a digest challenge (RFC 7616 section 3.4, MD5, `qop=auth`),
/// computed here from the password: HA1 = MD5(user:realm:password), HA2 = MD5(method:uri),
/// response = MD5(HA1:nonce:nc:cnonce:auth:HA2).
struct Client<'a> {
    user: &'a str,
    realm: &'a str,
    password: &'a str,
}

impl Client<'_> {
    fn authorization(&self, method: &str, uri: &str, nonce: &str, nc: u32) -> String {
        let (user, realm) = (self.user, self.realm);
        let ha1 = md5_hex(&format!("{user}:{realm}:{}", self.password));
        let ha2 = md5_hex(&format!("{method}:{uri}"));
        let nc = format!("{nc:08x}");
        let cnonce = "0a4f113b";
        let response = md5_hex(&format!("{ha1}:{nonce}:{nc}:{cnonce}:auth:{ha2}"));
        format!(
            "Digest username=\"{user}\", realm=\"{realm}\", nonce=\"{nonce}\", uri=\"{uri}\", \
             algorithm=MD5, qop=auth, nc={nc}, cnonce=\"{cnonce}\", response=\"{response}\""
        )
    }
}

/// ingress-nginx docs, "Authentication" with `auth-type: digest` (nginx-http-auth-digest's
/// `auth_digest` and `auth_digest_user_file`; RFC 7616 / RFC 2617 with MD5 and
/// `qop="auth"`): 401 with a challenge, the answer a client computes from the password
/// lets it in (without its `Authorization` reaching the backend), users of another realm,
/// wrong passwords and nonces sluice did not make do not; a nonce count beyond
/// `auth_digest_replays` (20) gets `stale=true`; a signed URI other than the request's
/// gets 400 (RFC 7616 section 3.4.6); `auth-map` values are `realm:HA1`; no Secret closes.
#[tokio::test]
async fn authentication_digest_auth_from_a_secret() {
    init_tracing();
    bounded(async {
        let web = echo("web", "web-0").await;
        let proxy = TestProxy::start(ProxyArgs::loopback()).await;
        let realm = "Digest Area";
        let route = |host: &str, secret: &str, map: bool| {
            let mut annotations = vec![
                ("auth-type", "digest"),
                ("auth-secret", secret),
                ("auth-realm", realm),
            ];
            if map {
                annotations.push(("auth-secret-type", "auth-map"));
            }
            annotated(Route::new(host, "web", vec![web.addr()]), &annotations)
        };
        let routes = [
            route("file.example.com", "digest-users", false),
            route("map.example.com", "digest-map", true),
            route("missing.example.com", "no-such-secret", false),
        ];
        let mut objects = inputs(&routes);
        // As `htdigest -c auth "Digest Area" alice` writes it.
        let file = format!(
            "alice:{realm}:{}\nbob:Other Realm:{}\n",
            md5_hex(&format!("alice:{realm}:wonderland")),
            md5_hex("bob:Other Realm:builder"),
        );
        objects
            .secrets
            .push(opaque_secret("digest-users", &[("auth", &file)]));
        let carol = format!("{realm}:{}", md5_hex(&format!("carol:{realm}:singer")));
        objects
            .secrets
            .push(opaque_secret("digest-map", &[("carol", &carol)]));
        let compiled = compile(&objects, &CompileOptions::default());
        let closed: Vec<_> = compiled
            .diagnostics
            .iter()
            .filter(|d| d.reason == Reason::FailedClosed)
            .collect();
        assert_eq!(closed.len(), 1, "{:?}", compiled.diagnostics);
        assert!(closed[0].message.contains("no-such-secret not found"));
        proxy
            .table
            .update(compiled.table, std::time::Duration::from_millis(1));

        let alice = Client {
            user: "alice",
            realm,
            password: "wonderland",
        };
        let carol = Client {
            user: "carol",
            realm,
            password: "singer",
        };
        for (label, method, body) in FRONT_ENDS {
            let shape = (method, body);
            let signed = wire_method(method);
            // The challenge.
            let got = request(&proxy, shape, "file.example.com", "/x?a=1", &[]).await;
            assert_eq!(got.status, 401, "{label}");
            let challenge = got.headers["www-authenticate"].to_str().unwrap().to_owned();
            assert!(
                challenge.starts_with(&format!("Digest realm=\"{realm}\", nonce=\"")),
                "{label}: {challenge}"
            );
            assert!(challenge.contains("qop=\"auth\""), "{challenge}");
            assert!(challenge.contains("algorithm=MD5"), "{challenge}");
            assert!(!challenge.contains("stale"), "{challenge}");
            let nonce = challenge_param(&challenge, "nonce").unwrap();

            // The answer computed from the password: in, without the credentials.
            for (host, client) in [("file.example.com", &alice), ("map.example.com", &carol)] {
                for nc in [1, 2] {
                    let value = client.authorization(signed, "/x?a=1", &nonce, nc);
                    let headers = [("authorization", value.as_str())];
                    let got = request(&proxy, shape, host, "/x?a=1", &headers).await;
                    assert_eq!(got.status, 200, "{label} {host} nc={nc}: {challenge}");
                    let report = got.report();
                    assert!(
                        !report.headers.contains_key("authorization"),
                        "{label}: the credentials reach the backend"
                    );
                }
            }

            // What must not get in: 401 with a fresh challenge (not stale).
            let wrong = Client {
                password: "guess",
                ..alice
            };
            let bob = Client {
                user: "bob",
                realm: "Other Realm",
                password: "builder",
            };
            let bob_here = Client { realm, ..bob };
            let other_route = carol.authorization(signed, "/x", &nonce, 1);
            let forged_nonce = format!("{:016x}{}", 1u64, "0".repeat(80));
            let refused = [
                (
                    "wrong password",
                    wrong.authorization(signed, "/x", &nonce, 1),
                ),
                ("other realm", bob.authorization(signed, "/x", &nonce, 1)),
                (
                    "user of another realm",
                    bob_here.authorization(signed, "/x", &nonce, 1),
                ),
                ("map user on the file route", other_route),
                (
                    "forged nonce",
                    alice.authorization(signed, "/x", &forged_nonce, 1),
                ),
                ("other method", alice.authorization("PUT", "/x", &nonce, 1)),
                ("basic", "Basic YWxpY2U6d29uZGVybGFuZA==".to_owned()),
            ];
            for (what, value) in refused {
                let headers = [("authorization", value.as_str())];
                let got = request(&proxy, shape, "file.example.com", "/x", &headers).await;
                assert_eq!(got.status, 401, "{label}: {what}");
                let again = got.headers["www-authenticate"].to_str().unwrap();
                assert!(
                    again.starts_with("Digest realm="),
                    "{label}: {what}: {again}"
                );
                assert!(!again.contains("stale"), "{label}: {what}: {again}");
            }

            // `auth_digest_replays`: the 21st use of a nonce is stale, the user need not
            // type the password again.
            let value = alice.authorization(signed, "/x", &nonce, 21);
            let headers = [("authorization", value.as_str())];
            let got = request(&proxy, shape, "file.example.com", "/x", &headers).await;
            assert_eq!(got.status, 401, "{label}");
            let stale = got.headers["www-authenticate"].to_str().unwrap();
            assert!(stale.ends_with(", stale=true"), "{label}: {stale}");
            assert_ne!(challenge_param(stale, "nonce").unwrap(), nonce);

            // RFC 7616 section 3.4.6: an answer signed for another URI is a bad request.
            let value = alice.authorization(signed, "/elsewhere", &nonce, 1);
            let headers = [("authorization", value.as_str())];
            let got = request(&proxy, shape, "file.example.com", "/x", &headers).await;
            assert_eq!(got.status, 400, "{label}");

            // No Secret: closed, whatever the credentials.
            let value = alice.authorization(signed, "/x", &nonce, 1);
            let headers = [("authorization", value.as_str())];
            let got = request(&proxy, shape, "missing.example.com", "/x", &headers).await;
            assert_eq!(got.status, 503, "{label}");
        }
    })
    .await;
}

/// A real auth service on a loopback port, like oauth2-proxy behind ingress-nginx's
/// `auth-url`: 200 with `X-User: <token>` for `Authorization: Bearer ok-<token>`, 401
/// otherwise. It counts the requests and the connections it accepted; stops on drop.
struct AuthServer {
    addr: std::net::SocketAddr,
    requests: Arc<AtomicUsize>,
    connections: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for AuthServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl AuthServer {
    async fn start() -> AuthServer {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let requests = Arc::new(AtomicUsize::new(0));
        let connections = Arc::new(AtomicUsize::new(0));
        let (counted, accepted) = (Arc::clone(&requests), Arc::clone(&connections));
        let task = tokio::spawn(async move {
            let mut served = tokio::task::JoinSet::new();
            loop {
                let Ok((tcp, _)) = listener.accept().await else {
                    return;
                };
                accepted.fetch_add(1, Ordering::SeqCst);
                let counted = Arc::clone(&counted);
                served.spawn(async move {
                    let service = hyper::service::service_fn(move |request| {
                        counted.fetch_add(1, Ordering::SeqCst);
                        async move { Ok::<_, std::convert::Infallible>(decide(&request)) }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(hyper_util::rt::TokioIo::new(tcp), service)
                        .await;
                });
            }
        });
        AuthServer {
            addr,
            requests,
            connections,
            task,
        }
    }

    fn requests(&self) -> usize {
        self.requests.load(Ordering::SeqCst)
    }

    fn connections(&self) -> usize {
        self.connections.load(Ordering::SeqCst)
    }
}

/// The auth service's decision; every header it was sent comes back as `x-saw-<name>`,
/// and an `x-auth-cookie` as the answer's `Set-Cookie` (allow or deny).
fn decide<B>(request: &http::Request<B>) -> http::Response<Full<Bytes>> {
    let mut response = http::Response::builder();
    for (name, value) in request.headers() {
        response = response.header(format!("x-saw-{name}"), value.clone());
    }
    if let Some(cookie) = request.headers().get("x-auth-cookie") {
        response = response.header("set-cookie", cookie.clone());
    }
    let token = request
        .headers()
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer ok-"));
    let status = match token {
        Some(user) => {
            response = response.header("x-user", user);
            200
        }
        None => {
            response = response.header("www-authenticate", "Bearer realm=\"test\"");
            401
        }
    };
    response
        .status(status)
        .body(Full::new(Bytes::from_static(b"auth")))
        .unwrap()
}

/// ingress-nginx docs, "External Authentication": `auth-cache-key` with
/// `auth-cache-duration` (nginx `proxy_cache_valid` per status): the auth service is
/// asked once per key within the status's time, an allow and a deny both come back from
/// the cache until then and never after, the copied `auth-response-headers` come with a
/// kept allow, and each location (rule path) and host has its own answers.
#[tokio::test]
async fn external_authentication_auth_cache_key_and_duration() {
    init_tracing();
    bounded(async {
        let auth = AuthServer::start().await;
        let web = echo("web", "web-0").await;
        let proxy = TestProxy::start(ProxyArgs::loopback()).await;
        let url = format!("http://{}/verify", auth.addr);
        let cached = [
            ("auth-url", url.as_str()),
            ("auth-response-headers", "X-User"),
            ("auth-cache-key", "$http_authorization"),
            ("auth-cache-duration", "200 2s, 401 1s"),
        ];
        let routes = [
            annotated(
                Route::new("app.example.com", "web", vec![web.addr()]),
                &cached,
            ),
            annotated(
                Route::new("plain.example.com", "web", vec![web.addr()]),
                &[("auth-url", url.as_str())],
            ),
        ];
        let mut objects = inputs(&routes);
        // The first Ingress has a second location, /admin, to the same Service.
        let ingress = Arc::make_mut(&mut objects.ingresses[0]);
        let rule = &mut ingress.spec.as_mut().unwrap().rules.as_mut().unwrap()[0];
        let paths = &mut rule.http.as_mut().unwrap().paths;
        let mut admin = paths[0].clone();
        admin.path = Some("/admin".to_owned());
        paths.push(admin);
        let compiled = compile(&objects, &CompileOptions::default());
        assert!(
            compiled.diagnostics.is_empty(),
            "{:?}",
            compiled.diagnostics
        );
        proxy
            .table
            .update(compiled.table, std::time::Duration::from_millis(1));
        let get = |host: &'static str, path: &'static str, token: &'static str| {
            let proxy = &proxy;
            async move {
                let headers = [("authorization", token)];
                request(proxy, ("GET", ""), host, path, &headers).await
            }
        };

        // An allow: asked once, then kept (with X-User) for the same key.
        let start = std::time::Instant::now();
        for _ in 0..3 {
            let got = get("app.example.com", "/", "Bearer ok-alice").await;
            assert_eq!(got.status, 200);
            assert_eq!(got.report().headers["x-user"], "alice");
        }
        assert_eq!(auth.requests(), 1);
        // Another key is asked.
        let got = get("app.example.com", "/", "Bearer ok-bob").await;
        assert_eq!(got.report().headers["x-user"], "bob");
        assert_eq!(auth.requests(), 2);
        // Another location (rule path) of the same Ingress has its own answers.
        assert_eq!(
            get("app.example.com", "/admin", "Bearer ok-alice")
                .await
                .status,
            200
        );
        assert_eq!(auth.requests(), 3);
        // A deny is kept too, for its own time.
        for _ in 0..2 {
            let got = get("app.example.com", "/", "Bearer nope").await;
            assert_eq!(got.status, 401);
            assert_eq!(got.headers["www-authenticate"], "Bearer realm=\"test\"");
        }
        assert_eq!(auth.requests(), 4);
        // Without auth-cache-key every request is asked.
        for _ in 0..2 {
            get("plain.example.com", "/", "Bearer ok-alice").await;
        }
        assert_eq!(auth.requests(), 6);
        assert!(
            start.elapsed() < std::time::Duration::from_millis(900),
            "too slow to tell"
        );

        // After 401's second the deny is asked again; the allow is still kept.
        tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
        assert_eq!(get("app.example.com", "/", "Bearer nope").await.status, 401);
        assert_eq!(auth.requests(), 7);
        let before = auth.requests();
        assert_eq!(
            get("app.example.com", "/", "Bearer ok-alice").await.status,
            200
        );
        if start.elapsed() < std::time::Duration::from_millis(1900) {
            assert_eq!(auth.requests(), before, "the allow is kept for 2s");
        }
        // After 200's two seconds the allow is asked again.
        let wait = std::time::Duration::from_millis(2100).saturating_sub(start.elapsed());
        tokio::time::sleep(wait).await;
        let before = auth.requests();
        assert_eq!(
            get("app.example.com", "/", "Bearer ok-alice").await.status,
            200
        );
        assert_eq!(auth.requests(), before + 1);
    })
    .await;
}

/// ingress-nginx docs, "External Authentication": `auth-keepalive` (default 0: a new
/// connection per check, as nginx's `auth_request` without an upstream `keepalive`),
/// `auth-keepalive-requests` (checks per connection) and `auth-keepalive-timeout` (idle
/// time), counted as connections the real auth service accepted.
#[tokio::test]
async fn external_authentication_auth_keepalive() {
    init_tracing();
    bounded(async {
        let (fresh, kept, idle) = (
            AuthServer::start().await,
            AuthServer::start().await,
            AuthServer::start().await,
        );
        let web = echo("web", "web-0").await;
        let proxy = TestProxy::start(ProxyArgs::loopback()).await;
        let url = |server: &AuthServer| format!("http://{}/verify", server.addr);
        let (fresh_url, kept_url, idle_url) = (url(&fresh), url(&kept), url(&idle));
        let routes = [
            annotated(
                Route::new("fresh.example.com", "web", vec![web.addr()]),
                &[("auth-url", &fresh_url)],
            ),
            annotated(
                Route::new("kept.example.com", "web", vec![web.addr()]),
                &[
                    ("auth-url", &kept_url),
                    ("auth-keepalive", "1"),
                    ("auth-keepalive-requests", "3"),
                    ("auth-keepalive-share-vars", "true"),
                ],
            ),
            annotated(
                Route::new("idle.example.com", "web", vec![web.addr()]),
                &[
                    ("auth-url", &idle_url),
                    ("auth-keepalive", "2"),
                    ("auth-keepalive-timeout", "1"),
                ],
            ),
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
        let check = |host: &'static str| {
            let proxy = &proxy;
            async move {
                let headers = [("authorization", "Bearer ok-alice")];
                let got = request(proxy, ("GET", ""), host, "/", &headers).await;
                assert_eq!(got.status, 200, "{host}");
            }
        };
        for _ in 0..3 {
            check("fresh.example.com").await;
        }
        assert_eq!((fresh.requests(), fresh.connections()), (3, 3));
        for _ in 0..7 {
            check("kept.example.com").await;
        }
        // Three checks per connection: 3 + 3 + 1.
        assert_eq!((kept.requests(), kept.connections()), (7, 3));
        for _ in 0..3 {
            check("idle.example.com").await;
        }
        assert_eq!((idle.requests(), idle.connections()), (3, 1));
        // Idle longer than auth-keepalive-timeout: closed, a new one opens.
        tokio::time::sleep(std::time::Duration::from_millis(1200)).await;
        check("idle.example.com").await;
        assert_eq!((idle.requests(), idle.connections()), (4, 2));
    })
    .await;
}

/// A ConfigMap in the test namespace with these values.
fn config_map(name: &str, data: &[(&str, &str)]) -> Arc<k8s_openapi::api::core::v1::ConfigMap> {
    let data: std::collections::BTreeMap<&str, &str> = data.iter().copied().collect();
    Arc::new(
        serde_json::from_value(serde_json::json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": NS},
            "data": data,
        }))
        .unwrap(),
    )
}

/// ingress-nginx docs, "External Authentication": `auth-proxy-set-headers` names a
/// ConfigMap whose data are headers of the auth request (nginx `proxy_set_header` in the
/// auth location: a variable is expanded per request, an empty value drops the header).
/// A ConfigMap that is missing, or holds a variable sluice does not compute, closes the
/// route (ingress-nginx denies the location), never opens it.
#[tokio::test]
async fn external_authentication_auth_proxy_set_headers() {
    init_tracing();
    bounded(async {
        let auth = AuthServer::start().await;
        let web = echo("web", "web-0").await;
        let proxy = TestProxy::start(ProxyArgs::loopback()).await;
        let url = format!("http://{}/verify", auth.addr);
        let with = |host: &str, config_map: &str| {
            annotated(
                Route::new(host, "web", vec![web.addr()]),
                &[
                    ("auth-url", url.as_str()),
                    ("auth-proxy-set-headers", config_map),
                    (
                        "auth-response-headers",
                        "X-Saw-X-Tenant, X-Saw-X-Asked-Host, X-Saw-X-Drop",
                    ),
                ],
            )
        };
        let routes = [
            with("app.example.com", "auth-headers"),
            with("missing.example.com", "no-such-config-map"),
            with("unknown.example.com", "unknown-variable"),
        ];
        let mut objects = inputs(&routes);
        objects.annotation_config_maps = vec![
            config_map(
                "auth-headers",
                &[
                    ("X-Tenant", "acme"),
                    ("X-Asked-Host", "for $host"),
                    ("X-Drop", ""),
                ],
            ),
            config_map("unknown-variable", &[("X-Id", "$request_id")]),
        ]
        .into();
        let compiled = compile(&objects, &CompileOptions::default());
        let mut closed: Vec<_> = compiled
            .diagnostics
            .iter()
            .filter(|d| d.reason == Reason::FailedClosed)
            .map(|d| d.message.clone())
            .collect();
        closed.sort();
        assert_eq!(closed.len(), 2, "{:?}", compiled.diagnostics);
        assert!(
            closed[0].contains("no-such-config-map not found"),
            "{closed:?}"
        );
        assert!(closed[1].contains("$request_id"), "{closed:?}");
        proxy
            .table
            .update(compiled.table, std::time::Duration::from_millis(1));

        for (label, method, body) in FRONT_ENDS {
            let headers = [("authorization", "Bearer ok-alice"), ("x-drop", "client")];
            let got = request(&proxy, (method, body), "app.example.com:80", "/", &headers).await;
            assert_eq!(got.status, 200, "{label}");
            let seen = got.report().headers;
            assert_eq!(seen["x-saw-x-tenant"], "acme", "{label}");
            assert_eq!(seen["x-saw-x-asked-host"], "for app.example.com", "{label}");
            assert!(!seen.contains_key("x-saw-x-drop"), "{label}: {seen:?}");
            for host in ["missing.example.com", "unknown.example.com"] {
                let got = request(&proxy, (method, body), host, "/", &headers).await;
                assert_eq!(got.status, 503, "{label} {host}");
            }
        }
    })
    .await;
}

/// ingress-nginx docs, "Custom Headers" (`custom-headers`, nginx `more_set_headers`) with
/// the ConfigMap key `global-allowed-response-headers` (ingress-nginx >= 1.12): the
/// ConfigMap's headers are set on every response of the route; one that the key does not
/// allow, or a ConfigMap that is missing, denies the route (503) as ingress-nginx denies
/// the location, with an Event naming the annotation.
#[tokio::test]
async fn custom_headers_as_global_allowed_response_headers_allow() {
    init_tracing();
    bounded(async {
        let web = echo("web", "web-0").await;
        let proxy = TestProxy::start(ProxyArgs::loopback()).await;
        let route = |host: &str, config_map: &str| {
            annotated(
                Route::new(host, "web", vec![web.addr()]),
                &[("custom-headers", config_map)],
            )
        };
        let routes = [
            route("ok.example.com", "custom-ok"),
            route("refused.example.com", "custom-refused"),
            route("missing.example.com", "no-such-config-map"),
        ];
        let mut objects = inputs(&routes);
        objects.annotation_config_maps = vec![
            config_map(
                "custom-ok",
                &[("X-Frame-Options", "DENY"), ("X-Team", "payments; on-call")],
            ),
            config_map("custom-refused", &[("X-Powered-By", "sluice")]),
        ]
        .into();
        objects.nginx_config_map = Some(config_map(
            "nginx",
            &[("global-allowed-response-headers", "X-Frame-Options, X-Team")],
        ));
        let compiled = compile(&objects, &CompileOptions::default());
        let mut closed: Vec<_> = compiled
            .diagnostics
            .iter()
            .filter(|d| d.reason == Reason::FailedClosed)
            .map(|d| (d.field.clone(), d.message.clone()))
            .collect();
        closed.sort();
        assert_eq!(closed.len(), 2, "{:?}", compiled.diagnostics);
        for (field, _) in &closed {
            assert_eq!(
                field,
                &format!("metadata.annotations[{NGINX}custom-headers]")
            );
        }
        assert!(
            closed
                .iter()
                .any(|(_, m)| m.contains("X-Powered-By is not allowed"))
        );
        assert!(
            closed
                .iter()
                .any(|(_, m)| m.contains("no-such-config-map not found"))
        );
        proxy
            .table
            .update(compiled.table, std::time::Duration::from_millis(1));

        for (label, method, body) in FRONT_ENDS {
            let got = request(&proxy, (method, body), "ok.example.com", "/", &[]).await;
            assert_eq!(got.status, 200, "{label}");
            assert_eq!(got.headers["x-frame-options"], "DENY", "{label}");
            assert_eq!(got.headers["x-team"], "payments; on-call", "{label}");
            for host in ["refused.example.com", "missing.example.com"] {
                let got = request(&proxy, (method, body), host, "/", &[]).await;
                assert_eq!(got.status, 503, "{label} {host}");
                assert!(!got.headers.contains_key("x-powered-by"));
            }
        }
    })
    .await;
}

/// The `Set-Cookie` values of an answer.
fn cookies(answer: &Answer) -> Vec<&str> {
    answer
        .headers
        .get_all("set-cookie")
        .iter()
        .map(|v| v.to_str().unwrap())
        .collect()
}

/// ingress-nginx docs, "External Authentication", `auth-always-set-cookie`, and its
/// template's auth location (`auth_request_set $auth_cookie $upstream_http_set_cookie;
/// add_header Set-Cookie $auth_cookie [always]`): the auth service's cookie reaches the
/// client on nginx's `add_header` statuses (the backend's 200, the sign-in 302), and on
/// the backend's 500 and the service's own 401 only with `auth-always-set-cookie: "true"`.
#[tokio::test]
async fn external_authentication_auth_always_set_cookie() {
    init_tracing();
    bounded(async {
        let auth = AuthServer::start().await;
        let web = echo("web", "web-0").await;
        let proxy = TestProxy::start(ProxyArgs::loopback()).await;
        let url = format!("http://{}/verify", auth.addr);
        let routes = [
            annotated(
                Route::new("default.example.com", "web", vec![web.addr()]),
                &[("auth-url", url.as_str())],
            ),
            annotated(
                Route::new("always.example.com", "web", vec![web.addr()]),
                &[
                    ("auth-url", url.as_str()),
                    ("auth-always-set-cookie", "true"),
                ],
            ),
            annotated(
                Route::new("signin.example.com", "web", vec![web.addr()]),
                &[
                    ("auth-url", url.as_str()),
                    ("auth-signin", "https://login.example.com/start"),
                ],
            ),
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
        let cookie = ("x-auth-cookie", "session=abc; Path=/");
        for (label, method, body) in FRONT_ENDS {
            let ask = |host: &'static str, path: &'static str, token: &'static str| {
                let proxy = &proxy;
                async move {
                    let headers = [("authorization", token), cookie];
                    request(proxy, (method, body), host, path, &headers).await
                }
            };
            // The backend's 200: the cookie goes with it, with or without `always`.
            for host in ["default.example.com", "always.example.com"] {
                let got = ask(host, "/", "Bearer ok-alice").await;
                assert_eq!(got.status, 200, "{label} {host}");
                assert_eq!(cookies(&got), ["session=abc; Path=/"], "{label} {host}");
            }
            // The backend's 500: only with `always`.
            let got = ask("default.example.com", "/status/500", "Bearer ok-alice").await;
            assert_eq!(got.status, 500, "{label}");
            assert!(cookies(&got).is_empty(), "{label}: {:?}", got.headers);
            let got = ask("always.example.com", "/status/500", "Bearer ok-alice").await;
            assert_eq!(got.status, 500, "{label}");
            assert_eq!(cookies(&got), ["session=abc; Path=/"], "{label}");
            // The service's 401: only with `always`.
            let got = ask("default.example.com", "/", "Bearer nope").await;
            assert_eq!(got.status, 401, "{label}");
            assert!(cookies(&got).is_empty(), "{label}");
            let got = ask("always.example.com", "/", "Bearer nope").await;
            assert_eq!(got.status, 401, "{label}");
            assert_eq!(cookies(&got), ["session=abc; Path=/"], "{label}");
            // The sign-in redirect (302) carries it.
            let got = ask("signin.example.com", "/", "Bearer nope").await;
            assert_eq!(got.status, 302, "{label}");
            assert_eq!(cookies(&got), ["session=abc; Path=/"], "{label}");
        }
    })
    .await;
}

/// ingress-nginx docs, "ConfigMaps" (`global-auth-url`, `global-auth-response-headers`,
/// `no-auth-locations`) and annotations "Global External Authentication"
/// (`enable-global-auth`): every Ingress without an `auth-url` of its own is asked about
/// at the global auth service; one with its own asks its own; `enable-global-auth:
/// "false"` opts out; a path under a no-auth location is served without asking. A
/// `global-auth-url` that does not parse closes the routes it would guard (503).
#[tokio::test]
async fn global_external_authentication_from_the_config_map() {
    init_tracing();
    bounded(async {
        let global = AuthServer::start().await;
        let own = AuthServer::start().await;
        let web = echo("web", "web-0").await;
        let proxy = TestProxy::start(ProxyArgs::loopback()).await;
        let own_url = format!("http://{}/own", own.addr);
        let routes = [
            Route::new("guarded.example.com", "web", vec![web.addr()]),
            annotated(
                Route::new("own.example.com", "web", vec![web.addr()]),
                &[("auth-url", own_url.as_str())],
            ),
            annotated(
                Route::new("out.example.com", "web", vec![web.addr()]),
                &[("enable-global-auth", "false")],
            ),
            Route::new("guarded.example.com", "web", vec![web.addr()]).with_path("/public"),
        ];
        let mut objects = inputs(&routes);
        let global_url = format!("http://{}/global", global.addr);
        objects.nginx_config_map = Some(config_map(
            "nginx",
            &[
                ("global-auth-url", global_url.as_str()),
                ("global-auth-response-headers", "X-User"),
                ("no-auth-locations", "/.well-known/acme-challenge, /public"),
            ],
        ));
        let compiled = compile(&objects, &CompileOptions::default());
        assert!(
            compiled.diagnostics.is_empty(),
            "{:?}",
            compiled.diagnostics
        );
        proxy
            .table
            .update(compiled.table, std::time::Duration::from_millis(1));
        for (label, method, body) in FRONT_ENDS {
            let ask = |host: &'static str, path: &'static str, token: &'static str| {
                let proxy = &proxy;
                async move {
                    let headers = [("authorization", token)];
                    request(proxy, (method, body), host, path, &headers).await
                }
            };
            let (global_before, own_before) = (global.requests(), own.requests());
            let got = ask("guarded.example.com", "/", "Bearer ok-alice").await;
            assert_eq!(got.status, 200, "{label}");
            assert_eq!(got.report().headers["x-user"], "alice", "{label}");
            assert_eq!(
                ask("guarded.example.com", "/", "Bearer nope").await.status,
                401
            );
            assert_eq!(global.requests(), global_before + 2, "{label}");
            // Its own auth-url: the global service is not asked.
            assert_eq!(ask("own.example.com", "/", "Bearer nope").await.status, 401);
            assert_eq!(
                ask("own.example.com", "/", "Bearer ok-bob").await.status,
                200
            );
            assert_eq!(own.requests(), own_before + 2, "{label}");
            // Opted out, and a no-auth location: served without asking anyone.
            assert_eq!(ask("out.example.com", "/", "Bearer nope").await.status, 200);
            let got = ask("guarded.example.com", "/public/x", "Bearer nope").await;
            assert_eq!(got.status, 200, "{label}");
            assert_eq!(global.requests(), global_before + 2, "{label}");
            assert_eq!(own.requests(), own_before + 2, "{label}");
        }

        // A global-auth-url that does not parse: closed, never open.
        objects.nginx_config_map = Some(config_map(
            "nginx",
            &[("global-auth-url", "auth.example.com/verify")],
        ));
        let compiled = compile(&objects, &CompileOptions::default());
        let closed: Vec<_> = compiled
            .diagnostics
            .iter()
            .filter(|d| d.reason == Reason::FailedClosed)
            .map(|d| d.object.name.clone())
            .collect();
        // The two Ingresses of guarded.example.com (/ and /public).
        assert_eq!(closed.len(), 2, "{:?}", compiled.diagnostics);
        proxy
            .table
            .update(compiled.table, std::time::Duration::from_millis(1));
        for (label, method, body) in FRONT_ENDS {
            let headers = [("authorization", "Bearer ok-alice")];
            for path in ["/", "/public/x"] {
                let got = request(
                    &proxy,
                    (method, body),
                    "guarded.example.com",
                    path,
                    &headers,
                )
                .await;
                assert_eq!(got.status, 503, "{label} {path}");
            }
            let got = request(&proxy, (method, body), "own.example.com", "/", &headers).await;
            assert_eq!(got.status, 200, "{label}");
        }
    })
    .await;
}

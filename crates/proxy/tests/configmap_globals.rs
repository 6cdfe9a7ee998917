//! ingress-nginx's ConfigMap keys that set the whole proxy ("ConfigMaps" in ingress-nginx's
//! docs: `hsts*`, `use-forwarded-headers` and friends, `keep-alive*`, `server-tokens`,
//! `use-gzip`, `block-*`, ...), through the real proxy: each key changes what clients and
//! backends see, and a new table with other values applies to the next request or
//! connection, without a restart.

mod common;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use common::*;
use http::Request;
use http_body_util::Full;
use hyper_util::rt::TokioIo;
use rustls::pki_types::{CertificateDer, ServerName};
use rustls::{ClientConfig, RootCertStore};
use sluice_proxy::ProxyArgs;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::TlsConnector;

/// Installs `routes` with the ConfigMap `data` on `proxy`.
fn configure(proxy: &TestProxy, routes: &[Route], data: &[(&str, &str)]) {
    proxy
        .table
        .update(table_with(routes, data), Duration::from_millis(1));
}

/// Writes `request` on a fresh connection to `addr` and reads until the proxy closes it or
/// `wait` passes: the raw answer, and whether the proxy closed the connection.
async fn raw(addr: SocketAddr, request: &[u8], wait: Duration) -> (String, bool) {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    stream.write_all(request).await.unwrap();
    read_all(&mut stream, wait).await
}

async fn read_all(stream: &mut TcpStream, wait: Duration) -> (String, bool) {
    let mut out = Vec::new();
    let mut buf = [0u8; 16 * 1024];
    let closed = loop {
        match tokio::time::timeout(wait, stream.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => break true,
            Ok(Ok(n)) => out.extend_from_slice(&buf[..n]),
            Err(_) => break false,
        }
    };
    (String::from_utf8_lossy(&out).into_owned(), closed)
}

/// `GET path` for `host` with extra `fields` over a fresh connection.
async fn get_with(addr: SocketAddr, host: &str, path: &str, fields: &[(&str, &str)]) -> Answer {
    let mut sender = http1_connect(addr).await;
    let mut request = Request::get(path).header("host", host);
    for (name, value) in fields {
        request = request.header(*name, *value);
    }
    send(&mut sender, request.body(Full::new(Bytes::new())).unwrap()).await
}

/// ingress-nginx "hsts", "hsts-max-age", "hsts-include-subdomains", "hsts-preload": the
/// `Strict-Transport-Security` of HTTPS answers, changed live.
#[tokio::test]
async fn hsts_keys_shape_strict_transport_security() {
    init_tracing();
    bounded(async {
        let backend = echo("web", "web-0").await;
        let (cert, key, ca) = ca_and_leaf("secure.test");
        let routes = [Route::new("secure.test", "web", vec![backend.addr()]).with_tls(cert, key)];
        let proxy = TestProxy::start(ProxyArgs::loopback()).await;
        let hsts = |proxy_https: SocketAddr, ca: CertificateDer<'static>| async move {
            let mut roots = RootCertStore::empty();
            roots.add(ca).unwrap();
            let config = ClientConfig::builder()
                .with_root_certificates(roots)
                .with_no_client_auth();
            let stream = TcpStream::connect(proxy_https).await.unwrap();
            let tls = TlsConnector::from(Arc::new(config))
                .connect(ServerName::try_from("secure.test").unwrap(), stream)
                .await
                .unwrap();
            let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
                .await
                .unwrap();
            tokio::spawn(connection);
            let request = Request::get("/")
                .header("host", "secure.test")
                .body(Full::new(Bytes::new()))
                .unwrap();
            let answer = collect(sender.send_request(request).await.unwrap()).await;
            assert_eq!(answer.status, 200);
            answer
                .headers
                .get("strict-transport-security")
                .map(|v| v.to_str().unwrap().to_owned())
        };
        configure(
            &proxy,
            &routes,
            &[
                ("hsts-max-age", "600"),
                ("hsts-include-subdomains", "false"),
                ("hsts-preload", "true"),
            ],
        );
        assert_eq!(
            hsts(proxy.https, ca.clone()).await.as_deref(),
            Some("max-age=600; preload")
        );
        configure(&proxy, &routes, &[("hsts", "false")]);
        assert_eq!(hsts(proxy.https, ca.clone()).await, None, "hsts off, live");
        configure(&proxy, &routes, &[]);
        assert_eq!(
            hsts(proxy.https, ca).await.as_deref(),
            Some("max-age=31536000; includeSubDomains"),
            "back to the flags' defaults"
        );
    })
    .await;
}

/// ingress-nginx "use-forwarded-headers", "proxy-real-ip-cidr",
/// "compute-full-forwarded-for", "forwarded-for-header", "enable-real-ip": who is believed,
/// what the backend gets, and the address the route's source ranges check (nginx's realip
/// `$remote_addr`).
#[tokio::test]
async fn forwarded_headers_keys_decide_the_client_address() {
    init_tracing();
    bounded(async {
        let backend = echo("web", "web-0").await;
        let routes = [
            Route::new("app.test", "web", vec![backend.addr()]).with_annotation(
                "nginx.ingress.kubernetes.io/whitelist-source-range",
                "203.0.113.0/24",
            ),
        ];
        let proxy = TestProxy::start(ProxyArgs::loopback()).await;
        let xff = [
            ("x-forwarded-for", "198.51.100.1, 203.0.113.7"),
            ("x-forwarded-proto", "https"),
        ];

        // Not believed: the peer (loopback) is the client, outside the range.
        configure(&proxy, &routes, &[]);
        assert_eq!(
            get_with(proxy.http, "app.test", "/", &xff).await.status,
            403
        );

        // Believed from loopback: the client is the rightmost untrusted address.
        configure(
            &proxy,
            &routes,
            &[
                ("use-forwarded-headers", "true"),
                ("proxy-real-ip-cidr", "127.0.0.1/32"),
            ],
        );
        let answer = get_with(proxy.http, "app.test", "/", &xff).await;
        assert_eq!(answer.status, 200, "{}", answer.text());
        let seen = answer.report().headers;
        assert_eq!(
            seen["x-forwarded-for"], "203.0.113.7",
            "ingress-nginx's $remote_addr"
        );
        assert_eq!(seen["x-real-ip"], "203.0.113.7");
        assert_eq!(seen["x-forwarded-proto"], "https", "believed");

        // compute-full-forwarded-for: the chain kept, the peer appended.
        configure(
            &proxy,
            &routes,
            &[
                ("use-forwarded-headers", "true"),
                ("compute-full-forwarded-for", "true"),
                ("proxy-real-ip-cidr", "127.0.0.1/32"),
            ],
        );
        let seen = get_with(proxy.http, "app.test", "/", &xff)
            .await
            .report()
            .headers;
        assert_eq!(
            seen["x-forwarded-for"],
            "198.51.100.1, 203.0.113.7, 127.0.0.1"
        );

        // A peer outside proxy-real-ip-cidr is not believed.
        configure(
            &proxy,
            &routes,
            &[
                ("use-forwarded-headers", "true"),
                ("proxy-real-ip-cidr", "10.0.0.0/8"),
            ],
        );
        assert_eq!(
            get_with(proxy.http, "app.test", "/", &xff).await.status,
            403
        );

        // enable-real-ip with another field: the address only, not the other fields.
        configure(
            &proxy,
            &routes,
            &[
                ("enable-real-ip", "true"),
                ("forwarded-for-header", "CF-Connecting-IP"),
                ("proxy-real-ip-cidr", "127.0.0.0/8"),
            ],
        );
        let answer = get_with(
            proxy.http,
            "app.test",
            "/",
            &[
                ("cf-connecting-ip", "203.0.113.9"),
                ("x-forwarded-proto", "https"),
            ],
        )
        .await;
        assert_eq!(answer.status, 200, "{}", answer.text());
        let seen = answer.report().headers;
        assert_eq!(seen["x-real-ip"], "203.0.113.9");
        assert_eq!(
            seen["x-forwarded-proto"], "http",
            "not believed with enable-real-ip"
        );
    })
    .await;
}

/// ingress-nginx "limit-req-status-code" and "limit-conn-status-code": each limit answers
/// with its own status.
#[tokio::test]
async fn limit_status_codes_per_limit() {
    init_tracing();
    bounded(async {
        let backend = echo("web", "web-0").await;
        let routes = [
            Route::new("rate.test", "web", vec![backend.addr()])
                .with_annotation("nginx.ingress.kubernetes.io/limit-rpm", "1")
                .with_annotation("nginx.ingress.kubernetes.io/limit-burst-multiplier", "1"),
            Route::new("conn.test", "web", vec![backend.addr()])
                .with_annotation("nginx.ingress.kubernetes.io/limit-connections", "1"),
        ];
        let proxy = TestProxy::start(ProxyArgs::loopback()).await;
        configure(
            &proxy,
            &routes,
            &[
                ("limit-req-status-code", "429"),
                ("limit-conn-status-code", "508"),
            ],
        );
        let mut seen = Vec::new();
        for _ in 0..3 {
            seen.push(get(proxy.http, "rate.test", "/").await.status.as_u16());
        }
        assert_eq!(seen.first(), Some(&200));
        assert!(seen[1..].contains(&429), "{seen:?}");

        // One request held open at the backend; the second in parallel is over the limit.
        let slow = tokio::spawn(get(proxy.http, "conn.test", "/delay/1500"));
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(get(proxy.http, "conn.test", "/").await.status, 508);
        assert_eq!(slow.await.unwrap().status, 200);
    })
    .await;
}

/// ingress-nginx "keep-alive-requests" (nginx `keepalive_requests`) and "keep-alive: 0"
/// (`keepalive_timeout 0`): the last answer a connection may carry says
/// `Connection: close`, and the connection closes.
#[tokio::test]
async fn keep_alive_keys_close_connections() {
    init_tracing();
    bounded(async {
        let backend = echo("web", "web-0").await;
        let routes = [Route::new("app.test", "web", vec![backend.addr()])];
        let proxy = TestProxy::start(ProxyArgs::loopback()).await;
        let two = b"GET /1 HTTP/1.1\r\nHost: app.test\r\n\r\nGET /2 HTTP/1.1\r\nHost: app.test\r\n\r\nGET /3 HTTP/1.1\r\nHost: app.test\r\n\r\n";

        configure(&proxy, &routes, &[("keep-alive-requests", "2")]);
        let (answer, closed) = raw(proxy.http, two, Duration::from_secs(2)).await;
        assert_eq!(answer.matches("HTTP/1.1 200").count(), 2, "{answer}");
        assert!(answer.to_ascii_lowercase().contains("connection: close"), "{answer}");
        assert!(closed, "closed after the second answer");

        configure(&proxy, &routes, &[("keep-alive", "0")]);
        let (answer, closed) = raw(proxy.http, two, Duration::from_secs(2)).await;
        assert_eq!(answer.matches("HTTP/1.1 200").count(), 1, "{answer}");
        assert!(closed);

        // Without the keys: all three on one connection, which stays open.
        configure(&proxy, &routes, &[]);
        let (answer, closed) = raw(proxy.http, two, Duration::from_millis(500)).await;
        assert_eq!(answer.matches("HTTP/1.1 200").count(), 3, "{answer}");
        assert!(!closed);
    })
    .await;
}

/// ingress-nginx "large-client-header-buffers" (`number size`: the largest head) and
/// "client-header-timeout".
#[tokio::test]
async fn header_size_and_time_limits() {
    init_tracing();
    bounded(async {
        let backend = echo("web", "web-0").await;
        let routes = [Route::new("app.test", "web", vec![backend.addr()])];
        let proxy = TestProxy::start(ProxyArgs::loopback()).await;
        configure(
            &proxy,
            &routes,
            &[
                ("large-client-header-buffers", "2 4k"),
                ("client-header-timeout", "1"),
            ],
        );
        let big = format!(
            "GET / HTTP/1.1\r\nHost: app.test\r\nX-Big: {}\r\n\r\n",
            "a".repeat(12 * 1024)
        );
        let (answer, _) = raw(proxy.http, big.as_bytes(), Duration::from_secs(2)).await;
        assert!(answer.starts_with("HTTP/1.1 431"), "{answer}");
        let fits = format!(
            "GET / HTTP/1.1\r\nHost: app.test\r\nX-Big: {}\r\n\r\n",
            "a".repeat(6 * 1024)
        );
        let (answer, _) = raw(proxy.http, fits.as_bytes(), Duration::from_millis(500)).await;
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");

        // Half a head, then nothing: closed once the second is over.
        let mut stream = TcpStream::connect(proxy.http).await.unwrap();
        stream
            .write_all(b"GET / HTTP/1.1\r\nHost: app")
            .await
            .unwrap();
        let (_, closed) = read_all(&mut stream, Duration::from_secs(4)).await;
        assert!(closed, "closed by client-header-timeout");
    })
    .await;
}

/// ingress-nginx "enable-underscores-in-headers" (nginx `underscores_in_headers`).
#[tokio::test]
async fn underscores_in_headers_switch() {
    init_tracing();
    bounded(async {
        let backend = echo("web", "web-0").await;
        let routes = [Route::new("app.test", "web", vec![backend.addr()])];
        let proxy = TestProxy::start(ProxyArgs::loopback()).await;
        let field = [("x_user", "alice")];
        configure(&proxy, &routes, &[]);
        let seen = get_with(proxy.http, "app.test", "/", &field).await.report();
        assert!(!seen.headers.contains_key("x_user"), "dropped by default");
        configure(
            &proxy,
            &routes,
            &[("enable-underscores-in-headers", "true")],
        );
        let seen = get_with(proxy.http, "app.test", "/", &field).await.report();
        assert_eq!(seen.headers["x_user"], "alice");
    })
    .await;
}

/// ingress-nginx "block-user-agents" and "block-referers" (nginx `map` entries: exact,
/// `~` and `~*` regular expressions): 403.
#[tokio::test]
async fn block_lists_refuse_with_403() {
    init_tracing();
    bounded(async {
        let backend = echo("web", "web-0").await;
        let routes = [Route::new("app.test", "web", vec![backend.addr()])];
        let proxy = TestProxy::start(ProxyArgs::loopback()).await;
        configure(
            &proxy,
            &routes,
            &[
                ("block-user-agents", "~*badbot, exact-agent/1.0"),
                ("block-referers", "~^https://spam\\."),
            ],
        );
        let status = |fields: &'static [(&'static str, &'static str)]| {
            let addr = proxy.http;
            async move {
                get_with(addr, "app.test", "/", fields)
                    .await
                    .status
                    .as_u16()
            }
        };
        assert_eq!(status(&[("user-agent", "Mozilla/5.0 BadBot/2")]).await, 403);
        assert_eq!(status(&[("user-agent", "exact-agent/1.0")]).await, 403);
        assert_eq!(
            status(&[("user-agent", "exact-agent/1.0 (more)")]).await,
            200
        );
        assert_eq!(status(&[("referer", "https://spam.example/")]).await, 403);
        assert_eq!(
            status(&[("referer", "https://SPAM.example/")]).await,
            200,
            "~ is case-sensitive"
        );
        assert_eq!(status(&[]).await, 200);
    })
    .await;
}

/// A backend that answers every request on a connection with `Server: backend/1.0` and
/// counts the connections it accepted.
async fn server_header_backend() -> (SocketAddr, Arc<std::sync::atomic::AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let accepted = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let count = Arc::clone(&accepted);
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
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
                    while let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                        buf.drain(..end + 4);
                        let answer = b"HTTP/1.1 200 OK\r\nServer: backend/1.0\r\nContent-Length: 2\r\n\r\nok";
                        if stream.write_all(answer).await.is_err() {
                            return;
                        }
                    }
                }
            });
        }
    });
    (addr, accepted)
}

/// ingress-nginx "server-tokens" and "allow-backend-server-header": by default the
/// backend's `Server` is cleared (`more_clear_headers Server`); the first names the proxy,
/// the second lets the backend's through.
#[tokio::test]
async fn server_field_follows_server_tokens() {
    init_tracing();
    bounded(async {
        let (backend, _) = server_header_backend().await;
        let routes = [Route::new("app.test", "web", vec![backend])];
        let proxy = TestProxy::start(ProxyArgs::loopback()).await;
        let server = || async {
            get(proxy.http, "app.test", "/")
                .await
                .headers
                .get("server")
                .map(|v| v.to_str().unwrap().to_owned())
        };
        configure(&proxy, &routes, &[]);
        assert_eq!(server().await, None);
        configure(&proxy, &routes, &[("server-tokens", "true")]);
        assert_eq!(server().await.as_deref(), Some("sluice"));
        configure(&proxy, &routes, &[("allow-backend-server-header", "true")]);
        assert_eq!(server().await.as_deref(), Some("backend/1.0"));
    })
    .await;
}

/// `GET /` for `app.test` on `client`.
async fn ask(client: &mut hyper::client::conn::http1::SendRequest<Full<Bytes>>) -> Answer {
    let request = Request::get("/")
        .header("host", "app.test")
        .body(Full::new(Bytes::new()))
        .unwrap();
    send(client, request).await
}

/// ingress-nginx "upstream-keepalive-requests" (nginx `keepalive_requests` in the upstream
/// block) and "upstream-keepalive-timeout: 0": connections to the backend are reused only
/// as often as they say.
#[tokio::test]
async fn upstream_keepalive_keys_limit_reuse() {
    init_tracing();
    bounded(async {
        let (backend, accepted) = server_header_backend().await;
        let routes = [Route::new("app.test", "web", vec![backend])];
        let proxy = TestProxy::start(ProxyArgs::loopback()).await;
        let mut client = http1_connect(proxy.http).await;
        configure(&proxy, &routes, &[]);
        for _ in 0..4 {
            assert_eq!(ask(&mut client).await.status, 200);
        }
        let reused = accepted.load(std::sync::atomic::Ordering::SeqCst);
        assert_eq!(reused, 1, "one connection for four requests by default");

        configure(&proxy, &routes, &[("upstream-keepalive-requests", "2")]);
        for _ in 0..4 {
            assert_eq!(ask(&mut client).await.status, 200);
        }
        let after = accepted.load(std::sync::atomic::Ordering::SeqCst);
        assert!(
            after - reused >= 2,
            "a new connection every two requests: {after}"
        );

        configure(&proxy, &routes, &[("upstream-keepalive-timeout", "0")]);
        let before = accepted.load(std::sync::atomic::Ordering::SeqCst);
        for _ in 0..3 {
            assert_eq!(ask(&mut client).await.status, 200);
        }
        let now = accepted.load(std::sync::atomic::Ordering::SeqCst);
        assert_eq!(now - before, 3, "none kept");
    })
    .await;
}

/// ingress-nginx "use-proxy-protocol": once set, every new connection must start with a
/// PROXY header, whose source is the client; connections open before keep their setting.
#[tokio::test]
async fn use_proxy_protocol_applies_to_new_connections() {
    init_tracing();
    bounded(async {
        let backend = echo("web", "web-0").await;
        let routes = [Route::new("app.test", "web", vec![backend.addr()])];
        let proxy = TestProxy::start(ProxyArgs::loopback()).await;
        configure(&proxy, &routes, &[("use-proxy-protocol", "true")]);
        let request = b"PROXY TCP4 192.0.2.10 127.0.0.1 5555 80\r\nGET / HTTP/1.1\r\nHost: app.test\r\nConnection: close\r\n\r\n";
        let (answer, _) = raw(proxy.http, request, Duration::from_secs(2)).await;
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        assert!(answer.contains("192.0.2.10"), "the PROXY source is the client: {answer}");
        let (answer, _) = raw(
            proxy.http,
            b"GET / HTTP/1.1\r\nHost: app.test\r\n\r\n",
            Duration::from_secs(2),
        )
        .await;
        assert!(answer.is_empty(), "no PROXY header: dropped without a word: {answer}");
        configure(&proxy, &routes, &[]);
        let (answer, _) = raw(
            proxy.http,
            b"GET / HTTP/1.1\r\nHost: app.test\r\nConnection: close\r\n\r\n",
            Duration::from_secs(2),
        )
        .await;
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    })
    .await;
}

/// ingress-nginx "use-gzip", "gzip-min-length", "gzip-types": compression switched on
/// and shaped from the ConfigMap.
#[tokio::test]
async fn gzip_keys_switch_compression() {
    init_tracing();
    bounded(async {
        let backend = echo("web", "web-0").await;
        let routes = [Route::new("app.test", "web", vec![backend.addr()])];
        let proxy = TestProxy::start(ProxyArgs::loopback()).await;
        let coding = || async {
            get_with(proxy.http, "app.test", "/", &[("accept-encoding", "gzip")])
                .await
                .headers
                .get("content-encoding")
                .map(|v| v.to_str().unwrap().to_owned())
        };
        configure(&proxy, &routes, &[]);
        assert_eq!(coding().await, None, "off by default");
        configure(
            &proxy,
            &routes,
            &[
                ("use-gzip", "true"),
                ("gzip-types", "application/json"),
                ("gzip-min-length", "1"),
            ],
        );
        assert_eq!(coding().await.as_deref(), Some("gzip"));
        configure(
            &proxy,
            &routes,
            &[("use-gzip", "true"), ("gzip-types", "text/css")],
        );
        assert_eq!(coding().await, None, "JSON no longer listed");
    })
    .await;
}

/// A TLS handshake with `secure.test` offering only `versions` and `suites` (empty: the
/// provider's): the version and suite agreed, or `None` when the proxy refused.
async fn handshake(
    https: SocketAddr,
    ca: CertificateDer<'static>,
    versions: &[&'static rustls::SupportedProtocolVersion],
    suites: &[rustls::CipherSuite],
) -> Option<(rustls::ProtocolVersion, rustls::CipherSuite)> {
    let mut provider = rustls::crypto::ring::default_provider();
    if !suites.is_empty() {
        provider
            .cipher_suites
            .retain(|s| suites.contains(&s.suite()));
    }
    let mut roots = RootCertStore::empty();
    roots.add(ca).unwrap();
    let config = ClientConfig::builder_with_provider(Arc::new(provider))
        .with_protocol_versions(versions)
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let stream = TcpStream::connect(https).await.unwrap();
    let tls = TlsConnector::from(Arc::new(config))
        .connect(ServerName::try_from("secure.test").unwrap(), stream)
        .await
        .ok()?;
    let (_, session) = tls.get_ref();
    Some((
        session.protocol_version()?,
        session.negotiated_cipher_suite()?.suite(),
    ))
}

/// ingress-nginx "ssl-protocols" and "ssl-ciphers" (nginx `ssl_protocols`, `ssl_ciphers`:
/// an OpenSSL list, which never touches TLS 1.3's suites), read live.
#[tokio::test]
async fn ssl_protocols_and_ciphers_limit_handshakes() {
    init_tracing();
    bounded(async {
        use rustls::CipherSuite::*;
        use rustls::version::{TLS12, TLS13};
        let backend = echo("web", "web-0").await;
        let (cert, key, ca) = ca_and_leaf("secure.test");
        let routes = [Route::new("secure.test", "web", vec![backend.addr()]).with_tls(cert, key)];
        let proxy = TestProxy::start(ProxyArgs::loopback()).await;
        configure(&proxy, &routes, &[]);
        let tls12 = handshake(proxy.https, ca.clone(), &[&TLS12], &[]).await;
        assert_eq!(
            tls12.map(|(v, _)| v),
            Some(rustls::ProtocolVersion::TLSv1_2)
        );

        configure(&proxy, &routes, &[("ssl-protocols", "TLSv1.3")]);
        assert_eq!(
            handshake(proxy.https, ca.clone(), &[&TLS12], &[]).await,
            None
        );
        let tls13 = handshake(proxy.https, ca.clone(), &[&TLS13], &[]).await;
        assert_eq!(
            tls13.map(|(v, _)| v),
            Some(rustls::ProtocolVersion::TLSv1_3)
        );

        configure(
            &proxy,
            &routes,
            &[("ssl-ciphers", "ECDHE-ECDSA-AES256-GCM-SHA384:!CHACHA20")],
        );
        let other = [TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256];
        assert_eq!(
            handshake(proxy.https, ca.clone(), &[&TLS12], &other).await,
            None
        );
        let listed = [TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384];
        assert_eq!(
            handshake(proxy.https, ca.clone(), &[&TLS12], &listed).await,
            Some((
                rustls::ProtocolVersion::TLSv1_2,
                TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384
            ))
        );
        // TLS 1.3 is not touched by a cipher list.
        let tls13 = handshake(proxy.https, ca, &[&TLS13], &[TLS13_AES_128_GCM_SHA256]).await;
        assert_eq!(tls13.map(|(_, s)| s), Some(TLS13_AES_128_GCM_SHA256));
    })
    .await;
}

/// ingress-nginx "custom-http-errors" in the ConfigMap: every Ingress's default, answered by
/// its `default-backend`; an Ingress's own annotation wins.
#[tokio::test]
async fn custom_http_errors_from_the_configmap() {
    init_tracing();
    bounded(async {
        let web = echo("web", "web-0").await;
        let errors = echo("errors", "errors-0").await;
        let proxy = TestProxy::start(ProxyArgs::loopback()).await;
        let fallback = "nginx.ingress.kubernetes.io/default-backend";
        let routes = [
            Route::new("pages.test", "web", vec![web.addr()]).with_annotation(fallback, "errors"),
            Route::new("own.test", "web", vec![web.addr()])
                .with_annotation(fallback, "errors")
                .with_annotation("nginx.ingress.kubernetes.io/custom-http-errors", "418"),
            Route::new("errors.test", "errors", vec![errors.addr()]),
        ];
        configure(&proxy, &routes, &[("custom-http-errors", "404,503")]);
        let answered = |host: &'static str, path: &'static str| {
            let addr = proxy.http;
            async move {
                let answer = get(addr, host, path).await;
                (answer.status.as_u16(), answer.report().service)
            }
        };
        // The default backend gets the client's target: the echo answers it, as `errors`.
        assert_eq!(answered("pages.test", "/status/503").await.1, "errors");
        let passed = answered("pages.test", "/status/418").await;
        assert_eq!(passed, (418, "web".to_owned()));
        // The annotation replaces the ConfigMap's list.
        let own = answered("own.test", "/status/503").await;
        assert_eq!(own, (503, "web".to_owned()));
        assert_eq!(answered("own.test", "/status/418").await.1, "errors");
    })
    .await;
}

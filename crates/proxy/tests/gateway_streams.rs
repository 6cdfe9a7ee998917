//! Gateway API stream routes through the real proxy: a `TCP` listener's TCPRoute pipes
//! each connection to a backend drawn by weight, and a TLS `Passthrough` listener's
//! TLSRoutes pipe by the ClientHello's SNI, the TLS session end to end between client and
//! backend (the backend's certificate is the one the client verifies). Mirrors the
//! GATEWAY-TCP and GATEWAY-TLS conformance profiles (TCPRouteWeightedRouting,
//! TLSRouteSimpleSameNamespace); each listener is on a Gateway address of its own, as the
//! proxy's shared listeners speak HTTP only.

mod common;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use common::*;
use serde_json::json;
use sluice_proxy::ProxyArgs;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};

/// A TCP backend that answers each line `x` with `<name>: x`, until the client closes.
async fn line_echo(name: &'static str) -> (SocketAddr, tokio::task::JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let task = tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buf = [0u8; 1024];
                loop {
                    let n = match stream.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => n,
                    };
                    let mut out = format!("{name}: ").into_bytes();
                    out.extend_from_slice(&buf[..n]);
                    if stream.write_all(&out).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    (addr, task)
}

/// Sends `line` on a fresh connection to `addr` and returns the answer.
async fn exchange(addr: SocketAddr, line: &str) -> String {
    let mut stream = TcpStream::connect(addr).await.expect("connect");
    stream.write_all(line.as_bytes()).await.unwrap();
    let mut buf = vec![0u8; 1024];
    let n = stream.read(&mut buf).await.unwrap();
    String::from_utf8_lossy(&buf[..n]).into_owned()
}

fn proxy_table(proxy: &TestProxy, inputs: sluice_routing::Inputs) {
    let compiled = sluice_routing::compile(&inputs, &sluice_routing::CompileOptions::default());
    let failures = proxy.table.update(compiled.table, Duration::from_millis(1));
    assert!(failures.is_empty(), "{failures:?}");
}

fn tcp_route(v: serde_json::Value) -> Arc<sluice_routing::gateway::TcpRoute> {
    Arc::new(serde_json::from_value(v).expect("test TCPRoute"))
}

fn tls_route(v: serde_json::Value) -> Arc<sluice_routing::gateway::TlsRoute> {
    Arc::new(serde_json::from_value(v).expect("test TLSRoute"))
}

/// Gateway API GATEWAY-TCP (TCPRouteWeightedRouting): connections are spread by weight,
/// weight 0 never chosen, and the bytes go both ways unchanged.
#[tokio::test]
async fn tcp_route_pipes_connections_to_backends_by_weight() {
    init_tracing();
    bounded(async {
        let (a, _a) = line_echo("a").await;
        let (b, _b) = line_echo("b").await;
        let (never, _never) = line_echo("never").await;
        let proxy = TestProxy::start(ProxyArgs::loopback()).await;
        let mut inputs = inputs(&[
            Route::new("a.internal", "a", vec![a]),
            Route::new("b.internal", "b", vec![b]),
            Route::new("never.internal", "never", vec![never]),
        ]);
        add_gateway(
            &mut inputs,
            json!({"addresses": [{"value": "127.87.0.1"}],
                "listeners": [{"name": "tcp", "port": 19000, "protocol": "TCP",
                               "allowedRoutes": {"kinds": [{"kind": "TCPRoute"}]}}]}),
            &[],
        );
        inputs.tcp_routes = vec![tcp_route(json!({
            "metadata": {"namespace": NS, "name": "weighted"},
            "spec": {"parentRefs": [{"name": "gw", "sectionName": "tcp"}],
                     "rules": [{"backendRefs": [
                        {"name": "a", "port": 80, "weight": 3},
                        {"name": "b", "port": 80, "weight": 1},
                        {"name": "never", "port": 80, "weight": 0}]}]}
        }))].into();
        proxy_table(&proxy, inputs);
        let socket: SocketAddr = "127.87.0.1:19000".parse().unwrap();
        let mut seen: BTreeMap<String, u32> = BTreeMap::new();
        for i in 0..80 {
            let answer = exchange(socket, &format!("hello {i}\n")).await;
            let (name, rest) = answer.split_once(": ").expect("a backend's answer");
            assert_eq!(rest, format!("hello {i}\n"), "bytes unchanged");
            *seen.entry(name.to_owned()).or_default() += 1;
        }
        assert_eq!(seen.get("never"), None, "weight 0: {seen:?}");
        let (a, b) = (seen["a"], seen["b"]);
        assert_eq!(a + b, 80);
        // 3:1 of 80 is 60:20; far outside any plausible draw only when weights are ignored.
        assert!((45..=75).contains(&a), "{seen:?}");
        // Each connection counted under the backend it was piped to.
        let (_, text) = admin_get(proxy.admin, "/metrics").await;
        let count = |service: &str| {
            let series = format!(
                "sluice_stream_connections_total{{service=\"{NS}/{service}:80\",transport=\"tcp\"}} "
            );
            text.lines()
                .find_map(|l| l.strip_prefix(series.as_str()))
                .and_then(|v| v.trim().parse::<u32>().ok())
                .unwrap_or(0)
        };
        assert_eq!((count("a"), count("b"), count("never")), (a, b, 0), "{text}");

        proxy.shutdown().await;
    })
    .await;
}

/// A TLS backend for `host`: completes the handshake with its own certificate and answers
/// each read with `<host>: <bytes>`.
async fn tls_backend(
    host: &'static str,
) -> (SocketAddr, rustls::pki_types::CertificateDer<'static>) {
    let (cert, key, ca) = ca_and_leaf(host);
    use rustls::pki_types::pem::PemObject as _;
    let certs = rustls::pki_types::CertificateDer::pem_slice_iter(cert.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .unwrap();
    let key = rustls::pki_types::PrivateKeyDer::from_pem_slice(key.as_bytes()).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let Ok(mut tls) = acceptor.accept(stream).await else {
                    return;
                };
                let mut buf = [0u8; 1024];
                let Ok(n) = tls.read(&mut buf).await else {
                    return;
                };
                let mut out = format!("{host}: ").into_bytes();
                out.extend_from_slice(&buf[..n]);
                let _ = tls.write_all(&out).await;
                let _ = tls.shutdown().await;
            });
        }
    });
    (addr, ca)
}

/// A TLS connection through `socket` with SNI `sni`, trusting `ca` only: the answer to
/// `line`, or the handshake's error.
async fn tls_exchange(
    socket: SocketAddr,
    sni: &str,
    ca: &rustls::pki_types::CertificateDer<'static>,
    line: &str,
) -> Result<String, String> {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(ca.clone()).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let stream = TcpStream::connect(socket)
        .await
        .map_err(|e| e.to_string())?;
    let name = rustls::pki_types::ServerName::try_from(sni.to_owned()).unwrap();
    let mut tls = tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(name, stream)
        .await
        .map_err(|e| e.to_string())?;
    tls.write_all(line.as_bytes())
        .await
        .map_err(|e| e.to_string())?;
    // One answer (one small write on the backend's side: one TLS record).
    let mut out = vec![0u8; 1024];
    let n = tls.read(&mut out).await.map_err(|e| e.to_string())?;
    Ok(String::from_utf8_lossy(&out[..n]).into_owned())
}

/// Gateway API GATEWAY-TLS (TLSRouteSimpleSameNamespace, TLSRouteHostnameIntersection): a
/// TLS Passthrough listener routes by SNI, exact before wildcard, without terminating: the
/// client verifies the backend's own certificate. An SNI no route claims is closed.
#[tokio::test]
async fn tls_route_passes_tls_through_by_sni() {
    init_tracing();
    bounded(async {
        let (exact, exact_ca) = tls_backend("abc.example.com").await;
        let (wild, wild_ca) = tls_backend("other.example.com").await;
        let proxy = TestProxy::start(ProxyArgs::loopback()).await;
        let mut inputs = inputs(&[
            Route::new("exact.internal", "exact", vec![exact]),
            Route::new("wild.internal", "wild", vec![wild]),
        ]);
        add_gateway(
            &mut inputs,
            json!({"addresses": [{"value": "127.87.0.2"}],
                "listeners": [{"name": "tls", "port": 19443, "protocol": "TLS",
                               "tls": {"mode": "Passthrough"}}]}),
            &[],
        );
        let route = |name: &str, host: &str, service: &str| {
            tls_route(json!({
                "metadata": {"namespace": NS, "name": name},
                "spec": {"parentRefs": [{"name": "gw"}], "hostnames": [host],
                         "rules": [{"backendRefs": [{"name": service, "port": 80}]}]}
            }))
        };
        inputs.tls_routes = vec![
            route("exact", "abc.example.com", "exact"),
            route("wild", "*.example.com", "wild"),
        ]
        .into();
        proxy_table(&proxy, inputs);
        let socket: SocketAddr = "127.87.0.2:19443".parse().unwrap();
        assert_eq!(
            tls_exchange(socket, "abc.example.com", &exact_ca, "ping").await,
            Ok("abc.example.com: ping".to_owned())
        );
        assert_eq!(
            tls_exchange(socket, "other.example.com", &wild_ca, "ping").await,
            Ok("other.example.com: ping".to_owned())
        );
        // No TLSRoute for the name: the connection is closed before any handshake.
        let refused = tls_exchange(socket, "abc.example.net", &exact_ca, "ping").await;
        assert!(refused.is_err(), "{refused:?}");
        proxy.shutdown().await;
    })
    .await;
}

/// A UDP backend that answers each datagram `x` with `<name>: x`.
async fn udp_echo(name: &'static str) -> SocketAddr {
    let socket = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let addr = socket.local_addr().unwrap();
    tokio::spawn(async move {
        let mut buf = [0u8; 2048];
        while let Ok((n, peer)) = socket.recv_from(&mut buf).await {
            let mut out = format!("{name}: ").into_bytes();
            out.extend_from_slice(&buf[..n]);
            let _ = socket.send_to(&out, peer).await;
        }
    });
    addr
}

/// Gateway API GATEWAY-UDP (UDPRoute): each client's datagrams are relayed to one backend
/// (drawn by weight when its first datagram arrives, kept for the session), and the
/// replies come back from the Gateway's address.
#[tokio::test]
async fn udp_route_relays_each_client_to_one_backend() {
    init_tracing();
    bounded(async {
        let a = udp_echo("a").await;
        let b = udp_echo("b").await;
        let proxy = TestProxy::start(ProxyArgs::loopback()).await;
        let mut inputs = inputs(&[
            Route::new("a.internal", "a", vec![a]),
            Route::new("b.internal", "b", vec![b]),
        ]);
        add_gateway(
            &mut inputs,
            json!({"addresses": [{"value": "127.87.0.3"}],
                "listeners": [{"name": "dns", "port": 15353, "protocol": "UDP"}]}),
            &[],
        );
        inputs.udp_routes = vec![Arc::new(
            serde_json::from_value(json!({
                "metadata": {"namespace": NS, "name": "udp"},
                "spec": {"parentRefs": [{"name": "gw"}],
                         "rules": [{"backendRefs": [{"name": "a", "port": 80, "weight": 1},
                                                    {"name": "b", "port": 80, "weight": 1}]}]}
            }))
            .expect("test UDPRoute"),
        )]
        .into();
        proxy_table(&proxy, inputs);
        let gateway: SocketAddr = "127.87.0.3:15353".parse().unwrap();
        let mut seen = BTreeMap::new();
        for client in 0..24 {
            let socket = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
            socket.connect(gateway).await.unwrap();
            let mut first = None;
            for i in 0..3 {
                socket
                    .send(format!("q{client}.{i}").as_bytes())
                    .await
                    .unwrap();
                let mut buf = [0u8; 2048];
                let n = tokio::time::timeout(Duration::from_secs(5), socket.recv(&mut buf))
                    .await
                    .expect("a reply within 5 s")
                    .unwrap();
                let answer = String::from_utf8_lossy(&buf[..n]).into_owned();
                let (name, rest) = answer.split_once(": ").expect("a backend's answer");
                assert_eq!(rest, format!("q{client}.{i}"));
                // One session, one backend.
                assert_eq!(
                    *first.get_or_insert(name.to_owned()),
                    name,
                    "client {client}"
                );
            }
            *seen.entry(first.unwrap_or_default()).or_insert(0) += 1;
        }
        assert_eq!(
            seen.len(),
            2,
            "both backends drawn for 24 clients: {seen:?}"
        );
        proxy.shutdown().await;
    })
    .await;
}

/// Gateway API TLSRouteModeTerminate and TLSRouteModeMixed (conformance
/// TLSRouteTerminateSimpleSameNamespace, TLSRouteMixedTerminationSameNamespace): on one
/// port, a `Terminate` listener's route ends TLS with the listener's certificate and pipes
/// the plaintext, a `Passthrough` listener's route pipes the TLS untouched; the SNI says
/// which.
#[tokio::test]
async fn tls_routes_terminate_or_pass_through_by_listener_on_one_port() {
    init_tracing();
    bounded(async {
        let (plain, _plain) = line_echo("plain").await;
        let (passed, passed_ca) = tls_backend("abc.example.com").await;
        let (cert, key, listener_ca) = ca_and_leaf("tls.example.com");
        let proxy = TestProxy::start(ProxyArgs::loopback()).await;
        let mut inputs = inputs(&[
            Route::new("plain.internal", "plain", vec![plain]).with_tls(cert, key),
            Route::new("passed.internal", "passed", vec![passed]),
        ]);
        add_gateway(
            &mut inputs,
            json!({"addresses": [{"value": "127.87.0.4"}], "listeners": [
                {"name": "term", "port": 18883, "protocol": "TLS", "hostname": "tls.example.com",
                 "tls": {"mode": "Terminate", "certificateRefs": [{"name": "tls-0"}]}},
                {"name": "pass", "port": 18883, "protocol": "TLS", "hostname": "abc.example.com",
                 "tls": {"mode": "Passthrough"}}]}),
            &[],
        );
        let route = |name: &str, section: &str, service: &str| {
            tls_route(json!({
                "metadata": {"namespace": NS, "name": name},
                "spec": {"parentRefs": [{"name": "gw", "sectionName": section}],
                         "rules": [{"backendRefs": [{"name": service, "port": 80}]}]}
            }))
        };
        inputs.tls_routes = vec![
            route("terminated", "term", "plain"),
            route("passed", "pass", "passed"),
        ]
        .into();
        proxy_table(&proxy, inputs);
        let socket: SocketAddr = "127.87.0.4:18883".parse().unwrap();
        // Terminated: the listener's certificate, and the backend sees the plaintext.
        assert_eq!(
            tls_exchange(socket, "tls.example.com", &listener_ca, "ping\n").await,
            Ok("plain: ping\n".to_owned())
        );
        // Passed through: the backend's own certificate.
        assert_eq!(
            tls_exchange(socket, "abc.example.com", &passed_ca, "ping").await,
            Ok("abc.example.com: ping".to_owned())
        );
        proxy.shutdown().await;
    })
    .await;
}

/// ingress-nginx "SSL Passthrough" (`ssl-passthrough: "true"` with
/// `--enable-ssl-passthrough`): on the shared HTTPS listener, a connection whose ClientHello
/// names the Ingress's host goes to the backend of its `/` path with the TLS bytes untouched
/// (the client verifies the backend's own certificate); other names are still terminated by
/// sluice with their Ingress's certificate.
#[tokio::test]
async fn ingress_ssl_passthrough_pipes_tls_by_server_name() {
    init_tracing();
    bounded(async {
        let (backend, backend_ca) = tls_backend("pass.example.com").await;
        let echo = echo("web", "web-1").await;
        let (cert, key, terminated_ca) = ca_and_leaf("term.example.com");
        let proxy = TestProxy::start(ProxyArgs::loopback()).await;
        let inputs = inputs(&[
            Route::new("pass.example.com", "pass", vec![backend])
                .with_annotation("nginx.ingress.kubernetes.io/ssl-passthrough", "true"),
            Route::new("term.example.com", "web", vec![echo.addr()]).with_tls(cert, key),
        ]);
        let options = sluice_routing::CompileOptions {
            enable_ssl_passthrough: true,
            ..Default::default()
        };
        let compiled = sluice_routing::compile(&inputs, &options);
        assert!(
            compiled
                .table
                .passthrough_target("pass.example.com")
                .is_some()
        );
        proxy
            .table
            .update(compiled.table, std::time::Duration::from_millis(1));
        assert_eq!(
            tls_exchange(proxy.https, "pass.example.com", &backend_ca, "ping").await,
            Ok("pass.example.com: ping".to_owned())
        );
        // Another host on the same listener: TLS ends in sluice, HTTP goes on.
        let answer = tls_exchange(
            proxy.https,
            "term.example.com",
            &terminated_ca,
            "GET / HTTP/1.1\r\nHost: term.example.com\r\nConnection: close\r\n\r\n",
        )
        .await
        .expect("terminated by sluice");
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");

        // Without the flag the annotation is reported and TLS is terminated.
        let compiled = sluice_routing::compile(&inputs, &Default::default());
        assert!(
            compiled
                .table
                .passthrough_target("pass.example.com")
                .is_none()
        );
        assert!(
            compiled
                .diagnostics
                .iter()
                .any(|d| d.message.contains("--enable-ssl-passthrough")),
            "{:?}",
            compiled.diagnostics
        );
        proxy.shutdown().await;
    })
    .await;
}

//! HTTP/1.1 through the proxy to in-process echo backends: routing, header rewriting, error
//! statuses, limits, streaming and WebSocket.

mod common;

use std::time::Duration;

use bytes::Bytes;
use common::*;
use futures::{SinkExt, StreamExt};
use http::Request;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::Frame;
use sluice_proxy::ProxyArgs;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

#[tokio::test]
async fn routes_by_host_and_rewrites_headers() {
    init_tracing();
    bounded(async {
        let web = echo("web", "web-0").await;
        let api = echo("api", "api-0").await;
        let proxy = TestProxy::with_routes(&[
            Route::new("web.example.com", "web", vec![web.addr()]),
            Route::new("api.example.com", "api", vec![api.addr()]),
        ])
        .await;

        let mut sender = http1_connect(proxy.http).await;
        let request = Request::get("/some/path?x=1&y=2")
            .header("host", "Web.Example.com:8080")
            .header("connection", "keep-alive, x-hop")
            .header("x-hop", "secret")
            .header("keep-alive", "timeout=5")
            .header("proxy-connection", "keep-alive")
            .header("te", "gzip")
            .header("x-forwarded-for", "203.0.113.7")
            .header("x-forwarded-proto", "gopher")
            .header("x-custom", "kept")
            .body(Full::new(Bytes::new()))
            .unwrap();
        let answer = send(&mut sender, request).await;
        assert_eq!(answer.status, 200, "{}", answer.text());
        let report = answer.report();
        assert_eq!(report.service, "web");
        assert_eq!(report.path, "/some/path");
        assert_eq!(report.query.as_deref(), Some("x=1&y=2"));
        assert_eq!(report.method, "GET");
        assert_eq!(report.protocol, "HTTP/1.1");
        assert_eq!(report.host.as_deref(), Some("Web.Example.com:8080"));
        let h = &report.headers;
        // An untrusted client's chain is replaced, not extended (ingress-nginx without
        // use-forwarded-headers).
        assert_eq!(h["x-forwarded-for"], "127.0.0.1");
        assert_eq!(h["x-real-ip"], "127.0.0.1");
        assert_eq!(h["x-forwarded-proto"], "http");
        assert_eq!(h["x-forwarded-host"], "Web.Example.com:8080");
        assert_eq!(h["x-forwarded-port"], proxy.http.port().to_string());
        assert_eq!(h["x-custom"], "kept");
        for hop in ["x-hop", "keep-alive", "proxy-connection", "te", "upgrade"] {
            assert!(!h.contains_key(hop), "{hop} was forwarded: {h:?}");
        }
        // The response went through the same rules: no hop-by-hop headers from upstream.
        assert!(answer.headers.get("keep-alive").is_none());
        assert_eq!(answer.headers["x-echo-pod"], "web-0");

        // Same keep-alive connection, other host.
        let request = Request::get("/v1")
            .header("host", "api.example.com")
            .body(Full::new(Bytes::new()))
            .unwrap();
        let answer = send(&mut sender, request).await;
        assert_eq!(answer.report().service, "api");
    })
    .await;
}

#[tokio::test]
async fn error_statuses() {
    init_tracing();
    bounded(async {
        let slow = echo("slow", "slow-0").await;
        let closed = closed_port().await;
        let mut args = ProxyArgs::loopback();
        args.upstream_header_timeout = Duration::from_millis(300);
        args.connect_timeout = Duration::from_secs(1);
        let proxy = TestProxy::start(args).await;
        proxy.route(&[
            Route::new("slow.example.com", "slow", vec![slow.addr()]),
            Route::new("closed.example.com", "closed", vec![closed]),
            Route::new("empty.example.com", "empty", vec![]),
        ]);

        let not_found = get(proxy.http, "nowhere.example.com", "/").await;
        assert_eq!(not_found.status, 404);
        assert!(not_found.text().contains("404 Not Found"));
        assert!(not_found.text().contains("sluice"));
        assert_eq!(
            not_found.headers["content-type"],
            "text/html; charset=utf-8"
        );

        let bad_gateway = get(proxy.http, "closed.example.com", "/").await;
        assert_eq!(bad_gateway.status, 502);
        assert!(bad_gateway.text().contains("502 Bad Gateway"));
        assert!(!bad_gateway.text().contains(&closed.to_string()));

        let unavailable = get(proxy.http, "empty.example.com", "/").await;
        assert_eq!(unavailable.status, 503);
        assert!(!unavailable.text().contains("empty"));

        let started = std::time::Instant::now();
        let timeout = get(proxy.http, "slow.example.com", "/delay/3000").await;
        assert_eq!(timeout.status, 504);
        assert!(started.elapsed() < Duration::from_secs(2));

        // The backend itself still works within the timeout.
        let ok = get(proxy.http, "slow.example.com", "/delay/10").await;
        assert_eq!(ok.status, 200);
        let status = get(proxy.http, "slow.example.com", "/status/418").await;
        assert_eq!(status.status, 418);
    })
    .await;
}

/// Writes `head` raw and returns the status code of the answer (0 if the connection closed
/// without one).
async fn raw_status(addr: std::net::SocketAddr, head: &[u8], body: &[u8]) -> u16 {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    stream.write_all(head).await.unwrap();
    // The proxy may answer and close before reading everything; that is fine.
    let _ = stream.write_all(body).await;
    let mut response = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match tokio::time::timeout(Duration::from_secs(10), stream.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) | Err(_) => break,
            Ok(Ok(n)) => {
                response.extend_from_slice(&buf[..n]);
                if response.windows(4).any(|w| w == b"\r\n\r\n") {
                    break;
                }
            }
        }
    }
    let text = String::from_utf8_lossy(&response);
    text.strip_prefix("HTTP/1.1 ")
        .and_then(|rest| rest.get(..3))
        .and_then(|code| code.parse().ok())
        .unwrap_or(0)
}

#[tokio::test]
async fn header_and_body_limits() {
    init_tracing();
    bounded(async {
        let backend = echo("web", "web-0").await;
        let mut args = ProxyArgs::loopback();
        args.max_header_bytes = 16 * 1024;
        args.max_body_bytes = 1024 * 1024;
        let proxy = TestProxy::start(args).await;
        proxy.route(&[Route::new("web.example.com", "web", vec![backend.addr()])]);

        // Heads over the limit get 431, whether far over it or just over it (a head that
        // completes in the read crossing the limit included), and however it arrives.
        for size in [32 * 1024, 16 * 1024 + 100, 17 * 1024, 18 * 1024, 20 * 1024] {
            let big = "a".repeat(size);
            let head = format!("GET / HTTP/1.1\r\nhost: web.example.com\r\nx-big: {big}\r\n\r\n");
            let status = raw_status(proxy.http, head.as_bytes(), b"").await;
            assert_eq!(status, 431, "x-big of {size} bytes");
        }

        // Declared body over the limit: 413 without forwarding.
        let head =
            "POST /upload HTTP/1.1\r\nhost: web.example.com\r\ncontent-length: 2097152\r\n\r\n";
        assert_eq!(raw_status(proxy.http, head.as_bytes(), b"").await, 413);

        // Chunked body that grows over the limit while streaming: 413 (or, if the proxy's close
        // overtakes the answer, a cut connection).
        let head =
            "POST /upload HTTP/1.1\r\nhost: web.example.com\r\ntransfer-encoding: chunked\r\n\r\n";
        let mut body = Vec::new();
        let chunk = vec![b'x'; 64 * 1024];
        for _ in 0..32 {
            body.extend_from_slice(format!("{:x}\r\n", chunk.len()).as_bytes());
            body.extend_from_slice(&chunk);
            body.extend_from_slice(b"\r\n");
        }
        body.extend_from_slice(b"0\r\n\r\n");
        let status = raw_status(proxy.http, head.as_bytes(), &body).await;
        assert!(status == 413 || status == 0, "got {status}");

        // Under both limits: fine.
        let mut sender = http1_connect(proxy.http).await;
        let request = Request::post("/upload")
            .header("host", "web.example.com")
            .header("x-medium", "b".repeat(8 * 1024))
            .body(Full::new(Bytes::from(vec![b'y'; 512 * 1024])))
            .unwrap();
        let answer = send(&mut sender, request).await;
        assert_eq!(answer.status, 200);
        assert_eq!(answer.report().body_bytes, 512 * 1024);
    })
    .await;
}

/// Resident memory of this process in KiB (Linux).
fn rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

#[tokio::test]
async fn ten_mebibytes_stream_both_ways() {
    init_tracing();
    bounded(async {
        const SIZE: usize = 10 * 1024 * 1024;
        const CHUNK: usize = 64 * 1024;
        let backend = echo("bulk", "bulk-0").await;
        let proxy =
            TestProxy::with_routes(&[Route::new("bulk.example.com", "bulk", vec![backend.addr()])])
                .await;

        let upload = |size: usize| {
            let frames = futures::stream::iter(
                (0..size / CHUNK)
                    .map(|_| Ok::<_, std::io::Error>(Frame::data(Bytes::from(vec![b'u'; CHUNK])))),
            );
            Request::put("/upload")
                .header("host", "bulk.example.com")
                .body(BodyExt::boxed(StreamBody::new(frames)))
                .unwrap()
        };
        let stream = TcpStream::connect(proxy.http).await.unwrap();
        let (mut sender, connection) =
            hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
                .await
                .unwrap();
        tokio::spawn(connection);

        // Warm up allocator and pools, then measure a full-size upload and download.
        let response = sender.send_request(upload(CHUNK * 4)).await.unwrap();
        collect(response).await;
        let before = rss_kib();

        sender.ready().await.unwrap();
        let response = sender.send_request(upload(SIZE)).await.unwrap();
        let answer = collect(response).await;
        assert_eq!(answer.status, 200);
        assert_eq!(answer.report().body_bytes, SIZE as u64);
        assert!(answer.report().headers.contains_key("transfer-encoding"));

        let download = Request::get(format!("/bytes/{SIZE}"))
            .header("host", "bulk.example.com")
            .body(
                http_body_util::Empty::<Bytes>::new()
                    .map_err(|never| match never {})
                    .boxed(),
            )
            .unwrap();
        sender.ready().await.unwrap();
        let response = sender.send_request(download).await.unwrap();
        assert_eq!(response.status(), 200);
        let mut body = response.into_body();
        let mut received = 0usize;
        while let Some(frame) = body.frame().await {
            if let Ok(data) = frame.unwrap().into_data() {
                received += data.len();
            }
        }
        assert_eq!(received, SIZE);
        let grown = rss_kib().saturating_sub(before);
        // Buffering either body whole would add at least 10 MiB.
        assert!(grown < 8 * 1024, "RSS grew by {grown} KiB");
    })
    .await;
}

#[tokio::test]
async fn websocket_echo_through_the_proxy() {
    init_tracing();
    bounded(async {
        let backend = echo("ws", "ws-0").await;
        let proxy =
            TestProxy::with_routes(&[Route::new("ws.example.com", "ws", vec![backend.addr()])])
                .await;
        let stream = TcpStream::connect(proxy.http).await.unwrap();
        let (mut socket, response) =
            tokio_tungstenite::client_async("ws://ws.example.com/chat", stream)
                .await
                .expect("WebSocket handshake through the proxy");
        assert_eq!(response.status(), 101);
        for i in 0..5 {
            let text = format!("hello {i}");
            socket
                .send(tokio_tungstenite::tungstenite::Message::text(text.clone()))
                .await
                .unwrap();
            let echoed = socket.next().await.expect("an answer").unwrap();
            assert_eq!(echoed.into_text().unwrap().as_str(), text);
        }
        let binary = vec![7u8; 100_000];
        socket
            .send(tokio_tungstenite::tungstenite::Message::binary(
                binary.clone(),
            ))
            .await
            .unwrap();
        let echoed = socket.next().await.expect("an answer").unwrap();
        assert_eq!(echoed.into_data().as_ref(), &binary[..]);
        socket.close(None).await.unwrap();
    })
    .await;
}

#[tokio::test]
async fn access_log_on_does_not_disturb_requests() {
    init_tracing();
    bounded(async {
        let backend = echo("web", "web-0").await;
        let mut args = ProxyArgs::loopback();
        args.access_log = true;
        let proxy = TestProxy::start(args).await;
        proxy.route(&[Route::new("web.example.com", "web", vec![backend.addr()])]);
        for _ in 0..3 {
            assert_eq!(
                get(proxy.http, "web.example.com", "/logged").await.status,
                200
            );
        }
        assert_eq!(get(proxy.http, "other.example.com", "/").await.status, 404);
    })
    .await;
}

/// nginx's `proxy_next_upstream error`: a request whose connect failed was never sent, so
/// it goes to the next endpoint whatever its method, its body included (nginx buffers the
/// body for exactly this). Both transports: the own HTTP/1.1 client and hyper's (h2c).
/// Round robin over the two endpoints of a fresh route: one of the first two POSTs meets the
/// closed endpoint first (it is skipped once marked down), and every POST must still reach
/// the live one with its whole body.
#[tokio::test]
async fn a_body_goes_to_the_next_endpoint_when_a_connect_fails_nginx_proxy_next_upstream() {
    init_tracing();
    bounded(async {
        let live = echo("web", "web-0").await;
        let closed = closed_port().await;
        let proxy = TestProxy::start(ProxyArgs::loopback()).await;
        proxy.route(&[
            Route::new("plain.example.com", "plain", vec![closed, live.addr()])
                .with_annotation("nginx.ingress.kubernetes.io/load-balance", "round_robin"),
            Route::new("h2c.example.com", "h2c", vec![closed, live.addr()])
                .with_annotation("nginx.ingress.kubernetes.io/load-balance", "round_robin")
                .with_annotation("nginx.ingress.kubernetes.io/backend-protocol", "H2C"),
        ]);
        for host in ["plain.example.com", "h2c.example.com"] {
            for n in 0..20 {
                let body = vec![b'x'; 1000 + n];
                let mut sender = http1_connect(proxy.http).await;
                let request = Request::post("/upload")
                    .header("host", host)
                    .body(Full::new(Bytes::from(body)))
                    .unwrap();
                let answer = send(&mut sender, request).await;
                assert_eq!(answer.status, 200, "{host} POST {n}: {}", answer.text());
                let report = answer.report();
                assert_eq!(report.body_bytes, 1000 + n as u64, "{host} POST {n}");
                assert_eq!(report.method, "POST");
            }
        }
    })
    .await;
}

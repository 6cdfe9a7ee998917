//! The proxy's own HTTP/1.1 server loop on the wire, against raw-TCP clients: pipelining,
//! the hand-over to hyper in the middle of a connection, HTTP/1.0 keep-alive rules, the
//! client header timeout, and a side-by-side comparison with `--http1-server hyper`.

mod common;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use common::*;
use sluice_echo::EchoReport;
use sluice_proxy::{Http1Server, ProxyArgs};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const HOST: &str = "wire.example.com";

/// A response as read off the wire.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Raw {
    /// 0 for HTTP/1.0, 1 for HTTP/1.1.
    version: u8,
    status: u16,
    /// Lower-cased names, in order.
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Raw {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    fn report(&self) -> EchoReport {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("{e}: {:?}", String::from_utf8_lossy(&self.body)))
    }
}

/// Reads one response off `stream` (bytes beyond it stay in `buf`); `None` if the
/// connection ended before a head. Bodies: Content-Length, chunked, or until close.
async fn read_response(stream: &mut TcpStream, buf: &mut Vec<u8>, head: bool) -> Option<Raw> {
    let ((version, status), headers, head_len) = loop {
        let mut slots = [httparse::EMPTY_HEADER; 64];
        let mut response = httparse::Response::new(&mut slots);
        if let httparse::Status::Complete(len) = response.parse(buf).expect("valid response") {
            let headers: Vec<(String, String)> = response
                .headers
                .iter()
                .map(|h| {
                    let value = String::from_utf8_lossy(h.value).into_owned();
                    (h.name.to_ascii_lowercase(), value)
                })
                .collect();
            break (
                (response.version.unwrap(), response.code.unwrap()),
                headers,
                len,
            );
        }
        if read_more(stream, buf).await == 0 {
            return None;
        }
    };
    buf.drain(..head_len);
    let find = |name: &str| headers.iter().find(|(n, _)| n == name).map(|(_, v)| v);
    let body = if head || status == 204 || status == 304 {
        Vec::new()
    } else if find("transfer-encoding").is_some() {
        let mut body = Vec::new();
        loop {
            let line_end = loop {
                if let Some(at) = buf.windows(2).position(|w| w == b"\r\n") {
                    break at;
                }
                assert!(read_more(stream, buf).await > 0, "chunked body cut");
            };
            let size_text = String::from_utf8_lossy(&buf[..line_end]).into_owned();
            let size = usize::from_str_radix(size_text.trim(), 16).expect("chunk size");
            while buf.len() < line_end + 2 + size + 2 {
                assert!(read_more(stream, buf).await > 0, "chunked body cut");
            }
            body.extend_from_slice(&buf[line_end + 2..line_end + 2 + size]);
            buf.drain(..line_end + 2 + size + 2);
            if size == 0 {
                break body;
            }
        }
    } else if let Some(length) = find("content-length") {
        let length: usize = length.trim().parse().unwrap();
        while buf.len() < length {
            assert!(read_more(stream, buf).await > 0, "body cut");
        }
        buf.drain(..length).collect()
    } else {
        while read_more(stream, buf).await > 0 {}
        std::mem::take(buf)
    };
    Some(Raw {
        version,
        status,
        headers,
        body,
    })
}

async fn read_more(stream: &mut TcpStream, buf: &mut Vec<u8>) -> usize {
    let mut chunk = [0u8; 16 * 1024];
    let n = tokio::time::timeout(Duration::from_secs(10), stream.read(&mut chunk))
        .await
        .expect("the proxy answers within 10 s")
        .unwrap_or(0);
    buf.extend_from_slice(&chunk[..n]);
    n
}

/// Whether the proxy closed `stream` (nothing more to read) within `within`.
async fn closed_within(stream: &mut TcpStream, within: Duration) -> bool {
    let mut byte = [0u8; 1];
    matches!(
        tokio::time::timeout(within, stream.read(&mut byte)).await,
        Ok(Ok(0) | Err(_))
    )
}

async fn connect(addr: SocketAddr) -> TcpStream {
    let stream = TcpStream::connect(addr).await.unwrap();
    stream.set_nodelay(true).unwrap();
    stream
}

async fn proxy(
    server: Http1Server,
    backend: SocketAddr,
    tweak: impl FnOnce(&mut ProxyArgs),
) -> TestProxy {
    let mut args = ProxyArgs::loopback();
    args.http1_server = server;
    tweak(&mut args);
    let proxy = TestProxy::start(args).await;
    proxy.route(&[
        Route::new(HOST, "echo", vec![backend]),
        Route::new("empty.example.com", "empty", vec![]),
        Route::new("down.example.com", "down", vec![closed_port().await]),
    ]);
    proxy
}

#[tokio::test]
async fn pipelined_requests_are_answered_in_order() {
    bounded(async {
        let backend = echo("echo", "pod-a").await;
        let proxy = proxy(Http1Server::Sluice, backend.addr(), |_| {}).await;
        let mut stream = connect(proxy.http).await;
        let mut requests = String::new();
        for path in ["/one", "/two?x=1", "/three"] {
            requests.push_str(&format!("GET {path} HTTP/1.1\r\nHost: {HOST}\r\n\r\n"));
        }
        requests.push_str(&format!(
            "HEAD /four HTTP/1.1\r\nHost: {HOST}\r\nConnection: close\r\n\r\n"
        ));
        stream.write_all(requests.as_bytes()).await.unwrap();
        let mut buf = Vec::new();
        let mut seen = Vec::new();
        for _ in 0..3 {
            let raw = read_response(&mut stream, &mut buf, false)
                .await
                .expect("a response");
            assert_eq!(raw.status, 200);
            seen.push(raw.report().path);
        }
        assert_eq!(seen, ["/one", "/two", "/three"]);
        let head = read_response(&mut stream, &mut buf, true)
            .await
            .expect("HEAD answered");
        assert_eq!(head.status, 200);
        assert_eq!(head.header("connection"), Some("close"));
        assert!(
            head.header("content-length").is_some(),
            "HEAD keeps the length"
        );
        assert!(closed_within(&mut stream, Duration::from_secs(5)).await);
        assert!(buf.is_empty(), "nothing after the HEAD response: {buf:?}");
    })
    .await;
}

#[tokio::test]
async fn a_request_with_a_body_hands_the_connection_to_hyper_losing_nothing() {
    bounded(async {
        let backend = echo("echo", "pod-a").await;
        let proxy = proxy(Http1Server::Sluice, backend.addr(), |_| {}).await;
        let mut stream = connect(proxy.http).await;
        // All in one write: the POST and what follows it are in the own loop's buffer when
        // it hands over.
        let wire = format!(
            "GET /one HTTP/1.1\r\nHost: {HOST}\r\n\r\n\
             POST /two HTTP/1.1\r\nHost: {HOST}\r\nContent-Length: 5\r\n\r\nhello\
             GET /three HTTP/1.1\r\nHost: {HOST}\r\n\r\n\
             GET /four HTTP/1.1\r\nHost: {HOST}\r\nConnection: close\r\n\r\n"
        );
        stream.write_all(wire.as_bytes()).await.unwrap();
        let mut buf = Vec::new();
        let mut seen = Vec::new();
        for _ in 0..4 {
            let raw = read_response(&mut stream, &mut buf, false)
                .await
                .expect("a response");
            assert_eq!(raw.status, 200, "{raw:?}");
            let report = raw.report();
            seen.push((report.method, report.path, report.body_bytes));
        }
        let expected = [
            ("GET", "/one", 0),
            ("POST", "/two", 5),
            ("GET", "/three", 0),
            ("GET", "/four", 0),
        ];
        let expected: Vec<(String, String, u64)> = expected
            .iter()
            .map(|(m, p, b)| ((*m).to_owned(), (*p).to_owned(), *b))
            .collect();
        assert_eq!(seen, expected);
        assert!(closed_within(&mut stream, Duration::from_secs(5)).await);
    })
    .await;
}

#[tokio::test]
async fn http10_clients_get_keep_alive_only_when_they_ask() {
    bounded(async {
        let backend = echo("echo", "pod-a").await;
        let proxy = proxy(Http1Server::Sluice, backend.addr(), |_| {}).await;

        let mut stream = connect(proxy.http).await;
        stream
            .write_all(format!("GET /plain HTTP/1.0\r\nHost: {HOST}\r\n\r\n").as_bytes())
            .await
            .unwrap();
        let mut buf = Vec::new();
        let raw = read_response(&mut stream, &mut buf, false).await.unwrap();
        assert_eq!((raw.version, raw.status), (0, 200));
        assert_eq!(raw.header("connection"), None, "HTTP/1.0 closes by default");
        assert!(closed_within(&mut stream, Duration::from_secs(5)).await);

        let mut stream = connect(proxy.http).await;
        let mut buf = Vec::new();
        for round in 0..2 {
            let wire = format!(
                "GET /ka{round} HTTP/1.0\r\nHost: {HOST}\r\nConnection: keep-alive\r\n\r\n"
            );
            stream.write_all(wire.as_bytes()).await.unwrap();
            let raw = read_response(&mut stream, &mut buf, false).await.unwrap();
            assert_eq!(raw.status, 200);
            assert_eq!(raw.header("connection"), Some("keep-alive"));
            assert_eq!(raw.report().path, format!("/ka{round}"));
            assert_eq!(
                raw.report().protocol,
                "HTTP/1.1",
                "upstream requests are HTTP/1.1"
            );
        }
    })
    .await;
}

#[tokio::test]
async fn an_incomplete_head_is_dropped_after_the_header_timeout() {
    bounded(async {
        let backend = echo("echo", "pod-a").await;
        let timeout = Duration::from_millis(400);
        let proxy = proxy(Http1Server::Sluice, backend.addr(), |args| {
            args.client_header_timeout = timeout;
        })
        .await;

        // A complete request first: the timeout runs per head, not per connection.
        let mut stream = connect(proxy.http).await;
        let mut buf = Vec::new();
        let wire = format!("GET /first HTTP/1.1\r\nHost: {HOST}\r\n\r\n");
        stream.write_all(wire.as_bytes()).await.unwrap();
        assert_eq!(
            read_response(&mut stream, &mut buf, false)
                .await
                .unwrap()
                .status,
            200
        );
        // Idle between requests for longer than the header timeout: still open.
        tokio::time::sleep(timeout * 2).await;
        // A head trickling in within the timeout is served.
        let start = Instant::now();
        for piece in [
            "GET /slow HTTP/1.1\r\n",
            "Host: wire.example.com\r\n",
            "\r\n",
        ] {
            stream.write_all(piece.as_bytes()).await.unwrap();
            tokio::time::sleep(timeout / 5).await;
        }
        let raw = read_response(&mut stream, &mut buf, false).await.unwrap();
        assert_eq!(raw.report().path, "/slow");
        assert!(start.elapsed() < timeout * 2);

        // A head that stops halfway is dropped once the timeout has passed.
        let start = Instant::now();
        stream
            .write_all(b"GET /stuck HTTP/1.1\r\nHost: wire")
            .await
            .unwrap();
        assert!(closed_within(&mut stream, Duration::from_secs(5)).await);
        let waited = start.elapsed();
        assert!(
            waited >= timeout - Duration::from_millis(50),
            "closed after {waited:?}"
        );
    })
    .await;
}

/// Sends `wire` on a fresh connection and reads one response and everything after it.
async fn exchange(addr: SocketAddr, wire: &str, head: bool) -> (Raw, Vec<u8>) {
    let mut stream = connect(addr).await;
    stream.write_all(wire.as_bytes()).await.unwrap();
    let mut buf = Vec::new();
    let raw = read_response(&mut stream, &mut buf, head)
        .await
        .expect("a response");
    let _ = tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut buf)).await;
    (raw, buf)
}

/// What must be the same whichever server answered: status, the framing and connection
/// headers, and the body (for echo answers, the request as the backend saw it, minus the
/// proxies' ports).
fn comparable(raw: &Raw) -> (u8, u16, Vec<(String, String)>, String) {
    let mut headers: Vec<(String, String)> = raw
        .headers
        .iter()
        .filter(|(n, _)| n != "date")
        .cloned()
        .collect();
    // Order across names carries no meaning.
    headers.sort_by(|a, b| a.0.cmp(&b.0));
    let body = match serde_json::from_slice::<EchoReport>(&raw.body) {
        Ok(mut report) => {
            report.peer = String::new();
            // The two proxies listen on different ports.
            report.headers.remove("x-forwarded-port");
            format!("{report:?}")
        }
        Err(_) => String::from_utf8_lossy(&raw.body).into_owned(),
    };
    (raw.version, raw.status, headers, body)
}

#[tokio::test]
async fn the_own_loop_and_hyper_answer_alike() {
    bounded(async {
        let backend = echo("echo", "pod-a").await;
        // One proxy id for both, so their `Via` entries compare equal.
        let same_id = |args: &mut ProxyArgs| args.proxy_id = Some("sluice-test".to_owned());
        let own = proxy(Http1Server::Sluice, backend.addr(), same_id).await;
        let hyper = proxy(Http1Server::Hyper, backend.addr(), same_id).await;
        let cases = [
            format!("GET /a/b?q=1 HTTP/1.1\r\nHost: {HOST}\r\nAccept: */*\r\nConnection: close\r\n\r\n"),
            format!("HEAD /h HTTP/1.1\r\nHost: {HOST}\r\nConnection: close\r\n\r\n"),
            format!("OPTIONS /o HTTP/1.1\r\nHost: {HOST}\r\nConnection: close\r\n\r\n"),
            format!("DELETE /d HTTP/1.1\r\nHost: {HOST}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"),
            format!("GET / HTTP/1.1\r\nHost: {HOST}\r\nX-Forwarded-For: 10.0.0.1\r\nX-Real-IP: 6.6.6.6\r\nConnection: close, X-Drop\r\nX-Drop: 1\r\nCookie: a=1\r\n\r\n"),
            format!("GET /old HTTP/1.0\r\nHost: {HOST}\r\n\r\n"),
            "GET / HTTP/1.1\r\nHost: nowhere.example.com\r\nConnection: close\r\n\r\n".to_owned(),
            "HEAD / HTTP/1.1\r\nHost: nowhere.example.com\r\nConnection: close\r\n\r\n".to_owned(),
            "GET / HTTP/1.1\r\nHost: empty.example.com\r\nConnection: close\r\n\r\n".to_owned(),
            "GET / HTTP/1.1\r\nHost: down.example.com\r\nConnection: close\r\n\r\n".to_owned(),
            "GET / HTTP/1.0\r\nHost: down.example.com\r\n\r\n".to_owned(),
        ];
        for wire in &cases {
            let head = wire.starts_with("HEAD");
            let (a, rest_a) = exchange(own.http, wire, head).await;
            let (b, rest_b) = exchange(hyper.http, wire, head).await;
            assert_eq!(comparable(&a), comparable(&b), "{wire:?}");
            assert!(rest_a.is_empty() && rest_b.is_empty(), "{wire:?}");
            assert!(a.header("date").is_some(), "{wire:?}: {a:?}");
        }
    })
    .await;
}

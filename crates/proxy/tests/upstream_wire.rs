//! The proxy's own HTTP/1.1 upstream client on the wire, against scripted raw-TCP backends:
//! chunked, close-delimited and interim (1xx) responses, HEAD, keep-alive reuse, stale
//! pooled connections, malformed and truncated responses, request body framing, and
//! hop-by-hop response headers.
//!
//! Every test runs on `#[tokio::test]`'s current-thread runtime: the proxy's idle pool is
//! per thread, so with one thread the connection reuse asserted here is deterministic.

mod common;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::*;
use http::{Request, StatusCode};
use http_body_util::{BodyExt, Full};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

/// The host every test routes to its scripted backend.
const HOST: &str = "wire.example.com";

/// A chunked response: an upper-case size, a chunk extension with a quoted value, a
/// declared trailer and the trailer itself after the last chunk.
const CHUNKED_RESPONSE: &[u8] = b"HTTP/1.1 200 OK\r\n\
Content-Type: text/plain\r\n\
Transfer-Encoding: chunked\r\n\
Trailer: X-Digest\r\n\
\r\n\
5\r\nhello\r\n\
7;name=\"quoted value\"\r\n, world\r\n\
1A\r\nabcdefghijklmnopqrstuvwxyz\r\n\
0\r\n\
X-Digest: 1234\r\n\
\r\n";

/// What [`CHUNKED_RESPONSE`] decodes to.
const CHUNKED_BODY: &[u8] = b"hello, worldabcdefghijklmnopqrstuvwxyz";

#[tokio::test]
async fn chunked_response_with_extension_and_trailer_reaches_client_exactly() {
    init_tracing();
    bounded(async {
        let backend = ScriptedBackend::start(|seen| match seen.path.as_str() {
            "/whole" => vec![Step::Write(CHUNKED_RESPONSE.to_vec())],
            // Three bytes per segment: the head, the size lines, the CRLFs and the trailer
            // all arrive cut at every possible place over the run.
            _ => vec![Step::Trickle {
                bytes: CHUNKED_RESPONSE.to_vec(),
                piece: 3,
                pause: Duration::from_millis(2),
            }],
        })
        .await;
        let proxy = proxy_for(&backend).await;

        for path in ["/whole", "/split"] {
            let answer = get(proxy.http, HOST, path).await;
            assert_eq!(answer.status, 200, "{path}");
            assert_eq!(&answer.body[..], CHUNKED_BODY, "{path}");
            assert_eq!(answer.headers["content-type"], "text/plain", "{path}");
            // `Trailer` is hop-by-hop; the trailer itself is dropped with it.
            assert!(answer.headers.get("trailer").is_none(), "{path}");
            assert!(answer.headers.get("x-digest").is_none(), "{path}");
        }
        // Both exchanges used one upstream connection: the decoder consumed the framing up to
        // the last byte of the trailer section (a leftover byte would stop reuse).
        assert_eq!(backend.accepted(), 1);
        let seen = backend.requests();
        assert_eq!(paths(&seen), ["/whole", "/split"]);
        assert!(seen.iter().all(|s| s.conn == 0));

        // An HTTP/1.0 client cannot read chunks: it gets the body delimited by the close.
        for path in ["/whole", "/split"] {
            let wire = format!("GET {path} HTTP/1.0\r\nHost: {HOST}\r\n\r\n");
            let raw = raw_exchange(proxy.http, &[wire.as_bytes()]).await;
            assert_eq!(raw.status, 200, "{path}");
            assert_eq!(raw.header("transfer-encoding"), None, "{path}");
            assert_eq!(raw.header("content-length"), None, "{path}");
            assert_eq!(&raw.body[..], CHUNKED_BODY, "{path}");
        }
    })
    .await;
}

#[tokio::test]
async fn close_delimited_response_body_is_complete() {
    init_tracing();
    bounded(async {
        let body = pattern(100_000);
        let script_body = body.clone();
        let backend = ScriptedBackend::start(move |seen| {
            // No Content-Length and no chunked: the body ends when the upstream closes.
            let head: &[u8] = match seen.path.as_str() {
                "/http10" => b"HTTP/1.0 200 OK\r\nContent-Type: application/octet-stream\r\n\r\n",
                _ => b"HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\n\r\n",
            };
            let (first, rest) = script_body.split_at(40_000);
            vec![
                Step::Write(head.to_vec()),
                Step::Pause(Duration::from_millis(20)),
                Step::Write(first.to_vec()),
                Step::Pause(Duration::from_millis(20)),
                Step::Write(rest.to_vec()),
                Step::Close,
            ]
        })
        .await;
        let proxy = proxy_for(&backend).await;

        for path in ["/http10", "/http11"] {
            let answer = get(proxy.http, HOST, path).await;
            assert_eq!(answer.status, 200, "{path}");
            assert_eq!(answer.body.len(), body.len(), "{path}");
            assert!(answer.body[..] == body[..], "{path}: body differs");
        }
        // One connection per exchange, and no request was sent twice.
        assert_eq!(backend.accepted(), 2);
        assert_eq!(paths(&backend.requests()), ["/http10", "/http11"]);
    })
    .await;
}

#[tokio::test]
async fn interim_103_early_hints_are_skipped() {
    init_tracing();
    bounded(async {
        let backend = ScriptedBackend::start(|seen| {
            let hints = b"HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload\r\n\r\n";
            let last = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nX-Final: yes\r\n\r\nhello";
            match seen.path.as_str() {
                // Interim and final head in one segment: parsed out of one buffer.
                "/together" => vec![Step::Write([&hints[..], &last[..]].concat())],
                // Two interim heads, each alone, then the final one: more reads are needed
                // after each interim head.
                _ => vec![
                    Step::Write(hints.to_vec()),
                    Step::Pause(Duration::from_millis(30)),
                    Step::Write(hints.to_vec()),
                    Step::Pause(Duration::from_millis(30)),
                    Step::Write(last.to_vec()),
                ],
            }
        })
        .await;
        let proxy = proxy_for(&backend).await;

        for path in ["/together", "/apart"] {
            // Raw bytes, so an interim head relayed to the client would be seen.
            let request =
                format!("GET {path} HTTP/1.1\r\nHost: {HOST}\r\nConnection: close\r\n\r\n");
            let answer = raw_exchange(proxy.http, &[request.as_bytes()]).await;
            assert!(
                answer.wire.starts_with(b"HTTP/1.1 200 OK\r\n"),
                "{path}: {:?}",
                String::from_utf8_lossy(&answer.wire)
            );
            assert_eq!(
                count(&answer.wire, b"HTTP/1."),
                1,
                "{path}: one status line"
            );
            assert_eq!(answer.body, b"hello", "{path}");
            assert_eq!(answer.header("x-final"), Some("yes"), "{path}");
            // The hint's headers belong to the interim response only.
            assert_eq!(answer.header("link"), None, "{path}");
        }
        // The connection stays usable after interim heads.
        assert_eq!(backend.accepted(), 1);
    })
    .await;
}

#[tokio::test]
async fn head_response_has_no_body_and_connection_is_reused() {
    init_tracing();
    bounded(async {
        let backend = ScriptedBackend::start(|seen| {
            // The length a GET would have, but no body: this is a HEAD response.
            let reply: &[u8] = if seen.method == "HEAD" {
                b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\nContent-Type: text/plain\r\n\r\n"
            } else {
                b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\nContent-Type: text/plain\r\n\r\n0123456789"
            };
            vec![Step::Write(reply.to_vec())]
        })
        .await;
        let proxy = proxy_for(&backend).await;
        let mut client = http1_connect(proxy.http).await;

        // Waiting for ten body bytes that never come would hang until the (60 s) upstream
        // timeout; a HEAD response must be over at its head.
        let started = Instant::now();
        let head = Request::head("/resource")
            .header("host", HOST)
            .body(Full::new(Bytes::new()))
            .unwrap();
        let answer = tokio::time::timeout(Duration::from_secs(5), send(&mut client, head))
            .await
            .expect("HEAD answered promptly");
        assert!(started.elapsed() < Duration::from_secs(5));
        assert_eq!(answer.status, 200);
        assert_eq!(answer.headers["content-length"], "10");
        assert!(answer.body.is_empty());

        // Same client connection (so no stray body bytes reached it either), same upstream
        // connection.
        let get = Request::get("/resource")
            .header("host", HOST)
            .body(Full::new(Bytes::new()))
            .unwrap();
        let answer = send(&mut client, get).await;
        assert_eq!(answer.status, 200);
        assert_eq!(&answer.body[..], b"0123456789");

        assert_eq!(backend.accepted(), 1);
        let seen = backend.requests();
        assert_eq!(methods(&seen), ["HEAD", "GET"]);
        assert!(seen.iter().all(|s| s.conn == 0));
    })
    .await;
}

#[tokio::test]
async fn sequential_requests_share_one_keep_alive_connection() {
    init_tracing();
    bounded(async {
        let served = AtomicUsize::new(0);
        let backend = ScriptedBackend::start(move |_| {
            let body = format!("reply-{}", served.fetch_add(1, Ordering::SeqCst));
            vec![Step::Write(ok_response(&body))]
        })
        .await;
        let proxy = proxy_for(&backend).await;

        for i in 0..3 {
            // A fresh client connection each time: only the upstream side is shared.
            let answer = get(proxy.http, HOST, &format!("/n/{i}")).await;
            assert_eq!(answer.status, 200);
            assert_eq!(answer.text(), format!("reply-{i}"));
        }
        assert_eq!(backend.accepted(), 1);
        let seen = backend.requests();
        assert_eq!(paths(&seen), ["/n/0", "/n/1", "/n/2"]);
        assert!(seen.iter().all(|s| s.conn == 0));
    })
    .await;
}

#[tokio::test]
async fn stale_pooled_connection_is_not_used_for_a_post() {
    init_tracing();
    bounded(async {
        let backend = ScriptedBackend::start(|seen| {
            if seen.conn == 0 {
                // A keep-alive answer, then the upstream drops the connection without
                // saying so (as an upstream's idle timeout does).
                vec![
                    Step::Write(ok_response("first")),
                    Step::Pause(Duration::from_millis(50)),
                    Step::Close,
                ]
            } else {
                vec![Step::Write(ok_response("second"))]
            }
        })
        .await;
        let proxy = proxy_for(&backend).await;

        let answer = get(proxy.http, HOST, "/first").await;
        assert_eq!(answer.status, 200);
        assert_eq!(answer.text(), "first");
        tokio::time::sleep(Duration::from_millis(200)).await;

        // POST is not idempotent: the proxy may not send it on a connection that then turns
        // out dead and retry. It must see at checkout that the idle connection is closed.
        let mut client = http1_connect(proxy.http).await;
        let post = Request::post("/second")
            .header("host", HOST)
            .header("content-length", "0")
            .body(Full::new(Bytes::new()))
            .unwrap();
        let answer = send(&mut client, post).await;
        assert_eq!(answer.status, 200, "{}", answer.text());
        assert_eq!(answer.text(), "second");

        assert_eq!(backend.accepted(), 2);
        let seen = backend.requests();
        assert_eq!(methods(&seen), ["GET", "POST"]);
        assert_eq!(seen[1].conn, 1);
        assert_eq!(seen[1].header("content-length"), Some("0"));
    })
    .await;
}

#[tokio::test]
async fn malformed_upstream_responses_are_502() {
    init_tracing();
    bounded(async {
        let backend = ScriptedBackend::start(|seen| {
            let reply: &[u8] = match seen.path.as_str() {
                "/status-2000" => b"HTTP/1.1 2000 Weird\r\n\r\n",
                "/garbage" => b"\x16\x03\x01\x00\xa5 this is not HTTP\r\n\r\n",
                "/two-lengths" => {
                    b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcd"
                }
                "/length-list" => b"HTTP/1.1 200 OK\r\nContent-Length: 3, 4\r\n\r\nabcd",
                _ => b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
            };
            vec![Step::Write(reply.to_vec()), Step::Close]
        })
        .await;
        let proxy = proxy_for(&backend).await;

        let bad = ["/status-2000", "/garbage", "/two-lengths", "/length-list"];
        for path in bad {
            let answer = get(proxy.http, HOST, path).await;
            assert_eq!(answer.status, 502, "{path}: {}", answer.text());
            assert!(answer.text().contains("502 Bad Gateway"), "{path}");
            // Nothing of the upstream's bytes leaks into the error page.
            assert!(!answer.text().contains("abcd"), "{path}");
        }
        // The backend itself is reachable, so the 502s came from parsing.
        assert_eq!(get(proxy.http, HOST, "/fine").await.status, 200);
        // An invalid answer is not a reason to send the request again.
        let mut expected = bad.to_vec();
        expected.push("/fine");
        assert_eq!(paths(&backend.requests()), expected);
    })
    .await;
}

#[tokio::test]
async fn upstream_closing_mid_body_does_not_give_a_complete_body() {
    init_tracing();
    bounded(async {
        let backend = ScriptedBackend::start(|seen| {
            let reply: &[u8] = if seen.path.starts_with("/length") {
                // Ten of the hundred announced bytes.
                b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n0123456789"
            } else {
                // One complete chunk, then nothing: no last chunk.
                b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\na\r\n0123456789\r\n"
            };
            let mut steps = vec![Step::Write(reply.to_vec())];
            if seen.path.ends_with("-late") {
                // Long enough for the proxy to have sent the head and the ten bytes on.
                steps.push(Step::Pause(Duration::from_millis(100)));
            }
            steps.push(Step::Close);
            steps
        })
        .await;
        let proxy = proxy_for(&backend).await;

        for path in ["/length", "/chunked"] {
            // The close is already there when the body is first read: the head may never
            // reach the client. Either way the client must be able to tell the response is
            // incomplete (a clean end would hide it).
            let outcome = fetch_until_error(proxy.http, path).await;
            assert!(outcome.errored, "{path}: ended cleanly: {outcome:?}");
            assert!(outcome.received.len() < 100, "{path}: {outcome:?}");
            assert!(
                b"0123456789".starts_with(&outcome.received),
                "{path}: {outcome:?}"
            );
            if let Some(status) = outcome.status {
                assert_eq!(status, 200, "{path}");
            }
        }
        for path in ["/length-late", "/chunked-late"] {
            // The close comes after the proxy has started the response: the client gets the
            // head and the ten bytes, then an error instead of an end.
            let outcome = fetch_until_error(proxy.http, path).await;
            assert_eq!(outcome.status, Some(StatusCode::OK), "{path}: {outcome:?}");
            assert_eq!(outcome.received, b"0123456789", "{path}");
            assert!(outcome.errored, "{path}: ended cleanly: {outcome:?}");
        }
        assert_eq!(
            paths(&backend.requests()),
            ["/length", "/chunked", "/length-late", "/chunked-late"]
        );
    })
    .await;
}

#[tokio::test]
async fn request_body_framing_reaches_the_backend() {
    init_tracing();
    bounded(async {
        let backend =
            ScriptedBackend::start(|_| vec![Step::Write(ok_response("ok"))]).await;
        let proxy = proxy_for(&backend).await;

        // A chunked body of unknown length, its second chunk sent later.
        let head = format!(
            "POST /chunked HTTP/1.1\r\nHost: {HOST}\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
        );
        let first = [head.as_bytes(), b"5\r\nhello\r\n"].concat();
        let answer = raw_exchange(proxy.http, &[&first, b"6\r\n world\r\n0\r\n\r\n"]).await;
        assert_eq!(answer.status, 200);

        let length = format!(
            "POST /length HTTP/1.1\r\nHost: {HOST}\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello"
        );
        assert_eq!(raw_exchange(proxy.http, &[length.as_bytes()]).await.status, 200);

        let empty = format!(
            "POST /empty HTTP/1.1\r\nHost: {HOST}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
        );
        assert_eq!(raw_exchange(proxy.http, &[empty.as_bytes()]).await.status, 200);

        let bodiless = format!("GET /none HTTP/1.1\r\nHost: {HOST}\r\nConnection: close\r\n\r\n");
        assert_eq!(raw_exchange(proxy.http, &[bodiless.as_bytes()]).await.status, 200);

        let seen = backend.requests();
        assert_eq!(paths(&seen), ["/chunked", "/length", "/empty", "/none"]);

        let chunked = &seen[0];
        assert_eq!(chunked.header_values("transfer-encoding"), ["chunked"]);
        assert!(chunked.header_values("content-length").is_empty());
        assert_eq!(chunked.body, b"hello world");
        assert!(
            chunked.wire_body.ends_with(b"0\r\n\r\n"),
            "{:?}",
            String::from_utf8_lossy(&chunked.wire_body)
        );

        let length = &seen[1];
        assert_eq!(length.header_values("content-length"), ["5"]);
        assert!(length.header_values("transfer-encoding").is_empty());
        assert_eq!(length.wire_body, b"hello");

        let empty = &seen[2];
        assert_eq!(empty.header_values("content-length"), ["0"]);
        assert!(empty.header_values("transfer-encoding").is_empty());
        assert!(empty.wire_body.is_empty());

        let none = &seen[3];
        assert!(none.header_values("content-length").is_empty());
        assert!(none.header_values("transfer-encoding").is_empty());
        assert!(none.wire_body.is_empty());

        // The client's `Connection: close` is hop-by-hop: the upstream connection lives on.
        assert_eq!(backend.accepted(), 1);
        assert!(seen.iter().all(|s| s.header_values("connection").is_empty()));
    })
    .await;
}

#[tokio::test]
async fn hop_by_hop_response_headers_dropped_and_connection_close_honoured() {
    init_tracing();
    bounded(async {
        let backend = ScriptedBackend::start(|seen| {
            let reply: &[u8] = if seen.path == "/first" {
                b"HTTP/1.1 200 OK\r\n\
                Connection: close, X-Private\r\n\
                X-Private: secret\r\n\
                Keep-Alive: timeout=5, max=100\r\n\
                X-Public: yes\r\n\
                Cache-Control: no-store\r\n\
                Content-Length: 2\r\n\
                \r\nok"
            } else {
                b"HTTP/1.1 200 OK\r\nX-Public: again\r\nContent-Length: 2\r\n\r\nok"
            };
            // The connection is deliberately left open: only the header says it is over, so
            // a proxy that ignored it would send the next request here.
            vec![Step::Write(reply.to_vec())]
        })
        .await;
        let proxy = proxy_for(&backend).await;
        let mut client = http1_connect(proxy.http).await;

        let first = Request::get("/first")
            .header("host", HOST)
            .body(Full::new(Bytes::new()))
            .unwrap();
        let answer = send(&mut client, first).await;
        assert_eq!(answer.status, 200);
        assert_eq!(&answer.body[..], b"ok");
        for hop in ["connection", "x-private", "keep-alive"] {
            assert!(
                answer.headers.get(hop).is_none(),
                "{hop} reached the client: {:?}",
                answer.headers
            );
        }
        assert_eq!(answer.headers["x-public"], "yes");
        assert_eq!(answer.headers["cache-control"], "no-store");

        // The upstream's close is not the client's: the client connection carries on.
        let second = Request::get("/second")
            .header("host", HOST)
            .body(Full::new(Bytes::new()))
            .unwrap();
        let answer = send(&mut client, second).await;
        assert_eq!(answer.status, 200);
        assert_eq!(answer.headers["x-public"], "again");

        assert_eq!(backend.accepted(), 2);
        let seen = backend.requests();
        assert_eq!(paths(&seen), ["/first", "/second"]);
        assert_eq!(seen[1].conn, 1, "the closed connection was reused");
    })
    .await;
}

#[tokio::test]
async fn early_answer_to_an_upload_is_relayed_without_waiting_for_the_body() {
    init_tracing();
    bounded(async {
        // A backend that answers 413 as soon as it has the head and then stops reading,
        // keeping the connection open: the proxy must notice the answer instead of pushing
        // the body into a full socket until a timeout.
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let backend = tokio::spawn(async move {
            let (mut stream, _) = listener.accept().await.unwrap();
            let mut head = Vec::new();
            let mut byte = [0u8; 1];
            while !head.ends_with(b"\r\n\r\n") {
                stream.read_exact(&mut byte).await.unwrap();
                head.push(byte[0]);
            }
            stream
                .write_all(b"HTTP/1.1 413 Payload Too Large\r\nContent-Length: 8\r\n\r\ntoo big!")
                .await
                .unwrap();
            tokio::time::sleep(Duration::from_secs(20)).await;
            head
        });
        let proxy = TestProxy::with_routes(&[Route::new(HOST, "wire", vec![addr])]).await;

        const BODY: usize = 64 << 20;
        let mut client = TcpStream::connect(proxy.http).await.unwrap();
        let head =
            format!("POST /upload HTTP/1.1\r\nHost: {HOST}\r\nContent-Length: {BODY}\r\n\r\n");
        client.write_all(head.as_bytes()).await.unwrap();
        let (mut reader, mut writer) = client.into_split();
        // The body is offered as fast as the proxy takes it; failures are expected once the
        // proxy stops reading.
        let uploader = tokio::spawn(async move {
            let chunk = vec![b'x'; 64 * 1024];
            for _ in 0..BODY / chunk.len() {
                if writer.write_all(&chunk).await.is_err() {
                    break;
                }
            }
        });
        let started = Instant::now();
        let mut answer = Vec::new();
        let mut buf = [0u8; 4096];
        while find(&answer, b"too big!").is_none() {
            let n = tokio::time::timeout(Duration::from_secs(5), reader.read(&mut buf))
                .await
                .expect("the 413 must arrive while the upload is still going")
                .unwrap();
            assert!(
                n > 0,
                "closed before the answer: {:?}",
                String::from_utf8_lossy(&answer)
            );
            answer.extend_from_slice(&buf[..n]);
        }
        let text = String::from_utf8_lossy(&answer);
        assert!(text.starts_with("HTTP/1.1 413"), "{text}");
        assert!(started.elapsed() < Duration::from_secs(5));
        uploader.abort();
        backend.abort();
    })
    .await;
}

// ---------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------

/// A proxy routing [`HOST`] to `backend`.
async fn proxy_for(backend: &ScriptedBackend) -> TestProxy {
    TestProxy::with_routes(&[Route::new(HOST, "wire", vec![backend.addr])]).await
}

/// `HTTP/1.1 200` with `body` and its length (keep-alive).
fn ok_response(body: &str) -> Vec<u8> {
    format!(
        "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// `len` bytes that are not all alike, so a lost or repeated piece is noticed.
fn pattern(len: usize) -> Vec<u8> {
    (0..len).map(|i| u8::try_from(i % 251).unwrap()).collect()
}

fn paths(seen: &[Seen]) -> Vec<&str> {
    seen.iter().map(|s| s.path.as_str()).collect()
}

fn methods(seen: &[Seen]) -> Vec<&str> {
    seen.iter().map(|s| s.method.as_str()).collect()
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

fn count(haystack: &[u8], needle: &[u8]) -> usize {
    haystack
        .windows(needle.len())
        .filter(|w| *w == needle)
        .count()
}

/// What the backend writes, in order, after reading a request.
enum Step {
    /// These bytes, in one write.
    Write(Vec<u8>),
    /// These bytes, `piece` at a time with `pause` between writes (each its own segment,
    /// as the backend's sockets have Nagle off).
    Trickle {
        bytes: Vec<u8>,
        piece: usize,
        pause: Duration,
    },
    /// Wait.
    Pause(Duration),
    /// Close the connection (without reading further).
    Close,
}

/// One request as the scripted backend read it off the wire.
#[derive(Debug, Clone)]
struct Seen {
    /// Index of the accepted connection it came on (0 for the first).
    conn: usize,
    method: String,
    path: String,
    /// Header names lower-cased, values as sent, in wire order.
    headers: Vec<(String, String)>,
    /// The body, de-chunked if it was chunked.
    body: Vec<u8>,
    /// The body exactly as it was on the wire (chunk framing included).
    wire_body: Vec<u8>,
}

impl Seen {
    /// The value of the single `name` header (`None` if absent; panics if repeated).
    fn header(&self, name: &str) -> Option<&str> {
        let values = self.header_values(name);
        assert!(values.len() <= 1, "{name} repeated: {values:?}");
        values.first().copied()
    }

    /// All values of `name`, in order.
    fn header_values(&self, name: &str) -> Vec<&str> {
        self.headers
            .iter()
            .filter(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
            .collect()
    }
}

type Script = dyn Fn(&Seen) -> Vec<Step> + Send + Sync;

/// A raw-TCP HTTP/1.1 backend on a loopback port that answers each request with the steps
/// its script returns; it records every request and counts accepted connections.
struct ScriptedBackend {
    addr: SocketAddr,
    accepted: Arc<AtomicUsize>,
    requests: Arc<Mutex<Vec<Seen>>>,
    task: JoinHandle<()>,
}

impl ScriptedBackend {
    async fn start(script: impl Fn(&Seen) -> Vec<Step> + Send + Sync + 'static) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let accepted = Arc::new(AtomicUsize::new(0));
        let requests = Arc::new(Mutex::new(Vec::new()));
        let script: Arc<Script> = Arc::new(script);
        let task = tokio::spawn({
            let accepted = Arc::clone(&accepted);
            let requests = Arc::clone(&requests);
            async move {
                while let Ok((stream, _)) = listener.accept().await {
                    let conn = accepted.fetch_add(1, Ordering::SeqCst);
                    stream.set_nodelay(true).unwrap();
                    tokio::spawn(serve_scripted(
                        stream,
                        conn,
                        Arc::clone(&script),
                        Arc::clone(&requests),
                    ));
                }
            }
        });
        ScriptedBackend {
            addr,
            accepted,
            requests,
            task,
        }
    }

    /// Connections accepted so far.
    fn accepted(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }

    /// Requests read so far, in arrival order.
    fn requests(&self) -> Vec<Seen> {
        self.requests.lock().unwrap().clone()
    }
}

impl Drop for ScriptedBackend {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Serves one backend connection: read a request, record it, play the script; repeat until
/// the peer closes or the script closes.
async fn serve_scripted(
    mut stream: TcpStream,
    conn: usize,
    script: Arc<Script>,
    requests: Arc<Mutex<Vec<Seen>>>,
) {
    let mut buf = Vec::new();
    while let Some(seen) = read_request(&mut stream, &mut buf, conn).await {
        requests.lock().unwrap().push(seen.clone());
        if seen.method == MALFORMED {
            return;
        }
        for step in script(&seen) {
            let written = match step {
                Step::Write(bytes) => stream.write_all(&bytes).await,
                Step::Trickle {
                    bytes,
                    piece,
                    pause,
                } => trickle(&mut stream, &bytes, piece, pause).await,
                Step::Pause(pause) => {
                    tokio::time::sleep(pause).await;
                    Ok(())
                }
                Step::Close => return,
            };
            if written.is_err() {
                return;
            }
        }
    }
}

async fn trickle(
    stream: &mut TcpStream,
    bytes: &[u8],
    piece: usize,
    pause: Duration,
) -> std::io::Result<()> {
    for (i, piece) in bytes.chunks(piece).enumerate() {
        if i > 0 {
            tokio::time::sleep(pause).await;
        }
        stream.write_all(piece).await?;
    }
    Ok(())
}

/// The method recorded for bytes that are not an HTTP request (then the connection ends).
const MALFORMED: &str = "<malformed>";

/// Reads one request (head, then a Content-Length or chunked body) off `stream`, using and
/// keeping leftover bytes in `buf`. `None` when the peer closed first.
async fn read_request(stream: &mut TcpStream, buf: &mut Vec<u8>, conn: usize) -> Option<Seen> {
    let head_len = loop {
        if let Some(at) = find(buf, b"\r\n\r\n") {
            break at + 4;
        }
        read_more(stream, buf).await?;
    };
    let mut slots = [httparse::EMPTY_HEADER; 64];
    let mut request = httparse::Request::new(&mut slots);
    if !matches!(
        request.parse(&buf[..head_len]),
        Ok(httparse::Status::Complete(_))
    ) {
        return Some(Seen {
            conn,
            method: MALFORMED.to_owned(),
            path: String::from_utf8_lossy(buf).into_owned(),
            headers: Vec::new(),
            body: Vec::new(),
            wire_body: Vec::new(),
        });
    }
    let method = request.method.unwrap_or_default().to_owned();
    let path = request.path.unwrap_or_default().to_owned();
    let headers: Vec<(String, String)> = request
        .headers
        .iter()
        .map(|h| {
            let value = String::from_utf8_lossy(h.value).into_owned();
            (h.name.to_ascii_lowercase(), value)
        })
        .collect();
    let value = |name: &str| {
        headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.trim().to_owned())
    };
    let chunked = value("transfer-encoding").is_some_and(|v| v.eq_ignore_ascii_case("chunked"));
    let length: usize = value("content-length").map_or(0, |v| v.parse().unwrap());

    let (body, wire_len) = if chunked {
        loop {
            if let Some(decoded) = decode_chunked(&buf[head_len..]) {
                break decoded;
            }
            read_more(stream, buf).await?;
        }
    } else {
        while buf.len() < head_len + length {
            read_more(stream, buf).await?;
        }
        (buf[head_len..head_len + length].to_vec(), length)
    };
    let wire_body = buf[head_len..head_len + wire_len].to_vec();
    buf.drain(..head_len + wire_len);
    Some(Seen {
        conn,
        method,
        path,
        headers,
        body,
        wire_body,
    })
}

/// Appends what the socket has; `None` at end of stream (or on an error).
async fn read_more(stream: &mut TcpStream, buf: &mut Vec<u8>) -> Option<()> {
    buf.reserve(16 * 1024);
    match stream.read_buf(buf).await {
        Ok(0) | Err(_) => None,
        Ok(_) => Some(()),
    }
}

/// Decodes a complete chunked body at the start of `wire`: the body and the bytes used, or
/// `None` if `wire` ends before the body does. Panics on invalid framing.
fn decode_chunked(wire: &[u8]) -> Option<(Vec<u8>, usize)> {
    let mut body = Vec::new();
    let mut at = 0;
    loop {
        let line_end = at + find(&wire[at..], b"\r\n")?;
        let line = std::str::from_utf8(&wire[at..line_end]).expect("chunk size line is text");
        let size = line.split(';').next().unwrap_or_default().trim();
        let size = usize::from_str_radix(size, 16).expect("chunk size is hexadecimal");
        at = line_end + 2;
        if size == 0 {
            // Trailer lines, up to an empty line.
            loop {
                let end = at + find(&wire[at..], b"\r\n")?;
                let last = end == at;
                at = end + 2;
                if last {
                    return Some((body, at));
                }
            }
        }
        if wire.len() < at + size + 2 {
            return None;
        }
        body.extend_from_slice(&wire[at..at + size]);
        assert_eq!(
            &wire[at + size..at + size + 2],
            b"\r\n",
            "CRLF after chunk data"
        );
        at += size + 2;
    }
}

/// A response read raw from the proxy.
#[derive(Debug)]
struct RawResponse {
    status: u16,
    /// Header names lower-cased.
    headers: Vec<(String, String)>,
    /// The body, de-chunked if it was chunked.
    body: Vec<u8>,
    /// Everything the proxy sent.
    wire: Vec<u8>,
}

impl RawResponse {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// Writes `pieces` to the proxy on a fresh connection, 50 ms apart, and reads everything
/// until the proxy closes (the request must say `Connection: close`); then parses the one
/// response.
async fn raw_exchange(addr: SocketAddr, pieces: &[&[u8]]) -> RawResponse {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    stream.set_nodelay(true).unwrap();
    for (i, piece) in pieces.iter().enumerate() {
        if i > 0 {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        stream.write_all(piece).await.unwrap();
    }
    let mut wire = Vec::new();
    stream.read_to_end(&mut wire).await.unwrap();

    let mut slots = [httparse::EMPTY_HEADER; 64];
    let mut response = httparse::Response::new(&mut slots);
    let parsed = response.parse(&wire).unwrap_or_else(|e| {
        panic!("{e}: {:?}", String::from_utf8_lossy(&wire));
    });
    let httparse::Status::Complete(head_len) = parsed else {
        panic!("incomplete head: {:?}", String::from_utf8_lossy(&wire));
    };
    let status = response.code.unwrap();
    let headers: Vec<(String, String)> = response
        .headers
        .iter()
        .map(|h| {
            let value = String::from_utf8_lossy(h.value).into_owned();
            (h.name.to_ascii_lowercase(), value)
        })
        .collect();
    let rest = &wire[head_len..];
    let chunked = headers
        .iter()
        .any(|(n, v)| n == "transfer-encoding" && v.eq_ignore_ascii_case("chunked"));
    let length = headers
        .iter()
        .find(|(n, _)| n == "content-length")
        .map(|(_, v)| v.trim().parse::<usize>().unwrap());
    let body = match (chunked, length) {
        (true, _) => decode_chunked(rest).expect("complete chunked body").0,
        (false, Some(length)) => {
            assert_eq!(rest.len(), length, "nothing after the body");
            rest.to_vec()
        }
        (false, None) => rest.to_vec(),
    };
    RawResponse {
        status,
        headers,
        body,
        wire,
    }
}

/// How a response whose body may break off went.
#[derive(Debug)]
struct Outcome {
    /// The status, if a head arrived.
    status: Option<StatusCode>,
    /// Body bytes received before the end or the error.
    received: Vec<u8>,
    /// Whether the exchange ended in an error rather than a clean end of body.
    errored: bool,
}

/// `GET path` through the proxy, reading the body frame by frame until it ends or fails.
async fn fetch_until_error(proxy: SocketAddr, path: &str) -> Outcome {
    let mut client = http1_connect(proxy).await;
    let request = Request::get(path)
        .header("host", HOST)
        .body(Full::new(Bytes::new()))
        .unwrap();
    client.ready().await.unwrap();
    let Ok(response) = client.send_request(request).await else {
        return Outcome {
            status: None,
            received: Vec::new(),
            errored: true,
        };
    };
    let status = Some(response.status());
    let mut body = response.into_body();
    let mut received = Vec::new();
    while let Some(frame) = body.frame().await {
        match frame {
            Ok(frame) => {
                if let Ok(data) = frame.into_data() {
                    received.extend_from_slice(&data);
                }
            }
            Err(_) => {
                return Outcome {
                    status,
                    received,
                    errored: true,
                };
            }
        }
    }
    Outcome {
        status,
        received,
        errored: false,
    }
}

//! Response compression through the real proxy, against a backend that writes its answers
//! byte for byte: each case mirrors a section of nginx's `ngx_http_gzip_module` docs (the
//! brotli module's and sluice's zstd follow the same rules), RFC 9110's `Accept-Encoding`
//! or ingress-nginx's ConfigMap keys. Bodies are decoded with the codecs' own crates and
//! compared byte for byte. Every case runs through each front end: the own HTTP/1.1 loop
//! (bodiless GET), hyper (POST with a body) and HTTP/2 (h2c GET).

mod common;

use std::io::Read as _;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use common::*;
use http::{HeaderMap, Request};
use http_body_util::{BodyExt as _, Full};
use hyper_util::rt::TokioIo;
use sluice_proxy::{Compression, ProxyArgs, parse_types};
use sluice_routing::{CompileOptions, Reason, compile};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;

const HOST: &str = "zip.example";

/// A JSON body well over every minimum length, compressible.
fn json_body(len: usize) -> Vec<u8> {
    let mut out = b"[".to_vec();
    let mut i = 0;
    while out.len() + 40 < len {
        out.extend_from_slice(format!("{{\"id\":{i},\"name\":\"item {i}\"}},").as_bytes());
        i += 1;
    }
    out.resize(len - 1, b' ');
    out.push(b']');
    out
}

/// What the backend answers for a path: (status, extra header lines, body, chunked).
fn answer_for(path: &str) -> (u16, String, Vec<u8>, bool) {
    let body = json_body(4000);
    let json = "content-type: application/json; charset=utf-8\r\n".to_owned();
    match path {
        "/json" => (200, json, body, false),
        "/chunked" => (200, json, body, true),
        "/small" => (200, json, json_body(100), false),
        "/png" => (200, "content-type: image/png\r\n".into(), body, false),
        "/html" => (200, "content-type: text/html\r\n".into(), body, false),
        "/untyped" => (200, String::new(), body, false),
        "/no-transform" => (
            200,
            json + "cache-control: public, no-transform\r\n",
            body,
            false,
        ),
        "/encoded" => {
            let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
            std::io::Write::write_all(&mut gz, &body).unwrap();
            let gz = gz.finish().unwrap();
            (200, json + "content-encoding: gzip\r\n", gz, false)
        }
        "/partial" => (
            206,
            json + "content-range: bytes 0-3999/8000\r\n",
            body,
            false,
        ),
        "/not-found" => (404, json, body, false),
        "/created" => (201, json, body, false),
        "/etag" => (200, json + "etag: \"v1\"\r\n", body, false),
        "/weak-etag" => (200, json + "etag: W/\"v1\"\r\n", body, false),
        "/vary" => (200, json + "vary: Origin\r\n", body, false),
        "/vary-ae" => (200, json + "vary: accept-encoding\r\n", body, false),
        "/ranges" => (200, json + "accept-ranges: bytes\r\n", body, false),
        _ => (404, String::new(), Vec::new(), false),
    }
}

/// A backend that writes raw HTTP/1.1 answers ([`answer_for`]), and on `/stream` a chunked
/// event stream: its first event, then (after `release`) its second and the end.
struct Backend {
    addr: SocketAddr,
    release: Arc<Notify>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Backend {
    fn drop(&mut self) {
        self.task.abort();
    }
}

const FIRST_EVENT: &[u8] = b"data: first\n\n";
const SECOND_EVENT: &[u8] = b"data: second\n\n";

async fn backend() -> Backend {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let release = Arc::new(Notify::new());
    let notify = Arc::clone(&release);
    let task = tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            let notify = Arc::clone(&notify);
            tokio::spawn(async move {
                let _ = serve_backend(stream, notify).await;
            });
        }
    });
    Backend {
        addr,
        release,
        task,
    }
}

async fn serve_backend(mut stream: TcpStream, release: Arc<Notify>) -> std::io::Result<()> {
    let mut buf = Vec::new();
    loop {
        // One request head (and a body, which these tests keep small and ignore).
        let end = loop {
            if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break end + 4;
            }
            let mut chunk = [0u8; 4096];
            let n = stream.read(&mut chunk).await?;
            if n == 0 {
                return Ok(());
            }
            buf.extend_from_slice(&chunk[..n]);
        };
        let head = String::from_utf8_lossy(&buf[..end]).into_owned();
        let length: usize = head
            .lines()
            .find_map(|l| {
                let (name, value) = l.split_once(':')?;
                name.eq_ignore_ascii_case("content-length")
                    .then(|| value.trim().parse().ok())?
            })
            .unwrap_or(0);
        while buf.len() < end + length {
            let mut chunk = [0u8; 4096];
            let n = stream.read(&mut chunk).await?;
            if n == 0 {
                return Ok(());
            }
            buf.extend_from_slice(&chunk[..n]);
        }
        buf.drain(..end + length);
        let path = head.split(' ').nth(1).unwrap_or("/").to_owned();
        if path == "/stream" {
            let mut out = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\
                transfer-encoding: chunked\r\n\r\n"
                .to_vec();
            out.extend_from_slice(format!("{:x}\r\n", FIRST_EVENT.len()).as_bytes());
            out.extend_from_slice(FIRST_EVENT);
            out.extend_from_slice(b"\r\n");
            stream.write_all(&out).await?;
            release.notified().await;
            let mut out = format!("{:x}\r\n", SECOND_EVENT.len()).into_bytes();
            out.extend_from_slice(SECOND_EVENT);
            out.extend_from_slice(b"\r\n0\r\n\r\n");
            stream.write_all(&out).await?;
            continue;
        }
        let (status, fields, body, chunked) = answer_for(&path);
        let head_only = head.starts_with("HEAD ");
        let mut out = format!("HTTP/1.1 {status} X\r\n{fields}").into_bytes();
        if chunked {
            out.extend_from_slice(b"transfer-encoding: chunked\r\n\r\n");
            for piece in body.chunks(1000) {
                out.extend_from_slice(format!("{:x}\r\n", piece.len()).as_bytes());
                out.extend_from_slice(piece);
                out.extend_from_slice(b"\r\n");
            }
            out.extend_from_slice(b"0\r\n\r\n");
        } else {
            out.extend_from_slice(format!("content-length: {}\r\n\r\n", body.len()).as_bytes());
            if !head_only {
                out.extend_from_slice(&body);
            }
        }
        stream.write_all(&out).await?;
    }
}

/// Every coding on, at their defaults otherwise.
fn all_on() -> ProxyArgs {
    ProxyArgs {
        compression: Compression {
            use_gzip: true,
            enable_brotli: true,
            enable_zstd: true,
            ..Compression::default()
        },
        ..ProxyArgs::loopback()
    }
}

fn gzip_only() -> ProxyArgs {
    ProxyArgs {
        compression: Compression {
            use_gzip: true,
            ..Compression::default()
        },
        ..ProxyArgs::loopback()
    }
}

async fn proxy_for(args: ProxyArgs, backend: &Backend, annotations: &[(&str, &str)]) -> TestProxy {
    let proxy = TestProxy::start(args).await;
    let mut route = Route::new(HOST, "zip", vec![backend.addr]);
    for (key, value) in annotations {
        route = route.with_annotation(key, value);
    }
    proxy.route(&[route]);
    proxy
}

/// The front ends: (label, method).
const FRONTS: [(&str, &str); 3] = [("own loop", "GET"), ("hyper", "POST"), ("h2c", "H2")];

/// `method path` with `headers` through `proxy`; `H2` is a GET over HTTP/2.
async fn fetch(proxy: &TestProxy, method: &str, path: &str, headers: &[(&str, &str)]) -> Answer {
    let (method, body, h2) = match method {
        "H2" => ("GET", Bytes::new(), true),
        "POST" => ("POST", Bytes::from_static(b"x=1"), false),
        other => (other, Bytes::new(), false),
    };
    let mut builder = Request::builder()
        .method(method)
        .uri(format!("http://{HOST}{path}"));
    if !h2 {
        builder = builder.header("host", HOST);
    }
    for (name, value) in headers {
        builder = builder.header(*name, *value);
    }
    let request = builder.body(Full::new(body)).unwrap();
    let stream = TcpStream::connect(proxy.http).await.unwrap();
    if h2 {
        let (mut sender, connection) = hyper::client::conn::http2::handshake(
            hyper_util::rt::TokioExecutor::new(),
            TokioIo::new(stream),
        )
        .await
        .expect("h2c handshake");
        let connection = tokio::spawn(connection);
        let response = sender.send_request(request).await.expect("h2 response");
        let answer = collect(response).await;
        connection.abort();
        return answer;
    }
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .expect("handshake");
    let connection = tokio::spawn(connection);
    let answer = send(&mut sender, request).await;
    connection.abort();
    answer
}

fn decode(encoding: &str, data: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    match encoding {
        "gzip" => {
            flate2::read::GzDecoder::new(data)
                .read_to_end(&mut out)
                .expect("valid gzip");
        }
        "br" => {
            brotli::Decompressor::new(data, 4096)
                .read_to_end(&mut out)
                .expect("valid brotli");
        }
        "zstd" => out = zstd::decode_all(data).expect("valid zstd"),
        other => panic!("unexpected coding {other:?}"),
    }
    out
}

fn header<'h>(headers: &'h HeaderMap, name: &str) -> Option<&'h str> {
    headers.get(name).map(|v| v.to_str().unwrap())
}

fn all<'h>(headers: &'h HeaderMap, name: &str) -> Vec<&'h str> {
    headers
        .get_all(name)
        .iter()
        .map(|v| v.to_str().unwrap())
        .collect()
}

/// Asserts `answer` is `coding`-compressed `original`, with the head a compressed response
/// gets.
fn assert_compressed(answer: &Answer, coding: &str, original: &[u8], front: &str) {
    assert_eq!(
        header(&answer.headers, "content-encoding"),
        Some(coding),
        "{front}: {:?}",
        answer.headers
    );
    assert!(
        !answer.headers.contains_key("content-length")
            || header(&answer.headers, "content-length")
                == Some(answer.body.len().to_string().as_str()),
        "{front}: the upstream's length is dropped"
    );
    assert!(
        all(&answer.headers, "vary")
            .iter()
            .any(|v| v.eq_ignore_ascii_case("accept-encoding")),
        "{front}: {:?}",
        answer.headers
    );
    assert!(
        answer.body.len() < original.len() / 2,
        "{front}: compressed"
    );
    assert_eq!(
        decode(coding, &answer.body),
        original,
        "{front}: round trip"
    );
}

fn assert_identity(answer: &Answer, original: &[u8], front: &str) {
    assert_eq!(
        header(&answer.headers, "content-encoding"),
        None,
        "{front}: {:?}",
        answer.headers
    );
    assert_eq!(answer.body, original, "{front}");
}

#[tokio::test]
async fn ngx_http_gzip_module_gzip_brotli_and_zstd_round_trip_on_every_front_end() {
    bounded(async {
        let backend = backend().await;
        let proxy = proxy_for(all_on(), &backend, &[]).await;
        let original = json_body(4000);
        for (front, method) in FRONTS {
            for (accept, coding) in [("gzip", "gzip"), ("br", "br"), ("zstd", "zstd")] {
                let answer = fetch(&proxy, method, "/json", &[("accept-encoding", accept)]).await;
                assert_eq!(answer.status, 200);
                assert_compressed(&answer, coding, &original, &format!("{front} {accept}"));
            }
            // Unknown length (chunked upstream): compressed too.
            let answer = fetch(&proxy, method, "/chunked", &[("accept-encoding", "gzip")]).await;
            assert_compressed(&answer, "gzip", &original, front);
            // 404 pages are compressed like 200s (nginx: 200, 403, 404).
            let answer = fetch(&proxy, method, "/not-found", &[("accept-encoding", "br")]).await;
            assert_eq!(answer.status, 404);
            assert_compressed(&answer, "br", &original, front);
        }
        // Counted per coding: per front end, gzip twice, br twice, zstd once.
        let (_, metrics) = admin_get(proxy.admin, "/metrics").await;
        for (encoding, count) in [("gzip", 6), ("br", 6), ("zstd", 3)] {
            let line =
                format!("sluice_compressed_responses_total{{encoding=\"{encoding}\"}} {count}");
            assert!(metrics.contains(&line), "{line} in {metrics}");
        }
    })
    .await;
}

#[tokio::test]
async fn rfc9110_accept_encoding_q_values_choose_the_coding() {
    bounded(async {
        let backend = backend().await;
        let proxy = proxy_for(all_on(), &backend, &[]).await;
        let original = json_body(4000);
        for (front, method) in FRONTS {
            for (accept, coding) in [
                ("gzip;q=0.5, br;q=0.9", Some("br")),
                ("br;q=0.2, gzip;q=0.8, zstd;q=0.5", Some("gzip")),
                ("br;q=0, gzip", Some("gzip")),
                // Ties: the server's preference, br then zstd then gzip.
                ("gzip, deflate, br, zstd", Some("br")),
                ("gzip, zstd", Some("zstd")),
                ("*", Some("br")),
                ("br;q=0, zstd;q=0, *;q=0.1", Some("gzip")),
                ("gzip;q=0", None),
                ("identity", None),
                ("deflate", None),
            ] {
                let answer = fetch(&proxy, method, "/json", &[("accept-encoding", accept)]).await;
                let label = format!("{front}: {accept}");
                match coding {
                    Some(coding) => assert_compressed(&answer, coding, &original, &label),
                    None => {
                        assert_identity(&answer, &original, &label);
                        // Still varies: another client would have got it compressed.
                        assert_eq!(all(&answer.headers, "vary"), ["Accept-Encoding"], "{label}");
                    }
                }
            }
            // Two Accept-Encoding fields are one list.
            let two = [
                ("accept-encoding", "gzip;q=0.1"),
                ("accept-encoding", "br;q=0.5"),
            ];
            let answer = fetch(&proxy, method, "/json", &two).await;
            assert_compressed(&answer, "br", &original, front);
            // No Accept-Encoding at all: identity.
            let answer = fetch(&proxy, method, "/json", &[]).await;
            assert_identity(&answer, &original, front);
        }
    })
    .await;
}

#[tokio::test]
async fn rfc9111_cache_control_no_transform_and_already_encoded_responses_pass_unchanged() {
    bounded(async {
        let backend = backend().await;
        let proxy = proxy_for(all_on(), &backend, &[]).await;
        let original = json_body(4000);
        let (_, _, encoded, _) = answer_for("/encoded");
        for (front, method) in FRONTS {
            let answer = fetch(
                &proxy,
                method,
                "/no-transform",
                &[("accept-encoding", "gzip, br")],
            )
            .await;
            assert_identity(&answer, &original, front);
            let answer = fetch(
                &proxy,
                method,
                "/encoded",
                &[("accept-encoding", "br, zstd")],
            )
            .await;
            assert_eq!(
                all(&answer.headers, "content-encoding"),
                ["gzip"],
                "{front}"
            );
            assert_eq!(answer.body, encoded, "{front}: not compressed twice");
        }
    })
    .await;
}

#[tokio::test]
async fn ngx_http_gzip_module_range_requests_206_and_other_statuses_are_not_compressed() {
    bounded(async {
        let backend = backend().await;
        let proxy = proxy_for(all_on(), &backend, &[]).await;
        let original = json_body(4000);
        for (front, method) in FRONTS {
            let headers = [("accept-encoding", "gzip"), ("range", "bytes=0-99")];
            // The backend ignored the Range (200): still not compressed, the client asked
            // for bytes of the identity body.
            let answer = fetch(&proxy, method, "/json", &headers).await;
            assert_identity(&answer, &original, front);
            let answer = fetch(&proxy, method, "/partial", &[("accept-encoding", "gzip")]).await;
            assert_eq!(answer.status, 206);
            assert_identity(&answer, &original, front);
            let answer = fetch(&proxy, method, "/created", &[("accept-encoding", "gzip")]).await;
            assert_eq!(answer.status, 201);
            assert_identity(&answer, &original, front);
        }
        // HEAD: no body, nothing changes in the head either.
        let mut sender = http1_connect(proxy.http).await;
        let request = Request::head("/json")
            .header("host", HOST)
            .header("accept-encoding", "gzip")
            .body(Full::new(Bytes::new()))
            .unwrap();
        let answer = send(&mut sender, request).await;
        assert_eq!(header(&answer.headers, "content-encoding"), None);
        assert_eq!(header(&answer.headers, "content-length"), Some("4000"));
    })
    .await;
}

#[tokio::test]
async fn ngx_http_gzip_module_gzip_min_length() {
    bounded(async {
        let backend = backend().await;
        let proxy = proxy_for(gzip_only(), &backend, &[]).await;
        let small = json_body(100);
        for (front, method) in FRONTS {
            // 100 bytes < gzip-min-length 256: sent as is (and no Vary: no client gets it
            // compressed).
            let answer = fetch(&proxy, method, "/small", &[("accept-encoding", "gzip")]).await;
            assert_identity(&answer, &small, front);
            assert!(all(&answer.headers, "vary").is_empty(), "{front}");
        }
        let lower = ProxyArgs {
            compression: Compression {
                use_gzip: true,
                gzip_min_length: 50,
                ..Compression::default()
            },
            ..ProxyArgs::loopback()
        };
        let proxy = proxy_for(lower, &backend, &[]).await;
        for (front, method) in FRONTS {
            let answer = fetch(&proxy, method, "/small", &[("accept-encoding", "gzip")]).await;
            assert_eq!(
                header(&answer.headers, "content-encoding"),
                Some("gzip"),
                "{front}"
            );
            assert_eq!(decode("gzip", &answer.body), small, "{front}");
        }
    })
    .await;
}

#[tokio::test]
async fn ngx_http_gzip_module_gzip_types() {
    bounded(async {
        let backend = backend().await;
        let proxy = proxy_for(gzip_only(), &backend, &[]).await;
        let original = json_body(4000);
        for (front, method) in FRONTS {
            let answer = fetch(&proxy, method, "/png", &[("accept-encoding", "gzip")]).await;
            assert_identity(&answer, &original, front);
            assert!(all(&answer.headers, "vary").is_empty(), "{front}");
            let answer = fetch(&proxy, method, "/untyped", &[("accept-encoding", "gzip")]).await;
            assert_identity(&answer, &original, front);
            // text/html is always compressed, as in nginx.
            let answer = fetch(&proxy, method, "/html", &[("accept-encoding", "gzip")]).await;
            assert_compressed(&answer, "gzip", &original, front);
        }
        let images = ProxyArgs {
            compression: Compression {
                use_gzip: true,
                gzip_types: parse_types("image/png").unwrap(),
                ..Compression::default()
            },
            ..ProxyArgs::loopback()
        };
        let proxy = proxy_for(images, &backend, &[]).await;
        for (front, method) in FRONTS {
            let answer = fetch(&proxy, method, "/png", &[("accept-encoding", "gzip")]).await;
            assert_compressed(&answer, "gzip", &original, front);
            let answer = fetch(&proxy, method, "/json", &[("accept-encoding", "gzip")]).await;
            assert_identity(&answer, &original, front);
        }
    })
    .await;
}

#[tokio::test]
async fn ngx_http_gzip_module_gzip_vary_appends_and_etags_are_weakened() {
    bounded(async {
        let backend = backend().await;
        let proxy = proxy_for(all_on(), &backend, &[]).await;
        for (front, method) in FRONTS {
            let ae = [("accept-encoding", "gzip")];
            let answer = fetch(&proxy, method, "/vary", &ae).await;
            let vary = all(&answer.headers, "vary").join(", ");
            assert_eq!(
                vary, "Origin, Accept-Encoding",
                "{front}: appended, not replaced"
            );
            let answer = fetch(&proxy, method, "/vary-ae", &ae).await;
            assert_eq!(
                all(&answer.headers, "vary"),
                ["accept-encoding"],
                "{front}: not twice"
            );
            let answer = fetch(&proxy, method, "/etag", &ae).await;
            assert_eq!(all(&answer.headers, "etag"), ["W/\"v1\""], "{front}");
            let answer = fetch(&proxy, method, "/weak-etag", &ae).await;
            assert_eq!(all(&answer.headers, "etag"), ["W/\"v1\""], "{front}");
            // Uncompressed, the strong tag stays.
            let answer = fetch(&proxy, method, "/etag", &[]).await;
            assert_eq!(all(&answer.headers, "etag"), ["\"v1\""], "{front}");
            let answer = fetch(&proxy, method, "/ranges", &ae).await;
            assert!(!answer.headers.contains_key("accept-ranges"), "{front}");
            let answer = fetch(&proxy, method, "/ranges", &[]).await;
            assert_eq!(
                header(&answer.headers, "accept-ranges"),
                Some("bytes"),
                "{front}"
            );
        }
    })
    .await;
}

/// Reads a response's body frames until `want` decodes from what came so far, within
/// `limit`: the compressed stream must deliver the first event before the upstream ends.
async fn first_event_arrives<B>(body: &mut B, coding: &str, front: &str) -> Vec<u8>
where
    B: http_body::Body<Data = Bytes> + Unpin,
    B::Error: std::fmt::Debug,
{
    let mut received = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let frame = tokio::time::timeout_at(deadline, body.frame())
            .await
            .unwrap_or_else(|_| panic!("{front}: the first event never arrived compressed"))
            .expect("a frame")
            .expect("frame ok");
        if let Ok(data) = frame.into_data() {
            received.extend_from_slice(&data);
        }
        // A prefix decodes as far as it goes (the stream is not finished).
        let mut partial = Vec::new();
        match coding {
            "gzip" => {
                let _ = flate2::read::GzDecoder::new(&received[..]).read_to_end(&mut partial);
            }
            "br" => {
                let _ = brotli::Decompressor::new(&received[..], 4096).read_to_end(&mut partial);
            }
            _ => {
                if let Ok(mut d) = zstd::stream::read::Decoder::new(&received[..]) {
                    let _ = d.read_to_end(&mut partial);
                }
            }
        }
        if partial == FIRST_EVENT {
            return received;
        }
        assert!(partial.len() <= FIRST_EVENT.len(), "{front}: {partial:?}");
    }
}

#[tokio::test]
async fn streaming_responses_reach_the_client_piece_by_piece_compressed() {
    bounded(async {
        let backend = backend().await;
        let mut args = all_on();
        args.compression.gzip_types = parse_types("text/event-stream").unwrap();
        args.compression.brotli_types = parse_types("text/event-stream").unwrap();
        args.compression.zstd_types = parse_types("text/event-stream").unwrap();
        let proxy = proxy_for(args, &backend, &[]).await;
        for (front, method) in FRONTS {
            for coding in ["gzip", "br", "zstd"] {
                let label = format!("{front} {coding}");
                let (method, body, h2) = match method {
                    "H2" => ("GET", Bytes::new(), true),
                    "POST" => ("POST", Bytes::from_static(b"x=1"), false),
                    other => (other, Bytes::new(), false),
                };
                let mut builder = Request::builder()
                    .method(method)
                    .uri(format!("http://{HOST}/stream"))
                    .header("accept-encoding", coding);
                if !h2 {
                    builder = builder.header("host", HOST);
                }
                let request = builder.body(Full::new(body)).unwrap();
                let stream = TcpStream::connect(proxy.http).await.unwrap();
                let (response, connection) = if h2 {
                    let (mut sender, connection) = hyper::client::conn::http2::handshake(
                        hyper_util::rt::TokioExecutor::new(),
                        TokioIo::new(stream),
                    )
                    .await
                    .unwrap();
                    let connection = tokio::spawn(async move {
                        let _ = connection.await;
                    });
                    let response = sender.send_request(request).await.unwrap();
                    (response, connection)
                } else {
                    let (mut sender, connection) =
                        hyper::client::conn::http1::handshake(TokioIo::new(stream))
                            .await
                            .unwrap();
                    let connection = tokio::spawn(async move {
                        let _ = connection.await;
                    });
                    let response = sender.send_request(request).await.unwrap();
                    (response, connection)
                };
                assert_eq!(
                    header(response.headers(), "content-encoding"),
                    Some(coding),
                    "{label}"
                );
                let mut body = response.into_body();
                // The backend holds its second event until released: the first must come
                // through compressed before that.
                let mut received = first_event_arrives(&mut body, coding, &label).await;
                backend.release.notify_one();
                let rest = tokio::time::timeout(Duration::from_secs(10), body.collect())
                    .await
                    .expect("the rest arrives")
                    .expect("body ok")
                    .to_bytes();
                received.extend_from_slice(&rest);
                let mut whole = FIRST_EVENT.to_vec();
                whole.extend_from_slice(SECOND_EVENT);
                assert_eq!(decode(coding, &received), whole, "{label}");
                connection.abort();
            }
        }
    })
    .await;
}

#[tokio::test]
async fn sluice_compression_annotation_overrides_the_global_setting_per_route() {
    bounded(async {
        let backend = backend().await;
        let original = json_body(4000);
        // Globally off, the Ingress says on: gzip at the global level.
        let proxy = proxy_for(
            ProxyArgs::loopback(),
            &backend,
            &[("sluice.dev/compression", "on")],
        )
        .await;
        for (front, method) in FRONTS {
            let answer = fetch(&proxy, method, "/json", &[("accept-encoding", "gzip, br")]).await;
            assert_compressed(&answer, "gzip", &original, front);
        }
        // Globally on, the Ingress says off.
        let proxy = proxy_for(all_on(), &backend, &[("sluice.dev/compression", "off")]).await;
        for (front, method) in FRONTS {
            let answer = fetch(&proxy, method, "/json", &[("accept-encoding", "gzip, br")]).await;
            assert_identity(&answer, &original, front);
            assert!(all(&answer.headers, "vary").is_empty(), "{front}");
        }
        // Globally off, no annotation: nothing.
        let proxy = proxy_for(ProxyArgs::loopback(), &backend, &[]).await;
        let answer = fetch(&proxy, "GET", "/json", &[("accept-encoding", "gzip")]).await;
        assert_identity(&answer, &original, "default");
    })
    .await;
}

#[tokio::test]
async fn sluice_compression_annotation_invalid_value_is_reported_and_the_global_setting_stays() {
    bounded(async {
        let backend = backend().await;
        let route = Route::new(HOST, "zip", vec![backend.addr])
            .with_annotation("sluice.dev/compression", "yes");
        let compiled = compile(
            &inputs(std::slice::from_ref(&route)),
            &CompileOptions::default(),
        );
        let problems: Vec<_> = compiled
            .diagnostics
            .iter()
            .filter(|d| d.field.contains("sluice.dev/compression"))
            .collect();
        assert_eq!(problems.len(), 1, "{:#?}", compiled.diagnostics);
        assert_eq!(problems[0].reason, Reason::InvalidAnnotation);
        assert_eq!(problems[0].object.kind, "Ingress");
        assert!(
            problems[0].message.contains("is not on or off"),
            "{}",
            problems[0].message
        );
        // The global setting (gzip on) applies.
        let proxy = TestProxy::start(gzip_only()).await;
        proxy.route(&[route]);
        let answer = fetch(&proxy, "GET", "/json", &[("accept-encoding", "gzip")]).await;
        assert_compressed(&answer, "gzip", &json_body(4000), "own loop");
    })
    .await;
}

#[tokio::test]
async fn ingress_nginx_gzip_disable_turns_gzip_off_for_matching_clients() {
    bounded(async {
        let backend = backend().await;
        let mut args = all_on();
        args.compression.gzip_disable = sluice_proxy::parse_user_agents("msie6").unwrap();
        let proxy = proxy_for(args, &backend, &[]).await;
        let original = json_body(4000);
        let old_ie = (
            "user-agent",
            "Mozilla/4.0 (compatible; MSIE 6.0; Windows NT 5.1)",
        );
        for (front, method) in FRONTS {
            let answer = fetch(
                &proxy,
                method,
                "/json",
                &[("accept-encoding", "gzip"), old_ie],
            )
            .await;
            assert_identity(&answer, &original, front);
            let answer = fetch(
                &proxy,
                method,
                "/json",
                &[("accept-encoding", "gzip, br"), old_ie],
            )
            .await;
            assert_compressed(&answer, "br", &original, front);
        }
    })
    .await;
}

#[tokio::test]
async fn sluice_compression_annotation_on_an_http_route_overrides_the_global_setting() {
    bounded(async {
        let backend = backend().await;
        let proxy = TestProxy::start(gzip_only()).await;
        // An Ingress for another host makes the Service `zip` and its endpoint.
        let mut inputs = inputs(&[Route::new("svc.example", "zip", vec![backend.addr])]);
        let route = |host: &str| {
            serde_json::json!({"parentRefs": [{"name": "gw"}], "hostnames": [host],
                "rules": [{"backendRefs": [{"name": "zip", "port": 80}]}]})
        };
        add_gateway(
            &mut inputs,
            serde_json::json!({"listeners": [{"name": "http", "port": 80, "protocol": "HTTP"}]}),
            &[
                ("off", route("off.example")),
                ("global", route("global.example")),
            ],
        );
        let mut off = (*inputs.http_routes[0]).clone();
        off.metadata.annotations = Some(
            [("sluice.dev/compression".to_owned(), "off".to_owned())]
                .into_iter()
                .collect(),
        );
        inputs.http_routes[0] = Arc::new(off);
        let compiled = compile(&inputs, &CompileOptions::default());
        assert!(
            compiled.diagnostics.is_empty(),
            "{:#?}",
            compiled.diagnostics
        );
        proxy.table.update(compiled.table, Duration::from_millis(1));
        let original = json_body(4000);
        for (front, method) in [("own loop", "GET"), ("hyper", "POST")] {
            let ask = |host: &'static str| {
                let proxy = &proxy;
                async move {
                    let mut sender = http1_connect(proxy.http).await;
                    let body = if method == "POST" { "x=1" } else { "" };
                    let request = Request::builder()
                        .method(method)
                        .uri("/json")
                        .header("host", host)
                        .header("accept-encoding", "gzip")
                        .body(Full::new(Bytes::from(body)))
                        .unwrap();
                    send(&mut sender, request).await
                }
            };
            assert_identity(&ask("off.example").await, &original, front);
            assert_compressed(&ask("global.example").await, "gzip", &original, front);
        }
    })
    .await;
}

/// An HTTP/2 (h2c) backend answering every request with [`json_body`] in two data frames
/// and a trailer `x-checksum: done`.
async fn h2c_backend() -> (SocketAddr, tokio::task::JoinHandle<()>) {
    use http_body::Frame;
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let task = tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            tokio::spawn(async move {
                let service = hyper::service::service_fn(|_request| async {
                    let body = json_body(4000);
                    let (first, second) = body.split_at(1500);
                    let mut trailers = HeaderMap::new();
                    trailers.insert("x-checksum", http::HeaderValue::from_static("done"));
                    let frames = vec![
                        Ok::<_, std::convert::Infallible>(Frame::data(Bytes::copy_from_slice(
                            first,
                        ))),
                        Ok(Frame::data(Bytes::copy_from_slice(second))),
                        Ok(Frame::trailers(trailers)),
                    ];
                    let body = http_body_util::StreamBody::new(futures::stream::iter(frames));
                    let response = http::Response::builder()
                        .header("content-type", "application/json")
                        .body(body)
                        .unwrap();
                    Ok::<_, std::convert::Infallible>(response)
                });
                let _ =
                    hyper::server::conn::http2::Builder::new(hyper_util::rt::TokioExecutor::new())
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
            });
        }
    });
    (addr, task)
}

#[tokio::test]
async fn an_http2_backend_response_is_compressed_and_keeps_its_trailers() {
    bounded(async {
        let (addr, task) = h2c_backend().await;
        let proxy = TestProxy::start(all_on()).await;
        // Plain HTTP/2 towards the backend (as `backend-protocol: GRPC` or appProtocol
        // `kubernetes.io/h2c` choose): the answer comes through hyper's client.
        proxy.route(&[Route::new(HOST, "h2", vec![addr])
            .with_annotation("nginx.ingress.kubernetes.io/backend-protocol", "GRPC")]);
        let stream = TcpStream::connect(proxy.http).await.unwrap();
        let (mut sender, connection) = hyper::client::conn::http2::handshake(
            hyper_util::rt::TokioExecutor::new(),
            TokioIo::new(stream),
        )
        .await
        .unwrap();
        let connection = tokio::spawn(connection);
        let request = Request::get(format!("http://{HOST}/json"))
            .header("accept-encoding", "zstd")
            .body(Full::new(Bytes::new()))
            .unwrap();
        let response = sender.send_request(request).await.unwrap();
        assert_eq!(header(response.headers(), "content-encoding"), Some("zstd"));
        let collected = response.into_body().collect().await.unwrap();
        let trailers = collected.trailers().cloned().expect("trailers kept");
        assert_eq!(header(&trailers, "x-checksum"), Some("done"));
        assert_eq!(decode("zstd", &collected.to_bytes()), json_body(4000));
        connection.abort();
        task.abort();
    })
    .await;
}

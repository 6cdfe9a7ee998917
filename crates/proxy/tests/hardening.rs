//! Hardening: the proxy on hostile or unusual input behaves as nginx and the RFCs say, on
//! both HTTP/1.1 front paths (the own loop for plain bodiless requests, hyper for the rest),
//! against real loopback sockets.
//!
//! * Response framing is never lost to a `Connection` header (RFC 9110 §7.6.1).
//! * Upgrades other than WebSocket are not relayed (RFC 9110 §7.8, §15.2.2).
//! * Loops are cut (RFC 9110 §7.6.3 `Via`, RFC 5842 508 Loop Detected).
//! * Timeouts: nginx `client_body_timeout`, `proxy_read_timeout`, `send_timeout`,
//!   `proxy_send_timeout`, and the idle timeout of upgraded connections.
//! * Strict request rules (RFC 9112 §2.2, §3.2, §5.2, §6.1, §6.3, §7.1; RFC 9110 §9.3.6;
//!   RFC 9113 §8.3.1) and response rules (RFC 9110 §15, RFC 9112 §4, §6.3).
//! * Forwarding headers (ingress-nginx `use-forwarded-headers` / `proxy-real-ip-cidr`), nginx
//!   `underscores_in_headers`, and ingress-nginx `use-proxy-protocol`.
//!
//! Most checks collect every mismatch (per front path and request shape) before failing, so
//! one run shows the whole picture. Timeouts are set to [`SHORT`]; upper bounds are loose
//! ([`MARGIN`]) because the machine is shared.

mod common;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use common::*;
use http::Request;
use http_body_util::Full;
use hyper_util::rt::{TokioExecutor, TokioIo};
use sluice_echo::EchoReport;
use sluice_proxy::{Http1Server, ProxyArgs};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio::task::{JoinHandle, JoinSet};
use tokio::time::Instant;
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;

/// The host every test routes to its backend.
const HOST: &str = "hard.example.com";

/// Both HTTP/1.1 front paths.
const SERVERS: [Http1Server; 2] = [Http1Server::Sluice, Http1Server::Hyper];

/// The timeouts under test.
const SHORT: Duration = Duration::from_millis(300);

/// Slack on top of a timeout before a test calls it missed (the machine is shared).
const MARGIN: Duration = Duration::from_secs(3);

/// How long any answer that should come promptly may take.
const ANSWER_WITHIN: Duration = Duration::from_secs(5);

/// The idle timeout of the busy-tunnel test (five times its 100 ms traffic interval).
const BUSY_IDLE: Duration = Duration::from_millis(500);

/// The longest a backend waits on one read before it gives up on the proxy.
const BACKEND_WAIT: Duration = Duration::from_secs(30);

/// Records a failure (formatted like `assert!`) when `cond` is false, and goes on.
macro_rules! expect {
    ($failures:expr, $cond:expr, $($fmt:tt)+) => {
        if !$cond {
            $failures.push(format!($($fmt)+));
        }
    };
}

// ---------------------------------------------------------------------------------------
// 1. Response framing
// ---------------------------------------------------------------------------------------

/// RFC 9110 §7.6.1: `Connection` may name hop-by-hop fields, but a message's own framing
/// (`Content-Length`, `Transfer-Encoding`) is not one of them; two responses in a row on one
/// keep-alive client connection must each arrive with correct framing.
#[tokio::test]
async fn rfc9110_7_6_1_connection_header_cannot_strip_response_framing() {
    init_tracing();
    bounded(async {
        let backend = RawBackend::start(|conn| {
            keep_alive(conn, |seen| match seen.path() {
                "/cl" => b"HTTP/1.1 200 OK\r\nConnection: Content-Length\r\n\
                          Content-Length: 5\r\n\r\nhello"
                    .to_vec(),
                _ => b"HTTP/1.1 200 OK\r\nConnection: Transfer-Encoding\r\n\
                       Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n"
                    .to_vec(),
            })
        })
        .await;
        let mut failures = Vec::new();
        for server in SERVERS {
            let proxy = proxy_to(server, backend.addr, |_| {}).await;
            for shape in SHAPES {
                let mut client = Client::connect(proxy.http).await;
                for path in ["/cl", "/chunked", "/cl", "/chunked"] {
                    let what = format!("{server:?} {shape:?} {path}");
                    client.send(request(shape, path, "")).await;
                    match client.response(ANSWER_WITHIN).await {
                        Ok(raw) => {
                            expect!(failures, raw.status == 200, "{what}: {}", raw.status_line);
                            expect!(
                                failures,
                                matches!(raw.framing, Framing::Length(5) | Framing::Chunked),
                                "{what}: the response lost its own framing: {:?} {:?}",
                                raw.framing,
                                raw.headers
                            );
                            expect!(
                                failures,
                                raw.body == b"hello",
                                "{what}: body {:?}",
                                raw.text()
                            );
                        }
                        Err(e) => {
                            failures.push(format!("{what}: {e}"));
                            break;
                        }
                    }
                }
            }
        }
        verdict(failures);
    })
    .await;
}

// ---------------------------------------------------------------------------------------
// 2. Upgrades
// ---------------------------------------------------------------------------------------

/// RFC 9110 §7.8 (and RFC 9113 §3.1, h2c upgrade removed): a proxy that does not speak a
/// protocol must not pass an upgrade to it on. The backend sees neither `Upgrade` nor an
/// `upgrade` token in `Connection` (nor `HTTP2-Settings`, which `Connection` names), and the
/// client gets the backend's ordinary answer on a connection that stays HTTP/1.1.
#[tokio::test]
async fn rfc9110_7_8_h2c_upgrade_is_not_forwarded() {
    init_tracing();
    bounded(async {
        let backend = echo("echo", "echo-0").await;
        let extra = "Connection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\n\
                     HTTP2-Settings: AAMAAABkAAQCAAAAAAIAAAAA\r\n";
        let mut failures = Vec::new();
        for server in SERVERS {
            let proxy = proxy_to(server, backend.addr(), |_| {}).await;
            for shape in SHAPES {
                let what = format!("{server:?} {shape:?}");
                let mut client = Client::connect(proxy.http).await;
                client.send(request(shape, "/h2c", extra)).await;
                let raw = match client.response(ANSWER_WITHIN).await {
                    Ok(raw) => raw,
                    Err(e) => {
                        failures.push(format!("{what}: {e}"));
                        continue;
                    }
                };
                if raw.status != 200 {
                    failures.push(format!("{what}: {} {}", raw.status_line, raw.text()));
                    continue;
                }
                let report = raw.report();
                let h = &report.headers;
                expect!(
                    failures,
                    !h.contains_key("upgrade"),
                    "{what}: backend saw upgrade: {h:?}"
                );
                expect!(
                    failures,
                    h.get("connection")
                        .is_none_or(|v| !v.to_ascii_lowercase().contains("upgrade")),
                    "{what}: backend saw connection {:?}",
                    h.get("connection")
                );
                expect!(
                    failures,
                    !h.contains_key("http2-settings"),
                    "{what}: HTTP2-Settings is named by Connection, so hop-by-hop: {h:?}"
                );
                // Still plain HTTP/1.1 on the client side.
                client.send(request(shape, "/after", "")).await;
                match client.response(ANSWER_WITHIN).await {
                    Ok(raw) if raw.status == 200 => {
                        expect!(
                            failures,
                            raw.report().path == "/after",
                            "{what}: {}",
                            raw.text()
                        );
                    }
                    Ok(raw) => {
                        failures.push(format!("{what}: second request: {}", raw.status_line))
                    }
                    Err(e) => failures.push(format!("{what}: second request: {e}")),
                }
            }
        }
        verdict(failures);
    })
    .await;
}

/// RFC 9110 §15.2.2 / §7.8: the proxy relays only WebSocket upgrades; an upstream 101 to an
/// unknown protocol (`Upgrade: foo`) is a bad gateway answer (502), and the client's
/// connection is not turned into a tunnel (none of its later bytes reach the backend raw).
#[tokio::test]
async fn rfc9110_15_2_2_upstream_101_to_an_unknown_protocol_is_502() {
    init_tracing();
    bounded(check_upstream_101_is_502(
        "Connection: Upgrade\r\nUpgrade: foo\r\n",
    ))
    .await;
}

/// RFC 9110 §15.2.2: a server must not switch protocols the client did not ask for; an
/// upstream 101 to a plain request is 502 too.
#[tokio::test]
async fn rfc9110_15_2_2_upstream_101_without_an_upgrade_request_is_502() {
    init_tracing();
    bounded(check_upstream_101_is_502("")).await;
}

async fn check_upstream_101_is_502(extra: &'static str) {
    let backend = RawBackend::start(|mut conn| async move {
        for _ in 0..100 {
            let Some(seen) = conn.read_head().await else {
                return;
            };
            if conn.read_body(&seen).await.is_none() {
                return conn.until_closed(BACKEND_WAIT).await;
            }
            if seen.path() == "/up" {
                let switch = b"HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\n\
                               Upgrade: foo\r\n\r\nTUNNEL-BYTES";
                if conn.write(switch).await {
                    conn.note("switched");
                    // Whatever arrives now would be the client's tunnelled bytes.
                    conn.until_closed(Duration::from_secs(10)).await;
                }
                return;
            }
            if !conn.write(&ok("fine")).await {
                return;
            }
        }
    })
    .await;
    let mut failures = Vec::new();
    for server in SERVERS {
        let proxy = proxy_to(server, backend.addr, |_| {}).await;
        let what = format!("{server:?}");
        let mut client = Client::connect(proxy.http).await;
        client.send(request(Shape::Get, "/up", extra)).await;
        match client.response(ANSWER_WITHIN).await {
            Ok(raw) => {
                expect!(
                    failures,
                    raw.status == 502,
                    "{what}: got {}",
                    raw.status_line
                );
                expect!(
                    failures,
                    !raw.text().contains("TUNNEL-BYTES"),
                    "{what}: upstream bytes after its 101 reached the client"
                );
            }
            Err(e) => failures.push(format!("{what}: {e}")),
        }
        // The client connection is HTTP still (or closed), never a tunnel.
        let secret = format!("GET /after HTTP/1.1\r\nHost: {HOST}\r\nX-Marker: SECRET\r\n\r\n");
        if client.send(&secret).await {
            match client.response(ANSWER_WITHIN).await {
                Ok(raw) => expect!(
                    failures,
                    raw.status == 200 && raw.body == b"fine",
                    "{what}: after the 502: {} {:?}",
                    raw.status_line,
                    raw.text()
                ),
                // Closing the connection is fine too.
                Err(Failure::Closed(_)) => {}
                Err(e) => failures.push(format!("{what}: after the 502: {e}")),
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
        let tunnelled: Vec<String> = backend
            .notes()
            .into_iter()
            .filter(|n| n.contains("SECRET"))
            .collect();
        expect!(
            failures,
            tunnelled.is_empty(),
            "{what}: client bytes reached the backend through a tunnel: {tunnelled:?}"
        );
    }
    verdict(failures);
}

/// WebSocket (RFC 6455 §4) is still relayed after all this, on both front paths.
#[tokio::test]
async fn websocket_upgrade_still_relayed_on_both_front_paths() {
    use futures::{SinkExt, StreamExt};
    use tokio_tungstenite::tungstenite::Message;
    init_tracing();
    bounded(async {
        let backend = echo("ws", "ws-0").await;
        for server in SERVERS {
            let proxy = proxy_to(server, backend.addr(), |_| {}).await;
            let stream = TcpStream::connect(proxy.http).await.unwrap();
            let (mut socket, response) =
                tokio_tungstenite::client_async(format!("ws://{HOST}/chat"), stream)
                    .await
                    .unwrap_or_else(|e| panic!("{server:?}: WebSocket handshake: {e}"));
            assert_eq!(response.status(), 101, "{server:?}");
            for i in 0..3 {
                let text = format!("hello {i}");
                socket.send(Message::text(text.clone())).await.unwrap();
                let echoed = tokio::time::timeout(ANSWER_WITHIN, socket.next())
                    .await
                    .expect("echo in time")
                    .expect("an answer")
                    .unwrap();
                assert_eq!(echoed.into_text().unwrap().as_str(), text, "{server:?}");
            }
            socket.close(None).await.unwrap();
        }
    })
    .await;
}

// ---------------------------------------------------------------------------------------
// 3. Loops
// ---------------------------------------------------------------------------------------

/// RFC 9110 §7.6.3: a proxy appends itself to `Via` on what it forwards (`sluice-…`, or
/// `--proxy-id`), after what the client sent.
#[tokio::test]
async fn rfc9110_7_6_3_via_names_this_proxy() {
    init_tracing();
    bounded(async {
        let backend = echo("echo", "echo-0").await;
        let mut failures = Vec::new();
        for server in SERVERS {
            let proxy = proxy_to(server, backend.addr(), |_| {}).await;
            let named = proxy_to(server, backend.addr(), |args| {
                args.proxy_id = Some("edge-7".to_owned());
            })
            .await;
            for shape in SHAPES {
                let what = format!("{server:?} {shape:?}");
                match exchange(proxy.http, &request(shape, "/via", "")).await {
                    Ok(raw) if raw.status == 200 => {
                        let via = raw.report().headers.get("via").cloned();
                        expect!(
                            failures,
                            via.as_deref().is_some_and(|v| v.contains("sluice")),
                            "{what}: via {via:?}"
                        );
                    }
                    Ok(raw) => failures.push(format!("{what}: {}", raw.status_line)),
                    Err(e) => failures.push(format!("{what}: {e}")),
                }
                let wire = request(shape, "/via", "Via: 1.1 cdn.example\r\n");
                match exchange(proxy.http, &wire).await {
                    Ok(raw) if raw.status == 200 => {
                        let via = raw.report().headers.get("via").cloned().unwrap_or_default();
                        expect!(
                            failures,
                            via.starts_with("1.1 cdn.example") && via.contains("sluice"),
                            "{what}: client's Via then ours, got {via:?}"
                        );
                    }
                    Ok(raw) => failures.push(format!("{what}: {}", raw.status_line)),
                    Err(e) => failures.push(format!("{what}: {e}")),
                }
                match exchange(named.http, &request(shape, "/via", "")).await {
                    Ok(raw) if raw.status == 200 => {
                        let via = raw.report().headers.get("via").cloned();
                        expect!(
                            failures,
                            via.as_deref().is_some_and(|v| v.contains("edge-7")),
                            "{what}: --proxy-id edge-7: via {via:?}"
                        );
                    }
                    Ok(raw) => failures.push(format!("{what}: {}", raw.status_line)),
                    Err(e) => failures.push(format!("{what}: {e}")),
                }
            }
        }
        verdict(failures);
    })
    .await;
}

/// RFC 5842 §7.2 (508 Loop Detected) via RFC 9110 §7.6.3 `Via`: a host routed to the proxy's
/// own listener is refused within a few hops, and the proxy keeps serving other hosts.
#[tokio::test]
async fn rfc5842_508_request_routed_to_the_proxy_itself() {
    init_tracing();
    bounded(async {
        let backend = echo("echo", "echo-0").await;
        let mut failures = Vec::new();
        for server in SERVERS {
            let proxy = start_proxy(server, |_| {}).await;
            proxy.route(&[
                Route::new("loop.test", "self", vec![proxy.http]),
                Route::new(HOST, "echo", vec![backend.addr()]),
            ]);
            for shape in SHAPES {
                let what = format!("{server:?} {shape:?}");
                let started = Instant::now();
                let wire = request_for("loop.test", shape, "/loop", "Connection: close\r\n");
                match exchange(proxy.http, &wire).await {
                    Ok(raw) => expect!(
                        failures,
                        raw.status == 508 || raw.status == 502,
                        "{what}: got {} after {:?}",
                        raw.status_line,
                        started.elapsed()
                    ),
                    Err(e) => failures.push(format!("{what}: {e} after {:?}", started.elapsed())),
                }
                // Still healthy.
                match exchange(proxy.http, &request(shape, "/ok", "Connection: close\r\n")).await {
                    Ok(raw) => expect!(
                        failures,
                        raw.status == 200,
                        "{what}: after the loop: {}",
                        raw.status_line
                    ),
                    Err(e) => failures.push(format!("{what}: after the loop: {e}")),
                }
            }
        }
        verdict(failures);
    })
    .await;
}

/// RFC 5842 §7.2 / RFC 9110 §7.6.3: two proxies (distinct ids) routing a host to each other
/// cut the ping-pong with 508 (or 502) in bounded time.
#[tokio::test]
async fn rfc5842_508_two_proxies_routing_to_each_other() {
    init_tracing();
    bounded(async {
        let backend = echo("echo", "echo-0").await;
        let mut failures = Vec::new();
        for server in SERVERS {
            let a = start_proxy(server, |_| {}).await;
            let b = start_proxy(server, |_| {}).await;
            a.route(&[
                Route::new("pingpong.test", "b", vec![b.http]),
                Route::new(HOST, "echo", vec![backend.addr()]),
            ]);
            b.route(&[Route::new("pingpong.test", "a", vec![a.http])]);
            for shape in SHAPES {
                let what = format!("{server:?} {shape:?}");
                let started = Instant::now();
                let wire = request_for("pingpong.test", shape, "/pp", "Connection: close\r\n");
                match exchange(a.http, &wire).await {
                    Ok(raw) => expect!(
                        failures,
                        raw.status == 508 || raw.status == 502,
                        "{what}: got {} after {:?}",
                        raw.status_line,
                        started.elapsed()
                    ),
                    Err(e) => failures.push(format!("{what}: {e} after {:?}", started.elapsed())),
                }
                match exchange(a.http, &request(shape, "/ok", "Connection: close\r\n")).await {
                    Ok(raw) => expect!(
                        failures,
                        raw.status == 200,
                        "{what}: after the loop: {}",
                        raw.status_line
                    ),
                    Err(e) => failures.push(format!("{what}: after the loop: {e}")),
                }
            }
        }
        verdict(failures);
    })
    .await;
}

// ---------------------------------------------------------------------------------------
// 4. Timeouts
// ---------------------------------------------------------------------------------------

/// nginx `client_body_timeout`: a request body that stops arriving (Content-Length or
/// chunked) gets 408, and both the client and the upstream connection are closed.
#[tokio::test]
async fn client_body_timeout_stalled_upload_gets_408_and_closes_both_sides() {
    init_tracing();
    bounded(async {
        let backend = RawBackend::start(|mut conn| async move {
            if conn.read_head().await.is_some() {
                conn.note("head");
                // Reads (and drops) the body as it comes, until the proxy closes.
                conn.until_closed(BACKEND_WAIT).await;
            }
        })
        .await;
        let stalls = [
            ("length", "Content-Length: 100\r\n\r\n0123456789"),
            (
                "chunked",
                "Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n",
            ),
        ];
        let mut failures = Vec::new();
        for server in SERVERS {
            let proxy = proxy_to(server, backend.addr, |args| {
                args.client_body_timeout = SHORT;
            })
            .await;
            for (name, tail) in stalls {
                let what = format!("{server:?} {name}");
                let mut client = Client::connect(proxy.http).await;
                let started = Instant::now();
                client
                    .send(format!("POST /upload HTTP/1.1\r\nHost: {HOST}\r\n{tail}"))
                    .await;
                match client.response(SHORT + MARGIN).await {
                    Ok(raw) => {
                        expect!(
                            failures,
                            raw.status == 408,
                            "{what}: got {}",
                            raw.status_line
                        );
                        expect!(
                            failures,
                            started.elapsed() >= SHORT / 2,
                            "{what}: answered after only {:?}",
                            started.elapsed()
                        );
                    }
                    Err(e) => failures.push(format!("{what}: no 408: {e}")),
                }
                expect!(
                    failures,
                    client.closed_within(MARGIN).await.is_some(),
                    "{what}: client connection still open"
                );
                expect_backend_closed(&mut failures, &what, &backend, MARGIN).await;
            }
        }
        verdict(failures);
    })
    .await;
}

/// nginx `proxy_read_timeout` (`--upstream-read-timeout`): an upstream that stops in the
/// middle of its body has the client connection closed before the announced length arrives
/// (so the client can tell), and its own connection closed.
#[tokio::test]
async fn proxy_read_timeout_stalled_response_body_closes_both_sides() {
    init_tracing();
    bounded(async {
        let backend = RawBackend::start(|mut conn| async move {
            let Some(seen) = conn.read_head().await else {
                return;
            };
            if conn.read_body(&seen).await.is_none() {
                return;
            }
            let head = b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n0123456789";
            if conn.write(head).await {
                conn.until_closed(BACKEND_WAIT).await;
            }
        })
        .await;
        let mut failures = Vec::new();
        for server in SERVERS {
            let proxy = proxy_to(server, backend.addr, |args| {
                args.upstream_read_timeout = SHORT;
            })
            .await;
            for shape in SHAPES {
                let what = format!("{server:?} {shape:?}");
                let mut client = Client::connect(proxy.http).await;
                let started = Instant::now();
                client.send(request(shape, "/stall", "")).await;
                match client.closed_within(SHORT + MARGIN).await {
                    None => failures.push(format!(
                        "{what}: client connection still open after {:?}",
                        started.elapsed()
                    )),
                    Some(drained) => {
                        let body = find(&drained.start, b"\r\n\r\n")
                            .map_or(0, |at| drained.total - (at + 4));
                        expect!(
                            failures,
                            body < 1000,
                            "{what}: all 1000 bytes arrived: {:?}",
                            lossy(&drained.start)
                        );
                        expect!(
                            failures,
                            drained.start.is_empty() || drained.start.starts_with(b"HTTP/1.1 200"),
                            "{what}: {:?}",
                            lossy(&drained.start)
                        );
                    }
                }
                expect_backend_closed(&mut failures, &what, &backend, MARGIN).await;
            }
        }
        verdict(failures);
    })
    .await;
}

/// nginx `client_body_timeout` is "a period between two successive read operations, not
/// for the transmission of the whole request body": an upload trickling 10 bytes every
/// 100 ms for a second (over three timeouts in all) goes through.
#[tokio::test]
async fn client_body_timeout_is_between_reads_not_for_the_whole_body() {
    init_tracing();
    bounded(async {
        let backend = echo("echo", "echo-0").await;
        let mut failures = Vec::new();
        for server in SERVERS {
            let proxy = proxy_to(server, backend.addr(), |args| {
                args.client_body_timeout = SHORT;
            })
            .await;
            for chunked in [false, true] {
                let what = format!("{server:?} chunked={chunked}");
                let mut client = Client::connect(proxy.http).await;
                let framing = if chunked {
                    "Transfer-Encoding: chunked"
                } else {
                    "Content-Length: 100"
                };
                client
                    .send(format!(
                        "POST /slow HTTP/1.1\r\nHost: {HOST}\r\n{framing}\r\n\r\n"
                    ))
                    .await;
                let started = Instant::now();
                for i in 0..10 {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    let piece = format!("{i:0>10}");
                    let piece = if chunked {
                        format!("a\r\n{piece}\r\n")
                    } else {
                        piece
                    };
                    if !client.send(piece).await {
                        break;
                    }
                }
                if chunked {
                    client.send("0\r\n\r\n").await;
                }
                match client.response(ANSWER_WITHIN).await {
                    Ok(raw) if raw.status == 200 => expect!(
                        failures,
                        raw.report().body_bytes == 100,
                        "{what}: backend got {} bytes",
                        raw.report().body_bytes
                    ),
                    Ok(raw) => failures.push(format!(
                        "{what}: {} after {:?}",
                        raw.status_line,
                        started.elapsed()
                    )),
                    Err(e) => failures.push(format!("{what}: {e} after {:?}", started.elapsed())),
                }
            }
        }
        verdict(failures);
    })
    .await;
}

/// nginx `proxy_read_timeout` is "only between two successive read operations, not for the
/// transmission of the whole response": a body trickling 10 bytes every 100 ms for a second
/// arrives whole.
#[tokio::test]
async fn proxy_read_timeout_is_between_reads_not_for_the_whole_body() {
    init_tracing();
    bounded(async {
        let backend = RawBackend::start(|mut conn| async move {
            for _ in 0..100 {
                let Some(seen) = conn.read_head().await else {
                    return;
                };
                if conn.read_body(&seen).await.is_none() {
                    return;
                }
                if !conn
                    .write(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n")
                    .await
                {
                    return;
                }
                for i in 0..10 {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    if !conn.write(format!("{i:0>10}").as_bytes()).await {
                        return;
                    }
                }
            }
        })
        .await;
        let mut failures = Vec::new();
        for server in SERVERS {
            let proxy = proxy_to(server, backend.addr, |args| {
                args.upstream_read_timeout = SHORT;
            })
            .await;
            for shape in SHAPES {
                let what = format!("{server:?} {shape:?}");
                let started = Instant::now();
                match exchange(proxy.http, &request(shape, "/slow", "")).await {
                    Ok(raw) => expect!(
                        failures,
                        raw.status == 200 && raw.body.len() == 100,
                        "{what}: {} with {} body bytes after {:?}",
                        raw.status_line,
                        raw.body.len(),
                        started.elapsed()
                    ),
                    Err(e) => failures.push(format!("{what}: {e} after {:?}", started.elapsed())),
                }
            }
        }
        verdict(failures);
    })
    .await;
}

/// nginx `send_timeout`: a client that stops taking the response (never reads) has its
/// connection closed, and the upstream connection goes with it, within the timeout plus a few
/// seconds, long before the 256 MiB body is through.
#[tokio::test]
async fn send_timeout_client_not_reading_closes_both_sides() {
    init_tracing();
    bounded(async {
        const TOTAL: usize = 256 << 20;
        let backend = RawBackend::start(|mut conn| async move {
            let Some(seen) = conn.read_head().await else {
                return;
            };
            if conn.read_body(&seen).await.is_none() {
                return;
            }
            let head = format!("HTTP/1.1 200 OK\r\nContent-Length: {TOTAL}\r\n\r\n");
            if !conn.write(head.as_bytes()).await {
                return;
            }
            let piece = vec![b'x'; 64 * 1024];
            let deadline = Instant::now() + Duration::from_secs(20);
            let mut written = 0;
            while written < TOTAL {
                match tokio::time::timeout_at(deadline, conn.stream.write_all(&piece)).await {
                    Ok(Ok(())) => written += piece.len(),
                    Ok(Err(e)) => {
                        return conn.end(format!("write failed after {written} bytes: {e}"));
                    }
                    Err(_) => {
                        return conn.end(format!("still writing after 20 s ({written} bytes)"));
                    }
                }
            }
            conn.end(format!("wrote all {written} bytes"));
        })
        .await;
        let mut failures = Vec::new();
        for server in SERVERS {
            let proxy = proxy_to(server, backend.addr, |args| {
                args.send_timeout = SHORT;
            })
            .await;
            for shape in SHAPES {
                let what = format!("{server:?} {shape:?}");
                let mut client = Client::connect(proxy.http).await;
                let started = Instant::now();
                let before = backend.requests().len();
                client.send(request(shape, "/big", "")).await;
                if !backend.requests_within(before + 1, ANSWER_WITHIN).await {
                    failures.push(format!("{what}: the request never reached the backend"));
                    continue;
                }
                // Not reading: the backend's writes must start failing.
                expect_backend_closed(&mut failures, &what, &backend, SHORT + MARGIN + MARGIN)
                    .await;
                let stopped = started.elapsed();
                match client.closed_within(MARGIN).await {
                    None => failures.push(format!("{what}: client connection still open")),
                    Some(drained) => expect!(
                        failures,
                        drained.total < TOTAL,
                        "{what}: the whole body went through ({} bytes)",
                        drained.total
                    ),
                }
                tracing::info!(?what, ?stopped, "send_timeout case done");
            }
        }
        verdict(failures);
    })
    .await;
}

/// `--websocket-idle-timeout` (nginx closes an idle upgraded connection after
/// `proxy_read_timeout`): a tunnel with no byte moving either way is closed on both sides.
#[tokio::test]
async fn websocket_idle_timeout_closes_a_silent_tunnel() {
    init_tracing();
    bounded(async {
        let backend = RawBackend::start(ws_backend).await;
        let mut failures = Vec::new();
        for server in SERVERS {
            let proxy = proxy_to(server, backend.addr, |args| {
                args.websocket_idle_timeout = SHORT;
            })
            .await;
            let what = format!("{server:?}");
            let mut client = Client::connect(proxy.http).await;
            client.send(upgrade_request("/idle")).await;
            match client.response(ANSWER_WITHIN).await {
                Ok(raw) if raw.status == 101 => {}
                Ok(raw) => {
                    failures.push(format!("{what}: no 101: {}", raw.status_line));
                    continue;
                }
                Err(e) => {
                    failures.push(format!("{what}: no 101: {e}"));
                    continue;
                }
            }
            let upgraded = Instant::now();
            match client.closed_within(SHORT + MARGIN).await {
                None => failures.push(format!("{what}: idle tunnel still open on the client side")),
                Some(_) => expect!(
                    failures,
                    upgraded.elapsed() >= SHORT / 2,
                    "{what}: closed after only {:?}",
                    upgraded.elapsed()
                ),
            }
            expect_backend_closed(&mut failures, &what, &backend, MARGIN).await;
        }
        verdict(failures);
    })
    .await;
}

/// `--websocket-idle-timeout` counts silence, not age: traffic every 100 ms (both ways, or
/// only from the backend) keeps a tunnel open for four timeouts; once it stops, the tunnel
/// closes (so the timeout was in force all along). The timeout is [`BUSY_IDLE`] here, so a
/// scheduling hiccup on a shared machine does not pass for silence.
#[tokio::test]
async fn websocket_idle_timeout_spares_a_busy_tunnel() {
    init_tracing();
    bounded(async {
        let backend = RawBackend::start(ws_backend).await;
        let mut failures = Vec::new();
        for server in SERVERS {
            let proxy = proxy_to(server, backend.addr, |args| {
                args.websocket_idle_timeout = BUSY_IDLE;
            })
            .await;
            for path in ["/echo", "/push"] {
                let what = format!("{server:?} {path}");
                let mut client = Client::connect(proxy.http).await;
                client.send(upgrade_request(path)).await;
                match client.response(ANSWER_WITHIN).await {
                    Ok(raw) if raw.status == 101 => {}
                    Ok(raw) => {
                        failures.push(format!("{what}: no 101: {}", raw.status_line));
                        continue;
                    }
                    Err(e) => {
                        failures.push(format!("{what}: no 101: {e}"));
                        continue;
                    }
                }
                let upgraded = Instant::now();
                let mut broken = false;
                for i in 0..PUSHES {
                    let expected = if path == "/echo" {
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        let ping = format!("ping{i:02}");
                        if !client.send(&ping).await {
                            failures.push(format!("{what}: closed at message {i}"));
                            broken = true;
                            break;
                        }
                        ping
                    } else {
                        format!("tick{i:02}")
                    };
                    match client
                        .read_exact(expected.len(), Duration::from_secs(1))
                        .await
                    {
                        Ok(got) => expect!(
                            failures,
                            got == expected.as_bytes(),
                            "{what}: got {:?}",
                            lossy(&got)
                        ),
                        Err(e) => {
                            failures.push(format!(
                                "{what}: message {i} after {:?}: {e}",
                                upgraded.elapsed()
                            ));
                            broken = true;
                            break;
                        }
                    }
                }
                if broken {
                    continue;
                }
                expect!(
                    failures,
                    upgraded.elapsed() >= BUSY_IDLE * 3,
                    "{what}: the traffic was too short to prove anything ({:?})",
                    upgraded.elapsed()
                );
                // Now silence: the timeout applies.
                expect!(
                    failures,
                    client.closed_within(BUSY_IDLE + MARGIN).await.is_some(),
                    "{what}: still open after the traffic stopped"
                );
                expect_backend_closed(&mut failures, &what, &backend, MARGIN).await;
            }
        }
        verdict(failures);
    })
    .await;
}

/// nginx `proxy_send_timeout` (`--upstream-send-timeout`): an upstream that reads the head
/// but never the body, while the client uploads 64 MiB, gets the client a 504 (or its
/// connection closed) within the timeout plus a few seconds; the upstream connection is
/// closed too.
#[tokio::test]
async fn proxy_send_timeout_backend_not_reading_body_gets_504() {
    init_tracing();
    bounded(async {
        const UPLOAD: usize = 64 << 20;
        let release = Arc::new(Semaphore::new(0));
        let backend = RawBackend::start({
            let release = Arc::clone(&release);
            move |mut conn| {
                let release = Arc::clone(&release);
                async move {
                    if conn.read_head().await.is_none() {
                        return;
                    }
                    conn.note("head read; the body is left unread");
                    let _ = tokio::time::timeout(Duration::from_secs(20), release.acquire()).await;
                    // Drain what the kernel buffered; the proxy must have closed behind it.
                    conn.until_closed(MARGIN * 2).await;
                }
            }
        })
        .await;
        let mut failures = Vec::new();
        for server in SERVERS {
            let proxy = proxy_to(server, backend.addr, |args| {
                args.upstream_send_timeout = SHORT;
            })
            .await;
            let what = format!("{server:?}");
            let mut client = Client::connect(proxy.http).await;
            let started = Instant::now();
            client
                .send(format!(
                    "POST /upload HTTP/1.1\r\nHost: {HOST}\r\nContent-Length: {UPLOAD}\r\n\r\n"
                ))
                .await;
            let mut writer = client.take_writer();
            let uploader = AbortOnDrop(tokio::spawn(async move {
                let piece = vec![b'u'; 64 * 1024];
                let mut sent = 0;
                while sent < UPLOAD && writer.write_all(&piece).await.is_ok() {
                    sent += piece.len();
                }
                sent
            }));
            match client.response(SHORT + MARGIN + MARGIN).await {
                Ok(raw) => expect!(
                    failures,
                    raw.status == 504,
                    "{what}: got {} after {:?}",
                    raw.status_line,
                    started.elapsed()
                ),
                Err(Failure::Closed(detail)) => {
                    tracing::info!(%what, %detail, "closed instead of 504 (allowed)");
                }
                Err(e) => failures.push(format!("{what}: after {:?}: {e}", started.elapsed())),
            }
            drop(uploader);
            release.add_permits(1000);
            expect_backend_closed(&mut failures, &what, &backend, MARGIN * 3).await;
        }
        verdict(failures);
    })
    .await;
}

// ---------------------------------------------------------------------------------------
// 5. Strict request rules
// ---------------------------------------------------------------------------------------

/// RFC 9112 §3.2: an HTTP/1.1 request without Host is answered 400.
#[tokio::test]
async fn rfc9112_3_2_missing_host_is_400() {
    init_tracing();
    bounded(expect_refused(both_shapes("no Host", ""), 400, true)).await;
}

/// RFC 9112 §3.2: a request with more than one Host field is answered 400.
#[tokio::test]
async fn rfc9112_3_2_two_host_fields_are_400() {
    init_tracing();
    let lines = format!("Host: {HOST}\r\nHost: {HOST}\r\n");
    let mut cases = both_shapes("two equal Hosts", &lines);
    let lines = format!("Host: {HOST}\r\nHost: other.example.com\r\n");
    cases.extend(both_shapes("two different Hosts", &lines));
    bounded(expect_refused(cases, 400, true)).await;
}

/// RFC 9112 §7.1: a chunked body whose framing is invalid is the client's error (400), not
/// the upstream's (502).
#[tokio::test]
async fn rfc9112_7_1_malformed_chunked_request_body_is_400_not_502() {
    init_tracing();
    let cases = vec![
        (
            "chunk size zz".to_owned(),
            format!("POST /c HTTP/1.1\r\nHost: {HOST}\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n"),
        ),
        (
            "chunk size zz, connection close".to_owned(),
            format!(
                "POST /c HTTP/1.1\r\nHost: {HOST}\r\nTransfer-Encoding: chunked\r\n\
                 Connection: close\r\n\r\nzz\r\n"
            ),
        ),
        (
            "valid chunk, then zz".to_owned(),
            format!(
                "POST /c HTTP/1.1\r\nHost: {HOST}\r\nTransfer-Encoding: chunked\r\n\r\n\
                 5\r\nhello\r\nzz\r\n"
            ),
        ),
    ];
    // The head may have gone upstream already (the body streams), so no "unseen" check.
    bounded(expect_refused(cases, 400, false)).await;
}

/// RFC 9110 §9.3.6: the proxy is not a forward proxy; CONNECT (authority-form, or with a
/// path) is 405 and never reaches a backend.
#[tokio::test]
async fn rfc9110_9_3_6_connect_is_405_and_never_forwarded() {
    init_tracing();
    let cases = vec![
        (
            "CONNECT example.com:443".to_owned(),
            "CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n".to_owned(),
        ),
        (
            "CONNECT routed host:443".to_owned(),
            format!("CONNECT {HOST}:443 HTTP/1.1\r\nHost: {HOST}:443\r\n\r\n"),
        ),
        (
            "CONNECT /x".to_owned(),
            format!("CONNECT /x HTTP/1.1\r\nHost: {HOST}\r\n\r\n"),
        ),
    ];
    bounded(expect_refused(cases, 405, true)).await;
}

/// RFC 9113 §8.3.1: an HTTP/2 request whose `host` field names another authority than
/// `:authority` is malformed (400). Matching or absent `host` is served (the control).
#[tokio::test]
async fn rfc9113_8_3_1_h2_authority_disagreeing_with_host_is_400() {
    init_tracing();
    bounded(async {
        let backend = echo("echo", "echo-0").await;
        let proxy = start_proxy(Http1Server::Sluice, |_| {}).await;
        proxy.route(&[
            Route::new("h2.example.com", "echo", vec![backend.addr()]),
            Route::new("other.example.com", "echo", vec![backend.addr()]),
        ]);
        let stream = TcpStream::connect(proxy.http).await.unwrap();
        let (mut sender, connection) =
            hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream))
                .await
                .expect("h2c handshake");
        let _connection = AbortOnDrop(tokio::spawn(async move {
            let _ = connection.await;
        }));
        let cases = [
            ("no host field", None, 200u16),
            ("matching host", Some("h2.example.com"), 200),
            ("disagreeing host", Some("other.example.com"), 400),
        ];
        let mut failures = Vec::new();
        for (label, host, want) in cases {
            for post in [false, true] {
                let what = format!("{label} {}", if post { "POST" } else { "GET" });
                let mut builder = Request::builder()
                    .method(if post { "POST" } else { "GET" })
                    .uri("http://h2.example.com/h2");
                if let Some(host) = host {
                    builder = builder.header("host", host);
                }
                let body = if post {
                    Bytes::from_static(b"hello")
                } else {
                    Bytes::new()
                };
                let request = builder.body(Full::new(body)).unwrap();
                if sender.ready().await.is_err() {
                    failures.push(format!("{what}: the h2 connection is gone"));
                    break;
                }
                match tokio::time::timeout(ANSWER_WITHIN, sender.send_request(request)).await {
                    Err(_) => failures.push(format!("{what}: no answer")),
                    Ok(Err(e)) => failures.push(format!("{what}: stream failed: {e}")),
                    Ok(Ok(response)) => expect!(
                        failures,
                        response.status() == want,
                        "{what}: got {}, want {want}",
                        response.status()
                    ),
                }
            }
        }
        verdict(failures);
    })
    .await;
}

/// RFC 9113 §8.3.1 compares `host` and `:authority` after normalisation (RFC 3986 §6.2.3:
/// the scheme's default port is the same as no port), so `host: h2.example.com:80` with
/// `:authority` `h2.example.com` on `http` does not disagree and is served. (Beyond the
/// brief: there "disagrees" is not defined further.)
#[tokio::test]
async fn rfc9113_8_3_1_h2_host_with_default_port_agrees_with_authority() {
    init_tracing();
    bounded(async {
        let backend = echo("echo", "echo-0").await;
        let proxy = start_proxy(Http1Server::Sluice, |_| {}).await;
        proxy.route(&[Route::new("h2.example.com", "echo", vec![backend.addr()])]);
        let stream = TcpStream::connect(proxy.http).await.unwrap();
        let (mut sender, connection) =
            hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream))
                .await
                .expect("h2c handshake");
        let _connection = AbortOnDrop(tokio::spawn(async move {
            let _ = connection.await;
        }));
        let request = Request::get("http://h2.example.com/h2")
            .header("host", "h2.example.com:80")
            .body(Full::new(Bytes::new()))
            .unwrap();
        sender.ready().await.expect("h2 connection ready");
        let response = tokio::time::timeout(ANSWER_WITHIN, sender.send_request(request))
            .await
            .expect("answered in time")
            .expect("stream completes");
        assert_eq!(response.status(), 200);
    })
    .await;
}

/// RFC 9112 §2.2 allows a recipient to accept a bare LF; this proxy does not (as before):
/// 400, and nothing reaches the backend.
#[tokio::test]
async fn rfc9112_2_2_bare_lf_request_is_400() {
    init_tracing();
    let cases = vec![
        (
            "GET all bare LF".to_owned(),
            format!("GET /lf HTTP/1.1\nHost: {HOST}\nConnection: close\n\n"),
        ),
        (
            "POST all bare LF".to_owned(),
            format!(
                "POST /lf HTTP/1.1\nHost: {HOST}\nContent-Length: 5\nConnection: close\n\nhello"
            ),
        ),
        (
            "GET one bare LF header line".to_owned(),
            format!("GET /lf HTTP/1.1\r\nHost: {HOST}\nX-A: 1\r\nConnection: close\r\n\r\n"),
        ),
        (
            "POST one bare LF header line".to_owned(),
            format!(
                "POST /lf HTTP/1.1\r\nHost: {HOST}\nContent-Length: 5\r\n\
                 Connection: close\r\n\r\nhello"
            ),
        ),
    ];
    // The own loop reads every HTTP/1.1 connection's first bytes; `--http1-server hyper`
    // keeps hyper's leniency (documented in docs/configuration.md, "Security and limits").
    bounded(expect_refused_by(&[Http1Server::Sluice], cases, 400, true)).await;
}

/// RFC 9112 §5.2: a server must reject obs-fold (a field line starting with whitespace) with
/// 400 or unfold it; this proxy rejects (as before), and nothing reaches the backend.
#[tokio::test]
async fn rfc9112_5_2_obs_fold_request_is_400() {
    init_tracing();
    let lines = format!("Host: {HOST}\r\nX-Folded: a\r\n b\r\n");
    let mut cases = both_shapes("obs-fold with space", &lines);
    let lines = format!("Host: {HOST}\r\nX-Folded: a\r\n\tb\r\n");
    cases.extend(both_shapes("obs-fold with tab", &lines));
    bounded(expect_refused(cases, 400, true)).await;
}

/// RFC 9112 §6.1: Content-Length together with Transfer-Encoding is a smuggling attempt;
/// 400 (as before), and nothing reaches the backend.
#[tokio::test]
async fn rfc9112_6_1_content_length_with_transfer_encoding_is_400() {
    init_tracing();
    let cases = vec![
        (
            "CL then TE".to_owned(),
            format!(
                "POST /te HTTP/1.1\r\nHost: {HOST}\r\nContent-Length: 5\r\n\
                 Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n"
            ),
        ),
        (
            "TE then CL".to_owned(),
            format!(
                "POST /te HTTP/1.1\r\nHost: {HOST}\r\nTransfer-Encoding: chunked\r\n\
                 Content-Length: 5\r\n\r\n5\r\nhello\r\n0\r\n\r\n"
            ),
        ),
    ];
    // hyper drops the length itself (the other choice §6.1 allows), so only the own loop,
    // which sees the raw head first, can refuse it.
    bounded(expect_refused_by(&[Http1Server::Sluice], cases, 400, true)).await;
}

/// RFC 9112 §6.3: differing Content-Length values are unrecoverable framing; 400 (as
/// before), and nothing reaches the backend.
#[tokio::test]
async fn rfc9112_6_3_two_different_content_lengths_are_400() {
    init_tracing();
    let cases = vec![
        (
            "two fields".to_owned(),
            format!(
                "POST /cl HTTP/1.1\r\nHost: {HOST}\r\nContent-Length: 5\r\n\
                 Content-Length: 6\r\n\r\nhello!"
            ),
        ),
        (
            "one list".to_owned(),
            format!("POST /cl HTTP/1.1\r\nHost: {HOST}\r\nContent-Length: 5, 6\r\n\r\nhello!"),
        ),
    ];
    bounded(expect_refused(cases, 400, true)).await;
}

// ---------------------------------------------------------------------------------------
// 6. Response rules
// ---------------------------------------------------------------------------------------

/// RFC 9110 §15.3.5 / RFC 9112 §6.3 rule 1: a 204 has no body whatever its fields say; the
/// client gets 204 without Content-Length or body, and the upstream's stray bytes do not
/// leak into the next response on the same client connection.
#[tokio::test]
async fn rfc9110_15_3_5_204_response_never_carries_a_body() {
    init_tracing();
    bounded(check_bodiless_status(204)).await;
}

/// RFC 9110 §15.4.5 / RFC 9112 §6.3 rule 1: a 304 has no body (it may keep Content-Length);
/// stray upstream bytes do not leak into the next response.
#[tokio::test]
async fn rfc9110_15_4_5_304_response_never_carries_a_body() {
    init_tracing();
    bounded(check_bodiless_status(304)).await;
}

async fn check_bodiless_status(status: u16) {
    let backend = RawBackend::start(move |conn| {
        keep_alive(conn, move |seen| match seen.path() {
            "/odd" => {
                let reason = if status == 204 {
                    "No Content"
                } else {
                    "Not Modified"
                };
                format!("HTTP/1.1 {status} {reason}\r\nContent-Length: 5\r\n\r\nhello").into_bytes()
            }
            _ => ok("next"),
        })
    })
    .await;
    let mut failures = Vec::new();
    for server in SERVERS {
        let proxy = proxy_to(server, backend.addr, |_| {}).await;
        for shape in SHAPES {
            let what = format!("{server:?} {shape:?}");
            let mut client = Client::connect(proxy.http).await;
            client.send(request(shape, "/odd", "")).await;
            match client.response(ANSWER_WITHIN).await {
                Ok(raw) => {
                    expect!(
                        failures,
                        raw.status == status,
                        "{what}: {}",
                        raw.status_line
                    );
                    if status == 204 {
                        expect!(
                            failures,
                            raw.header("content-length").is_none(),
                            "{what}: 204 with content-length {:?}",
                            raw.header("content-length")
                        );
                    }
                    expect!(
                        failures,
                        raw.header("transfer-encoding").is_none(),
                        "{what}: {status} with transfer-encoding"
                    );
                }
                Err(e) => {
                    failures.push(format!("{what}: {e}"));
                    continue;
                }
            }
            for round in 0..2 {
                client.send(request(shape, "/next", "")).await;
                match client.response(ANSWER_WITHIN).await {
                    Ok(raw) => expect!(
                        failures,
                        raw.status == 200 && raw.body == b"next",
                        "{what}: next request {round}: {} {:?}",
                        raw.status_line,
                        raw.text()
                    ),
                    Err(e) => {
                        failures.push(format!("{what}: next request {round}: {e}"));
                        break;
                    }
                }
            }
            let stray = client.stray(Duration::from_millis(200)).await;
            expect!(
                failures,
                stray.is_empty(),
                "{what}: stray bytes on the client connection: {:?}",
                lossy(&stray)
            );
        }
    }
    verdict(failures);
}

/// RFC 9110 §15 / RFC 9112 §4: a status code the proxy does not know is relayed with its
/// number (clients treat it as its class); the status line never shows a placeholder.
#[tokio::test]
async fn rfc9110_15_unknown_status_code_is_relayed_with_its_number() {
    init_tracing();
    bounded(async {
        let backend = RawBackend::start(|conn| {
            keep_alive(conn, |_| {
                b"HTTP/1.1 599 Whatever\r\nContent-Length: 2\r\n\r\nok".to_vec()
            })
        })
        .await;
        let mut failures = Vec::new();
        for server in SERVERS {
            let proxy = proxy_to(server, backend.addr, |_| {}).await;
            for shape in SHAPES {
                let what = format!("{server:?} {shape:?}");
                match exchange(proxy.http, &request(shape, "/599", "")).await {
                    Ok(raw) => {
                        expect!(
                            failures,
                            raw.status_line.starts_with("HTTP/1.1 599 ")
                                && !raw.status_line.contains("<none>"),
                            "{what}: status line {:?}",
                            raw.status_line
                        );
                        expect!(failures, raw.body == b"ok", "{what}: body {:?}", raw.text());
                    }
                    Err(e) => failures.push(format!("{what}: {e}")),
                }
            }
        }
        verdict(failures);
    })
    .await;
}

/// RFC 9112 §4: a response that does not start with an HTTP status line is not a response;
/// 502.
#[tokio::test]
async fn rfc9112_4_malformed_upstream_status_line_is_502() {
    init_tracing();
    bounded(async {
        let backend = RawBackend::start(|mut conn| async move {
            let Some(seen) = conn.read_head().await else {
                return;
            };
            if conn.read_body(&seen).await.is_none() {
                return;
            }
            if conn
                .write(b"HTTX/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
                .await
            {
                conn.until_closed(BACKEND_WAIT).await;
            }
        })
        .await;
        let mut failures = Vec::new();
        for server in SERVERS {
            let proxy = proxy_to(server, backend.addr, |_| {}).await;
            for shape in SHAPES {
                let what = format!("{server:?} {shape:?}");
                match exchange(proxy.http, &request(shape, "/httx", "")).await {
                    Ok(raw) => expect!(
                        failures,
                        raw.status == 502,
                        "{what}: got {} {:?}",
                        raw.status_line,
                        raw.text()
                    ),
                    Err(e) => failures.push(format!("{what}: {e}")),
                }
            }
        }
        verdict(failures);
    })
    .await;
}

// ---------------------------------------------------------------------------------------
// 7. Forwarding headers, underscores, PROXY protocol
// ---------------------------------------------------------------------------------------

/// Forwarding fields as an untrusted client might forge them.
const FORGED: &str = "X-Forwarded-For: 1.2.3.4\r\nX-Real-IP: 6.6.6.6\r\n\
                      X-Forwarded-Proto: https\r\nX-Forwarded-Host: evil\r\n\
                      X-Forwarded-Port: 1\r\nForwarded: for=1.2.3.4\r\n";

/// ingress-nginx without `use-forwarded-headers`: a client's `X-Forwarded-*`, `X-Real-IP`
/// and `Forwarded` are replaced by what the proxy itself knows.
#[tokio::test]
async fn forwarded_headers_from_untrusted_clients_are_replaced() {
    init_tracing();
    bounded(async {
        let backend = echo("echo", "echo-0").await;
        let mut failures = Vec::new();
        for server in SERVERS {
            let proxy = proxy_to(server, backend.addr(), |_| {}).await;
            let port = proxy.http.port().to_string();
            for shape in SHAPES {
                let what = format!("{server:?} {shape:?}");
                let Some(report) = report_of(
                    &mut failures,
                    &what,
                    proxy.http,
                    &request(shape, "/f", FORGED),
                )
                .await
                else {
                    continue;
                };
                let f = &mut failures;
                header_is(f, &what, &report, "x-forwarded-for", Some("127.0.0.1"));
                header_is(f, &what, &report, "x-real-ip", Some("127.0.0.1"));
                header_is(f, &what, &report, "x-forwarded-proto", Some("http"));
                header_is(f, &what, &report, "x-forwarded-host", Some(HOST));
                header_is(f, &what, &report, "x-forwarded-port", Some(port.as_str()));
                header_is(f, &what, &report, "forwarded", None);
            }
        }
        verdict(failures);
    })
    .await;
}

/// ingress-nginx `use-forwarded-headers` + `proxy-real-ip-cidr` (`--trusted-proxies`): from
/// a trusted peer the chain is extended and its other fields are believed.
#[tokio::test]
async fn forwarded_headers_from_trusted_proxies_are_extended() {
    init_tracing();
    bounded(async {
        let backend = echo("echo", "echo-0").await;
        let mut failures = Vec::new();
        for server in SERVERS {
            let proxy = proxy_to(server, backend.addr(), |args| {
                args.trusted_proxies = vec![sluice_proxy::parse_cidr("127.0.0.1/32").unwrap()];
            })
            .await;
            for shape in SHAPES {
                let what = format!("{server:?} {shape:?}");
                let Some(report) = report_of(
                    &mut failures,
                    &what,
                    proxy.http,
                    &request(shape, "/f", FORGED),
                )
                .await
                else {
                    continue;
                };
                let f = &mut failures;
                header_is(
                    f,
                    &what,
                    &report,
                    "x-forwarded-for",
                    Some("1.2.3.4, 127.0.0.1"),
                );
                header_is(f, &what, &report, "x-real-ip", Some("1.2.3.4"));
                header_is(f, &what, &report, "x-forwarded-proto", Some("https"));
                header_is(f, &what, &report, "x-forwarded-host", Some("evil"));
                header_is(f, &what, &report, "x-forwarded-port", Some("1"));
            }
        }
        verdict(failures);
    })
    .await;
}

/// nginx `underscores_in_headers off` (the default): a field whose name has `_` is dropped.
#[tokio::test]
async fn underscores_in_headers_off_drops_underscored_fields() {
    init_tracing();
    bounded(check_underscores(false)).await;
}

/// `--allow-underscore-headers` (nginx `underscores_in_headers on`): such fields go through.
#[tokio::test]
async fn underscores_in_headers_on_forwards_underscored_fields() {
    init_tracing();
    bounded(check_underscores(true)).await;
}

async fn check_underscores(allow: bool) {
    let backend = echo("echo", "echo-0").await;
    let mut failures = Vec::new();
    for server in SERVERS {
        let proxy = proxy_to(server, backend.addr(), |args| {
            args.allow_underscore_headers = allow;
        })
        .await;
        for shape in SHAPES {
            let what = format!("{server:?} {shape:?} allow={allow}");
            let wire = request(shape, "/u", "x_secret: 1\r\nX-Plain: 2\r\n");
            let Some(report) = report_of(&mut failures, &what, proxy.http, &wire).await else {
                continue;
            };
            header_is(
                &mut failures,
                &what,
                &report,
                "x_secret",
                allow.then_some("1"),
            );
            header_is(&mut failures, &what, &report, "x-plain", Some("2"));
        }
    }
    verdict(failures);
}

/// ingress-nginx `use-proxy-protocol` (`--proxy-protocol`): the address in a PROXY v1 header
/// is the client's, for X-Real-IP and X-Forwarded-For alike (whether the header arrives
/// with the request or in a segment of its own).
#[tokio::test]
async fn use_proxy_protocol_v1_header_supplies_the_client_address() {
    init_tracing();
    bounded(async {
        let backend = echo("echo", "echo-0").await;
        let preamble = "PROXY TCP4 203.0.113.7 10.0.0.1 51000 80\r\n";
        let mut failures = Vec::new();
        for server in SERVERS {
            let proxy = proxy_to(server, backend.addr(), |args| {
                args.proxy_protocol = true;
            })
            .await;
            for shape in SHAPES {
                for split in [false, true] {
                    let what = format!("{server:?} {shape:?} split={split}");
                    let wire = request(shape, "/pp", "Connection: close\r\n");
                    let mut client = Client::connect(proxy.http).await;
                    if split {
                        client.send(preamble).await;
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        client.send(&wire).await;
                    } else {
                        client.send(format!("{preamble}{wire}")).await;
                    }
                    let report = match client.response(ANSWER_WITHIN).await {
                        Ok(raw) if raw.status == 200 => raw.report(),
                        Ok(raw) => {
                            failures.push(format!("{what}: {} {}", raw.status_line, raw.text()));
                            continue;
                        }
                        Err(e) => {
                            failures.push(format!("{what}: {e}"));
                            continue;
                        }
                    };
                    header_is(
                        &mut failures,
                        &what,
                        &report,
                        "x-real-ip",
                        Some("203.0.113.7"),
                    );
                    let xff = Some("203.0.113.7");
                    header_is(&mut failures, &what, &report, "x-forwarded-for", xff);
                }
            }
        }
        verdict(failures);
    })
    .await;
}

/// ingress-nginx `use-proxy-protocol`: with it on, a connection that does not start with a
/// PROXY header is closed without an answer (or answered 400), and nothing is forwarded.
#[tokio::test]
async fn use_proxy_protocol_connection_without_header_is_refused() {
    init_tracing();
    bounded(async {
        let backend = RawBackend::start(|conn| keep_alive(conn, |_| ok("fine"))).await;
        let mut failures = Vec::new();
        for server in SERVERS {
            let proxy = proxy_to(server, backend.addr, |args| {
                args.proxy_protocol = true;
            })
            .await;
            for shape in SHAPES {
                let what = format!("{server:?} {shape:?}");
                let mut client = Client::connect(proxy.http).await;
                client
                    .send(request(shape, "/nopp", "Connection: close\r\n"))
                    .await;
                match client.closed_within(ANSWER_WITHIN).await {
                    None => failures.push(format!("{what}: connection still open, no answer")),
                    Some(drained) => expect!(
                        failures,
                        drained.total == 0 || drained.start.starts_with(b"HTTP/1.1 400"),
                        "{what}: answered {:?}",
                        lossy(&drained.start)
                    ),
                }
            }
        }
        let seen = backend.requests();
        expect!(failures, seen.is_empty(), "the backend saw {seen:?}");
        verdict(failures);
    })
    .await;
}

// ---------------------------------------------------------------------------------------
// Helpers: checks
// ---------------------------------------------------------------------------------------

/// Fails with every recorded failure.
fn verdict(failures: Vec<String>) {
    assert!(
        failures.is_empty(),
        "{} failure(s):\n  {}",
        failures.len(),
        failures.join("\n  ")
    );
}

/// Checks that the echo `report` shows `name` with value `want` (`None`: absent).
fn header_is(
    failures: &mut Vec<String>,
    what: &str,
    report: &EchoReport,
    name: &str,
    want: Option<&str>,
) {
    let got = report.headers.get(name).map(String::as_str);
    expect!(
        failures,
        got == want,
        "{what}: {name} is {got:?}, want {want:?}"
    );
}

/// `wire` on a fresh connection; the echo report of a 200, else a recorded failure.
async fn report_of(
    failures: &mut Vec<String>,
    what: &str,
    proxy: SocketAddr,
    wire: &str,
) -> Option<EchoReport> {
    match exchange(proxy, wire).await {
        Ok(raw) if raw.status == 200 => Some(raw.report()),
        Ok(raw) => {
            failures.push(format!("{what}: {} {}", raw.status_line, raw.text()));
            None
        }
        Err(e) => {
            failures.push(format!("{what}: {e}"));
            None
        }
    }
}

/// Waits until every connection the backend accepted has ended, and checks that the proxy
/// ended each (EOF or reset), not the backend's own patience.
async fn expect_backend_closed(
    failures: &mut Vec<String>,
    what: &str,
    backend: &RawBackend,
    within: Duration,
) {
    let all_ended = backend.all_ended_within(within).await;
    let ended = backend.ended_since_last_check();
    if !all_ended {
        failures.push(format!(
            "{what}: a backend connection is still open after {within:?} ({} accepted in all; \
             ended since the last check: {:?})",
            backend.accepted(),
            ended.iter().map(Ended::describe).collect::<Vec<_>>()
        ));
        return;
    }
    let not_by_proxy: Vec<String> = ended
        .iter()
        .filter(|e| !e.by_proxy())
        .map(Ended::describe)
        .collect();
    expect!(
        failures,
        not_by_proxy.is_empty(),
        "{what}: backend connections not closed by the proxy: {not_by_proxy:?}"
    );
}

/// Sends each `(label, wire)` on a fresh connection to a proxy on each front path; each
/// must be answered `status`. With `unseen`, the backend must not see any request meanwhile.
/// A valid request first proves the route works.
async fn expect_refused(cases: Vec<(String, String)>, status: u16, unseen: bool) {
    expect_refused_by(&SERVERS, cases, status, unseen).await;
}

/// [`expect_refused`] on the given front paths only.
async fn expect_refused_by(
    servers: &[Http1Server],
    cases: Vec<(String, String)>,
    status: u16,
    unseen: bool,
) {
    let backend = RawBackend::start(|conn| keep_alive(conn, |_| ok("fine"))).await;
    let mut failures = Vec::new();
    for &server in servers {
        let proxy = proxy_to(server, backend.addr, |_| {}).await;
        match exchange(proxy.http, &request(Shape::Get, "/control", "")).await {
            Ok(raw) => assert_eq!(raw.status, 200, "{server:?} control: {}", raw.status_line),
            Err(e) => panic!("{server:?} control: {e}"),
        }
        for (label, wire) in &cases {
            let what = format!("{server:?} {label}");
            let before = backend.requests().len();
            match exchange(proxy.http, wire).await {
                Ok(raw) => expect!(
                    failures,
                    raw.status == status,
                    "{what}: got {:?} {:?}, want {status}",
                    raw.status_line,
                    raw.text()
                ),
                Err(e) => failures.push(format!("{what}: want {status}: {e}")),
            }
            if unseen {
                let seen = backend.requests().split_off(before);
                expect!(
                    failures,
                    seen.is_empty(),
                    "{what}: the backend saw {:?}",
                    seen.iter()
                        .map(|s| format!(
                            "{} {} (content-length {:?}, transfer-encoding {:?})",
                            s.method,
                            s.target,
                            s.header("content-length"),
                            s.header("transfer-encoding")
                        ))
                        .collect::<Vec<_>>()
                );
            }
        }
    }
    verdict(failures);
}

// ---------------------------------------------------------------------------------------
// Helpers: proxies and requests
// ---------------------------------------------------------------------------------------

/// A proxy with `server` as its HTTP/1.1 front path and `tweak`ed arguments, no routes.
async fn start_proxy(server: Http1Server, tweak: impl FnOnce(&mut ProxyArgs)) -> TestProxy {
    let mut args = ProxyArgs::loopback();
    args.http1_server = server;
    tweak(&mut args);
    TestProxy::start(args).await
}

/// A proxy routing [`HOST`] to `backend`.
async fn proxy_to(
    server: Http1Server,
    backend: SocketAddr,
    tweak: impl FnOnce(&mut ProxyArgs),
) -> TestProxy {
    let proxy = start_proxy(server, tweak).await;
    proxy.route(&[Route::new(HOST, "hard", vec![backend])]);
    proxy
}

/// How a test request looks: which front path it takes under `--http1-server sluice`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Shape {
    /// Bodiless GET (the own loop).
    Get,
    /// POST with a 5-byte body (hyper).
    Post,
}

const SHAPES: [Shape; 2] = [Shape::Get, Shape::Post];

/// A request to [`HOST`] in `shape` with `extra` header lines (each CRLF-terminated).
fn request(shape: Shape, path: &str, extra: &str) -> String {
    request_for(HOST, shape, path, extra)
}

fn request_for(host: &str, shape: Shape, path: &str, extra: &str) -> String {
    match shape {
        Shape::Get => format!("GET {path} HTTP/1.1\r\nHost: {host}\r\n{extra}\r\n"),
        Shape::Post => {
            format!("POST {path} HTTP/1.1\r\nHost: {host}\r\n{extra}Content-Length: 5\r\n\r\nhello")
        }
    }
}

/// `lines` (the header section without `Connection`, CRLF-terminated lines) as a bodiless
/// GET and as a POST with a body.
fn both_shapes(label: &str, lines: &str) -> Vec<(String, String)> {
    vec![
        (
            format!("GET, {label}"),
            format!("GET /strict HTTP/1.1\r\n{lines}Connection: close\r\n\r\n"),
        ),
        (
            format!("POST, {label}"),
            format!(
                "POST /strict HTTP/1.1\r\n{lines}Content-Length: 5\r\nConnection: close\r\n\r\nhello"
            ),
        ),
    ]
}

/// A WebSocket upgrade request for `path`.
fn upgrade_request(path: &str) -> String {
    format!(
        "GET {path} HTTP/1.1\r\nHost: {HOST}\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\
         Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n"
    )
}

/// `200 OK` with `body` (keep-alive).
fn ok(body: &str) -> Vec<u8> {
    format!(
        "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// `wire` on a fresh connection; its one response.
async fn exchange(proxy: SocketAddr, wire: &str) -> Result<Raw, Failure> {
    let mut client = Client::connect(proxy).await;
    client.send(wire).await;
    client.response(ANSWER_WITHIN).await
}

fn lossy(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// Aborts the task when dropped.
struct AbortOnDrop<T>(JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

// ---------------------------------------------------------------------------------------
// Helpers: a raw client
// ---------------------------------------------------------------------------------------

/// How a response's body was delimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Framing {
    Length(usize),
    Chunked,
    /// No framing: the body ran until the proxy closed.
    UntilClose,
    /// No body by definition (1xx, 204, 304).
    None,
}

/// A response as read off the wire.
#[derive(Debug)]
struct Raw {
    status_line: String,
    status: u16,
    /// Lower-cased names, in order.
    headers: Vec<(String, String)>,
    framing: Framing,
    body: Vec<u8>,
}

impl Raw {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    fn text(&self) -> String {
        lossy(&self.body)
    }

    fn report(&self) -> EchoReport {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not an echo report ({e}): {:?}", self.text()))
    }
}

/// Why no (complete) response could be read.
#[derive(Debug)]
enum Failure {
    /// The proxy closed (or reset) the connection first.
    Closed(String),
    /// Nothing (more) arrived in time.
    TimedOut(String),
    /// The bytes are not a well-formed response.
    Invalid(String),
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::Closed(d) => write!(f, "closed: {d}"),
            Failure::TimedOut(d) => write!(f, "timed out: {d}"),
            Failure::Invalid(d) => write!(f, "invalid: {d}"),
        }
    }
}

/// What was left on a connection until the proxy closed it.
#[derive(Debug)]
struct Drained {
    /// Bytes read, in all.
    total: usize,
    /// The first of them (up to 64 KiB).
    start: Vec<u8>,
}

/// A raw HTTP/1.1 client connection to the proxy.
struct Client {
    read: OwnedReadHalf,
    write: Option<OwnedWriteHalf>,
    buf: Vec<u8>,
}

impl Client {
    async fn connect(addr: SocketAddr) -> Client {
        let stream = TcpStream::connect(addr)
            .await
            .expect("connect to the proxy");
        stream.set_nodelay(true).unwrap();
        let (read, write) = stream.into_split();
        Client {
            read,
            write: Some(write),
            buf: Vec::new(),
        }
    }

    /// Writes `bytes`; false if that failed (the proxy closed, or the writer was taken).
    async fn send(&mut self, bytes: impl AsRef<[u8]>) -> bool {
        match &mut self.write {
            Some(write) => write.write_all(bytes.as_ref()).await.is_ok(),
            None => false,
        }
    }

    /// The sending half, for a concurrent uploader.
    fn take_writer(&mut self) -> OwnedWriteHalf {
        self.write.take().expect("writer still here")
    }

    /// Reads more into `buf` (0 at end of stream).
    async fn fill(&mut self, deadline: Instant) -> Result<usize, Failure> {
        self.buf.reserve(64 * 1024);
        match tokio::time::timeout_at(deadline, self.read.read_buf(&mut self.buf)).await {
            Err(_) => Err(Failure::TimedOut(format!(
                "nothing more from the proxy; have {:?}",
                lossy(&self.buf[..self.buf.len().min(300)])
            ))),
            Ok(Err(e)) => Err(Failure::Closed(format!(
                "{e}; have {:?}",
                lossy(&self.buf[..self.buf.len().min(300)])
            ))),
            Ok(Ok(n)) => Ok(n),
        }
    }

    /// Reads one response (bytes beyond it stay buffered). The body must be framed by
    /// Content-Length or chunked, or run until the proxy closes.
    async fn response(&mut self, within: Duration) -> Result<Raw, Failure> {
        let deadline = Instant::now() + within;
        let (head_len, status, status_line, headers) = loop {
            if let Some(head) = parse_response_head(&self.buf)? {
                break head;
            }
            if self.fill(deadline).await? == 0 {
                return Err(Failure::Closed(format!(
                    "end of stream before a response head; have {:?}",
                    lossy(&self.buf)
                )));
            }
        };
        self.buf.drain(..head_len);
        let values = |name: &str| -> Vec<String> {
            headers
                .iter()
                .filter(|(n, _)| n == name)
                .map(|(_, v)| v.trim().to_owned())
                .collect()
        };
        let te = values("transfer-encoding");
        let cl = values("content-length");
        let bodiless = (100..200).contains(&status) || status == 204 || status == 304;
        let (framing, body) = if bodiless {
            (Framing::None, Vec::new())
        } else if !te.is_empty() {
            if !cl.is_empty() {
                return Err(Failure::Invalid(format!(
                    "both Content-Length and Transfer-Encoding: {headers:?}"
                )));
            }
            let joined = te.join(",").to_ascii_lowercase();
            if joined.rsplit(',').next().map(str::trim) != Some("chunked") {
                return Err(Failure::Invalid(format!("transfer-encoding {joined:?}")));
            }
            (Framing::Chunked, self.chunked_body(deadline).await?)
        } else if let Some(first) = cl.first() {
            if cl.iter().any(|v| v != first) {
                return Err(Failure::Invalid(format!("content-lengths {cl:?}")));
            }
            let length: usize = first
                .parse()
                .map_err(|_| Failure::Invalid(format!("content-length {first:?}")))?;
            while self.buf.len() < length {
                if self.fill(deadline).await? == 0 {
                    return Err(Failure::Closed(format!(
                        "after {} of {length} body bytes",
                        self.buf.len()
                    )));
                }
            }
            (Framing::Length(length), self.buf.drain(..length).collect())
        } else {
            loop {
                match self.fill(deadline).await {
                    Ok(0) => break,
                    Ok(_) => {}
                    Err(Failure::TimedOut(_)) => {
                        return Err(Failure::Invalid(format!(
                            "{status_line:?} has neither Content-Length nor chunked framing \
                             and the connection stayed open: {headers:?}"
                        )));
                    }
                    Err(e) => return Err(e),
                }
            }
            (Framing::UntilClose, std::mem::take(&mut self.buf))
        };
        Ok(Raw {
            status_line,
            status,
            headers,
            framing,
            body,
        })
    }

    async fn chunked_body(&mut self, deadline: Instant) -> Result<Vec<u8>, Failure> {
        let mut body = Vec::new();
        for _ in 0..100_000 {
            let end = self.line(deadline).await?;
            let line = lossy(&self.buf[..end]);
            let size_text = line.split(';').next().unwrap_or_default().trim();
            let size = usize::from_str_radix(size_text, 16)
                .map_err(|_| Failure::Invalid(format!("chunk size line {line:?}")))?;
            self.buf.drain(..end + 2);
            if size == 0 {
                for _ in 0..100 {
                    let end = self.line(deadline).await?;
                    self.buf.drain(..end + 2);
                    if end == 0 {
                        return Ok(body);
                    }
                }
                return Err(Failure::Invalid("endless trailer section".to_owned()));
            }
            while self.buf.len() < size + 2 {
                if self.fill(deadline).await? == 0 {
                    return Err(Failure::Closed("in the middle of a chunk".to_owned()));
                }
            }
            if !self.buf[size..].starts_with(b"\r\n") {
                return Err(Failure::Invalid("no CRLF after chunk data".to_owned()));
            }
            body.extend(self.buf.drain(..size));
            self.buf.drain(..2);
        }
        Err(Failure::Invalid("too many chunks".to_owned()))
    }

    /// The offset of the next CRLF in `buf`, reading as needed.
    async fn line(&mut self, deadline: Instant) -> Result<usize, Failure> {
        loop {
            if let Some(at) = find(&self.buf, b"\r\n") {
                return Ok(at);
            }
            if self.fill(deadline).await? == 0 {
                return Err(Failure::Closed(format!(
                    "in chunked framing; have {:?}",
                    lossy(&self.buf)
                )));
            }
        }
    }

    /// Exactly `n` bytes (raw, e.g. through a tunnel).
    async fn read_exact(&mut self, n: usize, within: Duration) -> Result<Vec<u8>, Failure> {
        let deadline = Instant::now() + within;
        while self.buf.len() < n {
            if self.fill(deadline).await? == 0 {
                return Err(Failure::Closed(format!(
                    "end of stream; have {:?}",
                    lossy(&self.buf)
                )));
            }
        }
        Ok(self.buf.drain(..n).collect())
    }

    /// Reads and drops everything until the proxy closes the connection (EOF or reset);
    /// `None` if it is still open after `within`.
    async fn closed_within(&mut self, within: Duration) -> Option<Drained> {
        let deadline = Instant::now() + within;
        let mut drained = Drained {
            total: 0,
            start: Vec::new(),
        };
        loop {
            let have = self.buf.len();
            drained.total += have;
            let keep = have.min((64 * 1024usize).saturating_sub(drained.start.len()));
            drained.start.extend_from_slice(&self.buf[..keep]);
            self.buf.clear();
            match self.fill(deadline).await {
                Ok(0) | Err(Failure::Closed(_)) => return Some(drained),
                Ok(_) => {}
                Err(_) => return None,
            }
        }
    }

    /// Bytes that arrive (or were left) after the last response, waiting up to `wait`.
    async fn stray(&mut self, wait: Duration) -> Vec<u8> {
        if self.buf.is_empty() {
            let _ = self.fill(Instant::now() + wait).await;
        }
        std::mem::take(&mut self.buf)
    }
}

type Head = (usize, u16, String, Vec<(String, String)>);

/// A complete response head at the start of `buf`: its length, status, status line and
/// fields; `None` if incomplete.
fn parse_response_head(buf: &[u8]) -> Result<Option<Head>, Failure> {
    let mut slots = [httparse::EMPTY_HEADER; 64];
    let mut response = httparse::Response::new(&mut slots);
    match response.parse(buf) {
        Ok(httparse::Status::Partial) => Ok(None),
        Ok(httparse::Status::Complete(len)) => {
            let line_end = find(buf, b"\n").unwrap_or(0);
            let status_line = lossy(&buf[..line_end]).trim_end().to_owned();
            let headers = response
                .headers
                .iter()
                .map(|h| (h.name.to_ascii_lowercase(), lossy(h.value)))
                .collect();
            Ok(Some((
                len,
                response.code.unwrap_or_default(),
                status_line,
                headers,
            )))
        }
        Err(e) => Err(Failure::Invalid(format!(
            "response head ({e}): {:?}",
            lossy(&buf[..buf.len().min(300)])
        ))),
    }
}

// ---------------------------------------------------------------------------------------
// Helpers: a raw backend
// ---------------------------------------------------------------------------------------

/// One request as a raw backend read it.
#[derive(Debug, Clone)]
struct Seen {
    method: String,
    target: String,
    /// Lower-cased names, values as sent, in order.
    headers: Vec<(String, String)>,
}

impl Seen {
    fn path(&self) -> &str {
        self.target.split('?').next().unwrap_or_default()
    }

    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// How a backend connection ended.
#[derive(Debug, Clone)]
struct Ended {
    conn: usize,
    /// Time since it was accepted.
    after: Duration,
    how: String,
}

impl Ended {
    fn describe(&self) -> String {
        format!("conn {} after {:?}: {}", self.conn, self.after, self.how)
    }

    /// Whether the proxy closed it (rather than the backend giving up or finishing).
    fn by_proxy(&self) -> bool {
        self.how == "eof" || self.how.starts_with("reset") || self.how.starts_with("write failed")
    }
}

#[derive(Debug, Default)]
struct Record {
    accepted: usize,
    requests: Vec<Seen>,
    ended: Vec<Ended>,
    /// How many of `ended` a check has looked at already.
    checked: usize,
    notes: Vec<String>,
}

type Log = Arc<Mutex<Record>>;

/// One accepted connection of a [`RawBackend`], with helpers that record what happens.
struct BackendConn {
    stream: TcpStream,
    buf: Vec<u8>,
    index: usize,
    accepted_at: Instant,
    log: Log,
    ended: bool,
}

impl BackendConn {
    /// Records how the connection ended (once).
    fn end(&mut self, how: impl Into<String>) {
        if !self.ended {
            self.ended = true;
            let ended = Ended {
                conn: self.index,
                after: self.accepted_at.elapsed(),
                how: how.into(),
            };
            self.log.lock().unwrap().ended.push(ended);
        }
    }

    fn note(&self, note: impl AsRef<str>) {
        let note = format!("conn {}: {}", self.index, note.as_ref());
        self.log.lock().unwrap().notes.push(note);
    }

    /// Reads more into `buf`; `false` at the end (recorded).
    async fn fill(&mut self) -> bool {
        self.buf.reserve(64 * 1024);
        match tokio::time::timeout(BACKEND_WAIT, self.stream.read_buf(&mut self.buf)).await {
            Err(_) => {
                self.end(format!("still open after {BACKEND_WAIT:?}"));
                false
            }
            Ok(Ok(0)) => {
                self.end("eof");
                false
            }
            Ok(Ok(_)) => true,
            Ok(Err(e)) => {
                self.end(format!("reset: {e}"));
                false
            }
        }
    }

    /// The next request head (recorded); `None` at the end or on garbage.
    async fn read_head(&mut self) -> Option<Seen> {
        let head_len = loop {
            if let Some(at) = find(&self.buf, b"\r\n\r\n") {
                break at + 4;
            }
            if !self.fill().await {
                if !self.buf.is_empty() {
                    self.note(format!("partial head {:?}", lossy(&self.buf)));
                }
                return None;
            }
        };
        let mut slots = [httparse::EMPTY_HEADER; 100];
        let mut request = httparse::Request::new(&mut slots);
        if !matches!(
            request.parse(&self.buf[..head_len]),
            Ok(httparse::Status::Complete(_))
        ) {
            self.note(format!("malformed head {:?}", lossy(&self.buf[..head_len])));
            self.end("backend gave up on a malformed head");
            return None;
        }
        let seen = Seen {
            method: request.method.unwrap_or_default().to_owned(),
            target: request.path.unwrap_or_default().to_owned(),
            headers: request
                .headers
                .iter()
                .map(|h| (h.name.to_ascii_lowercase(), lossy(h.value)))
                .collect(),
        };
        self.buf.drain(..head_len);
        self.log.lock().unwrap().requests.push(seen.clone());
        Some(seen)
    }

    /// The request's body (Content-Length or chunked); `None` at the end or on bad framing.
    async fn read_body(&mut self, seen: &Seen) -> Option<Vec<u8>> {
        let chunked = seen
            .header("transfer-encoding")
            .is_some_and(|v| v.to_ascii_lowercase().contains("chunked"));
        if chunked {
            for _ in 0..100_000 {
                match decode_chunked(&self.buf) {
                    Ok(Some((body, used))) => {
                        self.buf.drain(..used);
                        return Some(body);
                    }
                    Ok(None) => {
                        if !self.fill().await {
                            return None;
                        }
                    }
                    Err(bad) => {
                        self.note(format!("bad chunked body: {bad}"));
                        return None;
                    }
                }
            }
            return None;
        }
        let length: usize = seen
            .header("content-length")
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0);
        while self.buf.len() < length {
            if !self.fill().await {
                return None;
            }
        }
        Some(self.buf.drain(..length).collect())
    }

    /// Writes `bytes`; `false` (recorded) if that failed.
    async fn write(&mut self, bytes: &[u8]) -> bool {
        match tokio::time::timeout(BACKEND_WAIT, self.stream.write_all(bytes)).await {
            Ok(Ok(())) => true,
            Ok(Err(e)) => {
                self.end(format!("write failed: {e}"));
                false
            }
            Err(_) => {
                self.end(format!("write still blocked after {BACKEND_WAIT:?}"));
                false
            }
        }
    }

    /// Reads (and drops, noting the first pieces) until the proxy closes or `within` passes.
    async fn until_closed(&mut self, within: Duration) {
        let deadline = Instant::now() + within;
        let mut reads = 0;
        if !self.buf.is_empty() {
            self.note(format!(
                "read {:?}",
                lossy(&self.buf[..self.buf.len().min(200)])
            ));
        }
        loop {
            self.buf.clear();
            self.buf.reserve(64 * 1024);
            match tokio::time::timeout_at(deadline, self.stream.read_buf(&mut self.buf)).await {
                Err(_) => return self.end(format!("still open after {within:?}")),
                Ok(Ok(0)) => return self.end("eof"),
                Ok(Ok(n)) => {
                    reads += 1;
                    if reads <= 4 {
                        self.note(format!("read {:?}", lossy(&self.buf[..n.min(200)])));
                    }
                }
                Ok(Err(e)) => return self.end(format!("reset: {e}")),
            }
        }
    }

    /// Some bytes (`None` at the end, recorded).
    async fn read_some(&mut self) -> Option<Vec<u8>> {
        if self.buf.is_empty() && !self.fill().await {
            return None;
        }
        Some(std::mem::take(&mut self.buf))
    }
}

impl Drop for BackendConn {
    fn drop(&mut self) {
        self.end("the backend handler returned");
    }
}

/// Decodes a complete chunked body at the start of `wire`: the body and the bytes used;
/// `Ok(None)` if more is needed; `Err` on invalid framing.
fn decode_chunked(wire: &[u8]) -> Result<Option<(Vec<u8>, usize)>, String> {
    let mut body = Vec::new();
    let mut at = 0;
    for _ in 0..100_000 {
        let Some(line_end) = find(&wire[at..], b"\r\n").map(|e| at + e) else {
            return Ok(None);
        };
        let line = lossy(&wire[at..line_end]);
        let size_text = line.split(';').next().unwrap_or_default().trim();
        let size = usize::from_str_radix(size_text, 16)
            .map_err(|_| format!("chunk size line {line:?}"))?;
        at = line_end + 2;
        if size == 0 {
            for _ in 0..100 {
                let Some(end) = find(&wire[at..], b"\r\n").map(|e| at + e) else {
                    return Ok(None);
                };
                let last = end == at;
                at = end + 2;
                if last {
                    return Ok(Some((body, at)));
                }
            }
            return Err("endless trailer section".to_owned());
        }
        if wire.len() < at + size + 2 {
            return Ok(None);
        }
        body.extend_from_slice(&wire[at..at + size]);
        if !wire[at + size..].starts_with(b"\r\n") {
            return Err("no CRLF after chunk data".to_owned());
        }
        at += size + 2;
    }
    Err("too many chunks".to_owned())
}

/// Serves requests on `conn` with `respond`'s bytes, until the proxy closes it.
async fn keep_alive(mut conn: BackendConn, respond: impl Fn(&Seen) -> Vec<u8> + Send) {
    for _ in 0..1000 {
        let Some(seen) = conn.read_head().await else {
            return;
        };
        if conn.read_body(&seen).await.is_none() {
            return conn.until_closed(BACKEND_WAIT).await;
        }
        if !conn.write(&respond(&seen)).await {
            return;
        }
    }
}

/// A WebSocket backend at the byte level: answers 101, then by path: `/echo` sends back
/// what it gets, `/push` writes `tickNN` every 100 ms ([`PUSHES`] times) and then goes
/// quiet, anything else stays silent. Each waits for the proxy to close.
async fn ws_backend(mut conn: BackendConn) {
    let Some(seen) = conn.read_head().await else {
        return;
    };
    let key = seen.header("sec-websocket-key").unwrap_or_default().trim();
    let accept = derive_accept_key(key.as_bytes());
    let switch = format!(
        "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\
         Sec-WebSocket-Accept: {accept}\r\n\r\n"
    );
    if !conn.write(switch.as_bytes()).await {
        return;
    }
    match seen.path() {
        "/echo" => {
            for _ in 0..1000 {
                let Some(bytes) = conn.read_some().await else {
                    return;
                };
                if !conn.write(&bytes).await {
                    return;
                }
            }
        }
        "/push" => {
            for i in 0..PUSHES {
                tokio::time::sleep(Duration::from_millis(100)).await;
                if !conn.write(format!("tick{i:02}").as_bytes()).await {
                    return;
                }
            }
            conn.until_closed(BACKEND_WAIT).await;
        }
        _ => conn.until_closed(BACKEND_WAIT).await,
    }
}

/// How many 100 ms messages the busy-tunnel test exchanges (four of its idle timeouts).
const PUSHES: usize = 20;

/// A raw-TCP backend on a loopback port: each accepted connection goes to the handler; what
/// happens is recorded. Stops (with every connection task) when dropped.
struct RawBackend {
    addr: SocketAddr,
    log: Log,
    task: JoinHandle<()>,
}

impl RawBackend {
    async fn start<F, Fut>(handler: F) -> RawBackend
    where
        F: Fn(BackendConn) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let log = Log::default();
        let task = tokio::spawn({
            let log = Arc::clone(&log);
            async move {
                // Dropped (aborting every connection task) when this task is aborted.
                let mut conns = JoinSet::new();
                loop {
                    tokio::select! {
                        accepted = listener.accept() => {
                            let Ok((stream, _)) = accepted else { break };
                            stream.set_nodelay(true).unwrap();
                            let index = {
                                let mut record = log.lock().unwrap();
                                record.accepted += 1;
                                record.accepted - 1
                            };
                            conns.spawn(handler(BackendConn {
                                stream,
                                buf: Vec::new(),
                                index,
                                accepted_at: Instant::now(),
                                log: Arc::clone(&log),
                                ended: false,
                            }));
                        }
                        Some(_) = conns.join_next(), if !conns.is_empty() => {}
                    }
                }
            }
        });
        RawBackend { addr, log, task }
    }

    fn accepted(&self) -> usize {
        self.log.lock().unwrap().accepted
    }

    fn requests(&self) -> Vec<Seen> {
        self.log.lock().unwrap().requests.clone()
    }

    /// Whether the backend has read `count` requests in all, within `within`.
    async fn requests_within(&self, count: usize, within: Duration) -> bool {
        let deadline = Instant::now() + within;
        loop {
            if self.log.lock().unwrap().requests.len() >= count {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Endings recorded since the previous call.
    fn ended_since_last_check(&self) -> Vec<Ended> {
        let mut record = self.log.lock().unwrap();
        let fresh = record.ended[record.checked..].to_vec();
        record.checked = record.ended.len();
        fresh
    }

    fn notes(&self) -> Vec<String> {
        self.log.lock().unwrap().notes.clone()
    }

    /// Whether every accepted connection has ended within `within` (polled every 20 ms).
    async fn all_ended_within(&self, within: Duration) -> bool {
        let deadline = Instant::now() + within;
        loop {
            {
                let record = self.log.lock().unwrap();
                if record.ended.len() >= record.accepted {
                    return true;
                }
            }
            if Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

impl Drop for RawBackend {
    fn drop(&mut self) {
        self.task.abort();
    }
}

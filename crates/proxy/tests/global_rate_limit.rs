//! ingress-nginx's "Global Rate Limiting" (`global-rate-limit`, `-window`, `-key`,
//! `-ignored-cidrs`, and the ConfigMap's `global-rate-limit-memcached-*` and
//! `-status-code`, as flags and as ConfigMap keys) through the real proxy, against real memcached and Redis
//! servers (Debian's `memcached` and `redis-server`, which `scripts/testenv.sh` installs).
//! Each test starts its own server on a free loopback port and kills it when dropped, on
//! every path (panics included).

mod common;

use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use common::*;
use http::Request;
use http_body_util::Full;
use sluice_echo::EchoServer;
use sluice_proxy::{GlobalRateLimitBackend, ProxyArgs};

const NGINX: &str = "nginx.ingress.kubernetes.io/";
const HOST: &str = "limited.example.com";

/// A store server of this test, killed on drop.
struct Server {
    child: Child,
    addr: SocketAddr,
    _dir: tempfile::TempDir,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Which store.
#[derive(Clone, Copy, Debug)]
enum Kind {
    Memcached,
    Redis,
}

impl Server {
    /// Starts `kind` on a free loopback port and waits (bounded) until it answers.
    async fn start(kind: Kind) -> Server {
        for _ in 0..5 {
            let port = free_port().await;
            let dir = tempfile::tempdir().unwrap();
            let child = spawn(kind, port, dir.path());
            let mut server = Server {
                child,
                addr: SocketAddr::from(([127, 0, 0, 1], port)),
                _dir: dir,
            };
            if server.answers().await {
                return server;
            }
            // The port was taken meanwhile: try another.
        }
        panic!("{kind:?} did not start");
    }

    /// Stops the server and starts a new one on the same port (its counts are gone).
    async fn restart(&mut self, kind: Kind) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.child = spawn(kind, self.addr.port(), self._dir.path());
        assert!(self.answers().await, "{kind:?} did not start again");
    }

    /// Waits (bounded) until the server accepts connections; false if it exited.
    async fn answers(&mut self) -> bool {
        for _ in 0..100 {
            if tokio::net::TcpStream::connect(self.addr).await.is_ok() {
                return true;
            }
            if let Ok(Some(_)) = self.child.try_wait() {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        false
    }

    /// Proxy flags pointing at this server.
    fn args(&self, kind: Kind) -> ProxyArgs {
        let mut args = ProxyArgs::loopback();
        let g = &mut args.global_rate_limit;
        // Generous for a loaded test machine; the default is ingress-nginx's 50 ms.
        g.global_rate_limit_memcached_connect_timeout = Duration::from_secs(2);
        match kind {
            Kind::Memcached => {
                g.global_rate_limit_memcached_host = "127.0.0.1".into();
                g.global_rate_limit_memcached_port = self.addr.port();
            }
            Kind::Redis => {
                g.global_rate_limit_backend = GlobalRateLimitBackend::Redis;
                g.global_rate_limit_redis_addr = Some(self.addr.to_string());
            }
        }
        args
    }
}

/// The counters memcached at `addr` holds: (key, value), asked with its text protocol.
async fn memcached_counters(addr: SocketAddr) -> Vec<(String, u64)> {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
    let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let mut stream = BufReader::new(stream);
    stream
        .get_mut()
        .write_all(b"lru_crawler metadump all\r\n")
        .await
        .unwrap();
    let mut keys = Vec::new();
    let mut line = String::new();
    for _ in 0..1000 {
        line.clear();
        stream.read_line(&mut line).await.unwrap();
        if line.trim() == "END" || line.is_empty() {
            break;
        }
        if let Some(key) = line.strip_prefix("key=") {
            keys.push(key.split(' ').next().unwrap_or("").to_owned());
        }
    }
    let mut out = Vec::new();
    for key in keys {
        // metadump escapes keys as URLs.
        let key = percent_decode(&key);
        let command = format!("mg {key} v\r\n");
        stream
            .get_mut()
            .write_all(command.as_bytes())
            .await
            .unwrap();
        line.clear();
        stream.read_line(&mut line).await.unwrap();
        if line.starts_with("VA") {
            line.clear();
            stream.read_line(&mut line).await.unwrap();
            out.push((key, line.trim().parse().unwrap()));
        }
    }
    out
}

/// `%XX` escapes decoded (the keys themselves are printable ASCII).
fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (bytes[i], hex) {
            (b'%', Some(byte)) => {
                out.push(byte);
                i += 3;
            }
            (byte, _) => {
                out.push(byte);
                i += 1;
            }
        }
    }
    String::from_utf8(out).unwrap()
}

/// The counters Redis at `addr` holds: (key, value), asked in RESP (`KEYS *`, `GET`).
async fn redis_counters(addr: SocketAddr) -> Vec<(String, u64)> {
    use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
    let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let mut stream = BufReader::new(stream);
    async fn bulk(stream: &mut BufReader<tokio::net::TcpStream>) -> Option<String> {
        let mut line = String::new();
        stream.read_line(&mut line).await.unwrap();
        let len: i64 = line.trim().strip_prefix('$')?.parse().ok()?;
        let mut data = vec![0; usize::try_from(len).ok()? + 2];
        stream.read_exact(&mut data).await.unwrap();
        data.truncate(data.len() - 2);
        Some(String::from_utf8(data).unwrap())
    }
    stream
        .get_mut()
        .write_all(b"*2\r\n$4\r\nKEYS\r\n$1\r\n*\r\n")
        .await
        .unwrap();
    let mut line = String::new();
    stream.read_line(&mut line).await.unwrap();
    let n: usize = line.trim().trim_start_matches('*').parse().unwrap();
    let mut keys = Vec::new();
    for _ in 0..n.min(1000) {
        keys.extend(bulk(&mut stream).await);
    }
    let mut out = Vec::new();
    for key in keys {
        let command = format!("*2\r\n$3\r\nGET\r\n${}\r\n{key}\r\n", key.len());
        stream
            .get_mut()
            .write_all(command.as_bytes())
            .await
            .unwrap();
        if let Some(value) = bulk(&mut stream).await {
            out.push((key, value.parse().unwrap()));
        }
    }
    out
}

/// The counters of the store at `addr`.
async fn counters(kind: Kind, addr: SocketAddr) -> Vec<(String, u64)> {
    match kind {
        Kind::Memcached => memcached_counters(addr).await,
        Kind::Redis => redis_counters(addr).await,
    }
}

/// Waits (bounded) until the store holds one counter of `value`, and returns the
/// counters it holds then.
async fn one_counter_of(kind: Kind, addr: SocketAddr, value: u64) -> Vec<(String, u64)> {
    let mut held = Vec::new();
    for _ in 0..50 {
        held = counters(kind, addr).await;
        if held.len() == 1 && held[0].1 == value {
            break;
        }
        tokio::time::sleep(Duration::from_millis(40)).await;
    }
    held
}

/// Starts `kind` on `port` (loopback), in the foreground, writing nothing to disk.
fn spawn(kind: Kind, port: u16, dir: &std::path::Path) -> Child {
    let mut command = match kind {
        Kind::Memcached => {
            let mut c = Command::new("memcached");
            c.args(["-l", "127.0.0.1", "-p", &port.to_string(), "-U", "0"]);
            // memcached refuses to run as root unless told which user to be.
            // SAFETY: geteuid has no preconditions.
            if unsafe { libc::geteuid() } == 0 {
                c.args(["-u", "root"]);
            }
            c
        }
        Kind::Redis => {
            let mut c = Command::new("redis-server");
            c.args([
                "--port",
                &port.to_string(),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--daemonize",
                "no",
            ]);
            c.arg("--dir").arg(dir);
            c
        }
    };
    command
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| {
            panic!(
                "starting {kind:?} ({e}); scripts/testenv.sh installs memcached and redis-server"
            )
        })
}

async fn free_port() -> u16 {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    listener.local_addr().unwrap().port()
}

/// Waits (at most `need` seconds) until at least `need` seconds remain in the current
/// window of `window` seconds, so a burst of requests stays in one window.
async fn early_in_window(window: u64, need: u64) {
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
    let into = now.as_millis() as u64 % (window * 1000);
    let left = window * 1000 - into;
    if left < need * 1000 {
        tokio::time::sleep(Duration::from_millis(left + 20)).await;
    }
}

/// Sleeps until `offset_ms` after the start of the next window of `window` seconds.
async fn next_window(window: u64, offset_ms: u64) {
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
    let into = now.as_millis() as u64 % (window * 1000);
    tokio::time::sleep(Duration::from_millis(window * 1000 - into + offset_ms)).await;
}

fn route(backend: &EchoServer, annotations: &[(&str, &str)]) -> Route {
    let mut route = Route::new(HOST, "web", vec![backend.addr()]);
    for (key, value) in annotations {
        route = route.with_annotation(&format!("{NGINX}{key}"), value);
    }
    route
}

/// A GET (sluice's own HTTP/1.1 loop) or, with a body, a POST (hyper's path).
async fn send_one(proxy: &TestProxy, method: &str, path: &str, headers: &[(&str, &str)]) -> u16 {
    let mut sender = http1_connect(proxy.http).await;
    let body = if method == "POST" { "x=1" } else { "" };
    let mut builder = Request::builder()
        .method(method)
        .uri(path)
        .header("host", HOST);
    for (name, value) in headers {
        builder = builder.header(*name, *value);
    }
    let request = builder.body(Full::new(Bytes::from(body))).unwrap();
    send(&mut sender, request).await.status.as_u16()
}

/// `n` GETs of `/` with `headers`: their statuses.
async fn burst(proxy: &TestProxy, n: usize, headers: &[(&str, &str)]) -> Vec<u16> {
    let mut out = Vec::new();
    for _ in 0..n {
        out.push(send_one(proxy, "GET", "/", headers).await);
    }
    out
}

fn admitted(statuses: &[u16]) -> usize {
    statuses.iter().filter(|s| **s == 200).count()
}

/// The limit holds within a window, for both front ends drawing on one count; the
/// refusal is `global-rate-limit-status-code`'s default 429.
async fn limit_within_a_window(kind: Kind) {
    let server = Server::start(kind).await;
    let backend = echo("web", "web-0").await;
    let proxy = TestProxy::start(server.args(kind)).await;
    proxy.route(&[route(
        &backend,
        &[
            ("global-rate-limit", "5"),
            ("global-rate-limit-window", "1m"),
        ],
    )]);
    early_in_window(60, 20).await;
    let mut statuses = burst(&proxy, 3, &[]).await;
    for _ in 0..2 {
        statuses.push(send_one(&proxy, "POST", "/", &[]).await);
    }
    statuses.extend(burst(&proxy, 5, &[]).await);
    assert_eq!(
        statuses,
        [200, 200, 200, 200, 200, 429, 429, 429, 429, 429],
        "{kind:?}"
    );
    assert_eq!(send_one(&proxy, "POST", "/", &[]).await, 429);
    let (_, metrics) = admin_get(proxy.admin, "/metrics").await;
    assert!(
        metrics.contains("sluice_global_rate_limit_refused_total{by=\"store\"} 1"),
        "{metrics}"
    );
    assert!(
        metrics.contains("sluice_global_rate_limit_refused_total{by=\"cache\"} 5"),
        "{metrics}"
    );
    // The store counts what was admitted: the refused increment was taken back.
    let held = one_counter_of(kind, server.addr, 5).await;
    assert_eq!(held.len(), 1, "{kind:?}: {held:?}");
    assert_eq!(held[0].1, 5, "{kind:?}: {held:?}");
}

#[tokio::test]
async fn global_rate_limiting_memcached_holds_the_limit_within_a_window() {
    init_tracing();
    bounded(limit_within_a_window(Kind::Memcached)).await;
}

#[tokio::test]
async fn global_rate_limiting_redis_holds_the_limit_within_a_window() {
    init_tracing();
    bounded(limit_within_a_window(Kind::Redis)).await;
}

/// The proof: three replicas against one memcached admit the limit in all, not
/// three times it.
#[tokio::test]
async fn global_rate_limiting_three_replicas_share_one_limit() {
    init_tracing();
    bounded(async {
        let server = Server::start(Kind::Memcached).await;
        let backend = echo("web", "web-0").await;
        let annotations = [
            ("global-rate-limit", "10"),
            ("global-rate-limit-window", "1m"),
        ];
        let mut replicas = Vec::new();
        for i in 0..3 {
            let mut args = server.args(Kind::Memcached);
            // Worker threads (each with its own event loop and store connections), as
            // `sluice serve` runs, for two of them; the test's runtime for the third.
            args.workers = (i > 0).then_some(2);
            let proxy = TestProxy::start(args).await;
            proxy.route(&[route(&backend, &annotations)]);
            replicas.push(proxy);
        }
        // Against the per-replica limit, each would admit 10: 30 in all.
        early_in_window(60, 20).await;
        let mut statuses = Vec::new();
        for _ in 0..15 {
            for proxy in &replicas {
                statuses.push(send_one(proxy, "GET", "/", &[]).await);
            }
        }
        assert_eq!(admitted(&statuses), 10, "{statuses:?}");
        assert!(statuses.iter().all(|s| *s == 200 || *s == 429));
        // Every replica refuses now, the ones that never saw a refusal too.
        for proxy in &replicas {
            assert_eq!(send_one(proxy, "GET", "/", &[]).await, 429);
        }
        // One counter in the shared store, holding the admitted requests only (refused
        // increments are taken back, as lua-resty-global-throttle counts what it admits).
        let counters = one_counter_of(Kind::Memcached, server.addr, 10).await;
        assert_eq!(counters.len(), 1, "{counters:?}");
        let (key, count) = &counters[0];
        assert!(key.starts_with("default/ing-0.127.0.0.1."), "{key}");
        assert!(key.ends_with(".counter"), "{key}");
        assert_eq!(*count, 10, "{key}");
    })
    .await;
}

/// `global-rate-limit-key`: nginx variables and text; the count is per expanded key.
#[tokio::test]
async fn global_rate_limiting_key_variants() {
    init_tracing();
    bounded(async {
        let server = Server::start(Kind::Memcached).await;
        let backend = echo("web", "web-0").await;
        let proxy = TestProxy::start(server.args(Kind::Memcached)).await;
        early_in_window(60, 20).await;
        // Per API client (a header), as ingress-nginx's documented example.
        proxy.route(&[route(
            &backend,
            &[
                ("global-rate-limit", "2"),
                ("global-rate-limit-window", "1m"),
                (
                    "global-rate-limit-key",
                    "${remote_addr}-${http_x_api_client}",
                ),
            ],
        )]);
        let a = [("x-api-client", "a")];
        let b = [("x-api-client", "b")];
        assert_eq!(burst(&proxy, 3, &a).await, [200, 200, 429]);
        assert_eq!(burst(&proxy, 3, &b).await, [200, 200, 429]);
        assert_eq!(burst(&proxy, 1, &a).await, [429]);
        // Per path: `$uri` counts /x and /y apart.
        proxy.route(&[route(
            &backend,
            &[
                ("global-rate-limit", "1"),
                ("global-rate-limit-window", "1m"),
                ("global-rate-limit-key", "path:$uri"),
            ],
        )]);
        assert_eq!(send_one(&proxy, "GET", "/x", &[]).await, 200);
        assert_eq!(send_one(&proxy, "GET", "/x", &[]).await, 429);
        assert_eq!(send_one(&proxy, "GET", "/y", &[]).await, 200);
        // Literal text: one count for everyone, whatever the header.
        proxy.route(&[route(
            &backend,
            &[
                ("global-rate-limit", "2"),
                ("global-rate-limit-window", "1m"),
                ("global-rate-limit-key", "everyone"),
            ],
        )]);
        assert_eq!(burst(&proxy, 1, &a).await, [200]);
        assert_eq!(burst(&proxy, 1, &b).await, [200]);
        assert_eq!(burst(&proxy, 1, &[]).await, [429]);
        // `$binary_remote_addr`: raw bytes, escaped into a valid memcached key.
        proxy.route(&[route(
            &backend,
            &[
                ("global-rate-limit", "1"),
                ("global-rate-limit-window", "1m"),
                ("global-rate-limit-key", "bin:$binary_remote_addr"),
            ],
        )]);
        assert_eq!(burst(&proxy, 2, &[]).await, [200, 429]);
        // The refused request's increment is taken back by a task of its own: wait for it.
        let escaped = |held: &[(String, u64)]| {
            held.iter()
                .any(|(key, n)| key.starts_with("default/ing-0.bin:%7F%00%00%01.") && *n == 1)
        };
        let mut held = memcached_counters(server.addr).await;
        for _ in 0..50 {
            if escaped(&held) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(40)).await;
            held = memcached_counters(server.addr).await;
        }
        assert!(escaped(&held), "{held:?}");
        // An unsupported variable is refused (an Event) and $remote_addr counts.
        let compiled = sluice_routing::compile(
            &inputs(&[route(
                &backend,
                &[
                    ("global-rate-limit", "2"),
                    ("global-rate-limit-window", "1m"),
                    ("global-rate-limit-key", "$cookie_session"),
                ],
            )]),
            &sluice_routing::CompileOptions::default(),
        );
        let named = compiled.diagnostics.iter().any(|d| {
            d.message.contains("global-rate-limit-key") && d.message.contains("$cookie_session")
        });
        assert!(named, "{:?}", compiled.diagnostics);
    })
    .await;
}

/// `global-rate-limit-ignored-cidrs`: such clients are neither counted nor limited.
#[tokio::test]
async fn global_rate_limiting_ignored_cidrs_bypass() {
    init_tracing();
    bounded(async {
        let server = Server::start(Kind::Redis).await;
        let backend = echo("web", "web-0").await;
        let proxy = TestProxy::start(server.args(Kind::Redis)).await;
        early_in_window(60, 20).await;
        proxy.route(&[route(
            &backend,
            &[
                ("global-rate-limit", "1"),
                ("global-rate-limit-window", "1m"),
                ("global-rate-limit-ignored-cidrs", "10.0.0.0/8, 127.0.0.0/8"),
            ],
        )]);
        assert_eq!(burst(&proxy, 10, &[]).await, [200; 10]);
        // The same Ingress without the exemption: counted from zero, so one passes.
        proxy.route(&[route(
            &backend,
            &[
                ("global-rate-limit", "1"),
                ("global-rate-limit-window", "1m"),
            ],
        )]);
        assert_eq!(burst(&proxy, 2, &[]).await, [200, 429]);
    })
    .await;
}

/// The window slides: after a full window the next one starts with the previous rate's
/// weight (one request at its very start), and two windows later the full limit is back.
#[tokio::test]
async fn global_rate_limiting_window_slides() {
    init_tracing();
    bounded(async {
        let server = Server::start(Kind::Memcached).await;
        let backend = echo("web", "web-0").await;
        let proxy = TestProxy::start(server.args(Kind::Memcached)).await;
        proxy.route(&[route(
            &backend,
            &[
                ("global-rate-limit", "3"),
                ("global-rate-limit-window", "2s"),
            ],
        )]);
        next_window(2, 20).await;
        assert_eq!(burst(&proxy, 4, &[]).await, [200, 200, 200, 429]);
        // Next window, 20 ms in: the estimate 3 * 1.98 / 2 + count allows one request
        // (count 0), not a second.
        next_window(2, 20).await;
        assert_eq!(burst(&proxy, 1, &[]).await, [200]);
        // A second request is refused until 3 * r / 2 + 1 <= 3, r <= 1.33 s: 667 ms in
        // (checked only when this slow machine sent it before then).
        let sent_at = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_millis()
            % 2000;
        let second = burst(&proxy, 1, &[]).await;
        if sent_at < 600 {
            assert_eq!(second, [429], "sent {sent_at} ms into the window");
        }
        // Two windows on, nothing of the past weighs: the full limit again.
        next_window(2, 0).await;
        next_window(2, 20).await;
        assert_eq!(burst(&proxy, 4, &[]).await, [200, 200, 200, 429]);
    })
    .await;
}

/// `--global-rate-limit-status-code` (ingress-nginx's `global-rate-limit-status-code`).
#[tokio::test]
async fn global_rate_limiting_status_code() {
    init_tracing();
    bounded(async {
        let server = Server::start(Kind::Redis).await;
        let backend = echo("web", "web-0").await;
        let mut args = server.args(Kind::Redis);
        args.global_rate_limit.global_rate_limit_status_code = 503;
        // Worker threads, each with its own Redis connection.
        args.workers = Some(2);
        let proxy = TestProxy::start(args).await;
        early_in_window(60, 20).await;
        proxy.route(&[route(
            &backend,
            &[
                ("global-rate-limit", "1"),
                ("global-rate-limit-window", "1m"),
            ],
        )]);
        assert_eq!(burst(&proxy, 2, &[]).await, [200, 503]);
    })
    .await;
}

/// A store that does not answer: requests pass (ingress-nginx fails open) and the error
/// metric counts them; with `--global-rate-limit-fail-closed` they get 503.
#[tokio::test]
async fn global_rate_limiting_store_down_fails_open_or_closed() {
    init_tracing();
    bounded(async {
        let backend = echo("web", "web-0").await;
        let annotations = [
            ("global-rate-limit", "1"),
            ("global-rate-limit-window", "1m"),
        ];
        // memcached, stopped: its port refuses.
        let server = Server::start(Kind::Memcached).await;
        let args = server.args(Kind::Memcached);
        drop(server);
        let proxy = TestProxy::start(args.clone()).await;
        proxy.route(&[route(&backend, &annotations)]);
        assert_eq!(burst(&proxy, 4, &[]).await, [200; 4]);
        let (_, metrics) = admin_get(proxy.admin, "/metrics").await;
        assert!(
            metrics.contains("sluice_global_rate_limit_store_errors_total{store=\"memcached\"} 4"),
            "{metrics}"
        );
        // Fail closed.
        let mut closed = args;
        closed.global_rate_limit.global_rate_limit_fail_closed = true;
        let proxy = TestProxy::start(closed).await;
        proxy.route(&[route(&backend, &annotations)]);
        assert_eq!(burst(&proxy, 2, &[]).await, [503, 503]);
        // A Redis that accepts connections but never answers: the timeout applies.
        let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let mut args = ProxyArgs::loopback();
        args.global_rate_limit.global_rate_limit_backend = GlobalRateLimitBackend::Redis;
        args.global_rate_limit.global_rate_limit_redis_addr =
            Some(silent.local_addr().unwrap().to_string());
        args.global_rate_limit
            .global_rate_limit_memcached_connect_timeout = Duration::from_millis(200);
        let proxy = TestProxy::start(args).await;
        proxy.route(&[route(&backend, &annotations)]);
        let started = std::time::Instant::now();
        assert_eq!(burst(&proxy, 2, &[]).await, [200, 200]);
        assert!(started.elapsed() < Duration::from_secs(5));
        let (_, metrics) = admin_get(proxy.admin, "/metrics").await;
        assert!(
            metrics.contains("sluice_global_rate_limit_store_errors_total{store=\"redis\"} 2"),
            "{metrics}"
        );
    })
    .await;
}

/// A store that restarts (its counts lost) counts again from the next request: pooled
/// connections to the old process are replaced, not a request let through uncounted.
async fn store_restart(kind: Kind) {
    let mut server = Server::start(kind).await;
    let backend = echo("web", "web-0").await;
    let proxy = TestProxy::start(server.args(kind)).await;
    early_in_window(60, 20).await;
    proxy.route(&[route(
        &backend,
        &[
            ("global-rate-limit", "3"),
            ("global-rate-limit-window", "1m"),
        ],
    )]);
    assert_eq!(burst(&proxy, 2, &[]).await, [200, 200]);
    server.restart(kind).await;
    assert_eq!(
        burst(&proxy, 4, &[]).await,
        [200, 200, 200, 429],
        "{kind:?}"
    );
    let (_, metrics) = admin_get(proxy.admin, "/metrics").await;
    let label = match kind {
        Kind::Memcached => "memcached",
        Kind::Redis => "redis",
    };
    let none = format!("sluice_global_rate_limit_store_errors_total{{store=\"{label}\"}} 0\n");
    assert!(metrics.contains(&none), "{kind:?}: {metrics}");
}

#[tokio::test]
async fn global_rate_limiting_memcached_restart_counts_again() {
    init_tracing();
    bounded(store_restart(Kind::Memcached)).await;
}

#[tokio::test]
async fn global_rate_limiting_redis_restart_counts_again() {
    init_tracing();
    bounded(store_restart(Kind::Redis)).await;
}

/// Without a store address the annotations count nothing (as ingress-nginx without a
/// memcached host).
#[tokio::test]
async fn global_rate_limiting_needs_a_store() {
    init_tracing();
    bounded(async {
        let backend = echo("web", "web-0").await;
        let proxy = TestProxy::start(ProxyArgs::loopback()).await;
        proxy.route(&[route(
            &backend,
            &[
                ("global-rate-limit", "1"),
                ("global-rate-limit-window", "1m"),
            ],
        )]);
        assert_eq!(burst(&proxy, 3, &[]).await, [200; 3]);
    })
    .await;
}

/// ingress-nginx's ConfigMap keys `global-rate-limit-memcached-host`/`-port`/
/// `-connect-timeout` and `global-rate-limit-status-code`, read live: a proxy started
/// without a store counts in memcached once the ConfigMap names it, and refuses with the
/// ConfigMap's status.
#[tokio::test]
async fn global_rate_limiting_store_from_the_configmap() {
    bounded(async {
        let server = Server::start(Kind::Memcached).await;
        let backend = echo("web", "web-0").await;
        let proxy = TestProxy::start(ProxyArgs::loopback()).await;
        let routes = [route(
            &backend,
            &[
                ("global-rate-limit", "2"),
                ("global-rate-limit-window", "1m"),
            ],
        )];
        proxy.route(&routes);
        early_in_window(60, 20).await;
        assert_eq!(
            admitted(&burst(&proxy, 4, &[]).await),
            4,
            "no store: nothing counted"
        );

        let port = server.addr.port().to_string();
        let data = [
            ("global-rate-limit-memcached-host", "127.0.0.1"),
            ("global-rate-limit-memcached-port", port.as_str()),
            ("global-rate-limit-memcached-connect-timeout", "2000"),
            ("global-rate-limit-status-code", "503"),
        ];
        proxy
            .table
            .update(table_with(&routes, &data), Duration::from_millis(1));
        assert_eq!(burst(&proxy, 4, &[]).await, [200, 200, 503, 503]);
        assert_eq!(
            one_counter_of(Kind::Memcached, server.addr, 2).await.len(),
            1
        );
    })
    .await;
}

//! ingress-nginx's "Proxy buffering" (`proxy-buffering: "on"`, nginx `proxy_buffering on`
//! with `proxy_buffers` from `proxy-buffers-number` and `proxy-buffer-size`) through the
//! real proxy, on both front ends: with a client that reads nothing, a response that fits
//! the buffers is read off the backend whole (the backend's write completes) before the
//! client has taken a byte; without buffering the backend waits for the client.

mod common;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use common::*;
use sluice_proxy::ProxyArgs;
use sluice_routing::{CompileOptions, compile};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

const NGINX: &str = "nginx.ingress.kubernetes.io/";

/// The body each response carries: far more than the kernel's socket buffers on both
/// sides hold, so only a proxy that reads ahead lets the backend finish.
const BODY: usize = 32 * 1024 * 1024;

/// A backend that answers every request (keep-alive) with [`BODY`] bytes and counts the
/// responses it finished writing.
struct BigBackend {
    addr: SocketAddr,
    finished: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for BigBackend {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl BigBackend {
    async fn start() -> BigBackend {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let finished = Arc::new(AtomicUsize::new(0));
        let counted = Arc::clone(&finished);
        let task = tokio::spawn(async move {
            let mut served = tokio::task::JoinSet::new();
            while let Ok((tcp, _)) = listener.accept().await {
                served.spawn(serve(tcp, Arc::clone(&counted)));
            }
        });
        BigBackend {
            addr,
            finished,
            task,
        }
    }

    fn finished(&self) -> usize {
        self.finished.load(Ordering::SeqCst)
    }
}

/// Serves one connection: each request head (and its `content-length` body) gets the big
/// response.
async fn serve(mut tcp: tokio::net::TcpStream, finished: Arc<AtomicUsize>) {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let piece = vec![b'a'; 64 * 1024];
    loop {
        let end = loop {
            if let Some(at) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break at + 4;
            }
            match tcp.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        };
        let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
        let length: usize = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length: "))
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or(0);
        while buf.len() < end + length {
            match tcp.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        }
        buf.drain(..end + length);
        let answer = format!("HTTP/1.1 200 OK\r\ncontent-length: {BODY}\r\n\r\n");
        if tcp.write_all(answer.as_bytes()).await.is_err() {
            return;
        }
        for _ in 0..BODY / piece.len() {
            if tcp.write_all(&piece).await.is_err() {
                return;
            }
        }
        finished.fetch_add(1, Ordering::SeqCst);
    }
}

/// A client that asks for `host`'s response and reads none of it yet (a 4 KiB receive
/// buffer, so its kernel takes little).
async fn slow_client(
    proxy: SocketAddr,
    method: &str,
    body: &str,
    host: &str,
) -> tokio::net::TcpStream {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let mut tcp = socket.connect(proxy).await.unwrap();
    let request = format!(
        "{method} / HTTP/1.1\r\nhost: {host}\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    tcp.write_all(request.as_bytes()).await.unwrap();
    tcp
}

/// Reads the whole response off `tcp`; the number of body bytes.
async fn read_response(tcp: &mut tokio::net::TcpStream) -> usize {
    let mut buf = Vec::with_capacity(BODY + 1024);
    let mut chunk = vec![0u8; 256 * 1024];
    let read = async {
        loop {
            if let Some(at) = buf.windows(4).position(|w| w == b"\r\n\r\n")
                && buf.len() - (at + 4) >= BODY
            {
                return buf.len() - (at + 4);
            }
            match tcp.read(&mut chunk).await {
                Ok(0) | Err(_) => {
                    let at = buf.windows(4).position(|w| w == b"\r\n\r\n");
                    return at.map_or(0, |at| buf.len() - (at + 4));
                }
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(30), read)
        .await
        .expect("the response within 30 s")
}

/// Polls (bounded) until the backend finished `n` responses; whether it did.
async fn backend_finishes(backend: &BigBackend, n: usize, within: Duration) -> bool {
    let start = std::time::Instant::now();
    while start.elapsed() < within {
        if backend.finished() >= n {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    backend.finished() >= n
}

/// ingress-nginx docs, "Proxy buffering": with `proxy-buffering: "on"` and buffers the
/// response fits (64 x 1m), the backend finishes its response while the client has read
/// nothing; with ingress-nginx's default (`off`) it waits for the client. Both clients then
/// get the whole body.
#[tokio::test]
async fn proxy_buffering_releases_the_backend_before_a_slow_client_reads() {
    init_tracing();
    bounded(async {
        let backend = BigBackend::start().await;
        let proxy = TestProxy::start(ProxyArgs::loopback()).await;
        let buffered = Route::new("buffered.test", "big", vec![backend.addr])
            .with_annotation(&format!("{NGINX}proxy-buffering"), "on")
            .with_annotation(&format!("{NGINX}proxy-buffers-number"), "64")
            .with_annotation(&format!("{NGINX}proxy-buffer-size"), "1m");
        let streamed = Route::new("streamed.test", "big", vec![backend.addr]);
        let compiled = compile(&inputs(&[buffered, streamed]), &CompileOptions::default());
        assert!(
            compiled.diagnostics.is_empty(),
            "{:?}",
            compiled.diagnostics
        );
        proxy.table.update(compiled.table, Duration::from_millis(1));

        let mut done = 0;
        for (label, method, body) in [("own loop GET", "GET", ""), ("hyper POST", "POST", "x=1")] {
            // Buffered: the backend is done before the client reads a byte.
            let mut client = slow_client(proxy.http, method, body, "buffered.test").await;
            assert!(
                backend_finishes(&backend, done + 1, Duration::from_secs(10)).await,
                "{label}: the backend still waits for the client"
            );
            done += 1;
            assert_eq!(read_response(&mut client).await, BODY, "{label}");

            // Streamed (ingress-nginx's default): the backend waits for the client.
            let mut client = slow_client(proxy.http, method, body, "streamed.test").await;
            assert!(
                !backend_finishes(&backend, done + 1, Duration::from_secs(1)).await,
                "{label}: the backend finished without the client reading"
            );
            assert_eq!(read_response(&mut client).await, BODY, "{label}");
            assert!(
                backend_finishes(&backend, done + 1, Duration::from_secs(5)).await,
                "{label}"
            );
            done += 1;
        }
    })
    .await;
}

//! The proxy under change: endpoints dying, tables swapped under load, graceful shutdown.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::*;
use http::Request;
use http_body_util::{Empty, Full};
use sluice_proxy::ProxyArgs;
use tokio::net::TcpStream;

/// `GET /` with `Host: host` through a pooled client; `Err` describes a failure.
async fn pooled_get(
    client: &hyper_util::client::legacy::Client<
        hyper_util::client::legacy::connect::HttpConnector,
        Empty<Bytes>,
    >,
    proxy: std::net::SocketAddr,
    host: &str,
) -> Result<Answer, String> {
    let request = Request::get(format!("http://{proxy}/load"))
        .header("host", host)
        .body(Empty::new())
        .unwrap();
    let response = client
        .request(request)
        .await
        .map_err(|e| format!("{e:?}"))?;
    let answer = collect(response).await;
    if answer.status != 200 {
        return Err(format!("status {}: {}", answer.status, answer.text()));
    }
    Ok(answer)
}

#[tokio::test]
async fn killed_endpoint_causes_no_failed_gets() {
    init_tracing();
    bounded(async {
        let a = echo("pool", "a").await;
        let b = echo("pool", "b").await;
        let proxy = TestProxy::with_routes(&[Route::new(
            "pool.example.com",
            "pool",
            vec![a.addr(), b.addr()],
        )])
        .await;
        let client = pooled_client();
        let done = Arc::new(AtomicUsize::new(0));
        const TASKS: usize = 4;
        const PER_TASK: usize = 150;

        let workers: Vec<_> = (0..TASKS)
            .map(|_| {
                let client = client.clone();
                let done = Arc::clone(&done);
                let addr = proxy.http;
                tokio::spawn(async move {
                    let mut failures = Vec::new();
                    let mut pods = Vec::new();
                    for _ in 0..PER_TASK {
                        match pooled_get(&client, addr, "pool.example.com").await {
                            Ok(answer) => pods.push(answer.report().pod),
                            Err(e) => failures.push(e),
                        }
                        done.fetch_add(1, Ordering::Relaxed);
                    }
                    (failures, pods)
                })
            })
            .collect();

        // Kill `a` abruptly a quarter of the way in (its connections die with it).
        let deadline = Instant::now() + Duration::from_secs(20);
        while done.load(Ordering::Relaxed) < TASKS * PER_TASK / 4 && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        drop(a);

        let mut failures = Vec::new();
        let mut tail_pods = Vec::new();
        for worker in workers {
            let (f, pods) = worker.await.unwrap();
            failures.extend(f);
            tail_pods.extend(pods.into_iter().rev().take(20));
        }
        assert!(failures.is_empty(), "failed requests: {failures:?}");
        assert!(tail_pods.iter().all(|p| p == "b"), "{tail_pods:?}");
        drop(b);
    })
    .await;
}

#[tokio::test]
async fn table_swaps_under_load_lose_nothing() {
    init_tracing();
    bounded(async {
        let backend = echo("web", "web-0").await;
        let other = echo("web", "web-1").await;
        let routes = [Route::new(
            "web.example.com",
            "web",
            vec![backend.addr(), other.addr()],
        )];
        let proxy = TestProxy::with_routes(&routes).await;

        // One keep-alive connection opened before the swaps, used again after them.
        let mut kept = http1_connect(proxy.http).await;
        let request = || {
            Request::get("/kept")
                .header("host", "web.example.com")
                .body(Full::new(Bytes::new()))
                .unwrap()
        };
        assert_eq!(send(&mut kept, request()).await.status, 200);

        let client = pooled_client();
        let workers: Vec<_> = (0..4)
            .map(|_| {
                let client = client.clone();
                let addr = proxy.http;
                tokio::spawn(async move {
                    let mut failures = Vec::new();
                    for _ in 0..150 {
                        if let Err(e) = pooled_get(&client, addr, "web.example.com").await {
                            failures.push(e);
                        }
                    }
                    failures
                })
            })
            .collect();

        // 100 swaps between equivalent tables, each compiled afresh (new Arcs, new ids).
        let handle = proxy.table.clone();
        let swapper = tokio::spawn(async move {
            for _ in 0..100 {
                handle.update(table(&routes), Duration::from_micros(50));
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        });

        let mut failures = Vec::new();
        for worker in workers {
            failures.extend(worker.await.unwrap());
        }
        swapper.await.unwrap();
        assert!(failures.is_empty(), "failed requests: {failures:?}");

        // The connection from before the swaps still works.
        let answer = send(&mut kept, request()).await;
        assert_eq!(answer.status, 200);
        assert_eq!(proxy.table.backend_count(), 1);
    })
    .await;
}

#[tokio::test]
async fn graceful_shutdown_finishes_in_flight_requests() {
    init_tracing();
    bounded(async {
        let backend = echo("slow", "slow-0").await;
        let mut proxy =
            TestProxy::with_routes(&[Route::new("slow.example.com", "slow", vec![backend.addr()])])
                .await;
        let addr = proxy.http;
        // An idle keep-alive connection must not hold the shutdown up.
        let _idle = http1_connect(addr).await;
        let in_flight =
            tokio::spawn(async move { get(addr, "slow.example.com", "/delay/700").await });
        tokio::time::sleep(Duration::from_millis(200)).await;

        let started = Instant::now();
        let serving = proxy.begin_shutdown();
        let answer = in_flight.await.unwrap();
        assert_eq!(answer.status, 200, "{}", answer.text());
        // The answer tells the client that this connection closes after it.
        assert_eq!(
            answer.headers.get("connection").map(|v| v.as_bytes()),
            Some(&b"close"[..])
        );
        tokio::time::timeout(Duration::from_secs(10), serving)
            .await
            .expect("shutdown completes")
            .unwrap()
            .unwrap();
        assert!(started.elapsed() < Duration::from_secs(5));
        // Listeners are closed.
        assert!(TcpStream::connect(addr).await.is_err());
    })
    .await;
}

#[tokio::test]
async fn drain_timeout_cuts_long_requests() {
    init_tracing();
    bounded(async {
        let backend = echo("slow", "slow-0").await;
        let mut args = ProxyArgs::loopback();
        args.drain_timeout = Duration::from_millis(300);
        let mut proxy = TestProxy::start(args).await;
        proxy.route(&[Route::new("slow.example.com", "slow", vec![backend.addr()])]);
        let addr = proxy.http;
        let in_flight = tokio::spawn(async move {
            let mut sender = http1_connect(addr).await;
            let request = Request::get("/delay/5000")
                .header("host", "slow.example.com")
                .body(Full::new(Bytes::new()))
                .unwrap();
            sender.send_request(request).await.map(|r| r.status())
        });
        tokio::time::sleep(Duration::from_millis(200)).await;
        let started = Instant::now();
        tokio::time::timeout(Duration::from_secs(5), proxy.begin_shutdown())
            .await
            .expect("shutdown bounded by the drain timeout")
            .unwrap()
            .unwrap();
        assert!(started.elapsed() < Duration::from_secs(3));
        assert!(in_flight.await.unwrap().is_err(), "the cut request fails");
    })
    .await;
}

#[tokio::test]
async fn idle_connections_are_closed_after_the_idle_timeout() {
    init_tracing();
    bounded(async {
        let backend = echo("idle", "idle-0").await;
        let mut args = ProxyArgs::loopback();
        args.idle_timeout = Duration::from_millis(300);
        let proxy = TestProxy::start(args).await;
        proxy.route(&[Route::new("idle.example.com", "idle", vec![backend.addr()])]);

        // HTTP/1.1: one request, then silence; the proxy closes within two idle periods.
        let mut h1 = http1_connect(proxy.http).await;
        let request = Request::get("/")
            .header("host", "idle.example.com")
            .body(Full::new(Bytes::new()))
            .unwrap();
        assert_eq!(send(&mut h1, request).await.status, 200);
        let started = Instant::now();
        tokio::time::timeout(Duration::from_secs(5), async {
            while !h1.is_closed() {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await
        .expect("the idle HTTP/1.1 connection was closed");
        let h1_after = started.elapsed();

        // h2c: the same, with a GOAWAY.
        let stream = TcpStream::connect(proxy.http).await.unwrap();
        let (mut h2, connection) = hyper::client::conn::http2::handshake(
            hyper_util::rt::TokioExecutor::new(),
            hyper_util::rt::TokioIo::new(stream),
        )
        .await
        .unwrap();
        let connection = tokio::spawn(connection);
        let request = Request::get("http://idle.example.com/")
            .body(Full::new(Bytes::new()))
            .unwrap();
        let response = h2.send_request(request).await.unwrap();
        assert_eq!(collect(response).await.status, 200);
        let started = Instant::now();
        tokio::time::timeout(Duration::from_secs(5), connection)
            .await
            .expect("the idle h2c connection was closed")
            .unwrap()
            .unwrap();
        let h2_after = started.elapsed();

        // Busy connections are not idle: 10 requests 100 ms apart span 1 s > 3 idle periods.
        let mut busy = http1_connect(proxy.http).await;
        for _ in 0..10 {
            tokio::time::sleep(Duration::from_millis(100)).await;
            let request = Request::get("/")
                .header("host", "idle.example.com")
                .body(Full::new(Bytes::new()))
                .unwrap();
            assert_eq!(send(&mut busy, request).await.status, 200);
        }
        assert!(h1_after < Duration::from_secs(2), "{h1_after:?}");
        assert!(h2_after < Duration::from_secs(2), "{h2_after:?}");
    })
    .await;
}

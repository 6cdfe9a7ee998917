//! Thread-per-core (`--workers N`): every worker accepts its share of new connections on its
//! own `SO_REUSEPORT` socket (per-worker counters on the admin port), a table swap reaches
//! all of them, and a graceful shutdown stops every worker thread.

mod common;

use std::time::Duration;

use common::*;
use sluice_proxy::ProxyArgs;

/// `sluice_worker_connections_accepted_total` per worker, from /metrics.
async fn accepted_per_worker(admin: std::net::SocketAddr, workers: usize) -> Vec<u64> {
    per_worker(admin, "sluice_worker_connections_accepted_total", workers).await
}

/// Counter `name` of every worker, from /metrics.
async fn per_worker(admin: std::net::SocketAddr, name: &str, workers: usize) -> Vec<u64> {
    let (_, text) = admin_get(admin, "/metrics").await;
    (0..workers)
        .map(|w| {
            let prefix = format!("{name}{{worker=\"{w}\"}} ");
            text.lines()
                .find_map(|l| l.strip_prefix(&prefix))
                .and_then(|n| n.parse().ok())
                .unwrap_or_else(|| panic!("no counter for worker {w} in\n{text}"))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_worker_accepts_and_serves_and_all_stop_on_shutdown() {
    init_tracing();
    bounded(async {
        let web = echo("web", "web-0").await;
        let api = echo("api", "api-0").await;
        let args = ProxyArgs {
            workers: Some(3),
            ..ProxyArgs::loopback()
        };
        let proxy = TestProxy::start(args).await;
        proxy.route(&[Route::new("shop.example.com", "web", vec![web.addr()])]);

        // 300 connections, one request each (bounded).
        for _ in 0..300 {
            let answer = get(proxy.http, "shop.example.com", "/").await;
            assert_eq!(answer.status, 200);
        }
        let counts = accepted_per_worker(proxy.admin, 3).await;
        assert_eq!(counts.iter().sum::<u64>(), 300, "{counts:?}");
        let (min, max) = (counts.iter().min().unwrap(), counts.iter().max().unwrap());
        // The kernel spreads connections by a hash of their addresses: each worker gets
        // about a third (a spread over 2x has odds of about one in a million).
        assert!(
            *min > 0 && *max <= 2 * *min,
            "uneven accept spread: {counts:?}"
        );
        // Each request was answered on the worker that accepted its connection.
        let requests = per_worker(proxy.admin, "sluice_worker_requests_total", 3).await;
        assert_eq!(requests, counts, "requests per worker follow connections");

        // Keep-alive: 12 connections, 20 requests each, spread as their connections are.
        let mut clients = Vec::new();
        for _ in 0..12 {
            clients.push(http1_connect(proxy.http).await);
        }
        for _ in 0..20 {
            for client in &mut clients {
                let request = http::Request::get("/")
                    .header("host", "shop.example.com")
                    .body(http_body_util::Full::new(bytes::Bytes::new()))
                    .unwrap();
                assert_eq!(send(client, request).await.status, 200);
            }
        }
        let after = per_worker(proxy.admin, "sluice_worker_requests_total", 3).await;
        let served: Vec<u64> = after.iter().zip(&requests).map(|(a, b)| a - b).collect();
        assert_eq!(served.iter().sum::<u64>(), 240, "{served:?}");
        assert!(
            served.iter().all(|n| n % 20 == 0),
            "a keep-alive connection moved between workers: {served:?}"
        );
        // The route's series are counted in per-worker shards; a scrape sums them. (A
        // duration is observed as its request's accounting is dropped, just after the last
        // byte went out: poll briefly.)
        let total = |text: &str, name: &str| -> u64 {
            text.lines()
                .filter(|l| l.starts_with(&format!("{name}{{")) && l.contains("status=\"200\""))
                .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
                .sum()
        };
        let mut text = String::new();
        for _ in 0..40 {
            text = admin_get(proxy.admin, "/metrics").await.1;
            if total(&text, "sluice_request_duration_seconds_count") == 540 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert_eq!(total(&text, "sluice_requests_total"), 540, "{text}");
        assert_eq!(
            total(&text, "sluice_request_duration_seconds_count"),
            540,
            "{text}"
        );
        let accepted = accepted_per_worker(proxy.admin, 3).await;
        let line = format!(
            "sluice_connections_accepted_total {}",
            accepted.iter().sum::<u64>()
        );
        assert!(text.contains(&line), "{line} missing in\n{text}");

        // A table swap reaches every worker.
        proxy.route(&[Route::new("shop.example.com", "api", vec![api.addr()])]);
        for _ in 0..30 {
            let answer = get(proxy.http, "shop.example.com", "/").await;
            assert_eq!(answer.status, 200);
            assert!(answer.text().contains("\"api\""), "{}", answer.text());
        }

        // HTTPS is served by the workers too.
        let status = tokio::time::timeout(Duration::from_secs(5), async {
            tokio::net::TcpStream::connect(proxy.https).await.is_ok()
        })
        .await
        .unwrap();
        assert!(status, "HTTPS port accepts");

        // Graceful shutdown joins every worker thread.
        proxy.shutdown().await;
        assert!(
            tokio::net::TcpStream::connect(web.addr()).await.is_ok(),
            "backends untouched"
        );
    })
    .await;
}

/// A second proxy on a port a running one holds is refused with an error naming the
/// address, although both would set `SO_REUSEPORT`: otherwise the kernel would spread
/// connections over both, two configurations answering at random. (Another program on the
/// port gives the same clean error.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_proxy_on_the_same_port_is_refused_not_shared() {
    init_tracing();
    bounded(async {
        let args = ProxyArgs {
            workers: Some(2),
            ..ProxyArgs::loopback()
        };
        let first = TestProxy::start(args.clone()).await;
        let second = sluice_proxy::Proxy::new(ProxyArgs {
            http_addr: first.http,
            ..args
        })
        .expect("proxy builds");
        let error = match second.bind().await {
            Ok(_) => panic!("a second proxy bound {} as well", first.http),
            Err(error) => format!("{error:#}"),
        };
        assert!(
            error.contains(&first.http.to_string()) && error.contains("already in use"),
            "{error}"
        );
        // The first one still serves.
        let backend = echo("web", "web-0").await;
        first.route(&[Route::new("shop.example.com", "web", vec![backend.addr()])]);
        assert_eq!(get(first.http, "shop.example.com", "/").await.status, 200);
    })
    .await;
}

/// #28: a Gateway with an address of its own (`--gateway-address-pool`) is served on a
/// socket per worker bound when the table names it: every worker accepts there, only that
/// Gateway's routes answer there, and a table without it closes the socket on every worker.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gateway_sockets_are_served_by_every_worker_and_closed_with_the_table() {
    init_tracing();
    bounded(async {
        let web = echo("web", "web-0").await;
        let args = ProxyArgs {
            workers: Some(2),
            ..ProxyArgs::loopback()
        };
        let proxy = TestProxy::start(args).await;
        let mut inputs = inputs(&[Route::new("shared.example", "web", vec![web.addr()])]);
        add_gateway(
            &mut inputs,
            serde_json::json!({"listeners": [{"name": "http", "port": 18081, "protocol": "HTTP"}]}),
            &[(
                "own",
                serde_json::json!({"parentRefs": [{"name": "gw"}], "hostnames": ["own.example"],
                "rules": [{"backendRefs": [{"name": "web", "port": 80}]}]}),
            )],
        );
        let options = sluice_routing::CompileOptions {
            gateway_address_pool: Some("127.82.0.1".parse().expect("pool")),
            ..Default::default()
        };
        let compiled = sluice_routing::compile(&inputs, &options);
        let failures = proxy.table.update(compiled.table, Duration::from_millis(1));
        assert!(failures.is_empty(), "{failures:?}");
        let own: std::net::SocketAddr = "127.82.0.1:18081".parse().unwrap();
        let before = accepted_per_worker(proxy.admin, 2).await;
        for _ in 0..100 {
            let answer = get(own, "own.example", "/").await;
            assert_eq!(answer.status, 200);
            assert!(answer.text().contains("\"web-0\""), "{}", answer.text());
            // The Ingress host is not served on the Gateway's socket.
            assert_eq!(get(own, "shared.example", "/").await.status, 404);
        }
        let after = accepted_per_worker(proxy.admin, 2).await;
        let served: Vec<u64> = after.iter().zip(&before).map(|(a, b)| a - b).collect();
        assert_eq!(served.iter().sum::<u64>(), 200, "{served:?}");
        assert!(
            served.iter().all(|n| *n > 0),
            "a worker never accepted: {served:?}"
        );
        // The shared listener does not serve the Gateway's route.
        assert_eq!(get(proxy.http, "own.example", "/").await.status, 404);

        // A table without the Gateway: the socket closes on both workers.
        proxy.route(&[Route::new("shared.example", "web", vec![web.addr()])]);
        let mut refused = false;
        for _ in 0..100 {
            if tokio::net::TcpStream::connect(own).await.is_err() {
                refused = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(refused, "{own} still accepts connections");
    })
    .await;
}

/// #28: a Gateway socket whose port another socket holds is reported, not served, and is
/// bound once a later table names it again and the port is free.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateway_socket_whose_port_is_taken_is_reported_and_bound_later() {
    init_tracing();
    bounded(async {
        let web = echo("web", "web-0").await;
        let proxy = TestProxy::start(ProxyArgs::loopback()).await;
        let holder = std::net::TcpListener::bind("127.84.0.1:0").expect("a port to hold");
        let port = holder.local_addr().unwrap().port();
        let mut inputs = inputs(&[Route::new("unused.example", "web", vec![web.addr()])]);
        add_gateway(
            &mut inputs,
            serde_json::json!({"addresses": [{"value": "127.84.0.1"}],
                "listeners": [{"name": "http", "port": port, "protocol": "HTTP"}]}),
            &[(
                "own",
                serde_json::json!({"parentRefs": [{"name": "gw"}],
                "rules": [{"backendRefs": [{"name": "web", "port": 80}]}]}),
            )],
        );
        let table = || sluice_routing::compile(&inputs, &Default::default()).table;
        let socket: std::net::SocketAddr = format!("127.84.0.1:{port}").parse().unwrap();
        let failures = proxy.table.update(table(), Duration::from_millis(1));
        let why = failures.get(&socket).cloned().unwrap_or_default();
        assert!(
            why.contains(&format!("port {port} is in use")),
            "{failures:?}"
        );
        drop(holder);
        let failures = proxy.table.update(table(), Duration::from_millis(1));
        assert!(failures.is_empty(), "{failures:?}");
        assert_eq!(get(socket, "any.example", "/").await.status, 200);
    })
    .await;
}

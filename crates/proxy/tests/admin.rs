//! The admin listener: /metrics, /healthz, /readyz.

mod common;

use std::time::{Duration, Instant};

use common::*;

/// Fetches /metrics until it contains every line of `expected` (bounded), returning it.
async fn metrics_with(admin: std::net::SocketAddr, expected: &[&str]) -> String {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let (status, text) = admin_get(admin, "/metrics").await;
        assert_eq!(status, 200);
        let missing: Vec<_> = expected.iter().filter(|e| !text.contains(*e)).collect();
        if missing.is_empty() {
            return text;
        }
        assert!(Instant::now() < deadline, "missing {missing:?} in:\n{text}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn metrics_count_requests_and_rebuilds() {
    init_tracing();
    bounded(async {
        let backend = echo("web", "web-0").await;
        let closed = closed_port().await;
        let proxy = TestProxy::with_routes(&[
            Route::new("web.example.com", "web", vec![backend.addr()]),
            Route::new("down.example.com", "down", vec![closed]),
        ])
        .await;
        for _ in 0..3 {
            assert_eq!(get(proxy.http, "web.example.com", "/").await.status, 200);
        }
        assert_eq!(get(proxy.http, "WEB.example.com:80", "/status/503").await.status, 503);
        assert_eq!(get(proxy.http, "nowhere.example.com", "/").await.status, 404);
        assert_eq!(get(proxy.http, "down.example.com", "/").await.status, 502);

        let text = metrics_with(
            proxy.admin,
            &[
                r#"sluice_requests_total{host="web.example.com",service="default/web:80",status="2xx"} 3"#,
                r#"sluice_requests_total{host="web.example.com",service="default/web:80",status="5xx"} 1"#,
                r#"sluice_requests_total{host="_",service="",status="4xx"} 1"#,
                r#"sluice_requests_total{host="down.example.com",service="default/down:80",status="5xx"} 1"#,
                r#"sluice_upstream_errors_total{service="default/down:80",kind="connect"} 1"#,
                r#"sluice_request_duration_seconds_count{service="default/web:80"} 4"#,
                "sluice_table_rebuilds_total 1",
                "sluice_table_rebuild_duration_seconds_count 1",
            ],
        )
        .await;
        assert!(text.contains("# TYPE sluice_request_duration_seconds histogram"));
        assert!(text.ends_with("# EOF\n"));
    })
    .await;
}

#[tokio::test]
async fn health_and_readiness() {
    init_tracing();
    bounded(async {
        let mut proxy = TestProxy::with_routes(&[]).await;
        assert_eq!(admin_get(proxy.admin, "/healthz").await.0, 200);
        assert_eq!(admin_get(proxy.admin, "/readyz").await.0, 503);
        proxy.readiness.set_ready(true);
        assert_eq!(admin_get(proxy.admin, "/readyz").await.0, 200);
        proxy.readiness.set_ready(false);
        assert_eq!(admin_get(proxy.admin, "/readyz").await.0, 503);
        proxy.readiness.set_ready(true);
        assert_eq!(admin_get(proxy.admin, "/nope").await.0, 404);

        // Shutting down turns readiness off.
        let serving = proxy.begin_shutdown();
        tokio::time::timeout(Duration::from_secs(10), serving)
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        assert!(!proxy.readiness.is_ready());
    })
    .await;
}

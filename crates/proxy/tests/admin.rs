//! The admin listener: /metrics, /healthz, /readyz, the dashboard's /api/v1/status and
//! /api/v1/explain.

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
        // A body, through hyper's front end: counted in request bytes, method POST.
        let client = hyper_util::client::legacy::Client::builder(
            hyper_util::rt::TokioExecutor::new(),
        )
        .build_http::<http_body_util::Full<bytes::Bytes>>();
        let request = http::Request::post(format!("http://{}/upload", proxy.http))
            .header("host", "web.example.com")
            .body(http_body_util::Full::new(bytes::Bytes::from_static(b"0123456789")))
            .unwrap();
        let response = client.request(request).await.unwrap();
        assert_eq!(response.status(), 200);
        let _ = collect(response).await;

        // ingress-nginx's label set (namespace, ingress, service, host, method, exact
        // status), without the path, which is unbounded; `kind` says which API the route
        // came from.
        let web = r#"namespace="default",kind="Ingress",ingress="ing-0",service="default/web:80",host="web.example.com""#;
        let down = r#"namespace="default",kind="Ingress",ingress="ing-1",service="default/down:80",host="down.example.com""#;
        let expected = [
            format!(r#"sluice_requests_total{{{web},method="GET",status="200"}} 3"#),
            format!(r#"sluice_requests_total{{{web},method="GET",status="503"}} 1"#),
            format!(r#"sluice_requests_total{{{web},method="POST",status="200"}} 1"#),
            r#"sluice_requests_total{namespace="",kind="",ingress="",service="",host="_",method="GET",status="404"} 1"#.to_owned(),
            format!(r#"sluice_requests_total{{{down},method="GET",status="502"}} 1"#),
            format!(r#"sluice_request_duration_seconds_count{{{web},method="GET",status="200"}} 3"#),
            r#"sluice_request_bytes_total{namespace="default",kind="Ingress",ingress="ing-0",service="default/web:80"} 10"#.to_owned(),
            r#"sluice_upstream_errors_total{service="default/down:80",kind="connect"} 1"#.to_owned(),
            r#"sluice_upstream_connect_duration_seconds_count{service="default/web:80"}"#.to_owned(),
            r#"sluice_upstream_header_duration_seconds_count{service="default/web:80"} 5"#.to_owned(),
            "sluice_table_rebuilds_total 1".to_owned(),
            "sluice_table_rebuild_duration_seconds_count 1".to_owned(),
            "sluice_table_generation 1".to_owned(),
            "sluice_connections_accepted_total".to_owned(),
            "sluice_connections_active".to_owned(),
        ];
        let expected: Vec<&str> = expected.iter().map(String::as_str).collect();
        let text = metrics_with(proxy.admin, &expected).await;
        assert!(text.contains("# TYPE sluice_request_duration_seconds histogram"));
        assert!(text.ends_with("# EOF\n"));
        // Response bytes: the echo's bodies, counted when each response ended.
        let sent: u64 = text
            .lines()
            .find(|l| l.starts_with(r#"sluice_response_bytes_total{namespace="default",kind="Ingress",ingress="ing-0""#))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or(0);
        assert!(sent > 0, "{text}");
        // No series carries the path.
        assert!(!text.contains("/upload"), "{text}");
        // Every metric the shipped Grafana dashboard queries is exported.
        let dashboard: serde_json::Value =
            serde_json::from_str(include_str!("../../../deploy/grafana/sluice.json")).unwrap();
        let names = regex::Regex::new(r"sluice_[a-z_]+").unwrap();
        let mut queried = 0;
        for panel in dashboard["panels"].as_array().unwrap() {
            for target in panel["targets"].as_array().unwrap() {
                for name in names.find_iter(target["expr"].as_str().unwrap()) {
                    let family = name.as_str().trim_end_matches("_bucket");
                    assert!(
                        text.contains(&format!("# TYPE {family} "))
                            || text.contains(&format!("{family}{{"))
                            || text.contains(&format!("{family} ")),
                        "deploy/grafana/sluice.json queries {family}, which /metrics lacks"
                    );
                    queried += 1;
                }
            }
        }
        assert!(queried >= 10, "{queried}");
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

/// The dashboard's data: every route with its Ingress, backend, endpoints and policy, rates
/// that move under traffic, certificates with expiry, and warnings.
#[tokio::test]
async fn status_lists_routes_with_live_figures() {
    init_tracing();
    bounded(async {
        let backend = echo("web", "web-0").await;
        let (_, cert, key) = ca_pem_and_leaf("tls.example.com");
        let proxy = TestProxy::with_routes(&[
            Route::new("web.example.com", "web", vec![backend.addr()])
                .with_annotation("nginx.ingress.kubernetes.io/limit-rps", "1000"),
            Route::new("empty.example.com", "empty", vec![]),
            Route::new("tls.example.com", "web", vec![backend.addr()]).with_tls(cert, key),
        ])
        .await;
        proxy.table.set_warnings(vec![sluice_proxy::Warning {
            object: "Ingress default/bad".into(),
            field: "metadata.annotations.x".into(),
            reason: "UnsupportedAnnotation".into(),
            message: "Ingress default/bad: unsupported".into(),
        }]);
        let (status, page) = admin_get(proxy.admin, "/").await;
        assert_eq!(status, 200);
        assert!(page.contains("/api/v1/status"), "the page polls the status");
        assert!(
            !page.contains("src=\"http") && !page.contains("href=\"http"),
            "no external assets"
        );

        let status = |text: String| -> serde_json::Value { serde_json::from_str(&text).unwrap() };
        let route = |doc: &serde_json::Value, host: &str| -> serde_json::Value {
            doc["routes"]
                .as_array()
                .unwrap()
                .iter()
                .find(|r| r["host"] == host)
                .cloned()
                .unwrap_or_else(|| panic!("no route {host} in {doc}"))
        };
        let doc = status(admin_get(proxy.admin, "/api/v1/status").await.1);
        let web = route(&doc, "web.example.com");
        assert_eq!(web["ingress"], "default/ing-0");
        assert_eq!(web["backend"], "default/web:80");
        assert_eq!(web["endpoints"]["ready"], 1);
        assert_eq!(web["path"], "/");
        assert!(
            web["policy"][0].as_str().unwrap().contains("1000 req/s"),
            "{web}"
        );
        assert_eq!(route(&doc, "empty.example.com")["endpoints"]["ready"], 0);
        let warnings = doc["warnings"].to_string();
        assert!(warnings.contains("UnsupportedAnnotation"), "{warnings}");
        assert!(
            warnings.contains("NoReadyEndpoints") && warnings.contains("default/empty:80"),
            "{warnings}"
        );
        let certs = doc["certificates"].as_array().unwrap();
        assert_eq!(certs.len(), 1, "{doc}");
        assert_eq!(certs[0]["names"][0], "tls.example.com");
        assert!(certs[0]["days_left"].as_i64().unwrap() > 0, "{doc}");

        // Traffic moves the figures within a few samples (bounded: 200 requests, 20 s).
        let deadline = Instant::now() + Duration::from_secs(20);
        let mut sent = 0;
        loop {
            for _ in 0..20 {
                assert_eq!(get(proxy.http, "web.example.com", "/").await.status, 200);
                sent += 1;
            }
            let doc = status(admin_get(proxy.admin, "/api/v1/status").await.1);
            let stats = &route(&doc, "web.example.com")["stats"];
            let busy = stats["rps"]
                .as_array()
                .unwrap()
                .iter()
                .any(|v| v.as_f64() > Some(0.0));
            if busy && stats["requests"] == sent {
                assert!(
                    stats["p99_ms"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .any(|v| v.is_number()),
                    "{stats}"
                );
                break;
            }
            assert!(
                Instant::now() < deadline && sent < 200,
                "figures never moved: {stats}"
            );
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    })
    .await;
}

#[tokio::test]
async fn explain_is_answered_by_the_control_plane() {
    init_tracing();
    bounded(async {
        let proxy = TestProxy::with_routes(&[]).await;
        let (status, _) = admin_get(proxy.admin, "/api/v1/explain?host=a.example&path=/").await;
        assert_eq!(status, 404, "no control plane: nobody answers");
        proxy.table.set_explainer(|r| {
            let https = if r.https { " over HTTPS" } else { "" };
            format!(
                "asked about {} {} {} query {:?} headers {:?}{https}\n",
                r.method, r.host, r.path, r.query, r.headers
            )
        });
        let (status, text) = admin_get(
            proxy.admin,
            "/api/v1/explain?host=A.example&path=/a%20b%2Bc",
        )
        .await;
        assert_eq!(status, 200);
        assert_eq!(text, "asked about  A.example /a b+c query \"\" headers []\n");
        let (status, text) = admin_get(
            proxy.admin,
            "/api/v1/explain?url=http%3A%2F%2Fshop.example%2Fx%3Fq%3D1",
        )
        .await;
        assert_eq!(
            (status.as_u16(), text.as_str()),
            (200, "asked about  shop.example /x query \"q=1\" headers []\n")
        );
        // Method, header fields and the scheme reach the explainer (`sluice explain -X -H`).
        let (status, text) = admin_get(
            proxy.admin,
            "/api/v1/explain?url=https%3A%2F%2Fshop.example%2F&method=put&header=X-Version%3A%202&header=Accept%3A%20*%2F*",
        )
        .await;
        assert_eq!(
            (status.as_u16(), text.as_str()),
            (
                200,
                "asked about PUT shop.example / query \"\" headers [(\"X-Version\", \"2\"), (\"Accept\", \"*/*\")] over HTTPS\n"
            )
        );
        let bad = admin_get(proxy.admin, "/api/v1/explain?host=a&header=nocolon").await;
        assert_eq!(bad.0, 400);
        assert_eq!(admin_get(proxy.admin, "/api/v1/explain").await.0, 400);
    })
    .await;
}

/// #33: a rule that answers every request itself (ingress-nginx's `permanent-redirect`, a
/// Gateway API rule with only a `RequestRedirect`) never reaches its backend, so an
/// endpointless or absent backend there is no `NoReadyEndpoints` warning, and the
/// redirect-only HTTPRoute rule's requests are counted with an empty `service` label, not
/// a made-up `default/:0`.
#[tokio::test]
async fn redirect_only_rules_raise_no_endpoint_warning_and_name_no_service() {
    init_tracing();
    bounded(async {
        let proxy = TestProxy::start(sluice_proxy::ProxyArgs::loopback()).await;
        let mut inputs = inputs(&[Route::new("moved.example.com", "gone", vec![])
            .with_annotation("nginx.ingress.kubernetes.io/permanent-redirect", "https://new.example.com")]);
        add_gateway(
            &mut inputs,
            serde_json::json!({"listeners": [{"name": "http", "port": 80, "protocol": "HTTP"}]}),
            &[("old-site", serde_json::json!({"parentRefs": [{"name": "gw"}],
                "hostnames": ["old.example.com"], "rules": [
                {"filters": [{"type": "RequestRedirect",
                              "requestRedirect": {"hostname": "new.example.com", "statusCode": 301}}]}]}))],
        );
        let compiled = sluice_routing::compile(&inputs, &sluice_routing::CompileOptions::default());
        proxy.table.update(compiled.table, Duration::from_millis(1));

        // ingress-nginx: the redirect is answered before `proxy_pass` finds no endpoint.
        assert_eq!(get(proxy.http, "moved.example.com", "/").await.status, 301);
        assert_eq!(get(proxy.http, "old.example.com", "/x").await.status, 301);
        let (_, text) = admin_get(proxy.admin, "/api/v1/status").await;
        let doc: serde_json::Value = serde_json::from_str(&text).unwrap();
        let warnings = doc["warnings"].to_string();
        assert!(!warnings.contains("NoReadyEndpoints"), "{warnings}");
        let old = doc["routes"]
            .as_array()
            .and_then(|r| r.iter().find(|r| r["host"] == "old.example.com"))
            .cloned()
            .unwrap_or_default();
        assert_eq!(old["backend"], "", "{old}");
        let metrics = metrics_with(
            proxy.admin,
            &["sluice_requests_total{namespace=\"default\",kind=\"HTTPRoute\",ingress=\"old-site\",service=\"\","],
        )
        .await;
        assert!(!metrics.contains("service=\"default/:0\""), "{metrics}");
    })
    .await;
}

/// #33: the metrics ingress-nginx users alert on have their sluice counterpart: the build's
/// version (`nginx_ingress_controller_build_info`) and each served certificate's expiry by
/// Secret and host (`nginx_ingress_controller_ssl_expire_time_seconds`), which follows the
/// table: a certificate no longer served leaves the metrics.
#[tokio::test]
async fn build_info_and_certificate_expiry_are_exported() {
    init_tracing();
    bounded(async {
        let web = echo("web", "web-0").await;
        let (cert, key, _) = ca_and_leaf("secure.example");
        let proxy = TestProxy::start(sluice_proxy::ProxyArgs::loopback()).await;
        proxy.route(&[Route::new("secure.example", "web", vec![web.addr()]).with_tls(cert, key)]);
        let build = format!("sluice_build_info{{version=\"{}\"}} 1", env!("CARGO_PKG_VERSION"));
        let expiry =
            "sluice_ssl_certificate_expiry_timestamp_seconds{namespace=\"default\",secret=\"tls-0\",host=\"secure.example\"} ";
        let text = metrics_with(proxy.admin, &[&build, expiry]).await;
        let line = text.lines().find(|l| l.starts_with(expiry)).unwrap_or_default();
        let not_after: i64 = line[expiry.len()..].trim().parse().expect("a timestamp");
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs() as i64;
        assert!(not_after > now, "{line}");
        // The certificate is no longer served: its series goes.
        proxy.route(&[Route::new("plain.example", "web", vec![web.addr()])]);
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let (_, text) = admin_get(proxy.admin, "/metrics").await;
            if !text.contains(expiry) {
                break;
            }
            assert!(Instant::now() < deadline, "still exported:\n{text}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
}

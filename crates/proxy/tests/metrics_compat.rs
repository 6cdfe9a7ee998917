//! `--metrics-compat ingress-nginx` (#33): the admin port's `/metrics`, scraped over HTTP
//! from a real proxy after real requests, carries sluice's own series (with the route's
//! `kind`) and ingress-nginx's `nginx_ingress_controller_*` families with ingress-nginx's
//! names, labels and buckets (`internal/ingress/metric/collectors/{socket,controller,
//! nginx_status}.go`), fed by the same counts.

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use clap::Parser as _;
use common::*;
use serde_json::json;
use sluice_proxy::{MetricsCompat, Proxy, ProxyArgs};

/// One sample of a scrape: its labels and value.
type Sample = (BTreeMap<String, String>, f64);

/// The samples named exactly `name` in an OpenMetrics text.
fn samples(text: &str, name: &str) -> Vec<Sample> {
    text.lines()
        .filter_map(|line| {
            let (series, value) = line.rsplit_once(' ')?;
            let (sample, labels) = match series.split_once('{') {
                Some((sample, labels)) => (sample, labels.strip_suffix('}')?),
                None => (series, ""),
            };
            if sample != name {
                return None;
            }
            let labels = labels
                .split(",")
                .filter(|pair| !pair.is_empty())
                .filter_map(|pair| {
                    let (key, value) = pair.split_once('=')?;
                    Some((key.to_owned(), value.trim_matches('"').to_owned()))
                })
                .collect();
            Some((labels, value.parse().ok()?))
        })
        .collect()
}

/// The sum of the samples of `name` whose labels include every pair of `with`.
fn value(text: &str, name: &str, with: &[(&str, &str)]) -> f64 {
    samples(text, name)
        .iter()
        .filter(|(labels, _)| {
            with.iter()
                .all(|(k, v)| labels.get(*k).map(String::as_str) == Some(*v))
        })
        .map(|(_, v)| v)
        .sum()
}

/// Scrapes `/metrics` until `done` holds for it (bounded), returning it.
async fn scrape_until(admin: std::net::SocketAddr, done: impl Fn(&str) -> bool) -> String {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let (status, text) = admin_get(admin, "/metrics").await;
        assert_eq!(status, 200);
        if done(&text) {
            return text;
        }
        assert!(Instant::now() < deadline, "never complete:\n{text}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// ingress-nginx's request labels for `ingress`/`service` (besides status and method).
fn nginx_route<'a>(ingress: &'a str, service: &'a str, host: &'a str) -> Vec<(&'a str, &'a str)> {
    vec![
        ("namespace", "default"),
        ("ingress", ingress),
        ("service", service),
        ("host", host),
        ("path", ""),
        ("canary", ""),
    ]
}

#[tokio::test]
async fn scrape_carries_sluice_and_ingress_nginx_names_for_the_same_requests() {
    init_tracing();
    bounded(async {
        let web = echo("web", "web-0").await;
        let api = echo("api", "api-0").await;
        let (cert, key, _) = ca_and_leaf("secure.example");
        // A real proxy that takes part in leader election, as `sluice controller` runs it.
        let mut proxy = Proxy::new(ProxyArgs {
            metrics_compat: MetricsCompat::IngressNginx,
            controller_class: "sluice.dev/ingress-controller".to_owned(),
            ..ProxyArgs::loopback()
        })
        .expect("proxy builds");
        let leader = proxy.leader_status();
        leader.set(true);
        let bound = proxy.bind().await.expect("proxy binds");
        let (http, admin, table) = (bound.http_addr(), bound.admin_addr(), bound.table_handle());
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let serving = tokio::spawn(bound.serve(async move {
            let _ = stopped.await;
        }));

        // An Ingress `ing-0` (with a TLS Secret) and an HTTPRoute `api-route`.
        let mut objects = inputs(&[
            Route::new("web.example.com", "web", vec![web.addr()]),
            Route::new("api-backend.example", "api", vec![api.addr()]),
            Route::new("secure.example", "web", vec![web.addr()]).with_tls(cert, key),
        ]);
        add_gateway(
            &mut objects,
            json!({"listeners": [{"name": "http", "port": 80, "protocol": "HTTP"}]}),
            &[(
                "api-route",
                json!({"parentRefs": [{"name": "gw"}], "hostnames": ["api.example.com"],
                       "rules": [{"backendRefs": [{"name": "api", "port": 80}]}]}),
            )],
        );
        let compiled =
            sluice_routing::compile(&objects, &sluice_routing::CompileOptions::default());
        table.update(compiled.table, Duration::from_millis(1));

        for _ in 0..3 {
            assert_eq!(get(http, "web.example.com", "/").await.status, 200);
        }
        assert_eq!(
            get(http, "web.example.com", "/status/503").await.status,
            503
        );
        for _ in 0..2 {
            assert_eq!(get(http, "api.example.com", "/v1").await.status, 200);
        }
        assert_eq!(get(http, "nowhere.example.com", "/").await.status, 404);

        // Durations are observed when each response ends: wait for all seven.
        let text = scrape_until(admin, |text| {
            value(text, "sluice_request_duration_seconds_count", &[]) == 7.0
        })
        .await;

        // sluice's names: the route's kind tells the Ingress from the HTTPRoute.
        let sluice = |kind: &str, name: &str, service: &str, status: &str| {
            value(
                &text,
                "sluice_requests_total",
                &[
                    ("namespace", "default"),
                    ("kind", kind),
                    ("ingress", name),
                    ("service", service),
                    ("method", "GET"),
                    ("status", status),
                ],
            )
        };
        assert_eq!(
            sluice("Ingress", "ing-0", "default/web:80", "200"),
            3.0,
            "{text}"
        );
        assert_eq!(
            sluice("Ingress", "ing-0", "default/web:80", "503"),
            1.0,
            "{text}"
        );
        assert_eq!(
            sluice("HTTPRoute", "api-route", "default/api:80", "200"),
            2.0,
            "{text}"
        );
        let unrouted = [
            ("namespace", ""),
            ("kind", ""),
            ("ingress", ""),
            ("status", "404"),
        ];
        assert_eq!(
            value(&text, "sluice_requests_total", &unrouted),
            1.0,
            "{text}"
        );

        // ingress-nginx's names, labels and values for the same requests.
        let pod = std::env::var("POD_NAME").unwrap_or_default();
        let pod_namespace = std::env::var("POD_NAMESPACE").unwrap_or_default();
        let nginx = |route: Vec<(&str, &str)>, status: &str| {
            let mut with = route;
            with.extend([
                ("method", "GET"),
                ("status", status),
                // ingress-nginx fills it with its `--controller-class`; sluice with its
                // own (the IngressClass `spec.controller` value it serves).
                ("controller_class", "sluice.dev/ingress-controller"),
                ("controller_pod", pod.as_str()),
                ("controller_namespace", pod_namespace.as_str()),
            ]);
            (
                value(&text, "nginx_ingress_controller_requests", &with),
                value(
                    &text,
                    "nginx_ingress_controller_request_duration_seconds_count",
                    &with,
                ),
            )
        };
        let web_route = || nginx_route("ing-0", "web", "web.example.com");
        assert_eq!(nginx(web_route(), "200"), (3.0, 3.0), "{text}");
        assert_eq!(nginx(web_route(), "503"), (1.0, 1.0), "{text}");
        let api_route = nginx_route("api-route", "api", "api.example.com");
        assert_eq!(nginx(api_route, "200"), (2.0, 2.0), "{text}");
        let mut unrouted = nginx_route("", "", "_");
        unrouted[0] = ("namespace", "");
        assert_eq!(nginx(unrouted, "404"), (1.0, 1.0), "{text}");
        assert_eq!(value(&text, "nginx_ingress_controller_requests", &[]), 7.0);
        // Counters under the Go client's sample names (dashboards query them so).
        assert!(
            text.contains("# TYPE nginx_ingress_controller_requests unknown\n"),
            "{text}"
        );
        assert!(
            !text.contains("nginx_ingress_controller_requests_total"),
            "{text}"
        );

        // The duration histogram has ingress-nginx's default `--time-buckets`
        // (Prometheus' DefBuckets), cumulative, ending in +Inf with every request.
        assert!(
            text.contains("# TYPE nginx_ingress_controller_request_duration_seconds histogram\n")
        );
        let mut with = web_route();
        with.extend([("method", "GET"), ("status", "200")]);
        let buckets: Vec<(String, f64)> = samples(
            &text,
            "nginx_ingress_controller_request_duration_seconds_bucket",
        )
        .into_iter()
        .filter(|(labels, _)| {
            with.iter()
                .all(|(k, v)| labels.get(*k).map(String::as_str) == Some(*v))
        })
        .map(|(labels, v)| (labels["le"].clone(), v))
        .collect();
        let bounds: Vec<&str> = buckets.iter().map(|(le, _)| le.as_str()).collect();
        assert_eq!(
            bounds,
            [
                "0.005", "0.01", "0.025", "0.05", "0.1", "0.25", "0.5", "1.0", "2.5", "5.0",
                "10.0", "+Inf"
            ],
            "{text}"
        );
        assert!(buckets.windows(2).all(|w| w[0].1 <= w[1].1), "{buckets:?}");
        assert_eq!(buckets.last().map(|(_, v)| *v), Some(3.0));
        let sum = value(
            &text,
            "nginx_ingress_controller_request_duration_seconds_sum",
            &with,
        );
        let sluice_sum = value(
            &text,
            "sluice_request_duration_seconds_sum",
            &[
                ("ingress", "ing-0"),
                ("host", "web.example.com"),
                ("status", "200"),
            ],
        );
        assert!(
            sum > 0.0 && (sum - sluice_sum).abs() < 1e-9,
            "{sum} vs {sluice_sum}"
        );

        // Certificate expiry, build info and leader status under both names.
        let sluice_expiry = value(
            &text,
            "sluice_ssl_certificate_expiry_timestamp_seconds",
            &[
                ("namespace", "default"),
                ("secret", "tls-2"),
                ("host", "secure.example"),
            ],
        );
        let nginx_expiry = value(
            &text,
            "nginx_ingress_controller_ssl_expire_time_seconds",
            &[
                ("namespace", "default"),
                ("secret_name", "tls-2"),
                ("host", "secure.example"),
                ("class", "sluice.dev/ingress-controller"),
            ],
        );
        assert!(sluice_expiry > 1.7e9, "{text}");
        assert_eq!(nginx_expiry, sluice_expiry, "{text}");
        let version = env!("CARGO_PKG_VERSION");
        assert_eq!(
            value(&text, "sluice_build_info", &[("version", version)]),
            1.0
        );
        assert_eq!(
            value(
                &text,
                "nginx_ingress_controller_build_info",
                &[("release", version)]
            ),
            1.0
        );
        assert_eq!(value(&text, "sluice_leader", &[]), 1.0, "{text}");
        assert_eq!(
            value(
                &text,
                "nginx_ingress_controller_leader_election_status",
                &[]
            ),
            1.0
        );

        // One table swap: one successful "reload".
        assert_eq!(value(&text, "sluice_table_rebuilds_total", &[]), 1.0);
        assert_eq!(value(&text, "nginx_ingress_controller_success", &[]), 1.0);
        assert_eq!(
            value(
                &text,
                "nginx_ingress_controller_config_last_reload_successful",
                &[]
            ),
            1.0
        );
        assert_eq!(
            value(
                &text,
                "nginx_ingress_controller_config_last_reload_successful_timestamp_seconds",
                &[]
            ),
            value(&text, "sluice_table_last_swap_timestamp_seconds", &[]),
        );
        assert_eq!(
            value(&text, "nginx_ingress_controller_config_hash", &[]),
            1.0
        );
        // Connections: each request above came on a connection of its own.
        let accepted = value(&text, "sluice_connections_accepted_total", &[]);
        assert!(accepted >= 7.0, "{text}");
        assert_eq!(
            value(
                &text,
                "nginx_ingress_controller_nginx_process_connections_total",
                &[("state", "accepted")]
            ),
            accepted
        );
        assert_eq!(
            value(
                &text,
                "nginx_ingress_controller_nginx_process_connections",
                &[("state", "active")]
            ),
            value(&text, "sluice_connections_active", &[])
        );

        // A follower says 0.
        leader.set(false);
        let text = scrape_until(admin, |text| text.contains("sluice_leader 0")).await;
        assert_eq!(
            value(
                &text,
                "nginx_ingress_controller_leader_election_status",
                &[]
            ),
            0.0
        );

        let _ = stop.send(());
        tokio::time::timeout(Duration::from_secs(40), serving)
            .await
            .expect("proxy shut down in time")
            .expect("proxy task did not panic")
            .expect("proxy served without error");
    })
    .await;
}

/// Default off: sluice's names only.
#[tokio::test]
async fn without_the_flag_only_sluice_names_are_exported() {
    init_tracing();
    bounded(async {
        let web = echo("web", "web-0").await;
        let proxy =
            TestProxy::with_routes(&[Route::new("web.example.com", "web", vec![web.addr()])]).await;
        assert_eq!(get(proxy.http, "web.example.com", "/").await.status, 200);
        let text = scrape_until(proxy.admin, |text| {
            value(
                text,
                "sluice_requests_total",
                &[("kind", "Ingress"), ("ingress", "ing-0")],
            ) == 1.0
        })
        .await;
        let compat = |line: &str| {
            line.starts_with("nginx_ingress_controller_")
                || line.starts_with("# TYPE nginx_ingress_controller_")
        };
        assert!(!text.lines().any(compat), "{text}");
        proxy.shutdown().await;
    })
    .await;
}

#[derive(clap::Parser, Debug)]
struct Cli {
    #[command(flatten)]
    proxy: ProxyArgs,
}

/// `--metrics-compat` takes `off` (the default) or `ingress-nginx`; anything else is refused,
/// naming the accepted values.
#[test]
fn the_flag_accepts_off_and_ingress_nginx_only() {
    let parse =
        |args: &[&str]| Cli::try_parse_from(std::iter::once("sluice").chain(args.iter().copied()));
    assert_eq!(parse(&[]).unwrap().proxy.metrics_compat, MetricsCompat::Off);
    assert_eq!(
        parse(&["--metrics-compat", "ingress-nginx"])
            .unwrap()
            .proxy
            .metrics_compat,
        MetricsCompat::IngressNginx
    );
    assert_eq!(
        parse(&["--metrics-compat", "off"])
            .unwrap()
            .proxy
            .metrics_compat,
        MetricsCompat::Off
    );
    let refused = parse(&["--metrics-compat", "nginx"])
        .unwrap_err()
        .to_string();
    assert!(
        refused.contains("ingress-nginx") && refused.contains("off"),
        "{refused}"
    );
}

/// The metric families ingress-nginx's official Grafana dashboards query
/// (`deploy/grafana/dashboards/nginx.json` and `request-handling-performance.json` in
/// kubernetes/ingress-nginx; `_bucket`, `_sum` and `_count` taken off).
const DASHBOARD_FAMILIES: &[&str] = &[
    "config_hash",
    "config_last_reload_successful",
    "config_last_reload_successful_timestamp_seconds",
    "nginx_process_connections",
    "nginx_process_cpu_seconds_total",
    "nginx_process_resident_memory_bytes",
    "request_duration_seconds",
    "request_size",
    "requests",
    "response_duration_seconds",
    "response_size",
    "ssl_expire_time_seconds",
    "success",
];

/// Every family the dashboards query is exported under `--metrics-compat ingress-nginx`
/// or listed in docs/metrics.md's table as not exported (with why), and the table does not call one
/// exported that is not.
#[tokio::test]
async fn every_dashboard_family_is_exported_or_listed_as_not_exported() {
    init_tracing();
    bounded(async {
        let proxy = TestProxy::start(ProxyArgs {
            metrics_compat: MetricsCompat::IngressNginx,
            ..ProxyArgs::loopback()
        })
        .await;
        proxy.route(&[]);
        let (_, text) = admin_get(proxy.admin, "/metrics").await;
        let readme = include_str!("../../../docs/metrics.md");
        // The table's rows: "| `nginx_ingress_controller_NAME` | ... |"; "not exported" rows say so.
        let row = |family: &str| {
            let cell = format!("| `nginx_ingress_controller_{family}` |");
            readme.lines().find(|line| line.starts_with(&cell))
        };
        for family in DASHBOARD_FAMILIES {
            let exported = text.contains(&format!("# TYPE nginx_ingress_controller_{family} "));
            let row =
                row(family).unwrap_or_else(|| panic!("docs/metrics.md has no row for {family}"));
            assert_eq!(
                !row.contains("not exported"),
                exported,
                "{family}: docs/metrics.md says {row:?}, scrape:\n{text}"
            );
        }
        proxy.shutdown().await;
    })
    .await;
}

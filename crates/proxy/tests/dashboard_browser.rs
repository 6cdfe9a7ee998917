//! The dashboard in a real browser: headless Chromium loads the admin page of a running
//! proxy with a few routes, the test reads the rendered table, sends traffic, checks that
//! the figures change, and saves a screenshot (`$CARGO_TARGET_TMPDIR/dashboard.png`).

mod common;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::*;

/// Renders `url` in headless Chromium: the DOM after the page's scripts ran, and a
/// screenshot when `screenshot` is given. `timeout` bounds the browser's whole run.
fn chromium(url: &str, profile: &Path, screenshot: Option<&Path>) -> String {
    let mut command = Command::new("timeout");
    command.args([
        "-k",
        "5",
        "60",
        "chromium",
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--no-first-run",
        "--window-size=1400,700",
        // Lets the page's fetch and first render finish before the dump or the shot.
        "--virtual-time-budget=3000",
    ]);
    command.arg(format!("--user-data-dir={}", profile.display()));
    match screenshot {
        Some(path) => command.arg(format!("--screenshot={}", path.display())),
        None => command.arg("--dump-dom"),
    };
    let output = command
        .arg(url)
        .output()
        .expect("chromium runs (Debian package `chromium`, installed by scripts/testenv.sh)");
    assert!(
        output.status.success(),
        "chromium failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// The cells of the rendered row `data-route="<route>"`, as text.
fn row(dom: &str, route: &str) -> Vec<String> {
    let start = dom
        .find(&format!("data-route=\"{route}\""))
        .unwrap_or_else(|| panic!("no row {route} in the rendered page:\n{dom}"));
    let end = dom[start..].find("</tr>").map_or(dom.len(), |e| start + e);
    let cells = regex::Regex::new(r"<td[^>]*>(.*?)</td>").unwrap();
    let tags = regex::Regex::new(r"<[^>]+>").unwrap();
    cells
        .captures_iter(&dom[start..end])
        .map(|c| tags.replace_all(&c[1], "").trim().to_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dashboard_renders_routes_and_moves_under_load() {
    init_tracing();
    bounded(async {
        let web = echo("web", "web-0").await;
        let (_, cert, key) = ca_pem_and_leaf("secure.example.com");
        let proxy = TestProxy::with_routes(&[
            Route::new("shop.example.com", "web", vec![web.addr()])
                .with_annotation("nginx.ingress.kubernetes.io/limit-rps", "500"),
            Route::new("shop.example.com", "api", vec![web.addr()]).with_path("/api"),
            Route::new("old.example.com", "retired", vec![]),
            Route::new("secure.example.com", "web", vec![web.addr()]).with_tls(cert, key),
        ])
        .await;
        let url = format!("http://{}/", proxy.admin);
        let profile = tempfile::tempdir().unwrap();

        let dom = tokio::task::spawn_blocking({
            let (url, profile) = (url.clone(), profile.path().to_owned());
            move || chromium(&url, &profile, None)
        })
        .await
        .unwrap();
        // Columns: host, path, ingress, backend, endpoints, req/s, errors, p99, total.
        let shop = row(&dom, "shop.example.com/");
        assert_eq!(shop[0], "shop.example.com");
        assert!(shop[1].starts_with("/"), "{shop:?}");
        assert_eq!(shop[2], "default/ing-0");
        assert!(
            shop[3].contains("default/web:80") && shop[3].contains("500 req/s"),
            "{shop:?}"
        );
        assert_eq!(shop[4], "1/1");
        assert_eq!(shop[8], "0", "no traffic yet: {shop:?}");
        assert_eq!(row(&dom, "old.example.com/")[4], "0/0");
        assert!(dom.contains("NoReadyEndpoints"), "warnings are rendered");
        let certs = &dom[dom.find("id=\"certificates\"").expect("certificates table")..];
        assert!(
            certs.contains("default/tls-3"),
            "the route's certificate is listed"
        );

        // Paced load while the browser looks (bounded: 8 s or 2,000 requests).
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let load = tokio::spawn({
            let (addr, stop) = (proxy.http, std::sync::Arc::clone(&stop));
            async move {
                let started = std::time::Instant::now();
                let mut sent = (0u64, 0u64);
                while !stop.load(std::sync::atomic::Ordering::Relaxed)
                    && started.elapsed() < Duration::from_secs(8)
                    && sent.0 + sent.1 < 2_000
                {
                    let api = (sent.0 + sent.1).is_multiple_of(3);
                    let path = if api { "/api/x" } else { "/" };
                    assert_eq!(get(addr, "shop.example.com", path).await.status, 200);
                    if api {
                        sent.1 += 1;
                    } else {
                        sent.0 += 1;
                    }
                    tokio::time::sleep(Duration::from_millis(4)).await;
                }
                sent
            }
        });
        // Samples are 2 s apart: wait (at most 10 s) until two were taken under load, so
        // the sparkline has a line to draw, however slow the machine.
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            let (_, text) = admin_get(proxy.admin, "/api/v1/status").await;
            let doc: serde_json::Value = serde_json::from_str(&text).unwrap_or_default();
            let moving = doc["routes"].as_array().into_iter().flatten().any(|r| {
                r["host"] == "shop.example.com"
                    && r["stats"]["rps"].as_array().is_some_and(|rps| {
                        rps.iter().filter(|v| v.as_f64() > Some(0.0)).count() >= 2
                    })
            });
            if moving || std::time::Instant::now() > deadline {
                break;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        let dom = tokio::task::spawn_blocking({
            let (url, profile) = (url.clone(), profile.path().to_owned());
            move || chromium(&url, &profile, None)
        })
        .await
        .unwrap();
        let shop = row(&dom, "shop.example.com/");
        let rps: f64 = shop[5].parse().unwrap_or(0.0);
        let total: u64 = shop[8].parse().unwrap_or(0);
        assert!(
            rps > 0.0 && total > 0,
            "figures did not move under load: {shop:?}"
        );
        let start = dom.find("data-route=\"shop.example.com/\"").unwrap();
        assert!(dom[start..].contains("<polyline"), "sparklines drawn");
        let shot = Path::new(env!("CARGO_TARGET_TMPDIR")).join("dashboard.png");
        let _ = std::fs::remove_file(&shot);
        tokio::task::spawn_blocking({
            let (url, profile, shot) = (url, profile.path().to_owned(), shot.clone());
            move || chromium(&url, &profile, Some(&shot))
        })
        .await
        .unwrap();
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let (web_sent, api_sent) = load.await.unwrap();
        // Every request is counted, on its own route.
        let (_, status) = admin_get(proxy.admin, "/api/v1/status").await;
        let doc: serde_json::Value = serde_json::from_str(&status).unwrap();
        let requests = |path: &str| {
            doc["routes"]
                .as_array()
                .unwrap()
                .iter()
                .find(|r| r["host"] == "shop.example.com" && r["path"] == path)
                .map(|r| r["stats"]["requests"].as_u64().unwrap())
        };
        assert_eq!(requests("/"), Some(web_sent));
        assert_eq!(requests("/api"), Some(api_sent));
        let png = std::fs::read(&shot).expect("screenshot written");
        assert!(png.starts_with(b"\x89PNG"), "a PNG");
        assert!(
            png.len() > 10_000,
            "a page, not a blank: {} bytes",
            png.len()
        );
    })
    .await;
}

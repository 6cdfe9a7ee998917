//! A request is routed once. When sluice's own HTTP/1.1 loop routes a request to a backend
//! that needs hyper's upstream step (here an h2c Service, `appProtocol: kubernetes.io/h2c`)
//! it hands the request to hyper together with that routing; hyper must not route it again,
//! or a weighted split (Gateway API `backendRefs` weights) or a canary weight
//! (ingress-nginx `canary-weight`) is drawn twice and the h2c side gets p squared of its
//! share. Each case: 2,000 requests per front end, each on a new connection (so the own loop
//! sees every GET), both sides within 5 standard deviations of 50%.

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use common::*;
use http::Request;
use http_body_util::Full;
use sluice_proxy::ProxyArgs;
use sluice_routing::{CompileOptions, Inputs, WeightedBackend, compile};

/// (label, method, body): a bodiless GET starts in the own loop, a POST with a body in hyper.
const SHAPES: [(&str, &str, &str); 2] =
    [("own loop GET", "GET", ""), ("hyper POST", "POST", "x=1")];

const REQUESTS: u32 = 2_000;

/// 5 standard deviations of a fair coin over [`REQUESTS`] draws (sd = sqrt(n)/2 = 22.4).
fn within_five_sigma(count: u32) -> bool {
    let expected = f64::from(REQUESTS) / 2.0;
    let sd = f64::from(REQUESTS).sqrt() / 2.0;
    (f64::from(count) - expected).abs() <= 5.0 * sd
}

/// The h2c Service speaks HTTP/2 with prior knowledge (the echo backend speaks both).
fn h2c(inputs: &mut Inputs, service_name: &str) {
    for service in &mut inputs.services {
        if service.metadata.name.as_deref() != Some(service_name) {
            continue;
        }
        let service = Arc::make_mut(service);
        for port in service
            .spec
            .as_mut()
            .and_then(|s| s.ports.as_mut())
            .into_iter()
            .flatten()
        {
            port.app_protocol = Some("kubernetes.io/h2c".to_owned());
        }
    }
}

/// Counts which Service answered `REQUESTS` requests of each shape to `host`.
async fn count(proxy: &TestProxy, host: &str) -> BTreeMap<(&'static str, String), u32> {
    let mut counts = BTreeMap::new();
    for (label, method, body) in SHAPES {
        for _ in 0..REQUESTS {
            let mut sender = http1_connect(proxy.http).await;
            let request = Request::builder()
                .method(method)
                .uri("/")
                .header("host", host)
                .body(Full::new(Bytes::from(body)))
                .unwrap();
            let answer = send(&mut sender, request).await;
            assert_eq!(answer.status, 200, "{label}: {}", answer.text());
            *counts.entry((label, answer.report().service)).or_default() += 1;
        }
    }
    counts
}

fn assert_fair(counts: &BTreeMap<(&'static str, String), u32>) {
    for (label, _, _) in SHAPES {
        let of = |service: &str| {
            counts
                .get(&(label, service.to_owned()))
                .copied()
                .unwrap_or(0)
        };
        assert_eq!(of("plain") + of("h2c"), REQUESTS, "{label}: {counts:?}");
        assert!(within_five_sigma(of("h2c")), "{label}: {counts:?}");
    }
}

#[tokio::test]
async fn gateway_api_weighted_split_to_an_h2c_service_is_drawn_once() {
    init_tracing();
    bounded(async {
        let plain = echo("plain", "plain-0").await;
        let h2c_backend = echo("h2c", "h2c-0").await;
        let proxy = TestProxy::start(ProxyArgs::loopback()).await;
        let mut inputs = inputs(&[
            Route::new("split.example", "plain", vec![plain.addr()]),
            Route::new("h2c.example", "h2c", vec![h2c_backend.addr()]),
        ]);
        h2c(&mut inputs, "h2c");
        let table = compile(&inputs, &CompileOptions::default()).table;
        let backends: BTreeMap<String, _> = table
            .backends()
            .iter()
            .map(|b| (b.service.name.clone(), Arc::clone(b)))
            .collect();
        let table = table.map_entries(|entry| {
            if entry.backend.service.name == "plain" {
                entry.split = ["plain", "h2c"]
                    .iter()
                    .map(|name| WeightedBackend {
                        backend: Arc::clone(&backends[*name]),
                        weight: 1,
                        usable: true,
                        entry: None,
                    })
                    .collect();
            }
        });
        proxy.table.update(table, Duration::from_millis(1));
        assert_fair(&count(&proxy, "split.example").await);
    })
    .await;
}

#[tokio::test]
async fn ingress_nginx_canary_weight_to_an_h2c_service_is_drawn_once() {
    init_tracing();
    bounded(async {
        let plain = echo("plain", "plain-0").await;
        let h2c_backend = echo("h2c", "h2c-0").await;
        let proxy = TestProxy::start(ProxyArgs::loopback()).await;
        let canary = "nginx.ingress.kubernetes.io/canary";
        let mut inputs = inputs(&[
            Route::new("canary.example", "plain", vec![plain.addr()]),
            Route::new("canary.example", "h2c", vec![h2c_backend.addr()])
                .with_annotation(canary, "true")
                .with_annotation(&format!("{canary}-weight"), "50"),
        ]);
        h2c(&mut inputs, "h2c");
        let table = compile(&inputs, &CompileOptions::default()).table;
        proxy.table.update(table, Duration::from_millis(1));
        assert_fair(&count(&proxy, "canary.example").await);
    })
    .await;
}

//! Churn: 50 Ingress/endpoint changes per second for 20 s under a bounded load loop. Routes
//! that stay valid never fail a request; every change reaches the data plane. Prints the
//! propagation latency (API server accepted the write -> traffic follows it), p50 and p99.

mod support;

use k8s_openapi::api::networking::v1::Ingress;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::json;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};
use support::{World, get, until_routed};

const SECONDS: u64 = 20;
const INGRESS_CHANGES_PER_SEC: u64 = 40;
const ENDPOINT_CHANGES_PER_SEC: u64 = 10;

fn ingress(name: &str, host: &str, class: &str) -> anyhow::Result<Ingress> {
    Ok(serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"ingressClassName": class, "rules": [{"host": host, "http": {"paths": [
            {"path": "/", "pathType": "Prefix", "backend": {"service": {"name": "b", "port": {"number": 80}}}}
        ]}}]},
    }))?)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn churn_fails_no_request_on_stable_routes() -> anyhow::Result<()> {
    let w = World::new("churn").await?;
    for app in ["a", "b"] {
        w.service(app).await?;
    }
    let _a0 = w.pod("a", "a-0").await?;
    let _a1 = w.pod("a", "a-1").await?;
    let _b0 = w.pod("b", "b-0").await?;
    let b1 = w.pod("b", "b-1").await?;
    w.ingress("stable", json!({"rules": [{"host": "stable.test", "http": {"paths": [
        {"path": "/", "pathType": "Prefix", "backend": {"service": {"name": "a", "port": {"number": 80}}}}
    ]}}]}))
    .await?;
    let run = w.start(&[]).await?;
    until_routed(run.http, "stable.test", "/", "a", 200).await?;

    // Bounded load on the stable route: two loops, until `done` or the deadline.
    let done = Arc::new(AtomicBool::new(false));
    let (ok, failed) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let deadline = Instant::now() + Duration::from_secs(SECONDS + 10);
    let mut load = Vec::new();
    for _ in 0..2 {
        let (done, ok, failed, http) = (done.clone(), ok.clone(), failed.clone(), run.http);
        load.push(tokio::spawn(async move {
            while !done.load(Ordering::Relaxed) && Instant::now() < deadline {
                match get(http, "stable.test", "/").await {
                    Ok(r) if r.status == 200 && r.service() == "a" => {
                        ok.fetch_add(1, Ordering::Relaxed)
                    }
                    Ok(r) => {
                        eprintln!("stable route failed: {} {}", r.status, r.body);
                        failed.fetch_add(1, Ordering::Relaxed)
                    }
                    Err(e) => {
                        eprintln!("stable route failed: {e}");
                        failed.fetch_add(1, Ordering::Relaxed)
                    }
                };
            }
        }));
    }

    // Endpoint churn: b-1 flips readiness 10 times a second (b-0 stays ready).
    let flips = {
        let done = done.clone();
        tokio::spawn(async move {
            let mut ready = true;
            let mut n = 0u64;
            let mut tick =
                tokio::time::interval(Duration::from_millis(1000 / ENDPOINT_CHANGES_PER_SEC));
            while !done.load(Ordering::Relaxed) && n < SECONDS * ENDPOINT_CHANGES_PER_SEC {
                tick.tick().await;
                ready = !ready;
                let _ = b1.set_ready(ready).await;
                n += 1;
            }
            b1
        })
    };

    // Ingress churn: 40 writes a second; every 10th is timed until traffic follows it.
    let api = w.api::<Ingress>();
    let mut probes = Vec::new();
    let mut tick = tokio::time::interval(Duration::from_millis(1000 / INGRESS_CHANGES_PER_SEC));
    for i in 0..SECONDS * INGRESS_CHANGES_PER_SEC {
        tick.tick().await;
        let name = format!("churn-{}", i % 50);
        let host = format!("c{i}.test");
        if i < 50 {
            api.create(&PostParams::default(), &ingress(&name, &host, &w.class)?)
                .await?;
        } else {
            let patch = json!({"spec": {"rules": [{"host": host, "http": {"paths": [
                {"path": "/", "pathType": "Prefix", "backend": {"service": {"name": "b", "port": {"number": 80}}}}
            ]}}]}});
            api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await?;
        }
        let accepted = Instant::now();
        if i % 10 == 0 {
            let http = run.http;
            probes.push(tokio::spawn(async move {
                let limit = accepted + Duration::from_secs(10);
                while Instant::now() < limit {
                    if let Ok(r) = get(http, &host, "/").await
                        && r.status == 200
                        && r.service() == "b"
                    {
                        return Some(accepted.elapsed());
                    }
                    tokio::time::sleep(Duration::from_millis(2)).await;
                }
                None
            }));
        }
    }
    let mut latencies = Vec::new();
    for p in probes {
        latencies.push(
            p.await?
                .ok_or_else(|| anyhow::anyhow!("a change never reached the data plane"))?,
        );
    }
    done.store(true, Ordering::Relaxed);
    for l in load {
        l.await?;
    }
    let _b1 = flips.await?;
    latencies.sort();
    let pct = |p: f64| latencies[((latencies.len() as f64 * p) as usize).min(latencies.len() - 1)];
    eprintln!(
        "churn: {} requests ok, {} failed; propagation over {} samples: p50 {:?}, p99 {:?}, max {:?}",
        ok.load(Ordering::Relaxed),
        failed.load(Ordering::Relaxed),
        latencies.len(),
        pct(0.50),
        pct(0.99),
        latencies.last().copied().unwrap_or_default(),
    );
    assert_eq!(
        failed.load(Ordering::Relaxed),
        0,
        "requests to the stable route failed"
    );
    assert!(ok.load(Ordering::Relaxed) > 100, "the load loop ran");
    run.stop().await
}

//! Informer figures against the real test control plane (sluice-testenv).
//!
//! `cargo bench -p sluice-informer --bench informer_sync [-- --objects 10000]`
//!
//! 1. Initial sync time and resident memory for N ConfigMaps of ~1 KiB and N Pods, informer
//!    vs a bare paginated list of the same objects. Each measurement runs in a fresh child
//!    process (this binary with `--child`), so RSS deltas are not polluted by earlier runs.
//! 2. Event throughput: API writes -> watch -> informer -> handler, and the in-process
//!    pipeline alone (hand-fed source -> informer -> handler).

mod support;
use support::pod;

use std::{
    collections::BTreeMap,
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::{
    Api, Resource,
    api::{ListParams, ObjectMeta, Patch, PatchParams, PostParams},
};
use serde::de::DeserializeOwned;
use sluice_informer::{
    ApiListWatch, ChannelListWatch, Event, HandlerFuncs, ListOptions, SharedIndexInformer,
};

fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1).and_then(|v| v.parse().ok()))
        })
        .unwrap_or(0)
}

fn arg(name: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
}

fn configmap(i: usize) -> ConfigMap {
    // ~1 KiB of data
    let data: BTreeMap<String, String> = (0..8)
        .map(|k| (format!("key-{k}"), format!("{i:08}-{}", "x".repeat(110))))
        .collect();
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(format!("cm-{i:05}")),
            labels: Some([("bench".to_string(), "sync".to_string())].into()),
            ..Default::default()
        },
        data: Some(data),
        ..Default::default()
    }
}

async fn create_all<K, F>(api: &Api<K>, n: usize, make: F) -> anyhow::Result<Duration>
where
    K: Resource + Clone + DeserializeOwned + serde::Serialize + std::fmt::Debug,
    F: Fn(usize) -> anyhow::Result<K>,
{
    let t = Instant::now();
    let objs: Vec<K> = (0..n).map(&make).collect::<anyhow::Result<_>>()?;
    futures::stream::iter(objs)
        .map(|o| {
            let api = api.clone();
            async move { api.create(&PostParams::default(), &o).await.map(|_| ()) }
        })
        .buffer_unordered(32)
        .try_collect::<Vec<()>>()
        .await?;
    Ok(t.elapsed())
}

/// Child mode: one measurement in a fresh process. Prints `RESULT secs rss_delta_kib count`.
async fn child(kind: &str, mode: &str, ns: &str) -> anyhow::Result<()> {
    let client = kube::Client::try_default().await?;
    // Warm the connection (TLS, auth) outside the measurement.
    client.apiserver_version().await?;
    let before = rss_kib();
    let t = Instant::now();
    let count = match (kind, mode) {
        ("configmaps", "list") => paged_list::<ConfigMap>(Api::namespaced(client, ns)).await?,
        ("pods", "list") => paged_list::<Pod>(Api::namespaced(client, ns)).await?,
        ("configmaps", "informer") => {
            informer_sync::<ConfigMap>(Api::namespaced(client, ns)).await?
        }
        ("pods", "informer") => informer_sync::<Pod>(Api::namespaced(client, ns)).await?,
        _ => anyhow::bail!("unknown child mode {kind} {mode}"),
    };
    let secs = t.elapsed().as_secs_f64();
    let after = rss_kib();
    println!("RESULT {secs:.3} {} {count}", after.saturating_sub(before));
    Ok(())
}

async fn paged_list<K>(api: Api<K>) -> anyhow::Result<usize>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug,
{
    let mut all: Vec<K> = Vec::new();
    let mut lp = ListParams::default().limit(500);
    loop {
        let page = api.list(&lp).await?;
        all.extend(page.items);
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(c) => lp = lp.continue_token(&c),
            None => break,
        }
    }
    let n = all.len();
    // Keep the objects alive until RSS is read.
    std::mem::forget(all);
    Ok(n)
}

async fn informer_sync<K>(api: Api<K>) -> anyhow::Result<usize>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
{
    let informer = SharedIndexInformer::new(
        ApiListWatch::with_options(api, &ListOptions::default()),
        None,
    );
    informer.start();
    anyhow::ensure!(
        informer.wait_for_sync(Duration::from_secs(300)).await,
        "no sync"
    );
    let n = informer.store().len();
    std::mem::forget(informer);
    Ok(n)
}

async fn measure(
    kubeconfig: &std::path::Path,
    kind: &str,
    mode: &str,
    ns: &str,
) -> anyhow::Result<(f64, u64, usize)> {
    let exe = std::env::current_exe()?;
    let out = tokio::time::timeout(
        Duration::from_secs(600),
        tokio::process::Command::new(exe)
            .args(["--child", kind, mode, ns])
            .env("KUBECONFIG", kubeconfig)
            .kill_on_drop(true)
            .output(),
    )
    .await??;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout
        .lines()
        .find(|l| l.starts_with("RESULT "))
        .ok_or_else(|| {
            anyhow::anyhow!(
                "child {kind} {mode} failed: {stdout}\n{}",
                String::from_utf8_lossy(&out.stderr)
            )
        })?;
    let f: Vec<&str> = line.split_whitespace().collect();
    Ok((f[1].parse()?, f[2].parse()?, f[3].parse()?))
}

async fn watch_throughput(cp: &sluice_testenv::ControlPlane, n: usize) -> anyhow::Result<()> {
    let ns = cp.create_namespace("bench-events").await?;
    let api: Api<ConfigMap> = Api::namespaced(cp.client(), &ns);
    let objects = 100;
    create_all(&api, objects, |i| Ok(configmap(i))).await?;
    let informer = SharedIndexInformer::new(
        ApiListWatch::with_options(api.clone(), &ListOptions::default()),
        None,
    );
    let seen = Arc::new(AtomicU64::new(0));
    let s = seen.clone();
    informer.add_event_handler(HandlerFuncs::new().on_update(move |_, _: Arc<ConfigMap>| {
        s.fetch_add(1, Ordering::Relaxed);
    }));
    informer.start();
    anyhow::ensure!(informer.wait_for_sync(Duration::from_secs(60)).await);
    let t = Instant::now();
    futures::stream::iter(0..n)
        .map(|i| {
            let api = api.clone();
            async move {
                let patch = serde_json::json!({"data": {"counter": format!("{i}")}});
                api.patch(
                    &format!("cm-{:05}", i % objects),
                    &PatchParams::default(),
                    &Patch::Merge(&patch),
                )
                .await
                .map(|_| ())
            }
        })
        .buffer_unordered(32)
        .try_collect::<Vec<()>>()
        .await?;
    let writes = t.elapsed();
    let deadline = Instant::now() + Duration::from_secs(120);
    while seen.load(Ordering::Relaxed) < n as u64 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let total = t.elapsed();
    println!(
        "watch throughput: {n} updates written in {:.2}s ({:.0}/s); handler saw {} in {:.2}s ({:.0} events/s end to end)",
        writes.as_secs_f64(),
        n as f64 / writes.as_secs_f64(),
        seen.load(Ordering::Relaxed),
        total.as_secs_f64(),
        seen.load(Ordering::Relaxed) as f64 / total.as_secs_f64()
    );
    informer.shutdown().await;
    Ok(())
}

async fn pipeline_throughput(n: usize, handlers: usize) -> anyhow::Result<()> {
    let (source, tx) = ChannelListWatch::new();
    let informer = SharedIndexInformer::new(source, None);
    let seen = Arc::new(AtomicU64::new(0));
    for _ in 0..handlers {
        let s = seen.clone();
        informer.add_event_handler(
            HandlerFuncs::new()
                .on_add({
                    let s = s.clone();
                    move |_, _: bool| {
                        s.fetch_add(1, Ordering::Relaxed);
                    }
                })
                .on_update(move |_, _: Arc<ConfigMap>| {
                    s.fetch_add(1, Ordering::Relaxed);
                }),
        );
    }
    informer.start();
    tx.send(Ok(Event::Init))?;
    tx.send(Ok(Event::InitDone))?;
    anyhow::ensure!(informer.wait_for_sync(Duration::from_secs(10)).await);
    let objs: Vec<ConfigMap> = (0..n)
        .map(|i| {
            let mut c = configmap(i % 1000);
            c.metadata.namespace = Some("bench".into());
            c.metadata.resource_version = Some(format!("{i}"));
            c
        })
        .collect();
    let t = Instant::now();
    for o in objs {
        tx.send(Ok(Event::Apply(o)))?;
    }
    let want = (n * handlers) as u64;
    let deadline = Instant::now() + Duration::from_secs(120);
    while seen.load(Ordering::Relaxed) < want && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let secs = t.elapsed().as_secs_f64();
    println!(
        "in-process pipeline: {n} events x {handlers} handlers in {secs:.3}s = {:.0} events/s into the informer, {:.0} deliveries/s",
        n as f64 / secs,
        want as f64 / secs
    );
    informer.shutdown().await;
    Ok(())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    if let Some(i) = args.iter().position(|a| a == "--child") {
        let get = |k: usize| args.get(i + k).cloned().unwrap_or_default();
        return child(&get(1), &get(2), &get(3)).await;
    }
    let n: usize = arg("--objects")
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000);
    let cp = sluice_testenv::ControlPlane::shared().await?;
    let kubeconfig = cp.kubeconfig_path().to_path_buf();

    pipeline_throughput(100_000, 1).await?;
    pipeline_throughput(100_000, 4).await?;
    watch_throughput(cp, 2_000).await?;

    for kind in ["configmaps", "pods"] {
        let ns = cp.create_namespace(&format!("bench-{kind}")).await?;
        let took = match kind {
            "configmaps" => {
                create_all(&Api::<ConfigMap>::namespaced(cp.client(), &ns), n, |i| {
                    Ok(configmap(i))
                })
                .await?
            }
            _ => create_all(&Api::<Pod>::namespaced(cp.client(), &ns), n, pod).await?,
        };
        let sample = match kind {
            "configmaps" => serde_json::to_vec(
                &Api::<ConfigMap>::namespaced(cp.client(), &ns)
                    .get("cm-00000")
                    .await?,
            )?
            .len(),
            _ => serde_json::to_vec(
                &Api::<Pod>::namespaced(cp.client(), &ns)
                    .get("pod-000000")
                    .await?,
            )?
            .len(),
        };
        println!(
            "created {n} {kind} (~{sample} bytes of JSON each) in {:.1}s",
            took.as_secs_f64()
        );
        for round in 0..2 {
            for mode in ["list", "informer"] {
                let (secs, kib, count) = measure(&kubeconfig, kind, mode, &ns).await?;
                println!(
                    "{kind:>10} {mode:>8} (round {round}): {count} objects in {secs:.2}s, RSS +{:.1} MiB ({:.2} KiB/object)",
                    kib as f64 / 1024.0,
                    kib as f64 / count.max(1) as f64
                );
            }
        }
    }
    Ok(())
}

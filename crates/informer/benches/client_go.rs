//! sluice's informer against client-go 1.20's on the same API server: the driver of
//! `bench/informer.sh` (which builds both programs and passes their paths).
//!
//! `cargo bench -p sluice-informer --bench client_go -- --sluice BIN --go BIN [--pods 10000] [--rounds 3]`
//!
//! Starts a test control plane, creates the Pods, then runs the two programs alternately
//! (sluice, client-go, sluice, ...) `--rounds` times each. Each run is a fresh process that
//! builds a shared informer factory, asks it for the Pod informer, starts it, waits for cache
//! sync and prints `RESULT <seconds> <VmHWM KiB> <pods>`. Prints every run, the medians and
//! the ratios sluice / client-go. With `--metadata`, each round also runs the sluice program
//! with its metadata-only Pod informer (`PartialObjectMeta<Pod>`).

mod support;
use support::pod;

use std::{
    path::PathBuf,
    time::{Duration, Instant},
};

use anyhow::Context;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Pod;
use kube::{Api, api::PostParams};

fn arg(name: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
}

async fn create_pods(api: &Api<Pod>, n: usize) -> anyhow::Result<Duration> {
    let t = Instant::now();
    futures::stream::iter(0..n)
        .map(|i| {
            let api = api.clone();
            async move {
                let p = pod(i)?;
                api.create(&PostParams::default(), &p).await?;
                Ok::<(), anyhow::Error>(())
            }
        })
        .buffer_unordered(64)
        .try_collect::<Vec<()>>()
        .await?;
    Ok(t.elapsed())
}

/// One measured run: (seconds, VmHWM KiB, objects).
#[derive(Debug, Clone, Copy)]
struct Run {
    secs: f64,
    hwm_kib: u64,
    objects: usize,
}

async fn run_once(
    bin: &PathBuf,
    extra: &[&str],
    kubeconfig: &std::path::Path,
    ns: &str,
    timeout: Duration,
) -> anyhow::Result<Run> {
    let out = tokio::time::timeout(
        timeout,
        tokio::process::Command::new(bin)
            .args(["--namespace", ns])
            .args(extra)
            .env("KUBECONFIG", kubeconfig)
            .env("RUST_LOG", "warn")
            .kill_on_drop(true)
            .output(),
    )
    .await
    .with_context(|| format!("{} ran past {timeout:?}", bin.display()))??;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout
        .lines()
        .find(|l| l.starts_with("RESULT "))
        .ok_or_else(|| {
            anyhow::anyhow!(
                "{} printed no RESULT: {stdout}\n{}",
                bin.display(),
                String::from_utf8_lossy(&out.stderr)
            )
        })?;
    let f: Vec<&str> = line.split_whitespace().collect();
    anyhow::ensure!(f.len() == 4, "bad RESULT line {line:?}");
    Ok(Run {
        secs: f[1].parse()?,
        hwm_kib: f[2].parse()?,
        objects: f[3].parse()?,
    })
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    match v.len() {
        0 => 0.0,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    // `cargo bench -p sluice-informer` runs every bench without arguments: this one needs
    // the two programs that bench/informer.sh builds, so it says so and passes.
    let (Some(sluice), Some(go)) = (arg("--sluice"), arg("--go")) else {
        eprintln!("client_go: run bench/informer.sh (it builds the two programs this compares)");
        return Ok(());
    };
    let (sluice, go) = (PathBuf::from(sluice), PathBuf::from(go));
    let n: usize = arg("--pods").and_then(|v| v.parse().ok()).unwrap_or(10_000);
    let rounds: usize = arg("--rounds")
        .and_then(|v| v.parse().ok())
        .unwrap_or(3)
        .clamp(1, 20);
    let timeout = Duration::from_secs(600);

    let cp = sluice_testenv::ControlPlane::shared().await?;
    let kubeconfig = cp.kubeconfig_path().to_path_buf();
    let ns = cp.create_namespace("bench-pods").await?;
    let api: Api<Pod> = Api::namespaced(cp.client(), &ns);
    let took = create_pods(&api, n).await?;
    let sample = serde_json::to_vec(&api.get("pod-000000").await?)?.len();
    println!(
        "created {n} Pods (~{sample} bytes of JSON each) in {:.1}s",
        took.as_secs_f64()
    );

    let mut programs: Vec<(&str, &PathBuf, &[&str])> =
        vec![("sluice", &sluice, &[]), ("client-go", &go, &[])];
    if std::env::args().any(|a| a == "--metadata") {
        programs.insert(1, ("sluice-md", &sluice, &["--metadata"]));
    }
    let mut runs: Vec<(&str, Run)> = Vec::new();
    for round in 0..rounds {
        for (name, bin, extra) in &programs {
            let name = *name;
            let r = run_once(bin, extra, &kubeconfig, &ns, timeout).await?;
            anyhow::ensure!(
                r.objects == n,
                "{name} synced {} objects, want {n}",
                r.objects
            );
            println!(
                "round {round} {name:>9}: {:.3} s, VmHWM {:.1} MiB",
                r.secs,
                r.hwm_kib as f64 / 1024.0
            );
            runs.push((name, r));
        }
    }
    let med = |who: &str, f: fn(&Run) -> f64| {
        median(
            runs.iter()
                .filter(|(n, _)| *n == who)
                .map(|(_, r)| f(r))
                .collect(),
        )
    };
    let secs = |r: &Run| r.secs;
    let mib = |r: &Run| r.hwm_kib as f64 / 1024.0;
    let (st, sm) = (med("sluice", secs), med("sluice", mib));
    let (gt, gm) = (med("client-go", secs), med("client-go", mib));
    println!("{n} Pods, medians of {rounds}:");
    println!(
        "  sluice    {st:.3} s  {sm:7.1} MiB  ({:.2} KiB/Pod)",
        sm * 1024.0 / n as f64
    );
    println!(
        "  client-go {gt:.3} s  {gm:7.1} MiB  ({:.2} KiB/Pod)",
        gm * 1024.0 / n as f64
    );
    println!(
        "  sluice / client-go: time {:.2}x, RSS {:.2}x",
        st / gt,
        sm / gm
    );
    if programs.len() > 2 {
        let (mt, mm) = (med("sluice-md", secs), med("sluice-md", mib));
        println!(
            "  sluice metadata-only {mt:.3} s  {mm:7.1} MiB  ({:.2} KiB/Pod); / client-go: time {:.2}x, RSS {:.2}x",
            mm * 1024.0 / n as f64,
            mt / gt,
            mm / gm
        );
    }
    Ok(())
}

//! sluice's informer against client-go's on the same API server: the driver of
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
//!
//! With `--steady SECS [--rate R]` (default 1000/s), after the rounds each program runs once
//! more with `--steady SECS`: once it has synced, this driver patches the Pods round-robin
//! (an annotation carrying the send time) at R patches/s for SECS seconds (bounded in count
//! and time, at most 128 in flight, 10 s each at most), and the program reports its RSS right after sync and
//! after the phase, and the handler latency (patch sent -> update handler called).

mod support;
use support::pod;

use std::{
    path::PathBuf,
    time::{Duration, Instant},
};

use anyhow::Context;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Pod;
use kube::{
    Api,
    api::{Patch, PatchParams, PostParams},
};
use tokio::io::{AsyncBufReadExt, BufReader};

/// The annotation the steady phase patches; the programs read the send time from it.
const WRITTEN_AT: &str = "bench.sluice.dev/written-at";

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
    for info in stdout.lines().filter_map(|l| l.strip_prefix("INFO ")) {
        println!(
            "    {}: {info}",
            bin.display().to_string().rsplit('/').next().unwrap_or("")
        );
    }
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

/// What the steady phase measured in one program.
#[derive(Debug, Clone, Copy)]
struct Steady {
    rss_synced_kib: u64,
    rss_end_kib: u64,
    hwm_kib: u64,
    updates: u64,
    p50_us: u64,
    p99_us: u64,
    max_us: u64,
}

/// What the load of the steady phase achieved.
#[derive(Debug, Clone, Copy)]
struct Load {
    sent: usize,
    failed: usize,
    secs: f64,
    write_p50_ms: f64,
    write_p99_ms: f64,
}

fn now_us() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_micros() as u64)
        .unwrap_or(0)
}

/// Patches Pods `pod-000000`.. round-robin at `rate`/s for `secs` seconds: at most
/// `rate * secs` patches, none started after `secs`, at most 128 in flight, each given up
/// after 10 s.
async fn steady_load(api: &Api<Pod>, n: usize, rate: u32, secs: u64) -> Load {
    let total = rate as usize * secs as usize;
    let start = tokio::time::Instant::now();
    let stop = start + Duration::from_secs(secs);
    let period = Duration::from_secs_f64(1.0 / f64::from(rate.max(1)));
    let results: Vec<Option<Duration>> = futures::stream::iter(0..total)
        .map(|i| {
            let api = api.clone();
            async move {
                tokio::time::sleep_until(start + period * i as u32).await;
                if tokio::time::Instant::now() >= stop {
                    return None;
                }
                let name = format!("pod-{:06}", i % n.max(1));
                let patch = serde_json::json!({"metadata": {"annotations": {WRITTEN_AT: now_us().to_string()}}});
                let t = Instant::now();
                let params = PatchParams::default();
                let patch = Patch::Merge(&patch);
                let write = api.patch(&name, &params, &patch);
                match tokio::time::timeout(Duration::from_secs(10), write).await {
                    Ok(Ok(_)) => Some(t.elapsed()),
                    Ok(Err(err)) => {
                        eprintln!("patch {name}: {err}");
                        Some(Duration::MAX)
                    }
                    Err(_) => {
                        eprintln!("patch {name}: no answer in 10 s");
                        Some(Duration::MAX)
                    }
                }
            }
        })
        .buffer_unordered(128)
        .collect()
        .await;
    let secs = start.elapsed().as_secs_f64();
    let mut ok: Vec<f64> = results
        .iter()
        .flatten()
        .filter(|d| **d != Duration::MAX)
        .map(|d| d.as_secs_f64() * 1e3)
        .collect();
    let sent = results.iter().flatten().count();
    let failed = sent - ok.len();
    ok.sort_by(|a, b| a.total_cmp(b));
    let pct = |p: f64| {
        if ok.is_empty() {
            0.0
        } else {
            ok[((ok.len() as f64 * p).ceil() as usize).clamp(1, ok.len()) - 1]
        }
    };
    Load {
        sent,
        failed,
        secs,
        write_p50_ms: pct(0.5),
        write_p99_ms: pct(0.99),
    }
}

/// One program with `--steady`: wait for its RESULT (sync), run the load, read its STEADY line.
async fn run_steady(
    bin: &PathBuf,
    kubeconfig: &std::path::Path,
    api: &Api<Pod>,
    ns: &str,
    n: usize,
    (secs, rate): (u64, u32),
) -> anyhow::Result<(Run, Load, Steady)> {
    let mut child = tokio::process::Command::new(bin)
        .args(["--namespace", ns, "--steady", &secs.to_string()])
        .env("KUBECONFIG", kubeconfig)
        .env("RUST_LOG", "warn")
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()?;
    let stdout = child.stdout.take().context("no stdout")?;
    let mut lines = BufReader::new(stdout).lines();
    let mut next = async |prefix: &str, within: Duration| -> anyhow::Result<Vec<String>> {
        tokio::time::timeout(within, async {
            while let Some(l) = lines.next_line().await? {
                if l.starts_with(prefix) {
                    return Ok(l.split_whitespace().skip(1).map(String::from).collect());
                }
            }
            anyhow::bail!("{} ended without {prefix}", bin.display())
        })
        .await
        .with_context(|| format!("{} printed no {prefix} in {within:?}", bin.display()))?
    };
    let f = next("RESULT", Duration::from_secs(600)).await?;
    anyhow::ensure!(f.len() == 3, "bad RESULT {f:?}");
    let run = Run {
        secs: f[0].parse()?,
        hwm_kib: f[1].parse()?,
        objects: f[2].parse()?,
    };
    let load = steady_load(api, n, rate, secs).await;
    let f = next("STEADY", Duration::from_secs(secs + 60)).await?;
    anyhow::ensure!(f.len() == 7, "bad STEADY {f:?}");
    let v: Vec<u64> = f.iter().map(|x| x.parse()).collect::<Result<_, _>>()?;
    let steady = Steady {
        rss_synced_kib: v[0],
        rss_end_kib: v[1],
        hwm_kib: v[2],
        updates: v[3],
        p50_us: v[4],
        p99_us: v[5],
        max_us: v[6],
    };
    let _ = tokio::time::timeout(Duration::from_secs(10), child.wait()).await;
    Ok((run, load, steady))
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
    let steady: Option<u64> = arg("--steady")
        .and_then(|v| v.parse().ok())
        .map(|s: u64| s.clamp(1, 600));
    let rate: u32 = arg("--rate")
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000)
        .clamp(1, 10_000);

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

    // client-go v0.35+ streams its initial list where the server offers it (WatchListClient);
    // `client-go-lw` is the same program with that off: a LIST, then a watch.
    let mut programs: Vec<(&str, &PathBuf, &[&str])> = vec![
        ("sluice", &sluice, &[]),
        ("client-go", &go, &[]),
        ("client-go-lw", &go, &["--list-watch"]),
    ];
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
                "round {round} {name:>12}: {:.3} s, VmHWM {:.1} MiB",
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
    let (lt, lm) = (med("client-go-lw", secs), med("client-go-lw", mib));
    println!(
        "  client-go, LIST then watch {lt:.3} s  {lm:7.1} MiB  ({:.2} KiB/Pod)",
        lm * 1024.0 / n as f64
    );
    println!(
        "  sluice / client-go: time {:.2}x, RSS {:.2}x; / client-go LIST then watch: time {:.2}x, RSS {:.2}x",
        st / gt,
        sm / gm,
        st / lt,
        sm / lm
    );
    if programs.iter().any(|(name, _, _)| *name == "sluice-md") {
        let (mt, mm) = (med("sluice-md", secs), med("sluice-md", mib));
        println!(
            "  sluice metadata-only {mt:.3} s  {mm:7.1} MiB  ({:.2} KiB/Pod); / client-go: time {:.2}x, RSS {:.2}x",
            mm * 1024.0 / n as f64,
            mt / gt,
            mm / gm
        );
    }
    if let Some(secs) = steady {
        println!("steady state: {rate} patches/s asked for {secs} s on {n} Pods");
        for (name, bin) in [("sluice", &sluice), ("client-go", &go)] {
            let (run, load, s) = run_steady(bin, &kubeconfig, &api, &ns, n, (secs, rate)).await?;
            let mib = |k: u64| k as f64 / 1024.0;
            println!(
                "  {name:>9}: synced {} in {:.3} s; load {} patches ({} failed) in {:.1} s = {:.0}/s, write p50 {:.1} ms p99 {:.1} ms",
                run.objects,
                run.secs,
                load.sent,
                load.failed,
                load.secs,
                load.sent as f64 / load.secs,
                load.write_p50_ms,
                load.write_p99_ms
            );
            println!(
                "  {name:>9}: VmRSS after sync {:.1} MiB, after the phase {:.1} MiB ({:+.1} %), VmHWM {:.1} MiB; handler saw {} updates, latency p50 {:.2} ms p99 {:.2} ms max {:.2} ms",
                mib(s.rss_synced_kib),
                mib(s.rss_end_kib),
                (s.rss_end_kib as f64 / s.rss_synced_kib.max(1) as f64 - 1.0) * 100.0,
                mib(s.hwm_kib),
                s.updates,
                s.p50_us as f64 / 1e3,
                s.p99_us as f64 / 1e3,
                s.max_us as f64 / 1e3
            );
        }
    }
    Ok(())
}

//! Route propagation at scale (issue #31): the driver of `bench/propagation.sh`, after the
//! method of howardjohn/gateway-api-bench Part 2. Steady bounded load on stable routes while
//! routes are created, updated and deleted at a fixed rate; per change the time from the API
//! server acknowledging the write to the first correct answer through sluice (polled every
//! 0.2 ms, on connections of its own), and every non-2xx answer on the stable routes.
//!
//! `cargo bench -p sluice-controller --bench propagation -- --sluice BIN`
//!
//! Knobs (flags or environment, flags win):
//! `--sizes` / `SIZES` ("100 3000"): existing routes per run, ascending;
//! `--kinds` / `KINDS` ("ingress httproute"); `--services` / `SERVICES` (5000) and
//! `--endpoints` / `ENDPOINTS` (50000): Services without selector, each with one
//! EndpointSlice written directly (addresses nobody sends traffic to), spread evenly;
//! `--changes` / `CHANGES` (300) at `--rate` / `RATE` (10) per second;
//! `--load` / `LOAD` (2): keep-alive connections of the load loop;
//! `--load-rate` / `LOAD_RATE` (2000): requests per second the load loop sends, spread
//! evenly over its connections (a steady load, as fortio's `-qps` or wrk2's `-R`); 0 sends
//! the next request as soon as one is answered (a saturating load: on a machine that also
//! runs the control plane, the driver and the echo pods, it measures the scheduler as much
//! as sluice).
//!
//! Per kind, one namespace on a fresh test control plane: Services and EndpointSlices, two
//! echo pods (`a` behind the stable routes, `b` behind the changed ones), then per size the
//! routes grow to that count (route j -> Service j mod services), the release `sluice
//! controller` starts as a process of its own with a ServiceAccount kubeconfig (cold start:
//! spawn -> the stable route answers 200), its status writes to the routes settle (3 s
//! without an event of the kind: steady state, as a restarted controller finds it), the
//! change phase runs under load, the process is stopped. Prints one table row per run,
//! with the API server's share of each change (a plain watch of this program's) and what
//! is left after it.

#[path = "../tests/support/mod.rs"]
mod support;

use anyhow::Context;
use futures::{StreamExt, TryStreamExt};
use http_body_util::{BodyExt, Empty};
use hyper::body::Bytes;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::networking::v1::Ingress;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use sluice_routing::gateway::HttpRoute;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime};
use support::World;

/// How long one change may take before it counts as lost.
const PROPAGATION_LIMIT: Duration = Duration::from_secs(30);
/// How often a change's probe asks sluice whether it is served yet: the resolution of the
/// figures (a probe sleeps this long between answers, on a thread of its own; a tokio sleep
/// would round up to the timer's millisecond and wait for the runtime the load loop keeps
/// busy).
const POLL_EVERY: Duration = Duration::from_micros(200);
/// Route objects the change phase cycles through (create -> update -> delete -> create ...).
const SLOTS: u64 = 20;
/// Objects written to the API server at once while setting up.
const SETUP_CONCURRENCY: usize = 32;

struct Knobs {
    sluice: PathBuf,
    sizes: Vec<usize>,
    kinds: Vec<String>,
    services: usize,
    endpoints: usize,
    changes: u64,
    rate: u64,
    load: usize,
    load_rate: u64,
}

fn knob(flag: &str, env: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == flag)
        .and_then(|i| args.get(i + 1).cloned())
        .or_else(|| std::env::var(env).ok())
        .filter(|v| !v.trim().is_empty())
}

fn number<T: std::str::FromStr>(flag: &str, env: &str, default: T) -> anyhow::Result<T> {
    match knob(flag, env) {
        None => Ok(default),
        Some(v) => v
            .trim()
            .replace(',', "")
            .parse()
            .map_err(|_| anyhow::anyhow!("{flag} / {env}: not a number: {v}")),
    }
}

impl Knobs {
    fn read() -> anyhow::Result<Knobs> {
        let sluice = knob("--sluice", "SLUICE_BIN").context("--sluice BIN (release build)")?;
        let sizes = knob("--sizes", "SIZES")
            .unwrap_or_else(|| "100 3000".into())
            .split([' ', ','])
            .filter(|s| !s.is_empty())
            .map(|s| s.parse().context("--sizes: numbers"))
            .collect::<anyhow::Result<Vec<usize>>>()?;
        let kinds: Vec<String> = knob("--kinds", "KINDS")
            .unwrap_or_else(|| "ingress httproute".into())
            .split([' ', ','])
            .filter(|s| !s.is_empty())
            .map(String::from)
            .collect();
        if let Some(k) = kinds.iter().find(|k| *k != "ingress" && *k != "httproute") {
            anyhow::bail!("--kinds: ingress or httproute, not {k}");
        }
        Ok(Knobs {
            sluice: PathBuf::from(sluice),
            sizes,
            kinds,
            services: number("--services", "SERVICES", 5000usize)?.max(1),
            endpoints: number("--endpoints", "ENDPOINTS", 50000usize)?,
            changes: number("--changes", "CHANGES", 300u64)?,
            rate: number("--rate", "RATE", 10u64)?.max(1),
            load: number("--load", "LOAD", 2usize)?.max(1),
            load_rate: number("--load-rate", "LOAD_RATE", 2000u64)?,
        })
    }
}

/// One run's figures.
struct Row {
    kind: String,
    routes: usize,
    cold_start: Duration,
    /// Start -> sluice's status writes to the existing routes done (3 s without an event).
    statuses_settled: Duration,
    propagation: Vec<Duration>,
    /// Per change, API write acknowledged -> a plain watch of the kind (this program's own,
    /// like sluice's informer) sees it: the control plane's share of `propagation`.
    watch: Vec<Duration>,
    /// Per change, `propagation` less `watch`: from the watch event to traffic, sluice's
    /// share (an estimate: sluice's own watch may see the event a little earlier or later).
    after_watch: Vec<Duration>,
    lost: u64,
    stable_ok: u64,
    stable_errors: u64,
    /// Stable-route requests per second over the change phase.
    stable_rate: f64,
    rss_kib: u64,
    hwm_kib: u64,
    cpu_per_1000: f64,
    control_cpu_per_1000: f64,
    /// Table rebuilds during the change phase, those compiled in part, and their mean
    /// compile time.
    rebuilds: f64,
    partial: f64,
    compile_mean: Duration,
}

fn main() -> anyhow::Result<()> {
    let knobs = Knobs::read()?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    runtime.block_on(run(knobs))
}

async fn run(knobs: Knobs) -> anyhow::Result<()> {
    eprintln!(
        "[propagation] sizes {:?}, kinds {:?}, {} services, {} endpoints, {} changes at {}/s, {} load connections at {}",
        knobs.sizes,
        knobs.kinds,
        knobs.services,
        knobs.endpoints,
        knobs.changes,
        knobs.rate,
        knobs.load,
        match knobs.load_rate {
            0 => "as fast as answered".to_owned(),
            r => format!("{r} requests/s"),
        }
    );
    let mut rows = Vec::new();
    for kind in &knobs.kinds {
        let w = World::new(&format!("prop-{kind}")).await?;
        let gateway = kind == "httproute";
        if gateway {
            support::gateway_crds::install_crds(&w).await?;
            w.create(
                json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "GatewayClass",
                "metadata": {"name": gateway_class(&w)},
                "spec": {"controllerName": gateway_controller(&w)}}),
            )
            .await?;
            w.create(
                json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
                "metadata": {"name": "edge"}, "spec": {"gatewayClassName": gateway_class(&w),
                "listeners": [{"name": "http", "port": 80, "protocol": "HTTP"}]}}),
            )
            .await?;
        }
        let t = Instant::now();
        endpoints(&w, knobs.services, knobs.endpoints).await?;
        eprintln!(
            "[propagation] {kind}: {} Services with {} endpoints in {:?}",
            knobs.services,
            knobs.endpoints,
            t.elapsed()
        );
        for app in ["a", "b"] {
            w.service(app).await?;
        }
        let _a = w.pod("a", "a-0").await?;
        let _b = w.pod("b", "b-0").await?;
        create_route(&w, kind, "stable", "stable.bench", "a").await?;
        let kubeconfig =
            w.cp.service_account_kubeconfig("sluice-system", "sluice")
                .await?;
        let mut existing = 0;
        for &size in &knobs.sizes {
            let t = Instant::now();
            futures::stream::iter(existing..size)
                .map(|j| {
                    let (w, kind) = (&w, kind.as_str());
                    let service = format!("svc-{}", j % knobs.services);
                    async move {
                        create_route(w, kind, &format!("r-{j}"), &format!("r{j}.bench"), &service)
                            .await
                    }
                })
                .buffer_unordered(SETUP_CONCURRENCY)
                .try_collect::<Vec<()>>()
                .await?;
            existing = existing.max(size);
            eprintln!(
                "[propagation] {kind}: {size} routes ({:?} to create)",
                t.elapsed()
            );
            let row = measure(&w, &knobs, kind, size, &kubeconfig).await?;
            print_row(&row);
            rows.push(row);
        }
    }
    println!();
    println!(
        "| kind | routes | services/endpoints | changes | p50 | p99 | max | API watch p50 / p99 | after the watch p50 / p99 | lost | stable ok | stable errors | stable requests/s | RSS MiB (peak) | CPU s/1000 changes (control thread) | rebuilds (partial), mean compile | cold start | statuses written |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    for r in &rows {
        let (p50, p99, max) = percentiles(&r.propagation);
        let (watch_p50, watch_p99, _) = percentiles(&r.watch);
        let (after_p50, after_p99, _) = percentiles(&r.after_watch);
        println!(
            "| {} | {} | {}/{} | {} | {} | {} | {} | {} / {} | {} / {} | {} | {} | {} | {:.0} | {:.1} ({:.1}) | {:.2} ({:.2}) | {} ({}), {} | {:.2} s | {:.1} s |",
            r.kind,
            r.routes,
            knobs.services,
            knobs.endpoints,
            r.propagation.len() as u64 + r.lost,
            ms(p50),
            ms(p99),
            ms(max),
            ms(watch_p50),
            ms(watch_p99),
            ms(after_p50),
            ms(after_p99),
            r.lost,
            r.stable_ok,
            r.stable_errors,
            r.stable_rate,
            r.rss_kib as f64 / 1024.0,
            r.hwm_kib as f64 / 1024.0,
            r.cpu_per_1000,
            r.control_cpu_per_1000,
            r.rebuilds,
            r.partial,
            ms(r.compile_mean),
            r.cold_start.as_secs_f64(),
            r.statuses_settled.as_secs_f64(),
        );
    }
    Ok(())
}

fn gateway_class(w: &World) -> String {
    format!("gc-{}", w.ns)
}

fn gateway_controller(w: &World) -> String {
    format!("sluice.dev/gw-{}", w.ns)
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1000.0)
}

fn percentiles(samples: &[Duration]) -> (Duration, Duration, Duration) {
    let mut s = samples.to_vec();
    s.sort();
    let at = |p: f64| {
        s.get(((s.len() as f64 * p) as usize).min(s.len().saturating_sub(1)))
            .copied()
            .unwrap_or_default()
    };
    (at(0.5), at(0.99), s.last().copied().unwrap_or_default())
}

fn print_row(r: &Row) {
    let (p50, p99, max) = percentiles(&r.propagation);
    eprintln!(
        "[propagation] {} {} routes: p50 {} p99 {} max {}, {} lost, stable {} ok / {} errors ({:.0}/s), RSS {} KiB (peak {}), CPU {:.2} s/1000 changes ({:.2} control), {} rebuilds ({} partial) of mean {}, cold start {:?}",
        r.kind,
        r.routes,
        ms(p50),
        ms(p99),
        ms(max),
        r.lost,
        r.stable_ok,
        r.stable_errors,
        r.stable_rate,
        r.rss_kib,
        r.hwm_kib,
        r.cpu_per_1000,
        r.control_cpu_per_1000,
        r.rebuilds,
        r.partial,
        ms(r.compile_mean),
        r.cold_start
    );
}

/// `services` Services without selector, each with one EndpointSlice of its share of
/// `endpoints` ready addresses (10.96.0.0/12-style addresses no one sends traffic to).
async fn endpoints(w: &World, services: usize, endpoints: usize) -> anyhow::Result<()> {
    let svc_api: Api<Service> = w.api();
    let slice_api: Api<EndpointSlice> = w.api();
    futures::stream::iter(0..services)
        .map(|i| {
            let (svc_api, slice_api) = (svc_api.clone(), slice_api.clone());
            let count = endpoints / services + usize::from(i < endpoints % services);
            async move {
                let name = format!("svc-{i}");
                let service: Service = serde_json::from_value(json!({
                    "metadata": {"name": name},
                    "spec": {"ports": [{"name": "http", "port": 80, "targetPort": 8080}]},
                }))?;
                svc_api.create(&PostParams::default(), &service).await?;
                let addresses: Vec<Value> = (0..count)
                    .map(|k| {
                        let n = i * 16 + k;
                        json!({"addresses": [format!("10.{}.{}.{}", 100 + (n >> 16) % 100, (n >> 8) & 255, n & 255)],
                               "conditions": {"ready": true}})
                    })
                    .collect();
                let slice: EndpointSlice = serde_json::from_value(json!({
                    "metadata": {"name": format!("{name}-1"),
                                 "labels": {"kubernetes.io/service-name": name}},
                    "addressType": "IPv4",
                    "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
                    "endpoints": addresses,
                }))?;
                slice_api.create(&PostParams::default(), &slice).await?;
                Ok::<(), anyhow::Error>(())
            }
        })
        .buffer_unordered(SETUP_CONCURRENCY)
        .try_collect::<Vec<()>>()
        .await?;
    Ok(())
}

fn ingress_rules(host: &str, service: &str) -> Value {
    json!([{"host": host, "http": {"paths": [
        {"path": "/", "pathType": "Prefix", "backend": {"service": {"name": service, "port": {"number": 80}}}}
    ]}}])
}

async fn create_route(
    w: &World,
    kind: &str,
    name: &str,
    host: &str,
    service: &str,
) -> anyhow::Result<()> {
    if kind == "ingress" {
        let ingress: Ingress = serde_json::from_value(json!({
            "metadata": {"name": name},
            "spec": {"ingressClassName": w.class, "rules": ingress_rules(host, service)},
        }))?;
        w.api::<Ingress>()
            .create(&PostParams::default(), &ingress)
            .await?;
    } else {
        let route: HttpRoute = serde_json::from_value(json!({
            "apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
            "metadata": {"name": name},
            "spec": {"parentRefs": [{"name": "edge"}], "hostnames": [host],
                     "rules": [{"backendRefs": [{"name": service, "port": 80}]}]},
        }))?;
        w.api::<HttpRoute>()
            .create(&PostParams::default(), &route)
            .await?;
    }
    Ok(())
}

async fn patch_host(w: &World, kind: &str, name: &str, host: &str) -> anyhow::Result<()> {
    if kind == "ingress" {
        let patch = json!({"spec": {"rules": ingress_rules(host, "b")}});
        w.api::<Ingress>()
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
    } else {
        let patch = json!({"spec": {"hostnames": [host]}});
        w.api::<HttpRoute>()
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
    }
    Ok(())
}

async fn delete_route(w: &World, kind: &str, name: &str) -> anyhow::Result<()> {
    if kind == "ingress" {
        w.api::<Ingress>()
            .delete(name, &DeleteParams::default())
            .await?;
    } else {
        w.api::<HttpRoute>()
            .delete(name, &DeleteParams::default())
            .await?;
    }
    Ok(())
}

/// The sluice process, killed (and reaped) when dropped.
struct Sluice {
    child: tokio::process::Child,
    pid: u32,
    log: PathBuf,
}

impl Sluice {
    async fn start(
        w: &World,
        knobs: &Knobs,
        kind: &str,
        kubeconfig: &Path,
        http: SocketAddr,
        admin: SocketAddr,
    ) -> anyhow::Result<Sluice> {
        let log = w.cp.dir().join(format!("sluice-{}.log", w.ns));
        let out = std::fs::File::create(&log)?;
        let mut cmd = tokio::process::Command::new(&knobs.sluice);
        cmd.arg("controller")
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .args(["--watch-namespace", &w.ns])
            .args(["--ingress-class", &w.class])
            .args(["--controller-name", &w.controller_name])
            .args(["--election-namespace", &w.ns])
            .args(["--identity", "bench"])
            .args(["--http-addr", &http.to_string()])
            .args(["--https-addr", "127.0.0.1:0"])
            .args(["--admin-addr", &admin.to_string()])
            .args(["--shutdown-delay", "0s"])
            .args(["--workers", "1"]);
        if kind == "httproute" {
            cmd.args(["--gateway-api", "on"])
                .args(["--gateway-controller-name", &gateway_controller(w)]);
        } else {
            cmd.args(["--gateway-api", "off"]);
        }
        cmd.env("RUST_LOG", "warn")
            .stdout(out.try_clone()?)
            .stderr(out)
            .kill_on_drop(true);
        let child = cmd.spawn().context("spawn sluice")?;
        let pid = child.id().context("sluice exited at once")?;
        Ok(Sluice { child, pid, log })
    }

    /// CPU seconds of the whole process and of its `sluice-control` threads.
    fn cpu(&self) -> (f64, f64) {
        let ticks = 100.0; // USER_HZ on Linux
        let of = |stat: &str| -> Option<(String, f64)> {
            let (head, tail) = stat.rsplit_once(") ")?;
            let comm = head.split_once(" (")?.1.to_owned();
            let f: Vec<&str> = tail.split_whitespace().collect();
            let (u, s): (f64, f64) = (f.get(11)?.parse().ok()?, f.get(12)?.parse().ok()?);
            Some((comm, (u + s) / ticks))
        };
        let total = std::fs::read_to_string(format!("/proc/{}/stat", self.pid))
            .ok()
            .and_then(|s| of(&s))
            .map_or(0.0, |(_, c)| c);
        let mut control = 0.0;
        if let Ok(tasks) = std::fs::read_dir(format!("/proc/{}/task", self.pid)) {
            for t in tasks.flatten() {
                if let Some((comm, c)) = std::fs::read_to_string(t.path().join("stat"))
                    .ok()
                    .and_then(|s| of(&s))
                    && comm.starts_with("sluice-control")
                {
                    control += c;
                }
            }
        }
        (total, control)
    }

    /// VmRSS and VmHWM in KiB.
    fn memory(&self) -> (u64, u64) {
        let status =
            std::fs::read_to_string(format!("/proc/{}/status", self.pid)).unwrap_or_default();
        let field = |name: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .and_then(|v| v.split_whitespace().next()?.parse().ok())
                .unwrap_or(0)
        };
        (field("VmRSS:"), field("VmHWM:"))
    }

    async fn stop(mut self) -> anyhow::Result<()> {
        let _ = std::process::Command::new("kill")
            .args(["-TERM", &self.pid.to_string()])
            .status();
        if tokio::time::timeout(Duration::from_secs(10), self.child.wait())
            .await
            .is_err()
        {
            self.child.kill().await?;
        }
        Ok(())
    }

    fn log_tail(&self) -> String {
        let log = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(20)..].join("\n")
    }
}

async fn measure(
    w: &World,
    knobs: &Knobs,
    kind: &str,
    size: usize,
    kubeconfig: &Path,
) -> anyhow::Result<Row> {
    let http = SocketAddr::from(([127, 0, 0, 1], sluice_testenv::free_port()?));
    let admin = SocketAddr::from(([127, 0, 0, 1], sluice_testenv::free_port()?));
    // A plain watch of the kind, beside sluice's: when the API server delivered each change
    // (and, before the changes, sluice's status writes).
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let observer = if kind == "ingress" {
        tokio::spawn(observe(w.api::<Ingress>(), ingress_host, seen.clone()))
    } else {
        tokio::spawn(observe(w.api::<HttpRoute>(), route_host, seen.clone()))
    };
    let started = Instant::now();
    let sluice = Sluice::start(w, knobs, kind, kubeconfig, http, admin).await?;
    // Cold start: spawn -> the stable route answers from its backend.
    let cold_limit = started + Duration::from_secs(120);
    loop {
        if let Ok(r) = support::get(http, "stable.bench", "/").await
            && r.status == 200
            && r.service() == "a"
        {
            break;
        }
        if Instant::now() > cold_limit {
            anyhow::bail!(
                "sluice never served the stable route; its log:\n{}",
                sluice.log_tail()
            );
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let cold_start = started.elapsed();

    // Steady state first: the status sluice writes to every route it has not written
    // before (all of them on a first start; no Ingress status here) is done once the
    // routes have gone quiet. Changes measured during that burst would time the API
    // server's writes of thousands of statuses, not a change.
    let quiet_for = Duration::from_secs(3);
    let settle_limit = Instant::now() + Duration::from_secs(300);
    loop {
        let last = seen
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .last()
            .map(|s: &Seen| s.at);
        let quiet_since = last.map_or(started, |at| at.max(started));
        if quiet_since.elapsed() >= quiet_for || Instant::now() > settle_limit {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let statuses_settled = started.elapsed().saturating_sub(quiet_for);

    // Steady bounded load on the stable route: keep-alive connections, until done or the
    // deadline; every answer that is not a 2xx from backend `a` counts as an error.
    let done = Arc::new(AtomicBool::new(false));
    let (ok, errors) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let deadline = Instant::now() + Duration::from_secs(knobs.changes / knobs.rate + 120);
    // Paced: each connection sends one request every `load / load_rate` seconds; a request
    // answered late is followed at once by the next due one, none are made up later.
    let pace = (knobs.load_rate > 0)
        .then(|| Duration::from_secs_f64(knobs.load as f64 / knobs.load_rate as f64));
    let load_started = Instant::now();
    let mut load = Vec::new();
    for _ in 0..knobs.load {
        let (done, ok, errors) = (done.clone(), ok.clone(), errors.clone());
        load.push(tokio::spawn(async move {
            let client =
                hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
                    .pool_max_idle_per_host(1)
                    .build_http::<Empty<Bytes>>();
            let mut ticks = pace.map(|every| {
                let mut ticks = tokio::time::interval(every);
                ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
                ticks
            });
            while !done.load(Ordering::Relaxed) && Instant::now() < deadline {
                if let Some(ticks) = ticks.as_mut() {
                    ticks.tick().await;
                }
                let answered = async {
                    let request = hyper::Request::get(format!("http://{http}/"))
                        .header(hyper::header::HOST, "stable.bench")
                        .body(Empty::new())?;
                    let response = client.request(request).await?;
                    let status = response.status();
                    let body = response.into_body().collect().await?.to_bytes();
                    let from_a =
                        serde_json::from_slice::<Value>(&body).is_ok_and(|j| j["service"] == "a");
                    anyhow::Ok(status.is_success() && from_a)
                };
                match tokio::time::timeout(Duration::from_secs(10), answered).await {
                    Ok(Ok(true)) => ok.fetch_add(1, Ordering::Relaxed),
                    _ => errors.fetch_add(1, Ordering::Relaxed),
                };
            }
        }));
    }
    // Let the load settle before the first change.
    tokio::time::sleep(Duration::from_millis(500)).await;

    let mut written = Vec::new();
    let (cpu_before, control_before) = sluice.cpu();
    let rebuilds_before = rebuild_metrics(admin).await?;
    let mut hosts = vec![String::new(); SLOTS as usize];
    let mut probes = Vec::new();
    let mut tick = tokio::time::interval(Duration::from_micros(1_000_000 / knobs.rate));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut last = 0;
    for i in 0..knobs.changes {
        tick.tick().await;
        let sent = Instant::now();
        let slot = i % SLOTS;
        let name = format!("churn-{slot}");
        let host = format!("c{size}-{i}.bench");
        let current = &mut hosts[slot as usize];
        // create -> update -> delete per slot, round by round.
        let (probed, op) = match (i / SLOTS) % 3 {
            0 => {
                create_route(w, kind, &name, &host, "b").await?;
                *current = host.clone();
                (host, "create")
            }
            1 => {
                patch_host(w, kind, &name, &host).await?;
                *current = host.clone();
                (host, "update")
            }
            _ => {
                delete_route(w, kind, &name).await?;
                (std::mem::take(current), "delete")
            }
        };
        let deleted = op == "delete";
        let acknowledged = Instant::now();
        written.push(Written {
            sent,
            acknowledged,
            acknowledged_at: SystemTime::now(),
            op,
            name,
            host: probed.clone(),
        });
        probes.push(tokio::task::spawn_blocking(move || {
            probe(http, &probed, deleted, acknowledged)
        }));
        last = i;
    }
    let mut answered = Vec::new();
    for p in probes {
        answered.push(p.await?);
    }
    let (cpu_after, control_after) = sluice.cpu();
    observer.abort();
    let watched: Vec<Option<Duration>> = {
        let seen = seen.lock().unwrap_or_else(|e| e.into_inner());
        written.iter().map(|w| w.seen_after(&seen)).collect()
    };
    let propagation: Vec<Duration> = answered.iter().flatten().copied().collect();
    let lost = answered.iter().filter(|a| a.is_none()).count() as u64;
    let watch: Vec<Duration> = watched.iter().flatten().copied().collect();
    // Per change seen by both: what is left once the API server delivered it.
    let after_watch = answered
        .iter()
        .zip(&watched)
        .filter_map(|(a, w)| Some(a.as_ref()?.saturating_sub(*w.as_ref()?)))
        .collect();
    // The slowest changes, to tell a slow kind of change from a stall of the machine
    // (several changes in a row) and the control plane's share from sluice's.
    let mut slowest: Vec<usize> = (0..written.len()).collect();
    slowest.sort_by_key(|&i| std::cmp::Reverse(answered[i].unwrap_or(Duration::MAX)));
    let phase = written.first().map(|w| w.sent);
    for &i in slowest.iter().take(5) {
        let w = &written[i];
        eprintln!(
            "[propagation] {kind} {size}: slow change #{i} ({}) at {:.1} s, acknowledged {} UTC: {} (watch {})",
            w.op,
            phase.map_or(0.0, |p| w.sent.duration_since(p).as_secs_f64()),
            time_of_day(w.acknowledged_at),
            answered[i].map_or("lost".to_owned(), |d| format!("{d:.1?}")),
            watched[i].map_or("unseen".to_owned(), |d| format!("{d:.1?}")),
        );
    }
    let rebuilds_after = rebuild_metrics(admin).await?;
    let rebuilds = rebuilds_after.0 - rebuilds_before.0;
    let partial = rebuilds_after.2 - rebuilds_before.2;
    let compile_mean =
        Duration::from_secs_f64((rebuilds_after.1 - rebuilds_before.1) / rebuilds.max(1.0));
    let (rss_kib, hwm_kib) = sluice.memory();
    done.store(true, Ordering::Relaxed);
    for l in load {
        l.await?;
    }
    let stable_rate = (ok.load(Ordering::Relaxed) + errors.load(Ordering::Relaxed)) as f64
        / load_started.elapsed().as_secs_f64();
    // Leave the namespace as it was: the change phase's routes go.
    for slot in 0..SLOTS.min(last + 1) {
        let _ = delete_route(w, kind, &format!("churn-{slot}")).await;
    }
    sluice.stop().await?;
    let per_1000 = |cpu: f64| cpu * 1000.0 / knobs.changes.max(1) as f64;
    Ok(Row {
        kind: kind.to_owned(),
        routes: size,
        cold_start,
        statuses_settled,
        propagation,
        watch,
        after_watch,
        lost,
        stable_ok: ok.load(Ordering::Relaxed),
        stable_errors: errors.load(Ordering::Relaxed),
        stable_rate,
        rss_kib,
        hwm_kib,
        cpu_per_1000: per_1000(cpu_after - cpu_before),
        control_cpu_per_1000: per_1000(control_after - control_before),
        rebuilds,
        partial,
        compile_mean,
    })
}

/// Asks sluice for `host` every [`POLL_EVERY`], each time over a connection of its own,
/// until it answers as the change asks (from backend `b`, or 404 once deleted): the time
/// since `acknowledged`, or `None` after [`PROPAGATION_LIMIT`]. Blocks: run it on a thread
/// of its own.
fn probe(http: SocketAddr, host: &str, deleted: bool, acknowledged: Instant) -> Option<Duration> {
    let limit = acknowledged + PROPAGATION_LIMIT;
    while Instant::now() < limit {
        if let Ok(r) = get_blocking(http, host) {
            let followed = if deleted {
                r.status == 404
            } else {
                r.status == 200 && r.service() == "b"
            };
            if followed {
                return Some(acknowledged.elapsed());
            }
        }
        std::thread::sleep(POLL_EVERY);
    }
    None
}

/// GET / with `Host: host` over a fresh blocking connection.
fn get_blocking(addr: SocketAddr, host: &str) -> anyhow::Result<support::Reply> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(5))?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    s.write_all(format!("GET / HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n").as_bytes())?;
    let mut buf = Vec::new();
    s.read_to_end(&mut buf)?;
    support::parse(&buf)
}

/// One event a plain watch saw: when, whether a deletion, the object's name and host.
struct Seen {
    at: Instant,
    deleted: bool,
    name: String,
    host: String,
}

/// One change written: when sent and acknowledged, and what a watch will show of it.
struct Written {
    sent: Instant,
    acknowledged: Instant,
    /// The acknowledgement on the wall clock, to find the change in sluice's log.
    acknowledged_at: SystemTime,
    /// "create", "update" or "delete".
    op: &'static str,
    name: String,
    host: String,
}

impl Written {
    /// Acknowledged -> the first event of this change in `seen` (zero when the event came
    /// before the acknowledgement).
    fn seen_after(&self, seen: &[Seen]) -> Option<Duration> {
        let deleted = self.op == "delete";
        seen.iter()
            .find(|s| {
                s.at >= self.sent
                    && s.deleted == deleted
                    && s.name == self.name
                    && (deleted || s.host == self.host)
            })
            .map(|s| s.at.saturating_duration_since(self.acknowledged))
    }
}

/// Watches `api` from now on, noting every event in `seen`, until aborted or the watch
/// ends.
async fn observe<K>(
    api: Api<K>,
    host_of: fn(&K) -> String,
    seen: Arc<std::sync::Mutex<Vec<Seen>>>,
) -> anyhow::Result<()>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let version = api
        .list_metadata(&kube::api::ListParams::default().limit(1))
        .await?
        .metadata
        .resource_version
        .unwrap_or_default();
    let mut events = api
        .watch(&kube::api::WatchParams::default().timeout(290), &version)
        .await?
        .boxed();
    while let Some(event) = events.try_next().await? {
        let (object, deleted) = match event {
            kube::api::WatchEvent::Added(o) | kube::api::WatchEvent::Modified(o) => (o, false),
            kube::api::WatchEvent::Deleted(o) => (o, true),
            _ => continue,
        };
        let at = Instant::now();
        let name = object.meta().name.clone().unwrap_or_default();
        let host = host_of(&object);
        seen.lock().unwrap_or_else(|e| e.into_inner()).push(Seen {
            at,
            deleted,
            name,
            host,
        });
    }
    Ok(())
}

fn ingress_host(ingress: &Ingress) -> String {
    (ingress.spec.as_ref())
        .and_then(|s| s.rules.as_ref())
        .and_then(|r| r.first())
        .and_then(|r| r.host.clone())
        .unwrap_or_default()
}

fn route_host(route: &HttpRoute) -> String {
    route.spec.hostnames.first().cloned().unwrap_or_default()
}

/// `sluice_table_rebuilds_total`, `sluice_table_rebuild_duration_seconds_sum` and
/// `sluice_table_partial_rebuilds_total` from the admin port's /metrics.
async fn rebuild_metrics(admin: SocketAddr) -> anyhow::Result<(f64, f64, f64)> {
    let text = support::get(admin, "localhost", "/metrics").await?.body;
    let value = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
            .unwrap_or(0.0)
    };
    Ok((
        value("sluice_table_rebuilds_total"),
        value("sluice_table_rebuild_duration_seconds_sum"),
        value("sluice_table_partial_rebuilds_total"),
    ))
}

/// `HH:MM:SS.ffffff` (UTC) of `at`, the form of sluice's log timestamps.
fn time_of_day(at: SystemTime) -> String {
    let since = at
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default();
    let secs = since.as_secs() % 86_400;
    format!(
        "{:02}:{:02}:{:02}.{:06}",
        secs / 3600,
        secs / 60 % 60,
        secs % 60,
        since.subsec_micros()
    )
}

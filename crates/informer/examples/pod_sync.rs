//! The sluice side of `bench/informer.sh`: a Pod informer from a `SharedInformerFactory`,
//! started and waited on; prints `RESULT <seconds> <VmHWM KiB> <pods>` (time from creating
//! the factory to cache sync; peak resident memory of the whole process).
//!
//! With `--metadata` it asks for the metadata-only informer of Pods instead
//! (`PartialObjectMeta<Pod>`: what a consumer of names, labels and owners needs).
//!
//! With `--steady SECS` it also registers an update handler before starting, and after the
//! RESULT line stays for SECS seconds (plus until updates stop arriving, at most 30 s more)
//! while the benchmark patches Pods; the handler reads the time each patch was sent from the
//! Pod's [`WRITTEN_AT`] annotation. Then it prints
//! `STEADY <VmRSS at sync KiB> <VmRSS at end KiB> <VmHWM KiB> <updates> <p50 us> <p99 us> <max us>`.
//!
//! Then, with glibc's allocator, an `INFO heap: ...` line (bytes in use and free in the heap).
//!
//! `cargo run --release -p sluice-informer --example pod_sync -- --namespace NS [--metadata] [--steady SECS]`

mod common;

use std::{
    sync::Arc,
    time::{Duration, Instant, SystemTime, UNIX_EPOCH},
};

use k8s_openapi::api::core::v1::Pod;
use parking_lot::Mutex;
use sluice_informer::{HandlerFuncs, SharedInformerFactory};

/// glibc's `struct mallinfo2` (glibc 2.33+): heap in use and free, for the `INFO` line.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[repr(C)]
#[allow(dead_code)] // every field is there for the layout; only some are read
struct Mallinfo2 {
    arena: usize,
    ordblks: usize,
    smblks: usize,
    hblks: usize,
    hblkhd: usize,
    usmblks: usize,
    fsmblks: usize,
    uordblks: usize,
    fordblks: usize,
    keepcost: usize,
}
#[cfg(all(target_os = "linux", target_env = "gnu"))]
unsafe extern "C" {
    fn mallinfo2() -> Mallinfo2;
}

/// `INFO heap ...`: where the resident memory is (glibc's allocator only).
fn heap_info() -> Option<String> {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: mallinfo2 takes no arguments and returns a plain struct by value.
        let m = unsafe { mallinfo2() };
        let mib = |b: usize| b as f64 / (1024.0 * 1024.0);
        Some(format!(
            "INFO heap: in use {:.1} MiB, free in the heap {:.1} MiB, mmapped {:.1} MiB; VmRSS {:.1} MiB",
            mib(m.uordblks),
            mib(m.fordblks),
            mib(m.hblkhd),
            status_kib("VmRSS:") as f64 / 1024.0
        ))
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    None
}

/// The annotation in which the benchmark writes when it sent a patch (microseconds since
/// the Unix epoch).
const WRITTEN_AT: &str = "bench.sluice.dev/written-at";

/// Handler latencies kept at most (the phase is bounded anyway).
const MAX_SAMPLES: usize = 2_000_000;

/// A field of `/proc/self/status` in KiB (`VmHWM`, `VmRSS`), 0 where /proc is not readable.
fn status_kib(field: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(field))
                .and_then(|l| l.split_whitespace().nth(1).and_then(|v| v.parse().ok()))
        })
        .unwrap_or(0)
}

fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros() as u64)
        .unwrap_or(0)
}

fn written_at(pod: &Pod) -> Option<u64> {
    pod.metadata
        .annotations
        .as_ref()?
        .get(WRITTEN_AT)?
        .parse()
        .ok()
}

fn percentile(sorted: &[u64], p: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let i = ((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[i]
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = common::Args::parse();
    let ns = args.namespace();
    let steady = args.value("steady").and_then(|v| v.parse::<u64>().ok());
    let client = kube::Client::try_default().await?;
    // Warm the connection (TLS, auth) outside the measurement, as the client-go peer does.
    client.apiserver_version().await?;
    let began = Instant::now();
    let factory = SharedInformerFactory::new(client);
    let latencies = Arc::new(Mutex::new(Vec::<u64>::new()));
    let last_update = Arc::new(Mutex::new(Instant::now()));
    // Both informers' stores are read the same way at the end: keep just a length reader.
    let len: Box<dyn Fn() -> usize> = if args.flag("metadata") {
        let pods = factory.namespaced_metadata_informer::<Pod>(&ns);
        Box::new(move || pods.store().len())
    } else {
        let pods = factory.namespaced_informer::<Pod>(&ns);
        if steady.is_some() {
            let (lat, last) = (latencies.clone(), last_update.clone());
            pods.add_event_handler(HandlerFuncs::new().on_update(
                move |old: Arc<Pod>, new: Arc<Pod>| {
                    let Some(sent) = written_at(&new) else { return };
                    if written_at(&old) == Some(sent) {
                        return;
                    }
                    let took = now_us().saturating_sub(sent);
                    let mut lat = lat.lock();
                    if lat.len() < MAX_SAMPLES {
                        lat.push(took);
                    }
                    *last.lock() = Instant::now();
                },
            ));
        }
        Box::new(move || pods.store().len())
    };
    factory.start();
    let synced = factory
        .wait_for_cache_sync(args.seconds("timeout", 300))
        .await;
    anyhow::ensure!(synced.values().all(|s| *s), "no cache sync");
    let secs = began.elapsed().as_secs_f64();
    println!("RESULT {secs:.3} {} {}", status_kib("VmHWM:"), len());
    if let Some(info) = heap_info() {
        println!("{info}");
    }
    if let Some(steady) = steady {
        let rss_synced = status_kib("VmRSS:");
        tokio::time::sleep(Duration::from_secs(steady)).await;
        // Then until 3 s pass without an update (at most 30 s more).
        let extra = Instant::now() + Duration::from_secs(30);
        while Instant::now() < extra && last_update.lock().elapsed() < Duration::from_secs(3) {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        let rss_end = status_kib("VmRSS:");
        let mut lat = std::mem::take(&mut *latencies.lock());
        lat.sort_unstable();
        println!(
            "STEADY {rss_synced} {rss_end} {} {} {} {} {}",
            status_kib("VmHWM:"),
            lat.len(),
            percentile(&lat, 0.50),
            percentile(&lat, 0.99),
            lat.last().copied().unwrap_or(0)
        );
    }
    factory.shutdown().await;
    Ok(())
}

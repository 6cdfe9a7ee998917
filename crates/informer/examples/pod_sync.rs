//! The sluice side of `bench/informer.sh`: a Pod informer from a `SharedInformerFactory`,
//! started and waited on; prints `RESULT <seconds> <VmHWM KiB> <pods>` (time from creating
//! the factory to cache sync; peak resident memory of the whole process).
//!
//! With `--metadata` it asks for the metadata-only informer of Pods instead
//! (`PartialObjectMeta<Pod>`: what a consumer of names, labels and owners needs).
//!
//! `cargo run --release -p sluice-informer --example pod_sync -- --namespace NS [--metadata]`

mod common;

use std::time::Instant;

use k8s_openapi::api::core::v1::Pod;
use sluice_informer::SharedInformerFactory;

/// `VmHWM` (peak resident set) of this process in KiB, 0 where /proc is not readable.
fn vm_hwm_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1).and_then(|v| v.parse().ok()))
        })
        .unwrap_or(0)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = common::Args::parse();
    let ns = args.namespace();
    let client = kube::Client::try_default().await?;
    // Warm the connection (TLS, auth) outside the measurement, as the client-go peer does.
    client.apiserver_version().await?;
    let began = Instant::now();
    let factory = SharedInformerFactory::new(client);
    // Both informers' stores are read the same way at the end: keep just a length reader.
    let len: Box<dyn Fn() -> usize> = if args.flag("metadata") {
        let pods = factory.namespaced_metadata_informer::<Pod>(&ns);
        Box::new(move || pods.store().len())
    } else {
        let pods = factory.namespaced_informer::<Pod>(&ns);
        Box::new(move || pods.store().len())
    };
    factory.start();
    let synced = factory
        .wait_for_cache_sync(args.seconds("timeout", 300))
        .await;
    anyhow::ensure!(synced.values().all(|s| *s), "no cache sync");
    let secs = began.elapsed().as_secs_f64();
    println!("RESULT {secs:.3} {} {}", vm_hwm_kib(), len());
    factory.shutdown().await;
    Ok(())
}

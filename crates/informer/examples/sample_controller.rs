//! client-go's sample "workqueue" controller, on sluice-informer.
//!
//! A Pod informer feeds keys into a rate-limited work queue; a worker prints what it finds in
//! the cache. Errors are retried 5 times with backoff, then the key is dropped. Before
//! starting, the cache is pre-warmed with a pod `mypod` "known from an earlier run": if it does
//! not exist any more, its deletion shows up right after the first sync.
//!
//! `cargo run -p sluice-informer --example sample_controller -- --namespace NS [--run-for 10] [--fail POD] [--prewarm mypod]`

mod common;

use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use kube::{Api, api::ObjectMeta};
use sluice_informer::{
    ApiListWatch, Controller, HandlerFuncs, ListOptions, Outcome, SharedIndexInformer, StoreWriter,
    object_key, workqueue::RateLimitingQueue,
};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = common::Args::parse();
    let ns = args.namespace();
    let fail = args.value("fail");
    let prewarm = args.value("prewarm").unwrap_or_else(|| "mypod".into());
    let client = kube::Client::try_default().await?;

    // Warm the cache: we "knew" about `mypod` on our last run.
    let store = StoreWriter::<Pod>::new();
    store.add(Arc::new(Pod {
        metadata: ObjectMeta {
            name: Some(prewarm),
            namespace: Some(ns.clone()),
            ..Default::default()
        },
        ..Default::default()
    }))?;

    let source =
        ApiListWatch::with_options(Api::<Pod>::namespaced(client, &ns), &ListOptions::default());
    let informer = SharedIndexInformer::with_store(source, None, store);
    let queue = RateLimitingQueue::<String>::with_default_rate_limiter();
    let (q1, q2, q3) = (queue.clone(), queue.clone(), queue.clone());
    informer.add_event_handler(
        HandlerFuncs::new()
            .on_add(move |p: Arc<Pod>, _| {
                if let Ok(k) = object_key(p.as_ref()) {
                    q1.add(k)
                }
            })
            .on_update(move |_, p| {
                if let Ok(k) = object_key(p.as_ref()) {
                    q2.add(k)
                }
            })
            .on_delete(move |d| {
                // d may be a tombstone (DeletedFinalStateUnknown); its key is what we need
                let key = match d.tombstone() {
                    Some(t) => Ok(t.key.clone()),
                    None => object_key(d.object().as_ref()),
                };
                if let Ok(k) = key {
                    q3.add(k)
                }
            }),
    );
    informer.start();
    if !informer
        .wait_for_sync(args.seconds("sync-timeout", 30))
        .await
    {
        anyhow::bail!("timed out waiting for caches to sync");
    }
    println!("Starting Pod controller");

    let store = informer.store().clone();
    let reconcile = move |key: String| {
        let store = store.clone();
        let fail = fail.clone();
        async move {
            match store.get_by_key(&key) {
                None => println!("Pod {key} does not exist anymore"),
                Some(pod) => {
                    let name = pod.metadata.name.clone().unwrap_or_default();
                    if fail.as_deref() == Some(name.as_str()) {
                        return Err(format!("simulated failure for {name}"));
                    }
                    println!("Sync/Add/Update for Pod {name}");
                }
            }
            Ok(())
        }
    };
    let run_for = args.seconds("run-for", 10);
    Controller::new(queue)
        .workers(1)
        .max_retries(5)
        .on_outcome(|key: &String, outcome, err| match outcome {
            Outcome::Requeued => println!("Error syncing pod {key}: {}", err.unwrap_or_default()),
            Outcome::Dropped => println!(
                "Dropping pod {key} out of the queue: {}",
                err.unwrap_or_default()
            ),
            Outcome::Done => {}
        })
        .run(reconcile, tokio::time::sleep(run_for))
        .await;
    informer.shutdown().await;
    println!("Stopping Pod controller");
    Ok(())
}

//! An informer whose store indexes Pods by namespace (built in) and by `spec.nodeName`.
//!
//! `cargo run -p sluice-informer --example indexer -- [--namespace NS] [--timeout 30]`

mod common;

use k8s_openapi::api::core::v1::Pod;
use kube::{Api, ResourceExt};
use sluice_informer::{ApiListWatch, ListOptions, NAMESPACE_INDEX, SharedIndexInformer};

const NODE_INDEX: &str = "node";

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = common::Args::parse();
    let client = kube::Client::try_default().await?;
    let api: Api<Pod> = match args.value("namespace") {
        Some(ns) => Api::namespaced(client, &ns),
        None => Api::all(client),
    };
    let informer = SharedIndexInformer::new(
        ApiListWatch::with_options(api, &ListOptions::default()),
        None,
    );
    informer.add_index(NODE_INDEX, |p: &Pod| {
        p.spec
            .as_ref()
            .and_then(|s| s.node_name.clone())
            .into_iter()
            .collect()
    })?;
    informer.start();
    if !informer.wait_for_sync(args.seconds("timeout", 30)).await {
        anyhow::bail!("informer did not sync in time");
    }
    let store = informer.store();
    let mut namespaces = store.index_values(NAMESPACE_INDEX)?;
    namespaces.sort();
    for ns in namespaces {
        let mut names: Vec<String> = store
            .by_index(NAMESPACE_INDEX, &ns)?
            .iter()
            .map(|p| p.name_any())
            .collect();
        names.sort();
        println!("namespace {ns}: {} pods: {}", names.len(), names.join(","));
    }
    let mut nodes = store.index_values(NODE_INDEX)?;
    nodes.sort();
    for node in nodes {
        let mut keys = store.index_keys(NODE_INDEX, &node)?;
        keys.sort();
        println!("node {node}: {} pods: {}", keys.len(), keys.join(","));
    }
    let unscheduled = store
        .list()
        .iter()
        .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_none())
        .count();
    println!("unscheduled: {unscheduled}");
    informer.shutdown().await;
    Ok(())
}

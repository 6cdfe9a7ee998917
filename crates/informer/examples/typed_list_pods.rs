//! Typed list: `Api<Pod>::list`.
//!
//! `cargo run -p sluice-informer --example typed_list_pods -- --namespace default`

mod common;

use k8s_openapi::api::core::v1::Pod;
use kube::{Api, ResourceExt, api::ListParams};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = common::Args::parse();
    let ns = args.namespace();
    let client = kube::Client::try_default().await?;
    let pods: Api<Pod> = Api::namespaced(client, &ns);
    let list = pods.list(&ListParams::default()).await?;
    println!("{} pods in namespace {ns}", list.items.len());
    for pod in list.items {
        let phase = pod
            .status
            .as_ref()
            .and_then(|s| s.phase.clone())
            .unwrap_or_else(|| "Unknown".into());
        let node = pod
            .spec
            .as_ref()
            .and_then(|s| s.node_name.clone())
            .unwrap_or_default();
        println!("pod {} phase={phase} node={node}", pod.name_any());
    }
    Ok(())
}

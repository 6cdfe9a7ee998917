//! Dynamic list by group/version/resource (`Api<DynamicObject>`), converted to typed Pods.
//!
//! `cargo run -p sluice-informer --example dynamic_list -- --namespace default [--gvr /v1/pods]`

mod common;

use k8s_openapi::api::core::v1::Pod;
use kube::{
    Api, ResourceExt,
    api::{ApiResource, DynamicObject, GroupVersionKind, ListParams},
};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = common::Args::parse();
    let ns = args.namespace();
    // group/version/resource; the kind is only needed for typed conversion
    let gvr = args.value("gvr").unwrap_or_else(|| "/v1/pods".into());
    let mut parts = gvr.splitn(3, '/');
    let (group, version, resource) = (
        parts.next().unwrap_or_default().to_string(),
        parts.next().unwrap_or("v1").to_string(),
        parts.next().unwrap_or("pods").to_string(),
    );
    let kind = args.value("kind").unwrap_or_else(|| "Pod".into());
    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(&group, &version, &kind),
        &resource,
    );
    let client = kube::Client::try_default().await?;
    let api: Api<DynamicObject> = Api::namespaced_with(client, &ns, &ar);
    let list = api.list(&ListParams::default()).await?;
    println!(
        "{} {resource} in namespace {ns} via {}",
        list.items.len(),
        api.resource_url()
    );
    for obj in list.items {
        let name = obj.name_any();
        if kind == "Pod" {
            // DynamicObject -> typed Pod
            let pod: Pod = obj.try_parse()?;
            let phase = pod
                .status
                .and_then(|s| s.phase)
                .unwrap_or_else(|| "Unknown".into());
            println!("pod {name} phase={phase} (typed from DynamicObject)");
        } else {
            println!("{kind} {name}");
        }
    }
    Ok(())
}

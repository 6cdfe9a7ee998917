//! A shared informer factory serving two consumers of Pods (one watch) plus ConfigMaps, read
//! through listers.
//!
//! `cargo run -p sluice-informer --example factory_lister -- --namespace NS [--selector app=web] [--timeout 30]`

mod common;

use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::ResourceExt;
use sluice_informer::SharedInformerFactory;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = common::Args::parse();
    let ns = args.namespace();
    let selector = args.value("selector").unwrap_or_default();
    let client = kube::Client::try_default().await?;
    let factory = SharedInformerFactory::new(client);
    // Two consumers of Pods: the factory hands both the same informer (one watch).
    let pod_lister = factory.namespaced_informer::<Pod>(&ns).lister();
    let pod_informer = factory.namespaced_informer::<Pod>(&ns);
    let cm_lister = factory.namespaced_informer::<ConfigMap>(&ns).lister();
    println!("informers in factory: {}", factory.len());
    factory.start();
    let synced = factory
        .wait_for_cache_sync(args.seconds("timeout", 30))
        .await;
    println!("synced: {}", synced.values().all(|s| *s));
    println!(
        "pod informer shared: {}",
        pod_informer.store().len() == pod_lister.list_all().len()
    );

    let mut pods = pod_lister.list_str(Some(&ns), &selector)?;
    pods.sort_by_key(|p| p.name_any());
    println!("pods matching {selector:?}: {}", pods.len());
    for p in pods {
        println!("pod {}", p.name_any());
    }
    let mut cms = cm_lister.list_all();
    cms.sort_by_key(|c| c.name_any());
    println!("configmaps: {}", cms.len());
    for c in cms {
        println!(
            "configmap {} keys={}",
            c.name_any(),
            c.data.as_ref().map_or(0, |d| d.len())
        );
    }
    if let Some(name) = args.value("get") {
        match pod_lister.get(&ns, &name) {
            Some(p) => println!("get {name}: found, uid {}", p.uid().unwrap_or_default()),
            None => println!("get {name}: not found"),
        }
    }
    factory.shutdown().await;
    Ok(())
}

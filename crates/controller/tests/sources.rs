//! What the controller's informers cache of objects from a real API server: what routing
//! reads (`sluice_controller::projection`), not the `kubectl apply` bookkeeping nor other
//! metadata.

use k8s_openapi::api::core::v1::Service;
use kube::Api;
use kube::api::PostParams;
use serde_json::json;
use sluice_controller::sources::IngressInformers;
use sluice_informer::{LAST_APPLIED_ANNOTATION, SharedInformerFactory};
use sluice_testenv::ControlPlane;
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cached_services_are_projected_to_what_routing_reads() -> anyhow::Result<()> {
    let cp = ControlPlane::shared().await?;
    let ns = cp.create_namespace("sources").await?;
    let services: Api<Service> = Api::namespaced(cp.client(), &ns);
    let applied = json!({"apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "web", "namespace": ns}, "spec": {"ports": [{"name": "http", "port": 80}]}});
    let svc: Service = serde_json::from_value(json!({
        "metadata": {"name": "web", "annotations": {
            LAST_APPLIED_ANNOTATION: applied.to_string(),
            "team": "shop",
        }},
        "spec": {"ports": [{"name": "http", "port": 80, "targetPort": 8080}]},
    }))?;
    services.create(&PostParams::default(), &svc).await?;

    let factory = SharedInformerFactory::new(cp.client());
    let informers = IngressInformers::from_cluster(&factory, Some(&ns), None);
    informers.start();
    let synced = informers.wait_for_sync(Duration::from_secs(60)).await;
    assert!(synced, "not synced: {:?}", informers.unsynced());
    let cached = informers
        .services
        .store()
        .get_by_key(&format!("{ns}/web"))
        .expect("the Service is cached");
    assert_eq!(cached.metadata.annotations, None, "annotations are dropped");
    assert!(cached.metadata.uid.is_some() && cached.metadata.resource_version.is_some());
    let port = cached
        .spec
        .as_ref()
        .and_then(|s| s.ports.as_ref())
        .and_then(|p| p.first())
        .expect("ports kept");
    assert_eq!((port.name.as_deref(), port.port), (Some("http"), 80));
    assert_eq!(port.target_port, None, "routing sends to endpoint ports");
    // The API server still has it: only the cache is trimmed.
    let stored = services.get("web").await?;
    assert!(
        stored
            .metadata
            .annotations
            .unwrap_or_default()
            .contains_key(LAST_APPLIED_ANNOTATION)
    );
    informers.shutdown().await;
    Ok(())
}

//! What the informer benchmarks share.

use k8s_openapi::api::core::v1::Pod;

/// A Pod shaped like a small real one: one container with a port, env and requests.
pub fn pod(i: usize) -> anyhow::Result<Pod> {
    Ok(serde_json::from_value(serde_json::json!({
        "metadata": {"name": format!("pod-{i:06}"), "labels": {"app": "bench", "shard": format!("{}", i % 16)}},
        "spec": {
            "nodeName": sluice_testenv::NODE_NAME,
            "containers": [{
                "name": "app",
                "image": "registry.example/app:1.0",
                "ports": [{"containerPort": 8080, "name": "http"}],
                "env": [{"name": "MODE", "value": "bench"}, {"name": "INDEX", "value": format!("{i}")}],
                "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}},
            }],
        },
    }))?)
}

//! The node agent: kube-scheduler binds pods to its Node; an image it has no binary for is an
//! error on the Pod's status; a pod it runs answers on its own address and goes away on a
//! graceful delete.

mod common;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::json;
use sluice_testenv::{AGENT_NODE_NAME, ControlPlane, eventually};
use std::net::SocketAddr;
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scheduled_pods_run_or_say_why_not_and_delete_gracefully() -> anyhow::Result<()> {
    let cp = ControlPlane::shared().await?;
    cp.node_agent().await?;
    let ns = cp.create_namespace("agent").await?;
    let pods: Api<Pod> = Api::namespaced(cp.client(), &ns);
    let pp = PostParams::default();

    let foreign: Pod = serde_json::from_value(json!({
        "metadata": {"name": "foreign"},
        "spec": {"containers": [{"name": "web", "image": "nginx:1.27"}]},
    }))?;
    pods.create(&pp, &foreign).await?;
    let message = eventually(Duration::from_secs(30), "ErrImagePull on nginx", || async {
        let p = pods.get("foreign").await.ok()?;
        let spec_node = p.spec.as_ref()?.node_name.clone()?;
        let waiting = p
            .status?
            .container_statuses?
            .first()?
            .state
            .as_ref()?
            .waiting
            .clone()?;
        (spec_node == AGENT_NODE_NAME && waiting.reason.as_deref() == Some("ErrImagePull"))
            .then_some(waiting.message.unwrap_or_default())
    })
    .await?;
    assert!(message.contains("has no local binary"), "{message}");

    let echo: Pod = serde_json::from_value(json!({
        "metadata": {"name": "echo"},
        "spec": {
            "terminationGracePeriodSeconds": 3,
            "containers": [{
                "name": "echo", "image": "example.test/sluice-echo:v1",
                "args": ["--listen", "$(POD_IP):8080", "--service", "agent"],
                "env": [
                    {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                    {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                ],
                "readinessProbe": {"tcpSocket": {"port": 8080}, "periodSeconds": 1},
            }],
        },
    }))?;
    pods.create(&pp, &echo).await?;
    let ip = eventually(Duration::from_secs(30), "echo Ready", || async {
        let status = pods.get("echo").await.ok()?.status?;
        let ready = status
            .conditions
            .iter()
            .flatten()
            .any(|c| c.type_ == "Ready" && c.status == "True");
        if !ready {
            return None;
        }
        status.pod_ip?.parse::<std::net::Ipv4Addr>().ok()
    })
    .await?;
    let (code, body) = common::http_get(SocketAddr::from((ip, 8080)), "/x").await?;
    assert_eq!(code, 200, "{body}");
    let json: serde_json::Value = serde_json::from_str(&body)?;
    assert_eq!(json["pod"], "echo", "{body}");

    pods.delete("echo", &DeleteParams::default()).await?;
    pods.delete("foreign", &DeleteParams::default()).await?;
    eventually(Duration::from_secs(30), "both pods gone", || async {
        let list = pods.list(&Default::default()).await.ok()?;
        list.items.is_empty().then_some(())
    })
    .await?;
    // The process is gone with its pod.
    assert!(
        common::http_get(SocketAddr::from((ip, 8080)), "/x")
            .await
            .is_err()
    );
    Ok(())
}

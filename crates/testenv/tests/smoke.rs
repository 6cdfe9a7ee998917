//! End-to-end smoke test of the test environment: a Service selecting two netns pods running
//! the echo backend gets both in its EndpointSlices; a pod turned NotReady leaves them.

mod common;

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, ListParams, PostParams};
use sluice_testenv::{ControlPlane, PodHost, eventually};
use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::time::Duration;

/// Addresses of the ready endpoints of Service `service`'s slices.
async fn ready_ips(slices: &Api<EndpointSlice>, service: &str) -> Option<BTreeSet<String>> {
    let lp = ListParams::default().labels(&format!("kubernetes.io/service-name={service}"));
    let list = slices.list(&lp).await.ok()?;
    Some(
        list.items
            .iter()
            .flat_map(|s| &s.endpoints)
            .filter(|e| e.conditions.as_ref().and_then(|c| c.ready) == Some(true))
            .flat_map(|e| e.addresses.iter().cloned())
            .collect(),
    )
}

#[tokio::test]
async fn service_endpoints_follow_pod_readiness() -> anyhow::Result<()> {
    let cp = ControlPlane::shared().await?;
    eprintln!("control plane ready in {:?}", cp.started_in());
    let client = cp.client();
    let ns = cp.create_namespace("smoke").await?;

    let svc: Service = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "echo"},
        "spec": {"selector": {"app": "echo"}, "ports": [{"name": "http", "port": 80, "targetPort": 8080}]},
    }))?;
    Api::<Service>::namespaced(client.clone(), &ns)
        .create(&PostParams::default(), &svc)
        .await?;

    let mut a = PodHost::create(
        &client,
        &ns,
        "echo-a",
        &[("app", "echo")],
        &[("http", 8080)],
    )
    .await?;
    let mut b = PodHost::create(
        &client,
        &ns,
        "echo-b",
        &[("app", "echo")],
        &[("http", 8080)],
    )
    .await?;
    a.run_echo(8080, "echo").await?;
    b.run_echo(8080, "echo").await?;

    let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), &ns);
    let both: BTreeSet<String> = [a.ip().to_string(), b.ip().to_string()].into();
    eventually(
        Duration::from_secs(20),
        "both pods in EndpointSlices",
        || async { (ready_ips(&slices, "echo").await? == both).then_some(()) },
    )
    .await?;

    for pod in [&a, &b] {
        let (status, body) =
            common::http_get(SocketAddr::from((pod.ip(), 8080)), "/hello?x=1").await?;
        assert_eq!(status, 200, "{body}");
        let json: serde_json::Value = serde_json::from_str(&body)?;
        assert_eq!(json["pod"], pod.name(), "{body}");
        assert_eq!(json["service"], "echo", "{body}");
        assert_eq!(json["path"], "/hello", "{body}");
    }

    b.set_ready(false).await?;
    let only_a: BTreeSet<String> = [a.ip().to_string()].into();
    eventually(
        Duration::from_secs(20),
        "NotReady pod out of EndpointSlices",
        || async { (ready_ips(&slices, "echo").await? == only_a).then_some(()) },
    )
    .await?;

    let netns = [a.netns().to_string(), b.netns().to_string()];
    b.delete().await?;
    drop(a);
    let listed = std::process::Command::new("ip")
        .args(["netns", "list"])
        .output()?;
    let listed = String::from_utf8_lossy(&listed.stdout);
    for n in &netns {
        assert!(
            !listed
                .lines()
                .any(|l| l.split_whitespace().next() == Some(n)),
            "{n} left behind: {listed}"
        );
    }
    Ok(())
}

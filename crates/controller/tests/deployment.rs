//! Pods that really run: a Deployment of the echo backend, scheduled by kube-scheduler onto
//! the test node agent, scaled 0 -> 3 -> 1; its EndpointSlices (from kube-controller-manager)
//! and sluice's routing follow, and traffic reaches exactly the live pods.

mod support;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, ListParams, Patch, PatchParams};
use serde_json::json;
use sluice_testenv::eventually;
use std::collections::BTreeSet;
use std::time::Duration;
use support::{World, echo_deployment, get};

/// Names and addresses of the Running, Ready pods of `app=echo`.
async fn ready_pods(pods: &Api<Pod>) -> Option<(BTreeSet<String>, BTreeSet<String>)> {
    let list = pods
        .list(&ListParams::default().labels("app=echo"))
        .await
        .ok()?;
    let mut names = BTreeSet::new();
    let mut ips = BTreeSet::new();
    for p in list.items {
        let status = p.status?;
        let ready = status
            .conditions
            .iter()
            .flatten()
            .any(|c| c.type_ == "Ready" && c.status == "True");
        if ready && p.metadata.deletion_timestamp.is_none() {
            names.insert(p.metadata.name?);
            ips.insert(status.pod_ip?);
        }
    }
    Some((names, ips))
}

/// Addresses of the ready endpoints in Service `echo`'s EndpointSlices.
async fn slice_ips(slices: &Api<EndpointSlice>) -> Option<BTreeSet<String>> {
    let list = slices
        .list(&ListParams::default().labels("kubernetes.io/service-name=echo"))
        .await
        .ok()?;
    Some(
        list.items
            .iter()
            .flat_map(|s| &s.endpoints)
            .filter(|e| e.conditions.as_ref().and_then(|c| c.ready) == Some(true))
            .flat_map(|e| e.addresses.iter().cloned())
            .collect(),
    )
}

/// Scales to `replicas` and waits until exactly that many pods are ready, in the slices too.
async fn scale(w: &World, replicas: usize) -> anyhow::Result<BTreeSet<String>> {
    let deployments: Api<Deployment> = w.api();
    deployments
        .patch(
            "echo",
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"replicas": replicas}})),
        )
        .await?;
    let pods: Api<Pod> = w.api();
    let slices: Api<EndpointSlice> = w.api();
    eventually(
        Duration::from_secs(60),
        &format!("{replicas} ready pods, in the EndpointSlices too"),
        || async {
            let (names, ips) = ready_pods(&pods).await?;
            let all = pods
                .list(&ListParams::default().labels("app=echo"))
                .await
                .ok()?;
            (names.len() == replicas
                && all.items.len() == replicas
                && slice_ips(&slices).await? == ips)
                .then_some(names)
        },
    )
    .await
}

/// The pods answering `n` requests through sluice.
async fn answering(
    w: &World,
    addr: std::net::SocketAddr,
    n: usize,
) -> anyhow::Result<BTreeSet<String>> {
    let _ = w;
    let mut seen = BTreeSet::new();
    for _ in 0..n {
        let r = get(addr, "deploy.test", "/").await?;
        anyhow::ensure!(r.status == 200, "{} {}", r.status, r.body);
        seen.insert(r.pod());
    }
    Ok(seen)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deployment_scaled_0_3_1_is_served_by_exactly_its_live_pods() -> anyhow::Result<()> {
    let w = World::new("deploy").await?;
    w.cp.node_agent().await?;
    w.service("echo").await?;
    w.create(echo_deployment(0, 5)).await?;
    w.ingress(
        "echo",
        json!({"rules": [{"host": "deploy.test", "http": {"paths": [
            {"path": "/", "pathType": "Prefix",
             "backend": {"service": {"name": "echo", "port": {"name": "http"}}}}]}}]}),
    )
    .await?;
    let run = w.start(&[]).await?;
    let h = run.http;
    support::until_routed(h, "deploy.test", "/", "", 503).await?;

    let three = scale(&w, 3).await?;
    // Every pod answers, under its own name from the downward API, and none other.
    let seen = eventually(
        Duration::from_secs(20),
        "all three pods answering",
        || async {
            let seen = answering(&w, h, 30).await.ok()?;
            (seen == three).then_some(seen)
        },
    )
    .await?;
    assert_eq!(seen, three);

    let one = scale(&w, 1).await?;
    assert!(one.is_subset(&three), "{one:?} was one of {three:?}");
    let seen = eventually(
        Duration::from_secs(20),
        "only the live pod answering",
        || async {
            let seen = answering(&w, h, 20).await.ok()?;
            (seen == one).then_some(seen)
        },
    )
    .await?;
    assert_eq!(seen, one);

    run.stop().await?;
    Ok(())
}

//! `--gateway-api=auto` on a cluster whose Gateway API CRDs are installed after the
//! controller started: the controller asks discovery again every `--gateway-api-recheck`
//! and then serves HTTPRoutes and writes their status, without a restart, while Ingresses
//! stay served. A test binary of its own: installing the CRDs changes the control plane for
//! every test that shares it.

mod support;

use std::time::Duration;

use kube::api::Api;
use serde_json::json;
use sluice_routing::gateway::GatewayClass;
use support::gateway_crds::install_crds;
use support::*;

#[tokio::test]
async fn crds_installed_after_start_are_watched_without_a_restart() -> anyhow::Result<()> {
    let w = World::new("gw-late").await?;
    w.service("a").await?;
    let _pod = w.pod("a", "a-0").await?;
    w.ingress(
        "site",
        json!({"rules": [{"host": "plain.test", "http": {"paths": [
            {"path": "/", "pathType": "Prefix",
             "backend": {"service": {"name": "a", "port": {"name": "http"}}}}]}}]}),
    )
    .await?;
    let controller = format!("sluice.dev/gw-{}", w.ns);
    let run = w
        .start(&[
            "--gateway-api-recheck",
            "1s",
            "--gateway-controller-name",
            &controller,
        ])
        .await?;
    assert!(
        !run.gateway_api,
        "Gateway API watched before its CRDs exist"
    );
    until_routed(run.http, "plain.test", "/", "a", 200).await?;

    install_crds(&w).await?;
    let class = format!("gc-{}", w.ns);
    w.create(
        json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "GatewayClass",
        "metadata": {"name": class}, "spec": {"controllerName": controller}}),
    )
    .await?;
    w.create(
        json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
        "metadata": {"name": "edge"},
        "spec": {"gatewayClassName": class,
                 "listeners": [{"name": "http", "port": 80, "protocol": "HTTP"}]}}),
    )
    .await?;
    w.create(
        json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
        "metadata": {"name": "late"},
        "spec": {"parentRefs": [{"name": "edge"}], "hostnames": ["late.test"],
                 "rules": [{"backendRefs": [{"name": "a", "port": 80}]}]}}),
    )
    .await?;
    until_routed(run.http, "late.test", "/", "a", 200).await?;
    // Status too: the leader's status loop made its Gateway API writer once they were watched.
    let classes: Api<GatewayClass> = Api::all(w.admin.clone());
    sluice_testenv::eventually(Duration::from_secs(20), "GatewayClass Accepted", || {
        let (classes, class) = (classes.clone(), class.clone());
        async move {
            let c = classes.get(&class).await.ok()?;
            let status = c.status?;
            let accepted = status["conditions"]
                .as_array()?
                .iter()
                .any(|c| c["type"] == "Accepted" && c["status"] == "True");
            accepted.then_some(())
        }
    })
    .await?;
    until_routed(run.http, "plain.test", "/", "a", 200).await?;
    run.stop().await
}

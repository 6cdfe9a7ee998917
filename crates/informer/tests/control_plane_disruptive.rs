//! Informer recovery when the API server restarts and when its resourceVersion expired
//! (410 Gone after etcd compaction). These tests restart the shared API server, so they live
//! in their own test binary (own control plane) and run one at a time.

mod support;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::{
    Api, ResourceExt,
    api::{DeleteParams, Patch, PatchParams, PostParams},
};
use sluice_informer::SharedInformerFactory;
use sluice_testenv::ControlPlane;
use std::time::Duration;
use support::*;

static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn survives_apiserver_restart() -> anyhow::Result<()> {
    init_tracing();
    let _serial = SERIAL.lock().await;
    let cp = ControlPlane::shared().await?;
    let ns = cp.create_namespace("inf-restart").await?;
    let direct: Api<ConfigMap> = Api::namespaced(cp.client(), &ns);
    let pp = PostParams::default();
    for name in ["a", "b", "c"] {
        direct.create(&pp, &configmap(name, "0")).await?;
    }
    let factory = SharedInformerFactory::new(cp.client());
    let informer = factory.namespaced_informer::<ConfigMap>(&ns);
    let rec = Recorder::default();
    informer.add_event_handler(rec.clone());
    factory.start();
    assert!(informer.wait_for_sync(WAIT).await);
    rec.wait("3 adds", |e| e.len() == 3).await?;

    tokio::time::timeout(WAIT, cp.restart_apiserver()).await??;
    let direct: Api<ConfigMap> = Api::namespaced(cp.client(), &ns);
    let d = direct.create(&pp, &configmap("d", "1")).await?;
    let a = direct
        .patch(
            "a",
            &PatchParams::default(),
            &Patch::Merge(&serde_json::json!({"data": {"v": "9"}})),
        )
        .await?;
    direct.delete("b", &DeleteParams::default()).await?;

    rec.wait("add d, update a, delete b", |e| e.len() >= 6)
        .await?;
    assert_eq!(
        rec.for_name("d"),
        vec![Ev::Add(
            "d".into(),
            d.resource_version().unwrap_or_default(),
            false
        )]
    );
    assert!(
        matches!(&rec.for_name("a")[1], Ev::Update(_, _, new) if Some(new.clone()) == a.resource_version())
    );
    assert!(matches!(&rec.for_name("b")[1], Ev::Delete(n, _, _) if n == "b"));
    assert!(
        rec.for_name("c").len() == 1,
        "c unchanged: {:?}",
        rec.for_name("c")
    );
    wait_store_equals_list(informer.store(), &direct).await?;
    eprintln!(
        "restart: lists done = {}, errors = {}",
        informer.stats().lists(),
        informer.stats().errors()
    );
    factory.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expired_resource_version_relists_to_a_consistent_store() -> anyhow::Result<()> {
    init_tracing();
    let _serial = SERIAL.lock().await;
    let cp = ControlPlane::shared().await?;
    let ns = cp.create_namespace("inf-gone").await?;
    let direct: Api<ConfigMap> = Api::namespaced(cp.client(), &ns);
    let pp = PostParams::default();
    for name in ["a", "b", "c"] {
        direct.create(&pp, &configmap(name, "0")).await?;
    }
    let relay = Relay::start(cp.apiserver_addr()).await?;
    // A connection that went silent while the API server restarted must not stall the
    // informer for the default 295 s: fail reads after 30 s so the watcher retries.
    let mut config = relay.config(cp.config());
    config.read_timeout = Some(Duration::from_secs(30));
    let factory = SharedInformerFactory::new(kube::Client::try_from(config)?);
    let informer = factory.namespaced_informer::<ConfigMap>(&ns);
    let rec = Recorder::default();
    let reg = informer.add_event_handler(rec.clone());
    factory.start();
    assert!(informer.wait_for_sync(WAIT).await);
    rec.wait("3 adds", |e| e.len() == 3).await?;
    assert_eq!(informer.stats().lists(), 1);

    // Cut the informer off; change things; compact etcd past the informer's resourceVersion
    // and restart the API server so that its watch cache cannot serve that version either.
    relay.sever();
    let d = direct.create(&pp, &configmap("d", "1")).await?;
    let a = direct
        .patch(
            "a",
            &PatchParams::default(),
            &Patch::Merge(&serde_json::json!({"data": {"v": "9"}})),
        )
        .await?;
    direct.delete("b", &DeleteParams::default()).await?;
    let rev = compact_etcd(&cp.etcd_endpoint()).await?;
    eprintln!("compacted etcd at revision {rev}");
    tokio::time::timeout(WAIT, cp.restart_apiserver()).await??;
    let direct: Api<ConfigMap> = Api::namespaced(cp.client(), &ns);
    relay.resume();

    // A timeout says where things stood: whether the reflector saw errors or relisted, whether
    // the handler had a backlog, and what the relay saw from the informer's client.
    rec.wait("add d, update a, tombstone b", |e| e.len() >= 6)
        .await
        .map_err(|err| {
            let stats = informer.stats();
            err.context(format!(
                "informer: {} lists, {} watch events, {} source errors; handler backlog {}; {}",
                stats.lists(),
                stats.watch_events(),
                stats.errors(),
                reg.backlog(),
                relay.describe()
            ))
        })?;
    assert!(informer.stats().lists() >= 2, "a relist happened");
    assert_eq!(
        rec.for_name("d"),
        vec![Ev::Add(
            "d".into(),
            d.resource_version().unwrap_or_default(),
            false
        )]
    );
    assert!(
        matches!(&rec.for_name("a")[1], Ev::Update(_, _, new) if Some(new.clone()) == a.resource_version())
    );
    let b = rec.for_name("b");
    assert!(
        matches!(&b[1], Ev::Delete(n, _, true) if n == "b"),
        "b deleted as a tombstone: {b:?}"
    );
    assert_eq!(
        rec.for_name("c").len(),
        1,
        "c unchanged, no event on relist"
    );
    wait_store_equals_list(informer.store(), &direct).await?;
    factory.shutdown().await;
    Ok(())
}

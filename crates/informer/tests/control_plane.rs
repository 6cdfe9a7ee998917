//! Informer, factory and lister against a real control plane (sluice-testenv).
//! Tests share the one control plane of this test process, each in its own namespace.

mod support;

use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::{
    Api, ResourceExt,
    api::{ApiResource, DeleteParams, DynamicObject, Patch, PatchParams, PostParams},
};
use sluice_informer::{ListOptions, SharedInformerFactory};
use sluice_testenv::ControlPlane;
use support::*;

const N: usize = 10;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_handlers_see_sync_add_update_delete_in_order() -> anyhow::Result<()> {
    init_tracing();
    let cp = ControlPlane::shared().await?;
    let ns = cp.create_namespace("inf-order").await?;
    let api: Api<ConfigMap> = Api::namespaced(cp.client(), &ns);
    let pp = PostParams::default();
    let mut initial = Vec::new();
    for i in 0..3 {
        let o = api
            .create(&pp, &configmap(&format!("pre-{i}"), "0"))
            .await?;
        initial.push(Ev::Add(
            o.name_any(),
            o.resource_version().unwrap_or_default(),
            true,
        ));
    }

    let factory = SharedInformerFactory::new(cp.client());
    let informer = factory.namespaced_informer::<ConfigMap>(&ns);
    let (r1, r2) = (Recorder::default(), Recorder::default());
    let reg1 = informer.add_event_handler(r1.clone());
    let reg2 = informer.add_event_handler(r2.clone());
    factory.start();
    let synced = factory.wait_for_cache_sync(WAIT).await;
    assert!(synced.values().all(|s| *s), "{synced:?}");
    for r in [&r1, &r2] {
        r.wait("initial adds", |e| e.len() >= 3).await?;
        let mut got = r.events();
        got.sort_by_key(|e| e.name().to_string());
        assert_eq!(got, initial);
    }
    tokio::time::timeout(WAIT, async {
        while !(reg1.has_synced() && reg2.has_synced()) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await?;

    // N objects: create, update, delete each; record the versions the server assigned.
    let mut want = std::collections::BTreeMap::new();
    for i in 0..N {
        let name = format!("cm-{i}");
        let created = api.create(&pp, &configmap(&name, "1")).await?;
        let patch = serde_json::json!({"data": {"v": "2"}});
        let updated = api
            .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
        api.delete(&name, &DeleteParams::default()).await?;
        let (rv1, rv2) = (
            created.resource_version().unwrap_or_default(),
            updated.resource_version().unwrap_or_default(),
        );
        want.insert(name.clone(), (rv1, rv2));
    }
    for r in [&r1, &r2] {
        r.wait("all deletes", |e| {
            e.iter().filter(|e| matches!(e, Ev::Delete(..))).count() >= N
        })
        .await?;
        for (name, (rv1, rv2)) in &want {
            let evs = r.for_name(name);
            assert_eq!(evs.len(), 3, "{name}: {evs:?}");
            assert_eq!(evs[0], Ev::Add(name.clone(), rv1.clone(), false));
            assert_eq!(evs[1], Ev::Update(name.clone(), rv1.clone(), rv2.clone()));
            assert!(
                matches!(&evs[2], Ev::Delete(n, _, false) if n == name),
                "{evs:?}"
            );
        }
    }
    wait_store_equals_list(informer.store(), &api).await?;
    factory.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reconnect_after_relay_cut_catches_up() -> anyhow::Result<()> {
    init_tracing();
    let cp = ControlPlane::shared().await?;
    let ns = cp.create_namespace("inf-relay").await?;
    let direct: Api<ConfigMap> = Api::namespaced(cp.client(), &ns);
    let pp = PostParams::default();
    for name in ["a", "b", "c"] {
        direct.create(&pp, &configmap(name, "0")).await?;
    }
    let relay = Relay::start(cp.apiserver_addr()).await?;
    let client = kube::Client::try_from(relay.config(cp.config()))?;
    let factory = SharedInformerFactory::new(client);
    let informer = factory.namespaced_informer::<ConfigMap>(&ns);
    let rec = Recorder::default();
    informer.add_event_handler(rec.clone());
    factory.start();
    assert!(informer.wait_for_sync(WAIT).await);
    rec.wait("3 adds", |e| e.len() == 3).await?;

    relay.sever();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let d = direct.create(&pp, &configmap("d", "1")).await?;
    let a = direct
        .patch(
            "a",
            &PatchParams::default(),
            &Patch::Merge(&serde_json::json!({"data": {"v": "9"}})),
        )
        .await?;
    direct.delete("b", &DeleteParams::default()).await?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        rec.events().len(),
        3,
        "nothing can arrive while cut off: {:?}",
        rec.events()
    );
    relay.resume();

    rec.wait("add d, update a, delete b", |e| e.len() >= 6)
        .await?;
    let a_rv0 = match &rec.for_name("a")[0] {
        Ev::Add(_, rv, _) => rv.clone(),
        e => panic!("{e:?}"),
    };
    assert_eq!(
        rec.for_name("d"),
        vec![Ev::Add(
            "d".into(),
            d.resource_version().unwrap_or_default(),
            false
        )]
    );
    assert_eq!(
        rec.for_name("a")[1..],
        [Ev::Update(
            "a".into(),
            a_rv0,
            a.resource_version().unwrap_or_default()
        )]
    );
    let b = rec.for_name("b");
    assert!(matches!(&b[1], Ev::Delete(n, _, _) if n == "b"), "{b:?}");
    wait_store_equals_list(informer.store(), &direct).await?;
    factory.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_consumers_of_pods_share_one_watch() -> anyhow::Result<()> {
    init_tracing();
    let cp = ControlPlane::shared().await?;
    let ns = cp.create_namespace("inf-share").await?;
    let (client, rec) = recording_client(cp.config())?;
    let factory = SharedInformerFactory::new(client);
    // consumer 1: an informer with a handler; consumer 2: a lister; consumer 3: same again
    let inf1 = factory.namespaced_informer::<Pod>(&ns);
    let count = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let c = count.clone();
    inf1.add_event_handler(sluice_informer::HandlerFuncs::new().on_add(move |_, _| {
        c.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }));
    let inf2 = factory.namespaced_informer::<Pod>(&ns);
    let lister = inf2.lister();
    assert_eq!(factory.len(), 1);
    factory.start();
    assert!(factory.wait_for_cache_sync(WAIT).await.values().all(|s| *s));
    // a third consumer after start gets the same informer, already synced
    let inf3 = factory.namespaced_informer::<Pod>(&ns);
    assert!(inf3.has_synced());
    let pod: Pod = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "p1", "labels": {"app": "x"}},
        "spec": {"containers": [{"name": "c", "image": "none"}]}
    }))?;
    Api::<Pod>::namespaced(cp.client(), &ns)
        .create(&PostParams::default(), &pod)
        .await?;
    sluice_testenv::eventually(WAIT, "pod in lister", || async { lister.get(&ns, "p1") }).await?;
    assert_eq!(lister.list_str(Some(&ns), "app=x")?.len(), 1);
    assert_eq!(lister.list_str(Some(&ns), "app!=x")?.len(), 0);
    sluice_testenv::eventually(WAIT, "handler saw the pod", || async {
        (count.load(std::sync::atomic::Ordering::SeqCst) == 1).then_some(())
    })
    .await?;
    let watches = rec.watches();
    assert_eq!(watches.len(), 1, "exactly one watch: {watches:#?}");
    assert!(
        watches[0].contains(&format!("/api/v1/namespaces/{ns}/pods")),
        "{watches:?}"
    );
    assert_eq!(rec.lists().len(), 1, "one list: {:#?}", rec.requests());
    factory.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dynamic_informer_by_gvr_and_selectors() -> anyhow::Result<()> {
    init_tracing();
    let cp = ControlPlane::shared().await?;
    let ns = cp.create_namespace("inf-dyn").await?;
    let api: Api<ConfigMap> = Api::namespaced(cp.client(), &ns);
    let mut labelled = configmap("labelled", "1");
    labelled.metadata.labels = Some([("team".to_string(), "blue".to_string())].into());
    api.create(&PostParams::default(), &labelled).await?;
    api.create(&PostParams::default(), &configmap("plain", "1"))
        .await?;

    let factory = SharedInformerFactory::new(cp.client());
    let ar = ApiResource {
        group: "".into(),
        version: "v1".into(),
        api_version: "v1".into(),
        kind: "ConfigMap".into(),
        plural: "configmaps".into(),
    };
    let all = factory.dynamic_informer(&ar, Some(&ns));
    let blue =
        factory.dynamic_informer_with(&ar, Some(&ns), ListOptions::default().labels("team=blue"));
    assert_eq!(factory.len(), 2, "different selectors, different informers");
    assert_eq!(
        factory.dynamic_informer(&ar, Some(&ns)).describe(),
        all.describe()
    );
    factory.start();
    assert!(factory.wait_for_cache_sync(WAIT).await.values().all(|s| *s));
    assert_eq!(all.store().len(), 2);
    assert_eq!(blue.store().len(), 1);
    let obj: std::sync::Arc<DynamicObject> = blue.lister().get(&ns, "labelled").expect("present");
    let typed: ConfigMap = obj.as_ref().clone().try_parse()?;
    assert_eq!(
        typed.data.unwrap_or_default().get("v").map(String::as_str),
        Some("1")
    );
    factory.shutdown().await;
    Ok(())
}

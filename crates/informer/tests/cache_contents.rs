//! What the cache holds, against a real API server: transforms run before the store and the
//! handlers, `managedFields` is stripped unless kept, metadata-only informers hold metadata.

mod support;

use std::{collections::BTreeMap, sync::Arc, time::Duration};

use k8s_openapi::api::core::v1::ConfigMap;
use kube::{
    Api, ResourceExt,
    api::{DeleteParams, Patch, PatchParams, PostParams},
    core::PartialObjectMeta,
};
use parking_lot::Mutex;
use sluice_informer::{AlreadyStarted, HandlerFuncs, SharedInformerFactory};
use sluice_testenv::ControlPlane;
use support::*;

fn with_secret(name: &str) -> ConfigMap {
    let mut cm = configmap(name, "1");
    cm.data
        .get_or_insert_with(BTreeMap::new)
        .insert("secret".into(), "do-not-cache".into());
    cm
}

/// Every object a handler was given, in order, as (event, object).
type Seen<K> = Arc<Mutex<Vec<(&'static str, Arc<K>)>>>;

fn recording_handler<K: Send + Sync + 'static>(seen: &Seen<K>) -> HandlerFuncs<K> {
    let (a, u, d) = (seen.clone(), seen.clone(), seen.clone());
    HandlerFuncs::new()
        .on_add(move |o, _| a.lock().push(("add", o)))
        .on_update(move |_, o| u.lock().push(("update", o)))
        .on_delete(move |o| d.lock().push(("delete", o.object().clone())))
}

async fn wait_for<K>(seen: &Seen<K>, what: &str, n: usize) -> anyhow::Result<()> {
    tokio::time::timeout(WAIT, async {
        while seen.lock().len() < n {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .map_err(|_| anyhow::anyhow!("timed out waiting for {what}: {} events", seen.lock().len()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transform_runs_before_handlers_and_store() -> anyhow::Result<()> {
    init_tracing();
    let cp = ControlPlane::shared().await?;
    let ns = cp.create_namespace("inf-transform").await?;
    let api: Api<ConfigMap> = Api::namespaced(cp.client(), &ns);
    let pp = PostParams::default();
    api.create(&pp, &with_secret("before-start")).await?;

    let factory = SharedInformerFactory::new(cp.client());
    let informer = factory.namespaced_informer::<ConfigMap>(&ns);
    informer.set_transform(|mut cm: ConfigMap| {
        if let Some(d) = cm.data.as_mut() {
            d.remove("secret");
        }
        cm.labels_mut().insert("seen-by".into(), "transform".into());
        cm
    })?;
    let seen: Seen<ConfigMap> = Arc::default();
    informer.add_event_handler(recording_handler(&seen));
    factory.start();
    assert!(factory.has_synced() || informer.wait_for_sync(WAIT).await);
    assert_eq!(
        informer.set_transform(|cm| cm),
        Err(AlreadyStarted),
        "a running informer keeps its transform"
    );

    api.create(&pp, &with_secret("after-start")).await?;
    let patch = serde_json::json!({"data": {"v": "2", "secret": "still-secret"}});
    api.patch(
        "after-start",
        &PatchParams::default(),
        &Patch::Merge(&patch),
    )
    .await?;
    wait_for(&seen, "add, add, update", 3).await?;

    // The server has all of it; the handlers and the store got the transformed objects.
    let on_server = api.get("after-start").await?;
    assert!(on_server.metadata.managed_fields.is_some());
    assert!(
        on_server
            .data
            .as_ref()
            .is_some_and(|d| d.contains_key("secret"))
    );
    let cached = informer.store().list();
    assert_eq!(cached.len(), 2);
    let seen = seen.lock().clone();
    let kinds: Vec<(&str, String)> = seen.iter().map(|(k, o)| (*k, o.name_any())).collect();
    assert!(kinds.contains(&("add", "before-start".into())), "{kinds:?}");
    assert!(kinds.contains(&("add", "after-start".into())), "{kinds:?}");
    assert!(
        kinds.contains(&("update", "after-start".into())),
        "{kinds:?}"
    );
    for obj in seen.iter().map(|(_, o)| o).chain(cached.iter()) {
        assert_eq!(
            obj.labels().get("seen-by").map(String::as_str),
            Some("transform")
        );
        assert!(obj.data.as_ref().is_some_and(|d| !d.contains_key("secret")));
        assert!(
            obj.metadata.managed_fields.is_none(),
            "managedFields stripped by default"
        );
    }
    factory.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn managed_fields_are_kept_on_request() -> anyhow::Result<()> {
    init_tracing();
    let cp = ControlPlane::shared().await?;
    let ns = cp.create_namespace("inf-keep-mf").await?;
    let api: Api<ConfigMap> = Api::namespaced(cp.client(), &ns);
    api.create(&PostParams::default(), &configmap("kept", "1"))
        .await?;
    let factory = SharedInformerFactory::new(cp.client());
    let informer = factory.namespaced_informer::<ConfigMap>(&ns);
    informer.keep_managed_fields()?;
    factory.start();
    assert!(informer.wait_for_sync(WAIT).await);
    assert_eq!(informer.keep_managed_fields(), Err(AlreadyStarted));
    let cached = informer.store().list();
    assert_eq!(cached.len(), 1);
    assert!(
        cached[0]
            .metadata
            .managed_fields
            .as_ref()
            .is_some_and(|m| !m.is_empty())
    );
    factory.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metadata_informer_holds_metadata_only() -> anyhow::Result<()> {
    init_tracing();
    let cp = ControlPlane::shared().await?;
    let ns = cp.create_namespace("inf-metadata").await?;
    let api: Api<ConfigMap> = Api::namespaced(cp.client(), &ns);
    let pp = PostParams::default();
    for i in 0..3 {
        let mut cm = with_secret(&format!("cm-{i}"));
        cm.labels_mut()
            .insert("tier".into(), if i == 0 { "a" } else { "b" }.into());
        api.create(&pp, &cm).await?;
    }

    let factory = SharedInformerFactory::new(cp.client());
    let informer = factory.namespaced_metadata_informer::<ConfigMap>(&ns);
    let full = factory.namespaced_informer::<ConfigMap>(&ns);
    assert_eq!(factory.len(), 2, "metadata and full informers are separate");
    let seen: Seen<PartialObjectMeta<ConfigMap>> = Arc::default();
    informer.add_event_handler(recording_handler(&seen));
    factory.start();
    let synced = factory.wait_for_cache_sync(WAIT).await;
    assert!(synced.values().all(|s| *s), "{synced:?}");
    wait_for(&seen, "3 initial adds", 3).await?;

    let lister = informer.lister();
    let mut tier_b: Vec<String> = lister
        .list_str(Some(&ns), "tier=b")?
        .iter()
        .map(|m| m.name_any())
        .collect();
    tier_b.sort();
    assert_eq!(tier_b, vec!["cm-1", "cm-2"]);
    let meta = lister
        .get(&ns, "cm-0")
        .ok_or_else(|| anyhow::anyhow!("cm-0"))?;
    let full_obj = full
        .lister()
        .get(&ns, "cm-0")
        .ok_or_else(|| anyhow::anyhow!("full cm-0"))?;
    assert_eq!(meta.metadata.uid, full_obj.metadata.uid);
    assert_eq!(
        meta.metadata.resource_version,
        full_obj.metadata.resource_version
    );
    assert!(
        meta.metadata.managed_fields.is_none(),
        "stripped by default"
    );

    let patch = serde_json::json!({"metadata": {"labels": {"tier": "c"}}});
    api.patch("cm-0", &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    api.delete("cm-1", &DeleteParams::default()).await?;
    wait_for(&seen, "update and delete", 5).await?;
    let events: Vec<(&str, String, Option<String>)> = seen
        .lock()
        .iter()
        .skip(3)
        .map(|(k, o)| (*k, o.name_any(), o.labels().get("tier").cloned()))
        .collect();
    assert_eq!(
        events,
        vec![
            ("update", "cm-0".to_string(), Some("c".to_string())),
            ("delete", "cm-1".to_string(), Some("b".to_string())),
        ]
    );
    factory.shutdown().await;
    Ok(())
}

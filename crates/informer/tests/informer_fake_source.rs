//! Informer behaviour with a hand-fed source (no API server): ordering, old/new pairs,
//! tombstones on relist, late handlers, slow handlers, resync, pre-warmed stores.

use std::{sync::Arc, time::Duration};

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::ObjectMeta;
use sluice_informer::{
    ChannelListWatch, DeletedObject, Event, ResourceEventHandler, SharedIndexInformer, StoreWriter,
};
use tokio::sync::mpsc;

fn cm(name: &str, rv: &str) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some("ns".into()),
            resource_version: Some(rv.into()),
            ..Default::default()
        },
        ..Default::default()
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Ev {
    Add(String, String, bool),
    Update(String, String, String),
    Delete(String, String, bool),
}

fn id(o: &ConfigMap) -> (String, String) {
    (
        o.metadata.name.clone().unwrap_or_default(),
        o.metadata.resource_version.clone().unwrap_or_default(),
    )
}

struct Recorder {
    tx: mpsc::UnboundedSender<(Ev, Arc<ConfigMap>)>,
    delay: Duration,
}

impl ResourceEventHandler<ConfigMap> for Recorder {
    fn on_add(&self, obj: Arc<ConfigMap>, initial: bool) {
        std::thread::sleep(self.delay);
        let (n, rv) = id(&obj);
        let _ = self.tx.send((Ev::Add(n, rv, initial), obj));
    }
    fn on_update(&self, old: Arc<ConfigMap>, new: Arc<ConfigMap>) {
        std::thread::sleep(self.delay);
        let (n, old_rv) = id(&old);
        let (_, new_rv) = id(&new);
        let _ = self.tx.send((Ev::Update(n, old_rv, new_rv), new));
    }
    fn on_delete(&self, obj: DeletedObject<ConfigMap>) {
        std::thread::sleep(self.delay);
        let (n, rv) = id(obj.object());
        let _ = self
            .tx
            .send((Ev::Delete(n, rv, obj.is_tombstone()), obj.object().clone()));
    }
}

fn recorder(delay: Duration) -> (Recorder, mpsc::UnboundedReceiver<(Ev, Arc<ConfigMap>)>) {
    let (tx, rx) = mpsc::unbounded_channel();
    (Recorder { tx, delay }, rx)
}

async fn take(rx: &mut mpsc::UnboundedReceiver<(Ev, Arc<ConfigMap>)>, n: usize) -> Vec<Ev> {
    let mut out = Vec::new();
    for _ in 0..n {
        match tokio::time::timeout(Duration::from_secs(10), rx.recv()).await {
            Ok(Some((ev, _))) => out.push(ev),
            _ => panic!("timed out after {out:?}"),
        }
    }
    out
}

async fn nothing_more(rx: &mut mpsc::UnboundedReceiver<(Ev, Arc<ConfigMap>)>) {
    if let Ok(Some((ev, _))) = tokio::time::timeout(Duration::from_millis(200), rx.recv()).await {
        panic!("unexpected event {ev:?}");
    }
}

fn list(tx: &sluice_informer::list_watch::ChannelSender<ConfigMap>, objs: Vec<ConfigMap>) {
    tx.send(Ok(Event::Init)).unwrap();
    for o in objs {
        tx.send(Ok(Event::InitApply(o))).unwrap();
    }
    tx.send(Ok(Event::InitDone)).unwrap();
}

fn add(s: &str) -> Ev {
    let (n, rv) = s.split_once('@').unwrap();
    Ev::Add(n.into(), rv.into(), false)
}
fn initial(s: &str) -> Ev {
    let (n, rv) = s.split_once('@').unwrap();
    Ev::Add(n.into(), rv.into(), true)
}
fn upd(n: &str, a: &str, b: &str) -> Ev {
    Ev::Update(n.into(), a.into(), b.into())
}
fn del(s: &str, tomb: bool) -> Ev {
    let (n, rv) = s.split_once('@').unwrap();
    Ev::Delete(n.into(), rv.into(), tomb)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handlers_see_list_watch_and_relist_in_order() {
    let (source, tx) = ChannelListWatch::new();
    let informer = SharedIndexInformer::new(source, None);
    let (h1, mut rx1) = recorder(Duration::ZERO);
    let (h2, mut rx2) = recorder(Duration::ZERO);
    let reg1 = informer.add_event_handler(h1);
    let reg2 = informer.add_event_handler(h2);
    informer.start();
    assert!(!informer.has_synced());

    list(&tx, vec![cm("a", "1"), cm("b", "1"), cm("c", "1")]);
    assert!(informer.wait_for_sync(Duration::from_secs(5)).await);
    for rx in [&mut rx1, &mut rx2] {
        let mut got = take(rx, 3).await;
        got.sort_by_key(|e| format!("{e:?}"));
        assert_eq!(got, vec![initial("a@1"), initial("b@1"), initial("c@1")]);
    }

    tx.send(Ok(Event::Apply(cm("d", "2")))).unwrap();
    tx.send(Ok(Event::Apply(cm("a", "3")))).unwrap();
    tx.send(Ok(Event::Delete(cm("b", "4")))).unwrap();
    let want = vec![add("d@2"), upd("a", "1", "3"), del("b@4", false)];
    assert_eq!(take(&mut rx1, 3).await, want);
    assert_eq!(take(&mut rx2, 3).await, want);

    // Relist after a gap: c vanished (tombstone with last known state), a unchanged (silent),
    // d changed, e new.
    list(&tx, vec![cm("a", "3"), cm("d", "5"), cm("e", "6")]);
    for rx in [&mut rx1, &mut rx2] {
        let mut got = take(rx, 3).await;
        got.sort_by_key(|e| format!("{e:?}"));
        let mut want = vec![del("c@1", true), upd("d", "2", "5"), add("e@6")];
        want.sort_by_key(|e| format!("{e:?}"));
        assert_eq!(got, want);
        nothing_more(rx).await;
    }
    let mut keys = informer.store().list_keys();
    keys.sort();
    assert_eq!(keys, vec!["ns/a", "ns/d", "ns/e"]);
    assert!(reg1.has_synced() && reg2.has_synced());
    assert_eq!(informer.stats().lists(), 2);
    informer.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_handler_does_not_stall_fast_one_and_objects_are_shared() {
    let (source, tx) = ChannelListWatch::new();
    let informer = SharedIndexInformer::new(source, None);
    let (slow, mut slow_rx) = recorder(Duration::from_millis(100));
    let (fast, mut fast_rx) = recorder(Duration::ZERO);
    let slow_reg = informer.add_event_handler(slow);
    informer.add_event_handler(fast);
    informer.start();
    list(&tx, vec![]);
    for i in 0..50 {
        tx.send(Ok(Event::Apply(cm(&format!("o{i}"), "1"))))
            .unwrap();
    }
    let t = std::time::Instant::now();
    let got = take(&mut fast_rx, 50).await;
    assert_eq!(got.len(), 50);
    assert!(
        t.elapsed() < Duration::from_secs(2),
        "fast handler waited for the slow one: {:?}",
        t.elapsed()
    );
    assert!(
        slow_reg.backlog() > 10,
        "slow handler should still be behind"
    );
    // The slow one still gets everything, in order, sharing the store's objects.
    let (first, obj) = slow_rx.recv().await.unwrap();
    assert_eq!(first, add("o0@1"));
    assert!(Arc::ptr_eq(
        &obj,
        &informer.store().get_by_key("ns/o0").unwrap()
    ));
    informer.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn late_handler_gets_current_content_as_adds() {
    let (source, tx) = ChannelListWatch::new();
    let informer = SharedIndexInformer::new(source, None);
    informer.start();
    list(&tx, vec![cm("a", "1"), cm("b", "1")]);
    assert!(informer.wait_for_sync(Duration::from_secs(5)).await);
    let (late, mut rx) = recorder(Duration::ZERO);
    let reg = informer.add_event_handler(late);
    let mut got = take(&mut rx, 2).await;
    got.sort_by_key(|e| format!("{e:?}"));
    assert_eq!(got, vec![initial("a@1"), initial("b@1")]);
    tx.send(Ok(Event::Apply(cm("a", "2")))).unwrap();
    assert_eq!(take(&mut rx, 1).await, vec![upd("a", "1", "2")]);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while !reg.has_synced() && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(reg.has_synced());
    informer.remove_event_handler(&reg);
    tx.send(Ok(Event::Apply(cm("a", "3")))).unwrap();
    nothing_more(&mut rx).await;
    informer.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resync_delivers_updates_with_old_equal_new() {
    let (source, tx) = ChannelListWatch::new();
    let informer = SharedIndexInformer::new(source, Some(Duration::from_millis(200)));
    let (h, mut rx) = recorder(Duration::ZERO);
    let (seen_tx, mut seen_rx) = mpsc::unbounded_channel();
    informer.add_event_handler(sluice_informer::HandlerFuncs::new().on_update(
        move |old: Arc<ConfigMap>, new| {
            let _ = seen_tx.send(Arc::ptr_eq(&old, &new));
        },
    ));
    informer.add_event_handler(h);
    informer.start();
    list(&tx, vec![cm("a", "1")]);
    assert_eq!(take(&mut rx, 1).await, vec![initial("a@1")]);
    assert_eq!(take(&mut rx, 1).await, vec![upd("a", "1", "1")]);
    assert_eq!(
        tokio::time::timeout(Duration::from_secs(5), seen_rx.recv())
            .await
            .unwrap(),
        Some(true)
    );
    informer.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prewarmed_store_reports_vanished_object_as_tombstone() {
    let store = StoreWriter::new();
    store.add(Arc::new(cm("mypod", "0"))).unwrap();
    let (source, tx) = ChannelListWatch::new();
    let informer = SharedIndexInformer::with_store(source, None, store);
    let (h, mut rx) = recorder(Duration::ZERO);
    informer.add_event_handler(h);
    // Not started: the seeded object is not replayed as an add (client-go replays only for
    // a running informer); the first list reports on it instead, exactly once.
    nothing_more(&mut rx).await;
    informer.start();
    list(&tx, vec![cm("other", "1")]);
    let mut got = take(&mut rx, 2).await;
    got.sort_by_key(|e| format!("{e:?}"));
    assert_eq!(got, vec![initial("other@1"), del("mypod@0", true)]);
    assert!(informer.wait_for_sync(Duration::from_secs(5)).await);
    assert_eq!(informer.store().list_keys(), vec!["ns/other"]);
    nothing_more(&mut rx).await;
    informer.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn source_errors_are_survived_and_indexes_follow() {
    let (source, tx) = ChannelListWatch::new();
    let informer = SharedIndexInformer::new(source, None);
    informer
        .add_index("rv", |o: &ConfigMap| {
            o.metadata.resource_version.clone().into_iter().collect()
        })
        .unwrap();
    informer.start();
    tx.send(Err(sluice_informer::ListWatchError::Other("boom".into())))
        .unwrap();
    list(&tx, vec![cm("a", "1"), cm("b", "1")]);
    assert!(informer.wait_for_sync(Duration::from_secs(5)).await);
    tx.send(Ok(Event::Apply(cm("a", "2")))).unwrap();
    let (h, mut rx) = recorder(Duration::ZERO);
    informer.add_event_handler(h);
    // replay (2 adds) + maybe the update, depending on timing; wait until the store shows it
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while informer.store().index_keys("rv", "2").unwrap().is_empty()
        && tokio::time::Instant::now() < deadline
    {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(
        informer.store().index_keys("rv", "2").unwrap(),
        vec!["ns/a"]
    );
    assert_eq!(
        informer.store().index_keys("rv", "1").unwrap(),
        vec!["ns/b"]
    );
    assert_eq!(informer.stats().errors(), 1);
    let _ = take(&mut rx, 2).await;
    informer.shutdown().await;
}

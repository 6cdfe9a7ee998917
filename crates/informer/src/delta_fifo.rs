//! Per-key delta queue between the reflector and the informer (client-go `DeltaFIFO`).
//!
//! Every change the reflector sees is recorded as a [`Delta`] appended to the list of its
//! object's key; a key is queued once however many deltas pile up for it, and [`DeltaFifo::pop`]
//! hands out the whole list of a key at once, oldest key first.
//!
//! Deletion detection on relist: [`DeltaFifo::replace`] receives the complete new list. Every
//! key that is known (in the `known` store, i.e. what the informer has already processed, or
//! still pending in the queue) but absent from the new list gets a `Deleted` delta whose object
//! is a [`DeletedFinalStateUnknown`] tombstone carrying the last state we knew: the object was
//! deleted while we were not watching and its final state is unknown.
//!
//! Dedup rule (client-go `dedupDeltas`): two consecutive `Deleted` deltas collapse into one,
//! keeping the one with more information (a real object beats a tombstone).

use std::{
    collections::{HashMap, HashSet, VecDeque},
    fmt,
    sync::Arc,
};

use kube::Resource;
use parking_lot::Mutex;
use tokio::sync::Notify;

use crate::store::{Store, StoreError, object_key};

/// The kind of change a [`Delta`] records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DeltaType {
    /// The object was created (watch `ADDED`, or first seen).
    Added,
    /// The object changed (watch `MODIFIED`).
    Updated,
    /// The object was deleted (watch `DELETED`, or missing from a relist).
    Deleted,
    /// The object was part of a relist ([`DeltaFifo::replace`]).
    Replaced,
    /// Periodic resync of an object already known ([`DeltaFifo::resync`]).
    Sync,
}

/// An object deleted while we were not watching: the final state is unknown and `obj` is the
/// last state we knew (client-go `cache.DeletedFinalStateUnknown`).
#[derive(Debug)]
pub struct DeletedFinalStateUnknown<K> {
    /// The store key (`namespace/name`).
    pub key: String,
    /// The last known state of the object.
    pub obj: Arc<K>,
}

impl<K> Clone for DeletedFinalStateUnknown<K> {
    fn clone(&self) -> Self {
        Self {
            key: self.key.clone(),
            obj: self.obj.clone(),
        }
    }
}

/// The object of a delta, or of a delete notification: the object itself or a tombstone.
#[derive(Debug)]
pub enum DeltaObject<K> {
    /// The object, as the server sent it.
    Object(Arc<K>),
    /// A tombstone for an object deleted while we were disconnected.
    Tombstone(DeletedFinalStateUnknown<K>),
}

/// What `on_delete` receives: the deleted object, or a tombstone for one deleted unseen.
pub type DeletedObject<K> = DeltaObject<K>;

impl<K> Clone for DeltaObject<K> {
    fn clone(&self) -> Self {
        match self {
            Self::Object(o) => Self::Object(o.clone()),
            Self::Tombstone(t) => Self::Tombstone(t.clone()),
        }
    }
}

impl<K> DeltaObject<K> {
    /// The object, or for a tombstone the last known state of it.
    pub fn object(&self) -> &Arc<K> {
        match self {
            Self::Object(o) => o,
            Self::Tombstone(t) => &t.obj,
        }
    }

    /// Whether this is a [`DeletedFinalStateUnknown`] tombstone.
    pub fn is_tombstone(&self) -> bool {
        matches!(self, Self::Tombstone(_))
    }

    /// The tombstone, if this is one.
    pub fn tombstone(&self) -> Option<&DeletedFinalStateUnknown<K>> {
        match self {
            Self::Tombstone(t) => Some(t),
            Self::Object(_) => None,
        }
    }
}

/// One recorded change of one object.
#[derive(Debug)]
pub struct Delta<K> {
    /// What happened.
    pub kind: DeltaType,
    /// The object after the change (or a tombstone).
    pub object: DeltaObject<K>,
}

impl<K> Clone for Delta<K> {
    fn clone(&self) -> Self {
        Self {
            kind: self.kind,
            object: self.object.clone(),
        }
    }
}

impl<K> Delta<K> {
    fn new(kind: DeltaType, obj: Arc<K>) -> Self {
        Self {
            kind,
            object: DeltaObject::Object(obj),
        }
    }
}

/// Collapses a trailing pair of `Deleted` deltas into one (client-go `dedupDeltas`).
fn dedup_tail<K>(deltas: &mut Vec<Delta<K>>) {
    let n = deltas.len();
    if n < 2 {
        return;
    }
    if deltas[n - 1].kind == DeltaType::Deleted && deltas[n - 2].kind == DeltaType::Deleted {
        // Keep the older one unless it is a tombstone.
        let newest = deltas.pop();
        if deltas[n - 2].object.is_tombstone()
            && let Some(newest) = newest
        {
            deltas[n - 2] = newest;
        }
    }
}

struct Inner<K> {
    items: HashMap<String, Vec<Delta<K>>>,
    queue: VecDeque<String>,
    populated: bool,
    initial_population_count: usize,
    synced: bool,
    closed: bool,
}

type SyncedHook = Box<dyn Fn() + Send + Sync>;

/// The delta queue (client-go `DeltaFIFO`). Share it with an `Arc`.
pub struct DeltaFifo<K> {
    inner: Mutex<Inner<K>>,
    notify: Notify,
    known: Option<Store<K>>,
    synced_hook: Option<SyncedHook>,
}

impl<K> fmt::Debug for DeltaFifo<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let inner = self.inner.lock();
        f.debug_struct("DeltaFifo")
            .field("queued", &inner.queue.len())
            .field("closed", &inner.closed)
            .finish()
    }
}

impl<K: Resource + Send + Sync + 'static> DeltaFifo<K> {
    /// A new queue. `known` is the store the consumer keeps (the informer's indexer); it is used
    /// to detect deletions on [`DeltaFifo::replace`] and to find objects for [`DeltaFifo::resync`].
    pub fn new(known: Option<Store<K>>) -> Self {
        Self {
            inner: Mutex::new(Inner {
                items: HashMap::new(),
                queue: VecDeque::new(),
                populated: false,
                initial_population_count: 0,
                synced: false,
                closed: false,
            }),
            notify: Notify::new(),
            known,
            synced_hook: None,
        }
    }

    /// Calls `hook` (with the queue locked, so it must not call back into the queue) at the moment
    /// [`DeltaFifo::has_synced`] becomes true.
    pub fn with_synced_hook(mut self, hook: impl Fn() + Send + Sync + 'static) -> Self {
        self.synced_hook = Some(Box::new(hook));
        self
    }

    fn queue_action(&self, inner: &mut Inner<K>, key: String, delta: Delta<K>) {
        // Most keys carry one delta at a time: start with room for one (a default Vec's
        // first push makes room for four, 4x the memory for every key of a big list).
        let deltas = inner
            .items
            .entry(key.clone())
            .or_insert_with(|| Vec::with_capacity(1));
        let was_empty = deltas.is_empty();
        deltas.push(delta);
        dedup_tail(deltas);
        if was_empty {
            inner.queue.push_back(key);
            self.notify.notify_one();
        }
    }

    /// Records an `Added` delta.
    pub fn add(&self, obj: Arc<K>) -> Result<(), StoreError> {
        self.record(DeltaType::Added, obj)
    }

    /// Records an `Updated` delta.
    pub fn update(&self, obj: Arc<K>) -> Result<(), StoreError> {
        self.record(DeltaType::Updated, obj)
    }

    fn record(&self, kind: DeltaType, obj: Arc<K>) -> Result<(), StoreError> {
        let key = object_key(obj.as_ref())?;
        let mut inner = self.inner.lock();
        inner.populated = true;
        self.queue_action(&mut inner, key, Delta::new(kind, obj));
        self.check_synced(&mut inner);
        Ok(())
    }

    /// Records `Updated` if the key is known (processed or pending), else `Added`: what a
    /// watcher `Apply` event (which merges ADDED and MODIFIED) means.
    pub fn apply(&self, obj: Arc<K>) -> Result<(), StoreError> {
        let key = object_key(obj.as_ref())?;
        let mut inner = self.inner.lock();
        inner.populated = true;
        let pending = inner.items.get(&key).and_then(|d| d.last()).map(|d| d.kind);
        let known = match pending {
            Some(DeltaType::Deleted) => false,
            Some(_) => true,
            None => self.known.as_ref().is_some_and(|s| s.contains_key(&key)),
        };
        let kind = if known {
            DeltaType::Updated
        } else {
            DeltaType::Added
        };
        self.queue_action(&mut inner, key, Delta::new(kind, obj));
        self.check_synced(&mut inner);
        Ok(())
    }

    /// Records a `Deleted` delta, unless the object is neither known nor pending (then it was
    /// already reported deleted by a relist and is not reported twice).
    pub fn delete(&self, obj: Arc<K>) -> Result<(), StoreError> {
        let key = object_key(obj.as_ref())?;
        let mut inner = self.inner.lock();
        inner.populated = true;
        let pending = inner.items.contains_key(&key);
        let known = match &self.known {
            Some(s) => s.contains_key(&key),
            None => false,
        };
        if !pending && !known {
            self.check_synced(&mut inner);
            return Ok(());
        }
        self.queue_action(&mut inner, key, Delta::new(DeltaType::Deleted, obj));
        self.check_synced(&mut inner);
        Ok(())
    }

    /// Replaces the content with a complete list (a relist): a `Replaced` delta for each listed
    /// object, and a tombstone `Deleted` delta for each known or pending key not in the list.
    /// Objects without a name are skipped.
    pub fn replace(&self, list: Vec<Arc<K>>) {
        let mut inner = self.inner.lock();
        // Nothing pending and nothing known (the first list of an informer): nothing can have
        // vanished, and the set of listed keys (a copy of every key) is not needed.
        let nothing_before =
            inner.items.is_empty() && self.known.as_ref().is_none_or(|k| k.is_empty());
        let mut keys = HashSet::with_capacity(if nothing_before { 0 } else { list.len() });
        let mut listed = 0;
        for obj in list {
            let Ok(key) = object_key(obj.as_ref()) else {
                tracing::warn!("skipping object without a name in relist");
                continue;
            };
            if nothing_before {
                // Duplicates in a list count once, as they do in `keys`.
                if !inner.items.contains_key(&key) {
                    listed += 1;
                }
            } else {
                keys.insert(key.clone());
            }
            self.queue_action(&mut inner, key, Delta::new(DeltaType::Replaced, obj));
        }
        if nothing_before {
            if !inner.populated {
                inner.populated = true;
                inner.initial_population_count = listed;
            }
            self.check_synced(&mut inner);
            return;
        }
        let mut queued_deletions = 0;
        // Pending keys that vanished from the new list.
        let pending_gone: Vec<(String, Arc<K>)> = inner
            .items
            .iter()
            .filter(|(k, _)| !keys.contains(*k))
            .filter_map(|(k, deltas)| {
                deltas
                    .last()
                    .map(|d| (k.clone(), d.object.object().clone()))
            })
            .collect();
        for (key, obj) in pending_gone {
            queued_deletions += 1;
            let tomb = DeletedFinalStateUnknown {
                key: key.clone(),
                obj,
            };
            self.queue_action(
                &mut inner,
                key,
                Delta {
                    kind: DeltaType::Deleted,
                    object: DeltaObject::Tombstone(tomb),
                },
            );
        }
        // Known keys (already processed) that vanished and have nothing pending.
        if let Some(known) = &self.known {
            let gone: Vec<(String, Arc<K>)> = known.with_items(|items| {
                items
                    .iter()
                    .filter(|(k, _)| !keys.contains(*k) && !inner.items.contains_key(*k))
                    .map(|(k, o)| (k.clone(), o.clone()))
                    .collect()
            });
            for (key, obj) in gone {
                queued_deletions += 1;
                let tomb = DeletedFinalStateUnknown {
                    key: key.clone(),
                    obj,
                };
                self.queue_action(
                    &mut inner,
                    key,
                    Delta {
                        kind: DeltaType::Deleted,
                        object: DeltaObject::Tombstone(tomb),
                    },
                );
            }
        }
        if !inner.populated {
            inner.populated = true;
            inner.initial_population_count = keys.len() + queued_deletions;
        }
        self.check_synced(&mut inner);
    }

    /// Queues a `Sync` delta for every known object that has nothing pending (periodic resync).
    pub fn resync(&self) {
        let Some(known) = &self.known else { return };
        let mut inner = self.inner.lock();
        let objs: Vec<(String, Arc<K>)> = known.with_items(|items| {
            items
                .iter()
                .filter(|(k, _)| !inner.items.contains_key(*k))
                .map(|(k, o)| (k.clone(), o.clone()))
                .collect()
        });
        for (key, obj) in objs {
            self.queue_action(&mut inner, key, Delta::new(DeltaType::Sync, obj));
        }
    }
}

impl<K> DeltaFifo<K> {
    fn check_synced(&self, inner: &mut Inner<K>) {
        if !inner.synced && inner.populated && inner.initial_population_count == 0 {
            inner.synced = true;
            if let Some(hook) = &self.synced_hook {
                hook();
            }
        }
    }

    /// Waits for the oldest key and calls `process(key, deltas)` with the queue locked, so that
    /// the consumer's store update is atomic with respect to [`DeltaFifo::replace`]. `process`
    /// must not call back into the queue. Returns `None` once closed and drained.
    pub async fn pop<R>(&self, process: impl FnOnce(String, Vec<Delta<K>>) -> R) -> Option<R> {
        loop {
            let notified = self.notify.notified();
            {
                let mut inner = self.inner.lock();
                if !inner.queue.is_empty() {
                    return self.pop_now(&mut inner, process);
                }
                if inner.closed {
                    return None;
                }
            }
            notified.await;
        }
    }

    /// Like [`DeltaFifo::pop`] but returns `None` at once when nothing is queued.
    pub fn try_pop<R>(&self, process: impl FnOnce(String, Vec<Delta<K>>) -> R) -> Option<R> {
        let mut inner = self.inner.lock();
        self.pop_now(&mut inner, process)
    }

    fn pop_now<R>(
        &self,
        inner: &mut Inner<K>,
        process: impl FnOnce(String, Vec<Delta<K>>) -> R,
    ) -> Option<R> {
        while let Some(key) = inner.queue.pop_front() {
            let Some(deltas) = inner.items.remove(&key) else {
                continue;
            };
            if inner.initial_population_count > 0 {
                inner.initial_population_count -= 1;
            }
            let res = process(key, deltas);
            self.check_synced(inner);
            return Some(res);
        }
        None
    }

    /// Whether the first relist has been fully popped (client-go `HasSynced`).
    pub fn has_synced(&self) -> bool {
        self.inner.lock().synced
    }

    /// Stops the queue: [`DeltaFifo::pop`] drains what is queued, then returns `None`.
    pub fn close(&self) {
        self.inner.lock().closed = true;
        self.notify.notify_waiters();
        self.notify.notify_one();
    }

    /// Whether [`DeltaFifo::close`] was called.
    pub fn is_closed(&self) -> bool {
        self.inner.lock().closed
    }

    /// Number of queued keys.
    pub fn len(&self) -> usize {
        self.inner.lock().queue.len()
    }

    /// Whether nothing is queued.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Queued keys, oldest first.
    pub fn list_keys(&self) -> Vec<String> {
        self.inner.lock().queue.iter().cloned().collect()
    }

    /// The pending deltas of `key`, oldest first.
    pub fn get_by_key(&self, key: &str) -> Option<Vec<Delta<K>>> {
        self.inner.lock().items.get(key).cloned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::StoreWriter;
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::ObjectMeta;

    fn cm(name: &str, rv: &str) -> Arc<ConfigMap> {
        Arc::new(ConfigMap {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("ns".into()),
                resource_version: Some(rv.into()),
                ..Default::default()
            },
            ..Default::default()
        })
    }

    fn rv(d: &Delta<ConfigMap>) -> String {
        d.object
            .object()
            .metadata
            .resource_version
            .clone()
            .unwrap_or_default()
    }

    fn kinds(d: &[Delta<ConfigMap>]) -> Vec<(DeltaType, bool, String)> {
        d.iter()
            .map(|d| (d.kind, d.object.is_tombstone(), rv(d)))
            .collect()
    }

    type Popped = Vec<(String, Vec<(DeltaType, bool, String)>)>;

    /// Pops everything, applying it to `known` the way the informer does.
    fn drain(f: &DeltaFifo<ConfigMap>, known: Option<&StoreWriter<ConfigMap>>) -> Popped {
        let mut out = Vec::new();
        while let Some(x) = f.try_pop(|k, d| {
            if let Some(s) = known {
                for delta in &d {
                    match delta.kind {
                        DeltaType::Deleted => {
                            s.delete_by_key(&k);
                        }
                        _ => {
                            s.insert_with_key(k.clone(), delta.object.object().clone());
                        }
                    }
                }
            }
            (k, kinds(&d))
        }) {
            out.push(x);
        }
        out
    }

    use DeltaType::*;

    #[test]
    fn deltas_accumulate_per_key_in_fifo_order() {
        let f = DeltaFifo::new(None);
        f.add(cm("a", "1")).unwrap();
        f.add(cm("b", "1")).unwrap();
        f.update(cm("a", "2")).unwrap();
        f.delete(cm("a", "3")).unwrap();
        assert_eq!(f.list_keys(), vec!["ns/a", "ns/b"]);
        assert_eq!(f.len(), 2);
        let got = drain(&f, None);
        assert_eq!(
            got,
            vec![
                (
                    "ns/a".into(),
                    vec![
                        (Added, false, "1".into()),
                        (Updated, false, "2".into()),
                        (Deleted, false, "3".into())
                    ]
                ),
                ("ns/b".into(), vec![(Added, false, "1".into())]),
            ]
        );
        assert!(f.is_empty());
    }

    #[test]
    fn consecutive_deletes_collapse_keeping_the_real_object() {
        let f = DeltaFifo::new(None);
        f.add(cm("a", "1")).unwrap();
        f.delete(cm("a", "2")).unwrap();
        f.delete(cm("a", "3")).unwrap();
        assert_eq!(
            kinds(&f.get_by_key("ns/a").unwrap()),
            vec![(Added, false, "1".into()), (Deleted, false, "2".into())]
        );
        // a tombstone after a real delete is dropped; a real delete after a tombstone wins
        let mut d = vec![
            Delta::new(Deleted, cm("x", "1")),
            Delta {
                kind: Deleted,
                object: DeltaObject::Tombstone(DeletedFinalStateUnknown {
                    key: "ns/x".into(),
                    obj: cm("x", "0"),
                }),
            },
        ];
        dedup_tail(&mut d);
        assert_eq!(kinds(&d), vec![(Deleted, false, "1".into())]);
        let mut d = vec![
            Delta {
                kind: Deleted,
                object: DeltaObject::Tombstone(DeletedFinalStateUnknown {
                    key: "ns/x".into(),
                    obj: cm("x", "0"),
                }),
            },
            Delta::new(Deleted, cm("x", "1")),
        ];
        dedup_tail(&mut d);
        assert_eq!(kinds(&d), vec![(Deleted, false, "1".into())]);
        // updates are never collapsed
        let mut d = vec![
            Delta::new(Updated, cm("x", "1")),
            Delta::new(Updated, cm("x", "2")),
        ];
        dedup_tail(&mut d);
        assert_eq!(d.len(), 2);
    }

    #[test]
    fn delete_of_unknown_object_is_not_reported() {
        let known = StoreWriter::new();
        let f = DeltaFifo::new(Some(known.as_reader()));
        f.delete(cm("ghost", "1")).unwrap();
        assert!(f.is_empty());
        known.add(cm("real", "1")).unwrap();
        f.delete(cm("real", "2")).unwrap();
        assert_eq!(
            kinds(&f.get_by_key("ns/real").unwrap()),
            vec![(Deleted, false, "2".into())]
        );
    }

    #[test]
    fn apply_is_added_or_updated() {
        let known = StoreWriter::new();
        let f = DeltaFifo::new(Some(known.as_reader()));
        f.apply(cm("a", "1")).unwrap();
        f.apply(cm("a", "2")).unwrap();
        known.add(cm("b", "1")).unwrap();
        f.apply(cm("b", "2")).unwrap();
        assert_eq!(
            kinds(&f.get_by_key("ns/a").unwrap()),
            vec![(Added, false, "1".into()), (Updated, false, "2".into())]
        );
        assert_eq!(
            kinds(&f.get_by_key("ns/b").unwrap()),
            vec![(Updated, false, "2".into())]
        );
        f.delete(cm("a", "3")).unwrap();
        f.apply(cm("a", "4")).unwrap();
        assert_eq!(
            f.get_by_key("ns/a").unwrap().last().unwrap().kind,
            Added,
            "re-created after a delete"
        );
    }

    #[test]
    fn replace_emits_tombstones_for_vanished_known_and_pending_objects() {
        let known = StoreWriter::new();
        let f = DeltaFifo::new(Some(known.as_reader()));
        assert!(!f.has_synced());
        f.replace(vec![cm("a", "1"), cm("b", "1"), cm("c", "1")]);
        assert!(
            !f.has_synced(),
            "synced only once the initial list is popped"
        );
        let got = drain(&f, Some(&known));
        assert_eq!(got.len(), 3);
        assert!(
            got.iter()
                .all(|(_, d)| d == &vec![(Replaced, false, "1".into())])
        );
        assert!(f.has_synced());
        // while "disconnected": d is added and still pending; a and d vanish; b changes
        f.add(cm("d", "5")).unwrap();
        f.replace(vec![cm("b", "2"), cm("c", "1")]);
        let mut got = drain(&f, Some(&known));
        got.sort();
        assert_eq!(
            got,
            vec![
                ("ns/a".into(), vec![(Deleted, true, "1".into())]),
                ("ns/b".into(), vec![(Replaced, false, "2".into())]),
                ("ns/c".into(), vec![(Replaced, false, "1".into())]),
                (
                    "ns/d".into(),
                    vec![(Added, false, "5".into()), (Deleted, true, "5".into())]
                ),
            ]
        );
        // everything vanished: one tombstone per known key
        f.replace(vec![]);
        assert_eq!(f.len(), 2);
        let got = drain(&f, Some(&known));
        assert!(
            got.iter()
                .all(|(_, d)| d.len() == 1 && d[0].0 == Deleted && d[0].1)
        );
        assert!(known.is_empty());
    }

    #[test]
    fn replace_does_not_duplicate_a_pending_real_delete() {
        let known = StoreWriter::new();
        let f = DeltaFifo::new(Some(known.as_reader()));
        known.add(cm("a", "1")).unwrap();
        f.delete(cm("a", "2")).unwrap();
        f.replace(vec![]);
        assert_eq!(
            kinds(&f.get_by_key("ns/a").unwrap()),
            vec![(Deleted, false, "2".into())]
        );
    }

    #[test]
    fn empty_initial_list_syncs_at_once_and_hook_fires_once() {
        let fired = Arc::new(std::sync::atomic::AtomicU32::new(0));
        let f2 = fired.clone();
        let f = DeltaFifo::<ConfigMap>::new(Some(StoreWriter::new().as_reader())).with_synced_hook(
            move || {
                f2.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            },
        );
        f.add(cm("x", "1")).unwrap(); // an add before the first list counts as populated
        assert!(f.has_synced());
        f.replace(vec![]);
        assert_eq!(fired.load(std::sync::atomic::Ordering::SeqCst), 1);
    }

    #[test]
    fn resync_queues_sync_for_known_objects_without_pending_deltas() {
        let known = StoreWriter::new();
        let f = DeltaFifo::new(Some(known.as_reader()));
        known.add(cm("a", "1")).unwrap();
        known.add(cm("b", "1")).unwrap();
        f.update(cm("b", "2")).unwrap();
        f.resync();
        assert_eq!(
            kinds(&f.get_by_key("ns/a").unwrap()),
            vec![(Sync, false, "1".into())]
        );
        assert_eq!(
            kinds(&f.get_by_key("ns/b").unwrap()),
            vec![(Updated, false, "2".into())]
        );
        // the Sync delta shares the known object
        let a = f.get_by_key("ns/a").unwrap();
        assert!(Arc::ptr_eq(
            a[0].object.object(),
            &known.get_by_key("ns/a").unwrap()
        ));
    }

    #[tokio::test]
    async fn pop_waits_and_close_drains() {
        let f = Arc::new(DeltaFifo::<ConfigMap>::new(None));
        let f2 = f.clone();
        let waiter = tokio::spawn(async move { f2.pop(|k, _| k).await });
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        f.add(cm("a", "1")).unwrap();
        assert_eq!(waiter.await.unwrap().as_deref(), Some("ns/a"));
        f.add(cm("b", "1")).unwrap();
        f.close();
        assert!(f.is_closed());
        assert_eq!(f.pop(|k, _| k).await.as_deref(), Some("ns/b"));
        assert_eq!(f.pop(|k, _| k).await, None);
    }

    #[test]
    fn objects_without_name_are_rejected() {
        let f = DeltaFifo::<ConfigMap>::new(None);
        assert!(f.add(Arc::new(ConfigMap::default())).is_err());
        f.replace(vec![Arc::new(ConfigMap::default()), cm("a", "1")]);
        assert_eq!(f.list_keys(), vec!["ns/a"]);
    }
}

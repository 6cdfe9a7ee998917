//! Thread-safe object store with named indexes (client-go `ThreadSafeStore` + `Indexer`).
//!
//! Objects are keyed by `namespace/name` (just `name` for cluster-scoped objects) and held as
//! [`Arc<K>`]: the store, the event handlers and the listers share one allocation per object
//! version. Index functions map an object to any number of index values; [`Store::by_index`]
//! returns every object that produced a given value.
//!
//! # One writer, many readers
//!
//! As in kube-runtime's reflector, the cache is split in two handles on the same data:
//!
//! - [`StoreWriter`]: the one handle that changes the content (`add`, `update`, `delete`,
//!   `replace`, `insert_with_key`, `delete_by_key`) or registers indexes. It is not `Clone`:
//!   whoever owns it, normally the informer that fills it, is the only writer.
//! - [`Store`]: read-only (`get_by_key`, `list`, `by_index`, `index_keys`, `len`, ...), cheap
//!   to clone. This is what [`crate::SharedIndexInformer::store`] and [`crate::Lister::store`]
//!   hand out, so a consumer cannot make its cache disagree with the API server.
//!
//! Consumers who need an index register it on the informer
//! ([`crate::SharedIndexInformer::add_index`], client-go `AddIndexers`), or prepare a
//! [`StoreWriter`] and hand it over with [`crate::SharedIndexInformer::with_store`].
//!
//! What an informer gives out can be read:
//!
//! ```
//! # use std::sync::Arc;
//! # use k8s_openapi::api::core::v1::Pod;
//! # use sluice_informer::SharedIndexInformer;
//! fn read(informer: &SharedIndexInformer<Pod>) -> Option<Arc<Pod>> {
//!     informer.store().get_by_key("default/web")
//! }
//! ```
//!
//! but not changed, neither through the informer's store:
//!
//! ```compile_fail,E0599
//! # use std::sync::Arc;
//! # use k8s_openapi::api::core::v1::Pod;
//! # use sluice_informer::SharedIndexInformer;
//! fn tamper(informer: &SharedIndexInformer<Pod>, pod: Arc<Pod>) {
//!     informer.store().add(pod); // no method `add` on the read-only `Store`
//! }
//! ```
//!
//! nor through a lister's:
//!
//! ```compile_fail,E0599
//! # use k8s_openapi::api::core::v1::Pod;
//! # use sluice_informer::Lister;
//! fn tamper(lister: &Lister<Pod>) {
//!     lister.store().delete_by_key("default/web"); // no method `delete_by_key` on `Store`
//! }
//! ```
//!
//! nor by turning a clone of it back into a writer:
//!
//! ```compile_fail,E0277
//! # use k8s_openapi::api::core::v1::Pod;
//! # use sluice_informer::{SharedIndexInformer, StoreWriter};
//! fn tamper(informer: &SharedIndexInformer<Pod>) -> StoreWriter<Pod> {
//!     StoreWriter::from(informer.store().clone()) // no conversion from `Store` to a writer
//! }
//! ```

use std::{
    collections::{BTreeSet, HashMap, HashSet},
    fmt,
    sync::Arc,
};

use kube::Resource;
use listing::Listing;
use parking_lot::RwLock;
use sluice_persistent::ChunkedVec;

mod listing;

/// Name of the built-in index that maps a namespace to the objects in it.
pub const NAMESPACE_INDEX: &str = "namespace";

/// An index function: the index values an object is filed under (client-go `IndexFunc`).
pub type IndexFn<K> = Arc<dyn Fn(&K) -> Vec<String> + Send + Sync>;

/// Errors returned by [`Store`] operations.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    /// The named index does not exist.
    #[error("index {0:?} does not exist")]
    IndexNotFound(String),
    /// An index with this name was already registered.
    #[error("index {0:?} already exists")]
    IndexExists(String),
    /// The object has no name, so it cannot be keyed.
    #[error("object has no metadata.name")]
    MissingName,
}

/// The store key of an object: `namespace/name`, or `name` when it has no namespace
/// (client-go `MetaNamespaceKeyFunc`).
pub fn object_key<K: Resource>(obj: &K) -> Result<String, StoreError> {
    let meta = obj.meta();
    let name = meta.name.as_deref().ok_or(StoreError::MissingName)?;
    Ok(make_key(meta.namespace.as_deref(), name))
}

/// Builds a store key from an optional namespace and a name.
pub fn make_key(namespace: Option<&str>, name: &str) -> String {
    match namespace {
        Some(ns) if !ns.is_empty() => format!("{ns}/{name}"),
        _ => name.to_string(),
    }
}

/// Splits a store key into `(namespace, name)` (client-go `SplitMetaNamespaceKey`).
pub fn split_key(key: &str) -> (Option<&str>, &str) {
    match key.split_once('/') {
        Some((ns, name)) => (Some(ns), name),
        None => (None, key),
    }
}

/// The index function behind [`NAMESPACE_INDEX`]: an object's namespace, if any
/// (client-go `MetaNamespaceIndexFunc`).
pub fn namespace_index_fn<K: Resource>(obj: &K) -> Vec<String> {
    obj.meta()
        .namespace
        .iter()
        .filter(|ns| !ns.is_empty())
        .cloned()
        .collect()
}

struct Inner<K> {
    items: HashMap<String, Arc<K>>,
    /// What [`Store::list_shared`] copies, kept in step with `items` from its first call.
    listing: parking_lot::Mutex<Option<Listing<K>>>,
    indexers: HashMap<String, IndexFn<K>>,
    /// index name -> index value -> keys
    indices: HashMap<String, HashMap<String, HashSet<String>>>,
}

impl<K> Inner<K> {
    fn index_values(&self, name: &str, obj: &K) -> Vec<String> {
        match self.indexers.get(name) {
            Some(f) => dedup(f(obj)),
            None => Vec::new(),
        }
    }

    fn update_indices(&mut self, old: Option<&K>, new: Option<&K>, key: &str) {
        let names: Vec<String> = self.indexers.keys().cloned().collect();
        for name in names {
            let old_vals = old.map(|o| self.index_values(&name, o)).unwrap_or_default();
            let new_vals = new.map(|n| self.index_values(&name, n)).unwrap_or_default();
            if old_vals == new_vals {
                continue;
            }
            let index = self.indices.entry(name).or_default();
            for v in &old_vals {
                if !new_vals.contains(v)
                    && let Some(set) = index.get_mut(v)
                {
                    set.remove(key);
                    if set.is_empty() {
                        index.remove(v);
                    }
                }
            }
            for v in new_vals {
                index.entry(v).or_default().insert(key.to_string());
            }
        }
    }

    fn put(&mut self, key: String, obj: Arc<K>) {
        if let Some(listing) = self.listing.get_mut() {
            listing.put(&key, &obj);
        }
        let old = self.items.insert(key.clone(), obj.clone());
        self.update_indices(old.as_deref(), Some(&obj), &key);
    }

    fn remove(&mut self, key: &str) -> Option<Arc<K>> {
        let old = self.items.remove(key)?;
        if let Some(listing) = self.listing.get_mut() {
            listing.remove(key);
        }
        self.update_indices(Some(&old), None, key);
        Some(old)
    }

    fn rebuild_index(&mut self, name: &str) {
        let mut index: HashMap<String, HashSet<String>> = HashMap::new();
        for (key, obj) in &self.items {
            for v in self.index_values(name, obj) {
                index.entry(v).or_default().insert(key.clone());
            }
        }
        self.indices.insert(name.to_string(), index);
    }
}

fn dedup(mut v: Vec<String>) -> Vec<String> {
    if v.len() > 1 {
        v.sort_unstable();
        v.dedup();
    }
    v
}

/// Read-only view of an indexed store (client-go `cache.Indexer`, reads only). Cheap to
/// clone: clones read the same data. Obtained from a [`StoreWriter`]
/// ([`StoreWriter::as_reader`]), an informer or a lister; it has no way to change the content.
pub struct Store<K> {
    inner: Arc<RwLock<Inner<K>>>,
}

impl<K> Clone for Store<K> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
        }
    }
}

impl<K> fmt::Debug for Store<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let inner = self.inner.read();
        f.debug_struct("Store")
            .field("len", &inner.items.len())
            .field("indexes", &inner.indexers.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl<K: Resource> Store<K> {
    /// Keys `obj` like the store does (`namespace/name`).
    pub fn key_of(&self, obj: &K) -> Result<String, StoreError> {
        object_key(obj)
    }
}

impl<K> Store<K> {
    /// The object stored under `key` (`namespace/name`).
    pub fn get_by_key(&self, key: &str) -> Option<Arc<K>> {
        self.inner.read().items.get(key).cloned()
    }

    /// Whether an object is stored under `key`.
    pub fn contains_key(&self, key: &str) -> bool {
        self.inner.read().items.contains_key(key)
    }

    /// Every stored object, in no particular order.
    pub fn list(&self) -> Vec<Arc<K>> {
        self.inner.read().items.values().cloned().collect()
    }

    /// [`Store::list`] in shared chunks of 128 objects: a copy of the chunks' pointers,
    /// for a consumer that lists a kind after every change (a controller compiling all its
    /// inputs). From the first call on, the store keeps this listing in step with its
    /// writes: each object keeps its position (an update in place, an addition at the end,
    /// a deletion filled by the last object), so two listings taken around a few writes
    /// share all but a few chunks and line up item by item.
    pub fn list_shared(&self) -> ChunkedVec<Arc<K>> {
        let inner = self.inner.read();
        let mut listing = inner.listing.lock();
        listing
            .get_or_insert_with(|| Listing::of(&inner.items))
            .shared()
    }

    /// Every stored key, in no particular order.
    pub fn list_keys(&self) -> Vec<String> {
        self.inner.read().items.keys().cloned().collect()
    }

    /// Number of stored objects.
    pub fn len(&self) -> usize {
        self.inner.read().items.len()
    }

    /// Whether the store is empty.
    pub fn is_empty(&self) -> bool {
        self.inner.read().items.is_empty()
    }

    /// Names of the registered indexes.
    pub fn index_names(&self) -> Vec<String> {
        self.inner.read().indexers.keys().cloned().collect()
    }

    /// Objects filed under `value` in index `name` (client-go `ByIndex`).
    pub fn by_index(&self, name: &str, value: &str) -> Result<Vec<Arc<K>>, StoreError> {
        let inner = self.inner.read();
        if !inner.indexers.contains_key(name) {
            return Err(StoreError::IndexNotFound(name.to_string()));
        }
        Ok(inner
            .indices
            .get(name)
            .and_then(|idx| idx.get(value))
            .map(|keys| {
                keys.iter()
                    .filter_map(|k| inner.items.get(k).cloned())
                    .collect()
            })
            .unwrap_or_default())
    }

    /// Keys filed under `value` in index `name` (client-go `IndexKeys`).
    pub fn index_keys(&self, name: &str, value: &str) -> Result<Vec<String>, StoreError> {
        let inner = self.inner.read();
        if !inner.indexers.contains_key(name) {
            return Err(StoreError::IndexNotFound(name.to_string()));
        }
        Ok(inner
            .indices
            .get(name)
            .and_then(|idx| idx.get(value))
            .map(|keys| keys.iter().cloned().collect())
            .unwrap_or_default())
    }

    /// Every value currently present in index `name` (client-go `ListIndexFuncValues`).
    pub fn index_values(&self, name: &str) -> Result<Vec<String>, StoreError> {
        let inner = self.inner.read();
        if !inner.indexers.contains_key(name) {
            return Err(StoreError::IndexNotFound(name.to_string()));
        }
        Ok(inner
            .indices
            .get(name)
            .map(|idx| idx.keys().cloned().collect())
            .unwrap_or_default())
    }

    /// Objects sharing at least one value of index `name` with `obj` (client-go `Index`).
    pub fn index(&self, name: &str, obj: &K) -> Result<Vec<Arc<K>>, StoreError> {
        let inner = self.inner.read();
        if !inner.indexers.contains_key(name) {
            return Err(StoreError::IndexNotFound(name.to_string()));
        }
        let mut keys = BTreeSet::new();
        if let Some(idx) = inner.indices.get(name) {
            for v in inner.index_values(name, obj) {
                if let Some(set) = idx.get(&v) {
                    keys.extend(set.iter().cloned());
                }
            }
        }
        Ok(keys
            .iter()
            .filter_map(|k| inner.items.get(k).cloned())
            .collect())
    }

    /// Runs `f` with read access to the raw key→object map (for consistent multi-reads).
    pub fn with_items<R>(&self, f: impl FnOnce(&HashMap<String, Arc<K>>) -> R) -> R {
        f(&self.inner.read().items)
    }
}

/// The one handle that writes a store (kube-runtime's reflector `Writer`). Not `Clone`: its
/// owner, normally the informer filling it, is the only writer. Reads go through the
/// [`Store`] it dereferences to; [`StoreWriter::as_reader`] hands out read-only clones.
pub struct StoreWriter<K> {
    store: Store<K>,
}

impl<K> fmt::Debug for StoreWriter<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("StoreWriter").field(&self.store).finish()
    }
}

impl<K> std::ops::Deref for StoreWriter<K> {
    type Target = Store<K>;

    fn deref(&self) -> &Store<K> {
        &self.store
    }
}

impl<K: Resource + Send + Sync + 'static> Default for StoreWriter<K> {
    fn default() -> Self {
        Self::new()
    }
}

impl<K: Resource + Send + Sync + 'static> StoreWriter<K> {
    /// An empty store with only the built-in [`NAMESPACE_INDEX`].
    pub fn new() -> Self {
        let store = Self::without_indexes();
        // Cannot fail: the store is empty and has no index yet.
        let _ = store.add_index(NAMESPACE_INDEX, namespace_index_fn::<K>);
        store
    }

    /// Adds or replaces an object under its key.
    pub fn add(&self, obj: Arc<K>) -> Result<(), StoreError> {
        let key = object_key(obj.as_ref())?;
        self.store.inner.write().put(key, obj);
        Ok(())
    }

    /// Same as [`StoreWriter::add`] (kept for client-go parity).
    pub fn update(&self, obj: Arc<K>) -> Result<(), StoreError> {
        self.add(obj)
    }

    /// Removes the object with the key of `obj`, returning what was stored.
    pub fn delete(&self, obj: &K) -> Result<Option<Arc<K>>, StoreError> {
        let key = object_key(obj)?;
        Ok(self.delete_by_key(&key))
    }

    /// Replaces the whole content with `objs` (objects without a name are skipped).
    pub fn replace(&self, objs: impl IntoIterator<Item = Arc<K>>) {
        let mut items = HashMap::new();
        for obj in objs {
            if let Ok(key) = object_key(obj.as_ref()) {
                items.insert(key, obj);
            }
        }
        let mut inner = self.store.inner.write();
        inner.items = items;
        let inner = &mut *inner;
        if let Some(listing) = inner.listing.get_mut() {
            listing.replace(&inner.items);
        }
        let names: Vec<String> = inner.indexers.keys().cloned().collect();
        for name in names {
            inner.rebuild_index(&name);
        }
    }
}

impl<K> StoreWriter<K> {
    /// An empty store without any index (not even the namespace index).
    pub fn without_indexes() -> Self {
        Self {
            store: Store {
                inner: Arc::new(RwLock::new(Inner {
                    items: HashMap::new(),
                    listing: parking_lot::Mutex::new(None),
                    indexers: HashMap::new(),
                    indices: HashMap::new(),
                })),
            },
        }
    }

    /// A read-only handle on this store's data, for consumers.
    pub fn as_reader(&self) -> Store<K> {
        self.store.clone()
    }

    /// Inserts an object under an explicit key (used by the informer, which already knows
    /// keys); returns what was stored under it.
    pub fn insert_with_key(&self, key: String, obj: Arc<K>) -> Option<Arc<K>> {
        let mut inner = self.store.inner.write();
        let old = inner.items.get(&key).cloned();
        inner.put(key, obj);
        old
    }

    /// Removes the object stored under `key`, returning it.
    pub fn delete_by_key(&self, key: &str) -> Option<Arc<K>> {
        self.store.inner.write().remove(key)
    }
}

impl<K: 'static> StoreWriter<K> {
    /// Registers a named index function and indexes the current content with it.
    pub fn add_index(
        &self,
        name: &str,
        f: impl Fn(&K) -> Vec<String> + Send + Sync + 'static,
    ) -> Result<(), StoreError> {
        let mut inner = self.store.inner.write();
        if inner.indexers.contains_key(name) {
            return Err(StoreError::IndexExists(name.to_string()));
        }
        inner.indexers.insert(name.to_string(), Arc::new(f));
        inner.rebuild_index(name);
        Ok(())
    }

    /// Registers several index functions at once (client-go `AddIndexers`).
    pub fn add_indexers(
        &self,
        indexers: impl IntoIterator<Item = (String, IndexFn<K>)>,
    ) -> Result<(), StoreError> {
        for (name, f) in indexers {
            self.add_index(&name, move |o: &K| f(o))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Pod;
    use kube::api::ObjectMeta;
    use sluice_persistent::CHUNK;

    fn pod(ns: &str, name: &str, node: &str) -> Arc<Pod> {
        Arc::new(Pod {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some(ns.into()),
                ..Default::default()
            },
            spec: Some(k8s_openapi::api::core::v1::PodSpec {
                node_name: Some(node.into()),
                ..Default::default()
            }),
            ..Default::default()
        })
    }

    fn node_of(p: &Pod) -> Vec<String> {
        p.spec
            .as_ref()
            .and_then(|s| s.node_name.clone())
            .into_iter()
            .collect()
    }

    fn sorted(mut v: Vec<String>) -> Vec<String> {
        v.sort();
        v
    }

    fn names(v: Vec<Arc<Pod>>) -> Vec<String> {
        sorted(v.iter().filter_map(|p| p.metadata.name.clone()).collect())
    }

    #[test]
    fn keys() {
        assert_eq!(make_key(Some("ns"), "a"), "ns/a");
        assert_eq!(make_key(None, "a"), "a");
        assert_eq!(make_key(Some(""), "a"), "a");
        assert_eq!(split_key("ns/a"), (Some("ns"), "a"));
        assert_eq!(split_key("a"), (None, "a"));
        assert_eq!(object_key(pod("x", "y", "n").as_ref()).unwrap(), "x/y");
        assert_eq!(object_key(&Pod::default()), Err(StoreError::MissingName));
    }

    #[test]
    fn add_get_list_delete() {
        let s = StoreWriter::<Pod>::new();
        assert!(s.is_empty());
        s.add(pod("a", "p1", "n1")).unwrap();
        s.add(pod("a", "p2", "n2")).unwrap();
        s.add(pod("b", "p1", "n1")).unwrap();
        assert_eq!(s.len(), 3);
        assert_eq!(sorted(s.list_keys()), vec!["a/p1", "a/p2", "b/p1"]);
        assert!(s.get_by_key("a/p2").is_some());
        assert!(s.get_by_key("a/p3").is_none());
        assert_eq!(
            s.delete(&pod("a", "p2", ""))
                .unwrap()
                .map(|p| p.metadata.name.clone().unwrap()),
            Some("p2".into())
        );
        assert_eq!(s.delete(&pod("a", "p2", "")).unwrap(), None);
        assert_eq!(s.len(), 2);
        assert_eq!(names(s.list()), vec!["p1", "p1"]);
        assert!(s.add(Arc::new(Pod::default())).is_err());
    }

    #[test]
    fn a_shared_listing_follows_writes_and_keeps_positions() {
        let s = StoreWriter::<Pod>::new();
        for i in 0..300 {
            s.add(pod("a", &format!("p{i}"), "n1")).unwrap();
        }
        let keys = |list: &ChunkedVec<Arc<Pod>>| {
            let mut k: Vec<String> = list.iter().map(|p| object_key(&**p).unwrap()).collect();
            k.sort();
            k
        };
        let first = s.list_shared();
        let again = s.list_shared();
        assert!(
            first.shares_chunk_at(&again, 0) && first.shares_chunk_at(&again, CHUNK),
            "no write: the same chunks"
        );
        let position = |list: &ChunkedVec<Arc<Pod>>, name: &str| {
            list.iter()
                .position(|p| p.metadata.name.as_deref() == Some(name))
        };
        // The listing's order is the map's: pick objects by position, in the first whole
        // chunk (the last 44 of 300 are the unshared tail).
        let name_at = |i: usize| first[i].metadata.name.clone().unwrap_or_default();
        let (at, updated_name) = (5, name_at(5));
        s.update(pod("a", &updated_name, "n2")).unwrap();
        let updated = s.list_shared();
        assert_eq!(
            position(&updated, &updated_name),
            Some(at),
            "an update stays in place"
        );
        assert_eq!(node_of(&updated[at]), ["n2"]);
        assert_eq!(
            node_of(&first[at]),
            ["n1"],
            "a listing handed out stays as it was"
        );
        let shared = (0..2).filter(|c| updated.shares_chunk_at(&first, c * CHUNK));
        assert_eq!(shared.count(), 1, "one chunk copied, one shared");
        s.add(pod("a", "p300", "n1")).unwrap();
        assert_eq!(
            position(&s.list_shared(), "p300"),
            Some(300),
            "an addition at the end"
        );
        let hole = 7;
        s.delete(&pod("a", &name_at(hole), "")).unwrap();
        let deleted = s.list_shared();
        assert_eq!(
            position(&deleted, "p300"),
            Some(hole),
            "the last fills the hole"
        );
        assert_eq!(deleted.len(), 300);
        let unmoved = (0..300).filter(|&i| i != at && i != hole);
        assert!(
            unmoved
                .into_iter()
                .all(|i| Arc::ptr_eq(&deleted[i], &first[i]))
        );
        assert_eq!(keys(&deleted), keys(&s.list().into_iter().collect()));
        s.replace([pod("b", "p3", "n1"), pod("a", "p9", "n1")]);
        assert_eq!(keys(&s.list_shared()), ["a/p9", "b/p3"]);
        assert_eq!(
            keys(&s.list_shared()),
            keys(&s.list().into_iter().collect())
        );
    }

    #[test]
    fn namespace_index_and_custom_index_follow_changes() {
        let s = StoreWriter::<Pod>::new();
        s.add_index("node", node_of).unwrap();
        assert_eq!(
            s.add_index("node", node_of),
            Err(StoreError::IndexExists("node".into()))
        );
        s.add(pod("a", "p1", "n1")).unwrap();
        s.add(pod("a", "p2", "n1")).unwrap();
        s.add(pod("b", "p3", "n2")).unwrap();
        assert_eq!(
            names(s.by_index(NAMESPACE_INDEX, "a").unwrap()),
            vec!["p1", "p2"]
        );
        assert_eq!(names(s.by_index("node", "n1").unwrap()), vec!["p1", "p2"]);
        assert_eq!(sorted(s.index_keys("node", "n2").unwrap()), vec!["b/p3"]);
        assert_eq!(sorted(s.index_values("node").unwrap()), vec!["n1", "n2"]);
        // move p2 to n2
        s.update(pod("a", "p2", "n2")).unwrap();
        assert_eq!(names(s.by_index("node", "n1").unwrap()), vec!["p1"]);
        assert_eq!(names(s.by_index("node", "n2").unwrap()), vec!["p2", "p3"]);
        // remove p1: n1 disappears from the index
        s.delete_by_key("a/p1");
        assert!(s.by_index("node", "n1").unwrap().is_empty());
        assert_eq!(sorted(s.index_values("node").unwrap()), vec!["n2"]);
        assert_eq!(
            names(s.index("node", &pod("z", "q", "n2")).unwrap()),
            vec!["p2", "p3"]
        );
        assert_eq!(
            s.by_index("nope", "x").unwrap_err(),
            StoreError::IndexNotFound("nope".into())
        );
        assert!(s.index_keys("nope", "x").is_err());
        assert!(s.index_values("nope").is_err());
        // replace rebuilds every index
        s.replace(vec![pod("c", "p9", "n9")]);
        assert_eq!(s.list_keys(), vec!["c/p9"]);
        assert!(s.by_index("node", "n2").unwrap().is_empty());
        assert_eq!(names(s.by_index("node", "n9").unwrap()), vec!["p9"]);
        assert_eq!(names(s.by_index(NAMESPACE_INDEX, "c").unwrap()), vec!["p9"]);
        assert!(s.by_index(NAMESPACE_INDEX, "a").unwrap().is_empty());
    }

    #[test]
    fn index_added_late_covers_existing_objects_and_multi_values() {
        let s = StoreWriter::<Pod>::without_indexes();
        s.add(pod("a", "p1", "n1")).unwrap();
        s.add(pod("a", "p2", "n2")).unwrap();
        // multi-valued index with duplicates
        s.add_index("both", |p: &Pod| {
            let mut v = node_of(p);
            v.push("all".into());
            v.push("all".into());
            v
        })
        .unwrap();
        assert_eq!(names(s.by_index("both", "all").unwrap()), vec!["p1", "p2"]);
        assert_eq!(names(s.by_index("both", "n2").unwrap()), vec!["p2"]);
        assert!(s.by_index(NAMESPACE_INDEX, "a").is_err());
    }

    #[test]
    fn readers_see_the_writers_changes_and_outlive_it() {
        let w = StoreWriter::<Pod>::new();
        let r = w.as_reader();
        let r2 = r.clone();
        assert!(r.is_empty());
        w.add(pod("a", "p1", "n1")).unwrap();
        assert_eq!(r.list_keys(), vec!["a/p1"]);
        assert_eq!(
            names(r2.by_index(NAMESPACE_INDEX, "a").unwrap()),
            vec!["p1"]
        );
        w.add_index("node", node_of).unwrap();
        assert_eq!(r.index_keys("node", "n1").unwrap(), vec!["a/p1"]);
        w.delete_by_key("a/p1");
        assert!(r2.get_by_key("a/p1").is_none());
        w.add(pod("a", "p2", "n1")).unwrap();
        drop(w);
        assert_eq!(
            r.list_keys(),
            vec!["a/p2"],
            "the data lives as long as a reader"
        );
    }

    #[test]
    fn objects_are_shared_not_cloned() {
        let s = StoreWriter::<Pod>::new();
        let p = pod("a", "p1", "n1");
        s.add(p.clone()).unwrap();
        let got = s.get_by_key("a/p1").unwrap();
        assert!(Arc::ptr_eq(&p, &got));
        assert!(Arc::ptr_eq(&p, &s.by_index("namespace", "a").unwrap()[0]));
    }

    use proptest::prelude::*;

    proptest! {
        /// The index always equals one recomputed from scratch, whatever the operation sequence.
        #[test]
        fn index_matches_recomputation(ops in proptest::collection::vec((0u8..3, 0u8..6, 0u8..4), 0..60)) {
            let s = StoreWriter::<Pod>::new();
            s.add_index("node", node_of).unwrap();
            for (op, name, node) in ops {
                let name = format!("p{name}");
                let node = format!("n{node}");
                match op {
                    0 | 1 => s.add(pod("ns", &name, &node)).unwrap(),
                    _ => { s.delete_by_key(&format!("ns/{name}")); }
                }
            }
            for n in 0..4 {
                let node = format!("n{n}");
                let expect: Vec<String> = sorted(s.list().iter().filter(|p| node_of(p) == vec![node.clone()]).map(|p| format!("ns/{}", p.metadata.name.clone().unwrap())).collect());
                prop_assert_eq!(sorted(s.index_keys("node", &node).unwrap()), expect);
            }
        }
    }
}

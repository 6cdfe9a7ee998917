//! Shares informers between consumers (client-go `SharedInformerFactory`).
//!
//! The factory keeps one [`SharedIndexInformer`] per (object type, resource URL with its
//! namespace, label selector, field selector). Every consumer asking for the same combination
//! gets the same informer, hence the same single watch on the API server and the same cache.
//! Typed informers are requested with [`SharedInformerFactory::informer`] and friends,
//! dynamic ones by [`ApiResource`] (group/version/resource, e.g. from [`crate::discovery`]) with
//! [`SharedInformerFactory::dynamic_informer`].
//!
//! ```no_run
//! # async fn demo(client: kube::Client) {
//! use k8s_openapi::api::core::v1::Pod;
//! use sluice_informer::SharedInformerFactory;
//! use std::time::Duration;
//!
//! let factory = SharedInformerFactory::new(client);
//! let pods = factory.informer::<Pod>();       // first consumer
//! let lister = factory.lister::<Pod>();       // second consumer: same informer, same watch
//! factory.start();
//! factory.wait_for_cache_sync(Duration::from_secs(30)).await;
//! println!("{} pods", lister.list_all().len());
//! factory.shutdown().await;
//! # }
//! ```

use std::{any::TypeId, collections::HashMap, fmt::Debug, sync::Arc, time::Duration};

use kube::{
    Api, Client, Resource,
    api::{ApiResource, DynamicObject},
    core::{NamespaceScope, PartialObjectMeta},
};
use parking_lot::Mutex;
use serde::de::DeserializeOwned;

use crate::{
    handle::InformerHandle,
    informer::SharedIndexInformer,
    list_watch::{ApiListWatch, ListOptions},
    lister::Lister,
};

/// What identifies an informer in a factory.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct InformerKey {
    /// The Rust type of the objects (`DynamicObject` for dynamic informers).
    pub type_id: TypeId,
    /// Resource URL, including the namespace if any (e.g. `/api/v1/namespaces/x/pods`).
    pub url: String,
    /// Selectors.
    pub options: ListOptions,
}

#[derive(Default)]
struct State {
    informers: HashMap<InformerKey, Arc<dyn InformerHandle>>,
    started: bool,
    shut_down: bool,
}

struct Inner {
    client: Client,
    resync: Option<Duration>,
    options: ListOptions,
    state: Mutex<State>,
}

/// A factory of shared informers. Cheap to clone; clones share the informers.
#[derive(Clone)]
pub struct SharedInformerFactory {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for SharedInformerFactory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = self.inner.state.lock();
        f.debug_struct("SharedInformerFactory")
            .field(
                "informers",
                &s.informers
                    .keys()
                    .map(|k| k.url.clone())
                    .collect::<Vec<_>>(),
            )
            .field("started", &s.started)
            .finish()
    }
}

impl SharedInformerFactory {
    /// A factory using `client`, without resync and without default selectors.
    pub fn new(client: Client) -> Self {
        Self::with_options(client, None, ListOptions::default())
    }

    /// A factory with a default resync period and default selectors applied to the informers
    /// it creates without explicit options (client-go `WithTweakListOptions`).
    pub fn with_options(client: Client, resync: Option<Duration>, options: ListOptions) -> Self {
        Self {
            inner: Arc::new(Inner {
                client,
                resync,
                options,
                state: Mutex::new(State::default()),
            }),
        }
    }

    /// The client informers use.
    pub fn client(&self) -> &Client {
        &self.inner.client
    }

    /// Typed informer for `K` in all namespaces, with the factory's default selectors.
    pub fn informer<K>(&self) -> SharedIndexInformer<K>
    where
        K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    {
        self.informer_for(
            Api::all(self.inner.client.clone()),
            self.inner.options.clone(),
        )
    }

    /// Typed informer for `K` in namespace `ns`, with the factory's default selectors.
    pub fn namespaced_informer<K>(&self, ns: &str) -> SharedIndexInformer<K>
    where
        K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
        K::Scope: NamespaceScope,
    {
        let api = Api::<K>::all(self.inner.client.clone()).constrain(ns);
        self.informer_for(api, self.inner.options.clone())
    }

    /// The informer listing and watching through `api` with `options`; created on first use.
    pub fn informer_for<K>(&self, api: Api<K>, options: ListOptions) -> SharedIndexInformer<K>
    where
        K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    {
        let key = InformerKey {
            type_id: TypeId::of::<K>(),
            url: api.resource_url().to_string(),
            options,
        };
        let mut state = self.inner.state.lock();
        if let Some(existing) = state.informers.get(&key)
            && let Some(inf) = existing.as_any().downcast_ref::<SharedIndexInformer<K>>()
        {
            return inf.clone();
        }
        let source = ApiListWatch::with_options(api, &key.options);
        let informer = SharedIndexInformer::new(source, self.inner.resync);
        if state.started && !state.shut_down {
            informer.start();
        }
        state.informers.insert(key, Arc::new(informer.clone()));
        informer
    }

    /// Metadata-only informer for `K` in all namespaces (client-go `metadatainformer`), with
    /// the factory's default selectors. The API server sends type and metadata only
    /// (`PartialObjectMetadata`), so the cache holds `PartialObjectMeta<K>`: no spec, no
    /// status, a fraction of the memory and decode time of [`SharedInformerFactory::informer`]
    /// for consumers that need names, labels, annotations, owners or versions. A separate
    /// watch from the full informer of `K`.
    pub fn metadata_informer<K>(&self) -> SharedIndexInformer<PartialObjectMeta<K>>
    where
        K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    {
        self.informer::<PartialObjectMeta<K>>()
    }

    /// Metadata-only informer for `K` in namespace `ns` (see
    /// [`SharedInformerFactory::metadata_informer`]).
    pub fn namespaced_metadata_informer<K>(
        &self,
        ns: &str,
    ) -> SharedIndexInformer<PartialObjectMeta<K>>
    where
        K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
        K::Scope: NamespaceScope,
    {
        self.namespaced_informer::<PartialObjectMeta<K>>(ns)
    }

    /// Dynamic informer for the resource `ar` (any group/version/resource), in namespace `ns`
    /// or all namespaces, with the factory's default selectors.
    pub fn dynamic_informer(
        &self,
        ar: &ApiResource,
        ns: Option<&str>,
    ) -> SharedIndexInformer<DynamicObject> {
        self.dynamic_informer_with(ar, ns, self.inner.options.clone())
    }

    /// Dynamic informer with explicit selectors.
    pub fn dynamic_informer_with(
        &self,
        ar: &ApiResource,
        ns: Option<&str>,
        options: ListOptions,
    ) -> SharedIndexInformer<DynamicObject> {
        let api = match ns {
            Some(ns) => Api::namespaced_with(self.inner.client.clone(), ns, ar),
            None => Api::all_with(self.inner.client.clone(), ar),
        };
        self.informer_for(api, options)
    }

    /// A lister over the informer for `K` in all namespaces.
    pub fn lister<K>(&self) -> Lister<K>
    where
        K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    {
        self.informer::<K>().lister()
    }

    /// Starts every informer not started yet; informers requested later start at once.
    ///
    /// # Panics
    /// When called outside a tokio runtime.
    pub fn start(&self) {
        let mut state = self.inner.state.lock();
        if state.shut_down {
            return;
        }
        state.started = true;
        for inf in state.informers.values() {
            inf.start();
        }
    }

    /// Every informer of the factory, type-erased (e.g. to report which have not synced).
    pub fn informers(&self) -> Vec<Arc<dyn InformerHandle>> {
        self.inner
            .state
            .lock()
            .informers
            .values()
            .cloned()
            .collect()
    }

    /// Number of informers in the factory.
    pub fn len(&self) -> usize {
        self.inner.state.lock().informers.len()
    }

    /// Whether the factory has no informer.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Waits, at most `timeout` in total, until every informer has synced. Returns the sync
    /// state of each informer by key.
    pub async fn wait_for_cache_sync(&self, timeout: Duration) -> HashMap<InformerKey, bool> {
        let informers: Vec<(InformerKey, Arc<dyn InformerHandle>)> = self
            .inner
            .state
            .lock()
            .informers
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let deadline = tokio::time::Instant::now() + timeout;
        let mut out = HashMap::new();
        for (key, inf) in informers {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            let synced = inf.has_synced() || inf.wait_for_sync(left).await;
            out.insert(key, synced);
        }
        out
    }

    /// Whether every informer has synced.
    pub fn has_synced(&self) -> bool {
        self.inner
            .state
            .lock()
            .informers
            .values()
            .all(|i| i.has_synced())
    }

    /// Stops every informer and waits for their tasks to end.
    pub async fn shutdown(&self) {
        let informers: Vec<Arc<dyn InformerHandle>> = {
            let mut state = self.inner.state.lock();
            state.shut_down = true;
            state.informers.values().cloned().collect()
        };
        for inf in informers {
            inf.shutdown().await;
        }
    }
}

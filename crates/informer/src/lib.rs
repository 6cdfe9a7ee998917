//! client-go's `tools/cache` and `util/workqueue`, for Rust, on top of kube-rs.
//!
//! Controllers should read from a local cache kept up to date by a watch, not from the API
//! server. This crate gives you the pieces client-go users know, built on kube-rs: kube does
//! the HTTP, auth, config loading, typed and dynamic `Api`s, and the list+watch loop with
//! resume, 410 Gone relist, bookmarks and backoff ([`kube::runtime::watcher`]); this crate adds
//! the delta queue, the indexed cache, shared informers with many handlers, a factory that
//! de-duplicates watches, listers, rate-limited work queues, a worker pool and disk-cached
//! discovery.
//!
//! # Names, client-go to here
//!
//! | client-go | sluice-informer | module |
//! |---|---|---|
//! | `cache.ListerWatcher` | [`ListWatch`] ([`ApiListWatch`] for `Api<K>` and `Api<DynamicObject>`) | [`list_watch`] |
//! | `cache.Reflector` | [`Reflector`] | [`reflector`] |
//! | `cache.DeltaFIFO`, `Delta`, `DeltaType` | [`DeltaFifo`], [`Delta`], [`DeltaType`] | [`delta_fifo`] |
//! | `cache.DeletedFinalStateUnknown` | [`DeletedFinalStateUnknown`] (inside [`DeletedObject::Tombstone`]) | [`delta_fifo`] |
//! | `cache.ThreadSafeStore` / `cache.Indexer` | [`Store`] (read-only, what consumers get), [`StoreWriter`] (the informer's) | [`store`] |
//! | `cache.MetaNamespaceKeyFunc` / `SplitMetaNamespaceKey` | [`object_key`] / [`split_key`] | [`store`] |
//! | `cache.MetaNamespaceIndexFunc`, `NamespaceIndex` | [`namespace_index_fn`], [`NAMESPACE_INDEX`] | [`store`] |
//! | `cache.SharedIndexInformer` | [`SharedIndexInformer`] | [`informer`] |
//! | `cache.TransformFunc` (`SetTransform`) | [`TransformFn`] ([`SharedIndexInformer::set_transform`]) | [`transform`] |
//! | `cache.ResourceEventHandler(Funcs)` | [`ResourceEventHandler`], [`HandlerFuncs`] | [`informer`] |
//! | `cache.ResourceEventHandlerRegistration` | [`HandlerRegistration`] | [`informer`] |
//! | `cache.SharedInformer` as an interface, `cache.WaitForCacheSync` | [`InformerHandle`] (`dyn`, any `K`), [`wait_for_cache_sync`] | [`handle`] |
//! | `informers.SharedInformerFactory` | [`SharedInformerFactory`] | [`factory`] |
//! | `dynamicinformer.DynamicSharedInformerFactory` | [`SharedInformerFactory::dynamic_informer`] | [`factory`] |
//! | `metadatainformer` (`PartialObjectMetadata`) | [`SharedInformerFactory::metadata_informer`] (an informer of `PartialObjectMeta<K>`) | [`factory`] |
//! | `listers/core/v1.PodLister` etc. | [`Lister<K>`](Lister) | [`lister`] |
//! | `labels.Parse` | [`parse_selector`] (to kube's `Selector`) | [`lister`] |
//! | `workqueue.Type` | [`workqueue::WorkQueue`] | [`workqueue::queue`] |
//! | `workqueue.DelayingInterface` | [`workqueue::DelayingQueue`] | [`workqueue::delaying`] |
//! | `workqueue.RateLimitingInterface` | [`workqueue::RateLimitingQueue`] | [`workqueue::rate_limiting`] |
//! | `workqueue.DefaultControllerRateLimiter` etc. | [`workqueue::default_controller_rate_limiter`], [`workqueue::RateLimiter`] | [`workqueue::rate_limiter`] |
//! | the sample controller's worker loop | [`Controller`] | [`controller`] |
//! | `disk.CachedDiscoveryClient` | [`CachedDiscovery`] | [`discovery`] |
//! | `clientcmd.BuildConfigFromFlags` + `kubernetes.NewForConfig` | [`client::client_from`] | [`client`] |
//! | `tools/leaderelection` (`LeaderElector`, `resourcelock.LeaseLock`) | [`leader_election::LeaderElector`], [`leader_election::LeaseLock`] | [`leader_election`] |
//!
//! # How the pieces fit
//!
//! ```text
//!  API server ──list+watch──> ListWatch ──events──> Reflector ──deltas──> DeltaFifo
//!                           (kube watcher)                                   │ pop
//!                                                                            v
//!   Lister <── Store (indexed, Arc<K>) <── SharedIndexInformer ──> handler 1 ──> WorkQueue ──> Controller workers
//!                                                              └─> handler 2 ...
//! ```
//!
//! Objects are held once, as `Arc<K>`, shared by the store, every handler notification and
//! every lister result. The informer alone writes its store ([`StoreWriter`]); what it hands
//! out ([`SharedIndexInformer::store`], [`Lister`]) is a read-only [`Store`].
//!
//! # A first controller
//!
//! ```no_run
//! use std::{sync::Arc, time::Duration};
//! use k8s_openapi::api::core::v1::Pod;
//! use sluice_informer::{
//!     Controller, HandlerFuncs, SharedInformerFactory, object_key, workqueue::RateLimitingQueue,
//! };
//!
//! # async fn demo() -> anyhow::Result<()> {
//! let client = kube::Client::try_default().await?;
//! let factory = SharedInformerFactory::new(client);
//! let pods = factory.informer::<Pod>();
//! let queue = RateLimitingQueue::<String>::with_default_rate_limiter();
//! let q = queue.clone();
//! let enqueue = move |p: &Pod| { if let Ok(k) = object_key(p) { q.add(k) } };
//! let (e1, e2, e3) = (enqueue.clone(), enqueue.clone(), enqueue);
//! pods.add_event_handler(
//!     HandlerFuncs::new()
//!         .on_add(move |p, _| e1(&p))
//!         .on_update(move |_, p| e2(&p))
//!         .on_delete(move |d| e3(d.object())),
//! );
//! factory.start();
//! factory.wait_for_cache_sync(Duration::from_secs(60)).await;
//! let lister = pods.lister();
//! Controller::new(queue)
//!     .workers(2)
//!     .run(
//!         move |key: String| {
//!             let lister = lister.clone();
//!             async move {
//!                 let (ns, name) = sluice_informer::split_key(&key);
//!                 match lister.get(ns.unwrap_or(""), name) {
//!                     Some(pod) => println!("sync {}", pod.metadata.name.as_deref().unwrap_or("")),
//!                     None => println!("{key} is gone"),
//!                 }
//!                 Ok::<(), std::convert::Infallible>(())
//!             }
//!         },
//!         async { let _ = tokio::signal::ctrl_c().await; },
//!     )
//!     .await;
//! factory.shutdown().await;
//! # Ok(()) }
//! ```
//!
//! A program with informers of several types holds them as `Arc<dyn InformerHandle>` to
//! start, wait for and stop them together ([`handle`]).
//!
//! Replicas of a controller elect the one that writes with [`leader_election`] (a Lease,
//! client-go's semantics); its flags come ready for clap with the `clap` feature.
//!
//! See `examples/` for runnable programs (`sample_controller`, `factory_lister`, `indexer`,
//! `discovery`, `leader_election`, ...).

#![forbid(unsafe_code)]

pub mod client;
pub mod controller;
pub mod delta_fifo;
pub mod discovery;
pub mod factory;
pub mod handle;
pub mod informer;
pub mod leader_election;
pub mod list_watch;
pub mod lister;
pub mod reflector;
pub mod store;
pub mod transform;
pub mod workqueue;

pub use controller::{Controller, ControllerStats, Outcome};
pub use delta_fifo::{
    DeletedFinalStateUnknown, DeletedObject, Delta, DeltaFifo, DeltaObject, DeltaType,
};
pub use discovery::{CachedDiscovery, DiscoveredResource, DiscoveryError, DiscoveryResult};
pub use factory::{InformerKey, SharedInformerFactory};
pub use handle::{InformerHandle, ResourceInfo, wait_for_cache_sync};
pub use informer::{HandlerFuncs, HandlerRegistration, ResourceEventHandler, SharedIndexInformer};
pub use list_watch::{
    ApiListWatch, ChannelListWatch, Event, ListOptions, ListWatch, ListWatchError,
};
pub use lister::{Lister, SelectorError, matches_labels, parse_selector};
pub use reflector::{Reflector, ReflectorStats};
pub use store::{
    IndexFn, NAMESPACE_INDEX, Store, StoreError, StoreWriter, make_key, namespace_index_fn,
    object_key, split_key,
};
pub use transform::{
    AlreadyStarted, LAST_APPLIED_ANNOTATION, TransformFn, strip_last_applied, strip_managed_fields,
};

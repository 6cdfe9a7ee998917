//! Informers of different types behind one trait object (what client-go gets from
//! `cache.SharedInformer` being an interface).
//!
//! A program watching several kinds wants to start, wait for, check and stop them together
//! without naming each type: [`InformerHandle`] is implemented by every
//! [`SharedIndexInformer<K>`], so a `Vec<Arc<dyn InformerHandle>>` holds Ingresses, Services
//! and Secrets side by side. [`wait_for_cache_sync`] is client-go's `cache.WaitForCacheSync`
//! over such a set.
//!
//! ```
//! use std::{sync::Arc, time::Duration};
//! use k8s_openapi::api::core::v1::{ConfigMap, Secret};
//! use sluice_informer::{ChannelListWatch, InformerHandle, SharedIndexInformer, wait_for_cache_sync};
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! let (maps, _map_events) = ChannelListWatch::<ConfigMap>::new();
//! let (secrets, _secret_events) = ChannelListWatch::<Secret>::new();
//! let set: Vec<Arc<dyn InformerHandle>> = vec![
//!     Arc::new(SharedIndexInformer::new(maps, None)),
//!     Arc::new(SharedIndexInformer::new(secrets, None)),
//! ];
//! set.iter().for_each(|i| i.start());
//! // Nothing was listed, so nothing has synced.
//! assert!(!wait_for_cache_sync(&set, Duration::from_millis(10)).await);
//! for i in &set {
//!     println!("{}: {} cached", i.resource(), i.len());
//!     i.shutdown().await;
//! }
//! # }
//! ```

use std::{any::Any, fmt, sync::Arc, time::Duration};

use futures::future::BoxFuture;
use kube::Resource;

use crate::informer::{HandlerFuncs, HandlerRegistration, SharedIndexInformer};

/// What an informer watches, as far as its source tells: the group, version and plural of
/// an API server URL (`/api/v1/namespaces/x/pods`, `/apis/networking.k8s.io/v1/ingresses`),
/// and always the source's own description (URL and selectors, or a file source's name).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResourceInfo {
    /// The Rust type of the cached objects (`std::any::type_name`).
    pub type_name: &'static str,
    /// API group; empty for the core group and for sources that are not an API server.
    pub group: String,
    /// API version (`v1`); empty for sources that are not an API server.
    pub version: String,
    /// Resource plural (`ingresses`); empty for sources that are not an API server.
    pub plural: String,
    /// The namespace watched, if the URL names one.
    pub namespace: Option<String>,
    /// The source's description ([`crate::ListWatch::describe`]).
    pub source: String,
}

impl ResourceInfo {
    /// Reads group, version, plural and namespace from a source description that starts
    /// with an API server resource URL; other descriptions leave them empty.
    pub fn from_description(type_name: &'static str, source: &str) -> Self {
        let mut info = ResourceInfo {
            type_name,
            group: String::new(),
            version: String::new(),
            plural: String::new(),
            namespace: None,
            source: source.to_string(),
        };
        let url = source.split_whitespace().next().unwrap_or("");
        let parts: Vec<&str> = url.trim_start_matches('/').split('/').collect();
        let rest = match parts.as_slice() {
            ["api", version, rest @ ..] => {
                info.version = (*version).to_string();
                rest
            }
            ["apis", group, version, rest @ ..] => {
                info.group = (*group).to_string();
                info.version = (*version).to_string();
                rest
            }
            _ => return info,
        };
        match rest {
            ["namespaces", ns, plural, ..] => {
                info.namespace = Some((*ns).to_string());
                info.plural = (*plural).to_string();
            }
            [plural, ..] => info.plural = (*plural).to_string(),
            [] => {}
        }
        info
    }

    /// `group/version/plural` (`v1/pods` for the core group), or the source's description
    /// when it is not an API server URL.
    pub fn gvr(&self) -> String {
        match (self.plural.is_empty(), self.group.is_empty()) {
            (true, _) => self.source.clone(),
            (false, true) => format!("{}/{}", self.version, self.plural),
            (false, false) => format!("{}/{}/{}", self.group, self.version, self.plural),
        }
    }
}

impl fmt::Display for ResourceInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.gvr())?;
        if let Some(ns) = &self.namespace {
            write!(f, " in {ns}")?;
        }
        Ok(())
    }
}

/// A [`SharedIndexInformer`] of any object type, as a trait object: everything that does not
/// need to know `K`. Downcast with [`InformerHandle::as_any`] to get the typed informer back.
pub trait InformerHandle: Send + Sync + 'static {
    /// Starts listing, watching and dispatching (idempotent; see
    /// [`SharedIndexInformer::start`]).
    fn start(&self);

    /// Starts the informer and waits until it is shut down.
    fn run(&self) -> BoxFuture<'_, ()>;

    /// Whether the first list has been processed into the store.
    fn has_synced(&self) -> bool;

    /// Waits until [`InformerHandle::has_synced`], at most `timeout`; returns whether it did.
    fn wait_for_sync(&self, timeout: Duration) -> BoxFuture<'_, bool>;

    /// Stops watching and dispatching.
    fn shutdown(&self) -> BoxFuture<'_, ()>;

    /// What this informer watches.
    fn resource(&self) -> ResourceInfo;

    /// Number of objects in the cache.
    fn len(&self) -> usize;

    /// Whether the cache is empty.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Calls `changed` after every add, update or delete, on a handler thread of its own
    /// (for consumers that only need to know that something changed, e.g. to rebuild).
    fn on_change(&self, changed: Arc<dyn Fn() + Send + Sync>) -> HandlerRegistration;

    /// The typed informer, for `downcast_ref::<SharedIndexInformer<K>>()`.
    fn as_any(&self) -> &dyn Any;
}

impl<K: Resource + Send + Sync + 'static> InformerHandle for SharedIndexInformer<K> {
    fn start(&self) {
        SharedIndexInformer::start(self);
    }

    fn run(&self) -> BoxFuture<'_, ()> {
        Box::pin(SharedIndexInformer::run(self))
    }

    fn has_synced(&self) -> bool {
        SharedIndexInformer::has_synced(self)
    }

    fn wait_for_sync(&self, timeout: Duration) -> BoxFuture<'_, bool> {
        Box::pin(SharedIndexInformer::wait_for_sync(self, timeout))
    }

    fn shutdown(&self) -> BoxFuture<'_, ()> {
        Box::pin(SharedIndexInformer::shutdown(self))
    }

    fn resource(&self) -> ResourceInfo {
        ResourceInfo::from_description(std::any::type_name::<K>(), self.describe())
    }

    fn len(&self) -> usize {
        self.store().len()
    }

    fn on_change(&self, changed: Arc<dyn Fn() + Send + Sync>) -> HandlerRegistration {
        let (a, u, d) = (changed.clone(), changed.clone(), changed);
        self.add_event_handler(
            HandlerFuncs::new()
                .on_add(move |_, _| a())
                .on_update(move |_, _| u())
                .on_delete(move |_| d()),
        )
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// A shared handle is a handle: `Vec<Arc<dyn InformerHandle>>` works wherever handles do.
impl<H: InformerHandle + ?Sized> InformerHandle for Arc<H> {
    fn start(&self) {
        (**self).start();
    }

    fn run(&self) -> BoxFuture<'_, ()> {
        (**self).run()
    }

    fn has_synced(&self) -> bool {
        (**self).has_synced()
    }

    fn wait_for_sync(&self, timeout: Duration) -> BoxFuture<'_, bool> {
        (**self).wait_for_sync(timeout)
    }

    fn shutdown(&self) -> BoxFuture<'_, ()> {
        (**self).shutdown()
    }

    fn resource(&self) -> ResourceInfo {
        (**self).resource()
    }

    fn len(&self) -> usize {
        (**self).len()
    }

    fn on_change(&self, changed: Arc<dyn Fn() + Send + Sync>) -> HandlerRegistration {
        (**self).on_change(changed)
    }

    fn as_any(&self) -> &dyn Any {
        (**self).as_any()
    }
}

/// Waits until every informer of `informers` has synced, at most `timeout` in total
/// (client-go `cache.WaitForCacheSync`). Returns whether all did.
pub async fn wait_for_cache_sync<'a, I, H>(informers: I, timeout: Duration) -> bool
where
    I: IntoIterator<Item = &'a H>,
    H: InformerHandle + ?Sized + 'a,
{
    let deadline = tokio::time::Instant::now() + timeout;
    let mut all = true;
    for informer in informers {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        // Keep waiting for the others: the caller may log which did not sync.
        all &= informer.has_synced() || informer.wait_for_sync(left).await;
    }
    all
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{ChannelListWatch, Event};
    use k8s_openapi::api::core::v1::{ConfigMap, Secret};
    use kube::api::ObjectMeta;

    #[test]
    fn resource_from_urls() {
        let core = ResourceInfo::from_description("Pod", "/api/v1/namespaces/team/pods labels=a");
        assert_eq!(
            (
                core.group.as_str(),
                core.version.as_str(),
                core.plural.as_str()
            ),
            ("", "v1", "pods")
        );
        assert_eq!(core.namespace.as_deref(), Some("team"));
        assert_eq!(core.to_string(), "v1/pods in team");
        let grouped =
            ResourceInfo::from_description("Ingress", "/apis/networking.k8s.io/v1/ingresses");
        assert_eq!(grouped.gvr(), "networking.k8s.io/v1/ingresses");
        assert_eq!(grouped.namespace, None);
        let other = ResourceInfo::from_description("Secret", "manifests in ./dir (Secret)");
        assert_eq!(other.plural, "");
        assert_eq!(other.to_string(), "manifests in ./dir (Secret)");
    }

    fn named<K: Resource<DynamicType = ()> + Default>(name: &str) -> Arc<K> {
        let mut obj = K::default();
        *obj.meta_mut() = ObjectMeta {
            name: Some(name.into()),
            namespace: Some("ns".into()),
            resource_version: Some("1".into()),
            ..Default::default()
        };
        Arc::new(obj)
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_set_of_different_types_starts_syncs_notifies_and_stops_together() {
        let (maps, map_tx) = ChannelListWatch::<ConfigMap>::new();
        let (secrets, secret_tx) = ChannelListWatch::<Secret>::new();
        let maps = SharedIndexInformer::new(maps, None);
        let set: Vec<Arc<dyn InformerHandle>> = vec![
            Arc::new(maps.clone()),
            Arc::new(SharedIndexInformer::new(secrets, None)),
        ];
        let changes = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        for i in &set {
            let c = changes.clone();
            i.on_change(Arc::new(move || {
                c.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            }));
            i.start();
        }
        for ev in [
            Event::Init,
            Event::InitApply((*named::<ConfigMap>("a")).clone()),
        ] {
            map_tx.send(Ok(ev)).unwrap();
        }
        map_tx.send(Ok(Event::InitDone)).unwrap();
        // One of two listed: the set has not synced.
        assert!(!wait_for_cache_sync(&set, Duration::from_millis(300)).await);
        assert!(set[0].has_synced() && !set[1].has_synced());
        for ev in [
            Event::Init,
            Event::InitApply((*named::<Secret>("s1")).clone()),
            Event::InitApply((*named::<Secret>("s2")).clone()),
            Event::InitDone,
        ] {
            secret_tx.send(Ok(ev)).unwrap();
        }
        assert!(wait_for_cache_sync(&set, Duration::from_secs(5)).await);
        assert_eq!(set.iter().map(|i| i.len()).collect::<Vec<_>>(), vec![1, 2]);
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        while changes.load(std::sync::atomic::Ordering::SeqCst) < 3
            && tokio::time::Instant::now() < deadline
        {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(changes.load(std::sync::atomic::Ordering::SeqCst), 3);
        // The typed informer is one downcast away, and it is the same informer.
        let typed = set[0]
            .as_any()
            .downcast_ref::<SharedIndexInformer<ConfigMap>>()
            .expect("a ConfigMap informer");
        assert!(typed.store().get_by_key("ns/a").is_some());
        assert!(
            set[1]
                .as_any()
                .downcast_ref::<SharedIndexInformer<ConfigMap>>()
                .is_none()
        );
        assert!(set[0].resource().type_name.ends_with("ConfigMap"));
        for i in &set {
            i.shutdown().await;
        }
        // Stopped: `run` returns at once instead of waiting forever.
        tokio::time::timeout(Duration::from_secs(5), set[1].run())
            .await
            .expect("run of a shut-down informer returns");
        assert_eq!(maps.store().len(), 1);
    }
}

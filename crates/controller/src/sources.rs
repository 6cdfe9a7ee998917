//! The five kinds of object an Ingress controller reads, as informers with local stores,
//! from a cluster or from a directory of manifests.

use crate::manifest_dir::{Kinds, ManifestDir};
use k8s_openapi::api::core::v1::{Endpoints, Secret, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::networking::v1::{Ingress, IngressClass};
use kube::Api;
use sluice_informer::{HandlerFuncs, ListOptions, SharedIndexInformer, SharedInformerFactory};
use sluice_routing::Inputs;
use std::sync::Arc;
use std::time::Duration;

/// Where endpoints come from: EndpointSlices (discovery.k8s.io/v1), or core/v1 Endpoints on
/// clusters that do not serve EndpointSlice v1 (Kubernetes before 1.21).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EndpointSource {
    /// discovery.k8s.io/v1 EndpointSlice.
    Slices,
    /// core/v1 Endpoints.
    Endpoints,
}

/// Informers for Ingress, IngressClass, Service, endpoints and TLS Secrets.
#[derive(Clone)]
pub struct IngressInformers {
    /// networking.k8s.io/v1 Ingress.
    pub ingresses: SharedIndexInformer<Ingress>,
    /// networking.k8s.io/v1 IngressClass (cluster-scoped).
    pub classes: SharedIndexInformer<IngressClass>,
    /// core/v1 Service.
    pub services: SharedIndexInformer<Service>,
    /// core/v1 Endpoints, when that is the endpoint source.
    pub endpoints: Option<SharedIndexInformer<Endpoints>>,
    /// EndpointSlices, when that is the endpoint source.
    pub endpoint_slices: Option<SharedIndexInformer<EndpointSlice>>,
    /// Secrets of type kubernetes.io/tls.
    pub secrets: SharedIndexInformer<Secret>,
}

/// The Kinds a manifest directory for `sluice serve` may hold.
pub fn manifest_kinds() -> Kinds {
    Kinds::default()
        .with::<Ingress>()
        .with::<IngressClass>()
        .with::<Service>()
        .with::<Endpoints>()
        .with::<EndpointSlice>()
        .with::<Secret>()
}

impl IngressInformers {
    /// Informers over a directory of manifests (standalone mode).
    pub fn from_manifests(dir: &ManifestDir) -> Self {
        IngressInformers {
            ingresses: SharedIndexInformer::new(dir.source::<Ingress>(), None),
            classes: SharedIndexInformer::new(dir.source::<IngressClass>(), None),
            services: SharedIndexInformer::new(dir.source::<Service>(), None),
            endpoints: Some(SharedIndexInformer::new(dir.source::<Endpoints>(), None)),
            endpoint_slices: Some(SharedIndexInformer::new(
                dir.source::<EndpointSlice>(),
                None,
            )),
            secrets: SharedIndexInformer::new(dir.source::<Secret>(), None),
        }
    }

    /// Informers from `factory`'s cluster, in `namespace` or everywhere. Secrets are narrowed
    /// to `type=kubernetes.io/tls` by a field selector, so others never reach this process.
    pub fn from_cluster(
        factory: &SharedInformerFactory,
        namespace: Option<&str>,
        endpoints: EndpointSource,
    ) -> Self {
        let client = factory.client().clone();
        fn api<K>(client: &kube::Client, ns: Option<&str>) -> Api<K>
        where
            K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>,
        {
            match ns {
                Some(ns) => Api::namespaced(client.clone(), ns),
                None => Api::all(client.clone()),
            }
        }
        let all = ListOptions::default();
        IngressInformers {
            ingresses: factory.informer_for(api(&client, namespace), all.clone()),
            classes: factory.informer_for(Api::all(client.clone()), all.clone()),
            services: factory.informer_for(api(&client, namespace), all.clone()),
            endpoints: (endpoints == EndpointSource::Endpoints)
                .then(|| factory.informer_for(api(&client, namespace), all.clone())),
            endpoint_slices: (endpoints == EndpointSource::Slices)
                .then(|| factory.informer_for(api(&client, namespace), all.clone())),
            secrets: factory.informer_for(
                api(&client, namespace),
                ListOptions::default().fields("type=kubernetes.io/tls"),
            ),
        }
    }

    /// Calls `changed` after every add, update or delete of any watched object.
    pub fn on_change(&self, changed: impl Fn() + Send + Sync + 'static) {
        let changed = Arc::new(changed);
        fn funcs<K: Send + Sync + 'static>(f: &Arc<dyn Fn() + Send + Sync>) -> HandlerFuncs<K> {
            let (a, u, d) = (f.clone(), f.clone(), f.clone());
            HandlerFuncs::new()
                .on_add(move |_, _| a())
                .on_update(move |_, _| u())
                .on_delete(move |_| d())
        }
        let f: Arc<dyn Fn() + Send + Sync> = changed;
        self.ingresses.add_event_handler(funcs(&f));
        self.classes.add_event_handler(funcs(&f));
        self.services.add_event_handler(funcs(&f));
        if let Some(i) = &self.endpoints {
            i.add_event_handler(funcs(&f));
        }
        if let Some(i) = &self.endpoint_slices {
            i.add_event_handler(funcs(&f));
        }
        self.secrets.add_event_handler(funcs(&f));
    }

    /// Starts every informer that is not running yet.
    pub fn start(&self) {
        self.ingresses.start();
        self.classes.start();
        self.services.start();
        if let Some(i) = &self.endpoints {
            i.start();
        }
        if let Some(i) = &self.endpoint_slices {
            i.start();
        }
        self.secrets.start();
    }

    /// Waits until every informer has synced; false on timeout.
    pub async fn wait_for_sync(&self, timeout: Duration) -> bool {
        let mut ok = self.ingresses.wait_for_sync(timeout).await
            && self.classes.wait_for_sync(timeout).await
            && self.services.wait_for_sync(timeout).await
            && self.secrets.wait_for_sync(timeout).await;
        if let Some(i) = &self.endpoints {
            ok = ok && i.wait_for_sync(timeout).await;
        }
        if let Some(i) = &self.endpoint_slices {
            ok = ok && i.wait_for_sync(timeout).await;
        }
        ok
    }

    /// True when every informer has synced.
    pub fn has_synced(&self) -> bool {
        self.ingresses.has_synced()
            && self.classes.has_synced()
            && self.services.has_synced()
            && self.secrets.has_synced()
            && self.endpoints.as_ref().is_none_or(|i| i.has_synced())
            && self.endpoint_slices.as_ref().is_none_or(|i| i.has_synced())
    }

    /// Stops every informer.
    pub async fn shutdown(&self) {
        self.ingresses.shutdown().await;
        self.classes.shutdown().await;
        self.services.shutdown().await;
        if let Some(i) = &self.endpoints {
            i.shutdown().await;
        }
        if let Some(i) = &self.endpoint_slices {
            i.shutdown().await;
        }
        self.secrets.shutdown().await;
    }

    /// The current content of every store, as the route compiler's input. Objects are shared
    /// (`Arc`), not copied.
    pub fn inputs(&self) -> Inputs {
        Inputs {
            ingresses: self.ingresses.store().list(),
            ingress_classes: self.classes.store().list(),
            services: self.services.store().list(),
            endpoints: self
                .endpoints
                .as_ref()
                .map(|i| i.store().list())
                .unwrap_or_default(),
            endpoint_slices: self
                .endpoint_slices
                .as_ref()
                .map(|i| i.store().list())
                .unwrap_or_default(),
            secrets: self.secrets.store().list(),
        }
    }
}

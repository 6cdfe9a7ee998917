//! The kinds of object the controller reads, as informers with local stores, from a
//! cluster or from a directory of manifests: Ingress, IngressClass, Service, endpoints and
//! TLS Secrets, and, where the Gateway API CRDs are served, GatewayClass, Gateway,
//! HTTPRoute, ReferenceGrant, Namespace and ConfigMap (CA certificates).

use crate::manifest_dir::{Kinds, ManifestDir};
use crate::projection;
use crate::status_only::{ChangeCallbacks, watch_all, watch_status_aware};
use k8s_openapi::api::core::v1::{ConfigMap, Endpoints, Namespace, Secret, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::networking::v1::{Ingress, IngressClass};
use kube::Api;
use sluice_informer::{
    InformerHandle, ListOptions, SharedIndexInformer, SharedInformerFactory, strip_last_applied,
    wait_for_cache_sync,
};
use sluice_routing::gateway::{
    BackendTlsPolicy, Gateway, GatewayClass, GrpcRoute, HttpRoute, ListenerSet, ReferenceGrant,
    TcpRoute, TlsRoute, UdpRoute, compact,
};
use sluice_routing::{Inputs, ObjectList, ObjectRef};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

/// Informers for Ingress, IngressClass, Service, endpoints and TLS Secrets: typed for the
/// readers of each kind, and as one set of [`InformerHandle`]s for what concerns them all
/// (start, sync, change notification, shutdown).
#[derive(Clone)]
pub struct IngressInformers {
    /// networking.k8s.io/v1 Ingress.
    pub ingresses: SharedIndexInformer<Ingress>,
    /// networking.k8s.io/v1 IngressClass (cluster-scoped).
    pub classes: SharedIndexInformer<IngressClass>,
    /// core/v1 Service.
    pub services: SharedIndexInformer<Service>,
    /// core/v1 Endpoints: read from manifest directories only (a cluster's are EndpointSlices).
    pub endpoints: Option<SharedIndexInformer<Endpoints>>,
    /// discovery.k8s.io/v1 EndpointSlices: always from a cluster, from manifests when given.
    pub endpoint_slices: Option<SharedIndexInformer<EndpointSlice>>,
    /// Secrets of type kubernetes.io/tls (every Secret, from manifests).
    pub secrets: SharedIndexInformer<Secret>,
    /// From a cluster, Secrets of type Opaque too: the users of basic authentication
    /// (`auth-secret`), which ingress-nginx's docs create with `kubectl create secret
    /// generic`.
    pub opaque_secrets: Option<SharedIndexInformer<Secret>>,
    /// ConfigMaps with all their data, for the annotations that name one
    /// (`auth-proxy-set-headers`, `custom-headers`); `kube-root-ca.crt`, in every
    /// namespace and never such a ConfigMap, is left out.
    pub annotation_config_maps: Option<SharedIndexInformer<ConfigMap>>,
    /// ingress-nginx's ConfigMap (`--configmap`) and its `namespace/name`.
    pub nginx_config: Option<(SharedIndexInformer<ConfigMap>, String)>,
    /// Gateway API kinds once watched: at start when the cluster serves them (always from
    /// manifests), or later through [`IngressInformers::add_gateway`]. Shared by clones.
    gateway: Arc<OnceLock<GatewayInformers>>,
    /// Every informer above but the Ingress informer and the Gateway API's, type-erased.
    all: Vec<Arc<dyn InformerHandle>>,
    /// The callbacks of [`IngressInformers::on_change`], for informers added later.
    changed: Arc<Mutex<Vec<ChangeCallbacks>>>,
}

/// Informers for the Gateway API kinds, and Namespaces (for `allowedRoutes` selectors).
#[derive(Clone)]
pub struct GatewayInformers {
    /// gateway.networking.k8s.io/v1 GatewayClass (cluster-scoped).
    pub classes: SharedIndexInformer<GatewayClass>,
    /// gateway.networking.k8s.io/v1 Gateway.
    pub gateways: SharedIndexInformer<Gateway>,
    /// gateway.networking.k8s.io/v1 HTTPRoute.
    pub routes: SharedIndexInformer<HttpRoute>,
    /// gateway.networking.k8s.io/v1 GRPCRoute.
    pub grpc_routes: SharedIndexInformer<GrpcRoute>,
    /// gateway.networking.k8s.io/v1 TCPRoute, where the cluster serves it.
    pub tcp_routes: Option<SharedIndexInformer<TcpRoute>>,
    /// gateway.networking.k8s.io/v1 TLSRoute, where the cluster serves it.
    pub tls_routes: Option<SharedIndexInformer<TlsRoute>>,
    /// gateway.networking.k8s.io/v1 UDPRoute, where the cluster serves it.
    pub udp_routes: Option<SharedIndexInformer<UdpRoute>>,
    /// gateway.networking.k8s.io/v1 ListenerSet, where the cluster serves it.
    pub listener_sets: Option<SharedIndexInformer<ListenerSet>>,
    /// gateway.networking.k8s.io/v1 BackendTLSPolicy, where the cluster serves it.
    pub backend_tls_policies: Option<SharedIndexInformer<BackendTlsPolicy>>,
    /// gateway.networking.k8s.io/v1beta1 ReferenceGrant.
    pub grants: SharedIndexInformer<ReferenceGrant>,
    /// core/v1 Namespace (cluster-scoped; only labels are read).
    pub namespaces: SharedIndexInformer<Namespace>,
    /// core/v1 ConfigMap, `ca.crt` only (`caCertificateRefs`).
    pub config_maps: SharedIndexInformer<ConfigMap>,
}

/// The Gateway API route kinds a cluster may lack: v1 TCPRoute, TLSRoute and UDPRoute are in the
/// standard channel since Gateway API v1.6; older CRDs have them in the experimental
/// channel only, at other versions. Without them, the other kinds are watched alone.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OptionalKinds {
    /// v1 TCPRoute is served.
    pub tcp_route: bool,
    /// v1 TLSRoute is served.
    pub tls_route: bool,
    /// v1 UDPRoute is served.
    pub udp_route: bool,
    /// v1 BackendTLSPolicy is served (standard channel since Gateway API v1.4).
    pub backend_tls_policy: bool,
    /// v1 ListenerSet is served (standard channel since Gateway API v1.5).
    pub listener_set: bool,
}

/// The CA bundle ConfigMap Kubernetes puts in every namespace: never named by an
/// annotation, so not cached for them.
const ROOT_CA_CONFIG_MAP: &str = "kube-root-ca.crt";

/// `Api<K>` in `ns`, or in every namespace.
fn api<K>(client: &kube::Client, ns: Option<&str>) -> Api<K>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>,
{
    match ns {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    }
}

impl GatewayInformers {
    /// The Gateway API informers of `factory`'s cluster, in `namespace` or everywhere.
    fn from_cluster(
        factory: &SharedInformerFactory,
        namespace: Option<&str>,
        optional: OptionalKinds,
    ) -> Self {
        let client = factory.client();
        let all = ListOptions::default();
        GatewayInformers {
            tcp_routes: optional
                .tcp_route
                .then(|| trimmed(factory.informer_for(api(client, namespace), all.clone()))),
            tls_routes: optional
                .tls_route
                .then(|| trimmed(factory.informer_for(api(client, namespace), all.clone()))),
            udp_routes: optional
                .udp_route
                .then(|| trimmed(factory.informer_for(api(client, namespace), all.clone()))),
            backend_tls_policies: optional
                .backend_tls_policy
                .then(|| trimmed(factory.informer_for(api(client, namespace), all.clone()))),
            listener_sets: optional
                .listener_set
                .then(|| trimmed(factory.informer_for(api(client, namespace), all.clone()))),
            classes: trimmed(factory.informer_for(Api::all(client.clone()), all.clone())),
            gateways: trimmed(factory.informer_for(api(client, namespace), all.clone())),
            routes: projected(
                factory.informer_for(api(client, namespace), all.clone()),
                |route| compact::http_route(strip_last_applied(route)),
            ),
            grpc_routes: projected(
                factory.informer_for(api(client, namespace), all.clone()),
                |route| compact::grpc_route(strip_last_applied(route)),
            ),
            grants: trimmed(factory.informer_for(api(client, namespace), all.clone())),
            config_maps: projected(
                factory.informer_for(api(client, namespace), all.clone()),
                projection::config_map,
            ),
            namespaces: trimmed(factory.informer_for(Api::all(client.clone()), all)),
        }
    }

    /// Registers `callbacks` on every informer: status-aware on the kinds whose status
    /// sluice writes.
    fn register(&self, callbacks: &ChangeCallbacks) {
        watch_status_aware(&self.classes, callbacks);
        watch_status_aware(&self.gateways, callbacks);
        watch_status_aware(&self.routes, callbacks);
        watch_status_aware(&self.grpc_routes, callbacks);
        if let Some(i) = &self.tcp_routes {
            watch_status_aware(i, callbacks);
        }
        if let Some(i) = &self.tls_routes {
            watch_status_aware(i, callbacks);
        }
        if let Some(i) = &self.udp_routes {
            watch_status_aware(i, callbacks);
        }
        if let Some(i) = &self.listener_sets {
            watch_status_aware(i, callbacks);
        }
        if let Some(i) = &self.backend_tls_policies {
            watch_status_aware(i, callbacks);
        }
        watch_all(&self.grants, callbacks);
        watch_all(&self.namespaces, callbacks);
        watch_all(&self.config_maps, callbacks);
    }

    fn handles(&self) -> Vec<Arc<dyn InformerHandle>> {
        let mut all: Vec<Arc<dyn InformerHandle>> = vec![
            Arc::new(self.classes.clone()),
            Arc::new(self.gateways.clone()),
            Arc::new(self.routes.clone()),
            Arc::new(self.grpc_routes.clone()),
            Arc::new(self.grants.clone()),
            Arc::new(self.namespaces.clone()),
            Arc::new(self.config_maps.clone()),
        ];
        if let Some(i) = &self.tcp_routes {
            all.push(Arc::new(i.clone()));
        }
        if let Some(i) = &self.tls_routes {
            all.push(Arc::new(i.clone()));
        }
        if let Some(i) = &self.udp_routes {
            all.push(Arc::new(i.clone()));
        }
        if let Some(i) = &self.backend_tls_policies {
            all.push(Arc::new(i.clone()));
        }
        if let Some(i) = &self.listener_sets {
            all.push(Arc::new(i.clone()));
        }
        all
    }
}

/// What `informer` holds, as its store lists it: in shared chunks, kept in step with its
/// writes (listing a kind for every change copies its chunks' pointers, not a reference
/// count per object, and shares all but the chunks written since); empty without an
/// informer.
fn listed<K>(informer: Option<&SharedIndexInformer<K>>) -> ObjectList<K>
where
    K: kube::Resource + Send + Sync + 'static,
{
    informer.map_or_else(ObjectList::default, |i| i.store().list_shared().into())
}

/// Caches objects without `kubectl apply`'s last-applied-configuration annotation: neither
/// routing, status nor Events read it, and it is a second copy of each applied object. The
/// controller's factory is its own, so no other consumer of these informers expects it.
fn trimmed<K>(informer: SharedIndexInformer<K>) -> SharedIndexInformer<K>
where
    K: kube::Resource + Send + Sync + 'static,
{
    projected(informer, strip_last_applied::<K>)
}

/// Caches what `projection` keeps of each object (see [`crate::projection`]): the kinds a
/// cluster has many of, trimmed to what routing reads.
fn projected<K>(
    informer: SharedIndexInformer<K>,
    projection: impl Fn(K) -> K + Send + Sync + 'static,
) -> SharedIndexInformer<K>
where
    K: kube::Resource + Send + Sync + 'static,
{
    if informer.set_transform(projection).is_err() {
        tracing::debug!(
            source = informer.describe(),
            "informer already running; not trimmed"
        );
    }
    informer
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
        .with::<GatewayClass>()
        .with::<Gateway>()
        .with::<HttpRoute>()
        .with::<GrpcRoute>()
        .with::<TcpRoute>()
        .with::<TlsRoute>()
        .with::<UdpRoute>()
        .with::<BackendTlsPolicy>()
        .with::<ListenerSet>()
        .with::<ReferenceGrant>()
        .with::<Namespace>()
        .with::<ConfigMap>()
        // The standard channel serves these at both versions, with one schema.
        .also::<GatewayClass>("gateway.networking.k8s.io/v1beta1")
        .also::<Gateway>("gateway.networking.k8s.io/v1beta1")
        .also::<HttpRoute>("gateway.networking.k8s.io/v1beta1")
        .also::<ReferenceGrant>("gateway.networking.k8s.io/v1")
}

impl IngressInformers {
    fn new(
        ingresses: SharedIndexInformer<Ingress>,
        classes: SharedIndexInformer<IngressClass>,
        services: SharedIndexInformer<Service>,
        endpoints: Option<SharedIndexInformer<Endpoints>>,
        endpoint_slices: Option<SharedIndexInformer<EndpointSlice>>,
        secrets: SharedIndexInformer<Secret>,
        gateway: Option<GatewayInformers>,
    ) -> Self {
        let mut all: Vec<Arc<dyn InformerHandle>> = vec![
            Arc::new(classes.clone()),
            Arc::new(services.clone()),
            Arc::new(secrets.clone()),
        ];
        if let Some(i) = &endpoints {
            all.push(Arc::new(i.clone()));
        }
        if let Some(i) = &endpoint_slices {
            all.push(Arc::new(i.clone()));
        }
        let cell = Arc::new(OnceLock::new());
        if let Some(g) = gateway {
            let _ = cell.set(g);
        }
        IngressInformers {
            ingresses,
            classes,
            services,
            endpoints,
            endpoint_slices,
            secrets,
            opaque_secrets: None,
            annotation_config_maps: None,
            nginx_config: None,
            gateway: cell,
            all,
            changed: Arc::default(),
        }
    }

    /// The Gateway API informers, once watched.
    pub fn gateway(&self) -> Option<&GatewayInformers> {
        self.gateway.get()
    }

    /// Starts watching the Gateway API kinds (their CRDs were installed after this process
    /// started): the informers get every [`IngressInformers::on_change`] callback and start.
    /// False, and nothing done, when they are watched already.
    pub fn add_gateway(
        &self,
        factory: &SharedInformerFactory,
        namespace: Option<&str>,
        optional: OptionalKinds,
    ) -> bool {
        // Under the lock `on_change` takes: each callback is registered exactly once, here
        // or there.
        let callbacks = self.changed.lock().unwrap_or_else(|e| e.into_inner());
        if self
            .gateway
            .set(GatewayInformers::from_cluster(factory, namespace, optional))
            .is_err()
        {
            return false;
        }
        let Some(g) = self.gateway.get() else {
            return false;
        };
        for changed in callbacks.iter() {
            g.register(changed);
        }
        for handle in g.handles() {
            handle.start();
        }
        true
    }

    /// Informers over a directory of manifests (standalone mode). Services, endpoints and
    /// Secrets are projected as from a cluster, so both modes read the same fields.
    pub fn from_manifests(dir: &ManifestDir) -> Self {
        let mut informers = Self::from_manifest_kinds(dir);
        let config_maps = SharedIndexInformer::new(dir.source::<ConfigMap>(), None);
        informers.all.push(Arc::new(config_maps.clone()));
        informers.annotation_config_maps = Some(config_maps);
        informers
    }

    fn from_manifest_kinds(dir: &ManifestDir) -> Self {
        Self::new(
            SharedIndexInformer::new(dir.source::<Ingress>(), None),
            SharedIndexInformer::new(dir.source::<IngressClass>(), None),
            projected(
                SharedIndexInformer::new(dir.source::<Service>(), None),
                projection::service,
            ),
            Some(projected(
                SharedIndexInformer::new(dir.source::<Endpoints>(), None),
                projection::endpoints,
            )),
            Some(projected(
                SharedIndexInformer::new(dir.source::<EndpointSlice>(), None),
                projection::endpoint_slice,
            )),
            projected(
                SharedIndexInformer::new(dir.source::<Secret>(), None),
                projection::secret,
            ),
            Some(GatewayInformers {
                classes: SharedIndexInformer::new(dir.source::<GatewayClass>(), None),
                gateways: SharedIndexInformer::new(dir.source::<Gateway>(), None),
                routes: projected(
                    SharedIndexInformer::new(dir.source::<HttpRoute>(), None),
                    compact::http_route,
                ),
                grpc_routes: projected(
                    SharedIndexInformer::new(dir.source::<GrpcRoute>(), None),
                    compact::grpc_route,
                ),
                tcp_routes: Some(SharedIndexInformer::new(dir.source::<TcpRoute>(), None)),
                tls_routes: Some(SharedIndexInformer::new(dir.source::<TlsRoute>(), None)),
                udp_routes: Some(SharedIndexInformer::new(dir.source::<UdpRoute>(), None)),
                backend_tls_policies: Some(SharedIndexInformer::new(
                    dir.source::<BackendTlsPolicy>(),
                    None,
                )),
                listener_sets: Some(SharedIndexInformer::new(dir.source::<ListenerSet>(), None)),
                grants: SharedIndexInformer::new(dir.source::<ReferenceGrant>(), None),
                namespaces: SharedIndexInformer::new(dir.source::<Namespace>(), None),
                config_maps: projected(
                    SharedIndexInformer::new(dir.source::<ConfigMap>(), None),
                    projection::config_map,
                ),
            }),
        )
    }

    /// Informers from `factory`'s cluster, in `namespace` or everywhere. Secrets are narrowed
    /// to `type=kubernetes.io/tls` by a field selector, so others never reach this process.
    /// Endpoints come from EndpointSlices (discovery.k8s.io/v1, served since Kubernetes 1.21).
    /// `gateway_api`: also watch the Gateway API kinds (the cluster serves their CRDs),
    /// with the optional ones it serves.
    pub fn from_cluster(
        factory: &SharedInformerFactory,
        namespace: Option<&str>,
        gateway_api: Option<OptionalKinds>,
    ) -> Self {
        let client = factory.client().clone();
        let all = ListOptions::default();
        let opaque = projected(
            factory.informer_for(
                api(&client, namespace),
                ListOptions::default().fields("type=Opaque"),
            ),
            projection::secret,
        );
        let mut informers = Self::new(
            trimmed(factory.informer_for(api(&client, namespace), all.clone())),
            factory.informer_for(Api::all(client.clone()), all.clone()),
            projected(
                factory.informer_for(api(&client, namespace), all.clone()),
                projection::service,
            ),
            None,
            Some(projected(
                factory.informer_for(api(&client, namespace), all.clone()),
                projection::endpoint_slice,
            )),
            projected(
                factory.informer_for(
                    api(&client, namespace),
                    ListOptions::default().fields("type=kubernetes.io/tls"),
                ),
                projection::secret,
            ),
            gateway_api.map(|kinds| GatewayInformers::from_cluster(factory, namespace, kinds)),
        );
        informers.all.push(Arc::new(opaque.clone()));
        informers.opaque_secrets = Some(opaque);
        let config_maps = trimmed(factory.informer_for(
            api(&client, namespace),
            ListOptions::default().fields(&format!("metadata.name!={ROOT_CA_CONFIG_MAP}")),
        ));
        informers.all.push(Arc::new(config_maps.clone()));
        informers.annotation_config_maps = Some(config_maps);
        informers
    }

    /// Also watches ingress-nginx's ConfigMap `namespace/name` (`--configmap`), in that
    /// namespace only and by name, from `factory`'s cluster.
    pub fn watch_nginx_config_in_cluster(
        &mut self,
        factory: &SharedInformerFactory,
        namespace: &str,
        name: &str,
    ) {
        let api: Api<ConfigMap> = Api::namespaced(factory.client().clone(), namespace);
        let informer = trimmed(factory.informer_for(
            api,
            ListOptions::default().fields(&format!("metadata.name={name}")),
        ));
        self.all.push(Arc::new(informer.clone()));
        self.nginx_config = Some((informer, format!("{namespace}/{name}")));
    }

    /// Also reads ingress-nginx's ConfigMap `namespace/name` (`--configmap`) from `dir`.
    pub fn watch_nginx_config_in_manifests(
        &mut self,
        dir: &ManifestDir,
        namespace: &str,
        name: &str,
    ) {
        let informer = SharedIndexInformer::new(dir.source::<ConfigMap>(), None);
        self.all.push(Arc::new(informer.clone()));
        self.nginx_config = Some((informer, format!("{namespace}/{name}")));
    }

    /// Every informer, type-erased (the Gateway API's too, once watched).
    pub fn handles(&self) -> Vec<Arc<dyn InformerHandle>> {
        let mut all: Vec<Arc<dyn InformerHandle>> = vec![Arc::new(self.ingresses.clone())];
        all.extend(self.all.iter().cloned());
        if let Some(g) = self.gateway() {
            all.extend(g.handles());
        }
        all
    }

    /// Calls `changed` after every add, update or delete of any watched object, including
    /// those of informers added later, except an update of an Ingress or a Gateway API
    /// object that changed its status only; each add and update of those kinds also calls
    /// `touched` with the object (see [`crate::status_only`]).
    pub fn on_change(
        &self,
        changed: impl Fn() + Send + Sync + 'static,
        touched: impl Fn(ObjectRef) + Send + Sync + 'static,
    ) {
        let callbacks = ChangeCallbacks {
            changed: Arc::new(changed),
            touched: Arc::new(touched),
        };
        // Under the lock `add_gateway` takes: each informer gets these callbacks exactly once.
        let mut registered = self.changed.lock().unwrap_or_else(|e| e.into_inner());
        watch_status_aware(&self.ingresses, &callbacks);
        for i in &self.all {
            watch_all(i.as_ref(), &callbacks);
        }
        if let Some(g) = self.gateway() {
            g.register(&callbacks);
        }
        registered.push(callbacks);
    }

    /// Starts every informer that is not running yet.
    pub fn start(&self) {
        self.handles().iter().for_each(|i| i.start());
    }

    /// Waits until every informer has synced, at most `timeout` in all; false on timeout.
    pub async fn wait_for_sync(&self, timeout: Duration) -> bool {
        wait_for_cache_sync(&self.handles(), timeout).await
    }

    /// True when every informer has synced.
    pub fn has_synced(&self) -> bool {
        self.handles().iter().all(|i| i.has_synced())
    }

    /// What the informers that have not synced yet watch (for error messages).
    pub fn unsynced(&self) -> Vec<String> {
        self.handles()
            .iter()
            .filter(|i| !i.has_synced())
            .map(|i| i.resource().to_string())
            .collect()
    }

    /// Stops every informer.
    pub async fn shutdown(&self) {
        for i in self.handles() {
            i.shutdown().await;
        }
    }

    /// The current content of every store, as the route compiler's input. Objects are shared
    /// (`Arc`), not copied.
    pub fn inputs(&self) -> Inputs {
        let gateway = self.gateway();
        Inputs {
            ingresses: listed(Some(&self.ingresses)),
            ingress_classes: listed(Some(&self.classes)),
            services: listed(Some(&self.services)),
            endpoints: listed(self.endpoints.as_ref()),
            endpoint_slices: listed(self.endpoint_slices.as_ref()),
            // Two stores (TLS and Opaque Secrets): one list made of both.
            secrets: match &self.opaque_secrets {
                None => listed(Some(&self.secrets)),
                Some(opaque) => (self.secrets.store().list_shared().iter())
                    .chain(opaque.store().list_shared().iter())
                    .cloned()
                    .collect(),
            },
            gateway_classes: listed(gateway.map(|g| &g.classes)),
            gateways: listed(gateway.map(|g| &g.gateways)),
            http_routes: listed(gateway.map(|g| &g.routes)),
            grpc_routes: listed(gateway.map(|g| &g.grpc_routes)),
            tcp_routes: listed(gateway.and_then(|g| g.tcp_routes.as_ref())),
            tls_routes: listed(gateway.and_then(|g| g.tls_routes.as_ref())),
            udp_routes: listed(gateway.and_then(|g| g.udp_routes.as_ref())),
            reference_grants: listed(gateway.map(|g| &g.grants)),
            namespaces: listed(gateway.map(|g| &g.namespaces)),
            listener_sets: listed(gateway.and_then(|g| g.listener_sets.as_ref())),
            backend_tls_policies: listed(gateway.and_then(|g| g.backend_tls_policies.as_ref())),
            config_maps: listed(gateway.map(|g| &g.config_maps)),
            annotation_config_maps: listed(self.annotation_config_maps.as_ref()),
            nginx_config_map: self
                .nginx_config
                .as_ref()
                .and_then(|(informer, key)| informer.store().get_by_key(key)),
            nginx_config_previous: None,
        }
    }
}

//! What [`crate::ingress::compile`] reads: the cluster objects and the controller's identity.

use std::sync::Arc;

use k8s_openapi::api::core::v1::{ConfigMap, Endpoints, Namespace, Secret, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::networking::v1::{Ingress, IngressClass};

use crate::gateway::{
    BackendTlsPolicy, Gateway, GatewayClass, GrpcRoute, HttpRoute, ListenerSet, ReferenceGrant,
    TcpRoute, TlsRoute, UdpRoute,
};
use crate::refs::ObjectRef;

/// The cluster objects a table is compiled from, typically a snapshot of the informer caches.
/// Order does not matter; keys (namespace/name) are expected to be unique per kind.
#[derive(Default, Clone, Debug)]
pub struct Inputs {
    /// networking.k8s.io/v1 Ingresses of all classes (see "Class" in the crate docs).
    pub ingresses: ObjectList<Ingress>,
    /// networking.k8s.io/v1 IngressClasses.
    pub ingress_classes: ObjectList<IngressClass>,
    /// core/v1 Services.
    pub services: ObjectList<Service>,
    /// core/v1 Endpoints; used for a Service that has no EndpointSlice.
    pub endpoints: ObjectList<Endpoints>,
    /// discovery.k8s.io/v1 EndpointSlices (label `kubernetes.io/service-name`).
    pub endpoint_slices: ObjectList<EndpointSlice>,
    /// core/v1 Secrets of type `kubernetes.io/tls`.
    pub secrets: ObjectList<Secret>,
    /// Gateway API GatewayClasses (empty when the cluster does not serve the CRDs).
    pub gateway_classes: ObjectList<GatewayClass>,
    /// Gateway API Gateways.
    pub gateways: ObjectList<Gateway>,
    /// Gateway API HTTPRoutes.
    pub http_routes: ObjectList<HttpRoute>,
    /// Gateway API GRPCRoutes.
    pub grpc_routes: ObjectList<GrpcRoute>,
    /// Gateway API TCPRoutes.
    pub tcp_routes: ObjectList<TcpRoute>,
    /// Gateway API TLSRoutes.
    pub tls_routes: ObjectList<TlsRoute>,
    /// Gateway API UDPRoutes.
    pub udp_routes: ObjectList<UdpRoute>,
    /// Gateway API ReferenceGrants (cross-namespace backend and certificate references).
    pub reference_grants: ObjectList<ReferenceGrant>,
    /// Gateway API ListenerSets.
    pub listener_sets: ObjectList<ListenerSet>,
    /// Gateway API BackendTLSPolicies.
    pub backend_tls_policies: ObjectList<BackendTlsPolicy>,
    /// core/v1 ConfigMaps holding CA certificates (`ca.crt`), for Gateway API's
    /// `caCertificateRefs` (client certificate validation, BackendTLSPolicy).
    pub config_maps: ObjectList<ConfigMap>,
    /// core/v1 ConfigMaps with all their data, for the Ingress annotations that name one
    /// (`auth-proxy-set-headers`, `custom-headers`).
    pub annotation_config_maps: ObjectList<ConfigMap>,
    /// ingress-nginx's ConfigMap (`--configmap`), when one is named and exists.
    pub nginx_config_map: Option<Arc<ConfigMap>>,
    /// What the ConfigMap came to in the previous compile: a value that does not parse
    /// now keeps that one ([`crate::Compiled::nginx_config`]).
    pub nginx_config_previous: Option<Arc<crate::nginx_config::NginxConfig>>,
    /// core/v1 Namespaces, for listeners whose `allowedRoutes.namespaces.from` is
    /// `Selector` (only their labels are read).
    pub namespaces: ObjectList<Namespace>,
}

/// One kind's objects as [`Inputs`] holds them: a shared list, read as a `Vec`. A copy is
/// a reference count (the controller hands the compiler its informers' listings, shared
/// until a store changes); writing through one copies the list first when it is shared.
#[derive(Debug)]
pub struct ObjectList<T>(Arc<Vec<Arc<T>>>);

impl<T> Default for ObjectList<T> {
    fn default() -> Self {
        ObjectList(Arc::new(Vec::new()))
    }
}

impl<T> Clone for ObjectList<T> {
    fn clone(&self) -> Self {
        ObjectList(Arc::clone(&self.0))
    }
}

impl<T> std::ops::Deref for ObjectList<T> {
    type Target = Vec<Arc<T>>;

    fn deref(&self) -> &Vec<Arc<T>> {
        &self.0
    }
}

impl<T> std::ops::DerefMut for ObjectList<T> {
    fn deref_mut(&mut self) -> &mut Vec<Arc<T>> {
        Arc::make_mut(&mut self.0)
    }
}

impl<T> From<Vec<Arc<T>>> for ObjectList<T> {
    fn from(list: Vec<Arc<T>>) -> Self {
        ObjectList(Arc::new(list))
    }
}

impl<T> From<Arc<Vec<Arc<T>>>> for ObjectList<T> {
    fn from(list: Arc<Vec<Arc<T>>>) -> Self {
        ObjectList(list)
    }
}

impl<T> FromIterator<Arc<T>> for ObjectList<T> {
    fn from_iter<I: IntoIterator<Item = Arc<T>>>(iter: I) -> Self {
        ObjectList(Arc::new(iter.into_iter().collect()))
    }
}

impl<'a, T> IntoIterator for &'a ObjectList<T> {
    type Item = &'a Arc<T>;
    type IntoIter = std::slice::Iter<'a, Arc<T>>;

    fn into_iter(self) -> Self::IntoIter {
        self.0.iter()
    }
}

impl<'a, T> IntoIterator for &'a mut ObjectList<T> {
    type Item = &'a mut Arc<T>;
    type IntoIter = std::slice::IterMut<'a, Arc<T>>;

    fn into_iter(self) -> Self::IntoIter {
        Arc::make_mut(&mut self.0).iter_mut()
    }
}

impl<T> IntoIterator for ObjectList<T> {
    type Item = Arc<T>;
    type IntoIter = std::vec::IntoIter<Arc<T>>;

    fn into_iter(self) -> Self::IntoIter {
        Arc::unwrap_or_clone(self.0).into_iter()
    }
}

/// Who we are: which Ingresses are ours, which namespace we watch, and what serves the
/// requests and TLS names no Ingress claims.
#[derive(Clone, Debug, PartialEq)]
pub struct CompileOptions {
    /// IngressClass `spec.controller` we claim; default `"sluice.dev/ingress-controller"`.
    pub controller_name: String,
    /// Our class name, matched against the legacy annotation `kubernetes.io/ingress.class`;
    /// default `"sluice"`.
    pub ingress_class: String,
    /// If set, namespaced objects in other namespaces are ignored.
    pub watch_namespace: Option<String>,
    /// Also serve Ingresses with neither `spec.ingressClassName` nor the legacy annotation,
    /// whether or not our IngressClass is the default class (ingress-nginx's
    /// `--watch-ingress-without-class`); default `false`.
    pub watch_ingress_without_class: bool,
    /// A Service (ingress-nginx's `--default-backend-service`) whose first port gets the
    /// requests no rule matches when no Ingress of ours has a `spec.defaultBackend`.
    /// Problems with it are [`crate::Compiled::flag_diagnostics`].
    pub default_backend_service: Option<ObjectRef>,
    /// A `kubernetes.io/tls` Secret (ingress-nginx's `--default-ssl-certificate`) served for
    /// TLS names no Ingress has a usable certificate for; see
    /// [`crate::RouteTable::default_certificate`]. Problems with it are
    /// [`crate::Compiled::flag_diagnostics`].
    pub default_certificate: Option<ObjectRef>,
    /// GatewayClass `spec.controllerName` we claim (`--gateway-controller-name`); default
    /// `"sluice.dev/gateway-controller"`.
    pub gateway_controller_name: String,
    /// Addresses for Gateways without `spec.addresses` (`--gateway-address-pool`), one
    /// each; `None`: such Gateways share the proxy's own HTTP and HTTPS listeners.
    pub gateway_address_pool: Option<crate::gateway::AddressPool>,
    /// ingress-nginx's behaviours that contradict the Ingress spec (`--ingress-nginx-compat`);
    /// default `false`. Today one: a request for `/my-path` answers 301 to `/my-path/` when
    /// an Exact, Prefix or ImplementationSpecific path of its host is `/my-path/` and no
    /// path is `/my-path` (nginx's redirect for a `proxy_pass` location ending in `/`); never
    /// on a host with regex paths. See [`crate::Compiled::trailing_slash_redirects`].
    pub ingress_nginx_compat: bool,
    /// `ssl-passthrough` is honoured (ingress-nginx's `--enable-ssl-passthrough`); default
    /// `false`: the annotation is reported and TLS is terminated.
    pub enable_ssl_passthrough: bool,
}

/// Default value of [`CompileOptions::controller_name`].
pub const DEFAULT_CONTROLLER_NAME: &str = "sluice.dev/ingress-controller";
/// Default value of [`CompileOptions::ingress_class`].
pub const DEFAULT_INGRESS_CLASS: &str = "sluice";
/// Default value of [`CompileOptions::gateway_controller_name`].
pub const DEFAULT_GATEWAY_CONTROLLER_NAME: &str = "sluice.dev/gateway-controller";

impl Default for CompileOptions {
    fn default() -> Self {
        CompileOptions {
            controller_name: DEFAULT_CONTROLLER_NAME.to_owned(),
            ingress_class: DEFAULT_INGRESS_CLASS.to_owned(),
            watch_namespace: None,
            watch_ingress_without_class: false,
            default_backend_service: None,
            default_certificate: None,
            gateway_controller_name: DEFAULT_GATEWAY_CONTROLLER_NAME.to_owned(),
            gateway_address_pool: None,
            ingress_nginx_compat: false,
            enable_ssl_passthrough: false,
        }
    }
}

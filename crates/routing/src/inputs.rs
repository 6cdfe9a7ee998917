//! What [`crate::ingress::compile`] reads: the cluster objects and the controller's identity.

use sluice_persistent::ChunkedVec;
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

/// One kind's objects as [`Inputs`] holds them: a list in shared chunks of 128
/// ([`ChunkedVec`]). A copy copies the chunks' pointers; the controller hands the compiler
/// its informers' listings, which share every chunk but the few a store's writes touched
/// since the last listing, and whose objects keep their positions (see
/// [`ObjectList::shares_chunk_at`], what the incremental compile's diffs skip by).
#[derive(Debug)]
pub struct ObjectList<T>(ChunkedVec<Arc<T>>);

impl<T> Default for ObjectList<T> {
    fn default() -> Self {
        ObjectList(ChunkedVec::new())
    }
}

impl<T> Clone for ObjectList<T> {
    fn clone(&self) -> Self {
        ObjectList(self.0.clone())
    }
}

impl<T> ObjectList<T> {
    /// How many objects it holds.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Object `index`, if there is one.
    pub fn get(&self, index: usize) -> Option<&Arc<T>> {
        self.0.get(index)
    }

    /// Every object, in order.
    pub fn iter(&self) -> sluice_persistent::Iter<'_, Arc<T>> {
        self.0.iter()
    }

    /// Every object, to change (each shared chunk copied first).
    pub fn iter_mut(&mut self) -> impl Iterator<Item = &mut Arc<T>> {
        self.0.iter_mut()
    }

    /// Whether objects `index..index + 128` of `self` and `other` are one shared chunk:
    /// the same objects, known without looking at them.
    pub fn shares_chunk_at(&self, other: &Self, index: usize) -> bool {
        self.0.shares_chunk_at(&other.0, index)
    }

    /// Adds `object` at the end.
    pub fn push(&mut self, object: Arc<T>) {
        self.0.push(object);
    }

    /// Every object, in order, in a `Vec` of its own.
    pub fn to_vec(&self) -> Vec<Arc<T>> {
        self.iter().cloned().collect()
    }

    /// Takes every object out.
    pub fn clear(&mut self) {
        *self = Self::default();
    }

    /// Takes the last object out.
    pub fn pop(&mut self) -> Option<Arc<T>> {
        self.0.pop()
    }

    /// Takes object `index` out, those after it moving up one (`Vec::remove`).
    ///
    /// # Panics
    /// If `index` is out of range.
    pub fn remove(&mut self, index: usize) -> Arc<T> {
        let removed = Arc::clone(&self[index]);
        *self = (self.iter().enumerate())
            .filter(|(i, _)| *i != index)
            .map(|(_, o)| Arc::clone(o))
            .collect();
        removed
    }

    /// Keeps the objects `keep` says to keep, in order (`keep` is asked once per object;
    /// when it keeps them all, the list stays as it was, its chunks still shared).
    pub fn retain(&mut self, mut keep: impl FnMut(&Arc<T>) -> bool) {
        let kept: Vec<bool> = self.iter().map(&mut keep).collect();
        if kept.iter().all(|k| *k) {
            return;
        }
        *self = (self.iter().zip(kept))
            .filter(|(_, k)| *k)
            .map(|(o, _)| Arc::clone(o))
            .collect();
    }
}

impl<T> std::ops::Index<usize> for ObjectList<T> {
    type Output = Arc<T>;

    fn index(&self, index: usize) -> &Arc<T> {
        &self.0[index]
    }
}

impl<T> std::ops::IndexMut<usize> for ObjectList<T> {
    fn index_mut(&mut self, index: usize) -> &mut Arc<T> {
        &mut self.0[index]
    }
}

impl<T> Extend<Arc<T>> for ObjectList<T> {
    fn extend<I: IntoIterator<Item = Arc<T>>>(&mut self, objects: I) {
        for object in objects {
            self.0.push(object);
        }
    }
}

impl<T> From<Vec<Arc<T>>> for ObjectList<T> {
    fn from(list: Vec<Arc<T>>) -> Self {
        list.into_iter().collect()
    }
}

impl<T> From<ChunkedVec<Arc<T>>> for ObjectList<T> {
    fn from(list: ChunkedVec<Arc<T>>) -> Self {
        ObjectList(list)
    }
}

impl<T> FromIterator<Arc<T>> for ObjectList<T> {
    fn from_iter<I: IntoIterator<Item = Arc<T>>>(iter: I) -> Self {
        ObjectList(iter.into_iter().collect())
    }
}

impl<'a, T> IntoIterator for &'a ObjectList<T> {
    type Item = &'a Arc<T>;
    type IntoIter = sluice_persistent::Iter<'a, Arc<T>>;

    fn into_iter(self) -> Self::IntoIter {
        self.0.iter()
    }
}

impl<'a, T> IntoIterator for &'a mut ObjectList<T> {
    type Item = &'a mut Arc<T>;
    type IntoIter = Box<dyn Iterator<Item = &'a mut Arc<T>> + 'a>;

    /// Every object, to change (each shared chunk copied first).
    fn into_iter(self) -> Self::IntoIter {
        Box::new(self.iter_mut())
    }
}

impl<T> IntoIterator for ObjectList<T> {
    type Item = Arc<T>;
    type IntoIter = std::vec::IntoIter<Arc<T>>;

    fn into_iter(self) -> Self::IntoIter {
        self.0.into_iter()
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retain_asks_once_per_object_and_keeping_all_keeps_the_chunks() {
        let list: ObjectList<u32> = (0..300).map(Arc::new).collect();
        let mut all = list.clone();
        let mut asked = 0;
        all.retain(|_| {
            asked += 1;
            true
        });
        assert_eq!(asked, 300);
        assert!(all.shares_chunk_at(&list, 0) && all.shares_chunk_at(&list, 128));
        let mut odd = list.clone();
        let mut asked = 0;
        odd.retain(|o| {
            asked += 1;
            **o % 2 == 1
        });
        assert_eq!(asked, 300);
        let odd: Vec<u32> = odd.iter().map(|o| **o).collect();
        assert_eq!(odd, (0..300).filter(|n| n % 2 == 1).collect::<Vec<_>>());
        assert_eq!(list.len(), 300, "the copy it was made from is unchanged");
    }
}

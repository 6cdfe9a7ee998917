//! Whether the objects besides the Ingresses (or besides the routes) are those of the last
//! compile.
//!
//! An unchanged object is the same `Arc` (the informers' stores hand out what they hold).
//! The kinds whose status sluice writes come back as new objects after every status
//! write; those still count as unchanged when their spec and metadata are equal (the
//! compiler reads no status), as the controller's `status_only` decides for its rebuilds.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use k8s_openapi::api::networking::v1::Ingress;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::listing::differing;
use crate::gateway::{
    BackendTlsPolicy, Gateway, GatewayClass, GrpcRoute, HttpRoute, ListenerSet, TcpRoute, TlsRoute,
    UdpRoute,
};
use crate::{Inputs, ObjectList};

/// An object kind as the compiler reads it.
pub trait ReadAlike {
    /// `(namespace, name)`.
    fn name(&self) -> (&str, &str);
    /// Whether two objects of the same name read the same to the compiler: for the kinds
    /// whose status sluice writes, equal spec and metadata but for what the API server
    /// moves with every write (`resourceVersion`, `managedFields`); `false` for the other
    /// kinds, where only identity tells.
    fn reads_alike(&self, other: &Self) -> bool;
}

fn name_of(meta: &ObjectMeta) -> (&str, &str) {
    (
        meta.namespace.as_deref().unwrap_or(""),
        meta.name.as_deref().unwrap_or(""),
    )
}

/// Equal but for what the API server moves with every write, status writes included.
fn same_metadata(a: &ObjectMeta, b: &ObjectMeta) -> bool {
    let bare = |m: &ObjectMeta| ObjectMeta {
        resource_version: None,
        managed_fields: None,
        ..m.clone()
    };
    bare(a) == bare(b)
}

macro_rules! status_written {
    ($($kind:ty),+) => {$(
        impl ReadAlike for $kind {
            fn name(&self) -> (&str, &str) {
                name_of(&self.metadata)
            }
            fn reads_alike(&self, other: &Self) -> bool {
                self.spec == other.spec && same_metadata(&self.metadata, &other.metadata)
            }
        }
    )+};
}

status_written!(
    Ingress,
    GatewayClass,
    Gateway,
    HttpRoute,
    GrpcRoute,
    TcpRoute,
    TlsRoute,
    UdpRoute,
    ListenerSet,
    BackendTlsPolicy
);

macro_rules! by_identity {
    ($($kind:ty),+) => {$(
        impl ReadAlike for $kind {
            fn name(&self) -> (&str, &str) {
                name_of(&self.metadata)
            }
            fn reads_alike(&self, _: &Self) -> bool {
                false
            }
        }
    )+};
}

by_identity!(
    k8s_openapi::api::networking::v1::IngressClass,
    k8s_openapi::api::core::v1::Service,
    k8s_openapi::api::core::v1::Endpoints,
    k8s_openapi::api::discovery::v1::EndpointSlice,
    k8s_openapi::api::core::v1::Secret,
    k8s_openapi::api::core::v1::ConfigMap,
    k8s_openapi::api::core::v1::Namespace,
    crate::gateway::ReferenceGrant
);

/// The lists a partial compile may find changed.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Except {
    /// The Ingresses.
    Ingresses,
    /// The HTTPRoutes and GRPCRoutes.
    Routes,
    /// The EndpointSlices and Endpoints.
    Endpoints,
}

/// Whether `a` and `b` hold the same objects in every list but `except`'s.
pub(crate) fn same_except(a: &Inputs, b: &Inputs, except: Except) -> bool {
    (except == Except::Ingresses || same(&a.ingresses, &b.ingresses))
        && (except == Except::Routes
            || (same(&a.http_routes, &b.http_routes) && same(&a.grpc_routes, &b.grpc_routes)))
        && same(&a.ingress_classes, &b.ingress_classes)
        && same(&a.services, &b.services)
        && (except == Except::Endpoints
            || (same(&a.endpoints, &b.endpoints) && same(&a.endpoint_slices, &b.endpoint_slices)))
        && same(&a.secrets, &b.secrets)
        && same(&a.gateway_classes, &b.gateway_classes)
        && same(&a.gateways, &b.gateways)
        && same(&a.tcp_routes, &b.tcp_routes)
        && same(&a.tls_routes, &b.tls_routes)
        && same(&a.udp_routes, &b.udp_routes)
        && same(&a.reference_grants, &b.reference_grants)
        && same(&a.listener_sets, &b.listener_sets)
        && same(&a.backend_tls_policies, &b.backend_tls_policies)
        && same(&a.config_maps, &b.config_maps)
        && same(&a.annotation_config_maps, &b.annotation_config_maps)
        && same(&a.namespaces, &b.namespaces)
        && match (&a.nginx_config_map, &b.nginx_config_map) {
            (None, None) => true,
            (Some(x), Some(y)) => Arc::ptr_eq(x, y),
            _ => false,
        }
}

/// Whether two lists hold the same objects, in any order: the same `Arc`s, or objects of
/// the same names that read alike.
pub(crate) fn same<T: ReadAlike>(a: &ObjectList<T>, b: &ObjectList<T>) -> bool {
    if a.len() != b.len() {
        return false;
    }
    // The stores list objects in a stable order and an update keeps its place: only the
    // positions that differ are compared as sets (at 10,000 routes, one, not 10,000), and
    // shared chunks are not looked at.
    let (a, b): (Vec<&Arc<T>>, Vec<&Arc<T>>) = differing(a, b).map(|i| (&a[i], &b[i])).unzip();
    if a.is_empty() {
        return true;
    }
    type Addresses<T> = HashSet<*const T, foldhash::fast::RandomState>;
    let in_a: Addresses<T> = a.iter().map(|x| Arc::as_ptr(x)).collect();
    let in_b: Addresses<T> = b.iter().map(|y| Arc::as_ptr(y)).collect();
    if in_a.len() != a.len() || in_b.len() != b.len() {
        return false;
    }
    let only_b: Vec<&Arc<T>> = b
        .into_iter()
        .filter(|y| !in_a.contains(&Arc::as_ptr(y)))
        .collect();
    if only_b.is_empty() {
        return true;
    }
    let only_a: HashMap<(&str, &str), &Arc<T>, foldhash::fast::RandomState> = a
        .into_iter()
        .filter(|x| !in_b.contains(&Arc::as_ptr(x)))
        .map(|x| (x.name(), x))
        .collect();
    only_a.len() == only_b.len()
        && only_b
            .iter()
            .all(|y| only_a.get(&y.name()).is_some_and(|x| x.reads_alike(y)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn same_of<T: ReadAlike>(a: &[Arc<T>], b: &[Arc<T>]) -> bool {
        same(&a.to_vec().into(), &b.to_vec().into())
    }

    fn route(name: &str, version: &str, host: &str, status: bool) -> Arc<HttpRoute> {
        let mut value = json!({
            "metadata": {"namespace": "ns", "name": name, "resourceVersion": version},
            "spec": {"hostnames": [host]},
        });
        if status {
            value["status"] = json!({"parents": []});
        }
        Arc::new(serde_json::from_value(value).expect("an HTTPRoute"))
    }

    #[test]
    fn the_same_arcs_in_any_order_are_the_same() {
        let (x, y) = (
            route("x", "1", "x.test", false),
            route("y", "1", "y.test", false),
        );
        assert!(same_of(&[x.clone(), y.clone()], &[y.clone(), x.clone()]));
        assert!(!same_of(std::slice::from_ref(&x), &[x.clone(), y.clone()]));
        assert!(!same_of(&[x.clone(), x.clone()], &[x.clone(), y.clone()]));
    }

    #[test]
    fn a_status_write_is_no_change_and_a_spec_change_is() {
        let x = route("x", "1", "x.test", false);
        let y = route("y", "1", "y.test", false);
        let x_status = route("x", "2", "x.test", true);
        let x_spec = route("x", "3", "other.test", false);
        let y_renamed = route("z", "1", "y.test", false);
        assert!(same_of(&[x.clone(), y.clone()], &[y.clone(), x_status]));
        assert!(!same_of(&[x.clone(), y.clone()], &[y.clone(), x_spec]));
        assert!(!same_of(&[x.clone(), y.clone()], &[x.clone(), y_renamed]));
    }

    /// `same` as a whole-list comparison: every object of `b` is one of `a`'s, or reads
    /// like `a`'s object of its name, and the other way round.
    fn same_by_names(a: &[Arc<HttpRoute>], b: &[Arc<HttpRoute>]) -> bool {
        let by_name = |list: &[Arc<HttpRoute>]| -> HashMap<(String, String), Arc<HttpRoute>> {
            list.iter()
                .map(|r| {
                    let (ns, name) = r.name();
                    ((ns.to_owned(), name.to_owned()), Arc::clone(r))
                })
                .collect()
        };
        let (a, b) = (by_name(a), by_name(b));
        a.len() == b.len()
            && a.iter().all(|(name, x)| {
                b.get(name)
                    .is_some_and(|y| Arc::ptr_eq(x, y) || x.reads_alike(y))
            })
    }

    proptest::proptest! {
        /// Only the positions that differ are compared as sets: the same answer as
        /// comparing whole lists by name, for any edit and any reordering.
        #[test]
        fn comparing_the_positions_that_differ_is_comparing_the_lists(
            versions in proptest::collection::vec(0usize..3, 1..12),
            edits in proptest::collection::vec((0usize..12, 0usize..4), 0..4),
            rotate in 0usize..12,
        ) {
            // Per name: the object, its status written anew, its spec changed.
            let pool: Vec<[Arc<HttpRoute>; 3]> = (0..versions.len())
                .map(|i| {
                    let name = format!("r{i}");
                    let host = format!("{name}.test");
                    [
                        route(&name, "1", &host, false),
                        route(&name, "2", &host, true),
                        route(&name, "3", "moved.test", false),
                    ]
                })
                .collect();
            let a: Vec<Arc<HttpRoute>> =
                versions.iter().enumerate().map(|(i, v)| Arc::clone(&pool[i][*v])).collect();
            let mut b = a.clone();
            for (at, to) in &edits {
                let at = at % b.len();
                match to {
                    // Another version of the same object.
                    0..=2 => b[at] = Arc::clone(&pool[at][*to]),
                    // Gone, and one of another name in its place.
                    _ => b[at] = route("other", "1", "other.test", false),
                }
            }
            let by = rotate % b.len();
            b.rotate_left(by);
            proptest::prop_assert_eq!(same_of(&a, &b), same_by_names(&a, &b));
        }
    }

    #[test]
    fn kinds_whose_status_sluice_does_not_write_count_by_identity() {
        let secret = |version: &str| {
            Arc::new(
                serde_json::from_value::<k8s_openapi::api::core::v1::Secret>(json!({
                    "metadata": {"namespace": "ns", "name": "s", "resourceVersion": version},
                }))
                .expect("a Secret"),
            )
        };
        assert!(!same_of(&[secret("1")], &[secret("1")]));
    }
}

//! Updates that change only an object's `status` do not change what is served: the route
//! compiler reads no status. sluice writes the status of Ingresses and of the Gateway API
//! kinds itself, and every such write comes back through the informer as an update; as a
//! change it would cost a whole-table rebuild (two per route change at 10,000 HTTPRoutes).
//! For these kinds a status-only update wakes the status writers instead and compiles
//! nothing.
//!
//! Every add and update of these kinds names its object to the status writers
//! ([`StatusChanges`]): after a finished round they check those objects (and those whose
//! status the compiler changed), not every object of the kind, and put our entries back
//! where another writer removed them or a recreated object lacks them.

use sluice_informer::{HandlerFuncs, HandlerRegistration, InformerHandle, SharedIndexInformer};
use sluice_routing::{ObjectRef, ReadAlike};
use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use tokio::sync::watch;

/// What the informers call when something changes.
#[derive(Clone)]
pub(crate) struct ChangeCallbacks {
    /// Something the routing table is compiled from changed.
    pub(crate) changed: Arc<dyn Fn() + Send + Sync>,
    /// This object, one whose status sluice writes, was added or updated (maybe only its
    /// status): the status writers check it.
    pub(crate) touched: Arc<dyn Fn(ObjectRef) + Send + Sync>,
}

/// The objects added or updated (their status maybe changed under the status writers) since
/// the writers last looked: a round checks those objects, not every object of the kind (at
/// 10,000 routes, each of our own writes comes back as an update).
#[derive(Debug)]
pub struct StatusChanges {
    objects: Mutex<BTreeSet<ObjectRef>>,
    tick: watch::Sender<u64>,
}

impl Default for StatusChanges {
    fn default() -> Self {
        StatusChanges {
            objects: Mutex::default(),
            tick: watch::Sender::new(0),
        }
    }
}

impl StatusChanges {
    /// Notes that `object` was added or updated (its status maybe changed), and wakes
    /// whoever waits.
    pub(crate) fn record(&self, object: ObjectRef) {
        self.objects
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(object);
        self.tick.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// Ticks after each [`StatusChanges::record`].
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.tick.subscribe()
    }

    /// The objects recorded since the last call.
    pub fn take(&self) -> BTreeSet<ObjectRef> {
        std::mem::take(&mut *self.objects.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

/// A kind whose status sluice writes, and which the compiler reads without it.
pub(crate) trait StatusOnly {
    /// Whether `new` differs from `old` in its status (and what every write moves) only.
    fn only_status_changed(old: &Self, new: &Self) -> bool;
}

/// The compiler's own rule ([`ReadAlike`]): equal spec and metadata but for what the API
/// server moves with every write.
impl<K: ReadAlike> StatusOnly for K {
    fn only_status_changed(old: &Self, new: &Self) -> bool {
        old.reads_alike(new)
    }
}

/// Registers `callbacks` on an informer of a kind whose status sluice writes.
pub(crate) fn watch_status_aware<K>(
    informer: &SharedIndexInformer<K>,
    callbacks: &ChangeCallbacks,
) -> HandlerRegistration
where
    K: StatusOnly + k8s_openapi::Resource + kube::Resource + Send + Sync + 'static,
{
    let (added, updated, deleted) = (
        callbacks.changed.clone(),
        callbacks.changed.clone(),
        callbacks.changed.clone(),
    );
    let (on_add, on_update) = (callbacks.touched.clone(), callbacks.touched.clone());
    informer.add_event_handler(
        HandlerFuncs::new()
            .on_add(move |new, _| {
                on_add(object_of(&*new));
                added();
            })
            .on_update(move |old, new| {
                on_update(object_of(&*new));
                if !K::only_status_changed(&old, &new) {
                    updated();
                }
            })
            .on_delete(move |_| deleted()),
    )
}

/// `object`'s kind, namespace and name.
fn object_of<K: k8s_openapi::Resource + kube::Resource>(object: &K) -> ObjectRef {
    let meta = kube::Resource::meta(object);
    ObjectRef {
        kind: K::KIND,
        namespace: meta.namespace.clone().unwrap_or_default(),
        name: meta.name.clone().unwrap_or_default(),
    }
}

/// Registers `callbacks` on any other informer: every change is a change.
pub(crate) fn watch_all(
    informer: &dyn InformerHandle,
    callbacks: &ChangeCallbacks,
) -> HandlerRegistration {
    informer.on_change(callbacks.changed.clone())
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::networking::v1::Ingress;
    use serde_json::json;
    use sluice_routing::gateway::HttpRoute;

    fn route(value: serde_json::Value) -> HttpRoute {
        serde_json::from_value(value).expect("an HTTPRoute")
    }

    fn base() -> serde_json::Value {
        json!({
            "metadata": {"name": "web", "namespace": "default", "resourceVersion": "1",
                         "generation": 1, "labels": {"a": "b"}, "annotations": {"x": "y"}},
            "spec": {"parentRefs": [{"name": "edge"}], "hostnames": ["a.example"]},
            "status": {"parents": []},
        })
    }

    fn changed(edit: impl Fn(&mut serde_json::Value)) -> bool {
        let mut new = base();
        edit(&mut new);
        HttpRoute::only_status_changed(&route(base()), &route(new))
    }

    #[test]
    fn a_status_write_is_status_only() {
        assert!(changed(|v| {
            v["status"] = json!({"parents": [{"controllerName": "sluice.dev/gateway-controller"}]});
            v["metadata"]["resourceVersion"] = json!("2");
            v["metadata"]["managedFields"] = json!([{"manager": "sluice", "operation": "Update"}]);
        }));
        assert!(changed(|_| {}), "a resync: nothing changed");
    }

    #[test]
    fn spec_labels_annotations_generation_and_deletion_are_changes() {
        assert!(!changed(|v| v["spec"]["hostnames"] = json!(["b.example"])));
        assert!(!changed(|v| v["metadata"]["labels"]["a"] = json!("c")));
        assert!(!changed(|v| v["metadata"]["annotations"]["x"] = json!("z")));
        assert!(!changed(|v| v["metadata"]["generation"] = json!(2)));
        assert!(!changed(|v| {
            v["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z")
        }));
    }

    #[test]
    fn an_ingress_annotation_is_a_change_its_status_is_not() {
        let ingress = |annotation: &str, ip: &str| -> Ingress {
            serde_json::from_value(json!({
                "metadata": {"name": "i", "annotations": {
                    "nginx.ingress.kubernetes.io/rewrite-target": annotation}},
                "spec": {"rules": [{"host": "a.example"}]},
                "status": {"loadBalancer": {"ingress": [{"ip": ip}]}},
            }))
            .expect("an Ingress")
        };
        assert!(Ingress::only_status_changed(
            &ingress("/", "192.0.2.1"),
            &ingress("/", "192.0.2.2")
        ));
        assert!(!Ingress::only_status_changed(
            &ingress("/", "192.0.2.1"),
            &ingress("/$1", "192.0.2.1")
        ));
    }
}

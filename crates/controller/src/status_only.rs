//! Updates that change only an object's `status` do not change what is served: the route
//! compiler reads no status. sluice writes the status of Ingresses and of the Gateway API
//! kinds itself, and every such write comes back through the informer as an update; as a
//! change it would cost a whole-table rebuild (two per route change at 10,000 HTTPRoutes).
//! For these kinds a status-only update wakes the status writers instead (they put our
//! entries back if another writer removed them) and compiles nothing.

use sluice_informer::{HandlerFuncs, HandlerRegistration, InformerHandle, SharedIndexInformer};
use sluice_routing::ReadAlike;
use std::sync::Arc;

/// What the informers call when something changes.
#[derive(Clone)]
pub(crate) struct ChangeCallbacks {
    /// Something the routing table is compiled from changed.
    pub(crate) changed: Arc<dyn Fn() + Send + Sync>,
    /// Only the status of an object whose status sluice writes changed.
    pub(crate) status_changed: Arc<dyn Fn() + Send + Sync>,
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
    K: StatusOnly + kube::Resource + Send + Sync + 'static,
{
    let (added, updated, deleted) = (
        callbacks.changed.clone(),
        callbacks.changed.clone(),
        callbacks.changed.clone(),
    );
    let status_changed = callbacks.status_changed.clone();
    informer.add_event_handler(
        HandlerFuncs::new()
            .on_add(move |_, _| added())
            .on_update(move |old, new| {
                if K::only_status_changed(&old, &new) {
                    status_changed();
                } else {
                    updated();
                }
            })
            .on_delete(move |_| deleted()),
    )
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

//! Informer event handlers: which Service keys a Service or Ingress change puts on the work
//! queue. They only enqueue keys; the reconciler reads current state from the listers, so
//! several changes of one Service coalesce into one reconcile.

use crate::desired::wants_ingress;
use crate::ownership::owner_service_key;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::networking::v1::Ingress;
use sluice_informer::workqueue::RateLimitingQueue;
use sluice_informer::{HandlerFuncs, HandlerRegistration, Lister, SharedIndexInformer, object_key};

/// Service keys an Ingress change concerns: its controlling Service (found through the
/// ownerReference), and an annotated Service of the same name that may be waiting for a
/// foreign Ingress to go away.
pub fn service_keys_for_ingress(ing: &Ingress, services: &Lister<Service>) -> Vec<String> {
    let mut keys = Vec::with_capacity(2);
    if let Some(owner) = owner_service_key(ing) {
        keys.push(owner);
    }
    if let (Some(ns), Some(name)) = (
        ing.metadata.namespace.as_deref(),
        ing.metadata.name.as_deref(),
    ) && services.get(ns, name).is_some_and(|s| wants_ingress(&s))
        && let Ok(key) = object_key(ing)
        && !keys.contains(&key)
    {
        keys.push(key);
    }
    keys
}

/// Registers the handlers that feed `queue` from both informers.
pub fn register(
    services: &SharedIndexInformer<Service>,
    ingresses: &SharedIndexInformer<Ingress>,
    queue: &RateLimitingQueue<String>,
) -> [HandlerRegistration; 2] {
    let enqueue_service = {
        let q = queue.clone();
        move |svc: &Service| {
            if let Ok(key) = object_key(svc) {
                q.add(key);
            }
        }
    };
    let on_update = enqueue_service.clone();
    let service_handler = HandlerFuncs::new()
        // Every Service at startup: one without the annotation may still own an Ingress from
        // before the restart that has to go.
        .on_add(move |svc: std::sync::Arc<Service>, _| enqueue_service(&svc))
        .on_update(
            move |old: std::sync::Arc<Service>, new: std::sync::Arc<Service>| {
                if wants_ingress(&old) || wants_ingress(&new) {
                    on_update(&new);
                }
            },
        );
    // No delete handler: a deleted Service's Ingress goes with it through the garbage collector.

    let lister = services.lister();
    let q = queue.clone();
    let enqueue_for_ingress = move |ing: &Ingress| {
        for key in service_keys_for_ingress(ing, &lister) {
            q.add(key);
        }
    };
    let (on_add, on_update) = (enqueue_for_ingress.clone(), enqueue_for_ingress.clone());
    let ingress_handler = HandlerFuncs::new()
        .on_add(move |ing: std::sync::Arc<Ingress>, _| on_add(&ing))
        // Both versions: an ownerReference removed by hand still leads to the old owner.
        .on_update(
            move |old: std::sync::Arc<Ingress>, new: std::sync::Arc<Ingress>| {
                on_update(&old);
                on_update(&new);
            },
        )
        // The owned Ingress deleted while the annotation stays: its owner recreates it.
        .on_delete(move |gone| enqueue_for_ingress(gone.object()));

    [
        services.add_event_handler(service_handler),
        ingresses.add_event_handler(ingress_handler),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
    use kube::api::ObjectMeta;
    use sluice_informer::StoreWriter;
    use std::collections::BTreeMap;
    use std::sync::Arc;

    fn service(name: &str, annotated: bool) -> Arc<Service> {
        let annotations =
            annotated.then(|| BTreeMap::from([("ingress/http".to_string(), String::new())]));
        Arc::new(Service {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("ns".into()),
                annotations,
                ..ObjectMeta::default()
            },
            ..Service::default()
        })
    }

    fn ingress(name: &str, owner: Option<&str>) -> Ingress {
        Ingress {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("ns".into()),
                owner_references: owner.map(|o| {
                    vec![OwnerReference {
                        api_version: "v1".into(),
                        kind: "Service".into(),
                        name: o.into(),
                        uid: "u".into(),
                        controller: Some(true),
                        block_owner_deletion: Some(true),
                    }]
                }),
                ..ObjectMeta::default()
            },
            ..Ingress::default()
        }
    }

    fn lister(services: &[Arc<Service>]) -> Lister<Service> {
        let store = StoreWriter::new();
        for s in services {
            store.add(s.clone()).expect("keyed");
        }
        Lister::new(store.as_reader())
    }

    #[test]
    fn keys_for_an_ingress() {
        let l = lister(&[service("web", true), service("plain", false)]);
        assert_eq!(
            service_keys_for_ingress(&ingress("web", Some("web")), &l),
            vec!["ns/web"]
        );
        assert_eq!(
            service_keys_for_ingress(&ingress("web", Some("other")), &l),
            vec!["ns/other", "ns/web"],
            "owner, and the annotated Service of the same name"
        );
        assert_eq!(
            service_keys_for_ingress(&ingress("web", None), &l),
            vec!["ns/web"]
        );
        assert!(
            service_keys_for_ingress(&ingress("plain", None), &l).is_empty(),
            "not annotated"
        );
        assert!(
            service_keys_for_ingress(&ingress("nothing", None), &l).is_empty(),
            "no Service"
        );
        assert_eq!(
            service_keys_for_ingress(&ingress("nothing", Some("gone")), &l),
            vec!["ns/gone"]
        );
    }
}

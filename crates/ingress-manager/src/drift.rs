//! Whether a live Ingress already is what we would apply, so that a converged object costs
//! no write at all.
//!
//! Only what ingress-manager sets is compared: `spec.rules` and `spec.ingressClassName`, our
//! labels, and our ownerReference. These are exactly the fields server-side apply makes ours.
//! Fields someone else added (another label, an annotation, `spec.tls`, another
//! ownerReference) belong to their own field manager: apply leaves them in place, so they
//! must not count as drift either, or every reconcile would write without changing anything.
//! `spec.rules` is an atomic list, so a rule or path added by hand is drift, and it goes.

use k8s_openapi::api::networking::v1::Ingress;

/// Whether `live` agrees with `desired` on every field `desired` sets (see the module docs).
pub fn in_sync(live: &Ingress, desired: &Ingress) -> bool {
    let live_spec = live.spec.clone().unwrap_or_default();
    let want_spec = desired.spec.clone().unwrap_or_default();
    if live_spec.rules != want_spec.rules
        || live_spec.ingress_class_name != want_spec.ingress_class_name
    {
        return false;
    }
    let live_labels = live.metadata.labels.as_ref();
    let labels_ok = desired
        .metadata
        .labels
        .iter()
        .flatten()
        .all(|(k, v)| live_labels.and_then(|l| l.get(k)) == Some(v));
    let live_owners = live
        .metadata
        .owner_references
        .as_deref()
        .unwrap_or_default();
    let owners_ok = desired
        .metadata
        .owner_references
        .iter()
        .flatten()
        .all(|want| live_owners.iter().any(|have| have == want));
    labels_ok && owners_ok
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::desired::{DesiredOptions, desired_ingress};
    use k8s_openapi::api::core::v1::{Service, ServicePort, ServiceSpec};
    use k8s_openapi::api::networking::v1::IngressTLS;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
    use kube::api::ObjectMeta;
    use std::collections::BTreeMap;

    fn desired() -> Ingress {
        let svc = Service {
            metadata: ObjectMeta {
                name: Some("web".into()),
                namespace: Some("shop".into()),
                uid: Some("u1".into()),
                annotations: Some(BTreeMap::from([("ingress/http".into(), String::new())])),
                ..ObjectMeta::default()
            },
            spec: Some(ServiceSpec {
                ports: Some(vec![ServicePort {
                    name: Some("http".into()),
                    port: 80,
                    ..ServicePort::default()
                }]),
                ..ServiceSpec::default()
            }),
            status: None,
        };
        desired_ingress(
            &svc,
            &DesiredOptions {
                ingress_class: "sluice".into(),
                ..DesiredOptions::default()
            },
        )
        .expect("desired")
    }

    /// What the API server hands back: the applied fields plus server-set metadata.
    fn live() -> Ingress {
        let mut ing = desired();
        ing.metadata.uid = Some("ing-uid".into());
        ing.metadata.resource_version = Some("7".into());
        ing.metadata.generation = Some(1);
        ing
    }

    fn host_of(ing: &mut Ingress) -> &mut Option<String> {
        &mut ing
            .spec
            .as_mut()
            .and_then(|s| s.rules.as_mut())
            .expect("rules")[0]
            .host
    }

    #[test]
    fn converged_object_is_in_sync() {
        assert!(in_sync(&live(), &desired()));
    }

    #[test]
    fn fields_of_other_managers_are_not_drift() {
        let mut l = live();
        l.metadata
            .labels
            .get_or_insert_default()
            .insert("team".into(), "a".into());
        l.metadata.annotations = Some(BTreeMap::from([("note".into(), "hand-added".into())]));
        l.metadata
            .owner_references
            .get_or_insert_default()
            .push(OwnerReference {
                api_version: "v1".into(),
                kind: "ConfigMap".into(),
                name: "x".into(),
                uid: "u9".into(),
                ..OwnerReference::default()
            });
        if let Some(spec) = l.spec.as_mut() {
            spec.tls = Some(vec![IngressTLS {
                hosts: Some(vec!["web.shop.example.com".into()]),
                secret_name: None,
            }]);
        }
        l.status = Some(Default::default());
        assert!(in_sync(&l, &desired()));
    }

    #[test]
    fn changed_host_is_drift() {
        let mut l = live();
        *host_of(&mut l) = Some("other.example.com".into());
        assert!(!in_sync(&l, &desired()));
    }

    #[test]
    fn extra_rule_or_path_is_drift() {
        let mut l = live();
        let rules = l
            .spec
            .as_mut()
            .and_then(|s| s.rules.as_mut())
            .expect("rules");
        let extra = rules[0].clone();
        rules.push(extra);
        assert!(!in_sync(&l, &desired()));

        let mut l = live();
        let rules = l
            .spec
            .as_mut()
            .and_then(|s| s.rules.as_mut())
            .expect("rules");
        let paths = &mut rules[0].http.as_mut().expect("http").paths;
        let mut p = paths[0].clone();
        p.path = Some("/admin".into());
        paths.push(p);
        assert!(!in_sync(&l, &desired()));
    }

    #[test]
    fn changed_backend_path_type_or_class_is_drift() {
        let mut l = live();
        let rules = l
            .spec
            .as_mut()
            .and_then(|s| s.rules.as_mut())
            .expect("rules");
        rules[0].http.as_mut().expect("http").paths[0].path_type = "Exact".into();
        assert!(!in_sync(&l, &desired()));

        let mut l = live();
        let rules = l
            .spec
            .as_mut()
            .and_then(|s| s.rules.as_mut())
            .expect("rules");
        let svc = rules[0].http.as_mut().expect("http").paths[0]
            .backend
            .service
            .as_mut()
            .expect("svc");
        svc.name = "other".into();
        assert!(!in_sync(&l, &desired()));

        let mut l = live();
        if let Some(s) = l.spec.as_mut() {
            s.ingress_class_name = None;
        }
        assert!(!in_sync(&l, &desired()));

        let mut l = live();
        l.spec = None;
        assert!(!in_sync(&l, &desired()));
    }

    #[test]
    fn changed_or_missing_label_is_drift() {
        let mut l = live();
        l.metadata.labels = None;
        assert!(!in_sync(&l, &desired()));
        let mut l = live();
        l.metadata
            .labels
            .get_or_insert_default()
            .insert("app.kubernetes.io/managed-by".into(), "someone".into());
        assert!(!in_sync(&l, &desired()));
    }

    #[test]
    fn changed_or_missing_owner_reference_is_drift() {
        let mut l = live();
        l.metadata.owner_references = None;
        assert!(!in_sync(&l, &desired()));
        let mut l = live();
        if let Some(r) = l.metadata.owner_references.as_mut() {
            r[0].block_owner_deletion = Some(false);
        }
        assert!(!in_sync(&l, &desired()));
        let mut l = live();
        if let Some(r) = l.metadata.owner_references.as_mut() {
            r[0].controller = None;
        }
        assert!(!in_sync(&l, &desired()));
    }
}

//! Who owns an Ingress: the ownerReference that ties a managed Ingress to its Service. It is
//! both what the garbage collector follows when the Service goes and the only proof that an
//! Ingress is ours to change or delete.

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::networking::v1::Ingress;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use sluice_informer::make_key;

/// The controller ownerReference a Service's Ingress carries (`None` without a uid, i.e. for
/// an object that did not come from the API server).
pub fn owner_reference(svc: &Service) -> Option<OwnerReference> {
    Some(OwnerReference {
        api_version: "v1".to_string(),
        kind: "Service".to_string(),
        name: svc.metadata.name.clone()?,
        uid: svc.metadata.uid.clone()?,
        controller: Some(true),
        // The Service is deleted only after the Ingress under foreground deletion.
        block_owner_deletion: Some(true),
    })
}

/// Whether `ing` has an ownerReference to the object with uid `owner_uid`. The uid, not the
/// name: a Service deleted and re-created under the same name is another owner.
pub fn is_owned_by(ing: &Ingress, owner_uid: &str) -> bool {
    ing.metadata
        .owner_references
        .iter()
        .flatten()
        .any(|r| r.uid == owner_uid)
}

/// The `namespace/name` key of the Service controlling `ing`, if one does.
pub fn owner_service_key(ing: &Ingress) -> Option<String> {
    let owner = ing
        .metadata
        .owner_references
        .iter()
        .flatten()
        .find(|r| r.controller == Some(true) && r.kind == "Service" && r.api_version == "v1")?;
    // Owners live in their dependent's namespace.
    Some(make_key(ing.metadata.namespace.as_deref(), &owner.name))
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::api::ObjectMeta;

    fn svc(uid: Option<&str>) -> Service {
        Service {
            metadata: ObjectMeta {
                name: Some("web".into()),
                namespace: Some("shop".into()),
                uid: uid.map(str::to_string),
                ..ObjectMeta::default()
            },
            ..Service::default()
        }
    }

    fn ingress(owners: Vec<OwnerReference>) -> Ingress {
        Ingress {
            metadata: ObjectMeta {
                name: Some("web".into()),
                namespace: Some("shop".into()),
                owner_references: Some(owners),
                ..ObjectMeta::default()
            },
            ..Ingress::default()
        }
    }

    fn reference(
        kind: &str,
        api_version: &str,
        name: &str,
        uid: &str,
        controller: Option<bool>,
    ) -> OwnerReference {
        OwnerReference {
            api_version: api_version.into(),
            kind: kind.into(),
            name: name.into(),
            uid: uid.into(),
            controller,
            block_owner_deletion: None,
        }
    }

    #[test]
    fn owner_reference_of_a_service() {
        let r = owner_reference(&svc(Some("u1"))).expect("has uid");
        assert_eq!(
            r,
            OwnerReference {
                api_version: "v1".into(),
                kind: "Service".into(),
                name: "web".into(),
                uid: "u1".into(),
                controller: Some(true),
                block_owner_deletion: Some(true),
            }
        );
        assert_eq!(owner_reference(&svc(None)), None);
    }

    #[test]
    fn ownership_is_by_uid() {
        let ing = ingress(vec![reference("Service", "v1", "web", "u1", Some(true))]);
        assert!(is_owned_by(&ing, "u1"));
        assert!(
            !is_owned_by(&ing, "u2"),
            "same name, other uid: a re-created Service"
        );
        assert!(!is_owned_by(&ingress(vec![]), "u1"));
        let mut none = ingress(vec![]);
        none.metadata.owner_references = None;
        assert!(!is_owned_by(&none, "u1"));
        let several = ingress(vec![
            reference("ConfigMap", "v1", "x", "u9", None),
            reference("Service", "v1", "web", "u1", Some(true)),
        ]);
        assert!(is_owned_by(&several, "u1"));
    }

    #[test]
    fn owner_key_follows_the_controller_service_reference() {
        let ing = ingress(vec![reference("Service", "v1", "api", "u1", Some(true))]);
        assert_eq!(owner_service_key(&ing).as_deref(), Some("shop/api"));
        let not_controller = ingress(vec![reference("Service", "v1", "api", "u1", Some(false))]);
        assert_eq!(owner_service_key(&not_controller), None);
        let other_kind = ingress(vec![reference(
            "Deployment",
            "apps/v1",
            "api",
            "u1",
            Some(true),
        )]);
        assert_eq!(owner_service_key(&other_kind), None);
        let mixed = ingress(vec![
            reference("Service", "v1", "old", "u0", None),
            reference("Service", "v1", "api", "u1", Some(true)),
        ]);
        assert_eq!(owner_service_key(&mixed).as_deref(), Some("shop/api"));
        assert_eq!(owner_service_key(&ingress(vec![])), None);
    }
}

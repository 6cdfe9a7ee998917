//! Object transforms applied before the store (client-go `SharedIndexInformer.SetTransform`).
//!
//! The reflector passes every object it receives, from lists and from the watch, through the
//! informer's transform before the object enters the delta queue, so the store, every handler
//! and every lister only ever see the transformed object, and what the transform drops is
//! freed at once instead of living in the cache.
//!
//! By default an informer strips `metadata.managedFields`: server-side apply bookkeeping that
//! controllers rarely read, decoded by k8s-openapi into a `serde_json::Value` tree that is
//! often larger than the rest of the object. Keep it with
//! [`crate::SharedIndexInformer::keep_managed_fields`].
//!
//! [`strip_last_applied`] is a ready transform for consumers that do not read
//! `kubectl apply`'s bookkeeping either: `informer.set_transform(strip_last_applied)`.

use std::sync::Arc;

use kube::Resource;

/// The informer is already running: its transform can no longer change.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the informer has already started")]
pub struct AlreadyStarted;

/// A transform: takes an object as received and returns what the cache should hold.
pub type TransformFn<K> = Arc<dyn Fn(K) -> K + Send + Sync>;

/// Drops `metadata.managedFields` (the default transform's first step).
pub fn strip_managed_fields<K: Resource>(mut obj: K) -> K {
    obj.meta_mut().managed_fields = None;
    obj
}

/// The annotation in which `kubectl apply` keeps a JSON copy of the object as last applied
/// (spec, labels, annotations; for a Secret, its data).
pub const LAST_APPLIED_ANNOTATION: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// Drops the [`LAST_APPLIED_ANNOTATION`]: a second copy of everything `kubectl apply` set,
/// which doubles the cached size of such objects (and keeps a Secret's keys twice).
pub fn strip_last_applied<K: Resource>(mut obj: K) -> K {
    let annotations = &mut obj.meta_mut().annotations;
    if let Some(map) = annotations.as_mut() {
        map.remove(LAST_APPLIED_ANNOTATION);
        if map.is_empty() {
            *annotations = None;
        }
    }
    obj
}

/// What the reflector applies to each object: `managedFields` stripping (unless kept) and then
/// the caller's transform, if any.
pub(crate) struct Transform<K> {
    pub(crate) strip_managed_fields: bool,
    pub(crate) user: Option<TransformFn<K>>,
}

impl<K> Clone for Transform<K> {
    fn clone(&self) -> Self {
        Self {
            strip_managed_fields: self.strip_managed_fields,
            user: self.user.clone(),
        }
    }
}

impl<K> Default for Transform<K> {
    fn default() -> Self {
        Self {
            strip_managed_fields: true,
            user: None,
        }
    }
}

impl<K: Resource> Transform<K> {
    /// Applies the transform to one object.
    pub(crate) fn apply(&self, obj: K) -> K {
        let obj = if self.strip_managed_fields {
            strip_managed_fields(obj)
        } else {
            obj
        };
        match &self.user {
            Some(f) => f(obj),
            None => obj,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Secret;
    use kube::api::ObjectMeta;
    use std::collections::BTreeMap;

    fn secret(annotations: &[(&str, &str)]) -> Secret {
        Secret {
            metadata: ObjectMeta {
                name: Some("tls".into()),
                annotations: Some(
                    annotations
                        .iter()
                        .map(|(k, v)| (k.to_string(), v.to_string()))
                        .collect(),
                ),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    #[test]
    fn last_applied_goes_other_annotations_stay() {
        let applied = r#"{"data":{"tls.key":"c2VjcmV0"}}"#;
        let obj = strip_last_applied(secret(&[
            (LAST_APPLIED_ANNOTATION, applied),
            ("nginx.ingress.kubernetes.io/rewrite-target", "/"),
        ]));
        assert_eq!(
            obj.metadata.annotations,
            Some(BTreeMap::from([(
                "nginx.ingress.kubernetes.io/rewrite-target".to_string(),
                "/".to_string()
            )]))
        );
        let only = strip_last_applied(secret(&[(LAST_APPLIED_ANNOTATION, applied)]));
        assert_eq!(only.metadata.annotations, None, "no empty map left behind");
        assert_eq!(strip_last_applied(Secret::default()), Secret::default());
    }
}

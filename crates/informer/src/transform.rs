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

//! ListenerSet (Gateway API `ListenerSet`): listeners another team adds to a Gateway that
//! allows it (`spec.allowedListeners`, none by default). They are served on the Gateway's
//! addresses, after the Gateway's own listeners in precedence (then ListenerSets oldest
//! first, then by namespace/name); a listener that conflicts with one earlier in that order
//! is not served, the earlier one keeps its port and name. Routes attach to them by naming
//! the ListenerSet as parent, and to the Gateway's own listeners by naming the Gateway:
//! neither reaches the other's listeners.

use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::types::{GROUP, Gateway, ListenerSet};
use crate::refs::Age;

/// Who declares a listener: a Gateway or a ListenerSet (indices into the compiler's lists).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Owner {
    Gateway(usize),
    ListenerSet(usize),
}

/// Whether `set` names `gateway` (namespace/name) as its parent.
pub(super) fn names(set: &ListenerSet, gateway: &ObjectMeta) -> bool {
    let parent = &set.spec.parent_ref;
    let set_ns = set.metadata.namespace.as_deref().unwrap_or("");
    parent.group.as_deref().unwrap_or(GROUP) == GROUP
        && parent.kind.as_deref().unwrap_or("Gateway") == "Gateway"
        && parent.namespace.as_deref().unwrap_or(set_ns)
            == gateway.namespace.as_deref().unwrap_or("")
        && Some(parent.name.as_str()) == gateway.name.as_deref()
}

/// The ListenerSets naming `gateway`, in precedence order: oldest first, then by
/// namespace/name.
pub(super) fn of_gateway<'a>(
    sets: &'a crate::ObjectList<ListenerSet>,
    gateway: &Gateway,
) -> Vec<&'a Arc<ListenerSet>> {
    let mut out: Vec<&Arc<ListenerSet>> = sets
        .iter()
        .filter(|s| names(s, &gateway.metadata))
        .collect();
    out.sort_by_cached_key(|s| Age::of(&s.metadata));
    out
}

/// How `gateway` lets ListenerSets in: `allowedListeners.namespaces.from`.
pub(super) enum AllowedSets<'a> {
    None,
    Same,
    All,
    Selector(&'a k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector),
}

/// `gateway`'s `allowedListeners` (none when unset, as the spec's default).
pub(super) fn allowed(gateway: &Gateway) -> AllowedSets<'_> {
    let Some(namespaces) = gateway
        .spec
        .allowed_listeners
        .as_ref()
        .and_then(|a| a.namespaces.as_ref())
    else {
        return AllowedSets::None;
    };
    match (namespaces.from.as_deref(), &namespaces.selector) {
        (Some("Same"), _) => AllowedSets::Same,
        (Some("All"), _) => AllowedSets::All,
        (Some("Selector"), Some(selector)) => AllowedSets::Selector(selector),
        _ => AllowedSets::None,
    }
}

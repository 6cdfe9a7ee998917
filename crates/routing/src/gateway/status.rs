//! What the compiler concludes about each Gateway API object of ours: the conditions the
//! controller writes to `status` (with `observedGeneration` = [`ObjectStatus::generation`]).
//!
//! Condition types and reasons are the spec's (`gateway.networking.k8s.io/v1`); the
//! controller adds `lastTransitionTime`, keeping the old one when status and reason did not
//! change.

use crate::gateway::types::{ParentReference, RouteGroupKind};
use crate::refs::ObjectRef;
use sluice_persistent::SortedChunks;

/// One condition: `type`, `status` (`"True"`/`"False"`), `reason`, `message`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Condition {
    /// `Accepted`, `Programmed`, `ResolvedRefs`, ...
    pub type_: &'static str,
    /// `True` or `False`.
    pub status: bool,
    /// The spec's reason (`Accepted`, `NotAllowedByListeners`, `BackendNotFound`, ...).
    pub reason: &'static str,
    /// A sentence for people.
    pub message: String,
}

impl Condition {
    /// A condition that holds.
    pub fn yes(type_: &'static str, reason: &'static str, message: impl Into<String>) -> Self {
        Condition {
            type_,
            status: true,
            reason,
            message: message.into(),
        }
    }

    /// A condition that does not hold.
    pub fn no(type_: &'static str, reason: &'static str, message: impl Into<String>) -> Self {
        Condition {
            type_,
            status: false,
            reason,
            message: message.into(),
        }
    }

    /// `"True"` or `"False"`, as written to the API.
    pub fn status_str(&self) -> &'static str {
        if self.status { "True" } else { "False" }
    }
}

/// The conditions of one object and the generation they describe.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ObjectStatus {
    /// The object (kind `GatewayClass`, `Gateway` or `HTTPRoute`).
    pub object: ObjectRef,
    /// `metadata.generation` of the object compiled: `observedGeneration`.
    pub generation: Option<i64>,
    /// The conditions, in a fixed order.
    pub conditions: Vec<Condition>,
}

/// `Gateway.status.listeners[]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ListenerStatus {
    /// The listener's name.
    pub name: String,
    /// Routes attached to it (accepted for it).
    pub attached_routes: i32,
    /// Route kinds it accepts (those of `allowedRoutes.kinds` sluice supports).
    pub supported_kinds: Vec<RouteGroupKind>,
    /// `Accepted`, `Programmed`, `ResolvedRefs`, `Conflicted`.
    pub conditions: Vec<Condition>,
    /// The sockets the proxy binds for it (the Gateway's own addresses, at the listener's
    /// port); empty on the shared listeners. The controller marks the listener and its
    /// Gateway `Programmed=False` (`AddressNotUsable`) when one cannot be bound.
    pub binds: Vec<std::net::SocketAddr>,
}

/// A Gateway's status: its own conditions and its listeners'.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GatewayStatus {
    /// `Accepted` and `Programmed` of the Gateway.
    pub gateway: ObjectStatus,
    /// One per listener, in spec order.
    pub listeners: Vec<ListenerStatus>,
    /// `status.addresses`: the Gateway's own IP addresses; `None` on the shared listeners
    /// (the controller publishes the proxy's addresses, as for Ingresses).
    pub addresses: Option<Vec<std::net::IpAddr>>,
    /// `status.attachedListenerSets`: accepted ListenerSets; `None` when the Gateway allows
    /// none.
    pub attached_listener_sets: Option<i32>,
}

/// A ListenerSet's status: `Accepted` and `Programmed`, and its listeners'.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ListenerSetStatus {
    /// The ListenerSet and its conditions.
    pub listener_set: ObjectStatus,
    /// One per listener, in spec order (none when its Gateway does not allow it).
    pub listeners: Vec<ListenerStatus>,
}

/// `HTTPRoute.status.parents[]` for one parentRef that names a Gateway of ours.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RouteParentStatus {
    /// The parentRef as written in the route (the spec wants it echoed).
    pub parent_ref: ParentReference,
    /// `Accepted` and `ResolvedRefs`.
    pub conditions: Vec<Condition>,
}

/// An HTTPRoute's status for the parents that are ours.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RouteStatus {
    /// The route (kind `HTTPRoute`).
    pub object: ObjectRef,
    /// `metadata.generation`: every parent's `observedGeneration`.
    pub generation: Option<i64>,
    /// One per parentRef naming a Gateway of our class (others are another controller's
    /// business and are left as they are).
    pub parents: Vec<RouteParentStatus>,
}

/// Everything the controller writes for Gateway API objects after one compile.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GatewayStatuses {
    /// GatewayClasses whose `controllerName` is ours: `Accepted` (and `SupportedVersion`).
    pub classes: Vec<ObjectStatus>,
    /// Gateways of those classes.
    pub gateways: Vec<GatewayStatus>,
    /// HTTPRoutes with at least one parentRef to one of those Gateways, sorted by object.
    /// Each is an `Arc` in shared chunks: an incremental compile hands out the same
    /// statuses again, and copying tens of thousands of them (or of their reference
    /// counts) per change would cost more than the compile.
    pub routes: SortedChunks<std::sync::Arc<RouteStatus>>,
    /// BackendTLSPolicies that apply to traffic of those Gateways.
    pub policies: Vec<PolicyStatus>,
    /// ListenerSets naming those Gateways.
    pub listener_sets: Vec<ListenerSetStatus>,
}

/// A policy's status (`status.ancestors[]`): one entry per Gateway of ours whose routes
/// send to what it targets.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PolicyStatus {
    /// The policy (kind `BackendTLSPolicy`).
    pub object: ObjectRef,
    /// `metadata.generation`: every ancestor's `observedGeneration`.
    pub generation: Option<i64>,
    /// `ancestorRef` (a Gateway) and its `Accepted` and `ResolvedRefs` conditions.
    pub ancestors: Vec<RouteParentStatus>,
}

impl GatewayStatuses {
    /// Marks what could not be bound: each listener with a socket in `failures` gets
    /// `Programmed=False`, and so does its Gateway (Gateway API reason `AddressNotUsable`),
    /// naming the socket and the operating system's error.
    pub fn mark_unbound(
        &mut self,
        failures: &std::collections::BTreeMap<std::net::SocketAddr, String>,
    ) {
        if failures.is_empty() {
            return;
        }
        for gateway in &mut self.gateways {
            let mut first: Option<String> = None;
            for listener in &mut gateway.listeners {
                let Some((addr, why)) = listener
                    .binds
                    .iter()
                    .find_map(|addr| failures.get(addr).map(|why| (addr, why)))
                else {
                    continue;
                };
                let message = format!("cannot listen on {addr}: {why}");
                set(
                    &mut listener.conditions,
                    Condition::no("Programmed", "AddressNotUsable", message.clone()),
                );
                first.get_or_insert(message);
            }
            if let Some(message) = first {
                set(
                    &mut gateway.gateway.conditions,
                    Condition::no("Programmed", "AddressNotUsable", message),
                );
            }
        }
    }
}

/// Replaces the condition of `condition`'s type in `conditions`, or adds it.
fn set(conditions: &mut Vec<Condition>, condition: Condition) {
    match conditions.iter_mut().find(|c| c.type_ == condition.type_) {
        Some(old) => *old = condition,
        None => conditions.push(condition),
    }
}

//! A Gateway API `backendRefs[]` entry with its weight: what HTTP rules and stream routes
//! (TCPRoute, TLSRoute, UDPRoute) draw a backend from.

use std::sync::Arc;

use crate::backend::Backend;

/// One `backendRefs[]` entry of a Gateway API rule.
#[derive(Debug, Clone)]
pub struct WeightedBackend {
    /// The Service port (without endpoints when the reference could not be resolved).
    pub backend: Arc<Backend>,
    /// Relative share (`weight`, default 1; 0: never chosen).
    pub weight: u32,
    /// `false` when the reference is invalid (unknown Service or kind, not permitted
    /// across namespaces): requests drawn for it get 500, as the spec says.
    pub usable: bool,
    /// The entry (index) whose policy applies to requests drawn for this backend, when the
    /// `backendRef` has filters of its own (the rule's entry with them applied); `None`:
    /// the rule's entry.
    pub entry: Option<usize>,
}

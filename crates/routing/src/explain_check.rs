//! One line of `sluice explain`'s rule list: a rule (an Ingress path, a Gateway API route
//! match) and whether it answers the request, and why not.

use crate::refs::ObjectRef;

/// One rule path (or one Ingress, when its class is not ours) and its verdict.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Check {
    /// The Ingress.
    pub ingress: ObjectRef,
    /// The field, e.g. `spec.rules[0].http.paths[1]`; `spec.ingressClassName` for a class
    /// verdict.
    pub field: String,
    /// The rule in words: `shop.example Prefix /api`.
    pub rule: String,
    /// Whether this is the rule that answers.
    pub selected: bool,
    /// Why (not): a sentence.
    pub reason: String,
}

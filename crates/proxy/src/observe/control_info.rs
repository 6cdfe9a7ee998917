//! What the control plane reports to the admin server besides the routing table: warnings
//! for people, and the function that explains a request. Kept apart from the dashboard so
//! the snapshot (which stores it) and the dashboard (which reads the snapshot) do not
//! import each other.

use std::sync::Arc;

/// A problem the control plane wants people to see (an invalid object, an unsupported
/// annotation, a flag's object missing), shown by the dashboard and `/api/v1/status`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Warning {
    /// The object, e.g. `Ingress default/web`.
    pub object: String,
    /// The field at fault, e.g. `metadata.annotations.nginx.ingress.kubernetes.io/foo`.
    pub field: String,
    /// Machine-readable reason, e.g. `UnsupportedAnnotation`.
    pub reason: String,
    /// The sentence.
    pub message: String,
}

/// Answers `sluice explain` for a request (the control plane has the objects).
pub type Explainer = dyn Fn(&sluice_routing::ExplainRequest) -> String + Send + Sync;

/// What the control plane reports besides the table.
#[derive(Default)]
pub(crate) struct ControlInfo {
    pub(crate) warnings: Vec<Warning>,
    pub(crate) explainer: Option<Arc<Explainer>>,
}

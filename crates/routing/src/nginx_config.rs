//! What ingress-nginx's ConfigMap comes to in sluice (read by
//! `ingress/config_map`): plain data the compiler's inputs and outputs carry.

use std::collections::BTreeMap;

use crate::cidr::Cidr;

/// The ConfigMap as sluice applies it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NginxConfig {
    /// Annotation defaults: key (without prefix) and value, each one that parses.
    pub annotation_defaults: BTreeMap<String, String>,
    /// `block-cidrs`: clients refused (403) on every Ingress route.
    pub block_cidrs: Vec<Cidr>,
    /// `allow-snippet-annotations` (default false).
    pub allow_snippet_annotations: bool,
    /// `annotations-risk-level: Critical` (default `High`): ingress-nginx >= 1.12 accepts
    /// snippet annotations (risk Critical) only with it.
    pub critical_risk_accepted: bool,
    /// The raw value of each key applied, for telling later what changed.
    pub(crate) applied: BTreeMap<String, String>,
}

impl NginxConfig {
    /// Whether `configuration-snippet` and `server-snippet` are interpreted: both switches
    /// on, as ingress-nginx >= 1.12 requires.
    pub fn snippets_allowed(&self) -> bool {
        self.allow_snippet_annotations && self.critical_risk_accepted
    }
}

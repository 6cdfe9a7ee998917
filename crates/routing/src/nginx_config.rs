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
    /// `global-allowed-response-headers`: the header names `custom-headers` may set
    /// (compared exactly, as ingress-nginx does).
    pub allowed_response_headers: Vec<String>,
    /// The raw value of each key applied, for telling later what changed.
    pub(crate) applied: BTreeMap<String, String>,
}

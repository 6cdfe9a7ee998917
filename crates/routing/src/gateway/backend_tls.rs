//! BackendTLSPolicy (Gateway API `BackendTLSPolicy`, `BackendTLSPolicySANValidation`): TLS
//! from the proxy to a Service's port, the backend's certificate checked against the CA
//! certificates of the policy's ConfigMaps and its `hostname` (sent as SNI) or, when given,
//! its `subjectAltNames`.
//!
//! Resolved before any route is compiled: the setting becomes part of the Service port's
//! [`crate::Backend`] (so every route to that port, Ingress ones included, connects with
//! TLS; a route's own `backend-protocol`/`proxy-ssl-*` annotations still win). A policy
//! whose references cannot be used is not Accepted and its Service port is connected to
//! with verification that trusts nothing: requests fail (502) instead of going out
//! unverified. Two policies for the same Service port conflict: the oldest wins (the
//! spec's rule), the other is `Accepted: False` with reason `Conflicted`.

use std::collections::HashMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::status::Condition;
use super::types::BackendTlsPolicy;
use crate::protocol::{SubjectAltName, UpstreamTls, UpstreamTlsByPort};
use crate::refs::{Age, ObjectRef};
use crate::tls::{CA_CERT_KEY, parse_ca_bundle};

/// The policies of a compilation: the winners' settings by Service port, and each
/// policy's conditions.
#[derive(Debug, Default)]
pub(crate) struct BackendTlsPolicies {
    /// The settings the Service index applies.
    pub by_port: UpstreamTlsByPort,
    /// Every policy of ours, in namespace/name order.
    pub outcomes: Vec<PolicyOutcome>,
}

/// What one policy came to.
#[derive(Debug, Clone)]
pub(crate) struct PolicyOutcome {
    /// The policy.
    pub object: ObjectRef,
    /// `metadata.generation`.
    pub generation: Option<i64>,
    /// The Services (namespace, name) it targets.
    pub services: Vec<(String, String)>,
    /// `Accepted` and `ResolvedRefs`.
    pub conditions: Vec<Condition>,
}

/// Resolves `policies` (those `watched` says are ours) against `config_maps`.
pub(crate) fn resolve(
    policies: &crate::ObjectList<BackendTlsPolicy>,
    config_maps: &HashMap<(&str, &str), &ConfigMap>,
    watched: impl Fn(&ObjectMeta) -> bool,
) -> BackendTlsPolicies {
    let mut ours: Vec<&BackendTlsPolicy> = policies
        .iter()
        .map(|p| &**p)
        .filter(|p| watched(&p.metadata))
        .collect();
    // Oldest first: the spec's rule for conflicts.
    ours.sort_by_cached_key(|p| Age::of(&p.metadata));
    let mut out = BackendTlsPolicies::default();
    for policy in ours {
        let namespace = policy.metadata.namespace.clone().unwrap_or_default();
        let name = policy.metadata.name.clone().unwrap_or_default();
        let object = ObjectRef {
            kind: "BackendTLSPolicy",
            namespace: namespace.clone(),
            name,
        };
        let (tls, mut conditions) = setting(policy, &namespace, &object, config_maps);
        let tls = Arc::new(tls);
        let targets: Vec<(&str, Option<&str>)> = (policy.spec.target_refs.iter())
            .filter(|t| t.group.is_empty() && t.kind == "Service")
            .map(|t| (t.name.as_str(), t.section_name.as_deref()))
            .collect();
        let mut conflicted = None;
        for (service, section) in &targets {
            let slot = out
                .by_port
                .by_service
                .entry((namespace.clone(), (*service).to_owned()))
                .or_default();
            match slot.iter().find(|(s, _)| s.as_deref() == *section) {
                Some((_, older)) => {
                    conflicted.get_or_insert_with(|| older.policy.clone());
                }
                None => slot.push((section.map(str::to_owned), Arc::clone(&tls))),
            }
        }
        if let Some(Some(older)) = conflicted {
            conditions[0] = Condition::no(
                "Accepted",
                "Conflicted",
                format!("{older} is older and targets the same Service port"),
            );
        }
        let mut services: Vec<(String, String)> = targets
            .iter()
            .map(|(s, _)| (namespace.clone(), (*s).to_owned()))
            .collect();
        services.dedup();
        out.outcomes.push(PolicyOutcome {
            object,
            generation: policy.metadata.generation,
            services,
            conditions,
        });
    }
    out.outcomes.sort_by(|a, b| a.object.cmp(&b.object));
    out
}

/// The TLS setting of `policy` and its `Accepted` and `ResolvedRefs` conditions. A policy
/// that cannot be used gets a setting that trusts nothing.
fn setting(
    policy: &BackendTlsPolicy,
    namespace: &str,
    object: &ObjectRef,
    config_maps: &HashMap<(&str, &str), &ConfigMap>,
) -> (UpstreamTls, Vec<Condition>) {
    let validation = &policy.spec.validation;
    let subject_alt_names = validation
        .subject_alt_names
        .iter()
        .filter_map(|san| match san.type_.as_str() {
            "Hostname" => san.hostname.clone().map(SubjectAltName::Dns),
            "URI" => san.uri.clone().map(SubjectAltName::Uri),
            _ => None,
        })
        .collect();
    let mut tls = UpstreamTls {
        verify: true,
        name: Some(validation.hostname.clone()),
        server_name: true,
        subject_alt_names,
        policy: Some(object.clone()),
        ..UpstreamTls::default()
    };
    let refused = |reason: &'static str, message: String| {
        vec![
            Condition::no(
                "Accepted",
                "NoValidCACertificate",
                "no valid CA certificate; see ResolvedRefs",
            ),
            Condition::no("ResolvedRefs", reason, message),
        ]
    };
    if validation.well_known_ca_certificates.is_some() {
        let message = "spec.validation.wellKnownCACertificates is not supported; name the CA \
                       certificates in caCertificateRefs"
            .to_owned();
        return (tls, refused("InvalidCACertificateRef", message));
    }
    if validation.ca_certificate_refs.is_empty() {
        let message = "spec.validation.caCertificateRefs is empty".to_owned();
        return (tls, refused("InvalidCACertificateRef", message));
    }
    let mut trusted = Vec::new();
    for (i, r) in validation.ca_certificate_refs.iter().enumerate() {
        let at = format!("spec.validation.caCertificateRefs[{i}]");
        if !r.group.is_empty() || r.kind != "ConfigMap" {
            let message = format!(
                "{at}: kind {:?} (group {:?}) is not supported; sluice reads core ConfigMaps",
                r.kind, r.group
            );
            return (tls, refused("InvalidKind", message));
        }
        let pem = config_maps
            .get(&(namespace, r.name.as_str()))
            .and_then(|c| c.data.as_ref())
            .and_then(|d| d.get(CA_CERT_KEY));
        let Some(pem) = pem.filter(|p| !p.trim().is_empty()) else {
            let message = format!(
                "{at}: ConfigMap {namespace}/{} not found, or it has no {CA_CERT_KEY}",
                r.name
            );
            return (tls, refused("InvalidCACertificateRef", message));
        };
        match parse_ca_bundle(pem.as_bytes()) {
            Ok(certs) => trusted.extend(certs),
            Err(why) => {
                let message = format!("{at}: ConfigMap {namespace}/{}: {why}", r.name);
                return (tls, refused("InvalidCACertificateRef", message));
            }
        }
    }
    tls.trusted = trusted;
    (
        tls,
        vec![
            Condition::yes("Accepted", "Accepted", "accepted"),
            Condition::yes("ResolvedRefs", "ResolvedRefs", "references resolved"),
        ],
    )
}

//! Client certificate validation on a Gateway's HTTPS ports (`spec.tls.frontend`, Gateway
//! API `GatewayFrontendClientCertificateValidation`): which settings apply to a listener's
//! port, and the CA certificates its `caCertificateRefs` name.
//!
//! `perPort[]` replaces `default` on its port; the settings apply to `HTTPS` listeners (an
//! `HTTP` listener on a port named there is unaffected). A reference that cannot be used
//! makes the listener not Accepted (`NoValidCACertificate`): a port that is to check
//! client certificates never serves without checking them.

use std::sync::Arc;

use super::compile::GatewayCompiler;
use super::types::{FrontendTlsConfig, FrontendValidation, Gateway};
use crate::refs::ObjectRef;
use crate::tls::{CA_CERT_KEY, ClientValidation, parse_ca_bundle};

/// `mode` that serves clients without a valid certificate too.
const INSECURE_FALLBACK: &str = "AllowInsecureFallback";

/// An HTTPS listener's client certificate validation.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum ClientAuth {
    /// Checked against these roots.
    Validate(Arc<ClientValidation>),
    /// Asked for, but the references cannot be used: the listener is not served.
    Broken,
}

/// Why a listener's validation settings cannot be used: the `ResolvedRefs` reason and a
/// message naming the field.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Unresolved {
    pub reason: &'static str,
    pub message: String,
}

/// The settings of `gateway` for a listener on `port`, and the field they are at.
pub(super) fn settings_for(gateway: &Gateway, port: i32) -> Option<(&FrontendValidation, String)> {
    let frontend = gateway.spec.tls.as_ref()?.frontend.as_ref()?;
    if let Some((i, per_port)) =
        (frontend.per_port.iter().enumerate()).find(|(_, p)| p.port == port)
    {
        let field = format!("spec.tls.frontend.perPort[{i}].tls.validation");
        return per_port.tls.validation.as_ref().map(|v| (v, field));
    }
    let FrontendTlsConfig { validation } = frontend.default.as_ref()?;
    validation
        .as_ref()
        .map(|v| (v, "spec.tls.frontend.default.validation".to_owned()))
}

/// Whether any of `gateway`'s settings serves clients without a valid certificate (the
/// Gateway's `InsecureFrontendValidationMode` condition).
pub(super) fn insecure_fallback(gateway: &Gateway) -> bool {
    let Some(frontend) = gateway.spec.tls.as_ref().and_then(|t| t.frontend.as_ref()) else {
        return false;
    };
    let default = frontend.default.iter().map(|d| &d.validation);
    let per_port = frontend.per_port.iter().map(|p| &p.tls.validation);
    default
        .chain(per_port)
        .flatten()
        .any(|v| v.mode.as_deref() == Some(INSECURE_FALLBACK))
}

impl GatewayCompiler<'_, '_> {
    /// Resolves `validation` (at `field` of a Gateway in `namespace`): every reference must
    /// be a core ConfigMap, permitted, present, with a usable `ca.crt`.
    pub(super) fn client_validation(
        &self,
        namespace: &str,
        validation: &FrontendValidation,
        field: &str,
    ) -> Result<Arc<ClientValidation>, Unresolved> {
        if validation.ca_certificate_refs.is_empty() {
            return Err(Unresolved {
                reason: "InvalidCACertificateRef",
                message: format!("{field}.caCertificateRefs is empty"),
            });
        }
        let mut roots = Vec::new();
        let mut sources = Vec::new();
        for (i, r) in validation.ca_certificate_refs.iter().enumerate() {
            let at = format!("{field}.caCertificateRefs[{i}]");
            if !r.group.is_empty() || r.kind != "ConfigMap" {
                return Err(Unresolved {
                    reason: "InvalidCACertificateKind",
                    message: format!(
                        "{at}: kind {:?} (group {:?}) is not supported; sluice reads core \
                         ConfigMaps",
                        r.kind, r.group
                    ),
                });
            }
            let ns = r.namespace.as_deref().unwrap_or(namespace);
            if ns != namespace && !self.granted("Gateway", namespace, ns, "", "ConfigMap", &r.name)
            {
                return Err(Unresolved {
                    reason: "RefNotPermitted",
                    message: format!(
                        "{at}: ConfigMap {ns}/{} is in another namespace and no ReferenceGrant \
                         there allows it",
                        r.name
                    ),
                });
            }
            let bundle = self
                .config_maps
                .get(&(ns, r.name.as_str()))
                .ok_or_else(|| Unresolved {
                    reason: "InvalidCACertificateRef",
                    message: format!("{at}: ConfigMap {ns}/{} not found", r.name),
                })?
                .data
                .as_ref()
                .and_then(|d| d.get(CA_CERT_KEY))
                .filter(|pem| !pem.trim().is_empty())
                .ok_or_else(|| Unresolved {
                    reason: "InvalidCACertificateRef",
                    message: format!("{at}: ConfigMap {ns}/{} has no {CA_CERT_KEY}", r.name),
                })?;
            let certs = parse_ca_bundle(bundle.as_bytes()).map_err(|why| Unresolved {
                reason: "InvalidCACertificateRef",
                message: format!("{at}: ConfigMap {ns}/{}: {why}", r.name),
            })?;
            roots.extend(certs);
            sources.push(ObjectRef {
                kind: "ConfigMap",
                namespace: ns.to_owned(),
                name: r.name.clone(),
            });
        }
        Ok(Arc::new(ClientValidation {
            roots,
            insecure_fallback: validation.mode.as_deref() == Some(INSECURE_FALLBACK),
            sources,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gateway(yaml: &str) -> Gateway {
        serde_json::from_value(serde_json::from_str::<serde_json::Value>(yaml).expect("json"))
            .expect("gateway")
    }

    #[test]
    fn per_port_replaces_default_on_its_port_only() {
        let g = gateway(
            r#"{"metadata": {"name": "g"}, "spec": {"gatewayClassName": "c", "tls": {"frontend": {
                "default": {"validation": {"caCertificateRefs": [{"kind": "ConfigMap", "group": "", "name": "d"}]}},
                "perPort": [{"port": 8443, "tls": {"validation": {"mode": "AllowInsecureFallback",
                    "caCertificateRefs": [{"kind": "ConfigMap", "group": "", "name": "p"}]}}},
                    {"port": 9443, "tls": {}}]}}}}"#,
        );
        let name =
            |port| settings_for(&g, port).map(|(v, f)| (v.ca_certificate_refs[0].name.clone(), f));
        assert_eq!(
            name(443),
            Some((
                "d".to_owned(),
                "spec.tls.frontend.default.validation".to_owned()
            ))
        );
        assert_eq!(
            name(8443),
            Some((
                "p".to_owned(),
                "spec.tls.frontend.perPort[0].tls.validation".to_owned()
            ))
        );
        // A perPort entry without validation turns it off on its port.
        assert_eq!(name(9443), None);
        assert!(insecure_fallback(&g));
    }

    #[test]
    fn no_frontend_no_validation() {
        let g = gateway(r#"{"metadata": {"name": "g"}, "spec": {"gatewayClassName": "c"}}"#);
        assert!(settings_for(&g, 443).is_none());
        assert!(!insecure_fallback(&g));
    }
}

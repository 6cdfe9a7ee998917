//! How the proxy talks to a route's backend: the protocol (ingress-nginx's
//! `backend-protocol`, or the Service port's `appProtocol` as Gateway API reads it) and TLS
//! towards the backend (`proxy-ssl-*`).
//!
//! Everything here is parsed once at compile time. The proxy builds one TLS client
//! configuration per distinct [`UpstreamTls`] when a table is installed, never per request.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Secret;
use rustls_pki_types::CertificateDer;

use crate::openssl_ciphers::{ProtocolList, Tls12Suite};
use crate::refs::ObjectRef;
use crate::tls::{CA_CERT_KEY, TlsCertificate, parse_secret, secret_value};

/// The wire protocol towards a backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum UpstreamProtocol {
    /// HTTP/1.1 over TCP (the default).
    Http,
    /// HTTP/1.1 over TLS (`HTTPS`).
    Https,
    /// HTTP/2 over TCP with prior knowledge (`H2C`, Service `appProtocol: kubernetes.io/h2c`).
    H2c,
    /// gRPC: HTTP/2 over TCP; failures are answered in gRPC's shape (`GRPC`).
    Grpc,
    /// gRPC over TLS with ALPN `h2` (`GRPCS`).
    Grpcs,
}

impl UpstreamProtocol {
    /// Whether the connection is TLS.
    pub fn tls(self) -> bool {
        matches!(self, UpstreamProtocol::Https | UpstreamProtocol::Grpcs)
    }

    /// Whether requests go over HTTP/2.
    pub fn http2(self) -> bool {
        matches!(
            self,
            UpstreamProtocol::H2c | UpstreamProtocol::Grpc | UpstreamProtocol::Grpcs
        )
    }

    /// Whether failures are answered as gRPC errors (HTTP 200 with `grpc-status`).
    pub fn grpc(self) -> bool {
        matches!(self, UpstreamProtocol::Grpc | UpstreamProtocol::Grpcs)
    }

    /// The name `backend-protocol` uses.
    pub fn as_str(self) -> &'static str {
        match self {
            UpstreamProtocol::Http => "HTTP",
            UpstreamProtocol::Https => "HTTPS",
            UpstreamProtocol::H2c => "H2C",
            UpstreamProtocol::Grpc => "GRPC",
            UpstreamProtocol::Grpcs => "GRPCS",
        }
    }
}

/// `backend-protocol`: ingress-nginx's values (case-insensitive, as it upper-cases them),
/// plus `H2C`. `AUTO_HTTP` is HTTP/1.1 here; FCGI and AJP are not HTTP and are refused.
pub(crate) fn parse_backend_protocol(value: &str) -> Result<UpstreamProtocol, String> {
    match value.trim().to_ascii_uppercase().as_str() {
        "HTTP" | "AUTO_HTTP" => Ok(UpstreamProtocol::Http),
        "HTTPS" => Ok(UpstreamProtocol::Https),
        "GRPC" => Ok(UpstreamProtocol::Grpc),
        "GRPCS" => Ok(UpstreamProtocol::Grpcs),
        "H2C" => Ok(UpstreamProtocol::H2c),
        "FCGI" | "AJP" => Err(format!(
            "{} backends are not supported; the backend stays HTTP",
            value.trim()
        )),
        _ => Err(format!(
            "value {:?} is not one of HTTP, HTTPS, GRPC, GRPCS, H2C; the backend stays HTTP",
            value.trim()
        )),
    }
}

/// A Service port's `appProtocol`, where it names an HTTP flavour sluice speaks
/// (Gateway API's GEP-1911 names `kubernetes.io/h2c`, `kubernetes.io/ws`,
/// `kubernetes.io/wss`; `https` and `grpc` are common unprefixed values). Anything else
/// leaves the default.
pub fn app_protocol(value: &str) -> Option<UpstreamProtocol> {
    match value.to_ascii_lowercase().as_str() {
        "kubernetes.io/h2c" | "h2c" => Some(UpstreamProtocol::H2c),
        "grpc" => Some(UpstreamProtocol::Grpc),
        "https" | "kubernetes.io/wss" => Some(UpstreamProtocol::Https),
        "grpcs" => Some(UpstreamProtocol::Grpcs),
        "http" | "kubernetes.io/ws" => Some(UpstreamProtocol::Http),
        _ => None,
    }
}

/// TLS towards the backend (`proxy-ssl-*`). Without any of these annotations a TLS backend
/// is not verified, as ingress-nginx's default `proxy-ssl-verify: off`.
#[derive(Debug, Clone, Default)]
pub struct UpstreamTls {
    /// `proxy-ssl-verify: on`: the backend's certificate must chain to `trusted` and name
    /// the verified name.
    pub verify: bool,
    /// `proxy-ssl-name`: the name verified (and sent as SNI); default: the Service's
    /// cluster name `<service>.<namespace>.svc`.
    pub name: Option<String>,
    /// `proxy-ssl-server-name: on`: send SNI (nginx's default is off).
    pub server_name: bool,
    /// `ca.crt` of `proxy-ssl-secret`: the roots a verified backend must chain to.
    pub trusted: Vec<CertificateDer<'static>>,
    /// `tls.crt`/`tls.key` of `proxy-ssl-secret`: the client certificate shown to the
    /// backend.
    pub client: Option<Arc<TlsCertificate>>,
    /// The Secret `proxy-ssl-secret` named.
    pub secret: Option<ObjectRef>,
    /// Names of which the certificate must carry one, instead of the verified name
    /// (BackendTLSPolicy `subjectAltNames`); the verified name is then sent as SNI only.
    pub subject_alt_names: Vec<SubjectAltName>,
    /// The BackendTLSPolicy this setting comes from.
    pub policy: Option<ObjectRef>,
    /// `proxy-ssl-ciphers`: the TLS 1.2 suites offered, most preferred first; `None`: all
    /// of rustls's (ingress-nginx's default `DEFAULT`). TLS 1.3 suites are not affected, as
    /// in OpenSSL.
    pub ciphers: Option<Vec<Tls12Suite>>,
    /// `proxy-ssl-protocols`: the TLS versions offered; `None`: TLS 1.2 and 1.3.
    pub protocols: Option<ProtocolList>,
    /// `proxy-ssl-verify-depth` (ingress-nginx's default 1), with `verify`: at most this
    /// many intermediate certificates between the backend's own and a trusted one, as
    /// nginx's `proxy_ssl_verify_depth`; `None`: no limit (BackendTLSPolicy).
    pub verify_depth: Option<u32>,
}

/// The TLS settings of Service ports from BackendTLSPolicies, by (namespace, Service): the
/// port a policy names (`sectionName`; `None`: every port) and its setting. What
/// the Service index (`backend.rs`) gives each backend it resolves.
#[derive(Debug, Default)]
pub(crate) struct UpstreamTlsByPort {
    pub(crate) by_service: std::collections::HashMap<(String, String), PortSettings>,
}

/// The settings of one Service by the port they name (`None`: every port).
pub(crate) type PortSettings = Vec<(Option<String>, Arc<UpstreamTls>)>;

impl UpstreamTlsByPort {
    /// The setting for port `port_name` (`""`: unnamed) of Service `namespace/name`: the
    /// policy naming that port, else the one naming the whole Service.
    pub(crate) fn for_port(
        &self,
        namespace: &str,
        name: &str,
        port_name: &str,
    ) -> Option<&Arc<UpstreamTls>> {
        let policies = self
            .by_service
            .get(&(namespace.to_owned(), name.to_owned()))?;
        policies
            .iter()
            .find(|(section, _)| section.as_deref() == Some(port_name))
            .or_else(|| policies.iter().find(|(section, _)| section.is_none()))
            .map(|(_, tls)| tls)
    }
}

/// A name a backend's certificate may carry (BackendTLSPolicy `subjectAltNames[]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SubjectAltName {
    /// A DNS name (`type: Hostname`).
    Dns(String),
    /// A URI, compared exactly (`type: URI`, e.g. a SPIFFE ID).
    Uri(String),
}

impl PartialEq for UpstreamTls {
    fn eq(&self, other: &Self) -> bool {
        // Certificates from the same Secret are the same: compare the reference.
        self.verify == other.verify
            && self.name == other.name
            && self.server_name == other.server_name
            && self.trusted == other.trusted
            && self.secret == other.secret
            && self.client.is_some() == other.client.is_some()
            && self.subject_alt_names == other.subject_alt_names
            && self.policy == other.policy
            && self.ciphers == other.ciphers
            && self.protocols == other.protocols
            && self.verify_depth == other.verify_depth
    }
}

impl Eq for UpstreamTls {}

/// `proxy-ssl-verify` and `proxy-ssl-server-name`: nginx's `on`/`off` (booleans too).
pub(crate) fn parse_on_off(value: &str) -> Result<bool, String> {
    match value.trim().to_ascii_lowercase().as_str() {
        "on" | "true" => Ok(true),
        "off" | "false" => Ok(false),
        _ => Err(format!("value {:?} is not on or off", value.trim())),
    }
}

/// `proxy-ssl-verify-depth`: a number of intermediate certificates; ingress-nginx takes 0
/// as its default, 1.
pub(crate) fn parse_verify_depth(value: &str) -> Result<u32, String> {
    match value.trim().parse::<u32>() {
        Ok(0) => Ok(1),
        Ok(depth) if depth <= 100 => Ok(depth),
        _ => Err(format!(
            "value {:?} is not a depth from 1 to 100; the depth stays 1",
            value.trim()
        )),
    }
}

/// `proxy-ssl-name`: a DNS name or an IP address.
pub(crate) fn parse_ssl_name(value: &str) -> Result<String, String> {
    let v = value.trim();
    let name = !v.is_empty()
        && v.len() <= 253
        && v.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b':'));
    if name {
        Ok(v.to_ascii_lowercase())
    } else {
        Err(format!("value {v:?} is not a host name"))
    }
}

/// `proxy-ssl-secret`: `namespace/name` (the Ingress's namespace when only a name is given).
pub(crate) fn parse_secret_ref(value: &str) -> Result<(Option<String>, String), String> {
    let v = value.trim();
    let valid = |s: &str| {
        !s.is_empty()
            && s.len() <= 253
            && s.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'-' | b'.'))
    };
    match v.split_once('/') {
        Some((ns, name)) if valid(ns) && valid(name) => Ok((Some(ns.to_owned()), name.to_owned())),
        None if valid(v) => Ok((None, v.to_owned())),
        _ => Err(format!("value {v:?} is not namespace/name of a Secret")),
    }
}

/// Reads a `proxy-ssl-secret`: `ca.crt` (roots) and, when both are present, `tls.crt` and
/// `tls.key` (client certificate). The error is a sentence saying what is wrong.
pub(crate) fn parse_upstream_secret(
    secret: &Secret,
    secret_ref: &ObjectRef,
) -> Result<(Vec<CertificateDer<'static>>, Option<TlsCertificate>), String> {
    let trusted = match secret_value(secret, CA_CERT_KEY) {
        Some(pem) => crate::tls::parse_ca_bundle(pem)?,
        None => Vec::new(),
    };
    let has_pair = secret_value(secret, crate::tls::TLS_CERT_KEY).is_some()
        || secret_value(secret, crate::tls::TLS_PRIVATE_KEY_KEY).is_some();
    let client = if has_pair {
        Some(parse_secret(secret, secret_ref.clone())?)
    } else {
        None
    };
    if trusted.is_empty() && client.is_none() {
        return Err("it has neither ca.crt nor tls.crt/tls.key".to_owned());
    }
    Ok((trusted, client))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backend_protocol_values_like_ingress_nginx() {
        assert_eq!(parse_backend_protocol("grpc"), Ok(UpstreamProtocol::Grpc));
        assert_eq!(
            parse_backend_protocol(" GRPCS "),
            Ok(UpstreamProtocol::Grpcs)
        );
        assert_eq!(parse_backend_protocol("HTTPS"), Ok(UpstreamProtocol::Https));
        assert_eq!(
            parse_backend_protocol("AUTO_HTTP"),
            Ok(UpstreamProtocol::Http)
        );
        assert_eq!(parse_backend_protocol("h2c"), Ok(UpstreamProtocol::H2c));
        assert!(
            parse_backend_protocol("FCGI")
                .unwrap_err()
                .contains("not supported")
        );
        assert!(
            parse_backend_protocol("spdy")
                .unwrap_err()
                .contains("not one of")
        );
    }

    #[test]
    fn protocol_properties() {
        use UpstreamProtocol::*;
        for p in [Http, Https, H2c, Grpc, Grpcs] {
            assert_eq!(parse_backend_protocol(p.as_str()), Ok(p));
            assert_eq!(p.grpc(), p.as_str().starts_with("GRPC"));
        }
        assert!(Grpcs.tls() && Grpcs.http2() && !H2c.tls() && H2c.http2());
        assert!(Https.tls() && !Https.http2() && !Http.tls());
    }

    #[test]
    fn app_protocols_gateway_api_gep_1911() {
        assert_eq!(
            app_protocol("kubernetes.io/h2c"),
            Some(UpstreamProtocol::H2c)
        );
        assert_eq!(app_protocol("HTTPS"), Some(UpstreamProtocol::Https));
        assert_eq!(
            app_protocol("kubernetes.io/wss"),
            Some(UpstreamProtocol::Https)
        );
        assert_eq!(app_protocol("TCP"), None);
    }

    #[test]
    fn secret_refs() {
        assert_eq!(
            parse_secret_ref("ns/ca"),
            Ok((Some("ns".into()), "ca".into()))
        );
        assert_eq!(parse_secret_ref("ca"), Ok((None, "ca".into())));
        assert!(parse_secret_ref("a/b/c").is_err());
        assert!(parse_secret_ref("").is_err());
        assert!(parse_on_off("ON").unwrap());
        assert!(parse_on_off("maybe").is_err());
        assert!(parse_ssl_name("bad name").is_err());
    }

    #[test]
    fn verify_depth_like_ingress_nginx_proxyssl() {
        // proxyssl/main.go: 0 (or absent) is the default, 1.
        assert_eq!(parse_verify_depth("0"), Ok(1));
        assert_eq!(parse_verify_depth(" 3 "), Ok(3));
        assert_eq!(parse_verify_depth("100"), Ok(100));
        assert!(parse_verify_depth("101").is_err());
        assert!(parse_verify_depth("-1").is_err());
        assert!(parse_verify_depth("deep").unwrap_err().contains("stays 1"));
    }
}

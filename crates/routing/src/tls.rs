//! TLS certificates from `kubernetes.io/tls` Secrets.
//!
//! Only PEM decoding happens here (via `rustls-pki-types`, no crypto): every `CERTIFICATE`
//! block of `tls.crt` becomes the chain, the first private key block of `tls.key` (PKCS#8,
//! PKCS#1 or SEC1) the key, and each must be one well-formed DER SEQUENCE. Whether key and
//! certificate belong together is left to the TLS library that loads them.

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

use k8s_openapi::api::core::v1::Secret;

use crate::refs::ObjectRef;

/// A certificate chain and its private key, parsed from a Secret's `tls.crt` / `tls.key`.
#[derive(Debug)]
pub struct TlsCertificate {
    /// The Secret it came from.
    pub secret: ObjectRef,
    /// Leaf first, as in `tls.crt`.
    pub cert_chain: Vec<CertificateDer<'static>>,
    /// PKCS#8, PKCS#1 or SEC1 key, as in `tls.key`.
    pub key: PrivateKeyDer<'static>,
}

impl PartialEq for TlsCertificate {
    fn eq(&self, other: &Self) -> bool {
        self.secret == other.secret
            && self.cert_chain == other.cert_chain
            && self.key.secret_der() == other.key.secret_der()
    }
}

impl Eq for TlsCertificate {}

/// Key of the certificate chain in a TLS Secret.
pub const TLS_CERT_KEY: &str = "tls.crt";
/// Key of the private key in a TLS Secret.
pub const TLS_PRIVATE_KEY_KEY: &str = "tls.key";

/// Reads a TLS Secret. The error is a sentence saying what is wrong.
pub(crate) fn parse_secret(
    secret: &Secret,
    secret_ref: ObjectRef,
) -> Result<TlsCertificate, String> {
    let crt = secret_value(secret, TLS_CERT_KEY).ok_or("it has no tls.crt")?;
    let key = secret_value(secret, TLS_PRIVATE_KEY_KEY).ok_or("it has no tls.key")?;
    let cert_chain = CertificateDer::pem_slice_iter(crt)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("tls.crt is not valid PEM: {e}"))?;
    if cert_chain.is_empty() {
        return Err("tls.crt holds no CERTIFICATE block".to_owned());
    }
    if !cert_chain.iter().all(|c| is_der_sequence(c)) {
        return Err("tls.crt holds a CERTIFICATE block that is not DER".to_owned());
    }
    let key = PrivateKeyDer::from_pem_slice(key).map_err(|e| match e {
        rustls_pki_types::pem::Error::NoItemsFound => {
            "tls.key holds no PRIVATE KEY, RSA PRIVATE KEY or EC PRIVATE KEY block".to_owned()
        }
        e => format!("tls.key is not valid PEM: {e}"),
    })?;
    if !is_der_sequence(key.secret_der()) {
        return Err("tls.key holds a key block that is not DER".to_owned());
    }
    Ok(TlsCertificate {
        secret: secret_ref,
        cert_chain,
        key,
    })
}

/// Key of the CA certificates (PEM) in a ConfigMap or Secret (ingress-nginx's
/// `proxy-ssl-secret` and `auth-tls-secret`, Gateway API's `caCertificateRefs`).
pub const CA_CERT_KEY: &str = "ca.crt";

/// Client certificate validation on a TLS socket (Gateway API `spec.tls.frontend`): the
/// handshake asks for a certificate and checks it against `roots`.
#[derive(Debug, PartialEq, Eq)]
pub struct ClientValidation {
    /// The CA certificates a client certificate must chain to, in reference order.
    pub roots: Vec<CertificateDer<'static>>,
    /// `AllowInsecureFallback`: a connection without a certificate, or with one that does
    /// not chain to `roots`, is served anyway. Otherwise (`AllowValidOnly`) its handshake
    /// fails.
    pub insecure_fallback: bool,
    /// The objects the roots came from.
    pub sources: Vec<ObjectRef>,
}

/// Reads the `CERTIFICATE` blocks of a PEM CA bundle. The error is a sentence saying what is
/// wrong (no block at all is an error: a bundle that trusts nothing is a mistake).
pub(crate) fn parse_ca_bundle(pem: &[u8]) -> Result<Vec<CertificateDer<'static>>, String> {
    let roots = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("{CA_CERT_KEY} is not valid PEM: {e}"))?;
    if roots.is_empty() {
        return Err(format!("{CA_CERT_KEY} holds no CERTIFICATE block"));
    }
    if !roots.iter().all(|c| is_der_sequence(c)) {
        return Err(format!(
            "{CA_CERT_KEY} holds a CERTIFICATE block that is not DER"
        ));
    }
    Ok(roots)
}

/// `stringData` wins over `data`, as it does when the API server merges them on write.
pub(crate) fn secret_value<'s>(secret: &'s Secret, key: &str) -> Option<&'s [u8]> {
    let from_string = secret
        .string_data
        .as_ref()
        .and_then(|d| d.get(key))
        .map(|s| s.as_bytes());
    let from_data = || {
        secret
            .data
            .as_ref()
            .and_then(|d| d.get(key))
            .map(|b| b.0.as_slice())
    };
    from_string.or_else(from_data).filter(|v| !v.is_empty())
}

/// Whether `der` is exactly one DER SEQUENCE (tag 0x30, definite length covering the rest).
/// Cheap guard against base64 that decodes to garbage or a truncated block.
fn is_der_sequence(der: &[u8]) -> bool {
    let [0x30, first, rest @ ..] = der else {
        return false;
    };
    let (len, rest) = if first & 0x80 == 0 {
        (usize::from(*first), rest)
    } else {
        let n = usize::from(first & 0x7f);
        if n == 0 || n > 4 || rest.len() < n {
            return false;
        }
        let len = rest[..n]
            .iter()
            .fold(0usize, |acc, b| (acc << 8) | usize::from(*b));
        (len, &rest[n..])
    };
    rest.len() == len
}

#[cfg(test)]
mod tests {
    use super::{is_der_sequence, parse_ca_bundle};

    #[test]
    fn ca_bundles() {
        let cert = rcgen::generate_simple_self_signed(vec!["ca.test".to_owned()])
            .expect("certificate")
            .cert
            .pem();
        assert_eq!(parse_ca_bundle(cert.as_bytes()).map(|r| r.len()), Ok(1));
        let two = format!("{cert}\n# comment\n{cert}");
        assert_eq!(parse_ca_bundle(two.as_bytes()).map(|r| r.len()), Ok(2));
        assert!(parse_ca_bundle(b"").is_err());
        assert!(parse_ca_bundle(b"not pem").is_err());
        let garbage = "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n";
        assert!(parse_ca_bundle(garbage.as_bytes()).is_err());
    }

    #[test]
    fn der_sequences() {
        assert!(is_der_sequence(&[0x30, 0x00]));
        assert!(is_der_sequence(&[0x30, 0x02, 0x05, 0x00]));
        assert!(is_der_sequence(&[0x30, 0x81, 0x01, 0x00]));
        let mut long = vec![0x30, 0x82, 0x01, 0x00];
        long.extend(std::iter::repeat_n(0u8, 256));
        assert!(is_der_sequence(&long));
        long.pop();
        assert!(!is_der_sequence(&long));
        assert!(!is_der_sequence(&[]));
        assert!(!is_der_sequence(&[0x30]));
        assert!(!is_der_sequence(&[0x31, 0x00]));
        assert!(!is_der_sequence(&[0x30, 0x03, 0x00]));
        assert!(!is_der_sequence(&[0x30, 0x80, 0x00, 0x00]));
        assert!(!is_der_sequence(&[0x30, 0x85, 1, 1, 1, 1, 1]));
    }
}

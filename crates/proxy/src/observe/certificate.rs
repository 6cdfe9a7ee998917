//! What a served certificate says of itself: its names and when it expires, read from the
//! leaf (for the dashboard and `sluice_ssl_certificate_expiry_timestamp_seconds`).

use sluice_routing::TlsCertificate;

/// A certificate's leaf, read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Leaf {
    /// Its DNS names (the common name when it has none).
    pub(crate) names: Vec<String>,
    /// `notAfter`, Unix seconds.
    pub(crate) not_after: i64,
}

/// Reads the leaf of `cert`. `Err`: why it cannot be read.
pub(crate) fn leaf(cert: &TlsCertificate) -> Result<Leaf, String> {
    let der = cert.cert_chain.first().ok_or("no certificate")?;
    let (_, parsed) =
        x509_parser::parse_x509_certificate(der.as_ref()).map_err(|e| e.to_string())?;
    let mut names: Vec<String> = Vec::new();
    if let Ok(Some(san)) = parsed.subject_alternative_name() {
        for name in &san.value.general_names {
            if let x509_parser::extensions::GeneralName::DNSName(dns) = name {
                names.push((*dns).to_owned());
            }
        }
    }
    if names.is_empty()
        && let Some(cn) = parsed
            .subject()
            .iter_common_name()
            .next()
            .and_then(|cn| cn.as_str().ok())
    {
        names.push(cn.to_owned());
    }
    Ok(Leaf {
        names,
        not_after: parsed.validity().not_after.timestamp(),
    })
}

//! BackendTLSPolicy `subjectAltNames` (Gateway API `BackendTLSPolicySANValidation`): the
//! backend's certificate must chain to the policy's CA certificates and carry one of the
//! listed names: a DNS name (checked as webpki checks a server name, wildcards included)
//! or a URI (compared exactly, e.g. a SPIFFE ID). The policy's `hostname` is then only the
//! SNI sent.

use std::sync::Arc;

use rustls::client::danger::{ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{CertificateError, Error};
use sluice_routing::SubjectAltName;
use x509_parser::extensions::GeneralName;

use crate::backend::cert_check::CertCheck;

/// Checks the chain with `chain` and the name against `names`.
#[derive(Debug)]
pub(crate) struct SubjectAltNames {
    /// webpki's verifier with the policy's roots.
    pub(crate) chain: Arc<dyn ServerCertVerifier>,
    /// At least one.
    pub(crate) names: Vec<SubjectAltName>,
}

impl CertCheck for SubjectAltNames {
    fn inner(&self) -> &Arc<dyn ServerCertVerifier> {
        &self.chain
    }

    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, Error> {
        let mut chain_checked = false;
        for name in &self.names {
            if let SubjectAltName::Dns(dns) = name {
                let Ok(dns) = ServerName::try_from(dns.as_str()) else {
                    continue;
                };
                match self
                    .chain
                    .verify_server_cert(end_entity, intermediates, &dns, ocsp, now)
                {
                    Ok(verified) => return Ok(verified),
                    Err(e) if not_valid_for_name(&e) => chain_checked = true,
                    Err(e) => return Err(e),
                }
            }
        }
        let uris: Vec<&str> = (self.names.iter())
            .filter_map(|n| match n {
                SubjectAltName::Uri(uri) => Some(uri.as_str()),
                SubjectAltName::Dns(_) => None,
            })
            .collect();
        if uris.is_empty() {
            return Err(Error::InvalidCertificate(CertificateError::NotValidForName));
        }
        if !chain_checked {
            // webpki checks the chain before the name: an error about the name only means
            // the chain is sound.
            match self
                .chain
                .verify_server_cert(end_entity, intermediates, server_name, ocsp, now)
            {
                Ok(_) => {}
                Err(e) if not_valid_for_name(&e) => {}
                Err(e) => return Err(e),
            }
        }
        if certificate_uris(end_entity)
            .iter()
            .any(|u| uris.contains(&u.as_str()))
        {
            Ok(ServerCertVerified::assertion())
        } else {
            Err(Error::InvalidCertificate(CertificateError::NotValidForName))
        }
    }
}

/// Whether `error` is webpki's "the certificate does not carry that name".
fn not_valid_for_name(error: &Error) -> bool {
    matches!(
        error,
        Error::InvalidCertificate(
            CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. }
        )
    )
}

/// The URI subject alternative names of a certificate (none when it does not parse).
fn certificate_uris(cert: &CertificateDer<'_>) -> Vec<String> {
    let Ok((_, parsed)) = x509_parser::parse_x509_certificate(cert) else {
        return Vec::new();
    };
    let Ok(Some(san)) = parsed.subject_alternative_name() else {
        return Vec::new();
    };
    san.value
        .general_names
        .iter()
        .filter_map(|n| match n {
            GeneralName::URI(uri) => Some((*uri).to_owned()),
            _ => None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A CA and a leaf it signed with `dns` and `uri` subject alternative names.
    fn chain(dns: &str, uri: &str) -> (CertificateDer<'static>, CertificateDer<'static>) {
        let ca_key = rcgen::KeyPair::generate().expect("key");
        let mut ca = rcgen::CertificateParams::new(Vec::new()).expect("params");
        ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let ca_cert = ca.self_signed(&ca_key).expect("ca");
        let issuer = rcgen::Issuer::new(ca, ca_key);
        let mut leaf = rcgen::CertificateParams::new(vec![dns.to_owned()]).expect("params");
        leaf.subject_alt_names.push(rcgen::SanType::URI(
            rcgen::string::Ia5String::try_from(uri).expect("uri"),
        ));
        let leaf_key = rcgen::KeyPair::generate().expect("key");
        let leaf_cert = leaf.signed_by(&leaf_key, &issuer).expect("leaf");
        (ca_cert.der().clone(), leaf_cert.der().clone())
    }

    fn verifier(ca: &CertificateDer<'static>, names: Vec<SubjectAltName>) -> SubjectAltNames {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut roots = rustls::RootCertStore::empty();
        roots.add(ca.clone()).expect("root");
        let chain =
            rustls::client::WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .expect("verifier");
        SubjectAltNames { chain, names }
    }

    fn check(v: &SubjectAltNames, leaf: &CertificateDer<'_>) -> Result<(), Error> {
        let sni = ServerName::try_from("sni.example").expect("name");
        v.verify_server_cert(leaf, &[], &sni, &[], UnixTime::now())
            .map(|_| ())
    }

    /// Gateway API BackendTLSPolicySANValidation: a DNS or URI name listed passes, one not
    /// listed fails, whatever the SNI; a certificate from another CA fails either way.
    #[test]
    fn one_listed_name_must_match() {
        let (ca, leaf) = chain("abc.example.com", "spiffe://abc.example.com/test-identity");
        let dns = |d: &str| SubjectAltName::Dns(d.to_owned());
        let uri = |u: &str| SubjectAltName::Uri(u.to_owned());
        assert!(check(&verifier(&ca, vec![dns("abc.example.com")]), &leaf).is_ok());
        assert!(check(&verifier(&ca, vec![dns("dce.example.com")]), &leaf).is_err());
        let spiffe = "spiffe://abc.example.com/test-identity";
        assert!(check(&verifier(&ca, vec![uri(spiffe)]), &leaf).is_ok());
        assert!(
            check(
                &verifier(&ca, vec![uri("spiffe://def.example.com/test-identity")]),
                &leaf
            )
            .is_err()
        );
        assert!(
            check(
                &verifier(
                    &ca,
                    vec![uri("spiffe://def.example.com/x"), dns("abc.example.com")]
                ),
                &leaf
            )
            .is_ok()
        );
        assert!(
            check(
                &verifier(
                    &ca,
                    vec![uri("spiffe://def.example.com/x"), dns("def.example.com")]
                ),
                &leaf
            )
            .is_err()
        );
        let (other_ca, _) = chain("abc.example.com", spiffe);
        assert!(check(&verifier(&other_ca, vec![uri(spiffe)]), &leaf).is_err());
        assert!(check(&verifier(&other_ca, vec![dns("abc.example.com")]), &leaf).is_err());
    }
}

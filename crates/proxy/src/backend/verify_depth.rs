//! `proxy-ssl-verify-depth` (nginx's `proxy_ssl_verify_depth`, default 1): a verified
//! backend's chain may hold at most that many intermediate certificates between its own and
//! a trusted one, as OpenSSL's verify depth ("depth 2 allows the end entity, two
//! intermediates and the trust anchor"). A longer chain fails the handshake, so the request
//! is answered 502.
//!
//! webpki does not say which path it built, so the path is followed here by names: from the
//! backend's certificate to the intermediate whose subject is its issuer, and on, until an
//! issuer is a trusted certificate's subject.

use std::sync::Arc;

use rustls::client::danger::{ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{CertificateError, Error};

use crate::backend::cert_check::CertCheck;

/// `inner`'s check, then the depth.
#[derive(Debug)]
pub(crate) struct VerifyDepth {
    /// The chain and name check.
    pub(crate) inner: Arc<dyn ServerCertVerifier>,
    /// Most intermediates allowed.
    pub(crate) depth: u32,
    /// The raw subject names of the trusted certificates.
    pub(crate) trusted_subjects: Vec<Vec<u8>>,
}

impl VerifyDepth {
    /// Limits `inner` to `depth` intermediates below `trusted`.
    pub(crate) fn new(
        inner: Arc<dyn ServerCertVerifier>,
        depth: u32,
        trusted: &[CertificateDer<'_>],
    ) -> VerifyDepth {
        let trusted_subjects = trusted
            .iter()
            .filter_map(|der| {
                let (_, cert) = x509_parser::parse_x509_certificate(der).ok()?;
                Some(cert.subject().as_raw().to_vec())
            })
            .collect();
        VerifyDepth {
            inner,
            depth,
            trusted_subjects,
        }
    }
}

/// How many of `intermediates` lie between `end_entity` and a certificate whose subject is
/// one of `trusted_subjects`, following issuer names; what cannot be parsed ends the path.
pub(crate) fn intermediates_on_path(
    end_entity: &CertificateDer<'_>,
    intermediates: &[CertificateDer<'_>],
    trusted_subjects: &[Vec<u8>],
) -> usize {
    let parsed: Vec<_> = intermediates
        .iter()
        .filter_map(|der| {
            x509_parser::parse_x509_certificate(der)
                .ok()
                .map(|(_, c)| c)
        })
        .collect();
    let Ok((_, leaf)) = x509_parser::parse_x509_certificate(end_entity) else {
        return 0;
    };
    let mut issuer = leaf.issuer().as_raw();
    let mut used = vec![false; parsed.len()];
    let mut count = 0;
    // Each step uses one more intermediate: bounded by their number.
    while !trusted_subjects.iter().any(|t| t.as_slice() == issuer) {
        let Some(next) =
            (0..parsed.len()).find(|&i| !used[i] && parsed[i].subject().as_raw() == issuer)
        else {
            break;
        };
        used[next] = true;
        count += 1;
        issuer = parsed[next].issuer().as_raw();
    }
    count
}

impl CertCheck for VerifyDepth {
    fn inner(&self) -> &Arc<dyn ServerCertVerifier> {
        &self.inner
    }

    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, Error> {
        let verified =
            self.inner
                .verify_server_cert(end_entity, intermediates, server_name, ocsp, now)?;
        let used = intermediates_on_path(end_entity, intermediates, &self.trusted_subjects);
        if used > self.depth as usize {
            // OpenSSL's X509_V_ERR_CERT_CHAIN_TOO_LONG.
            return Err(Error::InvalidCertificate(CertificateError::Other(
                rustls::OtherError(Arc::new(ChainTooLong {
                    intermediates: used,
                    depth: self.depth,
                })),
            )));
        }
        Ok(verified)
    }
}

/// The error a too long chain fails with (rustls shows it by `Debug`: the sentence too).
struct ChainTooLong {
    intermediates: usize,
    depth: u32,
}

impl std::fmt::Display for ChainTooLong {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "certificate chain too long: {} intermediate certificates, proxy-ssl-verify-depth {}",
            self.intermediates, self.depth
        )
    }
}

impl std::fmt::Debug for ChainTooLong {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(self, f)
    }
}

impl std::error::Error for ChainTooLong {}

#[cfg(test)]
mod tests {
    use super::*;
    use rustls::client::danger::HandshakeSignatureValid;
    use rustls::{DigitallySignedStruct, SignatureScheme};

    /// A root, `n` intermediates below it, and a leaf: (root, intermediates leaf-side
    /// first, leaf).
    fn chain(
        n: usize,
    ) -> (
        CertificateDer<'static>,
        Vec<CertificateDer<'static>>,
        CertificateDer<'static>,
    ) {
        let ca = |name: &str| {
            let mut params = rcgen::CertificateParams::new(Vec::new()).expect("params");
            params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
            params
                .distinguished_name
                .push(rcgen::DnType::CommonName, name);
            params
        };
        let root_key = rcgen::KeyPair::generate().expect("key");
        let root_params = ca("root");
        let root = root_params.self_signed(&root_key).expect("root");
        let mut issuer = rcgen::Issuer::new(root_params, root_key);
        let mut intermediates = Vec::new();
        for i in 0..n {
            let key = rcgen::KeyPair::generate().expect("key");
            let params = ca(&format!("intermediate {i}"));
            let cert = params.signed_by(&key, &issuer).expect("intermediate");
            intermediates.insert(0, cert.der().clone());
            issuer = rcgen::Issuer::new(params, key);
        }
        let key = rcgen::KeyPair::generate().expect("key");
        let leaf = rcgen::CertificateParams::new(vec!["backend.test".to_owned()])
            .expect("params")
            .signed_by(&key, &issuer)
            .expect("leaf");
        (root.der().clone(), intermediates, leaf.der().clone())
    }

    fn subjects(certs: &[CertificateDer<'_>]) -> Vec<Vec<u8>> {
        VerifyDepth::new(Arc::new(NoVerifier), 1, certs).trusted_subjects
    }

    /// Accepts everything: only the depth is checked.
    #[derive(Debug)]
    struct NoVerifier;

    impl ServerCertVerifier for NoVerifier {
        fn verify_server_cert(
            &self,
            _: &CertificateDer<'_>,
            _: &[CertificateDer<'_>],
            _: &ServerName<'_>,
            _: &[u8],
            _: UnixTime,
        ) -> Result<ServerCertVerified, Error> {
            Ok(ServerCertVerified::assertion())
        }
        fn verify_tls12_signature(
            &self,
            _: &[u8],
            _: &CertificateDer<'_>,
            _: &DigitallySignedStruct,
        ) -> Result<HandshakeSignatureValid, Error> {
            Ok(HandshakeSignatureValid::assertion())
        }
        fn verify_tls13_signature(
            &self,
            _: &[u8],
            _: &CertificateDer<'_>,
            _: &DigitallySignedStruct,
        ) -> Result<HandshakeSignatureValid, Error> {
            Ok(HandshakeSignatureValid::assertion())
        }
        fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
            Vec::new()
        }
    }

    #[test]
    fn the_path_is_counted_from_leaf_to_a_trusted_issuer() {
        for n in 0..4 {
            let (root, intermediates, leaf) = chain(n);
            let trusted = subjects(std::slice::from_ref(&root));
            assert_eq!(intermediates_on_path(&leaf, &intermediates, &trusted), n);
            // Order sent does not matter, nor does the root sent along.
            let mut shuffled = intermediates.clone();
            shuffled.reverse();
            shuffled.push(root.clone());
            assert_eq!(intermediates_on_path(&leaf, &shuffled, &trusted), n);
        }
        // An intermediate trusted itself ends the path there.
        let (_, intermediates, leaf) = chain(3);
        let trusted = subjects(&intermediates[1..2]);
        assert_eq!(intermediates_on_path(&leaf, &intermediates, &trusted), 1);
    }

    /// nginx's `proxy_ssl_verify_depth`: OpenSSL's depth counts intermediates.
    #[test]
    fn a_chain_longer_than_the_depth_fails() {
        let (root, intermediates, leaf) = chain(2);
        let name = ServerName::try_from("backend.test").expect("name");
        let check = |depth| {
            VerifyDepth::new(Arc::new(NoVerifier), depth, std::slice::from_ref(&root))
                .verify_server_cert(&leaf, &intermediates, &name, &[], UnixTime::now())
                .map(|_| ())
        };
        assert!(check(2).is_ok());
        let error = check(1).unwrap_err().to_string();
        assert!(error.contains("certificate chain too long"), "{error}");
    }
}

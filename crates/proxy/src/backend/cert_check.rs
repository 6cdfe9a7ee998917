//! A check of the backend's certificate made on top of an inner rustls verifier (webpki's),
//! which keeps verifying the handshake signatures: [`CertCheck`] is the check, [`Checked`]
//! makes it rustls's [`ServerCertVerifier`], so each check states only what it adds.

use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, Error, SignatureScheme};

/// A check of the backend's certificate chain (`proxy-ssl-verify-depth`, BackendTLSPolicy
/// `subjectAltNames`).
pub(crate) trait CertCheck: std::fmt::Debug + Send + Sync {
    /// The verifier the signatures go to (the one the check itself builds on).
    fn inner(&self) -> &Arc<dyn ServerCertVerifier>;

    /// rustls's [`ServerCertVerifier::verify_server_cert`], with this check.
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, Error>;
}

/// rustls's verifier for a [`CertCheck`].
#[derive(Debug)]
pub(crate) struct Checked<C>(pub(crate) C);

impl<C: CertCheck> ServerCertVerifier for Checked<C> {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, Error> {
        self.0
            .verify_server_cert(end_entity, intermediates, server_name, ocsp, now)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        self.0.inner().verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        self.0.inner().verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.inner().supported_verify_schemes()
    }
}

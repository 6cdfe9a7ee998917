//! TLS termination: SNI certificate choice from the current snapshot, and the default
//! certificate for names no Ingress covers: the table's (`--default-ssl-certificate`) when it
//! has one, else a self-signed one generated at start.

use std::sync::Arc;

use rustls::ServerConfig;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;

use crate::snapshot::TableShared;

/// Subject alternative name of the default certificate (`.invalid` never resolves, so no
/// client can mistake it for a real site).
pub const DEFAULT_CERT_NAME: &str = "sluice-default.invalid";

/// Generates the self-signed default certificate (ECDSA P-256), new at every start.
pub(crate) fn default_certificate(provider: &CryptoProvider) -> anyhow::Result<Arc<CertifiedKey>> {
    let mut params = rcgen::CertificateParams::new(vec![DEFAULT_CERT_NAME.to_owned()])?;
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "sluice default certificate");
    let key_pair = rcgen::KeyPair::generate()?;
    let cert = params.self_signed(&key_pair)?;
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key_pair.serialize_der()));
    Ok(Arc::new(CertifiedKey::from_der(
        vec![cert.der().clone()],
        key,
        provider,
    )?))
}

/// Chooses the certificate for each handshake by SNI from the current snapshot.
///
/// The name-to-key map was built when the snapshot was swapped in, so a handshake does one
/// snapshot load and two hash lookups, and never parses keys. A name without a certificate
/// of its own (and a handshake without SNI) gets the snapshot's default certificate, else
/// the generated one; so a changed `--default-ssl-certificate` Secret applies to the next
/// handshake.
#[derive(Debug)]
pub(crate) struct SniResolver {
    table: Arc<TableShared>,
    /// The generated certificate.
    default: Arc<CertifiedKey>,
}

impl ResolvesServerCert for SniResolver {
    fn resolve(&self, client_hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        let snapshot = self.table.current.load();
        let found = client_hello
            .server_name()
            .and_then(|name| snapshot.certified_key(name))
            .or_else(|| snapshot.default_key());
        Some(Arc::clone(found.unwrap_or(&self.default)))
    }
}

/// The rustls server configuration: TLS 1.2 and 1.3, ALPN `h2` then `http/1.1`, stateless
/// session resumption, certificates from [`SniResolver`].
pub(crate) fn server_config(
    provider: Arc<CryptoProvider>,
    table: Arc<TableShared>,
    default: Arc<CertifiedKey>,
) -> anyhow::Result<Arc<ServerConfig>> {
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_cert_resolver(Arc::new(SniResolver { table, default }));
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    // Tickets make reconnecting clients skip the full handshake.
    config.ticketer = rustls::crypto::ring::Ticketer::new()?;
    Ok(Arc::new(config))
}

/// The leaf certificate of a certified key.
pub(crate) fn leaf(key: &CertifiedKey) -> CertificateDer<'static> {
    key.cert[0].clone()
}

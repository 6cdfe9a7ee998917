//! Client certificates on Gateway sockets (Gateway API `spec.tls.frontend`): the rustls
//! verifier for a [`ClientValidation`], and the server configurations built with it.
//!
//! `AllowValidOnly` is webpki's client verifier: no certificate, or one that does not chain
//! to the roots, fails the handshake. `AllowInsecureFallback` asks for a certificate the
//! same way (with the same CA hints) but serves the connection whatever it shows; the
//! handshake signature of a certificate shown is still checked.

use std::sync::Arc;

use arc_swap::ArcSwap;
use rustls::client::danger::HandshakeSignatureValid;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, UnixTime};
use rustls::server::WebPkiClientVerifier;
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::{DigitallySignedStruct, DistinguishedName, RootCertStore, SignatureScheme};
use sluice_routing::ClientValidation;

/// How many settings keep their configurations (each a handful of Gateway ports); the
/// oldest goes first.
const KEPT: usize = 64;

/// The server configurations of each client validation setting in use, built at the first
/// handshake that needs them and found again by content, so a new routing table with the
/// same setting keeps them (and their session tickets).
/// `C`: the configurations (`front::tls`'s pair).
pub(crate) struct ClientAuthConfigs<C> {
    built: ArcSwap<Vec<(Arc<ClientValidation>, C)>>,
}

impl<C> Default for ClientAuthConfigs<C> {
    fn default() -> Self {
        ClientAuthConfigs {
            built: ArcSwap::from_pointee(Vec::new()),
        }
    }
}

impl<C> ClientAuthConfigs<C> {
    /// Forgets every configuration (the TLS settings they were built with changed).
    pub(crate) fn clear(&self) {
        self.built.store(Arc::new(Vec::new()));
    }
}

impl<C: Clone> ClientAuthConfigs<C> {
    /// The configurations for `validation`, built with `build` the first time.
    pub(crate) fn get(
        &self,
        validation: &Arc<ClientValidation>,
        build: impl FnOnce(&ClientValidation) -> anyhow::Result<C>,
    ) -> anyhow::Result<C> {
        let found = |built: &[(Arc<ClientValidation>, C)]| {
            built
                .iter()
                .find(|(v, _)| Arc::ptr_eq(v, validation) || **v == **validation)
                .map(|(_, pair)| pair.clone())
        };
        if let Some(pair) = found(&self.built.load()) {
            return Ok(pair);
        }
        let pair = build(validation)?;
        self.built.rcu(|built| {
            let mut next: Vec<_> = built.iter().cloned().collect();
            if found(&next).is_none() {
                if next.len() >= KEPT {
                    next.remove(0);
                }
                next.push((Arc::clone(validation), pair.clone()));
            }
            next
        });
        Ok(pair)
    }
}

/// The verifier for `validation`.
pub(crate) fn verifier(
    validation: &ClientValidation,
    provider: Arc<CryptoProvider>,
) -> anyhow::Result<Arc<dyn ClientCertVerifier>> {
    let mut roots = RootCertStore::empty();
    let (added, _ignored) = roots.add_parsable_certificates(validation.roots.iter().cloned());
    anyhow::ensure!(
        added > 0,
        "no usable CA certificate in {}",
        validation
            .sources
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(", ")
    );
    let checked = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider).build()?;
    Ok(if validation.insecure_fallback {
        Arc::new(InsecureFallback { checked })
    } else {
        checked
    })
}

/// Asks as `checked` does and accepts whatever the client shows, or nothing.
#[derive(Debug)]
struct InsecureFallback {
    checked: Arc<dyn ClientCertVerifier>,
}

impl ClientCertVerifier for InsecureFallback {
    fn client_auth_mandatory(&self) -> bool {
        false
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        self.checked.root_hint_subjects()
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        // The outcome does not decide anything here (Gateway API: AllowInsecureFallback).
        let _ = self
            .checked
            .verify_client_cert(end_entity, intermediates, now);
        Ok(ClientCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.checked.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.checked.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.checked.supported_verify_schemes()
    }
}

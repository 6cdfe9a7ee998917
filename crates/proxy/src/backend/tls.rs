//! TLS towards backends (`backend-protocol: HTTPS|GRPCS`, `proxy-ssl-*`): one rustls client
//! configuration per distinct route setting, built when a table is installed.
//!
//! As ingress-nginx (`proxy-ssl-verify: off` by default), a backend's certificate is not
//! checked unless the route asks for it: in-cluster backends mostly serve self-signed
//! certificates. With verification on, the certificate must chain to the `ca.crt` of
//! `proxy-ssl-secret` and name `proxy-ssl-name` (default `<service>.<namespace>.svc`).

use std::collections::HashMap;
use std::sync::Arc;

use crate::backend::cert_check::Checked;
use crate::backend::subject_alt_names::SubjectAltNames;
use crate::backend::verify_depth::VerifyDepth;
use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{CryptoProvider, verify_tls12_signature, verify_tls13_signature};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::version::{TLS12, TLS13};
use rustls::{
    ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme, SupportedProtocolVersion,
};
use sluice_routing::{RouteEntry, RouteTable, Tls12Suite, TlsCertificate, UpstreamTls};
use tracing::warn;

/// The client configurations of one route setting: ALPN `http/1.1` and ALPN `h2`.
#[derive(Debug, Clone)]
pub(crate) struct ClientConfigs {
    /// For HTTPS backends.
    pub(crate) http1: Arc<ClientConfig>,
    /// For GRPCS (HTTP/2 over TLS) backends.
    pub(crate) http2: Arc<ClientConfig>,
}

/// Every client configuration a table needs.
#[derive(Debug)]
pub(crate) struct TlsClients {
    /// Routes without `proxy-ssl-*`: no verification, no SNI, no client certificate.
    default: ClientConfigs,
    /// Keyed by the addresses of the route's `Arc<UpstreamTls>` and of the client
    /// certificate its Gateway shows backends (each 0 when none). Each value holds the two
    /// `Arc`s, so that no other setting can take their addresses while it is kept (the
    /// next table's configurations start from these).
    by_policy: HashMap<(usize, usize), Held>,
}

/// The configurations of one setting, with what keeps its key's addresses taken.
#[derive(Debug, Clone)]
struct Held {
    configs: ClientConfigs,
    _tls: Option<Arc<UpstreamTls>>,
    _client: Option<Arc<TlsCertificate>>,
}

/// The key of a TLS setting and a client certificate.
fn key(tls: Option<&Arc<UpstreamTls>>, client: Option<&Arc<TlsCertificate>>) -> (usize, usize) {
    (
        tls.map_or(0, |t| Arc::as_ptr(t) as usize),
        client.map_or(0, |c| Arc::as_ptr(c) as usize),
    )
}

/// Adds the configurations of `tls` with `client`, unless there are some.
fn add(
    by_policy: &mut HashMap<(usize, usize), Held>,
    tls: Option<&Arc<UpstreamTls>>,
    client: Option<&Arc<TlsCertificate>>,
    provider: &Arc<CryptoProvider>,
) {
    if tls.is_none() && client.is_none() {
        return;
    }
    by_policy.entry(key(tls, client)).or_insert_with(|| Held {
        configs: configs(tls.map(|t| &**t), client.map(|c| &**c), provider),
        _tls: tls.cloned(),
        _client: client.cloned(),
    });
}

/// Adds the configurations route entry `entry` needs.
fn add_entry(
    by_policy: &mut HashMap<(usize, usize), Held>,
    entry: &RouteEntry,
    provider: &Arc<CryptoProvider>,
) {
    let client = entry.policy.backend_client_certificate.as_ref();
    add(
        by_policy,
        entry.policy.upstream_tls.as_ref(),
        client,
        provider,
    );
    if client.is_some() {
        add(by_policy, None, client, provider);
        for backend in entry.forwarded_backends() {
            add(by_policy, backend.tls.as_ref(), client, provider);
        }
    }
}

impl TlsClients {
    /// Builds the configurations `table`'s routes use: each route's `proxy-ssl-*` setting
    /// and each BackendTLSPolicy of a Service port, with the client certificate of the
    /// route's Gateway where it has one. A client certificate rustls refuses is logged and
    /// left out (the backend then decides).
    pub(crate) fn new(table: &RouteTable, provider: &Arc<CryptoProvider>) -> TlsClients {
        let mut by_policy = HashMap::new();
        for entry in table.entries() {
            add_entry(&mut by_policy, entry, provider);
        }
        for backend in table.backends() {
            add(&mut by_policy, backend.tls.as_ref(), None, provider);
        }
        TlsClients {
            default: configs(None, None, provider),
            by_policy,
        }
    }

    /// The configurations of `table`, which an incremental compile made from `previous`
    /// (these are `previous`'s): these, and those of the entries and backends in the
    /// chunks the tables do not share. Settings no route uses any more stay until a table
    /// shares little with its previous one (a full compile): then all is built anew.
    pub(crate) fn next(
        &self,
        table: &RouteTable,
        previous: &RouteTable,
        provider: &Arc<CryptoProvider>,
    ) -> TlsClients {
        let changed: Vec<usize> = table.entries().unshared(previous.entries()).collect();
        if changed.len() * 2 > table.entries().len().max(1) {
            return TlsClients::new(table, provider);
        }
        let mut by_policy = self.by_policy.clone();
        for entry in changed.iter().filter_map(|&id| table.entries().get(id)) {
            add_entry(&mut by_policy, entry, provider);
        }
        let backends = table.backends().unshared(previous.backends());
        for backend in backends.filter_map(|id| table.backends().get(id)) {
            add(&mut by_policy, backend.tls.as_ref(), None, provider);
        }
        TlsClients {
            default: self.default.clone(),
            by_policy,
        }
    }

    /// The configurations for a route's setting and its Gateway's client certificate.
    pub(crate) fn get(
        &self,
        tls: Option<&Arc<UpstreamTls>>,
        client: Option<&Arc<TlsCertificate>>,
    ) -> &ClientConfigs {
        self.by_policy
            .get(&key(tls, client))
            .map_or(&self.default, |held| &held.configs)
    }
}

fn configs(
    tls: Option<&UpstreamTls>,
    client: Option<&TlsCertificate>,
    provider: &Arc<CryptoProvider>,
) -> ClientConfigs {
    let build = |alpn: &[u8]| {
        let mut config = client_config(tls, client, provider);
        config.alpn_protocols = vec![alpn.to_vec()];
        Arc::new(config)
    };
    ClientConfigs {
        http1: build(b"http/1.1"),
        http2: build(b"h2"),
    }
}

/// `client`: shown when `tls` names no client certificate of its own.
fn client_config(
    tls: Option<&UpstreamTls>,
    client: Option<&TlsCertificate>,
    provider: &Arc<CryptoProvider>,
) -> ClientConfig {
    let builder = builder(tls, provider);
    let verifier: Arc<dyn ServerCertVerifier> = match tls {
        Some(tls) if tls.verify => {
            let mut roots = RootCertStore::empty();
            let (added, ignored) = roots.add_parsable_certificates(tls.trusted.iter().cloned());
            if ignored > 0 || added == 0 {
                let source = tls
                    .policy
                    .as_ref()
                    .or(tls.secret.as_ref())
                    .map(ToString::to_string);
                warn!(source = ?source, added, ignored,
                      "backend certificates are to be verified but the CA bundle has no usable \
                       certificate; TLS to this backend will fail");
            }
            let chain: Arc<dyn ServerCertVerifier> =
                match WebPkiServerVerifier::builder_with_provider(
                    Arc::new(roots),
                    Arc::clone(provider),
                )
                .build()
                {
                    Ok(verifier) if !tls.subject_alt_names.is_empty() => {
                        Arc::new(Checked(SubjectAltNames {
                            chain: verifier,
                            names: tls.subject_alt_names.clone(),
                        }))
                    }
                    Ok(verifier) => verifier,
                    // No roots at all: nothing can be trusted, so everything is refused.
                    Err(_) => Arc::new(Unverified {
                        provider: Arc::clone(provider),
                        accept: false,
                    }),
                };
            match tls.verify_depth {
                Some(depth) => Arc::new(Checked(VerifyDepth::new(chain, depth, &tls.trusted))),
                None => chain,
            }
        }
        _ => Arc::new(Unverified {
            provider: Arc::clone(provider),
            accept: true,
        }),
    };
    let builder = builder
        .dangerous()
        .with_custom_certificate_verifier(verifier);
    let client = tls.and_then(|t| t.client.as_deref()).or(client);
    let mut config = match client {
        Some(cert) => {
            match builder
                .clone()
                .with_client_auth_cert(cert.cert_chain.clone(), cert.key.clone_key())
            {
                Ok(config) => config,
                Err(error) => {
                    warn!(secret = %cert.secret, %error,
                          "client certificate of proxy-ssl-secret is not usable; none is sent");
                    builder.with_no_client_auth()
                }
            }
        }
        None => builder.with_no_client_auth(),
    };
    config.enable_sni = tls.is_some_and(|t| t.server_name);
    config
}

/// A client config builder offering the versions and TLS 1.2 suites of `tls`
/// (`proxy-ssl-protocols`, `proxy-ssl-ciphers`); rustls's otherwise.
fn builder(
    tls: Option<&UpstreamTls>,
    provider: &Arc<CryptoProvider>,
) -> rustls::ConfigBuilder<ClientConfig, rustls::WantsVerifier> {
    let versions: Vec<&'static SupportedProtocolVersion> =
        match tls.and_then(|t| t.protocols.as_ref()) {
            Some(list) => [(list.tls13, &TLS13), (list.tls12, &TLS12)]
                .into_iter()
                .filter_map(|(on, version)| on.then_some(version))
                .collect(),
            None => rustls::DEFAULT_VERSIONS.to_vec(),
        };
    let offered = match tls.and_then(|t| t.ciphers.as_deref()) {
        Some(suites) => Arc::new(with_tls12_suites(provider, suites)),
        None => Arc::clone(provider),
    };
    match ClientConfig::builder_with_provider(offered).with_protocol_versions(&versions) {
        Ok(builder) => builder,
        Err(error) => {
            // The parsers never leave a version without a suite; should it happen anyway,
            // it is logged and rustls's defaults apply.
            warn!(%error, "backend TLS versions and cipher suites do not fit; rustls's defaults apply");
            ClientConfig::builder_with_provider(Arc::clone(provider))
                .with_safe_default_protocol_versions()
                .expect("the ring provider supports the default protocol versions")
        }
    }
}

/// `provider` offering its TLS 1.3 suites (an OpenSSL cipher list never touches them) and,
/// of its TLS 1.2 suites, those in `suites`, in that order (the preference): for backends
/// (`proxy-ssl-ciphers`) and clients (the ConfigMap's `ssl-ciphers`) alike.
pub(crate) fn with_tls12_suites(
    provider: &CryptoProvider,
    suites: &[Tls12Suite],
) -> CryptoProvider {
    let tls13 = provider
        .cipher_suites
        .iter()
        .filter(|s| s.version() == &TLS13)
        .copied();
    let tls12 = suites.iter().filter_map(|wanted| {
        provider
            .cipher_suites
            .iter()
            .find(|s| u16::from(s.suite()) == wanted.iana_code())
            .copied()
    });
    CryptoProvider {
        cipher_suites: tls13.chain(tls12).collect(),
        ..provider.clone()
    }
}

/// The name a backend's certificate is checked against (and sent as SNI when on).
pub(crate) fn server_name(
    tls: Option<&UpstreamTls>,
    service: &str,
    namespace: &str,
) -> Option<ServerName<'static>> {
    let name = match tls.and_then(|t| t.name.as_deref()) {
        Some(name) => name.to_owned(),
        None => format!("{service}.{namespace}.svc"),
    };
    ServerName::try_from(name).ok()
}

/// `proxy-ssl-verify: off` (`accept`): any certificate is accepted; or verification asked
/// for without any usable root (`!accept`): every certificate is refused, so it fails
/// closed. Signatures are checked either way so the handshake itself stays sound.
#[derive(Debug)]
struct Unverified {
    provider: Arc<CryptoProvider>,
    accept: bool,
}

impl ServerCertVerifier for Unverified {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        if self.accept {
            Ok(ServerCertVerified::assertion())
        } else {
            Err(rustls::Error::InvalidCertificate(
                rustls::CertificateError::UnknownIssuer,
            ))
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        let algorithms = &self.provider.signature_verification_algorithms;
        verify_tls12_signature(message, cert, dss, algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        let algorithms = &self.provider.signature_verification_algorithms;
        verify_tls13_signature(message, cert, dss, algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

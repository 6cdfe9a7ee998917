//! TLS termination: SNI certificate choice from the current snapshot, and the default
//! certificate for names no Ingress covers: the table's (`--default-ssl-certificate`) when it
//! has one, else a self-signed one generated at start.

use std::sync::Arc;

use arc_swap::ArcSwap;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls::{CipherSuite, ServerConfig};
use sluice_routing::TlsGlobals;

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

/// The server's TLS configurations, one of which each handshake gets by its ClientHello.
///
/// Cipher suites follow Go's `crypto/tls` rule: a client whose first choice is an AES-GCM
/// suite has AES hardware, and gets AES-128-GCM (TLS 1.3: `TLS_AES_128_GCM_SHA256`, whose
/// SHA-256 key schedule costs far less than the SHA-384 one of the AES-256 suite that
/// OpenSSL-based clients list first: 17% less CPU per resumed handshake on this project's
/// machine); any other client (ChaCha20 first: no AES hardware) gets its own order.
#[derive(Clone)]
pub(crate) struct TlsConfigs {
    /// Those of the shared listeners and of Gateway sockets that check no client
    /// certificate, with the TLS settings (the ConfigMap's `ssl-*`) they were built for.
    own: Arc<ArcSwap<(TlsGlobals, ConfigPair)>>,
    /// What every configuration is built from, for those that check client certificates.
    base: Arc<ServerBase>,
}

/// One configuration per cipher suite order.
#[derive(Clone)]
pub(crate) struct ConfigPair {
    /// The client's order.
    client_order: Arc<ServerConfig>,
    /// AES-128-GCM, then AES-256-GCM, then the rest: the server's order.
    aes_first: Arc<ServerConfig>,
}

impl ConfigPair {
    /// The configuration for a handshake that starts with `hello`.
    fn for_hello(&self, hello: &ClientHello<'_>) -> Arc<ServerConfig> {
        let supported = |s: &CipherSuite| {
            self.client_order
                .crypto_provider()
                .cipher_suites
                .iter()
                .any(|ours| ours.suite() == *s)
        };
        match hello.cipher_suites().iter().find(|s| supported(s)) {
            Some(first) if is_aes_gcm(*first) => Arc::clone(&self.aes_first),
            _ => Arc::clone(&self.client_order),
        }
    }
}

/// The provider and certificate choice every server configuration shares.
struct ServerBase {
    provider: Arc<CryptoProvider>,
    resolver: Arc<SniResolver>,
    /// Configurations of the Gateway sockets that check client certificates, by setting.
    client_auth: crate::front::client_auth::ClientAuthConfigs<ConfigPair>,
}

impl TlsConfigs {
    /// The configuration for a handshake that starts with `hello`.
    pub(crate) fn for_hello(&self, hello: &ClientHello<'_>) -> Arc<ServerConfig> {
        let snapshot = self.base.resolver.table.current.load();
        self.own(&snapshot.settings.tls).for_hello(hello)
    }

    /// The configurations for the TLS settings `wanted`: built again (and those that check
    /// client certificates dropped, to be built again too) when the ConfigMap changed them.
    fn own(&self, wanted: &TlsGlobals) -> ConfigPair {
        let own = self.own.load();
        if own.0 == *wanted {
            return own.1.clone();
        }
        match build_pair(&self.base, None, wanted) {
            Ok(pair) => {
                self.own.store(Arc::new((wanted.clone(), pair.clone())));
                self.base.client_auth.clear();
                pair
            }
            Err(error) => {
                tracing::warn!(%error, "the ConfigMap's TLS settings cannot be applied; the previous stay");
                own.1.clone()
            }
        }
    }

    /// The configuration for a handshake on `gateway` (a Gateway socket; `None`: a shared
    /// listener) that starts with `hello`: one that asks for client certificates where the
    /// current table says the socket does (Gateway API `spec.tls.frontend`) or the server
    /// name's host does (`auth-tls-*`).
    pub(crate) fn for_connection(
        &self,
        hello: &ClientHello<'_>,
        gateway: Option<std::net::SocketAddr>,
    ) -> anyhow::Result<Arc<ServerConfig>> {
        let snapshot = self.base.resolver.table.current.load();
        let validation = match gateway {
            Some(socket) => snapshot.table.client_validation(socket),
            // A host with `auth-tls-*`: asked for, checked per request.
            None => hello
                .server_name()
                .and_then(|name| snapshot.table.client_cert_auth(name))
                .map(|auth| &auth.handshake),
        };
        let tls = &snapshot.settings.tls;
        let own = self.own(tls);
        match validation {
            None => Ok(own.for_hello(hello)),
            Some(validation) => Ok(self
                .base
                .client_auth
                .get(validation, |v| {
                    // Tickets and a session cache of their own: a session from a socket
                    // that checks nothing never resumes on one that checks.
                    let verifier =
                        crate::front::client_auth::verifier(v, Arc::clone(&self.base.provider))?;
                    build_pair(&self.base, Some(verifier), tls)
                })?
                .for_hello(hello)),
        }
    }
}

fn is_aes_gcm(suite: CipherSuite) -> bool {
    matches!(
        suite,
        CipherSuite::TLS13_AES_128_GCM_SHA256
            | CipherSuite::TLS13_AES_256_GCM_SHA384
            | CipherSuite::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256
            | CipherSuite::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384
            | CipherSuite::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256
            | CipherSuite::TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384
    )
}

/// Where a suite goes in the server's order: AES-128-GCM, AES-256-GCM, then the rest.
fn aes_rank(suite: CipherSuite) -> u8 {
    match suite {
        CipherSuite::TLS13_AES_128_GCM_SHA256
        | CipherSuite::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256
        | CipherSuite::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256 => 0,
        s if is_aes_gcm(s) => 1,
        _ => 2,
    }
}

/// The rustls server configurations: TLS 1.2 and 1.3, ALPN `h2` then `http/1.1`, stateless
/// session resumption (one ticket key for both), certificates from [`SniResolver`].
pub(crate) fn server_configs(
    provider: Arc<CryptoProvider>,
    table: Arc<TableShared>,
    default: Arc<CertifiedKey>,
) -> anyhow::Result<TlsConfigs> {
    let base = Arc::new(ServerBase {
        provider,
        resolver: Arc::new(SniResolver { table, default }),
        client_auth: Default::default(),
    });
    let tls = TlsGlobals::default();
    let own = build_pair(&base, None, &tls)?;
    Ok(TlsConfigs {
        own: Arc::new(ArcSwap::from_pointee((tls, own))),
        base,
    })
}

/// The two configurations (client's order, AES first) from `base`, checking client
/// certificates with `verifier` if given.
fn build_pair(
    base: &ServerBase,
    verifier: Option<Arc<dyn rustls::server::danger::ClientCertVerifier>>,
    tls: &TlsGlobals,
) -> anyhow::Result<ConfigPair> {
    // ingress-nginx's `ssl-protocols` (nginx `ssl_protocols`), default TLS 1.2 and 1.3.
    let versions: Vec<&'static rustls::SupportedProtocolVersion> = match &tls.protocols {
        Some(list) => [
            (list.tls13, &rustls::version::TLS13),
            (list.tls12, &rustls::version::TLS12),
        ]
        .into_iter()
        .filter_map(|(on, version)| on.then_some(version))
        .collect(),
        None => rustls::DEFAULT_VERSIONS.to_vec(),
    };
    // `ssl-ciphers` (nginx `ssl_ciphers`): TLS 1.2 suites only, as OpenSSL's list.
    let provider = match &tls.ciphers {
        Some(suites) => Arc::new(crate::backend::tls::with_tls12_suites(
            &base.provider,
            suites,
        )),
        None => Arc::clone(&base.provider),
    };
    let build = |provider: Arc<CryptoProvider>| -> anyhow::Result<ServerConfig> {
        let builder =
            ServerConfig::builder_with_provider(provider).with_protocol_versions(&versions)?;
        let builder = match &verifier {
            Some(verifier) => builder.with_client_cert_verifier(Arc::clone(verifier)),
            None => builder.with_no_client_auth(),
        };
        let mut config = builder.with_cert_resolver(base.resolver.clone());
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        Ok(config)
    };
    let mut client_order = build(Arc::clone(&provider))?;
    // Tickets make reconnecting clients skip the full handshake (`ssl-session-tickets`).
    if tls.session_tickets != Some(false) {
        client_order.ticketer = rustls::crypto::ring::Ticketer::new()?;
    }
    // `ssl-session-cache`, `ssl-session-cache-size` (nginx's shared session cache).
    match (tls.session_cache, tls.session_cache_entries) {
        (Some(false), _) => {
            client_order.session_storage = Arc::new(rustls::server::NoServerSessionStorage {});
        }
        (_, Some(entries)) => {
            client_order.session_storage =
                rustls::server::ServerSessionMemoryCache::new(entries.max(1));
        }
        _ => {}
    }
    let mut aes = (*provider).clone();
    aes.cipher_suites.sort_by_key(|s| aes_rank(s.suite()));
    let mut aes_first = build(Arc::new(aes))?;
    aes_first.ignore_client_order = true;
    // Shared, so that a ticket from either configuration resumes with the other.
    aes_first.ticketer = Arc::clone(&client_order.ticketer);
    aes_first.session_storage = Arc::clone(&client_order.session_storage);
    Ok(ConfigPair {
        client_order: Arc::new(client_order),
        aes_first: Arc::new(aes_first),
    })
}

/// The leaf certificate of a certified key.
pub(crate) fn leaf(key: &CertifiedKey) -> CertificateDer<'static> {
    key.cert[0].clone()
}

//! The routing snapshot: a [`RouteTable`] plus everything derived from it that requests and
//! TLS handshakes need, swapped in as one unit with a single atomic store.
//!
//! Deriving at swap time (balancer state per backend, cached metric labels, parsed TLS keys)
//! keeps that work off the request path: a request does one `ArcSwap` load and indexes
//! vectors by [`sluice_routing::Backend::id`].

use std::collections::HashMap;
use std::fmt;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use arc_swap::ArcSwap;
use rustls::crypto::CryptoProvider;
use rustls::sign::CertifiedKey;
use sluice_routing::{RouteTable, TlsCertificate};
use tracing::{debug, warn};

use crate::balancer::{Balancer, Endpoint};
use crate::metrics::{BackendMetrics, Metrics};
use crate::upstream_tls::TlsClients;

/// Per-backend state, at the same index as the backend in [`RouteTable::backends`].
#[derive(Debug)]
pub(crate) struct BackendState {
    /// Endpoint choice and in-flight counts.
    pub(crate) balancer: Balancer,
    /// Cached metric handles (shared with later snapshots for the same service).
    pub(crate) metrics: Arc<BackendMetrics>,
}

/// One immutable routing generation.
#[derive(Debug)]
pub(crate) struct Snapshot {
    /// The compiled routes.
    pub(crate) table: RouteTable,
    /// Indexed by `Backend::id`.
    pub(crate) backends: Box<[BackendState]>,
    /// rustls keys of the table's certificates, keyed by the address of their
    /// `Arc<TlsCertificate>` in `table` (stable while `table` lives).
    keys: HashMap<usize, Arc<CertifiedKey>>,
    /// The same keys with their source, so the next snapshot can reuse unchanged ones.
    parsed: Vec<(Arc<TlsCertificate>, Arc<CertifiedKey>)>,
    /// The key of [`RouteTable::default_certificate`] (`--default-ssl-certificate`), if any
    /// and usable: presented instead of the generated certificate.
    default_key: Option<Arc<CertifiedKey>>,
    /// TLS client configurations for HTTPS and GRPCS backends (`None` only for the empty
    /// table, which routes nowhere).
    pub(crate) tls_clients: Option<TlsClients>,
}

impl Snapshot {
    /// The snapshot of an empty table (everything 404, default certificate only).
    fn empty() -> Snapshot {
        Snapshot {
            table: RouteTable::empty(),
            backends: Box::default(),
            keys: HashMap::new(),
            parsed: Vec::new(),
            default_key: None,
            tls_clients: None,
        }
    }

    /// The certificate for a TLS server name, `None` for "use the default certificate".
    pub(crate) fn certified_key(&self, server_name: &str) -> Option<&Arc<CertifiedKey>> {
        let cert = self.table.certificate(server_name)?;
        self.keys.get(&(Arc::as_ptr(cert) as usize))
    }

    /// The table's default certificate (`--default-ssl-certificate`), `None` for "use the
    /// generated one".
    pub(crate) fn default_key(&self) -> Option<&Arc<CertifiedKey>> {
        self.default_key.as_ref()
    }

    /// Derives the snapshot of `table`, reusing state of `previous` where it still applies.
    fn build(
        table: RouteTable,
        previous: &Snapshot,
        metrics: &Metrics,
        provider: &Arc<CryptoProvider>,
    ) -> Snapshot {
        // Endpoint state (in-flight counts, down marks) follows the address.
        let mut endpoints: HashMap<SocketAddr, Arc<Endpoint>> = previous
            .backends
            .iter()
            .flat_map(|b| b.balancer.endpoints())
            .map(|e| (e.addr, Arc::clone(e)))
            .collect();
        // Metric handles follow the service.
        let mut by_service: HashMap<&str, &Arc<BackendMetrics>> = previous
            .backends
            .iter()
            .map(|b| (b.metrics.service.as_str(), &b.metrics))
            .collect();
        let backends = table
            .backends()
            .iter()
            .map(|backend| {
                let service = backend.service.to_string();
                let metrics = match by_service.remove(service.as_str()) {
                    Some(found) => Arc::clone(found),
                    None => Arc::new(metrics.backend(service)),
                };
                BackendState {
                    balancer: Balancer::new(&backend.endpoints, &mut endpoints),
                    metrics,
                }
            })
            .collect();

        let mut keys = HashMap::new();
        let mut parsed = Vec::new();
        for cert in table.certificates() {
            let reused = previous.parsed.iter().find(|(old, _)| {
                old.cert_chain == cert.cert_chain && old.key.secret_der() == cert.key.secret_der()
            });
            let key = match reused {
                Some((_, key)) => Arc::clone(key),
                None => match CertifiedKey::from_der(
                    cert.cert_chain.clone(),
                    cert.key.clone_key(),
                    provider,
                ) {
                    Ok(key) => Arc::new(key),
                    Err(e) => {
                        warn!(secret = %cert.secret, error = %e,
                              "unusable TLS certificate; the default certificate is served instead");
                        continue;
                    }
                },
            };
            keys.insert(Arc::as_ptr(cert) as usize, Arc::clone(&key));
            parsed.push((Arc::clone(cert), key));
        }

        // One of the table's certificates; absent here if rustls refused it (logged above).
        let default_key = table
            .default_certificate()
            .and_then(|cert| keys.get(&(Arc::as_ptr(cert) as usize)))
            .cloned();
        let tls_clients = Some(TlsClients::new(&table, provider));
        Snapshot {
            table,
            backends,
            keys,
            parsed,
            default_key,
            tls_clients,
        }
    }
}

/// State shared by every [`TableHandle`], the request path and the TLS resolver.
pub(crate) struct TableShared {
    /// The current snapshot; requests `load` it, [`TableHandle::update`] stores a new one.
    pub(crate) current: ArcSwap<Snapshot>,
    pub(crate) metrics: Arc<Metrics>,
    provider: Arc<CryptoProvider>,
    /// Serializes updates so that state carried from the previous snapshot is never lost.
    updating: Mutex<()>,
}

impl fmt::Debug for TableShared {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TableShared").finish_non_exhaustive()
    }
}

/// Cloneable handle for installing new routing tables into a running proxy.
///
/// Requests in flight keep the snapshot they started with; new requests and TLS handshakes
/// see the new table as soon as [`TableHandle::update`] returns.
#[derive(Clone, Debug)]
pub struct TableHandle {
    pub(crate) shared: Arc<TableShared>,
}

impl TableHandle {
    pub(crate) fn new(metrics: Arc<Metrics>, provider: Arc<CryptoProvider>) -> TableHandle {
        TableHandle {
            shared: Arc::new(TableShared {
                current: ArcSwap::from_pointee(Snapshot::empty()),
                metrics,
                provider,
                updating: Mutex::new(()),
            }),
        }
    }

    /// Swaps `table` in (one atomic store), deriving the per-backend state and the SNI
    /// certificate map from it first. `build_time` is how long compiling it took; it is
    /// recorded in `sluice_table_rebuild_duration_seconds`.
    pub fn update(&self, table: RouteTable, build_time: Duration) {
        let shared = &*self.shared;
        let _updating = shared.updating.lock().unwrap_or_else(|e| e.into_inner());
        let previous = shared.current.load();
        let next = Snapshot::build(table, &previous, &shared.metrics, &shared.provider);
        debug!(
            backends = next.backends.len(),
            certificates = next.keys.len(),
            "routing table swapped"
        );
        shared.current.store(Arc::new(next));
        shared.metrics.rebuilds.inc();
        shared.metrics.rebuild_duration.observe(build_time);
    }

    /// Number of backends in the current table.
    pub fn backend_count(&self) -> usize {
        self.shared.current.load().backends.len()
    }
}

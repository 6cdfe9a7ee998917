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
use crate::control_info::{ControlInfo, Warning};
use crate::metrics::{BackendMetrics, Metrics, RouteMetrics};
use crate::upstream_tls::TlsClients;

/// Per-backend state, at the same index as the backend in [`RouteTable::backends`].
#[derive(Debug)]
pub(crate) struct BackendState {
    /// Endpoint choice and in-flight counts.
    pub(crate) balancer: Balancer,
    /// Cached metric handles (shared with later snapshots for the same service).
    pub(crate) metrics: Arc<BackendMetrics>,
}

/// The request metrics of one route entry: (backend index, handles) per backend it can
/// send to.
pub(crate) type EntryMetrics = Box<[(usize, Arc<RouteMetrics>)]>;

/// One immutable routing generation.
#[derive(Debug)]
pub(crate) struct Snapshot {
    /// The compiled routes.
    pub(crate) table: RouteTable,
    /// Indexed by `Backend::id`.
    pub(crate) backends: Box<[BackendState]>,
    /// Request metrics per route entry (indexed like [`RouteTable::entries`]): one per
    /// backend the entry can send to (its own, its canary's, its `default-backend`).
    pub(crate) routes: Box<[EntryMetrics]>,
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
            routes: Box::default(),
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

        let routes = route_metrics(&table, previous, metrics);

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
            routes,
            keys,
            parsed,
            default_key,
            tls_clients,
        }
    }
}

impl Snapshot {
    /// The request metrics of a request routed with `entry` to `backend`; `None` when it
    /// was not routed.
    pub(crate) fn route_metrics(
        &self,
        entry: Option<usize>,
        backend: Option<usize>,
    ) -> Option<&Arc<RouteMetrics>> {
        let choices = self.routes.get(entry?)?;
        choices
            .iter()
            .find(|(id, _)| Some(*id) == backend)
            .or_else(|| choices.first())
            .map(|(_, metrics)| metrics)
    }
}

/// Request metric handles per route entry; handles follow their labels (namespace,
/// Ingress, service) from the previous snapshot, so counts survive swaps.
fn route_metrics(
    table: &RouteTable,
    previous: &Snapshot,
    metrics: &Metrics,
) -> Box<[EntryMetrics]> {
    let mut known: HashMap<(String, String, String), Arc<RouteMetrics>> = previous
        .routes
        .iter()
        .flat_map(|choices| choices.iter())
        .map(|(_, m)| (m.key(), Arc::clone(m)))
        .collect();
    let mut handle = |source: &sluice_routing::ObjectRef, backend: &sluice_routing::Backend| {
        let key = (
            source.namespace.clone(),
            source.name.clone(),
            backend.service.to_string(),
        );
        let found = known.get(&key).cloned();
        let metrics = found.unwrap_or_else(|| {
            let made = Arc::new(metrics.route(&key.0, &key.1, key.2.clone()));
            known.insert(key, Arc::clone(&made));
            made
        });
        (backend.id, metrics)
    };
    table
        .entries()
        .iter()
        .map(|entry| {
            let mut choices = vec![handle(&entry.source, &entry.backend)];
            if let Some(canary) = &entry.canary {
                choices.push(handle(&canary.source, &canary.backend));
            }
            if let Some(fallback) = &entry.fallback {
                choices.push(handle(&entry.source, fallback));
            }
            choices.into_boxed_slice()
        })
        .collect()
}

/// State shared by every [`TableHandle`], the request path and the TLS resolver.
pub(crate) struct TableShared {
    /// The current snapshot; requests `load` it, [`TableHandle::update`] stores a new one.
    pub(crate) current: ArcSwap<Snapshot>,
    pub(crate) metrics: Arc<Metrics>,
    provider: Arc<CryptoProvider>,
    /// Serializes updates so that state carried from the previous snapshot is never lost.
    updating: Mutex<()>,
    /// Warnings and the explainer, reported by the control plane for the admin server.
    pub(crate) control: Mutex<ControlInfo>,
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
                control: Mutex::new(ControlInfo::default()),
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
        shared.metrics.generation.inc();
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX));
        shared.metrics.last_swap.set(now);
    }

    /// Replaces the warnings the dashboard and `/api/v1/status` show (the compiler's
    /// diagnostics, flag problems, Ingresses no class selects).
    pub fn set_warnings(&self, warnings: Vec<Warning>) {
        let mut control = self
            .shared
            .control
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        control.warnings = warnings;
    }

    /// Sets what answers `/api/v1/explain` (`sluice explain` against the admin port): a
    /// function of the request's host and path to the explanation's text.
    pub fn set_explainer(&self, explain: impl Fn(&str, &str) -> String + Send + Sync + 'static) {
        let mut control = self
            .shared
            .control
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        control.explainer = Some(Arc::new(explain));
    }

    /// Number of backends in the current table.
    pub fn backend_count(&self) -> usize {
        self.shared.current.load().backends.len()
    }
}

//! The routing snapshot: a [`RouteTable`] plus everything derived from it that requests and
//! TLS handshakes need, swapped in as one unit with a single atomic store.
//!
//! Deriving at swap time (balancer state per backend, cached metric labels, parsed TLS keys)
//! keeps that work off the request path: a request does one `ArcSwap` load and indexes
//! vectors by [`sluice_routing::Backend::id`].

use std::cell::RefCell;
use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use arc_swap::ArcSwap;
use rustls::crypto::CryptoProvider;
use rustls::sign::CertifiedKey;
use sluice_routing::persistent::ChunkedVec;
use sluice_routing::{RouteTable, TlsCertificate};
use tracing::{debug, warn};

use crate::backend::balancer::Balancer;
use crate::backend::endpoint_index::EndpointIndex;
use crate::backend::tls::TlsClients;
use crate::global_rate_limit::StoreHandle;
use crate::observe::control_info::{ControlInfo, Warning};
use crate::observe::metrics::{BackendMetrics, Metrics, RouteMetrics};
use crate::runtime::gateway_sockets::{BindFailures, GatewaySockets};
use crate::settings::Settings;
use crate::trace::Tracer;

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
/// Shared with the previous snapshot for entries that did not change.
pub(crate) type EntryMetrics = Arc<[(usize, Arc<RouteMetrics>)]>;

/// One immutable routing generation.
#[derive(Debug)]
pub(crate) struct Snapshot {
    /// The compiled routes.
    pub(crate) table: RouteTable,
    /// Indexed by `Backend::id`; shared with the previous snapshot for backends that did
    /// not change.
    pub(crate) backends: ChunkedVec<Arc<BackendState>>,
    /// Request metrics per route entry (indexed like [`RouteTable::entries`]): one per
    /// backend the entry can send to (its own, its canary's, its `default-backend`).
    pub(crate) routes: ChunkedVec<EntryMetrics>,
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
    /// The verifier of each host's client certificate check (`auth-tls-*`), keyed by the
    /// address of its `Arc<ClientCertAuth>` in `table`; absent where the CA does not load.
    client_cert_verifiers: HashMap<usize, Arc<dyn rustls::server::danger::ClientCertVerifier>>,
    /// The flags with the table's ConfigMap keys over them.
    pub(crate) settings: Arc<Settings>,
    /// The keys [`Snapshot::settings`] were worked out from.
    settings_from: Arc<sluice_routing::ProxyGlobals>,
    /// The span exporter of [`Settings::tracing`], when a collector is set.
    pub(crate) tracer: Option<Arc<Tracer>>,
    /// The global rate limit's store of [`Settings::global_rate_limit`], when one is set.
    pub(crate) global_store: Option<Arc<StoreHandle>>,
}

/// The flags every snapshot's [`Settings`] start from.
#[derive(Debug)]
pub(crate) struct Flags {
    /// The proxy's flags.
    pub(crate) args: crate::config::ProxyArgs,
    /// This proxy's `Via` name (`--proxy-id`, or made at start).
    pub(crate) proxy_id: String,
}

impl Snapshot {
    /// The snapshot of an empty table (everything 404, default certificate only).
    fn empty(
        settings: Arc<Settings>,
        tracer: Option<Arc<Tracer>>,
        global_store: Option<Arc<StoreHandle>>,
    ) -> Snapshot {
        Snapshot {
            settings,
            tracer,
            global_store,
            settings_from: Arc::default(),
            table: RouteTable::empty(),
            backends: ChunkedVec::new(),
            routes: ChunkedVec::new(),
            keys: HashMap::new(),
            parsed: Vec::new(),
            default_key: None,
            tls_clients: None,
            client_cert_verifiers: HashMap::new(),
        }
    }

    /// The certificate for a TLS server name, `None` for "use the default certificate".
    pub(crate) fn certified_key(&self, server_name: &str) -> Option<&Arc<CertifiedKey>> {
        let cert = self.table.certificate(server_name)?;
        self.keys.get(&(Arc::as_ptr(cert) as usize))
    }

    /// The verifier of a client certificate check of this snapshot's table.
    pub(crate) fn client_cert_verifier(
        &self,
        auth: &Arc<sluice_routing::ClientCertAuth>,
    ) -> Option<&Arc<dyn rustls::server::danger::ClientCertVerifier>> {
        self.client_cert_verifiers
            .get(&(Arc::as_ptr(auth) as usize))
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
        endpoints: &mut EndpointIndex,
        metrics: &Metrics,
        provider: &Arc<CryptoProvider>,
        flags: &Flags,
    ) -> Snapshot {
        // Worked out again only when the ConfigMap's keys changed.
        let settings = if Arc::ptr_eq(table.globals(), &previous.settings_from)
            || **table.globals() == *previous.settings_from
        {
            Arc::clone(&previous.settings)
        } else {
            Arc::new(Settings::new(&flags.args, &flags.proxy_id, table.globals()))
        };
        // A new exporter only when the tracing settings changed.
        let tracer = if settings.tracing == previous.settings.tracing {
            previous.tracer.clone()
        } else {
            match Tracer::new(&settings.tracing) {
                Ok(tracer) => tracer.map(Arc::new),
                Err(error) => {
                    warn!(%error, "the new tracing settings cannot be applied; the previous stay");
                    previous.tracer.clone()
                }
            }
        };
        // Endpoint state (in-flight counts, down marks) follows the address. A backend the
        // previous table had at the same index (an incremental compile keeps the backends
        // it did not touch) keeps its state as it is; one whose addresses did not change
        // takes its previous balancer's endpoints; the others find theirs in `endpoints`.
        // Metric handles (and unchanged balancers) follow the service.
        let mut by_service: Option<HashMap<&str, &Arc<BackendState>>> = None;
        let before_backends = previous.table.backends();
        // Chunks of backends the previous table shares with this one keep their state
        // as it is, without a look at each backend.
        let mut state_of = |id: usize, backend: &Arc<sluice_routing::Backend>| {
            let same_index = previous.backends.get(id);
            if let (Some(old), Some(state)) = (before_backends.get(id), same_index)
                && Arc::ptr_eq(old, backend)
            {
                return Arc::clone(state);
            }
            let service = service_label(&backend.service);
            // A backend whose endpoints changed keeps its id (endpoint changes): its
            // previous state is at the same index, found without a map of every backend.
            let before = match same_index {
                Some(state) if state.metrics.service == service => Some(state),
                _ => by_service
                    .get_or_insert_with(|| {
                        previous
                            .backends
                            .iter()
                            .map(|b| (b.metrics.service.as_str(), b))
                            .collect()
                    })
                    .remove(service.as_str()),
            };
            let metrics = match before {
                Some(found) => Arc::clone(&found.metrics),
                None => Arc::new(metrics.backend(service)),
            };
            let balancer = match before {
                Some(found) if found.balancer.has_addrs(&backend.endpoints) => {
                    found.balancer.same_endpoints()
                }
                _ => Balancer::new(&backend.endpoints, endpoints),
            };
            Arc::new(BackendState { balancer, metrics })
        };
        let backends =
            table
                .backends()
                .derive(before_backends, &previous.backends, |first, chunk| {
                    chunk
                        .iter()
                        .enumerate()
                        .map(|(k, backend)| state_of(first + k, backend))
                        .collect()
                });

        let routes = route_metrics(&table, &backends, previous, metrics);

        let mut keys = HashMap::new();
        let mut parsed = Vec::new();
        // The previous keys by content, made when a certificate is not one of the
        // previous table's own (`Arc`): one look-up per certificate, not a search.
        let mut by_content: Option<KeysByContent<'_>> = None;
        for cert in table.certificates() {
            let reused = previous
                .keys
                // The previous table holds its certificates: an address among its keys is
                // that very certificate.
                .get(&(Arc::as_ptr(cert) as usize))
                .or_else(|| {
                    let chain = cert.cert_chain.first().map_or(&[][..], |c| c.as_ref());
                    by_content
                        .get_or_insert_with(|| {
                            previous
                                .parsed
                                .iter()
                                .map(|(old, key)| {
                                    let chain =
                                        old.cert_chain.first().map_or(&[][..], |c| c.as_ref());
                                    ((chain, old.key.secret_der()), key)
                                })
                                .collect()
                        })
                        .get(&(chain, cert.key.secret_der()))
                        .copied()
                        .filter(|key| key.cert == cert.cert_chain)
                });
            let key = match reused {
                Some(key) => Arc::clone(key),
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
        let tls_clients = Some(match &previous.tls_clients {
            Some(clients) => clients.next(&table, &previous.table, provider),
            None => TlsClients::new(&table, provider),
        });
        let client_cert_verifiers = table
            .client_cert_auths()
            .filter_map(|auth| {
                let verifier = client_cert_verifier(auth, provider)?;
                Some((Arc::as_ptr(auth) as usize, verifier))
            })
            .collect();
        // A new store client only when its settings changed (counts live in the store,
        // so nothing is lost).
        let global_store = if settings.global_rate_limit == previous.settings.global_rate_limit {
            previous.global_store.clone()
        } else {
            match StoreHandle::new(&settings.global_rate_limit) {
                Ok(store) => store.map(Arc::new),
                Err(error) => {
                    warn!(%error, "the new global rate limit store cannot be used; the previous stays");
                    previous.global_store.clone()
                }
            }
        };
        Snapshot {
            settings_from: Arc::clone(table.globals()),
            settings,
            tracer,
            global_store,
            client_cert_verifiers,
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
/// Ingress, service) from the previous snapshot, so counts survive swaps. Most entries
/// share their source and backend with others (an Ingress's paths), so each (source,
/// backend) pair is looked up once, and without allocating unless its handles are new.
fn route_metrics<'t>(
    table: &'t RouteTable,
    backends: &ChunkedVec<Arc<BackendState>>,
    previous: &Snapshot,
    metrics: &Metrics,
) -> ChunkedVec<EntryMetrics> {
    let before = previous.table.entries();
    let entries = table.entries();
    // Entries the previous table had at the same index keep their handles.
    let kept = |id: usize| {
        before
            .get(id)
            .zip(previous.routes.get(id))
            .zip(entries.get(id))
            .is_some_and(|((old, _), new)| Arc::ptr_eq(old, new))
    };
    // The previous snapshot's handles by label, made on the first entry that needs them:
    // those of the entries not kept, which lie in the chunks the tables do not share.
    let mut known: Option<KnownHandles<'_>> = None;
    let mut made: HashMap<(&'static str, &'t str, &'t str, usize), Arc<RouteMetrics>> =
        HashMap::new();
    let mut handle = |source: &'t sluice_routing::ObjectRef, backend: &sluice_routing::Backend| {
        let id = backend.id;
        let pair = (
            source.kind,
            source.namespace.as_str(),
            source.name.as_str(),
            id,
        );
        let found = made.get(&pair).map(Arc::clone);
        let handles = found.unwrap_or_else(|| {
            // The backend's `service` label, worked out once per backend in `backends`.
            let label = backends.get(id).map_or_else(
                || service_label(&backend.service),
                |b| b.metrics.service.clone(),
            );
            let key = (pair.0, pair.1, pair.2, label.as_str());
            // The handles of the previous entries that are not kept: where a changed
            // entry's counts continue (after an incremental compile, a few).
            let known = known.get_or_insert_with(|| {
                before
                    .unshared(entries)
                    .filter(|&id| !kept(id))
                    .filter_map(|id| previous.routes.get(id))
                    .flat_map(|choices| choices.iter())
                    .map(|(_, m)| (m.borrowed_key(), m))
                    .collect()
            });
            let handles = match known.get(&key) {
                Some(found) => Arc::clone(found),
                None => Arc::new(metrics.route(pair.0, pair.1, pair.2, label.clone())),
            };
            made.insert(pair, Arc::clone(&handles));
            handles
        });
        (id, handles)
    };
    // Chunks the previous table shares with this one keep their handles as they are.
    entries.derive(before, &previous.routes, |first, chunk| {
        chunk
            .iter()
            .enumerate()
            .map(|(k, entry)| {
                let id = first + k;
                // The same entry (an incremental compile keeps the ones it did not touch)
                // has the same backends, hence the same handles.
                if kept(id)
                    && let Some(handles) = previous.routes.get(id)
                {
                    return Arc::clone(handles);
                }
                let mut choices = vec![handle(&entry.source, &entry.backend)];
                if let Some(canary) = &entry.canary {
                    choices.push(handle(&canary.source, &canary.backend));
                }
                if let Some(fallback) = &entry.fallback {
                    choices.push(handle(&entry.source, fallback));
                }
                // Gateway API weighted `backendRefs`: each counted under its own Service.
                for target in &entry.split {
                    if !choices.iter().any(|(id, _)| *id == target.backend.id) {
                        choices.push(handle(&entry.source, &target.backend));
                    }
                }
                choices.into()
            })
            .collect()
    })
}

/// The previous snapshot's parsed keys by their certificate's first DER and key DER.
type KeysByContent<'p> = HashMap<(&'p [u8], &'p [u8]), &'p Arc<CertifiedKey>>;

/// The previous snapshot's route metric handles by their labels (kind, namespace, name,
/// service).
type KnownHandles<'p> = HashMap<(&'static str, &'p str, &'p str, &'p str), &'p Arc<RouteMetrics>>;

/// A request's hold on the snapshot it was routed with. Requests clone this per-thread
/// `Arc` rather than the snapshot's own, whose count every worker would write: on the
/// request path each worker then writes only reference counts of its own.
pub(crate) type SnapshotRef = Arc<HeldSnapshot>;

/// The current snapshot as one thread holds it (see [`TableShared::snapshot`]).
#[derive(Debug)]
pub(crate) struct HeldSnapshot(Arc<Snapshot>);

impl std::ops::Deref for HeldSnapshot {
    type Target = Snapshot;

    fn deref(&self) -> &Snapshot {
        &self.0
    }
}

thread_local! {
    /// The snapshot this thread's requests last used. Keeping it alive also keeps its
    /// address from being reused, so comparing addresses is enough to know it is current.
    /// A thread keeps at most one old snapshot until its next request.
    static HELD: RefCell<Option<SnapshotRef>> = const { RefCell::new(None) };
}

/// The `service` label of a backend's series: `namespace/name:port`, or empty for a rule
/// that names no Service (a Gateway API rule without `backendRefs`, e.g. redirect-only).
pub(crate) fn service_label(service: &sluice_routing::ServiceRef) -> String {
    if service.name.is_empty() {
        String::new()
    } else {
        service.to_string()
    }
}

/// State shared by every [`TableHandle`], the request path and the TLS resolver.
pub(crate) struct TableShared {
    /// The current snapshot; requests `load` it, [`TableHandle::update`] stores a new one.
    pub(crate) current: ArcSwap<Snapshot>,
    pub(crate) metrics: Arc<Metrics>,
    provider: Arc<CryptoProvider>,
    /// What every snapshot's settings start from.
    flags: Flags,
    /// Serializes updates so that state carried from the previous snapshot is never lost;
    /// holds the endpoints by address, which only an update reads and writes.
    updating: Mutex<EndpointIndex>,
    /// Warnings and the explainer, reported by the control plane for the admin server.
    pub(crate) control: Mutex<ControlInfo>,
    /// Frees replaced snapshots off the request path.
    retired: crate::retired::Retired<Snapshot>,
}

impl TableShared {
    /// The current snapshot, for one request on this thread: one atomic load of the table,
    /// and a new per-thread hold only when the table was swapped since the last request.
    pub(crate) fn snapshot(&self) -> SnapshotRef {
        let current = self.current.load();
        HELD.with(|held| {
            let mut held = held.borrow_mut();
            if let Some(held) = held.as_ref().filter(|h| Arc::ptr_eq(&h.0, &current)) {
                return Arc::clone(held);
            }
            let fresh = Arc::new(HeldSnapshot(arc_swap::Guard::into_inner(current)));
            *held = Some(Arc::clone(&fresh));
            fresh
        })
    }
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
    /// Bound and closed as tables name Gateway addresses.
    sockets: Arc<GatewaySockets>,
}

impl TableHandle {
    pub(crate) fn new(
        metrics: Arc<Metrics>,
        provider: Arc<CryptoProvider>,
        sockets: GatewaySockets,
        flags: Flags,
        tracer: Option<Tracer>,
        global_store: Option<StoreHandle>,
    ) -> TableHandle {
        let settings = Arc::new(Settings::from_flags(&flags.args, &flags.proxy_id));
        let empty = Snapshot::empty(settings, tracer.map(Arc::new), global_store.map(Arc::new));
        TableHandle {
            sockets: Arc::new(sockets),
            shared: Arc::new(TableShared {
                current: ArcSwap::from_pointee(empty),
                metrics,
                provider,
                flags,
                updating: Mutex::new(EndpointIndex::default()),
                control: Mutex::new(ControlInfo::default()),
                retired: crate::retired::Retired::new(),
            }),
        }
    }

    /// Swaps `table` in (one atomic store), deriving the per-backend state and the SNI
    /// certificate map from it first. `build_time` is how long compiling it took; it is
    /// recorded in `sluice_table_rebuild_duration_seconds`.
    ///
    /// Then binds the sockets of Gateways with addresses of their own that the table names
    /// and closes those it no longer names; returns the sockets that could not be bound
    /// (they are tried again with the next table).
    pub fn update(&self, table: RouteTable, build_time: Duration) -> BindFailures {
        self.swap(table, build_time)
    }

    /// [`TableHandle::update`] with a table compiled in part (only the hosts a change
    /// touched; `sluice_table_partial_rebuilds_total` counts these too).
    pub fn update_partial(&self, table: RouteTable, build_time: Duration) -> BindFailures {
        self.shared.metrics.partial_rebuilds.inc();
        self.swap(table, build_time)
    }

    /// Swaps `table` in: what [`TableHandle::update`] describes.
    fn swap(&self, table: RouteTable, build_time: Duration) -> BindFailures {
        let shared = &*self.shared;
        let mut endpoints = shared.updating.lock().unwrap_or_else(|e| e.into_inner());
        let sockets = table.gateway_sockets();
        let previous = shared.current.load();
        let next = Snapshot::build(
            table,
            &previous,
            &mut endpoints,
            &shared.metrics,
            &shared.provider,
            &shared.flags,
        );
        debug!(
            backends = next.backends.len(),
            certificates = next.keys.len(),
            "routing table swapped"
        );
        let replaced = previous
            .tracer
            .as_ref()
            .filter(|old| {
                !next
                    .tracer
                    .as_ref()
                    .is_some_and(|new| Arc::ptr_eq(old, new))
            })
            .map(Arc::clone);
        let old = shared.current.swap(Arc::new(next));
        drop(previous);
        shared.retired.retire(old);
        if let Some(old) = replaced {
            // Its queued spans go out off the request path; this holds the last reference,
            // so no worker thread ever blocks dropping it.
            let stopping = std::thread::Builder::new()
                .name("sluice-trace-stop".into())
                .spawn(move || old.shutdown_blocking());
            if let Err(error) = stopping {
                warn!(%error, "stopping the previous span exporter");
            }
        }
        shared.metrics.rebuilds.inc();
        shared.metrics.rebuild_duration.observe(build_time);
        shared.metrics.generation.inc();
        shared
            .metrics
            .set_certificates(certificate_expiries(&shared.current.load().table));
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX));
        shared.metrics.last_swap.set(now);
        self.sockets.reconcile(&sockets)
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
    pub fn set_explainer(
        &self,
        explain: impl Fn(&sluice_routing::ExplainRequest) -> String + Send + Sync + 'static,
    ) {
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

/// The verifier of a host's client certificate check: the CA certificates of its Secret
/// (`None` when none loads: nothing verifies then).
fn client_cert_verifier(
    auth: &sluice_routing::ClientCertAuth,
    provider: &Arc<CryptoProvider>,
) -> Option<Arc<dyn rustls::server::danger::ClientCertVerifier>> {
    let mut roots = rustls::RootCertStore::empty();
    roots.add_parsable_certificates(auth.handshake.roots.iter().cloned());
    rustls::server::WebPkiClientVerifier::builder_with_provider(
        Arc::new(roots),
        Arc::clone(provider),
    )
    .build()
    .ok()
}

/// Each certificate of `table` with when it expires, for the expiry gauges (one that cannot
/// be read is left out: the dashboard shows why).
fn certificate_expiries(
    table: &sluice_routing::RouteTable,
) -> Vec<(crate::observe::metrics::CertificateLabels, i64)> {
    table
        .certificates()
        .filter_map(|cert| {
            let leaf = crate::observe::certificate::leaf(cert).ok()?;
            let labels = crate::observe::metrics::CertificateLabels {
                namespace: cert.secret.namespace.clone(),
                secret: cert.secret.name.clone(),
                host: leaf.names.first().cloned().unwrap_or_default(),
            };
            Some((labels, leaf.not_after))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn handle() -> TableHandle {
        let mut registry = prometheus_client::registry::Registry::default();
        let metrics = Metrics::new(&mut registry, crate::runtime::shard::Shards::new(1));
        TableHandle::new(
            metrics,
            Arc::new(rustls::crypto::ring::default_provider()),
            GatewaySockets::new(1).0,
            Flags {
                args: crate::config::ProxyArgs::default(),
                proxy_id: "test".to_owned(),
            },
            None,
            None,
        )
    }

    #[test]
    fn a_thread_holds_the_current_snapshot_until_the_table_is_swapped() {
        let table = handle();
        let first = table.shared.snapshot();
        let again = table.shared.snapshot();
        assert!(
            Arc::ptr_eq(&first, &again),
            "one hold per thread while unchanged"
        );
        let held = Arc::clone(&first.0);
        drop((first, again));

        table.update(RouteTable::empty(), Duration::ZERO);
        let next = table.shared.snapshot();
        assert!(
            !Arc::ptr_eq(&next.0, &held),
            "a swap is seen by the next request"
        );
        assert!(Arc::ptr_eq(&next.0, &table.shared.current.load_full()));
        // The thread no longer holds the old snapshot: only `held` does, and the retired
        // list, which frees it once `held` is gone (off this thread).
        assert_eq!(Arc::strong_count(&held), 2);

        // Another thread gets its own hold of the same snapshot.
        let other = std::thread::scope(|scope| {
            scope
                .spawn(|| Arc::clone(&table.shared.snapshot().0))
                .join()
                .expect("thread")
        });
        assert!(Arc::ptr_eq(&other, &next.0));
    }

    #[test]
    fn two_tables_on_one_thread_each_get_their_own_snapshot() {
        let (a, b) = (handle(), handle());
        for _ in 0..3 {
            let (from_a, from_b) = (a.shared.snapshot(), b.shared.snapshot());
            assert!(Arc::ptr_eq(&from_a.0, &a.shared.current.load_full()));
            assert!(Arc::ptr_eq(&from_b.0, &b.shared.current.load_full()));
        }
    }

    /// Two Ingresses on their own hosts and Services; `second_host` moves the second.
    fn inputs(second_host: &str) -> sluice_routing::Inputs {
        fn from<T: k8s_openapi::serde::de::DeserializeOwned>(v: serde_json::Value) -> Arc<T> {
            Arc::new(serde_json::from_value(v).expect("object"))
        }
        let ingress = |name: &str, host: &str, service: &str| {
            from(serde_json::json!({
                "metadata": {"namespace": "ns", "name": name},
                "spec": {"ingressClassName": "sluice", "rules": [{"host": host, "http": {"paths": [
                    {"path": "/", "pathType": "Prefix", "backend":
                        {"service": {"name": service, "port": {"number": 80}}}}]}}]}
            }))
        };
        let service = |name: &str| {
            from(serde_json::json!({
                "metadata": {"namespace": "ns", "name": name},
                "spec": {"ports": [{"port": 80}]}
            }))
        };
        sluice_routing::Inputs {
            ingresses: vec![
                ingress("one", "one.test", "a"),
                ingress("two", second_host, "b"),
            ]
            .into(),
            ingress_classes: vec![from(serde_json::json!({
                "metadata": {"name": "sluice"},
                "spec": {"controller": sluice_routing::DEFAULT_CONTROLLER_NAME}
            }))]
            .into(),
            services: vec![service("a"), service("b")].into(),
            ..Default::default()
        }
    }

    /// Compiles `inputs` after one object changed (an incremental compile of that one) and
    /// swaps the table in.
    fn swap_one_change(
        table: &TableHandle,
        compiler: &mut sluice_routing::IncrementalCompiler,
        inputs: &sluice_routing::Inputs,
        options: &sluice_routing::CompileOptions,
    ) {
        let compiled = compiler.compile(inputs, options);
        assert!(matches!(
            compiler.last_kind(),
            sluice_routing::CompileKind::Incremental { objects: 1 }
        ));
        table.update_partial(compiled.table, Duration::ZERO);
    }

    #[test]
    fn a_swap_keeps_the_state_of_the_entries_and_backends_an_incremental_compile_kept() {
        let table = handle();
        let options = sluice_routing::CompileOptions::default();
        let mut compiler = sluice_routing::IncrementalCompiler::new();
        let mut inputs = inputs("two.test");
        table.update(compiler.compile(&inputs, &options).table, Duration::ZERO);
        let before = table.shared.current.load_full();
        // The second Ingress moves host; the first is untouched.
        inputs.ingresses[1] = Arc::clone(&self::inputs("moved.test").ingresses[1]);
        swap_one_change(&table, &mut compiler, &inputs, &options);
        let after = table.shared.current.load_full();

        let kept = after.table.route_id("one.test", "/").expect("one routes");
        assert_eq!(Some(kept), before.table.route_id("one.test", "/"));
        assert!(Arc::ptr_eq(&after.routes[kept], &before.routes[kept]));
        let kept_backend = after.table.entry(kept).backend.id;
        assert!(Arc::ptr_eq(
            &after.backends[kept_backend],
            &before.backends[kept_backend]
        ));

        let moved = after
            .table
            .route_id("moved.test", "/")
            .expect("moved routes");
        assert!(after.table.route_id("two.test", "/").is_none());
        assert!(
            !before
                .routes
                .get(moved)
                .is_some_and(|old| Arc::ptr_eq(old, &after.routes[moved])),
            "a new entry gets handles of its own"
        );
        // Its counts still go to the same series: the same route, backend and labels.
        let old = before.table.route_id("two.test", "/").expect("two routed");
        assert!(Arc::ptr_eq(
            &after.routes[moved][0].1,
            &before.routes[old][0].1
        ));
    }

    /// A route to a Service no route named before: its backend is new to the table and
    /// finds the state of its addresses by address (one `Endpoint` per address, across
    /// Services and tables); an address no backend had gets state of its own.
    #[test]
    fn a_backend_new_to_the_table_shares_the_state_of_its_addresses() {
        let slice = |service: &str,
                     addresses: &[&str]|
         -> Arc<k8s_openapi::api::discovery::v1::EndpointSlice> {
            Arc::new(
                serde_json::from_value(serde_json::json!({
                    "metadata": {"namespace": "ns", "name": format!("{service}-1"),
                                 "labels": {"kubernetes.io/service-name": service}},
                    "addressType": "IPv4",
                    "ports": [{"port": 8080}],
                    "endpoints": addresses.iter().map(|a| serde_json::json!(
                        {"addresses": [a], "conditions": {"ready": true}})).collect::<Vec<_>>()
                }))
                .expect("slice"),
            )
        };
        let table = handle();
        let options = sluice_routing::CompileOptions::default();
        let mut compiler = sluice_routing::IncrementalCompiler::new();
        let mut inputs = inputs("two.test");
        let second = inputs.ingresses.pop().expect("two Ingresses");
        inputs.endpoint_slices = vec![
            slice("a", &["10.0.0.1", "10.0.0.2"]),
            slice("b", &["10.0.0.2", "10.0.0.3"]),
        ]
        .into();
        table.update(compiler.compile(&inputs, &options).table, Duration::ZERO);
        let before = table.shared.current.load_full();
        let one = before.table.route_id("one.test", "/").expect("one routes");
        let a = &before.backends[before.table.entry(one).backend.id].balancer;
        assert_eq!(a.len(), 2);

        inputs.ingresses.push(second);
        swap_one_change(&table, &mut compiler, &inputs, &options);
        let after = table.shared.current.load_full();
        let two = after.table.route_id("two.test", "/").expect("two routes");
        let b = &after.backends[after.table.entry(two).backend.id].balancer;
        let at = |balancer: &Balancer, ip: &str| {
            let addr: std::net::SocketAddr = format!("{ip}:8080").parse().expect("address");
            Arc::clone(
                balancer
                    .endpoints()
                    .iter()
                    .find(|e| e.addr == addr)
                    .expect("endpoint"),
            )
        };
        assert!(
            Arc::ptr_eq(&at(a, "10.0.0.2"), &at(b, "10.0.0.2")),
            "the address both Services have is one endpoint"
        );
        let fresh = at(b, "10.0.0.3");
        assert!(a.endpoints().iter().all(|e| !Arc::ptr_eq(e, &fresh)));
    }

    /// The TLS client settings of a swapped-in table are carried over from the previous
    /// snapshot and completed from the entries the compile changed: an Ingress that starts
    /// asking for TLS settings towards its backend (`proxy-ssl-name`) gets them, and the
    /// untouched one keeps none.
    #[test]
    fn a_swap_after_an_incremental_compile_has_the_tls_settings_of_the_changed_entries() {
        let table = handle();
        let options = sluice_routing::CompileOptions::default();
        let mut compiler = sluice_routing::IncrementalCompiler::new();
        let mut inputs = inputs("two.test");
        table.update(compiler.compile(&inputs, &options).table, Duration::ZERO);
        let mut second = (*inputs.ingresses[1]).clone();
        second.metadata.annotations = Some(
            [
                ("nginx.ingress.kubernetes.io/proxy-ssl-name", "b.internal"),
                ("nginx.ingress.kubernetes.io/proxy-ssl-server-name", "on"),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect(),
        );
        inputs.ingresses[1] = Arc::new(second);
        swap_one_change(&table, &mut compiler, &inputs, &options);
        let after = table.shared.current.load_full();
        let clients = after.tls_clients.as_ref().expect("clients");
        let default = clients.get(None, None);
        let id = after.table.route_id("two.test", "/").expect("two routes");
        let tls = after.table.entry(id).policy.upstream_tls.as_ref();
        assert!(tls.is_some(), "proxy-ssl-name makes a TLS setting");
        let configs = clients.get(tls, None);
        assert!(
            !Arc::ptr_eq(&configs.http1, &default.http1),
            "the changed entry's setting has configurations of its own"
        );
        let one = after.table.route_id("one.test", "/").expect("one routes");
        assert!(after.table.entry(one).policy.upstream_tls.is_none());
    }
}

//! Puts what a partial compile made for some hosts into a copy of the previous table, in
//! place of what that table had for them.
//!
//! A partial table numbers its entries and backends from 0; the previous table's rule
//! sets and the proxy's per-backend state hold the previous numbers. So the partial
//! table's backends become the previous table's backends of the same Service port and
//! content (new ones are added at the end), and its entries move into the slots the
//! replaced rules leave free (or are added at the end). Slots left free hold an entry
//! that forwards nowhere until a later graft reuses them.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use crate::backend::Backend;
use crate::host::HostPattern;
use crate::key::Key;
use crate::policy::Policy;
use crate::refs::ServiceRef;
use crate::rules::{RuleSet, StreamTarget};
use crate::table::{RouteEntry, RouteTable};
use crate::tls::TlsCertificate;

/// Why a graft could not be made (the caller compiles everything instead).
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct GraftError(pub &'static str);

/// The backend ids of a table by Service port (several when their content differs, as
/// a `service-upstream` backend's does).
pub(crate) type BackendsByService = HashMap<ServiceRef, Vec<usize>>;

/// [`BackendsByService`] of `table`.
pub(crate) fn backends_by_service(table: &RouteTable) -> BackendsByService {
    let mut out: BackendsByService = HashMap::new();
    for backend in &table.backends {
        out.entry(backend.service.clone())
            .or_default()
            .push(backend.id);
    }
    out
}

/// What a graft left for the next one.
pub(crate) struct Grafted {
    /// Backends added to the table.
    pub added_backends: usize,
}

/// Replaces `table`'s rules, certificates, client certificate checks and passthrough
/// targets of `hosts` with `partial`'s. `free`: entry slots no rule reaches, used first and
/// given back with the slots this graft frees. Every host `partial` has rules for must be
/// in `hosts`.
pub(crate) fn graft(
    table: &mut RouteTable,
    partial: RouteTable,
    hosts: &HashSet<HostPattern>,
    free: &mut Vec<u32>,
    by_service: &mut BackendsByService,
) -> Result<Grafted, GraftError> {
    let RouteTable {
        exact_hosts,
        wildcard_hosts,
        any_host,
        entries,
        exact_certs,
        wildcard_certs,
        backends,
        client_certs,
        passthrough,
        ..
    } = partial;
    let covered = |host: HostPattern| hosts.contains(&host);
    if !exact_hosts
        .keys()
        .chain(exact_certs.keys())
        .chain(passthrough.keys())
        .all(|h| covered(HostPattern::Exact(h.as_str().to_owned())))
        || !wildcard_hosts
            .keys()
            .chain(wildcard_certs.keys())
            .all(|s| covered(HostPattern::Wildcard(s.as_str().to_owned())))
        || (any_host.is_some() && !covered(HostPattern::Any))
    {
        return Err(GraftError(
            "the partial compile made rules for a host it was not given",
        ));
    }

    // Out with the hosts' previous rules; their entries are no rule's any more.
    let mut freed: Vec<u32> = Vec::new();
    let mut unused_certs: Vec<Arc<TlsCertificate>> = Vec::new();
    for host in hosts {
        let removed = match host {
            HostPattern::Exact(name) => {
                unused_certs.extend(table.exact_certs.remove(name.as_str()));
                table.passthrough.remove(name.as_str());
                table.exact_hosts.remove(name.as_str())
            }
            HostPattern::Wildcard(suffix) => {
                unused_certs.extend(table.wildcard_certs.remove(suffix.as_str()));
                table.wildcard_hosts.remove(suffix.as_str())
            }
            HostPattern::Any => table.any_host.take(),
        };
        if let Some(set) = removed {
            freed.extend(set.entry_ids());
        }
        table.client_certs.replace(host, &client_certs);
    }
    freed.sort_unstable();
    freed.dedup();
    if freed.iter().any(|&id| id as usize >= table.entries.len()) {
        return Err(GraftError("a replaced rule named an entry the table lacks"));
    }
    free.extend_from_slice(&freed);

    // The partial table's backends as the table's.
    let mut added_backends = 0;
    let backends: Vec<Arc<Backend>> = backends
        .iter()
        .map(|backend| {
            let ids = by_service.entry(backend.service.clone()).or_default();
            if let Some(&id) = ids
                .iter()
                .find(|&&id| table.backends.get(id).is_some_and(|b| same(b, backend)))
            {
                return Arc::clone(&table.backends[id]);
            }
            let id = table.backends.len();
            let moved = Arc::new(Backend {
                id,
                service: backend.service.clone(),
                endpoints: backend.endpoints.clone(),
                not_ready: backend.not_ready,
                protocol: backend.protocol,
                tls: backend.tls.clone(),
            });
            ids.push(id);
            table.backends.push(Arc::clone(&moved));
            added_backends += 1;
            moved
        })
        .collect();
    let backend = |b: &Arc<Backend>| -> Result<Arc<Backend>, GraftError> {
        backends.get(b.id).cloned().ok_or(GraftError(
            "a partial entry named a backend the partial table lacks",
        ))
    };

    // The partial table's entries into free slots, then at the end.
    let mut ids: Vec<u32> = Vec::with_capacity(entries.len());
    let mut appended = table.entries.len();
    for _ in &entries {
        match free.pop() {
            Some(id) => ids.push(id),
            None => {
                ids.push(u32::try_from(appended).map_err(|_| GraftError("too many entries"))?);
                appended += 1;
            }
        }
    }
    let id_of = |id: usize| -> Result<u32, GraftError> {
        ids.get(id).copied().ok_or(GraftError(
            "a partial rule named an entry the partial table lacks",
        ))
    };
    for (at, entry) in entries.into_iter().enumerate() {
        let mut entry = Arc::unwrap_or_clone(entry);
        entry.backend = backend(&entry.backend)?;
        if let Some(fallback) = &mut entry.fallback {
            *fallback = backend(fallback)?;
        }
        if let Some(canary) = &mut entry.canary {
            canary.backend = backend(&canary.backend)?;
        }
        for target in &mut entry.split {
            target.backend = backend(&target.backend)?;
            if let Some(id) = &mut target.entry {
                *id = id_of(*id)? as usize;
            }
        }
        for mirror in &mut entry.mirrors {
            mirror.backend = backend(&mirror.backend)?;
        }
        let id = id_of(at)? as usize;
        let entry = Arc::new(entry);
        match table.entries.get_mut(id) {
            Some(slot) => *slot = entry,
            None => table.entries.push(entry),
        }
    }
    // Freed slots no partial entry took forward nowhere until one does.
    let taken: HashSet<u32> = ids.iter().copied().collect();
    for &id in freed.iter().filter(|id| !taken.contains(id)) {
        if let Some(slot) = table.entries.get_mut(id as usize) {
            *slot = Arc::new(unreachable(slot));
        }
    }

    // The partial table's rules, certificates and passthrough targets.
    let renumbered = |set: Arc<RuleSet>| -> Result<Arc<RuleSet>, GraftError> {
        let mut set =
            Arc::try_unwrap(set).map_err(|_| GraftError("a partial rule set is shared"))?;
        let mut bad = false;
        set.renumber(|id| match ids.get(id as usize) {
            Some(&new) => new,
            None => {
                bad = true;
                id
            }
        });
        if bad {
            return Err(GraftError(
                "a partial rule named an entry the partial table lacks",
            ));
        }
        Ok(Arc::new(set))
    };
    for (host, set) in exact_hosts {
        table.exact_hosts.insert(host, renumbered(set)?);
    }
    for (suffix, set) in wildcard_hosts {
        table.wildcard_hosts.insert(suffix, renumbered(set)?);
    }
    if let Some(set) = any_host {
        table.any_host = Some(renumbered(set)?);
    }
    for (host, cert) in exact_certs {
        let cert = table.add_certificate(cert);
        table.exact_certs.insert(host, cert);
    }
    for (suffix, cert) in wildcard_certs {
        let cert = table.add_certificate(cert);
        table.wildcard_certs.insert(suffix, cert);
    }
    // Certificates no name uses any more leave the table's list, as a full compile's
    // list has only the ones in use.
    unused_certs.retain(|cert| !in_use(table, cert));
    if !unused_certs.is_empty() {
        table
            .certificates
            .retain(|cert| !unused_certs.iter().any(|unused| Arc::ptr_eq(cert, unused)));
    }
    for (host, target) in passthrough {
        let mut split = target.split.clone();
        for part in &mut split {
            part.backend = backend(&part.backend)?;
        }
        let target = StreamTarget {
            split,
            source: target.source.clone(),
            terminate: target.terminate,
        };
        table
            .passthrough
            .insert(Key::new(host.as_str()), Arc::new(target));
    }
    Ok(Grafted { added_backends })
}

/// Whether some name of `table` (or its default) presents `cert`.
fn in_use(table: &RouteTable, cert: &Arc<TlsCertificate>) -> bool {
    let same = |other: &Arc<TlsCertificate>| Arc::ptr_eq(other, cert);
    table.default_certificate.as_ref().is_some_and(same)
        || table
            .exact_certs
            .values()
            .chain(table.wildcard_certs.values())
            .chain(table.gateway_exact_certs.values())
            .chain(table.gateway_wildcard_certs.values())
            .any(same)
}

/// Whether two backends of the same Service port are interchangeable.
fn same(a: &Backend, b: &Backend) -> bool {
    a.service == b.service
        && a.endpoints == b.endpoints
        && a.not_ready == b.not_ready
        && a.protocol == b.protocol
        && match (&a.tls, &b.tls) {
            (None, None) => true,
            (Some(x), Some(y)) => Arc::ptr_eq(x, y) || format!("{x:?}") == format!("{y:?}"),
            _ => false,
        }
}

/// What a slot no rule reaches holds: the entry it had, answering 404 and forwarding
/// nowhere (so that nothing counts its backends as in use).
fn unreachable(entry: &RouteEntry) -> RouteEntry {
    RouteEntry {
        backend: Arc::clone(&entry.backend),
        policy: Policy::shared(Policy::default()),
        source: entry.source.clone(),
        rewrite: None,
        fallback: None,
        canary: None,
        split: Vec::new(),
        fixed_status: Some(404),
        mirrors: Vec::new(),
        rule: None,
    }
}

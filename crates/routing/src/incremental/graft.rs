//! Puts what a partial compile made for some hosts into a copy of the previous table, in
//! place of what that table had for them.
//!
//! The Ingress rules of some hosts; `moved.rs` renumbers what the partial table made, and
//! `gateway_graft.rs` does the same for the Gateway rules of some host names.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use super::moved::move_in;
use crate::backend::Backend;
use crate::host::HostPattern;
use crate::key::Key;
use crate::refs::ServiceRef;
use crate::rules::{RuleSet, StreamTarget};
use crate::table::RouteTable;
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
    let moved = move_in(table, backends, entries, free, freed, by_service)?;
    let backend = |b: &Arc<Backend>| moved.backend(b);
    let renumbered = |set: Arc<RuleSet>| moved.renumbered(set);
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
    Ok(Grafted {
        added_backends: moved.added_backends,
    })
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

//! Moving what a partial compile made into the previous table.
//!
//! A partial table numbers its entries and backends from 0; the previous table's rule
//! sets and the proxy's per-backend state hold the previous numbers. So the partial
//! table's backends become the previous table's backends of the same Service port and
//! content (new ones are added at the end), and its entries move into the slots the
//! replaced rules leave free (or are added at the end). Slots left free hold an entry
//! that forwards nowhere until a later graft reuses them.

use std::collections::HashSet;
use std::sync::Arc;

use super::graft::{BackendsByService, GraftError};
use crate::backend::Backend;
use crate::persistent::ChunkedVec;
use crate::policy::Policy;
use crate::rules::RuleSet;
use crate::table::{RouteEntry, RouteTable};

/// A partial table's backends and entries, in the previous table: how to renumber what
/// refers to them.
pub(crate) struct Moved {
    /// The table's backend for each partial backend id.
    backends: Vec<Arc<Backend>>,
    /// The table's entry id for each partial entry id.
    ids: Vec<u32>,
    /// Backends added to the table.
    pub added_backends: usize,
}

impl Moved {
    /// The table's backend for partial backend `b`.
    pub(crate) fn backend(&self, b: &Arc<Backend>) -> Result<Arc<Backend>, GraftError> {
        self.backends.get(b.id).cloned().ok_or(GraftError(
            "a partial entry named a backend the partial table lacks",
        ))
    }

    /// The table's entry id for partial entry `id`.
    fn id(&self, id: usize) -> Result<u32, GraftError> {
        self.ids.get(id).copied().ok_or(GraftError(
            "a partial rule named an entry the partial table lacks",
        ))
    }

    /// Partial rule set `set` with the table's entry ids.
    pub(crate) fn renumbered(&self, set: Arc<RuleSet>) -> Result<Arc<RuleSet>, GraftError> {
        let mut set =
            Arc::try_unwrap(set).map_err(|_| GraftError("a partial rule set is shared"))?;
        let mut bad = false;
        set.renumber(|id| match self.ids.get(id as usize) {
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
    }
}

/// Moves partial `backends` and `entries` into `table`. `freed`: the entry slots of the
/// rules the graft took out (none reaches them any more), used after `free`'s and, where
/// no entry takes them, left forwarding nowhere and added to `free`.
pub(crate) fn move_in(
    table: &mut RouteTable,
    backends: ChunkedVec<Arc<Backend>>,
    entries: ChunkedVec<Arc<RouteEntry>>,
    free: &mut Vec<u32>,
    mut freed: Vec<u32>,
    by_service: &mut BackendsByService,
) -> Result<Moved, GraftError> {
    if freed.iter().any(|&id| id as usize >= table.entries.len()) {
        return Err(GraftError("a replaced rule named an entry the table lacks"));
    }
    // The entries of a freed entry's weighted targets (a backendRef's own filters) are
    // no rule's either.
    let targets: Vec<u32> = freed
        .iter()
        .flat_map(|&id| table.entries[id as usize].split.iter())
        .filter_map(|t| t.entry.and_then(|e| u32::try_from(e).ok()))
        .collect();
    freed.extend(targets);
    freed.sort_unstable();
    freed.dedup();
    if freed.iter().any(|&id| id as usize >= table.entries.len()) {
        return Err(GraftError(
            "a replaced entry named an entry the table lacks",
        ));
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
                kind: backend.kind,
            });
            ids.push(id);
            table.backends.push(Arc::clone(&moved));
            added_backends += 1;
            moved
        })
        .collect();

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
    let moved = Moved {
        backends,
        ids,
        added_backends,
    };
    for (at, entry) in entries.into_iter().enumerate() {
        let mut entry = Arc::unwrap_or_clone(entry);
        entry.backend = moved.backend(&entry.backend)?;
        if let Some(fallback) = &mut entry.fallback {
            *fallback = moved.backend(fallback)?;
        }
        if let Some(canary) = &mut entry.canary {
            canary.backend = moved.backend(&canary.backend)?;
        }
        for target in &mut entry.split {
            target.backend = moved.backend(&target.backend)?;
            if let Some(id) = &mut target.entry {
                *id = moved.id(*id)? as usize;
            }
        }
        for mirror in &mut entry.mirrors {
            mirror.backend = moved.backend(&mirror.backend)?;
        }
        let id = moved.id(at)? as usize;
        let entry = Arc::new(entry);
        match table.entries.get_mut(id) {
            Some(slot) => *slot = entry,
            None => table.entries.push(entry),
        }
    }
    // Freed slots no partial entry took forward nowhere until one does.
    let taken: HashSet<u32> = moved.ids.iter().copied().collect();
    for &id in freed.iter().filter(|id| !taken.contains(id)) {
        if let Some(slot) = table.entries.get_mut(id as usize) {
            *slot = Arc::new(unreachable(slot));
        }
    }
    Ok(moved)
}

/// Whether two backends of the same Service port are interchangeable.
fn same(a: &Backend, b: &Backend) -> bool {
    a.service == b.service
        && a.endpoints == b.endpoints
        && a.not_ready == b.not_ready
        && a.protocol == b.protocol
        && a.kind == b.kind
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

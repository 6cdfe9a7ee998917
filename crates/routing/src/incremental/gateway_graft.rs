//! Puts the Gateway rules a partial compile made for some host names into the previous
//! table, in place of what that table had for them, on every listener (the shared HTTP
//! and HTTPS ones and each socket of a Gateway's own). What is bound where, certificates
//! and stream routes are the listeners' and stay as they are.

use std::collections::HashSet;
use std::sync::Arc;

use super::graft::{BackendsByService, GraftError, Grafted};
use super::moved::move_in;
use crate::host::HostPattern;
use crate::rules::{GatewayRoutes, HostRules};
use crate::table::RouteTable;

/// Replaces `table`'s Gateway rules of `hosts` with `partial`'s. `free`: entry slots no
/// rule reaches, used first and given back with the slots this graft frees. Every host
/// `partial` has Gateway rules for must be in `hosts`, and every socket of its own it has
/// rules for must be one of `table`'s.
pub(crate) fn graft_gateway(
    table: &mut RouteTable,
    partial: RouteTable,
    hosts: &HashSet<HostPattern>,
    free: &mut Vec<u32>,
    by_service: &mut BackendsByService,
) -> Result<Grafted, GraftError> {
    let RouteTable {
        entries,
        backends,
        gateway: partial_gateway,
        ..
    } = partial;
    let mut partial_gateway = match partial_gateway {
        Some(gateway) => Arc::try_unwrap(gateway)
            .map_err(|_| GraftError("the partial Gateway rules are shared"))?,
        None => GatewayRoutes::default(),
    };
    let mut gateway: GatewayRoutes = table.gateway.as_deref().cloned().unwrap_or_default();
    let covered = |rules: &HostRules| {
        rules
            .exact
            .keys()
            .all(|h| hosts.contains(&HostPattern::Exact(h.as_str().to_owned())))
            && rules
                .wildcard
                .keys()
                .all(|s| hosts.contains(&HostPattern::Wildcard(s.as_str().to_owned())))
            && (rules.any.is_none() || hosts.contains(&HostPattern::Any))
    };
    if !covered(&partial_gateway.http)
        || !covered(&partial_gateway.https)
        || !partial_gateway
            .listeners
            .values()
            .all(|l| covered(&l.rules))
    {
        return Err(GraftError(
            "the partial compile made rules for a host it was not given",
        ));
    }
    if partial_gateway
        .listeners
        .iter()
        .any(|(addr, l)| !l.rules.is_empty() && !gateway.listeners.contains_key(addr))
    {
        return Err(GraftError(
            "the partial compile made rules for a socket the table lacks",
        ));
    }

    // Out with the hosts' previous rules; their entries are no rule's any more.
    let mut freed: Vec<u32> = Vec::new();
    let mut take_out = |rules: &mut HostRules| {
        for host in hosts {
            let removed = match host {
                HostPattern::Exact(name) => rules.exact.remove(name.as_str()),
                HostPattern::Wildcard(suffix) => rules.wildcard.remove(suffix.as_str()),
                HostPattern::Any => rules.any.take(),
            };
            if let Some(set) = removed {
                freed.extend(set.entry_ids());
            }
        }
    };
    take_out(&mut gateway.http);
    take_out(&mut gateway.https);
    for listener in gateway.listeners.values_mut() {
        take_out(&mut listener.rules);
    }
    let moved = move_in(table, backends, entries, free, freed, by_service)?;

    // In with the partial table's.
    let put_in = |into: &mut HostRules, from: HostRules| -> Result<(), GraftError> {
        for (host, set) in from.exact {
            into.exact.insert(host, moved.renumbered(set)?);
        }
        for (suffix, set) in from.wildcard {
            into.wildcard.insert(suffix, moved.renumbered(set)?);
        }
        if let Some(set) = from.any {
            into.any = Some(moved.renumbered(set)?);
        }
        Ok(())
    };
    put_in(&mut gateway.http, std::mem::take(&mut partial_gateway.http))?;
    put_in(
        &mut gateway.https,
        std::mem::take(&mut partial_gateway.https),
    )?;
    for (addr, listener) in partial_gateway.listeners {
        if let Some(into) = gateway.listeners.get_mut(&addr) {
            put_in(&mut into.rules, listener.rules)?;
        }
    }
    // As the full compile leaves it: no Gateway rules at all is none.
    table.gateway =
        (!gateway.http.is_empty() || !gateway.https.is_empty() || !gateway.listeners.is_empty())
            .then(|| Arc::new(gateway));
    Ok(Grafted {
        added_backends: moved.added_backends,
    })
}

//! Every live [`Endpoint`] by address, kept from one routing snapshot to the next.
//!
//! Endpoint state (in-flight counts, down marks, latency) follows the address: two
//! backends naming one address, in one table or in successive ones, share one
//! [`Endpoint`]. A backend new to a table (a route to a Service no route named before)
//! finds its addresses' state here with one look-up each, where a map of every previous
//! endpoint would be made first (50,000 of them: some 20 ms of the control thread).
//!
//! The index holds its endpoints weakly: the snapshots (and requests in flight) own them,
//! and an endpoint no one holds any more is gone from the index at its next prune.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Weak};

use super::balancer::Endpoint;

/// Fewest additions before dead entries are dropped: a small index is not pruned on every
/// change.
const PRUNE_AFTER_AT_LEAST: usize = 1024;

/// The endpoints of the tables built so far, by address (see the module docs).
#[derive(Debug, Default)]
pub(crate) struct EndpointIndex {
    by_addr: HashMap<SocketAddr, Weak<Endpoint>>,
    /// Entries written since the dead ones were last dropped.
    added_since_prune: usize,
}

impl EndpointIndex {
    /// The live endpoint of `addr`, or a new one (no state yet) recorded for the next
    /// backend naming `addr`.
    pub(crate) fn endpoint(&mut self, addr: SocketAddr) -> Arc<Endpoint> {
        if let Some(live) = self.by_addr.get(&addr).and_then(Weak::upgrade) {
            return live;
        }
        let made = Arc::new(Endpoint::new(addr));
        self.by_addr.insert(addr, Arc::downgrade(&made));
        self.added_since_prune += 1;
        // Amortised: a prune walks the index once per half its size of additions, so dead
        // entries stay fewer than the live ones plus the threshold.
        if self.added_since_prune > PRUNE_AFTER_AT_LEAST.max(self.by_addr.len() / 2) {
            self.prune();
        }
        made
    }

    /// Drops the entries of endpoints no one holds any more.
    fn prune(&mut self) {
        self.by_addr
            .retain(|_, endpoint| endpoint.strong_count() > 0);
        self.added_since_prune = 0;
    }

    /// Entries, dead ones not yet pruned included (for tests).
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.by_addr.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(i: u32) -> SocketAddr {
        SocketAddr::from((std::net::Ipv4Addr::from(0x0a00_0000 + i), 8080))
    }

    #[test]
    fn one_address_is_one_endpoint_while_anyone_holds_it() {
        let mut index = EndpointIndex::default();
        let first = index.endpoint(addr(1));
        let again = index.endpoint(addr(1));
        assert!(Arc::ptr_eq(&first, &again), "one endpoint per address");
        assert!(!Arc::ptr_eq(&first, &index.endpoint(addr(2))));
        drop((first, again));
        let fresh = index.endpoint(addr(1));
        assert_eq!(
            Arc::strong_count(&fresh),
            1,
            "a new endpoint once no one held it"
        );
        assert_eq!(fresh.addr, addr(1));
    }

    /// Addresses come and go (pods replaced): with 500 live endpoints the index never
    /// holds more than the threshold of dead ones, and keeps every live one.
    #[test]
    fn dead_entries_are_pruned_and_live_ones_kept() {
        let mut index = EndpointIndex::default();
        let held: Vec<Arc<Endpoint>> = (0..500).map(|i| index.endpoint(addr(i))).collect();
        for i in 500..20_000 {
            drop(index.endpoint(addr(i)));
            assert!(
                index.len() <= 500 + PRUNE_AFTER_AT_LEAST + 1,
                "{} entries after {i} addresses",
                index.len()
            );
        }
        for (i, endpoint) in (0..).zip(&held) {
            assert!(Arc::ptr_eq(endpoint, &index.endpoint(addr(i))), "{i} kept");
        }
    }
}

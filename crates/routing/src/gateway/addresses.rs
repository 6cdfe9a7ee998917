//! Which IP addresses each Gateway is served on: its `spec.addresses`, else one from the
//! address pool (`--gateway-address-pool`), else none of its own (the proxy's shared
//! listeners). Pure: the previous `status.addresses` keep a Gateway on the address it had,
//! so deleting one Gateway never moves another.

use std::collections::BTreeMap;
use std::net::IpAddr;

use crate::cidr::{Cidr, parse_cidr};

use super::types::Gateway;

/// The addresses Gateways without `spec.addresses` are given, one each: CIDRs and single
/// addresses, in the order written.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AddressPool {
    ranges: Vec<Cidr>,
}

impl AddressPool {
    /// Parses a comma-separated list of CIDRs and addresses (`127.1.0.0/24`,
    /// `192.0.2.10,192.0.2.11`).
    pub fn parse(text: &str) -> Result<AddressPool, String> {
        let ranges = text
            .split(',')
            .map(str::trim)
            .filter(|part| !part.is_empty())
            .map(parse_cidr)
            .collect::<Result<Vec<_>, _>>()?;
        if ranges.is_empty() {
            return Err("the address pool is empty".to_owned());
        }
        Ok(AddressPool { ranges })
    }

    /// Whether `ip` is one the pool gives out.
    pub fn contains(&self, ip: IpAddr) -> bool {
        self.ranges
            .iter()
            .any(|range| range.contains(ip) && host_addresses(*range).any(|a| a == ip))
    }

    /// Every address the pool gives out, in order.
    pub fn addresses(&self) -> impl Iterator<Item = IpAddr> + '_ {
        self.ranges.iter().flat_map(|range| host_addresses(*range))
    }
}

impl std::str::FromStr for AddressPool {
    type Err = String;

    fn from_str(text: &str) -> Result<AddressPool, String> {
        AddressPool::parse(text)
    }
}

impl std::fmt::Display for AddressPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (i, range) in self.ranges.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{range}")?;
        }
        Ok(())
    }
}

/// The addresses of `range` a host may hold: an IPv4 network's first (network) and last
/// (broadcast) address are left out where the prefix is 30 or shorter, an IPv6 network's
/// first (subnet-router anycast) where it is 126 or shorter.
fn host_addresses(range: Cidr) -> Box<dyn Iterator<Item = IpAddr>> {
    let (network, prefix) = range.parts();
    match network {
        IpAddr::V4(net) => {
            let bits = 32 - u32::from(prefix);
            let size = 1u64 << bits;
            let base = u64::from(u32::from(net) & u32::MAX.checked_shl(bits).unwrap_or(0));
            let (first, last) = if prefix <= 30 {
                (1, size - 2)
            } else {
                (0, size - 1)
            };
            Box::new(
                (first..=last)
                    .map(move |i| IpAddr::V4(std::net::Ipv4Addr::from((base + i) as u32))),
            )
        }
        IpAddr::V6(net) => {
            let bits = 128 - u32::from(prefix);
            let mask = u128::MAX.checked_shl(bits).unwrap_or(0);
            let base = u128::from(net) & mask;
            let first: u128 = if prefix <= 126 { 1 } else { 0 };
            let last: u128 = u128::MAX.checked_shr(u32::from(prefix)).unwrap_or(0);
            Box::new((first..=last).map(move |i| IpAddr::V6(std::net::Ipv6Addr::from(base | i))))
        }
    }
}

/// Where one Gateway is served.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Assigned {
    /// On the proxy's own HTTP and HTTPS listeners, with the Ingresses (no address of its
    /// own, no pool configured).
    Shared,
    /// On these addresses, each listener on its own port.
    Own(Vec<IpAddr>),
    /// Not served: `Programmed=False` with this reason and message.
    Failed {
        /// A Gateway API reason: `UnsupportedAddress` (`Accepted=False`) or
        /// `AddressNotAssigned` (`Programmed=False`).
        reason: &'static str,
        /// Names the field and the value.
        message: String,
    },
}

/// `spec.addresses[]` as sluice can serve them: IP addresses (`type` `IPAddress`, the
/// default), and how many entries have no value (Gateway API `GatewayAddressEmpty`: the
/// implementation assigns one, here from the pool). A hostname or a named address cannot
/// be bound by a proxy (Gateway API: `UnsupportedAddress`).
fn requested(gateway: &Gateway) -> Result<(Vec<IpAddr>, usize), (&'static str, String)> {
    let mut out = Vec::new();
    let mut empty = 0;
    for (i, address) in gateway.spec.addresses.iter().enumerate() {
        let kind = address
            .get("type")
            .and_then(|t| t.as_str())
            .unwrap_or("IPAddress");
        let value = address.get("value").and_then(|v| v.as_str()).unwrap_or("");
        if kind != "IPAddress" {
            return Err((
                "UnsupportedAddress",
                format!(
                    "spec.addresses[{i}]: type {kind:?} is not supported; sluice binds IP addresses"
                ),
            ));
        }
        if value.is_empty() {
            empty += 1;
            continue;
        }
        match value.parse::<IpAddr>() {
            Ok(ip) => out.push(ip),
            Err(_) => {
                return Err((
                    "UnsupportedAddress",
                    format!("spec.addresses[{i}]: {value:?} is not an IP address"),
                ));
            }
        }
    }
    Ok((out, empty))
}

/// The IP addresses a Gateway's `status.addresses` named when last written.
fn previous(gateway: &Gateway) -> Vec<IpAddr> {
    gateway
        .status
        .as_ref()
        .and_then(|s| s.get("addresses"))
        .and_then(|a| a.as_array())
        .map(|list| {
            list.iter()
                .filter_map(|a| a.get("value")?.as_str()?.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// Assigns addresses to `gateways`, given oldest first (an address two Gateways ask for
/// goes to the older). Requested addresses are taken first; then each Gateway that needs
/// pool addresses (it names none, or has entries without a value) keeps those its status
/// names, if still free; then the rest get the pool's first free addresses in order.
pub(crate) fn assign(gateways: &[&Gateway], pool: Option<&AddressPool>) -> Vec<Assigned> {
    let mut out: Vec<Option<Assigned>> = vec![None; gateways.len()];
    // Per Gateway: the addresses it has so far, and how many more the pool must give.
    let mut have: Vec<Vec<IpAddr>> = vec![Vec::new(); gateways.len()];
    let mut need: Vec<usize> = vec![0; gateways.len()];
    // Address -> the Gateway (index) holding it.
    let mut taken: BTreeMap<IpAddr, usize> = BTreeMap::new();
    for (g, gateway) in gateways.iter().enumerate() {
        if gateway.spec.addresses.is_empty() {
            need[g] = 1;
            continue;
        }
        match requested(gateway) {
            Err((reason, message)) => out[g] = Some(Assigned::Failed { reason, message }),
            Ok((ips, empty)) => match ips.iter().find_map(|ip| taken.get(ip).map(|h| (ip, *h))) {
                Some((ip, holder)) => {
                    out[g] = Some(Assigned::Failed {
                        reason: "AddressNotAssigned",
                        message: format!(
                            "spec.addresses: {ip} is already the address of Gateway {}",
                            name(gateways[holder])
                        ),
                    });
                }
                None => {
                    for ip in &ips {
                        taken.insert(*ip, g);
                    }
                    have[g] = ips;
                    need[g] = empty;
                    if empty > 0 && pool.is_none() {
                        out[g] = Some(Assigned::Failed {
                            reason: "AddressNotAssigned",
                            message: "spec.addresses: an entry without a value asks for an \
                                      address, and no --gateway-address-pool is configured to \
                                      assign one from"
                                .to_owned(),
                        });
                    }
                }
            },
        }
    }
    let Some(pool) = pool else {
        return out
            .into_iter()
            .zip(have)
            .map(|(a, ips)| {
                a.unwrap_or(if ips.is_empty() {
                    Assigned::Shared
                } else {
                    Assigned::Own(ips)
                })
            })
            .collect();
    };
    for (g, gateway) in gateways.iter().enumerate() {
        if out[g].is_some() || need[g] == 0 {
            continue;
        }
        for ip in previous(gateway) {
            if need[g] > 0 && pool.contains(ip) && !taken.contains_key(&ip) {
                taken.insert(ip, g);
                have[g].push(ip);
                need[g] -= 1;
            }
        }
    }
    let mut free = pool.addresses().filter(|ip| !taken.contains_key(ip));
    out.into_iter()
        .zip(have.into_iter().zip(need))
        .map(|(a, (mut ips, need))| {
            if let Some(a) = a {
                return a;
            }
            for _ in 0..need {
                match free.next() {
                    Some(ip) => ips.push(ip),
                    None => {
                        return Assigned::Failed {
                            reason: "AddressNotAssigned",
                            message: format!("every address of the pool {pool} is in use"),
                        };
                    }
                }
            }
            Assigned::Own(ips)
        })
        .collect()
}

fn name(gateway: &Gateway) -> String {
    format!(
        "{}/{}",
        gateway.metadata.namespace.as_deref().unwrap_or(""),
        gateway.metadata.name.as_deref().unwrap_or("")
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn gateway(name: &str, addresses: serde_json::Value, status: Option<&str>) -> Gateway {
        let mut g: Gateway = serde_json::from_value(json!({
            "metadata": {"namespace": "ns", "name": name},
            "spec": {"gatewayClassName": "sluice", "listeners": [], "addresses": addresses},
        }))
        .unwrap();
        g.status = status.map(|ip| json!({"addresses": [{"type": "IPAddress", "value": ip}]}));
        g
    }

    fn ips(list: &[&str]) -> Assigned {
        Assigned::Own(list.iter().map(|s| s.parse().unwrap()).collect())
    }

    #[test]
    fn pools_parse_and_list_host_addresses() {
        let pool = AddressPool::parse("127.1.0.0/30, 10.0.0.9").unwrap();
        let all: Vec<String> = pool.addresses().map(|a| a.to_string()).collect();
        assert_eq!(all, ["127.1.0.1", "127.1.0.2", "10.0.0.9"]);
        assert!(pool.contains("127.1.0.2".parse().unwrap()));
        assert!(!pool.contains("127.1.0.3".parse().unwrap()), "broadcast");
        assert!(!pool.contains("127.1.0.0".parse().unwrap()), "network");
        assert_eq!(pool.to_string(), "127.1.0.0/30,10.0.0.9/32");
        let v6 = AddressPool::parse("fd00::/126").unwrap();
        let all: Vec<String> = v6.addresses().map(|a| a.to_string()).collect();
        assert_eq!(all, ["fd00::1", "fd00::2", "fd00::3"]);
        let slash31 = AddressPool::parse("192.0.2.0/31").unwrap();
        assert_eq!(
            slash31.addresses().count(),
            2,
            "RFC 3021: both addresses of a /31"
        );
        for bad in ["", " , ", "10.0.0.0/33", "host.example"] {
            assert!(AddressPool::parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn without_a_pool_gateways_without_addresses_share_the_proxy_listeners() {
        let a = gateway("a", json!([]), None);
        let b = gateway("b", json!([{"value": "192.0.2.1"}]), None);
        assert_eq!(
            assign(&[&a, &b], None),
            [Assigned::Shared, ips(&["192.0.2.1"])]
        );
    }

    #[test]
    fn pool_addresses_go_in_order_and_stay_with_their_gateway() {
        let pool = AddressPool::parse("127.1.0.0/29").unwrap();
        let a = gateway("a", json!([]), None);
        let b = gateway("b", json!([]), None);
        assert_eq!(
            assign(&[&a, &b], Some(&pool)),
            [ips(&["127.1.0.1"]), ips(&["127.1.0.2"])]
        );
        // a deleted: b keeps the address its status names; a new c takes the first free.
        let b = gateway("b", json!([]), Some("127.1.0.2"));
        let c = gateway("c", json!([]), None);
        assert_eq!(
            assign(&[&b, &c], Some(&pool)),
            [ips(&["127.1.0.2"]), ips(&["127.1.0.1"])]
        );
        // A status address outside the pool is not kept.
        let d = gateway("d", json!([]), Some("10.9.9.9"));
        assert_eq!(assign(&[&d], Some(&pool)), [ips(&["127.1.0.1"])]);
    }

    #[test]
    fn requested_addresses_come_first_and_belong_to_the_older_gateway() {
        let pool = AddressPool::parse("127.1.0.1/32").unwrap();
        // The younger one still names the pool address in its status, but the older
        // requests it: requested wins, and the younger finds the pool exhausted.
        let old = gateway(
            "old",
            json!([{"type": "IPAddress", "value": "127.1.0.1"}]),
            None,
        );
        let young = gateway("young", json!([]), Some("127.1.0.1"));
        let out = assign(&[&old, &young], Some(&pool));
        assert_eq!(out[0], ips(&["127.1.0.1"]));
        assert!(
            matches!(&out[1], Assigned::Failed { reason: "AddressNotAssigned", message } if message.contains("127.1.0.1/32")),
            "{out:?}"
        );
        let twin = gateway("twin", json!([{"value": "127.1.0.1"}]), None);
        let out = assign(&[&old, &twin], None);
        assert!(
            matches!(&out[1], Assigned::Failed { reason: "AddressNotAssigned", message } if message.contains("Gateway ns/old")),
            "{out:?}"
        );
    }

    /// Gateway API `GatewayAddressEmpty`: an `IPAddress` entry without a value asks the
    /// implementation for one (conformance test GatewayOptionalAddressValue).
    #[test]
    fn entries_without_a_value_are_given_pool_addresses() {
        let pool = AddressPool::parse("127.1.0.0/29").unwrap();
        let one = gateway("one", json!([{"type": "IPAddress"}]), None);
        let mixed = gateway(
            "mixed",
            json!([{"value": "192.0.2.9"}, {"type": "IPAddress"}, {"type": "IPAddress", "value": ""}]),
            None,
        );
        assert_eq!(
            assign(&[&one, &mixed], Some(&pool)),
            [
                ips(&["127.1.0.1"]),
                ips(&["192.0.2.9", "127.1.0.2", "127.1.0.3"])
            ]
        );
        // Kept through the status, like a Gateway without addresses.
        let one = gateway("one", json!([{"type": "IPAddress"}]), Some("127.1.0.5"));
        assert_eq!(assign(&[&one], Some(&pool)), [ips(&["127.1.0.5"])]);
        // No pool: nothing to assign from, and the message says what to configure.
        match &assign(&[&one], None)[0] {
            Assigned::Failed { reason, message } => {
                assert_eq!(*reason, "AddressNotAssigned");
                assert!(message.contains("--gateway-address-pool"), "{message}");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn addresses_a_proxy_cannot_bind_are_unsupported_naming_the_field() {
        for (addresses, want) in [
            (
                json!([{"type": "Hostname", "value": "gw.example"}]),
                "spec.addresses[0]: type \"Hostname\"",
            ),
            (
                json!([{"value": "192.0.2.1"}, {"value": "nope"}]),
                "spec.addresses[1]: \"nope\"",
            ),
            (
                json!([{"type": "example.com/pool", "value": "x"}]),
                "spec.addresses[0]: type",
            ),
        ] {
            let g = gateway("g", addresses, None);
            match &assign(&[&g], None)[0] {
                Assigned::Failed { reason, message } => {
                    assert_eq!(*reason, "UnsupportedAddress");
                    assert!(message.starts_with(want), "{message}");
                }
                other => panic!("{other:?}"),
            }
        }
    }

    proptest::proptest! {
        /// Every Gateway gets at most the pool's addresses, no address twice.
        #[test]
        fn no_address_is_given_twice(n in 0usize..12, prev in proptest::collection::vec(0u8..8, 12)) {
            let pool = AddressPool::parse("127.1.0.0/29").unwrap();
            let gws: Vec<Gateway> = (0..n)
                .map(|i| {
                    let ip = format!("127.1.0.{}", prev[i]);
                    gateway(&format!("g{i}"), json!([]), Some(&ip))
                })
                .collect();
            let refs: Vec<&Gateway> = gws.iter().collect();
            let out = assign(&refs, Some(&pool));
            let mut seen = std::collections::BTreeSet::new();
            let mut own = 0;
            for a in &out {
                if let Assigned::Own(list) = a {
                    own += 1;
                    for ip in list {
                        proptest::prop_assert!(pool.contains(*ip));
                        proptest::prop_assert!(seen.insert(*ip));
                    }
                }
            }
            proptest::prop_assert_eq!(own, n.min(6));
        }
    }
}

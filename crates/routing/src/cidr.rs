//! IP networks in CIDR notation: `--trusted-proxies` and the source-range annotations.

use std::net::IpAddr;

/// An IP network in CIDR notation (`10.0.0.0/8`, `2001:db8::/32`; a bare address is a
/// single host).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cidr {
    network: IpAddr,
    prefix: u8,
}

impl Cidr {
    /// The network address as written and the prefix length.
    pub(crate) fn parts(&self) -> (IpAddr, u8) {
        (self.network, self.prefix)
    }

    /// Whether `ip` is inside the network (IPv4-mapped IPv6 addresses count as IPv4).
    pub fn contains(&self, ip: IpAddr) -> bool {
        let ip = match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
            v4 => v4,
        };
        match (self.network, ip) {
            (IpAddr::V4(net), IpAddr::V4(ip)) => {
                let mask = u32::MAX
                    .checked_shl(32 - u32::from(self.prefix))
                    .unwrap_or(0);
                u32::from(net) & mask == u32::from(ip) & mask
            }
            (IpAddr::V6(net), IpAddr::V6(ip)) => {
                let mask = u128::MAX
                    .checked_shl(128 - u32::from(self.prefix))
                    .unwrap_or(0);
                u128::from(net) & mask == u128::from(ip) & mask
            }
            _ => false,
        }
    }
}

impl std::fmt::Display for Cidr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.network, self.prefix)
    }
}

impl std::str::FromStr for Cidr {
    type Err = String;

    fn from_str(text: &str) -> Result<Cidr, String> {
        parse_cidr(text)
    }
}

/// Parses a CIDR (`10.0.0.0/8`) or a bare address (a /32 or /128).
pub fn parse_cidr(text: &str) -> Result<Cidr, String> {
    let text = text.trim();
    let (addr, prefix) = match text.split_once('/') {
        Some((addr, prefix)) => (addr, Some(prefix)),
        None => (text, None),
    };
    let network: IpAddr = addr
        .parse()
        .map_err(|_| format!("{text:?} is not an IP address or CIDR"))?;
    let max = if network.is_ipv4() { 32 } else { 128 };
    let prefix = match prefix {
        None => max,
        Some(p) => p
            .parse::<u8>()
            .ok()
            .filter(|p| *p <= max)
            .ok_or_else(|| format!("{text:?}: prefix length must be 0 to {max}"))?,
    };
    Ok(Cidr { network, prefix })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cidrs() {
        let net = parse_cidr("10.1.0.0/16").unwrap();
        assert!(net.contains("10.1.200.3".parse().unwrap()));
        assert!(!net.contains("10.2.0.1".parse().unwrap()));
        assert!(net.contains("::ffff:10.1.0.9".parse().unwrap()));
        let host = parse_cidr("127.0.0.1").unwrap();
        assert!(host.contains("127.0.0.1".parse().unwrap()));
        assert!(!host.contains("127.0.0.2".parse().unwrap()));
        assert!(
            parse_cidr("0.0.0.0/0")
                .unwrap()
                .contains("8.8.8.8".parse().unwrap())
        );
        let v6 = parse_cidr("2001:db8::/32").unwrap();
        assert!(v6.contains("2001:db8:1::1".parse().unwrap()));
        assert!(!v6.contains("10.0.0.1".parse().unwrap()));
        assert!(parse_cidr("10.0.0.0/33").is_err());
        assert!(parse_cidr("nope").is_err());
        assert_eq!(
            parse_cidr(" 10.0.0.0/8 ").unwrap().to_string(),
            "10.0.0.0/8"
        );
    }
}

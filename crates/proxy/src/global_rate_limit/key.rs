//! What a request is counted under, pure: the `global-rate-limit-key` template expanded for
//! the request (ingress-nginx's `util.generate_var_value`), and the store's key for it.

use std::net::IpAddr;

use sha1::{Digest, Sha1};
use sluice_routing::KeyPart;

/// Bases longer than this are replaced by their SHA-1 (memcached keys are at most 250
/// bytes; the window id and suffix follow the base).
const MAX_BASE: usize = 200;

/// The facts of a request a key may use.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Request<'a, F> {
    /// The client address.
    pub(crate) client: IpAddr,
    /// The Host (or `:authority`) as received.
    pub(crate) host: &'a str,
    /// The normalised path.
    pub(crate) path: &'a str,
    /// A request field's value by lower-case name.
    pub(crate) field: F,
}

/// The key template expanded for `request`: a missing header adds nothing, and a key that
/// expands to nothing counts the client address instead (as ingress-nginx).
pub(crate) fn expand<'a, F>(parts: &[KeyPart], request: &Request<'a, F>) -> Vec<u8>
where
    F: Fn(&[u8]) -> Option<&'a [u8]>,
{
    let mut out = expand_template(parts, request);
    if out.is_empty() {
        out.extend_from_slice(request.client.to_string().as_bytes());
    }
    out
}

/// The key template expanded for `request`, a missing header adding nothing, and nothing
/// in its place when all is empty (`auth-cache-key`: nginx's complex value as is).
pub(crate) fn expand_template<'a, F>(parts: &[KeyPart], request: &Request<'a, F>) -> Vec<u8>
where
    F: Fn(&[u8]) -> Option<&'a [u8]>,
{
    let mut out = Vec::new();
    for part in parts {
        match part {
            KeyPart::Text(text) => out.extend_from_slice(text.as_bytes()),
            KeyPart::ClientAddress => out.extend_from_slice(request.client.to_string().as_bytes()),
            KeyPart::BinaryClientAddress => match request.client {
                IpAddr::V4(v4) => out.extend_from_slice(&v4.octets()),
                IpAddr::V6(v6) => out.extend_from_slice(&v6.octets()),
            },
            KeyPart::Header(name) => {
                if let Some(value) = (request.field)(name.as_str().as_bytes()) {
                    out.extend_from_slice(value);
                }
            }
            KeyPart::Host => {
                let host = host_without_port(request.host);
                out.extend(host.bytes().map(|b| b.to_ascii_lowercase()));
            }
            KeyPart::Path => out.extend_from_slice(request.path.as_bytes()),
        }
    }
    out
}

/// nginx's `$host`: the Host without its port (an IPv6 literal keeps its brackets).
pub(crate) fn host_without_port(host: &str) -> &str {
    if host.starts_with('[') {
        return host.find(']').map_or(host, |end| &host[..=end]);
    }
    host.rsplit_once(':').map_or(host, |(name, _)| name)
}

/// The store key of a sample without its window: `<namespace>.<sample>`, escaped to
/// printable ASCII without spaces (`%XX`, as memcached keys must be), or `sha1:<hex>` of
/// that when it is long.
pub(crate) fn base(namespace: &str, sample: &[u8]) -> String {
    let mut out = String::with_capacity(namespace.len() + sample.len() + 1);
    // The namespace's own dots are escaped: the first `.` ends it, so two Ingresses never
    // share a key.
    escape(namespace.as_bytes(), b'.', &mut out);
    out.push('.');
    escape(sample, b'%', &mut out);
    if out.len() <= MAX_BASE {
        return out;
    }
    let digest = Sha1::digest(out.as_bytes());
    let mut hashed = String::from("sha1:");
    for byte in digest {
        hashed.push_str(&format!("{byte:02x}"));
    }
    hashed
}

/// The counter of `base` in window `id` (lua-resty-global-throttle's
/// `<namespace>.<sample>.<window>.counter`).
pub(crate) fn counter(base: &str, id: u64) -> String {
    format!("{base}.{id}.counter")
}

/// Appends `bytes`, `%XX` for everything but printable ASCII other than `%` and `also`.
fn escape(bytes: &[u8], also: u8, out: &mut String) {
    for &b in bytes {
        if b.is_ascii_graphic() && b != b'%' && b != also {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn request<'a>(
        client: &str,
        host: &'a str,
        fields: &'a [(&'a str, &'a str)],
    ) -> Request<'a, impl Fn(&[u8]) -> Option<&'a [u8]>> {
        Request {
            client: client.parse().unwrap(),
            host,
            path: "/api/v1",
            field: move |name: &[u8]| {
                fields
                    .iter()
                    .find(|(n, _)| n.as_bytes() == name)
                    .map(|(_, v)| v.as_bytes())
            },
        }
    }

    fn header(name: &str) -> KeyPart {
        KeyPart::Header(http::HeaderName::from_bytes(name.as_bytes()).unwrap())
    }

    #[test]
    fn variables_expand_like_nginx() {
        let fields = [("x-api-client", "acme")];
        let r = request("10.0.0.1", "Shop.Example:8080", &fields);
        let key = |parts: &[KeyPart]| String::from_utf8_lossy(&expand(parts, &r)).into_owned();
        assert_eq!(key(&[KeyPart::ClientAddress]), "10.0.0.1");
        assert_eq!(
            expand(&[KeyPart::BinaryClientAddress], &r),
            vec![10, 0, 0, 1]
        );
        assert_eq!(
            key(&[
                KeyPart::ClientAddress,
                KeyPart::Text("-".into()),
                header("x-api-client")
            ]),
            "10.0.0.1-acme"
        );
        assert_eq!(key(&[KeyPart::Host, KeyPart::Path]), "shop.example/api/v1");
        assert_eq!(key(&[KeyPart::Text("all".into())]), "all");
        // A missing header adds nothing; a key of nothing is the client address.
        assert_eq!(key(&[header("x-none"), KeyPart::Text("!".into())]), "!");
        assert_eq!(key(&[header("x-none")]), "10.0.0.1");
        let v6 = request("2001:db8::1", "[::1]:80", &fields);
        assert_eq!(expand(&[KeyPart::BinaryClientAddress], &v6).len(), 16);
        assert_eq!(expand(&[KeyPart::Host], &v6), b"[::1]");
        assert_eq!(
            expand(&[KeyPart::ClientAddress], &v6),
            b"2001:db8::1".to_vec()
        );
    }

    #[test]
    fn store_keys_are_printable_and_short() {
        assert_eq!(base("shop/web", b"10.0.0.1"), "shop/web.10.0.0.1");
        assert_eq!(base("shop/web", b"a b%\n\x01"), "shop/web.a%20b%25%0A%01");
        assert_eq!(counter("shop/web.x", 42), "shop/web.x.42.counter");
        let long = base("shop/web", &[b'x'; 300]);
        assert!(long.starts_with("sha1:") && long.len() == 45, "{long}");
        assert_ne!(long, base("shop/web", &[b'y'; 300]));
        // Distinct samples never share a key: the escape is reversible.
        assert_ne!(base("a", b"%20"), base("a", b" "));
        assert_ne!(base("ns/x", b"y.z"), base("ns/x.y", b"z"));
        assert_eq!(base("ns/x.y", b"z"), "ns/x%2Ey.z");
    }

    proptest! {
        /// Any sample gives a memcached-valid key (printable, no space, at most 250 bytes
        /// with its window), and distinct short samples distinct keys.
        #[test]
        fn any_sample_makes_a_valid_key(
            a in proptest::collection::vec(any::<u8>(), 0..300),
            b in proptest::collection::vec(any::<u8>(), 0..60),
        ) {
            let key = counter(&base("ns/name", &a), u64::MAX);
            prop_assert!(key.len() <= 250, "{}", key.len());
            prop_assert!(key.bytes().all(|c| c.is_ascii_graphic()));
            if a != b && a.len() < 60 {
                prop_assert_ne!(base("ns/name", &a), base("ns/name", &b));
            }
        }
    }
}

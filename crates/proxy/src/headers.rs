//! Header rewriting between client and upstream: hop-by-hop removal (both directions) and
//! the `X-Forwarded-*` / `X-Real-IP` headers that tell the backend who really asked.

use http::header::{
    CONNECTION, COOKIE, HOST, HeaderMap, HeaderName, HeaderValue, TE, TRAILER, TRANSFER_ENCODING,
    UPGRADE,
};

/// `X-Forwarded-For`: the client chain, the client's IP appended.
pub(crate) const X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");
/// `X-Forwarded-Proto`: `http` or `https`, as the client spoke to us.
pub(crate) const X_FORWARDED_PROTO: HeaderName = HeaderName::from_static("x-forwarded-proto");
/// `X-Forwarded-Host`: the Host (or `:authority`) the client asked for.
pub(crate) const X_FORWARDED_HOST: HeaderName = HeaderName::from_static("x-forwarded-host");
/// `X-Forwarded-Port`: the port of our listener the client connected to.
pub(crate) const X_FORWARDED_PORT: HeaderName = HeaderName::from_static("x-forwarded-port");
/// `X-Real-IP`: the client's IP.
pub(crate) const X_REAL_IP: HeaderName = HeaderName::from_static("x-real-ip");

const KEEP_ALIVE: HeaderName = HeaderName::from_static("keep-alive");
const PROXY_CONNECTION: HeaderName = HeaderName::from_static("proxy-connection");

/// What the client connection tells the upstream: computed once per connection.
#[derive(Debug, Clone)]
pub(crate) struct Forwarded {
    /// The client's IP as a header value.
    pub(crate) client_ip: HeaderValue,
    /// `http` or `https`.
    pub(crate) proto: HeaderValue,
    /// Our listener's port.
    pub(crate) port: HeaderValue,
}

impl Forwarded {
    /// Values for a connection from `client` to our listener on `port`.
    pub(crate) fn new(client: std::net::IpAddr, tls: bool, port: u16) -> Forwarded {
        Forwarded {
            client_ip: HeaderValue::try_from(client.to_string()).expect("an IP is a valid value"),
            proto: HeaderValue::from_static(if tls { "https" } else { "http" }),
            port: HeaderValue::from(port),
        }
    }
}

/// Whether the request asks for a protocol upgrade (`Connection: upgrade` + `Upgrade`).
pub(crate) fn wants_upgrade(headers: &HeaderMap) -> bool {
    headers.contains_key(UPGRADE) && connection_has(headers, "upgrade")
}

/// Whether any `Connection` header lists `token`.
fn connection_has(headers: &HeaderMap, token: &str) -> bool {
    headers.get_all(CONNECTION).iter().any(|value| {
        value
            .as_bytes()
            .split(|&b| b == b',')
            .any(|t| t.trim_ascii().eq_ignore_ascii_case(token.as_bytes()))
    })
}

/// Removes hop-by-hop headers: `Connection` and every header it names, `Keep-Alive`,
/// `Proxy-Connection`, `TE` (unless it only says `trailers`), `Trailer`,
/// `Transfer-Encoding`, `Upgrade`. With `upgrading`, `Upgrade` is kept and
/// `Connection: upgrade` is set again, so the upgrade reaches the next hop.
pub(crate) fn remove_hop_by_hop(headers: &mut HeaderMap, upgrading: bool) {
    if headers.contains_key(CONNECTION) {
        // Headers named by Connection (rare beyond close/keep-alive/upgrade).
        let mut named: Vec<HeaderName> = Vec::new();
        for value in headers.get_all(CONNECTION) {
            for token in value.as_bytes().split(|&b| b == b',') {
                let token = token.trim_ascii();
                let skip = token.is_empty()
                    || token.eq_ignore_ascii_case(b"close")
                    || token.eq_ignore_ascii_case(b"keep-alive")
                    || token.eq_ignore_ascii_case(b"upgrade");
                if skip {
                    continue;
                }
                if let Ok(name) = HeaderName::from_bytes(token)
                    && name != HOST
                {
                    named.push(name);
                }
            }
        }
        for name in named {
            headers.remove(name);
        }
        headers.remove(CONNECTION);
    }
    headers.remove(KEEP_ALIVE);
    headers.remove(PROXY_CONNECTION);
    headers.remove(TRAILER);
    headers.remove(TRANSFER_ENCODING);
    if let Some(te) = headers.get(TE)
        && !te
            .as_bytes()
            .split(|&b| b == b',')
            .all(|t| t.trim_ascii().eq_ignore_ascii_case(b"trailers"))
    {
        headers.remove(TE);
    }
    if upgrading {
        headers.insert(CONNECTION, HeaderValue::from_static("upgrade"));
    } else {
        headers.remove(UPGRADE);
    }
}

/// Sets `X-Forwarded-For` (appended), `X-Real-IP`, `X-Forwarded-Proto`, `X-Forwarded-Host`
/// and `X-Forwarded-Port` for the upstream request.
pub(crate) fn set_forwarded(headers: &mut HeaderMap, forwarded: &Forwarded, host: &HeaderValue) {
    let client_ip = &forwarded.client_ip;
    match headers.entry(X_FORWARDED_FOR) {
        http::header::Entry::Vacant(entry) => {
            entry.insert(client_ip.clone());
        }
        http::header::Entry::Occupied(mut entry) => {
            // Keep the chain the client sent (all values), then add who we saw.
            let mut chain = Vec::with_capacity(64);
            for value in entry.iter() {
                chain.extend_from_slice(value.as_bytes());
                chain.extend_from_slice(b", ");
            }
            chain.extend_from_slice(client_ip.as_bytes());
            match HeaderValue::from_bytes(&chain) {
                Ok(value) => {
                    entry.insert(value);
                }
                Err(_) => {
                    entry.insert(client_ip.clone());
                }
            }
        }
    }
    headers.insert(X_REAL_IP, client_ip.clone());
    headers.insert(X_FORWARDED_PROTO, forwarded.proto.clone());
    headers.insert(X_FORWARDED_HOST, host.clone());
    headers.insert(X_FORWARDED_PORT, forwarded.port.clone());
}

/// HTTP/2 lets a client split `Cookie` into several fields; an HTTP/1.1 upstream expects one
/// (RFC 9113 §8.2.3), so they are joined with `"; "`.
pub(crate) fn join_cookies(headers: &mut HeaderMap) {
    let mut values = headers.get_all(COOKIE).iter();
    let (Some(_), Some(_)) = (values.next(), values.next()) else {
        return;
    };
    let mut joined = Vec::with_capacity(256);
    for (i, value) in headers.get_all(COOKIE).iter().enumerate() {
        if i > 0 {
            joined.extend_from_slice(b"; ");
        }
        joined.extend_from_slice(value.as_bytes());
    }
    if let Ok(value) = HeaderValue::from_bytes(&joined) {
        headers.insert(COOKIE, value);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(
                HeaderName::from_bytes(k.as_bytes()).unwrap(),
                HeaderValue::from_str(v).unwrap(),
            );
        }
        h
    }

    #[test]
    fn hop_by_hop_removed() {
        let mut h = map(&[
            ("connection", "close, X-Custom"),
            ("x-custom", "1"),
            ("keep-alive", "timeout=5"),
            ("proxy-connection", "keep-alive"),
            ("te", "gzip"),
            ("trailer", "x"),
            ("transfer-encoding", "chunked"),
            ("upgrade", "websocket"),
            ("host", "example.com"),
            ("x-kept", "yes"),
        ]);
        remove_hop_by_hop(&mut h, false);
        let names: Vec<&str> = h.keys().map(|k| k.as_str()).collect();
        assert_eq!(names, vec!["host", "x-kept"]);
    }

    #[test]
    fn te_trailers_kept_and_upgrade_preserved() {
        let mut h = map(&[
            ("connection", "Upgrade"),
            ("upgrade", "websocket"),
            ("te", "trailers"),
        ]);
        assert!(wants_upgrade(&h));
        remove_hop_by_hop(&mut h, true);
        assert_eq!(h["upgrade"], "websocket");
        assert_eq!(h["connection"], "upgrade");
        assert_eq!(h["te"], "trailers");
        assert!(!wants_upgrade(&map(&[("upgrade", "websocket")])));
    }

    #[test]
    fn forwarded_headers() {
        let fwd = Forwarded::new("10.1.2.3".parse().unwrap(), true, 8443);
        let host = HeaderValue::from_static("example.com");
        let mut h = map(&[
            ("x-forwarded-for", "1.1.1.1"),
            ("x-forwarded-for", "2.2.2.2"),
        ]);
        h.insert(X_FORWARDED_PROTO, HeaderValue::from_static("gopher"));
        set_forwarded(&mut h, &fwd, &host);
        assert_eq!(h["x-forwarded-for"], "1.1.1.1, 2.2.2.2, 10.1.2.3");
        assert_eq!(h.get_all("x-forwarded-for").iter().count(), 1);
        assert_eq!(h["x-real-ip"], "10.1.2.3");
        assert_eq!(h["x-forwarded-proto"], "https");
        assert_eq!(h["x-forwarded-host"], "example.com");
        assert_eq!(h["x-forwarded-port"], "8443");
        let mut fresh = HeaderMap::new();
        set_forwarded(&mut fresh, &fwd, &host);
        assert_eq!(fresh["x-forwarded-for"], "10.1.2.3");
    }

    #[test]
    fn cookies_joined() {
        let mut h = map(&[("cookie", "a=1"), ("cookie", "b=2")]);
        join_cookies(&mut h);
        assert_eq!(h.get_all("cookie").iter().count(), 1);
        assert_eq!(h["cookie"], "a=1; b=2");
        let mut single = map(&[("cookie", "a=1")]);
        join_cookies(&mut single);
        assert_eq!(single["cookie"], "a=1");
    }
}

//! Header rewriting between client and upstream: hop-by-hop removal (both directions) and
//! the `X-Forwarded-*` / `X-Real-IP` headers that tell the backend who really asked.
//!
//! Towards the upstream the rewrite and the HTTP/1.1 serialisation are one pass
//! ([`encode_request_head`]): headers are filtered while they are written, so the client's
//! header map is never edited.

use http::header::{
    CONNECTION, CONTENT_LENGTH, COOKIE, EXPECT, HOST, HeaderMap, HeaderName, HeaderValue, TE,
    TRAILER, TRANSFER_ENCODING, UPGRADE,
};
use http::{Method, uri::PathAndQuery};

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

/// How the upstream request's body is framed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Framing {
    /// No body and no length header.
    None,
    /// `Content-Length: n` (also `0` when the client sent an explicit empty body).
    Length(u64),
    /// `Transfer-Encoding: chunked` (length unknown in advance).
    Chunked,
}

/// The request, as the upstream should see it.
#[derive(Debug)]
pub(crate) struct RequestHead<'a> {
    /// Method (sent as is).
    pub(crate) method: &'a Method,
    /// Origin-form target.
    pub(crate) path: &'a PathAndQuery,
    /// The client's headers, unedited.
    pub(crate) headers: &'a HeaderMap,
    /// The host the client asked for (Host, or `:authority`); sent as Host.
    pub(crate) host: &'a HeaderValue,
    /// This connection's forwarding values.
    pub(crate) forwarded: &'a Forwarded,
    /// A protocol upgrade is being relayed: keep `Upgrade`, send `Connection: upgrade`.
    pub(crate) upgrading: bool,
    /// The client spoke HTTP/2: split `Cookie` fields are joined into one.
    pub(crate) http2: bool,
    /// Body framing chosen by the caller.
    pub(crate) framing: Framing,
}

/// Whether `name` is never forwarded as it came: hop-by-hop, framing (re-decided by us), or
/// one of the forwarding headers we set ourselves.
fn replaced_or_hop_by_hop(name: &HeaderName) -> bool {
    *name == HOST
        || *name == CONNECTION
        || *name == KEEP_ALIVE
        || *name == PROXY_CONNECTION
        || *name == TRAILER
        || *name == TRANSFER_ENCODING
        || *name == CONTENT_LENGTH
        || *name == EXPECT
        || *name == X_FORWARDED_FOR
        || *name == X_REAL_IP
        || *name == X_FORWARDED_PROTO
        || *name == X_FORWARDED_HOST
        || *name == X_FORWARDED_PORT
}

/// Header names listed in `Connection` (beyond close/keep-alive/upgrade): hop-by-hop too.
fn connection_named(headers: &HeaderMap) -> Vec<HeaderName> {
    let mut named = Vec::new();
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
    named
}

/// Whether a `TE` value only says `trailers` (the one value a proxy may forward).
fn te_trailers_only(value: &HeaderValue) -> bool {
    value
        .as_bytes()
        .split(|&b| b == b',')
        .all(|t| t.trim_ascii().eq_ignore_ascii_case(b"trailers"))
}

/// Appends one `name: value` field line.
pub(crate) fn put_header(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    out.extend_from_slice(name);
    out.extend_from_slice(b": ");
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
}

/// Writes the HTTP/1.1 request head for the upstream into `out`: request line, Host passed
/// through (the endpoint's address when the client sent none), the client's end-to-end headers, `X-Forwarded-For` (the client's chain with the
/// client's IP appended), `X-Real-IP`, `X-Forwarded-Proto/-Host/-Port`, and the framing
/// header. Hop-by-hop headers (those of RFC 9110 §7.6.1 and any named by `Connection`) are
/// left out; `Upgrade` only passes when `upgrading`.
pub(crate) fn encode_request_head(
    head: &RequestHead<'_>,
    endpoint: std::net::SocketAddr,
    out: &mut Vec<u8>,
) {
    let headers = head.headers;
    out.extend_from_slice(head.method.as_str().as_bytes());
    out.push(b' ');
    out.extend_from_slice(head.path.as_str().as_bytes());
    out.extend_from_slice(b" HTTP/1.1\r\n");
    if head.host.is_empty() {
        // HTTP/1.1 requires Host (RFC 9112 §3.2); an HTTP/1.0 client may have sent none.
        use std::io::Write as _;
        let _ = write!(out, "host: {endpoint}\r\n");
    } else {
        put_header(out, b"host", head.host.as_bytes());
    }
    let named = if headers.contains_key(CONNECTION) {
        connection_named(headers)
    } else {
        Vec::new()
    };
    let mut cookies = 0;
    for (name, value) in headers {
        if replaced_or_hop_by_hop(name) || named.contains(name) {
            continue;
        }
        if *name == TE && !te_trailers_only(value) {
            continue;
        }
        if *name == UPGRADE && !head.upgrading {
            continue;
        }
        if *name == COOKIE && head.http2 {
            // Joined below: an HTTP/1.1 upstream expects one Cookie field (RFC 9113 §8.2.3).
            cookies += 1;
            continue;
        }
        put_header(out, name.as_str().as_bytes(), value.as_bytes());
    }
    if cookies > 0 {
        out.extend_from_slice(b"cookie: ");
        for (i, value) in headers.get_all(COOKIE).iter().enumerate() {
            if i > 0 {
                out.extend_from_slice(b"; ");
            }
            out.extend_from_slice(value.as_bytes());
        }
        out.extend_from_slice(b"\r\n");
    }
    // Keep the chain the client sent (all values), then add who we saw.
    let client_ip = head.forwarded.client_ip.as_bytes();
    out.extend_from_slice(b"x-forwarded-for: ");
    for value in headers.get_all(X_FORWARDED_FOR) {
        out.extend_from_slice(value.as_bytes());
        out.extend_from_slice(b", ");
    }
    out.extend_from_slice(client_ip);
    out.extend_from_slice(b"\r\n");
    put_header(out, b"x-real-ip", client_ip);
    put_header(out, b"x-forwarded-proto", head.forwarded.proto.as_bytes());
    put_header(out, b"x-forwarded-host", head.host.as_bytes());
    put_header(out, b"x-forwarded-port", head.forwarded.port.as_bytes());
    if head.upgrading {
        put_header(out, b"connection", b"upgrade");
    }
    match head.framing {
        Framing::None => {}
        Framing::Length(n) => {
            out.extend_from_slice(b"content-length: ");
            out.extend_from_slice(itoa_u64(n, &mut [0; 20]));
            out.extend_from_slice(b"\r\n");
        }
        Framing::Chunked => put_header(out, b"transfer-encoding", b"chunked"),
    }
    out.extend_from_slice(b"\r\n");
}

/// `n` in decimal, written into `buf`.
fn itoa_u64(mut n: u64, buf: &mut [u8; 20]) -> &[u8] {
    let mut at = buf.len();
    loop {
        at -= 1;
        buf[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    &buf[at..]
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

    struct Case {
        method: Method,
        path: &'static str,
        headers: HeaderMap,
        host: &'static str,
        upgrading: bool,
        http2: bool,
        framing: Framing,
    }

    impl Case {
        fn new(headers: &[(&str, &str)]) -> Case {
            Case {
                method: Method::GET,
                path: "/a?b=1",
                headers: map(headers),
                host: "example.com",
                upgrading: false,
                http2: false,
                framing: Framing::None,
            }
        }

        /// The encoded head as (request line, header lines in order).
        fn encode(&self) -> (String, Vec<String>) {
            let forwarded = Forwarded::new("10.1.2.3".parse().unwrap(), true, 8443);
            let host = HeaderValue::from_static(self.host);
            let path = PathAndQuery::from_static(self.path);
            let mut out = Vec::new();
            encode_request_head(
                &RequestHead {
                    method: &self.method,
                    path: &path,
                    headers: &self.headers,
                    host: &host,
                    forwarded: &forwarded,
                    upgrading: self.upgrading,
                    http2: self.http2,
                    framing: self.framing,
                },
                "10.0.0.1:8080".parse().unwrap(),
                &mut out,
            );
            let text = String::from_utf8(out).unwrap();
            assert!(text.ends_with("\r\n\r\n"), "{text:?}");
            // The head must be one a real parser accepts.
            let mut slots = [httparse::EMPTY_HEADER; 64];
            let mut parsed = httparse::Request::new(&mut slots);
            assert!(parsed.parse(text.as_bytes()).unwrap().is_complete());
            let mut lines = text.trim_end().split("\r\n").map(str::to_owned);
            let first = lines.next().unwrap();
            (first, lines.collect())
        }
    }

    fn names(lines: &[String]) -> Vec<&str> {
        lines.iter().map(|l| l.split(':').next().unwrap()).collect()
    }

    #[test]
    fn hop_by_hop_removed() {
        let (line, lines) = Case::new(&[
            ("connection", "close, X-Custom"),
            ("x-custom", "1"),
            ("keep-alive", "timeout=5"),
            ("proxy-connection", "keep-alive"),
            ("te", "gzip"),
            ("trailer", "x"),
            ("transfer-encoding", "chunked"),
            ("content-length", "5"),
            ("expect", "100-continue"),
            ("upgrade", "websocket"),
            ("host", "example.com"),
            ("x-kept", "yes"),
        ])
        .encode();
        assert_eq!(line, "GET /a?b=1 HTTP/1.1");
        assert_eq!(
            names(&lines),
            vec![
                "host",
                "x-kept",
                "x-forwarded-for",
                "x-real-ip",
                "x-forwarded-proto",
                "x-forwarded-host",
                "x-forwarded-port"
            ]
        );
    }

    #[test]
    fn te_trailers_kept_and_upgrade_preserved() {
        let mut case = Case::new(&[
            ("connection", "Upgrade"),
            ("upgrade", "websocket"),
            ("te", "trailers"),
        ]);
        assert!(wants_upgrade(&case.headers));
        case.upgrading = true;
        let (_, lines) = case.encode();
        assert!(lines.contains(&"upgrade: websocket".to_owned()));
        assert!(lines.contains(&"connection: upgrade".to_owned()));
        assert!(lines.contains(&"te: trailers".to_owned()));
        assert!(!wants_upgrade(&map(&[("upgrade", "websocket")])));
    }

    #[test]
    fn forwarded_headers() {
        let (_, lines) = Case::new(&[
            ("x-forwarded-for", "1.1.1.1"),
            ("x-forwarded-for", "2.2.2.2"),
            ("x-forwarded-proto", "gopher"),
            ("x-real-ip", "6.6.6.6"),
            ("x-forwarded-host", "evil"),
            ("x-forwarded-port", "1"),
        ])
        .encode();
        assert_eq!(
            lines,
            vec![
                "host: example.com",
                "x-forwarded-for: 1.1.1.1, 2.2.2.2, 10.1.2.3",
                "x-real-ip: 10.1.2.3",
                "x-forwarded-proto: https",
                "x-forwarded-host: example.com",
                "x-forwarded-port: 8443",
            ]
        );
        let (_, fresh) = Case::new(&[]).encode();
        assert!(fresh.contains(&"x-forwarded-for: 10.1.2.3".to_owned()));
    }

    #[test]
    fn cookies_joined_for_http2_only() {
        let mut case = Case::new(&[("cookie", "a=1"), ("cookie", "b=2")]);
        let (_, h1) = case.encode();
        assert!(h1.contains(&"cookie: a=1".to_owned()) && h1.contains(&"cookie: b=2".to_owned()));
        case.http2 = true;
        let (_, h2) = case.encode();
        assert_eq!(h2.iter().filter(|l| l.starts_with("cookie")).count(), 1);
        assert!(h2.contains(&"cookie: a=1; b=2".to_owned()));
    }

    #[test]
    fn framing_and_host() {
        let mut case = Case::new(&[("content-length", "12")]);
        case.method = Method::POST;
        case.framing = Framing::Length(12);
        let (line, lines) = case.encode();
        assert_eq!(line, "POST /a?b=1 HTTP/1.1");
        assert_eq!(
            lines
                .iter()
                .filter(|l| l.starts_with("content-length"))
                .count(),
            1
        );
        assert!(lines.contains(&"content-length: 12".to_owned()));
        case.framing = Framing::Chunked;
        let (_, lines) = case.encode();
        assert!(lines.contains(&"transfer-encoding: chunked".to_owned()));
        assert!(!lines.iter().any(|l| l.starts_with("content-length")));
        case.framing = Framing::Length(0);
        assert!(case.encode().1.contains(&"content-length: 0".to_owned()));

        // Without a host (HTTP/1.0), the endpoint's address: HTTP/1.1 requires a Host.
        let mut bare = Case::new(&[]);
        bare.host = "";
        let lines = bare.encode().1;
        assert_eq!(lines.iter().filter(|l| l.starts_with("host")).count(), 1);
        assert!(lines.contains(&"host: 10.0.0.1:8080".to_owned()));
    }

    #[test]
    fn itoa_matches_display() {
        for n in [0, 1, 9, 10, 99, 100, 12345, u64::MAX] {
            assert_eq!(itoa_u64(n, &mut [0; 20]), n.to_string().as_bytes());
        }
    }
}

//! Reading a client's HTTP/1.x request head in place, for the proxy's own HTTP/1.1 loop
//! ([`crate::http1`]).
//!
//! Pure: bytes in, a verdict out. [`parse`] tells whether the head at the front of a buffer
//! is complete and whether it is a *plain* request, the kind the own loop serves: no body
//! (no length or `Content-Length: 0`), no `Transfer-Encoding`, no upgrade, no `Expect`, an
//! origin-form target of ordinary characters, exactly one visible-ASCII Host. Anything else
//! (including every malformed head) is [`Parsed::Other`]: the connection goes to hyper with
//! the bytes unread, so rare and hostile input keeps hyper's well-tested handling.
//!
//! [`encode_upstream_head`] writes the upstream request from the same bytes with the rules
//! of [`crate::headers::encode_request_head`] (a property test holds the two together).

use std::mem::MaybeUninit;

use crate::headers::{Forwarded, put_header};

/// Most header fields in a request head (hyper's default; more go to hyper, which answers
/// 431).
pub(crate) const MAX_HEADERS: usize = 100;

/// Header spans kept on the stack (more spill to the heap).
const INLINE_HEADERS: usize = 32;

/// A byte range of the head: offset and length.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Span {
    at: u32,
    len: u32,
}

impl Span {
    fn of(base: &[u8], part: &[u8]) -> Span {
        Span {
            at: (part.as_ptr() as usize - base.as_ptr() as usize) as u32,
            len: part.len() as u32,
        }
    }

    fn get(self, buf: &[u8]) -> &[u8] {
        &buf[self.at as usize..(self.at + self.len) as usize]
    }
}

/// What becomes of a client header towards the upstream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fate {
    /// Sent as it came.
    Forward,
    /// Part of the client's `X-Forwarded-For` chain (we append the client's IP).
    ForwardedFor,
}

/// One header kept for the upstream.
#[derive(Debug, Clone, Copy)]
struct Kept {
    name: Span,
    value: Span,
    fate: Fate,
}

/// A complete plain request head; its spans point into the buffer it was parsed from.
#[derive(Debug)]
pub(crate) struct PlainHead {
    /// Length of the head in bytes (the next request starts after it).
    pub(crate) len: usize,
    method: Span,
    target: Span,
    host: Span,
    /// The client spoke HTTP/1.0.
    pub(crate) http10: bool,
    /// The client allows another request on the connection after this one.
    pub(crate) keep_alive: bool,
    /// The client sent `Content-Length: 0` (kept: a bodiless POST needs it).
    explicit_empty: bool,
    inline: [Kept; INLINE_HEADERS],
    inline_len: usize,
    spilled: Vec<Kept>,
    /// Any `X-Forwarded-For` among the kept headers.
    forwarded_for: bool,
}

/// The verdict on the bytes at the front of a buffer.
#[derive(Debug)]
pub(crate) enum Parsed {
    /// Not a complete head yet.
    Partial,
    /// A complete plain request head.
    Plain(Box<PlainHead>),
    /// Anything else: let hyper read it.
    Other,
}

impl PlainHead {
    /// The method, e.g. `GET`.
    pub(crate) fn method<'b>(&self, buf: &'b [u8]) -> &'b str {
        // httparse only accepts token characters in a method: ASCII.
        std::str::from_utf8(self.method.get(buf)).unwrap_or("")
    }

    /// The request target (path and query).
    pub(crate) fn target<'b>(&self, buf: &'b [u8]) -> &'b str {
        // Checked by `plain_target`: ASCII only.
        std::str::from_utf8(self.target.get(buf)).unwrap_or("/")
    }

    /// The path part of the target.
    pub(crate) fn path<'b>(&self, buf: &'b [u8]) -> &'b str {
        let target = self.target(buf);
        target.split_once('?').map_or(target, |(path, _)| path)
    }

    /// The Host header's value.
    pub(crate) fn host<'b>(&self, buf: &'b [u8]) -> &'b str {
        // Checked to be visible ASCII while parsing.
        std::str::from_utf8(self.host.get(buf)).unwrap_or("")
    }

    /// Whether the client sent `Content-Length: 0` (the upstream gets it too).
    pub(crate) fn explicit_empty(&self) -> bool {
        self.explicit_empty
    }

    /// Whether the method is safe to send again after a failure (GET, HEAD, OPTIONS,
    /// TRACE).
    pub(crate) fn idempotent(&self, buf: &[u8]) -> bool {
        matches!(self.method(buf), "GET" | "HEAD" | "OPTIONS" | "TRACE")
    }

    fn kept(&self) -> impl Iterator<Item = &Kept> {
        self.inline[..self.inline_len].iter().chain(&self.spilled)
    }

    fn keep(&mut self, kept: Kept) {
        if self.inline_len < INLINE_HEADERS {
            self.inline[self.inline_len] = kept;
            self.inline_len += 1;
        } else {
            self.spilled.push(kept);
        }
    }

    /// Drops the kept headers (not `X-Forwarded-For`) named `name`.
    fn drop_named(&mut self, buf: &[u8], name: &[u8]) {
        let matches =
            |k: &Kept| k.fate == Fate::Forward && k.name.get(buf).eq_ignore_ascii_case(name);
        let mut write = 0;
        for read in 0..self.inline_len {
            if !matches(&self.inline[read]) {
                self.inline[write] = self.inline[read];
                write += 1;
            }
        }
        self.inline_len = write;
        self.spilled.retain(|k| !matches(k));
    }
}

impl Default for Kept {
    fn default() -> Self {
        Kept {
            name: Span::default(),
            value: Span::default(),
            fate: Fate::Forward,
        }
    }
}

/// Header names with a meaning for the proxy (compared case-insensitively).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Name {
    Host,
    ContentLength,
    Connection,
    Te,
    ForwardedFor,
    /// Sent elsewhere or never forwarded: keep-alive, proxy-connection, trailer,
    /// x-real-ip, x-forwarded-proto/-host/-port.
    Replaced,
    /// Transfer-Encoding, Expect, Upgrade: hyper's business.
    Special,
    /// Any other header: end-to-end.
    Other,
}

fn name_of(name: &[u8]) -> Name {
    let is = |known: &str| name.eq_ignore_ascii_case(known.as_bytes());
    match name.len() {
        2 if is("te") => Name::Te,
        4 if is("host") => Name::Host,
        6 if is("expect") => Name::Special,
        7 if is("upgrade") => Name::Special,
        7 if is("trailer") => Name::Replaced,
        9 if is("x-real-ip") => Name::Replaced,
        10 if is("connection") => Name::Connection,
        10 if is("keep-alive") => Name::Replaced,
        14 if is("content-length") => Name::ContentLength,
        15 if is("x-forwarded-for") => Name::ForwardedFor,
        16 if is("x-forwarded-host") || is("x-forwarded-port") || is("proxy-connection") => {
            Name::Replaced
        }
        17 if is("transfer-encoding") => Name::Special,
        17 if is("x-forwarded-proto") => Name::Replaced,
        _ => Name::Other,
    }
}

/// Whether `target` is an origin-form target made only of characters every URI parser
/// agrees on (no fragment, no quotes, no braces): the rest goes through hyper's checks.
fn plain_target(target: &[u8]) -> bool {
    target.first() == Some(&b'/')
        && target.iter().all(|&b| {
            matches!(b,
                b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9'
                | b'-' | b'.' | b'_' | b'~' | b'!' | b'$' | b'&' | b'\'' | b'(' | b')'
                | b'*' | b'+' | b',' | b';' | b'=' | b':' | b'@' | b'/' | b'?' | b'%')
        })
}

/// Parses the head at the front of `buf` (see the module docs).
pub(crate) fn parse(buf: &[u8]) -> Parsed {
    // Uninitialised slots: zeroing 100 of them would cost more than parsing a small head.
    let mut slots = [const { MaybeUninit::<httparse::Header<'_>>::uninit() }; MAX_HEADERS];
    let mut request = httparse::Request::new(&mut []);
    let len = match httparse::ParserConfig::default().parse_request_with_uninit_headers(
        &mut request,
        buf,
        &mut slots,
    ) {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) => return Parsed::Partial,
        Err(_) => return Parsed::Other,
    };
    let (Some(method), Some(target), Some(version)) =
        (request.method, request.path, request.version)
    else {
        return Parsed::Other;
    };
    if !plain_target(target.as_bytes()) {
        return Parsed::Other;
    }
    let http10 = version == 0;
    let mut head = Box::new(PlainHead {
        len,
        method: Span::of(buf, method.as_bytes()),
        target: Span::of(buf, target.as_bytes()),
        host: Span::default(),
        http10,
        keep_alive: true,
        explicit_empty: false,
        inline: [Kept::default(); INLINE_HEADERS],
        inline_len: 0,
        spilled: Vec::new(),
        forwarded_for: false,
    });
    let mut host = false;
    let (mut close, mut keep_alive, mut named) = (false, false, false);
    for header in request.headers.iter() {
        let value = header.value;
        let fate = match name_of(header.name.as_bytes()) {
            Name::Host => {
                if host || value.is_empty() || !value.iter().all(|b| b.is_ascii_graphic()) {
                    return Parsed::Other;
                }
                host = true;
                head.host = Span::of(buf, value);
                continue;
            }
            Name::ContentLength => {
                if head.explicit_empty || value.trim_ascii() != b"0" {
                    return Parsed::Other;
                }
                head.explicit_empty = true;
                continue;
            }
            Name::Connection => {
                for token in value.split(|&b| b == b',') {
                    let token = token.trim_ascii();
                    if token.eq_ignore_ascii_case(b"close") {
                        close = true;
                    } else if token.eq_ignore_ascii_case(b"keep-alive") {
                        keep_alive = true;
                    } else if token.eq_ignore_ascii_case(b"upgrade") {
                        return Parsed::Other;
                    } else if !token.is_empty() {
                        named = true;
                    }
                }
                continue;
            }
            Name::Te => {
                let trailers_only = value
                    .split(|&b| b == b',')
                    .all(|t| t.trim_ascii().eq_ignore_ascii_case(b"trailers"));
                if !trailers_only {
                    continue;
                }
                Fate::Forward
            }
            Name::ForwardedFor => {
                head.forwarded_for = true;
                Fate::ForwardedFor
            }
            Name::Replaced => continue,
            Name::Special => return Parsed::Other,
            Name::Other => Fate::Forward,
        };
        head.keep(Kept {
            name: Span::of(buf, header.name.as_bytes()),
            value: Span::of(buf, value),
            fate,
        });
    }
    if !host {
        return Parsed::Other;
    }
    head.keep_alive = !close && (!http10 || keep_alive);
    if named {
        // Headers listed in Connection are hop-by-hop too (RFC 9110 §7.6.1).
        for header in request.headers.iter() {
            if name_of(header.name.as_bytes()) != Name::Connection {
                continue;
            }
            for token in header.value.split(|&b| b == b',') {
                let token = token.trim_ascii();
                if !token.is_empty() {
                    head.drop_named(buf, token);
                }
            }
        }
    }
    Parsed::Plain(head)
}

/// Writes the upstream's HTTP/1.1 request head for `head` (parsed from `buf`) into `out`:
/// request line, Host, the end-to-end headers in their order, `X-Forwarded-For` (the
/// client's chain with the client's IP appended), `X-Real-IP`,
/// `X-Forwarded-Proto/-Host/-Port`, and `Content-Length: 0` if the client sent it.
pub(crate) fn encode_upstream_head(
    buf: &[u8],
    head: &PlainHead,
    forwarded: &Forwarded,
    out: &mut Vec<u8>,
) {
    out.extend_from_slice(head.method.get(buf));
    out.push(b' ');
    out.extend_from_slice(head.target.get(buf));
    out.extend_from_slice(b" HTTP/1.1\r\n");
    let host = head.host.get(buf);
    put_header(out, b"host", host);
    for kept in head.kept().filter(|k| k.fate == Fate::Forward) {
        put_header(out, kept.name.get(buf), kept.value.get(buf));
    }
    let client_ip = forwarded.client_ip.as_bytes();
    out.extend_from_slice(b"x-forwarded-for: ");
    if head.forwarded_for {
        for kept in head.kept().filter(|k| k.fate == Fate::ForwardedFor) {
            out.extend_from_slice(kept.value.get(buf));
            out.extend_from_slice(b", ");
        }
    }
    out.extend_from_slice(client_ip);
    out.extend_from_slice(b"\r\n");
    put_header(out, b"x-real-ip", client_ip);
    put_header(out, b"x-forwarded-proto", forwarded.proto.as_bytes());
    put_header(out, b"x-forwarded-host", host);
    put_header(out, b"x-forwarded-port", forwarded.port.as_bytes());
    if head.explicit_empty {
        out.extend_from_slice(b"content-length: 0\r\n");
    }
    out.extend_from_slice(b"\r\n");
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::headers::{self, Framing, RequestHead};
    use http::{HeaderMap, HeaderName, HeaderValue, Method, uri::PathAndQuery};
    use proptest::prelude::*;

    fn forwarded() -> Forwarded {
        Forwarded::new("192.0.2.7".parse().unwrap(), false, 8080)
    }

    fn plain(text: &str) -> Box<PlainHead> {
        match parse(text.as_bytes()) {
            Parsed::Plain(head) => head,
            other => panic!("{text:?}: {other:?}"),
        }
    }

    fn upstream(text: &str) -> String {
        let head = plain(text);
        let mut out = Vec::new();
        encode_upstream_head(text.as_bytes(), &head, &forwarded(), &mut out);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn a_simple_get() {
        let text = "GET /a/b?x=1 HTTP/1.1\r\nHost: Example.COM:8080\r\nAccept: */*\r\n\r\nNEXT";
        let head = plain(text);
        let buf = text.as_bytes();
        assert_eq!(head.len, text.len() - 4);
        assert_eq!(head.method(buf), "GET");
        assert_eq!(head.target(buf), "/a/b?x=1");
        assert_eq!(head.path(buf), "/a/b");
        assert_eq!(head.host(buf), "Example.COM:8080");
        assert!(head.keep_alive && !head.http10);
        assert_eq!(
            upstream(text),
            "GET /a/b?x=1 HTTP/1.1\r\nhost: Example.COM:8080\r\nAccept: */*\r\n\
             x-forwarded-for: 192.0.2.7\r\nx-real-ip: 192.0.2.7\r\nx-forwarded-proto: http\r\n\
             x-forwarded-host: Example.COM:8080\r\nx-forwarded-port: 8080\r\n\r\n"
        );
    }

    #[test]
    fn incomplete_heads_are_partial_at_every_cut() {
        let text = b"GET / HTTP/1.1\r\nHost: a\r\nX-Long: 0123456789\r\n\r\n";
        for cut in 0..text.len() {
            assert!(matches!(parse(&text[..cut]), Parsed::Partial), "cut {cut}");
        }
        assert!(matches!(parse(text), Parsed::Plain(_)));
    }

    #[test]
    fn what_goes_to_hyper() {
        for text in [
            // Bodies, upgrades, expectations.
            "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\nhello",
            "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n",
            "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\nContent-Length: 0\r\n\r\n",
            "GET / HTTP/1.1\r\nHost: a\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n",
            "GET / HTTP/1.1\r\nHost: a\r\nUpgrade: h2c\r\n\r\n",
            "PUT / HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\n\r\n",
            // Hosts: none, two, empty, odd bytes.
            "GET / HTTP/1.1\r\n\r\n",
            "GET / HTTP/1.0\r\n\r\n",
            "GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
            "GET / HTTP/1.1\r\nHost:\r\n\r\n",
            "GET / HTTP/1.1\r\nHost: a b\r\n\r\n",
            // Targets other than plain origin-form.
            "GET http://a/ HTTP/1.1\r\nHost: a\r\n\r\n",
            "OPTIONS * HTTP/1.1\r\nHost: a\r\n\r\n",
            "CONNECT a:443 HTTP/1.1\r\nHost: a:443\r\n\r\n",
            "GET /a#frag HTTP/1.1\r\nHost: a\r\n\r\n",
            "GET /{x} HTTP/1.1\r\nHost: a\r\n\r\n",
            "GET /\"q\" HTTP/1.1\r\nHost: a\r\n\r\n",
            // Malformed.
            "GET / HTTP/2.0\r\nHost: a\r\n\r\n",
            "GET  / HTTP/1.1\r\nHost: a\r\n\r\n",
            "GET / HTTP/1.1\r\nHost: a\r\nBad Name: x\r\n\r\n",
            "GET / HTTP/1.1\r\nHost: a\r\n Folded: x\r\n\r\n",
            "\x00GET / HTTP/1.1\r\n\r\n",
        ] {
            assert!(matches!(parse(text.as_bytes()), Parsed::Other), "{text:?}");
        }
        let mut many = String::from("GET / HTTP/1.1\r\nHost: a\r\n");
        for i in 0..MAX_HEADERS {
            many.push_str(&format!("X-{i}: v\r\n"));
        }
        many.push_str("\r\n");
        assert!(
            matches!(parse(many.as_bytes()), Parsed::Other),
            "too many headers"
        );
    }

    #[test]
    fn keep_alive_rules() {
        let ka = |text: &str| plain(text).keep_alive;
        assert!(ka("GET / HTTP/1.1\r\nHost: a\r\n\r\n"));
        assert!(!ka(
            "GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n"
        ));
        assert!(!ka(
            "GET / HTTP/1.1\r\nHost: a\r\nConnection: keep-alive, Close\r\n\r\n"
        ));
        assert!(!ka("GET / HTTP/1.0\r\nHost: a\r\n\r\n"));
        assert!(ka(
            "GET / HTTP/1.0\r\nHost: a\r\nConnection: Keep-Alive\r\n\r\n"
        ));
        assert!(plain("GET / HTTP/1.0\r\nHost: a\r\n\r\n").http10);
    }

    #[test]
    fn hop_by_hop_and_forwarding_headers() {
        let text = "GET / HTTP/1.1\r\nHost: a\r\nConnection: keep-alive, X-Secret\r\n\
                    X-Secret: 1\r\nKeep-Alive: timeout=5\r\nProxy-Connection: x\r\nTE: gzip\r\n\
                    Trailer: x\r\nX-Real-IP: 6.6.6.6\r\nX-Forwarded-Proto: https\r\n\
                    X-Forwarded-For: 10.0.0.1\r\nCookie: a=1\r\nx-forwarded-for: 10.0.0.2\r\n\
                    Content-Length: 0\r\n\r\n";
        assert_eq!(
            upstream(text),
            "GET / HTTP/1.1\r\nhost: a\r\nCookie: a=1\r\n\
             x-forwarded-for: 10.0.0.1, 10.0.0.2, 192.0.2.7\r\nx-real-ip: 192.0.2.7\r\n\
             x-forwarded-proto: http\r\nx-forwarded-host: a\r\nx-forwarded-port: 8080\r\n\
             content-length: 0\r\n\r\n"
        );
        let te = upstream("GET / HTTP/1.1\r\nHost: a\r\nTE: trailers\r\n\r\n");
        assert!(te.contains("TE: trailers\r\n"), "{te}");
    }

    #[test]
    fn many_headers_spill_and_keep_their_order() {
        let mut text = String::from("GET / HTTP/1.1\r\nHost: a\r\nConnection: X-7\r\n");
        for i in 0..(INLINE_HEADERS * 2) {
            text.push_str(&format!("X-{i}: v{i}\r\n"));
        }
        text.push_str("\r\n");
        let out = upstream(&text);
        let expected: String = (0..INLINE_HEADERS * 2)
            .filter(|&i| i != 7)
            .map(|i| format!("X-{i}: v{i}\r\n"))
            .collect();
        assert!(out.contains(&expected), "{out}");
    }

    /// The upstream head of the hyper path for the same request.
    fn via_header_map(method: &str, target: &str, headers: &[(String, String)]) -> Vec<u8> {
        let mut map = HeaderMap::new();
        for (name, value) in headers {
            map.append(
                HeaderName::from_bytes(name.as_bytes()).unwrap(),
                HeaderValue::from_str(value).unwrap(),
            );
        }
        let host = map.get("host").cloned().unwrap();
        let method = Method::from_bytes(method.as_bytes()).unwrap();
        let path = PathAndQuery::try_from(target).unwrap();
        let forwarded = forwarded();
        let head = RequestHead {
            method: &method,
            path: &path,
            headers: &map,
            host: &host,
            forwarded: &forwarded,
            upgrading: false,
            http2: false,
            framing: if map.contains_key("content-length") {
                Framing::Length(0)
            } else {
                Framing::None
            },
        };
        let mut out = Vec::new();
        headers::encode_request_head(&head, "127.0.0.1:1".parse().unwrap(), &mut out);
        out
    }

    /// A head as (request line, lowercased header fields). Fields are sorted by name,
    /// stably: the order among fields of one name is meaningful, across names it is not
    /// (and hyper's header map groups names).
    fn normalized(bytes: &[u8]) -> (String, Vec<(String, String)>) {
        let text = String::from_utf8(bytes.to_vec()).unwrap();
        let mut lines = text.split("\r\n");
        let first = lines.next().unwrap().to_owned();
        let mut fields: Vec<(String, String)> = lines
            .filter(|l| !l.is_empty())
            .map(|l| {
                let (n, v) = l.split_once(": ").unwrap();
                (n.to_ascii_lowercase(), v.to_owned())
            })
            .collect();
        fields.sort_by(|a, b| a.0.cmp(&b.0));
        (first, fields)
    }

    fn header_strategy() -> impl Strategy<Value = (String, String)> {
        let names = prop::sample::select(vec![
            "Accept",
            "Cookie",
            "Connection",
            "Keep-Alive",
            "TE",
            "Trailer",
            "X-Forwarded-For",
            "x-forwarded-host",
            "X-Real-IP",
            "Proxy-Connection",
            "X-A",
            "x-b",
            "Content-Length",
            "User-Agent",
        ]);
        let values = prop::sample::select(vec![
            "1",
            "0",
            "close",
            "keep-alive",
            "X-A",
            "x-a, x-b",
            "trailers",
            "gzip",
            "10.1.1.1",
            "a=b; c=d",
            "",
        ]);
        (names, values).prop_map(|(n, v)| (n.to_owned(), v.to_owned()))
    }

    proptest! {
        /// For every plain request, the raw encoder and the header-map encoder of the hyper
        /// path send the upstream the same head (header names compared without case).
        #[test]
        fn agrees_with_the_header_map_encoder(
            method in prop::sample::select(vec!["GET", "HEAD", "POST", "DELETE", "PATCH"]),
            target in "/[a-z0-9/._~%-]{0,12}(\\?[a-z=&0-9]{0,8})?",
            host in "[a-z0-9.-]{1,12}(:[0-9]{1,5})?",
            headers in prop::collection::vec(header_strategy(), 0..12),
        ) {
            let mut all = vec![("Host".to_owned(), host.clone())];
            all.extend(headers);
            let mut text = format!("{method} {target} HTTP/1.1\r\n");
            for (n, v) in &all {
                text.push_str(&format!("{n}: {v}\r\n"));
            }
            text.push_str("\r\n");
            let head = match parse(text.as_bytes()) {
                Parsed::Plain(head) => head,
                Parsed::Other => {
                    // Only for what the hyper path must see: a body or an upgrade.
                    let body = all.iter().any(|(n, v)| n == "Content-Length" && v != "0")
                        || all.iter().filter(|(n, _)| n == "Content-Length").count() > 1;
                    let upgrade = all.iter().any(|(n, v)| {
                        n == "Connection" && v.split(',').any(|t| t.trim().eq_ignore_ascii_case("upgrade"))
                    });
                    prop_assert!(body || upgrade, "{text:?}");
                    return Ok(());
                }
                Parsed::Partial => panic!("complete head reported partial: {text:?}"),
            };
            let mut raw = Vec::new();
            encode_upstream_head(text.as_bytes(), &head, &forwarded(), &mut raw);
            let mapped = via_header_map(method, &target, &all);
            prop_assert_eq!(normalized(&raw), normalized(&mapped));
        }

        /// Arbitrary bytes never panic the parser, and a plain verdict's spans lie inside
        /// the head.
        #[test]
        fn never_panics(bytes in prop::collection::vec(any::<u8>(), 0..300)) {
            if let Parsed::Plain(head) = parse(&bytes) {
                prop_assert!(head.len <= bytes.len());
                let _ = (head.method(&bytes), head.target(&bytes), head.host(&bytes));
            }
        }
    }
}

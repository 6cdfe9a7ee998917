//! Reading a client's HTTP/1.x request head in place, for the proxy's own HTTP/1.1 loop
//! (`http1`).
//!
//! Pure: bytes in, a verdict out. [`parse`] tells whether the head at the front of a buffer
//! is complete and whether it is a *plain* request, the kind the own loop serves: no body
//! (no length or `Content-Length: 0`), no `Transfer-Encoding`, no upgrade, no `Expect`, an
//! origin-form target of ordinary characters, exactly one visible-ASCII Host. Anything else
//! (including every malformed head) is [`Parsed::Other`]: the connection goes to hyper with
//! the bytes unread, so rare and hostile input keeps hyper's well-tested handling.
//!
//! A plain head keeps its fields as spans of the buffer; [`PlainHead::upstream_request`]
//! hands them to the one header policy ([`crate::http::header_policy`]), exactly as the hyper
//! path hands over its header map.

use std::mem::MaybeUninit;

use crate::http::header_policy::{
    ConnectionOptions, Fields, Framing, RequestField, UpstreamRequest, request_field,
};

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

/// One header field: name and value.
#[derive(Debug, Clone, Copy, Default)]
struct Field {
    name: Span,
    value: Span,
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
    /// A `Connection` field names other fields.
    connection_names: bool,
    /// A `Via` field is present (loop detection reads it).
    via: bool,
    inline: [Field; INLINE_HEADERS],
    inline_len: usize,
    spilled: Vec<Field>,
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

    /// The path part of the target (the pipeline reads it through its request view).
    #[cfg(test)]
    pub(crate) fn path<'b>(&self, buf: &'b [u8]) -> &'b str {
        let target = self.target(buf);
        target.split_once('?').map_or(target, |(path, _)| path)
    }

    /// The Host header's value.
    pub(crate) fn host<'b>(&self, buf: &'b [u8]) -> &'b str {
        // Checked to be visible ASCII while parsing.
        std::str::from_utf8(self.host.get(buf)).unwrap_or("")
    }

    /// The header fields in order, as `(name, value)`.
    pub(crate) fn fields<'b>(&'b self, buf: &'b [u8]) -> PlainFields<'b> {
        PlainFields { head: self, buf }
    }

    /// The first value of the field `name` (lower case), if any.
    pub(crate) fn field<'b>(&'b self, buf: &'b [u8], name: &[u8]) -> Option<&'b [u8]> {
        self.fields(buf)
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, value)| value)
    }

    /// The values of the `Via` fields (empty when there is none).
    pub(crate) fn via<'b>(&'b self, buf: &'b [u8]) -> impl Iterator<Item = &'b [u8]> + 'b {
        // Most requests carry no Via: then nothing is walked at all.
        let fields = if self.via {
            self.inline_len + self.spilled.len()
        } else {
            0
        };
        self.fields(buf)
            .iter()
            .take(fields)
            .filter(|(name, _)| request_field(name) == RequestField::Via)
            .map(|(_, value)| value)
    }

    /// The request as the header policy takes it.
    pub(crate) fn upstream_request<'b>(
        &'b self,
        buf: &'b [u8],
    ) -> UpstreamRequest<'b, PlainFields<'b>> {
        UpstreamRequest {
            method: self.method.get(buf),
            target: self.target.get(buf),
            host: self.host.get(buf),
            fields: self.fields(buf),
            connection_names: self.connection_names,
            websocket: false,
            http2: false,
            framing: if self.explicit_empty {
                Framing::Length(0)
            } else {
                Framing::None
            },
            set: &[],
            vhost: None,
            forwarded_prefix: None,
            connection: None,
            http10: false,
            add: &[],
            remove: &[],
        }
    }

    fn keep(&mut self, field: Field) {
        if self.inline_len < INLINE_HEADERS {
            self.inline[self.inline_len] = field;
            self.inline_len += 1;
        } else {
            self.spilled.push(field);
        }
    }
}

/// The fields of a plain head, read from its buffer.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PlainFields<'b> {
    head: &'b PlainHead,
    buf: &'b [u8],
}

impl<'b> Fields<'b> for PlainFields<'b> {
    type Iter = PlainFieldsIter<'b>;

    fn iter(self) -> PlainFieldsIter<'b> {
        let head = self.head;
        PlainFieldsIter {
            fields: head.inline[..head.inline_len].iter().chain(&head.spilled),
            buf: self.buf,
        }
    }
}

/// A walk over [`PlainFields`].
#[derive(Debug, Clone)]
pub(crate) struct PlainFieldsIter<'b> {
    fields: std::iter::Chain<std::slice::Iter<'b, Field>, std::slice::Iter<'b, Field>>,
    buf: &'b [u8],
}

impl<'b> Iterator for PlainFieldsIter<'b> {
    type Item = (&'b [u8], &'b [u8]);

    fn next(&mut self) -> Option<Self::Item> {
        let field = self.fields.next()?;
        Some((field.name.get(self.buf), field.value.get(self.buf)))
    }
}

/// Whether the head at the front of `buf` (up to its empty line, or all of `buf` when it
/// has none yet) ends a line with a bare LF instead of CRLF.
pub(crate) fn has_bare_lf(buf: &[u8]) -> bool {
    let (mut prev, mut line_empty) = (b'\n', true);
    for &b in buf {
        if b == b'\n' {
            if prev != b'\r' {
                return true;
            }
            if line_empty {
                // The empty line: the head is over, what follows is a body.
                return false;
            }
            line_empty = true;
        } else if b != b'\r' {
            line_empty = false;
        }
        prev = b;
    }
    false
}

/// Whether the complete head at the front of `buf` has both `Content-Length` and
/// `Transfer-Encoding` (false for heads httparse cannot read: hyper refuses those itself).
pub(crate) fn length_and_chunked(buf: &[u8]) -> bool {
    let mut slots = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut request = httparse::Request::new(&mut slots);
    if !matches!(request.parse(buf), Ok(httparse::Status::Complete(_))) {
        return false;
    }
    let has = |wanted: RequestField| {
        request
            .headers
            .iter()
            .any(|h| request_field(h.name.as_bytes()) == wanted)
    };
    has(RequestField::ContentLength) && has(RequestField::TransferEncoding)
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
        connection_names: false,
        via: false,
        inline: [Field::default(); INLINE_HEADERS],
        inline_len: 0,
        spilled: Vec::new(),
    });
    let mut host = false;
    let mut connection = ConnectionOptions::default();
    for header in request.headers.iter() {
        let value = header.value;
        match request_field(header.name.as_bytes()) {
            RequestField::Host => {
                if host || value.is_empty() || !value.iter().all(|b| b.is_ascii_graphic()) {
                    return Parsed::Other;
                }
                host = true;
                head.host = Span::of(buf, value);
            }
            RequestField::ContentLength => {
                if head.explicit_empty || value.trim_ascii() != b"0" {
                    return Parsed::Other;
                }
                head.explicit_empty = true;
            }
            RequestField::Connection => connection.add(value),
            RequestField::Via => head.via = true,
            // Hyper's business: bodies, expectations, upgrades.
            RequestField::TransferEncoding | RequestField::Expect | RequestField::Upgrade => {
                return Parsed::Other;
            }
            _ => {}
        }
        head.keep(Field {
            name: Span::of(buf, header.name.as_bytes()),
            value: Span::of(buf, value),
        });
    }
    if !host || connection.upgrade {
        return Parsed::Other;
    }
    head.keep_alive = !connection.close && (!http10 || connection.keep_alive);
    head.connection_names = connection.names_fields;
    Parsed::Plain(head)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::header_policy::{self, Forwarded, HeaderPolicy};
    use http::{HeaderMap, HeaderName, HeaderValue};
    use proptest::prelude::*;

    fn forwarded() -> Forwarded {
        Forwarded::new("192.0.2.7".parse().unwrap(), false, 8080, false)
    }

    fn policy() -> HeaderPolicy {
        HeaderPolicy::new(Vec::new(), false, "sluice-test")
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
        let endpoint = "127.0.0.1:1".parse().unwrap();
        let request = head.upstream_request(text.as_bytes());
        header_policy::encode_request_head(&request, &forwarded(), &policy(), endpoint, &mut out);
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
             x-forwarded-host: Example.COM:8080\r\nx-forwarded-port: 8080\r\n\
             via: 1.1 sluice-test\r\n\r\n"
        );
    }

    #[test]
    fn bare_lf_is_found_in_the_head_only_rfc_9112_section_2_2() {
        assert!(!has_bare_lf(
            b"GET / HTTP/1.1\r\nHost: a\r\n\r\nbody\nwith\nlf"
        ));
        assert!(has_bare_lf(b"GET / HTTP/1.1\nHost: a\r\n\r\n"));
        assert!(has_bare_lf(b"GET / HTTP/1.1\r\nHost: a\n\r\n"));
        assert!(has_bare_lf(b"GET / HTTP/1.1\r\nHost: a\r\n\n"));
        assert!(has_bare_lf(b"\nGET / HTTP/1.1\r\n"));
        assert!(!has_bare_lf(b"GET / HTTP/1.1\r\nHost: a\r"));
        assert!(!has_bare_lf(b""));
    }

    #[test]
    fn length_with_chunked_is_found_rfc_9112_section_6_1() {
        let both = b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n";
        assert!(length_and_chunked(both));
        assert!(!length_and_chunked(
            b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\n"
        ));
        assert!(!length_and_chunked(&both[..both.len() - 2]));
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
            "GET / HTTP/1.1\r\nHost: a\r\nConnection: upgrade\r\n\r\n",
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
             x-forwarded-for: 192.0.2.7\r\nx-real-ip: 192.0.2.7\r\n\
             x-forwarded-proto: http\r\nx-forwarded-host: a\r\nx-forwarded-port: 8080\r\n\
             via: 1.1 sluice-test\r\ncontent-length: 0\r\n\r\n"
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

    /// The upstream head of the hyper path for the same request: the same policy fed from
    /// a header map instead of the read buffer.
    fn via_header_map(method: &str, target: &str, headers: &[(String, String)]) -> Vec<u8> {
        let mut map = HeaderMap::new();
        for (name, value) in headers {
            map.append(
                HeaderName::from_bytes(name.as_bytes()).unwrap(),
                HeaderValue::from_str(value).unwrap(),
            );
        }
        let host = map.get("host").cloned().unwrap();
        let mut connection = ConnectionOptions::default();
        for value in map.get_all("connection") {
            connection.add(value.as_bytes());
        }
        let request = UpstreamRequest {
            method: method.as_bytes(),
            target: target.as_bytes(),
            host: host.as_bytes(),
            fields: &map,
            connection_names: connection.names_fields,
            websocket: false,
            http2: false,
            framing: if map.contains_key("content-length") {
                Framing::Length(0)
            } else {
                Framing::None
            },
            set: &[],
            vhost: None,
            forwarded_prefix: None,
            connection: None,
            http10: false,
            add: &[],
            remove: &[],
        };
        let mut out = Vec::new();
        let endpoint = "127.0.0.1:1".parse().unwrap();
        header_policy::encode_request_head(&request, &forwarded(), &policy(), endpoint, &mut out);
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
            let request = head.upstream_request(text.as_bytes());
            let endpoint = "127.0.0.1:1".parse().unwrap();
            header_policy::encode_request_head(&request, &forwarded(), &policy(), endpoint, &mut raw);
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

//! Parsing an upstream's HTTP/1.x response head and deciding how its body is framed
//! (RFC 9112 §6.3), with hop-by-hop headers dropped on the way in.
//!
//! Pure: bytes in, a [`ResponseHead`] out. Header values share the read buffer (no copies).

use std::mem::MaybeUninit;

use bytes::{Bytes, BytesMut};
use http::StatusCode;
use http::header::{CONNECTION, HeaderMap, HeaderName, HeaderValue};

use crate::http::header_policy::{
    ConnectionOptions, ResponseField, connection_named, response_field, tokens,
};

/// Most headers accepted in one response (as hyper's client was configured).
const MAX_HEADERS: usize = 256;

/// Header spans kept on the stack while parsing (more spill to the heap).
const INLINE_HEADERS: usize = 24;

/// Longest response head accepted.
pub(crate) const MAX_HEAD_BYTES: usize = 64 * 1024;

/// How the response body is delimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BodyKind {
    /// No body (HEAD request, 1xx, 204, 304).
    Empty,
    /// Exactly this many bytes.
    Length(u64),
    /// Chunked transfer coding.
    Chunked,
    /// Everything until the upstream closes the connection.
    UntilClose,
}

/// A header field's name and value as byte ranges of the head: `(name at, name length,
/// value at, value length)`.
type Span = (u32, u32, u32, u32);

/// A parsed response head. The end-to-end header fields stay in the received bytes: the own
/// HTTP/1.1 loop copies them out as they are ([`ResponseHead::fields`]); hyper's path
/// builds a header map ([`ResponseHead::header_map`]).
#[derive(Debug)]
pub(crate) struct ResponseHead {
    /// Status code.
    pub(crate) status: StatusCode,
    /// Body framing.
    pub(crate) body: BodyKind,
    /// Whether the connection may carry another request after this response.
    pub(crate) reusable: bool,
    /// The head as received.
    raw: Bytes,
    /// End-to-end fields (hop-by-hop ones left out; `Upgrade` kept on a 101).
    inline: [Span; INLINE_HEADERS],
    inline_len: usize,
    spilled: Vec<Span>,
    /// A `Date` field is among them.
    has_date: bool,
    /// The reason phrase (offset, length in `raw`).
    reason: (u32, u32),
}

impl ResponseHead {
    /// The end-to-end header fields, in order, as received.
    pub(crate) fn fields(&self) -> impl Iterator<Item = (&[u8], &[u8])> {
        let raw = &self.raw;
        self.inline[..self.inline_len]
            .iter()
            .chain(&self.spilled)
            .map(move |&(n, nl, v, vl)| {
                let (n, nl, v, vl) = (n as usize, nl as usize, v as usize, vl as usize);
                (&raw[n..n + nl], &raw[v..v + vl])
            })
    }

    /// The reason phrase as received (may be empty).
    pub(crate) fn reason(&self) -> &[u8] {
        let (at, len) = (self.reason.0 as usize, self.reason.1 as usize);
        self.raw.get(at..at + len).unwrap_or(b"")
    }

    /// Whether the upstream sent a `Date`.
    pub(crate) fn has_date(&self) -> bool {
        self.has_date
    }

    /// The end-to-end fields as a header map, values sharing the received bytes (plus
    /// `Connection: upgrade` on a 101, which the client must see on its hop too).
    pub(crate) fn header_map(&self) -> Result<HeaderMap, HeadError> {
        let mut headers = HeaderMap::with_capacity(self.inline_len + self.spilled.len() + 1);
        for &(n, nl, v, vl) in self.inline[..self.inline_len].iter().chain(&self.spilled) {
            let (n, nl, v, vl) = (n as usize, nl as usize, v as usize, vl as usize);
            let raw_name = &self.raw[n..n + nl];
            let name = HeaderName::from_bytes(raw_name)
                .map_err(|_| HeadError::Header(String::from_utf8_lossy(raw_name).into_owned()))?;
            let value = HeaderValue::from_maybe_shared(self.raw.slice(v..v + vl))
                .map_err(|_| HeadError::Header(name.as_str().to_owned()))?;
            headers.append(name, value);
        }
        if self.status == StatusCode::SWITCHING_PROTOCOLS {
            headers.insert(CONNECTION, HeaderValue::from_static("upgrade"));
        }
        Ok(headers)
    }

    fn keep(&mut self, span: Span) {
        if self.inline_len < INLINE_HEADERS {
            self.inline[self.inline_len] = span;
            self.inline_len += 1;
        } else {
            self.spilled.push(span);
        }
    }

    /// Leaves out every kept field for which `drop` says so.
    fn drop_where(&mut self, drop: impl Fn(&[u8]) -> bool) {
        let raw = &self.raw;
        let name = |&(n, nl, _, _): &Span| &raw[n as usize..(n + nl) as usize];
        let mut write = 0;
        for read in 0..self.inline_len {
            if !drop(name(&self.inline[read])) {
                self.inline[write] = self.inline[read];
                write += 1;
            }
        }
        self.inline_len = write;
        self.spilled.retain(|span| !drop(name(span)));
    }
}

/// The upstream's response head is not valid HTTP/1.x.
#[derive(Debug, thiserror::Error)]
pub(crate) enum HeadError {
    /// httparse rejected it.
    #[error("invalid response head: {0}")]
    Syntax(#[from] httparse::Error),
    /// Longer than [`MAX_HEAD_BYTES`].
    #[error("response head too large")]
    TooLarge,
    /// A header value that `http` refuses.
    #[error("invalid response header {0}")]
    Header(String),
    /// Conflicting or unparseable framing.
    #[error("invalid response framing: {0}")]
    Framing(&'static str),
}

/// Names compared while parsing (case-insensitively).
fn is(name: &[u8], known: &str) -> bool {
    name.eq_ignore_ascii_case(known.as_bytes())
}

/// Parses a complete head from the front of `buf` and splits it off; `Ok(None)` when more
/// bytes are needed. `head_request`: the request was HEAD, so no body follows whatever the
/// headers say.
pub(crate) fn parse(
    buf: &mut BytesMut,
    head_request: bool,
) -> Result<Option<ResponseHead>, HeadError> {
    // Uninitialised slots: zeroing 256 of them would cost more than parsing a small head.
    let mut slots = [const { MaybeUninit::<httparse::Header<'_>>::uninit() }; MAX_HEADERS];
    let mut response = httparse::Response::new(&mut []);
    let parsed = httparse::ParserConfig::default().parse_response_with_uninit_headers(
        &mut response,
        buf,
        &mut slots,
    )?;
    let len = match parsed {
        httparse::Status::Complete(len) if len > MAX_HEAD_BYTES => {
            return Err(HeadError::TooLarge);
        }
        httparse::Status::Complete(len) => len,
        httparse::Status::Partial => {
            if buf.len() > MAX_HEAD_BYTES {
                return Err(HeadError::TooLarge);
            }
            return Ok(None);
        }
    };
    let code = response.code.unwrap_or(0);
    let status = StatusCode::from_u16(code).map_err(|_| HeadError::Framing("status code"))?;
    let http10 = response.version == Some(0);
    let upgrade = status == StatusCode::SWITCHING_PROTOCOLS;
    let mut head = ResponseHead {
        status,
        body: BodyKind::Empty,
        reusable: false,
        raw: Bytes::new(),
        inline: [(0, 0, 0, 0); INLINE_HEADERS],
        inline_len: 0,
        spilled: Vec::new(),
        has_date: false,
        reason: (0, 0),
    };
    let mut content_length: Option<u64> = None;
    let mut chunked = false;
    let mut other_coding = false;
    let mut connection = ConnectionOptions::default();
    // Offsets inside the buffer (a head is at most MAX_HEAD_BYTES long, so they fit u32):
    // the fields stay where they are once the buffer is frozen.
    let base = buf.as_ptr() as usize;
    for header in response.headers.iter() {
        let name = header.name.as_bytes();
        let value = header.value;
        match response_field(name) {
            ResponseField::ContentLength => {
                let parsed = parse_content_length(value)?;
                if content_length.is_some_and(|seen| seen != parsed) {
                    return Err(HeadError::Framing("conflicting Content-Length"));
                }
                content_length = Some(parsed);
            }
            ResponseField::TransferEncoding => {
                // Only the final coding matters for framing; chunked must be last.
                for coding in tokens(value) {
                    chunked = coding.eq_ignore_ascii_case(b"chunked");
                    other_coding |= !chunked;
                }
                continue;
            }
            ResponseField::Connection => {
                connection.add(value);
                continue;
            }
            ResponseField::HopByHop => continue,
            ResponseField::Upgrade if !upgrade => continue,
            ResponseField::Date => head.has_date = true,
            ResponseField::Upgrade | ResponseField::Other => {}
        }
        let at = |part: &[u8]| (part.as_ptr() as usize - base) as u32;
        head.keep((at(name), name.len() as u32, at(value), value.len() as u32));
    }
    // Fields listed in Connection are hop-by-hop too (rare: collected, then dropped); the
    // framing is never among them (see `header_policy`).
    // `close` anywhere wins; HTTP/1.0 stays open only when asked to.
    let mut close = connection.close || (http10 && !connection.keep_alive);
    let named_fields: Vec<Vec<u8>> = if connection.names_fields {
        let fields = response
            .headers
            .iter()
            .map(|h| (h.name.as_bytes(), h.value));
        connection_named(fields)
            .into_iter()
            .map(<[u8]>::to_vec)
            .collect()
    } else {
        Vec::new()
    };
    let reason = response.reason.unwrap_or("").as_bytes();
    head.reason = (
        (reason.as_ptr() as usize).saturating_sub(base) as u32,
        reason.len() as u32,
    );
    head.raw = buf.split_to(len).freeze();
    if !named_fields.is_empty() {
        head.drop_where(|name| named_fields.iter().any(|n| name.eq_ignore_ascii_case(n)));
        // `Connection: date` may have taken the Date away: the own loop then adds one.
        let has_date = head.fields().any(|(name, _)| is(name, "date"));
        head.has_date = has_date;
    }

    let no_body = head_request
        || status.is_informational()
        || status == StatusCode::NO_CONTENT
        || status == StatusCode::NOT_MODIFIED;
    if status.is_informational() || status == StatusCode::NO_CONTENT {
        // These never have a body, and a length on them would mislead the client
        // (RFC 9110 §8.6: a server must not send Content-Length in 1xx or 204). HEAD and 304
        // keep theirs: it describes the representation.
        head.drop_where(|name| is(name, "content-length"));
    }
    head.body = if no_body {
        BodyKind::Empty
    } else if chunked {
        // Transfer-Encoding overrides Content-Length (RFC 9112 §6.3 item 3); the stale
        // length must not reach the client either.
        head.drop_where(|name| is(name, "content-length"));
        BodyKind::Chunked
    } else if other_coding {
        // Not chunked as the final coding: the body runs until close.
        head.drop_where(|name| is(name, "content-length"));
        close = true;
        BodyKind::UntilClose
    } else if let Some(length) = content_length {
        BodyKind::Length(length)
    } else {
        close = true;
        BodyKind::UntilClose
    };
    if upgrade {
        close = true;
    }
    head.reusable = !close;
    Ok(Some(head))
}

fn parse_content_length(value: &[u8]) -> Result<u64, HeadError> {
    let value = value.trim_ascii();
    // A list of identical values is tolerated (RFC 9110 §8.6); anything else is not.
    let mut result: Option<u64> = None;
    for part in value.split(|&b| b == b',') {
        let part = part.trim_ascii();
        if part.is_empty() || part.len() > 19 || !part.iter().all(u8::is_ascii_digit) {
            return Err(HeadError::Framing("invalid Content-Length"));
        }
        let n = part.iter().fold(0u64, |n, &d| n * 10 + u64::from(d - b'0'));
        if result.is_some_and(|seen| seen != n) {
            return Err(HeadError::Framing("conflicting Content-Length"));
        }
        result = Some(n);
    }
    result.ok_or(HeadError::Framing("invalid Content-Length"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A parsed head, its fields as a header map, and the bytes after the head.
    fn parse_str(text: &str, head_request: bool) -> (Parsed, BytesMut) {
        let mut buf = BytesMut::from(text.as_bytes());
        let head = parse(&mut buf, head_request).unwrap().unwrap();
        let headers = head.header_map().unwrap();
        (Parsed { headers, head }, buf)
    }

    struct Parsed {
        head: ResponseHead,
        headers: HeaderMap,
    }

    impl std::ops::Deref for Parsed {
        type Target = ResponseHead;
        fn deref(&self) -> &ResponseHead {
            &self.head
        }
    }

    #[test]
    fn length_body_and_rest_left_in_buffer() {
        let (head, rest) = parse_str(
            "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nX-A: 1\r\nX-A: 2\r\n\r\nok",
            false,
        );
        assert_eq!(head.status, 200);
        assert_eq!(head.body, BodyKind::Length(2));
        assert!(head.reusable);
        assert_eq!(head.headers.get_all("x-a").iter().count(), 2);
        assert_eq!(head.headers["content-length"], "2");
        assert_eq!(&rest[..], b"ok");
    }

    #[test]
    fn partial_until_complete() {
        let full = b"HTTP/1.1 204 No Content\r\nServer: x\r\n\r\n";
        for cut in 0..full.len() {
            let mut buf = BytesMut::from(&full[..cut]);
            assert!(parse(&mut buf, false).unwrap().is_none(), "cut {cut}");
        }
        let (head, _) = parse_str(std::str::from_utf8(full).unwrap(), false);
        assert_eq!(head.body, BodyKind::Empty);
    }

    #[test]
    fn framing_rules() {
        let chunked =
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\nContent-Length: 9\r\n\r\n";
        let (head, _) = parse_str(chunked, false);
        assert_eq!(head.body, BodyKind::Chunked);
        assert!(head.headers.get("content-length").is_none());
        assert!(head.headers.get("transfer-encoding").is_none());

        let (head, _) = parse_str("HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n", false);
        assert_eq!(head.body, BodyKind::UntilClose);
        assert!(!head.reusable);

        let (head, _) = parse_str("HTTP/1.1 200 OK\r\n\r\n", false);
        assert_eq!(head.body, BodyKind::UntilClose);
        assert!(!head.reusable);

        let (head, _) = parse_str("HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n", true);
        assert_eq!(head.body, BodyKind::Empty, "HEAD has no body");
        assert_eq!(head.headers["content-length"], "10", "but keeps its length");
        assert!(head.reusable);

        let (head, _) = parse_str(
            "HTTP/1.1 304 Not Modified\r\nContent-Length: 10\r\n\r\n",
            false,
        );
        assert_eq!(head.body, BodyKind::Empty);

        let (head, _) = parse_str("HTTP/1.1 200 OK\r\nContent-Length: 3, 3\r\n\r\n", false);
        assert_eq!(head.body, BodyKind::Length(3));

        for bad in [
            "HTTP/1.1 200 OK\r\nContent-Length: 3, 4\r\n\r\n",
            "HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\n",
            "HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
            "HTTP/1.1 200 OK\r\nContent-Length: 99999999999999999999\r\n\r\n",
            "HTTP/1.1 2000 OK\r\n\r\n",
            "NOPE\r\n\r\n",
        ] {
            let mut buf = BytesMut::from(bad.as_bytes());
            assert!(parse(&mut buf, false).is_err(), "{bad}");
        }
    }

    #[test]
    fn connection_management() {
        let (head, _) = parse_str(
            "HTTP/1.1 200 OK\r\nConnection: close, X-Private\r\nX-Private: 1\r\nKeep-Alive: timeout=5\r\nContent-Length: 0\r\n\r\n",
            false,
        );
        assert!(!head.reusable);
        assert!(head.headers.get("x-private").is_none());
        assert!(head.headers.get("keep-alive").is_none());
        assert!(head.headers.get("connection").is_none());

        let (head, _) = parse_str("HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n", false);
        assert!(!head.reusable);
        let (head, _) = parse_str(
            "HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 0\r\n\r\n",
            false,
        );
        assert!(head.reusable);
    }

    #[test]
    fn upgrade_kept_only_on_101() {
        let (head, _) = parse_str(
            "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n",
            false,
        );
        assert_eq!(head.headers["upgrade"], "websocket");
        assert_eq!(head.headers["connection"], "upgrade");
        assert!(!head.reusable);
        let (head, _) = parse_str(
            "HTTP/1.1 200 OK\r\nUpgrade: h2c\r\nContent-Length: 0\r\n\r\n",
            false,
        );
        assert!(head.headers.get("upgrade").is_none());
    }

    #[test]
    fn many_headers_spill_past_the_inline_spans() {
        let mut text = String::from("HTTP/1.1 200 OK\r\nContent-Length: 0\r\n");
        for i in 0..(INLINE_HEADERS * 3) {
            text.push_str(&format!("X-H{i}: value-{i}\r\n"));
        }
        text.push_str("\r\n");
        let (head, rest) = parse_str(&text, false);
        assert!(rest.is_empty());
        assert_eq!(head.headers.len(), INLINE_HEADERS * 3 + 1);
        assert_eq!(head.headers["x-h0"], "value-0");
        let last = INLINE_HEADERS * 3 - 1;
        assert_eq!(
            head.headers[format!("x-h{last}").as_str()],
            format!("value-{last}").as_str()
        );
    }

    #[test]
    fn too_large_head() {
        let mut text = String::from("HTTP/1.1 200 OK\r\n");
        while text.len() <= MAX_HEAD_BYTES {
            text.push_str("X-Filler: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n");
        }
        let mut buf = BytesMut::from(text.as_bytes());
        assert!(matches!(
            parse(&mut buf, false),
            Err(HeadError::TooLarge | HeadError::Syntax(_))
        ));
    }
}

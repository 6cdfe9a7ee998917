//! Parsing an upstream's HTTP/1.x response head and deciding how its body is framed
//! (RFC 9112 §6.3), with hop-by-hop headers dropped on the way in.
//!
//! Pure: bytes in, a [`ResponseHead`] out. Header values share the read buffer (no copies).

use std::mem::MaybeUninit;

use bytes::{Bytes, BytesMut};
use http::header::{
    CONNECTION, CONTENT_LENGTH, HeaderMap, HeaderName, HeaderValue, TRANSFER_ENCODING, UPGRADE,
};
use http::{StatusCode, Version};

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

/// A parsed response head.
#[derive(Debug)]
pub(crate) struct ResponseHead {
    /// Status code.
    pub(crate) status: StatusCode,
    /// End-to-end headers (hop-by-hop ones removed; `Upgrade` kept on a 101).
    pub(crate) headers: HeaderMap,
    /// Body framing.
    pub(crate) body: BodyKind,
    /// Whether the connection may carry another request after this response.
    pub(crate) reusable: bool,
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
    let version = if response.version == Some(0) {
        Version::HTTP_10
    } else {
        Version::HTTP_11
    };
    // Offsets of names and values inside the buffer, so the values can share it once
    // frozen; on the stack for the usual handful of headers.
    let base = buf.as_ptr() as usize;
    let span = |h: &httparse::Header<'_>| {
        let name = h.name.as_ptr() as usize - base;
        let value = h.value.as_ptr() as usize - base;
        (name, h.name.len(), value, h.value.len())
    };
    let count = response.headers.len();
    let mut inline = [(0, 0, 0, 0); INLINE_HEADERS];
    let mut spilled = Vec::new();
    let spans: &[(usize, usize, usize, usize)] = if count <= INLINE_HEADERS {
        for (slot, header) in inline.iter_mut().zip(response.headers.iter()) {
            *slot = span(header);
        }
        &inline[..count]
    } else {
        spilled.extend(response.headers.iter().map(span));
        &spilled
    };
    let head: Bytes = buf.split_to(len).freeze();

    let mut headers = HeaderMap::with_capacity(spans.len());
    let mut content_length: Option<u64> = None;
    let mut chunked = false;
    let mut other_coding = false;
    let mut close = version == Version::HTTP_10;
    let mut connection_named: Vec<HeaderName> = Vec::new();
    let upgrade = status == StatusCode::SWITCHING_PROTOCOLS;
    for &(name_at, name_len, value_at, value_len) in spans {
        let raw_name = &head[name_at..name_at + name_len];
        let name = HeaderName::from_bytes(raw_name)
            .map_err(|_| HeadError::Header(String::from_utf8_lossy(raw_name).into_owned()))?;
        let raw_value = head.slice(value_at..value_at + value_len);
        if name == CONTENT_LENGTH {
            let parsed = parse_content_length(&raw_value)?;
            if content_length.is_some_and(|seen| seen != parsed) {
                return Err(HeadError::Framing("conflicting Content-Length"));
            }
            content_length = Some(parsed);
        } else if name == TRANSFER_ENCODING {
            // Only the final coding matters for framing; chunked must be last.
            for coding in raw_value.split(|&b| b == b',') {
                let coding = coding.trim_ascii();
                if coding.is_empty() {
                    continue;
                }
                chunked = coding.eq_ignore_ascii_case(b"chunked");
                other_coding |= !chunked;
            }
            continue;
        } else if name == CONNECTION {
            for token in raw_value.split(|&b| b == b',') {
                let token = token.trim_ascii();
                if token.eq_ignore_ascii_case(b"close") {
                    close = true;
                } else if token.eq_ignore_ascii_case(b"keep-alive") {
                    if version == Version::HTTP_10 {
                        close = false;
                    }
                } else if !token.eq_ignore_ascii_case(b"upgrade")
                    && let Ok(named) = HeaderName::from_bytes(token)
                {
                    connection_named.push(named);
                }
            }
            continue;
        } else if is_hop_by_hop(&name) || (name == UPGRADE && !upgrade) {
            continue;
        }
        let value = HeaderValue::from_maybe_shared(raw_value)
            .map_err(|_| HeadError::Header(name.as_str().to_owned()))?;
        headers.append(name, value);
    }
    for name in connection_named {
        headers.remove(name);
    }

    let no_body = head_request
        || status.is_informational()
        || status == StatusCode::NO_CONTENT
        || status == StatusCode::NOT_MODIFIED;
    let body = if no_body {
        BodyKind::Empty
    } else if chunked {
        // Transfer-Encoding overrides Content-Length (RFC 9112 §6.3 item 3); the stale
        // length must not reach the client either.
        headers.remove(CONTENT_LENGTH);
        BodyKind::Chunked
    } else if other_coding {
        // Not chunked as the final coding: the body runs until close.
        headers.remove(CONTENT_LENGTH);
        close = true;
        BodyKind::UntilClose
    } else if let Some(length) = content_length {
        BodyKind::Length(length)
    } else {
        close = true;
        BodyKind::UntilClose
    };
    if upgrade {
        // The client must see the upgrade agreed on this hop too.
        headers.insert(CONNECTION, HeaderValue::from_static("upgrade"));
        close = true;
    }
    Ok(Some(ResponseHead {
        status,
        headers,
        body,
        reusable: !close,
    }))
}

/// Hop-by-hop headers other than the framing ones handled by the parser.
fn is_hop_by_hop(name: &HeaderName) -> bool {
    matches!(
        name.as_str(),
        "keep-alive" | "proxy-connection" | "te" | "trailer"
    )
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

    fn parse_str(text: &str, head_request: bool) -> (ResponseHead, BytesMut) {
        let mut buf = BytesMut::from(text.as_bytes());
        let head = parse(&mut buf, head_request).unwrap().unwrap();
        (head, buf)
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

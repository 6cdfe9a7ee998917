//! Response heads as the own HTTP/1.1 loop (`http1`) writes them to clients.
//!
//! Pure apart from reading the clock for `Date`. Decides the client-side framing of a body
//! whose upstream framing is known: lengths pass through, chunked and close-delimited
//! bodies are chunked again for HTTP/1.1 clients, and an HTTP/1.0 client gets the body
//! delimited by closing the connection.

use std::cell::RefCell;
use std::time::{SystemTime, UNIX_EPOCH};

use http::header::CONTENT_TYPE;
use http::{HeaderName, HeaderValue, StatusCode};

use crate::compress::negotiate::Outcome;
use crate::compress::{self, FieldEdit};
use crate::http::header_policy::{put_header, removed};
use crate::http::response_head::{BodyKind, ResponseHead};
use crate::pipeline::response_edits::{OUR_SERVER, ResponseEdits};
use crate::settings::ServerHeader;

/// How the body after a head is delimited towards the client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ClientFraming {
    /// No body, or `Content-Length` among the headers: bytes go out as they come.
    AsIs,
    /// Each piece is sent as a chunk; a last chunk ends the body.
    Chunked,
    /// The body ends when the connection closes.
    Close,
}

/// What the client connection allows for this response.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ClientSide {
    /// The client spoke HTTP/1.0 (no chunked coding; keep-alive only when asked for).
    pub(crate) http10: bool,
    /// The connection may carry another request after this response.
    pub(crate) keep_alive: bool,
}

/// Writes the head of the upstream's `response` for the client: its end-to-end fields as
/// received, `Date` if it had none, the route's `edits`, the compression's (`compress`)
/// and the client-side framing. Returns that framing and whether the connection stays
/// open.
pub(crate) fn encode_head(
    response: &ResponseHead,
    client: ClientSide,
    edits: ResponseEdits<'_>,
    compress: Outcome,
    out: &mut Vec<u8>,
) -> (ClientFraming, bool) {
    let compressed = compress.coding.is_some();
    let ResponseEdits {
        set,
        add,
        remove,
        cookies,
        rewrites,
        server,
        snippet,
        status: _,
    } = edits;
    status_line(response.status, response.reason(), client, out);
    for (name, value) in response.fields() {
        // Fields the route sets replace the upstream's (nginx `more_set_headers`).
        if !set.is_empty()
            && set
                .iter()
                .any(|(n, _)| n.as_str().as_bytes().eq_ignore_ascii_case(name))
        {
            continue;
        }
        if removed(remove, name)
            || edits.drops_server(name)
            || snippet.is_some_and(|s| s.clears(name))
        {
            continue;
        }
        let value = match compress::field_edit(name, value, compressed) {
            FieldEdit::Keep => value,
            FieldEdit::Drop => continue,
            FieldEdit::Replace(new) => {
                put_header(out, name, &new);
                continue;
            }
        };
        // nginx `proxy_redirect`, `proxy_cookie_domain`, `proxy_cookie_path`.
        if let Some(new) = rewrites.and_then(|r| r.rewrite(name, value)) {
            put_header(out, name, &new);
            continue;
        }
        put_header(out, name, value);
    }
    // Gateway API `ResponseHeaderModifier`: set, then add, then remove.
    for (name, value) in set.iter().chain(add) {
        let name = name.as_str().as_bytes();
        if !removed(remove, name) && !snippet.is_some_and(|s| s.clears(name)) {
            put_header(out, name, value.as_bytes());
        }
    }
    // nginx `add_header` (a snippet's), on its statuses unless `always`.
    if let Some(snippet) = snippet {
        for (name, value) in snippet.added(response.status.as_u16()) {
            put_header(out, name.as_str().as_bytes(), value.as_bytes());
        }
    }
    for cookie in cookies {
        put_header(out, b"set-cookie", cookie.as_bytes());
    }
    if server == ServerHeader::Ours {
        put_header(out, b"server", OUR_SERVER);
    }
    if let Some(coding) = compress.coding {
        put_header(out, b"content-encoding", coding.token().as_bytes());
    }
    if compress.vary {
        let sent = set
            .iter()
            .chain(add)
            .map(|(n, v)| (n.as_str().as_bytes(), v.as_bytes()));
        if !compress::varies(response.fields().chain(sent)) {
            put_header(out, b"vary", b"Accept-Encoding");
        }
    }
    if !response.has_date() {
        // A proxy adds the Date an upstream left out (RFC 9110 §6.6.1).
        put_date(out);
    }
    let framing = match response.body {
        // Compressed: the length is known at the end only.
        BodyKind::Length(_) if compressed && client.http10 => ClientFraming::Close,
        BodyKind::Length(_) if compressed => {
            put_header(out, b"transfer-encoding", b"chunked");
            ClientFraming::Chunked
        }
        BodyKind::Empty | BodyKind::Length(_) => ClientFraming::AsIs,
        BodyKind::Chunked | BodyKind::UntilClose if client.http10 => ClientFraming::Close,
        BodyKind::Chunked | BodyKind::UntilClose => {
            put_header(out, b"transfer-encoding", b"chunked");
            ClientFraming::Chunked
        }
    };
    let keep_alive = client.keep_alive && framing != ClientFraming::Close;
    end_head(client, keep_alive, out);
    (framing, keep_alive)
}

/// Writes a whole error response (head and static page). Returns whether the connection
/// stays open.
pub(crate) fn encode_page(
    status: StatusCode,
    page: &[u8],
    head_request: bool,
    client: ClientSide,
    out: &mut Vec<u8>,
) -> bool {
    encode_answer(status, &[], page, head_request, client, out)
}

/// Writes a whole response of the proxy's own: `fields` (a redirect's Location, CORS),
/// then the page (none for 204 and 304). Returns whether the connection stays open.
pub(crate) fn encode_answer(
    status: StatusCode,
    fields: &[(HeaderName, HeaderValue)],
    page: &[u8],
    head_request: bool,
    client: ClientSide,
    out: &mut Vec<u8>,
) -> bool {
    status_line(status, b"", client, out);
    for (name, value) in fields {
        put_header(out, name.as_str().as_bytes(), value.as_bytes());
    }
    let bodiless = status == StatusCode::NO_CONTENT || status == StatusCode::NOT_MODIFIED;
    if !bodiless {
        put_header(
            out,
            CONTENT_TYPE.as_str().as_bytes(),
            b"text/html; charset=utf-8",
        );
        out.extend_from_slice(b"content-length: ");
        out.extend_from_slice(page.len().to_string().as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    put_date(out);
    end_head(client, client.keep_alive, out);
    if !head_request && !bodiless {
        out.extend_from_slice(page);
    }
    client.keep_alive
}

/// The status line, in the client's version (as hyper answers: an HTTP/1.0 client may not
/// know what 1.1 allows). A code without a standard phrase keeps `reason`, the upstream's.
fn status_line(status: StatusCode, reason: &[u8], client: ClientSide, out: &mut Vec<u8>) {
    out.extend_from_slice(if client.http10 {
        b"HTTP/1.0 "
    } else {
        b"HTTP/1.1 "
    });
    out.extend_from_slice(status.as_str().as_bytes());
    out.push(b' ');
    out.extend_from_slice(status.canonical_reason().map_or(reason, str::as_bytes));
    out.extend_from_slice(b"\r\n");
}

/// Ends the head, saying what happens to the connection where the client's protocol
/// version would not imply it.
fn end_head(client: ClientSide, keep_alive: bool, out: &mut Vec<u8>) {
    match (client.http10, keep_alive) {
        (false, false) => out.extend_from_slice(b"connection: close\r\n"),
        (true, true) => out.extend_from_slice(b"connection: keep-alive\r\n"),
        // HTTP/1.1 keeps the connection and HTTP/1.0 closes it unless told otherwise.
        _ => {}
    }
    out.extend_from_slice(b"\r\n");
}

/// An HTTP date is always this long (`Sun, 06 Nov 1994 08:49:37 GMT`).
const DATE_LEN: usize = 29;

thread_local! {
    /// The formatted date of the current second, per worker thread.
    static DATE_CACHE: RefCell<(u64, [u8; DATE_LEN])> = const { RefCell::new((0, [0; DATE_LEN])) };
}

/// Writes `date: <now>`, formatting at most once per second per thread.
fn put_date(out: &mut Vec<u8>) {
    let now = SystemTime::now();
    let secs = now.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    DATE_CACHE.with(|cache| {
        let mut cache = cache.borrow_mut();
        if cache.0 != secs {
            let text = httpdate::fmt_http_date(now);
            if text.len() == DATE_LEN {
                cache.1.copy_from_slice(text.as_bytes());
                cache.0 = secs;
            }
        }
        out.extend_from_slice(b"date: ");
        out.extend_from_slice(&cache.1);
        out.extend_from_slice(b"\r\n");
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::response_head;
    use bytes::BytesMut;

    const CLIENT11: ClientSide = ClientSide {
        http10: false,
        keep_alive: true,
    };
    const CLIENT10: ClientSide = ClientSide {
        http10: true,
        keep_alive: false,
    };

    /// The client-side head for an upstream head with a body framed as `body`.
    fn head(body: BodyKind, client: ClientSide, with_date: bool) -> (String, ClientFraming, bool) {
        let mut text = String::from("HTTP/1.1 200 OK\r\nx-a: 1\r\n");
        if with_date {
            text.push_str("Date: Sun, 06 Nov 1994 08:49:37 GMT\r\n");
        }
        match body {
            BodyKind::Length(n) => text.push_str(&format!("content-length: {n}\r\n")),
            BodyKind::Chunked => text.push_str("Transfer-Encoding: chunked\r\n"),
            BodyKind::UntilClose | BodyKind::Empty => {}
        }
        text.push_str("\r\n");
        let mut buf = BytesMut::from(text.as_bytes());
        let head_request = body == BodyKind::Empty;
        let response = response_head::parse(&mut buf, head_request)
            .unwrap()
            .unwrap();
        assert_eq!(response.body, body);
        let mut out = Vec::new();
        let (framing, keep_alive) = encode_head(
            &response,
            client,
            ResponseEdits::default(),
            Outcome::default(),
            &mut out,
        );
        (String::from_utf8(out).unwrap(), framing, keep_alive)
    }

    #[test]
    fn lengths_pass_through_and_dates_are_kept_or_added() {
        let (text, framing, keep_alive) = head(BodyKind::Length(5), CLIENT11, true);
        assert_eq!(
            text,
            "HTTP/1.1 200 OK\r\nx-a: 1\r\nDate: Sun, 06 Nov 1994 08:49:37 GMT\r\ncontent-length: 5\r\n\r\n"
        );
        assert_eq!((framing, keep_alive), (ClientFraming::AsIs, true));
        let (text, _, _) = head(BodyKind::Empty, CLIENT11, false);
        let date = text.lines().find(|l| l.starts_with("date: ")).unwrap();
        assert_eq!(date.len(), "date: ".len() + DATE_LEN);
        assert!(date.ends_with(" GMT"), "{date}");
    }

    #[test]
    fn unknown_lengths_are_chunked_for_http11_and_closed_for_http10() {
        for body in [BodyKind::Chunked, BodyKind::UntilClose] {
            let (text, framing, keep_alive) = head(body, CLIENT11, true);
            assert!(text.contains("transfer-encoding: chunked\r\n"), "{text}");
            assert_eq!((framing, keep_alive), (ClientFraming::Chunked, true));
            let (text, framing, keep_alive) = head(body, CLIENT10, true);
            assert!(!text.contains("transfer-encoding"), "{text}");
            assert!(
                !text.contains("connection:"),
                "HTTP/1.0 closes by default: {text}"
            );
            assert_eq!((framing, keep_alive), (ClientFraming::Close, false));
        }
        // An HTTP/1.0 client that asked for keep-alive still cannot get a chunked body.
        let asked = ClientSide {
            http10: true,
            keep_alive: true,
        };
        let (_, framing, keep_alive) = head(BodyKind::Chunked, asked, true);
        assert_eq!((framing, keep_alive), (ClientFraming::Close, false));
        let (text, _, keep_alive) = head(BodyKind::Length(1), asked, true);
        assert!(
            keep_alive && text.ends_with("connection: keep-alive\r\n\r\n"),
            "{text}"
        );
    }

    #[test]
    fn pages() {
        let mut out = Vec::new();
        let closing = ClientSide {
            http10: false,
            keep_alive: false,
        };
        assert!(!encode_page(
            StatusCode::NOT_FOUND,
            b"<p>",
            false,
            closing,
            &mut out
        ));
        let text = String::from_utf8(out).unwrap();
        assert!(text.starts_with("HTTP/1.1 404 Not Found\r\ncontent-type: text/html; charset=utf-8\r\ncontent-length: 3\r\ndate: "), "{text}");
        assert!(text.ends_with("connection: close\r\n\r\n<p>"), "{text}");
        let mut out = Vec::new();
        assert!(encode_page(
            StatusCode::BAD_GATEWAY,
            b"<p>",
            true,
            CLIENT11,
            &mut out
        ));
        assert!(out.ends_with(b"GMT\r\n\r\n"), "HEAD: no body");
    }
}

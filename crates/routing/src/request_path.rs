//! The request path as matching sees it: nginx's normalised URI (`$uri`).
//!
//! nginx matches `location`s against the URI after it decoded `%XX`, resolved `.` and `..`
//! segments and merged adjacent slashes (`ngx_http_parse_complex_uri`, `merge_slashes on`;
//! RFC 3986 sections 6.2.2.2 and 6.2.2.3). Matching the raw path instead lets `/%61dmin`,
//! `//admin`, `/./admin` or `/x/../admin` past the access rules of `/admin`, while the
//! backend reads every one of them as `/admin`. Both APIs' matching (Ingress and Gateway API)
//! and every policy that reads the path use [`normalize_request_path`]'s result.
//!
//! What goes upstream is nginx's choice too: the client's request target unchanged when no
//! rewrite applies (`proxy_pass` without a URI part), and the rewritten normalised path,
//! escaped by [`escape_path`], when one does.

use std::borrow::Cow;

/// Why a request path is refused with 400, as nginx refuses it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum RequestPathError {
    /// `..` climbs above `/` (nginx: "client sent invalid request", 400).
    #[error("the path climbs above the root with '..'")]
    AboveRoot,
    /// A `%` not followed by two hexadecimal digits.
    #[error("the path has a '%' not followed by two hexadecimal digits")]
    BadEscape,
    /// `%00`: a NUL byte cannot be part of a path any backend reads.
    #[error("the path encodes a NUL byte (%00)")]
    Nul,
    /// An encoded slash (`%2F`) together with a `.` or `..` segment: whether the dots
    /// climb over the encoded slash depends on the backend, so no answer is safe.
    #[error("the path mixes an encoded slash (%2F) with '.' or '..' segments")]
    AmbiguousSlash,
}

/// The path matching sees for request path `path` (without the query): `%XX` decoded, `.`
/// and `..` segments resolved, runs of `/` merged into one, as nginx does before it matches
/// locations. A trailing slash, or a trailing `.`/`..` segment, leaves a trailing slash
/// (`/a/b/..` is `/a/`). An encoded slash counts as a slash for matching, as in nginx.
///
/// Decoded bytes that do not form UTF-8 stay encoded (upper-case hex), so the result is a
/// `str`. A path that does not start with `/` (`*`, or empty) is returned as it is. Borrows
/// when the path is already normal, which is the common case and allocates nothing.
pub fn normalize_request_path(path: &str) -> Result<Cow<'_, str>, RequestPathError> {
    if !path.starts_with('/') || is_normal(path.as_bytes()) {
        return Ok(Cow::Borrowed(path));
    }
    let (decoded, encoded_slash) = decode(path.as_bytes())?;
    let mut segments: Vec<&[u8]> = Vec::new();
    let mut dots = false;
    // The first byte is '/': everything after it, split at every (decoded) slash.
    let rest = &decoded[1..];
    let parts: Vec<&[u8]> = rest.split(|&b| b == b'/').collect();
    let last = parts.len() - 1;
    let mut trailing_slash = false;
    for (i, part) in parts.into_iter().enumerate() {
        match part {
            b"" => {
                // An empty segment: a doubled slash (merged) or the trailing slash.
                if i == last {
                    trailing_slash = true;
                }
            }
            b"." => {
                dots = true;
                trailing_slash = i == last;
            }
            b".." => {
                dots = true;
                if segments.pop().is_none() {
                    return Err(RequestPathError::AboveRoot);
                }
                trailing_slash = i == last;
            }
            segment => {
                segments.push(segment);
                trailing_slash = false;
            }
        }
    }
    if dots && encoded_slash {
        return Err(RequestPathError::AmbiguousSlash);
    }
    let mut out = Vec::with_capacity(decoded.len());
    for segment in &segments {
        out.push(b'/');
        out.extend_from_slice(segment);
    }
    if segments.is_empty() || trailing_slash {
        out.push(b'/');
    }
    Ok(Cow::Owned(into_string(out)))
}

/// Whether `path` (starting with `/`) is already what [`normalize_request_path`] would
/// make of it: no `%`, no empty segment but a trailing one, no `.` or `..` segment.
fn is_normal(path: &[u8]) -> bool {
    let mut segment_start = 1;
    for i in 1..=path.len() {
        let end = i == path.len();
        if !end && path[i] == b'%' {
            return false;
        }
        if end || path[i] == b'/' {
            let segment = &path[segment_start..i];
            if (segment.is_empty() && !end) || segment == b"." || segment == b".." {
                return false;
            }
            segment_start = i + 1;
        }
    }
    true
}

/// `path` with every `%XX` decoded, and whether one of them was a slash.
fn decode(path: &[u8]) -> Result<(Vec<u8>, bool), RequestPathError> {
    let mut out = Vec::with_capacity(path.len());
    let mut encoded_slash = false;
    let mut at = 0;
    while at < path.len() {
        let b = path[at];
        if b != b'%' {
            out.push(b);
            at += 1;
            continue;
        }
        let (Some(hi), Some(lo)) = (
            path.get(at + 1).and_then(|&c| hex(c)),
            path.get(at + 2).and_then(|&c| hex(c)),
        ) else {
            return Err(RequestPathError::BadEscape);
        };
        let byte = hi << 4 | lo;
        match byte {
            0 => return Err(RequestPathError::Nul),
            b'/' => encoded_slash = true,
            _ => {}
        }
        out.push(byte);
        at += 3;
    }
    Ok((out, encoded_slash))
}

fn hex(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    }
}

/// Bytes to a string; bytes that are not UTF-8 are kept as `%XX`.
fn into_string(bytes: Vec<u8>) -> String {
    match String::from_utf8(bytes) {
        Ok(s) => s,
        Err(e) => {
            let bytes = e.into_bytes();
            let mut out = String::with_capacity(bytes.len() * 3);
            for chunk in bytes.utf8_chunks() {
                out.push_str(chunk.valid());
                for &b in chunk.invalid() {
                    push_escaped(&mut out, b);
                }
            }
            out
        }
    }
}

fn push_escaped(out: &mut String, b: u8) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    out.push('%');
    out.push(char::from(HEX[usize::from(b >> 4)]));
    out.push(char::from(HEX[usize::from(b & 15)]));
}

/// A normalised (decoded) path made fit for a request line again, as nginx escapes `$uri`
/// when it proxies a rewritten URI (`NGX_ESCAPE_URI`): space, `#`, `%`, `?`, control bytes
/// and non-ASCII bytes become `%XX`; everything else, `/` included, stays. A `%XX` of a
/// byte 0x80 and above is kept as it is: that is how [`normalize_request_path`] keeps bytes
/// that are not UTF-8. Borrows when nothing needs escaping.
pub fn escape_path(path: &str) -> Cow<'_, str> {
    let needs = |b: u8| matches!(b, b' ' | b'#' | b'%' | b'?') || !(0x20..0x7f).contains(&b);
    if !path.bytes().any(needs) {
        return Cow::Borrowed(path);
    }
    let bytes = path.as_bytes();
    let kept_escape = |i: usize| {
        bytes
            .get(i + 1)
            .is_some_and(|b| matches!(b, b'8'..=b'9' | b'A'..=b'F'))
            && bytes
                .get(i + 2)
                .is_some_and(|b| matches!(b, b'0'..=b'9' | b'A'..=b'F'))
    };
    let mut out = String::with_capacity(path.len() + 16);
    for (i, ch) in path.char_indices() {
        if ch == '%' && kept_escape(i) {
            out.push('%');
        } else if ch.is_ascii() && !needs(ch as u8) {
            out.push(ch);
        } else {
            for &b in &bytes[i..i + ch.len_utf8()] {
                push_escaped(&mut out, b);
            }
        }
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn norm(path: &str) -> Result<String, RequestPathError> {
        normalize_request_path(path).map(Cow::into_owned)
    }

    /// The bypasses of the ingress-nginx drop-in issue, and nginx's documented behaviour
    /// (`ngx_http_parse_complex_uri`: decode, resolve dots, merge slashes).
    #[test]
    fn nginx_normalises_before_matching_locations() {
        let cases = [
            ("/", "/"),
            ("/admin", "/admin"),
            ("/%61dmin", "/admin"),
            ("/%61%64%6D%69%6E", "/admin"),
            ("//admin", "/admin"),
            ("///admin//x", "/admin/x"),
            ("/./admin", "/admin"),
            ("/x/../admin", "/admin"),
            ("/x/%2e%2E/admin", "/admin"),
            ("/x/.%2e/admin", "/admin"),
            ("/a/b/..", "/a/"),
            ("/a/b/.", "/a/b/"),
            ("/a/b/", "/a/b/"),
            ("/a//", "/a/"),
            ("/..a/b", "/..a/b"),
            ("/a/.../b", "/a/.../b"),
            ("/.well-known/x", "/.well-known/x"),
            ("/a%2Fb", "/a/b"),
            ("/a%20b", "/a b"),
            ("/caf%C3%A9", "/café"),
            ("/x%FFy", "/x%FFy"),
            ("/x%ffy", "/x%FFy"),
            ("/.", "/"),
            ("/a/..", "/"),
            ("*", "*"),
            ("", ""),
        ];
        for (input, want) in cases {
            assert_eq!(norm(input).as_deref(), Ok(want), "{input:?}");
        }
    }

    #[test]
    fn what_nginx_answers_400_is_refused() {
        use RequestPathError::*;
        let cases = [
            ("/..", AboveRoot),
            ("/../etc/passwd", AboveRoot),
            ("/a/../../b", AboveRoot),
            ("/%2e%2e/b", AboveRoot),
            ("/a%", BadEscape),
            ("/a%2", BadEscape),
            ("/a%zz", BadEscape),
            ("/a%00b", Nul),
            ("/admin%2F..%2Fpublic", AmbiguousSlash),
            ("/a%2Fb/../c", AmbiguousSlash),
        ];
        for (input, want) in cases {
            assert_eq!(norm(input), Err(want), "{input:?}");
        }
    }

    #[test]
    fn normal_paths_are_borrowed() {
        for path in ["/", "/a/b", "/a/b/", "/.well-known/acme", "/a..b/c."] {
            assert!(matches!(normalize_request_path(path), Ok(Cow::Borrowed(_))));
        }
    }

    #[test]
    fn escaping_makes_a_request_line_path() {
        assert_eq!(escape_path("/a/b"), "/a/b");
        assert!(matches!(escape_path("/a/b"), Cow::Borrowed(_)));
        assert_eq!(escape_path("/a b?c#d%e"), "/a%20b%3Fc%23d%25e");
        assert_eq!(escape_path("/café"), "/caf%C3%A9");
    }

    proptest! {
        /// Normalising is idempotent, its result is a normal path (no dot segments, no
        /// doubled slash), and a request path's normal form never escapes the root.
        #[test]
        fn normal_form_is_a_fixed_point(
            segments in proptest::collection::vec(
                prop_oneof![
                    Just(String::new()), Just(".".to_owned()), Just("..".to_owned()),
                    Just("%2e".to_owned()), Just("%2E%2e".to_owned()), Just("%2F".to_owned()),
                    Just("%41".to_owned()), Just("%".to_owned()), Just("%C3%A9".to_owned()),
                    "[a-z]{1,3}",
                ],
                0..8,
            ),
            trailing in any::<bool>(),
        ) {
            let mut path = String::new();
            for s in &segments {
                path.push('/');
                path.push_str(s);
            }
            if trailing || path.is_empty() {
                path.push('/');
            }
            if let Ok(once) = normalize_request_path(&path) {
                let once = once.into_owned();
                prop_assert!(once.starts_with('/'));
                prop_assert!(!once.contains("//"), "{once:?}");
                prop_assert!(!once.split('/').any(|s| s == "." || s == ".."), "{once:?}");
                // Escaped for the wire and normalised again: the same path.
                let escaped = escape_path(&once).into_owned();
                let again = normalize_request_path(&escaped).map(Cow::into_owned);
                prop_assert_eq!(again.as_deref(), Ok(once.as_str()), "{:?} -> {:?}", path, escaped);
            }
        }
    }
}

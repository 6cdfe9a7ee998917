//! Response compression: gzip, brotli and zstd, negotiated by `Accept-Encoding`, as
//! ingress-nginx's `use-gzip` / `enable-brotli` keys configure nginx.
//!
//! * `settings`: [`Compression`], the global settings (flags, later the ConfigMap keys).
//! * `negotiate`: pure decisions: the client's q-values, the route's switch, what the
//!   response allows.
//! * `encoder`: the body compressed as it streams, flushed when the upstream pauses.
//!
//! A front end asks twice: [`negotiate::asked`] with the request (nothing is parsed when
//! the route has compression off), then [`negotiate::outcome`] with the upstream's head;
//! it edits the head with [`field_edit`] / [`edit_headers`] and passes the body through
//! [`encoder::Compressing`].

pub(crate) mod encoder;
pub(crate) mod negotiate;
mod settings;

use http::header::{ACCEPT_RANGES, CONTENT_ENCODING, CONTENT_LENGTH, ETAG, VARY};
use http::{HeaderMap, HeaderValue};

pub use settings::{
    Compression, DEFAULT_BROTLI_TYPES, DEFAULT_GZIP_TYPES, MediaTypes, UserAgents, parse_types,
    parse_user_agents,
};

use negotiate::{Outcome, ResponseFacts};

/// What happens to one upstream response field when the body is compressed.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum FieldEdit {
    /// Sent as it is.
    Keep,
    /// Not sent: `Content-Length` (the compressed length is not known before the end) and
    /// `Accept-Ranges` (ranges of the compressed body are not offered, as nginx clears it).
    Drop,
    /// Sent with this value: a strong `ETag` made weak.
    Replace(Vec<u8>),
}

/// The edit of field `name: value` of a response compressed (`compressed`) or only
/// varying (`Vary` is added by the caller).
pub(crate) fn field_edit(name: &[u8], value: &[u8], compressed: bool) -> FieldEdit {
    if !compressed {
        return FieldEdit::Keep;
    }
    if name.eq_ignore_ascii_case(b"content-length") || name.eq_ignore_ascii_case(b"accept-ranges") {
        return FieldEdit::Drop;
    }
    if name.eq_ignore_ascii_case(b"etag")
        && let Some(weak) = negotiate::weakened_etag(value)
    {
        return FieldEdit::Replace(weak);
    }
    FieldEdit::Keep
}

/// The facts of a response whose fields are `fields` (name, value pairs).
pub(crate) fn facts_of<'a>(
    status: u16,
    fields: impl Iterator<Item = (&'a [u8], &'a [u8])>,
    length: Option<u64>,
) -> ResponseFacts<'a> {
    let mut facts = ResponseFacts {
        status,
        length,
        ..ResponseFacts::default()
    };
    for (name, value) in fields {
        if name.eq_ignore_ascii_case(b"content-type") {
            facts.content_type.get_or_insert(value);
        } else if name.eq_ignore_ascii_case(b"content-encoding") {
            facts.encoded |= negotiate::is_encoded(value);
        } else if name.eq_ignore_ascii_case(b"cache-control") {
            facts.no_transform |= negotiate::has_no_transform(value);
        }
    }
    facts
}

/// Whether the fields already have a `Vary` covering `Accept-Encoding`.
pub(crate) fn varies<'a>(mut fields: impl Iterator<Item = (&'a [u8], &'a [u8])>) -> bool {
    fields.any(|(name, value)| {
        name.eq_ignore_ascii_case(b"vary") && negotiate::varies_on_encoding(value)
    })
}

/// Applies `outcome` to a header map (responses hyper writes): the coding's
/// `Content-Encoding`, the length and ranges dropped, the `ETag` weakened, and
/// `Vary: Accept-Encoding` appended unless a `Vary` already covers it.
pub(crate) fn edit_headers(headers: &mut HeaderMap, outcome: Outcome) {
    if let Some(coding) = outcome.coding {
        headers.remove(CONTENT_LENGTH);
        headers.remove(ACCEPT_RANGES);
        if let Some(weak) = headers
            .get(ETAG)
            .and_then(|etag| negotiate::weakened_etag(etag.as_bytes()))
            .and_then(|weak| HeaderValue::from_bytes(&weak).ok())
        {
            headers.insert(ETAG, weak);
        }
        headers.insert(CONTENT_ENCODING, HeaderValue::from_static(coding.token()));
    }
    if outcome.vary
        && !headers
            .get_all(VARY)
            .iter()
            .any(|v| negotiate::varies_on_encoding(v.as_bytes()))
    {
        headers.append(VARY, HeaderValue::from_static("Accept-Encoding"));
    }
}

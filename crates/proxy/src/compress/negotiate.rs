//! Which content coding a response gets: `Accept-Encoding` parsed with its q-values (RFC
//! 9110 §12.5.3), and the response's own facts checked against the settings, as nginx's
//! gzip filter and the brotli module check them. Pure: no I/O, no clock.

use super::settings::{Compression, MediaTypes};

/// A content coding the proxy can apply.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum Coding {
    /// `gzip` (RFC 9110 §8.4.1.3); `x-gzip` is accepted as the same.
    Gzip,
    /// `br` (RFC 7932).
    Brotli,
    /// `zstd` (RFC 8878).
    Zstd,
}

impl Coding {
    /// Every coding, in the server's order of preference when the client's q-values tie:
    /// brotli first (ingress-nginx's brotli filter runs before gzip, so a client accepting
    /// both gets `br` there too), then zstd (a better ratio than gzip for less CPU), then
    /// gzip, which every client has.
    pub(crate) const PREFERENCE: [Coding; 3] = [Coding::Brotli, Coding::Zstd, Coding::Gzip];

    /// The `Content-Encoding` token.
    pub(crate) fn token(self) -> &'static str {
        match self {
            Coding::Gzip => "gzip",
            Coding::Brotli => "br",
            Coding::Zstd => "zstd",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// A q-value in thousandths (RFC 9110 §12.4.2: at most three decimals), 0 to 1000.
pub(crate) type Quality = u16;

/// What a client's `Accept-Encoding` fields say about the codings the proxy knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Accepted {
    /// Per [`Coding`] (by index): the q-value the client gave it by name, if any.
    named: [Option<Quality>; 3],
    /// The q-value of `*`, if given: it applies to codings not named.
    any: Option<Quality>,
}

impl Accepted {
    /// Reads `Accept-Encoding` field values (each a comma-separated list). Members that do
    /// not parse (a bad q-value) are ignored, so a malformed field never makes the proxy
    /// pick a coding the client did not ask for.
    pub(crate) fn parse<'a>(values: impl IntoIterator<Item = &'a [u8]>) -> Accepted {
        let mut out = Accepted::default();
        for value in values {
            for member in value.split(|&b| b == b',') {
                let Some((name, q)) = member_of(member) else {
                    continue;
                };
                let slot =
                    if name.eq_ignore_ascii_case(b"gzip") || name.eq_ignore_ascii_case(b"x-gzip") {
                        &mut out.named[Coding::Gzip.index()]
                    } else if name.eq_ignore_ascii_case(b"br") {
                        &mut out.named[Coding::Brotli.index()]
                    } else if name.eq_ignore_ascii_case(b"zstd") {
                        &mut out.named[Coding::Zstd.index()]
                    } else if name == b"*" {
                        &mut out.any
                    } else {
                        // identity and codings the proxy does not make: nothing to decide.
                        continue;
                    };
                // Named twice: the higher q-value counts (a client listing `gzip;q=0, gzip`
                // is contradictory; taking the higher one is what most servers do).
                *slot = Some(slot.map_or(q, |old| old.max(q)));
            }
        }
        out
    }

    /// The q-value the client gives `coding`: by name, else `*`'s, else 0 (not acceptable).
    pub(crate) fn quality(&self, coding: Coding) -> Quality {
        self.named[coding.index()].or(self.any).unwrap_or(0)
    }

    /// The coding to use among those `allowed` (per [`Coding`] index): the highest q-value
    /// above 0, ties broken by [`Coding::PREFERENCE`]. `None`: identity.
    pub(crate) fn choose(&self, allowed: [bool; 3]) -> Option<Coding> {
        let mut best: Option<(Coding, Quality)> = None;
        for coding in Coding::PREFERENCE {
            if !allowed[coding.index()] {
                continue;
            }
            let q = self.quality(coding);
            if q > 0 && best.is_none_or(|(_, b)| q > b) {
                best = Some((coding, q));
            }
        }
        best.map(|(coding, _)| coding)
    }
}

/// One list member: its coding name (trimmed) and q-value (1000 when absent). `None` for
/// an empty member or one whose parameters do not parse.
fn member_of(member: &[u8]) -> Option<(&[u8], Quality)> {
    let mut parts = member.split(|&b| b == b';');
    let name = parts.next().map(trim)?;
    if name.is_empty() {
        return None;
    }
    let mut q = 1000;
    for param in parts {
        let param = trim(param);
        let eq = param.iter().position(|&b| b == b'=')?;
        let (key, value) = (trim(&param[..eq]), trim(&param[eq + 1..]));
        if key.eq_ignore_ascii_case(b"q") {
            q = parse_q(value)?;
        }
    }
    Some((name, q))
}

/// `qvalue = ( "0" [ "." 0*3DIGIT ] ) / ( "1" [ "." 0*3("0") ] )`, in thousandths.
fn parse_q(value: &[u8]) -> Option<Quality> {
    let (whole, fraction) = match value.iter().position(|&b| b == b'.') {
        Some(dot) => (&value[..dot], &value[dot + 1..]),
        None => (value, &b""[..]),
    };
    if fraction.len() > 3 || !fraction.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let mut thousandths: Quality = 0;
    for (i, digit) in fraction.iter().enumerate() {
        thousandths += Quality::from(digit - b'0') * [100, 10, 1][i];
    }
    match whole {
        b"0" => Some(thousandths),
        b"1" if thousandths == 0 => Some(1000),
        _ => None,
    }
}

fn trim(bytes: &[u8]) -> &[u8] {
    let start = bytes
        .iter()
        .position(|b| !b.is_ascii_whitespace())
        .unwrap_or(bytes.len());
    let end = bytes
        .iter()
        .rposition(|b| !b.is_ascii_whitespace())
        .map_or(start, |e| e + 1);
    &bytes[start..end]
}

/// What the request says, read once the route allows compression.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Asked {
    /// The client's `Accept-Encoding`.
    pub(crate) accepted: Accepted,
    /// Which codings the route may use (per [`Coding`] index), with `gzip-disable`
    /// already applied to the client's `User-Agent`.
    pub(crate) enabled: [bool; 3],
}

/// The request's facts that can rule compression out before the response is seen.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct RequestFacts<'a> {
    /// `HEAD`: no body to compress.
    pub(crate) head: bool,
    /// HTTP/1.0 (ingress-nginx sets `gzip_http_version 1.1`).
    pub(crate) http10: bool,
    /// A `Range` field: the client wants bytes of the identity body (RFC 9110 §14.2).
    pub(crate) range: bool,
    /// The `User-Agent`, for `gzip-disable`.
    pub(crate) user_agent: Option<&'a [u8]>,
}

/// The request half: `None` when nothing can be compressed for this request, so the
/// response half and the `Accept-Encoding` parse are skipped. `route`: the route's
/// `sluice.dev/compression` (`None`: the global setting).
pub(crate) fn asked<'a>(
    settings: &Compression,
    route: Option<bool>,
    request: RequestFacts<'_>,
    accept_encoding: impl IntoIterator<Item = &'a [u8]>,
) -> Option<Asked> {
    let mut enabled = match route {
        Some(false) => return None,
        // `on` where the global setting has no coding: gzip, with its global level,
        // minimum length and types.
        Some(true) if !settings.any_enabled() => [true, false, false],
        _ => settings.enabled(),
    };
    if enabled == [false; 3] || request.head || request.http10 || request.range {
        return None;
    }
    if enabled[Coding::Gzip.index()]
        && let Some(agent) = request.user_agent
        && settings.gzip_disable.matches(agent)
    {
        // nginx `gzip_disable` turns gzip off for these clients, not the other codings.
        enabled[Coding::Gzip.index()] = false;
    }
    Some(Asked {
        accepted: Accepted::parse(accept_encoding),
        enabled,
    })
}

/// The response's facts that decide it, as the upstream sent them.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct ResponseFacts<'a> {
    /// The status code.
    pub(crate) status: u16,
    /// `Content-Type`, if any.
    pub(crate) content_type: Option<&'a [u8]>,
    /// `Content-Encoding` present (and not `identity`): already encoded.
    pub(crate) encoded: bool,
    /// `Cache-Control` has `no-transform` (RFC 9111 §5.2.2.6).
    pub(crate) no_transform: bool,
    /// `Content-Length`, when the length is known.
    pub(crate) length: Option<u64>,
}

/// What happens to a response's head and body.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Outcome {
    /// The coding applied, `None`: sent as is.
    pub(crate) coding: Option<Coding>,
    /// `Vary: Accept-Encoding` is added: the response would have been compressed for a
    /// client that asked (nginx `gzip_vary on`, which ingress-nginx sets), so caches must
    /// not serve one variant for the other.
    pub(crate) vary: bool,
}

/// The response half: whether this response is compressed, and with what.
///
/// Skipped, as nginx skips them: statuses other than 200, 403 and 404 (so 206, 204 and 304
/// too: a partial or empty body has nothing to compress, and a 304 must describe the
/// stored variant unchanged); a response already carrying `Content-Encoding` (compressing
/// twice gains nothing); `Cache-Control: no-transform` (the sender forbids it); a type not
/// in the coding's list; a `Content-Length` below the coding's minimum. A body of unknown
/// length (chunked, or until close) is compressed: its length is not known before it is
/// streamed, and nginx does the same (`gzip_min_length` reads `Content-Length` only).
/// gRPC is never compressed this way (its messages carry their own compression).
pub(crate) fn outcome(
    settings: &Compression,
    asked: &Asked,
    response: ResponseFacts<'_>,
) -> Outcome {
    if !matches!(response.status, 200 | 403 | 404) || response.encoded || response.no_transform {
        return Outcome::default();
    }
    let media = media_type(response.content_type.unwrap_or(b""));
    if media.len() >= 16 && media[..16].eq_ignore_ascii_case(b"application/grpc") {
        return Outcome::default();
    }
    let mut eligible = [false; 3];
    for coding in Coding::PREFERENCE {
        let i = coding.index();
        let (types, min_length) = settings.rules(coding);
        eligible[i] = asked.enabled[i]
            && types.matches(media)
            && response.length.is_none_or(|length| length >= min_length);
    }
    Outcome {
        coding: asked.accepted.choose(eligible),
        vary: eligible.contains(&true),
    }
}

/// The media type of a `Content-Type` value: before any parameter, trimmed.
pub(crate) fn media_type(content_type: &[u8]) -> &[u8] {
    let end = content_type
        .iter()
        .position(|&b| b == b';')
        .unwrap_or(content_type.len());
    trim(&content_type[..end])
}

/// Whether a `Cache-Control` value has the `no-transform` directive.
pub(crate) fn has_no_transform(cache_control: &[u8]) -> bool {
    cache_control
        .split(|&b| b == b',')
        .any(|directive| trim(directive).eq_ignore_ascii_case(b"no-transform"))
}

/// Whether a `Content-Encoding` value says the body is encoded (anything but `identity`).
pub(crate) fn is_encoded(content_encoding: &[u8]) -> bool {
    content_encoding
        .split(|&b| b == b',')
        .map(trim)
        .any(|coding| !coding.is_empty() && !coding.eq_ignore_ascii_case(b"identity"))
}

/// Whether a `Vary` value already covers `Accept-Encoding` (by name, or `*`).
pub(crate) fn varies_on_encoding(vary: &[u8]) -> bool {
    vary.split(|&b| b == b',')
        .map(trim)
        .any(|name| name == b"*" || name.eq_ignore_ascii_case(b"accept-encoding"))
}

/// A strong `ETag` made weak (`W/` prefix), as nginx does for a response it compresses:
/// the compressed bytes differ from the entity the tag names, but mean the same. A weak
/// one (or a malformed one) is kept as it is.
pub(crate) fn weakened_etag(etag: &[u8]) -> Option<Vec<u8>> {
    let tag = trim(etag);
    if tag.first() != Some(&b'"') {
        return None;
    }
    let mut weak = Vec::with_capacity(tag.len() + 2);
    weak.extend_from_slice(b"W/");
    weak.extend_from_slice(tag);
    Some(weak)
}

impl MediaTypes {
    /// Whether `media` (a media type without parameters) is in the list. `text/html` always
    /// is: nginx compresses it whatever `gzip_types` / `brotli_types` say.
    pub(crate) fn matches(&self, media: &[u8]) -> bool {
        if media.is_empty() {
            return false;
        }
        match self {
            MediaTypes::Any => true,
            MediaTypes::List(list) => {
                media.eq_ignore_ascii_case(b"text/html")
                    || list
                        .iter()
                        .any(|t| t.as_bytes().eq_ignore_ascii_case(media))
            }
        }
    }
}

#[cfg(test)]
mod tests;

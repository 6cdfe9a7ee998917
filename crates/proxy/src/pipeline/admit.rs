//! Admission: the checks a request head must pass before it is routed, the same for every
//! front end (own HTTP/1.1 loop, hyper's HTTP/1.1 and HTTP/2).
//!
//! Pure: facts about the head in, a verdict out. Limits on size and field count are the
//! parsers' (431); what is decided here is what a well-formed head may still not ask for.

use http::StatusCode;

use crate::http::header_policy::HeaderPolicy;

/// How many times a request may already have passed this proxy. One hairpin (a backend
/// that calls back through the same ingress and forwards `Via`) is allowed; a request seen
/// a third time is a loop, refused before it can multiply (RFC 9110 §7.6.3, status 508 of
/// RFC 5842).
pub(crate) const MAX_OWN_HOPS: usize = 2;

/// The protocol a request arrived in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Version {
    /// HTTP/1.0 (Host optional).
    Http10,
    /// HTTP/1.1 (Host required).
    Http11,
    /// HTTP/2 (`:authority`, or Host).
    Http2,
}

/// What admission looks at.
#[derive(Debug)]
pub(crate) struct Facts<'a, V> {
    /// The method.
    pub(crate) method: &'a [u8],
    /// The protocol.
    pub(crate) version: Version,
    /// How many Host fields the head carries.
    pub(crate) hosts: usize,
    /// The Host field (the first, if several).
    pub(crate) host: Option<&'a [u8]>,
    /// The target's authority (HTTP/2 `:authority`, or an absolute-form target's).
    pub(crate) authority: Option<&'a [u8]>,
    /// Both `Content-Length` and `Transfer-Encoding` are present.
    pub(crate) length_and_chunked: bool,
    /// The values of the `Via` fields.
    pub(crate) via: V,
}

/// Why a request is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// Malformed for its version (400): the reason, for the debug log.
    BadRequest(&'static str),
    /// A method the proxy does not forward (405).
    MethodNotAllowed,
    /// The request came back to this proxy too often (508).
    LoopDetected,
}

impl Refusal {
    /// The status the client gets.
    pub(crate) fn status(self) -> StatusCode {
        match self {
            Refusal::BadRequest(_) => StatusCode::BAD_REQUEST,
            Refusal::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            Refusal::LoopDetected => StatusCode::LOOP_DETECTED,
        }
    }
}

/// The request path as routing and every policy see it (nginx's normalised `$uri`, see
/// [`sluice_routing::normalize_request_path`]), or the 400 nginx answers for a path it
/// cannot normalise (`..` above the root, a bad or NUL escape).
pub(crate) fn request_path(path: &str) -> Result<std::borrow::Cow<'_, str>, Refusal> {
    use sluice_routing::RequestPathError as E;
    sluice_routing::normalize_request_path(path).map_err(|e| {
        Refusal::BadRequest(match e {
            E::AboveRoot => "path climbs above the root",
            E::BadEscape => "path has a malformed %-escape",
            E::Nul => "path encodes a NUL byte",
            E::AmbiguousSlash => "path mixes %2F with dot segments",
        })
    })
}

/// Admits or refuses a request head.
pub(crate) fn admit<'a, V>(facts: Facts<'a, V>, policy: &HeaderPolicy) -> Result<(), Refusal>
where
    V: Iterator<Item = &'a [u8]>,
{
    // CONNECT would make the proxy a tunnel to anywhere; TRACE reflects the request's
    // credentials back (nginx answers both with 405).
    if facts.method == b"CONNECT" || facts.method == b"TRACE" {
        return Err(Refusal::MethodNotAllowed);
    }
    if facts.hosts > 1 {
        // RFC 9112 §3.2: a request with more than one Host field is answered 400.
        return Err(Refusal::BadRequest("more than one Host field"));
    }
    if facts.length_and_chunked {
        // RFC 9112 §6.1 allows either rejecting or ignoring the length; a proxy that ignores
        // it while a peer honours it is open to request smuggling (nginx rejects too).
        return Err(Refusal::BadRequest("Content-Length with Transfer-Encoding"));
    }
    match facts.version {
        Version::Http11 if facts.hosts == 0 => {
            // RFC 9112 §3.2: an HTTP/1.1 request without Host is answered 400.
            return Err(Refusal::BadRequest("HTTP/1.1 request without Host"));
        }
        Version::Http2 => {
            // RFC 9113 §8.3.1: a Host that differs from :authority is malformed.
            if let (Some(host), Some(authority)) = (facts.host, facts.authority)
                && !same_authority(host, authority)
            {
                return Err(Refusal::BadRequest("Host differs from :authority"));
            }
        }
        _ => {}
    }
    if policy.own_hops(facts.via) >= MAX_OWN_HOPS {
        return Err(Refusal::LoopDetected);
    }
    Ok(())
}

/// Whether two authorities name the same host and port, a default port (80, 443) being the
/// same as none.
fn same_authority(a: &[u8], b: &[u8]) -> bool {
    fn bare(s: &[u8]) -> &[u8] {
        s.strip_suffix(b":80")
            .or_else(|| s.strip_suffix(b":443"))
            .unwrap_or(s)
    }
    bare(a).eq_ignore_ascii_case(bare(b))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy() -> HeaderPolicy {
        HeaderPolicy::new(Vec::new(), false, "sluice-me")
    }

    fn facts<'a>(
        method: &'a str,
        version: Version,
        hosts: &[&'a str],
    ) -> Facts<'a, std::vec::IntoIter<&'a [u8]>> {
        Facts {
            method: method.as_bytes(),
            version,
            hosts: hosts.len(),
            host: hosts.first().map(|h| h.as_bytes()),
            authority: None,
            length_and_chunked: false,
            via: Vec::new().into_iter(),
        }
    }

    #[test]
    fn host_rules_of_rfc_9112_section_3_2() {
        let p = policy();
        assert_eq!(admit(facts("GET", Version::Http11, &["a"]), &p), Ok(()));
        assert_eq!(admit(facts("GET", Version::Http10, &[]), &p), Ok(()));
        assert!(matches!(
            admit(facts("GET", Version::Http11, &[]), &p),
            Err(Refusal::BadRequest(_))
        ));
        assert!(matches!(
            admit(facts("GET", Version::Http10, &["a", "b"]), &p),
            Err(Refusal::BadRequest(_))
        ));
        assert!(matches!(
            admit(facts("GET", Version::Http11, &["a", "a"]), &p),
            Err(Refusal::BadRequest(_))
        ));
    }

    #[test]
    fn http2_authority_must_agree_with_host_rfc_9113_section_8_3_1() {
        let p = policy();
        let mut f = facts("GET", Version::Http2, &["a.example"]);
        f.authority = Some(b"A.example");
        assert_eq!(admit(f, &p), Ok(()));
        let mut f = facts("GET", Version::Http2, &["evil.example"]);
        f.authority = Some(b"a.example");
        assert!(matches!(admit(f, &p), Err(Refusal::BadRequest(_))));
        let mut f = facts("GET", Version::Http2, &[]);
        f.authority = Some(b"a.example");
        assert_eq!(admit(f, &p), Ok(()));
        let mut f = facts("GET", Version::Http2, &["a.example:80"]);
        f.authority = Some(b"a.example");
        assert_eq!(admit(f, &p), Ok(()));
        let mut f = facts("GET", Version::Http2, &["a.example:8080"]);
        f.authority = Some(b"a.example");
        assert!(matches!(admit(f, &p), Err(Refusal::BadRequest(_))));
    }

    #[test]
    fn length_with_chunked_is_400_rfc_9112_section_6_1() {
        let mut f = facts("POST", Version::Http11, &["a"]);
        f.length_and_chunked = true;
        assert!(matches!(admit(f, &policy()), Err(Refusal::BadRequest(_))));
    }

    #[test]
    fn connect_and_trace_are_405_like_nginx() {
        let p = policy();
        for method in ["CONNECT", "TRACE"] {
            for version in [Version::Http10, Version::Http11, Version::Http2] {
                assert_eq!(
                    admit(facts(method, version, &["a"]), &p),
                    Err(Refusal::MethodNotAllowed)
                );
            }
        }
        assert_eq!(admit(facts("connect", Version::Http11, &["a"]), &p), Ok(()));
    }

    #[test]
    fn loops_end_after_a_bounded_number_of_own_hops() {
        let p = policy();
        let with_via = |via: Vec<&'static str>| Facts {
            method: b"GET".as_slice(),
            version: Version::Http11,
            hosts: 1,
            host: Some(b"a".as_slice()),
            authority: None,
            length_and_chunked: false,
            via: via.into_iter().map(str::as_bytes),
        };
        assert_eq!(admit(with_via(vec!["1.1 other"]), &p), Ok(()));
        assert_eq!(admit(with_via(vec!["1.1 sluice-me"]), &p), Ok(()));
        assert_eq!(
            admit(
                with_via(vec!["1.1 sluice-me, 1.1 b", "HTTP/1.1 sluice-me (x)"]),
                &p
            ),
            Err(Refusal::LoopDetected)
        );
        // Another proxy whose name only starts like ours is not us.
        assert_eq!(
            admit(with_via(vec!["1.1 sluice-me2, 1.1 sluice-me2"]), &p),
            Ok(())
        );
        assert_eq!(Refusal::LoopDetected.status().as_u16(), 508);
    }
}

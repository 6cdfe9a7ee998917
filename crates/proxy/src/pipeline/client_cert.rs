//! Client certificates on the shared HTTPS listener (ingress-nginx `auth-tls-*`, docs
//! section "Client Certificate Authentication"; nginx `ssl_verify_client`): the check of the
//! request's host, against the certificates its connection showed in the handshake.
//!
//! nginx's answers: a required certificate missing, 400 ("No required SSL certificate was
//! sent", nginx's 496); one that does not verify (`on` and `optional`), 400 ("The SSL
//! certificate error", 495); either redirects (302) to `auth-tls-error-page` when set. A
//! subject that does not match `auth-tls-match-cn`, 403. The upstream gets `ssl-client-verify`
//! (`SUCCESS`, `FAILED:<reason>` or `NONE`), `ssl-client-subject-dn`, `ssl-client-issuer-dn`
//! and, with `auth-tls-pass-certificate-to-upstream`, `ssl-client-cert` (the URL-escaped
//! PEM, nginx's `$ssl_client_escaped_cert`); whatever the client sent under those names is
//! dropped.

use std::sync::Arc;

use http::{HeaderName, HeaderValue, StatusCode};
use rustls::pki_types::{CertificateDer, UnixTime};
use rustls::server::danger::ClientCertVerifier;
use sluice_routing::{ClientCertAuth, ClientCertMode};

use crate::pipeline::route_policy::Answer;

/// What the check decided.
pub(crate) enum Verdict {
    /// Forward, with these request fields (set, or removed when empty).
    Allow(Vec<(HeaderName, HeaderValue)>),
    /// Answer now.
    Deny(Answer),
}

/// Checks `shown` (the connection's certificates, leaf first; empty: none) against `auth`.
/// `verifier`: `auth`'s (`None`: its CA could not be loaded, nothing verifies).
pub(crate) fn check(
    auth: &ClientCertAuth,
    verifier: Option<&Arc<dyn ClientCertVerifier>>,
    shown: &[CertificateDer<'static>],
) -> Verdict {
    let (verify, subject, issuer) = match shown.split_first() {
        None => ("NONE".to_owned(), String::new(), String::new()),
        Some((leaf, intermediates)) => {
            let verified = if shown.len() > auth.depth as usize + 1 {
                Err("certificate chain too long".to_owned())
            } else {
                match verifier {
                    Some(v) => v
                        .verify_client_cert(leaf, intermediates, UnixTime::now())
                        .map(|_| ())
                        .map_err(|e| e.to_string()),
                    None => Err("no usable CA certificate".to_owned()),
                }
            };
            let (subject, issuer) = names(leaf);
            match verified {
                Ok(()) => ("SUCCESS".to_owned(), subject, issuer),
                Err(reason) => (format!("FAILED:{reason}"), subject, issuer),
            }
        }
    };
    let refused = match (auth.mode, verify.as_str()) {
        (ClientCertMode::On, "NONE") => true,
        (ClientCertMode::On | ClientCertMode::Optional, v) => v.starts_with("FAILED"),
        (ClientCertMode::OptionalNoCa, _) => false,
    };
    if refused {
        let answer = match auth
            .error_page
            .as_deref()
            .and_then(|page| HeaderValue::from_str(page).ok())
        {
            Some(location) => Answer::found(location),
            None => Answer::status(StatusCode::BAD_REQUEST),
        };
        return Verdict::Deny(answer);
    }
    // nginx: `if ($ssl_client_s_dn !~ "<match-cn>") { return 403; }` in the server.
    if let Some(pattern) = &auth.match_cn
        && !pattern.is_match(&subject)
    {
        return Verdict::Deny(Answer::status(StatusCode::FORBIDDEN));
    }
    let field = |value: &str| HeaderValue::from_str(value).unwrap_or(HeaderValue::from_static(""));
    let mut fields = vec![
        (HeaderName::from_static("ssl-client-verify"), field(&verify)),
        (
            HeaderName::from_static("ssl-client-subject-dn"),
            field(&subject),
        ),
        (
            HeaderName::from_static("ssl-client-issuer-dn"),
            field(&issuer),
        ),
    ];
    let cert = match (auth.pass_certificate, shown.first()) {
        (true, Some(leaf)) => escaped_pem(leaf),
        _ => String::new(),
    };
    fields.push((HeaderName::from_static("ssl-client-cert"), field(&cert)));
    Verdict::Allow(fields)
}

/// The subject and issuer of `cert` as nginx prints them (`$ssl_client_s_dn`, RFC 2253:
/// most significant last, `,` between).
fn names(cert: &CertificateDer<'_>) -> (String, String) {
    match x509_parser::parse_x509_certificate(cert) {
        Ok((_, parsed)) => (rfc2253(parsed.subject()), rfc2253(parsed.issuer())),
        Err(_) => (String::new(), String::new()),
    }
}

fn rfc2253(name: &x509_parser::x509::X509Name<'_>) -> String {
    let registry = x509_parser::objects::oid_registry();
    let rdns: Vec<String> = name
        .iter_rdn()
        .map(|rdn| {
            rdn.iter()
                .map(|attr| {
                    let key = x509_parser::objects::oid2abbrev(attr.attr_type(), registry)
                        .map(str::to_owned)
                        .unwrap_or_else(|_| attr.attr_type().to_id_string());
                    let value = attr.as_str().unwrap_or("");
                    format!("{key}={}", escape_dn(value))
                })
                .collect::<Vec<_>>()
                .join("+")
        })
        .collect();
    rdns.into_iter().rev().collect::<Vec<_>>().join(",")
}

/// RFC 2253 section 2.4: `,`, `+`, `"`, `\`, `<`, `>` and `;` escaped with `\`.
fn escape_dn(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for c in value.chars() {
        if matches!(c, ',' | '+' | '"' | '\\' | '<' | '>' | ';') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// The PEM of `cert`, URL-escaped as nginx's `$ssl_client_escaped_cert`.
fn escaped_pem(cert: &CertificateDer<'_>) -> String {
    use base64::Engine as _;
    let b64 = base64::engine::general_purpose::STANDARD.encode(cert.as_ref());
    let mut pem = String::from("-----BEGIN CERTIFICATE-----\n");
    for line in b64.as_bytes().chunks(64) {
        pem.push_str(&String::from_utf8_lossy(line));
        pem.push('\n');
    }
    pem.push_str("-----END CERTIFICATE-----\n");
    let mut out = String::with_capacity(pem.len() * 3 / 2);
    for b in pem.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn distinguished_names_escape_as_rfc_2253() {
        assert_eq!(escape_dn("a,b+c"), "a\\,b\\+c");
        assert_eq!(escape_dn("plain"), "plain");
    }
}

//! Digest authentication (ingress-nginx's `auth-type: digest`, the
//! `nginx-http-auth-digest` module's `auth_digest` with `auth_digest_user_file`; RFC 7616
//! with MD5 and `qop="auth"`): a request without a valid answer gets 401 with a fresh
//! challenge, `stale=true` when only its nonce is too old (or used more than
//! `auth_digest_replays` times); a valid one goes on without its `Authorization` field.

use http::header::WWW_AUTHENTICATE;
use http::{HeaderValue, StatusCode};
use sluice_routing::{DigestAuth, digest_credentials};

use crate::pipeline::basic_auth::Verdict;
use crate::pipeline::digest_nonce::{self, NonceAge};
use crate::pipeline::route_policy::Answer;

/// A request as the digest check sees it.
pub(crate) struct Asked<'a> {
    /// The method, as sent.
    pub(crate) method: &'a str,
    /// The request target, as sent: the `uri` the client signed must be this.
    pub(crate) target: &'a str,
    /// The `Authorization` value, if any.
    pub(crate) authorization: Option<&'a [u8]>,
    /// Seconds since the epoch.
    pub(crate) now: u64,
}

/// Checks the request's `Authorization: Digest` answer against the route's users.
pub(crate) fn check(digest: &DigestAuth, asked: &Asked<'_>) -> Verdict {
    let Some(key) = digest_nonce::process_key() else {
        return Verdict::Fail(StatusCode::INTERNAL_SERVER_ERROR);
    };
    let Some(credentials) = asked.authorization.and_then(digest_credentials) else {
        return challenge(digest, key, asked.now, false);
    };
    if credentials.realm != digest.realm {
        return challenge(digest, key, asked.now, false);
    }
    let age = digest_nonce::judge(key, &digest.realm, &credentials.nonce, asked.now);
    if age == NonceAge::Forged || credentials.nonce_count == 0 {
        return challenge(digest, key, asked.now, false);
    }
    // RFC 7616 section 3.4.6: the signed URI must be the request's, else 400.
    if credentials.uri != asked.target {
        return Verdict::Fail(StatusCode::BAD_REQUEST);
    }
    if !digest.users.verify(asked.method, &credentials) {
        return challenge(digest, key, asked.now, false);
    }
    // The user knows the password; only the nonce is used up: `stale=true` lets the
    // client answer a new one without asking again (RFC 7616 section 3.3).
    if age == NonceAge::Stale || credentials.nonce_count > digest_nonce::REPLAYS {
        return challenge(digest, key, asked.now, true);
    }
    Verdict::Allow
}

/// 401 with `WWW-Authenticate: Digest realm=..., nonce=..., qop="auth", algorithm=MD5`.
fn challenge(digest: &DigestAuth, key: &ring::hmac::Key, now: u64, stale: bool) -> Verdict {
    let nonce = digest_nonce::issue(key, &digest.realm, now, digest_nonce::salt());
    let stale = if stale { ", stale=true" } else { "" };
    // The realm was checked to be printable without `"` or `\` when it was read.
    let value = format!(
        "Digest realm=\"{}\", nonce=\"{nonce}\", qop=\"auth\", algorithm=MD5{stale}",
        digest.realm
    );
    let Ok(value) = HeaderValue::from_str(&value) else {
        return Verdict::Fail(StatusCode::INTERNAL_SERVER_ERROR);
    };
    Verdict::Deny(Answer {
        status: StatusCode::UNAUTHORIZED,
        location: None,
        fields: vec![(WWW_AUTHENTICATE, value)],
        body: None,
    })
}

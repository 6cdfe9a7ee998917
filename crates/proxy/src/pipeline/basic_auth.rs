//! Basic authentication (ingress-nginx's `auth-type: basic`, nginx's `auth_basic` with
//! `auth_basic_user_file`): a request without valid credentials gets 401 with the route's
//! `WWW-Authenticate` challenge; a user whose hash nginx cannot read gets 500; a valid one
//! goes on without its `Authorization` field (`proxy_set_header Authorization ""`).
//!
//! bcrypt is slow by design (milliseconds per check): it runs on tokio's blocking pool,
//! never on a worker's event loop.

use std::sync::Arc;

use http::StatusCode;
use http::header::WWW_AUTHENTICATE;
use sluice_routing::{BasicAuth, PasswordCheck, basic_credentials};

use crate::pipeline::route_policy::Answer;

/// What the check decided.
pub(crate) enum Verdict {
    /// Go on upstream.
    Allow,
    /// Answer the client with this (401 and the challenge).
    Deny(Answer),
    /// The user's hash is of no known scheme (nginx: 500).
    Fail(StatusCode),
}

/// Checks the `Authorization` value `authorization` against the route's users.
pub(crate) async fn check(basic: &Arc<BasicAuth>, authorization: Option<&[u8]>) -> Verdict {
    let Some((user, password)) = authorization.and_then(basic_credentials) else {
        return challenge(basic);
    };
    let checked = if basic.users.is_slow(&user) {
        let basic = Arc::clone(basic);
        tokio::task::spawn_blocking(move || basic.users.check(&user, &password))
            .await
            .unwrap_or(PasswordCheck::BadHash)
    } else {
        basic.users.check(&user, &password)
    };
    match checked {
        PasswordCheck::Valid => Verdict::Allow,
        PasswordCheck::Invalid => challenge(basic),
        PasswordCheck::BadHash => Verdict::Fail(StatusCode::INTERNAL_SERVER_ERROR),
    }
}

fn challenge(basic: &BasicAuth) -> Verdict {
    Verdict::Deny(Answer {
        status: StatusCode::UNAUTHORIZED,
        location: None,
        fields: vec![(WWW_AUTHENTICATE, basic.challenge.clone())],
        body: None,
    })
}

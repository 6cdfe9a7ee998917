//! External authentication (ingress-nginx's `auth-url`): before a request goes upstream,
//! the auth service is asked with the request's headers and no body, as nginx's
//! `auth_request` does.
//!
//! - 2xx: the request goes on, with the `auth-response-headers` of the answer;
//! - 401: 401 with the service's `WWW-Authenticate`, or with `auth-signin` a 302 there
//!   carrying the original URL in `rd`;
//! - 403: 403;
//!
//! The service's `Set-Cookie` fields reach the client as nginx's `add_header Set-Cookie
//! $auth_cookie` sends them: on the statuses `add_header` adds to (the backend's 2xx and
//! 3xx, the sign-in redirect), or on every answer with `auth-always-set-cookie`.
//! - anything else, no answer within `--auth-timeout`, or no connection: 500 (nginx:
//!   "auth request unexpected status").

use std::cell::RefCell;
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use http::header::{HOST, SET_COOKIE, WWW_AUTHENTICATE};
use http::{HeaderMap, HeaderName, HeaderValue, Request, StatusCode};
use http_body_util::BodyExt as _;
use sluice_routing::ExternalAuth;

use crate::body::RequestBody;
use crate::context::Shared;
use crate::http::header_policy::{self, Fields, RequestField};
use crate::pipeline::route_policy::Answer;
use crate::snapshot::Snapshot;

/// How long a resolved auth service name is reused.
const DNS_TTL: Duration = Duration::from_secs(10);

/// The largest auth answer body read (to keep the connection reusable); larger ones close
/// it.
const MAX_AUTH_BODY: usize = 64 * 1024;

/// What the auth service decided.
pub(crate) enum Verdict {
    /// Go on upstream, with these fields added to the request; the service's
    /// `Set-Cookie` values for the response.
    Allow(Vec<(HeaderName, HeaderValue)>, Vec<HeaderValue>),
    /// Answer the client with this (401, 403 or a redirect to sign in).
    Deny(Answer),
    /// The auth service failed: answer with this status (500).
    Fail(StatusCode),
}

/// The request being authorised.
pub(crate) struct Original<'a, F> {
    pub(crate) method: &'a str,
    /// The request's fields.
    pub(crate) fields: F,
    /// `http` or `https`, as the client came.
    pub(crate) scheme: &'a str,
    pub(crate) host: &'a str,
    /// Path and query.
    pub(crate) uri: &'a str,
    pub(crate) client: IpAddr,
    /// The request's key in the auth cache (`auth-cache-key`), when the route has one.
    pub(crate) cache_key: Option<Vec<u8>>,
    /// `auth-proxy-set-headers` with their values for this request (empty: not sent).
    pub(crate) set_fields: Vec<(&'a HeaderName, Vec<u8>)>,
}

/// Asks the auth service about `original`.
pub(crate) async fn check<'a, F: Fields<'a> + Sync>(
    auth: &ExternalAuth,
    shared: &Shared,
    snapshot: &Snapshot,
    original: &Original<'a, F>,
) -> Verdict {
    // `auth-cache-key`: a kept answer decides as the service's would.
    let cache = auth.cache.as_ref().zip(original.cache_key.as_deref());
    let kept = cache.and_then(|(_, key)| shared.auth_answers.get(key, Instant::now()));
    let (status, headers) = match kept {
        Some(answer) => answer,
        None => {
            let asked =
                tokio::time::timeout(shared.auth_timeout, ask(auth, shared, snapshot, original));
            let (status, headers) = match asked.await {
                Ok(Ok(answer)) => answer,
                Ok(Err(error)) => {
                    tracing::warn!(url = %auth.url, %error, "auth service failed");
                    return Verdict::Fail(StatusCode::INTERNAL_SERVER_ERROR);
                }
                Err(_) => {
                    tracing::warn!(url = %auth.url, "auth service did not answer within --auth-timeout");
                    return Verdict::Fail(StatusCode::INTERNAL_SERVER_ERROR);
                }
            };
            if let Some((cache, key)) = cache
                && let Some(ttl) = cache
                    .ttl(status.as_u16())
                    .and_then(|ttl| crate::auth_cache::keep_for(&headers, ttl))
            {
                let kept = kept_fields(auth, &headers);
                shared
                    .auth_answers
                    .put(key, status, kept, Instant::now(), ttl);
            }
            (status, headers)
        }
    };
    // nginx `auth_request_set $auth_cookie $upstream_http_set_cookie`, whatever the status.
    let cookies: Vec<HeaderValue> = headers.get_all(SET_COOKIE).iter().cloned().collect();
    // A denial is nginx's own answer: `add_header` reaches it only with `always`.
    let denial_cookies = || {
        let cookies = if auth.always_set_cookie {
            cookies.clone()
        } else {
            Vec::new()
        };
        cookies.into_iter().map(|value| (SET_COOKIE, value))
    };
    match status.as_u16() {
        // Each listed field is set from the answer, or removed when the answer has none
        // (nginx `proxy_set_header` with an empty value): a client never smuggles it in.
        200..=299 => Verdict::Allow(
            auth.response_headers
                .iter()
                .map(|name| {
                    let value = headers.get(name).cloned();
                    (
                        name.clone(),
                        value.unwrap_or_else(|| HeaderValue::from_static("")),
                    )
                })
                .collect(),
            cookies,
        ),
        401 => match auth.signin_location(original.scheme, original.host, original.uri) {
            // ingress-nginx's sign-in location has `add_header Set-Cookie $auth_cookie`,
            // and 302 is one of its statuses.
            Some(location) => match HeaderValue::try_from(location) {
                Ok(location) => Verdict::Deny(Answer {
                    status: StatusCode::FOUND,
                    location: Some(location),
                    fields: cookies.iter().map(|v| (SET_COOKIE, v.clone())).collect(),
                    body: None,
                }),
                Err(_) => Verdict::Fail(StatusCode::INTERNAL_SERVER_ERROR),
            },
            None => Verdict::Deny(Answer {
                status: StatusCode::UNAUTHORIZED,
                location: None,
                fields: headers
                    .get(WWW_AUTHENTICATE)
                    .map(|v| (WWW_AUTHENTICATE, v.clone()))
                    .into_iter()
                    .chain(denial_cookies())
                    .collect(),
                body: None,
            }),
        },
        403 => Verdict::Deny(Answer {
            status: StatusCode::FORBIDDEN,
            location: None,
            fields: denial_cookies().collect(),
            body: None,
        }),
        other => {
            tracing::warn!(url = %auth.url, status = other, "auth service answered an unexpected status");
            Verdict::Fail(StatusCode::INTERNAL_SERVER_ERROR)
        }
    }
}

async fn ask<'a, F: Fields<'a> + Sync>(
    auth: &ExternalAuth,
    shared: &Shared,
    snapshot: &Snapshot,
    original: &Original<'a, F>,
) -> Result<(StatusCode, HeaderMap), String> {
    let tls = auth.url.scheme_str() == Some("https");
    let host = auth.url.host().unwrap_or("");
    let port = auth.url.port_u16().unwrap_or(if tls { 443 } else { 80 });
    let addr = resolve(host, port).await?;
    let request = subrequest(auth, original)?;
    let configs = match (tls, &snapshot.tls_clients) {
        (false, _) => None,
        (true, Some(clients)) => Some(clients.get(None, None)),
        (true, None) => return Err("no TLS configuration".to_owned()),
    };
    let server_name = rustls::pki_types::ServerName::try_from(host.to_owned()).ok();
    let upstreams = &shared.upstreams;
    let keepalive = auth.keepalive.as_ref();
    let response =
        crate::upstream::client::call(upstreams, addr, configs, server_name, request, keepalive)
            .await?;
    let (parts, body) = response.into_parts();
    // Read a small body to its end so the connection can carry the next check.
    let _ = http_body_util::Limited::new(body, MAX_AUTH_BODY)
        .collect()
        .await;
    Ok((parts.status, parts.headers))
}

/// The fields of an answer the check reads: `auth-response-headers` and
/// `WWW-Authenticate`.
fn kept_fields(auth: &ExternalAuth, headers: &HeaderMap) -> HeaderMap {
    let mut kept = HeaderMap::new();
    for name in auth.response_headers.iter().chain([&WWW_AUTHENTICATE]) {
        for value in headers.get_all(name) {
            kept.append(name.clone(), value.clone());
        }
    }
    kept
}

/// The auth request: the client's end-to-end fields, `Host` of the auth service, and
/// ingress-nginx's `X-Original-URL`, `X-Original-Method`, `X-Sent-From`, `X-Real-IP`,
/// `X-Forwarded-For`, `X-Auth-Request-Redirect`; no body.
fn subrequest<'a, F: Fields<'a>>(
    auth: &ExternalAuth,
    original: &Original<'a, F>,
) -> Result<Request<RequestBody>, String> {
    let mut builder = Request::builder()
        .method(auth.method.clone())
        .uri(auth.url.path_and_query().map_or("/", |p| p.as_str()));
    let headers = builder.headers_mut().ok_or("invalid auth request")?;
    for (name, value) in original.fields.iter() {
        let kind = header_policy::request_field(name);
        if matches!(kind, RequestField::Other | RequestField::Cookie)
            && let (Ok(name), Ok(value)) =
                (HeaderName::from_bytes(name), HeaderValue::from_bytes(value))
        {
            headers.append(name, value);
        }
    }
    let authority = auth.url.authority().map_or("", |a| a.as_str());
    let value = |s: &str| HeaderValue::try_from(s).map_err(|e| e.to_string());
    headers.insert(HOST, value(authority)?);
    let url = format!("{}://{}{}", original.scheme, original.host, original.uri);
    headers.insert("x-original-url", value(&url)?);
    headers.insert("x-original-method", value(original.method)?);
    headers.insert(
        "x-sent-from",
        HeaderValue::from_static("nginx-ingress-controller"),
    );
    let client = original.client.to_string();
    headers.insert("x-real-ip", value(&client)?);
    headers.insert("x-forwarded-for", value(&client)?);
    let redirect = auth.request_redirect.as_deref().unwrap_or(original.uri);
    headers.insert("x-auth-request-redirect", value(redirect)?);
    // `auth-proxy-set-headers` (nginx `proxy_set_header` in the auth location, after
    // ingress-nginx's own): set, or removed when empty.
    for (name, set) in &original.set_fields {
        if set.is_empty() {
            headers.remove(*name);
        } else {
            let set = HeaderValue::from_bytes(set).map_err(|e| e.to_string())?;
            headers.insert((*name).clone(), set);
        }
    }
    builder.body(RequestBody::Empty).map_err(|e| e.to_string())
}

/// The auth service's address (a literal, or a name looked up and kept for [`DNS_TTL`]).
async fn resolve(host: &str, port: u16) -> Result<SocketAddr, String> {
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    if let Ok(ip) = bare.parse::<IpAddr>() {
        return Ok(SocketAddr::new(ip, port));
    }
    thread_local! {
        static CACHE: RefCell<HashMap<(String, u16), (SocketAddr, Instant)>> =
            RefCell::new(HashMap::new());
    }
    let key = (host.to_owned(), port);
    let cached = CACHE.with_borrow(|cache| cache.get(&key).copied());
    if let Some((addr, at)) = cached
        && at.elapsed() < DNS_TTL
    {
        return Ok(addr);
    }
    let addr = tokio::net::lookup_host((host, port))
        .await
        .map_err(|e| format!("resolving {host}: {e}"))?
        .next()
        .ok_or_else(|| format!("{host} has no address"))?;
    CACHE.with_borrow_mut(|cache| {
        cache.insert(key, (addr, Instant::now()));
    });
    Ok(addr)
}

//! The policy stage: what a route's compiled [`Policy`] says about a request before it goes
//! upstream (answer it here, or let it through), and what it adds to the response.
//!
//! Pure: request facts in, a verdict out. The order is ingress-nginx's: nginx's trailing-slash
//! 301 (`--ingress-nginx-compat`), a route closed because
//! an access annotation cannot be honoured (503), source ranges (403),
//! the HTTPS redirect, a configured redirect, (Gateway API `RequestRedirect`), the app root
//! (302), then a CORS preflight answered by the proxy (204).

use std::net::IpAddr;
use std::time::{Duration, Instant};

use http::header::{
    ACCESS_CONTROL_ALLOW_CREDENTIALS, ACCESS_CONTROL_ALLOW_HEADERS, ACCESS_CONTROL_ALLOW_METHODS,
    ACCESS_CONTROL_ALLOW_ORIGIN, ACCESS_CONTROL_EXPOSE_HEADERS, ACCESS_CONTROL_MAX_AGE,
};
use http::{HeaderName, HeaderValue, StatusCode};
use sluice_routing::{Backend, Policy, Rewrite, RouteEntry};

use crate::context::{Shared, Upstreams};

/// What the policy stage needs to know of a request.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Request<'a> {
    /// The client arrived over TLS.
    pub(crate) tls: bool,
    /// The method.
    pub(crate) method: &'a [u8],
    /// The Host (or `:authority`) as received.
    pub(crate) host: &'a str,
    /// The path.
    pub(crate) path: &'a str,
    /// Path and query, as received.
    pub(crate) target: &'a str,
    /// The client's address.
    pub(crate) client: IpAddr,
    /// The `Origin` field, if any.
    pub(crate) origin: Option<&'a [u8]>,
    /// The `Access-Control-Request-Method` field: a CORS preflight when present.
    pub(crate) asked_method: Option<&'a [u8]>,
    /// The `Access-Control-Request-Headers` field of a preflight.
    pub(crate) asked_headers: Option<&'a [u8]>,
    /// The `User-Agent` field, read only when the route blocks some (`block-user-agents`).
    pub(crate) user_agent: Option<&'a [u8]>,
    /// The `Referer` field, read only when the route blocks some (`block-referers`).
    pub(crate) referer: Option<&'a [u8]>,
}

/// An answer the proxy gives itself.
#[derive(Debug)]
pub(crate) struct Answer {
    /// Its status.
    pub(crate) status: StatusCode,
    /// `Location`, for redirects.
    pub(crate) location: Option<HeaderValue>,
    /// Further fields (CORS on a preflight).
    pub(crate) fields: Vec<(HeaderName, HeaderValue)>,
    /// The body instead of the proxy's page for the status (a snippet's `return` text).
    pub(crate) body: Option<bytes::Bytes>,
}

impl Answer {
    pub(crate) fn status(status: StatusCode) -> Answer {
        Answer {
            status,
            location: None,
            fields: Vec::new(),
            body: None,
        }
    }

    /// A 302 to `location`.
    pub(crate) fn found(location: HeaderValue) -> Answer {
        Answer::redirect(302, location)
    }

    fn redirect(status: u16, location: HeaderValue) -> Answer {
        Answer {
            status: StatusCode::from_u16(status).unwrap_or(StatusCode::FOUND),
            location: Some(location),
            fields: Vec::new(),
            body: None,
        }
    }
}

/// Whether a request that passed [`answer`] is within the route's rate limits (requests
/// redirected or refused before never count, as nginx's `return` ends a request before
/// `limit_req` runs).
/// `Ok(Some(slot))`: a `limit-connections` count was taken, to release when the request is
/// over ([`crate::body::Completion`] does).
pub(crate) fn within_limits(
    policy: &Policy,
    shared: &Shared,
    client: IpAddr,
    now: Instant,
) -> Result<Option<usize>, Limited> {
    match &policy.rate_limit {
        None => Ok(None),
        Some(limit) if !shared.limiter.admit(limit, client, now) => Err(Limited::Rate),
        Some(limit) => shared
            .limiter
            .enter(limit, client)
            .map_err(|()| Limited::Connections),
    }
}

/// Which local limit refused a request: each has its own status (ingress-nginx's
/// `limit-req-status-code` and `limit-conn-status-code`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Limited {
    /// `limit-rps` / `limit-rpm` (nginx `limit_req`).
    Rate,
    /// `limit-connections` (nginx `limit_conn`).
    Connections,
}

/// Whether the source ranges admit `client` on their own, for nginx's `satisfy any`: an
/// allow list holds it and no deny entry does (a deny list alone admits nobody outright:
/// nginx's access module then declines, and authentication must pass).
pub(crate) fn source_range_allows(policy: &Policy, client: IpAddr) -> bool {
    !policy.allow.is_empty()
        && policy.allow.iter().any(|net| net.contains(client))
        && !policy.deny.iter().any(|net| net.contains(client))
}

/// Decides whether the proxy answers the request itself (`Some`) or lets it through.
pub(crate) fn answer(policy: &Policy, request: &Request<'_>) -> Option<Answer> {
    // `--ingress-nginx-compat`: nginx's 301 for a request one `/` short of a location
    // (`auto_redirect`), chosen with the location, before any phase of it runs. The Location
    // is absolute without a port, as ingress-nginx's `port_in_redirect off` writes it.
    if let Some(to) = &policy.www_redirect {
        // ingress-nginx's from/to-www server: `return 308 $redirect_to`, built by
        // `ngx_srv_redirect.lua` as scheme, host, port, and the request URI without its last
        // `/`. The port is the one the client named (ingress-nginx's listens on 80 and 443).
        let scheme = if request.tls { "https" } else { "http" };
        let port = request
            .host
            .rsplit_once(':')
            .filter(|(_, port)| !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit()))
            .map_or("", |(_, port)| port);
        let colon = if port.is_empty() { "" } else { ":" };
        let uri = request.target.strip_suffix('/').unwrap_or(request.target);
        let location = format!("{scheme}://{to}{colon}{port}{uri}");
        return Some(match HeaderValue::try_from(location) {
            Ok(location) => Answer::redirect(308, location),
            Err(_) => Answer::status(StatusCode::BAD_REQUEST),
        });
    }
    if policy.trailing_slash_redirect {
        let scheme = if request.tls { "https" } else { "http" };
        let host = host_without_port(request.host);
        let query = request
            .target
            .split_once('?')
            .map_or(String::new(), |(_, q)| format!("?{q}"));
        let path = sluice_routing::escape_path(request.path);
        let location = format!("{scheme}://{host}{path}/{query}");
        return Some(match HeaderValue::try_from(location) {
            Ok(location) => Answer::redirect(301, location),
            Err(_) => Answer::status(StatusCode::BAD_REQUEST),
        });
    }
    // An access restriction sluice cannot honour: closed to everyone (ingress-nginx's 503
    // for a denied location).
    if policy.fail_closed {
        return Some(Answer::status(StatusCode::SERVICE_UNAVAILABLE));
    }
    // The ConfigMap's `block-user-agents` / `block-referers`: ingress-nginx's server-level
    // `if ($block_ua) { return 403; }`, before the location's phases. A request without the
    // field matches nothing (nginx's `map` gives its default, not blocked).
    let blocked = |list: &[sluice_routing::ValueMatch], value: Option<&[u8]>| {
        value.is_some_and(|value| list.iter().any(|m| m.matches(value)))
    };
    if blocked(&policy.block_user_agents, request.user_agent)
        || blocked(&policy.block_referers, request.referer)
    {
        return Some(Answer::status(StatusCode::FORBIDDEN));
    }
    // nginx's order of `deny` before `allow`, then `deny all` when an allow list exists.
    // With `satisfy: any` and authentication, the authentication step decides instead.
    let any_of = policy.satisfy_any
        && (policy.basic_auth.is_some() || policy.digest_auth.is_some() || policy.auth.is_some());
    if !any_of
        && (policy.deny.iter().any(|net| net.contains(request.client))
            || (!policy.allow.is_empty()
                && !policy.allow.iter().any(|n| n.contains(request.client))))
    {
        return Some(Answer::status(StatusCode::FORBIDDEN));
    }
    if let Some(code) = policy.https_redirect
        && !request.tls
    {
        // ingress-nginx: `return 308 https://$redirect_host$request_uri` (host without port),
        // the URI's final `/` dropped unless `preserve-trailing-slash` (`lua_ingress.lua`).
        let host = host_without_port(request.host);
        let target = match policy.preserve_trailing_slash {
            true => request.target,
            false => request.target.strip_suffix('/').unwrap_or(request.target),
        };
        let location = format!("https://{host}{target}");
        if let Ok(location) = HeaderValue::try_from(location) {
            return Some(Answer::redirect(code, location));
        }
    }
    if let Some(redirect) = &policy.redirect {
        return Some(Answer::redirect(redirect.status, redirect.location.clone()));
    }
    if let Some(redirect) = &policy.request_redirect {
        // Gateway API `RequestRedirect`: the request's URL with the filter's parts replaced;
        // the scheme is the listener's, the host the request's without its port.
        let scheme = if request.tls { "https" } else { "http" };
        let query = request.target.split_once('?').map_or("", |(_, q)| q);
        let host = host_without_port(request.host);
        let location = redirect.location(scheme, host, request.path, query);
        return Some(match HeaderValue::try_from(location) {
            Ok(location) => Answer::redirect(redirect.status, location),
            Err(_) => Answer::status(StatusCode::INTERNAL_SERVER_ERROR),
        });
    }
    if let Some(root) = &policy.app_root
        && request.path == "/"
    {
        return Some(Answer::redirect(302, root.clone()));
    }
    if let Some(cors) = &policy.cors
        && request.method == b"OPTIONS"
        && request.asked_method.is_some()
    {
        // ingress-nginx answers every OPTIONS of a CORS location with 204 and the CORS
        // fields; a preflight from an origin not allowed gets no Allow-Origin.
        let mut answer = Answer::status(StatusCode::NO_CONTENT);
        answer.fields = cors_fields(policy, request.origin, Some(request));
        answer
            .fields
            .push((ACCESS_CONTROL_MAX_AGE, HeaderValue::from(cors.max_age)));
        return Some(answer);
    }
    None
}

/// The fields the policy sets on a response (replacing the upstream's of the same name):
/// CORS for an allowed origin, then the configured response fields.
pub(crate) fn response_fields(
    policy: &Policy,
    origin: Option<&[u8]>,
) -> Vec<(HeaderName, HeaderValue)> {
    let mut fields = cors_fields(policy, origin, None);
    fields.extend(policy.response_headers.iter().cloned());
    fields
}

/// The CORS fields for a request from `origin` (none when CORS is off or the origin is
/// not allowed); `preflight`: what a preflight asks for, answered where the policy allows
/// `*` with credentials.
fn cors_fields(
    policy: &Policy,
    origin: Option<&[u8]>,
    preflight: Option<&Request<'_>>,
) -> Vec<(HeaderName, HeaderValue)> {
    let (Some(cors), Some(origin)) = (&policy.cors, origin) else {
        return Vec::new();
    };
    let Some(allowed) = std::str::from_utf8(origin)
        .ok()
        .and_then(|origin| cors.allow_origin(origin))
        .and_then(|allowed| HeaderValue::try_from(allowed).ok())
    else {
        return Vec::new();
    };
    let mut fields = vec![(ACCESS_CONTROL_ALLOW_ORIGIN, allowed)];
    if let Some(methods) = cors.allow_methods_for(preflight.and_then(|p| p.asked_method)) {
        fields.push((ACCESS_CONTROL_ALLOW_METHODS, methods));
    }
    if let Some(headers) = cors.allow_headers_for(preflight.and_then(|p| p.asked_headers)) {
        fields.push((ACCESS_CONTROL_ALLOW_HEADERS, headers));
    }
    if cors.allow_credentials {
        fields.push((
            ACCESS_CONTROL_ALLOW_CREDENTIALS,
            HeaderValue::from_static("true"),
        ));
    }
    if let Some(expose) = &cors.expose_headers {
        fields.push((ACCESS_CONTROL_EXPOSE_HEADERS, expose.clone()));
    }
    fields
}

/// The upstream settings of a route: its policy's timeouts where it sets them.
pub(crate) fn upstreams(shared: &Upstreams, policy: &Policy) -> Upstreams {
    Upstreams {
        connect_timeout: policy.connect_timeout.unwrap_or(shared.connect_timeout),
        send_timeout: policy.send_timeout.unwrap_or(shared.send_timeout),
        read_timeout: policy.read_timeout.unwrap_or(shared.read_timeout),
        ..*shared
    }
}

/// How long to wait for a response head: the route's `proxy-read-timeout`, else its
/// Gateway API `timeouts.request` (which bounds the whole request on top, see
/// `upstream::within`), else `--upstream-header-timeout`.
pub(crate) fn header_timeout(policy: &Policy, default: Duration) -> Duration {
    policy
        .read_timeout
        .or(policy.request_timeout)
        .unwrap_or(default)
}

/// The backend that answers instead of the route's for upstream status `status`
/// (`custom-http-errors` with `default-backend`), if it has a ready endpoint.
pub(crate) fn intercept(entry: &RouteEntry, status: u16) -> Option<&Backend> {
    entry
        .policy
        .custom_http_errors
        .binary_search(&status)
        .ok()?;
    entry
        .fallback
        .as_deref()
        .filter(|backend| !backend.endpoints.is_empty())
}

/// The fields ingress-nginx's custom error pages receive (the "custom errors" convention
/// of its default backend): `X-Code`, `X-Format`, `X-Original-URI`, `X-Namespace`,
/// `X-Ingress-Name`, `X-Service-Name`, `X-Service-Port`.
pub(crate) fn error_fields(
    status: u16,
    accept: Option<&[u8]>,
    original_uri: &str,
    entry: &RouteEntry,
) -> Vec<(HeaderName, HeaderValue)> {
    let value = |text: &str| HeaderValue::try_from(text).ok();
    let service = &entry.backend.service;
    let fields = [
        ("x-code", value(&status.to_string())),
        (
            "x-format",
            accept
                .and_then(|a| HeaderValue::from_bytes(a).ok())
                .or(value("text/html")),
        ),
        ("x-original-uri", value(original_uri)),
        ("x-namespace", value(&entry.source.namespace)),
        ("x-ingress-name", value(&entry.source.name)),
        ("x-service-name", value(&service.name)),
        ("x-service-port", value(&service.port.to_string())),
    ];
    fields
        .into_iter()
        .filter_map(|(name, value)| Some((HeaderName::from_static(name), value?)))
        .collect()
}

/// What `rewrite-target` makes of a request.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Rewritten {
    /// Send this target (path and query) upstream instead.
    Target(String),
    /// nginx answers a rewrite to an `http(s)://` URL with a 302 redirect.
    Redirect(HeaderValue),
}

/// Applies the route's `rewrite-target` to `path` (the normalised request path) and keeps
/// `query`; `None` when the route has none or its path does not match (nginx then leaves the
/// URI alone). The query is appended with `?`, or with `&` when the target brings its own
/// (nginx's `rewrite` rule). The rewritten path is escaped as nginx escapes a rewritten `$uri`
/// for `proxy_pass`.
pub(crate) fn rewrite(
    rewrite: Option<&Rewrite>,
    path: &str,
    query: Option<&str>,
) -> Option<Rewritten> {
    let rewritten = rewrite?.apply(path)?;
    if rewritten.starts_with("http://") || rewritten.starts_with("https://") {
        let mut out = rewritten;
        if let Some(query) = query.filter(|q| !q.is_empty()) {
            out.push(if out.contains('?') { '&' } else { '?' });
            out.push_str(query);
        }
        return HeaderValue::try_from(out).ok().map(Rewritten::Redirect);
    }
    // The target's own query (after a literal `?` in it) is kept as written.
    let (target_path, target_query) = rewritten
        .split_once('?')
        .map_or((rewritten.as_str(), None), |(p, q)| (p, Some(q)));
    let mut out = sluice_routing::escape_path(target_path).into_owned();
    if let Some(target_query) = target_query {
        out.push('?');
        out.push_str(target_query);
    }
    if let Some(query) = query.filter(|q| !q.is_empty()) {
        out.push(if target_query.is_some() { '&' } else { '?' });
        out.push_str(query);
    }
    Some(Rewritten::Target(out))
}

/// The path and query sent upstream instead of the request's target: Gateway API
/// `URLRewrite.path` (the query kept) when the route has one, else `rewrite-target`
/// ([`rewrite`]); `None` when neither changes it, and the client's target goes upstream as
/// it was sent. `path` is the normalised request path the route matched.
pub(crate) fn upstream_target(
    entry: &RouteEntry,
    path: &str,
    query: Option<&str>,
) -> Option<Rewritten> {
    let Some(path_rewrite) = &entry.policy.path_rewrite else {
        return rewrite(entry.rewrite.as_ref(), path, query);
    };
    let mut out = sluice_routing::escape_path(&path_rewrite.apply(path)).into_owned();
    if let Some(query) = query.filter(|q| !q.is_empty()) {
        out.push('?');
        out.push_str(query);
    }
    Some(Rewritten::Target(out))
}

/// `host` without a `:port` (IPv6 literals keep their brackets).
fn host_without_port(host: &str) -> &str {
    match host.rfind(':') {
        Some(at) if !host[at..].contains(']') => &host[..at],
        _ => host,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_routing::{Cors, OriginPattern, Redirect, parse_cidr};

    fn request<'a>() -> Request<'a> {
        Request {
            tls: false,
            method: b"GET",
            host: "shop.example:8080",
            path: "/a",
            target: "/a?x=1",
            client: "10.0.0.7".parse().unwrap(),
            origin: None,
            asked_method: None,
            asked_headers: None,
            user_agent: None,
            referer: None,
        }
    }

    #[test]
    fn rewrite_target_uses_captures_and_keeps_the_query_like_nginx_rewrite() {
        let rule = |path: &str, target: &str| Rewrite {
            regex: regex::RegexBuilder::new(&format!("^(?:{path})"))
                .case_insensitive(true)
                .build()
                .unwrap(),
            target: target.to_owned(),
        };
        // ingress-nginx's documented example: path /something(/|$)(.*), target /$2.
        let r = rule("/something(/|$)(.*)", "/$2");
        let got = |t: &str| {
            let (path, query) = t.split_once('?').map_or((t, None), |(p, q)| (p, Some(q)));
            rewrite(Some(&r), path, query)
        };
        assert_eq!(got("/something"), Some(Rewritten::Target("/".into())));
        assert_eq!(got("/something/"), Some(Rewritten::Target("/".into())));
        assert_eq!(
            got("/something/new"),
            Some(Rewritten::Target("/new".into()))
        );
        assert_eq!(
            got("/SOMETHING/new?a=1"),
            Some(Rewritten::Target("/new?a=1".into()))
        );
        assert_eq!(got("/other"), None);
        // The captures come from the normalised path and are escaped again for the wire,
        // as nginx escapes a rewritten `$uri` for `proxy_pass`.
        assert_eq!(
            got("/something/a b?c=1"),
            Some(Rewritten::Target("/a%20b?c=1".into()))
        );
        // Without captures the whole path is replaced.
        let r = rule("/api", "/");
        assert_eq!(
            rewrite(Some(&r), "/api/v1/x", None),
            Some(Rewritten::Target("/".into()))
        );
        let r = rule("/q", "/new?x=1");
        assert_eq!(
            rewrite(Some(&r), "/q", Some("y=2")),
            Some(Rewritten::Target("/new?x=1&y=2".into()))
        );
        let r = rule("/(.*)", "https://elsewhere.example/$1");
        assert!(matches!(
            rewrite(Some(&r), "/a", None),
            Some(Rewritten::Redirect(_))
        ));
        assert_eq!(rewrite(None, "/a", None), None);
    }

    #[test]
    fn route_timeouts_override_the_flags_proxy_connect_send_read_timeout() {
        let shared = Upstreams {
            pool: crate::backend::pool::PoolConfig::new(
                crate::backend::pool::PoolId::next(),
                std::time::Duration::from_secs(60),
            ),
            connect_timeout: std::time::Duration::from_secs(5),
            send_timeout: std::time::Duration::from_secs(60),
            read_timeout: std::time::Duration::from_secs(60),
        };
        let second = std::time::Duration::from_secs(1);
        let policy = Policy {
            connect_timeout: Some(second),
            send_timeout: Some(2 * second),
            ..Policy::default()
        };
        let got = upstreams(&shared, &policy);
        assert_eq!(got.connect_timeout, second);
        assert_eq!(got.send_timeout, 2 * second);
        assert_eq!(got.read_timeout, shared.read_timeout);
        let untouched = upstreams(&shared, &Policy::default());
        assert_eq!(untouched.connect_timeout, shared.connect_timeout);
    }

    #[test]
    fn nothing_to_do_without_a_policy() {
        assert!(answer(&Policy::default(), &request()).is_none());
    }

    #[test]
    fn source_ranges_deny_before_allow_like_nginx() {
        let mut policy = Policy {
            allow: vec![parse_cidr("10.0.0.0/8").unwrap()],
            ..Policy::default()
        };
        assert!(answer(&policy, &request()).is_none());
        policy.deny = vec![parse_cidr("10.0.0.7").unwrap()];
        assert_eq!(answer(&policy, &request()).unwrap().status, 403);
        policy.deny.clear();
        policy.allow = vec![parse_cidr("192.168.0.0/16").unwrap()];
        assert_eq!(answer(&policy, &request()).unwrap().status, 403);
    }

    #[test]
    fn ssl_redirect_is_308_to_the_same_uri_without_the_port() {
        let policy = Policy {
            https_redirect: Some(308),
            ..Policy::default()
        };
        let got = answer(&policy, &request()).unwrap();
        assert_eq!(got.status, 308);
        assert_eq!(got.location.unwrap(), "https://shop.example/a?x=1");
        let tls = Request {
            tls: true,
            ..request()
        };
        assert!(answer(&policy, &tls).is_none());
        assert_eq!(host_without_port("[::1]:80"), "[::1]");
        assert_eq!(host_without_port("[::1]"), "[::1]");
    }

    #[test]
    fn redirects_and_app_root() {
        let policy = Policy {
            redirect: Some(Redirect {
                status: 301,
                location: HeaderValue::from_static("https://new.example/"),
            }),
            ..Policy::default()
        };
        let got = answer(&policy, &request()).unwrap();
        assert_eq!(
            (got.status.as_u16(), got.location.unwrap()),
            (301, HeaderValue::from_static("https://new.example/"))
        );
        let policy = Policy {
            app_root: Some(HeaderValue::from_static("/app")),
            ..Policy::default()
        };
        assert!(answer(&policy, &request()).is_none());
        let root = Request {
            path: "/",
            ..request()
        };
        let got = answer(&policy, &root).unwrap();
        assert_eq!(
            (got.status.as_u16(), got.location.unwrap()),
            (302, HeaderValue::from_static("/app"))
        );
    }

    #[test]
    fn cors_preflight_answered_with_204_like_ingress_nginx() {
        let policy = Policy {
            cors: Some(Cors {
                origins: vec![OriginPattern::Exact("https://app.example".into())],
                allow_methods: Some(HeaderValue::from_static("GET, POST")),
                allow_headers: Some(HeaderValue::from_static("X-A")),
                expose_headers: None,
                allow_credentials: true,
                max_age: 600,
            }),
            ..Policy::default()
        };
        let preflight = Request {
            method: b"OPTIONS",
            origin: Some(b"https://app.example"),
            asked_method: Some(b"POST"),
            ..request()
        };
        let got = answer(&policy, &preflight).unwrap();
        assert_eq!(got.status, 204);
        let names: Vec<&str> = got.fields.iter().map(|(n, _)| n.as_str()).collect();
        assert!(names.contains(&"access-control-allow-origin"));
        assert!(names.contains(&"access-control-max-age"));
        let fields = response_fields(&policy, Some(b"https://evil.example"));
        assert!(fields.is_empty());
        let fields = response_fields(&policy, Some(b"https://app.example"));
        assert_eq!(fields[0].1, "https://app.example");
        assert!(answer(&policy, &request()).is_none());
    }
}

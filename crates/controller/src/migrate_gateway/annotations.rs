//! What the annotations of one Ingress become in Gateway API: route filters, timeouts,
//! retry, the listeners' redirect, backend TLS; and, for the rest, why they cannot be
//! carried. Semantics and defaults are ingress-nginx's (docs "Annotations"), as sluice's
//! Ingress compiler reads them; `check_annotations` (the compiler's own checker) decides
//! which values sluice would refuse, so a value sluice ignores is not carried either.

use sluice_routing::gateway::{
    HttpCorsFilter, HttpHeader, HttpRequestMirrorFilter, HttpRequestRedirectFilter, HttpRouteRetry,
    HttpRouteTimeouts,
};
use sluice_routing::{NGINX_PREFIX, Reason, SLUICE_PREFIX, check_annotations};
use std::collections::BTreeMap;

/// Something of an Ingress that the emitted objects do not say, and why.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct NotCarried {
    /// The annotation key (as written) or the field (`spec.rules[0].http.paths[1]`).
    pub what: String,
    /// Why, and what to do instead where there is something.
    pub why: String,
}

/// The backend protocol (`backend-protocol`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) enum BackendProtocol {
    /// Plain HTTP/1.1 (the default).
    #[default]
    Http,
    /// HTTPS: a BackendTLSPolicy.
    Https,
    /// gRPC: a GRPCRoute.
    Grpc,
    /// gRPC over TLS: a GRPCRoute and a BackendTLSPolicy.
    Grpcs,
}

/// How the Gateway checks an HTTPS backend (`proxy-ssl-*`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct BackendTls {
    /// `proxy-ssl-secret` (`namespace/name` or `name`), when `proxy-ssl-verify: on`: the
    /// ConfigMap of the same name is to hold its `ca.crt`.
    pub ca: Option<(Option<String>, String)>,
    /// `proxy-ssl-name`.
    pub hostname: Option<String>,
}

/// One Ingress's annotations, read for Gateway API.
#[derive(Clone, Debug, Default)]
pub(super) struct Settings {
    /// `permanent-redirect`/`temporal-redirect`: every rule redirects.
    pub redirect: Option<HttpRequestRedirectFilter>,
    /// `app-root`.
    pub app_root: Option<String>,
    /// `rewrite-target` (applied per path by the caller).
    pub rewrite_target: Option<String>,
    /// `use-regex: "true"`.
    pub use_regex: bool,
    /// `ssl-redirect` (default true: TLS hosts redirect HTTP to HTTPS).
    pub ssl_redirect: bool,
    /// `force-ssl-redirect`.
    pub force_ssl_redirect: bool,
    /// `upstream-vhost`: `URLRewrite.hostname`.
    pub upstream_vhost: Option<String>,
    /// `RequestHeaderModifier.set`: `x-forwarded-prefix`, `sluice.dev/request-headers`.
    pub request_set: Vec<HttpHeader>,
    /// `ResponseHeaderModifier.set`: `sluice.dev/response-headers`.
    pub response_set: Vec<HttpHeader>,
    /// `enable-cors` and `cors-*`.
    pub cors: Option<HttpCorsFilter>,
    /// `proxy-read-timeout`/`proxy-send-timeout`.
    pub timeouts: Option<HttpRouteTimeouts>,
    /// `proxy-next-upstream-tries`.
    pub retry: Option<HttpRouteRetry>,
    /// `mirror-target`.
    pub mirror: Option<HttpRequestMirrorFilter>,
    /// `backend-protocol`.
    pub protocol: BackendProtocol,
    /// `proxy-ssl-*` (with HTTPS/GRPCS).
    pub backend_tls: BackendTls,
    /// `sluice.dev/compression`, kept as that annotation on the route.
    pub compression: Option<String>,
    /// Keys that restrict who gets an answer and have no Gateway API form.
    pub restrictions: Vec<String>,
    /// `key: what it became`.
    pub carried: Vec<String>,
    /// What has no Gateway API form (or a value sluice refuses).
    pub not_carried: Vec<NotCarried>,
}

/// Keys that restrict access: left out, the route would answer everyone.
const ACCESS_KEYS: &[(&str, &str)] = &[
    ("whitelist-source-range", "source ranges"),
    ("allowlist-source-range", "source ranges"),
    ("denylist-source-range", "source ranges"),
    ("auth-type", "basic/digest auth"),
    ("auth-secret", "basic/digest auth"),
    ("auth-secret-type", "basic/digest auth"),
    ("auth-realm", "basic/digest auth"),
    ("auth-url", "external auth (auth-url)"),
    ("auth-method", "external auth (auth-url)"),
    ("auth-signin", "external auth (auth-url)"),
    ("auth-signin-redirect-param", "external auth (auth-url)"),
    ("auth-response-headers", "external auth (auth-url)"),
    ("auth-request-redirect", "external auth (auth-url)"),
    ("auth-cache-key", "external auth (auth-url)"),
    ("auth-cache-duration", "external auth (auth-url)"),
    ("auth-always-set-cookie", "external auth (auth-url)"),
    ("satisfy", "external auth (auth-url)"),
    ("auth-tls-secret", "client certificates (auth-tls-*)"),
    ("auth-tls-verify-client", "client certificates (auth-tls-*)"),
    ("auth-tls-verify-depth", "client certificates (auth-tls-*)"),
    ("auth-tls-error-page", "client certificates (auth-tls-*)"),
    (
        "auth-tls-pass-certificate-to-upstream",
        "client certificates (auth-tls-*)",
    ),
    ("auth-tls-match-cn", "client certificates (auth-tls-*)"),
];

/// Keys whose meaning the caller carries (paths, canaries).
const CALLER_KEYS: &[&str] = &[
    "canary",
    "canary-by-header",
    "canary-by-header-value",
    "canary-by-header-pattern",
    "canary-by-cookie",
    "canary-weight",
    "canary-weight-total",
];

/// Why a known key without a Gateway API form is not carried.
fn no_form(name: &str) -> &'static str {
    match name {
        "limit-rps"
        | "limit-rpm"
        | "limit-connections"
        | "limit-burst-multiplier"
        | "limit-allowlist"
        | "limit-whitelist"
        | "global-rate-limit"
        | "global-rate-limit-window"
        | "global-rate-limit-key"
        | "global-rate-limit-ignored-cidrs"
        | "limit-rate"
        | "limit-rate-after" => {
            "rate limits have no Gateway API form: requests are no longer limited"
        }
        "affinity"
        | "affinity-mode"
        | "session-cookie-name"
        | "session-cookie-path"
        | "session-cookie-domain"
        | "session-cookie-samesite"
        | "session-cookie-secure"
        | "session-cookie-max-age"
        | "session-cookie-expires"
        | "session-cookie-change-on-failure"
        | "session-cookie-conditional-samesite-none" => {
            "cookie affinity is HTTPRoute sessionPersistence (experimental), which sluice does \
             not serve: requests are balanced without affinity"
        }
        "proxy-body-size" => "no Gateway API form for a request body limit",
        "proxy-connect-timeout" => "no Gateway API form for a connect timeout",
        "custom-http-errors" | "default-backend" => "no Gateway API form for error pages",
        "server-alias" => "add the alias to the HTTPRoute's hostnames",
        "from-to-www-redirect" => "add a redirect HTTPRoute for the www. host",
        "ssl-passthrough" => "use a TLS listener in Passthrough mode with a TLSRoute",
        "upstream-hash-by" | "load-balance" => "no Gateway API form for the balancing algorithm",
        "proxy-next-upstream-timeout" => "no Gateway API form for a retry deadline",
        _ => "no Gateway API form",
    }
}

impl Settings {
    fn carry(&mut self, key: &str, how: impl Into<String>) {
        self.carried.push(format!("{key}: {}", how.into()));
    }

    fn drop(&mut self, key: &str, why: impl Into<String>) {
        self.not_carried.push(NotCarried {
            what: key.to_owned(),
            why: why.into(),
        });
    }
}

/// Reads `annotations` (both prefixes; `sluice.dev/` wins, as in sluice).
pub(super) fn read(annotations: &BTreeMap<String, String>) -> Settings {
    let mut s = Settings {
        ssl_redirect: true,
        ..Settings::default()
    };
    // What sluice itself refuses (invalid values, unsupported keys, snippets).
    let refused: BTreeMap<String, (Reason, String)> = check_annotations(annotations)
        .problems
        .into_iter()
        .map(|(key, reason, why)| (key, (reason, why)))
        .collect();
    // name -> full key in effect.
    let mut keys: BTreeMap<&str, &str> = BTreeMap::new();
    for key in annotations.keys() {
        if let Some(name) = key.strip_prefix(SLUICE_PREFIX) {
            keys.insert(name, key);
        } else if let Some(name) = key.strip_prefix(NGINX_PREFIX) {
            if annotations.contains_key(&format!("{SLUICE_PREFIX}{name}")) {
                s.drop(key, format!("{SLUICE_PREFIX}{name} is also set and wins"));
            } else {
                keys.insert(name, key);
            }
        }
    }
    let mut skip: Vec<&str> = Vec::new();
    for (&name, &key) in &keys {
        if let Some((_, label)) = ACCESS_KEYS.iter().find(|(k, _)| *k == name) {
            s.restrictions.push(key.to_owned());
            s.drop(
                key,
                format!(
                    "{label} restrict access and have no Gateway API form: emitted as is, the \
                     route would answer everyone"
                ),
            );
            skip.push(name);
        } else if let Some((reason, why)) = refused.get(key)
            && !CALLER_KEYS.contains(&name)
        {
            s.drop(
                key,
                format!(
                    "sluice does not apply it either ({}): {why}",
                    reason.as_str()
                ),
            );
            skip.push(name);
        }
    }
    keys.retain(|name, _| !skip.contains(name));
    let value = |name: &str| {
        keys.get(name)
            .and_then(|k| annotations.get(*k))
            .map(|v| v.trim())
    };

    for (&name, &key) in &keys {
        let v = value(name).unwrap_or("");
        match name {
            "ssl-redirect" => {
                s.ssl_redirect = v == "true";
                s.carry(
                    key,
                    "a redirect HTTPRoute on the HTTP listener for TLS hosts",
                );
            }
            "force-ssl-redirect" => {
                s.force_ssl_redirect = v == "true";
                s.carry(key, "a redirect HTTPRoute on the HTTP listener");
            }
            "permanent-redirect"
            | "temporal-redirect"
            | "permanent-redirect-code"
            | "temporal-redirect-code" => {} // below, together
            "app-root" => {
                s.app_root = Some(v.to_owned());
                s.carry(key, "an Exact / rule with RequestRedirect (302)");
            }
            "rewrite-target" => s.rewrite_target = Some(v.to_owned()), // per path
            "use-regex" => {
                s.use_regex = v == "true";
                s.carry(key, "RegularExpression path matches");
            }
            "upstream-vhost" => {
                if is_precise_hostname(v) {
                    s.upstream_vhost = Some(v.to_owned());
                    s.carry(key, "URLRewrite hostname");
                } else {
                    s.drop(
                        key,
                        format!(
                            "{v:?} is not a host name without port (URLRewrite.hostname \
                             allows only that)"
                        ),
                    );
                }
            }
            "x-forwarded-prefix" => {
                s.request_set.push(HttpHeader {
                    name: "X-Forwarded-Prefix".into(),
                    value: v.to_owned(),
                });
                s.carry(key, "RequestHeaderModifier set X-Forwarded-Prefix");
            }
            "request-headers" | "response-headers" if key.starts_with(SLUICE_PREFIX) => {
                let fields = header_lines(v);
                if name == "request-headers" {
                    s.request_set.extend(fields);
                    s.carry(key, "RequestHeaderModifier set");
                } else {
                    s.response_set.extend(fields);
                    s.carry(key, "ResponseHeaderModifier set");
                }
            }
            "compression" if key.starts_with(SLUICE_PREFIX) => {
                s.compression = Some(v.to_owned());
                s.carry(
                    key,
                    "the same annotation on the HTTPRoute (sluice reads it there)",
                );
            }
            "enable-cors"
            | "cors-allow-origin"
            | "cors-allow-methods"
            | "cors-allow-headers"
            | "cors-expose-headers"
            | "cors-allow-credentials"
            | "cors-max-age" => {
                if value("enable-cors") == Some("true") {
                    s.carry(key, "CORS filter");
                }
            }
            "proxy-read-timeout" | "proxy-send-timeout" => {} // below, together
            "proxy-next-upstream-tries" | "proxy-next-upstream" => {} // below, together
            "backend-protocol"
            | "proxy-ssl-secret"
            | "proxy-ssl-verify"
            | "proxy-ssl-name"
            | "proxy-ssl-server-name" => {} // below, together
            "mirror-target" => match mirror(v) {
                Ok(m) => {
                    s.mirror = Some(m);
                    s.carry(key, "RequestMirror filter");
                }
                Err(why) => s.drop(key, why),
            },
            "mirror-host" => s.drop(
                key,
                "RequestMirror sends copies with the request's Host: no Gateway API form",
            ),
            "mirror-request-body" => s.drop(key, "no Gateway API form"),
            _ if CALLER_KEYS.contains(&name) => {}
            _ => s.drop(key, no_form(name)),
        }
    }

    redirects(&mut s, &keys, annotations);
    if value("enable-cors") == Some("true") {
        s.cors = Some(cors(&value));
    }
    timeouts(&mut s, &keys, annotations);
    retry(&mut s, &keys, annotations);
    backend_protocol(&mut s, &keys, annotations);
    s.carried.sort();
    s.not_carried.sort_by(|a, b| a.what.cmp(&b.what));
    s
}

type Keys<'a> = BTreeMap<&'a str, &'a str>;

fn get<'a>(
    keys: &Keys<'_>,
    annotations: &'a BTreeMap<String, String>,
    name: &str,
) -> Option<(String, &'a str)> {
    let key = keys.get(name)?;
    Some(((*key).to_owned(), annotations.get(*key)?.trim()))
}

/// `temporal-redirect` wins over `permanent-redirect`, as in ingress-nginx.
fn redirects(s: &mut Settings, keys: &Keys<'_>, annotations: &BTreeMap<String, String>) {
    let temporal = get(keys, annotations, "temporal-redirect");
    let permanent = get(keys, annotations, "permanent-redirect");
    let (url, code_key, default, other) = match (&temporal, &permanent) {
        (Some(t), _) => (t, "temporal-redirect-code", 302, permanent.as_ref()),
        (None, Some(p)) => (p, "permanent-redirect-code", 301, None),
        (None, None) => return,
    };
    if let Some((key, _)) = other {
        s.drop(key, "temporal-redirect is also set and takes precedence");
    }
    let code = match get(keys, annotations, code_key) {
        None => Ok(default),
        Some((key, v)) => match v.parse::<i32>() {
            Ok(c @ (301 | 302 | 303 | 307 | 308)) => {
                s.carry(&key, format!("RequestRedirect statusCode {c}"));
                Ok(c)
            }
            _ => Err((key, v)),
        },
    };
    let code = match code {
        Ok(code) => code,
        Err((key, v)) => {
            s.drop(
                &key,
                format!("{v:?}: RequestRedirect allows only 301, 302, 303, 307, 308"),
            );
            s.drop(&url.0, format!("its code {v} has no Gateway API form"));
            return;
        }
    };
    match redirect_filter(url.1, code) {
        Ok(filter) => {
            s.carry(&url.0, format!("RequestRedirect ({code}) on every rule"));
            s.redirect = Some(filter);
        }
        Err(why) => s.drop(&url.0, why),
    }
}

/// A `RequestRedirect` that answers exactly `url` (scheme, host, port, path).
pub(super) fn redirect_filter(url: &str, code: i32) -> Result<HttpRequestRedirectFilter, String> {
    let (scheme, rest) = url
        .split_once("://")
        .filter(|(s, _)| matches!(*s, "http" | "https"))
        .ok_or_else(|| format!("{url:?} is not an http(s) URL: RequestRedirect needs one"))?;
    if rest.contains(['?', '#', '$']) {
        return Err(format!(
            "{url:?} has a query, fragment or nginx variable: RequestRedirect cannot say it"
        ));
    }
    let (authority, path) = match rest.find('/') {
        Some(at) => (&rest[..at], &rest[at..]),
        None => (rest, "/"),
    };
    let (host, port) = match authority.rsplit_once(':') {
        Some((h, p)) => match p.parse::<i32>() {
            Ok(p) if (1..=65535).contains(&p) => (h, Some(p)),
            _ => return Err(format!("{url:?} has an invalid port")),
        },
        None => (authority, None),
    };
    if !is_precise_hostname(host) {
        return Err(format!(
            "{url:?}: {host:?} is not a host name RequestRedirect allows"
        ));
    }
    Ok(HttpRequestRedirectFilter {
        scheme: Some(scheme.to_owned()),
        hostname: Some(host.to_ascii_lowercase()),
        path: Some(sluice_routing::gateway::HttpPathModifier {
            type_: "ReplaceFullPath".into(),
            replace_full_path: Some(path.to_owned()),
            replace_prefix_match: None,
        }),
        port,
        status_code: Some(code),
    })
}

/// A Gateway API `PreciseHostname`: DNS labels, lowercase letters, digits, `-`.
pub(super) fn is_precise_hostname(host: &str) -> bool {
    !host.is_empty()
        && host.len() <= 253
        && host.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && !label.starts_with('-')
                && !label.ends_with('-')
                && label
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        })
}

/// `Name: value` lines (sluice's `request-headers` format; checked by sluice already).
fn header_lines(value: &str) -> Vec<HttpHeader> {
    value
        .lines()
        .filter_map(|line| line.split_once(':'))
        .map(|(n, v)| HttpHeader {
            name: n.trim().to_owned(),
            value: v.trim().to_owned(),
        })
        .collect()
}

/// ingress-nginx's CORS defaults (`cors/main.go`), as sluice's Ingress compiler has them.
fn cors<'a>(value: &impl Fn(&str) -> Option<&'a str>) -> HttpCorsFilter {
    let list = |v: &str| -> Vec<String> {
        v.split(',')
            .map(str::trim)
            .filter(|t| !t.is_empty())
            .map(str::to_owned)
            .collect()
    };
    let origins = value("cors-allow-origin").map_or_else(|| vec!["*".to_owned()], list);
    let origins = if origins.iter().any(|o| o == "*") {
        vec!["*".to_owned()]
    } else {
        origins
    };
    HttpCorsFilter {
        allow_origins: origins,
        allow_methods: list(
            value("cors-allow-methods").unwrap_or("GET, PUT, POST, DELETE, PATCH, OPTIONS"),
        )
        .into_iter()
        .map(|m| m.to_ascii_uppercase())
        .collect(),
        allow_headers: list(value("cors-allow-headers").unwrap_or(
            "DNT,Keep-Alive,User-Agent,X-Requested-With,If-Modified-Since,Cache-Control,\
             Content-Type,Range,Authorization",
        )),
        expose_headers: value("cors-expose-headers").map(list).unwrap_or_default(),
        allow_credentials: Some(value("cors-allow-credentials") != Some("false")),
        max_age: Some(
            value("cors-max-age")
                .and_then(|v| v.parse::<i32>().ok())
                .filter(|&n| n >= 1)
                .unwrap_or(1_728_000),
        ),
    }
}

/// nginx durations in seconds (`60`, `60s`, `1m`): whole seconds.
fn seconds(v: &str) -> Option<u64> {
    let v = v.trim();
    let (n, unit) = match v.find(|c: char| !c.is_ascii_digit()) {
        Some(at) => (&v[..at], &v[at..]),
        None => (v, "s"),
    };
    let n: u64 = n.parse().ok()?;
    match unit {
        "s" => Some(n),
        "m" => Some(n * 60),
        "h" => Some(n * 3600),
        _ => None,
    }
}

/// `secs` as a Gateway API duration (`^([0-9]{1,5}(h|m|s|ms)){1,4}$`).
pub(super) fn gateway_duration(secs: u64) -> String {
    if secs <= 99_999 {
        return format!("{secs}s");
    }
    let (h, m, s) = (secs / 3600, secs % 3600 / 60, secs % 60);
    format!("{}h{m}m{s}s", h.min(99_999))
}

/// `proxy-read-timeout`/`proxy-send-timeout` -> `timeouts.backendRequest`: the larger one.
fn timeouts(s: &mut Settings, keys: &Keys<'_>, annotations: &BTreeMap<String, String>) {
    let mut longest = None;
    for name in ["proxy-read-timeout", "proxy-send-timeout"] {
        if let Some((key, v)) = get(keys, annotations, name) {
            match seconds(v).filter(|&n| n > 0) {
                Some(n) => {
                    longest = longest.max(Some(n));
                    s.carry(
                        &key,
                        "timeouts.backendRequest (bounds the whole backend response, where \
                         nginx bounds each read or write)",
                    );
                }
                None => s.drop(&key, format!("{v:?} is not a number of seconds")),
            }
        }
    }
    if let Some(n) = longest {
        s.timeouts = Some(HttpRouteTimeouts {
            request: None,
            backend_request: Some(gateway_duration(n)),
        });
    }
}

/// `proxy-next-upstream-tries` (tries in all) -> `retry.attempts` (tries after the first);
/// `proxy-next-upstream`'s `http_5xx` tokens -> `retry.codes`.
fn retry(s: &mut Settings, keys: &Keys<'_>, annotations: &BTreeMap<String, String>) {
    let next = get(keys, annotations, "proxy-next-upstream");
    let off = next.as_ref().is_some_and(|(_, v)| v.trim() == "off");
    let codes: Vec<i32> = next
        .as_ref()
        .map(|(_, v)| {
            v.split_whitespace()
                .filter_map(|t| t.strip_prefix("http_"))
                .filter_map(|c| c.parse().ok())
                .filter(|c| (500..=599).contains(c))
                .collect()
        })
        .unwrap_or_default();
    let tries = get(keys, annotations, "proxy-next-upstream-tries");
    if let Some((key, _)) = &next {
        s.carry(
            key,
            "retry.codes (connection errors and timeouts are retried by sluice)",
        );
    }
    match tries {
        Some((key, v)) => match v.parse::<i32>() {
            Ok(n) if (1..=8).contains(&n) && !off => {
                s.retry = Some(HttpRouteRetry {
                    codes,
                    attempts: Some(n - 1),
                    backoff: None,
                });
                s.carry(&key, format!("retry.attempts {}", n - 1));
            }
            _ => s.drop(
                &key,
                format!("{v:?}: retry.attempts takes 0..=7 tries after the first (tries 1..=8)"),
            ),
        },
        None if !off && next.is_some() => {
            s.retry = Some(HttpRouteRetry {
                codes,
                attempts: Some(2), // ingress-nginx's default: 3 tries
                backoff: None,
            });
        }
        None => {}
    }
}

/// `backend-protocol` and `proxy-ssl-*`.
fn backend_protocol(s: &mut Settings, keys: &Keys<'_>, annotations: &BTreeMap<String, String>) {
    let ssl_keys = [
        "proxy-ssl-secret",
        "proxy-ssl-verify",
        "proxy-ssl-name",
        "proxy-ssl-server-name",
    ];
    let protocol = get(keys, annotations, "backend-protocol");
    if let Some((key, v)) = &protocol {
        s.protocol = match v.to_ascii_uppercase().as_str() {
            "HTTP" => BackendProtocol::Http,
            "HTTPS" => BackendProtocol::Https,
            "GRPC" => BackendProtocol::Grpc,
            "GRPCS" => BackendProtocol::Grpcs,
            _ => {
                s.drop(
                    key,
                    format!("{v:?}: only HTTP, HTTPS, GRPC and GRPCS have a form"),
                );
                BackendProtocol::Http
            }
        };
        match s.protocol {
            BackendProtocol::Http => s.carry(key, "plain HTTP backendRefs"),
            BackendProtocol::Https => s.carry(key, "a BackendTLSPolicy for the Service"),
            BackendProtocol::Grpc => s.carry(key, "a GRPCRoute"),
            BackendProtocol::Grpcs => s.carry(key, "a GRPCRoute and a BackendTLSPolicy"),
        }
    }
    let tls = matches!(s.protocol, BackendProtocol::Https | BackendProtocol::Grpcs);
    let verify = get(keys, annotations, "proxy-ssl-verify").is_some_and(|(_, v)| v == "on");
    for name in ssl_keys {
        let Some((key, v)) = get(keys, annotations, name) else {
            continue;
        };
        if !tls {
            s.drop(&key, "only with backend-protocol HTTPS or GRPCS");
            continue;
        }
        match name {
            "proxy-ssl-secret" if verify => {
                let (ns, n) = match v.split_once('/') {
                    Some((ns, n)) => (Some(ns.to_owned()), n.to_owned()),
                    None => (None, v.to_owned()),
                };
                s.carry(
                    &key,
                    format!(
                        "BackendTLSPolicy caCertificateRefs: ConfigMap {n} (create it with the \
                         Secret's ca.crt; BackendTLSPolicy reads CA certificates from ConfigMaps)"
                    ),
                );
                s.backend_tls.ca = Some((ns, n));
            }
            "proxy-ssl-secret" => s.drop(
                &key,
                "without proxy-ssl-verify: on, ingress-nginx uses it for no check",
            ),
            "proxy-ssl-verify" if verify => s.carry(&key, "BackendTLSPolicy validation"),
            "proxy-ssl-verify" => {}
            "proxy-ssl-name" => {
                s.backend_tls.hostname = Some(v.to_owned());
                s.carry(
                    &key,
                    "BackendTLSPolicy validation.hostname (SNI and name checked)",
                );
            }
            _ => s.carry(
                &key,
                "BackendTLSPolicy always sends validation.hostname as SNI",
            ),
        }
    }
    if tls && !verify {
        s.drop(
            "backend-protocol",
            "ingress-nginx does not verify the backend's certificate by default \
             (proxy-ssl-verify: off); Gateway API speaks TLS to a backend only with a \
             BackendTLSPolicy that names its CA (caCertificateRefs: a ConfigMap with ca.crt; \
             sluice does not take wellKnownCACertificates): none is emitted, so the \
             backendRefs speak plain HTTP until you add one",
        );
    }
}

/// `mirror-target`: `http://<service>[.<namespace>[.svc[.cluster.local]]][:port]$request_uri`.
fn mirror(value: &str) -> Result<HttpRequestMirrorFilter, String> {
    let refuse = |why: &str| Err(format!("{value:?} {why}"));
    let Some(rest) = value.strip_prefix("http://") else {
        return refuse("is not an http:// URL of a Service: RequestMirror needs a Service");
    };
    let Some(at) = rest.find(['/', '$']) else {
        return refuse("has no $request_uri");
    };
    let (authority, path) = rest.split_at(at);
    if !matches!(path, "$request_uri" | "/$request_uri") {
        return refuse("has a path other than $request_uri: RequestMirror keeps the request's");
    }
    let (host, port) = match authority.rsplit_once(':') {
        Some((h, p)) => match p.parse::<i32>() {
            Ok(p) if (1..=65535).contains(&p) => (h, p),
            _ => return refuse("has an invalid port"),
        },
        None => (authority, 80),
    };
    let lower = host.to_ascii_lowercase();
    let labels: Vec<&str> = lower
        .trim_end_matches(".cluster.local")
        .trim_end_matches(".svc")
        .split('.')
        .collect();
    let (name, namespace) = match labels.as_slice() {
        [name] => (*name, None),
        [name, ns] => (*name, Some((*ns).to_owned())),
        _ => return refuse("is not a Service name (<service>[.<namespace>])"),
    };
    if !is_precise_hostname(name) {
        return refuse("is not a Service name");
    }
    Ok(HttpRequestMirrorFilter {
        backend_ref: sluice_routing::gateway::BackendObjectReference {
            name: name.to_owned(),
            namespace,
            port: Some(port),
            ..Default::default()
        },
        percent: None,
        fraction: None,
    })
}

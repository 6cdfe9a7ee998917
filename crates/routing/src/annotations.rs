//! Ingress annotations to a [`Policy`]: ingress-nginx's `nginx.ingress.kubernetes.io/*` with
//! its semantics, and the same keys under `sluice.dev/*`.
//!
//! Every key under either prefix is either applied or reported exactly once as a
//! [`Problem`] (unsupported, invalid, or a refused snippet). When the same key is under both
//! prefixes the `sluice.dev/` one is used and the other is ignored silently. Keys under other
//! prefixes are not ours and are ignored.
//!
//! Where ingress-nginx rejects a whole Ingress over one bad value, sluice reports the
//! annotation and serves the rest: an invalid annotation counts as absent (the default
//! applies). Two exceptions never widen access on a mistake: an invalid source range
//! refuses every client (ingress-nginx denies the location), and invalid
//! `cors-allow-origin` entries are dropped (ingress-nginx would fall back to `*`).
//!
//! Defaults and syntax follow ingress-nginx's `internal/ingress/annotations/*` (cors,
//! redirect, rewrite, proxy, ipallowlist, ipdenylist, upstreamvhost, xforwardedprefix) and
//! `internal/ingress/controller/config/config.go` (`SSLRedirect: true`).

use std::collections::BTreeMap;
use std::net::Ipv6Addr;
use std::sync::Arc;
use std::time::Duration;

use http::{HeaderName, HeaderValue, Uri};

use crate::affinity::{self, AFFINITY_KEYS, Affinity};
use crate::auth::{self, AUTH_KEYS, ExternalAuth};
use crate::canary::{self, CANARY_KEYS, CanaryRule};
use crate::cidr::{Cidr, parse_cidr};
use crate::diagnostic::Reason;
use crate::fail_closed::{
    BASIC_AUTH_COMPANIONS, BASIC_AUTH_TRIGGERS, CLIENT_CERT_TRIGGER, CLOSED, restricting_directive,
};
use crate::policy::{Cors, LoadBalance, NextUpstream, OriginPattern, Policy, RateLimit, Redirect};
use crate::protocol::{self, UpstreamTls};

/// ingress-nginx's annotation prefix.
pub const NGINX_PREFIX: &str = "nginx.ingress.kubernetes.io/";
/// sluice's own prefix: the same keys, for Ingresses written for sluice.
pub const SLUICE_PREFIX: &str = "sluice.dev/";

/// The keys sluice applies (without prefix), for docs and the migration report. All are
/// read under both prefixes; [`SLUICE_ONLY`] ones exist in sluice only.
pub(crate) const SUPPORTED: &[&str] = &[
    "allowlist-source-range",
    "app-root",
    "cors-allow-credentials",
    "cors-allow-headers",
    "cors-allow-methods",
    "cors-allow-origin",
    "cors-expose-headers",
    "cors-max-age",
    "denylist-source-range",
    "enable-cors",
    "force-ssl-redirect",
    "permanent-redirect",
    "permanent-redirect-code",
    "proxy-body-size",
    "proxy-connect-timeout",
    "proxy-read-timeout",
    "proxy-send-timeout",
    "request-headers",
    "response-headers",
    "ssl-redirect",
    "temporal-redirect",
    "temporal-redirect-code",
    "upstream-vhost",
    "whitelist-source-range",
    "x-forwarded-prefix",
    "rewrite-target",
    "use-regex",
    "default-backend",
    "custom-http-errors",
    "proxy-next-upstream",
    "proxy-next-upstream-tries",
    "backend-protocol",
    "proxy-ssl-verify",
    "proxy-ssl-name",
    "proxy-ssl-server-name",
    "proxy-ssl-secret",
    "limit-rps",
    "limit-rpm",
    "limit-connections",
    "limit-burst-multiplier",
    "limit-allowlist",
    "limit-whitelist",
    "canary",
    "canary-by-header",
    "canary-by-header-value",
    "canary-by-header-pattern",
    "canary-by-cookie",
    "canary-weight",
    "canary-weight-total",
    "affinity",
    "affinity-mode",
    "session-cookie-name",
    "session-cookie-path",
    "session-cookie-domain",
    "session-cookie-samesite",
    "session-cookie-secure",
    "session-cookie-max-age",
    "session-cookie-expires",
    "session-cookie-change-on-failure",
    "upstream-hash-by",
    "load-balance",
    "auth-url",
    "auth-method",
    "auth-signin",
    "auth-signin-redirect-param",
    "auth-response-headers",
    "auth-request-redirect",
    "satisfy",
];

/// Supported keys that ingress-nginx does not have: meaningful under [`SLUICE_PREFIX`] only.
pub(crate) const SLUICE_ONLY: &[&str] = &["request-headers", "response-headers"];

/// `cors-allow-methods` default (ingress-nginx `defaultCorsMethods`).
pub(crate) const DEFAULT_CORS_METHODS: &str = "GET, PUT, POST, DELETE, PATCH, OPTIONS";
/// `cors-allow-headers` default (ingress-nginx `defaultCorsHeaders`).
pub(crate) const DEFAULT_CORS_HEADERS: &str = "DNT,Keep-Alive,User-Agent,X-Requested-With,\
If-Modified-Since,Cache-Control,Content-Type,Range,Authorization";
/// `cors-max-age` default in seconds (ingress-nginx `defaultCorsMaxAge`).
pub(crate) const DEFAULT_CORS_MAX_AGE: u64 = 1_728_000;

/// The `cors-*` keys that only matter with `enable-cors: "true"`.
const CORS_KEYS: &[&str] = &[
    "cors-allow-origin",
    "cors-allow-methods",
    "cors-allow-headers",
    "cors-expose-headers",
    "cors-allow-credentials",
    "cors-max-age",
];

/// Fields `request-headers`/`response-headers` may not set: hop-by-hop and framing.
const FORBIDDEN_FIELDS: &[&str] = &[
    "connection",
    "keep-alive",
    "proxy-connection",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "content-length",
    "host",
];

const SNIPPET_DETAIL: &str = "snippets are nginx configuration text; sluice never applies annotation values as configuration";

/// What an Ingress's annotations say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Parsed {
    /// Everything but the HTTPS redirect, which depends on the rule's host.
    pub policy: Policy,
    /// `use-regex` (default false): this Ingress's paths are regular expressions, and so
    /// are all paths of its hosts (ingress-nginx's rule).
    pub use_regex: bool,
    /// `default-backend`: a Service of the Ingress's namespace (its first port) that answers
    /// when the route's Service has no ready endpoint, and the statuses of
    /// `custom-http-errors`.
    pub default_backend: Option<String>,
    /// `rewrite-target`: the path sent upstream, `$1`..`$9` standing for the captures of
    /// the rule's path; setting it makes the paths regular expressions too.
    pub rewrite_target: Option<String>,
    /// `ssl-redirect` (default true): redirect plain HTTP when the host has TLS.
    pub ssl_redirect: bool,
    /// `force-ssl-redirect` (default false): redirect plain HTTP even without TLS.
    pub force_ssl_redirect: bool,
    /// `proxy-ssl-secret`: (namespace if given, name), resolved against the Secrets by
    /// the compiler, which fills [`Policy::upstream_tls`]'s certificates.
    pub ssl_secret: Option<(Option<String>, String)>,
    /// `canary: "true"`: this Ingress is the canary of the Ingress with the same host and
    /// path, chosen by these rules.
    pub canary: Option<CanaryRule>,
    /// One per annotation that has no effect, and why.
    pub problems: Vec<Problem>,
}

/// An annotation that has no effect.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Problem {
    /// The full annotation key.
    pub annotation: String,
    /// [`Reason::UnsupportedAnnotation`], [`Reason::InvalidAnnotation`] or
    /// [`Reason::SnippetRefused`].
    pub reason: Reason,
    /// Why, in a sentence.
    pub detail: String,
}

/// Parses the annotations of one Ingress.
pub(crate) fn parse(annotations: &BTreeMap<String, String>) -> Parsed {
    parse_traced(annotations).0
}

/// What sluice makes of one Ingress's annotations, for reports such as `sluice migrate`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AnnotationReport {
    /// Full keys applied as written.
    pub honoured: Vec<String>,
    /// Full keys with no effect: (key, reason, why).
    pub problems: Vec<(String, Reason, String)>,
}

/// Checks one Ingress's annotations the way `compile` does.
pub fn check_annotations(annotations: &BTreeMap<String, String>) -> AnnotationReport {
    let (parsed, applied) = parse_traced(annotations);
    AnnotationReport {
        honoured: applied.into_iter().map(str::to_owned).collect(),
        problems: parsed
            .problems
            .into_iter()
            .map(|p| (p.annotation, p.reason, p.detail))
            .collect(),
    }
}

/// The annotation keys (without prefix) sluice honours; `request-headers` and
/// `response-headers` only under `sluice.dev/`.
pub fn supported_annotations() -> &'static [&'static str] {
    SUPPORTED
}

/// [`parse`], also returning the full keys applied without a problem.
fn parse_traced(annotations: &BTreeMap<String, String>) -> (Parsed, Vec<&str>) {
    let mut cx = Cx::new(annotations);
    let mut policy = Policy::default();

    let ssl_redirect = cx
        .value("ssl-redirect", |v| {
            parse_bool(v).map_err(|e| format!("{e}; ssl-redirect stays true"))
        })
        .unwrap_or(true);
    let force_ssl_redirect = cx
        .value("force-ssl-redirect", |v| {
            parse_bool(v).map_err(|e| format!("{e}; force-ssl-redirect stays false"))
        })
        .unwrap_or(false);

    let use_regex = cx
        .value("use-regex", |v| {
            parse_bool(v).map_err(|e| format!("{e}; use-regex stays false"))
        })
        .unwrap_or(false);
    let rewrite_target = cx.value("rewrite-target", parse_rewrite_target);

    policy.redirect = redirect(&mut cx);
    policy.app_root = cx.value("app-root", parse_app_root);

    let refuse_everyone = source_ranges(&mut cx, &mut policy);

    policy.body_limit = cx.value("proxy-body-size", parse_size);
    policy.connect_timeout = cx.value("proxy-connect-timeout", parse_duration);
    policy.read_timeout = cx.value("proxy-read-timeout", parse_duration);
    policy.send_timeout = cx.value("proxy-send-timeout", parse_duration);

    policy.cors = cors(&mut cx);

    policy.upstream_vhost = cx.value("upstream-vhost", parse_upstream_vhost);
    policy.forwarded_prefix = cx.value("x-forwarded-prefix", parse_forwarded_prefix);
    let default_backend = cx.value("default-backend", parse_service_name);
    if let Some(next) = cx.value("proxy-next-upstream", parse_next_upstream) {
        policy.next_upstream = next;
    }
    if let Some(tries) = cx.value("proxy-next-upstream-tries", parse_tries) {
        policy.next_upstream.tries = tries;
    }
    policy.custom_http_errors = cx
        .value("custom-http-errors", parse_status_list)
        .unwrap_or_default();

    policy.protocol = cx.value("backend-protocol", protocol::parse_backend_protocol);
    let ssl_secret = upstream_tls(&mut cx, &mut policy);
    policy.rate_limit = rate_limit(&mut cx);
    let canary = canary(&mut cx);
    policy.affinity = affinity(&mut cx);
    policy.hash_by = cx.value("upstream-hash-by", affinity::parse_hash_by);
    policy.auth = external_auth(&mut cx);
    unenforced_access(&mut cx, !policy.allow.is_empty(), policy.auth.is_some());
    policy.load_balance = cx.value("load-balance", |v| match v.trim() {
        "round_robin" => Ok(LoadBalance::RoundRobin),
        "ewma" => Ok(LoadBalance::Ewma),
        other => Err(format!(
            "value {other:?} is not round_robin or ewma; sluice's default (least requests in flight of two random endpoints) is used"
        )),
    });

    policy.request_headers = cx
        .sluice_value("request-headers", parse_fields)
        .unwrap_or_default();
    policy.response_headers = cx
        .sluice_value("response-headers", parse_fields)
        .unwrap_or_default();

    if refuse_everyone {
        policy.allow.clear();
        policy.deny = everyone();
    }

    cx.report_the_rest();
    let Cx {
        mut problems,
        applied,
        closed,
        ..
    } = cx;
    policy.fail_closed = closed;
    problems.sort_by(|a, b| a.annotation.cmp(&b.annotation));
    let parsed = Parsed {
        policy,
        default_backend,
        use_regex,
        rewrite_target,
        ssl_redirect,
        force_ssl_redirect,
        ssl_secret,
        canary,
        problems,
    };
    (parsed, applied)
}

/// One annotation of ours: its full key and its value.
#[derive(Clone, Copy, Debug)]
struct Entry<'a> {
    key: &'a str,
    value: &'a str,
}

/// The annotations not yet handled, by key without prefix; what was applied and reported.
struct Cx<'a> {
    pending: BTreeMap<&'a str, Entry<'a>>,
    problems: Vec<Problem>,
    applied: Vec<&'a str>,
    /// An access restriction could not be honoured: the routes answer 503.
    closed: bool,
}

impl<'a> Cx<'a> {
    fn new(annotations: &'a BTreeMap<String, String>) -> Cx<'a> {
        let mut pending = BTreeMap::new();
        // nginx first, then sluice.dev/ overwrites: sluice.dev/ wins silently.
        for prefix in [NGINX_PREFIX, SLUICE_PREFIX] {
            for (key, value) in annotations {
                if let Some(name) = key.strip_prefix(prefix) {
                    pending.insert(name, Entry { key, value });
                }
            }
        }
        Cx {
            pending,
            problems: Vec::new(),
            applied: Vec::new(),
            closed: false,
        }
    }

    fn take(&mut self, name: &str) -> Option<Entry<'a>> {
        self.pending.remove(name)
    }

    /// Takes a sluice-only key; under the nginx prefix it is left to be reported as
    /// unsupported.
    fn take_sluice(&mut self, name: &str) -> Option<Entry<'a>> {
        match self.pending.get(name) {
            Some(entry) if entry.key.starts_with(SLUICE_PREFIX) => self.take(name),
            _ => None,
        }
    }

    fn applied(&mut self, entry: Entry<'a>) {
        self.applied.push(entry.key);
    }

    fn report(&mut self, entry: Entry<'a>, reason: Reason, detail: impl Into<String>) {
        self.problems.push(Problem {
            annotation: entry.key.to_owned(),
            reason,
            detail: detail.into(),
        });
    }

    fn invalid(&mut self, entry: Entry<'a>, detail: impl Into<String>) {
        self.report(entry, Reason::InvalidAnnotation, detail);
    }

    /// An access restriction that cannot be honoured: reported, and the routes close.
    fn fail_closed(&mut self, entry: Entry<'a>, detail: impl AsRef<str>) {
        self.closed = true;
        let detail = format!("{}; {CLOSED}", detail.as_ref());
        self.report(entry, Reason::FailedClosed, detail);
    }

    /// Takes `name`, parses it, and applies or reports it.
    fn value<T>(&mut self, name: &str, parse: impl FnOnce(&str) -> Result<T, String>) -> Option<T> {
        let entry = self.take(name)?;
        self.parse_entry(entry, parse)
    }

    /// [`Cx::value`] for a sluice-only key.
    fn sluice_value<T>(
        &mut self,
        name: &str,
        parse: impl FnOnce(&str) -> Result<T, String>,
    ) -> Option<T> {
        let entry = self.take_sluice(name)?;
        self.parse_entry(entry, parse)
    }

    fn parse_entry<T>(
        &mut self,
        entry: Entry<'a>,
        parse: impl FnOnce(&str) -> Result<T, String>,
    ) -> Option<T> {
        match parse(entry.value) {
            Ok(value) => {
                self.applied(entry);
                Some(value)
            }
            Err(detail) => {
                self.invalid(entry, detail);
                None
            }
        }
    }

    /// Everything not handled: snippets refused, the rest unsupported.
    fn report_the_rest(&mut self) {
        for (name, entry) in std::mem::take(&mut self.pending) {
            if name.ends_with("-snippet")
                && let Some(directive) = restricting_directive(entry.value)
            {
                let detail =
                    format!("{SNIPPET_DETAIL}, and this one restricts access ({directive:?})");
                self.fail_closed(entry, detail);
            } else if name.ends_with("-snippet") {
                let detail = if name == "configuration-snippet" {
                    format!(
                        "{SNIPPET_DETAIL} (to set request or response fields, use \
                         {SLUICE_PREFIX}request-headers or {SLUICE_PREFIX}response-headers)"
                    )
                } else {
                    SNIPPET_DETAIL.to_owned()
                };
                self.report(entry, Reason::SnippetRefused, detail);
            } else {
                let under_nginx = entry.key.starts_with(NGINX_PREFIX);
                self.report(
                    entry,
                    Reason::UnsupportedAnnotation,
                    unsupported_detail(name, under_nginx),
                );
            }
        }
    }
}

/// The detail for an unsupported key `name` (without prefix).
pub(crate) fn unsupported_detail(name: &str, under_nginx: bool) -> String {
    if under_nginx && SLUICE_ONLY.contains(&name) {
        return format!("not an ingress-nginx annotation; use {SLUICE_PREFIX}{name}");
    }
    match unsupported_hint(name) {
        Some(hint) => format!("not supported by sluice: {hint}"),
        None => match closest_supported(name) {
            Some(near) => format!("not supported by sluice (did you mean {near}?)"),
            None => "not supported by sluice".to_owned(),
        },
    }
}

/// What to know about an ingress-nginx annotation sluice does not implement.
fn unsupported_hint(name: &str) -> Option<&'static str> {
    let starts = |p: &str| name.starts_with(p);
    Some(match name {
        "custom-headers" => "use sluice.dev/response-headers (one \"Name: value\" per line)",
        "from-to-www-redirect" => {
            "not supported yet; add a rule for the other host with permanent-redirect"
        }
        "server-alias" => "list every host as a rule of the Ingress",
        "disable-proxy-intercept-errors" => "not supported yet",
        "ssl-passthrough" => "TLS passthrough is not supported yet",
        "ssl-ciphers" | "ssl-prefer-server-ciphers" => {
            "TLS settings are not configurable per Ingress"
        }
        "preserve-trailing-slash" => "not supported yet",
        "service-upstream" => "not supported yet; sluice always balances over endpoints",
        "satisfy" => "not supported yet",
        "connection-proxy-header" => "not supported yet",
        "http2-push-preload" => "HTTP/2 server push is not supported (browsers dropped it)",
        "enable-modsecurity" | "enable-owasp-core-rules" | "modsecurity-transaction-id" => {
            "ModSecurity is not part of sluice"
        }
        "enable-access-log" | "enable-rewrite-log" => "not supported yet",
        "proxy-buffering"
        | "proxy-request-buffering"
        | "proxy-buffer-size"
        | "proxy-buffers-number"
        | "proxy-busy-buffers-size"
        | "proxy-max-temp-file-size"
        | "client-body-buffer-size" => "nginx buffer settings have no equivalent in sluice",
        "proxy-http-version" => "not supported yet",
        "affinity-canary-behavior" | "session-cookie-conditional-samesite-none" => {
            "not supported yet"
        }
        _ if starts("auth-tls-") => {
            "client certificate authentication is not supported yet (has no effect without \
             auth-tls-secret, which closes the route)"
        }
        "auth-secret-type" | "auth-realm" => {
            "basic authentication is not supported yet (has no effect without auth-type or \
             auth-secret, which close the route); use auth-url"
        }
        _ if starts("auth-") || name == "enable-global-auth" => "not supported yet",
        "limit-rate" | "limit-rate-after" => "response bandwidth limits are not supported yet",
        "proxy-ssl-verify-depth" | "proxy-ssl-ciphers" | "proxy-ssl-protocols" => {
            "TLS settings towards backends are rustls's defaults (TLS 1.2 and 1.3)"
        }
        "proxy-next-upstream-timeout" => {
            "not supported yet; --upstream-header-timeout bounds a request"
        }
        _ if starts("proxy-cookie-") || starts("proxy-redirect-") => {
            "rewriting upstream cookies and redirects is not supported yet"
        }
        _ if starts("mirror-") => "request mirroring is not supported yet",
        _ if starts("opentelemetry") || name == "enable-opentelemetry" => {
            "tracing is not supported yet"
        }
        _ => return None,
    })
}

/// A supported key within two edits of `name`, for typos.
fn closest_supported(name: &str) -> Option<&'static str> {
    SUPPORTED
        .iter()
        .map(|s| (edit_distance(name, s), *s))
        .filter(|(d, _)| *d <= 2)
        .min()
        .map(|(_, s)| s)
}

fn edit_distance(a: &str, b: &str) -> usize {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len().abs_diff(b.len()) > 2 {
        return usize::MAX;
    }
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.iter().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, cb) in b.iter().enumerate() {
            let cost = usize::from(ca != cb);
            cur[j + 1] = (prev[j] + cost).min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        prev = cur;
    }
    prev[b.len()]
}

// --- Redirects ---------------------------------------------------------------------------

/// `temporal-redirect`/`permanent-redirect` and their codes.
///
/// As ingress-nginx's redirect parser ("the execution order is temporal and then
/// permanent"), a valid `temporal-redirect` wins over `permanent-redirect`, which is then
/// reported. Codes follow ingress-nginx's ranges: 300..=307 for temporal (its upper bound
/// is `StatusTemporaryRedirect`), 300..=308 for permanent; out of range, the default (302,
/// 301) is used and the code is reported.
fn redirect(cx: &mut Cx<'_>) -> Option<Redirect> {
    let temporal = cx.take("temporal-redirect");
    let temporal_code = cx.take("temporal-redirect-code");
    let permanent = cx.take("permanent-redirect");
    let permanent_code = cx.take("permanent-redirect-code");

    let temporal_location = temporal.and_then(|e| cx.parse_entry(e, parse_location));
    if let Some(location) = temporal_location {
        let status = redirect_code(cx, temporal_code, 300..=307, 302);
        for entry in [permanent, permanent_code].into_iter().flatten() {
            cx.invalid(
                entry,
                "has no effect: temporal-redirect is also set and takes precedence, as in \
                 ingress-nginx",
            );
        }
        return Some(Redirect { status, location });
    }
    if let Some(entry) = temporal_code {
        cx.invalid(entry, "has no effect without a valid temporal-redirect");
    }

    let permanent_location = permanent.and_then(|e| cx.parse_entry(e, parse_location));
    if let Some(location) = permanent_location {
        let status = redirect_code(cx, permanent_code, 300..=308, 301);
        return Some(Redirect { status, location });
    }
    if let Some(entry) = permanent_code {
        cx.invalid(entry, "has no effect without a valid permanent-redirect");
    }
    None
}

fn redirect_code<'a>(
    cx: &mut Cx<'a>,
    entry: Option<Entry<'a>>,
    range: std::ops::RangeInclusive<u16>,
    default: u16,
) -> u16 {
    let Some(entry) = entry else {
        return default;
    };
    let (low, high) = (*range.start(), *range.end());
    let code = entry
        .value
        .trim()
        .parse::<i64>()
        .ok()
        .and_then(|n| u16::try_from(n).ok())
        .filter(|n| range.contains(n));
    match code {
        Some(code) => {
            cx.applied(entry);
            code
        }
        None => {
            cx.invalid(
                entry,
                format!(
                    "value {} is not a redirect status ({low} to {high}); {default} is used",
                    shown(entry.value)
                ),
            );
            default
        }
    }
}

/// A redirect target: an absolute `http(s)://` URL or an absolute path.
fn parse_location(value: &str) -> Result<HeaderValue, String> {
    let v = value.trim();
    let bad = |why: &str| format!("value {} {why}", shown(value));
    if v.is_empty() {
        return Err(bad("is empty"));
    }
    no_nginx_variables(value, v)?;
    if !v.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(bad(
            "is not a URL: spaces, control and non-ASCII characters must be percent-encoded",
        ));
    }
    let lower = v.to_ascii_lowercase();
    let is_url = lower.starts_with("http://") || lower.starts_with("https://");
    let is_path = v.starts_with('/') && !v.starts_with("//");
    if is_url {
        let uri = Uri::try_from(v).map_err(|e| bad(&format!("is not a URL ({e})")))?;
        if uri.host().is_none_or(str::is_empty) {
            return Err(bad("is not a URL: it has no host"));
        }
    } else if !is_path {
        return Err(bad(
            "is not an absolute http:// or https:// URL nor a path starting with /",
        ));
    }
    HeaderValue::from_str(v).map_err(|_| bad("is not a valid header value"))
}

/// `app-root`: a path starting with `/` (ingress-nginx refuses absolute URLs).
fn parse_app_root(value: &str) -> Result<HeaderValue, String> {
    let v = value.trim();
    let bad = |why: &str| format!("value {} {why}", shown(value));
    no_nginx_variables(value, v)?;
    if !v.starts_with('/') || v.starts_with("//") {
        return Err(bad("is not a path starting with / (such as /app)"));
    }
    if !v.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(bad(
            "is not a path: spaces, control and non-ASCII characters must be percent-encoded",
        ));
    }
    HeaderValue::from_str(v).map_err(|_| bad("is not a valid header value"))
}

/// ingress-nginx writes some values into its configuration, where `$name` is a variable;
/// sluice uses values literally, so a `$` would silently mean something else.
fn no_nginx_variables(value: &str, trimmed: &str) -> Result<(), String> {
    if trimmed.contains('$') {
        return Err(format!(
            "value {} contains $: nginx variables and regex captures are not expanded by sluice",
            shown(value)
        ));
    }
    Ok(())
}

// --- Source ranges -----------------------------------------------------------------------

/// `allowlist-source-range` (alias `whitelist-source-range`) and `denylist-source-range`.
/// Returns whether every client must be refused: ingress-nginx denies the location when a
/// source range is invalid (`LocationDeniedError`, 503), so an invalid range never opens
/// access here either; it refuses everyone with 403.
fn source_ranges(cx: &mut Cx<'_>, policy: &mut Policy) -> bool {
    let mut refuse = false;
    let allowlist = cx.take("allowlist-source-range");
    let whitelist = cx.take("whitelist-source-range");
    // ingress-nginx reads the alias only when allowlist-source-range is empty or absent.
    let (used, unused) = match (allowlist, whitelist) {
        (Some(a), Some(w)) if a.value.trim().is_empty() && !w.value.trim().is_empty() => {
            (Some(w), Some(a))
        }
        (Some(a), w) => (Some(a), w),
        (None, w) => (w, None),
    };
    if let (Some(used), Some(unused)) = (used, unused) {
        let used_name = used.key.rsplit('/').next().unwrap_or(used.key);
        cx.invalid(
            unused,
            format!(
                "has no effect: {used_name} is used (allowlist-source-range takes precedence \
                 over its old name whitelist-source-range unless it is empty, as in \
                 ingress-nginx)"
            ),
        );
    }
    if let Some(entry) = used {
        match parse_cidrs(entry.value) {
            Ok(cidrs) => {
                cx.applied(entry);
                policy.allow = cidrs;
            }
            Err(why) => {
                refuse = true;
                cx.invalid(entry, refused(entry.value, &why));
            }
        }
    }
    if let Some(entry) = cx.take("denylist-source-range") {
        match parse_cidrs(entry.value) {
            Ok(cidrs) => {
                cx.applied(entry);
                policy.deny = cidrs;
            }
            Err(why) => {
                refuse = true;
                cx.invalid(entry, refused(entry.value, &why));
            }
        }
    }
    refuse
}

fn refused(value: &str, why: &str) -> String {
    format!(
        "value {} is not a list of IP addresses or CIDRs ({why}); every client is refused \
         (403), as ingress-nginx denies the location",
        shown(value)
    )
}

/// Every address: `0.0.0.0/0` and `::/0`.
fn everyone() -> Vec<Cidr> {
    ["0.0.0.0/0", "::/0"]
        .into_iter()
        .filter_map(|c| parse_cidr(c).ok())
        .collect()
}

/// Comma-separated CIDRs or bare addresses, spaces allowed; one bad entry spoils the lot
/// (ingress-nginx's `net.ParseIPNets`).
fn parse_cidrs(value: &str) -> Result<Vec<Cidr>, String> {
    if value.trim().is_empty() {
        return Err("it is empty".to_owned());
    }
    value
        .split(',')
        .map(|item| {
            if item.trim().is_empty() {
                Err("it has an empty entry".to_owned())
            } else {
                parse_cidr(item)
            }
        })
        .collect()
}

// --- Sizes and durations -----------------------------------------------------------------

/// A size in the project's one syntax ([`sluice_units::parse_size`], a superset of
/// nginx's `ngx_parse_size`); `0` means unlimited.
fn parse_size(value: &str) -> Result<u64, String> {
    sluice_units::parse_size(value).map_err(|error| format!("value {} {error}", shown(value)))
}

/// A timeout in the project's one syntax ([`sluice_units::parse_duration`]: whole seconds as
/// ingress-nginx takes them, or nginx's and Go's time units). Must be greater than zero.
fn parse_duration(value: &str) -> Result<Duration, String> {
    let duration = sluice_units::parse_duration(value)
        .map_err(|error| format!("value {} {error}", shown(value)))?;
    if duration.is_zero() {
        return Err(format!("value {} must be greater than zero", shown(value)));
    }
    Ok(duration)
}

/// `proxy-ssl-verify`, `proxy-ssl-name`, `proxy-ssl-server-name` and `proxy-ssl-secret`
/// into [`Policy::upstream_tls`]; returns the Secret to resolve.
fn upstream_tls(cx: &mut Cx<'_>, policy: &mut Policy) -> Option<(Option<String>, String)> {
    let verify = cx.value("proxy-ssl-verify", protocol::parse_on_off);
    let name = cx.value("proxy-ssl-name", protocol::parse_ssl_name);
    let server_name = cx.value("proxy-ssl-server-name", protocol::parse_on_off);
    let secret = cx.value("proxy-ssl-secret", protocol::parse_secret_ref);
    if verify.is_none() && name.is_none() && server_name.is_none() && secret.is_none() {
        return None;
    }
    policy.upstream_tls = Some(Arc::new(UpstreamTls {
        verify: verify.unwrap_or(false),
        name,
        server_name: server_name.unwrap_or(false),
        ..UpstreamTls::default()
    }));
    secret
}

/// `limit-rps`, `limit-rpm`, `limit-connections`, `limit-burst-multiplier` and
/// `limit-allowlist` (alias
/// `limit-whitelist`, read when `limit-allowlist` is absent), with ingress-nginx's default
/// multiplier 5. The zone is set by the compiler, which knows the Ingress.
fn rate_limit(cx: &mut Cx<'_>) -> Option<RateLimit> {
    let rps = cx.value("limit-rps", |v| parse_rate(v, "limit-rps"));
    let rpm = cx.value("limit-rpm", |v| parse_rate(v, "limit-rpm"));
    let connections = cx.value("limit-connections", |v| parse_rate(v, "limit-connections"));
    let multiplier = cx.value("limit-burst-multiplier", |v| {
        parse_rate(v, "limit-burst-multiplier").map(|m| m.max(1))
    });
    let allowlist = cx.value("limit-allowlist", parse_cidrs);
    let whitelist = cx.value("limit-whitelist", parse_cidrs);
    let allow = allowlist.or(whitelist).unwrap_or_default();
    (rps.is_some() || rpm.is_some() || connections.is_some()).then(|| RateLimit {
        rps,
        rpm,
        connections,
        burst_multiplier: multiplier.unwrap_or(5),
        allow,
        zone: 0,
    })
}

/// A whole positive number; `0` turns the limit off, as ingress-nginx ignores it.
fn parse_rate(value: &str, what: &str) -> Result<u32, String> {
    match value.trim().parse::<u32>() {
        Ok(0) => Err(format!("{what} 0 sets no limit")),
        Ok(n) => Ok(n),
        Err(_) => Err(format!(
            "value {} is not a whole positive number",
            shown(value)
        )),
    }
}

/// `affinity: cookie` and its `session-cookie-*` companions ([`crate::affinity`]).
fn affinity(cx: &mut Cx<'_>) -> Option<Affinity> {
    let enabled = cx.value("affinity", |v| match v.trim() {
        "cookie" => Ok(true),
        other => Err(format!(
            "value {other:?} is not cookie (the only affinity type)"
        )),
    });
    let entries: Vec<_> = AFFINITY_KEYS
        .iter()
        .filter_map(|name| cx.take(name).map(|entry| (*name, entry)))
        .collect();
    if enabled != Some(true) {
        for (_, entry) in entries {
            cx.invalid(entry, "has no effect without affinity: cookie");
        }
        return None;
    }
    let values = entries
        .iter()
        .map(|(name, entry)| (*name, entry.value))
        .collect();
    let (settings, problems) = affinity::parse_affinity(&values);
    for (name, entry) in entries {
        match problems.iter().find(|(bad, _)| *bad == name) {
            Some((_, why)) => cx.invalid(entry, why.clone()),
            None => cx.applied(entry),
        }
    }
    Some(settings)
}

/// `auth-url` and its companions ([`crate::auth`]). An `auth-url` that does not parse
/// closes the route: serving it without the check would open it to everyone.
fn external_auth(cx: &mut Cx<'_>) -> Option<ExternalAuth> {
    let url = match cx.take("auth-url") {
        None => None,
        Some(entry) => match auth::parse_url(entry.value) {
            Ok(url) => {
                cx.applied(entry);
                Some(url)
            }
            Err(why) => {
                cx.fail_closed(entry, why);
                None
            }
        },
    };
    let entries: Vec<_> = AUTH_KEYS
        .iter()
        .filter_map(|name| cx.take(name).map(|entry| (*name, entry)))
        .collect();
    let Some(url) = url else {
        for (_, entry) in entries {
            cx.invalid(entry, "has no effect without a valid auth-url");
        }
        return None;
    };
    let values = entries
        .iter()
        .map(|(name, entry)| (*name, entry.value))
        .collect();
    let (settings, problems) = auth::parse_auth(url, &values);
    for (name, entry) in entries {
        match problems.iter().find(|(bad, _)| *bad == name) {
            Some((_, why)) => cx.invalid(entry, why.clone()),
            None => cx.applied(entry),
        }
    }
    Some(settings)
}

/// The access annotations sluice does not implement close the route
/// ([`crate::fail_closed`]); `satisfy` is honoured where it changes nothing.
fn unenforced_access(cx: &mut Cx<'_>, source_ranges: bool, external_auth: bool) {
    if BASIC_AUTH_TRIGGERS
        .iter()
        .any(|name| cx.pending.contains_key(name))
    {
        for name in BASIC_AUTH_TRIGGERS.iter().chain(BASIC_AUTH_COMPANIONS) {
            if let Some(entry) = cx.take(name) {
                cx.fail_closed(
                    entry,
                    "basic and digest authentication from a Secret is not supported yet",
                );
            }
        }
    }
    let verify_off = cx
        .pending
        .get("auth-tls-verify-client")
        .is_some_and(|entry| entry.value.trim() == "off");
    if cx.pending.contains_key(CLIENT_CERT_TRIGGER) && !verify_off {
        let names: Vec<&str> = cx
            .pending
            .keys()
            .copied()
            .filter(|name| name.starts_with("auth-tls-"))
            .collect();
        for name in names {
            if let Some(entry) = cx.take(name) {
                cx.fail_closed(
                    entry,
                    "client certificate authentication is not supported yet",
                );
            }
        }
    }
    if let Some(entry) = cx.take("satisfy") {
        match entry.value.trim() {
            // What sluice does: every restriction applies.
            "all" | "" => cx.applied(entry),
            // With one restriction, any and all are the same.
            "any" if !(source_ranges && external_auth) => cx.applied(entry),
            "any" => cx.fail_closed(
                entry,
                "satisfy: any (the source range or authentication suffices) is not supported yet",
            ),
            other => cx.invalid(
                entry,
                format!("value {other:?} is not all or any; all applies (every restriction)"),
            ),
        }
    }
}

/// `canary` and the `canary-*` keys ([`crate::canary`]).
fn canary(cx: &mut Cx<'_>) -> Option<CanaryRule> {
    let enabled = cx
        .value("canary", |v| {
            parse_bool(v).map_err(|e| format!("{e}; the Ingress is not a canary"))
        })
        .unwrap_or(false);
    let entries: Vec<_> = CANARY_KEYS
        .iter()
        .filter_map(|name| cx.take(name).map(|entry| (*name, entry)))
        .collect();
    if !enabled {
        for (_, entry) in entries {
            cx.invalid(entry, "has no effect without canary: \"true\"");
        }
        return None;
    }
    let values = entries
        .iter()
        .map(|(name, entry)| (*name, entry.value))
        .collect();
    let (rule, problems) = canary::parse_rule(&values);
    for (name, entry) in entries {
        match problems.iter().find(|(bad, _)| *bad == name) {
            Some((_, why)) => cx.invalid(entry, why.clone()),
            None => cx.applied(entry),
        }
    }
    Some(rule)
}

/// Go's `strconv.ParseBool`.
fn parse_bool(value: &str) -> Result<bool, String> {
    match value.trim() {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Ok(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Ok(false),
        _ => Err(format!(
            "value {} is not a boolean (true or false)",
            shown(value)
        )),
    }
}

// --- CORS --------------------------------------------------------------------------------

/// `enable-cors` and the `cors-*` keys, with ingress-nginx's defaults (`cors/main.go`).
fn cors(cx: &mut Cx<'_>) -> Option<Cors> {
    let enabled = cx
        .value("enable-cors", |v| {
            parse_bool(v).map_err(|e| format!("{e}; CORS stays off"))
        })
        .unwrap_or(false);
    if !enabled {
        for name in CORS_KEYS {
            if let Some(entry) = cx.take(name) {
                cx.invalid(entry, "has no effect without enable-cors: \"true\"");
            }
        }
        return None;
    }

    let origins = match cx.take("cors-allow-origin") {
        None => vec![OriginPattern::Any],
        Some(entry) => {
            let (origins, rejected) = parse_origins(entry.value);
            if rejected.is_empty() {
                cx.applied(entry);
            } else {
                let list = rejected
                    .iter()
                    .map(|r| shown(r))
                    .collect::<Vec<_>>()
                    .join(", ");
                let tail = if origins.is_empty() {
                    "; no origin is allowed"
                } else {
                    ""
                };
                cx.invalid(
                    entry,
                    format!(
                        "{list} ignored: not an origin (scheme://host[:port], \
                         scheme://*.domain[:port], null or *){tail}"
                    ),
                );
            }
            origins
        }
    };
    let allow_methods = cx
        .value("cors-allow-methods", |v| {
            parse_tokens(v, "method").map_err(|e| format!("{e}; the default is used"))
        })
        .unwrap_or(HeaderValue::from_static(DEFAULT_CORS_METHODS));
    let allow_headers = cx
        .value("cors-allow-headers", |v| {
            parse_tokens(v, "field name").map_err(|e| format!("{e}; the default is used"))
        })
        .unwrap_or(HeaderValue::from_static(DEFAULT_CORS_HEADERS));
    let expose_headers = cx.value("cors-expose-headers", |v| parse_tokens(v, "field name"));
    let allow_credentials = cx
        .value("cors-allow-credentials", |v| {
            parse_bool(v).map_err(|e| format!("{e}; the default true is used"))
        })
        .unwrap_or(true);
    let max_age = cx
        .value("cors-max-age", |v| {
            v.trim().parse::<u64>().map_err(|_| {
                format!(
                    "value {} is not a number of seconds; the default {DEFAULT_CORS_MAX_AGE} \
                     is used",
                    shown(v)
                )
            })
        })
        .unwrap_or(DEFAULT_CORS_MAX_AGE);
    Some(Cors {
        origins,
        allow_methods,
        allow_headers,
        expose_headers,
        allow_credentials,
        max_age,
    })
}

/// `cors-allow-origin`: the patterns, and the entries that are not origins. A `*` anywhere
/// allows every origin (ingress-nginx keeps only `*` then). Unlike ingress-nginx, which
/// falls back to `*` when the whole value fails its check, bad entries are only dropped.
fn parse_origins(value: &str) -> (Vec<OriginPattern>, Vec<&str>) {
    let mut origins = Vec::new();
    let mut rejected = Vec::new();
    for item in value.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        match parse_origin(item) {
            Some(pattern) => origins.push(pattern),
            None => rejected.push(item),
        }
    }
    if value.trim().is_empty() {
        rejected.push(value);
    }
    if origins.contains(&OriginPattern::Any) {
        origins = vec![OriginPattern::Any];
    }
    (origins, rejected)
}

/// One origin: `*`, `null`, `scheme://host[:port]` or `scheme://*.domain[:port]` (any
/// alphabetic scheme, as ingress-nginx), lowercased.
fn parse_origin(item: &str) -> Option<OriginPattern> {
    if item == "*" {
        return Some(OriginPattern::Any);
    }
    let lower = item.to_ascii_lowercase();
    if lower == "null" {
        return Some(OriginPattern::Exact(lower));
    }
    let (scheme, rest) = lower.split_once("://")?;
    if scheme.is_empty() || !scheme.bytes().all(|b| b.is_ascii_lowercase()) {
        return None;
    }
    let (wildcard, host_port) = match rest.strip_prefix("*.") {
        Some(rest) => (true, rest),
        None => (false, rest),
    };
    let (host, port) = match host_port.split_once(':') {
        Some((host, port)) => (host, Some(port)),
        None => (host_port, None),
    };
    let host_ok = !host.is_empty()
        && host.split('.').all(|label| {
            !label.is_empty()
                && label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-')
        });
    let port_ok = port.is_none_or(|p| {
        !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()) && p.parse::<u16>().is_ok()
    });
    if !host_ok || !port_ok {
        return None;
    }
    Some(if wildcard {
        OriginPattern::Wildcard {
            scheme: format!("{scheme}://"),
            suffix: format!(".{host_port}"),
        }
    } else {
        OriginPattern::Exact(lower)
    })
}

/// A comma-separated list of HTTP tokens (methods, field names), normalised to `a, b`.
fn parse_tokens(value: &str, what: &str) -> Result<HeaderValue, String> {
    let items: Vec<&str> = value
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .collect();
    if items.is_empty() {
        return Err(format!("value {} is empty", shown(value)));
    }
    if let Some(bad) = items.iter().find(|item| !item.bytes().all(is_tchar)) {
        return Err(format!(
            "value {}: {} is not a {what}",
            shown(value),
            shown(bad)
        ));
    }
    HeaderValue::from_str(&items.join(", "))
        .map_err(|_| format!("value {} is not a valid header value", shown(value)))
}

/// RFC 9110 `tchar`.
fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

// --- Upstream fields ---------------------------------------------------------------------

/// `upstream-vhost`: `host[:port]` sent as `Host`.
fn parse_upstream_vhost(value: &str) -> Result<HeaderValue, String> {
    let v = value.trim();
    no_nginx_variables(value, v)?;
    let bad = || format!("value {} is not a host[:port]", shown(value));
    let (host_ok, port) = if let Some(rest) = v.strip_prefix('[') {
        let (ip, after) = rest.split_once(']').ok_or_else(bad)?;
        let port = match after {
            "" => None,
            _ => Some(after.strip_prefix(':').ok_or_else(bad)?),
        };
        (ip.parse::<Ipv6Addr>().is_ok(), port)
    } else {
        let (host, port) = match v.split_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (v, None),
        };
        let ok = !host.is_empty()
            && host
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_'));
        (ok, port)
    };
    let port_ok = port.is_none_or(|p| {
        !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()) && p.parse::<u16>().is_ok()
    });
    if !host_ok || !port_ok {
        return Err(bad());
    }
    HeaderValue::from_str(v).map_err(|_| bad())
}

/// `x-forwarded-prefix`: a non-empty value sent as `X-Forwarded-Prefix`.
fn parse_forwarded_prefix(value: &str) -> Result<HeaderValue, String> {
    let v = value.trim();
    if v.is_empty() {
        return Err(format!("value {} is empty", shown(value)));
    }
    no_nginx_variables(value, v)?;
    HeaderValue::from_str(v)
        .map_err(|_| format!("value {} is not a valid header value", shown(value)))
}

/// `proxy-next-upstream`: nginx's space-separated tokens (`error timeout http_502`, `off`).
fn parse_next_upstream(value: &str) -> Result<NextUpstream, String> {
    let mut next = NextUpstream {
        error: false,
        timeout: false,
        ..NextUpstream::default()
    };
    let tokens: Vec<&str> = value.split_whitespace().collect();
    if tokens.is_empty() {
        return Err(format!("value {} lists nothing", shown(value)));
    }
    for token in &tokens {
        match *token {
            "off" if tokens.len() == 1 => next.tries = 1,
            "error" => next.error = true,
            "timeout" => next.timeout = true,
            "invalid_header" => next.invalid_header = true,
            "non_idempotent" => next.non_idempotent = true,
            "http_500" | "http_502" | "http_503" | "http_504" | "http_403" | "http_404"
            | "http_429" => {
                // Checked just above: three digits follow "http_".
                next.statuses.push(token[5..].parse().unwrap_or(502));
            }
            other => {
                return Err(format!(
                    "value {} has {other:?}, not one of error, timeout, invalid_header, \
                     http_500, http_502, http_503, http_504, http_403, http_404, http_429, \
                     non_idempotent, off",
                    shown(value)
                ));
            }
        }
    }
    next.statuses.sort_unstable();
    next.statuses.dedup();
    Ok(next)
}

/// `proxy-next-upstream-tries`: endpoints tried in all; nginx's `0` (no limit) is capped
/// at the proxy's most, 8.
fn parse_tries(value: &str) -> Result<u8, String> {
    match value.trim().parse::<u32>() {
        Ok(0) => Ok(8),
        Ok(n) => Ok(n.min(8) as u8),
        Err(_) => Err(format!("value {} is not a number of tries", shown(value))),
    }
}

/// `default-backend`: a Service name (an RFC 1035 label, as Kubernetes requires).
fn parse_service_name(value: &str) -> Result<String, String> {
    let v = value.trim();
    let label = !v.is_empty()
        && v.len() <= 63
        && v.starts_with(|c: char| c.is_ascii_lowercase())
        && !v.ends_with('-')
        && v.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
    if label {
        Ok(v.to_owned())
    } else {
        Err(format!("value {} is not a Service name", shown(value)))
    }
}

/// `custom-http-errors`: comma-separated status codes (ingress-nginx takes any integer;
/// only 400-599 can be errors a backend answers with).
fn parse_status_list(value: &str) -> Result<Vec<u16>, String> {
    let mut codes = Vec::new();
    for part in value.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        match part.parse::<u16>() {
            Ok(code) if (400..=599).contains(&code) => codes.push(code),
            _ => {
                return Err(format!(
                    "value {} has {part:?}, not a status code from 400 to 599",
                    shown(value)
                ));
            }
        }
    }
    if codes.is_empty() {
        return Err(format!("value {} lists no status code", shown(value)));
    }
    codes.sort_unstable();
    codes.dedup();
    Ok(codes)
}

/// `rewrite-target`: an absolute path (or http(s) URL) where `$1`..`$9` name captures;
/// other nginx variables (`$uri`, `$request_uri`, ...) are not expanded by sluice.
fn parse_rewrite_target(value: &str) -> Result<String, String> {
    let v = value.trim();
    if !(v.starts_with('/') || v.starts_with("http://") || v.starts_with("https://")) {
        return Err(format!(
            "value {} is not an absolute path or an http(s) URL",
            shown(value)
        ));
    }
    let bytes = v.as_bytes();
    for (at, &b) in bytes.iter().enumerate() {
        if b == b'$' && !bytes.get(at + 1).is_some_and(u8::is_ascii_digit) {
            return Err(format!(
                "value {} uses an nginx variable; only capture groups ($1..$9) are expanded",
                shown(value)
            ));
        }
    }
    HeaderValue::from_str(v)
        .map(|_| v.to_owned())
        .map_err(|_| format!("value {} is not a valid path", shown(value)))
}

/// `request-headers`/`response-headers`: one `Name: value` per line; blank lines skipped.
fn parse_fields(value: &str) -> Result<Vec<(HeaderName, HeaderValue)>, String> {
    let mut fields = Vec::new();
    for (index, line) in value.lines().enumerate() {
        let number = index + 1;
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        let Some((name, field_value)) = line.split_once(':') else {
            return Err(format!(
                "line {number} ({}) is not \"Name: value\"",
                shown(line)
            ));
        };
        let name = HeaderName::from_bytes(name.trim().as_bytes())
            .map_err(|_| format!("line {number}: {} is not a field name", shown(name.trim())))?;
        if FORBIDDEN_FIELDS.contains(&name.as_str()) {
            return Err(format!(
                "line {number}: {name} is a hop-by-hop or framing field and cannot be set"
            ));
        }
        let field_value = HeaderValue::from_str(field_value.trim()).map_err(|_| {
            format!(
                "line {number}: {} is not a valid field value",
                shown(field_value.trim())
            )
        })?;
        fields.push((name, field_value));
    }
    if fields.is_empty() {
        return Err(format!(
            "value {} has no \"Name: value\" line",
            shown(value)
        ));
    }
    Ok(fields)
}

/// A value quoted for a message, cut short when long.
fn shown(value: &str) -> String {
    const MAX: usize = 80;
    match value.char_indices().nth(MAX) {
        Some((cut, _)) => format!("{:?}…", &value[..cut]),
        None => format!("{value:?}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use proptest::prelude::*;

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    fn nginx(name: &str) -> String {
        format!("{NGINX_PREFIX}{name}")
    }

    fn sluice(name: &str) -> String {
        format!("{SLUICE_PREFIX}{name}")
    }

    /// Parses `name: value` under the nginx prefix.
    fn one(name: &str, value: &str) -> Parsed {
        parse(&map(&[(&nginx(name), value)]))
    }

    /// The only problem, for `name` under the nginx prefix.
    fn problem(parsed: &Parsed, name: &str) -> Problem {
        assert_eq!(parsed.problems.len(), 1, "{:?}", parsed.problems);
        let problem = parsed.problems[0].clone();
        assert_eq!(problem.annotation, nginx(name));
        problem
    }

    fn invalid(name: &str, value: &str) -> (Parsed, String) {
        let parsed = one(name, value);
        let p = problem(&parsed, name);
        assert_eq!(p.reason, Reason::InvalidAnnotation, "{p:?}");
        (parsed, p.detail)
    }

    fn hv(s: &'static str) -> HeaderValue {
        HeaderValue::from_static(s)
    }

    fn cidrs(list: &[&str]) -> Vec<Cidr> {
        list.iter().map(|c| parse_cidr(c).unwrap()).collect()
    }

    #[test]
    fn no_annotations_changes_nothing() {
        let parsed = parse(&BTreeMap::new());
        assert_eq!(parsed.policy, Policy::default());
        assert!(parsed.ssl_redirect);
        assert!(!parsed.force_ssl_redirect);
        assert!(parsed.problems.is_empty());
    }

    #[test]
    fn keys_outside_both_prefixes_are_ignored() {
        let parsed = parse(&map(&[
            ("kubernetes.io/ingress.class", "nginx"),
            ("nginx.org/proxy-body-size", "1x"),
            ("example.com/sluice.dev/app-root", "/x"),
        ]));
        assert_eq!(parsed.policy, Policy::default());
        assert!(parsed.problems.is_empty());
    }

    #[test]
    fn sluice_prefix_wins_silently_over_nginx() {
        let parsed = parse(&map(&[
            (&nginx("proxy-body-size"), "1m"),
            (&sluice("proxy-body-size"), "2m"),
            // The overridden one is not even validated.
            (&nginx("app-root"), "not a path"),
            (&sluice("app-root"), "/app"),
        ]));
        assert_eq!(parsed.policy.body_limit, Some(2 << 20));
        assert_eq!(parsed.policy.app_root, Some(hv("/app")));
        assert!(parsed.problems.is_empty(), "{:?}", parsed.problems);
        // Also for unsupported keys: only the winning key is reported.
        let parsed = parse(&map(&[
            (&nginx("limit-rate"), "5"),
            (&sluice("limit-rate"), "5"),
        ]));
        assert_eq!(parsed.problems.len(), 1);
        assert_eq!(parsed.problems[0].annotation, sluice("limit-rate"));
    }

    #[test]
    fn proxy_next_upstream_takes_nginx_tokens() {
        let parsed = parse(&map(&[
            (
                &nginx("proxy-next-upstream"),
                "error http_502 http_503 non_idempotent",
            ),
            (&nginx("proxy-next-upstream-tries"), "5"),
        ]));
        let next = &parsed.policy.next_upstream;
        assert!(next.error && !next.timeout && next.non_idempotent);
        assert_eq!(next.statuses, vec![502, 503]);
        assert_eq!(next.tries, 5);
        assert!(parsed.problems.is_empty(), "{:?}", parsed.problems);
        let off = parse(&map(&[(&nginx("proxy-next-upstream"), "off")]));
        assert_eq!(off.policy.next_upstream.tries, 1);
        assert_eq!(Policy::default().next_upstream.tries, 3);
        for bad in ["", "http_418", "error off"] {
            let parsed = parse(&map(&[(&nginx("proxy-next-upstream"), bad)]));
            assert_eq!(
                parsed.problems[0].reason,
                Reason::InvalidAnnotation,
                "{bad:?}"
            );
        }
    }

    #[test]
    fn default_backend_and_custom_http_errors() {
        let parsed = parse(&map(&[
            (&nginx("default-backend"), "errors"),
            (&nginx("custom-http-errors"), "404, 503,404"),
        ]));
        assert_eq!(parsed.default_backend.as_deref(), Some("errors"));
        assert_eq!(parsed.policy.custom_http_errors, vec![404, 503]);
        assert!(parsed.problems.is_empty(), "{:?}", parsed.problems);
        for (key, bad) in [
            ("default-backend", "Errors"),
            ("default-backend", "ns/errors"),
            ("custom-http-errors", "200"),
            ("custom-http-errors", "abc"),
            ("custom-http-errors", ""),
        ] {
            let parsed = parse(&map(&[(&nginx(key), bad)]));
            assert_eq!(parsed.problems.len(), 1, "{key}={bad}");
            assert_eq!(
                parsed.problems[0].reason,
                Reason::InvalidAnnotation,
                "{key}={bad}"
            );
        }
    }

    #[test]
    fn rewrite_target_allows_captures_only() {
        let parsed = parse(&map(&[
            (&nginx("rewrite-target"), "/$2"),
            (&nginx("use-regex"), "true"),
        ]));
        assert_eq!(parsed.rewrite_target.as_deref(), Some("/$2"));
        assert!(parsed.use_regex);
        assert!(parsed.problems.is_empty(), "{:?}", parsed.problems);
        for bad in ["$2", "/x$request_uri", "foo"] {
            let parsed = parse(&map(&[(&nginx("rewrite-target"), bad)]));
            assert_eq!(parsed.rewrite_target, None, "{bad}");
            assert_eq!(
                parsed.problems[0].reason,
                Reason::InvalidAnnotation,
                "{bad}"
            );
        }
    }

    #[test]
    fn sluice_prefix_alone_works_like_nginx() {
        let parsed = parse(&map(&[(&sluice("ssl-redirect"), "false")]));
        assert!(!parsed.ssl_redirect);
        assert!(parsed.problems.is_empty());
    }

    #[test]
    fn booleans_parse_like_go_strconv_parse_bool() {
        for t in ["1", "t", "T", "TRUE", "true", "True"] {
            assert_eq!(parse_bool(t), Ok(true), "{t}");
        }
        for f in ["0", "f", "F", "FALSE", "false", "False"] {
            assert_eq!(parse_bool(f), Ok(false), "{f}");
        }
        for bad in ["yes", "on", "tRuE", "", "2"] {
            assert!(parse_bool(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn ssl_redirect_defaults_to_true_like_the_ingress_nginx_configmap() {
        assert!(!one("ssl-redirect", "false").ssl_redirect);
        assert!(one("ssl-redirect", "true").ssl_redirect);
        let (parsed, detail) = invalid("ssl-redirect", "yes");
        assert!(parsed.ssl_redirect);
        assert_eq!(
            detail,
            "value \"yes\" is not a boolean (true or false); ssl-redirect stays true"
        );
        // The compiler decides https_redirect per host.
        assert_eq!(one("ssl-redirect", "true").policy.https_redirect, None);
    }

    #[test]
    fn force_ssl_redirect_defaults_to_false() {
        assert!(one("force-ssl-redirect", "true").force_ssl_redirect);
        assert!(!one("force-ssl-redirect", "False").force_ssl_redirect);
        let (parsed, _) = invalid("force-ssl-redirect", "always");
        assert!(!parsed.force_ssl_redirect);
        assert_eq!(parsed.policy.https_redirect, None);
    }

    #[test]
    fn permanent_redirect_is_301_or_permanent_redirect_code_300_to_308() {
        let parsed = one("permanent-redirect", "https://example.com/new?a=b");
        assert_eq!(
            parsed.policy.redirect,
            Some(Redirect {
                status: 301,
                location: hv("https://example.com/new?a=b")
            })
        );
        assert!(parsed.problems.is_empty());
        assert_eq!(
            one("permanent-redirect", "/elsewhere").policy.redirect,
            Some(Redirect {
                status: 301,
                location: hv("/elsewhere")
            })
        );
        let with_code = |code: &str| {
            parse(&map(&[
                (&nginx("permanent-redirect"), "https://example.com"),
                (&nginx("permanent-redirect-code"), code),
            ]))
        };
        let parsed = with_code("308");
        assert_eq!(parsed.policy.redirect.as_ref().unwrap().status, 308);
        assert!(parsed.problems.is_empty());
        for bad in ["309", "200", "abc", "-301"] {
            let parsed = with_code(bad);
            assert_eq!(
                parsed.policy.redirect.as_ref().unwrap().status,
                301,
                "{bad}"
            );
            let p = problem(&parsed, "permanent-redirect-code");
            assert_eq!(p.reason, Reason::InvalidAnnotation);
            assert_eq!(
                p.detail,
                format!("value {bad:?} is not a redirect status (300 to 308); 301 is used")
            );
        }
    }

    #[test]
    fn redirect_locations_must_be_http_urls_or_paths() {
        for bad in [
            "",
            "example.com",
            "ftp://example.com",
            "//evil.example",
            "https://",
            "https://exa mple.com",
            "/a\nb",
            "https://example.com$request_uri",
        ] {
            let (parsed, _) = invalid("permanent-redirect", bad);
            assert_eq!(parsed.policy.redirect, None, "{bad:?}");
        }
        let (_, detail) = invalid("permanent-redirect", "https://new.example$request_uri");
        assert!(detail.contains("nginx variables"), "{detail}");
    }

    #[test]
    fn temporal_redirect_is_302_or_temporal_redirect_code_300_to_307() {
        let parsed = one("temporal-redirect", "http://example.com/tmp");
        assert_eq!(
            parsed.policy.redirect,
            Some(Redirect {
                status: 302,
                location: hv("http://example.com/tmp")
            })
        );
        let with_code = |code: &str| {
            parse(&map(&[
                (&nginx("temporal-redirect"), "http://example.com"),
                (&nginx("temporal-redirect-code"), code),
            ]))
        };
        assert_eq!(with_code("307").policy.redirect.unwrap().status, 307);
        let parsed = with_code("308");
        assert_eq!(parsed.policy.redirect.as_ref().unwrap().status, 302);
        assert_eq!(
            problem(&parsed, "temporal-redirect-code").detail,
            "value \"308\" is not a redirect status (300 to 307); 302 is used"
        );
    }

    #[test]
    fn temporal_redirect_wins_over_permanent_like_ingress_nginx() {
        let parsed = parse(&map(&[
            (&nginx("permanent-redirect"), "https://p.example"),
            (&nginx("permanent-redirect-code"), "308"),
            (&nginx("temporal-redirect"), "https://t.example"),
        ]));
        assert_eq!(
            parsed.policy.redirect,
            Some(Redirect {
                status: 302,
                location: hv("https://t.example")
            })
        );
        let names: Vec<_> = parsed
            .problems
            .iter()
            .map(|p| p.annotation.as_str())
            .collect();
        assert_eq!(
            names,
            [
                nginx("permanent-redirect"),
                nginx("permanent-redirect-code")
            ]
        );
        assert!(
            parsed
                .problems
                .iter()
                .all(|p| p.reason == Reason::InvalidAnnotation
                    && p.detail.contains("temporal-redirect is also set"))
        );
        // An invalid temporal redirect counts as absent: the permanent one applies.
        let parsed = parse(&map(&[
            (&nginx("permanent-redirect"), "https://p.example"),
            (&nginx("temporal-redirect"), "nope"),
            (&nginx("temporal-redirect-code"), "307"),
        ]));
        assert_eq!(parsed.policy.redirect.as_ref().unwrap().status, 301);
        assert_eq!(parsed.problems.len(), 2);
    }

    #[test]
    fn redirect_codes_without_their_redirect_have_no_effect() {
        let (parsed, detail) = invalid("permanent-redirect-code", "308");
        assert_eq!(parsed.policy.redirect, None);
        assert_eq!(detail, "has no effect without a valid permanent-redirect");
        let (_, detail) = invalid("temporal-redirect-code", "307");
        assert_eq!(detail, "has no effect without a valid temporal-redirect");
    }

    #[test]
    fn app_root_must_be_a_path_like_ingress_nginx() {
        let parsed = one("app-root", "/app1");
        assert_eq!(parsed.policy.app_root, Some(hv("/app1")));
        assert!(parsed.problems.is_empty());
        for bad in [
            "app1",
            "https://example.com/app",
            "//evil.example",
            "/a b",
            "",
            "/$1",
        ] {
            let (parsed, _) = invalid("app-root", bad);
            assert_eq!(parsed.policy.app_root, None, "{bad:?}");
        }
    }

    #[test]
    fn allowlist_source_range_takes_cidrs_and_bare_addresses() {
        let parsed = one(
            "allowlist-source-range",
            "10.0.0.0/8, 192.168.1.7 ,2001:db8::/32",
        );
        assert_eq!(
            parsed.policy.allow,
            cidrs(&["10.0.0.0/8", "192.168.1.7", "2001:db8::/32"])
        );
        assert!(parsed.policy.deny.is_empty());
        assert!(parsed.problems.is_empty());
        let parsed = one("whitelist-source-range", "10.0.0.0/8");
        assert_eq!(parsed.policy.allow, cidrs(&["10.0.0.0/8"]));
        assert!(parsed.problems.is_empty());
    }

    #[test]
    fn an_invalid_source_range_refuses_everyone_as_ingress_nginx_denies_the_location() {
        for name in [
            "allowlist-source-range",
            "whitelist-source-range",
            "denylist-source-range",
        ] {
            for bad in [
                "10.0.0.0/8,nope",
                "10.0.0.0/33",
                "",
                "10.0.0.1,",
                "10.0.0.0/8;",
            ] {
                let (parsed, detail) = invalid(name, bad);
                assert!(parsed.policy.allow.is_empty(), "{name} {bad:?}");
                assert_eq!(parsed.policy.deny, cidrs(&["0.0.0.0/0", "::/0"]));
                assert!(detail.contains("every client is refused"), "{detail}");
            }
        }
        let (_, detail) = invalid("allowlist-source-range", "10.0.0.0/8,nope");
        assert_eq!(
            detail,
            "value \"10.0.0.0/8,nope\" is not a list of IP addresses or CIDRs (\"nope\" is not \
             an IP address or CIDR); every client is refused (403), as ingress-nginx denies the \
             location"
        );
    }

    #[test]
    fn allowlist_wins_over_whitelist_unless_empty() {
        let parsed = parse(&map(&[
            (&nginx("allowlist-source-range"), "10.0.0.0/8"),
            (&nginx("whitelist-source-range"), "192.168.0.0/16"),
        ]));
        assert_eq!(parsed.policy.allow, cidrs(&["10.0.0.0/8"]));
        let p = problem(&parsed, "whitelist-source-range");
        assert_eq!(p.reason, Reason::InvalidAnnotation);
        assert!(
            p.detail
                .starts_with("has no effect: allowlist-source-range is used")
        );
        // ingress-nginx reads the alias when the annotation itself is empty.
        let parsed = parse(&map(&[
            (&nginx("allowlist-source-range"), ""),
            (&nginx("whitelist-source-range"), "192.168.0.0/16"),
        ]));
        assert_eq!(parsed.policy.allow, cidrs(&["192.168.0.0/16"]));
        assert!(parsed.policy.deny.is_empty());
        let p = problem(&parsed, "allowlist-source-range");
        assert!(
            p.detail
                .starts_with("has no effect: whitelist-source-range is used")
        );
    }

    #[test]
    fn denylist_source_range_fills_deny() {
        let parsed = parse(&map(&[
            (&nginx("denylist-source-range"), "10.0.0.7"),
            (&nginx("allowlist-source-range"), "10.0.0.0/8"),
        ]));
        assert_eq!(parsed.policy.deny, cidrs(&["10.0.0.7"]));
        assert_eq!(parsed.policy.allow, cidrs(&["10.0.0.0/8"]));
        assert!(parsed.problems.is_empty());
    }

    #[test]
    fn proxy_body_size_uses_nginx_size_syntax() {
        for (value, bytes) in [
            ("0", 0),
            ("1000", 1000),
            ("8k", 8 << 10),
            ("8K", 8 << 10),
            ("10m", 10 << 20),
            ("10M", 10 << 20),
            ("2g", 2 << 30),
            (" 1G ", 1 << 30),
        ] {
            let parsed = one("proxy-body-size", value);
            assert_eq!(parsed.policy.body_limit, Some(bytes), "{value}");
            assert!(parsed.problems.is_empty());
        }
        for bad in ["12x", "", "m", "1.5m", "-1", "1kk", "99999999999999999999"] {
            let (parsed, _) = invalid("proxy-body-size", bad);
            assert_eq!(parsed.policy.body_limit, None, "{bad:?}");
        }
        assert_eq!(
            invalid("proxy-body-size", "12x").1,
            "value \"12x\" is not a size; expected bytes with an optional unit: k, m, g (nginx), \
             KiB, MiB, GiB, KB, MB, GB"
        );
        assert_eq!(
            invalid("proxy-body-size", "99999999999g").1,
            "value \"99999999999g\" is too large"
        );
    }

    #[test]
    fn proxy_timeouts_take_ingress_nginx_seconds_or_nginx_time_units() {
        for (value, duration) in [
            ("60", Duration::from_secs(60)),
            ("30s", Duration::from_secs(30)),
            ("2m", Duration::from_secs(120)),
            ("1h", Duration::from_secs(3600)),
            ("500ms", Duration::from_millis(500)),
            ("1m30s", Duration::from_secs(90)),
            ("1m 30s", Duration::from_secs(90)),
            ("1d", Duration::from_secs(86_400)),
            // The project's one syntax also takes Go's fractions, as every flag does.
            ("1.5s", Duration::from_millis(1500)),
        ] {
            for (name, get) in [
                (
                    "proxy-connect-timeout",
                    (|p: &Policy| p.connect_timeout) as fn(&Policy) -> Option<Duration>,
                ),
                ("proxy-read-timeout", |p: &Policy| p.read_timeout),
                ("proxy-send-timeout", |p: &Policy| p.send_timeout),
            ] {
                let parsed = one(name, value);
                assert_eq!(get(&parsed.policy), Some(duration), "{name} {value}");
                assert!(parsed.problems.is_empty());
            }
        }
        for bad in [
            "",
            "abc",
            "30x",
            "s",
            "-1",
            "30s1m",
            "1s1s",
            "5 s",
            "99999999999999999999y",
        ] {
            let (parsed, _) = invalid("proxy-read-timeout", bad);
            assert_eq!(parsed.policy.read_timeout, None, "{bad:?}");
        }
        assert_eq!(
            invalid("proxy-connect-timeout", "0").1,
            "value \"0\" must be greater than zero"
        );
        assert_eq!(
            invalid("proxy-send-timeout", "0s").1,
            "value \"0s\" must be greater than zero"
        );
    }

    fn cors_of(pairs: &[(&str, &str)]) -> (Option<Cors>, Vec<Problem>) {
        let mut all = vec![(nginx("enable-cors"), "true".to_owned())];
        all.extend(pairs.iter().map(|(k, v)| (nginx(k), (*v).to_owned())));
        let parsed = parse(&all.into_iter().collect());
        (parsed.policy.cors, parsed.problems)
    }

    #[test]
    fn enable_cors_uses_ingress_nginx_defaults() {
        let (cors, problems) = cors_of(&[]);
        assert!(problems.is_empty());
        assert_eq!(
            cors,
            Some(Cors {
                origins: vec![OriginPattern::Any],
                allow_methods: hv("GET, PUT, POST, DELETE, PATCH, OPTIONS"),
                allow_headers: hv(
                    "DNT,Keep-Alive,User-Agent,X-Requested-With,If-Modified-Since,Cache-Control,\
                     Content-Type,Range,Authorization"
                ),
                expose_headers: None,
                allow_credentials: true,
                max_age: 1_728_000,
            })
        );
        assert_eq!(one("enable-cors", "false").policy.cors, None);
        let (parsed, detail) = invalid("enable-cors", "yes");
        assert_eq!(parsed.policy.cors, None);
        assert!(detail.ends_with("CORS stays off"));
    }

    #[test]
    fn cors_keys_without_enable_cors_have_no_effect() {
        for enable in [None, Some("false"), Some("bogus")] {
            let mut pairs = vec![
                (nginx("cors-allow-origin"), "https://a.example".to_owned()),
                (nginx("cors-max-age"), "10".to_owned()),
            ];
            if let Some(v) = enable {
                pairs.push((nginx("enable-cors"), v.to_owned()));
            }
            let parsed = parse(&pairs.into_iter().collect());
            assert_eq!(parsed.policy.cors, None);
            let no_effect: Vec<_> = parsed
                .problems
                .iter()
                .filter(|p| p.detail == "has no effect without enable-cors: \"true\"")
                .map(|p| p.annotation.clone())
                .collect();
            assert_eq!(
                no_effect,
                [nginx("cors-allow-origin"), nginx("cors-max-age")]
            );
            assert!(
                parsed
                    .problems
                    .iter()
                    .all(|p| p.reason == Reason::InvalidAnnotation)
            );
        }
    }

    #[test]
    fn cors_allow_origin_is_a_list_of_origins_and_wildcards() {
        let (cors, problems) = cors_of(&[(
            "cors-allow-origin",
            "https://A.example.com, http://b.example:8080,https://*.Example.org, myapp://x, null",
        )]);
        assert!(problems.is_empty(), "{problems:?}");
        assert_eq!(
            cors.unwrap().origins,
            [
                OriginPattern::Exact("https://a.example.com".into()),
                OriginPattern::Exact("http://b.example:8080".into()),
                OriginPattern::Wildcard {
                    scheme: "https://".into(),
                    suffix: ".example.org".into()
                },
                OriginPattern::Exact("myapp://x".into()),
                OriginPattern::Exact("null".into()),
            ]
        );
        // A "*" anywhere allows everyone (ingress-nginx keeps only "*").
        let (cors, _) = cors_of(&[("cors-allow-origin", "https://a.example, *")]);
        assert_eq!(cors.unwrap().origins, [OriginPattern::Any]);
    }

    #[test]
    fn invalid_cors_origins_are_dropped_never_widened_to_any() {
        let (cors, problems) = cors_of(&[(
            "cors-allow-origin",
            "https://a.example/, https://ok.example, a.example, https://*.x.example:99999",
        )]);
        assert_eq!(
            cors.unwrap().origins,
            [OriginPattern::Exact("https://ok.example".into())]
        );
        assert_eq!(problems.len(), 1);
        assert_eq!(problems[0].reason, Reason::InvalidAnnotation);
        assert_eq!(
            problems[0].detail,
            "\"https://a.example/\", \"a.example\", \"https://*.x.example:99999\" ignored: not \
             an origin (scheme://host[:port], scheme://*.domain[:port], null or *)"
        );
        let (cors, problems) = cors_of(&[("cors-allow-origin", "")]);
        assert!(cors.unwrap().origins.is_empty());
        assert!(problems[0].detail.ends_with("no origin is allowed"));
    }

    #[test]
    fn cors_allow_methods_and_headers_are_token_lists_else_the_default() {
        let (cors, problems) = cors_of(&[
            ("cors-allow-methods", "GET,POST , PUT"),
            ("cors-allow-headers", "X-Custom,Content-Type"),
            ("cors-expose-headers", "*, X-Total"),
        ]);
        assert!(problems.is_empty());
        let cors = cors.unwrap();
        assert_eq!(cors.allow_methods, hv("GET, POST, PUT"));
        assert_eq!(cors.allow_headers, hv("X-Custom, Content-Type"));
        assert_eq!(cors.expose_headers, Some(hv("*, X-Total")));
        let (cors, problems) = cors_of(&[
            ("cors-allow-methods", "GET; rm"),
            ("cors-allow-headers", "X(1)"),
            ("cors-expose-headers", ""),
        ]);
        let cors = cors.unwrap();
        assert_eq!(cors.allow_methods, hv(DEFAULT_CORS_METHODS));
        assert_eq!(cors.allow_headers, hv(DEFAULT_CORS_HEADERS));
        assert_eq!(cors.expose_headers, None);
        assert_eq!(problems.len(), 3);
        assert_eq!(
            problems[1].detail,
            "value \"GET; rm\": \"GET; rm\" is not a method; the default is used"
        );
    }

    #[test]
    fn cors_allow_credentials_and_max_age() {
        let (cors, problems) =
            cors_of(&[("cors-allow-credentials", "false"), ("cors-max-age", "600")]);
        assert!(problems.is_empty());
        let cors = cors.unwrap();
        assert!(!cors.allow_credentials);
        assert_eq!(cors.max_age, 600);
        let (cors, problems) =
            cors_of(&[("cors-allow-credentials", "nope"), ("cors-max-age", "-1")]);
        let cors = cors.unwrap();
        assert!(cors.allow_credentials);
        assert_eq!(cors.max_age, DEFAULT_CORS_MAX_AGE);
        assert_eq!(problems.len(), 2);
    }

    #[test]
    fn upstream_vhost_is_host_and_optional_port() {
        for ok in [
            "internal.example",
            "internal.example:8080",
            "10.0.0.1:80",
            "[::1]:8443",
            "a_b",
        ] {
            let parsed = one("upstream-vhost", ok);
            assert_eq!(
                parsed.policy.upstream_vhost,
                Some(HeaderValue::from_str(ok).unwrap())
            );
            assert!(parsed.problems.is_empty(), "{ok}");
        }
        for bad in [
            "",
            "a b",
            "host:",
            "host:99999",
            "http://x",
            "$host",
            "[::1",
            "a/b",
        ] {
            let (parsed, _) = invalid("upstream-vhost", bad);
            assert_eq!(parsed.policy.upstream_vhost, None, "{bad:?}");
        }
    }

    #[test]
    fn x_forwarded_prefix_is_a_literal_header_value() {
        let parsed = one("x-forwarded-prefix", "/api");
        assert_eq!(parsed.policy.forwarded_prefix, Some(hv("/api")));
        for bad in ["", "  ", "/$1", "/a\u{7}"] {
            let (parsed, _) = invalid("x-forwarded-prefix", bad);
            assert_eq!(parsed.policy.forwarded_prefix, None, "{bad:?}");
        }
    }

    #[test]
    fn request_and_response_headers_are_name_value_lines() {
        let parsed = parse(&map(&[
            (&sluice("request-headers"), "X-Env: prod\n\nX-Team:  web \n"),
            (
                &sluice("response-headers"),
                "Strict-Transport-Security: max-age=31536000\r\nX-Empty:",
            ),
        ]));
        assert!(parsed.problems.is_empty(), "{:?}", parsed.problems);
        assert_eq!(
            parsed.policy.request_headers,
            [
                (HeaderName::from_static("x-env"), hv("prod")),
                (HeaderName::from_static("x-team"), hv("web")),
            ]
        );
        assert_eq!(
            parsed.policy.response_headers,
            [
                (
                    HeaderName::from_static("strict-transport-security"),
                    hv("max-age=31536000")
                ),
                (HeaderName::from_static("x-empty"), hv("")),
            ]
        );
    }

    #[test]
    fn header_annotations_refuse_bad_lines_and_hop_by_hop_fields() {
        for (bad, why) in [
            (
                "X-Ok: 1\nno colon",
                "line 2 (\"no colon\") is not \"Name: value\"",
            ),
            ("Bad Name: 1", "line 1: \"Bad Name\" is not a field name"),
            (
                "Connection: close",
                "line 1: connection is a hop-by-hop or framing field and cannot be set",
            ),
            (
                "Host: x",
                "line 1: host is a hop-by-hop or framing field and cannot be set",
            ),
            (
                "Transfer-Encoding: chunked",
                "line 1: transfer-encoding is a hop-by-hop or framing field and cannot be set",
            ),
            (
                "X-A: \u{1}",
                "line 1: \"\\u{1}\" is not a valid field value",
            ),
            ("", "value \"\" has no \"Name: value\" line"),
        ] {
            for name in ["request-headers", "response-headers"] {
                let parsed = parse(&map(&[(&sluice(name), bad)]));
                assert!(parsed.policy.request_headers.is_empty());
                assert!(parsed.policy.response_headers.is_empty());
                assert_eq!(parsed.problems.len(), 1);
                assert_eq!(parsed.problems[0].reason, Reason::InvalidAnnotation);
                assert_eq!(parsed.problems[0].detail, why);
            }
        }
    }

    #[test]
    fn header_annotations_are_sluice_only() {
        let parsed = one("request-headers", "X-A: 1");
        assert!(parsed.policy.request_headers.is_empty());
        let p = problem(&parsed, "request-headers");
        assert_eq!(p.reason, Reason::UnsupportedAnnotation);
        assert_eq!(
            p.detail,
            "not an ingress-nginx annotation; use sluice.dev/request-headers"
        );
    }

    #[test]
    fn snippets_are_refused() {
        for name in [
            "configuration-snippet",
            "server-snippet",
            "auth-snippet",
            "stream-snippet",
            "modsecurity-snippet",
            "anything-snippet",
        ] {
            let parsed = one(name, "more_set_headers \"X: 1\";");
            let p = problem(&parsed, name);
            assert_eq!(p.reason, Reason::SnippetRefused);
            assert!(p.detail.starts_with(
                "snippets are nginx configuration text; sluice never applies annotation values \
                 as configuration"
            ));
            assert_eq!(parsed.policy, Policy::default());
        }
        let parsed = parse(&map(&[(&sluice("server-snippet"), "x")]));
        assert_eq!(parsed.problems[0].reason, Reason::SnippetRefused);
    }

    #[test]
    fn unknown_keys_are_reported_as_unsupported() {
        for (name, detail) in [
            (
                "limit-rate",
                "not supported by sluice: response bandwidth limits",
            ),
            (
                "auth-realm",
                "not supported by sluice: basic authentication is not supported yet",
            ),
            (
                "auth-tls-verify-depth",
                "not supported by sluice: client certificate authentication",
            ),
            (
                "proxy-ssl-ciphers",
                "not supported by sluice: TLS settings towards backends",
            ),
            (
                "disable-proxy-intercept-errors",
                "not supported by sluice: not supported yet",
            ),
            (
                "custom-headers",
                "not supported by sluice: use sluice.dev/response-headers",
            ),
            (
                "proxy-body-sise",
                "not supported by sluice (did you mean proxy-body-size?)",
            ),
            ("something-else-entirely", "not supported by sluice"),
        ] {
            let parsed = one(name, "x");
            let p = problem(&parsed, name);
            assert_eq!(p.reason, Reason::UnsupportedAnnotation);
            assert!(p.detail.starts_with(detail), "{name}: {}", p.detail);
        }
        let parsed = parse(&map(&[(&sluice("typo"), "x")]));
        assert_eq!(parsed.problems[0].annotation, "sluice.dev/typo");
        assert_eq!(parsed.problems[0].detail, "not supported by sluice");
    }

    /// ingress-nginx never serves a location open when its authentication annotations
    /// cannot be applied (it marks the location denied: 503); sluice closes the routes.
    #[test]
    fn access_annotations_sluice_cannot_honour_fail_closed() {
        let closed: &[&[(&str, &str)]] = &[
            &[("auth-type", "basic"), ("auth-secret", "htpasswd")],
            &[("auth-type", "digest")],
            &[("auth-secret", "htpasswd"), ("auth-realm", "Staff only")],
            &[("auth-type", "nonsense")],
            &[("auth-tls-secret", "default/ca")],
            &[
                ("auth-tls-secret", "default/ca"),
                ("auth-tls-verify-client", "on"),
            ],
            &[("auth-url", "not a url")],
            &[("auth-url", "ftp://auth.example/check")],
            &[
                ("allowlist-source-range", "10.0.0.0/8"),
                ("auth-url", "http://auth.example/check"),
                ("satisfy", "any"),
            ],
            &[("configuration-snippet", "allow 10.0.0.0/8;\ndeny all;")],
            &[(
                "server-snippet",
                "if ($http_x_key != \"k\") { return 403; }",
            )],
            &[("auth-snippet", "auth_request /x;")],
        ];
        for pairs in closed {
            let keys: Vec<(String, &str)> = pairs.iter().map(|(k, v)| (nginx(k), *v)).collect();
            let refs: Vec<(&str, &str)> = keys.iter().map(|(k, v)| (k.as_str(), *v)).collect();
            let parsed = parse(&map(&refs));
            assert!(parsed.policy.fail_closed, "{pairs:?}");
            let closing: Vec<&Problem> = parsed
                .problems
                .iter()
                .filter(|p| p.reason == Reason::FailedClosed)
                .collect();
            assert!(!closing.is_empty(), "{pairs:?}");
            for p in closing {
                assert!(p.detail.ends_with(CLOSED), "{}", p.detail);
            }
        }
        let open: &[&[(&str, &str)]] = &[
            &[("auth-realm", "Staff only")],
            &[("auth-tls-verify-depth", "2")],
            &[
                ("auth-tls-secret", "default/ca"),
                ("auth-tls-verify-client", "off"),
            ],
            &[
                ("auth-url", "http://auth.example/check"),
                ("satisfy", "any"),
            ],
            &[("allowlist-source-range", "10.0.0.0/8"), ("satisfy", "any")],
            &[("satisfy", "all")],
            &[("satisfy", "maybe")],
            &[("configuration-snippet", "more_set_headers \"X: 1\";")],
        ];
        for pairs in open {
            let keys: Vec<(String, &str)> = pairs.iter().map(|(k, v)| (nginx(k), *v)).collect();
            let refs: Vec<(&str, &str)> = keys.iter().map(|(k, v)| (k.as_str(), *v)).collect();
            let parsed = parse(&map(&refs));
            assert!(
                !parsed.policy.fail_closed,
                "{pairs:?}: {:?}",
                parsed.problems
            );
        }
        // An invalid source range already refuses everyone (403), as ingress-nginx does.
        let parsed = one("allowlist-source-range", "10.0.0.0/40");
        assert!(!parsed.policy.allow.is_empty() || !parsed.policy.deny.is_empty());
    }

    #[test]
    fn problems_are_sorted_by_annotation() {
        let parsed = parse(&map(&[
            (&nginx("z-unknown"), "1"),
            (&nginx("a-unknown"), "1"),
            (&nginx("proxy-body-size"), "x"),
            (&sluice("m-unknown"), "1"),
        ]));
        let names: Vec<_> = parsed
            .problems
            .iter()
            .map(|p| p.annotation.clone())
            .collect();
        let mut sorted = names.clone();
        sorted.sort();
        assert_eq!(names, sorted);
        assert_eq!(names.len(), 4);
    }

    #[test]
    fn long_values_are_cut_in_messages() {
        let long = "x".repeat(500);
        let (_, detail) = invalid("proxy-body-size", &long);
        assert!(detail.len() < 200, "{detail}");
        assert!(detail.contains('…'));
    }

    #[test]
    fn supported_keys_are_all_handled() {
        // Every supported key, alone with a plausible value, is applied or reported, never
        // left for the "unsupported" sweep.
        for name in SUPPORTED {
            let key = sluice(name);
            let parsed = parse(&map(&[(&key, "1")]));
            assert!(
                parsed
                    .problems
                    .iter()
                    .all(|p| p.reason != Reason::UnsupportedAnnotation),
                "{name}: {:?}",
                parsed.problems
            );
        }
    }

    fn key_strategy() -> impl Strategy<Value = String> {
        let mut names: Vec<String> = SUPPORTED.iter().map(|s| (*s).to_owned()).collect();
        names.extend(
            [
                "rewrite-target",
                "configuration-snippet",
                "server-snippet",
                "affinity",
                "custom-headers",
                "",
            ]
            .map(str::to_owned),
        );
        let name = prop_oneof![
            4 => proptest::sample::select(names),
            1 => "[a-z-]{0,12}",
        ];
        let prefix = proptest::sample::select(vec![NGINX_PREFIX, SLUICE_PREFIX, "example.com/"]);
        (prefix, name).prop_map(|(p, n)| format!("{p}{n}"))
    }

    fn value_strategy() -> impl Strategy<Value = String> {
        prop_oneof![
            any::<String>(),
            proptest::sample::select(vec![
                "true",
                "false",
                "0",
                "1",
                "301",
                "307",
                "308",
                "10m",
                "30s",
                "1m30s",
                "https://example.com",
                "/app",
                "10.0.0.0/8, ::1",
                "*",
                "https://*.a.example",
                "GET, POST",
                "X-A: 1\nX-B: 2",
                "host:80",
                "",
            ])
            .prop_map(str::to_owned),
            "[ -~\n]{0,40}",
        ]
    }

    proptest! {
        #[test]
        fn every_key_is_applied_or_reported_exactly_once(
            annotations in proptest::collection::btree_map(key_strategy(), value_strategy(), 0..12)
        ) {
            let (parsed, applied) = parse_traced(&annotations);
            let ours: Vec<&str> = annotations
                .keys()
                .filter_map(|k| {
                    if let Some(name) = k.strip_prefix(NGINX_PREFIX) {
                        // Shadowed by the same key under sluice.dev/: ignored silently.
                        let shadowed = annotations.contains_key(&format!("{SLUICE_PREFIX}{name}"));
                        (!shadowed).then_some(k.as_str())
                    } else {
                        k.starts_with(SLUICE_PREFIX).then_some(k.as_str())
                    }
                })
                .collect();
            let mut seen: Vec<&str> = applied.clone();
            seen.extend(parsed.problems.iter().map(|p| p.annotation.as_str()));
            seen.sort_unstable();
            let mut expected = ours.clone();
            expected.sort_unstable();
            prop_assert_eq!(seen, expected);
            for p in &parsed.problems {
                prop_assert!(matches!(
                    p.reason,
                    Reason::UnsupportedAnnotation
                        | Reason::InvalidAnnotation
                        | Reason::SnippetRefused
                        | Reason::FailedClosed
                ));
                prop_assert!(!p.detail.is_empty());
            }
            // Whatever the values, a policy field holds only validated data.
            if let Some(redirect) = &parsed.policy.redirect {
                prop_assert!((300..=308).contains(&redirect.status));
            }
            prop_assert!(parsed.policy.connect_timeout.is_none_or(|d| !d.is_zero()));
            // Closed exactly when a problem says so.
            prop_assert_eq!(
                parsed.policy.fail_closed,
                parsed.problems.iter().any(|p| p.reason == Reason::FailedClosed)
            );
        }
    }
}

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

pub(crate) mod affinity;
pub(crate) mod auth;
pub(crate) mod auth_cache;
mod auth_keepalive;
pub(crate) mod basic_auth;
pub(crate) mod canary;
pub(crate) mod client_cert;
pub(crate) mod config_map_ref;
mod cors;
pub(crate) mod fail_closed;
pub(crate) mod global_rate_limit;
pub(crate) mod hosts;
pub(crate) mod mirror;
mod rate_limit;
mod redirect;
mod response;
pub(crate) mod snippet;
mod source_range;
mod upstream;

use affinity::affinity;
use auth::external_auth;
use basic_auth::{BasicAuthSpec, basic_auth};
use canary::canary;

use crate::table::CanaryRule;
use cors::*;
use fail_closed::{CLOSED, restricting_directive, satisfy_any};
use global_rate_limit::global_rate_limit;
use rate_limit::*;
use redirect::*;
use source_range::*;
use upstream::*;

use crate::cidr::{Cidr, parse_cidr};
use crate::diagnostic::Reason;
pub use snippet::SnippetReport;

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
    "compression",
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
    "proxy-ssl-ciphers",
    "proxy-ssl-protocols",
    "proxy-ssl-verify-depth",
    "service-upstream",
    "affinity-canary-behavior",
    "enable-rewrite-log",
    "proxy-buffers-number",
    "proxy-busy-buffers-size",
    "proxy-max-temp-file-size",
    "auth-tls-secret",
    "auth-tls-verify-client",
    "auth-tls-verify-depth",
    "auth-tls-error-page",
    "auth-tls-pass-certificate-to-upstream",
    "auth-tls-match-cn",
    "ssl-passthrough",
    "limit-rps",
    "limit-rpm",
    "limit-connections",
    "limit-burst-multiplier",
    "limit-allowlist",
    "limit-whitelist",
    "global-rate-limit",
    "global-rate-limit-window",
    "global-rate-limit-key",
    "global-rate-limit-ignored-cidrs",
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
    "auth-always-set-cookie",
    "enable-global-auth",
    "auth-cache-key",
    "auth-cache-duration",
    "auth-keepalive",
    "auth-keepalive-requests",
    "auth-keepalive-timeout",
    "auth-keepalive-share-vars",
    "auth-proxy-set-headers",
    "custom-headers",
    "satisfy",
    "auth-type",
    "auth-secret",
    "auth-secret-type",
    "auth-realm",
    "server-alias",
    "from-to-www-redirect",
    "proxy-redirect-from",
    "proxy-redirect-to",
    "proxy-cookie-domain",
    "proxy-cookie-path",
    "enable-access-log",
    "enable-opentelemetry",
    "opentelemetry-trust-incoming-span",
    "connection-proxy-header",
    "proxy-request-buffering",
    "proxy-buffering",
    "proxy-http-version",
    "limit-rate",
    "limit-rate-after",
    "mirror-target",
    "mirror-host",
    "mirror-request-body",
    "preserve-trailing-slash",
    "disable-proxy-intercept-errors",
    "proxy-next-upstream-timeout",
    "session-cookie-conditional-samesite-none",
    "configuration-snippet",
    "server-snippet",
];

/// Supported keys that ingress-nginx does not have: meaningful under [`SLUICE_PREFIX`] only.
pub(crate) const SLUICE_ONLY: &[&str] = &["request-headers", "response-headers", "compression"];

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
    /// `auth-type: basic` and its Secret, which the compiler resolves into
    /// [`Policy::basic_auth`].
    pub basic_auth: Option<BasicAuthSpec>,
    /// `auth-proxy-set-headers`: the ConfigMap of headers for the auth service, which the
    /// compiler resolves into [`crate::ExternalAuth::proxy_set_headers`].
    pub auth_proxy_set_headers: Option<config_map_ref::ConfigMapRef>,
    /// `custom-headers`: the ConfigMap of response headers, which the compiler resolves
    /// into [`Policy::response_headers`].
    pub custom_headers: Option<config_map_ref::ConfigMapRef>,
    /// `auth-tls-*`, which the compiler resolves into the host's
    /// [`crate::ClientCertAuth`].
    pub client_cert: Option<client_cert::ClientCertSpec>,
    /// `ssl-passthrough`: TLS connections for the Ingress's hosts go to the backend of
    /// their `/` path untouched (with `--enable-ssl-passthrough`).
    pub ssl_passthrough: bool,
    /// `server-alias`: more names for the hosts of this Ingress's rules.
    pub server_alias: Vec<crate::host::HostPattern>,
    /// `from-to-www-redirect` (default false): the `www.` twin of each rule host (or the
    /// bare name of a `www.` host) redirects to it.
    pub from_to_www: bool,
    /// `mirror-target` (with `mirror-host`): the Service copies of the requests go to.
    pub mirror: Option<mirror::MirrorSpec>,
    /// `service-upstream` (default false): the Services of this Ingress's rules and default
    /// backend are reached at their ClusterIP and port, not their endpoints.
    pub service_upstream: bool,
    /// `enable-global-auth` (default true): the ConfigMap's `global-auth-url` guards this
    /// Ingress's routes when it has no `auth-url` of its own.
    pub enable_global_auth: bool,
    /// `server-snippet`, interpreted: what it gives every route of the Ingress's hosts
    /// (the oldest Ingress of a host that sets one decides).
    pub server_snippet: Option<Arc<Policy>>,
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

/// Parses the annotations of one Ingress (snippets refused).
pub(crate) fn parse(annotations: &BTreeMap<String, String>) -> Parsed {
    parse_traced(annotations).0
}

/// [`parse`]; `snippets`: the ConfigMap allows snippet annotations
/// (`allow-snippet-annotations`, `annotations-risk-level: Critical`).
pub(crate) fn parse_with_snippets(
    annotations: &BTreeMap<String, String>,
    snippets: bool,
) -> Parsed {
    parse_traced_with(annotations, snippets).0
}

/// What sluice makes of one Ingress's annotations, for reports such as `sluice migrate`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AnnotationReport {
    /// Full keys applied as written.
    pub honoured: Vec<String>,
    /// Full keys with no effect: (key, reason, why).
    pub problems: Vec<(String, Reason, String)>,
    /// The snippet annotations, as sluice would interpret them with snippets allowed:
    /// (key, directives interpreted, directives refused).
    pub snippets: Vec<(String, SnippetReport)>,
}

/// Checks one Ingress's annotations the way `compile` does.
pub fn check_annotations(annotations: &BTreeMap<String, String>) -> AnnotationReport {
    let (parsed, applied) = parse_traced(annotations);
    // What the snippets would come to with the ConfigMap's switch on.
    let mut allowed = Cx::new(annotations, true);
    let mut scratch = Policy::default();
    let mut snippets = Vec::new();
    for name in ["configuration-snippet", "server-snippet"] {
        let key = allowed.pending.get(name).map(|e| e.key.to_owned());
        let report = match name {
            "configuration-snippet" => snippet::configuration_snippet(&mut allowed, &mut scratch),
            _ => snippet::server_snippet(&mut allowed).map(|(_, report)| report),
        };
        let report = report.unwrap_or_else(|| SnippetReport {
            interpreted: Vec::new(),
            refused: allowed
                .problems
                .iter()
                .filter(|p| Some(&p.annotation) == key.as_ref())
                .map(|p| p.detail.clone())
                .collect(),
        });
        if let Some(key) = key {
            snippets.push((key, report));
        }
    }
    AnnotationReport {
        snippets,
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
    parse_traced_with(annotations, false)
}

/// [`parse_traced`] with snippets interpreted or not.
fn parse_traced_with(
    annotations: &BTreeMap<String, String>,
    snippets: bool,
) -> (Parsed, Vec<&str>) {
    let mut cx = Cx::new(annotations, snippets);
    let mut policy = Policy::default();

    let ssl_redirect = cx
        .value("ssl-redirect", |v| {
            parse_bool(v).map_err(|e| format!("{e}; ssl-redirect stays true"))
        })
        .unwrap_or(true);
    policy.preserve_trailing_slash = cx
        .value("preserve-trailing-slash", |v| {
            parse_bool(v).map_err(|e| format!("{e}; preserve-trailing-slash stays false"))
        })
        .unwrap_or(false);
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
    policy.rewrite_log = cx
        .value("enable-rewrite-log", |v| {
            parse_bool(v).map_err(|e| format!("{e}; rewrites are not logged"))
        })
        .unwrap_or(false);
    let server_alias = cx
        .value("server-alias", hosts::parse_server_alias)
        .unwrap_or_default();
    let from_to_www = cx
        .value("from-to-www-redirect", |v| {
            parse_bool(v).map_err(|e| format!("{e}; from-to-www-redirect stays false"))
        })
        .unwrap_or(false);

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
    // Whole seconds (ingress-nginx's) or a duration; 0: no limit, nginx's default.
    if let Some(limit) = cx.value("proxy-next-upstream-timeout", |v| {
        if v.trim() == "0" {
            return Ok(None);
        }
        parse_duration(v).map(Some)
    }) {
        policy.next_upstream.time_limit = limit;
    }
    policy.custom_http_errors = cx
        .value("custom-http-errors", parse_status_list)
        .unwrap_or_default();
    // ingress-nginx writes `proxy_intercept_errors on` only for `custom-http-errors` without
    // `disable-proxy-intercept-errors`: with it, upstream errors pass through.
    let no_intercept = cx
        .value("disable-proxy-intercept-errors", |v| {
            parse_bool(v).map_err(|e| format!("{e}; disable-proxy-intercept-errors stays false"))
        })
        .unwrap_or(false);
    if no_intercept {
        policy.custom_http_errors.clear();
    }

    policy.protocol = cx.value("backend-protocol", protocol::parse_backend_protocol);
    let ssl_secret = upstream_tls(&mut cx, &mut policy);
    let service_upstream = cx
        .value("service-upstream", |v| {
            parse_bool(v).map_err(|e| format!("{e}; the endpoints are used"))
        })
        .unwrap_or(false);
    policy.rate_limit = rate_limit(&mut cx);
    policy.global_rate_limit = global_rate_limit(&mut cx);
    let canary = canary(&mut cx);
    policy.affinity = affinity(&mut cx);
    policy.hash_by = cx.value("upstream-hash-by", affinity::parse_hash_by);
    policy.auth = external_auth(&mut cx);
    // ingress-nginx's `authreqglobal`: a value that is not a boolean counts as true.
    let enable_global_auth = cx
        .value("enable-global-auth", |v| {
            parse_bool(v).map_err(|e| format!("{e}; enable-global-auth stays true"))
        })
        .unwrap_or(true);
    let auth_proxy_set_headers =
        config_map_ref::auth_proxy_set_headers(&mut cx, policy.auth.is_some());
    let custom_headers = config_map_ref::custom_headers(&mut cx);
    let basic_auth = basic_auth(&mut cx);
    let client_cert = client_cert::client_cert(&mut cx);
    let ssl_passthrough = cx
        .value("ssl-passthrough", |v| {
            parse_bool(v).map_err(|e| format!("{e}; TLS is terminated"))
        })
        .unwrap_or(false);
    response::response(&mut cx, &mut policy);
    let mirror = mirror::mirror(&mut cx);
    policy.mirror_host = mirror.as_ref().map(|m| m.host.clone());
    policy.mirror_request_body = mirror.as_ref().is_some_and(|m| m.request_body);
    policy.satisfy_any = satisfy_any(&mut cx);
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
    policy.compression = cx.sluice_value("compression", crate::policy::parse_compression);
    // Tracing (`enable-opentelemetry`, `opentelemetry-trust-incoming-span`): `None` keeps
    // the proxy's flag.
    policy.opentelemetry = cx.value("enable-opentelemetry", |v| {
        parse_bool(v).map_err(|e| format!("{e}; --enable-opentelemetry applies"))
    });
    policy.opentelemetry_trust_incoming_span = cx.value("opentelemetry-trust-incoming-span", |v| {
        parse_bool(v).map_err(|e| format!("{e}; --opentelemetry-trust-incoming-span applies"))
    });

    if refuse_everyone {
        policy.allow.clear();
        policy.deny = everyone();
    }
    let mut server_snippet = None;
    if cx.snippets {
        let _ = snippet::configuration_snippet(&mut cx, &mut policy);
        server_snippet = snippet::server_snippet(&mut cx).map(|(policy, _)| policy);
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
        basic_auth,
        auth_proxy_set_headers,
        custom_headers,
        client_cert,
        ssl_passthrough,
        server_alias,
        from_to_www,
        mirror,
        service_upstream,
        enable_global_auth,
        server_snippet,
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
    /// Snippet annotations are interpreted (the ConfigMap allows them).
    snippets: bool,
}

impl<'a> Cx<'a> {
    fn new(annotations: &'a BTreeMap<String, String>, snippets: bool) -> Cx<'a> {
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
            snippets,
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
                let detail = match name {
                    "configuration-snippet" | "server-snippet" => snippet::not_allowed_detail(name),
                    _ => SNIPPET_DETAIL.to_owned(),
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
        "ssl-ciphers" | "ssl-prefer-server-ciphers" => {
            "TLS settings are not configurable per Ingress"
        }
        "http2-push-preload" => "HTTP/2 server push is not supported (browsers dropped it)",
        "enable-modsecurity" | "enable-owasp-core-rules" | "modsecurity-transaction-id" => {
            "ModSecurity is not part of sluice"
        }
        _ if starts("auth-") || name == "enable-global-auth" => "not supported yet",
        "opentelemetry-operation-name" | "opentelemetry-location-operation-name" => {
            "the span name is --opentelemetry-operation-name, for every route"
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

/// A size in the project's one syntax ([`sluice_units::parse_size`], a superset of
/// nginx's `ngx_parse_size`); `0` means unlimited.
pub(crate) fn parse_size(value: &str) -> Result<u64, String> {
    sluice_units::parse_size(value).map_err(|error| format!("value {} {error}", shown(value)))
}

/// A timeout in the project's one syntax ([`sluice_units::parse_duration`]: whole seconds as
/// ingress-nginx takes them, or nginx's and Go's time units). Must be greater than zero.
pub(crate) fn parse_duration(value: &str) -> Result<Duration, String> {
    let duration = sluice_units::parse_duration(value)
        .map_err(|error| format!("value {} {error}", shown(value)))?;
    if duration.is_zero() {
        return Err(format!("value {} must be greater than zero", shown(value)));
    }
    Ok(duration)
}

/// Go's `strconv.ParseBool`.
pub(crate) fn parse_bool(value: &str) -> Result<bool, String> {
    match value.trim() {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Ok(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Ok(false),
        _ => Err(format!(
            "value {} is not a boolean (true or false)",
            shown(value)
        )),
    }
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
mod tests;

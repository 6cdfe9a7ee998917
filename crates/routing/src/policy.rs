//! What a route does besides choosing a backend: the compiled, immutable [`Policy`] that a
//! match yields together with its backend ([`crate::RouteEntry`]).
//!
//! This is the intermediate form every API that feeds routes compiles into: Ingress
//! annotations (ingress-nginx's `nginx.ingress.kubernetes.io/*` and sluice's own
//! `sluice.dev/*`, parsed in `annotations/`) and Gateway API HTTPRoute filters
//! (`gateway/rule.rs`); the equivalent annotation and filter give the same value.
//! Everything is parsed and validated once, at compile time; the request path only reads
//! these fields (no string parsing per request). Values are data: nothing is ever
//! templated into configuration text; interpreted snippets (`configuration-snippet`,
//! `server-snippet`) come here directive by directive, as these fields and
//! [`crate::SnippetRules`].
//!
//! The proxy applies a policy in this order (ingress-nginx's, where it has one):
//! source ranges (403), HTTPS redirect (308), permanent/temporary redirect, app root
//! (302), CORS preflight (204), then the request goes upstream with the header changes,
//! body limit and timeouts below, and the response gets the CORS and response headers.

use std::sync::Arc;
use std::time::Duration;

use http::{HeaderName, HeaderValue, Method, Uri};

use crate::cidr::Cidr;
use crate::protocol::{UpstreamProtocol, UpstreamTls};

/// The policy of one route. `Policy::default()` changes nothing.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Policy {
    /// Clients allowed (`allowlist-source-range`, alias `whitelist-source-range`); empty:
    /// everyone. Others get 403.
    pub allow: Vec<Cidr>,
    /// Clients refused with 403 (`denylist-source-range`); checked before `allow`.
    pub deny: Vec<Cidr>,
    /// Requests whose `User-Agent` matches one of these get 403 (the ConfigMap's
    /// `block-user-agents`), checked with `deny`.
    pub block_user_agents: Vec<crate::nginx_config::ValueMatch>,
    /// Requests whose `Referer` matches one of these get 403 (`block-referers`).
    pub block_referers: Vec<crate::nginx_config::ValueMatch>,
    /// An access restriction of the route cannot be honoured (an authentication annotation
    /// sluice does not implement, or one whose value is invalid): every request answers 503,
    /// as ingress-nginx answers a location it marked denied. Checked before everything else.
    pub fail_closed: bool,
    /// ingress-nginx's trailing-slash redirect (`--ingress-nginx-compat`): every request
    /// answers 301 to its path with `/` appended (query kept), before anything else, as
    /// nginx answers a request one `/` short of a `proxy_pass` location's name.
    pub trailing_slash_redirect: bool,
    /// `from-to-www-redirect`: this route is the `www.` twin of a host (or the bare name of
    /// a `www.` host) and answers every request with 308 to that host, as ingress-nginx's
    /// redirect server does (`$scheme://<host><port><request URI without a final />`).
    pub www_redirect: Option<String>,
    /// Plain-HTTP requests are redirected to `https://` with this status (`ssl-redirect`
    /// when the host has TLS, `force-ssl-redirect` always; 308 as ingress-nginx).
    pub https_redirect: Option<u16>,
    /// `preserve-trailing-slash: "true"`: the HTTPS redirect keeps a request URI's final
    /// `/`, which ingress-nginx's `lua_ingress.lua` drops by default.
    pub preserve_trailing_slash: bool,
    /// `enable-rewrite-log: "true"` (nginx's `rewrite_log on`): each rewrite of the route's
    /// requests is logged at info level (target `sluice::rewrite`).
    pub rewrite_log: bool,
    /// Every request is redirected here (`permanent-redirect`, `temporal-redirect`).
    pub redirect: Option<Redirect>,
    /// Requests for `/` are redirected here with 302 (`app-root`).
    pub app_root: Option<HeaderValue>,
    /// Cross-origin rules (`enable-cors` and `cors-*`).
    pub cors: Option<Cors>,
    /// Largest request body (`proxy-body-size`); `Some(0)`: unlimited; `None`: the
    /// proxy's `--max-body-bytes`.
    pub body_limit: Option<u64>,
    /// Upstream connect timeout (`proxy-connect-timeout`).
    pub connect_timeout: Option<Duration>,
    /// Upstream read timeout, between two reads (`proxy-read-timeout`).
    pub read_timeout: Option<Duration>,
    /// Upstream send timeout, between two writes (`proxy-send-timeout`).
    pub send_timeout: Option<Duration>,
    /// The Host sent upstream instead of the client's (`upstream-vhost`).
    pub upstream_vhost: Option<HeaderValue>,
    /// Sent upstream as `X-Forwarded-Prefix` (`x-forwarded-prefix`).
    pub forwarded_prefix: Option<HeaderValue>,
    /// Request fields set towards the upstream, replacing the client's of the same name
    /// (`sluice.dev/request-headers`).
    pub request_headers: Vec<(HeaderName, HeaderValue)>,
    /// Response fields set towards the client, replacing the upstream's of the same name
    /// (`sluice.dev/response-headers`).
    pub response_headers: Vec<(HeaderName, HeaderValue)>,
    /// When a request is sent again to another endpoint (`proxy-next-upstream`,
    /// `proxy-next-upstream-tries`).
    pub next_upstream: NextUpstream,
    /// Upstream statuses answered by the route's fallback backend instead
    /// (`custom-http-errors`; needs `default-backend` or a global default backend).
    pub custom_http_errors: Vec<u16>,
    /// The protocol towards the backend (`backend-protocol`); `None`: the Service port's
    /// `appProtocol`, else HTTP/1.1.
    pub protocol: Option<UpstreamProtocol>,
    /// TLS towards the backend (`proxy-ssl-*`); `None`: not verified, no SNI, no client
    /// certificate.
    pub upstream_tls: Option<Arc<UpstreamTls>>,
    /// Requests per client address (`limit-rps`, `limit-rpm`, `limit-burst-multiplier`,
    /// `limit-allowlist`).
    pub rate_limit: Option<RateLimit>,
    /// A limit counted in a store every sluice replica shares (`global-rate-limit`,
    /// `global-rate-limit-window`, `global-rate-limit-key`, `global-rate-limit-ignored-cidrs`).
    pub global_rate_limit: Option<Arc<GlobalRateLimit>>,
    /// Session affinity (`affinity: cookie`, `session-cookie-*`, `affinity-mode`).
    pub affinity: Option<Affinity>,
    /// Consistent hashing of requests onto endpoints (`upstream-hash-by`); affinity wins
    /// when both are set.
    pub hash_by: Option<HashBy>,
    /// External authentication (`auth-url`, `auth-method`, `auth-signin`,
    /// `auth-response-headers`, ...).
    pub auth: Option<ExternalAuth>,
    /// Basic authentication from a Secret (`auth-type: basic`, `auth-secret`,
    /// `auth-secret-type`, `auth-realm`).
    pub basic_auth: Option<Arc<BasicAuth>>,
    /// Digest authentication from a Secret (`auth-type: digest`, `auth-secret`,
    /// `auth-secret-type`, `auth-realm`).
    pub digest_auth: Option<Arc<DigestAuth>>,
    /// Rewrites of the upstream's `Location`, `Refresh` and `Set-Cookie` fields
    /// (`proxy-redirect-from`/`-to`, `proxy-cookie-domain`, `proxy-cookie-path`).
    pub response_rewrites: Option<Arc<ResponseRewrites>>,
    /// `enable-access-log: "false"`: the route's requests are not written to the access log.
    pub access_log_off: bool,
    /// `sluice.dev/compression` (on an Ingress or an HTTPRoute): response compression on or
    /// off for this route; `None`: the proxy's global setting (`--gzip`, `--brotli`,
    /// `--zstd`).
    pub compression: Option<bool>,
    /// `enable-opentelemetry`: this route's requests traced or not; `None`: the proxy's
    /// `--enable-opentelemetry`.
    pub opentelemetry: Option<bool>,
    /// `opentelemetry-trust-incoming-span`: whether a caller's `traceparent` is continued;
    /// `None`: the proxy's `--opentelemetry-trust-incoming-span`.
    pub opentelemetry_trust_incoming_span: Option<bool>,
    /// `proxy-request-buffering: "on"`: the whole request body is read before the upstream
    /// is asked, and sent with its `Content-Length` (else it streams through).
    pub request_buffering: bool,
    /// `proxy-buffering: "on"` (nginx `proxy_buffering`): the response body is read from
    /// the upstream ahead of the client, holding up to this many bytes
    /// (`proxy-buffers-number` times `proxy-buffer-size`), so a slow client does not hold
    /// the upstream connection for a response that fits; `None`: it goes at the client's
    /// pace.
    pub response_buffer: Option<u64>,
    /// The Host of the copies a route's mirrors get (`mirror-target`'s host or
    /// `mirror-host`); `None`: the client's (Gateway API `RequestMirror`).
    pub mirror_host: Option<HeaderValue>,
    /// `mirror-request-body` (ingress-nginx's default `on` with a `mirror-target`): copies
    /// carry the request's body, read whole first (within the body limit), as nginx's
    /// `mirror_request_body on` reads it before the copies start; `false`: requests with
    /// a body are not copied (Gateway API `RequestMirror` so far).
    pub mirror_request_body: bool,
    /// Response bandwidth per request (`limit-rate`, `limit-rate-after`).
    pub limit_rate: Option<LimitRate>,
    /// `proxy-http-version: "1.0"`: HTTP/1.0 towards an HTTP/1.x upstream (nginx
    /// `proxy_http_version 1.0`): no connection reuse unless the upstream offers it, a body
    /// read whole and sent with its length.
    pub upstream_http10: bool,
    /// `connection-proxy-header`: the `Connection` field sent upstream (nginx
    /// `proxy_set_header Connection <value>`), instead of none (or `upgrade` for a
    /// WebSocket).
    pub connection_header: Option<HeaderValue>,
    /// `satisfy: any`: a client inside the source ranges needs no authentication, and one
    /// outside them gets in with valid authentication (nginx `satisfy any`); default
    /// (`all`): both must pass.
    pub satisfy_any: bool,
    /// Endpoint choice (`load-balance`); `None`: sluice's default, the fewer requests in
    /// flight of two random endpoints.
    pub load_balance: Option<LoadBalance>,
    /// Request fields appended towards the upstream, after the client's of the same name
    /// (Gateway API `RequestHeaderModifier.add`).
    pub request_headers_add: Vec<(HeaderName, HeaderValue)>,
    /// Request fields removed before going upstream (`RequestHeaderModifier.remove`).
    pub request_headers_remove: Vec<HeaderName>,
    /// Response fields appended towards the client (`ResponseHeaderModifier.add`).
    pub response_headers_add: Vec<(HeaderName, HeaderValue)>,
    /// Response fields removed before the client sees them
    /// (`ResponseHeaderModifier.remove`).
    pub response_headers_remove: Vec<HeaderName>,
    /// Requests are answered with a redirect built from the request (Gateway API
    /// `RequestRedirect`).
    pub request_redirect: Option<RequestRedirect>,
    /// The path sent upstream is rewritten (Gateway API `URLRewrite.path`); the query is
    /// kept.
    pub path_rewrite: Option<PathRewrite>,
    /// The whole request, until the response head is received, must take no longer
    /// (Gateway API `timeouts.request`); 504 when it does.
    pub request_timeout: Option<Duration>,
    /// One try towards an endpoint must take no longer (Gateway API
    /// `timeouts.backendRequest`); 504 when the last one does.
    pub backend_request_timeout: Option<Duration>,
    /// The client certificate shown to the backend when it is connected to over TLS and
    /// the route's TLS setting names none (a Gateway's `spec.tls.backend`).
    pub backend_client_certificate: Option<Arc<crate::tls::TlsCertificate>>,
    /// What `configuration-snippet` and `server-snippet` do that depends on the request
    /// (variables, `if`, `rewrite`, `return`, `add_header`), run by the proxy's snippet
    /// stage; their constant parts are in the fields above.
    pub snippet: Option<Arc<crate::snippet_rules::SnippetRules>>,
}

impl Policy {
    /// `policy` in an `Arc`: the one shared default when it changes nothing. Most routes
    /// have no policy, and a `Policy` is over a kilobyte: 10,000 HTTPRoutes held 16 MiB of
    /// default policies, one per rule.
    pub(crate) fn shared(policy: Policy) -> Arc<Policy> {
        static DEFAULT: std::sync::LazyLock<Arc<Policy>> =
            std::sync::LazyLock::new(|| Arc::new(Policy::default()));
        if policy == **DEFAULT {
            Arc::clone(&DEFAULT)
        } else {
            Arc::new(policy)
        }
    }
}

/// Gateway API `RequestRedirect`: the `Location` is the request's URL with these parts
/// replaced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestRedirect {
    /// `http` or `https`; `None`: the request's.
    pub scheme: Option<String>,
    /// `None`: the request's host (without its port).
    pub hostname: Option<String>,
    /// `None`: derived as the spec says (see [`RequestRedirect::location`]).
    pub port: Option<u16>,
    /// `None`: the request's path.
    pub path: Option<PathRewrite>,
    /// 301 or 302 (Gateway API), or any 3xx.
    pub status: u16,
    /// The port of the listener the route is attached to (Gateway `listeners[].port`):
    /// what the redirect keeps when neither `port` nor `scheme` is set.
    pub listener_port: u16,
}

impl RequestRedirect {
    /// The `Location` for a request with `scheme` (`http`/`https`), `host` (without port),
    /// `path` and `query` (without `?`, empty for none).
    ///
    /// The port follows the Gateway API spec: `port` if set; else the scheme's well-known
    /// port when `scheme` is set; else the listener's port. It is left out when it is the
    /// well-known port of the resulting scheme (80 for http, 443 for https).
    pub fn location(&self, scheme: &str, host: &str, path: &str, query: &str) -> String {
        let scheme = self.scheme.as_deref().unwrap_or(scheme);
        let host = self.hostname.as_deref().unwrap_or(host);
        let port = match (self.port, &self.scheme) {
            (Some(port), _) => port,
            (None, Some(s)) if s.eq_ignore_ascii_case("https") => 443,
            (None, Some(s)) if s.eq_ignore_ascii_case("http") => 80,
            _ => self.listener_port,
        };
        let well_known = (scheme.eq_ignore_ascii_case("http") && port == 80)
            || (scheme.eq_ignore_ascii_case("https") && port == 443);
        // `path` is the normalised request path: escaped again for the Location.
        let path = match &self.path {
            Some(rewrite) => crate::escape_path(&rewrite.apply(path)).into_owned(),
            None => crate::escape_path(path).into_owned(),
        };
        let mut out = String::with_capacity(scheme.len() + host.len() + path.len() + 16);
        out.push_str(scheme);
        out.push_str("://");
        out.push_str(host);
        if !well_known {
            out.push(':');
            out.push_str(&port.to_string());
        }
        out.push_str(&path);
        if !query.is_empty() {
            out.push('?');
            out.push_str(query);
        }
        out
    }
}

/// A path modifier (Gateway API `ReplaceFullPath` / `ReplacePrefixMatch`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PathRewrite {
    /// The whole path becomes this.
    Full(String),
    /// The part of the path the rule's `PathPrefix` matched is replaced.
    Prefix {
        /// The matched prefix, without a trailing slash (`""` for `/`).
        matched: String,
        /// What replaces it.
        replacement: String,
    },
}

impl std::fmt::Display for PathRewrite {
    /// `ReplaceFullPath /x` or `ReplacePrefixMatch /a -> /b`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PathRewrite::Full(full) => write!(f, "ReplaceFullPath {full}"),
            PathRewrite::Prefix {
                matched,
                replacement,
            } => {
                let matched = if matched.is_empty() { "/" } else { matched };
                write!(f, "ReplacePrefixMatch {matched} -> {replacement}")
            }
        }
    }
}

impl PathRewrite {
    /// The path after rewriting request path `path` (which the rule matched).
    ///
    /// `ReplacePrefixMatch` replaces whole path elements: with prefix `/foo` and
    /// replacement `/xyz`, `/foo/bar` becomes `/xyz/bar` and `/foo` becomes `/xyz`; with
    /// replacement `/`, `/foo/bar` becomes `/bar` and `/foo` becomes `/`.
    pub fn apply(&self, path: &str) -> String {
        match self {
            PathRewrite::Full(full) => full.clone(),
            PathRewrite::Prefix {
                matched,
                replacement,
            } => {
                let rest = path.get(matched.len()..).unwrap_or("");
                if rest.is_empty() || rest == "/" {
                    let mut out = replacement.clone();
                    if rest == "/" && !out.ends_with('/') {
                        out.push('/');
                    }
                    if out.is_empty() {
                        out.push('/');
                    }
                    return out;
                }
                let base = replacement.trim_end_matches('/');
                format!("{base}{rest}")
            }
        }
    }
}

/// `load-balance` algorithms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LoadBalance {
    /// `round_robin`: endpoints in turn (ingress-nginx's default).
    RoundRobin,
    /// `ewma`: peak-EWMA of response-head latency times requests in flight, the lower of
    /// two random endpoints (ingress-nginx's and linkerd's latency-aware choice).
    Ewma,
}

/// ingress-nginx's request rate limits: nginx `limit_req` with `burst` and `nodelay`, keyed
/// by the client address, one zone per Ingress. A client over the limit gets
/// `--limit-req-status-code` (503).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RateLimit {
    /// `limit-rps`: requests per second; burst `rps * burst_multiplier`.
    pub rps: Option<u32>,
    /// `limit-rpm`: requests per minute; burst `rpm * burst_multiplier`.
    pub rpm: Option<u32>,
    /// `limit-burst-multiplier` (default 5).
    pub burst_multiplier: u32,
    /// `limit-connections`: requests in progress at once per client address (nginx
    /// `limit_conn`).
    pub connections: Option<u32>,
    /// Clients never limited (`limit-allowlist`, alias `limit-whitelist`).
    pub allow: Vec<Cidr>,
    /// The zone: a hash of the Ingress (namespace/name), so limits survive table rebuilds
    /// and two Ingresses never share counts.
    pub zone: u64,
}

/// ingress-nginx's global rate limit (lua-resty-global-throttle): `limit` requests per
/// `window` and key, counted in memcached or Redis so that every replica shares the count.
/// One counter per Ingress (all its paths), as ingress-nginx's namespace per Ingress.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GlobalRateLimit {
    /// `global-rate-limit`: requests per window (> 0).
    pub limit: u32,
    /// `global-rate-limit-window`, in whole seconds (> 0), as ingress-nginx rounds it.
    pub window_secs: u32,
    /// `global-rate-limit-key` (default `$remote_addr`): what is counted.
    pub key: Vec<KeyPart>,
    /// `global-rate-limit-ignored-cidrs`: clients never counted nor limited.
    pub ignored: Vec<Cidr>,
    /// Names the Ingress in the store's keys (`namespace/name`), set by the compiler.
    pub namespace: String,
}

/// One piece of a `global-rate-limit-key` template: literal text or an nginx variable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyPart {
    /// Literal text.
    Text(String),
    /// `$remote_addr`: the client address as text.
    ClientAddress,
    /// `$binary_remote_addr`: the client address as 4 or 16 bytes.
    BinaryClientAddress,
    /// `$http_<name>`: a request header's value (`_` in the name for `-`); nothing when
    /// absent.
    Header(http::HeaderName),
    /// `$host`: the host of the request, without port, lower case.
    Host,
    /// `$uri`: the normalised request path.
    Path,
}

/// nginx's `proxy_next_upstream`: which failures send a request (without a body) to another
/// endpoint, and how many endpoints are tried in all.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NextUpstream {
    /// `error`: the connection failed or broke before a response head.
    pub error: bool,
    /// `timeout`: connecting timed out. (The response-head timeout bounds the whole
    /// request and is not retried.)
    pub timeout: bool,
    /// `invalid_header`: the response head was not valid HTTP.
    pub invalid_header: bool,
    /// `http_500`, `http_502`, ...: these statuses (sorted).
    pub statuses: Vec<u16>,
    /// `non_idempotent`: also retry POST, PATCH, ... (else only GET, HEAD, OPTIONS, TRACE
    /// after something was sent).
    pub non_idempotent: bool,
    /// `proxy-next-upstream-tries`: endpoints tried at most (nginx's default 3).
    pub tries: u8,
    /// `proxy-next-upstream-timeout`: no next endpoint is tried once this long has passed
    /// since the first try began (nginx `proxy_next_upstream_timeout`); `None`: no limit.
    pub time_limit: Option<Duration>,
    /// Gateway API `retry.backoff`: the wait before a try that repeats a failed one.
    pub backoff: Option<std::time::Duration>,
}

impl Policy {
    /// What this policy changes, one short line per setting, in a fixed order; empty for
    /// `Policy::default()`. For people (`sluice explain`, the dashboard), not for parsing.
    pub fn summary(&self) -> Vec<String> {
        let mut out = Vec::new();
        if let Some(snippet) = &self.snippet {
            out.push(format!(
                "snippet: {} request-time step(s) (configuration-snippet, server-snippet)",
                snippet.steps.len()
            ));
        }
        let list = |cidrs: &[Cidr]| {
            cidrs
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(",")
        };
        if let Some(host) = &self.www_redirect {
            out.push(format!("308 to {host} (from-to-www-redirect)"));
        }
        if self.trailing_slash_redirect {
            out.push("301 to the path with a trailing slash (--ingress-nginx-compat)".to_owned());
        }
        if !self.allow.is_empty() {
            out.push(format!("allow only {}", list(&self.allow)));
        }
        if !self.deny.is_empty() {
            out.push(format!("deny {}", list(&self.deny)));
        }
        if let Some(status) = self.https_redirect {
            out.push(format!("plain HTTP redirected to HTTPS ({status})"));
        }
        if let Some(r) = &self.redirect {
            let location = String::from_utf8_lossy(r.location.as_bytes());
            out.push(format!("redirect {} to {location}", r.status));
        }
        if let Some(root) = &self.app_root {
            out.push(format!(
                "app-root {}",
                String::from_utf8_lossy(root.as_bytes())
            ));
        }
        if self.cors.is_some() {
            out.push("CORS".to_owned());
        }
        if let Some(limit) = self.body_limit {
            out.push(format!("body limit {limit} bytes"));
        }
        for (name, value) in [
            ("connect", self.connect_timeout),
            ("read", self.read_timeout),
            ("send", self.send_timeout),
        ] {
            if let Some(value) = value {
                out.push(format!("{name} timeout {}s", value.as_secs_f64()));
            }
        }
        if let Some(vhost) = &self.upstream_vhost {
            out.push(format!(
                "upstream Host {}",
                String::from_utf8_lossy(vhost.as_bytes())
            ));
        }
        if !self.request_headers.is_empty() {
            out.push(format!(
                "{} request header(s) set",
                self.request_headers.len()
            ));
        }
        if !self.response_headers.is_empty() {
            out.push(format!(
                "{} response header(s) set",
                self.response_headers.len()
            ));
        }
        if !self.custom_http_errors.is_empty() {
            out.push(format!("custom errors {:?}", self.custom_http_errors));
        }
        if let Some(protocol) = self.protocol {
            out.push(format!("upstream protocol {}", protocol.as_str()));
        }
        if self.upstream_tls.is_some() {
            out.push("upstream TLS settings (proxy-ssl-*)".to_owned());
        }
        if self.rewrite_log {
            out.push("rewrites logged".to_owned());
        }
        if let Some(limit) = &self.rate_limit {
            let mut parts = Vec::new();
            if let Some(rps) = limit.rps {
                parts.push(format!("{rps} req/s"));
            }
            if let Some(rpm) = limit.rpm {
                parts.push(format!("{rpm} req/min"));
            }
            if let Some(connections) = limit.connections {
                parts.push(format!("{connections} connections"));
            }
            out.push(format!("rate limit {}", parts.join(", ")));
        }
        if let Some(global) = &self.global_rate_limit {
            out.push(format!(
                "global rate limit {} per {}s",
                global.limit, global.window_secs
            ));
        }
        if let Some(affinity) = &self.affinity {
            out.push(format!(
                "session affinity: cookie {} ({:?})",
                affinity.cookie, affinity.mode
            ));
        }
        if let Some(hash_by) = &self.hash_by {
            out.push(format!("upstream-hash-by {hash_by:?}"));
        }
        if let Some(auth) = &self.auth {
            out.push(format!("external auth {} {}", auth.method, auth.url));
            if let Some(cache) = &auth.cache {
                out.push(format!(
                    "external auth answers cached per key ({} rule(s))",
                    cache.valid.len()
                ));
            }
        }
        if let Some(basic) = &self.basic_auth {
            out.push(format!(
                "basic auth, {} user(s) of {}",
                basic.users.len(),
                basic.secret
            ));
        }
        if let Some(digest) = &self.digest_auth {
            out.push(format!(
                "digest auth, {} user(s) of realm {:?} in {}",
                digest.users.len(),
                digest.realm,
                digest.secret
            ));
        }
        if let Some(rewrites) = &self.response_rewrites {
            let pairs = [
                ("proxy_redirect", &rewrites.redirect),
                ("proxy_cookie_domain", &rewrites.cookie_domain),
                ("proxy_cookie_path", &rewrites.cookie_path),
            ];
            for (directive, pair) in pairs {
                if let Some((from, to)) = pair {
                    out.push(format!("{directive} {from} {to}"));
                }
            }
        }
        if let Some(connection) = &self.connection_header {
            out.push(format!(
                "Connection: {} upstream",
                String::from_utf8_lossy(connection.as_bytes())
            ));
        }
        if let Some(limit) = &self.limit_rate {
            out.push(format!(
                "response {} bytes/s after {} bytes",
                limit.bytes_per_second, limit.after
            ));
        }
        if self.upstream_http10 {
            out.push("HTTP/1.0 upstream".to_owned());
        }
        if self.request_buffering {
            out.push("request body buffered".to_owned());
        }
        if self.access_log_off {
            out.push("no access log".to_owned());
        }
        if let Some(on) = self.compression {
            out.push(format!("compression {}", if on { "on" } else { "off" }));
        }
        if let Some(on) = self.opentelemetry {
            out.push(format!("tracing {}", if on { "on" } else { "off" }));
        }
        if self.opentelemetry_trust_incoming_span == Some(false) {
            out.push("incoming trace not trusted".to_owned());
        }
        if self.satisfy_any {
            out.push("satisfy any (source range or authentication)".to_owned());
        }
        if let Some(balance) = &self.load_balance {
            out.push(format!("load-balance {balance:?}"));
        }
        let changes = [
            ("request header(s) added", self.request_headers_add.len()),
            (
                "request header(s) removed",
                self.request_headers_remove.len(),
            ),
            ("response header(s) added", self.response_headers_add.len()),
            (
                "response header(s) removed",
                self.response_headers_remove.len(),
            ),
        ];
        for (what, n) in changes {
            if n > 0 {
                out.push(format!("{n} {what}"));
            }
        }
        if let Some(r) = &self.request_redirect {
            let mut parts = Vec::new();
            if let Some(scheme) = &r.scheme {
                parts.push(format!("scheme {scheme}"));
            }
            if let Some(host) = &r.hostname {
                parts.push(format!("host {host}"));
            }
            if let Some(port) = r.port {
                parts.push(format!("port {port}"));
            }
            if let Some(path) = &r.path {
                parts.push(format!("path {path}"));
            }
            out.push(format!("redirect {} ({})", r.status, parts.join(", ")));
        }
        if let Some(path) = &self.path_rewrite {
            out.push(format!("rewrite path {path}"));
        }
        if let Some(t) = self.request_timeout {
            out.push(format!("request timeout {}ms", t.as_millis()));
        }
        if let Some(t) = self.backend_request_timeout {
            out.push(format!("backend request timeout {}ms", t.as_millis()));
        }
        out
    }
}

impl Default for NextUpstream {
    /// ingress-nginx's default: `error timeout`, 3 tries.
    fn default() -> Self {
        NextUpstream {
            error: true,
            timeout: true,
            invalid_header: false,
            statuses: Vec::new(),
            non_idempotent: false,
            tries: 3,
            time_limit: None,
            backoff: None,
        }
    }
}

/// A redirect answered by the proxy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Redirect {
    /// 3xx status.
    pub status: u16,
    /// The `Location`, as configured (the request's path is not appended, as nginx's
    /// `return` does).
    pub location: HeaderValue,
}

/// Cross-origin resource sharing, as ingress-nginx's `enable-cors` answers it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cors {
    /// Origins allowed (`cors-allow-origin`, default `*`).
    pub origins: Vec<OriginPattern>,
    /// `Access-Control-Allow-Methods` (`cors-allow-methods`; Gateway API `allowMethods`).
    /// `*` with credentials answers a preflight with the method it asks for, since
    /// browsers read `*` literally on a request with credentials (Fetch standard, CORS
    /// protocol).
    pub allow_methods: Option<HeaderValue>,
    /// `Access-Control-Allow-Headers` (`cors-allow-headers`; Gateway API `allowHeaders`),
    /// `*` as for the methods.
    pub allow_headers: Option<HeaderValue>,
    /// `Access-Control-Expose-Headers` (`cors-expose-headers`), if any.
    pub expose_headers: Option<HeaderValue>,
    /// `Access-Control-Allow-Credentials: true` (`cors-allow-credentials`, default true).
    pub allow_credentials: bool,
    /// `Access-Control-Max-Age` in seconds (`cors-max-age`, default 1728000).
    pub max_age: u64,
}

/// One entry of `cors-allow-origin`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OriginPattern {
    /// `*`: any origin.
    Any,
    /// `https://example.com` (compared case-insensitively).
    Exact(String),
    /// `https://*.example.com`: scheme, then any one or more labels before the suffix.
    Wildcard {
        /// `https://`.
        scheme: String,
        /// `.example.com` (with an optional `:port`).
        suffix: String,
    },
}

impl OriginPattern {
    /// One origin: `*`, `null`, `scheme://host[:port]` or `scheme://*.domain[:port]` (any
    /// alphabetic scheme, as ingress-nginx), lowercased.
    pub fn parse(item: &str) -> Option<OriginPattern> {
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

    /// Whether `origin` (an `Origin` request header) is allowed by this entry.
    pub fn allows(&self, origin: &str) -> bool {
        match self {
            OriginPattern::Any => true,
            OriginPattern::Exact(allowed) => allowed.eq_ignore_ascii_case(origin),
            OriginPattern::Wildcard { scheme, suffix } => {
                let lower = origin.to_ascii_lowercase();
                lower.strip_prefix(scheme.as_str()).is_some_and(|rest| {
                    rest.strip_suffix(suffix.as_str())
                        .is_some_and(|labels| !labels.is_empty() && !labels.contains('/'))
                })
            }
        }
    }
}

impl Cors {
    /// The `Access-Control-Allow-Methods` value for a preflight asking for `asked`
    /// (`Access-Control-Request-Method`).
    pub fn allow_methods_for(&self, asked: Option<&[u8]>) -> Option<HeaderValue> {
        self.wildcard_answer(self.allow_methods.as_ref()?, asked)
    }

    /// The `Access-Control-Allow-Headers` value for a preflight asking for `asked`
    /// (`Access-Control-Request-Headers`).
    pub fn allow_headers_for(&self, asked: Option<&[u8]>) -> Option<HeaderValue> {
        self.wildcard_answer(self.allow_headers.as_ref()?, asked)
    }

    fn wildcard_answer(&self, allowed: &HeaderValue, asked: Option<&[u8]>) -> Option<HeaderValue> {
        if allowed.as_bytes() == b"*"
            && self.allow_credentials
            && let Some(asked) = asked.and_then(|a| HeaderValue::from_bytes(a).ok())
        {
            return Some(asked);
        }
        Some(allowed.clone())
    }

    /// The `Access-Control-Allow-Origin` value for a request from `origin`: the origin
    /// itself when listed (or `*` when any origin is allowed without credentials), `None`
    /// when it is not allowed.
    pub fn allow_origin<'a>(&self, origin: &'a str) -> Option<&'a str> {
        let any = self.origins.contains(&OriginPattern::Any);
        if any && !self.allow_credentials {
            return Some("*");
        }
        self.origins
            .iter()
            .any(|p| p.allows(origin))
            .then_some(origin)
    }
}

/// `affinity: cookie`: a client keeps its endpoint through a cookie.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Affinity {
    /// `session-cookie-name` (default `INGRESSCOOKIE`).
    pub cookie: String,
    /// The cookie attributes after the value (`; Path=/; Max-Age=...; HttpOnly`), fixed at
    /// compile time; `Expires` is added per response when `expires` is set.
    pub attributes: String,
    /// `session-cookie-expires`: seconds from the response until the cookie expires.
    pub expires: Option<u64>,
    /// `affinity-mode`.
    pub mode: AffinityMode,
    /// `session-cookie-change-on-failure`: a failed endpoint gets a new cookie.
    pub change_on_failure: bool,
    /// `session-cookie-conditional-samesite-none`: `SameSite=None` is left out for clients
    /// that reject such cookies ([`same_site_none_compatible`]).
    pub conditional_samesite_none: bool,
}

/// Whether a client with this `User-Agent` accepts `SameSite=None` cookies: ingress-nginx's
/// `util/same_site.lua`, after Chromium's list of incompatible clients (Chrome 40 to 69,
/// iOS 12, Safari on macOS 10.14).
pub fn same_site_none_compatible(user_agent: Option<&[u8]>) -> bool {
    let Some(agent) = user_agent else {
        return true;
    };
    let has = |needle: &[u8]| agent.windows(needle.len()).any(|w| w == needle);
    !(has(b"Chrome/4")
        || has(b"Chrome/5")
        || has(b"Chrome/6")
        || has(b"CPU iPhone OS 12")
        || has(b"iPad; CPU OS 12")
        || (has(b"Macintosh") && has(b"Intel Mac OS X 10_14") && has(b"Safari") && !has(b"Chrome")))
}

/// How a cookie maps to an endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AffinityMode {
    /// The cookie holds a random key, and the endpoint is the key's consistent hash over
    /// the ready endpoints: when endpoints are added, some sessions move to them
    /// (ingress-nginx's default, `balanced`).
    Balanced,
    /// The cookie names its endpoint, which keeps the session as long as it is ready.
    Persistent,
}

/// `upstream-hash-by`: what the endpoint is chosen by (consistent hashing).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HashBy {
    /// `$remote_addr` (or `$binary_remote_addr`): the client address.
    ClientAddress,
    /// `$http_<name>`: a request header (`-` for `_`).
    Header(http::HeaderName),
    /// `$cookie_<name>`: a cookie.
    Cookie(String),
    /// `$request_uri`: path and query.
    RequestUri,
    /// `$uri`: the path.
    Path,
    /// `$host`: the host.
    Host,
}

/// nginx's `limit_rate` and `limit_rate_after` (ingress-nginx's `limit-rate` and
/// `limit-rate-after`, in kilobytes): a response body goes to the client at most this fast
/// once its first `after` bytes are out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LimitRate {
    /// Bytes per second (> 0).
    pub bytes_per_second: u64,
    /// Bytes sent before the limit applies.
    pub after: u64,
}

impl LimitRate {
    /// How long to wait before sending more, `elapsed` after the body started with `sent`
    /// bytes out: `None` while within the rate.
    pub fn delay(&self, sent: u64, elapsed: Duration) -> Option<Duration> {
        let limited = sent.checked_sub(self.after).filter(|n| *n > 0)?;
        let due = Duration::from_secs_f64(limited as f64 / self.bytes_per_second.max(1) as f64);
        due.checked_sub(elapsed).filter(|d| !d.is_zero())
    }

    /// The most written at once: a tenth of a second's worth (at least 1 byte), so a large
    /// piece of body does not leave in one burst.
    pub fn piece(&self) -> usize {
        usize::try_from(self.bytes_per_second / 10)
            .unwrap_or(usize::MAX)
            .max(1)
    }
}

/// nginx's `proxy_redirect`, `proxy_cookie_domain` and `proxy_cookie_path` with one
/// (from, to) pair each, as ingress-nginx writes them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ResponseRewrites {
    /// `proxy_redirect from to`: a `Location` (or the `url=` of a `Refresh`) starting with
    /// `from` (case-sensitive) gets `to` instead of that prefix.
    pub redirect: Option<(String, String)>,
    /// `proxy_cookie_domain domain replacement`: a `Set-Cookie` `domain` attribute equal to
    /// `domain` (case-insensitive, a leading dot aside) becomes `replacement`.
    pub cookie_domain: Option<(String, String)>,
    /// `proxy_cookie_path path replacement`: a `Set-Cookie` `path` attribute starting with
    /// `path` (case-sensitive) gets `replacement` instead of that prefix.
    pub cookie_path: Option<(String, String)>,
}

impl ResponseRewrites {
    /// The new value of response field `name` (lower-case or any case) with `value`, when a
    /// rewrite changes it; `None` leaves the field as it is.
    pub fn rewrite(&self, name: &[u8], value: &[u8]) -> Option<Vec<u8>> {
        if name.eq_ignore_ascii_case(b"location") {
            let (from, to) = self.redirect.as_ref()?;
            let rest = value.strip_prefix(from.as_bytes())?;
            return Some([to.as_bytes(), rest].concat());
        }
        if name.eq_ignore_ascii_case(b"refresh") {
            let (from, to) = self.redirect.as_ref()?;
            let at = find_ignore_case(value, b"url=")? + 4;
            let rest = value[at..].strip_prefix(from.as_bytes())?;
            return Some([&value[..at], to.as_bytes(), rest].concat());
        }
        if name.eq_ignore_ascii_case(b"set-cookie")
            && (self.cookie_domain.is_some() || self.cookie_path.is_some())
        {
            return self.rewrite_cookie(value);
        }
        None
    }

    /// `Set-Cookie`: its `domain` and `path` attributes (the first of each).
    fn rewrite_cookie(&self, value: &[u8]) -> Option<Vec<u8>> {
        let mut out: Vec<u8> = Vec::with_capacity(value.len() + 16);
        let mut changed = false;
        let (mut domain_seen, mut path_seen) = (false, false);
        for (index, part) in value.split(|&b| b == b';').enumerate() {
            if index > 0 {
                out.push(b';');
            }
            let trimmed = part.trim_ascii_start();
            let lead = &part[..part.len() - trimmed.len()];
            let attribute = |name: &[u8]| {
                (index > 0
                    && trimmed.len() > name.len()
                    && trimmed[..name.len()].eq_ignore_ascii_case(name))
                .then(|| &trimmed[name.len()..])
            };
            if let (Some(v), Some((domain, replacement)), false) =
                (attribute(b"domain="), &self.cookie_domain, domain_seen)
            {
                domain_seen = true;
                let (dot, bare) = match v.strip_prefix(b".") {
                    Some(bare) => (&b"."[..], bare),
                    None => (&b""[..], v),
                };
                let want = domain.strip_prefix('.').unwrap_or(domain);
                let bare_trimmed = bare.trim_ascii_end();
                if bare_trimmed.eq_ignore_ascii_case(want.as_bytes()) {
                    out.extend_from_slice(lead);
                    out.extend_from_slice(&trimmed[..7]);
                    out.extend_from_slice(dot);
                    out.extend_from_slice(replacement.as_bytes());
                    out.extend_from_slice(&bare[bare_trimmed.len()..]);
                    changed = true;
                    continue;
                }
            } else if let (Some(v), Some((path, replacement)), false) =
                (attribute(b"path="), &self.cookie_path, path_seen)
            {
                path_seen = true;
                if let Some(rest) = v.strip_prefix(path.as_bytes()) {
                    out.extend_from_slice(lead);
                    out.extend_from_slice(&trimmed[..5]);
                    out.extend_from_slice(replacement.as_bytes());
                    out.extend_from_slice(rest);
                    changed = true;
                    continue;
                }
            }
            out.extend_from_slice(part);
        }
        changed.then_some(out)
    }
}

/// Where `needle` (ASCII) first occurs in `haystack`, ignoring case.
fn find_ignore_case(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack
        .windows(needle.len())
        .position(|w| w.eq_ignore_ascii_case(needle))
}

/// nginx's `auth_basic` with `auth_basic_user_file`, as ingress-nginx writes it for
/// `auth-type: basic`: a request without valid credentials gets 401 with
/// `WWW-Authenticate: Basic realm="<auth-realm>"`; a valid one goes upstream without its
/// `Authorization` field (`proxy_set_header Authorization ""`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BasicAuth {
    /// The `WWW-Authenticate` value of a 401.
    pub challenge: HeaderValue,
    /// The users (`auth-secret`: its `auth` key as an htpasswd file, or with `auth-secret-type:
    /// auth-map` one user per key).
    pub users: crate::htpasswd::Htpasswd,
    /// The Secret they come from.
    pub secret: crate::ObjectRef,
}

/// nginx's `auth_digest` with `auth_digest_user_file` (the `nginx-http-auth-digest`
/// module), as ingress-nginx writes it for `auth-type: digest`: a request without a valid
/// `Digest` answer gets 401 with a fresh challenge (`qop="auth"`, MD5); a valid one goes
/// upstream without its `Authorization` field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DigestAuth {
    /// `auth-realm` (its users are those of this realm only).
    pub realm: String,
    /// The users (`auth-secret`: its `auth` key as an htdigest file, or with
    /// `auth-secret-type: auth-map` one user per key, each value `realm:HA1`).
    pub users: crate::htdigest::Htdigest,
    /// The Secret they come from.
    pub secret: crate::ObjectRef,
}

/// `auth-url` and its companions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExternalAuth {
    /// `auth-url`: an absolute `http://` or `https://` URL.
    pub url: Uri,
    /// `auth-method` (default GET).
    pub method: Method,
    /// `auth-signin`: where a 401 from the auth service redirects the client (302), with
    /// the original URL in the `signin_redirect_param` query parameter.
    pub signin: Option<String>,
    /// `auth-signin-redirect-param` (default `rd`).
    pub signin_redirect_param: String,
    /// `auth-response-headers`: fields copied from the auth service's answer to the
    /// upstream request.
    pub response_headers: Vec<HeaderName>,
    /// `auth-request-redirect`: the `X-Auth-Request-Redirect` sent to the auth service
    /// (default: the request's URI).
    pub request_redirect: Option<String>,
    /// `auth-cache-key` with `auth-cache-duration`: the auth service's answers kept per
    /// key; `None`: asked for every request.
    pub cache: Option<AuthCache>,
    /// `auth-proxy-set-headers`: fields set on the auth request from the ConfigMap's
    /// data (replacing the client's of that name), each value a template of the variables
    /// `global-rate-limit-key` takes; an empty value removes the field (nginx's
    /// `proxy_set_header X ""`).
    pub proxy_set_headers: Vec<(HeaderName, Vec<KeyPart>)>,
    /// `auth-keepalive` and its companions: connections to the auth service kept open;
    /// `None` (ingress-nginx's default 0): a new connection for every check.
    pub keepalive: Option<AuthKeepalive>,
    /// `auth-always-set-cookie` (default false): the auth service's `Set-Cookie` reaches
    /// the client on every answer (nginx `add_header Set-Cookie $auth_cookie always`),
    /// not only on nginx's `add_header` statuses (200, 201, 204, 206, 301, 302, 303,
    /// 304, 307, 308).
    pub always_set_cookie: bool,
}

/// The `keepalive` upstream ingress-nginx writes for an `auth-url` with `auth-keepalive`
/// above 0.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuthKeepalive {
    /// `auth-keepalive`: idle connections kept (per worker, as nginx's `keepalive`).
    pub connections: usize,
    /// `auth-keepalive-requests` (default 1000): checks one connection carries at most.
    pub requests: u32,
    /// `auth-keepalive-timeout` (default 60 s): how long a connection is kept idle.
    pub timeout: Duration,
    /// `auth-keepalive-share-vars`: whether the check shares nginx variables with the
    /// request; sluice has no such variables, so it changes nothing.
    pub share_vars: bool,
}

/// ingress-nginx's auth cache (`proxy_cache auth_cache` in the auth location): an answer
/// of the auth service is kept under the key expanded for the request, for as long as
/// `auth-cache-duration` gives its status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuthCache {
    /// `auth-cache-key`: the template, with the variables `global-rate-limit-key` takes.
    pub key: Vec<KeyPart>,
    /// `auth-cache-duration` (default `200 202 401 5m`): nginx's `proxy_cache_valid`
    /// lines, the first that names a status deciding.
    pub valid: Vec<CacheValid>,
    /// The location whose answers these are (`namespace/name path` of the Ingress rule,
    /// set by the compiler): with the request's host, it starts every cache key, as
    /// ingress-nginx's starts with the server name and the location's auth path.
    pub location: String,
}

/// One `proxy_cache_valid [code ...] time` of `auth-cache-duration`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CacheValid {
    /// The statuses (without any: 200, 301 and 302, as nginx); `None`: `any`.
    pub statuses: Option<Vec<u16>>,
    /// How long an answer of those statuses is kept.
    pub ttl: Duration,
}

impl AuthCache {
    /// How long an answer with `status` is kept; `None`: not cached.
    pub fn ttl(&self, status: u16) -> Option<Duration> {
        self.valid
            .iter()
            .find(|valid| {
                valid
                    .statuses
                    .as_ref()
                    .is_none_or(|statuses| statuses.contains(&status))
            })
            .map(|valid| valid.ttl)
            .filter(|ttl| !ttl.is_zero())
    }
}

/// The nginx variables `auth-signin` may name (those of ingress-nginx's oauth2-proxy
/// examples), expanded from the request when a client is sent to sign in; any other is
/// refused when the annotation is read.
pub const SIGNIN_VARIABLES: [&str; 7] = [
    "host",
    "http_host",
    "best_http_host",
    "scheme",
    "pass_access_scheme",
    "request_uri",
    "escaped_request_uri",
];

impl ExternalAuth {
    /// Where a 401 sends the client (`auth-signin`), for a request to `scheme://host` with
    /// request URI `uri` (`host` as the client sent it): the value with its variables
    /// expanded and, unless it already has the `signin_redirect_param` parameter,
    /// `<param>=<the original URL, escaped>` added, as ingress-nginx's `buildAuthSignURL`
    /// does. `None` without `auth-signin`.
    pub fn signin_location(&self, scheme: &str, host: &str, uri: &str) -> Option<String> {
        let signin = self.signin.as_deref()?;
        let bare_host = host
            .rsplit_once(':')
            .filter(|(_, port)| port.bytes().all(|b| b.is_ascii_digit()) && !host.ends_with(']'))
            .map_or(host, |(name, _)| name);
        let mut location = expand_variables(signin, |name| match name {
            "host" => Some(bare_host.to_ascii_lowercase()),
            "http_host" | "best_http_host" => Some(host.to_owned()),
            "scheme" | "pass_access_scheme" => Some(scheme.to_owned()),
            "request_uri" => Some(uri.to_owned()),
            "escaped_request_uri" => Some(escape_component(uri)),
            _ => None,
        })
        .ok()?;
        let param = &self.signin_redirect_param;
        let has_param = location.split_once('?').is_some_and(|(_, query)| {
            query
                .split('&')
                .any(|pair| pair.split('=').next() == Some(param.as_str()))
        });
        if !has_param {
            location.push(if location.contains('?') { '&' } else { '?' });
            location.push_str(param);
            location.push('=');
            location.push_str(&escape_component(&format!("{scheme}://{host}{uri}")));
        }
        Some(location)
    }
}

/// `template` with every `$name` replaced by `value(name)`; the first name `value` does
/// not know is the error.
pub(crate) fn expand_variables(
    template: &str,
    value: impl Fn(&str) -> Option<String>,
) -> Result<String, String> {
    let mut out = String::with_capacity(template.len());
    let mut rest = template;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        // nginx's `${name}` form too.
        let (name, tail) = match after.strip_prefix('{') {
            Some(braced) => match braced.split_once('}') {
                Some((name, tail)) => (name, tail),
                None => return Err(format!("${{{braced}: no closing brace")),
            },
            None => {
                let end = after
                    .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                    .unwrap_or(after.len());
                (&after[..end], &after[end..])
            }
        };
        match value(name) {
            Some(v) => out.push_str(&v),
            None => return Err(format!("${name}")),
        }
        rest = tail;
    }
    out.push_str(rest);
    Ok(out)
}

/// Percent-encodes all but unreserved characters (RFC 3986 section 2.3).
fn escape_component(text: &str) -> String {
    let mut out = String::with_capacity(text.len() * 3);
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || b"-_.~".contains(&byte) {
            out.push(byte as char);
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

/// `sluice.dev/compression`: `on` or `off` (the global setting stays when invalid).
pub(crate) fn parse_compression(value: &str) -> Result<bool, String> {
    match value.trim() {
        "on" => Ok(true),
        "off" => Ok(false),
        _ => Err(format!(
            "value {:?} is not on or off; the global compression setting applies",
            value.trim()
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Default policies are one shared `Arc`; any other gets its own.
    #[test]
    fn default_policies_are_shared() {
        let a = Policy::shared(Policy::default());
        let b = Policy::shared(Policy::default());
        assert!(Arc::ptr_eq(&a, &b));
        let limited = Policy::shared(Policy {
            body_limit: Some(1),
            ..Policy::default()
        });
        assert!(!Arc::ptr_eq(&a, &limited));
        assert_eq!(limited.body_limit, Some(1));
    }

    /// ingress-nginx's `buildAuthSignURL` and the oauth2-proxy examples of its docs.
    #[test]
    fn signin_locations_expand_the_request_and_add_rd_once() {
        let auth = |signin: &str| ExternalAuth {
            url: "http://auth/".parse().unwrap(),
            method: Method::GET,
            signin: Some(signin.to_owned()),
            signin_redirect_param: "rd".to_owned(),
            response_headers: Vec::new(),
            request_redirect: None,
            cache: None,
            proxy_set_headers: Vec::new(),
            keepalive: None,
            always_set_cookie: false,
        };
        let at = |signin: &str| {
            auth(signin)
                .signin_location("https", "App.example.com:8443", "/a b?x=1")
                .unwrap()
        };
        assert_eq!(
            at("https://login.example.com/start"),
            "https://login.example.com/start?rd=https%3A%2F%2FApp.example.com%3A8443%2Fa%20b%3Fx%3D1"
        );
        assert_eq!(
            at("https://$host/oauth2/start?rd=$escaped_request_uri"),
            "https://app.example.com/oauth2/start?rd=%2Fa%20b%3Fx%3D1"
        );
        assert_eq!(
            at("https://auth.example.com/oauth2/start?rd=$scheme://$http_host$request_uri"),
            "https://auth.example.com/oauth2/start?rd=https://App.example.com:8443/a b?x=1"
        );
        assert!(at("/login?a=1").starts_with("/login?a=1&rd=https%3A%2F%2F"));
        assert_eq!(
            at("https://${host}/start?next=1"),
            "https://app.example.com/start?next=1&rd=https%3A%2F%2FApp.example.com%3A8443%2Fa%20b%3Fx%3D1"
        );
        let none = ExternalAuth {
            signin: None,
            ..auth("x")
        };
        assert_eq!(none.signin_location("https", "h", "/"), None);
    }

    /// nginx `limit_rate` / `limit_rate_after`.
    #[test]
    fn limit_rate_delays_what_is_ahead_of_the_rate() {
        let limit = LimitRate {
            bytes_per_second: 1000,
            after: 500,
        };
        let ms = Duration::from_millis;
        assert_eq!(limit.delay(400, ms(0)), None, "within limit-rate-after");
        assert_eq!(limit.delay(500, ms(0)), None);
        assert_eq!(limit.delay(1500, ms(0)), Some(ms(1000)));
        assert_eq!(limit.delay(1500, ms(400)), Some(ms(600)));
        assert_eq!(limit.delay(1500, ms(1000)), None);
        assert_eq!(limit.delay(1500, ms(5000)), None);
        assert_eq!(limit.piece(), 100);
        let slow = LimitRate {
            bytes_per_second: 1,
            after: 0,
        };
        assert_eq!(slow.piece(), 1);
        assert_eq!(slow.delay(3, ms(0)), Some(ms(3000)));
    }

    /// nginx `proxy_redirect`, `proxy_cookie_domain`, `proxy_cookie_path`.
    #[test]
    fn response_rewrites_follow_nginx_proxy_redirect_and_proxy_cookie() {
        let rw = ResponseRewrites {
            redirect: Some((
                "http://app.internal:8080/".into(),
                "https://app.example/".into(),
            )),
            cookie_domain: Some(("localhost".into(), "example.org".into())),
            cookie_path: Some(("/two/".into(), "/".into())),
        };
        let got = |name: &str, value: &str| {
            rw.rewrite(name.as_bytes(), value.as_bytes())
                .map(|v| String::from_utf8(v).unwrap())
        };
        assert_eq!(
            got("Location", "http://app.internal:8080/login?x=1").as_deref(),
            Some("https://app.example/login?x=1")
        );
        assert_eq!(got("location", "http://other/").as_deref(), None);
        assert_eq!(
            got("location", "HTTP://app.internal:8080/").as_deref(),
            None
        );
        assert_eq!(
            got("refresh", "5; URL=http://app.internal:8080/next").as_deref(),
            Some("5; URL=https://app.example/next")
        );
        assert_eq!(got("refresh", "5").as_deref(), None);
        assert_eq!(
            got(
                "set-cookie",
                "a=1; Domain=LocalHost; Path=/two/some/uri/; HttpOnly"
            )
            .as_deref(),
            Some("a=1; Domain=example.org; Path=/some/uri/; HttpOnly")
        );
        assert_eq!(
            got("Set-Cookie", "a=1; domain=.localhost").as_deref(),
            Some("a=1; domain=.example.org")
        );
        // The cookie's own value is no attribute; other domains and paths stay.
        assert_eq!(
            got("set-cookie", "domain=localhost; path=/one/").as_deref(),
            None
        );
        assert_eq!(
            got("set-cookie", "a=1; domain=localhost.evil").as_deref(),
            None
        );
        assert_eq!(got("x-other", "domain=localhost").as_deref(), None);
        assert_eq!(
            ResponseRewrites::default().rewrite(b"location", b"/x"),
            None
        );
    }

    /// ingress-nginx `util/same_site.lua` (`same_site_none_compatible`).
    #[test]
    fn same_site_none_compatibility_by_user_agent() {
        let incompatible = [
            "Mozilla/5.0 (Windows NT 10.0) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/51.0.2704.103 Safari/537.36",
            "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/66.0.3359.181 Safari/537.36",
            "Mozilla/5.0 (Linux) Chrome/49.0.2623.112",
            "Mozilla/5.0 (iPhone; CPU iPhone OS 12_1 like Mac OS X) AppleWebKit/605.1.15",
            "Mozilla/5.0 (iPad; CPU OS 12_4 like Mac OS X) AppleWebKit/605.1.15",
            "Mozilla/5.0 (Macintosh; Intel Mac OS X 10_14_6) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/12.1.2 Safari/605.1.15",
        ];
        for agent in incompatible {
            assert!(
                !same_site_none_compatible(Some(agent.as_bytes())),
                "{agent}"
            );
        }
        let compatible = [
            "Mozilla/5.0 (Windows NT 10.0) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120.0.0.0 Safari/537.36",
            "Mozilla/5.0 (Macintosh; Intel Mac OS X 10_14_6) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120.0 Safari/537.36",
            "Mozilla/5.0 (Macintosh; Intel Mac OS X 10_15_7) AppleWebKit/605.1.15 Version/17.0 Safari/605.1.15",
            "Mozilla/5.0 (iPhone; CPU iPhone OS 17_0 like Mac OS X)",
            "curl/8.5.0",
            "",
        ];
        for agent in compatible {
            assert!(same_site_none_compatible(Some(agent.as_bytes())), "{agent}");
        }
        assert!(same_site_none_compatible(None));
    }

    #[test]
    fn unknown_variables_are_named() {
        assert_eq!(
            expand_variables("a$cookie_x", |_| None),
            Err("$cookie_x".into())
        );
        assert_eq!(
            expand_variables("${host", |_| None),
            Err("${host: no closing brace".into())
        );
        assert_eq!(
            expand_variables("$host$request_uri", |n| Some(n.to_uppercase())),
            Ok("HOSTREQUEST_URI".into())
        );
    }

    #[test]
    fn origin_patterns() {
        assert!(OriginPattern::Any.allows("https://x.example"));
        let exact = OriginPattern::Exact("https://a.example".into());
        assert!(exact.allows("HTTPS://A.example"));
        assert!(!exact.allows("https://b.example"));
        let wild = OriginPattern::Wildcard {
            scheme: "https://".into(),
            suffix: ".example.com".into(),
        };
        assert!(wild.allows("https://a.example.com"));
        assert!(wild.allows("https://a.b.example.com"));
        assert!(!wild.allows("https://example.com"));
        assert!(!wild.allows("http://a.example.com"));
        assert!(!wild.allows("https://evil.com/.example.com"));
    }

    #[test]
    fn allow_origin_echoes_the_origin_when_credentials_are_allowed() {
        let mut cors = Cors {
            origins: vec![OriginPattern::Any],
            allow_methods: Some(HeaderValue::from_static("GET")),
            allow_headers: Some(HeaderValue::from_static("X")),
            expose_headers: None,
            allow_credentials: true,
            max_age: 1,
        };
        assert_eq!(cors.allow_origin("https://a"), Some("https://a"));
        cors.allow_credentials = false;
        assert_eq!(cors.allow_origin("https://a"), Some("*"));
        cors.origins = vec![OriginPattern::Exact("https://b".into())];
        assert_eq!(cors.allow_origin("https://a"), None);
        assert_eq!(cors.allow_origin("https://b"), Some("https://b"));
    }
}

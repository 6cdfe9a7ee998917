//! What ingress-nginx's ConfigMap comes to in sluice (read by
//! `ingress/config_map`): plain data the compiler's inputs and outputs carry.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use crate::cidr::Cidr;

/// The ConfigMap as sluice applies it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NginxConfig {
    /// Annotation defaults: key (without prefix) and value, each one that parses.
    pub annotation_defaults: BTreeMap<String, String>,
    /// `block-cidrs`: clients refused (403) on every Ingress route.
    pub block_cidrs: Vec<Cidr>,
    /// `block-user-agents`: clients whose `User-Agent` matches are refused (403) on every
    /// Ingress route.
    pub block_user_agents: Vec<ValueMatch>,
    /// `block-referers`: requests whose `Referer` matches are refused (403) on every
    /// Ingress route.
    pub block_referers: Vec<ValueMatch>,
    /// The keys that set the whole proxy's behaviour (every listener, every request).
    pub globals: Arc<ProxyGlobals>,
    /// `allow-snippet-annotations` (default false).
    pub allow_snippet_annotations: bool,
    /// `annotations-risk-level: Critical` (default `High`): ingress-nginx >= 1.12 accepts
    /// snippet annotations (risk Critical) only with it.
    pub critical_risk_accepted: bool,
    /// `global-allowed-response-headers`: the header names `custom-headers` may set
    /// (compared exactly, as ingress-nginx does).
    pub allowed_response_headers: Vec<String>,
    /// `global-auth-*`: the external auth of every Ingress route without an `auth-url` of
    /// its own (unless `enable-global-auth: "false"`).
    pub global_auth: GlobalAuthKeys,
    /// `no-auth-locations`: rule paths starting with one of these get no external auth
    /// (`None`: ingress-nginx's default, `/.well-known/acme-challenge`).
    pub no_auth_locations: Option<Vec<String>>,
    /// The raw value of each key applied, for telling later what changed.
    pub(crate) applied: BTreeMap<String, String>,
}

/// A value of ingress-nginx's `block-user-agents` / `block-referers` lists, as nginx's `map`
/// reads it: `~` a case-sensitive regular expression, `~*` a case-insensitive one, anything
/// else the whole value exactly.
#[derive(Debug, Clone)]
pub enum ValueMatch {
    /// The whole value, byte for byte.
    Exact(Box<str>),
    /// A regular expression found anywhere in the value (nginx's `map` regexes are not
    /// anchored).
    Regex(regex::Regex),
}

impl ValueMatch {
    /// Whether `value` matches.
    pub fn matches(&self, value: &[u8]) -> bool {
        match self {
            ValueMatch::Exact(exact) => exact.as_bytes() == value,
            ValueMatch::Regex(regex) => {
                std::str::from_utf8(value).is_ok_and(|value| regex.is_match(value))
            }
        }
    }

    /// The list entry as written.
    pub fn as_str(&self) -> &str {
        match self {
            ValueMatch::Exact(exact) => exact,
            ValueMatch::Regex(regex) => regex.as_str(),
        }
    }
}

impl PartialEq for ValueMatch {
    fn eq(&self, other: &Self) -> bool {
        matches!(
            (self, other),
            (ValueMatch::Exact(_), ValueMatch::Exact(_))
                | (ValueMatch::Regex(_), ValueMatch::Regex(_))
        ) && self.as_str() == other.as_str()
    }
}

impl Eq for ValueMatch {}

/// ingress-nginx's ConfigMap keys that are settings of the whole proxy rather than
/// defaults of a route's annotations. Each is `None` where the ConfigMap does not set it:
/// the flag of the same meaning (or its default) applies then. Read live: the proxy works
/// out the settings in force once per routing table.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProxyGlobals {
    /// `hsts`: send `Strict-Transport-Security` on HTTPS responses.
    pub hsts: Option<bool>,
    /// `hsts-max-age`, seconds.
    pub hsts_max_age: Option<u64>,
    /// `hsts-include-subdomains`.
    pub hsts_include_subdomains: Option<bool>,
    /// `hsts-preload`.
    pub hsts_preload: Option<bool>,
    /// `limit-req-status-code`: the answer over `limit-rps`/`limit-rpm`.
    pub limit_req_status_code: Option<u16>,
    /// `limit-conn-status-code`: the answer over `limit-connections`.
    pub limit_conn_status_code: Option<u16>,
    /// `global-rate-limit-status-code`: the answer over `global-rate-limit`.
    pub global_rate_limit_status_code: Option<u16>,
    /// `use-forwarded-headers`: believe the `X-Forwarded-*` fields of the peers in
    /// [`ProxyGlobals::proxy_real_ip_cidr`].
    pub use_forwarded_headers: Option<bool>,
    /// `enable-real-ip`: the client's address is read from
    /// [`ProxyGlobals::forwarded_for_header`] of the peers in
    /// [`ProxyGlobals::proxy_real_ip_cidr`], their other forwarding fields are not believed.
    pub enable_real_ip: Option<bool>,
    /// `proxy-real-ip-cidr`: the peers believed (ingress-nginx's default: everyone).
    pub proxy_real_ip_cidr: Option<Vec<Cidr>>,
    /// `compute-full-forwarded-for`: a believed chain is kept and the peer appended; without
    /// it the upstream gets the client's address alone.
    pub compute_full_forwarded_for: Option<bool>,
    /// `forwarded-for-header`: the field the client's address is read from (default
    /// `X-Forwarded-For`), lower case.
    pub forwarded_for_header: Option<Box<str>>,
    /// `use-proxy-protocol`: a PROXY protocol header starts every connection.
    pub use_proxy_protocol: Option<bool>,
    /// `enable-underscores-in-headers`: forward request fields whose names hold `_`.
    pub enable_underscores_in_headers: Option<bool>,
    /// `server-tokens`: answers carry `Server: sluice` (off: no `Server` field of ours).
    pub server_tokens: Option<bool>,
    /// `allow-backend-server-header`: the backend's `Server` field reaches the client.
    pub allow_backend_server_header: Option<bool>,
    /// `client-header-timeout`: time for a request head (and a TLS handshake).
    pub client_header_timeout: Option<Duration>,
    /// `client-body-timeout`: time between two reads of a request body.
    pub client_body_timeout: Option<Duration>,
    /// `keep-alive`: idle time before a client connection is closed (`0`: no keep-alive).
    pub keep_alive: Option<Duration>,
    /// `keep-alive-requests`: requests served on one client connection before it closes.
    pub keep_alive_requests: Option<u64>,
    /// `large-client-header-buffers` (`number size`): the largest request head, number
    /// times size.
    pub max_header_bytes: Option<u64>,
    /// `upstream-keepalive-timeout`: idle time before a pooled upstream connection closes.
    pub upstream_keepalive_timeout: Option<Duration>,
    /// `upstream-keepalive-requests`: requests sent on one upstream connection at most.
    pub upstream_keepalive_requests: Option<u64>,
    /// `upstream-keepalive-time`: longest life of one upstream connection.
    pub upstream_keepalive_time: Option<Duration>,
    /// `upstream-keepalive-connections`: idle upstream connections kept per endpoint and
    /// worker (`0`: none kept).
    pub upstream_keepalive_connections: Option<u64>,
    /// `disable-access-log`: no access log line for any request.
    pub disable_access_log: Option<bool>,
    /// `log-format-upstream`: each access log line is this format rendered (instead of
    /// sluice's JSON object).
    pub log_format_upstream: Option<crate::LogFormat>,
    /// `log-format-escape-json`: values in the format are JSON-escaped.
    pub log_format_escape_json: Option<bool>,
    /// `log-format-escape-none`: values in the format are not escaped (wins over JSON, as
    /// ingress-nginx's template).
    pub log_format_escape_none: Option<bool>,
    /// Response compression: `use-gzip`, `gzip-*`, `enable-brotli`, `brotli-*`.
    pub compression: CompressionGlobals,
    /// Tracing: `enable-opentelemetry`, `otlp-*`, `otel-*`.
    pub tracing: TracingGlobals,
    /// The global rate limit's memcached: `global-rate-limit-memcached-*`.
    pub global_rate_limit: GlobalRateLimitGlobals,
    /// TLS towards clients: `ssl-protocols`, `ssl-ciphers`, `ssl-session-*`.
    pub tls: TlsGlobals,
}

/// The TLS keys of ingress-nginx's ConfigMap (towards clients, every HTTPS listener).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TlsGlobals {
    /// `ssl-protocols`: the versions offered.
    pub protocols: Option<crate::openssl_ciphers::ProtocolList>,
    /// `ssl-ciphers`: the TLS 1.2 suites offered, most preferred first (TLS 1.3's are not
    /// affected, as in OpenSSL).
    pub ciphers: Option<Vec<crate::openssl_ciphers::Tls12Suite>>,
    /// `ssl-session-tickets`: stateless resumption by tickets.
    pub session_tickets: Option<bool>,
    /// `ssl-session-cache`: resumption by a session cache on the server.
    pub session_cache: Option<bool>,
    /// `ssl-session-cache-size`, in sessions (nginx: about 4000 per megabyte).
    pub session_cache_entries: Option<usize>,
}

/// The `global-rate-limit-memcached-*` keys of ingress-nginx's ConfigMap (ingress-nginx
/// counts in memcached only: setting the host chooses memcached).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GlobalRateLimitGlobals {
    /// `global-rate-limit-memcached-host`.
    pub memcached_host: Option<String>,
    /// `global-rate-limit-memcached-port`.
    pub memcached_port: Option<u16>,
    /// `global-rate-limit-memcached-connect-timeout`, milliseconds: connect and each
    /// command.
    pub memcached_connect_timeout: Option<Duration>,
    /// `global-rate-limit-memcached-max-idle-timeout`, milliseconds.
    pub memcached_max_idle_timeout: Option<Duration>,
    /// `global-rate-limit-memcached-pool-size`: idle connections kept per thread.
    pub memcached_pool_size: Option<usize>,
}

/// The OpenTelemetry keys of ingress-nginx's ConfigMap.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TracingGlobals {
    /// `enable-opentelemetry`: every route traced unless its annotation says otherwise.
    pub enable: Option<bool>,
    /// `opentelemetry-trust-incoming-span`: continue a caller's `traceparent`.
    pub trust_incoming_span: Option<bool>,
    /// `opentelemetry-operation-name`: the span name.
    pub operation_name: Option<String>,
    /// `otlp-collector-host`: where spans go (OTLP over gRPC).
    pub collector_host: Option<String>,
    /// `otlp-collector-port`.
    pub collector_port: Option<u16>,
    /// `otel-service-name`.
    pub service_name: Option<String>,
    /// `otel-sampler`: `AlwaysOn`, `AlwaysOff` or `TraceIdRatioBased`.
    pub sampler: Option<String>,
    /// `otel-sampler-ratio`, a number from 0 to 1 as written.
    pub sampler_ratio: Option<String>,
    /// `otel-sampler-parent-based`.
    pub sampler_parent_based: Option<bool>,
    /// `otel-max-queuesize`.
    pub max_queue_size: Option<usize>,
    /// `otel-schedule-delay-millis`.
    pub schedule_delay_millis: Option<u64>,
    /// `otel-max-export-batch-size`.
    pub max_export_batch_size: Option<usize>,
}

/// The compression keys of ingress-nginx's ConfigMap.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CompressionGlobals {
    /// `use-gzip`.
    pub gzip: Option<bool>,
    /// `gzip-level` (1 to 9).
    pub gzip_level: Option<u32>,
    /// `gzip-min-length`: bytes; shorter responses are sent as they are.
    pub gzip_min_length: Option<u64>,
    /// `gzip-types`: the media types compressed, space-separated (`*` for all).
    pub gzip_types: Option<String>,
    /// `gzip-disable`: a regular expression of `User-Agent`s never sent gzip (`msie6`:
    /// nginx's shorthand).
    pub gzip_disable: Option<String>,
    /// `enable-brotli`.
    pub brotli: Option<bool>,
    /// `brotli-level` (0 to 11).
    pub brotli_level: Option<u32>,
    /// `brotli-min-length`.
    pub brotli_min_length: Option<u64>,
    /// `brotli-types`, as `gzip-types`.
    pub brotli_types: Option<String>,
}
/// ingress-nginx's `no-auth-locations` default: ACME HTTP-01 challenges are answered
/// without external auth.
pub const DEFAULT_NO_AUTH_LOCATIONS: &[&str] = &["/.well-known/acme-challenge"];

/// The `global-auth-*` keys of ingress-nginx's ConfigMap as they parsed (read by
/// `ingress/config_map/global_auth.rs`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GlobalAuthKeys {
    /// `global-auth-url`.
    pub(crate) url: Option<http::Uri>,
    /// Why `global-auth-url` was refused when no earlier value of it stays in force: the
    /// routes it should guard close rather than open.
    pub(crate) refused: Option<String>,
    /// The companions that parsed, under the names of the `auth-*` annotations they
    /// stand for (`global-auth-method` as `auth-method`, ...), with their values.
    pub(crate) companions: BTreeMap<&'static str, String>,
}

/// What the global auth comes to for the routes it applies to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum GlobalAuth {
    /// No `global-auth-url`: nothing is applied.
    Off,
    /// The auth every route without its own `auth-url` gets.
    On(Box<crate::ExternalAuth>),
    /// `global-auth-url` is set but does not parse: the routes it would guard answer 503.
    Refused(String),
}

impl NginxConfig {
    /// `no-auth-locations` in force.
    pub fn no_auth_locations(&self) -> Vec<String> {
        match &self.no_auth_locations {
            Some(list) => list.clone(),
            None => DEFAULT_NO_AUTH_LOCATIONS
                .iter()
                .map(|l| (*l).to_owned())
                .collect(),
        }
    }

    /// Whether `configuration-snippet` and `server-snippet` are interpreted: both switches
    /// on, as ingress-nginx >= 1.12 requires.
    pub fn snippets_allowed(&self) -> bool {
        self.allow_snippet_annotations && self.critical_risk_accepted
    }
}

//! [`Settings`]: what the proxy does on every connection and request, as the flags
//! ([`ProxyArgs`]) say, overridden by the ingress-nginx ConfigMap keys the routing table
//! carries ([`ProxyGlobals`]). Worked out once per table (by the snapshot), so a request
//! reads them from the snapshot it loads anyway and a ConfigMap edit applies to the next
//! request, without a restart (ingress-nginx reloads nginx for the same).

use std::sync::Arc;
use std::time::Duration;

use http::{HeaderValue, StatusCode};
use sluice_routing::{
    Cidr, GlobalRateLimitGlobals, LogEscape, ProxyGlobals, TlsGlobals, TracingGlobals, parse_cidr,
};

use crate::backend::pool::PoolConfig;
use crate::compress::{Compression, parse_types, parse_user_agents};
use crate::config::ProxyArgs;
use crate::global_rate_limit::config::{GlobalRateLimitArgs, GlobalRateLimitBackend};
use crate::http::header_policy::HeaderPolicy;
use crate::observe::access_log::AccessFormat;
use crate::trace::{OtelSampler, Tracing, parse_sampler_ratio};

/// The settings in force for one routing table.
#[derive(Debug)]
pub(crate) struct Settings {
    /// Forwarding fields (who is believed, how the chain goes upstream), underscores, `Via`.
    pub(crate) policy: HeaderPolicy,
    /// `Strict-Transport-Security` for HTTPS responses (`--hsts*`, `hsts*`).
    pub(crate) hsts: Option<HeaderValue>,
    /// The answer over `limit-rps`/`limit-rpm` (`--limit-req-status-code`,
    /// `limit-req-status-code`).
    pub(crate) limit_req_status: StatusCode,
    /// The answer over `limit-connections` (`limit-conn-status-code`).
    pub(crate) limit_conn_status: StatusCode,
    /// The answer over `global-rate-limit` where the ConfigMap sets one
    /// (`global-rate-limit-status-code`); else the limiter's flag.
    pub(crate) global_rate_limit_status: Option<StatusCode>,
    /// Time between two reads of a request body (`--client-body-timeout`).
    pub(crate) client_body_timeout: Duration,
    /// `Server` on answers: `server-tokens` (ours) and `allow-backend-server-header`.
    pub(crate) server_header: ServerHeader,
    /// Response compression.
    pub(crate) compression: Compression,
    /// Requests are written to the access log (`--access-log` and not
    /// `disable-access-log`).
    pub(crate) access_log: bool,
    /// `log-format-upstream` (with `log-format-escape-*`): the access log line's format;
    /// `None`: sluice's JSON object.
    pub(crate) access_log_format: Option<Arc<AccessFormat>>,
    /// Client connections.
    pub(crate) connections: Connections,
    /// Pooled upstream connections.
    pub(crate) upstream_keepalive: UpstreamKeepalive,
    /// Distributed tracing (the snapshot holds the exporter built from it).
    pub(crate) tracing: Tracing,
    /// The global rate limit's store (the snapshot holds the client built from it).
    pub(crate) global_rate_limit: GlobalRateLimitArgs,
    /// TLS towards clients (the TLS configurations are built from it when it changes).
    pub(crate) tls: TlsGlobals,
}

/// What happens to the `Server` field of answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum ServerHeader {
    /// No `Server` field (ingress-nginx's default: `more_clear_headers Server`).
    None,
    /// `Server: sluice` on every answer (`server-tokens: "true"`).
    Ours,
    /// The backend's own `Server` field passes (`allow-backend-server-header: "true"`);
    /// the proxy's own answers carry none.
    #[default]
    Backend,
}

/// Settings of client connections, read when one is accepted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Connections {
    /// A PROXY protocol header starts every connection (`--proxy-protocol`,
    /// `use-proxy-protocol`).
    pub(crate) proxy_protocol: bool,
    /// Time for a request head and a TLS handshake (`--client-header-timeout`,
    /// `client-header-timeout`).
    pub(crate) header_timeout: Duration,
    /// Idle time before a keep-alive connection closes (`--idle-timeout`, `keep-alive`).
    /// Zero: no keep-alive (nginx's `keepalive_timeout 0`).
    pub(crate) idle_timeout: Duration,
    /// Requests on one connection before it closes (`keep-alive-requests`; nginx's
    /// `keepalive_requests`); `None`: no limit.
    pub(crate) max_requests: Option<u64>,
    /// Largest request head (`--max-header-bytes`, `large-client-header-buffers`).
    pub(crate) max_header_bytes: u64,
}

/// Settings of pooled upstream connections, read when one goes back to the pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct UpstreamKeepalive {
    /// Idle time before a pooled connection closes (`--idle-timeout`,
    /// `upstream-keepalive-timeout`); zero: none is kept.
    pub(crate) idle_timeout: Duration,
    /// Requests one connection carries at most (`upstream-keepalive-requests`).
    pub(crate) max_requests: Option<u64>,
    /// Longest life of one connection (`upstream-keepalive-time`).
    pub(crate) max_age: Option<Duration>,
    /// Idle connections kept per endpoint and worker (`upstream-keepalive-connections`).
    pub(crate) max_idle: Option<usize>,
}

impl Settings {
    /// `pool` with the upstream keep-alive settings in force.
    pub(crate) fn pool(&self, pool: PoolConfig) -> PoolConfig {
        let keepalive = &self.upstream_keepalive;
        PoolConfig {
            idle_timeout: keepalive.idle_timeout,
            max_requests: keepalive.max_requests,
            max_age: keepalive.max_age,
            max_idle: keepalive.max_idle.unwrap_or(pool.max_idle),
            ..pool
        }
    }

    /// The flags alone (no ConfigMap). `proxy_id`: this proxy's `Via` name.
    pub(crate) fn from_flags(args: &ProxyArgs, proxy_id: &str) -> Settings {
        Settings::new(args, proxy_id, &ProxyGlobals::default())
    }

    /// The flags overridden by `globals`.
    pub(crate) fn new(args: &ProxyArgs, proxy_id: &str, globals: &ProxyGlobals) -> Settings {
        let g = globals;
        Settings {
            policy: header_policy(args, proxy_id, g),
            hsts: hsts(
                g.hsts.unwrap_or(args.hsts),
                g.hsts_max_age.unwrap_or(args.hsts_max_age),
                g.hsts_include_subdomains
                    .unwrap_or(args.hsts_include_subdomains),
                g.hsts_preload.unwrap_or(args.hsts_preload),
            ),
            limit_req_status: status(g.limit_req_status_code, args.limit_req_status_code),
            limit_conn_status: status(g.limit_conn_status_code, args.limit_req_status_code),
            global_rate_limit_status: g
                .global_rate_limit_status_code
                .and_then(|code| StatusCode::from_u16(code).ok()),
            client_body_timeout: g.client_body_timeout.unwrap_or(args.client_body_timeout),
            server_header: match (g.allow_backend_server_header, g.server_tokens) {
                (Some(true), _) => ServerHeader::Backend,
                (_, Some(true)) => ServerHeader::Ours,
                _ => ServerHeader::None,
            },
            compression: compression(&args.compression, g),
            access_log: args.access_log && g.disable_access_log != Some(true),
            access_log_format: g.log_format_upstream.as_ref().map(|format| {
                // ingress-nginx's template: escape=none wins over escape=json.
                let escape = match (g.log_format_escape_none, g.log_format_escape_json) {
                    (Some(true), _) => LogEscape::None,
                    (_, Some(true)) => LogEscape::Json,
                    _ => LogEscape::Default,
                };
                Arc::new(AccessFormat::new(format.clone(), escape))
            }),
            connections: Connections {
                proxy_protocol: g.use_proxy_protocol.unwrap_or(args.proxy_protocol),
                header_timeout: g
                    .client_header_timeout
                    .unwrap_or(args.client_header_timeout),
                idle_timeout: g.keep_alive.unwrap_or(args.idle_timeout),
                max_requests: g.keep_alive_requests,
                max_header_bytes: g.max_header_bytes.unwrap_or(args.max_header_bytes),
            },
            upstream_keepalive: UpstreamKeepalive {
                idle_timeout: g.upstream_keepalive_timeout.unwrap_or(args.idle_timeout),
                max_requests: g.upstream_keepalive_requests,
                max_age: g.upstream_keepalive_time,
                max_idle: g
                    .upstream_keepalive_connections
                    .map(|n| usize::try_from(n).unwrap_or(usize::MAX)),
            },
            tracing: tracing(&args.tracing, &g.tracing),
            global_rate_limit: global_rate_limit(&args.global_rate_limit, &g.global_rate_limit),
            tls: g.tls.clone(),
        }
    }
}

/// The global rate limit flags with the ConfigMap's memcached keys over them; its host
/// chooses memcached, the only store ingress-nginx has.
fn global_rate_limit(
    flags: &GlobalRateLimitArgs,
    m: &GlobalRateLimitGlobals,
) -> GlobalRateLimitArgs {
    let mut out = flags.clone();
    if let Some(host) = &m.memcached_host {
        out.global_rate_limit_backend = GlobalRateLimitBackend::Memcached;
        out.global_rate_limit_memcached_host = host.clone();
    }
    if let Some(port) = m.memcached_port {
        out.global_rate_limit_memcached_port = port;
    }
    if let Some(timeout) = m.memcached_connect_timeout {
        out.global_rate_limit_memcached_connect_timeout = timeout;
    }
    if let Some(idle) = m.memcached_max_idle_timeout {
        out.global_rate_limit_memcached_max_idle_timeout = idle;
    }
    if let Some(size) = m.memcached_pool_size {
        out.global_rate_limit_memcached_pool_size = size;
    }
    out
}

/// The tracing flags with the ConfigMap's OpenTelemetry keys over them.
fn tracing(flags: &Tracing, t: &TracingGlobals) -> Tracing {
    let mut out = flags.clone();
    if let Some(on) = t.enable {
        out.enable_opentelemetry = on;
    }
    if let Some(trust) = t.trust_incoming_span {
        out.opentelemetry_trust_incoming_span = trust;
    }
    if let Some(name) = &t.operation_name {
        out.opentelemetry_operation_name = name.clone();
    }
    if let Some(host) = &t.collector_host {
        out.otlp_collector_host = host.clone();
    }
    if let Some(port) = t.collector_port {
        out.otlp_collector_port = port;
    }
    if let Some(name) = &t.service_name {
        out.otel_service_name = name.clone();
    }
    if let Some(sampler) = t
        .sampler
        .as_deref()
        .and_then(|s| <OtelSampler as clap::ValueEnum>::from_str(s, true).ok())
    {
        out.otel_sampler = sampler;
    }
    if let Some(ratio) = t
        .sampler_ratio
        .as_deref()
        .and_then(|r| parse_sampler_ratio(r).ok())
    {
        out.otel_sampler_ratio = ratio;
    }
    if let Some(parent) = t.sampler_parent_based {
        out.otel_sampler_parent_based = parent;
    }
    if let Some(size) = t.max_queue_size {
        out.otel_max_queuesize = size;
    }
    if let Some(delay) = t.schedule_delay_millis {
        out.otel_schedule_delay_millis = delay;
    }
    if let Some(size) = t.max_export_batch_size {
        out.otel_max_export_batch_size = size;
    }
    out
}

/// ingress-nginx's `proxy-real-ip-cidr` default: every address.
fn everyone() -> Vec<Cidr> {
    ["0.0.0.0/0", "::/0"]
        .iter()
        .filter_map(|net| parse_cidr(net).ok())
        .collect()
}

/// Who is believed and how: `--trusted-proxies` (chain kept, every forwarding field
/// believed), or the ConfigMap's `use-forwarded-headers` / `enable-real-ip` with
/// `proxy-real-ip-cidr` (ingress-nginx: the chain is kept only with
/// `compute-full-forwarded-for`; `enable-real-ip` believes the address alone).
fn header_policy(args: &ProxyArgs, proxy_id: &str, g: &ProxyGlobals) -> HeaderPolicy {
    let from_config_map = g.use_forwarded_headers.is_some() || g.enable_real_ip.is_some();
    let underscores = g
        .enable_underscores_in_headers
        .unwrap_or(args.allow_underscore_headers);
    let mut policy = HeaderPolicy::new(Vec::new(), underscores, proxy_id);
    if from_config_map {
        let fields = g.use_forwarded_headers == Some(true);
        if fields || g.enable_real_ip == Some(true) {
            policy.trusted = g.proxy_real_ip_cidr.clone().unwrap_or_else(everyone);
        }
        policy.believe_fields = fields;
        policy.full_forwarded_for = fields && g.compute_full_forwarded_for == Some(true);
    } else {
        policy.trusted = args.trusted_proxies.clone();
        policy.believe_fields = true;
        policy.full_forwarded_for = g.compute_full_forwarded_for.unwrap_or(true);
    }
    if let Some(name) = &g.forwarded_for_header
        && let Ok(name) = http::HeaderName::from_bytes(name.as_bytes())
    {
        policy.forwarded_for = name;
    }
    policy
}

/// The `Strict-Transport-Security` value, `None` when off.
fn hsts(on: bool, max_age: u64, subdomains: bool, preload: bool) -> Option<HeaderValue> {
    if !on {
        return None;
    }
    let mut value = format!("max-age={max_age}");
    if subdomains {
        value.push_str("; includeSubDomains");
    }
    if preload {
        value.push_str("; preload");
    }
    HeaderValue::try_from(value).ok()
}

/// The ConfigMap's status if set, else the flag's (503 if out of range, which clap and the
/// ConfigMap reader prevent).
fn status(config_map: Option<u16>, flag: u16) -> StatusCode {
    StatusCode::from_u16(config_map.unwrap_or(flag)).unwrap_or(StatusCode::SERVICE_UNAVAILABLE)
}

/// The compression flags with the ConfigMap's keys over them. The reader checked the
/// values; one that still does not parse here keeps the flag's.
fn compression(flags: &Compression, g: &ProxyGlobals) -> Compression {
    let c = &g.compression;
    let mut out = flags.clone();
    if let Some(on) = c.gzip {
        out.use_gzip = on;
    }
    if let Some(level) = c.gzip_level {
        out.gzip_level = level;
    }
    if let Some(min) = c.gzip_min_length {
        out.gzip_min_length = min;
    }
    if let Some(types) = c.gzip_types.as_deref().and_then(|t| parse_types(t).ok()) {
        out.gzip_types = types;
    }
    if let Some(agents) = c
        .gzip_disable
        .as_deref()
        .and_then(|a| parse_user_agents(a).ok())
    {
        out.gzip_disable = agents;
    }
    if let Some(on) = c.brotli {
        out.enable_brotli = on;
    }
    if let Some(level) = c.brotli_level {
        out.brotli_level = level;
    }
    if let Some(min) = c.brotli_min_length {
        out.brotli_min_length = min;
    }
    if let Some(types) = c.brotli_types.as_deref().and_then(|t| parse_types(t).ok()) {
        out.brotli_types = types;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// ingress-nginx "ConfigMaps": a key set overrides the flag; unset, the flag holds.
    #[test]
    fn config_map_keys_override_the_flags() {
        let args = ProxyArgs::default();
        let flags = Settings::from_flags(&args, "p");
        assert_eq!(
            flags.hsts.as_ref().map(|v| v.to_str().unwrap().to_owned()),
            Some("max-age=31536000; includeSubDomains".to_owned())
        );
        assert_eq!(flags.limit_req_status, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(flags.server_header, ServerHeader::None);
        assert!(flags.policy.trusted.is_empty());

        let globals = ProxyGlobals {
            hsts_max_age: Some(60),
            hsts_preload: Some(true),
            limit_conn_status_code: Some(429),
            use_forwarded_headers: Some(true),
            server_tokens: Some(true),
            keep_alive: Some(Duration::from_secs(5)),
            ..Default::default()
        };
        let set = Settings::new(&args, "p", &globals);
        assert_eq!(
            set.hsts.unwrap().to_str().unwrap(),
            "max-age=60; includeSubDomains; preload"
        );
        assert_eq!(set.limit_req_status, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(set.limit_conn_status, StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(set.server_header, ServerHeader::Ours);
        assert_eq!(set.connections.idle_timeout, Duration::from_secs(5));
        // use-forwarded-headers without proxy-real-ip-cidr: everyone, as ingress-nginx;
        // the chain is replaced unless compute-full-forwarded-for.
        assert!(set.policy.trusts("203.0.113.9".parse().unwrap()));
        assert!(set.policy.believe_fields && !set.policy.full_forwarded_for);
    }

    #[test]
    fn enable_real_ip_believes_the_address_only() {
        let globals = ProxyGlobals {
            enable_real_ip: Some(true),
            proxy_real_ip_cidr: Some(vec![parse_cidr("10.0.0.0/8").unwrap()]),
            forwarded_for_header: Some("cf-connecting-ip".into()),
            ..Default::default()
        };
        let set = Settings::new(&ProxyArgs::default(), "p", &globals);
        assert!(set.policy.trusts("10.1.2.3".parse().unwrap()));
        assert!(!set.policy.trusts("192.0.2.1".parse().unwrap()));
        assert!(!set.policy.believe_fields);
        assert_eq!(set.policy.forwarded_for.as_str(), "cf-connecting-ip");
    }
}

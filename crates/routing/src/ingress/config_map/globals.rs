//! The ConfigMap keys that set the whole proxy (every listener, every request) rather than
//! a route's annotation default: parsed here into [`ProxyGlobals`], with ingress-nginx's
//! value syntax (`internal/ingress/controller/config/config.go`: Go booleans, whole
//! seconds, nginx sizes).

use std::time::Duration;

use crate::cidr::parse_cidr;
use crate::ingress::annotations::{parse_bool, parse_size};
use crate::nginx_config::{NginxConfig, ProxyGlobals, TracingGlobals, ValueMatch};

/// The keys read here, in the order of docs/configmap.md.
pub(crate) const GLOBAL_KEYS: &[&str] = &[
    "hsts",
    "hsts-max-age",
    "hsts-include-subdomains",
    "hsts-preload",
    "limit-req-status-code",
    "limit-conn-status-code",
    "global-rate-limit-status-code",
    "use-forwarded-headers",
    "enable-real-ip",
    "proxy-real-ip-cidr",
    "compute-full-forwarded-for",
    "forwarded-for-header",
    "use-proxy-protocol",
    "enable-underscores-in-headers",
    "server-tokens",
    "allow-backend-server-header",
    "client-header-timeout",
    "client-body-timeout",
    "keep-alive",
    "keep-alive-requests",
    "large-client-header-buffers",
    "upstream-keepalive-timeout",
    "upstream-keepalive-requests",
    "upstream-keepalive-time",
    "upstream-keepalive-connections",
    "disable-access-log",
    "log-format-upstream",
    "log-format-escape-json",
    "log-format-escape-none",
    "use-gzip",
    "gzip-level",
    "gzip-min-length",
    "gzip-types",
    "gzip-disable",
    "enable-brotli",
    "brotli-level",
    "brotli-min-length",
    "brotli-types",
    "enable-opentelemetry",
    "opentelemetry-trust-incoming-span",
    "opentelemetry-operation-name",
    "otlp-collector-host",
    "otlp-collector-port",
    "otel-service-name",
    "otel-sampler",
    "otel-sampler-ratio",
    "otel-sampler-parent-based",
    "otel-max-queuesize",
    "otel-schedule-delay-millis",
    "otel-max-export-batch-size",
    "global-rate-limit-memcached-host",
    "global-rate-limit-memcached-port",
    "global-rate-limit-memcached-connect-timeout",
    "global-rate-limit-memcached-max-idle-timeout",
    "global-rate-limit-memcached-pool-size",
    "ssl-protocols",
    "ssl-ciphers",
    "ssl-session-tickets",
    "ssl-session-cache",
    "ssl-session-cache-size",
];

/// Keys applied to every request of every Ingress route (with `block-cidrs`).
pub(crate) const BLOCK_KEYS: &[&str] = &["block-user-agents", "block-referers"];

/// Applies one key of [`GLOBAL_KEYS`] or [`BLOCK_KEYS`] to `out`.
pub(crate) fn apply(out: &mut NginxConfig, key: &str, value: &str) -> Result<(), String> {
    match key {
        "block-user-agents" => out.block_user_agents = value_list(value)?,
        "block-referers" => out.block_referers = value_list(value)?,
        _ => apply_global(std::sync::Arc::make_mut(&mut out.globals), key, value)?,
    }
    Ok(())
}

fn apply_global(g: &mut ProxyGlobals, key: &str, value: &str) -> Result<(), String> {
    if let Some(outcome) = apply_tracing(&mut g.tracing, key, value) {
        return outcome;
    }
    let c = &mut g.compression;
    match key {
        "hsts" => g.hsts = Some(parse_bool(value)?),
        "hsts-max-age" => g.hsts_max_age = Some(number(value)?),
        "hsts-include-subdomains" => g.hsts_include_subdomains = Some(parse_bool(value)?),
        "hsts-preload" => g.hsts_preload = Some(parse_bool(value)?),
        "limit-req-status-code" => g.limit_req_status_code = Some(status(value)?),
        "limit-conn-status-code" => g.limit_conn_status_code = Some(status(value)?),
        "global-rate-limit-status-code" => g.global_rate_limit_status_code = Some(status(value)?),
        "use-forwarded-headers" => g.use_forwarded_headers = Some(parse_bool(value)?),
        "enable-real-ip" => g.enable_real_ip = Some(parse_bool(value)?),
        "proxy-real-ip-cidr" => {
            let cidrs = value
                .split(',')
                .map(str::trim)
                .filter(|v| !v.is_empty())
                .map(|v| parse_cidr(v).map_err(|e| format!("{v:?} is not an address or CIDR: {e}")))
                .collect::<Result<Vec<_>, _>>()?;
            if cidrs.is_empty() {
                return Err("no address or CIDR".to_owned());
            }
            g.proxy_real_ip_cidr = Some(cidrs);
        }
        "compute-full-forwarded-for" => g.compute_full_forwarded_for = Some(parse_bool(value)?),
        "forwarded-for-header" => {
            let name = value.trim();
            if http::HeaderName::from_bytes(name.as_bytes()).is_err() || name.is_empty() {
                return Err(format!("{name:?} is not a header name"));
            }
            g.forwarded_for_header = Some(name.to_ascii_lowercase().into());
        }
        "use-proxy-protocol" => g.use_proxy_protocol = Some(parse_bool(value)?),
        "enable-underscores-in-headers" => {
            g.enable_underscores_in_headers = Some(parse_bool(value)?)
        }
        "server-tokens" => g.server_tokens = Some(parse_bool(value)?),
        "allow-backend-server-header" => g.allow_backend_server_header = Some(parse_bool(value)?),
        "client-header-timeout" => g.client_header_timeout = Some(seconds(value, false)?),
        "client-body-timeout" => g.client_body_timeout = Some(seconds(value, false)?),
        "keep-alive" => g.keep_alive = Some(seconds(value, true)?),
        "keep-alive-requests" => g.keep_alive_requests = Some(positive(value)?),
        "large-client-header-buffers" => g.max_header_bytes = Some(header_buffers(value)?),
        "upstream-keepalive-timeout" => g.upstream_keepalive_timeout = Some(seconds(value, true)?),
        "upstream-keepalive-requests" => g.upstream_keepalive_requests = Some(positive(value)?),
        "upstream-keepalive-time" => g.upstream_keepalive_time = Some(nginx_time(value)?),
        "upstream-keepalive-connections" => g.upstream_keepalive_connections = Some(number(value)?),
        "disable-access-log" => g.disable_access_log = Some(parse_bool(value)?),
        "ssl-protocols" => {
            g.tls.protocols = Some(crate::openssl_ciphers::parse_protocol_list(value)?)
        }
        "ssl-ciphers" => {
            g.tls.ciphers = Some(crate::openssl_ciphers::parse_cipher_list(value)?.suites)
        }
        "ssl-session-tickets" => g.tls.session_tickets = Some(parse_bool(value)?),
        "ssl-session-cache" => g.tls.session_cache = Some(parse_bool(value)?),
        "ssl-session-cache-size" => {
            // nginx's `shared:SSL:10m`: one megabyte holds about 4000 sessions.
            let bytes = parse_size(value)?;
            g.tls.session_cache_entries = Some(size(bytes.saturating_mul(4000) / (1024 * 1024)));
        }
        "log-format-upstream" => g.log_format_upstream = Some(crate::LogFormat::parse(value)?),
        "log-format-escape-json" => g.log_format_escape_json = Some(parse_bool(value)?),
        "log-format-escape-none" => g.log_format_escape_none = Some(parse_bool(value)?),
        "global-rate-limit-memcached-host" => {
            let host = value.trim();
            if host.is_empty()
                || host.contains(['/', ' ', '@'])
                || host.chars().any(char::is_control)
            {
                return Err(format!("{value:?} is not a host name or address"));
            }
            g.global_rate_limit.memcached_host = Some(host.to_owned());
        }
        "global-rate-limit-memcached-port" => {
            g.global_rate_limit.memcached_port = Some(match value.trim().parse::<u16>() {
                Ok(port) if port > 0 => port,
                _ => return Err(format!("{value:?} is not a port (1-65535)")),
            })
        }
        "global-rate-limit-memcached-connect-timeout" => {
            g.global_rate_limit.memcached_connect_timeout =
                Some(Duration::from_millis(positive(value)?))
        }
        "global-rate-limit-memcached-max-idle-timeout" => {
            g.global_rate_limit.memcached_max_idle_timeout =
                Some(Duration::from_millis(positive(value)?))
        }
        "global-rate-limit-memcached-pool-size" => {
            g.global_rate_limit.memcached_pool_size = Some(size(positive(value)?))
        }
        "use-gzip" => c.gzip = Some(parse_bool(value)?),
        "gzip-level" => c.gzip_level = Some(level(value, 1, 9)?),
        "gzip-min-length" => c.gzip_min_length = Some(number(value)?),
        "gzip-types" => c.gzip_types = Some(media_types(value)?),
        "gzip-disable" => {
            for pattern in value.split_ascii_whitespace() {
                if pattern != "msie6" {
                    regex::RegexBuilder::new(pattern)
                        .case_insensitive(true)
                        .build()
                        .map_err(|e| format!("{pattern:?} is not a regular expression: {e}"))?;
                }
            }
            c.gzip_disable = Some(value.trim().to_owned());
        }
        "enable-brotli" => c.brotli = Some(parse_bool(value)?),
        "brotli-level" => c.brotli_level = Some(level(value, 0, 11)?),
        "brotli-min-length" => c.brotli_min_length = Some(number(value)?),
        "brotli-types" => c.brotli_types = Some(media_types(value)?),
        _ => return Err(format!("{key} is not a global key")),
    }
    Ok(())
}

/// The OpenTelemetry keys (ingress-nginx's `opentelemetry` section); `None`: not one.
fn apply_tracing(t: &mut TracingGlobals, key: &str, value: &str) -> Option<Result<(), String>> {
    let text = || -> Result<String, String> {
        let text = value.trim();
        match text.is_empty() || text.chars().any(char::is_control) {
            true => Err(format!("{value:?} is empty or holds control characters")),
            false => Ok(text.to_owned()),
        }
    };
    let outcome = (|| {
        match key {
            "enable-opentelemetry" => t.enable = Some(parse_bool(value)?),
            "opentelemetry-trust-incoming-span" => t.trust_incoming_span = Some(parse_bool(value)?),
            "opentelemetry-operation-name" => t.operation_name = Some(text()?),
            "otlp-collector-host" => {
                let host = text()?;
                if host.contains(['/', ' ', '@']) {
                    return Err(format!("{host:?} is not a host name or address"));
                }
                t.collector_host = Some(host);
            }
            "otlp-collector-port" => {
                t.collector_port = Some(match value.trim().parse::<u16>() {
                    Ok(port) if port > 0 => port,
                    _ => return Err(format!("{value:?} is not a port (1-65535)")),
                })
            }
            "otel-service-name" => t.service_name = Some(text()?),
            "otel-sampler" => {
                let sampler = value.trim();
                if !["AlwaysOn", "AlwaysOff", "TraceIdRatioBased"]
                    .iter()
                    .any(|s| s.eq_ignore_ascii_case(sampler))
                {
                    return Err(format!(
                        "{value:?} is not AlwaysOn, AlwaysOff or TraceIdRatioBased"
                    ));
                }
                t.sampler = Some(sampler.to_owned());
            }
            "otel-sampler-ratio" => {
                match value.trim().parse::<f64>() {
                    Ok(ratio) if (0.0..=1.0).contains(&ratio) => {}
                    _ => return Err(format!("{value:?} is not a number from 0 to 1")),
                }
                t.sampler_ratio = Some(value.trim().to_owned());
            }
            "otel-sampler-parent-based" => t.sampler_parent_based = Some(parse_bool(value)?),
            "otel-max-queuesize" => t.max_queue_size = Some(size(positive(value)?)),
            "otel-schedule-delay-millis" => t.schedule_delay_millis = Some(positive(value)?),
            "otel-max-export-batch-size" => t.max_export_batch_size = Some(size(positive(value)?)),
            _ => return Ok(false),
        }
        Ok(true)
    })();
    match outcome {
        Ok(false) => None,
        Ok(true) => Some(Ok(())),
        Err(why) => Some(Err(why)),
    }
}

/// A count as a `usize`.
fn size(n: u64) -> usize {
    usize::try_from(n).unwrap_or(usize::MAX)
}

/// A whole number.
fn number(value: &str) -> Result<u64, String> {
    value
        .trim()
        .parse()
        .map_err(|_| format!("{value:?} is not a whole number"))
}

/// A whole number above zero.
fn positive(value: &str) -> Result<u64, String> {
    match number(value)? {
        0 => Err(format!("{value:?} must be greater than zero")),
        n => Ok(n),
    }
}

/// An HTTP status nginx accepts for `limit_req_status` and `limit_conn_status` (400-599).
fn status(value: &str) -> Result<u16, String> {
    match value.trim().parse::<u16>() {
        Ok(code) if (400..=599).contains(&code) => Ok(code),
        _ => Err(format!("{value:?} is not a status from 400 to 599")),
    }
}

/// A compression level in `min..=max`.
fn level(value: &str, min: u32, max: u32) -> Result<u32, String> {
    match value.trim().parse::<u32>() {
        Ok(n) if (min..=max).contains(&n) => Ok(n),
        _ => Err(format!("{value:?} is not a level from {min} to {max}")),
    }
}

/// Whole seconds, as ingress-nginx's integer keys (`keep-alive: "75"`); `zero_ok`: `0`
/// allowed (nginx: off).
fn seconds(value: &str, zero_ok: bool) -> Result<Duration, String> {
    let n = number(value)?;
    if n == 0 && !zero_ok {
        return Err(format!("{value:?} must be greater than zero"));
    }
    Ok(Duration::from_secs(n))
}

/// An nginx time (`1h`, `30m`, `90s`, `500ms`, or seconds), greater than zero.
fn nginx_time(value: &str) -> Result<Duration, String> {
    let duration = sluice_units::parse_duration(value.trim())
        .map_err(|e| format!("{value:?} is not a time: {e}"))?;
    if duration.is_zero() {
        return Err(format!("{value:?} must be greater than zero"));
    }
    Ok(duration)
}

/// `large-client-header-buffers`: `number size` (nginx: `4 8k`), the largest head being
/// their product.
fn header_buffers(value: &str) -> Result<u64, String> {
    let mut words = value.split_ascii_whitespace();
    let (Some(count), Some(size), None) = (words.next(), words.next(), words.next()) else {
        return Err(format!("{value:?} is not `number size` (e.g. `4 8k`)"));
    };
    let count = positive(count)?;
    let size = parse_size(size)?;
    if size == 0 {
        return Err(format!(
            "{value:?}: the buffer size must be greater than zero"
        ));
    }
    Ok(count.saturating_mul(size))
}

/// A space-separated list of media types (`text/html application/json`, or `*`).
fn media_types(value: &str) -> Result<String, String> {
    for media in value.split_ascii_whitespace() {
        if media != "*" && !media.contains('/') {
            return Err(format!("{media:?} is not a media type (type/subtype)"));
        }
    }
    Ok(value.trim().to_owned())
}

/// A comma-separated `block-user-agents` / `block-referers` list, as nginx's `map` reads
/// each entry: `~*` a case-insensitive regular expression, `~` a case-sensitive one,
/// anything else the exact value.
fn value_list(value: &str) -> Result<Vec<ValueMatch>, String> {
    value
        .split(',')
        .map(str::trim)
        .filter(|v| !v.is_empty())
        .map(|entry| {
            let (pattern, insensitive) = if let Some(rest) = entry.strip_prefix("~*") {
                (rest, true)
            } else if let Some(rest) = entry.strip_prefix('~') {
                (rest, false)
            } else {
                return Ok(ValueMatch::Exact(entry.into()));
            };
            regex::RegexBuilder::new(pattern)
                .case_insensitive(insensitive)
                .build()
                .map(ValueMatch::Regex)
                .map_err(|e| format!("{entry:?} is not a regular expression: {e}"))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn applied(pairs: &[(&str, &str)]) -> Result<NginxConfig, String> {
        let mut out = NginxConfig::default();
        for (key, value) in pairs {
            apply(&mut out, key, value)?;
        }
        Ok(out)
    }

    /// ingress-nginx "ConfigMaps": each global key's value syntax.
    #[test]
    fn values_read_with_ingress_nginx_syntax() {
        let config = applied(&[
            ("hsts", "false"),
            ("hsts-max-age", "600"),
            ("limit-req-status-code", "429"),
            ("use-forwarded-headers", "true"),
            ("proxy-real-ip-cidr", "10.0.0.0/8, 192.0.2.1"),
            ("forwarded-for-header", "CF-Connecting-IP"),
            ("keep-alive", "0"),
            ("large-client-header-buffers", "4 8k"),
            ("upstream-keepalive-time", "1h"),
            ("gzip-level", "5"),
            ("gzip-types", "text/html application/json"),
            ("block-user-agents", "~*curl, exact-agent/1.0 ,~^Bot"),
            ("ssl-protocols", "TLSv1.2 TLSv1.3"),
            (
                "ssl-ciphers",
                "ECDHE-RSA-AES128-GCM-SHA256:ECDHE-ECDSA-AES256-GCM-SHA384",
            ),
            ("ssl-session-cache-size", "10m"),
        ])
        .unwrap();
        let g = &config.globals;
        assert_eq!(g.hsts, Some(false));
        assert_eq!(g.hsts_max_age, Some(600));
        assert_eq!(g.limit_req_status_code, Some(429));
        assert_eq!(g.proxy_real_ip_cidr.as_ref().map(Vec::len), Some(2));
        assert_eq!(g.forwarded_for_header.as_deref(), Some("cf-connecting-ip"));
        assert_eq!(g.keep_alive, Some(Duration::ZERO));
        assert_eq!(g.max_header_bytes, Some(32 * 1024));
        assert_eq!(g.upstream_keepalive_time, Some(Duration::from_secs(3600)));
        assert_eq!(g.compression.gzip_level, Some(5));
        assert!(g.tls.protocols.as_ref().is_some_and(|p| p.tls12 && p.tls13));
        assert_eq!(g.tls.ciphers.as_ref().map(Vec::len), Some(2));
        // nginx: one megabyte of session cache holds about 4000 sessions.
        assert_eq!(g.tls.session_cache_entries, Some(40_000));
        let logged = applied(&[
            ("log-format-upstream", "$remote_addr \"$request\""),
            ("log-format-escape-json", "true"),
        ])
        .unwrap();
        let g = &logged.globals;
        assert_eq!(
            g.log_format_upstream.as_ref().unwrap().variables().count(),
            2
        );
        assert_eq!(g.log_format_escape_json, Some(true));
        let agents = &config.block_user_agents;
        assert!(agents[0].matches(b"CURL/8.0"), "~* ignores case");
        assert!(agents[1].matches(b"exact-agent/1.0"));
        assert!(
            !agents[1].matches(b"exact-agent/1.0 extra"),
            "exact is whole"
        );
        assert!(agents[2].matches(b"Bot/1") && !agents[2].matches(b"bot/1"));
    }

    #[test]
    fn bad_values_are_refused_with_the_reason() {
        for (key, value, said) in [
            ("hsts", "yes please", "not a boolean"),
            ("limit-req-status-code", "200", "400 to 599"),
            ("proxy-real-ip-cidr", "10.0.0.0/33", "not an address"),
            ("forwarded-for-header", "bad header", "not a header name"),
            ("client-header-timeout", "0", "greater than zero"),
            ("keep-alive-requests", "many", "whole number"),
            ("large-client-header-buffers", "4", "number size"),
            ("gzip-level", "10", "1 to 9"),
            ("brotli-level", "12", "0 to 11"),
            ("gzip-types", "html", "media type"),
            ("gzip-disable", "MSIE [", "regular expression"),
            ("block-referers", "~*(", "regular expression"),
            ("ssl-protocols", "SSLv3", "TLSv1.2"),
            (
                "log-format-upstream",
                "$remote_addr $ssl_cipher_x",
                "$ssl_cipher_x",
            ),
            ("log-format-escape-json", "yes", "not a boolean"),
        ] {
            let error = applied(&[(key, value)]).expect_err(key);
            assert!(error.contains(said), "{key}: {error}");
        }
    }

    #[test]
    fn every_global_key_is_applied_by_this_file() {
        for key in GLOBAL_KEYS {
            // A value no key accepts: the error must be about the value, not the key.
            let error = applied(&[(key, "\u{1}(")]).expect_err(key);
            assert!(!error.contains("not a global key"), "{key}: {error}");
        }
    }
}

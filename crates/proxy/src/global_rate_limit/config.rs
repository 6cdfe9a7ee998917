//! The global rate limit's flags, named and valued as ingress-nginx's ConfigMap keys
//! (`global-rate-limit-memcached-host`, `-port`, `-connect-timeout`, `-max-idle-timeout`,
//! `-pool-size`, `global-rate-limit-status-code`), plus sluice's choice of store
//! (`--global-rate-limit-backend`, `--global-rate-limit-redis-addr`) and of what happens
//! when the store cannot answer (`--global-rate-limit-fail-closed`).

use std::time::Duration;

/// Where the counters live.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum GlobalRateLimitBackend {
    /// memcached (ingress-nginx's store): `--global-rate-limit-memcached-host` and `-port`.
    #[default]
    Memcached,
    /// Redis: `--global-rate-limit-redis-addr`.
    Redis,
}

/// Flags of the global rate limit (the `global-rate-limit*` annotations). Without a store
/// address the annotations count nothing, as in ingress-nginx without a memcached host.
#[derive(clap::Args, Clone, Debug, PartialEq, Eq)]
pub struct GlobalRateLimitArgs {
    /// Store of the global rate limit's counters, shared by every replica: `memcached` or
    /// `redis`.
    #[arg(long, value_enum, default_value = "memcached")]
    pub global_rate_limit_backend: GlobalRateLimitBackend,

    /// memcached host (IP or DNS name) for the global rate limit; empty: off
    /// (ingress-nginx's `global-rate-limit-memcached-host`).
    #[arg(long, value_name = "HOST", default_value = "")]
    pub global_rate_limit_memcached_host: String,

    /// memcached port (ingress-nginx's `global-rate-limit-memcached-port`).
    #[arg(long, value_name = "PORT", default_value_t = 11211)]
    pub global_rate_limit_memcached_port: u16,

    /// Longest wait to connect to the store and for each command, in milliseconds or a
    /// duration (ingress-nginx's `global-rate-limit-memcached-connect-timeout`); applies to
    /// Redis too.
    #[arg(long, value_name = "MILLISECONDS", default_value = "50", value_parser = parse_millis)]
    pub global_rate_limit_memcached_connect_timeout: Duration,

    /// Idle store connections are closed after this long, in milliseconds or a duration
    /// (ingress-nginx's `global-rate-limit-memcached-max-idle-timeout`).
    #[arg(long, value_name = "MILLISECONDS", default_value = "10000", value_parser = parse_millis)]
    pub global_rate_limit_memcached_max_idle_timeout: Duration,

    /// Idle memcached connections kept per worker thread (ingress-nginx's
    /// `global-rate-limit-memcached-pool-size`).
    #[arg(long, value_name = "N", default_value_t = 50)]
    pub global_rate_limit_memcached_pool_size: usize,

    /// Redis address for `--global-rate-limit-backend redis`: `host:port` or a
    /// `redis://` URL (with a database number or credentials).
    #[arg(long, value_name = "HOST:PORT|URL")]
    pub global_rate_limit_redis_addr: Option<String>,

    /// Status for requests over a route's `global-rate-limit` (ingress-nginx's
    /// `global-rate-limit-status-code`).
    #[arg(long, value_name = "STATUS", default_value_t = 429, value_parser = clap::value_parser!(u16).range(400..=599))]
    pub global_rate_limit_status_code: u16,

    /// When the store does not answer in time: `false` (default, ingress-nginx's choice)
    /// lets the request through; `true` answers 503.
    #[arg(long, default_value = "false", value_name = "BOOL", value_parser = sluice_units::parse_bool, num_args = 0..=1,
          require_equals = true, default_missing_value = "true")]
    pub global_rate_limit_fail_closed: bool,
}

impl Default for GlobalRateLimitArgs {
    /// The same values as the flag defaults.
    fn default() -> Self {
        GlobalRateLimitArgs {
            global_rate_limit_backend: GlobalRateLimitBackend::Memcached,
            global_rate_limit_memcached_host: String::new(),
            global_rate_limit_memcached_port: 11211,
            global_rate_limit_memcached_connect_timeout: Duration::from_millis(50),
            global_rate_limit_memcached_max_idle_timeout: Duration::from_millis(10_000),
            global_rate_limit_memcached_pool_size: 50,
            global_rate_limit_redis_addr: None,
            global_rate_limit_status_code: 429,
            global_rate_limit_fail_closed: false,
        }
    }
}

/// A whole number of milliseconds (ingress-nginx's unit for these keys), or a duration
/// with its unit (`50ms`, `1s`).
pub fn parse_millis(value: &str) -> Result<Duration, String> {
    let value = value.trim();
    if let Ok(ms) = value.parse::<u64>() {
        return Ok(Duration::from_millis(ms));
    }
    sluice_units::parse_duration(value).map_err(|e| format!("{value:?} {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser, Debug)]
    struct Cli {
        #[command(flatten)]
        args: GlobalRateLimitArgs,
    }

    #[test]
    fn defaults_are_ingress_nginx_configmap_defaults() {
        let cli = Cli::try_parse_from(["sluice"]).unwrap();
        assert_eq!(cli.args, GlobalRateLimitArgs::default());
    }

    #[test]
    fn values_take_the_configmap_syntax() {
        let cli = Cli::try_parse_from([
            "sluice",
            "--global-rate-limit-backend",
            "redis",
            "--global-rate-limit-redis-addr",
            "redis.cache:6379",
            "--global-rate-limit-memcached-connect-timeout",
            "80",
            "--global-rate-limit-memcached-max-idle-timeout",
            "2s",
            "--global-rate-limit-status-code",
            "503",
            "--global-rate-limit-fail-closed",
        ])
        .unwrap();
        let a = cli.args;
        assert_eq!(a.global_rate_limit_backend, GlobalRateLimitBackend::Redis);
        assert_eq!(
            a.global_rate_limit_memcached_connect_timeout,
            Duration::from_millis(80)
        );
        assert_eq!(
            a.global_rate_limit_memcached_max_idle_timeout,
            Duration::from_secs(2)
        );
        assert_eq!(a.global_rate_limit_status_code, 503);
        assert!(a.global_rate_limit_fail_closed);
        assert!(Cli::try_parse_from(["sluice", "--global-rate-limit-status-code", "200"]).is_err());
        assert!(Cli::try_parse_from(["sluice", "--global-rate-limit-backend", "etcd"]).is_err());
    }
}

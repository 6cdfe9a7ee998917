//! Command-line flags of the data plane ([`ProxyArgs`]) and their value parsers.
//!
//! The `sluice` binary flattens [`ProxyArgs`] into both of its serving subcommands, so every
//! listen address, timeout and limit of the proxy is a flag with a sane default.

use std::net::SocketAddr;

pub use sluice_routing::{Cidr, parse_cidr};
use std::time::Duration;

/// Default plain-HTTP listen address.
pub const DEFAULT_HTTP_ADDR: &str = "0.0.0.0:8080";
/// Default HTTPS listen address.
pub const DEFAULT_HTTPS_ADDR: &str = "0.0.0.0:8443";
/// Default admin (metrics, health) listen address: loopback only, it is not for the public.
pub const DEFAULT_ADMIN_ADDR: &str = "127.0.0.1:10254";

/// Flags of the data plane. `#[command(flatten)]` this into a clap command.
///
/// Durations and sizes take the project's one syntax ([`sluice_units`]): whole seconds or
/// units (`"60"`, `"250ms"`, `"1.5s"`, `"1m30s"`); bytes with an optional binary unit
/// (`"65536"`, `"8k"`, `"64KiB"`, `"1MB"`).
#[derive(clap::Args, Clone, Debug, PartialEq, Eq)]
pub struct ProxyArgs {
    /// Plain HTTP listen address (HTTP/1.1 and h2c with prior knowledge).
    #[arg(long, default_value = DEFAULT_HTTP_ADDR, value_name = "IP:PORT", value_parser = parse_listen_addr)]
    pub http_addr: SocketAddr,

    /// HTTPS listen address (HTTP/1.1 and HTTP/2 via ALPN; certificate chosen by SNI).
    #[arg(long, default_value = DEFAULT_HTTPS_ADDR, value_name = "IP:PORT", value_parser = parse_listen_addr)]
    pub https_addr: SocketAddr,

    /// Admin listen address serving /metrics, /healthz and /readyz.
    #[arg(long, default_value = DEFAULT_ADMIN_ADDR, value_name = "IP:PORT", value_parser = parse_listen_addr)]
    pub admin_addr: SocketAddr,

    /// Time allowed to establish a TCP connection to an endpoint before trying another.
    #[arg(long, default_value = "5s", value_name = "DURATION", value_parser = parse_timeout)]
    pub connect_timeout: Duration,

    /// Time allowed for an upstream to send its response head (504 after that).
    #[arg(long, default_value = "60s", value_name = "DURATION", value_parser = parse_timeout)]
    pub upstream_header_timeout: Duration,

    /// Time allowed for a client to send a request head (and to finish a TLS handshake).
    #[arg(long, default_value = "60s", value_name = "DURATION", value_parser = parse_timeout)]
    pub client_header_timeout: Duration,

    /// Idle time after which keep-alive connections are closed, on both sides; `0` turns
    /// keep-alive off (nginx `keepalive_timeout 0`).
    #[arg(long, default_value = "60s", value_name = "DURATION", value_parser = parse_duration)]
    pub idle_timeout: Duration,

    /// After the shutdown signal, how long in-flight requests may still run (`0`: none).
    #[arg(long, default_value = "30s", value_name = "DURATION", value_parser = parse_duration)]
    pub drain_timeout: Duration,

    /// Time allowed between two reads of a request body (nginx `client_body_timeout`); the
    /// client gets 408 and both connections close.
    #[arg(long, default_value = "60s", value_name = "DURATION", value_parser = parse_timeout)]
    pub client_body_timeout: Duration,

    /// Time allowed between two reads of an upstream response body (nginx
    /// `proxy_read_timeout`); the client connection is closed mid-body.
    #[arg(long, default_value = "60s", value_name = "DURATION", value_parser = parse_timeout)]
    pub upstream_read_timeout: Duration,

    /// Time allowed for an upstream to accept more of a request body (nginx
    /// `proxy_send_timeout`); the client gets 504.
    #[arg(long, default_value = "60s", value_name = "DURATION", value_parser = parse_timeout)]
    pub upstream_send_timeout: Duration,

    /// Time allowed for a client to take more of a response (nginx `send_timeout`); the
    /// connection is closed.
    #[arg(long, default_value = "60s", value_name = "DURATION", value_parser = parse_timeout)]
    pub send_timeout: Duration,

    /// A WebSocket with no byte moving either way for this long is closed (nginx applies
    /// `proxy_read_timeout` to upgraded connections; ingress-nginx users often raise it).
    #[arg(long, default_value = "60s", value_name = "DURATION", value_parser = parse_timeout)]
    pub websocket_idle_timeout: Duration,

    /// Longest wait for a route's external auth service (`auth-url`), connect included;
    /// past it the request gets 500.
    #[arg(long, default_value = "5s", value_name = "DURATION", value_parser = parse_timeout)]
    pub auth_timeout: Duration,

    /// Status for requests over a route's `limit-rps`/`limit-rpm` (ingress-nginx's
    /// `limit-req-status-code`).
    #[arg(long, value_name = "STATUS", default_value_t = 503, value_parser = clap::value_parser!(u16).range(400..=599))]
    pub limit_req_status_code: u16,

    /// The global rate limit's store (`--global-rate-limit-*`).
    #[command(flatten)]
    pub global_rate_limit: crate::global_rate_limit::config::GlobalRateLimitArgs,

    /// Peers whose `X-Forwarded-*` / `X-Real-IP` / `Forwarded` headers are believed
    /// (comma-separated CIDRs, e.g. a load balancer's range); everyone else's are replaced.
    /// ingress-nginx's `use-forwarded-headers` + `proxy-real-ip-cidr`.
    #[arg(long, value_name = "CIDRS", value_delimiter = ',', value_parser = parse_cidr)]
    pub trusted_proxies: Vec<Cidr>,

    /// Expect a PROXY protocol (v1 or v2) header at the start of every connection on the
    /// HTTP and HTTPS listeners; the address in it is the client's (ingress-nginx's
    /// `use-proxy-protocol`).
    #[arg(long, default_value = "false", value_name = "BOOL", value_parser = parse_bool, num_args = 0..=1,
          require_equals = true, default_missing_value = "true")]
    pub proxy_protocol: bool,

    /// Forward request headers whose names contain `_` (nginx drops them by default:
    /// `underscores_in_headers off`).
    #[arg(long, default_value = "false", value_name = "BOOL", value_parser = parse_bool, num_args = 0..=1,
          require_equals = true, default_missing_value = "true")]
    pub allow_underscore_headers: bool,

    /// This proxy's name in `Via` (loop detection); default `sluice-` and a random suffix,
    /// so that two replicas pointing at each other still see the loop.
    #[arg(long, value_name = "NAME",
          value_parser = clap::builder::NonEmptyStringValueParser::new())]
    pub proxy_id: Option<String>,

    /// Send `Strict-Transport-Security` on HTTPS responses (ingress-nginx's `hsts`, on by
    /// default).
    #[arg(long, default_value = "true", value_name = "BOOL", value_parser = parse_bool, num_args = 0..=1,
          require_equals = true, default_missing_value = "true")]
    pub hsts: bool,

    /// HSTS `max-age` in seconds (ingress-nginx's `hsts-max-age`).
    #[arg(long, value_name = "SECONDS", default_value = "31536000")]
    pub hsts_max_age: u64,

    /// HSTS `includeSubDomains` (ingress-nginx's `hsts-include-subdomains`).
    #[arg(long, default_value = "true", value_name = "BOOL", value_parser = parse_bool, num_args = 0..=1,
          require_equals = true, default_missing_value = "true")]
    pub hsts_include_subdomains: bool,

    /// HSTS `preload` (ingress-nginx's `hsts-preload`).
    #[arg(long, default_value = "false", value_name = "BOOL", value_parser = parse_bool, num_args = 0..=1,
          require_equals = true, default_missing_value = "true")]
    pub hsts_preload: bool,

    /// Largest request head (request line plus headers) accepted; larger gets 431.
    #[arg(long, default_value = "64KiB", value_name = "SIZE", value_parser = parse_size)]
    pub max_header_bytes: u64,

    /// Largest request body accepted (413 when exceeded); 0 means unlimited. Bytes, or with
    /// a binary unit as nginx's `client_max_body_size` takes it: `10m`, `10MiB` and `10MB`
    /// are all 10 × 1024² bytes.
    #[arg(long, default_value = "1GiB", value_name = "SIZE", value_parser = parse_size)]
    pub max_body_bytes: u64,

    /// Worker threads: each runs its own event loop with its own listening sockets
    /// (`SO_REUSEPORT`, so the kernel spreads new connections over them), upstream pools
    /// and no hand-offs to other threads; default (`sluice serve`, `sluice controller`): the
    /// CPUs this process may use. Unset in the library: the proxy serves on the caller's
    /// runtime.
    #[arg(long, value_name = "N", value_parser = parse_workers)]
    pub workers: Option<usize>,

    /// Pins worker `i` to the `i`-th CPU this process may use (with `--workers`).
    #[arg(long, default_value = "false", value_name = "BOOL", value_parser = parse_bool, num_args = 0..=1,
          require_equals = true, default_missing_value = "true")]
    pub pin_workers: bool,

    /// Which server reads plain HTTP/1.1 requests: `sluice` (its own loop; requests with a
    /// body, upgrades and unusual heads still go to hyper) or `hyper` (all of them).
    #[arg(long, value_enum, default_value = "sluice")]
    pub http1_server: Http1Server,

    /// Also export the metrics under another controller's names at `/metrics`:
    /// `ingress-nginx` adds `nginx_ingress_controller_*` (names, labels and buckets as
    /// ingress-nginx has them) so its dashboards and alerts keep working; `off` (default):
    /// sluice's names only.
    #[arg(long, value_enum, default_value = "off")]
    pub metrics_compat: MetricsCompat,

    /// The IngressClass `spec.controller` value this process serves, for the
    /// `controller_class` label of `--metrics-compat ingress-nginx`; not a flag of its own:
    /// `sluice serve`/`controller` copy `--controller-class` here.
    #[arg(skip)]
    pub controller_class: String,

    /// Write one JSON line per request to stdout.
    #[arg(long, default_value = "false", value_name = "BOOL", value_parser = parse_bool, num_args = 0..=1,
          require_equals = true, default_missing_value = "true")]
    pub access_log: bool,

    /// Response compression (`--gzip`, `--brotli`, `--zstd` and their settings).
    #[command(flatten)]
    pub compression: crate::compress::Compression,

    /// Distributed tracing (`--enable-opentelemetry`, `--otlp-collector-host`, `--otel-*`).
    #[command(flatten)]
    pub tracing: crate::trace::Tracing,
}

impl Default for ProxyArgs {
    /// The same values as the flag defaults.
    fn default() -> Self {
        ProxyArgs {
            http_addr: DEFAULT_HTTP_ADDR.parse().expect("valid default"),
            https_addr: DEFAULT_HTTPS_ADDR.parse().expect("valid default"),
            admin_addr: DEFAULT_ADMIN_ADDR.parse().expect("valid default"),
            connect_timeout: Duration::from_secs(5),
            upstream_header_timeout: Duration::from_secs(60),
            client_header_timeout: Duration::from_secs(60),
            idle_timeout: Duration::from_secs(60),
            drain_timeout: Duration::from_secs(30),
            client_body_timeout: Duration::from_secs(60),
            upstream_read_timeout: Duration::from_secs(60),
            upstream_send_timeout: Duration::from_secs(60),
            send_timeout: Duration::from_secs(60),
            websocket_idle_timeout: Duration::from_secs(60),
            limit_req_status_code: 503,
            global_rate_limit: Default::default(),
            auth_timeout: Duration::from_secs(5),
            trusted_proxies: Vec::new(),
            proxy_protocol: false,
            allow_underscore_headers: false,
            proxy_id: None,
            hsts: true,
            hsts_max_age: 31_536_000,
            hsts_include_subdomains: true,
            hsts_preload: false,
            max_header_bytes: 64 * 1024,
            max_body_bytes: 1 << 30,
            workers: None,
            pin_workers: false,
            http1_server: Http1Server::Sluice,
            access_log: false,
            metrics_compat: MetricsCompat::Off,
            controller_class: String::new(),
            compression: crate::compress::Compression::default(),
            tracing: crate::trace::Tracing::default(),
        }
    }
}

/// Which other controller's metric names `/metrics` also exports (`--metrics-compat`).
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum MetricsCompat {
    /// sluice's own names only.
    #[default]
    Off,
    /// ingress-nginx's `nginx_ingress_controller_*` too.
    IngressNginx,
}

/// The server behind `--http1-server`.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Http1Server {
    /// sluice's own loop for plain requests (bodiless, no upgrade), hyper for the rest.
    #[default]
    Sluice,
    /// hyper for every HTTP/1.1 request.
    Hyper,
}

impl ProxyArgs {
    /// Arguments for tests and examples: every listener on `127.0.0.1` port 0 (the kernel picks
    /// a free port; read the real ones from [`crate::BoundProxy`]), other values as defaults.
    pub fn loopback() -> Self {
        let any: SocketAddr = "127.0.0.1:0".parse().expect("valid address");
        ProxyArgs {
            http_addr: any,
            https_addr: any,
            admin_addr: any,
            ..ProxyArgs::default()
        }
    }

    /// Fills in the default worker count (the CPUs this process may use) when unset: what
    /// the `sluice` binary does before serving.
    pub fn with_default_workers(mut self) -> Self {
        if self.workers.is_none() {
            self.workers = Some(
                std::thread::available_parallelism()
                    .map(std::num::NonZero::get)
                    .unwrap_or(1),
            );
        }
        self
    }

    /// Builds the runtime that drives the proxy from the outside: the admin endpoints, the
    /// dashboard's sampler, shutdown. With `--workers` the requests are served by the
    /// workers' own threads, so this is one thread; without, it is the work-stealing
    /// runtime that serves everything.
    pub fn build_runtime(&self) -> std::io::Result<tokio::runtime::Runtime> {
        let mut builder = match self.workers {
            Some(_) => tokio::runtime::Builder::new_current_thread(),
            None => tokio::runtime::Builder::new_multi_thread(),
        };
        builder.enable_all().thread_name("sluice-main");
        builder.build()
    }

    /// The request body limit, `None` when unlimited.
    pub(crate) fn body_limit(&self) -> Option<u64> {
        (self.max_body_bytes != 0).then_some(self.max_body_bytes)
    }
}

pub use sluice_units::{is_legacy_bool, parse_bool, parse_duration, parse_size};

/// A listen address: `IP:PORT` (`0.0.0.0:8080`, `[::]:8443`, `127.0.0.1:10254`), or `:PORT`
/// as ingress-nginx's Go flags write it, for every IPv4 address.
pub fn parse_listen_addr(value: &str) -> Result<SocketAddr, String> {
    let value = value.trim();
    let full = match value.strip_prefix(':') {
        Some(port) => format!("0.0.0.0:{port}"),
        None => value.to_owned(),
    };
    full.parse().map_err(|_| {
        format!(
            "{value:?} is not an address to listen on; expected IP:PORT (such as \
             0.0.0.0:8080, [::]:8443 or 127.0.0.1:10254) or :PORT for every IPv4 address"
        )
    })
}

/// A timeout that must be more than zero (a zero timeout would fail every request); the
/// project's duration syntax ([`parse_duration`]).
pub fn parse_timeout(value: &str) -> Result<Duration, String> {
    match parse_duration(value)? {
        d if d.is_zero() => Err("must be more than 0, such as 500ms, 5s or 1m".to_owned()),
        d => Ok(d),
    }
}

/// `--workers`: a whole number of threads, at least 1.
pub fn parse_workers(value: &str) -> Result<usize, String> {
    match value.trim().parse::<usize>() {
        Ok(0) => {
            Err("must be at least 1 (the default is one per CPU this process may use)".to_owned())
        }
        Ok(n) => Ok(n),
        Err(_) => Err(format!("{value:?} is not a whole number of threads")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser, Debug)]
    struct Cli {
        #[command(flatten)]
        proxy: ProxyArgs,
    }

    #[test]
    fn flag_defaults_match_default_impl() {
        let cli = Cli::try_parse_from(["sluice"]).unwrap();
        assert_eq!(cli.proxy, ProxyArgs::default());
    }

    #[test]
    fn flags_parse() {
        let cli = Cli::try_parse_from([
            "sluice",
            "--http-addr",
            "127.0.0.1:1",
            "--connect-timeout",
            "250ms",
            "--idle-timeout",
            "2m",
            "--max-header-bytes",
            "16KiB",
            "--max-body-bytes",
            "0",
            "--workers",
            "2",
            "--access-log",
        ])
        .unwrap();
        let p = cli.proxy;
        assert_eq!(p.http_addr, "127.0.0.1:1".parse().unwrap());
        assert_eq!(p.connect_timeout, Duration::from_millis(250));
        assert_eq!(p.idle_timeout, Duration::from_secs(120));
        assert_eq!(p.max_header_bytes, 16384);
        assert_eq!(p.body_limit(), None);
        assert_eq!(p.workers, Some(2));
        assert!(p.access_log);
        let cli = Cli::try_parse_from(["sluice", "--access-log=false"]).unwrap();
        assert!(!cli.proxy.access_log);
    }

    #[test]
    fn compression_flags_take_ingress_nginx_key_values() {
        let cli = Cli::try_parse_from([
            "sluice",
            "--gzip",
            "--gzip-level",
            "6",
            "--gzip-min-length",
            "1000",
            "--gzip-types",
            "text/plain application/json",
            "--gzip-disable",
            "msie6",
            "--brotli=true",
            "--brotli-level",
            "11",
            "--zstd-types",
            "*",
        ])
        .unwrap();
        let c = cli.proxy.compression;
        assert!(c.use_gzip && c.enable_brotli && !c.enable_zstd);
        assert_eq!(
            (c.gzip_level, c.gzip_min_length, c.brotli_level),
            (6, 1000, 11)
        );
        assert_eq!(
            c.gzip_types,
            crate::compress::MediaTypes::List(vec!["text/plain".into(), "application/json".into()])
        );
        assert_eq!(c.zstd_types, crate::compress::MediaTypes::Any);
        assert!(
            c.gzip_disable
                .matches(b"Mozilla/4.0 (compatible; MSIE 6.0)")
        );
        for bad in [
            &["sluice", "--gzip-level", "10"][..],
            &["sluice", "--brotli-level", "12"],
            &["sluice", "--gzip-types", "json"],
            &["sluice", "--gzip=maybe"],
        ] {
            assert!(Cli::try_parse_from(bad).is_err(), "{bad:?}");
        }
    }

    fn hsts(args: &ProxyArgs) -> Option<http::HeaderValue> {
        crate::settings::Settings::from_flags(args, "p").hsts
    }

    #[test]
    fn hsts_like_ingress_nginx_defaults() {
        let cli = Cli::try_parse_from(["sluice"]).unwrap();
        assert_eq!(
            hsts(&cli.proxy).unwrap(),
            "max-age=31536000; includeSubDomains"
        );
        let cli =
            Cli::try_parse_from(["sluice", "--hsts-preload", "--hsts-max-age", "60"]).unwrap();
        assert_eq!(
            hsts(&cli.proxy).unwrap(),
            "max-age=60; includeSubDomains; preload"
        );
        let cli = Cli::try_parse_from(["sluice", "--hsts=false"]).unwrap();
        assert!(hsts(&cli.proxy).is_none());
    }

    #[test]
    fn trusted_proxies_flag() {
        let cli =
            Cli::try_parse_from(["sluice", "--trusted-proxies", "10.0.0.0/8,192.168.1.1"]).unwrap();
        assert_eq!(cli.proxy.trusted_proxies.len(), 2);
        assert!(Cli::try_parse_from(["sluice", "--trusted-proxies", "10.0.0.0/40"]).is_err());
    }

    #[test]
    fn durations_and_sizes_take_the_shared_syntax() {
        let cli = Cli::try_parse_from([
            "sluice",
            "--connect-timeout",
            "1.5s",
            "--upstream-read-timeout",
            "90",
            "--max-header-bytes",
            "8k",
        ])
        .unwrap();
        assert_eq!(cli.proxy.max_header_bytes, 8 << 10);
        assert_eq!(cli.proxy.connect_timeout, Duration::from_millis(1500));
        assert_eq!(cli.proxy.upstream_read_timeout, Duration::from_secs(90));
        let error = Cli::try_parse_from(["sluice", "--connect-timeout", "1x"]).unwrap_err();
        assert!(error.to_string().contains("is not a duration"), "{error}");
    }

    /// One boolean style, Go's (ingress-nginx's flags): `--flag` or `--flag=false`; a
    /// value after a space is not the flag's (it would be taken for an argument).
    #[test]
    fn booleans_are_flag_or_flag_equals_value() {
        let cli = Cli::try_parse_from(["sluice", "--proxy-protocol", "--hsts=false"]).unwrap();
        assert!(cli.proxy.proxy_protocol && !cli.proxy.hsts);
        let cli = Cli::try_parse_from(["sluice", "--pin-workers=true", "--gzip"]).unwrap();
        assert!(cli.proxy.pin_workers && cli.proxy.compression.use_gzip);
        assert!(Cli::try_parse_from(["sluice", "--hsts", "false"]).is_err());
        let error = Cli::try_parse_from(["sluice", "--access-log=maybe"]).unwrap_err();
        assert!(
            error.to_string().contains("expected true or false"),
            "{error}"
        );
    }

    #[test]
    fn listen_addresses_say_what_they_take() {
        assert_eq!(
            parse_listen_addr("[::]:8443"),
            Ok("[::]:8443".parse().unwrap())
        );
        // ingress-nginx's `--validating-webhook=:8443`.
        assert_eq!(
            parse_listen_addr(":8443"),
            Ok("0.0.0.0:8443".parse().unwrap())
        );
        for bad in ["8080", "localhost:80", "0.0.0.0", "0.0.0.0:99999", ":", ""] {
            let error = parse_listen_addr(bad).unwrap_err();
            assert!(error.contains("expected IP:PORT"), "{bad}: {error}");
        }
        let error = Cli::try_parse_from(["sluice", "--http-addr", "80"]).unwrap_err();
        assert!(error.to_string().contains("--http-addr"), "{error}");
    }

    /// Timeouts of zero are refused (every request would fail); `--idle-timeout 0` turns
    /// keep-alive off as nginx's `keepalive_timeout 0` does, `--drain-timeout 0` drains
    /// nothing.
    #[test]
    fn zero_timeouts_are_refused_where_they_make_no_sense() {
        for flag in [
            "--connect-timeout",
            "--upstream-read-timeout",
            "--auth-timeout",
        ] {
            let error = Cli::try_parse_from(["sluice", flag, "0s"]).unwrap_err();
            assert!(
                error.to_string().contains("must be more than 0"),
                "{flag}: {error}"
            );
            let negative = format!("{flag}=-5s");
            let error = Cli::try_parse_from(["sluice", negative.as_str()]).unwrap_err();
            assert!(
                error.to_string().contains("expected whole seconds"),
                "{error}"
            );
        }
        let cli = Cli::try_parse_from(["sluice", "--idle-timeout", "0", "--drain-timeout", "0"]);
        let p = cli.unwrap().proxy;
        assert!(p.idle_timeout.is_zero() && p.drain_timeout.is_zero());
    }

    /// nginx's size suffixes (`client_max_body_size 10m`) and the flag units read alike.
    #[test]
    fn body_sizes_take_nginx_and_binary_units() {
        for text in ["10m", "10MiB", "10MB", "10485760"] {
            let cli = Cli::try_parse_from(["sluice", "--max-body-bytes", text]).unwrap();
            assert_eq!(cli.proxy.max_body_bytes, 10 << 20, "{text}");
        }
        let error = Cli::try_parse_from(["sluice", "--max-body-bytes", "10XB"]).unwrap_err();
        assert!(error.to_string().contains("KiB"), "{error}");
    }
}

//! What every stage of the request pipeline may read: the proxy-wide [`Shared`] state and
//! the per-connection [`ConnCtx`]. Kept apart from the stages so none of them imports
//! another just to reach these.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::backend::pool::PoolConfig;
use crate::http::header_policy::{Forwarded, HeaderPolicy};
use crate::observe::access_log::AccessLog;
use crate::observe::metrics::Metrics;
use crate::snapshot::TableShared;

/// Everything requests share, for the whole life of the proxy.
#[derive(Debug)]
pub(crate) struct Shared {
    /// The swappable routing snapshot.
    pub(crate) table: Arc<TableShared>,
    /// How upstreams are reached (pool, connect, send and read timeouts).
    pub(crate) upstreams: Upstreams,
    /// Metric families.
    pub(crate) metrics: Arc<Metrics>,
    /// The access log, when enabled.
    pub(crate) access_log: Option<AccessLog>,
    /// Forwarding fields, underscores, `Via`.
    pub(crate) policy: HeaderPolicy,
    /// `--upstream-header-timeout`.
    pub(crate) upstream_header_timeout: Duration,
    /// `--client-body-timeout`.
    pub(crate) client_body_timeout: Duration,
    /// `Strict-Transport-Security` for HTTPS responses (`--hsts*`).
    pub(crate) hsts: Option<http::HeaderValue>,
    /// `--websocket-idle-timeout`.
    pub(crate) websocket_idle_timeout: Duration,
    /// `--max-body-bytes` (`None`: unlimited).
    pub(crate) body_limit: Option<u64>,
    /// Rate-limit buckets (`limit-rps`, `limit-rpm`).
    pub(crate) limiter: crate::rate_limit::Limiter,
    /// `--limit-req-status-code`.
    pub(crate) limit_status: http::StatusCode,
    /// The global rate limit's store and decision cache, when a store is configured.
    pub(crate) global_limiter: Option<crate::global_rate_limit::GlobalLimiter>,
    /// `--auth-timeout`: longest wait for an `auth-url` answer.
    pub(crate) auth_timeout: Duration,
    /// The auth service's answers kept for `auth-cache-key` routes (the whole process).
    pub(crate) auth_answers: crate::auth_cache::AuthAnswers,
    /// Upgraded (WebSocket) tunnels, so shutdown can wait for and then cut them.
    pub(crate) tunnels: TaskTracker,
    /// Cancelled when tunnels must close.
    pub(crate) tunnels_stop: CancellationToken,
    /// Response compression (`--gzip`, `--brotli`, `--zstd` and their settings).
    pub(crate) compression: crate::compress::Compression,
    /// Distributed tracing, when a collector is set (`--otlp-collector-host`).
    pub(crate) tracer: Option<crate::trace::Tracer>,
}

/// One client connection.
#[derive(Debug)]
pub(crate) struct ConnCtx {
    /// Proxy-wide state.
    pub(crate) shared: Arc<Shared>,
    /// The client's address (the PROXY protocol source where that is on).
    pub(crate) peer: SocketAddr,
    /// Forwarding header values of this connection.
    pub(crate) forwarded: Forwarded,
    /// The client connected over TLS.
    pub(crate) tls: bool,
    /// The Gateway socket it connected to (see `RequestInfo::listener`); `None`: a shared
    /// listener.
    pub(crate) gateway: Option<SocketAddr>,
    /// The TLS server name the client asked for, kept on a Gateway socket (where a request
    /// for another listener's host is misdirected).
    pub(crate) sni: Option<Box<str>>,
    /// The certificates the client showed in the handshake, leaf first (asked for on hosts
    /// with `auth-tls-*` and Gateway ports with client certificate validation).
    pub(crate) client_certificates: Option<Box<[rustls::pki_types::CertificateDer<'static>]>>,
}

/// How the proxy reaches upstreams: pool identity and connection settings.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Upstreams {
    /// This proxy's idle connection pool.
    pub(crate) pool: PoolConfig,
    /// `--connect-timeout`.
    pub(crate) connect_timeout: Duration,
    /// `--upstream-send-timeout`: longest wait for the upstream to take more of a request.
    pub(crate) send_timeout: Duration,
    /// `--upstream-read-timeout`: longest wait between two reads of a response body.
    pub(crate) read_timeout: Duration,
}

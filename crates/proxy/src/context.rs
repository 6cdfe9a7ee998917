//! What every stage of the request pipeline may read: the proxy-wide [`Shared`] state and
//! the per-connection [`ConnCtx`]. Kept apart from the stages so none of them imports
//! another just to reach these.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::backend::pool::PoolConfig;
use crate::http::header_policy::Forwarded;
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
    /// The access log's writer (whether a request is written: [`crate::settings::Settings`]).
    pub(crate) access_log: Option<AccessLog>,
    /// `--upstream-header-timeout`.
    pub(crate) upstream_header_timeout: Duration,
    /// `--websocket-idle-timeout`.
    pub(crate) websocket_idle_timeout: Duration,
    /// `--max-body-bytes` (`None`: unlimited).
    pub(crate) body_limit: Option<u64>,
    /// Rate-limit buckets (`limit-rps`, `limit-rpm`).
    pub(crate) limiter: crate::rate_limit::Limiter,
    /// The global rate limit's store and decision cache, when a store is configured.
    pub(crate) global_limiter: crate::global_rate_limit::GlobalLimiter,
    /// `--auth-timeout`: longest wait for an `auth-url` answer.
    pub(crate) auth_timeout: Duration,
    /// The auth service's answers kept for `auth-cache-key` routes (the whole process).
    pub(crate) auth_answers: crate::auth_cache::AuthAnswers,
    /// Upgraded (WebSocket) tunnels, so shutdown can wait for and then cut them.
    pub(crate) tunnels: TaskTracker,
    /// Cancelled when tunnels must close.
    pub(crate) tunnels_stop: CancellationToken,
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
    /// The TLS protocol and cipher as OpenSSL names them (the access log's `$ssl_protocol`,
    /// `$ssl_cipher`); `None` without TLS.
    pub(crate) tls_names: Option<(&'static str, &'static str)>,
    /// HTTP/1 requests served on the connection so far.
    pub(crate) requests: std::sync::atomic::AtomicU64,
    /// HTTP/1 requests one connection serves at most (nginx `keepalive_requests`).
    pub(crate) max_requests: Option<u64>,
}

impl ConnCtx {
    /// Counts an HTTP/1 request; `true` when it is the last the connection may serve
    /// (its answer then says `Connection: close`).
    pub(crate) fn last_request(&self) -> bool {
        let served = self
            .requests
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            + 1;
        self.max_requests.is_some_and(|max| served >= max)
    }
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

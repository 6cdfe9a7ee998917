//! The upstream step: one request to a backend, up to the response head.
//!
//! * `driver`: the tries, written once for every transport: endpoint choice
//!   ([`balancer`](crate::backend::balancer)), the retry rules (`retry`:
//!   `proxy_next_upstream`, Gateway API `backendRequest` timeouts per try, stale pooled
//!   connections), the head timeout.
//! * Transports, each one try: `http1`, the proxy's own HTTP/1.1 client (the head
//!   written with one system call from the request's task, the response head parsed
//!   here, [`pool`](crate::backend::pool) per thread), and `client`, hyper's HTTP/1.1
//!   (over TLS) and HTTP/2 clients for HTTPS, h2c and gRPC backends.
//! * The response body is read back under the read timeout by
//!   [`body::upstream`](crate::body::upstream).
//!
//! A request is sent again only where that cannot duplicate work: when no connection
//! could be made, or a pooled connection turned out closed before it took the request
//! (nothing was sent), or, for a bodiless idempotent request, on what
//! `proxy_next_upstream` lists. At most [`balancer::MAX_ATTEMPTS`] tries.

pub(crate) mod client;
pub(crate) mod driver;
pub(crate) mod http1;
pub(crate) mod retry;

use std::io;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use tokio::net::{TcpSocket, TcpStream};

use http::StatusCode;
use sluice_routing::{LoadBalance, NextUpstream};

use crate::backend::balancer;
use crate::backend::pool::Conn;
use crate::body::RequestBody;
use crate::context::Upstreams;
use crate::http::header_policy::{self, Forwarded, HeadSink, HeaderPolicy, UpstreamRequest};
use crate::http::request_fields::RequestFields;
use crate::http::response_head::ResponseHead;
use crate::snapshot::BackendState;
use crate::upstream::retry::{GiveUp, Retries};

/// Why no usable response came back.
#[derive(Debug)]
pub(crate) enum Failure {
    /// Every attempt failed to get a response (502).
    BadGateway,
    /// No response head within the upstream header timeout (504).
    Timeout,
    /// The client's body went over the limit while streaming (413).
    BodyTooLarge,
    /// The client's body was malformed or cut off (400).
    ClientBody,
    /// The client's body stalled past `--client-body-timeout` (408).
    ClientTimeout,
}

impl From<GiveUp> for Failure {
    fn from(give_up: GiveUp) -> Failure {
        match give_up {
            GiveUp::BadGateway => Failure::BadGateway,
            GiveUp::Timeout => Failure::Timeout,
        }
    }
}

impl Failure {
    /// The status the client gets (the same on every front end).
    pub(crate) fn status(&self) -> StatusCode {
        match self {
            Failure::BadGateway => StatusCode::BAD_GATEWAY,
            Failure::Timeout => StatusCode::GATEWAY_TIMEOUT,
            Failure::BodyTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            Failure::ClientBody => StatusCode::BAD_REQUEST,
            Failure::ClientTimeout => StatusCode::REQUEST_TIMEOUT,
        }
    }
}

/// The own client's answer: its response, and the endpoint (index in the backend) that
/// gave it; the endpoint's in-flight count stays taken until the caller releases it.
pub(crate) type Answer = driver::Answered<Response>;

/// A response head and the connection its body follows on.
pub(crate) struct Response {
    /// The head (boxed: it moves through every layer up to the front end's writer, and its
    /// inline field table is the bulk of the answer).
    pub(crate) head: Box<ResponseHead>,
    /// The connection.
    pub(crate) conn: Conn,
}

/// A request ready to send: its head (before the header policy) and its body.
pub(crate) struct Outgoing<'a> {
    /// The head, encoded for each try.
    pub(crate) head: UpstreamRequest<'a, RequestFields<'a>>,
    /// The connection's forwarding values.
    pub(crate) forwarded: &'a Forwarded,
    /// The proxy's header policy.
    pub(crate) policy: &'a HeaderPolicy,
    /// The body (framed as `head.framing` says).
    pub(crate) body: RequestBody,
    /// GET, HEAD, OPTIONS or TRACE: safe to send again after a failure.
    pub(crate) idempotent: bool,
    /// A HEAD request (its response has no body).
    pub(crate) head_request: bool,
    /// When to try another endpoint (the route's `proxy-next-upstream`).
    pub(crate) retry: &'a NextUpstream,
    /// The endpoint to try first (session affinity, `upstream-hash-by`).
    pub(crate) prefer: Option<usize>,
    /// The route's `load-balance` (`None`: the default choice).
    pub(crate) balance: Option<LoadBalance>,
    /// Bound on each try, from sending to the response head (Gateway API
    /// `timeouts.backendRequest`): a try over it counts as a timeout, and the last one
    /// fails the request with 504.
    pub(crate) try_timeout: Option<Duration>,
}

impl Outgoing<'_> {
    /// Writes the head for `endpoint` into `out` through the header policy.
    pub(crate) fn encode(&self, endpoint: SocketAddr, out: &mut impl HeadSink) {
        header_policy::encode_request_head(&self.head, self.forwarded, self.policy, endpoint, out);
    }
}

/// Sends `outgoing` to an endpoint of `backend` over the own HTTP/1.1 client, trying
/// others as the retry rules allow. `deadline` bounds the wait for the response head: over
/// all tries for a bodiless request, from the end of the body for one with a body.
pub(crate) fn send<'a>(
    upstreams: &'a Upstreams,
    backend: &'a BackendState,
    outgoing: Outgoing<'a>,
    start: Instant,
    deadline: Duration,
) -> impl Future<Output = Result<Answer, Failure>> + Send + 'a {
    // An upload can take long, each step bounded by its own timeout (client body,
    // upstream send); the wait for the head starts once the body is through.
    let bodied = !matches!(outgoing.body, RequestBody::Empty);
    let transport = http1::Http1 {
        upstreams,
        head_timeout: bodied.then_some(deadline),
    };
    driver::send(transport, backend, outgoing, start, deadline)
}

/// Runs `exchange` (the upstream steps up to the response head) within `limit` counted
/// from the request's `start` (Gateway API `timeouts.request`): 504 when it runs out.
pub(crate) async fn within<T>(
    limit: Duration,
    start: Instant,
    exchange: impl Future<Output = Result<T, Failure>>,
) -> Result<T, Failure> {
    let deadline = tokio::time::Instant::from_std(start + limit);
    match tokio::time::timeout_at(deadline, exchange).await {
        Ok(result) => result,
        Err(_elapsed) => {
            tracing::debug!("request timed out before a response head");
            Err(Failure::Timeout)
        }
    }
}

/// Releases an endpoint's in-flight count unless disarmed (dropped on timeout too).
/// The endpoint a try goes to.
pub(crate) struct Chosen<'a> {
    /// Its in-flight count, given back when dropped unless the answer took it over.
    pub(crate) in_flight: InFlight<'a>,
    /// Its index in the backend's balancer.
    pub(crate) index: usize,
    /// Its address.
    pub(crate) addr: SocketAddr,
    /// When it was chosen (the balancer's clock).
    pub(crate) now_ms: u64,
}

pub(crate) struct InFlight<'a> {
    pub(crate) backend: &'a BackendState,
    pub(crate) index: Option<usize>,
}

impl Outgoing<'_> {
    /// The endpoint of the next try of `retries` among the endpoints it has not skipped:
    /// the preferred one on the first try when it is up, else the route's balancing
    /// choice. Its in-flight count is taken; the guard gives it back. `None` when no try or
    /// no endpoint is left.
    pub(crate) fn next_endpoint<'b>(
        &self,
        backend: &'b BackendState,
        retries: &mut Retries<'_>,
    ) -> Option<Chosen<'b>> {
        let attempt = retries.next_try()?;
        let now_ms = balancer::now_millis(Instant::now());
        let balancer = &backend.balancer;
        let tried = retries.tried();
        let preferred = self
            .prefer
            .filter(|&i| attempt == 1 && balancer.take(i, tried, now_ms));
        let index = preferred.or_else(|| balancer.pick_with(self.balance, tried, now_ms))?;
        Some(Chosen {
            in_flight: InFlight {
                backend,
                index: Some(index),
            },
            index,
            addr: balancer.get(index).addr,
            now_ms,
        })
    }

    /// Feeds the latency of an answer to `load-balance: ewma`.
    pub(crate) fn answered(&self, backend: &BackendState, index: usize, sent_at: Instant) {
        if self.balance == Some(LoadBalance::Ewma) {
            let now = balancer::now_millis(Instant::now());
            backend.balancer.observe(index, sent_at.elapsed(), now);
        }
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        if let Some(index) = self.index {
            self.backend.balancer.release(index);
        }
    }
}

/// Opens a connection to `addr` within `timeout`.
pub(crate) async fn connect(addr: SocketAddr, timeout: Duration) -> io::Result<TcpStream> {
    let socket = if addr.is_ipv4() {
        TcpSocket::new_v4()?
    } else {
        TcpSocket::new_v6()?
    };
    socket.set_keepalive(true)?;
    let stream = tokio::time::timeout(timeout, socket.connect(addr))
        .await
        .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "connect timed out"))??;
    // Small requests must not wait for Nagle.
    stream.set_nodelay(true)?;
    Ok(stream)
}

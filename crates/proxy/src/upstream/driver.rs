//! The tries of one request, written once for every transport (the own HTTP/1.1 client,
//! hyper's HTTP/1.1 and HTTP/2 clients), as linkerd2-proxy keeps retries in one layer:
//! the endpoint of each try (`Outgoing::next_endpoint`), its in-flight count, the route's
//! per-try timeout (Gateway API `timeouts.backendRequest`), the statuses that go to the
//! next endpoint (`proxy_next_upstream http_5xx`), what a failed try means
//! (`retry::Retries::after_failure`), and the wait for the response head. A transport
//! does one try and says how it went.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use crate::body::RequestBody;
use crate::observe::metrics::UpstreamErrorKind;
use crate::snapshot::BackendState;
use crate::upstream::retry::{Failed, Retries};
use crate::upstream::{Chosen, Failure, Outgoing};

/// An error kept for the log line of a failed try.
pub(crate) type TryError = Box<dyn std::fmt::Display + Send + Sync>;

/// How a try failed.
pub(crate) enum TryFailed {
    /// The retry rules decide; the body comes back when the try did not consume it (no
    /// connection, a closed pooled one), so that the next try can send it.
    Retry(Retryable, Option<RequestBody>),
    /// The request fails now (the client's body broke off, a send or head timeout).
    Fail(Failure),
}

/// A failed try the retry rules judge.
pub(crate) enum Retryable {
    /// No connection could be made.
    Connect(io::Error),
    /// A pooled connection was closed before it took the request.
    Stale(TryError),
    /// The try took longer than the route's `backendRequest` timeout.
    TryTimeout,
    /// The answer was not valid HTTP.
    Protocol(TryError),
    /// The exchange broke before a response head.
    Io(TryError),
}

impl Retryable {
    fn as_failed(&self) -> Failed<'_> {
        match self {
            Retryable::Connect(error) => Failed::Connect(error),
            Retryable::Stale(error) => Failed::Stale(error),
            Retryable::TryTimeout => Failed::TryTimeout,
            Retryable::Protocol(error) => Failed::Protocol(error),
            Retryable::Io(error) => Failed::Io(error),
        }
    }
}

/// One try: the request, the endpoint, and the body to send.
pub(crate) struct Try<'t, 'o> {
    /// The backend (its metrics).
    pub(crate) backend: &'t BackendState,
    /// The endpoint.
    pub(crate) addr: SocketAddr,
    /// The request.
    pub(crate) outgoing: &'t Outgoing<'o>,
    /// Its body for this try.
    pub(crate) body: RequestBody,
}

/// One way of carrying a try to an endpoint.
pub(crate) trait Transport: Send {
    /// What a try that got a response head gives.
    type Response: Send;
    /// The response's status.
    fn status(response: &Self::Response) -> u16;
    /// Makes one try.
    fn exchange(
        &mut self,
        at: Try<'_, '_>,
    ) -> impl Future<Output = Result<Self::Response, TryFailed>> + Send;
}

/// The response of the try that answered, with its endpoint (whose in-flight count the
/// caller now holds).
pub(crate) struct Answered<R> {
    /// The response.
    pub(crate) response: R,
    /// The endpoint's index in the backend's balancer.
    pub(crate) endpoint: usize,
    /// Its address.
    pub(crate) addr: SocketAddr,
}

/// Sends `outgoing` over `transport`. A bodiless request must have its response head
/// within `deadline` of `start`, over all tries; one with a body (an upload, a streaming
/// call) is bounded step by step instead (client body, send, and the transport's own head
/// timeout once the body is through).
pub(crate) async fn send<T: Transport>(
    transport: T,
    backend: &BackendState,
    outgoing: Outgoing<'_>,
    start: Instant,
    deadline: Duration,
) -> Result<Answered<T::Response>, Failure> {
    // Boxed: a future is copied whole each time it moves (into a timeout, into `within`,
    // into an await), and the tries' is the largest state on the request path.
    let bodiless = matches!(outgoing.body, RequestBody::Empty);
    let tries = Box::pin(tries(transport, backend, outgoing));
    if !bodiless {
        return tries.await;
    }
    let deadline = tokio::time::Instant::from_std(start + deadline);
    match tokio::time::timeout_at(deadline, tries).await {
        Ok(result) => result,
        Err(_elapsed) => {
            // The try in progress was dropped with its connection; its endpoint's in-flight
            // count was given back by its guard.
            backend.metrics.upstream_error(UpstreamErrorKind::Timeout);
            tracing::debug!("upstream response head timed out");
            Err(Failure::Timeout)
        }
    }
}

async fn tries<T: Transport>(
    mut transport: T,
    backend: &BackendState,
    mut outgoing: Outgoing<'_>,
) -> Result<Answered<T::Response>, Failure> {
    let balancer = &backend.balancer;
    let body = std::mem::replace(&mut outgoing.body, RequestBody::Empty);
    let bodiless = matches!(body, RequestBody::Empty);
    let mut retries = Retries::new(outgoing.retry, outgoing.idempotent, bodiless);
    let mut body = Some(body);
    loop {
        if let Some(wait) = retries.backoff() {
            tokio::time::sleep(wait).await;
        }
        let Some(chosen) = outgoing.next_endpoint(backend, &mut retries) else {
            break;
        };
        let Chosen {
            mut in_flight,
            index,
            addr,
            now_ms,
        } = chosen;
        let Some(this_body) = body.take() else {
            // A body that went out with a failed try cannot be sent again.
            return Err(Failure::BadGateway);
        };
        let sent_at = Instant::now();
        let exchange = transport.exchange(Try {
            backend,
            addr,
            outgoing: &outgoing,
            body: this_body,
        });
        let exchanged = match outgoing.try_timeout {
            Some(limit) => tokio::time::timeout(limit, exchange)
                .await
                .unwrap_or(Err(TryFailed::Retry(Retryable::TryTimeout, None))),
            None => exchange.await,
        };
        let (failed, given_back) = match exchanged {
            Ok(response) => {
                let status = T::status(&response);
                if retries.retries_status(status, index, balancer.len()) {
                    // proxy_next_upstream http_5xx: this answer is dropped with its
                    // connection and the next endpoint asked (only bodiless requests).
                    tracing::debug!(upstream = %addr, status, "next upstream");
                    body = Some(RequestBody::Empty);
                    continue;
                }
                outgoing.answered(backend, index, sent_at);
                in_flight.index = None;
                return Ok(Answered {
                    response,
                    endpoint: index,
                    addr,
                });
            }
            Err(TryFailed::Fail(failure)) => return Err(failure),
            Err(TryFailed::Retry(failed, given_back)) => (failed, given_back),
        };
        drop(in_flight);
        body = given_back.or_else(|| bodiless.then_some(RequestBody::Empty));
        retries.after_failure(failed.as_failed(), backend, index, addr, now_ms)?;
    }
    Err(Failure::BadGateway)
}

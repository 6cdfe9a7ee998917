//! The pooled HTTP/1.1 client to backends, and sending one request to a backend with
//! endpoint choice, timeouts and retries.
//!
//! Retries only happen for requests without a body (the body cannot be replayed) and only
//! where they cannot duplicate non-idempotent work: when the connection could not be
//! established (the request was never sent, so any method is safe), or, for idempotent
//! methods (GET, HEAD, OPTIONS, TRACE), when the connection failed before a response head
//! arrived (like nginx's default `proxy_next_upstream error`). At most [`MAX_ATTEMPTS`].

use std::error::Error as StdError;
use std::time::{Duration, Instant};

use http::uri::{PathAndQuery, Scheme};
use http::{HeaderMap, Method, Request, Response, Uri, Version};
use hyper::body::Incoming;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};

use crate::balancer::{self, MAX_ATTEMPTS};
use crate::body::{BodyTooLarge, RequestBody};
use crate::config::ProxyArgs;
use crate::metrics::UpstreamErrorKind;
use crate::snapshot::BackendState;

/// The pooled client shared by all requests.
pub(crate) type UpstreamClient = Client<HttpConnector, RequestBody>;

/// Idle connections kept per endpoint; generous so bursts reuse rather than reconnect.
const MAX_IDLE_PER_ENDPOINT: usize = 1024;

/// Builds the client: TCP_NODELAY, connect timeout, keep-alive pool with idle timeout.
pub(crate) fn client(args: &ProxyArgs) -> UpstreamClient {
    let mut connector = HttpConnector::new();
    connector.set_nodelay(true);
    connector.set_connect_timeout(Some(args.connect_timeout));
    connector.set_keepalive(Some(Duration::from_secs(60)));
    Client::builder(TokioExecutor::new())
        .pool_idle_timeout(args.idle_timeout)
        .pool_max_idle_per_host(MAX_IDLE_PER_ENDPOINT)
        .pool_timer(TokioTimer::new())
        .timer(TokioTimer::new())
        .http1_max_headers(256)
        .build(connector)
}

/// Why no usable response came back.
#[derive(Debug)]
pub(crate) enum Failure {
    /// Every attempt failed to get a response (502).
    BadGateway,
    /// No response head within the upstream header timeout (504).
    Timeout,
    /// The client's body went over the limit while streaming (413).
    BodyTooLarge,
}

/// A response and the endpoint (index in the backend) that gave it; the endpoint's
/// in-flight count stays taken until the caller releases it.
pub(crate) struct Answer {
    pub(crate) response: Response<Incoming>,
    pub(crate) endpoint: usize,
}

/// The parts of a request needed to send it (again).
pub(crate) struct Outgoing {
    pub(crate) method: Method,
    pub(crate) headers: HeaderMap,
    pub(crate) path: PathAndQuery,
    pub(crate) body: RequestBody,
}

/// Sends `outgoing` to an endpoint of `backend`, trying others on connect failure.
/// `deadline` bounds the wait for the response head over all attempts.
pub(crate) async fn send(
    client: &UpstreamClient,
    backend: &BackendState,
    outgoing: Outgoing,
    start: Instant,
    deadline: Duration,
) -> Result<Answer, Failure> {
    let deadline = tokio::time::Instant::from_std(start + deadline);
    let balancer = &backend.balancer;
    let bodiless = matches!(outgoing.body, RequestBody::Empty);
    // Connect failures exclude their endpoint, so they give up after every endpoint (at most
    // MAX_ATTEMPTS) failed; a reused connection closed early may be retried on any endpoint.
    let attempts = if bodiless { MAX_ATTEMPTS } else { 1 };
    let idempotent = matches!(
        outgoing.method,
        Method::GET | Method::HEAD | Method::OPTIONS | Method::TRACE
    );
    // Only kept when a retry is possible: a retry needs a second copy of the headers.
    let again = (bodiless && (balancer.len() > 1 || idempotent))
        .then(|| (outgoing.method.clone(), outgoing.headers.clone()));
    let Outgoing {
        method,
        headers,
        path,
        body,
    } = outgoing;
    let mut next = Some((method, headers, body));
    let mut excluded = [usize::MAX; MAX_ATTEMPTS];
    let mut excluded_len = 0;

    for _ in 0..attempts {
        let (method, headers, body) = match next.take() {
            Some(first) => first,
            None => match &again {
                Some((method, headers)) => (method.clone(), headers.clone(), RequestBody::Empty),
                None => break,
            },
        };
        let now_ms = balancer::now_millis(Instant::now());
        let Some(index) = balancer.pick(&excluded[..excluded_len], now_ms) else {
            break;
        };
        let endpoint = balancer.get(index);

        let mut uri = http::uri::Parts::default();
        uri.scheme = Some(Scheme::HTTP);
        uri.authority = Some(endpoint.authority.clone());
        uri.path_and_query = Some(path.clone());
        let mut request = Request::new(body);
        *request.method_mut() = method;
        *request.uri_mut() = Uri::from_parts(uri).expect("scheme, authority and path are valid");
        *request.version_mut() = Version::HTTP_11;
        *request.headers_mut() = headers;

        let error = match tokio::time::timeout_at(deadline, client.request(request)).await {
            Ok(Ok(response)) => {
                return Ok(Answer {
                    response,
                    endpoint: index,
                });
            }
            Ok(Err(error)) => error,
            Err(_elapsed) => {
                balancer.release(index);
                backend.metrics.upstream_error(UpstreamErrorKind::Timeout);
                tracing::debug!(upstream = %endpoint.addr, "upstream response head timed out");
                return Err(Failure::Timeout);
            }
        };
        balancer.release(index);
        if caused_by::<BodyTooLarge>(&error) {
            return Err(Failure::BodyTooLarge);
        }
        if error.is_connect() {
            backend.metrics.upstream_error(UpstreamErrorKind::Connect);
            balancer.mark_down(index, now_ms);
            excluded[excluded_len] = index;
            excluded_len += 1;
            tracing::debug!(upstream = %endpoint.addr, error = %chain(&error), "connect failed");
            continue;
        }
        backend.metrics.upstream_error(UpstreamErrorKind::Io);
        tracing::debug!(upstream = %endpoint.addr, error = %chain(&error), "upstream request failed");
        // The connection failed before any response head (reset, closed early): as nginx
        // does by default, an idempotent request may be sent again. The endpoint is skipped
        // for this request unless it is the only one left (then it was likely a stale
        // keep-alive connection, and a fresh one will do).
        if !idempotent {
            return Err(Failure::BadGateway);
        }
        if excluded_len + 1 < balancer.len() {
            excluded[excluded_len] = index;
            excluded_len += 1;
        }
    }
    Err(Failure::BadGateway)
}

/// Whether `error` or any of its sources is an `E`.
fn caused_by<E: StdError + 'static>(error: &(dyn StdError + 'static)) -> bool {
    let mut current = Some(error);
    while let Some(e) = current {
        if e.is::<E>() {
            return true;
        }
        current = e.source();
    }
    false
}

/// `error: source: source…`, for logs.
fn chain(error: &(dyn StdError + 'static)) -> String {
    let mut text = error.to_string();
    let mut current = error.source();
    while let Some(e) = current {
        text.push_str(": ");
        text.push_str(&e.to_string());
        current = e.source();
    }
    text
}

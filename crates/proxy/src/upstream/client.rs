//! Requests to backends that do not speak plain HTTP/1.1 (`backend-protocol` HTTPS, GRPC,
//! GRPCS, H2C, or the Service port's `appProtocol`), over hyper's client connections.
//!
//! - HTTP/2 (h2c, gRPC, and over TLS for GRPCS): one multiplexed connection per endpoint
//!   and worker thread, shared by every request to that endpoint. Trailers pass both ways
//!   and bodies stream in both directions, which gRPC's streaming calls need. A GOAWAY
//!   closes the connection for new streams only; a request it refused before processing is
//!   sent again on a new connection.
//! - HTTP/1.1 over TLS (HTTPS): connections pooled per endpoint and worker thread.
//!
//! The plain HTTP/1.1 path ([`crate::upstream`]) stays the proxy's own, faster, exchange;
//! both share the header policy: the head is encoded by
//! [`header_policy::encode_request_head`] and read back into a header map here, so no second
//! set of forwarding rules exists.

use std::cell::RefCell;
use std::collections::HashMap;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use http::header::{HOST, TRANSFER_ENCODING};
use http::uri::{Authority, Scheme};
use http::{HeaderMap, HeaderName, HeaderValue, Method, Request, Response, Uri};
use hyper::body::Incoming;
use hyper::client::conn::{http1, http2};
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::pki_types::ServerName;
use sluice_routing::{Policy, UpstreamProtocol};
use tokio::io::{AsyncRead, AsyncWrite};

use crate::body::RequestBody;
use crate::context::Upstreams;
use crate::observe::metrics::UpstreamErrorKind;
use crate::pipeline::header_policy::{self, Fields, RequestField};
use crate::snapshot::{BackendState, Snapshot};
use crate::upstream::retry::{Failed, Retries};
use crate::upstream::tls::ClientConfigs;
use crate::upstream::{self, Failure, Outgoing};

/// Idle HTTP/1.1-over-TLS connections kept per endpoint and thread.
const MAX_IDLE_HTTP1: usize = 32;

/// How to reach the backend.
pub(crate) struct Target<'a> {
    /// The protocol (never plain HTTP here).
    pub(crate) protocol: UpstreamProtocol,
    /// TLS configurations, for HTTPS and GRPCS.
    pub(crate) tls: Option<&'a ClientConfigs>,
    /// The name checked in the backend's certificate (and sent as SNI when on).
    pub(crate) server_name: Option<ServerName<'static>>,
}

/// The backend's answer and the endpoint (index in the backend) that gave it; the
/// endpoint's in-flight count stays taken until the caller releases it.
pub(crate) struct Answer {
    pub(crate) response: Response<Incoming>,
    pub(crate) endpoint: usize,
}

/// A cached connection's sender.
enum Sender {
    Http1(http1::SendRequest<RequestBody>),
    Http2(http2::SendRequest<RequestBody>),
}

/// Connections by (endpoint, TLS configuration address or 0).
type Key = (SocketAddr, usize);

thread_local! {
    /// HTTP/2 connections, one per key; cloned per request (multiplexed).
    static HTTP2: RefCell<HashMap<Key, http2::SendRequest<RequestBody>>> =
        RefCell::new(HashMap::new());
    /// Idle HTTP/1.1-over-TLS connections.
    static HTTP1: RefCell<HashMap<Key, Vec<http1::SendRequest<RequestBody>>>> =
        RefCell::new(HashMap::new());
}

/// The protocol towards backend `id` for route entry `entry`: the route's
/// `backend-protocol`, else the Service port's `appProtocol`, else HTTP/1.1.
pub(crate) fn protocol(snapshot: &Snapshot, id: usize, entry: usize) -> UpstreamProtocol {
    snapshot
        .table
        .entry(entry)
        .policy
        .protocol
        .or_else(|| snapshot.table.backends().get(id).and_then(|b| b.protocol))
        .unwrap_or(UpstreamProtocol::Http)
}

/// How to reach backend `id` of `snapshot` for a route with `policy`; `None` only for the
/// empty table.
pub(crate) fn target<'s>(
    snapshot: &'s Snapshot,
    id: usize,
    protocol: UpstreamProtocol,
    policy: &'s Policy,
) -> Option<Target<'s>> {
    let service = &snapshot.table.backends().get(id)?.service;
    let route_tls = policy.upstream_tls.as_ref();
    let configs = snapshot.tls_clients.as_ref()?.get(route_tls);
    Some(Target {
        protocol,
        tls: protocol.tls().then_some(configs),
        server_name: upstream::tls::server_name(
            route_tls.map(|t| &**t),
            &service.name,
            &service.namespace,
        ),
    })
}

/// Sends `outgoing` to an endpoint of `backend` over `target`'s protocol. Requests without
/// a body must have their response head within `deadline` of `start`.
pub(crate) async fn send<'a, 'f, F>(
    upstreams: &Upstreams,
    backend: &BackendState,
    target: &Target<'_>,
    outgoing: Outgoing<'a, F>,
    start: Instant,
    deadline: Duration,
) -> Result<Answer, Failure>
where
    F: Fields<'f>,
{
    let bodiless = matches!(outgoing.body, RequestBody::Empty);
    if !bodiless {
        // Streaming calls may send for long before an answer: their stalls are bounded by
        // the client body timeout instead.
        return attempts(upstreams, backend, target, outgoing).await;
    }
    let deadline = tokio::time::Instant::from_std(start + deadline);
    match tokio::time::timeout_at(deadline, attempts(upstreams, backend, target, outgoing)).await {
        Ok(result) => result,
        Err(_elapsed) => {
            backend.metrics.upstream_error(UpstreamErrorKind::Timeout);
            Err(Failure::Timeout)
        }
    }
}

async fn attempts<'a, 'f, F>(
    upstreams: &Upstreams,
    backend: &BackendState,
    target: &Target<'_>,
    outgoing: Outgoing<'a, F>,
) -> Result<Answer, Failure>
where
    F: Fields<'f>,
{
    let balancer = &backend.balancer;
    let http2 = target.protocol.http2();
    let bodiless = matches!(outgoing.body, RequestBody::Empty);
    let mut retries = Retries::new(outgoing.retry, outgoing.idempotent, bodiless);
    let mut outgoing = outgoing;
    let mut body = Some(std::mem::replace(&mut outgoing.body, RequestBody::Empty));
    let mut encoded = Vec::with_capacity(1024);
    while let Some(chosen) = outgoing.next_endpoint(backend, &mut retries) {
        let upstream::Chosen {
            mut in_flight,
            index,
            addr,
            now_ms,
        } = chosen;
        let sent_at = Instant::now();
        encoded.clear();
        header_policy::encode_request_head(
            &outgoing.head,
            outgoing.forwarded,
            outgoing.policy,
            addr,
            &mut encoded,
        );
        let parts = match request_parts(&encoded, http2, target.tls.is_some(), addr) {
            Ok(parts) => parts,
            Err(error) => {
                tracing::debug!(%error, "request cannot be sent over this protocol");
                return Err(Failure::BadGateway);
            }
        };
        let key = (addr, target.tls.map_or(0, |t| config_key(t, http2)));
        let opening = Instant::now();
        let (sender, cached) = match checkout(key, http2) {
            Some(sender) => (sender, true),
            None => match open(upstreams, target, addr).await {
                Ok(sender) => {
                    backend.metrics.observe_connect(opening.elapsed());
                    (sender, false)
                }
                Err(error) => {
                    drop(in_flight);
                    let failed = Failed::Connect(&error);
                    retries.after_failure(failed, backend, index, addr, now_ms)?;
                    continue;
                }
            },
        };
        let request = Request::from_parts(parts, body.take().unwrap_or(RequestBody::Empty));
        let request_sent = Instant::now();
        let sending = async {
            match sender {
                Sender::Http2(mut sender) => {
                    let sent = sender.try_send_request(request).await;
                    if cached || sent.is_ok() {
                        checkin_http2(key, sender);
                    }
                    sent
                }
                Sender::Http1(mut sender) => {
                    let sent = sender.try_send_request(request).await;
                    // Back to the pool at once: it takes the next request once this
                    // response's body is read (checked by `is_ready` on checkout).
                    if sent.is_ok() {
                        checkin_http1(key, sender);
                    }
                    sent
                }
            }
        };
        let sent = match outgoing.try_timeout {
            None => sending.await,
            Some(limit) => match tokio::time::timeout(limit, sending).await {
                Ok(sent) => sent,
                Err(_elapsed) => {
                    // Gateway API `timeouts.backendRequest`: this try is over.
                    drop(in_flight);
                    let failed = Failed::TryTimeout;
                    retries.after_failure(failed, backend, index, addr, now_ms)?;
                    body = Some(RequestBody::Empty);
                    continue;
                }
            },
        };
        match sent {
            Ok(response) => {
                backend.metrics.observe_header(request_sent.elapsed());
                let status = response.status().as_u16();
                if retries.retries_status(status, index, balancer.len()) {
                    tracing::debug!(upstream = %addr, status, "next upstream");
                    drop(in_flight);
                    body = Some(RequestBody::Empty);
                    continue;
                }
                outgoing.answered(backend, index, sent_at);
                in_flight.index = None;
                return Ok(Answer {
                    response,
                    endpoint: index,
                });
            }
            Err(mut error) => {
                drop(in_flight);
                if let Some(request) = error.take_message() {
                    // Never processed (closed connection, GOAWAY, refused stream): safe to
                    // send again whatever the method.
                    evict(key, http2);
                    body = Some(request.into_body());
                    let failed = Failed::Stale(error.error());
                    retries.after_failure(failed, backend, index, addr, now_ms)?;
                    continue;
                }
                let error = error.into_error();
                if let Some(failure) = client_body_failure(&error) {
                    return Err(failure);
                }
                retries.after_failure(Failed::Io(&error), backend, index, addr, now_ms)?;
                body = Some(RequestBody::Empty);
            }
        }
    }
    Err(Failure::BadGateway)
}

/// One HTTP/1.1 request to `addr` outside any backend (the external auth service), over
/// TLS when `tls` is given, on the same per-thread connection pool. A pooled connection
/// found closed before it took the request is replaced once.
pub(crate) async fn call(
    upstreams: &Upstreams,
    addr: SocketAddr,
    tls: Option<&ClientConfigs>,
    server_name: Option<ServerName<'static>>,
    mut request: Request<RequestBody>,
) -> Result<Response<Incoming>, String> {
    let target = Target {
        protocol: if tls.is_some() {
            UpstreamProtocol::Https
        } else {
            UpstreamProtocol::Http
        },
        tls,
        server_name,
    };
    let key = (addr, tls.map_or(0, |t| config_key(t, false)));
    for _ in 0..2 {
        let sender = match checkout(key, false) {
            Some(sender) => sender,
            None => open(upstreams, &target, addr)
                .await
                .map_err(|e| format!("connecting to {addr}: {e}"))?,
        };
        let Sender::Http1(mut sender) = sender else {
            return Err("not an HTTP/1.1 connection".to_owned());
        };
        match sender.try_send_request(request).await {
            Ok(response) => {
                checkin_http1(key, sender);
                return Ok(response);
            }
            Err(mut error) => match error.take_message() {
                Some(unsent) => request = unsent,
                None => return Err(error.into_error().to_string()),
            },
        }
    }
    Err(format!("{addr} closed every connection"))
}

/// A failure caused by the client's body (too large, stalled, malformed) rather than by
/// the backend.
fn client_body_failure(error: &hyper::Error) -> Option<Failure> {
    use std::error::Error as _;
    let mut source = error.source();
    while let Some(cause) = source {
        if cause.is::<crate::body::BodyTooLarge>() {
            return Some(Failure::BodyTooLarge);
        }
        if cause.is::<crate::body::ClientBodyTimeout>() {
            return Some(Failure::ClientTimeout);
        }
        source = cause.source();
    }
    error.is_user().then_some(Failure::ClientBody)
}

/// A cached sender ready for a request, if any.
fn checkout(key: Key, http2: bool) -> Option<Sender> {
    if http2 {
        HTTP2.with_borrow_mut(|conns| {
            let sender = conns.get(&key)?;
            if sender.is_closed() {
                conns.remove(&key);
                return None;
            }
            Some(Sender::Http2(sender.clone()))
        })
    } else {
        HTTP1.with_borrow_mut(|conns| {
            let idle = conns.get_mut(&key)?;
            // Closed ones go; busy ones (a body still being read) stay for later.
            idle.retain(|s| !s.is_closed());
            let ready = idle.iter().position(http1::SendRequest::is_ready)?;
            Some(Sender::Http1(idle.swap_remove(ready)))
        })
    }
}

fn checkin_http2(key: Key, sender: http2::SendRequest<RequestBody>) {
    if !sender.is_closed() {
        HTTP2.with_borrow_mut(|conns| {
            conns.entry(key).or_insert(sender);
        });
    }
}

fn checkin_http1(key: Key, sender: http1::SendRequest<RequestBody>) {
    HTTP1.with_borrow_mut(|conns| {
        let idle = conns.entry(key).or_default();
        if idle.len() < MAX_IDLE_HTTP1 {
            idle.push(sender);
        }
    });
}

fn evict(key: Key, http2: bool) {
    if http2 {
        HTTP2.with_borrow_mut(|conns| {
            if conns.get(&key).is_some_and(http2::SendRequest::is_closed) {
                conns.remove(&key);
            }
        });
    }
}

/// Tells TLS configurations apart in the connection cache.
fn config_key(configs: &ClientConfigs, http2: bool) -> usize {
    let config = if http2 {
        &configs.http2
    } else {
        &configs.http1
    };
    Arc::as_ptr(config) as usize
}

/// Opens a connection to `addr`, TLS first where the protocol says, and hands the
/// connection to a task of its own.
async fn open(upstreams: &Upstreams, target: &Target<'_>, addr: SocketAddr) -> io::Result<Sender> {
    let tcp = upstream::connect(addr, upstreams.connect_timeout).await?;
    let http2 = target.protocol.http2();
    match target.tls {
        None => handshake(tcp, http2).await,
        Some(configs) => {
            let config = if http2 {
                &configs.http2
            } else {
                &configs.http1
            };
            let name = match &target.server_name {
                Some(name) => name.clone(),
                // Unverified and without SNI, any syntactically valid name will do.
                None => ServerName::IpAddress(addr.ip().into()),
            };
            let connector = tokio_rustls::TlsConnector::from(Arc::clone(config));
            let tls = tokio::time::timeout(upstreams.connect_timeout, connector.connect(name, tcp))
                .await
                .map_err(|_| {
                    io::Error::new(io::ErrorKind::TimedOut, "TLS handshake timed out")
                })??;
            handshake(tls, http2).await
        }
    }
}

async fn handshake<S>(stream: S, http2: bool) -> io::Result<Sender>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let io = TokioIo::new(stream);
    if http2 {
        let (sender, connection) = http2::Builder::new(TokioExecutor::new())
            .handshake(io)
            .await
            .map_err(io::Error::other)?;
        tokio::spawn(async move {
            if let Err(error) = connection.await {
                tracing::debug!(%error, "upstream HTTP/2 connection ended");
            }
        });
        Ok(Sender::Http2(sender))
    } else {
        let (sender, connection) = http1::Builder::new()
            .handshake(io)
            .await
            .map_err(io::Error::other)?;
        tokio::spawn(async move {
            if let Err(error) = connection.await {
                tracing::debug!(%error, "upstream HTTP/1.1 connection ended");
            }
        });
        Ok(Sender::Http1(sender))
    }
}

/// Reads the head the header policy encoded back into request parts. For HTTP/2 the Host
/// becomes `:authority` and connection-specific fields go (RFC 9113 §8.2.2); for
/// HTTP/1.1 hyper frames the body itself.
fn request_parts(
    encoded: &[u8],
    http2: bool,
    tls: bool,
    endpoint: SocketAddr,
) -> Result<http::request::Parts, String> {
    let count = encoded.windows(2).filter(|w| w == b"\r\n").count();
    let mut fields = vec![httparse::EMPTY_HEADER; count];
    let mut parsed = httparse::Request::new(&mut fields);
    match parsed.parse(encoded) {
        Ok(httparse::Status::Complete(_)) => {}
        Ok(httparse::Status::Partial) => return Err("incomplete head".to_owned()),
        Err(error) => return Err(error.to_string()),
    }
    let method =
        Method::from_bytes(parsed.method.unwrap_or("GET").as_bytes()).map_err(|e| e.to_string())?;
    let target = parsed.path.unwrap_or("/");
    let mut headers = HeaderMap::with_capacity(parsed.headers.len());
    let mut host = None;
    for field in parsed.headers.iter() {
        let name = HeaderName::from_bytes(field.name.as_bytes()).map_err(|e| e.to_string())?;
        let value = HeaderValue::from_bytes(field.value).map_err(|e| e.to_string())?;
        if name == HOST && http2 {
            host = Some(value);
            continue;
        }
        if name == TRANSFER_ENCODING {
            continue;
        }
        if http2
            && matches!(
                header_policy::request_field(name.as_str().as_bytes()),
                RequestField::Connection | RequestField::HopByHop | RequestField::Upgrade
            )
        {
            continue;
        }
        headers.append(name, value);
    }
    let uri = if http2 {
        let authority = host
            .and_then(|h| Authority::try_from(h.as_bytes()).ok())
            .map_or_else(
                || Authority::try_from(endpoint.to_string()).map_err(|e| e.to_string()),
                Ok,
            )?;
        Uri::builder()
            .scheme(if tls { Scheme::HTTPS } else { Scheme::HTTP })
            .authority(authority)
            .path_and_query(target)
            .build()
            .map_err(|e| e.to_string())?
    } else {
        Uri::try_from(target).map_err(|e| e.to_string())?
    };
    let (mut parts, ()) = Request::new(()).into_parts();
    parts.method = method;
    parts.uri = uri;
    parts.version = if http2 {
        http::Version::HTTP_2
    } else {
        http::Version::HTTP_11
    };
    parts.headers = headers;
    Ok(parts)
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEAD: &[u8] = b"POST /pkg.Svc/Call HTTP/1.1\r\nhost: grpc.example:8080\r\n\
te: trailers\r\ncontent-type: application/grpc\r\nx-forwarded-for: 10.0.0.1\r\n\
transfer-encoding: chunked\r\n\r\n";

    #[test]
    fn http2_host_becomes_authority_rfc_9113_section_8_3_1() {
        let endpoint = "10.1.2.3:50051".parse().unwrap();
        let parts = request_parts(HEAD, true, false, endpoint).unwrap();
        assert_eq!(
            parts.uri.to_string(),
            "http://grpc.example:8080/pkg.Svc/Call"
        );
        assert_eq!(parts.version, http::Version::HTTP_2);
        assert!(parts.headers.get(HOST).is_none());
        assert!(parts.headers.get(TRANSFER_ENCODING).is_none());
        // gRPC needs `te: trailers` (RFC 9113 §8.2.2 allows exactly this value).
        assert_eq!(parts.headers["te"], "trailers");
        assert_eq!(parts.headers["x-forwarded-for"], "10.0.0.1");
    }

    #[test]
    fn http1_keeps_host_and_lets_hyper_frame() {
        let endpoint = "10.1.2.3:8443".parse().unwrap();
        let parts = request_parts(HEAD, false, true, endpoint).unwrap();
        assert_eq!(parts.uri.to_string(), "/pkg.Svc/Call");
        assert_eq!(parts.headers[HOST], "grpc.example:8080");
        assert!(parts.headers.get(TRANSFER_ENCODING).is_none());
    }

    #[test]
    fn http2_without_host_uses_the_endpoint() {
        let head = b"GET / HTTP/1.1\r\nhost: 10.1.2.3:80\r\n\r\n";
        let parts = request_parts(head, true, true, "10.1.2.3:80".parse().unwrap()).unwrap();
        assert_eq!(parts.uri.to_string(), "https://10.1.2.3:80/");
    }
}

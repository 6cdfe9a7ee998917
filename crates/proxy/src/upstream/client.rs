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

use http::header::CONNECTION;
use http::uri::{Authority, Scheme};
use http::{HeaderMap, HeaderName, HeaderValue, Method, Request, Response, Uri};
use hyper::body::Incoming;
use hyper::client::conn::{http1, http2};
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::pki_types::ServerName;
use sluice_routing::{AuthKeepalive, Policy, UpstreamProtocol};
use tokio::io::{AsyncRead, AsyncWrite};

use crate::backend::tls::ClientConfigs;
use crate::body::RequestBody;
use crate::context::Upstreams;
use crate::http::header_policy::{self, HeadSink, RequestField};
use crate::snapshot::{BackendState, Snapshot};
use crate::upstream::driver::{self, Retryable, Transport, Try, TryFailed};
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
    let backend = snapshot.table.backends().get(id)?;
    let service = &backend.service;
    // The route's `proxy-ssl-*`, else the Service port's BackendTLSPolicy.
    let route_tls = policy.upstream_tls.as_ref().or(backend.tls.as_ref());
    let client = policy.backend_client_certificate.as_ref();
    let configs = snapshot.tls_clients.as_ref()?.get(route_tls, client);
    Some(Target {
        protocol,
        tls: protocol.tls().then_some(configs),
        server_name: crate::backend::tls::server_name(
            route_tls.map(|t| &**t),
            &service.name,
            &service.namespace,
        ),
    })
}

/// Sends `outgoing` to an endpoint of `backend` over `target`'s protocol. Requests without
/// a body must have their response head within `deadline` of `start`; streaming calls may
/// send for long before an answer, their stalls bounded by the client body timeout.
pub(crate) async fn send(
    upstreams: &Upstreams,
    backend: &BackendState,
    target: &Target<'_>,
    outgoing: Outgoing<'_>,
    start: Instant,
    deadline: Duration,
) -> Result<Answer, Failure> {
    let transport = Client { upstreams, target };
    let answered = driver::send(transport, backend, outgoing, start, deadline).await?;
    Ok(Answer {
        response: answered.response,
        endpoint: answered.endpoint,
    })
}

/// hyper's clients as a transport.
struct Client<'t> {
    upstreams: &'t Upstreams,
    target: &'t Target<'t>,
}

impl Transport for Client<'_> {
    type Response = Response<Incoming>;

    fn status(response: &Response<Incoming>) -> u16 {
        response.status().as_u16()
    }

    async fn exchange(&mut self, at: Try<'_, '_>) -> Result<Response<Incoming>, TryFailed> {
        let (backend, addr) = (at.backend, at.addr);
        let target = self.target;
        let http2 = target.protocol.http2();
        let mut head = PartsHead::new(http2);
        at.outgoing.encode(addr, &mut head);
        let parts = head
            .into_parts(target.tls.is_some(), addr)
            .map_err(|error| {
                tracing::debug!(%error, "request cannot be sent over this protocol");
                TryFailed::Fail(Failure::BadGateway)
            })?;
        let key = (addr, target.tls.map_or(0, |t| config_key(t, http2)));
        let opening = Instant::now();
        let (sender, cached) = match checkout(key, http2) {
            Some(sender) => (sender, true),
            None => match open(self.upstreams, target, addr).await {
                Ok(sender) => {
                    backend.metrics.observe_connect(opening.elapsed());
                    (sender, false)
                }
                Err(error) => {
                    return Err(TryFailed::Retry(Retryable::Connect(error), Some(at.body)));
                }
            },
        };
        let request = Request::from_parts(parts, at.body);
        let request_sent = Instant::now();
        let sent = match sender {
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
        };
        match sent {
            Ok(response) => {
                backend.metrics.observe_header(request_sent.elapsed());
                Ok(response)
            }
            Err(mut error) => {
                if let Some(request) = error.take_message() {
                    // Never processed (closed connection, GOAWAY, refused stream): safe to
                    // send again whatever the method.
                    evict(key, http2);
                    let body = request.into_body();
                    let stale = Retryable::Stale(Box::new(error.into_error()));
                    return Err(TryFailed::Retry(stale, Some(body)));
                }
                let error = error.into_error();
                if let Some(failure) = client_body_failure(&error) {
                    return Err(TryFailed::Fail(failure));
                }
                Err(TryFailed::Retry(Retryable::Io(Box::new(error)), None))
            }
        }
    }
}

/// One HTTP/1.1 request to `addr` outside any backend (the external auth service), over
/// TLS when `tls` is given. Without `keepalive` (ingress-nginx's `auth-keepalive: 0`) on a
/// connection of its own, closed after the answer; with it, on the thread's idle
/// connections to the service, each kept for `auth-keepalive-requests` requests and
/// `auth-keepalive-timeout` idle at most, `auth-keepalive` of them. A kept connection found
/// closed before it took the request is replaced once.
pub(crate) async fn call(
    upstreams: &Upstreams,
    addr: SocketAddr,
    tls: Option<&ClientConfigs>,
    server_name: Option<ServerName<'static>>,
    mut request: Request<RequestBody>,
    keepalive: Option<&AuthKeepalive>,
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
    let close = HeaderValue::from_static("close");
    let Some(keepalive) = keepalive else {
        request.headers_mut().insert(CONNECTION, close);
        let mut sender = open_http1(upstreams, &target, addr).await?;
        return sender
            .send_request(request)
            .await
            .map_err(|e| e.to_string());
    };
    let key = (addr, tls.map_or(0, |t| config_key(t, false)));
    for _ in 0..2 {
        let (mut sender, served) = match checkout_auth(key, keepalive.timeout) {
            Some(kept) => kept,
            None => (open_http1(upstreams, &target, addr).await?, 0),
        };
        let served = served.saturating_add(1);
        let last = served >= keepalive.requests;
        if last {
            request.headers_mut().insert(CONNECTION, close.clone());
        }
        match sender.try_send_request(request).await {
            Ok(response) => {
                if !last {
                    checkin_auth(key, sender, served, keepalive.connections);
                }
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

/// A new HTTP/1.1 connection to `addr`.
async fn open_http1(
    upstreams: &Upstreams,
    target: &Target<'_>,
    addr: SocketAddr,
) -> Result<http1::SendRequest<RequestBody>, String> {
    match open(upstreams, target, addr).await {
        Ok(Sender::Http1(sender)) => Ok(sender),
        Ok(Sender::Http2(_)) => Err("not an HTTP/1.1 connection".to_owned()),
        Err(e) => Err(format!("connecting to {addr}: {e}")),
    }
}

/// An idle connection to an auth service: how many requests it carried, since when idle.
struct KeptAuth {
    sender: http1::SendRequest<RequestBody>,
    served: u32,
    idle_since: Instant,
}

thread_local! {
    /// Idle connections to auth services (`auth-keepalive`), per worker as nginx's
    /// `keepalive` is per worker process.
    static AUTH: RefCell<HashMap<Key, Vec<KeptAuth>>> = RefCell::new(HashMap::new());
}

/// A kept connection to the auth service ready for a request, and the requests it carried;
/// those idle longer than `timeout` are closed.
fn checkout_auth(key: Key, timeout: Duration) -> Option<(http1::SendRequest<RequestBody>, u32)> {
    AUTH.with_borrow_mut(|conns| {
        let idle = conns.get_mut(&key)?;
        idle.retain(|kept| !kept.sender.is_closed() && kept.idle_since.elapsed() <= timeout);
        let ready = idle.iter().position(|kept| kept.sender.is_ready())?;
        let kept = idle.swap_remove(ready);
        Some((kept.sender, kept.served))
    })
}

/// Keeps a connection to the auth service for later, unless `max` are kept already.
fn checkin_auth(key: Key, sender: http1::SendRequest<RequestBody>, served: u32, max: usize) {
    AUTH.with_borrow_mut(|conns| {
        let idle = conns.entry(key).or_default();
        if idle.len() < max {
            idle.push(KeptAuth {
                sender,
                served,
                idle_since: Instant::now(),
            });
        }
    });
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

/// The upstream head as hyper's clients take it, written field by field by the header
/// policy (no second set of forwarding rules, no encoding and parsing again). For HTTP/2
/// the Host becomes `:authority` and connection-specific fields go (RFC 9113 §8.2.2); for
/// HTTP/1.1 hyper frames the body itself, so `Transfer-Encoding` goes too.
pub(crate) struct PartsHead {
    http2: bool,
    /// `proxy-http-version: "1.0"`.
    http10: bool,
    method: Option<Method>,
    target: String,
    headers: HeaderMap,
    host: Option<HeaderValue>,
    error: Option<String>,
}

impl PartsHead {
    /// An empty head for HTTP/2 or HTTP/1.1.
    pub(crate) fn new(http2: bool) -> PartsHead {
        PartsHead {
            http2,
            http10: false,
            method: None,
            target: String::new(),
            headers: HeaderMap::new(),
            host: None,
            error: None,
        }
    }

    fn failed(&mut self, error: impl std::fmt::Display) {
        self.error.get_or_insert_with(|| error.to_string());
    }

    /// The request parts, for a connection to `endpoint` (over TLS or not).
    pub(crate) fn into_parts(
        self,
        tls: bool,
        endpoint: SocketAddr,
    ) -> Result<http::request::Parts, String> {
        if let Some(error) = self.error {
            return Err(error);
        }
        let uri = if self.http2 {
            let authority = self
                .host
                .and_then(|h| Authority::try_from(h.as_bytes()).ok())
                .map_or_else(
                    || Authority::try_from(endpoint.to_string()).map_err(|e| e.to_string()),
                    Ok,
                )?;
            Uri::builder()
                .scheme(if tls { Scheme::HTTPS } else { Scheme::HTTP })
                .authority(authority)
                .path_and_query(self.target)
                .build()
                .map_err(|e| e.to_string())?
        } else {
            Uri::try_from(self.target).map_err(|e| e.to_string())?
        };
        let (mut parts, ()) = Request::new(()).into_parts();
        parts.method = self.method.unwrap_or(Method::GET);
        parts.uri = uri;
        parts.version = if self.http2 {
            http::Version::HTTP_2
        } else if self.http10 {
            http::Version::HTTP_10
        } else {
            http::Version::HTTP_11
        };
        parts.headers = self.headers;
        Ok(parts)
    }
}

impl HeadSink for PartsHead {
    fn http10(&mut self) {
        self.http10 = true;
    }

    fn request_line(&mut self, method: &[u8], target: &[u8]) {
        match Method::from_bytes(method) {
            Ok(method) => self.method = Some(method),
            Err(error) => self.failed(error),
        }
        match std::str::from_utf8(target) {
            Ok(target) => self.target = target.to_owned(),
            Err(error) => self.failed(error),
        }
    }

    fn field(&mut self, name: &[u8], value: &[u8]) {
        let kind = header_policy::request_field(name);
        if kind == RequestField::TransferEncoding
            || self.http2
                && matches!(
                    kind,
                    RequestField::Connection | RequestField::HopByHop | RequestField::Upgrade
                )
        {
            return;
        }
        let value = match HeaderValue::from_bytes(value) {
            Ok(value) => value,
            Err(error) => return self.failed(error),
        };
        if self.http2 && name.eq_ignore_ascii_case(b"host") {
            self.host = Some(value);
            return;
        }
        match HeaderName::from_bytes(name) {
            Ok(name) => {
                self.headers.append(name, value);
            }
            Err(error) => self.failed(error),
        }
    }

    fn field_with(&mut self, name: &[u8], write: impl FnOnce(&mut Vec<u8>)) {
        let mut value = Vec::with_capacity(64);
        write(&mut value);
        self.field(name, &value);
    }

    fn end(&mut self) {}
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::header::{HOST, TRANSFER_ENCODING};

    /// The parts hyper's client gets for an encoded `head` (fed field by field, as the
    /// header policy does).
    fn request_parts(
        head: &[u8],
        http2: bool,
        tls: bool,
        endpoint: SocketAddr,
    ) -> Result<http::request::Parts, String> {
        let mut fields = [httparse::EMPTY_HEADER; 16];
        let mut parsed = httparse::Request::new(&mut fields);
        parsed.parse(head).map_err(|e| e.to_string())?;
        let mut sink = PartsHead::new(http2);
        sink.request_line(
            parsed.method.unwrap_or("GET").as_bytes(),
            parsed.path.unwrap_or("/").as_bytes(),
        );
        for field in parsed.headers.iter() {
            sink.field(field.name.as_bytes(), field.value);
        }
        sink.end();
        sink.into_parts(tls, endpoint)
    }

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

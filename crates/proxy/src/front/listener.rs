//! Accept loops and per-connection serving for the HTTP and HTTPS listeners.
//!
//! Plain connections speak HTTP/2 (h2c with prior knowledge) if their first bytes are the
//! HTTP/2 preface, else HTTP/1.1; the first read for that check is large and handed on to
//! hyper, so detection costs no extra system call. TLS connections use the ALPN result to
//! pick HTTP/2 or HTTP/1.1 without sniffing.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::Poll;
use std::time::Duration;

use bytes::BytesMut;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use sluice_routing::SocketKind;
use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{debug, warn};

use crate::config::{Http1Server, ProxyArgs};
use crate::context::{ConnCtx, Shared};
use crate::front::activity::ActivityIo;
use crate::front::http1;
use crate::front::hyper_service;
use crate::front::prefixed::Prefixed;
use crate::front::proxy_protocol;
use crate::front::side_wake::SideWake;
use crate::http::header_policy::Forwarded;
use crate::pipeline::route::Routing;
use crate::runtime::gateway_sockets::NewSocket;
use crate::runtime::shutdown::Phases;
use crate::settings::Connections;

/// Pause after a failed `accept` (e.g. out of file descriptors) so it does not spin.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);

/// hyper's smallest allowed read buffer.
const MIN_BUF_SIZE: usize = 8192;

/// Connection settings shared by all connections of the proxy.
#[derive(Debug)]
pub(crate) struct Protocols {
    /// HTTP/1.1 (TLS without ALPN h2; plain connections not starting with the h2 preface).
    http1: auto::Builder<TokioExecutor>,
    /// HTTP/2 (TLS with ALPN h2; h2c with prior knowledge).
    http2: auto::Builder<TokioExecutor>,
    /// TLS handshake deadline.
    handshake_timeout: Duration,
    /// Keep-alive idle limit.
    idle_timeout: Duration,
    /// Plain HTTP/1.1 requests are served by the own loop ([`http1`]).
    own_http1: bool,
    /// Limits of the own loop.
    limits: http1::Limits,
    /// `--send-timeout`.
    send_timeout: Duration,
    /// `--proxy-protocol`.
    proxy_protocol: bool,
    /// Requests on one HTTP/1 connection at most (`keep-alive-requests`).
    pub(crate) max_requests: Option<u64>,
    /// What these were built from.
    connections: Connections,
}

impl Protocols {
    /// The settings of `args` with `connections` (the flags, or the ConfigMap's keys over
    /// them) for what the ConfigMap can change.
    pub(crate) fn new(args: &ProxyArgs, connections: &Connections) -> Protocols {
        Protocols::with(
            args.http1_server == Http1Server::Sluice,
            args.send_timeout,
            connections,
        )
    }

    /// These protocols with other connection settings (the ConfigMap changed them).
    fn rebuilt(&self, connections: &Connections) -> Protocols {
        Protocols::with(self.own_http1, self.send_timeout, connections)
    }

    fn with(own_http1: bool, send_timeout: Duration, connections: &Connections) -> Protocols {
        let mut builder = auto::Builder::new(TokioExecutor::new());
        let max_header = usize::try_from(connections.max_header_bytes).unwrap_or(usize::MAX);
        // nginx's `keepalive_timeout 0` (ingress-nginx `keep-alive: "0"`): every response
        // closes its connection.
        let keep_alive = !connections.idle_timeout.is_zero();
        builder
            .http1()
            .timer(TokioTimer::new())
            // hyper also runs this timer while a keep-alive connection waits for its next
            // request, so it bounds idle HTTP/1 connections too.
            .header_read_timeout(connections.header_timeout)
            // A head that does not fit the read buffer is answered with 431.
            .max_buf_size(max_header.max(MIN_BUF_SIZE))
            // hyper's default of 100 header fields (more get 431): a larger limit makes
            // hyper move its parse arrays from the stack to two allocations per request.
            .keep_alive(keep_alive);
        builder
            .http2()
            .timer(TokioTimer::new())
            .max_header_list_size(u32::try_from(max_header).unwrap_or(u32::MAX))
            .max_concurrent_streams(256)
            // Windows bound the memory one stream may buffer while keeping bulk transfers
            // fast; larger than the 64 KiB defaults so 10 MiB transfers do not crawl.
            .initial_stream_window_size(1 << 20)
            .initial_connection_window_size(4 << 20);
        let max_requests = if keep_alive {
            connections.max_requests
        } else {
            Some(1)
        };
        Protocols {
            http1: builder.clone().http1_only(),
            http2: builder.http2_only(),
            handshake_timeout: connections.header_timeout,
            idle_timeout: if keep_alive {
                connections.idle_timeout
            } else {
                connections.header_timeout
            },
            own_http1,
            limits: http1::Limits {
                max_head: max_header,
                header_timeout: connections.header_timeout,
            },
            max_requests,
            send_timeout,
            proxy_protocol: connections.proxy_protocol,
            connections: connections.clone(),
        }
    }
}

/// What a listener speaks.
#[derive(Clone)]
pub(crate) enum Transport {
    /// Plain TCP.
    Plain,
    /// TLS terminated here.
    Tls(crate::front::tls::TlsConfigs),
    /// Whole connections piped to a stream route's backend (a Gateway `TCP` listener, or
    /// `TLS` when `tls` is given: routed by the ClientHello's server name, and terminated
    /// with these configurations where the route says so).
    Stream {
        /// Routed by the SNI; the configurations for routes that terminate TLS.
        tls: Option<crate::front::tls::TlsConfigs>,
    },
}

/// A listening socket and what arrives on it.
pub(crate) struct Listening {
    pub(crate) listener: TcpListener,
    pub(crate) transport: Transport,
    /// A Gateway's own socket (its address): requests on it see that Gateway's routes
    /// only. `None`: one of the proxy's shared listeners.
    pub(crate) gateway: Option<SocketAddr>,
    /// Ends this loop alone (a Gateway socket no longer wanted); never cancelled for the
    /// proxy's own listeners.
    pub(crate) closed: CancellationToken,
}

impl Listening {
    /// One of the proxy's own listeners.
    pub(crate) fn shared(listener: TcpListener, transport: Transport) -> Listening {
        Listening {
            listener,
            transport,
            gateway: None,
            closed: CancellationToken::new(),
        }
    }
}

/// Accepts connections until the stop-accepting phase (or the socket is closed), spawning
/// one task per connection.
pub(crate) async fn accept_loop(
    listening: Listening,
    shared: Arc<Shared>,
    mut protocols: Arc<Protocols>,
    phases: Phases,
    connections: TaskTracker,
    per_worker: Option<prometheus_client::metrics::counter::Counter>,
) {
    let Listening {
        listener,
        transport,
        gateway,
        closed,
    } = listening;
    let local_port = listener.local_addr().map(|a| a.port()).unwrap_or(0);
    let tls = matches!(transport, Transport::Tls(_));
    loop {
        let accepted = tokio::select! {
            biased;
            () = phases.stop_accepting.cancelled() => break,
            () = closed.cancelled() => break,
            accepted = listener.accept() => accepted,
        };
        let (stream, peer) = match accepted {
            Ok(accepted) => accepted,
            Err(error) => {
                warn!(%error, "accept failed");
                tokio::time::sleep(ACCEPT_BACKOFF).await;
                continue;
            }
        };
        // Small responses must not wait for Nagle.
        let _ = stream.set_nodelay(true);
        // The ConfigMap may have changed the connection settings: new connections get them.
        {
            let snapshot = shared.table.snapshot();
            let connections = &snapshot.settings.connections;
            if *connections != protocols.connections {
                protocols = Arc::new(protocols.rebuilt(connections));
            }
        }
        shared.metrics.connections_accepted.inc();
        if let Some(counter) = &per_worker {
            counter.inc();
        }
        let client = Client {
            shared: Arc::clone(&shared),
            peer,
            tls,
            local_port,
            gateway,
        };
        connections.spawn(serve_connection(
            stream,
            transport.clone(),
            client,
            Arc::clone(&protocols),
            phases.clone(),
        ));
    }
    debug!(port = local_port, "listener closed");
}

/// Starts an accept loop for each Gateway socket `new_sockets` hands over (HTTPS ones
/// terminate TLS with `tls`), until the stop-accepting phase.
pub(crate) async fn accept_gateway_sockets(
    mut new_sockets: tokio::sync::mpsc::UnboundedReceiver<NewSocket>,
    tls: crate::front::tls::TlsConfigs,
    shared: Arc<Shared>,
    protocols: Arc<Protocols>,
    phases: Phases,
    connections: TaskTracker,
    per_worker: Option<prometheus_client::metrics::counter::Counter>,
) {
    let mut loops = tokio::task::JoinSet::new();
    loop {
        let new = tokio::select! {
            biased;
            () = phases.stop_accepting.cancelled() => break,
            Some(_) = loops.join_next(), if !loops.is_empty() => continue,
            new = new_sockets.recv() => new,
        };
        let Some(new) = new else { break };
        let socket = match new.socket {
            crate::runtime::gateway_sockets::Socket::Tcp(socket) => socket,
            crate::runtime::gateway_sockets::Socket::Udp(socket) => {
                match tokio::net::UdpSocket::from_std(socket) {
                    Ok(socket) => {
                        loops.spawn(crate::front::datagram::serve(
                            socket,
                            new.addr,
                            Arc::clone(&shared),
                            new.closed,
                            phases.clone(),
                        ));
                    }
                    Err(error) => {
                        warn!(addr = %new.addr, %error, "Gateway socket cannot be served")
                    }
                }
                continue;
            }
        };
        let listener = match socket
            .set_nonblocking(true)
            .and_then(|()| TcpListener::from_std(socket))
        {
            Ok(listener) => listener,
            Err(error) => {
                warn!(addr = %new.addr, %error, "Gateway socket cannot be served");
                continue;
            }
        };
        let transport = match new.kind {
            SocketKind::Http => Transport::Plain,
            SocketKind::Https => Transport::Tls(tls.clone()),
            SocketKind::Tcp => Transport::Stream { tls: None },
            SocketKind::Tls => Transport::Stream {
                tls: Some(tls.clone()),
            },
            // Served above.
            SocketKind::Udp => continue,
        };
        loops.spawn(accept_loop(
            Listening {
                listener,
                transport,
                gateway: Some(new.addr),
                closed: new.closed,
            },
            Arc::clone(&shared),
            Arc::clone(&protocols),
            phases.clone(),
            connections.clone(),
            per_worker.clone(),
        ));
    }
    // The loops end on the same phase; wait so their sockets are closed.
    while loops.join_next().await.is_some() {}
}

/// An accepted connection, before its PROXY protocol header (if any) is read.
struct Client {
    shared: Arc<Shared>,
    peer: SocketAddr,
    tls: bool,
    local_port: u16,
    gateway: Option<SocketAddr>,
}

/// Reads the PROXY protocol header when the listener expects one: the client's address
/// and the bytes read past the header. `None`: no valid header in time (the connection is
/// dropped without a word: the spec forbids guessing).
async fn proxy_header(
    stream: &mut TcpStream,
    peer: SocketAddr,
    protocols: &Protocols,
) -> Option<(SocketAddr, BytesMut)> {
    let mut early = BytesMut::new();
    if !protocols.proxy_protocol {
        return Some((peer, early));
    }
    let header = proxy_protocol::read_header(stream, &mut early);
    match tokio::time::timeout(protocols.handshake_timeout, header).await {
        // LOCAL (a balancer's health check) and unknown families keep the real peer.
        Ok(Ok(source)) => Some((source.unwrap_or(peer), early)),
        Ok(Err(error)) => {
            debug!(%peer, %error, "invalid PROXY protocol header");
            None
        }
        Err(_) => {
            debug!(%peer, "no PROXY protocol header within the header timeout");
            None
        }
    }
}

/// Counts a connection in `sluice_connections_active` while it lives.
struct OpenConnection(crate::runtime::shard::ShardedGauge);

impl OpenConnection {
    fn new(gauge: &crate::runtime::shard::ShardedGauge) -> Self {
        gauge.inc();
        OpenConnection(gauge.clone())
    }
}

impl Drop for OpenConnection {
    fn drop(&mut self) {
        self.0.dec();
    }
}

/// Serves one accepted connection: PROXY header and TLS handshake if needed, then HTTP.
async fn serve_connection(
    mut stream: TcpStream,
    transport: Transport,
    client: Client,
    protocols: Arc<Protocols>,
    phases: Phases,
) {
    let _open = OpenConnection::new(&client.shared.metrics.connections_active);
    let header = tokio::select! {
        header = proxy_header(&mut stream, client.peer, &protocols) => header,
        () = phases.drain.cancelled() => return,
    };
    let Some((peer, early)) = header else {
        return;
    };
    let trusted = client
        .shared
        .table
        .snapshot()
        .settings
        .policy
        .trusts(peer.ip());
    let mut ctx = ConnCtx {
        shared: client.shared,
        peer,
        forwarded: Forwarded::new(peer.ip(), client.tls, client.local_port, trusted),
        tls: client.tls,
        gateway: client.gateway,
        sni: None,
        client_certificates: None,
        tls_names: None,
        requests: AtomicU64::new(0),
        max_requests: protocols.max_requests,
    };
    let activity = Arc::new(AtomicU64::new(0));
    let send_timeout = Some(protocols.send_timeout);
    match transport {
        Transport::Stream { tls } => {
            let Some(socket) = ctx.gateway else { return };
            crate::front::stream::serve(
                stream,
                early,
                &ctx,
                socket,
                tls.as_ref(),
                protocols.handshake_timeout,
                &phases,
            )
            .await;
        }
        Transport::Plain => {
            let ctx = Arc::new(ctx);
            let mut io = ActivityIo::new(stream, Arc::clone(&activity), send_timeout);
            let first = tokio::time::timeout(protocols.handshake_timeout, sniff(&mut io, early));
            let sniffed = tokio::select! {
                sniffed = first => sniffed,
                () = phases.drain.cancelled() => return,
            };
            let (h2, prefix) = match sniffed {
                Ok(Ok(sniffed)) => sniffed,
                Ok(Err(error)) => {
                    debug!(peer = %ctx.peer, %error, "reading the first request failed");
                    return;
                }
                Err(_) => {
                    debug!(peer = %ctx.peer, "no request within the header timeout");
                    return;
                }
            };
            if h2 {
                let io = Prefixed::new(prefix.freeze(), io);
                serve_http(
                    &protocols.http2,
                    io,
                    ctx,
                    None,
                    &protocols,
                    &phases,
                    &activity,
                )
                .await;
            } else {
                serve_http1(io, prefix, ctx, &protocols, &phases, &activity).await;
            }
        }
        Transport::Tls(configs) => {
            // `ssl-passthrough` hosts' connections are piped before any TLS here.
            let passthrough =
                ctx.gateway.is_none() && ctx.shared.table.current.load().table.has_passthrough();
            let (stream, early) = if passthrough {
                let hello = protocols.handshake_timeout;
                match crate::front::stream::passthrough(stream, early, &ctx, hello, &phases).await {
                    Some(back) => back,
                    None => return,
                }
            } else {
                (stream, early)
            };
            let stream = Prefixed::new(early.freeze(), stream);
            // The configuration is chosen by the ClientHello (cipher suite preference).
            let handshake = tokio::time::timeout(protocols.handshake_timeout, async move {
                let start = tokio_rustls::LazyConfigAcceptor::new(
                    rustls::server::Acceptor::default(),
                    stream,
                )
                .await?;
                let config = configs
                    .for_connection(&start.client_hello(), ctx.gateway)
                    .map_err(std::io::Error::other)?;
                start.into_stream(config).await
            });
            let tls = tokio::select! {
                result = handshake => result,
                () = phases.drain.cancelled() => return,
            };
            let tls = match tls {
                Ok(Ok(tls)) => tls,
                Ok(Err(error)) => {
                    debug!(peer = %ctx.peer, %error, "TLS handshake failed");
                    return;
                }
                Err(_) => {
                    debug!(peer = %ctx.peer, "TLS handshake timed out");
                    return;
                }
            };
            let h2 = tls.get_ref().1.alpn_protocol() == Some(b"h2");
            if ctx.gateway.is_some() {
                ctx.sni = tls.get_ref().1.server_name().map(Box::from);
            }
            ctx.client_certificates = tls.get_ref().1.peer_certificates().map(Box::from);
            ctx.tls_names = crate::observe::access_log::tls_names(tls.get_ref().1);
            let ctx = Arc::new(ctx);
            let io = ActivityIo::new(tls, Arc::clone(&activity), send_timeout);
            if h2 {
                serve_http(
                    &protocols.http2,
                    io,
                    ctx,
                    None,
                    &protocols,
                    &phases,
                    &activity,
                )
                .await;
            } else {
                serve_http1(io, BytesMut::new(), ctx, &protocols, &phases, &activity).await;
            }
        }
    }
}

/// Serves HTTP/1.x on `io` (`prefix` already read from it): with the own loop
/// ([`http1`]) until a request needs hyper, then with hyper; or with hyper from the start
/// when so configured.
async fn serve_http1<I>(
    io: I,
    prefix: BytesMut,
    ctx: Arc<ConnCtx>,
    protocols: &Protocols,
    phases: &Phases,
    activity: &AtomicU64,
) where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (io, rest, routing) = if protocols.own_http1 {
        let signals = http1::Signals::default();
        let lane = http1::serve(io, prefix, &ctx, protocols.limits, &signals);
        tokio::pin!(lane);
        let outcome = watched(lane, protocols, phases, activity, |_| {
            signals.closing.store(true, Ordering::Relaxed);
            // Waiting for a request with nothing read: nothing to finish.
            signals.idle.load(Ordering::Relaxed)
        })
        .await;
        match outcome {
            Some(http1::Outcome::Handoff(io, rest, routing)) => (io, rest, routing),
            Some(http1::Outcome::Closed) | None => return,
        }
    } else {
        (io, prefix.freeze(), None)
    };
    let io = Prefixed::new(rest, io);
    serve_http(
        &protocols.http1,
        io,
        ctx,
        routing,
        protocols,
        phases,
        activity,
    )
    .await;
}

/// Runs hyper on `io` until the connection ends, closing it gracefully when it has been idle
/// for the idle timeout or when the proxy drains, and dropping it when the proxy forces.
/// `routing`: the routing of the first request on `io`, made by the own HTTP/1.1 loop.
async fn serve_http<I>(
    builder: &auto::Builder<TokioExecutor>,
    io: I,
    ctx: Arc<ConnCtx>,
    routing: Option<Routing>,
    protocols: &Protocols,
    phases: &Phases,
    activity: &AtomicU64,
) where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let peer = ctx.peer;
    // Taken by the first request, which is the one the own loop routed.
    let routing = std::cell::Cell::new(routing);
    let service =
        service_fn(move |request| hyper_service::handle(Arc::clone(&ctx), request, routing.take()));
    let connection = builder.serve_connection_with_upgrades(TokioIo::new(io), service);
    tokio::pin!(connection);
    let result = watched(connection, protocols, phases, activity, |connection| {
        connection.graceful_shutdown();
        false
    })
    .await;
    if let Some(Err(error)) = result {
        debug!(%peer, %error, "connection ended with an error");
    }
}

/// Polls a connection future to its end while watching the proxy's drain and force
/// phases and the connection's idleness. When it should close gracefully (the proxy
/// drains, or no byte moved for a whole idle period) `close` is called, which returns
/// whether to drop it at once. `None`: dropped (forced, or closed at once).
async fn watched<F: Future>(
    mut connection: Pin<&mut F>,
    protocols: &Protocols,
    phases: &Phases,
    activity: &AtomicU64,
    mut close: impl FnMut(Pin<&mut F>) -> bool,
) -> Option<F::Output> {
    let idle = protocols.idle_timeout;
    let mut idle_check = tokio::time::interval_at(tokio::time::Instant::now() + idle, idle);
    let mut seen = activity.load(Ordering::Relaxed);
    let mut closing = false;
    // Created once: a fresh `cancelled()` per wake-up would re-register with the token
    // every time the connection makes progress.
    let drain = phases.drain.cancelled();
    let force = phases.force.cancelled();
    tokio::pin!(drain, force);
    // The connection is polled on every wake-up; these watchers only when they fired.
    let side = SideWake::new();
    loop {
        let event = {
            let watch = async {
                tokio::select! {
                    () = &mut drain, if !closing => Watch::Drain,
                    () = &mut force => Watch::Force,
                    _ = idle_check.tick(), if !closing => Watch::IdleTick,
                }
            };
            tokio::pin!(watch);
            std::future::poll_fn(|cx| {
                if let Poll::Ready(output) = connection.as_mut().poll(cx) {
                    return Poll::Ready(Err(output));
                }
                side.poll(watch.as_mut(), cx).map(Ok)
            })
            .await
        };
        side.rearm();
        match event {
            Err(output) => return Some(output),
            Ok(Watch::Force) => return None,
            Ok(Watch::Drain) => {
                closing = true;
                if close(connection.as_mut()) {
                    return None;
                }
            }
            Ok(Watch::IdleTick) => {
                let now = activity.load(Ordering::Relaxed);
                if now == seen {
                    debug!("closing idle connection");
                    closing = true;
                    if close(connection.as_mut()) {
                        return None;
                    }
                }
                seen = now;
            }
        }
    }
}

/// What woke a connection's watchers.
enum Watch {
    /// The proxy drains: finish in-flight requests, then close.
    Drain,
    /// The drain timeout passed: close now.
    Force,
    /// Time to check whether the connection was idle for a whole period.
    IdleTick,
}

/// What an h2c client with prior knowledge sends first (RFC 9113 §3.4).
const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// Size of the first read of a plain connection: a typical request head fits.
const SNIFF_BUF: usize = 4096;

/// Reads the first bytes of a plain connection and tells whether they are the HTTP/2
/// preface. One read suffices unless the bytes so far are a proper prefix of the preface.
/// (hyper-util's detection reads 24 bytes, then hyper reads the rest: two system calls.)
/// `buf` holds bytes already read (after a PROXY protocol header).
async fn sniff<T: AsyncRead + Unpin>(
    io: &mut T,
    mut buf: BytesMut,
) -> io::Result<(bool, BytesMut)> {
    buf.reserve(SNIFF_BUF);
    loop {
        if !buf.is_empty() {
            let len = buf.len().min(H2_PREFACE.len());
            if buf[..len] != H2_PREFACE[..len] {
                return Ok((false, buf));
            }
            if buf.len() >= H2_PREFACE.len() {
                return Ok((true, buf));
            }
        }
        if io.read_buf(&mut buf).await? == 0 {
            return Ok((false, buf));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncWriteExt;

    /// Sniffs what `pieces` deliver (each a separate write), then reads everything back
    /// through `Prefixed`.
    async fn sniffed(pieces: &[&[u8]]) -> (bool, Vec<u8>) {
        let (mut client, mut server) = tokio::io::duplex(64 * 1024);
        let pieces: Vec<Vec<u8>> = pieces.iter().map(|p| p.to_vec()).collect();
        let writer = tokio::spawn(async move {
            for piece in pieces {
                client.write_all(&piece).await.unwrap();
                tokio::time::sleep(std::time::Duration::from_millis(5)).await;
            }
        });
        let (h2, prefix) = sniff(&mut server, BytesMut::new()).await.unwrap();
        writer.await.unwrap();
        let mut all = Vec::new();
        Prefixed::new(prefix.freeze(), server)
            .read_to_end(&mut all)
            .await
            .unwrap();
        (h2, all)
    }

    #[tokio::test]
    async fn tells_the_h2_preface_from_http1_and_loses_no_byte() {
        let preface_and_frames = [H2_PREFACE, b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"].concat();
        assert_eq!(
            sniffed(&[&preface_and_frames]).await,
            (true, preface_and_frames.clone())
        );
        // The preface split over several reads.
        let (head, tail) = preface_and_frames.split_at(7);
        let (mid, rest) = tail.split_at(10);
        assert_eq!(
            sniffed(&[head, mid, rest]).await,
            (true, preface_and_frames.clone())
        );
        let get = b"GET / HTTP/1.1\r\nHost: a\r\n\r\n";
        assert_eq!(sniffed(&[get]).await, (false, get.to_vec()));
        // Starts like the preface, then is not (one more read decides).
        assert_eq!(
            sniffed(&[b"P", b"OST / HTTP/1.1\r\n\r\n"]).await,
            (false, b"POST / HTTP/1.1\r\n\r\n".to_vec())
        );
        // Closed before a byte: HTTP/1.1 (hyper then sees the end of stream).
        assert_eq!(sniffed(&[]).await, (false, Vec::new()));
    }
}

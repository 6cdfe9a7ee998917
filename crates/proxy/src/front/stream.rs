//! The connections of Gateway `TCP` and `TLS` listeners, and the `ssl-passthrough` hosts'
//! connections of the shared HTTPS listener: each is piped whole to an endpoint
//! of its route's backend (TCPRoute; TLSRoute chosen by the SNI of the ClientHello, which is
//! read, not consumed: in `Passthrough` mode the backend gets the TLS bytes as the client
//! sent them, in `Terminate` mode TLS ends here with the listener's certificate and the
//! backend gets the plaintext). One atomic load of the routing table per connection; the backend is drawn
//! by weight as for HTTP routes, and the endpoint picked by the same balancer (a failed
//! connect marks the endpoint down and the next is tried, three at most). Draining lets a
//! piped connection run until the forced phase of shutdown.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWrite, AsyncWriteExt as _};
use tokio::net::TcpStream;
use tracing::debug;

use crate::backend::balancer;
use crate::context::ConnCtx;
use crate::observe::metrics::{StreamTransport, UpstreamErrorKind};
use crate::runtime::shutdown::Phases;

/// The most endpoints one connection tries to connect to.
const CONNECT_TRIES: usize = 3;

/// The most a ClientHello may take before the SNI is known (TLS 1.3 ClientHellos with
/// post-quantum key shares are under 2 KiB; a record is at most 16 KiB).
const MAX_HELLO: usize = 16 * 1024 + 5;

/// Serves one connection of stream socket `socket`; `early`: what was read from the client
/// already; `tls`: the socket is a TLS listener, the route is chosen by the ClientHello's
/// server name, and these configurations terminate TLS where the route says so.
pub(crate) async fn serve(
    mut client: TcpStream,
    mut early: BytesMut,
    ctx: &ConnCtx,
    socket: SocketAddr,
    tls: Option<&crate::front::tls::TlsConfigs>,
    hello_timeout: Duration,
    phases: &Phases,
) {
    let name = if tls.is_some() {
        let read = tokio::time::timeout(hello_timeout, server_name(&mut client, &mut early));
        match read.await {
            Ok(Ok(name)) => name,
            Ok(Err(error)) => {
                debug!(peer = %ctx.peer, %error, "no TLS ClientHello");
                return;
            }
            Err(_) => {
                debug!(peer = %ctx.peer, "no TLS ClientHello within the handshake timeout");
                return;
            }
        }
    } else {
        None
    };
    let snapshot = ctx.shared.table.snapshot();
    let Some(target) = snapshot.table.stream_target(socket, name.as_deref()) else {
        debug!(peer = %ctx.peer, %socket, sni = ?name, "no route for the connection");
        return;
    };
    match tls.filter(|_| target.terminate) {
        None => pipe(client, &early, ctx, &snapshot, target, phases).await,
        Some(configs) => {
            // The ClientHello was read, not consumed: the handshake reads it again.
            let prefixed = crate::front::prefixed::Prefixed::new(early.freeze(), client);
            let handshake = async {
                let start = tokio_rustls::LazyConfigAcceptor::new(
                    rustls::server::Acceptor::default(),
                    prefixed,
                )
                .await?;
                let config = configs.for_hello(&start.client_hello());
                start.into_stream(config).await
            };
            match tokio::time::timeout(hello_timeout, handshake).await {
                Ok(Ok(terminated)) => {
                    pipe(terminated, &[], ctx, &snapshot, target, phases).await;
                }
                Ok(Err(error)) => debug!(peer = %ctx.peer, %error, "TLS handshake failed"),
                Err(_) => debug!(peer = %ctx.peer, "TLS handshake timed out"),
            }
        }
    }
}

/// A connection of the shared HTTPS listener while some Ingress is `ssl-passthrough`
/// (ingress-nginx's TCP proxy in front of nginx): its ClientHello's server name is read, not
/// consumed; a passthrough host's connection is piped whole to the backend of the host's `/`
/// path and `None` comes back. Any other connection comes back with what was read, for the
/// TLS handshake.
pub(crate) async fn passthrough(
    mut client: TcpStream,
    mut early: BytesMut,
    ctx: &ConnCtx,
    hello_timeout: Duration,
    phases: &Phases,
) -> Option<(TcpStream, BytesMut)> {
    let read = tokio::time::timeout(hello_timeout, server_name(&mut client, &mut early));
    let name = match read.await {
        Ok(Ok(name)) => name,
        // Not TLS: the handshake says so.
        Ok(Err(_)) => return Some((client, early)),
        Err(_) => {
            debug!(peer = %ctx.peer, "no TLS ClientHello within the handshake timeout");
            return None;
        }
    };
    let snapshot = ctx.shared.table.snapshot();
    let Some(target) = name
        .as_deref()
        .and_then(|name| snapshot.table.passthrough_target(name))
    else {
        return Some((client, early));
    };
    pipe(client, &early, ctx, &snapshot, target, phases).await;
    None
}

/// Pipes `client` (after `early`, bytes already read from it) to an endpoint of a backend
/// of `target` drawn by weight, until either side closes or shutdown forces it.
async fn pipe<C: AsyncRead + AsyncWrite + Unpin>(
    mut client: C,
    early: &[u8],
    ctx: &ConnCtx,
    snapshot: &crate::snapshot::Snapshot,
    target: &sluice_routing::StreamTarget,
    phases: &Phases,
) {
    // An unusable reference, or every weight 0: the connection is refused (closed).
    let Some(drawn) = crate::pipeline::route::draw(&target.split).filter(|b| b.usable) else {
        return;
    };
    let Some(backend) = snapshot.backends.get(drawn.backend.id) else {
        return;
    };
    let connect_timeout = ctx.shared.upstreams.connect_timeout;
    let mut tried = Vec::with_capacity(CONNECT_TRIES);
    let (mut upstream, index) = loop {
        let now = balancer::now_millis(Instant::now());
        let Some(index) = backend.balancer.pick(&tried, now) else {
            debug!(peer = %ctx.peer, service = %drawn.backend.service, "no endpoint to connect to");
            return;
        };
        let addr = backend.balancer.get(index).addr;
        let started = Instant::now();
        match tokio::time::timeout(connect_timeout, TcpStream::connect(addr)).await {
            Ok(Ok(stream)) => {
                backend.metrics.observe_connect(started.elapsed());
                backend.metrics.count_stream(StreamTransport::Tcp);
                break (stream, index);
            }
            Ok(Err(error)) => debug!(upstream = %addr, %error, "stream connect failed"),
            Err(_) => debug!(upstream = %addr, "stream connect timed out"),
        }
        backend.metrics.upstream_error(UpstreamErrorKind::Connect);
        backend.balancer.mark_down(index, now);
        backend.balancer.release(index);
        tried.push(index);
        if tried.len() >= CONNECT_TRIES {
            return;
        }
    };
    let _ = upstream.set_nodelay(true);
    let piped = async {
        upstream.write_all(early).await?;
        tokio::io::copy_bidirectional(&mut client, &mut upstream).await
    };
    tokio::select! {
        result = piped => {
            if let Err(error) = result {
                debug!(peer = %ctx.peer, %error, "stream ended");
            }
        }
        () = phases.force.cancelled() => {}
    }
    backend.balancer.release(index);
}

/// Reads the client's first bytes into `early` until its ClientHello is whole, and returns
/// the server name it asks for (`None`: it names none).
async fn server_name(
    client: &mut TcpStream,
    early: &mut BytesMut,
) -> std::io::Result<Option<String>> {
    let mut acceptor = rustls::server::Acceptor::default();
    let mut fed = 0;
    loop {
        while fed < early.len() {
            fed += acceptor
                .read_tls(&mut &early[fed..])
                .map_err(std::io::Error::other)?;
        }
        match acceptor.accept() {
            Ok(Some(accepted)) => {
                return Ok(accepted.client_hello().server_name().map(str::to_owned));
            }
            Ok(None) => {}
            Err((error, _alert)) => return Err(std::io::Error::other(error)),
        }
        if early.len() >= MAX_HELLO {
            return Err(std::io::Error::other("ClientHello too large"));
        }
        if client.read_buf(early).await? == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
    }
}

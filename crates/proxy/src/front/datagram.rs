//! The datagrams of Gateway `UDP` listeners: each client (source address) is a session
//! relayed to one endpoint of its UDPRoute's backend, drawn by weight when its first
//! datagram arrives (as a connection is for TCP), through an upstream socket of its own
//! whose replies go back to the client from the listener's address. A session ends after
//! [`IDLE`] without a datagram either way. Sessions are bounded per socket and worker
//! ([`MAX_SESSIONS`]): spoofed sources cannot grow them without end. One task per
//! listening socket and worker owns its sessions (no lock); one task per session reads
//! its replies.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokio::net::UdpSocket;
use tokio_util::sync::CancellationToken;
use tracing::debug;

use crate::backend::balancer;
use crate::context::Shared;
use crate::runtime::shutdown::Phases;

/// A session without a datagram either way for this long ends.
pub(crate) const IDLE: Duration = Duration::from_secs(60);

/// The most sessions one socket keeps on one worker; datagrams of new clients beyond it
/// are dropped until sessions end.
const MAX_SESSIONS: usize = 16 * 1024;

/// The largest datagram relayed (the UDP maximum).
const MAX_DATAGRAM: usize = 64 * 1024;

/// One client's relay.
struct Session {
    upstream: Arc<UdpSocket>,
    /// Milliseconds since `epoch` of the last datagram either way.
    last: Arc<AtomicU64>,
    replies: tokio::task::JoinHandle<()>,
    /// The backend (index in the snapshot it was drawn on) and endpoint, released when the
    /// session is dropped.
    _release: Release,
}

/// Gives back the endpoint a session counted in flight.
struct Release {
    snapshot: crate::snapshot::SnapshotRef,
    backend: usize,
    endpoint: usize,
}

impl Drop for Release {
    fn drop(&mut self) {
        if let Some(state) = self.snapshot.backends.get(self.backend) {
            state.balancer.release(self.endpoint);
        }
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        self.replies.abort();
    }
}

/// Relays the datagrams of UDP socket `addr` until it is closed or the proxy stops.
pub(crate) async fn serve(
    socket: UdpSocket,
    addr: SocketAddr,
    shared: Arc<Shared>,
    closed: CancellationToken,
    phases: Phases,
) {
    let socket = Arc::new(socket);
    let epoch = Instant::now();
    let mut sessions: HashMap<SocketAddr, Session> = HashMap::new();
    let mut buf = vec![0u8; MAX_DATAGRAM];
    let mut sweep = tokio::time::interval(IDLE / 4);
    loop {
        let (n, peer) = tokio::select! {
            () = closed.cancelled() => break,
            () = phases.stop_accepting.cancelled() => break,
            _ = sweep.tick() => {
                let now = millis(epoch);
                let idle = IDLE.as_millis() as u64;
                sessions.retain(|_, s| now.saturating_sub(s.last.load(Ordering::Relaxed)) < idle);
                continue;
            }
            received = socket.recv_from(&mut buf) => match received {
                Ok(received) => received,
                Err(error) => {
                    debug!(%addr, %error, "UDP receive failed");
                    continue;
                }
            },
        };
        if !sessions.contains_key(&peer) {
            if sessions.len() >= MAX_SESSIONS {
                continue;
            }
            let Some(session) = open(&shared, &socket, addr, peer, epoch).await else {
                continue;
            };
            sessions.insert(peer, session);
        }
        let Some(session) = sessions.get(&peer) else {
            continue;
        };
        session.last.store(millis(epoch), Ordering::Relaxed);
        if let Err(error) = session.upstream.send(&buf[..n]).await {
            debug!(%peer, %error, "UDP relay to the backend failed");
        }
    }
}

/// A session for `peer` on socket `addr`: the route's backend drawn, an endpoint picked and
/// an upstream socket connected to it, its replies relayed back. `None`: no route, no
/// usable backend or endpoint (the datagram is dropped).
async fn open(
    shared: &Arc<Shared>,
    socket: &Arc<UdpSocket>,
    addr: SocketAddr,
    peer: SocketAddr,
    epoch: Instant,
) -> Option<Session> {
    let snapshot = shared.table.snapshot();
    let target = snapshot.table.stream_target(addr, None)?;
    let drawn = crate::pipeline::route::draw(&target.split).filter(|b| b.usable)?;
    let backend = drawn.backend.id;
    let state = snapshot.backends.get(backend)?;
    let endpoint = state
        .balancer
        .pick(&[], balancer::now_millis(Instant::now()))?;
    let release = Release {
        snapshot: snapshot.clone(),
        backend,
        endpoint,
    };
    let to = state.balancer.get(endpoint).addr;
    let local = if to.is_ipv4() {
        SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), 0)
    } else {
        SocketAddr::new(IpAddr::V6(Ipv6Addr::UNSPECIFIED), 0)
    };
    let upstream = match UdpSocket::bind(local).await {
        Ok(upstream) => upstream,
        Err(error) => {
            debug!(%error, "UDP upstream socket");
            return None;
        }
    };
    if let Err(error) = upstream.connect(to).await {
        debug!(upstream = %to, %error, "UDP upstream connect failed");
        return None;
    }
    state
        .metrics
        .count_stream(crate::observe::metrics::StreamTransport::Udp);
    let upstream = Arc::new(upstream);
    let last = Arc::new(AtomicU64::new(millis(epoch)));
    let replies = tokio::spawn(relay_replies(
        Arc::clone(&upstream),
        Arc::clone(socket),
        peer,
        Arc::clone(&last),
        epoch,
    ));
    Some(Session {
        upstream,
        last,
        replies,
        _release: release,
    })
}

/// Sends what the backend answers back to `peer` from the listening socket.
async fn relay_replies(
    upstream: Arc<UdpSocket>,
    socket: Arc<UdpSocket>,
    peer: SocketAddr,
    last: Arc<AtomicU64>,
    epoch: Instant,
) {
    let mut buf = vec![0u8; MAX_DATAGRAM];
    loop {
        let n = match upstream.recv(&mut buf).await {
            Ok(n) => n,
            // The backend's port refused a datagram (ICMP); later ones may get through.
            Err(error) => {
                debug!(%peer, %error, "UDP backend receive failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        last.store(millis(epoch), Ordering::Relaxed);
        if let Err(error) = socket.send_to(&buf[..n], peer).await {
            debug!(%peer, %error, "UDP reply to the client failed");
        }
    }
}

fn millis(epoch: Instant) -> u64 {
    u64::try_from(epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
}

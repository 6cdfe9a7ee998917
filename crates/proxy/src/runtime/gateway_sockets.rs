//! The sockets of Gateways that have addresses of their own (`spec.addresses`, or one from
//! `--gateway-address-pool`): one per address and listener port, bound when a routing table
//! names it and closed when a table no longer does. Each worker accepts on its own copy
//! (`SO_REUSEPORT`, as for the proxy's own listeners); a connection remembers the socket it
//! came in on, and only that Gateway's routes answer it (the routing table's
//! `gateway_sockets`).
//!
//! Binding happens on the control path, when a table is installed, so a failure is known at
//! once and reaches the Gateway's status (`Programmed=False`, `AddressNotUsable`).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Mutex;

use sluice_routing::SocketKind;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::runtime::bind;

/// A bound socket handed to one worker (or to the shared accept task).
#[derive(Debug)]
pub(crate) struct NewSocket {
    /// The address it is bound to: what requests on it are routed by.
    pub(crate) addr: SocketAddr,
    pub(crate) socket: Socket,
    /// What it speaks.
    pub(crate) kind: SocketKind,
    /// Cancelled when the socket is no longer wanted: its accept loop ends (connections
    /// already accepted finish).
    pub(crate) closed: CancellationToken,
}

/// A bound socket of either transport.
#[derive(Debug)]
pub(crate) enum Socket {
    /// HTTP, HTTPS, TCP and TLS listeners.
    Tcp(std::net::TcpListener),
    /// UDP listeners.
    Udp(std::net::UdpSocket),
}

/// One bound address.
#[derive(Debug)]
struct Bound {
    kind: SocketKind,
    closed: CancellationToken,
}

/// The Gateway sockets of one proxy, and where new ones go.
#[derive(Debug)]
pub(crate) struct GatewaySockets {
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    bound: BTreeMap<SocketAddr, Bound>,
    /// One per worker (one in all without `--workers`).
    accepters: Vec<mpsc::UnboundedSender<NewSocket>>,
}

/// Sockets that could not be bound, with why (the operating system's words).
pub type BindFailures = BTreeMap<SocketAddr, String>;

impl GatewaySockets {
    /// Sockets for `accepters` accept loops; the receivers go to them.
    pub(crate) fn new(
        accepters: usize,
    ) -> (GatewaySockets, Vec<mpsc::UnboundedReceiver<NewSocket>>) {
        let (senders, receivers) = (0..accepters.max(1))
            .map(|_| mpsc::unbounded_channel())
            .unzip();
        (
            GatewaySockets {
                state: Mutex::new(State {
                    bound: BTreeMap::new(),
                    accepters: senders,
                }),
            },
            receivers,
        )
    }

    /// Binds what `wanted` (address, what it speaks) names and is not bound yet, closes
    /// what is bound and no longer wanted; returns what could not be bound. A socket that
    /// failed is tried again on the next call.
    pub(crate) fn reconcile(&self, wanted: &[(SocketAddr, SocketKind)]) -> BindFailures {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let wanted: BTreeMap<SocketAddr, SocketKind> = wanted.iter().copied().collect();
        state.bound.retain(|addr, bound| {
            let keep = wanted.get(addr) == Some(&bound.kind);
            if !keep {
                info!(%addr, "Gateway socket closed");
                bound.closed.cancel();
            }
            keep
        });
        let mut failures = BindFailures::new();
        for (addr, kind) in wanted {
            if state.bound.contains_key(&addr) {
                continue;
            }
            let count = state.accepters.len();
            let bound = if kind == SocketKind::Udp {
                bind::bind_many_udp(addr, count)
                    .map(|all| all.into_iter().map(Socket::Udp).collect::<Vec<_>>())
            } else {
                bind::bind_many(addr, count)
                    .map(|all| all.into_iter().map(Socket::Tcp).collect::<Vec<_>>())
            };
            let sockets = match bound {
                Ok(sockets) => sockets,
                Err(error) => {
                    warn!(%addr, %error, "Gateway socket cannot be bound");
                    let why = if error.kind() == std::io::ErrorKind::AddrInUse {
                        // The proxy's own listener on 0.0.0.0 holds the port on every
                        // address too.
                        format!(
                            "port {} is in use on that address (by another process, or by \
                             this proxy's own listener on 0.0.0.0 or ::: bind --http-addr and \
                             --https-addr to the node's address)",
                            addr.port()
                        )
                    } else {
                        error.to_string()
                    };
                    failures.insert(addr, why);
                    continue;
                }
            };
            let closed = CancellationToken::new();
            for (socket, accepter) in sockets.into_iter().zip(&state.accepters) {
                // A closed channel: the proxy is shutting down; nothing to serve.
                let _ = accepter.send(NewSocket {
                    addr,
                    socket,
                    kind,
                    closed: closed.clone(),
                });
            }
            info!(%addr, ?kind, "Gateway socket bound");
            state.bound.insert(addr, Bound { kind, closed });
        }
        failures
    }
}

impl Drop for GatewaySockets {
    fn drop(&mut self) {
        let state = self.state.get_mut().unwrap_or_else(|e| e.into_inner());
        for bound in state.bound.values() {
            bound.closed.cancel();
        }
    }
}

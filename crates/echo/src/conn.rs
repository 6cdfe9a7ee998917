//! What a request handler knows of its connection.

use std::net::SocketAddr;
use std::sync::Arc;

use tokio::sync::watch;

use crate::Identity;
use crate::lifecycle::{Phase, TaskGuard};

/// Per-connection facts a request handler needs.
#[derive(Clone, Debug)]
pub(crate) struct Conn {
    /// Who we are.
    pub(crate) identity: Arc<Identity>,
    /// The TCP peer of this connection.
    pub(crate) peer: SocketAddr,
    /// Server phase, so long-lived work (delays, WebSockets) can stop.
    pub(crate) phase: watch::Receiver<Phase>,
    /// Keeps the server's drain waiting while this request is alive.
    pub(crate) guard: TaskGuard,
}

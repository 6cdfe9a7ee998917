//! The server's shutdown phases, broadcast to every connection and WebSocket
//! task so they can finish politely (drain) or stop at once (stopped).

use tokio::sync::{mpsc, watch};

/// Where the server is in its life; only ever moves forward.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Phase {
    /// Accepting and serving.
    Serving,
    /// No longer accepting: finish in-flight work, close idle connections.
    Draining,
    /// Drain time is over: drop everything now.
    Stopped,
}

/// Waits until the phase reaches at least `target`. A dropped sender means the
/// server itself is gone, which counts as [`Phase::Stopped`].
pub(crate) async fn reached(rx: &mut watch::Receiver<Phase>, target: Phase) -> Phase {
    match rx.wait_for(|phase| *phase >= target).await {
        Ok(phase) => *phase,
        Err(_) => Phase::Stopped,
    }
}

/// Held by every connection and WebSocket task; the server knows all work is
/// done when every clone has been dropped (the receiver then yields `None`).
#[derive(Clone, Debug)]
pub(crate) struct TaskGuard {
    _alive: mpsc::Sender<()>,
}

/// Creates a guard and the receiver that completes once all guard clones are gone.
pub(crate) fn task_guard() -> (TaskGuard, mpsc::Receiver<()>) {
    let (tx, rx) = mpsc::channel(1);
    (TaskGuard { _alive: tx }, rx)
}

//! Graceful shutdown: stop accepting, let connections finish what they are doing, and cut
//! whatever is left once the drain timeout is over.
//!
//! hyper-util's `GracefulShutdown` only knows "shut down now"; connections here also close
//! themselves when idle, so each connection task watches these tokens itself and calls
//! hyper's `graceful_shutdown` for either reason.

use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{info, warn};

/// The shutdown phases every listener and connection task watches.
#[derive(Clone, Debug, Default)]
pub(crate) struct Phases {
    /// Accept loops stop (and drop their listeners).
    pub(crate) stop_accepting: CancellationToken,
    /// Connections finish their in-flight requests, then close (HTTP/2: GOAWAY).
    pub(crate) drain: CancellationToken,
    /// Connections still open are dropped.
    pub(crate) force: CancellationToken,
}

/// Runs the shutdown sequence: stop accepting, drain for at most `timeout`, then force.
///
/// `connections` tracks connection tasks, `tunnels` upgraded connections (closed via
/// `tunnels_stop` when forcing).
pub(crate) async fn drain(
    phases: &Phases,
    connections: &TaskTracker,
    tunnels: &TaskTracker,
    tunnels_stop: &CancellationToken,
    timeout: Duration,
) {
    phases.stop_accepting.cancel();
    phases.drain.cancel();
    connections.close();
    tunnels.close();
    info!(
        connections = connections.len(),
        tunnels = tunnels.len(),
        "draining"
    );
    let all_done = async {
        connections.wait().await;
        tunnels.wait().await;
    };
    if tokio::time::timeout(timeout, all_done).await.is_err() {
        warn!(
            connections = connections.len(),
            tunnels = tunnels.len(),
            "drain timeout reached; closing the rest"
        );
        phases.force.cancel();
        tunnels_stop.cancel();
        // Every task reacts at its next poll; the bound only guards against a stuck one.
        let _ = tokio::time::timeout(Duration::from_secs(1), async {
            connections.wait().await;
            tunnels.wait().await;
        })
        .await;
    }
    info!("drained");
}

//! The accept loop: one task per connection, HTTP/1 and h2c on the same port,
//! and a bounded graceful shutdown.

use std::future::Future;
use std::io;
use std::sync::Arc;
use std::time::Duration;

use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tracing::{debug, warn};

use crate::Identity;
use crate::conn::Conn;
use crate::handler;
use crate::lifecycle::{self, Phase};

/// How long [`serve`] lets in-flight requests and WebSockets finish after the
/// shutdown signal before cutting them off.
pub const DRAIN_TIMEOUT: Duration = Duration::from_secs(5);

/// Pause after a failed `accept` (e.g. out of file descriptors) so a
/// persistent error does not spin a core.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);

/// Serves the echo backend on `listener` until `shutdown` completes.
///
/// Then it stops accepting, lets in-flight requests finish and asks
/// WebSockets to close, for at most [`DRAIN_TIMEOUT`]; whatever is left after
/// that is dropped. Idle keep-alive connections close at once. Dropping the
/// returned future instead stops every connection task immediately.
///
/// Accept errors are logged and retried, so in practice this returns `Ok`.
pub async fn serve(
    listener: TcpListener,
    identity: Identity,
    shutdown: impl Future<Output = ()>,
) -> io::Result<()> {
    let identity = Arc::new(identity);
    let (phase_tx, _) = watch::channel(Phase::Serving);
    let (guard, mut all_done) = lifecycle::task_guard();
    let builder = builder();

    tokio::pin!(shutdown);
    loop {
        let accepted = tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => accepted,
        };
        let (stream, peer) = match accepted {
            Ok(accepted) => accepted,
            Err(e) => {
                warn!(error = %e, "accept failed");
                tokio::time::sleep(ACCEPT_BACKOFF).await;
                continue;
            }
        };
        let conn = Conn {
            identity: Arc::clone(&identity),
            peer,
            phase: phase_tx.subscribe(),
            guard: guard.clone(),
        };
        tokio::spawn(serve_connection(builder.clone(), stream, conn));
    }

    // Refuse new connections right away rather than leaving them in the backlog.
    drop(listener);
    drop(guard);
    phase_tx.send_replace(Phase::Draining);
    if tokio::time::timeout(DRAIN_TIMEOUT, all_done.recv())
        .await
        .is_err()
    {
        debug!("drain timed out; dropping remaining connections");
        phase_tx.send_replace(Phase::Stopped);
        // Every task reacts to Stopped at its next poll; the bound is only a
        // safety net against a task stuck outside our control.
        let _ = tokio::time::timeout(Duration::from_secs(1), all_done.recv()).await;
    }
    Ok(())
}

/// HTTP/1 and HTTP/2 settings shared by all connections.
fn builder() -> auto::Builder<TokioExecutor> {
    let mut builder = auto::Builder::new(TokioExecutor::new());
    // The timer enables hyper's default header-read timeout, so a client that
    // opens a connection and never finishes its request head is dropped.
    builder.http1().timer(TokioTimer::new());
    builder.http2().timer(TokioTimer::new());
    builder
}

/// Drives one connection until it ends or the server stops it.
async fn serve_connection(builder: auto::Builder<TokioExecutor>, stream: TcpStream, conn: Conn) {
    // Small echo responses should not wait for Nagle.
    let _ = stream.set_nodelay(true);
    let peer = conn.peer;
    let mut phase = conn.phase.clone();
    let conn = Arc::new(conn);
    let service = service_fn(move |req| handler::handle(req, Arc::clone(&conn)));
    let connection = builder.serve_connection_with_upgrades(TokioIo::new(stream), service);
    tokio::pin!(connection);

    let mut target = Phase::Draining;
    loop {
        tokio::select! {
            result = connection.as_mut() => {
                if let Err(e) = result {
                    debug!(%peer, error = %e, "connection ended with error");
                }
                return;
            }
            reached = lifecycle::reached(&mut phase, target) => {
                if reached == Phase::Stopped {
                    return;
                }
                // Finish the in-flight request, then close (HTTP/1), or send
                // GOAWAY (HTTP/2); wait for the real end or for Stopped.
                connection.as_mut().graceful_shutdown();
                target = Phase::Stopped;
            }
        }
    }
}

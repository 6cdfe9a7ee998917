//! Protocol upgrades (WebSocket over HTTP/1.1): once both sides agreed on `101 Switching
//! Protocols`, the two upgraded connections are joined byte for byte.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use hyper::upgrade::OnUpgrade;
use hyper_util::rt::TokioIo;
use tokio::io::AsyncWriteExt as _;
use tracing::debug;

use crate::backend::pool::Conn;
use crate::context::Shared;
use crate::front::activity::ActivityIo;

/// Spawns the tunnel between the client's upgraded connection and the upstream connection
/// that answered 101.
///
/// The client side upgrades once hyper has written our 101 response; bytes the upstream
/// sent right behind its 101 are delivered first. The tunnel ends when either side closes,
/// when no byte moved either way for `--websocket-idle-timeout` (nginx closes an idle
/// upgraded connection after `proxy_read_timeout`), or when the proxy shuts down past its
/// drain timeout. Both connections are closed with it.
pub(crate) fn bridge(shared: &Shared, client: OnUpgrade, upstream: Conn) {
    let stop = shared.tunnels_stop.clone();
    let idle = shared.websocket_idle_timeout;
    let activity = Arc::new(AtomicU64::new(0));
    let moved = Arc::clone(&activity);
    shared.tunnels.spawn(async move {
        let tunnel = async {
            let Conn {
                stream: upstream,
                buf: early,
                ..
            } = upstream;
            let mut client = ActivityIo::new(TokioIo::new(client.await?), Arc::clone(&moved), None);
            if !early.is_empty() {
                client.write_all(&early).await?;
            }
            let mut upstream = ActivityIo::new(upstream, moved, None);
            let (up, down) = tokio::io::copy_bidirectional(&mut client, &mut upstream).await?;
            Ok::<_, Box<dyn std::error::Error + Send + Sync>>((up, down))
        };
        let idle_check = async {
            let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + idle, idle);
            let mut seen = activity.load(Ordering::Relaxed);
            loop {
                tick.tick().await;
                let now = activity.load(Ordering::Relaxed);
                if now == seen {
                    return;
                }
                seen = now;
            }
        };
        tokio::select! {
            result = tunnel => match result {
                Ok((up, down)) => debug!(up, down, "upgraded connection closed"),
                Err(error) => debug!(%error, "upgraded connection failed"),
            },
            () = idle_check => debug!("upgraded connection idle: closed"),
            () = stop.cancelled() => debug!("upgraded connection cut by shutdown"),
        }
    });
}

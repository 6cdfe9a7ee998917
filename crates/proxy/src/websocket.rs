//! Protocol upgrades (WebSocket over HTTP/1.1): once both sides agreed on `101 Switching
//! Protocols`, the two upgraded connections are joined byte for byte.

use hyper::upgrade::OnUpgrade;
use hyper_util::rt::TokioIo;
use tokio::io::AsyncWriteExt as _;
use tracing::debug;

use crate::handler::Shared;
use crate::pool::Conn;

/// Spawns the tunnel between the client's upgraded connection and the upstream connection
/// that answered 101.
///
/// The client side upgrades once hyper has written our 101 response; bytes the upstream
/// sent right behind its 101 are delivered first. The tunnel ends when either side closes,
/// or when the proxy shuts down past its drain timeout.
pub(crate) fn bridge(shared: &Shared, client: OnUpgrade, upstream: Conn) {
    let stop = shared.tunnels_stop.clone();
    shared.tunnels.spawn(async move {
        let tunnel = async {
            let Conn {
                stream: mut upstream,
                buf: early,
                ..
            } = upstream;
            let mut client = TokioIo::new(client.await?);
            if !early.is_empty() {
                client.write_all(&early).await?;
            }
            let (up, down) = tokio::io::copy_bidirectional(&mut client, &mut upstream).await?;
            Ok::<_, Box<dyn std::error::Error + Send + Sync>>((up, down))
        };
        tokio::select! {
            result = tunnel => match result {
                Ok((up, down)) => debug!(up, down, "upgraded connection closed"),
                Err(error) => debug!(%error, "upgraded connection failed"),
            },
            () = stop.cancelled() => debug!("upgraded connection cut by shutdown"),
        }
    });
}

//! Protocol upgrades (WebSocket over HTTP/1.1): once both sides agreed on `101 Switching
//! Protocols`, the two upgraded connections are joined byte for byte.

use hyper::upgrade::OnUpgrade;
use hyper_util::rt::TokioIo;
use tracing::debug;

use crate::handler::Shared;

/// Spawns the tunnel between the client's and the upstream's upgraded connections.
///
/// The client side upgrades once hyper has written our 101 response; the upstream side is
/// ready as soon as its 101 arrived. The tunnel ends when either side closes, or when the
/// proxy shuts down past its drain timeout.
pub(crate) fn bridge(shared: &Shared, client: OnUpgrade, upstream: OnUpgrade) {
    let stop = shared.tunnels_stop.clone();
    shared.tunnels.spawn(async move {
        let tunnel = async {
            let (client, upstream) = tokio::try_join!(client, upstream)?;
            let mut client = TokioIo::new(client);
            let mut upstream = TokioIo::new(upstream);
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

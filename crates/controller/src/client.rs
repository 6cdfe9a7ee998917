//! Connecting to a cluster: `--kubeconfig`, else `KUBECONFIG`, else `~/.kube/config`, else
//! the in-cluster service account.

use anyhow::Context;
use std::path::Path;
use std::time::Duration;

/// Longest silence on a request before the connection is given up: a watch hears at least
/// its own end every 60 s.
pub const READ_TIMEOUT: Duration = Duration::from_secs(75);

/// A client from an explicit kubeconfig file, or kube's usual inference when `None`.
pub async fn client_from(kubeconfig: Option<&Path>) -> anyhow::Result<kube::Client> {
    let config = match kubeconfig {
        Some(path) => {
            let kc = kube::config::Kubeconfig::read_from(path)
                .with_context(|| format!("--kubeconfig {}", path.display()))?;
            kube::Config::from_custom_kubeconfig(kc, &Default::default())
                .await
                .with_context(|| format!("--kubeconfig {}", path.display()))?
        }
        None => kube::Config::infer()
            .await
            .context("no kubeconfig (KUBECONFIG, ~/.kube/config) and not running in a cluster")?,
    };
    let mut config = config;
    // Watches end after sluice_informer::list_watch::WATCH_TIMEOUT_SECS on the server side; a
    // read that stays silent well past that means a dead connection (kube's default of 295 s
    // would leave routes stale for five minutes).
    config.read_timeout = Some(READ_TIMEOUT);
    Ok(kube::Client::try_from(config)?)
}

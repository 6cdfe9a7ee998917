//! Connecting to a cluster: `--kubeconfig`, else `KUBECONFIG`, else `~/.kube/config`, else
//! the in-cluster service account.

use anyhow::Context;
use std::path::Path;

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
    Ok(kube::Client::try_from(config)?)
}

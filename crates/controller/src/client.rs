//! Connecting to a cluster: `--kubeconfig`, else `KUBECONFIG`, else `~/.kube/config`, else
//! the in-cluster service account (the toolkit's [`sluice_informer::client`]).

use std::path::Path;

pub use sluice_informer::client::READ_TIMEOUT;

/// A client from an explicit kubeconfig file, or kube's usual inference when `None`.
pub async fn client_from(kubeconfig: Option<&Path>) -> anyhow::Result<kube::Client> {
    Ok(sluice_informer::client::client_from(kubeconfig).await?)
}

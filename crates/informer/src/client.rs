//! Connecting to a cluster: an explicit kubeconfig file, else kube's inference (`KUBECONFIG`,
//! `~/.kube/config`, the in-cluster ServiceAccount), with a read timeout that suits watches.

use std::{path::Path, time::Duration};

/// Longest silence on a request before the connection is given up: a watch hears at least
/// its own end every [`crate::list_watch::WATCH_TIMEOUT_SECS`].
pub const READ_TIMEOUT: Duration = Duration::from_secs(75);

/// Why no client could be built.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The kubeconfig file given could not be read or used.
    #[error("--kubeconfig {path}: {source}")]
    Kubeconfig {
        /// The file.
        path: String,
        /// What is wrong with it.
        #[source]
        source: kube::config::KubeconfigError,
    },
    /// No file given, none found, and not in a cluster.
    #[error("no kubeconfig (KUBECONFIG, ~/.kube/config) and not running in a cluster: {0}")]
    Infer(#[source] kube::config::InferConfigError),
    /// The configuration was read but the client could not be built.
    #[error("building the client: {0}")]
    Client(#[from] kube::Error),
}

/// A client from the kubeconfig file `kubeconfig`, or kube's usual inference when `None`,
/// whose reads time out after [`READ_TIMEOUT`] of silence.
pub async fn client_from(kubeconfig: Option<&Path>) -> Result<kube::Client, ClientError> {
    Ok(kube::Client::try_from(config_from(kubeconfig).await?)?)
}

/// The configuration [`client_from`] builds its client from (the API server's URL is its
/// `cluster_url`).
pub async fn config_from(kubeconfig: Option<&Path>) -> Result<kube::Config, ClientError> {
    let mut config = match kubeconfig {
        Some(path) => {
            let error = |source| ClientError::Kubeconfig {
                path: path.display().to_string(),
                source,
            };
            let kc = kube::config::Kubeconfig::read_from(path).map_err(error)?;
            kube::Config::from_custom_kubeconfig(kc, &Default::default())
                .await
                .map_err(error)?
        }
        None => kube::Config::infer().await.map_err(ClientError::Infer)?,
    };
    // Watches end after WATCH_TIMEOUT_SECS on the server side; a read that stays silent well
    // past that means a dead connection (kube's default of 295 s would leave caches stale for
    // five minutes).
    config.read_timeout = Some(READ_TIMEOUT);
    Ok(config)
}

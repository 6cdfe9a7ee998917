//! Connecting to the API server: the flag, then kube's usual inference.

use crate::IngressManagerArgs;

/// A client for `args`: the kubeconfig file of `--kubeconfig` when given, else
/// `$KUBECONFIG`, `~/.kube/config`, then the in-cluster ServiceAccount.
pub async fn client_from(args: &IngressManagerArgs) -> anyhow::Result<kube::Client> {
    Ok(sluice_informer::client::client_from(args.kubeconfig.as_deref()).await?)
}

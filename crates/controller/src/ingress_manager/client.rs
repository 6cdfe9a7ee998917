//! Connecting to the API server: the flag, then kube's usual inference.

use super::IngressManagerArgs;

/// A client for `args`: the kubeconfig file of `--kubeconfig` when given, else
/// `$KUBECONFIG`, `~/.kube/config`, then the in-cluster ServiceAccount.
pub async fn client_from(args: &IngressManagerArgs) -> anyhow::Result<kube::Client> {
    crate::client::client_from(args.kubeconfig.as_deref()).await
}

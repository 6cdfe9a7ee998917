//! Connecting to a cluster: `--kubeconfig`, else `KUBECONFIG`, else `~/.kube/config`, else
//! the in-cluster service account (the toolkit's [`sluice_informer::client`]).

use std::path::Path;

use kube::Api;
use kube::api::ListParams;
use serde::de::DeserializeOwned;

pub use sluice_informer::client::READ_TIMEOUT;

/// A client from an explicit kubeconfig file, or kube's usual inference when `None`.
pub async fn client_from(kubeconfig: Option<&Path>) -> anyhow::Result<kube::Client> {
    Ok(sluice_informer::client::client_from(kubeconfig).await?)
}

/// Every object of `api`, page by page (500 per request).
pub(crate) async fn list_all<K>(api: &Api<K>) -> kube::Result<Vec<K>>
where
    K: Clone + DeserializeOwned + std::fmt::Debug,
{
    let mut items = Vec::new();
    let mut params = ListParams::default().limit(500);
    loop {
        let page = api.list(&params).await?;
        items.extend(page.items);
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(token) => params = params.continue_token(&token),
            None => break,
        }
    }
    Ok(items)
}

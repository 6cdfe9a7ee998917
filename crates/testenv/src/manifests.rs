//! Applying YAML manifests (e.g. the project's `deploy/` files): kinds resolved by
//! discovery, each object created, or replaced when it exists, as `kubectl create`/`replace`
//! would.

use anyhow::Context;
use kube::api::{Api, DynamicObject, PostParams};
use kube::core::GroupVersionKind;
use kube::discovery::Scope;

/// Creates or replaces every document of `yaml` (multi-document) with `client`.
pub async fn apply_yaml(client: &kube::Client, yaml: &str) -> anyhow::Result<()> {
    apply(client, yaml, false).await
}

/// Like [`apply_yaml`], but the API server only validates (`dryRun=All`): proof that a
/// manifest is accepted, without creating it.
pub async fn validate_yaml(client: &kube::Client, yaml: &str) -> anyhow::Result<()> {
    apply(client, yaml, true).await
}

async fn apply(client: &kube::Client, yaml: &str, dry_run: bool) -> anyhow::Result<()> {
    let pp = PostParams {
        dry_run,
        ..Default::default()
    };
    for doc in yaml_serde::Deserializer::from_str(yaml) {
        let value: yaml_serde::Value = serde::Deserialize::deserialize(doc)?;
        if value.is_null() {
            continue;
        }
        let obj: DynamicObject =
            yaml_serde::from_value(value).context("manifest is not an object")?;
        let types = obj
            .types
            .clone()
            .context("manifest has no apiVersion/kind")?;
        let gvk = GroupVersionKind::try_from(&types)?;
        let (resource, caps) = kube::discovery::pinned_kind(client, &gvk)
            .await
            .with_context(|| format!("discover {}/{}", types.api_version, types.kind))?;
        let name = obj
            .metadata
            .name
            .clone()
            .context("manifest has no metadata.name")?;
        let api: Api<DynamicObject> = match caps.scope {
            Scope::Cluster => Api::all_with(client.clone(), &resource),
            Scope::Namespaced => Api::namespaced_with(
                client.clone(),
                obj.metadata.namespace.as_deref().unwrap_or("default"),
                &resource,
            ),
        };
        let what = || format!("apply {} {name}", types.kind);
        match api.create(&pp, &obj).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 409 => {
                let current = api.get(&name).await.with_context(what)?;
                let mut obj = obj;
                obj.metadata.resource_version = current.metadata.resource_version;
                api.replace(&name, &pp, &obj).await.with_context(what)?;
            }
            Err(e) => return Err(anyhow::Error::new(e).context(what())),
        }
    }
    Ok(())
}

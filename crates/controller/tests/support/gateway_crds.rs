//! The Gateway API CRDs of `deploy/gateway-api`, installed on a test API server.

use serde_json::Value;
use std::time::Duration;

use super::World;

const CRDS: [&str; 4] = [
    include_str!("../../../../deploy/gateway-api/gatewayclasses.yaml"),
    include_str!("../../../../deploy/gateway-api/gateways.yaml"),
    include_str!("../../../../deploy/gateway-api/httproutes.yaml"),
    include_str!("../../../../deploy/gateway-api/referencegrants.yaml"),
];

/// Removes CEL rules, which a v1.20 API server does not know (see deploy/gateway-api).
pub fn strip_cel(value: &mut Value) {
    match value {
        Value::Object(map) => {
            map.remove("x-kubernetes-validations");
            map.values_mut().for_each(strip_cel);
        }
        Value::Array(list) => list.iter_mut().for_each(strip_cel),
        _ => {}
    }
}

static CRDS_INSTALLED: tokio::sync::OnceCell<()> = tokio::sync::OnceCell::const_new();

/// Installs the four CRDs once per test binary and waits until discovery serves them.
pub async fn install_crds(world: &World) -> anyhow::Result<()> {
    CRDS_INSTALLED
        .get_or_try_init(|| async {
            for crd in CRDS {
                let mut value: Value = yaml_serde::from_str(crd)?;
                strip_cel(&mut value);
                sluice_testenv::apply_yaml(&world.admin, &yaml_serde::to_string(&value)?).await?;
            }
            let admin = world.admin.clone();
            sluice_testenv::eventually(Duration::from_secs(30), "Gateway API CRDs served", || {
                let admin = admin.clone();
                async move {
                    sluice_controller::cluster::gateway_api_served(&admin)
                        .await
                        .ok()?
                        .then_some(())
                }
            })
            .await
        })
        .await?;
    Ok(())
}

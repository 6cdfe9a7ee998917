//! The Gateway API CRDs of `deploy/gateway-api`, installed on a test API server.

use std::time::Duration;

use super::World;

const CRDS: [&str; 10] = [
    include_str!("../../../../deploy/gateway-api/gatewayclasses.yaml"),
    include_str!("../../../../deploy/gateway-api/gateways.yaml"),
    include_str!("../../../../deploy/gateway-api/httproutes.yaml"),
    include_str!("../../../../deploy/gateway-api/grpcroutes.yaml"),
    include_str!("../../../../deploy/gateway-api/tcproutes.yaml"),
    include_str!("../../../../deploy/gateway-api/tlsroutes.yaml"),
    include_str!("../../../../deploy/gateway-api/udproutes.yaml"),
    include_str!("../../../../deploy/gateway-api/referencegrants.yaml"),
    include_str!("../../../../deploy/gateway-api/backendtlspolicies.yaml"),
    include_str!("../../../../deploy/gateway-api/listenersets.yaml"),
];

static CRDS_INSTALLED: tokio::sync::OnceCell<()> = tokio::sync::OnceCell::const_new();

/// Installs the CRDs once per test binary and waits until discovery serves them.
pub async fn install_crds(world: &World) -> anyhow::Result<()> {
    CRDS_INSTALLED
        .get_or_try_init(|| async {
            // As they are, CEL validation rules included.
            for crd in CRDS {
                sluice_testenv::apply_yaml(&world.admin, crd).await?;
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

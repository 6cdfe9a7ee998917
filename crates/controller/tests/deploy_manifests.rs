//! The deploy/ manifests are accepted by a real API server (dry run), and the controller's
//! flags in them parse.

use clap::Parser;
use sluice_controller::cluster::ControllerArgs;
use sluice_testenv::ControlPlane;

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    args: ControllerArgs,
}

const FILES: [(&str, &str); 5] = [
    (
        "namespace.yaml",
        include_str!("../../../deploy/namespace.yaml"),
    ),
    ("rbac.yaml", include_str!("../../../deploy/rbac.yaml")),
    (
        "ingressclass.yaml",
        include_str!("../../../deploy/ingressclass.yaml"),
    ),
    (
        "daemonset.yaml",
        include_str!("../../../deploy/daemonset.yaml"),
    ),
    (
        "deployment.yaml",
        include_str!("../../../deploy/deployment.yaml"),
    ),
];

#[tokio::test]
async fn deploy_manifests_are_accepted_and_their_flags_parse() -> anyhow::Result<()> {
    let cp = ControlPlane::shared().await?;
    let client = cp.client();
    // The namespace must exist for a dry run of namespaced objects.
    sluice_testenv::apply_yaml(&client, FILES[0].1).await?;
    for (name, yaml) in FILES {
        sluice_testenv::validate_yaml(&client, yaml)
            .await
            .map_err(|e| e.context(format!("deploy/{name}")))?;
    }
    for (name, yaml) in &FILES[3..] {
        let docs: Vec<serde_yaml::Value> = serde_yaml::Deserializer::from_str(yaml)
            .map(serde::Deserialize::deserialize)
            .collect::<Result<_, _>>()?;
        let workload = docs
            .iter()
            .find(|d| d["kind"] == "DaemonSet" || d["kind"] == "Deployment")
            .ok_or_else(|| anyhow::anyhow!("{name}: no workload"))?;
        let args: Vec<String> = serde_yaml::from_value(
            workload["spec"]["template"]["spec"]["containers"][0]["args"].clone(),
        )?;
        assert_eq!(
            args.first().map(String::as_str),
            Some("controller"),
            "{name}"
        );
        // `$(HOST_IP)` is expanded by the kubelet; give it a value here.
        let argv = std::iter::once("sluice".to_string()).chain(
            args[1..]
                .iter()
                .filter(|a| !a.starts_with("--log-format"))
                .map(|a| a.replace("$(HOST_IP)", "192.0.2.1")),
        );
        Cli::try_parse_from(argv).map_err(|e| anyhow::anyhow!("deploy/{name}: {e}"))?;
    }
    Ok(())
}

//! Test support for sluice: the envtest of this project.
//!
//! - [`ControlPlane`]: a real etcd + kube-apiserver + kube-controller-manager +
//!   kube-scheduler (v1.37 by default, built from Go modules by `scripts/testenv.sh`) on free
//!   loopback ports. [`ControlPlane::shared`] gives one per
//!   test process; tests separate themselves with [`ControlPlane::create_namespace`].
//! - [`PodHost`]: a pod without a kubelet: a network namespace with a `10.244.K.N` address on
//!   a per-process bridge, a process inside it, and a Pod object marked Running/Ready, so the
//!   controller manager fills EndpointSlices for it.
//! - [`NodeAgent`]: a Node whose pods really run: kube-scheduler binds them, the agent runs
//!   each container as a process in the pod's own network namespace and reports its status,
//!   so Deployments, ReplicaSets and EndpointSlices come from the real controllers.
//!
//! Everything is torn down on every path: values clean up on drop, process-wide resources at
//! exit, children die with the test process (`PR_SET_PDEATHSIG`), and leftovers of a killed
//! run are swept on the next start. Needs root (network namespaces) and Linux.

mod binaries;
mod control_plane;
mod kubelet_api;
mod manifests;
mod netns;
mod network;
mod node_agent;
mod pki;
mod pod_host;
mod ports;
mod supervisor;

pub use binaries::{
    GATEWAY_API_VERSION, KUBE_VERSION, control_plane_bin_dir, gateway_api_binary, kube_version,
    on_path, workspace_binary,
};
pub use control_plane::{CONTROLLERS, ControlPlane, NODE_NAME};
pub use manifests::{apply_yaml, validate_yaml};
pub use netns::NetNs;
pub use network::{Network, sweep_stale, temp_dir};
pub use node_agent::{AGENT_NODE_NAME, NodeAgent};
pub use pod_host::PodHost;
pub use ports::free_port;
pub use supervisor::{Supervised, at_exit};

/// Waits until `check` returns `Some`, polling every 50 ms, for at most `timeout`.
pub async fn eventually<T, F, Fut>(
    timeout: std::time::Duration,
    what: &str,
    mut check: F,
) -> anyhow::Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if let Some(v) = check().await {
            return Ok(v);
        }
        if tokio::time::Instant::now() >= deadline {
            anyhow::bail!("timed out after {timeout:?} waiting for {what}");
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

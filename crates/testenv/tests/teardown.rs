//! A control plane of its own and a pod: after dropping them, no process and no namespace
//! of theirs is left. (The shared control plane is checked by scripts/test.sh after the run.)

use sluice_testenv::{ControlPlane, PodHost};

#[tokio::test]
async fn drop_leaves_nothing_behind() -> anyhow::Result<()> {
    let cp = ControlPlane::start().await?;
    eprintln!("ControlPlane::start() to ready: {:?}", cp.started_in());
    let pids = cp.pids();
    assert_eq!(
        pids.len(),
        4,
        "etcd, kube-apiserver, kube-controller-manager, kube-scheduler"
    );
    let dir = cp.dir().to_path_buf();
    let ns = cp.create_namespace("teardown").await?;
    let pod = PodHost::create(&cp.client(), &ns, "p", &[("app", "p")], &[]).await?;
    let netns = pod.netns().to_string();

    // The API server can be restarted in place.
    cp.restart_apiserver().await?;
    assert_eq!(cp.pids().len(), 4);

    drop(pod);
    let restarted = cp.pids();
    drop(cp);
    for pid in pids.iter().chain(&restarted) {
        assert!(
            !std::path::Path::new(&format!("/proc/{pid}")).exists(),
            "pid {pid} still running"
        );
    }
    assert!(!dir.exists(), "{} left behind", dir.display());
    let listed = std::process::Command::new("ip")
        .args(["netns", "list"])
        .output()?;
    assert!(!String::from_utf8_lossy(&listed.stdout).contains(&netns));
    Ok(())
}

//! Runs every example binary against the control plane and checks what it prints.
//!
//! The binaries are the ones `cargo test -p sluice-informer` builds into `target/*/examples/`
//! (when running a single test target, build them first: `cargo build -p sluice-informer --examples`).

mod support;

use std::{path::PathBuf, process::Stdio, time::Duration};

use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::{
    Api,
    api::{DeleteParams, PostParams},
};
use sluice_testenv::{ControlPlane, NODE_NAME};
use support::*;
use tokio::{
    io::{AsyncBufReadExt, BufReader},
    process::Command,
};

fn example(name: &str) -> PathBuf {
    // target/<profile>/deps/examples-HASH -> target/<profile>/examples/NAME
    let exe = std::env::current_exe().expect("test binary path");
    let dir = exe
        .parent()
        .and_then(|d| d.parent())
        .expect("target dir")
        .join("examples");
    let bin = dir.join(name);
    assert!(
        bin.is_file(),
        "{} missing: run `cargo build -p sluice-informer --examples` (cargo test builds them)",
        bin.display()
    );
    bin
}

fn command(cp: &ControlPlane, name: &str, args: &[&str]) -> Command {
    let mut cmd = Command::new(example(name));
    cmd.args(args)
        .env("KUBECONFIG", cp.kubeconfig_path())
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    cmd
}

async fn run(cp: &ControlPlane, name: &str, args: &[&str]) -> anyhow::Result<String> {
    let out = tokio::time::timeout(WAIT, command(cp, name, args).output()).await??;
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    anyhow::ensure!(
        out.status.success(),
        "{name} failed: {}\nstdout:\n{stdout}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(stdout)
}

async fn fixture(cp: &ControlPlane, prefix: &str) -> anyhow::Result<String> {
    let ns = cp.create_namespace(prefix).await?;
    let pods: Api<Pod> = Api::namespaced(cp.client(), &ns);
    for (name, app, node) in [
        ("p1", "web", Some(NODE_NAME)),
        ("p2", "db", Some(NODE_NAME)),
        ("p3", "web", None),
    ] {
        let mut spec = serde_json::json!({"containers": [{"name": "c", "image": "none"}]});
        if let Some(node) = node {
            spec["nodeName"] = node.into();
        }
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "labels": {"app": app}},
            "spec": spec,
        }))?;
        pods.create(&PostParams::default(), &pod).await?;
    }
    Api::<ConfigMap>::namespaced(cp.client(), &ns)
        .create(&PostParams::default(), &configmap("settings", "x"))
        .await?;
    Ok(ns)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_examples() -> anyhow::Result<()> {
    init_tracing();
    let cp = ControlPlane::shared().await?;
    let ns = fixture(cp, "ex-list").await?;

    let out = run(cp, "rest_get_pods", &["--namespace", &ns]).await?;
    assert!(out.contains(&format!("3 pods in namespace {ns}")), "{out}");
    assert!(out.contains("pod p1 phase=Pending"), "{out}");

    let out = run(cp, "typed_list_pods", &["--namespace", &ns]).await?;
    assert!(out.contains(&format!("3 pods in namespace {ns}")), "{out}");
    assert!(
        out.contains(&format!("pod p2 phase=Pending node={NODE_NAME}")),
        "{out}"
    );

    let out = run(cp, "dynamic_list", &["--namespace", &ns]).await?;
    assert!(
        out.contains(&format!(
            "3 pods in namespace {ns} via /api/v1/namespaces/{ns}/pods"
        )),
        "{out}"
    );
    assert!(
        out.contains("pod p3 phase=Pending (typed from DynamicObject)"),
        "{out}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn informer_examples() -> anyhow::Result<()> {
    init_tracing();
    let cp = ControlPlane::shared().await?;
    let ns = fixture(cp, "ex-inf").await?;

    let out = run(cp, "indexer", &["--namespace", &ns]).await?;
    assert!(
        out.contains(&format!("namespace {ns}: 3 pods: p1,p2,p3")),
        "{out}"
    );
    assert!(
        out.contains(&format!("node {NODE_NAME}: 2 pods: {ns}/p1,{ns}/p2")),
        "{out}"
    );
    assert!(out.contains("unscheduled: 1"), "{out}");

    let out = run(
        cp,
        "factory_lister",
        &["--namespace", &ns, "--selector", "app=web", "--get", "p2"],
    )
    .await?;
    assert!(out.contains("informers in factory: 2"), "{out}");
    assert!(out.contains("synced: true"), "{out}");
    assert!(
        out.contains("pods matching \"app=web\": 2\npod p1\npod p3"),
        "{out}"
    );
    assert!(out.contains("configmap settings keys=1"), "{out}");
    assert!(out.contains("get p2: found"), "{out}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discovery_example_uses_disk_cache_on_second_run() -> anyhow::Result<()> {
    init_tracing();
    let cp = ControlPlane::shared().await?;
    let cache = tempfile::tempdir()?;
    let dir = cache.path().to_str().unwrap_or_default().to_string();
    let first = run(cp, "discovery", &["--cache-dir", &dir, "--ttl", "600"]).await?;
    assert!(first.contains("from cache: false"), "{first}");
    assert!(
        first.contains("core/v1 resource=pods kind=Pod namespaced=true"),
        "{first}"
    );
    assert!(
        first.contains("apps/v1 resource=deployments kind=Deployment namespaced=true"),
        "{first}"
    );
    assert!(
        first.contains("networking.k8s.io/v1 resource=ingresses kind=Ingress"),
        "{first}"
    );
    let second = run(cp, "discovery", &["--cache-dir", &dir, "--ttl", "600"]).await?;
    assert!(
        second.contains("from cache: true (0 discovery requests)"),
        "{second}"
    );
    let lines = |s: &str| {
        s.lines()
            .filter(|l| !l.contains("from cache"))
            .map(String::from)
            .collect::<Vec<_>>()
    };
    assert_eq!(lines(&first), lines(&second), "same answer from the cache");
    // an expired TTL asks again
    let third = run(cp, "discovery", &["--cache-dir", &dir, "--ttl", "0"]).await?;
    assert!(third.contains("from cache: false"), "{third}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sample_controller_example() -> anyhow::Result<()> {
    init_tracing();
    let cp = ControlPlane::shared().await?;
    let ns = fixture(cp, "ex-sample").await?;
    let mut child = command(
        cp,
        "sample_controller",
        &["--namespace", &ns, "--run-for", "6", "--fail", "p2"],
    )
    .spawn()?;
    let stdout = child.stdout.take().expect("piped");
    let mut lines = BufReader::new(stdout).lines();
    let mut out = Vec::new();
    let pods: Api<Pod> = Api::namespaced(cp.client(), &ns);
    let collect = async {
        while let Some(line) = lines.next_line().await? {
            if line == "Starting Pod controller" {
                let pods = pods.clone();
                tokio::spawn(async move {
                    tokio::time::sleep(Duration::from_secs(2)).await;
                    let _ = pods
                        .delete(
                            "p1",
                            &DeleteParams {
                                grace_period_seconds: Some(0),
                                ..Default::default()
                            },
                        )
                        .await;
                });
            }
            out.push(line);
        }
        anyhow::Ok(())
    };
    tokio::time::timeout(WAIT, collect).await??;
    let status = tokio::time::timeout(WAIT, child.wait()).await??;
    let text = out.join("\n");
    assert!(status.success(), "{status}\n{text}");
    let count = |s: &str| out.iter().filter(|l| l.as_str() == s).count();
    // The deletion the pre-warmed cache missed is shown, once.
    assert_eq!(
        count(&format!("Pod {ns}/mypod does not exist anymore")),
        1,
        "{text}"
    );
    assert!(count("Sync/Add/Update for Pod p1") >= 1, "{text}");
    assert!(count("Sync/Add/Update for Pod p3") >= 1, "{text}");
    assert_eq!(
        out.iter()
            .filter(|l| l.starts_with(&format!("Error syncing pod {ns}/p2")))
            .count(),
        5,
        "5 retries: {text}"
    );
    assert_eq!(
        out.iter()
            .filter(|l| l.starts_with(&format!("Dropping pod {ns}/p2 out of the queue")))
            .count(),
        1,
        "{text}"
    );
    // At least once: a deletion with grace 0 arrives as a MODIFIED then a DELETED event,
    // and when the worker is already processing the key as the DELETED one lands, the
    // queue holds the key again (client-go's workqueue does the same), so the line may
    // show twice.
    assert!(
        (1..=2).contains(&count(&format!("Pod {ns}/p1 does not exist anymore"))),
        "{text}"
    );
    assert_eq!(
        out.last().map(String::as_str),
        Some("Stopping Pod controller"),
        "{text}"
    );
    Ok(())
}

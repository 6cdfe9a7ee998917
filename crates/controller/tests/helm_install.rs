//! The Helm chart installed for real: `helm install` of charts/sluice into the test cluster
//! (the admin kubeconfig of the test control plane), the node agent running the pod as the
//! chart says (image `sluice:VERSION` -> the workspace binary, args, env, the ServiceAccount
//! token, probes), an Ingress served through it and the leader holding its Lease with the
//! chart's namespaced Role; then `helm upgrade` with changed values (ingress-nginx's
//! `controller.replicaCount` 1 -> 2 and a `controller.extraArgs` entry): both replicas run
//! the new flag, its effect is seen (unmatched hosts go to the default backend instead of
//! 404) and the Ingress is still served by each; a second upgrade to a hostNetwork DaemonSet
//! (`controller.kind`, `controller.hostNetwork`) serves it on port 80 and publishes the
//! node's address. Any RBAC refusal in a pod's log fails the
//! test. The chart's admission webhook (ingress-nginx's `controller.admissionWebhooks.*`,
//! with a Secret and caBundle of the test's own) is on: the API server reaches it through the
//! chart's Service (at the pod's IP), and `kubectl apply` of an Ingress sluice would not serve
//! is refused, before and after the upgrade. `controller.config` reaches the controller as
//! ingress-nginx's ConfigMap does (a `block-user-agents` entry answers 403).
//! `helm uninstall` removes the release.
//!
//! helm comes from `scripts/helm.sh` (built once into the test cache, pinned in tools/helm).

mod support;
mod tls_support;

use base64::Engine;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, LogParams};
use serde_json::json;
use sluice_testenv::{AGENT_NODE_NAME, eventually};
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;
use support::{World, echo_deployment, get};

/// The release's namespace and name (full name `edge-sluice`: apart from deploy/'s
/// `sluice` objects that the test World applies).
const NS: &str = "sluice-helm";
const RELEASE: &str = "edge";
const SELECTOR: &str = "app.kubernetes.io/instance=edge";
/// The class the release serves (ingress-nginx's `controller.ingressClassResource.*`).
const CLASS: &str = "helm-class";

fn root() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
}

/// Runs `bash scripts/helm.sh ARGS` (helm, built when missing) with the test cluster's
/// kubeconfig; fails with helm's output.
async fn helm(kubeconfig: PathBuf, args: Vec<String>) -> anyhow::Result<String> {
    tokio::task::spawn_blocking(move || {
        let out = std::process::Command::new("bash")
            .arg(root().join("scripts/helm.sh"))
            .args(&args)
            .env("KUBECONFIG", &kubeconfig)
            .output()?;
        anyhow::ensure!(
            out.status.success(),
            "helm {}: {}{}",
            args.join(" "),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    })
    .await?
}

/// Names, IPs and args of the Ready release pods on the agent's Node, once there are
/// exactly `n` and each has `arg` (when given).
async fn ready_pods(
    admin: &kube::Client,
    n: usize,
    arg: Option<&str>,
) -> anyhow::Result<Vec<(String, IpAddr)>> {
    let pods: Api<Pod> = Api::namespaced(admin.clone(), NS);
    let found = eventually(
        Duration::from_secs(90),
        &format!("{n} Ready pods {SELECTOR} with {arg:?}"),
        || async {
            let list = pods
                .list(&ListParams::default().labels(SELECTOR))
                .await
                .ok()?;
            let mut ready = Vec::new();
            for p in list.items {
                let spec = p.spec.as_ref()?;
                if p.metadata.deletion_timestamp.is_some()
                    || spec.node_name.as_deref() != Some(AGENT_NODE_NAME)
                {
                    continue;
                }
                let args = spec.containers.first()?.args.clone().unwrap_or_default();
                let status = p.status?;
                let is_ready = status
                    .conditions
                    .iter()
                    .flatten()
                    .any(|c| c.type_ == "Ready" && c.status == "True");
                if is_ready && arg.is_none_or(|a| args.iter().any(|x| x == a)) {
                    ready.push((p.metadata.name?, status.pod_ip?.parse().ok()?));
                } else if is_ready {
                    // An old replica still Ready: not yet rolled out.
                    return None;
                }
            }
            (ready.len() == n).then_some(ready)
        },
    )
    .await;
    if found.is_err() {
        // Say why: each pod's phase, conditions and container states.
        let list = pods.list(&ListParams::default().labels(SELECTOR)).await?;
        let states: Vec<String> = list
            .items
            .iter()
            .map(|p| {
                format!(
                    "{}: {}",
                    p.metadata.name.as_deref().unwrap_or("?"),
                    serde_json::to_string(&p.status).unwrap_or_default()
                )
            })
            .collect();
        return found.map_err(|e| e.context(format!("pods: {states:#?}")));
    }
    found
}

/// Waits until `host` is answered by the echo Service through sluice at `addr`.
async fn answers(addr: SocketAddr, host: &str) -> anyhow::Result<()> {
    eventually(
        Duration::from_secs(30),
        &format!("{host} through sluice at {addr}"),
        || async {
            let r = get(addr, host, "/").await.ok()?;
            (r.status == 200 && r.service() == "echo").then_some(())
        },
    )
    .await
}

/// The status of GET / for `host` at `addr` sent with `User-Agent: agent`.
async fn status_as(addr: SocketAddr, host: &str, agent: &str) -> anyhow::Result<u16> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let exchange = async {
        let mut s = tokio::net::TcpStream::connect(addr).await?;
        let req = format!(
            "GET / HTTP/1.1\r\nHost: {host}\r\nUser-Agent: {agent}\r\nConnection: close\r\n\r\n"
        );
        s.write_all(req.as_bytes()).await?;
        let mut buf = Vec::new();
        s.read_to_end(&mut buf).await?;
        let head = String::from_utf8_lossy(&buf);
        head.split_whitespace()
            .nth(1)
            .and_then(|c| c.parse().ok())
            .ok_or_else(|| anyhow::anyhow!("no status line in {head:?}"))
    };
    tokio::time::timeout(Duration::from_secs(10), exchange).await?
}

/// Fails on any RBAC refusal (`... is forbidden ...`) in the pod's log.
async fn assert_not_refused(admin: &kube::Client, name: &str) -> anyhow::Result<()> {
    let pods: Api<Pod> = Api::namespaced(admin.clone(), NS);
    let log = pods.logs(name, &LogParams::default()).await?;
    if let Some(line) = log.lines().find(|l| l.contains("forbidden")) {
        anyhow::bail!("the chart's RBAC refused pod {NS}/{name} something:\n{line}");
    }
    Ok(())
}

/// `kubectl apply` (a server-side dry run while waiting for the webhook to be reachable)
/// of an Ingress of the release's class with an annotation value sluice cannot use: refused
/// by the chart's webhook, naming the annotation. `real`: also a real apply at the end.
async fn refuses_bad_ingress(w: &World, real: bool) -> anyhow::Result<()> {
    let bad = json!({
        "apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
        "metadata": {"name": "bad", "namespace": w.ns,
            "annotations": {"nginx.ingress.kubernetes.io/proxy-next-upstream": "http_418"}},
        "spec": {"ingressClassName": CLASS, "rules": [{"host": "bad.helm.test",
            "http": {"paths": [{"path": "/", "pathType": "Prefix",
                "backend": {"service": {"name": "echo", "port": {"number": 80}}}}]}}]},
    })
    .to_string();
    let kubeconfig = w.cp.kubeconfig_path().to_path_buf();
    let apply = move |dry_run: bool| {
        let (kubeconfig, bad) = (kubeconfig.clone(), bad.clone());
        tokio::task::spawn_blocking(move || -> anyhow::Result<(bool, String)> {
            use std::io::Write;
            let mut cmd = std::process::Command::new("kubectl");
            cmd.arg("--kubeconfig")
                .arg(&kubeconfig)
                .args(["apply", "-f", "-"]);
            if dry_run {
                cmd.arg("--dry-run=server");
            }
            let mut child = cmd
                .stdin(std::process::Stdio::piped())
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()?;
            if let Some(mut stdin) = child.stdin.take() {
                stdin.write_all(bad.as_bytes())?;
            }
            let out = child.wait_with_output()?;
            Ok((
                out.status.success(),
                format!(
                    "{}{}",
                    String::from_utf8_lossy(&out.stdout),
                    String::from_utf8_lossy(&out.stderr)
                ),
            ))
        })
    };
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let (ok, out) = apply(true).await??;
        if !ok && out.contains("denied the request") {
            assert!(out.contains("proxy-next-upstream"), "{out}");
            break;
        }
        anyhow::ensure!(
            tokio::time::Instant::now() < deadline,
            "the chart's webhook never refused the bad Ingress: {out}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    if real {
        let (ok, out) = apply(false).await??;
        anyhow::ensure!(
            !ok && out.contains("InvalidAnnotation"),
            "not refused: {out}"
        );
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn helm_install_serves_an_ingress_and_upgrade_changes_replicas_and_flags()
-> anyhow::Result<()> {
    let w = World::new("helm").await?;
    let admin = w.admin.clone();
    w.cp.node_agent().await?;
    let kubeconfig = w.cp.kubeconfig_path().to_path_buf();

    w.service("echo").await?;
    w.create(echo_deployment(1, 1)).await?;
    w.create(json!({
        "apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
        "metadata": {"name": "echo"},
        "spec": {"ingressClassName": CLASS, "rules": [{"host": "ingress.helm.test",
            "http": {"paths": [{"path": "/", "pathType": "Prefix",
                "backend": {"service": {"name": "echo", "port": {"number": 80}}}}]}}]},
    }))
    .await?;

    // The webhook's serving certificate, for the chart's Service name, in the Secret the
    // chart mounts (the pod waits for it, as with a kubelet).
    let (leaf, key, ca) = tls_support::ca_and_leaf(&[&format!("edge-sluice-admission.{NS}.svc")])?;
    let b64 = |b: &[u8]| base64::engine::general_purpose::STANDARD.encode(b);
    let ca_pem = format!(
        "-----BEGIN CERTIFICATE-----\n{}\n-----END CERTIFICATE-----\n",
        b64(ca.as_ref())
    );
    sluice_testenv::apply_yaml(
        &admin,
        &serde_json::to_string(&json!({
            "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}}))?,
    )
    .await?;
    sluice_testenv::apply_yaml(
        &admin,
        &serde_json::to_string(&json!({
            "apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
            "metadata": {"name": "edge-sluice-admission", "namespace": NS},
            "data": {"tls.crt": b64(leaf.as_bytes()), "tls.key": b64(key.as_bytes())}}))?,
    )
    .await?;

    let chart = root().join("charts/sluice").display().to_string();
    let common = [
        "--namespace",
        NS,
        "--set",
        &format!("controller.ingressClassResource.name={CLASS}"),
        "--set",
        "controller.ingressClassResource.controllerValue=sluice.dev/helm",
        "--set",
        "controller.service.type=ClusterIP",
        // ingress-nginx's ConfigMap key, through the chart's ConfigMap.
        "--set",
        "controller.config.block-user-agents=helm-blocked/1.0",
        // No Gateway API CRDs on this cluster: never look for them.
        "--set",
        "gatewayAPI.enabled=false",
        "--set",
        "controller.admissionWebhooks.enabled=true",
        "--set",
        &format!(
            "controller.admissionWebhooks.caBundle={}",
            b64(ca_pem.as_bytes())
        ),
        // Only this test's namespace (the API server is shared by the binary's tests).
        "--set-json",
        &format!(
            "controller.admissionWebhooks.namespaceSelector={}",
            json!({"matchLabels": {"kubernetes.io/metadata.name": w.ns}})
        ),
    ]
    .map(String::from);
    let mut install: Vec<String> = ["install", RELEASE, &chart, "--create-namespace"]
        .map(String::from)
        .to_vec();
    install.extend(common.iter().cloned());
    helm(kubeconfig.clone(), install).await?;

    let pods = ready_pods(&admin, 1, None).await?;
    let (first, ip) = pods[0].clone();
    answers(SocketAddr::new(ip, 80), "ingress.helm.test").await?;
    // Nothing routes an unknown host yet: sluice's 404.
    let r = get(SocketAddr::new(ip, 80), "unknown.helm.test", "/").await?;
    assert_eq!(r.status, 404, "{r:?}");
    // controller.config was read: the blocked agent gets nginx's 403, others the backend.
    let addr = SocketAddr::new(ip, 80);
    eventually(
        Duration::from_secs(20),
        "block-user-agents from controller.config",
        || async {
            (status_as(addr, "ingress.helm.test", "helm-blocked/1.0")
                .await
                .ok()?
                == 403)
                .then_some(())
        },
    )
    .await?;
    assert_eq!(
        status_as(addr, "ingress.helm.test", "other/1.0").await?,
        200
    );
    // The leader holds the Lease the Role grants, in the release's namespace.
    let leases: Api<Lease> = Api::namespaced(admin.clone(), NS);
    eventually(
        Duration::from_secs(30),
        "the leader's Lease edge-sluice-leader",
        || async {
            let lease = leases.get_opt("edge-sluice-leader").await.ok()??;
            (lease.spec?.holder_identity? == first).then_some(())
        },
    )
    .await?;
    assert_not_refused(&admin, &first).await?;
    refuses_bad_ingress(&w, true).await?;

    // helm upgrade: two replicas, and a flag that changes what an unmatched host gets.
    let backend = format!("{}/echo", w.ns);
    let mut upgrade: Vec<String> = ["upgrade", RELEASE, &chart].map(String::from).to_vec();
    upgrade.extend(common.iter().cloned());
    upgrade.extend([
        "--set".to_string(),
        "controller.replicaCount=2".to_string(),
        "--set".to_string(),
        format!("controller.extraArgs.default-backend-service={backend}"),
    ]);
    helm(kubeconfig.clone(), upgrade).await?;
    let deployments: Api<Deployment> = Api::namespaced(admin.clone(), NS);
    let spec_replicas = deployments
        .get("edge-sluice")
        .await?
        .spec
        .and_then(|s| s.replicas);
    assert_eq!(spec_replicas, Some(2));
    let flag = format!("--default-backend-service={backend}");
    let replicas = ready_pods(&admin, 2, Some(&flag)).await?;
    for (name, ip) in &replicas {
        assert_ne!(*name, first, "the first pod was replaced");
        let addr = SocketAddr::new(*ip, 80);
        answers(addr, "ingress.helm.test").await?;
        // The new flag at work: the unmatched host reaches the default backend now.
        answers(addr, "unknown.helm.test").await?;
        assert_not_refused(&admin, name).await?;
    }
    refuses_bad_ingress(&w, false).await?;
    let history = helm(
        kubeconfig.clone(),
        ["history", RELEASE, "--namespace", NS]
            .map(String::from)
            .to_vec(),
    )
    .await?;
    assert!(history.lines().count() >= 3, "two revisions: {history}");

    // ingress-nginx's `controller.kind=DaemonSet` with `controller.hostNetwork`: the upgrade
    // replaces the Deployment by a DaemonSet on the node's port 80 (the pod's IP stands for
    // the node's here), which publishes the node's address in the Ingress status.
    let mut to_daemonset: Vec<String> = ["upgrade", RELEASE, &chart].map(String::from).to_vec();
    to_daemonset.extend(common.iter().cloned());
    to_daemonset.extend(
        [
            "--set",
            "controller.kind=DaemonSet",
            "--set",
            "controller.hostNetwork=true",
            "--set",
            "controller.service.enabled=false",
        ]
        .map(String::from),
    );
    helm(kubeconfig.clone(), to_daemonset).await?;
    let daemon = ready_pods(&admin, 1, Some("--publish-status-address=$(HOST_IP)")).await?;
    let (name, ip) = daemon[0].clone();
    answers(SocketAddr::new(ip, 80), "ingress.helm.test").await?;
    assert!(deployments.get_opt("edge-sluice").await?.is_none());
    let host_ip = Api::<Pod>::namespaced(admin.clone(), NS)
        .get(&name)
        .await?
        .status
        .and_then(|s| s.host_ip)
        .unwrap_or_default();
    let ingresses: Api<k8s_openapi::api::networking::v1::Ingress> = w.api();
    eventually(
        Duration::from_secs(30),
        "the node's address in the Ingress status",
        || async {
            let lb = ingresses
                .get("echo")
                .await
                .ok()?
                .status?
                .load_balancer?
                .ingress?;
            (lb.first()?.ip.as_deref() == Some(host_ip.as_str())).then_some(())
        },
    )
    .await?;
    assert_not_refused(&admin, &name).await?;

    helm(
        kubeconfig,
        ["uninstall", RELEASE, "--namespace", NS]
            .map(String::from)
            .to_vec(),
    )
    .await?;
    assert!(deployments.get_opt("edge-sluice").await?.is_none());
    Ok(())
}

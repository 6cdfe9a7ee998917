//! The node agent: kube-scheduler binds pods to its Node; an image it has no binary for is an
//! error on the Pod's status; a pod it runs answers on its own address and goes away on a
//! graceful delete; its container log reads through the API server (`kubectl logs`).

mod common;

use futures::{AsyncBufReadExt, AsyncReadExt};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::{SignedDuration, Timestamp, Unit};
use kube::api::{Api, DeleteParams, LogParams, PostParams};
use serde_json::json;
use sluice_testenv::{AGENT_NODE_NAME, ControlPlane, eventually};
use std::net::SocketAddr;
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scheduled_pods_run_or_say_why_not_and_delete_gracefully() -> anyhow::Result<()> {
    let cp = ControlPlane::shared().await?;
    cp.node_agent().await?;
    let ns = cp.create_namespace("agent").await?;
    let pods: Api<Pod> = Api::namespaced(cp.client(), &ns);
    let pp = PostParams::default();

    let foreign: Pod = serde_json::from_value(json!({
        "metadata": {"name": "foreign"},
        "spec": {"containers": [{"name": "web", "image": "nginx:1.27"}]},
    }))?;
    pods.create(&pp, &foreign).await?;
    let message = eventually(Duration::from_secs(30), "ErrImagePull on nginx", || async {
        let p = pods.get("foreign").await.ok()?;
        let spec_node = p.spec.as_ref()?.node_name.clone()?;
        let waiting = p
            .status?
            .container_statuses?
            .first()?
            .state
            .as_ref()?
            .waiting
            .clone()?;
        (spec_node == AGENT_NODE_NAME && waiting.reason.as_deref() == Some("ErrImagePull"))
            .then_some(waiting.message.unwrap_or_default())
    })
    .await?;
    assert!(message.contains("has no local binary"), "{message}");

    let echo: Pod = serde_json::from_value(json!({
        "metadata": {"name": "echo"},
        "spec": {
            "terminationGracePeriodSeconds": 3,
            "containers": [{
                "name": "echo", "image": "example.test/sluice-echo:v1",
                "args": ["--listen", "$(POD_IP):8080", "--service", "agent"],
                "env": [
                    {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                    {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                ],
                "readinessProbe": {"tcpSocket": {"port": 8080}, "periodSeconds": 1},
            }],
        },
    }))?;
    pods.create(&pp, &echo).await?;
    let ip = eventually(Duration::from_secs(30), "echo Ready", || async {
        let status = pods.get("echo").await.ok()?.status?;
        let ready = status
            .conditions
            .iter()
            .flatten()
            .any(|c| c.type_ == "Ready" && c.status == "True");
        if !ready {
            return None;
        }
        status.pod_ip?.parse::<std::net::Ipv4Addr>().ok()
    })
    .await?;
    let (code, body) = common::http_get(SocketAddr::from((ip, 8080)), "/x").await?;
    assert_eq!(code, 200, "{body}");
    let json: serde_json::Value = serde_json::from_str(&body)?;
    assert_eq!(json["pod"], "echo", "{body}");

    pods.delete("echo", &DeleteParams::default()).await?;
    pods.delete("foreign", &DeleteParams::default()).await?;
    eventually(Duration::from_secs(30), "both pods gone", || async {
        let list = pods.list(&Default::default()).await.ok()?;
        list.items.is_empty().then_some(())
    })
    .await?;
    // The process is gone with its pod.
    assert!(
        common::http_get(SocketAddr::from((ip, 8080)), "/x")
            .await
            .is_err()
    );
    Ok(())
}

/// `kubectl logs`, `--since-time`, `--tail` and `-f`: kube-apiserver proxies `pods/log` to the
/// agent's kubelet endpoint (mutual TLS on the Node's InternalIP), which serves what the
/// container wrote, with the times it wrote it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn container_logs_read_through_the_api_server_and_since_time_filters() -> anyhow::Result<()> {
    let cp = ControlPlane::shared().await?;
    cp.node_agent().await?;
    let ns = cp.create_namespace("logs").await?;
    let pods: Api<Pod> = Api::namespaced(cp.client(), &ns);
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "talker"},
        "spec": {
            "terminationGracePeriodSeconds": 1,
            "containers": [{
                "name": "echo", "image": "sluice-echo:test",
                "args": ["--listen", "0.0.0.0:8080"],
                // Debug: a connection that ends in error is a log line written on demand.
                "env": [{"name": "RUST_LOG", "value": "sluice_echo=debug"}],
                "readinessProbe": {"tcpSocket": {"port": 8080}, "periodSeconds": 1},
            }],
        },
    }))?;
    pods.create(&PostParams::default(), &pod).await?;
    let ip = eventually(Duration::from_secs(30), "talker Ready", || async {
        let status = pods.get("talker").await.ok()?.status?;
        let ready = status
            .conditions
            .iter()
            .flatten()
            .any(|c| c.type_ == "Ready" && c.status == "True");
        ready.then_some(())?;
        status.pod_ip?.parse::<std::net::Ipv4Addr>().ok()
    })
    .await?;

    let all = pods.logs("talker", &LogParams::default()).await?;
    let started = "listening on 0.0.0.0:8080".to_string();
    assert!(all.lines().any(|l| l == started), "{all:?}");
    let stamped = pods
        .logs(
            "talker",
            &LogParams {
                timestamps: true,
                ..Default::default()
            },
        )
        .await?;
    let first: Timestamp = stamped
        .lines()
        .find(|l| l.ends_with(&started))
        .and_then(|l| l.split_once(' '))
        .and_then(|(t, _)| t.parse().ok())
        .ok_or_else(|| anyhow::anyhow!("no timestamped start line in {stamped:?}"))?;

    // The API passes whole seconds: a boundary after the start line, then a later line.
    let since = first
        .checked_add(SignedDuration::from_secs(1))?
        .round(Unit::Second)?;
    while Timestamp::now() < since.checked_add(SignedDuration::from_millis(100))? {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut s = tokio::net::TcpStream::connect((ip, 8080)).await?;
        s.write_all(b"NOT HTTP\r\n\r\n").await?;
        let mut sink = Vec::new();
        let _ = tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut sink)).await;
    }
    let later = eventually(Duration::from_secs(10), "the later log line", || async {
        let text = pods
            .logs(
                "talker",
                &LogParams {
                    since_time: Some(since),
                    ..Default::default()
                },
            )
            .await
            .ok()?;
        text.contains("connection ended with error").then_some(text)
    })
    .await?;
    assert!(
        !later.contains(&started),
        "since-time kept an older line: {later:?}"
    );
    let all = pods.logs("talker", &LogParams::default()).await?;
    assert!(
        all.contains(&started) && all.contains("connection ended with error"),
        "{all:?}"
    );
    let tail = pods
        .logs(
            "talker",
            &LogParams {
                tail_lines: Some(1),
                ..Default::default()
            },
        )
        .await?;
    assert_eq!(tail.lines().count(), 1, "{tail:?}");

    // `kubectl logs -f`: what is there, then the stream ends when the container does.
    let mut follow = Box::pin(
        pods.log_stream(
            "talker",
            &LogParams {
                follow: true,
                since_time: Some(since),
                ..Default::default()
            },
        )
        .await?,
    );
    let mut first = String::new();
    tokio::time::timeout(Duration::from_secs(10), follow.read_line(&mut first)).await??;
    assert!(first.contains("connection ended with error"), "{first:?}");
    pods.delete("talker", &DeleteParams::default()).await?;
    let mut rest = String::new();
    tokio::time::timeout(Duration::from_secs(20), follow.read_to_string(&mut rest)).await??;
    assert!(rest.contains("SIGTERM received"), "{rest:?}");
    eventually(Duration::from_secs(30), "talker gone", || async {
        pods.get_opt("talker").await.ok()?.is_none().then_some(())
    })
    .await?;
    Ok(())
}

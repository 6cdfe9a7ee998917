//! A pod deleted under load costs no failed request when it drains gracefully: a Deployment
//! of sluice-echo (3 replicas, run by the node agent) behind an Ingress served by sluice,
//! bounded load of slow-ish requests (so that some are in flight at any moment), half of
//! them POSTs (never resent once sent), and one pod deleted mid-load.
//!
//! What makes it work, in order: the Pod gets a deletionTimestamp; kube-controller-manager
//! marks its endpoint `ready: false` (terminating) and sluice, which routes to ready
//! endpoints only, drops it; meanwhile the agent sends SIGTERM and sluice-echo stops
//! accepting but finishes what it is serving. A request sluice still sends there before its
//! table changes finds the port closed, and a failed connect is retried on another endpoint
//! (nothing was sent), so no preStop delay is needed in front of sluice.

mod support;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, ListParams};
use serde_json::json;
use sluice_testenv::eventually;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use support::{Reply, World, echo_deployment, get};

/// Load bounds: whichever comes first.
const MAX_REQUESTS: usize = 2_000;
const MAX_TIME: Duration = Duration::from_secs(20);
const WORKERS: usize = 16;
/// Requests answered before the pod is deleted.
const DELETE_AFTER: usize = 300;

/// POST `path` with a small body over a fresh connection.
async fn post(addr: std::net::SocketAddr, host: &str, path: &str) -> anyhow::Result<Reply> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let fut = async {
        let mut s = tokio::net::TcpStream::connect(addr).await?;
        let req = format!(
            "POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello"
        );
        s.write_all(req.as_bytes()).await?;
        let mut buf = Vec::new();
        s.read_to_end(&mut buf).await?;
        let text = String::from_utf8_lossy(&buf);
        let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
        let status = head
            .split_whitespace()
            .nth(1)
            .and_then(|c| c.parse().ok())
            .ok_or_else(|| anyhow::anyhow!("no status line in {head:?}"))?;
        let body = if head
            .to_ascii_lowercase()
            .contains("transfer-encoding: chunked")
        {
            support::dechunk(body)
        } else {
            body.to_string()
        };
        Ok(Reply { status, body })
    };
    tokio::time::timeout(Duration::from_secs(10), fut).await?
}

#[derive(Default)]
struct Tally {
    /// Answers by pod, before and after the deleted pod was gone.
    by_pod: BTreeMap<String, usize>,
    after_gone: BTreeMap<String, usize>,
    failures: Vec<String>,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_deleted_under_load_costs_no_request() -> anyhow::Result<()> {
    let w = World::new("drain").await?;
    w.cp.node_agent().await?;
    w.service("echo").await?;
    w.create(echo_deployment(3, 10)).await?;
    w.ingress(
        "echo",
        json!({"rules": [{"host": "drain.test", "http": {"paths": [
            {"path": "/", "pathType": "Prefix",
             "backend": {"service": {"name": "echo", "port": {"name": "http"}}}}]}}]}),
    )
    .await?;
    let run = w.start(&[]).await?;
    let addr = run.http;
    // All three pods answering before the load starts.
    let three = eventually(Duration::from_secs(60), "three pods answering", || async {
        let mut seen = BTreeSet::new();
        for _ in 0..30 {
            let r = get(addr, "drain.test", "/").await.ok()?;
            (r.status == 200).then_some(())?;
            seen.insert(r.pod());
        }
        (seen.len() == 3).then_some(seen)
    })
    .await?;

    let tally = Arc::new(Mutex::new(Tally::default()));
    let sent = Arc::new(AtomicUsize::new(0));
    let answered = Arc::new(AtomicUsize::new(0));
    let gone = Arc::new(AtomicBool::new(false));
    let began = Instant::now();
    let mut workers = Vec::new();
    for _ in 0..WORKERS {
        let (tally, sent, answered, gone) =
            (tally.clone(), sent.clone(), answered.clone(), gone.clone());
        workers.push(tokio::spawn(async move {
            while began.elapsed() < MAX_TIME && sent.fetch_add(1, Ordering::Relaxed) < MAX_REQUESTS
            {
                let was_gone = gone.load(Ordering::Relaxed);
                let n = sent.load(Ordering::Relaxed);
                // Half of them POSTs, which sluice never resends once one reached a pod, a
                // quarter of them slow: only a graceful drain saves those in flight when the
                // pod stops.
                let r = match n % 4 {
                    1 => post(addr, "drain.test", "/delay/300").await,
                    3 => post(addr, "drain.test", "/delay/20").await,
                    _ => get(addr, "drain.test", "/delay/20").await,
                };
                let mut t = tally.lock().unwrap_or_else(|p| p.into_inner());
                match r {
                    Ok(r) if r.status == 200 => {
                        *t.by_pod.entry(r.pod()).or_default() += 1;
                        if was_gone {
                            *t.after_gone.entry(r.pod()).or_default() += 1;
                        }
                    }
                    Ok(r) => t.failures.push(format!("{} {}", r.status, r.body)),
                    Err(e) => t.failures.push(format!("{e:#}")),
                }
                answered.fetch_add(1, Ordering::Relaxed);
            }
        }));
    }

    eventually(MAX_TIME, "the first requests", || async {
        (answered.load(Ordering::Relaxed) >= DELETE_AFTER).then_some(())
    })
    .await?;
    let pods: Api<Pod> = w.api();
    let victim = three.iter().next().cloned().unwrap_or_default();
    pods.delete(&victim, &DeleteParams::default()).await?;
    let deleted_at = answered.load(Ordering::Relaxed);
    eventually(Duration::from_secs(15), "the deleted pod gone", || async {
        let names: BTreeSet<String> = pods
            .list(&ListParams::default().labels("app=echo"))
            .await
            .ok()?
            .items
            .into_iter()
            .filter_map(|p| p.metadata.name)
            .collect();
        (!names.contains(&victim)).then_some(())
    })
    .await?;
    gone.store(true, Ordering::Relaxed);
    let gone_at = answered.load(Ordering::Relaxed);
    for wk in workers {
        wk.await?;
    }
    let total = answered.load(Ordering::Relaxed);
    run.stop().await?;

    let t = tally.lock().unwrap_or_else(|p| p.into_inner());
    assert!(
        t.failures.is_empty(),
        "{} of {total} requests failed (pod {victim} deleted after {deleted_at}, gone after \
         {gone_at}); first: {}",
        t.failures.len(),
        t.failures[0]
    );
    assert!(
        total > gone_at,
        "the load ended ({total} requests, {:?}) before the pod was gone ({gone_at})",
        began.elapsed()
    );
    assert!(
        t.by_pod.get(&victim).is_some_and(|n| *n > 0),
        "{:?}",
        t.by_pod
    );
    assert!(
        !t.after_gone.contains_key(&victim),
        "answers from the deleted pod after it was gone: {:?}",
        t.after_gone
    );
    eprintln!(
        "{total} requests in {:?}, none failed; pod {victim} deleted after {deleted_at}, gone \
         after {gone_at}; answers by pod {:?}",
        began.elapsed(),
        t.by_pod
    );
    Ok(())
}

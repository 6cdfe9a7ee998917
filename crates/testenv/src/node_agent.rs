//! A node agent for tests (a kubelet of sorts): it registers a Node, renews its Lease, and runs
//! the pods kube-scheduler binds to it as local processes, each in its own network namespace
//! on the test bridge, reporting their status the way a kubelet does.
//!
//! Images map to workspace binaries by their last path segment (`…/sluice:tag` -> `sluice`,
//! `sluice-echo`), and the Gateway API conformance suite's `echo-basic` and `coredns` to
//! binaries built from that suite's module (`scripts/conformance.sh`); any other image
//! leaves the Pod Pending with `ErrImagePull` and a message saying so. A Pod whose Secret or
//! ConfigMap volume does not exist yet waits for it, as with a kubelet. Secret and ConfigMap volumes are written to a per-pod directory, and a
//! container's args, command and env values that start with a mount path are rewritten to
//! that directory (no chroot: the binaries take file paths as arguments).
//!
//! Each pod also gets what a kubelet gives it for its ServiceAccount (unless
//! `automountServiceAccountToken: false`): a token from the TokenRequest API bound to the
//! pod, with `ca.crt` and `namespace`, at the fixed path in-cluster clients read
//! (`/var/run/secrets/kubernetes.io/serviceaccount`), and `KUBERNETES_SERVICE_HOST`/`PORT`.
//! That path cannot be rewritten (client libraries hard-code it), so every container runs
//! in a mount namespace of its own where `/run` (= `/var/run`) is a directory of the pod.
//! The API server listens on loopback, which a pod's network namespace cannot reach; the
//! agent relays `gateway:443` to it (TLS passes through; the serving certificate names
//! every gateway).
//!
//! `hostNetwork: true` pods run in a network namespace of their own too (two of them
//! binding the same host port would otherwise collide, and a test must not listen on the
//! machine's own interfaces); tests reach them at their pod IP, which stands for the node's.
//! Containers run as root whatever their `securityContext` says.
//!
//! Container output is captured with timestamps and served to `kubectl logs` through the
//! API server ([`crate::kubelet_api`]).

use crate::kubelet_api::{KUBELET_PORT, Logs};
use crate::network::{Network, ip};
use crate::supervisor::Supervised;
use anyhow::{Context, bail};
use k8s_openapi::api::authentication::v1::{BoundObjectReference, TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{ConfigMap, Container, Node, Pod, Probe, Secret, ServiceAccount};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, Preconditions};
use serde_json::{Value, json};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Name of the Node the agent registers; pods without a `nodeName` land there.
pub const AGENT_NODE_NAME: &str = "sluice-agent-node";

/// How often the agent looks at its pods.
const TICK: Duration = Duration::from_millis(200);
/// How often the Node's Lease is renewed (a kubelet's default).
const LEASE_RENEW: Duration = Duration::from_secs(10);
/// The longest grace period honoured, so that a test never waits minutes on a deletion.
const MAX_GRACE: Duration = Duration::from_secs(30);
/// How long a pod waits for its ServiceAccount (the controller creates `default` just after
/// its namespace) before the agent gives up on it.
const TOKEN_WAIT: Duration = Duration::from_secs(20);
/// Where pods reach the API server: the agent's relay on their gateway.
const APISERVER_RELAY_PORT: u16 = 443;

/// What every pod of the agent shares.
struct Shared {
    net: &'static Network,
    logs: Logs,
    /// The test CA, the pods' `ca.crt`.
    ca_pem: Vec<u8>,
}

/// The running agent; stopping it (or dropping it) kills every pod process and removes their
/// network namespaces. The Pod objects stay: the control plane goes with the test process.
pub struct NodeAgent {
    stop: Arc<AtomicBool>,
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
}

impl std::fmt::Debug for NodeAgent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeAgent")
            .field("node", &AGENT_NODE_NAME)
            .finish()
    }
}

impl NodeAgent {
    /// Registers the Node (Ready, untainted, with allocatable capacity) and starts the agent on
    /// a thread of its own, so that it outlives the runtime of the test that started it: the
    /// pods, the API server relay on the gateway and the kubelet endpoint.
    pub(crate) async fn start(
        config: kube::Config,
        apiserver_port: u16,
        pki: &crate::pki::Pki,
    ) -> anyhow::Result<NodeAgent> {
        let net = Network::get()?;
        // Bound here so that a port in use fails the start, not a pod later.
        let relay = std::net::TcpListener::bind((net.gateway(), APISERVER_RELAY_PORT))
            .context("the API server relay's port on the pod gateway")?;
        let kubelet = std::net::TcpListener::bind((net.gateway(), KUBELET_PORT))
            .context("the kubelet endpoint's port on the pod gateway")?;
        for l in [&relay, &kubelet] {
            l.set_nonblocking(true)?;
        }
        let acceptor = crate::kubelet_api::acceptor(pki)?;
        let shared = Shared {
            net,
            logs: Logs::default(),
            ca_pem: std::fs::read(&pki.ca).context("the test CA")?,
        };
        register_node(&kube::Client::try_from(config.clone())?, net.gateway()).await?;
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::Builder::new()
            .name("testenv-node-agent".into())
            .spawn(move || {
                let rt = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(rt) => rt,
                    Err(e) => {
                        tracing::error!(error = %e, "node agent: no runtime");
                        return;
                    }
                };
                rt.block_on(async move {
                    let (Ok(relay), Ok(kubelet)) = (
                        tokio::net::TcpListener::from_std(relay),
                        tokio::net::TcpListener::from_std(kubelet),
                    ) else {
                        tracing::error!("node agent: listeners");
                        return;
                    };
                    tokio::spawn(relay_to(relay, apiserver_port));
                    tokio::spawn(crate::kubelet_api::serve(
                        kubelet,
                        acceptor,
                        shared.logs.clone(),
                    ));
                    run(config, shared, flag).await
                });
            })
            .context("spawn the node agent thread")?;
        Ok(NodeAgent {
            stop,
            thread: Mutex::new(Some(thread)),
        })
    }

    /// Stops the agent and tears down every pod it runs; idempotent.
    pub fn stop(&self) {
        self.stop.store(true, Ordering::Relaxed);
        let thread = self.thread.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(t) = thread {
            let _ = t.join();
        }
    }
}

impl Drop for NodeAgent {
    fn drop(&mut self) {
        self.stop();
    }
}

fn now() -> String {
    k8s_openapi::jiff::Timestamp::now().to_string()
}

async fn register_node(client: &kube::Client, host_ip: Ipv4Addr) -> anyhow::Result<()> {
    let nodes: Api<Node> = Api::all(client.clone());
    let node: Node = serde_json::from_value(json!({
        "metadata": {"name": AGENT_NODE_NAME,
                     "labels": {"kubernetes.io/hostname": AGENT_NODE_NAME, "kubernetes.io/os": "linux"}},
    }))?;
    match nodes.create(&PostParams::default(), &node).await {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 409 => {}
        Err(e) => return Err(e).context("create the agent's Node"),
    }
    // The NodeTaint admission plugin taints a new Node not-ready; the node lifecycle
    // controller, which would lift it, does not run here.
    nodes
        .patch(
            AGENT_NODE_NAME,
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"taints": null}})),
        )
        .await
        .context("untaint the agent's Node")?;
    let t = now();
    let capacity = json!({"cpu": "64", "memory": "256Gi", "pods": "250"});
    nodes
        .patch_status(
            AGENT_NODE_NAME,
            &PatchParams::default(),
            &Patch::Merge(&json!({"status": {
                "capacity": capacity, "allocatable": capacity,
                "addresses": [{"type": "InternalIP", "address": host_ip.to_string()},
                              {"type": "Hostname", "address": AGENT_NODE_NAME}],
                "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                                "message": "sluice test node agent",
                                "lastHeartbeatTime": t, "lastTransitionTime": t}],
                "daemonEndpoints": {"kubeletEndpoint": {"Port": KUBELET_PORT}},
            }})),
        )
        .await
        .context("set the agent's Node Ready")?;
    Ok(())
}

async fn renew_lease(client: &kube::Client) -> anyhow::Result<()> {
    let leases: Api<k8s_openapi::api::coordination::v1::Lease> =
        Api::namespaced(client.clone(), "kube-node-lease");
    let renew = k8s_openapi::jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%S%.6fZ")
        .to_string();
    let lease = json!({
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": AGENT_NODE_NAME, "namespace": "kube-node-lease"},
        "spec": {"holderIdentity": AGENT_NODE_NAME, "leaseDurationSeconds": 40, "renewTime": renew},
    });
    leases
        .patch(
            AGENT_NODE_NAME,
            &PatchParams::apply("sluice-node-agent").force(),
            &Patch::Apply(&lease),
        )
        .await
        .context("renew the Node's Lease")?;
    Ok(())
}

/// Forwards connections from the pods' gateway to the API server on loopback.
async fn relay_to(listener: tokio::net::TcpListener, apiserver_port: u16) {
    loop {
        let Ok((mut down, _)) = listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        tokio::spawn(async move {
            if let Ok(mut up) = tokio::net::TcpStream::connect(("127.0.0.1", apiserver_port)).await
            {
                let _ = tokio::io::copy_bidirectional(&mut down, &mut up).await;
            }
        });
    }
}

/// One pod the agent runs.
struct RunningPod {
    namespace: String,
    name: String,
    uid: String,
    netns: String,
    n: u8,
    ip: Ipv4Addr,
    dir: tempfile::TempDir,
    started: String,
    containers: Vec<RunningContainer>,
    /// The last status written, so that only changes are patched.
    written: Option<Value>,
    /// Set once the Pod has a deletionTimestamp: SIGTERM was sent, SIGKILL is due then.
    terminating: Option<Instant>,
    logs: Logs,
}

struct RunningContainer {
    name: String,
    image: String,
    process: Option<Supervised>,
    readiness: Option<Probe>,
    ready: bool,
    next_probe: Instant,
    exit: Option<i32>,
}

impl Drop for RunningPod {
    fn drop(&mut self) {
        for c in &mut self.containers {
            if let Some(mut p) = c.process.take() {
                p.kill();
            }
        }
        crate::network::kill_netns_pids(&self.netns);
        let _ = ip(&["netns", "del", &self.netns]);
        crate::kubelet_api::forget(&self.logs, &self.namespace, &self.name);
        if let Ok(net) = Network::get() {
            net.release(self.n);
        }
    }
}

async fn run(config: kube::Config, shared: Shared, stop: Arc<AtomicBool>) {
    let client = match kube::Client::try_from(config) {
        Ok(c) => c,
        Err(e) => {
            tracing::error!(error = %e, "node agent: no client");
            return;
        }
    };
    let mut pods: HashMap<String, RunningPod> = HashMap::new();
    // uid -> the message last reported for a pod that cannot run.
    let mut failed: HashMap<String, String> = HashMap::new();
    // uid -> when the agent first failed to get the pod's ServiceAccount token.
    let mut waiting: HashMap<String, Instant> = HashMap::new();
    // Pods waiting for a Secret or ConfigMap they mount (reported once).
    let mut mounting: HashSet<String> = HashSet::new();
    let mut lease_due = Instant::now();
    while !stop.load(Ordering::Relaxed) {
        if Instant::now() >= lease_due {
            if let Err(e) = renew_lease(&client).await {
                tracing::warn!(error = %format!("{e:#}"), "node agent");
            }
            lease_due = Instant::now() + LEASE_RENEW;
        }
        let state = (&mut pods, &mut failed, &mut waiting, &mut mounting);
        if let Err(e) = tick(&client, &shared, state).await {
            tracing::debug!(error = %format!("{e:#}"), "node agent tick");
        }
        tokio::time::sleep(TICK).await;
    }
    // Dropping each pod kills its processes and deletes its namespace.
    pods.clear();
}

/// The agent's pods: running, failed (uid -> message), waiting for a token (uid -> since),
/// waiting for a volume's object.
type PodState<'a> = (
    &'a mut HashMap<String, RunningPod>,
    &'a mut HashMap<String, String>,
    &'a mut HashMap<String, Instant>,
    &'a mut HashSet<String>,
);

async fn tick(
    client: &kube::Client,
    shared: &Shared,
    (pods, failed, waiting, mounting): PodState<'_>,
) -> anyhow::Result<()> {
    let all: Api<Pod> = Api::all(client.clone());
    let lp = ListParams::default().fields(&format!("spec.nodeName={AGENT_NODE_NAME}"));
    let listed = all.list(&lp).await.context("list the node's pods")?;
    let mut seen = HashSet::new();
    for pod in listed.items {
        let Some(uid) = pod.metadata.uid.clone() else {
            continue;
        };
        seen.insert(uid.clone());
        let namespace = pod.metadata.namespace.clone().unwrap_or_default();
        let name = pod.metadata.name.clone().unwrap_or_default();
        let api: Api<Pod> = Api::namespaced(client.clone(), &namespace);
        if pod.metadata.deletion_timestamp.is_some() {
            let grace = pod
                .metadata
                .deletion_grace_period_seconds
                .map(|s| Duration::from_secs(s.max(0) as u64))
                .unwrap_or(Duration::from_secs(30))
                .min(MAX_GRACE);
            let done = match pods.get_mut(&uid) {
                Some(p) => terminate_step(p, grace),
                None => true,
            };
            if done {
                pods.remove(&uid);
                failed.remove(&uid);
                let dp = DeleteParams {
                    grace_period_seconds: Some(0),
                    preconditions: Some(Preconditions {
                        uid: Some(uid.clone()),
                        resource_version: None,
                    }),
                    ..Default::default()
                };
                match api.delete(&name, &dp).await {
                    Ok(_) => {}
                    Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => {}
                    Err(e) => tracing::warn!(pod = %name, error = %e, "node agent: delete"),
                }
            } else if let Some(p) = pods.get_mut(&uid) {
                write_status(&api, p).await;
            }
            continue;
        }
        if failed.contains_key(&uid) {
            continue;
        }
        if !pods.contains_key(&uid) {
            // Images first: a pod that cannot run waits for nothing.
            if let Err(e) = pod_binaries(&pod) {
                let message = format!("{e:#}");
                report_failure(&api, &name, &pod, "ErrImagePull", &message).await;
                failed.insert(uid.clone(), message);
                continue;
            }
            // A kubelet retries a mount until its Secret or ConfigMap exists (FailedMount),
            // and so does the agent: the Gateway API conformance suite creates the Secrets
            // its base Deployments mount (tls-checks-certificate) after applying them.
            if let Some(missing) = missing_volume_object(client, &pod).await {
                if mounting.insert(uid.clone()) {
                    report_failure(&api, &name, &pod, "ContainerCreating", &missing).await;
                }
                continue;
            }
            mounting.remove(&uid);
            let token = match service_account_token(client, &pod).await {
                Ok(t) => t,
                Err(e) => {
                    let since = *waiting.entry(uid.clone()).or_insert_with(Instant::now);
                    if since.elapsed() < TOKEN_WAIT {
                        tracing::debug!(pod = %name, error = %format!("{e:#}"), "node agent: token");
                    } else {
                        let message = format!("{e:#}");
                        report_failure(&api, &name, &pod, "CreateContainerConfigError", &message)
                            .await;
                        failed.insert(uid.clone(), message);
                    }
                    continue;
                }
            };
            waiting.remove(&uid);
            match start_pod(client, shared, &pod, token).await {
                Ok(p) => {
                    pods.insert(uid.clone(), p);
                }
                Err(e) => {
                    let message = format!("{e:#}");
                    report_failure(&api, &name, &pod, "ErrImagePull", &message).await;
                    failed.insert(uid.clone(), message);
                    continue;
                }
            }
        }
        if let Some(p) = pods.get_mut(&uid) {
            probe_all(p).await;
            write_status(&api, p).await;
        }
    }
    // Pods deleted at once (grace 0) by someone else.
    pods.retain(|uid, _| seen.contains(uid));
    failed.retain(|uid, _| seen.contains(uid));
    waiting.retain(|uid, _| seen.contains(uid));
    mounting.retain(|uid| seen.contains(uid));
    Ok(())
}

/// SIGTERM on the first call, SIGKILL once `grace` has passed; true when every process is gone.
fn terminate_step(p: &mut RunningPod, grace: Duration) -> bool {
    let deadline = *p.terminating.get_or_insert_with(|| {
        for c in &mut p.containers {
            c.ready = false;
            if let Some(pid) = c.process.as_ref().and_then(Supervised::id) {
                // SAFETY: plain kill(2) on our own child's pid.
                unsafe { libc::kill(pid as libc::pid_t, libc::SIGTERM) };
            }
        }
        Instant::now() + grace
    });
    let mut all_gone = true;
    for c in &mut p.containers {
        if let Some(proc) = c.process.as_mut() {
            if proc.exited().is_some() {
                c.process = None;
            } else if Instant::now() >= deadline {
                proc.kill();
                c.process = None;
            } else {
                all_gone = false;
            }
        }
    }
    all_gone
}

async fn report_failure(api: &Api<Pod>, name: &str, pod: &Pod, reason: &str, message: &str) {
    let containers: Vec<Value> = pod
        .spec
        .iter()
        .flat_map(|s| &s.containers)
        .map(|c| {
            json!({"name": c.name, "image": c.image.clone().unwrap_or_default(), "imageID": "",
                   "ready": false, "restartCount": 0,
                   "state": {"waiting": {"reason": reason, "message": message}}})
        })
        .collect();
    let t = now();
    let status = json!({"status": {
        "phase": "Pending",
        "message": message,
        "reason": reason,
        "conditions": [
            {"type": "PodScheduled", "status": "True", "lastTransitionTime": t},
            {"type": "Ready", "status": "False", "reason": "ContainersNotReady",
             "message": message, "lastTransitionTime": t},
        ],
        "containerStatuses": containers,
    }});
    if let Err(e) = api
        .patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
        .await
    {
        tracing::warn!(pod = %name, error = %e, "node agent: report failure");
    }
}

/// Where the binary of an image comes from.
#[derive(Debug, PartialEq)]
enum Local {
    /// A binary of this workspace.
    Workspace(&'static str),
    /// A binary built from the Gateway API conformance module by `scripts/conformance.sh`.
    GatewayApi(&'static str),
}

/// The local binary an image stands for, by the image's last path segment without tag or
/// digest.
fn local_binary(image: &str) -> Option<Local> {
    let no_digest = image.split('@').next().unwrap_or(image);
    let last = no_digest.rsplit('/').next().unwrap_or(no_digest);
    Some(match last.split(':').next().unwrap_or(last) {
        "sluice" => Local::Workspace("sluice"),
        "sluice-echo" => Local::Workspace("sluice-echo"),
        // The conformance suite's backend, whatever the tag (the base manifests name v1.5.1
        // and v1.6.0-dev.*): the build of the conformance module's own version.
        "echo-basic" => Local::GatewayApi("echo-basic"),
        // The base manifests' coredns only has to be Ready (UDPRoute tests use it): a
        // stand-in that answers its `whoami` zone and never forwards.
        "coredns" => Local::GatewayApi("dns-standin"),
        _ => return None,
    })
}

/// The binary an image stands for, or why there is none.
fn image_binary(image: &str) -> anyhow::Result<PathBuf> {
    match local_binary(image) {
        Some(Local::Workspace(name)) => crate::binaries::workspace_binary(name),
        Some(Local::GatewayApi(name)) => crate::binaries::gateway_api_binary(name),
        None => bail!(
            "image {image:?} has no local binary: the test node agent runs `sluice`, \
             `sluice-echo`, `echo-basic` and `coredns` images only"
        ),
    }
}

/// `$(NAME)` references to earlier env entries, as the kubelet expands them (`$$` escapes).
fn expand(s: &str, env: &BTreeMap<String, String>) -> String {
    let mut out = String::new();
    let mut rest = s;
    while let Some(i) = rest.find('$') {
        out.push_str(&rest[..i]);
        let after = &rest[i + 1..];
        if let Some(tail) = after.strip_prefix('$') {
            out.push('$');
            rest = tail;
        } else if let Some(inner) = after.strip_prefix('(')
            && let Some(end) = inner.find(')')
            && let Some(v) = env.get(&inner[..end])
        {
            out.push_str(v);
            rest = &inner[end + 1..];
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    out
}

/// Rewrites a leading volume mount path to the directory holding that volume's files.
fn rewrite(s: &str, mounts: &[(String, PathBuf)]) -> String {
    for (mount, dir) in mounts {
        let m = mount.trim_end_matches('/');
        if s == m {
            return dir.display().to_string();
        }
        if let Some(rest) = s.strip_prefix(m)
            && rest.starts_with('/')
        {
            return format!("{}{rest}", dir.display());
        }
    }
    s.to_string()
}

fn field_ref(pod: &Pod, ip: Ipv4Addr, host_ip: Ipv4Addr, path: &str) -> anyhow::Result<String> {
    let meta = &pod.metadata;
    let spec = pod.spec.as_ref();
    let quoted = |prefix: &str| {
        path.strip_prefix(prefix)
            .and_then(|r| r.strip_suffix("']"))
            .map(str::to_string)
    };
    Ok(match path {
        "metadata.name" => meta.name.clone().unwrap_or_default(),
        "metadata.namespace" => meta.namespace.clone().unwrap_or_default(),
        "metadata.uid" => meta.uid.clone().unwrap_or_default(),
        "spec.nodeName" => spec.and_then(|s| s.node_name.clone()).unwrap_or_default(),
        "spec.serviceAccountName" => spec
            .and_then(|s| s.service_account_name.clone())
            .unwrap_or_default(),
        "status.podIP" | "status.podIPs" => ip.to_string(),
        "status.hostIP" | "status.hostIPs" => host_ip.to_string(),
        _ => {
            if let Some(k) = quoted("metadata.labels['") {
                meta.labels
                    .as_ref()
                    .and_then(|l| l.get(&k).cloned())
                    .unwrap_or_default()
            } else if let Some(k) = quoted("metadata.annotations['") {
                meta.annotations
                    .as_ref()
                    .and_then(|l| l.get(&k).cloned())
                    .unwrap_or_default()
            } else {
                bail!("fieldRef {path:?} is not supported by the test node agent")
            }
        }
    })
}

/// The first Secret or ConfigMap that a volume of `pod` names and that cannot be read (yet),
/// unless the volume is `optional`; `None` when all are there.
async fn missing_volume_object(client: &kube::Client, pod: &Pod) -> Option<String> {
    let namespace = pod.metadata.namespace.clone().unwrap_or_default();
    for v in pod.spec.as_ref()?.volumes.iter().flatten() {
        let missing = if let Some(s) = v.secret.as_ref().filter(|s| s.optional != Some(true)) {
            let name = s.secret_name.clone().unwrap_or_default();
            let api = Api::<Secret>::namespaced(client.clone(), &namespace);
            matches!(api.get_opt(&name).await, Ok(None) | Err(_)).then(|| format!("Secret {name}"))
        } else if let Some(c) = v.config_map.as_ref().filter(|c| c.optional != Some(true)) {
            let api = Api::<ConfigMap>::namespaced(client.clone(), &namespace);
            matches!(api.get_opt(&c.name).await, Ok(None) | Err(_))
                .then(|| format!("ConfigMap {}", c.name))
        } else {
            None
        };
        if let Some(what) = missing {
            return Some(format!(
                "volume {}: {what} not found in {namespace}; waiting for it",
                v.name
            ));
        }
    }
    None
}

/// The binaries of a pod's containers, or why it cannot run.
fn pod_binaries(pod: &Pod) -> anyhow::Result<Vec<PathBuf>> {
    let spec = pod.spec.as_ref().context("Pod without spec")?;
    spec.containers.iter().map(container_binary).collect()
}

/// A token for the pod's ServiceAccount, bound to the pod (it stops working when the pod
/// is gone), as the kubelet requests for the projected token volume; `None` when the pod
/// opts out. Valid for an hour as the kubelet asks (the API server extends such tokens),
/// longer than any test, so it is never refreshed.
async fn service_account_token(client: &kube::Client, pod: &Pod) -> anyhow::Result<Option<String>> {
    let Some(spec) = pod.spec.as_ref() else {
        return Ok(None);
    };
    if spec.automount_service_account_token == Some(false) {
        return Ok(None);
    }
    let namespace = pod.metadata.namespace.clone().unwrap_or_default();
    #[allow(deprecated)]
    let named = spec
        .service_account_name
        .clone()
        .or_else(|| spec.service_account.clone())
        .filter(|a| !a.is_empty());
    // The ServiceAccount admission plugin (off in the test control plane) would have set
    // `default`; the API server binds a token only to a pod that names its account.
    let bound = named.is_some().then(|| BoundObjectReference {
        api_version: Some("v1".into()),
        kind: Some("Pod".into()),
        name: pod.metadata.name.clone(),
        uid: pod.metadata.uid.clone(),
    });
    let account = named.unwrap_or_else(|| "default".into());
    let request = TokenRequest {
        spec: TokenRequestSpec {
            // Empty: the API server's own audiences.
            audiences: Vec::new(),
            expiration_seconds: Some(3607),
            bound_object_ref: bound,
        },
        ..Default::default()
    };
    let issued = Api::<ServiceAccount>::namespaced(client.clone(), &namespace)
        .create_token_request(&account, &PostParams::default(), &request)
        .await
        .with_context(|| format!("token for ServiceAccount {namespace}/{account}"))?;
    Ok(Some(
        issued
            .status
            .map(|s| s.token)
            .context("TokenRequest returned no token")?,
    ))
}

async fn start_pod(
    client: &kube::Client,
    shared: &Shared,
    pod: &Pod,
    token: Option<String>,
) -> anyhow::Result<RunningPod> {
    let namespace = pod.metadata.namespace.clone().unwrap_or_default();
    let name = pod.metadata.name.clone().unwrap_or_default();
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    let spec = pod.spec.as_ref().context("Pod without spec")?;
    let binaries = pod_binaries(pod)?;
    let net = shared.net;

    let n = net.allocate()?;
    let ip = Ipv4Addr::new(10, 244, net.subnet_id(), n);
    let netns = format!("sl-{}-{n}", std::process::id());
    let dir = crate::network::temp_dir().context("the pod's directory")?;
    let mut running = RunningPod {
        namespace: namespace.clone(),
        name: name.clone(),
        uid,
        netns: netns.clone(),
        n,
        ip,
        dir,
        started: now(),
        containers: Vec::new(),
        written: None,
        terminating: None,
        logs: shared.logs.clone(),
    };
    crate::pod_host::make_netns(net, &netns, n, ip)?;

    // The pod's /run: the ServiceAccount files where in-cluster clients look for them.
    let run_dir = running.dir.path().join("run");
    std::fs::create_dir_all(&run_dir)?;
    if let Some(token) = token {
        let sa = run_dir.join("secrets/kubernetes.io/serviceaccount");
        std::fs::create_dir_all(&sa)?;
        std::fs::write(sa.join("token"), token)?;
        std::fs::write(sa.join("ca.crt"), &shared.ca_pem)?;
        std::fs::write(sa.join("namespace"), &namespace)?;
    }

    // Volumes: Secret and ConfigMap contents as files.
    let mut volume_dirs: HashMap<String, PathBuf> = HashMap::new();
    for v in spec.volumes.iter().flatten() {
        let dir = running.dir.path().join("volumes").join(&v.name);
        std::fs::create_dir_all(&dir)?;
        let files: BTreeMap<String, Vec<u8>> = if let Some(s) = &v.secret {
            let secret_name = s.secret_name.clone().unwrap_or_default();
            let secret = Api::<Secret>::namespaced(client.clone(), &namespace)
                .get(&secret_name)
                .await
                .with_context(|| format!("volume {}: Secret {secret_name}", v.name))?;
            let mut files: BTreeMap<String, Vec<u8>> = secret
                .data
                .unwrap_or_default()
                .into_iter()
                .map(|(k, b)| (k, b.0))
                .collect();
            select_items(
                &mut files,
                s.items
                    .as_deref()
                    .unwrap_or_default()
                    .iter()
                    .map(|i| (&i.key, &i.path)),
            );
            files
        } else if let Some(c) = &v.config_map {
            let cm = Api::<ConfigMap>::namespaced(client.clone(), &namespace)
                .get(&c.name)
                .await
                .with_context(|| format!("volume {}: ConfigMap {}", v.name, c.name))?;
            let mut files: BTreeMap<String, Vec<u8>> = cm
                .data
                .unwrap_or_default()
                .into_iter()
                .map(|(k, s)| (k, s.into_bytes()))
                .chain(
                    cm.binary_data
                        .unwrap_or_default()
                        .into_iter()
                        .map(|(k, b)| (k, b.0)),
                )
                .collect();
            select_items(
                &mut files,
                c.items
                    .as_deref()
                    .unwrap_or_default()
                    .iter()
                    .map(|i| (&i.key, &i.path)),
            );
            files
        } else if v.empty_dir.is_some() {
            BTreeMap::new()
        } else {
            bail!(
                "volume {}: only Secret, ConfigMap and emptyDir volumes are supported",
                v.name
            );
        };
        for (path, bytes) in files {
            if path.split('/').any(|c| c == "..") {
                bail!("volume {}: path {path:?} leaves the volume", v.name);
            }
            let file = dir.join(&path);
            if let Some(parent) = file.parent() {
                std::fs::create_dir_all(parent)?;
            }
            std::fs::write(&file, bytes)?;
        }
        volume_dirs.insert(v.name.clone(), dir);
    }

    for (c, binary) in spec.containers.iter().zip(binaries) {
        let mounts: Vec<(String, PathBuf)> = c
            .volume_mounts
            .iter()
            .flatten()
            .map(|m| {
                let dir = volume_dirs
                    .get(&m.name)
                    .with_context(|| format!("volumeMount {}: no such volume", m.name))?;
                let dir = match m.sub_path.as_deref() {
                    Some(sub) if !sub.is_empty() => dir.join(sub),
                    _ => dir.clone(),
                };
                Ok((m.mount_path.clone(), dir))
            })
            .collect::<anyhow::Result<_>>()?;
        let mut env: BTreeMap<String, String> = BTreeMap::new();
        env.insert("HOSTNAME".into(), name.clone());
        // No ~/.kube/config of this machine for in-cluster clients to prefer.
        env.insert("HOME".into(), "/".into());
        env.insert("KUBERNETES_SERVICE_HOST".into(), net.gateway().to_string());
        env.insert(
            "KUBERNETES_SERVICE_PORT".into(),
            APISERVER_RELAY_PORT.to_string(),
        );
        for e in c.env.iter().flatten() {
            let value = if let Some(from) = &e.value_from {
                if let Some(f) = &from.field_ref {
                    field_ref(pod, ip, net.gateway(), &f.field_path)?
                } else if let Some(k) = &from.secret_key_ref {
                    let s = Api::<Secret>::namespaced(client.clone(), &namespace)
                        .get(&k.name)
                        .await?;
                    let bytes = s.data.and_then(|d| d.get(&k.key).map(|b| b.0.clone()));
                    String::from_utf8_lossy(&bytes.with_context(|| {
                        format!("env {}: no key {} in Secret {}", e.name, k.key, k.name)
                    })?)
                    .into_owned()
                } else if let Some(k) = &from.config_map_key_ref {
                    let cm = Api::<ConfigMap>::namespaced(client.clone(), &namespace)
                        .get(&k.name)
                        .await?;
                    cm.data
                        .and_then(|d| d.get(&k.key).cloned())
                        .with_context(|| {
                            format!("env {}: no key {} in ConfigMap {}", e.name, k.key, k.name)
                        })?
                } else {
                    bail!(
                        "env {}: only fieldRef, secretKeyRef and configMapKeyRef are supported",
                        e.name
                    );
                }
            } else {
                expand(e.value.as_deref().unwrap_or_default(), &env)
            };
            env.insert(e.name.clone(), rewrite(&value, &mounts));
        }
        let args: Vec<String> = c
            .command
            .iter()
            .flatten()
            .skip(1)
            .chain(c.args.iter().flatten())
            .map(|a| rewrite(&expand(a, &env), &mounts))
            .collect();
        let (output, input) = std::io::pipe()?;
        let mut cmd = Command::new(&binary);
        cmd.args(&args)
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .envs(&env)
            .stdin(Stdio::null())
            .stdout(input.try_clone()?)
            .stderr(input);
        let netns_file = std::fs::File::open(format!("/run/netns/{netns}"))
            .with_context(|| format!("open network namespace {netns}"))?;
        enter_pod(&mut cmd, &netns_file, &run_dir)?;
        let process = Supervised::spawn(&format!("{namespace}/{name}/{}", c.name), cmd)
            .with_context(|| format!("start container {}", c.name))?;
        // The write ends went with `cmd`: the capture ends when the container's output does.
        drop(netns_file);
        crate::kubelet_api::capture(
            &shared.logs,
            (namespace.clone(), name.clone(), c.name.clone()),
            output,
            running.dir.path().join(format!("{}.log", c.name)),
        )?;
        let readiness = c.readiness_probe.clone().map(|p| with_port_numbers(p, c));
        let delay = readiness
            .as_ref()
            .and_then(|p| p.initial_delay_seconds)
            .unwrap_or(0)
            .max(0) as u64;
        running.containers.push(RunningContainer {
            name: c.name.clone(),
            image: c.image.clone().unwrap_or_default(),
            process: Some(process),
            ready: readiness.is_none(),
            readiness,
            next_probe: Instant::now() + Duration::from_secs(delay),
            exit: None,
        });
    }
    tracing::debug!(pod = %format_args!("{namespace}/{name}"), %ip, "node agent: started");
    Ok(running)
}

/// Makes `cmd` start inside the pod: its network namespace (`netns`, an open
/// `/run/netns/NAME`), and a mount namespace of its own whose `/run` is `run_dir`.
fn enter_pod(cmd: &mut Command, netns: &std::fs::File, run_dir: &Path) -> anyhow::Result<()> {
    use std::os::fd::AsRawFd;
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::process::CommandExt;
    let fd = netns.as_raw_fd();
    let source = std::ffi::CString::new(run_dir.as_os_str().as_bytes())?;
    let check = |rc: libc::c_int| {
        if rc == 0 {
            Ok(())
        } else {
            Err(std::io::Error::last_os_error())
        }
    };
    // SAFETY: between fork and exec only async-signal-safe system calls, on memory prepared
    // before the fork (`source`, the literals); `fd` stays open until the spawn returned.
    unsafe {
        cmd.pre_exec(move || {
            check(libc::setns(fd, libc::CLONE_NEWNET))?;
            check(libc::unshare(libc::CLONE_NEWNS))?;
            // Private: the bind below must not propagate back to the machine's mounts.
            check(libc::mount(
                c"none".as_ptr(),
                c"/".as_ptr(),
                std::ptr::null(),
                libc::MS_REC | libc::MS_PRIVATE,
                std::ptr::null(),
            ))?;
            check(libc::mount(
                source.as_ptr(),
                c"/run".as_ptr(),
                std::ptr::null(),
                libc::MS_BIND,
                std::ptr::null(),
            ))
        });
    }
    Ok(())
}

fn select_items<'a>(
    files: &mut BTreeMap<String, Vec<u8>>,
    items: impl Iterator<Item = (&'a String, &'a String)>,
) {
    let items: Vec<_> = items.collect();
    if items.is_empty() {
        return;
    }
    let mut picked = BTreeMap::new();
    for (key, path) in items {
        if let Some(b) = files.get(key) {
            picked.insert(path.clone(), b.clone());
        }
    }
    *files = picked;
}

fn container_binary(c: &Container) -> anyhow::Result<PathBuf> {
    let image = c.image.as_deref().unwrap_or_default();
    let binary = image_binary(image)?;
    // A command names the image's own executable, as a path or a name.
    if let Some(first) = c.command.as_ref().and_then(|c| c.first()) {
        let wanted = Path::new(first)
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("");
        if binary.file_name().and_then(|n| n.to_str()) != Some(wanted) {
            bail!(
                "container {}: command {first:?} is not the image's binary {}",
                c.name,
                binary.display()
            );
        }
    }
    Ok(binary)
}

async fn probe_all(p: &mut RunningPod) {
    if p.terminating.is_some() {
        return;
    }
    let ip = p.ip;
    for c in &mut p.containers {
        if let Some(proc) = c.process.as_mut()
            && let Some(status) = proc.exited()
        {
            c.exit = Some(status.code().unwrap_or(-1));
            c.process = None;
            c.ready = false;
        }
        if c.process.is_none() {
            continue;
        }
        let Some(probe) = &c.readiness else { continue };
        if Instant::now() < c.next_probe {
            continue;
        }
        let period = probe.period_seconds.unwrap_or(10).max(1) as u64;
        c.next_probe = Instant::now() + Duration::from_secs(period);
        let timeout = Duration::from_secs(probe.timeout_seconds.unwrap_or(1).max(1) as u64);
        c.ready = tokio::time::timeout(timeout, probe_once(probe, ip))
            .await
            .unwrap_or(false);
    }
}

/// The probe with a named port (`port: admin`) replaced by the number of the container's
/// port of that name, as a kubelet resolves it; a name the container lacks stays (the probe
/// then fails, as a kubelet's would).
fn with_port_numbers(mut probe: Probe, c: &Container) -> Probe {
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
    let resolve = |port: &mut IntOrString| {
        if let IntOrString::String(name) = port
            && let Some(n) = c
                .ports
                .iter()
                .flatten()
                .find(|p| p.name.as_deref() == Some(name.as_str()))
                .map(|p| p.container_port)
        {
            *port = IntOrString::Int(n);
        }
    };
    if let Some(h) = probe.http_get.as_mut() {
        resolve(&mut h.port);
    }
    if let Some(t) = probe.tcp_socket.as_mut() {
        resolve(&mut t.port);
    }
    probe
}

async fn probe_once(probe: &Probe, ip: Ipv4Addr) -> bool {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let port = |p: &k8s_openapi::apimachinery::pkg::util::intstr::IntOrString| match p {
        k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(n) => u16::try_from(*n).ok(),
        // Named ports were resolved against the container's ports at start.
        k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::String(s) => s.parse().ok(),
    };
    if let Some(h) = &probe.http_get {
        let Some(port) = port(&h.port) else {
            return false;
        };
        let path = h.path.as_deref().unwrap_or("/");
        let Ok(mut s) = tokio::net::TcpStream::connect((ip, port)).await else {
            return false;
        };
        let req = format!(
            "GET {path} HTTP/1.1\r\nHost: {ip}:{port}\r\nUser-Agent: kube-probe/sluice-test\r\nConnection: close\r\n\r\n"
        );
        if s.write_all(req.as_bytes()).await.is_err() {
            return false;
        }
        let mut head = [0u8; 12];
        if s.read_exact(&mut head).await.is_err() {
            return false;
        }
        // "HTTP/1.1 200": 200..=399 is success.
        let code = std::str::from_utf8(&head[9..12])
            .ok()
            .and_then(|c| c.parse::<u16>().ok());
        return code.is_some_and(|c| (200..400).contains(&c));
    }
    if let Some(t) = &probe.tcp_socket {
        let Some(port) = port(&t.port) else {
            return false;
        };
        return tokio::net::TcpStream::connect((ip, port)).await.is_ok();
    }
    // exec and gRPC probes are not run here: such a container counts as ready.
    true
}

async fn write_status(api: &Api<Pod>, p: &mut RunningPod) {
    let all_ready =
        p.terminating.is_none() && p.containers.iter().all(|c| c.ready && c.process.is_some());
    let containers: Vec<Value> = p
        .containers
        .iter()
        .map(|c| {
            let state = match (&c.process, c.exit) {
                (Some(_), _) => json!({"running": {"startedAt": p.started}}),
                (None, Some(code)) => json!({"terminated": {"exitCode": code, "reason": if code == 0 { "Completed" } else { "Error" }, "startedAt": p.started, "finishedAt": now()}}),
                (None, None) => json!({"terminated": {"exitCode": 137, "reason": "Killed", "startedAt": p.started, "finishedAt": now()}}),
            };
            json!({"name": c.name, "image": c.image, "imageID": "", "containerID": format!("sluice-test://{}/{}", p.uid, c.name),
                   "ready": c.ready && c.process.is_some(), "started": c.process.is_some(),
                   "restartCount": 0, "state": state})
        })
        .collect();
    let ready = if all_ready { "True" } else { "False" };
    let body = json!({
        "phase": "Running",
        "podIP": p.ip.to_string(),
        "podIPs": [{"ip": p.ip.to_string()}],
        "hostIP": Network::get().map(|n| n.gateway().to_string()).unwrap_or_default(),
        "startTime": p.started,
        "conditions": [
            {"type": "PodScheduled", "status": "True"},
            {"type": "Initialized", "status": "True"},
            {"type": "ContainersReady", "status": ready},
            {"type": "Ready", "status": ready},
        ],
        "containerStatuses": containers,
    });
    // Timestamps in conditions change on every write: compare without them.
    if p.written.as_ref() == Some(&body) {
        return;
    }
    let mut patch = body.clone();
    let t = now();
    if let Some(conds) = patch["conditions"].as_array_mut() {
        for c in conds {
            c["lastTransitionTime"] = json!(t);
        }
    }
    match api
        .patch_status(
            &p.name,
            &PatchParams::default(),
            &Patch::Merge(&json!({"status": patch})),
        )
        .await
    {
        Ok(_) => p.written = Some(body),
        Err(e) => {
            tracing::debug!(pod = %format_args!("{}/{}", p.namespace, p.name), error = %e, "node agent: status")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A kubelet resolves `port: NAME` of a probe to the container's port of that name (the
    /// Helm chart's probes use `port: admin`).
    #[test]
    fn named_probe_ports_resolve_to_the_containers_port() {
        use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
        let c: Container = serde_json::from_value(json!({"name": "c",
            "ports": [{"name": "http", "containerPort": 80}, {"name": "admin", "containerPort": 10254}]}))
        .expect("container");
        let probe: Probe =
            serde_json::from_value(json!({"httpGet": {"path": "/readyz", "port": "admin"}}))
                .expect("probe");
        let p = with_port_numbers(probe, &c);
        assert_eq!(p.http_get.map(|h| h.port), Some(IntOrString::Int(10254)));
        let probe: Probe =
            serde_json::from_value(json!({"tcpSocket": {"port": "nope"}})).expect("probe");
        let p = with_port_numbers(probe, &c);
        assert_eq!(
            p.tcp_socket.map(|t| t.port),
            Some(IntOrString::String("nope".into()))
        );
    }

    #[test]
    fn conformance_images_map_to_their_builds_whatever_the_tag() {
        // The images of the Gateway API conformance suite's base manifests (v1.6.1).
        for (image, want) in [
            (
                "registry.k8s.io/gateway-api/echo-basic:v1.5.1",
                Local::GatewayApi("echo-basic"),
            ),
            (
                "registry.k8s.io/gateway-api/echo-basic:v1.6.0-dev.3",
                Local::GatewayApi("echo-basic"),
            ),
            (
                "registry.k8s.io/coredns/coredns:v1.12.2",
                Local::GatewayApi("dns-standin"),
            ),
            ("ghcr.io/x/sluice@sha256:00", Local::Workspace("sluice")),
        ] {
            assert_eq!(local_binary(image), Some(want), "{image}");
        }
    }

    #[test]
    fn images_map_to_workspace_binary_names_or_fail_clearly() {
        for image in ["nginx:1.27", "registry.k8s.io/pause:3.10", "sluicex"] {
            let e = image_binary(image).expect_err(image).to_string();
            assert!(e.contains("has no local binary"), "{e}");
        }
    }

    #[test]
    fn env_references_expand_and_mount_paths_rewrite() {
        let env: BTreeMap<String, String> = [("POD".to_string(), "p-1".to_string())].into();
        assert_eq!(
            expand("--pod=$(POD) $(NOPE) $$(POD)", &env),
            "--pod=p-1 $(NOPE) $(POD)"
        );
        let mounts = vec![("/etc/tls/".to_string(), PathBuf::from("/tmp/x/tls"))];
        assert_eq!(rewrite("/etc/tls/tls.crt", &mounts), "/tmp/x/tls/tls.crt");
        assert_eq!(rewrite("/etc/tls", &mounts), "/tmp/x/tls");
        assert_eq!(rewrite("/etc/tlsx", &mounts), "/etc/tlsx");
    }
}

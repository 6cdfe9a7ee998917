//! A node agent for tests (a kubelet of sorts): it registers a Node, renews its Lease, and runs
//! the pods kube-scheduler binds to it as local processes, each in its own network namespace
//! on the test bridge, reporting their status the way a kubelet does.
//!
//! Images map to workspace binaries by their last path segment (`…/sluice:tag` -> `sluice`,
//! `sluice-echo`); any other image leaves the Pod Pending with `ErrImagePull` and a message
//! saying so. Secret and ConfigMap volumes are written to a per-pod directory, and a
//! container's args, command and env values that start with a mount path are rewritten to
//! that directory (no chroot, no mount namespace: the binaries take file paths as arguments).

use crate::network::{Network, ip};
use crate::supervisor::Supervised;
use anyhow::{Context, bail};
use k8s_openapi::api::core::v1::{ConfigMap, Container, Node, Pod, Probe, Secret};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, Preconditions};
use serde_json::{Value, json};
use std::collections::{BTreeMap, HashMap};
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
    /// a thread of its own, so that it outlives the runtime of the test that started it.
    pub async fn start(config: kube::Config) -> anyhow::Result<NodeAgent> {
        let net = Network::get()?;
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
                rt.block_on(run(config, net, flag));
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
                "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
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
        if let Ok(net) = Network::get() {
            net.release(self.n);
        }
    }
}

async fn run(config: kube::Config, net: &'static Network, stop: Arc<AtomicBool>) {
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
    let mut lease_due = Instant::now();
    while !stop.load(Ordering::Relaxed) {
        if Instant::now() >= lease_due {
            if let Err(e) = renew_lease(&client).await {
                tracing::warn!(error = %format!("{e:#}"), "node agent");
            }
            lease_due = Instant::now() + LEASE_RENEW;
        }
        if let Err(e) = tick(&client, net, &mut pods, &mut failed).await {
            tracing::debug!(error = %format!("{e:#}"), "node agent tick");
        }
        tokio::time::sleep(TICK).await;
    }
    // Dropping each pod kills its processes and deletes its namespace.
    pods.clear();
}

async fn tick(
    client: &kube::Client,
    net: &'static Network,
    pods: &mut HashMap<String, RunningPod>,
    failed: &mut HashMap<String, String>,
) -> anyhow::Result<()> {
    let all: Api<Pod> = Api::all(client.clone());
    let lp = ListParams::default().fields(&format!("spec.nodeName={AGENT_NODE_NAME}"));
    let listed = all.list(&lp).await.context("list the node's pods")?;
    let mut seen = std::collections::HashSet::new();
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
            match start_pod(client, net, &pod).await {
                Ok(p) => {
                    pods.insert(uid.clone(), p);
                }
                Err(e) => {
                    let message = format!("{e:#}");
                    report_failure(&api, &name, &pod, &message).await;
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

async fn report_failure(api: &Api<Pod>, name: &str, pod: &Pod, message: &str) {
    let containers: Vec<Value> = pod
        .spec
        .iter()
        .flat_map(|s| &s.containers)
        .map(|c| {
            json!({"name": c.name, "image": c.image.clone().unwrap_or_default(), "imageID": "",
                   "ready": false, "restartCount": 0,
                   "state": {"waiting": {"reason": "ErrImagePull", "message": message}}})
        })
        .collect();
    let t = now();
    let status = json!({"status": {
        "phase": "Pending",
        "message": message,
        "reason": "ErrImagePull",
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

/// The workspace binary an image stands for.
fn image_binary(image: &str) -> anyhow::Result<PathBuf> {
    let no_digest = image.split('@').next().unwrap_or(image);
    let last = no_digest.rsplit('/').next().unwrap_or(no_digest);
    let name = last.split(':').next().unwrap_or(last);
    match name {
        "sluice" | "sluice-echo" => crate::binaries::workspace_binary(name),
        _ => bail!(
            "image {image:?} has no local binary: the test node agent runs `sluice` and \
             `sluice-echo` images only"
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

async fn start_pod(
    client: &kube::Client,
    net: &'static Network,
    pod: &Pod,
) -> anyhow::Result<RunningPod> {
    let namespace = pod.metadata.namespace.clone().unwrap_or_default();
    let name = pod.metadata.name.clone().unwrap_or_default();
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    let spec = pod.spec.as_ref().context("Pod without spec")?;
    // Images first: a pod that cannot run gets no namespace.
    let binaries: Vec<PathBuf> = spec
        .containers
        .iter()
        .map(container_binary)
        .collect::<anyhow::Result<_>>()?;

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
    };
    crate::pod_host::make_netns(net, &netns, n, ip)?;

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
        let log = std::fs::File::create(running.dir.path().join(format!("{}.log", c.name)))?;
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &netns])
            .arg(&binary)
            .args(&args)
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .envs(&env)
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log);
        let process = Supervised::spawn(&format!("{namespace}/{name}/{}", c.name), cmd)
            .with_context(|| format!("start container {}", c.name))?;
        let readiness = c.readiness_probe.clone();
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

async fn probe_once(probe: &Probe, ip: Ipv4Addr) -> bool {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let port = |p: &k8s_openapi::apimachinery::pkg::util::intstr::IntOrString| match p {
        k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(n) => u16::try_from(*n).ok(),
        // Named ports would need the container's port list; numbers are what tests use.
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

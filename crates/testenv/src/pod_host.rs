//! A pod without a kubelet: a network namespace on the test bridge, a process inside it, and
//! a Pod object whose status says Running/Ready with the namespace's address.

use crate::control_plane::NODE_NAME;
use crate::network::{Network, ip, ip_ok};
use crate::supervisor::Supervised;
use anyhow::{Context, bail};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use std::io::{BufRead, BufReader};
use std::net::Ipv4Addr;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

/// A pod: network namespace + veth on the bridge + Pod object (+ an optional process).
///
/// Dropping it kills the process and deletes the namespace (the veth pair goes with it);
/// [`PodHost::delete`] also deletes the Pod object.
pub struct PodHost {
    client: kube::Client,
    namespace: String,
    name: String,
    netns: String,
    n: u8,
    ip: Ipv4Addr,
    process: Option<Supervised>,
}

impl std::fmt::Debug for PodHost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PodHost")
            .field("pod", &format_args!("{}/{}", self.namespace, self.name))
            .field("netns", &self.netns)
            .field("ip", &self.ip)
            .finish()
    }
}

impl PodHost {
    /// Creates the namespace and a Running, Ready Pod `namespace/name` with `labels`
    /// (and named container ports, for Services whose targetPort is a name).
    pub async fn create(
        client: &kube::Client,
        namespace: &str,
        name: &str,
        labels: &[(&str, &str)],
        ports: &[(&str, u16)],
    ) -> anyhow::Result<PodHost> {
        let net = Network::get()?;
        let n = net.allocate()?;
        let k = net.subnet_id();
        let ip = Ipv4Addr::new(10, 244, k, n);
        let netns = format!("sl-{}-{n}", std::process::id());
        let host = PodHost {
            client: client.clone(),
            namespace: namespace.into(),
            name: name.into(),
            netns: netns.clone(),
            n,
            ip,
            process: None,
        };
        // From here on, Drop cleans up whatever was made.
        make_netns(net, &netns, n, ip)?;

        let labels: serde_json::Map<String, serde_json::Value> = labels
            .iter()
            .map(|(k, v)| (k.to_string(), serde_json::Value::from(*v)))
            .collect();
        let ports: Vec<serde_json::Value> = ports
            .iter()
            .map(|(n, p)| serde_json::json!({"name": n, "containerPort": p}))
            .collect();
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "labels": labels},
            "spec": {
                "nodeName": NODE_NAME,
                "containers": [{"name": "app", "image": "sluice-test/netns", "ports": ports}],
            },
        }))?;
        let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
        pods.create(&PostParams::default(), &pod)
            .await
            .with_context(|| format!("create Pod {namespace}/{name}"))?;
        host.set_ready(true).await?;
        Ok(host)
    }

    /// The pod's address.
    pub fn ip(&self) -> Ipv4Addr {
        self.ip
    }

    /// The pod's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The network namespace's name (for `ip netns exec`).
    pub fn netns(&self) -> &str {
        &self.netns
    }

    /// Patches the Pod's status: Running with the pod IP, condition Ready = `ready`.
    pub async fn set_ready(&self, ready: bool) -> anyhow::Result<()> {
        let status = if ready { "True" } else { "False" };
        let now = k8s_openapi::jiff::Timestamp::now().to_string();
        let patch = serde_json::json!({
            "status": {
                "phase": "Running",
                "podIP": self.ip.to_string(),
                "podIPs": [{"ip": self.ip.to_string()}],
                "hostIP": "127.0.0.1",
                "startTime": now,
                "conditions": [
                    {"type": "Ready", "status": status, "lastTransitionTime": now},
                    {"type": "ContainersReady", "status": status, "lastTransitionTime": now},
                    {"type": "PodScheduled", "status": "True", "lastTransitionTime": now},
                    {"type": "Initialized", "status": "True", "lastTransitionTime": now},
                ],
            }
        });
        Api::<Pod>::namespaced(self.client.clone(), &self.namespace)
            .patch_status(&self.name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .with_context(|| format!("patch status of Pod {}/{}", self.namespace, self.name))?;
        Ok(())
    }

    /// Runs `program args…` inside the namespace and waits (up to `timeout`) for a line on
    /// its stdout starting with `ready_prefix`. Replaces a process started before.
    pub async fn run(
        &mut self,
        program: &Path,
        args: &[&str],
        ready_prefix: &str,
        timeout: Duration,
    ) -> anyhow::Result<()> {
        self.kill_process();
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &self.netns])
            .arg(program)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        let mut proc = Supervised::spawn(&format!("{}/{}", self.netns, self.name), cmd)?;
        let stdout = proc
            .child_mut()
            .and_then(|c| c.stdout.take())
            .context("no stdout")?;
        self.process = Some(proc);
        let prefix = ready_prefix.to_string();
        let (tx, rx) = tokio::sync::oneshot::channel();
        // A thread reads stdout to the end so the process never blocks on a full pipe.
        std::thread::spawn(move || {
            let mut tx = Some(tx);
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if line.starts_with(&prefix)
                    && let Some(tx) = tx.take()
                {
                    let _ = tx.send(());
                }
            }
        });
        match tokio::time::timeout(timeout, rx).await {
            Ok(Ok(())) => Ok(()),
            _ => {
                self.kill_process();
                bail!(
                    "{program:?} in {} did not print {ready_prefix:?} within {timeout:?}",
                    self.netns
                )
            }
        }
    }

    /// Runs the workspace's echo backend on `port`, answering as service `service`.
    pub async fn run_echo(&mut self, port: u16, service: &str) -> anyhow::Result<()> {
        let echo = crate::binaries::workspace_binary("sluice-echo")?;
        let listen = format!("0.0.0.0:{port}");
        let name = self.name.clone();
        self.run(
            &echo,
            &["--listen", &listen, "--service", service, "--pod", &name],
            "listening on",
            Duration::from_secs(10),
        )
        .await
    }

    /// Kills the process in the namespace (connections to it are then refused).
    pub fn kill_process(&mut self) {
        if let Some(mut p) = self.process.take() {
            p.kill();
        }
    }

    /// Deletes the Pod object, then the namespace.
    pub async fn delete(self) -> anyhow::Result<()> {
        Api::<Pod>::namespaced(self.client.clone(), &self.namespace)
            .delete(&self.name, &DeleteParams::default().grace_period(0))
            .await
            .with_context(|| format!("delete Pod {}/{}", self.namespace, self.name))?;
        Ok(())
    }
}

/// Network namespace `netns` with `ip/24` on a veth whose other end joins the bridge, `lo` up,
/// and a default route via the bridge. The caller deletes the namespace (the veth goes with it).
pub(crate) fn make_netns(net: &Network, netns: &str, n: u8, ip: Ipv4Addr) -> anyhow::Result<()> {
    let k = net.subnet_id();
    let outside = format!("slv{k}-{n}");
    let inside = format!("slc{k}-{n}");
    // A veth of an earlier namespace with this number may still be going away.
    let _ = crate::network::ip(&["link", "del", &outside]);
    ip_ok(&["netns", "add", netns])?;
    ip_ok(&[
        "link", "add", &outside, "type", "veth", "peer", "name", &inside,
    ])?;
    ip_ok(&["link", "set", &inside, "netns", netns])?;
    ip_ok(&["link", "set", &outside, "master", net.bridge(), "up"])?;
    let in_ns = |args: &[&str]| {
        let mut all = vec!["netns", "exec", netns, "ip"];
        all.extend_from_slice(args);
        ip_ok(&all)
    };
    in_ns(&["link", "set", &inside, "name", "eth0"])?;
    in_ns(&["addr", "add", &format!("{ip}/24"), "dev", "eth0"])?;
    in_ns(&["link", "set", "eth0", "up"])?;
    in_ns(&["link", "set", "lo", "up"])?;
    in_ns(&["route", "add", "default", "via", &net.gateway().to_string()])?;

    Ok(())
}

impl Drop for PodHost {
    fn drop(&mut self) {
        self.kill_process();
        let _ = ip(&["netns", "del", &self.netns]);
        if let Ok(net) = Network::get() {
            net.release(self.n);
        }
    }
}

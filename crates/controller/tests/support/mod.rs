//! Shared by the ingress controller's end-to-end tests: a controller running in-process
//! under the ServiceAccount and ClusterRole of `deploy/`, plain HTTP requests, objects.
#![allow(dead_code)]

pub mod gateway_crds;

use clap::Parser;
use kube::api::Api;
use serde::de::DeserializeOwned;
use sluice_controller::cluster::{Controller, ControllerArgs};
use sluice_testenv::ControlPlane;
use std::net::SocketAddr;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    args: ControllerArgs,
}

/// One test's world: its namespace, its own IngressClass and controller name, so tests that
/// share the control plane never see each other's objects.
pub struct World {
    pub cp: &'static ControlPlane,
    pub admin: kube::Client,
    pub ns: String,
    pub class: String,
    pub controller_name: String,
}

const RBAC: &str = include_str!("../../../../deploy/base/rbac.yaml");
const NAMESPACE: &str = include_str!("../../../../deploy/base/namespace.yaml");

impl World {
    pub async fn new(prefix: &str) -> anyhow::Result<World> {
        let cp = ControlPlane::shared().await?;
        let admin = cp.client();
        sluice_testenv::apply_yaml(&admin, NAMESPACE).await?;
        sluice_testenv::apply_yaml(&admin, RBAC).await?;
        let ns = cp.create_namespace(prefix).await?;
        let class = format!("c-{ns}");
        let controller_name = format!("sluice.dev/{ns}");
        let world = World {
            cp,
            admin,
            ns,
            class,
            controller_name,
        };
        // deploy/ grants the Lease in sluice-system only; each test elects in its own
        // namespace (`--election-namespace`), so the same rights go there.
        world
            .create(serde_json::json!({
                "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
                "metadata": {"name": "sluice-election"},
                "rules": [{"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
                           "verbs": ["get", "create", "update"]}],
            }))
            .await?;
        world
            .create(serde_json::json!({
                "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                "metadata": {"name": "sluice-election"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                            "name": "sluice-election"},
                "subjects": [{"kind": "ServiceAccount", "name": "sluice",
                              "namespace": "sluice-system"}],
            }))
            .await?;
        world
            .create(serde_json::json!({
                "apiVersion": "networking.k8s.io/v1", "kind": "IngressClass",
                "metadata": {"name": world.class},
                "spec": {"controller": world.controller_name},
            }))
            .await?;
        Ok(world)
    }

    /// Creates an object (JSON with apiVersion/kind) in the world's namespace.
    pub async fn create(&self, v: serde_json::Value) -> anyhow::Result<()> {
        let mut v = v;
        let cluster_scoped = matches!(
            v.get("kind").and_then(|k| k.as_str()),
            Some("IngressClass" | "GatewayClass" | "Namespace")
        );
        if let Some(m) = v.get_mut("metadata").and_then(|m| m.as_object_mut())
            && !m.contains_key("namespace")
            && !cluster_scoped
        {
            m.insert("namespace".into(), self.ns.clone().into());
        }
        let yaml = yaml_serde::to_string(&v)?;
        sluice_testenv::apply_yaml(&self.admin, &yaml).await
    }

    pub fn api<K>(&self) -> Api<K>
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
            + Clone
            + DeserializeOwned
            + std::fmt::Debug,
    {
        Api::namespaced(self.admin.clone(), &self.ns)
    }

    /// The controller's flags for this world; `extra` are appended. `--all-namespaces` (a
    /// test-only word) leaves out `--watch-namespace`.
    pub fn args(&self, extra: &[&str]) -> anyhow::Result<ControllerArgs> {
        let cluster_wide = extra.contains(&"--all-namespaces");
        let extra: Vec<&str> = extra
            .iter()
            .copied()
            .filter(|a| *a != "--all-namespaces")
            .collect();
        let extra = &extra[..];
        let defaults = [
            ("--watch-namespace", self.ns.as_str()),
            ("--ingress-class", &self.class),
            ("--controller-class", &self.controller_name),
            ("--election-namespace", &self.ns),
            ("--identity", "test-replica"),
            ("--http-addr", "127.0.0.1:0"),
            ("--https-addr", "127.0.0.1:0"),
            ("--admin-addr", "127.0.0.1:0"),
            ("--shutdown-delay", "0s"),
            ("--lease-duration", "3s"),
            ("--workers", "2"),
        ];
        let mut argv = vec!["test".to_string()];
        for (flag, value) in defaults {
            if cluster_wide && flag == "--watch-namespace" {
                continue;
            }
            if !extra.contains(&flag) {
                argv.extend([flag.to_string(), value.to_string()]);
            }
        }
        argv.extend(extra.iter().map(|s| s.to_string()));
        Ok(Cli::try_parse_from(argv)?.args)
    }

    /// Starts the controller in-process as ServiceAccount sluice-system/sluice.
    pub async fn start(&self, extra: &[&str]) -> anyhow::Result<Running> {
        let client = self
            .cp
            .service_account_client("sluice-system", "sluice")
            .await?;
        let controller = Controller::start(self.args(extra)?, client).await?;
        let (http, https, admin) = (
            controller.http_addr(),
            controller.https_addr(),
            controller.admin_addr(),
        );
        let gateway_api = controller.gateway_api();
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(controller.serve(async move {
            let _ = rx.await;
        }));
        Ok(Running {
            http,
            https,
            admin,
            gateway_api,
            stop: Some(tx),
            task: Some(task),
        })
    }

    /// A Service `name` selecting `app=<name>` on port 80 (named http) -> 8080.
    pub async fn service(&self, name: &str) -> anyhow::Result<()> {
        self.create(serde_json::json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": name},
            "spec": {"selector": {"app": name}, "ports": [{"name": "http", "port": 80, "targetPort": 8080}]},
        }))
        .await
    }

    /// A pod of Service `app` running the echo backend on 8080.
    pub async fn pod(&self, app: &str, name: &str) -> anyhow::Result<sluice_testenv::PodHost> {
        let mut pod = sluice_testenv::PodHost::create(
            &self.admin,
            &self.ns,
            name,
            &[("app", app)],
            &[("http", 8080)],
        )
        .await?;
        pod.run_echo(8080, app).await?;
        Ok(pod)
    }

    /// An Ingress of this world's class with the given rules (JSON array).
    pub async fn ingress(&self, name: &str, spec: serde_json::Value) -> anyhow::Result<()> {
        let mut spec = spec;
        if let Some(o) = spec.as_object_mut() {
            o.entry("ingressClassName")
                .or_insert(self.class.clone().into());
        }
        self.create(serde_json::json!({
            "apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
            "metadata": {"name": name}, "spec": spec,
        }))
        .await
    }
}

/// A running controller; stopped (and awaited) on drop of the test via [`Running::stop`].
pub struct Running {
    pub http: SocketAddr,
    pub https: SocketAddr,
    pub admin: SocketAddr,
    /// Whether the controller watches the Gateway API kinds.
    pub gateway_api: bool,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<anyhow::Result<()>>>,
}

impl Running {
    pub async fn stop(mut self) -> anyhow::Result<()> {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        if let Some(t) = self.task.take() {
            tokio::time::timeout(Duration::from_secs(20), t).await???;
        }
        Ok(())
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(t) = self.task.take() {
            t.abort();
        }
    }
}

/// A response: status, and the echo backend's JSON when it answered.
#[derive(Debug)]
pub struct Reply {
    pub status: u16,
    pub body: String,
}

impl Reply {
    pub fn json(&self) -> Option<serde_json::Value> {
        serde_json::from_str(&self.body).ok()
    }
    /// The echo backend's service name, or "" when something else answered.
    pub fn service(&self) -> String {
        self.json()
            .and_then(|j| j["service"].as_str().map(String::from))
            .unwrap_or_default()
    }
    pub fn pod(&self) -> String {
        self.json()
            .and_then(|j| j["pod"].as_str().map(String::from))
            .unwrap_or_default()
    }
}

/// GET `path` with `Host: host` over a fresh connection.
pub async fn get(addr: SocketAddr, host: &str, path: &str) -> anyhow::Result<Reply> {
    let fut = async {
        let mut s = tokio::net::TcpStream::connect(addr).await?;
        let req = format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n");
        s.write_all(req.as_bytes()).await?;
        let mut buf = Vec::new();
        s.read_to_end(&mut buf).await?;
        parse(&buf)
    };
    tokio::time::timeout(Duration::from_secs(10), fut).await?
}

/// A response read to its end: status line and body (dechunked).
pub fn parse(buf: &[u8]) -> anyhow::Result<Reply> {
    let text = String::from_utf8_lossy(buf);
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| anyhow::anyhow!("no status line in {head:?}"))?;
    let chunked = head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked");
    let body = if chunked {
        dechunk(body)
    } else {
        body.to_string()
    };
    Ok(Reply { status, body })
}

/// The body of a chunked HTTP/1.1 response (framing removed).
pub fn dechunk(mut s: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = s.split_once("\r\n") {
        let Ok(n) = usize::from_str_radix(size.trim(), 16) else {
            break;
        };
        if n == 0 || rest.len() < n {
            break;
        }
        out.push_str(&rest[..n]);
        s = rest[n..].trim_start_matches("\r\n");
    }
    out
}

/// Polls until `host` `path` is answered by `service` (or with `status` when service is "").
/// A readiness wait, not a measurement: its limit covers a controller's start, the
/// informers' sync and a pod's start on a loaded 2-core CI machine.
pub async fn until_routed(
    addr: SocketAddr,
    host: &str,
    path: &str,
    service: &str,
    status: u16,
) -> anyhow::Result<()> {
    sluice_testenv::eventually(
        Duration::from_secs(60),
        &format!("{host}{path} -> {service} {status}"),
        || async {
            let r = get(addr, host, path).await.ok()?;
            (r.status == status && r.service() == service).then_some(())
        },
    )
    .await
}

/// A Deployment `echo` of `replicas` sluice-echo pods (port 8080, ready on `/healthz`,
/// `POD_NAME` from the downward API) with `grace` seconds to terminate.
pub fn echo_deployment(replicas: u32, grace: u32) -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "echo"},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": "echo"}},
            "template": {
                "metadata": {"labels": {"app": "echo"}},
                "spec": {
                    "terminationGracePeriodSeconds": grace,
                    "containers": [{
                        "name": "echo", "image": "sluice-echo:test",
                        "args": ["--listen", "0.0.0.0:8080", "--service", "echo"],
                        "env": [{"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
                        "ports": [{"name": "http", "containerPort": 8080}],
                        "readinessProbe": {"httpGet": {"path": "/healthz", "port": 8080}, "periodSeconds": 1},
                    }],
                },
            },
        },
    })
}

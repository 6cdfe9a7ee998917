//! A real control plane: etcd, kube-apiserver, kube-controller-manager and kube-scheduler on
//! loopback.

use crate::binaries::control_plane_bin_dir;
use crate::pki::Pki;
use crate::ports::free_port;
use crate::supervisor::{Supervised, at_exit};
use anyhow::{Context, bail};
use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{Namespace, Node, ServiceAccount};
use kube::api::{Api, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// Name of the Node every [`crate::PodHost`] is scheduled on.
pub const NODE_NAME: &str = "sluice-test-node";

const READY_TIMEOUT: Duration = Duration::from_secs(60);

/// kube-controller-manager's controllers: what Deployments, EndpointSlices, ServiceAccount
/// tokens, DaemonSets and namespace deletion need. No node lifecycle controller: test Nodes have no kubelet
/// whose heartbeat it would wait for. No root CA publisher: its ConfigMap in every namespace
/// would show in the informer tests' ConfigMap counts.
pub const CONTROLLERS: &str = "garbage-collector-controller,namespace-controller,\
deployment-controller,replicaset-controller,endpointslice-controller,\
endpointslice-mirroring-controller,serviceaccount-controller,serviceaccount-token-controller,\
daemonset-controller";

/// etcd + kube-apiserver + kube-controller-manager (the controllers in [`CONTROLLERS`]) +
/// kube-scheduler in a temp dir, on free loopback ports.
///
/// Dropping it kills the processes and removes the directory. [`ControlPlane::shared`] gives
/// one instance per test process, torn down when the process exits.
pub struct ControlPlane {
    dir: PathBuf,
    keep_dir: bool,
    etcd_port: u16,
    apiserver_port: u16,
    token: String,
    etcd: Mutex<Option<Supervised>>,
    apiserver: Mutex<Option<Supervised>>,
    controller_manager: Mutex<Option<Supervised>>,
    scheduler: Mutex<Option<Supervised>>,
    config: kube::Config,
    kubeconfig: PathBuf,
    pki: Pki,
    started_in: Duration,
}

impl std::fmt::Debug for ControlPlane {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ControlPlane")
            .field("dir", &self.dir)
            .field("apiserver", &self.apiserver_addr())
            .field("etcd", &self.etcd_endpoint())
            .finish()
    }
}

impl ControlPlane {
    /// One control plane per test process, started on first use and stopped at exit.
    ///
    /// `cargo test` runs all tests of one test binary in one process, so they share it; give
    /// each test its own namespace ([`ControlPlane::create_namespace`]).
    pub async fn shared() -> anyhow::Result<&'static ControlPlane> {
        static SHARED: tokio::sync::OnceCell<&'static ControlPlane> =
            tokio::sync::OnceCell::const_new();
        SHARED
            .get_or_try_init(|| async {
                let cp: &'static ControlPlane = Box::leak(Box::new(ControlPlane::start().await?));
                at_exit(move || cp.stop());
                Ok::<_, anyhow::Error>(cp)
            })
            .await
            .copied()
    }

    /// Starts a fresh control plane and waits until it serves and has a Node.
    pub async fn start() -> anyhow::Result<ControlPlane> {
        let began = Instant::now();
        crate::network::sweep_stale();
        let bin = control_plane_bin_dir()?;
        let etcd_bin = bin.join("etcd");
        // Removed by the guard until `cp` exists, then by `cp`'s Drop.
        let guard = tempfile::Builder::new()
            .prefix(&format!("sluice-cp-{}-", std::process::id()))
            .tempdir()
            .context("create the control plane's temp dir")?;
        let dir = guard.path().to_path_buf();
        let keep_dir = std::env::var_os("SLUICE_TESTENV_KEEP").is_some();

        let etcd_port = free_port()?;
        let peer_port = free_port()?;
        let apiserver_port = free_port()?;
        let kcm_port = free_port()?;
        let scheduler_port = free_port()?;
        let token = random_token();

        std::fs::write(
            dir.join("tokens.csv"),
            format!("{token},admin,admin,system:masters\n"),
        )?;
        run_ok(
            Command::new("openssl")
                .args(["genrsa", "-out"])
                .arg(dir.join("sa.key"))
                .arg("2048"),
        )?;
        run_ok(
            Command::new("openssl")
                .args(["rsa", "-in"])
                .arg(dir.join("sa.key"))
                .args(["-pubout", "-out"])
                .arg(dir.join("sa.pub")),
        )?;
        let pki = crate::pki::write(&dir).context("the test cluster's certificates")?;
        let kubeconfig = dir.join("kubeconfig");
        std::fs::write(&kubeconfig, kubeconfig_yaml(apiserver_port, &token))?;

        let mut etcd = Command::new(etcd_bin);
        etcd.arg("--data-dir")
            .arg(dir.join("etcd"))
            .arg(format!("--listen-client-urls=http://127.0.0.1:{etcd_port}"))
            .arg(format!(
                "--advertise-client-urls=http://127.0.0.1:{etcd_port}"
            ))
            .arg(format!("--listen-peer-urls=http://127.0.0.1:{peer_port}"))
            .arg(format!(
                "--initial-advertise-peer-urls=http://127.0.0.1:{peer_port}"
            ))
            .arg(format!(
                "--initial-cluster=default=http://127.0.0.1:{peer_port}"
            ))
            // A test's data need not survive a crash of the machine.
            .arg("--unsafe-no-fsync");
        let etcd = spawn_logged("etcd", etcd, &dir)?;

        let mut cp = ControlPlane {
            dir: dir.clone(),
            keep_dir,
            etcd_port,
            apiserver_port,
            token,
            etcd: Mutex::new(Some(etcd)),
            apiserver: Mutex::new(None),
            controller_manager: Mutex::new(None),
            scheduler: Mutex::new(None),
            config: config_from(&kubeconfig).await?,
            kubeconfig: kubeconfig.clone(),
            pki: pki.clone(),
            started_in: Duration::ZERO,
        };
        let _ = guard.keep();
        cp.start_apiserver().await?;

        let mut kcm = Command::new(bin.join("kube-controller-manager"));
        kcm.arg(format!("--kubeconfig={}", kubeconfig.display()))
            .arg("--leader-elect=false")
            .arg(format!("--controllers={CONTROLLERS}"))
            .arg(format!("--secure-port={kcm_port}"))
            .arg("--bind-address=127.0.0.1")
            .arg(format!("--cert-dir={}", dir.join("kcm-certs").display()))
            .arg("--concurrent-gc-syncs=5")
            .arg(format!(
                "--service-account-private-key-file={}",
                dir.join("sa.key").display()
            ))
            // The CA put into ServiceAccount token Secrets.
            .arg(format!("--root-ca-file={}", pki.ca.display()));
        *lock(&cp.controller_manager) = Some(spawn_logged("kube-controller-manager", kcm, &dir)?);

        let mut scheduler = Command::new(bin.join("kube-scheduler"));
        scheduler
            .arg(format!("--kubeconfig={}", kubeconfig.display()))
            .arg("--leader-elect=false")
            .arg(format!("--secure-port={scheduler_port}"))
            .arg("--bind-address=127.0.0.1")
            .arg(format!(
                "--cert-dir={}",
                dir.join("scheduler-certs").display()
            ));
        *lock(&cp.scheduler) = Some(spawn_logged("kube-scheduler", scheduler, &dir)?);

        let client = cp.client();
        let nodes: Api<Node> = Api::all(client.clone());
        let node: Node = serde_json::from_value(serde_json::json!({
            "metadata": {"name": NODE_NAME, "labels": {"kubernetes.io/hostname": NODE_NAME}},
        }))?;
        nodes
            .create(&PostParams::default(), &node)
            .await
            .context("create the test Node")?;
        // The controller manager answers on its secure port once its controllers run.
        cp.wait_for(
            || std::net::TcpStream::connect(("127.0.0.1", kcm_port)).is_ok(),
            "kube-controller-manager",
            &cp.controller_manager,
        )
        .await?;
        cp.wait_for(
            || std::net::TcpStream::connect(("127.0.0.1", scheduler_port)).is_ok(),
            "kube-scheduler",
            &cp.scheduler,
        )
        .await?;
        cp.started_in = began.elapsed();
        tracing::info!(started_in = ?cp.started_in, dir = %dir.display(), "control plane ready");
        Ok(cp)
    }

    /// The node agent of this control plane, started on first use and stopped at exit.
    pub async fn node_agent(&'static self) -> anyhow::Result<&'static crate::NodeAgent> {
        static AGENT: tokio::sync::OnceCell<&'static crate::NodeAgent> =
            tokio::sync::OnceCell::const_new();
        AGENT
            .get_or_try_init(|| async {
                let agent: &'static crate::NodeAgent = Box::leak(Box::new(
                    crate::NodeAgent::start(self.config(), self.apiserver_port, &self.pki).await?,
                ));
                // Registered after the control plane's hook, so it runs before it.
                at_exit(move || agent.stop());
                Ok::<_, anyhow::Error>(agent)
            })
            .await
            .copied()
    }

    /// How long [`ControlPlane::start`] took, to readiness.
    pub fn started_in(&self) -> Duration {
        self.started_in
    }

    /// A fresh admin client. Create it inside the runtime that uses it.
    pub fn client(&self) -> kube::Client {
        kube::Client::try_from(self.config.clone()).expect("admin config is valid")
    }

    /// The admin configuration (bearer token, TLS verification off).
    pub fn config(&self) -> kube::Config {
        self.config.clone()
    }

    /// Path of a kubeconfig file for the admin user.
    pub fn kubeconfig_path(&self) -> &Path {
        &self.kubeconfig
    }

    /// The API server's address.
    pub fn apiserver_addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.apiserver_port))
    }

    /// etcd's client URL, e.g. for compaction in tests.
    pub fn etcd_endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.etcd_port)
    }

    /// The control plane's temp dir (logs: `etcd.log`, `kube-apiserver.log`, ...).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Creates a namespace with a unique name starting with `prefix`.
    pub async fn create_namespace(&self, prefix: &str) -> anyhow::Result<String> {
        static N: AtomicU32 = AtomicU32::new(0);
        let name = format!(
            "{prefix}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        );
        let ns: Namespace =
            serde_json::from_value(serde_json::json!({"metadata": {"name": name}}))?;
        Api::<Namespace>::all(self.client())
            .create(&PostParams::default(), &ns)
            .await
            .with_context(|| format!("create namespace {name}"))?;
        Ok(name)
    }

    /// A client authenticated as ServiceAccount `namespace/name` (created when missing), by a
    /// token from the TokenRequest API: what a controller deployed with RBAC would see.
    pub async fn service_account_client(
        &self,
        namespace: &str,
        name: &str,
    ) -> anyhow::Result<kube::Client> {
        let config = self.service_account_config(namespace, name).await?;
        Ok(kube::Client::try_from(config)?)
    }

    /// A kubeconfig file (in the control plane's dir) for ServiceAccount `namespace/name`,
    /// as [`ControlPlane::service_account_client`] authenticates: for a controller run as a
    /// process of its own.
    pub async fn service_account_kubeconfig(
        &self,
        namespace: &str,
        name: &str,
    ) -> anyhow::Result<PathBuf> {
        let token = self.service_account_token(namespace, name).await?;
        let path = self.dir.join(format!("kubeconfig-{namespace}-{name}"));
        std::fs::write(&path, kubeconfig_yaml(self.apiserver_port, &token))?;
        Ok(path)
    }

    /// A token of ServiceAccount `namespace/name` (created when missing), valid a day.
    async fn service_account_token(&self, namespace: &str, name: &str) -> anyhow::Result<String> {
        let sas: Api<ServiceAccount> = Api::namespaced(self.client(), namespace);
        if sas.get_opt(name).await?.is_none() {
            let sa: ServiceAccount =
                serde_json::from_value(serde_json::json!({"metadata": {"name": name}}))?;
            sas.create(&PostParams::default(), &sa).await?;
        }
        let request = TokenRequest {
            spec: TokenRequestSpec {
                audiences: vec!["https://kubernetes.default.svc".into()],
                expiration_seconds: Some(3600 * 24),
                ..Default::default()
            },
            ..Default::default()
        };
        let issued = sas
            .create_token_request(name, &PostParams::default(), &request)
            .await
            .with_context(|| format!("TokenRequest for {namespace}/{name}"))?;
        let token = issued
            .status
            .map(|s| s.token)
            .context("TokenRequest returned no token")?;
        Ok(token)
    }

    /// The configuration behind [`ControlPlane::service_account_client`].
    pub async fn service_account_config(
        &self,
        namespace: &str,
        name: &str,
    ) -> anyhow::Result<kube::Config> {
        let token = self.service_account_token(namespace, name).await?;
        let mut config = self.config.clone();
        config.auth_info = Default::default();
        config.auth_info.token = Some(token.into());
        config.default_namespace = namespace.to_string();
        Ok(config)
    }

    /// Stops kube-apiserver (etcd and the controller manager keep running).
    pub fn stop_apiserver(&self) {
        if let Some(mut p) = lock(&self.apiserver).take() {
            p.kill();
        }
    }

    /// Starts kube-apiserver on its port and waits until it is ready.
    pub async fn start_apiserver(&self) -> anyhow::Result<()> {
        let bin = control_plane_bin_dir()?;
        let d = &self.dir;
        let mut cmd = Command::new(bin.join("kube-apiserver"));
        cmd.arg(format!("--etcd-servers={}", self.etcd_endpoint()))
            .arg(format!("--secure-port={}", self.apiserver_port))
            .arg("--bind-address=127.0.0.1")
            .arg(format!("--cert-dir={}", d.join("certs").display()))
            .arg(format!(
                "--token-auth-file={}",
                d.join("tokens.csv").display()
            ))
            .arg("--authorization-mode=RBAC")
            .arg(format!(
                "--service-account-key-file={}",
                d.join("sa.pub").display()
            ))
            .arg(format!(
                "--service-account-signing-key-file={}",
                d.join("sa.key").display()
            ))
            .arg("--service-account-issuer=https://kubernetes.default.svc")
            .arg("--service-cluster-ip-range=10.96.0.0/16")
            .arg("--disable-admission-plugins=ServiceAccount")
            // Admission webhooks (and aggregated APIs) named by Service are reached at a ready
            // endpoint's pod IP on the bridge, as no cluster DNS or kube-proxy runs here; the
            // TLS name checked is still the Service's (`NAME.NAMESPACE.svc`).
            .arg("--enable-aggregator-routing=true")
            // Signed by the test CA and naming every pod gateway: pods verify it (in-cluster
            // config) when they reach the API server through the node agent.
            .arg(format!(
                "--tls-cert-file={}",
                self.pki.serving_cert.display()
            ))
            .arg(format!(
                "--tls-private-key-file={}",
                self.pki.serving_key.display()
            ))
            // pods/log and friends go to the node agent's kubelet endpoint, at the Node's
            // InternalIP (its other address, the Hostname, resolves nowhere), over mutual TLS.
            .arg("--kubelet-preferred-address-types=InternalIP")
            .arg(format!(
                "--kubelet-certificate-authority={}",
                self.pki.ca.display()
            ))
            .arg(format!(
                "--kubelet-client-certificate={}",
                self.pki.kubelet_client_cert.display()
            ))
            .arg(format!(
                "--kubelet-client-key={}",
                self.pki.kubelet_client_key.display()
            ))
            .arg("--profiling=false");
        *lock(&self.apiserver) = Some(spawn_logged("kube-apiserver", cmd, d)?);
        let deadline = Instant::now() + READY_TIMEOUT;
        let client = self.client();
        loop {
            if let Some(status) = lock(&self.apiserver).as_mut().and_then(Supervised::exited) {
                bail!(
                    "kube-apiserver exited ({status}):\n{}",
                    log_tail(d, "kube-apiserver")
                );
            }
            let req = http::Request::get("/readyz").body(Vec::new())?;
            if let Ok(body) = client.request_text(req).await
                && body.trim() == "ok"
            {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!(
                    "kube-apiserver not ready in {READY_TIMEOUT:?}:\n{}",
                    log_tail(d, "kube-apiserver")
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Stops and starts kube-apiserver (same port, same etcd): watches break, state stays.
    pub async fn restart_apiserver(&self) -> anyhow::Result<()> {
        self.stop_apiserver();
        self.start_apiserver().await
    }

    async fn wait_for(
        &self,
        ready: impl Fn() -> bool,
        name: &str,
        process: &Mutex<Option<Supervised>>,
    ) -> anyhow::Result<()> {
        let deadline = Instant::now() + READY_TIMEOUT;
        while !ready() {
            if let Some(status) = lock(process).as_mut().and_then(Supervised::exited) {
                bail!("{name} exited ({status}):\n{}", log_tail(&self.dir, name));
            }
            if Instant::now() > deadline {
                bail!(
                    "{name} not ready in {READY_TIMEOUT:?}:\n{}",
                    log_tail(&self.dir, name)
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Ok(())
    }

    /// Kills every process and removes the directory (unless `SLUICE_TESTENV_KEEP` is set).
    pub fn stop(&self) {
        for p in [
            &self.scheduler,
            &self.controller_manager,
            &self.apiserver,
            &self.etcd,
        ] {
            if let Some(mut p) = lock(p).take() {
                p.kill();
            }
        }
        if !self.keep_dir {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }

    /// Process ids of etcd, kube-apiserver, kube-controller-manager and kube-scheduler (those
    /// running).
    pub fn pids(&self) -> Vec<u32> {
        [
            &self.etcd,
            &self.apiserver,
            &self.controller_manager,
            &self.scheduler,
        ]
        .iter()
        .filter_map(|p| lock(p).as_ref().and_then(Supervised::id))
        .collect()
    }

    /// The PEM file of the CA that signed the API server's serving certificate: what pods
    /// find as `ca.crt` next to their ServiceAccount token.
    pub fn ca_path(&self) -> &Path {
        &self.pki.ca
    }

    /// The admin bearer token.
    pub fn admin_token(&self) -> &str {
        &self.token
    }
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        self.stop();
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn spawn_logged(name: &str, mut cmd: Command, dir: &Path) -> anyhow::Result<Supervised> {
    let log = std::fs::File::create(dir.join(format!("{name}.log")))?;
    cmd.stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log);
    Supervised::spawn(name, cmd).with_context(|| format!("start {name}"))
}

fn run_ok(cmd: &mut Command) -> anyhow::Result<()> {
    let out = cmd.output().with_context(|| format!("run {cmd:?}"))?;
    if !out.status.success() {
        bail!("{cmd:?} failed: {}", String::from_utf8_lossy(&out.stderr));
    }
    Ok(())
}

fn log_tail(dir: &Path, name: &str) -> String {
    let text = std::fs::read_to_string(dir.join(format!("{name}.log"))).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(30)..].join("\n")
}

fn random_token() -> String {
    let mut bytes = [0u8; 16];
    if let Ok(mut f) = std::fs::File::open("/dev/urandom") {
        use std::io::Read;
        let _ = f.read_exact(&mut bytes);
    }
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn kubeconfig_yaml(port: u16, token: &str) -> String {
    format!(
        "apiVersion: v1
kind: Config
clusters:
- name: sluice-test
  cluster:
    server: https://127.0.0.1:{port}
    insecure-skip-tls-verify: true
users:
- name: admin
  user:
    token: {token}
contexts:
- name: sluice-test
  context:
    cluster: sluice-test
    user: admin
    namespace: default
current-context: sluice-test
"
    )
}

async fn config_from(path: &Path) -> anyhow::Result<kube::Config> {
    let kc = Kubeconfig::read_from(path)?;
    Ok(kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default()).await?)
}

//! ingress-manager against a real control plane (etcd + kube-apiserver +
//! kube-controller-manager with the garbage collector), one per test binary.
//!
//! Every test applies `deploy/overlays/ingress-manager/rbac.yaml` with the admin client and runs the
//! controller in-process with the token of its ServiceAccount, so the ClusterRole is proven
//! to suffice. The controller's client counts (and can fail) requests through a tower layer.
//! Tests watch their own namespace; the one cluster-wide test takes [`CLUSTER_WIDE`] for
//! writing so that no namespaced controller runs beside it.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use clap::Parser;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Namespace, Secret, Service, ServiceAccount};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::api::networking::v1::Ingress;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, OwnerReference};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, Resource};
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::json;
use sluice_ingress_manager::{self as ingress_manager, IngressManagerArgs};
use sluice_testenv::{ControlPlane, eventually};
use tokio::sync::{RwLock, oneshot};
use tokio::task::JoinHandle;

const DEPLOY: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../deploy/overlays/ingress-manager"
);
const SA_NAMESPACE: &str = "sluice-system";
const SA_NAME: &str = "sluice-ingress-manager";
const WAIT: Duration = Duration::from_secs(30);

/// Namespaced tests hold it for reading; the cluster-wide test for writing.
static CLUSTER_WIDE: RwLock<()> = RwLock::const_new(());

// ---------------------------------------------------------------------------------------
// Requests seen by the controller's client, and injected faults.

#[derive(Debug, Clone)]
struct Request {
    method: http::Method,
    path: String,
    at: Instant,
}

#[derive(Debug)]
struct Fault {
    method: http::Method,
    path_suffix: String,
    /// Failures left; `None`: fail forever.
    remaining: Option<u32>,
}

#[derive(Debug, Default)]
struct Requests {
    log: Mutex<Vec<Request>>,
    faults: Mutex<Vec<Fault>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Requests {
    fn all(&self) -> Vec<Request> {
        lock(&self.log).clone()
    }

    /// Writes (anything but GET: list and watch are GETs).
    fn writes(&self) -> Vec<Request> {
        self.all()
            .into_iter()
            .filter(|r| r.method != http::Method::GET)
            .collect()
    }

    fn ingress_writes(&self) -> Vec<Request> {
        self.writes()
            .into_iter()
            .filter(|r| r.path.contains("/ingresses"))
            .collect()
    }

    fn event_writes(&self) -> Vec<Request> {
        self.writes()
            .into_iter()
            .filter(|r| r.path.contains("/events"))
            .collect()
    }

    fn matching(&self, method: &http::Method, path_suffix: &str) -> Vec<Request> {
        self.all()
            .into_iter()
            .filter(|r| r.method == *method && r.path.ends_with(path_suffix))
            .collect()
    }

    fn fail(&self, method: http::Method, path_suffix: &str, times: Option<u32>) {
        lock(&self.faults).push(Fault {
            method,
            path_suffix: path_suffix.to_string(),
            remaining: times,
        });
    }

    /// Records `req`; whether it must fail.
    fn record(&self, method: &http::Method, path: &str) -> bool {
        lock(&self.log).push(Request {
            method: method.clone(),
            path: path.to_string(),
            at: Instant::now(),
        });
        let mut faults = lock(&self.faults);
        for f in faults.iter_mut() {
            if f.method == *method && path.ends_with(&f.path_suffix) {
                match &mut f.remaining {
                    None => return true,
                    Some(0) => {}
                    Some(n) => {
                        *n -= 1;
                        return true;
                    }
                }
            }
        }
        false
    }
}

#[derive(Clone)]
struct CountLayer(Arc<Requests>);

impl<S> tower_layer::Layer<S> for CountLayer {
    type Service = Counted<S>;
    fn layer(&self, inner: S) -> Counted<S> {
        Counted {
            inner,
            requests: self.0.clone(),
        }
    }
}

#[derive(Clone)]
struct Counted<S> {
    inner: S,
    requests: Arc<Requests>,
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

impl<S, B> tower_service::Service<http::Request<B>> for Counted<S>
where
    S: tower_service::Service<http::Request<B>>,
    S::Error: Into<BoxError>,
    S::Future: Send + 'static,
    S::Response: Send + 'static,
{
    type Response = S::Response;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        if self.requests.record(req.method(), req.uri().path()) {
            return Box::pin(async { Err::<S::Response, BoxError>("injected fault".into()) });
        }
        let fut = self.inner.call(req);
        Box::pin(async move { fut.await.map_err(Into::into) })
    }
}

// ---------------------------------------------------------------------------------------
// Setup: RBAC from the manifest, a namespace, the controller as its ServiceAccount.

/// Creates every object of a deploy manifest with the admin client; existing ones are fine
/// (the control plane is shared by the tests of this binary).
async fn apply_manifest(admin: &Client, file: &str) -> anyhow::Result<()> {
    let path = format!("{DEPLOY}/{file}");
    let text = std::fs::read_to_string(&path).with_context(|| format!("read {path}"))?;
    for doc in yaml_serde::Deserializer::from_str(&text) {
        let value = serde_json::Value::deserialize(doc)?;
        if value.is_null() {
            continue;
        }
        let ns = value["metadata"]["namespace"]
            .as_str()
            .unwrap_or(SA_NAMESPACE)
            .to_string();
        match value["kind"].as_str() {
            Some("Namespace") => {
                create_tolerant(Api::<Namespace>::all(admin.clone()), value).await?
            }
            Some("ServiceAccount") => {
                create_tolerant(Api::<ServiceAccount>::namespaced(admin.clone(), &ns), value)
                    .await?
            }
            Some("ClusterRole") => {
                create_tolerant(Api::<ClusterRole>::all(admin.clone()), value).await?
            }
            Some("ClusterRoleBinding") => {
                create_tolerant(Api::<ClusterRoleBinding>::all(admin.clone()), value).await?
            }
            Some("Role") => {
                create_tolerant(Api::<Role>::namespaced(admin.clone(), &ns), value).await?
            }
            Some("RoleBinding") => {
                create_tolerant(Api::<RoleBinding>::namespaced(admin.clone(), &ns), value).await?
            }
            other => bail!("{file}: unexpected kind {other:?}"),
        }
    }
    Ok(())
}

async fn create_tolerant<K>(api: Api<K>, value: serde_json::Value) -> anyhow::Result<()>
where
    K: Resource + Clone + DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    let obj: K = serde_json::from_value(value)?;
    match api.create(&PostParams::default(), &obj).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.is_already_exists() => Ok(()),
        Err(e) => Err(e.into()),
    }
}

struct Env {
    cp: &'static ControlPlane,
    admin: Client,
    ns: String,
}

impl Env {
    async fn new() -> anyhow::Result<Env> {
        let cp = ControlPlane::shared().await?;
        let admin = cp.client();
        apply_manifest(&admin, "namespace.yaml").await?;
        apply_manifest(&admin, "rbac.yaml").await?;
        let ns = cp.create_namespace("im").await?;
        Ok(Env { cp, admin, ns })
    }

    fn services(&self) -> Api<Service> {
        Api::namespaced(self.admin.clone(), &self.ns)
    }

    fn ingresses(&self) -> Api<Ingress> {
        Api::namespaced(self.admin.clone(), &self.ns)
    }

    /// Starts the controller as the ServiceAccount, watching this namespace.
    async fn start(&self, extra: &[&str]) -> anyhow::Result<Running> {
        let ns_flag = format!("--watch-namespace={}", self.ns);
        let mut flags = vec![ns_flag.as_str()];
        flags.extend_from_slice(extra);
        self.start_with(&flags, Arc::default()).await
    }

    async fn start_with(&self, flags: &[&str], requests: Arc<Requests>) -> anyhow::Result<Running> {
        // Each test elects on a Lease of its own, in the namespace the manifest's Role covers.
        let lease = format!("--election-id=im-{}", self.ns);
        let lease_ns = format!("--election-namespace={SA_NAMESPACE}");
        let mut all: Vec<&str> = Vec::new();
        if !flags.iter().any(|f| f.starts_with("--election-id")) {
            all.push(&lease);
        }
        all.push(&lease_ns);
        all.extend_from_slice(flags);
        let args = parse_args(&all)?;
        let config = self
            .cp
            .service_account_config(SA_NAMESPACE, SA_NAME)
            .await?;
        let client = kube::client::ClientBuilder::try_from(config)?
            .with_layer(&CountLayer(requests.clone()))
            .build();
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(ingress_manager::run(args, client, async move {
            let _ = stopped.await;
        }));
        Ok(Running {
            stop: Some(stop),
            task,
            requests,
        })
    }

    async fn create_service(&self, svc: Service) -> anyhow::Result<Service> {
        Ok(self.services().create(&PostParams::default(), &svc).await?)
    }

    /// Waits for the Ingress `name` to satisfy `check`.
    async fn ingress_where(
        &self,
        name: &str,
        what: &str,
        check: impl Fn(&Ingress) -> bool,
    ) -> anyhow::Result<Ingress> {
        let api = self.ingresses();
        eventually(WAIT, what, || {
            let api = api.clone();
            let check = &check;
            async move { api.get_opt(name).await.ok().flatten().filter(|i| check(i)) }
        })
        .await
    }

    async fn ingress_gone(&self, name: &str) -> anyhow::Result<()> {
        let api = self.ingresses();
        eventually(WAIT, &format!("Ingress {name} gone"), || {
            let api = api.clone();
            async move { matches!(api.get_opt(name).await, Ok(None)).then_some(()) }
        })
        .await
    }

    async fn events(&self, service: &str, reason: &str) -> Vec<Event> {
        let api: Api<Event> = Api::namespaced(self.admin.clone(), &self.ns);
        let list = api
            .list(&ListParams::default())
            .await
            .map(|l| l.items)
            .unwrap_or_default();
        list.into_iter()
            .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(service))
            .filter(|e| e.reason.as_deref() == Some(reason))
            .collect()
    }

    /// Waits for an Event `reason` on Service `service`.
    async fn event(&self, service: &str, reason: &str) -> anyhow::Result<Event> {
        eventually(
            WAIT,
            &format!("Event {reason} on Service {service}"),
            || async { self.events(service, reason).await.into_iter().next() },
        )
        .await
    }
}

fn parse_args(flags: &[&str]) -> anyhow::Result<IngressManagerArgs> {
    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: IngressManagerArgs,
    }
    let argv = std::iter::once("ingress-manager").chain(flags.iter().copied());
    Ok(Cli::try_parse_from(argv)?.args)
}

/// A controller task; stopped by [`Running::stop`], aborted if dropped (a failed test).
struct Running {
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<anyhow::Result<()>>,
    requests: Arc<Requests>,
}

impl Running {
    async fn stop(mut self) -> anyhow::Result<()> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        match tokio::time::timeout(WAIT, &mut self.task).await {
            Ok(joined) => joined?,
            Err(_) => bail!("controller did not stop within {WAIT:?}"),
        }
    }

    /// Waits until both informers have listed (the controller runs from then on).
    async fn listed(&self) -> anyhow::Result<()> {
        eventually(
            WAIT,
            "the controller's Service and Ingress lists",
            || async {
                let gets: Vec<Request> = self
                    .requests
                    .all()
                    .into_iter()
                    .filter(|r| r.method == http::Method::GET)
                    .collect();
                let listed = |what: &str| gets.iter().any(|r| r.path.ends_with(what));
                (listed("/services") && listed("/ingresses")).then_some(())
            },
        )
        .await
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.task.abort();
    }
}

// ---------------------------------------------------------------------------------------
// Objects.

fn service(name: &str, annotations: &[(&str, &str)], ports: &[(Option<&str>, i32)]) -> Service {
    let ports: Vec<serde_json::Value> = ports
        .iter()
        .map(|(n, p)| match n {
            Some(n) => json!({"name": n, "port": p, "protocol": "TCP"}),
            None => json!({"port": p, "protocol": "TCP"}),
        })
        .collect();
    let annotations: BTreeMap<&str, &str> = annotations.iter().copied().collect();
    let spec = if ports.is_empty() {
        // Only a headless Service may have no ports.
        json!({"clusterIP": "None", "selector": {"app": name}})
    } else {
        json!({"ports": ports, "selector": {"app": name}})
    };
    serde_json::from_value(json!({
        "metadata": {"name": name, "annotations": annotations},
        "spec": spec,
    }))
    .expect("valid Service")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_lease_holder_reconciles_and_a_standby_takes_over() -> anyhow::Result<()> {
    let _shared = CLUSTER_WIDE.read().await;
    let env = Env::new().await?;
    let name = format!("im-{}", env.ns);
    let leases: Api<Lease> = Api::namespaced(env.admin.clone(), SA_NAMESPACE);
    // Another replica holds the Lease, renewed just now, for an hour.
    let now = MicroTime(Timestamp::now());
    let held: Lease = serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {
            "holderIdentity": "the-other-replica",
            "leaseDurationSeconds": 3600,
            "acquireTime": now,
            "renewTime": now,
        }
    }))?;
    leases.create(&PostParams::default(), &held).await?;

    let standby = env
        .start(&["--identity=standby", "--lease-duration=2s"])
        .await?;
    standby.listed().await?;
    env.create_service(annotated("web")).await?;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(
        env.ingresses().get_opt("web").await?.is_none(),
        "a replica without the Lease must not reconcile"
    );
    assert!(standby.requests.ingress_writes().is_empty());

    // The other replica vanished: its Lease runs out (last renewed two hours ago).
    let mut lease = leases.get(&name).await?;
    let past = Timestamp::now() - SignedDuration::from_hours(2);
    if let Some(spec) = lease.spec.as_mut() {
        spec.renew_time = Some(MicroTime(past));
    }
    leases
        .replace(&name, &PostParams::default(), &lease)
        .await?;
    env.ingress_where("web", "the Ingress, from the new leader", |_| true)
        .await?;
    let holder = leases
        .get(&name)
        .await?
        .spec
        .and_then(|s| s.holder_identity);
    assert_eq!(holder.as_deref(), Some("standby"));

    // Stopping hands the Lease back at once, so the next replica need not wait it out.
    standby.stop().await?;
    let holder = leases
        .get(&name)
        .await?
        .spec
        .and_then(|s| s.holder_identity);
    assert_eq!(holder, None, "the Lease is released on shutdown");
    Ok(())
}

fn annotated(name: &str) -> Service {
    service(name, &[("ingress/http", "true")], &[(Some("http"), 80)])
}

fn host(ing: &Ingress) -> Option<&str> {
    ing.spec.as_ref()?.rules.as_ref()?.first()?.host.as_deref()
}

fn backend_port(ing: &Ingress) -> Option<serde_json::Value> {
    let rule = ing.spec.as_ref()?.rules.as_ref()?.first()?;
    let backend = &rule.http.as_ref()?.paths.first()?.backend;
    serde_json::to_value(backend.service.as_ref()?.port.as_ref()?).ok()
}

fn owner_of(svc: &Service) -> OwnerReference {
    OwnerReference {
        api_version: "v1".into(),
        kind: "Service".into(),
        name: svc.metadata.name.clone().unwrap_or_default(),
        uid: svc.metadata.uid.clone().unwrap_or_default(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }
}

fn owned_by(ing: &Ingress, svc: &Service) -> bool {
    ing.metadata.owner_references.as_deref() == Some(&[owner_of(svc)][..])
}

fn foreign_ingress(name: &str, host: &str) -> Ingress {
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {"team": "someone-else"}},
        "spec": {
            "ingressClassName": "other",
            "rules": [{"host": host, "http": {"paths": [{
                "path": "/mine", "pathType": "Exact",
                "backend": {"service": {"name": "elsewhere", "port": {"number": 81}}}
            }]}}]
        }
    }))
    .expect("valid Ingress")
}

async fn remove_annotation(env: &Env, name: &str) -> anyhow::Result<()> {
    let patch = json!({"metadata": {"annotations": {"ingress/http": null}}});
    env.services()
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Behaviour.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn annotated_service_gets_an_owned_ingress() -> anyhow::Result<()> {
    let _shared = CLUSTER_WIDE.read().await;
    let env = Env::new().await?;
    let ctl = env.start(&[]).await?;
    let ns = env.ns.clone();

    let web = env
        .create_service(service(
            "web",
            &[("ingress/http", "")],
            &[(Some("metrics"), 9090), (Some("http"), 8080)],
        ))
        .await?;
    let api = env
        .create_service(service(
            "api",
            &[("ingress/http", "yes"), ("ingress/host", "API.Example.org")],
            &[(None, 8081)],
        ))
        .await?;
    let grpc = env
        .create_service(service(
            "grpc",
            &[("ingress/http", "")],
            &[(Some("grpc"), 9000), (Some("admin"), 9001)],
        ))
        .await?;
    env.create_service(service("plain", &[], &[(Some("http"), 80)]))
        .await?;

    let ing = env.ingress_where("web", "Ingress web", |_| true).await?;
    assert!(
        owned_by(&ing, &web),
        "ownerReference to the Service: {:?}",
        ing.metadata.owner_references
    );
    assert_eq!(host(&ing), Some(format!("web.{ns}.example.com").as_str()));
    let spec = ing.spec.as_ref().context("spec")?;
    assert_eq!(spec.ingress_class_name.as_deref(), Some("sluice"));
    let rules = spec.rules.as_ref().context("rules")?;
    assert_eq!(rules.len(), 1);
    let paths = &rules[0].http.as_ref().context("http")?.paths;
    assert_eq!(paths.len(), 1);
    assert_eq!(paths[0].path.as_deref(), Some("/"));
    assert_eq!(paths[0].path_type, "Prefix");
    assert_eq!(
        paths[0].backend.service.as_ref().map(|s| s.name.as_str()),
        Some("web")
    );
    assert_eq!(
        backend_port(&ing),
        Some(json!({"name": "http"})),
        "the port named http"
    );
    assert_eq!(
        ing.metadata
            .labels
            .as_ref()
            .and_then(|l| l.get("app.kubernetes.io/managed-by"))
            .map(String::as_str),
        Some("sluice-ingress-manager")
    );
    let managers: Vec<(String, String)> = ing
        .metadata
        .managed_fields
        .iter()
        .flatten()
        .map(|m| {
            (
                m.manager.clone().unwrap_or_default(),
                m.operation.clone().unwrap_or_default(),
            )
        })
        .collect();
    assert_eq!(
        managers,
        vec![("sluice-ingress-manager".to_string(), "Apply".to_string())],
        "server-side apply only"
    );

    let ing = env.ingress_where("api", "Ingress api", |_| true).await?;
    assert!(owned_by(&ing, &api));
    assert_eq!(
        host(&ing),
        Some("api.example.org"),
        "host from ingress/host, lower-cased"
    );
    assert_eq!(
        backend_port(&ing),
        Some(json!({"number": 8081})),
        "first port, unnamed: by number"
    );

    let ing = env.ingress_where("grpc", "Ingress grpc", |_| true).await?;
    assert!(owned_by(&ing, &grpc));
    assert_eq!(
        backend_port(&ing),
        Some(json!({"name": "grpc"})),
        "first port, named: by name"
    );

    let created = env.event("web", "IngressCreated").await?;
    assert_eq!(created.type_.as_deref(), Some("Normal"));
    assert_eq!(
        created.reporting_controller.as_deref(),
        Some("sluice-ingress-manager")
    );

    // The controller has handled everything it was told about; "plain" has no Ingress.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        env.ingresses().get_opt("plain").await?.is_none(),
        "no annotation, no Ingress"
    );
    assert_eq!(
        ctl.requests.ingress_writes().len(),
        3,
        "one apply per Ingress: {:?}",
        ctl.requests.ingress_writes()
    );
    ctl.stop().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flags_set_host_template_and_class() -> anyhow::Result<()> {
    let _shared = CLUSTER_WIDE.read().await;
    let env = Env::new().await?;
    let ctl = env
        .start(&[
            "--host-template={namespace}--{name}.apps.test",
            "--ingress-class=internal",
            "--workers=1",
        ])
        .await?;
    let svc = env.create_service(annotated("shop")).await?;
    let ing = env.ingress_where("shop", "Ingress shop", |_| true).await?;
    assert!(owned_by(&ing, &svc));
    assert_eq!(
        host(&ing),
        Some(format!("{}--shop.apps.test", env.ns).as_str())
    );
    assert_eq!(
        ing.spec
            .as_ref()
            .and_then(|s| s.ingress_class_name.as_deref()),
        Some("internal")
    );
    ctl.stop().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn service_without_ports_or_with_a_bad_host_gets_a_warning_and_no_ingress()
-> anyhow::Result<()> {
    let _shared = CLUSTER_WIDE.read().await;
    let env = Env::new().await?;
    let ctl = env.start(&[]).await?;
    env.create_service(service("headless", &[("ingress/http", "")], &[]))
        .await?;
    env.create_service(service(
        "badhost",
        &[("ingress/http", ""), ("ingress/host", "not_a_host!")],
        &[(None, 80)],
    ))
    .await?;

    let warning = env.event("headless", "NoServicePorts").await?;
    assert_eq!(warning.type_.as_deref(), Some("Warning"));
    let warning = env.event("badhost", "InvalidHost").await?;
    assert_eq!(warning.type_.as_deref(), Some("Warning"));
    assert!(
        warning
            .note
            .as_deref()
            .is_some_and(|n| n.contains("not_a_host!")),
        "{:?}",
        warning.note
    );

    assert!(env.ingresses().get_opt("headless").await?.is_none());
    assert!(env.ingresses().get_opt("badhost").await?.is_none());
    assert!(
        ctl.requests.ingress_writes().is_empty(),
        "{:?}",
        ctl.requests.ingress_writes()
    );

    // Fixing the Service fixes the Ingress.
    let patch = json!({"metadata": {"annotations": {"ingress/host": "good.example.com"}}});
    env.services()
        .patch("badhost", &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    env.ingress_where("badhost", "Ingress badhost", |i| {
        host(i) == Some("good.example.com")
    })
    .await?;
    ctl.stop().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn removing_the_annotation_deletes_the_owned_ingress() -> anyhow::Result<()> {
    let _shared = CLUSTER_WIDE.read().await;
    let env = Env::new().await?;
    let ctl = env.start(&[]).await?;
    env.create_service(annotated("web")).await?;
    env.create_service(annotated("stays")).await?;
    env.ingress_where("web", "Ingress web", |_| true).await?;
    env.ingress_where("stays", "Ingress stays", |_| true)
        .await?;

    remove_annotation(&env, "web").await?;
    env.ingress_gone("web").await?;
    let deleted = env.event("web", "IngressDeleted").await?;
    assert_eq!(deleted.type_.as_deref(), Some("Normal"));
    assert!(
        env.ingresses().get_opt("stays").await?.is_some(),
        "other Ingresses are untouched"
    );
    assert_eq!(
        ctl.requests
            .matching(&http::Method::DELETE, "/ingresses/web")
            .len(),
        1
    );

    // Back again when the annotation comes back.
    let patch = json!({"metadata": {"annotations": {"ingress/http": ""}}});
    env.services()
        .patch("web", &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    env.ingress_where("web", "Ingress web again", |_| true)
        .await?;
    ctl.stop().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ingress_the_service_does_not_own_is_never_touched() -> anyhow::Result<()> {
    let _shared = CLUSTER_WIDE.read().await;
    let env = Env::new().await?;
    let foreign = env
        .ingresses()
        .create(
            &PostParams::default(),
            &foreign_ingress("web", "theirs.example.com"),
        )
        .await?;
    let ctl = env.start(&[]).await?;
    let svc = env.create_service(annotated("web")).await?;

    let warning = env.event("web", "IngressNotOwned").await?;
    assert_eq!(warning.type_.as_deref(), Some("Warning"));
    let unchanged = |i: &Ingress| {
        i.metadata.resource_version == foreign.metadata.resource_version
            && i.metadata.uid == foreign.metadata.uid
    };
    assert!(
        unchanged(&env.ingresses().get("web").await?),
        "the foreign Ingress was modified"
    );

    // Annotation removed: still not ours, so not deleted.
    remove_annotation(&env, "web").await?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(
        unchanged(&env.ingresses().get("web").await?),
        "the foreign Ingress was modified or deleted"
    );
    assert!(
        ctl.requests.ingress_writes().is_empty(),
        "writes to Ingresses: {:?}",
        ctl.requests.ingress_writes()
    );

    // Once the foreign Ingress is gone, the annotated Service gets its own.
    let patch = json!({"metadata": {"annotations": {"ingress/http": ""}}});
    env.services()
        .patch("web", &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(unchanged(&env.ingresses().get("web").await?));
    env.ingresses()
        .delete("web", &DeleteParams::default())
        .await?;
    let ing = env
        .ingress_where("web", "an owned Ingress web", |i| owned_by(i, &svc))
        .await?;
    assert_eq!(
        host(&ing),
        Some(format!("web.{}.example.com", env.ns).as_str())
    );
    ctl.stop().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_ingress_is_recreated() -> anyhow::Result<()> {
    let _shared = CLUSTER_WIDE.read().await;
    let env = Env::new().await?;
    let ctl = env.start(&[]).await?;
    let svc = env.create_service(annotated("web")).await?;
    let first = env.ingress_where("web", "Ingress web", |_| true).await?;

    env.ingresses()
        .delete("web", &DeleteParams::default())
        .await?;
    let again = env
        .ingress_where("web", "Ingress web recreated", |i| {
            i.metadata.uid != first.metadata.uid
        })
        .await?;
    assert!(owned_by(&again, &svc));
    assert_eq!(host(&again), host(&first));
    ctl.stop().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hand_edited_ingress_is_put_back_and_a_converged_one_is_not_written() -> anyhow::Result<()>
{
    let _shared = CLUSTER_WIDE.read().await;
    let env = Env::new().await?;
    let ctl = env.start(&[]).await?;
    let svc = env.create_service(annotated("web")).await?;
    let want_host = format!("web.{}.example.com", env.ns);
    let original = env.ingress_where("web", "Ingress web", |_| true).await?;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let writes_converged = ctl.requests.ingress_writes().len();
    assert_eq!(writes_converged, 1, "{:?}", ctl.requests.ingress_writes());

    // A field the controller does not manage: an update event, a reconcile, and no write.
    let note = json!({"metadata": {"annotations": {"note": "hand-added"}}});
    env.ingresses()
        .patch("web", &PatchParams::default(), &Patch::Merge(&note))
        .await?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        ctl.requests.ingress_writes().len(),
        writes_converged,
        "wrote although nothing differed"
    );

    // Hand edits of managed fields: host, backend, class, label.
    let edit = json!({
        "metadata": {"labels": {"app.kubernetes.io/managed-by": "me"}},
        "spec": {
            "ingressClassName": "other",
            "rules": [{"host": "hacked.example.com", "http": {"paths": [
                {"path": "/", "pathType": "Prefix", "backend": {"service": {"name": "web", "port": {"number": 1}}}},
                {"path": "/extra", "pathType": "Exact", "backend": {"service": {"name": "evil", "port": {"number": 2}}}}
            ]}}]
        }
    });
    env.ingresses()
        .patch("web", &PatchParams::default(), &Patch::Merge(&edit))
        .await?;
    let restored = env
        .ingress_where("web", "Ingress web put back", |i| {
            i.spec == original.spec
                && i.metadata
                    .labels
                    .as_ref()
                    .and_then(|l| l.get("app.kubernetes.io/managed-by"))
                    .map(String::as_str)
                    == Some("sluice-ingress-manager")
        })
        .await?;
    assert!(owned_by(&restored, &svc));
    assert_eq!(host(&restored), Some(want_host.as_str()));
    assert_eq!(
        restored
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get("note"))
            .map(String::as_str),
        Some("hand-added"),
        "fields of other managers stay"
    );
    assert_eq!(
        restored.metadata.uid, original.metadata.uid,
        "patched, not recreated"
    );
    let updated = env.event("web", "IngressUpdated").await?;
    assert_eq!(updated.type_.as_deref(), Some("Normal"));
    tokio::time::sleep(Duration::from_millis(500)).await;
    let writes = ctl.requests.ingress_writes();
    assert_eq!(
        writes.len(),
        writes_converged + 1,
        "one forced apply: {writes:?}"
    );
    assert_eq!(
        writes.last().map(|w| w.method.clone()),
        Some(http::Method::PATCH)
    );

    // Removing the ownerReference by hand releases the Ingress (as orphaning does): from
    // then on it is not the Service's, so it is left alone and the Service gets a warning.
    let disown = json!({"metadata": {"ownerReferences": null}});
    let orphan = env
        .ingresses()
        .patch("web", &PatchParams::default(), &Patch::Merge(&disown))
        .await?;
    env.event("web", "IngressNotOwned").await?;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let now = env.ingresses().get("web").await?;
    assert_eq!(
        now.metadata.resource_version, orphan.metadata.resource_version,
        "the released Ingress was touched"
    );
    assert_eq!(ctl.requests.ingress_writes().len(), writes_converged + 1);
    ctl.stop().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_the_service_garbage_collects_the_ingress_cluster_wide() -> anyhow::Result<()> {
    // All namespaces: no namespaced controller may run beside this one.
    let _exclusive = CLUSTER_WIDE.write().await;
    let env = Env::new().await?;
    let requests = Arc::new(Requests::default());
    let ctl = env.start_with(&[], requests.clone()).await?;
    env.create_service(annotated("web")).await?;
    let ing = env.ingress_where("web", "Ingress web", |_| true).await?;
    assert!(
        requests.all().iter().any(|r| r.path == "/api/v1/services"),
        "lists Services in all namespaces"
    );

    env.services()
        .delete("web", &DeleteParams::background())
        .await?;
    env.ingress_gone("web").await?;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(
        env.ingresses().get_opt("web").await?.is_none(),
        "not recreated"
    );
    let deletes = requests.matching(
        &http::Method::DELETE,
        &format!("/namespaces/{}/ingresses/web", env.ns),
    );
    assert!(
        deletes.is_empty(),
        "the garbage collector deletes, not the controller: {deletes:?}"
    );
    assert!(ing.metadata.owner_references.is_some());
    ctl.stop().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failing_writes_are_retried_with_backoff_then_dropped() -> anyhow::Result<()> {
    let _shared = CLUSTER_WIDE.read().await;
    let env = Env::new().await?;
    let requests = Arc::new(Requests::default());
    let flaky = format!("/namespaces/{}/ingresses/flaky", env.ns);
    let doomed = format!("/namespaces/{}/ingresses/doomed", env.ns);
    requests.fail(http::Method::PATCH, &flaky, Some(3));
    requests.fail(http::Method::PATCH, &doomed, None);
    let ns_flag = format!("--watch-namespace={}", env.ns);
    let ctl = env
        .start_with(&[&ns_flag, "--max-retries=4"], requests.clone())
        .await?;
    let svc = env.create_service(annotated("flaky")).await?;
    env.create_service(annotated("doomed")).await?;

    // Three failures, then success.
    let ing = env
        .ingress_where("flaky", "Ingress flaky after 3 failures", |_| true)
        .await?;
    assert!(owned_by(&ing, &svc));
    assert_eq!(requests.matching(&http::Method::PATCH, &flaky).len(), 4);

    // One try and 4 retries, each after a longer backoff (5 ms doubling), then dropped.
    let attempts = eventually(WAIT, "5 attempts on doomed", || async {
        let a = requests.matching(&http::Method::PATCH, &doomed);
        (a.len() >= 5).then_some(a)
    })
    .await?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        requests.matching(&http::Method::PATCH, &doomed).len(),
        5,
        "dropped after --max-retries"
    );
    for (i, pair) in attempts.windows(2).enumerate() {
        let gap = pair[1].at - pair[0].at;
        let backoff = Duration::from_millis(5 << i);
        assert!(
            gap >= backoff,
            "retry {} came after {gap:?}, before its backoff {backoff:?}",
            i + 1
        );
    }
    assert!(env.ingresses().get_opt("doomed").await?.is_none());

    // A dropped key comes back with the next change of its Service.
    let touch = json!({"metadata": {"labels": {"touched": "yes"}}});
    env.services()
        .patch("doomed", &PatchParams::default(), &Patch::Merge(&touch))
        .await?;
    eventually(WAIT, "an attempt after the change", || async {
        (requests.matching(&http::Method::PATCH, &doomed).len() > 5).then_some(())
    })
    .await?;
    ctl.stop().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_over_a_converged_state_writes_nothing() -> anyhow::Result<()> {
    let _shared = CLUSTER_WIDE.read().await;
    let env = Env::new().await?;
    let first = env.start(&[]).await?;
    let mut services = Vec::new();
    for (i, name) in ["a", "b", "c", "d", "e"].iter().enumerate() {
        let ports: &[(Option<&str>, i32)] = if i % 2 == 0 {
            &[(Some("http"), 80)]
        } else {
            &[(None, 8080)]
        };
        services.push(
            env.create_service(service(name, &[("ingress/http", "")], ports))
                .await?,
        );
    }
    env.create_service(service("plain", &[], &[(None, 80)]))
        .await?;
    // Unannotated, with a foreign Ingress of its name: also nothing to say on restart.
    env.create_service(service("neighbour", &[], &[(None, 80)]))
        .await?;
    env.ingresses()
        .create(
            &PostParams::default(),
            &foreign_ingress("neighbour", "n.example.com"),
        )
        .await?;
    for svc in &services {
        let name = svc.metadata.name.as_deref().unwrap_or_default();
        env.ingress_where(name, "converged", |i| owned_by(i, svc))
            .await?;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    first.stop().await?;

    let second = env.start(&[]).await?;
    second.listed().await?;
    tokio::time::sleep(Duration::from_secs(3)).await;
    // Renewing its election Lease is the only write allowed.
    let writes: Vec<Request> = second
        .requests
        .writes()
        .into_iter()
        .filter(|r| !r.path.contains("/leases/"))
        .collect();
    assert!(
        writes.is_empty(),
        "a restart over a converged state wrote: {writes:?}"
    );
    assert!(second.requests.event_writes().is_empty());

    // It was running all along: a deletion now is repaired, with one apply.
    env.ingresses()
        .delete("c", &DeleteParams::default())
        .await?;
    env.ingress_where("c", "Ingress c recreated", |i| owned_by(i, &services[2]))
        .await?;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        second.requests.ingress_writes().len(),
        1,
        "{:?}",
        second.requests.ingress_writes()
    );
    second.stop().await
}

/// Creates `n` annotated Services at once (32 requests in flight).
async fn create_many(env: &Env, n: usize) -> anyhow::Result<BTreeMap<String, Service>> {
    let created: Vec<Service> = futures::stream::iter(0..n)
        .map(|i| {
            let svc = service(
                &format!("svc-{i:03}"),
                &[("ingress/http", "")],
                &[(Some("http"), 80), (Some("metrics"), 9000)],
            );
            let api = env.services();
            async move { api.create(&PostParams::default(), &svc).await }
        })
        .buffer_unordered(32)
        .try_collect()
        .await?;
    Ok(created
        .into_iter()
        .map(|s| (s.metadata.name.clone().unwrap_or_default(), s))
        .collect())
}

/// Waits until every Service of `services` has its correct Ingress.
async fn all_correct(env: &Env, services: &BTreeMap<String, Service>) -> anyhow::Result<()> {
    let api = env.ingresses();
    let ns = env.ns.clone();
    let what = format!("{} correct Ingresses", services.len());
    eventually(Duration::from_secs(180), &what, || async {
        let list = api.list(&ListParams::default()).await.ok()?;
        let correct = list
            .items
            .iter()
            .filter(|i| {
                let name = i.metadata.name.as_deref().unwrap_or_default();
                services.get(name).is_some_and(|svc| {
                    owned_by(i, svc)
                        && host(i) == Some(format!("{name}.{ns}.example.com").as_str())
                        && backend_port(i) == Some(json!({"name": "http"}))
                })
            })
            .count();
        (correct == services.len()).then_some(())
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_services_get_two_hundred_ingresses() -> anyhow::Result<()> {
    const N: usize = 200;
    let _shared = CLUSTER_WIDE.read().await;

    // Created at once while the controller runs.
    let env = Env::new().await?;
    let ctl = env.start(&[]).await?;
    ctl.listed().await?;
    let began = Instant::now();
    let services = create_many(&env, N).await?;
    let created_in = began.elapsed();
    all_correct(&env, &services).await?;
    let converged_in = began.elapsed();
    println!(
        "ingress-manager: {N} Services created at once in {created_in:.2?}; \
         {N} correct Ingresses {converged_in:.2?} after the first create"
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    let ingress_writes = ctl.requests.ingress_writes().len();
    println!(
        "ingress-manager: {ingress_writes} Ingress writes, {} Event writes",
        ctl.requests.event_writes().len()
    );
    assert_eq!(ingress_writes, N, "one apply per Ingress");
    ctl.stop().await?;

    // Started over 200 existing Services: the controller's own throughput.
    let env = Env::new().await?;
    let services = create_many(&env, N).await?;
    let began = Instant::now();
    let ctl = env.start(&[]).await?;
    all_correct(&env, &services).await?;
    println!(
        "ingress-manager: started over {N} annotated Services, {N} correct Ingresses after {:.2?}",
        began.elapsed()
    );
    assert_eq!(ctl.requests.ingress_writes().len(), N);
    ctl.stop().await
}

// ---------------------------------------------------------------------------------------
// Flags, client and manifests.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_from_honours_the_kubeconfig_flag() -> anyhow::Result<()> {
    let cp = ControlPlane::shared().await?;
    let path = cp.kubeconfig_path().display().to_string();
    let args = parse_args(&["--kubeconfig", &path])?;
    let client = ingress_manager::client_from(&args).await?;
    let namespaces = Api::<Namespace>::all(client)
        .list(&ListParams::default())
        .await?;
    assert!(
        namespaces
            .items
            .iter()
            .any(|n| n.metadata.name.as_deref() == Some("default"))
    );

    let missing = parse_args(&["--kubeconfig", "/nonexistent/kubeconfig"])?;
    assert!(ingress_manager::client_from(&missing).await.is_err());
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_fails_when_the_caches_cannot_sync() -> anyhow::Result<()> {
    let cp = ControlPlane::shared().await?;
    apply_manifest(&cp.client(), "namespace.yaml").await?;
    // A ServiceAccount without any role: listing is forbidden.
    let client = cp
        .service_account_client(SA_NAMESPACE, "sluice-ingress-manager-no-rbac")
        .await?;
    let args = parse_args(&["--sync-timeout=2s"])?;
    let result = tokio::time::timeout(
        WAIT,
        ingress_manager::run(args, client, std::future::pending()),
    )
    .await?;
    let err = result.err().context("run should fail")?;
    assert!(err.to_string().contains("caches not synced"), "{err:#}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deploy_manifests_are_valid_and_least_privilege() -> anyhow::Result<()> {
    let _shared = CLUSTER_WIDE.read().await;
    let env = Env::new().await?;

    let text = std::fs::read_to_string(format!("{DEPLOY}/deployment.yaml"))?;
    let deployment: Deployment = yaml_serde::from_str(&text)?;
    let spec = deployment.spec.as_ref().context("spec")?;
    assert_eq!(spec.replicas, Some(2), "two replicas, one leading");
    let pod = spec.template.spec.as_ref().context("pod spec")?;
    assert_eq!(pod.service_account_name.as_deref(), Some(SA_NAME));
    assert_eq!(pod.containers.len(), 1);
    let c = &pod.containers[0];
    // The tag comes from the overlay's `images:` (deploy_manifests checks the rendered one).
    assert_eq!(c.image.as_deref(), Some("sluice"));
    assert_eq!(c.image_pull_policy.as_deref(), Some("IfNotPresent"));
    let args = c.args.clone().unwrap_or_default();
    assert_eq!(args.first().map(String::as_str), Some("ingress-manager"));
    // The flags in the manifest parse (the log format is a flag of the `sluice` binary).
    let own: Vec<&str> = args
        .iter()
        .skip(1)
        .map(String::as_str)
        .filter(|a| !a.starts_with("--log-format"))
        .collect();
    let parsed = parse_args(&own)?;
    assert_eq!(parsed.workers, 5);
    assert!(parsed.leader_elect);
    assert_eq!(
        parsed.election.election_id.as_deref(),
        Some(ingress_manager::DEFAULT_ELECTION_ID)
    );
    let env_names: Vec<&str> = c.env.iter().flatten().map(|e| e.name.as_str()).collect();
    assert!(env_names.contains(&"POD_NAME") && env_names.contains(&"POD_NAMESPACE"));
    let sc = c.security_context.as_ref().context("securityContext")?;
    assert_eq!(sc.read_only_root_filesystem, Some(true));
    assert_eq!(sc.run_as_non_root, Some(true));
    assert_eq!(sc.allow_privilege_escalation, Some(false));
    let resources = c.resources.as_ref().context("resources")?;
    assert!(resources.requests.is_some() && resources.limits.is_some());
    // The API server accepts it.
    let deployments: Api<Deployment> = Api::namespaced(env.admin.clone(), SA_NAMESPACE);
    deployments
        .create(
            &PostParams {
                dry_run: true,
                ..PostParams::default()
            },
            &deployment,
        )
        .await?;

    // The ServiceAccount can do what the controller does, and not more.
    let sa = env.cp.service_account_client(SA_NAMESPACE, SA_NAME).await?;
    Api::<Service>::all(sa.clone())
        .list(&ListParams::default())
        .await?;
    Api::<Ingress>::all(sa.clone())
        .list(&ListParams::default())
        .await?;
    let forbidden =
        |r: Result<_, kube::Error>| matches!(r, Err(kube::Error::Api(s)) if s.is_forbidden());
    assert!(forbidden(
        Api::<Secret>::all(sa.clone())
            .list(&ListParams::default())
            .await
            .map(|_| ())
    ));
    assert!(forbidden(
        Api::<Service>::namespaced(sa.clone(), &env.ns)
            .create(&PostParams::default(), &annotated("x"))
            .await
            .map(|_| ())
    ));
    assert!(
        forbidden(
            Api::<Ingress>::namespaced(sa.clone(), &env.ns)
                .get_opt("x")
                .await
                .map(|_| ())
        ),
        "no GET: listers only"
    );
    // Its election Lease: in its own namespace only.
    Api::<Lease>::namespaced(sa.clone(), SA_NAMESPACE)
        .get_opt("sluice-ingress-manager")
        .await?;
    assert!(forbidden(
        Api::<Lease>::namespaced(sa.clone(), &env.ns)
            .get_opt("sluice-ingress-manager")
            .await
            .map(|_| ())
    ));
    Ok(())
}

/// What the forced apply relies on: a resourceVersion in a server-side apply body is a
/// precondition, so an Ingress changed (or replaced) since the lister saw it is not
/// overwritten.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apply_with_a_stale_resource_version_conflicts() -> anyhow::Result<()> {
    let _shared = CLUSTER_WIDE.read().await;
    let env = Env::new().await?;
    let first = env
        .ingresses()
        .create(
            &PostParams::default(),
            &foreign_ingress("web", "a.example.com"),
        )
        .await?;
    let bump = json!({"metadata": {"labels": {"bumped": "yes"}}});
    env.ingresses()
        .patch("web", &PatchParams::default(), &Patch::Merge(&bump))
        .await?;
    let mut stale = foreign_ingress("web", "b.example.com");
    stale.metadata.resource_version = first.metadata.resource_version.clone();
    let params = PatchParams::apply("sluice-ingress-manager").force();
    match env
        .ingresses()
        .patch("web", &params, &Patch::Apply(&stale))
        .await
    {
        Err(kube::Error::Api(s)) if s.is_conflict() => {}
        other => bail!("expected 409 Conflict, got {other:?}"),
    }
    let now = env.ingresses().get("web").await?;
    assert_eq!(host(&now), Some("a.example.com"));
    Ok(())
}

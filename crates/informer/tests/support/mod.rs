//! Helpers shared by the control-plane tests: a severable TCP relay, a request-counting
//! client layer, etcd compaction, an event recorder and store/list comparison.
#![allow(dead_code)]

use std::{
    collections::BTreeMap,
    net::SocketAddr,
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    task::{Context, Poll},
    time::Duration,
};

use anyhow::Context as _;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::{Api, api::ObjectMeta};
use parking_lot::Mutex;
use sluice_informer::{DeletedObject, ResourceEventHandler, Store};
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::{TcpListener, TcpStream},
    task::AbortHandle,
};

/// Every wait in these tests is bounded by this.
pub const WAIT: Duration = Duration::from_secs(90);

pub fn init_tracing() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "warn,sluice_informer=info".into()),
        )
        .with_test_writer()
        .try_init();
}

/// A TCP relay between a client and the API server that the test can sever and resume.
pub struct Relay {
    addr: SocketAddr,
    enabled: Arc<AtomicBool>,
    conns: Arc<Mutex<Vec<AbortHandle>>>,
    accept: AbortHandle,
    counts: Arc<RelayCounts>,
}

/// What a [`Relay`] did, for the message of a test that timed out.
#[derive(Debug, Default)]
struct RelayCounts {
    relayed: AtomicU64,
    refused: AtomicU64,
    upstream_failed: AtomicU64,
    cut: AtomicU64,
}

impl Relay {
    pub async fn start(target: SocketAddr) -> anyhow::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let enabled = Arc::new(AtomicBool::new(true));
        let conns: Arc<Mutex<Vec<AbortHandle>>> = Arc::default();
        let counts = Arc::new(RelayCounts::default());
        let (en, cs, n) = (enabled.clone(), conns.clone(), counts.clone());
        let accept = tokio::spawn(async move {
            loop {
                let Ok((mut inbound, _)) = listener.accept().await else {
                    continue;
                };
                // Checked and registered under the lock sever() takes: a connection is
                // either refused or known to sever(), never relayed past a cut.
                let mut cs = cs.lock();
                if !en.load(Ordering::SeqCst) {
                    n.refused.fetch_add(1, Ordering::Relaxed);
                    drop(inbound);
                    continue;
                }
                n.relayed.fetch_add(1, Ordering::Relaxed);
                let n = n.clone();
                let task = tokio::spawn(async move {
                    match TcpStream::connect(target).await {
                        Ok(mut outbound) => {
                            let _ =
                                tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                        }
                        Err(_) => {
                            n.upstream_failed.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                });
                cs.retain(|h| !h.is_finished());
                cs.push(task.abort_handle());
            }
        })
        .abort_handle();
        Ok(Self {
            addr,
            enabled,
            conns,
            accept,
            counts,
        })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Closes every relayed connection and refuses new ones until [`Relay::resume`].
    pub fn sever(&self) {
        let mut conns = self.conns.lock();
        self.enabled.store(false, Ordering::SeqCst);
        for h in conns.drain(..) {
            if !h.is_finished() {
                self.counts.cut.fetch_add(1, Ordering::Relaxed);
            }
            h.abort();
        }
    }

    /// Connections relayed, refused while severed, whose upstream connect failed, cut by
    /// [`Relay::sever`], and open now: for the message of a test that timed out.
    pub fn describe(&self) -> String {
        let open = self
            .conns
            .lock()
            .iter()
            .filter(|h| !h.is_finished())
            .count();
        let c = &self.counts;
        format!(
            "relay: {} relayed, {} refused while severed, {} upstream connects failed, {} cut, {open} open",
            c.relayed.load(Ordering::Relaxed),
            c.refused.load(Ordering::Relaxed),
            c.upstream_failed.load(Ordering::Relaxed),
            c.cut.load(Ordering::Relaxed),
        )
    }

    pub fn resume(&self) {
        self.enabled.store(true, Ordering::SeqCst);
    }

    /// A config pointing through this relay.
    pub fn config(&self, mut base: kube::Config) -> kube::Config {
        base.cluster_url = format!("https://{}", self.addr).parse().expect("valid url");
        base
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.accept.abort();
        self.sever();
    }
}

/// A tower layer recording the method and URI of every request a client sends.
#[derive(Clone, Default)]
pub struct RecordRequests(pub Arc<Mutex<Vec<String>>>);

impl RecordRequests {
    pub fn requests(&self) -> Vec<String> {
        self.0.lock().clone()
    }
    pub fn watches(&self) -> Vec<String> {
        self.requests()
            .into_iter()
            .filter(|r| r.contains("watch=true") || r.contains("watch=1"))
            .collect()
    }
    pub fn lists(&self) -> Vec<String> {
        self.requests()
            .into_iter()
            .filter(|r| r.starts_with("GET ") && !r.contains("watch="))
            .collect()
    }
}

impl<S> tower_layer::Layer<S> for RecordRequests {
    type Service = Recorded<S>;
    fn layer(&self, inner: S) -> Recorded<S> {
        Recorded {
            inner,
            log: self.0.clone(),
        }
    }
}

pub struct Recorded<S> {
    inner: S,
    log: Arc<Mutex<Vec<String>>>,
}

impl<S, B> tower_service::Service<http::Request<B>> for Recorded<S>
where
    S: tower_service::Service<http::Request<B>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;
    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }
    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        self.log
            .lock()
            .push(format!("{} {}", req.method(), req.uri()));
        self.inner.call(req)
    }
}

/// A client for `config` that records its requests.
pub fn recording_client(config: kube::Config) -> anyhow::Result<(kube::Client, RecordRequests)> {
    let rec = RecordRequests::default();
    let client = kube::client::ClientBuilder::try_from(config)?
        .with_layer(&rec)
        .build();
    Ok((client, rec))
}

async fn etcd_post(
    endpoint: &str,
    path: &str,
    body: &serde_json::Value,
) -> anyhow::Result<serde_json::Value> {
    let hostport = endpoint.trim_start_matches("http://");
    let mut s = TcpStream::connect(hostport).await?;
    let body = serde_json::to_vec(body)?;
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: {hostport}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes()).await?;
    s.write_all(&body).await?;
    let mut resp = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut resp)).await??;
    let text = String::from_utf8_lossy(&resp);
    let (head, body) = text.split_once("\r\n\r\n").context("bad etcd response")?;
    anyhow::ensure!(head.starts_with("HTTP/1.1 200"), "etcd {path}: {head}");
    // The gateway may answer chunked; take the JSON object inside.
    let start = body.find('{').context("no json")?;
    let end = body.rfind('}').context("no json")?;
    Ok(serde_json::from_str(&body[start..=end])?)
}

/// Compacts etcd at its current revision (physically), returning the revision.
pub async fn compact_etcd(endpoint: &str) -> anyhow::Result<i64> {
    // key "\0" .. range_end "\0" (all keys), count only
    let r = etcd_post(
        endpoint,
        "/v3/kv/range",
        &serde_json::json!({"key": "AA==", "range_end": "AA==", "count_only": true}),
    )
    .await?;
    let rev: i64 = r["header"]["revision"]
        .as_str()
        .context("no revision")?
        .parse()?;
    etcd_post(
        endpoint,
        "/v3/kv/compaction",
        &serde_json::json!({"revision": rev.to_string(), "physical": true}),
    )
    .await?;
    Ok(rev)
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ev {
    /// name, resourceVersion, in initial list
    Add(String, String, bool),
    /// name, old resourceVersion, new resourceVersion
    Update(String, String, String),
    /// name, resourceVersion, tombstone
    Delete(String, String, bool),
}

impl Ev {
    pub fn name(&self) -> &str {
        match self {
            Ev::Add(n, ..) | Ev::Update(n, ..) | Ev::Delete(n, ..) => n,
        }
    }
}

fn id(o: &ConfigMap) -> (String, String) {
    (
        o.metadata.name.clone().unwrap_or_default(),
        o.metadata.resource_version.clone().unwrap_or_default(),
    )
}

/// Records events into a shared list.
#[derive(Clone, Default)]
pub struct Recorder(pub Arc<Mutex<Vec<Ev>>>, pub Arc<tokio::sync::Notify>);

impl Recorder {
    pub fn events(&self) -> Vec<Ev> {
        self.0.lock().clone()
    }
    pub fn for_name(&self, name: &str) -> Vec<Ev> {
        self.events()
            .into_iter()
            .filter(|e| e.name() == name)
            .collect()
    }
    /// Waits until `pred` holds for the recorded events.
    pub async fn wait(&self, what: &str, pred: impl Fn(&[Ev]) -> bool) -> anyhow::Result<()> {
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            let n = self.1.notified();
            if pred(&self.events()) {
                return Ok(());
            }
            if tokio::time::timeout_at(deadline, n).await.is_err() {
                anyhow::bail!("timed out waiting for {what}; events: {:#?}", self.events());
            }
        }
    }
    fn push(&self, ev: Ev) {
        self.0.lock().push(ev);
        self.1.notify_waiters();
    }
}

impl ResourceEventHandler<ConfigMap> for Recorder {
    fn on_add(&self, obj: Arc<ConfigMap>, initial: bool) {
        let (n, rv) = id(&obj);
        self.push(Ev::Add(n, rv, initial));
    }
    fn on_update(&self, old: Arc<ConfigMap>, new: Arc<ConfigMap>) {
        let (n, a) = id(&old);
        let (_, b) = id(&new);
        self.push(Ev::Update(n, a, b));
    }
    fn on_delete(&self, obj: DeletedObject<ConfigMap>) {
        let (n, rv) = id(obj.object());
        self.push(Ev::Delete(n, rv, obj.is_tombstone()));
    }
}

pub fn configmap(name: &str, value: &str) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        data: Some(BTreeMap::from([("v".to_string(), value.to_string())])),
        ..Default::default()
    }
}

/// Waits until the store holds exactly what a fresh list returns (same keys, same objects,
/// less `managedFields`, which informers strip by default).
pub async fn wait_store_equals_list(
    store: &Store<ConfigMap>,
    api: &Api<ConfigMap>,
) -> anyhow::Result<()> {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let listed: BTreeMap<String, serde_json::Value> = api
            .list(&Default::default())
            .await?
            .items
            .into_iter()
            .map(sluice_informer::strip_managed_fields)
            .map(|o| {
                (
                    o.metadata.name.clone().unwrap_or_default(),
                    serde_json::to_value(&o).unwrap_or_default(),
                )
            })
            .collect();
        let cached: BTreeMap<String, serde_json::Value> = store
            .list()
            .iter()
            .map(|o| {
                (
                    o.metadata.name.clone().unwrap_or_default(),
                    serde_json::to_value(o.as_ref()).unwrap_or_default(),
                )
            })
            .collect();
        if listed == cached {
            return Ok(());
        }
        if tokio::time::Instant::now() > deadline {
            anyhow::bail!(
                "store != list\nstore: {:?}\nlist:  {:?}",
                cached.keys().collect::<Vec<_>>(),
                listed.keys().collect::<Vec<_>>()
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

//! What the controller's informers cache per object, with and without the projections of
//! `sluice_controller::projection`, measured on the test API server (issue 17: the
//! controller's own informers trimmed to what routing reads).
//!
//! `cargo bench -p sluice-controller --bench cache_size [-- --objects 2000]`
//!
//! Starts a test control plane, creates `--objects` Services and as many Endpoints (three
//! ready pod addresses each, as the endpoints controller writes them) and a tenth as many TLS
//! Secrets, all as `kubectl apply` leaves them (with its last-applied annotation). Then, per
//! kind, syncs an informer as the controller configured it before projection
//! (`managedFields` and the last-applied annotation stripped) and one with the projection, one
//! after the other, and prints the heap each holds once synced (live bytes counted by this
//! program's allocator) per object and in all. core/v1 Endpoints stand for EndpointSlices
//! here.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{Endpoints, Secret, Service};
use kube::Api;
use kube::api::PostParams;
use serde::de::DeserializeOwned;
use serde_json::json;
use sluice_controller::projection;
use sluice_informer::{ListOptions, SharedInformerFactory, strip_last_applied};

/// The system allocator, counting the bytes live now.
struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);

// SAFETY: every call goes to `System` with the caller's arguments; only a counter is added.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE.fetch_add(
            new_size as isize - layout.size() as isize,
            Ordering::Relaxed,
        );
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

fn arg(name: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
}

/// Adds `kubectl apply`'s annotation: a JSON copy of the object as applied.
fn applied(mut obj: serde_json::Value) -> serde_json::Value {
    let copy = obj.to_string();
    obj["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"] =
        json!(copy);
    obj
}

fn service(i: usize) -> serde_json::Value {
    applied(json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": format!("svc-{i:05}"), "labels": {"app": format!("app-{i}"), "team": "shop", "tier": "web", "bench": "cache"}},
        "spec": {
            "selector": {"app": format!("app-{i}")},
            "ports": [
                {"name": "http", "port": 80, "targetPort": 8080, "protocol": "TCP"},
                {"name": "metrics", "port": 9090, "targetPort": "metrics", "protocol": "TCP"},
            ],
        },
    }))
}

fn endpoints(i: usize, node: &str) -> serde_json::Value {
    let address = |k: usize| {
        json!({
            "ip": format!("10.{}.{}.{}", i / 250 % 250, i % 250, k + 1),
            "nodeName": node,
            "targetRef": {
                "kind": "Pod", "namespace": "bench", "name": format!("app-{i}-7d9f8b6c5-{k}x2lq"),
                "uid": format!("6a1f3c2e-0000-4000-8000-{i:08}{k:04}"), "resourceVersion": "123456",
            },
        })
    };
    json!({
        "apiVersion": "v1", "kind": "Endpoints",
        "metadata": {
            // Not the Service's name: the test control plane's endpoints controller owns those.
            "name": format!("ep-{i:05}"),
            "labels": {"app": format!("app-{i}"), "team": "shop", "tier": "web", "bench": "endpoints"},
            "annotations": {"endpoints.kubernetes.io/last-change-trigger-time": "2026-11-23T10:00:00Z"},
        },
        "subsets": [{
            "addresses": [address(0), address(1), address(2)],
            "ports": [
                {"name": "http", "port": 8080, "protocol": "TCP"},
                {"name": "metrics", "port": 9090, "protocol": "TCP"},
            ],
        }],
    })
}

fn secret(i: usize, cert: &str, key: &str) -> serde_json::Value {
    use base64::Engine;
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    applied(json!({
        "apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
        "metadata": {
            "name": format!("tls-{i:05}"),
            "labels": {"app": format!("app-{i}"), "bench": "cache"},
            "annotations": {"cert-manager.io/issuer-name": "letsencrypt", "cert-manager.io/common-name": format!("app-{i}.example.com")},
        },
        "data": {"tls.crt": b64(cert), "tls.key": b64(key)},
    }))
}

async fn create<K>(api: &Api<K>, objects: Vec<serde_json::Value>) -> anyhow::Result<()>
where
    K: kube::Resource + Clone + DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    futures::stream::iter(objects)
        .map(|o| {
            let api = api.clone();
            async move {
                let obj: K = serde_json::from_value(o)?;
                api.create(&PostParams::default(), &obj).await?;
                Ok::<(), anyhow::Error>(())
            }
        })
        .buffer_unordered(32)
        .try_collect::<Vec<()>>()
        .await?;
    Ok(())
}

/// What an informer of this program caches.
trait Cacheable:
    kube::Resource<DynamicType = ()>
    + Clone
    + DeserializeOwned
    + std::fmt::Debug
    + Send
    + Sync
    + 'static
{
}

impl<K> Cacheable for K where
    K: kube::Resource<DynamicType = ()>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static
{
}

/// Live heap held by one synced informer of `api` with `transform`: bytes and objects.
async fn cached<K>(
    client: &kube::Client,
    api: Api<K>,
    selector: &str,
    transform: fn(K) -> K,
) -> anyhow::Result<(isize, usize)>
where
    K: Cacheable,
{
    let factory = SharedInformerFactory::new(client.clone());
    let informer = factory.informer_for(api, ListOptions::default().labels(selector));
    informer
        .set_transform(transform)
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let before = LIVE.load(Ordering::Relaxed);
    factory.start();
    let synced = factory.wait_for_cache_sync(Duration::from_secs(120)).await;
    anyhow::ensure!(synced.values().all(|s| *s), "informer did not sync");
    // Let the watch settle and transient list buffers go.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let held = LIVE.load(Ordering::Relaxed) - before;
    let objects = informer.store().list().len();
    factory.shutdown().await;
    Ok((held, objects))
}

async fn compare<K>(
    client: &kube::Client,
    api: Api<K>,
    kind: &str,
    selector: &str,
    projection: fn(K) -> K,
) -> anyhow::Result<()>
where
    K: Cacheable,
{
    let (full, n) = cached(client, api.clone(), selector, strip_last_applied::<K>).await?;
    let (slim, m) = cached(client, api, selector, projection).await?;
    anyhow::ensure!(n == m && n > 0, "{kind}: synced {n} then {m} objects");
    let kib = |b: isize| b as f64 / 1024.0;
    println!(
        "{kind:<10} {n:>6} objects: before {:>8.1} KiB ({:>5.0} B each), projected {:>8.1} KiB ({:>5.0} B each): {:.2}x",
        kib(full),
        full as f64 / n as f64,
        kib(slim),
        slim as f64 / n as f64,
        slim as f64 / full as f64
    );
    Ok(())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let n: usize = arg("--objects")
        .and_then(|v| v.parse().ok())
        .unwrap_or(2000)
        .clamp(10, 100_000);
    let cp = sluice_testenv::ControlPlane::shared().await?;
    let client = cp.client();
    let ns = cp.create_namespace("bench-cache").await?;
    let key = rcgen::KeyPair::generate()?;
    let cert = rcgen::CertificateParams::new(vec!["app.example.com".to_owned()])?
        .self_signed(&key)?
        .pem();
    let key = key.serialize_pem();

    let started = Instant::now();
    let services: Api<Service> = Api::namespaced(client.clone(), &ns);
    let eps: Api<Endpoints> = Api::namespaced(client.clone(), &ns);
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
    create(&services, (0..n).map(service).collect()).await?;
    create(
        &eps,
        (0..n)
            .map(|i| endpoints(i, sluice_testenv::NODE_NAME))
            .collect(),
    )
    .await?;
    create(
        &secrets,
        (0..n / 10).map(|i| secret(i, &cert, &key)).collect(),
    )
    .await?;
    let sample = |v: &serde_json::Value| v.to_string().len();
    println!(
        "created {n} Services (~{} B of JSON), {n} Endpoints (~{} B), {} TLS Secrets (~{} B) in {:.1} s",
        sample(&service(0)),
        sample(&endpoints(0, sluice_testenv::NODE_NAME)),
        n / 10,
        sample(&secret(0, &cert, &key)),
        started.elapsed().as_secs_f64()
    );
    // One sync first, so that one-time costs (connections, lazily built statics) are not
    // counted against whichever informer comes first.
    cached(&client, secrets.clone(), "bench=cache", projection::secret).await?;
    compare(
        &client,
        services,
        "Service",
        "bench=cache",
        projection::service,
    )
    .await
    .context("Services")?;
    // Only this program's Endpoints: the endpoints controller adds its own for the
    // Services, with their labels.
    compare(
        &client,
        eps,
        "Endpoints",
        "bench=endpoints",
        projection::endpoints,
    )
    .await
    .context("Endpoints")?;
    compare(
        &client,
        secrets,
        "Secret",
        "bench=cache",
        projection::secret,
    )
    .await
    .context("Secrets")?;
    Ok(())
}

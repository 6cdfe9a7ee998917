//! ingress-manager (`sluice ingress-manager`): every Service annotated `ingress/http` gets an
//! Ingress it owns.
//!
//! Start with [`run`] (what the `sluice ingress-manager` command calls with its
//! [`IngressManagerArgs`]); the pure Service -> Ingress mapping is [`desired`], the
//! per-key logic [`reconcile`], the event wiring [`handlers`].
//!
//! For a Service `ns/name` carrying the annotation (any value) the controller keeps an
//! Ingress `ns/name` (networking.k8s.io/v1) with
//! - an ownerReference to the Service (`controller: true`, `blockOwnerDeletion: true`), so
//!   that the garbage collector deletes the Ingress with the Service: the controller does
//!   nothing on Service deletion;
//! - the host of annotation `ingress/host`, else `--host-template`
//!   (`{name}.{namespace}.example.com`);
//! - one rule, path `/` (Prefix), to the Service's port named `http`, else its first port
//!   (by name when named, by number otherwise);
//! - `ingressClassName` from `--ingress-class` (`sluice`), and the label
//!   `app.kubernetes.io/managed-by: sluice-ingress-manager`.
//!
//! Writes are server-side applies with field manager `sluice-ingress-manager` (forced when
//! putting a hand-edited Ingress back), and only when the lister's copy differs in a field
//! we manage ([`drift`]). Annotation removed: the Ingress is deleted if, and only if, the
//! Service owns it (by uid). An Ingress of the same name the Service does not own is never
//! touched; the Service gets a warning Event `IngressNotOwned` instead. A Service with no
//! ports or an invalid host gets a warning Event and no Ingress.
//!
//! Built from the informer toolkit the way client-go controllers are:
//!
//! ```text
//! Service informer ──add/update──────────────┐
//! Ingress informer ──add/update/delete──> owner Service key ──> RateLimitingQueue ──> Controller (N workers)
//!                                                                                         │ reconcile(key)
//!          listers (no GETs) <────────────────────────────────────────────────────────────┤
//!          server-side apply / delete, Events (events.k8s.io/v1) <────────────────────────┘
//! ```
//!
//! A failing key is requeued with the default controller backoff and dropped, with an error
//! logged, after `--max-retries`; its next change queues it again.
//!
//! Replicas elect a leader on a Lease (`--leader-elect`, on by default): all keep warm caches,
//! only the holder reconciles. One that loses the Lease stops and returns an error (the
//! process exits to be restarted as a standby, as client-go controllers do); one that shuts
//! down releases it so a standby takes over at once.

#![forbid(unsafe_code)]

mod args;
mod client;
pub mod desired;
pub mod drift;
pub mod events;
pub mod handlers;
pub mod ownership;
pub mod reconcile;

pub use args::IngressManagerArgs;
pub use client::client_from;

use anyhow::bail;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::networking::v1::Ingress;
use sluice_informer::workqueue::RateLimitingQueue;
use sluice_informer::{Controller, SharedInformerFactory};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// Annotation asking for an Ingress (any value).
pub const HTTP_ANNOTATION: &str = "ingress/http";
/// Annotation setting the Ingress host.
pub const HOST_ANNOTATION: &str = "ingress/host";
/// Field manager of every write, Event reporter and `managed-by` label value.
pub const MANAGER_NAME: &str = "sluice-ingress-manager";
/// Label on every managed Ingress.
pub const MANAGED_BY_LABEL: &str = "app.kubernetes.io/managed-by";
/// The Lease replicas elect their leader on, unless `--election-id`.
pub const DEFAULT_ELECTION_ID: &str = "sluice-ingress-manager";

/// Runs ingress-manager until `shutdown` completes: informers on Services and Ingresses (in
/// `--watch-namespace` or everywhere), then `--concurrent-reconciles` reconcilers once the caches have synced.
/// On shutdown the workers finish what is queued and the informers stop.
///
/// Fails when the caches do not sync within `--sync-timeout` (e.g. RBAC forbids
/// listing), so that a Deployment shows the problem as a crash loop.
pub async fn run(
    args: IngressManagerArgs,
    client: kube::Client,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let options = args.desired_options();
    // Checked first: a timing that cannot work is a usage error, not a crash loop later.
    let election = args
        .leader_elect
        .then(|| {
            args.election.elector(
                client.clone(),
                DEFAULT_ELECTION_ID,
                args.namespace.as_deref(),
            )
        })
        .transpose()?;
    let factory = SharedInformerFactory::new(client.clone());
    let (services, ingresses) = match args.namespace.as_deref() {
        Some(ns) => (
            factory.namespaced_informer::<Service>(ns),
            factory.namespaced_informer::<Ingress>(ns),
        ),
        None => (factory.informer::<Service>(), factory.informer::<Ingress>()),
    };
    let queue = RateLimitingQueue::<String>::with_default_rate_limiter();
    let _handlers = handlers::register(&services, &ingresses, &queue);
    tracing::info!(
        namespace = args.namespace.as_deref().unwrap_or("<all>"),
        workers = args.workers,
        host_template = args.host_template.as_str(),
        ingress_class = %args.ingress_class,
        "ingress-manager starting"
    );
    factory.start();

    let mut shutdown: Pin<Box<dyn Future<Output = ()> + Send>> = Box::pin(shutdown);
    let synced = tokio::select! {
        _ = &mut shutdown => None,
        synced = factory.wait_for_cache_sync(args.cache_sync_timeout) => Some(synced),
    };
    let Some(synced) = synced else {
        queue.shut_down();
        factory.shutdown().await;
        return Ok(());
    };
    let unsynced: Vec<String> = synced
        .iter()
        .filter(|(_, ok)| !**ok)
        .map(|(k, _)| k.url.clone())
        .collect();
    if !unsynced.is_empty() {
        queue.shut_down();
        factory.shutdown().await;
        bail!(
            "caches not synced within {:?}: {} (does RBAC allow list and watch?)",
            args.cache_sync_timeout,
            unsynced.join(", ")
        );
    }
    tracing::info!("caches synced; reconciling");

    // With an election, reconcile only while leading; a replica that loses the Lease stops
    // (and exits with an error, to be restarted), as client-go controllers do, rather than
    // race the new leader.
    let stop_election = CancellationToken::new();
    let mut leading = None;
    let mut election_task = None;
    if let Some(election) = election {
        let lease = args
            .election
            .election_id
            .clone()
            .unwrap_or_else(|| DEFAULT_ELECTION_ID.into());
        let (mut rx, task) = election.spawn(stop_election.clone());
        election_task = Some(task);
        tracing::info!(%lease, "waiting to lead");
        let led = tokio::select! {
            _ = &mut shutdown => false,
            r = rx.wait_for(|l| *l) => r.is_ok(),
        };
        if !led {
            stop_election.cancel();
            end_election(election_task).await;
            queue.shut_down();
            factory.shutdown().await;
            return Ok(());
        }
        tracing::info!(%lease, "leading; reconciling");
        leading = Some(rx);
    }
    let lost = Arc::new(AtomicBool::new(false));
    let shutdown: Pin<Box<dyn Future<Output = ()> + Send>> = match leading {
        None => shutdown,
        Some(mut rx) => {
            let lost = lost.clone();
            Box::pin(async move {
                tokio::select! {
                    _ = shutdown => {}
                    _ = rx.wait_for(|l| !*l) => lost.store(true, Ordering::Relaxed),
                }
            })
        }
    };

    let reconciler = Arc::new(reconcile::Reconciler::new(
        services.lister(),
        ingresses.lister(),
        client.clone(),
        options,
        events::ServiceEvents::new(client),
    ));
    let controller = Controller::new(queue)
        .workers(args.workers as usize)
        .max_retries(args.max_retries);
    let stats = controller.stats();
    controller
        .run(
            move |key: String| {
                let reconciler = reconciler.clone();
                async move {
                    let outcome = reconciler.reconcile(&key).await?;
                    tracing::debug!(service = %key, %outcome, "reconciled");
                    Ok::<(), reconcile::ReconcileError>(())
                }
            },
            shutdown,
        )
        .await;
    // Releases the Lease (when held), so a standby takes over at once.
    stop_election.cancel();
    end_election(election_task).await;
    factory.shutdown().await;
    tracing::info!(
        succeeded = stats.succeeded(),
        failed = stats.failed(),
        dropped = stats.dropped(),
        "ingress-manager stopped"
    );
    if lost.load(Ordering::Relaxed) {
        bail!(
            "lost the Lease {}: stopped reconciling so that only the new leader writes",
            args.election
                .election_id
                .as_deref()
                .unwrap_or(DEFAULT_ELECTION_ID)
        );
    }
    Ok(())
}

/// Waits (bounded) for the election task to release the Lease after its stop.
async fn end_election(task: Option<tokio::task::JoinHandle<()>>) {
    if let Some(task) = task {
        let _ = tokio::time::timeout(Duration::from_secs(5), task).await;
    }
}

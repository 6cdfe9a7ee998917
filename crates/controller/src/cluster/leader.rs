//! Leader election on a coordination.k8s.io/v1 Lease, so that exactly one replica writes
//! Ingress status and Events while every replica serves traffic from its own cache.
//!
//! The algorithm is client-go's `leaderelection`: the holder renews `renewTime` every
//! `retry` period; anyone may take the Lease over once `renewTime + leaseDuration` has
//! passed; updates carry the resourceVersion, so of two racing candidates one gets a 409.
//! A leader that cannot renew within `renew_deadline` steps down by itself.

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::{Api, ObjectMeta, PostParams};
use std::time::Duration;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// Timing of the election.
#[derive(Clone, Debug)]
pub struct LeaseTiming {
    /// How long a Lease holds without renewal.
    pub lease_duration: Duration,
    /// How long a leader keeps trying to renew before it steps down.
    pub renew_deadline: Duration,
    /// Pause between attempts.
    pub retry: Duration,
}

impl LeaseTiming {
    /// Timing derived from the lease duration alone, in client-go's proportions: renew
    /// deadline two thirds of it, retries at a seventh (at least every 200 ms).
    pub fn for_lease(lease_duration: Duration) -> Self {
        LeaseTiming {
            lease_duration,
            renew_deadline: lease_duration * 2 / 3,
            retry: (lease_duration / 7).max(Duration::from_millis(200)),
        }
    }
}

impl Default for LeaseTiming {
    fn default() -> Self {
        LeaseTiming {
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry: Duration::from_secs(2),
        }
    }
}

/// One candidate in the election for Lease `namespace/name`.
#[derive(Clone)]
pub struct LeaderElection {
    api: Api<Lease>,
    name: String,
    identity: String,
    timing: LeaseTiming,
}

impl LeaderElection {
    /// A candidate called `identity` for the Lease `name` in `api`'s namespace.
    pub fn new(api: Api<Lease>, name: &str, identity: &str, timing: LeaseTiming) -> Self {
        LeaderElection {
            api,
            name: name.into(),
            identity: identity.into(),
            timing,
        }
    }

    /// Runs the election until `stop` is cancelled, then releases the Lease if held.
    /// The receiver says whether this candidate leads right now.
    pub fn spawn(
        self,
        stop: CancellationToken,
    ) -> (watch::Receiver<bool>, tokio::task::JoinHandle<()>) {
        let (tx, rx) = watch::channel(false);
        let handle = tokio::spawn(async move { self.run(tx, stop).await });
        (rx, handle)
    }

    async fn run(self, leading: watch::Sender<bool>, stop: CancellationToken) {
        let mut last_renew = tokio::time::Instant::now();
        loop {
            match self.try_acquire_or_renew().await {
                Ok(true) => {
                    last_renew = tokio::time::Instant::now();
                    if !*leading.borrow() {
                        tracing::info!(lease = %self.name, identity = %self.identity, "became leader");
                    }
                    leading.send_if_modified(|l| !std::mem::replace(l, true));
                }
                Ok(false) => {
                    if *leading.borrow() {
                        tracing::warn!(lease = %self.name, "lost leadership");
                    }
                    leading.send_if_modified(|l| std::mem::replace(l, false));
                }
                Err(e) => {
                    tracing::warn!(lease = %self.name, error = %e, "leader election request failed");
                    if *leading.borrow() && last_renew.elapsed() > self.timing.renew_deadline {
                        tracing::warn!(lease = %self.name, "could not renew in time; stepping down");
                        leading.send_replace(false);
                    }
                }
            }
            tokio::select! {
                _ = stop.cancelled() => break,
                _ = tokio::time::sleep(self.timing.retry) => {}
            }
        }
        if leading.send_replace(false) {
            self.release().await;
        }
    }

    fn now() -> MicroTime {
        MicroTime(Timestamp::now())
    }

    async fn try_acquire_or_renew(&self) -> Result<bool, kube::Error> {
        let duration_s = self.timing.lease_duration.as_secs().max(1) as i32;
        let Some(mut lease) = self.api.get_opt(&self.name).await? else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.name.clone()),
                    ..Default::default()
                },
                spec: Some(LeaseSpec {
                    holder_identity: Some(self.identity.clone()),
                    lease_duration_seconds: Some(duration_s),
                    acquire_time: Some(Self::now()),
                    renew_time: Some(Self::now()),
                    lease_transitions: Some(0),
                    ..Default::default()
                }),
            };
            return match self.api.create(&PostParams::default(), &lease).await {
                Ok(_) => Ok(true),
                Err(kube::Error::Api(e)) if e.code == 409 => Ok(false),
                Err(e) => Err(e),
            };
        };
        let spec = lease.spec.get_or_insert_with(Default::default);
        let holder = spec.holder_identity.clone().filter(|h| !h.is_empty());
        let mine = holder.as_deref() == Some(self.identity.as_str());
        if !mine && holder.is_some() {
            let held_for = SignedDuration::from_secs(
                spec.lease_duration_seconds.unwrap_or(duration_s).max(1) as i64,
            );
            let expired = spec
                .renew_time
                .as_ref()
                .is_none_or(|t| t.0 + held_for < Timestamp::now());
            if !expired {
                return Ok(false);
            }
        }
        if !mine {
            spec.holder_identity = Some(self.identity.clone());
            spec.acquire_time = Some(Self::now());
            spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0) + 1);
        }
        spec.lease_duration_seconds = Some(duration_s);
        spec.renew_time = Some(Self::now());
        match self
            .api
            .replace(&self.name, &PostParams::default(), &lease)
            .await
        {
            Ok(_) => Ok(true),
            Err(kube::Error::Api(e)) if e.code == 409 => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Gives the Lease up so that another replica takes over at once instead of after
    /// `lease_duration`.
    async fn release(&self) {
        let Ok(Some(mut lease)) = self.api.get_opt(&self.name).await else {
            return;
        };
        let Some(spec) = lease.spec.as_mut() else {
            return;
        };
        if spec.holder_identity.as_deref() != Some(self.identity.as_str()) {
            return;
        }
        spec.holder_identity = None;
        spec.lease_duration_seconds = Some(1);
        spec.renew_time = Some(Self::now());
        match self
            .api
            .replace(&self.name, &PostParams::default(), &lease)
            .await
        {
            Ok(_) => tracing::info!(lease = %self.name, "leadership released"),
            Err(e) => tracing::warn!(lease = %self.name, error = %e, "could not release the lease"),
        }
    }
}

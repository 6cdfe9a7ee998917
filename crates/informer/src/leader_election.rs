//! Leader election on a coordination.k8s.io/v1 Lease (client-go `tools/leaderelection`).
//!
//! Replicas of a controller keep warm caches; only the holder of a Lease writes. The rules are
//! client-go's:
//!
//! - The leader renews the Lease (`spec.renewTime`) every `retry_period`. Every write carries
//!   the resourceVersion read just before, so of two racing candidates one gets a 409.
//! - A candidate takes the Lease over when it is released (no holder), or when it has seen
//!   the Lease unchanged for `lease_duration`, measured on its own clock from the moment it
//!   observed the last change (so clock skew between nodes does not shorten a lease), and
//!   the expiry the holder announced (`renewTime + leaseDurationSeconds`) has passed too (so
//!   a holder configured with a longer lease is waited out).
//! - A leader that has not renewed within `renew_deadline` of the start of its last
//!   successful renewal steps down at that moment, even while a request hangs. As
//!   `renew_deadline < lease_duration`, it has stopped before any other candidate can take
//!   over: there is no moment with two leaders.
//! - On cancellation a leader stops leading first, calls `on_stopped_leading`, and then
//!   (with `release_on_cancel`) releases the Lease so that a standby takes over at once
//!   instead of after `lease_duration`.
//!
//! Unlike client-go, whose `Run` returns when leadership is lost, a [`LeaderElector`] keeps
//! campaigning until cancelled: a program that must not lead twice (client-go's usual
//! "exit and be restarted") watches [`LeaderElector::subscribe`] and stops itself.
//!
//! ```no_run
//! use k8s_openapi::api::coordination::v1::Lease;
//! use sluice_informer::leader_election::{LeaderElectionConfig, LeaderElector, LeaseLock};
//! use tokio_util::sync::CancellationToken;
//!
//! # async fn demo(client: kube::Client) -> anyhow::Result<()> {
//! let lock = LeaseLock::new(kube::Api::<Lease>::namespaced(client, "default"), "my-lock", "replica-1");
//! let elector = LeaderElector::new(lock, LeaderElectionConfig::default())?
//!     .on_started_leading(|| println!("leading"))
//!     .on_stopped_leading(|| println!("stopped"));
//! let stop = CancellationToken::new();
//! let (mut leading, task) = elector.spawn(stop.clone());
//! leading.wait_for(|l| *l).await?;
//! // ... do the leader's work while `*leading.borrow()` ...
//! stop.cancel();
//! task.await?;
//! # Ok(()) }
//! ```

use std::time::Duration;

use k8s_openapi::{
    api::coordination::v1::{Lease, LeaseSpec},
    apimachinery::pkg::apis::meta::v1::MicroTime,
    jiff::{SignedDuration, Timestamp},
};
use kube::api::{Api, ObjectMeta, PostParams};
use tokio::{sync::watch, time::Instant};
use tokio_util::sync::CancellationToken;

/// Timing of an election (client-go `LeaderElectionConfig` without the lock and callbacks).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaderElectionConfig {
    /// How long candidates wait, after the last change they saw, before taking an
    /// unreleased Lease over.
    pub lease_duration: Duration,
    /// How long a leader keeps trying to renew before it steps down; shorter than
    /// `lease_duration`.
    pub renew_deadline: Duration,
    /// Pause between attempts to acquire or renew.
    pub retry_period: Duration,
    /// Whether a leader releases the Lease when cancelled (so a standby takes over at once).
    pub release_on_cancel: bool,
}

impl LeaderElectionConfig {
    /// Timing derived from the lease duration alone, in client-go's default proportions
    /// (15 s / 10 s / 2 s): renew deadline two thirds of it, retries every seventh (at least
    /// every 100 ms); releases on cancel.
    pub fn for_lease(lease_duration: Duration) -> Self {
        LeaderElectionConfig {
            lease_duration,
            renew_deadline: lease_duration * 2 / 3,
            retry_period: (lease_duration / 7).max(Duration::from_millis(100)),
            release_on_cancel: true,
        }
    }

    /// client-go's checks: `lease_duration > renew_deadline > retry_period`, none zero.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.retry_period.is_zero() {
            return Err(ConfigError("retry period must be above zero".into()));
        }
        if self.renew_deadline <= self.retry_period {
            return Err(ConfigError(format!(
                "renew deadline ({:?}) must be longer than the retry period ({:?})",
                self.renew_deadline, self.retry_period
            )));
        }
        if self.lease_duration <= self.renew_deadline {
            return Err(ConfigError(format!(
                "lease duration ({:?}) must be longer than the renew deadline ({:?})",
                self.lease_duration, self.renew_deadline
            )));
        }
        Ok(())
    }
}

impl Default for LeaderElectionConfig {
    fn default() -> Self {
        LeaderElectionConfig {
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
            release_on_cancel: true,
        }
    }
}

/// An election timing that cannot work (see [`LeaderElectionConfig::validate`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("leader election: {0}")]
pub struct ConfigError(pub String);

/// The Lease `name` in `api`'s namespace, held as `identity` (client-go `resourcelock.LeaseLock`).
#[derive(Clone)]
pub struct LeaseLock {
    api: Api<Lease>,
    name: String,
    identity: String,
}

impl std::fmt::Debug for LeaseLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeaseLock")
            .field("name", &self.name)
            .field("identity", &self.identity)
            .finish()
    }
}

impl LeaseLock {
    /// The Lease `name` in `api`'s namespace, for the candidate `identity`.
    pub fn new(api: Api<Lease>, name: &str, identity: &str) -> Self {
        LeaseLock {
            api,
            name: name.into(),
            identity: identity.into(),
        }
    }

    /// The Lease's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// This candidate's identity.
    pub fn identity(&self) -> &str {
        &self.identity
    }
}

/// This process's identity when none is given: the host name (a pod's name in a cluster)
/// and the process id, so two processes on one host never share an identity.
pub fn default_identity() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "candidate".into());
    format!("{host}-{}", std::process::id())
}

type Callback = Box<dyn Fn() + Send + Sync>;
type LeaderCallback = Box<dyn Fn(&str) + Send + Sync>;

/// One candidate in an election (client-go `LeaderElector`).
pub struct LeaderElector {
    lock: LeaseLock,
    config: LeaderElectionConfig,
    started: Option<Callback>,
    stopped: Option<Callback>,
    new_leader: Option<LeaderCallback>,
    leading: watch::Sender<bool>,
}

impl std::fmt::Debug for LeaderElector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeaderElector")
            .field("lock", &self.lock)
            .field("config", &self.config)
            .field("leading", &*self.leading.borrow())
            .finish()
    }
}

/// What a candidate last saw of the Lease, and when (on its own clock).
struct Observed {
    spec: LeaseSpec,
    at: Instant,
}

impl LeaderElector {
    /// A candidate for `lock` with `config`; fails when the timing cannot work.
    pub fn new(lock: LeaseLock, config: LeaderElectionConfig) -> Result<Self, ConfigError> {
        config.validate()?;
        Ok(LeaderElector {
            lock,
            config,
            started: None,
            stopped: None,
            new_leader: None,
            leading: watch::channel(false).0,
        })
    }

    /// Called when this candidate becomes leader (client-go `OnStartedLeading`). Runs inside
    /// the election loop: keep it short, start long work elsewhere.
    #[must_use]
    pub fn on_started_leading(mut self, f: impl Fn() + Send + Sync + 'static) -> Self {
        self.started = Some(Box::new(f));
        self
    }

    /// Called when this candidate stops leading: lost, could not renew in time, or cancelled
    /// (before the Lease is released) (client-go `OnStoppedLeading`).
    #[must_use]
    pub fn on_stopped_leading(mut self, f: impl Fn() + Send + Sync + 'static) -> Self {
        self.stopped = Some(Box::new(f));
        self
    }

    /// Called with the holder's identity whenever a different holder is observed, this
    /// candidate included (client-go `OnNewLeader`).
    #[must_use]
    pub fn on_new_leader(mut self, f: impl Fn(&str) + Send + Sync + 'static) -> Self {
        self.new_leader = Some(Box::new(f));
        self
    }

    /// The Lease this candidate campaigns for, and its identity.
    pub fn lock(&self) -> &LeaseLock {
        &self.lock
    }

    /// Whether this candidate leads, now and as it changes.
    pub fn subscribe(&self) -> watch::Receiver<bool> {
        self.leading.subscribe()
    }

    /// Runs [`LeaderElector::run`] on a task; the receiver says whether this candidate leads.
    pub fn spawn(
        self,
        stop: CancellationToken,
    ) -> (watch::Receiver<bool>, tokio::task::JoinHandle<()>) {
        let rx = self.subscribe();
        (rx, tokio::spawn(self.run(stop)))
    }

    /// Campaigns and, while leading, renews, until `stop` is cancelled; then stops leading
    /// and releases the Lease if held (with `release_on_cancel`).
    pub async fn run(self, stop: CancellationToken) {
        let mut observed: Option<Observed> = None;
        // Start of the last successful acquire or renew; the leader's deadline counts from it.
        let mut renewed_at = Instant::now();
        loop {
            let attempt = Instant::now();
            let leading = *self.leading.borrow();
            let deadline = leading.then(|| renewed_at + self.config.renew_deadline);
            let result = tokio::select! {
                _ = stop.cancelled() => break,
                r = Self::bounded(deadline, self.try_acquire_or_renew(&mut observed)) => r,
            };
            match result {
                Some(Ok(true)) => {
                    renewed_at = attempt;
                    self.set_leading(true, "acquired the lease");
                }
                Some(Ok(false)) => {
                    self.set_leading(false, "the lease is held by another");
                }
                Some(Err(e)) => {
                    tracing::warn!(lease = %self.lock.name, error = %e, "leader election request failed");
                }
                None => {
                    self.set_leading(false, "could not renew within the renew deadline");
                }
            }
            // A leader wakes up at its deadline at the latest, so that it steps down in time
            // even when requests keep failing.
            let mut wake = Instant::now() + self.config.retry_period;
            if *self.leading.borrow() {
                wake = wake.min(renewed_at + self.config.renew_deadline);
            }
            tokio::select! {
                _ = stop.cancelled() => break,
                _ = tokio::time::sleep_until(wake) => {}
            }
        }
        if self.set_leading(false, "cancelled") && self.config.release_on_cancel {
            self.release().await;
        }
    }

    /// Runs `f`, giving up at `deadline` (`None` when there is no deadline).
    async fn bounded<T>(deadline: Option<Instant>, f: impl Future<Output = T>) -> Option<T> {
        match deadline {
            Some(d) => tokio::time::timeout_at(d, f).await.ok(),
            None => Some(f.await),
        }
    }

    /// Publishes a change of leadership and calls the callbacks; returns whether this
    /// candidate was leading before.
    fn set_leading(&self, lead: bool, why: &str) -> bool {
        let was = self.leading.send_replace(lead);
        if lead && !was {
            tracing::info!(lease = %self.lock.name, identity = %self.lock.identity, "became leader");
            if let Some(f) = &self.started {
                f();
            }
        } else if !lead && was {
            tracing::warn!(lease = %self.lock.name, identity = %self.lock.identity, why, "stopped leading");
            if let Some(f) = &self.stopped {
                f();
            }
        }
        was
    }

    fn now() -> MicroTime {
        MicroTime(Timestamp::now())
    }

    fn lease_seconds(&self) -> i32 {
        // Rounded up, so that the Lease never claims less than we wait.
        let d = self.config.lease_duration;
        (d.as_secs() + u64::from(d.subsec_nanos() > 0)).clamp(1, i32::MAX as u64) as i32
    }

    /// client-go `tryAcquireOrRenew`: Ok(true) when this candidate holds the Lease after the
    /// call, Ok(false) when another does.
    async fn try_acquire_or_renew(
        &self,
        observed: &mut Option<Observed>,
    ) -> Result<bool, kube::Error> {
        let api = &self.lock.api;
        let Some(mut lease) = api.get_opt(&self.lock.name).await? else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.lock.name.clone()),
                    ..Default::default()
                },
                spec: Some(LeaseSpec {
                    holder_identity: Some(self.lock.identity.clone()),
                    lease_duration_seconds: Some(self.lease_seconds()),
                    acquire_time: Some(Self::now()),
                    renew_time: Some(Self::now()),
                    lease_transitions: Some(0),
                    ..Default::default()
                }),
            };
            return match api.create(&PostParams::default(), &lease).await {
                Ok(created) => {
                    self.observe(observed, created.spec.unwrap_or_default());
                    Ok(true)
                }
                Err(kube::Error::Api(e)) if e.code == 409 => Ok(false),
                Err(e) => Err(e),
            };
        };
        let spec = lease.spec.clone().unwrap_or_default();
        self.observe(observed, spec.clone());
        let holder = spec.holder_identity.as_deref().filter(|h| !h.is_empty());
        let mine = holder == Some(self.lock.identity.as_str());
        if !mine && holder.is_some() {
            // Unchanged for our lease duration, on our clock: the holder has stopped leading.
            let seen_at = observed.as_ref().map_or_else(Instant::now, |o| o.at);
            if Instant::now() < seen_at + self.config.lease_duration {
                return Ok(false);
            }
            // And past the expiry the holder announced, should it run with a longer lease
            // than ours.
            let announced = SignedDuration::from_secs(i64::from(
                spec.lease_duration_seconds.unwrap_or(0).max(0),
            ));
            if spec
                .renew_time
                .as_ref()
                .is_some_and(|t| Timestamp::now() < t.0 + announced)
            {
                return Ok(false);
            }
        }
        let spec = lease.spec.get_or_insert_with(Default::default);
        if !mine {
            spec.holder_identity = Some(self.lock.identity.clone());
            spec.acquire_time = Some(Self::now());
            spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0) + 1);
        }
        spec.lease_duration_seconds = Some(self.lease_seconds());
        spec.renew_time = Some(Self::now());
        match api
            .replace(&self.lock.name, &PostParams::default(), &lease)
            .await
        {
            Ok(written) => {
                self.observe(observed, written.spec.unwrap_or_default());
                Ok(true)
            }
            Err(kube::Error::Api(e)) if e.code == 409 => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Records `spec` as seen now if it differs from what was seen before.
    fn observe(&self, observed: &mut Option<Observed>, spec: LeaseSpec) {
        if observed.as_ref().is_some_and(|o| o.spec == spec) {
            return;
        }
        let new_holder = spec.holder_identity.clone().filter(|h| !h.is_empty());
        let old_holder = observed
            .as_ref()
            .and_then(|o| o.spec.holder_identity.clone())
            .filter(|h| !h.is_empty());
        if new_holder != old_holder
            && let (Some(h), Some(f)) = (&new_holder, &self.new_leader)
        {
            f(h);
        }
        *observed = Some(Observed {
            spec,
            at: Instant::now(),
        });
    }

    /// Gives the Lease up (no holder, one second left) so that another candidate takes
    /// over at once instead of after `lease_duration`.
    async fn release(&self) {
        let api = &self.lock.api;
        let Ok(Some(mut lease)) = api.get_opt(&self.lock.name).await else {
            return;
        };
        let Some(spec) = lease.spec.as_mut() else {
            return;
        };
        if spec.holder_identity.as_deref() != Some(self.lock.identity.as_str()) {
            return;
        }
        spec.holder_identity = None;
        spec.lease_duration_seconds = Some(1);
        spec.renew_time = Some(Self::now());
        match api
            .replace(&self.lock.name, &PostParams::default(), &lease)
            .await
        {
            Ok(_) => tracing::info!(lease = %self.lock.name, "leadership released"),
            Err(e) => {
                tracing::warn!(lease = %self.lock.name, error = %e, "could not release the lease")
            }
        }
    }
}

/// The election flags a program embeds with `#[command(flatten)]` (feature `clap`), the
/// same for every program of this workspace. The Lease name's default is the program's
/// own ([`LeaderElectionArgs::lock`]).
#[cfg(feature = "clap")]
#[derive(clap::Args, Clone, Debug, PartialEq, Eq)]
pub struct LeaderElectionArgs {
    /// Name of the Lease used for leader election (default: the program's own).
    #[arg(long, value_name = "NAME")]
    pub election_id: Option<String>,

    /// Namespace of the Lease; default: `POD_NAMESPACE`, else the watched namespace, else
    /// `default`.
    #[arg(long, env = "POD_NAMESPACE", value_name = "NAMESPACE")]
    pub election_namespace: Option<String>,

    /// This replica's identity in the election; default: `POD_NAME`, else the host name
    /// and process id.
    #[arg(long, env = "POD_NAME", value_name = "NAME")]
    pub identity: Option<String>,

    /// How long candidates wait for an unreleased Lease to expire.
    #[arg(long, default_value = "15s", value_name = "DURATION", value_parser = parse_duration)]
    pub lease_duration: Duration,

    /// How long a leader tries to renew before it steps down (default: two thirds of the
    /// lease duration).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub renew_deadline: Option<Duration>,

    /// Pause between attempts to acquire or renew (default: a seventh of the lease
    /// duration).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub retry_period: Option<Duration>,
}

#[cfg(feature = "clap")]
impl LeaderElectionArgs {
    /// The timing these flags ask for, checked.
    pub fn config(&self) -> Result<LeaderElectionConfig, ConfigError> {
        let mut config = LeaderElectionConfig::for_lease(self.lease_duration);
        if let Some(d) = self.renew_deadline {
            config.renew_deadline = d;
        }
        if let Some(r) = self.retry_period {
            config.retry_period = r;
        }
        config.validate()?;
        Ok(config)
    }

    /// The Lease: `--election-id` (else `default_name`) in `--election-namespace` (else
    /// `watched_namespace`, else `default`), held as `--identity` (else
    /// [`default_identity`]).
    pub fn lock(
        &self,
        client: kube::Client,
        default_name: &str,
        watched_namespace: Option<&str>,
    ) -> LeaseLock {
        let namespace = self
            .election_namespace
            .as_deref()
            .or(watched_namespace)
            .unwrap_or("default");
        let identity = self.identity.clone().unwrap_or_else(default_identity);
        LeaseLock::new(
            Api::namespaced(client, namespace),
            self.election_id.as_deref().unwrap_or(default_name),
            &identity,
        )
    }

    /// A candidate for [`LeaderElectionArgs::lock`] with [`LeaderElectionArgs::config`].
    pub fn elector(
        &self,
        client: kube::Client,
        default_name: &str,
        watched_namespace: Option<&str>,
    ) -> Result<LeaderElector, ConfigError> {
        LeaderElector::new(
            self.lock(client, default_name, watched_namespace),
            self.config()?,
        )
    }
}

/// Reads a duration in the project's one syntax (`15s`, `500ms`, `1m30s`, `1.5s`, whole
/// seconds): see [`sluice_units`].
pub use sluice_units::parse_duration;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timing_is_checked() {
        assert_eq!(LeaderElectionConfig::default().validate(), Ok(()));
        let c = LeaderElectionConfig::for_lease(Duration::from_secs(3));
        assert_eq!(c.renew_deadline, Duration::from_secs(2));
        assert!(c.retry_period < c.renew_deadline);
        assert_eq!(c.validate(), Ok(()));
        let mut bad = c.clone();
        bad.renew_deadline = bad.lease_duration;
        assert!(bad.validate().is_err(), "a leader could outlive its lease");
        let mut bad = c;
        bad.retry_period = bad.renew_deadline;
        assert!(bad.validate().is_err());
    }

    #[test]
    fn election_durations_take_the_shared_syntax() {
        assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration("1m30s"), Ok(Duration::from_secs(90)));
        assert!(parse_duration("1s1m").is_err());
    }

    #[test]
    fn identities_differ_per_process_only() {
        assert_eq!(default_identity(), default_identity());
        assert!(default_identity().ends_with(&format!("-{}", std::process::id())));
    }
}

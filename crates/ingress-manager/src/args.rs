//! Flags of `sluice ingress-manager`.

use crate::desired::{DesiredOptions, HostTemplate};
use sluice_informer::leader_election::LeaderElectionArgs;
use std::path::PathBuf;
use std::time::Duration;

/// Flags of `sluice ingress-manager` (flattened into the `sluice` command line).
#[derive(clap::Args, Clone, Debug)]
pub struct IngressManagerArgs {
    /// Services reconciled concurrently.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..))]
    pub workers: u32,

    /// Retries of a failing Service (with exponential backoff) before it is dropped from the
    /// queue with a logged error; its next change queues it again.
    #[arg(long, default_value_t = 10)]
    pub max_retries: u32,

    /// Host of a Service's Ingress when the Service has no `ingress/host` annotation;
    /// `{name}` and `{namespace}` are replaced by the Service's.
    #[arg(long, default_value = "{name}.{namespace}.example.com", value_parser = HostTemplate::parse)]
    pub host_template: HostTemplate,

    /// `spec.ingressClassName` of the Ingresses created.
    #[arg(long, default_value = "sluice")]
    pub ingress_class: String,

    /// Watch Services and Ingresses of this namespace only (default: all namespaces).
    #[arg(long)]
    pub namespace: Option<String>,

    /// Kubeconfig file; default: `$KUBECONFIG`, then `~/.kube/config`, then the in-cluster
    /// ServiceAccount.
    #[arg(long, value_name = "PATH")]
    pub kubeconfig: Option<PathBuf>,

    /// Give up (exit with an error) when the Service and Ingress caches have not filled by
    /// then, e.g. because RBAC forbids listing them.
    #[arg(long, default_value = "2m", value_parser = sluice_informer::leader_election::parse_duration)]
    pub cache_sync_timeout: Duration,

    /// Reconcile only while holding the Lease `--election-id`, so that replicas take over
    /// from each other instead of racing (`--leader-elect=false` for a single copy).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, value_name = "BOOL")]
    pub leader_elect: bool,

    /// The Lease (`sluice-ingress-manager` unless `--election-id`), identity and timing.
    #[command(flatten)]
    pub election: LeaderElectionArgs,
}

impl IngressManagerArgs {
    /// What the pure Service -> Ingress mapping needs from these flags.
    pub fn desired_options(&self) -> DesiredOptions {
        DesiredOptions {
            host_template: self.host_template.clone(),
            ingress_class: self.ingress_class.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser, Debug)]
    struct Cli {
        #[command(flatten)]
        args: IngressManagerArgs,
    }

    fn parse(argv: &[&str]) -> Result<IngressManagerArgs, clap::Error> {
        Cli::try_parse_from(std::iter::once("ingress-manager").chain(argv.iter().copied()))
            .map(|c| c.args)
    }

    #[test]
    fn defaults() {
        let a = parse(&[]).expect("defaults parse");
        assert_eq!(a.workers, 5);
        assert_eq!(a.max_retries, 10);
        assert_eq!(a.host_template.as_str(), "{name}.{namespace}.example.com");
        assert_eq!(a.ingress_class, "sluice");
        assert_eq!(a.namespace, None);
        assert_eq!(a.kubeconfig, None);
        assert_eq!(a.cache_sync_timeout, Duration::from_secs(120));
        assert!(a.leader_elect);
        assert_eq!(a.election.election_id, None);
        assert_eq!(a.election.lease_duration, Duration::from_secs(15));
        let timing = a.election.config().expect("default timing works");
        assert_eq!(timing.renew_deadline, Duration::from_secs(10));
    }

    #[test]
    fn every_flag() {
        let a = parse(&[
            "--workers=2",
            "--max-retries",
            "3",
            "--host-template",
            "{namespace}-{name}.apps.test",
            "--ingress-class=other",
            "--namespace=team-a",
            "--kubeconfig=/tmp/kc",
            "--cache-sync-timeout=5s",
            "--leader-elect=false",
            "--election-id=im",
            "--election-namespace=ops",
            "--identity=replica-1",
            "--lease-duration=4s",
            "--renew-deadline=3s",
            "--retry-period=500ms",
        ])
        .expect("flags parse");
        assert_eq!(a.workers, 2);
        assert_eq!(a.max_retries, 3);
        assert_eq!(a.host_template.render("web", "shop"), "shop-web.apps.test");
        assert_eq!(a.ingress_class, "other");
        assert_eq!(a.namespace.as_deref(), Some("team-a"));
        assert_eq!(a.kubeconfig, Some(PathBuf::from("/tmp/kc")));
        assert_eq!(a.cache_sync_timeout, Duration::from_secs(5));
        assert!(!a.leader_elect);
        assert_eq!(a.election.election_id.as_deref(), Some("im"));
        assert_eq!(a.election.election_namespace.as_deref(), Some("ops"));
        assert_eq!(a.election.identity.as_deref(), Some("replica-1"));
        let timing = a.election.config().expect("valid timing");
        assert_eq!(timing.lease_duration, Duration::from_secs(4));
        assert_eq!(timing.renew_deadline, Duration::from_secs(3));
        assert_eq!(timing.retry_period, Duration::from_millis(500));
        let o = a.desired_options();
        assert_eq!(o.ingress_class, "other");
    }

    #[test]
    fn rejects_bad_values() {
        assert!(parse(&["--workers=0"]).is_err());
        assert!(parse(&["--host-template={name}.{cluster}.example.com"]).is_err());
        assert!(parse(&["--host-template={name"]).is_err());
        assert!(parse(&["--cache-sync-timeout=5x"]).is_err());
        // The project's one duration syntax: whole seconds too.
        let a = parse(&["--cache-sync-timeout=5"]).expect("whole seconds");
        assert_eq!(a.cache_sync_timeout, Duration::from_secs(5));
        assert!(parse(&["--leader-elect=maybe"]).is_err());
        let a = parse(&["--lease-duration=2s", "--renew-deadline=2s"]).expect("parses");
        assert!(
            a.election.config().is_err(),
            "a leader could outlive its lease"
        );
    }
}

//! Flags of `sluice ingress-manager`.

use crate::desired::{DesiredOptions, HostTemplate};
use sluice_informer::leader_election::LeaderElectionArgs;
use std::path::PathBuf;
use std::time::Duration;

/// Flags of `sluice ingress-manager` (flattened into the `sluice` command line).
#[derive(clap::Args, Clone, Debug)]
pub struct IngressManagerArgs {
    /// Services reconciled concurrently (at least 1).
    // `--workers`: the spelling before 0.2 (elsewhere `--workers` is the proxy's threads),
    // warned about by the binary.
    #[arg(long = "concurrent-reconciles", alias = "workers", value_name = "N", default_value_t = 5,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub workers: u32,

    /// Retries of a failing Service (with exponential backoff) before it is dropped from the
    /// queue with a logged error; its next change queues it again.
    #[arg(long, value_name = "N", default_value_t = 10)]
    pub max_retries: u32,

    /// Host of a Service's Ingress when the Service has no `ingress/host` annotation;
    /// `{name}` and `{namespace}` are replaced by the Service's.
    #[arg(long, value_name = "TEMPLATE", default_value = "{name}.{namespace}.example.com",
          value_parser = HostTemplate::parse)]
    pub host_template: HostTemplate,

    /// `spec.ingressClassName` of the Ingresses created.
    #[arg(long, value_name = "NAME", default_value = "sluice",
          value_parser = clap::builder::NonEmptyStringValueParser::new())]
    pub ingress_class: String,

    /// Watch Services and Ingresses of this namespace only (default: all namespaces).
    // `--namespace`: the spelling of earlier releases, warned about by the binary.
    #[arg(
        long = "watch-namespace",
        alias = "namespace",
        value_name = "NAMESPACE",
        value_parser = clap::builder::NonEmptyStringValueParser::new(),
    )]
    pub namespace: Option<String>,

    /// Kubeconfig file; default: `$KUBECONFIG`, then `~/.kube/config`, then the in-cluster
    /// ServiceAccount.
    #[arg(long, value_name = "FILE")]
    pub kubeconfig: Option<PathBuf>,

    /// Give up (exit with an error) when the Service and Ingress caches have not filled by
    /// then, e.g. because RBAC forbids listing them.
    // `--cache-sync-timeout`: the spelling of earlier releases, warned about by the binary.
    #[arg(long = "sync-timeout", alias = "cache-sync-timeout", value_name = "DURATION",
          default_value = "2m", value_parser = parse_timeout)]
    pub cache_sync_timeout: Duration,

    /// Reconcile only while holding the Lease `--election-id`, so that replicas take over
    /// from each other instead of racing (`--leader-elect=false` for a single copy).
    #[arg(long, default_value = "true", value_name = "BOOL", value_parser = sluice_units::parse_bool,
          num_args = 0..=1, require_equals = true, default_missing_value = "true")]
    pub leader_elect: bool,

    /// The Lease (`sluice-ingress-manager` unless `--election-id`), identity and timing.
    #[command(flatten)]
    pub election: LeaderElectionArgs,
}

/// `--sync-timeout`: a duration above zero.
fn parse_timeout(value: &str) -> Result<Duration, String> {
    match sluice_units::parse_duration(value)? {
        d if d.is_zero() => Err("must be more than 0, such as 30s or 2m".to_owned()),
        d => Ok(d),
    }
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
            "--concurrent-reconciles=2",
            "--max-retries",
            "3",
            "--host-template",
            "{namespace}-{name}.apps.test",
            "--ingress-class=other",
            "--watch-namespace=team-a",
            "--kubeconfig=/tmp/kc",
            "--sync-timeout=5s",
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

    /// The spellings of earlier releases (hidden aliases, warned about by the binary) set
    /// the same fields as the current ones.
    #[test]
    fn old_spellings_are_aliases() {
        let old = parse(&["--workers=2", "--namespace=a", "--cache-sync-timeout=5s"])
            .expect("old spellings parse");
        let new = parse(&[
            "--concurrent-reconciles=2",
            "--watch-namespace=a",
            "--sync-timeout=5s",
        ])
        .expect("new spellings parse");
        assert_eq!(
            (old.workers, old.namespace, old.cache_sync_timeout),
            (new.workers, new.namespace, new.cache_sync_timeout)
        );
        assert!(parse(&["--leader-elect"]).expect("bare").leader_elect);
    }

    #[test]
    fn rejects_bad_values() {
        assert!(parse(&["--concurrent-reconciles=0"]).is_err());
        assert!(parse(&["--sync-timeout=0"]).is_err());
        assert!(parse(&["--host-template={name}.{cluster}.example.com"]).is_err());
        assert!(parse(&["--host-template={name"]).is_err());
        assert!(parse(&["--sync-timeout=5x"]).is_err());
        // The project's one duration syntax: whole seconds too.
        let a = parse(&["--sync-timeout=5"]).expect("whole seconds");
        assert_eq!(a.cache_sync_timeout, Duration::from_secs(5));
        assert!(parse(&["--leader-elect=maybe"]).is_err());
        let a = parse(&["--lease-duration=2s", "--renew-deadline=2s"]).expect("parses");
        assert!(
            a.election.config().is_err(),
            "a leader could outlive its lease"
        );
    }
}

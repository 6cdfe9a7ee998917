//! Leader election between processes against the real API server: copies of
//! `examples/leader_election` hand the Lease over when the leader is killed (after the lease
//! duration) or stopped (at once, as it releases), and never lead at the same moment.
//!
//! Needs the example binary (`cargo build -p sluice-informer --examples`; `cargo test`
//! builds it).

mod support;

use std::{
    path::PathBuf,
    process::Stdio,
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;
use sluice_testenv::ControlPlane;
use support::*;
use tokio::{
    io::{AsyncBufReadExt, BufReader},
    process::{Child, Command},
    sync::mpsc,
};

/// The lease duration the copies run with; renew deadline 2/3 of it, retries every seventh.
const LEASE: Duration = Duration::from_secs(4);

fn example(name: &str) -> PathBuf {
    // target/<profile>/deps/leader_election-HASH -> target/<profile>/examples/NAME
    let exe = std::env::current_exe().expect("test binary path");
    let bin = exe
        .parent()
        .and_then(|d| d.parent())
        .expect("target dir")
        .join("examples")
        .join(name);
    assert!(
        bin.is_file(),
        "{} missing: run `cargo build -p sluice-informer --examples` (cargo test builds them)",
        bin.display()
    );
    bin
}

fn now_micros() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros())
        .unwrap_or(0)
}

/// One copy of the example, its output lines collected as they come. The process is killed
/// when this is dropped, on every path (`kill_on_drop`), panics included.
struct Candidate {
    name: &'static str,
    child: Child,
    lines: mpsc::UnboundedReceiver<String>,
    seen: Vec<String>,
}

impl Candidate {
    fn start(cp: &ControlPlane, ns: &str, name: &'static str) -> anyhow::Result<Self> {
        let lease_secs = LEASE.as_secs().to_string();
        let mut child = Command::new(example("leader_election"))
            .args([
                "--identity",
                name,
                "--namespace",
                ns,
                "--lease",
                "handover",
                "--lease-duration",
                &lease_secs,
            ])
            .env("KUBECONFIG", cp.kubeconfig_path())
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()?;
        let stdout = child
            .stdout
            .take()
            .ok_or_else(|| anyhow::anyhow!("stdout not piped"))?;
        let (tx, lines) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            let mut out = BufReader::new(stdout).lines();
            while let Ok(Some(line)) = out.next_line().await {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Ok(Candidate {
            name,
            child,
            lines,
            seen: Vec::new(),
        })
    }

    /// Waits for a line starting with `prefix` (within `within`); returns its timestamp.
    async fn expect(&mut self, prefix: &str, within: Duration) -> anyhow::Result<u128> {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            if let Some(t) = self.find(prefix) {
                return Ok(t);
            }
            match tokio::time::timeout_at(deadline, self.lines.recv()).await {
                Ok(Some(line)) => self.seen.push(line),
                Ok(None) | Err(_) => anyhow::bail!(
                    "{}: no {prefix:?} within {within:?}; printed {:?}",
                    self.name,
                    self.seen
                ),
            }
        }
    }

    fn find(&self, prefix: &str) -> Option<u128> {
        self.seen
            .iter()
            .filter(|l| l.starts_with(&format!("{prefix} ")))
            .find_map(|l| l.rsplit(' ').next()?.parse().ok())
    }

    /// Reads what is already printed without waiting.
    fn drain(&mut self) {
        while let Ok(line) = self.lines.try_recv() {
            self.seen.push(line);
        }
    }

    /// The intervals this copy said it led: from `leading` to `stopped`, or to `end` (when it
    /// was killed, or is still running) for an interval it never closed.
    fn intervals(&self, end: u128) -> Vec<(u128, u128)> {
        let mut out = Vec::new();
        let mut open = None;
        for line in &self.seen {
            let Some((what, t)) = line.split_once(' ') else {
                continue;
            };
            let Ok(t) = t.parse::<u128>() else { continue };
            match what {
                "leading" => open = Some(t),
                "stopped" => {
                    if let Some(start) = open.take() {
                        out.push((start, t));
                    }
                }
                _ => {}
            }
        }
        if let Some(start) = open {
            out.push((start, end));
        }
        out
    }

    fn terminate(&self) -> anyhow::Result<()> {
        let pid = self
            .child
            .id()
            .ok_or_else(|| anyhow::anyhow!("{} already exited", self.name))?;
        let status = std::process::Command::new("kill")
            .args(["-TERM", &pid.to_string()])
            .status()?;
        anyhow::ensure!(status.success(), "kill -TERM {pid}: {status}");
        Ok(())
    }
}

fn assert_no_overlap(all: &[(&str, Vec<(u128, u128)>)]) {
    for (i, (a, ia)) in all.iter().enumerate() {
        for (b, ib) in &all[i + 1..] {
            for x in ia {
                for y in ib {
                    assert!(
                        x.1 <= y.0 || y.1 <= x.0,
                        "{a} led {x:?} while {b} led {y:?} (µs since the epoch): {all:?}"
                    );
                }
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lease_is_handed_over_between_processes_without_two_leaders() -> anyhow::Result<()> {
    init_tracing();
    let cp = ControlPlane::shared().await?;
    let ns = cp.create_namespace("leader").await?;
    let leases: Api<Lease> = Api::namespaced(cp.client(), &ns);

    // a leads; b campaigns and sees a as the holder.
    let mut a = Candidate::start(cp, &ns, "a")?;
    a.expect("leading", WAIT).await?;
    let mut b = Candidate::start(cp, &ns, "b")?;
    b.expect("observed a", WAIT).await?;
    // b stays a follower while a renews, for well over a lease duration.
    tokio::time::sleep(LEASE + LEASE / 2).await;
    b.drain();
    assert_eq!(b.find("leading"), None, "b took a live lease: {:?}", b.seen);

    // a is killed outright: b takes over once the lease has expired, not before.
    a.child.kill().await?;
    let killed = now_micros();
    let b_leads = b.expect("leading", LEASE * 3).await?;
    assert!(b_leads > killed, "b led before a died");
    let takeover = Duration::from_micros((b_leads - killed) as u64);
    // At most: a lease duration after b saw a's last renewal (a retry period before the
    // kill, seen up to a retry period later), then b's next attempt, plus slack for a busy
    // machine.
    let retry = LEASE / 7;
    assert!(
        takeover <= LEASE + retry * 3 + Duration::from_secs(1),
        "b took {takeover:?} to take over after a was killed"
    );
    eprintln!("takeover after SIGKILL: {takeover:?}");
    a.drain();

    // c campaigns behind b; b is stopped gracefully: it stops, releases, and c takes over
    // at once, well before the lease could have expired.
    let mut c = Candidate::start(cp, &ns, "c")?;
    c.expect("observed b", WAIT).await?;
    b.terminate()?;
    let terminated = now_micros();
    let b_stopped = b.expect("stopped", WAIT).await?;
    b.expect("exited", WAIT).await?;
    let status = tokio::time::timeout(WAIT, b.child.wait()).await??;
    assert!(status.success(), "b exited with {status}");
    let c_leads = c.expect("leading", LEASE * 3).await?;
    assert!(c_leads > b_stopped, "c led before b stopped");
    let handover = Duration::from_micros((c_leads - terminated) as u64);
    // The expiry path takes at least LEASE minus a retry period (about 3.4 s) after the
    // signal; a release makes it about one retry period.
    assert!(
        handover < LEASE * 3 / 4,
        "c took {handover:?} after b's SIGTERM: was the lease released?"
    );
    eprintln!("handover after SIGTERM: {handover:?}");
    let lease = leases.get("handover").await?;
    let spec = lease.spec.unwrap_or_default();
    assert_eq!(spec.holder_identity.as_deref(), Some("c"));
    assert_eq!(spec.lease_transitions, Some(2), "a -> b -> c");

    let end = now_micros();
    c.drain();
    assert_no_overlap(&[
        ("a", a.intervals(killed)),
        ("b", b.intervals(end)),
        ("c", c.intervals(end)),
    ]);
    // Each led exactly once, in turn.
    assert_eq!(a.intervals(killed).len(), 1, "{:?}", a.seen);
    assert_eq!(b.intervals(end).len(), 1, "{:?}", b.seen);
    assert_eq!(c.intervals(end).len(), 1, "{:?}", c.seen);

    c.terminate()?;
    let status = tokio::time::timeout(WAIT, c.child.wait()).await??;
    assert!(status.success(), "c exited with {status}");
    Ok(())
}

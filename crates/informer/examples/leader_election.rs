//! Two or more copies of this program elect a leader on a Lease (client-go's
//! `tools/leaderelection` example).
//!
//! Each copy prints, with the time in microseconds since the Unix epoch:
//! `observed <holder> <t>` when it sees a new holder, `leading <t>` when it becomes leader,
//! `stopped <t>` when it stops leading (always before it releases the Lease) and
//! `exited <t>` after a graceful stop (SIGTERM or Ctrl-C), which releases the Lease so that
//! another copy takes over at once. A copy killed outright is replaced once its Lease expires.
//!
//! `cargo run -p sluice-informer --example leader_election -- --identity a [--namespace NS] [--lease NAME] [--lease-duration 15]`

mod common;

use std::{
    io::Write,
    time::{SystemTime, UNIX_EPOCH},
};

use k8s_openapi::api::coordination::v1::Lease;
use sluice_informer::leader_election::{
    LeaderElectionConfig, LeaderElector, LeaseLock, default_identity,
};
use tokio_util::sync::CancellationToken;

/// Prints one line at once (stdout is a pipe in tests: no buffering until exit).
fn say(what: &str) {
    let micros = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros())
        .unwrap_or(0);
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{what} {micros}");
    let _ = out.flush();
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = common::Args::parse();
    let identity = args.value("identity").unwrap_or_else(default_identity);
    let lease = args
        .value("lease")
        .unwrap_or_else(|| "example-leader".into());
    let client = kube::Client::try_default().await?;
    let lock = LeaseLock::new(
        kube::Api::<Lease>::namespaced(client, &args.namespace()),
        &lease,
        &identity,
    );
    let config = LeaderElectionConfig::for_lease(args.seconds("lease-duration", 15));
    let elector = LeaderElector::new(lock, config)?
        .on_new_leader(|holder| say(&format!("observed {holder}")))
        .on_started_leading(|| say("leading"))
        .on_stopped_leading(|| say("stopped"));

    let stop = CancellationToken::new();
    let (_leading, task) = elector.spawn(stop.clone());
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
    stop.cancel();
    task.await?;
    say("exited");
    Ok(())
}

//! The `sluice` command.

use clap::Parser;

/// sluice: a Kubernetes Ingress controller with its own proxy.
#[derive(Parser, Debug)]
#[command(version, about)]
struct Cli {}

fn main() -> anyhow::Result<()> {
    let _cli = Cli::parse();
    anyhow::bail!("sluice's data plane and controllers are not there yet: nothing to run")
}

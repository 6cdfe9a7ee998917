//! `sluice-echo`: the echo backend as a standalone program.
//!
//! Prints `listening on <addr>` to stdout once per listener after all are
//! bound (tests wait for those lines), logs to stderr, and exits 0 on
//! SIGTERM or SIGINT after a graceful drain.

use std::io::{self, IsTerminal, Write};
use std::net::SocketAddr;
use std::process::ExitCode;

use clap::Parser;
use sluice_echo::{Identity, default_pod_name, serve};
use tokio::net::TcpListener;
use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::watch;
use tracing::info;

/// An echo backend for sluice's tests, benchmarks and examples.
#[derive(Debug, Parser)]
#[command(name = "sluice-echo", version, about)]
struct Args {
    /// Service name reported in responses.
    #[arg(long, env = "ECHO_SERVICE", default_value = "echo")]
    service: String,

    /// Pod name reported in responses and the x-echo-pod header [default: hostname, else "echo"].
    #[arg(long, env = "POD_NAME")]
    pod: Option<String>,

    /// Address to listen on; repeat the flag (or comma-separate) for several.
    #[arg(
        long = "listen",
        env = "ECHO_LISTEN",
        default_value = "0.0.0.0:8080",
        value_delimiter = ','
    )]
    listen: Vec<SocketAddr>,
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    tracing_subscriber::fmt()
        .with_writer(io::stderr)
        // No colour codes in log files and CI captures.
        .with_ansi(io::stderr().is_terminal())
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();
    match run(args).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("sluice-echo: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run(args: Args) -> io::Result<()> {
    let pod = args
        .pod
        .filter(|p| !p.trim().is_empty())
        .unwrap_or_else(default_pod_name);
    let identity = Identity::new(args.service, pod);

    // Signal handlers go in before "listening on" is printed: a supervisor
    // may send SIGTERM the moment it sees that line.
    let mut sigterm = signal(SignalKind::terminate())?;
    let mut sigint = signal(SignalKind::interrupt())?;

    let mut listeners = Vec::with_capacity(args.listen.len());
    for addr in &args.listen {
        let listener = TcpListener::bind(addr)
            .await
            .map_err(|e| io::Error::new(e.kind(), format!("binding {addr}: {e}")))?;
        listeners.push(listener);
    }
    // Only after every bind succeeded, so a reader never sees a partial set.
    {
        let mut out = io::stdout().lock();
        for listener in &listeners {
            // Port 0 in the flag: print the port the kernel actually chose.
            writeln!(out, "listening on {}", listener.local_addr()?)?;
        }
        out.flush()?;
    }

    let (stop_tx, _) = watch::channel(false);
    let servers = futures::future::try_join_all(listeners.into_iter().map(|listener| {
        let mut stop = stop_tx.subscribe();
        let identity = identity.clone();
        serve(listener, identity, async move {
            let _ = stop.wait_for(|stop| *stop).await;
        })
    }));
    tokio::pin!(servers);

    tokio::select! {
        result = &mut servers => return result.map(drop),
        _ = sigterm.recv() => info!("SIGTERM received, draining"),
        _ = sigint.recv() => info!("SIGINT received, draining"),
    }
    stop_tx.send_replace(true);
    // A second signal skips the drain.
    tokio::select! {
        result = &mut servers => result.map(drop),
        _ = sigterm.recv() => Ok(()),
        _ = sigint.recv() => Ok(()),
    }
}

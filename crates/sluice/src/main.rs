//! The `sluice` command: one binary for the data plane in standalone mode, the Kubernetes
//! ingress controller and ingress-manager.

mod legacy_flags;

use clap::{CommandFactory, Parser, Subcommand, ValueEnum};
use sluice_controller::cluster::ControllerArgs;
use sluice_controller::explain::ExplainArgs;
use sluice_controller::migrate::MigrateArgs;
use sluice_controller::serve::ServeArgs;
use sluice_ingress_manager::IngressManagerArgs;
use std::time::Duration;

/// mimalloc: glibc's malloc costs a measurable share of a small proxied request
/// (bench/proxy.sh, small keep-alive GETs: 0.74x -> 0.91x nginx's req/s in an A/B run).
/// The `system-allocator` feature leaves it out, for heap profilers that hook malloc
/// (`heaptrack`).
#[cfg(not(feature = "system-allocator"))]
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// sluice: a Kubernetes Ingress controller with its own proxy.
#[derive(Parser, Debug)]
#[command(version, about, propagate_version = true)]
struct Cli {
    /// Log format on stderr.
    #[arg(
        long,
        global = true,
        value_enum,
        default_value = "text",
        env = "SLUICE_LOG_FORMAT"
    )]
    log_format: LogFormat,

    /// Log filter (tracing's env-filter syntax), e.g. `info` or `sluice_proxy=debug`.
    /// rustls' warnings about what a client sent in its handshake (an IP address as SNI)
    /// stay at `error` unless the filter names rustls: one line per connection otherwise.
    #[arg(long, global = true, default_value = "info", env = "RUST_LOG", value_parser = parse_log)]
    log: String,

    #[command(subcommand)]
    command: Command,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Serve Ingresses from a directory of manifests, without a cluster.
    Serve(Box<ServeArgs>),
    /// Run the Ingress controller and its proxy against a Kubernetes cluster.
    Controller(Box<ControllerArgs>),
    /// Give every Service annotated `ingress/http` an Ingress it owns.
    IngressManager(Box<IngressManagerArgs>),
    /// Report what sluice would make of existing (ingress-nginx) Ingresses.
    ///
    /// Per Ingress: whether sluice serves its class, which annotations it honours, which not
    /// and why. Exit status 0: no change needed; 1: some Ingress needs one; 2: the Ingresses
    /// could not be read.
    ///
    /// With `--to gateway-api`: the Gateway API objects instead (a Gateway per IngressClass,
    /// HTTPRoutes, GRPCRoutes, ReferenceGrants, BackendTLSPolicies; YAML on stdout or one
    /// file per object with `--output-dir`), and per Ingress what could not be carried;
    /// exit status 1 when something was not.
    Migrate(Box<MigrateArgs>),
    /// Explain where a request goes: the Ingress and rule that match, why the others do not
    /// (host, path type, class), the backend with its endpoints, and the policy applied.
    ///
    /// Asks the running sluice on `--admin-addr` (default 127.0.0.1:10254), or reads
    /// `--manifests DIR`. Exit status 0: a rule or default backend answers; 1: the request
    /// gets 404; 2: no answer (nothing listening, unreadable directory).
    Explain(Box<ExplainArgs>),
}

/// A `--log` filter that tracing can read (a filter it cannot read would otherwise be
/// replaced by `info` without a word).
fn parse_log(value: &str) -> Result<String, String> {
    tracing_subscriber::EnvFilter::try_new(sluice_proxy::log_filter(value))
        .map(|_| value.to_owned())
        .map_err(|e| {
            format!(
                "{e}: expected levels (off, error, warn, info, debug, trace), optionally per \
                 target, comma-separated, e.g. `info` or `warn,sluice_proxy=debug`"
            )
        })
}

fn init_logging(cli: &Cli) {
    // `migrate` is a report on stdout; its findings are in the report, so by default it
    // logs nothing (the manifest scanner's per-file lines would only repeat them).
    let quiet =
        matches!(cli.command, Command::Migrate(_) | Command::Explain(_)) && cli.log == "info";
    let log = if quiet { "off" } else { cli.log.as_str() };
    let filter = tracing_subscriber::EnvFilter::try_new(sluice_proxy::log_filter(log))
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr);
    match cli.log_format {
        LogFormat::Json => builder.json().init(),
        LogFormat::Text => builder.init(),
    }
}

/// Resolves on SIGTERM or SIGINT.
async fn signalled() {
    use tokio::signal::unix::{SignalKind, signal};
    let term = signal(SignalKind::terminate());
    let int = signal(SignalKind::interrupt());
    match (term, int) {
        (Ok(mut term), Ok(mut int)) => {
            tokio::select! {
                _ = term.recv() => {}
                _ = int.recv() => {}
            }
        }
        _ => std::future::pending().await,
    }
    tracing::info!("shutdown signal received; draining");
}

/// Turns transparent huge pages off for this process, as mimalloc does itself with
/// `MIMALLOC_ALLOW_THP=0` (an explicit `MIMALLOC_ALLOW_THP` is left to decide). With them
/// the kernel backs mimalloc's 2 MiB regions with huge pages that stay resident while any
/// part is used: 200 against 233 MiB RSS at 10,000 HTTPRoutes and 50,000 endpoints
/// (`bench/propagation.sh`, 2026-11-29), with the same propagation and load figures.
fn without_transparent_huge_pages() {
    #[cfg(all(target_os = "linux", not(feature = "system-allocator")))]
    if std::env::var_os("MIMALLOC_ALLOW_THP").is_none() {
        // SAFETY: PR_SET_THP_DISABLE takes integers only and changes no memory of ours.
        let _ = unsafe { libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0) };
    }
}

fn main() -> anyhow::Result<()> {
    without_transparent_huge_pages();
    let mut command = Cli::command();
    command.build();
    let argv = legacy_flags::normalize(&command, std::env::args_os().collect());
    // Before the log starts (and whatever its filter): a deprecated spelling is the user's
    // to fix, not an event of the run.
    for warning in &argv.warnings {
        eprintln!("warning: {warning}");
    }
    let cli = Cli::parse_from(argv.args);
    init_logging(&cli);
    match cli.command {
        // The proxy's worker threads (--workers, default one per CPU) each run their own
        // runtime; this one drives the admin port and shutdown. The control plane
        // (manifests, informers, compiling) starts its own runtime inside `serve`/`run`
        // (sluice_controller::control), so its work never lands on a worker.
        Command::Serve(mut args) => {
            args.proxy = args.proxy.with_default_workers();
            let runtime = args.proxy.build_runtime()?;
            runtime.block_on(sluice_controller::serve::serve(*args, signalled()))?;
            runtime.shutdown_timeout(Duration::from_secs(1));
        }
        Command::Controller(mut args) => {
            args.proxy = args.proxy.with_default_workers();
            let runtime = args.proxy.build_runtime()?;
            runtime.block_on(sluice_controller::cluster::run(*args, signalled()))?;
            runtime.shutdown_timeout(Duration::from_secs(1));
        }
        Command::IngressManager(args) => {
            let args = *args;
            let runtime = tokio::runtime::Runtime::new()?;
            runtime.block_on(async {
                let client = sluice_ingress_manager::client_from(&args).await?;
                sluice_ingress_manager::run(args, client, signalled()).await
            })?;
        }
        Command::Migrate(args) => {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            let code = runtime.block_on(sluice_controller::migrate::run(
                &args,
                &mut std::io::stdout().lock(),
                &mut std::io::stderr(),
            ));
            drop(runtime);
            std::process::exit(code);
        }
        Command::Explain(args) => {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            let code = runtime.block_on(sluice_controller::explain::run(
                &args,
                &mut std::io::stdout().lock(),
                &mut std::io::stderr(),
            ));
            drop(runtime);
            std::process::exit(code);
        }
    }
    Ok(())
}

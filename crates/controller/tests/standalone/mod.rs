//! What the `sluice serve` tests share: the flags for a directory of manifests on free
//! loopback ports.

use clap::Parser;
use sluice_controller::serve::ServeArgs;
use std::net::SocketAddr;
use std::path::Path;

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    args: ServeArgs,
}

/// `sluice serve` flags for `dir` on a free HTTP port, plus `extra` (which may set
/// `--https-addr`); and that port's address.
pub fn serve_args(dir: &Path, extra: &[&str]) -> (ServeArgs, SocketAddr) {
    let (http, admin) = (
        sluice_testenv::free_port().unwrap(),
        sluice_testenv::free_port().unwrap(),
    );
    let mut argv = vec![
        "serve".to_string(),
        "--manifests".into(),
        dir.to_str().unwrap().into(),
        "--http-addr".into(),
        format!("127.0.0.1:{http}"),
        "--admin-addr".into(),
        format!("127.0.0.1:{admin}"),
    ];
    if !extra.contains(&"--https-addr") {
        argv.extend(["--https-addr".into(), "127.0.0.1:0".into()]);
    }
    argv.extend(extra.iter().map(|s| s.to_string()));
    let args = Cli::try_parse_from(argv).unwrap().args;
    (args, SocketAddr::from(([127, 0, 0, 1], http)))
}

//! Where the binaries a test needs live.

use anyhow::{Context, bail};
use std::path::{Path, PathBuf};

/// Version of the test control plane that `scripts/testenv.sh` builds by default; keep it in
/// step with the script's default.
pub const KUBE_VERSION: &str = "1.37.2";

/// The Kubernetes version the tests run against: `$SLUICE_KUBE_VERSION` (as `scripts/testenv.sh`
/// reads it), else [`KUBE_VERSION`].
pub fn kube_version() -> String {
    std::env::var("SLUICE_KUBE_VERSION")
        .ok()
        .map(|v| v.trim_start_matches('v').to_string())
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| KUBE_VERSION.to_string())
}

/// Version of the Gateway API conformance module whose binaries `scripts/conformance.sh`
/// builds (echo-basic, the DNS stand-in); keep it in step with `conformance/go.mod`.
pub const GATEWAY_API_VERSION: &str = "1.6.1";

/// The test cache: `$SLUICE_TESTENV_CACHE`, else `$XDG_CACHE_HOME/sluice`, else
/// `~/.cache/sluice` (as `scripts/testenv.sh` reads them).
fn cache_dir() -> anyhow::Result<PathBuf> {
    Ok(match std::env::var_os("SLUICE_TESTENV_CACHE") {
        Some(c) => PathBuf::from(c),
        None => match std::env::var_os("XDG_CACHE_HOME") {
            Some(x) => PathBuf::from(x).join("sluice"),
            None => PathBuf::from(std::env::var_os("HOME").context("HOME is not set")?)
                .join(".cache/sluice"),
        },
    })
}

/// A binary built from the Gateway API conformance module by `scripts/conformance.sh`
/// (`echo-basic`, `dns-standin`), in the cache under [`GATEWAY_API_VERSION`].
pub fn gateway_api_binary(name: &str) -> anyhow::Result<PathBuf> {
    let path = cache_dir()?
        .join(format!("gateway-api-v{GATEWAY_API_VERSION}/bin"))
        .join(name);
    if !path.is_file() {
        bail!(
            "no {name} v{GATEWAY_API_VERSION} in {}: run `bash scripts/conformance.sh --build` \
             once (it builds it)",
            path.display()
        );
    }
    Ok(path)
}

/// The directory holding `etcd`, `kube-apiserver`, `kube-controller-manager` and
/// `kube-scheduler`: `$SLUICE_TESTENV_BIN`, else the cache `scripts/testenv.sh` fills for
/// [`kube_version`].
pub fn control_plane_bin_dir() -> anyhow::Result<PathBuf> {
    if let Some(dir) = std::env::var_os("SLUICE_TESTENV_BIN") {
        return Ok(PathBuf::from(dir));
    }
    let cache = cache_dir()?;
    let version = kube_version();
    let dir = cache.join(format!("kube-v{version}/bin"));
    for name in [
        "etcd",
        "kube-apiserver",
        "kube-controller-manager",
        "kube-scheduler",
    ] {
        if !dir.join(name).is_file() {
            bail!(
                "no test control plane v{version} in {}: run `bash scripts/testenv.sh` once (it \
                 builds it)",
                dir.display()
            );
        }
    }
    Ok(dir)
}

/// `name` from PATH.
pub fn on_path(name: &str) -> anyhow::Result<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
        .with_context(|| format!("`{name}` not found on PATH: run `bash scripts/testenv.sh`"))
}

/// A binary of this workspace, found next to the running test executable
/// (`target/<profile>/deps/test-…` -> `target/<profile>/<name>`).
pub fn workspace_binary(name: &str) -> anyhow::Result<PathBuf> {
    let exe = std::env::current_exe().context("current_exe")?;
    let mut dir: Option<&Path> = exe.parent();
    while let Some(d) = dir {
        let candidate = d.join(name);
        if candidate.is_file() {
            return Ok(candidate);
        }
        if d.file_name().is_some_and(|n| n == "target") {
            break;
        }
        dir = d.parent();
    }
    bail!(
        "workspace binary `{name}` not built: run `cargo build --workspace --bins` (cargo test --workspace does it)"
    )
}

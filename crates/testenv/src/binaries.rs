//! Where the binaries a test needs live.

use anyhow::{Context, bail};
use std::path::{Path, PathBuf};

/// Version of the test control plane that `scripts/testenv.sh` builds.
pub const KUBE_VERSION: &str = "1.20.2";

/// The build of it: `crd1` is v1.20.2 with the two source fixes that let it serve custom
/// resources (Gateway API); `scripts/testenv.sh` uses the same directory name.
pub const KUBE_BUILD: &str = "crd1";

/// The directory holding `kube-apiserver` and `kube-controller-manager`:
/// `$SLUICE_TESTENV_BIN`, else the cache `scripts/testenv.sh` fills.
pub fn control_plane_bin_dir() -> anyhow::Result<PathBuf> {
    if let Some(dir) = std::env::var_os("SLUICE_TESTENV_BIN") {
        return Ok(PathBuf::from(dir));
    }
    let cache = match std::env::var_os("SLUICE_TESTENV_CACHE") {
        Some(c) => PathBuf::from(c),
        None => match std::env::var_os("XDG_CACHE_HOME") {
            Some(x) => PathBuf::from(x).join("sluice"),
            None => PathBuf::from(std::env::var_os("HOME").context("HOME is not set")?)
                .join(".cache/sluice"),
        },
    };
    let dir = cache.join(format!("kube-{KUBE_VERSION}-{KUBE_BUILD}/bin"));
    if !dir.join("kube-apiserver").is_file() {
        bail!(
            "no test control plane in {}: run `bash scripts/testenv.sh` once (it builds it)",
            dir.display()
        );
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

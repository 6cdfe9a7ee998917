//! A bare network namespace for one test: only `lo`, up; no bridge, no Pod object.
//!
//! Named `sl-<pid>-x<n>` like the pods' namespaces, so that [`crate::sweep_stale`] removes
//! it (and kills what still runs in it) when the owning test process was killed before it
//! could clean up. Dropping it (also while a test panics) kills every process still inside,
//! then deletes it.

use crate::network::{ip, ip_ok};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

/// A network namespace that is deleted, with every process in it, on drop.
#[derive(Debug)]
pub struct NetNs {
    name: String,
}

impl NetNs {
    /// Creates a fresh namespace with `lo` up.
    pub fn create() -> anyhow::Result<NetNs> {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        crate::network::sweep_stale();
        let name = format!(
            "sl-{}-x{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        ip_ok(&["netns", "add", &name])?;
        // From here on, Drop removes it.
        let ns = NetNs { name };
        ip_ok(&["netns", "exec", &ns.name, "ip", "link", "set", "lo", "up"])?;
        Ok(ns)
    }

    /// The name, for `ip netns exec`.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// `ip netns exec NAME program`: add arguments, then spawn (e.g. with
    /// [`crate::Supervised::spawn`]) or run it.
    pub fn command(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &self.name]).arg(program);
        cmd
    }

    /// The processes running in the namespace.
    pub fn pids(&self) -> Vec<u32> {
        crate::network::netns_pids(&self.name)
    }
}

impl Drop for NetNs {
    fn drop(&mut self) {
        crate::network::kill_netns_pids(&self.name);
        let _ = ip(&["netns", "del", &self.name]);
    }
}

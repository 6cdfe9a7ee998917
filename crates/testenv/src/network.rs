//! The pod network of one test process: a Linux bridge carrying `10.244.K.1/24` and an
//! allocator for pod addresses `10.244.K.N`.
//!
//! K is claimed by creating the bridge `slbrK`: `ip link add` fails when another process
//! holds that name, so concurrent test processes never share a subnet. Every object carries
//! the owner's pid (bridge alias, namespace name) so that [`sweep_stale`] can remove what a
//! killed test process left behind.

use anyhow::{Context, bail};
use std::collections::BTreeSet;
use std::net::Ipv4Addr;
use std::process::Command;
use std::sync::{Mutex, OnceLock};

const ALIAS_PREFIX: &str = "sluice-testenv:pid=";

/// Prefix of [`temp_dir`]'s directories, followed by the owner's pid.
const TEMP_DIR_PREFIX: &str = "sluice-test-";

/// A temporary directory removed on drop, and by [`sweep_stale`] once the test process that
/// made it is gone (a SIGKILLed test cannot run destructors).
pub fn temp_dir() -> std::io::Result<tempfile::TempDir> {
    tempfile::Builder::new()
        .prefix(&format!("{TEMP_DIR_PREFIX}{}-", std::process::id()))
        .tempdir()
}

/// The subnets K that bridges claim: 10.244.20.0/24 .. 10.244.219.0/24.
const FIRST_K: u8 = 20;
const LAST_K: u8 = 219;

/// Every gateway address a process's bridge can carry (`10.244.K.1`).
pub(crate) fn gateway_candidates() -> impl Iterator<Item = Ipv4Addr> {
    (FIRST_K..=LAST_K).map(|k| Ipv4Addr::new(10, 244, k, 1))
}

/// The bridge and address pool of this process.
#[derive(Debug)]
pub struct Network {
    k: u8,
    bridge: String,
    free: Mutex<BTreeSet<u8>>,
    next: std::sync::atomic::AtomicU8,
}

impl Network {
    /// The process-wide network, created on first use and removed at exit.
    pub fn get() -> anyhow::Result<&'static Network> {
        static NET: OnceLock<Result<Network, String>> = OnceLock::new();
        NET.get_or_init(|| Network::create().map_err(|e| format!("{e:#}")))
            .as_ref()
            .map_err(|e| anyhow::anyhow!("pod network: {e}"))
    }

    fn create() -> anyhow::Result<Network> {
        sweep_stale();
        let pid = std::process::id();
        let start = (pid % 200) as u8;
        for i in 0..200u16 {
            let k = ((start as u16 + i) % 200 + FIRST_K as u16) as u8;
            let bridge = format!("slbr{k}");
            // A bridge without an address of its own takes the lowest of its ports' and
            // changes it as pods come and go; a pod's ARP entry for the gateway then names
            // a MAC the bridge no longer answers to, and its replies are lost until the
            // entry is probed again (seconds). A fixed, locally administered address stays.
            let mac = format!("02:73:6c:62:72:{k:02x}");
            if !ip(&["link", "add", &bridge, "address", &mac, "type", "bridge"])? {
                continue;
            }
            let net = Network {
                k,
                bridge: bridge.clone(),
                free: Mutex::new((2..=254).collect()),
                next: std::sync::atomic::AtomicU8::new(2),
            };
            let gw = format!("10.244.{k}.1/24");
            ip_ok(&[
                "link",
                "set",
                &bridge,
                "alias",
                &format!("{ALIAS_PREFIX}{pid}"),
            ])?;
            ip_ok(&["addr", "add", &gw, "dev", &bridge])?;
            ip_ok(&["link", "set", &bridge, "up"])?;
            crate::supervisor::at_exit(move || {
                let _ = ip(&["link", "del", &bridge]);
            });
            return Ok(net);
        }
        bail!("no free bridge name slbr20..slbr219")
    }

    /// The bridge's (gateway's) address, which the host uses to reach pods.
    pub fn gateway(&self) -> Ipv4Addr {
        Ipv4Addr::new(10, 244, self.k, 1)
    }

    /// The bridge's name.
    pub fn bridge(&self) -> &str {
        &self.bridge
    }

    pub(crate) fn subnet_id(&self) -> u8 {
        self.k
    }

    /// The next free host number after the last one handed out: a number just released is
    /// reused last, because the kernel destroys a deleted namespace's veth asynchronously.
    pub(crate) fn allocate(&self) -> anyhow::Result<u8> {
        use std::sync::atomic::Ordering;
        let mut free = self.free.lock().unwrap_or_else(|p| p.into_inner());
        let start = self.next.load(Ordering::Relaxed);
        let n = *free
            .range(start..)
            .next()
            .or_else(|| free.iter().next())
            .context("pod addresses exhausted")?;
        free.remove(&n);
        self.next
            .store(if n >= 254 { 2 } else { n + 1 }, Ordering::Relaxed);
        Ok(n)
    }

    pub(crate) fn release(&self, n: u8) {
        self.free
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(n);
    }
}

/// Runs `ip ARGS`; `Ok(false)` when it ran and failed.
pub(crate) fn ip(args: &[&str]) -> anyhow::Result<bool> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .context("run `ip` (install iproute2: bash scripts/testenv.sh)")?;
    Ok(out.status.success())
}

/// Runs `ip ARGS` and fails with its stderr when it fails.
pub(crate) fn ip_ok(args: &[&str]) -> anyhow::Result<()> {
    let out = Command::new("ip").args(args).output().context("run `ip`")?;
    if !out.status.success() {
        bail!(
            "ip {} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

/// The pids of the processes in network namespace `name` (`ip netns pids`).
pub(crate) fn netns_pids(name: &str) -> Vec<u32> {
    Command::new("ip")
        .args(["netns", "pids", name])
        .output()
        .map(|out| {
            String::from_utf8_lossy(&out.stdout)
                .split_whitespace()
                .filter_map(|p| p.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// SIGKILLs every process in network namespace `name` and waits (up to 5 s) until none is
/// left, so that deleting the namespace really frees it.
pub(crate) fn kill_netns_pids(name: &str) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        let pids = netns_pids(name);
        if pids.is_empty() || std::time::Instant::now() >= deadline {
            return;
        }
        for pid in pids {
            // SAFETY: plain kill(2); the pid was just listed as inside our namespace.
            unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

fn pid_alive(pid: u32) -> bool {
    std::path::Path::new(&format!("/proc/{pid}")).exists()
}

/// Removes bridges, network namespaces and control-plane temp dirs whose owning test process
/// is gone (killed before it could clean up).
pub fn sweep_stale() {
    // Network namespaces: sl-<pid>-<n>.
    if let Ok(out) = Command::new("ip").args(["netns", "list"]).output() {
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            let name = line.split_whitespace().next().unwrap_or("");
            if let Some(pid) = name
                .strip_prefix("sl-")
                .and_then(|r| r.split('-').next())
                .and_then(|p| p.parse::<u32>().ok())
                && !pid_alive(pid)
            {
                // A process may outlive its test process in there: a child whose
                // parent-death signal was cleared (a setuid or file-capability exec does).
                kill_netns_pids(name);
                let _ = ip(&["netns", "del", name]);
            }
        }
    }
    // Bridges: alias sluice-testenv:pid=<pid>.
    if let Ok(out) = Command::new("ip")
        .args(["-o", "link", "show", "type", "bridge"])
        .output()
    {
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            let Some(name) = line.split(": ").nth(1).map(|n| n.trim()) else {
                continue;
            };
            if !name.starts_with("slbr") {
                continue;
            }
            let owner = line
                .split(ALIAS_PREFIX)
                .nth(1)
                .and_then(|r| r.split_whitespace().next())
                .and_then(|p| p.parse::<u32>().ok());
            if owner.is_none_or(|pid| !pid_alive(pid)) {
                let _ = ip(&["link", "del", name]);
            }
        }
    }
    // Control plane dirs: $TMPDIR/sluice-cp-<pid>-*; other tests' temp dirs:
    // $TMPDIR/sluice-test-<pid>-*.
    if let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) {
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if let Some(pid) = name
                .strip_prefix("sluice-cp-")
                .or_else(|| name.strip_prefix(TEMP_DIR_PREFIX))
                .and_then(|r| r.split('-').next())
                .and_then(|p| p.parse::<u32>().ok())
                && !pid_alive(pid)
            {
                let _ = std::fs::remove_dir_all(e.path());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Deletes the test's veth pair whatever happens to the test.
    struct Veth(String);

    impl Drop for Veth {
        fn drop(&mut self) {
            let _ = ip(&["link", "del", &self.0]);
        }
    }

    fn mac(dev: &str) -> String {
        std::fs::read_to_string(format!("/sys/class/net/{dev}/address"))
            .unwrap_or_default()
            .trim()
            .to_string()
    }

    #[test]
    fn the_gateway_keeps_its_mac_as_ports_with_lower_macs_come_and_go() -> anyhow::Result<()> {
        let net = Network::get()?;
        let before = mac(net.bridge());
        assert_eq!(before, format!("02:73:6c:62:72:{:02x}", net.subnet_id()));
        let name = format!("slmac{}", std::process::id() % 100_000);
        ip_ok(&[
            "link",
            "add",
            &name,
            "address",
            "00:00:00:00:00:01",
            "type",
            "veth",
            "peer",
            "name",
            &format!("{name}p"),
        ])?;
        let veth = Veth(name);
        ip_ok(&["link", "set", &veth.0, "master", net.bridge()])?;
        assert_eq!(mac(net.bridge()), before, "a port with a lower MAC joined");
        drop(veth);
        assert_eq!(mac(net.bridge()), before, "that port left");
        Ok(())
    }
}

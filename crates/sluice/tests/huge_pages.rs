//! The built `sluice` binary runs without transparent huge pages (they kept whole 2 MiB
//! regions of mimalloc's resident: 33 MiB of RSS at 10,000 HTTPRoutes), unless
//! `MIMALLOC_ALLOW_THP` is set, as mimalloc's own option reads. Proved on the running
//! process's /proc/PID/status (`THP_enabled`, Linux 5.0 and newer).

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The process, killed and reaped on every path.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `THP_enabled` of `sluice serve` started with `env`, once the process is past its start.
fn thp_enabled(env: &[(&str, &str)]) -> String {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut command = Command::new(env!("CARGO_BIN_EXE_sluice"));
    command
        .args(["serve", "--manifests"])
        .arg(dir.path())
        .args(["--http-addr", "127.0.0.1:0", "--https-addr", "127.0.0.1:0"])
        .args(["--admin-addr", "127.0.0.1:0", "--workers", "1"])
        .env_remove("MIMALLOC_ALLOW_THP")
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    for (key, value) in env {
        command.env(key, value);
    }
    let child = Running(command.spawn().expect("sluice runs"));
    let status = format!("/proc/{}/status", child.0.id());
    // Until the binary's own main ran (its threads are there by then).
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let text = std::fs::read_to_string(&status).unwrap_or_default();
        let threads = text
            .lines()
            .find_map(|l| l.strip_prefix("Threads:"))
            .and_then(|n| n.trim().parse::<u32>().ok())
            .unwrap_or(0);
        if threads > 1 {
            return text
                .lines()
                .find_map(|l| l.strip_prefix("THP_enabled:"))
                .map(|v| v.trim().to_owned())
                .expect("THP_enabled in /proc/PID/status (Linux 5.0 or newer)");
        }
        assert!(Instant::now() < deadline, "sluice serve did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn transparent_huge_pages_are_off_unless_mimalloc_allow_thp_is_set() {
    assert_eq!(thp_enabled(&[]), "0", "off by default");
    assert_eq!(
        thp_enabled(&[("MIMALLOC_ALLOW_THP", "1")]),
        "1",
        "an explicit MIMALLOC_ALLOW_THP decides"
    );
}

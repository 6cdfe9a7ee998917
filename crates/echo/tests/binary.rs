//! The `sluice-echo` binary: startup line, answering, clean exit on signals.

mod common;

use std::net::SocketAddr;
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use common::{bounded, get, http1, report};
use tokio::io::{AsyncBufReadExt, BufReader, Lines};
use tokio::process::{Child, ChildStdout, Command};

/// Kills the child if the test ends (or panics) while it is still running.
struct ChildGuard(Child);

impl Drop for ChildGuard {
    fn drop(&mut self) {
        let _ = self.0.start_kill();
    }
}

/// Starts the binary with `args` and a clean environment for its own variables.
fn spawn(args: &[&str]) -> (ChildGuard, Lines<BufReader<ChildStdout>>) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_sluice-echo"))
        .args(args)
        .env_remove("ECHO_SERVICE")
        .env_remove("POD_NAME")
        .env_remove("ECHO_LISTEN")
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn sluice-echo");
    let stdout = child.stdout.take().expect("stdout");
    (ChildGuard(child), BufReader::new(stdout).lines())
}

/// Reads one `listening on ADDR` line.
async fn listening(lines: &mut Lines<BufReader<ChildStdout>>) -> SocketAddr {
    let line = lines.next_line().await.unwrap().expect("stdout closed");
    line.strip_prefix("listening on ")
        .unwrap_or_else(|| panic!("unexpected line {line:?}"))
        .parse()
        .expect("address")
}

/// Sends `signal` to the child and waits for it to exit.
async fn signal_and_wait(child: &mut ChildGuard, signal: &str) -> ExitStatus {
    let pid = child.0.id().expect("child still running").to_string();
    let status = Command::new("kill")
        .args([signal, &pid])
        .status()
        .await
        .unwrap();
    assert!(status.success());
    tokio::time::timeout(Duration::from_secs(10), child.0.wait())
        .await
        .expect("exit after signal")
        .unwrap()
}

#[tokio::test]
async fn binary_prints_listening_and_answers() {
    bounded(async {
        let (mut child, mut lines) = spawn(&[
            "--listen",
            "127.0.0.1:0",
            "--service",
            "bin-svc",
            "--pod",
            "bin-pod",
        ]);
        let addr = listening(&mut lines).await;
        assert_ne!(addr.port(), 0, "must print the real bound port");

        let (response, _) = http1(addr, get(addr, "/from/binary?k=v")).await;
        assert_eq!(response.status(), 200);
        assert_eq!(response.headers()["x-echo-pod"], "bin-pod");
        let r = report(&response);
        assert_eq!(r.service, "bin-svc");
        assert_eq!(r.pod, "bin-pod");
        assert_eq!(r.path, "/from/binary");

        let status = signal_and_wait(&mut child, "-TERM").await;
        assert!(status.success(), "{status:?}");
    })
    .await;
}

#[tokio::test]
async fn binary_listens_on_every_address_and_exits_on_sigint() {
    bounded(async {
        let (mut child, mut lines) = spawn(&["--listen", "127.0.0.1:0", "--listen", "127.0.0.1:0"]);
        let first = listening(&mut lines).await;
        let second = listening(&mut lines).await;
        assert_ne!(first, second);
        for addr in [first, second] {
            let (response, _) = http1(addr, get(addr, "/")).await;
            let r = report(&response);
            assert_eq!(r.service, "echo");
            assert!(!r.pod.is_empty());
        }
        let status = signal_and_wait(&mut child, "-INT").await;
        assert!(status.success(), "{status:?}");
        // Nothing else on stdout: exactly one line per listener.
        assert_eq!(lines.next_line().await.unwrap(), None);
    })
    .await;
}

#[tokio::test]
async fn binary_reads_identity_and_listen_from_env() {
    bounded(async {
        let mut command = Command::new(env!("CARGO_BIN_EXE_sluice-echo"));
        command
            .env("ECHO_SERVICE", "env-svc")
            .env("POD_NAME", "env-pod")
            .env("ECHO_LISTEN", "127.0.0.1:0")
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .kill_on_drop(true);
        let mut child = command.spawn().unwrap();
        let stdout = child.stdout.take().unwrap();
        let mut child = ChildGuard(child);
        let mut lines = BufReader::new(stdout).lines();
        let addr = listening(&mut lines).await;
        let (response, _) = http1(addr, get(addr, "/")).await;
        let r = report(&response);
        assert_eq!((r.service.as_str(), r.pod.as_str()), ("env-svc", "env-pod"));
        assert!(signal_and_wait(&mut child, "-TERM").await.success());
    })
    .await;
}

#[tokio::test]
async fn binary_fails_cleanly_when_address_is_taken() {
    bounded(async {
        let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = taken.local_addr().unwrap().to_string();
        let (mut child, mut lines) = spawn(&["--listen", &addr]);
        let status = tokio::time::timeout(Duration::from_secs(10), child.0.wait())
            .await
            .expect("exit")
            .unwrap();
        assert!(!status.success());
        assert_eq!(lines.next_line().await.unwrap(), None, "no listening line");
    })
    .await;
}

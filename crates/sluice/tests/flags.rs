//! Invalid flag values are refused before anything starts, naming the flag and what it
//! accepts (#33: `--workers 0` and a `--log` filter tracing cannot read used to be taken
//! silently, the latter replaced by `info`).

use std::process::Command;

/// `sluice ARGS`: (exit status, stderr).
fn sluice(args: &[&str]) -> (Option<i32>, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(args)
        .env_remove("RUST_LOG")
        .output()
        .expect("the sluice binary runs");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn zero_workers_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path().to_str().unwrap();
    let (code, err) = sluice(&["serve", "--manifests", dir, "--workers", "0"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("--workers"), "{err}");
    assert!(err.contains("must be at least 1"), "{err}");
    let (code, err) = sluice(&["serve", "--manifests", dir, "--workers", "many"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("not a whole number"), "{err}");
}

#[test]
fn an_unreadable_log_filter_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path().to_str().unwrap();
    let (code, err) = sluice(&["--log", "sluice=loud", "serve", "--manifests", dir]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("--log"), "{err}");
    assert!(err.contains("warn,sluice_proxy=debug"), "{err}");
    // The same from the environment.
    let out = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["serve", "--manifests", dir])
        .env("RUST_LOG", "info,=")
        .output()
        .expect("the sluice binary runs");
    assert_eq!(
        out.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The global rate limit's flags (ingress-nginx's `global-rate-limit-*` ConfigMap keys)
/// are on both serving subcommands, with one spelling, and a bad value names the flag.
#[test]
fn global_rate_limit_flags_are_on_serve_and_controller() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path().to_str().unwrap();
    for args in [&["serve", "--manifests", dir][..], &["controller"][..]] {
        let mut args = args.to_vec();
        args.extend(["--global-rate-limit-backend", "etcd"]);
        let (code, err) = sluice(&args);
        assert_eq!(code, Some(2), "{args:?}: {err}");
        assert!(err.contains("--global-rate-limit-backend"), "{err}");
        assert!(err.contains("memcached") && err.contains("redis"), "{err}");
        args.truncate(args.len() - 2);
        args.extend(["--global-rate-limit-memcached-connect-timeout", "soon"]);
        let (code, err) = sluice(&args);
        assert_eq!(code, Some(2), "{args:?}: {err}");
        assert!(
            err.contains("--global-rate-limit-memcached-connect-timeout"),
            "{err}"
        );
    }
}

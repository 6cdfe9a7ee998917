//! The flags through the real binary (#33): invalid values are refused before anything
//! starts, naming the flag and what it accepts (`--workers 0` and a `--log` filter tracing
//! cannot read used to be taken silently, the latter replaced by `info`); each concept has
//! one spelling on every command, the spellings of earlier releases still work for one
//! release with a one-line warning naming the new flag, and `--help` shows only the new.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

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

/// Every kind of bad value on every command: exit status 2 (usage), the flag named, and
/// what it accepts.
#[test]
fn invalid_values_name_the_flag_and_the_accepted_form() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path().to_str().unwrap();
    let serve = |flag: &'static str, value: &'static str| {
        let mut args = vec!["serve", "--manifests", dir];
        args.push(flag);
        args.push(value);
        args
    };
    let cases: Vec<(Vec<&str>, &str, &str)> = vec![
        // nginx sizes (`client_max_body_size 10m`) and flag units are read; others not.
        (
            serve("--max-body-bytes", "10XB"),
            "--max-body-bytes",
            "k, m, g (nginx), KiB",
        ),
        (
            vec!["serve", "--manifests", dir, "--max-header-bytes=-1"],
            "--max-header-bytes",
            "expected bytes",
        ),
        // A timeout of zero would fail every request; a negative one is no duration.
        (
            serve("--connect-timeout", "0"),
            "--connect-timeout",
            "must be more than 0",
        ),
        (
            serve("--upstream-read-timeout", "0s"),
            "--upstream-read-timeout",
            "must be more than 0",
        ),
        (
            serve("--poll-interval", "0"),
            "--poll-interval",
            "must be more than 0",
        ),
        (
            vec!["serve", "--manifests", dir, "--client-body-timeout=-5s"],
            "--client-body-timeout",
            "expected whole seconds, or numbers with units",
        ),
        (
            serve("--http-addr", "80"),
            "--http-addr",
            "expected IP:PORT",
        ),
        (
            serve("--admin-addr", "localhost:10254"),
            "--admin-addr",
            "expected IP:PORT",
        ),
        (
            vec!["serve", "--manifests", dir, "--hsts=maybe"],
            "--hsts",
            "expected true or false",
        ),
        (
            vec!["controller", "--validating-webhook", "9443"],
            "--validating-webhook",
            "expected IP:PORT",
        ),
        (
            vec!["controller", "--sync-timeout", "0"],
            "--sync-timeout",
            "must be more than 0",
        ),
        // Names that must not be empty.
        (
            vec!["serve", "--manifests", dir, "--ingress-class="],
            "--ingress-class",
            "a value is required",
        ),
        (
            vec!["controller", "--watch-namespace="],
            "--watch-namespace",
            "a value is required",
        ),
        (
            vec!["explain", "--admin-addr", "nope", "http://a/"],
            "--admin-addr",
            "expected HOST:PORT",
        ),
        (
            vec!["ingress-manager", "--concurrent-reconciles", "0"],
            "--concurrent-reconciles",
            "0 is not in 1..",
        ),
        (
            vec!["ingress-manager", "--sync-timeout", "0"],
            "--sync-timeout",
            "must be more than 0",
        ),
        (
            vec!["ingress-manager", "--leader-elect=maybe"],
            "--leader-elect",
            "expected true or false",
        ),
    ];
    for (args, flag, accepted) in cases {
        let (code, err) = sluice(&args);
        assert_eq!(code, Some(2), "{args:?}: {err}");
        assert!(err.contains(flag), "{args:?} names {flag}: {err}");
        assert!(err.contains(accepted), "{args:?} says {accepted:?}: {err}");
        assert!(!err.contains("warning:"), "{args:?}: {err}");
    }
}

/// The spellings of earlier releases, per command: still read, each with one warning
/// line naming the new flag; `--help` shows the new spelling and hides the old.
const RENAMED: &[(&str, &str, &str)] = &[
    ("explain", "--admin", "--admin-addr"),
    ("migrate", "--namespace", "--watch-namespace"),
    ("migrate", "--controller-name", "--controller-class"),
    ("serve", "--controller-name", "--controller-class"),
    ("controller", "--controller-name", "--controller-class"),
    ("controller", "--webhook-addr", "--validating-webhook"),
    (
        "controller",
        "--webhook-cert-file",
        "--validating-webhook-certificate",
    ),
    (
        "controller",
        "--webhook-key-file",
        "--validating-webhook-key",
    ),
    ("ingress-manager", "--workers", "--concurrent-reconciles"),
    ("ingress-manager", "--namespace", "--watch-namespace"),
    ("ingress-manager", "--cache-sync-timeout", "--sync-timeout"),
];

#[test]
fn help_shows_the_new_spellings_only() {
    for (command, old, new) in RENAMED {
        let out = Command::new(env!("CARGO_BIN_EXE_sluice"))
            .args([command, "--help"])
            .output()
            .expect("the sluice binary runs");
        assert_eq!(out.status.code(), Some(0));
        let help = String::from_utf8_lossy(&out.stdout);
        // A flag shown: among the first words of a line (`-n, --watch-namespace <NS>`).
        let shows = |flag: &str| {
            help.lines().any(|l| {
                l.split_whitespace().take(3).any(|w| {
                    let w = w.trim_end_matches(',');
                    w == flag || w.starts_with(&format!("{flag}["))
                })
            })
        };
        assert!(shows(new), "sluice {command} --help lacks {new}:\n{help}");
        assert!(!shows(old), "sluice {command} --help shows {old}:\n{help}");
        assert!(
            !help.contains(&format!("{old} ")),
            "{command}: {old} in\n{help}"
        );
    }
    // One boolean style in the help: `--flag[=<BOOL>]`.
    let out = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["serve", "--help"])
        .output()
        .expect("the sluice binary runs");
    let help = String::from_utf8_lossy(&out.stdout);
    for flag in [
        "--hsts",
        "--access-log",
        "--pin-workers",
        "--watch-ingress-without-class",
    ] {
        assert!(
            help.contains(&format!("{flag}[=<BOOL>]")),
            "{flag}:\n{help}"
        );
    }
}

/// Old spellings still do what they did, and say once what to write instead. (The
/// controller's and ingress-manager's need a cluster to run: their aliases parse to the
/// same field as the new name, below, and warn here before `--help` ends the run.)
#[test]
fn old_spellings_work_and_warn() {
    let warning = |old: &str, new: &str| {
        format!("warning: {old} is deprecated and will be removed in the next release; use {new}")
    };
    // explain: the old flag's address is the one asked.
    let closed = free_port();
    let (code, err) = sluice(&[
        "explain",
        "--admin",
        &format!("127.0.0.1:{closed}"),
        "http://a/",
    ]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains(&format!("asking the admin port 127.0.0.1:{closed}")),
        "{err}"
    );
    assert_eq!(err.matches("warning:").count(), 1, "{err}");
    assert!(err.contains(&warning("--admin", "--admin-addr")), "{err}");

    // migrate: `--namespace` still filters, `--controller-name` still picks the class.
    let dir = tempfile::tempdir().unwrap();
    let mut manifests = String::from(
        "apiVersion: networking.k8s.io/v1\nkind: IngressClass\nmetadata: {name: edge}\n\
         spec: {controller: example.com/edge}\n---\n",
    );
    for ns in ["team-a", "team-b"] {
        manifests += &ingress_in(ns, &format!("{ns}-web"), "edge", &format!("{ns}.test"));
    }
    std::fs::write(dir.path().join("all.yaml"), manifests).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["migrate", "--manifests"])
        .arg(dir.path())
        .args(["--namespace", "team-a", "--ingress-class", "edge"])
        .args(["--controller-name", "example.com/edge"])
        .env_remove("RUST_LOG")
        .output()
        .expect("the sluice binary runs");
    let (report, err) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(report.contains("team-a/team-a-web"), "{report}{err}");
    assert!(!report.contains("team-b/team-b-web"), "{report}");
    assert!(
        report.contains("--controller-class example.com/edge"),
        "{report}"
    );
    assert_eq!(err.matches("warning:").count(), 2, "{err}");
    assert!(
        err.contains(&warning("--namespace", "--watch-namespace")),
        "{err}"
    );
    assert!(
        err.contains(&warning("--controller-name", "--controller-class")),
        "{err}"
    );

    // The cluster commands: a warning per old spelling, nothing else said about them.
    for (command, old, new) in RENAMED {
        if !matches!(*command, "controller" | "ingress-manager") {
            continue;
        }
        let value = match *old {
            "--webhook-addr" => ":9443",
            "--workers" => "3",
            "--cache-sync-timeout" => "5s",
            _ => "x/y",
        };
        let (code, err) = sluice(&[command, old, value, "--help"]);
        assert_eq!(code, Some(0), "{command} {old}: {err}");
        assert_eq!(err.trim(), warning(old, new), "{command} {old}");
    }
    // Booleans: `--flag VALUE` and on/off, as older releases took them.
    let (code, err) = sluice(&["ingress-manager", "--leader-elect", "false", "--help"]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(
        err.trim(),
        "warning: --leader-elect false is deprecated and will be removed in the next release; \
         write --leader-elect=false"
    );
}

/// The controller's and ingress-manager's old spellings set what the new ones set.
#[test]
fn cluster_command_aliases_parse_to_the_new_flags() {
    use clap::Parser;
    #[derive(Parser)]
    struct Controller {
        #[command(flatten)]
        args: sluice_controller::cluster::ControllerArgs,
    }
    let old = Controller::try_parse_from([
        "sluice",
        "--controller-name=example.com/edge",
        "--webhook-addr=127.0.0.1:9443",
        "--webhook-cert-file=/c",
        "--webhook-key-file=/k",
    ])
    .unwrap_or_else(|e| panic!("{e}"))
    .args;
    let new = Controller::try_parse_from([
        "sluice",
        "--controller-class=example.com/edge",
        // ingress-nginx's `--validating-webhook=:8443` form.
        "--validating-webhook=:9443",
        "--validating-webhook-certificate=/c",
        "--validating-webhook-key=/k",
    ])
    .unwrap_or_else(|e| panic!("{e}"))
    .args;
    assert_eq!(old.class.controller_name, "example.com/edge");
    assert_eq!(old.class.controller_name, new.class.controller_name);
    assert_eq!(old.webhook_addr.map(|a| a.port()), Some(9443));
    assert_eq!(new.webhook_addr, Some("0.0.0.0:9443".parse().unwrap()));
    assert_eq!(old.webhook_cert_file, new.webhook_cert_file);
    assert_eq!(old.webhook_key_file, new.webhook_key_file);
}

/// A port free right now on loopback.
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn ingress_in(namespace: &str, name: &str, class: &str, host: &str) -> String {
    format!(
        "apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: {{name: {name}, namespace: {namespace}}}
spec:
  ingressClassName: {class}
  rules:
  - host: {host}
    http:
      paths:
      - path: /
        pathType: Prefix
        backend: {{service: {{name: gone, port: {{number: 80}}}}}}
---
"
    )
}

/// `request` (a whole HTTP/1.1 request) to `port`; the response's status and text.
fn send(port: u16, request: &[u8]) -> Option<(u16, String)> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    stream.write_all(request).ok()?;
    let mut answer = Vec::new();
    let _ = stream.read_to_end(&mut answer);
    let answer = String::from_utf8_lossy(&answer).into_owned();
    let status = answer.split_whitespace().nth(1)?.parse().ok()?;
    Some((status, answer))
}

fn get(port: u16, host: &str, path: &str) -> Option<(u16, String)> {
    send(
        port,
        format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n").as_bytes(),
    )
}

/// A body of `len` bytes POSTed to `host`; the status.
fn post(port: u16, host: &str, len: usize) -> Option<u16> {
    let mut request = format!(
        "POST / HTTP/1.1\r\nHost: {host}\r\nContent-Length: {len}\r\nConnection: close\r\n\r\n"
    )
    .into_bytes();
    request.extend(std::iter::repeat_n(b'x', len));
    send(port, &request).map(|(status, _)| status)
}

struct Serve(Child);

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `sluice serve` run with spellings of earlier releases serves as they asked: the class of
/// `--controller-name`, the access log of `--access-log on`, the nginx-style size of
/// `--max-body-bytes 1k` (`client_max_body_size 1k`: 413 above it). Its `/metrics` with
/// `--metrics-compat ingress-nginx` carries that controller value as `controller_class`,
/// as ingress-nginx's carries its `--controller-class`.
#[test]
fn serve_with_old_spellings_serves_as_asked_and_names_its_class_in_the_metrics() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let backend = runtime
        .block_on(sluice_echo::EchoServer::start(
            "127.0.0.1:0",
            sluice_echo::Identity::new("web", "web-1"),
        ))
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let manifests = format!(
        "apiVersion: networking.k8s.io/v1\nkind: IngressClass\nmetadata: {{name: edge}}\n\
         spec: {{controller: example.com/edge}}\n---\n\
         apiVersion: v1\nkind: Service\nmetadata: {{name: web, namespace: default}}\n\
         spec: {{ports: [{{name: http, port: 80}}]}}\n---\n\
         apiVersion: v1\nkind: Endpoints\nmetadata: {{name: web, namespace: default}}\n\
         subsets: [{{addresses: [{{ip: 127.0.0.1}}], ports: [{{name: http, port: {}}}]}}]\n---\n",
        backend.addr().port()
    ) + &ingress_in("default", "web", "edge", "web.test").replace("gone", "web");
    std::fs::write(dir.path().join("all.yaml"), manifests).unwrap();
    let (http, admin) = (free_port(), free_port());
    let mut child = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["serve", "--manifests"])
        .arg(dir.path())
        .args(["--http-addr", &format!("127.0.0.1:{http}")])
        .args(["--https-addr", "127.0.0.1:0"])
        .args(["--admin-addr", &format!("127.0.0.1:{admin}")])
        .args([
            "--ingress-class",
            "edge",
            "--controller-name",
            "example.com/edge",
        ])
        .args([
            "--access-log",
            "on",
            "--max-body-bytes",
            "1k",
            "--workers",
            "1",
        ])
        .args(["--metrics-compat", "ingress-nginx"])
        .env_remove("RUST_LOG")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("sluice runs");
    let stdout = child.stdout.take().unwrap();
    let stderr = child.stderr.take().unwrap();
    let _serve = Serve(child);
    let (tx, rx) = std::sync::mpsc::channel::<(bool, String)>();
    for (is_stdout, stream) in [
        (true, Box::new(stdout) as Box<dyn Read + Send>),
        (false, Box::new(stderr)),
    ] {
        let tx = tx.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stream).lines().map_while(Result::ok) {
                if tx.send((is_stdout, line)).is_err() {
                    return;
                }
            }
        });
    }
    // Routed once the class is ours (404 otherwise).
    let deadline = Instant::now() + Duration::from_secs(30);
    while get(http, "web.test", "/warm-up").map(|r| r.0) != Some(200) {
        assert!(
            Instant::now() < deadline,
            "sluice serve did not route web.test"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(post(http, "web.test", 1024), Some(200), "1k is allowed");
    assert_eq!(post(http, "web.test", 1025), Some(413), "over 1k");

    let deadline = Instant::now() + Duration::from_secs(10);
    let metrics = loop {
        let (status, text) = get(admin, "127.0.0.1", "/metrics").expect("the admin port answers");
        assert_eq!(status, 200);
        if text.contains("nginx_ingress_controller_requests{") {
            break text;
        }
        assert!(
            Instant::now() < deadline,
            "no ingress-nginx series:\n{text}"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    let series: Vec<&str> = metrics
        .lines()
        .filter(|l| l.starts_with("nginx_ingress_controller_requests{"))
        .collect();
    assert!(
        series.iter().any(|l| l.contains(r#"ingress="web""#)),
        "{metrics}"
    );
    assert!(
        series
            .iter()
            .all(|l| l.contains(r#"controller_class="example.com/edge""#)),
        "{series:#?}"
    );

    let mut stdout_lines = Vec::new();
    let mut stderr_lines = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline && !stdout_lines.iter().any(|l: &String| l.contains("/warm-up"))
    {
        if let Ok((is_stdout, line)) = rx.recv_timeout(Duration::from_millis(200)) {
            if is_stdout {
                stdout_lines.push(line)
            } else {
                stderr_lines.push(line)
            }
        }
    }
    while let Ok((is_stdout, line)) = rx.recv_timeout(Duration::from_millis(300)) {
        if is_stdout {
            stdout_lines.push(line)
        } else {
            stderr_lines.push(line)
        }
    }
    assert!(
        stdout_lines.iter().any(|l| l.contains("/warm-up")),
        "--access-log on: no access log: {stdout_lines:#?}"
    );
    let warnings: Vec<&String> = stderr_lines
        .iter()
        .filter(|l| l.starts_with("warning:"))
        .collect();
    assert_eq!(
        warnings,
        [
            "warning: --controller-name is deprecated and will be removed in the next release; \
             use --controller-class",
            "warning: --access-log on is deprecated and will be removed in the next release; \
             write --access-log=true",
        ],
        "{stderr_lines:#?}"
    );
    drop(_serve);
    runtime.block_on(backend.shutdown()).unwrap();
}

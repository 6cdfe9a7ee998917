//! The built `sluice` binary binds ports 80 and 443 and serves when run the way the
//! DaemonSet of deploy/ runs it: uid/gid 65532, no capability but NET_BIND_SERVICE,
//! no_new_privs (`allowPrivilegeEscalation: false`), with the file capability the
//! Dockerfile sets (`setcap cap_net_bind_service=+ep`). Without that file capability the
//! same file fails to bind port 80 and says so.
//!
//! The container runtime (runc) does, before exec: bounding set = the container's
//! capabilities; keep-caps, setgroups/setresgid/setresuid to the pod's user; permitted and
//! effective = the container's capabilities, inheritable and ambient empty; no_new_privs;
//! exec. `setpriv --reuid --regid --clear-groups --inh-caps=-all
//! --bounding-set=-all,+net_bind_service --no-new-privs` does the same (it sets keep-caps
//! around the uid change, so its permitted set survives; ambient stays empty). The kernel
//! then gives the executed file `permitted = file permitted & bounding`, cut down by
//! no_new_privs to what the process already had: NET_BIND_SERVICE with the file
//! capability, nothing without it. The test reads the running process's
//! /proc/PID/status to prove the result, not the recipe.
//!
//! Everything runs in network namespaces of the test's own (ports 80/443 of the machine are
//! never touched); the processes and namespaces go away on every path, panics included
//! (values that clean up on drop; `sweep_stale` on the next run after a SIGKILL).
//! Needs root, `setcap` (libcap2-bin), `setpriv` (util-linux), `curl` and `ip`: all
//! installed by scripts/testenv.sh.

use sluice_testenv::{NetNs, Supervised};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const UID: &str = "65532";
const HOST: &str = "bind.test";
const BACKEND_BODY: &str = "answered by the backend";
/// NET_BIND_SERVICE (capability 10) as /proc/PID/status prints a capability set.
const NET_BIND_SERVICE_ONLY: &str = "0000000000000400";

fn require_tools() {
    assert!(
        unsafe { libc::geteuid() } == 0,
        "this test needs root (network namespaces, setcap, setpriv)"
    );
    for tool in ["setcap", "setpriv", "curl", "ip"] {
        sluice_testenv::on_path(tool).unwrap_or_else(|e| panic!("{e:#}"));
    }
}

/// A directory that uid 65532 can read and traverse (tempdirs are 0700), removed on drop.
fn world_readable_tempdir() -> tempfile::TempDir {
    // Swept by the next test run if this one is SIGKILLed.
    let dir = sluice_testenv::temp_dir().expect("tempdir");
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    dir
}

/// The backend: a listener created inside `ns` (a thread joins the namespace to bind it; a
/// socket stays in the namespace it was made in), answering every request with
/// [`BACKEND_BODY`], until dropped.
struct Backend {
    port: u16,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Backend {
    fn start(ns: &NetNs) -> Backend {
        let path = format!("/var/run/netns/{}", ns.name());
        let listener = std::thread::spawn(move || {
            let file = std::fs::File::open(&path).expect("open the netns");
            // SAFETY: setns(2) on a valid fd; it changes only this short-lived thread.
            let rc =
                unsafe { libc::setns(std::os::fd::AsRawFd::as_raw_fd(&file), libc::CLONE_NEWNET) };
            assert_eq!(rc, 0, "setns: {}", std::io::Error::last_os_error());
            TcpListener::bind("127.0.0.1:0").expect("bind the backend")
        })
        .join()
        .expect("backend listener thread");
        listener.set_nonblocking(true).unwrap();
        let port = listener.local_addr().unwrap().port();
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            while !flag.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((mut conn, _)) => {
                        let _ = conn.set_nonblocking(false);
                        let _ = conn.set_read_timeout(Some(Duration::from_secs(5)));
                        let mut head = Vec::new();
                        let mut buf = [0u8; 1024];
                        while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                            match conn.read(&mut buf) {
                                Ok(0) | Err(_) => break,
                                Ok(n) => head.extend_from_slice(&buf[..n]),
                            }
                        }
                        let _ = write!(
                            conn,
                            "HTTP/1.1 200 OK\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{}",
                            BACKEND_BODY.len(),
                            BACKEND_BODY
                        );
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(10)),
                }
            }
        });
        Backend {
            port,
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for Backend {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Writes the manifests: our IngressClass, a Service + Endpoints for the backend, a TLS
/// Secret and an Ingress for [`HOST`] over HTTP and HTTPS. Returns the CA's PEM.
fn write_manifests(dir: &Path, backend_port: u16) -> String {
    use base64::Engine;
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    // Distinct subject names: with rcgen's default one on both, curl (OpenSSL) takes the
    // leaf for a self-signed certificate.
    ca_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "sluice test CA");
    let ca = rcgen::CertifiedIssuer::self_signed(ca_params, ca_key).unwrap();
    let leaf_key = rcgen::KeyPair::generate().unwrap();
    let mut leaf_params = rcgen::CertificateParams::new(vec![HOST.to_string()]).unwrap();
    leaf_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, HOST);
    let leaf = leaf_params.signed_by(&leaf_key, &ca).unwrap();
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    let yaml = format!(
        "apiVersion: networking.k8s.io/v1
kind: IngressClass
metadata: {{name: sluice}}
spec: {{controller: sluice.dev/ingress-controller}}
---
apiVersion: v1
kind: Service
metadata: {{name: web, namespace: default}}
spec: {{ports: [{{name: http, port: 80}}]}}
---
apiVersion: v1
kind: Endpoints
metadata: {{name: web, namespace: default}}
subsets: [{{addresses: [{{ip: 127.0.0.1}}], ports: [{{name: http, port: {backend_port}}}]}}]
---
apiVersion: v1
kind: Secret
metadata: {{name: bind-tls, namespace: default}}
type: kubernetes.io/tls
data: {{tls.crt: {crt}, tls.key: {key}}}
---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: web
  namespace: default
  # Plain HTTP is served, not redirected to HTTPS: both ports answer from the backend.
  annotations: {{nginx.ingress.kubernetes.io/ssl-redirect: \"false\"}}
spec:
  ingressClassName: sluice
  tls: [{{hosts: [{HOST}], secretName: bind-tls}}]
  rules:
  - host: {HOST}
    http:
      paths:
      - {{path: /, pathType: Prefix, backend: {{service: {{name: web, port: {{name: http}}}}}}}}
",
        crt = b64(&leaf.pem()),
        key = b64(&leaf_key.serialize_pem()),
    );
    std::fs::write(dir.join("objects.yaml"), yaml).unwrap();
    ca.pem()
}

/// `sluice serve` on 0.0.0.0:80 and 0.0.0.0:443 in `ns`, as uid/gid 65532 with only
/// NET_BIND_SERVICE in its bounding set and no_new_privs; its stderr collected.
struct Sluice {
    // Dropped first: the process goes before the namespace (which kills any leftover too).
    process: Supervised,
    log: Arc<Mutex<String>>,
}

impl Sluice {
    fn start(ns: &NetNs, binary: &Path, manifests: &Path) -> Sluice {
        let mut cmd = ns.command("setpriv");
        cmd.args([
            &format!("--reuid={UID}"),
            &format!("--regid={UID}"),
            "--clear-groups",
            "--inh-caps=-all",
            "--bounding-set=-all,+net_bind_service",
            "--no-new-privs",
            "--",
        ])
        .arg(binary)
        .arg("--log=info")
        .arg("serve")
        .arg("--manifests")
        .arg(manifests)
        .args([
            "--http-addr",
            "0.0.0.0:80",
            "--https-addr",
            "0.0.0.0:443",
            "--admin-addr",
            "127.0.0.1:10254",
        ])
        .env_remove("RUST_BACKTRACE")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
        let mut process = Supervised::spawn("sluice serve", cmd).expect("start sluice");
        let log = Arc::new(Mutex::new(String::new()));
        let child = process.child_mut().expect("child");
        let streams: [Box<dyn Read + Send>; 2] = [
            Box::new(child.stdout.take().expect("stdout")),
            Box::new(child.stderr.take().expect("stderr")),
        ];
        for stream in streams {
            let log = log.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(stream).lines() {
                    let Ok(line) = line else { break };
                    eprintln!("sluice: {line}");
                    let mut log = log.lock().unwrap();
                    log.push_str(&line);
                    log.push('\n');
                }
            });
        }
        Sluice { process, log }
    }

    fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }

    /// Waits until the log contains `needle` or the process exits (`Err(log)`).
    fn wait_for(&mut self, needle: &str, timeout: Duration) -> Result<(), String> {
        let deadline = Instant::now() + timeout;
        loop {
            if self.log().contains(needle) {
                return Ok(());
            }
            if let Some(status) = self.process.exited() {
                // Let the reader threads catch the last lines.
                std::thread::sleep(Duration::from_millis(200));
                return Err(format!("exited with {status}:\n{}", self.log()));
            }
            if Instant::now() >= deadline {
                return Err(format!("no {needle:?} within {timeout:?}:\n{}", self.log()));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Waits for the process to exit; its status and log.
    fn wait_exit(&mut self, timeout: Duration) -> (std::process::ExitStatus, String) {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.process.exited() {
                std::thread::sleep(Duration::from_millis(200));
                return (status, self.log());
            }
            assert!(
                Instant::now() < deadline,
                "still running after {timeout:?}:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// `field` of /proc/PID/status.
fn status_field(pid: u32, field: &str) -> String {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:")))
        .unwrap_or_else(|| panic!("no {field} in /proc/{pid}/status"))
        .trim()
        .to_string()
}

/// `curl ARGS` inside `ns`: (HTTP status, body).
fn curl(ns: &NetNs, args: &[&str]) -> (String, String) {
    let out = ns
        .command("curl")
        .args(["-sS", "--max-time", "5", "-w", "\n%{http_code}"])
        .args(args)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "curl {args:?} failed: {}{stdout}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (body, code) = stdout.rsplit_once('\n').unwrap_or(("", &stdout));
    (code.to_string(), body.to_string())
}

fn setcap(args: &[&str], file: &Path) {
    let out = Command::new("setcap")
        .args(args)
        .arg(file)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "setcap {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn binds_80_and_443_as_uid_65532_with_the_file_capability_only() {
    require_tools();
    let dir = world_readable_tempdir();
    // A copy: setcap must not touch the build's own binary.
    let binary: PathBuf = dir.path().join("sluice");
    std::fs::copy(env!("CARGO_BIN_EXE_sluice"), &binary).unwrap();
    std::fs::set_permissions(&binary, std::fs::Permissions::from_mode(0o755)).unwrap();
    let manifests = dir.path().join("manifests");
    std::fs::create_dir(&manifests).unwrap();
    std::fs::set_permissions(&manifests, std::fs::Permissions::from_mode(0o755)).unwrap();

    // 1. With the file capability (the Dockerfile's setcap): binds and serves.
    setcap(&["cap_net_bind_service=+ep"], &binary);
    let ns = NetNs::create().unwrap();
    let backend = Backend::start(&ns);
    let ca = write_manifests(&manifests, backend.port);
    let ca_file = dir.path().join("ca.pem");
    std::fs::write(&ca_file, ca).unwrap();
    let mut sluice = Sluice::start(&ns, &binary, &manifests);
    sluice
        .wait_for("sluice serving", Duration::from_secs(30))
        .unwrap_or_else(|log| panic!("sluice did not come up as uid {UID}: {log}"));

    // What the process really runs with: that of the DaemonSet's container.
    let pid = sluice.process.id().unwrap();
    assert_eq!(
        std::fs::read_link(format!("/proc/{pid}/exe")).unwrap(),
        binary,
        "the child is sluice itself (ip netns exec and setpriv exec, they do not fork)"
    );
    assert_eq!(
        status_field(pid, "Uid"),
        format!("{UID}\t{UID}\t{UID}\t{UID}")
    );
    assert_eq!(
        status_field(pid, "Gid"),
        format!("{UID}\t{UID}\t{UID}\t{UID}")
    );
    assert_eq!(status_field(pid, "Groups"), "");
    assert_eq!(status_field(pid, "NoNewPrivs"), "1");
    assert_eq!(status_field(pid, "CapEff"), NET_BIND_SERVICE_ONLY);
    assert_eq!(status_field(pid, "CapPrm"), NET_BIND_SERVICE_ONLY);
    assert_eq!(status_field(pid, "CapBnd"), NET_BIND_SERVICE_ONLY);
    assert_eq!(status_field(pid, "CapInh"), "0000000000000000");
    assert_eq!(status_field(pid, "CapAmb"), "0000000000000000");

    // It serves on both ports, routed to the backend.
    let (code, body) = curl(
        &ns,
        &["-H", &format!("Host: {HOST}"), "http://127.0.0.1:80/"],
    );
    assert_eq!((code.as_str(), body.as_str()), ("200", BACKEND_BODY));
    let resolve = format!("{HOST}:443:127.0.0.1");
    let ca_arg = ca_file.to_string_lossy().into_owned();
    let (code, body) = curl(
        &ns,
        &[
            "--cacert",
            &ca_arg,
            "--resolve",
            &resolve,
            &format!("https://{HOST}/"),
        ],
    );
    assert_eq!((code.as_str(), body.as_str()), ("200", BACKEND_BODY));
    drop(sluice);
    drop(backend);
    drop(ns);

    // 2. The same file without the file capability: binding port 80 fails, and says so.
    setcap(&["-r"], &binary);
    let ns = NetNs::create().unwrap();
    let mut sluice = Sluice::start(&ns, &binary, &manifests);
    let (status, log) = sluice.wait_exit(Duration::from_secs(30));
    assert!(!status.success(), "started without the capability:\n{log}");
    assert!(
        log.contains("binding the HTTP listener on 0.0.0.0:80")
            && log.contains("Permission denied"),
        "the error names the address and the reason:\n{log}"
    );
    // ... and what grants the capability (#33: it used to say only "Permission denied").
    assert!(
        log.contains("ports below 1024 need the CAP_NET_BIND_SERVICE capability")
            && log.contains("NET_BIND_SERVICE]")
            && log.contains("--http-addr 0.0.0.0:8080"),
        "the error says how to grant the capability:\n{log}"
    );
    assert!(!log.contains("sluice serving"), "{log}");
    let name = ns.name().to_string();
    drop(sluice);
    drop(ns);
    let listed = Command::new("ip").args(["netns", "list"]).output().unwrap();
    assert!(
        !String::from_utf8_lossy(&listed.stdout).contains(&name),
        "netns {name} left behind"
    );
}

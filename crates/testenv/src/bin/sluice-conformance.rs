//! Runs the Gateway API conformance suite against sluice on the test cluster: a control
//! plane and node agent of this crate, the CRDs of the suite's version (experimental channel unless told),
//! the ServiceAccount and ClusterRole of `deploy/base`, GatewayClass `sluice`, and `sluice
//! controller` as a process of its own under that ServiceAccount, each Gateway served on an
//! address of its own from a loopback pool (`--gateway-address-pool`: the suite runs
//! several Gateways on port 80). The base manifests' pods run through the node agent. Then the suite's compiled test binary runs with the admin
//! kubeconfig, and its exit status is this program's. Everything it started is stopped on
//! every path: on return, on SIGINT/SIGTERM, and with this process if it is killed
//! (children die with it, `PR_SET_PDEATHSIG`; stale network namespaces are swept on the
//! next start).
//!
//! `scripts/conformance.sh` builds what this needs and runs it; see there for the flags.

use anyhow::{Context, bail};
use kube::api::{Api, DynamicObject};
use kube::core::{ApiResource, GroupVersionKind};
use sluice_testenv::{ControlPlane, Supervised, apply_yaml, eventually, workspace_binary};
use std::path::PathBuf;
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

const NAMESPACE: &str = include_str!("../../../../deploy/base/namespace.yaml");
const RBAC: &str = include_str!("../../../../deploy/base/rbac.yaml");
/// The GatewayClass the suite is pointed at (`-gateway-class`), with sluice's default
/// `--gateway-controller-name`.
const GATEWAY_CLASS: &str = "sluice";
const CONTROLLER_NAME: &str = "sluice.dev/gateway-controller";

const USAGE: &str = "usage: sluice-conformance --suite BIN --crds DIR --out DIR --address-pool CIDR \
[--report FILE] [--run-test NAME] [--sluice-arg ARG]... [-- SUITE-FLAGS...]";

struct Args {
    /// The suite's test binary (`go test -c` of `conformance/`).
    suite: PathBuf,
    /// `config/crd/standard` of the gateway-api module.
    crds: PathBuf,
    /// Logs (sluice.log) and, with --run-test, the report.
    out: PathBuf,
    /// Where Gateways get their addresses (loopback: the suite sends requests to them).
    address_pool: String,
    report: Option<PathBuf>,
    run_test: Option<String>,
    sluice_args: Vec<String>,
    suite_args: Vec<String>,
}

fn parse_args() -> anyhow::Result<Args> {
    let mut it = std::env::args().skip(1);
    let (mut suite, mut crds, mut out, mut address_pool) = (None, None, None, None);
    let (mut report, mut run_test) = (None, None);
    let (mut sluice_args, mut suite_args) = (Vec::new(), Vec::new());
    while let Some(a) = it.next() {
        let mut value = || {
            it.next()
                .with_context(|| format!("{a} needs a value\n{USAGE}"))
        };
        match a.as_str() {
            "--suite" => suite = Some(PathBuf::from(value()?)),
            "--crds" => crds = Some(PathBuf::from(value()?)),
            "--out" => out = Some(PathBuf::from(value()?)),
            "--address-pool" => address_pool = Some(value()?),
            "--report" => report = Some(PathBuf::from(value()?)),
            "--run-test" => run_test = Some(value()?),
            "--sluice-arg" => sluice_args.push(value()?),
            "--" => {
                suite_args.extend(it.by_ref());
            }
            _ => bail!("unknown argument {a:?}\n{USAGE}"),
        }
    }
    fn need<T>(v: Option<T>, name: &str) -> anyhow::Result<T> {
        v.with_context(|| format!("{name} is required\n{USAGE}"))
    }
    Ok(Args {
        suite: need(suite, "--suite")?,
        crds: need(crds, "--crds")?,
        out: need(out, "--out")?,
        address_pool: need(address_pool, "--address-pool")?,
        report,
        run_test,
        sluice_args,
        suite_args,
    })
}

fn main() -> ExitCode {
    let code = match parse_args().and_then(|args| {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()?;
        rt.block_on(async {
            tokio::select! {
                r = run(args) => r,
                s = interrupted() => {
                    eprintln!("conformance: {s}, stopping");
                    Ok(130)
                }
            }
        })
    }) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("conformance: {e:#}");
            2
        }
    };
    // exit(3) runs the at-exit hooks of sluice-testenv: node agent, then control plane.
    std::process::exit(code.into())
}

async fn interrupted() -> &'static str {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut int), Ok(mut term)) = (
        signal(SignalKind::interrupt()),
        signal(SignalKind::terminate()),
    ) else {
        return std::future::pending().await;
    };
    tokio::select! {
        _ = int.recv() => "SIGINT",
        _ = term.recv() => "SIGTERM",
    }
}

fn log(msg: impl std::fmt::Display) {
    eprintln!("conformance: {msg}");
}

async fn run(args: Args) -> anyhow::Result<u8> {
    let began = Instant::now();
    std::fs::create_dir_all(&args.out)?;
    let cp = ControlPlane::shared().await?;
    cp.node_agent().await?;
    log(format_args!(
        "control plane and node agent up in {:.1}s",
        cp.started_in().as_secs_f64()
    ));
    let admin = cp.client();
    apply_yaml(&admin, NAMESPACE).await?;
    apply_yaml(&admin, RBAC).await?;
    install_crds(&admin, &args.crds).await?;
    apply_yaml(
        &admin,
        &format!(
            "apiVersion: gateway.networking.k8s.io/v1\nkind: GatewayClass\n\
             metadata: {{name: {GATEWAY_CLASS}}}\nspec: {{controllerName: {CONTROLLER_NAME}}}\n"
        ),
    )
    .await?;

    let kubeconfig = cp
        .service_account_kubeconfig("sluice-system", "sluice")
        .await?;
    let log_path = args.out.join("sluice.log");
    let sluice_log = std::fs::File::create(&log_path)
        .with_context(|| format!("create {}", log_path.display()))?;
    let mut cmd = Command::new(workspace_binary("sluice")?);
    cmd.arg("controller")
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .args(["--gateway-api", "on"])
        .args(["--gateway-controller-name", CONTROLLER_NAME])
        .args(["--election-namespace", "sluice-system"])
        .args(["--identity", "conformance"])
        .args(["--gateway-address-pool", &args.address_pool])
        // A Service per Gateway (GatewayInfrastructurePropagation).
        .args(["--gateway-service-type", "ClusterIP"])
        // The shared listeners serve Ingresses only here: every Gateway has its own address.
        .args(["--http-addr", "127.0.0.1:0"])
        .args(["--https-addr", "127.0.0.1:0"])
        .args(["--admin-addr", "127.0.0.1:0"])
        .args(["--shutdown-delay", "0s"])
        .args(&args.sluice_args)
        .stdin(Stdio::null())
        .stdout(sluice_log.try_clone()?)
        .stderr(sluice_log);
    let mut sluice = Supervised::spawn("sluice", cmd).context("start sluice")?;
    log(format_args!(
        "sluice controller started (log: {})",
        log_path.display()
    ));
    class_accepted(&admin, &mut sluice).await?;
    log(format_args!(
        "GatewayClass {GATEWAY_CLASS} accepted, {:.1}s after start; running the suite",
        began.elapsed().as_secs_f64()
    ));

    let mut suite = Command::new(&args.suite);
    suite
        .env("KUBECONFIG", cp.kubeconfig_path())
        .current_dir(&args.out)
        .arg("-test.v")
        .arg("-test.run=^TestConformance$")
        // Go's default of 10 minutes is shorter than the whole profile on 2 cores.
        .arg("-test.timeout=85m")
        .arg(format!("-gateway-class={GATEWAY_CLASS}"))
        // The cluster goes away afterwards: deleting the base objects first is wasted time.
        .arg("-cleanup-base-resources=false");
    if let Some(t) = &args.run_test {
        suite.arg(format!("-run-test={t}"));
    }
    if let Some(r) = &args.report {
        suite.arg(format!("-report-output={}", r.display()));
    }
    suite.args(&args.suite_args).stdin(Stdio::null());
    let mut suite = Supervised::spawn("conformance suite", suite).context("start the suite")?;
    let status = loop {
        if let Some(s) = suite.exited() {
            break s;
        }
        if let Some(s) = sluice.exited() {
            bail!(
                "sluice exited ({s}) while the suite ran; see {}",
                log_path.display()
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    sluice.terminate(Duration::from_secs(5));
    log(format_args!(
        "suite {status}, {:.0}s in all (sluice log: {})",
        began.elapsed().as_secs_f64(),
        log_path.display()
    ));
    Ok(status.code().map_or(1, |c| u8::try_from(c).unwrap_or(1)))
}

/// Creates every CRD of `dir` (the release's `config/crd/<channel>`) and waits until the API
/// server serves the kinds sluice watches. The ValidatingAdmissionPolicy of that directory
/// is not a CRD and guards upgrades only: left out.
async fn install_crds(admin: &kube::Client, dir: &std::path::Path) -> anyhow::Result<()> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| format!("read {}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("gateway.networking.k8s.io_") && !n.contains("vap"))
        })
        .collect();
    files.sort();
    if files.is_empty() {
        bail!("no Gateway API CRDs in {}", dir.display());
    }
    for f in &files {
        let yaml = std::fs::read_to_string(f)?;
        apply_yaml(admin, &yaml)
            .await
            .with_context(|| format!("apply {}", f.display()))?;
    }
    eventually(Duration::from_secs(60), "Gateway API CRDs served", || {
        let admin = admin.clone();
        async move {
            let v1 = admin
                .list_api_group_resources("gateway.networking.k8s.io/v1")
                .await
                .ok()?;
            let v1beta1 = admin
                .list_api_group_resources("gateway.networking.k8s.io/v1beta1")
                .await
                .ok()?;
            let has = |l: &k8s_openapi::apimachinery::pkg::apis::meta::v1::APIResourceList,
                       k: &str| l.resources.iter().any(|r| r.kind == k);
            (has(&v1, "GatewayClass")
                && has(&v1, "Gateway")
                && has(&v1, "HTTPRoute")
                && has(&v1beta1, "ReferenceGrant"))
            .then_some(())
        }
    })
    .await?;
    log(format_args!(
        "{} Gateway API CRDs installed from {}",
        files.len(),
        dir.display()
    ));
    Ok(())
}

/// Waits until sluice has accepted GatewayClass `sluice` (the suite's first check), failing
/// early when sluice exits.
async fn class_accepted(admin: &kube::Client, sluice: &mut Supervised) -> anyhow::Result<()> {
    let gvk = GroupVersionKind::gvk("gateway.networking.k8s.io", "v1", "GatewayClass");
    let api: Api<DynamicObject> = Api::all_with(admin.clone(), &ApiResource::from_gvk(&gvk));
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        if let Some(s) = sluice.exited() {
            bail!("sluice exited ({s}) before accepting GatewayClass {GATEWAY_CLASS}");
        }
        if let Ok(class) = api.get(GATEWAY_CLASS).await {
            let accepted = class.data["status"]["conditions"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|c| c["type"] == "Accepted" && c["status"] == "True");
            if accepted {
                return Ok(());
            }
        }
        if Instant::now() >= deadline {
            bail!("GatewayClass {GATEWAY_CLASS} not accepted by sluice within 120s");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

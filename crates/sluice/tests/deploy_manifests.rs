//! deploy/ as users install it: every overlay rendered by `kubectl kustomize` (what
//! `kubectl apply -k` applies), every object accepted by a real API server (server-side dry
//! run), the controller's flags in each workload parse, the image is pinned to this
//! version, and the IngressClass is the default class only where the overlay says so.
//!
//! Needs `kubectl` (scripts/testenv.sh installs it): without it these tests fail, saying so.
//! deploy/ keeps to what kustomize v2.0.3 (inside kubectl 1.14 to 1.20, Debian's
//! `kubernetes-client`) and v5 both read; either renders it here.
//!
//! Every object of deploy/ validates on the test API server as written (it uses no field
//! newer than apps/v1, rbac v1, networking.k8s.io/v1 IngressClass).

use clap::Parser;
use sluice_controller::cluster::ControllerArgs;
use sluice_ingress_manager::IngressManagerArgs;
use sluice_testenv::ControlPlane;
use std::path::PathBuf;
use std::process::Command;
use yaml_serde::Value;

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    args: ControllerArgs,
}

#[derive(Parser)]
struct ManagerCli {
    #[command(flatten)]
    args: IngressManagerArgs,
}

/// Every overlay of deploy/overlays, and whether it makes sluice's class the default.
const OVERLAYS: [(&str, bool); 5] = [
    ("daemonset", false),
    ("deployment", false),
    ("webhook", false),
    ("ingress-manager", false),
    ("default-class", true),
];

fn deploy_dir() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../deploy"))
}

/// `kubectl kustomize deploy/overlays/NAME`, as documents.
fn render(overlay: &str) -> Vec<Value> {
    let dir = deploy_dir().join("overlays").join(overlay);
    let out = match Command::new("kubectl").arg("kustomize").arg(&dir).output() {
        Ok(out) => out,
        Err(e) => panic!(
            "cannot run `kubectl kustomize` ({e}): kubectl is needed to render deploy/; \
             install it with `bash scripts/testenv.sh`"
        ),
    };
    assert!(
        out.status.success(),
        "kubectl kustomize deploy/overlays/{overlay} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let yaml = String::from_utf8(out.stdout).expect("UTF-8 from kubectl");
    let docs: Vec<Value> = yaml_serde::Deserializer::from_str(&yaml)
        .map(serde::Deserialize::deserialize)
        .collect::<Result<_, _>>()
        .unwrap_or_else(|e| panic!("deploy/overlays/{overlay}: {e}"));
    let docs: Vec<Value> = docs.into_iter().filter(|d| !d.is_null()).collect();
    assert!(
        !docs.is_empty(),
        "deploy/overlays/{overlay} renders nothing"
    );
    docs
}

fn to_yaml(docs: &[Value]) -> String {
    docs.iter()
        .map(|d| yaml_serde::to_string(d).expect("YAML"))
        .collect::<Vec<_>>()
        .join("---\n")
}

fn kind(doc: &Value) -> &str {
    doc["kind"].as_str().unwrap_or("")
}

fn workloads(docs: &[Value]) -> impl Iterator<Item = &Value> {
    docs.iter()
        .filter(|d| kind(d) == "DaemonSet" || kind(d) == "Deployment")
}

fn containers(workload: &Value) -> Vec<Value> {
    workload["spec"]["template"]["spec"]["containers"]
        .as_sequence()
        .cloned()
        .unwrap_or_default()
}

fn strings(v: &Value) -> Vec<String> {
    v.as_sequence()
        .map(|s| {
            s.iter()
                .filter_map(|x| x.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn overlays_pin_the_image_and_make_the_class_default_only_when_asked() {
    let image = format!("sluice:{}", env!("CARGO_PKG_VERSION"));
    for (overlay, default_class) in OVERLAYS {
        let docs = render(overlay);

        // The IngressClass is the default class in the default-class overlay only.
        let classes: Vec<&Value> = docs.iter().filter(|d| kind(d) == "IngressClass").collect();
        if overlay == "ingress-manager" {
            assert!(classes.is_empty(), "{overlay}: installs no IngressClass");
        } else {
            assert_eq!(classes.len(), 1, "{overlay}: one IngressClass");
            let class = classes[0];
            assert_eq!(class["metadata"]["name"].as_str(), Some("sluice"));
            assert_eq!(
                class["spec"]["controller"].as_str(),
                Some("sluice.dev/ingress-controller")
            );
            let annotation =
                &class["metadata"]["annotations"]["ingressclass.kubernetes.io/is-default-class"];
            assert_eq!(
                annotation.as_str() == Some("true"),
                default_class,
                "{overlay}: is-default-class is {annotation:?}"
            );
        }

        // Every container runs this version's image, pulled only when missing.
        let mut workload_count = 0;
        for workload in workloads(&docs) {
            workload_count += 1;
            for c in containers(workload) {
                assert_eq!(c["image"].as_str(), Some(image.as_str()), "{overlay}");
                assert_eq!(
                    c["imagePullPolicy"].as_str(),
                    Some("IfNotPresent"),
                    "{overlay}"
                );
            }
        }
        let expected = if overlay == "default-class" { 0 } else { 1 };
        assert_eq!(workload_count, expected, "{overlay}: workloads");
    }

    // The DaemonSet binds 80/443 as uid 65532: it must keep asking for NET_BIND_SERVICE
    // (and only that), without privilege escalation.
    let docs = render("daemonset");
    let ds = workloads(&docs).next().expect("a DaemonSet");
    assert_eq!(kind(ds), "DaemonSet");
    assert_eq!(
        ds["spec"]["template"]["spec"]["hostNetwork"].as_bool(),
        Some(true)
    );
    let c = &containers(ds)[0];
    let sc = &c["securityContext"];
    assert_eq!(strings(&sc["capabilities"]["add"]), ["NET_BIND_SERVICE"]);
    assert_eq!(strings(&sc["capabilities"]["drop"]), ["ALL"]);
    assert_eq!(sc["runAsUser"].as_u64(), Some(65532));
    assert_eq!(sc["runAsNonRoot"].as_bool(), Some(true));
    assert_eq!(sc["allowPrivilegeEscalation"].as_bool(), Some(false));
    let args = strings(&c["args"]);
    assert!(
        args.contains(&"--http-addr=0.0.0.0:80".to_string()),
        "{args:?}"
    );
    assert!(
        args.contains(&"--https-addr=0.0.0.0:443".to_string()),
        "{args:?}"
    );

    // The Deployment's LoadBalancer Service reaches its ports.
    let docs = render("deployment");
    let svc = docs
        .iter()
        .find(|d| kind(d) == "Service" && d["metadata"]["name"].as_str() == Some("sluice"))
        .expect("a Service");
    assert_eq!(svc["spec"]["type"].as_str(), Some("LoadBalancer"));
}

/// The image tags README, docs/, the Dockerfile and the overlays' comments tell users to build
/// are the one the overlays pin: a version bump that forgets one fails here.
#[test]
fn the_documented_image_tag_is_the_pinned_one() {
    let root = deploy_dir().join("..");
    let image = format!("sluice:{}", env!("CARGO_PKG_VERSION"));
    let mut files = vec![root.join("README.md"), root.join("Dockerfile")];
    for doc in std::fs::read_dir(root.join("docs"))
        .expect("docs/")
        .flatten()
    {
        if doc.path().extension().is_some_and(|e| e == "md") {
            files.push(doc.path());
        }
    }
    for (overlay, _) in OVERLAYS {
        files.push(
            deploy_dir()
                .join("overlays")
                .join(overlay)
                .join("kustomization.yaml"),
        );
    }
    let mut seen = 0;
    for file in files {
        let text = std::fs::read_to_string(&file).expect("read");
        for (i, _) in text.match_indices("sluice:") {
            let tag: String = text[i..]
                .chars()
                .take_while(|c| !c.is_whitespace() && *c != '`' && *c != ')')
                .collect();
            // Only image references: `sluice:` followed by a version.
            if tag.len() > "sluice:".len() && tag.as_bytes()["sluice:".len()].is_ascii_digit() {
                assert_eq!(tag, image, "{}", file.display());
                seen += 1;
            }
        }
    }
    assert!(seen >= 3, "README and Dockerfile name the image to build");
}

#[test]
fn the_workloads_flags_parse() {
    for (overlay, _) in OVERLAYS {
        for workload in workloads(&render(overlay)) {
            for c in containers(workload) {
                let args = strings(&c["args"]);
                // `$(HOST_IP)` is expanded by the kubelet; give it a value here. The log
                // format is a flag of the `sluice` binary, not of the subcommand.
                let own = args
                    .iter()
                    .skip(1)
                    .filter(|a| !a.starts_with("--log-format"))
                    .map(|a| a.replace("$(HOST_IP)", "192.0.2.1"));
                let argv = std::iter::once("sluice".to_string()).chain(own);
                match args.first().map(String::as_str) {
                    Some("controller") => {
                        assert_ne!(overlay, "ingress-manager");
                        Cli::try_parse_from(argv)
                            .unwrap_or_else(|e| panic!("deploy/overlays/{overlay}: {e}"));
                    }
                    Some("ingress-manager") => {
                        assert_eq!(overlay, "ingress-manager");
                        ManagerCli::try_parse_from(argv)
                            .unwrap_or_else(|e| panic!("deploy/overlays/{overlay}: {e}"));
                    }
                    other => panic!("deploy/overlays/{overlay}: unexpected command {other:?}"),
                }
            }
        }
    }
}

/// #33: `/healthz` answers only once the caches have synced, which may take the whole
/// `--sync-timeout`; a liveness probe without a startup probe would restart a controller
/// that is still syncing a large cluster. Every controller with a liveness probe has a
/// startup probe that waits longer than its `--sync-timeout`.
#[test]
fn the_startup_probe_outlasts_the_cache_sync() {
    let seconds =
        |probe: &Value, field: &str, default: u64| probe[field].as_u64().unwrap_or(default);
    for (overlay, _) in OVERLAYS {
        for workload in workloads(&render(overlay)) {
            for c in containers(workload) {
                let args = strings(&c["args"]);
                if args.first().map(String::as_str) != Some("controller") {
                    continue;
                }
                let own = args
                    .iter()
                    .skip(1)
                    .filter(|a| !a.starts_with("--log-format"))
                    .map(|a| a.replace("$(HOST_IP)", "192.0.2.1"));
                let cli = Cli::try_parse_from(std::iter::once("sluice".to_string()).chain(own))
                    .unwrap_or_else(|e| panic!("deploy/overlays/{overlay}: {e}"));
                let sync = cli.args.sync_timeout.as_secs();
                assert!(
                    !c["livenessProbe"].is_null(),
                    "deploy/overlays/{overlay}: no livenessProbe"
                );
                let startup = &c["startupProbe"];
                assert_eq!(
                    startup["httpGet"]["path"].as_str(),
                    Some("/healthz"),
                    "deploy/overlays/{overlay}: no startupProbe on /healthz"
                );
                // Kubernetes' defaults: periodSeconds 10, failureThreshold 3.
                let waits = seconds(startup, "initialDelaySeconds", 0)
                    + seconds(startup, "periodSeconds", 10)
                        * seconds(startup, "failureThreshold", 3);
                assert!(
                    waits > sync + 30,
                    "deploy/overlays/{overlay}: the startupProbe gives up after {waits} s, \
                     --sync-timeout is {sync} s"
                );
            }
        }
    }
}

#[tokio::test]
async fn every_overlay_is_accepted_by_the_api_server() -> anyhow::Result<()> {
    let cp = ControlPlane::shared().await?;
    let client = cp.client();
    for (overlay, _) in OVERLAYS {
        let docs = render(overlay);
        // A dry run of namespaced objects needs their namespace to exist.
        let namespaces: Vec<Value> = docs
            .iter()
            .filter(|d| kind(d) == "Namespace")
            .cloned()
            .collect();
        sluice_testenv::apply_yaml(&client, &to_yaml(&namespaces)).await?;
        // cert-manager's kinds (the webhook overlay's) need its CRDs, which the test
        // cluster does not have.
        let docs: Vec<Value> = docs
            .into_iter()
            .filter(|d| {
                !d["apiVersion"]
                    .as_str()
                    .is_some_and(|v| v.starts_with("cert-manager.io/"))
            })
            .collect();
        sluice_testenv::validate_yaml(&client, &to_yaml(&docs))
            .await
            .map_err(|e| e.context(format!("deploy/overlays/{overlay}")))?;
    }
    Ok(())
}

/// #33: the image builds from pinned bases (no floating tag such as `rust:1-bookworm` or
/// `latest`), for amd64 and arm64 from the builder's own platform, and ships a stripped
/// binary. The Dockerfile cannot be built here (no docker); this reads it.
#[test]
fn the_dockerfile_pins_its_bases_cross_compiles_and_strips() {
    let text = std::fs::read_to_string(deploy_dir().join("../Dockerfile")).expect("Dockerfile");
    // Continuation lines joined, comments dropped.
    let joined = text
        .lines()
        .filter(|l| !l.trim_start().starts_with('#'))
        .collect::<Vec<_>>()
        .join("\n")
        .replace("\\\n", " ");
    let froms: Vec<Vec<&str>> = joined
        .lines()
        .filter(|l| l.trim_start().to_ascii_uppercase().starts_with("FROM "))
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert!(froms.len() >= 2, "a build stage and a runtime stage");
    let mut stages = Vec::new();
    for from in &froms {
        let image = from
            .iter()
            .skip(1)
            .find(|w| !w.starts_with("--"))
            .expect("an image");
        if stages.contains(image) {
            continue; // an earlier stage, by name
        }
        if let Some(i) = from.iter().position(|w| w.eq_ignore_ascii_case("AS")) {
            stages.push(from[i + 1]);
        }
        if image.contains("@sha256:") {
            continue;
        }
        let (_, tag) = image
            .rsplit_once(':')
            .unwrap_or_else(|| panic!("`{image}` has no tag: it floats"));
        // An exact version: at least MAJOR.MINOR (`1.95.0-bookworm`, `12.12-slim`), never
        // `latest` or a major alone (`1-bookworm`).
        let version: String = tag
            .chars()
            .take_while(|c| c.is_ascii_digit() || *c == '.')
            .collect();
        assert!(
            version.split('.').filter(|p| !p.is_empty()).count() >= 2,
            "`{image}`: the tag `{tag}` floats; pin an exact version"
        );
    }
    // The Rust of the build stage is at least the workspace's rust-version.
    let rust = froms
        .iter()
        .flat_map(|f| f.iter())
        .find_map(|w| w.strip_prefix("rust:"))
        .expect("a rust: build stage");
    let have: Vec<u32> = rust
        .split(['-', '.'])
        .take(2)
        .filter_map(|p| p.parse().ok())
        .collect();
    let manifest = std::fs::read_to_string(deploy_dir().join("../Cargo.toml")).expect("Cargo.toml");
    let need: Vec<u32> = manifest
        .lines()
        .find_map(|l| l.strip_prefix("rust-version = "))
        .expect("rust-version")
        .trim_matches('"')
        .split('.')
        .filter_map(|p| p.parse().ok())
        .collect();
    assert!(
        have >= need,
        "rust:{rust} is older than rust-version {need:?}"
    );

    // The build stage runs on the builder's platform and targets TARGETARCH amd64/arm64.
    let build = &froms[0];
    assert!(
        build.contains(&"--platform=$BUILDPLATFORM"),
        "the build stage cross-compiles: {build:?}"
    );
    assert!(joined.contains("ARG TARGETARCH"));
    for (arch, triple) in [
        ("amd64", "x86_64-unknown-linux-gnu"),
        ("arm64", "aarch64-unknown-linux-gnu"),
    ] {
        assert!(
            joined.contains(&format!("{arch}) triple={triple}")),
            "{arch} -> {triple}"
        );
    }
    // Stripped, and the file capability for ports 80/443 (see unprivileged_bind.rs).
    assert!(joined.contains("CARGO_PROFILE_RELEASE_STRIP=symbols"));
    assert!(joined.contains("setcap cap_net_bind_service=+ep /sluice"));
    assert!(joined.contains("USER 65532:65532"));
}

fn find<'a>(docs: &'a [Value], k: &str, name: &str) -> &'a Value {
    docs.iter()
        .find(|d| kind(d) == k && d["metadata"]["name"].as_str() == Some(name))
        .unwrap_or_else(|| panic!("no {k} {name}"))
}

/// #33: what an operator expects of a production install, as ingress-nginx's chart offers
/// it (`controller.minAvailable`, `controller.topologySpreadConstraints`/`affinity`,
/// `controller.metrics.service`, `controller.image.seccompProfile`, its namespaced Lease
/// Role): a PDB and spread for the Deployment, a metrics Service on the admin port, the
/// runtime's seccomp profile, and Lease rights in sluice-system only.
#[test]
fn overlays_have_pdb_spread_metrics_seccomp_and_namespaced_lease_rights() {
    for overlay in ["daemonset", "deployment"] {
        let docs = render(overlay);
        let w = workloads(&docs).next().expect("a workload");
        let labels = &w["spec"]["template"]["metadata"]["labels"];
        let c = &containers(w)[0];
        assert_eq!(
            c["securityContext"]["seccompProfile"]["type"].as_str(),
            Some("RuntimeDefault"),
            "{overlay}"
        );

        // The metrics Service reaches the admin port the controller listens on.
        let metrics = find(&docs, "Service", "sluice-metrics");
        let port = &metrics["spec"]["ports"][0];
        assert_eq!(port["port"].as_u64(), Some(10254), "{overlay}");
        let target = port["targetPort"].as_str().expect("a named targetPort");
        let container_port = c["ports"]
            .as_sequence()
            .and_then(|ps| ps.iter().find(|p| p["name"].as_str() == Some(target)))
            .and_then(|p| p["containerPort"].as_u64())
            .unwrap_or_else(|| panic!("{overlay}: no container port {target}"));
        assert!(
            strings(&c["args"]).contains(&format!("--admin-addr=0.0.0.0:{container_port}")),
            "{overlay}: the admin listener is on the metrics port"
        );
        for (k, v) in metrics["spec"]["selector"].as_mapping().expect("selector") {
            assert_eq!(
                &labels[k], v,
                "{overlay}: the metrics Service selects the pods"
            );
        }

        // No Lease rights cluster-wide; the Role names the default election Lease.
        let cluster_role = find(&docs, "ClusterRole", "sluice");
        for rule in cluster_role["rules"].as_sequence().expect("rules") {
            assert!(
                !strings(&rule["resources"]).contains(&"leases".to_string()),
                "{overlay}: Lease rights cluster-wide: {rule:?}"
            );
        }
        let role = find(&docs, "Role", "sluice-election");
        assert_eq!(
            role["metadata"]["namespace"].as_str(),
            Some("sluice-system")
        );
        let named: Vec<String> = role["rules"]
            .as_sequence()
            .expect("rules")
            .iter()
            .flat_map(|r| strings(&r["resourceNames"]))
            .collect();
        assert_eq!(
            named,
            [sluice_controller::cluster::DEFAULT_ELECTION_ID],
            "{overlay}"
        );
        let binding = find(&docs, "RoleBinding", "sluice-election");
        assert_eq!(binding["subjects"][0]["name"].as_str(), Some("sluice"));
        assert_eq!(binding["roleRef"]["kind"].as_str(), Some("Role"));
        // The Lease's namespace is the pods' (POD_NAMESPACE from the downward API).
        let env = c["env"].as_sequence().expect("env");
        assert!(
            env.iter()
                .any(|e| e["name"].as_str() == Some("POD_NAMESPACE")
                    && e["valueFrom"]["fieldRef"]["fieldPath"].as_str()
                        == Some("metadata.namespace"))
        );
        assert_eq!(w["metadata"]["namespace"].as_str(), Some("sluice-system"));
    }

    // The Deployment: a PDB that leaves a replica through a drain, and replicas spread over
    // nodes and zones.
    let docs = render("deployment");
    let w = workloads(&docs).next().expect("a Deployment");
    let labels = &w["spec"]["template"]["metadata"]["labels"];
    let replicas = w["spec"]["replicas"].as_u64().expect("replicas");
    let pdb = find(&docs, "PodDisruptionBudget", "sluice");
    let min = pdb["spec"]["minAvailable"].as_u64().expect("minAvailable");
    assert!(
        min >= 1 && min < replicas,
        "minAvailable {min} of {replicas}"
    );
    for (k, v) in pdb["spec"]["selector"]["matchLabels"]
        .as_mapping()
        .expect("selector")
    {
        assert_eq!(&labels[k], v, "the PDB selects the pods");
    }
    let pod = &w["spec"]["template"]["spec"];
    let keys: Vec<&str> = pod["topologySpreadConstraints"]
        .as_sequence()
        .expect("topologySpreadConstraints")
        .iter()
        .filter_map(|t| t["topologyKey"].as_str())
        .collect();
    assert_eq!(
        keys,
        ["kubernetes.io/hostname", "topology.kubernetes.io/zone"]
    );
    assert_eq!(
        pod["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"][0]
            ["podAffinityTerm"]["topologyKey"]
            .as_str(),
        Some("kubernetes.io/hostname")
    );
    // The DaemonSet: one node's 80/443 at a time.
    let docs = render("daemonset");
    let ds = workloads(&docs).next().expect("a DaemonSet");
    assert_eq!(
        ds["spec"]["updateStrategy"]["rollingUpdate"]["maxUnavailable"].as_u64(),
        Some(1)
    );
}

/// The webhook overlay (as ingress-nginx's `controller.admissionWebhooks` with cert-manager):
/// the Deployment overlay's flags unchanged plus the webhook's, the certificate cert-manager
/// writes mounted where the flags read it, a Service to the webhook port, and the
/// ValidatingWebhookConfiguration for Ingress CREATE/UPDATE with the CA injected from that
/// certificate.
#[test]
fn the_webhook_overlay_wires_certificate_service_and_configuration() {
    let plain = render("deployment");
    let docs = render("webhook");
    let base_args = strings(&containers(workloads(&plain).next().expect("Deployment"))[0]["args"]);
    let w = workloads(&docs).next().expect("Deployment");
    let c = &containers(w)[0];
    let args = strings(&c["args"]);
    assert_eq!(
        args[..base_args.len()],
        base_args[..],
        "the webhook overlay repeats the Deployment overlay's args"
    );
    let argv = std::iter::once("sluice".to_string()).chain(
        args.iter()
            .skip(1)
            .filter(|a| !a.starts_with("--log-format"))
            .cloned(),
    );
    let cli = Cli::try_parse_from(argv).expect("flags");
    let addr = cli.args.webhook_addr.expect("--validating-webhook");
    let cert = cli
        .args
        .webhook_cert_file
        .expect("--validating-webhook-certificate");
    let mount = c["volumeMounts"]
        .as_sequence()
        .and_then(|m| {
            m.iter()
                .find(|m| cert.starts_with(m["mountPath"].as_str().unwrap_or("-")))
        })
        .expect("the certificate's directory is mounted");
    let volume = w["spec"]["template"]["spec"]["volumes"]
        .as_sequence()
        .and_then(|v| v.iter().find(|v| v["name"] == mount["name"]))
        .expect("its volume");
    let secret = volume["secret"]["secretName"].as_str().expect("a Secret");
    let port = c["ports"]
        .as_sequence()
        .and_then(|ps| ps.iter().find(|p| p["name"].as_str() == Some("webhook")))
        .and_then(|p| p["containerPort"].as_u64());
    assert_eq!(port, Some(u64::from(addr.port())));

    let certificate = find(&docs, "Certificate", "sluice-admission");
    assert_eq!(certificate["spec"]["secretName"].as_str(), Some(secret));
    let vwc = find(&docs, "ValidatingWebhookConfiguration", "sluice-admission");
    assert_eq!(
        vwc["metadata"]["annotations"]["cert-manager.io/inject-ca-from"].as_str(),
        Some("sluice-system/sluice-admission")
    );
    let hook = &vwc["webhooks"][0];
    let service_ref = &hook["clientConfig"]["service"];
    assert_eq!(service_ref["path"].as_str(), Some("/validate"));
    let name = service_ref["name"].as_str().expect("name");
    let namespace = service_ref["namespace"].as_str().expect("namespace");
    assert!(
        strings(&certificate["spec"]["dnsNames"]).contains(&format!("{name}.{namespace}.svc")),
        "the certificate names the Service"
    );
    let svc = find(&docs, "Service", name);
    assert_eq!(svc["spec"]["ports"][0]["port"], service_ref["port"]);
    assert_eq!(
        svc["spec"]["ports"][0]["targetPort"].as_str(),
        Some("webhook")
    );
    assert_eq!(strings(&hook["rules"][0]["resources"]), ["ingresses"]);
    assert_eq!(
        strings(&hook["rules"][1]["resources"]),
        ["httproutes", "grpcroutes"]
    );
    assert_eq!(hook["sideEffects"].as_str(), Some("None"));
    assert_eq!(hook["failurePolicy"].as_str(), Some("Fail"));
}

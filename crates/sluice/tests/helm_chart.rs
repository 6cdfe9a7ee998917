//! The Helm chart `charts/sluice` as users install it: `helm lint` and `helm template` for
//! each workload kind, with assertions on the rendered objects (the DaemonSet/Deployment
//! switch, the PodDisruptionBudget, the IngressClass, namespaced Lease rights, quoting of
//! values), the controller's flags in every rendering parse, and every object is accepted by
//! a real API server (server-side dry run).
//!
//! Values are named as ingress-nginx's chart (charts/ingress-nginx/values.yaml) names them
//! where the meaning is the same; each test names the value it mirrors.
//!
//! helm is built once from its Go module (tools/helm, pinned) into the test cache by
//! `scripts/helm.sh`, which these tests run to find it (and which builds it when missing).

use clap::Parser;
use sluice_controller::cluster::ControllerArgs;
use sluice_testenv::ControlPlane;
use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;
use yaml_serde::Value;

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    args: ControllerArgs,
}

fn root() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
}

fn chart() -> PathBuf {
    root().join("charts/sluice")
}

/// The cached helm binary (`scripts/helm.sh` builds it when missing).
fn helm() -> &'static PathBuf {
    static HELM: OnceLock<PathBuf> = OnceLock::new();
    HELM.get_or_init(|| {
        let out = Command::new("bash")
            .arg(root().join("scripts/helm.sh"))
            .output()
            .unwrap_or_else(|e| panic!("cannot run scripts/helm.sh: {e}"));
        assert!(
            out.status.success(),
            "scripts/helm.sh failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
    })
}

/// `helm ARGS`: (success, stdout, stderr).
fn run_helm(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(helm())
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run helm: {e}"));
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `helm template rel charts/sluice -n sluice-system` with `--set`/`--set-json` arguments
/// (`set` as `KEY=VALUE`, `json` as `KEY=JSON`), as documents.
fn render(set: &[&str], json: &[&str]) -> Vec<Value> {
    let chart = chart();
    let mut args = vec![
        "template",
        "rel",
        chart.to_str().expect("UTF-8 path"),
        "--namespace",
        "sluice-system",
    ];
    for s in set {
        args.extend(["--set", s]);
    }
    for j in json {
        args.extend(["--set-json", j]);
    }
    let (ok, out, err) = run_helm(&args);
    assert!(ok, "helm template {set:?} {json:?}: {err}");
    let docs: Vec<Value> = yaml_serde::Deserializer::from_str(&out)
        .map(serde::Deserialize::deserialize)
        .collect::<Result<_, _>>()
        .unwrap_or_else(|e| panic!("helm template {set:?}: {e}\n{out}"));
    docs.into_iter().filter(|d| !d.is_null()).collect()
}

fn kind(doc: &Value) -> &str {
    doc["kind"].as_str().unwrap_or("")
}

fn of_kind<'a>(docs: &'a [Value], k: &str) -> Vec<&'a Value> {
    docs.iter().filter(|d| kind(d) == k).collect()
}

fn one<'a>(docs: &'a [Value], k: &str) -> &'a Value {
    let found = of_kind(docs, k);
    assert_eq!(found.len(), 1, "one {k}, found {}", found.len());
    found[0]
}

fn workload(docs: &[Value]) -> &Value {
    let w: Vec<&Value> = docs
        .iter()
        .filter(|d| kind(d) == "DaemonSet" || kind(d) == "Deployment")
        .collect();
    assert_eq!(w.len(), 1, "one workload");
    w[0]
}

fn container(w: &Value) -> &Value {
    &w["spec"]["template"]["spec"]["containers"][0]
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

fn args(docs: &[Value]) -> Vec<String> {
    strings(&container(workload(docs))["args"])
}

/// The controller's flags as `sluice controller` parses them (`$(HOST_IP)` is the kubelet's
/// to expand; `--log-format` is the binary's own flag).
fn parse(docs: &[Value]) -> ControllerArgs {
    let args = args(docs);
    assert_eq!(args.first().map(String::as_str), Some("controller"));
    let own = args
        .iter()
        .skip(1)
        .filter(|a| !a.starts_with("--log-format"))
        .map(|a| a.replace("$(HOST_IP)", "192.0.2.1"));
    Cli::try_parse_from(std::iter::once("sluice".to_string()).chain(own))
        .unwrap_or_else(|e| panic!("the chart's controller flags {args:?}: {e}"))
        .args
}

fn to_yaml(docs: &[&Value]) -> String {
    docs.iter()
        .map(|d| yaml_serde::to_string(d).expect("YAML"))
        .collect::<Vec<_>>()
        .join("---\n")
}

/// The values files a user would start from: the defaults, a hostNetwork DaemonSet, and a
/// three-replica Deployment with metrics (ingress-nginx's `controller.kind`,
/// `controller.hostNetwork`, `controller.replicaCount`, `controller.metrics.enabled`).
const VARIANTS: [&[&str]; 4] = [
    &[],
    &[
        "controller.kind=DaemonSet",
        "controller.hostNetwork=true",
        "controller.service.enabled=false",
    ],
    &[
        "controller.replicaCount=3",
        "controller.metrics.enabled=true",
        "controller.ingressClassResource.default=true",
    ],
    // ingress-nginx's `controller.admissionWebhooks.enabled`, with a CA of one's own, and
    // `controller.autoscaling.enabled`.
    &[
        "controller.admissionWebhooks.enabled=true",
        "controller.admissionWebhooks.caBundle=Q0EgUEVN",
        "controller.autoscaling.enabled=true",
    ],
];

#[test]
fn helm_lint_passes_for_each_kind() {
    let chart = chart();
    let chart = chart.to_str().expect("UTF-8 path");
    for variant in VARIANTS {
        let mut a = vec!["lint", "--strict", chart];
        for s in variant {
            a.extend(["--set", s]);
        }
        let (ok, out, err) = run_helm(&a);
        assert!(ok, "helm lint {variant:?}: {out}{err}");
        assert!(out.contains("0 chart(s) failed"), "{out}");
    }
}

/// The chart, its image and the workspace are one version (as deploy/ pins the image).
#[test]
fn chart_version_app_version_and_image_tag_are_the_workspace_version() {
    let meta: Value =
        yaml_serde::from_str(&std::fs::read_to_string(chart().join("Chart.yaml")).expect("read"))
            .expect("Chart.yaml");
    let version = env!("CARGO_PKG_VERSION");
    assert_eq!(meta["version"].as_str(), Some(version));
    assert_eq!(meta["appVersion"].as_str(), Some(version));
    let docs = render(&[], &[]);
    let c = container(workload(&docs));
    assert_eq!(
        c["image"].as_str(),
        Some(format!("sluice:{version}").as_str())
    );
    assert_eq!(c["imagePullPolicy"].as_str(), Some("IfNotPresent"));
    // controller.image.registry/image/tag/digest, as ingress-nginx's chart joins them.
    let docs = render(
        &[
            "controller.image.registry=registry.example",
            "controller.image.image=team/sluice",
            "controller.image.tag=9.9.9",
            "controller.image.digest=sha256:abc",
        ],
        &[],
    );
    assert_eq!(
        container(workload(&docs))["image"].as_str(),
        Some("registry.example/team/sluice:9.9.9@sha256:abc")
    );
}

/// ingress-nginx's `controller.kind` (Deployment by default, as there) and
/// `controller.hostNetwork`: a Deployment of `controller.replicaCount` behind a LoadBalancer
/// Service publishing the Service's address, or a DaemonSet on the node's 80/443 publishing
/// the node's address.
#[test]
fn controller_kind_switches_between_deployment_and_hostnetwork_daemonset() {
    let docs = render(&[], &[]);
    let w = workload(&docs);
    assert_eq!(kind(w), "Deployment");
    assert_eq!(w["spec"]["replicas"].as_u64(), Some(1));
    assert_eq!(
        w["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"].as_u64(),
        Some(0),
        "a Deployment rolls out without taking a replica away first"
    );
    assert!(w["spec"]["template"]["spec"]["hostNetwork"].is_null());
    let svc = one(&docs, "Service");
    assert_eq!(svc["metadata"]["name"].as_str(), Some("rel-sluice"));
    assert_eq!(svc["spec"]["type"].as_str(), Some("LoadBalancer"));
    let ports: Vec<(u64, String)> = svc["spec"]["ports"]
        .as_sequence()
        .expect("ports")
        .iter()
        .map(|p| {
            (
                p["port"].as_u64().unwrap_or(0),
                p["targetPort"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect();
    assert_eq!(ports, [(80, "http".into()), (443, "https".into())]);
    let a = parse(&docs);
    assert_eq!(
        a.publish_service.as_deref(),
        Some("sluice-system/rel-sluice")
    );
    assert_eq!(a.publish_status_address, None);

    let docs = render(VARIANTS[1], &[]);
    let w = workload(&docs);
    assert_eq!(kind(w), "DaemonSet");
    assert!(w["spec"]["replicas"].is_null());
    assert_eq!(
        w["spec"]["updateStrategy"]["rollingUpdate"]["maxUnavailable"].as_u64(),
        Some(1),
        "one node's 80/443 down at a time"
    );
    let pod = &w["spec"]["template"]["spec"];
    assert_eq!(pod["hostNetwork"].as_bool(), Some(true));
    assert_eq!(pod["dnsPolicy"].as_str(), Some("ClusterFirstWithHostNet"));
    assert!(of_kind(&docs, "Service").is_empty(), "no Service");
    let c = container(w);
    let host_ports: Vec<u64> = c["ports"]
        .as_sequence()
        .expect("ports")
        .iter()
        .filter_map(|p| p["hostPort"].as_u64())
        .collect();
    assert_eq!(host_ports, [80, 443]);
    let a = parse(&docs);
    assert_eq!(a.publish_service, None);
    assert!(
        args(&docs).contains(&"--publish-status-address=$(HOST_IP)".to_string()),
        "{:?}",
        args(&docs)
    );
    // Ports 80/443 as uid 65532: NET_BIND_SERVICE and nothing else, no escalation, and
    // the runtime's seccomp profile (ingress-nginx's `controller.image.seccompProfile`).
    let sc = &c["securityContext"];
    assert_eq!(strings(&sc["capabilities"]["add"]), ["NET_BIND_SERVICE"]);
    assert_eq!(strings(&sc["capabilities"]["drop"]), ["ALL"]);
    assert_eq!(sc["runAsUser"].as_u64(), Some(65532));
    assert_eq!(sc["runAsNonRoot"].as_bool(), Some(true));
    assert_eq!(sc["allowPrivilegeEscalation"].as_bool(), Some(false));
    assert_eq!(
        sc["seccompProfile"]["type"].as_str(),
        Some("RuntimeDefault")
    );

    // Unprivileged ports: no capability at all.
    let docs = render(
        &[
            "controller.containerPort.http=8080",
            "controller.containerPort.https=8443",
        ],
        &[],
    );
    let c = container(workload(&docs));
    assert!(c["securityContext"]["capabilities"]["add"].is_null());
    assert_eq!(parse(&docs).proxy.http_addr.port(), 8080);

    let (ok, _, err) = run_helm(&[
        "template",
        "rel",
        chart().to_str().expect("UTF-8 path"),
        "--set",
        "controller.kind=StatefulSet",
    ]);
    assert!(!ok);
    assert!(
        err.contains("controller.kind must be Deployment or DaemonSet"),
        "{err}"
    );
}

/// ingress-nginx's `controller.minAvailable` / `controller.maxUnavailable`: a PDB only for a
/// Deployment of more than one replica; maxUnavailable wins when set.
#[test]
fn pod_disruption_budget_follows_min_available_and_max_unavailable() {
    assert!(of_kind(&render(&[], &[]), "PodDisruptionBudget").is_empty());
    assert!(of_kind(&render(VARIANTS[1], &[]), "PodDisruptionBudget").is_empty());
    let docs = render(VARIANTS[2], &[]);
    assert_eq!(workload(&docs)["spec"]["replicas"].as_u64(), Some(3));
    let pdb = one(&docs, "PodDisruptionBudget");
    assert_eq!(pdb["spec"]["minAvailable"].as_u64(), Some(1));
    assert!(pdb["spec"]["maxUnavailable"].is_null());
    assert_eq!(
        pdb["spec"]["selector"]["matchLabels"],
        workload(&docs)["spec"]["selector"]["matchLabels"]
    );
    let docs = render(
        &["controller.replicaCount=3", "controller.maxUnavailable=1"],
        &[],
    );
    let pdb = one(&docs, "PodDisruptionBudget");
    assert_eq!(pdb["spec"]["maxUnavailable"].as_u64(), Some(1));
    assert!(pdb["spec"]["minAvailable"].is_null());
}

/// ingress-nginx's `controller.ingressClassResource.{name,enabled,default,controllerValue}`:
/// the class object and the flags sluice serves it by agree.
#[test]
fn ingress_class_resource_values_make_the_class_and_the_flags() {
    let docs = render(&[], &[]);
    let class = one(&docs, "IngressClass");
    assert_eq!(class["metadata"]["name"].as_str(), Some("sluice"));
    assert_eq!(
        class["spec"]["controller"].as_str(),
        Some("sluice.dev/ingress-controller")
    );
    assert!(
        class["metadata"]["annotations"]["ingressclass.kubernetes.io/is-default-class"].is_null(),
        "not the default class unless asked"
    );

    let docs = render(
        &[
            "controller.ingressClassResource.name=edge",
            "controller.ingressClassResource.controllerValue=example.com/edge",
            "controller.ingressClassResource.default=true",
        ],
        &[],
    );
    let class = one(&docs, "IngressClass");
    assert_eq!(class["metadata"]["name"].as_str(), Some("edge"));
    assert_eq!(
        class["spec"]["controller"].as_str(),
        Some("example.com/edge")
    );
    assert_eq!(
        class["metadata"]["annotations"]["ingressclass.kubernetes.io/is-default-class"].as_str(),
        Some("true")
    );
    let a = args(&docs);
    assert!(a.contains(&"--ingress-class=edge".to_string()), "{a:?}");
    assert!(
        a.contains(&"--controller-class=example.com/edge".to_string()),
        "{a:?}"
    );
    parse(&docs);

    let docs = render(&["controller.ingressClassResource.enabled=false"], &[]);
    assert!(of_kind(&docs, "IngressClass").is_empty());
}

/// RBAC as deploy/ has it, with the leader election Lease granted in the release's
/// namespace only (a Role, by name as ingress-nginx's chart does with its electionID), and
/// Gateway API rights only with the Gateway API switch on.
#[test]
fn rbac_is_least_privilege_with_namespaced_lease_rights() {
    let docs = render(&[], &[]);
    let cluster_role = one(&docs, "ClusterRole");
    let rules = cluster_role["rules"].as_sequence().expect("rules");
    let groups: Vec<String> = rules
        .iter()
        .flat_map(|r| strings(&r["apiGroups"]))
        .collect();
    assert!(
        !groups.contains(&"coordination.k8s.io".to_string()),
        "no cluster-wide Lease rights: {groups:?}"
    );
    assert!(groups.contains(&"gateway.networking.k8s.io".to_string()));
    let role = one(&docs, "Role");
    assert_eq!(
        role["metadata"]["namespace"].as_str(),
        Some("sluice-system")
    );
    let lease_rules = role["rules"].as_sequence().expect("rules");
    assert!(lease_rules.iter().all(|r| {
        strings(&r["apiGroups"]) == ["coordination.k8s.io"]
            && strings(&r["resources"]) == ["leases"]
    }));
    let named: Vec<String> = lease_rules
        .iter()
        .flat_map(|r| strings(&r["resourceNames"]))
        .collect();
    assert_eq!(named, ["rel-sluice-leader"]);
    assert!(args(&docs).contains(&"--election-id=rel-sluice-leader".to_string()));
    // The controller reads the chart's ConfigMap (ingress-nginx's `--configmap`).
    assert!(args(&docs).contains(&"--configmap=sluice-system/rel-sluice".to_string()));
    let binding = one(&docs, "RoleBinding");
    assert_eq!(binding["roleRef"]["kind"].as_str(), Some("Role"));
    assert_eq!(
        binding["subjects"][0]["name"],
        workload(&docs)["spec"]["template"]["spec"]["serviceAccountName"]
    );
    // The Lease's namespace is the pod's own (POD_NAMESPACE), where the Role is.
    let env = container(workload(&docs))["env"]
        .as_sequence()
        .expect("env")
        .clone();
    assert!(
        env.iter()
            .any(|e| e["name"].as_str() == Some("POD_NAMESPACE")
                && e["valueFrom"]["fieldRef"]["fieldPath"].as_str() == Some("metadata.namespace"))
    );

    // The Gateway API switch off: no rights on its kinds, and sluice never watches them.
    let docs = render(&["gatewayAPI.enabled=false"], &[]);
    let groups: Vec<String> = one(&docs, "ClusterRole")["rules"]
        .as_sequence()
        .expect("rules")
        .iter()
        .flat_map(|r| strings(&r["apiGroups"]))
        .collect();
    assert!(!groups.contains(&"gateway.networking.k8s.io".to_string()));
    assert!(args(&docs).contains(&"--gateway-api=off".to_string()));
    parse(&docs);
    let docs = render(
        &["gatewayAPI.gatewayClass.create=true", "gatewayAPI.mode=on"],
        &[],
    );
    let gc = one(&docs, "GatewayClass");
    assert_eq!(
        gc["spec"]["controllerName"].as_str(),
        Some("sluice.dev/gateway-controller")
    );
    assert!(args(&docs).contains(&"--gateway-api=on".to_string()));
}

/// Nothing from values reaches a shell or is spliced into YAML unquoted: ingress-nginx's
/// `controller.extraArgs` (each `--KEY=VALUE` one argument, verbatim) and `controller.config`
/// (every value a string in the ConfigMap, which `--configmap` names).
#[test]
fn values_are_quoted_into_args_and_the_configmap() {
    let hostile = "ns/name\"; rm -rf / #\n  injected: true";
    let docs = render(
        &[],
        &[
            &format!(
                "controller.extraArgs={}",
                serde_json_string(&[
                    ("default-ssl-certificate", hostile),
                    ("watch-ingress-without-class", "true"),
                ])
            ),
            "controller.config={\"use-forwarded-headers\":true,\"proxy-body-size\":\"8m\",\"x\":\"a: b\\nc: d\"}",
        ],
    );
    let a = args(&docs);
    assert!(
        a.contains(&format!("--default-ssl-certificate={hostile}")),
        "{a:?}"
    );
    // A boolean true is the bare flag (what clap accepts).
    assert!(a.contains(&"--watch-ingress-without-class".to_string()));
    // (sluice itself refuses that Secret name; a valid one parses.)
    let valid = render(
        &[],
        &[
            "controller.extraArgs={\"default-ssl-certificate\":\"ns/name\",\"watch-ingress-without-class\":true,\"sync-timeout\":false}",
        ],
    );
    let parsed = parse(&valid);
    assert!(parsed.class.watch_ingress_without_class);
    let cert = parsed
        .defaults
        .default_ssl_certificate
        .expect("the certificate flag");
    assert_eq!(
        (cert.namespace.as_str(), cert.name.as_str()),
        ("ns", "name")
    );
    // false leaves the flag out.
    assert!(!args(&valid).iter().any(|a| a.starts_with("--sync-timeout")));
    // Nothing else was injected into the container.
    assert!(container(workload(&docs))["injected"].is_null());
    let cm = one(&docs, "ConfigMap");
    let data = &cm["data"];
    assert_eq!(data["use-forwarded-headers"].as_str(), Some("true"));
    assert_eq!(data["proxy-body-size"].as_str(), Some("8m"));
    assert_eq!(data["x"].as_str(), Some("a: b\nc: d"));
    assert_eq!(data.as_mapping().map(|m| m.len()), Some(3));
}

/// `{"k": "v", ...}` for `--set-json` (strings only; "true" becomes the JSON boolean).
fn serde_json_string(pairs: &[(&str, &str)]) -> String {
    let body: Vec<String> = pairs
        .iter()
        .map(|(k, v)| {
            let v = if *v == "true" {
                "true".to_string()
            } else {
                let mut s = String::from("\"");
                for ch in v.chars() {
                    match ch {
                        '"' => s.push_str("\\\""),
                        '\\' => s.push_str("\\\\"),
                        '\n' => s.push_str("\\n"),
                        c => s.push(c),
                    }
                }
                s.push('"');
                s
            };
            format!("\"{k}\":{v}")
        })
        .collect();
    format!("{{{}}}", body.join(","))
}

/// ingress-nginx's `controller.metrics.enabled`, `controller.metrics.service.servicePort`
/// and `controller.metrics.serviceMonitor.*`: a metrics Service on the admin port and a
/// ServiceMonitor selecting it.
#[test]
fn metrics_service_and_service_monitor() {
    let docs = render(&[], &[]);
    assert!(of_kind(&docs, "ServiceMonitor").is_empty());
    assert_eq!(of_kind(&docs, "Service").len(), 1, "no metrics Service");
    let docs = render(
        &[
            "controller.metrics.serviceMonitor.enabled=true",
            "controller.metrics.serviceMonitor.additionalLabels.release=prom",
            "controller.metrics.serviceMonitor.scrapeInterval=15s",
        ],
        &[],
    );
    let metrics = of_kind(&docs, "Service")
        .into_iter()
        .find(|s| s["metadata"]["name"].as_str() == Some("rel-sluice-metrics"))
        .expect("the metrics Service");
    assert_eq!(metrics["spec"]["type"].as_str(), Some("ClusterIP"));
    let port = &metrics["spec"]["ports"][0];
    assert_eq!(port["name"].as_str(), Some("metrics"));
    assert_eq!(port["port"].as_u64(), Some(10254));
    assert_eq!(port["targetPort"].as_str(), Some("admin"));
    assert_eq!(parse(&docs).proxy.admin_addr.port(), 10254);
    let sm = one(&docs, "ServiceMonitor");
    assert_eq!(sm["metadata"]["labels"]["release"].as_str(), Some("prom"));
    assert_eq!(sm["spec"]["endpoints"][0]["port"].as_str(), Some("metrics"));
    assert_eq!(sm["spec"]["endpoints"][0]["interval"].as_str(), Some("15s"));
    assert_eq!(
        sm["spec"]["selector"]["matchLabels"],
        metrics["metadata"]["labels"]
            .as_mapping()
            .map(|m| {
                let mut m = m.clone();
                m.retain(|k, _| {
                    matches!(
                        k.as_str(),
                        Some(
                            "app.kubernetes.io/name"
                                | "app.kubernetes.io/instance"
                                | "app.kubernetes.io/component"
                        )
                    )
                });
                Value::Mapping(m)
            })
            .unwrap_or(Value::Null)
    );
}

/// `controller.metrics.compat` (#33): `--metrics-compat` as `sluice controller` parses it;
/// `off` by default, `ingress-nginx` for ingress-nginx's metric names, and any other value
/// refused by `helm template` naming the value and what is accepted.
#[test]
fn metrics_compat_value_becomes_the_flag() {
    use sluice_proxy::MetricsCompat;
    let docs = render(&[], &[]);
    assert!(args(&docs).contains(&"--metrics-compat=off".to_owned()));
    assert_eq!(parse(&docs).proxy.metrics_compat, MetricsCompat::Off);
    let docs = render(&["controller.metrics.compat=ingress-nginx"], &[]);
    assert!(args(&docs).contains(&"--metrics-compat=ingress-nginx".to_owned()));
    assert_eq!(
        parse(&docs).proxy.metrics_compat,
        MetricsCompat::IngressNginx
    );
    let (ok, _, err) = run_helm(&[
        "template",
        "rel",
        chart().to_str().expect("UTF-8 path"),
        "--set",
        "controller.metrics.compat=nginx",
    ]);
    assert!(!ok, "an unknown compat mode rendered");
    assert!(
        err.contains("controller.metrics.compat") && err.contains("off, ingress-nginx"),
        "{err}"
    );
}

/// ingress-nginx's `controller.nodeSelector`, `tolerations`, `affinity`,
/// `topologySpreadConstraints` and `resources` land on the pod as given.
#[test]
fn scheduling_values_land_on_the_pod() {
    let docs = render(
        &["controller.resources.limits.memory=1Gi"],
        &[
            "controller.tolerations=[{\"key\":\"edge\",\"operator\":\"Exists\",\"effect\":\"NoSchedule\"}]",
            "controller.topologySpreadConstraints=[{\"maxSkew\":1,\"topologyKey\":\"topology.kubernetes.io/zone\",\"whenUnsatisfiable\":\"ScheduleAnyway\"}]",
            "controller.affinity={\"podAntiAffinity\":{\"preferredDuringSchedulingIgnoredDuringExecution\":[]}}",
        ],
    );
    let pod = &workload(&docs)["spec"]["template"]["spec"];
    assert_eq!(
        pod["nodeSelector"]["kubernetes.io/os"].as_str(),
        Some("linux")
    );
    assert_eq!(pod["tolerations"][0]["key"].as_str(), Some("edge"));
    assert_eq!(
        pod["topologySpreadConstraints"][0]["topologyKey"].as_str(),
        Some("topology.kubernetes.io/zone")
    );
    assert!(pod["affinity"]["podAntiAffinity"].is_mapping());
    assert_eq!(
        pod["containers"][0]["resources"]["limits"]["memory"].as_str(),
        Some("1Gi")
    );
}

/// As deploy/: /healthz answers only after the cache sync (`--sync-timeout`), so the
/// startup probe outlasts it before liveness counts.
#[test]
fn the_startup_probe_outlasts_the_cache_sync() {
    for variant in VARIANTS {
        let docs = render(variant, &[]);
        let sync = parse(&docs).sync_timeout.as_secs();
        let c = container(workload(&docs));
        let startup = &c["startupProbe"];
        assert_eq!(startup["httpGet"]["path"].as_str(), Some("/healthz"));
        let waits = startup["periodSeconds"].as_u64().unwrap_or(10)
            * startup["failureThreshold"].as_u64().unwrap_or(3);
        assert!(waits > sync + 30, "{variant:?}: {waits} s vs {sync} s");
        assert!(!c["livenessProbe"].is_null());
    }
}

#[tokio::test]
async fn every_rendering_is_accepted_by_the_api_server() -> anyhow::Result<()> {
    let cp = ControlPlane::shared().await?;
    let client = cp.client();
    sluice_testenv::apply_yaml(
        &client,
        "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: sluice-system\n",
    )
    .await?;
    for variant in VARIANTS {
        let docs = render(variant, &[]);
        let docs: Vec<&Value> = docs.iter().collect();
        sluice_testenv::validate_yaml(&client, &to_yaml(&docs))
            .await
            .map_err(|e| e.context(format!("helm template {variant:?}")))?;
    }
    Ok(())
}

/// ingress-nginx's `controller.admissionWebhooks.*`: the controller serves the webhook
/// (`--validating-webhook` on `port`, the certificate from the mounted Secret), a Service reaches
/// that port, and the ValidatingWebhookConfiguration sends Ingress CREATE/UPDATE there with
/// the given failurePolicy; with `certManager.enabled`, cert-manager makes the Secret and
/// injects the CA.
#[test]
fn admission_webhooks_values_wire_the_webhook_to_the_controller() {
    let docs = render(&[], &[]);
    assert!(of_kind(&docs, "ValidatingWebhookConfiguration").is_empty());
    assert_eq!(parse(&docs).webhook_addr, None);

    let docs = render(VARIANTS[3], &[]);
    let parsed = parse(&docs);
    assert_eq!(parsed.webhook_addr.map(|a| a.port()), Some(9443));
    let cert = parsed
        .webhook_cert_file
        .expect("--validating-webhook-certificate");
    let key = parsed.webhook_key_file.expect("--validating-webhook-key");
    let w = workload(&docs);
    let c = container(w);
    let mount = &c["volumeMounts"][0];
    let dir = PathBuf::from(mount["mountPath"].as_str().expect("mountPath"));
    assert_eq!(cert, dir.join("tls.crt"));
    assert_eq!(key, dir.join("tls.key"));
    let volume = &w["spec"]["template"]["spec"]["volumes"][0];
    assert_eq!(volume["name"], mount["name"]);
    assert_eq!(
        volume["secret"]["secretName"].as_str(),
        Some("rel-sluice-admission")
    );
    let webhook_port = c["ports"]
        .as_sequence()
        .and_then(|ps| ps.iter().find(|p| p["name"].as_str() == Some("webhook")))
        .and_then(|p| p["containerPort"].as_u64());
    assert_eq!(webhook_port, Some(9443));

    let svc = of_kind(&docs, "Service")
        .into_iter()
        .find(|s| s["metadata"]["name"].as_str() == Some("rel-sluice-admission"))
        .expect("the webhook Service");
    assert_eq!(
        svc["spec"]["ports"][0]["targetPort"].as_str(),
        Some("webhook")
    );
    let vwc = one(&docs, "ValidatingWebhookConfiguration");
    let hook = &vwc["webhooks"][0];
    let client = &hook["clientConfig"];
    assert_eq!(client["service"]["name"], svc["metadata"]["name"]);
    assert_eq!(
        client["service"]["namespace"].as_str(),
        Some("sluice-system")
    );
    assert_eq!(client["service"]["path"].as_str(), Some("/validate"));
    assert_eq!(client["service"]["port"], svc["spec"]["ports"][0]["port"]);
    assert_eq!(client["caBundle"].as_str(), Some("Q0EgUEVN"));
    assert_eq!(hook["failurePolicy"].as_str(), Some("Fail"));
    assert_eq!(hook["sideEffects"].as_str(), Some("None"));
    assert_eq!(strings(&hook["rules"][0]["resources"]), ["ingresses"]);
    assert_eq!(
        strings(&hook["rules"][1]["resources"]),
        ["httproutes", "grpcroutes"]
    );
    assert_eq!(
        strings(&hook["rules"][0]["operations"]),
        ["CREATE", "UPDATE"]
    );

    let docs = render(
        &[
            "controller.admissionWebhooks.enabled=true",
            "controller.admissionWebhooks.certManager.enabled=true",
            "controller.admissionWebhooks.failurePolicy=Ignore",
        ],
        &[],
    );
    let certificate = one(&docs, "Certificate");
    assert_eq!(
        certificate["spec"]["secretName"].as_str(),
        Some("rel-sluice-admission")
    );
    assert!(
        strings(&certificate["spec"]["dnsNames"])
            .contains(&"rel-sluice-admission.sluice-system.svc".to_string())
    );
    one(&docs, "Issuer");
    let vwc = one(&docs, "ValidatingWebhookConfiguration");
    assert_eq!(
        vwc["metadata"]["annotations"]["cert-manager.io/inject-ca-from"].as_str(),
        Some("sluice-system/rel-sluice-admission")
    );
    assert_eq!(vwc["webhooks"][0]["failurePolicy"].as_str(), Some("Ignore"));

    // Without a CA and without cert-manager there is nothing the API server could trust.
    let chart = chart();
    let (ok, _, err) = run_helm(&[
        "template",
        "rel",
        chart.to_str().expect("UTF-8 path"),
        "--set",
        "controller.admissionWebhooks.enabled=true",
    ]);
    assert!(!ok);
    assert!(
        err.contains("certManager.enabled=true, or caBundle"),
        "{err}"
    );
}

/// ingress-nginx's `controller.autoscaling.*` (an HPA owns the replica count; the PDB follows
/// minReplicas) and `controller.scope.*` (`--watch-namespace`, the release's by default).
#[test]
fn autoscaling_and_scope() {
    let docs = render(
        &[
            "controller.autoscaling.enabled=true",
            "controller.autoscaling.minReplicas=2",
            "controller.autoscaling.maxReplicas=5",
        ],
        &[],
    );
    let w = workload(&docs);
    assert!(w["spec"]["replicas"].is_null(), "the HPA sets replicas");
    let hpa = one(&docs, "HorizontalPodAutoscaler");
    assert_eq!(hpa["spec"]["scaleTargetRef"]["name"], w["metadata"]["name"]);
    assert_eq!(hpa["spec"]["minReplicas"].as_u64(), Some(2));
    assert_eq!(hpa["spec"]["maxReplicas"].as_u64(), Some(5));
    one(&docs, "PodDisruptionBudget");
    assert!(of_kind(&render(&[], &[]), "HorizontalPodAutoscaler").is_empty());

    assert_eq!(parse(&render(&[], &[])).watch_namespace, None);
    let docs = render(&["controller.scope.enabled=true"], &[]);
    assert_eq!(
        parse(&docs).watch_namespace.as_deref(),
        Some("sluice-system")
    );
    let docs = render(
        &[
            "controller.scope.enabled=true",
            "controller.scope.namespace=apps",
        ],
        &[],
    );
    assert_eq!(parse(&docs).watch_namespace.as_deref(), Some("apps"));
}

/// The chart grants what deploy/ grants (deploy_install.rs proves deploy/'s rules enough by
/// running under them): the same ClusterRole rules, the Lease aside. A kind added to one and
/// not the other fails here.
#[test]
fn the_charts_cluster_role_is_deploys() {
    let rbac = std::fs::read_to_string(root().join("deploy/base/rbac.yaml")).expect("rbac.yaml");
    let deploy: Vec<Value> = yaml_serde::Deserializer::from_str(&rbac)
        .map(serde::Deserialize::deserialize)
        .collect::<Result<_, _>>()
        .expect("deploy/base/rbac.yaml");
    let rules = |role: &Value| -> Vec<(Vec<String>, Vec<String>, Vec<String>)> {
        let mut rules: Vec<_> = role["rules"]
            .as_sequence()
            .expect("rules")
            .iter()
            .map(|r| {
                let sorted = |v: &Value| {
                    let mut s = strings(v);
                    s.sort();
                    s
                };
                (
                    sorted(&r["apiGroups"]),
                    sorted(&r["resources"]),
                    sorted(&r["verbs"]),
                )
            })
            .collect();
        rules.sort();
        rules
    };
    let docs = render(&[], &[]);
    assert_eq!(
        rules(one(&docs, "ClusterRole")),
        rules(one(&deploy, "ClusterRole"))
    );
}

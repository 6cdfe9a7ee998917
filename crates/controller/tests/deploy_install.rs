//! deploy/ installed for real: the kustomize overlays (`kubectl kustomize`, what
//! `kubectl apply -k` applies) applied to the test cluster, and the node agent running sluice
//! as the manifests say: the binary of the image, the args, the env (downward API), the
//! ServiceAccount token through in-cluster config (no kubeconfig), the readiness probe. An
//! Ingress and an HTTPRoute then answer through every installed replica (and get their
//! status from it), and ingress-manager's overlay creates the Ingress of an annotated
//! Service. The webhook overlay (its cert-manager part done by the test) then has the API
//! server refuse an Ingress sluice would not serve.
//!
//! RBAC is checked by what the API server refused: any `forbidden` line in an installed
//! pod's log (read through the API server, `kubectl logs`) fails the test, naming the verb
//! and resource. A copy of the ClusterRole without one verb shows that such a line is caught.
//!
//! The DaemonSet asks for hostNetwork; the node agent runs it in a network namespace of its
//! own all the same (ports 80 and 443 on the test machine are not a test's to take), so its
//! ports are reached at the pod's IP, which stands for the node's address here.

mod support;
mod tls_support;

use base64::Engine;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::networking::v1::Ingress;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, ListParams, LogParams};
use kube::core::GroupVersionKind;
use serde_json::json;
use sluice_testenv::{AGENT_NODE_NAME, eventually};
use std::collections::BTreeSet;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;
use support::{World, get};

const SYSTEM: &str = "sluice-system";

/// `kubectl kustomize deploy/overlays/NAME`.
fn kustomize(overlay: &str) -> anyhow::Result<String> {
    let dir = PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../deploy/overlays"
    ))
    .join(overlay);
    let out = std::process::Command::new("kubectl")
        .arg("kustomize")
        .arg(&dir)
        .output()
        .map_err(|e| {
            anyhow::anyhow!("cannot run `kubectl kustomize` ({e}): run `bash scripts/testenv.sh`")
        })?;
    anyhow::ensure!(
        out.status.success(),
        "kubectl kustomize deploy/overlays/{overlay}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(String::from_utf8(out.stdout)?)
}

/// What the API server refused a client, from the lines of a log: `(verb, resource)` and the
/// line, for every RBAC denial (`... is forbidden: User "..." cannot VERB resource "R" ...`),
/// whether the line is plain text or JSON (quotes escaped).
fn refusals(log: &str) -> Vec<(String, String, String)> {
    let mut found = Vec::new();
    for line in log.lines().filter(|l| l.contains("forbidden")) {
        let unquote = |s: &str| s.trim_matches(|c| c == '"' || c == '\\').to_string();
        let Some((_, after)) = line.split_once(" cannot ") else {
            found.push(("?".into(), "?".into(), line.to_string()));
            continue;
        };
        let mut words = after.split_whitespace();
        let verb = words.next().map(unquote).unwrap_or_default();
        let resource = match (words.next(), words.next()) {
            (Some("resource"), Some(r)) => unquote(r),
            _ => "?".into(),
        };
        found.push((verb, resource, line.to_string()));
    }
    found
}

/// Fails naming every verb the API server refused to pod `namespace/name`.
async fn assert_not_refused(admin: &kube::Client, name: &str) -> anyhow::Result<()> {
    let pods: Api<Pod> = Api::namespaced(admin.clone(), SYSTEM);
    let log = pods.logs(name, &LogParams::default()).await?;
    let refused = refusals(&log);
    if let Some((verb, resource, line)) = refused.first() {
        anyhow::bail!(
            "RBAC of deploy/ lacks verb `{verb}` on `{resource}` (pod {SYSTEM}/{name}, {} \
             refusals); first:\n{line}",
            refused.len()
        );
    }
    Ok(())
}

/// Names and IPs of the Ready pods labelled `selector` in sluice-system on the agent's Node,
/// once there are exactly `n`.
async fn ready_pods(
    admin: &kube::Client,
    selector: &str,
    n: usize,
) -> anyhow::Result<Vec<(String, IpAddr)>> {
    let pods: Api<Pod> = Api::namespaced(admin.clone(), SYSTEM);
    eventually(
        Duration::from_secs(60),
        &format!("{n} Ready pods {selector}"),
        || async {
            let list = pods
                .list(&ListParams::default().labels(selector))
                .await
                .ok()?;
            let mut ready = Vec::new();
            for p in list.items {
                if p.metadata.deletion_timestamp.is_some()
                    || p.spec.as_ref()?.node_name.as_deref() != Some(AGENT_NODE_NAME)
                {
                    continue;
                }
                let status = p.status?;
                let is_ready = status
                    .conditions
                    .iter()
                    .flatten()
                    .any(|c| c.type_ == "Ready" && c.status == "True");
                if is_ready {
                    ready.push((p.metadata.name?, status.pod_ip?.parse().ok()?));
                }
            }
            (ready.len() == n).then_some(ready)
        },
    )
    .await
}

/// Waits until `host` is answered by the echo Service through sluice at `addr`.
async fn answers(addr: SocketAddr, host: &str) -> anyhow::Result<()> {
    eventually(
        Duration::from_secs(30),
        &format!("{host} through sluice at {addr}"),
        || async {
            let r = get(addr, host, "/").await.ok()?;
            (r.status == 200 && r.service() == "echo").then_some(())
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deploy_overlays_install_and_serve_ingress_and_httproute() -> anyhow::Result<()> {
    let w = World::new("install").await?;
    let admin = w.admin.clone();
    w.cp.node_agent().await?;
    support::gateway_crds::install_crds(&w).await?;

    // The backend: a Deployment of sluice-echo behind Service `echo`.
    w.service("echo").await?;
    w.create(json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "echo"},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": "echo"}},
            "template": {
                "metadata": {"labels": {"app": "echo"}},
                "spec": {"containers": [{
                    "name": "echo", "image": "sluice-echo:test",
                    "args": ["--listen", "0.0.0.0:8080", "--service", "echo"],
                    "readinessProbe": {"tcpSocket": {"port": 8080}, "periodSeconds": 1},
                }]},
            },
        },
    }))
    .await?;
    // Routes for the installed controller: its class `sluice`, its Gateway controller name.
    w.create(json!({
        "apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
        "metadata": {"name": "echo"},
        "spec": {"ingressClassName": "sluice", "rules": [{"host": "ingress.install.test",
            "http": {"paths": [{"path": "/", "pathType": "Prefix",
                "backend": {"service": {"name": "echo", "port": {"number": 80}}}}]}}]},
    }))
    .await?;
    w.create(json!({
        "apiVersion": "gateway.networking.k8s.io/v1", "kind": "GatewayClass",
        "metadata": {"name": "sluice"},
        "spec": {"controllerName": "sluice.dev/gateway-controller"},
    }))
    .await?;
    w.create(json!({
        "apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
        "metadata": {"name": "edge"},
        "spec": {"gatewayClassName": "sluice",
                 "listeners": [{"name": "http", "port": 80, "protocol": "HTTP"}]},
    }))
    .await?;
    w.create(json!({
        "apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
        "metadata": {"name": "echo"},
        "spec": {"parentRefs": [{"name": "edge"}], "hostnames": ["route.install.test"],
                 "rules": [{"backendRefs": [{"name": "echo", "port": 80}]}]},
    }))
    .await?;

    // A ClusterRole one verb short, for a second sluice: its refusal must be caught.
    let rbac = include_str!("../../../deploy/base/rbac.yaml");
    let mut cut = String::new();
    for doc in rbac.split("\n---\n") {
        let mut v: serde_json::Value = yaml_serde::from_str(doc)?;
        if v["kind"] == "ClusterRole" {
            v["metadata"]["name"] = json!("sluice-cut");
            for rule in v["rules"].as_array_mut().into_iter().flatten() {
                if rule["resources"]
                    .as_array()
                    .is_some_and(|r| r.contains(&json!("ingresses")))
                {
                    rule["verbs"]
                        .as_array_mut()
                        .into_iter()
                        .for_each(|verbs| verbs.retain(|verb| verb != "list"));
                }
            }
            cut.push_str(&yaml_serde::to_string(&v)?);
            cut.push_str("\n---\n");
        }
    }
    cut.push_str(&yaml_serde::to_string(&json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": "sluice-cut"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "sluice-cut"},
        "subjects": [{"kind": "ServiceAccount", "name": "sluice-cut", "namespace": SYSTEM}],
    }))?);
    cut.push_str("\n---\n");
    cut.push_str(&yaml_serde::to_string(&json!({
        "apiVersion": "v1", "kind": "ServiceAccount",
        "metadata": {"name": "sluice-cut", "namespace": SYSTEM},
    }))?);
    cut.push_str("\n---\n");
    cut.push_str(&yaml_serde::to_string(&json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "sluice-cut", "namespace": SYSTEM},
        "spec": {"serviceAccountName": "sluice-cut", "terminationGracePeriodSeconds": 1,
                 "containers": [{"name": "sluice", "image": "sluice:test",
                    "args": ["controller", "--http-addr=0.0.0.0:8080", "--https-addr=0.0.0.0:8443",
                             "--admin-addr=0.0.0.0:10254", "--election-id=sluice-cut",
                             "--ingress-class=sluice-cut", "--log-format=json"]}]},
    }))?);

    // The DaemonSet overlay, and the cut sluice beside it.
    sluice_testenv::apply_yaml(&admin, &kustomize("daemonset")?).await?;
    sluice_testenv::apply_yaml(&admin, &cut).await?;
    let daemon = ready_pods(&admin, "app.kubernetes.io/name=sluice", 1).await?;
    let (name, ip) = daemon[0].clone();
    answers(SocketAddr::new(ip, 80), "ingress.install.test").await?;
    answers(SocketAddr::new(ip, 80), "route.install.test").await?;
    // Status writes too: the Ingress gets the node's address (--publish-status-address),
    // the HTTPRoute sluice's Accepted.
    let pods: Api<Pod> = Api::namespaced(admin.clone(), SYSTEM);
    let host_ip = pods
        .get(&name)
        .await?
        .status
        .and_then(|s| s.host_ip)
        .unwrap_or_default();
    let ingresses: Api<Ingress> = w.api();
    eventually(
        Duration::from_secs(30),
        "the Ingress's status address",
        || async {
            let ing = ingresses.get("echo").await.ok()?;
            let lb = ing.status?.load_balancer?.ingress?;
            (lb.first()?.ip.as_deref() == Some(host_ip.as_str())).then_some(())
        },
    )
    .await?;
    // Only the Role in sluice-system grants the Lease: the leader holds it there.
    let leases: Api<k8s_openapi::api::coordination::v1::Lease> =
        Api::namespaced(admin.clone(), SYSTEM);
    eventually(
        Duration::from_secs(30),
        "the Lease sluice-leader held by the DaemonSet's pod",
        || async {
            let lease = leases.get_opt("sluice-leader").await.ok()??;
            (lease.spec?.holder_identity? == name).then_some(())
        },
    )
    .await?;
    let routes: Api<DynamicObject> = Api::namespaced_with(
        admin.clone(),
        &w.ns,
        &ApiResource::from_gvk(&GroupVersionKind::gvk(
            "gateway.networking.k8s.io",
            "v1",
            "HTTPRoute",
        )),
    );
    eventually(
        Duration::from_secs(30),
        "the HTTPRoute Accepted",
        || async {
            let route = routes.get("echo").await.ok()?;
            let parents = route.data["status"]["parents"].as_array()?.clone();
            parents
                .iter()
                .any(|p| {
                    p["controllerName"] == "sluice.dev/gateway-controller"
                        && p["conditions"].as_array().is_some_and(|c| {
                            c.iter()
                                .any(|c| c["type"] == "Accepted" && c["status"] == "True")
                        })
                })
                .then_some(())
        },
    )
    .await?;
    assert_not_refused(&admin, &name).await?;

    // (It has no Lease rights either, deploy/ grants those to `sluice` only: the refusal
    // looked for is the cut verb's.)
    eventually(
        Duration::from_secs(30),
        "the cut ClusterRole's refusal to list ingresses in the log",
        || async {
            let log = pods.logs("sluice-cut", &LogParams::default()).await.ok()?;
            refusals(&log)
                .iter()
                .any(|(verb, resource, _)| verb == "list" && resource == "ingresses")
                .then_some(())
        },
    )
    .await?;
    assert!(
        assert_not_refused(&admin, "sluice-cut")
            .await
            .is_err_and(|e| e.to_string().contains("lacks verb")),
        "a refusal fails the check"
    );
    pods.delete("sluice-cut", &DeleteParams::default()).await?;

    // The Deployment overlay instead (two replicas on 8080).
    Api::<k8s_openapi::api::apps::v1::DaemonSet>::namespaced(admin.clone(), SYSTEM)
        .delete("sluice", &DeleteParams::foreground())
        .await?;
    sluice_testenv::apply_yaml(&admin, &kustomize("deployment")?).await?;
    let replicas = ready_pods(&admin, "app.kubernetes.io/name=sluice", 2).await?;
    assert!(
        replicas.iter().all(|(n, _)| *n != name),
        "the DaemonSet's pod is gone"
    );
    for (name, ip) in &replicas {
        answers(SocketAddr::new(*ip, 8080), "ingress.install.test").await?;
        answers(SocketAddr::new(*ip, 8080), "route.install.test").await?;
        assert_not_refused(&admin, name).await?;
    }

    // ingress-manager: an Ingress (class sluice) for an annotated Service, served too.
    sluice_testenv::apply_yaml(&admin, &kustomize("ingress-manager")?).await?;
    w.create(json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "managed", "annotations": {"ingress/http": "true"}},
        "spec": {"selector": {"app": "echo"}, "ports": [{"name": "http", "port": 80, "targetPort": 8080}]},
    }))
    .await?;
    let ingresses: Api<Ingress> = w.api();
    let host = eventually(
        Duration::from_secs(60),
        "ingress-manager's Ingress",
        || async {
            let ing = ingresses.get_opt("managed").await.ok()??;
            let owned = ing
                .metadata
                .owner_references
                .iter()
                .flatten()
                .any(|o| o.kind == "Service" && o.name == "managed");
            let spec = ing.spec?;
            (owned && spec.ingress_class_name.as_deref() == Some("sluice"))
                .then(|| spec.rules?.first()?.host.clone())?
        },
    )
    .await?;
    assert_eq!(host, format!("managed.{}.example.com", w.ns));
    answers(SocketAddr::new(replicas[0].1, 8080), &host).await?;
    let managers = ready_pods(&admin, "app.kubernetes.io/name=sluice-ingress-manager", 2).await?;
    let mut seen = BTreeSet::new();
    for (name, _) in &managers {
        assert_not_refused(&admin, name).await?;
        seen.insert(name.clone());
    }
    assert_eq!(seen.len(), 2);

    // The webhook overlay, with cert-manager's part done here: the Secret it would write and
    // the CA it would inject. The API server reaches the webhook through its Service (at a
    // pod's IP) and refuses an Ingress sluice would not serve.
    let (leaf, key, ca) = tls_support::ca_and_leaf(&["sluice-admission.sluice-system.svc"])?;
    let b64 = |b: &[u8]| base64::engine::general_purpose::STANDARD.encode(b);
    let ca_pem = format!(
        "-----BEGIN CERTIFICATE-----\n{}\n-----END CERTIFICATE-----\n",
        b64(ca.as_ref())
    );
    w.create(json!({
        "apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
        "metadata": {"name": "sluice-admission", "namespace": SYSTEM},
        "data": {"tls.crt": b64(leaf.as_bytes()), "tls.key": b64(key.as_bytes())},
    }))
    .await?;
    let mut docs = Vec::new();
    for doc in yaml_serde::Deserializer::from_str(&kustomize("webhook")?) {
        let mut v: serde_json::Value = serde::Deserialize::deserialize(doc)?;
        if v["apiVersion"]
            .as_str()
            .is_some_and(|a| a.starts_with("cert-manager.io/"))
        {
            continue;
        }
        if v["kind"] == "ValidatingWebhookConfiguration" {
            for hook in v["webhooks"].as_array_mut().into_iter().flatten() {
                hook["clientConfig"]["caBundle"] = json!(b64(ca_pem.as_bytes()));
            }
        }
        docs.push(yaml_serde::to_string(&v)?);
    }
    sluice_testenv::apply_yaml(&admin, &docs.join("---\n")).await?;
    let bad = json!({
        "apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
        "metadata": {"name": "bad", "namespace": w.ns,
            "annotations": {"nginx.ingress.kubernetes.io/proxy-next-upstream": "http_418"}},
        "spec": {"ingressClassName": "sluice", "rules": [{"host": "bad.install.test",
            "http": {"paths": [{"path": "/", "pathType": "Prefix",
                "backend": {"service": {"name": "echo", "port": {"number": 80}}}}]}}]},
    })
    .to_string();
    let kubeconfig = w.cp.kubeconfig_path().to_path_buf();
    let refused = eventually(
        Duration::from_secs(60),
        "deploy/overlays/webhook refusing a bad Ingress",
        || {
            let (kubeconfig, bad) = (kubeconfig.clone(), bad.clone());
            async move {
                let out = tokio::task::spawn_blocking(move || {
                    use std::io::Write;
                    let mut child = std::process::Command::new("kubectl")
                        .arg("--kubeconfig")
                        .arg(&kubeconfig)
                        .args(["apply", "--dry-run=server", "-f", "-"])
                        .stdin(std::process::Stdio::piped())
                        .stderr(std::process::Stdio::piped())
                        .stdout(std::process::Stdio::null())
                        .spawn()
                        .ok()?;
                    child.stdin.take()?.write_all(bad.as_bytes()).ok()?;
                    child.wait_with_output().ok()
                })
                .await
                .ok()??;
                let err = String::from_utf8_lossy(&out.stderr).into_owned();
                (!out.status.success() && err.contains("denied the request")).then_some(err)
            }
        },
    )
    .await?;
    assert!(
        refused.contains("InvalidAnnotation") && refused.contains("proxy-next-upstream"),
        "{refused}"
    );
    Ok(())
}

#[test]
fn refusals_name_verb_and_resource_in_text_and_json() {
    let text = r#"ingresses.networking.k8s.io is forbidden: User "system:serviceaccount:sluice-system:sluice" cannot list resource "ingresses" in API group "networking.k8s.io" at the cluster scope"#;
    let json =
        serde_json::to_string(&json!({"level": "WARN", "fields": {"error": text}})).expect("JSON");
    for log in [text.to_string(), json] {
        let r = refusals(&format!("ok line\n{log}\n"));
        assert_eq!(r.len(), 1, "{log}");
        assert_eq!((r[0].0.as_str(), r[0].1.as_str()), ("list", "ingresses"));
    }
    assert!(refusals("nothing refused here\n").is_empty());
}

//! The validating admission webhook against the real API server: `sluice controller
//! --validating-webhook` serves it, a ValidatingWebhookConfiguration (as ingress-nginx's chart
//! installs `controller.admissionWebhooks`) points the test API server at it by URL on
//! loopback (where the API server runs), and `kubectl apply` of an Ingress that sluice would
//! not serve as written is refused with a message naming the field and the Event's reason;
//! a good one is accepted, a conflict it would lose is refused naming the winner, a missing
//! Service is a warning only, and other classes are left alone. An HTTPRoute that sluice
//! would not accept is refused too, and so is a GRPCRoute (the chart's rules name both).

mod support;
mod tls_support;

use base64::Engine;
use serde_json::json;
use std::io::Write;
use std::time::Duration;
use support::World;

/// `kubectl apply -f -` of `object` (JSON) with the test cluster's admin kubeconfig;
/// (success, stdout + stderr).
async fn kubectl_apply(w: &World, object: serde_json::Value, dry_run: bool) -> (bool, String) {
    let kubeconfig = w.cp.kubeconfig_path().to_path_buf();
    let body = object.to_string();
    tokio::task::spawn_blocking(move || {
        let mut cmd = std::process::Command::new("kubectl");
        cmd.arg("--kubeconfig")
            .arg(&kubeconfig)
            .args(["apply", "-f", "-"]);
        if dry_run {
            cmd.arg("--dry-run=server");
        }
        let mut child = match cmd
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
        {
            Ok(c) => c,
            Err(e) => {
                return (
                    false,
                    format!("cannot run kubectl ({e}): run scripts/testenv.sh"),
                );
            }
        };
        if let Some(mut stdin) = child.stdin.take() {
            let _ = stdin.write_all(body.as_bytes());
        }
        match child.wait_with_output() {
            Ok(out) => (
                out.status.success(),
                format!(
                    "{}{}",
                    String::from_utf8_lossy(&out.stdout),
                    String::from_utf8_lossy(&out.stderr)
                ),
            ),
            Err(e) => (false, e.to_string()),
        }
    })
    .await
    .unwrap_or_else(|e| (false, e.to_string()))
}

fn ingress(
    w: &World,
    name: &str,
    class: &str,
    path: &str,
    annotations: serde_json::Value,
) -> serde_json::Value {
    json!({
        "apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
        "metadata": {"name": name, "namespace": w.ns, "annotations": annotations},
        "spec": {"ingressClassName": class, "rules": [{"host": "web.webhook.test",
            "http": {"paths": [{"path": path, "pathType": "Prefix",
                "backend": {"service": {"name": "web", "port": {"number": 80}}}}]}}]},
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_apply_of_an_ingress_or_route_sluice_would_not_serve_is_refused()
-> anyhow::Result<()> {
    let w = World::new("webhook").await?;
    // The Gateway API kinds, watched from the start (`--gateway-api=auto` finds them).
    support::gateway_crds::install_crds(&w).await?;
    w.service("web").await?;
    let dir = tempfile::tempdir()?;
    let (leaf, key, ca) = tls_support::ca_and_leaf(&["127.0.0.1"])?;
    let (cert_file, key_file) = (dir.path().join("tls.crt"), dir.path().join("tls.key"));
    std::fs::write(&cert_file, leaf)?;
    std::fs::write(&key_file, key)?;
    let ca_pem = format!(
        "-----BEGIN CERTIFICATE-----\n{}\n-----END CERTIFICATE-----\n",
        base64::engine::general_purpose::STANDARD.encode(ca.as_ref())
    );
    // A free port on loopback, where the API server (a process on this host) reaches it.
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let addr = format!("127.0.0.1:{port}");
    let running = w
        .start(&[
            "--validating-webhook",
            &addr,
            "--validating-webhook-certificate",
            cert_file.to_str().unwrap_or_default(),
            "--validating-webhook-key",
            key_file.to_str().unwrap_or_default(),
        ])
        .await?;

    // As the chart's ValidatingWebhookConfiguration, by URL instead of Service, and for
    // this test's namespace only (other tests share the API server).
    let config = format!("sluice-{}", w.ns);
    w.create(json!({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": config},
        "webhooks": [{
            "name": "validate.sluice.dev",
            "clientConfig": {"url": format!("https://{addr}/validate"),
                             "caBundle": base64::engine::general_purpose::STANDARD.encode(ca_pem)},
            "rules": [{"apiGroups": ["networking.k8s.io"], "apiVersions": ["v1"],
                       "operations": ["CREATE", "UPDATE"], "resources": ["ingresses"]},
                      {"apiGroups": ["gateway.networking.k8s.io"], "apiVersions": ["v1"],
                       "operations": ["CREATE", "UPDATE"], "resources": ["httproutes", "grpcroutes"]}],
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": w.ns}},
            "failurePolicy": "Fail",
            "sideEffects": "None",
            "admissionReviewVersions": ["v1"],
            "timeoutSeconds": 10,
        }],
    }))
    .await?;

    let bad = ingress(
        &w,
        "bad",
        &w.class,
        "/",
        json!({"nginx.ingress.kubernetes.io/proxy-next-upstream": "http_418"}),
    );
    // The API server takes the configuration up within a moment; a server-side dry run
    // (which runs the webhook, creates nothing) tells when.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let (ok, out) = kubectl_apply(&w, bad.clone(), true).await;
        if !ok && out.contains("denied the request") {
            break;
        }
        anyhow::ensure!(
            tokio::time::Instant::now() < deadline,
            "the webhook never refused the bad Ingress: {out}"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }

    let (ok, out) = kubectl_apply(&w, bad, false).await;
    assert!(!ok, "refused: {out}");
    assert!(out.contains("denied the request"), "{out}");
    assert!(
        out.contains("InvalidAnnotation"),
        "the Event's reason: {out}"
    );
    assert!(
        out.contains("metadata.annotations") && out.contains("proxy-next-upstream"),
        "names the field: {out}"
    );

    let (ok, out) = kubectl_apply(&w, ingress(&w, "good", &w.class, "/", json!({})), false).await;
    assert!(ok, "a good Ingress is accepted: {out}");
    assert!(!out.contains("Warning"), "{out}");

    // The same host and path again, newer: it would lose the conflict.
    let (ok, out) = kubectl_apply(&w, ingress(&w, "second", &w.class, "/", json!({})), false).await;
    assert!(!ok, "{out}");
    assert!(out.contains("ConflictLost"), "{out}");
    assert!(
        out.contains(&format!("{}/good", w.ns)),
        "names the winner: {out}"
    );

    // A Service that does not exist yet: accepted, with the Event's words as a warning.
    let mut missing = ingress(&w, "later", &w.class, "/later", json!({}));
    missing["spec"]["rules"][0]["http"]["paths"][0]["backend"]["service"]["name"] = json!("later");
    let (ok, out) = kubectl_apply(&w, missing, false).await;
    assert!(ok, "{out}");
    assert!(
        out.contains("Warning") && out.contains("ServiceNotFound"),
        "{out}"
    );

    // Another controller's class: not ours to judge.
    let other = ingress(
        &w,
        "other",
        "someone-else",
        "/",
        json!({"nginx.ingress.kubernetes.io/proxy-next-upstream": "http_418"}),
    );
    let (ok, out) = kubectl_apply(&w, other, false).await;
    assert!(ok, "{out}");

    // An HTTPRoute the CRD's schema lets through but sluice cannot serve (a regular
    // expression that does not compile): refused with what its Accepted condition would
    // say, naming the field.
    let class = format!("gc-{}", w.ns);
    w.create(json!({
        "apiVersion": "gateway.networking.k8s.io/v1", "kind": "GatewayClass",
        "metadata": {"name": class},
        "spec": {"controllerName": "sluice.dev/gateway-controller"},
    }))
    .await?;
    w.create(json!({
        "apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
        "metadata": {"name": "edge"},
        "spec": {"gatewayClassName": class,
                 "listeners": [{"name": "http", "port": 80, "protocol": "HTTP"}]},
    }))
    .await?;
    let route = |name: &str, path: serde_json::Value| {
        json!({
            "apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
            "metadata": {"name": name, "namespace": w.ns},
            "spec": {"parentRefs": [{"name": "edge"}], "hostnames": ["route.webhook.test"],
                     "rules": [{"matches": [{"path": path}],
                                "backendRefs": [{"name": "web", "port": 80}]}]},
        })
    };
    let bad_route = route(
        "bad",
        json!({"type": "RegularExpression", "value": "/(unclosed"}),
    );
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let out = loop {
        // Once the controller has compiled the Gateway, the route is judged.
        let (ok, out) = kubectl_apply(&w, bad_route.clone(), true).await;
        if !ok && out.contains("denied the request") {
            break out;
        }
        anyhow::ensure!(
            tokio::time::Instant::now() < deadline,
            "the webhook never refused the bad HTTPRoute: {out}"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    };
    assert!(out.contains("Accepted/UnsupportedValue"), "{out}");
    assert!(out.contains("spec.rules[0].matches[0].path.value"), "{out}");
    let (ok, out) = kubectl_apply(
        &w,
        route("good", json!({"type": "PathPrefix", "value": "/"})),
        false,
    )
    .await;
    assert!(ok, "a good HTTPRoute is accepted: {out}");

    // A GRPCRoute the CRD's schema lets through but sluice cannot serve (a method pattern
    // that is no regular expression): refused as the HTTPRoute was, naming the field.
    let grpc_route = |name: &str, method: serde_json::Value| {
        json!({
            "apiVersion": "gateway.networking.k8s.io/v1", "kind": "GRPCRoute",
            "metadata": {"name": name, "namespace": w.ns},
            "spec": {"parentRefs": [{"name": "edge"}], "hostnames": ["grpc.webhook.test"],
                     "rules": [{"matches": [{"method": method}],
                                "backendRefs": [{"name": "web", "port": 80}]}]},
        })
    };
    let (ok, out) = kubectl_apply(
        &w,
        grpc_route(
            "bad",
            json!({"type": "RegularExpression", "service": "(unclosed", "method": "Get"}),
        ),
        false,
    )
    .await;
    assert!(!ok, "the bad GRPCRoute was stored: {out}");
    assert!(out.contains("denied the request"), "{out}");
    assert!(out.contains("this GRPCRoute"), "{out}");
    assert!(out.contains("spec.rules[0].matches[0].method"), "{out}");
    assert!(out.contains("not a regular expression"), "{out}");
    let (ok, out) = kubectl_apply(
        &w,
        grpc_route(
            "good",
            json!({"type": "Exact", "service": "echo.Echo", "method": "Get"}),
        ),
        false,
    )
    .await;
    assert!(ok, "a good GRPCRoute is accepted: {out}");

    kube::Api::<k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration>::all(
        w.admin.clone(),
    )
    .delete(&config, &Default::default())
    .await?;
    running.stop().await?;
    Ok(())
}

//! End to end against a real API server: the ingress-nginx flags `--default-ssl-certificate`,
//! `--default-backend-service` and `--watch-ingress-without-class`, and the Events an
//! Ingress's unsupported, invalid and snippet annotations get.

mod support;
mod tls_support;

use base64::Engine;
use k8s_openapi::api::core::v1::Service;
use kube::api::DeleteParams;
use serde_json::json;
use sluice_testenv::eventually;
use std::time::Duration;
use support::{World, get, until_routed};
use tls_support::{ca_and_leaf, tls_get, until_tls};

fn path(p: &str, svc: &str) -> serde_json::Value {
    json!({"path": p, "pathType": "Prefix",
           "backend": {"service": {"name": svc, "port": {"name": "http"}}}})
}

/// The TLS Secret `name` holding `cert` and `key`.
fn tls_secret(name: &str, cert: &str, key: &str) -> serde_json::Value {
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    json!({
        "apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
        "metadata": {"name": name},
        "data": {"tls.crt": b64(cert), "tls.key": b64(key)},
    })
}

#[tokio::test]
async fn default_certificate_and_default_backend_come_from_the_flags() -> anyhow::Result<()> {
    let w = World::new("defaults").await?;
    let mut pods = Vec::new();
    for app in ["a", "fallback"] {
        w.service(app).await?;
        pods.push(w.pod(app, &format!("{app}-0")).await?);
    }
    // TLS hosts without a certificate of their own: no secretName, and a missing Secret.
    // (Plain HTTP to them is redirected to HTTPS; site.test has no TLS.)
    w.ingress(
        "site",
        json!({
            "tls": [{"hosts": ["bare.test"]}, {"hosts": ["missing.test"], "secretName": "nope"}],
            "rules": [
                {"host": "site.test", "http": {"paths": [path("/", "a")]}},
                {"host": "bare.test", "http": {"paths": [path("/", "a")]}},
                {"host": "missing.test", "http": {"paths": [path("/", "a")]}},
            ],
        }),
    )
    .await?;
    // The Secret does not exist yet when the controller starts.
    let backend_flag = format!("{}/fallback", w.ns);
    let cert_flag = format!("{}/default-tls", w.ns);
    let run = w
        .start(&[
            "--default-backend-service",
            &backend_flag,
            "--default-ssl-certificate",
            &cert_flag,
        ])
        .await?;
    let (http, https) = (run.http, run.https);

    // Requests no rule matches go to the flag's Service instead of a 404.
    until_routed(http, "unknown.test", "/", "fallback", 200).await?;
    until_routed(http, "site.test", "/", "a", 200).await?;

    // Meanwhile the generated certificate is served, which no CA of ours signs.
    let names = ["unknown.test", "bare.test", "missing.test", "127.0.0.1"];
    let (cert, key, ca) = ca_and_leaf(&names)?;
    assert!(
        tls_get(https, &ca, "unknown.test").await.is_err(),
        "no Secret yet: the generated certificate"
    );

    // The Secret appears: unknown names, absent SNI (an IP address sends none) and TLS hosts
    // without a usable Secret of their own get its certificate.
    w.create(tls_secret("default-tls", &cert, &key)).await?;
    until_tls(https, &ca, "unknown.test", "fallback", 200).await?;
    until_tls(https, &ca, "bare.test", "a", 200).await?;
    until_tls(https, &ca, "missing.test", "a", 200).await?;
    until_tls(https, &ca, "127.0.0.1", "fallback", 200).await?;

    // The Secret is renewed (another CA): the next handshakes get the new certificate.
    let (cert2, key2, ca2) = ca_and_leaf(&names)?;
    w.create(tls_secret("default-tls", &cert2, &key2)).await?;
    until_tls(https, &ca2, "unknown.test", "fallback", 200).await?;
    assert!(tls_get(https, &ca, "unknown.test").await.is_err());

    // The Secret turns invalid: the generated certificate again.
    w.create(tls_secret("default-tls", "not a certificate", &key2))
        .await?;
    eventually(
        Duration::from_secs(20),
        "an invalid Secret: the generated certificate",
        || async {
            tls_get(https, &ca2, "unknown.test")
                .await
                .is_err()
                .then_some(())
        },
    )
    .await?;

    // The default backend's Service goes away: 503, as for any missing Service.
    w.api::<Service>()
        .delete("fallback", &DeleteParams::default())
        .await?;
    until_routed(http, "unknown.test", "/", "", 503).await?;
    assert_eq!(get(http, "site.test", "/").await?.service(), "a");
    run.stop().await?;
    drop(pods);
    Ok(())
}

#[tokio::test]
async fn watch_ingress_without_class_serves_class_less_ingresses() -> anyhow::Result<()> {
    let w = World::new("classless").await?;
    w.service("a").await?;
    let _pod = w.pod("a", "a-0").await?;
    // Neither spec.ingressClassName nor the annotation, and our IngressClass is not the
    // default class.
    w.create(json!({
        "apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
        "metadata": {"name": "plain"},
        "spec": {"rules": [{"host": "plain.test", "http": {"paths": [path("/", "a")]}}]},
    }))
    .await?;
    let run = w.start(&[]).await?;
    w.ingress(
        "marker",
        json!({"rules": [{"host": "marker.test", "http": {"paths": [path("/", "a")]}}]}),
    )
    .await?;
    until_routed(run.http, "marker.test", "/", "a", 200).await?;
    assert_eq!(get(run.http, "plain.test", "/").await?.status, 404);
    run.stop().await?;

    let run = w.start(&["--watch-ingress-without-class"]).await?;
    until_routed(run.http, "plain.test", "/", "a", 200).await?;
    run.stop().await
}

#[tokio::test]
async fn unsupported_invalid_snippet_and_failed_closed_annotations_get_events() -> anyhow::Result<()>
{
    let w = World::new("annotations").await?;
    w.service("a").await?;
    let _pod = w.pod("a", "a-0").await?;
    let run = w.start(&[]).await?;
    let mut spec = json!({"rules": [{"host": "noted.test", "http": {"paths": [path("/", "a")]}}]});
    spec["ingressClassName"] = json!(w.class);
    w.create(json!({
        "apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
        "metadata": {"name": "noted", "annotations": {
            "nginx.ingress.kubernetes.io/http2-push-preload": "true",
            "nginx.ingress.kubernetes.io/proxy-body-size": "12x",
            "nginx.ingress.kubernetes.io/configuration-snippet": "x",
        }},
        "spec": spec,
    }))
    .await?;
    until_routed(run.http, "noted.test", "/", "a", 200).await?;
    // Basic authentication whose Secret does not exist: the Ingress fails closed (503), as
    // ingress-nginx answers a location whose auth annotations it cannot apply.
    let mut spec = json!({"rules": [{"host": "closed.test", "http": {"paths": [path("/", "a")]}}]});
    spec["ingressClassName"] = json!(w.class);
    w.create(json!({
        "apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
        "metadata": {"name": "closed", "annotations": {
            "nginx.ingress.kubernetes.io/auth-type": "basic",
            "nginx.ingress.kubernetes.io/auth-secret": "htpasswd",
        }},
        "spec": spec,
    }))
    .await?;
    until_routed(run.http, "closed.test", "/", "", 503).await?;

    let events: kube::Api<k8s_openapi::api::events::v1::Event> = w.api();
    let expected = [
        (
            "UnsupportedAnnotation",
            "nginx.ingress.kubernetes.io/http2-push-preload",
        ),
        (
            "InvalidAnnotation",
            "nginx.ingress.kubernetes.io/proxy-body-size",
        ),
        (
            "SnippetRefused",
            "nginx.ingress.kubernetes.io/configuration-snippet",
        ),
    ];
    let found = eventually(
        Duration::from_secs(20),
        "three annotation Events on the Ingress",
        || async {
            let list = events.list(&Default::default()).await.ok()?;
            let on_noted: Vec<_> = list
                .items
                .into_iter()
                .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("noted"))
                .collect();
            expected
                .iter()
                .all(|(reason, _)| {
                    on_noted
                        .iter()
                        .any(|e| e.reason.as_deref() == Some(*reason))
                })
                .then_some(on_noted)
        },
    )
    .await?;
    for (reason, annotation) in expected {
        let ev = found
            .iter()
            .find(|e| e.reason.as_deref() == Some(reason))
            .expect("found above");
        assert_eq!(ev.type_.as_deref(), Some("Warning"), "{reason}");
        let note = ev.note.as_deref().unwrap_or_default();
        assert!(
            note.contains(annotation),
            "{reason} names {annotation}: {note}"
        );
        let regarding = ev.regarding.as_ref().expect("regarding");
        assert_eq!(regarding.kind.as_deref(), Some("Ingress"));
        assert!(regarding.uid.is_some(), "the Event names the Ingress's uid");
    }
    // Still served, with its other settings.
    assert_eq!(get(run.http, "noted.test", "/x").await?.service(), "a");
    let closed = eventually(
        Duration::from_secs(20),
        "a FailedClosed Event on Ingress closed",
        || async {
            let list = events.list(&Default::default()).await.ok()?;
            list.items.into_iter().find(|e| {
                e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("closed")
                    && e.reason.as_deref() == Some("FailedClosed")
            })
        },
    )
    .await?;
    assert_eq!(closed.type_.as_deref(), Some("Warning"));
    let note = closed.note.as_deref().unwrap_or_default();
    assert!(
        note.contains("nginx.ingress.kubernetes.io/auth-") && note.contains("503"),
        "{note}"
    );
    assert_eq!(get(run.http, "closed.test", "/x").await?.status, 503);
    // The Secret arrives (Opaque, as `kubectl create secret generic htpasswd
    // --from-file=auth`, ingress-nginx docs "Basic Authentication"): the route asks for
    // credentials (401) instead of being closed.
    w.create(json!({
        "apiVersion": "v1", "kind": "Secret", "type": "Opaque",
        "metadata": {"name": "htpasswd"},
        "stringData": {"auth": "foo:$apr1$lZL6V/ci$eIMz/iKDkbtys/uU7LEK00\n"},
    }))
    .await?;
    until_routed(run.http, "closed.test", "/x", "", 401).await?;
    run.stop().await
}

/// This binary's API server has no Gateway API CRDs (only tests/gateway_api.rs installs
/// them, on its own control plane): `--gateway-api=auto`, the default, serves Ingress alone
/// and watches no Gateway API kind (which would fail to list and never sync).
/// Lines of this binary's log (info and up from sluice_controller) containing `needle`.
fn log_count(needle: &str) -> usize {
    use std::sync::{Arc, Mutex, OnceLock};
    struct Sink(Arc<Mutex<Vec<u8>>>);
    impl std::io::Write for Sink {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            let mut log = self.0.lock().unwrap_or_else(|e| e.into_inner());
            log.extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    static LOG: OnceLock<Arc<Mutex<Vec<u8>>>> = OnceLock::new();
    let log = LOG.get_or_init(|| {
        let log = Arc::new(Mutex::new(Vec::new()));
        let sink = log.clone();
        let _ = tracing_subscriber::fmt()
            .with_env_filter("sluice_controller=info")
            .with_ansi(false)
            .with_writer(move || Sink(sink.clone()))
            .try_init();
        log
    });
    let log = log.lock().unwrap_or_else(|e| e.into_inner());
    String::from_utf8_lossy(&log)
        .lines()
        .filter(|l| l.contains(needle))
        .count()
}

#[tokio::test]
async fn without_the_gateway_api_crds_ingress_is_served_alone() -> anyhow::Result<()> {
    let w = World::new("gwapi-auto").await?;
    w.service("a").await?;
    let _pod = w.pod("a", "a-0").await?;
    w.ingress(
        "site",
        json!({"rules": [{"host": "plain.test", "http": {"paths": [path("/", "a")]}}]}),
    )
    .await?;
    let logged = || log_count(sluice_controller::cluster::GATEWAY_API_NOT_SERVED);
    let before = logged();
    let run = w.start(&[]).await?;
    assert!(!run.gateway_api, "Gateway API watched without its CRDs");
    // Said at start (other tests of this binary may start controllers meanwhile: at least).
    assert!(logged() > before, "no info line saying so");
    until_routed(run.http, "plain.test", "/", "a", 200).await?;
    run.stop().await?;
    // `off` never asks.
    let run = w.start(&["--gateway-api", "off"]).await?;
    assert!(!run.gateway_api);
    until_routed(run.http, "plain.test", "/", "a", 200).await?;
    run.stop().await
}

/// Without the CRDs, `--gateway-api=on` refuses to start and says what is missing.
#[tokio::test]
async fn gateway_api_on_requires_the_crds() -> anyhow::Result<()> {
    let w = World::new("gwapi-on").await?;
    let error = match w.start(&["--gateway-api", "on"]).await {
        Ok(run) => {
            run.stop().await?;
            anyhow::bail!("started without the Gateway API CRDs");
        }
        Err(e) => format!("{e:#}"),
    };
    assert!(
        error.contains("--gateway-api=on") && error.contains("deploy/gateway-api"),
        "{error}"
    );
    Ok(())
}

/// #33: `sluice controller` with a kubeconfig naming a server that is not there stops at
/// once, naming that server and where its address came from, instead of blaming the first
/// request that happened to fail (Gateway API discovery).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_api_server_is_named() -> anyhow::Result<()> {
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let dir = tempfile::tempdir()?;
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1
kind: Config
clusters: [{{name: c, cluster: {{server: \"https://127.0.0.1:{port}\", insecure-skip-tls-verify: true}}}}]
users: [{{name: u, user: {{token: t}}}}]
contexts: [{{name: x, context: {{cluster: c, user: u}}}}]
current-context: x
"
        ),
    )?;
    let kubeconfig = kubeconfig.to_string_lossy().into_owned();
    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        args: sluice_controller::cluster::ControllerArgs,
    }
    let args = <Cli as clap::Parser>::try_parse_from([
        "controller",
        "--kubeconfig",
        kubeconfig.as_str(),
        "--http-addr",
        "127.0.0.1:0",
        "--https-addr",
        "127.0.0.1:0",
        "--admin-addr",
        "127.0.0.1:0",
    ])?
    .args;
    let error = sluice_controller::cluster::run(args, std::future::pending())
        .await
        .expect_err("no API server there")
        .to_string();
    assert!(
        error.starts_with(&format!(
            "cannot reach the API server at https://127.0.0.1:{port}/"
        )),
        "{error}"
    );
    assert!(
        error.contains(&format!("--kubeconfig {kubeconfig}")),
        "{error}"
    );
    assert!(!error.contains("gateway"), "{error}");
    Ok(())
}

/// ingress-nginx docs, "External Authentication" (`auth-proxy-set-headers`): the ConfigMap
/// an annotation names is read from the cluster, live. Before it exists the route is
/// closed (503, as ingress-nginx denies the location); once created, the auth check runs
/// (an echo server answering 200 stands for the auth service) and the request goes in.
#[tokio::test]
async fn annotation_config_maps_come_from_the_cluster() -> anyhow::Result<()> {
    let w = World::new("configmaps").await?;
    w.service("a").await?;
    let _pod = w.pod("a", "a-0").await?;
    let auth =
        sluice_echo::EchoServer::start("127.0.0.1:0", sluice_echo::Identity::new("auth", "auth-0"))
            .await?;
    let run = w.start(&[]).await?;
    let mut spec =
        json!({"rules": [{"host": "guarded.test", "http": {"paths": [path("/", "a")]}}]});
    spec["ingressClassName"] = json!(w.class);
    w.create(json!({
        "apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
        "metadata": {"name": "guarded", "annotations": {
            "nginx.ingress.kubernetes.io/auth-url": format!("http://{}/verify", auth.addr()),
            "nginx.ingress.kubernetes.io/auth-proxy-set-headers": "auth-headers",
        }},
        "spec": spec,
    }))
    .await?;
    until_routed(run.http, "guarded.test", "/", "", 503).await?;
    w.create(json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "auth-headers"},
        "data": {"X-Tenant": "acme"},
    }))
    .await?;
    until_routed(run.http, "guarded.test", "/", "a", 200).await?;
    run.stop().await?;
    auth.shutdown().await?;
    Ok(())
}

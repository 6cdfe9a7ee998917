//! End to end: `sluice controller` in-process under deploy/'s ServiceAccount and ClusterRole,
//! a real API server and controller manager, pods as network namespaces running the echo
//! backend, and real HTTP/HTTPS requests through the proxy.

mod support;
mod tls_support;

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::networking::v1::Ingress;
use kube::api::DeleteParams;
use serde_json::json;
use sluice_testenv::eventually;
use std::collections::BTreeSet;
use std::time::Duration;
use support::{World, get, until_routed};

fn backend(svc: &str) -> serde_json::Value {
    json!({"service": {"name": svc, "port": {"name": "http"}}})
}

fn path(p: &str, ty: &str, svc: &str) -> serde_json::Value {
    json!({"path": p, "pathType": ty, "backend": backend(svc)})
}

#[tokio::test]
async fn routes_hosts_paths_and_default_backend() -> anyhow::Result<()> {
    let w = World::new("routes").await?;
    let mut pods = Vec::new();
    for app in ["a", "b", "c", "d"] {
        w.service(app).await?;
        pods.push(w.pod(app, &format!("{app}-0")).await?);
    }
    w.ingress(
        "main",
        json!({"rules": [
            {"host": "exact.test", "http": {"paths": [
                path("/", "Prefix", "a"),
                path("/exact", "Exact", "b"),
                path("/exact", "Prefix", "d"),
                path("/pre/", "Prefix", "c"),
                path("/pre/deep", "ImplementationSpecific", "d"),
            ]}},
            {"host": "*.wild.test", "http": {"paths": [path("/", "Prefix", "b")]}},
        ]}),
    )
    .await?;
    w.ingress("fallback", json!({"defaultBackend": backend("c")}))
        .await?;
    let run = w.start(&[]).await?;
    let h = run.http;
    until_routed(h, "exact.test", "/", "a", 200).await?;
    until_routed(h, "unknown.test", "/", "c", 200).await?;

    let cases = [
        ("exact.test", "/", "a"),
        ("EXACT.test:80", "/x", "a"),
        ("exact.test", "/exact", "b"), // equal length: Exact beats Prefix
        ("exact.test", "/exact/", "d"), // Exact does not match a trailing slash; Prefix does
        ("exact.test", "/exact/more", "d"),
        ("exact.test", "/exactly", "a"),
        ("exact.test", "/pre", "c"), // the rule's trailing slash is ignored
        ("exact.test", "/pre/", "c"),
        ("exact.test", "/prefix", "a"), // element-wise: /pre does not cover /prefix
        ("exact.test", "/pre/deep", "d"),
        ("exact.test", "/pre/deep/er?q=1", "d"),
        // ImplementationSpecific is a string prefix (nginx `location /pre/deep`).
        ("exact.test", "/pre/deeper", "d"),
        ("x.wild.test", "/any", "b"),
        ("a.b.wild.test", "/", "c"), // a wildcard covers exactly one label: default backend
        ("wild.test", "/", "c"),
        ("unknown.test", "/", "c"),
    ];
    for (host, p, want) in cases {
        let r = get(h, host, p).await?;
        assert_eq!(
            (r.status, r.service().as_str()),
            (200, want),
            "{host}{p}: {}",
            r.body
        );
    }

    // No default backend: 404 from sluice itself.
    w.api::<Ingress>()
        .delete("fallback", &DeleteParams::default())
        .await?;
    until_routed(h, "unknown.test", "/", "", 404).await?;
    // The Service goes away: its routes answer 503.
    w.api::<Service>()
        .delete("a", &DeleteParams::default())
        .await?;
    until_routed(h, "exact.test", "/", "", 503).await?;
    assert_eq!(get(h, "exact.test", "/exact").await?.service(), "b");
    // The Ingress goes away: 404.
    w.api::<Ingress>()
        .delete("main", &DeleteParams::default())
        .await?;
    until_routed(h, "exact.test", "/exact", "", 404).await?;
    run.stop().await?;
    drop(pods);
    Ok(())
}

#[tokio::test]
async fn other_classes_are_neither_served_nor_given_status() -> anyhow::Result<()> {
    let w = World::new("class").await?;
    w.service("a").await?;
    let _pod = w.pod("a", "a-0").await?;
    w.create(json!({
        "apiVersion": "networking.k8s.io/v1", "kind": "IngressClass",
        "metadata": {"name": format!("other-{}", w.ns)},
        "spec": {"controller": "example.com/someone-else"},
    }))
    .await?;
    let rule = |host: &str| json!([{"host": host, "http": {"paths": [path("/", "Prefix", "a")]}}]);
    w.ingress("ours", json!({"rules": rule("ours.test")}))
        .await?;
    w.ingress(
        "theirs",
        json!({"ingressClassName": format!("other-{}", w.ns), "rules": rule("theirs.test")}),
    )
    .await?;
    // No class field; the legacy annotation names our class.
    w.create(json!({
        "apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
        "metadata": {"name": "legacy", "annotations": {"kubernetes.io/ingress.class": w.class}},
        "spec": {"rules": rule("legacy.test")},
    }))
    .await?;
    let ingresses = w.api::<Ingress>();
    let run = w.start(&["--publish-status-address", "192.0.2.10"]).await?;
    until_routed(run.http, "ours.test", "/", "a", 200).await?;
    until_routed(run.http, "legacy.test", "/", "a", 200).await?;
    assert_eq!(get(run.http, "theirs.test", "/").await?.status, 404);

    let status_of = |name: &'static str| {
        let api = ingresses.clone();
        async move {
            let ing = api.get(name).await.ok()?;
            Some(
                ing.status
                    .and_then(|s| s.load_balancer)
                    .and_then(|l| l.ingress)
                    .unwrap_or_default()
                    .into_iter()
                    .filter_map(|i| i.ip)
                    .collect::<Vec<_>>(),
            )
        }
    };
    eventually(Duration::from_secs(20), "status on ours", || async {
        (status_of("ours").await? == ["192.0.2.10"]).then_some(())
    })
    .await?;
    // Status writes go out one Ingress at a time: the second may trail the first.
    eventually(Duration::from_secs(20), "status on legacy", || async {
        (status_of("legacy").await? == ["192.0.2.10"]).then_some(())
    })
    .await?;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        status_of("theirs").await.unwrap_or_default().is_empty(),
        "status of another class untouched"
    );

    // A status write visits the objects that changed, not every Ingress: one whose status
    // someone else erased gets ours back, and so does one deleted and created again the
    // same (the list of our Ingresses is the same before and after).
    let erase = json!({"status": {"loadBalancer": {"ingress": null}}});
    ingresses
        .patch_status(
            "legacy",
            &Default::default(),
            &kube::api::Patch::Merge(&erase),
        )
        .await?;
    eventually(
        Duration::from_secs(20),
        "status put back on legacy",
        || async { (status_of("legacy").await? == ["192.0.2.10"]).then_some(()) },
    )
    .await?;
    let legacy = ingresses.get("legacy").await?;
    ingresses.delete("legacy", &Default::default()).await?;
    eventually(Duration::from_secs(20), "legacy gone", || async {
        ingresses
            .get_opt("legacy")
            .await
            .ok()?
            .is_none()
            .then_some(())
    })
    .await?;
    w.create(json!({
        "apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
        "metadata": {"name": "legacy", "annotations": legacy.metadata.annotations},
        "spec": legacy.spec,
    }))
    .await?;
    eventually(
        Duration::from_secs(20),
        "status on legacy created again",
        || async { (status_of("legacy").await? == ["192.0.2.10"]).then_some(()) },
    )
    .await?;

    // Ours moves to the other class: no longer served, status cleared.
    let move_away = json!({"spec": {"ingressClassName": format!("other-{}", w.ns)}});
    ingresses
        .patch(
            "ours",
            &Default::default(),
            &kube::api::Patch::Merge(&move_away),
        )
        .await?;
    until_routed(run.http, "ours.test", "/", "", 404).await?;
    eventually(Duration::from_secs(20), "status cleared", || async {
        status_of("ours").await?.is_empty().then_some(())
    })
    .await?;

    // Without class or annotation: ours only once our IngressClass is the default class.
    w.create(json!({
        "apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
        "metadata": {"name": "classless"},
        "spec": {"rules": rule("classless.test")},
    }))
    .await?;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(get(run.http, "classless.test", "/").await?.status, 404);
    let default = json!({"metadata": {"annotations": {"ingressclass.kubernetes.io/is-default-class": "true"}}});
    kube::Api::<k8s_openapi::api::networking::v1::IngressClass>::all(w.admin.clone())
        .patch(
            &w.class,
            &Default::default(),
            &kube::api::Patch::Merge(&default),
        )
        .await?;
    until_routed(run.http, "classless.test", "/", "a", 200).await?;
    run.stop().await
}

#[tokio::test]
async fn ingresses_merge_on_a_host_and_the_oldest_wins_a_conflict() -> anyhow::Result<()> {
    let w = World::new("merge").await?;
    let mut pods = Vec::new();
    for app in ["a", "b"] {
        w.service(app).await?;
        pods.push(w.pod(app, &format!("{app}-0")).await?);
    }
    let run = w.start(&[]).await?;
    w.ingress(
        "older",
        json!({"rules": [{"host": "m.test", "http": {"paths": [path("/a", "Prefix", "a")]}}]}),
    )
    .await?;
    // creationTimestamp has one-second resolution: make "newer" really newer.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    w.ingress(
        "newer",
        json!({"rules": [{"host": "m.test", "http": {"paths": [
            path("/b", "Prefix", "b"),
            path("/a", "Prefix", "b"),
        ]}}]}),
    )
    .await?;
    until_routed(run.http, "m.test", "/b", "b", 200).await?;
    assert_eq!(
        get(run.http, "m.test", "/a/x").await?.service(),
        "a",
        "the older Ingress keeps /a"
    );

    let events: kube::Api<k8s_openapi::api::events::v1::Event> = w.api();
    let ev = eventually(
        Duration::from_secs(20),
        "ConflictLost Event on newer",
        || async {
            let list = events.list(&Default::default()).await.ok()?;
            list.items.into_iter().find(|e| {
                e.reason.as_deref() == Some("ConflictLost")
                    && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("newer")
            })
        },
    )
    .await?;
    assert_eq!(ev.type_.as_deref(), Some("Warning"));
    let note = ev.note.unwrap_or_default();
    assert!(note.contains("older"), "the Event names the winner: {note}");
    // Emitted when the condition appears, not on every rebuild.
    w.service("unrelated").await?;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let count = events
        .list(&Default::default())
        .await?
        .items
        .iter()
        .filter(|e| e.reason.as_deref() == Some("ConflictLost"))
        .count();
    assert_eq!(count, 1);
    run.stop().await?;
    drop(pods);
    Ok(())
}

#[tokio::test]
async fn traffic_spreads_over_ten_pods_and_a_not_ready_pod_leaves_rotation() -> anyhow::Result<()> {
    let w = World::new("spread").await?;
    w.service("s").await?;
    let mut pods = Vec::new();
    for i in 0..10 {
        pods.push(w.pod("s", &format!("s-{i}")).await?);
    }
    w.ingress(
        "s",
        json!({"rules": [{"host": "s.test", "http": {"paths": [path("/", "Prefix", "s")]}}]}),
    )
    .await?;
    let run = w.start(&[]).await?;
    let all: BTreeSet<String> = pods.iter().map(|p| p.name().to_string()).collect();
    eventually(Duration::from_secs(30), "all ten pods answer", || async {
        let mut seen = BTreeSet::new();
        for _ in 0..200 {
            seen.insert(get(run.http, "s.test", "/").await.ok()?.pod());
        }
        (seen == all).then_some(())
    })
    .await?;

    pods[0].set_ready(false).await?;
    eventually(Duration::from_secs(20), "s-0 out of rotation", || async {
        for _ in 0..100 {
            let r = get(run.http, "s.test", "/").await.ok()?;
            if r.status != 200 || r.pod() == "s-0" {
                return None;
            }
        }
        Some(())
    })
    .await?;
    run.stop().await
}

#[tokio::test]
async fn restarted_controller_serves_existing_objects_at_once() -> anyhow::Result<()> {
    let w = World::new("restart").await?;
    w.service("a").await?;
    let _pod = w.pod("a", "a-0").await?;
    w.ingress(
        "r",
        json!({"rules": [{"host": "r.test", "http": {"paths": [path("/", "Prefix", "a")]}}]}),
    )
    .await?;
    // Wait for the endpoints to exist, then every start must route on its first request.
    let run = w.start(&[]).await?;
    until_routed(run.http, "r.test", "/", "a", 200).await?;
    run.stop().await?;
    for _ in 0..2 {
        let run = w.start(&[]).await?;
        let r = get(run.http, "r.test", "/").await?;
        assert_eq!((r.status, r.service().as_str()), (200, "a"), "{}", r.body);
        run.stop().await?;
    }
    Ok(())
}

#[tokio::test]
async fn graceful_stop_turns_unready_and_finishes_in_flight_requests() -> anyhow::Result<()> {
    // The proxy's debug log goes with the test's output: if the in-flight request ever
    // stalls, it shows which step (connect, pooled connection, response head) it stalled in.
    let _ = tracing_subscriber::fmt()
        .with_test_writer()
        .with_env_filter("sluice_proxy=trace")
        .try_init();
    let w = World::new("graceful").await?;
    w.service("a").await?;
    let _pod = w.pod("a", "a-0").await?;
    w.ingress(
        "g",
        json!({"rules": [{"host": "g.test", "http": {"paths": [path("/", "Prefix", "a")]}}]}),
    )
    .await?;
    let run = w.start(&["--shutdown-delay", "1s"]).await?;
    until_routed(run.http, "g.test", "/", "a", 200).await?;
    assert_eq!(get(run.admin, "admin", "/readyz").await?.status, 200);
    let http = run.http;
    let in_flight = tokio::spawn(async move { get(http, "g.test", "/delay/1500").await });
    tokio::time::sleep(Duration::from_millis(200)).await;
    let admin = run.admin;
    let stopping = tokio::spawn(run.stop());
    eventually(Duration::from_secs(5), "readyz unready", || async {
        (get(admin, "admin", "/readyz").await.ok()?.status == 503).then_some(())
    })
    .await?;
    let r = in_flight.await??;
    assert_eq!(
        (r.status, r.service().as_str()),
        (200, "a"),
        "in-flight request finished: {}",
        r.body
    );
    stopping.await??;
    assert!(
        tokio::net::TcpStream::connect(http).await.is_err(),
        "listener closed after stop"
    );
    Ok(())
}

#[tokio::test]
async fn tls_from_a_secret_verifies_against_the_hostname() -> anyhow::Result<()> {
    use base64::Engine;
    let w = World::new("tls").await?;
    w.service("a").await?;
    let _pod = w.pod("a", "a-0").await?;
    let (cert, key, ca) = tls_support::ca_and_leaf(&["secure.test"])?;
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    w.create(json!({
        "apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
        "metadata": {"name": "secure-tls"},
        "data": {"tls.crt": b64(&cert), "tls.key": b64(&key)},
    }))
    .await?;
    w.ingress(
        "secure",
        json!({
            "tls": [{"hosts": ["secure.test"], "secretName": "secure-tls"}],
            "rules": [{"host": "secure.test", "http": {"paths": [path("/", "Prefix", "a")]}}],
        }),
    )
    .await?;
    let run = w.start(&[]).await?;
    let https = run.https;
    let r = eventually(
        Duration::from_secs(20),
        "TLS route with a verified certificate",
        || async {
            tls_support::tls_get(https, &ca, "secure.test")
                .await
                .ok()
                .filter(|r| r.status == 200)
        },
    )
    .await?;
    assert_eq!(r.service(), "a", "{}", r.body);
    let json: serde_json::Value = serde_json::from_str(&r.body).unwrap_or_default();
    assert_eq!(json["headers"]["x-forwarded-proto"], "https", "{}", r.body);
    // Another name gets the generated default certificate, which our CA does not sign.
    assert!(
        tls_support::tls_get(https, &ca, "other.test")
            .await
            .is_err(),
        "unknown SNI must not get the Secret's certificate"
    );
    run.stop().await
}

#[tokio::test]
async fn a_rolling_restart_under_load_fails_no_get() -> anyhow::Result<()> {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    let w = World::new("rolling").await?;
    w.service("r").await?;
    let mut pods = Vec::new();
    for i in 0..3 {
        pods.push(w.pod("r", &format!("r-old-{i}")).await?);
    }
    w.ingress(
        "r",
        json!({"rules": [{"host": "r.test", "http": {"paths": [path("/", "Prefix", "r")]}}]}),
    )
    .await?;
    let run = w.start(&[]).await?;
    until_routed(run.http, "r.test", "/", "r", 200).await?;
    eventually(
        Duration::from_secs(20),
        "all three old pods in rotation",
        || async {
            let mut seen = BTreeSet::new();
            for _ in 0..60 {
                seen.insert(get(run.http, "r.test", "/").await.ok()?.pod());
            }
            (seen.len() == 3).then_some(())
        },
    )
    .await?;

    // Bounded load loop: until `done`, at most 60 s.
    let done = Arc::new(AtomicBool::new(false));
    let (ok, failed) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let mut load = Vec::new();
    for _ in 0..2 {
        let (done, ok, failed, http) = (done.clone(), ok.clone(), failed.clone(), run.http);
        load.push(tokio::spawn(async move {
            let deadline = std::time::Instant::now() + Duration::from_secs(60);
            while !done.load(Ordering::Relaxed) && std::time::Instant::now() < deadline {
                match get(http, "r.test", "/").await {
                    Ok(r) if r.status == 200 => ok.fetch_add(1, Ordering::Relaxed),
                    other => {
                        eprintln!("failed GET: {other:?}");
                        failed.fetch_add(1, Ordering::Relaxed)
                    }
                };
            }
        }));
    }
    // Replace each pod the harsh way: the process dies first (connections refused while the
    // endpoint is still listed), then the pod turns NotReady and goes; a new one comes up.
    for i in 0..3 {
        pods.push(w.pod("r", &format!("r-new-{i}")).await?);
        let mut old = pods.remove(0);
        old.kill_process();
        tokio::time::sleep(Duration::from_millis(500)).await;
        old.set_ready(false).await?;
        tokio::time::sleep(Duration::from_millis(500)).await;
        old.delete().await?;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    done.store(true, Ordering::Relaxed);
    for l in load {
        l.await?;
    }
    let (ok, failed) = (ok.load(Ordering::Relaxed), failed.load(Ordering::Relaxed));
    eprintln!("rolling restart: {ok} GETs ok, {failed} failed");
    assert_eq!(failed, 0);
    assert!(ok > 50, "the load loop ran: {ok}");
    let pods_now: BTreeSet<String> = (0..30)
        .map(|_| get(run.http, "r.test", "/"))
        .collect::<futures::future::JoinAll<_>>()
        .await
        .into_iter()
        .filter_map(|r| r.ok().map(|r| r.pod()))
        .collect();
    assert!(
        pods_now.iter().all(|p| p.starts_with("r-new-")),
        "{pods_now:?}"
    );
    run.stop().await
}

#[tokio::test]
async fn replicas_all_serve_and_the_lease_holder_alone_writes_status() -> anyhow::Result<()> {
    use k8s_openapi::api::coordination::v1::Lease;
    let w = World::new("leader").await?;
    w.service("a").await?;
    let _pod = w.pod("a", "a-0").await?;
    let rule = |host: &str| json!({"rules": [{"host": host, "http": {"paths": [path("/", "Prefix", "a")]}}]});
    w.ingress("first", rule("first.test")).await?;
    let leases: kube::Api<Lease> = w.api();
    let holder = |leases: kube::Api<Lease>| async move {
        leases
            .get_opt("sluice-leader")
            .await
            .ok()??
            .spec?
            .holder_identity
    };
    let status = |name: &'static str| {
        let api = w.api::<Ingress>();
        async move {
            let lb = api.get(name).await.ok()?.status?.load_balancer?.ingress?;
            lb.first()?.ip.clone()
        }
    };
    let publish = ["--publish-status-address", "192.0.2.20"];
    let r1 = w
        .start(&[&["--identity", "r1"][..], &publish].concat())
        .await?;
    eventually(Duration::from_secs(20), "r1 leads", || async {
        (holder(leases.clone()).await? == "r1").then_some(())
    })
    .await?;
    let r2 = w
        .start(&[&["--identity", "r2"][..], &publish].concat())
        .await?;
    for addr in [r1.http, r2.http] {
        until_routed(addr, "first.test", "/", "a", 200).await?;
    }
    eventually(Duration::from_secs(20), "status of first", || async {
        (status("first").await? == "192.0.2.20").then_some(())
    })
    .await?;
    assert_eq!(
        holder(leases.clone()).await.as_deref(),
        Some("r1"),
        "one leader at a time"
    );

    // The leader stops and releases the Lease: r2 takes over and writes status from then on.
    r1.stop().await?;
    eventually(Duration::from_secs(20), "r2 leads", || async {
        (holder(leases.clone()).await? == "r2").then_some(())
    })
    .await?;
    w.ingress("second", rule("second.test")).await?;
    until_routed(r2.http, "second.test", "/", "a", 200).await?;
    eventually(
        Duration::from_secs(20),
        "status of second, by r2",
        || async { (status("second").await? == "192.0.2.20").then_some(()) },
    )
    .await?;
    r2.stop().await
}

//! Route churn at a thousand changes (issue #31): Ingresses and HTTPRoutes are created,
//! updated and deleted at a fixed rate while a bounded load loop sends requests to one
//! stable Ingress and one stable HTTPRoute. No stable-route request may fail, and every
//! change must reach the data plane: a create or an update makes its new host answer from
//! the route's backend, a delete makes its last host answer the controller's 404 (ingress-nginx
//! "default backend" behaviour; Gateway API: a host no route claims is not served).
//!
//! Not timed: the propagation figures come from `bench/propagation.sh`. Bounded: 1,000
//! changes at 50 a second, each probed for at most 10 s; the load loop stops when the changes
//! are done or at a deadline.

mod support;

use k8s_openapi::api::networking::v1::Ingress;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use sluice_routing::gateway::HttpRoute;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};
use support::gateway_crds::install_crds;
use support::{World, get, until_routed};

const CHANGES: u64 = 1_000;
const CHANGES_PER_SEC: u64 = 50;
/// Route objects changed per kind; each one goes create -> update -> delete -> create ...
const SLOTS: u64 = 40;
/// How long one change may take to reach the data plane before the test fails.
const PROPAGATION_LIMIT: Duration = Duration::from_secs(10);

/// What one change does, the same for every slot in a round of `2 * SLOTS` changes.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Change {
    Create,
    Update,
    Delete,
}

/// The `i`th change: Ingresses on even `i`, HTTPRoutes on odd; slot and action by round.
fn plan(i: u64) -> (bool, u64, Change) {
    let ingress = i.is_multiple_of(2);
    let slot = (i / 2) % SLOTS;
    let change = match (i / (2 * SLOTS)) % 3 {
        0 => Change::Create,
        1 => Change::Update,
        _ => Change::Delete,
    };
    (ingress, slot, change)
}

fn ingress_rules(host: &str) -> Value {
    json!([{"host": host, "http": {"paths": [
        {"path": "/", "pathType": "Prefix", "backend": {"service": {"name": "b", "port": {"number": 80}}}}
    ]}}])
}

fn http_route_spec(gateway: &str, host: &str) -> Value {
    json!({"parentRefs": [{"name": gateway}], "hostnames": [host],
           "rules": [{"backendRefs": [{"name": "b", "port": 80}]}]})
}

/// Polls `host` until it answers as the change says (backend `b`, or 404 after a delete).
async fn reaches_data_plane(http: SocketAddr, host: String, change: Change) -> bool {
    let limit = Instant::now() + PROPAGATION_LIMIT;
    while Instant::now() < limit {
        if let Ok(r) = get(http, &host, "/").await {
            let followed = match change {
                Change::Delete => r.status == 404,
                Change::Create | Change::Update => r.status == 200 && r.service() == "b",
            };
            if followed {
                return true;
            }
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    eprintln!("{change:?} of {host} never reached the data plane");
    false
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thousand_route_changes_fail_no_stable_request() -> anyhow::Result<()> {
    let w = World::new("churn-routes").await?;
    install_crds(&w).await?;
    let gateway_class = format!("gc-{}", w.ns);
    let gateway_controller = format!("sluice.dev/gw-{}", w.ns);
    w.create(
        json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "GatewayClass",
        "metadata": {"name": gateway_class}, "spec": {"controllerName": gateway_controller}}),
    )
    .await?;
    w.create(
        json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
        "metadata": {"name": "edge"}, "spec": {"gatewayClassName": gateway_class,
        "listeners": [{"name": "http", "port": 80, "protocol": "HTTP"}]}}),
    )
    .await?;
    for app in ["a", "b"] {
        w.service(app).await?;
    }
    let _a0 = w.pod("a", "a-0").await?;
    let _b0 = w.pod("b", "b-0").await?;
    w.ingress(
        "stable",
        json!({"rules": [{"host": "stable-ingress.test", "http": {"paths": [
        {"path": "/", "pathType": "Prefix", "backend": {"service": {"name": "a", "port": {"number": 80}}}}
    ]}}]}),
    )
    .await?;
    w.create(json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
        "metadata": {"name": "stable"}, "spec": {"parentRefs": [{"name": "edge"}],
        "hostnames": ["stable-route.test"], "rules": [{"backendRefs": [{"name": "a", "port": 80}]}]}}))
        .await?;
    let run = w
        .start(&[
            "--gateway-controller-name",
            &gateway_controller,
            "--gateway-api",
            "on",
        ])
        .await?;
    until_routed(run.http, "stable-ingress.test", "/", "a", 200).await?;
    until_routed(run.http, "stable-route.test", "/", "a", 200).await?;

    // Bounded load on the two stable routes, alternately, until `done` or the deadline.
    let done = Arc::new(AtomicBool::new(false));
    let (ok, failed) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let deadline = Instant::now() + Duration::from_secs(CHANGES / CHANGES_PER_SEC + 60);
    let mut load = Vec::new();
    for host in ["stable-ingress.test", "stable-route.test"] {
        let (done, ok, failed, http) = (done.clone(), ok.clone(), failed.clone(), run.http);
        load.push(tokio::spawn(async move {
            while !done.load(Ordering::Relaxed) && Instant::now() < deadline {
                match get(http, host, "/").await {
                    Ok(r) if r.status == 200 && r.service() == "a" => {
                        ok.fetch_add(1, Ordering::Relaxed)
                    }
                    Ok(r) => {
                        eprintln!("stable route {host} failed: {} {}", r.status, r.body);
                        failed.fetch_add(1, Ordering::Relaxed)
                    }
                    Err(e) => {
                        eprintln!("stable route {host} failed: {e}");
                        failed.fetch_add(1, Ordering::Relaxed)
                    }
                };
            }
        }));
    }

    let ingresses = w.api::<Ingress>();
    let routes: Api<HttpRoute> = w.api();
    // The host each slot serves now, per kind (ingress, route); a change's host is unique.
    let mut hosts: [Vec<String>; 2] = [
        vec![String::new(); SLOTS as usize],
        vec![String::new(); SLOTS as usize],
    ];
    let mut counts = [0u64; 3];
    let mut probes = Vec::new();
    let mut tick = tokio::time::interval(Duration::from_millis(1000 / CHANGES_PER_SEC));
    for i in 0..CHANGES {
        tick.tick().await;
        let (is_ingress, slot, change) = plan(i);
        let name = format!("churn-{slot}");
        let new_host = format!("c{i}.test");
        let current = &mut hosts[usize::from(!is_ingress)][slot as usize];
        match (is_ingress, change) {
            (true, Change::Create) => {
                let ingress: Ingress = serde_json::from_value(json!({
                    "metadata": {"name": name},
                    "spec": {"ingressClassName": w.class, "rules": ingress_rules(&new_host)},
                }))?;
                ingresses.create(&PostParams::default(), &ingress).await?;
            }
            (true, Change::Update) => {
                let patch = json!({"spec": {"rules": ingress_rules(&new_host)}});
                ingresses
                    .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await?;
            }
            (false, Change::Create) => {
                let route: HttpRoute = serde_json::from_value(json!({
                    "apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
                    "metadata": {"name": name}, "spec": http_route_spec("edge", &new_host),
                }))?;
                routes.create(&PostParams::default(), &route).await?;
            }
            (false, Change::Update) => {
                let patch = json!({"spec": {"hostnames": [new_host]}});
                routes
                    .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await?;
            }
            (true, Change::Delete) => {
                ingresses.delete(&name, &DeleteParams::default()).await?;
            }
            (false, Change::Delete) => {
                routes.delete(&name, &DeleteParams::default()).await?;
            }
        }
        let probed_host = if change == Change::Delete {
            std::mem::take(current)
        } else {
            *current = new_host.clone();
            new_host
        };
        counts[change as usize] += 1;
        probes.push(tokio::spawn(reaches_data_plane(
            run.http,
            probed_host,
            change,
        )));
    }
    let mut lost = 0;
    for p in probes {
        if !p.await? {
            lost += 1;
        }
    }
    done.store(true, Ordering::Relaxed);
    for l in load {
        l.await?;
    }
    let (ok, failed) = (ok.load(Ordering::Relaxed), failed.load(Ordering::Relaxed));
    // Ingress changes alone, and HTTPRoute changes alone, are compiled in part (the hosts
    // they touch); a rebuild that takes in both kinds at once compiles everything.
    let metrics = get(run.admin, "admin", "/metrics").await?.body;
    let counter = |name: &str| {
        metrics
            .lines()
            .find_map(|l| l.strip_prefix(name)?.trim().parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    let (rebuilds, partial) = (
        counter("sluice_table_rebuilds_total "),
        counter("sluice_table_partial_rebuilds_total "),
    );
    eprintln!(
        "churn_routes: {CHANGES} changes ({} creates, {} updates, {} deletes), {lost} lost; \
         stable routes: {ok} requests ok, {failed} failed; {rebuilds} rebuilds, {partial} of \
         them partial",
        counts[0], counts[1], counts[2]
    );
    assert!(
        counts.iter().all(|&c| c > 0),
        "creates, updates and deletes all ran"
    );
    assert_eq!(lost, 0, "changes that never reached the data plane");
    assert_eq!(failed, 0, "requests to the stable routes failed");
    assert!(ok > 100, "the load loop ran");
    assert!(
        partial >= 100.0,
        "route changes were compiled in part ({partial} of {rebuilds} rebuilds)"
    );
    run.stop().await
}

//! Gateway API end to end: the standard-channel CRDs (`deploy/gateway-api`) installed on a
//! real API server, GatewayClass / Gateway / HTTPRoute / ReferenceGrant objects, pods as
//! network namespaces behind Services, the controller in-process under the ClusterRole of
//! `deploy/base`, and requests through its proxy. One test per GATEWAY-HTTP conformance
//! scenario group; the statuses are checked as the conformance suite reads them.
//!
//! Every test has its own namespace, GatewayClass and `--gateway-controller-name`, so the
//! tests share one control plane without seeing each other's objects.

mod support;
mod tls_support;

use std::time::Duration;

use kube::api::{Api, Patch, PatchParams};
use serde_json::{Value, json};
use sluice_routing::gateway::{Gateway, GatewayClass, HttpRoute, ReferenceGrant};
use support::gateway_crds::install_crds;
use support::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A world with the CRDs, its own GatewayClass (`gc-<ns>`, controller `sluice.dev/gw-<ns>`)
/// and the controller flag naming it.
struct GatewayWorld {
    world: World,
    class: String,
    controller: String,
}

impl GatewayWorld {
    async fn new(prefix: &str) -> anyhow::Result<GatewayWorld> {
        let world = World::new(prefix).await?;
        install_crds(&world).await?;
        let class = format!("gc-{}", world.ns);
        let controller = format!("sluice.dev/gw-{}", world.ns);
        world
            .create(
                json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "GatewayClass",
                "metadata": {"name": class}, "spec": {"controllerName": controller}}),
            )
            .await?;
        Ok(GatewayWorld {
            world,
            class,
            controller,
        })
    }

    async fn start(&self, extra: &[&str]) -> anyhow::Result<Running> {
        let mut args = vec![
            "--gateway-controller-name",
            self.controller.as_str(),
            "--gateway-api",
            "on",
        ];
        args.extend_from_slice(extra);
        self.world.start(&args).await
    }

    /// A Gateway `name` with these listeners.
    async fn gateway(&self, name: &str, listeners: Value) -> anyhow::Result<()> {
        self.world
            .create(
                json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
                "metadata": {"name": name},
                "spec": {"gatewayClassName": self.class, "listeners": listeners}}),
            )
            .await
    }

    async fn route(&self, name: &str, spec: Value) -> anyhow::Result<()> {
        self.world
            .create(
                json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
                "metadata": {"name": name}, "spec": spec}),
            )
            .await
    }

    /// A Service `name` with one ready pod running the echo backend.
    async fn backend(&self, name: &str) -> anyhow::Result<sluice_testenv::PodHost> {
        self.world.service(name).await?;
        self.world.pod(name, &format!("{name}-0")).await
    }

    async fn route_status(&self, name: &str) -> anyhow::Result<Value> {
        let api: Api<HttpRoute> = self.world.api();
        Ok(api
            .get(name)
            .await?
            .status
            .map_or(Value::Null, |s| s.value()))
    }

    /// Waits until the route's parent entry of ours has `type` with `status` and `reason`.
    async fn until_route_condition(
        &self,
        name: &str,
        type_: &str,
        status: &str,
        reason: &str,
    ) -> anyhow::Result<Value> {
        sluice_testenv::eventually(
            Duration::from_secs(20),
            &format!("HTTPRoute {name} {type_}={status} ({reason})"),
            || async {
                let s = self.route_status(name).await.ok()?;
                let ours = s["parents"]
                    .as_array()?
                    .iter()
                    .find(|p| p["controllerName"] == self.controller.as_str())?
                    .clone();
                let c = ours["conditions"]
                    .as_array()?
                    .iter()
                    .find(|c| c["type"] == type_)?
                    .clone();
                (c["status"] == status && c["reason"] == reason).then_some(ours)
            },
        )
        .await
    }
}

/// A response: status, head (lower-case names) and body.
struct Answer {
    status: u16,
    head: String,
    body: String,
}

impl Answer {
    fn header(&self, name: &str) -> Option<&str> {
        self.head.lines().find_map(|l| {
            let (n, v) = l.split_once(':')?;
            n.eq_ignore_ascii_case(name).then(|| v.trim())
        })
    }
    fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or(Value::Null)
    }
    fn service(&self) -> String {
        self.json()["service"].as_str().unwrap_or("").to_owned()
    }
}

/// `method target` with `Host: host` and `headers`, over a fresh connection.
async fn send(
    addr: std::net::SocketAddr,
    method: &str,
    host: &str,
    target: &str,
    headers: &[(&str, &str)],
) -> anyhow::Result<Answer> {
    let fut = async {
        let mut s = tokio::net::TcpStream::connect(addr).await?;
        let mut req = format!(
            "{method} {target} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\nContent-Length: 0\r\n"
        );
        for (n, v) in headers {
            req.push_str(&format!("{n}: {v}\r\n"));
        }
        req.push_str("\r\n");
        s.write_all(req.as_bytes()).await?;
        let mut buf = Vec::new();
        s.read_to_end(&mut buf).await?;
        let text = String::from_utf8_lossy(&buf).into_owned();
        let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
        let status = head
            .split_whitespace()
            .nth(1)
            .and_then(|c| c.parse().ok())
            .unwrap_or(0);
        let chunked = head
            .to_ascii_lowercase()
            .contains("transfer-encoding: chunked");
        let body = if chunked {
            dechunk(body)
        } else {
            body.to_owned()
        };
        anyhow::Ok(Answer {
            status,
            head: head.to_owned(),
            body,
        })
    };
    tokio::time::timeout(Duration::from_secs(10), fut).await?
}

/// Polls until `check` holds for the answer to `GET host target`.
async fn until(
    addr: std::net::SocketAddr,
    host: &str,
    target: &str,
    what: &str,
    check: impl Fn(&Answer) -> bool,
) -> anyhow::Result<()> {
    sluice_testenv::eventually(
        Duration::from_secs(20),
        &format!("{host}{target}: {what}"),
        || async {
            let a = send(addr, "GET", host, target, &[]).await.ok()?;
            check(&a).then_some(())
        },
    )
    .await
}

fn condition<'a>(conditions: &'a Value, type_: &str) -> &'a Value {
    conditions
        .as_array()
        .and_then(|l| l.iter().find(|c| c["type"] == type_))
        .unwrap_or(&Value::Null)
}

/// The four CRDs install as they are, and objects of each kind go in and come back through our
/// typed `Api`s, with the CRDs' defaults applied and their schema and CEL rules enforced.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crds_install_and_objects_round_trip_through_typed_apis() -> anyhow::Result<()> {
    let world = World::new("gw-crds").await?;
    install_crds(&world).await?;
    let pp = kube::api::PostParams::default();
    let class_name = format!("rt-{}", world.ns);

    let classes: Api<GatewayClass> = Api::all(world.admin.clone());
    let class: GatewayClass = serde_json::from_value(json!({
        "apiVersion": "gateway.networking.k8s.io/v1", "kind": "GatewayClass",
        "metadata": {"name": class_name},
        "spec": {"controllerName": "example.com/round-trip"}}))?;
    classes.create(&pp, &class).await?;
    let back = serde_json::to_value(classes.get(&class_name).await?)?;
    assert_eq!(back["spec"]["controllerName"], "example.com/round-trip");
    // The CRD's status default: Accepted=Unknown until a controller says otherwise.
    assert_eq!(
        back["status"]["conditions"][0]["reason"], "Pending",
        "{back}"
    );

    let gateways: Api<Gateway> = world.api();
    let gateway: Gateway = serde_json::from_value(json!({
        "apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
        "metadata": {"name": "edge"},
        "spec": {"gatewayClassName": class_name,
                 "listeners": [{"name": "http", "port": 80, "protocol": "HTTP"}]}}))?;
    gateways.create(&pp, &gateway).await?;
    let back = serde_json::to_value(gateways.get("edge").await?)?;
    assert_eq!(back["spec"]["listeners"][0]["port"], 80);
    assert_eq!(
        back["spec"]["listeners"][0]["allowedRoutes"]["namespaces"]["from"], "Same",
        "defaulted: {back}"
    );

    let routes: Api<HttpRoute> = world.api();
    let route: HttpRoute = serde_json::from_value(json!({
        "apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
        "metadata": {"name": "web"},
        "spec": {"parentRefs": [{"name": "edge"}], "hostnames": ["rt.example"],
                 "rules": [{"backendRefs": [{"group": "", "kind": "Service", "name": "web", "port": 80}]}]}}))?;
    routes.create(&pp, &route).await?;
    let back = serde_json::to_value(routes.get("web").await?)?;
    let rule = &back["spec"]["rules"][0];
    assert_eq!(rule["backendRefs"][0]["group"], "", "{back}");
    // Defaults for what the typed object leaves out (an empty `matches` it does send).
    assert_eq!(rule["backendRefs"][0]["weight"], 1, "defaulted: {back}");
    assert_eq!(back["spec"]["parentRefs"][0]["kind"], "Gateway");

    let grants: Api<ReferenceGrant> = world.api();
    let grant: ReferenceGrant = serde_json::from_value(json!({
        "apiVersion": "gateway.networking.k8s.io/v1beta1", "kind": "ReferenceGrant",
        "metadata": {"name": "let-in"},
        "spec": {"from": [{"group": "gateway.networking.k8s.io", "kind": "HTTPRoute", "namespace": "other"}],
                 "to": [{"group": "", "kind": "Service"}]}}))?;
    grants.create(&pp, &grant).await?;
    let back = serde_json::to_value(grants.get("let-in").await?)?;
    assert_eq!(
        back["spec"]["to"][0],
        json!({"group": "", "kind": "Service"})
    );

    // The OpenAPI schema: a hostname breaking the pattern.
    let bad: HttpRoute = serde_json::from_value(json!({
        "apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
        "metadata": {"name": "bad"},
        "spec": {"hostnames": ["Not_A_Host"]}}))?;
    let refused = routes.create(&pp, &bad).await;
    assert!(
        matches!(&refused, Err(kube::Error::Api(e)) if e.code == 422),
        "{refused:?}"
    );
    // A CEL rule of the Gateway CRD: listener names are unique.
    let twice: Gateway = serde_json::from_value(json!({
        "apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
        "metadata": {"name": "twice"},
        "spec": {"gatewayClassName": class_name,
                 "listeners": [{"name": "http", "port": 80, "protocol": "HTTP"},
                               {"name": "http", "port": 81, "protocol": "HTTP"}]}}))?;
    let refused = gateways.create(&pp, &twice).await;
    assert!(
        matches!(&refused, Err(kube::Error::Api(e))
            if e.code == 422 && e.message.contains("Listener name must be unique")),
        "{refused:?}"
    );
    classes
        .delete(&class_name, &kube::api::DeleteParams::default())
        .await?;
    Ok(())
}

/// Conformance: GatewayClassObservedGenerationBump, GatewayObservedGenerationBump,
/// GatewayWithAttachedRoutes, HTTPRouteSimpleSameNamespace,
/// HTTPRouteObservedGenerationBump; plus `status.addresses` and another controller's
/// `parents` entry left alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn statuses_and_traffic_for_a_simple_route() -> anyhow::Result<()> {
    let gw = GatewayWorld::new("gw-simple").await?;
    let _web = gw.backend("web").await?;
    gw.gateway(
        "edge",
        json!([{"name": "http", "port": 80, "protocol": "HTTP"}]),
    )
    .await?;
    gw.route(
        "web",
        json!({"parentRefs": [{"name": "edge"}], "hostnames": ["simple.example"],
        "rules": [{"backendRefs": [{"name": "web", "port": 80}]}]}),
    )
    .await?;
    // Another controller already reported on this route: its entry must survive.
    let theirs = json!({"parentRef": {"name": "elsewhere"}, "controllerName": "example.com/other",
        "conditions": [{"type": "Accepted", "status": "True", "reason": "Accepted", "message": "",
                        "lastTransitionTime": "2026-01-01T00:00:00Z", "observedGeneration": 1}]});
    let routes: Api<HttpRoute> = gw.world.api();
    routes
        .patch_status(
            "web",
            &PatchParams::default(),
            &Patch::Merge(&json!({"status": {"parents": [theirs.clone()]}})),
        )
        .await?;

    let running = gw
        .start(&["--publish-status-address", "192.0.2.10"])
        .await?;
    until(running.http, "simple.example", "/", "served by web", |a| {
        a.status == 200 && a.service() == "web"
    })
    .await?;
    let ours = gw
        .until_route_condition("web", "Accepted", "True", "Accepted")
        .await?;
    assert_eq!(
        condition(&ours["conditions"], "ResolvedRefs")["status"],
        "True"
    );
    assert_eq!(
        condition(&ours["conditions"], "Accepted")["observedGeneration"],
        1
    );
    assert_eq!(ours["parentRef"]["name"], "edge");
    let status = gw.route_status("web").await?;
    // Kept as it was (the API server filled in the parentRef's defaults).
    let kept = status["parents"]
        .as_array()
        .and_then(|p| {
            p.iter()
                .find(|p| p["controllerName"] == "example.com/other")
        })
        .cloned()
        .unwrap_or(Value::Null);
    assert_eq!(
        (&kept["parentRef"]["name"], &kept["conditions"]),
        (&theirs["parentRef"]["name"], &theirs["conditions"]),
        "{status}"
    );

    // GatewayClass and Gateway.
    let classes: Api<GatewayClass> = Api::all(gw.world.admin.clone());
    let gateways: Api<Gateway> = gw.world.api();
    let gateway = sluice_testenv::eventually(Duration::from_secs(20), "Gateway status", || async {
        let g = gateways.get("edge").await.ok()?;
        let s = g.status?;
        (condition(&s["conditions"], "Programmed")["status"] == "True"
            && s["listeners"][0]["attachedRoutes"] == 1)
            .then_some(s)
    })
    .await?;
    assert_eq!(
        condition(&gateway["conditions"], "Accepted")["status"],
        "True"
    );
    assert_eq!(
        gateway["addresses"],
        json!([{"type": "IPAddress", "value": "192.0.2.10"}])
    );
    assert_eq!(
        gateway["listeners"][0]["supportedKinds"],
        json!([{"group": "gateway.networking.k8s.io", "kind": "HTTPRoute"},
               {"group": "gateway.networking.k8s.io", "kind": "GRPCRoute"}])
    );
    let class = classes.get(&gw.class).await?;
    let accepted = condition(
        &class.status.as_ref().unwrap_or(&Value::Null)["conditions"],
        "Accepted",
    )
    .clone();
    assert_eq!(
        (
            accepted["status"].as_str(),
            accepted["observedGeneration"].as_i64()
        ),
        (Some("True"), class.metadata.generation)
    );

    // Written only when something changed: once settled, nothing is rewritten.
    let versions = || async {
        anyhow::Ok((
            routes.get("web").await?.metadata.resource_version,
            gateways.get("edge").await?.metadata.resource_version,
            classes.get(&gw.class).await?.metadata.resource_version,
        ))
    };
    let settled = versions().await?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        versions().await?,
        settled,
        "status rewritten without a change"
    );

    // A spec change bumps the generation; observedGeneration follows, traffic too.
    let _api = gw.backend("api").await?;
    routes
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(
                &json!({"spec": {"rules": [{"backendRefs": [{"name": "api", "port": 80}]}]}}),
            ),
        )
        .await?;
    until(running.http, "simple.example", "/", "served by api", |a| {
        a.service() == "api"
    })
    .await?;
    sluice_testenv::eventually(Duration::from_secs(20), "observedGeneration 2", || async {
        let s = gw.route_status("web").await.ok()?;
        let ours = s["parents"]
            .as_array()?
            .iter()
            .find(|p| p["controllerName"] == gw.controller.as_str())?
            .clone();
        (condition(&ours["conditions"], "Accepted")["observedGeneration"] == 2).then_some(())
    })
    .await?;

    // The route leaves our Gateway: our entry goes, the other controller's stays, and the
    // host name is no longer served.
    routes
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"parentRefs": [{"name": "elsewhere"}]}})),
        )
        .await?;
    let status =
        sluice_testenv::eventually(Duration::from_secs(20), "our entry removed", || async {
            let s = gw.route_status("web").await.ok()?;
            let parents = s["parents"].as_array()?;
            parents
                .iter()
                .all(|p| p["controllerName"] != gw.controller.as_str())
                .then(|| s.clone())
        })
        .await?;
    assert_eq!(
        status["parents"][0]["controllerName"], "example.com/other",
        "{status}"
    );
    until(
        running.http,
        "simple.example",
        "/",
        "no longer served",
        |a| a.status == 404,
    )
    .await?;
    running.stop().await
}

/// Conformance: HTTPRouteMatching, HTTPRouteMatchingAcrossRoutes, HTTPRouteHeaderMatching,
/// HTTPRouteQueryParamMatching, HTTPRouteMethodMatching, HTTPRouteHostnameIntersection,
/// HTTPRouteListenerHostnameMatching.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn matching_across_routes_and_host_names() -> anyhow::Result<()> {
    let gw = GatewayWorld::new("gw-match").await?;
    let _a = gw.backend("a").await?;
    let _b = gw.backend("b").await?;
    let _c = gw.backend("c").await?;
    gw.gateway(
        "edge",
        json!([
            {"name": "wild", "port": 80, "protocol": "HTTP", "hostname": "*.wildcard.example"},
            {"name": "exact", "port": 80, "protocol": "HTTP", "hostname": "exact.example"},
        ]),
    )
    .await?;
    gw.route("first", json!({"parentRefs": [{"name": "edge"}], "hostnames": ["foo.wildcard.example", "exact.example"],
        "rules": [
            {"matches": [{"path": {"type": "PathPrefix", "value": "/"}}], "backendRefs": [{"name": "a", "port": 80}]},
            {"matches": [{"path": {"type": "Exact", "value": "/exact"}}], "backendRefs": [{"name": "b", "port": 80}]},
        ]})).await?;
    gw.route("second", json!({"parentRefs": [{"name": "edge"}], "hostnames": ["foo.wildcard.example"],
        "rules": [
            {"matches": [{"path": {"value": "/"}, "headers": [{"name": "version", "value": "two"}]}], "backendRefs": [{"name": "b", "port": 80}]},
            {"matches": [{"path": {"value": "/"}, "queryParams": [{"name": "animal", "value": "whale"}]}], "backendRefs": [{"name": "c", "port": 80}]},
            {"matches": [{"path": {"value": "/"}, "method": "PATCH"}], "backendRefs": [{"name": "c", "port": 80}]},
        ]})).await?;
    gw.route(
        "nowhere",
        json!({"parentRefs": [{"name": "edge"}], "hostnames": ["other.example"],
        "rules": [{"backendRefs": [{"name": "a", "port": 80}]}]}),
    )
    .await?;
    let running = gw.start(&[]).await?;
    let http = running.http;
    until(http, "foo.wildcard.example", "/", "a", |a| {
        a.service() == "a"
    })
    .await?;
    let svc = |a: anyhow::Result<Answer>| {
        a.map(|a| format!("{} {}", a.status, a.service()))
            .unwrap_or_else(|e| e.to_string())
    };
    assert_eq!(
        svc(send(http, "GET", "foo.wildcard.example", "/exact", &[]).await),
        "200 b"
    );
    assert_eq!(
        svc(send(http, "GET", "exact.example", "/exact", &[]).await),
        "200 b"
    );
    assert_eq!(
        svc(send(
            http,
            "GET",
            "foo.wildcard.example",
            "/x",
            &[("version", "two")]
        )
        .await),
        "200 b"
    );
    assert_eq!(
        svc(send(http, "GET", "exact.example", "/x", &[("version", "two")]).await),
        "200 a",
        "second is not on exact.example"
    );
    assert_eq!(
        svc(send(http, "GET", "foo.wildcard.example", "/x?animal=whale", &[]).await),
        "200 c"
    );
    assert_eq!(
        svc(send(http, "PATCH", "foo.wildcard.example", "/x", &[]).await),
        "200 c"
    );
    assert_eq!(
        svc(send(http, "GET", "bar.wildcard.example", "/", &[]).await),
        "404 "
    );
    assert_eq!(
        svc(send(http, "GET", "other.example", "/", &[]).await),
        "404 "
    );
    gw.until_route_condition("nowhere", "Accepted", "False", "NoMatchingListenerHostname")
        .await?;
    gw.until_route_condition("second", "Accepted", "True", "Accepted")
        .await?;
    running.stop().await
}

/// Conformance: HTTPRouteInvalidCrossNamespaceBackendRef, HTTPRouteReferenceGrant,
/// HTTPRouteInvalidNonExistentBackendRef, HTTPRouteInvalidBackendRefUnknownKind,
/// HTTPRouteInvalidCrossNamespaceParentRef, HTTPRouteCrossNamespace (allowedRoutes All),
/// HTTPRouteWeight.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn references_grants_and_weights() -> anyhow::Result<()> {
    let gw = GatewayWorld::new("gw-refs").await?;
    let other = GatewayWorld::new("gw-refs-other").await?;
    let _web = gw.backend("web").await?;
    let _v2 = gw.backend("v2").await?;
    let _far = other.backend("far").await?;
    gw.gateway("edge", json!([
        {"name": "http", "port": 80, "protocol": "HTTP", "allowedRoutes": {"namespaces": {"from": "All"}}},
        {"name": "same", "port": 8080, "protocol": "HTTP", "hostname": "same.example"},
    ])).await?;
    let parent = json!([{"name": "edge", "namespace": gw.world.ns, "sectionName": "http"}]);
    gw.route(
        "missing",
        json!({"parentRefs": parent, "hostnames": ["missing.example"],
        "rules": [{"backendRefs": [{"name": "nope", "port": 80}]}]}),
    )
    .await?;
    gw.route("kind", json!({"parentRefs": parent, "hostnames": ["kind.example"],
        "rules": [{"backendRefs": [{"group": "unknown.example", "kind": "Thing", "name": "web", "port": 80}]}]})).await?;
    gw.route(
        "cross",
        json!({"parentRefs": parent, "hostnames": ["cross.example"],
        "rules": [{"backendRefs": [{"name": "far", "namespace": other.world.ns, "port": 80}]}]}),
    )
    .await?;
    gw.route("weights", json!({"parentRefs": parent, "hostnames": ["weights.example"],
        "rules": [{"backendRefs": [{"name": "web", "port": 80, "weight": 1}, {"name": "v2", "port": 80, "weight": 1}]}]})).await?;
    // A route in the other namespace: allowed by the `http` listener (All), not by `same`.
    other.route("visitor", json!({"parentRefs": [{"name": "edge", "namespace": gw.world.ns}], "hostnames": ["visitor.example"],
        "rules": [{"backendRefs": [{"name": "far", "port": 80}]}]})).await?;
    other.route("not-allowed", json!({"parentRefs": [{"name": "edge", "namespace": gw.world.ns, "sectionName": "same"}],
        "rules": [{"backendRefs": [{"name": "far", "port": 80}]}]})).await?;

    let running = gw.start(&["--all-namespaces"]).await?;
    let http = running.http;
    until(http, "weights.example", "/", "served", |a| a.status == 200).await?;
    assert_eq!(
        send(http, "GET", "missing.example", "/", &[]).await?.status,
        500
    );
    assert_eq!(
        send(http, "GET", "kind.example", "/", &[]).await?.status,
        500
    );
    assert_eq!(
        send(http, "GET", "cross.example", "/", &[]).await?.status,
        500
    );
    gw.until_route_condition("missing", "ResolvedRefs", "False", "BackendNotFound")
        .await?;
    gw.until_route_condition("kind", "ResolvedRefs", "False", "InvalidKind")
        .await?;
    gw.until_route_condition("cross", "ResolvedRefs", "False", "RefNotPermitted")
        .await?;
    gw.until_route_condition("cross", "Accepted", "True", "Accepted")
        .await?;
    if let Err(e) = until(http, "visitor.example", "/", "far", |a| {
        a.service() == "far"
    })
    .await
    {
        let s = other.route_status("visitor").await?;
        let a = send(http, "GET", "visitor.example", "/", &[]).await?;
        panic!("{e}: status {s}; answer {} {}", a.status, a.body);
    }
    sluice_testenv::eventually(Duration::from_secs(20), "not-allowed refused", || async {
        let s = other.route_status("not-allowed").await.ok()?;
        let p = s["parents"].as_array()?.first()?.clone();
        (condition(&p["conditions"], "Accepted")["reason"] == "NotAllowedByListeners").then_some(())
    })
    .await?;

    // Both weighted backends answer (1:1 over 60 requests: each well above 5).
    let mut seen = std::collections::BTreeMap::<String, u32>::new();
    for _ in 0..60 {
        *seen
            .entry(
                send(http, "GET", "weights.example", "/", &[])
                    .await?
                    .service(),
            )
            .or_default() += 1;
    }
    assert!(
        seen.get("web").is_some_and(|n| *n >= 5) && seen.get("v2").is_some_and(|n| *n >= 5),
        "{seen:?}"
    );

    // A ReferenceGrant in the other namespace lets the route reach `far`.
    other.world.create(json!({"apiVersion": "gateway.networking.k8s.io/v1beta1", "kind": "ReferenceGrant",
        "metadata": {"name": "let-in"},
        "spec": {"from": [{"group": "gateway.networking.k8s.io", "kind": "HTTPRoute", "namespace": gw.world.ns}],
                 "to": [{"group": "", "kind": "Service"}]}})).await?;
    until(http, "cross.example", "/", "far after the grant", |a| {
        a.service() == "far"
    })
    .await?;
    gw.until_route_condition("cross", "ResolvedRefs", "True", "ResolvedRefs")
        .await?;
    running.stop().await
}

/// Conformance: HTTPRouteRedirectHostAndStatus, HTTPRouteRedirectScheme,
/// HTTPRouteRedirectPath, HTTPRouteRedirectPort, HTTPRouteRewriteHost,
/// HTTPRouteRewritePath, HTTPRouteRequestHeaderModifier, HTTPRouteResponseHeaderModifier.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn filters_redirect_rewrite_and_modify_headers() -> anyhow::Result<()> {
    let gw = GatewayWorld::new("gw-filters").await?;
    let _web = gw.backend("web").await?;
    gw.gateway(
        "edge",
        json!([{"name": "http", "port": 80, "protocol": "HTTP", "hostname": "filters.example"}]),
    )
    .await?;
    gw.route("filters", json!({"parentRefs": [{"name": "edge"}], "rules": [
        {"matches": [{"path": {"value": "/moved"}}],
         "filters": [{"type": "RequestRedirect", "requestRedirect": {"hostname": "new.example", "statusCode": 301,
            "path": {"type": "ReplacePrefixMatch", "replacePrefixMatch": "/here"}}}]},
        {"matches": [{"path": {"value": "/secure"}}],
         "filters": [{"type": "RequestRedirect", "requestRedirect": {"scheme": "https"}}]},
        {"matches": [{"path": {"value": "/port"}}],
         "filters": [{"type": "RequestRedirect", "requestRedirect": {"port": 8443}}]},
        {"matches": [{"path": {"value": "/prefix/one"}}],
         "filters": [{"type": "URLRewrite", "urlRewrite": {"hostname": "rewritten.example",
            "path": {"type": "ReplacePrefixMatch", "replacePrefixMatch": "/one"}}}],
         "backendRefs": [{"name": "web", "port": 80}]},
        {"matches": [{"path": {"value": "/headers"}}],
         "filters": [
            {"type": "RequestHeaderModifier", "requestHeaderModifier": {"set": [{"name": "X-Header-Set", "value": "set"}],
                "add": [{"name": "X-Header-Add", "value": "add"}], "remove": ["X-Header-Remove"]}},
            {"type": "ResponseHeaderModifier", "responseHeaderModifier": {"add": [{"name": "X-Response", "value": "yes"}]}}],
         "backendRefs": [{"name": "web", "port": 80}]},
    ]})).await?;
    let running = gw.start(&[]).await?;
    let http = running.http;
    // Served once the backend's endpoint is ready (redirects need none).
    until(http, "filters.example", "/headers", "web ready", |a| {
        a.status == 200
    })
    .await?;
    let moved = send(http, "GET", "filters.example", "/moved/a?x=1", &[]).await?;
    assert_eq!(
        moved.header("location"),
        Some("http://new.example/here/a?x=1")
    );
    let secure = send(http, "GET", "filters.example", "/secure", &[]).await?;
    assert_eq!(
        (secure.status, secure.header("location")),
        (302, Some("https://filters.example/secure"))
    );
    let port = send(http, "GET", "filters.example", "/port", &[]).await?;
    assert_eq!(
        port.header("location"),
        Some("http://filters.example:8443/port")
    );
    let rewritten = send(http, "GET", "filters.example", "/prefix/one/two?q=1", &[]).await?;
    assert_eq!(
        rewritten.status, 200,
        "{} {}",
        rewritten.head, rewritten.body
    );
    let echo = rewritten.json();
    assert_eq!(
        (echo["path"].as_str(), echo["headers"]["host"].as_str()),
        (Some("/one/two"), Some("rewritten.example")),
        "{echo}"
    );
    let headers = send(
        http,
        "GET",
        "filters.example",
        "/headers",
        &[("X-Header-Remove", "gone"), ("X-Header-Add", "client")],
    )
    .await?;
    let echo = headers.json();
    assert_eq!(echo["headers"]["x-header-set"], "set", "{echo}");
    assert_eq!(echo["headers"]["x-header-add"], "client, add", "{echo}");
    assert!(echo["headers"].get("x-header-remove").is_none(), "{echo}");
    assert_eq!(headers.header("x-response"), Some("yes"));
    running.stop().await
}

/// Conformance: HTTPRouteHTTPSListener, GatewaySecretReferenceGrantSpecific,
/// GatewayInvalidTLSConfiguration: an HTTPS listener terminates TLS with the Secret its
/// `certificateRefs` name; a Secret in another namespace needs a ReferenceGrant.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_listener_terminates_tls_with_its_certificate_ref() -> anyhow::Result<()> {
    use base64::Engine;
    let gw = GatewayWorld::new("gw-tls").await?;
    let secrets = GatewayWorld::new("gw-tls-secrets").await?;
    let _web = gw.backend("web").await?;
    let (cert, key, ca) = tls_support::ca_and_leaf(&["secure.example", "far.example"])?;
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    let secret = |name: &str| {
        json!({"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
            "metadata": {"name": name}, "data": {"tls.crt": b64(&cert), "tls.key": b64(&key)}})
    };
    gw.world.create(secret("cert")).await?;
    secrets.world.create(secret("shared")).await?;
    gw.gateway(
        "edge",
        json!([
            {"name": "https", "port": 443, "protocol": "HTTPS", "hostname": "secure.example",
             "tls": {"certificateRefs": [{"name": "cert"}]}},
            {"name": "far", "port": 443, "protocol": "HTTPS", "hostname": "far.example",
             "tls": {"certificateRefs": [{"name": "shared", "namespace": secrets.world.ns}]}},
        ]),
    )
    .await?;
    gw.route(
        "secure",
        json!({"parentRefs": [{"name": "edge"}],
        "rules": [{"backendRefs": [{"name": "web", "port": 80}]}]}),
    )
    .await?;
    let running = gw.start(&["--all-namespaces"]).await?;
    tls_support::until_tls(running.https, &ca, "secure.example", "web", 200).await?;
    // Only the HTTPS listener has the route: plain HTTP gets 404.
    assert_eq!(
        send(running.http, "GET", "secure.example", "/", &[])
            .await?
            .status,
        404
    );

    let gateways: Api<Gateway> = gw.world.api();
    let listener = |status: &Value, name: &str| {
        status["listeners"]
            .as_array()
            .and_then(|l| l.iter().find(|l| l["name"] == name))
            .cloned()
            .unwrap_or(Value::Null)
    };
    sluice_testenv::eventually(
        Duration::from_secs(20),
        "far listener RefNotPermitted",
        || async {
            let s = gateways.get("edge").await.ok()?.status?;
            let far = listener(&s, "far");
            (condition(&far["conditions"], "ResolvedRefs")["reason"] == "RefNotPermitted"
                && condition(&listener(&s, "https")["conditions"], "Programmed")["status"]
                    == "True")
                .then_some(())
        },
    )
    .await?;
    secrets.world.create(json!({"apiVersion": "gateway.networking.k8s.io/v1beta1", "kind": "ReferenceGrant",
        "metadata": {"name": "certs"},
        "spec": {"from": [{"group": "gateway.networking.k8s.io", "kind": "Gateway", "namespace": gw.world.ns}],
                 "to": [{"group": "", "kind": "Secret", "name": "shared"}]}})).await?;
    tls_support::until_tls(running.https, &ca, "far.example", "web", 200).await?;
    sluice_testenv::eventually(Duration::from_secs(20), "far listener resolved", || async {
        let s = gateways.get("edge").await.ok()?.status?;
        (condition(&listener(&s, "far")["conditions"], "ResolvedRefs")["status"] == "True")
            .then_some(())
    })
    .await?;
    running.stop().await
}

/// A status write computed from a stale cache conflicts (409); the writer reads the route
/// again and redoes it from there, so another controller's entry written meanwhile stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_conflicting_status_write_is_redone_from_the_current_object() -> anyhow::Result<()> {
    use sluice_controller::cluster::gateway_status::GatewayStatusWriter;
    use sluice_controller::cluster::status_scope::Scope;
    use sluice_controller::sources::IngressInformers;
    use sluice_routing::ObjectRef;
    use sluice_routing::gateway::{
        Condition, GatewayStatuses, ParentReference, RouteParentStatus, RouteStatus,
    };

    let gw = GatewayWorld::new("gw-conflict").await?;
    gw.route(
        "web",
        json!({"parentRefs": [{"name": "edge"}],
               "rules": [{"backendRefs": [{"name": "web", "port": 80}]}]}),
    )
    .await?;
    let factory = sluice_informer::SharedInformerFactory::new(gw.world.admin.clone());
    let informers = IngressInformers::from_cluster(
        &factory,
        Some(&gw.world.ns),
        Some(sluice_controller::cluster::optional_gateway_kinds(&gw.world.admin).await),
    );
    informers.start();
    anyhow::ensure!(
        informers.wait_for_sync(Duration::from_secs(30)).await,
        "not synced: {:?}",
        informers.unsynced()
    );
    let Some(cache) = informers.gateway().cloned() else {
        anyhow::bail!("no Gateway API informers");
    };
    // Stopped, the cache keeps the route as it is now: stale after the next write.
    informers.shutdown().await;
    let theirs = json!({"parentRef": {"name": "elsewhere"}, "controllerName": "example.com/other",
        "conditions": [{"type": "Accepted", "status": "True", "reason": "Accepted", "message": "",
                        "lastTransitionTime": "2026-01-01T00:00:00Z", "observedGeneration": 1}]});
    let routes: Api<HttpRoute> = gw.world.api();
    routes
        .patch_status(
            "web",
            &PatchParams::default(),
            &Patch::Merge(&json!({"status": {"parents": [theirs]}})),
        )
        .await?;

    let writer = GatewayStatusWriter::new(gw.world.admin.clone(), gw.controller.clone(), cache);
    let statuses = GatewayStatuses {
        routes: sluice_persistent::SortedChunks::from_sorted(vec![std::sync::Arc::new(
            RouteStatus {
                object: ObjectRef {
                    kind: "HTTPRoute",
                    namespace: gw.world.ns.clone(),
                    name: "web".into(),
                },
                generation: Some(1),
                parents: vec![RouteParentStatus {
                    parent_ref: ParentReference {
                        name: "edge".into(),
                        ..ParentReference::default()
                    },
                    conditions: vec![Condition::yes("Accepted", "Accepted", "attached")],
                }],
            },
        )]),
        ..GatewayStatuses::default()
    };
    assert_eq!(
        writer.sync(&statuses, &[], Scope::Everything).await?,
        1,
        "written once"
    );
    let status = gw.route_status("web").await?;
    let controllers: Vec<&str> = status["parents"]
        .as_array()
        .map(|p| {
            p.iter()
                .filter_map(|p| p["controllerName"].as_str())
                .collect()
        })
        .unwrap_or_default();
    assert_eq!(
        controllers,
        ["example.com/other", gw.controller.as_str()],
        "{status}"
    );
    Ok(())
}

/// A status-only write compiles nothing (issue 31: every status write came back as a
/// whole-table rebuild, two per route change): another controller replacing the route's
/// `status.parents` wakes the status writer alone, which puts our entry back beside theirs,
/// and `sluice_table_rebuilds_total` stays where it was. Gateway API: a controller keeps the
/// other controllers' entries and maintains its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_status_only_write_rebuilds_nothing_and_our_entry_comes_back() -> anyhow::Result<()> {
    let gw = GatewayWorld::new("gw-status-only").await?;
    let _web = gw.backend("web").await?;
    gw.gateway(
        "edge",
        json!([{"name": "http", "port": 80, "protocol": "HTTP"}]),
    )
    .await?;
    gw.route(
        "web",
        json!({"parentRefs": [{"name": "edge"}], "hostnames": ["quiet.example"],
        "rules": [{"backendRefs": [{"name": "web", "port": 80}]}]}),
    )
    .await?;
    let running = gw.start(&[]).await?;
    until(running.http, "quiet.example", "/", "served by web", |a| {
        a.status == 200 && a.service() == "web"
    })
    .await?;
    gw.until_route_condition("web", "Accepted", "True", "Accepted")
        .await?;
    let admin = running.admin;
    let rebuilds = || async move {
        let answer = send(admin, "GET", "localhost", "/metrics", &[])
            .await
            .ok()?;
        answer
            .body
            .lines()
            .find_map(|l| l.strip_prefix("sluice_table_rebuilds_total "))
            .and_then(|v| v.trim().parse::<f64>().ok())
    };
    // Settled: the count holds still for three seconds (the status writes of the start,
    // and the EndpointSlice updates of the backend's pod, are over).
    let settled =
        sluice_testenv::eventually(Duration::from_secs(40), "table rebuilds settle", || async {
            let before = rebuilds().await?;
            tokio::time::sleep(Duration::from_secs(3)).await;
            (rebuilds().await? == before).then_some(before)
        })
        .await?;

    let theirs = json!({"parentRef": {"name": "elsewhere"}, "controllerName": "example.com/other",
        "conditions": [{"type": "Accepted", "status": "True", "reason": "Accepted", "message": "",
                        "lastTransitionTime": "2026-01-01T00:00:00Z", "observedGeneration": 1}]});
    let routes: Api<HttpRoute> = gw.world.api();
    routes
        .patch_status(
            "web",
            &PatchParams::default(),
            &Patch::Merge(&json!({"status": {"parents": [theirs]}})),
        )
        .await?;
    let controllers = sluice_testenv::eventually(
        Duration::from_secs(20),
        "our parent entry written back",
        || async {
            let status = gw.route_status("web").await.ok()?;
            let controllers: Vec<String> = status["parents"]
                .as_array()?
                .iter()
                .filter_map(|p| p["controllerName"].as_str().map(String::from))
                .collect();
            controllers.contains(&gw.controller).then_some(controllers)
        },
    )
    .await?;
    assert!(
        controllers.iter().any(|c| c == "example.com/other"),
        "{controllers:?}"
    );
    // Our own write has come back through the watch by now, as theirs did.
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(
        rebuilds().await,
        Some(settled),
        "a status-only write compiled the table"
    );
    // A spec change still compiles, and is served.
    routes
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"hostnames": ["quiet.example", "loud.example"]}})),
        )
        .await?;
    until(running.http, "loud.example", "/", "served by web", |a| {
        a.status == 200 && a.service() == "web"
    })
    .await?;
    assert!(rebuilds().await > Some(settled));
    running.stop().await
}

/// Only the Lease holder writes Gateway API status. Two replicas publish different
/// addresses, so `status.addresses` says who wrote: the leader's address, and it stays
/// (the other replica never overwrites it); after the leader stops, the other takes over
/// and its address replaces it. `sluice_leader` says which replica leads (#33;
/// ingress-nginx: `nginx_ingress_controller_leader_election_status`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_leader_writes_gateway_status() -> anyhow::Result<()> {
    use k8s_openapi::api::coordination::v1::Lease;
    let gw = GatewayWorld::new("gw-leader").await?;
    gw.gateway(
        "edge",
        json!([{"name": "http", "port": 80, "protocol": "HTTP"}]),
    )
    .await?;
    let leases: Api<Lease> = gw.world.api();
    let gateways: Api<Gateway> = gw.world.api();
    let holder = || async {
        leases
            .get_opt("sluice-leader")
            .await
            .ok()??
            .spec?
            .holder_identity
    };
    let published = || async {
        let status = gateways.get("edge").await.ok()?.status?;
        status["addresses"][0]["value"].as_str().map(String::from)
    };
    let r1 = gw
        .start(&["--identity", "r1", "--publish-status-address", "192.0.2.1"])
        .await?;
    sluice_testenv::eventually(Duration::from_secs(20), "r1 leads and writes", || async {
        (holder().await? == "r1" && published().await? == "192.0.2.1").then_some(())
    })
    .await?;
    let r2 = gw
        .start(&["--identity", "r2", "--publish-status-address", "192.0.2.2"])
        .await?;
    // r2 has synced and compiled its first table before `start` returned (it answers),
    // yet the status stays r1's.
    assert_eq!(
        send(r2.http, "GET", "any.example", "/", &[]).await?.status,
        404
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        published().await.as_deref(),
        Some("192.0.2.1"),
        "a non-leader wrote status"
    );
    assert_eq!(holder().await.as_deref(), Some("r1"));
    let leader_metric = |admin| async move {
        let answer = send(admin, "GET", "localhost", "/metrics", &[])
            .await
            .ok()?;
        answer
            .body
            .lines()
            .find_map(|l| l.strip_prefix("sluice_leader "))
            .map(str::to_owned)
    };
    assert_eq!(leader_metric(r1.admin).await.as_deref(), Some("1"));
    assert_eq!(leader_metric(r2.admin).await.as_deref(), Some("0"));

    r1.stop().await?;
    sluice_testenv::eventually(Duration::from_secs(20), "r2 leads and writes", || async {
        (holder().await? == "r2" && published().await? == "192.0.2.2").then_some(())
    })
    .await?;
    sluice_testenv::eventually(Duration::from_secs(10), "r2 reports leading", || async {
        (leader_metric(r2.admin).await? == "1").then_some(())
    })
    .await?;
    r2.stop().await
}

/// #28 and Gateway API conformance (GatewayWithAttachedRoutes, HTTPRouteHostnameIntersection
/// and the other tests that give several Gateways port-80 listeners): with
/// `--gateway-address-pool`, each Gateway gets an address of its own, `status.addresses`
/// names it, and its listeners are bound there, so two Gateways on port 80 with the same host
/// name each answer only their own routes. A requested address this host does not have
/// gives `Programmed=False` (`AddressNotUsable`) naming the socket; deleting the Gateway
/// closes its sockets.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_gateway_answers_on_its_own_address_only() -> anyhow::Result<()> {
    let gw = GatewayWorld::new("gw-addr").await?;
    let _web = gw.backend("web").await?;
    let _api = gw.backend("api").await?;
    // A pool no other test uses (all of 127/8 is loopback).
    let pool = "127.81.0.0/29";
    let port80 = json!([{"name": "http", "port": 80, "protocol": "HTTP"}]);
    gw.gateway("one", port80.clone()).await?;
    gw.gateway("two", port80.clone()).await?;
    gw.world
        .create(
            json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
            "metadata": {"name": "elsewhere"},
            "spec": {"gatewayClassName": gw.class, "listeners": port80,
                     "addresses": [{"type": "IPAddress", "value": "192.0.2.77"}]}}),
        )
        .await?;
    for (route, gateway, service) in [("to-web", "one", "web"), ("to-api", "two", "api")] {
        gw.route(
            route,
            json!({"parentRefs": [{"name": gateway}], "hostnames": ["same.example"],
            "rules": [{"backendRefs": [{"name": service, "port": 80}]}]}),
        )
        .await?;
    }
    let running = gw
        .start(&[
            "--gateway-address-pool",
            pool,
            "--publish-status-address",
            "192.0.2.10",
        ])
        .await?;

    let gateways: Api<Gateway> = gw.world.api();
    let programmed = |name: &'static str, want: &'static str| {
        let gateways = gateways.clone();
        async move {
            sluice_testenv::eventually(
                Duration::from_secs(20),
                &format!("Gateway {name} Programmed={want}"),
                || async {
                    let s = gateways.get(name).await.ok()?.status?;
                    (condition(&s["conditions"], "Programmed")["status"] == want).then_some(s)
                },
            )
            .await
        }
    };
    let mut addresses = Vec::new();
    for name in ["one", "two"] {
        let s = programmed(name, "True").await?;
        let list = s["addresses"].as_array().cloned().unwrap_or_default();
        assert_eq!(list.len(), 1, "{name}: {s}");
        assert_eq!(list[0]["type"], "IPAddress");
        let ip: std::net::IpAddr = list[0]["value"].as_str().unwrap_or("").parse()?;
        assert!(
            pool.parse::<sluice_routing::gateway::AddressPool>()
                .map_err(anyhow::Error::msg)?
                .contains(ip),
            "{name}: {ip} is not from {pool}"
        );
        addresses.push(std::net::SocketAddr::new(ip, 80));
    }
    assert_ne!(addresses[0], addresses[1]);
    until(addresses[0], "same.example", "/", "Gateway one: web", |a| {
        a.status == 200 && a.service() == "web"
    })
    .await?;
    until(addresses[1], "same.example", "/", "Gateway two: api", |a| {
        a.status == 200 && a.service() == "api"
    })
    .await?;
    for _ in 0..20 {
        assert_eq!(
            send(addresses[0], "GET", "same.example", "/", &[])
                .await?
                .service(),
            "web"
        );
        assert_eq!(
            send(addresses[1], "GET", "same.example", "/", &[])
                .await?
                .service(),
            "api"
        );
    }
    // Neither Gateway answers on the proxy's shared listener.
    assert_eq!(
        send(running.http, "GET", "same.example", "/", &[])
            .await?
            .status,
        404
    );

    let s = programmed("elsewhere", "False").await?;
    let c = condition(&s["conditions"], "Programmed");
    assert_eq!(c["reason"], "AddressNotUsable", "{s}");
    assert!(
        c["message"]
            .as_str()
            .unwrap_or("")
            .contains("192.0.2.77:80"),
        "{s}"
    );
    assert_eq!(
        condition(&s["listeners"][0]["conditions"], "Programmed")["reason"],
        "AddressNotUsable"
    );

    // Deleted: its socket closes (connections are refused).
    gateways
        .delete("two", &kube::api::DeleteParams::default())
        .await?;
    sluice_testenv::eventually(
        Duration::from_secs(20),
        "Gateway two's socket closed",
        || async {
            tokio::net::TcpStream::connect(addresses[1])
                .await
                .is_err()
                .then_some(())
        },
    )
    .await?;
    assert_eq!(
        send(addresses[0], "GET", "same.example", "/", &[])
            .await?
            .service(),
        "web"
    );
    running.stop().await
}

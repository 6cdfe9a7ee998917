//! Gateway API status: what the compiler concluded ([`GatewayStatuses`]) written to
//! GatewayClass, Gateway and HTTPRoute `status`, by the leader only and only when it
//! differs from what the cache holds.
//!
//! Conditions carry `observedGeneration` (the generation compiled) and keep their
//! `lastTransitionTime` while type, status and reason stay the same. An HTTPRoute's
//! `status.parents` is shared with other controllers: only entries whose `controllerName`
//! is ours are replaced, the others are written back as they were, and ours are removed
//! from routes that no longer name a Gateway of ours. Writes carry the `resourceVersion`
//! they were computed from, so a concurrent change makes the write fail (409); the object
//! is then read again and its status recomputed from it.

use futures::StreamExt;
use kube::api::{Api, Patch, PatchParams};
use serde_json::{Value, json};
use sluice_informer::SharedIndexInformer;
use sluice_persistent::SortedChunks;
use sluice_routing::gateway::{
    BackendTlsPolicy, Condition, Gateway, GatewayClass, GatewayStatus, GatewayStatuses, GrpcRoute,
    HttpRoute, ListenerSet, ListenerSetStatus, ListenerStatus, ObjectStatus, RouteStatus,
    StatusJson, TcpRoute, TlsRoute, UdpRoute,
};

use super::status_scope::{Scope, changed_in_chunks};
use crate::sources::GatewayInformers;
use sluice_routing::ObjectRef;
use std::borrow::Cow;
use std::sync::Arc;

/// Longest condition message written (the API allows 32768; long ones help nobody).
const MAX_MESSAGE: usize = 1024;

/// Conditions as the API writes them, keeping `lastTransitionTime` of an unchanged one
/// from `old` (the object's current `conditions` array). Pure, for testing.
pub fn conditions_json(
    new: &[Condition],
    generation: Option<i64>,
    old: Option<&Value>,
    now: &str,
) -> Value {
    let old = old.and_then(Value::as_array);
    let list: Vec<Value> = new
        .iter()
        .map(|c| {
            let kept = old
                .into_iter()
                .flatten()
                .find(|o| {
                    o["type"] == c.type_ && o["status"] == c.status_str() && o["reason"] == c.reason
                })
                .and_then(|o| o.get("lastTransitionTime").cloned());
            let mut message = c.message.clone();
            if message.len() > MAX_MESSAGE {
                let mut end = MAX_MESSAGE;
                while !message.is_char_boundary(end) {
                    end -= 1;
                }
                message.truncate(end);
            }
            json!({
                "type": c.type_,
                "status": c.status_str(),
                "reason": c.reason,
                "message": message,
                "observedGeneration": generation.unwrap_or(0),
                "lastTransitionTime": kept.unwrap_or_else(|| Value::from(now)),
            })
        })
        .collect();
    Value::Array(list)
}

/// The Gateway API features sluice claims in GatewayClass `status.supportedFeatures`, where
/// the conformance suite reads them (`pkg/features` names, sorted as the API asks): exactly
/// those whose conformance tests pass (`scripts/conformance.sh`, docs/gateway-api.md "Gateway API
/// conformance"). Claiming one makes the suite run its tests; leaving one out skips them.
pub const SUPPORTED_FEATURES: &[&str] = &[
    "BackendTLSPolicy",
    "BackendTLSPolicySANValidation",
    "GRPCRoute",
    "GRPCRouteNamedRouteRule",
    "Gateway",
    "GatewayAddressEmpty",
    "GatewayBackendClientCertificate",
    "GatewayFrontendClientCertificateValidation",
    "GatewayFrontendClientCertificateValidationInsecureFallback",
    "GatewayHTTPListenerIsolation",
    "GatewayHTTPSListenerDetectMisdirectedRequests",
    "GatewayPort8080",
    "GatewayStaticAddresses",
    "HTTPRoute",
    "HTTPRoute303RedirectStatusCode",
    "HTTPRoute307RedirectStatusCode",
    "HTTPRoute308RedirectStatusCode",
    "HTTPRouteBackendProtocolH2C",
    "HTTPRouteBackendProtocolWebSocket",
    "HTTPRouteBackendRequestHeaderModification",
    "HTTPRouteBackendTimeout",
    "HTTPRouteCORS",
    "HTTPRouteDestinationPortMatching",
    "HTTPRouteHostRewrite",
    "HTTPRouteMethodMatching",
    "HTTPRouteNamedRouteRule",
    "HTTPRouteParentRefPort",
    "HTTPRoutePathRedirect",
    "HTTPRoutePathRewrite",
    "HTTPRoutePortRedirect",
    "HTTPRouteQueryParamMatching",
    "HTTPRouteRequestMirror",
    "HTTPRouteRequestMultipleMirrors",
    "HTTPRouteRequestPercentageMirror",
    "HTTPRouteRequestTimeout",
    "HTTPRouteResponseHeaderModification",
    "HTTPRouteRetry",
    "HTTPRouteRetryBackendTimeout",
    "HTTPRouteRetryConnectionError",
    "HTTPRouteSchemeRedirect",
    "ListenerSet",
    "ReferenceGrant",
    "TCPRoute",
    "TLSRoute",
    "TLSRouteModeMixed",
    "TLSRouteModeTerminate",
    "UDPRoute",
];

/// Claimed besides [`SUPPORTED_FEATURES`] when sluice makes a Service per Gateway
/// (`--gateway-service-type`).
pub const INFRASTRUCTURE_FEATURE: &str = "GatewayInfrastructurePropagation";

/// The features a GatewayClass claims: [`SUPPORTED_FEATURES`], and
/// [`INFRASTRUCTURE_FEATURE`] with `services`; sorted.
pub fn supported_features(services: bool) -> Vec<&'static str> {
    let mut out: Vec<&'static str> = SUPPORTED_FEATURES.to_vec();
    if services {
        out.push(INFRASTRUCTURE_FEATURE);
        out.sort_unstable();
    }
    out
}

/// GatewayClass `status`: conditions and the supported `features`; other fields as they
/// were.
pub fn class_status(
    status: &ObjectStatus,
    old: Option<&Value>,
    now: &str,
    features: &[&str],
) -> Value {
    let mut out = old.cloned().unwrap_or_else(|| json!({}));
    out["conditions"] = conditions_json(
        &status.conditions,
        status.generation,
        old.and_then(|o| o.get("conditions")),
        now,
    );
    out["supportedFeatures"] = features.iter().map(|name| json!({"name": name})).collect();
    out
}

/// Gateway `status`: addresses, conditions, listeners.
pub fn gateway_status(
    status: &GatewayStatus,
    old: Option<&Value>,
    addresses: &[String],
    now: &str,
) -> Value {
    let listeners = listeners_json(&status.listeners, status.gateway.generation, old, now);
    // A Gateway with addresses of its own publishes those; one on the shared listeners the
    // proxy's (as Ingresses do).
    let own: Option<Vec<String>> = status
        .addresses
        .as_ref()
        .map(|ips| ips.iter().map(|ip| ip.to_string()).collect());
    let addresses: Vec<Value> = own
        .as_deref()
        .unwrap_or(addresses)
        .iter()
        .map(|a| {
            let kind = if a.parse::<std::net::IpAddr>().is_ok() {
                "IPAddress"
            } else {
                "Hostname"
            };
            json!({"type": kind, "value": a})
        })
        .collect();
    let mut out = json!({
        "conditions": conditions_json(
            &status.gateway.conditions,
            status.gateway.generation,
            old.and_then(|o| o.get("conditions")),
            now,
        ),
        "listeners": listeners,
    });
    if !addresses.is_empty() {
        out["addresses"] = Value::Array(addresses);
    }
    if let Some(attached) = status.attached_listener_sets {
        out["attachedListenerSets"] = json!(attached);
    }
    out
}

/// ListenerSet `status`: conditions and listeners.
pub fn listener_set_status(status: &ListenerSetStatus, old: Option<&Value>, now: &str) -> Value {
    let generation = status.listener_set.generation;
    json!({
        "conditions": conditions_json(
            &status.listener_set.conditions,
            generation,
            old.and_then(|o| o.get("conditions")),
            now,
        ),
        "listeners": listeners_json(&status.listeners, generation, old, now),
    })
}

/// `status.listeners` of a Gateway or ListenerSet, each listener's condition times kept
/// from `old` while they hold.
fn listeners_json(
    listeners: &[ListenerStatus],
    generation: Option<i64>,
    old: Option<&Value>,
    now: &str,
) -> Vec<Value> {
    let old_listener = |name: &str| {
        old.and_then(|o| o.get("listeners"))
            .and_then(Value::as_array)
            .and_then(|l| l.iter().find(|l| l["name"] == name))
            .and_then(|l| l.get("conditions"))
    };
    listeners
        .iter()
        .map(|l| {
            json!({
                "name": l.name,
                "attachedRoutes": l.attached_routes,
                "supportedKinds": l.supported_kinds.iter().map(|k| json!({
                    "group": k.group.as_deref().unwrap_or(sluice_routing::gateway::GROUP),
                    "kind": k.kind,
                })).collect::<Vec<_>>(),
                "conditions": conditions_json(&l.conditions, generation, old_listener(&l.name), now),
            })
        })
        .collect()
}

/// Where a status lists its Gateways: a route's `parents[].parentRef`, a policy's
/// `ancestors[].ancestorRef`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ParentsKey {
    /// Routes: `parents` / `parentRef`.
    Parents,
    /// Policies: `ancestors` / `ancestorRef`.
    Ancestors,
}

impl ParentsKey {
    fn list(self) -> &'static str {
        match self {
            ParentsKey::Parents => "parents",
            ParentsKey::Ancestors => "ancestors",
        }
    }

    fn reference(self) -> &'static str {
        match self {
            ParentsKey::Parents => "parentRef",
            ParentsKey::Ancestors => "ancestorRef",
        }
    }
}

/// HTTPRoute `status`: other controllers' `parents` entries as they are, ours replaced.
pub fn route_status(
    status: &RouteStatus,
    old: Option<&Value>,
    controller: &str,
    now: &str,
) -> Value {
    parents_status(ParentsKey::Parents, status, old, controller, now)
}

/// A route's `status.parents` or a policy's `status.ancestors` (`key`): other controllers'
/// entries as they are, ours replaced.
pub fn parents_status(
    key: ParentsKey,
    status: &RouteStatus,
    old: Option<&Value>,
    controller: &str,
    now: &str,
) -> Value {
    let old_parents: Vec<Value> = old
        .and_then(|o| o.get(key.list()))
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let mut parents: Vec<Value> = old_parents
        .iter()
        .filter(|p| p["controllerName"] != controller)
        .cloned()
        .collect();
    for parent in &status.parents {
        let parent_ref = parent_ref_json(&parent.parent_ref);
        let previous = old_parents
            .iter()
            .find(|p| p["controllerName"] == controller && p[key.reference()] == parent_ref)
            .and_then(|p| p.get("conditions"));
        parents.push(json!({
            key.reference(): parent_ref,
            "controllerName": controller,
            "conditions": conditions_json(&parent.conditions, status.generation, previous, now),
        }));
    }
    json!({key.list(): parents})
}

/// How many times one object's write is retried after a conflict (409), each time from
/// the object as the API server has it now.
const CONFLICT_RETRIES: usize = 3;

/// Route status writes in flight at once (a round writes one per route whose status
/// changed: all of them on the first round as leader).
const ROUTE_WRITES_IN_FLIGHT: usize = 8;

/// The `status` to send as a JSON merge patch to turn `current` into `desired`, or `None`
/// when they are equal (nothing to write). A merge patch keeps keys it does not name, so
/// a top-level key that `current` has and `desired` lacks (a Gateway's `addresses` once
/// none are published) is sent as `null`, which removes it. Pure, for testing.
pub fn status_patch(current: Option<&Value>, desired: &Value) -> Option<Value> {
    if current == Some(desired) {
        return None;
    }
    let mut patch = desired.clone();
    if let (Some(Value::Object(current)), Value::Object(out)) = (current, &mut patch) {
        for key in current.keys() {
            if !out.contains_key(key) {
                out.insert(key.clone(), Value::Null);
            }
        }
    }
    Some(patch)
}

/// Whether an HTTPRoute `status` has a `parents` entry written by `controller`.
pub fn has_parents_of(status: Option<&Value>, controller: &str) -> bool {
    has_entries_of(ParentsKey::Parents, status, controller)
}

/// Whether a `status` has a `key` entry written by `controller`.
fn has_entries_of(key: ParentsKey, status: Option<&Value>, controller: &str) -> bool {
    status
        .and_then(|s| s.get(key.list()))
        .and_then(Value::as_array)
        .is_some_and(|p| p.iter().any(|p| p["controllerName"] == controller))
}

/// The Gateway API kinds whose `status` this module writes (a free-form JSON value each).
trait WithStatus:
    kube::Resource<DynamicType = ()> + Clone + serde::de::DeserializeOwned + std::fmt::Debug
{
    fn status(&self) -> Option<Cow<'_, Value>>;
}

/// The objects whose `status` is kept as a JSON value.
macro_rules! with_status {
    ($($kind:ty),+) => {
        $(impl WithStatus for $kind {
            fn status(&self) -> Option<Cow<'_, Value>> {
                self.status.as_ref().map(Cow::Borrowed)
            }
        })+
    };
}

with_status!(GatewayClass, Gateway, BackendTlsPolicy, ListenerSet);

/// The routes, whose `status` is kept as compact JSON text ([`StatusJson`]).
macro_rules! with_status_text {
    ($($kind:ty),+) => {
        $(impl WithStatus for $kind {
            fn status(&self) -> Option<Cow<'_, Value>> {
                self.status.as_ref().map(|s| Cow::Owned(StatusJson::value(s)))
            }
        })+
    };
}

with_status_text!(HttpRoute, GrpcRoute, TcpRoute, TlsRoute, UdpRoute);

/// A parentRef as the API server stores it in `status.parents[].parentRef`: with the
/// schema's defaults for `group` and `kind` filled in. Written without them, the stored
/// entry would never equal the one computed, so every round would write again and lose
/// the conditions' `lastTransitionTime`.
fn parent_ref_json(parent: &sluice_routing::gateway::ParentReference) -> Value {
    let mut value = serde_json::to_value(parent).unwrap_or(Value::Null);
    if let Value::Object(map) = &mut value {
        map.entry("group")
            .or_insert_with(|| Value::from(sluice_routing::gateway::GROUP));
        map.entry("kind").or_insert_with(|| Value::from("Gateway"));
    }
    value
}

/// Writes Gateway API status from the rebuild's [`GatewayStatuses`].
#[derive(Clone)]
pub struct GatewayStatusWriter {
    client: kube::Client,
    controller_name: String,
    informers: GatewayInformers,
    /// The Services of the Gateways (`--gateway-service-type`).
    services: std::sync::Arc<super::gateway_service::ServiceSync>,
    /// What GatewayClasses claim.
    features: Vec<&'static str>,
}

impl GatewayStatusWriter {
    /// A writer comparing against the objects in `informers`' stores.
    pub fn new(client: kube::Client, controller_name: String, informers: GatewayInformers) -> Self {
        Self::with_services(
            client,
            controller_name,
            informers,
            super::gateway_service::GatewayServices {
                type_: super::gateway_service::GatewayServiceType::None,
                selector: Default::default(),
                shared_ports: (80, 443),
            },
        )
    }

    /// A writer that also keeps a Service per Gateway as `services` says.
    pub fn with_services(
        client: kube::Client,
        controller_name: String,
        informers: GatewayInformers,
        services: super::gateway_service::GatewayServices,
    ) -> Self {
        let features =
            supported_features(services.type_ != super::gateway_service::GatewayServiceType::None);
        GatewayStatusWriter {
            client,
            controller_name,
            informers,
            services: std::sync::Arc::new(super::gateway_service::ServiceSync::new(services)),
            features,
        }
    }

    /// Brings the statuses in line; returns how many objects were written. `addresses`:
    /// what Gateways publish in `status.addresses` (the Ingress status addresses). Every
    /// GatewayClass, Gateway, ListenerSet and BackendTLSPolicy is visited each round; of the
    /// routes, those `scope` names (see [`Scope`]).
    ///
    /// One object's failure does not hold up the others: every object is tried, and the
    /// first error is returned afterwards (the caller retries the whole round).
    pub async fn sync(
        &self,
        statuses: &GatewayStatuses,
        addresses: &[String],
        scope: Scope<'_>,
    ) -> anyhow::Result<usize> {
        let now = k8s_openapi::jiff::Timestamp::now()
            .strftime("%Y-%m-%dT%H:%M:%SZ")
            .to_string();
        let mut written = 0;
        let mut first_error = None;
        let mut tally = |result: anyhow::Result<usize>| match result {
            Ok(n) => written += n,
            Err(e) => {
                first_error.get_or_insert(e);
            }
        };
        for class in &statuses.classes {
            let Some(current) = self
                .informers
                .classes
                .store()
                .get_by_key(&class.object.name)
            else {
                continue;
            };
            let api: Api<GatewayClass> = Api::all(self.client.clone());
            tally(
                self.write(&api, &current, |old| {
                    class_status(class, old, &now, &self.features)
                })
                .await,
            );
        }
        for gateway in &statuses.gateways {
            let object = &gateway.gateway.object;
            let key = format!("{}/{}", object.namespace, object.name);
            let Some(current) = self.informers.gateways.store().get_by_key(&key) else {
                continue;
            };
            let api: Api<Gateway> = Api::namespaced(self.client.clone(), &object.namespace);
            tally(
                self.write(&api, &current, |old| {
                    gateway_status(gateway, old, addresses, &now)
                })
                .await,
            );
        }
        // The Services of the accepted Gateways.
        let accepted: Vec<(std::sync::Arc<Gateway>, &GatewayStatus)> = (statuses.gateways.iter())
            .filter(|g| {
                g.gateway
                    .conditions
                    .iter()
                    .any(|c| c.type_ == "Accepted" && c.status)
            })
            .filter_map(|g| {
                let object = &g.gateway.object;
                let key = format!("{}/{}", object.namespace, object.name);
                Some((self.informers.gateways.store().get_by_key(&key)?, g))
            })
            .collect();
        tally(self.services.sync(&self.client, &accepted).await);
        if let Some(informer) = &self.informers.listener_sets {
            for set in &statuses.listener_sets {
                let object = &set.listener_set.object;
                let key = format!("{}/{}", object.namespace, object.name);
                let Some(current) = informer.store().get_by_key(&key) else {
                    continue;
                };
                let api: Api<ListenerSet> = Api::namespaced(self.client.clone(), &object.namespace);
                tally(
                    self.write(&api, &current, |old| listener_set_status(set, old, &now))
                        .await,
                );
            }
        }
        // Each kind's routes: written, then our entries taken out of those the compiler
        // no longer lists (no parentRef names a Gateway of ours any more), leaving others'.
        // After a finished round, only the routes whose status changed since, those that
        // joined or left the list, and those whose status someone else changed.
        let visit = match scope {
            Scope::Changes { since, touched } => changed_in_chunks(
                &since.gateway.routes,
                &statuses.routes,
                |r| &r.object,
                Arc::ptr_eq,
            )
            .map(|mut changed| {
                changed.extend(touched.iter().cloned());
                changed.sort();
                changed.dedup();
                changed
            }),
            Scope::Everything => None,
        };
        let routes = RoutesToVisit {
            statuses: &statuses.routes,
            only: visit.as_deref(),
        };
        let informers = &self.informers;
        tally(
            self.route_statuses(&informers.routes, ParentsKey::Parents, routes, &now)
                .await,
        );
        tally(
            self.route_statuses(&informers.grpc_routes, ParentsKey::Parents, routes, &now)
                .await,
        );
        if let Some(informer) = &informers.tcp_routes {
            tally(
                self.route_statuses(informer, ParentsKey::Parents, routes, &now)
                    .await,
            );
        }
        if let Some(informer) = &informers.tls_routes {
            tally(
                self.route_statuses(informer, ParentsKey::Parents, routes, &now)
                    .await,
            );
        }
        if let Some(informer) = &informers.udp_routes {
            tally(
                self.route_statuses(informer, ParentsKey::Parents, routes, &now)
                    .await,
            );
        }
        if let Some(informer) = &informers.backend_tls_policies {
            let policies: Vec<RouteStatus> = (statuses.policies.iter())
                .map(|p| RouteStatus {
                    object: p.object.clone(),
                    generation: p.generation,
                    parents: p.ancestors.clone(),
                })
                .collect();
            let mut policies: Vec<Arc<RouteStatus>> = policies.into_iter().map(Arc::new).collect();
            policies.sort_by(|a, b| a.object.cmp(&b.object));
            let policies = SortedChunks::from_sorted(policies);
            let every = RoutesToVisit {
                statuses: &policies,
                only: None,
            };
            tally(
                self.route_statuses(informer, ParentsKey::Ancestors, every, &now)
                    .await,
            );
        }
        match first_error {
            Some(e) => Err(e),
            None => Ok(written),
        }
    }

    /// Writes the statuses of kind `K` in `routes` (cached in `informer`), and removes our
    /// `key` entries from the other objects of the kind that still carry them. The number
    /// written.
    async fn route_statuses<K>(
        &self,
        informer: &SharedIndexInformer<K>,
        key: ParentsKey,
        routes: RoutesToVisit<'_>,
        now: &str,
    ) -> anyhow::Result<usize>
    where
        K: RouteKind,
    {
        let kind = K::KIND;
        let mut written = 0;
        let mut first_error = None;
        let mut tally = |result: anyhow::Result<usize>| match result {
            Ok(n) => written += n,
            Err(e) => {
                first_error.get_or_insert(e);
            }
        };
        // Each object to visit, with its status when the compiler lists one.
        let visit: Vec<(std::borrow::Cow<'_, ObjectRef>, Option<&RouteStatus>)> = match routes.only
        {
            None => {
                let mut listed: Vec<_> = (routes.statuses.iter())
                    .filter(|r| r.object.kind == kind)
                    .map(|r| (std::borrow::Cow::Borrowed(&r.object), Some(&**r)))
                    .collect();
                let names: std::collections::HashSet<(&str, &str)> = (routes.statuses.iter())
                    .filter(|r| r.object.kind == kind)
                    .map(|r| (r.object.namespace.as_str(), r.object.name.as_str()))
                    .collect();
                // Not listed, yet carrying our entries.
                for current in informer.store().list() {
                    let meta = current.meta();
                    let namespace = meta.namespace.as_deref().unwrap_or_default();
                    let name = meta.name.as_deref().unwrap_or_default();
                    if !names.contains(&(namespace, name))
                        && has_entries_of(key, current.status().as_deref(), &self.controller_name)
                    {
                        listed.push((
                            std::borrow::Cow::Owned(ObjectRef {
                                kind,
                                namespace: namespace.to_owned(),
                                name: name.to_owned(),
                            }),
                            None,
                        ));
                    }
                }
                listed
            }
            Some(only) => (only.iter())
                .filter(|o| o.kind == kind)
                .map(|o| (std::borrow::Cow::Borrowed(o), routes.status_of(o)))
                .collect(),
        };
        // A few writes in flight: each waits on the API server (and etcd) far longer than
        // this thread works on it, and a restart over 10,000 routes writes them all. Each
        // write's future is made as it starts (a future takes the room of its largest
        // state from the start: 10,000 made at once were tens of megabytes).
        let mut results = futures::stream::iter(visit)
            .map(|(object, status)| self.route_status(informer, key, object, status, now))
            .buffer_unordered(ROUTE_WRITES_IN_FLIGHT)
            // Boxed: unboxed, the compiler cannot prove the spawned status loop `Send` (its
            // inference of the closure's lifetimes in async code falls short).
            .boxed();
        while let Some(result) = results.next().await {
            tally(result);
        }
        match first_error {
            Some(e) => Err(e),
            None => Ok(written),
        }
    }

    /// Writes the status of one route `object` (`status` when the compiler lists it, else
    /// our entries taken out), read from `informer`'s cache as the write starts; 1 when
    /// written.
    async fn route_status<K>(
        &self,
        informer: &SharedIndexInformer<K>,
        key: ParentsKey,
        object: Cow<'_, ObjectRef>,
        status: Option<&RouteStatus>,
        now: &str,
    ) -> anyhow::Result<usize>
    where
        K: RouteKind,
    {
        let cache_key = format!("{}/{}", object.namespace, object.name);
        let Some(current) = informer.store().get_by_key(&cache_key) else {
            return Ok(0);
        };
        let api: Api<K> = Api::namespaced(self.client.clone(), &object.namespace);
        let status = match status {
            Some(status) => Cow::Borrowed(status),
            None if has_entries_of(key, current.status().as_deref(), &self.controller_name) => {
                Cow::Owned(RouteStatus {
                    object: object.into_owned(),
                    generation: current.meta().generation,
                    parents: Vec::new(),
                })
            }
            None => return Ok(0),
        };
        self.write(&api, &current, |old| {
            parents_status(key, &status, old, &self.controller_name, now)
        })
        .await
    }

    /// Writes the status `desired` computes from the current one, unless nothing changes;
    /// 1 when written. The patch carries the `resourceVersion` it was computed from, so a
    /// concurrent write (another controller's `parents` entry) fails with 409 instead of
    /// being lost; then the object is read again and the status recomputed from it.
    async fn write<K: WithStatus>(
        &self,
        api: &Api<K>,
        cached: &K,
        desired: impl Fn(Option<&Value>) -> Value,
    ) -> anyhow::Result<usize> {
        let name = cached.meta().name.clone().unwrap_or_default();
        let what = format!("{} {}", K::kind(&()), cached_key(cached));
        let mut current = cached.clone();
        for _ in 0..=CONFLICT_RETRIES {
            let patched = {
                let held = current.status();
                status_patch(held.as_deref(), &desired(held.as_deref()))
            };
            let Some(status) = patched else {
                return Ok(0);
            };
            let patch = json!({
                "metadata": {"resourceVersion": current.meta().resource_version},
                "status": status,
            });
            match api
                .patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
            {
                Ok(_) => return Ok(1),
                Err(kube::Error::Api(e)) if e.code == 404 => return Ok(0),
                Err(kube::Error::Api(e)) if e.code == 409 => {
                    tracing::debug!(object = %what, "status write conflicted; reading it again");
                    current = match api.get_opt(&name).await {
                        Ok(Some(fresh)) => fresh,
                        Ok(None) => return Ok(0),
                        Err(e) => anyhow::bail!("read {what} after a conflict: {e}"),
                    };
                }
                Err(e) => anyhow::bail!("update status of {what}: {e}"),
            }
        }
        anyhow::bail!(
            "update status of {what}: still conflicting after {CONFLICT_RETRIES} re-reads"
        )
    }
}

/// A route kind whose `status` the writer keeps: namespaced, with a status it reads.
trait RouteKind:
    WithStatus
    + k8s_openapi::Resource
    + kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
    + Clone
    + serde::de::DeserializeOwned
    + std::fmt::Debug
    + Send
    + Sync
    + 'static
{
}

impl<K> RouteKind for K where
    K: WithStatus
        + k8s_openapi::Resource
        + kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static
{
}

/// The route statuses of a round, sorted by object, and which objects to visit: every
/// listed one and every unlisted one carrying our entries (`only` is `None`), or `only`
/// those (sorted), listed or not.
#[derive(Clone, Copy)]
struct RoutesToVisit<'a> {
    statuses: &'a SortedChunks<Arc<RouteStatus>>,
    only: Option<&'a [ObjectRef]>,
}

impl<'a> RoutesToVisit<'a> {
    /// The listed status of `object`.
    fn status_of(&self, object: &ObjectRef) -> Option<&'a RouteStatus> {
        self.statuses.get(object, |r| &r.object).map(|r| &**r)
    }
}

/// `namespace/name`, or `name` for a cluster-scoped object.
fn cached_key<K: kube::Resource>(object: &K) -> String {
    let meta = object.meta();
    let name = meta.name.as_deref().unwrap_or_default();
    match meta.namespace.as_deref() {
        Some(ns) => format!("{ns}/{name}"),
        None => name.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_routing::ObjectRef;
    use sluice_routing::gateway::{ParentReference, RouteParentStatus};

    fn route(conditions: Vec<Condition>) -> RouteStatus {
        RouteStatus {
            object: ObjectRef {
                kind: "HTTPRoute",
                namespace: "default".into(),
                name: "r".into(),
            },
            generation: Some(4),
            parents: vec![RouteParentStatus {
                parent_ref: ParentReference {
                    name: "gw".into(),
                    ..ParentReference::default()
                },
                conditions,
            }],
        }
    }

    #[test]
    fn transition_time_is_kept_while_the_condition_holds() {
        let accepted = vec![Condition::yes("Accepted", "Accepted", "ok")];
        let first = route_status(&route(accepted.clone()), None, "me", "2026-01-01T00:00:00Z");
        let again = route_status(&route(accepted), Some(&first), "me", "2026-01-02T00:00:00Z");
        assert_eq!(first, again, "nothing changed: nothing to write");
        let c = &first["parents"][0]["conditions"][0];
        assert_eq!(c["observedGeneration"], 4);
        assert_eq!(c["lastTransitionTime"], "2026-01-01T00:00:00Z");
        let refused = vec![Condition::no("Accepted", "NotAllowedByListeners", "no")];
        let changed = route_status(&route(refused), Some(&first), "me", "2026-01-03T00:00:00Z");
        let c = &changed["parents"][0]["conditions"][0];
        assert_eq!(
            (c["status"].as_str(), c["lastTransitionTime"].as_str()),
            (Some("False"), Some("2026-01-03T00:00:00Z"))
        );
    }

    #[test]
    fn other_controllers_parents_are_kept() {
        let theirs = json!({"parentRef": {"name": "other-gw"}, "controllerName": "example.com/x",
            "conditions": [{"type": "Accepted", "status": "True"}]});
        let stale_ours =
            json!({"parentRef": {"name": "gone"}, "controllerName": "me", "conditions": []});
        let old = json!({"parents": [theirs.clone(), stale_ours]});
        let out = route_status(
            &route(vec![Condition::yes("Accepted", "Accepted", "ok")]),
            Some(&old),
            "me",
            "t",
        );
        let parents = out["parents"].as_array().expect("parents");
        assert_eq!(parents.len(), 2, "{out}");
        assert_eq!(parents[0], theirs);
        assert_eq!(
            parents[1]["parentRef"],
            json!({"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": "gw"})
        );
        assert_eq!(parents[1]["controllerName"], "me");
    }

    #[test]
    fn gateway_addresses_are_typed() {
        let status = GatewayStatus {
            gateway: ObjectStatus {
                object: ObjectRef {
                    kind: "Gateway",
                    namespace: "d".into(),
                    name: "g".into(),
                },
                generation: Some(1),
                conditions: vec![Condition::yes("Accepted", "Accepted", "ok")],
            },
            listeners: vec![],
            addresses: None,
            attached_listener_sets: None,
        };
        let out = gateway_status(
            &status,
            None,
            &["10.0.0.1".into(), "lb.example".into()],
            "t",
        );
        assert_eq!(
            out["addresses"],
            json!([{"type": "IPAddress", "value": "10.0.0.1"}, {"type": "Hostname", "value": "lb.example"}])
        );
        assert_eq!(out["listeners"], json!([]));
        // A Gateway with an address of its own publishes that one, not the proxy's.
        let own = GatewayStatus {
            addresses: Some(vec!["127.1.0.7".parse().unwrap()]),
            attached_listener_sets: None,
            ..status
        };
        let out = gateway_status(&own, None, &["10.0.0.1".into()], "t");
        assert_eq!(
            out["addresses"],
            json!([{"type": "IPAddress", "value": "127.1.0.7"}])
        );
    }

    fn gateway(generation: i64, listener: Vec<Condition>) -> GatewayStatus {
        GatewayStatus {
            gateway: ObjectStatus {
                object: ObjectRef {
                    kind: "Gateway",
                    namespace: "d".into(),
                    name: "g".into(),
                },
                generation: Some(generation),
                conditions: vec![
                    Condition::yes("Accepted", "Accepted", "ok"),
                    Condition::yes("Programmed", "Programmed", "ok"),
                ],
            },
            listeners: vec![sluice_routing::gateway::ListenerStatus {
                name: "http".into(),
                attached_routes: 2,
                supported_kinds: vec![],
                conditions: listener,
                binds: vec![],
            }],
            addresses: None,
            attached_listener_sets: None,
        }
    }

    #[test]
    fn gateway_and_listener_transition_times_follow_their_own_condition() {
        let ok = vec![Condition::yes("Accepted", "Accepted", "ok")];
        let first = gateway_status(&gateway(1, ok), None, &[], "t1");
        let conflicted = vec![Condition::no("Accepted", "PortUnavailable", "taken")];
        let second = gateway_status(&gateway(2, conflicted), Some(&first), &[], "t2");
        // The Gateway's own conditions held: their time stays; generation moves on.
        assert_eq!(second["conditions"][0]["lastTransitionTime"], "t1");
        assert_eq!(second["conditions"][1]["observedGeneration"], 2);
        // The listener's reason changed: a new transition.
        let l = &second["listeners"][0];
        assert_eq!(l["attachedRoutes"], 2);
        assert_eq!(l["conditions"][0]["lastTransitionTime"], "t2");
        assert_eq!(l["conditions"][0]["observedGeneration"], 2);
    }

    #[test]
    fn class_status_keeps_the_time_and_other_fields() {
        let class = ObjectStatus {
            object: ObjectRef {
                kind: "GatewayClass",
                namespace: String::new(),
                name: "c".into(),
            },
            generation: Some(3),
            conditions: vec![Condition::yes("Accepted", "Accepted", "ours")],
        };
        let old = json!({
            "conditions": [{"type": "Accepted", "status": "True", "reason": "Accepted",
                            "lastTransitionTime": "t0", "observedGeneration": 2}],
            "somethingNewer": [{"name": "x"}],
        });
        let out = class_status(&class, Some(&old), "t1", SUPPORTED_FEATURES);
        assert_eq!(out["conditions"][0]["lastTransitionTime"], "t0");
        assert_eq!(out["conditions"][0]["observedGeneration"], 3);
        assert_eq!(out["somethingNewer"], old["somethingNewer"]);
        // The API server's default (`Unknown`/`Pending`) is a different condition.
        let pending = json!({"conditions": [{"type": "Accepted", "status": "Unknown",
            "reason": "Pending", "lastTransitionTime": "1970-01-01T00:00:00Z"}]});
        let out = class_status(&class, Some(&pending), "t1", SUPPORTED_FEATURES);
        assert_eq!(out["conditions"][0]["lastTransitionTime"], "t1");
    }

    /// Gateway API conformance reads `status.supportedFeatures` of the GatewayClass to pick
    /// the tests it runs (suite.fetchGatewayClassSupportedFeatures): the claimed list,
    /// sorted, replacing whatever was there.
    #[test]
    fn class_status_claims_the_supported_features() {
        let class = ObjectStatus {
            object: ObjectRef {
                kind: "GatewayClass",
                namespace: String::new(),
                name: "c".into(),
            },
            generation: Some(1),
            conditions: vec![Condition::yes("Accepted", "Accepted", "ours")],
        };
        let old = json!({"supportedFeatures": [{"name": "SomethingOld"}]});
        let out = class_status(&class, Some(&old), "t1", &supported_features(false));
        let names: Vec<&str> = out["supportedFeatures"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|f| f["name"].as_str())
            .collect();
        assert_eq!(names, SUPPORTED_FEATURES);
        assert!(names.contains(&"HTTPRoute") && !names.contains(&"SomethingOld"));
        assert!(names.windows(2).all(|w| w[0] < w[1]), "sorted: {names:?}");
        let with = supported_features(true);
        assert!(with.contains(&INFRASTRUCTURE_FEATURE));
        assert!(with.windows(2).all(|w| w[0] < w[1]), "sorted: {with:?}");
    }

    #[test]
    fn status_patch_is_none_when_equal_and_removes_what_is_gone() {
        let with = json!({"conditions": [], "listeners": [], "addresses": [{"value": "x"}]});
        assert_eq!(status_patch(Some(&with), &with), None);
        let without = json!({"conditions": [], "listeners": []});
        assert_eq!(
            status_patch(Some(&with), &without),
            Some(json!({"conditions": [], "listeners": [], "addresses": null}))
        );
        assert_eq!(status_patch(None, &without), Some(without.clone()));
    }

    #[test]
    fn routes_no_longer_ours_lose_only_our_entries() {
        let theirs = json!({"parentRef": {"name": "x"}, "controllerName": "example.com/x",
            "conditions": []});
        let old = json!({"parents": [
            theirs.clone(),
            {"parentRef": {"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": "gw"},
             "controllerName": "me", "conditions": []},
        ]});
        assert!(has_parents_of(Some(&old), "me"));
        assert!(!has_parents_of(Some(&old), "you"));
        assert!(!has_parents_of(None, "me"));
        let none = RouteStatus {
            parents: vec![],
            ..route(vec![])
        };
        let out = route_status(&none, Some(&old), "me", "t");
        assert_eq!(out, json!({"parents": [theirs]}));
        assert!(!has_parents_of(Some(&out), "me"));
    }

    #[test]
    fn a_parent_ref_as_the_server_defaults_it_is_the_same_parent() {
        // `route()`'s parentRef names only the Gateway; the API server stores group and
        // kind with it. Once written, the next round must find nothing to change.
        let accepted = vec![Condition::yes("Accepted", "Accepted", "ok")];
        let first = route_status(&route(accepted.clone()), None, "me", "t1");
        let stored = json!({"parents": [{
            "parentRef": {"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": "gw"},
            "controllerName": "me",
            "conditions": first["parents"][0]["conditions"].clone(),
        }]});
        let again = route_status(&route(accepted), Some(&stored), "me", "t2");
        assert_eq!(status_patch(Some(&stored), &again), None, "{again}");
    }
}

//! Gateway API objects into the shared [`RouteTable`]: which GatewayClasses and Gateways
//! are ours, which listeners are valid, which routes attach where, and the entries and
//! statuses that follow. Runs after the Ingress part of the compiler
//! (`../ingress/compile.rs`), adding to the same table (backends are shared by Service
//! port).

use sluice_persistent::SortedChunks;
use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};

use super::addresses::{self, Assigned};
use super::frontend_tls::{self, ClientAuth};
use super::hostname;
use super::listener_set::{self, AllowedSets, Owner};
use super::rule::{RuleOut, build_conditions, checked_rule, full_match};
use super::status::{
    Condition, GatewayStatus, GatewayStatuses, ListenerSetStatus, ListenerStatus, ObjectStatus,
    PolicyStatus, RouteParentStatus, RouteStatus,
};
use super::types::{
    BackendObjectReference, GROUP, Gateway, GatewayClass, HttpRoute, HttpRouteRule, Listener,
    ParentReference, ReferenceGrant, RouteGroupKind,
};
use crate::backend::ServiceIndex;
use crate::backend_registry::BackendRegistry;
use crate::host::HostPattern;
use crate::key::Key;
use crate::policy::{Policy, RequestRedirect};
use crate::refs::Age;
use crate::rules::{
    Candidate, GatewayRoutes, HostRules, ListenerRoutes, PathCond, Precedence, RuleSetBuilder,
    SocketKind, StreamRoutes, StreamTarget,
};
use crate::table::{Mirror, RouteEntry, RuleIndex, WeightedBackend};
use crate::tls::{TlsCertificate, parse_secret};
use crate::{
    CompileOptions, Diagnostic, Inputs, ObjectRef, PortRef, Reason, RouteTable, ServiceRef,
};

/// What a listener speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Proto {
    Http,
    Https,
    /// TCPRoutes; served only on a Gateway address of its own.
    Tcp,
    /// TLS `Passthrough`: TLSRoutes by SNI; served only on a Gateway address of its own.
    TlsPassthrough,
    /// TLS `Terminate`: TLSRoutes by SNI, TLS terminated with the listener's certificate;
    /// served only on a Gateway address of its own.
    TlsTerminate,
    /// UDPRoutes; served only on a Gateway address of its own.
    Udp,
}

impl Proto {
    /// Whether its routes take whole connections (no HTTP).
    fn stream(self) -> bool {
        matches!(
            self,
            Proto::Tcp | Proto::TlsPassthrough | Proto::TlsTerminate | Proto::Udp
        )
    }

    /// The socket kind the proxy binds for it.
    fn socket(self) -> SocketKind {
        match self {
            Proto::Http => SocketKind::Http,
            Proto::Https => SocketKind::Https,
            Proto::Tcp => SocketKind::Tcp,
            Proto::TlsPassthrough | Proto::TlsTerminate => SocketKind::Tls,
            Proto::Udp => SocketKind::Udp,
        }
    }

    /// The route kinds its listeners take.
    fn kinds(self) -> &'static [&'static str] {
        match self {
            Proto::Http | Proto::Https => &[HTTP_ROUTE, GRPC_ROUTE],
            Proto::Tcp => &[TCP_ROUTE],
            Proto::TlsPassthrough | Proto::TlsTerminate => &[TLS_ROUTE],
            Proto::Udp => &[UDP_ROUTE],
        }
    }
}

/// Where a listener's routes are looked up: the proxy's shared HTTP or HTTPS listener, or
/// a socket of the Gateway's own (its address, the listener's port).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Site {
    Shared(Proto),
    Own(SocketAddr, Proto),
}

/// Where a route is served: the site, the listener's port, a host name, and the client
/// certificate its Gateway shows backends (`spec.tls.backend`).
type Served = (Site, u16, HostPattern, Option<Arc<TlsCertificate>>);

/// A ListenerSet naming one of our Gateways.
struct OurSet<'a> {
    set: &'a Arc<super::types::ListenerSet>,
    /// Its Gateway.
    gateway: usize,
    /// The Gateway's `allowedListeners` let it in.
    allowed: bool,
}

/// `allowedRoutes.namespaces.from`.
enum AllowedFrom<'a> {
    Same,
    All,
    Selector(&'a LabelSelector),
}

/// A listener of one of our Gateways, checked.
struct OurListener<'a> {
    /// The Gateway it is served on (its addresses).
    gateway: usize,
    /// Who declares it: the Gateway, or a ListenerSet of it.
    owner: Owner,
    /// The Gateway's namespace (`allowedRoutes.namespaces.from: Same`).
    namespace: &'a str,
    spec: &'a Listener,
    proto: Option<Proto>,
    host: HostPattern,
    from: AllowedFrom<'a>,
    kinds: Vec<RouteGroupKind>,
    /// `Accepted` and takes HTTPRoutes: routes attach and are counted in
    /// `attachedRoutes`, even while unresolved references keep it from being served
    /// (Gateway API conformance GatewayWithAttachedRoutes).
    attachable: bool,
    /// Attachable and valid: its routes are served.
    usable: bool,
    /// Where its routes are served; empty when its Gateway has no usable address.
    sites: Vec<Site>,
    conditions: Vec<Condition>,
    attached: i32,
    /// An HTTPS listener's client certificate validation (`spec.tls.frontend`).
    client_auth: Option<ClientAuth>,
    /// The client certificate its Gateway shows backends (`spec.tls.backend`).
    backend_client: Option<Arc<TlsCertificate>>,
}

/// The Gateway API part of a compilation.
pub(crate) struct GatewayCompiler<'c, 'a> {
    pub inputs: &'a Inputs,
    pub options: &'c CompileOptions,
    pub services: &'c ServiceIndex<'a>,
    pub secrets: &'c HashMap<(&'a str, &'a str), &'a Secret>,
    /// ConfigMaps by namespace/name (CA certificates).
    pub config_maps: &'c HashMap<(&'a str, &'a str), &'a ConfigMap>,
    /// What each BackendTLSPolicy came to.
    pub backend_tls: &'c [super::backend_tls::PolicyOutcome],
}

const HTTP_ROUTE: &str = "HTTPRoute";
const GRPC_ROUTE: &str = "GRPCRoute";
const TCP_ROUTE: &str = "TCPRoute";
const TLS_ROUTE: &str = "TLSRoute";
const UDP_ROUTE: &str = "UDPRoute";

/// A route of either kind as the compiler takes it: a GRPCRoute as its HTTPRoute
/// (`grpc.rs`), with the problem its translation found.
struct RouteIn {
    /// `HTTPRoute` or `GRPCRoute`.
    kind: &'static str,
    route: Arc<HttpRoute>,
    /// A GRPCRoute match that cannot be compiled (the route is not accepted).
    invalid: Option<String>,
}

impl RouteIn {
    /// A route of `kind` in its HTTPRoute form, with what its translation found wrong.
    fn translated(kind: &'static str, (route, invalid): (HttpRoute, Option<String>)) -> RouteIn {
        RouteIn {
            kind,
            route: Arc::new(route),
            invalid,
        }
    }
}

/// The annotation through which a Gateway API route switches compression.
pub(crate) const COMPRESSION_ANNOTATION: &str = "sluice.dev/compression";

/// `sluice.dev/compression` of a route: `Some(on)`, or `None` when absent or invalid (an
/// invalid value becomes a diagnostic on the route).
fn route_compression(
    kind: &'static str,
    meta: &ObjectMeta,
    diagnostics: &mut Vec<Diagnostic>,
) -> Option<bool> {
    let value = meta.annotations.as_ref()?.get(COMPRESSION_ANNOTATION)?;
    match crate::policy::parse_compression(value) {
        Ok(on) => Some(on),
        Err(detail) => {
            let field = format!("metadata.annotations[{COMPRESSION_ANNOTATION}]");
            diagnostics.push(Diagnostic::new(
                &object(kind, meta),
                field,
                Reason::InvalidAnnotation,
                detail,
            ));
            None
        }
    }
}

fn meta_name(meta: &ObjectMeta) -> (&str, &str) {
    (
        meta.namespace.as_deref().unwrap_or(""),
        meta.name.as_deref().unwrap_or(""),
    )
}

fn object(kind: &'static str, meta: &ObjectMeta) -> ObjectRef {
    let (namespace, name) = meta_name(meta);
    ObjectRef {
        kind,
        namespace: namespace.to_owned(),
        name: name.to_owned(),
    }
}

impl<'a> GatewayCompiler<'_, 'a> {
    fn watched(&self, meta: &ObjectMeta) -> bool {
        match &self.options.watch_namespace {
            Some(ns) => meta.namespace.as_deref().unwrap_or("") == ns,
            None => true,
        }
    }

    /// Whether a ReferenceGrant in `to_namespace` lets a `from_kind` in `from_namespace`
    /// refer to `to_kind` `to_name` (group `to_group`).
    pub(super) fn granted(
        &self,
        from_kind: &str,
        from_namespace: &str,
        to_namespace: &str,
        to_group: &str,
        to_kind: &str,
        to_name: &str,
    ) -> bool {
        self.inputs
            .reference_grants
            .iter()
            .any(|grant: &Arc<ReferenceGrant>| {
                grant.metadata.namespace.as_deref() == Some(to_namespace)
                    && grant.spec.from.iter().any(|f| {
                        f.group == GROUP && f.kind == from_kind && f.namespace == from_namespace
                    })
                    && grant.spec.to.iter().any(|t| {
                        t.group == to_group
                            && t.kind == to_kind
                            && t.name.as_deref().is_none_or(|n| n == to_name)
                    })
            })
    }

    /// Compiles the Gateway API objects into `table` and returns their statuses; problems
    /// that are not a status condition (an invalid `sluice.dev/` annotation) go to
    /// `diagnostics`.
    pub(crate) fn compile_into(
        &self,
        table: &mut RouteTable,
        diagnostics: &mut Vec<Diagnostic>,
    ) -> GatewayStatuses {
        let mut statuses = GatewayStatuses::default();
        // 1. Our classes.
        let mut our_classes: Vec<&str> = Vec::new();
        let mut classes: Vec<&Arc<GatewayClass>> = self
            .inputs
            .gateway_classes
            .iter()
            .filter(|c| c.spec.controller_name == self.options.gateway_controller_name)
            .collect();
        classes.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
        for class in classes {
            let name = class.metadata.name.as_deref().unwrap_or("");
            let accepted = if class.spec.parameters_ref.is_some() {
                Condition::no(
                    "Accepted",
                    "InvalidParameters",
                    "sluice takes no parameters; remove spec.parametersRef",
                )
            } else {
                our_classes.push(name);
                Condition::yes("Accepted", "Accepted", "handled by sluice")
            };
            statuses.classes.push(ObjectStatus {
                object: object("GatewayClass", &class.metadata),
                generation: class.metadata.generation,
                conditions: vec![
                    accepted,
                    Condition::yes(
                        "SupportedVersion",
                        "SupportedVersion",
                        "the Gateway API CRDs are a version sluice supports",
                    ),
                ],
            });
        }

        // 2. Our Gateways and their listeners.
        let mut gateways: Vec<&Arc<Gateway>> = self
            .inputs
            .gateways
            .iter()
            .filter(|g| self.watched(&g.metadata))
            .filter(|g| our_classes.contains(&g.spec.gateway_class_name.as_str()))
            .collect();
        gateways.sort_by(|a, b| meta_name(&a.metadata).cmp(&meta_name(&b.metadata)));
        let assigned = self.addresses(&gateways);
        let mut listeners: Vec<OurListener<'_>> = Vec::new();
        let mut certs: Vec<(HostPattern, Arc<TlsCertificate>)> = Vec::new();
        let mut loaded: HashMap<(String, String), Arc<TlsCertificate>> = HashMap::new();
        let mut backend_clients = Vec::with_capacity(gateways.len());
        let mut sets: Vec<OurSet<'_>> = Vec::new();
        for (g, gateway) in gateways.iter().enumerate() {
            let first = listeners.len();
            let backend_client = self.backend_client_certificate(gateway, &mut loaded);
            // The Gateway's own listeners, then those of the ListenerSets it allows, in
            // precedence order.
            let gateway_ns = gateway.metadata.namespace.as_deref().unwrap_or("");
            let mut sources: Vec<(Owner, &str, &'static str, &[Listener])> = vec![(
                Owner::Gateway(g),
                gateway_ns,
                "Gateway",
                &gateway.spec.listeners,
            )];
            for set in listener_set::of_gateway(&self.inputs.listener_sets, gateway) {
                if !self.watched(&set.metadata) {
                    continue;
                }
                let set_ns = set.metadata.namespace.as_deref().unwrap_or("");
                let allowed = match listener_set::allowed(gateway) {
                    AllowedSets::None => false,
                    AllowedSets::Same => set_ns == gateway_ns,
                    AllowedSets::All => true,
                    AllowedSets::Selector(selector) => {
                        selector_matches(selector, self.namespace_labels(set_ns))
                    }
                };
                if allowed && !has_parameters(gateway) {
                    let owner = Owner::ListenerSet(sets.len());
                    sources.push((owner, set_ns, "ListenerSet", &set.spec.listeners));
                }
                sets.push(OurSet {
                    set,
                    gateway: g,
                    allowed,
                });
            }
            for (owner, namespace, from_kind, specs) in sources {
                for spec in specs {
                    let mut listener = self.listener(
                        (g, owner),
                        gateway,
                        (namespace, from_kind),
                        spec,
                        &mut certs,
                        &mut loaded,
                    );
                    listener.backend_client = backend_client.as_ref().ok().cloned().flatten();
                    // A Gateway that is not accepted (parameters sluice cannot honour) serves
                    // nothing and takes no routes.
                    if has_parameters(gateway) {
                        listener.attachable = false;
                        listener.usable = false;
                        for c in listener
                            .conditions
                            .iter_mut()
                            .filter(|c| c.type_ == "Programmed")
                        {
                            *c = Condition::no(
                                "Programmed",
                                "Invalid",
                                "the Gateway is not accepted",
                            );
                        }
                    }
                    listener.sites = if has_parameters(gateway) {
                        Vec::new()
                    } else {
                        sites(&assigned[g], &listener)
                    };
                    // Whole connections, and client certificates asked for by port, need a
                    // socket of the Gateway's own: the shared HTTPS socket serves every Gateway
                    // and Ingress.
                    let own_socket = if listener.proto.is_some_and(Proto::stream) {
                        Some(format!("a {} listener", listener.spec.protocol))
                    } else if matches!(listener.client_auth, Some(ClientAuth::Validate(_))) {
                        Some("client certificate validation (spec.tls.frontend)".to_owned())
                    } else {
                        None
                    };
                    if let Some(what) = own_socket
                        && assigned[g] == Assigned::Shared
                        && listener.usable
                    {
                        listener.usable = false;
                        for c in listener
                            .conditions
                            .iter_mut()
                            .filter(|c| c.type_ == "Programmed")
                        {
                            *c = Condition::no(
                                "Programmed",
                                "Invalid",
                                format!(
                                    "{what} is served on an address of the Gateway's own: give the \
                                 Gateway spec.addresses, or run sluice with \
                                 --gateway-address-pool"
                                ),
                            );
                        }
                    }
                    listeners.push(listener);
                }
            }
            backend_clients.push(backend_client);
            conflicts(&mut listeners[first..]);
            for listener in &mut listeners[first..] {
                if !listener.usable {
                    listener.sites.clear();
                }
            }
        }

        // 3. Routes.
        let http = self.inputs.http_routes.iter().map(|r| RouteIn {
            kind: HTTP_ROUTE,
            route: Arc::clone(r),
            invalid: None,
        });
        let grpc = self
            .inputs
            .grpc_routes
            .iter()
            .map(|r| RouteIn::translated(GRPC_ROUTE, super::grpc::as_http_route(r)));
        let stream = |kind: &'static str, metadata: &ObjectMeta, spec| {
            RouteIn::translated(kind, super::stream::as_http_route(metadata, spec))
        };
        let tcp = (self.inputs.tcp_routes.iter()).map(|r| stream(TCP_ROUTE, &r.metadata, &r.spec));
        let tls = (self.inputs.tls_routes.iter()).map(|r| stream(TLS_ROUTE, &r.metadata, &r.spec));
        let udp = (self.inputs.udp_routes.iter()).map(|r| stream(UDP_ROUTE, &r.metadata, &r.spec));
        let mut routes: Vec<RouteIn> = http
            .chain(grpc)
            .chain(tcp)
            .chain(tls)
            .chain(udp)
            .filter(|r| self.watched(&r.route.metadata))
            .collect();
        // Oldest first (the spec's tie-break), then namespace/name.
        routes.sort_by_cached_key(|r| Age::of(&r.route.metadata));
        let mut builders: HashMap<(Site, HostPattern), RuleSetBuilder> = HashMap::new();
        let mut regexes: HashMap<String, regex::Regex> = HashMap::new();
        let mut backends = BackendRegistry::new(table);
        let mut streams: HashMap<SocketAddr, StreamRoutes> = HashMap::new();
        let mut route_statuses = Vec::with_capacity(routes.len());
        for route in &routes {
            let Some(status) = self.route(
                route,
                (&gateways, &sets),
                &mut listeners,
                &mut builders,
                &mut regexes,
                &mut backends,
                &mut streams,
                table,
                diagnostics,
            ) else {
                continue;
            };
            route_statuses.push(Arc::new(status));
        }
        table.backends = backends.into_backends().into_iter().collect();
        statuses.policies = self.policy_statuses(&routes, &route_statuses);
        // By object, whatever the routes' ages: one order for every compile.
        route_statuses.sort_by(|a, b| a.object.cmp(&b.object));
        statuses.routes = SortedChunks::from_sorted(route_statuses);

        // 4. Gateway statuses, now that attached routes are counted.
        for (g, gateway) in gateways.iter().enumerate() {
            let own: Vec<&OurListener<'_>> = listeners
                .iter()
                .filter(|l| l.owner == Owner::Gateway(g))
                .collect();
            let valid = own.iter().filter(|l| l.usable).count();
            // ListenersNotValid when any listener is not Accepted: with status True while
            // another is, False when none is (Gateway API conformance
            // GatewayListenerUnsupportedProtocol).
            let not_accepted = own.iter().filter(|l| !listener_accepted(l)).count();
            let listeners_accepted = if not_accepted == 0 {
                Condition::yes("Accepted", "Accepted", "accepted by sluice")
            } else if not_accepted < own.len() {
                Condition::yes(
                    "Accepted",
                    "ListenersNotValid",
                    "some listeners are not valid; see status.listeners",
                )
            } else {
                Condition::no(
                    "Accepted",
                    "ListenersNotValid",
                    "no listener is valid; see status.listeners",
                )
            };
            let listeners_ok = own.is_empty() || valid > 0;
            let (accepted, programmed) = match &assigned[g] {
                _ if has_parameters(gateway) => (
                    Condition::no(
                        "Accepted",
                        "InvalidParameters",
                        "sluice takes no parameters; remove spec.infrastructure.parametersRef",
                    ),
                    Condition::no("Programmed", "Invalid", "the Gateway is not accepted"),
                ),
                Assigned::Failed { reason, message } if *reason == "UnsupportedAddress" => (
                    Condition::no("Accepted", reason, message.clone()),
                    Condition::no("Programmed", "Invalid", message.clone()),
                ),
                Assigned::Failed { reason, message } => (
                    listeners_accepted,
                    Condition::no("Programmed", reason, message.clone()),
                ),
                _ if !listeners_ok => (
                    listeners_accepted,
                    Condition::no("Programmed", "Invalid", "no listener is valid"),
                ),
                Assigned::Shared => (
                    listeners_accepted,
                    Condition::yes(
                        "Programmed",
                        "Programmed",
                        "served by sluice's shared HTTP and HTTPS listeners",
                    ),
                ),
                Assigned::Own(ips) => (
                    listeners_accepted,
                    Condition::yes(
                        "Programmed",
                        "Programmed",
                        format!(
                            "served on {}",
                            ips.iter()
                                .map(|ip| ip.to_string())
                                .collect::<Vec<_>>()
                                .join(", ")
                        ),
                    ),
                ),
            };
            let mut conditions = vec![accepted, programmed];
            match &backend_clients[g] {
                Ok(None) => {}
                Ok(Some(_)) => conditions.push(Condition::yes(
                    "ResolvedRefs",
                    "ResolvedRefs",
                    "spec.tls.backend.clientCertificateRef resolved",
                )),
                Err((reason, message)) => {
                    conditions.push(Condition::no("ResolvedRefs", reason, message.clone()))
                }
            }
            if frontend_tls::insecure_fallback(gateway) {
                conditions.push(Condition::yes(
                    "InsecureFrontendValidationMode",
                    "ConfigurationChanged",
                    "spec.tls.frontend: mode AllowInsecureFallback serves clients without a \
                     valid certificate",
                ));
            }
            statuses.gateways.push(GatewayStatus {
                gateway: ObjectStatus {
                    object: object("Gateway", &gateway.metadata),
                    generation: gateway.metadata.generation,
                    conditions,
                },
                listeners: own.iter().map(|l| listener_status(l)).collect(),
                addresses: match &assigned[g] {
                    Assigned::Own(ips) => Some(ips.clone()),
                    Assigned::Shared => None,
                    Assigned::Failed { .. } => Some(Vec::new()),
                },
                attached_listener_sets: (gateway.spec.allowed_listeners.is_some()
                    || sets.iter().any(|s| s.gateway == g))
                .then(|| {
                    let accepted = (0..sets.len())
                        .filter(|&s| sets[s].gateway == g && sets[s].allowed)
                        .filter(|&s| {
                            listeners
                                .iter()
                                .any(|l| l.owner == Owner::ListenerSet(s) && l.usable)
                        })
                        .count();
                    i32::try_from(accepted).unwrap_or(i32::MAX)
                }),
            });
        }
        statuses.listener_sets = listener_set_statuses(&sets, &listeners);

        // 5. Lookup structures and certificates.
        let mut gateway_routes = GatewayRoutes::default();
        // Every socket of a Gateway's own is bound, routes or not (it answers 404).
        for listener in &listeners {
            for site in &listener.sites {
                if let Site::Own(addr, proto) = site {
                    let routes =
                        gateway_routes
                            .listeners
                            .entry(*addr)
                            .or_insert_with(|| ListenerRoutes {
                                kind: proto.socket(),
                                ..ListenerRoutes::default()
                            });
                    if *proto == Proto::Https && listener.usable {
                        routes.tls_listeners.push(listener.host.clone());
                        // One setting per port: every HTTPS listener of the port has it.
                        if let Some(ClientAuth::Validate(validation)) = &listener.client_auth {
                            routes.client_validation = Some(Arc::clone(validation));
                        }
                    }
                }
            }
        }
        for ((site, host), builder) in builders {
            let rules = match site {
                Site::Shared(Proto::Http) => &mut gateway_routes.http,
                Site::Shared(Proto::Https) => &mut gateway_routes.https,
                // Stream listeners are never shared (see `sites`) and have no rule sets.
                Site::Shared(_) => continue,
                Site::Own(addr, proto) => {
                    &mut gateway_routes
                        .listeners
                        .entry(addr)
                        .or_insert_with(|| ListenerRoutes {
                            kind: proto.socket(),
                            ..ListenerRoutes::default()
                        })
                        .rules
                }
            };
            let set = builder.build(&regexes);
            insert_host(rules, host, set);
        }
        for (addr, routes) in streams {
            if let Some(listener) = gateway_routes.listeners.get_mut(&addr) {
                listener.streams = routes;
            }
        }
        if !gateway_routes.http.is_empty()
            || !gateway_routes.https.is_empty()
            || !gateway_routes.listeners.is_empty()
        {
            table.gateway = Some(Arc::new(gateway_routes));
        }
        add_certificates(table, certs);
        statuses
    }

    /// BackendTLSPolicy statuses: a policy's ancestors are the Gateways of ours that accept
    /// a route sending to a Service it targets.
    fn policy_statuses(
        &self,
        routes: &[RouteIn],
        statuses: &[Arc<RouteStatus>],
    ) -> Vec<PolicyStatus> {
        let outcomes = self.backend_tls;
        if outcomes.is_empty() {
            return Vec::new();
        }
        let status_of: HashMap<(&str, &str, &str), &RouteStatus> = statuses
            .iter()
            .map(|s| {
                let o = &s.object;
                ((o.kind, o.namespace.as_str(), o.name.as_str()), &**s)
            })
            .collect();
        // (namespace, Service) -> Gateways (namespace, name).
        let mut gateways_of: HashMap<(&str, &str), std::collections::BTreeSet<(String, String)>> =
            HashMap::new();
        for route in routes {
            let (namespace, name) = meta_name(&route.route.metadata);
            let Some(status) = status_of.get(&(route.kind, namespace, name)) else {
                continue;
            };
            let accepted: Vec<(String, String)> = (status.parents.iter())
                .filter(|p| {
                    p.conditions
                        .iter()
                        .any(|c| c.type_ == "Accepted" && c.status)
                })
                .map(|p| {
                    let ns = p.parent_ref.namespace.as_deref().unwrap_or(namespace);
                    (ns.to_owned(), p.parent_ref.name.clone())
                })
                .collect();
            let refs = route.route.spec.rules.iter().flat_map(|r| &r.backend_refs);
            for r in refs {
                let b = &r.backend;
                if !b.group.as_deref().unwrap_or("").is_empty()
                    || b.kind.as_deref().unwrap_or("Service") != "Service"
                {
                    continue;
                }
                let ns = b.namespace.as_deref().unwrap_or(namespace);
                gateways_of
                    .entry((ns, b.name.as_str()))
                    .or_default()
                    .extend(accepted.iter().cloned());
            }
        }
        outcomes
            .iter()
            .filter_map(|outcome| {
                let gateways: std::collections::BTreeSet<&(String, String)> = (outcome.services)
                    .iter()
                    .filter_map(|(ns, svc)| gateways_of.get(&(ns.as_str(), svc.as_str())))
                    .flatten()
                    .collect();
                if gateways.is_empty() {
                    return None;
                }
                Some(PolicyStatus {
                    object: outcome.object.clone(),
                    generation: outcome.generation,
                    ancestors: gateways
                        .into_iter()
                        .map(|(ns, name)| RouteParentStatus {
                            parent_ref: ParentReference {
                                group: Some(GROUP.to_owned()),
                                kind: Some("Gateway".to_owned()),
                                namespace: Some(ns.clone()),
                                name: name.clone(),
                                section_name: None,
                                port: None,
                            },
                            conditions: outcome.conditions.clone(),
                        })
                        .collect(),
                })
            })
            .collect()
    }

    /// The addresses of `gateways` (in namespace/name order), assigned oldest first.
    fn addresses(&self, gateways: &[&Arc<Gateway>]) -> Vec<Assigned> {
        let mut by_age: Vec<usize> = (0..gateways.len()).collect();
        by_age.sort_by_cached_key(|&g| Age::of(&gateways[g].metadata));
        let aged: Vec<&Gateway> = by_age.iter().map(|&g| gateways[g].as_ref()).collect();
        let mut out = vec![Assigned::Shared; gateways.len()];
        let pool = self.options.gateway_address_pool.as_ref();
        for (g, assigned) in by_age.into_iter().zip(addresses::assign(&aged, pool)) {
            out[g] = assigned;
        }
        out
    }

    /// Checks one listener; an HTTPS listener's certificate joins `certs`.
    /// `(g, owner)`: the Gateway it is served on and who declares it; `(namespace,
    /// from_kind)`: the declaring object's namespace and kind (what `allowedRoutes: Same`
    /// and ReferenceGrants are about).
    fn listener<'g>(
        &self,
        (g, owner): (usize, Owner),
        gateway: &'g Gateway,
        (namespace, from_kind): (&'g str, &'static str),
        spec: &'g Listener,
        certs: &mut Vec<(HostPattern, Arc<TlsCertificate>)>,
        loaded: &mut HashMap<(String, String), Arc<TlsCertificate>>,
    ) -> OurListener<'g> {
        let gateway_ns = gateway.metadata.namespace.as_deref().unwrap_or("");
        let mut conditions = Vec::new();
        let mut usable = true;
        let tls_mode = spec
            .tls
            .as_ref()
            .and_then(|t| t.mode.as_deref())
            .unwrap_or("Terminate");
        let proto = match spec.protocol.as_str() {
            "HTTP" => Some(Proto::Http),
            "HTTPS" => Some(Proto::Https),
            "TCP" => Some(Proto::Tcp),
            "TLS" if tls_mode == "Passthrough" => Some(Proto::TlsPassthrough),
            "TLS" if tls_mode == "Terminate" => Some(Proto::TlsTerminate),
            "UDP" => Some(Proto::Udp),
            _ => None,
        };
        let host = hostname::parse(spec.hostname.as_deref()).ok();
        let from = match spec
            .allowed_routes
            .as_ref()
            .and_then(|a| a.namespaces.as_ref())
        {
            None => AllowedFrom::Same,
            Some(n) => match (n.from.as_deref().unwrap_or("Same"), &n.selector) {
                ("All", _) => AllowedFrom::All,
                ("Selector", Some(selector)) => AllowedFrom::Selector(selector),
                _ => AllowedFrom::Same,
            },
        };
        // Kinds: HTTPRoute and GRPCRoute on HTTP and HTTPS listeners, TCPRoute on TCP,
        // TLSRoute on TLS Passthrough.
        let requested: Vec<RouteGroupKind> = spec
            .allowed_routes
            .as_ref()
            .map(|a| a.kinds.clone())
            .unwrap_or_default();
        let served: Vec<RouteGroupKind> = proto
            .map(Proto::kinds)
            .unwrap_or_default()
            .iter()
            .map(|kind| RouteGroupKind {
                group: Some(GROUP.to_owned()),
                kind: (*kind).to_owned(),
            })
            .collect();
        let (kinds, bad_kinds) = if proto.is_none() {
            // No route kind is served on a protocol sluice does not serve (Gateway API
            // conformance GatewayListenerUnsupportedProtocol: supportedKinds empty).
            (Vec::new(), false)
        } else if requested.is_empty() {
            (served.to_vec(), false)
        } else {
            let mut ok: Vec<RouteGroupKind> = Vec::new();
            for asked in &requested {
                if let Some(kind) = served.iter().find(|k| {
                    k.kind == asked.kind && asked.group.as_deref().unwrap_or(GROUP) == GROUP
                }) && !ok.contains(kind)
                {
                    ok.push(kind.clone());
                }
            }
            let bad = requested.iter().any(|asked| {
                !served.iter().any(|k| {
                    k.kind == asked.kind && asked.group.as_deref().unwrap_or(GROUP) == GROUP
                })
            });
            (ok, bad)
        };
        let mut resolved = Condition::yes("ResolvedRefs", "ResolvedRefs", "references resolved");
        if bad_kinds {
            resolved = Condition::no(
                "ResolvedRefs",
                "InvalidRouteKinds",
                format!(
                    "spec.allowedRoutes.kinds: a {} listener takes {}",
                    spec.protocol,
                    proto.map(Proto::kinds).unwrap_or_default().join(", ")
                ),
            );
        }
        // Client certificate validation (`spec.tls.frontend`) of an HTTPS listener's port.
        let client_auth = match frontend_tls::settings_for(gateway, spec.port) {
            Some((validation, field)) if proto == Some(Proto::Https) => {
                match self.client_validation(gateway_ns, validation, &field) {
                    Ok(validation) => Some(ClientAuth::Validate(validation)),
                    Err(unresolved) => {
                        resolved =
                            Condition::no("ResolvedRefs", unresolved.reason, unresolved.message);
                        Some(ClientAuth::Broken)
                    }
                }
            }
            _ => None,
        };
        let accepted = match (proto, &host) {
            (None, _) => {
                usable = false;
                Condition::no(
                    "Accepted",
                    // A TLS listener is supported, its Terminate mode is not (Gateway API
                    // conformance TLSRouteListenerTerminateNotSupported).
                    if spec.protocol == "TLS" {
                        "UnsupportedValue"
                    } else {
                        "UnsupportedProtocol"
                    },
                    if spec.protocol == "TLS" {
                        format!("tls.mode {tls_mode:?} is not Passthrough or Terminate")
                    } else {
                        format!(
                            "protocol {:?} is not supported; sluice serves HTTP, HTTPS, TCP, \
                             TLS (Passthrough) and UDP",
                            spec.protocol
                        )
                    },
                )
            }
            (_, None) => {
                usable = false;
                Condition::no(
                    "Accepted",
                    "UnsupportedValue",
                    format!("hostname {:?} is not a DNS name or wildcard", spec.hostname),
                )
            }
            (Some(Proto::Https), Some(_)) if client_auth == Some(ClientAuth::Broken) => {
                usable = false;
                Condition::no(
                    "Accepted",
                    "NoValidCACertificate",
                    "no valid CA certificate to check client certificates with; see \
                     ResolvedRefs",
                )
            }
            (Some(Proto::Https | Proto::TlsTerminate), Some(host)) => {
                match self.listener_certificate((namespace, from_kind), spec, loaded) {
                    Ok(cert) => {
                        certs.push((host.clone(), cert));
                        Condition::yes("Accepted", "Accepted", "accepted")
                    }
                    Err((reason, message)) => {
                        if reason == "UnsupportedValue" {
                            usable = false;
                            Condition::no("Accepted", reason, message)
                        } else {
                            usable = false;
                            resolved = Condition::no("ResolvedRefs", reason, message);
                            Condition::yes("Accepted", "Accepted", "accepted")
                        }
                    }
                }
            }
            _ => Condition::yes("Accepted", "Accepted", "accepted"),
        };
        if kinds.is_empty() {
            usable = false;
        }
        let attachable = accepted.status && !kinds.is_empty();
        let programmed = if usable && resolved.status {
            Condition::yes("Programmed", "Programmed", "served")
        } else {
            usable = false;
            Condition::no(
                "Programmed",
                "Invalid",
                "not served; see the other conditions",
            )
        };
        conditions.push(accepted);
        conditions.push(programmed);
        conditions.push(resolved);
        conditions.push(Condition::no("Conflicted", "NoConflicts", "no conflicts"));
        OurListener {
            gateway: g,
            owner,
            namespace,
            spec,
            proto,
            host: host.unwrap_or(HostPattern::Any),
            from,
            kinds,
            attachable,
            usable,
            sites: Vec::new(),
            conditions,
            attached: 0,
            client_auth,
            backend_client: None,
        }
    }

    /// The client certificate `gateway` shows backends that ask for one
    /// (`spec.tls.backend.clientCertificateRef`, Gateway API
    /// `GatewayBackendClientCertificate`); `Ok(None)` when it names none. A reference that
    /// cannot be used is the Gateway's `ResolvedRefs: False`; its routes then connect
    /// without a client certificate, and a backend that requires one refuses them.
    fn backend_client_certificate(
        &self,
        gateway: &Gateway,
        loaded: &mut HashMap<(String, String), Arc<TlsCertificate>>,
    ) -> Result<Option<Arc<TlsCertificate>>, (&'static str, String)> {
        let Some(backend) = gateway.spec.tls.as_ref().and_then(|t| t.backend.as_ref()) else {
            return Ok(None);
        };
        let Some(cert_ref) = &backend.client_certificate_ref else {
            return Ok(None);
        };
        let namespace = gateway.metadata.namespace.as_deref().unwrap_or("");
        self.certificate_ref(
            (namespace, "Gateway"),
            cert_ref,
            "spec.tls.backend.clientCertificateRef",
            "InvalidClientCertificateRef",
            loaded,
        )
        .map(Some)
    }

    /// The certificate of an HTTPS listener (its first certificateRef).
    fn listener_certificate(
        &self,
        (namespace, from_kind): (&str, &'static str),
        spec: &Listener,
        loaded: &mut HashMap<(String, String), Arc<TlsCertificate>>,
    ) -> Result<Arc<TlsCertificate>, (&'static str, String)> {
        let tls = spec.tls.as_ref().ok_or((
            "InvalidCertificateRef",
            "an HTTPS listener needs tls.certificateRefs".to_owned(),
        ))?;
        if tls.mode.as_deref().is_some_and(|m| m != "Terminate") {
            return Err((
                "UnsupportedValue",
                "tls.mode Passthrough is not supported; sluice terminates TLS".to_owned(),
            ));
        }
        let cert_ref = tls.certificate_refs.first().ok_or((
            "InvalidCertificateRef",
            "tls.certificateRefs is empty".to_owned(),
        ))?;
        self.certificate_ref(
            (namespace, from_kind),
            cert_ref,
            "tls.certificateRefs[0]",
            "InvalidCertificateRef",
            loaded,
        )
    }

    /// The `kubernetes.io/tls` Secret `cert_ref` (at `field` of an object of a Gateway in
    /// `namespace`) names: a core Secret, permitted across namespaces by a ReferenceGrant,
    /// present and usable. Errors are (`RefNotPermitted` or `invalid`, a sentence).
    fn certificate_ref(
        &self,
        (namespace, from_kind): (&str, &'static str),
        cert_ref: &super::types::SecretObjectReference,
        field: &str,
        invalid: &'static str,
        loaded: &mut HashMap<(String, String), Arc<TlsCertificate>>,
    ) -> Result<Arc<TlsCertificate>, (&'static str, String)> {
        if !cert_ref.group.as_deref().unwrap_or("").is_empty()
            || cert_ref.kind.as_deref().unwrap_or("Secret") != "Secret"
        {
            return Err((invalid, format!("{field}: only core Secrets are supported")));
        }
        let secret_ns = cert_ref.namespace.as_deref().unwrap_or(namespace);
        if secret_ns != namespace
            && !self.granted(
                from_kind,
                namespace,
                secret_ns,
                "",
                "Secret",
                &cert_ref.name,
            )
        {
            return Err((
                "RefNotPermitted",
                format!(
                    "{field}: Secret {secret_ns}/{} is in another namespace and no \
                     ReferenceGrant there allows it",
                    cert_ref.name
                ),
            ));
        }
        let key = (secret_ns.to_owned(), cert_ref.name.clone());
        if let Some(cert) = loaded.get(&key) {
            return Ok(Arc::clone(cert));
        }
        let secret = self
            .secrets
            .get(&(secret_ns, cert_ref.name.as_str()))
            .ok_or_else(|| {
                (
                    invalid,
                    format!(
                        "{field}: Secret {secret_ns}/{} not found (or not of type \
                         kubernetes.io/tls)",
                        cert_ref.name
                    ),
                )
            })?;
        let cert =
            parse_secret(secret, ObjectRef::secret(secret_ns, &cert_ref.name)).map_err(|why| {
                (
                    invalid,
                    format!(
                        "{field}: Secret {secret_ns}/{} is not usable: {why}",
                        cert_ref.name
                    ),
                )
            })?;
        let cert = Arc::new(cert);
        loaded.insert(key, Arc::clone(&cert));
        Ok(cert)
    }

    /// Attaches one route: its status, and its rules into `builders`. `None` when no
    /// parentRef names a Gateway of ours.
    #[allow(clippy::too_many_arguments)]
    fn route(
        &self,
        input: &RouteIn,
        (gateways, sets): (&[&Arc<Gateway>], &[OurSet<'_>]),
        listeners: &mut [OurListener<'_>],
        builders: &mut HashMap<(Site, HostPattern), RuleSetBuilder>,
        regexes: &mut HashMap<String, regex::Regex>,
        backends: &mut BackendRegistry,
        streams: &mut HashMap<SocketAddr, StreamRoutes>,
        table: &mut RouteTable,
        diagnostics: &mut Vec<Diagnostic>,
    ) -> Option<RouteStatus> {
        let route = &*input.route;
        let kind = input.kind;
        let (namespace, _) = meta_name(&route.metadata);
        let mut parents: Vec<(usize, Owner, &ParentReference)> = Vec::new();
        for parent in &route.spec.parent_refs {
            if parent.group.as_deref().unwrap_or(GROUP) != GROUP {
                continue;
            }
            let parent_ns = parent.namespace.as_deref().unwrap_or(namespace);
            let named = |meta: &ObjectMeta| meta_name(meta) == (parent_ns, parent.name.as_str());
            match parent.kind.as_deref().unwrap_or("Gateway") {
                "Gateway" => {
                    if let Some(g) = gateways.iter().position(|g| named(&g.metadata)) {
                        parents.push((g, Owner::Gateway(g), parent));
                    }
                }
                "ListenerSet" => {
                    if let Some(s) = sets
                        .iter()
                        .position(|s| s.allowed && named(&s.set.metadata))
                    {
                        parents.push((sets[s].gateway, Owner::ListenerSet(s), parent));
                    }
                }
                _ => {}
            }
        }
        if parents.is_empty() {
            return None;
        }

        // The route on its own: rules, host names, backends.
        // No rules: the CRD's default, one rule matching `/` without a backend (500).
        let default_rules = [HttpRouteRule::default()];
        let specs: &[HttpRouteRule] = if route.spec.rules.is_empty() {
            &default_rules
        } else {
            &route.spec.rules
        };
        // sluice's Gateway policy until a policy CRD exists: `sluice.dev/compression` on the
        // route, for all its rules. An invalid value is reported and the global setting
        // stays.
        let compression = if matches!(kind, HTTP_ROUTE | GRPC_ROUTE) {
            route_compression(kind, &route.metadata, diagnostics)
        } else {
            None
        };
        let rules: Result<Vec<RuleOut>, String> = match &input.invalid {
            Some(why) => Err(why.clone()),
            None => specs
                .iter()
                .enumerate()
                .map(|(i, r)| {
                    let mut out = checked_rule(i, r)?;
                    out.policy.compression = compression;
                    if kind == GRPC_ROUTE {
                        // gRPC is HTTP/2 to the backend, whatever its appProtocol says.
                        out.policy.protocol = Some(crate::protocol::UpstreamProtocol::Grpc);
                        // A call's messages stream: copies go out without them rather than
                        // holding the call until its request stream ends.
                        out.policy.mirror_request_body = false;
                    }
                    Ok(out)
                })
                .collect(),
        };
        let hosts: Result<Vec<HostPattern>, String> = route
            .spec
            .hostnames
            .iter()
            .enumerate()
            .map(|(i, h)| match hostname::parse(Some(h)) {
                Ok(HostPattern::Any) | Err(_) => Err(format!(
                    "spec.hostnames[{i}]: {h:?} is not a DNS name or wildcard"
                )),
                Ok(h) => Ok(h),
            })
            .collect();
        let invalid = match (&rules, &hosts) {
            (Err(why), _) | (_, Err(why)) => Some(why.clone()),
            _ => None,
        };
        let resolved = self.route_refs(kind, route);

        // Kept with the table until the next status round: no room for more parents.
        let mut statuses = Vec::with_capacity(parents.len());
        // (proto, listener port, host names) the route is served on.
        let mut served: Vec<Served> = Vec::new();
        for (g, owner, parent) in parents {
            let accepted = match &invalid {
                Some(why) => Condition::no("Accepted", "UnsupportedValue", why.clone()),
                None => self.attach(
                    input,
                    (g, owner),
                    parent,
                    hosts.as_deref().unwrap_or_default(),
                    listeners,
                    &mut served,
                ),
            };
            statuses.push(RouteParentStatus {
                parent_ref: parent.clone(),
                conditions: vec![accepted, resolved.clone()],
            });
        }

        if let (Ok(rules), false) = (rules, served.is_empty()) {
            if matches!(kind, TCP_ROUTE | TLS_ROUTE | UDP_ROUTE) {
                self.add_streams(kind, route, specs, &served, backends, streams);
            } else {
                self.add_rules(
                    kind, route, specs, &rules, &served, builders, regexes, backends, table,
                );
            }
        }
        Some(RouteStatus {
            object: object(kind, &route.metadata),
            generation: route.metadata.generation,
            parents: statuses,
        })
    }

    /// `Accepted` for one parentRef; the listeners it attaches to are counted and their
    /// (protocol, port, host names) added to `served`.
    fn attach(
        &self,
        input: &RouteIn,
        (g, owner): (usize, Owner),
        parent: &ParentReference,
        hosts: &[HostPattern],
        listeners: &mut [OurListener<'_>],
        served: &mut Vec<Served>,
    ) -> Condition {
        let (kind, route) = (input.kind, &*input.route);
        let namespace = route.metadata.namespace.as_deref().unwrap_or("");
        let mut named = false;
        let mut allowed = false;
        let mut attached = false;
        // The Gateway's listeners by (port, protocol, hostname), for isolation below.
        let siblings: Vec<(i32, Option<Proto>, HostPattern)> = listeners
            .iter()
            .filter(|l| l.gateway == g && l.attachable)
            .map(|l| (l.spec.port, l.proto, l.host.clone()))
            .collect();
        for listener in listeners.iter_mut().filter(|l| l.owner == owner) {
            if parent
                .section_name
                .as_deref()
                .is_some_and(|s| s != listener.spec.name)
                || parent.port.is_some_and(|p| p != listener.spec.port)
            {
                continue;
            }
            named = true;
            if !listener.attachable
                || !listener.kinds.iter().any(|k| k.kind == kind)
                || !self.allows(listener, namespace)
            {
                continue;
            }
            allowed = true;
            let served_hosts = hostname::intersect(&listener.host, hosts);
            if served_hosts.is_empty() {
                continue;
            }
            attached = true;
            listener.attached += 1;
            // Attached but not served (e.g. its certificate does not resolve).
            if !listener.usable {
                continue;
            }
            let Ok(port) = u16::try_from(listener.spec.port) else {
                continue;
            };
            // A request belongs to the listener with the most specific matching hostname
            // on its port: names that a narrower listener covers are not served through a
            // broader one, whatever the route's host names (Gateway API conformance
            // GatewayHTTPListenerIsolation).
            let served_hosts: Vec<HostPattern> = served_hosts
                .into_iter()
                .filter(|h| {
                    !siblings.iter().any(|(p, proto, other)| {
                        *p == listener.spec.port
                            && *proto == listener.proto
                            && *other != listener.host
                            && hostname::covers(&listener.host, other)
                            && hostname::covers(other, h)
                    })
                })
                .collect();
            for site in &listener.sites {
                for host in &served_hosts {
                    served.push((*site, port, host.clone(), listener.backend_client.clone()));
                }
            }
        }
        if !named {
            Condition::no(
                "Accepted",
                "NoMatchingParent",
                "no listener of the Gateway has that sectionName / port",
            )
        } else if !allowed {
            Condition::no(
                "Accepted",
                "NotAllowedByListeners",
                "no listener of the Gateway allows routes of this kind from this namespace",
            )
        } else if !attached {
            Condition::no(
                "Accepted",
                "NoMatchingListenerHostname",
                "no host name of the route matches a listener's hostname",
            )
        } else {
            Condition::yes("Accepted", "Accepted", "accepted by sluice")
        }
    }

    /// Whether `listener` lets an HTTPRoute of `namespace` attach.
    fn allows(&self, listener: &OurListener<'_>, namespace: &str) -> bool {
        match listener.from {
            AllowedFrom::Same => namespace == listener.namespace,
            AllowedFrom::All => true,
            AllowedFrom::Selector(selector) => {
                selector_matches(selector, self.namespace_labels(namespace))
            }
        }
    }

    /// The labels of namespace `name`, if it is known.
    fn namespace_labels(&self, name: &str) -> Option<&BTreeMap<String, String>> {
        self.inputs
            .namespaces
            .iter()
            .find(|n: &&Arc<Namespace>| n.metadata.name.as_deref() == Some(name))
            .and_then(|n| n.metadata.labels.as_ref())
    }

    /// `ResolvedRefs` of a route (the same for every parent).
    fn route_refs(&self, kind: &str, route: &HttpRoute) -> Condition {
        let namespace = route.metadata.namespace.as_deref().unwrap_or("");
        for (r, rule) in route.spec.rules.iter().enumerate() {
            let mirrors = rule.filters.iter().enumerate().filter_map(|(f, filter)| {
                Some((
                    format!("spec.rules[{r}].filters[{f}].requestMirror.backendRef"),
                    &filter.request_mirror.as_ref()?.backend_ref,
                ))
            });
            let refs = rule
                .backend_refs
                .iter()
                .enumerate()
                .map(|(b, backend)| {
                    (
                        format!("spec.rules[{r}].backendRefs[{b}]"),
                        &backend.backend,
                    )
                })
                .chain(mirrors);
            for (field, backend) in refs {
                if let Err((reason, why)) = self.check_backend(kind, namespace, backend) {
                    return Condition::no("ResolvedRefs", reason, format!("{field}: {why}"));
                }
            }
        }
        Condition::yes("ResolvedRefs", "ResolvedRefs", "all references resolved")
    }

    /// Checks one backend reference: the Service port it names.
    fn check_backend(
        &self,
        kind: &str,
        namespace: &str,
        backend: &BackendObjectReference,
    ) -> Result<ServiceRef, (&'static str, String)> {
        if !backend.group.as_deref().unwrap_or("").is_empty()
            || backend.kind.as_deref().unwrap_or("Service") != "Service"
        {
            return Err((
                "InvalidKind",
                format!(
                    "{}/{} is not a core Service; sluice routes to Services only",
                    backend.group.as_deref().unwrap_or(""),
                    backend.kind.as_deref().unwrap_or("Service")
                ),
            ));
        }
        let target_ns = backend.namespace.as_deref().unwrap_or(namespace);
        if target_ns != namespace
            && !self.granted(kind, namespace, target_ns, "", "Service", &backend.name)
        {
            return Err((
                "RefNotPermitted",
                format!(
                    "Service {target_ns}/{} is in another namespace and no ReferenceGrant there \
                     allows it",
                    backend.name
                ),
            ));
        }
        let Some(port) = backend.port else {
            return Err((
                "BackendNotFound",
                "port is required for a Service".to_owned(),
            ));
        };
        let sref = ServiceRef {
            namespace: target_ns.to_owned(),
            name: backend.name.clone(),
            port: PortRef::Number(port),
        };
        match self.services.check(&sref) {
            Ok(_) => Ok(sref),
            Err(problem) => Err(("BackendNotFound", problem.detail)),
        }
    }

    /// A rule's `backendRefs` with their weights (default 1); a reference that cannot be
    /// used gets a placeholder backend and is marked unusable.
    fn weighted(
        &self,
        kind: &str,
        namespace: &str,
        refs: &[super::types::HttpBackendRef],
        backends: &mut BackendRegistry,
    ) -> Vec<WeightedBackend> {
        refs.iter()
            .map(|backend| {
                let weight = u32::try_from(backend.weight.unwrap_or(1)).unwrap_or(0);
                let (target, usable) = match self.check_backend(kind, namespace, &backend.backend) {
                    Ok(sref) => (backends.get(self.services, sref), true),
                    Err(_) => (
                        backends.placeholder(written_ref(namespace, &backend.backend)),
                        false,
                    ),
                };
                WeightedBackend {
                    backend: target,
                    weight,
                    usable,
                    entry: None,
                }
            })
            .collect()
    }

    /// Adds a TCPRoute's or TLSRoute's backends to the sockets it is served on, under each
    /// host name (TLS: SNI) it is served for; the oldest route keeps a socket and name that
    /// two claim.
    fn add_streams(
        &self,
        kind: &'static str,
        route: &HttpRoute,
        specs: &[HttpRouteRule],
        served: &[Served],
        backends: &mut BackendRegistry,
        streams: &mut HashMap<SocketAddr, StreamRoutes>,
    ) {
        let namespace = route.metadata.namespace.as_deref().unwrap_or("");
        let refs = specs.first().map_or(&[][..], |rule| &rule.backend_refs);
        let split = self.weighted(kind, namespace, refs, backends);
        let source = object(kind, &route.metadata);
        let targets = [false, true].map(|terminate| {
            Arc::new(StreamTarget {
                split: split.clone(),
                source: source.clone(),
                terminate,
            })
        });
        for (site, _, host, _) in served {
            let Site::Own(addr, proto) = site else {
                continue;
            };
            if !proto.stream() {
                continue;
            }
            let routes = streams.entry(*addr).or_default();
            let target = &targets[usize::from(*proto == Proto::TlsTerminate)];
            let new = || Arc::clone(target);
            match host {
                HostPattern::Exact(h) => {
                    routes.exact.entry(Key::new(h)).or_insert_with(new);
                }
                HostPattern::Wildcard(s) => {
                    routes.wildcard.entry(Key::new(s)).or_insert_with(new);
                }
                HostPattern::Any => {
                    routes.any.get_or_insert_with(new);
                }
            }
        }
    }

    /// Adds the entries of a route's rules on every (protocol, host name) it is served on.
    #[allow(clippy::too_many_arguments)]
    fn add_rules(
        &self,
        kind: &'static str,
        route: &HttpRoute,
        specs: &[HttpRouteRule],
        rules: &[RuleOut],
        served: &[Served],
        builders: &mut HashMap<(Site, HostPattern), RuleSetBuilder>,
        regexes: &mut HashMap<String, regex::Regex>,
        backends: &mut BackendRegistry,
        table: &mut RouteTable,
    ) {
        let namespace = route.metadata.namespace.as_deref().unwrap_or("");
        let source = object(kind, &route.metadata);
        let age = Age::of(&route.metadata);
        // Entries are shared by the host names of one listener port (and Gateways that
        // show backends the same client certificate).
        let mut entry_of: HashMap<(usize, usize, u16, usize), u32> = HashMap::new();
        for (r, (rule, spec)) in rules.iter().zip(specs).enumerate() {
            // Backends of the rule.
            let split = self.weighted(kind, namespace, &spec.backend_refs, backends);
            let mirrors: Vec<Mirror> = rule
                .mirrors
                .iter()
                .filter_map(|m| {
                    let filter = spec.filters.get(m.filter)?.request_mirror.as_ref()?;
                    let sref = self
                        .check_backend(kind, namespace, &filter.backend_ref)
                        .ok()?;
                    Some(Mirror {
                        backend: backends.get(self.services, sref),
                        numerator: m.numerator,
                        denominator: m.denominator.max(1),
                    })
                })
                .collect();
            let total: u64 = split.iter().map(|b| u64::from(b.weight)).sum();
            let fixed_status = (split.is_empty() || total == 0).then_some(500);
            let backend = split
                .first()
                .map(|b| Arc::clone(&b.backend))
                .unwrap_or_else(|| {
                    backends.placeholder(written_ref(namespace, &BackendObjectReference::default()))
                });
            // One usable backend without filters of its own: the plain path, no draw.
            let own_filters = rule.backend_edits.iter().any(Option::is_some);
            let split =
                if split.len() == 1 && split[0].usable && split[0].weight > 0 && !own_filters {
                    Vec::new()
                } else {
                    split
                };
            for (m, matched) in rule.matches.iter().enumerate() {
                if let PathCond::Regex(p) = &matched.path
                    && !regexes.contains_key(p)
                    && let Some(re) = full_match(p)
                {
                    regexes.insert(p.clone(), re);
                }
                for (site, port, host, client) in served {
                    let client_key = client.as_ref().map_or(0, |c| Arc::as_ptr(c) as usize);
                    let entry = *entry_of
                        .entry((r, m, *port, client_key))
                        .or_insert_with(|| {
                            let mut policy: Policy = rule.policy.clone();
                            policy.backend_client_certificate = client.clone();
                            policy.request_redirect =
                                rule.redirect.as_ref().map(|spec| RequestRedirect {
                                    scheme: spec.scheme.clone(),
                                    hostname: spec.hostname.clone(),
                                    port: spec.port,
                                    path: spec.path.as_ref().map(|p| p.for_match(&matched.path)),
                                    status: spec.status,
                                    listener_port: *port,
                                });
                            policy.path_rewrite = rule
                                .rewrite_path
                                .as_ref()
                                .map(|p| p.for_match(&matched.path));
                            let mut split = split.clone();
                            for (target, edits) in split.iter_mut().zip(&rule.backend_edits) {
                                let Some(edits) = edits else { continue };
                                // The entry of requests drawn for this backend: the rule's,
                                // with the backendRef's filters after the rule's.
                                target.entry = Some(table.entries.len());
                                table.entries.push(Arc::new(RouteEntry {
                                    backend: Arc::clone(&target.backend),
                                    policy: Policy::shared(edits.applied_to(&policy)),
                                    source: source.clone(),
                                    rewrite: None,
                                    fallback: None,
                                    canary: None,
                                    split: Vec::new(),
                                    fixed_status: None,
                                    mirrors: mirrors.clone(),
                                    rule: Some(RuleIndex {
                                        rule: r,
                                        matched: m,
                                    }),
                                }));
                            }
                            let id = table.entries.len() as u32;
                            table.entries.push(Arc::new(RouteEntry {
                                backend: Arc::clone(&backend),
                                policy: Policy::shared(policy),
                                source: source.clone(),
                                rewrite: None,
                                fallback: None,
                                canary: None,
                                split,
                                fixed_status,
                                mirrors: mirrors.clone(),
                                rule: Some(RuleIndex {
                                    rule: r,
                                    matched: m,
                                }),
                            }));
                            id
                        });
                    let candidate = Candidate {
                        method: matched.method.as_deref().map(Into::into),
                        headers: build_conditions(&matched.headers),
                        query: build_conditions(&matched.query),
                        entry,
                    };
                    let precedence = Precedence {
                        no_method: matched.method.is_none(),
                        fewer_headers: usize::MAX - matched.headers.len(),
                        fewer_query: usize::MAX - matched.query.len(),
                        route: age.clone(),
                        rule: r,
                        matched: m,
                    };
                    builders.entry((*site, host.clone())).or_default().push(
                        matched.path.clone(),
                        precedence,
                        candidate,
                    );
                }
            }
        }
    }
}

/// Whether a listener's `Accepted` condition is True.
/// The status of one listener.
fn listener_status(l: &OurListener<'_>) -> ListenerStatus {
    ListenerStatus {
        name: l.spec.name.clone(),
        attached_routes: l.attached,
        supported_kinds: l.kinds.clone(),
        conditions: l.conditions.clone(),
        binds: l
            .sites
            .iter()
            .filter_map(|site| match site {
                Site::Own(addr, _) => Some(*addr),
                Site::Shared(_) => None,
            })
            .collect(),
    }
}

/// The status of each ListenerSet naming one of our Gateways (Gateway API ListenerSet
/// conformance): `NotAllowed` when its Gateway's `allowedListeners` keeps it out,
/// `ListenersNotValid` when none of its listeners is valid.
fn listener_set_statuses(
    sets: &[OurSet<'_>],
    listeners: &[OurListener<'_>],
) -> Vec<ListenerSetStatus> {
    sets.iter()
        .enumerate()
        .map(|(s, set)| {
            let own: Vec<&OurListener<'_>> = listeners
                .iter()
                .filter(|l| l.owner == Owner::ListenerSet(s))
                .collect();
            let conditions = if !set.allowed {
                let why = "the Gateway's spec.allowedListeners does not allow ListenerSets from \
                           this namespace";
                vec![
                    Condition::no("Accepted", "NotAllowed", why),
                    Condition::no("Programmed", "NotAllowed", why),
                ]
            } else if !own.iter().any(|l| l.usable) {
                let why = "no listener is valid; see status.listeners";
                vec![
                    Condition::no("Accepted", "ListenersNotValid", why),
                    Condition::no("Programmed", "ListenersNotValid", why),
                ]
            } else {
                vec![
                    Condition::yes("Accepted", "Accepted", "accepted by sluice"),
                    Condition::yes(
                        "Programmed",
                        "Programmed",
                        "served on its Gateway's addresses",
                    ),
                ]
            };
            ListenerSetStatus {
                listener_set: ObjectStatus {
                    object: object("ListenerSet", &set.set.metadata),
                    generation: set.set.metadata.generation,
                    conditions,
                },
                listeners: own.iter().map(|l| listener_status(l)).collect(),
            }
        })
        .collect()
}

fn listener_accepted(listener: &OurListener<'_>) -> bool {
    listener
        .conditions
        .iter()
        .any(|c| c.type_ == "Accepted" && c.status)
}

/// Whether a Gateway names `spec.infrastructure.parametersRef`, which sluice cannot honour.
fn has_parameters(gateway: &Gateway) -> bool {
    gateway
        .spec
        .infrastructure
        .as_ref()
        .is_some_and(|i| i.parameters_ref.is_some())
}

/// Where `listener` is served, given its Gateway's addresses.
fn sites(assigned: &Assigned, listener: &OurListener<'_>) -> Vec<Site> {
    let (Some(proto), Ok(port)) = (listener.proto, u16::try_from(listener.spec.port)) else {
        return Vec::new();
    };
    match assigned {
        // The proxy's shared listeners speak HTTP and HTTPS only.
        Assigned::Shared if proto.stream() => Vec::new(),
        Assigned::Shared => vec![Site::Shared(proto)],
        Assigned::Own(ips) => ips
            .iter()
            .map(|ip| Site::Own(SocketAddr::new(*ip, port), proto))
            .collect(),
        Assigned::Failed { .. } => Vec::new(),
    }
}

/// Listeners of one Gateway (its own, then its ListenerSets', in precedence order) that
/// share a port: different protocols conflict (`ProtocolConflict`), equal host names on one
/// protocol conflict (`HostnameConflict`). Within one object both listeners of a pair are
/// conflicted; across objects only the later one, which is then not Accepted either (Gateway
/// API ListenerSet conformance: the Gateway, then older ListenerSets, keep their listeners).
fn conflicts(listeners: &mut [OurListener<'_>]) {
    let n = listeners.len();
    let clash = |a: &OurListener<'_>, b: &OurListener<'_>| {
        if a.spec.port != b.spec.port {
            None
        } else if a.spec.protocol != b.spec.protocol {
            Some("ProtocolConflict")
        } else if a.host == b.host {
            Some("HostnameConflict")
        } else {
            None
        }
    };
    // First, in precedence order, a listener that clashes with an earlier one of another
    // object (not itself refused) is refused; it then clashes with nothing.
    let mut reasons: Vec<Option<(&'static str, bool)>> = vec![None; n];
    for i in 0..n {
        reasons[i] = (0..i)
            .filter(|&j| reasons[j].is_none() && listeners[j].owner != listeners[i].owner)
            .filter_map(|j| clash(&listeners[i], &listeners[j]))
            .min_by_key(|r| *r != "ProtocolConflict")
            .map(|r| (r, true));
    }
    // Then, within one object, both listeners of a clashing pair.
    let refused: Vec<bool> = reasons.iter().map(Option::is_some).collect();
    for i in 0..n {
        if refused[i] {
            continue;
        }
        reasons[i] = (0..n)
            .filter(|&j| j != i && !refused[j] && listeners[j].owner == listeners[i].owner)
            .filter_map(|j| clash(&listeners[i], &listeners[j]))
            .min_by_key(|r| *r != "ProtocolConflict")
            .map(|r| (r, false));
    }
    for (listener, reason) in listeners.iter_mut().zip(reasons) {
        let Some((reason, across)) = reason else {
            continue;
        };
        listener.attachable = false;
        listener.usable = false;
        for c in &mut listener.conditions {
            match c.type_ {
                "Conflicted" => {
                    *c = Condition::yes(
                        "Conflicted",
                        reason,
                        "another listener on this port conflicts",
                    );
                }
                "Programmed" if across => {
                    *c = Condition::no(
                        "Programmed",
                        reason,
                        "an earlier listener of the Gateway has this port and host name",
                    )
                }
                "Accepted" if across => {
                    *c = Condition::no(
                        "Accepted",
                        reason,
                        "an earlier listener of the Gateway has this port and host name",
                    )
                }
                "Programmed" => *c = Condition::no("Programmed", "Invalid", "conflicted"),
                _ => {}
            }
        }
    }
}

/// A `backendRef` as written, as the Service port it names (for a backend that stands in
/// for a reference that does not resolve).
fn written_ref(namespace: &str, backend: &BackendObjectReference) -> ServiceRef {
    ServiceRef {
        namespace: backend
            .namespace
            .clone()
            .unwrap_or_else(|| namespace.to_owned()),
        name: backend.name.clone(),
        port: PortRef::Number(backend.port.unwrap_or(0)),
    }
}

/// A label selector (matchLabels and matchExpressions) against a namespace's labels.
fn selector_matches(selector: &LabelSelector, labels: Option<&BTreeMap<String, String>>) -> bool {
    let get = |key: &str| labels.and_then(|l| l.get(key));
    selector
        .match_labels
        .iter()
        .flatten()
        .all(|(k, v)| get(k) == Some(v))
        && selector.match_expressions.iter().flatten().all(|e| {
            let values = e.values.as_deref().unwrap_or_default();
            match e.operator.as_str() {
                "In" => get(&e.key).is_some_and(|v| values.contains(v)),
                "NotIn" => get(&e.key).is_none_or(|v| !values.contains(v)),
                "Exists" => get(&e.key).is_some(),
                "DoesNotExist" => get(&e.key).is_none(),
                _ => false,
            }
        })
}

fn insert_host(rules: &mut HostRules, host: HostPattern, set: crate::rules::RuleSet) {
    match host {
        HostPattern::Exact(h) => {
            rules.exact.insert(Key::new(&h), Arc::new(set));
        }
        HostPattern::Wildcard(s) => {
            rules.wildcard.insert(Key::new(&s), Arc::new(set));
        }
        HostPattern::Any => rules.any = Some(Arc::new(set)),
    }
}

/// Listener certificates join the table's SNI maps where no Ingress claimed the name; a
/// listener without a host name provides the default certificate when there is none.
fn add_certificates(table: &mut RouteTable, certs: Vec<(HostPattern, Arc<TlsCertificate>)>) {
    for (host, cert) in certs {
        let cert = table.add_certificate(cert);
        match host {
            HostPattern::Exact(h) => {
                table.gateway_exact_certs.get_or_insert(Key::new(&h), cert);
            }
            HostPattern::Wildcard(s) => {
                table
                    .gateway_wildcard_certs
                    .get_or_insert(Key::new(&s), cert);
            }
            HostPattern::Any => {
                if table.default_certificate.is_none() {
                    table.default_certificate = Some(cert);
                }
            }
        }
    }
}

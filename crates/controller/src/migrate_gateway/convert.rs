//! Ingresses to Gateway API objects, as ingress2gateway's ingress-nginx provider maps them:
//! a Gateway per IngressClass, an HTTPRoute per Ingress and host, the annotations as
//! filters where Gateway API says the same (see `annotations.rs`). Pure: no I/O.

use super::annotations::{self, BackendProtocol, NotCarried, Settings};
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::networking::v1::{HTTPIngressPath, Ingress, IngressBackend};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use sluice_routing::gateway::{
    AllowedRoutes, BackendObjectReference, BackendTlsPolicy, BackendTlsPolicySpec,
    BackendTlsValidation, Gateway, GatewaySpec, GrpcMethodMatch, GrpcRoute, GrpcRouteMatch,
    GrpcRouteRule, GrpcRouteSpec, HttpBackendRef, HttpHeaderFilter, HttpHeaderMatch, HttpPathMatch,
    HttpPathModifier, HttpRequestRedirectFilter, HttpRoute, HttpRouteFilter, HttpRouteMatch,
    HttpRouteRule, HttpRouteSpec, HttpUrlRewriteFilter, Listener, ListenerTls, ObjectReference,
    ParentReference, PolicyTargetReference, ReferenceGrant, ReferenceGrantFrom, ReferenceGrantSpec,
    ReferenceGrantTo, RouteNamespaces, SecretObjectReference,
};
use sluice_routing::{LEGACY_CLASS_ANNOTATION, NGINX_PREFIX, SLUICE_PREFIX};
use std::collections::{BTreeMap, BTreeSet};

/// What the conversion assumes.
#[derive(Clone, Debug)]
pub struct ConvertOptions {
    /// `gatewayClassName` of every Gateway (`sluice`).
    pub gateway_class: String,
    /// The Gateways' namespace; `None`: the Ingresses' when they share one, else `default`.
    pub gateway_namespace: Option<String>,
    /// The class of Ingresses that name none (`--ingress-class`).
    pub default_class: String,
    /// Emit routes whose access restrictions cannot be carried with their backends.
    pub allow_open: bool,
    /// ingress-nginx's ConfigMap (`--configmap`): its annotation defaults and global
    /// restrictions apply to every Ingress, as they did in ingress-nginx.
    pub config_map: Option<ConfigMapInForce>,
}

/// ingress-nginx's ConfigMap as the conversion applies it.
#[derive(Clone, Debug)]
pub struct ConfigMapInForce {
    /// `namespace/name`, for the report.
    pub name: String,
    /// What its keys came to.
    pub config: sluice_routing::config_map::NginxConfig,
}

impl ConfigMapInForce {
    /// Adds to `settings` (read from `annotations`, the Ingress's `own` annotations with
    /// the ConfigMap's defaults) what the ConfigMap restricts on this Ingress: its
    /// defaults' restrictions are named as the ConfigMap's, and its global restrictions
    /// (`block-*`, the global external auth) join them. Left out, the route would answer
    /// everyone they kept out.
    fn restrict(
        &self,
        own: &BTreeMap<String, String>,
        annotations: &BTreeMap<String, String>,
        settings: &mut Settings,
    ) {
        let name = &self.name;
        for not_carried in &mut settings.not_carried {
            if !own.contains_key(&not_carried.what) && annotations.contains_key(&not_carried.what) {
                not_carried.what = format!("{} (default of ConfigMap {name})", not_carried.what);
            }
        }
        for restriction in &mut settings.restrictions {
            if !own.contains_key(restriction.as_str()) {
                *restriction = format!("{restriction} (ConfigMap {name})");
            }
        }
        let config = &self.config;
        let global = [
            (
                "block-cidrs",
                !config.block_cidrs.is_empty(),
                "client addresses",
            ),
            (
                "block-user-agents",
                !config.block_user_agents.is_empty(),
                "User-Agents",
            ),
            (
                "block-referers",
                !config.block_referers.is_empty(),
                "Referers",
            ),
        ];
        for (key, set, what) in global {
            if !set {
                continue;
            }
            settings
                .restrictions
                .push(format!("{key} (ConfigMap {name})"));
            settings.not_carried.push(NotCarried {
                what: format!("ConfigMap {name} {key}"),
                why: format!(
                    "refuses these {what} on every route and has no Gateway API form: emitted \
                     as is, the route would answer them"
                ),
            });
        }
        if config.global_auth_guards(annotations) {
            settings
                .restrictions
                .push(format!("global-auth-url (ConfigMap {name})"));
            settings.not_carried.push(NotCarried {
                what: format!("ConfigMap {name} global-auth-url"),
                why: "the global external auth guards this Ingress (it has no auth-url of its \
                      own and does not set enable-global-auth: \"false\") and has no Gateway API \
                      form: emitted as is, the route would answer everyone"
                    .to_owned(),
            });
        }
    }
}

/// One emitted object.
#[derive(Clone, Debug, PartialEq)]
pub enum Object {
    /// One per IngressClass.
    Gateway(Box<Gateway>),
    /// Lets a Gateway use a Secret of another namespace.
    ReferenceGrant(ReferenceGrant),
    /// Per Ingress (and host).
    HttpRoute(HttpRoute),
    /// Per Ingress with `backend-protocol: GRPC(S)`.
    GrpcRoute(GrpcRoute),
    /// Per Service spoken to over TLS.
    BackendTlsPolicy(Box<BackendTlsPolicy>),
}

impl Object {
    /// `kind`.
    pub fn kind(&self) -> &'static str {
        match self {
            Object::Gateway(_) => "Gateway",
            Object::ReferenceGrant(_) => "ReferenceGrant",
            Object::HttpRoute(_) => "HTTPRoute",
            Object::GrpcRoute(_) => "GRPCRoute",
            Object::BackendTlsPolicy(_) => "BackendTLSPolicy",
        }
    }

    /// The object's metadata.
    pub fn metadata(&self) -> &ObjectMeta {
        match self {
            Object::Gateway(o) => &o.metadata,
            Object::ReferenceGrant(o) => &o.metadata,
            Object::HttpRoute(o) => &o.metadata,
            Object::GrpcRoute(o) => &o.metadata,
            Object::BackendTlsPolicy(o) => &o.metadata,
        }
    }

    /// `(kind order, namespace, name)`: the output order.
    fn sort_key(&self) -> (usize, String, String) {
        let rank = match self {
            Object::Gateway(_) => 0,
            Object::ReferenceGrant(_) => 1,
            Object::HttpRoute(_) => 2,
            Object::GrpcRoute(_) => 3,
            Object::BackendTlsPolicy(_) => 4,
        };
        let m = self.metadata();
        (
            rank,
            m.namespace.clone().unwrap_or_default(),
            m.name.clone().unwrap_or_default(),
        )
    }

    /// `Kind namespace/name`.
    pub fn display_name(&self) -> String {
        let m = self.metadata();
        format!(
            "{} {}/{}",
            self.kind(),
            m.namespace.as_deref().unwrap_or(""),
            m.name.as_deref().unwrap_or("")
        )
    }
}

/// An object and the comment lines written above it.
#[derive(Clone, Debug, PartialEq)]
pub struct Emitted {
    /// The object.
    pub object: Object,
    /// Why it looks as it does (e.g. why a route has no backends).
    pub comments: Vec<String>,
}

/// What became of one Ingress.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct IngressOutcome {
    /// `metadata.namespace`.
    pub namespace: String,
    /// `metadata.name`.
    pub name: String,
    /// The objects it became (`Kind namespace/name`).
    pub objects: Vec<String>,
    /// `annotation: what it became`.
    pub carried: Vec<String>,
    /// What the objects do not say.
    pub not_carried: Vec<NotCarried>,
    /// It restricts access in ways Gateway API cannot say.
    pub restricts_access: bool,
    /// Its routes were emitted without backends (closed) for that reason.
    pub closed: bool,
}

/// The result of [`convert`].
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Conversion {
    /// Sorted by kind (Gateway, ReferenceGrant, HTTPRoute, GRPCRoute, BackendTLSPolicy),
    /// namespace and name.
    pub objects: Vec<Emitted>,
    /// Sorted by namespace and name.
    pub ingresses: Vec<IngressOutcome>,
}

impl Conversion {
    /// Whether every Ingress was carried whole.
    pub fn complete(&self) -> bool {
        self.ingresses.iter().all(|i| i.not_carried.is_empty())
    }
}

/// The listener every route is attached to for plain HTTP.
pub const HTTP_LISTENER: &str = "http";

/// The HTTPS listener of TLS host `host`.
pub fn https_listener(host: &str) -> String {
    format!("https-{}", host.replace('*', "wildcard"))
}

/// A name part from a host: `*.a.test` -> `wildcard.a.test`.
fn host_part(host: &str) -> String {
    host.replace('*', "wildcard")
}

fn meta(namespace: &str, name: &str) -> ObjectMeta {
    ObjectMeta {
        namespace: Some(namespace.to_owned()),
        name: Some(name.to_owned()),
        ..ObjectMeta::default()
    }
}

fn annotation<'a>(ingress: &'a Ingress, name: &str) -> Option<&'a str> {
    let a = ingress.metadata.annotations.as_ref()?;
    a.get(&format!("{SLUICE_PREFIX}{name}"))
        .or_else(|| a.get(&format!("{NGINX_PREFIX}{name}")))
        .map(|v| v.trim())
}

fn class_of(ingress: &Ingress, default: &str) -> String {
    ingress
        .spec
        .as_ref()
        .and_then(|s| s.ingress_class_name.clone())
        .filter(|c| !c.is_empty())
        .or_else(|| {
            ingress
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(LEGACY_CLASS_ANNOTATION).cloned())
        })
        .unwrap_or_else(|| default.to_owned())
}

fn ns_name(ingress: &Ingress) -> (String, String) {
    (
        ingress
            .metadata
            .namespace
            .clone()
            .unwrap_or_else(|| "default".into()),
        ingress.metadata.name.clone().unwrap_or_default(),
    )
}

/// A canary Ingress's backend for one host and path, and how it is chosen.
#[derive(Clone, Debug)]
struct Canary {
    /// `namespace/name` of the canary Ingress.
    owner: (String, String),
    backend: HttpBackendRef,
    weight: Option<(i32, i32)>,
    header: Option<String>,
    header_value: Option<String>,
    header_pattern: Option<String>,
    used: bool,
}

/// Resolves Ingress backends against the Services of the input.
struct Backends<'a> {
    services: &'a [Service],
}

impl Backends<'_> {
    /// The backendRef of `backend` in `namespace`, or why it has none.
    fn resolve(&self, namespace: &str, backend: &IngressBackend) -> Result<HttpBackendRef, String> {
        let Some(service) = &backend.service else {
            return Err(
                "a resource backend has no Gateway API form (backendRefs name Services)".into(),
            );
        };
        let port = service.port.as_ref();
        let number = match (
            port.and_then(|p| p.number),
            port.and_then(|p| p.name.as_deref()),
        ) {
            (Some(n), _) => n,
            (None, Some(port_name)) => self
                .services
                .iter()
                .find(|s| {
                    s.metadata.namespace.as_deref().unwrap_or("default") == namespace
                        && s.metadata.name.as_deref() == Some(service.name.as_str())
                })
                .and_then(|s| s.spec.as_ref()?.ports.as_ref())
                .and_then(|ports| ports.iter().find(|p| p.name.as_deref() == Some(port_name)))
                .map(|p| p.port)
                .ok_or_else(|| {
                    format!(
                        "port name {port_name:?} of Service {namespace}/{}: the Service is not \
                         in the input, so the port number is unknown: the rule has no \
                         backendRefs (500) until you add one with the port",
                        service.name
                    )
                })?,
            (None, None) => return Err(format!("Service {} has no port", service.name)),
        };
        Ok(HttpBackendRef {
            backend: BackendObjectReference {
                name: service.name.clone(),
                port: Some(number),
                ..BackendObjectReference::default()
            },
            weight: None,
            filters: Vec::new(),
        })
    }
}

/// Regex-escapes `text` (the `regex` crate's meta characters).
fn regex_escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if "\\.+*?()|[]{}^$#&-~".contains(c) {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// One Ingress path as a match, and the path rewrite that goes with it.
struct PathOut {
    matched: HttpPathMatch,
    rewrite: Option<HttpPathModifier>,
}

/// The match for `path` of `path_type` on a host with (`regex_host`) or without regex
/// paths, with `rewrite_target`; notes what differs.
fn path_match(
    path: &str,
    path_type: &str,
    regex_host: bool,
    rewrite_target: Option<&str>,
    notes: &mut Vec<String>,
) -> Result<PathOut, String> {
    let path = if path.is_empty() { "/" } else { path };
    let exact = path_type == "Exact";
    // ingress-nginx's rewrite idiom: `/prefix(/|$)(.*)` to `/target/$2`.
    if let Some(target) = rewrite_target {
        if !exact
            && let Some(prefix) = path.strip_suffix("(/|$)(.*)")
            && let Some(replacement) = target.strip_suffix("$2")
            && replacement.ends_with('/')
            && !prefix.is_empty()
            && !prefix.contains(|c: char| "\\.+*?()|[]{}^$".contains(c))
            && !replacement.contains('$')
        {
            notes.push(format!(
                "{path} with rewrite-target {target}: PathPrefix {prefix} with URLRewrite \
                 ReplacePrefixMatch {replacement} (the same paths; matched case-sensitively, \
                 where nginx's regex location ignores case)"
            ));
            return Ok(PathOut {
                matched: HttpPathMatch {
                    type_: Some("PathPrefix".into()),
                    value: Some(prefix.to_owned()),
                },
                rewrite: Some(HttpPathModifier {
                    type_: "ReplacePrefixMatch".into(),
                    replace_full_path: None,
                    replace_prefix_match: Some(replacement.to_owned()),
                }),
            });
        }
        if target.contains('$') {
            return Err(format!(
                "rewrite-target {target:?} uses regex captures of {path:?}: Gateway API's \
                 URLRewrite has no captures (only ReplaceFullPath and ReplacePrefixMatch)"
            ));
        }
        if !target.starts_with('/') {
            return Err(format!("rewrite-target {target:?} is not a path"));
        }
    }
    let matched = if exact {
        HttpPathMatch {
            type_: Some("Exact".into()),
            value: Some(path.to_owned()),
        }
    } else if regex_host {
        notes.push(format!(
            "{path} ({path_type}) on a host with use-regex or rewrite-target: \
             RegularExpression (?i){path}.* (nginx's case-insensitive regex location, \
             anchored at the start)"
        ));
        HttpPathMatch {
            type_: Some("RegularExpression".into()),
            value: Some(format!("(?i)(?:{path}).*")),
        }
    } else if path_type == "ImplementationSpecific" {
        notes.push(format!(
            "{path} (ImplementationSpecific): RegularExpression {}.* (a string prefix, as \
             nginx's location {path})",
            regex_escape(path)
        ));
        HttpPathMatch {
            type_: Some("RegularExpression".into()),
            value: Some(format!("{}.*", regex_escape(path))),
        }
    } else {
        let trimmed = if path.len() > 1 {
            path.trim_end_matches('/')
        } else {
            path
        };
        HttpPathMatch {
            type_: Some("PathPrefix".into()),
            value: Some(if trimmed.is_empty() { "/" } else { trimmed }.to_owned()),
        }
    };
    // nginx's `rewrite` replaces the whole URI with a target without captures.
    let rewrite = rewrite_target.map(|target| HttpPathModifier {
        type_: "ReplaceFullPath".into(),
        replace_full_path: Some(target.to_owned()),
        replace_prefix_match: None,
    });
    Ok(PathOut { matched, rewrite })
}

/// The filters every rule of an Ingress gets, with `rewrite` for its path.
fn rule_filters(s: &Settings, rewrite: Option<HttpPathModifier>) -> Vec<HttpRouteFilter> {
    let mut filters = Vec::new();
    if !s.request_set.is_empty() {
        filters.push(HttpRouteFilter {
            type_: "RequestHeaderModifier".into(),
            request_header_modifier: Some(HttpHeaderFilter {
                set: s.request_set.clone(),
                ..HttpHeaderFilter::default()
            }),
            ..HttpRouteFilter::default()
        });
    }
    if !s.response_set.is_empty() {
        filters.push(HttpRouteFilter {
            type_: "ResponseHeaderModifier".into(),
            response_header_modifier: Some(HttpHeaderFilter {
                set: s.response_set.clone(),
                ..HttpHeaderFilter::default()
            }),
            ..HttpRouteFilter::default()
        });
    }
    if s.upstream_vhost.is_some() || rewrite.is_some() {
        filters.push(HttpRouteFilter {
            type_: "URLRewrite".into(),
            url_rewrite: Some(HttpUrlRewriteFilter {
                hostname: s.upstream_vhost.clone(),
                path: rewrite,
            }),
            ..HttpRouteFilter::default()
        });
    }
    if let Some(cors) = &s.cors {
        filters.push(HttpRouteFilter {
            type_: "CORS".into(),
            cors: Some(cors.clone()),
            ..HttpRouteFilter::default()
        });
    }
    if let Some(mirror) = &s.mirror {
        filters.push(HttpRouteFilter {
            type_: "RequestMirror".into(),
            request_mirror: Some(mirror.clone()),
            ..HttpRouteFilter::default()
        });
    }
    filters
}

fn redirect_rule(filter: HttpRequestRedirectFilter, matches: Vec<HttpRouteMatch>) -> HttpRouteRule {
    HttpRouteRule {
        matches,
        filters: vec![HttpRouteFilter {
            type_: "RequestRedirect".into(),
            request_redirect: Some(filter),
            ..HttpRouteFilter::default()
        }],
        ..HttpRouteRule::default()
    }
}

fn path_only(matched: HttpPathMatch) -> HttpRouteMatch {
    HttpRouteMatch {
        path: Some(matched),
        ..HttpRouteMatch::default()
    }
}

/// The Gateway of one class, collected while routes are made.
#[derive(Default)]
struct GatewayPlan {
    namespace: String,
    /// host -> (Secret namespace, Secret name).
    tls: BTreeMap<String, (String, String)>,
    other_namespaces: bool,
}

/// Converts `ingresses` (with the `services` they name, for named ports).
pub fn convert(
    ingresses: &[Ingress],
    services: &[Service],
    options: &ConvertOptions,
) -> Conversion {
    let mut sorted: Vec<&Ingress> = ingresses.iter().collect();
    sorted.sort_by_key(|i| ns_name(i));
    let backends = Backends { services };
    let is_canary = |i: &Ingress| annotation(i, "canary") == Some("true");

    // Hosts where ingress-nginx turns Prefix/ImplementationSpecific paths into regex
    // locations: some Ingress of the host has use-regex or rewrite-target.
    let mut regex_hosts: BTreeSet<(String, String)> = BTreeSet::new();
    for ingress in &sorted {
        if annotation(ingress, "use-regex") == Some("true")
            || annotation(ingress, "rewrite-target").is_some()
        {
            for rule in ingress.spec.iter().flat_map(|s| s.rules.iter().flatten()) {
                let class = class_of(ingress, &options.default_class);
                regex_hosts.insert((class, rule.host.clone().unwrap_or_default()));
            }
        }
    }

    // Gateways: one per class, in the given namespace, else the Ingresses' common one.
    let mut plans: BTreeMap<String, GatewayPlan> = BTreeMap::new();
    let mut class_namespaces: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for ingress in &sorted {
        let class = class_of(ingress, &options.default_class);
        class_namespaces
            .entry(class)
            .or_default()
            .insert(ns_name(ingress).0);
    }
    for (class, namespaces) in &class_namespaces {
        let namespace = options.gateway_namespace.clone().unwrap_or_else(|| {
            if namespaces.len() == 1 {
                namespaces.iter().next().cloned().unwrap_or_default()
            } else {
                "default".into()
            }
        });
        let other_namespaces = namespaces.iter().any(|n| *n != namespace);
        plans.insert(
            class.clone(),
            GatewayPlan {
                namespace,
                other_namespaces,
                ..GatewayPlan::default()
            },
        );
    }

    // Canary backends by (class, namespace, host, path).
    let mut canaries: BTreeMap<(String, String, String, String), Canary> = BTreeMap::new();
    let mut outcomes: BTreeMap<(String, String), IngressOutcome> = BTreeMap::new();
    for ingress in sorted.iter().filter(|i| is_canary(i)) {
        let (namespace, name) = ns_name(ingress);
        let class = class_of(ingress, &options.default_class);
        let mut outcome = IngressOutcome {
            namespace: namespace.clone(),
            name: name.clone(),
            ..IngressOutcome::default()
        };
        let weight = annotation(ingress, "canary-weight").and_then(|w| w.parse::<i32>().ok());
        let total = annotation(ingress, "canary-weight-total")
            .and_then(|w| w.parse::<i32>().ok())
            .filter(|t| *t > 0)
            .unwrap_or(100);
        let keys = ingress.metadata.annotations.clone().unwrap_or_default();
        for key in keys.keys() {
            let name = key
                .strip_prefix(SLUICE_PREFIX)
                .or_else(|| key.strip_prefix(NGINX_PREFIX));
            match name {
                Some("canary" | "canary-weight" | "canary-weight-total") => outcome.carried.push(
                    format!("{key}: weighted backendRefs of the main Ingress's rule"),
                ),
                Some(
                    "canary-by-header" | "canary-by-header-value" | "canary-by-header-pattern",
                ) => outcome
                    .carried
                    .push(format!("{key}: a header-matched rule to the canary")),
                Some("canary-by-cookie") => outcome.not_carried.push(NotCarried {
                    what: key.clone(),
                    why: "HTTPRoute matches no cookies: requests with the cookie go by weight"
                        .into(),
                }),
                Some(_) => outcome.not_carried.push(NotCarried {
                    what: key.clone(),
                    why: "a canary Ingress contributes its backends only; its other \
                          annotations are the main Ingress's"
                        .into(),
                }),
                None => {}
            }
        }
        for (r, rule) in ingress
            .spec
            .iter()
            .flat_map(|s| s.rules.iter().flatten())
            .enumerate()
        {
            let host = rule.host.clone().unwrap_or_default();
            for (p, path) in rule.http.iter().flat_map(|h| h.paths.iter()).enumerate() {
                match backends.resolve(&namespace, &path.backend) {
                    Ok(backend) => {
                        let key = (
                            class.clone(),
                            namespace.clone(),
                            host.clone(),
                            path.path.clone().unwrap_or_else(|| "/".into()),
                        );
                        canaries.entry(key).or_insert(Canary {
                            owner: (namespace.clone(), name.clone()),
                            backend,
                            weight: weight.map(|w| (w.clamp(0, total), total)),
                            header: annotation(ingress, "canary-by-header").map(str::to_owned),
                            header_value: annotation(ingress, "canary-by-header-value")
                                .map(str::to_owned),
                            header_pattern: annotation(ingress, "canary-by-header-pattern")
                                .map(str::to_owned),
                            used: false,
                        });
                    }
                    Err(why) => outcome.not_carried.push(NotCarried {
                        what: format!("spec.rules[{r}].http.paths[{p}]"),
                        why,
                    }),
                }
            }
        }
        outcomes.insert((namespace, name), outcome);
    }

    // The certificate of each TLS host, first Ingress first; the others' are said.
    let mut tls_problems: BTreeMap<(String, String), Vec<NotCarried>> = BTreeMap::new();
    for ingress in sorted.iter().filter(|i| !is_canary(i)) {
        let (namespace, name) = ns_name(ingress);
        let Some(plan) = plans.get_mut(&class_of(ingress, &options.default_class)) else {
            continue;
        };
        let problems = tls_problems
            .entry((namespace.clone(), name.clone()))
            .or_default();
        for (t, tls) in ingress
            .spec
            .iter()
            .flat_map(|s| s.tls.iter().flatten())
            .enumerate()
        {
            for host in tls.hosts.iter().flatten() {
                match &tls.secret_name {
                    Some(secret) if !secret.is_empty() => {
                        let entry = plan
                            .tls
                            .entry(host.clone())
                            .or_insert_with(|| (namespace.clone(), secret.clone()));
                        if *entry != (namespace.clone(), secret.clone()) {
                            problems.push(NotCarried {
                                what: format!("spec.tls[{t}]"),
                                why: format!(
                                    "host {host} already has Secret {}/{} on listener {}",
                                    entry.0,
                                    entry.1,
                                    https_listener(host)
                                ),
                            });
                        }
                    }
                    _ => problems.push(NotCarried {
                        what: format!("spec.tls[{t}]"),
                        why: format!(
                            "host {host} has no secretName (the default certificate): an HTTPS \
                             listener needs certificateRefs"
                        ),
                    }),
                }
            }
        }
    }

    let mut objects: Vec<Emitted> = Vec::new();
    let mut tls_policies: BTreeMap<(String, String), (Emitted, String)> = BTreeMap::new();
    for ingress in sorted.iter().filter(|i| !is_canary(i)) {
        let (namespace, name) = ns_name(ingress);
        let class = class_of(ingress, &options.default_class);
        let Some(plan) = plans.get(&class) else {
            continue;
        };
        let gateway_name = class.clone();
        let own = ingress.metadata.annotations.clone().unwrap_or_default();
        let annotations = match &options.config_map {
            Some(in_force) => in_force.config.with_annotation_defaults(&own),
            None => own.clone(),
        };
        let mut settings = annotations::read(&annotations);
        if let Some(in_force) = &options.config_map {
            in_force.restrict(&own, &annotations, &mut settings);
        }
        let mut outcome = IngressOutcome {
            namespace: namespace.clone(),
            name: name.clone(),
            carried: settings.carried.clone(),
            not_carried: settings.not_carried.clone(),
            restricts_access: !settings.restrictions.is_empty(),
            ..IngressOutcome::default()
        };
        let closed = outcome.restricts_access && !options.allow_open;
        outcome.closed = closed;
        let mut route_comments: Vec<String> = Vec::new();
        if outcome.restricts_access {
            let keys = settings.restrictions.join(", ");
            if closed {
                route_comments.push(format!(
                    "CLOSED: Ingress {namespace}/{name} restricts access ({keys}), which \
                     Gateway API cannot say; its rules have no backendRefs (answered 500) so \
                     that emitting it does not open access. Add your implementation's policy, \
                     then the backendRefs (or run with --allow-open)."
                ));
            } else {
                route_comments.push(format!(
                    "OPEN: Ingress {namespace}/{name} restricts access ({keys}), which Gateway \
                     API cannot say; emitted with --allow-open, this route answers everyone."
                ));
            }
        }
        let spec = ingress.spec.clone().unwrap_or_default();
        let gateway_ns = plan.namespace.clone();
        let parent = |section: &str| ParentReference {
            name: gateway_name.clone(),
            namespace: (gateway_ns != namespace).then(|| gateway_ns.clone()),
            section_name: Some(section.to_owned()),
            ..ParentReference::default()
        };

        // TLS is the host's (whichever Ingress gives it), as in ingress-nginx's servers.
        let tls_hosts: BTreeSet<String> = plan.tls.keys().cloned().collect();
        if let Some(problems) = tls_problems.remove(&(namespace.clone(), name.clone())) {
            outcome.not_carried.extend(problems);
        }

        // The paths of each host, in order.
        let mut hosts: BTreeMap<String, Vec<(usize, usize, &HTTPIngressPath)>> = BTreeMap::new();
        for (r, rule) in spec.rules.iter().flatten().enumerate() {
            let host = rule.host.clone().unwrap_or_default();
            let paths = hosts.entry(host).or_default();
            for (p, path) in rule.http.iter().flat_map(|h| h.paths.iter()).enumerate() {
                paths.push((r, p, path));
            }
        }
        let default_backend = match &spec.default_backend {
            None => None,
            Some(b) => match backends.resolve(&namespace, b) {
                Ok(b) => Some(b),
                Err(why) => {
                    outcome.not_carried.push(NotCarried {
                        what: "spec.defaultBackend".into(),
                        why,
                    });
                    None
                }
            },
        };
        let grpc = matches!(
            settings.protocol,
            BackendProtocol::Grpc | BackendProtocol::Grpcs
        );
        let many_hosts = hosts.len() > 1;
        let mut notes = Vec::new();
        let mut used_services: BTreeSet<String> = BTreeSet::new();
        for (host, paths) in &hosts {
            let route_name = if !many_hosts {
                name.clone()
            } else if host.is_empty() {
                format!("{name}-all-hosts")
            } else {
                format!("{name}-{}", host_part(host))
            };
            let regex_host = regex_hosts.contains(&(class.clone(), host.clone()));
            let mut rules: Vec<HttpRouteRule> = Vec::new();
            if let Some(root) = &settings.app_root {
                rules.push(redirect_rule(
                    HttpRequestRedirectFilter {
                        path: Some(HttpPathModifier {
                            type_: "ReplaceFullPath".into(),
                            replace_full_path: Some(root.clone()),
                            replace_prefix_match: None,
                        }),
                        status_code: Some(302),
                        ..HttpRequestRedirectFilter::default()
                    },
                    vec![path_only(HttpPathMatch {
                        type_: Some("Exact".into()),
                        value: Some("/".into()),
                    })],
                ));
            }
            let mut has_root = false;
            for &(r, p, path) in paths {
                let field = format!("spec.rules[{r}].http.paths[{p}]");
                let raw = path.path.clone().unwrap_or_else(|| "/".into());
                let out = match path_match(
                    &raw,
                    &path.path_type,
                    regex_host,
                    settings.rewrite_target.as_deref(),
                    &mut notes,
                ) {
                    Ok(out) => out,
                    Err(why) => {
                        outcome.not_carried.push(NotCarried { what: field, why });
                        continue;
                    }
                };
                if let Some(target) = &settings.rewrite_target
                    && out.rewrite.is_some()
                {
                    outcome.carried.push(format!(
                        "rewrite-target {target} for {raw}: URLRewrite path"
                    ));
                }
                has_root |= out.matched.type_.as_deref() == Some("PathPrefix")
                    && out.matched.value.as_deref() == Some("/");
                if let Some(redirect) = &settings.redirect {
                    rules.push(redirect_rule(
                        redirect.clone(),
                        vec![path_only(out.matched)],
                    ));
                    continue;
                }
                let main = match backends.resolve(&namespace, &path.backend) {
                    Ok(b) => b,
                    Err(why) => {
                        outcome.not_carried.push(NotCarried {
                            what: field.clone(),
                            why: why.clone(),
                        });
                        // The path keeps its rule, with no backendRefs (500) rather than
                        // falling through to a shorter path: the CRDs require a port.
                        rules.push(HttpRouteRule {
                            matches: vec![path_only(out.matched)],
                            filters: rule_filters(&settings, out.rewrite.clone()),
                            ..HttpRouteRule::default()
                        });
                        continue;
                    }
                };
                used_services.insert(main.backend.name.clone());
                let filters = rule_filters(&settings, out.rewrite.clone());
                let rule = |matched: HttpRouteMatch, refs: Vec<HttpBackendRef>| HttpRouteRule {
                    matches: vec![matched],
                    filters: filters.clone(),
                    backend_refs: if closed { Vec::new() } else { refs },
                    timeouts: settings.timeouts.clone(),
                    retry: settings.retry.clone(),
                };
                let canary_key = (class.clone(), namespace.clone(), host.clone(), raw.clone());
                let mut main_refs = vec![main.clone()];
                if let Some(canary) = canaries.get_mut(&canary_key) {
                    canary.used = true;
                    used_services.insert(canary.backend.backend.name.clone());
                    let header_match = |ty: Option<&str>, name: &str, value: &str| {
                        let mut m = path_only(out.matched.clone());
                        m.headers.push(HttpHeaderMatch {
                            type_: ty.map(str::to_owned),
                            name: name.to_owned(),
                            value: value.to_owned(),
                        });
                        m
                    };
                    if let Some(header) = &canary.header {
                        if let Some(value) = &canary.header_value {
                            rules.push(rule(
                                header_match(None, header, value),
                                vec![canary.backend.clone()],
                            ));
                        } else if let Some(pattern) = &canary.header_pattern {
                            rules.push(rule(
                                header_match(Some("RegularExpression"), header, pattern),
                                vec![canary.backend.clone()],
                            ));
                        } else {
                            rules.push(rule(
                                header_match(None, header, "always"),
                                vec![canary.backend.clone()],
                            ));
                            if canary.weight.is_some_and(|(w, _)| w > 0) {
                                rules.push(rule(
                                    header_match(None, header, "never"),
                                    vec![main.clone()],
                                ));
                            }
                        }
                    }
                    if let Some((w, total)) = canary.weight {
                        let mut m = main.clone();
                        m.weight = Some(total - w);
                        let mut c = canary.backend.clone();
                        c.weight = Some(w);
                        main_refs = vec![m, c];
                    }
                    outcome.carried.push(format!(
                        "canary Ingress {}/{} for {host}{raw}: {}",
                        canary.owner.0,
                        canary.owner.1,
                        match (canary.header.is_some(), canary.weight) {
                            (true, Some(_)) => "a header-matched rule and weighted backendRefs",
                            (true, None) => "a header-matched rule",
                            (false, _) => "weighted backendRefs",
                        }
                    ));
                }
                rules.push(rule(path_only(out.matched), main_refs));
            }
            if let Some(default) = &default_backend
                && !host.is_empty()
                && !has_root
                && settings.redirect.is_none()
            {
                rules.push(HttpRouteRule {
                    matches: vec![path_only(HttpPathMatch {
                        type_: Some("PathPrefix".into()),
                        value: Some("/".into()),
                    })],
                    backend_refs: if closed {
                        Vec::new()
                    } else {
                        vec![default.clone()]
                    },
                    ..HttpRouteRule::default()
                });
            }

            let tls = tls_hosts.contains(host);
            let redirect = !host.is_empty()
                && settings.redirect.is_none()
                && ((tls && settings.ssl_redirect) || settings.force_ssl_redirect);
            if settings.force_ssl_redirect && !tls && !host.is_empty() {
                outcome.not_carried.push(NotCarried {
                    what: "force-ssl-redirect".into(),
                    why: format!(
                        "host {host} has no TLS: no HTTPS listener to send the redirect to; add \
                         a spec.tls entry"
                    ),
                });
            }
            let redirect = redirect && tls && !rules.is_empty();
            let parents = if host.is_empty() {
                if !spec.tls.as_deref().unwrap_or_default().is_empty() {
                    notes.push("rules without host: on the HTTP listener only".into());
                }
                vec![parent(HTTP_LISTENER)]
            } else if redirect {
                vec![parent(&https_listener(host))]
            } else if tls {
                vec![parent(HTTP_LISTENER), parent(&https_listener(host))]
            } else {
                vec![parent(HTTP_LISTENER)]
            };
            let hostnames = if host.is_empty() {
                Vec::new()
            } else {
                vec![host.clone()]
            };
            if redirect {
                outcome.carried.push(format!(
                    "plain HTTP to {host}: 308 to HTTPS (ingress-nginx's ssl-redirect) by a \
                     redirect route on listener http; ingress-nginx drops the path's final \
                     `/` in it (/a/ to https://{host}/a), RequestRedirect keeps the path"
                ));
                let base = format!("{route_name}-https-redirect");
                for (i, chunk) in chunks(https_redirects(&rules)).into_iter().enumerate() {
                    let name_i = if i == 0 {
                        base.clone()
                    } else {
                        format!("{base}-{}", i + 1)
                    };
                    outcome
                        .objects
                        .push(format!("HTTPRoute {namespace}/{name_i}"));
                    objects.push(Emitted {
                        object: Object::HttpRoute(HttpRoute {
                            metadata: meta(&namespace, &name_i),
                            spec: HttpRouteSpec {
                                parent_refs: vec![parent(HTTP_LISTENER)],
                                hostnames: hostnames.clone(),
                                rules: chunk,
                            },
                            status: None,
                        }),
                        comments: vec![format!(
                            "HTTP to HTTPS for {host} (308, as ingress-nginx's ssl-redirect) \
                             of Ingress {namespace}/{name}"
                        )],
                    });
                }
            }
            let mut metadata = meta(&namespace, &route_name);
            if let Some(compression) = &settings.compression {
                metadata.annotations = Some(BTreeMap::from([(
                    format!("{SLUICE_PREFIX}compression"),
                    compression.clone(),
                )]));
            }
            let mut comments = vec![format!("from Ingress {namespace}/{name}")];
            comments.extend(route_comments.iter().cloned());
            // The CRDs allow 16 rules per route: more are split over routes of the same
            // host and parents (precedence between routes is the same as within one).
            let chunk_name = |i: usize| {
                if i == 0 {
                    route_name.clone()
                } else {
                    format!("{route_name}-{}", i + 1)
                }
            };
            if grpc {
                let mut grpc_rules = Vec::new();
                for rule in rules {
                    match grpc_rule(rule) {
                        Ok(r) => grpc_rules.push(r),
                        Err(why) => outcome.not_carried.push(NotCarried {
                            what: format!("host {host:?}"),
                            why,
                        }),
                    }
                }
                for (i, chunk) in chunks(grpc_rules).into_iter().enumerate() {
                    let mut metadata = metadata.clone();
                    metadata.name = Some(chunk_name(i));
                    outcome
                        .objects
                        .push(format!("GRPCRoute {namespace}/{}", chunk_name(i)));
                    objects.push(Emitted {
                        object: Object::GrpcRoute(GrpcRoute {
                            metadata,
                            spec: GrpcRouteSpec {
                                parent_refs: parents.clone(),
                                hostnames: hostnames.clone(),
                                rules: chunk,
                            },
                            status: None,
                        }),
                        comments: comments.clone(),
                    });
                }
            } else {
                for (i, chunk) in chunks(rules).into_iter().enumerate() {
                    let mut metadata = metadata.clone();
                    metadata.name = Some(chunk_name(i));
                    outcome
                        .objects
                        .push(format!("HTTPRoute {namespace}/{}", chunk_name(i)));
                    objects.push(Emitted {
                        object: Object::HttpRoute(HttpRoute {
                            metadata,
                            spec: HttpRouteSpec {
                                parent_refs: parents.clone(),
                                hostnames: hostnames.clone(),
                                rules: chunk,
                            },
                            status: None,
                        }),
                        comments: comments.clone(),
                    });
                }
            }
        }
        if let Some(default) = &default_backend {
            used_services.insert(default.backend.name.clone());
            let mut comments = vec![format!(
                "spec.defaultBackend of Ingress {namespace}/{name}: requests for hosts no route \
                 names"
            )];
            comments.extend(route_comments.iter().cloned());
            outcome
                .objects
                .push(format!("HTTPRoute {namespace}/{name}-default-backend"));
            objects.push(Emitted {
                object: Object::HttpRoute(HttpRoute {
                    metadata: meta(&namespace, &format!("{name}-default-backend")),
                    spec: HttpRouteSpec {
                        parent_refs: vec![ParentReference {
                            name: gateway_name.clone(),
                            namespace: (gateway_ns != namespace).then(|| gateway_ns.clone()),
                            ..ParentReference::default()
                        }],
                        hostnames: Vec::new(),
                        rules: vec![HttpRouteRule {
                            backend_refs: if closed {
                                Vec::new()
                            } else {
                                vec![default.clone()]
                            },
                            ..HttpRouteRule::default()
                        }],
                    },
                    status: None,
                }),
                comments,
            });
        }
        if matches!(
            settings.protocol,
            BackendProtocol::Https | BackendProtocol::Grpcs
        ) && settings.backend_tls.ca.is_some()
        {
            for service in &used_services {
                let policy = backend_tls_policy(&namespace, service, &settings);
                outcome.objects.push(format!(
                    "BackendTLSPolicy {namespace}/{service}-backend-tls"
                ));
                tls_policies
                    .entry((namespace.clone(), service.clone()))
                    .or_insert((policy, name.clone()));
            }
        }
        outcome.carried.extend(notes);
        outcomes.insert((namespace, name), outcome);
    }

    for ((_, _, host, path), canary) in &canaries {
        if !canary.used
            && let Some(outcome) = outcomes.get_mut(&canary.owner)
        {
            outcome.not_carried.push(NotCarried {
                what: format!("{host}{path}"),
                why: "no main Ingress serves this host and path: ingress-nginx sends the \
                      canary no traffic either"
                    .into(),
            });
        }
    }
    for (policy, _) in tls_policies.into_values() {
        objects.push(policy);
    }

    // Gateways and ReferenceGrants.
    for (class, plan) in &plans {
        let allowed = plan.other_namespaces.then(|| AllowedRoutes {
            namespaces: Some(RouteNamespaces {
                from: Some("All".into()),
                selector: None,
            }),
            kinds: Vec::new(),
        });
        let mut listeners = vec![Listener {
            name: HTTP_LISTENER.into(),
            hostname: None,
            port: 80,
            protocol: "HTTP".into(),
            tls: None,
            allowed_routes: allowed.clone(),
        }];
        let mut grants: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for (host, (secret_ns, secret)) in &plan.tls {
            listeners.push(Listener {
                name: https_listener(host),
                hostname: Some(host.clone()),
                port: 443,
                protocol: "HTTPS".into(),
                tls: Some(ListenerTls {
                    mode: None,
                    certificate_refs: vec![SecretObjectReference {
                        name: secret.clone(),
                        namespace: (*secret_ns != plan.namespace).then(|| secret_ns.clone()),
                        ..SecretObjectReference::default()
                    }],
                }),
                allowed_routes: allowed.clone(),
            });
            if *secret_ns != plan.namespace {
                grants
                    .entry(secret_ns.clone())
                    .or_default()
                    .insert(secret.clone());
            }
        }
        let mut gateway_comments = vec![format!(
            "the Ingresses of IngressClass {class}: HTTP on 80, HTTPS on 443 per TLS host"
        )];
        if listeners.len() > MAX_LISTENERS {
            gateway_comments.push(format!(
                "{} listeners: the CRD allows {MAX_LISTENERS}; move the HTTPS listeners of \
                 some hosts into ListenerSets",
                listeners.len()
            ));
        }
        objects.push(Emitted {
            object: Object::Gateway(Box::new(Gateway {
                metadata: meta(&plan.namespace, class),
                spec: GatewaySpec {
                    gateway_class_name: options.gateway_class.clone(),
                    listeners,
                    ..GatewaySpec::default()
                },
                status: None,
            })),
            comments: gateway_comments,
        });
        for (secret_ns, secrets) in grants {
            objects.push(Emitted {
                object: Object::ReferenceGrant(ReferenceGrant {
                    metadata: meta(
                        &secret_ns,
                        &format!("gateway-{}-{class}-certificates", plan.namespace),
                    ),
                    spec: ReferenceGrantSpec {
                        from: vec![ReferenceGrantFrom {
                            group: sluice_routing::gateway::GROUP.into(),
                            kind: "Gateway".into(),
                            namespace: plan.namespace.clone(),
                        }],
                        to: secrets
                            .into_iter()
                            .map(|name| ReferenceGrantTo {
                                group: String::new(),
                                kind: "Secret".into(),
                                name: Some(name),
                            })
                            .collect(),
                    },
                }),
                comments: vec![format!(
                    "Gateway {}/{class} may use these Secrets of {secret_ns}",
                    plan.namespace
                )],
            });
        }
    }

    objects.sort_by_key(|e| e.object.sort_key());
    let mut ingresses: Vec<IngressOutcome> = outcomes.into_values().collect();
    for outcome in &mut ingresses {
        outcome.objects.sort();
        outcome.carried.sort();
        outcome.carried.dedup();
        outcome
            .not_carried
            .sort_by(|a, b| a.what.cmp(&b.what).then(a.why.cmp(&b.why)));
        outcome.not_carried.dedup();
    }
    Conversion { objects, ingresses }
}

/// The HTTP to HTTPS redirect (308, ingress-nginx's `ssl-redirect`) of the requests
/// `rules` match: the same matches, each a rule, so that other Ingresses' paths of the host
/// keep their own answer on plain HTTP.
fn https_redirects(rules: &[HttpRouteRule]) -> Vec<HttpRouteRule> {
    let mut matches: Vec<HttpRouteMatch> = Vec::new();
    for m in rules.iter().flat_map(|r| r.matches.iter()) {
        if !matches.contains(m) {
            matches.push(m.clone());
        }
    }
    matches
        .into_iter()
        .map(|m| {
            redirect_rule(
                HttpRequestRedirectFilter {
                    scheme: Some("https".into()),
                    status_code: Some(308),
                    ..HttpRequestRedirectFilter::default()
                },
                vec![m],
            )
        })
        .collect()
}

/// The most rules one HTTPRoute or GRPCRoute may have (the CRDs' `maxItems`).
pub const MAX_RULES: usize = 16;

/// `rules` in routes of at most [`MAX_RULES`] (one, possibly empty, at least).
fn chunks<T: Clone>(rules: Vec<T>) -> Vec<Vec<T>> {
    if rules.is_empty() {
        return vec![Vec::new()];
    }
    rules.chunks(MAX_RULES).map(<[T]>::to_vec).collect()
}

/// The most listeners a Gateway may have (the CRD's `maxItems`).
pub const MAX_LISTENERS: usize = 64;

/// A BackendTLSPolicy for `service` of `namespace` (`backend-protocol: HTTPS`/`GRPCS` with
/// `proxy-ssl-verify: on`): the CA of `proxy-ssl-secret`, as a ConfigMap of that name.
fn backend_tls_policy(namespace: &str, service: &str, s: &Settings) -> Emitted {
    let ca = s
        .backend_tls
        .ca
        .as_ref()
        .map_or_else(|| service.to_owned(), |(_, name)| name.clone());
    let hostname = s
        .backend_tls
        .hostname
        .clone()
        .unwrap_or_else(|| format!("{service}.{namespace}.svc"));
    let comment = format!(
        "TLS to Service {namespace}/{service}: create ConfigMap {namespace}/{ca} with the \
         ca.crt of Secret {ca} (proxy-ssl-secret)"
    );
    Emitted {
        object: Object::BackendTlsPolicy(Box::new(BackendTlsPolicy {
            metadata: meta(namespace, &format!("{service}-backend-tls")),
            spec: BackendTlsPolicySpec {
                target_refs: vec![PolicyTargetReference {
                    group: String::new(),
                    kind: "Service".into(),
                    name: service.to_owned(),
                    section_name: None,
                }],
                validation: BackendTlsValidation {
                    ca_certificate_refs: vec![ObjectReference {
                        group: String::new(),
                        kind: "ConfigMap".into(),
                        name: ca,
                        namespace: None,
                    }],
                    well_known_ca_certificates: None,
                    hostname,
                    subject_alt_names: Vec::new(),
                },
            },
            status: None,
        })),
        comments: vec![comment],
    }
}

/// An HTTPRoute rule as the GRPCRoute rule it is on the wire: path `/` is every call,
/// `/pkg.Service` (Prefix) a service, `/pkg.Service/Method` (Exact) one method.
fn grpc_rule(rule: HttpRouteRule) -> Result<GrpcRouteRule, String> {
    let mut matches = Vec::new();
    for m in &rule.matches {
        let headers = m.headers.clone();
        let path = m.path.clone().unwrap_or_default();
        let value = path.value.clone().unwrap_or_else(|| "/".into());
        // Every match value starts with `/`: Ingress paths do, and empty ones are `/`.
        let rest = value.strip_prefix('/').unwrap_or(&value);
        let method = match (
            path.type_.as_deref().unwrap_or("PathPrefix"),
            value.as_str(),
        ) {
            ("PathPrefix", "/") => None,
            ("PathPrefix", _) if !rest.is_empty() && !rest.contains('/') => Some(GrpcMethodMatch {
                type_: Some("Exact".into()),
                service: Some(rest.to_owned()),
                method: None,
            }),
            ("Exact", v) => match rest.split_once('/') {
                Some((service, method)) if !method.contains('/') => Some(GrpcMethodMatch {
                    type_: Some("Exact".into()),
                    service: Some(service.to_owned()),
                    method: Some(method.to_owned()),
                }),
                _ => return Err(format!("path {v} is not /<service>/<method>")),
            },
            (ty, v) => {
                return Err(format!(
                    "path {v} ({ty}) is not a gRPC service or method: GRPCRoute matches \
                     /<service> or /<service>/<method>"
                ));
            }
        };
        if method.is_none() && headers.is_empty() {
            continue;
        }
        matches.push(GrpcRouteMatch { method, headers });
    }
    let mut filters = Vec::new();
    for f in rule.filters {
        match f.type_.as_str() {
            "RequestHeaderModifier" | "ResponseHeaderModifier" | "RequestMirror" => filters.push(f),
            other => return Err(format!("GRPCRoute has no {other} filter")),
        }
    }
    Ok(GrpcRouteRule {
        matches,
        filters,
        backend_refs: rule.backend_refs,
    })
}

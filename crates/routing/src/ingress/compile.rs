//! The compiler: Kubernetes objects in, [`RouteTable`] + diagnostics out.
//!
//! Steps:
//! 1. keep the Ingresses of our class (see `class.rs`) in the watched namespace, oldest first;
//! 2. walk each one, validating hosts, paths and backends; every valid path *claims*
//!    (host, path, type) — the first claim wins, and since Ingresses are walked oldest first
//!    that is the oldest Ingress; later ones get [`Reason::ConflictLost`];
//! 3. give every distinct [`ServiceRef`] one [`Backend`] (ids in ServiceRef order) and build
//!    the per-host matchers and the certificate maps.
//!
//! Nothing here indexes or unwraps anything derived from input data (only indices this module
//! created itself), so malformed objects can only ever produce diagnostics.

use std::collections::hash_map::Entry;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::api::networking::v1::{
    HTTPIngressPath, Ingress, IngressBackend, IngressSpec, IngressTLS,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use sluice_persistent::SortedChunks;

use crate::backend::{
    Backend, BackendKey, BackendProblem, PortKey, Resolved, ServiceIndex, backend_key,
};
use crate::backend_registry::BackendRegistry;
use crate::host::{HostPattern, parse_rule_host};
use crate::ingress::annotations;
use crate::ingress::class::ClassSelector;
use crate::key::Key;
use crate::path::{PathKind, RulePath, parse_regex_rule_path, parse_rule_path, path_regex};
use crate::policy::Policy;
use crate::protocol;
use crate::refs::Age;
use crate::rules::{Candidate, PathCond, Precedence, RuleSetBuilder};
use crate::table::{Canary, CanaryRule, Mirror};
use crate::table::{Rewrite, RouteEntry};
use crate::tls::{TlsCertificate, parse_secret};
use crate::{
    CompileOptions, Diagnostic, Inputs, ObjectRef, PortRef, Reason, RouteTable, ServiceRef,
};

/// Output of [`compile`].
#[derive(Debug)]
pub struct Compiled {
    /// The routing table.
    pub table: RouteTable,
    /// Problems found, in a deterministic order (by object, then field).
    pub diagnostics: Vec<Diagnostic>,
    /// Ingresses of our class (the status writer uses this), sorted. Shared: an incremental
    /// compile hands the same list out again while no change adds or removes one, and one
    /// that does copies only the chunk it lands in.
    pub ours: SortedChunks<ObjectRef>,
    /// Problems with the objects the controller's flags name (`--default-backend-service`,
    /// `--default-ssl-certificate`): the object is that Service or Secret and the field is
    /// the flag. Not an Ingress's problem, so meant for the log rather than an Event.
    pub flag_diagnostics: Vec<Diagnostic>,
    /// Conditions for the Gateway API objects of ours (GatewayClasses, Gateways,
    /// HTTPRoutes), for the controller's status writer.
    pub gateway: crate::gateway::GatewayStatuses,
    /// What ingress-nginx's ConfigMap came to (`None`: no ConfigMap); pass it back as
    /// [`Inputs::nginx_config_previous`] so that a value that stops parsing keeps this one.
    pub nginx_config: Option<Arc<crate::nginx_config::NginxConfig>>,
    /// The requests ingress-nginx answers with its trailing-slash 301 and the Ingress spec
    /// does not, whether or not [`CompileOptions::ingress_nginx_compat`] is set (with it,
    /// the table answers them so): what `sluice migrate` names. Sorted.
    /// Shared: an incremental compile hands the same list out again while no change adds
    /// or removes one.
    pub trailing_slash_redirects: Arc<Vec<TrailingSlashRedirect>>,
}

/// A request path ingress-nginx answers with 301 to the same path with `/` appended: nginx
/// does so for a request one `/` short of a location that ends in `/` and passes to a
/// backend, when no location has the request's path as its name.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct TrailingSlashRedirect {
    /// The Ingress whose path `{path}/` makes the location.
    pub ingress: ObjectRef,
    /// The rule's host as written (`""` for none).
    pub host: String,
    /// The request path answered with 301 (without the trailing slash).
    pub path: String,
}

/// Compiles the cluster state into a routing table. Pure, total (never panics) and
/// deterministic: the same inputs in any order give the same table and diagnostics.
pub fn compile(inputs: &Inputs, options: &CompileOptions) -> Compiled {
    let watched = |meta: &ObjectMeta| match &options.watch_namespace {
        Some(ns) => meta.namespace.as_deref().unwrap_or("") == ns,
        None => true,
    };
    let classes = ClassSelector::new(inputs.ingress_classes.iter().map(|c| &**c), options);
    let mut ingresses: Vec<OurIngress> = inputs
        .ingresses
        .iter()
        .filter(|i| watched(&i.metadata) && classes.is_ours(i))
        .map(|i| OurIngress::new(i))
        .collect();
    ingresses.sort_by(|a, b| a.age.cmp(&b.age));

    let config_maps: HashMap<(&str, &str), _> = inputs
        .config_maps
        .iter()
        .filter(|c| watched(&c.metadata))
        .map(|c| {
            let ns = c.metadata.namespace.as_deref().unwrap_or("");
            ((ns, c.metadata.name.as_deref().unwrap_or("")), &**c)
        })
        .collect();

    let mut services = ServiceIndex::new(
        inputs
            .services
            .iter()
            .filter(|s| watched(&s.metadata))
            .map(|s| &**s),
        inputs
            .endpoint_slices
            .iter()
            .filter(|s| watched(&s.metadata))
            .map(|s| &**s),
        inputs
            .endpoints
            .iter()
            .filter(|e| watched(&e.metadata))
            .map(|e| &**e),
    );
    let backend_tls =
        crate::gateway::backend_tls::resolve(&inputs.backend_tls_policies, &config_maps, watched);
    services.set_backend_tls(backend_tls.by_port);
    let backend_tls_outcomes = backend_tls.outcomes;
    let annotation_config_maps: HashMap<(&str, &str), _> = inputs
        .annotation_config_maps
        .iter()
        .filter(|c| watched(&c.metadata))
        .map(|c| {
            let ns = c.metadata.namespace.as_deref().unwrap_or("");
            ((ns, c.metadata.name.as_deref().unwrap_or("")), &**c)
        })
        .collect();
    let secrets: HashMap<(&str, &str), _> = inputs
        .secrets
        .iter()
        .filter(|s| watched(&s.metadata))
        .map(|s| {
            let ns = s.metadata.namespace.as_deref().unwrap_or("");
            ((ns, s.metadata.name.as_deref().unwrap_or("")), &**s)
        })
        .collect();

    // Annotations first: whether a host's paths are regular expressions depends on every
    // Ingress naming it (ingress-nginx: `use-regex` or `rewrite-target` on one Ingress makes
    // all paths of its hosts regexes).
    // ingress-nginx's ConfigMap: annotation defaults for every Ingress, `block-cidrs`.
    let mut config_diagnostics = Vec::new();
    let nginx_config = inputs.nginx_config_map.as_deref().map(|map| {
        let (config, problems) =
            crate::ingress::config_map::read(map, inputs.nginx_config_previous.as_deref());
        config_diagnostics = problems;
        Arc::new(config)
    });
    // `global-auth-url` and its companions, put together once.
    let global_auth = nginx_config
        .as_deref()
        .map(|config| config.global_auth.effective());
    // Boxed: a `Parsed` is kilobytes, and most Ingresses have none (a `None` costs a word).
    let parsed: Vec<Option<Box<annotations::Parsed>>> = ingresses
        .iter()
        .map(|i| {
            let Some(config) = &nginx_config else {
                return i
                    .annotations
                    .filter(|m| !m.is_empty())
                    .map(|m| Box::new(annotations::parse(m)));
            };
            // `allow-snippet-annotations` and `annotations-risk-level`, read live.
            let snippets = config.snippets_allowed();
            let mut parsed = match crate::ingress::config_map::with_defaults(config, i.annotations)
            {
                Some(merged) => annotations::parse_with_snippets(&merged, snippets),
                None => annotations::parse_with_snippets(
                    i.annotations.unwrap_or(&BTreeMap::new()),
                    snippets,
                ),
            };
            parsed
                .policy
                .deny
                .extend(config.block_cidrs.iter().cloned());
            parsed.policy.block_user_agents = config.block_user_agents.clone();
            parsed.policy.block_referers = config.block_referers.clone();
            if let Some(global) = &global_auth {
                let configured = inputs.nginx_config_map.as_deref().map(|m| &m.metadata);
                let applied =
                    crate::ingress::global_auth::apply(global, &mut parsed, &i.object, configured);
                if let Some(diagnostic) = applied {
                    config_diagnostics.push(diagnostic);
                }
            }
            Some(Box::new(parsed))
        })
        .collect();
    // A rewrite counts where its target differs from the path (ingress-nginx's
    // `needsRewrite`); `use-regex` counts for every rule of the Ingress.
    let regex_hosts: HashSet<HostPattern> = ingresses
        .iter()
        .zip(&parsed)
        .filter_map(|(i, p)| Some((i, p.as_ref()?)))
        .flat_map(|(i, p)| {
            let rules = i.spec.and_then(|s| s.rules.as_ref()).into_iter().flatten();
            rules.filter(move |rule| {
                p.use_regex
                    || p.rewrite_target.as_deref().is_some_and(|target| {
                        rule.http.iter().flat_map(|h| h.paths.iter()).any(|path| {
                            path.path
                                .as_deref()
                                .filter(|p| !p.is_empty())
                                .unwrap_or("/")
                                != target
                        })
                    })
            })
        })
        .filter_map(|rule| parse_rule_host(rule.host.as_deref()).ok())
        .collect();

    let mut compiler = Compiler {
        parsed,
        locations: HashMap::new(),
        alias_claims: Vec::new(),
        www_claims: Vec::new(),
        regex_hosts,
        regexes: HashMap::new(),
        services: &services,
        secrets: &secrets,
        annotation_config_maps: &annotation_config_maps,
        allowed_response_headers: nginx_config
            .as_deref()
            .map_or(&[], |config| config.allowed_response_headers.as_slice()),
        ingresses: &ingresses,
        diagnostics: Vec::new(),
        // Sized for the common shape (about one host and a couple of Service ports per
        // Ingress) so that the maps do not rehash while growing.
        routes: HashMap::with_capacity(ingresses.len()),
        canaries: HashMap::new(),
        default_backend: None,
        certs: HashMap::with_capacity(ingresses.len()),
        loaded_secrets: HashMap::new(),
        slots: Vec::with_capacity(2 * ingresses.len()),
        slot_of: HashMap::with_capacity(2 * ingresses.len()),
        policies: Vec::with_capacity(ingresses.len()),
        tls_hosts: HashSet::new(),
        client_certs: Default::default(),
        passthrough: Vec::new(),
        enable_ssl_passthrough: options.enable_ssl_passthrough,
        no_policy: Arc::new(Policy::default()),
        redirect_only: Arc::new(Policy {
            https_redirect: Some(HTTPS_REDIRECT_CODE),
            ..Policy::default()
        }),
    };
    for (index, ingress) in ingresses.iter().enumerate() {
        compiler.ingress(index, ingress);
    }
    compiler.orphan_canaries();
    let server_snippets = compiler.server_snippets();
    let slash_redirects = compiler.trailing_slash_redirects();
    let mut extra_names = compiler.extra_names();
    let Compiler {
        mut diagnostics,
        routes,
        canaries,
        default_backend,
        certs,
        mut slots,
        policies,
        tls_hosts,
        regexes,
        client_certs,
        passthrough,
        ..
    } = compiler;

    // The oldest `spec.defaultBackend` among our Ingresses, else `--default-backend-service`.
    let mut flag_diagnostics = Vec::new();
    let default_backend = match default_backend {
        Some(claim) => Some(DefaultBackend {
            slot: claim.slot,
            source: ingresses[claim.owner].object.clone(),
        }),
        None => options
            .default_backend_service
            .as_ref()
            .and_then(|service| {
                flag_default_backend(
                    service,
                    options,
                    &services,
                    &mut slots,
                    &mut flag_diagnostics,
                )
            }),
    };
    let default_certificate = options.default_certificate.as_ref().and_then(|secret| {
        flag_default_certificate(secret, options, &secrets, &mut flag_diagnostics)
    });

    let entries = EntryInputs {
        no_auth_locations: nginx_config.as_deref().map_or_else(
            || {
                crate::nginx_config::DEFAULT_NO_AUTH_LOCATIONS
                    .iter()
                    .map(|l| (*l).to_owned())
                    .collect()
            },
            crate::nginx_config::NginxConfig::no_auth_locations,
        ),
        ingresses: &ingresses,
        server_snippets,
        policies,
        tls_hosts,
        regexes,
    };
    if options.ingress_nginx_compat {
        extra_names.slash_redirects = slash_redirects.clone();
    }
    let mut table = build_table(
        routes,
        canaries,
        default_backend,
        certs,
        slots,
        entries,
        extra_names,
    );
    if let Some(cert) = default_certificate {
        set_default_certificate(&mut table, cert);
    }
    table.client_certs = client_certs;
    if let Some(config) = &nginx_config {
        table.globals = Arc::clone(&config.globals);
    }
    for (host, index) in passthrough {
        // ingress-nginx: the backend of the host's `/` location, whichever Ingress has it.
        let Some(entry) = table.route(&host, "/") else {
            continue;
        };
        let target = Arc::new(crate::rules::StreamTarget {
            split: vec![crate::WeightedBackend {
                backend: Arc::clone(&entry.backend),
                weight: 1,
                usable: true,
                entry: None,
            }],
            source: ingresses[index].object.clone(),
            terminate: false,
        });
        table.passthrough.get_or_insert(Key::new(&host), target);
    }
    let gateway = crate::gateway::compile::GatewayCompiler {
        inputs,
        options,
        services: &services,
        secrets: &secrets,
        config_maps: &config_maps,
        backend_tls: &backend_tls_outcomes,
    }
    .compile_into(&mut table, &mut diagnostics);
    diagnostics.extend(config_diagnostics);
    crate::diagnostic::sort(&mut diagnostics);
    let mut trailing_slash_redirects: Vec<TrailingSlashRedirect> = slash_redirects
        .into_iter()
        .map(|r| TrailingSlashRedirect {
            ingress: ingresses[r.claim.owner].object.clone(),
            host: r.host.to_string(),
            path: r.path,
        })
        .collect();
    trailing_slash_redirects.sort();
    let mut ours: Vec<ObjectRef> = ingresses.into_iter().map(|i| i.object).collect();
    ours.sort();
    ours.dedup();
    Compiled {
        table,
        diagnostics,
        ours: SortedChunks::from_sorted(ours),
        flag_diagnostics,
        gateway,
        nginx_config,
        trailing_slash_redirects: Arc::new(trailing_slash_redirects),
    }
}

/// The names `server-alias` and `from-to-www-redirect` add ([`Compiler::extra_names`]).
#[derive(Default)]
struct ExtraNames {
    /// Alias -> (its host, the Ingress that named it).
    aliases: HashMap<HostPattern, (HostPattern, usize)>,
    /// Redirecting name -> (the host it redirects to, the Ingress that asked).
    www: HashMap<HostPattern, (HostPattern, usize)>,
    /// The trailing-slash redirects to answer (`--ingress-nginx-compat`).
    slash_redirects: Vec<SlashRedirect>,
}

/// Puts a host's rule set into the table.
fn insert_rule_set(table: &mut RouteTable, host: HostPattern, set: crate::rules::RuleSet) {
    match host {
        HostPattern::Exact(h) => {
            table.exact_hosts.insert(Key::new(&h), Arc::new(set));
        }
        HostPattern::Wildcard(s) => {
            table.wildcard_hosts.insert(Key::new(&s), Arc::new(set));
        }
        HostPattern::Any => table.any_host = Some(Arc::new(set)),
    }
}

/// A trailing-slash redirect found by [`Compiler::trailing_slash_redirects`].
#[derive(Clone)]
struct SlashRedirect {
    host: HostPattern,
    /// The request path answered with 301.
    path: String,
    /// The claim of the rule whose location ends in `/`.
    claim: Claim,
}

/// The names of the nginx locations ingress-nginx writes for a rule path of a host without
/// regex paths (`controller/location.go` `updateServerLocations`, `template.go`
/// `buildLocation`): Exact `P` is `= P`; Prefix `P` is `P/` (`P` when it ends in `/`)
/// and `= P`; ImplementationSpecific `P` is `P`.
fn nginx_location_names(kind: PathKind, written: &str) -> Vec<String> {
    match kind {
        PathKind::Exact | PathKind::StringPrefix => vec![written.to_owned()],
        PathKind::Prefix if written == "/" || written.ends_with('/') => vec![written.to_owned()],
        PathKind::Prefix => vec![written.to_owned(), format!("{written}/")],
        PathKind::Regex => Vec::new(),
    }
}

/// The request paths nginx redirects given a host's location names, each with the index of
/// the location (in `names`) that causes it: nginx's static location tree answers a
/// request one byte short of a name ending in `/` with 301 (`auto_redirect`, set for
/// `proxy_pass` locations) unless a location has the request path as its name.
fn slash_redirect_paths(names: &[String]) -> Vec<(String, usize)> {
    let all: HashSet<&str> = names.iter().map(String::as_str).collect();
    let mut out: Vec<(String, usize)> = Vec::new();
    for (index, name) in names.iter().enumerate() {
        let Some(short) = name.strip_suffix('/').filter(|s| !s.is_empty()) else {
            continue;
        };
        if !all.contains(short) && !out.iter().any(|(p, _)| p == short) {
            out.push((short.to_owned(), index));
        }
    }
    out
}

/// Where requests no rule claims go, and the object that said so (the Ingress with the
/// winning `spec.defaultBackend`, or the `--default-backend-service` Service).
struct DefaultBackend {
    slot: usize,
    source: ObjectRef,
}

/// `" (only namespace ... is watched ...)"` when `--watch-namespace` hides `namespace`.
fn outside_watch(options: &CompileOptions, namespace: &str) -> String {
    match &options.watch_namespace {
        Some(watched) if watched != namespace => {
            format!(" (only namespace {watched} is watched: --watch-namespace)")
        }
        _ => String::new(),
    }
}

/// `--default-backend-service`: the first port of the Service, as ingress-nginx uses it.
/// A missing (or portless) Service still yields a backend, without endpoints (503), and a
/// diagnostic; an ExternalName Service yields none (404), as it does for a rule.
fn flag_default_backend(
    service: &ObjectRef,
    options: &CompileOptions,
    services: &ServiceIndex<'_>,
    slots: &mut Vec<Slot>,
    problems: &mut Vec<Diagnostic>,
) -> Option<DefaultBackend> {
    const FLAG: &str = "--default-backend-service";
    let first_port = services.first_port(&service.namespace, &service.name);
    // Port 0 stands for "no port": it never resolves, and `resolve` says why.
    let sref = ServiceRef {
        namespace: service.namespace.clone(),
        name: service.name.clone(),
        port: PortRef::Number(first_port.unwrap_or(0)),
    };
    let resolution = services.resolve(&sref);
    if let Err(problem) = &resolution {
        let detail = match problem.reason {
            Reason::ServiceNotFound => format!(
                "not found{}; requests no rule matches get 503 until it exists",
                outside_watch(options, &service.namespace)
            ),
            Reason::UnsupportedBackend => "is of type ExternalName, which is not supported; \
                                           requests no rule matches get 404"
                .to_owned(),
            Reason::PortNotFound => "has no port; requests no rule matches get 503".to_owned(),
            _ => problem.detail.clone(),
        };
        problems.push(Diagnostic::new(
            service,
            FLAG,
            problem.reason.clone(),
            detail,
        ));
        if problem.reason == Reason::UnsupportedBackend {
            return None;
        }
    }
    // Shared with the rules that name the same Service port.
    let slot = match slots
        .iter()
        .position(|s| s.service == sref && !s.cluster_ip)
    {
        Some(slot) => slot,
        None => {
            slots.push(Slot {
                service: sref,
                cluster_ip: false,
                resolution,
            });
            slots.len() - 1
        }
    };
    Some(DefaultBackend {
        slot,
        source: service.clone(),
    })
}

/// `--default-ssl-certificate`: the Secret's certificate, or `None` (and a diagnostic) while
/// it is missing or unusable, when the proxy's generated certificate stands in.
fn flag_default_certificate<'s>(
    secret_ref: &'s ObjectRef,
    options: &CompileOptions,
    secrets: &HashMap<(&'s str, &'s str), &Secret>,
    problems: &mut Vec<Diagnostic>,
) -> Option<Arc<TlsCertificate>> {
    const FLAG: &str = "--default-ssl-certificate";
    const FALLBACK: &str = "the generated self-signed certificate is served instead";
    let key = (secret_ref.namespace.as_str(), secret_ref.name.as_str());
    let Some(secret) = secrets.get(&key) else {
        let detail = format!(
            "not found (or not of type kubernetes.io/tls){}; {FALLBACK}",
            outside_watch(options, &secret_ref.namespace)
        );
        problems.push(Diagnostic::new(
            secret_ref,
            FLAG,
            Reason::TlsSecretMissing,
            detail,
        ));
        return None;
    };
    match parse_secret(secret, secret_ref.clone()) {
        Ok(cert) => Some(Arc::new(cert)),
        Err(why) => {
            let detail = format!("is not a usable TLS Secret: {why}; {FALLBACK}");
            problems.push(Diagnostic::new(
                secret_ref,
                FLAG,
                Reason::TlsSecretInvalid,
                detail,
            ));
            None
        }
    }
}

/// Makes `cert` the table's default certificate. An Ingress naming the same Secret shares
/// its `Arc` (the proxy finds parsed keys by `Arc`), else it joins the certificates in
/// Secret order.
fn set_default_certificate(table: &mut RouteTable, cert: Arc<TlsCertificate>) {
    table.default_certificate = Some(table.add_certificate(cert));
}

/// An Ingress of our class, with the name used for it in diagnostics.
struct OurIngress<'a> {
    object: ObjectRef,
    namespace: &'a str,
    annotations: Option<&'a BTreeMap<String, String>>,
    age: Age,
    spec: Option<&'a IngressSpec>,
}

impl<'a> OurIngress<'a> {
    fn new(ingress: &'a Ingress) -> Self {
        let meta = &ingress.metadata;
        let namespace = meta.namespace.as_deref().unwrap_or("");
        OurIngress {
            object: ObjectRef::ingress(namespace, meta.name.as_deref().unwrap_or("")),
            namespace,
            annotations: meta.annotations.as_ref(),
            age: Age::of(meta),
            spec: ingress.spec.as_ref(),
        }
    }
}

/// A claim on a route (or on the default backend): who made it and where it goes.
#[derive(Clone, Copy)]
struct Claim {
    /// Index into the age-sorted Ingresses.
    owner: usize,
    /// Index into [`Compiler::slots`].
    slot: usize,
}

/// A claim on the certificate of a host.
struct CertClaim {
    owner: usize,
    cert: Arc<TlsCertificate>,
}

/// One distinct Service port referenced by some Ingress, resolved once.
struct Slot {
    service: ServiceRef,
    /// `service-upstream`: the Service's ClusterIP and port are the one endpoint (a backend
    /// of its own, not shared with routes that balance over the endpoints).
    cluster_ip: bool,
    /// Ready endpoints, or why there are none.
    resolution: Result<Resolved, BackendProblem>,
}

/// The rules of all hosts: host -> (path -> claim).
type Routes = HashMap<HostPattern, BTreeMap<RulePath, Claim>>;

/// State of one compilation.
struct Compiler<'c, 'a> {
    /// Per Ingress: its parsed annotations, taken when the Ingress is walked.
    parsed: Vec<Option<Box<annotations::Parsed>>>,
    /// Per host: the nginx location names of its claimed paths, with their claims, in
    /// claim order (for ingress-nginx's trailing-slash redirect).
    locations: HashMap<HostPattern, Vec<(String, Claim)>>,
    /// `server-alias` claims: host, the Ingress (the oldest with aliases wins), aliases.
    alias_claims: Vec<(HostPattern, usize, Vec<HostPattern>)>,
    /// `from-to-www-redirect`: rule hosts and the Ingress asking, oldest first.
    www_claims: Vec<(HostPattern, usize)>,
    /// Hosts whose Prefix paths are regular expressions.
    regex_hosts: HashSet<HostPattern>,
    /// Compiled regex rule paths, by pattern.
    regexes: HashMap<String, regex::Regex>,
    services: &'c ServiceIndex<'a>,
    secrets: &'c HashMap<(&'a str, &'a str), &'a Secret>,
    /// ConfigMaps that annotations name (`auth-proxy-set-headers`, `custom-headers`).
    annotation_config_maps: &'c HashMap<(&'a str, &'a str), &'a ConfigMap>,
    /// The ingress-nginx ConfigMap's `global-allowed-response-headers` (`custom-headers`).
    allowed_response_headers: &'c [String],
    /// Our Ingresses, oldest first; claims refer to them by index.
    ingresses: &'c [OurIngress<'a>],
    diagnostics: Vec<Diagnostic>,
    /// Every host that some valid rule names (even without paths), with its claimed paths.
    routes: Routes,
    /// Canary Ingresses' claims, by host and path (the oldest canary wins).
    canaries: HashMap<(HostPattern, RulePath), Claim>,
    default_backend: Option<Claim>,
    certs: HashMap<HostPattern, CertClaim>,
    /// Parsed Secrets, so that a Secret used by many Ingresses is parsed (and shared) once.
    loaded_secrets: HashMap<(&'a str, &'a str), Result<Arc<TlsCertificate>, SecretProblem>>,
    /// Distinct Service ports, in order of first reference.
    slots: Vec<Slot>,
    slot_of: HashMap<(BackendKey<'a>, bool), usize>,
    /// Per Ingress (same index as `ingresses`): the policy its annotations compile to.
    policies: Vec<IngressPolicy>,
    /// Every host some Ingress of ours lists under `spec.tls` (for `ssl-redirect`).
    tls_hosts: HashSet<HostPattern>,
    /// Hosts with a client certificate check (`auth-tls-*`; the oldest Ingress decides).
    client_certs: crate::client_cert::ClientCertHosts,
    /// `ssl-passthrough` hosts and their Ingress, oldest first.
    passthrough: Vec<(String, usize)>,
    /// `--enable-ssl-passthrough`.
    enable_ssl_passthrough: bool,
    /// The policy of Ingresses without annotations, shared.
    no_policy: Arc<Policy>,
    /// The same with an HTTPS redirect, shared.
    redirect_only: Arc<Policy>,
}

/// The policy of one Ingress, in the two forms its routes may need.
struct IngressPolicy {
    /// Without an HTTPS redirect.
    plain: Arc<Policy>,
    /// With one (`force-ssl-redirect`, or `ssl-redirect` on a host with TLS).
    redirecting: Arc<Policy>,
    /// `ssl-redirect`.
    ssl_redirect: bool,
    /// `force-ssl-redirect`.
    force_ssl_redirect: bool,
    /// `rewrite-target`.
    rewrite_target: Option<String>,
    /// The slot of the `default-backend` annotation's Service.
    fallback: Option<usize>,
    /// `canary: "true"`: the rules of this canary Ingress.
    canary: Option<Arc<CanaryRule>>,
    /// `server-alias`.
    server_alias: Vec<HostPattern>,
    /// `from-to-www-redirect`.
    from_to_www: bool,
    /// The slot of `mirror-target`'s Service.
    mirror: Option<usize>,
    /// `service-upstream`: the rules' Services are reached at their ClusterIP.
    service_upstream: bool,
    /// `server-snippet`, interpreted.
    server_snippet: Option<Arc<Policy>>,
}

/// A stable zone id for an Ingress's rate limits (FNV-1a of `namespace/name`): the same
/// across table rebuilds and processes.
fn zone_of(namespace: &str, name: &str) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in namespace.bytes().chain([b'/']).chain(name.bytes()) {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    hash
}

/// ingress-nginx's redirect code for plain HTTP to HTTPS (its `http-redirect-code`
/// default): 308 keeps the method and body.
const HTTPS_REDIRECT_CODE: u16 = 308;

impl IngressPolicy {
    /// The policy of a route of this Ingress on a host that has TLS or not.
    fn for_host(&self, has_tls: bool) -> (&Arc<Policy>, bool) {
        let redirect = self.force_ssl_redirect || (self.ssl_redirect && has_tls);
        if redirect {
            (&self.redirecting, true)
        } else {
            (&self.plain, false)
        }
    }
}

#[derive(Clone)]
enum SecretProblem {
    Missing,
    Invalid(String),
}

impl<'a> Compiler<'_, 'a> {
    fn diag(&mut self, owner: usize, field: String, reason: Reason, detail: impl AsRef<str>) {
        let object = &self.ingresses[owner].object;
        self.diagnostics
            .push(Diagnostic::new(object, field, reason, detail));
    }

    /// Compiles the Ingress's annotations; problems become diagnostics on them.
    fn annotations(&mut self, index: usize) {
        let Some(parsed) = self.parsed.get_mut(index).and_then(Option::take) else {
            self.policies.push(IngressPolicy {
                plain: Arc::clone(&self.no_policy),
                redirecting: Arc::clone(&self.redirect_only),
                ssl_redirect: true,
                force_ssl_redirect: false,
                rewrite_target: None,
                fallback: None,
                canary: None,
                server_alias: Vec::new(),
                from_to_www: false,
                mirror: None,
                service_upstream: false,
                server_snippet: None,
            });
            return;
        };
        let fallback = parsed
            .default_backend
            .as_ref()
            .and_then(|_| self.fallback_slot(index));
        for problem in &parsed.problems {
            let field = format!("metadata.annotations[{}]", problem.annotation);
            self.diag(index, field, problem.reason.clone(), &problem.detail);
        }
        let mut parsed = *parsed;
        if let Some(limit) = &mut parsed.policy.rate_limit {
            let ingress = &self.ingresses[index].object;
            limit.zone = zone_of(&ingress.namespace, &ingress.name);
        }
        if let Some(global) = &mut parsed.policy.global_rate_limit {
            // One counter per Ingress, as ingress-nginx's namespace (the Ingress's UID).
            let ingress = &self.ingresses[index].object;
            std::sync::Arc::make_mut(global).namespace =
                format!("{}/{}", ingress.namespace, ingress.name);
        }
        if let Some((namespace, name)) = parsed.ssl_secret.take() {
            self.upstream_secret(index, namespace, name, &mut parsed.policy);
        }
        if let Some(spec) = parsed.basic_auth.take() {
            self.basic_auth_secret(index, spec, &mut parsed.policy);
        }
        if let Some(spec) = parsed.auth_proxy_set_headers.take() {
            self.auth_proxy_set_headers(index, spec, &mut parsed.policy);
        }
        if let Some(spec) = parsed.custom_headers.take() {
            self.custom_headers(index, spec, &mut parsed.policy);
        }
        if let Some(spec) = parsed.client_cert.take() {
            self.client_cert(index, spec, &mut parsed.policy);
        }
        if parsed.ssl_passthrough {
            self.ssl_passthrough(index);
        }
        let mirror = parsed
            .mirror
            .take()
            .and_then(|spec| self.mirror_slot(index, spec));
        let plain = if parsed.policy == Policy::default() {
            Arc::clone(&self.no_policy)
        } else {
            Arc::new(parsed.policy.clone())
        };
        self.policies.push(IngressPolicy {
            plain,
            redirecting: Arc::new(Policy {
                https_redirect: Some(HTTPS_REDIRECT_CODE),
                ..parsed.policy
            }),
            ssl_redirect: parsed.ssl_redirect,
            force_ssl_redirect: parsed.force_ssl_redirect,
            rewrite_target: parsed.rewrite_target,
            fallback,
            canary: parsed.canary.map(Arc::new),
            server_alias: parsed.server_alias,
            from_to_www: parsed.from_to_www,
            mirror,
            service_upstream: parsed.service_upstream,
            server_snippet: parsed.server_snippet,
        });
    }

    /// Each host's `server-snippet`: the oldest Ingress (not a canary) of the host that
    /// sets one decides, as ingress-nginx's `createServers`; the others get an Event.
    fn server_snippets(&mut self) -> HashMap<HostPattern, (usize, Arc<Policy>)> {
        let mut out: HashMap<HostPattern, (usize, Arc<Policy>)> = HashMap::new();
        for index in 0..self.ingresses.len() {
            let policy = &self.policies[index];
            let Some(snippet) = policy
                .server_snippet
                .clone()
                .filter(|_| policy.canary.is_none())
            else {
                continue;
            };
            let rules = self.ingresses[index]
                .spec
                .and_then(|s| s.rules.as_ref())
                .into_iter()
                .flatten();
            let hosts: Vec<HostPattern> = rules
                .filter_map(|rule| parse_rule_host(rule.host.as_deref()).ok())
                .collect();
            for host in hosts {
                match out.get(&host) {
                    Some((winner, _)) if *winner != index => {
                        let winner = self.ingresses[*winner].object.clone();
                        let field = self.annotation_field(index, "server-snippet");
                        let detail = format!(
                            "host {host} already has the server snippet of the older Ingress \
                             {}/{}; this one is not applied there (ingress-nginx: one per host)",
                            winner.namespace, winner.name
                        );
                        self.diag(index, field, Reason::SnippetRefused, detail);
                    }
                    Some(_) => {}
                    None => {
                        out.insert(host, (index, Arc::clone(&snippet)));
                    }
                }
            }
        }
        out
    }

    /// The backend slot of `mirror-target`'s Service port (in the Ingress's namespace
    /// unless the URL names another).
    fn mirror_slot(
        &mut self,
        index: usize,
        spec: annotations::mirror::MirrorSpec,
    ) -> Option<usize> {
        let field = self.annotation_field(index, "mirror-target");
        let ingress = &self.ingresses[index];
        let namespace = spec.namespace.as_deref().unwrap_or(ingress.namespace);
        let Some((namespace, name)) = self.services.service_key(namespace, &spec.name) else {
            let detail = format!(
                "Service {namespace}/{} not found; no copies are sent",
                spec.name
            );
            self.diag(index, field, Reason::ServiceNotFound, detail);
            return None;
        };
        let key = BackendKey {
            namespace,
            name,
            port: PortKey::Number(spec.port),
        };
        self.slot(index, key, || field)
    }

    /// Fills the certificates of `proxy-ssl-secret` into the policy's upstream TLS. A
    /// missing or unusable Secret is a diagnostic; verification then stays as asked with
    /// no roots, so a verifying route fails closed (502) instead of trusting anyone.
    fn upstream_secret(
        &mut self,
        index: usize,
        namespace: Option<String>,
        name: String,
        policy: &mut Policy,
    ) {
        let ingress = &self.ingresses[index];
        let namespace = namespace.unwrap_or_else(|| ingress.namespace.to_owned());
        let key = [annotations::SLUICE_PREFIX, annotations::NGINX_PREFIX]
            .iter()
            .map(|prefix| format!("{prefix}proxy-ssl-secret"))
            .find(|key| ingress.annotations.is_some_and(|a| a.contains_key(key)))
            .unwrap_or_else(|| format!("{}proxy-ssl-secret", annotations::NGINX_PREFIX));
        let field = format!("metadata.annotations[{key}]");
        let secret_ref = ObjectRef::secret(namespace.clone(), name.clone());
        let Some(secret) = self.secrets.get(&(namespace.as_str(), name.as_str())) else {
            let detail = format!(
                "Secret {namespace}/{name} not found (sluice reads Secrets of type \
                 kubernetes.io/tls; put ca.crt next to tls.crt and tls.key)"
            );
            self.diag(index, field, Reason::TlsSecretMissing, detail);
            return;
        };
        match protocol::parse_upstream_secret(secret, &secret_ref) {
            Ok((trusted, client)) => {
                let mut tls = policy.upstream_tls.as_deref().cloned().unwrap_or_default();
                tls.trusted = trusted;
                tls.client = client.map(Arc::new);
                tls.secret = Some(secret_ref);
                policy.upstream_tls = Some(Arc::new(tls));
            }
            Err(why) => {
                let detail = format!("Secret {namespace}/{name} is not usable: {why}");
                self.diag(index, field, Reason::TlsSecretInvalid, detail);
            }
        }
    }

    /// `ssl-passthrough`: the Ingress's exact hosts with a `/` path are passed through
    /// (ingress-nginx's TCP proxy matches server names exactly; other paths cannot be told
    /// apart without terminating TLS). Without `--enable-ssl-passthrough` the annotation is
    /// reported and TLS is terminated, as ingress-nginx ignores it then.
    fn ssl_passthrough(&mut self, index: usize) {
        let field = self.annotation_field(index, "ssl-passthrough");
        if !self.enable_ssl_passthrough {
            let detail = "ssl-passthrough needs sluice to run with --enable-ssl-passthrough \
                          (as ingress-nginx); TLS is terminated";
            self.diag(index, field, Reason::UnsupportedAnnotation, detail);
            return;
        }
        let ingress = &self.ingresses[index];
        let rules = ingress.spec.iter().flat_map(|s| s.rules.iter().flatten());
        for rule in rules {
            match parse_rule_host(rule.host.as_deref()) {
                Ok(HostPattern::Exact(host)) => {
                    let root =
                        rule.http.iter().flat_map(|h| &h.paths).any(|p| {
                            p.path.as_deref().filter(|p| !p.is_empty()).unwrap_or("/") == "/"
                        });
                    if root {
                        self.passthrough.push((host, index));
                    } else {
                        let detail = format!(
                            "ssl-passthrough: host {host} has no / path, whose backend TLS \
                             connections would go to; TLS is terminated"
                        );
                        self.diag(index, field.clone(), Reason::InvalidAnnotation, detail);
                    }
                }
                _ => {
                    let detail = "ssl-passthrough applies to exact host names (the \
                                  ClientHello's server name is matched exactly, as \
                                  ingress-nginx); wildcard and empty hosts are terminated";
                    self.diag(index, field.clone(), Reason::InvalidAnnotation, detail);
                }
            }
        }
    }

    /// Makes the client certificate check of `auth-tls-*` the check of the Ingress's hosts
    /// (those without an older one). A Secret that is missing, in another namespace or
    /// without a usable `ca.crt` closes the Ingress's routes (503) with a `FailedClosed`
    /// diagnostic, as ingress-nginx denies the location.
    fn client_cert(
        &mut self,
        index: usize,
        spec: annotations::client_cert::ClientCertSpec,
        policy: &mut Policy,
    ) {
        let ingress = &self.ingresses[index];
        let field = format!("metadata.annotations[{}]", spec.key);
        let namespace = spec
            .namespace
            .clone()
            .unwrap_or_else(|| ingress.namespace.to_owned());
        let name = spec.name.as_str();
        let roots = if namespace != ingress.namespace {
            Err(format!(
                "Secret {namespace}/{name} is in another namespace than the Ingress: not \
                 allowed (ingress-nginx's default, allow-cross-namespace-resources off)"
            ))
        } else {
            match self.secrets.get(&(namespace.as_str(), name)) {
                None => Err(format!("Secret {namespace}/{name} not found")),
                Some(secret) => match crate::tls::secret_value(secret, crate::tls::CA_CERT_KEY) {
                    None => Err(format!("Secret {namespace}/{name} has no ca.crt")),
                    Some(pem) => crate::tls::parse_ca_bundle(pem)
                        .map_err(|why| format!("Secret {namespace}/{name}: {why}")),
                },
            }
        };
        let roots = match roots {
            Ok(roots) => roots,
            Err(why) => {
                policy.fail_closed = true;
                let detail = format!("{why}; {}", annotations::fail_closed::CLOSED);
                self.diag(index, field, Reason::FailedClosed, detail);
                return;
            }
        };
        let auth = Arc::new(crate::ClientCertAuth {
            mode: spec.mode,
            depth: spec.depth,
            error_page: spec.error_page,
            pass_certificate: spec.pass_certificate,
            // Checked when the annotation was read.
            match_cn: spec.match_cn.and_then(|p| regex::Regex::new(&p).ok()),
            handshake: Arc::new(crate::ClientValidation {
                roots,
                insecure_fallback: true,
                sources: vec![ObjectRef::secret(namespace.clone(), name.to_owned())],
            }),
            source: ingress.object.clone(),
        });
        let hosts = ingress
            .spec
            .iter()
            .flat_map(|s| s.rules.iter().flatten())
            .filter_map(|rule| parse_rule_host(rule.host.as_deref()).ok());
        for host in hosts {
            self.client_certs.insert(&host, &auth);
        }
    }

    /// Reads the users of `auth-secret` into [`Policy::basic_auth`] (or
    /// [`Policy::digest_auth`] for `auth-type: digest`). A Secret that is missing, in
    /// another namespace, without the `auth` key (`auth-file`) or without any user (of the
    /// realm, for digest) closes the routes (503) with a `FailedClosed` diagnostic, as
    /// ingress-nginx denies the location; users whose hash no scheme reads get a warning
    /// (nginx answers them 500; a digest line without a 32-digit HA1 never matches).
    fn basic_auth_secret(
        &mut self,
        index: usize,
        spec: annotations::basic_auth::BasicAuthSpec,
        policy: &mut Policy,
    ) {
        use annotations::basic_auth::AuthType;
        let ingress = &self.ingresses[index];
        let field = format!("metadata.annotations[{}]", spec.key);
        let namespace = spec
            .namespace
            .clone()
            .unwrap_or_else(|| ingress.namespace.to_owned());
        let name = spec.name.as_str();
        let closed = format!("; {}", annotations::fail_closed::CLOSED);
        let entries = if namespace != ingress.namespace {
            Err(format!(
                "Secret {namespace}/{name} is in another namespace than the Ingress: not \
                 allowed (ingress-nginx's default, allow-cross-namespace-resources off)"
            ))
        } else {
            match self.secrets.get(&(namespace.as_str(), name)) {
                None => Err(format!("Secret {namespace}/{name} not found")),
                Some(secret) => auth_secret_entries(secret, spec.secret_type)
                    .map_err(|why| format!("Secret {namespace}/{name} {why}")),
            }
        };
        let entries = match entries {
            Ok(entries) => entries,
            Err(why) => {
                policy.fail_closed = true;
                self.diag(index, field, Reason::FailedClosed, format!("{why}{closed}"));
                return;
            }
        };
        let secret = ObjectRef::secret(namespace.clone(), name);
        match spec.auth_type {
            AuthType::Basic => {
                let users = match entries {
                    AuthEntries::File(text) => crate::htpasswd::Htpasswd::parse(&text),
                    AuthEntries::Map(map) => crate::htpasswd::Htpasswd::from_map(
                        map.iter().map(|(k, v)| (k.as_str(), v.as_str())),
                    ),
                };
                if users.is_empty() {
                    policy.fail_closed = true;
                    let detail = format!("Secret {namespace}/{name} lists no user{closed}");
                    self.diag(index, field, Reason::FailedClosed, detail);
                    return;
                }
                let unknown = users.unknown_schemes();
                if !unknown.is_empty() {
                    let detail = format!(
                        "Secret {namespace}/{name}: the password hash of {} is of no scheme \
                         nginx reads ($apr1$, $2y$, $1$, $5$, $6$, DES, {{SHA}}, {{SSHA}}, \
                         {{PLAIN}}); they get 500, as in nginx",
                        unknown.join(", ")
                    );
                    self.diag(index, field.clone(), Reason::InvalidAnnotation, detail);
                }
                let Some(challenge) = annotations::basic_auth::challenge(&spec.realm) else {
                    policy.fail_closed = true;
                    let detail = format!("auth-realm is not a header value{closed}");
                    self.diag(index, field, Reason::FailedClosed, detail);
                    return;
                };
                policy.basic_auth = Some(Arc::new(crate::policy::BasicAuth {
                    challenge,
                    users,
                    secret,
                }));
            }
            AuthType::Digest => {
                let realm = spec.realm.as_str();
                let users = match entries {
                    AuthEntries::File(text) => crate::htdigest::Htdigest::parse(&text, realm),
                    AuthEntries::Map(map) => crate::htdigest::Htdigest::from_map(
                        map.iter().map(|(k, v)| (k.as_str(), v.as_str())),
                        realm,
                    ),
                };
                if !users.malformed().is_empty() {
                    let detail = format!(
                        "Secret {namespace}/{name}: the digest line of {} has no HA1 of 32 \
                         hex digits (user:realm:HA1, as htdigest writes it); they never match",
                        users.malformed().join(", ")
                    );
                    self.diag(index, field.clone(), Reason::InvalidAnnotation, detail);
                }
                if users.is_empty() {
                    policy.fail_closed = true;
                    let detail = format!(
                        "Secret {namespace}/{name} lists no digest user of realm {realm:?} \
                         (auth-realm; lines are user:realm:HA1){closed}"
                    );
                    self.diag(index, field, Reason::FailedClosed, detail);
                    return;
                }
                policy.digest_auth = Some(Arc::new(crate::policy::DigestAuth {
                    realm: spec.realm,
                    users,
                    secret,
                }));
            }
        }
    }

    /// The ConfigMap an annotation names, with all its data: in the Ingress's namespace
    /// (ingress-nginx's default, allow-cross-namespace-resources off) and present, else why
    /// not.
    fn annotation_config_map(
        &self,
        index: usize,
        spec: &annotations::config_map_ref::ConfigMapRef,
    ) -> Result<&'a ConfigMap, String> {
        let ingress = &self.ingresses[index];
        let namespace = spec.namespace.as_deref().unwrap_or(ingress.namespace);
        let name = spec.name.as_str();
        if namespace != ingress.namespace {
            return Err(format!(
                "ConfigMap {namespace}/{name} is in another namespace than the Ingress: not \
                 allowed (ingress-nginx's default, allow-cross-namespace-resources off)"
            ));
        }
        self.annotation_config_maps
            .get(&(namespace, name))
            .copied()
            .ok_or_else(|| format!("ConfigMap {namespace}/{name} not found"))
    }

    /// `custom-headers`: the ConfigMap's data become response headers (nginx
    /// `more_set_headers`), each name allowed by `global-allowed-response-headers`. One
    /// that is missing, in another namespace, or with a header that is not allowed denies
    /// the routes (503), as ingress-nginx denies the location; a value with an nginx
    /// variable is left out with an Event.
    fn custom_headers(
        &mut self,
        index: usize,
        spec: annotations::config_map_ref::ConfigMapRef,
        policy: &mut Policy,
    ) {
        let field = format!("metadata.annotations[{}]", spec.key);
        let headers = self
            .annotation_config_map(index, &spec)
            .and_then(|config_map| {
                let empty = BTreeMap::new();
                annotations::config_map_ref::custom_headers_of(
                    config_map.data.as_ref().unwrap_or(&empty),
                    self.allowed_response_headers,
                )
                .map_err(|why| format!("ConfigMap {}: {why}", spec.name))
            });
        match headers {
            Ok(annotations::config_map_ref::CustomHeaders {
                headers,
                with_variables: variables,
            }) => {
                if !variables.is_empty() {
                    let detail = format!(
                        "ConfigMap {}: the value of {} has an nginx variable, which sluice \
                         does not expand; not set",
                        spec.name,
                        variables.join(", ")
                    );
                    self.diag(index, field, Reason::InvalidAnnotation, detail);
                }
                for (name, value) in headers {
                    if !policy.response_headers.iter().any(|(set, _)| *set == name) {
                        policy.response_headers.push((name, value));
                    }
                }
            }
            Err(why) => {
                policy.fail_closed = true;
                let detail = format!("{why}; {}", annotations::fail_closed::CLOSED);
                self.diag(index, field, Reason::FailedClosed, detail);
            }
        }
    }

    /// `auth-proxy-set-headers`: the ConfigMap's data become fields of the auth request.
    /// One that is missing, in another namespace, or whose data are not headers closes the
    /// routes (503), as ingress-nginx denies the location.
    fn auth_proxy_set_headers(
        &mut self,
        index: usize,
        spec: annotations::config_map_ref::ConfigMapRef,
        policy: &mut Policy,
    ) {
        let field = format!("metadata.annotations[{}]", spec.key);
        let headers = self
            .annotation_config_map(index, &spec)
            .and_then(|config_map| {
                let empty = BTreeMap::new();
                annotations::config_map_ref::proxy_set_headers(
                    config_map.data.as_ref().unwrap_or(&empty),
                )
                .map_err(|why| format!("ConfigMap {}: {why}", spec.name))
            });
        match (headers, policy.auth.as_mut()) {
            (Ok(headers), Some(auth)) => auth.proxy_set_headers = headers,
            (Ok(_), None) => {}
            (Err(why), _) => {
                policy.fail_closed = true;
                let detail = format!("{why}; {}", annotations::fail_closed::CLOSED);
                self.diag(index, field, Reason::FailedClosed, detail);
            }
        }
    }

    /// The backend slot of the Ingress's `default-backend` annotation: its Service's first
    /// port, in the Ingress's namespace.
    fn fallback_slot(&mut self, index: usize) -> Option<usize> {
        let ingress = &self.ingresses[index];
        let (namespace, annotations) = (ingress.namespace, ingress.annotations?);
        let (key, name) = [annotations::SLUICE_PREFIX, annotations::NGINX_PREFIX]
            .iter()
            .map(|prefix| format!("{prefix}default-backend"))
            .find_map(|key| annotations.get(&key).map(|v| (key, v.trim())))?;
        let field = format!("metadata.annotations[{key}]");
        let Some(port) = self.services.first_port(namespace, name) else {
            let detail = format!("Service {namespace}/{name} not found or has no port");
            self.diag(index, field, Reason::ServiceNotFound, detail);
            return None;
        };
        let backend = BackendKey {
            namespace,
            name,
            port: PortKey::Number(port),
        };
        self.slot(index, backend, || field)
    }

    fn ingress(&mut self, index: usize, ingress: &OurIngress<'a>) {
        self.annotations(index);
        let Some(spec) = ingress.spec else { return };
        let namespace = ingress.namespace;
        if self.policies[index].canary.is_some() {
            // A canary claims no route of its own: its paths join the main Ingress's.
            for (ri, rule) in spec.rules.iter().flatten().enumerate() {
                let Ok(host) = parse_rule_host(rule.host.as_deref()) else {
                    let field = format!("spec.rules[{ri}].host");
                    self.diag(index, field, Reason::InvalidHost, "not a valid host");
                    continue;
                };
                for (pi, path) in rule.http.iter().flat_map(|h| h.paths.iter()).enumerate() {
                    self.canary_path(index, namespace, &host, (ri, pi), path);
                }
            }
            return;
        }

        if let Some(backend) = &spec.default_backend {
            self.default_backend(index, namespace, backend);
        }
        for (ri, rule) in spec.rules.iter().flatten().enumerate() {
            let host = match parse_rule_host(rule.host.as_deref()) {
                Ok(host) => host,
                Err(e) => {
                    let field = format!("spec.rules[{ri}].host");
                    self.diag(index, field, Reason::InvalidHost, e.to_string());
                    continue;
                }
            };
            // The host exists even if it ends up with no valid path: it still owns its
            // requests (they get the default backend), as a server block would.
            // Taken out of the map while its paths are added, to hash the host only twice.
            let mut claims = self.routes.remove(&host).unwrap_or_default();
            for (pi, path) in rule.http.iter().flat_map(|h| h.paths.iter()).enumerate() {
                self.path(index, namespace, &host, &mut claims, (ri, pi), path);
            }
            self.host_names(index, &host);
            self.routes.insert(host, claims);
        }
        for (ti, tls) in spec.tls.iter().flatten().enumerate() {
            self.tls(index, namespace, ti, tls);
        }
    }

    /// Records the `server-alias` and `from-to-www-redirect` of Ingress `index` for a rule
    /// host: the oldest Ingress of a host with aliases sets them (ingress-nginx: "Aliases
    /// already configured for server"); host-less rules take no alias.
    fn host_names(&mut self, index: usize, host: &HostPattern) {
        if *host == HostPattern::Any {
            return;
        }
        let policy = &self.policies[index];
        let (aliases, www) = (policy.server_alias.clone(), policy.from_to_www);
        if www {
            self.www_claims.push((host.clone(), index));
        }
        if aliases.is_empty() {
            return;
        }
        match self.alias_claims.iter().find(|(h, _, _)| h == host) {
            Some((_, owner, _)) if *owner == index => {}
            Some((_, owner, _)) => {
                let winner = self.ingresses[*owner].object.clone();
                let detail = format!(
                    "host {host} already has the server-alias of {winner}; these aliases are \
                     ignored, as in ingress-nginx"
                );
                let field = self.annotation_field(index, "server-alias");
                self.diag(index, field, Reason::ConflictLost { winner }, detail);
            }
            None => self.alias_claims.push((host.clone(), index, aliases)),
        }
    }

    /// `metadata.annotations[<key>]` for the key of `name` the Ingress has (its
    /// `sluice.dev/` form when it has both).
    fn annotation_field(&self, index: usize, name: &str) -> String {
        let ingress = &self.ingresses[index];
        let key = [annotations::SLUICE_PREFIX, annotations::NGINX_PREFIX]
            .iter()
            .map(|prefix| format!("{prefix}{name}"))
            .find(|key| ingress.annotations.is_some_and(|a| a.contains_key(key)))
            .unwrap_or_else(|| format!("{}{name}", annotations::NGINX_PREFIX));
        format!("metadata.annotations[{key}]")
    }

    /// The names `server-alias` and `from-to-www-redirect` add, once every rule host is
    /// known. A name that is the host of some rule keeps its own rules (ingress-nginx: the
    /// alias or the redirect is skipped); an alias claimed twice goes to the older claim.
    fn extra_names(&mut self) -> ExtraNames {
        let mut extra = ExtraNames::default();
        for (host, owner, aliases) in std::mem::take(&mut self.alias_claims) {
            for alias in aliases {
                if alias == host {
                    continue;
                }
                let field = self.annotation_field(owner, "server-alias");
                if self.routes.contains_key(&alias) {
                    let detail = format!(
                        "alias {alias} is the host of an Ingress rule, whose rules it keeps \
                         (ingress-nginx ignores such an alias too)"
                    );
                    self.diag(owner, field, Reason::InvalidAnnotation, detail);
                } else if let Some((other, _)) = extra.aliases.get(&alias) {
                    let detail = format!("alias {alias} is already an alias of host {other}");
                    self.diag(owner, field, Reason::InvalidAnnotation, detail);
                } else {
                    extra.aliases.insert(alias, (host.clone(), owner));
                }
            }
        }
        for (host, owner) in std::mem::take(&mut self.www_claims) {
            let Some(from) = annotations::hosts::www_counterpart(&host) else {
                continue;
            };
            if self.routes.contains_key(&from) || extra.aliases.contains_key(&from) {
                let field = self.annotation_field(owner, "from-to-www-redirect");
                let detail = format!(
                    "{from} is the host of an Ingress rule (or an alias), whose rules it keeps: \
                     no redirect to {host} (ingress-nginx skips it too)"
                );
                self.diag(owner, field, Reason::InvalidAnnotation, detail);
                continue;
            }
            extra.www.entry(from).or_insert((host, owner));
        }
        extra
    }

    /// One `spec.rules[ri].http.paths[pi]`: validate, then claim unless an older claim exists.
    fn path(
        &mut self,
        index: usize,
        namespace: &'a str,
        host: &HostPattern,
        claims: &mut BTreeMap<RulePath, Claim>,
        (ri, pi): (usize, usize),
        path: &'a HTTPIngressPath,
    ) {
        let field = || format!("spec.rules[{ri}].http.paths[{pi}]");
        let Some((rule_path, key)) = self.checked_path(index, namespace, host, (ri, pi), path)
        else {
            return;
        };
        if let Some(winner) = claims.get(&rule_path) {
            let winner = self.ingresses[winner.owner].object.clone();
            let detail = format!(
                "host {:?} path {:?} ({:?}) is already defined by {winner}",
                host.to_string(),
                path.path.as_deref().unwrap_or("/"),
                rule_path.kind,
            );
            self.diag(index, field(), Reason::ConflictLost { winner }, detail);
            return;
        }
        if let Some(slot) = self.slot(index, key, || format!("{}.backend", field())) {
            let claim = Claim { owner: index, slot };
            let written = match path.path.as_deref() {
                None | Some("") => "/",
                Some(p) => p,
            };
            let names = nginx_location_names(rule_path.kind, written);
            let locations = self.locations.entry(host.clone()).or_default();
            locations.extend(names.into_iter().map(|name| (name, claim)));
            claims.insert(rule_path, claim);
        }
    }

    /// ingress-nginx's trailing-slash redirects of every host without regex paths (nginx
    /// writes every path of a regex host as a regex location, which never redirects).
    fn trailing_slash_redirects(&self) -> Vec<SlashRedirect> {
        let mut out = Vec::new();
        for (host, locations) in &self.locations {
            if self.regex_hosts.contains(host) {
                continue;
            }
            let names: Vec<String> = locations.iter().map(|(n, _)| n.clone()).collect();
            for (path, index) in slash_redirect_paths(&names) {
                out.push(SlashRedirect {
                    host: host.clone(),
                    path,
                    claim: locations[index].1,
                });
            }
        }
        out
    }

    /// The rule path and Service port of `spec.rules[ri].http.paths[pi]`, or `None` after
    /// a diagnostic saying what is wrong with it. A regex path's compiled pattern is kept.
    fn checked_path(
        &mut self,
        index: usize,
        namespace: &'a str,
        host: &HostPattern,
        (ri, pi): (usize, usize),
        path: &'a HTTPIngressPath,
    ) -> Option<(RulePath, BackendKey<'a>)> {
        let field = || format!("spec.rules[{ri}].http.paths[{pi}]");
        let parsed = if self.regex_hosts.contains(host) && path.path_type != "Exact" {
            parse_regex_rule_path(path.path.as_deref(), &path.path_type).map(|(rule, regex)| {
                self.regexes.entry(rule.key.clone()).or_insert(regex);
                rule
            })
        } else {
            parse_rule_path(path.path.as_deref(), &path.path_type)
        };
        let rule_path = match parsed {
            Ok(p) => p,
            Err(e) => {
                let field = format!("{}.{}", field(), e.field());
                self.diag(index, field, Reason::InvalidPath, e.to_string());
                return None;
            }
        };
        match backend_key(&path.backend, namespace) {
            Ok(key) => Some((rule_path, key)),
            Err(p) => {
                let field = format!("{}.backend{}", field(), p.field);
                self.diag(index, field, p.reason, p.detail);
                None
            }
        }
    }

    /// One path of a canary Ingress: validated like any path, then remembered for the main
    /// Ingress's route of the same host and path.
    fn canary_path(
        &mut self,
        index: usize,
        namespace: &'a str,
        host: &HostPattern,
        (ri, pi): (usize, usize),
        path: &'a HTTPIngressPath,
    ) {
        let field = || format!("spec.rules[{ri}].http.paths[{pi}]");
        let Some((rule_path, key)) = self.checked_path(index, namespace, host, (ri, pi), path)
        else {
            return;
        };
        let at = (host.clone(), rule_path);
        if let Some(winner) = self.canaries.get(&at) {
            let winner = self.ingresses[winner.owner].object.clone();
            let detail = format!(
                "host {:?} path {:?} already has the canary {winner}",
                host.to_string(),
                path.path.as_deref().unwrap_or("/"),
            );
            self.diag(index, field(), Reason::ConflictLost { winner }, detail);
            return;
        }
        if let Some(slot) = self.slot(index, key, || format!("{}.backend", field())) {
            self.canaries.insert(at, Claim { owner: index, slot });
        }
    }

    /// Canary paths that no main Ingress defines get no traffic: say so.
    fn orphan_canaries(&mut self) {
        let mut orphans: Vec<(usize, String, String)> = self
            .canaries
            .iter()
            .filter(|((host, path), _)| {
                !self
                    .routes
                    .get(host)
                    .is_some_and(|paths| paths.contains_key(path))
            })
            .map(|((host, path), claim)| (claim.owner, host.to_string(), path.key.clone()))
            .collect();
        orphans.sort();
        for (owner, host, path) in orphans {
            let detail = format!(
                "no Ingress of this class defines host {host:?} path {path:?}: a canary \
                 only takes part of the traffic of a main Ingress, so this path gets none"
            );
            self.diag(
                owner,
                "spec.rules".to_owned(),
                Reason::CanaryWithoutMain,
                detail,
            );
        }
        let routes = &self.routes;
        self.canaries.retain(|(host, path), _| {
            routes
                .get(host)
                .is_some_and(|paths| paths.contains_key(path))
        });
    }

    fn default_backend(&mut self, index: usize, namespace: &'a str, backend: &'a IngressBackend) {
        let key = match backend_key(backend, namespace) {
            Ok(k) => k,
            Err(p) => {
                let field = format!("spec.defaultBackend{}", p.field);
                self.diag(index, field, p.reason, p.detail);
                return;
            }
        };
        if let Some(winner) = &self.default_backend {
            let winner = self.ingresses[winner.owner].object.clone();
            let detail = format!("the default backend is already defined by {winner}");
            let field = "spec.defaultBackend".to_owned();
            self.diag(index, field, Reason::ConflictLost { winner }, detail);
            return;
        }
        if let Some(slot) = self.slot(index, key, || "spec.defaultBackend".to_owned()) {
            self.default_backend = Some(Claim { owner: index, slot });
        }
    }

    /// The slot of a Service port, resolving it on first use; reports its problems against
    /// `field`. `None` for unsupported backends (ExternalName), which must not be routed.
    fn slot(
        &mut self,
        index: usize,
        key: BackendKey<'a>,
        field: impl FnOnce() -> String,
    ) -> Option<usize> {
        // The Ingress's own rules and default backend (its policy is pushed by then; the
        // `default-backend` and `mirror-target` annotations resolve before it, as
        // ingress-nginx never gives those the ClusterIP).
        let cluster_ip = self.policies.get(index).is_some_and(|p| p.service_upstream);
        let slot = match self.slot_of.get(&(key, cluster_ip)) {
            Some(&slot) => slot,
            None => {
                let service = key.to_service_ref();
                let resolution = if cluster_ip {
                    self.services.resolve_cluster_ip(&service)
                } else {
                    self.services.resolve(&service)
                };
                self.slots.push(Slot {
                    service,
                    cluster_ip,
                    resolution,
                });
                self.slot_of.insert((key, cluster_ip), self.slots.len() - 1);
                self.slots.len() - 1
            }
        };
        if cluster_ip
            && let Ok(resolved) = &self.slots[slot].resolution
            && !resolved.cluster_ip
        {
            let field = self.annotation_field(index, "service-upstream");
            let service = &self.slots[slot].service;
            let detail = format!(
                "Service {}/{} has no ClusterIP (headless); its endpoints are used, as \
                 ingress-nginx does",
                service.namespace, service.name
            );
            self.diag(index, field, Reason::InvalidAnnotation, detail);
        }
        let Err(problem) = &self.slots[slot].resolution else {
            return Some(slot);
        };
        let problem = problem.clone();
        let field = format!("{}{}", field(), problem.field);
        let usable = problem.reason != Reason::UnsupportedBackend;
        self.diag(index, field, problem.reason, problem.detail);
        usable.then_some(slot)
    }

    fn tls(&mut self, index: usize, namespace: &'a str, ti: usize, tls: &'a IngressTLS) {
        let mut hosts = Vec::new();
        for (hi, host) in tls.hosts.iter().flatten().enumerate() {
            match parse_rule_host(Some(host)) {
                Ok(HostPattern::Any) => {
                    let field = format!("spec.tls[{ti}].hosts[{hi}]");
                    self.diag(index, field, Reason::InvalidHost, "TLS host is empty");
                }
                Ok(pattern) => {
                    // Served over TLS (with the default certificate if need be): routes
                    // of this host redirect plain HTTP unless `ssl-redirect: "false"`.
                    self.tls_hosts.insert(pattern.clone());
                    hosts.push((hi, pattern));
                }
                Err(e) => {
                    let field = format!("spec.tls[{ti}].hosts[{hi}]");
                    self.diag(index, field, Reason::InvalidHost, e.to_string());
                }
            }
        }
        // No secretName: SNI-only entry, served with the listener's default certificate.
        let Some(secret_name) = tls.secret_name.as_deref().filter(|n| !n.is_empty()) else {
            return;
        };
        let loaded = match self.loaded_secrets.get(&(namespace, secret_name)) {
            Some(loaded) => loaded.clone(),
            None => {
                let loaded = match self.secrets.get(&(namespace, secret_name)) {
                    None => Err(SecretProblem::Missing),
                    Some(secret) => parse_secret(secret, ObjectRef::secret(namespace, secret_name))
                        .map(Arc::new)
                        .map_err(SecretProblem::Invalid),
                };
                self.loaded_secrets
                    .insert((namespace, secret_name), loaded.clone());
                loaded
            }
        };
        let secret_ref = || ObjectRef::secret(namespace, secret_name);
        let field = || format!("spec.tls[{ti}].secretName");
        let cert = match loaded {
            Ok(cert) => cert,
            Err(SecretProblem::Missing) => {
                let detail = format!(
                    "{} not found; its hosts are served over HTTPS with the default \
                     certificate (which clients do not trust for them), and plain HTTP to them \
                     is still redirected, as ingress-nginx does",
                    secret_ref()
                );
                self.diag(index, field(), Reason::TlsSecretMissing, detail);
                return;
            }
            Err(SecretProblem::Invalid(why)) => {
                let detail = format!("{} is not a usable TLS Secret: {why}", secret_ref());
                self.diag(index, field(), Reason::TlsSecretInvalid, detail);
                return;
            }
        };
        for (hi, host) in hosts {
            match self.certs.entry(host) {
                Entry::Vacant(v) => {
                    v.insert(CertClaim {
                        owner: index,
                        cert: cert.clone(),
                    });
                }
                // The same Secret named twice is no conflict.
                Entry::Occupied(o) if o.get().cert.secret == cert.secret => {}
                Entry::Occupied(o) => {
                    let winner = self.ingresses[o.get().owner].object.clone();
                    let detail = format!(
                        "the certificate for {:?} is already {} from {winner}",
                        o.key().to_string(),
                        o.get().cert.secret
                    );
                    let field = format!("spec.tls[{ti}].hosts[{hi}]");
                    self.diag(index, field, Reason::ConflictLost { winner }, detail);
                }
            }
        }
    }
}

/// What route entries are made of besides backends.
struct EntryInputs<'c, 'a> {
    ingresses: &'c [OurIngress<'a>],
    /// Each host's `server-snippet` and the Ingress it comes from.
    server_snippets: HashMap<HostPattern, (usize, Arc<Policy>)>,
    policies: Vec<IngressPolicy>,
    tls_hosts: HashSet<HostPattern>,
    regexes: HashMap<String, regex::Regex>,
    /// `no-auth-locations`: rule paths starting with one of these get no external auth.
    no_auth_locations: Vec<String>,
}

/// Route entries, one per distinct (backend, Ingress, redirecting, rewritten path).
struct Entries<'c, 'a> {
    inputs: EntryInputs<'c, 'a>,
    backends: Vec<Arc<Backend>>,
    id_of: Vec<u32>,
    entries: Vec<RouteEntry>,
    index: HashMap<EntryKey, u32>,
}

/// What makes two route entries different: (backend id, owning Ingress, redirecting,
/// rewritten rule path, canary Ingress and its backend slot, Ingress of the host's server
/// snippet).
type EntryKey = (
    u32,
    usize,
    bool,
    Option<String>,
    Option<(usize, usize)>,
    Option<usize>,
);

impl Entries<'_, '_> {
    fn get(
        &mut self,
        backend: &Arc<Backend>,
        owner: usize,
        has_tls: bool,
        path: &RulePath,
        canary: Option<Claim>,
        host: &HostPattern,
    ) -> u32 {
        let owner_policy = &self.inputs.policies[owner];
        let (policy, redirecting) = owner_policy.for_host(has_tls);
        let server = self.inputs.server_snippets.get(host);
        // A rewrite depends on the rule's path too (its captures).
        let rewrite = owner_policy.rewrite_target.as_ref().and_then(|target| {
            let regex = match path.kind {
                PathKind::Regex => self.inputs.regexes.get(&path.key).cloned(),
                // ingress-nginx's rewrite reads any path as a regex, Exact ones included.
                _ => path_regex(&path.key).ok(),
            }?;
            Some(Rewrite {
                regex,
                target: target.clone(),
            })
        });
        // `auth-cache-key`: answers are kept per location (ingress-nginx keys its auth
        // cache by server and location), so such an entry is its path's own.
        let auth_cached = policy
            .auth
            .as_ref()
            .is_some_and(|auth| auth.cache.is_some());
        // `no-auth-locations` (ingress-nginx's `isLocationInLocationList`: the rule's path
        // starts with one): no external auth, own or global, on this path.
        let no_auth = policy.auth.is_some()
            && self
                .inputs
                .no_auth_locations
                .iter()
                .any(|location| path.key.starts_with(location.as_str()));
        let key = (
            backend.id as u32,
            owner,
            redirecting,
            (rewrite.is_some() || auth_cached || no_auth).then(|| path.key.clone()),
            // The canary's backend too: one canary Ingress may send different paths to
            // different Services.
            canary.map(|c| (c.owner, c.slot)),
            server.map(|(owner, _)| *owner),
        );
        if let Some(&id) = self.index.get(&key) {
            return id;
        }
        let merged;
        let policy = match server {
            Some((_, server)) => {
                merged = Arc::new(annotations::snippet::merge_server(policy, server));
                &merged
            }
            None => policy,
        };
        let id = self.entries.len() as u32;
        let policy = if no_auth {
            Arc::new(Policy {
                auth: None,
                ..Policy::clone(policy)
            })
        } else if auth_cached {
            let ingress = &self.inputs.ingresses[owner].object;
            let mut own = Policy::clone(policy);
            if let Some(cache) = own.auth.as_mut().and_then(|auth| auth.cache.as_mut()) {
                cache.location = format!("{}/{} {}", ingress.namespace, ingress.name, path.key);
            }
            Arc::new(own)
        } else {
            Arc::clone(policy)
        };
        let fallback = owner_policy
            .fallback
            .map(|slot| Arc::clone(&self.backends[self.id_of[slot] as usize]));
        self.entries.push(RouteEntry {
            backend: Arc::clone(backend),
            policy,
            source: self.inputs.ingresses[owner].object.clone(),
            rewrite,
            fallback,
            canary: canary.and_then(|claim| {
                let rule = self.inputs.policies[claim.owner].canary.clone()?;
                Some(Canary {
                    backend: Arc::clone(&self.backends[self.id_of[claim.slot] as usize]),
                    rule,
                    source: self.inputs.ingresses[claim.owner].object.clone(),
                })
            }),
            split: Vec::new(),
            fixed_status: None,
            // `mirror-target`: every request copied (ingress-nginx mirrors them all).
            mirrors: owner_policy
                .mirror
                .map(|slot| Mirror {
                    backend: Arc::clone(&self.backends[self.id_of[slot] as usize]),
                    numerator: 1,
                    denominator: 1,
                })
                .into_iter()
                .collect(),
            rule: None,
        });
        self.index.insert(key, id);
        id
    }
}

fn build_table(
    routes: Routes,
    canaries: HashMap<(HostPattern, RulePath), Claim>,
    default_backend: Option<DefaultBackend>,
    certs: HashMap<HostPattern, CertClaim>,
    slots: Vec<Slot>,
    entry_inputs: EntryInputs<'_, '_>,
    extra_names: ExtraNames,
) -> RouteTable {
    // Backend ids in ServiceRef order, so that they do not depend on input order; only
    // slots that some claim uses become backends.
    let mut used = vec![false; slots.len()];
    for claim in routes.values().flat_map(|paths| paths.values()) {
        used[claim.slot] = true;
    }
    for claim in canaries.values() {
        used[claim.slot] = true;
    }
    if let Some(default) = &default_backend {
        used[default.slot] = true;
    }
    for slot in entry_inputs.policies.iter().filter_map(|p| p.fallback) {
        used[slot] = true;
    }
    for slot in entry_inputs.policies.iter().filter_map(|p| p.mirror) {
        used[slot] = true;
    }
    let mut order: Vec<usize> = (0..slots.len()).filter(|&s| used[s]).collect();
    order.sort_unstable_by(|&a, &b| {
        (&slots[a].service, slots[a].cluster_ip).cmp(&(&slots[b].service, slots[b].cluster_ip))
    });
    let mut id_of = vec![u32::MAX; slots.len()];
    for (id, &slot) in order.iter().enumerate() {
        id_of[slot] = id as u32;
    }
    let mut slots: Vec<Option<Slot>> = slots.into_iter().map(Some).collect();
    let mut registry = BackendRegistry::default();
    for &slot in &order {
        let Some(Slot {
            service,
            cluster_ip,
            resolution,
        }) = slots[slot].take()
        else {
            continue;
        };
        // A Service port that does not resolve still gets its backend (no endpoints: 503),
        // with the diagnostic its Ingress already got.
        let resolved = resolution.unwrap_or(Resolved {
            endpoints: Vec::new(),
            not_ready: 0,
            protocol: None,
            tls: None,
            cluster_ip: false,
        });
        if cluster_ip {
            // Gateway API routes naming the Service port get the endpoints, not this one.
            registry.push_unshared(service, resolved);
        } else {
            registry.push(service, Some(resolved));
        }
    }
    let backends = registry.into_backends();

    let mut entries = Entries {
        inputs: entry_inputs,
        backends,
        id_of,
        entries: Vec::new(),
        index: HashMap::new(),
    };
    // The default backend serves requests no rule claims: no Ingress's policy applies.
    let default_entry = default_backend.map(|default| {
        let id = entries.entries.len() as u32;
        entries.entries.push(RouteEntry {
            backend: Arc::clone(&entries.backends[entries.id_of[default.slot] as usize]),
            policy: Arc::new(Policy::default()),
            source: default.source,
            rewrite: None,
            fallback: None,
            canary: None,
            split: Vec::new(),
            fixed_status: None,
            mirrors: Vec::new(),
            rule: None,
        });
        id
    });
    let mut table = RouteTable {
        default_backend: default_entry,
        ..RouteTable::default()
    };
    let mut slash_policy: Option<Arc<Policy>> = None;
    table.exact_hosts.reserve(routes.len());
    table.exact_certs.reserve(certs.len());
    let mut aliases_of: HashMap<&HostPattern, Vec<&HostPattern>> = HashMap::new();
    for (alias, (host, _)) in &extra_names.aliases {
        aliases_of.entry(host).or_default().push(alias);
    }
    for (host, paths) in &routes {
        // `from-to-www-redirect`: the other name answers 308 to this host, with the backend
        // of the host's first path for the books (no request reaches it).
        let Some(claim) = paths.values().next() else {
            continue;
        };
        for (from, (_, owner)) in extra_names.www.iter().filter(|(_, (h, _))| h == host) {
            let HostPattern::Exact(to) = host else {
                continue;
            };
            let id = entries.entries.len() as u32;
            entries.entries.push(RouteEntry {
                backend: Arc::clone(&entries.backends[entries.id_of[claim.slot] as usize]),
                policy: Arc::new(Policy {
                    www_redirect: Some(to.clone()),
                    ..Policy::default()
                }),
                source: entries.inputs.ingresses[*owner].object.clone(),
                rewrite: None,
                fallback: None,
                canary: None,
                split: Vec::new(),
                fixed_status: None,
                mirrors: Vec::new(),
                rule: None,
            });
            let mut builder = RuleSetBuilder::default();
            builder.push(
                PathCond::Prefix(String::new()),
                Precedence::in_order(0),
                Candidate::path_only(id),
            );
            let set = builder.build(&entries.inputs.regexes);
            insert_rule_set(&mut table, from.clone(), set);
        }
    }
    for (host, paths) in routes {
        // Lowered into the rule form Gateway API routes use: a path, no other condition.
        let mut builder = RuleSetBuilder::default();
        let mut lowered: Vec<(PathCond, Precedence, u32)> = Vec::new();
        let has_tls = entries.inputs.tls_hosts.contains(&host);
        for (index, (path, claim)) in paths.iter().enumerate() {
            let backend = Arc::clone(&entries.backends[entries.id_of[claim.slot] as usize]);
            let canary = canaries.get(&(host.clone(), path.clone())).copied();
            let entry = entries.get(&backend, claim.owner, has_tls, path, canary, &host);
            let cond = match path.kind {
                PathKind::Exact => PathCond::Exact(path.key.clone()),
                PathKind::Prefix => PathCond::Prefix(path.key.clone()),
                PathKind::StringPrefix => PathCond::StringPrefix(path.key.clone()),
                PathKind::Regex => PathCond::Regex(path.key.clone()),
            };
            lowered.push((cond.clone(), Precedence::in_order(index), entry));
            builder.push(
                cond,
                Precedence::in_order(index),
                Candidate::path_only(entry),
            );
        }
        // `--ingress-nginx-compat`: the redirected paths as Exact rules (no rule has such a
        // path, or there would be no redirect) whose entry answers the 301.
        for redirect in extra_names
            .slash_redirects
            .iter()
            .filter(|r| r.host == host)
        {
            let claim = redirect.claim;
            let id = entries.entries.len() as u32;
            entries.entries.push(RouteEntry {
                backend: Arc::clone(&entries.backends[entries.id_of[claim.slot] as usize]),
                policy: Arc::clone(slash_policy.get_or_insert_with(|| {
                    Arc::new(Policy {
                        trailing_slash_redirect: true,
                        ..Policy::default()
                    })
                })),
                source: entries.inputs.ingresses[claim.owner].object.clone(),
                rewrite: None,
                fallback: None,
                canary: None,
                split: Vec::new(),
                fixed_status: None,
                mirrors: Vec::new(),
                rule: None,
            });
            lowered.push((
                PathCond::Exact(redirect.path.clone()),
                Precedence::in_order(usize::MAX),
                id,
            ));
            builder.push(
                PathCond::Exact(redirect.path.clone()),
                Precedence::in_order(usize::MAX),
                Candidate::path_only(id),
            );
        }
        let matcher = builder.build(&entries.inputs.regexes);
        // `server-alias`: the same rules under each alias (one server, more names).
        for alias in aliases_of.get(&host).into_iter().flatten() {
            let mut builder = RuleSetBuilder::default();
            for (cond, precedence, entry) in &lowered {
                builder.push(
                    cond.clone(),
                    precedence.clone(),
                    Candidate::path_only(*entry),
                );
            }
            let set = builder.build(&entries.inputs.regexes);
            insert_rule_set(&mut table, (*alias).clone(), set);
        }
        insert_rule_set(&mut table, host, matcher);
    }
    // An alias and a redirecting name are served with their host's certificate unless
    // they have one of their own.
    let borrowed: Vec<(HostPattern, Arc<TlsCertificate>)> = extra_names
        .aliases
        .iter()
        .chain(&extra_names.www)
        .filter(|(name, _)| !certs.contains_key(*name))
        .filter_map(|(name, (host, _))| Some((name.clone(), certs.get(host)?.cert.clone())))
        .collect();
    for (name, cert) in borrowed {
        match name {
            HostPattern::Exact(h) => {
                table.exact_certs.insert(Key::new(&h), cert);
            }
            HostPattern::Wildcard(s) => {
                table.wildcard_certs.insert(Key::new(&s), cert);
            }
            HostPattern::Any => {}
        }
    }
    let mut in_use: BTreeMap<ObjectRef, Arc<TlsCertificate>> = BTreeMap::new();
    for (host, claim) in certs {
        in_use
            .entry(claim.cert.secret.clone())
            .or_insert_with(|| claim.cert.clone());
        match host {
            HostPattern::Exact(h) => {
                table.exact_certs.insert(Key::new(&h), claim.cert);
            }
            HostPattern::Wildcard(s) => {
                table.wildcard_certs.insert(Key::new(&s), claim.cert);
            }
            HostPattern::Any => {}
        }
    }
    table.certificates = in_use.into_values().collect();
    table.entries = entries.entries.into_iter().map(Arc::new).collect();
    table.backends = entries.backends.into_iter().collect();
    table
}

/// The users' text of an `auth-secret`, before it is read as htpasswd or htdigest.
enum AuthEntries {
    /// `auth-file`: the `auth` key.
    File(String),
    /// `auth-map`: every key a user, its value the rest of the user's line.
    Map(BTreeMap<String, String>),
}

/// The users' text of `secret` as `auth-secret-type` says; the error completes "Secret
/// ns/name ...".
fn auth_secret_entries(
    secret: &Secret,
    secret_type: annotations::basic_auth::SecretType,
) -> Result<AuthEntries, String> {
    use annotations::basic_auth::SecretType;
    match secret_type {
        SecretType::File => crate::tls::secret_value(secret, "auth")
            .map(|text| AuthEntries::File(String::from_utf8_lossy(text).into_owned()))
            .ok_or_else(|| "has no key auth (an htpasswd or htdigest file)".to_owned()),
        SecretType::Map => {
            let data = secret
                .data
                .iter()
                .flatten()
                .map(|(k, v)| (k.clone(), String::from_utf8_lossy(&v.0).into_owned()));
            let strings = secret
                .string_data
                .iter()
                .flatten()
                .map(|(k, v)| (k.clone(), v.clone()));
            Ok(AuthEntries::Map(data.chain(strings).collect()))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// nginx's static location tree (`ngx_http_core_find_static_location`): a request one
    /// byte short of a location name ending in `/` gets 301 (`auto_redirect`) unless some
    /// location has the request's path as its name; ingress-nginx's locations per path type
    /// (`updateServerLocations`).
    #[test]
    fn trailing_slash_redirects_follow_nginx_locations() {
        use PathKind::*;
        let redirects = |paths: &[(PathKind, &str)]| -> Vec<String> {
            let names: Vec<String> = paths
                .iter()
                .flat_map(|(kind, path)| nginx_location_names(*kind, path))
                .collect();
            let mut out: Vec<String> = slash_redirect_paths(&names)
                .into_iter()
                .map(|(path, _)| path)
                .collect();
            out.sort();
            out
        };
        let none: Vec<String> = Vec::new();
        assert_eq!(redirects(&[(Prefix, "/my-path/")]), ["/my-path"]);
        assert_eq!(redirects(&[(Exact, "/my-path/")]), ["/my-path"]);
        assert_eq!(redirects(&[(StringPrefix, "/my-path/")]), ["/my-path"]);
        // Prefix without slash: `location /p/` and `= /p`, so /p is served.
        assert_eq!(redirects(&[(Prefix, "/p")]), none);
        assert_eq!(redirects(&[(Prefix, "/")]), none);
        assert_eq!(redirects(&[(Exact, "/")]), none);
        // Any location named /a covers the request /a.
        for kind in [Exact, Prefix, StringPrefix] {
            assert_eq!(
                redirects(&[(Prefix, "/a/"), (kind, "/a")]),
                none,
                "{kind:?}"
            );
            assert_eq!(redirects(&[(kind, "/a"), (Exact, "/a/")]), none, "{kind:?}");
        }
        assert_eq!(
            redirects(&[(StringPrefix, "/a"), (Prefix, "/a/b/")]),
            ["/a/b"]
        );
        assert_eq!(redirects(&[(Prefix, "/a/"), (Exact, "/a/")]), ["/a"]);
        assert_eq!(redirects(&[(Regex, "/a/")]), none);
        assert_eq!(
            nginx_location_names(Prefix, "/p"),
            ["/p".to_owned(), "/p/".to_owned()]
        );
    }
}

//! Compiles Kubernetes Ingresses and Gateway API routes into one immutable routing table
//! and matches requests against it. No I/O: everything here is a pure function of its inputs
//! (no files, network, clock or environment), so it can be tested exhaustively and
//! benchmarked.
//!
//! # Where to start
//!
//! Two front-end compilers lower their API into one intermediate form:
//!
//! * `ingress/`: [`compile`] takes [`Inputs`] (snapshots of the informer caches) and
//!   [`CompileOptions`] (who we are) and returns [`Compiled`]: a [`RouteTable`], the
//!   [`Diagnostic`]s to publish as Events, and the Ingresses that are ours. `class`
//!   (is this Ingress ours?), `annotations/` (one file per family:
//!   ingress-nginx's `nginx.ingress.kubernetes.io/*` with its semantics, and the same keys
//!   under `sluice.dev/*`; an annotation that is unsupported, invalid or a snippet becomes a
//!   [`Diagnostic`] on its Ingress while the rest of the Ingress is served).
//! * [`gateway`]: Gateways, listeners and HTTPRoutes into the same table, with their status.
//! * `incremental/`: [`IncrementalCompiler`] gives what [`compile`] gives, but after a change
//!   of Ingresses alone compiles only the Ingresses of the hosts the change touches and
//!   grafts them into a copy of the previous table (what the controller runs on every
//!   change).
//!
//! The intermediate form they share:
//!
//! * `rules`: a `RuleSet` per host name: path conditions (Exact, Prefix, regex),
//!   the conditions besides the path (method, headers, query) and the entry each match
//!   yields, looked up in one order for both APIs. An Ingress path is a match with a path
//!   and nothing else.
//! * [`RouteEntry`] (`table.rs`): the [`Backend`] (or weighted backends) plus the compiled
//!   [`Policy`] (redirects, source ranges, CORS, body limit, timeouts, header changes), the
//!   rewrite, mirrors. `backend_registry` keeps one [`Backend`] per Service port for both
//!   compilers; `refs::Age` is the one order in which objects claim what is contested.
//! * [`persistent`]: the table keeps its entries, backends and host maps in chunks and
//!   shards a copy shares ([`persistent::ChunkedVec`], `ShardedMap`): an incremental
//!   compile changes a copy of the previous table in time that does not grow with it, and
//!   the proxy carries its per-entry and per-backend state over chunk by chunk.
//! * [`RouteTable::route_request`] answers "which entry gets this request?" (one loop over
//!   the host's owner, Gateway rules before Ingress ones at each step);
//!   [`RouteTable::route`] by host and path alone; [`RouteTable::certificate`] "which
//!   certificate for this SNI name?".
//! * Shared pieces: `path.rs` (rule paths and path types, for both compilers), `host.rs`
//!   (host names and wildcards), `backend.rs` (Service ports to
//!   endpoints), `tls.rs` (Secrets to certificates), `diagnostic.rs`, `refs.rs` (names).
//!
//! # Matching rules
//!
//! **Class.** An Ingress is ours if `spec.ingressClassName` names an IngressClass whose
//! `spec.controller` is [`CompileOptions::controller_name`]; else if its legacy annotation
//! `kubernetes.io/ingress.class` equals [`CompileOptions::ingress_class`]; else, when it has
//! neither, if one of our IngressClasses is annotated
//! `ingressclass.kubernetes.io/is-default-class: "true"` or
//! [`CompileOptions::watch_ingress_without_class`] is set. Other Ingresses are ignored
//! entirely (no routes, no diagnostics, not in [`Compiled::ours`]).
//!
//! **Hosts.** Request hosts are compared without port, without a trailing dot and
//! case-insensitively. A rule host is either exact (`www.example.com`) or a wildcard
//! `*.example.com`, which covers exactly one label (`a.example.com`, not `a.b.example.com`
//! nor `example.com`). Rules without a host match every host.
//!
//! **Which rules a request sees (precedence).** Like ingress-nginx's server blocks, exactly one
//! rule set owns a request: the exact host's if some rule names that host, else the wildcard's
//! if one covers it, else the host-less rules. A host is "named" as soon as one valid rule
//! names it, even with no valid path. If no path of the owning set matches, there is **no
//! fallthrough** to the wildcard or host-less rules: the request goes to the default backend.
//!
//! **Paths.** `Exact` compares the whole path byte for byte (`/foo` does not match `/foo/`).
//! `Prefix` compares `/`-separated elements, ignoring the rule's trailing slash: `/foo` matches
//! `/foo`, `/foo/` and `/foo/bar`, never `/foobar`; `/` matches every path.
//! `ImplementationSpecific` is matched as ingress-nginx matches it: a string prefix, as nginx's
//! `location /foo` (`/foo` matches `/foo`, `/foo/bar` and `/foobar`), or a regular expression
//! on a host with regex paths. Longest wins across kinds as among nginx locations: `Prefix
//! /foo` counts as `location /foo/`, one byte longer than `ImplementationSpecific /foo`. A missing or empty rule
//! path means `/`; a missing `pathType` is invalid. Rule paths must start with `/` and, as the
//! API server demands for Exact and Prefix, must not contain `//`, `.`/`..` segments or `%2F`.
//!
//! **Request paths are normalised before matching**, as nginx does before it matches
//! locations: [`normalize_request_path`] decodes `%XX`, resolves `.` and `..` segments and
//! merges adjacent slashes, and refuses (400) what nginx refuses, such as a `..` that climbs
//! above `/`. The proxy calls it once per request, for Ingress and Gateway API matching
//! alike, and every policy reads that path; [`RouteTable::route`] itself matches the path it
//! is given. An empty path counts as `/`; a path not starting with `/` (e.g. `*`) matches
//! only Exact rules equal to it, i.e. none. Upstream gets the client's request target
//! unchanged unless a rewrite applies (nginx's `proxy_pass` without a URI part).
//!
//! **Several matches.** The longest matching rule path wins, Prefix paths counted without
//! their trailing slash; at equal length Exact beats Prefix.
//!
//! **Several Ingresses.** Rules of the same host merge. A true conflict (same host, same path,
//! same effective type) goes to the oldest Ingress (creationTimestamp; missing counts as
//! newest; ties broken by namespace/name); the loser gets [`Reason::ConflictLost`]. The same
//! holds for `spec.defaultBackend` and for the certificate of a TLS host.
//!
//! **Nothing matches.** The oldest `spec.defaultBackend` among our Ingresses, else the first
//! port of [`CompileOptions::default_backend_service`] (503 while that Service is missing),
//! else `None` (the proxy answers 404).
//!
//! **Backends.** A Service port by number (`port`) or by name (`name`), in the Ingress's
//! namespace, resolved to ready endpoints (EndpointSlices, else core/v1 Endpoints). An unknown
//! Service or port still yields a [`Backend`], with no endpoints (the proxy answers 503), and a
//! diagnostic; resource backends and ExternalName Services are skipped with a diagnostic.
//!
//! **TLS.** `spec.tls[].hosts` get the certificate of `secretName` (a Secret in the Ingress's
//! namespace with PEM `tls.crt` and `tls.key`), looked up by SNI: exact name, then one-label
//! wildcard. An entry without `secretName` is left to the listener's default certificate:
//! [`RouteTable::default_certificate`] (the Secret of
//! [`CompileOptions::default_certificate`]) when there is one, else the proxy's generated one.
//! Problems with the objects these options name are [`Compiled::flag_diagnostics`].
//!
//! **Failures are local.** An invalid host skips its rule, an invalid path or backend skips
//! that path, a bad TLS Secret only loses its certificate. [`compile`] never panics.

#![forbid(unsafe_code)]

mod backend;
mod backend_registry;
mod cidr;
mod client_cert;
mod diagnostic;
mod explain;
mod explain_check;
mod explain_routes;
pub mod gateway;
mod host;
mod htdigest;
mod htpasswd;
mod incremental;
mod ingress;
mod inputs;
mod key;
mod log_format;
mod nginx_config;
pub mod openssl_ciphers;
mod path;
pub mod persistent;
mod policy;
mod protocol;
mod refs;
mod request;
mod request_path;
mod rules;
mod snippet_rules;
mod table;
mod tls;
mod weighted;

pub use backend::{Backend, BackendKind, SERVICE_NAME_LABEL};
pub use cidr::{Cidr, parse_cidr};
pub use client_cert::{ClientCertAuth, ClientCertMode};
pub use diagnostic::{Diagnostic, Reason};
pub use explain::{
    Answer, BackendView, Check, ExplainRequest, Explanation, explain, explain_request,
};
pub use host::normalize_request_host;
pub use htdigest::{DigestCredentials, Htdigest, digest_credentials};
pub use htpasswd::{Check as PasswordCheck, Htpasswd, PasswordHash, basic_credentials};
pub use incremental::{CompileKind, IncrementalCompiler, ReadAlike};
pub use ingress::annotations::{
    AnnotationReport, NGINX_PREFIX, SLUICE_PREFIX, SnippetReport, check_annotations,
    supported_annotations,
};
pub use ingress::class::{DEFAULT_CLASS_ANNOTATION, LEGACY_CLASS_ANNOTATION};
pub use ingress::compile::{Compiled, TrailingSlashRedirect, compile};
pub use ingress::config_map;
pub use inputs::{
    CompileOptions, DEFAULT_CONTROLLER_NAME, DEFAULT_GATEWAY_CONTROLLER_NAME,
    DEFAULT_INGRESS_CLASS, Inputs, ObjectList,
};
pub use log_format::{
    INGRESS_NGINX_LOG_FORMAT, LogEscape, LogFormat, LogSegment, LogVariable, push_escaped,
};
pub use nginx_config::{
    CompressionGlobals, DEFAULT_NO_AUTH_LOCATIONS, GlobalAuthKeys, GlobalRateLimitGlobals,
    ProxyGlobals, TlsGlobals, TracingGlobals, ValueMatch,
};
pub use openssl_ciphers::{
    CipherList, ProtocolList, Tls12Suite, parse_cipher_list, parse_protocol_list,
};
pub use policy::{
    Affinity, AffinityMode, AuthCache, AuthKeepalive, BasicAuth, CacheValid, Cors, DigestAuth,
    ExternalAuth, GlobalRateLimit, HashBy, KeyPart, LimitRate, LoadBalance, NextUpstream,
    OriginPattern, PathRewrite, Policy, RateLimit, Redirect, RequestRedirect, ResponseRewrites,
    same_site_none_compatible,
};
pub use protocol::{SubjectAltName, UpstreamProtocol, UpstreamTls, app_protocol};
pub use refs::{ObjectRef, PortRef, ServiceRef};
pub use request::{HeaderLookup, RequestInfo};
pub use request_path::{RequestPathError, escape_path, normalize_request_path};
pub use rules::{SocketKind, StreamTarget};
pub use snippet_rules::{
    ADD_HEADER_STATUSES, AddHeader, Condition, Facts as SnippetFacts, HeaderPattern, Part,
    RewriteFlag, SnippetAnswer, SnippetOutcome, SnippetRules, Step, Template, Var,
};
pub use table::{
    Canary, CanaryRule, Mirror, Rewrite, Route, RouteEntry, RouteTable, RuleIndex, WeightedBackend,
};
pub use tls::{CA_CERT_KEY, ClientValidation, TLS_CERT_KEY, TLS_PRIVATE_KEY_KEY, TlsCertificate};

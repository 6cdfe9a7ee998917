//! The compiled, immutable routing table and its request-time lookups.

use std::sync::Arc;

use http::{HeaderName, HeaderValue};

use crate::backend::Backend;
use crate::host::{normalize_request_host, normalize_request_host_in, wildcard_suffix};
use crate::persistent::{ChunkedVec, ShardedMap};
use crate::policy::Policy;
use crate::refs::ObjectRef;
use crate::request::RequestInfo;
use crate::rules::{PathCond, RuleSet};
use crate::tls::TlsCertificate;
pub use crate::weighted::WeightedBackend;

/// One route of a [`RouteTable`], as listed by [`RouteTable::routes`] (for debugging and tests).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Route {
    /// `"www.example.com"`, `"*.example.com"`, or `""` for the host-less rules.
    pub host: String,
    /// `"Exact"`, `"Prefix"`, `"ImplementationSpecific"` (a string prefix) or `"Regex"`
    /// (paths of a host with `use-regex` or `rewrite-target`).
    pub path_type: &'static str,
    /// The rule path; Prefix paths are shown without their trailing slash, except `/`.
    pub path: String,
    /// Where it goes.
    pub backend: crate::ServiceRef,
}

/// What a request that matches a rule gets: the backend, and the compiled policy of the
/// rule's Ingress (redirects, access rules, CORS, limits, timeouts, header changes). The
/// shared intermediate form of every API that feeds routes.
#[derive(Debug, Clone)]
pub struct RouteEntry {
    /// Where the request goes.
    pub backend: Arc<Backend>,
    /// What happens on the way; `Policy::default()` changes nothing.
    pub policy: Arc<Policy>,
    /// The object that defined the rule (for logs and Events).
    pub source: ObjectRef,
    /// `rewrite-target`: the path sent upstream instead of the request's.
    pub rewrite: Option<Rewrite>,
    /// `default-backend`: answers instead when `backend` has no ready endpoint, and for the
    /// statuses of the policy's `custom_http_errors`.
    pub fallback: Option<Arc<Backend>>,
    /// A canary Ingress for the same host and path, which takes part of the requests.
    pub canary: Option<Canary>,
    /// Gateway API `backendRefs` with their weights. When not empty, each request goes to
    /// one of them, drawn by weight, instead of to `backend` (which is then the first).
    pub split: Vec<WeightedBackend>,
    /// The route answers this status itself, after its redirects and before going
    /// upstream (Gateway API: a rule without a usable backend, or whose weights are all 0,
    /// answers 500).
    pub fixed_status: Option<u16>,
    /// Gateway API `RequestMirror`: a copy of each request (the share drawn) goes to these
    /// backends; their answers are discarded.
    pub mirrors: Vec<Mirror>,
    /// The Gateway API rule and match the entry was compiled from (`spec.rules[rule]`
    /// `.matches[matched]`), for `sluice explain`; `None` for Ingress rules.
    pub rule: Option<RuleIndex>,
}

/// Where in a Gateway API route an entry comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RuleIndex {
    /// `spec.rules[rule]`.
    pub rule: usize,
    /// `.matches[matched]` (0 for a rule without matches).
    pub matched: usize,
}

impl RouteEntry {
    /// Whether a request on this entry may reach a backend: not when the route answers
    /// every request itself (a redirect of every request, a fixed status, an access rule
    /// that fails closed).
    pub fn forwards(&self) -> bool {
        let policy = &*self.policy;
        self.fixed_status.is_none()
            && policy.redirect.is_none()
            && policy.request_redirect.is_none()
            && !policy.fail_closed
    }

    /// The backends a request on this entry may go to (none when it never forwards).
    pub fn forwarded_backends(&self) -> impl Iterator<Item = &Arc<Backend>> {
        let forwards = self.forwards();
        let primary = if self.split.is_empty() {
            Some(&self.backend)
        } else {
            None
        };
        primary
            .into_iter()
            .chain(
                self.split
                    .iter()
                    .filter(|w| w.usable && w.weight > 0)
                    .map(|w| &w.backend),
            )
            .chain(self.canary.iter().map(|c| &c.backend))
            .chain(self.fallback.iter())
            .filter(move |_| forwards)
    }
}

/// A `RequestMirror` target: `numerator / denominator` of requests are copied.
#[derive(Debug, Clone)]
pub struct Mirror {
    /// Where copies go.
    pub backend: Arc<Backend>,
    /// Share of requests copied: numerator...
    pub numerator: u32,
    /// ...over denominator (never 0).
    pub denominator: u32,
}

/// The canary of a route: where its share goes and how the share is chosen.
#[derive(Debug, Clone)]
pub struct Canary {
    /// The canary Ingress's backend.
    pub backend: Arc<Backend>,
    /// The rules.
    pub rule: Arc<CanaryRule>,
    /// The canary Ingress.
    pub source: ObjectRef,
}

/// How requests are chosen for the canary.
#[derive(Debug, Clone, Default)]
pub struct CanaryRule {
    /// `canary-by-header`: the request header looked at.
    pub header: Option<HeaderName>,
    /// `canary-by-header-value`: this value means the canary.
    pub header_value: Option<HeaderValue>,
    /// `canary-by-header-pattern`: a value matching this means the canary (unused when
    /// `header_value` is set, as in ingress-nginx).
    pub header_pattern: Option<regex::Regex>,
    /// `canary-by-cookie`: the cookie looked at (`always` / `never`).
    pub cookie: Option<String>,
    /// `canary-weight`: share out of `weight_total`.
    pub weight: u32,
    /// `canary-weight-total` (default 100).
    pub weight_total: u32,
    /// `affinity-canary-behavior: legacy`: with cookie affinity, the canary has none (its
    /// clients are decided anew each request); `false` (`sticky`, the default): a client
    /// whose cookie names a canary endpoint stays on the canary.
    pub legacy_affinity: bool,
}

impl PartialEq for CanaryRule {
    fn eq(&self, other: &Self) -> bool {
        self.header == other.header
            && self.header_value == other.header_value
            && self.header_pattern.as_ref().map(regex::Regex::as_str)
                == other.header_pattern.as_ref().map(regex::Regex::as_str)
            && self.cookie == other.cookie
            && self.weight == other.weight
            && self.weight_total == other.weight_total
            && self.legacy_affinity == other.legacy_affinity
    }
}

impl Eq for CanaryRule {}

impl CanaryRule {
    /// Whether a request goes to the canary. `header` is the value of the rule's header,
    /// `cookie` the value of its cookie; `roll` is uniform in `0..weight_total`.
    pub fn chooses(&self, header: Option<&[u8]>, cookie: Option<&[u8]>, roll: u32) -> bool {
        if self.header.is_some()
            && let Some(value) = header
        {
            if let Some(wanted) = &self.header_value {
                if value == wanted.as_bytes() {
                    return true;
                }
            } else if let Some(pattern) = &self.header_pattern {
                if std::str::from_utf8(value).is_ok_and(|v| pattern.is_match(v)) {
                    return true;
                }
            } else if value == b"always" {
                return true;
            } else if value == b"never" {
                return false;
            }
        }
        if self.cookie.is_some()
            && let Some(value) = cookie
        {
            if value == b"always" {
                return true;
            }
            if value == b"never" {
                return false;
            }
        }
        self.weight > 0 && roll < self.weight
    }
}

/// ingress-nginx's `rewrite "(?i)<rule path>" <target> break;`: when the rule's path
/// matches, the whole request path is replaced by the target, `$1`..`$9` standing for the
/// captures; the query string is kept.
#[derive(Debug, Clone)]
pub struct Rewrite {
    /// The rule path as a regex (anchored at the start, case-insensitive).
    pub regex: regex::Regex,
    /// The target with `$n` placeholders.
    pub target: String,
}

impl Rewrite {
    /// The path to send for request path `path`; `None` when the rule path does not match
    /// it (the request then goes unchanged, as nginx's `rewrite` leaves it).
    pub fn apply(&self, path: &str) -> Option<String> {
        let captures = self.regex.captures(path)?;
        let mut out = String::with_capacity(self.target.len() + path.len());
        let bytes = self.target.as_bytes();
        let mut at = 0;
        while at < bytes.len() {
            if bytes[at] == b'$'
                && let Some(&digit) = bytes.get(at + 1)
                && digit.is_ascii_digit()
            {
                let group = usize::from(digit - b'0');
                if let Some(m) = captures.get(group) {
                    out.push_str(m.as_str());
                }
                at += 2;
                continue;
            }
            // Copy up to the next `$` in one go (the target is ASCII-checked at compile
            // time, but any UTF-8 is copied correctly).
            let next = self.target[at + 1..]
                .find('$')
                .map_or(bytes.len(), |n| at + 1 + n);
            out.push_str(&self.target[at..next]);
            at = next;
        }
        Some(out)
    }
}

/// The result of `compile`: everything the data plane needs to route a request.
///
/// Immutable and `Send + Sync`; the controller swaps whole tables (e.g. through an `ArcSwap`)
/// rather than mutating one, so lookups take no lock. A clone shares every rule set, entry,
/// backend and certificate with the original (it copies the host maps' slots only): what
/// [`crate::IncrementalCompiler`] starts the next table from.
#[derive(Debug, Default, Clone)]
pub struct RouteTable {
    /// Ingress rules of exact hosts, keyed by canonical host name.
    pub(crate) exact_hosts: ShardedMap<Arc<RuleSet>>,
    /// Ingress rules of wildcard hosts `*.suffix` (one label), keyed by `suffix`.
    pub(crate) wildcard_hosts: ShardedMap<Arc<RuleSet>>,
    /// Ingress rules without a host; `None` when no Ingress has any.
    pub(crate) any_host: Option<Arc<RuleSet>>,
    /// Entry of the winning `spec.defaultBackend`.
    pub(crate) default_backend: Option<u32>,
    /// What matches yield; path matchers hold indices into this. Shared (`Arc`) so that
    /// an incremental compile copies the table without copying its entries.
    pub(crate) entries: ChunkedVec<Arc<RouteEntry>>,
    /// Certificates for exact SNI names.
    pub(crate) exact_certs: ShardedMap<Arc<TlsCertificate>>,
    /// Certificates for `*.suffix`, keyed by `suffix`.
    pub(crate) wildcard_certs: ShardedMap<Arc<TlsCertificate>>,
    /// Gateway listeners' certificates for exact names an Ingress has none for (apart
    /// from the Ingress ones, so that recompiling Ingress hosts leaves them as they are).
    pub(crate) gateway_exact_certs: ShardedMap<Arc<TlsCertificate>>,
    /// The same for `*.suffix`, keyed by `suffix`.
    pub(crate) gateway_wildcard_certs: ShardedMap<Arc<TlsCertificate>>,
    /// Every certificate in use, once each, ordered by Secret (the default one included).
    pub(crate) certificates: Vec<Arc<TlsCertificate>>,
    /// `--default-ssl-certificate`, when its Secret is usable; one of `certificates`.
    pub(crate) default_certificate: Option<Arc<TlsCertificate>>,
    /// Every backend, `backends[i].id == i`: those of Ingresses ordered by
    /// [`crate::ServiceRef`], then those only Gateway API routes name.
    pub(crate) backends: ChunkedVec<Arc<Backend>>,
    /// Gateway API routes, when there are any.
    pub(crate) gateway: Option<Arc<crate::rules::GatewayRoutes>>,
    /// Hosts whose clients are asked for certificates (`auth-tls-*`).
    pub(crate) client_certs: crate::client_cert::ClientCertHosts,
    /// `ssl-passthrough` hosts (exact names): their TLS connections on the shared HTTPS
    /// listener are piped to the backend of their `/` path.
    pub(crate) passthrough: ShardedMap<Arc<crate::rules::StreamTarget>>,
    /// ingress-nginx's ConfigMap keys that set the whole proxy (default: none set, the
    /// flags apply).
    pub(crate) globals: Arc<crate::nginx_config::ProxyGlobals>,
}

impl RouteTable {
    /// Finds the entry for a request, Gateway API routes included: the index
    /// [`RouteTable::entry`] reads, or `None` for 404. Equal to [`RouteTable::route_id`]
    /// when the table has no Gateway routes.
    ///
    /// Host names are looked up most specific first, the Gateway's rules before the
    /// Ingress's at each step: exact name, then wildcard, then the catch-all rules. The
    /// rule set found owns the request (no fallthrough); a Gateway rule set that matches
    /// nothing answers 404, an Ingress one the default backend.
    pub fn route_request(&self, request: &RequestInfo<'_>) -> Option<usize> {
        self.lookup(request.host, request.path, Some(request))
    }

    /// Whether a request for `host` that arrived on Gateway socket `socket` over TLS with
    /// SNI `sni` belongs to another `HTTPS` listener of that socket than the one the SNI
    /// chose: the request is answered 421 Misdirected Request (Gateway API
    /// `GatewayHTTPSListenerDetectMisdirectedRequests`).
    pub fn misdirected(&self, socket: std::net::SocketAddr, sni: &str, host: &str) -> bool {
        let Some(routes) = self.gateway.as_ref().and_then(|g| g.listeners.get(&socket)) else {
            return false;
        };
        let mut sni_buf = [0u8; 256];
        let mut host_buf = [0u8; 256];
        let sni = normalize_request_host_in(sni, &mut sni_buf);
        let host = normalize_request_host_in(host, &mut host_buf);
        routes.misdirected(&sni, &host)
    }

    /// The client certificate check of requests for `host` and of handshakes for that
    /// server name on the shared HTTPS listener (ingress-nginx `auth-tls-*`).
    pub fn client_cert_auth(&self, host: &str) -> Option<&Arc<crate::ClientCertAuth>> {
        if self.client_certs.is_empty() {
            return None;
        }
        let mut buf = [0u8; 256];
        let host = normalize_request_host_in(host, &mut buf);
        self.client_certs.get(&host)
    }

    /// Where a TLS connection for server name `sni` on the shared HTTPS listener goes
    /// without being terminated (`ssl-passthrough`); `None`: TLS ends here.
    pub fn passthrough_target(&self, sni: &str) -> Option<&crate::rules::StreamTarget> {
        let mut buf = [0u8; 256];
        let name = normalize_request_host_in(sni, &mut buf);
        self.passthrough.get(&name).map(|t| &**t)
    }

    /// Whether some host is `ssl-passthrough` (then the shared HTTPS listener reads each
    /// ClientHello's server name first).
    pub fn has_passthrough(&self) -> bool {
        !self.passthrough.is_empty()
    }

    /// Every host's client certificate check, each once.
    pub fn client_cert_auths(&self) -> impl Iterator<Item = &Arc<crate::ClientCertAuth>> {
        self.client_certs.all()
    }

    /// How a TLS handshake on Gateway socket `socket` checks client certificates
    /// (Gateway API `spec.tls.frontend`); `None`: it asks for none.
    pub fn client_validation(
        &self,
        socket: std::net::SocketAddr,
    ) -> Option<&Arc<crate::tls::ClientValidation>> {
        self.gateway
            .as_ref()?
            .listeners
            .get(&socket)?
            .client_validation
            .as_ref()
    }

    /// The rule set that owns requests for canonical `host`, and what answers when none of
    /// its rules matches (`None`: 404). Most specific first, the Gateway's rules before the
    /// Ingress's at each step (Gateway wildcards cover one or more labels, Ingress ones
    /// exactly one); `https` picks the Gateway listeners. One loop for both APIs: an
    /// Ingress rule set is the same [`RuleSet`] as a Gateway one.
    fn owner(&self, host: &str, https: Option<bool>) -> Option<(&RuleSet, Option<u32>)> {
        let gateway = self.gateway.as_ref().zip(https).map(|(gateway, https)| {
            if https { &gateway.https } else { &gateway.http }
        });
        let fallback = self.default_backend;
        if let Some(set) = gateway.and_then(|rules| rules.exact.get(host)) {
            return Some((set, None));
        }
        if let Some(set) = self.exact_hosts.get(host) {
            return Some((set, fallback));
        }
        if let Some((_, set)) = gateway.and_then(|rules| rules.wildcard_for(host)) {
            return Some((set, None));
        }
        if let Some(set) = wildcard_suffix(host).and_then(|s| self.wildcard_hosts.get(s)) {
            return Some((set, fallback));
        }
        if let Some(set) = gateway.and_then(|rules| rules.any.as_ref()) {
            return Some((set, None));
        }
        self.any_host.as_deref().map(|set| (set, fallback))
    }

    /// The entry for a request to `host` and `path`: its owner's match, else the owner's
    /// fallback, else (no owner) the default backend. `request`: the rest of the request, for
    /// Gateway listeners and conditions; `None` looks up the Ingress rules by host and path.
    fn lookup(&self, host: &str, path: &str, request: Option<&RequestInfo<'_>>) -> Option<usize> {
        let mut buf = [0u8; 256];
        let host = normalize_request_host_in(host, &mut buf);
        let path = if path.is_empty() { "/" } else { path };
        if let Some(socket) = request.and_then(|r| r.listener) {
            // A Gateway's own socket: its routes alone, no default backend.
            let rules = &self.gateway.as_ref()?.listeners.get(&socket)?.rules;
            let id = rules.owner(&host)?.lookup(path, request)?;
            return ((id as usize) < self.entries.len()).then_some(id as usize);
        }
        let id = match self.owner(&host, request.map(|r| r.https)) {
            Some((set, fallback)) => set.lookup(path, request).or(fallback),
            None => self.default_backend,
        }?;
        // Ids come from this table's own compilers: always in range.
        ((id as usize) < self.entries.len()).then_some(id as usize)
    }

    /// The sockets Gateways with addresses of their own are served on, each with what it
    /// speaks: what the proxy binds besides its own listeners.
    pub fn gateway_sockets(&self) -> Vec<(std::net::SocketAddr, crate::rules::SocketKind)> {
        let mut out: Vec<(std::net::SocketAddr, crate::rules::SocketKind)> = self
            .gateway
            .as_ref()
            .map(|g| g.listeners.iter().map(|(a, l)| (*a, l.kind)).collect())
            .unwrap_or_default();
        out.sort();
        out
    }

    /// Where a connection to stream socket `socket` (a TCP or TLS `Passthrough` listener)
    /// goes: the TCPRoute of the socket, or the TLSRoute for the ClientHello's `sni`.
    /// `None`: no route (the connection is closed).
    pub fn stream_target(
        &self,
        socket: std::net::SocketAddr,
        sni: Option<&str>,
    ) -> Option<&crate::rules::StreamTarget> {
        let routes = self.gateway.as_ref()?.listeners.get(&socket)?;
        let mut buf = [0u8; 256];
        let sni = sni.map(|sni| normalize_request_host_in(sni, &mut buf));
        routes.streams.target(sni.as_deref())
    }

    /// The same table with every entry passed through `change`: for tests and tools that
    /// post-process a compiled table before it is shared (tables are immutable once
    /// published).
    pub fn map_entries(mut self, mut change: impl FnMut(&mut RouteEntry)) -> RouteTable {
        for entry in self.entries.iter_mut() {
            change(Arc::make_mut(entry));
        }
        self
    }

    /// Adds `cert` to the table's certificates (kept in Secret order) unless one of the same
    /// Secret is there, and returns the table's `Arc` for it: the proxy finds parsed keys by
    /// `Arc`, so one Secret must have one.
    pub(crate) fn add_certificate(&mut self, cert: Arc<TlsCertificate>) -> Arc<TlsCertificate> {
        match self
            .certificates
            .binary_search_by(|c| c.secret.cmp(&cert.secret))
        {
            Ok(i) => Arc::clone(&self.certificates[i]),
            Err(i) => {
                self.certificates.insert(i, Arc::clone(&cert));
                cert
            }
        }
    }

    /// ingress-nginx's ConfigMap keys that set the whole proxy, as this table was compiled
    /// with them (every field `None` without a ConfigMap).
    pub fn globals(&self) -> &Arc<crate::nginx_config::ProxyGlobals> {
        &self.globals
    }

    /// A table that routes nothing (every request gets `None`, i.e. 404) and has no certificates.
    pub fn empty() -> RouteTable {
        RouteTable::default()
    }

    /// Finds the backend for a request.
    ///
    /// `host`: Host header or `:authority` as received (any case, may carry `:port`, may be an
    /// IPv6 literal `[::1]:8080`, may have a trailing dot).
    /// `path`: the URI path as received, without query; an empty path counts as `/`. It is
    /// matched as is (no percent-decoding, no dot-segment removal).
    ///
    /// The host picks one rule set: the exact host's if any rule names it, else the one-label
    /// wildcard's, else the host-less rules. Within that set the longest matching path wins
    /// (Exact beats Prefix at equal length). There is no fallthrough to another host's rules:
    /// if the chosen set has no matching path, the default backend is used. `None` means 404.
    pub fn route(&self, host: &str, path: &str) -> Option<&RouteEntry> {
        self.route_id(host, path).map(|id| &*self.entries[id])
    }

    /// The index of the entry [`RouteTable::route`] picks ([`RouteTable::entry`] reads it):
    /// for callers that keep the table behind a reference they must move later.
    pub fn route_id(&self, host: &str, path: &str) -> Option<usize> {
        self.lookup(host, path, None)
    }

    /// Every route entry, indexed by [`RouteTable::route_id`]. After an incremental compile
    /// some may be left over from replaced rules: no rule reaches those, and they forward
    /// nowhere ([`RouteEntry::forwards`] is false).
    pub fn entries(&self) -> &ChunkedVec<Arc<RouteEntry>> {
        &self.entries
    }

    /// An entry by the index [`RouteTable::route_id`] returned.
    ///
    /// # Panics
    /// If `id` did not come from this table.
    pub fn entry(&self, id: usize) -> &RouteEntry {
        &self.entries[id]
    }

    /// The backend [`RouteTable::route`] picks, without its policy.
    pub fn route_backend(&self, host: &str, path: &str) -> Option<&Arc<Backend>> {
        self.route(host, path).map(|entry| &entry.backend)
    }

    /// SNI lookup (exact name, then the one-label wildcard), for choosing a TLS certificate.
    /// `None`: the listener should present its default certificate
    /// ([`RouteTable::default_certificate`] if there is one).
    pub fn certificate(&self, server_name: &str) -> Option<&Arc<TlsCertificate>> {
        let mut buf = [0u8; 256];
        let name = normalize_request_host_in(server_name, &mut buf);
        // An Ingress's certificate before a Gateway listener's, at each step.
        let suffix = wildcard_suffix(&name);
        self.exact_certs
            .get(&name)
            .or_else(|| self.gateway_exact_certs.get(&name))
            .or_else(|| suffix.and_then(|s| self.wildcard_certs.get(s)))
            .or_else(|| suffix.and_then(|s| self.gateway_wildcard_certs.get(s)))
    }

    /// Every certificate referenced by the table, once each, ordered by Secret; the default
    /// certificate is one of them (the same `Arc`).
    pub fn certificates(&self) -> impl Iterator<Item = &Arc<TlsCertificate>> {
        self.certificates.iter()
    }

    /// The certificate of `--default-ssl-certificate` ([`crate::CompileOptions::default_certificate`]),
    /// when its Secret exists and parses: what a listener presents for names
    /// [`RouteTable::certificate`] has nothing for (unknown or absent SNI, TLS hosts without a
    /// usable Secret of their own) instead of a generated one.
    pub fn default_certificate(&self) -> Option<&Arc<TlsCertificate>> {
        self.default_certificate.as_ref()
    }

    /// Every distinct backend in the table; `Backend::id` is its index here (dense `0..n`).
    pub fn backends(&self) -> &ChunkedVec<Arc<Backend>> {
        &self.backends
    }

    /// The backends some route may send a request to (the default backend included), each
    /// once, in id order: those whose lack of endpoints is worth a warning. A backend only
    /// a redirect-only rule names is not among them.
    pub fn forwarded_backends(&self) -> Vec<&Arc<Backend>> {
        let mut used = vec![false; self.backends.len()];
        // The default backend is an entry too.
        for backend in self.entries.iter().flat_map(|e| e.forwarded_backends()) {
            if let Some(slot) = used.get_mut(backend.id) {
                *slot = true;
            }
        }
        self.backends
            .iter()
            .filter(|b| used.get(b.id).copied().unwrap_or(false))
            .collect()
    }

    /// The backend used when no rule matches (the oldest `spec.defaultBackend`, else
    /// `--default-backend-service`), if any.
    pub fn default_backend(&self) -> Option<&Arc<Backend>> {
        self.default_backend
            .and_then(|id| self.entries.get(id as usize))
            .map(|entry| &entry.backend)
    }

    /// Every route in the table, sorted: a readable, deterministic dump of what was compiled.
    /// Hosts that own requests but have no path are listed with no route. Not for the hot path.
    pub fn routes(&self) -> Vec<Route> {
        self.routes_with_entries()
            .into_iter()
            .map(|(route, _)| route)
            .collect()
    }

    /// [`RouteTable::routes`] with the index of each route's entry ([`RouteTable::entry`]),
    /// sorted by route: what a dashboard lists. Not for the hot path.
    pub fn routes_with_entries(&self) -> Vec<(Route, usize)> {
        let mut out = Vec::new();
        let gateway = self.gateway.iter().flat_map(|gateway| {
            let own = gateway.listeners.values().flat_map(|l| l.rules.sets());
            gateway.http.sets().chain(gateway.https.sets()).chain(own)
        });
        for (host, set) in self.matchers().chain(gateway) {
            for (path, id) in set.entries() {
                let Some(entry) = self.entries.get(id as usize) else {
                    continue;
                };
                let (kind, key) = kind_and_key(path);
                out.push((route_of(&host, kind, key, &entry.backend), id as usize));
            }
        }
        out.sort();
        out.dedup();
        out
    }

    /// The route [`RouteTable::route`] picks for `host` and `path`, as listed by
    /// [`RouteTable::routes`], with its entry index; `None` when nothing matches or the
    /// default backend answers. Not for the hot path (`sluice explain`).
    pub fn matched(&self, host: &str, path: &str) -> Option<(Route, usize)> {
        let host = normalize_request_host(host);
        let (owner, rules) = if let Some(m) = self.exact_hosts.get(&host) {
            (host.to_string(), m)
        } else if let Some((suffix, m)) = wildcard_suffix(&host)
            .and_then(|suffix| self.wildcard_hosts.get(suffix).map(|m| (suffix, m)))
        {
            (format!("*.{suffix}"), m)
        } else {
            (String::new(), self.any_host.as_ref()?)
        };
        let path = if path.is_empty() { "/" } else { path };
        let id = rules.lookup(path, None)?;
        let entry = self.entries.get(id as usize)?;
        // The longest rule path with that entry that matches: the one lookup chose.
        let (kind, key) = rules
            .entries()
            .into_iter()
            .filter(|(_, entry_id)| *entry_id == id)
            .map(|(cond, _)| kind_and_key(cond))
            .filter(|(kind, key)| kind_matches(kind, key, path))
            .max_by_key(|(_, key)| key.len())?;
        Some((route_of(&owner, kind, key, &entry.backend), id as usize))
    }

    /// The Ingress rule sets with their host as listed in [`Route::host`].
    fn matchers(&self) -> impl Iterator<Item = (String, &RuleSet)> {
        self.exact_hosts
            .iter()
            .map(|(h, m)| (h.as_str().to_owned(), &**m))
            .chain(
                self.wildcard_hosts
                    .iter()
                    .map(|(s, m)| (format!("*.{s}"), &**m)),
            )
            .chain(self.any_host.iter().map(|m| (String::new(), &**m)))
    }

    /// Canonical names of the hosts that own their requests (exact, `*.wildcard`, and `""`
    /// for the host-less rules), sorted.
    pub fn hosts(&self) -> Vec<String> {
        let mut out: Vec<String> = self
            .exact_hosts
            .keys()
            .map(|h| h.as_str().to_owned())
            .chain(
                self.wildcard_hosts
                    .keys()
                    .map(|s| format!("*.{}", s.as_str())),
            )
            .chain(self.any_host.iter().map(|_| String::new()))
            .collect();
        out.sort();
        out
    }
}

/// A rule's path condition as the kind and key [`Route`]s list.
fn kind_and_key(path: PathCond) -> (&'static str, String) {
    match path {
        PathCond::Exact(p) => ("Exact", p),
        PathCond::Prefix(p) => ("Prefix", p),
        PathCond::StringPrefix(p) => ("ImplementationSpecific", p),
        PathCond::Regex(p) => ("Regex", p),
    }
}

/// A rule as a [`Route`].
fn route_of(host: &str, kind: &'static str, key: String, backend: &Backend) -> Route {
    let path = if kind == "Prefix" && key.is_empty() {
        "/".to_owned()
    } else {
        key
    };
    Route {
        host: host.to_owned(),
        path_type: kind,
        path,
        backend: backend.service.clone(),
    }
}

/// Whether a rule (kind and key) matches request `path` on its own.
fn kind_matches(kind: &str, key: &str, path: &str) -> bool {
    match kind {
        "Exact" => key == path,
        "Prefix" => crate::rules::prefix_matches(key, path),
        "ImplementationSpecific" => path.starts_with(key),
        // Only one regex set per host; the lookup picked one of them: accept any.
        _ => true,
    }
}

//! The one rule form both compilers lower into, and its request-time lookup: Gateway API
//! HTTPRoute matches (`gateway/compile.rs`) and Ingress paths (`ingress/compile.rs`, where
//! an Ingress path is a match with a path and nothing else).
//!
//! A [`RuleSet`] holds the rules of one host name. Candidates are grouped by path: exact
//! paths in a hash map, `PathPrefix` keys in a hash map probed once per path element of the
//! request (longest first), regular expressions in a list. Within a group, candidates are
//! sorted by the spec's remaining criteria (method match, number of header matches, number
//! of query matches, the oldest route, route namespace/name, rule and match order), so the
//! first candidate whose conditions hold is the answer.
//!
//! Across groups the order is: Exact, then RegularExpression (longest pattern first; the
//! spec leaves regex precedence to implementations, and Envoy-based ones use this order),
//! then PathPrefix from the longest prefix to `/`. A request that no candidate accepts gets
//! `None` (404): there is no fallthrough to other host names.

use std::collections::HashMap;

use crate::key::{FastMap, Key};
use crate::request::RequestInfo;

/// A header or query parameter condition.
#[derive(Debug)]
pub(crate) struct ValueMatch {
    /// Lower-case header name, or the query parameter name as written.
    pub name: Box<str>,
    /// The test on its value.
    pub test: ValueTest,
}

/// `Exact` or `RegularExpression` (matched against the whole value).
#[derive(Debug)]
pub(crate) enum ValueTest {
    Exact(Box<str>),
    Regex(regex::Regex),
}

impl ValueTest {
    fn accepts(&self, value: &[u8]) -> bool {
        match self {
            ValueTest::Exact(want) => want.as_bytes() == value,
            ValueTest::Regex(re) => std::str::from_utf8(value).is_ok_and(|v| re.is_match(v)),
        }
    }
}

/// One match of one rule: its conditions besides the path, and the entry it yields.
#[derive(Debug)]
pub(crate) struct Candidate {
    pub method: Option<Box<str>>,
    pub headers: Box<[ValueMatch]>,
    pub query: Box<[ValueMatch]>,
    pub entry: u32,
}

impl Candidate {
    /// A match on the path alone (an Ingress path).
    pub(crate) fn path_only(entry: u32) -> Candidate {
        Candidate {
            method: None,
            headers: Box::new([]),
            query: Box::new([]),
            entry,
        }
    }

    /// Whether the conditions besides the path hold; without a request (a lookup by host
    /// and path alone) only a candidate without conditions does.
    fn accepts(&self, request: Option<&RequestInfo<'_>>) -> bool {
        let Some(request) = request else {
            return self.method.is_none() && self.headers.is_empty() && self.query.is_empty();
        };
        if let Some(method) = &self.method
            && **method != *request.method
        {
            return false;
        }
        self.headers.iter().all(|m| {
            request
                .headers
                .header(&m.name)
                .is_some_and(|value| m.test.accepts(value))
        }) && self
            .query
            .iter()
            .all(|m| query_value(request.query, &m.name).is_some_and(|value| m.test.accepts(value)))
    }
}

/// The first value of query parameter `name` (compared exactly, not decoded).
fn query_value<'q>(query: &'q str, name: &str) -> Option<&'q [u8]> {
    query.split('&').find_map(|pair| {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        (key == name).then_some(value.as_bytes())
    })
}

/// How a candidate's path is matched.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum PathCond {
    /// The whole path, byte for byte.
    Exact(String),
    /// Path elements; the key has no trailing slash (`""` for `/`).
    Prefix(String),
    /// A regular expression matched against the whole path.
    Regex(String),
    /// A string prefix of the path, as nginx's `location /foo` (an Ingress
    /// `ImplementationSpecific` path on a host without regex paths).
    StringPrefix(String),
}

/// The rules of one host name.
#[derive(Debug, Default)]
pub(crate) struct RuleSet {
    exact: FastMap<Box<str>, Vec<Candidate>>,
    /// (pattern as written, its compiled form, candidates), longest pattern first.
    regex: Vec<(String, regex::Regex, Vec<Candidate>)>,
    prefix: FastMap<Box<str>, Vec<Candidate>>,
    /// Bit `n` set: some prefix key is `n` bytes long (bit 63: one is 63 or longer). A
    /// request path is only probed at element boundaries where a key of that length
    /// exists: one or two probes for most paths instead of one per element.
    prefix_lengths: u64,
    /// [`PathCond::StringPrefix`] keys (Ingress only; empty for Gateway API rules).
    string_prefix: FastMap<Box<str>, Vec<Candidate>>,
    /// As `prefix_lengths`, for `string_prefix`.
    string_prefix_lengths: u64,
}

/// The bit of [`RuleSet::prefix_lengths`] for a key of `len` bytes.
fn length_bit(len: usize) -> u64 {
    1 << len.min(63)
}

impl RuleSet {
    /// The entry for `request`, whose path is `path` (never empty); `None` for `request`
    /// looks up by path alone.
    pub(crate) fn lookup(&self, path: &str, request: Option<&RequestInfo<'_>>) -> Option<u32> {
        let first = |candidates: &[Candidate]| {
            candidates
                .iter()
                .find(|c| c.accepts(request))
                .map(|c| c.entry)
        };
        if !self.exact.is_empty()
            && let Some(found) = self.exact.get(path).and_then(|c| first(c))
        {
            return Some(found);
        }
        for (_, re, candidates) in &self.regex {
            if re.is_match(path)
                && let Some(found) = first(candidates)
            {
                return Some(found);
            }
        }
        if self.prefix.is_empty() && self.string_prefix.is_empty() {
            return None;
        }
        // Element boundaries, longest first: the whole path, then before each `/`. String
        // prefixes (nginx `location /foo`) at every length: nginx takes the longest
        // location, and a Prefix key `k` stands for nginx's `location k/` (and `= k`), one
        // byte longer than the string prefix `k`, so it is tried first at the same `end`.
        let bytes = path.as_bytes();
        let mut end = path.len();
        loop {
            if self.prefix_lengths & length_bit(end) != 0
                && (end == path.len() || bytes[end] == b'/')
                && let Some(found) = self.prefix.get(&path[..end]).and_then(|c| first(c))
            {
                return Some(found);
            }
            if self.string_prefix_lengths & length_bit(end) != 0
                && let Some(found) = path
                    .get(..end)
                    .and_then(|p| self.string_prefix.get(p))
                    .and_then(|c| first(c))
            {
                return Some(found);
            }
            if end == 0 {
                return None;
            }
            end -= 1;
        }
    }

    /// Every candidate of the set, in no particular order.
    fn candidates(&self) -> impl Iterator<Item = &Candidate> {
        self.exact
            .values()
            .chain(self.regex.iter().map(|(_, _, c)| c))
            .chain(self.prefix.values())
            .chain(self.string_prefix.values())
            .flatten()
    }

    /// The entry ids the set yields, each once per candidate (repeats possible).
    pub(crate) fn entry_ids(&self) -> impl Iterator<Item = u32> + '_ {
        self.candidates().map(|c| c.entry)
    }

    /// Renumbers the entries the set yields: an incremental compile moves a partial
    /// table's entries into the previous table's free slots.
    pub(crate) fn renumber(&mut self, mut new_id: impl FnMut(u32) -> u32) {
        let all = self
            .exact
            .values_mut()
            .chain(self.regex.iter_mut().map(|(_, _, c)| c))
            .chain(self.prefix.values_mut())
            .chain(self.string_prefix.values_mut())
            .flatten();
        for candidate in all {
            candidate.entry = new_id(candidate.entry);
        }
    }

    /// Every (path, entry) in the set, for listings.
    pub(crate) fn entries(&self) -> Vec<(PathCond, u32)> {
        let mut out = Vec::new();
        for (path, c) in &self.exact {
            out.extend(
                c.iter()
                    .map(|c| (PathCond::Exact(path.to_string()), c.entry)),
            );
        }
        for (pattern, _, c) in &self.regex {
            out.extend(
                c.iter()
                    .map(|c| (PathCond::Regex(pattern.clone()), c.entry)),
            );
        }
        for (path, c) in &self.prefix {
            out.extend(
                c.iter()
                    .map(|c| (PathCond::Prefix(path.to_string()), c.entry)),
            );
        }
        for (path, c) in &self.string_prefix {
            out.extend(
                c.iter()
                    .map(|c| (PathCond::StringPrefix(path.to_string()), c.entry)),
            );
        }
        out
    }
}

/// Collects candidates with their precedence, then builds a sorted [`RuleSet`].
#[derive(Default)]
pub(crate) struct RuleSetBuilder {
    items: Vec<(PathCond, Precedence, Candidate)>,
}

/// Everything after the path that orders candidates (smaller first).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Precedence {
    /// `false` when the match names a method (those go first).
    pub no_method: bool,
    /// `usize::MAX - number of header matches`.
    pub fewer_headers: usize,
    /// `usize::MAX - number of query matches`.
    pub fewer_query: usize,
    /// The route's age (oldest first, then `{namespace}/{name}`).
    pub route: crate::refs::Age,
    /// Rule index, then match index.
    pub rule: usize,
    pub matched: usize,
}

impl Precedence {
    /// For candidates that differ by nothing but the order they are pushed in (Ingress
    /// paths: the oldest Ingress first).
    pub(crate) fn in_order(index: usize) -> Precedence {
        Precedence {
            no_method: true,
            fewer_headers: usize::MAX,
            fewer_query: usize::MAX,
            route: crate::refs::Age::default(),
            rule: index,
            matched: 0,
        }
    }
}

impl RuleSetBuilder {
    /// Adds a candidate for `path`.
    pub(crate) fn push(&mut self, path: PathCond, precedence: Precedence, candidate: Candidate) {
        self.items.push((path, precedence, candidate));
    }

    /// `regexes` holds the compiled form of every `PathCond::Regex` pattern.
    pub(crate) fn build(mut self, regexes: &HashMap<String, regex::Regex>) -> RuleSet {
        self.items.sort_by(|a, b| a.1.cmp(&b.1));
        let mut set = RuleSet::default();
        let mut regex_groups: Vec<(String, Vec<Candidate>)> = Vec::new();
        for (path, _, candidate) in self.items {
            match path {
                PathCond::Exact(p) => set.exact.entry(p.into()).or_default().push(candidate),
                PathCond::Prefix(p) => {
                    set.prefix_lengths |= length_bit(p.len());
                    set.prefix.entry(p.into()).or_default().push(candidate)
                }
                PathCond::StringPrefix(p) => {
                    set.string_prefix_lengths |= length_bit(p.len());
                    set.string_prefix
                        .entry(p.into())
                        .or_default()
                        .push(candidate)
                }
                PathCond::Regex(p) => match regex_groups.iter_mut().find(|(q, _)| *q == p) {
                    Some((_, group)) => group.push(candidate),
                    None => regex_groups.push((p, vec![candidate])),
                },
            }
        }
        // The set lives as long as its table: no room kept for more candidates (a `Vec`
        // pushed once holds room for four).
        for candidates in (set.exact.values_mut())
            .chain(set.prefix.values_mut())
            .chain(set.string_prefix.values_mut())
        {
            candidates.shrink_to_fit();
        }
        // Longest pattern first; ties by pattern for determinism.
        regex_groups.sort_by(|a, b| b.0.len().cmp(&a.0.len()).then_with(|| a.0.cmp(&b.0)));
        set.regex = regex_groups
            .into_iter()
            .filter_map(|(p, group)| {
                let compiled = regexes.get(&p)?.clone();
                Some((p, compiled, group))
            })
            .collect();
        set
    }
}

/// The Gateway rules of one kind of listener, by host name.
///
/// Each set is an `Arc`: a copy of the table (an incremental compile grafting some hosts)
/// shares the sets of the other hosts.
#[derive(Debug, Default, Clone)]
pub(crate) struct HostRules {
    /// Shared in shards with the previous table's (an incremental compile copies it).
    pub exact: crate::persistent::ShardedMap<std::sync::Arc<RuleSet>>,
    /// `*.suffix`, keyed by `suffix`; covers one or more labels.
    pub wildcard: crate::persistent::ShardedMap<std::sync::Arc<RuleSet>>,
    pub any: Option<std::sync::Arc<RuleSet>>,
}

impl HostRules {
    /// Every rule set with its host as listed in [`crate::Route::host`].
    pub(crate) fn sets(&self) -> impl Iterator<Item = (String, &RuleSet)> {
        self.exact
            .iter()
            .map(|(h, s)| (h.as_str().to_owned(), &**s))
            .chain(
                self.wildcard
                    .iter()
                    .map(|(h, s)| (format!("*.{}", h.as_str()), &**s)),
            )
            .chain(self.any.iter().map(|s| (String::new(), &**s)))
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.exact.is_empty() && self.wildcard.is_empty() && self.any.is_none()
    }

    /// The most specific wildcard rule set covering canonical `host`, with its suffix.
    /// The rule set that owns canonical `host`: exact name, then the most specific
    /// wildcard, then the catch-all.
    pub(crate) fn owner(&self, host: &str) -> Option<&RuleSet> {
        self.exact
            .get(host)
            .map(|set| &**set)
            .or_else(|| self.wildcard_for(host).map(|(_, set)| set))
            .or(self.any.as_deref())
    }

    pub(crate) fn wildcard_for<'h>(&self, host: &'h str) -> Option<(&'h str, &RuleSet)> {
        if self.wildcard.is_empty() {
            return None;
        }
        crate::host::wildcard_suffixes(host)
            .find_map(|suffix| self.wildcard.get(suffix).map(|set| (suffix, &**set)))
    }
}

/// The Gateway rules of a table: one set per shared listener (Gateways without addresses
/// of their own), one per socket of a Gateway's own.
#[derive(Debug, Default, Clone)]
pub(crate) struct GatewayRoutes {
    pub http: HostRules,
    pub https: HostRules,
    /// By the socket a request arrived on: a Gateway's address and a listener's port.
    pub listeners: FastMap<std::net::SocketAddr, ListenerRoutes>,
}

/// What a Gateway socket speaks: the listener protocol of the listeners on it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum SocketKind {
    /// `HTTP`: HTTP routes.
    #[default]
    Http,
    /// `HTTPS`: TLS terminated, then HTTP routes.
    Https,
    /// `TCP`: each connection piped to a TCPRoute's backend.
    Tcp,
    /// `TLS`: each connection piped, by the SNI of its ClientHello, to a TLSRoute's backend:
    /// the TLS bytes untouched (`mode: Passthrough`), or TLS terminated here and the
    /// plaintext piped (`mode: Terminate`); both modes may share a socket, by host name.
    Tls,
    /// `UDP`: each client's datagrams relayed to a UDPRoute's backend.
    Udp,
}

/// Where the connections of a stream route (TCPRoute, TLSRoute) go.
#[derive(Debug)]
pub struct StreamTarget {
    /// The backends, by weight (at least one entry; an unusable one refuses the
    /// connections drawn for it).
    pub split: Vec<crate::weighted::WeightedBackend>,
    /// The route.
    pub source: crate::refs::ObjectRef,
    /// TLS is terminated here (a TLSRoute of a `Terminate` listener; the listener's
    /// certificate is in the table's SNI maps); the backend gets the plaintext.
    pub terminate: bool,
}

/// The stream routes of one socket, by SNI host name (a TCP socket has only `any`).
#[derive(Debug, Default, Clone)]
pub(crate) struct StreamRoutes {
    pub exact: FastMap<Key, std::sync::Arc<StreamTarget>>,
    /// `*.suffix`, keyed by `suffix`; covers one or more labels.
    pub wildcard: FastMap<Key, std::sync::Arc<StreamTarget>>,
    pub any: Option<std::sync::Arc<StreamTarget>>,
}

impl StreamRoutes {
    /// The target for canonical `host` (an SNI; `None`: the ClientHello named none):
    /// exact, then the most specific wildcard, then the route without a host name.
    pub(crate) fn target(&self, host: Option<&str>) -> Option<&StreamTarget> {
        let named = host.and_then(|host| {
            self.exact.get(host).or_else(|| {
                crate::host::wildcard_suffixes(host).find_map(|suffix| self.wildcard.get(suffix))
            })
        });
        named.or(self.any.as_ref()).map(|t| &**t)
    }
}

/// The routes of one socket of a Gateway's own.
#[derive(Debug, Default, Clone)]
pub(crate) struct ListenerRoutes {
    /// What the socket speaks.
    pub kind: SocketKind,
    pub rules: HostRules,
    /// The host names of the usable `HTTPS` listeners on this socket (`Any`: one without).
    pub tls_listeners: Vec<crate::host::HostPattern>,
    /// TCPRoutes, TLSRoutes and UDPRoutes (a `Tcp`, `Tls` or `Udp` socket).
    pub streams: StreamRoutes,
    /// Client certificates are checked in the handshake (an `Https` socket whose port has
    /// Gateway `spec.tls.frontend` validation).
    pub client_validation: Option<std::sync::Arc<crate::tls::ClientValidation>>,
}

impl ListenerRoutes {
    /// The listener of this socket a name falls under: an exact host name, else the most
    /// specific wildcard (one or more labels), else the listener without a host name.
    fn listener_for(&self, name: &str) -> Option<&crate::host::HostPattern> {
        use crate::host::HostPattern;
        self.tls_listeners
            .iter()
            .find(|l| matches!(l, HostPattern::Exact(h) if h == name))
            .or_else(|| {
                crate::host::wildcard_suffixes(name).find_map(|suffix| {
                    self.tls_listeners
                        .iter()
                        .find(|l| matches!(l, HostPattern::Wildcard(s) if s == suffix))
                })
            })
            .or_else(|| self.tls_listeners.iter().find(|l| **l == HostPattern::Any))
    }

    /// Whether a request for canonical `host` on a TLS connection whose SNI was `sni`
    /// (canonical) belongs to another listener than the connection's (Gateway API
    /// `GatewayHTTPSListenerDetectMisdirectedRequests`: answered 421, RFC 9110 15.5.20).
    pub(crate) fn misdirected(&self, sni: &str, host: &str) -> bool {
        self.kind == SocketKind::Https
            && sni != host
            && self.listener_for(sni) != self.listener_for(host)
    }
}

/// Whether a Prefix rule with matcher key `key` (its path without the trailing slash, `""`
/// for `/`) matches request `path` by whole segments: `/foo` matches `/foo`, `/foo/` and
/// `/foo/bar`, never `/foobar`. A [`crate::rules::RuleSet`] answers the same question for every
/// rule at once; this one rule at a time is for explaining a match.
pub(crate) fn prefix_matches(key: &str, path: &str) -> bool {
    path.starts_with('/')
        && path
            .strip_prefix(key)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn candidate(entry: u32) -> Candidate {
        Candidate {
            method: None,
            headers: Box::new([]),
            query: Box::new([]),
            entry,
        }
    }

    fn precedence(rule: usize) -> Precedence {
        Precedence {
            no_method: true,
            fewer_headers: usize::MAX,
            fewer_query: usize::MAX,
            route: crate::refs::Age::default(),
            rule,
            matched: 0,
        }
    }

    #[test]
    fn prefixes_of_every_length_are_probed_only_where_keys_exist() {
        let long = format!("/{}", "a".repeat(69));
        let longer = format!("{long}/{}", "b".repeat(9));
        let mut builder = RuleSetBuilder::default();
        for (i, p) in ["", "/x", &long, &longer].into_iter().enumerate() {
            builder.push(
                PathCond::Prefix(p.to_owned()),
                precedence(i),
                candidate(i as u32),
            );
        }
        let set = builder.build(&HashMap::new());
        let lookup = |path: &str| {
            let info = RequestInfo {
                listener: None,
                https: false,
                host: "h",
                path,
                query: "",
                method: "GET",
                headers: &crate::ExplainRequest::default(),
            };
            set.lookup(path, Some(&info))
        };
        assert_eq!(lookup("/"), Some(0));
        assert_eq!(lookup("/x/y"), Some(1));
        assert_eq!(lookup("/xy"), Some(0), "elements, not bytes");
        assert_eq!(lookup(&format!("{long}/c")), Some(2), "a key over 63 bytes");
        assert_eq!(lookup(&format!("{longer}/c/d")), Some(3));
        assert_eq!(lookup(&format!("{long}b")), Some(0));
    }

    #[test]
    fn query_values_are_found_by_exact_name() {
        assert_eq!(query_value("a=1&b=2", "b"), Some(&b"2"[..]));
        assert_eq!(query_value("a=1&a=2", "a"), Some(&b"1"[..]));
        assert_eq!(query_value("flag&x=", "flag"), Some(&b""[..]));
        assert_eq!(query_value("A=1", "a"), None);
        assert_eq!(query_value("", "a"), None);
    }

    /// An Ingress host's paths lowered as the compiler lowers them, in this order.
    fn ingress_set(rules: &[(&str, &str, u32)]) -> RuleSet {
        let mut builder = RuleSetBuilder::default();
        for (index, (path, ty, entry)) in rules.iter().enumerate() {
            let rule = crate::path::parse_rule_path(Some(path), ty).unwrap();
            let cond = match rule.kind {
                crate::path::PathKind::Exact => PathCond::Exact(rule.key),
                crate::path::PathKind::Prefix => PathCond::Prefix(rule.key),
                crate::path::PathKind::StringPrefix => PathCond::StringPrefix(rule.key),
                crate::path::PathKind::Regex => PathCond::Regex(rule.key),
            };
            builder.push(
                cond,
                Precedence::in_order(index),
                Candidate::path_only(*entry),
            );
        }
        builder.build(&HashMap::new())
    }

    /// (rules, request path, expected backend id)
    #[test]
    fn matching() {
        type Case<'a> = (&'a [(&'a str, &'a str, u32)], &'a str, Option<u32>);
        let cases: &[Case] = &[
            // Exact is case-sensitive and slash-sensitive.
            (&[("/foo", "Exact", 1)], "/foo", Some(1)),
            (&[("/foo", "Exact", 1)], "/foo/", None),
            (&[("/foo", "Exact", 1)], "/Foo", None),
            (&[("/foo", "Exact", 1)], "/foo/bar", None),
            (&[("/foo/", "Exact", 1)], "/foo", None),
            (&[("/foo/", "Exact", 1)], "/foo/", Some(1)),
            // Prefix is element-wise; the rule's trailing slash is ignored.
            (&[("/foo", "Prefix", 1)], "/foo", Some(1)),
            (&[("/foo", "Prefix", 1)], "/foo/", Some(1)),
            (&[("/foo", "Prefix", 1)], "/foo/bar", Some(1)),
            (&[("/foo", "Prefix", 1)], "/foobar", None),
            (&[("/foo", "Prefix", 1)], "/Foo", None),
            (&[("/foo", "Prefix", 1)], "/", None),
            (&[("/foo/", "Prefix", 1)], "/foo", Some(1)),
            (&[("/foo/", "Prefix", 1)], "/foo/bar", Some(1)),
            (&[("/foo/", "Prefix", 1)], "/foobar", None),
            (&[("/foo/bar", "Prefix", 1)], "/foo/bar/baz", Some(1)),
            (&[("/foo/bar", "Prefix", 1)], "/foo/ba", None),
            (&[("/foo/bar", "Prefix", 1)], "/foo", None),
            // ImplementationSpecific is nginx's `location /foo`: a string prefix
            // (ingress-nginx docs, "Ingress Path Matching").
            (&[("/foo", "ImplementationSpecific", 1)], "/foo/x", Some(1)),
            (&[("/foo", "ImplementationSpecific", 1)], "/foox", Some(1)),
            (&[("/foo", "ImplementationSpecific", 1)], "/fo", None),
            (&[("/foo/", "ImplementationSpecific", 1)], "/foo", None),
            (&[("/", "ImplementationSpecific", 1)], "/any", Some(1)),
            (&[("/é", "ImplementationSpecific", 1)], "/éa", Some(1)),
            (&[("/é", "ImplementationSpecific", 1)], "/e", None),
            // Longest location wins: Prefix /foo is `location /foo/`, longer than
            // ImplementationSpecific /foo, shorter than /foo/b.
            (
                &[("/foo", "ImplementationSpecific", 1), ("/foo", "Prefix", 2)],
                "/foo/x",
                Some(2),
            ),
            (
                &[("/foo", "Prefix", 2), ("/foo", "ImplementationSpecific", 1)],
                "/foox",
                Some(1),
            ),
            (
                &[
                    ("/foo", "Prefix", 2),
                    ("/foo/b", "ImplementationSpecific", 1),
                ],
                "/foo/bar",
                Some(1),
            ),
            (
                &[("/fo", "ImplementationSpecific", 1), ("/", "Prefix", 2)],
                "/foo/bar",
                Some(1),
            ),
            (
                &[("/foo", "ImplementationSpecific", 1), ("/foo", "Exact", 2)],
                "/foo",
                Some(2),
            ),
            // `/` catches everything absolute.
            (&[("/", "Prefix", 1)], "/", Some(1)),
            (&[("/", "Prefix", 1)], "/anything/at/all", Some(1)),
            (&[("/", "Prefix", 1)], "*", None),
            (&[("/", "Exact", 1)], "/", Some(1)),
            (&[("/", "Exact", 1)], "/a", None),
            // Longest wins.
            (
                &[("/", "Prefix", 1), ("/foo", "Prefix", 2)],
                "/foo/x",
                Some(2),
            ),
            (
                &[("/", "Prefix", 1), ("/foo", "Prefix", 2)],
                "/foox",
                Some(1),
            ),
            (
                &[("/foo", "Prefix", 1), ("/foo/bar", "Prefix", 2)],
                "/foo/bar/x",
                Some(2),
            ),
            (
                &[("/foo", "Prefix", 1), ("/foo/bar", "Prefix", 2)],
                "/foo/baz",
                Some(1),
            ),
            (
                &[("/foo/bar", "Prefix", 2), ("/", "Prefix", 1)],
                "/foo/baz",
                Some(1),
            ),
            (
                &[("/foo", "Exact", 1), ("/foo/bar", "Prefix", 2)],
                "/foo/bar",
                Some(2),
            ),
            (
                &[("/foo/bar", "Exact", 1), ("/foo", "Prefix", 2)],
                "/foo/bar",
                Some(1),
            ),
            // Equal length: Exact beats Prefix, whatever the insertion order.
            (
                &[("/foo", "Prefix", 1), ("/foo", "Exact", 2)],
                "/foo",
                Some(2),
            ),
            (
                &[("/foo", "Exact", 2), ("/foo", "Prefix", 1)],
                "/foo",
                Some(2),
            ),
            (
                &[("/foo/", "Prefix", 1), ("/foo", "Exact", 2)],
                "/foo",
                Some(2),
            ),
            (
                &[("/foo", "Prefix", 1), ("/foo", "Exact", 2)],
                "/foo/",
                Some(1),
            ),
            // The matcher sees paths as given (the proxy normalises them first).
            (
                &[("/foo/bar", "Prefix", 1), ("/foo", "Prefix", 2)],
                "/foo//bar",
                Some(2),
            ),
            (&[("/foo", "Prefix", 1)], "/foo/../bar", Some(1)),
        ];
        for (rules, path, want) in cases {
            let m = ingress_set(rules);
            assert_eq!(m.lookup(path, None), *want, "rules {rules:?} path {path:?}");
        }
    }

    #[test]
    fn many_keys_ingress_nginx_longest_path_wins() {
        let mut rules = Vec::new();
        for i in 0..40u32 {
            rules.push((format!("/p{i}"), "Prefix", i));
            rules.push((format!("/p{i}/x{i}"), "Prefix", 100 + i));
            rules.push((format!("/e{i}"), "Exact", 200 + i));
        }
        rules.push(("/p3".to_owned(), "Prefix", 999));
        let rules: Vec<(&str, &str, u32)> =
            rules.iter().map(|(p, t, i)| (p.as_str(), *t, *i)).collect();
        let m = ingress_set(&rules);
        for i in 0..40u32 {
            assert_eq!(m.lookup(&format!("/p{i}/y"), None), Some(i));
            assert_eq!(m.lookup(&format!("/p{i}/x{i}/z"), None), Some(100 + i));
            assert_eq!(m.lookup(&format!("/e{i}"), None), Some(200 + i));
            assert_eq!(m.lookup(&format!("/e{i}/"), None), None);
        }
        assert_eq!(m.lookup("/p40", None), None);
        assert_eq!(m.entries().len(), 121);
    }

    #[test]
    fn first_insert_wins() {
        let m = ingress_set(&[
            ("/a", "Prefix", 1),
            ("/a/", "Prefix", 2),
            ("/a", "Exact", 3),
            ("/a", "Exact", 4),
        ]);
        assert_eq!(m.lookup("/a/b", None), Some(1));
        assert_eq!(m.lookup("/a", None), Some(3));
    }
}

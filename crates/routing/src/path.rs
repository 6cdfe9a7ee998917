//! Rule paths: validation of `path`/`pathType`, and the per-host matcher.
//!
//! A [`PathMatcher`] holds the rules of one host: Exact rules in a hash map keyed by the full
//! path, Prefix rules in a trie of `/`-separated segments. A lookup costs one hash probe plus
//! one probe per request path segment, whatever the number of rules.
//!
//! Why Exact is checked first and wins outright: a Prefix rule that matches a request path is
//! never longer than it (its length is counted without its trailing slash), while a matching
//! Exact rule is exactly as long; so "longest wins, Exact beats Prefix at equal length"
//! reduces to "an Exact hit wins, else the deepest Prefix node".

use crate::key::{FastMap, Key};

/// How a rule path is matched, after mapping the Ingress `pathType`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum PathKind {
    /// `Exact`: the request path equals the rule path, byte for byte.
    Exact,
    /// `Prefix`, and `ImplementationSpecific` (which this controller defines as Prefix).
    Prefix,
    /// Prefix and ImplementationSpecific paths of a host where some Ingress has `use-regex`
    /// or `rewrite-target` (ingress-nginx's rule): a case-insensitive regular expression
    /// anchored at the start of the path; longer patterns are tried first, the first match
    /// wins (ingress-nginx orders regex locations by length).
    Regex,
}

/// A validated rule path: its kind and its matching key.
///
/// The key is the path itself for Exact, and the path without its trailing slash for Prefix
/// (so `/` becomes `""` and `/foo/` becomes `/foo`). Two rules with equal `RulePath`s are the
/// same rule, which is what the conflict resolution compares.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct RulePath {
    pub kind: PathKind,
    pub key: String,
}

/// Why a rule path was rejected; [`PathError::field`] says which field to blame.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum PathError {
    #[error(
        "pathType is missing; networking.k8s.io/v1 requires Exact, Prefix or ImplementationSpecific"
    )]
    MissingType,
    #[error("pathType {0:?} is not one of Exact, Prefix, ImplementationSpecific")]
    UnknownType(String),
    #[error("path {0:?} does not start with '/'")]
    NotAbsolute(String),
    #[error("path {0:?} contains '//', a '.' or '..' segment, or an encoded '/' (%2F)")]
    Unsafe(String),
    #[error("path {0:?} is not a valid regular expression (use-regex): {1}")]
    BadRegex(String, String),
}

impl PathError {
    /// The field (relative to the `paths[i]` entry) the error is about.
    pub(crate) fn field(&self) -> &'static str {
        match self {
            PathError::MissingType | PathError::UnknownType(_) => "pathType",
            PathError::NotAbsolute(_) | PathError::Unsafe(_) | PathError::BadRegex(..) => "path",
        }
    }
}

/// The kind of an Ingress `pathType` (ImplementationSpecific is Prefix here).
fn path_kind(path_type: &str) -> Result<PathKind, PathError> {
    match path_type {
        "Exact" => Ok(PathKind::Exact),
        "Prefix" | "ImplementationSpecific" => Ok(PathKind::Prefix),
        "" => Err(PathError::MissingType),
        other => Err(PathError::UnknownType(other.to_owned())),
    }
}

/// A rule path, `/` when missing or empty; it must start with `/`.
fn absolute(path: Option<&str>) -> Result<&str, PathError> {
    let path = match path {
        None | Some("") => "/",
        Some(p) => p,
    };
    if path.starts_with('/') {
        Ok(path)
    } else {
        Err(PathError::NotAbsolute(path.to_owned()))
    }
}

/// Validates `path` + `pathType` of one HTTPIngressPath.
///
/// A missing or empty `path` means `/`. Beyond "must start with `/`", paths containing `//`,
/// `/./`, `/../`, `%2F` or ending in `/.` or `/..` are rejected, as the Kubernetes API server
/// itself does for Exact and Prefix: those can never mean what they seem once a backend
/// normalises the request path, and excluding `//` keeps segment matching unambiguous. The same
/// check applies to ImplementationSpecific here, since it is matched as Prefix.
pub(crate) fn parse_rule_path(path: Option<&str>, path_type: &str) -> Result<RulePath, PathError> {
    let kind = path_kind(path_type)?;
    let path = absolute(path)?;
    let encoded_slash = path
        .as_bytes()
        .windows(3)
        .any(|w| w[0] == b'%' && w[1] == b'2' && w[2].eq_ignore_ascii_case(&b'f'));
    if path.contains("//")
        || path.contains("/./")
        || path.contains("/../")
        || path.ends_with("/.")
        || path.ends_with("/..")
        || encoded_slash
    {
        return Err(PathError::Unsafe(path.to_owned()));
    }
    let key = match kind {
        PathKind::Exact | PathKind::Regex => path.to_owned(),
        PathKind::Prefix => path.strip_suffix('/').unwrap_or(path).to_owned(),
    };
    Ok(RulePath { kind, key })
}

/// Validates a Prefix or ImplementationSpecific path of a regex host and compiles it as
/// nginx's `location ~* "^path"` does: case-insensitive, anchored at the start only.
pub(crate) fn parse_regex_rule_path(
    path: Option<&str>,
    path_type: &str,
) -> Result<(RulePath, regex::Regex), PathError> {
    if path_kind(path_type)? != PathKind::Prefix {
        return Err(PathError::UnknownType(path_type.to_owned()));
    }
    let path = absolute(path)?;
    let regex = path_regex(path)?;
    let rule = RulePath {
        kind: PathKind::Regex,
        key: path.to_owned(),
    };
    Ok((rule, regex))
}

/// `path` as nginx's `~*` location or `rewrite "(?i)path"` reads it.
pub(crate) fn path_regex(path: &str) -> Result<regex::Regex, PathError> {
    regex::RegexBuilder::new(&format!("^(?:{path})"))
        .case_insensitive(true)
        // Bounded: a rule path cannot make the proxy build a huge automaton.
        .size_limit(1 << 20)
        .build()
        .map_err(|e| PathError::BadRegex(path.to_owned(), e.to_string()))
}

/// The path rules of one host, compiled for lookup. Values are route entry ids.
#[derive(Debug, Default)]
pub(crate) struct PathMatcher {
    exact: SmallMap<u32>,
    prefix: PrefixNode,
    /// Regex rules, longest pattern first (ties by pattern, for determinism).
    regexes: Vec<(String, regex::Regex, u32)>,
}

#[derive(Debug, Default)]
struct PrefixNode {
    backend: Option<u32>,
    children: SmallMap<PrefixNode>,
}

/// String-keyed map for the per-host and per-node maps, which nearly always hold a handful of
/// keys: up to [`SMALL`] entries it is a vector scanned linearly (no hashing, one allocation,
/// cache-friendly), beyond that a hash map, so lookups stay O(1) per segment either way.
#[derive(Debug)]
enum SmallMap<V> {
    Few(Vec<(Key, V)>),
    // Boxed so that the common `Few` case keeps the enum (and every trie node) small.
    #[allow(clippy::box_collection)]
    Many(Box<FastMap<Key, V>>),
}

const SMALL: usize = 8;

impl<V> Default for SmallMap<V> {
    fn default() -> Self {
        SmallMap::Few(Vec::new())
    }
}

impl<V> SmallMap<V> {
    fn get(&self, key: &str) -> Option<&V> {
        match self {
            SmallMap::Few(v) => v.iter().find(|(k, _)| k.as_str() == key).map(|(_, v)| v),
            SmallMap::Many(m) => m.get(key),
        }
    }

    fn get_or_insert_with(&mut self, key: &str, value: impl FnOnce() -> V) -> &mut V {
        if let SmallMap::Few(v) = self
            && v.len() >= SMALL
            && !v.iter().any(|(k, _)| k.as_str() == key)
        {
            *self = SmallMap::Many(Box::new(std::mem::take(v).into_iter().collect()));
        }
        match self {
            SmallMap::Few(v) => {
                let i = match v.iter().position(|(k, _)| k.as_str() == key) {
                    Some(i) => i,
                    None => {
                        v.push((key.into(), value()));
                        v.len() - 1
                    }
                };
                &mut v[i].1
            }
            SmallMap::Many(m) => m.entry(key.into()).or_insert_with(value),
        }
    }

    fn iter(&self) -> Box<dyn Iterator<Item = (&str, &V)> + '_> {
        match self {
            SmallMap::Few(v) => Box::new(v.iter().map(|(k, v)| (k.as_str(), v))),
            SmallMap::Many(m) => Box::new(m.iter().map(|(k, v)| (k.as_str(), v))),
        }
    }
}

impl PathMatcher {
    /// Adds a rule; the first insertion of a given [`RulePath`] wins (callers insert oldest first
    /// and have already dropped the losers, so this only matters for robustness).
    pub(crate) fn insert(&mut self, rule: &RulePath, backend: u32) {
        match rule.kind {
            PathKind::Regex => {
                // Only reachable through `insert_regex`; a regex without its compiled form
                // cannot match anything.
            }
            PathKind::Exact => {
                self.exact.get_or_insert_with(&rule.key, || backend);
            }
            PathKind::Prefix => {
                let mut node = &mut self.prefix;
                // key is "" for "/", else "/seg/seg": skip the empty element before the first '/'.
                for segment in rule.key.split('/').skip(1) {
                    node = node
                        .children
                        .get_or_insert_with(segment, PrefixNode::default);
                }
                node.backend.get_or_insert(backend);
            }
        }
    }

    /// Adds a regex rule (compiled by [`parse_regex_rule_path`]); the first insertion of a
    /// pattern wins.
    pub(crate) fn insert_regex(&mut self, rule: &RulePath, regex: regex::Regex, entry: u32) {
        let order = |key: &str| (std::cmp::Reverse(key.len()), key.to_owned());
        match self
            .regexes
            .binary_search_by(|(key, _, _)| order(key).cmp(&order(&rule.key)))
        {
            Ok(_) => {}
            Err(at) => self.regexes.insert(at, (rule.key.clone(), regex, entry)),
        }
    }

    /// Every rule as (kind, key, backend id), in no particular order.
    pub(crate) fn entries(&self) -> Vec<(PathKind, String, u32)> {
        let mut out: Vec<_> = self
            .exact
            .iter()
            .map(|(k, &id)| (PathKind::Exact, k.to_owned(), id))
            .collect();
        let mut stack = vec![(String::new(), &self.prefix)];
        while let Some((key, node)) = stack.pop() {
            if let Some(id) = node.backend {
                out.push((PathKind::Prefix, key.clone(), id));
            }
            for (segment, child) in node.children.iter() {
                stack.push((format!("{key}/{segment}"), child));
            }
        }
        out.extend(
            self.regexes
                .iter()
                .map(|(key, _, id)| (PathKind::Regex, key.clone(), *id)),
        );
        out
    }

    /// The backend id of the best rule for `path`, if any. `path` must already be non-empty.
    pub(crate) fn lookup(&self, path: &str) -> Option<u32> {
        if let Some(&id) = self.exact.get(path) {
            return Some(id);
        }
        if let Some((_, _, id)) = self.regexes.iter().find(|(_, re, _)| re.is_match(path)) {
            return Some(*id);
        }
        // Prefix rules only ever match absolute paths (e.g. not "*" of `OPTIONS *`).
        let rest = path.strip_prefix('/')?;
        let mut node = &self.prefix;
        let mut best = node.backend;
        for segment in rest.split('/') {
            match node.children.get(segment) {
                Some(child) => {
                    node = child;
                    best = child.backend.or(best);
                }
                None => break,
            }
        }
        best
    }
}

/// Whether a Prefix rule with matcher key `key` (its path without the trailing slash, `""`
/// for `/`) matches request `path` by whole segments: `/foo` matches `/foo`, `/foo/` and
/// `/foo/bar`, never `/foobar`. The trie in [`PathMatcher`] answers the same question for
/// every rule at once; this one rule at a time is for explaining a match.
pub(crate) fn prefix_matches(key: &str, path: &str) -> bool {
    path.starts_with('/')
        && path
            .strip_prefix(key)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rp(path: &str, ty: &str) -> RulePath {
        parse_rule_path(Some(path), ty).unwrap()
    }

    #[test]
    fn parse_paths() {
        use PathKind::*;
        let ok = [
            (Some("/"), "Prefix", Prefix, ""),
            (None, "Prefix", Prefix, ""),
            (Some(""), "Exact", Exact, "/"),
            (Some("/foo"), "Prefix", Prefix, "/foo"),
            (Some("/foo/"), "Prefix", Prefix, "/foo"),
            (Some("/foo/"), "ImplementationSpecific", Prefix, "/foo"),
            (Some("/foo/"), "Exact", Exact, "/foo/"),
            (Some("/Foo"), "Exact", Exact, "/Foo"),
            (Some("/a.b/..c/"), "Prefix", Prefix, "/a.b/..c"),
        ];
        for (path, ty, kind, key) in ok {
            assert_eq!(
                parse_rule_path(path, ty),
                Ok(RulePath {
                    kind,
                    key: key.into()
                }),
                "{path:?} {ty}"
            );
        }
        let bad = [
            (Some("/foo"), "", "pathType"),
            (Some("/foo"), "prefix", "pathType"),
            (Some("/foo"), "Regex", "pathType"),
            (Some("foo"), "Prefix", "path"),
            (Some("*"), "Exact", "path"),
            (Some("/a//b"), "Prefix", "path"),
            (Some("/a/../b"), "Prefix", "path"),
            (Some("/a/./b"), "ImplementationSpecific", "path"),
            (Some("/a/.."), "Exact", "path"),
            (Some("/a/."), "Exact", "path"),
            (Some("/a%2Fb"), "Prefix", "path"),
            (Some("/a%2fb"), "Prefix", "path"),
            (Some("//"), "Prefix", "path"),
        ];
        for (path, ty, field) in bad {
            let err = parse_rule_path(path, ty).unwrap_err();
            assert_eq!(err.field(), field, "{path:?} {ty}: {err}");
        }
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
            (&[("/foo", "ImplementationSpecific", 1)], "/foo/x", Some(1)),
            (&[("/foo", "ImplementationSpecific", 1)], "/foox", None),
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
            let mut m = PathMatcher::default();
            for (p, ty, id) in rules.iter() {
                m.insert(&rp(p, ty), *id);
            }
            assert_eq!(m.lookup(path), *want, "rules {rules:?} path {path:?}");
        }
    }

    #[test]
    fn many_keys_switch_to_hash_maps() {
        let mut m = PathMatcher::default();
        for i in 0..40u32 {
            m.insert(&rp(&format!("/p{i}"), "Prefix"), i);
            m.insert(&rp(&format!("/p{i}/x{i}"), "Prefix"), 100 + i);
            m.insert(&rp(&format!("/e{i}"), "Exact"), 200 + i);
        }
        m.insert(&rp("/p3", "Prefix"), 999);
        for i in 0..40u32 {
            assert_eq!(m.lookup(&format!("/p{i}/y")), Some(i));
            assert_eq!(m.lookup(&format!("/p{i}/x{i}/z")), Some(100 + i));
            assert_eq!(m.lookup(&format!("/e{i}")), Some(200 + i));
            assert_eq!(m.lookup(&format!("/e{i}/")), None);
        }
        assert_eq!(m.lookup("/p40"), None);
        assert!(matches!(m.exact, SmallMap::Many(_)));
        assert_eq!(m.entries().len(), 120);
    }

    #[test]
    fn first_insert_wins() {
        let mut m = PathMatcher::default();
        m.insert(&rp("/a", "Prefix"), 1);
        m.insert(&rp("/a/", "ImplementationSpecific"), 2);
        m.insert(&rp("/a", "Exact"), 3);
        m.insert(&rp("/a", "Exact"), 4);
        assert_eq!(m.lookup("/a/b"), Some(1));
        assert_eq!(m.lookup("/a"), Some(3));
    }
}

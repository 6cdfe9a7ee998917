//! Rule paths: validation of an Ingress `path`/`pathType` (and of a Gateway API path match)
//! into a [`RulePath`], which the compilers lower into the one rule form ([`crate::rules`]).

/// How a rule path is matched, after mapping the Ingress `pathType`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum PathKind {
    /// `Exact`: the request path equals the rule path, byte for byte.
    Exact,
    /// `Prefix`: whole path elements.
    Prefix,
    /// `ImplementationSpecific` on a host without regex paths: a string prefix, as nginx's
    /// `location /foo` (ingress-nginx writes such a path into a plain prefix location):
    /// `/foo` matches `/foo`, `/foo/bar` and `/foobar`.
    StringPrefix,
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

/// The kind of an Ingress `pathType` (ImplementationSpecific is a string prefix here).
fn path_kind(path_type: &str) -> Result<PathKind, PathError> {
    match path_type {
        "Exact" => Ok(PathKind::Exact),
        "Prefix" => Ok(PathKind::Prefix),
        "ImplementationSpecific" => Ok(PathKind::StringPrefix),
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
/// check applies to ImplementationSpecific here: requests are matched normalised, so such a
/// path could never match.
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
        PathKind::Exact | PathKind::Regex | PathKind::StringPrefix => path.to_owned(),
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
    if path_kind(path_type)? == PathKind::Exact {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_paths() {
        use PathKind::*;
        let ok = [
            (Some("/"), "Prefix", Prefix, ""),
            (None, "Prefix", Prefix, ""),
            (Some(""), "Exact", Exact, "/"),
            (Some("/foo"), "Prefix", Prefix, "/foo"),
            (Some("/foo/"), "Prefix", Prefix, "/foo"),
            (
                Some("/foo/"),
                "ImplementationSpecific",
                StringPrefix,
                "/foo/",
            ),
            (Some("/foo"), "ImplementationSpecific", StringPrefix, "/foo"),
            (None, "ImplementationSpecific", StringPrefix, "/"),
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
}

//! Fail closed: which ingress-nginx annotations restrict who may reach a route, so that one
//! sluice cannot honour (or one with an invalid value) closes the route instead of leaving
//! it open.
//!
//! ingress-nginx itself never serves such a location open: when an annotation of its
//! authentication or authorisation family does not parse, the location is marked denied and
//! nginx answers 503 (`location.Denied`). sluice does the same for what it does not
//! implement: the route answers 503, the Ingress gets a `FailedClosed` Event naming the
//! annotation, and `sluice migrate` lists it. Every other unsupported annotation only gets
//! the usual Warning.

use super::*;

/// Directives of a snippet that decide who gets an answer. A snippet that carries one of
/// them and is refused would leave the route more open than its author wrote it.
const ACCESS_DIRECTIVES: &[&str] = &[
    "allow",
    "deny",
    "auth_basic",
    "auth_basic_user_file",
    "auth_request",
    "auth_jwt",
    "satisfy",
    "ssl_verify_client",
    "limit_except",
];

/// The first directive of nginx configuration text `snippet` that restricts access, if
/// any: one of [`ACCESS_DIRECTIVES`], or a `return` of a 4xx or 5xx status (the
/// `if ($http_x != "secret") { return 403; }` idiom).
pub(crate) fn restricting_directive(snippet: &str) -> Option<String> {
    snippet
        .split([';', '{', '}', '\n'])
        .map(|statement| {
            let statement = statement.trim();
            // `if (...)` heads carry their condition before the block; a directive starts
            // each statement.
            statement
                .strip_prefix("if")
                .filter(|rest| rest.trim_start().starts_with('('))
                .map_or(statement, |_| "")
        })
        .find_map(|statement| {
            let mut words = statement.split_whitespace();
            let directive = words.next()?.to_ascii_lowercase();
            if ACCESS_DIRECTIVES.contains(&directive.as_str()) {
                return Some(directive);
            }
            if directive == "return" {
                let code: u16 = words.next()?.parse().ok()?;
                return (400..600).contains(&code).then(|| format!("return {code}"));
            }
            None
        })
}

/// The sentence that ends every `FailedClosed` detail.
pub(crate) const CLOSED: &str =
    "the Ingress's routes answer 503 to every request until it is removed (fail closed)";

/// `satisfy`: returns whether it is `any`.
pub(super) fn satisfy_any(cx: &mut Cx<'_>) -> bool {
    // nginx `satisfy`: `all` (default) or `any`, honoured for source ranges with basic or
    // external authentication.
    let Some(entry) = cx.take("satisfy") else {
        return false;
    };
    match entry.value.trim() {
        "all" | "" => {
            cx.applied(entry);
            false
        }
        "any" => {
            cx.applied(entry);
            true
        }
        other => {
            // Invalid: `all`, the stricter reading, applies.
            cx.invalid(
                entry,
                format!("value {other:?} is not all or any; all applies (every restriction)"),
            );
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn access_directives_in_snippets_are_found() {
        let cases = [
            ("allow 10.0.0.0/8;\ndeny all;", Some("allow")),
            ("more_set_headers \"X: 1\";", None),
            (
                "if ($http_x_token != \"s3cret\") { return 403; }",
                Some("return 403"),
            ),
            ("return 301 https://example.com$request_uri;", None),
            (
                "auth_basic \"area\"; auth_basic_user_file /etc/htpasswd;",
                Some("auth_basic"),
            ),
            ("  DENY all;", Some("deny")),
            ("limit_except GET { deny all; }", Some("limit_except")),
            ("proxy_set_header X-A b;", None),
            ("", None),
            ("if ($request_uri ~ /x) { return 444; }", Some("return 444")),
        ];
        for (snippet, want) in cases {
            assert_eq!(
                restricting_directive(snippet).as_deref(),
                want,
                "{snippet:?}"
            );
        }
    }
}

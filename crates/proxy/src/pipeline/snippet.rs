//! The snippet stage: what a route's interpreted `configuration-snippet` and
//! `server-snippet` decide per request ([`sluice_routing::SnippetRules`]): a `return` or a
//! redirecting `rewrite` answers, a `rewrite` changes the path sent upstream, and fields
//! with variables are set on the request and the response. Runs after the route's access
//! checks (closed routes, source ranges) and before its rate limits, as nginx's rewrite
//! phase precedes `limit_req`.

use std::net::IpAddr;

use bytes::Bytes;
use http::{HeaderName, HeaderValue, StatusCode};
use sluice_routing::{
    ADD_HEADER_STATUSES, HeaderPattern, SnippetAnswer, SnippetFacts, SnippetOutcome, SnippetRules,
};

use crate::pipeline::route_policy::Answer;
use crate::pipeline::view::RequestView;

/// Runs `rules` for a request whose normalised path is `path`.
pub(crate) fn run<'r, V: RequestView<'r>>(
    rules: &SnippetRules,
    request: V,
    path: &str,
    tls: bool,
    client: IpAddr,
) -> SnippetOutcome {
    let field = |name: &str| request.field(name.as_bytes());
    let remote_addr = client.to_string();
    let host = host_of(request.host());
    let facts = SnippetFacts {
        host: &host,
        request_uri: request.target(),
        path,
        query: request.query().unwrap_or(""),
        scheme: if tls { "https" } else { "http" },
        remote_addr: &remote_addr,
        method: request.method(),
        field: &field,
    };
    rules.run(&facts)
}

/// nginx's `$host`: the request's host without port, lower case.
fn host_of(host: &str) -> String {
    let without_port = match host.rfind(':') {
        Some(at) if !host[at..].contains(']') => &host[..at],
        _ => host,
    };
    without_port.to_ascii_lowercase()
}

/// A snippet's answer as the proxy writes it: a redirect with its `Location`, or the
/// status with the `return`'s text as the body.
pub(crate) fn answer(answer: &SnippetAnswer) -> Answer {
    let status = StatusCode::from_u16(answer.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut out = Answer::status(status);
    if let Some(location) = &answer.location {
        match HeaderValue::try_from(location.as_str()) {
            Ok(location) => out.location = Some(location),
            Err(_) => return Answer::status(StatusCode::INTERNAL_SERVER_ERROR),
        }
    }
    out.body = answer.body.clone().map(Bytes::from);
    out
}

/// The response edits a snippet makes beyond fields set: `add_header` (on nginx's statuses
/// unless `always`) and wildcard `more_clear_headers`.
#[derive(Debug, Default)]
pub(crate) struct SnippetResponse {
    /// (name, value, always).
    pub(crate) add: Vec<(HeaderName, HeaderValue, bool)>,
    /// Patterns of fields never sent.
    pub(crate) clear: Vec<HeaderPattern>,
}

impl SnippetResponse {
    /// The part of an outcome that acts on the response head; `None` when nothing does.
    pub(crate) fn of(outcome: &mut SnippetOutcome) -> Option<Box<SnippetResponse>> {
        if outcome.response_add.is_empty() && outcome.response_clear.is_empty() {
            return None;
        }
        Some(Box::new(SnippetResponse {
            add: std::mem::take(&mut outcome.response_add),
            clear: std::mem::take(&mut outcome.response_clear),
        }))
    }

    /// Whether field `name` is cleared.
    pub(crate) fn clears(&self, name: &[u8]) -> bool {
        self.clear.iter().any(|p| p.matches(name))
    }

    /// The fields added to a response with `status` (nginx `add_header`).
    pub(crate) fn added(&self, status: u16) -> impl Iterator<Item = (&HeaderName, &HeaderValue)> {
        let success = ADD_HEADER_STATUSES.contains(&status);
        self.add
            .iter()
            .filter(move |(_, _, always)| *always || success)
            .map(|(name, value, _)| (name, value))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_variable_drops_the_port_and_lowers_case_as_nginx() {
        assert_eq!(host_of("Shop.Example:8080"), "shop.example");
        assert_eq!(host_of("[::1]:80"), "[::1]");
        assert_eq!(host_of("[::1]"), "[::1]");
    }

    /// nginx `add_header`: 200, 201, 204, 206, 301, 302, 303, 304, 307, 308 only, unless
    /// `always`.
    #[test]
    fn add_header_applies_on_nginx_statuses_unless_always() {
        let response = SnippetResponse {
            add: vec![
                (
                    HeaderName::from_static("x-ok"),
                    HeaderValue::from_static("1"),
                    false,
                ),
                (
                    HeaderName::from_static("x-always"),
                    HeaderValue::from_static("1"),
                    true,
                ),
            ],
            clear: vec![HeaderPattern::Prefix("x-powered".into())],
        };
        let names = |status| {
            response
                .added(status)
                .map(|(n, _)| n.as_str().to_owned())
                .collect::<Vec<_>>()
        };
        assert_eq!(names(200), ["x-ok", "x-always"]);
        assert_eq!(names(308), ["x-ok", "x-always"]);
        assert_eq!(names(404), ["x-always"]);
        assert_eq!(names(500), ["x-always"]);
        assert!(response.clears(b"X-Powered-By"));
        assert!(!response.clears(b"X-Other"));
    }

    #[test]
    fn a_bad_location_is_an_internal_error_not_a_broken_head() {
        let bad = SnippetAnswer {
            status: 302,
            location: Some("https://x/\r\nevil".into()),
            body: None,
        };
        assert_eq!(answer(&bad).status, StatusCode::INTERNAL_SERVER_ERROR);
        let text = SnippetAnswer {
            status: 200,
            location: None,
            body: Some("ok".into()),
        };
        assert_eq!(answer(&text).body.as_deref(), Some(&b"ok"[..]));
    }
}

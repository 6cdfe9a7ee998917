//! The phases between routing and the upstream step, written once for both front ends:
//! the route's own answers (`route_policy::answer`: closed routes, source ranges, redirects, app
//! root, CORS preflight), its fixed status (Gateway API), the rewrite of the target
//! (ingress-nginx's `rewrite-target`, Gateway API `URLRewrite`), the rate limits, and the
//! fields the response gets. Each front end only turns the verdict into bytes: an answer
//! now, or a request to forward.
//!
//! The order is nginx's phases: `return`s and `rewrite` (rewrite phase) before `limit_req`
//! and `limit_conn` (preaccess phase), so a redirected request never counts against a
//! limit; external authentication (`auth_request`, access phase) follows, in the hyper
//! front end, which is the one that serves routes with `auth-url`.

use std::time::Instant;

use http::{HeaderName, HeaderValue, StatusCode};
use sluice_routing::RouteEntry;

use crate::context::ConnCtx;
use crate::pipeline::route::Routed;
use crate::pipeline::route_policy;
use crate::pipeline::snippet::{self, SnippetResponse};

/// What the front end does with a routed request.
#[derive(Debug)]
pub(crate) enum Decision {
    /// Answer with the proxy's page for this status (fixed status, rate limit).
    Page(StatusCode),
    /// Answer with the policy's own response (refusal, redirect, preflight).
    Answer(route_policy::Answer),
    /// Go upstream.
    Forward(Forward),
}

/// A request cleared to go upstream.
#[derive(Debug)]
pub(crate) struct Forward {
    /// The `limit-connections` count taken, for the request's accounting to release.
    pub(crate) limit_slot: Option<usize>,
    /// The path and query to send instead of the client's target (a rewrite).
    pub(crate) rewritten: Option<String>,
    /// Fields set on the response (CORS, the route's response fields, HSTS over TLS).
    pub(crate) response_fields: Vec<(HeaderName, HeaderValue)>,
    /// A snippet's request-dependent response edits (`add_header`, wildcard clears).
    pub(crate) snippet_response: Option<Box<SnippetResponse>>,
}

/// Where a routed request goes: `(backend, entry, fixed status)` (a backend without ready
/// endpoints is a fixed 503, after the route's own answers), or the status of the proxy's
/// page when it goes nowhere (404). The backend and entry are recorded in the
/// request's accounting (`Completion::backend`, `Completion::entry`) either way.
pub(crate) fn destination(
    routed: Routed,
    backend_of: &mut Option<usize>,
    entry_of: &mut Option<usize>,
) -> Result<(usize, usize, Option<u16>), StatusCode> {
    let (backend, entry, fixed) = match routed {
        Routed::NotFound => return Err(StatusCode::NOT_FOUND),
        Routed::Misdirected => return Err(StatusCode::MISDIRECTED_REQUEST),
        // As nginx, whose `return`s, redirects and access rules run before `proxy_pass`
        // finds no upstream: the route's own answers first, then 503.
        Routed::NoEndpoints { backend, entry } => (backend, entry, Some(503)),
        Routed::Backend { backend, entry } => (backend, entry, None),
        Routed::Status {
            backend,
            entry,
            status,
        } => (backend, entry, Some(status)),
    };
    (*backend_of, *entry_of) = (Some(backend), Some(entry));
    Ok((backend, entry, fixed))
}

/// Runs the phases for a request routed to `entry` (its Gateway API fixed status, if any, in
/// `fixed`). `request.path` is the normalised path the route matched; `query` the
/// request's query as received; `snippet` what the route's snippets decided (see
/// [`snippet`]).
pub(crate) fn decide(
    ctx: &ConnCtx,
    settings: &crate::settings::Settings,
    entry: &RouteEntry,
    request: &route_policy::Request<'_>,
    fixed: Option<u16>,
    start: Instant,
    snippet: Option<&mut sluice_routing::SnippetOutcome>,
) -> Decision {
    let route_policy = &*entry.policy;
    // The query as received (the target's part after `?`).
    let query = request.target.split_once('?').map(|(_, q)| q);
    if let Some(answer) = route_policy::answer(route_policy, request) {
        return Decision::Answer(answer);
    }
    // The snippets' `return` and redirecting `rewrite` (nginx's rewrite phase, before
    // `proxy_pass` finds no endpoint).
    if let Some(answer) = snippet.as_ref().and_then(|s| s.answer.as_ref()) {
        return Decision::Answer(snippet::answer(answer));
    }
    if let Some(status) = fixed {
        return Decision::Page(
            StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
        );
    }
    // A snippet's `rewrite` comes first in the location (ingress-nginx writes the snippet
    // before `rewrite-target`'s `rewrite ... break`), which sees the path it left unless it
    // ended with `break` or `last`.
    let (path, query, snippet_target) = match snippet.as_deref() {
        Some(outcome) => match (&outcome.rewritten, &outcome.target) {
            (Some((path, query)), Some(target)) if !outcome.stopped => {
                (path.as_str(), Some(query.as_str()), Some(target.clone()))
            }
            (_, Some(target)) => (request.path, query, Some(target.clone())),
            _ => (request.path, query, None),
        },
        None => (request.path, query, None),
    };
    let stopped = snippet.as_deref().is_some_and(|s| s.stopped);
    let rewritten = match (stopped, snippet_target) {
        (true, target @ Some(_)) => target,
        (_, snippet_target) => match route_policy::upstream_target(entry, path, query) {
            Some(route_policy::Rewritten::Redirect(location)) => {
                if route_policy.rewrite_log {
                    log_rewrite(entry, path, location.to_str().unwrap_or("-"));
                }
                return Decision::Answer(route_policy::Answer::found(location));
            }
            Some(route_policy::Rewritten::Target(target)) => {
                if route_policy.rewrite_log {
                    log_rewrite(entry, path, &target);
                }
                Some(target)
            }
            None => snippet_target,
        },
    };
    let limit_slot =
        match route_policy::within_limits(route_policy, &ctx.shared, request.client, start) {
            Ok(slot) => slot,
            Err(route_policy::Limited::Rate) => {
                return Decision::Page(settings.limit_req_status);
            }
            Err(route_policy::Limited::Connections) => {
                return Decision::Page(settings.limit_conn_status);
            }
        };
    // Allocates nothing for a route that sets no response fields (over plain HTTP).
    let mut response_fields = route_policy::response_fields(route_policy, request.origin);
    if ctx.tls
        && let Some(hsts) = &settings.hsts
    {
        response_fields.push((http::header::STRICT_TRANSPORT_SECURITY, hsts.clone()));
    }
    let mut snippet_response = None;
    if let Some(outcome) = snippet {
        // `more_set_headers` with variables: set after the route's own fields.
        for (name, value) in std::mem::take(&mut outcome.response_set) {
            response_fields.retain(|(n, _)| *n != name);
            response_fields.push((name, value));
        }
        snippet_response = SnippetResponse::of(outcome);
    }
    Decision::Forward(Forward {
        limit_slot,
        rewritten,
        response_fields,
        snippet_response,
    })
}

/// `enable-rewrite-log` (nginx's `rewrite_log on`, which writes each rewrite to the error log
/// at `notice`): the route, the path it matched and what was sent or redirected to.
fn log_rewrite(entry: &RouteEntry, from: &str, to: &str) {
    tracing::info!(target: "sluice::rewrite", route = %entry.source, from, to, "rewrite");
}

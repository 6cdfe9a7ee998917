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
/// request's query as received.
pub(crate) fn decide(
    ctx: &ConnCtx,
    settings: &crate::settings::Settings,
    entry: &RouteEntry,
    request: &route_policy::Request<'_>,
    query: Option<&str>,
    fixed: Option<u16>,
    start: Instant,
) -> Decision {
    let route_policy = &*entry.policy;
    if let Some(answer) = route_policy::answer(route_policy, request) {
        return Decision::Answer(answer);
    }
    if let Some(status) = fixed {
        return Decision::Page(
            StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
        );
    }
    let rewritten = match route_policy::upstream_target(entry, request.path, query) {
        Some(route_policy::Rewritten::Redirect(location)) => {
            if route_policy.rewrite_log {
                log_rewrite(entry, request.path, location.to_str().unwrap_or("-"));
            }
            return Decision::Answer(route_policy::Answer::found(location));
        }
        Some(route_policy::Rewritten::Target(target)) => {
            if route_policy.rewrite_log {
                log_rewrite(entry, request.path, &target);
            }
            Some(target)
        }
        None => None,
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
    Decision::Forward(Forward {
        limit_slot,
        rewritten,
        response_fields,
    })
}

/// `enable-rewrite-log` (nginx's `rewrite_log on`, which writes each rewrite to the error log
/// at `notice`): the route, the path it matched and what was sent or redirected to.
fn log_rewrite(entry: &RouteEntry, from: &str, to: &str) {
    tracing::info!(target: "sluice::rewrite", route = %entry.source, from, to, "rewrite");
}

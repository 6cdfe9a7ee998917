//! TCPRoute, TLSRoute and UDPRoute: routes of whole connections (a UDP client's datagrams
//! count as one). They attach to listeners exactly as
//! HTTP routes do (parentRefs, allowedRoutes, hostnames, ReferenceGrants, statuses), so the
//! compiler takes them in HTTPRoute form (one rule with its backendRefs) and, once
//! attached, puts their backends in the socket's [`crate::rules::StreamRoutes`] instead of
//! HTTP rule sets: a TCP listener's route takes every connection, a TLS `Passthrough`
//! listener's routes are chosen by the SNI of the ClientHello.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::types::{HttpRoute, HttpRouteRule, HttpRouteSpec, StreamRouteSpec};

/// The HTTPRoute form of a TCPRoute, TLSRoute or UDPRoute, and its problem if any (a sentence naming
/// the field): the CRD allows one rule, and sluice takes no more.
pub(crate) fn as_http_route(
    metadata: &ObjectMeta,
    spec: &StreamRouteSpec,
) -> (HttpRoute, Option<String>) {
    let problem = (spec.rules.len() > 1).then(|| {
        format!(
            "spec.rules: {} rules; a TCPRoute, TLSRoute or UDPRoute has one",
            spec.rules.len()
        )
    });
    let rules = spec
        .rules
        .iter()
        .map(|rule| HttpRouteRule {
            backend_refs: rule.backend_refs.clone(),
            ..HttpRouteRule::default()
        })
        .collect();
    let route = HttpRoute {
        metadata: metadata.clone(),
        spec: HttpRouteSpec {
            parent_refs: spec.parent_refs.clone(),
            hostnames: spec.hostnames.clone(),
            rules,
        },
        status: None,
    };
    (route, problem)
}

//! The upstream request, built in one place for both front ends: the client's head with
//! the route's edits (rewritten target, `upstream-vhost`, set, added and removed fields,
//! `x-forwarded-prefix`), the retry and balancing settings, and the body. The custom-error
//! request to the default backend is built here too.

use std::borrow::Cow;

use http::{HeaderName, HeaderValue};
use sluice_routing::Policy;

use crate::body::RequestBody;
use crate::context::ConnCtx;
use crate::http::header_policy::Framing;
use crate::pipeline::view::RequestView;
use crate::settings::Settings;
use crate::upstream::Outgoing;

/// The route's request fields, then those the auth service sent (they win). Borrowed
/// when there are none of the latter (the usual case: no allocation).
pub(crate) fn request_fields(
    route: &[(HeaderName, HeaderValue)],
    auth: Vec<(HeaderName, HeaderValue)>,
) -> Cow<'_, [(HeaderName, HeaderValue)]> {
    if auth.is_empty() {
        return Cow::Borrowed(route);
    }
    let mut fields = route.to_vec();
    fields.retain(|(name, _)| !auth.iter().any(|(n, _)| n == name));
    fields.extend(auth);
    Cow::Owned(fields)
}

/// What the route decided about the request it sends upstream.
pub(crate) struct Sending<'a> {
    /// The connection.
    pub(crate) ctx: &'a ConnCtx,
    /// The settings in force (the header policy).
    pub(crate) settings: &'a Settings,
    /// The route's policy.
    pub(crate) route_policy: &'a Policy,
    /// The path and query to send instead of the client's (a rewrite).
    pub(crate) target: Option<&'a str>,
    /// Fields set on the request (the route's, then the auth service's).
    pub(crate) set: &'a [(HeaderName, HeaderValue)],
    /// The endpoint to try first (session affinity, `upstream-hash-by`).
    pub(crate) prefer: Option<usize>,
}

impl Sending<'_> {
    /// The request to the route's backend.
    pub(crate) fn request<'s, 'r: 's, V: RequestView<'r>>(
        &'s self,
        request: V,
        body: RequestBody,
    ) -> Outgoing<'s> {
        let policy = self.route_policy;
        let mut head = request.upstream_request();
        if let Some(target) = self.target {
            head.target = target.as_bytes();
        }
        head.set = self.set;
        head.vhost = policy.upstream_vhost.as_ref();
        head.forwarded_prefix = policy.forwarded_prefix.as_ref();
        head.connection = policy.connection_header.as_ref();
        head.http10 = policy.upstream_http10;
        head.add = &policy.request_headers_add;
        head.remove = &policy.request_headers_remove;
        let head_request = request.method() == "HEAD";
        Outgoing {
            head,
            forwarded: &self.ctx.forwarded,
            policy: &self.settings.policy,
            body,
            idempotent: request.idempotent(),
            head_request,
            retry: &policy.next_upstream,
            prefer: self.prefer,
            balance: policy.load_balance,
            try_timeout: policy.backend_request_timeout,
        }
    }

    /// The request to the default backend that answers for an intercepted status
    /// (`custom-http-errors`), with ingress-nginx's `X-Code`, `X-Format`, ... in `fields`:
    /// the client's target, no body, and HEAD kept while every other method becomes GET
    /// (nginx's `error_page` internal redirect).
    pub(crate) fn error_page_request<'s, 'r: 's, V: RequestView<'r>>(
        &'s self,
        request: V,
        fields: &'s [(HeaderName, HeaderValue)],
    ) -> Outgoing<'s> {
        let head_request = request.method() == "HEAD";
        let mut head = request.upstream_request();
        head.method = if head_request { b"HEAD" } else { b"GET" };
        head.websocket = false;
        head.framing = Framing::None;
        head.set = fields;
        Outgoing {
            head,
            forwarded: &self.ctx.forwarded,
            policy: &self.settings.policy,
            body: RequestBody::Empty,
            idempotent: true,
            head_request,
            retry: &self.route_policy.next_upstream,
            prefer: None,
            balance: None,
            try_timeout: self.route_policy.backend_request_timeout,
        }
    }
}

//! The upstream step of a forwarded request, for both front ends: the exchange up to the
//! response head over the backend's transport (the own HTTP/1.1 client, or hyper's for
//! HTTPS, h2c and gRPC), within the route's request timeout (Gateway API
//! `timeouts.request`), and the custom-error intercept: a status listed in
//! `custom-http-errors` is answered by the route's default backend instead.

use std::time::{Duration, Instant};

use sluice_routing::{Policy, RouteEntry, UpstreamProtocol};

use crate::context::Upstreams;
use crate::pipeline::outgoing::Sending;
use crate::pipeline::route_policy;
use crate::pipeline::view::RequestView;
use crate::snapshot::Snapshot;
use crate::upstream::{self, Answer, Failure, Outgoing};

/// The bounds of one request's upstream step.
pub(crate) struct Step<'a> {
    /// The route's upstream settings.
    pub(crate) upstreams: &'a Upstreams,
    /// Longest wait for the response head.
    pub(crate) header_timeout: Duration,
    /// The whole step's bound from the request's start (Gateway API `timeouts.request`).
    pub(crate) request_timeout: Option<Duration>,
    /// When the request arrived.
    pub(crate) start: Instant,
}

impl Step<'_> {
    /// Sends `outgoing` to backend `id` over hyper's client in `protocol`.
    pub(crate) async fn client(
        &self,
        snapshot: &Snapshot,
        id: usize,
        protocol: UpstreamProtocol,
        route_policy: &Policy,
        mut outgoing: Outgoing<'_>,
    ) -> Result<upstream::client::Answer, Failure> {
        // Upgrades are relayed to plain HTTP/1.1 backends only.
        outgoing.head.websocket = false;
        let Some(target) = upstream::client::target(snapshot, id, protocol, route_policy) else {
            return Err(Failure::BadGateway);
        };
        let state = &snapshot.backends[id];
        let (upstreams, start) = (self.upstreams, self.start);
        let sending = upstream::client::send(
            upstreams,
            state,
            &target,
            outgoing,
            start,
            self.header_timeout,
        );
        match self.request_timeout {
            Some(limit) => upstream::within(limit, start, sending).await,
            None => sending.await,
        }
    }

    /// Sends `outgoing` to backend `id` over the own HTTP/1.1 client; an intercepted status
    /// sends `request` again, as `sending` builds it for the default backend. Returns the
    /// answer, or the failure, with the backend it came from.
    pub(crate) async fn http1<'s, 'r: 's, V: RequestView<'r>>(
        &self,
        snapshot: &Snapshot,
        id: usize,
        route_entry: &RouteEntry,
        outgoing: Outgoing<'s>,
        request: V,
        sending: &'s Sending<'_>,
    ) -> Result<(Answer, usize), (Failure, usize)> {
        let (upstreams, start) = (self.upstreams, self.start);
        let state = &snapshot.backends[id];
        let exchange = upstream::send(upstreams, state, outgoing, start, self.header_timeout);
        // The request timeout wraps the step only when the route has one: one layer less
        // to poll otherwise.
        let answer = match self.request_timeout {
            Some(limit) => upstream::within(limit, start, exchange).await,
            None => exchange.await,
        };
        let answer = answer.map_err(|failure| (failure, id))?;
        let status = answer.response.head.status.as_u16();
        let Some(fallback) = route_policy::intercept(route_entry, status) else {
            return Ok((answer, id));
        };
        // custom-http-errors: this status is answered by the default backend (nginx's
        // error_page internal redirect).
        state.balancer.release(answer.endpoint);
        drop(answer);
        let accept = request.field(b"accept");
        let fields = route_policy::error_fields(status, accept, request.target(), route_entry);
        let outgoing = sending.error_page_request(request, &fields);
        let state = &snapshot.backends[fallback.id];
        let exchange = upstream::send(upstreams, state, outgoing, start, self.header_timeout);
        let answer = match self.request_timeout {
            Some(limit) => upstream::within(limit, start, exchange).await,
            None => exchange.await,
        };
        let answer = answer.map_err(|failure| (failure, fallback.id))?;
        Ok((answer, fallback.id))
    }
}

//! Gateway API (`gateway.networking.k8s.io`): GatewayClass, Gateway, HTTPRoute, GRPCRoute
//! and ReferenceGrant compiled into the same [`crate::RouteTable`] as Ingress.
//!
//! # Where to start
//!
//! * `types.rs`: the objects, typed for the fields sluice reads; `compact.rs`: routes as the
//!   controller's informers cache them.
//! * `compile.rs`: which classes and Gateways are ours, which routes attach to which
//!   listeners (`attach.rs`: `parentRefs`, `allowedRoutes`, host name intersection), and
//!   each rule's matches, filters and backends as [`crate::RouteEntry`]s (`rule.rs`;
//!   the `CORS` filter in `cors.rs`, `retry` in `retry.rs`; a GRPCRoute is compiled as the
//!   HTTPRoute it is on the wire, `grpc.rs`; TCPRoute and TLSRoute attach the same way and
//!   route whole connections, `stream.rs`).
//! * `../rules.rs`: the request-time lookup, in the spec's precedence order
//!   (outside this folder: the table uses it, and this folder uses the table).
//! * `status.rs`: the conditions the controller writes back.
//!
//! # Where a Gateway is served
//!
//! `addresses.rs` decides: a Gateway with `spec.addresses`, or one address from
//! `--gateway-address-pool`, is served on sockets of its own (address and listener port);
//! the table keeps its routes by socket ([`crate::RouteTable::gateway_sockets`]) and the
//! proxy binds them. Otherwise sluice's shared HTTP listener serves the Gateways' `HTTP`
//! listeners and its HTTPS listener their `HTTPS` listeners, whatever port a Gateway
//! listener names (the port is echoed in redirects). There, host names compare as for
//! Ingress; an exact host name of either API is looked up before wildcards, the Gateway's
//! before the Ingress's at each step, and the catch-all rules (no host name) come last, the
//! Gateway's first. Within the host name that owns the request there is no fallthrough, as
//! with Ingress: no matching rule means 404.

mod addresses;
pub(crate) mod backend_tls;
pub mod compact;
pub(crate) mod compile;
mod cors;
mod frontend_tls;
mod grpc;
pub(crate) mod hostname;
mod listener_set;
mod retry;
mod rule;
mod status;
mod status_json;
mod stream;
mod types;

pub use addresses::AddressPool;
pub use status::{
    Condition, GatewayStatus, GatewayStatuses, ListenerSetStatus, ListenerStatus, ObjectStatus,
    PolicyStatus, RouteParentStatus, RouteStatus,
};
pub use status_json::StatusJson;
pub use types::*;

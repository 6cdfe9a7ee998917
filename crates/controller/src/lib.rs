//! sluice's controllers: what feeds the data plane from Kubernetes objects.
//!
//! - [`sources::IngressInformers`]: the kinds the controller reads (Ingress,
//!   IngressClass, Service, EndpointSlice or Endpoints, TLS Secret, and the Gateway API's
//!   GatewayClass, Gateway, HTTPRoute, ReferenceGrant with Namespaces when served) as
//!   informers, from a cluster or from a directory of manifests ([`manifest_dir`]).
//! - [`rebuild::Rebuilder`]: every change enqueues one coalesced rebuild; the worker compiles
//!   the stores ([`sluice_routing::compile`]) and swaps the table into the proxy.
//! - [`serve`]: `sluice serve --manifests DIR`, standalone mode.
//! - [`migrate`]: `sluice migrate`, what sluice would make of existing (ingress-nginx)
//!   Ingresses.
//! - [`migrate_gateway`]: `sluice migrate --to gateway-api`, the Gateway API objects that
//!   say what those Ingresses say, and what could not be carried.
//! - [`explain`]: `sluice explain URL`, which rule a request matches and why the others
//!   do not, from a running sluice's admin port or a directory of manifests.
//! - [`cluster`]: `sluice controller`, on Kubernetes: leader election, Ingress and Gateway
//!   API status ([`cluster::gateway_status`]), Events.
//! - [`admission`]: the validating admission webhook's decision: an incoming Ingress or
//!   HTTPRoute compiled against the current objects ([`cluster::webhook`] serves it).
//! - [`projection`]: what the controller caches of Services, endpoints and Secrets (the
//!   fields routing reads).
//! - [`control`]: the control plane's own runtime; none of the above runs on a proxy worker.

#![forbid(unsafe_code)]

pub mod admission;
mod catch_up;
pub mod client;
pub mod cluster;
pub mod control;
pub mod cpu_wait;
pub mod diagnostics;
pub mod exit_status;
pub mod explain;
pub mod manifest_dir;
#[cfg(test)]
mod manifest_fuzz;
pub mod migrate;
pub mod migrate_gateway;
pub mod projection;
pub mod rebuild;
pub mod serve;
pub mod sources;
mod status_only;
pub use status_only::StatusChanges;

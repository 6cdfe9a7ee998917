//! The Ingress compiler: Kubernetes Ingresses with ingress-nginx's annotations, lowered into
//! the route IR the Gateway API compiler ([`crate::gateway`]) produces too ([`crate::rules`]
//! rule sets of [`crate::RouteEntry`]s in one [`crate::RouteTable`]).
//!
//! `class` (is this Ingress ours?), `annotations/`
//! (a file per annotation family, into a [`crate::Policy`]), `compile` (claims, conflicts,
//! backends, the table).

pub(crate) mod annotations;
pub(crate) mod class;
pub(crate) mod compile;
pub mod config_map;
mod global_auth;

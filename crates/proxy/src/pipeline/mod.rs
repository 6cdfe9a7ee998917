//! The phases every request passes, whichever front end read it, in this order:
//!
//! 1. `admit`: what a well-formed head may still not ask for, and the path as nginx
//!    normalises it before matching.
//! 2. `route`: the request to a route entry and a backend of the current snapshot (one
//!    atomic load), a canary or a weighted split drawn once.
//! 3. `decision`: the route's own answers (`route_policy`), its fixed status, the rewrite,
//!    the rate limits (`rate_limit`) and the response fields: answer now, or forward.
//! 4. `auth`: the external auth service (`auth-url`), when the route has one.
//! 5. The upstream request: `affinity` picks a preferred endpoint; `header_policy` decides
//!    which fields cross, both directions; `mirror` sends copies.
//! 6. The upstream step ([`upstream`](crate::upstream)), and the custom-error intercept.

pub(crate) mod admit;
pub(crate) mod affinity;
pub(crate) mod auth;
pub(crate) mod decision;
pub(crate) mod header_policy;
pub(crate) mod mirror;
pub(crate) mod rate_limit;
pub(crate) mod route;
pub(crate) mod route_policy;

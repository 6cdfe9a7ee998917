//! Front ends: they read requests from clients and write the answers; everything between
//! is the [`pipeline`](crate::pipeline).
//!
//! `listener` accepts, reads a PROXY protocol header (`proxy_protocol`), terminates TLS
//! (`tls`) and picks a front end: `http1`, the proxy's own HTTP/1.1 loop for plain bodiless
//! requests (the head parsed in place by `http::request_head`, `response_out` writes the
//! answer), or
//! `hyper_service`, for what hyper reads (HTTP/2, bodies, upgrades). `activity` bounds how
//! long a write to the client may wait; `websocket` relays an upgraded connection;
//! `side_wake` polls a connection's drain and idle watchers without polling them per wake.

pub(crate) mod activity;
pub(crate) mod client_auth;
pub(crate) mod datagram;
pub(crate) mod http1;
pub(crate) mod hyper_service;
pub(crate) mod listener;
#[cfg(test)]
mod parser_fuzz;
pub(crate) mod prefixed;
pub(crate) mod proxy_protocol;
pub(crate) mod response_out;
pub(crate) mod side_wake;
pub(crate) mod stream;
pub(crate) mod tls;
pub(crate) mod websocket;

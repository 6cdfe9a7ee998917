//! An echo backend: answers every request with JSON describing what it received.
//!
//! `sluice-echo` is the backend used by sluice's tests, benchmarks and examples.
//! It speaks HTTP/1.1 (and 1.0) and h2c (HTTP/2 with prior knowledge) on the same
//! port, upgrades WebSocket requests into an echo loop, and offers a few special
//! paths that make a proxy's behaviour observable:
//!
//! | path           | response                                                        |
//! |----------------|-----------------------------------------------------------------|
//! | any            | `200`, JSON [`EchoReport`] describing the request               |
//! | `/status/NNN`  | status `NNN` with the JSON report (no body for 204/304)         |
//! | `/bytes/N`     | `N` bytes of `a..z` repeated, streamed in 64 KiB chunks         |
//! | `/delay/MS`    | the JSON report after `MS` milliseconds (capped at [`MAX_DELAY`]) |
//!
//! Every response carries `x-echo-pod: <pod>` so a caller can tell which
//! replica answered without parsing the body. Request bodies are counted while
//! streaming, never buffered, so multi-megabyte uploads use constant memory.
//!
//! Run it in-process with [`serve`] (your own listener and shutdown signal) or
//! [`EchoServer::start`] (binds, spawns, and shuts down on drop), or as the
//! `sluice-echo` binary.

#![forbid(unsafe_code)]

mod body;
mod conn;
mod handler;
mod identity;
mod lifecycle;
mod reply;
mod report;
mod running;
mod server;
mod websocket;

pub use handler::{MAX_DELAY, POD_HEADER};
pub use identity::{Identity, default_pod_name};
pub use report::EchoReport;
pub use running::EchoServer;
pub use server::{DRAIN_TIMEOUT, serve};

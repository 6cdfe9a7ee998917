//! The servers a proxy runs: thread-per-core `workers` (each its own runtime and sockets,
//! accepting through the [front ends](crate::front)) and the `admin` listener (`/metrics`,
//! `/healthz`, `/readyz`, `/api/v1/*` and the `dashboard`). `lib.rs` starts them.

pub(crate) mod admin;
pub(crate) mod dashboard;
pub(crate) mod workers;

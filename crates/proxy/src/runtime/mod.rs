//! Threads and lifecycle: thread-per-core `workers` with their own runtimes and sockets
//! (`bind`), the sockets of Gateways with addresses of their own (`gateway_sockets`),
//! per-thread state (`shard`), and the graceful `shutdown` (drain, then force).

pub(crate) mod bind;
pub(crate) mod gateway_sockets;
pub(crate) mod shard;
pub(crate) mod shutdown;

//! Threads and lifecycle: thread-per-core `workers` with their own runtimes and sockets,
//! per-thread state (`shard`), and the graceful `shutdown` (drain, then force).

pub(crate) mod shard;
pub(crate) mod shutdown;
pub(crate) mod workers;

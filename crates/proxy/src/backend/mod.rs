//! What the proxy keeps per backend across requests: endpoint choice (`balancer`: round
//! robin, EWMA, consistent hashing, health; its endpoints' state found by address in
//! `endpoint_index` from one table to the next), idle upstream connections (`pool`, per worker
//! thread) and the client TLS settings of HTTPS and gRPC backends (`tls`). The routing
//! snapshot holds one of each per backend; the upstream step (`upstream/`) uses them.

pub(crate) mod balancer;
pub(crate) mod cert_check;
pub(crate) mod endpoint_index;
pub(crate) mod pool;
pub(crate) mod subject_alt_names;
pub(crate) mod tls;
pub(crate) mod verify_depth;

//! Collections whose copies share their contents, for state that is copied whole and
//! changed a little at a time.
//!
//! - [`ChunkedVec`]: a vector in shared chunks of 128 items. The routing table's entries
//!   and backends are kept in them (an incremental compile starts from a copy of the last
//!   table), and so is an informer store's listing (a listing handed to the route compiler
//!   after each change copies the chunks' pointers, not 10,000 objects' reference counts).

#![forbid(unsafe_code)]

mod chunked_vec;

pub use chunked_vec::{CHUNK, ChunkedVec, Iter};

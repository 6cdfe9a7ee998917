//! Collections whose copies share their contents, for state that is copied whole and
//! changed a little at a time.
//!
//! - [`ChunkedVec`]: a vector in shared chunks of 128 items. The routing table's entries
//!   and backends are kept in them (an incremental compile starts from a copy of the last
//!   table), and so is an informer store's listing (a listing handed to the route compiler
//!   after each change copies the chunks' pointers, not 10,000 objects' reference counts).
//! - [`SortedChunks`]: a list kept sorted by a key, in shared chunks that split as they
//!   grow: the route compiler's route statuses, copied after every change of one route.

#![forbid(unsafe_code)]

mod chunked_vec;
mod sorted_chunks;

pub use chunked_vec::{CHUNK, ChunkedVec, Iter};
pub use sorted_chunks::{SortedChunks, SortedIter};

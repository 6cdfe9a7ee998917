//! Collections whose copies share their contents: what lets an incremental compile start
//! from a copy of the previous table, and change a few of its entries, in time that does
//! not grow with the table (a copy of a 10,000-host table copies some 700 pointers, not
//! 50,000 entries and 10,000 host names).
//!
//! - [`ChunkedVec`]: a vector in shared chunks (route entries, backends); state derived
//!   from one is carried over chunk by chunk ([`ChunkedVec::derive`]).
//! - `ShardedMap`: a map from names in shared shards (host names, SNI names).

mod sharded_map;

pub(crate) use sharded_map::ShardedMap;
pub use sluice_persistent::ChunkedVec;

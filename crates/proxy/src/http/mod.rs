//! HTTP messages as the proxy reads and writes them, below every phase: the request head
//! parsed in place (`request_head`), a request's fields whichever front end parsed them
//! (`request_fields`), the upstream response head (`response_head`), and which fields cross
//! the proxy in each direction and how (`header_policy`: hop-by-hop fields, forwarding
//! headers, framing).

pub(crate) mod header_policy;
pub(crate) mod request_fields;
pub(crate) mod request_head;
pub(crate) mod response_head;

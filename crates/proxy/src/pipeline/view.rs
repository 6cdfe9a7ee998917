//! What the pipeline reads of a request, whichever front end parsed it: the own HTTP/1.1
//! loop's in-place head (`PlainRequest` in `front::http1`) or a request hyper has read
//! (`HyperRequest` in `front::hyper_service`). Every phase reads through this trait, so
//! each phase is written once.

use crate::http::header_policy::Fields as _;
use crate::http::header_policy::UpstreamRequest;
use crate::http::request_fields::RequestFields;
use crate::pipeline::admit::Facts;

/// A request head as the pipeline sees it: a copyable reference to a head parsed by a
/// front end, whose parts live for `'a`. (No associated types: a future that holds a
/// projection of a trait with a lifetime parameter across an await cannot be proven
/// `Send` by the compiler; [`RequestFields`] is one concrete type instead.)
pub(crate) trait RequestView<'a>: Copy + Send + Sync + 'a {
    /// The method.
    fn method(self) -> &'a str;
    /// The host the client asked for (`Host`, or `:authority` for HTTP/2), as sent.
    fn host(self) -> &'a str;
    /// The request target's path and query, as sent.
    fn target(self) -> &'a str;
    /// The target's path, as sent (before normalisation).
    fn path(self) -> &'a str {
        let target = self.target();
        target.split_once('?').map_or(target, |(path, _)| path)
    }
    /// The target's query, if any.
    fn query(self) -> Option<&'a str> {
        self.target().split_once('?').map(|(_, query)| query)
    }
    /// The first value of field `name` (any case).
    fn field(self, name: &[u8]) -> Option<&'a [u8]>;
    /// Every field, in order.
    fn fields(self) -> RequestFields<'a>;
    /// What admission checks.
    fn facts(self) -> Facts<'a, impl Iterator<Item = &'a [u8]>>;
    /// The head to send upstream, before the route's edits.
    fn upstream_request(self) -> UpstreamRequest<'a, RequestFields<'a>>;
    /// The body's length as declared by `Content-Length` (0 when none).
    fn declared_length(self) -> u64 {
        self.field(b"content-length")
            .and_then(|v| std::str::from_utf8(v).ok())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    }
    /// GET, HEAD, OPTIONS or TRACE: safe to send again after a failure.
    fn idempotent(self) -> bool {
        matches!(self.method(), "GET" | "HEAD" | "OPTIONS" | "TRACE")
    }
    /// A gRPC request (`content-type: application/grpc`, `application/grpc+proto`, ...).
    fn grpc(self) -> bool {
        self.field(b"content-type")
            .is_some_and(|v| v.starts_with(b"application/grpc"))
    }
    /// The values of the `Cookie` fields.
    fn cookies(self) -> impl Iterator<Item = &'a [u8]> {
        self.fields()
            .iter()
            .filter(|(name, _)| name.eq_ignore_ascii_case(b"cookie"))
            .map(|(_, value)| value)
    }
}

/// A view's fields as the routing crate looks them up (header matches).
pub(crate) struct ViewHeaders<'a, V>(pub(crate) V, pub(crate) std::marker::PhantomData<&'a ()>);

impl<'a, V: RequestView<'a>> sluice_routing::HeaderLookup for ViewHeaders<'a, V> {
    fn header(&self, name: &str) -> Option<&[u8]> {
        self.0.field(name.as_bytes())
    }
}

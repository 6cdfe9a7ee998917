//! A request as routing sees it: what host, path and Gateway API rules match on.

/// A request as [`crate::RouteTable::route_request`] sees it: what Gateway API rules match on.
pub struct RequestInfo<'a> {
    /// Arrived on the HTTPS listener (Gateway `HTTPS` listeners) rather than HTTP.
    pub https: bool,
    /// The socket it arrived on when that is a Gateway's own (see
    /// [`crate::RouteTable::gateway_sockets`]): only that Gateway's routes answer there.
    /// `None`: the proxy's shared listeners (Ingresses and Gateways without addresses).
    pub listener: Option<std::net::SocketAddr>,
    /// Host header or `:authority`, as received (see [`crate::RouteTable::route`]).
    pub host: &'a str,
    /// The path, without query, as received.
    pub path: &'a str,
    /// The query, without `?` (empty for none), as received.
    pub query: &'a str,
    /// The method, e.g. `GET`.
    pub method: &'a str,
    /// The request's header fields.
    pub headers: &'a dyn HeaderLookup,
}

/// Request header lookup for [`RequestInfo`].
pub trait HeaderLookup {
    /// The value of the first field named `name` (given in lower case), if any.
    fn header(&self, name: &str) -> Option<&[u8]>;
}

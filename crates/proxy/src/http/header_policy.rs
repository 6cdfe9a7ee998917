//! The one header policy: what crosses the proxy in each direction, and what the proxy adds.
//!
//! Both front ends (the own HTTP/1.1 loop and hyper's HTTP/1.1 + HTTP/2) and the upstream
//! response parser ask this module, so a rule fixed here is fixed everywhere:
//!
//! * Hop-by-hop fields (RFC 9110 §7.6.1) never cross: `Connection`, `Keep-Alive`,
//!   `Proxy-Connection`, `TE` (except `trailers`), `Trailer`, `Transfer-Encoding`, `Upgrade`
//!   (except a WebSocket being relayed), and every field a `Connection` header names, except
//!   a message's own framing (`Content-Length`, `Transfer-Encoding`) and `Host`, which a
//!   hostile peer must not be able to strip.
//! * Forwarding fields (`X-Forwarded-For`, `X-Real-IP`, `X-Forwarded-Proto/-Host/-Port`,
//!   `Forwarded`) are the proxy's own: a client's values are replaced unless the client is a
//!   trusted proxy (`--trusted-proxies`), as ingress-nginx does without
//!   `use-forwarded-headers`.
//! * Request fields whose names contain `_` are dropped unless `--allow-underscore-headers`
//!   (nginx `underscores_in_headers off`): some frameworks map `X_User` and `X-User` to the
//!   same variable, which lets a client smuggle a value past a check on the other spelling.
//! * `Via` gets this proxy's id appended towards the upstream, which is how a request that
//!   comes back to the same proxy is recognised (admission).
//!
//! Pure: names and values in, bytes out. [`encode_request_head`] is the only upstream
//! request head encoder; fields come in as `(name, value)` byte pairs, from a header map or
//! straight from the client's read buffer.

use std::net::IpAddr;

use http::HeaderValue;

use crate::config::Cidr;

/// What a request field is to the proxy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RequestField {
    /// `Host`: written first, from the routed host.
    Host,
    /// `Content-Length`: framing, decided again by the proxy.
    ContentLength,
    /// `Transfer-Encoding`: framing, decided again by the proxy.
    TransferEncoding,
    /// `Connection`: hop-by-hop; its tokens say what else is.
    Connection,
    /// `TE`: only `trailers` may cross.
    Te,
    /// `Upgrade`: only crosses while a WebSocket upgrade is relayed.
    Upgrade,
    /// `Expect`: answered by the front end, never forwarded.
    Expect,
    /// `Cookie`: HTTP/2 splits it; joined for an HTTP/1.1 upstream.
    Cookie,
    /// `X-Forwarded-For`.
    ForwardedFor,
    /// `X-Real-IP`.
    RealIp,
    /// `X-Forwarded-Proto`.
    ForwardedProto,
    /// `X-Forwarded-Host`.
    ForwardedHost,
    /// `X-Forwarded-Port`.
    ForwardedPort,
    /// `X-Forwarded-Prefix`.
    ForwardedPrefix,
    /// `Forwarded` (RFC 7239).
    Forwarded,
    /// `Via`.
    Via,
    /// `Keep-Alive`, `Proxy-Connection`, `Trailer`: hop-by-hop.
    HopByHop,
    /// Anything else: end-to-end.
    Other,
}

/// Classifies a request field name (any case).
pub(crate) fn request_field(name: &[u8]) -> RequestField {
    let is = |known: &str| name.eq_ignore_ascii_case(known.as_bytes());
    match name.len() {
        2 if is("te") => RequestField::Te,
        3 if is("via") => RequestField::Via,
        4 if is("host") => RequestField::Host,
        6 if is("cookie") => RequestField::Cookie,
        6 if is("expect") => RequestField::Expect,
        7 if is("upgrade") => RequestField::Upgrade,
        7 if is("trailer") => RequestField::HopByHop,
        9 if is("forwarded") => RequestField::Forwarded,
        9 if is("x-real-ip") => RequestField::RealIp,
        10 if is("connection") => RequestField::Connection,
        10 if is("keep-alive") => RequestField::HopByHop,
        14 if is("content-length") => RequestField::ContentLength,
        15 if is("x-forwarded-for") => RequestField::ForwardedFor,
        16 if is("x-forwarded-host") => RequestField::ForwardedHost,
        16 if is("x-forwarded-port") => RequestField::ForwardedPort,
        16 if is("proxy-connection") => RequestField::HopByHop,
        17 if is("transfer-encoding") => RequestField::TransferEncoding,
        17 if is("x-forwarded-proto") => RequestField::ForwardedProto,
        18 if is("x-forwarded-prefix") => RequestField::ForwardedPrefix,
        _ => RequestField::Other,
    }
}

/// What a response field is to the proxy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ResponseField {
    /// `Content-Length`: framing; kept where it describes the body the client gets.
    ContentLength,
    /// `Transfer-Encoding`: framing, decided again for the client.
    TransferEncoding,
    /// `Connection`: hop-by-hop.
    Connection,
    /// `Upgrade`: only on a 101.
    Upgrade,
    /// `Keep-Alive`, `Proxy-Connection`, `TE`, `Trailer`: hop-by-hop.
    HopByHop,
    /// `Date`.
    Date,
    /// Anything else: end-to-end.
    Other,
}

/// Classifies a response field name (any case).
pub(crate) fn response_field(name: &[u8]) -> ResponseField {
    let is = |known: &str| name.eq_ignore_ascii_case(known.as_bytes());
    match name.len() {
        2 if is("te") => ResponseField::HopByHop,
        4 if is("date") => ResponseField::Date,
        7 if is("upgrade") => ResponseField::Upgrade,
        7 if is("trailer") => ResponseField::HopByHop,
        10 if is("connection") => ResponseField::Connection,
        10 if is("keep-alive") => ResponseField::HopByHop,
        14 if is("content-length") => ResponseField::ContentLength,
        16 if is("proxy-connection") => ResponseField::HopByHop,
        17 if is("transfer-encoding") => ResponseField::TransferEncoding,
        _ => ResponseField::Other,
    }
}

/// Removes the hop-by-hop fields of a response that hyper's client read (the fields its
/// `Connection` names too, RFC 9110 §7.6.1); framing is decided again for the client.
pub(crate) fn drop_hop_by_hop(headers: &mut http::HeaderMap) {
    let named: Vec<http::HeaderName> = headers
        .get_all(http::header::CONNECTION)
        .iter()
        .flat_map(|v| tokens(v.as_bytes()))
        .filter(|name| removable_by_connection(name))
        .filter_map(|name| http::HeaderName::from_bytes(name).ok())
        .collect();
    for name in named {
        headers.remove(name);
    }
    let hop: Vec<http::HeaderName> = headers
        .keys()
        .filter(|name| {
            !matches!(
                response_field(name.as_str().as_bytes()),
                ResponseField::Other | ResponseField::Date | ResponseField::ContentLength
            )
        })
        .cloned()
        .collect();
    for name in hop {
        headers.remove(name);
    }
}

/// The tokens of `Connection` headers, summed up.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ConnectionOptions {
    /// `close`.
    pub(crate) close: bool,
    /// `keep-alive`.
    pub(crate) keep_alive: bool,
    /// `upgrade`.
    pub(crate) upgrade: bool,
    /// Some token names another field, which is then hop-by-hop too.
    pub(crate) names_fields: bool,
}

impl ConnectionOptions {
    /// Adds the tokens of one `Connection` value.
    pub(crate) fn add(&mut self, value: &[u8]) {
        for token in tokens(value) {
            if token.eq_ignore_ascii_case(b"close") {
                self.close = true;
            } else if token.eq_ignore_ascii_case(b"keep-alive") {
                self.keep_alive = true;
            } else if token.eq_ignore_ascii_case(b"upgrade") {
                self.upgrade = true;
            } else if removable_by_connection(token) {
                self.names_fields = true;
            }
        }
    }
}

/// The comma-separated tokens of a list value, trimmed, empty ones skipped.
pub(crate) fn tokens(value: &[u8]) -> impl Iterator<Item = &[u8]> {
    value
        .split(|&b| b == b',')
        .map(<[u8]>::trim_ascii)
        .filter(|t| !t.is_empty())
}

/// Whether a field named by `Connection` is removed. A message's framing and `Host` are
/// not: a peer listing `Connection: Content-Length` must not leave a body unframed (the
/// next message on the connection would be read from the middle of this one).
fn removable_by_connection(name: &[u8]) -> bool {
    let is = |known: &str| name.eq_ignore_ascii_case(known.as_bytes());
    !(is("content-length")
        || is("transfer-encoding")
        || is("host")
        || is("close")
        || is("keep-alive")
        || is("upgrade"))
}

/// The field names that `Connection` values in `fields` make hop-by-hop.
pub(crate) fn connection_named<'a>(
    fields: impl Iterator<Item = (&'a [u8], &'a [u8])>,
) -> Vec<&'a [u8]> {
    let mut named = Vec::new();
    for (name, value) in fields {
        if name.eq_ignore_ascii_case(b"connection") {
            named.extend(tokens(value).filter(|t| removable_by_connection(t)));
        }
    }
    named
}

/// Whether a `TE` value only says `trailers` (the one value a proxy may forward).
pub(crate) fn te_trailers_only(value: &[u8]) -> bool {
    tokens(value).all(|t| t.eq_ignore_ascii_case(b"trailers"))
}

/// Whether an `Upgrade` value asks for WebSocket, the only protocol relayed: a tunnel for
/// anything else (`h2c`, unknown tokens) would let a backend turn a routed path into a raw
/// pipe past the path rules.
pub(crate) fn is_websocket_upgrade(value: &[u8]) -> bool {
    let mut protocols = tokens(value);
    let first = protocols.next();
    first.is_some_and(|p| {
        let name = p.split(|&b| b == b'/').next().unwrap_or(p);
        name.eq_ignore_ascii_case(b"websocket")
    }) && protocols.next().is_none()
}

/// How the proxy treats forwarding fields and odd names; one per routing table (the
/// ConfigMap's keys can change it).
#[derive(Debug, Clone)]
pub(crate) struct HeaderPolicy {
    /// Peers whose forwarding fields are believed (nginx `set_real_ip_from`).
    pub(crate) trusted: Vec<Cidr>,
    /// A trusted peer's `X-Forwarded-Proto/-Host/-Port` are believed too (ingress-nginx
    /// `use-forwarded-headers`; not with `enable-real-ip` alone).
    pub(crate) believe_fields: bool,
    /// A trusted peer's `X-Forwarded-For` chain goes upstream with the peer appended
    /// (ingress-nginx `compute-full-forwarded-for`); else the upstream gets the client's
    /// address alone.
    pub(crate) full_forwarded_for: bool,
    /// The field a trusted peer names the client in (nginx `real_ip_header`, ingress-nginx
    /// `forwarded-for-header`; default `X-Forwarded-For`).
    pub(crate) forwarded_for: http::HeaderName,
    /// Forward names with `_`.
    pub(crate) allow_underscores: bool,
    /// This proxy's `Via` entry (`1.1 <id>`).
    pub(crate) via: HeaderValue,
    /// The id alone, as matched in a request's `Via`.
    pub(crate) id: Box<[u8]>,
}

impl HeaderPolicy {
    /// The policy for proxy id `id`.
    pub(crate) fn new(trusted: Vec<Cidr>, allow_underscores: bool, id: &str) -> HeaderPolicy {
        let via = HeaderValue::try_from(format!("1.1 {id}"))
            .unwrap_or_else(|_| HeaderValue::from_static("1.1 sluice"));
        HeaderPolicy {
            trusted,
            believe_fields: true,
            full_forwarded_for: true,
            forwarded_for: http::header::HeaderName::from_static("x-forwarded-for"),
            allow_underscores,
            via,
            id: id.as_bytes().into(),
        }
    }

    /// Whether `ip` is a trusted proxy.
    pub(crate) fn trusts(&self, ip: IpAddr) -> bool {
        self.trusted.iter().any(|net| net.contains(ip))
    }

    /// The client's address as nginx's realip module sets `$remote_addr`: for a trusted
    /// `peer`, the rightmost address of its [`HeaderPolicy::forwarded_for`] fields that is
    /// not trusted itself (`real_ip_recursive on`); else, or when the field is absent or
    /// does not parse, the peer.
    pub(crate) fn client_address<'a>(
        &self,
        peer: IpAddr,
        values: impl Iterator<Item = &'a [u8]>,
    ) -> IpAddr {
        if !self.trusts(peer) {
            return peer;
        }
        real_client(values, self)
            .and_then(|entry| std::str::from_utf8(entry).ok()?.parse().ok())
            .unwrap_or(peer)
    }

    /// How many `Via` entries in `values` name this proxy.
    pub(crate) fn own_hops<'a>(&self, values: impl Iterator<Item = &'a [u8]>) -> usize {
        values
            .flat_map(tokens)
            .filter(|entry| {
                // `protocol received-by [comment]`: the second word is the proxy's name.
                let mut words = entry
                    .split(u8::is_ascii_whitespace)
                    .filter(|w| !w.is_empty());
                words.nth(1).is_some_and(|by| by == &*self.id)
            })
            .count()
    }
}

/// What a client connection tells the upstream: computed once per connection.
#[derive(Debug, Clone)]
pub(crate) struct Forwarded {
    /// The client's IP (the peer, or the PROXY protocol source) as a header value.
    pub(crate) client_ip: HeaderValue,
    /// `http` or `https`.
    pub(crate) proto: HeaderValue,
    /// Our listener's port.
    pub(crate) port: HeaderValue,
    /// The client is a trusted proxy: its forwarding fields are believed.
    pub(crate) trusted: bool,
}

impl Forwarded {
    /// Values for a connection from `client` to our listener on `port`.
    pub(crate) fn new(client: IpAddr, tls: bool, port: u16, trusted: bool) -> Forwarded {
        Forwarded {
            client_ip: HeaderValue::try_from(client.to_string()).expect("an IP is a valid value"),
            proto: HeaderValue::from_static(if tls { "https" } else { "http" }),
            port: HeaderValue::from(port),
            trusted,
        }
    }
}

/// How the upstream request's body is framed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Framing {
    /// No body and no length header.
    None,
    /// `Content-Length: n` (also `0` when the client sent an explicit empty body).
    Length(u64),
    /// `Transfer-Encoding: chunked` (length unknown in advance).
    Chunked,
}

/// A request's header fields, in order, as `(name, value)` bytes; walked more than once
/// (forwarding chains and `Connection` names are looked up on the side).
pub(crate) trait Fields<'a>: Copy {
    /// The walk.
    type Iter: Iterator<Item = (&'a [u8], &'a [u8])>;
    /// Starts a walk over the fields.
    fn iter(self) -> Self::Iter;
}

/// A field of a header map as bytes.
fn map_field<'a>((name, value): (&'a http::HeaderName, &'a HeaderValue)) -> (&'a [u8], &'a [u8]) {
    (name.as_str().as_bytes(), value.as_bytes())
}

impl<'a> Fields<'a> for &'a http::HeaderMap {
    type Iter = std::iter::Map<
        http::header::Iter<'a, HeaderValue>,
        fn((&'a http::HeaderName, &'a HeaderValue)) -> (&'a [u8], &'a [u8]),
    >;

    fn iter(self) -> Self::Iter {
        http::HeaderMap::iter(self).map(map_field as fn(_) -> _)
    }
}

/// A request as the upstream should see it, before the policy is applied.
#[derive(Debug, Clone)]
pub(crate) struct UpstreamRequest<'a, F> {
    /// Method, sent as is.
    pub(crate) method: &'a [u8],
    /// Origin-form target.
    pub(crate) target: &'a [u8],
    /// The host the client asked for (empty if none); sent as Host.
    pub(crate) host: &'a [u8],
    /// The client's fields, in order, unedited.
    pub(crate) fields: F,
    /// Some `Connection` field names other fields (they are then left out).
    pub(crate) connection_names: bool,
    /// A WebSocket upgrade is being relayed: keep `Upgrade`, send `Connection: upgrade`.
    pub(crate) websocket: bool,
    /// The client spoke HTTP/2: split `Cookie` fields are joined into one.
    pub(crate) http2: bool,
    /// Body framing chosen by the caller.
    pub(crate) framing: Framing,
    /// Fields the route sets, replacing the client's of the same name.
    pub(crate) set: &'a [(http::HeaderName, HeaderValue)],
    /// Fields the route appends after the client's of the same name (Gateway API
    /// `RequestHeaderModifier.add`, applied after `set`).
    pub(crate) add: &'a [(http::HeaderName, HeaderValue)],
    /// Fields the route removes, whoever set them (`RequestHeaderModifier.remove`, applied
    /// last); the proxy's own forwarding fields are written regardless.
    pub(crate) remove: &'a [http::HeaderName],
    /// The Host the route sends instead of the client's (`upstream-vhost`); the client's
    /// stays in `X-Forwarded-Host`.
    pub(crate) vhost: Option<&'a HeaderValue>,
    /// `X-Forwarded-Prefix` the route sets (a client's is believed only from a trusted
    /// proxy, and only when the route sets none).
    pub(crate) forwarded_prefix: Option<&'a HeaderValue>,
    /// The `Connection` the route sends (`connection-proxy-header`) instead of the proxy's
    /// (none, or `upgrade` for a WebSocket).
    pub(crate) connection: Option<&'a HeaderValue>,
    /// Speak HTTP/1.0 to the upstream (`proxy-http-version: "1.0"`).
    pub(crate) http10: bool,
}

impl<'a, F> UpstreamRequest<'a, F> {
    /// The same request over another form of its fields.
    pub(crate) fn with_fields<G>(self, fields: impl FnOnce(F) -> G) -> UpstreamRequest<'a, G> {
        UpstreamRequest {
            method: self.method,
            target: self.target,
            host: self.host,
            fields: fields(self.fields),
            connection_names: self.connection_names,
            websocket: self.websocket,
            http2: self.http2,
            framing: self.framing,
            set: self.set,
            add: self.add,
            remove: self.remove,
            vhost: self.vhost,
            forwarded_prefix: self.forwarded_prefix,
            connection: self.connection,
            http10: self.http10,
        }
    }
}

/// The client's forwarding fields, kept when the client is trusted.
#[derive(Default)]
struct Believed<'a> {
    proto: Option<&'a [u8]>,
    host: Option<&'a [u8]>,
    port: Option<&'a [u8]>,
}

/// Where the upstream request head goes, field by field: HTTP/1.1 bytes (`Vec<u8>`, the
/// own client's write buffer) or a header map for hyper's clients
/// (`upstream::client::PartsHead`). The header policy is applied once, whatever the sink.
pub(crate) trait HeadSink {
    /// The request line's method and target.
    fn request_line(&mut self, method: &[u8], target: &[u8]);
    /// One field.
    fn field(&mut self, name: &[u8], value: &[u8]);
    /// One field whose value `write` puts together in the given buffer.
    fn field_with(&mut self, name: &[u8], write: impl FnOnce(&mut Vec<u8>));
    /// The end of the head.
    fn end(&mut self);
    /// The request line says HTTP/1.0 (called right after [`HeadSink::request_line`]).
    fn http10(&mut self) {}
}

impl HeadSink for Vec<u8> {
    fn request_line(&mut self, method: &[u8], target: &[u8]) {
        self.extend_from_slice(method);
        self.push(b' ');
        self.extend_from_slice(target);
        self.extend_from_slice(b" HTTP/1.1\r\n");
    }

    fn field(&mut self, name: &[u8], value: &[u8]) {
        put_header(self, name, value);
    }

    fn field_with(&mut self, name: &[u8], write: impl FnOnce(&mut Vec<u8>)) {
        self.extend_from_slice(name);
        self.extend_from_slice(b": ");
        write(self);
        self.extend_from_slice(b"\r\n");
    }

    fn end(&mut self) {
        self.extend_from_slice(b"\r\n");
    }

    fn http10(&mut self) {
        // The request line ends in "HTTP/1.1\r\n": its minor version becomes 0.
        if self.ends_with(b" HTTP/1.1\r\n") {
            let at = self.len() - 3;
            self[at] = b'0';
        }
    }
}

/// Writes the request head for the upstream into `out`: request line, Host (the endpoint's
/// address when the client sent none: RFC 9112 §3.2), the client's end-to-end fields in
/// order, then `X-Forwarded-For`, `X-Real-IP`, `X-Forwarded-Proto/-Host/-Port`, `Via`,
/// `Connection: upgrade` for a WebSocket, and the framing field.
pub(crate) fn encode_request_head<'a, 'f, F, S>(
    request: &UpstreamRequest<'a, F>,
    forwarded: &Forwarded,
    policy: &HeaderPolicy,
    endpoint: std::net::SocketAddr,
    out: &mut S,
) where
    F: Fields<'f>,
    S: HeadSink,
{
    out.request_line(request.method, request.target);
    if request.http10 {
        out.http10();
    }
    if let Some(vhost) = request.vhost {
        out.field(b"host", vhost.as_bytes());
    } else if request.host.is_empty() {
        out.field_with(b"host", |value| {
            use std::io::Write as _;
            let _ = write!(value, "{endpoint}");
        });
    } else {
        out.field(b"host", request.host);
    }
    let named = if request.connection_names {
        connection_named(request.fields.iter())
    } else {
        Vec::new()
    };
    let trusted = forwarded.trusted;
    let fields_trusted = trusted && policy.believe_fields;
    let mut believed = Believed::default();
    let (mut chain, mut cookies, mut via) = (false, false, false);
    for (name, value) in request.fields.iter() {
        match request_field(name) {
            RequestField::Other => {}
            RequestField::Te if te_trailers_only(value) => {}
            RequestField::Upgrade if request.websocket => {}
            RequestField::Cookie if request.http2 => {
                // Joined below: an HTTP/1.1 upstream expects one Cookie field (RFC 9113
                // §8.2.3).
                cookies = true;
                continue;
            }
            RequestField::Cookie => {}
            RequestField::Forwarded if fields_trusted => {}
            RequestField::ForwardedFor => {
                chain |= trusted && policy.full_forwarded_for;
                continue;
            }
            RequestField::Via => {
                via = true;
                continue;
            }
            RequestField::ForwardedProto if fields_trusted => {
                believed.proto.get_or_insert(value);
                continue;
            }
            RequestField::ForwardedHost if fields_trusted => {
                believed.host.get_or_insert(value);
                continue;
            }
            RequestField::ForwardedPort if fields_trusted => {
                believed.port.get_or_insert(value);
                continue;
            }
            RequestField::ForwardedPrefix
                if fields_trusted && request.forwarded_prefix.is_none() => {}
            _ => continue,
        }
        if !policy.allow_underscores && name.contains(&b'_') {
            continue;
        }
        if !named.is_empty() && named.iter().any(|n| n.eq_ignore_ascii_case(name)) {
            continue;
        }
        if !request.set.is_empty()
            && request
                .set
                .iter()
                .any(|(set, _)| set.as_str().as_bytes().eq_ignore_ascii_case(name))
        {
            continue;
        }
        if removed(request.remove, name) {
            continue;
        }
        out.field(name, value);
    }
    for (name, value) in request.set {
        // An empty value removes the field (nginx `proxy_set_header` does not send it).
        if !value.is_empty() && !removed(request.remove, name.as_str().as_bytes()) {
            out.field(name.as_str().as_bytes(), value.as_bytes());
        }
    }
    for (name, value) in request.add {
        if !removed(request.remove, name.as_str().as_bytes()) {
            out.field(name.as_str().as_bytes(), value.as_bytes());
        }
    }
    if let Some(prefix) = request.forwarded_prefix {
        out.field(b"x-forwarded-prefix", prefix.as_bytes());
    }
    if cookies {
        out.field_with(b"cookie", |out| {
            let values = request
                .fields
                .iter()
                .filter(|(name, _)| name.eq_ignore_ascii_case(b"cookie"));
            for (i, (_, value)) in values.enumerate() {
                if i > 0 {
                    out.extend_from_slice(b"; ");
                }
                out.extend_from_slice(value);
            }
        });
    }
    let values_of = |wanted: RequestField| {
        request
            .fields
            .iter()
            .filter(move |(name, _)| request_field(name) == wanted)
            .map(|(_, value)| value)
    };
    // The client behind a trusted peer, read from the configured field (nginx's realip).
    let client_ip = forwarded.client_ip.as_bytes();
    let named_client = |out: &mut Vec<u8>| {
        let values = request
            .fields
            .iter()
            .filter(|(name, _)| {
                policy
                    .forwarded_for
                    .as_str()
                    .as_bytes()
                    .eq_ignore_ascii_case(name)
            })
            .map(|(_, value)| value);
        out.extend_from_slice(real_client(values, policy).unwrap_or(client_ip));
    };
    // A trusted client's chain is kept and the peer appended (`compute-full-forwarded-for`);
    // else the upstream gets the client's address alone (ingress-nginx's `$remote_addr`).
    out.field_with(b"x-forwarded-for", |out| {
        if chain {
            for value in values_of(RequestField::ForwardedFor) {
                out.extend_from_slice(value);
                out.extend_from_slice(b", ");
            }
            out.extend_from_slice(client_ip);
        } else if trusted {
            named_client(out);
        } else {
            out.extend_from_slice(client_ip);
        }
    });
    out.field_with(b"x-real-ip", |out| {
        if trusted {
            named_client(out);
        } else {
            out.extend_from_slice(client_ip);
        }
    });
    let proto = believed.proto.unwrap_or(forwarded.proto.as_bytes());
    out.field(b"x-forwarded-proto", proto);
    out.field(b"x-forwarded-host", believed.host.unwrap_or(request.host));
    let port = believed.port.unwrap_or(forwarded.port.as_bytes());
    out.field(b"x-forwarded-port", port);
    out.field_with(b"via", |out| {
        if via {
            for value in values_of(RequestField::Via) {
                out.extend_from_slice(value);
                out.extend_from_slice(b", ");
            }
        }
        out.extend_from_slice(policy.via.as_bytes());
    });
    if let Some(connection) = request.connection {
        // ingress-nginx `connection-proxy-header`: `proxy_set_header Connection <value>`
        // replaces its `$connection_upgrade`.
        out.field(b"connection", connection.as_bytes());
    } else if request.websocket {
        out.field(b"connection", b"upgrade");
    }
    match request.framing {
        Framing::None => {}
        Framing::Length(n) => out.field(b"content-length", itoa_u64(n, &mut [0; 20])),
        Framing::Chunked => out.field(b"transfer-encoding", b"chunked"),
    }
    out.end();
}

/// Whether `name` (any case) is among the route's removed fields.
pub(crate) fn removed(remove: &[http::HeaderName], name: &[u8]) -> bool {
    !remove.is_empty()
        && remove
            .iter()
            .any(|removed| removed.as_str().as_bytes().eq_ignore_ascii_case(name))
}

/// The client behind a trusted chain: the rightmost `X-Forwarded-For` entry that is not a
/// trusted proxy itself (nginx `real_ip_recursive on`); the leftmost if all are trusted.
/// `None` when an entry is not an address (the chain cannot be believed).
fn real_client<'a>(
    values: impl Iterator<Item = &'a [u8]>,
    policy: &HeaderPolicy,
) -> Option<&'a [u8]> {
    let entries: Vec<&[u8]> = values.flat_map(tokens).collect();
    let mut leftmost = None;
    for entry in entries.iter().rev() {
        let ip: IpAddr = std::str::from_utf8(entry).ok()?.parse().ok()?;
        if !policy.trusts(ip) {
            return Some(entry);
        }
        leftmost = Some(*entry);
    }
    leftmost
}

/// Appends one `name: value` field line.
pub(crate) fn put_header(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    out.extend_from_slice(name);
    out.extend_from_slice(b": ");
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
}

/// `n` in decimal, written into `buf`.
pub(crate) fn itoa_u64(mut n: u64, buf: &mut [u8; 20]) -> &[u8] {
    let mut at = buf.len();
    loop {
        at -= 1;
        buf[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    &buf[at..]
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::{HeaderMap, HeaderName};

    fn map(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(
                HeaderName::from_bytes(k.as_bytes()).unwrap(),
                HeaderValue::from_str(v).unwrap(),
            );
        }
        h
    }

    struct Case {
        method: &'static str,
        headers: HeaderMap,
        host: &'static str,
        websocket: bool,
        http2: bool,
        framing: Framing,
        trusted: Vec<Cidr>,
        underscores: bool,
        set: Vec<(HeaderName, HeaderValue)>,
        add: Vec<(HeaderName, HeaderValue)>,
        remove: Vec<HeaderName>,
        prefix: Option<HeaderValue>,
    }

    impl Case {
        fn new(headers: &[(&str, &str)]) -> Case {
            Case {
                method: "GET",
                headers: map(headers),
                host: "example.com",
                websocket: false,
                http2: false,
                framing: Framing::None,
                trusted: Vec::new(),
                underscores: false,
                set: Vec::new(),
                add: Vec::new(),
                remove: Vec::new(),
                prefix: None,
            }
        }

        /// The encoded head as (request line, header lines in order).
        fn encode(&self) -> (String, Vec<String>) {
            let peer: IpAddr = "10.1.2.3".parse().unwrap();
            let policy = HeaderPolicy::new(self.trusted.clone(), self.underscores, "sluice-t");
            let forwarded = Forwarded::new(peer, true, 8443, policy.trusts(peer));
            let mut connection = ConnectionOptions::default();
            for value in self.headers.get_all("connection") {
                connection.add(value.as_bytes());
            }
            let request = UpstreamRequest {
                method: self.method.as_bytes(),
                target: b"/a?b=1",
                host: self.host.as_bytes(),
                fields: &self.headers,
                connection_names: connection.names_fields,
                websocket: self.websocket,
                http2: self.http2,
                framing: self.framing,
                set: &self.set,
                vhost: None,
                forwarded_prefix: self.prefix.as_ref(),
                add: &self.add,
                remove: &self.remove,
                connection: None,
                http10: false,
            };
            let mut out = Vec::new();
            let endpoint = "10.0.0.1:8080".parse().unwrap();
            encode_request_head(&request, &forwarded, &policy, endpoint, &mut out);
            let text = String::from_utf8(out).unwrap();
            assert!(text.ends_with("\r\n\r\n"), "{text:?}");
            // The head must be one a real parser accepts.
            let mut slots = [httparse::EMPTY_HEADER; 64];
            let mut parsed = httparse::Request::new(&mut slots);
            assert!(parsed.parse(text.as_bytes()).unwrap().is_complete());
            let mut lines = text.trim_end().split("\r\n").map(str::to_owned);
            let first = lines.next().unwrap();
            (first, lines.collect())
        }
    }

    fn names(lines: &[String]) -> Vec<&str> {
        lines.iter().map(|l| l.split(':').next().unwrap()).collect()
    }

    const OURS: [&str; 6] = [
        "x-forwarded-for",
        "x-real-ip",
        "x-forwarded-proto",
        "x-forwarded-host",
        "x-forwarded-port",
        "via",
    ];

    #[test]
    fn gateway_request_header_modifier_order_is_set_add_remove() {
        let field = |n: &str, v: &str| {
            (
                HeaderName::from_bytes(n.as_bytes()).unwrap(),
                HeaderValue::from_str(v).unwrap(),
            )
        };
        let mut case = Case::new(&[
            ("x-set", "client"),
            ("x-add", "client"),
            ("X-Gone", "client"),
            ("x-kept", "client"),
        ]);
        case.set = vec![field("x-set", "route"), field("x-set-gone", "route")];
        case.add = vec![field("x-add", "route"), field("x-add-gone", "route")];
        case.remove = vec![
            HeaderName::from_static("x-gone"),
            HeaderName::from_static("x-set-gone"),
            HeaderName::from_static("x-add-gone"),
        ];
        let (_, lines) = case.encode();
        let ours: Vec<&str> = lines
            .iter()
            .map(String::as_str)
            .filter(|l| {
                l.starts_with("x-") && !l.starts_with("x-forwarded") && !l.starts_with("x-real")
            })
            .collect();
        assert_eq!(
            ours,
            [
                "x-add: client",
                "x-kept: client",
                "x-set: route",
                "x-add: route"
            ]
        );
    }

    #[test]
    fn hop_by_hop_removed_rfc_9110_section_7_6_1() {
        let (line, lines) = Case::new(&[
            ("connection", "close, X-Custom"),
            ("x-custom", "1"),
            ("keep-alive", "timeout=5"),
            ("proxy-connection", "keep-alive"),
            ("te", "gzip"),
            ("trailer", "x"),
            ("transfer-encoding", "chunked"),
            ("content-length", "5"),
            ("expect", "100-continue"),
            ("upgrade", "websocket"),
            ("host", "example.com"),
            ("x-kept", "yes"),
        ])
        .encode();
        assert_eq!(line, "GET /a?b=1 HTTP/1.1");
        let mut expected = vec!["host", "x-kept"];
        expected.extend(OURS);
        assert_eq!(names(&lines), expected);
    }

    #[test]
    fn connection_cannot_remove_framing_or_host() {
        let mut case = Case::new(&[
            ("connection", "Content-Length, Transfer-Encoding, Host, X-A"),
            ("x-a", "1"),
            ("x-b", "2"),
        ]);
        case.method = "POST";
        case.framing = Framing::Length(3);
        let (_, lines) = case.encode();
        assert!(lines.contains(&"content-length: 3".to_owned()), "{lines:?}");
        assert!(lines.contains(&"host: example.com".to_owned()));
        assert!(lines.contains(&"x-b: 2".to_owned()));
        assert!(!lines.iter().any(|l| l.starts_with("x-a")));
    }

    #[test]
    fn only_websocket_upgrades_cross() {
        let mut case = Case::new(&[
            ("connection", "Upgrade"),
            ("upgrade", "websocket"),
            ("te", "trailers"),
        ]);
        case.websocket = true;
        let (_, lines) = case.encode();
        assert!(lines.contains(&"upgrade: websocket".to_owned()));
        assert!(lines.contains(&"connection: upgrade".to_owned()));
        assert!(lines.contains(&"te: trailers".to_owned()));
        let (_, h2c) = Case::new(&[
            ("connection", "Upgrade, HTTP2-Settings"),
            ("upgrade", "h2c"),
        ])
        .encode();
        assert!(
            !h2c.iter()
                .any(|l| l.starts_with("upgrade") || l.starts_with("connection"))
        );
        assert!(is_websocket_upgrade(b"websocket"));
        assert!(is_websocket_upgrade(b"WebSocket"));
        assert!(!is_websocket_upgrade(b"h2c"));
        assert!(!is_websocket_upgrade(b"websocket, h2c"));
        assert!(!is_websocket_upgrade(b""));
    }

    #[test]
    fn untrusted_forwarding_fields_are_replaced() {
        let (_, lines) = Case::new(&[
            ("x-forwarded-for", "1.1.1.1"),
            ("x-forwarded-for", "2.2.2.2"),
            ("x-forwarded-proto", "gopher"),
            ("x-real-ip", "6.6.6.6"),
            ("x-forwarded-host", "evil"),
            ("x-forwarded-port", "1"),
            ("forwarded", "for=1.1.1.1"),
        ])
        .encode();
        assert_eq!(
            lines,
            vec![
                "host: example.com",
                "x-forwarded-for: 10.1.2.3",
                "x-real-ip: 10.1.2.3",
                "x-forwarded-proto: https",
                "x-forwarded-host: example.com",
                "x-forwarded-port: 8443",
                "via: 1.1 sluice-t",
            ]
        );
    }

    #[test]
    fn trusted_proxies_keep_the_chain_like_ingress_nginx_use_forwarded_headers() {
        let mut case = Case::new(&[
            ("x-forwarded-for", "203.0.113.9, 10.9.9.9"),
            ("x-forwarded-proto", "http"),
            ("x-forwarded-host", "public.example"),
            ("x-forwarded-port", "80"),
            ("forwarded", "for=203.0.113.9"),
        ]);
        case.trusted = vec![crate::config::parse_cidr("10.0.0.0/8").unwrap()];
        let (_, lines) = case.encode();
        assert_eq!(
            lines,
            vec![
                "host: example.com",
                "forwarded: for=203.0.113.9",
                "x-forwarded-for: 203.0.113.9, 10.9.9.9, 10.1.2.3",
                // The rightmost address that is not a trusted proxy (real_ip_recursive).
                "x-real-ip: 203.0.113.9",
                "x-forwarded-proto: http",
                "x-forwarded-host: public.example",
                "x-forwarded-port: 80",
                "via: 1.1 sluice-t",
            ]
        );
        // A chain with garbage in it names nobody: the peer is the client.
        let mut junk = Case::new(&[("x-forwarded-for", "not-an-ip")]);
        junk.trusted = case.trusted.clone();
        let (_, lines) = junk.encode();
        assert!(
            lines.contains(&"x-real-ip: 10.1.2.3".to_owned()),
            "{lines:?}"
        );
    }

    #[test]
    fn underscores_dropped_like_nginx_underscores_in_headers_off() {
        let mut case = Case::new(&[("x_user", "admin"), ("x-user", "me")]);
        let (_, lines) = case.encode();
        assert!(!lines.iter().any(|l| l.starts_with("x_user")));
        assert!(lines.contains(&"x-user: me".to_owned()));
        case.underscores = true;
        assert!(case.encode().1.contains(&"x_user: admin".to_owned()));
    }

    #[test]
    fn via_is_appended_and_counted() {
        let (_, lines) = Case::new(&[("via", "1.0 fred, 1.1 p.example (x)")]).encode();
        assert!(lines.contains(&"via: 1.0 fred, 1.1 p.example (x), 1.1 sluice-t".to_owned()));
        let policy = HeaderPolicy::new(Vec::new(), false, "sluice-t");
        let values: [&[u8]; 2] = [b"1.1 sluice-t, 1.1 other", b"HTTP/1.1 sluice-t"];
        assert_eq!(policy.own_hops(values.into_iter()), 2);
    }

    #[test]
    fn cookies_joined_for_http2_only_rfc_9113_section_8_2_3() {
        let mut case = Case::new(&[("cookie", "a=1"), ("cookie", "b=2")]);
        let (_, h1) = case.encode();
        assert!(h1.contains(&"cookie: a=1".to_owned()) && h1.contains(&"cookie: b=2".to_owned()));
        case.http2 = true;
        let (_, h2) = case.encode();
        assert_eq!(h2.iter().filter(|l| l.starts_with("cookie")).count(), 1);
        assert!(h2.contains(&"cookie: a=1; b=2".to_owned()));
    }

    #[test]
    fn framing_and_host() {
        let mut case = Case::new(&[("content-length", "12")]);
        case.method = "POST";
        case.framing = Framing::Length(12);
        let (line, lines) = case.encode();
        assert_eq!(line, "POST /a?b=1 HTTP/1.1");
        assert_eq!(
            lines
                .iter()
                .filter(|l| l.starts_with("content-length"))
                .count(),
            1
        );
        assert!(lines.contains(&"content-length: 12".to_owned()));
        case.framing = Framing::Chunked;
        let (_, lines) = case.encode();
        assert!(lines.contains(&"transfer-encoding: chunked".to_owned()));
        assert!(!lines.iter().any(|l| l.starts_with("content-length")));
        case.framing = Framing::Length(0);
        assert!(case.encode().1.contains(&"content-length: 0".to_owned()));

        // Without a host (HTTP/1.0), the endpoint's address: HTTP/1.1 requires a Host.
        let mut bare = Case::new(&[]);
        bare.host = "";
        let lines = bare.encode().1;
        assert_eq!(lines.iter().filter(|l| l.starts_with("host")).count(), 1);
        assert!(lines.contains(&"host: 10.0.0.1:8080".to_owned()));
    }

    #[test]
    fn route_fields_replace_the_clients_like_proxy_set_header() {
        let mut case = Case::new(&[
            ("X-Team", "evil"),
            ("x-forwarded-prefix", "/evil"),
            ("x-a", "1"),
        ]);
        case.set = vec![(
            HeaderName::from_static("x-team"),
            HeaderValue::from_static("blue"),
        )];
        let (_, lines) = case.encode();
        assert!(lines.contains(&"x-team: blue".to_owned()), "{lines:?}");
        assert!(!lines.iter().any(|l| l.contains("evil")), "{lines:?}");
        case.prefix = Some(HeaderValue::from_static("/shop"));
        let (_, lines) = case.encode();
        assert!(
            lines.contains(&"x-forwarded-prefix: /shop".to_owned()),
            "{lines:?}"
        );
        assert!(lines.contains(&"x-a: 1".to_owned()));
    }

    #[test]
    fn itoa_matches_display() {
        for n in [0, 1, 9, 10, 99, 100, 12345, u64::MAX] {
            assert_eq!(itoa_u64(n, &mut [0; 20]), n.to_string().as_bytes());
        }
    }

    #[test]
    fn classification_is_case_insensitive() {
        assert_eq!(
            request_field(b"X-FORWARDED-FOR"),
            RequestField::ForwardedFor
        );
        assert_eq!(request_field(b"Via"), RequestField::Via);
        assert_eq!(request_field(b"x-other"), RequestField::Other);
        assert_eq!(
            response_field(b"Content-Length"),
            ResponseField::ContentLength
        );
        assert_eq!(response_field(b"TRAILER"), ResponseField::HopByHop);
    }
}

//! The JSON document an echo response carries: a description of the request
//! as the backend saw it (after any proxy in between).

use std::collections::BTreeMap;
use std::net::SocketAddr;

use http::{Version, header, request};
use serde::{Deserialize, Serialize};

use crate::Identity;

/// What the echo backend saw: the body of every non-special response.
///
/// It derives `Deserialize` so tests can parse responses back into it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EchoReport {
    /// The answering instance's service name.
    pub service: String,
    /// The answering instance's pod name.
    pub pod: String,
    /// Request method, e.g. `"GET"`.
    pub method: String,
    /// Request path without the query, e.g. `"/a/b"`.
    pub path: String,
    /// Raw query string without the `?`, if the request had one.
    pub query: Option<String>,
    /// The `Host` header, or the URI authority (HTTP/2 `:authority`).
    pub host: Option<String>,
    /// `"HTTP/1.0"`, `"HTTP/1.1"` or `"HTTP/2"`.
    pub protocol: String,
    /// The TCP peer as `ip:port` (the proxy, when there is one).
    pub peer: String,
    /// Request headers by lowercased name; repeated headers joined with `", "`.
    pub headers: BTreeMap<String, String>,
    /// Number of request body bytes received.
    pub body_bytes: u64,
}

impl EchoReport {
    /// Describes a request from its head, peer and counted body length.
    pub(crate) fn new(
        parts: &request::Parts,
        identity: &Identity,
        peer: SocketAddr,
        body_bytes: u64,
    ) -> Self {
        Self {
            service: identity.service.clone(),
            pod: identity.pod.clone(),
            method: parts.method.as_str().to_owned(),
            path: parts.uri.path().to_owned(),
            query: parts.uri.query().map(str::to_owned),
            host: host(parts),
            protocol: protocol_name(parts.version).to_owned(),
            peer: peer.to_string(),
            headers: headers(&parts.headers),
            body_bytes,
        }
    }
}

/// HTTP/2 carries the host in `:authority` (the URI); HTTP/1 in `Host`.
/// Each falls back to the other so absolute-form or odd requests still report one.
fn host(parts: &request::Parts) -> Option<String> {
    let from_header = || {
        parts
            .headers
            .get(header::HOST)
            .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
    };
    let from_uri = || parts.uri.authority().map(|a| a.as_str().to_owned());
    if parts.version == Version::HTTP_2 {
        from_uri().or_else(from_header)
    } else {
        from_header().or_else(from_uri)
    }
}

/// The protocol name as it would appear on an HTTP/1 request line.
pub(crate) fn protocol_name(version: Version) -> &'static str {
    match version {
        Version::HTTP_09 => "HTTP/0.9",
        Version::HTTP_10 => "HTTP/1.0",
        Version::HTTP_11 => "HTTP/1.1",
        Version::HTTP_2 => "HTTP/2",
        Version::HTTP_3 => "HTTP/3",
        _ => "unknown",
    }
}

/// Header values are bytes on the wire; non-UTF-8 is shown lossily rather than
/// rejected, since reporting what arrived is the whole point.
fn headers(map: &http::HeaderMap) -> BTreeMap<String, String> {
    map.keys()
        .map(|name| {
            let joined = map
                .get_all(name)
                .iter()
                .map(|v| String::from_utf8_lossy(v.as_bytes()))
                .collect::<Vec<_>>()
                .join(", ");
            (name.as_str().to_owned(), joined)
        })
        .collect()
}

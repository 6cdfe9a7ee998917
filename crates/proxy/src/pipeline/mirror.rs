//! Gateway API `RequestMirror`: a copy of a request, fire-and-forget, to one endpoint of
//! each mirror backend of its route.
//!
//! The copy is the upstream head the primary gets (the route's header changes and path
//! rewrite applied, the proxy's forwarding fields added) with the client's original Host.
//! It is encoded before the primary goes out and sent by a task of its own on the same
//! worker runtime: a new connection, the head, the response head read and discarded, the
//! connection closed. The client's request never waits for it and never fails because of
//! it.
//!
//! A request's body is copied only when the pipeline read it whole first (ingress-nginx's
//! `mirror-request-body: on`, nginx's `mirror_request_body`, within the route's body
//! limit): the copy shares those bytes. Other requests with a body count as `skipped`
//! (their body streams to the primary and is not kept). At most [`MAX_IN_FLIGHT`] copies
//! are in flight per process, more are dropped (`dropped`); each copy has the route's
//! header timeout to complete. Every copy is counted in `sluice_mirror_requests_total`.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use sluice_routing::Mirror;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

use crate::http::header_policy::{self, Fields, Forwarded, Framing, HeaderPolicy, UpstreamRequest};
use crate::observe::metrics::{Metrics, MirrorResult};

/// Most mirror copies in flight at once in this process.
pub(crate) const MAX_IN_FLIGHT: usize = 256;

/// Copies in flight now.
static IN_FLIGHT: AtomicUsize = AtomicUsize::new(0);

/// Largest response head read from a mirror before the copy counts as answered anyway.
const MAX_HEAD: usize = 16 * 1024;

/// What a copy needs besides the head.
pub(crate) struct Copying<'a> {
    /// The connection's forwarding values.
    pub(crate) forwarded: &'a Forwarded,
    /// The proxy's header policy.
    pub(crate) policy: &'a HeaderPolicy,
    /// Where copies are counted.
    pub(crate) metrics: &'a Arc<Metrics>,
    /// Connect timeout.
    pub(crate) connect_timeout: Duration,
    /// Bound on the whole copy (connect, send, response head).
    pub(crate) deadline: Duration,
    /// The copies' Host (ingress-nginx `mirror-target`/`mirror-host`); `None`: the
    /// client's.
    pub(crate) host: Option<&'a http::HeaderValue>,
    /// The request's body, read whole, for copies that carry it; `None`: requests with a
    /// body are not copied.
    pub(crate) body: Option<&'a Bytes>,
}

/// Sends copies of `head` to the mirrors whose share draws this request. Returns at once.
pub(crate) fn copy<'a, 'f, F>(mirrors: &[Mirror], head: &UpstreamRequest<'a, F>, with: &Copying<'_>)
where
    F: Fields<'f>,
{
    for mirror in mirrors {
        let drawn = mirror.denominator > 0
            && crate::pipeline::route::roll(mirror.denominator)
                < mirror.numerator.min(mirror.denominator);
        if !drawn {
            continue;
        }
        let body = match head.framing {
            Framing::None | Framing::Length(0) => None,
            // The whole body, exactly as the primary gets it.
            Framing::Length(length) if with.body.is_some_and(|b| b.len() as u64 == length) => {
                with.body.cloned()
            }
            _ => {
                with.metrics.mirror(MirrorResult::Skipped);
                continue;
            }
        };
        let endpoints = &mirror.backend.endpoints;
        if endpoints.is_empty() {
            with.metrics.mirror(MirrorResult::Skipped);
            continue;
        }
        let addr = endpoints[crate::backend::balancer::random_below(endpoints.len())];
        let Some(slot) = Slot::take() else {
            with.metrics.mirror(MirrorResult::Dropped);
            continue;
        };
        let mut copy = head.clone();
        // The mirror sees the client's Host, not the route's `upstream-vhost`/hostname
        // rewrite.
        copy.vhost = with.host;
        let mut bytes = Vec::with_capacity(1024);
        header_policy::encode_request_head(&copy, with.forwarded, with.policy, addr, &mut bytes);
        let metrics = Arc::clone(with.metrics);
        let (connect_timeout, deadline) = (with.connect_timeout, with.deadline);
        tokio::spawn(async move {
            let copy = send(addr, &bytes, body.as_ref(), connect_timeout);
            let sent = tokio::time::timeout(deadline, copy).await;
            let result = match sent {
                Ok(Ok(())) => MirrorResult::Ok,
                Ok(Err(error)) => {
                    tracing::debug!(mirror = %addr, %error, "mirror request failed");
                    MirrorResult::Error
                }
                Err(_elapsed) => {
                    tracing::debug!(mirror = %addr, "mirror request timed out");
                    MirrorResult::Error
                }
            };
            metrics.mirror(result);
            drop(slot);
        });
    }
}

/// One copy: connect, write the head and the body, read until the response head is in
/// (or the mirror closes after answering).
async fn send(
    addr: SocketAddr,
    head: &[u8],
    body: Option<&Bytes>,
    connect_timeout: Duration,
) -> std::io::Result<()> {
    let mut stream = crate::upstream::connect(addr, connect_timeout).await?;
    stream.write_all(head).await?;
    if let Some(body) = body {
        stream.write_all(body).await?;
    }
    let mut buf = BytesMut::with_capacity(1024);
    loop {
        if buf.windows(4).any(|w| w == b"\r\n\r\n") || buf.len() >= MAX_HEAD {
            return Ok(());
        }
        if stream.read_buf(&mut buf).await? == 0 {
            return if buf.is_empty() {
                Err(std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    "mirror closed the connection without answering",
                ))
            } else {
                Ok(())
            };
        }
    }
}

/// One of the [`MAX_IN_FLIGHT`] places, given back when dropped.
struct Slot;

impl Slot {
    fn take() -> Option<Slot> {
        IN_FLIGHT
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < MAX_IN_FLIGHT).then_some(n + 1)
            })
            .ok()
            .map(|_| Slot)
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        IN_FLIGHT.fetch_sub(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copies_in_flight_are_bounded_and_slots_come_back() {
        // The only user of the process-wide count in the unit tests.
        let held: Vec<Slot> = std::iter::from_fn(Slot::take)
            .take(MAX_IN_FLIGHT + 5)
            .collect();
        assert_eq!(held.len(), MAX_IN_FLIGHT);
        assert!(Slot::take().is_none(), "one more than the bound");
        drop(held);
        assert_eq!(IN_FLIGHT.load(Ordering::Acquire), 0);
        assert!(Slot::take().is_some());
    }
}

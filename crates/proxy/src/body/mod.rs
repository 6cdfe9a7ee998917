//! Body types: the request body sent upstream (with the size limit enforced while it
//! streams), the response body sent to the client (which also closes the request's
//! books — metrics, in-flight count, access log — when it ends), and the body of an
//! upstream response as the own HTTP/1.1 client reads it (`upstream`).

pub(crate) mod read_ahead;
pub(crate) mod upstream;

use std::future::Future as _;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use hyper::body::Incoming;

use crate::body::upstream::{Started, UpstreamBody};
use crate::compress::encoder::{Compressing, Failure};
use crate::context::ConnCtx;
use crate::observe::access_log::{LogOutcome, LogRecord};
use crate::observe::metrics::SeriesAt;
use crate::snapshot::SnapshotRef;
use crate::stall::StallTimer;

/// Boxed error type of both bodies.
pub(crate) type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The request body went past `--max-body-bytes` while streaming.
#[derive(Debug, thiserror::Error)]
#[error("request body exceeds the configured limit")]
pub(crate) struct BodyTooLarge;

/// The client sent nothing of its body for `--client-body-timeout`.
#[derive(Debug, thiserror::Error)]
#[error("client body timed out")]
pub(crate) struct ClientBodyTimeout;

/// The body of an upstream request.
#[derive(Debug)]
pub(crate) enum RequestBody {
    /// No body (also used for retries, which only happen for empty bodies).
    Empty,
    /// The client's body, streamed through, failing once it exceeds `remaining` bytes or
    /// stalls for `timeout`.
    Streaming {
        /// The client's body.
        inner: Incoming,
        /// Bytes still allowed; `u64::MAX` when unlimited.
        remaining: u64,
        /// Stall limit between two reads (nginx `client_body_timeout`).
        timeout: Duration,
        /// Runs while a read waits (reset after every frame, so time spent while the
        /// upstream was not asking for more does not count).
        stall: StallTimer,
    },
    /// The whole body, read before the upstream was asked (ingress-nginx
    /// `proxy-request-buffering: "on"`); taken when sent.
    Buffered(Option<Bytes>),
}

impl RequestBody {
    /// Streams `inner` with at most `limit` bytes (`None`: unlimited), each read waiting at
    /// most `timeout`.
    pub(crate) fn streaming(inner: Incoming, limit: Option<u64>, timeout: Duration) -> RequestBody {
        RequestBody::Streaming {
            inner,
            remaining: limit.unwrap_or(u64::MAX),
            timeout,
            stall: StallTimer::default(),
        }
    }
}

impl Body for RequestBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        match self.get_mut() {
            RequestBody::Empty => Poll::Ready(None),
            RequestBody::Buffered(bytes) => Poll::Ready(bytes.take().map(|b| Ok(Frame::data(b)))),
            RequestBody::Streaming {
                inner,
                remaining,
                timeout,
                stall,
            } => {
                let frame = match Pin::new(inner).poll_frame(cx) {
                    Poll::Ready(frame) => frame,
                    Poll::Pending => {
                        ready!(stall.poll_stalled(cx, *timeout));
                        return Poll::Ready(Some(Err(ClientBodyTimeout.into())));
                    }
                };
                stall.progressed();
                Poll::Ready(match frame {
                    Some(Ok(frame)) => {
                        if let Some(data) = frame.data_ref() {
                            let len = data.len() as u64;
                            if len > *remaining {
                                return Poll::Ready(Some(Err(BodyTooLarge.into())));
                            }
                            *remaining -= len;
                        }
                        Some(Ok(frame))
                    }
                    Some(Err(e)) => Some(Err(e.into())),
                    None => None,
                })
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            RequestBody::Empty => true,
            RequestBody::Buffered(bytes) => bytes.is_none(),
            RequestBody::Streaming { inner, .. } => inner.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            RequestBody::Empty => SizeHint::with_exact(0),
            RequestBody::Buffered(bytes) => {
                SizeHint::with_exact(bytes.as_ref().map_or(0, |b| b.len() as u64))
            }
            RequestBody::Streaming { inner, .. } => inner.size_hint(),
        }
    }
}

/// Where a response body comes from.
// Lives inside the response body for its whole life: boxing the upstream variant would
// cost an allocation per proxied response instead.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
enum Source {
    /// Streamed from the upstream connection.
    Upstream(UpstreamBody),
    /// A static page (taken when sent) or nothing.
    Fixed(Option<Bytes>),
    /// A response hyper's client read (HTTPS, HTTP/2 and gRPC backends): data and trailers
    /// pass as they come; a stall longer than `read_timeout` between two frames ends it
    /// (nginx `proxy_read_timeout` / `grpc_read_timeout`).
    Streamed {
        inner: Incoming,
        read_timeout: Duration,
        stall: StallTimer,
    },
}

/// A response body's pace under the route's `limit-rate` (nginx `limit_rate`): pieces of a
/// tenth of a second's worth, each after the time the bytes before it are due.
#[derive(Debug)]
pub(crate) struct Pace {
    limit: sluice_routing::LimitRate,
    started: Instant,
    /// Bytes sent so far.
    sent: u64,
    /// Waiting until the next piece is due.
    sleep: Option<Pin<Box<tokio::time::Sleep>>>,
    /// What is left of the frame being sent.
    rest: Option<Bytes>,
}

impl Pace {
    /// The pace of the route a request took, if it limits the rate.
    fn of(done: &Completion) -> Option<Box<Pace>> {
        let entry = done.entry?;
        let limit = done.snapshot.table.entry(entry).policy.limit_rate?;
        Some(Box::new(Pace {
            limit,
            started: Instant::now(),
            sent: 0,
            sleep: None,
            rest: None,
        }))
    }

    /// Takes the next piece of `data` to send (keeping the rest), counts it, and sets the
    /// wait before the one after.
    fn sent(&mut self, mut data: Bytes, done: &mut Option<Completion>) -> Bytes {
        let piece = self.limit.piece();
        if data.len() > piece {
            self.rest = Some(data.split_off(piece));
        }
        self.sent += data.len() as u64;
        if let Some(done) = done {
            done.bytes += data.len() as u64;
        }
        if let Some(wait) = self.limit.delay(self.sent, self.started.elapsed()) {
            self.sleep = Some(Box::pin(tokio::time::sleep(wait)));
        }
        data
    }
}

/// The upstream sent nothing for the read timeout.
#[derive(Debug, thiserror::Error)]
#[error("upstream read timed out")]
pub(crate) struct UpstreamReadTimeout;

/// The body of every response the proxy sends.
#[derive(Debug)]
pub(crate) struct ResponseBody {
    source: Source,
    /// `limit-rate`: the body's pace, when the route limits it.
    pace: Option<Box<Pace>>,
    /// The body's compression, when the response is compressed.
    compress: Option<Box<Compress>>,
    /// Present until the body ends or is dropped; then the request is accounted for.
    done: Option<Completion>,
}

/// The accounting of one request, run exactly once, when it is dropped (as its response
/// body ends, or when the response is abandoned).
#[derive(Debug)]
pub(crate) struct Completion {
    /// The connection (for metrics and the access log sink).
    pub(crate) ctx: Arc<ConnCtx>,
    /// The snapshot the request was routed with (holds the backend state).
    pub(crate) snapshot: SnapshotRef,
    /// Backend index in the snapshot, if routed.
    pub(crate) backend: Option<usize>,
    /// Route entry index in the snapshot's table, if routed.
    pub(crate) entry: Option<usize>,
    /// The request method as a metrics label index ([`crate::observe::metrics::method_index`]).
    pub(crate) method: u8,
    /// Where [`Completion::count`] counted the request, for its duration.
    pub(crate) series: Option<SeriesAt>,
    /// Request body bytes as declared by Content-Length.
    pub(crate) request_bytes: u64,
    /// Endpoint index whose in-flight count this request holds, if any.
    pub(crate) endpoint: Option<usize>,
    /// When the request head arrived.
    pub(crate) start: Instant,
    /// Response status.
    pub(crate) status: u16,
    /// Body bytes sent so far.
    pub(crate) bytes: u64,
    /// The access log record, when the access log is on.
    pub(crate) log: Option<Box<LogRecord>>,
    /// The `limit-connections` count this request holds, released when it is over.
    pub(crate) limit_slot: Option<usize>,
    /// The request's server span, when it is traced (ended with the books).
    pub(crate) trace: Option<Box<crate::trace::RequestSpan>>,
}

impl Completion {
    /// The books of a request that arrived at `start`, routed with `snapshot`.
    pub(crate) fn new(
        ctx: Arc<ConnCtx>,
        snapshot: SnapshotRef,
        start: Instant,
        log: Option<Box<LogRecord>>,
    ) -> Completion {
        Completion {
            ctx,
            snapshot,
            backend: None,
            entry: None,
            method: 0,
            series: None,
            request_bytes: 0,
            endpoint: None,
            start,
            status: 0,
            bytes: 0,
            log,
            limit_slot: None,
            trace: None,
        }
    }

    /// Records the answer's status, counted in the route's metrics (or as unrouted).
    pub(crate) fn count(&mut self, host: &str, status: u16) {
        let route = match self.snapshot.route_metrics(self.entry, self.backend) {
            Some(route) => route,
            None => self.ctx.shared.metrics.unrouted(),
        };
        self.series = Some(route.count_request(host, self.method, status));
        self.status = status;
    }
}

impl Drop for Completion {
    /// The request is over (its body ended, or it was dropped): count it, release its
    /// endpoint, log it.
    fn drop(&mut self) {
        if let Some(slot) = self.limit_slot {
            self.ctx.shared.limiter.leave(slot);
        }
        let elapsed = self.start.elapsed();
        let backend = self.backend.map(|b| &self.snapshot.backends[b]);
        let route = match self.snapshot.route_metrics(self.entry, self.backend) {
            Some(route) => route,
            None => self.ctx.shared.metrics.unrouted(),
        };
        if let Some(series) = self.series {
            route.observe_duration(series, elapsed);
        }
        route.count_bytes(self.request_bytes, self.bytes);
        let upstream = match (backend, self.endpoint) {
            (Some(state), Some(endpoint)) => {
                state.balancer.release(endpoint);
                Some(state.balancer.get(endpoint).addr)
            }
            _ => None,
        };
        if let Some(span) = self.trace.take() {
            span.end(&crate::trace::Ended {
                status: self.status,
                service: backend.map_or("", |state| state.metrics.service.as_str()),
                upstream,
            });
        }
        if let (Some(record), Some(sink)) = (&self.log, &self.ctx.shared.access_log) {
            sink.write(
                record,
                &LogOutcome {
                    status: self.status,
                    bytes: self.bytes,
                    duration: elapsed,
                    upstream,
                    service: backend.map_or("", |state| state.metrics.service.as_str()),
                    route: self.entry.map(|entry| self.snapshot.table.entry(entry)),
                    backend: self
                        .backend
                        .and_then(|b| self.snapshot.table.backends().get(b))
                        .map(|b| &**b),
                },
            );
        }
    }
}

impl ResponseBody {
    /// The upstream's body: already complete, or streamed from the connection.
    pub(crate) fn upstream(started: Started, done: Completion) -> ResponseBody {
        let source = match started {
            Started::Complete(bytes) => Source::Fixed(bytes),
            Started::Streaming(body) => Source::Upstream(body),
        };
        let pace = Pace::of(&done);
        ResponseBody {
            source,
            pace,
            compress: None,
            done: Some(done),
        }
    }

    /// A response body read by hyper's client, trailers included.
    pub(crate) fn streamed(
        body: Incoming,
        read_timeout: Duration,
        done: Completion,
    ) -> ResponseBody {
        let pace = Pace::of(&done);
        ResponseBody {
            source: Source::Streamed {
                inner: body,
                read_timeout,
                stall: StallTimer::default(),
            },
            pace,
            compress: None,
            done: Some(done),
        }
    }

    /// A fixed body (error page, or empty for `None`).
    pub(crate) fn fixed(bytes: Option<Bytes>, done: Completion) -> ResponseBody {
        ResponseBody {
            source: Source::Fixed(bytes),
            pace: None,
            compress: None,
            done: Some(done),
        }
    }

    /// A fixed body without accounting (admin endpoints).
    pub(crate) fn plain(bytes: Bytes) -> ResponseBody {
        ResponseBody {
            source: Source::Fixed(Some(bytes)),
            pace: None,
            compress: None,
            done: None,
        }
    }

    /// The body compressed by `encoder` (its head says so already).
    pub(crate) fn compressed(mut self, encoder: Option<Compressing>) -> ResponseBody {
        self.compress = encoder.map(|encoder| {
            Box::new(Compress {
                encoder,
                trailers: None,
            })
        });
        self
    }

    fn finish(&mut self) {
        // Dropping the completion accounts for the request.
        self.done = None;
    }
}

impl Drop for ResponseBody {
    fn drop(&mut self) {
        self.finish();
    }
}

impl Body for ResponseBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self.get_mut();
        if let Some(pace) = &mut this.pace {
            if let Some(sleep) = &mut pace.sleep {
                ready!(sleep.as_mut().poll(cx));
                pace.sleep = None;
            }
            if let Some(rest) = pace.rest.take() {
                return Poll::Ready(Some(Ok(Frame::data(pace.sent(rest, &mut this.done)))));
            }
        }
        let frame = match &mut this.compress {
            None => ready!(this.source.poll_frame(cx)),
            Some(compress) => ready!(compress.poll_frame(&mut this.source, cx)),
        };
        if let (Some(pace), Some(Ok(data))) = (&mut this.pace, &frame)
            && data.is_data()
        {
            // Paced: this frame goes out a piece at a time (the rest on the next polls).
            let frame = frame.and_then(|f| f.ok()).and_then(|f| f.into_data().ok());
            let data = frame.unwrap_or_default();
            return Poll::Ready(Some(Ok(Frame::data(pace.sent(data, &mut this.done)))));
        }
        match &frame {
            Some(Ok(frame)) => {
                if let (Some(done), Some(data)) = (&mut this.done, frame.data_ref()) {
                    done.bytes += data.len() as u64;
                }
                // hyper does not poll again once the body says it is over.
                if this.is_end_stream() {
                    this.finish();
                }
            }
            // The end, or an aborted upstream: either way the request is over.
            _ => this.finish(),
        }
        Poll::Ready(frame)
    }

    fn is_end_stream(&self) -> bool {
        if self.pace.as_ref().is_some_and(|p| p.rest.is_some()) {
            return false;
        }
        if let Some(compress) = &self.compress {
            return compress.encoder.is_finished() && compress.trailers.is_none();
        }
        match &self.source {
            Source::Upstream(inner) => inner.is_end_stream(),
            Source::Fixed(bytes) => bytes.is_none(),
            Source::Streamed { inner, .. } => inner.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        if self.compress.is_some() {
            // The compressed length is known at the end only.
            return SizeHint::default();
        }
        match &self.source {
            Source::Upstream(inner) => inner.size_hint(),
            Source::Fixed(Some(bytes)) => SizeHint::with_exact(bytes.len() as u64),
            Source::Fixed(None) => SizeHint::with_exact(0),
            Source::Streamed { inner, .. } => inner.size_hint(),
        }
    }
}

impl Source {
    /// The next frame as the upstream (or the fixed body) gives it.
    fn poll_frame(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        Poll::Ready(match self {
            Source::Upstream(inner) => match ready!(inner.poll_data(cx)) {
                Some(Ok(data)) => Some(Ok(Frame::data(data))),
                Some(Err(e)) => Some(Err(e.into())),
                None => None,
            },
            Source::Fixed(bytes) => bytes.take().map(|b| Ok(Frame::data(b))),
            Source::Streamed {
                inner,
                read_timeout,
                stall,
            } => match Pin::new(inner).poll_frame(cx) {
                Poll::Ready(frame) => {
                    stall.progressed();
                    frame.map(|frame| frame.map_err(BoxError::from))
                }
                Poll::Pending => {
                    ready!(stall.poll_stalled(cx, *read_timeout));
                    tracing::debug!("upstream read timed out");
                    Some(Err(UpstreamReadTimeout.into()))
                }
            },
        })
    }
}

/// A response body being compressed: the data frames go through the encoder; trailers
/// (an HTTP/2 upstream's) end the data and follow the compressed body's end.
#[derive(Debug)]
struct Compress {
    encoder: Compressing,
    /// Trailers that came after the data, sent once the encoder is done.
    trailers: Option<http::HeaderMap>,
}

impl Compress {
    fn poll_frame(
        &mut self,
        source: &mut Source,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let trailers = &mut self.trailers;
        let polled = self.encoder.poll_next(cx, |cx| {
            Poll::Ready(match ready!(source.poll_frame(cx)) {
                Some(Ok(frame)) => match frame.into_data() {
                    Ok(data) => Some(Ok(data)),
                    Err(frame) => {
                        // Trailers end the data.
                        *trailers = frame.into_trailers().ok();
                        None
                    }
                },
                Some(Err(error)) => Some(Err(error)),
                None => None,
            })
        });
        Poll::Ready(match ready!(polled) {
            Some(Ok(data)) => Some(Ok(Frame::data(data))),
            Some(Err(Failure::Upstream(error))) => Some(Err(error)),
            Some(Err(Failure::Encoder(error))) => Some(Err(error.into())),
            None => self.trailers.take().map(|t| Ok(Frame::trailers(t))),
        })
    }
}

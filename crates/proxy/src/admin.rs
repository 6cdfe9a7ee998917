//! The admin server: `/metrics` (Prometheus text), `/healthz` (the process is alive) and
//! `/readyz` (the controller says the table is in sync). Plain HTTP/1.1; meant for loopback
//! or a cluster-internal port, never the public.

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use bytes::Bytes;
use http::header::{CONTENT_TYPE, HeaderValue};
use http::{Method, Request, Response, StatusCode};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use prometheus_client::registry::Registry;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{debug, warn};

use crate::body::ResponseBody;

/// Whether the proxy should receive traffic, as reported by `/readyz`.
///
/// Starts not ready; the controller calls `set_ready(true)` once its first table is in, and
/// the proxy itself turns it off when shutdown begins. Clones share the flag.
#[derive(Clone, Debug, Default)]
pub struct Readiness {
    ready: Arc<AtomicBool>,
}

impl Readiness {
    /// Sets what `/readyz` reports.
    pub fn set_ready(&self, ready: bool) {
        self.ready.store(ready, Ordering::Release);
    }

    /// What `/readyz` reports.
    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Acquire)
    }
}

/// Serves the admin endpoints until `stop` is cancelled.
pub(crate) async fn serve(
    listener: TcpListener,
    registry: Arc<Registry>,
    readiness: Readiness,
    stop: CancellationToken,
) {
    let connections = TaskTracker::new();
    loop {
        let (stream, peer) = tokio::select! {
            () = stop.cancelled() => break,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(error) => {
                    warn!(%error, "admin accept failed");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let registry = Arc::clone(&registry);
        let readiness = readiness.clone();
        let stop = stop.clone();
        connections.spawn(async move {
            let service = service_fn(move |request| {
                let response = respond(&request, &registry, &readiness);
                async move { Ok::<_, Infallible>(response) }
            });
            let connection = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .serve_connection(TokioIo::new(stream), service);
            tokio::pin!(connection);
            tokio::select! {
                result = connection.as_mut() => {
                    if let Err(error) = result {
                        debug!(%peer, %error, "admin connection failed");
                    }
                }
                () = stop.cancelled() => {}
            }
        });
    }
    connections.close();
    connections.wait().await;
}

/// Answers one admin request.
fn respond(
    request: &Request<Incoming>,
    registry: &Registry,
    readiness: &Readiness,
) -> Response<ResponseBody> {
    if request.method() != Method::GET && request.method() != Method::HEAD {
        return text(StatusCode::METHOD_NOT_ALLOWED, "method not allowed\n");
    }
    match request.uri().path() {
        "/metrics" => {
            let mut out = String::with_capacity(16 * 1024);
            if prometheus_client::encoding::text::encode(&mut out, registry).is_err() {
                return text(StatusCode::INTERNAL_SERVER_ERROR, "encoding failed\n");
            }
            let mut response = Response::new(ResponseBody::plain(Bytes::from(out)));
            response.headers_mut().insert(
                CONTENT_TYPE,
                HeaderValue::from_static(
                    "application/openmetrics-text; version=1.0.0; charset=utf-8",
                ),
            );
            response
        }
        "/healthz" => text(StatusCode::OK, "ok\n"),
        "/readyz" if readiness.is_ready() => text(StatusCode::OK, "ready\n"),
        "/readyz" => text(StatusCode::SERVICE_UNAVAILABLE, "not ready\n"),
        _ => text(StatusCode::NOT_FOUND, "not found\n"),
    }
}

fn text(status: StatusCode, body: &'static str) -> Response<ResponseBody> {
    let mut response = Response::new(ResponseBody::plain(Bytes::from_static(body.as_bytes())));
    *response.status_mut() = status;
    response.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}

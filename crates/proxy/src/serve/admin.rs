//! The admin server: `/metrics` (Prometheus text), `/healthz` (the process is alive),
//! `/readyz` (the controller says the table is in sync), the live dashboard at `/` (one
//! self-contained page), its data at `/api/v1/status` (JSON, also for scripts) and
//! `/api/v1/explain?host=H&path=P` (what `sluice explain` prints). Read-only, plain
//! HTTP/1.1; meant for loopback (the default) or a cluster-internal port, never the public.

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
use crate::serve::dashboard::{self, History, SAMPLE_INTERVAL};
use crate::snapshot::TableShared;

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

/// What the admin endpoints read.
#[derive(Clone)]
pub(crate) struct Admin {
    pub(crate) registry: Arc<Registry>,
    pub(crate) readiness: Readiness,
    pub(crate) table: Arc<TableShared>,
    pub(crate) history: Arc<History>,
}

/// Samples the routes' figures for the dashboard every [`SAMPLE_INTERVAL`] until `stop`.
pub(crate) async fn sample(
    table: Arc<TableShared>,
    history: Arc<History>,
    stop: CancellationToken,
) {
    let mut ticks = tokio::time::interval(SAMPLE_INTERVAL);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut last = tokio::time::Instant::now();
    loop {
        tokio::select! {
            () = stop.cancelled() => break,
            now = ticks.tick() => {
                history.sample(&table.current.load(), now.duration_since(last));
                last = now;
            }
        }
    }
}

/// Serves the admin endpoints until `stop` is cancelled.
pub(crate) async fn serve(listener: TcpListener, admin: Admin, stop: CancellationToken) {
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
        let admin = admin.clone();
        let stop = stop.clone();
        connections.spawn(async move {
            let service = service_fn(move |request| {
                let response = respond(&request, &admin);
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
fn respond(request: &Request<Incoming>, admin: &Admin) -> Response<ResponseBody> {
    if request.method() != Method::GET && request.method() != Method::HEAD {
        return text(StatusCode::METHOD_NOT_ALLOWED, "method not allowed\n");
    }
    let readiness = &admin.readiness;
    match request.uri().path() {
        "/" => body(
            StatusCode::OK,
            "text/html; charset=utf-8",
            Bytes::from_static(DASHBOARD.as_bytes()),
        ),
        "/api/v1/status" => {
            let status = dashboard::status(&admin.table, &admin.history);
            body(
                StatusCode::OK,
                "application/json",
                Bytes::from(status.to_string()),
            )
        }
        "/api/v1/explain" => explain(request.uri().query().unwrap_or(""), admin),
        "/metrics" => {
            let mut out = String::with_capacity(16 * 1024);
            if prometheus_client::encoding::text::encode(&mut out, &admin.registry).is_err() {
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

/// The dashboard page: no external assets, it polls `/api/v1/status`.
const DASHBOARD: &str = include_str!("dashboard.html");

/// `/api/v1/explain?host=H&path=P` (`url=http://H/P` also works): the control plane's
/// explanation as text, or 404 when none answers (a bare proxy without a controller).
fn explain(query: &str, admin: &Admin) -> Response<ResponseBody> {
    let mut host = None;
    let mut path = None;
    for pair in query.split('&') {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        let value = percent_decode(value);
        match key {
            "host" => host = Some(value),
            "path" => path = Some(value),
            "url" => {
                let rest = value
                    .strip_prefix("http://")
                    .or_else(|| value.strip_prefix("https://"))
                    .unwrap_or(&value);
                let (h, p) = match rest.find('/') {
                    Some(at) => (&rest[..at], &rest[at..]),
                    None => (rest, "/"),
                };
                let p = p.split(['?', '#']).next().unwrap_or("/");
                host = Some(h.to_owned());
                path = Some(p.to_owned());
            }
            _ => {}
        }
    }
    let Some(host) = host.filter(|h| !h.is_empty()) else {
        return text(
            StatusCode::BAD_REQUEST,
            "give host=H&path=P or url=http://H/P\n",
        );
    };
    let path = path.unwrap_or_else(|| "/".to_owned());
    let explainer = admin
        .table
        .control
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .explainer
        .clone();
    match explainer {
        Some(explain) => body(
            StatusCode::OK,
            "text/plain; charset=utf-8",
            Bytes::from(explain(&host, &path)),
        ),
        None => text(
            StatusCode::NOT_FOUND,
            "no control plane here answers explain\n",
        ),
    }
}

/// Decodes `%XX` escapes and `+` (a query value); invalid escapes stay as they are.
fn percent_decode(value: &str) -> String {
    let bytes = value.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut at = 0;
    while at < bytes.len() {
        match bytes[at] {
            b'+' => out.push(b' '),
            b'%' if at + 3 <= bytes.len() => {
                let hex = std::str::from_utf8(&bytes[at + 1..at + 3])
                    .ok()
                    .and_then(|h| u8::from_str_radix(h, 16).ok());
                if let Some(byte) = hex {
                    out.push(byte);
                    at += 3;
                    continue;
                }
                out.push(b'%');
            }
            other => out.push(other),
        }
        at += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn body(status: StatusCode, content_type: &'static str, bytes: Bytes) -> Response<ResponseBody> {
    let mut response = Response::new(ResponseBody::plain(bytes));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    response
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

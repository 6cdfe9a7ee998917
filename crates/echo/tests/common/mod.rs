//! Shared helpers for the integration tests: an in-process server and small
//! HTTP/1.1 and h2c clients over plain TCP.

#![allow(dead_code)] // each test binary uses a different subset

use std::future::Future;
use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{BodyExt, Empty};
use hyper::body::Body;
use hyper_util::rt::{TokioExecutor, TokioIo};
use sluice_echo::{EchoReport, EchoServer, Identity};
use tokio::net::TcpStream;

/// Upper bound for any single test.
pub const TEST_TIMEOUT: Duration = Duration::from_secs(30);

/// Runs a test body, failing it if it takes longer than [`TEST_TIMEOUT`].
pub async fn bounded<F: Future>(fut: F) -> F::Output {
    tokio::time::timeout(TEST_TIMEOUT, fut)
        .await
        .expect("test timed out")
}

/// Starts an echo server on an ephemeral loopback port.
pub async fn start() -> EchoServer {
    EchoServer::start("127.0.0.1:0", Identity::new("svc", "pod-1"))
        .await
        .expect("start echo server")
}

/// Sends one request over a fresh HTTP/1.1 connection; returns the response
/// with its body collected and the client's local address.
pub async fn http1<B>(addr: SocketAddr, req: Request<B>) -> (Response<Bytes>, SocketAddr)
where
    B: Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let stream = TcpStream::connect(addr).await.expect("connect");
    let local = stream.local_addr().expect("local addr");
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .expect("http1 handshake");
    tokio::spawn(conn);
    let response = sender.send_request(req).await.expect("send request");
    (collect(response).await, local)
}

/// Sends one request over a fresh h2c (prior knowledge) connection.
pub async fn h2c<B>(addr: SocketAddr, req: Request<B>) -> Response<Bytes>
where
    B: Body + Send + Unpin + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let stream = TcpStream::connect(addr).await.expect("connect");
    let (mut sender, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream))
            .await
            .expect("h2 handshake");
    tokio::spawn(conn);
    let response = sender.send_request(req).await.expect("send request");
    collect(response).await
}

/// A bodiless GET with a Host header.
pub fn get(addr: SocketAddr, path_and_query: &str) -> Request<Empty<Bytes>> {
    Request::get(path_and_query)
        .header("host", addr.to_string())
        .body(Empty::new())
        .expect("request")
}

async fn collect(response: Response<hyper::body::Incoming>) -> Response<Bytes> {
    let (parts, body) = response.into_parts();
    let bytes = body.collect().await.expect("response body").to_bytes();
    Response::from_parts(parts, bytes)
}

/// Parses a JSON echo response.
pub fn report(response: &Response<Bytes>) -> EchoReport {
    serde_json::from_slice(response.body()).expect("echo JSON")
}

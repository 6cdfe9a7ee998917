//! HTTP/1.x and h2c behaviour of the echo server, over real loopback sockets.

mod common;

use std::time::{Duration, Instant};

use bytes::Bytes;
use common::{bounded, get, h2c, http1, report, start};
use futures::stream;
use http::{Request, StatusCode};
use http_body_util::{Empty, StreamBody};
use hyper::body::Frame;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// A request body streamed as `chunks` frames of `chunk` bytes each.
fn streamed_body(
    chunks: usize,
    chunk: usize,
) -> StreamBody<impl futures::Stream<Item = Result<Frame<Bytes>, std::convert::Infallible>>> {
    let data = Bytes::from(vec![b'x'; chunk]);
    StreamBody::new(stream::iter(
        (0..chunks).map(move |_| Ok(Frame::data(data.clone()))),
    ))
}

/// Raw HTTP over TCP, for what hyper's client will not send; reads to EOF.
async fn raw(addr: std::net::SocketAddr, request: &[u8]) -> String {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    stream.write_all(request).await.unwrap();
    let mut out = Vec::new();
    stream.read_to_end(&mut out).await.unwrap();
    String::from_utf8_lossy(&out).into_owned()
}

#[tokio::test]
async fn http1_get_reports_request_fields() {
    bounded(async {
        let server = start().await;
        let req = Request::get("/a/b?x=1&y=2")
            .header("host", "example.test")
            .header("x-custom", "Hello")
            .header("x-multi", "one")
            .header("x-multi", "two")
            .body(Empty::<Bytes>::new())
            .unwrap();
        let (response, local) = http1(server.addr(), req).await;

        assert_eq!(response.status(), StatusCode::OK);
        assert_eq!(response.headers()["content-type"], "application/json");
        assert_eq!(response.headers()["x-echo-pod"], "pod-1");
        let r = report(&response);
        assert_eq!(r.service, "svc");
        assert_eq!(r.pod, "pod-1");
        assert_eq!(r.method, "GET");
        assert_eq!(r.path, "/a/b");
        assert_eq!(r.query.as_deref(), Some("x=1&y=2"));
        assert_eq!(r.host.as_deref(), Some("example.test"));
        assert_eq!(r.protocol, "HTTP/1.1");
        assert_eq!(r.peer, local.to_string());
        assert_eq!(r.headers["x-custom"], "Hello");
        assert_eq!(r.headers["x-multi"], "one, two");
        assert_eq!(r.body_bytes, 0);
        server.shutdown().await.unwrap();
    })
    .await;
}

#[tokio::test]
async fn query_is_null_when_absent() {
    bounded(async {
        let server = start().await;
        let (response, _) = http1(server.addr(), get(server.addr(), "/plain")).await;
        let json: serde_json::Value = serde_json::from_slice(response.body()).unwrap();
        assert!(json["query"].is_null());
        assert_eq!(json["path"], "/plain");
    })
    .await;
}

#[tokio::test]
async fn http10_request_reports_protocol() {
    bounded(async {
        let server = start().await;
        let text = raw(server.addr(), b"GET /old HTTP/1.0\r\nHost: h10\r\n\r\n").await;
        assert!(text.starts_with("HTTP/1.0 200"), "{text}");
        let json = &text[text.find("\r\n\r\n").unwrap() + 4..];
        let r: sluice_echo::EchoReport = serde_json::from_str(json).unwrap();
        assert_eq!(r.protocol, "HTTP/1.0");
        assert_eq!(r.host.as_deref(), Some("h10"));
    })
    .await;
}

#[tokio::test]
async fn h2c_prior_knowledge_reports_http2() {
    bounded(async {
        let server = start().await;
        let uri = format!("http://{}/h2/path?q=v", server.addr());
        let req = Request::get(uri)
            .header("x-h2", "yes")
            .body(Empty::<Bytes>::new())
            .unwrap();
        let response = h2c(server.addr(), req).await;
        assert_eq!(response.status(), StatusCode::OK);
        assert_eq!(response.version(), http::Version::HTTP_2);
        assert_eq!(response.headers()["x-echo-pod"], "pod-1");
        let r = report(&response);
        assert_eq!(r.protocol, "HTTP/2");
        assert_eq!(r.path, "/h2/path");
        assert_eq!(r.query.as_deref(), Some("q=v"));
        assert_eq!(r.host, Some(server.addr().to_string()));
        assert_eq!(r.headers["x-h2"], "yes");
    })
    .await;
}

#[tokio::test]
async fn status_path_sets_the_status() {
    bounded(async {
        let server = start().await;
        let (response, _) = http1(server.addr(), get(server.addr(), "/status/418")).await;
        assert_eq!(response.status(), StatusCode::IM_A_TEAPOT);
        assert_eq!(report(&response).path, "/status/418");
    })
    .await;
}

#[tokio::test]
async fn status_204_has_no_body() {
    bounded(async {
        let server = start().await;
        let (response, _) = http1(server.addr(), get(server.addr(), "/status/204")).await;
        assert_eq!(response.status(), StatusCode::NO_CONTENT);
        assert!(response.body().is_empty());
        assert_eq!(response.headers()["x-echo-pod"], "pod-1");
    })
    .await;
}

#[tokio::test]
async fn bad_special_path_arguments_get_400() {
    bounded(async {
        let server = start().await;
        for path in [
            "/status/abc",
            "/status/99",
            "/status/1000",
            "/bytes/x",
            "/delay/-3",
        ] {
            let (response, _) = http1(server.addr(), get(server.addr(), path)).await;
            assert_eq!(response.status(), StatusCode::BAD_REQUEST, "{path}");
            let json: serde_json::Value = serde_json::from_slice(response.body()).unwrap();
            assert!(json["error"].is_string(), "{path}");
        }
    })
    .await;
}

#[tokio::test]
async fn malformed_request_gets_400() {
    bounded(async {
        let server = start().await;
        let text = raw(server.addr(), b"NOT A REQUEST\x01\r\n\r\n").await;
        assert!(text.starts_with("HTTP/1.1 400"), "{text}");
        // And the server is still fine afterwards.
        let (response, _) = http1(server.addr(), get(server.addr(), "/")).await;
        assert_eq!(response.status(), StatusCode::OK);
    })
    .await;
}

#[tokio::test]
async fn bytes_path_returns_exact_count_of_pattern() {
    bounded(async {
        let server = start().await;
        let n = 1_048_576usize;
        let (response, _) = http1(server.addr(), get(server.addr(), &format!("/bytes/{n}"))).await;
        assert_eq!(response.status(), StatusCode::OK);
        assert_eq!(
            response.headers()["content-type"],
            "application/octet-stream"
        );
        assert_eq!(response.headers()["content-length"], n.to_string().as_str());
        let body = response.body();
        assert_eq!(body.len(), n);
        assert!(
            body.iter()
                .enumerate()
                .all(|(i, b)| *b == b'a' + (i % 26) as u8)
        );
    })
    .await;
}

#[tokio::test]
async fn bytes_path_over_h2c() {
    bounded(async {
        let server = start().await;
        let req = Request::get(format!("http://{}/bytes/200000", server.addr()))
            .body(Empty::<Bytes>::new())
            .unwrap();
        let response = h2c(server.addr(), req).await;
        assert_eq!(response.body().len(), 200_000);
    })
    .await;
}

#[tokio::test]
async fn bytes_zero_is_empty() {
    bounded(async {
        let server = start().await;
        let (response, _) = http1(server.addr(), get(server.addr(), "/bytes/0")).await;
        assert_eq!(response.status(), StatusCode::OK);
        assert_eq!(response.headers()["content-length"], "0");
        assert!(response.body().is_empty());
    })
    .await;
}

#[tokio::test]
async fn streamed_10mib_upload_is_counted() {
    bounded(async {
        let server = start().await;
        // 160 x 64 KiB, sent chunked: the server never sees a length up front.
        let req = Request::post("/upload")
            .header("host", "up")
            .body(streamed_body(160, 64 * 1024))
            .unwrap();
        let (response, _) = http1(server.addr(), req).await;
        assert_eq!(response.status(), StatusCode::OK);
        let r = report(&response);
        assert_eq!(r.method, "POST");
        assert_eq!(r.body_bytes, 10_485_760);
        assert_eq!(r.headers["transfer-encoding"], "chunked");
    })
    .await;
}

#[tokio::test]
async fn streamed_10mib_upload_over_h2c_is_counted() {
    bounded(async {
        let server = start().await;
        let req = Request::put(format!("http://{}/upload", server.addr()))
            .body(streamed_body(160, 64 * 1024))
            .unwrap();
        let response = h2c(server.addr(), req).await;
        let r = report(&response);
        assert_eq!(r.method, "PUT");
        assert_eq!(r.body_bytes, 10_485_760);
    })
    .await;
}

#[tokio::test]
async fn delay_path_waits_then_echoes() {
    bounded(async {
        let server = start().await;
        let started = Instant::now();
        let (response, _) = http1(server.addr(), get(server.addr(), "/delay/300")).await;
        assert!(started.elapsed() >= Duration::from_millis(300));
        assert_eq!(response.status(), StatusCode::OK);
        assert_eq!(report(&response).path, "/delay/300");
    })
    .await;
}

#[tokio::test]
async fn keep_alive_connection_serves_several_requests() {
    bounded(async {
        let server = start().await;
        let stream = TcpStream::connect(server.addr()).await.unwrap();
        let local = stream.local_addr().unwrap();
        let (mut sender, conn) =
            hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
                .await
                .unwrap();
        tokio::spawn(conn);
        for i in 0..3 {
            let response = sender
                .send_request(get(server.addr(), &format!("/n/{i}")))
                .await
                .unwrap();
            let body = http_body_util::BodyExt::collect(response.into_body())
                .await
                .unwrap()
                .to_bytes();
            let r: sluice_echo::EchoReport = serde_json::from_slice(&body).unwrap();
            assert_eq!(r.path, format!("/n/{i}"));
            assert_eq!(r.peer, local.to_string());
        }
    })
    .await;
}

#[tokio::test]
async fn shutdown_finishes_in_flight_request_and_refuses_new_ones() {
    bounded(async {
        let server = start().await;
        let addr = server.addr();
        let in_flight = tokio::spawn(async move { http1(addr, get(addr, "/delay/500")).await });
        tokio::time::sleep(Duration::from_millis(100)).await;
        server.shutdown().await.unwrap();
        let (response, _) = in_flight.await.unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        assert!(TcpStream::connect(addr).await.is_err());
    })
    .await;
}

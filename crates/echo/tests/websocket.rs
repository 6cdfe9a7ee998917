//! WebSocket upgrade and echo, with a tokio-tungstenite client.

mod common;

use std::time::Duration;

use common::{bounded, start};
use futures::{SinkExt, StreamExt};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::{Bytes, Message};
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream, connect_async};

type Client = WebSocketStream<MaybeTlsStream<tokio::net::TcpStream>>;

/// Next message that is not a ping/pong.
async fn next_data(ws: &mut Client) -> Message {
    loop {
        match ws.next().await.expect("stream ended").expect("read") {
            Message::Ping(_) | Message::Pong(_) => continue,
            other => return other,
        }
    }
}

#[tokio::test]
async fn echoes_text_and_binary_messages() {
    bounded(async {
        let server = start().await;
        let url = format!("ws://{}/any/path", server.addr());
        let (mut ws, response) = connect_async(url).await.expect("websocket handshake");
        assert_eq!(response.status(), 101);
        assert_eq!(response.headers()["x-echo-pod"], "pod-1");

        ws.send(Message::text("hello, echo")).await.unwrap();
        assert_eq!(next_data(&mut ws).await, Message::text("hello, echo"));

        let binary: Vec<u8> = (0..=255u8).cycle().take(100_000).collect();
        ws.send(Message::binary(binary.clone())).await.unwrap();
        assert_eq!(
            next_data(&mut ws).await,
            Message::Binary(Bytes::from(binary))
        );

        ws.close(None).await.unwrap();
        // The server answers the close; the stream then ends cleanly.
        loop {
            match ws.next().await {
                None => break,
                Some(Ok(Message::Close(_))) => continue,
                Some(other) => panic!("unexpected after close: {other:?}"),
            }
        }
    })
    .await;
}

#[tokio::test]
async fn answers_ping_with_pong() {
    bounded(async {
        let server = start().await;
        let (mut ws, _) = connect_async(format!("ws://{}/", server.addr()))
            .await
            .unwrap();
        ws.send(Message::Ping(Bytes::from_static(b"are you there")))
            .await
            .unwrap();
        match ws.next().await.unwrap().unwrap() {
            Message::Pong(payload) => assert_eq!(&payload[..], b"are you there"),
            other => panic!("expected pong, got {other:?}"),
        }
    })
    .await;
}

#[tokio::test]
async fn agrees_to_offered_subprotocol() {
    bounded(async {
        let server = start().await;
        let mut req = format!("ws://{}/", server.addr())
            .into_client_request()
            .unwrap();
        req.headers_mut()
            .insert("sec-websocket-protocol", "chat, superchat".parse().unwrap());
        let (_ws, response) = connect_async(req).await.unwrap();
        assert_eq!(response.headers()["sec-websocket-protocol"], "chat");
    })
    .await;
}

#[tokio::test]
async fn server_shutdown_closes_websocket_with_going_away() {
    bounded(async {
        let server = start().await;
        let (mut ws, _) = connect_async(format!("ws://{}/", server.addr()))
            .await
            .unwrap();
        // Make sure the echo loop is running before shutting down.
        ws.send(Message::text("ready?")).await.unwrap();
        assert_eq!(next_data(&mut ws).await, Message::text("ready?"));

        let shutdown = tokio::spawn(server.shutdown());
        match next_data(&mut ws).await {
            Message::Close(Some(frame)) => assert_eq!(frame.code, CloseCode::Away),
            other => panic!("expected close, got {other:?}"),
        }
        // Completing the close handshake lets the server finish well before
        // its drain timeout.
        drop(ws);
        tokio::time::timeout(Duration::from_secs(3), shutdown)
            .await
            .expect("shutdown should not wait for the drain timeout")
            .unwrap()
            .unwrap();
    })
    .await;
}

#[tokio::test]
async fn bad_websocket_version_gets_426() {
    bounded(async {
        let server = start().await;
        let stream = tokio::net::TcpStream::connect(server.addr()).await.unwrap();
        let (mut sender, conn) =
            hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
                .await
                .unwrap();
        tokio::spawn(conn);
        let req = http::Request::get("/")
            .header("host", "x")
            .header("connection", "upgrade")
            .header("upgrade", "websocket")
            .header("sec-websocket-version", "8")
            .header("sec-websocket-key", "dGhlIHNhbXBsZSBub25jZQ==")
            .body(http_body_util::Empty::<bytes::Bytes>::new())
            .unwrap();
        let response = sender.send_request(req).await.unwrap();
        assert_eq!(response.status(), http::StatusCode::UPGRADE_REQUIRED);
        assert_eq!(response.headers()["sec-websocket-version"], "13");
    })
    .await;
}

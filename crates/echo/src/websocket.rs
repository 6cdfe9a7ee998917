//! WebSocket (RFC 6455) over an HTTP/1.1 upgrade: every text and binary
//! message is sent straight back.

use futures::{SinkExt, StreamExt};
use http::{HeaderMap, HeaderValue, Method, Request, Response, StatusCode, Version, header};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::{CloseFrame, Role};
use tracing::debug;

use crate::body::{self, ResponseBody};
use crate::conn::Conn;
use crate::lifecycle::{self, Phase};
use crate::reply::error;

/// True when a header holds `token` in its comma-separated list (case-insensitive).
fn has_token(headers: &HeaderMap, name: header::HeaderName, token: &str) -> bool {
    headers
        .get_all(name)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|t| t.trim().eq_ignore_ascii_case(token))
}

/// Whether the request asks to become a WebSocket (`Upgrade: websocket`).
/// Only HTTP/1.1 can upgrade; other versions get the plain echo.
pub(crate) fn is_upgrade_request<B>(req: &Request<B>) -> bool {
    req.version() == Version::HTTP_11 && has_token(req.headers(), header::UPGRADE, "websocket")
}

/// Validates the handshake, answers 101 and spawns the echo loop on the
/// upgraded connection. Bad handshakes get 400 (426 for a wrong version).
pub(crate) fn upgrade(mut req: Request<Incoming>, conn: &Conn) -> Response<ResponseBody> {
    let headers = req.headers();
    if req.method() != Method::GET || !has_token(headers, header::CONNECTION, "upgrade") {
        return error(
            StatusCode::BAD_REQUEST,
            "websocket upgrade needs GET and Connection: upgrade",
        );
    }
    if headers
        .get(header::SEC_WEBSOCKET_VERSION)
        .is_none_or(|v| v.as_bytes() != b"13")
    {
        let mut response = error(StatusCode::UPGRADE_REQUIRED, "websocket version 13 only");
        response.headers_mut().insert(
            header::SEC_WEBSOCKET_VERSION,
            HeaderValue::from_static("13"),
        );
        return response;
    }
    let Some(key) = headers
        .get(header::SEC_WEBSOCKET_KEY)
        .filter(|k| !k.is_empty())
    else {
        return error(StatusCode::BAD_REQUEST, "missing Sec-WebSocket-Key");
    };
    let accept = derive_accept_key(key.as_bytes());
    // Agree to the client's first subprotocol, if it offered any: clients
    // that offer one usually refuse a handshake that picks none.
    let protocol = headers
        .get(header::SEC_WEBSOCKET_PROTOCOL)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(',').map(str::trim).find(|p| !p.is_empty()))
        .and_then(|p| HeaderValue::from_str(p).ok());
    let Ok(accept) = HeaderValue::from_str(&accept) else {
        return error(StatusCode::INTERNAL_SERVER_ERROR, "bad accept key");
    };

    let on_upgrade = hyper::upgrade::on(&mut req);
    let mut phase = conn.phase.clone();
    let guard = conn.guard.clone();
    tokio::spawn(async move {
        let _guard = guard;
        match on_upgrade.await {
            Ok(upgraded) => {
                let ws =
                    WebSocketStream::from_raw_socket(TokioIo::new(upgraded), Role::Server, None)
                        .await;
                echo(ws, &mut phase).await;
            }
            Err(e) => debug!(error = %e, "websocket upgrade failed"),
        }
    });

    let mut response = Response::new(body::empty());
    *response.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    let h = response.headers_mut();
    h.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
    h.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
    h.insert(header::SEC_WEBSOCKET_ACCEPT, accept);
    if let Some(protocol) = protocol {
        h.insert(header::SEC_WEBSOCKET_PROTOCOL, protocol);
    }
    response
}

/// The echo loop. Pongs and close replies are queued by tungstenite itself
/// while reading; we flush right away so they go out promptly.
async fn echo<S>(mut ws: WebSocketStream<S>, phase: &mut tokio::sync::watch::Receiver<Phase>)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let mut closing = false;
    loop {
        let target = if closing {
            Phase::Stopped
        } else {
            Phase::Draining
        };
        let message = tokio::select! {
            message = ws.next() => message,
            reached = lifecycle::reached(phase, target) => {
                if reached == Phase::Stopped {
                    return;
                }
                // Draining: say goodbye, then keep reading until the peer
                // confirms the close (or the drain window ends).
                closing = true;
                let frame = CloseFrame { code: CloseCode::Away, reason: "server shutting down".into() };
                if ws.close(Some(frame)).await.is_err() {
                    return;
                }
                continue;
            }
        };
        let result = match message {
            None => return,
            Some(Err(e)) => {
                debug!(error = %e, "websocket read failed");
                return;
            }
            Some(Ok(message @ (Message::Text(_) | Message::Binary(_)))) => ws.send(message).await,
            Some(Ok(Message::Ping(_))) => ws.flush().await,
            // tungstenite has queued the close reply; keep polling until the
            // stream ends so it is flushed and the handshake completes.
            Some(Ok(Message::Close(_))) => ws.flush().await,
            Some(Ok(Message::Pong(_) | Message::Frame(_))) => Ok(()),
        };
        if let Err(e) = result {
            debug!(error = %e, "websocket write failed");
            return;
        }
    }
}

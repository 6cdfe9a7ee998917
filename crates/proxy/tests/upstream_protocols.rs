//! Backends that do not speak plain HTTP/1.1, through the real proxy
//! (ingress-nginx's `backend-protocol` and `proxy-ssl-*`, and the Service port's
//! `appProtocol`):
//! - gRPC over h2c and over TLS (GRPCS) with a real `tonic` server and client: the four
//!   call kinds, trailers with custom metadata, non-OK `grpc-status` preserved, and an
//!   unreachable backend answered as gRPC's UNAVAILABLE (HTTP 200 + `grpc-status: 14`,
//!   as Envoy and ingress-nginx answer);
//! - HTTPS backends: unverified by default (`proxy-ssl-verify: off`), verified against the
//!   `ca.crt` of `proxy-ssl-secret`, SNI with `proxy-ssl-server-name`, a client
//!   certificate from the Secret.

mod common;

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use common::*;
use futures::{Stream, StreamExt as _};
use http::uri::PathAndQuery;
use serde_json::json;
use sluice_proxy::ProxyArgs;
use sluice_routing::{CompileOptions, Inputs, Reason, compile};
use tonic::client::Grpc as GrpcClient;
use tonic::codegen::{BoxFuture, Service};
use tonic::metadata::MetadataMap;
use tonic::server::{
    ClientStreamingService, Grpc, NamedService, ServerStreamingService, StreamingService,
    UnaryService,
};
use tonic::transport::{
    Certificate, Channel, ClientTlsConfig, Endpoint, Identity, Server, ServerTlsConfig,
};
use tonic::{Code, Status, Streaming};
use tonic_prost::ProstCodec;

const NGINX: &str = "nginx.ingress.kubernetes.io/";
const HOST: &str = "grpc.test";

/// The one message type: a line of text.
#[derive(Clone, PartialEq, prost::Message)]
struct Msg {
    #[prost(string, tag = "1")]
    text: String,
}

fn msg(text: &str) -> Msg {
    Msg {
        text: text.to_owned(),
    }
}

type MsgStream = Pin<Box<dyn Stream<Item = Result<Msg, Status>> + Send>>;

// --- the test gRPC service: /test.Echo/{Unary,Split,Join,Chat,Fail} -----------------------

struct Unary;
impl UnaryService<Msg> for Unary {
    type Response = Msg;
    type Future = BoxFuture<tonic::Response<Msg>, Status>;
    fn call(&mut self, request: tonic::Request<Msg>) -> Self::Future {
        Box::pin(async move {
            let authority = request
                .metadata()
                .get("x-forwarded-host")
                .and_then(|v| v.to_str().ok())
                .unwrap_or("")
                .to_owned();
            let text = request.into_inner().text;
            Ok(tonic::Response::new(msg(&format!(
                "{text} via {authority}"
            ))))
        })
    }
}

/// Server streaming: one message per word, then OK.
struct Split;
impl ServerStreamingService<Msg> for Split {
    type Response = Msg;
    type ResponseStream = MsgStream;
    type Future = BoxFuture<tonic::Response<MsgStream>, Status>;
    fn call(&mut self, request: tonic::Request<Msg>) -> Self::Future {
        Box::pin(async move {
            let words: Vec<Result<Msg, Status>> = request
                .into_inner()
                .text
                .split(' ')
                .map(|w| Ok(msg(w)))
                .collect();
            let stream: MsgStream = Box::pin(futures::stream::iter(words));
            Ok(tonic::Response::new(stream))
        })
    }
}

/// Client streaming: joins every message.
struct Join;
impl ClientStreamingService<Msg> for Join {
    type Response = Msg;
    type Future = BoxFuture<tonic::Response<Msg>, Status>;
    fn call(&mut self, request: tonic::Request<Streaming<Msg>>) -> Self::Future {
        Box::pin(async move {
            let mut stream = request.into_inner();
            let mut words = Vec::new();
            while let Some(item) = stream.message().await? {
                words.push(item.text);
            }
            Ok(tonic::Response::new(msg(&words.join("+"))))
        })
    }
}

/// Bidirectional: answers each message as it comes.
struct Chat;
impl StreamingService<Msg> for Chat {
    type Response = Msg;
    type ResponseStream = MsgStream;
    type Future = BoxFuture<tonic::Response<MsgStream>, Status>;
    fn call(&mut self, request: tonic::Request<Streaming<Msg>>) -> Self::Future {
        Box::pin(async move {
            let stream = request
                .into_inner()
                .map(|item| item.map(|m| msg(&format!("re: {}", m.text))));
            let stream: MsgStream = Box::pin(stream);
            Ok(tonic::Response::new(stream))
        })
    }
}

/// Two messages, then NOT_FOUND with custom metadata: both travel in the trailers.
struct Fail;
impl ServerStreamingService<Msg> for Fail {
    type Response = Msg;
    type ResponseStream = MsgStream;
    type Future = BoxFuture<tonic::Response<MsgStream>, Status>;
    fn call(&mut self, _request: tonic::Request<Msg>) -> Self::Future {
        Box::pin(async move {
            let mut metadata = MetadataMap::new();
            metadata.insert("x-why", "gone-fishing".parse().unwrap());
            let items = vec![
                Ok(msg("one")),
                Ok(msg("two")),
                Err(Status::with_metadata(Code::NotFound, "no third", metadata)),
            ];
            let stream: MsgStream = Box::pin(futures::stream::iter(items));
            Ok(tonic::Response::new(stream))
        })
    }
}

/// One message, then nothing: a stream gone quiet.
struct Stall;
impl ServerStreamingService<Msg> for Stall {
    type Response = Msg;
    type ResponseStream = MsgStream;
    type Future = BoxFuture<tonic::Response<MsgStream>, Status>;
    fn call(&mut self, _request: tonic::Request<Msg>) -> Self::Future {
        Box::pin(async move {
            let first = futures::stream::iter([Ok(msg("first"))]);
            let stream: MsgStream = Box::pin(first.chain(futures::stream::pending()));
            Ok(tonic::Response::new(stream))
        })
    }
}

#[derive(Clone)]
struct EchoGrpc;

impl NamedService for EchoGrpc {
    const NAME: &'static str = "test.Echo";
}

impl<B> Service<http::Request<B>> for EchoGrpc
where
    B: http_body::Body<Data = bytes::Bytes> + Send + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>> + Send + 'static,
{
    type Response = http::Response<tonic::body::Body>;
    type Error = std::convert::Infallible;
    type Future = BoxFuture<Self::Response, Self::Error>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        Box::pin(async move {
            let mut grpc = Grpc::new(ProstCodec::<Msg, Msg>::default());
            let response = match request.uri().path() {
                "/test.Echo/Unary" => grpc.unary(Unary, request).await,
                "/test.Echo/Split" => grpc.server_streaming(Split, request).await,
                "/test.Echo/Join" => grpc.client_streaming(Join, request).await,
                "/test.Echo/Chat" => grpc.streaming(Chat, request).await,
                "/test.Echo/Fail" => grpc.server_streaming(Fail, request).await,
                "/test.Echo/Stall" => grpc.server_streaming(Stall, request).await,
                _ => Status::unimplemented("no such method").into_http(),
            };
            Ok(response)
        })
    }
}

/// A tonic server on a loopback port, with TLS when `identity` is given; stops on drop.
struct GrpcBackend {
    addr: SocketAddr,
    task: tokio::task::JoinHandle<()>,
    /// Starts a graceful shutdown: GOAWAY to every connection, in-flight calls finish.
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

impl Drop for GrpcBackend {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn grpc_backend(identity: Option<Identity>) -> GrpcBackend {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let incoming = tokio_stream_of(listener);
    let mut builder = Server::builder();
    if let Some(identity) = identity {
        builder = builder
            .tls_config(ServerTlsConfig::new().identity(identity))
            .unwrap();
    }
    let router = builder.add_service(EchoGrpc);
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        let signal = async {
            let _ = stopped.await;
        };
        let _ = router.serve_with_incoming_shutdown(incoming, signal).await;
    });
    GrpcBackend {
        addr,
        task,
        stop: Some(stop),
    }
}

/// The listener's connections as the stream tonic serves from.
fn tokio_stream_of(
    listener: tokio::net::TcpListener,
) -> impl Stream<Item = std::io::Result<tokio::net::TcpStream>> {
    futures::stream::unfold(listener, |listener| async move {
        let accepted = listener.accept().await.map(|(stream, _)| stream);
        Some((accepted, listener))
    })
}

/// A gRPC client for `HOST` through the proxy: h2c to its plain port, or TLS (ALPN h2)
/// trusting `ca_pem`.
async fn client(proxy: &TestProxy, ca_pem: Option<&str>) -> GrpcClient<Channel> {
    let endpoint = match ca_pem {
        None => Endpoint::from_shared(format!("http://{}", proxy.http))
            .unwrap()
            .origin(format!("http://{HOST}").parse().unwrap()),
        Some(ca) => Endpoint::from_shared(format!("https://{}", proxy.https))
            .unwrap()
            .origin(format!("https://{HOST}").parse().unwrap())
            .tls_config(
                ClientTlsConfig::new()
                    .ca_certificate(Certificate::from_pem(ca))
                    .domain_name(HOST),
            )
            .unwrap(),
    };
    let channel = endpoint
        .connect_timeout(Duration::from_secs(5))
        .connect()
        .await
        .expect("client connects to the proxy");
    GrpcClient::new(channel)
}

/// A client-side message stream fed through a channel, to send in lock step.
fn lockstep() -> (
    tokio::sync::mpsc::Sender<Msg>,
    impl Stream<Item = Msg> + Send + 'static,
) {
    let (tx, rx) = tokio::sync::mpsc::channel::<Msg>(1);
    let stream =
        futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|m| (m, rx)) });
    (tx, stream)
}

fn path(method: &'static str) -> PathAndQuery {
    PathAndQuery::from_static(method)
}

fn codec() -> ProstCodec<Msg, Msg> {
    ProstCodec::default()
}

/// The four call kinds and a failing stream, each checked end to end.
async fn four_call_kinds(mut grpc: GrpcClient<Channel>) {
    grpc.ready().await.unwrap();
    let reply = grpc
        .unary(
            tonic::Request::new(msg("hi")),
            path("/test.Echo/Unary"),
            codec(),
        )
        .await
        .expect("unary call");
    assert_eq!(reply.into_inner().text, format!("hi via {HOST}"));

    grpc.ready().await.unwrap();
    let mut words = grpc
        .server_streaming(
            tonic::Request::new(msg("a b c")),
            path("/test.Echo/Split"),
            codec(),
        )
        .await
        .expect("server streaming call")
        .into_inner();
    let mut seen = Vec::new();
    while let Some(word) = words
        .message()
        .await
        .expect("stream ends with grpc-status 0")
    {
        seen.push(word.text);
    }
    assert_eq!(seen, ["a", "b", "c"]);

    grpc.ready().await.unwrap();
    let outbound = futures::stream::iter(["x", "y", "z"].map(msg));
    let joined = grpc
        .client_streaming(
            tonic::Request::new(outbound),
            path("/test.Echo/Join"),
            codec(),
        )
        .await
        .expect("client streaming call");
    assert_eq!(joined.into_inner().text, "x+y+z");

    // Bidirectional, in lock step: the second message is sent only after the first
    // answer came back, which proves both directions stream (nothing is buffered whole).
    grpc.ready().await.unwrap();
    let (tx, outbound) = lockstep();
    tx.send(msg("ping 1")).await.unwrap();
    let mut answers = grpc
        .streaming(
            tonic::Request::new(outbound),
            path("/test.Echo/Chat"),
            codec(),
        )
        .await
        .expect("bidi call")
        .into_inner();
    let first = bounded_msg(&mut answers).await;
    assert_eq!(first.text, "re: ping 1");
    tx.send(msg("ping 2")).await.unwrap();
    assert_eq!(bounded_msg(&mut answers).await.text, "re: ping 2");
    drop(tx);
    assert!(answers.message().await.unwrap().is_none());

    // Trailers after data: grpc-status 5 and custom metadata arrive intact.
    grpc.ready().await.unwrap();
    let mut failing = grpc
        .server_streaming(
            tonic::Request::new(msg("")),
            path("/test.Echo/Fail"),
            codec(),
        )
        .await
        .expect("call starts")
        .into_inner();
    assert_eq!(failing.message().await.unwrap().unwrap().text, "one");
    assert_eq!(failing.message().await.unwrap().unwrap().text, "two");
    let status = failing
        .message()
        .await
        .expect_err("the stream ends with NOT_FOUND");
    assert_eq!(status.code(), Code::NotFound);
    assert_eq!(status.message(), "no third");
    assert_eq!(status.metadata().get("x-why").unwrap(), "gone-fishing");
}

async fn bounded_msg(stream: &mut Streaming<Msg>) -> Msg {
    tokio::time::timeout(Duration::from_secs(5), stream.message())
        .await
        .expect("answer within 5 s")
        .expect("stream healthy")
        .expect("a message")
}

fn grpc_route(backend: SocketAddr, protocol: &str) -> Route {
    Route::new(HOST, "grpc", vec![backend])
        .with_annotation(&format!("{NGINX}backend-protocol"), protocol)
}

#[tokio::test]
async fn grpc_over_h2c_four_call_kinds_and_trailers() {
    init_tracing();
    bounded(async {
        let backend = grpc_backend(None).await;
        let proxy = TestProxy::with_routes(&[grpc_route(backend.addr, "GRPC")]).await;
        four_call_kinds(client(&proxy, None).await).await;
    })
    .await;
}

#[tokio::test]
async fn grpcs_over_tls_on_both_sides() {
    init_tracing();
    bounded(async {
        // The backend's own certificate, not trusted by anyone: proxy-ssl-verify is off by
        // default, as in ingress-nginx.
        let (_, backend_cert, backend_key) = ca_pem_and_leaf("backend.internal");
        let backend = grpc_backend(Some(Identity::from_pem(backend_cert, backend_key))).await;
        let (ca, cert, key) = ca_pem_and_leaf(HOST);
        let route = grpc_route(backend.addr, "GRPCS").with_tls(cert, key);
        let proxy = TestProxy::with_routes(&[route]).await;
        four_call_kinds(client(&proxy, Some(&ca)).await).await;
    })
    .await;
}

#[tokio::test]
async fn backend_goaway_drains_in_flight_calls_and_new_calls_go_elsewhere() {
    init_tracing();
    bounded(async {
        let mut leaving = grpc_backend(None).await;
        let staying = grpc_backend(None).await;
        let route = Route::new(HOST, "grpc", vec![leaving.addr, staying.addr])
            .with_annotation(&format!("{NGINX}backend-protocol"), "GRPC");
        let proxy = TestProxy::with_routes(&[route]).await;
        let mut grpc = client(&proxy, None).await;
        // Open bidi calls until both endpoints have one in flight.
        let mut calls = Vec::new();
        for i in 0..4 {
            grpc.ready().await.unwrap();
            let (tx, outbound) = lockstep();
            tx.send(msg(&format!("call {i}"))).await.unwrap();
            let mut answers = grpc
                .streaming(
                    tonic::Request::new(outbound),
                    path("/test.Echo/Chat"),
                    codec(),
                )
                .await
                .expect("bidi call")
                .into_inner();
            assert_eq!(
                bounded_msg(&mut answers).await.text,
                format!("re: call {i}")
            );
            calls.push((tx, answers));
        }
        // The leaving backend sends GOAWAY and stops accepting.
        let _ = leaving.stop.take().unwrap().send(());
        tokio::time::sleep(Duration::from_millis(200)).await;
        // Calls in flight on it go on to the end.
        for (i, (tx, answers)) in calls.iter_mut().enumerate() {
            tx.send(msg(&format!("again {i}"))).await.unwrap();
            assert_eq!(bounded_msg(answers).await.text, format!("re: again {i}"));
        }
        for (tx, mut answers) in calls {
            drop(tx);
            assert!(answers.message().await.unwrap().is_none());
        }
        // New calls all succeed (the leaving endpoint refuses; the other answers).
        for i in 0..20 {
            grpc.ready().await.unwrap();
            let reply = grpc
                .unary(
                    tonic::Request::new(msg(&format!("n{i}"))),
                    path("/test.Echo/Unary"),
                    codec(),
                )
                .await
                .unwrap_or_else(|status| panic!("call {i} after GOAWAY failed: {status:?}"));
            assert_eq!(reply.into_inner().text, format!("n{i} via {HOST}"));
        }
    })
    .await;
}

/// nginx's `grpc_read_timeout` (here `proxy-read-timeout`): a stream that sends nothing for
/// that long is ended, instead of holding the client forever.
#[tokio::test]
async fn a_quiet_stream_ends_after_the_read_timeout() {
    init_tracing();
    bounded(async {
        let backend = grpc_backend(None).await;
        let route = grpc_route(backend.addr, "GRPC")
            .with_annotation(&format!("{NGINX}proxy-read-timeout"), "1");
        let proxy = TestProxy::with_routes(&[route]).await;
        let mut grpc = client(&proxy, None).await;
        grpc.ready().await.unwrap();
        let mut stream = grpc
            .server_streaming(
                tonic::Request::new(msg("")),
                path("/test.Echo/Stall"),
                codec(),
            )
            .await
            .expect("call starts")
            .into_inner();
        assert_eq!(bounded_msg(&mut stream).await.text, "first");
        let started = std::time::Instant::now();
        let end = tokio::time::timeout(Duration::from_secs(10), stream.message())
            .await
            .expect("the quiet stream is ended by the proxy");
        assert!(end.is_err(), "the stream ends in an error: {end:?}");
        let waited = started.elapsed();
        assert!(waited >= Duration::from_millis(900), "{waited:?}");
    })
    .await;
}

#[tokio::test]
async fn grpc_to_an_unreachable_backend_is_unavailable_with_http_200() {
    init_tracing();
    bounded(async {
        let closed = closed_port().await;
        let proxy = TestProxy::with_routes(&[grpc_route(closed, "GRPC")]).await;
        // Raw HTTP/2, to see the HTTP status itself: tonic would map a plain 502 to
        // UNAVAILABLE too.
        let tcp = tokio::net::TcpStream::connect(proxy.http).await.unwrap();
        let (mut sender, connection) = hyper::client::conn::http2::handshake(
            hyper_util::rt::TokioExecutor::new(),
            hyper_util::rt::TokioIo::new(tcp),
        )
        .await
        .unwrap();
        tokio::spawn(connection);
        let request = http::Request::post(format!("http://{HOST}/test.Echo/Unary"))
            .header("content-type", "application/grpc")
            .header("te", "trailers")
            .body(http_body_util::Full::new(bytes::Bytes::from_static(
                b"\0\0\0\0\0",
            )))
            .unwrap();
        let response = sender.send_request(request).await.unwrap();
        assert_eq!(response.status(), 200);
        assert_eq!(response.headers()["content-type"], "application/grpc");
        assert_eq!(response.headers()["grpc-status"], "14");
        // And tonic reads it as UNAVAILABLE.
        let mut grpc = client(&proxy, None).await;
        grpc.ready().await.unwrap();
        let status = grpc
            .unary(
                tonic::Request::new(msg("hi")),
                path("/test.Echo/Unary"),
                codec(),
            )
            .await
            .expect_err("no backend");
        assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    })
    .await;
}

#[tokio::test]
async fn service_app_protocol_h2c_selects_http2_without_annotations() {
    init_tracing();
    bounded(async {
        let backend = grpc_backend(None).await;
        let mut inputs = inputs(&[Route::new(HOST, "grpc", vec![backend.addr])]);
        set_app_protocol(&mut inputs, "kubernetes.io/h2c");
        let proxy = TestProxy::start(ProxyArgs::loopback()).await;
        install(&proxy, &inputs);
        let mut grpc = client(&proxy, None).await;
        grpc.ready().await.unwrap();
        let reply = grpc
            .unary(
                tonic::Request::new(msg("hi")),
                path("/test.Echo/Unary"),
                codec(),
            )
            .await
            .expect("h2c chosen by appProtocol");
        assert_eq!(reply.into_inner().text, format!("hi via {HOST}"));
    })
    .await;
}

fn set_app_protocol(inputs: &mut Inputs, protocol: &str) {
    for service in inputs.services.iter_mut() {
        let service = Arc::make_mut(service);
        for port in service
            .spec
            .as_mut()
            .and_then(|s| s.ports.as_mut())
            .into_iter()
            .flatten()
        {
            port.app_protocol = Some(protocol.to_owned());
        }
    }
}

fn install(proxy: &TestProxy, inputs: &Inputs) {
    let compiled = compile(inputs, &CompileOptions::default());
    proxy.table.update(compiled.table, Duration::from_millis(1));
}

// --- HTTPS backends ---------------------------------------------------------------------

/// What the HTTPS test backend saw of a connection.
const SNI_NONE: &str = "-";

/// An HTTP/1.1-over-TLS backend answering `sni=<name> client-cert=<yes|no> host=<host>`;
/// client certificates are asked for (signed by `client_ca`) but optional.
struct HttpsBackend {
    addr: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for HttpsBackend {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn https_backend(cert_pem: &str, key_pem: &str, client_ca_pem: &str) -> HttpsBackend {
    use rustls::pki_types::pem::PemObject as _;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(cert_pem.as_bytes())
        .collect::<Result<_, _>>()
        .unwrap();
    let key = PrivateKeyDer::from_pem_slice(key_pem.as_bytes()).unwrap();
    let mut roots = rustls::RootCertStore::empty();
    for ca in CertificateDer::pem_slice_iter(client_ca_pem.as_bytes()) {
        roots.add(ca.unwrap()).unwrap();
    }
    let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
        Arc::new(roots),
        provider.clone(),
    )
    .allow_unauthenticated()
    .build()
    .unwrap();
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_client_cert_verifier(verifier)
        .with_single_cert(chain, key)
        .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let task = tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                return;
            };
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let (_, conn) = tls.get_ref();
                let sni = conn.server_name().unwrap_or(SNI_NONE).to_owned();
                let cert = if conn.peer_certificates().is_some() {
                    "yes"
                } else {
                    "no"
                };
                let service = hyper::service::service_fn(move |request: http::Request<_>| {
                    let host = request
                        .headers()
                        .get("host")
                        .and_then(|v| v.to_str().ok())
                        .unwrap_or("")
                        .to_owned();
                    let body = format!("sni={sni} client-cert={cert} host={host}");
                    async move {
                        Ok::<_, std::convert::Infallible>(http::Response::new(
                            http_body_util::Full::new(bytes::Bytes::from(body)),
                        ))
                    }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(tls), service)
                    .await;
            });
        }
    });
    HttpsBackend { addr, task }
}

/// `proxy-ssl-secret` as a kubernetes.io/tls Secret: `ca.crt` plus a client pair.
fn ssl_secret(
    name: &str,
    ca_pem: &str,
    client: Option<(&str, &str)>,
) -> Arc<k8s_openapi::api::core::v1::Secret> {
    let mut data = json!({ "ca.crt": ca_pem });
    if let Some((crt, key)) = client {
        data["tls.crt"] = json!(crt);
        data["tls.key"] = json!(key);
    }
    Arc::new(
        serde_json::from_value(json!({
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": name, "namespace": NS},
            "type": "kubernetes.io/tls",
            "stringData": data
        }))
        .unwrap(),
    )
}

async fn https_get(proxy: &TestProxy, method: &str) -> Answer {
    let mut sender = http1_connect(proxy.http).await;
    let body = if method == "POST" { "x=1" } else { "" };
    let request = http::Request::builder()
        .method(method)
        .uri("/")
        .header("host", "web.test")
        .body(http_body_util::Full::new(bytes::Bytes::from(body)))
        .unwrap();
    send(&mut sender, request).await
}

#[tokio::test]
async fn https_backends_verify_sni_and_client_certificates_like_proxy_ssl() {
    init_tracing();
    bounded(async {
        let (backend_ca, backend_cert, backend_key) = ca_pem_and_leaf("web.ns.internal");
        let (client_ca, client_cert, client_key) = ca_pem_and_leaf("sluice-client");
        let (other_ca, _, _) = ca_pem_and_leaf("someone-else");
        let backend = https_backend(&backend_cert, &backend_key, &client_ca).await;
        let proxy = TestProxy::start(ProxyArgs::loopback()).await;
        let route = |annotations: &[(&str, &str)]| {
            let mut route = Route::new("web.test", "web", vec![backend.addr])
                .with_annotation(&format!("{NGINX}backend-protocol"), "HTTPS");
            for (k, v) in annotations {
                route = route.with_annotation(&format!("{NGINX}{k}"), v);
            }
            route
        };

        // Default: not verified, no SNI (nginx's proxy_ssl_server_name off), no client
        // certificate; both front ends.
        install(&proxy, &inputs(&[route(&[])]));
        for method in ["GET", "POST"] {
            let answer = https_get(&proxy, method).await;
            assert_eq!(answer.status, 200, "{method}: {}", answer.text());
            assert_eq!(answer.text(), "sni=- client-cert=no host=web.test");
        }

        // Verified against the Secret's CA with the right name, SNI on, client certificate
        // from the Secret.
        let verified = [
            ("proxy-ssl-verify", "on"),
            ("proxy-ssl-name", "web.ns.internal"),
            ("proxy-ssl-server-name", "on"),
            ("proxy-ssl-secret", "default/upstream-tls"),
        ];
        let mut with_secret = inputs(&[route(&verified)]);
        with_secret.secrets.push(ssl_secret(
            "upstream-tls",
            &backend_ca,
            Some((&client_cert, &client_key)),
        ));
        install(&proxy, &with_secret);
        let answer = https_get(&proxy, "GET").await;
        assert_eq!(answer.status, 200, "{}", answer.text());
        assert_eq!(
            answer.text(),
            "sni=web.ns.internal client-cert=yes host=web.test"
        );

        // The wrong CA: verification fails closed with 502.
        let mut wrong = inputs(&[route(&verified)]);
        wrong
            .secrets
            .push(ssl_secret("upstream-tls", &other_ca, None));
        install(&proxy, &wrong);
        assert_eq!(https_get(&proxy, "GET").await.status, 502);

        // The right CA but another name: 502 too.
        let misnamed = [
            ("proxy-ssl-verify", "on"),
            ("proxy-ssl-name", "not-the-backend.internal"),
            ("proxy-ssl-secret", "upstream-tls"),
        ];
        let mut misnamed_inputs = inputs(&[route(&misnamed)]);
        misnamed_inputs
            .secrets
            .push(ssl_secret("upstream-tls", &backend_ca, None));
        install(&proxy, &misnamed_inputs);
        assert_eq!(https_get(&proxy, "GET").await.status, 502);
    })
    .await;
}

#[test]
fn a_missing_proxy_ssl_secret_is_a_diagnostic_naming_the_annotation() {
    let route = Route::new("web.test", "web", vec!["127.0.0.1:1".parse().unwrap()])
        .with_annotation(&format!("{NGINX}backend-protocol"), "HTTPS")
        .with_annotation(&format!("{NGINX}proxy-ssl-verify"), "on")
        .with_annotation(&format!("{NGINX}proxy-ssl-secret"), "nowhere");
    let compiled = compile(&inputs(&[route]), &CompileOptions::default());
    let diagnostic = compiled
        .diagnostics
        .iter()
        .find(|d| d.reason == Reason::TlsSecretMissing)
        .expect("a diagnostic for the missing Secret");
    assert_eq!(
        diagnostic.field,
        format!("metadata.annotations[{NGINX}proxy-ssl-secret]")
    );
    assert!(
        diagnostic.message.contains("default/nowhere"),
        "{}",
        diagnostic.message
    );
}

//! A small gRPC backend for benchmarks (`bench/grpc.sh`): one unary method,
//! `/bench.Echo/Unary`, that answers the request message as it came. A `tonic` server
//! without protoc or generated code, like the service in `tests/upstream_protocols.rs`.
//!
//! ```text
//! cargo run --release -p sluice-proxy --example grpc_backend -- 127.0.0.1:50051
//! ```
//!
//! The message is `{ string text = 1; }`; a call over h2c is a POST to `/bench.Echo/Unary`
//! with `content-type: application/grpc` and `te: trailers`, the body a 5-byte gRPC frame
//! header and the encoded message. Runs until SIGINT or SIGTERM.

/// mimalloc, as the `sluice` binary and `bench_proxy` use.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::task::{Context, Poll};

use anyhow::Context as _;
use clap::Parser;
use tonic::codegen::{BoxFuture, Service};
use tonic::server::{Grpc, NamedService, UnaryService};
use tonic::transport::Server;
use tonic::{Request, Response, Status};
use tonic_prost::ProstCodec;

#[derive(Parser, Debug)]
#[command(about = "gRPC echo backend (one unary method), for benchmarks")]
struct Cli {
    /// Address to listen on, e.g. 127.0.0.1:50051.
    addr: SocketAddr,

    /// Runtime worker threads.
    #[arg(long, default_value_t = 1)]
    threads: usize,
}

/// The one message type: a line of text.
#[derive(Clone, PartialEq, prost::Message)]
struct Msg {
    #[prost(string, tag = "1")]
    text: String,
}

/// Answers the request message unchanged.
struct Unary;

impl UnaryService<Msg> for Unary {
    type Response = Msg;
    type Future = BoxFuture<Response<Msg>, Status>;
    fn call(&mut self, request: Request<Msg>) -> Self::Future {
        Box::pin(async move { Ok(Response::new(request.into_inner())) })
    }
}

#[derive(Clone)]
struct Echo;

impl NamedService for Echo {
    const NAME: &'static str = "bench.Echo";
}

impl<B> Service<http::Request<B>> for Echo
where
    B: http_body::Body<Data = bytes::Bytes> + Send + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>> + Send + 'static,
{
    type Response = http::Response<tonic::body::Body>;
    type Error = Infallible;
    type Future = BoxFuture<Self::Response, Self::Error>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        Box::pin(async move {
            let response = match request.uri().path() {
                "/bench.Echo/Unary" => {
                    let mut grpc = Grpc::new(ProstCodec::<Msg, Msg>::default());
                    grpc.unary(Unary, request).await
                }
                _ => Status::unimplemented("no such method").into_http(),
            };
            Ok(response)
        })
    }
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(cli.threads.max(1))
        .enable_all()
        .build()
        .context("building the runtime")?;
    runtime.block_on(async move {
        println!("listening grpc={}", cli.addr);
        Server::builder()
            .add_service(Echo)
            .serve_with_shutdown(cli.addr, async {
                let mut term =
                    tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
                        .expect("SIGTERM handler");
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = term.recv() => {}
                }
            })
            .await
            .context("serving")
    })
}

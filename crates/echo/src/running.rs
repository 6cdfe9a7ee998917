//! A ready-made in-process server for tests: bind, spawn, stop on drop.

use std::io;
use std::net::SocketAddr;

use tokio::net::{TcpListener, ToSocketAddrs};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::{Identity, serve};

/// An echo server running on the current Tokio runtime.
///
/// Dropping it stops the server at once; [`EchoServer::shutdown`] drains
/// gracefully instead.
#[derive(Debug)]
pub struct EchoServer {
    addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<io::Result<()>>>,
}

impl EchoServer {
    /// Binds `addr` (use port 0 for an ephemeral port) and starts serving.
    pub async fn start(addr: impl ToSocketAddrs, identity: Identity) -> io::Result<Self> {
        let listener = TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        let (stop, stopped) = oneshot::channel::<()>();
        let shutdown = async move {
            // A dropped sender is a stop request too.
            let _ = stopped.await;
        };
        let task = tokio::spawn(serve(listener, identity, shutdown));
        Ok(Self {
            addr,
            stop: Some(stop),
            task: Some(task),
        })
    }

    /// The address actually bound.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://<addr>`, handy for building request URLs.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Stops accepting, drains in-flight work and waits for the server to end.
    pub async fn shutdown(mut self) -> io::Result<()> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        match self.task.take() {
            Some(task) => task.await.map_err(io::Error::other)?,
            None => Ok(()),
        }
    }
}

impl Drop for EchoServer {
    fn drop(&mut self) {
        // Aborting drops `serve`, which stops every connection it spawned.
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

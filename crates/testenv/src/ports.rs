//! Free loopback ports.

use std::net::TcpListener;

/// A TCP port on 127.0.0.1 that was free a moment ago.
///
/// The kernel does not hand the same ephemeral port out again right away, which is enough
/// for servers (etcd, kube-apiserver) that bind it a few milliseconds later.
pub fn free_port() -> std::io::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

//! Listening sockets: one per accepting thread on the same address, with `SO_REUSEPORT`
//! where the platform has it, for the proxy's own listeners and for Gateway sockets.

use std::io;
use std::net::SocketAddr;

use tokio::net::TcpSocket;
use tracing::warn;

/// Listen backlog of every socket (tokio's default for `TcpListener::bind`).
const BACKLOG: u32 = 1024;

/// Binds `count` sockets on `addr` (the first decides the port when `addr`'s is 0), with
/// `SO_REUSEPORT` where the platform has it, else one socket and duplicates of it.
///
/// A port another process holds is refused, even when that process set `SO_REUSEPORT`
/// too (a second sluice of the same user would otherwise share the port, and requests would
/// land on either configuration at random): a plain socket is bound on it first.
pub(crate) fn bind_many(addr: SocketAddr, count: usize) -> io::Result<Vec<std::net::TcpListener>> {
    if addr.port() != 0 {
        let probe = new_socket(addr)?;
        probe.bind(addr).map_err(|error| {
            if error.kind() == io::ErrorKind::AddrInUse {
                io::Error::new(
                    io::ErrorKind::AddrInUse,
                    format!("{addr} is already in use by another process (another sluice?)"),
                )
            } else {
                error
            }
        })?;
        drop(probe);
    }
    let first = match reuseport_socket(addr) {
        Ok(first) => first,
        Err(error) => {
            warn!(%addr, %error, "SO_REUSEPORT unavailable: workers share one listening socket");
            let socket = plain_socket(addr)?;
            let mut all = vec![socket];
            for _ in 1..count {
                all.push(all[0].try_clone()?);
            }
            return Ok(all);
        }
    };
    let bound = first.local_addr()?;
    let mut all = vec![first];
    for _ in 1..count {
        all.push(reuseport_socket(bound)?);
    }
    Ok(all)
}

fn reuseport_socket(addr: SocketAddr) -> io::Result<std::net::TcpListener> {
    let socket = new_socket(addr)?;
    socket.set_reuseport(true)?;
    listen(socket, addr)
}

fn plain_socket(addr: SocketAddr) -> io::Result<std::net::TcpListener> {
    listen(new_socket(addr)?, addr)
}

fn new_socket(addr: SocketAddr) -> io::Result<TcpSocket> {
    let socket = if addr.is_ipv4() {
        TcpSocket::new_v4()?
    } else {
        TcpSocket::new_v6()?
    };
    socket.set_reuseaddr(true)?;
    Ok(socket)
}

fn listen(socket: TcpSocket, addr: SocketAddr) -> io::Result<std::net::TcpListener> {
    socket.bind(addr)?;
    let listener = socket.listen(BACKLOG)?;
    listener.into_std()
}

/// Binds `count` UDP sockets on `addr` with `SO_REUSEPORT` (the kernel keeps each client's
/// datagrams on one of them), for Gateway `UDP` listeners; after the same check as
/// [`bind_many`] that no other process holds the port.
pub(crate) fn bind_many_udp(
    addr: SocketAddr,
    count: usize,
) -> io::Result<Vec<std::net::UdpSocket>> {
    std::net::UdpSocket::bind(addr).map_err(|error| {
        if error.kind() == io::ErrorKind::AddrInUse {
            io::Error::new(
                io::ErrorKind::AddrInUse,
                format!("{addr} (UDP) is already in use by another process (another sluice?)"),
            )
        } else {
            error
        }
    })?;
    (0..count.max(1))
        .map(|_| {
            let domain = socket2::Domain::for_address(addr);
            let socket =
                socket2::Socket::new(domain, socket2::Type::DGRAM, Some(socket2::Protocol::UDP))?;
            socket.set_reuse_address(true)?;
            socket.set_reuse_port(true)?;
            socket.set_nonblocking(true)?;
            socket.bind(&addr.into())?;
            Ok(socket.into())
        })
        .collect()
}

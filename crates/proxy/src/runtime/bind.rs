//! Listening sockets: one per accepting thread on the same address, with `SO_REUSEPORT`
//! where the platform has it, for the proxy's own listeners and for Gateway sockets.

use std::io;
use std::net::SocketAddr;

use tokio::net::TcpSocket;
use tracing::warn;

/// What to say when binding `addr` (the `what` listener, e.g. `HTTP`) failed with `error`:
/// the address, and for a port below 1024 refused for want of privilege, what grants it
/// (a bare "Permission denied" says neither).
pub(crate) fn bind_failure(what: &str, addr: SocketAddr, error: &io::Error) -> String {
    let mut message = format!("binding the {what} listener on {addr}");
    let (flag, port) = match what {
        "HTTPS" => ("https-addr", 8443),
        "admin" => ("admin-addr", 10254),
        _ => ("http-addr", 8080),
    };
    if error.kind() == io::ErrorKind::PermissionDenied && addr.port() != 0 && addr.port() < 1024 {
        message.push_str(&format!(
            ": ports below 1024 need the CAP_NET_BIND_SERVICE capability (or root); deploy/ \
             and the Helm chart grant it with `securityContext.capabilities.add: \
             [NET_BIND_SERVICE]` and the file capability the image sets (`setcap \
             cap_net_bind_service=+ep /sluice`); or listen on a port from 1024 up, e.g. \
             --{flag} 0.0.0.0:{port}",
        ));
    }
    message
}

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

#[cfg(test)]
mod tests {
    use super::*;

    /// #33: binding :80 without the capability said only "Permission denied".
    #[test]
    fn a_privileged_port_refused_says_what_grants_it() {
        let denied = io::Error::from(io::ErrorKind::PermissionDenied);
        let addr: SocketAddr = "0.0.0.0:80".parse().unwrap();
        let message = bind_failure("HTTP", addr, &denied);
        assert!(
            message.starts_with("binding the HTTP listener on 0.0.0.0:80: "),
            "{message}"
        );
        for part in [
            "below 1024",
            "CAP_NET_BIND_SERVICE",
            "NET_BIND_SERVICE]",
            "setcap",
        ] {
            assert!(message.contains(part), "{part}: {message}");
        }
        assert!(message.contains("--http-addr 0.0.0.0:8080"), "{message}");
        let https = bind_failure("HTTPS", "[::]:443".parse().unwrap(), &denied);
        assert!(https.contains("--https-addr 0.0.0.0:8443"), "{https}");
        // Other failures, or a high port, have nothing to add.
        let in_use = io::Error::from(io::ErrorKind::AddrInUse);
        assert_eq!(
            bind_failure("HTTP", addr, &in_use),
            "binding the HTTP listener on 0.0.0.0:80"
        );
        assert_eq!(
            bind_failure("HTTP", "0.0.0.0:8080".parse().unwrap(), &denied),
            "binding the HTTP listener on 0.0.0.0:8080"
        );
    }
}

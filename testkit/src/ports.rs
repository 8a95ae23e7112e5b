//! Loopback ports for servers a test starts, held so nothing else takes them.
//!
//! Choosing a port by binding `127.0.0.1:0` and closing the socket leaves a
//! window: until the server binds it, the kernel may hand the same number to an
//! outgoing connection as its local port (the ephemeral range is shared), and
//! the server then fails with "Address already in use". Under a busy test run it
//! happens (rzk's CI lost a run to it).
//!
//! A [`Port`] keeps a socket bound to its number with `SO_REUSEADDR` and never
//! listens on it. Linux then refuses that number to outgoing connections, to
//! other port-0 binds and to binds without `SO_REUSEADDR`, while a server that
//! binds it with `SO_REUSEADDR` (std's, tokio's and mio's `TcpListener::bind` do
//! on Unix, as do ZooKeeper's server sockets) binds and
//! listens as usual — also again after a restart, for as long as the `Port`
//! lives. Drop it when the server is gone for good.
//!
//! ```
//! let port = rzk_testkit::ports::reserve();
//! // A server binding with SO_REUSEADDR (std, tokio and mio do on Unix) binds
//! // and listens on it, and can again after a restart.
//! let server = std::net::TcpListener::bind(port.addr()).unwrap();
//! drop(server);
//! let again = std::net::TcpListener::bind(port.addr()).unwrap();
//! assert_eq!(format!("clientPort={port}"), format!("clientPort={}", port.get()));
//! # drop(again);
//! ```

use std::fmt;
use std::net::{Ipv4Addr, SocketAddr};

use socket2::{Domain, Socket, Type};

/// A loopback port reserved for a server the test starts; see the module docs.
pub struct Port {
    ip: Ipv4Addr,
    port: u16,
    _held: Socket,
}

impl Port {
    /// The port number.
    pub fn get(&self) -> u16 {
        self.port
    }

    /// `<address>:<port>` (`127.0.0.1:<port>` unless reserved with
    /// [`reserve_on`]).
    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from((self.ip, self.port))
    }
}

impl fmt::Display for Port {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.port)
    }
}

impl fmt::Debug for Port {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Port({}:{})", self.ip, self.port)
    }
}

/// Reserves a free port on 127.0.0.1 (the kernel chooses it, as for a bind to
/// port 0). Panics if the machine has no socket to give: a test cannot go on.
pub fn reserve() -> Port {
    reserve_on(Ipv4Addr::LOCALHOST)
}

/// Reserves a free port on `ip`, one of the loopback addresses (all of
/// 127.0.0.0/8 is loopback on Linux and binds without root): servers that need
/// an address each on one host (ZooKeeper's observer master dials a voter at
/// its `server.N` address and the observer's own port number) get one each.
/// Panics if the address cannot be bound.
pub fn reserve_on(ip: Ipv4Addr) -> Port {
    let socket = held_socket(SocketAddr::from((ip, 0)))
        .unwrap_or_else(|e| panic!("bind {ip}:0 with SO_REUSEADDR: {e}"));
    let port = socket
        .local_addr()
        .expect("a bound socket's address")
        .as_socket()
        .expect("an IPv4 address")
        .port();
    Port {
        ip,
        port,
        _held: socket,
    }
}

/// Reserves one port number on every address of `ips` (a setting that names
/// one port for members that each bind it on their own address, as
/// ZooKeeper's `observerMasterPort`). Panics if 100 candidates fail.
pub fn reserve_common(ips: &[Ipv4Addr]) -> Vec<Port> {
    let Some((first, rest)) = ips.split_first() else {
        return Vec::new();
    };
    for _ in 0..100 {
        let candidate = reserve_on(*first);
        let others: Option<Vec<Port>> = rest
            .iter()
            .map(|ip| {
                let socket = held_socket(SocketAddr::from((*ip, candidate.port))).ok()?;
                Some(Port {
                    ip: *ip,
                    port: candidate.port,
                    _held: socket,
                })
            })
            .collect();
        if let Some(others) = others {
            return std::iter::once(candidate).chain(others).collect();
        }
    }
    panic!("no port free on every one of {ips:?} after 100 candidates");
}

/// A TCP socket bound to `addr` with `SO_REUSEADDR`, never listening.
fn held_socket(addr: SocketAddr) -> std::io::Result<Socket> {
    let socket = Socket::new(Domain::IPV4, Type::STREAM, None)?;
    socket.set_reuse_address(true)?;
    socket.bind(&addr.into())?;
    Ok(socket)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{TcpListener, TcpStream};

    /// Binds the way tokio and mio do: SO_REUSEADDR, then listen.
    fn listen_reusing(port: u16) -> std::io::Result<Socket> {
        let s = Socket::new(Domain::IPV4, Type::STREAM, None)?;
        s.set_reuse_address(true)?;
        s.bind(&SocketAddr::from((Ipv4Addr::LOCALHOST, port)).into())?;
        s.listen(16)?;
        Ok(s)
    }

    #[test]
    fn a_server_binds_a_reserved_port_and_binds_it_again_after_a_restart() {
        let port = reserve();
        let first = listen_reusing(port.get()).expect("first bind");
        TcpStream::connect(port.addr()).expect("the server accepts");
        drop(first);
        listen_reusing(port.get()).expect("bind again after the server stopped");
    }

    #[test]
    fn others_cannot_take_a_reserved_port() {
        let port = reserve();
        let plain = Socket::new(Domain::IPV4, Type::STREAM, None).unwrap();
        let err = plain
            .bind(&port.addr().into())
            .expect_err("a bind without SO_REUSEADDR must fail");
        assert_eq!(err.kind(), std::io::ErrorKind::AddrInUse);
    }

    #[test]
    fn a_port_reserved_on_another_loopback_address_binds_there() {
        let ip = Ipv4Addr::new(127, 0, 9, 3);
        let port = reserve_on(ip);
        assert_eq!(port.addr().ip(), ip);
        let s = Socket::new(Domain::IPV4, Type::STREAM, None).unwrap();
        s.set_reuse_address(true).unwrap();
        s.bind(&port.addr().into()).unwrap();
        s.listen(1).unwrap();
        TcpStream::connect(port.addr()).expect("the server on 127.0.9.3 accepts");
    }

    #[test]
    fn a_common_port_is_held_on_every_address() {
        let ips = [Ipv4Addr::new(127, 0, 9, 1), Ipv4Addr::new(127, 0, 9, 2)];
        let ports = reserve_common(&ips);
        assert_eq!(ports.len(), 2);
        assert_eq!(ports[0].get(), ports[1].get());
        for (p, ip) in ports.iter().zip(ips) {
            assert_eq!(p.addr().ip(), ip);
            let plain = Socket::new(Domain::IPV4, Type::STREAM, None).unwrap();
            let err = plain.bind(&p.addr().into()).expect_err("held");
            assert_eq!(err.kind(), std::io::ErrorKind::AddrInUse);
        }
    }

    #[test]
    fn other_port_zero_binds_never_get_a_reserved_port() {
        // The race this module closes: a number released after the choice is
        // handed to the next bind to port 0 (an in-process server of another
        // test) as readily as to any other socket. Hold some, then take ports
        // until a good part of the range is used.
        let held: Vec<Port> = (0..32).map(|_| reserve()).collect();
        let mut taken = Vec::new();
        for _ in 0..4_000 {
            let l = TcpListener::bind("127.0.0.1:0").unwrap();
            let got = l.local_addr().unwrap().port();
            assert!(
                held.iter().all(|p| p.get() != got),
                "a bind to port 0 got reserved port {got}"
            );
            taken.push(l);
        }
    }
}

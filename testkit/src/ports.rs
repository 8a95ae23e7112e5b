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
    port: u16,
    _held: Socket,
}

impl Port {
    /// The port number.
    pub fn get(&self) -> u16 {
        self.port
    }

    /// `127.0.0.1:<port>`.
    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from((Ipv4Addr::LOCALHOST, self.port))
    }
}

impl fmt::Display for Port {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.port)
    }
}

impl fmt::Debug for Port {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Port({})", self.port)
    }
}

/// Reserves a free port on 127.0.0.1 (the kernel chooses it, as for a bind to
/// port 0). Panics if the machine has no socket to give: a test cannot go on.
pub fn reserve() -> Port {
    let socket = Socket::new(Domain::IPV4, Type::STREAM, None).expect("a TCP socket");
    socket
        .set_reuse_address(true)
        .expect("SO_REUSEADDR on a TCP socket");
    socket
        .bind(&SocketAddr::from((Ipv4Addr::LOCALHOST, 0)).into())
        .expect("bind 127.0.0.1:0");
    let port = socket
        .local_addr()
        .expect("a bound socket's address")
        .as_socket()
        .expect("an IPv4 address")
        .port();
    Port {
        port,
        _held: socket,
    }
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

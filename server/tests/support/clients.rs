//! The client side of the integration tests: `zookeeper-client` sessions
//! (on a [`TestServer`] or on any connect string), open ACLs, the check that
//! every acknowledged write is on every member, a hand-driven protocol client
//! ([`Raw`]) for what the real clients do not let a test do, and plain HTTP
//! GETs (the AdminServer, `/metrics`).

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use zookeeper_client as zk;

use super::server::TestServer;
use rzk_testkit::ensemble::Member;

/// A session on `server` (10 s timeout).
pub async fn client(server: &TestServer) -> zk::Client {
    client_with_timeout(server, Duration::from_secs(10)).await
}

/// A session on `server` with the given timeout.
pub async fn client_with_timeout(server: &TestServer, timeout: Duration) -> zk::Client {
    client_at(&server.connect_string(), timeout).await
}

/// A session on `connect_string` with the given timeout; panics if none is made.
pub async fn client_at(connect_string: &str, timeout: Duration) -> zk::Client {
    zk::Client::connector()
        .with_session_timeout(timeout)
        .connect(connect_string)
        .await
        .expect("connect")
}

/// A session on `connect_string` (10 s timeout); panics if none is made.
pub async fn connect(connect_string: &str) -> zk::Client {
    client_at(connect_string, Duration::from_secs(10)).await
}

/// Create options with an open ACL.
pub fn open() -> zk::CreateOptions<'static> {
    zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all())
}

/// Writes whose reply arrived: (path, data), in the order acknowledged.
pub type Acked = Arc<Mutex<Vec<(String, Vec<u8>)>>>;

/// I6: every acknowledged write is readable, with its data, on every member
/// in `members` (each read after a `sync` on that member).
pub async fn assert_acked_on_every_member(members: &[Member], acked: &[(String, Vec<u8>)]) {
    for m in members {
        let c = connect(&m.addr()).await;
        c.sync("/").await.unwrap();
        for (path, data) in acked {
            let (got, _) = c
                .get_data(path)
                .await
                .unwrap_or_else(|e| panic!("{path} lost on member {}: {e}", m.id));
            assert_eq!(&got, data, "{path} on member {}", m.id);
        }
    }
}

/// A hand-driven protocol client (rzk-wire's ClientCodec) for what the real
/// clients do not let a test do: stop pinging, pipeline, send bad frames.
pub struct Raw {
    pub framed: tokio_util::codec::Framed<tokio::net::TcpStream, rzk_wire::ClientCodec>,
    pub next_xid: i32,
}

impl Raw {
    /// Connects and sends a ConnectRequest; does not wait for the answer.
    pub async fn open(addr: SocketAddr, req: rzk_wire::ConnectRequest) -> Raw {
        let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        Raw::open_stream(stream, req).await
    }

    /// Sends a ConnectRequest on a connected stream; does not wait for the answer.
    pub async fn open_stream(stream: tokio::net::TcpStream, req: rzk_wire::ConnectRequest) -> Raw {
        use futures::SinkExt;
        let mut framed = tokio_util::codec::Framed::new(stream, rzk_wire::ClientCodec::new());
        framed.send(req).await.unwrap();
        Raw {
            framed,
            next_xid: 1,
        }
    }

    pub fn new_session(timeout_ms: i32) -> rzk_wire::ConnectRequest {
        rzk_wire::ConnectRequest {
            protocol_version: 0,
            last_zxid_seen: rzk_zxid::Zxid::ZERO,
            timeout_ms,
            session_id: rzk_wire::SessionId::NONE,
            passwd: vec![0u8; 16].into(),
            read_only: Some(false),
        }
    }

    /// Connects with a new session and returns the ConnectResponse.
    pub async fn connect(addr: SocketAddr, timeout_ms: i32) -> (Raw, rzk_wire::ConnectResponse) {
        let mut raw = Raw::open(addr, Raw::new_session(timeout_ms)).await;
        match raw.recv().await {
            Some(rzk_wire::client::Incoming::Connect(r)) => (raw, r),
            other => panic!("expected a ConnectResponse, got {other:?}"),
        }
    }

    pub async fn send(&mut self, request: rzk_wire::Request) -> rzk_wire::Xid {
        use futures::SinkExt;
        let xid = rzk_wire::Xid(self.next_xid);
        self.next_xid += 1;
        self.framed
            .send(rzk_wire::RequestFrame { xid, request })
            .await
            .unwrap();
        xid
    }

    /// The next frame, or None at EOF / error / 10 s of silence.
    pub async fn recv(&mut self) -> Option<rzk_wire::client::Incoming> {
        use futures::StreamExt;
        match tokio::time::timeout(Duration::from_secs(10), self.framed.next()).await {
            Ok(Some(Ok(item))) => Some(item),
            _ => None,
        }
    }

    /// The next reply (skipping notifications), decoded as `op`.
    pub async fn reply(&mut self, op: rzk_wire::OpCode) -> rzk_wire::Reply {
        loop {
            match self.recv().await {
                Some(rzk_wire::client::Incoming::Reply(r)) => return r.decode(op).unwrap(),
                Some(rzk_wire::client::Incoming::Notification(_)) => continue,
                other => panic!("expected a reply, got {other:?}"),
            }
        }
    }

    /// Sends and waits for the reply.
    pub async fn call(&mut self, request: rzk_wire::Request) -> rzk_wire::Reply {
        let op = request.opcode();
        self.send(request).await;
        self.reply(op).await
    }

    /// Whether the server closed the connection (EOF within 10 s).
    pub async fn closed(&mut self) -> bool {
        use futures::StreamExt;
        loop {
            match tokio::time::timeout(Duration::from_secs(10), self.framed.next()).await {
                Ok(None) | Ok(Some(Err(_))) => return true,
                Ok(Some(Ok(_))) => continue,
                Err(_) => return false,
            }
        }
    }
}

pub fn create_req(path: &str, data: &[u8], flags: i32) -> rzk_wire::Request {
    rzk_wire::Request::Create(rzk_wire::CreateRequest {
        path: path.into(),
        data: Some(bytes::Bytes::copy_from_slice(data)),
        acl: rzk_wire::Acl::open_unsafe(),
        flags,
    })
}

impl Raw {
    pub async fn send_with_xid(&mut self, xid: rzk_wire::Xid, request: rzk_wire::Request) {
        use futures::SinkExt;
        self.framed
            .send(rzk_wire::RequestFrame { xid, request })
            .await
            .unwrap();
    }
}

/// `GET path` over HTTP/1.0 (no chunked bodies): (status, content type, body).
pub async fn http_get(addr: &str, path: &str) -> (u16, String, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let req = format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    s.write_all(req.as_bytes()).await.unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).await.unwrap();
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let ctype = head
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("content-type")
                .then(|| v.trim().to_owned())
        })
        .unwrap_or_default();
    (status, ctype, body.to_owned())
}

/// The status of `GET path`, or `None` if nothing answers.
pub async fn http_status(addr: &str, path: &str) -> Option<u16> {
    if tokio::net::TcpStream::connect(addr).await.is_err() {
        return None;
    }
    Some(http_get(addr, path).await.0)
}

//! Helpers shared by the integration tests: a server started in the test on a
//! listener bound to 127.0.0.1:0, and waiting on conditions with a deadline.
#![allow(dead_code)]

use std::future::Future;
use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use rzk_server::config::ServerConfig;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// A server running in this test's runtime.
pub struct TestServer {
    pub addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<Result<(), rzk_server::ServerError>>>,
    /// The server's tasks (connections, the core) run on the test's thread: a panic
    /// in any of them fails the test, at the next `eventually` or when the server is
    /// stopped or dropped (I7: bad input never panics the server).
    _trap: rzk_testkit::PanicTrap,
}

impl TestServer {
    /// A server on `dir` with `extra` zoo.cfg settings on top of test defaults
    /// (tickTime 200, container check 100 ms, TTL on, all 4lw).
    pub async fn start(dir: &Path, extra: &[(&str, &str)]) -> TestServer {
        let mut settings: Vec<(String, String)> = vec![
            ("tickTime".into(), "200".into()),
            ("minSessionTimeout".into(), "400".into()),
            ("dataDir".into(), dir.display().to_string()),
            ("clientPortAddress".into(), "127.0.0.1".into()),
            ("znode.container.checkIntervalMs".into(), "100".into()),
            ("zookeeper.extendedTypesEnabled".into(), "true".into()),
            ("4lw.commands.whitelist".into(), "*".into()),
        ];
        settings.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        let config = ServerConfig::load(None, &settings).expect("valid test config");
        TestServer::with_config(config).await
    }

    pub async fn with_config(config: ServerConfig) -> TestServer {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(rzk_server::serve(config, vec![listener], async move {
            let _ = stopped.await;
        }));
        // The listener is bound already: connections wait in the backlog until
        // recovery is done.
        TestServer {
            addr,
            stop: Some(stop),
            task: Some(task),
            _trap: rzk_testkit::PanicTrap::new(),
        }
    }

    pub fn connect_string(&self) -> String {
        self.addr.to_string()
    }

    /// Graceful stop; returns what `serve` returned.
    pub async fn stop(mut self) -> Result<(), rzk_server::ServerError> {
        let _ = self.stop.take().unwrap().send(());
        self.task.take().unwrap().await.unwrap()
    }
}

pub async fn client(server: &TestServer) -> zookeeper_client::Client {
    client_with_timeout(server, Duration::from_secs(10)).await
}

pub async fn client_with_timeout(
    server: &TestServer,
    timeout: Duration,
) -> zookeeper_client::Client {
    zookeeper_client::Client::connector()
        .with_session_timeout(timeout)
        .connect(&server.connect_string())
        .await
        .expect("connect")
}

/// Waits until `cond` is true, failing the test after `max`.
pub async fn eventually<F, Fut>(max: Duration, what: &str, mut cond: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = Instant::now() + max;
    loop {
        if cond().await {
            return;
        }
        rzk_testkit::check_panics();
        assert!(Instant::now() < deadline, "timed out waiting for: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Sends a four-letter word and reads the answer to EOF.
pub async fn four_letter(addr: SocketAddr, word: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(word.as_bytes()).await.unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).await.unwrap();
    out
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

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

pub async fn client_with_timeout(server: &TestServer, timeout: Duration) -> zookeeper_client::Client {
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

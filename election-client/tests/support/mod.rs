//! Test harness for the integration tests: a ZooKeeper endpoint (an Apache ZooKeeper
//! 3.8 started here, or any server or ensemble named by `RZK_TEST_ZK=host:port[,...]`),
//! a controllable TCP proxy, and helpers. Used by the `#[ignore = "needs Apache ZooKeeper"]` tests.

#![allow(dead_code)]

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rzk_election_client::{Client, ClientConfig, Error};
use rzk_testkit::ensemble::{Ensemble, Layout, Program};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::time::Instant;

/// A ZooKeeper endpoint for one test.
pub struct Zk {
    pub addr: String,
    /// The server started here (none when `RZK_TEST_ZK` names one).
    server: Option<Ensemble>,
}

impl Zk {
    /// `RZK_TEST_ZK` if set (the server is someone else's: the rzk server, a shared
    /// ZooKeeper), else a fresh Apache ZooKeeper 3.8 (`rzk_testkit::ensemble`) on a
    /// reserved port with its own data dir, killed when dropped.
    pub fn start() -> Zk {
        if let Ok(addr) = std::env::var("RZK_TEST_ZK") {
            return Zk { addr, server: None };
        }
        static N: Mutex<u32> = Mutex::new(0);
        let n = {
            let mut n = N.lock().expect("n");
            *n += 1;
            *n
        };
        let dir = std::env::temp_dir().join(format!("rzk-eclient-zk-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("zk dir");
        let layout = Layout::standalone().tick_ms(500).set("maxClientCnxns", 0);
        // Reap empty containers every 500 ms, so "the parent was collected" happens
        // within a test.
        let program = Program::zookeeper().jvm_arg("-Dznode.container.checkIntervalMs=500");
        let mut server = Ensemble::new(program, &dir, &layout);
        server.spawn_all();
        let m = &mut server.members[0];
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while m.four_letter_blocking("ruok") != "imok" {
            if let Some(how) = m.exited() {
                panic!(
                    "ZooKeeper {how} (install the Debian packages zookeeper zookeeper-bin):\n{}",
                    m.log_tail(40)
                );
            }
            assert!(
                std::time::Instant::now() < deadline,
                "ZooKeeper did not start: see {}",
                dir.display()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        Zk {
            addr: m.addr(),
            server: Some(server),
        }
    }
}

impl Drop for Zk {
    fn drop(&mut self) {
        if let Some(mut server) = self.server.take() {
            server.members[0].kill9();
            let _ = std::fs::remove_dir_all(&server.root);
        }
    }
}

/// What a [`Proxy`] does with traffic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Forward both ways.
    Pass,
    /// Close every connection and refuse new ones (a reset, an unreachable host).
    Cut,
    /// Keep connections open but forward nothing (a silent partition).
    Blackhole,
}

/// A TCP proxy in front of one server, or of an ensemble, controllable from the test.
pub struct Proxy {
    pub addr: SocketAddr,
    mode: watch::Sender<Mode>,
}

impl Proxy {
    /// `target` is a `host:port`, or a connect string of several (`RZK_TEST_ZK` naming
    /// an ensemble): then each connection goes to the next member in turn that accepts
    /// it, so a client behind the proxy moves to another member when it reconnects.
    pub async fn start(target: &str) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind proxy");
        let addr = listener.local_addr().expect("addr");
        let (mode, rx) = watch::channel(Mode::Pass);
        let targets: Vec<String> = target.split(',').map(|t| t.trim().to_owned()).collect();
        tokio::spawn(async move {
            let mut next = 0usize;
            loop {
                let Ok((inbound, _)) = listener.accept().await else {
                    return;
                };
                if *rx.borrow() == Mode::Cut {
                    drop(inbound);
                    continue;
                }
                let mut outbound = None;
                for _ in 0..targets.len() {
                    let target = &targets[next % targets.len()];
                    next += 1;
                    if let Ok(s) = TcpStream::connect(target).await {
                        outbound = Some(s);
                        break;
                    }
                }
                let Some(outbound) = outbound else {
                    continue;
                };
                let (ri, wi) = inbound.into_split();
                let (ro, wo) = outbound.into_split();
                tokio::spawn(pump(ri, wo, rx.clone()));
                tokio::spawn(pump(ro, wi, rx.clone()));
            }
        });
        Proxy { addr, mode }
    }

    pub fn set(&self, mode: Mode) {
        self.mode.send_replace(mode);
    }

    pub fn connect_string(&self) -> String {
        self.addr.to_string()
    }
}

async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    mut mode: watch::Receiver<Mode>,
) {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let current = *mode.borrow_and_update();
        match current {
            Mode::Cut => return,
            Mode::Blackhole => {
                if mode.changed().await.is_err() {
                    return;
                }
                continue;
            }
            Mode::Pass => {}
        }
        tokio::select! {
            r = from.read(&mut buf) => match r {
                Ok(0) | Err(_) => return,
                Ok(n) => {
                    // Data read just as the mode changed is dropped, like a lost segment.
                    if *mode.borrow() != Mode::Pass {
                        continue;
                    }
                    if to.write_all(&buf[..n]).await.is_err() {
                        return;
                    }
                }
            },
            c = mode.changed() => if c.is_err() { return },
        }
    }
}

pub fn config(connect: &str, session_ms: u64) -> ClientConfig {
    let mut cfg = ClientConfig::new(connect).expect("connect string");
    cfg.session_timeout = Duration::from_millis(session_ms);
    cfg.connect_timeout = Duration::from_millis(session_ms.min(2000));
    cfg
}

pub async fn connect(connect: &str, session_ms: u64) -> Client {
    Client::connect(config(connect, session_ms))
        .await
        .expect("connect")
}

/// End `victim`'s session on the server now: attach a second connection with its id
/// and password, then close that one (Curator 2's KillSession). The victim learns of it
/// on its next contact.
pub async fn expire_session(server: &str, victim: &Client) {
    let creds = victim.session_credentials().expect("victim is connected");
    expire_session_of(server, creds).await;
}

/// End the session `(id, password)` on the server now. If the victim is still
/// connected, it and the killer steal the session from each other (the server closes
/// the older connection), so the killer retries until the server says the session is
/// gone.
pub async fn expire_session_of(
    server: &str,
    (id, passwd): (rzk_election_client::SessionId, bytes::Bytes),
) {
    for _ in 0..20 {
        let mut cfg = config(server, 10_000);
        cfg.resume = Some((id, passwd.clone()));
        let killer = Client::connect(cfg).await.expect("connect");
        let got = killer.session_id();
        killer.close().await;
        match got {
            // The server refused to resume it: it is gone (the killer got a new one).
            Some(other) if other != id => return,
            // Attached (and closed it now, unless the victim stole it back first), or
            // between connections because the victim stole it back already: the
            // session may still be alive, so look again.
            Some(_) | None => {}
        }
    }
    panic!("could not end session {id}");
}

/// Makes `c`'s server catch up with the leader (`sync`) before `c` reads what another
/// client wrote or what the leader did (an expiry): on an ensemble the member `c` is
/// connected to may not have applied it yet, and ZooKeeper promises no more.
pub async fn synced(c: &Client) {
    c.sync("/").await.expect("sync");
}

/// Wait until `f` holds, polling; fail with `what` after `limit`.
pub async fn eventually<F, Fut>(limit: Duration, what: &str, mut f: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + limit;
    while !f().await {
        rzk_testkit::check_panics();
        assert!(
            Instant::now() < deadline,
            "timed out after {limit:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// A unique path prefix per test, so tests can share an external server.
pub fn unique(name: &str) -> String {
    static N: Mutex<u32> = Mutex::new(0);
    let mut n = N.lock().expect("n");
    *n += 1;
    format!(
        "/rzk-test-{name}-{}-{}-{}",
        std::process::id(),
        *n,
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_micros())
            .unwrap_or_default()
    )
}

pub fn is_no_node(e: &Error) -> bool {
    matches!(e, Error::NoNode { .. })
}

pub type Shared<T> = Arc<Mutex<T>>;

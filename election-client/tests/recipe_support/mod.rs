//! Harness of the recipe tests against real servers (`tests/recipes_zk.rs`).
//!
//! - [`Cluster`]: the servers a test runs against, processes started by
//!   `rzk_testkit::ensemble` on reserved loopback ports, each with its own data
//!   directory, killed and started again on the same port and data (a restart). Apache
//!   ZooKeeper 3.8 (Debian `zookeeper`) by default; the rzk server when
//!   `RZK_TEST_RZK_BIN` names its binary, or when `RZK_TEST_ZK` is set (the rzk pass of
//!   `.ci/stages/30-election-client.sh`) and `${CARGO_TARGET_DIR:-target}/release/rzk`
//!   exists. A test takes the cluster's multi-host connect string and its
//!   [`Cluster::kill_leader`] hook, so the same test runs on one member or on an
//!   ensemble ([`Cluster::ensemble`], of the same program: both read the same zoo.cfg
//!   with `server.N` lines and a `myid`).
//! - [`Link`]: one TCP proxy per member in front of one client, cut, black-holed or
//!   passed as a whole (a client's partition).
//! - Helpers: connect, wait for a condition with a deadline, unique paths, a fresh
//!   recursive read of a subtree.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Duration;

use bytes::Bytes;
use rzk_election_client::{Client, ClientConfig, Error, Stat};
use rzk_testkit::ensemble::{Ensemble, Layout, Member, Program};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::time::Instant;

/// The server program the environment asks for (see the module docs).
pub fn program_from_env() -> Program {
    if let Ok(bin) = std::env::var("RZK_TEST_RZK_BIN") {
        return Program::rzk(bin);
    }
    if std::env::var("RZK_TEST_ZK").is_ok() {
        let target = std::env::var("CARGO_TARGET_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|_| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target"));
        let bin = target.join("release/rzk");
        assert!(
            bin.exists(),
            "RZK_TEST_ZK is set but {} does not exist: these tests restart their server, \
             so they start their own; build it (cargo build --release -p rzk-server) or \
             set RZK_TEST_RZK_BIN",
            bin.display()
        );
        return Program::rzk(bin);
    }
    // Empty containers reaped every 500 ms (so "the parent was collected" happens
    // within a test), and TTL nodes, in either mode.
    Program::zookeeper()
        .jvm_arg("-Dznode.container.checkIntervalMs=500")
        .jvm_arg("-Dzookeeper.extendedTypesEnabled=true")
}

/// The servers of one test: a standalone server or an ensemble. Dropping it kills
/// them and removes their directories.
pub struct Cluster {
    ens: Ensemble,
}

impl Cluster {
    /// One standalone server of the program the environment asks for.
    pub fn standalone() -> Cluster {
        let layout = Layout::standalone()
            .tick_ms(500)
            .set("maxClientCnxns", 0)
            .set("zookeeper.extendedTypesEnabled", true);
        Cluster::start(layout)
    }

    /// An ensemble of `n` members of the program the environment asks for, each on
    /// its own loopback client, quorum and election ports (rzk's gRPC uses the quorum
    /// port; it reads the election port and does not listen on it).
    pub fn ensemble(n: usize) -> Cluster {
        let layout = Layout::voters(n)
            .tick_ms(500)
            .init_limit_ticks(20)
            .sync_limit_ticks(10)
            .set("maxClientCnxns", 0)
            .set("znode.container.checkIntervalMs", 500)
            .client_on_server_lines(false);
        Cluster::start(layout)
    }

    fn start(layout: Layout) -> Cluster {
        let root = scratch();
        let mut ens = Ensemble::new(program_from_env(), &root, &layout);
        ens.spawn_all();
        let mut c = Cluster { ens };
        for i in 0..c.ens.members.len() {
            c.wait_up(i);
        }
        c.wait_leader();
        c
    }

    pub fn program(&self) -> &Program {
        &self.ens.program
    }

    /// How many servers.
    pub fn size(&self) -> usize {
        self.ens.members.len()
    }

    /// Every member, as a connect string.
    pub fn connect_string(&self) -> String {
        self.ens.connect_string()
    }

    pub fn addrs(&self) -> Vec<String> {
        self.ens.members.iter().map(Member::addr).collect()
    }

    /// Waits (60 s at most) until member `i` answers `ruok`; panics with its log's
    /// tail if it exits or does not.
    fn wait_up(&mut self, i: usize) {
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        let name = program_name(&self.ens.program);
        let m = &mut self.ens.members[i];
        while m.four_letter_blocking("ruok") != "imok" {
            if let Some(how) = m.exited() {
                panic!("{name} {how}:\n{}", m.log_tail(40));
            }
            assert!(
                std::time::Instant::now() < deadline,
                "{name} did not answer on {}:\n{}",
                m.addr(),
                m.log_tail(40)
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Waits (60 s at most) until a member says it leads (a standalone server leads
    /// itself); returns its index.
    fn wait_leader(&self) -> usize {
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(i) = self.ens.leader_blocking() {
                return i;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "no leader elected:\n{}",
                self.ens.log_tails(30)
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Kill every member and start them again (a full restart), waiting until they
    /// serve again. `down` is how long they stay down (part of the fault).
    pub fn restart(&mut self, down: Duration) {
        for m in self.ens.members.iter_mut() {
            m.kill9();
        }
        std::thread::sleep(down);
        self.ens.spawn_all();
        for i in 0..self.ens.members.len() {
            self.wait_up(i);
        }
        self.wait_leader();
    }

    /// The "kill the leader" hook: kill the member that leads (a standalone server leads
    /// itself), keep it down for `down` (part of the fault), start it again; returns
    /// which member it was.
    pub fn kill_leader(&mut self, down: Duration) -> usize {
        let leader = self.wait_leader();
        self.ens.members[leader].kill9();
        std::thread::sleep(down);
        self.ens.members[leader].spawn();
        self.wait_up(leader);
        let now = self.wait_leader();
        if self.ens.members.len() > 1 {
            println!(
                "killed the leader (member {}); member {} leads now",
                leader + 1,
                now + 1
            );
        }
        leader
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for m in self.ens.members.iter_mut() {
            m.kill9();
        }
        let _ = std::fs::remove_dir_all(&self.ens.root);
    }
}

/// `Apache ZooKeeper 3.8` or `rzk`, for reports.
pub fn program_name(p: &Program) -> &'static str {
    if p.is_zookeeper() {
        "Apache ZooKeeper 3.8"
    } else {
        "rzk"
    }
}

/// A fresh directory for one cluster's servers.
fn scratch() -> PathBuf {
    static N: Mutex<u32> = Mutex::new(0);
    let n = {
        let mut n = N.lock().expect("n");
        *n += 1;
        *n
    };
    let dir = std::env::temp_dir().join(format!("rzk-recipes-{}-{n}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("dir");
    dir
}

/// What a [`Link`] does with traffic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Forward both ways.
    Pass,
    /// Close every connection and refuse new ones (the client learns at once).
    Cut,
    /// Keep connections open but forward nothing (a silent partition).
    Blackhole,
}

/// One client's path to the cluster: a proxy per member, switched together.
pub struct Link {
    pub addrs: Vec<SocketAddr>,
    mode: watch::Sender<Mode>,
}

impl Link {
    pub async fn to(cluster: &Cluster) -> Link {
        let (mode, _) = watch::channel(Mode::Pass);
        let mut addrs = Vec::new();
        for target in cluster.addrs() {
            let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind proxy");
            addrs.push(listener.local_addr().expect("addr"));
            let rx = mode.subscribe();
            tokio::spawn(async move {
                loop {
                    let Ok((inbound, _)) = listener.accept().await else {
                        return;
                    };
                    if *rx.borrow() == Mode::Cut {
                        continue;
                    }
                    let Ok(outbound) = TcpStream::connect(&target).await else {
                        continue;
                    };
                    let (ri, wi) = inbound.into_split();
                    let (ro, wo) = outbound.into_split();
                    tokio::spawn(pump(ri, wo, rx.clone()));
                    tokio::spawn(pump(ro, wi, rx.clone()));
                }
            });
        }
        Link { addrs, mode }
    }

    pub fn set(&self, mode: Mode) {
        self.mode.send_replace(mode);
    }

    pub fn connect_string(&self) -> String {
        self.addrs
            .iter()
            .map(|a| a.to_string())
            .collect::<Vec<_>>()
            .join(",")
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
    cfg.connect_timeout = Duration::from_millis(session_ms.min(1000));
    cfg
}

pub async fn connect(connect: &str, session_ms: u64) -> Client {
    Client::connect(config(connect, session_ms))
        .await
        .expect("connect")
}

/// Runs a test's body on a multi-thread runtime of 2 workers whose threads (workers
/// and blocking threads) report their panics to a [`rzk_testkit::PanicTrap`]: a panic
/// in any task of the test (a writer, a recipe's callback, the client's own tasks)
/// fails the test with its message, even if nothing awaits that task.
pub fn run_trapped<F: std::future::Future<Output = ()>>(body: F) {
    let trap = rzk_testkit::PanicTrap::new();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .on_thread_start(trap.thread_hook())
        .build()
        .expect("a runtime");
    rt.block_on(body);
    drop(rt);
    trap.check();
}

/// Wait until `f` holds, polling; fail with `what` after `limit` (or at once when a
/// task of the test panicked).
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

/// A unique path per test.
pub fn unique(name: &str) -> String {
    static N: Mutex<u32> = Mutex::new(0);
    let mut n = N.lock().expect("n");
    *n += 1;
    format!("/rzk-recipes-{name}-{}-{}", std::process::id(), *n)
}

/// A fresh read of the subtree at `root` (data and stat per path), retried through
/// connection losses; `None` for a missing node anywhere is skipped (it went meanwhile).
/// It starts with a `sync`, so on an ensemble it sees every write that completed
/// before it, whichever member the client is on.
pub async fn read_subtree(client: &Client, root: &str) -> BTreeMap<String, (Bytes, Stat)> {
    loop {
        let read = async {
            client.sync(root).await?;
            try_read_subtree(client, root).await
        };
        match read.await {
            Ok(m) => return m,
            Err(e) if e.is_connection_loss() => tokio::time::sleep(Duration::from_millis(50)).await,
            Err(e) => panic!("reading {root}: {e}"),
        }
    }
}

async fn try_read_subtree(
    client: &Client,
    root: &str,
) -> Result<BTreeMap<String, (Bytes, Stat)>, Error> {
    let mut out = BTreeMap::new();
    let mut todo = vec![root.to_owned()];
    while let Some(p) = todo.pop() {
        match client.get_data(&p).await {
            Ok(v) => {
                out.insert(p.clone(), v);
            }
            Err(Error::NoNode { .. }) => continue,
            Err(e) => return Err(e),
        }
        match client.get_children(&p).await {
            Ok(children) => {
                for c in children {
                    todo.push(if p == "/" {
                        format!("/{c}")
                    } else {
                        format!("{p}/{c}")
                    });
                }
            }
            Err(Error::NoNode { .. }) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(out)
}

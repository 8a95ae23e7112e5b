//! Harness of the recipe tests against real servers (`tests/recipes_zk.rs`).
//!
//! - [`Cluster`]: the servers a test runs against, each a process this harness starts
//!   on a free loopback port with its own data directory, and can kill and start again
//!   on the same port and data (a restart). Apache ZooKeeper 3.8 (Debian `zookeeper`) by
//!   default; the rzk server when `RZK_TEST_RZK_BIN` names its binary, or when
//!   `RZK_TEST_ZK` is set (the rzk pass of `.ci/stages/30-election-client.sh`) and
//!   `${CARGO_TARGET_DIR:-target}/release/rzk` exists. A test takes the cluster's
//!   multi-host connect string and its [`Cluster::kill_leader`] hook, so the same test
//!   runs on one member or on an ensemble ([`Cluster::ensemble`], of the same program:
//!   both read the same zoo.cfg with `server.N` lines and a `myid`).
//! - [`Link`]: one TCP proxy per member in front of one client, cut, black-holed or
//!   passed as a whole (a client's partition).
//! - Helpers: connect, wait for a condition with a deadline, unique paths, a fresh
//!   recursive read of a subtree.

#![allow(dead_code)]

use rzk_testkit::ports::{reserve, Port};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::Duration;

use bytes::Bytes;
use rzk_election_client::{Client, ClientConfig, Error, Stat};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::time::Instant;

/// Which server program.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Program {
    /// Apache ZooKeeper 3.8 from /usr/share/java.
    ZooKeeper,
    /// The rzk binary at this path.
    Rzk(PathBuf),
}

impl Program {
    /// The program the environment asks for (see the module docs).
    pub fn from_env() -> Program {
        if let Ok(bin) = std::env::var("RZK_TEST_RZK_BIN") {
            return Program::Rzk(PathBuf::from(bin));
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
            return Program::Rzk(bin);
        }
        Program::ZooKeeper
    }

    /// A short name for reports.
    pub fn name(&self) -> &'static str {
        match self {
            Program::ZooKeeper => "Apache ZooKeeper 3.8",
            Program::Rzk(_) => "rzk",
        }
    }
}

/// One server process (a standalone server or an ensemble member).
pub struct Server {
    pub program: Program,
    pub id: u32,
    pub port: u16,
    dir: PathBuf,
    child: Option<Child>,
    /// Its client, quorum and election ports (only the client port when
    /// standalone), held while the cluster lives (`rzk_testkit::ports`): a
    /// restarted member finds them free.
    _ports: Vec<Port>,
}

impl Server {
    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    fn spawn(&mut self) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join("server.log"))
            .expect("log");
        let mut cmd = match &self.program {
            Program::ZooKeeper => {
                let mut c = Command::new("java");
                c.arg("-Dzookeeper.admin.enableServer=false")
                    .arg("-Dznode.container.checkIntervalMs=500")
                    .arg("-Dzookeeper.extendedTypesEnabled=true")
                    .args(["-cp", "/usr/share/java/zookeeper.jar"]);
                if self.id == 0 {
                    c.arg("org.apache.zookeeper.server.ZooKeeperServerMain");
                } else {
                    c.arg("org.apache.zookeeper.server.quorum.QuorumPeerMain");
                }
                c.arg(self.dir.join("zoo.cfg"));
                c
            }
            Program::Rzk(bin) => {
                let mut c = Command::new(bin);
                c.arg(self.dir.join("zoo.cfg"));
                c
            }
        };
        let child = cmd
            .stdout(Stdio::from(log.try_clone().expect("log")))
            .stderr(Stdio::from(log))
            .spawn()
            .unwrap_or_else(|e| panic!("starting {}: {e}", self.program.name()));
        self.child = Some(child);
    }

    /// Wait until it answers `ruok`.
    fn wait_up(&mut self) {
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        while !ruok(&self.addr()) {
            if let Some(Ok(Some(status))) = self.child.as_mut().map(|c| c.try_wait()) {
                panic!(
                    "{} exited ({status}): see {}",
                    self.program.name(),
                    self.dir.display()
                );
            }
            assert!(
                std::time::Instant::now() < deadline,
                "{} did not answer on {}: see {}",
                self.program.name(),
                self.addr(),
                self.dir.display()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Kill the process (SIGKILL: a crash), keep its data.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Start it again on the same port and data.
    pub fn start_again(&mut self) {
        assert!(self.child.is_none(), "still running");
        self.spawn();
    }

    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }

    /// What `srvr` says its mode is (`standalone`, `leader`, `follower`).
    pub fn mode(&self) -> Option<String> {
        four_letter(&self.addr(), b"srvr")?
            .lines()
            .find_map(|l| l.strip_prefix("Mode: ").map(|m| m.trim().to_owned()))
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The servers of one test.
pub struct Cluster {
    pub members: Vec<Server>,
}

impl Cluster {
    /// One standalone server of the program the environment asks for.
    pub fn standalone() -> Cluster {
        let program = Program::from_env();
        let reserved = reserve();
        let port = reserved.get();
        let dir = scratch(port);
        let cfg = format!(
            "tickTime=500\ndataDir={}\nclientPort={port}\nclientPortAddress=127.0.0.1\nmaxClientCnxns=0\n4lw.commands.whitelist=*\nadmin.enableServer=false\nzookeeper.extendedTypesEnabled=true\n",
            dir.join("data").display()
        );
        std::fs::write(dir.join("zoo.cfg"), cfg).expect("zoo.cfg");
        let mut s = Server {
            program,
            id: 0,
            port,
            dir,
            child: None,
            _ports: vec![reserved],
        };
        s.spawn();
        s.wait_up();
        Cluster { members: vec![s] }
    }

    /// An ensemble of `n` members of the program the environment asks for, each on
    /// its own loopback client, quorum and election ports (rzk's gRPC uses the quorum
    /// port; it reads the election port and does not listen on it).
    pub fn ensemble(n: u32) -> Cluster {
        let program = Program::from_env();
        let ports: Vec<(Port, Port, Port)> =
            (0..n).map(|_| (reserve(), reserve(), reserve())).collect();
        let servers: String = ports
            .iter()
            .enumerate()
            .map(|(i, (_, q, e))| format!("server.{}=127.0.0.1:{q}:{e}\n", i + 1))
            .collect();
        let mut members = Vec::new();
        for (i, (client, q, e)) in ports.into_iter().enumerate() {
            let id = i as u32 + 1;
            let dir = scratch(client.get());
            std::fs::write(dir.join("data/myid"), format!("{id}\n")).expect("myid");
            let cfg = format!(
                "tickTime=500\ninitLimit=20\nsyncLimit=10\ndataDir={}\nclientPort={client}\nclientPortAddress=127.0.0.1\nmaxClientCnxns=0\n4lw.commands.whitelist=*\nadmin.enableServer=false\nznode.container.checkIntervalMs=500\n{servers}",
                dir.join("data").display()
            );
            std::fs::write(dir.join("zoo.cfg"), cfg).expect("zoo.cfg");
            let mut s = Server {
                program: program.clone(),
                id,
                port: client.get(),
                dir,
                child: None,
                _ports: vec![client, q, e],
            };
            s.spawn();
            members.push(s);
        }
        let mut c = Cluster { members };
        for m in c.members.iter_mut() {
            m.wait_up();
        }
        c.wait_leader();
        c
    }

    pub fn program(&self) -> &Program {
        &self.members[0].program
    }

    /// Every member, as a connect string.
    pub fn connect_string(&self) -> String {
        self.members
            .iter()
            .map(Server::addr)
            .collect::<Vec<_>>()
            .join(",")
    }

    pub fn addrs(&self) -> Vec<String> {
        self.members.iter().map(Server::addr).collect()
    }

    fn wait_leader(&self) -> usize {
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        loop {
            for (i, m) in self.members.iter().enumerate() {
                if m.is_running()
                    && matches!(m.mode().as_deref(), Some("leader") | Some("standalone"))
                {
                    return i;
                }
            }
            assert!(std::time::Instant::now() < deadline, "no leader elected");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Kill every member and start them again (a full restart), waiting until they
    /// serve again.
    pub fn restart(&mut self, down: Duration) {
        for m in self.members.iter_mut() {
            m.kill();
        }
        std::thread::sleep(down);
        for m in self.members.iter_mut() {
            m.start_again();
        }
        for m in self.members.iter_mut() {
            m.wait_up();
        }
        self.wait_leader();
    }

    /// The "kill the leader" hook: kill the member that leads (a standalone server leads
    /// itself), keep it down for `down`, start it again; returns which member it was.
    pub fn kill_leader(&mut self, down: Duration) -> usize {
        let leader = self.wait_leader();
        self.members[leader].kill();
        std::thread::sleep(down);
        self.members[leader].start_again();
        self.members[leader].wait_up();
        let now = self.wait_leader();
        if self.members.len() > 1 {
            println!(
                "killed the leader (member {}); member {} leads now",
                leader + 1,
                now + 1
            );
        }
        leader
    }
}

fn scratch(port: u16) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("rzk-recipes-{}-{port}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("data")).expect("dir");
    dir
}

fn four_letter(addr: &str, word: &[u8]) -> Option<String> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    s.write_all(word).ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).ok()?;
    Some(out)
}

fn ruok(addr: &str) -> bool {
    four_letter(addr, b"ruok").as_deref() == Some("imok")
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

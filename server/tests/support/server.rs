//! Servers inside the test process: [`TestServer`] (standalone, on a
//! listener bound to 127.0.0.1:0), [`Ensemble`] (members serving their client
//! and quorum ports on 127.0.0.1, every port reserved for the ensemble's life,
//! each member's settings the zoo.cfg `rzk_testkit::ensemble` writes for it;
//! a member is stopped gracefully, crashed (its tasks dropped mid-flight, as
//! a kill would) and restarted on the same ports and data) and [`Standalone`]
//! (restarts on its port and data).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use rzk_server::config::ServerConfig;
use rzk_server::{Listeners, Membership, ServerError};
use rzk_testkit::ensemble::{leader_if_settled, Layout, Plan, Role};
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use super::four_letter;

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

/// A member serving: its stop channel and its task.
pub type Running = (oneshot::Sender<()>, JoinHandle<Result<(), ServerError>>);

/// One member of an in-process [`Ensemble`].
pub struct Member {
    /// Its server id (`myid`).
    pub id: u64,
    /// Its client address.
    pub client: SocketAddr,
    /// Its quorum (gRPC) address.
    pub quorum: SocketAddr,
    /// Its data directory (`dataDir`, holding `myid`).
    pub dir: PathBuf,
    /// The zoo.cfg it serves with, as pairs.
    settings: Vec<(String, String)>,
    running: Option<Running>,
}

/// An ensemble of members inside the test process.
pub struct Ensemble {
    pub members: Vec<Member>,
    /// The ports of every member, held while the ensemble lives.
    _plan: Plan,
}

/// The test timing every in-process member gets under a test's own keys.
fn test_layout(n: usize, extra: &[(&str, &str)]) -> Layout {
    let mut layout = Layout::voters(n)
        .tick_ms(200)
        .set("minSessionTimeout", 400)
        .set("maxClientCnxns", 0);
    for (k, v) in extra {
        layout = layout.set(k, v);
    }
    layout
}

/// Binds a member's port again (a restart): the crashed member's listener may
/// not be closed yet, so try for a while.
async fn rebind(addr: SocketAddr) -> TcpListener {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match TcpListener::bind(addr).await {
            Ok(l) => return l,
            Err(e) => {
                assert!(Instant::now() < deadline, "cannot bind {addr} again: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

impl Ensemble {
    /// Starts `n` members under `root` (`m<id>/`) with test timing (tickTime
    /// 200) and `extra` zoo.cfg settings.
    pub async fn start(root: &Path, n: usize, extra: &[(&str, &str)]) -> Ensemble {
        let layout = test_layout(n, extra);
        let plan = Plan::new(&layout);
        let mut members = Vec::new();
        let mut listeners = Vec::new();
        for a in &plan.addrs {
            let dir = root.join(format!("m{}", a.id));
            let settings = plan
                .write_member(&layout, a.id, &dir)
                .expect("a member's directory");
            let client = TcpListener::bind(a.client).await.unwrap();
            let quorum = TcpListener::bind(a.quorum).await.unwrap();
            members.push(Member {
                id: a.id,
                client: a.client,
                quorum: a.quorum,
                dir: dir.join("data"),
                settings,
                running: None,
            });
            listeners.push((client, quorum));
        }
        let mut e = Ensemble {
            members,
            _plan: plan,
        };
        for (i, (client, quorum)) in listeners.into_iter().enumerate() {
            e.spawn(i, client, quorum);
        }
        e
    }

    fn spawn(&mut self, i: usize, client: TcpListener, quorum: TcpListener) {
        let config =
            ServerConfig::load(None, &self.members[i].settings).expect("valid test config");
        self.members[i].running = Some(spawn_member(config, client, quorum));
    }

    /// Restarts a stopped or crashed member on its ports and data.
    pub async fn restart(&mut self, i: usize) {
        assert!(self.members[i].running.is_none(), "member {i} is running");
        let client = rebind(self.members[i].client).await;
        let quorum = rebind(self.members[i].quorum).await;
        self.spawn(i, client, quorum);
    }

    /// Crashes a member: its tasks are dropped where they are, nothing is
    /// flushed or said goodbye to (its connections break, as with kill -9).
    /// A member that had already panicked or failed on its own fails the test
    /// here, with its message, instead of passing as crashed.
    pub async fn crash(&mut self, i: usize) {
        if let Some((_stop, task)) = self.members[i].running.take() {
            task.abort();
            match task.await {
                Err(e) if e.is_cancelled() => {}
                Err(e) => panic!("member {i} had panicked before it was crashed: {e}"),
                Ok(Ok(())) => panic!("member {i} had stopped on its own before it was crashed"),
                Ok(Err(e)) => panic!("member {i} had failed before it was crashed: {e}"),
            }
        }
    }

    /// Stops a member gracefully.
    pub async fn stop(&mut self, i: usize) {
        if let Some((stop, task)) = self.members[i].running.take() {
            let _ = stop.send(());
            task.await.unwrap().expect("a clean stop");
        }
    }

    pub async fn stop_all(&mut self) {
        for i in 0..self.members.len() {
            self.stop(i).await;
        }
    }

    pub fn is_running(&self, i: usize) -> bool {
        self.members[i].running.is_some()
    }

    /// Every member's client address, as a connect string.
    pub fn connect_string(&self) -> String {
        self.members
            .iter()
            .map(|m| m.client.to_string())
            .collect::<Vec<_>>()
            .join(",")
    }

    /// A running member's `srvr` mode (`leader`, `follower`, or `None` while it
    /// does not serve).
    pub async fn mode(&self, i: usize) -> Option<String> {
        if !self.is_running(i) {
            return None;
        }
        let out = self.four_letter(i, "srvr").await;
        rzk_testkit::fourlw::mode(&out).map(str::to_owned)
    }

    /// Waits until exactly one running member leads and every other running
    /// member follows it; returns the leader's index.
    pub async fn wait_settled(&self) -> usize {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let mut view = Vec::new();
            for i in 0..self.members.len() {
                view.push((Role::Voter, self.is_running(i), self.mode(i).await));
            }
            if let Some(leader) = leader_if_settled(&view, false) {
                return leader;
            }
            assert!(
                Instant::now() < deadline,
                "no settled ensemble within 30 s (modes {:?})",
                view.iter().map(|(_, _, m)| m).collect::<Vec<_>>()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// A four-letter word on member `i` ("" if it does not answer).
    pub async fn four_letter(&self, i: usize, word: &str) -> String {
        four_letter(self.members[i].client, word).await
    }
}

/// Serves one member from `config` on listeners already bound, as a task; sending
/// on the returned channel (or dropping it) stops the member gracefully.
pub fn spawn_member(
    config: ServerConfig,
    client: TcpListener,
    quorum: TcpListener,
) -> (oneshot::Sender<()>, JoinHandle<Result<(), ServerError>>) {
    let membership = Membership::of(&config).expect("valid membership");
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        rzk_server::serve_member(
            config,
            &membership,
            Listeners {
                plain: vec![client],
                ..Listeners::default()
            },
            Some(quorum),
            async move {
                let _ = stopped.await;
            },
        )
        .await
    });
    (stop, task)
}

/// A standalone server in this process that can restart on its port and data.
pub struct Standalone {
    pub addr: std::net::SocketAddr,
    config: rzk_server::config::ServerConfig,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<Result<(), rzk_server::ServerError>>>,
}

impl Standalone {
    /// Test timing (tickTime 200), all four-letter words, and `extra`.
    pub async fn start(dir: &std::path::Path, extra: &[(&str, &str)]) -> Standalone {
        let mut settings: Vec<(String, String)> = vec![
            ("tickTime".into(), "200".into()),
            ("minSessionTimeout".into(), "400".into()),
            ("dataDir".into(), dir.display().to_string()),
            ("clientPortAddress".into(), "127.0.0.1".into()),
            ("4lw.commands.whitelist".into(), "*".into()),
        ];
        settings.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        let config = rzk_server::config::ServerConfig::load(None, &settings).expect("valid config");
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let mut s = Standalone {
            addr: listener.local_addr().unwrap(),
            config,
            stop: None,
            task: None,
        };
        s.serve(listener);
        s
    }

    fn serve(&mut self, listener: tokio::net::TcpListener) {
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        self.stop = Some(stop);
        self.task = Some(tokio::spawn(rzk_server::serve(
            self.config.clone(),
            vec![listener],
            async move {
                let _ = stopped.await;
            },
        )));
    }

    /// Stops gracefully.
    pub async fn stop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            task.await.unwrap().expect("a clean stop");
        }
    }

    /// Crashes: the server's tasks are dropped where they are.
    pub async fn crash(&mut self) {
        self.stop = None;
        if let Some(task) = self.task.take() {
            task.abort();
            let _ = task.await;
        }
    }

    /// Stops gracefully and serves again on the same port and data.
    pub async fn restart(&mut self) {
        self.stop().await;
        self.start_again().await;
    }

    /// Serves again on the same port and data (after `stop` or `crash`).
    pub async fn start_again(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(10);
        let listener = loop {
            match tokio::net::TcpListener::bind(self.addr).await {
                Ok(l) => break l,
                Err(e) => {
                    assert!(Instant::now() < deadline, "cannot bind {}: {e}", self.addr);
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
        };
        self.serve(listener);
    }

    /// `mntr`'s `looking_count`.
    pub async fn looking_count(&self) -> u64 {
        let mntr = super::four_letter(self.addr, "mntr").await;
        mntr.lines()
            .find_map(|l| l.strip_prefix("zk_looking_count\t"))
            .unwrap_or_else(|| panic!("no looking_count in mntr:\n{mntr}"))
            .parse()
            .unwrap()
    }
}

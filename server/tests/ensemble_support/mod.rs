//! An ensemble of rzk members inside the test process: each member serves its
//! client port and its quorum port (gRPC) on 127.0.0.1, on ports reserved for the
//! ensemble's life (`rzk_testkit::ports`), with its own data directory and `myid`, exactly as zoo.cfg would
//! describe it. A member can be stopped gracefully, crashed (its tasks dropped
//! mid-flight, as a kill would), and restarted on the same ports and data.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use rzk_server::config::ServerConfig;
use rzk_server::{Listeners, Membership, ServerError};
use rzk_testkit::ports::{reserve, Port};
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// A running member: how to stop it, and its task.
/// A member serving: its stop channel and its task.
pub type Running = (oneshot::Sender<()>, JoinHandle<Result<(), ServerError>>);

/// One member.
pub struct Member {
    pub id: u64,
    pub client: SocketAddr,
    pub quorum: SocketAddr,
    pub dir: PathBuf,
    running: Option<Running>,
    /// Its client, quorum and election ports, held for the ensemble's life
    /// (`rzk_testkit::ports`) so nothing else takes one between restarts.
    _ports: [Port; 3],
}

/// A running ensemble.
pub struct Ensemble {
    pub members: Vec<Member>,
    /// The `server.N` lines every member shares.
    server_lines: Vec<(String, String)>,
    extra: Vec<(String, String)>,
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
    /// Starts `n` members under `root` with test timing (tickTime 200) and
    /// `extra` zoo.cfg settings.
    pub async fn start(root: &Path, n: usize, extra: &[(&str, &str)]) -> Ensemble {
        let mut members = Vec::new();
        let mut listeners = Vec::new();
        let mut server_lines = Vec::new();
        for i in 0..n {
            let id = i as u64 + 1;
            let ports = [reserve(), reserve(), reserve()];
            let client = TcpListener::bind(ports[0].addr()).await.unwrap();
            let quorum = TcpListener::bind(ports[1].addr()).await.unwrap();
            let (c, q) = (ports[0].addr(), ports[1].addr());
            let dir = root.join(format!("m{id}"));
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join("myid"), format!("{id}\n")).unwrap();
            server_lines.push((
                format!("server.{id}"),
                format!("127.0.0.1:{}:{};127.0.0.1:{}", q.port(), ports[2], c.port()),
            ));
            members.push(Member {
                id,
                client: c,
                quorum: q,
                dir,
                running: None,
                _ports: ports,
            });
            listeners.push((client, quorum));
        }
        let mut e = Ensemble {
            members,
            server_lines,
            extra: extra
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        };
        for (i, (client, quorum)) in listeners.into_iter().enumerate() {
            e.spawn(i, client, quorum);
        }
        e
    }

    fn config(&self, i: usize) -> ServerConfig {
        let m = &self.members[i];
        let mut settings: Vec<(String, String)> = vec![
            ("tickTime".into(), "200".into()),
            ("initLimit".into(), "10".into()),
            ("syncLimit".into(), "5".into()),
            ("minSessionTimeout".into(), "400".into()),
            ("dataDir".into(), m.dir.display().to_string()),
            ("clientPortAddress".into(), "127.0.0.1".into()),
            ("clientPort".into(), m.client.port().to_string()),
            ("maxClientCnxns".into(), "0".into()),
            ("4lw.commands.whitelist".into(), "*".into()),
        ];
        settings.extend(self.server_lines.iter().cloned());
        settings.extend(self.extra.iter().cloned());
        ServerConfig::load(None, &settings).expect("valid test config")
    }

    fn spawn(&mut self, i: usize, client: TcpListener, quorum: TcpListener) {
        let config = self.config(i);
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
        let out = four_letter(self.members[i].client, "srvr").await?;
        out.lines()
            .find_map(|l| l.strip_prefix("Mode: "))
            .map(str::to_owned)
    }

    /// Waits until exactly one running member leads and every other running
    /// member follows it; returns the leader's index.
    pub async fn wait_settled(&self) -> usize {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let mut leaders = Vec::new();
            let mut all = true;
            for i in 0..self.members.len() {
                if !self.is_running(i) {
                    continue;
                }
                match self.mode(i).await.as_deref() {
                    Some("leader") => leaders.push(i),
                    Some("follower") => {}
                    _ => all = false,
                }
            }
            if all && leaders.len() == 1 {
                return leaders[0];
            }
            assert!(
                Instant::now() < deadline,
                "no settled ensemble within 30 s (leaders {leaders:?})"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// A four-letter word on member `i`.
    pub async fn four_letter(&self, i: usize, word: &str) -> String {
        four_letter(self.members[i].client, word)
            .await
            .unwrap_or_default()
    }
}

/// Sends a four-letter word and reads the answer to EOF; `None` if the member
/// does not answer.
pub async fn four_letter(addr: SocketAddr, word: &str) -> Option<String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let attempt = async {
        let mut s = tokio::net::TcpStream::connect(addr).await.ok()?;
        s.write_all(word.as_bytes()).await.ok()?;
        let mut out = String::new();
        s.read_to_string(&mut out).await.ok()?;
        Some(out)
    };
    tokio::time::timeout(Duration::from_secs(5), attempt)
        .await
        .ok()
        .flatten()
}

/// A `zookeeper-client` session on the given members.
pub async fn client(connect: &str, timeout: Duration) -> zookeeper_client::Client {
    zookeeper_client::Client::connector()
        .with_session_timeout(timeout)
        .connect(connect)
        .await
        .expect("connect")
}

/// Runs a test's body on a multi-thread runtime of 2 workers whose threads report
/// their panics to an [`rzk_testkit::PanicTrap`]: a panic in any task of any member
/// (which tokio would catch, and the member might survive) fails the test with its
/// message, after the body.
pub fn run_trapped<F: std::future::Future>(body: F) -> F::Output {
    let trap = rzk_testkit::PanicTrap::new();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .on_thread_start(trap.thread_hook())
        .build()
        .expect("a runtime");
    let out = runtime.block_on(body);
    drop(runtime);
    trap.check();
    out
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

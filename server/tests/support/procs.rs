//! Real `rzk` processes on loopback, for the tests that need a process to die
//! (kill -9), stop (SIGSTOP) or be measured (/proc RSS): an ensemble of voters
//! and observers, each with its own data directory, `myid` and zoo.cfg, every
//! port reserved for the ensemble's lifetime (`rzk_testkit::ports`: the kernel
//! chooses it as for port 0, and no other socket can take it between a member's
//! stops and starts), every member's stderr in `<dir>/rzk.log`.
//!
//! ```ignore
//! let root = tempfile::tempdir().unwrap();
//! let mut ens = Procs::new(root.path(), &Layout::voters(3).observers(2));
//! ens.spawn_all();
//! let leader = ens.settled().await;   // one leader, followers, observers
//! ens.members[leader].kill9();
//! ens.members[leader].spawn();        // same ports, same data
//! ```
//!
//! Everything waits on a condition with a deadline; a member's log tail is
//! printed when a wait fails. Dropping a member kills its process.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rzk_testkit::ports::{reserve, Port};

/// Whether a member votes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A participant: `server.N=host:q:e` (the default role).
    Voter,
    /// A non-voting learner: `:observer` on its line everywhere and
    /// `peerType=observer` in its own zoo.cfg (ZooKeeper's layout).
    Observer,
}

/// What to start: how many voters (ids 1..=voters), how many observers (the
/// ids after them), and zoo.cfg settings on top of the defaults (for every
/// member, then for single members).
#[derive(Clone, Debug)]
pub struct Layout {
    voters: usize,
    observers: usize,
    settings: Vec<(String, String)>,
    member_settings: Vec<(u64, String, String)>,
}

impl Layout {
    /// `n` voters, no observer.
    pub fn voters(n: usize) -> Layout {
        Layout {
            voters: n,
            observers: 0,
            settings: Vec::new(),
            member_settings: Vec::new(),
        }
    }

    /// Adds `n` observers after the voters.
    pub fn observers(mut self, n: usize) -> Layout {
        self.observers = n;
        self
    }

    /// Sets a zoo.cfg key for every member (replaces a default of that key).
    pub fn set(mut self, key: &str, value: impl ToString) -> Layout {
        self.settings.retain(|(k, _)| k != key);
        self.settings.push((key.to_owned(), value.to_string()));
        self
    }

    /// Sets a zoo.cfg key for member `id` only (replaces that member's value
    /// of the key from [`Layout::set`] or the defaults).
    pub fn set_for(mut self, id: u64, key: &str, value: impl ToString) -> Layout {
        self.member_settings
            .retain(|(i, k, _)| *i != id || k != key);
        self.member_settings
            .push((id, key.to_owned(), value.to_string()));
        self
    }
}

/// The settings every member gets unless the layout replaces them: fast
/// ticks for tests, every four-letter word, no AdminServer.
const DEFAULTS: &[(&str, &str)] = &[
    ("tickTime", "200"),
    ("initLimit", "10"),
    ("syncLimit", "5"),
    ("minSessionTimeout", "400"),
    ("maxClientCnxns", "0"),
    ("4lw.commands.whitelist", "*"),
    ("admin.enableServer", "false"),
];

/// One `rzk` process (running or not).
pub struct Proc {
    /// Its server id (`myid`).
    pub id: u64,
    /// Voter or observer.
    pub kind: Kind,
    /// Its client port on 127.0.0.1.
    pub client: SocketAddr,
    /// Its quorum port on 127.0.0.1.
    pub quorum: SocketAddr,
    /// Its zoo.cfg.
    pub cfg: PathBuf,
    /// Its directory: `data/` (dataDir), `zoo.cfg`, `rzk.log`.
    pub dir: PathBuf,
    child: Option<Child>,
}

impl Proc {
    /// Starts the process (appending its stderr to `rzk.log`).
    pub fn spawn(&mut self) {
        assert!(self.child.is_none(), "member {} is running", self.id);
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join("rzk.log"))
            .unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_rzk"))
            .arg(&self.cfg)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::from(log))
            .spawn()
            .unwrap();
        self.child = Some(child);
    }

    /// SIGKILL and reap (nothing if it is not running).
    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            c.kill().unwrap();
            c.wait().unwrap();
        }
    }

    /// Whether the process was started and not killed.
    pub fn running(&self) -> bool {
        self.child.is_some()
    }

    /// The process id (panics if it is not running).
    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("running").id()
    }

    /// Sends SIGSTOP or SIGCONT (`"STOP"`, `"CONT"`): a stopped member keeps
    /// its connections open and answers nothing. A stop returns only once every
    /// thread of the process is stopped (the signal is delivered to each thread
    /// on its own), so what the caller does next cannot reach a running member.
    pub fn signal(&self, sig: &str) {
        let pid = self.pid();
        if sig == "STOP" {
            rzk_testkit::procs::stop(pid);
            return;
        }
        let ok = Command::new("kill")
            .arg(format!("-{sig}"))
            .arg(pid.to_string())
            .status()
            .unwrap()
            .success();
        assert!(ok, "kill -{sig} {pid}");
    }

    /// `127.0.0.1:<client port>`.
    pub fn addr(&self) -> String {
        self.client.to_string()
    }

    /// Everything the process wrote to stderr.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("rzk.log")).unwrap_or_default()
    }

    /// The last `n` lines of the log, oldest first.
    pub fn log_tail(&self, n: usize) -> String {
        let log = self.log();
        let tail: Vec<&str> = log.lines().rev().take(n).collect();
        tail.into_iter().rev().collect::<Vec<_>>().join("\n")
    }

    /// A field of /proc/<pid>/status in KiB (VmRSS, VmHWM).
    pub fn status_kib(&self, field: &str) -> u64 {
        let pid = self.pid();
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
        status
            .lines()
            .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or_else(|| panic!("{field} in /proc/{pid}/status"))
    }

    /// The answer to a four-letter word, or "" when the member does not
    /// answer within 5 s (not running, stopped, not listening yet).
    pub async fn four_letter(&self, word: &str) -> String {
        if !self.running() {
            return String::new();
        }
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let attempt = async {
            let mut s = tokio::net::TcpStream::connect(self.client).await.ok()?;
            s.write_all(word.as_bytes()).await.ok()?;
            let mut out = String::new();
            s.read_to_string(&mut out).await.ok()?;
            Some(out)
        };
        tokio::time::timeout(Duration::from_secs(5), attempt)
            .await
            .ok()
            .flatten()
            .unwrap_or_default()
    }

    /// `Mode:` of `srvr` (leader, follower, observer), if it answers.
    pub async fn mode(&self) -> Option<String> {
        field(&self.four_letter("srvr").await, "Mode:").map(str::to_owned)
    }

    /// The value of `zk_<key>` in `mntr`, if it answers and has the key.
    pub async fn mntr_row(&self, key: &str) -> Option<String> {
        let mntr = self.four_letter("mntr").await;
        row(&mntr, key).map(str::to_owned)
    }

    /// Waits until `srvr` says `Mode: <mode>`, up to `within`.
    pub async fn wait_mode(&self, mode: &str, within: Duration) {
        let deadline = Instant::now() + within;
        loop {
            if self.mode().await.as_deref() == Some(mode) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "member {} not {mode} within {within:?}; log tail:\n{}",
                self.id,
                self.log_tail(20)
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if let Some(child) = &self.child {
            // CONT first, so a member a failed test left stopped dies at once
            // and `wait` is prompt.
            let _ = Command::new("kill")
                .arg("-CONT")
                .arg(child.id().to_string())
                .status();
        }
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// The trimmed rest of the first line of `text` that starts with `prefix`.
pub fn field<'a>(text: &'a str, prefix: &str) -> Option<&'a str> {
    text.lines()
        .find_map(|l| l.strip_prefix(prefix))
        .map(str::trim)
}

/// The value of `zk_<key>` in a `mntr` answer.
pub fn row<'a>(mntr: &'a str, key: &str) -> Option<&'a str> {
    mntr.lines()
        .find_map(|l| l.strip_prefix("zk_")?.strip_prefix(key)?.strip_prefix('\t'))
}

/// An ensemble of processes described by a [`Layout`].
pub struct Procs {
    /// Voters first (ids 1..), then observers.
    pub members: Vec<Proc>,
    /// Every member's client, quorum and election port, held while the
    /// ensemble lives so a restarted member finds its ports free.
    _ports: Vec<(Port, Port, Port)>,
}

impl Procs {
    /// Writes every member's directory, `myid` and zoo.cfg under `root`
    /// (`m<id>/`); starts nothing.
    pub fn new(root: &Path, layout: &Layout) -> Procs {
        let n = layout.voters + layout.observers;
        let kinds = (0..n).map(|i| {
            if i < layout.voters {
                Kind::Voter
            } else {
                Kind::Observer
            }
        });
        let ports: Vec<(Port, Port, Port)> =
            (0..n).map(|_| (reserve(), reserve(), reserve())).collect();
        let servers: String = kinds
            .clone()
            .zip(&ports)
            .enumerate()
            .map(|(i, (kind, (c, q, e)))| {
                let role = match kind {
                    Kind::Voter => "",
                    Kind::Observer => ":observer",
                };
                format!("server.{}=127.0.0.1:{q}:{e}{role};127.0.0.1:{c}\n", i + 1)
            })
            .collect();
        let members = kinds
            .zip(&ports)
            .enumerate()
            .map(|(i, (kind, (c, q, _)))| {
                let id = i as u64 + 1;
                let dir = root.join(format!("m{id}"));
                std::fs::create_dir_all(dir.join("data")).unwrap();
                std::fs::write(dir.join("data").join("myid"), format!("{id}\n")).unwrap();
                let mut settings: Vec<(String, String)> = DEFAULTS
                    .iter()
                    .filter(|(k, _)| !layout.settings.iter().any(|(s, _)| s == k))
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect();
                settings.extend(layout.settings.iter().cloned());
                for (_, key, value) in layout.member_settings.iter().filter(|(i, _, _)| *i == id) {
                    settings.retain(|(k, _)| k != key);
                    settings.push((key.clone(), value.clone()));
                }
                settings.push(("dataDir".into(), dir.join("data").display().to_string()));
                settings.push(("clientPort".into(), c.to_string()));
                settings.push(("clientPortAddress".into(), "127.0.0.1".into()));
                if kind == Kind::Observer {
                    settings.push(("peerType".into(), "observer".into()));
                }
                let mut text: String = settings.iter().map(|(k, v)| format!("{k}={v}\n")).collect();
                text.push_str(&servers);
                let cfg = dir.join("zoo.cfg");
                std::fs::write(&cfg, text).unwrap();
                Proc {
                    id,
                    kind,
                    client: format!("127.0.0.1:{c}").parse().unwrap(),
                    quorum: format!("127.0.0.1:{q}").parse().unwrap(),
                    cfg,
                    dir,
                    child: None,
                }
            })
            .collect();
        Procs {
            members,
            _ports: ports,
        }
    }

    /// Starts every member that is not running.
    pub fn spawn_all(&mut self) {
        for m in self.members.iter_mut().filter(|m| !m.running()) {
            m.spawn();
        }
    }

    /// Every member's client address, comma-separated.
    pub fn connect_string(&self) -> String {
        self.members
            .iter()
            .map(Proc::addr)
            .collect::<Vec<_>>()
            .join(",")
    }

    /// The indexes of the observers.
    pub fn observers(&self) -> Vec<usize> {
        (0..self.members.len())
            .filter(|i| self.members[*i].kind == Kind::Observer)
            .collect()
    }

    /// Waits (60 s at most) until exactly one running member leads, every
    /// other running voter follows and every running observer observes;
    /// returns the leader's index.
    pub async fn settled(&self) -> usize {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let mut leaders = Vec::new();
            let mut ok = true;
            for (i, m) in self.members.iter().enumerate() {
                if !m.running() {
                    continue;
                }
                match (m.kind, m.mode().await.as_deref()) {
                    (Kind::Voter, Some("leader")) => leaders.push(i),
                    (Kind::Voter, Some("follower")) | (Kind::Observer, Some("observer")) => {}
                    _ => ok = false,
                }
            }
            if ok && leaders.len() == 1 {
                return leaders[0];
            }
            if Instant::now() > deadline {
                for m in &self.members {
                    eprintln!("--- member {} log tail:\n{}", m.id, m.log_tail(30));
                }
                panic!("no settled ensemble within 60 s (leaders {leaders:?})");
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

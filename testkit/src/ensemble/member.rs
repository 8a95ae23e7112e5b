//! One member's process: start, signal, stop, and what it says.

use std::fs::OpenOptions;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::layout::{Addrs, Role};
use super::program::Launch;
use crate::fourlw;

/// How long [`Member::term`] waits for an exit after SIGTERM before SIGKILL.
pub const TERM_GRACE: Duration = Duration::from_secs(30);

/// The process of a member.
#[derive(Debug)]
enum Proc {
    /// Started by this process: waited for (and killed when dropped).
    Child(Child),
    /// Started by another process (the CLI's `start`), known by pid and start
    /// time (a pid the kernel gave to another process since is not it).
    Detached { pid: u32, start_ticks: u64 },
}

/// One member of an [`super::Ensemble`] (running or not). Dropping it kills a
/// process it started.
#[derive(Debug)]
pub struct Member {
    /// Its server id (`myid`; 1 for a standalone server).
    pub id: u64,
    /// Voter or observer.
    pub role: Role,
    /// Its client address.
    pub client: SocketAddr,
    /// The quorum address of its `server.N` line.
    pub quorum: SocketAddr,
    /// The election address of its `server.N` line.
    pub election: SocketAddr,
    /// Its AdminServer, if the layout gives one.
    pub admin: Option<SocketAddr>,
    /// Its Prometheus endpoint, if the layout gives one.
    pub metrics: Option<SocketAddr>,
    /// Its observer-master port, if it has one.
    pub observer_master: Option<SocketAddr>,
    /// Its directory: `zoo.cfg`, `data/` (dataDir, with `myid`), `server.log`.
    pub dir: PathBuf,
    /// Its zoo.cfg.
    pub cfg: PathBuf,
    /// Its stdout and stderr, appended to across restarts.
    pub log_path: PathBuf,
    pub(crate) launch: Launch,
    proc: Option<Proc>,
}

impl Member {
    pub(crate) fn new(a: &Addrs, dir: PathBuf, launch: Launch) -> Member {
        Member {
            id: a.id,
            role: a.role,
            client: a.client,
            quorum: a.quorum,
            election: a.election,
            admin: a.admin,
            metrics: a.metrics,
            observer_master: a.observer_master,
            cfg: dir.join("zoo.cfg"),
            log_path: dir.join("server.log"),
            dir,
            launch,
            proc: None,
        }
    }

    /// A member another process started (pid 0: not running).
    pub(crate) fn attached(mut self, pid: u32, start_ticks: u64) -> Member {
        if pid != 0 {
            self.proc = Some(Proc::Detached { pid, start_ticks });
        }
        self
    }

    /// Its data directory (`dataDir`, where `myid` is).
    pub fn data_dir(&self) -> PathBuf {
        self.dir.join("data")
    }

    /// Starts the process, its output appended to [`Member::log_path`].
    /// Panics if it is running or cannot be started.
    pub fn spawn(&mut self) {
        if let Err(e) = self.try_spawn() {
            panic!("member {}: {e}", self.id);
        }
    }

    /// [`Member::spawn`], with the reason as an error.
    pub fn try_spawn(&mut self) -> Result<(), String> {
        if self.is_alive() {
            return Err("it is running".to_owned());
        }
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log_path)
            .map_err(|e| format!("{}: {e}", self.log_path.display()))?;
        let err = log.try_clone().map_err(|e| e.to_string())?;
        let mut cmd = Command::new(&self.launch.program);
        cmd.args(&self.launch.args)
            .envs(self.launch.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(Stdio::from(log))
            .stderr(Stdio::from(err));
        for k in &self.launch.env_remove {
            cmd.env_remove(k);
        }
        let child = cmd
            .spawn()
            .map_err(|e| format!("starting {}: {e}", self.launch.program.display()))?;
        self.proc = Some(Proc::Child(child));
        Ok(())
    }

    /// Whether the process was started and not killed or stopped by us (it
    /// may have exited on its own: [`Member::exited`]).
    pub fn running(&self) -> bool {
        self.proc.is_some()
    }

    /// Whether the process is running now (started, not exited; a zombie is
    /// not running).
    pub fn is_alive(&mut self) -> bool {
        match &mut self.proc {
            None => false,
            Some(Proc::Child(c)) => matches!(c.try_wait(), Ok(None)),
            Some(Proc::Detached { pid, start_ticks }) => alive(*pid, *start_ticks),
        }
    }

    /// How the process ended, if it was started (and not killed or stopped
    /// by us) and has ended on its own: `exited (<status>)`, or `is gone` for
    /// a process another process started.
    pub fn exited(&mut self) -> Option<String> {
        match &mut self.proc {
            None => None,
            Some(Proc::Child(c)) => Some(format!("exited ({})", c.try_wait().ok()??)),
            Some(Proc::Detached { pid, start_ticks }) => {
                (!alive(*pid, *start_ticks)).then(|| "is gone".to_owned())
            }
        }
    }

    /// The process id (panics if it is not running).
    pub fn pid(&self) -> u32 {
        self.pid_opt().expect("the member is running")
    }

    /// The process id, if running.
    pub fn pid_opt(&self) -> Option<u32> {
        match &self.proc {
            None => None,
            Some(Proc::Child(c)) => Some(c.id()),
            Some(Proc::Detached { pid, .. }) => Some(*pid),
        }
    }

    /// When the kernel started the process, in clock ticks after boot (what
    /// tells this process from a later one with the same pid).
    pub(crate) fn start_ticks(&self) -> u64 {
        match &self.proc {
            None => 0,
            Some(Proc::Child(c)) => start_ticks(c.id()).unwrap_or(0),
            Some(Proc::Detached { start_ticks, .. }) => *start_ticks,
        }
    }

    /// SIGKILL (a crash: nothing flushed, connections reset), then waits
    /// until the process is gone. Nothing if it is not running.
    pub fn kill9(&mut self) {
        match self.proc.take() {
            None => {}
            Some(Proc::Child(mut c)) => {
                let _ = c.kill();
                let _ = c.wait();
            }
            Some(Proc::Detached { pid, start_ticks }) => {
                if alive(pid, start_ticks) {
                    signal(pid, "KILL");
                }
                wait_gone(pid, start_ticks, Duration::from_secs(10));
            }
        }
    }

    /// SIGTERM (a graceful stop), then waits up to `grace` for the exit and
    /// sends SIGKILL after it. A stopped process is continued first, so it can
    /// act on the signal. Nothing if it is not running.
    pub fn term(&mut self, grace: Duration) {
        self.send_term();
        self.wait_exit(Instant::now() + grace);
    }

    /// SIGTERM and SIGCONT (a stopped process acts on the first only once
    /// continued), if it is running.
    pub(crate) fn send_term(&mut self) {
        if let (Some(pid), true) = (self.pid_opt(), self.is_alive()) {
            signal(pid, "TERM");
            signal(pid, "CONT");
        }
    }

    /// Waits until the process exits, up to `deadline`, then SIGKILL; forgets it.
    pub(crate) fn wait_exit(&mut self, deadline: Instant) {
        while self.is_alive() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        self.kill9();
    }

    /// SIGSTOP, returning once every thread of the process is stopped (the
    /// signal reaches each thread on its own): a stopped member keeps its
    /// connections open and answers nothing.
    pub fn pause(&self) {
        crate::procs::stop(self.pid());
    }

    /// SIGCONT.
    pub fn resume(&self) {
        signal(self.pid(), "CONT");
    }

    /// `<host>:<client port>`, for connect strings.
    pub fn addr(&self) -> String {
        self.client.to_string()
    }

    /// Everything the process wrote.
    pub fn log(&self) -> String {
        std::fs::read(&self.log_path)
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .unwrap_or_default()
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
    /// answer (not running, stopped, not listening yet).
    pub async fn four_letter(&self, word: &str) -> String {
        if !self.running() {
            return String::new();
        }
        fourlw::four_letter_async(self.client, word)
            .await
            .unwrap_or_default()
    }

    /// [`Member::four_letter`], blocking the calling thread.
    pub fn four_letter_blocking(&self, word: &str) -> String {
        if !self.running() {
            return String::new();
        }
        fourlw::four_letter(self.client, word).unwrap_or_default()
    }

    /// `Mode:` of `srvr` (leader, follower, observer, standalone), if it
    /// answers and serves.
    pub async fn mode(&self) -> Option<String> {
        fourlw::mode(&self.four_letter("srvr").await).map(str::to_owned)
    }

    /// [`Member::mode`], blocking the calling thread.
    pub fn mode_blocking(&self) -> Option<String> {
        fourlw::mode(&self.four_letter_blocking("srvr")).map(str::to_owned)
    }

    /// The value of `zk_<key>` in `mntr`, if it answers and has the key.
    pub async fn mntr_row(&self, key: &str) -> Option<String> {
        let mntr = self.four_letter("mntr").await;
        fourlw::mntr_row(&mntr, key).map(str::to_owned)
    }

    /// Waits until `srvr` says `Mode: <mode>`, up to `within`; panics with the
    /// log's tail after it.
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

    /// Forgets a process it started without killing it (the CLI leaves the
    /// members running when it exits).
    pub(crate) fn detach(&mut self) {
        if let Some(Proc::Child(c)) = &self.proc {
            let pid = c.id();
            let ticks = start_ticks(pid).unwrap_or(0);
            self.proc = Some(Proc::Detached {
                pid,
                start_ticks: ticks,
            });
        }
    }
}

impl Drop for Member {
    fn drop(&mut self) {
        if let Some(Proc::Child(c)) = &mut self.proc {
            // CONT first, so a member a failed test left stopped dies at once
            // and `wait` is prompt.
            signal(c.id(), "CONT");
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// `kill -<sig> <pid>`, quietly (the process may be gone).
fn signal(pid: u32, sig: &str) {
    let _ = Command::new("kill")
        .arg(format!("-{sig}"))
        .arg(pid.to_string())
        .stderr(Stdio::null())
        .status();
}

/// The start time of `pid` (field 22 of /proc/<pid>/stat), and its state.
fn stat(pid: u32) -> Option<(char, u64)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The name may hold spaces and parentheses: fields count after the last ')'.
    let rest = stat.rsplit_once(')')?.1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let state = fields.first()?.chars().next()?;
    let ticks = fields.get(19)?.parse().ok()?;
    Some((state, ticks))
}

/// The start time of `pid`, if it exists.
pub(crate) fn start_ticks(pid: u32) -> Option<u64> {
    stat(pid).map(|(_, t)| t)
}

/// Whether `pid` is the process that started at `ticks` and has not exited
/// (a zombie has exited; 0 ticks: unknown, any process with that pid).
pub(crate) fn alive(pid: u32, ticks: u64) -> bool {
    stat(pid).is_some_and(|(state, t)| (ticks == 0 || t == ticks) && !matches!(state, 'Z' | 'X'))
}

/// Waits until `pid` has exited (up to `within`).
fn wait_gone(pid: u32, ticks: u64, within: Duration) {
    let deadline = Instant::now() + within;
    while alive(pid, ticks) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_process_is_known_by_pid_and_start_time() {
        let mut c = Command::new("sleep").arg("30").spawn().unwrap();
        let pid = c.id();
        let ticks = start_ticks(pid).unwrap();
        assert!(alive(pid, ticks));
        assert!(
            !alive(pid, ticks + 1),
            "another start time is another process"
        );
        c.kill().unwrap();
        // Not reaped yet: a zombie, which is not alive.
        wait_gone(pid, ticks, Duration::from_secs(10));
        assert!(!alive(pid, ticks));
        c.wait().unwrap();
    }
}

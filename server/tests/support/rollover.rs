//! A client workload for epoch-rollover tests (I3), run against any rzk
//! deployment through its client ports only: independent `zookeeper-client`
//! sessions that create nodes one after another, each checking that the zxids
//! it is given only grow, and counting every error and every lost connection.
//! After the run, [`verify`] reads every acknowledged node back. The servers
//! are the test's: in-process ([`super::server`]) or processes
//! ([`super::procs`]).

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rzk_zxid::{CounterLimit, Epoch, Zxid};
use tokio::sync::watch;
use zookeeper_client as zk;

/// What one session saw.
#[derive(Debug, Default, Clone)]
pub struct SessionLog {
    /// The session's index.
    pub index: usize,
    /// Acknowledged creates: (node name under the session's parent, czxid),
    /// in the order they were acknowledged.
    pub acked: Vec<(String, Zxid)>,
    /// Every error an operation returned, with the node it was for (with
    /// `retry_lost`, those that are not a lost answer).
    pub errors: Vec<String>,
    /// With `retry_lost`: writes whose answer was lost with the connection
    /// (see [`is_lost`]), each then settled on the next connection.
    pub lost: Vec<String>,
    /// Transitions of the session to `Disconnected` after it first connected.
    pub disconnects: u64,
    /// Zxids that were not above the one before (must stay empty).
    pub order_violations: Vec<(Zxid, Zxid)>,
    /// Per write: when it was sent (since the workload began), how long it
    /// took, and its zxid.
    pub latencies: Vec<(Duration, Duration, Zxid)>,
}

/// What the sessions are told to do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Write.
    Run,
    /// Finish the current write and wait (connections stay open).
    Pause,
    /// Finish the current write and end.
    Stop,
}

/// Shared progress of a running workload, and its controls.
#[derive(Debug)]
pub struct Progress {
    /// The highest zxid any session was given.
    pub max_zxid: AtomicU64,
    /// Acknowledged writes, all sessions.
    pub acked: AtomicU64,
    /// Sessions waiting in [`Phase::Pause`].
    pub paused: AtomicUsize,
    /// Errors and lost connections so far, all sessions (a run that must
    /// have none fails at the first, see [`wait_for_epoch_clean`]).
    pub troubles: AtomicU64,
    phase: watch::Sender<Phase>,
}

impl Default for Progress {
    fn default() -> Self {
        Progress {
            max_zxid: AtomicU64::new(0),
            acked: AtomicU64::new(0),
            paused: AtomicUsize::new(0),
            troubles: AtomicU64::new(0),
            phase: watch::Sender::new(Phase::Run),
        }
    }
}

impl Progress {
    pub fn max_zxid(&self) -> Zxid {
        Zxid::from_u64(self.max_zxid.load(Ordering::Acquire))
    }

    /// Tells the sessions what to do next.
    pub fn set(&self, phase: Phase) {
        self.phase.send_replace(phase);
    }

    /// Stops the sessions after their current write.
    pub fn stop(&self) {
        self.set(Phase::Stop);
    }

    /// Pauses the sessions and waits until all `sessions` are idle.
    pub async fn pause(&self, sessions: usize) {
        self.set(Phase::Pause);
        let deadline = Instant::now() + Duration::from_secs(60);
        while self.paused.load(Ordering::Acquire) < sessions {
            assert!(Instant::now() < deadline, "the sessions did not pause");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
}

/// The workload's settings.
#[derive(Clone, Debug)]
pub struct Workload {
    /// The connect string (every member).
    pub connect: String,
    /// Sessions, each with one write in flight.
    pub sessions: usize,
    /// The parent of the sessions' nodes (created if missing).
    pub root: String,
    /// Session timeout.
    pub session_timeout: Duration,
    /// Bytes of data per node.
    pub data_bytes: usize,
    /// Whether a lost connection is expected (a member is killed): the write
    /// whose answer was lost is retried on the next connection until it is
    /// known to be applied. Without it every error is counted and the session
    /// moves on.
    pub retry_lost: bool,
}

impl Workload {
    pub fn new(connect: &str, sessions: usize) -> Workload {
        Workload {
            connect: connect.to_owned(),
            sessions,
            root: "/rollover".to_owned(),
            session_timeout: Duration::from_secs(20),
            data_bytes: 32,
            retry_lost: false,
        }
    }

    /// Starts the sessions; they write until `progress.stop` is set.
    pub async fn start(&self, progress: Arc<Progress>) -> Running {
        let setup = connect(&self.connect, self.session_timeout).await;
        match setup.create(&self.root, b"", &open()).await {
            Ok(_) | Err(zk::Error::NodeExists) => {}
            Err(e) => panic!("create {}: {e}", self.root),
        }
        // A write now tells where the run starts.
        let stat = setup
            .set_data(&self.root, b"start", None)
            .await
            .expect("the first write");
        let start = Zxid::from_i64(stat.mzxid);
        let mut tasks = Vec::new();
        let epoch = Instant::now();
        for index in 0..self.sessions {
            let w = self.clone();
            let p = progress.clone();
            tasks.push(tokio::spawn(
                async move { w.session(index, p, epoch).await },
            ));
        }
        Running { tasks, start }
    }

    async fn session(self, index: usize, progress: Arc<Progress>, began: Instant) -> SessionLog {
        let client = connect(&self.connect, self.session_timeout).await;
        let disconnects = Arc::new(AtomicU64::new(0));
        let mut watcher = client.state_watcher();
        let count = disconnects.clone();
        let p = progress.clone();
        let watching = tokio::spawn(async move {
            loop {
                match watcher.changed().await {
                    zk::SessionState::Disconnected => {
                        count.fetch_add(1, Ordering::AcqRel);
                        p.troubles.fetch_add(1, Ordering::AcqRel);
                    }
                    zk::SessionState::SyncConnected | zk::SessionState::ConnectedReadOnly => {}
                    zk::SessionState::AuthFailed
                    | zk::SessionState::Expired
                    | zk::SessionState::Closed => return,
                }
            }
        });
        let mut log = SessionLog {
            index,
            ..SessionLog::default()
        };
        let parent = format!("{}/s{index}", self.root);
        if let Err(e) = create_retrying(&client, &parent, b"", self.retry_lost).await {
            log.errors.push(format!("{parent}: {e}"));
        }
        let data = vec![b'x'; self.data_bytes];
        let mut last = Zxid::ZERO;
        let mut n = 0u64;
        let mut phase = progress.phase.subscribe();
        loop {
            let now = *phase.borrow_and_update();
            match now {
                Phase::Run => {}
                Phase::Stop => break,
                Phase::Pause => {
                    progress.paused.fetch_add(1, Ordering::AcqRel);
                    let _ = phase.changed().await;
                    progress.paused.fetch_sub(1, Ordering::AcqRel);
                    continue;
                }
            }
            n += 1;
            let name = format!("n{n:08}");
            let path = format!("{parent}/{name}");
            let sent = Instant::now();
            let result = client.create(&path, &data, &open()).await;
            let took = sent.elapsed();
            let zxid = match result {
                Ok((stat, _)) => Zxid::from_i64(stat.czxid),
                Err(e) => {
                    progress.troubles.fetch_add(1, Ordering::AcqRel);
                    if !self.retry_lost || !is_lost(&e) {
                        log.errors.push(format!("{path}: {e}"));
                        continue;
                    }
                    log.lost.push(format!("{path}: {e}"));
                    // The answer was lost: the create may or may not have been
                    // applied. Find out on the next connection.
                    match settle_lost_create(&client, &path, &data).await {
                        Some(z) => z,
                        None => {
                            log.errors.push(format!("{path}: lost, and not settled"));
                            continue;
                        }
                    }
                }
            };
            if zxid <= last {
                log.order_violations.push((last, zxid));
            }
            last = last.max(zxid);
            log.acked.push((name, zxid));
            log.latencies.push((sent.duration_since(began), took, zxid));
            progress.max_zxid.fetch_max(zxid.as_u64(), Ordering::AcqRel);
            progress.acked.fetch_add(1, Ordering::AcqRel);
        }
        log.disconnects = disconnects.load(Ordering::Acquire);
        drop(client);
        watching.abort();
        log
    }
}

/// Whether an error means the answer was lost with the connection (reset,
/// closed, timed out): the write may or may not have been applied.
pub fn is_lost(e: &zk::Error) -> bool {
    matches!(
        e,
        zk::Error::ConnectionLoss
            | zk::Error::Timeout
            | zk::Error::NoHosts
            | zk::Error::UnexpectedError(_)
            | zk::Error::Custom(_)
    )
}

/// Retries a create whose answer was lost until it is known applied (its
/// czxid) or known not applied (created now, under a new zxid). `None` if
/// the session ended.
async fn settle_lost_create(client: &zk::Client, path: &str, data: &[u8]) -> Option<Zxid> {
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        match client.create(path, data, &open()).await {
            Ok((stat, _)) => return Some(Zxid::from_i64(stat.czxid)),
            Err(zk::Error::NodeExists) => match client.check_stat(path).await {
                Ok(Some(stat)) => return Some(Zxid::from_i64(stat.czxid)),
                Ok(None) => return None,
                Err(_) => {}
            },
            Err(e) if is_lost(&e) => {}
            Err(_) => return None,
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    None
}

async fn create_retrying(
    client: &zk::Client,
    path: &str,
    data: &[u8],
    retry: bool,
) -> Result<(), zk::Error> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        match client.create(path, data, &open()).await {
            Ok(_) | Err(zk::Error::NodeExists) => return Ok(()),
            Err(e) if retry && is_lost(&e) && Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(20)).await
            }
            Err(e) => return Err(e),
        }
    }
}

/// The sessions of a started workload.
pub struct Running {
    tasks: Vec<tokio::task::JoinHandle<SessionLog>>,
    /// The zxid of a write made just before the sessions started.
    pub start: Zxid,
}

impl Running {
    /// Waits for every session to stop (after `progress.stop`).
    pub async fn join(self) -> Vec<SessionLog> {
        let mut logs = Vec::new();
        for t in self.tasks {
            logs.push(t.await.expect("a session task"));
        }
        logs
    }
}

pub fn open() -> zk::CreateOptions<'static> {
    zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all())
}

pub async fn connect(connect: &str, timeout: Duration) -> zk::Client {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match zk::Client::connector()
            .with_session_timeout(timeout)
            .connect(connect)
            .await
        {
            Ok(c) => return c,
            Err(e) => {
                assert!(
                    Instant::now() < deadline,
                    "cannot connect to {connect}: {e}"
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

/// Waits until the workload has been given a zxid `rollovers` epochs past
/// `from`'s, or fails after `max`.
pub async fn wait_for_epoch(progress: &Progress, from: Epoch, rollovers: u32, max: Duration) {
    let deadline = Instant::now() + max;
    let target = Epoch(from.0 + rollovers);
    while progress.max_zxid().epoch() < target {
        assert!(
            Instant::now() < deadline,
            "no zxid of epoch {target} within {max:?}: at {} after {} writes",
            progress.max_zxid(),
            progress.acked.load(Ordering::Acquire)
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// As [`wait_for_epoch`], and fails at the first error or lost connection
/// (instead of waiting for epochs that may never come).
pub async fn wait_for_epoch_clean(progress: &Progress, from: Epoch, rollovers: u32, max: Duration) {
    let deadline = Instant::now() + max;
    let target = Epoch(from.0 + rollovers);
    while progress.max_zxid().epoch() < target {
        let troubles = progress.troubles.load(Ordering::Acquire);
        assert_eq!(
            troubles,
            0,
            "errors or lost connections at {} after {} writes",
            progress.max_zxid(),
            progress.acked.load(Ordering::Acquire)
        );
        assert!(
            Instant::now() < deadline,
            "no zxid of epoch {target} within {max:?}: at {}",
            progress.max_zxid()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Waits until the workload has been given a zxid at or past `counter` in
/// epoch `epoch` (or any later epoch).
pub async fn wait_for_counter(progress: &Progress, epoch: Epoch, counter: u32, max: Duration) {
    let deadline = Instant::now() + max;
    let target = Zxid::new(epoch, counter.into());
    while progress.max_zxid() < target {
        assert!(
            Instant::now() < deadline,
            "no zxid at {target} within {max:?}: at {}",
            progress.max_zxid()
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// What a finished run adds up to.
#[derive(Debug)]
pub struct Summary {
    pub acked: usize,
    pub errors: Vec<String>,
    pub disconnects: u64,
    pub order_violations: usize,
    pub first: Zxid,
    pub last: Zxid,
    /// Epochs the acknowledged zxids span beyond the first one.
    pub epochs_crossed: u32,
    /// Rollover proposals among the acknowledged zxids (counter at the limit).
    pub rollover_zxids: usize,
}

pub fn summarize(logs: &[SessionLog], limit: CounterLimit) -> Summary {
    let all: Vec<Zxid> = logs
        .iter()
        .flat_map(|l| l.acked.iter().map(|(_, z)| *z))
        .collect();
    let first = all.iter().copied().min().unwrap_or(Zxid::ZERO);
    let last = all.iter().copied().max().unwrap_or(Zxid::ZERO);
    Summary {
        acked: all.len(),
        errors: logs.iter().flat_map(|l| l.errors.iter().cloned()).collect(),
        disconnects: logs.iter().map(|l| l.disconnects).sum(),
        order_violations: logs.iter().map(|l| l.order_violations.len()).sum(),
        first,
        last,
        epochs_crossed: last.epoch().0 - first.epoch().0,
        rollover_zxids: all.iter().filter(|z| z.is_last_with(limit)).count(),
    }
}

/// Reads every acknowledged node back through `connect` (after `sync`), and
/// checks its czxid. Returns the problems found.
pub async fn verify(connect: &str, root: &str, logs: &[SessionLog]) -> Vec<String> {
    let client = connect_client(connect).await;
    let mut problems = Vec::new();
    client.sync(root).await.expect("sync");
    for log in logs {
        let parent = format!("{root}/s{}", log.index);
        let (children, _) = match client.get_children(&parent).await {
            Ok(c) => c,
            Err(e) => {
                problems.push(format!("{parent}: {e}"));
                continue;
            }
        };
        let present: std::collections::BTreeSet<String> = children.into_iter().collect();
        for (name, zxid) in &log.acked {
            if !present.contains(name) {
                problems.push(format!(
                    "{parent}/{name} (czxid {zxid}) was acknowledged and is missing"
                ));
            }
        }
        // Spot-check the czxids of the first, the last and every rollover
        // boundary.
        for (name, zxid) in log
            .acked
            .iter()
            .filter(|(_, z)| z.counter().0 <= 1)
            .chain(log.acked.last())
        {
            let path = format!("{parent}/{name}");
            match client.check_stat(&path).await {
                Ok(Some(stat)) if Zxid::from_i64(stat.czxid) == *zxid => {}
                Ok(other) => {
                    problems.push(format!("{path}: stat {other:?}, acknowledged czxid {zxid}"))
                }
                Err(e) => problems.push(format!("{path}: {e}")),
            }
        }
    }
    problems
}

async fn connect_client(connect: &str) -> zk::Client {
    self::connect(connect, Duration::from_secs(20)).await
}

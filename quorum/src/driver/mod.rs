//! The tokio driver: runs a [`Peer`] with real storage and a transport, and
//! implements [`Replicator`] for the server.
//!
//! One task owns the peer and carries out its outputs in order: messages go to
//! the [`Transport`], storage commands to a dedicated storage thread (which
//! executes whatever is waiting and fsyncs once: group commit), committed
//! transactions to the commit stream. Time is the driver's: one tick is one
//! millisecond since start. The threads that do the blocking storage IO are
//! in `threads`.

mod threads;

use std::collections::{BTreeMap, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{mpsc as std_mpsc, Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use rzk_zxid::Zxid;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::core::{Config, Input, OpId, Output, Peer, ReadCmd, ReadId, Refusal, StorageCmd, Tick};
use crate::message::{Entry, Message, SessionMsg};
use crate::storage::{
    DirectLog, Durable, SavedSnapshot, Storage, StorageError, StorageReader, WrittenSnapshot,
};
use crate::transport::{Inbound, Inbox, Transport};
use crate::{
    CommitStream, Committed, PeerId, Proposal, QuorumStats, ReplicateError, Replicator, Role,
    SnapshotWriter, SyncBarrier,
};
use threads::{spawn_log_reader, spawn_reader, spawn_storage, Done, StoreReq};

/// Driver settings.
#[derive(Clone, Debug)]
pub struct DriverConfig {
    /// The core's configuration.
    pub core: Config,
    /// How often the core gets a [`Input::Tick`].
    pub tick_interval: Duration,
    /// Most proposals handed to the core in one step (one batch, one append).
    pub propose_batch_max: usize,
    /// Proposals accepted but not yet resolved; beyond it `propose` fails at
    /// once with [`ReplicateError::Overloaded`].
    pub proposals_in_flight_max: usize,
    /// How long a graceful [`Replicator::shutdown`] waits for proposals in
    /// flight to commit or fail before it stops the peer anyway.
    pub shutdown_wait_max: Duration,
    /// The observer relay source this peer feeds while it serves: an
    /// `rzk_observer_master::ObserverMaster` subscribes to it. `None`: no
    /// relay.
    pub observer_relay: Option<Arc<rzk_observer_master::RelayHub>>,
    /// Observers: the voters' observer-master addresses (`observerMasterPort`).
    /// An up-to-date observer follows one of them that is not the leader, and
    /// the leader's INFORMs when none answers. Empty: it follows the leader.
    pub observer_masters: Vec<(PeerId, std::net::SocketAddr)>,
    /// Most entries of the recovered log read and replayed into the core at
    /// once at start-up (one batch). A restart holds about the core's window
    /// and a few batches of the log, however long it is.
    pub replay_batch_entries_max: usize,
    /// The same bound in payload bytes (at least one entry per batch).
    pub replay_batch_bytes_max: usize,
}

/// Events an observer master's relay may fall behind its member's driver
/// before it is rebuilt (its observers then sync again).
const OBSERVER_RELAY_EVENTS_MAX: usize = 65_536;

impl DriverConfig {
    /// Gives the driver a relay hub to feed ([`DriverConfig::observer_relay`]),
    /// for [`ZabReplicator::serve_observers`] (zoo.cfg `observerMasterPort`).
    pub fn enable_observer_relay(&mut self) {
        self.observer_relay.get_or_insert_with(|| {
            Arc::new(rzk_observer_master::RelayHub::new(
                Zxid::ZERO,
                OBSERVER_RELAY_EVENTS_MAX,
            ))
        });
    }

    /// Defaults around a core configuration.
    pub fn new(core: Config) -> DriverConfig {
        DriverConfig {
            core,
            tick_interval: Duration::from_millis(5),
            propose_batch_max: 1024,
            proposals_in_flight_max: 100_000,
            shutdown_wait_max: Duration::from_secs(5),
            observer_relay: None,
            observer_masters: Vec::new(),
            replay_batch_entries_max: 1024,
            replay_batch_bytes_max: 4 << 20,
        }
    }
}

type Reply = oneshot::Sender<Result<Zxid, ReplicateError>>;

enum Cmd {
    Propose(Bytes, Reply),
    Sync(Reply),
    /// A snapshot the state machine wrote, to commit in storage's order.
    CommitSnapshot(WrittenSnapshot, Reply),
    Forward(Bytes),
    Shutdown(oneshot::Sender<()>),
}

struct Shared {
    stats: Mutex<QuorumStats>,
    /// Replication timings and counts, shared with the storage thread and
    /// snapshot writers; `stats()` copies them out.
    metrics: Arc<Mutex<crate::replicator::MetricsAcc>>,
    role: Mutex<(Role, Option<PeerId>)>,
    /// Set by a graceful shutdown: new proposals fail at once.
    closing: AtomicBool,
    commits: Mutex<Option<CommitStream>>,
    /// Proposals accepted by `propose` and not yet resolved.
    in_flight: AtomicUsize,
    in_flight_max: usize,
    /// Set when the peer stopped because its disk was full ([`StorageError::Full`]).
    disk_full: AtomicBool,
}

/// A ZAB replica: a [`Peer`] driven on tokio. Implements [`Replicator`].
pub struct ZabReplicator {
    id: PeerId,
    cmds: mpsc::UnboundedSender<Cmd>,
    shared: Arc<Shared>,
    task: Mutex<Option<JoinHandle<()>>>,
    /// The storage thread, joined by a graceful shutdown so that the log is
    /// released when it returns.
    storage_thread: Mutex<Option<std::thread::JoinHandle<()>>>,
    /// Storage's read side: snapshot writers start here.
    reader: Arc<dyn StorageReader>,
    /// The relay source the driver feeds ([`DriverConfig::observer_relay`]).
    relay_hub: Option<Arc<rzk_observer_master::RelayHub>>,
    /// The observer master served on `observerMasterPort`, once started.
    relay_server: Mutex<Option<crate::relay::RelayServer>>,
}

impl ZabReplicator {
    /// True once the peer has stopped because a log write found the disk full:
    /// nothing of that write was acknowledged and the log before it is intact, so
    /// the member may be started again from its directory once space is free.
    /// False for every other failure, which stops the peer for good (STYLE rule 6).
    pub fn stopped_for_full_disk(&self) -> bool {
        self.shared.disk_full.load(Ordering::Acquire)
    }

    /// Recovers from `storage` and starts the peer. The commit stream begins
    /// with the durable snapshot; the log after it is delivered as soon as it is
    /// known committed (I2: an uncommitted tail may still be truncated).
    ///
    /// The log is replayed after this returns, on the peer's task: read in
    /// batches ([`DriverConfig::replay_batch_entries_max`]) and stepped into
    /// the core, which keeps only its window of what it applied; what it
    /// applies meanwhile goes through a bounded channel that the commit stream
    /// drains before anything later, so the replay waits for the state
    /// machine instead of queueing the log. A record that does not read back
    /// stops the peer (the commit stream ends) with the storage's error logged.
    pub async fn start<S: Storage, T: Transport>(
        cfg: DriverConfig,
        mut storage: S,
        transport: T,
        inbox: Inbox,
    ) -> Result<ZabReplicator, ReplicateError> {
        let (storage, recovered) = tokio::task::spawn_blocking(move || {
            let r = storage.recover();
            (storage, r)
        })
        .await
        .map_err(|e| ReplicateError::Storage(e.to_string()))?;
        let (recovered, log) = recovered.map_err(|e| ReplicateError::Storage(e.to_string()))?;
        let id = cfg.core.id;
        let clock = Instant::now();
        let peer = Peer::recover(cfg.core.clone(), recovered, Tick(0))
            .map_err(|e| ReplicateError::Storage(e.to_string()))?;
        let batches = spawn_log_reader(
            log,
            cfg.replay_batch_entries_max.max(1),
            cfg.replay_batch_bytes_max.max(1),
        );
        // One batch in the channel, one being read from the stream, one
        // waiting in the driver: what a slow state machine lets queue.
        let (replay_tx, replay_rx) = mpsc::channel(1);
        let voters = cfg.core.voters.len();
        let reader = storage.reader();
        let direct = storage.direct_log();
        let metrics = Arc::new(Mutex::new(crate::replicator::MetricsAcc::default()));
        let (store_tx, done_tx, done_rx, storage_thread) = spawn_storage(storage, metrics.clone());
        let read_tx = spawn_reader(reader.clone(), done_tx);
        let (commit_tx, commit_rx) = mpsc::unbounded_channel();
        let shared = Arc::new(Shared {
            stats: Mutex::new(QuorumStats::looking(voters)),
            metrics,
            role: Mutex::new((Role::Looking, None)),
            closing: AtomicBool::new(false),
            commits: Mutex::new(Some(CommitStream::replay_then(replay_rx, commit_rx))),
            in_flight: AtomicUsize::new(0),
            in_flight_max: cfg.propose_batch_max.max(cfg.proposals_in_flight_max),
            disk_full: AtomicBool::new(false),
        });
        let (cmds, cmd_rx) = mpsc::unbounded_channel();
        let (relay_tx, relay_rx) = mpsc::unbounded_channel();
        let follow = (!cfg.observer_masters.is_empty() && cfg.core.is_observer())
            .then(|| crate::relay::RelayFollow::new(id, cfg.observer_masters.clone(), relay_tx));
        let d = Driver {
            peer,
            clock,
            transport,
            store_tx,
            direct,
            appending: VecDeque::new(),
            thread_last_op: None,
            thread_snapshots: 0,
            storage_done: OpId(0),
            read_tx,
            reader: reader.clone(),
            fatal: None,
            commit_tx,
            replaying: Some(replay_tx),
            replayed: Vec::new(),
            shared: shared.clone(),
            waiting: BTreeMap::new(),
            by_zxid: BTreeMap::new(),
            syncs: BTreeMap::new(),
            next_id: 1,
            batch_max: cfg.propose_batch_max.max(1),
            last_delivered: Zxid::ZERO,
            shutdown: None,
            shutdown_wait_max: cfg.shutdown_wait_max,
            relay: cfg.observer_relay.clone().map(crate::relay::RelayFeed::new),
            follow,
            looking_since: Some(Instant::now()),
            sync_since: None,
        };
        d.publish_stats();
        let task =
            tokio::spawn(d.run(cmd_rx, inbox, done_rx, relay_rx, batches, cfg.tick_interval));
        Ok(ZabReplicator {
            id,
            cmds,
            shared,
            task: Mutex::new(Some(task)),
            storage_thread: Mutex::new(Some(storage_thread)),
            reader,
            relay_hub: cfg.observer_relay.clone(),
            relay_server: Mutex::new(None),
        })
    }

    /// Stops the peer at once, as a crash would: nothing is flushed specially,
    /// pending proposals fail with [`ReplicateError::Shutdown`]. Tests use it to
    /// simulate a crash; a server stops with [`Replicator::shutdown`].
    pub fn abort(&self) {
        if let Some(t) = self.task.lock().expect("not poisoned").take() {
            t.abort();
        }
    }

    /// Serves observers on `listener` (zoo.cfg `observerMasterPort`, issue
    /// 12): an observer master over this peer's relay hub
    /// ([`DriverConfig::observer_relay`], which must be set), relaying while
    /// the peer serves as leader or follower. Refused without a hub.
    pub fn serve_observers(&self, listener: tokio::net::TcpListener) -> Result<(), ReplicateError> {
        let Some(hub) = self.relay_hub.clone() else {
            return Err(ReplicateError::Storage(
                "serve_observers needs DriverConfig::observer_relay".into(),
            ));
        };
        let server = crate::relay::RelayServer::spawn(hub, listener);
        *self.relay_server.lock().expect("not poisoned") = Some(server);
        Ok(())
    }

    fn request(&self, make: impl FnOnce(Reply) -> Cmd) -> Proposal {
        let (tx, rx) = oneshot::channel();
        if self.cmds.send(make(tx)).is_err() {
            return Proposal::failed(ReplicateError::Shutdown);
        }
        Proposal::new(rx)
    }
}

impl Drop for ZabReplicator {
    fn drop(&mut self) {
        self.abort();
    }
}

impl Replicator for ZabReplicator {
    fn propose(&self, txn: Bytes) -> Proposal {
        if self.shared.closing.load(Ordering::Acquire) {
            return Proposal::failed(ReplicateError::Shutdown);
        }
        let max = self.shared.in_flight_max;
        if self.shared.in_flight.fetch_add(1, Ordering::AcqRel) >= max {
            self.shared.in_flight.fetch_sub(1, Ordering::AcqRel);
            return Proposal::failed(ReplicateError::Overloaded { in_flight_max: max });
        }
        self.request(|r| Cmd::Propose(txn, r))
    }

    fn take_commits(&self) -> Option<CommitStream> {
        self.shared.commits.lock().expect("not poisoned").take()
    }

    fn sync(&self) -> SyncBarrier {
        self.request(Cmd::Sync)
    }

    fn snapshot_writer(&self, zxid: Zxid) -> SnapshotWriter {
        let sink = if self.shared.closing.load(Ordering::Acquire) {
            Err(ReplicateError::Shutdown)
        } else {
            self.reader
                .snapshot_writer(zxid)
                .map_err(|e| ReplicateError::Storage(e.to_string()))
        };
        let cmds = self.cmds.clone();
        let started = Instant::now();
        let metrics = self.shared.metrics.clone();
        let commit = Box::new(move |written: WrittenSnapshot| {
            // The file is written and durable: ZooKeeper's snapshottime.
            metrics
                .lock()
                .expect("not poisoned")
                .snapshot_time
                .add(started.elapsed().as_millis() as u64);
            let (tx, rx) = oneshot::channel();
            if cmds.send(Cmd::CommitSnapshot(written, tx)).is_err() {
                return Proposal::failed(ReplicateError::Shutdown);
            }
            Proposal::new(rx)
        });
        SnapshotWriter::new(zxid, sink, commit)
    }

    fn role(&self) -> Role {
        self.shared.role.lock().expect("not poisoned").0
    }

    fn leader(&self) -> Option<PeerId> {
        self.shared.role.lock().expect("not poisoned").1
    }

    fn id(&self) -> PeerId {
        self.id
    }

    fn forward(&self, msg: Bytes) -> Result<(), ReplicateError> {
        let (role, leader) = *self.shared.role.lock().expect("not poisoned");
        match role {
            Role::Leader | Role::Follower | Role::Observer => {}
            Role::Looking => return Err(ReplicateError::NotLeader { leader }),
        }
        self.cmds
            .send(Cmd::Forward(msg))
            .map_err(|_| ReplicateError::Shutdown)
    }

    fn stats(&self) -> QuorumStats {
        let mut stats = self.shared.stats.lock().expect("not poisoned").clone();
        stats.metrics = self.shared.metrics.lock().expect("not poisoned").snapshot();
        if let Some(server) = self.relay_server.lock().expect("not poisoned").as_ref() {
            stats.relayed_observers = server.observers();
        }
        stats
    }

    fn shutdown(&self) -> Pin<Box<dyn Future<Output = ()> + Send + '_>> {
        Box::pin(async move {
            self.shared.closing.store(true, Ordering::Release);
            // Observers following this member go elsewhere.
            drop(self.relay_server.lock().expect("not poisoned").take());
            let (tx, rx) = oneshot::channel();
            if self.cmds.send(Cmd::Shutdown(tx)).is_ok() {
                let _ = rx.await;
            }
            let task = self.task.lock().expect("not poisoned").take();
            if let Some(t) = task {
                let _ = t.await;
            }
            // The driver dropped its end of the storage queue: the thread ends
            // once it has finished what was queued, and with it the log.
            let thread = self.storage_thread.lock().expect("not poisoned").take();
            if let Some(t) = thread {
                let _ = tokio::task::spawn_blocking(move || t.join()).await;
            }
        })
    }
}

/// Resolves once the oldest direct append is durable, with the op of the last
/// one durable by then (the log makes records durable in order, and a batch
/// of them at once), the txns they hold and when the oldest was issued.
async fn next_durable(
    appending: &mut VecDeque<DirectAppend>,
) -> Result<(OpId, u64, Instant), StorageError> {
    std::future::poll_fn(|cx| {
        let mut done = None;
        while let Some(front) = appending.front_mut() {
            match front.durable.as_mut().poll(cx) {
                std::task::Poll::Pending => break,
                std::task::Poll::Ready(Err(e)) => return std::task::Poll::Ready(Err(e)),
                std::task::Poll::Ready(Ok(())) => {
                    let a = appending.pop_front().expect("front exists");
                    let (txns, since) = done.map_or((0, a.issued), |(_, t, s)| (t, s));
                    done = Some((a.op, txns + a.txns, since));
                }
            }
        }
        match done {
            Some(d) => std::task::Poll::Ready(Ok(d)),
            None => std::task::Poll::Pending,
        }
    })
    .await
}

/// I7: a refused peer message is logged with the peer's id. A stale session
/// (reported once per session) is routine after a change of leader.
fn log_refused(peer: PeerId, msg: &'static str, reason: &Refusal) {
    match reason {
        Refusal::StaleSession(_) => {
            tracing::info!(peer = peer.0, msg, %reason, "dropped a quorum message")
        }
        Refusal::OutOfOrder { .. }
        | Refusal::Unexpected
        | Refusal::WrongEpoch { .. }
        | Refusal::AheadOfLeader
        | Refusal::Inconsistent { .. }
        | Refusal::UnknownVoter(_)
        | Refusal::BadSnapshot => {
            tracing::warn!(peer = peer.0, msg, %reason, "refused a quorum message")
        }
    }
}

fn inbound(m: Inbound) -> Input {
    match m {
        Inbound::Message { from, msg } => Input::Message { from, msg },
        Inbound::Disconnected { peer } => Input::PeerDisconnected { peer },
    }
}

/// Appends made through the [`DirectLog`], not yet known durable.
struct DirectAppend {
    op: OpId,
    txns: u64,
    issued: Instant,
    durable: Durable,
}

struct Driver<T: Transport> {
    peer: Peer,
    clock: Instant,
    transport: T,
    store_tx: std_mpsc::Sender<StoreReq>,
    /// Appends from this task, when storage offers it: the log's group commit
    /// gets each batch as the core writes it, with no storage-thread round trip.
    direct: Option<Box<dyn DirectLog>>,
    /// Direct appends in the order issued (so in the log's order).
    appending: VecDeque<DirectAppend>,
    /// The last command given to the storage thread and not yet reported
    /// done. While it is set, appends go to the storage thread too, behind it:
    /// the log sees every command in the core's order.
    thread_last_op: Option<OpId>,
    /// Snapshot commits given to the storage thread and not yet done.
    thread_snapshots: usize,
    /// The highest op reported to the core as done (reports arrive from the
    /// storage thread and from direct appends; a lower one adds nothing).
    storage_done: OpId,
    /// Reads for the core, to the reader thread.
    read_tx: std_mpsc::Sender<(ReadId, ReadCmd)>,
    /// Snapshots the state machine loads come from here.
    reader: Arc<dyn StorageReader>,
    /// A storage failure met while carrying out outputs: the peer stops.
    fatal: Option<ReplicateError>,
    commit_tx: mpsc::UnboundedSender<Committed>,
    /// The start-up replay's bounded channel, which the commit stream drains
    /// before `commit_tx`; dropped once the recovered log is replayed.
    replaying: Option<mpsc::Sender<Vec<Committed>>>,
    /// Items for `replaying`, sent (waiting for room) after each step.
    replayed: Vec<Committed>,
    shared: Arc<Shared>,
    /// Proposals handed to the core, by request id, until they get a zxid.
    waiting: BTreeMap<u64, Reply>,
    /// Proposals with a zxid, until applied (committed) or the leader steps down.
    by_zxid: BTreeMap<Zxid, Reply>,
    syncs: BTreeMap<u64, Reply>,
    next_id: u64,
    batch_max: usize,
    last_delivered: Zxid,
    /// A graceful shutdown in progress: when it must end, and who waits for it.
    shutdown: Option<(Instant, oneshot::Sender<()>)>,
    shutdown_wait_max: Duration,
    /// Feeds the observer relay source, if there is one.
    relay: Option<crate::relay::RelayFeed>,
    /// An observer with observer-master addresses: follows one of them.
    follow: Option<crate::relay::RelayFollow>,
    /// When this peer last went looking (ZooKeeper's `election_time`).
    looking_since: Option<Instant>,
    /// When this peer, as a learner, sent FOLLOWERINFO (its sync time).
    sync_since: Option<Instant>,
}

/// The driver owns the transport: when it stops (a graceful shutdown, a storage
/// failure, or its task aborted as in a crash) the transport closes too.
impl<T: Transport> Drop for Driver<T> {
    fn drop(&mut self) {
        self.transport.close();
        // The relay's source is gone: its streams end, observers sync elsewhere.
        if let Some(feed) = self.relay.as_mut() {
            feed.stop("the peer stopped");
        }
    }
}

impl<T: Transport> Driver<T> {
    fn now(&self) -> Tick {
        Tick(self.clock.elapsed().as_millis() as u64)
    }

    async fn run(
        mut self,
        mut cmds: mpsc::UnboundedReceiver<Cmd>,
        mut inbox: Inbox,
        mut done: mpsc::UnboundedReceiver<Done>,
        mut relayed: mpsc::UnboundedReceiver<(u64, crate::relay::RelayEvent)>,
        batches: mpsc::Receiver<Result<Vec<Entry>, StorageError>>,
        tick: Duration,
    ) {
        let stashed = match self.replay(batches, &mut cmds).await {
            Ok(stashed) => stashed,
            Err(e) => {
                if let Some((_, done)) = self.shutdown.take() {
                    self.fail_all(ReplicateError::Shutdown);
                    let _ = done.send(());
                    return;
                }
                tracing::error!(error = %e, "replaying the durable log failed; the peer stops");
                self.fail_all(e);
                return;
            }
        };
        let mut stashed = stashed.into_iter();
        while let Some(first) = stashed.next() {
            self.take_cmds(first, || stashed.next());
        }
        let mut ticker = tokio::time::interval(tick);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            if self.shutdown_complete() {
                return;
            }
            if let Some(e) = self.fatal.take() {
                tracing::error!(error = %e, "storage failed; the peer stops");
                self.fail_all(e);
                return;
            }
            tokio::select! {
                biased;
                d = done.recv() => match d {
                    Some(Done::Ops(op)) => {
                        self.thread_done(op);
                        self.storage_done(op);
                    }
                    Some(Done::Refused(op, why)) => {
                        tracing::warn!(?op, reason = %why, "storage refused a received snapshot");
                        self.thread_done(op);
                        self.storage_done = self.storage_done.max(op);
                        self.step(Input::StorageRefused { op });
                    }
                    Some(Done::SnapshotCommitted(zxid, saved, reply)) => {
                        let SavedSnapshot { snapshot, log_start } = saved;
                        self.thread_snapshots -= 1;
                        self.shared.metrics.lock().expect("not poisoned").last_snapshot =
                            Some(crate::replicator::LastSnapshot {
                                zxid,
                                unix_secs: std::time::SystemTime::now()
                                    .duration_since(std::time::UNIX_EPOCH)
                                    .map(|d| d.as_secs())
                                    .unwrap_or(0),
                                size_bytes: snapshot.size_bytes,
                            });
                        self.step(Input::SnapshotSaved { snapshot, log_start });
                        let _ = reply.send(Ok(zxid));
                    }
                    Some(Done::Read(id, result)) => self.step(Input::ReadDone { id, result }),
                    Some(Done::Failed(e)) => {
                        if matches!(e, StorageError::Full(_)) {
                            self.shared.disk_full.store(true, Ordering::Release);
                        }
                        self.fail_all(ReplicateError::Storage(e.to_string()));
                        return;
                    }
                    None => {
                        self.fail_all(ReplicateError::Storage("the storage thread ended".into()));
                        return;
                    }
                },
                d = next_durable(&mut self.appending), if !self.appending.is_empty() => {
                    match d {
                        Ok((op, txns, since)) => {
                            let mut m = self.shared.metrics.lock().expect("not poisoned");
                            m.fsync_time.add(since.elapsed().as_millis() as u64);
                            m.group_commit_size.add(txns);
                            drop(m);
                            self.storage_done(op);
                        }
                        Err(e) => {
                            if matches!(e, StorageError::Full(_)) {
                                self.shared.disk_full.store(true, Ordering::Release);
                            }
                            self.fail_all(ReplicateError::Storage(e.to_string()));
                            return;
                        }
                    }
                }
                m = inbox.recv() => {
                    let Some(m) = m else { return };
                    self.count_inbound(&m);
                    self.step(inbound(m));
                    for _ in 0..256 {
                        let Ok(m) = inbox.try_recv() else { break };
                        self.count_inbound(&m);
                        self.step(inbound(m));
                    }
                }
                c = cmds.recv() => {
                    let Some(c) = c else { return };
                    self.on_cmds(c, &mut cmds);
                }
                Some((generation, event)) = relayed.recv() => {
                    let input = self.follow.as_mut().and_then(|f| f.on_event(generation, event));
                    if let Some(input) = input {
                        self.step(input);
                    }
                }
                _ = ticker.tick() => self.step(Input::Tick),
            }
        }
    }

    /// Replays the recovered log (`batches`, from [`spawn_log_reader`]) into
    /// the core and what it applies into the commit stream's bounded replay
    /// channel, then starts the election. Commands that arrive meanwhile are
    /// returned, to be carried out after it, in order; a shutdown ends it.
    async fn replay(
        &mut self,
        mut batches: mpsc::Receiver<Result<Vec<Entry>, StorageError>>,
        cmds: &mut mpsc::UnboundedReceiver<Cmd>,
    ) -> Result<Vec<Cmd>, ReplicateError> {
        let mut stash = Vec::new();
        loop {
            let batch = tokio::select! {
                biased;
                c = cmds.recv() => {
                    self.on_replay_cmd(c, &mut stash)?;
                    continue;
                }
                b = batches.recv() => b,
            };
            let batch = match batch {
                None => break,
                Some(b) => b.map_err(|e| ReplicateError::Storage(e.to_string()))?,
            };
            let out = self
                .peer
                .replay(batch)
                .map_err(|e| ReplicateError::Storage(e.to_string()))?;
            self.carry_out(out);
            if let Some(e) = self.fatal.take() {
                return Err(e);
            }
            self.publish_stats();
            self.send_replayed(cmds, &mut stash).await?;
        }
        let out = self.peer.finish_recovery();
        self.send_replayed(cmds, &mut stash).await?;
        // From here on the commit stream reads the live channel.
        self.replaying = None;
        self.carry_out(out);
        self.publish_stats();
        Ok(stash)
    }

    /// Sends what the last replayed batch delivered into the bounded replay
    /// channel as one item, waiting for room (the state machine's pace): one
    /// hand-over per batch (per item, a full channel cost a wake-up of each
    /// side per txn, which a loaded machine turned into a slower restart).
    async fn send_replayed(
        &mut self,
        cmds: &mut mpsc::UnboundedReceiver<Cmd>,
        stash: &mut Vec<Cmd>,
    ) -> Result<(), ReplicateError> {
        let Some(tx) = self.replaying.clone() else {
            return Ok(());
        };
        if self.replayed.is_empty() {
            return Ok(());
        }
        let mut batch = Some(std::mem::take(&mut self.replayed));
        while batch.is_some() {
            tokio::select! {
                biased;
                c = cmds.recv() => self.on_replay_cmd(c, stash)?,
                permit = tx.reserve() => {
                    // The stream's reader is gone: nobody needs the rest.
                    let permit = permit.map_err(|_| ReplicateError::Shutdown)?;
                    permit.send(batch.take().expect("checked by the loop"));
                }
            }
        }
        Ok(())
    }

    /// A command during the replay: a shutdown ends it, the rest wait.
    fn on_replay_cmd(
        &mut self,
        c: Option<Cmd>,
        stash: &mut Vec<Cmd>,
    ) -> Result<(), ReplicateError> {
        match c {
            None => Err(ReplicateError::Shutdown),
            Some(Cmd::Shutdown(done)) => {
                self.shutdown = Some((Instant::now(), done));
                Err(ReplicateError::Shutdown)
            }
            Some(c) => {
                stash.push(c);
                Ok(())
            }
        }
    }

    /// Puts a committed item in the stream: the replay's channel while the
    /// recovered log is replayed, the live one after.
    fn deliver(&mut self, item: Committed) {
        if self.replaying.is_some() {
            self.replayed.push(item);
        } else {
            let _ = self.commit_tx.send(item);
        }
    }

    fn on_cmds(&mut self, first: Cmd, cmds: &mut mpsc::UnboundedReceiver<Cmd>) {
        self.take_cmds(first, || cmds.try_recv().ok());
    }

    /// Carries out `first` and the commands `more` gives while a batch of
    /// proposals has room.
    fn take_cmds(&mut self, first: Cmd, mut more: impl FnMut() -> Option<Cmd>) {
        let mut batch = Vec::new();
        let mut next = Some(first);
        while let Some(c) = next.take() {
            match c {
                Cmd::Propose(txn, reply) => {
                    let id = self.next_id;
                    self.next_id += 1;
                    self.waiting.insert(id, reply);
                    batch.push((id, txn));
                }
                Cmd::Sync(reply) => {
                    self.flush_proposals(&mut batch);
                    let id = self.next_id;
                    self.next_id += 1;
                    self.syncs.insert(id, reply);
                    self.step(Input::Sync { id });
                }
                Cmd::CommitSnapshot(written, reply) => {
                    self.flush_proposals(&mut batch);
                    self.thread_snapshots += 1;
                    // A sync that starts after this read streams the newest
                    // snapshot, which retention keeps (at least until the
                    // next commit, which reads this again).
                    let hold = self.peer.log_needed_after();
                    let _ = self
                        .store_tx
                        .send(StoreReq::CommitSnapshot(written, hold, reply));
                }
                Cmd::Forward(payload) => {
                    // In order with the proposals before it.
                    self.flush_proposals(&mut batch);
                    self.step(Input::Forward(payload));
                }
                Cmd::Shutdown(done) => {
                    self.flush_proposals(&mut batch);
                    let until = Instant::now() + self.shutdown_wait_max;
                    self.shutdown = Some((until, done));
                }
            }
            if batch.len() < self.batch_max {
                next = more();
            }
        }
        self.flush_proposals(&mut batch);
    }

    fn flush_proposals(&mut self, batch: &mut Vec<(u64, Bytes)>) {
        if !batch.is_empty() {
            self.step(Input::Propose(std::mem::take(batch)));
        }
    }

    fn step(&mut self, input: Input) {
        let now = self.now();
        let out = self.peer.step(now, input);
        if let Some(feed) = self.relay.as_mut() {
            for o in &out {
                feed.on_output(o);
            }
            feed.after_step(&self.peer);
        }
        self.carry_out(out);
        self.publish_stats();
    }

    /// `learner_commit_received_count`: a COMMIT (or, to an observer, an
    /// INFORM) reaching a learner, as ZooKeeper counts them.
    fn count_inbound(&self, m: &Inbound) {
        if let Inbound::Message {
            msg:
                Message::Session {
                    msg: SessionMsg::Commit { .. } | SessionMsg::Inform { .. },
                    ..
                },
            ..
        } = m
        {
            self.shared
                .metrics
                .lock()
                .expect("not poisoned")
                .learner_commit_received_count += 1;
        }
    }

    /// Counts what an output says about replication (syncs sent, proposals,
    /// the start of this learner's sync); the output is carried out as it is.
    fn count_output(&mut self, o: &Output) {
        let mut m = self.shared.metrics.lock().expect("not poisoned");
        match o {
            Output::Send {
                msg: Message::Session { msg, .. },
                ..
            } => match msg {
                SessionMsg::Diff { .. } => m.diff_count += 1,
                SessionMsg::Trunc { .. } => m.trunc_count += 1,
                SessionMsg::Snap { .. } => m.snap_count += 1,
                SessionMsg::FollowerInfo { .. } => self.sync_since = Some(Instant::now()),
                _ => {}
            },
            Output::Proposed { .. } => m.proposal_count += 1,
            Output::RoleChanged { role, leader, .. } => {
                if let Some(f) = self.follow.as_mut() {
                    let shared = self.shared.clone();
                    f.on_role(
                        *role,
                        *leader,
                        Arc::new(move || shared.stats.lock().expect("not poisoned").applied),
                    );
                }
                let now = Instant::now();
                if *role == Role::Looking {
                    self.looking_since.get_or_insert(now);
                    self.sync_since = None;
                    return;
                }
                if let Some(since) = self.looking_since.take() {
                    m.election_time
                        .add(now.duration_since(since).as_millis() as u64);
                }
                if let Some(since) = self.sync_since.take() {
                    let took = now.duration_since(since).as_millis() as u64;
                    match role {
                        Role::Follower => m.follower_sync_time.add(took),
                        Role::Observer => m.observer_sync_time.add(took),
                        Role::Leader | Role::Looking => {}
                    }
                }
            }
            _ => {}
        }
    }

    fn publish_stats(&self) {
        let p = &self.peer;
        let stats = QuorumStats {
            role: p.role(),
            leader: p.leader(),
            epoch: p.durable_epochs().current,
            accepted_epoch: p.durable_epochs().accepted,
            last_durable: p.last_durable_zxid(),
            committed: p.commit_known(),
            applied: p.applied(),
            learners: p.learner_stats(),
            pending_syncs: p.pending_syncs(),
            syncs: p.sync_counts(),
            elections: p.elections(),
            window: p.window_counts(),
            voters: p.voter_count(),
            observer_master: self.follow.as_ref().and_then(|f| f.following),
            relayed_observers: Vec::new(),
            // Filled in by `stats()`, not at every step.
            metrics: Default::default(),
        };
        *self.shared.stats.lock().expect("not poisoned") = stats;
    }

    /// A graceful shutdown ends when every proposal taken has committed or
    /// failed, or when its wait is over (the rest fail with `Shutdown`).
    fn shutdown_complete(&mut self) -> bool {
        let Some((until, _)) = &self.shutdown else {
            return false;
        };
        let drained = self.waiting.is_empty() && self.by_zxid.is_empty();
        if !drained && Instant::now() < *until {
            return false;
        }
        let (_, done) = self.shutdown.take().expect("checked above");
        self.fail_all(ReplicateError::Shutdown);
        let _ = done.send(());
        true
    }

    fn resolve(&self, reply: Reply, result: Result<Zxid, ReplicateError>) {
        self.shared.in_flight.fetch_sub(1, Ordering::AcqRel);
        let _ = reply.send(result);
    }

    fn carry_out(&mut self, out: Vec<Output>) {
        for o in out {
            self.count_output(&o);
            match o {
                Output::Send { to, msg } => self.transport.send(to, msg),
                Output::Storage { op, cmd } => self.store(op, cmd),
                Output::ApplySnapshot { snapshot } => {
                    let zxid = snapshot.zxid;
                    match self.reader.snapshot_source(&snapshot) {
                        Ok(source) => {
                            self.last_delivered = zxid;
                            self.deliver(Committed::Snapshot { zxid, source });
                        }
                        // The state machine cannot be given its state: stop.
                        Err(e) => {
                            self.fatal.get_or_insert(ReplicateError::Storage(format!(
                                "snapshot {zxid}: {e}"
                            )));
                        }
                    }
                }
                Output::Read { id, cmd } => {
                    let _ = self.read_tx.send((id, cmd));
                }
                Output::Apply(entries) => {
                    for e in entries {
                        if let Some(reply) = self.by_zxid.remove(&e.zxid) {
                            self.resolve(reply, Ok(e.zxid));
                        }
                        self.last_delivered = e.zxid;
                        self.deliver(Committed::Txn {
                            zxid: e.zxid,
                            payload: e.payload,
                        });
                    }
                }
                Output::Proposed { id, zxid } => {
                    if let Some(reply) = self.waiting.remove(&id) {
                        self.by_zxid.insert(zxid, reply);
                    }
                }
                Output::ProposeFailed { id, error } => {
                    if let Some(reply) = self.waiting.remove(&id) {
                        self.resolve(reply, Err(error));
                    }
                }
                Output::SyncDone { id, zxid } => {
                    if let Some(reply) = self.syncs.remove(&id) {
                        let _ = reply.send(Ok(zxid));
                    }
                }
                Output::SyncFailed { id, error } => {
                    if let Some(reply) = self.syncs.remove(&id) {
                        let _ = reply.send(Err(error));
                    }
                }
                Output::Refused { peer, msg, reason } => log_refused(peer, msg, &reason),
                Output::Forwarded { from, payload } => {
                    self.deliver(Committed::Forwarded { from, payload });
                }
                Output::RoleChanged {
                    role,
                    leader,
                    epoch,
                } => {
                    *self.shared.role.lock().expect("not poisoned") = (role, leader);
                    if role == Role::Looking {
                        // The proposals may still commit under the next leader;
                        // the caller cannot tell (LostQuorum says so).
                        for (_, reply) in std::mem::take(&mut self.by_zxid) {
                            self.resolve(reply, Err(ReplicateError::LostQuorum));
                        }
                    }
                    // The core applies the initial history, or the learner's
                    // synced history, before it reports the role: everything
                    // known committed is in the stream before this item.
                    let zxid = self.last_delivered;
                    self.deliver(Committed::Role {
                        role,
                        leader,
                        epoch,
                        zxid,
                    });
                }
            }
        }
    }

    /// Gives a storage command to the log directly (an append while the
    /// storage thread has nothing unfinished) or to the storage thread.
    fn store(&mut self, op: OpId, cmd: StorageCmd) {
        let thread_idle = self.thread_last_op.is_none() && self.thread_snapshots == 0;
        let cmd = match (cmd, self.direct.as_ref()) {
            (StorageCmd::Append(mut entries), Some(direct)) if thread_idle => {
                let txns = entries.len() as u64;
                match direct.append(&mut entries) {
                    Ok(Some(durable)) => self.appending.push_back(DirectAppend {
                        op,
                        txns: txns - entries.len() as u64,
                        issued: Instant::now(),
                        durable,
                    }),
                    Ok(None) => {}
                    Err(e) => {
                        // As from the storage thread: a full disk lets the
                        // member start again once there is space.
                        if matches!(e, StorageError::Full(_)) {
                            self.shared.disk_full.store(true, Ordering::Release);
                        }
                        self.fatal
                            .get_or_insert(ReplicateError::Storage(e.to_string()));
                        return;
                    }
                }
                if entries.is_empty() {
                    return;
                }
                // The log is full of bytes waiting for its disk: the rest waits
                // for room on the storage thread.
                StorageCmd::Append(entries)
            }
            (cmd, _) => cmd,
        };
        self.thread_last_op = Some(op);
        let _ = self.store_tx.send(StoreReq::Cmd(op, cmd));
    }

    /// The storage thread finished every command up to `op`.
    fn thread_done(&mut self, op: OpId) {
        if self.thread_last_op.is_some_and(|last| last <= op) {
            self.thread_last_op = None;
        }
    }

    /// Every storage command up to `op` is done: the core hears it once.
    fn storage_done(&mut self, op: OpId) {
        if op > self.storage_done {
            self.storage_done = op;
            self.step(Input::StorageDone { op });
        }
    }

    fn fail_all(&mut self, e: ReplicateError) {
        for (_, r) in std::mem::take(&mut self.waiting) {
            self.resolve(r, Err(e.clone()));
        }
        for (_, r) in std::mem::take(&mut self.by_zxid) {
            self.resolve(r, Err(e.clone()));
        }
        for (_, r) in std::mem::take(&mut self.syncs) {
            let _ = r.send(Err(e.clone()));
        }
        *self.shared.role.lock().expect("not poisoned") = (Role::Looking, None);
    }
}

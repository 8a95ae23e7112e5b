//! The seam between the server and replication.

use std::future::Future;
use std::io::Read;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use rzk_zxid::{Epoch, Zxid};
use tokio::sync::{mpsc, oneshot};

use crate::storage::{SinkError, SnapshotSink, WrittenSnapshot};

/// A server's id in an ensemble (`server.N` / `myid`). A standalone server is 1.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PeerId(pub u64);

/// What this peer currently is in its ensemble.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Role {
    /// Electing a leader; it can neither propose nor serve linearizable syncs.
    Looking,
    /// The established leader of its epoch: proposals are accepted here.
    Leader,
    /// A voting follower of an established leader.
    Follower,
    /// A non-voting learner.
    Observer,
}

/// Why a proposal or a sync did not commit.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReplicateError {
    /// This peer is not the leader; `leader` is the leader it knows of, if any.
    #[error("not the leader (leader: {leader:?})")]
    NotLeader {
        /// The current leader, when known.
        leader: Option<PeerId>,
    },
    /// The leader lost its quorum before the proposal committed. The proposal may
    /// or may not commit later under a new leader; the caller cannot tell.
    #[error("lost quorum before the proposal committed")]
    LostQuorum,
    /// A proposal is larger than the replication message limit.
    #[error("proposal of {size_bytes} bytes exceeds the limit of {limit_bytes} bytes")]
    TooLarge {
        /// The proposal's size.
        size_bytes: usize,
        /// The configured maximum.
        limit_bytes: usize,
    },
    /// Too many proposals are in flight; the caller should shed load or wait.
    #[error("{in_flight_max} proposals already in flight")]
    Overloaded {
        /// The configured maximum.
        in_flight_max: usize,
    },
    /// The durable log failed (for example an fsync error). The replicator stops:
    /// a storage error that could mean lost data is never retried into silence.
    #[error("storage failed: {0}")]
    Storage(String),
    /// The replicator has shut down.
    #[error("replicator is shut down")]
    Shutdown,
}

/// One item of the committed stream, in zxid order.
///
/// Everything a state machine must react to arrives here, in one total order per
/// peer: snapshots to load, committed transactions, role changes and (on the
/// leader) messages other members forwarded. A server never polls
/// [`Replicator::role`] to decide what to do with a request; it acts on
/// [`Committed::Role`] items.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Committed {
    /// Discard all in-memory state and load this snapshot, taken at `zxid`. Sent at
    /// start-up (recovery from disk) and when a learner receives a SNAP sync. The
    /// transactions that follow continue from `zxid`.
    Snapshot {
        /// The last transaction the snapshot includes.
        zxid: Zxid,
        /// The state machine's bytes, as it wrote them with
        /// [`Replicator::snapshot_writer`], streamed from storage.
        source: SnapshotSource,
    },
    /// A committed transaction: apply it.
    Txn {
        /// Its zxid; strictly greater than everything before it in the stream.
        zxid: Zxid,
        /// The transaction, as the leader's state machine proposed it.
        payload: Bytes,
    },
    /// This peer's role changed (or, for a leader, its epoch after a rollover).
    ///
    /// - `Leader`, `Follower`, `Observer`: every transaction committed up to `zxid`
    ///   is in the stream before this item; the state machine is current and may
    ///   serve clients (ZAB's UPTODATE). Sent once the start-up replay is complete,
    ///   after each learner sync, and when an established leader rolls its epoch
    ///   over (same role and leader, a larger `epoch`).
    /// - `Looking`: stop serving. Proposals, syncs and forwards in flight fail or
    ///   are lost; the server closes its clients' connections (they reconnect).
    Role {
        /// The new role.
        role: Role,
        /// The leader this peer follows or is, when one is established.
        leader: Option<PeerId>,
        /// The established epoch (for `Looking`, the last current epoch).
        epoch: Epoch,
        /// The last zxid delivered on this stream before this item.
        zxid: Zxid,
    },
    /// Leader only: a message a member sent with [`Replicator::forward`] (the
    /// leader's own forwards loop back too). In each member's send order, after
    /// the `Role { Leader }` of this leadership; messages of a learner session
    /// that ended are not delivered.
    Forwarded {
        /// The member that sent it.
        from: PeerId,
        /// The message, opaque to replication.
        payload: Bytes,
    },
}

/// A snapshot to load: a verified file of `rzk-wal`'s format, or bytes (tests,
/// the simulator). [`SnapshotSource::reader`] streams the state machine's bytes
/// and fails at the end (`InvalidData`) if the checksum does not match: load
/// into a new state, swap only on success. The state is never held whole here.
#[derive(Clone)]
pub struct SnapshotSource {
    zxid: Zxid,
    data: SourceData,
}

#[derive(Clone)]
enum SourceData {
    Bytes(Bytes),
    File(rzk_wal::SnapshotFile),
}

impl SnapshotSource {
    /// A snapshot held in memory (tests, the simulator; the empty state).
    pub fn from_bytes(zxid: Zxid, data: Bytes) -> SnapshotSource {
        SnapshotSource {
            zxid,
            data: SourceData::Bytes(data),
        }
    }

    /// A catalogued snapshot file of `rzk-wal`, opened (the descriptor keeps
    /// it readable if it is purged meanwhile).
    pub(crate) fn from_file(file: rzk_wal::SnapshotFile) -> SnapshotSource {
        SnapshotSource {
            zxid: file.zxid(),
            data: SourceData::File(file),
        }
    }

    /// The last transaction the snapshot includes.
    pub fn zxid(&self) -> Zxid {
        self.zxid
    }

    /// The size of the state machine's bytes.
    pub fn len_bytes(&self) -> u64 {
        match &self.data {
            SourceData::Bytes(b) => b.len() as u64,
            SourceData::File(f) => f.data_len(),
        }
    }

    /// Whether it holds no state at all (a new data directory).
    pub fn is_empty(&self) -> bool {
        self.len_bytes() == 0
    }

    /// A reader of the state machine's bytes, from the start. Each call starts
    /// a new pass. A file's checksum is checked as it is read: the last read
    /// fails with [`std::io::ErrorKind::InvalidData`] if it does not match.
    pub fn reader(&self) -> std::io::Result<Box<dyn Read + Send>> {
        Ok(match &self.data {
            SourceData::Bytes(b) => Box::new(std::io::Cursor::new(b.clone())),
            SourceData::File(f) => Box::new(f.state_reader()),
        })
    }
}

impl std::fmt::Debug for SnapshotSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = match &self.data {
            SourceData::Bytes(_) => "bytes",
            SourceData::File(_) => "file",
        };
        f.debug_struct("SnapshotSource")
            .field("zxid", &self.zxid)
            .field("len_bytes", &self.len_bytes())
            .field("kind", &kind)
            .finish()
    }
}

/// Two sources are equal when they hold the same snapshot: the same zxid and
/// length, and the same bytes or the same file checksum.
impl PartialEq for SnapshotSource {
    fn eq(&self, other: &SnapshotSource) -> bool {
        if self.zxid != other.zxid || self.len_bytes() != other.len_bytes() {
            return false;
        }
        match (&self.data, &other.data) {
            (SourceData::Bytes(a), SourceData::Bytes(b)) => a == b,
            (SourceData::File(a), SourceData::File(b)) => a.crc() == b.crc(),
            (SourceData::Bytes(_), SourceData::File(_))
            | (SourceData::File(_), SourceData::Bytes(_)) => false,
        }
    }
}

impl Eq for SnapshotSource {}

/// Why [`SnapshotWriter::try_write`] did not take a chunk.
#[derive(Debug)]
pub enum SnapshotWriteError {
    /// The queue is full: the chunk comes back; keep it and retry after
    /// [`SnapshotWriter::ready`].
    Full(Bytes),
    /// The snapshot failed; [`SnapshotWriter::finish`] reports it too.
    Failed(ReplicateError),
}

type Commit = Box<dyn FnOnce(WrittenSnapshot) -> Proposal + Send>;

/// The writing end of one snapshot of the state machine (from
/// [`Replicator::snapshot_writer`]): chunks go through a bounded queue to
/// storage, never the whole state in one buffer. Dropped without
/// [`SnapshotWriter::finish`], it aborts (the temporary file is removed).
pub struct SnapshotWriter {
    zxid: Zxid,
    sink: Result<Box<dyn SnapshotSink>, ReplicateError>,
    commit: Commit,
}

impl SnapshotWriter {
    /// A writer into `sink`; `commit` makes the finished snapshot known.
    pub(crate) fn new(
        zxid: Zxid,
        sink: Result<Box<dyn SnapshotSink>, ReplicateError>,
        commit: Commit,
    ) -> SnapshotWriter {
        SnapshotWriter { zxid, sink, commit }
    }

    /// The zxid the snapshot is consistent at.
    pub fn zxid(&self) -> Zxid {
        self.zxid
    }

    /// Queues a chunk without blocking.
    pub fn try_write(&mut self, chunk: Bytes) -> Result<(), SnapshotWriteError> {
        let sink = match &mut self.sink {
            Ok(s) => s,
            Err(e) => return Err(SnapshotWriteError::Failed(e.clone())),
        };
        match sink.try_write(chunk) {
            Ok(()) => Ok(()),
            Err(SinkError::Full(chunk)) => Err(SnapshotWriteError::Full(chunk)),
            Err(SinkError::Failed(e)) => {
                let e = ReplicateError::Storage(e.to_string());
                self.sink = Err(e.clone());
                Err(SnapshotWriteError::Failed(e))
            }
        }
    }

    /// Resolves once a chunk refused as `Full` would be taken (or the writer
    /// failed, which the next call reports).
    pub async fn ready(&mut self) {
        if let Ok(sink) = &mut self.sink {
            sink.ready().await;
        }
    }

    /// Ends the snapshot. Resolves once it is durable, in the catalog, known to
    /// the replicator (served to learners that need SNAP) and the history it
    /// covers purged. Must be called inside a tokio runtime.
    pub fn finish(self) -> Proposal {
        let zxid = self.zxid;
        let (tx, rx) = oneshot::channel();
        match self.sink {
            Err(e) => {
                let _ = tx.send(Err(e));
            }
            Ok(sink) => {
                let commit = self.commit;
                tokio::spawn(async move {
                    let result = match sink.finish().await {
                        Ok(written) => commit(written).await,
                        Err(e) => Err(ReplicateError::Storage(format!("snapshot at {zxid}: {e}"))),
                    };
                    let _ = tx.send(result);
                });
            }
        }
        Proposal::new(rx)
    }
}

impl std::fmt::Debug for SnapshotWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SnapshotWriter")
            .field("zxid", &self.zxid)
            .field("failed", &self.sink.as_ref().err())
            .finish()
    }
}

/// What one learner session looks like from its leader (for `mntr` and metrics).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LearnerStats {
    /// The learner.
    pub id: PeerId,
    /// Whether it votes (a follower) or not (an observer).
    pub voting: bool,
    /// Whether it finished synchronising (NEWLEADER acknowledged).
    pub synced: bool,
    /// The highest zxid it acknowledged as durable.
    pub acked: Zxid,
    /// An observer that follows a voter's observer-master relay: the leader
    /// carries only its writes, session traffic and syncs, and sends it no
    /// commits. ZooKeeper's leader does not count such an observer.
    pub relayed: bool,
}

/// Figures of a replicator, for `srvr`, `mntr` and metrics. A snapshot in time.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QuorumStats {
    /// This peer's role.
    pub role: Role,
    /// The established leader, if any.
    pub leader: Option<PeerId>,
    /// The durable currentEpoch.
    pub epoch: Epoch,
    /// The durable acceptedEpoch (ahead of `epoch` while a rollover proposal
    /// is fenced and not yet known committed, I3).
    pub accepted_epoch: Epoch,
    /// The last durable zxid.
    pub last_durable: Zxid,
    /// The highest zxid known committed.
    pub committed: Zxid,
    /// The last zxid handed to the commit stream.
    pub applied: Zxid,
    /// On the leader: every learner session, voting or not.
    pub learners: Vec<LearnerStats>,
    /// Sync barriers waiting on this peer.
    pub pending_syncs: usize,
    /// Learner synchronisations started as a learner: DIFF, TRUNC, SNAP.
    pub syncs: [u64; 3],
    /// Elections this peer has started since it began.
    pub elections: u64,
    /// The bounded in-memory log window: entries it dropped, and DIFFs served
    /// from the durable log because the learner was behind it.
    pub window: crate::core::WindowCounts,
    /// Voting members of the ensemble (this peer included).
    pub voters: usize,
    /// On an observer: the voter whose observer master (`observerMasterPort`)
    /// it follows now; `None` when it follows the leader.
    pub observer_master: Option<PeerId>,
    /// On a member serving observers on its `observerMasterPort`: the
    /// observers attached to its relay now, with the transactions queued for
    /// each (ZooKeeper's `observers` command and `synced_observers` on a
    /// follower).
    pub relayed_observers: Vec<(PeerId, usize)>,
    /// Timings and counts of the replication events (ZooKeeper's
    /// `ServerMetrics` that belong to replication).
    pub metrics: ReplicatorMetrics,
}

/// A summary of observed values: count, sum, extremes and the median of the
/// most recent [`SUMMARY_RECENT_MAX`] values (ZooKeeper's `AvgMinMaxCounter`
/// plus the 0.5 quantile its Prometheus summaries of detail level BASIC carry).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SummaryStats {
    /// Values observed.
    pub count: u64,
    /// Their sum.
    pub sum: u64,
    /// The smallest (0 when none).
    pub min: u64,
    /// The largest (0 when none).
    pub max: u64,
    /// The median of the most recent values (0 when none).
    pub p50: u64,
}

impl SummaryStats {
    /// The mean, 0.0 when nothing was observed.
    pub fn avg(&self) -> f64 {
        if self.count == 0 {
            0.0
        } else {
            self.sum as f64 / self.count as f64
        }
    }
}

/// Recent values a summary keeps for its median.
pub const SUMMARY_RECENT_MAX: usize = 256;

/// A summary being accumulated (see [`SummaryStats`]).
#[derive(Clone, Debug, Default)]
pub(crate) struct Summary {
    stats: SummaryStats,
    recent: std::collections::VecDeque<u64>,
}

impl Summary {
    pub(crate) fn add(&mut self, v: u64) {
        let s = &mut self.stats;
        s.min = if s.count == 0 { v } else { s.min.min(v) };
        s.max = s.max.max(v);
        s.count += 1;
        s.sum = s.sum.saturating_add(v);
        if self.recent.len() == SUMMARY_RECENT_MAX {
            self.recent.pop_front();
        }
        self.recent.push_back(v);
    }

    pub(crate) fn snapshot(&self) -> SummaryStats {
        let mut sorted: Vec<u64> = self.recent.iter().copied().collect();
        sorted.sort_unstable();
        SummaryStats {
            p50: sorted.get(sorted.len() / 2).copied().unwrap_or(0),
            ..self.stats
        }
    }
}

/// The snapshot this peer last made durable.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LastSnapshot {
    /// The zxid it is consistent at.
    pub zxid: Zxid,
    /// When it became durable, in seconds since the Unix epoch.
    pub unix_secs: u64,
    /// The size of its file.
    pub size_bytes: u64,
}

/// Replication timings (milliseconds) and counts since this peer started.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReplicatorMetrics {
    /// ZooKeeper's `election_time`: from going looking to serving again as
    /// leader, follower or observer (for a learner this includes its sync).
    pub election_time_ms: SummaryStats,
    /// ZooKeeper's `follower_sync_time`: from FOLLOWERINFO sent to serving, as
    /// a follower.
    pub follower_sync_time_ms: SummaryStats,
    /// The same for an observer (`observer_sync_time`).
    pub observer_sync_time_ms: SummaryStats,
    /// ZooKeeper's `fsynctime`: each group commit's sync of the log.
    pub fsync_time_ms: SummaryStats,
    /// ZooKeeper's `snapshottime`: from the start of a snapshot's writing to
    /// its file being durable.
    pub snapshot_time_ms: SummaryStats,
    /// Transactions made durable by one fsync of the log (group commit);
    /// syncs that made none durable (epochs, truncations) are not counted.
    pub group_commit_size: SummaryStats,
    /// As leader: DIFF syncs sent (ZooKeeper's `diff_count`).
    pub diff_count: u64,
    /// As leader: TRUNC syncs sent (rzk's own; ZooKeeper counts none).
    pub trunc_count: u64,
    /// As leader: SNAP syncs sent (ZooKeeper's `snap_count`).
    pub snap_count: u64,
    /// As leader: proposals made (ZooKeeper's `proposal_count`).
    pub proposal_count: u64,
    /// As learner: COMMIT messages received (`learner_commit_received_count`).
    pub learner_commit_received_count: u64,
    /// The last snapshot made durable, if any since the start.
    pub last_snapshot: Option<LastSnapshot>,
}

/// The accumulating side of [`ReplicatorMetrics`].
#[derive(Debug, Default)]
pub(crate) struct MetricsAcc {
    pub(crate) election_time: Summary,
    pub(crate) follower_sync_time: Summary,
    pub(crate) observer_sync_time: Summary,
    pub(crate) fsync_time: Summary,
    pub(crate) snapshot_time: Summary,
    pub(crate) group_commit_size: Summary,
    pub(crate) diff_count: u64,
    pub(crate) trunc_count: u64,
    pub(crate) snap_count: u64,
    pub(crate) proposal_count: u64,
    pub(crate) learner_commit_received_count: u64,
    pub(crate) last_snapshot: Option<LastSnapshot>,
}

impl MetricsAcc {
    pub(crate) fn snapshot(&self) -> ReplicatorMetrics {
        ReplicatorMetrics {
            election_time_ms: self.election_time.snapshot(),
            follower_sync_time_ms: self.follower_sync_time.snapshot(),
            observer_sync_time_ms: self.observer_sync_time.snapshot(),
            fsync_time_ms: self.fsync_time.snapshot(),
            snapshot_time_ms: self.snapshot_time.snapshot(),
            group_commit_size: self.group_commit_size.snapshot(),
            diff_count: self.diff_count,
            trunc_count: self.trunc_count,
            snap_count: self.snap_count,
            proposal_count: self.proposal_count,
            learner_commit_received_count: self.learner_commit_received_count,
            last_snapshot: self.last_snapshot,
        }
    }
}

impl QuorumStats {
    /// Stats of a peer that knows nothing yet.
    pub fn looking(voters: usize) -> QuorumStats {
        QuorumStats {
            role: Role::Looking,
            leader: None,
            epoch: Epoch(0),
            accepted_epoch: Epoch(0),
            last_durable: Zxid::ZERO,
            committed: Zxid::ZERO,
            applied: Zxid::ZERO,
            learners: Vec::new(),
            pending_syncs: 0,
            syncs: [0; 3],
            elections: 0,
            window: crate::core::WindowCounts::default(),
            voters,
            observer_master: None,
            relayed_observers: Vec::new(),
            metrics: ReplicatorMetrics::default(),
        }
    }
}

/// The receiving end of the committed stream. There is exactly one per replicator.
#[derive(Debug)]
pub struct CommitStream {
    rx: CommitRx,
}

#[derive(Debug)]
enum CommitRx {
    Bounded(mpsc::Receiver<Committed>),
    /// The ZAB driver must never block its protocol loop (pings, acks) on a slow
    /// state machine, so it feeds an unbounded channel; the server bounds what is
    /// in flight by its limit on outstanding requests.
    Unbounded(mpsc::UnboundedReceiver<Committed>),
    /// The start-up replay in batches through a bounded channel (the driver
    /// waits for room, so a long log is never queued whole; one hand-over
    /// per batch, not per item), then, once its sender is gone, the live
    /// stream.
    ReplayThen {
        replay: Option<mpsc::Receiver<Vec<Committed>>>,
        /// The rest of the replayed batch being read.
        batch: std::vec::IntoIter<Committed>,
        live: mpsc::UnboundedReceiver<Committed>,
    },
}

impl CommitStream {
    /// Wraps the channel a replicator implementation feeds, in zxid order.
    pub fn new(rx: mpsc::Receiver<Committed>) -> CommitStream {
        CommitStream {
            rx: CommitRx::Bounded(rx),
        }
    }

    /// Wraps an unbounded channel a replicator implementation feeds, in zxid order.
    pub fn unbounded(rx: mpsc::UnboundedReceiver<Committed>) -> CommitStream {
        CommitStream {
            rx: CommitRx::Unbounded(rx),
        }
    }

    /// Wraps the two channels of a replicator that replays its recovered
    /// history in batches through a bounded channel: every item of `replay`'s
    /// batches, in order, until its sender is dropped, comes before any item
    /// of `live`.
    pub fn replay_then(
        replay: mpsc::Receiver<Vec<Committed>>,
        live: mpsc::UnboundedReceiver<Committed>,
    ) -> CommitStream {
        CommitStream {
            rx: CommitRx::ReplayThen {
                replay: Some(replay),
                batch: Vec::new().into_iter(),
                live,
            },
        }
    }

    /// The next committed item, or `None` once the replicator has shut down.
    pub async fn next(&mut self) -> Option<Committed> {
        match &mut self.rx {
            CommitRx::Bounded(rx) => rx.recv().await,
            CommitRx::Unbounded(rx) => rx.recv().await,
            CommitRx::ReplayThen {
                replay,
                batch,
                live,
            } => loop {
                if let Some(item) = batch.next() {
                    return Some(item);
                }
                let Some(rx) = replay.as_mut() else {
                    return live.recv().await;
                };
                match rx.recv().await {
                    Some(next) => *batch = next.into_iter(),
                    None => *replay = None,
                }
            },
        }
    }
}

/// A pending proposal: resolves with its zxid once it is committed (durable on a
/// quorum). The server still waits until the transaction is *applied* before it
/// replies (I6).
#[derive(Debug)]
pub struct Proposal {
    rx: oneshot::Receiver<Result<Zxid, ReplicateError>>,
}

impl Proposal {
    /// A proposal whose outcome the implementation sends through `rx`.
    pub fn new(rx: oneshot::Receiver<Result<Zxid, ReplicateError>>) -> Proposal {
        Proposal { rx }
    }

    /// A proposal that already failed.
    pub fn failed(err: ReplicateError) -> Proposal {
        let (tx, rx) = oneshot::channel();
        let _ = tx.send(Err(err));
        Proposal { rx }
    }
}

impl Future for Proposal {
    type Output = Result<Zxid, ReplicateError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        Pin::new(&mut self.rx)
            .poll(cx)
            .map(|r| r.unwrap_or(Err(ReplicateError::Shutdown)))
    }
}

/// A pending `sync`: resolves with a zxid `Z` such that every transaction
/// committed before the sync reached the leader is at or below `Z`. The server
/// answers the client's sync once it has applied up to `Z` (I6b).
pub type SyncBarrier = Proposal;

/// Replication as the server sees it.
///
/// # Correctness
/// - `propose` assigns zxids in call order: a caller that proposes A then B from
///   one task gets `zxid(A) < zxid(B)` if both commit. The server's prep stage
///   relies on this to check versions against outstanding changes.
/// - The commit stream delivers every committed transaction exactly once, in
///   strictly increasing zxid order, with no gap inside an epoch
///   ([`rzk_zxid::Zxid::is_next`]); after a [`Committed::Snapshot`] it continues
///   from the snapshot's zxid. A proposal's future resolves no earlier than the
///   transaction is durable on a quorum.
/// - At start the stream replays the newest valid snapshot and the durable log
///   after it, so in-memory state is always rebuilt from disk (I2). The log
///   after the snapshot is delivered once it is known committed (for a ZAB peer:
///   when it rejoins a leader or its own leadership is established), because an
///   uncommitted tail may still be truncated by the next leader; then a
///   [`Committed::Role`] says the state machine is current.
/// - A failed proposal or sync is routine (`NotLeader`, `LostQuorum`,
///   `Overloaded`, `Shutdown`); only [`ReplicateError::Storage`] means the peer
///   has stopped.
pub trait Replicator: Send + Sync + 'static {
    /// Proposes a transaction. Fails at once with [`ReplicateError::NotLeader`] on a
    /// peer that is not the leader.
    fn propose(&self, txn: Bytes) -> Proposal;

    /// Takes the committed stream. Returns `None` after the first call: the state
    /// machine is its only consumer.
    fn take_commits(&self) -> Option<CommitStream>;

    /// A linearizable-read barrier (I6b); see [`SyncBarrier`].
    fn sync(&self) -> SyncBarrier;

    /// Starts writing a snapshot of the state machine, consistent at `zxid`
    /// (everything up to and including `zxid` applied, nothing after), as a
    /// stream of chunks through a bounded queue (never the whole state in one
    /// buffer). Its `finish` resolves once the snapshot is durable, known to
    /// the replicator for SNAP syncs, and the log it covers purged.
    fn snapshot_writer(&self, zxid: Zxid) -> SnapshotWriter;

    /// This peer's role now.
    fn role(&self) -> Role;

    /// The leader this peer follows (itself when leading), if one is established.
    fn leader(&self) -> Option<PeerId>;

    /// This peer's id.
    fn id(&self) -> PeerId;

    /// Sends an opaque message to the leader this peer currently follows, over
    /// the leader–learner session, FIFO per sender within one session. On the
    /// leader it loops back into its own stream as [`Committed::Forwarded`].
    ///
    /// Fails with [`ReplicateError::NotLeader`] (`leader: None`) when no leader is
    /// established. A message in flight when the session ends is lost: the server
    /// closes its clients on every change of leader, so nothing waits for it.
    fn forward(&self, msg: Bytes) -> Result<(), ReplicateError>;

    /// Figures for operators (`srvr`, `mntr`, metrics).
    fn stats(&self) -> QuorumStats;

    /// Stops gracefully: new proposals fail with [`ReplicateError::Shutdown`],
    /// those already taken commit or fail, the tasks stop and the durable log is
    /// released (the directory can be opened again once this resolves).
    fn shutdown(&self) -> Pin<Box<dyn Future<Output = ()> + Send + '_>>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_keeps_count_sum_extremes_and_a_bounded_recent_median() {
        let mut s = Summary::default();
        assert_eq!(s.snapshot(), SummaryStats::default());
        for v in [5, 1, 9] {
            s.add(v);
        }
        let got = s.snapshot();
        assert_eq!(
            (got.count, got.sum, got.min, got.max, got.p50),
            (3, 15, 1, 9, 5)
        );
        assert_eq!(got.avg(), 5.0);
        // Past SUMMARY_RECENT_MAX values the median forgets the oldest ones;
        // count, sum and extremes keep everything.
        for _ in 0..SUMMARY_RECENT_MAX {
            s.add(100);
        }
        let got = s.snapshot();
        assert_eq!(got.count, 3 + SUMMARY_RECENT_MAX as u64);
        assert_eq!((got.min, got.max, got.p50), (1, 100, 100));
        assert_eq!(s.recent.len(), SUMMARY_RECENT_MAX);
    }
}

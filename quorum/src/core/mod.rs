//! The sans-IO ZAB core: `Peer::step(now, input) -> outputs`.
//!
//! The core owns no socket, file or clock. Time comes in as [`Tick`]s, messages
//! and storage completions come in as [`Input`]s, and everything the core wants
//! done comes out as [`Output`]s, in the order it must be done: storage commands
//! are executed in the order they are emitted and completed in that order
//! ([`Input::StorageDone`] acknowledges every command up to an id), messages are
//! sent in order per destination.
//!
//! # What the core guarantees (and the checker of `rzk-sim` verifies)
//! - **I1, persist before you tell.** Votes, FOLLOWERINFO, ACKEPOCH, ACK and the
//!   NEWLEADER ACK only claim history that storage has reported durable. Each is
//!   built behind an assertion of that fact.
//! - **I2, memory derived from disk.** The state machine is only given
//!   transactions that are both committed and locally durable, and snapshots only
//!   once installed durably. Proposals received during a synchronisation are held
//!   in memory until NEWLEADER; if the sync is interrupted (of any mode) they are
//!   dropped and what the peer advertises next comes from the durable log only
//!   (ZOOKEEPER-5094, 3642, 2355, 4882).
//! - **currentEpoch after durable.** A learner persists currentEpoch only after
//!   every proposal it received before NEWLEADER is durable, and acknowledges
//!   NEWLEADER only after that (ZOOKEEPER-3911, 4643, 4646, 4785); it sends no ACK
//!   before its NEWLEADER ACK (ZOOKEEPER-4685).
//! - **I3, epoch rollover without election** (zab-protocol.md §6.2): see
//!   [`Config::counter_limit`].

mod election;
mod leader;
mod learner;

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use bytes::Bytes;
use rzk_zxid::{CounterLimit, Epoch, Zxid};

use crate::message::{Entry, LearnerKind, Message, SessionId, SessionMsg};
use crate::{PeerId, ReplicateError, Role};

pub use election::Election;

/// Abstract time: the driver decides what one tick is (the tokio driver and the
/// simulation use one millisecond). All timeouts in [`Config`] are in ticks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Tick(pub u64);

impl Tick {
    /// `self + ticks`, saturating.
    pub fn after(self, ticks: u64) -> Tick {
        Tick(self.0.saturating_add(ticks))
    }
}

/// Identifies one storage command. Ids increase by one per command.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct OpId(pub u64);

/// A durable snapshot as the core knows it: the history it holds and how to
/// recognise its file. The bytes stay in storage (a file of `rzk-wal`'s format;
/// memory in tests and the simulator): the core never holds them, and a SNAP
/// sync streams them from storage to storage in bounded chunks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct SnapshotRef {
    /// The last transaction the snapshot includes. `Zxid::ZERO` with size 0 is
    /// the empty state (no snapshot yet).
    pub zxid: Zxid,
    /// The size of the snapshot's file: what a learner receives.
    pub size_bytes: u64,
    /// The storage's checksum of the file (`rzk-wal`: its CRC32C), which the
    /// learner's storage checks the received file against.
    pub crc: u32,
}

impl SnapshotRef {
    /// The empty state of a new peer.
    pub const EMPTY: SnapshotRef = SnapshotRef {
        zxid: Zxid::ZERO,
        size_bytes: 0,
        crc: 0,
    };
}

/// Identifies one read the core asked of storage ([`Output::Read`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct ReadId(pub u64);

/// A read of durable storage, served by the driver off the protocol loop and
/// answered with [`Input::ReadDone`]. Reads may complete in any order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ReadCmd {
    /// Raw bytes of a durable snapshot's file, from `offset`, at most `len`:
    /// the leader's side of a SNAP sync.
    SnapshotChunk {
        /// The snapshot.
        snapshot: SnapshotRef,
        /// Where in its file.
        offset: u64,
        /// How many bytes (fewer only at the end of the file).
        len: usize,
    },
    /// Durable log entries after `after`, in order and contiguous, at most
    /// `entries_max` of them and no more bytes of payload than `bytes_max`
    /// (at least one entry whatever its size): the leader's side of a DIFF for
    /// a learner behind the in-memory log window. The core asks only for
    /// entries storage has reported durable and no snapshot purge has removed.
    Log {
        /// The zxid the first entry follows.
        after: Zxid,
        /// At most this many entries.
        entries_max: usize,
        /// At most about this many payload bytes.
        bytes_max: usize,
    },
}

/// What a read returned.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ReadData {
    /// The bytes of a [`ReadCmd::SnapshotChunk`].
    SnapshotChunk(Bytes),
    /// The entries of a [`ReadCmd::Log`] (empty: the log ends at `after`).
    Log(Vec<Entry>),
}

/// A peer's persisted epochs (zab-protocol.md §1.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct Epochs {
    /// The highest epoch this peer promised to follow.
    pub accepted: Epoch,
    /// The leader the promise was made to. A peer accepts the *same* epoch again
    /// only from that leader (a reconnect), so two leaders can never both gather a
    /// quorum for one epoch.
    pub accepted_from: Option<PeerId>,
    /// The epoch whose leader's initial history this peer holds durably.
    pub current: Epoch,
}

/// A storage command. The driver executes commands strictly in emission order.
///
/// # Correctness
/// A command is complete when its effect is durable (fsynced). Completion is
/// reported with [`Input::StorageDone`] for the highest completed id; every
/// earlier command must be complete by then. After a crash, what survived must be
/// a prefix of the emitted commands (a torn last record is discarded).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StorageCmd {
    /// Append entries to the log. They continue the log contiguously.
    Append(Vec<Entry>),
    /// Remove every log entry after `zxid`.
    TruncateAfter(Zxid),
    /// Start receiving the leader's snapshot file announced as `SnapshotRef`
    /// (SNAP sync). Nothing the peer holds changes before
    /// [`StorageCmd::InstallSnapshot`].
    ReceiveSnapshot(SnapshotRef),
    /// The next bytes of the snapshot file being received (contiguous).
    SnapshotChunk {
        /// Where in the file.
        offset: u64,
        /// The bytes.
        data: Bytes,
    },
    /// Verify the received file against its announced size and checksum and
    /// install it durably: the log starts right after it (older entries are
    /// discarded). Atomic, and only under a SNAP sync marker. A file that does
    /// not verify is refused ([`Input::StorageRefused`]) and changes nothing
    /// (I2). The empty snapshot (size 0) installs the empty state.
    InstallSnapshot(SnapshotRef),
    /// Drop the snapshot file being received (an interrupted SNAP).
    AbortSnapshot,
    /// Persist acceptedEpoch / currentEpoch (atomically).
    SaveEpochs(Epochs),
    /// Set the sync-in-progress marker, before a learner sync changes anything.
    /// A TRUNC or SNAP install is only valid under the matching marker.
    BeginSync {
        /// DIFF, TRUNC or SNAP.
        mode: SyncMode,
        /// The zxid the sync reaches first: the TRUNC point, the snapshot's
        /// zxid, or (DIFF) the leader's last zxid.
        target: Zxid,
    },
    /// Clear the sync-in-progress marker: the sync is complete and durable.
    EndSync,
}

/// The mode of a learner synchronisation (zab-protocol.md §4.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SyncMode {
    /// Append what the learner lacks.
    Diff,
    /// Cut the learner's log back, then append.
    Trunc,
    /// Replace the learner's state with a snapshot, then append.
    Snap,
}

/// What a peer's durable storage held when it (re)started.
#[derive(Clone, Debug, Default)]
pub struct Recovered {
    /// Persisted epochs.
    pub epochs: Epochs,
    /// The newest valid snapshot, if any.
    pub snapshot: Option<SnapshotRef>,
    /// The durable log entries (those at or below the snapshot are ignored),
    /// for [`Peer::new`], which replays them as one batch. Empty for
    /// [`Peer::recover`]: a driver streams a long log in bounded batches
    /// through [`Peer::replay`] instead (storage hands it out as a
    /// [`crate::storage::RecoveredLog`]).
    pub log: Vec<Entry>,
    /// Whether a sync was in progress when the peer stopped.
    pub sync_in_progress: bool,
}

/// Switches that re-introduce known bugs, for the simulation's regression proofs.
/// All off by default; never turn one on outside a test.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TestBugs {
    /// ZOOKEEPER-5094: after an interrupted TRUNC sync, keep the proposals received
    /// in memory and treat them as if they were durable.
    pub keep_memory_after_interrupted_trunc: bool,
}

/// Configuration of one peer.
#[derive(Clone, Debug)]
pub struct Config {
    /// This peer.
    pub id: PeerId,
    /// The voting members (participants). Includes this peer unless it is an
    /// observer. Only voters count towards any quorum (election, epoch
    /// acceptance, NEWLEADER acknowledgements, proposal acknowledgements, the
    /// leadership check of a `sync`).
    pub voters: BTreeSet<PeerId>,
    /// The non-voting members (observers, ZooKeeper's `server.N=...:observer`),
    /// this peer included if it is one. Disjoint from `voters`. An observer
    /// never votes and is never counted in a quorum; it learns the leader from
    /// the voters, syncs from it like a follower and then receives committed
    /// transactions (INFORM) only. Empty by default.
    pub observers: BTreeSet<PeerId>,
    /// The highest zxid counter a leader assigns in one epoch. The proposal that
    /// gets it is the epoch's *rollover proposal* R: every peer that makes R
    /// durable persists acceptedEpoch and currentEpoch = epoch(R)+1 before it
    /// acknowledges R, and no peer writes a proposal of the next epoch before it
    /// knows R committed. The leader carries on in the next epoch, counter 1,
    /// without an election (I3; zab-protocol.md §6.2).
    pub counter_limit: CounterLimit,
    /// The quiet period after a quorum agrees on a vote (ZooKeeper's finalizeWait).
    pub finalize_wait: u64,
    /// First interval between re-sent election notifications; doubles up to
    /// `notification_interval_max`.
    pub notification_interval_min: u64,
    /// Cap of the notification interval.
    pub notification_interval_max: u64,
    /// How often the leader pings its learners.
    pub ping_interval: u64,
    /// Limit for discovery and synchronisation (ZooKeeper's initLimit × tickTime).
    pub init_limit: u64,
    /// Silence after which a learner drops its leader, and a leader a learner
    /// (syncLimit × tickTime).
    pub sync_limit: u64,
    /// Maximum proposals per PROPOSAL message.
    pub batch_entries_max: usize,
    /// Maximum size of one proposal's payload.
    pub proposal_bytes_max: usize,
    /// How many log entries at or below the latest snapshot are kept in memory for
    /// DIFF synchronisation; a learner further behind gets SNAP.
    pub log_retained_below_snapshot_max: usize,
    /// The in-memory log window, in entries: entries beyond it that are
    /// durable, committed and applied are dropped from memory (the oldest
    /// first). A learner that needs older ones gets them read from the durable
    /// log ([`ReadCmd::Log`]). Entries not yet applied are never dropped.
    pub log_window_entries_max: usize,
    /// The same bound in payload bytes.
    pub log_window_bytes_max: u64,
    /// Largest chunk of a snapshot file in one SNAP message.
    pub snap_chunk_bytes_max: usize,
    /// Snapshot bytes a leader has read or sent to one learner and the learner
    /// has not yet acknowledged as stored: bounds the memory a SNAP sync takes
    /// on both sides, whatever the snapshot's size.
    pub snap_in_flight_bytes_max: u64,
    /// Committed transactions the leader has sent (INFORM) to one observer and
    /// the observer has not yet acknowledged as durable. Beyond it the observer
    /// is dropped and syncs again: a slow observer never holds the leader's
    /// memory or the voters back (ZooKeeper's observers can lag without
    /// bound; here the bound is explicit).
    pub observer_lag_entries_max: usize,
    /// Set by the driver, different at every start (for example a boot counter);
    /// makes session ids unique across restarts.
    pub incarnation: u64,
    /// Test-only bug switches.
    pub test_bugs: TestBugs,
}

impl Config {
    /// A configuration with ZooKeeper-like timing for one tick = 1 ms.
    pub fn new(id: PeerId, voters: impl IntoIterator<Item = PeerId>) -> Config {
        Config {
            id,
            voters: voters.into_iter().collect(),
            observers: BTreeSet::new(),
            counter_limit: CounterLimit::DEFAULT,
            finalize_wait: 200,
            notification_interval_min: 200,
            notification_interval_max: 60_000,
            ping_interval: 1_000,
            init_limit: 20_000,
            sync_limit: 10_000,
            batch_entries_max: 512,
            proposal_bytes_max: 1 << 20,
            log_retained_below_snapshot_max: 500,
            log_window_entries_max: 10_000,
            log_window_bytes_max: 64 << 20,
            snap_chunk_bytes_max: 1 << 20,
            snap_in_flight_bytes_max: 8 << 20,
            observer_lag_entries_max: 10_000,
            incarnation: 0,
            test_bugs: TestBugs::default(),
        }
    }

    /// The same configuration with these non-voting members (observers).
    pub fn with_observers(mut self, observers: impl IntoIterator<Item = PeerId>) -> Config {
        self.observers = observers.into_iter().collect();
        self
    }

    /// The role member `id` has in this configuration, if it is a member.
    pub fn member_kind(&self, id: PeerId) -> Option<LearnerKind> {
        if self.voters.contains(&id) {
            Some(LearnerKind::Participant)
        } else if self.observers.contains(&id) {
            Some(LearnerKind::Observer)
        } else {
            None
        }
    }

    /// Whether this peer is an observer.
    pub fn is_observer(&self) -> bool {
        self.observers.contains(&self.id)
    }

    /// Checks the membership: at least one voter, voters and observers
    /// disjoint, this peer one of them.
    pub fn validate(&self) -> Result<(), CoreError> {
        if self.voters.is_empty() {
            return Err(CoreError::InvalidConfig("no voting member".into()));
        }
        if let Some(both) = self.voters.intersection(&self.observers).next() {
            return Err(CoreError::InvalidConfig(format!(
                "server {} is both a voter and an observer",
                both.0
            )));
        }
        if self.member_kind(self.id).is_none() {
            return Err(CoreError::InvalidConfig(format!(
                "peer {} is neither a voter nor an observer",
                self.id.0
            )));
        }
        Ok(())
    }

    fn quorum(&self) -> usize {
        self.voters.len() / 2 + 1
    }
}

/// An input to [`Peer::step`].
#[derive(Clone, Debug)]
pub enum Input {
    /// A message from another peer.
    Message {
        /// The sender (the transport has checked it is a configured server).
        from: PeerId,
        /// The message.
        msg: Message,
    },
    /// Time passed; the core checks its deadlines.
    Tick,
    /// Client proposals, in order; each has a caller-chosen id.
    Propose(Vec<(u64, Bytes)>),
    /// A linearizable-read barrier request with a caller-chosen id.
    Sync {
        /// The request id.
        id: u64,
    },
    /// Every storage command up to and including `op` is durable.
    StorageDone {
        /// The highest completed command.
        op: OpId,
    },
    /// The transport lost its connection to `peer` (a closed or reset stream):
    /// whatever was in flight on it may be lost, and nothing more arrives on
    /// it. A learner leaves a leader it can no longer hear at once, as
    /// ZooKeeper's learners do on a socket error; a leader drops that learner.
    /// Timeouts (`sync_limit`, `init_limit`) remain for silent failures only.
    PeerDisconnected {
        /// The peer whose connection ended.
        peer: PeerId,
    },
    /// A message for the leader's state machine ([`crate::Replicator::forward`]).
    /// A learner sends it on its session once it is up to date; the leader hands
    /// its own straight back as [`Output::Forwarded`]; any other peer drops it.
    Forward(Bytes),
    /// A snapshot of the state machine is durable in storage (and served to
    /// learners that need SNAP from now on), and storage applied its
    /// retention.
    ///
    /// # Correctness
    /// `log_start` is where storage's durable log starts after that purge:
    /// every entry after it that was durable is still readable
    /// ([`ReadCmd::Log`]), and storage reads nothing at or below it. Storage
    /// that keeps several snapshots keeps the log after the *oldest* one it
    /// retains (`rzk-wal`'s `snapRetainCount`), or after
    /// [`Peer::log_needed_after`] if that was lower when the commit was
    /// asked, so `log_start` is never above the newest snapshot's zxid. A
    /// SNAP transfer of an older snapshot ends by reading its tail from
    /// there, and is dropped only once `log_start` passes its snapshot.
    SnapshotSaved {
        /// The snapshot.
        snapshot: SnapshotRef,
        /// Storage's durable log is readable after this zxid.
        log_start: Zxid,
    },
    /// A read asked with [`Output::Read`] is done.
    ReadDone {
        /// The read.
        id: ReadId,
        /// Its data, or why storage could not read it.
        result: Result<ReadData, String>,
    },
    /// Storage refused command `op` because of what it was given (a received
    /// snapshot that does not verify), and changed nothing. Every command
    /// before it is complete. Storage failures are not refusals: they stop the
    /// peer.
    StorageRefused {
        /// The refused command.
        op: OpId,
    },
    /// Observers (issue 12): the driver follows an observer master (a
    /// follower's `observerMasterPort`) from this peer's applied zxid. From
    /// now on in this learner session the committed stream is
    /// [`Input::Relayed`]; the leader is told (RELAYED) and sends no more
    /// INFORMs. Ignored unless this peer is an up-to-date observer.
    RelayAttached,
    /// Committed transactions from the observer master, `prev` the zxid the
    /// master relayed them after. What this peer already has is dropped (the
    /// leader's INFORMs may overlap the relay's first batch); the rest must
    /// continue its stream exactly, or the session ends and it syncs again
    /// (I4: never a skip).
    Relayed {
        /// The committed zxid before `entries[0]` at the master.
        prev: Zxid,
        /// Contiguous committed transactions.
        entries: Vec<Entry>,
    },
    /// The relay ended (the master went, dropped this observer, or its stream
    /// failed the contiguity check): a relayed observer ends its session and
    /// syncs again from the leader.
    RelayEnded,
}

/// An output of [`Peer::step`], to be carried out in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Output {
    /// Send a message.
    Send {
        /// The destination.
        to: PeerId,
        /// The message.
        msg: Message,
    },
    /// Execute a storage command.
    Storage {
        /// Its id, acknowledged with [`Input::StorageDone`].
        op: OpId,
        /// The command.
        cmd: StorageCmd,
    },
    /// Replace the state machine's state with this durable snapshot (storage
    /// gives its bytes to the state machine).
    ApplySnapshot {
        /// The snapshot.
        snapshot: SnapshotRef,
    },
    /// Read from storage, off the protocol loop; answer with [`Input::ReadDone`].
    Read {
        /// The read's id.
        id: ReadId,
        /// What to read.
        cmd: ReadCmd,
    },
    /// Apply these committed, durable transactions, in order.
    Apply(Vec<Entry>),
    /// A proposal got its zxid.
    Proposed {
        /// The caller's id.
        id: u64,
        /// The zxid.
        zxid: Zxid,
    },
    /// A proposal was refused.
    ProposeFailed {
        /// The caller's id.
        id: u64,
        /// Why.
        error: ReplicateError,
    },
    /// A sync barrier is passed: this peer has applied everything up to `zxid`,
    /// which covers everything committed before the sync reached the leader.
    SyncDone {
        /// The caller's id.
        id: u64,
        /// The barrier.
        zxid: Zxid,
    },
    /// A sync failed.
    SyncFailed {
        /// The caller's id.
        id: u64,
        /// Why.
        error: ReplicateError,
    },
    /// Leader only: a message a member (or this peer) forwarded, for the state
    /// machine, in that member's order.
    Forwarded {
        /// The member that sent it.
        from: PeerId,
        /// The message.
        payload: Bytes,
    },
    /// A message from `peer` was refused (dropped, or it ended its session).
    /// Nothing else follows from it; the driver logs it, naming the peer (I7).
    Refused {
        /// The sender.
        peer: PeerId,
        /// The message's name ([`SessionMsg::name`], or `NOTIFICATION`).
        msg: &'static str,
        /// Why.
        reason: Refusal,
    },
    /// The peer's role changed. A change to `Looking` fails every outstanding
    /// proposal (it may still commit under a new leader). A change to leader
    /// or follower comes after the [`Output::Apply`] of every entry known
    /// committed at that point, so the state machine is current when it learns
    /// it may serve.
    RoleChanged {
        /// The new role.
        role: Role,
        /// The leader, when one is established.
        leader: Option<PeerId>,
        /// The established epoch (for `Looking`, the current epoch).
        epoch: Epoch,
    },
}

/// Why a message from a peer was refused ([`Output::Refused`]). I7: bad input
/// from a peer is dropped or ends its session, never trusted, and the driver
/// logs it naming the peer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// It belongs to a session this peer does not have: a closed one, or the
    /// session of a deposed leader (a message of an old epoch). Reported once
    /// per session.
    StaleSession(SessionId),
    /// Not the next message of its session (a gap, a duplicate, a reordering):
    /// the session ends.
    OutOfOrder {
        /// The sequence number expected.
        expected: u64,
        /// The one received.
        got: u64,
    },
    /// Not valid in the session's phase or for this peer's role: the session
    /// ends.
    Unexpected,
    /// An epoch other than the one it must carry (an offer below this peer's
    /// acceptedEpoch, or an acknowledgement of another epoch).
    WrongEpoch {
        /// The epoch in the message.
        epoch: Epoch,
        /// The epoch required.
        expected: Epoch,
    },
    /// The learner's history is more recent than this leader's (§3.3).
    AheadOfLeader,
    /// It claims history the stream never carried, breaks contiguity, or cuts
    /// below what is known committed.
    Inconsistent {
        /// The zxid it names.
        zxid: Zxid,
    },
    /// A vote for a server that is not a voter.
    UnknownVoter(PeerId),
    /// A snapshot file received from the leader that does not verify (size,
    /// zxid or checksum): nothing of it was installed.
    BadSnapshot,
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refusal::StaleSession(s) => write!(
                f,
                "session {:#x} is not a current session (closed, or a deposed leader's)",
                s.0
            ),
            Refusal::OutOfOrder { expected, got } => {
                write!(f, "message {got} of its session, expected {expected}")
            }
            Refusal::Unexpected => write!(f, "not valid in this phase or role"),
            Refusal::WrongEpoch { epoch, expected } => {
                write!(f, "epoch {epoch}, expected {expected}")
            }
            Refusal::AheadOfLeader => write!(f, "the learner is ahead of this leader"),
            Refusal::Inconsistent { zxid } => {
                write!(f, "{zxid} does not fit the session's stream")
            }
            Refusal::UnknownVoter(p) => write!(f, "a vote for server {}, not a voter", p.0),
            Refusal::BadSnapshot => write!(f, "the snapshot received does not verify"),
        }
    }
}

/// Why a peer could not start.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CoreError {
    /// The configuration is unusable.
    #[error("invalid configuration: {0}")]
    InvalidConfig(String),
    /// The recovered log is not contiguous.
    #[error("recovered log has a gap: {next} does not follow {prev}")]
    RecoveredLogGap {
        /// The last zxid before the gap.
        prev: Zxid,
        /// The first zxid after it.
        next: Zxid,
    },
    /// The recovered epochs contradict each other or the log.
    #[error("recovered epochs are inconsistent: {0}")]
    RecoveredEpochs(String),
}

/// What becomes durable when a storage command completes.
#[derive(Clone, Debug)]
enum Effect {
    /// `ackable`: the last entry that may be acknowledged once durable (all but
    /// a trailing rollover proposal, which waits for its fence).
    Append {
        last: Zxid,
        ackable: Option<Zxid>,
    },
    Truncate {
        after: Zxid,
    },
    /// A SNAP install of learner session `session`.
    Snapshot {
        snapshot: SnapshotRef,
        session: SessionId,
    },
    /// A received snapshot chunk of learner session `session` is stored up to
    /// `end`.
    SnapChunk {
        end: u64,
        session: SessionId,
    },
    Epochs {
        epochs: Epochs,
        fence: Option<Zxid>,
    },
    Marker,
}

/// Figures of the bounded log window.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WindowCounts {
    /// Entries dropped from memory because the window was full.
    pub dropped: u64,
    /// Learner syncs whose DIFF started below the window and was read from
    /// the durable log.
    pub diffs_from_disk: u64,
    /// [`ReadCmd::Log`] reads issued for them.
    pub log_reads: u64,
    /// SNAP transfers that went on past a newer snapshot saved meanwhile
    /// (storage still kept the log after theirs), counted once per snapshot.
    pub snaps_outlived_snapshot: u64,
    /// SNAP transfers that ended by reading their tail (what follows their
    /// snapshot) from the durable log.
    pub snap_tails_from_disk: u64,
    /// SNAP transfers dropped because storage purged their tail.
    pub snaps_purged: u64,
    /// The most log entries held in memory at once (the window, entries
    /// waiting for a rollover to commit, and what one step or one replayed
    /// batch added before the window was trimmed again).
    pub held_max: u64,
}

/// What a read was for.
#[derive(Clone, Copy, Debug)]
enum ReadFor {
    /// A SNAP chunk.
    Snap(SnapRead),
    /// Entries of a DIFF below the window for learner `peer`, session `session`.
    Diff { peer: PeerId, session: SessionId },
}

/// A snapshot chunk read for a learner's SNAP sync.
#[derive(Clone, Copy, Debug)]
struct SnapRead {
    peer: PeerId,
    session: SessionId,
    offset: u64,
}

/// What storage has confirmed durable.
#[derive(Clone, Copy, Debug, Default)]
struct Durable {
    /// Last durable log zxid (or the snapshot's).
    last: Zxid,
    /// Last zxid this peer may acknowledge: durable, and if it is a rollover
    /// proposal, its fence is durable too.
    ackable: Zxid,
    epochs: Epochs,
}

enum State {
    Looking(Election),
    Leading(Box<leader::Leader>),
    Following(Box<learner::Learner>),
}

/// One ZAB peer, without IO. See the module docs.
pub struct Peer {
    cfg: Config,
    now: Tick,
    out: Vec<Output>,
    durable: Durable,
    /// The epochs of the last `SaveEpochs` emitted (durable or not yet).
    written_epochs: Epochs,
    /// The newest durable snapshot ([`SnapshotRef::EMPTY`] for the empty state).
    snapshot: SnapshotRef,
    /// In-memory window of the log: entries after `log_base`, including those
    /// emitted for writing but not yet durable. Contiguous (`Zxid::is_next`).
    log: VecDeque<Entry>,
    log_base: Zxid,
    /// Payload bytes of `log` (the window's byte bound).
    log_bytes: u64,
    /// Where the available log starts (`log_start <= log_base`): entries in
    /// `(log_start, log_base]` were dropped from memory by the window and are
    /// read from the durable log when a learner needs them. All of them are
    /// applied, hence committed and durable.
    log_start: Zxid,
    /// The epoch segments of `(log_start, log_base]`, oldest first: the first
    /// and last zxid of each. Enough to tell which zxids the log holds and
    /// where each epoch ends without the entries.
    disk_segs: VecDeque<(Zxid, Zxid)>,
    /// Where storage's durable log starts, as far as this peer knows
    /// ([`Input::SnapshotSaved`]'s `log_start`; a recovered or installed
    /// snapshot's zxid): an entry at or below it that leaves memory is gone.
    storage_start: Zxid,
    /// The lowest position a learner may be DIFFed (or TRUNCed) from: the
    /// newest snapshot, or the oldest entry kept in memory below it
    /// (`log_retained_below_snapshot_max`). Below it a learner gets SNAP
    /// even if storage still keeps the log there for older snapshots (a DIFF
    /// of a long log can be larger than the snapshot; ZooKeeper bounds its
    /// txnlog sync by `snapshotSizeFactor` for the same reason).
    diff_floor: Zxid,
    /// Entries dropped from memory by the window, and DIFF syncs served from
    /// the durable log (figures for the simulation and tests).
    window_counts: WindowCounts,
    /// Received or proposed entries not yet emitted for writing because they
    /// belong to an epoch after an uncommitted rollover proposal (I3).
    blocked: VecDeque<Entry>,
    /// The uncommitted rollover proposal in the written log, if any.
    gate: Option<Zxid>,
    ops: VecDeque<(OpId, Effect)>,
    next_op: u64,
    /// Highest zxid known to be committed.
    commit_known: Zxid,
    /// Highest zxid handed to the state machine.
    applied: Zxid,
    /// Whether committed entries may be applied (leader established, or learner
    /// past UPTODATE).
    apply_enabled: bool,
    /// Election round (logical clock).
    round: u64,
    /// Learner synchronisations started, by mode: DIFF, TRUNC, SNAP.
    sync_counts: [u64; 3],
    next_session: u64,
    /// Peers whose connection the transport reported closed and that have not
    /// been heard from since. An election does not wait for their votes.
    links_down: BTreeSet<PeerId>,
    /// The last stale session reported per peer: a deposed leader's queued
    /// messages are reported once, not one line each.
    stale_reported: BTreeMap<PeerId, SessionId>,
    /// Reads asked of storage and not yet answered: SNAP chunks for a learner.
    reads: BTreeMap<ReadId, ReadFor>,
    next_read: u64,
    /// Elections started since this peer began.
    elections: u64,
    /// `Some(sync_in_progress)` between [`Peer::recover`] and
    /// [`Peer::finish_recovery`].
    recovering: Option<bool>,
    state: State,
}

impl Peer {
    /// Starts a peer from what its storage recovered, with the whole log in
    /// `rec.log` (one batch). The first outputs hand the snapshot to the state
    /// machine and start an election. Equivalent to [`Peer::recover`], one
    /// [`Peer::replay`] of `rec.log` and [`Peer::finish_recovery`], whose
    /// outputs it returns together; a driver that streams a long log uses those
    /// three instead, so that no more than the window and one batch of it is
    /// in memory at once.
    pub fn new(
        cfg: Config,
        mut rec: Recovered,
        now: Tick,
    ) -> Result<(Peer, Vec<Output>), CoreError> {
        let log = std::mem::take(&mut rec.log);
        let mut peer = Peer::recover(cfg, rec, now)?;
        let mut out = peer.replay(log)?;
        out.extend(peer.finish_recovery());
        Ok((peer, out))
    }

    /// Starts recovering a peer from its durable epochs, snapshot and sync
    /// marker; `rec.log` must be empty: the log after the snapshot follows in
    /// order through [`Peer::replay`], then [`Peer::finish_recovery`] starts
    /// the election. Until then the peer takes no [`Peer::step`].
    pub fn recover(cfg: Config, rec: Recovered, now: Tick) -> Result<Peer, CoreError> {
        cfg.validate()?;
        if rec.epochs.current > rec.epochs.accepted {
            return Err(CoreError::RecoveredEpochs(format!(
                "currentEpoch {} > acceptedEpoch {}",
                rec.epochs.current, rec.epochs.accepted
            )));
        }
        assert!(rec.log.is_empty(), "the log is given through Peer::replay");
        let snapshot = rec.snapshot.unwrap_or(SnapshotRef::EMPTY);
        let durable = Durable {
            last: snapshot.zxid,
            ackable: snapshot.zxid,
            epochs: rec.epochs,
        };
        let mut peer = Peer {
            now,
            out: Vec::new(),
            durable,
            written_epochs: rec.epochs,
            log_bytes: 0,
            log: VecDeque::new(),
            log_base: snapshot.zxid,
            log_start: snapshot.zxid,
            disk_segs: VecDeque::new(),
            storage_start: snapshot.zxid,
            diff_floor: snapshot.zxid,
            window_counts: WindowCounts::default(),
            blocked: VecDeque::new(),
            gate: None,
            ops: VecDeque::new(),
            next_op: 1,
            commit_known: snapshot.zxid,
            applied: snapshot.zxid,
            apply_enabled: false,
            round: 0,
            sync_counts: [0; 3],
            next_session: 1,
            links_down: BTreeSet::new(),
            stale_reported: BTreeMap::new(),
            elections: 0,
            state: State::Looking(Election::placeholder()),
            snapshot,
            reads: BTreeMap::new(),
            next_read: 1,
            recovering: Some(rec.sync_in_progress),
            cfg,
        };
        // I2: the state machine starts from the durable snapshot only.
        peer.out.push(Output::ApplySnapshot { snapshot });
        Ok(peer)
    }

    /// The next entries of the recovered durable log, in order and contiguous
    /// (those at or below the snapshot are skipped). Returns what to do: the
    /// first call also hands over the snapshot.
    ///
    /// The log after the snapshot is applied once it is known committed (at
    /// UPTODATE or when this peer's leadership is established), because an
    /// uncommitted tail may still be truncated by the next leader (I2). When
    /// this peer is the only voter, everything durable on it is durable on a
    /// quorum, so committed: it is applied here, batch by batch, and the
    /// window is trimmed as it goes (only applied entries leave it, as in
    /// [`Config::log_window_entries_max`]), so a restart holds the window and
    /// one batch, not the whole log. With more voters the entries wait in
    /// memory for the sync that says which of them are committed.
    pub fn replay(&mut self, batch: Vec<Entry>) -> Result<Vec<Output>, CoreError> {
        assert!(self.recovering.is_some(), "replay only during recovery");
        let mut prev = self.written_last();
        let accepted = self.durable.epochs.accepted;
        for e in batch.into_iter().filter(|e| e.zxid > self.snapshot.zxid) {
            if !e.zxid.is_next(prev) {
                return Err(CoreError::RecoveredLogGap { prev, next: e.zxid });
            }
            // Entries of an epoch are written only after that epoch was
            // accepted (a rollover's next epoch after its fence), so the log
            // can never be ahead of acceptedEpoch.
            if e.zxid.epoch() > accepted {
                return Err(CoreError::RecoveredEpochs(format!(
                    "log reaches {} but acceptedEpoch is {accepted}",
                    e.zxid
                )));
            }
            prev = e.zxid;
            self.log_bytes += e.payload.len() as u64;
            self.log.push_back(e);
        }
        self.durable.last = prev;
        self.durable.ackable = prev;
        if self.cfg.voters.len() == 1 && self.is_voter(self.cfg.id) {
            // A quorum of one: durable here is committed.
            self.commit_known = prev;
            self.apply_through(prev);
        }
        self.trim_window();
        Ok(std::mem::take(&mut self.out))
    }

    /// The recovered log is all given ([`Peer::replay`]): the peer starts its
    /// election. Returns what to do.
    pub fn finish_recovery(&mut self) -> Vec<Output> {
        let sync_in_progress = self
            .recovering
            .take()
            .expect("finish_recovery once, after Peer::recover");
        self.recompute_gate();
        // A SNAP install interrupted before its currentEpoch was written (see
        // `raise_current_to_snapshot`) is completed here.
        self.raise_current_to_snapshot(self.snapshot.zxid);
        if sync_in_progress {
            // The last sync was interrupted. Everything this peer will advertise
            // comes from the log just recovered (a prefix of that leader's
            // history, written in order), so the marker can be cleared.
            self.issue(StorageCmd::EndSync, Effect::Marker);
        }
        self.go_looking();
        std::mem::take(&mut self.out)
    }

    /// Feeds one input; returns what to do, in order.
    pub fn step(&mut self, now: Tick, input: Input) -> Vec<Output> {
        debug_assert!(self.recovering.is_none(), "a step before finish_recovery");
        if now > self.now {
            self.now = now;
        }
        match input {
            Input::Message { from, msg } => self.on_message(from, msg),
            Input::Tick => self.on_tick(),
            Input::Propose(proposals) => self.on_propose(proposals),
            Input::Sync { id } => self.on_sync(id),
            Input::StorageDone { op } => self.on_storage_done(op),
            Input::PeerDisconnected { peer } => self.on_peer_disconnected(peer),
            Input::Forward(payload) => self.on_forward(payload),
            Input::SnapshotSaved {
                snapshot,
                log_start,
            } => self.on_snapshot_saved(snapshot, log_start),
            Input::ReadDone { id, result } => self.on_read_done(id, result),
            Input::StorageRefused { op } => self.on_storage_refused(op),
            Input::RelayAttached => self.observer_relay_attached(),
            Input::Relayed { prev, entries } => self.observer_on_relayed(prev, entries),
            Input::RelayEnded => self.observer_relay_ended(),
        }
        // Once per step, after everything the input caused: the scans of just
        // committed entries (INFORM, rollovers) see them in memory.
        self.trim_window();
        std::mem::take(&mut self.out)
    }

    /// This peer's id.
    pub fn id(&self) -> PeerId {
        self.cfg.id
    }

    /// The role as the server sees it.
    pub fn role(&self) -> Role {
        match &self.state {
            State::Leading(l) if l.is_established() => Role::Leader,
            State::Following(f) if f.is_up_to_date() => self.learner_role(),
            _ => Role::Looking,
        }
    }

    /// The established leader this peer follows or is.
    pub fn leader(&self) -> Option<PeerId> {
        match &self.state {
            State::Leading(l) if l.is_established() => Some(self.cfg.id),
            State::Following(f) if f.is_up_to_date() => Some(f.leader),
            _ => None,
        }
    }

    /// The last durable zxid (what this peer may advertise).
    pub fn last_durable_zxid(&self) -> Zxid {
        self.durable.last
    }

    /// The highest zxid applied to the state machine.
    pub fn applied(&self) -> Zxid {
        self.applied
    }

    /// Figures of the bounded in-memory log window.
    pub fn window_counts(&self) -> WindowCounts {
        self.window_counts
    }

    /// Log entries held in memory: the window, and entries that wait for a
    /// rollover proposal to commit before they are written.
    pub fn log_entries_in_memory(&self) -> usize {
        self.log.len() + self.blocked.len()
    }

    /// The state an observer relay (`rzk-observer-master`) starts from: the last
    /// zxid handed to the state machine and the entries emitted for writing
    /// after it, in order. Taken between steps, it is consistent with every
    /// output emitted so far: later `Append`s continue the entries, later
    /// `Apply`s commit them in order (I4; ZOOKEEPER-5088 is a relay that starts
    /// without these entries).
    pub fn relay_snapshot(&self) -> (Zxid, Vec<Entry>) {
        let pending = self
            .log
            .iter()
            .filter(|e| e.zxid > self.applied)
            .cloned()
            .collect();
        (self.applied, pending)
    }

    /// The highest zxid known committed.
    pub fn commit_known(&self) -> Zxid {
        self.commit_known
    }

    /// The durable epochs.
    pub fn durable_epochs(&self) -> Epochs {
        self.durable.epochs
    }

    /// How many learner synchronisations this peer started, by mode: DIFF,
    /// TRUNC, SNAP.
    pub fn sync_counts(&self) -> [u64; 3] {
        self.sync_counts
    }

    /// Elections this peer has started (each time it went looking).
    pub fn elections(&self) -> u64 {
        self.elections
    }

    /// On the leader, every learner session: (id, voting, synced, acked).
    pub fn learner_stats(&self) -> Vec<crate::LearnerStats> {
        match &self.state {
            State::Leading(l) => l.learner_stats(&self.cfg.voters),
            State::Looking(_) | State::Following(_) => Vec::new(),
        }
    }

    /// On the leader, the lowest zxid after which a learner's sync in
    /// progress still reads the durable log (a SNAP transfer's snapshot, a
    /// DIFF from disk): storage that honours it
    /// ([`crate::storage::Storage::commit_snapshot`]'s `hold_after`) keeps
    /// the log after it when it purges, so the sync is never cut short by
    /// snapshots saved meanwhile (issue 11). `None`: nothing is read.
    pub fn log_needed_after(&self) -> Option<Zxid> {
        match &self.state {
            State::Leading(l) => l.log_needed_after(),
            State::Looking(_) | State::Following(_) => None,
        }
    }

    /// Sync barriers waiting on this peer (on the leader, those of its learners too).
    pub fn pending_syncs(&self) -> usize {
        match &self.state {
            State::Leading(l) => l.pending_syncs(),
            State::Following(f) => f.pending_syncs(),
            State::Looking(_) => 0,
        }
    }

    /// The number of voting members.
    pub fn voter_count(&self) -> usize {
        self.cfg.voters.len()
    }

    /// A one-line description of the peer's state, for traces.
    pub fn describe(&self) -> String {
        let st = match &self.state {
            State::Looking(e) => format!("looking(round {}, vote {:?})", self.round, e.vote.leader),
            State::Leading(l) => l.describe(),
            State::Following(f) => f.describe(),
        };
        format!(
            "{:?} {st} durable={} applied={} commit={} epochs=({},{})",
            self.cfg.id,
            self.durable.last,
            self.applied,
            self.commit_known,
            self.durable.epochs.accepted,
            self.durable.epochs.current
        )
    }

    // ---- shared machinery ----------------------------------------------------

    fn is_voter(&self, id: PeerId) -> bool {
        self.cfg.voters.contains(&id)
    }

    /// A configured member, voting or not.
    fn is_member(&self, id: PeerId) -> bool {
        self.cfg.member_kind(id).is_some()
    }

    /// The role of this peer while it follows an up-to-date session.
    fn learner_role(&self) -> Role {
        if self.cfg.is_observer() {
            Role::Observer
        } else {
            Role::Follower
        }
    }

    fn send(&mut self, to: PeerId, msg: Message) {
        self.out.push(Output::Send { to, msg });
    }

    /// Reports a refused message (I7); stale sessions once per session.
    fn refuse(&mut self, peer: PeerId, msg: &'static str, reason: Refusal) {
        if let Refusal::StaleSession(session) = reason {
            if self.stale_reported.insert(peer, session) == Some(session) {
                return;
            }
        }
        self.out.push(Output::Refused { peer, msg, reason });
    }

    /// A session message that no session of this peer can take.
    fn refuse_stale(&mut self, peer: PeerId, session: SessionId, msg: &SessionMsg) {
        self.refuse(peer, msg.name(), Refusal::StaleSession(session));
    }

    fn written_last(&self) -> Zxid {
        self.log.back().map(|e| e.zxid).unwrap_or(self.log_base)
    }

    /// The last zxid received or proposed (written or blocked).
    fn stream_last(&self) -> Zxid {
        self.blocked
            .back()
            .map(|e| e.zxid)
            .unwrap_or_else(|| self.written_last())
    }

    fn storage_idle(&self) -> bool {
        self.ops.is_empty()
    }

    fn issue(&mut self, cmd: StorageCmd, effect: Effect) {
        let op = OpId(self.next_op);
        self.next_op += 1;
        self.ops.push_back((op, effect));
        self.out.push(Output::Storage { op, cmd });
    }

    fn save_epochs(&mut self, epochs: Epochs, fence: Option<Zxid>) {
        self.written_epochs = epochs;
        self.issue(
            StorageCmd::SaveEpochs(epochs),
            Effect::Epochs { epochs, fence },
        );
    }

    /// Asks storage for a read; `for_snap` says what it is for.
    fn issue_read(&mut self, purpose: ReadFor, cmd: ReadCmd) {
        let id = ReadId(self.next_read);
        self.next_read += 1;
        self.reads.insert(id, purpose);
        self.out.push(Output::Read { id, cmd });
    }

    fn on_read_done(&mut self, id: ReadId, result: Result<ReadData, String>) {
        let Some(read) = self.reads.remove(&id) else {
            return;
        };
        if let State::Leading(_) = self.state {
            match read {
                ReadFor::Snap(read) => self.leader_on_snap_read(read, result),
                ReadFor::Diff { peer, session } => self.leader_on_diff_read(peer, session, result),
            }
        }
        // Otherwise the transfer it was for ended with this peer's leadership.
    }

    /// Storage refused `op` (a received snapshot that does not verify): every
    /// command before it is done, `op` changed nothing.
    fn on_storage_refused(&mut self, op: OpId) {
        self.on_storage_done(OpId(op.0.saturating_sub(1)));
        let session = match self.ops.pop_front() {
            Some((id, Effect::Snapshot { session, .. } | Effect::SnapChunk { session, .. }))
                if id == op =>
            {
                session
            }
            // Storage refuses only the commands of a snapshot being received;
            // anything else is a broken storage contract.
            other => panic!("storage refused {op:?}; the next command is {other:?}"),
        };
        if let State::Following(f) = &self.state {
            if f.session() == session {
                self.learner_on_snapshot_refused();
            }
        }
    }

    fn on_storage_done(&mut self, op: OpId) {
        while let Some((id, _)) = self.ops.front() {
            if *id > op {
                break;
            }
            let (_, effect) = self.ops.pop_front().expect("front exists");
            self.apply_effect(effect);
        }
        self.after_storage();
    }

    fn apply_effect(&mut self, effect: Effect) {
        match effect {
            Effect::Append { last, ackable } => {
                self.durable.last = last;
                if let Some(a) = ackable {
                    self.durable.ackable = self.durable.ackable.max(a);
                }
            }
            Effect::Truncate { after } => {
                self.durable.last = self.durable.last.min(after);
                self.durable.ackable = self.durable.ackable.min(after);
            }
            Effect::Snapshot { snapshot, session } => {
                let zxid = snapshot.zxid;
                // The log starts after the snapshot now, in storage and here:
                // memory changes only once the install is durable, so a refused
                // or interrupted install leaves it as the disk is (I2).
                self.log.clear();
                self.log_bytes = 0;
                self.log_base = zxid;
                self.log_start = zxid;
                self.disk_segs.clear();
                self.storage_start = zxid;
                self.diff_floor = zxid;
                self.gate = None;
                self.durable.last = zxid;
                self.durable.ackable = zxid;
                self.snapshot = snapshot;
                // I2: the state machine sees the snapshot only once it is durable.
                self.applied = zxid;
                self.out.push(Output::ApplySnapshot { snapshot });
                // A snapshot holds committed history only, so it holds the
                // initial history of its own epoch: currentEpoch may rise to it
                // now that it is durable. Left behind, a peer holding committed
                // txns of that epoch would lose votes to a peer of that epoch
                // with fewer of them, which would then cut them away (found in
                // simulation: a SNAP past a rollover).
                self.raise_current_to_snapshot(zxid);
                // Everything in a snapshot is committed.
                self.raise_commit_known(zxid);
                self.learner_snap_installed(session);
            }
            Effect::SnapChunk { end, session } => self.learner_snap_stored(session, end),
            Effect::Epochs { epochs, fence } => {
                self.durable.epochs = epochs;
                if let Some(r) = fence {
                    if self.durable.last >= r && self.durable.ackable < r {
                        self.durable.ackable = r;
                    }
                }
            }
            Effect::Marker => {}
        }
    }

    fn after_storage(&mut self) {
        match &self.state {
            State::Looking(_) => self.election_refresh_own_vote(),
            State::Leading(_) => self.leader_after_storage(),
            State::Following(_) => self.learner_after_storage(),
        }
        self.advance_apply();
    }

    /// Emits entries for writing, holding back those of an epoch after an
    /// uncommitted rollover proposal (I3, §6.2 step 4).
    fn write_entries(&mut self, entries: impl IntoIterator<Item = Entry>) {
        self.blocked.extend(entries);
        self.flush_blocked();
    }

    fn flush_blocked(&mut self) {
        let mut batch = Vec::new();
        while let Some(front) = self.blocked.front() {
            if let Some(g) = self.gate {
                if front.zxid.epoch() > g.epoch() {
                    break;
                }
            }
            let e = self.blocked.pop_front().expect("front exists");
            debug_assert!(e.zxid.is_next(self.written_last()), "log stays contiguous");
            if e.zxid.epoch() > self.written_epochs.accepted {
                // Only the successor of a committed rollover proposal gets here (R
                // may have arrived inside a SNAP snapshot, without its fence). The
                // epoch is persisted before its first entry (EpochFence).
                if !batch.is_empty() {
                    self.issue_append(std::mem::take(&mut batch), false);
                }
                let mut ep = self.written_epochs;
                ep.accepted = e.zxid.epoch();
                ep.accepted_from = Some(self.fence_owner());
                ep.current = ep.current.max(e.zxid.epoch());
                self.save_epochs(ep, None);
            }
            let zxid = e.zxid;
            self.log_bytes += e.payload.len() as u64;
            self.log.push_back(e.clone());
            batch.push(e);
            if zxid.is_last_with(self.cfg.counter_limit) {
                // R ends its own append, and the fence follows it, so "R durable
                // and fenced" is one point in the storage order (§6.2 step 3).
                self.issue_append(std::mem::take(&mut batch), true);
                self.issue_fence(zxid);
                if self.commit_known < zxid {
                    self.gate = Some(zxid);
                }
            }
        }
        if !batch.is_empty() {
            self.issue_append(batch, false);
        }
    }

    fn issue_append(&mut self, entries: Vec<Entry>, ends_with_rollover: bool) {
        let last = entries.last().expect("non-empty append").zxid;
        let ackable = if ends_with_rollover {
            entries.len().checked_sub(2).map(|i| entries[i].zxid)
        } else {
            Some(last)
        };
        self.issue(
            StorageCmd::Append(entries),
            Effect::Append { last, ackable },
        );
    }

    /// The fence of a rollover proposal R (I3): acceptedEpoch := epoch(R)+1 is
    /// persisted right after R, so no ACK covers R before the fence is durable
    /// and a quorum of R's ACKs means a quorum promised the next epoch.
    ///
    /// currentEpoch := epoch(R)+1 is persisted only once R is known committed
    /// (here, if it already is, or in `raise_commit_known`). Deviation from the
    /// ZOOKEEPER-4883 PR, which raises currentEpoch at the fence: if R then never
    /// commits, another leader may legitimately establish epoch(R)+1, and two
    /// different histories would both claim currentEpoch epoch(R)+1, so the vote
    /// and ACKEPOCH order (currentEpoch first) would no longer say which history
    /// is newer. The simulation found this (PrimaryIntegrity).
    fn issue_fence(&mut self, r: Zxid) {
        let Some(next) = r.epoch().next() else {
            // The epoch space is exhausted; there is no epoch to roll to. The
            // leader never proposes past R in that case (see leader::next_zxid).
            return;
        };
        let mut ep = self.written_epochs;
        if ep.accepted < next {
            ep.accepted = next;
            ep.accepted_from = Some(self.fence_owner());
        }
        if self.commit_known >= r {
            ep.current = ep.current.max(next);
        }
        self.save_epochs(ep, Some(r));
    }

    /// R is known committed: the next epoch belongs to R's leader, and this peer
    /// holds that epoch's initial history (everything up to R).
    fn confirm_rollover(&mut self, r: Zxid) {
        let Some(next) = r.epoch().next() else {
            return;
        };
        if self.written_epochs.current >= next {
            return;
        }
        let mut ep = self.written_epochs;
        ep.current = next;
        ep.accepted = ep.accepted.max(next);
        self.save_epochs(ep, None);
    }

    /// A durable snapshot at `zxid` (committed history) holds the initial
    /// history of `zxid`'s epoch: currentEpoch rises to that epoch, never
    /// before the snapshot is durable (this command follows its install).
    fn raise_current_to_snapshot(&mut self, zxid: Zxid) {
        let epoch = zxid.epoch();
        if epoch <= self.written_epochs.current {
            return;
        }
        let mut ep = self.written_epochs;
        debug_assert!(
            ep.accepted >= epoch,
            "EpochFence: accepted before the install"
        );
        ep.accepted = ep.accepted.max(epoch);
        ep.current = epoch;
        self.save_epochs(ep, None);
    }

    fn fence_owner(&self) -> PeerId {
        match &self.state {
            State::Following(f) => f.leader,
            State::Leading(_) | State::Looking(_) => self.cfg.id,
        }
    }

    /// The gate is the first rollover proposal in the written log that is not
    /// known committed.
    fn recompute_gate(&mut self) {
        let limit = self.cfg.counter_limit;
        let ck = self.commit_known;
        self.gate = self
            .log
            .iter()
            .find(|e| e.zxid > ck && e.zxid.is_last_with(limit))
            .map(|e| e.zxid);
    }

    fn raise_commit_known(&mut self, upto: Zxid) {
        if upto <= self.commit_known {
            return;
        }
        self.commit_known = upto;
        if let Some(g) = self.gate {
            if upto >= g {
                self.gate = None;
                self.confirm_rollover(g);
                self.flush_blocked();
            }
        }
    }

    fn advance_apply(&mut self) {
        if !self.apply_enabled {
            return;
        }
        let target = self
            .commit_known
            .min(self.durable.last)
            .min(self.written_last());
        self.apply_through(target);
    }

    /// Hands the entries in `(applied, target]` to the state machine: the
    /// caller knows them committed and durable.
    fn apply_through(&mut self, target: Zxid) {
        if target <= self.applied {
            return;
        }
        let start = self.log.partition_point(|e| e.zxid <= self.applied);
        let mut entries = Vec::new();
        let mut prev = self.applied;
        for e in self.log.range(start..) {
            if e.zxid > target {
                break;
            }
            assert!(
                e.zxid.is_next(prev),
                "apply order: {} does not follow {}",
                e.zxid,
                prev
            );
            prev = e.zxid;
            entries.push(e.clone());
        }
        if entries.is_empty() {
            return;
        }
        self.applied = prev;
        self.out.push(Output::Apply(entries));
        self.on_applied();
    }

    fn on_applied(&mut self) {
        match &self.state {
            State::Leading(_) => self.leader_check_syncs(),
            State::Following(_) => self.learner_check_syncs(),
            State::Looking(_) => {}
        }
    }

    fn on_snapshot_saved(&mut self, snapshot: SnapshotRef, purged_to: Zxid) {
        let zxid = snapshot.zxid;
        // What storage purged is gone whatever this snapshot is (a newer one
        // may be installed and not yet known here).
        self.forget_log_through(purged_to);
        if matches!(self.state, State::Leading(_)) {
            self.leader_drop_snaps_below(self.log_start, zxid);
        }
        if zxid <= self.snapshot.zxid || zxid > self.applied {
            return;
        }
        self.snapshot = snapshot;
        // Keep a bounded window below the snapshot in memory for DIFF; the
        // rest of what the window drops stays readable on disk down to where
        // storage's log starts (the oldest snapshot it retains), so a DIFF
        // from disk or the tail of a SNAP of an older snapshot can still be
        // served from there.
        let below = self.log.partition_point(|e| e.zxid <= zxid);
        let drop = below.saturating_sub(self.cfg.log_retained_below_snapshot_max);
        for _ in 0..drop {
            let e = self.log.pop_front().expect("counted");
            self.log_bytes -= e.payload.len() as u64;
            self.log_base = e.zxid;
            self.note_on_disk(e.zxid);
        }
        self.diff_floor = self.diff_floor.max(zxid.min(self.log_base));
    }

    /// Storage purged its durable log through `zxid`: what the window had
    /// dropped from memory at or below it is forgotten, so no DIFF plan and
    /// no SNAP tail counts on it any more.
    fn forget_log_through(&mut self, zxid: Zxid) {
        self.storage_start = self.storage_start.max(zxid);
        if zxid <= self.log_start {
            return;
        }
        while let Some(&(first, last)) = self.disk_segs.front() {
            if last <= zxid {
                self.disk_segs.pop_front();
                self.log_start = last;
                continue;
            }
            if first <= zxid {
                // A segment lies in one epoch, so `zxid + 1` is its next.
                self.disk_segs[0].0 = Zxid::from_u64(zxid.as_u64() + 1);
                self.log_start = zxid;
            }
            break;
        }
        if self.disk_segs.is_empty() {
            // Only memory is left: the available log starts at its base (or
            // where storage's starts, if that is above it: entries still in
            // memory stay usable, the window only forgets what it drops).
            self.log_start = self.log_base;
        }
    }

    /// Records that `zxid`, just dropped from memory (so applied and
    /// durable), is on disk, unless storage already purged it: then it is
    /// forgotten, and the available log starts after it.
    fn note_on_disk(&mut self, zxid: Zxid) {
        if zxid <= self.storage_start {
            // Nothing older is known: the purge point passed it too.
            debug_assert!(self.disk_segs.is_empty(), "segments below a purge");
            self.disk_segs.clear();
            self.log_start = zxid;
            return;
        }
        match self.disk_segs.back_mut() {
            Some((_, last)) if zxid.is_next(*last) && zxid.epoch() == last.epoch() => {
                *last = zxid;
            }
            _ => self.disk_segs.push_back((zxid, zxid)),
        }
    }

    /// Drops the oldest entries from memory while the window is over its bound
    /// and they are applied (so committed and durable). They stay in the durable
    /// log: `disk_segs` remembers which zxids they were, and a learner that
    /// needs them gets them read from storage.
    fn trim_window(&mut self) {
        let (entries_max, bytes_max) = (
            self.cfg.log_window_entries_max,
            self.cfg.log_window_bytes_max,
        );
        // The log grows only inside a step or a replayed batch, and this runs
        // at the end of each: so this is the most it ever held.
        let held = (self.log.len() + self.blocked.len()) as u64;
        self.window_counts.held_max = self.window_counts.held_max.max(held);
        while self.log.len() > entries_max || self.log_bytes > bytes_max {
            let Some(front) = self.log.front() else {
                return;
            };
            // Never what is not applied: uncommitted entries may still be cut
            // by a TRUNC, and not-yet-durable ones cannot be read back.
            if front.zxid > self.applied || front.zxid > self.durable.last {
                return;
            }
            // A SNAP transfer in progress needs no hold here: the tail after
            // its snapshot stays readable on disk until storage purges it
            // (`Input::SnapshotSaved::log_start`), and is read from there.
            let e = self.log.pop_front().expect("front exists");
            self.log_bytes -= e.payload.len() as u64;
            self.note_on_disk(e.zxid);
            self.log_base = e.zxid;
            self.window_counts.dropped += 1;
        }
    }

    /// Whether the log holds `z` (in memory or on disk), or `z` is where the
    /// available log starts.
    fn log_has(&self, z: Zxid) -> bool {
        if z == self.log_start || z == self.log_base {
            return true;
        }
        if z > self.log_base {
            return self.log.binary_search_by(|e| e.zxid.cmp(&z)).is_ok();
        }
        self.disk_segs
            .iter()
            .any(|(first, last)| first.epoch() == z.epoch() && *first <= z && z <= *last)
    }

    /// The last zxid of `epoch` in the available log, if the log shows it (its
    /// start counts).
    fn log_epoch_end(&self, epoch: Epoch) -> Option<Zxid> {
        let idx = self.log.partition_point(|e| e.zxid.epoch() <= epoch);
        if idx > 0 {
            let z = self.log[idx - 1].zxid;
            return (z.epoch() == epoch).then_some(z);
        }
        if let Some(&(_, last)) = self
            .disk_segs
            .iter()
            .rev()
            .find(|(f, _)| f.epoch() <= epoch)
        {
            return (last.epoch() == epoch).then_some(last);
        }
        (self.log_start.epoch() == epoch).then_some(self.log_start)
    }

    fn on_message(&mut self, from: PeerId, msg: Message) {
        if !self.is_member(from) || from == self.cfg.id {
            return;
        }
        // A message proves the link is up again.
        self.links_down.remove(&from);
        match msg {
            Message::Notification(n) => self.on_notification(from, n),
            Message::Session { session, seq, msg } => match &self.state {
                State::Leading(_) => self.leader_on_session(from, session, seq, msg),
                State::Following(_) => self.learner_on_session(from, session, seq, msg),
                State::Looking(_) => self.election_on_session(from, session, seq, msg),
            },
        }
    }

    fn on_peer_disconnected(&mut self, peer: PeerId) {
        if !self.is_member(peer) || peer == self.cfg.id {
            return;
        }
        self.links_down.insert(peer);
        match &self.state {
            State::Looking(_) => self.election_on_disconnected(peer),
            State::Leading(_) => self.leader_on_disconnected(peer),
            State::Following(f) => {
                if f.leader == peer {
                    // The session's stream is gone: nothing more of it can
                    // arrive, so waiting for `sync_limit` would only delay the
                    // next election (ZooKeeper's learner leaves on the socket
                    // error too).
                    self.go_looking();
                }
            }
        }
    }

    fn on_tick(&mut self) {
        match &self.state {
            State::Looking(_) => self.election_tick(),
            State::Leading(_) => self.leader_tick(),
            State::Following(_) => self.learner_tick(),
        }
    }

    fn on_propose(&mut self, proposals: Vec<(u64, Bytes)>) {
        match &self.state {
            State::Leading(l) if l.is_established() => self.leader_propose(proposals),
            _ => {
                let leader = self.leader();
                for (id, _) in proposals {
                    self.out.push(Output::ProposeFailed {
                        id,
                        error: ReplicateError::NotLeader { leader },
                    });
                }
            }
        }
    }

    fn on_forward(&mut self, payload: Bytes) {
        match &self.state {
            State::Leading(l) if l.is_established() => {
                let from = self.cfg.id;
                self.out.push(Output::Forwarded { from, payload });
            }
            State::Following(f) if f.is_up_to_date() => self.learner_forward(payload),
            // Lost, as documented: the server closes its clients when it leaves
            // its leader, so nothing waits for this message.
            State::Leading(_) | State::Following(_) | State::Looking(_) => {}
        }
    }

    fn on_sync(&mut self, id: u64) {
        match &self.state {
            State::Leading(l) if l.is_established() => self.leader_local_sync(id),
            State::Following(f) if f.is_up_to_date() => self.learner_local_sync(id),
            _ => {
                let leader = self.leader();
                self.out.push(Output::SyncFailed {
                    id,
                    error: ReplicateError::NotLeader { leader },
                });
            }
        }
    }

    /// Leaves the current role and starts an election.
    fn go_looking(&mut self) {
        match std::mem::replace(&mut self.state, State::Looking(Election::placeholder())) {
            State::Looking(_) => {}
            State::Leading(l) => self.leader_leave(*l),
            State::Following(f) => self.learner_leave(*f),
        }
        // Proposals not yet written were never durable anywhere; they are dropped
        // (I2). Written ones stay: storage will make them durable or a crash loses
        // them, and either way what we advertise is what storage confirmed.
        self.blocked.clear();
        self.apply_enabled = false;
        self.recompute_gate();
        self.out.push(Output::RoleChanged {
            role: Role::Looking,
            leader: None,
            epoch: self.durable.epochs.current,
        });
        self.elections += 1;
        self.start_election();
    }
}

#[cfg(test)]
mod tests;

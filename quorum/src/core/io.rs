//! The core's boundary: what goes into [`Peer::step`](super::Peer::step)
//! ([`Input`]), what comes out of it ([`Output`]), the storage commands and
//! reads the driver carries out for the core, and why the core refuses a
//! message or cannot start.
//! Everything here is re-exported from [`crate::core`], where the module docs
//! say in which order outputs must be carried out.

use bytes::Bytes;
use rzk_zxid::{Epoch, Zxid};

use crate::message::{Entry, LinkId, Message};
use crate::{PeerId, ReplicateError, Role};

/// Abstract time: the driver decides what one tick is (the tokio driver and the
/// simulation use one millisecond). All timeouts in [`Config`](super::Config) are in ticks.
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

/// A peer's persisted epochs (docs/zab.md, "Two persisted epochs").
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

/// The mode of a learner synchronisation (docs/zab.md, "Choosing DIFF, TRUNC or
/// SNAP").
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
    /// for [`Peer::new`](super::Peer::new), which replays them as one batch.
    /// Empty for [`Peer::recover`](super::Peer::recover): a driver streams a
    /// long log in bounded batches through
    /// [`Peer::replay`](super::Peer::replay) instead (storage hands it out as
    /// a [`crate::storage::RecoveredLog`]).
    pub log: Vec<Entry>,
    /// Whether a sync was in progress when the peer stopped.
    pub sync_in_progress: bool,
}

/// An input to [`Peer::step`](super::Peer::step).
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
    /// Timeouts (`sync_limit_ticks`, `init_limit_ticks`) remain for silent failures only.
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
    /// [`Peer::log_needed_after`](super::Peer::log_needed_after) if that was
    /// lower when the commit was asked, so `log_start` is never above the newest snapshot's zxid. A
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
    /// Observers: the driver follows an observer master (a follower's
    /// `observerMasterPort`) from this peer's applied zxid. From now on in this
    /// learner session the committed stream is [`Input::Relayed`]; the leader
    /// is told (RELAYED) and sends no more INFORMs. Ignored unless this peer is
    /// an up-to-date observer.
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

/// An output of [`Peer::step`](super::Peer::step), to be carried out in order.
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
        /// The message's name
        /// ([`SessionMsg::name`](crate::message::SessionMsg::name), or
        /// `NOTIFICATION`).
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
    StaleSession(LinkId),
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
    /// The learner's history is more recent than this leader's (docs/zab.md,
    /// "The leader's side").
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

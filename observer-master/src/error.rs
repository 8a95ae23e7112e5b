//! The errors of this crate: one enum per side.

use rzk_zxid::Zxid;

use crate::ObserverId;

/// Why a [`crate::Fanout`] can no longer relay its source's stream.
///
/// Every variant means the same thing to the caller: the fan-out's view of its
/// source is wrong, so it is dropped (every observer attached to it is
/// disconnected and resyncs) and rebuilt from a fresh subscription (I4). None is
/// ever skipped over.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FanoutError {
    /// The snapshot handed to the constructor is not contiguous: its pending
    /// proposals do not start right after its committed zxid, or skip one.
    #[error("source snapshot is not contiguous: {zxid} does not follow {after}")]
    SnapshotNotContiguous {
        /// The last zxid before the offending one (committed or pending).
        after: Zxid,
        /// The pending proposal that does not follow it.
        zxid: Zxid,
    },
    /// A live proposal that does not directly follow the last one known
    /// (`Zxid::is_next`, rollover rule included).
    #[error("proposal {zxid} does not follow {after}")]
    ProposalOutOfOrder {
        /// The last proposal (or the committed zxid when none is pending).
        after: Zxid,
        /// The proposal that arrived.
        zxid: Zxid,
    },
    /// A commit for a zxid that is not the oldest pending proposal: the relay
    /// never saw that proposal (ZOOKEEPER-5088) or saw them in another order.
    /// ZooKeeper's ObserverMaster skips the relay silently here; we stop.
    #[error("commit of {zxid} without a matching proposal (oldest pending: {head:?})")]
    CommitWithoutProposal {
        /// The committed zxid.
        zxid: Zxid,
        /// The oldest pending proposal, if any.
        head: Option<Zxid>,
    },
    /// More proposals pending than `pending_proposals_max`: the source is far
    /// ahead of its commits, or commits are being lost.
    #[error("more than {max} proposals pending")]
    TooManyPending {
        /// The limit that was reached.
        max: usize,
    },
}

/// Why an observer could not be attached to a fan-out.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AttachError {
    /// The observer is synced to a zxid older than the oldest committed
    /// transaction retained, so the stream cannot continue its history: it must
    /// sync again (DIFF from the log, or SNAP).
    #[error("observer {observer} synced to {synced_to} is too far behind (oldest retained: {oldest_retained:?}, committed: {committed})")]
    TooFarBehind {
        /// The observer.
        observer: ObserverId,
        /// Where the observer's history ends.
        synced_to: Zxid,
        /// The oldest committed transaction still retained.
        oldest_retained: Option<Zxid>,
        /// The source's last committed zxid.
        committed: Zxid,
    },
    /// The observer claims more history than the source has committed: it must
    /// sync again (it will be truncated).
    #[error("observer {observer} synced to {synced_to} is ahead of the committed {committed}")]
    AheadOfSource {
        /// The observer.
        observer: ObserverId,
        /// Where the observer's history ends.
        synced_to: Zxid,
        /// The source's last committed zxid.
        committed: Zxid,
    },
    /// An observer of that id is attached already.
    #[error("observer {0} is attached already")]
    AlreadyAttached(ObserverId),
    /// The relay is being rebuilt from its source (or shutting down); try again.
    #[error("the observer master has no source right now")]
    NoSource,
}

/// What an observer's receiving side refuses: the stream is not the next part
/// of its history. The observer drops its connection and syncs again; it never
/// applies the transaction and never skips ahead.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum StreamError {
    /// One or more transactions are missing between the last applied and this one.
    #[error(
        "gap in the committed stream: {got} (after {prev} at the source) after {last_applied}"
    )]
    Gap {
        /// The last zxid applied.
        last_applied: Zxid,
        /// The zxid the source says comes right before `got`.
        prev: Zxid,
        /// The zxid that arrived.
        got: Zxid,
    },
    /// A transaction at or before the last applied one (a duplicate or a reordering).
    #[error("committed stream out of order: {got} after {last_applied}")]
    Reordered {
        /// The last zxid applied.
        last_applied: Zxid,
        /// The zxid that arrived.
        got: Zxid,
    },
    /// The relay's own link is broken: `got` cannot follow `prev` (`Zxid::is_next`,
    /// rollover rule included).
    #[error("committed stream link broken: {got} cannot follow {prev}")]
    BrokenLink {
        /// The zxid the source says comes right before `got`.
        prev: Zxid,
        /// The zxid that arrived.
        got: Zxid,
    },
}

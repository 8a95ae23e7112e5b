//! The one error type of this crate.

use std::fmt;
use std::io;
use std::path::PathBuf;
use std::sync::Arc;

use rzk_zxid::{Epoch, Zxid};

use crate::meta::{SyncMarker, SyncMode};

/// Everything that can go wrong in `rzk-wal`.
///
/// Variants name what happened and where (file, offset, zxid). It is `Clone` so
/// that one fsync failure can be reported to every appender waiting on it.
#[derive(Debug, Clone, thiserror::Error)]
pub enum WalError {
    /// An operating-system call failed.
    #[error("{op} {path}: {source}")]
    Io {
        /// What was being done (`"fdatasync"`, `"write"`, `"rename"`, ...).
        op: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// The operating system's error.
        #[source]
        source: Arc<io::Error>,
    },
    /// The log stopped after a write or fsync error and accepts nothing until it
    /// is reopened. Data the kernel reported as not written may be lost, so it is
    /// never retried (the PostgreSQL fsync lesson): reopening reads back what the
    /// disk really holds.
    #[error("the log has failed and accepts nothing until reopened: {cause}")]
    Failed {
        /// The first error, which stopped the log.
        cause: Arc<WalError>,
    },
    /// An append whose zxid is not greater than the log's last one.
    #[error(
        "append of {got} refused: zxids must strictly increase, the log already reaches {last}"
    )]
    NotIncreasing {
        /// The last zxid the log has accepted.
        last: Zxid,
        /// The zxid that was offered.
        got: Zxid,
    },
    /// An append that would leave a gap: inside one epoch zxids must be contiguous,
    /// and a new epoch starts at counter 1 (`Zxid::is_next`). This is the check that
    /// makes the ZOOKEEPER-5094 history (Z1 durable, Z2 only in memory, Z3
    /// appended) impossible to write.
    #[error(
        "append of {got} refused: it does not directly follow {last}, the log would have a gap"
    )]
    Gap {
        /// The last zxid the log has accepted.
        last: Zxid,
        /// The zxid that was offered.
        got: Zxid,
    },
    /// A record larger than [`crate::LogOptions::record_bytes_max`].
    #[error("record {zxid} of {size_bytes} bytes exceeds the limit of {limit_bytes} bytes")]
    RecordTooLarge {
        /// The record's zxid.
        zxid: Zxid,
        /// Its encoded size.
        size_bytes: usize,
        /// The limit.
        limit_bytes: usize,
    },
    /// Too many bytes are waiting for fsync ([`crate::LogOptions::pending_bytes_max`]).
    /// Nothing was accepted; wait for earlier appends and try again.
    #[error(
        "{pending_bytes} bytes are waiting for fsync, the limit is {limit_bytes}; append refused"
    )]
    Overloaded {
        /// Bytes accepted but not yet durable.
        pending_bytes: usize,
        /// The limit.
        limit_bytes: usize,
    },
    /// A damaged record or segment that is not at the tail of the log. The caller
    /// decides: open again with [`crate::RecoveryMode::TruncateCorrupt`] to cut the
    /// log at this point, or restore the data directory.
    #[error("corrupt log {path} at offset {offset}: {reason}")]
    Corrupt {
        /// The segment file.
        path: PathBuf,
        /// The byte offset in that file.
        offset: u64,
        /// What is wrong there.
        reason: String,
    },
    /// Two records on disk that do not follow each other.
    #[error("log {path} at offset {offset}: {found} does not follow {prev}, the log has a gap")]
    HistoryGap {
        /// The segment file.
        path: PathBuf,
        /// The byte offset of the record that does not follow.
        offset: u64,
        /// The zxid before it.
        prev: Zxid,
        /// The zxid found.
        found: Zxid,
    },
    /// A file this crate wrote (marker, start, snapshot) that does not verify.
    #[error("corrupt file {path}: {reason}")]
    CorruptFile {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// A zxid below the log's start: those records were purged (a DIFF from here
    /// is impossible; send a snapshot).
    #[error("zxid {zxid} is before the log start {start}; those records were purged")]
    Purged {
        /// The zxid asked for.
        zxid: Zxid,
        /// The log's start.
        start: Zxid,
    },
    /// A zxid beyond the durable end of the log.
    #[error("zxid {zxid} is beyond the durable end of the log {end}")]
    BeyondEnd {
        /// The zxid asked for.
        zxid: Zxid,
        /// The last durable zxid.
        end: Zxid,
    },
    /// A zxid within the log's range that is neither its start nor one of its
    /// records (another history diverged here).
    #[error("zxid {zxid} is not a record of this log")]
    NotInLog {
        /// The zxid asked for.
        zxid: Zxid,
    },
    /// The log changed (truncate, reset) while a reader was reading it.
    #[error("the log was rewritten while being read; read again")]
    Rewritten,
    /// An epoch would go down: epochs are promises and never decrease.
    #[error("{which} may not decrease: it is {current}, {requested} was asked")]
    EpochRegression {
        /// `"acceptedEpoch"` or `"currentEpoch"`.
        which: &'static str,
        /// The stored value.
        current: Epoch,
        /// The refused value.
        requested: Epoch,
    },
    /// currentEpoch would exceed acceptedEpoch.
    #[error("currentEpoch {requested} would exceed acceptedEpoch {accepted}")]
    CurrentAboveAccepted {
        /// The refused currentEpoch.
        requested: Epoch,
        /// The stored acceptedEpoch.
        accepted: Epoch,
    },
    /// An operation that belongs to a learner sync was called without the matching
    /// sync-in-progress marker, so a crash in it could be mistaken for a complete
    /// sync (I2).
    #[error("{operation} needs a {expected:?} sync marker{}, found {found}", target_text(*target))]
    SyncMarkerMissing {
        /// The refused operation.
        operation: &'static str,
        /// The mode it needs.
        expected: SyncMode,
        /// The target it needs, when it needs one.
        target: Option<Zxid>,
        /// What is set.
        found: MarkerText,
    },
    /// A snapshot that claims history the log does not durably hold.
    #[error("snapshot at {zxid} refused: the log is durable only up to {end}")]
    SnapshotBeyondLog {
        /// The snapshot's zxid.
        zxid: Zxid,
        /// The log's last durable zxid.
        end: Zxid,
    },
    /// No snapshot can be combined with the log to rebuild state: every snapshot is
    /// corrupt or missing, and the log does not start at the empty history.
    #[error(
        "no valid snapshot covers the log start {log_start}; state cannot be rebuilt from disk"
    )]
    NoUsableSnapshot {
        /// Where the log starts.
        log_start: Zxid,
    },
    /// A snapshot stream that was misused or stopped: a chunk out of order or
    /// past the announced size, a writer dropped before it finished, a
    /// received snapshot installed under the wrong sync marker's target.
    #[error("snapshot {zxid}: {reason}")]
    SnapshotTransfer {
        /// The snapshot's zxid.
        zxid: Zxid,
        /// What went wrong.
        reason: String,
    },
    /// The metadata store (sled) failed.
    #[error("metadata store {path}: {reason}")]
    Meta {
        /// The sled directory.
        path: PathBuf,
        /// sled's error.
        reason: String,
    },
    /// The log is closed.
    #[error("the log is closed")]
    Closed,
}

fn target_text(target: Option<Zxid>) -> String {
    match target {
        Some(z) => format!(" for {z}"),
        None => String::new(),
    }
}

/// A sync marker as text, for [`WalError::SyncMarkerMissing`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MarkerText(pub Option<SyncMarker>);

impl fmt::Display for MarkerText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            None => write!(f, "none"),
            Some(m) => write!(f, "{:?} to {}", m.mode, m.target),
        }
    }
}

impl WalError {
    /// An [`WalError::Io`] for `op` on `path`.
    pub(crate) fn io(op: &'static str, path: impl Into<PathBuf>, source: io::Error) -> WalError {
        WalError::Io {
            op,
            path: path.into(),
            source: Arc::new(source),
        }
    }
}

/// `Result` with [`WalError`].
pub type Result<T, E = WalError> = std::result::Result<T, E>;

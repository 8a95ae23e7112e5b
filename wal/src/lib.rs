//! `rzk-wal`: a peer's durable history — the transaction log, snapshots and
//! epoch metadata of an rzk (ZooKeeper-compatible) server.
//!
//! ```no_run
//! use bytes::Bytes;
//! use rzk_wal::{Wal, WalOptions};
//! use rzk_zxid::{Counter, Epoch, Zxid};
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let (wal, recovery) = Wal::open("/var/lib/rzk", WalOptions::default())?;
//! assert!(recovery.sync_in_progress.is_none(), "else: rebuild from disk, sync again");
//! let z = Zxid::new(Epoch(1), Counter(1));
//! wal.append(z, Bytes::from_static(b"create /a"))?.await?; // durable now
//! assert_eq!(wal.last_durable_zxid(), z);
//! wal.save_snapshot(z, &mut &b"state at z"[..])?;
//! let rebuild = wal.rebuild()?; // newest valid snapshot + the records after it
//! for record in rebuild.records { let _ = record?; }
//!
//! // A snapshot streamed in chunks (bounded queue, its own thread), and read
//! // back without holding it in memory; the reader checks the checksum.
//! let mut writer = wal.snapshot_writer(z)?;
//! writer.write(Bytes::from_static(b"state "))?; // or try_write + ready().await
//! writer.write(Bytes::from_static(b"at z"))?;
//! wal.commit_snapshot(writer.finish().await?)?;
//! let mut state = Vec::new();
//! std::io::Read::read_to_end(&mut wal.open_snapshot(z)?.state_reader(), &mut state)?;
//! # Ok(()) }
//! ```
//!
//! # What it guarantees
//! - **I1.** [`Wal::last_durable_zxid`] moves past a record only once the record's
//!   bytes are durable (fdatasync returned), and goes back only through
//!   [`Wal::truncate_after`] or [`Wal::install_snapshot`]. It is the only answer
//!   this crate gives to "how far does my history reach".
//! - **No gap can be written.** Appends must strictly increase and be contiguous
//!   inside an epoch ([`rzk_zxid::Zxid::is_next`]); the history of ZOOKEEPER-5094
//!   (Z1 durable, Z2 only in memory, Z3 appended) is refused with
//!   [`WalError::Gap`].
//! - **I2.** Everything in memory can be rebuilt from what this crate holds:
//!   [`Wal::rebuild`] gives the newest valid snapshot and a stream of the records
//!   after it. A learner sync runs under a sync marker in sled that open reports,
//!   so an interrupted sync is never mistaken for a complete one.
//! - **Group commit.** Concurrent appends share one fdatasync; an append's future
//!   resolves only when its bytes are durable. Turning fsync off is possible only
//!   through [`LogOptions::unsafe_no_fsync`].
//! - **Crashes.** A torn tail of the last segment is cut off on open (logged with
//!   its offset); damage elsewhere is a hard error naming the file and offset
//!   unless [`RecoveryMode::TruncateCorrupt`] is asked for. Truncation, reset and
//!   snapshot install are atomic across crashes (marker files and ordered
//!   commits). An fsync error stops the log for good: nothing is retried.
//!
//! - **Snapshots as files.** A streamed snapshot ([`SnapshotWriter`]) or a
//!   received one ([`IncomingSnapshot`]) is complete, verified and durable under
//!   a temporary name before it enters the catalog by rename; dropping either
//!   before it finishes removes its file, and a crash leaves a file the next
//!   open removes. A [`SnapshotFile`] reads at offsets of one open descriptor,
//!   so retention cannot break a transfer in progress.
//!
//! - **Read-only inspection.** [`inspect`] reads a log directory and snapshot
//!   files without changing them (no tail cut, no repair, no lock): for dump
//!   tools and copies of a data directory.
//!
//! Layout under the directory given to [`Wal::open`]: `log/log.<hex zxid>`
//! segments (named by their first zxid, as ZooKeeper names them), `snap/snapshot.<hex
//! zxid>` files, and `meta/` (sled) with acceptedEpoch, currentEpoch, the snapshot
//! catalog and the sync marker. Unix only (positional writes, directory fsync).

#![deny(missing_docs)]

mod durability;
mod error;
mod format;
pub mod inspect;
mod log;
mod meta;
mod reader;
mod segment;
mod snapshot;
mod snapshot_stream;
mod wal;

pub use crate::error::{MarkerText, Result, WalError};
pub use crate::log::{
    Append, Log, LogOptions, LogRecovery, PurgeReport, RecoveryMode, Repair, Rewrite, SegmentInfo,
    TailCut,
};
pub use crate::meta::{Meta, SyncMarker, SyncMode};
pub use crate::reader::{LogReader, Record};
pub use crate::snapshot::{LoadedSnapshot, SnapshotFile, SnapshotInfo, StateReader};
pub use crate::snapshot_stream::{
    Finishing, IncomingSnapshot, ReceivedSnapshot, SnapshotDir, SnapshotWriter, TryWriteError,
    WrittenSnapshot, SNAPSHOT_QUEUE_BYTES_MAX,
};
pub use crate::wal::{
    FileRebuild, PreloadFn, Rebuild, Recovery, SnapshotPreload, Wal, WalOptions,
    SNAPSHOT_WRITE_BYTES_PER_SEC_MAX,
};

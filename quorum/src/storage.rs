//! What the tokio driver needs from durable storage.
//!
//! The core emits [`StorageCmd`]s; the driver runs them on one dedicated thread,
//! in order, and makes them durable in groups (group commit: execute every
//! command that is waiting, then one [`Storage::sync`]). Reads the core asks for
//! ([`crate::core::ReadCmd`]), the snapshot the state machine loads, and the
//! snapshots it writes go through a [`StorageReader`] that works from any
//! thread, off the protocol loop. `rzk-wal` is the production implementation
//! ([`crate::wal_storage::WalStorage`]); [`MemStorage`] is an in-memory one for
//! tests, whose "durable" state survives a simulated restart by sharing it.
//!
//! Snapshots are files (bytes in [`MemStorage`]): the core only holds a
//! [`SnapshotRef`]; a SNAP sync streams the leader's file in chunks into a
//! file on the learner, which is verified before it is installed.

use std::any::Any;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};

use bytes::{Bytes, BytesMut};
use rzk_zxid::Zxid;

use crate::core::{Epochs, ReadCmd, ReadData, Recovered, SnapshotRef, StorageCmd};
use crate::message::Entry;
use crate::replicator::SnapshotSource;

/// A storage failure.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StorageError {
    /// Storage failed (an fsync, a full disk, a corrupt file of our own). The
    /// driver stops the peer: an error that could mean lost data is never
    /// retried into silence (STYLE rule 6).
    #[error("storage: {0}")]
    Failed(String),
    /// The disk is full: a log write was refused for lack of space (ENOSPC or a
    /// quota). Nothing of it was acknowledged, and what the log held before is
    /// intact, so the peer stops like [`StorageError::Failed`] but may be started
    /// again from its directory once space is free (ZooKeeper's member rejoins
    /// the same way). A failed fsync is never this: see `Failed`.
    #[error("storage: the disk is full: {0}")]
    Full(String),
    /// What storage was given is unusable and nothing changed: a snapshot
    /// received from a leader that does not verify. The peer goes on (its
    /// sync with that leader ends).
    #[error("refused: {0}")]
    Refused(String),
}

/// A peer's durable state, as the driver uses it.
///
/// # Correctness
/// - Commands are executed in the order given; [`Storage::sync`] makes every
///   command executed so far durable, and returns only then.
/// - After a crash, [`Storage::recover`] returns a prefix of the executed
///   commands' effects (a torn last record is discarded), never a hole; a
///   damaged record anywhere else is an error, never skipped.
/// - `Append` continues the log contiguously; `TruncateAfter` and
///   `InstallSnapshot` are atomic once synced.
/// - Only `SnapshotChunk` and `InstallSnapshot` may fail with
///   [`StorageError::Refused`] (a received file that does not verify); they
///   then change nothing the peer had.
/// - Every call runs on one thread at a time (all write IO is serialised).
pub trait Storage: Send + 'static {
    /// Reads what is durable: the epochs, the newest valid snapshot and the
    /// sync marker (with `log` empty), and the log after that snapshot as a
    /// [`RecoveredLog`] the driver reads in bounded batches, so that a long
    /// log is never held whole. The reader is independent of `self` (the
    /// storage thread takes `self` meanwhile) and is read to its end before
    /// the peer writes anything.
    fn recover(&mut self) -> Result<(Recovered, RecoveredLog), StorageError>;
    /// Executes one command (it need not be durable before `sync`).
    fn execute(&mut self, cmd: StorageCmd) -> Result<(), StorageError>;
    /// Makes every executed command durable.
    fn sync(&mut self) -> Result<(), StorageError>;
    /// Puts a snapshot written through a [`SnapshotSink`] into the catalog
    /// (durably), and purges the history no retained snapshot needs.
    ///
    /// # Correctness
    /// The returned [`SavedSnapshot::log_start`] says truly where the log
    /// starts after the purge: every entry after it that was durable stays
    /// readable until a later purge reports a higher start, and the
    /// snapshots a reader has open stay readable (a SNAP transfer streams
    /// them). The core counts on it to finish SNAP transfers of older
    /// snapshots from the log, and drops them only once it passes them.
    ///
    /// `hold_after` ([`crate::core::Peer::log_needed_after`], read when the
    /// commit was asked): a sync in progress reads the log after this zxid;
    /// storage should keep it when it purges (`rzk-wal` does; a storage that
    /// does not just reports the higher start it has, and the core drops
    /// that sync).
    fn commit_snapshot(
        &mut self,
        written: WrittenSnapshot,
        hold_after: Option<Zxid>,
    ) -> Result<SavedSnapshot, StorageError>;
    /// The read side, for other threads.
    fn reader(&self) -> Arc<dyn StorageReader>;
    /// A way to append to the log from the driver's own task, without a round
    /// trip through the storage thread ([`DirectLog`]). `None` (the default):
    /// every command goes through [`Storage::execute`].
    ///
    /// # Correctness
    /// The driver appends through it only while every command it gave the
    /// storage thread is done (executed and synced), so the log sees appends
    /// and other commands in the core's order. A storage that returns one must
    /// therefore make [`Storage::execute`] of any command but `Append`, and
    /// [`Storage::commit_snapshot`], wait until every append made through it
    /// is durable first, as for its own appends.
    fn direct_log(&self) -> Option<Box<dyn DirectLog>> {
        None
    }
}

/// The durable log after the recovered snapshot, in order, read on demand
/// ([`Storage::recover`]): only the batch asked for is in memory.
///
/// # Correctness
/// Entries come contiguous and checked as storage checks them (`rzk-wal`:
/// every record's CRC again, and contiguity). A record that does not read
/// back is an error that ends the log ([`StorageError::Failed`], naming the
/// file and offset); only a torn *last* record is cut, and that was done when
/// storage was opened.
pub struct RecoveredLog {
    entries: Box<dyn Iterator<Item = Result<Entry, StorageError>> + Send>,
    /// Set once the iterator ended or failed: it yields nothing more.
    done: bool,
}

impl RecoveredLog {
    /// A log read from `entries`, in order.
    pub fn new(
        entries: impl Iterator<Item = Result<Entry, StorageError>> + Send + 'static,
    ) -> RecoveredLog {
        RecoveredLog {
            entries: Box::new(entries),
            done: false,
        }
    }

    /// A log held in memory (tests).
    pub fn from_entries(entries: Vec<Entry>) -> RecoveredLog {
        RecoveredLog::new(entries.into_iter().map(Ok))
    }

    /// The next entries: at most `entries_max`, and no more payload bytes than
    /// `bytes_max` unless one entry alone is larger (at least one entry while
    /// any is left). Empty at the end of the log. After an error it returns
    /// empty batches.
    pub fn next_batch(
        &mut self,
        entries_max: usize,
        bytes_max: usize,
    ) -> Result<Vec<Entry>, StorageError> {
        let mut batch = Vec::new();
        let mut bytes = 0usize;
        while !self.done && batch.len() < entries_max.max(1) {
            match self.entries.next() {
                Some(Ok(e)) => {
                    bytes += e.payload.len();
                    batch.push(e);
                    if bytes >= bytes_max {
                        break;
                    }
                }
                Some(Err(e)) => {
                    self.done = true;
                    return Err(e);
                }
                None => self.done = true,
            }
        }
        Ok(batch)
    }
}

impl std::fmt::Debug for RecoveredLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecoveredLog")
            .field("done", &self.done)
            .finish()
    }
}

/// Resolves once the entries a [`DirectLog::append`] took are durable.
pub type Durable = Pin<Box<dyn Future<Output = Result<(), StorageError>> + Send>>;

/// Appends issued from the driver's task (a regression of standalone writes
/// once standalone became an ensemble of one: a group commit through the
/// storage thread cost two thread wake-ups more, and the storage thread,
/// blocked on one batch, held the next batch back from the log's group commit,
/// which then synced smaller batches).
pub trait DirectLog: Send + 'static {
    /// Appends the front of `entries` in order, as [`StorageCmd::Append`]
    /// would, without waiting. Returns `None` when it took nothing, else a
    /// future for the last entry it took (the log makes records durable in
    /// order, so that one durable means every one before it is). Entries it
    /// did not take (the log has too many bytes waiting for its disk) stay in
    /// `entries`, for [`Storage::execute`], which waits for room.
    fn append(&self, entries: &mut Vec<Entry>) -> Result<Option<Durable>, StorageError>;
}

/// Reads of durable storage and snapshot writers, from any thread.
pub trait StorageReader: Send + Sync + 'static {
    /// The state machine's bytes of a durable snapshot, streamed and verified
    /// as read ([`crate::Committed::Snapshot`]).
    fn snapshot_source(&self, snapshot: &SnapshotRef) -> Result<SnapshotSource, StorageError>;
    /// Serves a read the core asked for.
    fn read(&self, cmd: &ReadCmd) -> Result<ReadData, StorageError>;
    /// Starts a snapshot of the state machine, consistent at `zxid`, written
    /// from chunks through a bounded queue.
    fn snapshot_writer(&self, zxid: Zxid) -> Result<Box<dyn SnapshotSink>, StorageError>;
}

/// Why a chunk was not taken by a [`SnapshotSink`].
#[derive(Debug)]
pub enum SinkError {
    /// The queue is full: the chunk comes back; retry after `ready`.
    Full(Bytes),
    /// The writer failed; nothing more is written.
    Failed(StorageError),
}

/// The writing end of a snapshot in storage. Dropped before `finish`, it
/// aborts (nothing is kept).
pub trait SnapshotSink: Send {
    /// Queues a chunk without blocking.
    fn try_write(&mut self, chunk: Bytes) -> Result<(), SinkError>;
    /// Resolves once a chunk refused as `Full` would be taken.
    fn ready(&mut self) -> Pin<Box<dyn Future<Output = ()> + Send + '_>>;
    /// Ends the snapshot: resolves once it is durable (not yet in the catalog:
    /// [`Storage::commit_snapshot`]).
    fn finish(
        self: Box<Self>,
    ) -> Pin<Box<dyn Future<Output = Result<WrittenSnapshot, StorageError>> + Send>>;
}

/// What [`Storage::commit_snapshot`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SavedSnapshot {
    /// The newest snapshot in the catalog now (the one committed, or a
    /// newer one already there).
    pub snapshot: SnapshotRef,
    /// Where the durable log starts after the purge: entries after it are
    /// readable. Storage that retains several snapshots keeps the log after
    /// the oldest of them (`rzk-wal`: `snapRetainCount`), so this is at or
    /// below that snapshot's zxid.
    pub log_start: Zxid,
}

/// A snapshot written and durable, to be committed with
/// [`Storage::commit_snapshot`] by the storage that wrote it.
pub struct WrittenSnapshot {
    zxid: Zxid,
    inner: Box<dyn Any + Send>,
}

impl WrittenSnapshot {
    /// Wraps what a storage implementation needs to commit it.
    pub fn new(zxid: Zxid, inner: Box<dyn Any + Send>) -> WrittenSnapshot {
        WrittenSnapshot { zxid, inner }
    }

    /// The zxid the snapshot is consistent at.
    pub fn zxid(&self) -> Zxid {
        self.zxid
    }

    /// The storage's own value, if it is a `T`.
    pub fn downcast<T: 'static>(self) -> Result<T, StorageError> {
        self.inner
            .downcast::<T>()
            .map(|b| *b)
            .map_err(|_| StorageError::Failed("a snapshot written by another storage".to_string()))
    }
}

impl std::fmt::Debug for WrittenSnapshot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WrittenSnapshot")
            .field("zxid", &self.zxid)
            .finish()
    }
}

/// The checksum of a [`MemStorage`] "file": CRC32C, as `rzk-wal`'s files.
fn checksum(data: &[u8]) -> u32 {
    crc32c::crc32c(data)
}

/// The durable contents of a [`MemStorage`].
#[derive(Clone, Debug, Default)]
pub struct MemState {
    /// The log after the snapshot.
    pub log: Vec<Entry>,
    /// The newest snapshot and its bytes (the "file").
    pub snapshot: Option<(SnapshotRef, Bytes)>,
    /// Persisted epochs.
    pub epochs: Epochs,
    /// The sync-in-progress marker.
    pub sync_in_progress: bool,
}

/// In-memory storage for tests and benchmarks: "durable" means kept in a shared
/// [`MemState`] that a restarted peer can recover from. Not a log: nothing
/// reaches a disk. A snapshot's "file" is the state machine's bytes.
#[derive(Clone, Debug, Default)]
pub struct MemStorage {
    state: Arc<Mutex<MemState>>,
    /// A SNAP being received (not durable: a restart drops it).
    incoming: Option<(SnapshotRef, BytesMut)>,
}

impl MemStorage {
    /// An empty store.
    pub fn new() -> MemStorage {
        MemStorage::default()
    }

    /// A copy of the durable state.
    pub fn snapshot_state(&self) -> MemState {
        self.state.lock().expect("not poisoned").clone()
    }

    fn install(&mut self, snapshot: SnapshotRef, data: Bytes) -> Result<(), StorageError> {
        if snapshot.size_bytes != data.len() as u64 || snapshot.crc != checksum(&data) {
            return Err(StorageError::Refused(format!(
                "snapshot {}: {} bytes received, {} announced, or the checksum differs",
                snapshot.zxid,
                data.len(),
                snapshot.size_bytes
            )));
        }
        let mut s = self.state.lock().expect("not poisoned");
        s.snapshot = Some((snapshot, data));
        s.log.clear();
        Ok(())
    }
}

impl Storage for MemStorage {
    fn recover(&mut self) -> Result<(Recovered, RecoveredLog), StorageError> {
        self.incoming = None;
        let s = self.state.lock().expect("not poisoned");
        let recovered = Recovered {
            epochs: s.epochs,
            snapshot: s.snapshot.as_ref().map(|x| x.0),
            log: Vec::new(),
            sync_in_progress: s.sync_in_progress,
        };
        // Not a disk: a copy stands for the file the log would be read from.
        Ok((recovered, RecoveredLog::from_entries(s.log.clone())))
    }

    fn execute(&mut self, cmd: StorageCmd) -> Result<(), StorageError> {
        match cmd {
            StorageCmd::ReceiveSnapshot(snapshot) => {
                self.incoming = Some((snapshot, BytesMut::new()));
                return Ok(());
            }
            StorageCmd::SnapshotChunk { offset, data } => {
                let Some((_, buf)) = self.incoming.as_mut() else {
                    return Err(StorageError::Refused("a chunk of no snapshot".into()));
                };
                if offset != buf.len() as u64 {
                    return Err(StorageError::Refused(format!(
                        "a chunk at {offset}, expected {}",
                        buf.len()
                    )));
                }
                buf.extend_from_slice(&data);
                return Ok(());
            }
            StorageCmd::InstallSnapshot(snapshot) => {
                let data = match self.incoming.take() {
                    Some((s, buf)) if s == snapshot => buf.freeze(),
                    _ if snapshot.size_bytes == 0 => Bytes::new(),
                    _ => return Err(StorageError::Refused("no such snapshot received".into())),
                };
                return self.install(snapshot, data);
            }
            StorageCmd::AbortSnapshot => {
                self.incoming = None;
                return Ok(());
            }
            StorageCmd::Append(_)
            | StorageCmd::TruncateAfter(_)
            | StorageCmd::SaveEpochs(_)
            | StorageCmd::BeginSync { .. }
            | StorageCmd::EndSync => {}
        }
        let mut s = self.state.lock().expect("not poisoned");
        match cmd {
            StorageCmd::Append(entries) => {
                for e in entries {
                    let last = s
                        .log
                        .last()
                        .map(|e| e.zxid)
                        .or(s.snapshot.as_ref().map(|x| x.0.zxid))
                        .unwrap_or(Zxid::ZERO);
                    if !e.zxid.is_next(last) {
                        return Err(StorageError::Failed(format!(
                            "append {} after {last}: a gap",
                            e.zxid
                        )));
                    }
                    s.log.push(e);
                }
            }
            StorageCmd::TruncateAfter(z) => s.log.retain(|e| e.zxid <= z),
            StorageCmd::SaveEpochs(ep) => s.epochs = ep,
            StorageCmd::BeginSync { .. } => s.sync_in_progress = true,
            StorageCmd::EndSync => s.sync_in_progress = false,
            StorageCmd::ReceiveSnapshot(_)
            | StorageCmd::SnapshotChunk { .. }
            | StorageCmd::InstallSnapshot(_)
            | StorageCmd::AbortSnapshot => unreachable!("handled above"),
        }
        Ok(())
    }

    fn sync(&mut self) -> Result<(), StorageError> {
        Ok(())
    }

    fn commit_snapshot(
        &mut self,
        written: WrittenSnapshot,
        _hold_after: Option<Zxid>,
    ) -> Result<SavedSnapshot, StorageError> {
        let (zxid, data) = written.downcast::<(Zxid, Bytes)>()?;
        let snapshot = SnapshotRef {
            zxid,
            size_bytes: data.len() as u64,
            crc: checksum(&data),
        };
        let mut s = self.state.lock().expect("not poisoned");
        // One snapshot is kept, and the log after it only (no hold: the
        // older snapshot's bytes go too, so its transfer could not go on).
        if let Some((newer, _)) = s.snapshot.as_ref().filter(|x| x.0.zxid >= zxid) {
            return Ok(SavedSnapshot {
                snapshot: *newer,
                log_start: newer.zxid,
            });
        }
        s.snapshot = Some((snapshot, data));
        s.log.retain(|e| e.zxid > zxid);
        Ok(SavedSnapshot {
            snapshot,
            log_start: zxid,
        })
    }

    fn reader(&self) -> Arc<dyn StorageReader> {
        Arc::new(MemReader {
            state: self.state.clone(),
        })
    }
}

/// The read side of a [`MemStorage`].
struct MemReader {
    state: Arc<Mutex<MemState>>,
}

impl MemReader {
    fn bytes_of(&self, snapshot: &SnapshotRef) -> Result<Bytes, StorageError> {
        if snapshot.size_bytes == 0 {
            return Ok(Bytes::new());
        }
        let s = self.state.lock().expect("not poisoned");
        match &s.snapshot {
            Some((r, data)) if r == snapshot => Ok(data.clone()),
            _ => Err(StorageError::Failed(format!(
                "snapshot {} is not in storage",
                snapshot.zxid
            ))),
        }
    }
}

/// The first entries of `entries`, at most `entries_max` and about
/// `bytes_max` payload bytes (at least one): the bound of a [`ReadCmd::Log`].
pub(crate) fn take_bounded(
    entries: impl Iterator<Item = Entry>,
    entries_max: usize,
    bytes_max: usize,
) -> Vec<Entry> {
    let mut out = Vec::new();
    let mut bytes = 0usize;
    for e in entries {
        if out.len() >= entries_max || (!out.is_empty() && bytes + e.payload.len() > bytes_max) {
            break;
        }
        bytes += e.payload.len();
        out.push(e);
    }
    out
}

impl StorageReader for MemReader {
    fn snapshot_source(&self, snapshot: &SnapshotRef) -> Result<SnapshotSource, StorageError> {
        Ok(SnapshotSource::from_bytes(
            snapshot.zxid,
            self.bytes_of(snapshot)?,
        ))
    }

    fn read(&self, cmd: &ReadCmd) -> Result<ReadData, StorageError> {
        match cmd {
            ReadCmd::SnapshotChunk {
                snapshot,
                offset,
                len,
            } => {
                let data = self.bytes_of(snapshot)?;
                let start = (*offset as usize).min(data.len());
                let end = start.saturating_add(*len).min(data.len());
                Ok(ReadData::SnapshotChunk(data.slice(start..end)))
            }
            ReadCmd::Log {
                after,
                entries_max,
                bytes_max,
            } => {
                let s = self.state.lock().expect("not poisoned");
                let from = s.log.partition_point(|e| e.zxid <= *after);
                Ok(ReadData::Log(take_bounded(
                    s.log[from..].iter().cloned(),
                    *entries_max,
                    *bytes_max,
                )))
            }
        }
    }

    fn snapshot_writer(&self, zxid: Zxid) -> Result<Box<dyn SnapshotSink>, StorageError> {
        Ok(Box::new(MemSink {
            zxid,
            buf: BytesMut::new(),
        }))
    }
}

/// A [`MemStorage`] snapshot being written: the chunks, gathered.
struct MemSink {
    zxid: Zxid,
    buf: BytesMut,
}

impl SnapshotSink for MemSink {
    fn try_write(&mut self, chunk: Bytes) -> Result<(), SinkError> {
        self.buf.extend_from_slice(&chunk);
        Ok(())
    }

    fn ready(&mut self) -> Pin<Box<dyn Future<Output = ()> + Send + '_>> {
        Box::pin(async {})
    }

    fn finish(
        self: Box<Self>,
    ) -> Pin<Box<dyn Future<Output = Result<WrittenSnapshot, StorageError>> + Send>> {
        let zxid = self.zxid;
        let data = self.buf.freeze();
        Box::pin(async move { Ok(WrittenSnapshot::new(zxid, Box::new((zxid, data)))) })
    }
}

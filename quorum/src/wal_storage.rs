//! [`Storage`] on `rzk-wal`: the durable log, snapshots, epochs and the sync
//! marker of a ZAB peer.
//!
//! Appends go to the log's group commit; every other command first waits for
//! the appends before it to be durable, so what survives a crash is always a
//! prefix of the commands (the [`Storage`] contract) — in particular
//! currentEpoch and the end of a sync are never durable before the proposals
//! they vouch for (ZOOKEEPER-4643, 4785).
//!
//! `rzk-wal` keeps acceptedEpoch and currentEpoch; the leader an epoch was
//! promised to ([`Epochs::accepted_from`]) lives in `quorum-accepted-from` next to
//! it, written atomically (temporary file, fsync, rename, directory fsync)
//! *before* the epochs. It holds the epoch it belongs to and is trusted only when
//! that equals the durable acceptedEpoch, so a crash between the two writes
//! loses the "from" (a safe degradation: the peer then refuses to re-accept that
//! epoch from a leader that is not yet established) and never attaches it to
//! the wrong epoch.
//!
//! Snapshots are `rzk-wal` files: the core holds a [`SnapshotRef`] (zxid, file
//! size, CRC32C); the state machine reads a catalogued file through
//! [`SnapshotSource`]; a leader's SNAP chunks are raw reads of an open file
//! ([`rzk_wal::SnapshotFile::read_raw_at`], so a purge cannot break a transfer);
//! a learner writes them into an [`rzk_wal::IncomingSnapshot`], verified whole
//! before it is installed by rename under the SNAP marker (I2).

use std::fs;
use std::future::Future;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use rzk_wal::{
    Append, IncomingSnapshot, SnapshotFile, SnapshotInfo, SyncMarker, TryWriteError, Wal, WalError,
    WalOptions,
};
use rzk_zxid::{Epoch, Zxid};

use crate::core::{Epochs, ReadCmd, ReadData, Recovered, SnapshotRef, StorageCmd, SyncMode};
use crate::message::Entry;
use crate::storage::{
    DirectLog, Durable, RecoveredLog, SavedSnapshot, SinkError, SnapshotSink, Storage,
    StorageError, StorageReader, WrittenSnapshot,
};
use crate::{PeerId, SnapshotSource};

const ACCEPTED_FROM: &str = "quorum-accepted-from";

/// Snapshot files a reader keeps open, least recently used dropped first: the
/// ones being served, so a transfer in progress survives retention removing
/// its file (an open file stays readable).
const OPEN_SNAPSHOTS_MAX: usize = 4;

/// A ZAB peer's storage on `rzk-wal`.
pub struct WalStorage {
    wal: Arc<Wal>,
    dir: PathBuf,
    /// The last append issued and not yet known durable. The log makes its
    /// records durable in order and stops for good at its first failure, so the
    /// last append resolving Ok means every one before it is durable; waiting on
    /// each would park this thread once per record as the log's writer resolves
    /// them one by one (a futex wake per txn, which cost standalone writes).
    pending: Option<Append>,
    /// The last acceptedEpoch persisted, to skip rewriting the "from" file.
    written_from: Option<(Epoch, PeerId)>,
    /// The SNAP being received, until it is installed or dropped.
    incoming: Option<IncomingSnapshot>,
    reader: Arc<WalReader>,
}

fn err<E: std::fmt::Display + 'static>(e: E) -> StorageError {
    let wal = (&e as &dyn std::any::Any).downcast_ref::<WalError>();
    if wal.is_some_and(write_refused_for_space) {
        StorageError::Full(e.to_string())
    } else {
        StorageError::Failed(e.to_string())
    }
}

/// A log write refused because the disk (or the quota) is full. Only a `write`:
/// after a failed fsync the kernel may have dropped the data it could not write
/// while the page cache still shows it, so that stays a plain failure.
fn write_refused_for_space(e: &WalError) -> bool {
    match e {
        WalError::Io { op, source, .. } => {
            *op == "write"
                && matches!(
                    source.kind(),
                    std::io::ErrorKind::StorageFull | std::io::ErrorKind::QuotaExceeded
                )
        }
        WalError::Failed { cause } => write_refused_for_space(cause),
        _ => false,
    }
}

/// A received snapshot that does not verify, or a transfer misused, is the
/// sender's fault and changes nothing here; anything else is ours.
fn received_err(e: WalError) -> StorageError {
    match e {
        WalError::CorruptFile { .. } | WalError::SnapshotTransfer { .. } => {
            StorageError::Refused(e.to_string())
        }
        other => err(other),
    }
}

fn snapshot_ref(info: &SnapshotInfo) -> SnapshotRef {
    SnapshotRef {
        zxid: info.zxid,
        size_bytes: info.size_bytes,
        crc: info.crc,
    }
}

impl WalStorage {
    /// Opens (or creates) the peer's durable state under `dir`.
    pub fn open(dir: impl AsRef<Path>, options: WalOptions) -> Result<WalStorage, StorageError> {
        let dir = dir.as_ref().to_path_buf();
        let (wal, recovery) = Wal::open(&dir, options).map_err(err)?;
        if let Some(m) = recovery.sync_in_progress {
            tracing::warn!(?m, "a sync was interrupted; state is rebuilt from disk");
        }
        let wal = Arc::new(wal);
        Ok(WalStorage {
            reader: Arc::new(WalReader {
                wal: wal.clone(),
                open: Mutex::new(Vec::new()),
            }),
            wal,
            dir,
            pending: None,
            written_from: None,
            incoming: None,
        })
    }

    /// The underlying log (for inspection).
    pub fn wal(&self) -> &Wal {
        &self.wal
    }

    fn wait_pending(&mut self) -> Result<(), StorageError> {
        match self.pending.take() {
            Some(a) => a.wait().map(|_| ()).map_err(err),
            None => Ok(()),
        }
    }

    /// Waits until every append the log accepted is durable: this thread's
    /// and the driver's ([`WalDirect`]), which the log orders alike.
    fn wait_all_appends(&mut self) -> Result<(), StorageError> {
        self.wait_pending()?;
        self.wal.flush().map(|_| ()).map_err(err)
    }

    /// Appends one record; when the log has too many bytes waiting for its
    /// disk, waits until what it holds is durable and tries once more.
    fn append(&mut self, e: Entry) -> Result<Append, StorageError> {
        match self.wal.append(e.zxid, e.payload.clone()) {
            Err(WalError::Overloaded { .. }) => {
                self.wait_all_appends()?;
                self.wal.append(e.zxid, e.payload).map_err(err)
            }
            other => other.map_err(err),
        }
    }

    fn read_from_file(&self, accepted: Epoch) -> Option<PeerId> {
        let text = fs::read_to_string(self.dir.join(ACCEPTED_FROM)).ok()?;
        let mut it = text.split_whitespace();
        let epoch: u32 = it.next()?.parse().ok()?;
        let peer: u64 = it.next()?.parse().ok()?;
        (Epoch(epoch) == accepted).then_some(PeerId(peer))
    }

    fn write_from_file(&mut self, epoch: Epoch, peer: PeerId) -> Result<(), StorageError> {
        if self.written_from == Some((epoch, peer)) {
            return Ok(());
        }
        let tmp = self.dir.join(format!("{ACCEPTED_FROM}.tmp"));
        let mut f = fs::File::create(&tmp).map_err(err)?;
        writeln!(f, "{} {}", epoch.0, peer.0).map_err(err)?;
        f.sync_all().map_err(err)?;
        fs::rename(&tmp, self.dir.join(ACCEPTED_FROM)).map_err(err)?;
        fs::File::open(&self.dir)
            .and_then(|d| d.sync_all())
            .map_err(err)?;
        self.written_from = Some((epoch, peer));
        Ok(())
    }

    /// SNAP: verifies the received file and installs it (or, for the empty
    /// snapshot, an empty state) under the SNAP marker.
    fn install(&mut self, snapshot: SnapshotRef) -> Result<(), StorageError> {
        if snapshot.size_bytes == 0 {
            self.incoming = None;
            self.wal
                .install_snapshot(snapshot.zxid, &mut std::io::empty())
                .map_err(err)?;
            return Ok(());
        }
        let incoming = self
            .incoming
            .take()
            .filter(|i| i.zxid() == snapshot.zxid && i.is_complete())
            .ok_or_else(|| {
                StorageError::Refused(format!("snapshot {} was not received whole", snapshot.zxid))
            })?;
        let received = incoming.finish().wait().map_err(received_err)?;
        let info = self.wal.install_received(received).map_err(err)?;
        debug_assert_eq!(snapshot_ref(&info), snapshot, "installed what was verified");
        Ok(())
    }
}

impl Storage for WalStorage {
    fn recover(&mut self) -> Result<(Recovered, RecoveredLog), StorageError> {
        self.incoming = None;
        let accepted = self.wal.accepted_epoch().map_err(err)?;
        let current = self.wal.current_epoch().map_err(err)?;
        let rebuild = self.wal.rebuild_from_file().map_err(err)?;
        let snapshot = rebuild.snapshot.map(|file| {
            let r = SnapshotRef {
                zxid: file.zxid(),
                size_bytes: file.size_bytes(),
                crc: file.crc(),
            };
            self.reader.keep_open(file);
            r
        });
        // Streamed: the reader checks every record's CRC and contiguity again
        // as it reads (a damaged record ends it with an error naming the file
        // and offset); the log's open already cut a torn tail.
        let log = RecoveredLog::new(rebuild.records.map(|r| {
            r.map(|r| Entry {
                zxid: r.zxid,
                payload: r.payload,
            })
            .map_err(err)
        }));
        let recovered = Recovered {
            epochs: Epochs {
                accepted,
                accepted_from: self.read_from_file(accepted),
                current,
            },
            snapshot,
            log: Vec::new(),
            sync_in_progress: self.wal.sync_marker().map_err(err)?.is_some(),
        };
        Ok((recovered, log))
    }

    fn execute(&mut self, cmd: StorageCmd) -> Result<(), StorageError> {
        if let StorageCmd::Append(entries) = cmd {
            for e in entries {
                self.pending = Some(self.append(e)?);
            }
            return Ok(());
        }
        // Everything else is ordered after the appends before it.
        self.wait_all_appends()?;
        match cmd {
            StorageCmd::Append(_) => unreachable!("handled above"),
            StorageCmd::TruncateAfter(z) => self.wal.truncate_after(z).map(|_| ()).map_err(err),
            StorageCmd::ReceiveSnapshot(snapshot) => {
                self.incoming = None;
                if snapshot.size_bytes > 0 {
                    let incoming = self
                        .wal
                        .incoming_snapshot(snapshot.zxid, snapshot.size_bytes, snapshot.crc)
                        .map_err(err)?;
                    self.incoming = Some(incoming);
                }
                Ok(())
            }
            StorageCmd::SnapshotChunk { offset, data } => {
                let Some(incoming) = self.incoming.as_mut() else {
                    return Err(StorageError::Refused(format!(
                        "a snapshot chunk at {offset} with no snapshot being received"
                    )));
                };
                // Blocks while the writer's bounded queue is full: this thread
                // has nothing else to do during a SNAP, and the leader sends
                // no more than its in-flight limit ahead.
                incoming.write(offset, data).map_err(received_err)
            }
            StorageCmd::InstallSnapshot(snapshot) => self.install(snapshot),
            StorageCmd::AbortSnapshot => {
                self.incoming = None;
                Ok(())
            }
            StorageCmd::SaveEpochs(ep) => {
                if let Some(from) = ep.accepted_from {
                    self.write_from_file(ep.accepted, from)?;
                }
                self.wal.set_epochs(ep.accepted, ep.current).map_err(err)
            }
            StorageCmd::BeginSync { mode, target } => {
                let mode = match mode {
                    SyncMode::Diff => rzk_wal::SyncMode::Diff,
                    SyncMode::Trunc => rzk_wal::SyncMode::Trunc,
                    SyncMode::Snap => rzk_wal::SyncMode::Snap,
                };
                self.wal
                    .begin_sync(SyncMarker { mode, target })
                    .map_err(err)
            }
            StorageCmd::EndSync => self.wal.end_sync(None).map_err(err),
        }
    }

    fn sync(&mut self) -> Result<(), StorageError> {
        self.wait_pending()
    }

    fn commit_snapshot(
        &mut self,
        written: WrittenSnapshot,
        hold_after: Option<Zxid>,
    ) -> Result<SavedSnapshot, StorageError> {
        let written = written.downcast::<rzk_wal::WrittenSnapshot>()?;
        self.wait_all_appends()?;
        let newest = self.wal.snapshots().map_err(err)?.last().map(snapshot_ref);
        if let Some(newest) = newest.filter(|n| n.zxid >= written.zxid()) {
            // A newer state is already here (a SNAP installed meanwhile, or a
            // later snapshot): this one is dropped, its file removed.
            return Ok(SavedSnapshot {
                snapshot: newest,
                log_start: self.wal.log_start(),
            });
        }
        let info = match self.wal.commit_snapshot(written) {
            Ok(info) => info,
            Err(WalError::Purged { zxid, start }) => {
                // The log moved past it (a SNAP install): what it covers is
                // covered by the newer snapshot the log starts at.
                tracing::info!(%zxid, %start, "a snapshot older than the log start is dropped");
                let newest = self.wal.snapshots().map_err(err)?;
                let snapshot = newest
                    .last()
                    .map(snapshot_ref)
                    .ok_or_else(|| err(format!("the log starts at {start} with no snapshot")))?;
                return Ok(SavedSnapshot {
                    snapshot,
                    log_start: self.wal.log_start(),
                });
            }
            Err(e) => return Err(err(e)),
        };
        // Retention keeps the newest `snap_retain_count` snapshots and the log
        // after the oldest of them, or after what a sync in progress still
        // reads if that is lower: the core is told where the log starts, so a
        // SNAP transfer finishes from the log however many snapshots pass.
        let report = self.wal.purge_holding(hold_after).map_err(err)?;
        tracing::info!(zxid = %info.zxid, ?report, "snapshot saved, old history purged");
        Ok(SavedSnapshot {
            snapshot: snapshot_ref(&info),
            log_start: report.start,
        })
    }

    fn reader(&self) -> Arc<dyn StorageReader> {
        self.reader.clone()
    }

    fn direct_log(&self) -> Option<Box<dyn DirectLog>> {
        Some(Box::new(WalDirect {
            wal: self.wal.clone(),
        }))
    }
}

/// Appends from the driver's task straight into the log's group commit.
struct WalDirect {
    wal: Arc<Wal>,
}

impl DirectLog for WalDirect {
    fn append(&self, entries: &mut Vec<Entry>) -> Result<Option<Durable>, StorageError> {
        let mut last = None;
        let mut taken = 0;
        for e in entries.iter() {
            match self.wal.append(e.zxid, e.payload.clone()) {
                Ok(a) => last = Some(a),
                // Nothing of it was taken: it and the rest go to the storage
                // thread, which waits for room.
                Err(WalError::Overloaded { .. }) => break,
                Err(e) => return Err(err(e)),
            }
            taken += 1;
        }
        entries.drain(..taken);
        Ok(last.map(|a| -> Durable { Box::pin(async move { a.await.map(|_| ()).map_err(err) }) }))
    }
}

/// The read side of a [`WalStorage`]: open snapshot files, chunk reads, and
/// snapshot writers, from any thread.
struct WalReader {
    wal: Arc<Wal>,
    /// Recently used snapshot files, oldest first.
    open: Mutex<Vec<SnapshotFile>>,
}

impl WalReader {
    fn keep_open(&self, file: SnapshotFile) {
        let mut open = self.open.lock().expect("not poisoned");
        open.retain(|f| f.zxid() != file.zxid());
        open.push(file);
        if open.len() > OPEN_SNAPSHOTS_MAX {
            open.remove(0);
        }
    }

    /// The catalogued file `snapshot` names, opened once and kept open.
    fn file(&self, snapshot: &SnapshotRef) -> Result<SnapshotFile, StorageError> {
        let same = |f: &SnapshotFile| {
            f.zxid() == snapshot.zxid
                && f.size_bytes() == snapshot.size_bytes
                && f.crc() == snapshot.crc
        };
        {
            // Least recently used goes first: a file a SNAP transfer reads
            // chunk after chunk stays open, so retention removing it from
            // the catalog (and the directory) does not break the transfer.
            let mut open = self.open.lock().expect("not poisoned");
            if let Some(i) = open.iter().position(same) {
                let f = open.remove(i);
                open.push(f.clone());
                return Ok(f);
            }
        }
        let file = self.wal.open_snapshot(snapshot.zxid).map_err(err)?;
        if !same(&file) {
            return Err(err(format!(
                "snapshot {} in the catalog is not the one announced ({} bytes, crc {:#010x})",
                snapshot.zxid, snapshot.size_bytes, snapshot.crc
            )));
        }
        self.keep_open(file.clone());
        Ok(file)
    }
}

impl StorageReader for WalReader {
    fn snapshot_source(&self, snapshot: &SnapshotRef) -> Result<SnapshotSource, StorageError> {
        if snapshot.size_bytes == 0 {
            return Ok(SnapshotSource::from_bytes(snapshot.zxid, Bytes::new()));
        }
        Ok(SnapshotSource::from_file(self.file(snapshot)?))
    }

    fn read(&self, cmd: &ReadCmd) -> Result<ReadData, StorageError> {
        match cmd {
            ReadCmd::SnapshotChunk {
                snapshot,
                offset,
                len,
            } => {
                let data = self
                    .file(snapshot)?
                    .read_raw_at(*offset, *len)
                    .map_err(err)?;
                Ok(ReadData::SnapshotChunk(data))
            }
            ReadCmd::Log {
                after,
                entries_max,
                bytes_max,
            } => {
                // A streaming reader: only this read's entries are in memory.
                let (mut records, mut bytes) = (Vec::new(), 0usize);
                for r in self.wal.read_from(*after).map_err(err)? {
                    let r = r.map_err(err)?;
                    bytes += r.payload.len();
                    records.push(Entry {
                        zxid: r.zxid,
                        payload: r.payload,
                    });
                    if records.len() >= *entries_max || bytes >= *bytes_max {
                        break;
                    }
                }
                Ok(ReadData::Log(records))
            }
        }
    }

    fn snapshot_writer(&self, zxid: Zxid) -> Result<Box<dyn SnapshotSink>, StorageError> {
        let writer = self.wal.snapshot_dir().writer(zxid).map_err(err)?;
        Ok(Box::new(WalSink { zxid, writer }))
    }
}

/// A state machine's snapshot streamed into an `rzk-wal` file.
struct WalSink {
    zxid: Zxid,
    writer: rzk_wal::SnapshotWriter,
}

impl SnapshotSink for WalSink {
    fn try_write(&mut self, chunk: Bytes) -> Result<(), SinkError> {
        self.writer.try_write(chunk).map_err(|e| match e {
            TryWriteError::Full(chunk) => SinkError::Full(chunk),
            TryWriteError::Failed(e) => SinkError::Failed(err(e)),
        })
    }

    fn ready(&mut self) -> Pin<Box<dyn Future<Output = ()> + Send + '_>> {
        Box::pin(self.writer.ready())
    }

    fn finish(
        self: Box<Self>,
    ) -> Pin<Box<dyn Future<Output = Result<WrittenSnapshot, StorageError>> + Send>> {
        let zxid = self.zxid;
        let finishing = self.writer.finish();
        Box::pin(async move {
            let written = finishing.await.map_err(err)?;
            Ok(WrittenSnapshot::new(zxid, Box::new(written)))
        })
    }
}

#[cfg(test)]
mod tests {
    use std::io;
    use std::path::PathBuf;
    use std::sync::Arc;

    use bytes::Bytes;
    use rzk_wal::{WalError, WalOptions};
    use rzk_zxid::{Counter, Epoch, Zxid};

    use super::{err, WalStorage};
    use crate::core::StorageCmd;
    use crate::message::Entry;
    use crate::storage::{Storage, StorageError};

    /// `n` records of `bytes` bytes each, the first of epoch 1 on.
    fn entries(n: u32, bytes: usize) -> Vec<Entry> {
        (1..=n)
            .map(|c| Entry {
                zxid: Zxid::new(Epoch(1), Counter(c)),
                payload: Bytes::from(vec![c as u8; bytes]),
            })
            .collect()
    }

    /// A log that holds at most about one record of 600 B waiting for its
    /// writer: anything more is refused as `Overloaded` until it is durable.
    fn small_pending(dir: &std::path::Path) -> WalStorage {
        let mut options = WalOptions::default();
        options.log.pending_bytes_max = 1024;
        WalStorage::open(dir, options).expect("opens")
    }

    #[test]
    fn an_append_that_finds_the_log_full_of_waiting_bytes_waits_for_room() {
        // Before, the log's Overloaded became StorageError::Failed and stopped
        // the peer; the direct appends of the driver make it more likely.
        let dir = tempfile::tempdir().unwrap();
        let mut storage = small_pending(dir.path());
        storage
            .execute(StorageCmd::Append(entries(40, 600)))
            .expect("the storage thread waits for room");
        storage.sync().unwrap();
        assert_eq!(
            storage.wal().last_durable_zxid(),
            Zxid::new(Epoch(1), Counter(40))
        );
    }

    #[test]
    fn direct_appends_leave_what_the_log_cannot_take_to_the_storage_thread() {
        let dir = tempfile::tempdir().unwrap();
        let mut storage = small_pending(dir.path());
        let direct = storage.direct_log().expect("the wal appends directly");
        let mut rest = entries(40, 600);
        let durable = direct.append(&mut rest).unwrap().expect("took the first");
        assert!(rest.len() < 40, "took a prefix");
        let first_left = rest.first().map(|e| e.zxid);
        if let Some(z) = first_left {
            assert!(z > Zxid::new(Epoch(1), Counter(1)), "contiguous: {z}");
            storage.execute(StorageCmd::Append(rest)).unwrap();
        }
        storage.sync().unwrap();
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(durable)
            .unwrap();
        assert_eq!(
            storage.wal().last_durable_zxid(),
            Zxid::new(Epoch(1), Counter(40))
        );
    }

    #[test]
    fn a_command_after_direct_appends_waits_until_they_are_durable() {
        // The Storage contract: what survives is a prefix of the commands, so a
        // command is done only once the appends before it are durable, those
        // made from the driver's task included. (Checked by hand: with
        // `wait_pending` in place of `wait_all_appends` this fails.)
        let dir = tempfile::tempdir().unwrap();
        let mut storage = WalStorage::open(dir.path(), WalOptions::default()).unwrap();
        let direct = storage.direct_log().unwrap();
        let mut all = entries(200, 100);
        let _durable = direct.append(&mut all).unwrap();
        assert!(all.is_empty());
        storage.execute(StorageCmd::AbortSnapshot).unwrap();
        assert_eq!(
            storage.wal().last_durable_zxid(),
            Zxid::new(Epoch(1), Counter(200))
        );
    }

    fn io_error(op: &'static str, kind: io::ErrorKind) -> WalError {
        WalError::Io {
            op,
            path: PathBuf::from("log.1"),
            source: Arc::new(io::Error::from(kind)),
        }
    }

    fn failed(cause: WalError) -> WalError {
        WalError::Failed {
            cause: Arc::new(cause),
        }
    }

    #[test]
    fn a_write_refused_for_space_is_a_full_disk() {
        for kind in [io::ErrorKind::StorageFull, io::ErrorKind::QuotaExceeded] {
            assert!(matches!(
                err(io_error("write", kind)),
                StorageError::Full(_)
            ));
            // The log reports later appends as failed, with the first error inside.
            assert!(matches!(
                err(failed(io_error("write", kind))),
                StorageError::Full(_)
            ));
        }
    }

    #[test]
    fn a_failed_fsync_or_another_error_is_never_a_full_disk() {
        // After a failed fsync the page cache may show data the disk does not hold:
        // that stops the peer for good, whatever the error says.
        for e in [
            io_error("fdatasync", io::ErrorKind::StorageFull),
            failed(io_error("fdatasync", io::ErrorKind::StorageFull)),
            io_error("write", io::ErrorKind::Other),
            failed(io_error("write", io::ErrorKind::PermissionDenied)),
        ] {
            assert!(matches!(err(e), StorageError::Failed(_)));
        }
        // Errors that are not the log's are plain failures.
        assert!(matches!(
            err(io::Error::from(io::ErrorKind::StorageFull)),
            StorageError::Failed(_)
        ));
    }
}

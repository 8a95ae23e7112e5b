//! A peer's whole durable state: the log, its snapshots and its metadata.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use bytes::Bytes;
use rzk_zxid::{Epoch, Zxid};

use crate::durability::{NoSyncer, OsSyncer, Syncer};
use crate::error::{MarkerText, Result, WalError};
use crate::format::{
    create_dir_durably, list_dir, parse_snapshot_name, remove_durably, TMP_SUFFIX,
};
use crate::log::{Append, Log, LogOptions, LogRecovery, PurgeReport};
use crate::meta::{CatalogEntry, Meta, SyncMarker, SyncMode};
use crate::reader::LogReader;
use crate::snapshot::{
    load_snapshot, snapshot_path, unique_tmp_path, write_snapshot, LoadedSnapshot, SnapshotFile,
    SnapshotInfo, StateFileWriter, StateReader, TmpSnapshot,
};
use crate::snapshot_stream::{
    IncomingSnapshot, ReceivedSnapshot, SnapshotDir, SnapshotWriter, WrittenSnapshot,
    SNAPSHOT_QUEUE_BYTES_MAX,
};

/// How a [`Wal`] is opened.
#[derive(Debug, Clone)]
pub struct WalOptions {
    /// Options of the transaction log.
    pub log: LogOptions,
    /// How many snapshots [`Wal::purge`] keeps (at least 1). Default 3, like
    /// ZooKeeper's `autopurge.snapRetainCount`.
    pub snap_retain_count: usize,
    /// Where the log's segments live; default `<dir>/log`. ZooKeeper's
    /// `dataLogDir`: a separate disk for the log keeps snapshots off its fsyncs.
    pub log_dir: Option<PathBuf>,
    /// The most bytes per second a local snapshot is written at (`None`: as
    /// fast as the disk takes them). Received snapshots are not limited. See
    /// [`SNAPSHOT_WRITE_BYTES_PER_SEC_MAX`] for the default and why.
    pub snapshot_write_bytes_per_sec_max: Option<u64>,
    /// Chunks a streaming snapshot writer holds in memory before `try_write`
    /// says the queue is full.
    pub snapshot_queue_bytes_max: usize,
    /// A consumer of the newest catalogued snapshot's state, started on a
    /// thread of its own as soon as [`Wal::open`] has read the catalog, so the
    /// caller's load overlaps the log's recovery. See [`SnapshotPreload`].
    pub preload: Option<SnapshotPreload>,
}

/// What a [`SnapshotPreload`] runs: it reads the state of the newest
/// catalogued snapshot from the [`StateReader`] it is given (to the end, to
/// be of use) and keeps what it makes of it.
pub type PreloadFn = Box<dyn FnOnce(StateReader) + Send>;

/// The newest catalogued snapshot, read by the caller while the log is
/// recovered ([`WalOptions::preload`]).
///
/// `Wal::open` hands the function a checksumming [`StateReader`] of the
/// newest catalogued snapshot on a thread of its own, before it recovers the
/// log, and keeps what that reader found: [`Wal::rebuild_from_file`] then
/// uses that verdict for that snapshot instead of reading the file a second
/// time. The guarantee stays: a snapshot is chosen only once every byte of it
/// matched its checksum (if the function stops early, the file is verified as
/// usual), and one that fails is skipped for an older one as before. Whether
/// the snapshot is chosen at all (the log may not connect to it) only
/// `rebuild_from_file` says: the caller uses what it loaded only for the
/// snapshot it is then told to load. Without a catalogued snapshot the
/// function is dropped unused.
#[derive(Clone)]
pub struct SnapshotPreload(Arc<Mutex<Option<PreloadFn>>>);

impl SnapshotPreload {
    /// A preload that runs `f`.
    pub fn new(f: impl FnOnce(StateReader) + Send + 'static) -> SnapshotPreload {
        SnapshotPreload(Arc::new(Mutex::new(Some(Box::new(f)))))
    }

    fn take(&self) -> Option<PreloadFn> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).take()
    }
}

impl std::fmt::Debug for SnapshotPreload {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SnapshotPreload")
    }
}

/// A preload in progress: the catalog entry it reads, and its thread, which
/// returns the file once its checksum is known to match.
struct Preloaded {
    entry: CatalogEntry,
    thread: std::thread::JoinHandle<Result<SnapshotFile>>,
}

/// Records (and payload bytes) of the log after a preloaded snapshot that the
/// rebuild reads into memory while the preload runs (the rest is read
/// afterwards, as it is consumed). The quorum's recovery streams the tail in
/// batches, so what is read early stays in memory until the replay reaches it:
/// a few of its batches' worth, never the tail (at 2^20 records, a restart on a
/// 409 MB tail after a snapshot peaked at 444 MiB).
const REBUILD_READ_AHEAD_RECORDS_MAX: usize = 4096;
const REBUILD_READ_AHEAD_BYTES_MAX: usize = 16 << 20;

/// The default of [`WalOptions::snapshot_write_bytes_per_sec_max`].
pub const SNAPSHOT_WRITE_BYTES_PER_SEC_MAX: Option<u64> = None;

impl Default for WalOptions {
    fn default() -> Self {
        WalOptions {
            log: LogOptions::default(),
            snap_retain_count: 3,
            log_dir: None,
            snapshot_write_bytes_per_sec_max: SNAPSHOT_WRITE_BYTES_PER_SEC_MAX,
            snapshot_queue_bytes_max: SNAPSHOT_QUEUE_BYTES_MAX,
            preload: None,
        }
    }
}

/// What [`Wal::open`] found.
#[derive(Debug, Clone)]
pub struct Recovery {
    /// The log's recovery: torn tail cut, rewrite finished, repairs.
    pub log: LogRecovery,
    /// A learner sync that started and did not complete. If set, in-memory state
    /// from before the crash is worthless: rebuild from disk ([`Wal::rebuild`]) and
    /// sync again (I2).
    pub sync_in_progress: Option<SyncMarker>,
    /// The persisted acceptedEpoch.
    pub accepted_epoch: Epoch,
    /// The persisted currentEpoch.
    pub current_epoch: Epoch,
    /// The snapshot catalog, oldest first.
    pub snapshots: Vec<SnapshotInfo>,
    /// A snapshot install whose log reset a crash interrupted, finished now.
    pub log_reset_completed: Option<Zxid>,
    /// Snapshot files that were never committed to the catalog, removed.
    pub removed_files: Vec<PathBuf>,
}

/// What state is rebuilt from: the newest usable snapshot and the log after it.
#[derive(Debug)]
pub struct Rebuild {
    /// The snapshot to load first; `None` means start from the empty state.
    pub snapshot: Option<LoadedSnapshot>,
    /// The records to apply after it, in order.
    pub records: LogReader,
    /// Newer snapshots that could not be used, and why (each also logged).
    pub skipped: Vec<(Zxid, WalError)>,
}

/// What state is rebuilt from, with the snapshot as a file
/// ([`Wal::rebuild_from_file`]).
#[derive(Debug)]
pub struct FileRebuild {
    /// The snapshot to load first, verified; `None` means the empty state.
    pub snapshot: Option<SnapshotFile>,
    /// The records to apply after it, in order.
    pub records: LogReader,
    /// Newer snapshots that could not be used, and why (each also logged).
    pub skipped: Vec<(Zxid, WalError)>,
}

/// A peer's durable state: the transaction log, snapshots, acceptedEpoch,
/// currentEpoch and the sync marker.
///
/// # Correctness
/// - [`Wal::last_durable_zxid`] is the one answer to "how far does my history
///   reach" (I1); votes, FOLLOWERINFO, ACKEPOCH and ACKs must come from it.
/// - Everything in memory can be rebuilt with [`Wal::rebuild`] (I2).
/// - A TRUNC ([`Wal::truncate_after`]) or a SNAP install ([`Wal::install_snapshot`])
///   runs only under the matching sync marker, so a crash in it is reported on
///   the next open as an interrupted sync.
/// - Blocking: every method except [`Wal::append`] and the getters does disk IO
///   and may block for several fsyncs; from async code call them through
///   `spawn_blocking`. `append` only takes a short lock, except while a
///   truncation or reset runs: appends wait for it to finish.
pub struct Wal {
    log: Log,
    meta: Meta,
    snap_dir: PathBuf,
    syncer: Arc<dyn Syncer>,
    snap_retain_count: usize,
    /// The snapshot directory as writers on other threads use it.
    streams: SnapshotDir,
    /// Serialises changes to the snapshot catalog and its files.
    snapshots: Mutex<()>,
    /// The preload started by open, until the first rebuild takes it.
    preloaded: Mutex<Option<Preloaded>>,
}

impl std::fmt::Debug for Wal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Wal")
            .field("log", &self.log)
            .field("snap_dir", &self.snap_dir)
            .finish()
    }
}

fn missing_marker(
    operation: &'static str,
    expected: SyncMode,
    target: Option<Zxid>,
    found: Option<SyncMarker>,
) -> WalError {
    WalError::SyncMarkerMissing {
        operation,
        expected,
        target,
        found: MarkerText(found),
    }
}

impl Wal {
    /// Opens (or creates) the durable state under `dir`: `dir/meta` (sled),
    /// `dir/snap`, and `dir/log` (or `options.log_dir`). Recovers the log, finishes
    /// an interrupted snapshot install, removes uncommitted snapshot files and
    /// reports an interrupted sync.
    pub fn open(dir: impl AsRef<Path>, options: WalOptions) -> Result<(Wal, Recovery)> {
        let syncer: Arc<dyn Syncer> = if options.log.unsafe_no_fsync {
            Arc::new(NoSyncer)
        } else {
            Arc::new(OsSyncer)
        };
        Wal::open_with(dir.as_ref(), options, syncer)
    }

    pub(crate) fn open_with(
        dir: &Path,
        options: WalOptions,
        syncer: Arc<dyn Syncer>,
    ) -> Result<(Wal, Recovery)> {
        create_dir_durably(dir, &*syncer)?;
        let snap_dir = dir.join("snap");
        create_dir_durably(&snap_dir, &*syncer)?;
        let meta = Meta::open(dir.join("meta"))?;
        // Before the log's recovery, which it overlaps.
        let preloaded = options
            .preload
            .as_ref()
            .and_then(SnapshotPreload::take)
            .and_then(|f| start_preload(&meta, &snap_dir, f));
        let log_dir = options.log_dir.clone().unwrap_or_else(|| dir.join("log"));
        let (log, log_recovery) =
            Log::open_with(&log_dir, options.log.clone(), Arc::clone(&syncer))?;
        let mut log_reset_completed = None;
        if let Some(start) = meta.pending_log_reset()? {
            // The install committed (its catalog entry is in) but the crash may have
            // come before the log was reset: do it again. Nothing can have been
            // appended after the reset while this record exists (install clears
            // it before appends resume), so resetting again loses nothing.
            tracing::warn!(%start, "finishing a snapshot install interrupted by a crash");
            log.reset_then(start, || meta.clear_log_reset())?;
            log_reset_completed = Some(start);
        }
        let streams = SnapshotDir {
            dir: snap_dir.clone(),
            syncer: Arc::clone(&syncer),
            write_bytes_per_sec_max: options.snapshot_write_bytes_per_sec_max,
            queue_bytes_max: options.snapshot_queue_bytes_max,
        };
        let wal = Wal {
            log,
            meta,
            snap_dir,
            syncer,
            snap_retain_count: options.snap_retain_count.max(1),
            streams,
            snapshots: Mutex::new(()),
            preloaded: Mutex::new(preloaded),
        };
        let removed_files = wal.remove_uncommitted_snapshots()?;
        let recovery = Recovery {
            log: log_recovery,
            sync_in_progress: wal.meta.sync_marker()?,
            accepted_epoch: wal.meta.accepted_epoch()?,
            current_epoch: wal.meta.current_epoch()?,
            snapshots: wal.snapshots()?,
            log_reset_completed,
            removed_files,
        };
        if let Some(marker) = recovery.sync_in_progress {
            tracing::warn!(
                ?marker,
                "a learner sync was interrupted; in-memory state must be rebuilt from disk"
            );
        }
        Ok((wal, recovery))
    }

    /// Removes snapshot files that are not in the catalog: written by a save or an
    /// install that crashed before its commit point.
    fn remove_uncommitted_snapshots(&self) -> Result<Vec<PathBuf>> {
        let committed: Vec<Zxid> = self.meta.catalog()?.iter().map(|e| e.zxid).collect();
        let mut removed = Vec::new();
        for (name, path) in list_dir(&self.snap_dir)? {
            let orphan = name.ends_with(TMP_SUFFIX)
                || parse_snapshot_name(&name).is_some_and(|z| !committed.contains(&z));
            if orphan {
                tracing::info!(path = %path.display(), "removing a snapshot file that was never committed");
                remove_durably(&path, &self.snap_dir, &*self.syncer)?;
                removed.push(path);
            }
        }
        Ok(removed)
    }

    /// The transaction log, for what the methods here do not cover (segments,
    /// `contains`).
    pub fn log(&self) -> &Log {
        &self.log
    }

    /// See [`Log::append`]: resolves once the record is durable.
    pub fn append(&self, zxid: Zxid, payload: Bytes) -> Result<Append> {
        self.log.append(zxid, payload)
    }

    /// See [`Log::flush`].
    pub fn flush(&self) -> Result<Zxid> {
        self.log.flush()
    }

    /// The last durable zxid: the one answer to "how far does my history reach"
    /// (I1).
    pub fn last_durable_zxid(&self) -> Zxid {
        self.log.last_durable_zxid()
    }

    /// Where the log starts (the snapshot/purge boundary): its first record
    /// follows this zxid. A DIFF for a peer below it is impossible.
    pub fn log_start(&self) -> Zxid {
        self.log.start()
    }

    /// See [`Log::read_from`]: the durable records after `zxid`.
    pub fn read_from(&self, zxid: Zxid) -> Result<LogReader> {
        self.log.read_from(zxid)
    }

    /// What to rebuild in-memory state from (I2): the newest snapshot that is
    /// intact and within the log, and a reader over the records after it.
    /// Snapshots that do not verify, or that the log does not connect to, are
    /// skipped with a warning. Fails with [`WalError::NoUsableSnapshot`] when none
    /// is usable and the log does not start at the empty history.
    ///
    /// This reads the whole snapshot into memory; [`Wal::rebuild_from_file`]
    /// gives it as an open, verified file instead.
    pub fn rebuild(&self) -> Result<Rebuild> {
        let (snapshot, records, skipped) = self.rebuild_with(
            |entry| load_snapshot(&self.snap_dir, entry),
            |zxid| self.log.read_from(zxid),
        )?;
        Ok(Rebuild {
            snapshot,
            records,
            skipped,
        })
    }

    /// As [`Wal::rebuild`], with the snapshot as an open file whose checksum was
    /// verified (one pass over it, without keeping it in memory); its
    /// [`SnapshotFile::state_reader`] streams the state and checks it again.
    ///
    /// The first call uses the verdict of the preload ([`WalOptions::preload`])
    /// for the snapshot it read, waiting for it to finish, instead of a pass
    /// of its own.
    pub fn rebuild_from_file(&self) -> Result<FileRebuild> {
        let preloaded = self
            .preloaded
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        // The log after the preloaded snapshot is read now, while the preload
        // may still decode it, not after it is joined.
        let mut tail = preloaded.as_ref().map(|p| {
            let records = self.log.read_from(p.entry.zxid);
            let records = records.map(|r| {
                r.read_ahead(REBUILD_READ_AHEAD_RECORDS_MAX, REBUILD_READ_AHEAD_BYTES_MAX)
            });
            (p.entry.zxid, Some(records))
        });
        let mut preloaded = preloaded.into_iter().collect::<Vec<_>>();
        let (snapshot, records, skipped) = self.rebuild_with(
            |entry| {
                if let Some(verdict) = join_preload(&mut preloaded, entry) {
                    return verdict;
                }
                let file = SnapshotFile::open(snapshot_path(&self.snap_dir, entry.zxid), entry)?;
                file.verify()?;
                Ok(file)
            },
            |zxid| match tail.as_mut() {
                Some((z, records)) if *z == zxid => match records.take() {
                    Some(records) => records,
                    None => self.log.read_from(zxid),
                },
                _ => self.log.read_from(zxid),
            },
        )?;
        Ok(FileRebuild {
            snapshot,
            records,
            skipped,
        })
    }

    #[allow(clippy::type_complexity)]
    fn rebuild_with<T>(
        &self,
        mut load: impl FnMut(&CatalogEntry) -> Result<T>,
        mut read_from: impl FnMut(Zxid) -> Result<LogReader>,
    ) -> Result<(Option<T>, LogReader, Vec<(Zxid, WalError)>)> {
        let mut skipped = Vec::new();
        let start = self.log.start();
        let end = self.log.last_durable_zxid();
        for entry in self.meta.catalog()?.iter().rev() {
            if entry.zxid < start {
                break;
            }
            if entry.zxid > end {
                let err = WalError::SnapshotBeyondLog {
                    zxid: entry.zxid,
                    end,
                };
                tracing::warn!(zxid = %entry.zxid, error = %err, "skipping snapshot");
                skipped.push((entry.zxid, err));
                continue;
            }
            let snapshot = match load(entry) {
                Ok(s) => s,
                Err(err) => {
                    tracing::warn!(zxid = %entry.zxid, error = %err, "skipping corrupt snapshot");
                    skipped.push((entry.zxid, err));
                    continue;
                }
            };
            match read_from(entry.zxid) {
                Ok(records) => return Ok((Some(snapshot), records, skipped)),
                Err(err @ WalError::NotInLog { .. }) => {
                    tracing::warn!(zxid = %entry.zxid, error = %err, "skipping snapshot the log does not connect to");
                    skipped.push((entry.zxid, err));
                }
                Err(err) => return Err(err),
            }
        }
        if start == Zxid::ZERO {
            let records = self.log.read_from(Zxid::ZERO)?;
            return Ok((None, records, skipped));
        }
        Err(WalError::NoUsableSnapshot { log_start: start })
    }

    /// Writes a snapshot of the caller's state, consistent at `zxid`, from the byte
    /// stream `data`: temporary file, fsync, rename, directory fsync, then a
    /// catalog entry in sled. Appends go on meanwhile: this touches no log lock.
    ///
    /// `zxid` must be within the durable log (a snapshot never claims history the
    /// log does not hold): above it fails with [`WalError::SnapshotBeyondLog`],
    /// below the log start with [`WalError::Purged`].
    pub fn save_snapshot(&self, zxid: Zxid, data: &mut dyn Read) -> Result<SnapshotInfo> {
        let _s = self
            .snapshots
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        self.check_within_log(zxid)?;
        let entry = write_snapshot(
            &self.snap_dir,
            zxid,
            data,
            &self.syncer,
            self.streams.write_bytes_per_sec_max,
        )?;
        self.meta.update_catalog(Some(entry), &[], None)?;
        Ok(self.info(&entry))
    }

    /// A snapshot at `zxid` would claim only history the durable log holds.
    fn check_within_log(&self, zxid: Zxid) -> Result<()> {
        let end = self.log.last_durable_zxid();
        if zxid > end {
            return Err(WalError::SnapshotBeyondLog { zxid, end });
        }
        let start = self.log.start();
        if zxid < start {
            return Err(WalError::Purged { zxid, start });
        }
        Ok(())
    }

    /// The snapshot directory, for writers on other threads
    /// ([`SnapshotDir::writer`], [`SnapshotDir::incoming`]).
    pub fn snapshot_dir(&self) -> SnapshotDir {
        self.streams.clone()
    }

    /// Starts a streaming snapshot of the caller's state, consistent at `zxid`:
    /// chunks go through a bounded queue to a thread of its own, which writes
    /// them at the pace of [`WalOptions::snapshot_write_bytes_per_sec_max`].
    /// Fails at once if `zxid` is not within the durable log (as
    /// [`Wal::save_snapshot`]); [`Wal::commit_snapshot`] checks again.
    pub fn snapshot_writer(&self, zxid: Zxid) -> Result<SnapshotWriter> {
        self.check_within_log(zxid)?;
        self.streams.writer(zxid)
    }

    /// Puts a streamed snapshot in the catalog: rename into place, directory
    /// fsync, catalog entry (the commit point). Refused, and the file removed,
    /// if the log no longer holds its zxid (a truncation or a SNAP install ran
    /// meanwhile). Appends go on meanwhile.
    pub fn commit_snapshot(&self, written: WrittenSnapshot) -> Result<SnapshotInfo> {
        let tmp = written.tmp;
        self.check_own(&tmp)?;
        let _s = self
            .snapshots
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let zxid = tmp.entry.zxid;
        self.check_within_log(zxid)?;
        if self.meta.catalog()?.iter().any(|e| e.zxid == zxid) {
            // The same committed state is already here (snapshots hold only
            // committed history): keep the file the catalog describes.
            tracing::info!(%zxid, "a snapshot at this zxid is already in the catalog; the new one is dropped");
            return self.info_of(zxid);
        }
        let entry = tmp.rename_to(
            &snapshot_path(&self.snap_dir, zxid),
            &self.snap_dir,
            &*self.syncer,
        )?;
        self.meta.update_catalog(Some(entry), &[], None)?;
        Ok(self.info(&entry))
    }

    /// A temporary file of another directory is refused: renaming it here could
    /// cross file systems and would not be covered by this directory's fsync.
    fn check_own(&self, tmp: &TmpSnapshot) -> Result<()> {
        if tmp.path().parent() == Some(self.snap_dir.as_path()) {
            return Ok(());
        }
        Err(WalError::SnapshotTransfer {
            zxid: tmp.entry.zxid,
            reason: format!(
                "{} was written for another snapshot directory than {}",
                tmp.path().display(),
                self.snap_dir.display()
            ),
        })
    }

    fn info_of(&self, zxid: Zxid) -> Result<SnapshotInfo> {
        let catalog = self.meta.catalog()?;
        match catalog.iter().find(|e| e.zxid == zxid) {
            Some(e) => Ok(self.info(e)),
            None => Err(self.not_catalogued(zxid)),
        }
    }

    fn not_catalogued(&self, zxid: Zxid) -> WalError {
        WalError::CorruptFile {
            path: snapshot_path(&self.snap_dir, zxid),
            reason: "not in the snapshot catalog".to_owned(),
        }
    }

    /// Opens the catalogued snapshot at `zxid` for reading: header, size and
    /// trailer are checked now, the data's checksum by its readers. The file
    /// stays readable through its descriptor if it is purged meanwhile.
    pub fn open_snapshot(&self, zxid: Zxid) -> Result<SnapshotFile> {
        let catalog = self.meta.catalog()?;
        let Some(entry) = catalog.iter().find(|e| e.zxid == zxid) else {
            return Err(self.not_catalogued(zxid));
        };
        SnapshotFile::open(snapshot_path(&self.snap_dir, zxid), entry)
    }

    /// Starts receiving a leader's snapshot file (see [`SnapshotDir::incoming`]).
    pub fn incoming_snapshot(
        &self,
        zxid: Zxid,
        size_bytes: u64,
        crc: u32,
    ) -> Result<IncomingSnapshot> {
        self.streams.incoming(zxid, size_bytes, crc)
    }

    fn info(&self, e: &CatalogEntry) -> SnapshotInfo {
        SnapshotInfo {
            zxid: e.zxid,
            path: snapshot_path(&self.snap_dir, e.zxid),
            size_bytes: e.size_bytes,
            crc: e.crc,
        }
    }

    /// The snapshot catalog, oldest first.
    pub fn snapshots(&self) -> Result<Vec<SnapshotInfo>> {
        Ok(self.meta.catalog()?.iter().map(|e| self.info(e)).collect())
    }

    /// Reads and verifies the snapshot at `zxid`, into memory
    /// ([`Wal::open_snapshot`] streams it instead).
    pub fn load_snapshot(&self, zxid: Zxid) -> Result<LoadedSnapshot> {
        let catalog = self.meta.catalog()?;
        let Some(entry) = catalog.iter().find(|e| e.zxid == zxid) else {
            return Err(self.not_catalogued(zxid));
        };
        load_snapshot(&self.snap_dir, entry)
    }

    /// Applies retention: keeps the newest `snap_retain_count` snapshots, removes
    /// older ones, and removes the log segments that no kept snapshot needs.
    pub fn purge(&self) -> Result<PurgeReport> {
        self.purge_holding(None)
    }

    /// [`Wal::purge`], but the log after `hold_after` stays too (a reader
    /// still needs it: a ZAB leader's SNAP transfer of an older snapshot ends
    /// with the log after it). Snapshots are removed as by `purge`: a reader
    /// that has one open keeps reading it.
    pub fn purge_holding(&self, hold_after: Option<Zxid>) -> Result<PurgeReport> {
        let _s = self
            .snapshots
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let catalog = self.meta.catalog()?;
        let held = |z: Zxid| hold_after.map_or(z, |h| h.min(z));
        let Some(split) = catalog.len().checked_sub(self.snap_retain_count) else {
            let Some(oldest) = catalog.first() else {
                return Ok(PurgeReport {
                    removed: Vec::new(),
                    start: self.log.start(),
                });
            };
            return self.log.purge_before(held(oldest.zxid));
        };
        let (old, kept) = catalog.split_at(split);
        // The log first: a crash after it leaves old snapshots the log no longer
        // reaches, which rebuild skips; the other order would be as safe.
        let mut report = match kept.first() {
            Some(oldest) => self.log.purge_before(held(oldest.zxid))?,
            None => PurgeReport::default(),
        };
        let zxids: Vec<Zxid> = old.iter().map(|e| e.zxid).collect();
        self.meta.update_catalog(None, &zxids, None)?;
        for z in zxids {
            let path = snapshot_path(&self.snap_dir, z);
            remove_durably(&path, &self.snap_dir, &*self.syncer)?;
            report.removed.push(path);
        }
        Ok(report)
    }

    /// TRUNC sync: drops every record after `zxid`, and every snapshot above
    /// `zxid` (it would hold history that no longer exists). Needs a TRUNC sync
    /// marker ([`Wal::begin_sync`]). Crash-safe: the log ends at its old end or at
    /// `zxid`. Returns the new last durable zxid.
    pub fn truncate_after(&self, zxid: Zxid) -> Result<Zxid> {
        let marker = self.meta.sync_marker()?;
        if marker.map(|m| m.mode) != Some(SyncMode::Trunc) {
            return Err(missing_marker(
                "truncate_after",
                SyncMode::Trunc,
                None,
                marker,
            ));
        }
        let _s = self
            .snapshots
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let above: Vec<Zxid> = self
            .meta
            .catalog()?
            .iter()
            .map(|e| e.zxid)
            .filter(|z| *z > zxid)
            .collect();
        if !above.is_empty() {
            tracing::warn!(%zxid, ?above, "truncation removes snapshots above the truncation point");
            // Catalog first: a crash then leaves the old log without those
            // snapshots, never a truncated log with a snapshot beyond it.
            self.meta.update_catalog(None, &above, None)?;
        }
        let end = self.log.truncate_after(zxid)?;
        for z in above {
            remove_durably(
                &snapshot_path(&self.snap_dir, z),
                &self.snap_dir,
                &*self.syncer,
            )?;
        }
        Ok(end)
    }

    /// SNAP sync: installs the leader's snapshot at `zxid`, from the state's
    /// bytes, and resets the log to start after it. Needs a SNAP sync marker for
    /// `zxid` ([`Wal::begin_sync`]). See [`Wal::install_received`] for a
    /// snapshot file received in chunks, and for the crash guarantees (the
    /// same).
    pub fn install_snapshot(&self, zxid: Zxid, data: &mut dyn Read) -> Result<SnapshotInfo> {
        self.check_snap_marker(zxid)?;
        let tmp = unique_tmp_path(&self.snap_dir, zxid, "install");
        // A learner installs as fast as it can: it serves nothing meanwhile.
        let mut w = StateFileWriter::create(zxid, tmp, Arc::clone(&self.syncer), None)?;
        w.write_from(data)?;
        self.install(w.finish()?)
    }

    /// SNAP sync: installs a snapshot file received from the leader and
    /// verified ([`IncomingSnapshot::finish`]), and resets the log to start
    /// after it. Needs a SNAP sync marker for its zxid ([`Wal::begin_sync`]).
    ///
    /// Crash-safe: the file is complete and durable before this is called; it
    /// is renamed into place (a file the catalog does not list is removed on
    /// open); then one sled batch commits its catalog entry together with a
    /// "reset the log to `zxid`" record (the commit point); then the log is reset
    /// (itself crash-safe) and the record cleared. A crash before the commit
    /// point leaves the old state; after it, the next open finishes the reset.
    /// Snapshots above `zxid` are dropped.
    pub fn install_received(&self, received: ReceivedSnapshot) -> Result<SnapshotInfo> {
        let tmp = received.tmp;
        self.check_own(&tmp)?;
        self.check_snap_marker(tmp.entry.zxid)?;
        self.install(tmp)
    }

    fn check_snap_marker(&self, zxid: Zxid) -> Result<()> {
        let marker = self.meta.sync_marker()?;
        let expected = SyncMarker {
            mode: SyncMode::Snap,
            target: zxid,
        };
        if marker == Some(expected) {
            return Ok(());
        }
        Err(missing_marker(
            "install_snapshot",
            SyncMode::Snap,
            Some(zxid),
            marker,
        ))
    }

    fn install(&self, tmp: TmpSnapshot) -> Result<SnapshotInfo> {
        let zxid = tmp.entry.zxid;
        let _s = self
            .snapshots
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let catalog = self.meta.catalog()?;
        let entry = match catalog.iter().find(|e| e.zxid == zxid) {
            Some(old) if self.keep_catalogued(old) => {
                // Renaming over a catalogued file would leave, after a crash
                // before the catalog batch, a file its entry does not describe.
                // The one here holds the same committed state and verifies.
                tracing::info!(%zxid, "the snapshot to install is already here; keeping the catalogued file");
                *old
            }
            _ => tmp.rename_to(
                &snapshot_path(&self.snap_dir, zxid),
                &self.snap_dir,
                &*self.syncer,
            )?,
        };
        let above: Vec<Zxid> = catalog
            .iter()
            .map(|e| e.zxid)
            .filter(|z| *z > zxid)
            .collect();
        self.meta.update_catalog(Some(entry), &above, Some(zxid))?;
        // The record is cleared before appends resume, so a reopen that finds it
        // can reset again without losing an acknowledged append.
        self.log.reset_then(zxid, || self.meta.clear_log_reset())?;
        for z in above {
            remove_durably(
                &snapshot_path(&self.snap_dir, z),
                &self.snap_dir,
                &*self.syncer,
            )?;
        }
        Ok(self.info(&entry))
    }

    /// Whether the catalogued snapshot `entry` is intact, so an install of the
    /// same zxid can keep it.
    fn keep_catalogued(&self, entry: &CatalogEntry) -> bool {
        let verified = SnapshotFile::open(snapshot_path(&self.snap_dir, entry.zxid), entry)
            .and_then(|f| f.verify());
        match verified {
            Ok(()) => true,
            Err(e) => {
                tracing::warn!(zxid = %entry.zxid, error = %e, "the catalogued snapshot is damaged; the received one replaces it");
                false
            }
        }
    }

    /// The persisted acceptedEpoch.
    pub fn accepted_epoch(&self) -> Result<Epoch> {
        self.meta.accepted_epoch()
    }

    /// The persisted currentEpoch.
    pub fn current_epoch(&self) -> Result<Epoch> {
        self.meta.current_epoch()
    }

    /// Persists acceptedEpoch (before ACKEPOCH); it never decreases.
    pub fn set_accepted_epoch(&self, epoch: Epoch) -> Result<()> {
        self.meta.set_accepted_epoch(epoch)
    }

    /// Persists currentEpoch; it never decreases and never exceeds acceptedEpoch.
    pub fn set_current_epoch(&self, epoch: Epoch) -> Result<()> {
        self.meta.set_current_epoch(epoch)
    }

    /// Persists both epochs atomically, with the same rules.
    pub fn set_epochs(&self, accepted: Epoch, current: Epoch) -> Result<()> {
        self.meta.set_epochs(accepted, current)
    }

    /// The learner sync in progress, if any.
    pub fn sync_marker(&self) -> Result<Option<SyncMarker>> {
        self.meta.sync_marker()
    }

    /// Persists the sync marker before a learner sync starts.
    pub fn begin_sync(&self, marker: SyncMarker) -> Result<()> {
        self.meta.begin_sync(marker)
    }

    /// Clears the sync marker once the sync is complete and everything it brought
    /// is durable (the caller flushes first); optionally persists currentEpoch in
    /// the same atomic batch.
    pub fn end_sync(&self, current_epoch: Option<Epoch>) -> Result<()> {
        self.meta.end_sync(current_epoch)
    }
}

/// Starts the preload `f` on the newest catalogued snapshot, if there is
/// one. A catalog that cannot be read is left to the rebuild to report.
fn start_preload(meta: &Meta, snap_dir: &Path, f: PreloadFn) -> Option<Preloaded> {
    let entry = *meta.catalog().ok()?.last()?;
    let path = snapshot_path(snap_dir, entry.zxid);
    let thread = std::thread::Builder::new()
        .name("rzk-snapshot-preload".to_owned())
        .spawn(move || preload(path, &entry, f))
        .map_err(|e| tracing::warn!(error = %e, "could not start the snapshot preload"))
        .ok()?;
    Some(Preloaded { entry, thread })
}

/// The preload thread: the file opened and checked as the catalog describes
/// it, its state given to `f`, and the file returned only if every byte
/// matched the checksum. If `f` did not read to the end, the file is
/// verified here.
fn preload(path: PathBuf, entry: &CatalogEntry, f: PreloadFn) -> Result<SnapshotFile> {
    let file = SnapshotFile::open(path, entry)?;
    let reader = file.state_reader();
    let verdict = reader.verdict();
    f(reader);
    if verdict.get() != Some(true) {
        // Not read to the end, or a mismatch: this pass reports it as a
        // verification without a preload would.
        file.verify()?;
    }
    Ok(file)
}

/// The outcome of the preload of `entry`, if one read it: waits for it. A
/// preload that panicked gives none, and the file is verified as usual.
fn join_preload(
    preloaded: &mut Vec<Preloaded>,
    entry: &CatalogEntry,
) -> Option<Result<SnapshotFile>> {
    let i = preloaded.iter().position(|p| p.entry == *entry)?;
    preloaded.swap_remove(i).thread.join().ok()
}

#[cfg(test)]
#[path = "wal_tests.rs"]
mod tests;

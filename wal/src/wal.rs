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
use crate::snapshot::{load_snapshot, snapshot_path, write_snapshot, LoadedSnapshot, SnapshotInfo};

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
}

impl Default for WalOptions {
    fn default() -> Self {
        WalOptions {
            log: LogOptions::default(),
            snap_retain_count: 3,
            log_dir: None,
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
    /// Serialises changes to the snapshot catalog and its files.
    snapshots: Mutex<()>,
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
        let wal = Wal {
            log,
            meta,
            snap_dir,
            syncer,
            snap_retain_count: options.snap_retain_count.max(1),
            snapshots: Mutex::new(()),
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
    pub fn rebuild(&self) -> Result<Rebuild> {
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
            let snapshot = match load_snapshot(&self.snap_dir, entry) {
                Ok(s) => s,
                Err(err) => {
                    tracing::warn!(zxid = %entry.zxid, error = %err, "skipping corrupt snapshot");
                    skipped.push((entry.zxid, err));
                    continue;
                }
            };
            match self.log.read_from(entry.zxid) {
                Ok(records) => {
                    return Ok(Rebuild {
                        snapshot: Some(snapshot),
                        records,
                        skipped,
                    })
                }
                Err(err @ WalError::NotInLog { .. }) => {
                    tracing::warn!(zxid = %entry.zxid, error = %err, "skipping snapshot the log does not connect to");
                    skipped.push((entry.zxid, err));
                }
                Err(err) => return Err(err),
            }
        }
        if start == Zxid::ZERO {
            let records = self.log.read_from(Zxid::ZERO)?;
            return Ok(Rebuild {
                snapshot: None,
                records,
                skipped,
            });
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
        let end = self.log.last_durable_zxid();
        if zxid > end {
            return Err(WalError::SnapshotBeyondLog { zxid, end });
        }
        let start = self.log.start();
        if zxid < start {
            return Err(WalError::Purged { zxid, start });
        }
        let entry = write_snapshot(&self.snap_dir, zxid, data, &*self.syncer)?;
        self.meta.update_catalog(Some(entry), &[], None)?;
        Ok(self.info(&entry))
    }

    fn info(&self, e: &CatalogEntry) -> SnapshotInfo {
        SnapshotInfo {
            zxid: e.zxid,
            path: snapshot_path(&self.snap_dir, e.zxid),
            size_bytes: e.size_bytes,
        }
    }

    /// The snapshot catalog, oldest first.
    pub fn snapshots(&self) -> Result<Vec<SnapshotInfo>> {
        Ok(self.meta.catalog()?.iter().map(|e| self.info(e)).collect())
    }

    /// Reads and verifies the snapshot at `zxid`.
    pub fn load_snapshot(&self, zxid: Zxid) -> Result<LoadedSnapshot> {
        let catalog = self.meta.catalog()?;
        let Some(entry) = catalog.iter().find(|e| e.zxid == zxid) else {
            return Err(WalError::CorruptFile {
                path: snapshot_path(&self.snap_dir, zxid),
                reason: "not in the snapshot catalog".to_owned(),
            });
        };
        load_snapshot(&self.snap_dir, entry)
    }

    /// Applies retention: keeps the newest `snap_retain_count` snapshots, removes
    /// older ones, and removes the log segments that no kept snapshot needs.
    pub fn purge(&self) -> Result<PurgeReport> {
        let _s = self
            .snapshots
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let catalog = self.meta.catalog()?;
        let Some(split) = catalog.len().checked_sub(self.snap_retain_count) else {
            let Some(oldest) = catalog.first() else {
                return Ok(PurgeReport {
                    removed: Vec::new(),
                    start: self.log.start(),
                });
            };
            return self.log.purge_before(oldest.zxid);
        };
        let (old, kept) = catalog.split_at(split);
        // The log first: a crash after it leaves old snapshots the log no longer
        // reaches, which rebuild skips; the other order would be as safe.
        let mut report = match kept.first() {
            Some(oldest) => self.log.purge_before(oldest.zxid)?,
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

    /// SNAP sync: installs the leader's snapshot at `zxid` and resets the log to
    /// start after it. Needs a SNAP sync marker for `zxid` ([`Wal::begin_sync`]).
    ///
    /// Crash-safe: the snapshot is written and fsynced first; then one sled batch
    /// commits its catalog entry together with a "reset the log to `zxid`" record
    /// (the commit point); then the log is reset (itself crash-safe) and the record
    /// cleared. A crash before the commit point leaves the old state; after it, the
    /// next open finishes the reset. Snapshots above `zxid` are dropped.
    pub fn install_snapshot(&self, zxid: Zxid, data: &mut dyn Read) -> Result<SnapshotInfo> {
        let marker = self.meta.sync_marker()?;
        let expected = SyncMarker {
            mode: SyncMode::Snap,
            target: zxid,
        };
        if marker != Some(expected) {
            return Err(missing_marker(
                "install_snapshot",
                SyncMode::Snap,
                Some(zxid),
                marker,
            ));
        }
        let _s = self
            .snapshots
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let entry = write_snapshot(&self.snap_dir, zxid, data, &*self.syncer)?;
        let above: Vec<Zxid> = self
            .meta
            .catalog()?
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

#[cfg(test)]
#[path = "wal_tests.rs"]
mod tests;

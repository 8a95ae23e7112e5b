//! Small metadata in sled: epochs, the snapshot catalog, the sync marker.

use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};

use rzk_zxid::{Epoch, Zxid};

use crate::error::{Result, WalError};

const ACCEPTED_EPOCH: &[u8] = b"accepted_epoch";
const CURRENT_EPOCH: &[u8] = b"current_epoch";
const SYNC_MARKER: &[u8] = b"sync_marker";
const LOG_RESET: &[u8] = b"log_reset";
const SNAP_PREFIX: &[u8] = b"snap/";

/// The mode of a learner sync (ZAB phase 2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SyncMode {
    /// The leader sends the transactions the learner misses.
    Diff,
    /// The learner drops its log after a point, then receives a DIFF.
    Trunc,
    /// The learner replaces its state with the leader's snapshot.
    Snap,
}

impl SyncMode {
    fn to_byte(self) -> u8 {
        match self {
            SyncMode::Diff => 1,
            SyncMode::Trunc => 2,
            SyncMode::Snap => 3,
        }
    }

    fn from_byte(b: u8) -> Option<SyncMode> {
        match b {
            1 => Some(SyncMode::Diff),
            2 => Some(SyncMode::Trunc),
            3 => Some(SyncMode::Snap),
            _ => None,
        }
    }
}

/// A learner sync that has started and not completed.
///
/// Set before the sync touches anything, cleared only once it is complete, and
/// reported by open: an interrupted sync can never be mistaken for a complete one
/// (I2, ZOOKEEPER-5094). Whoever finds it on open must discard in-memory state and
/// rebuild it from disk before syncing again.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SyncMarker {
    /// DIFF, TRUNC or SNAP.
    pub mode: SyncMode,
    /// The zxid the sync is to reach (for TRUNC, the truncation point; for SNAP,
    /// the snapshot's zxid).
    pub target: Zxid,
}

impl SyncMarker {
    fn encode(&self) -> [u8; 9] {
        let mut b = [0u8; 9];
        b[0] = self.mode.to_byte();
        b[1..9].copy_from_slice(&self.target.as_u64().to_be_bytes());
        b
    }

    fn decode(b: &[u8]) -> Option<SyncMarker> {
        if b.len() != 9 {
            return None;
        }
        Some(SyncMarker {
            mode: SyncMode::from_byte(b[0])?,
            target: Zxid::from_u64(u64::from_be_bytes(b[1..9].try_into().ok()?)),
        })
    }
}

/// A snapshot as the catalog records it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CatalogEntry {
    pub zxid: Zxid,
    pub size_bytes: u64,
    pub crc: u32,
}

fn snap_key(zxid: Zxid) -> Vec<u8> {
    let mut k = SNAP_PREFIX.to_vec();
    // Big-endian so sled's key order is zxid order.
    k.extend_from_slice(&zxid.as_u64().to_be_bytes());
    k
}

/// acceptedEpoch, currentEpoch, the snapshot catalog and the sync marker, in a
/// sled database. Every update is one atomic batch, flushed before the call
/// returns.
///
/// # Correctness
/// Epochs never decrease and currentEpoch never exceeds acceptedEpoch; updates
/// that would break this are refused ([`WalError::EpochRegression`],
/// [`WalError::CurrentAboveAccepted`]).
pub struct Meta {
    db: sled::Db,
    path: PathBuf,
    /// Serialises read-check-write updates.
    write: Mutex<()>,
}

impl std::fmt::Debug for Meta {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Meta").field("path", &self.path).finish()
    }
}

/// How long [`Meta::open`] waits for sled's file lock to be released.
///
/// Why: sled 0.34 releases its lock when the last reference to its files is
/// dropped, and its I/O threads may still hold one for a moment after the
/// `Db` handle of the same process was dropped (sled's own test build blocks
/// on the lock for this reason). A lock held by another live process is still
/// refused, after this wait, with sled's message.
const LOCK_WAIT_MAX: std::time::Duration = std::time::Duration::from_secs(3);

/// Opens the sled store at `path`, waiting up to [`LOCK_WAIT_MAX`] for its lock.
fn open_sled(path: &Path) -> Result<sled::Db> {
    let deadline = std::time::Instant::now() + LOCK_WAIT_MAX;
    loop {
        // No background flusher: every update is flushed before it returns anyway,
        // and without it dropping the store releases its lock sooner.
        let opened = sled::Config::new().path(path).flush_every_ms(None).open();
        match opened {
            Ok(db) => return Ok(db),
            Err(e) if is_lock_busy(&e) && std::time::Instant::now() < deadline => {
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            Err(e) => {
                return Err(WalError::Meta {
                    path: path.to_owned(),
                    reason: e.to_string(),
                })
            }
        }
    }
}

/// Whether sled refused to open because its lock file is held.
fn is_lock_busy(e: &sled::Error) -> bool {
    matches!(e, sled::Error::Io(io) if io.to_string().contains("could not acquire lock"))
}

impl Meta {
    /// Opens (or creates) the metadata store at `path`. Refuses a store whose
    /// currentEpoch exceeds its acceptedEpoch.
    pub fn open(path: impl AsRef<Path>) -> Result<Meta> {
        let path = path.as_ref().to_owned();
        let db = open_sled(&path)?;
        let meta = Meta {
            db,
            path,
            write: Mutex::new(()),
        };
        let (accepted, current) = (meta.accepted_epoch()?, meta.current_epoch()?);
        if current > accepted {
            return Err(WalError::CurrentAboveAccepted {
                requested: current,
                accepted,
            });
        }
        Ok(meta)
    }

    fn err(&self, e: sled::Error) -> WalError {
        WalError::Meta {
            path: self.path.clone(),
            reason: e.to_string(),
        }
    }

    fn corrupt(&self, what: &str) -> WalError {
        WalError::Meta {
            path: self.path.clone(),
            reason: format!("unreadable {what}"),
        }
    }

    fn get(&self, key: &[u8]) -> Result<Option<sled::IVec>> {
        self.db.get(key).map_err(|e| self.err(e))
    }

    fn epoch(&self, key: &[u8], what: &str) -> Result<Epoch> {
        match self.get(key)? {
            None => Ok(Epoch(0)),
            Some(v) => {
                let b: [u8; 4] = v.as_ref().try_into().map_err(|_| self.corrupt(what))?;
                Ok(Epoch(u32::from_be_bytes(b)))
            }
        }
    }

    /// Applies `batch` atomically and makes it durable.
    fn commit(&self, batch: sled::Batch) -> Result<()> {
        self.db.apply_batch(batch).map_err(|e| self.err(e))?;
        self.db.flush().map_err(|e| self.err(e))?;
        Ok(())
    }

    /// The highest epoch this peer has promised to follow (0 if never set).
    pub fn accepted_epoch(&self) -> Result<Epoch> {
        self.epoch(ACCEPTED_EPOCH, "acceptedEpoch")
    }

    /// The epoch whose leader's history this peer has fully accepted (0 if never set).
    pub fn current_epoch(&self) -> Result<Epoch> {
        self.epoch(CURRENT_EPOCH, "currentEpoch")
    }

    /// Persists acceptedEpoch; refuses to lower it.
    pub fn set_accepted_epoch(&self, epoch: Epoch) -> Result<()> {
        let current = self.current_epoch()?;
        self.set_epochs(epoch, current)
    }

    /// Persists currentEpoch; refuses to lower it or to raise it above acceptedEpoch.
    pub fn set_current_epoch(&self, epoch: Epoch) -> Result<()> {
        let accepted = self.accepted_epoch()?;
        self.set_epochs(accepted, epoch)
    }

    /// Persists both epochs in one atomic batch, with the same checks.
    pub fn set_epochs(&self, accepted: Epoch, current: Epoch) -> Result<()> {
        let _w = self.write.lock().unwrap_or_else(PoisonError::into_inner);
        let (old_accepted, old_current) = (self.accepted_epoch()?, self.current_epoch()?);
        if accepted < old_accepted {
            return Err(WalError::EpochRegression {
                which: "acceptedEpoch",
                current: old_accepted,
                requested: accepted,
            });
        }
        if current < old_current {
            return Err(WalError::EpochRegression {
                which: "currentEpoch",
                current: old_current,
                requested: current,
            });
        }
        if current > accepted {
            return Err(WalError::CurrentAboveAccepted {
                requested: current,
                accepted,
            });
        }
        let mut batch = sled::Batch::default();
        batch.insert(ACCEPTED_EPOCH, &accepted.0.to_be_bytes());
        batch.insert(CURRENT_EPOCH, &current.0.to_be_bytes());
        self.commit(batch)
    }

    /// The sync in progress, if any.
    pub fn sync_marker(&self) -> Result<Option<SyncMarker>> {
        match self.get(SYNC_MARKER)? {
            None => Ok(None),
            Some(v) => SyncMarker::decode(&v)
                .map(Some)
                .ok_or_else(|| self.corrupt("sync marker")),
        }
    }

    /// Records that a learner sync starts. Replaces a marker left by an earlier,
    /// interrupted sync (the caller has seen it on open).
    pub fn begin_sync(&self, marker: SyncMarker) -> Result<()> {
        let _w = self.write.lock().unwrap_or_else(PoisonError::into_inner);
        let mut batch = sled::Batch::default();
        batch.insert(SYNC_MARKER, &marker.encode());
        self.commit(batch)
    }

    /// Records that the sync completed. With `current_epoch`, also persists
    /// currentEpoch in the same atomic batch (with the usual checks).
    pub fn end_sync(&self, current_epoch: Option<Epoch>) -> Result<()> {
        let _w = self.write.lock().unwrap_or_else(PoisonError::into_inner);
        let mut batch = sled::Batch::default();
        if let Some(current) = current_epoch {
            let (accepted, old) = (self.accepted_epoch()?, self.current_epoch()?);
            if current < old {
                return Err(WalError::EpochRegression {
                    which: "currentEpoch",
                    current: old,
                    requested: current,
                });
            }
            if current > accepted {
                return Err(WalError::CurrentAboveAccepted {
                    requested: current,
                    accepted,
                });
            }
            batch.insert(CURRENT_EPOCH, &current.0.to_be_bytes());
        }
        batch.remove(SYNC_MARKER);
        self.commit(batch)
    }

    /// The snapshot catalog, oldest first.
    pub(crate) fn catalog(&self) -> Result<Vec<CatalogEntry>> {
        let mut out = Vec::new();
        for item in self.db.scan_prefix(SNAP_PREFIX) {
            let (k, v) = item.map_err(|e| self.err(e))?;
            let key: [u8; 8] = k[SNAP_PREFIX.len()..]
                .try_into()
                .map_err(|_| self.corrupt("snapshot catalog key"))?;
            if v.len() != 12 {
                return Err(self.corrupt("snapshot catalog entry"));
            }
            out.push(CatalogEntry {
                zxid: Zxid::from_u64(u64::from_be_bytes(key)),
                size_bytes: u64::from_le_bytes(v[0..8].try_into().expect("8 bytes")),
                crc: u32::from_le_bytes(v[8..12].try_into().expect("4 bytes")),
            });
        }
        Ok(out)
    }

    /// Adds `add` and removes `remove` in one batch; with `log_reset`, also records
    /// that the log must be reset to start after it (the commit point of a
    /// snapshot install).
    pub(crate) fn update_catalog(
        &self,
        add: Option<CatalogEntry>,
        remove: &[Zxid],
        log_reset: Option<Zxid>,
    ) -> Result<()> {
        let _w = self.write.lock().unwrap_or_else(PoisonError::into_inner);
        let mut batch = sled::Batch::default();
        for z in remove {
            batch.remove(snap_key(*z));
        }
        if let Some(e) = add {
            let mut v = Vec::with_capacity(12);
            v.extend_from_slice(&e.size_bytes.to_le_bytes());
            v.extend_from_slice(&e.crc.to_le_bytes());
            batch.insert(snap_key(e.zxid), v);
        }
        if let Some(z) = log_reset {
            batch.insert(LOG_RESET, &z.as_u64().to_be_bytes());
        }
        self.commit(batch)
    }

    /// A log reset that was committed and may not have been carried out.
    pub(crate) fn pending_log_reset(&self) -> Result<Option<Zxid>> {
        match self.get(LOG_RESET)? {
            None => Ok(None),
            Some(v) => {
                let b: [u8; 8] = v
                    .as_ref()
                    .try_into()
                    .map_err(|_| self.corrupt("log reset"))?;
                Ok(Some(Zxid::from_u64(u64::from_be_bytes(b))))
            }
        }
    }

    /// Forgets the pending log reset once it is done.
    pub(crate) fn clear_log_reset(&self) -> Result<()> {
        let _w = self.write.lock().unwrap_or_else(PoisonError::into_inner);
        let mut batch = sled::Batch::default();
        batch.remove(LOG_RESET);
        self.commit(batch)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn epochs_never_decrease_and_current_stays_below_accepted() {
        let dir = tempfile::tempdir().unwrap();
        let meta = Meta::open(dir.path().join("meta")).unwrap();
        assert_eq!(meta.accepted_epoch().unwrap(), Epoch(0));
        meta.set_accepted_epoch(Epoch(3)).unwrap();
        assert!(matches!(
            meta.set_current_epoch(Epoch(4)),
            Err(WalError::CurrentAboveAccepted { .. })
        ));
        meta.set_current_epoch(Epoch(3)).unwrap();
        assert!(matches!(
            meta.set_accepted_epoch(Epoch(2)),
            Err(WalError::EpochRegression {
                which: "acceptedEpoch",
                ..
            })
        ));
        assert!(matches!(
            meta.set_epochs(Epoch(5), Epoch(2)),
            Err(WalError::EpochRegression {
                which: "currentEpoch",
                ..
            })
        ));
        meta.set_accepted_epoch(Epoch(3)).unwrap();
        drop(meta);
        let meta = Meta::open(dir.path().join("meta")).unwrap();
        assert_eq!(meta.accepted_epoch().unwrap(), Epoch(3));
        assert_eq!(meta.current_epoch().unwrap(), Epoch(3));
    }

    #[test]
    fn a_store_held_open_is_refused_after_the_lock_wait() {
        let dir = tempfile::tempdir().unwrap();
        let _held = Meta::open(dir.path().join("meta")).unwrap();
        let started = std::time::Instant::now();
        let err = Meta::open(dir.path().join("meta")).unwrap_err();
        assert!(started.elapsed() >= LOCK_WAIT_MAX, "it waited for the lock");
        match err {
            WalError::Meta { reason, .. } => assert!(reason.contains("lock"), "{reason}"),
            other => panic!("expected a Meta error naming the lock, got {other:?}"),
        }
    }

    #[test]
    fn sync_marker_survives_reopen_until_ended() {
        let dir = tempfile::tempdir().unwrap();
        let marker = SyncMarker {
            mode: SyncMode::Trunc,
            target: Zxid::from_u64(0x1_0000_0001),
        };
        {
            let meta = Meta::open(dir.path().join("meta")).unwrap();
            meta.set_accepted_epoch(Epoch(2)).unwrap();
            meta.begin_sync(marker).unwrap();
        }
        let meta = Meta::open(dir.path().join("meta")).unwrap();
        assert_eq!(meta.sync_marker().unwrap(), Some(marker));
        assert!(matches!(
            meta.end_sync(Some(Epoch(3))),
            Err(WalError::CurrentAboveAccepted { .. })
        ));
        assert_eq!(
            meta.sync_marker().unwrap(),
            Some(marker),
            "a refused end keeps the marker"
        );
        meta.end_sync(Some(Epoch(2))).unwrap();
        assert_eq!(meta.sync_marker().unwrap(), None);
        assert_eq!(meta.current_epoch().unwrap(), Epoch(2));
    }
}

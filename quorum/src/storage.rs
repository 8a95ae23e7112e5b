//! What the tokio driver needs from durable storage.
//!
//! The core emits [`StorageCmd`]s; the driver runs them on one dedicated thread,
//! in order, and makes them durable in groups (group commit: execute every
//! command that is waiting, then one [`Storage::sync`]). `rzk-wal` is the
//! production implementation; [`MemStorage`] is an in-memory one for tests,
//! whose "durable" state survives a simulated restart by sharing it.

use std::sync::{Arc, Mutex};

use bytes::Bytes;
use rzk_zxid::Zxid;

use crate::core::{Epochs, Recovered, StorageCmd};
use crate::message::Entry;

/// A storage failure. The driver stops the peer on any of them: an error that
/// could mean lost data is never retried into silence (STYLE rule 6).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("storage: {0}")]
pub struct StorageError(pub String);

/// A peer's durable state, as the driver uses it.
///
/// # Correctness
/// - Commands are executed in the order given; [`Storage::sync`] makes every
///   command executed so far durable, and returns only then.
/// - After a crash, [`Storage::recover`] returns a prefix of the executed
///   commands' effects (a torn last record is discarded), never a hole.
/// - `Append` continues the log contiguously; `TruncateAfter` and
///   `InstallSnapshot` are atomic once synced.
/// - Every call runs on one thread at a time (all write IO is serialised).
pub trait Storage: Send + 'static {
    /// Reads what is durable.
    fn recover(&mut self) -> Result<Recovered, StorageError>;
    /// Executes one command (it need not be durable before `sync`).
    fn execute(&mut self, cmd: StorageCmd) -> Result<(), StorageError>;
    /// Makes every executed command durable.
    fn sync(&mut self) -> Result<(), StorageError>;
    /// Stores a state-machine snapshot durably and may purge the log it covers.
    fn save_snapshot(&mut self, zxid: Zxid, data: Bytes) -> Result<(), StorageError>;
}

/// The durable contents of a [`MemStorage`].
#[derive(Clone, Debug, Default)]
pub struct MemState {
    /// The log after the snapshot.
    pub log: Vec<Entry>,
    /// The newest snapshot.
    pub snapshot: Option<(Zxid, Bytes)>,
    /// Persisted epochs.
    pub epochs: Epochs,
    /// The sync-in-progress marker.
    pub sync_in_progress: bool,
}

/// In-memory storage for tests and benchmarks: "durable" means kept in a shared
/// [`MemState`] that a restarted peer can recover from. Not a log: nothing
/// reaches a disk.
#[derive(Clone, Debug, Default)]
pub struct MemStorage {
    state: Arc<Mutex<MemState>>,
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
}

impl Storage for MemStorage {
    fn recover(&mut self) -> Result<Recovered, StorageError> {
        let s = self.state.lock().expect("not poisoned");
        Ok(Recovered {
            epochs: s.epochs,
            snapshot: s.snapshot.clone(),
            log: s.log.clone(),
            sync_in_progress: s.sync_in_progress,
        })
    }

    fn execute(&mut self, cmd: StorageCmd) -> Result<(), StorageError> {
        let mut s = self.state.lock().expect("not poisoned");
        match cmd {
            StorageCmd::Append(entries) => {
                for e in entries {
                    let last = s
                        .log
                        .last()
                        .map(|e| e.zxid)
                        .or(s.snapshot.as_ref().map(|x| x.0))
                        .unwrap_or(Zxid::ZERO);
                    if !e.zxid.is_next(last) {
                        return Err(StorageError(format!(
                            "append {} after {last}: a gap",
                            e.zxid
                        )));
                    }
                    s.log.push(e);
                }
            }
            StorageCmd::TruncateAfter(z) => s.log.retain(|e| e.zxid <= z),
            StorageCmd::InstallSnapshot { zxid, data } => {
                s.snapshot = Some((zxid, data));
                s.log.clear();
            }
            StorageCmd::SaveEpochs(ep) => s.epochs = ep,
            StorageCmd::BeginSync { .. } => s.sync_in_progress = true,
            StorageCmd::EndSync => s.sync_in_progress = false,
        }
        Ok(())
    }

    fn sync(&mut self) -> Result<(), StorageError> {
        Ok(())
    }

    fn save_snapshot(&mut self, zxid: Zxid, data: Bytes) -> Result<(), StorageError> {
        let mut s = self.state.lock().expect("not poisoned");
        if s.snapshot.as_ref().is_some_and(|x| x.0 >= zxid) {
            return Ok(());
        }
        s.snapshot = Some((zxid, data));
        s.log.retain(|e| e.zxid > zxid);
        Ok(())
    }
}

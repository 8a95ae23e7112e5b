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

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use bytes::Bytes;
use rzk_wal::{Append, SyncMarker, Wal, WalOptions};
use rzk_zxid::{Epoch, Zxid};

use crate::core::{Epochs, Recovered, StorageCmd, SyncMode};
use crate::message::Entry;
use crate::storage::{Storage, StorageError};
use crate::PeerId;

const ACCEPTED_FROM: &str = "quorum-accepted-from";

/// A ZAB peer's storage on `rzk-wal`.
pub struct WalStorage {
    wal: Wal,
    dir: PathBuf,
    /// Appends issued and not yet known durable.
    pending: Vec<Append>,
    /// The last acceptedEpoch persisted, to skip rewriting the "from" file.
    written_from: Option<(Epoch, PeerId)>,
}

fn err(e: impl std::fmt::Display) -> StorageError {
    StorageError(e.to_string())
}

impl WalStorage {
    /// Opens (or creates) the peer's durable state under `dir`.
    pub fn open(dir: impl AsRef<Path>, options: WalOptions) -> Result<WalStorage, StorageError> {
        let dir = dir.as_ref().to_path_buf();
        let (wal, recovery) = Wal::open(&dir, options).map_err(err)?;
        if let Some(m) = recovery.sync_in_progress {
            tracing::warn!(?m, "a sync was interrupted; state is rebuilt from disk");
        }
        Ok(WalStorage {
            wal,
            dir,
            pending: Vec::new(),
            written_from: None,
        })
    }

    /// The underlying log (for inspection).
    pub fn wal(&self) -> &Wal {
        &self.wal
    }

    fn wait_pending(&mut self) -> Result<(), StorageError> {
        for a in self.pending.drain(..) {
            a.wait().map_err(err)?;
        }
        Ok(())
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
}

impl Storage for WalStorage {
    fn recover(&mut self) -> Result<Recovered, StorageError> {
        let accepted = self.wal.accepted_epoch().map_err(err)?;
        let current = self.wal.current_epoch().map_err(err)?;
        let rebuild = self.wal.rebuild().map_err(err)?;
        let snapshot = rebuild.snapshot.map(|s| (s.zxid, s.data));
        let mut log = Vec::new();
        for r in rebuild.records {
            let r = r.map_err(err)?;
            log.push(Entry {
                zxid: r.zxid,
                payload: r.payload,
            });
        }
        Ok(Recovered {
            epochs: Epochs {
                accepted,
                accepted_from: self.read_from_file(accepted),
                current,
            },
            snapshot,
            log,
            sync_in_progress: self.wal.sync_marker().map_err(err)?.is_some(),
        })
    }

    fn execute(&mut self, cmd: StorageCmd) -> Result<(), StorageError> {
        if let StorageCmd::Append(entries) = cmd {
            for e in entries {
                self.pending
                    .push(self.wal.append(e.zxid, e.payload).map_err(err)?);
            }
            return Ok(());
        }
        // Everything else is ordered after the appends before it.
        self.wait_pending()?;
        match cmd {
            StorageCmd::Append(_) => unreachable!("handled above"),
            StorageCmd::TruncateAfter(z) => self.wal.truncate_after(z).map(|_| ()).map_err(err),
            StorageCmd::InstallSnapshot { zxid, data } => self
                .wal
                .install_snapshot(zxid, &mut &data[..])
                .map(|_| ())
                .map_err(err),
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

    fn save_snapshot(&mut self, zxid: Zxid, data: Bytes) -> Result<(), StorageError> {
        self.wait_pending()?;
        if self
            .wal
            .snapshots()
            .map_err(err)?
            .last()
            .is_some_and(|s| s.zxid >= zxid)
        {
            return Ok(());
        }
        self.wal.save_snapshot(zxid, &mut &data[..]).map_err(err)?;
        self.wal.purge().map(|_| ()).map_err(err)
    }
}

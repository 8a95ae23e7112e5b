//! The simulated disk of a quorum peer: what storage made durable, the
//! commands issued and not yet complete, and what a crash leaves of them.
//!
//! A [`Disk`] executes the quorum core's [`StorageCmd`]s as `rzk-quorum`'s
//! storage contract says (in order; a refused snapshot changes nothing) and
//! keeps snapshots as `rzk-wal` does (the newest few in a catalog, the log
//! after the oldest of them, removed files readable while open). Only
//! completed commands are durable: on a crash a random prefix of the
//! uncompleted ones survives, the last append of it possibly torn. Executing
//! a command checks what a disk can see: LogContiguity, EpochFence,
//! EpochMonotonicity, and through the [`Checker`] ZxidUniqueness and
//! CommittedLogDurability. It serves the core's reads too
//! ([`ReadCmd`](rzk_quorum::core::ReadCmd)).
//!
//! Any world that runs quorum cores uses it: the quorum simulation, and the
//! server-level one, whose snapshot files hold the server's tree as well.

use std::collections::VecDeque;

use bytes::Bytes;
use rand::Rng;
use rzk_quorum::core::{Epochs, OpId, SnapshotRef, StorageCmd};
use rzk_quorum::message::Entry;
use rzk_quorum::PeerId;
use rzk_zxid::Zxid;

use crate::checker::{payload_id, violation, Checker, Violation};

/// The simulated storage's file checksum (FNV-1a, 32 bits).
pub(crate) fn checksum(b: &[u8]) -> u32 {
    b.iter().fold(0x811c9dc5u32, |h, x| {
        (h ^ *x as u32).wrapping_mul(0x01000193)
    })
}

/// What a crash leaves of the commands not yet complete.
pub(crate) struct CrashRemains {
    /// How many commands were not complete.
    pub(crate) issued: usize,
    /// The prefix of them that reaches the disk.
    pub(crate) survivors: Vec<StorageCmd>,
    /// How many entries of the last survivor reach the disk if it is an
    /// append (a torn write).
    pub(crate) torn: usize,
}

/// A simulated disk: only what storage confirmed (completed commands), plus
/// what survives a crash, and the commands not yet complete. Snapshots are
/// kept as `rzk-wal` keeps them: the newest `retain` in the catalog, and the
/// log after the oldest of those.
#[derive(Clone, Debug, Default)]
pub(crate) struct Disk {
    /// The durable log: the entries after `log_start`.
    pub(crate) log: Vec<Entry>,
    /// Where the log starts: the oldest catalogued snapshot's zxid (the
    /// purge point storage reports with `Input::SnapshotSaved`).
    pub(crate) log_start: Zxid,
    /// The newest snapshot and its "file" (the encoded state machine).
    pub(crate) snapshot: Option<(SnapshotRef, Bytes)>,
    /// Older snapshots still in the catalog, oldest first (retention keeps
    /// `retain` snapshots in all, the newest included).
    pub(crate) kept: Vec<(SnapshotRef, Bytes)>,
    /// Snapshots retention removed that a reader still has open (a SNAP in
    /// progress survives the removal of its file, as an open file does);
    /// gone on a crash.
    pub(crate) retained: Vec<(SnapshotRef, Bytes)>,
    /// A SNAP being received (a temporary file: gone on a crash).
    pub(crate) incoming: Option<(SnapshotRef, Vec<u8>)>,
    /// The persisted epochs.
    pub(crate) epochs: Epochs,
    /// The sync-in-progress marker.
    pub(crate) marker: bool,
    /// Commands issued and not yet complete (not durable): on a crash a
    /// prefix of them survives.
    unsynced: VecDeque<(OpId, StorageCmd)>,
    /// Whether the completion of `unsynced` is scheduled (one completes
    /// everything issued by then: group commit).
    completion_scheduled: bool,
}

/// Snapshot files a simulated reader keeps open after retention removed
/// them (`rzk-wal` storage keeps 4 open).
const OPEN_SNAPSHOTS_MAX: usize = 4;

impl Disk {
    /// The last zxid on the disk (in its log, or its newest snapshot's).
    pub(crate) fn last(&self) -> Zxid {
        self.log
            .last()
            .map(|e| e.zxid)
            .or(self.snapshot.as_ref().map(|s| s.0.zxid))
            .unwrap_or(Zxid::ZERO)
    }

    /// The newest snapshot's zxid: everything at or below it is in it.
    pub(crate) fn base(&self) -> Zxid {
        self.snapshot
            .as_ref()
            .map(|s| s.0.zxid)
            .unwrap_or(Zxid::ZERO)
    }

    /// The bytes of snapshot `r`, if this disk still has them (catalogued or
    /// open).
    pub(crate) fn snapshot_bytes(&self, r: &SnapshotRef) -> Option<Bytes> {
        if r.size_bytes == 0 {
            return Some(Bytes::new());
        }
        self.snapshot
            .iter()
            .chain(self.kept.iter())
            .chain(self.retained.iter())
            .find(|(s, _)| s == r)
            .map(|(_, b)| b.clone())
    }

    /// A reader read snapshot `r`: if retention removed it, it is now the
    /// most recently used of the open files (the last to be closed).
    pub(crate) fn touch_open(&mut self, r: &SnapshotRef) {
        if let Some(i) = self.retained.iter().position(|(s, _)| s == r) {
            let f = self.retained.remove(i);
            self.retained.push(f);
        }
    }

    fn close_removed(&mut self, removed: (SnapshotRef, Bytes)) {
        self.retained.push(removed);
        if self.retained.len() > OPEN_SNAPSHOTS_MAX {
            self.retained.remove(0);
        }
    }

    /// A snapshot of this peer's own state is saved: it becomes the newest,
    /// retention keeps `retain` snapshots and purges the log up to the
    /// oldest of them, or up to `hold_after` if lower (a sync in progress
    /// still reads the log after it). Returns where the log starts now.
    pub(crate) fn save_snapshot(
        &mut self,
        r: SnapshotRef,
        data: Bytes,
        retain: usize,
        hold_after: Option<Zxid>,
    ) -> Zxid {
        if let Some(old) = self.snapshot.replace((r, data)) {
            self.kept.push(old);
        }
        while self.kept.len() + 1 > retain.max(1) {
            let removed = self.kept.remove(0);
            self.close_removed(removed);
        }
        let oldest = self.kept.first().map_or(r.zxid, |(s, _)| s.zxid);
        let purge_to = hold_after.map_or(oldest, |h| h.min(oldest));
        self.log_start = self.log_start.max(purge_to);
        let start = self.log_start;
        self.log.retain(|e| e.zxid > start);
        start
    }

    /// A received snapshot is installed: the log starts after it, and the
    /// older snapshots leave the catalog (open ones stay readable).
    pub(crate) fn install_snapshot(&mut self, r: SnapshotRef, data: Bytes) {
        let old: Vec<_> = self.kept.drain(..).chain(self.snapshot.take()).collect();
        for removed in old {
            self.close_removed(removed);
        }
        self.snapshot = Some((r, data));
        self.log.clear();
        self.log_start = r.zxid;
    }

    /// Whether the disk holds `zxid` (in its log, or inside its snapshot).
    pub(crate) fn holds(&self, zxid: Zxid, id: u64) -> bool {
        if zxid <= self.base() {
            return true;
        }
        match self.log.binary_search_by(|e| e.zxid.cmp(&zxid)) {
            Ok(i) => payload_id(&self.log[i]) == id,
            Err(_) => false,
        }
    }

    /// Issues `cmd`. Returns whether the caller must schedule a completion
    /// (none is scheduled yet; the one that is completes this command too).
    pub(crate) fn issue(&mut self, op: OpId, cmd: StorageCmd) -> bool {
        self.unsynced.push_back((op, cmd));
        !std::mem::replace(&mut self.completion_scheduled, true)
    }

    /// The scheduled completion is here: every command issued so far is to
    /// be made durable, in order.
    pub(crate) fn take_unsynced(&mut self) -> Vec<(OpId, StorageCmd)> {
        self.completion_scheduled = false;
        self.unsynced.drain(..).collect()
    }

    /// A crash (a kill -9, a power loss): a random prefix of the commands not
    /// yet complete survives, the last surviving append possibly torn. The
    /// caller executes the survivors ([`Disk::execute`]).
    pub(crate) fn crash<R: Rng>(&mut self, rng: &mut R) -> CrashRemains {
        let cmds: Vec<StorageCmd> = self.unsynced.drain(..).map(|(_, c)| c).collect();
        let survive = rng.random_range(0..=cmds.len());
        let torn = rng.random_range(0..4);
        let issued = cmds.len();
        CrashRemains {
            issued,
            survivors: cmds.into_iter().take(survive).collect(),
            torn,
        }
    }

    /// The process starts again: temporary files and open descriptors are
    /// gone with the old one, and nothing is in progress.
    pub(crate) fn restart(&mut self) {
        self.unsynced.clear();
        self.completion_scheduled = false;
        self.incoming = None;
        self.retained.clear();
    }

    /// Executes a command of peer `id`, checking the disk-level properties;
    /// `false` if storage refuses it (a received snapshot that does not
    /// verify: nothing changes). `keep` limits how many entries of an append
    /// reach the disk (a torn write).
    pub(crate) fn execute(
        &mut self,
        id: PeerId,
        cmd: StorageCmd,
        keep: usize,
        checker: &mut Checker,
    ) -> Result<bool, Violation> {
        match cmd {
            StorageCmd::Append(entries) => self.append(id, entries, keep, checker)?,
            StorageCmd::TruncateAfter(z) => self.truncate_after(id, z, checker)?,
            StorageCmd::ReceiveSnapshot(r) => self.incoming = Some((r, Vec::new())),
            StorageCmd::SnapshotChunk { offset, data } => match self.incoming.as_mut() {
                Some((_, buf)) if offset == buf.len() as u64 => buf.extend_from_slice(&data),
                _ => return Ok(false),
            },
            StorageCmd::AbortSnapshot => self.incoming = None,
            StorageCmd::InstallSnapshot(r) => return self.install_received(id, r),
            StorageCmd::SaveEpochs(ep) => self.save_epochs(id, ep)?,
            StorageCmd::BeginSync { .. } => self.marker = true,
            StorageCmd::EndSync => self.marker = false,
        }
        Ok(true)
    }

    fn append(
        &mut self,
        id: PeerId,
        entries: Vec<Entry>,
        keep: usize,
        checker: &mut Checker,
    ) -> Result<(), Violation> {
        for e in entries.into_iter().take(keep) {
            if !e.zxid.is_next(self.last()) {
                return Err(violation(
                    "LogContiguity",
                    format!("{id:?} appended {} after {}: zxids must strictly increase without gaps (I3)", e.zxid, self.last()),
                ));
            }
            if e.zxid.epoch() > self.epochs.accepted {
                return Err(violation(
                    "EpochFence",
                    format!(
                        "{id:?} wrote {} with acceptedEpoch {}",
                        e.zxid, self.epochs.accepted
                    ),
                ));
            }
            checker.on_write(id, e.zxid, payload_id(&e))?;
            self.log.push(e);
        }
        Ok(())
    }

    fn truncate_after(&mut self, id: PeerId, z: Zxid, checker: &Checker) -> Result<(), Violation> {
        for e in self.log.iter().filter(|e| e.zxid > z) {
            if checker.acked.get(&e.zxid) == Some(&payload_id(e)) {
                return Err(violation(
                    "CommittedLogDurability",
                    format!("{id:?} truncated acknowledged {}", e.zxid),
                ));
            }
        }
        self.log.retain(|e| e.zxid <= z);
        Ok(())
    }

    /// Installs the received snapshot `r` if the file verifies.
    fn install_received(&mut self, id: PeerId, r: SnapshotRef) -> Result<bool, Violation> {
        let zxid = r.zxid;
        let data = match self.incoming.take() {
            Some((s, buf)) if s == r => buf,
            _ if r.size_bytes == 0 => Vec::new(),
            _ => return Ok(false),
        };
        if data.len() as u64 != r.size_bytes || checksum(&data) != r.crc {
            return Ok(false);
        }
        if zxid.epoch() > self.epochs.accepted {
            return Err(violation(
                "EpochFence",
                format!(
                    "{id:?} installed a snapshot at {zxid} with acceptedEpoch {}",
                    self.epochs.accepted
                ),
            ));
        }
        self.install_snapshot(r, Bytes::from(data));
        Ok(true)
    }

    fn save_epochs(&mut self, id: PeerId, ep: Epochs) -> Result<(), Violation> {
        let old = self.epochs;
        if ep.accepted < old.accepted || ep.current < old.current || ep.current > ep.accepted {
            return Err(violation(
                "EpochMonotonicity",
                format!("{id:?} epochs {old:?} -> {ep:?}"),
            ));
        }
        self.epochs = ep;
        Ok(())
    }

    /// A [`ReadCmd::Log`](rzk_quorum::core::ReadCmd::Log): the durable
    /// entries after `after`, bounded like the driver's. A zxid the disk no
    /// longer holds (purged by a snapshot) is an error, as in `rzk-wal`.
    pub(crate) fn read_log(
        &self,
        after: Zxid,
        entries_max: usize,
        bytes_max: usize,
    ) -> Result<Vec<Entry>, String> {
        if after < self.log_start {
            return Err(format!(
                "{after} is purged (the log starts at {})",
                self.log_start
            ));
        }
        let from = self.log.partition_point(|e| e.zxid <= after);
        let (mut out, mut bytes) = (Vec::new(), 0usize);
        for e in &self.log[from..] {
            if out.len() >= entries_max || (!out.is_empty() && bytes >= bytes_max) {
                break;
            }
            bytes += e.payload.len();
            out.push(e.clone());
        }
        Ok(out)
    }

    /// A [`ReadCmd::SnapshotChunk`](rzk_quorum::core::ReadCmd::SnapshotChunk):
    /// up to `len` bytes of snapshot `r`'s file from `offset`, while the disk
    /// still has it (catalogued or open).
    pub(crate) fn read_snapshot_chunk(
        &mut self,
        r: &SnapshotRef,
        offset: u64,
        len: usize,
    ) -> Result<Bytes, String> {
        let Some(b) = self.snapshot_bytes(r) else {
            return Err(format!("snapshot {} is gone", r.zxid));
        };
        self.touch_open(r);
        let start = (offset as usize).min(b.len());
        let end = (start + len).min(b.len());
        Ok(b.slice(start..end))
    }
}

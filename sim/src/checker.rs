//! The safety checker: ZAB's properties by their specification names
//! (zab-protocol.md §8), checked as the simulation runs.

use std::collections::BTreeMap;

use rzk_quorum::core::{Epochs, SnapshotRef};
use rzk_quorum::message::Entry;
use rzk_quorum::PeerId;
use rzk_zxid::{Epoch, Zxid};

/// A violated property: its name and what happened.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    /// The property's name (PrefixConsistency, Integrity, ...).
    pub property: &'static str,
    /// What was seen.
    pub detail: String,
}

pub(crate) fn violation(property: &'static str, detail: String) -> Violation {
    Violation { property, detail }
}

/// Decodes the 8-byte payload id every simulated transaction carries.
pub(crate) fn payload_id(e: &Entry) -> u64 {
    payload_id_of(&e.payload)
}

/// The id of a payload: the 8-byte id the quorum simulation's clients
/// propose, or (a server's txn, any other length) a hash of the whole
/// payload with the top bit set, so the two never meet.
pub(crate) fn payload_id_of(payload: &[u8]) -> u64 {
    if payload.len() == 8 {
        return u64::from_le_bytes(payload.try_into().expect("8 bytes"));
    }
    let h = payload.iter().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3)
    });
    h | (1 << 63)
}

/// The global records the properties are checked against.
#[derive(Default)]
pub(crate) struct Checker {
    /// Every proposal a leader made: zxid → [(payload id, leader)]. A zxid of an
    /// epoch after an uncommitted rollover proposal may be proposed by two
    /// leaders (§6.2: the old leader's were never written); uniqueness is
    /// required of what reaches a disk (`written`).
    broadcast: BTreeMap<Zxid, Vec<(u64, PeerId)>>,
    /// Every txn ever written to any disk: zxid → payload id.
    pub(crate) written: BTreeMap<Zxid, u64>,
    /// The longest delivered sequence; every peer's delivered sequence must be a
    /// prefix of it.
    pub(crate) global: Vec<(Zxid, u64)>,
    /// Established leader of each epoch.
    leaders: BTreeMap<Epoch, PeerId>,
    /// Acknowledged (committed, applied on the proposing leader) transactions.
    pub(crate) acked: BTreeMap<Zxid, u64>,
    pub(crate) acked_max: Zxid,
}

impl Checker {
    /// A leader proposed `zxid` with payload `id`.
    pub(crate) fn on_broadcast(
        &mut self,
        leader: PeerId,
        zxid: Zxid,
        id: u64,
        leader_delivered: Option<usize>,
    ) -> Result<(), Violation> {
        let entry = self.broadcast.entry(zxid).or_default();
        entry.push((id, leader));
        // PrimaryIntegrity: every transaction anyone delivered with an epoch below
        // this proposal's is in the leader's delivered prefix.
        let Some(leader_delivered) = leader_delivered else {
            return Ok(());
        };
        let below = self
            .global
            .partition_point(|(z, _)| z.epoch() < zxid.epoch());
        if leader_delivered < below {
            return Err(violation(
                "PrimaryIntegrity",
                format!(
                    "{leader:?} broadcast {zxid} having delivered {leader_delivered} txns, \
                     but {below} txns of earlier epochs were delivered"
                ),
            ));
        }
        Ok(())
    }

    /// `peer` became the established leader of `epoch`.
    pub(crate) fn on_established(&mut self, peer: PeerId, epoch: Epoch) -> Result<(), Violation> {
        match self.leaders.get(&epoch) {
            Some(p) if *p != peer => Err(violation(
                "Leadership",
                format!("epoch {epoch} established by {p:?} and by {peer:?}"),
            )),
            _ => {
                self.leaders.insert(epoch, peer);
                Ok(())
            }
        }
    }

    /// `peer` delivers `e` as its `index`-th transaction, after `prev`.
    pub(crate) fn on_deliver(
        &mut self,
        peer: PeerId,
        index: usize,
        prev: Zxid,
        zxid: Zxid,
        id: u64,
    ) -> Result<(), Violation> {
        // GlobalPrimaryOrder / TotalOrder: zxids strictly increase in delivery.
        if zxid <= prev {
            return Err(violation(
                "GlobalPrimaryOrder",
                format!("{peer:?} delivered {zxid} after {prev}"),
            ));
        }
        // LocalPrimaryOrder: within an epoch nothing the primary broadcast in
        // between is skipped (the counter goes up by one; a new epoch starts at 1).
        if !zxid.is_next(prev) {
            return Err(violation(
                "LocalPrimaryOrder",
                format!("{peer:?} delivered {zxid} right after {prev}: a gap"),
            ));
        }
        // Integrity: delivered only what some primary broadcast.
        match self.broadcast.get(&zxid) {
            Some(b) if b.iter().any(|(x, _)| *x == id) => {}
            other => {
                return Err(violation(
                    "Integrity",
                    format!("{peer:?} delivered {zxid}={id}, broadcast was {other:?}"),
                ))
            }
        }
        // PrefixConsistency / Agreement: every delivered sequence is a prefix of
        // one global sequence.
        if index < self.global.len() {
            let (gz, gid) = self.global[index];
            if (gz, gid) != (zxid, id) {
                return Err(violation(
                    "PrefixConsistency",
                    format!(
                        "{peer:?} delivered {zxid}={id} at position {index}, others delivered {gz}={gid}"
                    ),
                ));
            }
        } else if index == self.global.len() {
            self.global.push((zxid, id));
        } else {
            return Err(violation(
                "Agreement",
                format!(
                    "{peer:?} delivered position {index} beyond {}",
                    self.global.len()
                ),
            ));
        }
        Ok(())
    }

    /// A peer installed a state that is the delivered sequence `seq`.
    pub(crate) fn on_snapshot(&self, peer: PeerId, seq: &[(Zxid, u64)]) -> Result<(), Violation> {
        if seq.len() > self.global.len() || self.global[..seq.len()] != *seq {
            return Err(violation(
                "PrefixConsistency",
                format!(
                    "{peer:?} installed a snapshot of {} txns (last {:?}) that is not a prefix of the delivered history",
                    seq.len(),
                    seq.last()
                ),
            ));
        }
        Ok(())
    }

    /// A txn reaches a disk: no two different txns with one zxid, anywhere.
    pub(crate) fn on_write(&mut self, peer: PeerId, zxid: Zxid, id: u64) -> Result<(), Violation> {
        match self.written.get(&zxid) {
            Some(old) if *old != id => Err(violation(
                "ZxidUniqueness",
                format!("{peer:?} wrote {zxid}={id}, another disk holds {zxid}={old}"),
            )),
            Some(_) => Ok(()),
            None => {
                self.written.insert(zxid, id);
                Ok(())
            }
        }
    }

    /// A leader acknowledged `zxid` to its client.
    pub(crate) fn on_ack(&mut self, zxid: Zxid, id: u64) {
        self.acked.insert(zxid, id);
        self.acked_max = self.acked_max.max(zxid);
    }
}

/// A simulated disk: only what storage confirmed (completed commands), plus
/// what survives a crash. Snapshots are kept as `rzk-wal` keeps them: the
/// newest `retain` in the catalog, and the log after the oldest of those.
#[derive(Clone, Debug, Default)]
pub(crate) struct Disk {
    /// The durable log: the entries after `log_start`.
    pub(crate) log: Vec<Entry>,
    /// Where the log starts: the oldest catalogued snapshot's zxid (the
    /// purge point storage reports with `Input::SnapshotSaved`).
    pub(crate) log_start: Zxid,
    /// The newest snapshot and its "file" (the encoded state machine).
    pub(crate) snapshot: Option<(SnapshotRef, bytes::Bytes)>,
    /// Older snapshots still in the catalog, oldest first (retention keeps
    /// `retain` snapshots in all, the newest included).
    pub(crate) kept: Vec<(SnapshotRef, bytes::Bytes)>,
    /// Snapshots retention removed that a reader still has open (a SNAP in
    /// progress survives the removal of its file, as an open file does);
    /// gone on a crash.
    pub(crate) retained: Vec<(SnapshotRef, bytes::Bytes)>,
    /// A SNAP being received (a temporary file: gone on a crash).
    pub(crate) incoming: Option<(SnapshotRef, Vec<u8>)>,
    pub(crate) epochs: Epochs,
    pub(crate) marker: bool,
}

/// Snapshot files a simulated reader keeps open after retention removed
/// them (`rzk-wal` storage keeps 4 open).
const OPEN_SNAPSHOTS_MAX: usize = 4;

impl Disk {
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
    pub(crate) fn snapshot_bytes(&self, r: &SnapshotRef) -> Option<bytes::Bytes> {
        if r.size_bytes == 0 {
            return Some(bytes::Bytes::new());
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

    fn close_removed(&mut self, removed: (SnapshotRef, bytes::Bytes)) {
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
        data: bytes::Bytes,
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
    pub(crate) fn install_snapshot(&mut self, r: SnapshotRef, data: bytes::Bytes) {
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
}

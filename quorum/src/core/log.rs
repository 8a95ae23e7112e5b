//! The log as a peer holds it: the in-memory window of entries (what it
//! drops stays readable in the durable log, down to where storage purged
//! it), entries held back behind an uncommitted rollover proposal and the
//! epoch fences around it (I3), and handing committed, durable entries to the
//! state machine in order (I2).

use rzk_zxid::{Epoch, Zxid};

use super::{Effect, Output, Peer, SnapshotRef, State, StorageCmd};
use crate::message::Entry;
use crate::PeerId;

/// Figures of the bounded log window.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WindowCounts {
    /// Entries dropped from memory because the window was full.
    pub dropped: u64,
    /// Learner syncs whose DIFF started below the window and was read from
    /// the durable log.
    pub diffs_from_disk: u64,
    /// [`ReadCmd::Log`](super::ReadCmd::Log) reads issued for them.
    pub log_reads: u64,
    /// SNAP transfers that went on past a newer snapshot saved meanwhile
    /// (storage still kept the log after theirs), counted once per snapshot.
    pub snaps_outlived_snapshot: u64,
    /// SNAP transfers that ended by reading their tail (what follows their
    /// snapshot) from the durable log.
    pub snap_tails_from_disk: u64,
    /// SNAP transfers dropped because storage purged their tail.
    pub snaps_purged: u64,
    /// The most log entries held in memory at once (the window, entries
    /// waiting for a rollover to commit, and what one step or one replayed
    /// batch added before the window was trimmed again).
    pub held_max: u64,
}

impl Peer {
    pub(super) fn written_last(&self) -> Zxid {
        self.log.back().map(|e| e.zxid).unwrap_or(self.log_base)
    }

    /// The last zxid received or proposed (written or blocked).
    pub(super) fn stream_last(&self) -> Zxid {
        self.blocked
            .back()
            .map(|e| e.zxid)
            .unwrap_or_else(|| self.written_last())
    }

    /// Emits entries for writing, holding back those of an epoch after an
    /// uncommitted rollover proposal (I3; docs/zab.md, "Rollover without an
    /// election", step 4).
    pub(super) fn write_entries(&mut self, entries: impl IntoIterator<Item = Entry>) {
        self.blocked.extend(entries);
        self.flush_blocked();
    }

    fn flush_blocked(&mut self) {
        let mut batch = Vec::new();
        while let Some(front) = self.blocked.front() {
            if let Some(g) = self.gate {
                if front.zxid.epoch() > g.epoch() {
                    break;
                }
            }
            let e = self.blocked.pop_front().expect("front exists");
            debug_assert!(e.zxid.is_next(self.written_last()), "log stays contiguous");
            if e.zxid.epoch() > self.written_epochs.accepted {
                // Only the successor of a committed rollover proposal gets here (R
                // may have arrived inside a SNAP snapshot, without its fence). The
                // epoch is persisted before its first entry (EpochFence).
                if !batch.is_empty() {
                    self.issue_append(std::mem::take(&mut batch), false);
                }
                let mut ep = self.written_epochs;
                ep.accepted = e.zxid.epoch();
                ep.accepted_from = Some(self.fence_owner());
                ep.current = ep.current.max(e.zxid.epoch());
                self.save_epochs(ep, None);
            }
            let zxid = e.zxid;
            self.log_bytes += e.payload.len() as u64;
            self.log.push_back(e.clone());
            batch.push(e);
            if zxid.is_last_with(self.cfg.counter_limit) {
                // R ends its own append, and the fence follows it, so "R durable
                // and fenced" is one point in the storage order (docs/zab.md,
                // "Rollover without an election", step 3).
                self.issue_append(std::mem::take(&mut batch), true);
                self.issue_fence(zxid);
                if self.commit_known < zxid {
                    self.gate = Some(zxid);
                }
            }
        }
        if !batch.is_empty() {
            self.issue_append(batch, false);
        }
    }

    fn issue_append(&mut self, entries: Vec<Entry>, ends_with_rollover: bool) {
        let last = entries.last().expect("non-empty append").zxid;
        let ackable = if ends_with_rollover {
            entries.len().checked_sub(2).map(|i| entries[i].zxid)
        } else {
            Some(last)
        };
        self.issue(
            StorageCmd::Append(entries),
            Effect::Append { last, ackable },
        );
    }

    /// The fence of a rollover proposal R (I3): acceptedEpoch := epoch(R)+1 is
    /// persisted right after R, so no ACK covers R before the fence is durable
    /// and a quorum of R's ACKs means a quorum promised the next epoch.
    ///
    /// currentEpoch := epoch(R)+1 is persisted only once R is known committed
    /// (here, if it already is, or in `raise_commit_known`). Deviation from the
    /// ZOOKEEPER-4883 PR, which raises currentEpoch at the fence: if R then never
    /// commits, another leader may legitimately establish epoch(R)+1, and two
    /// different histories would both claim currentEpoch epoch(R)+1, so the vote
    /// and ACKEPOCH order (currentEpoch first) would no longer say which history
    /// is newer. The simulation found this (PrimaryIntegrity).
    fn issue_fence(&mut self, r: Zxid) {
        let Some(next) = r.epoch().next() else {
            // The epoch space is exhausted; there is no epoch to roll to. The
            // leader never proposes past R in that case (see leader::next_zxid).
            return;
        };
        let mut ep = self.written_epochs;
        if ep.accepted < next {
            ep.accepted = next;
            ep.accepted_from = Some(self.fence_owner());
        }
        if self.commit_known >= r {
            ep.current = ep.current.max(next);
        }
        self.save_epochs(ep, Some(r));
    }

    /// R is known committed: the next epoch belongs to R's leader, and this peer
    /// holds that epoch's initial history (everything up to R).
    fn confirm_rollover(&mut self, r: Zxid) {
        let Some(next) = r.epoch().next() else {
            return;
        };
        if self.written_epochs.current >= next {
            return;
        }
        let mut ep = self.written_epochs;
        ep.current = next;
        ep.accepted = ep.accepted.max(next);
        self.save_epochs(ep, None);
    }

    /// A durable snapshot at `zxid` (committed history) holds the initial
    /// history of `zxid`'s epoch: currentEpoch rises to that epoch, never
    /// before the snapshot is durable (this command follows its install).
    pub(super) fn raise_current_to_snapshot(&mut self, zxid: Zxid) {
        let epoch = zxid.epoch();
        if epoch <= self.written_epochs.current {
            return;
        }
        let mut ep = self.written_epochs;
        debug_assert!(
            ep.accepted >= epoch,
            "EpochFence: accepted before the install"
        );
        ep.accepted = ep.accepted.max(epoch);
        ep.current = epoch;
        self.save_epochs(ep, None);
    }

    fn fence_owner(&self) -> PeerId {
        match &self.state {
            State::Following(f) => f.leader,
            State::Leading(_) | State::Looking(_) => self.cfg.id,
        }
    }

    /// The gate is the first rollover proposal in the written log that is not
    /// known committed.
    pub(super) fn recompute_gate(&mut self) {
        let limit = self.cfg.counter_limit;
        let ck = self.commit_known;
        self.gate = self
            .log
            .iter()
            .find(|e| e.zxid > ck && e.zxid.is_last_with(limit))
            .map(|e| e.zxid);
    }

    pub(super) fn raise_commit_known(&mut self, upto: Zxid) {
        if upto <= self.commit_known {
            return;
        }
        self.commit_known = upto;
        if let Some(g) = self.gate {
            if upto >= g {
                self.gate = None;
                self.confirm_rollover(g);
                self.flush_blocked();
            }
        }
    }

    pub(super) fn advance_apply(&mut self) {
        if !self.apply_enabled {
            return;
        }
        let target = self
            .commit_known
            .min(self.durable.last)
            .min(self.written_last());
        self.apply_through(target);
    }

    /// Hands the entries in `(applied, target]` to the state machine: the
    /// caller knows them committed and durable.
    pub(super) fn apply_through(&mut self, target: Zxid) {
        if target <= self.applied {
            return;
        }
        let start = self.log.partition_point(|e| e.zxid <= self.applied);
        let mut entries = Vec::new();
        let mut prev = self.applied;
        for e in self.log.range(start..) {
            if e.zxid > target {
                break;
            }
            assert!(
                e.zxid.is_next(prev),
                "apply order: {} does not follow {}",
                e.zxid,
                prev
            );
            prev = e.zxid;
            entries.push(e.clone());
        }
        if entries.is_empty() {
            return;
        }
        self.applied = prev;
        self.out.push(Output::Apply(entries));
        self.on_applied();
    }

    fn on_applied(&mut self) {
        match &self.state {
            State::Leading(_) => self.leader_check_syncs(),
            State::Following(_) => self.learner_check_syncs(),
            State::Looking(_) => {}
        }
    }

    pub(super) fn on_snapshot_saved(&mut self, snapshot: SnapshotRef, purged_to: Zxid) {
        let zxid = snapshot.zxid;
        // What storage purged is gone whatever this snapshot is (a newer one
        // may be installed and not yet known here).
        self.forget_log_through(purged_to);
        if matches!(self.state, State::Leading(_)) {
            self.leader_drop_snaps_below(self.log_start, zxid);
        }
        if zxid <= self.snapshot.zxid || zxid > self.applied {
            return;
        }
        self.snapshot = snapshot;
        // Keep a bounded window below the snapshot in memory for DIFF; the
        // rest of what the window drops stays readable on disk down to where
        // storage's log starts (the oldest snapshot it retains), so a DIFF
        // from disk or the tail of a SNAP of an older snapshot can still be
        // served from there.
        let below = self.log.partition_point(|e| e.zxid <= zxid);
        let drop = below.saturating_sub(self.cfg.log_retained_below_snapshot_max);
        for _ in 0..drop {
            let e = self.log.pop_front().expect("counted");
            self.log_bytes -= e.payload.len() as u64;
            self.log_base = e.zxid;
            self.note_on_disk(e.zxid);
        }
        self.diff_floor = self.diff_floor.max(zxid.min(self.log_base));
    }

    /// Storage purged its durable log through `zxid`: what the window had
    /// dropped from memory at or below it is forgotten, so no DIFF plan and
    /// no SNAP tail counts on it any more.
    fn forget_log_through(&mut self, zxid: Zxid) {
        self.storage_start = self.storage_start.max(zxid);
        if zxid <= self.log_start {
            return;
        }
        while let Some(&(first, last)) = self.disk_segs.front() {
            if last <= zxid {
                self.disk_segs.pop_front();
                self.log_start = last;
                continue;
            }
            if first <= zxid {
                // A segment lies in one epoch, so `zxid + 1` is its next.
                self.disk_segs[0].0 = Zxid::from_u64(zxid.as_u64() + 1);
                self.log_start = zxid;
            }
            break;
        }
        if self.disk_segs.is_empty() {
            // Only memory is left: the available log starts at its base (or
            // where storage's starts, if that is above it: entries still in
            // memory stay usable, the window only forgets what it drops).
            self.log_start = self.log_base;
        }
    }

    /// Records that `zxid`, just dropped from memory (so applied and
    /// durable), is on disk, unless storage already purged it: then it is
    /// forgotten, and the available log starts after it.
    fn note_on_disk(&mut self, zxid: Zxid) {
        if zxid <= self.storage_start {
            // Nothing older is known: the purge point passed it too.
            debug_assert!(self.disk_segs.is_empty(), "segments below a purge");
            self.disk_segs.clear();
            self.log_start = zxid;
            return;
        }
        match self.disk_segs.back_mut() {
            Some((_, last)) if zxid.is_next(*last) && zxid.epoch() == last.epoch() => {
                *last = zxid;
            }
            _ => self.disk_segs.push_back((zxid, zxid)),
        }
    }

    /// Drops the oldest entries from memory while the window is over its bound
    /// and they are applied (so committed and durable). They stay in the durable
    /// log: `disk_segs` remembers which zxids they were, and a learner that
    /// needs them gets them read from storage.
    pub(super) fn trim_window(&mut self) {
        let (entries_max, bytes_max) = (
            self.cfg.log_window_entries_max,
            self.cfg.log_window_bytes_max,
        );
        // The log grows only inside a step or a replayed batch, and this runs
        // at the end of each: so this is the most it ever held.
        let held = (self.log.len() + self.blocked.len()) as u64;
        self.window_counts.held_max = self.window_counts.held_max.max(held);
        while self.log.len() > entries_max || self.log_bytes > bytes_max {
            let Some(front) = self.log.front() else {
                return;
            };
            // Never what is not applied: uncommitted entries may still be cut
            // by a TRUNC, and not-yet-durable ones cannot be read back.
            if front.zxid > self.applied || front.zxid > self.durable.last {
                return;
            }
            // A SNAP transfer in progress needs no hold here: the tail after
            // its snapshot stays readable on disk until storage purges it
            // (`Input::SnapshotSaved::log_start`), and is read from there.
            let e = self.log.pop_front().expect("front exists");
            self.log_bytes -= e.payload.len() as u64;
            self.note_on_disk(e.zxid);
            self.log_base = e.zxid;
            self.window_counts.dropped += 1;
        }
    }

    /// Whether the log holds `z` (in memory or on disk), or `z` is where the
    /// available log starts.
    pub(super) fn log_has(&self, z: Zxid) -> bool {
        if z == self.log_start || z == self.log_base {
            return true;
        }
        if z > self.log_base {
            return self.log.binary_search_by(|e| e.zxid.cmp(&z)).is_ok();
        }
        self.disk_segs
            .iter()
            .any(|(first, last)| first.epoch() == z.epoch() && *first <= z && z <= *last)
    }

    /// The last zxid of `epoch` in the available log, if the log shows it (its
    /// start counts).
    pub(super) fn log_epoch_end(&self, epoch: Epoch) -> Option<Zxid> {
        let idx = self.log.partition_point(|e| e.zxid.epoch() <= epoch);
        if idx > 0 {
            let z = self.log[idx - 1].zxid;
            return (z.epoch() == epoch).then_some(z);
        }
        if let Some(&(_, last)) = self
            .disk_segs
            .iter()
            .rev()
            .find(|(f, _)| f.epoch() <= epoch)
        {
            return (last.epoch() == epoch).then_some(last);
        }
        (self.log_start.epoch() == epoch).then_some(self.log_start)
    }
}

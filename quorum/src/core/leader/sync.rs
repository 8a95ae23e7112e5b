//! Synchronisation: the leader chooses DIFF, TRUNC or SNAP for each learner
//! that acknowledged the epoch, sends what the learner lacks and NEWLEADER,
//! and is established once a quorum of voters acknowledged NEWLEADER. A
//! learner that joins later is synchronised the same way and then told
//! UPTODATE.

use std::collections::BTreeMap;

use rzk_zxid::{Epoch, Zxid};

use super::{HPhase, Phase, SnapSend};
use crate::core::{Output, Peer, Refusal};
use crate::message::{Entry, SessionMsg};
use crate::{PeerId, Role};

impl Peer {
    pub(super) fn leader_enter_syncing(&mut self) {
        let me = self.cfg.id;
        let l = self.ld();
        l.phase = Phase::Syncing;
        l.newleader_acks.insert(me);
        let acked: Vec<PeerId> = l
            .learners
            .iter()
            .filter(|(_, h)| h.phase == HPhase::EpochAcked)
            .map(|(id, _)| *id)
            .collect();
        for id in acked {
            self.leader_sync_learner(id);
        }
        self.leader_check_newleader_quorum();
    }

    /// Chooses DIFF, TRUNC (+DIFF) or SNAP for a learner whose last durable zxid
    /// is `peer_last` and whose log's epochs end at `epoch_ends`, and the zxid
    /// after which proposals must be sent.
    ///
    /// Two histories agree up to the end of the shorter of their segments of
    /// the newest epoch they share: each epoch's proposals come from its one
    /// leader, in order, after that leader's initial history. So the leader
    /// walks the learner's epochs from the newest, finds the first one its
    /// window also holds, and cuts the learner back to where that epoch's two
    /// segments stop agreeing. SNAP is used only when that point lies below the
    /// window, which means the learner's entries past it are uncommitted and the
    /// snapshot (newer than that point) loses nothing committed.
    pub(super) fn sync_plan(&self, peer_last: Zxid, epoch_ends: &[Zxid]) -> (SessionMsg, Zxid) {
        let last = self.written_last();
        // The window here is the available log above `diff_floor`: in memory,
        // and below it the durable log, which a DIFF reads
        // (`leader_sync_from`). Older entries storage still keeps (for the
        // SNAP transfers of older snapshots) are not offered: a learner that
        // far behind gets the newest snapshot, as before.
        let floor = self.diff_floor.max(self.log_start);
        if peer_last == last || (peer_last >= floor && self.log_has(peer_last)) {
            return (SessionMsg::Diff { leader_last: last }, peer_last);
        }
        for end in epoch_ends {
            if *end < floor {
                break;
            }
            let Some(lend) = self.log_epoch_end(end.epoch()) else {
                continue;
            };
            let q = (*end).min(lend);
            if q >= floor && self.log_has(q) {
                return (SessionMsg::Trunc { to: q }, q);
            }
        }
        let s = self.snapshot;
        let snap = SessionMsg::Snap {
            zxid: s.zxid,
            size_bytes: s.size_bytes,
            crc: s.crc,
        };
        (snap, s.zxid)
    }

    /// Starts a learner's synchronisation: DIFF or TRUNC with what follows at
    /// once; SNAP first streams the snapshot file (`leader_snap_pump`), and the
    /// rest follows its last chunk.
    pub(super) fn leader_sync_learner(&mut self, id: PeerId) {
        let Some(h) = self.ld_ref().learners.get(&id) else {
            return;
        };
        let ends = h.peer_epoch_ends.clone();
        let observer = h.observer;
        let (mut mode, mut after) = self.sync_plan(h.peer_last, &ends);
        let commit = self.ld_ref().commit;
        if observer && after > commit && !matches!(mode, SessionMsg::Snap { .. }) {
            // An observer is sent committed history only; a log past the commit
            // point (written when it was configured as a voter) is cut back.
            mode = SessionMsg::Trunc { to: commit };
            after = commit;
        }
        if let Some(h) = self.ld().learners.get_mut(&id) {
            h.synced_from = after;
        }
        let snapshot = self.snapshot;
        let streams = matches!(mode, SessionMsg::Snap { .. }) && snapshot.size_bytes > 0;
        self.send_learner(id, mode);
        if !streams {
            self.leader_sync_from(id, after);
            return;
        }
        if let Some(h) = self.ld().learners.get_mut(&id) {
            h.phase = HPhase::SnapSending;
            h.snap = Some(SnapSend {
                snapshot,
                read: 0,
                sent: 0,
                acked: 0,
                ready: BTreeMap::new(),
            });
        }
        self.leader_snap_pump(id);
    }

    /// Sends a learner the entries after `after`: those the window dropped
    /// from memory are read from the durable log first, one bounded read at a
    /// time (`leader_on_diff_read`), then the rest in one step
    /// (`leader_sync_tail`). Until then the learner is in
    /// [`HPhase::DiffReading`] and gets no live proposals: the tail that ends
    /// the sync carries them, as after a SNAP.
    pub(super) fn leader_sync_from(&mut self, id: PeerId, after: Zxid) {
        if after >= self.log_base {
            self.leader_sync_tail(id, after);
            return;
        }
        let Some(h) = self.ld().learners.get_mut(&id) else {
            return;
        };
        h.phase = HPhase::DiffReading;
        h.diff_sent = after;
        self.window_counts.diffs_from_disk += 1;
        self.leader_diff_read_next(id);
    }

    /// Sends a learner the entries after `after`, what it may treat as
    /// committed, and NEWLEADER. Built in one step from the leader's log *and*
    /// its unwritten proposals, so no proposal can fall between the sync data
    /// and the live stream (I4).
    pub(super) fn leader_sync_tail(&mut self, id: PeerId, after: Zxid) {
        let Some(h) = self.ld_ref().learners.get(&id) else {
            return;
        };
        let offered = h.offered;
        // An observer's sync stops at the commit point: what follows reaches it
        // as INFORM once committed, so it never holds a proposal that may be
        // cut (it has no ACK that counts, and no TRUNC after UPTODATE).
        let end = if h.observer {
            self.ld_ref().commit
        } else {
            Zxid::from_u64(u64::MAX)
        };
        let entries: Vec<Entry> = self
            .log
            .iter()
            .chain(self.blocked.iter())
            .filter(|e| e.zxid > after && e.zxid <= end)
            .cloned()
            .collect();
        for chunk in entries.chunks(self.cfg.batch_entries_max.max(1)) {
            self.send_learner(
                id,
                SessionMsg::Proposal {
                    entries: chunk.to_vec(),
                },
            );
        }
        // What the learner may treat as committed: everything before the last
        // epoch segment of our log (that epoch's leader was established before it
        // proposed anything, so what precedes it is committed), and our commit
        // point once established. Without it a learner would hold back, behind an
        // old rollover proposal's gate, entries its NEWLEADER ACK must cover.
        let upto = self
            .known_committed_prefix()
            .max(self.ld_ref().commit)
            .min(end);
        if upto > Zxid::ZERO {
            self.send_learner(id, SessionMsg::Commit { upto });
        }
        self.send_learner(id, SessionMsg::NewLeader { epoch: offered });
        if let Some(h) = self.ld().learners.get_mut(&id) {
            h.phase = HPhase::Synced;
        }
    }

    /// The last zxid before the last epoch segment of the written log (the
    /// window's base at least: what it dropped is applied).
    pub(super) fn known_committed_prefix(&self) -> Zxid {
        let Some(last) = self.log.back() else {
            return self.log_base;
        };
        let epoch = last.zxid.epoch();
        let idx = self.log.partition_point(|e| e.zxid.epoch() < epoch);
        if idx == 0 {
            self.log_base
        } else {
            self.log[idx - 1].zxid
        }
    }

    pub(super) fn leader_on_ack_newleader(&mut self, from: PeerId, epoch: Epoch) {
        let voter = self.is_voter(from);
        let l = self.ld();
        let Some(h) = l.learners.get_mut(&from) else {
            return;
        };
        // Matched by epoch, not by position (ZOOKEEPER-4685).
        if h.phase != HPhase::Synced || epoch != h.offered {
            let why = if epoch != h.offered {
                Refusal::WrongEpoch {
                    epoch,
                    expected: h.offered,
                }
            } else {
                Refusal::Unexpected
            };
            self.refuse_learner(from, "ACKNEWLEADER", why);
            return;
        }
        h.phase = HPhase::NewLeaderAcked;
        match l.phase {
            Phase::Syncing => {
                if voter {
                    l.newleader_acks.insert(from);
                }
                self.leader_check_newleader_quorum();
            }
            Phase::Broadcast => {
                let committed = l.commit;
                if let Some(h) = l.learners.get_mut(&from) {
                    h.phase = HPhase::UpToDate;
                }
                self.send_learner(from, SessionMsg::UpToDate { committed });
            }
            Phase::Discovery
            | Phase::EpochPersisting
            | Phase::AckEpochs
            | Phase::CurrentPersisting => {
                self.refuse_learner(from, "ACKNEWLEADER", Refusal::Unexpected)
            }
        }
    }

    pub(super) fn leader_check_newleader_quorum(&mut self) {
        let quorum = self.cfg.quorum();
        let l = self.ld_ref();
        if l.phase != Phase::Syncing || l.newleader_acks.len() < quorum {
            return;
        }
        self.leader_establish();
    }

    /// A quorum holds the leader's initial history durably: it is committed.
    pub(super) fn leader_establish(&mut self) {
        assert!(
            self.storage_idle(),
            "nothing is written between discovery and establishment"
        );
        let last = self.written_last();
        let l = self.ld();
        let epoch = l.epoch;
        l.phase = Phase::Broadcast;
        l.established = Some(epoch);
        l.commit = last;
        l.last_proposed = last;
        l.vote.peer_epoch = epoch;
        let ready: Vec<PeerId> = l
            .learners
            .iter()
            .filter(|(_, h)| h.phase == HPhase::NewLeaderAcked)
            .map(|(id, _)| *id)
            .collect();
        for id in ready {
            if let Some(h) = self.ld().learners.get_mut(&id) {
                h.phase = HPhase::UpToDate;
            }
            self.send_learner(id, SessionMsg::UpToDate { committed: last });
        }
        let observers: Vec<PeerId> = self
            .ld_ref()
            .learners
            .iter()
            .filter(|(_, h)| h.observer && h.phase == HPhase::Info)
            .map(|(id, _)| *id)
            .collect();
        for id in observers {
            self.leader_send_leader_info(id);
        }
        self.raise_commit_known(last);
        self.apply_enabled = true;
        // The initial history first, then the role: the state machine is
        // current when it learns it may serve (`Committed::Role`).
        self.advance_apply();
        self.out.push(Output::RoleChanged {
            role: Role::Leader,
            leader: Some(self.cfg.id),
            epoch,
        });
    }
}

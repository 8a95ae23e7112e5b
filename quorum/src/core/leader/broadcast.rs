//! Broadcast, once the leader is established: proposals get their zxids
//! and go to the synced voters, ACKs from a quorum commit them in zxid order,
//! observers get what is committed (INFORM) unless an observer master relays
//! it to them, a committed rollover proposal moves the leader to the next
//! epoch (I3), and learners' forwarded messages reach the state machine.

use rzk_zxid::{Next, Zxid};

use super::{HPhase, Phase};
use crate::core::{Output, Peer, Refusal};
use crate::message::{Entry, RejectReason, SessionMsg};
use crate::{PeerId, ReplicateError, Role};

impl Peer {
    /// The zxid for the next proposal, rolling over to the next epoch (counter 1)
    /// when the counter is at its limit.
    pub(super) fn next_zxid(&self) -> Option<Zxid> {
        let l = self.ld_ref();
        let lp = l.last_proposed;
        if lp.epoch() < l.epoch {
            return Some(Zxid::first_of(l.epoch));
        }
        match lp.next_with(self.cfg.counter_limit) {
            Next::Zxid(z) => Some(z),
            Next::Rollover { exhausted } => exhausted.next().map(Zxid::first_of),
        }
    }

    pub(in crate::core) fn leader_propose(&mut self, proposals: Vec<(u64, bytes::Bytes)>) {
        let mut entries = Vec::with_capacity(proposals.len());
        for (id, payload) in proposals {
            if payload.len() > self.cfg.proposal_bytes_max {
                self.out.push(Output::ProposeFailed {
                    id,
                    error: ReplicateError::TooLarge {
                        size_bytes: payload.len(),
                        limit_bytes: self.cfg.proposal_bytes_max,
                    },
                });
                continue;
            }
            let Some(zxid) = self.next_zxid() else {
                self.out.push(Output::ProposeFailed {
                    id,
                    error: ReplicateError::Storage("the epoch space is exhausted".into()),
                });
                continue;
            };
            self.ld().last_proposed = zxid;
            self.out.push(Output::Proposed { id, zxid });
            entries.push(Entry { zxid, payload });
        }
        if entries.is_empty() {
            return;
        }
        self.write_entries(entries.iter().cloned());
        let targets: Vec<PeerId> = self
            .ld_ref()
            .learners
            .iter()
            .filter(|(_, h)| h.phase >= HPhase::Synced && !h.observer)
            .map(|(id, _)| *id)
            .collect();
        for id in targets {
            for chunk in entries.chunks(self.cfg.batch_entries_max.max(1)) {
                self.send_learner(
                    id,
                    SessionMsg::Proposal {
                        entries: chunk.to_vec(),
                    },
                );
            }
        }
    }

    pub(super) fn leader_on_ack(&mut self, from: PeerId, upto: Zxid) {
        let stream_last = self.stream_last();
        let l = self.ld();
        let Some(h) = l.learners.get_mut(&from) else {
            return;
        };
        if h.phase < HPhase::NewLeaderAcked || upto > stream_last {
            let why = if upto > stream_last {
                Refusal::Inconsistent { zxid: upto }
            } else {
                Refusal::Unexpected
            };
            self.refuse_learner(from, "ACK", why);
            return;
        }
        h.acked = h.acked.max(upto);
        self.leader_try_commit();
    }

    /// Commits, strictly in zxid order, the highest zxid a quorum holds durably
    /// (the leader's own durable write counts as its ACK).
    pub(super) fn leader_try_commit(&mut self) {
        let quorum = self.cfg.quorum();
        let own = self.durable.ackable;
        let voters = &self.cfg.voters;
        let l = self.ld_ref();
        if l.phase != Phase::Broadcast {
            return;
        }
        let mut acks: Vec<Zxid> = vec![own.min(l.last_proposed)];
        acks.extend(
            l.learners
                .iter()
                .filter(|(id, h)| voters.contains(id) && h.phase >= HPhase::NewLeaderAcked)
                .map(|(_, h)| h.acked),
        );
        if acks.len() < quorum {
            return;
        }
        acks.sort_unstable_by(|a, b| b.cmp(a));
        let candidate = acks[quorum - 1].min(l.last_proposed);
        if candidate <= l.commit {
            return;
        }
        let old = l.commit;
        self.ld().commit = candidate;
        let targets: Vec<PeerId> = self
            .ld_ref()
            .learners
            .iter()
            .filter(|(_, h)| h.phase >= HPhase::Synced && !h.observer)
            .map(|(id, _)| *id)
            .collect();
        for id in targets {
            self.send_learner(id, SessionMsg::Commit { upto: candidate });
        }
        self.leader_inform_observers(old, candidate);
        self.raise_commit_known(candidate);
        self.advance_apply();
        self.leader_note_rollovers(old, candidate);
        self.leader_check_syncs();
    }

    /// An observer takes its committed stream from an observer master from now
    /// on: no more INFORMs to it in this session. Only an observer that is
    /// synced may say so; anything else ends its session.
    pub(super) fn leader_on_relayed(&mut self, from: PeerId) {
        let ok = self
            .ld_ref()
            .learners
            .get(&from)
            .is_some_and(|h| h.observer && h.phase >= HPhase::Synced);
        if !ok {
            self.refuse_learner(from, "RELAYED", Refusal::Unexpected);
            return;
        }
        if let Some(h) = self.ld().learners.get_mut(&from) {
            h.relayed = true;
        }
    }

    /// Sends every synced observer the transactions committed in `(old, new]`
    /// (INFORM), with `old`, the committed zxid they follow: `Zxid::is_next`
    /// alone cannot see a gap that ends at an epoch boundary. An observer
    /// further behind than `observer_lag_entries_max` is dropped (it syncs
    /// again): it never holds the voters back.
    pub(super) fn leader_inform_observers(&mut self, old: Zxid, new: Zxid) {
        let observers: Vec<(PeerId, Zxid)> = self
            .ld_ref()
            .learners
            .iter()
            .filter(|(_, h)| h.observer && !h.relayed && h.phase >= HPhase::Synced)
            .map(|(id, h)| (*id, h.acked.max(h.synced_from)))
            .collect();
        if observers.is_empty() {
            return;
        }
        let from = self.log.partition_point(|e| e.zxid <= old);
        let entries: Vec<Entry> = self
            .log
            .range(from..)
            .chain(self.blocked.iter())
            .filter(|e| e.zxid > old && e.zxid <= new)
            .cloned()
            .collect();
        debug_assert!(
            entries.first().is_some_and(|e| e.zxid.is_next(old))
                && entries.windows(2).all(|w| w[1].zxid.is_next(w[0].zxid))
                && entries.last().is_some_and(|e| e.zxid == new),
            "I4: INFORM carries every committed transaction in order"
        );
        let upto = self.log.partition_point(|e| e.zxid <= new);
        let lag_max = self.cfg.observer_lag_entries_max;
        for (id, durable) in observers {
            let lag = if durable >= self.log_base {
                upto - self.log.partition_point(|e| e.zxid <= durable)
            } else if durable.epoch() == new.epoch() {
                // Behind the in-memory window: counted from the zxids.
                (new.counter().0 - durable.counter().0) as usize
            } else {
                usize::MAX
            };
            if lag > lag_max {
                self.drop_learner(id, RejectReason::Protocol);
                continue;
            }
            let mut prev = old;
            for chunk in entries.chunks(self.cfg.batch_entries_max.max(1)) {
                let msg = SessionMsg::Inform {
                    prev,
                    entries: chunk.to_vec(),
                };
                prev = chunk.last().expect("non-empty chunk").zxid;
                self.send_learner(id, msg);
            }
        }
    }

    /// A committed rollover proposal moves the leader to the next epoch: a quorum
    /// has persisted acceptedEpoch ≥ that epoch (docs/zab.md, "Rollover without
    /// an election").
    pub(super) fn leader_note_rollovers(&mut self, old: Zxid, new: Zxid) {
        let limit = self.cfg.counter_limit;
        // Only the entries just committed: the window holds up to a snapshot
        // interval of them, and a scan of all of it at every commit was most of
        // a standalone write's cost in the core.
        let from = self.log.partition_point(|e| e.zxid <= old);
        let rolled = self
            .log
            .range(from..)
            .take_while(|e| e.zxid <= new)
            .filter(|e| e.zxid.is_last_with(limit))
            .filter_map(|e| e.zxid.epoch().next())
            .max();
        let Some(epoch) = rolled else {
            return;
        };
        let l = self.ld();
        if l.established.is_some_and(|e| e >= epoch) {
            return;
        }
        l.established = Some(epoch);
        l.vote.peer_epoch = epoch;
        self.out.push(Output::RoleChanged {
            role: Role::Leader,
            leader: Some(self.cfg.id),
            epoch,
        });
    }

    /// A learner's forwarded message reaches the state machine only once the
    /// leader is established and the learner is up to date: it was sent after the
    /// learner's UPTODATE, so anything else is a protocol error.
    pub(super) fn leader_on_forward(&mut self, from: PeerId, payload: bytes::Bytes) {
        let ok = self.ld_ref().phase == Phase::Broadcast
            && self
                .ld_ref()
                .learners
                .get(&from)
                .is_some_and(|h| h.phase == HPhase::UpToDate);
        if !ok {
            self.refuse_learner(from, "FORWARD", Refusal::Unexpected);
            return;
        }
        self.out.push(Output::Forwarded { from, payload });
    }
}

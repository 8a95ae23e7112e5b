//! Discovery: the leader collects FOLLOWERINFO from a quorum of voters,
//! chooses an epoch above every acceptedEpoch among them, persists it,
//! offers it (LEADERINFO) and persists currentEpoch once a quorum
//! acknowledged it (ACKEPOCH). Observers take no part; they are offered the
//! epoch once the leader is established.

use rzk_zxid::{Epoch, Zxid};

use super::{HPhase, Handle, Phase};
use crate::core::{Peer, Refusal};
use crate::message::{LearnerKind, LinkId, Message, RejectReason, SessionMsg};
use crate::PeerId;

impl Peer {
    pub(in crate::core) fn leader_start(&mut self) {
        let (me, accepted) = (self.cfg.id, self.durable.epochs.accepted);
        self.ld().connecting.insert(me, accepted);
        self.leader_check_connect_quorum();
    }

    pub(in crate::core) fn leader_on_follower_info(
        &mut self,
        from: PeerId,
        session: LinkId,
        kind: LearnerKind,
        accepted: Epoch,
    ) {
        if self.cfg.member_kind(from) != Some(kind) {
            // A voter posing as an observer or the reverse: its configuration
            // disagrees with ours, and counting it either way would be wrong.
            self.refuse(from, "FOLLOWERINFO", Refusal::Unexpected);
            let msg = SessionMsg::Reject {
                reason: RejectReason::Protocol,
            };
            self.send(
                from,
                Message::Session {
                    session,
                    seq: 0,
                    msg,
                },
            );
            return;
        }
        // A voter that promised a later epoch (to a leader attempt that failed)
        // can never join this epoch; without a new election it would stay out
        // for good. Step down so the next election picks an epoch above it.
        let voter = self.is_voter(from);
        let l = self.ld_ref();
        if voter && l.phase == Phase::Broadcast && accepted > l.offer() {
            self.go_looking();
            return;
        }
        let now = self.now;
        let l = self.ld();
        l.learners.insert(
            from,
            Handle {
                session,
                seq_out: 0,
                seq_in: 1,
                phase: HPhase::Info,
                offered: Epoch(0),
                peer_last: Zxid::ZERO,
                peer_epoch_ends: Vec::new(),
                acked: Zxid::ZERO,
                last_heard: now,
                pong: 0,
                snap: None,
                diff_sent: Zxid::ZERO,
                observer: kind == LearnerKind::Observer,
                synced_from: Zxid::ZERO,
                relayed: false,
            },
        );
        // A peer that restarted and reconnects must not keep counting towards
        // quorums of its previous session.
        l.epoch_acks.remove(&from);
        l.newleader_acks.remove(&from);
        if kind == LearnerKind::Observer {
            // An observer takes no part in discovery (ZOOKEEPER-2959: its
            // acceptedEpoch never chooses the epoch, its ACKEPOCH never counts).
            // It is offered the epoch once this leader is established, and
            // synchronised from the committed history only.
            if l.phase == Phase::Broadcast {
                self.leader_send_leader_info(from);
            }
            return;
        }
        match l.phase {
            Phase::Discovery => {
                l.connecting.insert(from, accepted);
                self.leader_check_connect_quorum();
            }
            Phase::EpochPersisting => {}
            Phase::AckEpochs | Phase::CurrentPersisting | Phase::Syncing | Phase::Broadcast => {
                self.leader_send_leader_info(from);
            }
        }
    }

    pub(super) fn leader_send_leader_info(&mut self, id: PeerId) {
        let offer = self.ld_ref().offer();
        let established = self.ld_ref().phase == Phase::Broadcast;
        if let Some(h) = self.ld().learners.get_mut(&id) {
            h.offered = offer;
            h.phase = HPhase::EpochSent;
        }
        self.send_learner(
            id,
            SessionMsg::LeaderInfo {
                epoch: offer,
                established,
            },
        );
    }

    pub(super) fn leader_check_connect_quorum(&mut self) {
        let quorum = self.cfg.quorum();
        let voters = self.cfg.voters.clone();
        let l = self.ld_ref();
        if l.phase != Phase::Discovery {
            return;
        }
        let n = l.connecting.keys().filter(|p| voters.contains(p)).count();
        if n < quorum {
            return;
        }
        // Only voters choose the epoch (ZOOKEEPER-2959).
        let max = l
            .connecting
            .iter()
            .filter(|(p, _)| voters.contains(p))
            .map(|(_, e)| *e)
            .max()
            .unwrap_or(Epoch(0));
        let Some(epoch) = max.next() else {
            // The epoch space is exhausted: no leader can ever be elected again.
            // Give up leading; nothing unsafe happens.
            self.go_looking();
            return;
        };
        let l = self.ld();
        l.epoch = epoch;
        l.phase = Phase::EpochPersisting;
        let mut ep = self.written_epochs;
        ep.accepted = epoch;
        ep.accepted_from = Some(self.cfg.id);
        // The leader persists acceptedEpoch before LEADERINFO goes out
        // (docs/zab.md, "When each epoch is written").
        self.save_epochs(ep, None);
    }

    pub(super) fn leader_enter_ack_epochs(&mut self) {
        // I1: the leader's own state summary, like a learner's ACKEPOCH, is what
        // storage holds: nothing is in flight now.
        assert!(self.storage_idle() && self.durable.last == self.written_last());
        let summary = (self.durable.epochs.current, self.durable.last);
        let me = self.cfg.id;
        let l = self.ld();
        l.phase = Phase::AckEpochs;
        l.summary = summary;
        l.epoch_acks.insert(me);
        let waiting: Vec<PeerId> = l
            .learners
            .iter()
            .filter(|(_, h)| h.phase == HPhase::Info && !h.observer)
            .map(|(id, _)| *id)
            .collect();
        for id in waiting {
            self.leader_send_leader_info(id);
        }
        self.leader_check_epoch_ack_quorum();
    }

    pub(super) fn leader_on_ack_epoch(
        &mut self,
        from: PeerId,
        current: Epoch,
        last: Zxid,
        epoch_ends: Vec<Zxid>,
    ) {
        let voter = self.is_voter(from);
        let l = self.ld();
        let Some(h) = l.learners.get_mut(&from) else {
            return;
        };
        if h.phase != HPhase::EpochSent {
            self.refuse_learner(from, "ACKEPOCH", Refusal::Unexpected);
            return;
        }
        // docs/zab.md, "The leader's side": a learner more recent than the
        // leader is refused. It cannot hold a committed transaction the leader
        // lacks (the quorums intersect), but it must not be synchronised from a
        // history shorter than its own claim.
        if l.phase < Phase::Syncing && (current, last) > l.summary {
            self.refuse_learner(from, "ACKEPOCH", Refusal::AheadOfLeader);
            return;
        }
        h.phase = HPhase::EpochAcked;
        h.peer_last = last;
        h.peer_epoch_ends = epoch_ends;
        match l.phase {
            Phase::AckEpochs => {
                if voter {
                    l.epoch_acks.insert(from);
                }
                self.leader_check_epoch_ack_quorum();
            }
            Phase::CurrentPersisting => {}
            Phase::Syncing | Phase::Broadcast => self.leader_sync_learner(from),
            Phase::Discovery | Phase::EpochPersisting => {
                self.refuse_learner(from, "ACKEPOCH", Refusal::Unexpected)
            }
        }
    }

    pub(super) fn leader_check_epoch_ack_quorum(&mut self) {
        let quorum = self.cfg.quorum();
        let l = self.ld_ref();
        if l.phase != Phase::AckEpochs || l.epoch_acks.len() < quorum {
            return;
        }
        let epoch = l.epoch;
        self.ld().phase = Phase::CurrentPersisting;
        let mut ep = self.written_epochs;
        ep.current = ep.current.max(epoch);
        self.save_epochs(ep, None);
    }
}

//! The linearizable sync barrier (I6b): a `sync`, local or from a learner,
//! completes once everything proposed before it is committed and a quorum
//! answered a ping round started after it arrived, so the answer cannot
//! come from a deposed leader.

use super::{HPhase, PendingSync, Phase, SyncOrigin};
use crate::core::{Output, Peer, Refusal};
use crate::message::{LinkId, SessionMsg};
use crate::PeerId;

impl Peer {
    pub(super) fn leader_start_ping_round(&mut self) -> u64 {
        let l = self.ld();
        l.ping_id += 1;
        let id = l.ping_id;
        let targets: Vec<PeerId> = l.learners.keys().copied().collect();
        for t in targets {
            self.send_learner(t, SessionMsg::Ping { id });
        }
        id
    }

    pub(in crate::core) fn leader_local_sync(&mut self, id: u64) {
        let ping = self.leader_start_ping_round();
        let barrier = self.ld_ref().last_proposed;
        self.ld().syncs.push(PendingSync {
            origin: SyncOrigin::Local(id),
            barrier,
            ping,
        });
        self.leader_check_syncs();
    }

    pub(super) fn leader_on_sync_request(&mut self, from: PeerId, session: LinkId, id: u64) {
        let ok = self.ld_ref().phase == Phase::Broadcast
            && self
                .ld_ref()
                .learners
                .get(&from)
                .is_some_and(|h| h.phase == HPhase::UpToDate);
        if !ok {
            self.refuse_learner(from, "SYNCREQ", Refusal::Unexpected);
            return;
        }
        let ping = self.leader_start_ping_round();
        let barrier = self.ld_ref().last_proposed;
        self.ld().syncs.push(PendingSync {
            origin: SyncOrigin::Learner {
                peer: from,
                session,
                id,
            },
            barrier,
            ping,
        });
        self.leader_check_syncs();
    }

    /// Completes the sync barriers whose zxid is committed and whose ping round a
    /// quorum answered (I6b: the answer cannot come from a deposed leader).
    pub(in crate::core) fn leader_check_syncs(&mut self) {
        let quorum = self.cfg.quorum();
        let voters = &self.cfg.voters;
        let applied = self.applied;
        let l = self.ld_ref();
        if l.syncs.is_empty() {
            return;
        }
        let mut done = Vec::new();
        let mut keep = Vec::new();
        for s in &l.syncs {
            let answered = 1 + l
                .learners
                .iter()
                .filter(|(id, h)| {
                    voters.contains(id) && h.phase >= HPhase::NewLeaderAcked && h.pong >= s.ping
                })
                .count();
            let ready = answered >= quorum
                && l.commit >= s.barrier
                && match s.origin {
                    SyncOrigin::Local(_) => applied >= s.barrier,
                    SyncOrigin::Learner { .. } => true,
                };
            if ready {
                done.push(*s);
            } else {
                keep.push(*s);
            }
        }
        self.ld().syncs = keep;
        for s in done {
            match s.origin {
                SyncOrigin::Local(id) => self.out.push(Output::SyncDone {
                    id,
                    zxid: s.barrier,
                }),
                SyncOrigin::Learner { peer, session, id } => {
                    let same = self
                        .ld_ref()
                        .learners
                        .get(&peer)
                        .is_some_and(|h| h.session == session);
                    if same {
                        self.send_learner(
                            peer,
                            SessionMsg::SyncReply {
                                id,
                                zxid: s.barrier,
                            },
                        );
                    }
                }
            }
        }
    }
}

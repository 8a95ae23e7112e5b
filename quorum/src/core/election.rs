//! Fast leader election (docs/zab.md, "Leader election").

use std::collections::BTreeMap;

use rzk_zxid::Epoch;

use super::{leader, learner, Peer, State, Tick};
use crate::message::{
    LearnerKind, LinkId, Message, Notification, PeerState, RejectReason, SessionMsg, Vote,
};
use crate::PeerId;

/// The state of a LOOKING peer.
#[derive(Clone, Debug)]
pub struct Election {
    /// The current proposal.
    pub vote: Vote,
    /// Votes of this round (from LOOKING peers, and same-round FOLLOWING/LEADING).
    recv: BTreeMap<PeerId, Vote>,
    /// Votes of peers that are not looking, any round (how a late peer joins an
    /// established ensemble, ZOOKEEPER-1732).
    out_of_election: BTreeMap<PeerId, (PeerState, Vote)>,
    /// When to re-send notifications.
    next_send: Tick,
    interval: u64,
    /// The end of the finalize wait, once a quorum agrees with `vote`.
    decide_at: Option<Tick>,
    /// FOLLOWERINFOs that arrived while this peer was still deciding (a peer
    /// that decided a moment earlier that this one leads), newest per peer.
    /// Taken up if this peer decides to lead, refused if it decides to follow,
    /// so a learner does not go back to election for having been one message
    /// early.
    parked: BTreeMap<PeerId, (LinkId, LearnerKind, Epoch)>,
}

impl Election {
    pub(crate) fn placeholder() -> Election {
        Election {
            vote: Vote {
                leader: PeerId(0),
                zxid: rzk_zxid::Zxid::ZERO,
                peer_epoch: rzk_zxid::Epoch(0),
            },
            recv: BTreeMap::new(),
            out_of_election: BTreeMap::new(),
            next_send: Tick(0),
            interval: 0,
            decide_at: None,
            parked: BTreeMap::new(),
        }
    }
}

impl Peer {
    /// This peer's own vote. I1: the zxid and epoch are the durable ones.
    pub(super) fn initial_vote(&self) -> Vote {
        let vote = Vote {
            leader: self.cfg.id,
            zxid: self.durable.last,
            peer_epoch: self.durable.epochs.current,
        };
        assert!(
            vote.zxid <= self.durable.last && vote.peer_epoch <= self.durable.epochs.current,
            "I1: a vote claims only durable history"
        );
        vote
    }

    pub(super) fn start_election(&mut self) {
        self.round += 1;
        let vote = self.initial_vote();
        let mut e = Election::placeholder();
        e.vote = vote;
        e.recv.insert(self.cfg.id, vote);
        e.interval = self.cfg.notification_interval_ticks_min;
        e.next_send = self.now.after(e.interval);
        self.state = State::Looking(e);
        self.broadcast_notification();
        self.check_decision();
    }

    fn election(&mut self) -> &mut Election {
        match &mut self.state {
            State::Looking(e) => e,
            _ => unreachable!("election state accessed while not looking"),
        }
    }

    fn broadcast_notification(&mut self) {
        let State::Looking(e) = &self.state else {
            return;
        };
        // An observer asks the voters who leads; its vote counts nowhere.
        let state = if self.cfg.is_observer() {
            PeerState::Observing
        } else {
            PeerState::Looking
        };
        let n = Notification {
            state,
            vote: e.vote,
            round: self.round,
        };
        let peers: Vec<PeerId> = self
            .cfg
            .voters
            .iter()
            .copied()
            .filter(|p| *p != self.cfg.id)
            .collect();
        for p in peers {
            self.send(p, Message::Notification(n.clone()));
        }
    }

    /// The notification this peer answers with when it is not looking.
    fn current_notification(&self) -> Notification {
        match &self.state {
            State::Looking(e) => Notification {
                state: PeerState::Looking,
                vote: e.vote,
                round: self.round,
            },
            // The peerEpoch reported for an established leader is derived from
            // the durable currentEpoch (one source of truth): leader and
            // followers converge on it after a rollover, so a late peer finds a
            // quorum of equal votes (ZOOKEEPER-1732) and never sees more than
            // is durable (I1).
            State::Leading(l) => Notification {
                state: PeerState::Leading,
                vote: Vote {
                    peer_epoch: if l.is_established() {
                        self.durable.epochs.current
                    } else {
                        l.vote.peer_epoch
                    },
                    ..l.vote
                },
                round: self.round,
            },
            State::Following(f) => Notification {
                state: PeerState::Following,
                vote: Vote {
                    peer_epoch: if f.is_up_to_date() {
                        self.durable.epochs.current
                    } else {
                        f.vote.peer_epoch
                    },
                    ..f.vote
                },
                round: self.round,
            },
        }
    }

    pub(super) fn on_notification(&mut self, from: PeerId, n: Notification) {
        if self.cfg.is_observer() {
            self.observer_on_notification(from, n);
            return;
        }
        if !self.is_voter(from) {
            // An observer asks only when it has no leader: a session this
            // leader still holds for it is over.
            self.leader_note_learner_left(from);
            // docs/zab.md, "Observers in elections": an observer asking who
            // leads gets this voter's current vote and state; its notification
            // is never a vote.
            let reply = self.current_notification();
            self.send(from, Message::Notification(reply));
            return;
        }
        if !self.is_voter(n.vote.leader) {
            self.refuse(
                from,
                "NOTIFICATION",
                super::Refusal::UnknownVoter(n.vote.leader),
            );
            return;
        }
        if n.state == PeerState::Looking && self.discovery_lost_to(&n) {
            // A leader still gathering its first quorum hears a voter that is
            // in a later election round, or that holds out for a more recent
            // history: the peers it waits for may never come. Joining the
            // election now beats waiting out `init_limit_ticks` (a split decided at
            // the end of a round, seen in simulation).
            self.go_looking();
        }
        if n.state == PeerState::Looking {
            // A voter that is looking has left any session it had with this
            // leader. Its NEWLEADER ack must not count any more: it may be
            // acknowledging a later epoch's leader already (found in simulation,
            // seed 1001273: a learner that acked NEWLEADER left on a broken
            // stream, led epoch e+1 and committed in it, and its stale ack then
            // established epoch e's leader without those txns; the leader never
            // saw the connection drop, but it got the learner's LOOKING
            // notification). A stale notification overtaking a new session's
            // FOLLOWERINFO only costs that learner a reconnect.
            self.leader_note_learner_left(from);
        }
        if !matches!(self.state, State::Looking(_)) {
            // docs/zab.md, "Answering a looking peer": a peer that is not
            // looking answers a looking one with its current vote, so it can
            // join.
            if n.state == PeerState::Looking {
                let reply = self.current_notification();
                self.send(from, Message::Notification(reply));
            }
            return;
        }
        match n.state {
            PeerState::Looking => self.on_looking_notification(from, n),
            PeerState::Following | PeerState::Leading => self.on_settled_notification(from, n),
            PeerState::Observing => {}
        }
    }

    /// An observer follows the leader a quorum of voters reports as FOLLOWING or
    /// LEADING, once the leader itself confirms it (the `outofelection` rule
    /// with checkLeader: docs/zab.md, "Observers in elections"). It never
    /// answers a notification (the voters answer it; two answering peers would
    /// echo forever) and its own vote is never counted, here or anywhere.
    fn observer_on_notification(&mut self, from: PeerId, n: Notification) {
        if !self.is_voter(from) || !matches!(self.state, State::Looking(_)) {
            return;
        }
        match n.state {
            PeerState::Following | PeerState::Leading => {}
            PeerState::Looking | PeerState::Observing => return,
        }
        if !self.is_voter(n.vote.leader) {
            self.refuse(
                from,
                "NOTIFICATION",
                super::Refusal::UnknownVoter(n.vote.leader),
            );
            return;
        }
        let quorum = self.cfg.quorum();
        let voters = self.cfg.voters.clone();
        let same = |v: &Vote| v.leader == n.vote.leader && v.peer_epoch == n.vote.peer_epoch;
        let e = self.election();
        e.out_of_election.insert(from, (n.state, n.vote));
        let leader_confirms = e
            .out_of_election
            .get(&n.vote.leader)
            .is_some_and(|(st, v)| *st == PeerState::Leading && same(v));
        let agree = e
            .out_of_election
            .iter()
            .filter(|(p, (_, v))| voters.contains(p) && same(v))
            .count();
        if agree >= quorum && leader_confirms {
            self.round = n.round.max(self.round);
            self.decide(n.vote);
        }
    }

    /// On a leader: `from` asks for a leader, so whatever session it had here is
    /// over; it is dropped as if its connection had ended (which may end this
    /// leadership, as a lost connection does).
    fn leader_note_learner_left(&mut self, from: PeerId) {
        if let State::Leading(l) = &self.state {
            if l.has_learner(from) {
                self.leader_on_disconnected(from);
            }
        }
    }

    /// Whether this peer leads, is still in discovery, and `n` (a looking
    /// voter's notification) shows that voter will not follow it.
    fn discovery_lost_to(&self, n: &Notification) -> bool {
        let State::Leading(l) = &self.state else {
            return false;
        };
        let history = |v: &Vote| (v.peer_epoch, v.zxid);
        l.in_discovery()
            && (n.round > self.round
                || (n.round == self.round && history(&n.vote) > history(&l.vote)))
    }

    fn on_looking_notification(&mut self, from: PeerId, mut n: Notification) {
        // A looking peer follows no one: a FOLLOWERINFO it parked here is void.
        self.election().parked.remove(&from);
        let mine = self.initial_vote();
        // I1: a vote for this peer is re-stated from its durable state. Another
        // peer may still carry a vote for us from an earlier incarnation, with a
        // zxid our disk no longer has; adopting it would advertise that history.
        if n.vote.leader == self.cfg.id {
            n.vote = mine;
        }
        // A candidate's own claim about itself replaces any stale vote for it.
        let own_claim = n.vote.leader == from;
        if n.round > self.round {
            self.round = n.round;
            let best = if n.vote.beats(&mine) { n.vote } else { mine };
            let id = self.cfg.id;
            let e = self.election();
            e.recv.clear();
            e.vote = best;
            e.decide_at = None;
            e.recv.insert(id, best);
            self.broadcast_notification();
        } else if n.round < self.round {
            let reply = self.current_notification();
            self.send(from, Message::Notification(reply));
            return;
        } else if n.vote.beats(&self.election().vote)
            || (own_claim && self.election().vote.leader == from && self.election().vote != n.vote)
        {
            let id = self.cfg.id;
            let e = self.election();
            e.vote = n.vote;
            e.decide_at = None;
            e.recv.insert(id, n.vote);
            self.broadcast_notification();
        }
        self.election().recv.insert(from, n.vote);
        self.check_decision();
    }

    fn check_decision(&mut self) {
        // An observer never decides on votes (it has none); it follows what a
        // quorum of voters reports (`observer_on_notification`).
        if self.cfg.is_observer() || self.led_by_parked_quorum() {
            return;
        }
        let quorum = self.cfg.quorum();
        let now = self.now;
        let wait = self.cfg.finalize_wait_ticks;
        let voters = self.cfg.voters.clone();
        let down = self.links_down.clone();
        let e = self.election();
        let agree = e.recv.values().filter(|v| **v == e.vote).count();
        if agree < quorum {
            e.decide_at = None;
            return;
        }
        // The finalize wait gives a better vote time to arrive. When every voter
        // that can still answer has answered with this very vote, none can: the
        // rest are peers whose connection is known to be gone (a leader that
        // just died). Deciding now saves the wait (finalizeWait exists for votes
        // still in flight, and there are none: docs/zab.md, "The election
        // loop").
        let settled = voters
            .iter()
            .all(|p| e.recv.get(p) == Some(&e.vote) || down.contains(p));
        if settled {
            e.decide_at = Some(now);
        } else if e.decide_at.is_none() {
            e.decide_at = Some(now.after(wait));
        }
        if wait == 0 || settled {
            self.try_decide();
        }
    }

    /// Leads at once if a quorum (this peer included) already decided to follow
    /// it (their FOLLOWERINFOs are parked here) and its own durable history is
    /// at least as recent as the one it votes for. Votes can change after
    /// others decided, when a write in flight becomes durable and a server id
    /// breaks the tie the other way; without this, the learners that decided
    /// wait for `init_limit_ticks` (seen in simulation). Safety does not rest on
    /// the vote: discovery refuses a learner ahead of its leader.
    fn led_by_parked_quorum(&mut self) -> bool {
        let quorum = self.cfg.quorum();
        let mine = self.initial_vote();
        let voters = self.cfg.voters.clone();
        let e = self.election();
        let committed = 1 + e.parked.keys().filter(|p| voters.contains(p)).count();
        let history = |v: &Vote| (v.peer_epoch, v.zxid);
        if committed < quorum || history(&mine) < history(&e.vote) {
            return false;
        }
        self.decide(mine);
        true
    }

    /// A session message while looking: only a FOLLOWERINFO can be meant for
    /// this peer (a learner that decided a moment earlier that this peer leads).
    /// It is parked until this peer decides.
    pub(super) fn election_on_session(
        &mut self,
        from: PeerId,
        session: LinkId,
        seq: u64,
        msg: SessionMsg,
    ) {
        let SessionMsg::FollowerInfo {
            kind,
            accepted_epoch,
        } = msg
        else {
            self.refuse_stale(from, session, &msg);
            return;
        };
        if self.cfg.is_observer() {
            // Nobody can have decided that an observer leads.
            self.refuse_stale(from, session, &msg);
            return;
        }
        if seq != 0 {
            self.refuse(
                from,
                "FOLLOWERINFO",
                super::Refusal::OutOfOrder {
                    expected: 0,
                    got: seq,
                },
            );
            return;
        }
        self.election()
            .parked
            .insert(from, (session, kind, accepted_epoch));
        self.check_decision();
    }

    /// A lost connection while looking: that peer's parked FOLLOWERINFO is
    /// void (its learner leaves on the same event), and the decision may no
    /// longer need to wait for its vote.
    pub(super) fn election_on_disconnected(&mut self, peer: PeerId) {
        self.election().parked.remove(&peer);
        self.check_decision();
    }

    fn try_decide(&mut self) {
        let now = self.now;
        let e = self.election();
        match e.decide_at {
            Some(at) if at <= now => {
                let vote = e.vote;
                self.decide(vote);
            }
            _ => {}
        }
    }

    fn on_settled_notification(&mut self, from: PeerId, n: Notification) {
        let quorum = self.cfg.quorum();
        let same = |v: &Vote| v.leader == n.vote.leader && v.peer_epoch == n.vote.peer_epoch;
        let round = self.round;
        let me = self.cfg.id;
        let e = self.election();
        e.out_of_election.insert(from, (n.state, n.vote));
        let leader_confirms = n.vote.leader != me
            && e.out_of_election
                .get(&n.vote.leader)
                .is_some_and(|(st, v)| *st == PeerState::Leading && same(v));
        let history = |v: &Vote| (v.peer_epoch, v.zxid);
        if n.round == round
            && n.state == PeerState::Leading
            && n.vote.leader == from
            && n.vote.leader != me
            && e.vote != n.vote
            && history(&n.vote) >= history(&e.vote)
        {
            // A peer of this round already leads with a history at least as
            // recent as the one this peer votes for: following it is as good
            // (the server id only breaks ties), and holding out would split
            // the round until the leader's `init_limit_ticks` (seen in simulation).
            e.vote = n.vote;
            e.decide_at = None;
            e.recv.insert(me, n.vote);
            self.broadcast_notification();
        }
        let e = self.election();
        if n.round == round {
            e.recv.insert(from, n.vote);
            let agree = e.recv.values().filter(|v| same(v)).count();
            if agree >= quorum && leader_confirms {
                self.decide(n.vote);
                return;
            }
        }
        let agree = e.out_of_election.values().filter(|(_, v)| same(v)).count();
        if agree >= quorum && leader_confirms {
            self.round = n.round.max(self.round);
            self.decide(n.vote);
        }
    }

    /// I1: a truncation or snapshot completing while looking can shorten the
    /// durable log; a vote for this peer must never claim more than it now holds.
    pub(super) fn election_refresh_own_vote(&mut self) {
        let mine = self.initial_vote();
        let id = self.cfg.id;
        let e = self.election();
        if e.vote.leader != id || e.vote == mine {
            return;
        }
        e.vote = mine;
        e.decide_at = None;
        e.recv.insert(id, mine);
        self.broadcast_notification();
        self.check_decision();
    }

    pub(super) fn election_tick(&mut self) {
        self.try_decide();
        if !matches!(self.state, State::Looking(_)) {
            return;
        }
        let now = self.now;
        // An observer keeps asking at the shortest interval: the voters do not
        // tell it when they settle, and its question costs them one reply.
        let max = if self.cfg.is_observer() {
            self.cfg.notification_interval_ticks_min
        } else {
            self.cfg.notification_interval_ticks_max
        };
        let e = self.election();
        if now >= e.next_send {
            e.interval = (e.interval * 2).min(max);
            e.next_send = now.after(e.interval);
            self.broadcast_notification();
        }
    }

    fn decide(&mut self, vote: Vote) {
        let parked = std::mem::take(&mut self.election().parked);
        if vote.leader == self.cfg.id {
            let l = leader::Leader::new(self, vote);
            self.state = State::Leading(Box::new(l));
            self.leader_start();
            for (from, (session, kind, accepted)) in parked {
                if matches!(self.state, State::Leading(_)) {
                    self.leader_on_follower_info(from, session, kind, accepted);
                }
            }
        } else {
            for (from, (session, _, _)) in parked {
                let msg = SessionMsg::Reject {
                    reason: RejectReason::NotLeading,
                };
                self.send(
                    from,
                    Message::Session {
                        session,
                        seq: 0,
                        msg,
                    },
                );
            }
            let f = learner::Learner::new(self, vote);
            self.state = State::Following(Box::new(f));
            self.learner_start();
        }
    }
}

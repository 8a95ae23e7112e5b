//! The leader (ZAB's LEADING state): its state, its view of each learner
//! session, and what holds the phases together: routing a learner's
//! messages, timeouts, and stepping down. The phases have files of their own
//! (docs/zab.md has the protocol):
//!
//! - `discovery`: FOLLOWERINFO, LEADERINFO and ACKEPOCH choose and persist
//!   the new epoch;
//! - `sync`: each learner is synchronised (DIFF, TRUNC or SNAP, then
//!   NEWLEADER), and a quorum of NEWLEADER acknowledgements establishes the
//!   leader;
//! - `transfer`: sync data read from storage and streamed to a learner, a
//!   SNAP's file in chunks and a DIFF below the in-memory window;
//! - `broadcast`: proposals, ACKs and commits, INFORM to observers, forwarded
//!   messages, and the epoch rollover (I3);
//! - `barrier`: the linearizable sync barrier (I6b).

mod barrier;
mod broadcast;
mod discovery;
mod sync;
mod transfer;

use std::collections::{BTreeMap, BTreeSet};

use bytes::Bytes;
use rzk_zxid::{Epoch, Zxid};

use super::{Output, Peer, Refusal, SnapshotRef, State, Tick};
use crate::message::{LinkId, Message, RejectReason, SessionMsg, Vote};
use crate::{PeerId, ReplicateError};

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Phase {
    /// Collecting FOLLOWERINFO from a quorum to choose the epoch.
    Discovery,
    /// acceptedEpoch := new epoch is being persisted.
    EpochPersisting,
    /// LEADERINFO sent; collecting ACKEPOCH from a quorum.
    AckEpochs,
    /// currentEpoch := new epoch is being persisted.
    CurrentPersisting,
    /// Learners are being synchronised; waiting for a quorum of NEWLEADER ACKs.
    Syncing,
    /// Established: broadcasting.
    Broadcast,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum HPhase {
    Info,
    EpochSent,
    EpochAcked,
    /// SNAP: the snapshot file is being streamed; the rest of the sync follows
    /// its last chunk.
    SnapSending,
    /// DIFF below the in-memory window: entries are being read from the
    /// durable log and sent; the rest of the sync follows the last of them.
    DiffReading,
    /// Sync data and NEWLEADER sent; live proposals are forwarded from here on.
    Synced,
    NewLeaderAcked,
    UpToDate,
}

/// The leader's view of one learner session.
#[derive(Clone, Debug)]
struct Handle {
    session: LinkId,
    seq_out: u64,
    seq_in: u64,
    phase: HPhase,
    /// The epoch offered in LEADERINFO (and NEWLEADER).
    offered: Epoch,
    peer_last: Zxid,
    peer_epoch_ends: Vec<Zxid>,
    /// Highest zxid the learner acknowledged as durable.
    acked: Zxid,
    last_heard: Tick,
    /// Highest ping round answered.
    pong: u64,
    /// The SNAP transfer to this learner, while in [`HPhase::SnapSending`].
    snap: Option<SnapSend>,
    /// In [`HPhase::DiffReading`]: the last entry sent so far.
    diff_sent: Zxid,
    /// A non-voting observer: it gets the sync, then committed transactions
    /// only (INFORM), and counts in no quorum.
    observer: bool,
    /// Observers: where the sync data started (the point its INFORM lag is
    /// counted from until it acknowledges more).
    synced_from: Zxid,
    /// An observer that said RELAYED: it takes committed transactions from an
    /// observer master for the rest of this session; no INFORM goes to it.
    relayed: bool,
}

/// A SNAP transfer to one learner: the snapshot file in chunks read from
/// storage, at most `snap_in_flight_bytes_max` ahead of what the learner has
/// stored.
#[derive(Clone, Debug)]
struct SnapSend {
    snapshot: SnapshotRef,
    /// Bytes asked of storage so far (from offset 0).
    read: u64,
    /// Bytes sent to the learner.
    sent: u64,
    /// Bytes the learner reported stored.
    acked: u64,
    /// Chunks read and not yet sent (reads may complete out of order).
    ready: BTreeMap<u64, Bytes>,
}

#[derive(Clone, Copy, Debug)]
enum SyncOrigin {
    Local(u64),
    Learner {
        peer: PeerId,
        session: LinkId,
        id: u64,
    },
}

#[derive(Clone, Copy, Debug)]
struct PendingSync {
    origin: SyncOrigin,
    /// Everything committed before the request arrived is at or below this.
    barrier: Zxid,
    /// A quorum must answer this ping round (or a later one): proof that this
    /// peer was still the leader after the request arrived.
    ping: u64,
}

/// State of a LEADING peer.
#[derive(Clone, Debug)]
pub(crate) struct Leader {
    pub(crate) vote: Vote,
    phase: Phase,
    /// The epoch chosen in discovery.
    epoch: Epoch,
    /// The epoch in use once established; a committed rollover raises it.
    established: Option<Epoch>,
    deadline: Tick,
    connecting: BTreeMap<PeerId, Epoch>,
    epoch_acks: BTreeSet<PeerId>,
    newleader_acks: BTreeSet<PeerId>,
    /// The leader's (currentEpoch, last zxid) when discovery ended.
    summary: (Epoch, Zxid),
    learners: BTreeMap<PeerId, Handle>,
    last_proposed: Zxid,
    commit: Zxid,
    ping_id: u64,
    next_ping: Tick,
    syncs: Vec<PendingSync>,
}

impl Leader {
    pub(crate) fn new(peer: &Peer, vote: Vote) -> Leader {
        Leader {
            vote,
            phase: Phase::Discovery,
            epoch: Epoch(0),
            established: None,
            deadline: peer.now.after(peer.cfg.init_limit_ticks),
            connecting: BTreeMap::new(),
            epoch_acks: BTreeSet::new(),
            newleader_acks: BTreeSet::new(),
            summary: (Epoch(0), Zxid::ZERO),
            learners: BTreeMap::new(),
            last_proposed: Zxid::ZERO,
            commit: Zxid::ZERO,
            ping_id: 0,
            next_ping: peer.now,
            syncs: Vec::new(),
        }
    }

    pub(crate) fn is_established(&self) -> bool {
        self.phase == Phase::Broadcast
    }

    /// Still collecting the FOLLOWERINFOs that choose the epoch.
    pub(crate) fn in_discovery(&self) -> bool {
        self.phase == Phase::Discovery
    }

    pub(crate) fn describe(&self) -> String {
        format!(
            "leading({:?}, epoch {}, est {:?}, learners {:?}, commit {}, proposed {})",
            self.phase,
            self.epoch,
            self.established,
            self.learners
                .iter()
                .map(|(k, h)| (k.0, h.phase))
                .collect::<Vec<_>>(),
            self.commit,
            self.last_proposed
        )
    }

    pub(crate) fn learner_stats(&self, voters: &BTreeSet<PeerId>) -> Vec<crate::LearnerStats> {
        self.learners
            .iter()
            .map(|(id, h)| crate::LearnerStats {
                id: *id,
                voting: voters.contains(id) && !h.observer,
                synced: h.phase >= HPhase::NewLeaderAcked,
                acked: h.acked,
                relayed: h.relayed,
            })
            .collect()
    }

    /// The lowest zxid after which a sync in progress still reads the
    /// durable log: a SNAP transfer's snapshot (its tail follows the last
    /// chunk), or where a DIFF from disk has got to.
    pub(crate) fn log_needed_after(&self) -> Option<Zxid> {
        self.learners
            .values()
            .filter_map(|h| match (&h.snap, h.phase) {
                (Some(s), _) => Some(s.snapshot.zxid),
                (None, HPhase::DiffReading) => Some(h.diff_sent),
                (None, _) => None,
            })
            .min()
    }

    pub(crate) fn pending_syncs(&self) -> usize {
        self.syncs.len()
    }

    /// Whether `id` has a session with this leader.
    pub(crate) fn has_learner(&self, id: PeerId) -> bool {
        self.learners.contains_key(&id)
    }

    fn offer(&self) -> Epoch {
        self.established.unwrap_or(self.epoch)
    }
}

impl Peer {
    fn ld(&mut self) -> &mut Leader {
        match &mut self.state {
            State::Leading(l) => l,
            _ => unreachable!("leader state accessed while not leading"),
        }
    }

    fn ld_ref(&self) -> &Leader {
        match &self.state {
            State::Leading(l) => l,
            _ => unreachable!("leader state accessed while not leading"),
        }
    }

    /// Sends a session message to a learner, numbering it.
    fn send_learner(&mut self, id: PeerId, msg: SessionMsg) {
        let Some(h) = self.ld().learners.get_mut(&id) else {
            return;
        };
        let (session, seq) = (h.session, h.seq_out);
        h.seq_out += 1;
        self.send(id, Message::Session { session, seq, msg });
    }

    fn drop_learner(&mut self, id: PeerId, reason: RejectReason) {
        self.send_learner(id, SessionMsg::Reject { reason });
        let l = self.ld();
        l.learners.remove(&id);
        // A learner that is gone no longer counts towards establishing this
        // leader: it may already be acknowledging a later epoch's leader, whose
        // commits this leader's history lacks (sim seed 1010705: a follower
        // acked NEWLEADER, was rejected, helped elect epoch e+1 and commit in
        // it, and its stale ack then completed the quorum of epoch e).
        // ZooKeeper's leader steps down when its synced followers are no
        // longer a quorum; here the ack is withdrawn before it can count.
        l.newleader_acks.remove(&id);
    }

    /// Refuses a learner's message and ends its session (I7).
    fn refuse_learner(&mut self, id: PeerId, msg: &'static str, why: Refusal) {
        let reject = match why {
            Refusal::AheadOfLeader => RejectReason::AheadOfLeader,
            Refusal::StaleSession(_)
            | Refusal::OutOfOrder { .. }
            | Refusal::Unexpected
            | Refusal::WrongEpoch { .. }
            | Refusal::Inconsistent { .. }
            | Refusal::UnknownVoter(_)
            | Refusal::BadSnapshot => RejectReason::Protocol,
        };
        self.refuse(id, msg, why);
        self.drop_learner(id, reject);
    }

    pub(super) fn leader_on_session(
        &mut self,
        from: PeerId,
        session: LinkId,
        seq: u64,
        msg: SessionMsg,
    ) {
        let name = msg.name();
        if let SessionMsg::FollowerInfo {
            kind,
            accepted_epoch,
        } = msg
        {
            if seq == 0 {
                self.leader_on_follower_info(from, session, kind, accepted_epoch);
            } else {
                let why = Refusal::OutOfOrder {
                    expected: 0,
                    got: seq,
                };
                self.refuse(from, name, why);
            }
            return;
        }
        let now = self.now;
        let current = self.ld_ref().learners.get(&from).map(|h| h.session);
        if current != Some(session) {
            self.refuse_stale(from, session, &msg);
            return;
        }
        let h = self.ld().learners.get_mut(&from).expect("checked above");
        if seq != h.seq_in {
            let why = Refusal::OutOfOrder {
                expected: h.seq_in,
                got: seq,
            };
            self.refuse_learner(from, name, why);
            return;
        }
        h.seq_in += 1;
        h.last_heard = now;
        match msg {
            SessionMsg::AckEpoch {
                current_epoch,
                last_zxid,
                epoch_ends,
            } => self.leader_on_ack_epoch(from, current_epoch, last_zxid, epoch_ends),
            SessionMsg::AckNewLeader { epoch } => self.leader_on_ack_newleader(from, epoch),
            SessionMsg::Ack { upto } => self.leader_on_ack(from, upto),
            SessionMsg::Pong { id } => {
                if let Some(h) = self.ld().learners.get_mut(&from) {
                    h.pong = h.pong.max(id);
                }
                self.leader_check_syncs();
            }
            SessionMsg::SyncRequest { id } => self.leader_on_sync_request(from, session, id),
            SessionMsg::SnapAck { received } => self.leader_on_snap_ack(from, received),
            SessionMsg::Forward { payload } => self.leader_on_forward(from, payload),
            SessionMsg::Relayed => self.leader_on_relayed(from),
            SessionMsg::FollowerInfo { .. }
            | SessionMsg::LeaderInfo { .. }
            | SessionMsg::Diff { .. }
            | SessionMsg::Trunc { .. }
            | SessionMsg::Snap { .. }
            | SessionMsg::SnapChunk { .. }
            | SessionMsg::Proposal { .. }
            | SessionMsg::Commit { .. }
            | SessionMsg::NewLeader { .. }
            | SessionMsg::UpToDate { .. }
            | SessionMsg::Inform { .. }
            | SessionMsg::Ping { .. }
            | SessionMsg::SyncReply { .. }
            | SessionMsg::Reject { .. } => self.refuse_learner(from, name, Refusal::Unexpected),
        }
    }

    pub(super) fn leader_after_storage(&mut self) {
        let phase = self.ld_ref().phase;
        match phase {
            Phase::EpochPersisting => {
                if self.storage_idle() && self.durable.epochs.accepted >= self.ld_ref().epoch {
                    self.leader_enter_ack_epochs();
                }
            }
            Phase::CurrentPersisting => {
                if self.storage_idle() && self.durable.epochs.current >= self.ld_ref().epoch {
                    self.leader_enter_syncing();
                }
            }
            Phase::Broadcast => self.leader_try_commit(),
            Phase::Discovery | Phase::AckEpochs | Phase::Syncing => {}
        }
    }

    /// The connection to `peer` is gone: its session cannot continue, so it is
    /// dropped now rather than after `sync_limit_ticks` of silence (the REJECT is
    /// queued for the transport's next connection, where it ends the learner's
    /// session if the learner did not see the loss). A leader that no longer has
    /// a quorum of synced voters steps down at once (docs/zab.md, "Ticks, pings
    /// and stepping down").
    pub(super) fn leader_on_disconnected(&mut self, peer: PeerId) {
        if self.ld_ref().learners.contains_key(&peer) {
            self.drop_learner(peer, RejectReason::Protocol);
        }
        if self.ld_ref().phase == Phase::Broadcast
            && self.leader_synced_voters() < self.cfg.quorum()
        {
            self.go_looking();
        }
    }

    /// Voters (this leader included) whose session is past the NEWLEADER ACK.
    fn leader_synced_voters(&self) -> usize {
        let voters = &self.cfg.voters;
        1 + self
            .ld_ref()
            .learners
            .iter()
            .filter(|(id, h)| voters.contains(id) && h.phase >= HPhase::NewLeaderAcked)
            .count()
    }

    pub(super) fn leader_tick(&mut self) {
        let now = self.now;
        let quorum = self.cfg.quorum();
        let (init_limit_ticks, sync_limit_ticks, ping_interval_ticks) = (
            self.cfg.init_limit_ticks,
            self.cfg.sync_limit_ticks,
            self.cfg.ping_interval_ticks,
        );
        let l = self.ld_ref();
        if l.phase != Phase::Broadcast && now > l.deadline {
            self.go_looking();
            return;
        }
        let silent: Vec<PeerId> = l
            .learners
            .iter()
            .filter(|(_, h)| {
                let limit = if h.phase >= HPhase::NewLeaderAcked {
                    sync_limit_ticks
                } else {
                    init_limit_ticks
                };
                now.0.saturating_sub(h.last_heard.0) > limit
            })
            .map(|(id, _)| *id)
            .collect();
        for id in silent {
            self.drop_learner(id, RejectReason::Protocol);
        }
        if self.ld_ref().phase == Phase::Broadcast && self.leader_synced_voters() < quorum {
            // A leader that cannot hear a quorum steps down (docs/zab.md,
            // "Ticks, pings and stepping down").
            self.go_looking();
            return;
        }
        if now >= self.ld_ref().next_ping {
            self.ld().next_ping = now.after(ping_interval_ticks);
            self.leader_start_ping_round();
        }
    }

    pub(super) fn leader_leave(&mut self, mut l: Leader) {
        // Tell learners at once, so they look for the next leader without waiting
        // for their timeout.
        let ids: Vec<PeerId> = l.learners.keys().copied().collect();
        for id in ids {
            let h = l.learners.get_mut(&id).expect("listed");
            let msg = SessionMsg::Reject {
                reason: RejectReason::NotLeading,
            };
            self.out.push(Output::Send {
                to: id,
                msg: Message::Session {
                    session: h.session,
                    seq: h.seq_out,
                    msg,
                },
            });
            h.seq_out += 1;
        }
        for s in l.syncs {
            if let SyncOrigin::Local(id) = s.origin {
                self.out.push(Output::SyncFailed {
                    id,
                    error: ReplicateError::LostQuorum,
                });
            }
        }
    }
}

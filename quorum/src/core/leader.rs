//! The leader: discovery (§3.3), synchronisation of each learner (§4), broadcast
//! (§5), the linearizable sync barrier (I6b) and epoch rollover (I3).

use std::collections::{BTreeMap, BTreeSet};

use rzk_zxid::{Epoch, Next, Zxid};

use bytes::Bytes;

use super::{
    Output, Peer, ReadCmd, ReadData, ReadFor, Refusal, SnapRead, SnapshotRef, State, Tick,
};
use crate::message::{Entry, LearnerKind, Message, RejectReason, SessionId, SessionMsg, Vote};
use crate::{PeerId, ReplicateError, Role};

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
    session: SessionId,
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
        session: SessionId,
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
            deadline: peer.now.after(peer.cfg.init_limit),
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
            _ => RejectReason::Protocol,
        };
        self.refuse(id, msg, why);
        self.drop_learner(id, reject);
    }

    pub(super) fn leader_start(&mut self) {
        let (me, accepted) = (self.cfg.id, self.durable.epochs.accepted);
        self.ld().connecting.insert(me, accepted);
        self.leader_check_connect_quorum();
    }

    pub(super) fn leader_on_session(
        &mut self,
        from: PeerId,
        session: SessionId,
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

    pub(super) fn leader_on_follower_info(
        &mut self,
        from: PeerId,
        session: SessionId,
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

    fn leader_send_leader_info(&mut self, id: PeerId) {
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

    fn leader_check_connect_quorum(&mut self) {
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
        // §1.3: the leader persists acceptedEpoch before LEADERINFO goes out.
        self.save_epochs(ep, None);
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

    fn leader_enter_ack_epochs(&mut self) {
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

    fn leader_on_ack_epoch(
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
        // §3.3: a learner more recent than the leader is refused. It cannot hold a
        // committed transaction the leader lacks (the quorums intersect), but it
        // must not be synchronised from a history shorter than its own claim.
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

    fn leader_check_epoch_ack_quorum(&mut self) {
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

    fn leader_enter_syncing(&mut self) {
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
    fn sync_plan(&self, peer_last: Zxid, epoch_ends: &[Zxid]) -> (SessionMsg, Zxid) {
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
    fn leader_sync_learner(&mut self, id: PeerId) {
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

    /// Asks storage for the next chunks of a learner's SNAP, up to the
    /// in-flight limit (what is read or sent and not yet stored by the learner).
    fn leader_snap_pump(&mut self, id: PeerId) {
        let (chunk, window) = (
            self.cfg.snap_chunk_bytes_max.max(1) as u64,
            self.cfg.snap_in_flight_bytes_max,
        );
        loop {
            let Some(h) = self.ld().learners.get_mut(&id) else {
                return;
            };
            let session = h.session;
            let Some(s) = h.snap.as_mut() else {
                return;
            };
            let size = s.snapshot.size_bytes;
            if s.read >= size || s.read - s.acked >= window {
                return;
            }
            let offset = s.read;
            let len = chunk.min(size - offset);
            s.read += len;
            let cmd = ReadCmd::SnapshotChunk {
                snapshot: s.snapshot,
                offset,
                len: len as usize,
            };
            let read = SnapRead {
                peer: id,
                session,
                offset,
            };
            self.issue_read(ReadFor::Snap(read), cmd);
        }
    }

    /// A chunk of a learner's SNAP came back from storage: chunks go out in
    /// file order; after the last, the rest of the sync.
    pub(super) fn leader_on_snap_read(&mut self, read: SnapRead, result: Result<ReadData, String>) {
        let id = read.peer;
        let Some(h) = self.ld().learners.get_mut(&id) else {
            return;
        };
        if h.session != read.session {
            return;
        }
        let Some(s) = h.snap.as_mut() else {
            return;
        };
        let size = s.snapshot.size_bytes;
        let data = match result {
            Ok(ReadData::SnapshotChunk(data)) if !data.is_empty() => data,
            // Our own snapshot cannot be read (the driver logs why): this
            // learner starts over, by then perhaps from a newer snapshot.
            Ok(ReadData::SnapshotChunk(_) | ReadData::Log(_)) | Err(_) => {
                self.drop_learner(id, RejectReason::Protocol);
                return;
            }
        };
        s.ready.insert(read.offset, data);
        let mut out = Vec::new();
        while let Some(data) = s.ready.remove(&s.sent) {
            let offset = s.sent;
            s.sent += data.len() as u64;
            out.push(SessionMsg::SnapChunk { offset, data });
        }
        let done = s.sent >= size;
        let after = s.snapshot.zxid;
        for msg in out {
            self.send_learner(id, msg);
        }
        if !done {
            self.leader_snap_pump(id);
            return;
        }
        if let Some(h) = self.ld().learners.get_mut(&id) {
            h.snap = None;
        }
        if after < self.log_start {
            // Storage purged the entries after this snapshot during the
            // transfer (`leader_drop_snaps_below` drops such a transfer as
            // soon as it learns of it, so this is a safety net): the learner
            // starts over from the newer one.
            self.drop_learner(id, RejectReason::Protocol);
            return;
        }
        // The tail after the snapshot: what the window dropped from memory
        // is read from the durable log in bounded batches, the rest follows
        // from memory (I4), as for a DIFF from disk.
        if after < self.log_base {
            self.window_counts.snap_tails_from_disk += 1;
        }
        self.leader_sync_from(id, after);
    }

    /// Storage purged its log and the available log now starts at
    /// `log_start`: a SNAP transfer of a snapshot below it can no longer end
    /// in a sync (the entries after its snapshot are gone from memory and
    /// disk); `leader_on_snap_read` would drop its learner after the last
    /// chunk. It is dropped now, so the learner starts over from the newest
    /// snapshot at once instead of after sending the rest of the old file in
    /// vain. Storage keeps the log after the *oldest* snapshot it retains
    /// (`Input::SnapshotSaved`), so a transfer survives newer snapshots
    /// while its own is retained (issue 11: a transfer longer than the
    /// leader's snapshot interval used to start over at every snapshot).
    /// `saved` is the snapshot just saved: the transfers of older ones that
    /// go on are counted.
    pub(super) fn leader_drop_snaps_below(&mut self, log_start: Zxid, saved: Zxid) {
        let stale: Vec<PeerId> = self
            .ld_ref()
            .learners
            .iter()
            .filter(|(_, h)| h.snap.as_ref().is_some_and(|s| s.snapshot.zxid < log_start))
            .map(|(id, _)| *id)
            .collect();
        let outlived = self
            .ld_ref()
            .learners
            .values()
            .filter_map(|h| h.snap.as_ref())
            .filter(|s| s.snapshot.zxid >= log_start && s.snapshot.zxid < saved)
            .count();
        self.window_counts.snaps_outlived_snapshot += outlived as u64;
        for id in stale {
            self.window_counts.snaps_purged += 1;
            self.drop_learner(id, RejectReason::Protocol);
        }
    }

    /// Sends a learner the entries after `after`: those the window dropped
    /// from memory are read from the durable log first, one bounded read at a
    /// time (`leader_on_diff_read`), then the rest in one step
    /// (`leader_sync_tail`). Until then the learner is in
    /// [`HPhase::DiffReading`] and gets no live proposals: the tail that ends
    /// the sync carries them, as after a SNAP.
    fn leader_sync_from(&mut self, id: PeerId, after: Zxid) {
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

    fn leader_diff_read_next(&mut self, id: PeerId) {
        let Some(h) = self.ld_ref().learners.get(&id) else {
            return;
        };
        let (session, after) = (h.session, h.diff_sent);
        let cmd = ReadCmd::Log {
            after,
            entries_max: self.cfg.batch_entries_max.max(1),
            bytes_max: self.cfg.snap_chunk_bytes_max.max(1),
        };
        self.window_counts.log_reads += 1;
        self.issue_read(ReadFor::Diff { peer: id, session }, cmd);
    }

    /// Entries of a DIFF below the window came back from storage: they go to
    /// the learner as PROPOSALs; once the learner's position reaches the
    /// window, the rest of the sync follows from memory.
    pub(super) fn leader_on_diff_read(
        &mut self,
        id: PeerId,
        session: SessionId,
        result: Result<ReadData, String>,
    ) {
        let Some(h) = self.ld_ref().learners.get(&id) else {
            return;
        };
        if h.session != session || h.phase != HPhase::DiffReading {
            return;
        }
        let (after, observer) = (h.diff_sent, h.observer);
        let entries = match result {
            Ok(ReadData::Log(entries)) => entries,
            // Our own log cannot be read (the driver logs why), or the read
            // came back as something else: this learner starts over.
            Ok(ReadData::SnapshotChunk(_)) | Err(_) => {
                self.drop_learner(id, RejectReason::Protocol);
                return;
            }
        };
        // Only what the window dropped is used (a bounded read may run on
        // into entries still in memory, which may not be committed yet: they
        // follow from memory), and it is applied (committed): the entries
        // must continue the learner's position exactly (I4).
        let base = self.log_base;
        let entries: Vec<Entry> = entries.into_iter().take_while(|e| e.zxid <= base).collect();
        let fits = entries.first().is_some_and(|e| e.zxid.is_next(after))
            && entries.windows(2).all(|w| w[1].zxid.is_next(w[0].zxid))
            && entries.last().is_some_and(|e| e.zxid <= self.applied);
        if !fits {
            // The durable log below the window is not what the core knew (a
            // purge raced the read; the next plan knows of the snapshot that
            // caused it): the learner starts over.
            self.drop_learner(id, RejectReason::Protocol);
            return;
        }
        let last = entries.last().expect("checked non-empty").zxid;
        let end = if observer {
            self.ld_ref().commit
        } else {
            Zxid::from_u64(u64::MAX)
        };
        debug_assert!(last <= end, "what the window dropped is committed");
        for chunk in entries.chunks(self.cfg.batch_entries_max.max(1)) {
            self.send_learner(
                id,
                SessionMsg::Proposal {
                    entries: chunk.to_vec(),
                },
            );
        }
        if let Some(h) = self.ld().learners.get_mut(&id) {
            h.diff_sent = last;
        }
        if last >= self.log_base {
            self.leader_sync_tail(id, last);
        } else {
            self.leader_diff_read_next(id);
        }
    }

    /// The learner stored its SNAP up to `received`: more may be read.
    fn leader_on_snap_ack(&mut self, from: PeerId, received: u64) {
        let Some(h) = self.ld().learners.get_mut(&from) else {
            return;
        };
        let Some(s) = h.snap.as_mut() else {
            // The transfer is complete; a late acknowledgement says nothing.
            return;
        };
        if received > s.sent {
            self.refuse_learner(from, "SNAPACK", Refusal::Unexpected);
            return;
        }
        s.acked = s.acked.max(received);
        self.leader_snap_pump(from);
    }

    /// Sends a learner the entries after `after`, what it may treat as
    /// committed, and NEWLEADER. Built in one step from the leader's log *and*
    /// its unwritten proposals, so no proposal can fall between the sync data
    /// and the live stream (I4).
    fn leader_sync_tail(&mut self, id: PeerId, after: Zxid) {
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
    fn known_committed_prefix(&self) -> Zxid {
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

    fn leader_on_ack_newleader(&mut self, from: PeerId, epoch: Epoch) {
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

    fn leader_check_newleader_quorum(&mut self) {
        let quorum = self.cfg.quorum();
        let l = self.ld_ref();
        if l.phase != Phase::Syncing || l.newleader_acks.len() < quorum {
            return;
        }
        self.leader_establish();
    }

    /// A quorum holds the leader's initial history durably: it is committed.
    fn leader_establish(&mut self) {
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

    /// The zxid for the next proposal, rolling over to the next epoch (counter 1)
    /// when the counter is at its limit.
    fn next_zxid(&self) -> Option<Zxid> {
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

    pub(super) fn leader_propose(&mut self, proposals: Vec<(u64, bytes::Bytes)>) {
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

    fn leader_on_ack(&mut self, from: PeerId, upto: Zxid) {
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
    /// on (issue 12): no more INFORMs to it in this session. Only an observer
    /// that is synced may say so; anything else ends its session.
    fn leader_on_relayed(&mut self, from: PeerId) {
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
    fn leader_inform_observers(&mut self, old: Zxid, new: Zxid) {
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
    /// has persisted acceptedEpoch ≥ that epoch (§6.2).
    fn leader_note_rollovers(&mut self, old: Zxid, new: Zxid) {
        let limit = self.cfg.counter_limit;
        // Only the entries just committed: the window holds up to a snapshot
        // interval of them, and a scan of all of it at every commit was most of
        // a standalone write's cost in the core (issue 11).
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

    fn leader_start_ping_round(&mut self) -> u64 {
        let l = self.ld();
        l.ping_id += 1;
        let id = l.ping_id;
        let targets: Vec<PeerId> = l.learners.keys().copied().collect();
        for t in targets {
            self.send_learner(t, SessionMsg::Ping { id });
        }
        id
    }

    pub(super) fn leader_local_sync(&mut self, id: u64) {
        let ping = self.leader_start_ping_round();
        let barrier = self.ld_ref().last_proposed;
        self.ld().syncs.push(PendingSync {
            origin: SyncOrigin::Local(id),
            barrier,
            ping,
        });
        self.leader_check_syncs();
    }

    /// A learner's forwarded message reaches the state machine only once the
    /// leader is established and the learner is up to date: it was sent after the
    /// learner's UPTODATE, so anything else is a protocol error.
    fn leader_on_forward(&mut self, from: PeerId, payload: bytes::Bytes) {
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

    fn leader_on_sync_request(&mut self, from: PeerId, session: SessionId, id: u64) {
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
    pub(super) fn leader_check_syncs(&mut self) {
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

    /// The connection to `peer` is gone: its session cannot continue, so it is
    /// dropped now rather than after `sync_limit` of silence (the REJECT is
    /// queued for the transport's next connection, where it ends the learner's
    /// session if the learner did not see the loss). A leader that no longer
    /// has a quorum of synced voters steps down at once (§5.6).
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
        let (init_limit, sync_limit, ping_interval) = (
            self.cfg.init_limit,
            self.cfg.sync_limit,
            self.cfg.ping_interval,
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
                    sync_limit
                } else {
                    init_limit
                };
                now.0.saturating_sub(h.last_heard.0) > limit
            })
            .map(|(id, _)| *id)
            .collect();
        for id in silent {
            self.drop_learner(id, RejectReason::Protocol);
        }
        if self.ld_ref().phase == Phase::Broadcast && self.leader_synced_voters() < quorum {
            // §5.6: a leader that cannot hear a quorum steps down.
            self.go_looking();
            return;
        }
        if now >= self.ld_ref().next_ping {
            self.ld().next_ping = now.after(ping_interval);
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

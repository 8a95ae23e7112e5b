//! The learner (follower): discovery, synchronisation and broadcast;
//! docs/zab.md describes each ("The learner's side", "What the learner does",
//! "NEWLEADER: what must be durable before the ACK", "The follower").

use std::collections::BTreeSet;

use rzk_zxid::{Epoch, Zxid};

use super::{Effect, Output, Peer, Refusal, SnapshotRef, State, StorageCmd, SyncMode, Tick};
use crate::message::{Entry, LearnerKind, LinkId, Message, SessionMsg, Vote};
use crate::{PeerId, ReplicateError};

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Phase {
    /// FOLLOWERINFO sent.
    Connecting,
    /// acceptedEpoch is being persisted (or other writes drain) before ACKEPOCH.
    AcceptPersisting,
    /// ACKEPOCH sent; waiting for DIFF, TRUNC or SNAP.
    AwaitSync,
    /// Receiving the synchronisation proposals (held in memory).
    Syncing,
    /// NEWLEADER received: the proposals, then currentEpoch, are being persisted.
    NewLeaderPersisting,
    /// NEWLEADER acknowledged; waiting for UPTODATE.
    Synced,
    /// Broadcast.
    UpToDate,
}

/// The synchronisation mode the leader chose.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Mode {
    Diff,
    Trunc,
    Snap,
}

/// State of a FOLLOWING peer.
#[derive(Clone, Debug)]
pub(crate) struct Learner {
    pub(crate) leader: PeerId,
    pub(crate) vote: Vote,
    session: LinkId,
    seq_out: u64,
    seq_in: u64,
    phase: Phase,
    /// The epoch the leader offered.
    epoch: Epoch,
    last_heard: Tick,
    mode: Option<Mode>,
    /// Proposals received during synchronisation, before NEWLEADER. Memory only:
    /// dropped if the sync is interrupted (I2, ZOOKEEPER-5094).
    buffer: Vec<Entry>,
    /// Last zxid received on this session's stream (continuity check).
    last_received: Zxid,
    ack_sent: Zxid,
    marker_set: bool,
    /// Sync requests sent to the leader.
    syncs_sent: BTreeSet<u64>,
    /// Barriers received, waiting for the apply point.
    syncs_waiting: Vec<(u64, Zxid)>,
    /// The SNAP being received, until its install is durable.
    snap: Option<SnapRecv>,
    /// A NEWLEADER that came while the snapshot was still being installed:
    /// taken up once the install is durable (or dropped with the session if
    /// storage refuses the snapshot), so nothing is written after a refused
    /// install.
    pending_new_leader: Option<Epoch>,
    /// An observer whose committed stream comes from an observer master in this
    /// session: INFORMs from the leader are ignored.
    relayed: bool,
}

/// A SNAP being received: the leader's file in chunks, into storage.
#[derive(Clone, Copy, Debug)]
struct SnapRecv {
    snapshot: SnapshotRef,
    /// Bytes handed to storage.
    received: u64,
    /// Bytes storage has taken.
    stored: u64,
    /// Bytes reported to the leader (SNAPACK).
    acked: u64,
    /// Every byte is in; InstallSnapshot is issued.
    installing: bool,
}

impl Learner {
    pub(crate) fn new(peer: &Peer, vote: Vote) -> Learner {
        Learner {
            leader: vote.leader,
            vote,
            session: LinkId((peer.cfg.incarnation << 32) | (peer.next_session & 0xffff_ffff)),
            seq_out: 0,
            seq_in: 0,
            phase: Phase::Connecting,
            epoch: Epoch(0),
            last_heard: peer.now,
            mode: None,
            buffer: Vec::new(),
            last_received: Zxid::ZERO,
            ack_sent: Zxid::ZERO,
            marker_set: false,
            syncs_sent: BTreeSet::new(),
            syncs_waiting: Vec::new(),
            snap: None,
            pending_new_leader: None,
            relayed: false,
        }
    }

    pub(crate) fn session(&self) -> LinkId {
        self.session
    }

    pub(crate) fn is_up_to_date(&self) -> bool {
        self.phase == Phase::UpToDate
    }

    pub(crate) fn pending_syncs(&self) -> usize {
        self.syncs_sent.len() + self.syncs_waiting.len()
    }

    pub(crate) fn describe(&self) -> String {
        format!(
            "following({:?}, {:?}, epoch {}, mode {:?}, buffered {})",
            self.leader,
            self.phase,
            self.epoch,
            self.mode,
            self.buffer.len()
        )
    }
}

impl Peer {
    fn fl(&mut self) -> &mut Learner {
        match &mut self.state {
            State::Following(f) => f,
            _ => unreachable!("learner state accessed while not following"),
        }
    }

    fn fl_ref(&self) -> &Learner {
        match &self.state {
            State::Following(f) => f,
            _ => unreachable!("learner state accessed while not following"),
        }
    }

    fn send_leader(&mut self, msg: SessionMsg) {
        let f = self.fl();
        let (to, session, seq) = (f.leader, f.session, f.seq_out);
        f.seq_out += 1;
        self.send(to, Message::Session { session, seq, msg });
    }

    pub(super) fn learner_forward(&mut self, payload: bytes::Bytes) {
        debug_assert!(self.fl_ref().is_up_to_date());
        self.send_leader(SessionMsg::Forward { payload });
    }

    pub(super) fn learner_start(&mut self) {
        self.next_session += 1;
        let accepted = self.durable.epochs.accepted;
        // I1: FOLLOWERINFO carries the durable acceptedEpoch.
        assert_eq!(accepted, self.durable.epochs.accepted);
        let kind = if self.cfg.is_observer() {
            LearnerKind::Observer
        } else {
            LearnerKind::Participant
        };
        self.send_leader(SessionMsg::FollowerInfo {
            kind,
            accepted_epoch: accepted,
        });
    }

    /// Ends the session on a protocol violation: the learner never skips or
    /// patches, it goes back to election and resynchronises (I7: the refusal
    /// is reported, naming the leader).
    fn learner_protocol_error(&mut self, msg: &'static str, why: Refusal) {
        let leader = self.fl_ref().leader;
        self.refuse(leader, msg, why);
        self.go_looking();
    }

    pub(super) fn learner_on_session(
        &mut self,
        from: PeerId,
        session: LinkId,
        seq: u64,
        msg: SessionMsg,
    ) {
        let now = self.now;
        let name = msg.name();
        let f = self.fl();
        if from != f.leader || session != f.session {
            self.refuse_stale(from, session, &msg);
            return;
        }
        if seq != f.seq_in {
            let why = Refusal::OutOfOrder {
                expected: f.seq_in,
                got: seq,
            };
            self.learner_protocol_error(name, why);
            return;
        }
        f.seq_in += 1;
        f.last_heard = now;
        let phase = f.phase;
        match msg {
            SessionMsg::LeaderInfo { epoch, established } if phase == Phase::Connecting => {
                self.learner_on_leader_info(epoch, established)
            }
            SessionMsg::Diff { .. } | SessionMsg::Trunc { .. } | SessionMsg::Snap { .. }
                if phase == Phase::AwaitSync =>
            {
                self.learner_on_sync_mode(msg)
            }
            SessionMsg::SnapChunk { offset, data } if phase == Phase::Syncing => {
                self.learner_on_snap_chunk(offset, data)
            }
            SessionMsg::Proposal { entries } if phase >= Phase::Syncing => {
                self.learner_on_proposal(entries)
            }
            SessionMsg::Commit { upto } if phase >= Phase::Syncing => self.learner_on_commit(upto),
            SessionMsg::Inform { .. } if self.fl_ref().relayed => {
                // Sent before the leader read RELAYED; the relay carries them.
            }
            SessionMsg::Inform { prev, entries }
                if phase >= Phase::Syncing && self.cfg.is_observer() =>
            {
                self.observer_on_inform(prev, entries)
            }
            SessionMsg::NewLeader { epoch } if phase == Phase::Syncing => {
                self.learner_on_new_leader(epoch)
            }
            SessionMsg::UpToDate { committed } if phase == Phase::Synced => {
                self.learner_on_up_to_date(committed)
            }
            SessionMsg::Ping { id } => self.send_leader(SessionMsg::Pong { id }),
            SessionMsg::SyncReply { id, zxid } if phase == Phase::UpToDate => {
                if self.fl().syncs_sent.remove(&id) {
                    self.fl().syncs_waiting.push((id, zxid));
                    self.learner_check_syncs();
                }
            }
            SessionMsg::Reject { .. } => self.go_looking(),
            SessionMsg::LeaderInfo { .. }
            | SessionMsg::Diff { .. }
            | SessionMsg::Trunc { .. }
            | SessionMsg::Snap { .. }
            | SessionMsg::SnapChunk { .. }
            | SessionMsg::SnapAck { .. }
            | SessionMsg::Proposal { .. }
            | SessionMsg::Commit { .. }
            | SessionMsg::NewLeader { .. }
            | SessionMsg::UpToDate { .. }
            | SessionMsg::SyncReply { .. }
            | SessionMsg::FollowerInfo { .. }
            | SessionMsg::AckEpoch { .. }
            | SessionMsg::AckNewLeader { .. }
            | SessionMsg::Ack { .. }
            | SessionMsg::Inform { .. }
            | SessionMsg::Pong { .. }
            | SessionMsg::SyncRequest { .. }
            | SessionMsg::Relayed
            | SessionMsg::Forward { .. } => self.learner_protocol_error(name, Refusal::Unexpected),
        }
    }

    fn learner_on_leader_info(&mut self, epoch: Epoch, established: bool) {
        let leader = self.fl_ref().leader;
        let ep = self.written_epochs;
        // docs/zab.md, "The learner's side", stricter: the same epoch is
        // accepted again from another leader only if that leader is already
        // established (this peer joins late and is not counted towards
        // establishing it). Otherwise two leaders could both count this peer
        // for one epoch.
        let same_epoch_ok = ep.accepted_from == Some(leader) || established;
        if epoch < ep.accepted || (epoch == ep.accepted && !same_epoch_ok) {
            // An offer of an old epoch (or of this one from a leader it was not
            // promised to and that is not established).
            let why = Refusal::WrongEpoch {
                epoch,
                expected: ep.accepted.max(epoch.next().unwrap_or(epoch)),
            };
            self.learner_protocol_error("LEADERINFO", why);
            return;
        }
        self.fl().epoch = epoch;
        self.fl().phase = Phase::AcceptPersisting;
        if epoch > ep.accepted || ep.accepted_from != Some(leader) {
            let mut next = ep;
            next.accepted = epoch;
            next.accepted_from = Some(leader);
            // acceptedEpoch is persisted before ACKEPOCH is sent (docs/zab.md,
            // "When each epoch is written").
            self.save_epochs(next, None);
        }
        self.learner_try_ack_epoch();
    }

    fn learner_try_ack_epoch(&mut self) {
        if self.fl_ref().phase != Phase::AcceptPersisting || !self.storage_idle() {
            return;
        }
        let epoch = self.fl_ref().epoch;
        // I1 (ZOOKEEPER-5094, 4882): ACKEPOCH reports the durable log, and it is
        // sent only when nothing is in flight, so the log the leader syncs from
        // is exactly the log on disk.
        assert!(
            self.durable.epochs.accepted >= epoch,
            "acceptedEpoch durable before ACKEPOCH"
        );
        assert!(
            self.durable.last == self.written_last() && self.blocked.is_empty(),
            "I1: ACKEPOCH claims only durable history"
        );
        let (current_epoch, last_zxid) = (self.durable.epochs.current, self.durable.last);
        let epoch_ends = self.epoch_ends();
        self.fl().phase = Phase::AwaitSync;
        self.send_leader(SessionMsg::AckEpoch {
            current_epoch,
            last_zxid,
            epoch_ends,
        });
    }

    /// The last zxid of each epoch in the (durable) log, newest first, then the
    /// log base.
    fn epoch_ends(&self) -> Vec<Zxid> {
        let mut ends: Vec<Zxid> = Vec::new();
        let in_memory = self.log.iter().rev().map(|e| e.zxid);
        let on_disk = self.disk_segs.iter().rev().map(|(_, last)| *last);
        for z in in_memory.chain(on_disk) {
            if ends.len() >= crate::message::EPOCH_ENDS_MAX - 1 {
                break;
            }
            if ends.last().is_none_or(|l| l.epoch() != z.epoch()) {
                ends.push(z);
            }
        }
        ends.push(self.log_start);
        ends
    }

    fn learner_on_sync_mode(&mut self, msg: SessionMsg) {
        let (marker_mode, target) = match &msg {
            SessionMsg::Diff { leader_last } => (SyncMode::Diff, *leader_last),
            SessionMsg::Trunc { to } => (SyncMode::Trunc, *to),
            SessionMsg::Snap { zxid, .. } => (SyncMode::Snap, *zxid),
            _ => unreachable!("only sync modes are routed here"),
        };
        // The marker goes down before the first change to the log, and is
        // cleared only once the sync is complete and durable.
        self.issue(
            StorageCmd::BeginSync {
                mode: marker_mode,
                target,
            },
            Effect::Marker,
        );
        self.fl().marker_set = true;
        self.sync_counts[match marker_mode {
            SyncMode::Diff => 0,
            SyncMode::Trunc => 1,
            SyncMode::Snap => 2,
        }] += 1;
        let (mode, last) = match msg {
            SessionMsg::Diff { .. } => (Mode::Diff, self.written_last()),
            SessionMsg::Trunc { to } => {
                let in_log = self.log_has(to);
                // A TRUNC below what is known committed, or outside the log, is a
                // broken leader or stream: refuse it (CommittedLogDurability).
                if to < self.commit_known || to > self.written_last() || !in_log {
                    self.learner_protocol_error("TRUNC", Refusal::Inconsistent { zxid: to });
                    return;
                }
                // What the window dropped is applied, hence committed: a TRUNC
                // that passed the check above cuts memory only.
                assert!(to >= self.log_base, "TRUNC below the window: {to}");
                self.issue(
                    StorageCmd::TruncateAfter(to),
                    Effect::Truncate { after: to },
                );
                while self.log.back().is_some_and(|e| e.zxid > to) {
                    let e = self.log.pop_back().expect("checked");
                    self.log_bytes -= e.payload.len() as u64;
                }
                self.recompute_gate();
                (Mode::Trunc, to)
            }
            SessionMsg::Snap {
                zxid,
                size_bytes,
                crc,
            } => {
                if zxid.epoch() > self.written_epochs.accepted {
                    // The snapshot reaches into an epoch the leader rolled over to
                    // after this session began: persist it first (EpochFence), as
                    // the write path does for entries.
                    let mut ep = self.written_epochs;
                    ep.accepted = zxid.epoch();
                    ep.accepted_from = Some(self.fl_ref().leader);
                    self.save_epochs(ep, None);
                }
                let snapshot = SnapshotRef {
                    zxid,
                    size_bytes,
                    crc,
                };
                // The file streams into storage; the log, the gate and the
                // state machine switch to it when its install is durable
                // (`Effect::Snapshot`): until then they stay what the disk
                // holds (I2), whatever becomes of the transfer.
                let mut recv = SnapRecv {
                    snapshot,
                    received: 0,
                    stored: 0,
                    acked: 0,
                    installing: false,
                };
                let session = self.fl_ref().session;
                if size_bytes == 0 {
                    recv.installing = true;
                    self.issue(
                        StorageCmd::InstallSnapshot(snapshot),
                        Effect::Snapshot { snapshot, session },
                    );
                } else {
                    self.issue(StorageCmd::ReceiveSnapshot(snapshot), Effect::Marker);
                }
                self.fl().snap = Some(recv);
                // commit_known rises to the snapshot once it is installed
                // (`Effect::Snapshot`), not here: a transfer cut short leaves the
                // old log, and a commit point from the snapshot's history above
                // it made this peer refuse every later TRUNC of its own
                // uncommitted tail (sim seed 2002023, a livelock).
                (Mode::Snap, zxid)
            }
            _ => unreachable!("only sync modes are routed here"),
        };
        let f = self.fl();
        f.mode = Some(mode);
        f.last_received = last;
        f.phase = Phase::Syncing;
    }

    fn learner_on_proposal(&mut self, entries: Vec<Entry>) {
        let mut last = self.fl_ref().last_received;
        for e in &entries {
            // ZOOKEEPER-4925: a proposal that does not follow the previous one ends
            // the session.
            if !e.zxid.is_next(last) {
                self.learner_protocol_error("PROPOSAL", Refusal::Inconsistent { zxid: e.zxid });
                return;
            }
            last = e.zxid;
        }
        let f = self.fl();
        f.last_received = last;
        if f.phase == Phase::Syncing {
            f.buffer.extend(entries);
            return;
        }
        self.write_entries(entries);
    }

    /// An observer receives committed transactions only. They must continue
    /// exactly what it received: `prev` (the committed zxid the leader sent
    /// them after) is the last one received, and each follows the one before
    /// (`Zxid::is_next`, the rollover rule included). A gap or a reordering
    /// ends the session and the observer syncs again; it never skips and
    /// never applies out of order (I4, ZOOKEEPER-5088).
    fn observer_on_inform(&mut self, prev: Zxid, entries: Vec<Entry>) {
        let last = self.fl_ref().last_received;
        let Some(upto) = entries.last().map(|e| e.zxid) else {
            self.learner_protocol_error("INFORM", Refusal::Inconsistent { zxid: prev });
            return;
        };
        if prev != last {
            self.learner_protocol_error("INFORM", Refusal::Inconsistent { zxid: prev });
            return;
        }
        self.learner_on_proposal(entries);
        if matches!(&self.state, State::Following(f) if f.last_received == upto) {
            self.learner_on_commit(upto);
        }
    }

    /// Whether this peer is an up-to-date observer (the only state a relay
    /// may feed).
    fn observer_up_to_date(&self) -> bool {
        self.cfg.is_observer()
            && matches!(&self.state, State::Following(f) if f.phase == Phase::UpToDate)
    }

    /// The driver follows an observer master now: the leader is told to stop
    /// its INFORMs for the rest of this session.
    pub(super) fn observer_relay_attached(&mut self) {
        if !self.observer_up_to_date() || self.fl_ref().relayed {
            return;
        }
        self.fl().relayed = true;
        self.send_leader(SessionMsg::Relayed);
    }

    /// Committed transactions from the observer master. Those this peer has
    /// already received (from the leader's INFORMs before it read RELAYED)
    /// are dropped: a zxid names one committed transaction. The rest must
    /// follow the last received exactly (the master's `prev` link and
    /// `Zxid::is_next`), else the session ends and the observer syncs again:
    /// never a skip (I4, ZOOKEEPER-5088).
    pub(super) fn observer_on_relayed(&mut self, prev: Zxid, entries: Vec<Entry>) {
        if !self.observer_up_to_date() || !self.fl_ref().relayed {
            return;
        }
        let last = self.fl_ref().last_received;
        let mut prev = prev;
        let mut fresh = Vec::with_capacity(entries.len());
        for e in entries {
            if e.zxid <= last {
                prev = e.zxid;
            } else {
                fresh.push(e);
            }
        }
        let Some(upto) = fresh.last().map(|e| e.zxid) else {
            return;
        };
        if prev != last {
            let leader = self.fl_ref().leader;
            self.refuse(leader, "RELAYED", Refusal::Inconsistent { zxid: prev });
            self.go_looking();
            return;
        }
        self.learner_on_proposal(fresh);
        if matches!(&self.state, State::Following(f) if f.last_received == upto) {
            self.learner_on_commit(upto);
        }
    }

    /// The relay ended: a relayed observer syncs again (its leader sends it
    /// nothing more in this session).
    pub(super) fn observer_relay_ended(&mut self) {
        if matches!(&self.state, State::Following(f) if f.relayed) {
            self.go_looking();
        }
    }

    fn learner_on_commit(&mut self, upto: Zxid) {
        if upto > self.fl_ref().last_received {
            self.learner_protocol_error("COMMIT", Refusal::Inconsistent { zxid: upto });
            return;
        }
        self.raise_commit_known(upto);
        self.advance_apply();
    }

    /// The next chunk of the SNAP being received goes to storage; the last
    /// one is followed by the install.
    fn learner_on_snap_chunk(&mut self, offset: u64, data: bytes::Bytes) {
        let Some(mut r) = self.fl_ref().snap.filter(|r| !r.installing) else {
            self.learner_protocol_error("SNAPCHUNK", Refusal::Unexpected);
            return;
        };
        let end = offset + data.len() as u64;
        if offset != r.received || data.is_empty() || end > r.snapshot.size_bytes {
            let why = Refusal::OutOfOrder {
                expected: r.received,
                got: offset,
            };
            self.learner_protocol_error("SNAPCHUNK", why);
            return;
        }
        let session = self.fl_ref().session;
        self.issue(
            StorageCmd::SnapshotChunk { offset, data },
            Effect::SnapChunk { end, session },
        );
        r.received = end;
        if end == r.snapshot.size_bytes {
            r.installing = true;
            let snapshot = r.snapshot;
            self.issue(
                StorageCmd::InstallSnapshot(snapshot),
                Effect::Snapshot { snapshot, session },
            );
        }
        self.fl().snap = Some(r);
    }

    /// Storage has taken the SNAP file of `session` up to `end`.
    pub(super) fn learner_snap_stored(&mut self, session: LinkId, end: u64) {
        if let State::Following(f) = &mut self.state {
            if let Some(r) = f.snap.as_mut().filter(|_| f.session == session) {
                r.stored = r.stored.max(end);
            }
        }
    }

    /// The SNAP install of `session` is durable: the sync goes on (a NEWLEADER
    /// that waited for it is taken up).
    pub(super) fn learner_snap_installed(&mut self, session: LinkId) {
        if let State::Following(f) = &mut self.state {
            if f.session == session {
                f.snap = None;
            }
        }
    }

    /// Storage refused the snapshot received (it does not verify): nothing of
    /// it was installed; the session ends and the next sync starts over (I2).
    pub(super) fn learner_on_snapshot_refused(&mut self) {
        if self.fl_ref().snap.is_some() {
            self.learner_protocol_error("SNAP", Refusal::BadSnapshot);
        }
    }

    fn learner_on_new_leader(&mut self, epoch: Epoch) {
        if epoch != self.fl_ref().epoch {
            let expected = self.fl_ref().epoch;
            self.learner_protocol_error("NEWLEADER", Refusal::WrongEpoch { epoch, expected });
            return;
        }
        match self.fl_ref().snap {
            None => {}
            Some(r) if r.installing => {
                self.fl().pending_new_leader = Some(epoch);
                return;
            }
            Some(_) => {
                self.learner_protocol_error("NEWLEADER", Refusal::Unexpected);
                return;
            }
        }
        let buffer = std::mem::take(&mut self.fl().buffer);
        self.write_entries(buffer);
        // ZOOKEEPER-4643/4785: currentEpoch after the proposals (storage runs in
        // order), and the NEWLEADER ACK only once both are durable.
        let mut ep = self.written_epochs;
        ep.current = ep.current.max(epoch);
        self.save_epochs(ep, None);
        self.issue(StorageCmd::EndSync, Effect::Marker);
        let f = self.fl();
        f.marker_set = false;
        f.phase = Phase::NewLeaderPersisting;
        self.learner_try_ack_new_leader();
    }

    fn learner_try_ack_new_leader(&mut self) {
        if self.fl_ref().phase != Phase::NewLeaderPersisting || !self.storage_idle() {
            return;
        }
        let epoch = self.fl_ref().epoch;
        assert!(
            self.durable.epochs.current >= epoch && self.durable.last == self.written_last(),
            "I1: the NEWLEADER ACK covers only durable history (ZOOKEEPER-4646)"
        );
        self.fl().phase = Phase::Synced;
        self.send_leader(SessionMsg::AckNewLeader { epoch });
        self.learner_maybe_ack();
    }

    fn learner_maybe_ack(&mut self) {
        if self.fl_ref().phase < Phase::Synced {
            return;
        }
        let upto = self.durable.ackable;
        if upto <= self.fl_ref().ack_sent {
            return;
        }
        // I1: an ACK covers only what is durable (and fenced, for a rollover).
        assert!(upto <= self.durable.last, "I1: ACK beyond the durable log");
        self.fl().ack_sent = upto;
        self.send_leader(SessionMsg::Ack { upto });
    }

    pub(super) fn learner_after_storage(&mut self) {
        match self.fl_ref().phase {
            Phase::AcceptPersisting => self.learner_try_ack_epoch(),
            Phase::NewLeaderPersisting => self.learner_try_ack_new_leader(),
            Phase::Synced | Phase::UpToDate => self.learner_maybe_ack(),
            Phase::Syncing => self.learner_snap_progress(),
            Phase::Connecting | Phase::AwaitSync => {}
        }
    }

    /// SNAP flow control: tells the leader how much of the file is stored, and
    /// takes up a NEWLEADER that waited for the install.
    fn learner_snap_progress(&mut self) {
        if let Some(r) = self.fl_ref().snap {
            if r.stored > r.acked {
                if let Some(s) = self.fl().snap.as_mut() {
                    s.acked = r.stored;
                }
                self.send_leader(SessionMsg::SnapAck { received: r.stored });
            }
            return;
        }
        if let Some(epoch) = self.fl().pending_new_leader.take() {
            self.learner_on_new_leader(epoch);
        }
    }

    fn learner_on_up_to_date(&mut self, committed: Zxid) {
        if committed > self.fl_ref().last_received {
            let why = Refusal::Inconsistent { zxid: committed };
            self.learner_protocol_error("UPTODATE", why);
            return;
        }
        self.raise_commit_known(committed);
        let f = self.fl();
        f.phase = Phase::UpToDate;
        let (leader, epoch) = (f.leader, f.epoch);
        self.apply_enabled = true;
        // The synced history first, then the role (see `leader_establish`).
        self.advance_apply();
        let role = self.learner_role();
        self.out.push(Output::RoleChanged {
            role,
            leader: Some(leader),
            epoch,
        });
    }

    pub(super) fn learner_tick(&mut self) {
        let f = self.fl_ref();
        let limit = if f.phase >= Phase::Synced {
            self.cfg.sync_limit_ticks
        } else {
            self.cfg.init_limit_ticks
        };
        if self.now.0.saturating_sub(f.last_heard.0) > limit {
            self.go_looking();
        }
    }

    pub(super) fn learner_local_sync(&mut self, id: u64) {
        self.fl().syncs_sent.insert(id);
        self.send_leader(SessionMsg::SyncRequest { id });
    }

    pub(super) fn learner_check_syncs(&mut self) {
        let applied = self.applied;
        let f = self.fl();
        if f.syncs_waiting.is_empty() {
            return;
        }
        let (done, keep): (Vec<_>, Vec<_>) =
            f.syncs_waiting.drain(..).partition(|(_, z)| *z <= applied);
        f.syncs_waiting = keep;
        for (id, zxid) in done {
            self.out.push(Output::SyncDone { id, zxid });
        }
    }

    pub(super) fn learner_leave(&mut self, f: Learner) {
        if f.snap.is_some_and(|r| !r.installing) {
            // An interrupted SNAP: its partial file goes; nothing else changed.
            self.issue(StorageCmd::AbortSnapshot, Effect::Marker);
        }
        for id in f
            .syncs_sent
            .iter()
            .copied()
            .chain(f.syncs_waiting.iter().map(|(id, _)| *id))
        {
            self.out.push(Output::SyncFailed {
                id,
                error: ReplicateError::LostQuorum,
            });
        }
        if f.phase == Phase::Syncing
            && f.mode == Some(Mode::Trunc)
            && self.cfg.test_bugs.keep_memory_after_interrupted_trunc
        {
            // Re-introduced ZOOKEEPER-5094 (test switch only): the proposals of the
            // interrupted TRUNC stay in memory as if they were durable, and the
            // next vote and ACKEPOCH advertise them.
            for e in f.buffer {
                if e.zxid.is_next(self.written_last()) {
                    self.durable.last = e.zxid;
                    self.durable.ackable = e.zxid;
                    self.log_bytes += e.payload.len() as u64;
                    self.log.push_back(e);
                }
            }
        }
        // Otherwise the buffer is simply dropped with `f`: only the durable log
        // is ours (I2).
    }
}

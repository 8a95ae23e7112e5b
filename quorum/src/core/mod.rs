//! The sans-IO ZAB core: `Peer::step(now, input) -> outputs`.
//!
//! The core owns no socket, file or clock. Time comes in as [`Tick`]s, messages
//! and storage completions come in as [`Input`]s, and everything the core wants
//! done comes out as [`Output`]s, in the order it must be done: storage commands
//! are executed in the order they are emitted and completed in that order
//! ([`Input::StorageDone`] acknowledges every command up to an id), messages are
//! sent in order per destination.
//!
//! # What the core guarantees (and the checker of `rzk-sim` verifies)
//! - **I1, persist before you tell.** Votes, FOLLOWERINFO, ACKEPOCH, ACK and the
//!   NEWLEADER ACK only claim history that storage has reported durable. Each is
//!   built behind an assertion of that fact.
//! - **I2, memory derived from disk.** The state machine is only given
//!   transactions that are both committed and locally durable, and snapshots only
//!   once installed durably. Proposals received during a synchronisation are held
//!   in memory until NEWLEADER; if the sync is interrupted (of any mode) they are
//!   dropped and what the peer advertises next comes from the durable log only
//!   (ZOOKEEPER-5094, 3642, 2355, 4882).
//! - **currentEpoch after durable.** A learner persists currentEpoch only after
//!   every proposal it received before NEWLEADER is durable, and acknowledges
//!   NEWLEADER only after that (ZOOKEEPER-3911, 4643, 4646, 4785); it sends no ACK
//!   before its NEWLEADER ACK (ZOOKEEPER-4685).
//! - **I3, epoch rollover without election** (docs/zab.md, "Rollover without an
//!   election"): see [`Config::counter_limit`].

mod config;
mod durable;
mod election;
mod io;
mod leader;
mod learner;
mod log;

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use bytes::Bytes;
use rzk_zxid::Zxid;

use crate::message::{Entry, LinkId, Message, SessionMsg};
use crate::{PeerId, ReplicateError, Role};

pub use config::{Config, TestBugs};
use durable::{Effect, ReadFor, SnapRead};
pub use election::Election;
pub use io::{
    CoreError, Epochs, Input, OpId, Output, ReadCmd, ReadData, ReadId, Recovered, Refusal,
    SnapshotRef, StorageCmd, SyncMode, Tick,
};
pub use log::WindowCounts;

/// What storage has confirmed durable.
#[derive(Clone, Copy, Debug, Default)]
struct Durable {
    /// Last durable log zxid (or the snapshot's).
    last: Zxid,
    /// Last zxid this peer may acknowledge: durable, and if it is a rollover
    /// proposal, its fence is durable too.
    ackable: Zxid,
    epochs: Epochs,
}

enum State {
    Looking(Election),
    Leading(Box<leader::Leader>),
    Following(Box<learner::Learner>),
}

/// One ZAB peer, without IO. See the module docs.
pub struct Peer {
    cfg: Config,
    now: Tick,
    out: Vec<Output>,
    durable: Durable,
    /// The epochs of the last `SaveEpochs` emitted (durable or not yet).
    written_epochs: Epochs,
    /// The newest durable snapshot ([`SnapshotRef::EMPTY`] for the empty state).
    snapshot: SnapshotRef,
    /// In-memory window of the log: entries after `log_base`, including those
    /// emitted for writing but not yet durable. Contiguous (`Zxid::is_next`).
    log: VecDeque<Entry>,
    log_base: Zxid,
    /// Payload bytes of `log` (the window's byte bound).
    log_bytes: u64,
    /// Where the available log starts (`log_start <= log_base`): entries in
    /// `(log_start, log_base]` were dropped from memory by the window and are
    /// read from the durable log when a learner needs them. All of them are
    /// applied, hence committed and durable.
    log_start: Zxid,
    /// The epoch segments of `(log_start, log_base]`, oldest first: the first
    /// and last zxid of each. Enough to tell which zxids the log holds and
    /// where each epoch ends without the entries.
    disk_segs: VecDeque<(Zxid, Zxid)>,
    /// Where storage's durable log starts, as far as this peer knows
    /// ([`Input::SnapshotSaved`]'s `log_start`; a recovered or installed
    /// snapshot's zxid): an entry at or below it that leaves memory is gone.
    storage_start: Zxid,
    /// The lowest position a learner may be DIFFed (or TRUNCed) from: the
    /// newest snapshot, or the oldest entry kept in memory below it
    /// (`log_retained_below_snapshot_max`). Below it a learner gets SNAP
    /// even if storage still keeps the log there for older snapshots (a DIFF
    /// of a long log can be larger than the snapshot; ZooKeeper bounds its
    /// txnlog sync by `snapshotSizeFactor` for the same reason).
    diff_floor: Zxid,
    /// Entries dropped from memory by the window, and DIFF syncs served from
    /// the durable log (figures for the simulation and tests).
    window_counts: WindowCounts,
    /// Received or proposed entries not yet emitted for writing because they
    /// belong to an epoch after an uncommitted rollover proposal (I3).
    blocked: VecDeque<Entry>,
    /// The uncommitted rollover proposal in the written log, if any.
    gate: Option<Zxid>,
    ops: VecDeque<(OpId, Effect)>,
    next_op: u64,
    /// Highest zxid known to be committed.
    commit_known: Zxid,
    /// Highest zxid handed to the state machine.
    applied: Zxid,
    /// Whether committed entries may be applied (leader established, or learner
    /// past UPTODATE).
    apply_enabled: bool,
    /// Election round (logical clock).
    round: u64,
    /// Learner synchronisations started, by mode: DIFF, TRUNC, SNAP.
    sync_counts: [u64; 3],
    next_session: u64,
    /// Peers whose connection the transport reported closed and that have not
    /// been heard from since. An election does not wait for their votes.
    links_down: BTreeSet<PeerId>,
    /// The last stale session reported per peer: a deposed leader's queued
    /// messages are reported once, not one line each.
    stale_reported: BTreeMap<PeerId, LinkId>,
    /// Reads asked of storage and not yet answered: SNAP chunks for a learner.
    reads: BTreeMap<ReadId, ReadFor>,
    next_read: u64,
    /// Elections started since this peer began.
    elections: u64,
    /// `Some(sync_in_progress)` between [`Peer::recover`] and
    /// [`Peer::finish_recovery`].
    recovering: Option<bool>,
    state: State,
}

impl Peer {
    /// Starts a peer from what its storage recovered, with the whole log in
    /// `rec.log` (one batch). The first outputs hand the snapshot to the state
    /// machine and start an election. Equivalent to [`Peer::recover`], one
    /// [`Peer::replay`] of `rec.log` and [`Peer::finish_recovery`], whose
    /// outputs it returns together; a driver that streams a long log uses those
    /// three instead, so that no more than the window and one batch of it is
    /// in memory at once.
    pub fn new(
        cfg: Config,
        mut rec: Recovered,
        now: Tick,
    ) -> Result<(Peer, Vec<Output>), CoreError> {
        let log = std::mem::take(&mut rec.log);
        let mut peer = Peer::recover(cfg, rec, now)?;
        let mut out = peer.replay(log)?;
        out.extend(peer.finish_recovery());
        Ok((peer, out))
    }

    /// Starts recovering a peer from its durable epochs, snapshot and sync
    /// marker; `rec.log` must be empty: the log after the snapshot follows in
    /// order through [`Peer::replay`], then [`Peer::finish_recovery`] starts
    /// the election. Until then the peer takes no [`Peer::step`].
    pub fn recover(cfg: Config, rec: Recovered, now: Tick) -> Result<Peer, CoreError> {
        cfg.validate()?;
        if rec.epochs.current > rec.epochs.accepted {
            return Err(CoreError::RecoveredEpochs(format!(
                "currentEpoch {} > acceptedEpoch {}",
                rec.epochs.current, rec.epochs.accepted
            )));
        }
        assert!(rec.log.is_empty(), "the log is given through Peer::replay");
        let snapshot = rec.snapshot.unwrap_or(SnapshotRef::EMPTY);
        let durable = Durable {
            last: snapshot.zxid,
            ackable: snapshot.zxid,
            epochs: rec.epochs,
        };
        let mut peer = Peer {
            now,
            out: Vec::new(),
            durable,
            written_epochs: rec.epochs,
            log_bytes: 0,
            log: VecDeque::new(),
            log_base: snapshot.zxid,
            log_start: snapshot.zxid,
            disk_segs: VecDeque::new(),
            storage_start: snapshot.zxid,
            diff_floor: snapshot.zxid,
            window_counts: WindowCounts::default(),
            blocked: VecDeque::new(),
            gate: None,
            ops: VecDeque::new(),
            next_op: 1,
            commit_known: snapshot.zxid,
            applied: snapshot.zxid,
            apply_enabled: false,
            round: 0,
            sync_counts: [0; 3],
            next_session: 1,
            links_down: BTreeSet::new(),
            stale_reported: BTreeMap::new(),
            elections: 0,
            state: State::Looking(Election::placeholder()),
            snapshot,
            reads: BTreeMap::new(),
            next_read: 1,
            recovering: Some(rec.sync_in_progress),
            cfg,
        };
        // I2: the state machine starts from the durable snapshot only.
        peer.out.push(Output::ApplySnapshot { snapshot });
        Ok(peer)
    }

    /// The next entries of the recovered durable log, in order and contiguous
    /// (those at or below the snapshot are skipped). Returns what to do: the
    /// first call also hands over the snapshot.
    ///
    /// The log after the snapshot is applied once it is known committed (at
    /// UPTODATE or when this peer's leadership is established), because an
    /// uncommitted tail may still be truncated by the next leader (I2). When
    /// this peer is the only voter, everything durable on it is durable on a
    /// quorum, so committed: it is applied here, batch by batch, and the
    /// window is trimmed as it goes (only applied entries leave it, as in
    /// [`Config::log_window_entries_max`]), so a restart holds the window and
    /// one batch, not the whole log. With more voters the entries wait in
    /// memory for the sync that says which of them are committed.
    pub fn replay(&mut self, batch: Vec<Entry>) -> Result<Vec<Output>, CoreError> {
        assert!(self.recovering.is_some(), "replay only during recovery");
        let mut prev = self.written_last();
        let accepted = self.durable.epochs.accepted;
        for e in batch.into_iter().filter(|e| e.zxid > self.snapshot.zxid) {
            if !e.zxid.is_next(prev) {
                return Err(CoreError::RecoveredLogGap { prev, next: e.zxid });
            }
            // Entries of an epoch are written only after that epoch was
            // accepted (a rollover's next epoch after its fence), so the log
            // can never be ahead of acceptedEpoch.
            if e.zxid.epoch() > accepted {
                return Err(CoreError::RecoveredEpochs(format!(
                    "log reaches {} but acceptedEpoch is {accepted}",
                    e.zxid
                )));
            }
            prev = e.zxid;
            self.log_bytes += e.payload.len() as u64;
            self.log.push_back(e);
        }
        self.durable.last = prev;
        self.durable.ackable = prev;
        if self.cfg.voters.len() == 1 && self.is_voter(self.cfg.id) {
            // A quorum of one: durable here is committed.
            self.commit_known = prev;
            self.apply_through(prev);
        }
        self.trim_window();
        Ok(std::mem::take(&mut self.out))
    }

    /// The recovered log is all given ([`Peer::replay`]): the peer starts its
    /// election. Returns what to do.
    pub fn finish_recovery(&mut self) -> Vec<Output> {
        let sync_in_progress = self
            .recovering
            .take()
            .expect("finish_recovery once, after Peer::recover");
        self.recompute_gate();
        // A SNAP install interrupted before its currentEpoch was written (see
        // `raise_current_to_snapshot`) is completed here.
        self.raise_current_to_snapshot(self.snapshot.zxid);
        if sync_in_progress {
            // The last sync was interrupted. Everything this peer will advertise
            // comes from the log just recovered (a prefix of that leader's
            // history, written in order), so the marker can be cleared.
            self.issue(StorageCmd::EndSync, Effect::Marker);
        }
        self.go_looking();
        std::mem::take(&mut self.out)
    }

    /// Feeds one input; returns what to do, in order.
    pub fn step(&mut self, now: Tick, input: Input) -> Vec<Output> {
        debug_assert!(self.recovering.is_none(), "a step before finish_recovery");
        if now > self.now {
            self.now = now;
        }
        match input {
            Input::Message { from, msg } => self.on_message(from, msg),
            Input::Tick => self.on_tick(),
            Input::Propose(proposals) => self.on_propose(proposals),
            Input::Sync { id } => self.on_sync(id),
            Input::StorageDone { op } => self.on_storage_done(op),
            Input::PeerDisconnected { peer } => self.on_peer_disconnected(peer),
            Input::Forward(payload) => self.on_forward(payload),
            Input::SnapshotSaved {
                snapshot,
                log_start,
            } => self.on_snapshot_saved(snapshot, log_start),
            Input::ReadDone { id, result } => self.on_read_done(id, result),
            Input::StorageRefused { op } => self.on_storage_refused(op),
            Input::RelayAttached => self.observer_relay_attached(),
            Input::Relayed { prev, entries } => self.observer_on_relayed(prev, entries),
            Input::RelayEnded => self.observer_relay_ended(),
        }
        // Once per step, after everything the input caused: the scans of just
        // committed entries (INFORM, rollovers) see them in memory.
        self.trim_window();
        std::mem::take(&mut self.out)
    }

    /// This peer's id.
    pub fn id(&self) -> PeerId {
        self.cfg.id
    }

    /// The role as the server sees it.
    pub fn role(&self) -> Role {
        match &self.state {
            State::Leading(l) if l.is_established() => Role::Leader,
            State::Following(f) if f.is_up_to_date() => self.learner_role(),
            _ => Role::Looking,
        }
    }

    /// The established leader this peer follows or is.
    pub fn leader(&self) -> Option<PeerId> {
        match &self.state {
            State::Leading(l) if l.is_established() => Some(self.cfg.id),
            State::Following(f) if f.is_up_to_date() => Some(f.leader),
            _ => None,
        }
    }

    /// The last durable zxid (what this peer may advertise).
    pub fn last_durable_zxid(&self) -> Zxid {
        self.durable.last
    }

    /// The highest zxid applied to the state machine.
    pub fn applied(&self) -> Zxid {
        self.applied
    }

    /// Figures of the bounded in-memory log window.
    pub fn window_counts(&self) -> WindowCounts {
        self.window_counts
    }

    /// Log entries held in memory: the window, and entries that wait for a
    /// rollover proposal to commit before they are written.
    pub fn log_entries_in_memory(&self) -> usize {
        self.log.len() + self.blocked.len()
    }

    /// The state an observer relay (`rzk-observer-master`) starts from: the last
    /// zxid handed to the state machine and the entries emitted for writing
    /// after it, in order. Taken between steps, it is consistent with every
    /// output emitted so far: later `Append`s continue the entries, later
    /// `Apply`s commit them in order (I4; ZOOKEEPER-5088 is a relay that starts
    /// without these entries).
    pub fn relay_snapshot(&self) -> (Zxid, Vec<Entry>) {
        let pending = self
            .log
            .iter()
            .filter(|e| e.zxid > self.applied)
            .cloned()
            .collect();
        (self.applied, pending)
    }

    /// The highest zxid known committed.
    pub fn commit_known(&self) -> Zxid {
        self.commit_known
    }

    /// The durable epochs.
    pub fn durable_epochs(&self) -> Epochs {
        self.durable.epochs
    }

    /// How many learner synchronisations this peer started, by mode: DIFF,
    /// TRUNC, SNAP.
    pub fn sync_counts(&self) -> [u64; 3] {
        self.sync_counts
    }

    /// Elections this peer has started (each time it went looking).
    pub fn elections(&self) -> u64 {
        self.elections
    }

    /// On the leader, every learner session: (id, voting, synced, acked).
    pub fn learner_stats(&self) -> Vec<crate::LearnerStats> {
        match &self.state {
            State::Leading(l) => l.learner_stats(&self.cfg.voters),
            State::Looking(_) | State::Following(_) => Vec::new(),
        }
    }

    /// On the leader, the lowest zxid after which a learner's sync in
    /// progress still reads the durable log (a SNAP transfer's snapshot, a
    /// DIFF from disk): storage that honours it
    /// ([`crate::storage::Storage::commit_snapshot`]'s `hold_after`) keeps
    /// the log after it when it purges, so the sync is never cut short by
    /// snapshots saved meanwhile. `None`: nothing is read.
    pub fn log_needed_after(&self) -> Option<Zxid> {
        match &self.state {
            State::Leading(l) => l.log_needed_after(),
            State::Looking(_) | State::Following(_) => None,
        }
    }

    /// Sync barriers waiting on this peer (on the leader, those of its learners too).
    pub fn pending_syncs(&self) -> usize {
        match &self.state {
            State::Leading(l) => l.pending_syncs(),
            State::Following(f) => f.pending_syncs(),
            State::Looking(_) => 0,
        }
    }

    /// The number of voting members.
    pub fn voter_count(&self) -> usize {
        self.cfg.voters.len()
    }

    /// A one-line description of the peer's state, for traces.
    pub fn describe(&self) -> String {
        let st = match &self.state {
            State::Looking(e) => format!("looking(round {}, vote {:?})", self.round, e.vote.leader),
            State::Leading(l) => l.describe(),
            State::Following(f) => f.describe(),
        };
        format!(
            "{:?} {st} durable={} applied={} commit={} epochs=({},{})",
            self.cfg.id,
            self.durable.last,
            self.applied,
            self.commit_known,
            self.durable.epochs.accepted,
            self.durable.epochs.current
        )
    }

    // ---- shared machinery ----------------------------------------------------

    fn is_voter(&self, id: PeerId) -> bool {
        self.cfg.voters.contains(&id)
    }

    /// A configured member, voting or not.
    fn is_member(&self, id: PeerId) -> bool {
        self.cfg.member_kind(id).is_some()
    }

    /// The role of this peer while it follows an up-to-date session.
    fn learner_role(&self) -> Role {
        if self.cfg.is_observer() {
            Role::Observer
        } else {
            Role::Follower
        }
    }

    fn send(&mut self, to: PeerId, msg: Message) {
        self.out.push(Output::Send { to, msg });
    }

    /// Reports a refused message (I7); stale sessions once per session.
    fn refuse(&mut self, peer: PeerId, msg: &'static str, reason: Refusal) {
        if let Refusal::StaleSession(session) = reason {
            if self.stale_reported.insert(peer, session) == Some(session) {
                return;
            }
        }
        self.out.push(Output::Refused { peer, msg, reason });
    }

    /// A session message that no session of this peer can take.
    fn refuse_stale(&mut self, peer: PeerId, session: LinkId, msg: &SessionMsg) {
        self.refuse(peer, msg.name(), Refusal::StaleSession(session));
    }

    fn on_message(&mut self, from: PeerId, msg: Message) {
        if !self.is_member(from) || from == self.cfg.id {
            return;
        }
        // A message proves the link is up again.
        self.links_down.remove(&from);
        match msg {
            Message::Notification(n) => self.on_notification(from, n),
            Message::Session { session, seq, msg } => match &self.state {
                State::Leading(_) => self.leader_on_session(from, session, seq, msg),
                State::Following(_) => self.learner_on_session(from, session, seq, msg),
                State::Looking(_) => self.election_on_session(from, session, seq, msg),
            },
        }
    }

    fn on_peer_disconnected(&mut self, peer: PeerId) {
        if !self.is_member(peer) || peer == self.cfg.id {
            return;
        }
        self.links_down.insert(peer);
        match &self.state {
            State::Looking(_) => self.election_on_disconnected(peer),
            State::Leading(_) => self.leader_on_disconnected(peer),
            State::Following(f) => {
                if f.leader == peer {
                    // The session's stream is gone: nothing more of it can
                    // arrive, so waiting for `sync_limit_ticks` would only delay the
                    // next election (ZooKeeper's learner leaves on the socket
                    // error too).
                    self.go_looking();
                }
            }
        }
    }

    fn on_tick(&mut self) {
        match &self.state {
            State::Looking(_) => self.election_tick(),
            State::Leading(_) => self.leader_tick(),
            State::Following(_) => self.learner_tick(),
        }
    }

    fn on_propose(&mut self, proposals: Vec<(u64, Bytes)>) {
        match &self.state {
            State::Leading(l) if l.is_established() => self.leader_propose(proposals),
            _ => {
                let leader = self.leader();
                for (id, _) in proposals {
                    self.out.push(Output::ProposeFailed {
                        id,
                        error: ReplicateError::NotLeader { leader },
                    });
                }
            }
        }
    }

    fn on_forward(&mut self, payload: Bytes) {
        match &self.state {
            State::Leading(l) if l.is_established() => {
                let from = self.cfg.id;
                self.out.push(Output::Forwarded { from, payload });
            }
            State::Following(f) if f.is_up_to_date() => self.learner_forward(payload),
            // Lost, as documented: the server closes its clients when it leaves
            // its leader, so nothing waits for this message.
            State::Leading(_) | State::Following(_) | State::Looking(_) => {}
        }
    }

    fn on_sync(&mut self, id: u64) {
        match &self.state {
            State::Leading(l) if l.is_established() => self.leader_local_sync(id),
            State::Following(f) if f.is_up_to_date() => self.learner_local_sync(id),
            _ => {
                let leader = self.leader();
                self.out.push(Output::SyncFailed {
                    id,
                    error: ReplicateError::NotLeader { leader },
                });
            }
        }
    }

    /// Leaves the current role and starts an election.
    fn go_looking(&mut self) {
        match std::mem::replace(&mut self.state, State::Looking(Election::placeholder())) {
            State::Looking(_) => {}
            State::Leading(l) => self.leader_leave(*l),
            State::Following(f) => self.learner_leave(*f),
        }
        // Proposals not yet written were never durable anywhere; they are dropped
        // (I2). Written ones stay: storage will make them durable or a crash loses
        // them, and either way what we advertise is what storage confirmed.
        self.blocked.clear();
        self.apply_enabled = false;
        self.recompute_gate();
        self.out.push(Output::RoleChanged {
            role: Role::Looking,
            leader: None,
            epoch: self.durable.epochs.current,
        });
        self.elections += 1;
        self.start_election();
    }
}

#[cfg(test)]
mod tests;

//! Storage as the core sees it: the commands and reads it issues, and what
//! each completion makes durable. Commands complete in the order they were
//! issued ([`Input::StorageDone`](super::Input::StorageDone) acknowledges
//! every command up to an id), so their effects wait in a queue in that
//! order; reads complete in any order and are matched by id.

use super::{
    Epochs, OpId, Output, Peer, ReadCmd, ReadData, ReadId, SnapshotRef, State, StorageCmd,
};
use crate::message::LinkId;
use crate::PeerId;
use rzk_zxid::Zxid;

/// What becomes durable when a storage command completes.
#[derive(Clone, Debug)]
pub(super) enum Effect {
    /// `ackable`: the last entry that may be acknowledged once durable (all but
    /// a trailing rollover proposal, which waits for its fence).
    Append {
        last: Zxid,
        ackable: Option<Zxid>,
    },
    Truncate {
        after: Zxid,
    },
    /// A SNAP install of learner session `session`.
    Snapshot {
        snapshot: SnapshotRef,
        session: LinkId,
    },
    /// A received snapshot chunk of learner session `session` is stored up to
    /// `end`.
    SnapChunk {
        end: u64,
        session: LinkId,
    },
    Epochs {
        epochs: Epochs,
        fence: Option<Zxid>,
    },
    Marker,
}

/// What a read was for.
#[derive(Clone, Copy, Debug)]
pub(super) enum ReadFor {
    /// A SNAP chunk.
    Snap(SnapRead),
    /// Entries of a DIFF below the window for learner `peer`, session `session`.
    Diff { peer: PeerId, session: LinkId },
}

/// A snapshot chunk read for a learner's SNAP sync.
#[derive(Clone, Copy, Debug)]
pub(super) struct SnapRead {
    pub(super) peer: PeerId,
    pub(super) session: LinkId,
    pub(super) offset: u64,
}

impl Peer {
    pub(super) fn storage_idle(&self) -> bool {
        self.ops.is_empty()
    }

    pub(super) fn issue(&mut self, cmd: StorageCmd, effect: Effect) {
        let op = OpId(self.next_op);
        self.next_op += 1;
        self.ops.push_back((op, effect));
        self.out.push(Output::Storage { op, cmd });
    }

    pub(super) fn save_epochs(&mut self, epochs: Epochs, fence: Option<Zxid>) {
        self.written_epochs = epochs;
        self.issue(
            StorageCmd::SaveEpochs(epochs),
            Effect::Epochs { epochs, fence },
        );
    }

    /// Asks storage for a read; `for_snap` says what it is for.
    pub(super) fn issue_read(&mut self, purpose: ReadFor, cmd: ReadCmd) {
        let id = ReadId(self.next_read);
        self.next_read += 1;
        self.reads.insert(id, purpose);
        self.out.push(Output::Read { id, cmd });
    }

    pub(super) fn on_read_done(&mut self, id: ReadId, result: Result<ReadData, String>) {
        let Some(read) = self.reads.remove(&id) else {
            return;
        };
        if let State::Leading(_) = self.state {
            match read {
                ReadFor::Snap(read) => self.leader_on_snap_read(read, result),
                ReadFor::Diff { peer, session } => self.leader_on_diff_read(peer, session, result),
            }
        }
        // Otherwise the transfer it was for ended with this peer's leadership.
    }

    /// Storage refused `op` (a received snapshot that does not verify): every
    /// command before it is done, `op` changed nothing.
    pub(super) fn on_storage_refused(&mut self, op: OpId) {
        self.on_storage_done(OpId(op.0.saturating_sub(1)));
        let session = match self.ops.pop_front() {
            Some((id, Effect::Snapshot { session, .. } | Effect::SnapChunk { session, .. }))
                if id == op =>
            {
                session
            }
            // Storage refuses only the commands of a snapshot being received;
            // anything else is a broken storage contract.
            other => panic!("storage refused {op:?}; the next command is {other:?}"),
        };
        if let State::Following(f) = &self.state {
            if f.session() == session {
                self.learner_on_snapshot_refused();
            }
        }
    }

    pub(super) fn on_storage_done(&mut self, op: OpId) {
        while let Some((id, _)) = self.ops.front() {
            if *id > op {
                break;
            }
            let (_, effect) = self.ops.pop_front().expect("front exists");
            self.apply_effect(effect);
        }
        self.after_storage();
    }

    fn apply_effect(&mut self, effect: Effect) {
        match effect {
            Effect::Append { last, ackable } => {
                self.durable.last = last;
                if let Some(a) = ackable {
                    self.durable.ackable = self.durable.ackable.max(a);
                }
            }
            Effect::Truncate { after } => {
                self.durable.last = self.durable.last.min(after);
                self.durable.ackable = self.durable.ackable.min(after);
            }
            Effect::Snapshot { snapshot, session } => {
                let zxid = snapshot.zxid;
                // The log starts after the snapshot now, in storage and here:
                // memory changes only once the install is durable, so a refused
                // or interrupted install leaves it as the disk is (I2).
                self.log.clear();
                self.log_bytes = 0;
                self.log_base = zxid;
                self.log_start = zxid;
                self.disk_segs.clear();
                self.storage_start = zxid;
                self.diff_floor = zxid;
                self.gate = None;
                self.durable.last = zxid;
                self.durable.ackable = zxid;
                self.snapshot = snapshot;
                // I2: the state machine sees the snapshot only once it is durable.
                self.applied = zxid;
                self.out.push(Output::ApplySnapshot { snapshot });
                // A snapshot holds committed history only, so it holds the
                // initial history of its own epoch: currentEpoch may rise to it
                // now that it is durable. Left behind, a peer holding committed
                // txns of that epoch would lose votes to a peer of that epoch
                // with fewer of them, which would then cut them away (found in
                // simulation: a SNAP past a rollover).
                self.raise_current_to_snapshot(zxid);
                // Everything in a snapshot is committed.
                self.raise_commit_known(zxid);
                self.learner_snap_installed(session);
            }
            Effect::SnapChunk { end, session } => self.learner_snap_stored(session, end),
            Effect::Epochs { epochs, fence } => {
                self.durable.epochs = epochs;
                if let Some(r) = fence {
                    if self.durable.last >= r && self.durable.ackable < r {
                        self.durable.ackable = r;
                    }
                }
            }
            Effect::Marker => {}
        }
    }

    fn after_storage(&mut self) {
        match &self.state {
            State::Looking(_) => self.election_refresh_own_vote(),
            State::Leading(_) => self.leader_after_storage(),
            State::Following(_) => self.learner_after_storage(),
        }
        self.advance_apply();
    }
}

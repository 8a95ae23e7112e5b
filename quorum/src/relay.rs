//! Feeds an observer relay (`rzk-observer-master`'s [`RelayHub`]) from a
//! peer's own outputs (issue 12, DESIGN I4).
//!
//! While the peer serves (leader, or follower past UPTODATE), every `Append`
//! is a proposal and every `Apply` a commit, in the order the core emitted
//! them. When it starts serving, the hub is reset from
//! [`Peer::relay_snapshot`] taken after that step: the applied zxid and the
//! entries written after it, so a proposal in flight during the sync is in the
//! relay's pending queue (ZOOKEEPER-5088). Any other role change, a snapshot
//! install or a truncation resets the hub (every relay stream ends; observers
//! sync again), and so does the end of the driver.

use std::sync::Arc;

use rzk_observer_master::{RelayHub, SourceSnapshot, Txn};

use crate::core::{Output, Peer, StorageCmd};
use crate::Role;

/// The feeding state of one driver.
pub(crate) struct RelayFeed {
    /// The hub the observer master subscribes to.
    hub: Arc<RelayHub>,
    /// Whether the peer serves and the hub follows its stream.
    serving: bool,
    /// The peer started serving in the current step: reset the hub from its
    /// state once the step's outputs are all seen.
    rebuild: bool,
}

impl RelayFeed {
    pub(crate) fn new(hub: Arc<RelayHub>) -> RelayFeed {
        RelayFeed {
            hub,
            serving: false,
            rebuild: false,
        }
    }

    /// One output of the current step, in order.
    pub(crate) fn on_output(&mut self, o: &Output) {
        match o {
            Output::Storage { cmd, .. } => match cmd {
                StorageCmd::Append(entries) if self.serving => {
                    for e in entries {
                        if let Err(err) = self.hub.proposed(Txn::new(e.zxid, e.payload.clone())) {
                            self.stop(&format!("{err}"));
                            return;
                        }
                    }
                }
                StorageCmd::TruncateAfter(_) | StorageCmd::InstallSnapshot(_) => {
                    self.stop("the log was cut or replaced")
                }
                StorageCmd::Append(_)
                | StorageCmd::SaveEpochs(_)
                | StorageCmd::BeginSync { .. }
                | StorageCmd::EndSync
                | StorageCmd::ReceiveSnapshot(_)
                | StorageCmd::SnapshotChunk { .. }
                | StorageCmd::AbortSnapshot => {}
            },
            Output::Apply(entries) if self.serving => {
                for e in entries {
                    if let Err(err) = self.hub.committed(e.zxid) {
                        self.stop(&format!("{err}"));
                        return;
                    }
                }
            }
            Output::ApplySnapshot { .. } => self.stop("a snapshot was loaded"),
            Output::RoleChanged { role, .. } => {
                self.stop("the role changed");
                self.rebuild = matches!(role, Role::Leader | Role::Follower);
            }
            Output::Apply(_)
            | Output::Read { .. }
            | Output::Send { .. }
            | Output::Proposed { .. }
            | Output::ProposeFailed { .. }
            | Output::SyncDone { .. }
            | Output::SyncFailed { .. }
            | Output::Forwarded { .. }
            | Output::Refused { .. } => {}
        }
    }

    /// The step's outputs are all seen: start following the peer's stream if
    /// it started serving, from its state now.
    pub(crate) fn after_step(&mut self, peer: &Peer) {
        if !std::mem::take(&mut self.rebuild) {
            return;
        }
        let (committed, pending) = peer.relay_snapshot();
        self.hub.reset(SourceSnapshot {
            committed,
            pending: pending
                .into_iter()
                .map(|e| Txn::new(e.zxid, e.payload))
                .collect(),
        });
        self.serving = true;
    }

    /// Stops following: every relay stream ends, the hub keeps its committed
    /// zxid and nothing pending until the peer serves again.
    pub(crate) fn stop(&mut self, why: &str) {
        self.rebuild = false;
        if !self.serving {
            return;
        }
        self.serving = false;
        tracing::debug!(why, "observer relay source reset");
        let committed = self.hub.snapshot().committed;
        self.hub.reset(SourceSnapshot {
            committed,
            pending: Vec::new(),
        });
    }
}

//! What a fan-out needs from its source: one call that returns, atomically, the
//! pending proposals, the last committed zxid and the live stream after them.

use std::collections::VecDeque;
use std::sync::Mutex;

use rzk_zxid::Zxid;
use tokio::sync::broadcast;

use crate::fanout::Txn;

/// The state of a source at one instant: what a fan-out starts from (I4).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SourceSnapshot {
    /// The source's last committed zxid.
    pub committed: Zxid,
    /// The source's proposals logged but not committed, oldest first, contiguous
    /// after `committed` (`Zxid::is_next`). ZOOKEEPER-5088 is a relay built
    /// without these.
    pub pending: Vec<Txn>,
}

/// One change of a source's state, in the source's order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SourceEvent {
    /// A proposal was logged (it is now pending).
    Proposed(Txn),
    /// The oldest pending proposal, of this zxid, was committed.
    Committed(Zxid),
}

/// What ended a live stream. Either way the fan-out built on it is dropped and
/// rebuilt from a new subscription.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum LiveEnd {
    /// The subscriber fell more than the stream's capacity behind; the source
    /// went on without waiting for it.
    #[error("the relay fell {0} events behind its source")]
    Lagged(u64),
    /// The source reset (stopped following, resynced) or went away.
    #[error("the source ended this stream")]
    Closed,
}

/// The live stream of a subscription: every event after the snapshot, in order.
/// Bounded: the source never waits for it; a subscriber that falls behind gets
/// [`LiveEnd::Lagged`].
#[derive(Debug)]
pub struct LiveEvents {
    /// The receiving end of the source's broadcast of this generation.
    rx: broadcast::Receiver<SourceEvent>,
}

impl LiveEvents {
    /// The next event, waiting for it.
    pub async fn next(&mut self) -> Result<SourceEvent, LiveEnd> {
        self.rx.recv().await.map_err(|e| match e {
            broadcast::error::RecvError::Lagged(n) => LiveEnd::Lagged(n),
            broadcast::error::RecvError::Closed => LiveEnd::Closed,
        })
    }

    /// The next event if there is one now (`Ok(None)` when there is none yet).
    pub fn try_next(&mut self) -> Result<Option<SourceEvent>, LiveEnd> {
        match self.rx.try_recv() {
            Ok(event) => Ok(Some(event)),
            Err(broadcast::error::TryRecvError::Empty) => Ok(None),
            Err(broadcast::error::TryRecvError::Lagged(n)) => Err(LiveEnd::Lagged(n)),
            Err(broadcast::error::TryRecvError::Closed) => Err(LiveEnd::Closed),
        }
    }
}

/// A subscription: the snapshot and the stream that continues it.
#[derive(Debug)]
pub struct Subscription {
    /// The source's state when the subscription was taken.
    pub snapshot: SourceSnapshot,
    /// Every event after `snapshot`.
    pub live: LiveEvents,
}

/// The source of a fan-out: a follower (or leader) that logs proposals and
/// learns of commits.
///
/// # Correctness
/// `subscribe` is atomic with respect to the source's own changes: every event
/// is either reflected in the returned snapshot or delivered on the returned
/// stream, never both and never neither. The stream delivers events in the
/// order the source applied them to its own pending queue, so a relay built
/// from a subscription holds the same queue as the source at every point
/// (I4, ZOOKEEPER-5088).
pub trait RelaySource: Send + Sync + 'static {
    /// Takes a subscription.
    fn subscribe(&self) -> Subscription;
}

/// The state a [`RelayHub`] keeps under its lock.
#[derive(Debug)]
struct HubState {
    /// The source's last committed zxid.
    committed: Zxid,
    /// The source's pending proposals, oldest first.
    pending: VecDeque<Txn>,
    /// The sender of the current generation; replaced on reset, which ends every
    /// live stream taken before.
    tx: broadcast::Sender<SourceEvent>,
}

/// A ready-made [`RelaySource`] that a replication driver feeds as it logs
/// proposals and learns of commits.
///
/// The hub changes its state and broadcasts the event under one lock, and
/// `subscribe` copies the state and subscribes under the same lock: that is what
/// makes a subscription atomic. Publishing never waits for a subscriber.
#[derive(Debug)]
pub struct RelayHub {
    /// The state and the current broadcast sender.
    state: Mutex<HubState>,
    /// Events a live stream may fall behind before it ends with `Lagged`.
    live_events_max: usize,
}

/// What a [`RelayHub`] refuses: an event that would make its pending queue
/// disagree with the source's.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HubError {
    /// A proposal that does not follow the last one.
    #[error("proposal {zxid} does not follow {after}")]
    ProposalOutOfOrder {
        /// The last pending (or committed) zxid.
        after: Zxid,
        /// The proposal.
        zxid: Zxid,
    },
    /// A commit of a zxid that is not the oldest pending proposal.
    #[error("commit of {zxid} without a matching proposal (oldest pending: {head:?})")]
    CommitWithoutProposal {
        /// The zxid committed.
        zxid: Zxid,
        /// The oldest pending proposal, if any.
        head: Option<Zxid>,
    },
}

impl RelayHub {
    /// A hub whose source has committed up to `committed` and has nothing
    /// pending. `live_events_max` bounds how far a subscriber may lag.
    pub fn new(committed: Zxid, live_events_max: usize) -> RelayHub {
        let (tx, _) = broadcast::channel(live_events_max.max(1));
        RelayHub {
            state: Mutex::new(HubState {
                committed,
                pending: VecDeque::new(),
                tx,
            }),
            live_events_max: live_events_max.max(1),
        }
    }

    /// The source logged `txn`.
    pub fn proposed(&self, txn: Txn) -> Result<(), HubError> {
        let mut state = self.lock();
        let after = state.pending.back().map_or(state.committed, |t| t.zxid);
        if !txn.zxid.is_next(after) {
            return Err(HubError::ProposalOutOfOrder {
                after,
                zxid: txn.zxid,
            });
        }
        state.pending.push_back(txn.clone());
        // No receiver is not an error: nobody is relaying right now.
        let _ = state.tx.send(SourceEvent::Proposed(txn));
        Ok(())
    }

    /// The source committed `zxid`, its oldest pending proposal.
    pub fn committed(&self, zxid: Zxid) -> Result<(), HubError> {
        let mut state = self.lock();
        let head = state.pending.front().map(|t| t.zxid);
        if head != Some(zxid) {
            return Err(HubError::CommitWithoutProposal { zxid, head });
        }
        state.pending.pop_front();
        state.committed = zxid;
        let _ = state.tx.send(SourceEvent::Committed(zxid));
        Ok(())
    }

    /// The source's history was replaced (a new sync, a new leader): every live
    /// stream ends ([`LiveEnd::Closed`]) and new subscribers start from
    /// `snapshot`.
    pub fn reset(&self, snapshot: SourceSnapshot) {
        let mut state = self.lock();
        let (tx, _) = broadcast::channel(self.live_events_max);
        state.committed = snapshot.committed;
        state.pending = snapshot.pending.into();
        state.tx = tx;
    }

    /// The current snapshot (a copy).
    pub fn snapshot(&self) -> SourceSnapshot {
        self.lock().snapshot()
    }

    /// The lock; a panic while holding it cannot leave the state half-changed
    /// (every change is one push/remove), so a poisoned lock is taken over.
    fn lock(&self) -> std::sync::MutexGuard<'_, HubState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl HubState {
    /// A copy of the state as a snapshot.
    fn snapshot(&self) -> SourceSnapshot {
        SourceSnapshot {
            committed: self.committed,
            pending: self.pending.iter().cloned().collect(),
        }
    }
}

impl RelaySource for RelayHub {
    fn subscribe(&self) -> Subscription {
        let state = self.lock();
        Subscription {
            snapshot: state.snapshot(),
            live: LiveEvents {
                rx: state.tx.subscribe(),
            },
        }
    }
}

//! Observer relays in the simulation (I4).
//!
//! Every peer that serves (the leader and each follower) runs a
//! [`rzk_observer_master::Fanout`] fed by its own core's outputs: each
//! `StorageCmd::Append` is a proposal, each `Output::Apply` a commit. The relay
//! is built when the peer starts serving (`RoleChanged` to leader or follower),
//! from the core's own state after that step ([`Peer::relay_snapshot`]: applied
//! zxid and the entries written after it) — the moment ZooKeeper's follower
//! starts its ObserverMaster, and the moment ZOOKEEPER-5088 loses the proposals
//! in flight. It is dropped on a crash, on any other role change, a snapshot
//! install or a truncation.
//!
//! Simulated observers attach to a relay (followers preferred, the leader as
//! fallback), read their stream at random paces through
//! [`rzk_observer_master::Contiguity`], and resync (attach again at their new
//! master's applied zxid) when their relay is dropped or finds them too slow.
//! The checks: every transaction an observer applies is the next one of the
//! committed sequence (ObserverPrefix); no relay stream ever has a gap or a
//! reordering (ObserverContiguity: with relays built as I4 says, a refusal is
//! a bug; with `Options::bug_5088` it is how the bug is caught); the relay
//! accepts its source's stream (RelaySource); and once faults stop every
//! observer catches up (part of Liveness).
//!
//! Observers are passive: they never feed anything back into the cores, and
//! they draw from their own RNG, so a seed's peers behave exactly as without
//! them.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rzk_observer_master::{
    Contiguity, Disconnect, Fanout, FanoutConfig, ObserverId, SourceSnapshot, Txn,
};
use rzk_quorum::core::{Output, Peer, StorageCmd};
use rzk_quorum::message::Entry;
use rzk_quorum::Role;
use rzk_zxid::Zxid;

use crate::checker::{payload_id, violation, Violation};

/// What the observers did in a run.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ObserverReport {
    /// Transactions applied by observers (all observers together).
    pub applied: u64,
    /// Times an observer (re)attached to a relay after a sync.
    pub attaches: u64,
    /// Relays built from a serving peer's state.
    pub relays_built: u64,
    /// Observers dropped because their relay queue was full.
    pub too_slow: u64,
}

/// One simulated observer.
struct SimObserver {
    /// The node whose relay it follows, while attached.
    master: Option<usize>,
    /// Its contiguity check, from its last sync.
    check: Contiguity,
    /// How many transactions of the committed sequence it holds.
    applied: usize,
}

/// The relays of all nodes and the observers attached to them.
pub(crate) struct Relays {
    /// Observers' own randomness (so the peers' schedule does not change).
    rng: ChaCha8Rng,
    /// The relays' limits and the regression switch.
    config: FanoutConfig,
    /// Per node: its relay while it serves.
    fanouts: Vec<Option<Fanout>>,
    /// Per node: it started serving during the current batch of outputs; its
    /// relay is built once the batch is handled.
    build: Vec<bool>,
    /// The observers.
    observers: Vec<SimObserver>,
    /// Counters for the report.
    pub(crate) report: ObserverReport,
}

impl Relays {
    pub(crate) fn new(seed: u64, nodes: usize, observers: usize, bug_5088: bool) -> Relays {
        Relays {
            rng: ChaCha8Rng::seed_from_u64(seed ^ 0x0b5e_12fe),
            config: FanoutConfig {
                relay_queue_txns_max: 16,
                retained_bytes_max: 64 << 10,
                regression_5088: bug_5088,
                ..FanoutConfig::default()
            },
            fanouts: (0..nodes).map(|_| None).collect(),
            build: vec![false; nodes],
            observers: (0..observers)
                .map(|_| SimObserver {
                    master: None,
                    check: Contiguity::after_sync(Zxid::ZERO),
                    applied: 0,
                })
                .collect(),
            report: ObserverReport::default(),
        }
    }

    fn enabled(&self) -> bool {
        !self.observers.is_empty()
    }

    /// Node `i` emitted `o` (called in output order, before it is handled).
    pub(crate) fn on_output(&mut self, i: usize, o: &Output) -> Result<(), Violation> {
        if !self.enabled() {
            return Ok(());
        }
        match o {
            Output::Storage { cmd, .. } => match cmd {
                StorageCmd::Append(entries) => self.feed(i, entries, false),
                StorageCmd::TruncateAfter(_) | StorageCmd::InstallSnapshot(_) => {
                    self.drop_relay(i);
                    Ok(())
                }
                StorageCmd::SaveEpochs(_)
                | StorageCmd::BeginSync { .. }
                | StorageCmd::EndSync
                | StorageCmd::ReceiveSnapshot(_)
                | StorageCmd::SnapshotChunk { .. }
                | StorageCmd::AbortSnapshot => Ok(()),
            },
            Output::Apply(entries) => self.feed(i, entries, true),
            Output::ApplySnapshot { .. } => {
                self.drop_relay(i);
                Ok(())
            }
            Output::RoleChanged { role, .. } => {
                self.drop_relay(i);
                self.build[i] = matches!(role, Role::Leader | Role::Follower);
                Ok(())
            }
            Output::Send { .. }
            | Output::Read { .. }
            | Output::Proposed { .. }
            | Output::ProposeFailed { .. }
            | Output::SyncDone { .. }
            | Output::SyncFailed { .. }
            | Output::Forwarded { .. }
            | Output::Refused { .. } => Ok(()),
        }
    }

    /// Proposals (`commit == false`) or commits into node `i`'s relay.
    fn feed(&mut self, i: usize, entries: &[Entry], commit: bool) -> Result<(), Violation> {
        let Some(fanout) = self.fanouts[i].as_mut() else {
            return Ok(());
        };
        for e in entries {
            let r = if commit {
                fanout.on_commit(e.zxid)
            } else {
                fanout.on_proposal(Txn::new(e.zxid, e.payload.clone()))
            };
            if let Err(err) = r {
                return Err(violation(
                    "RelaySource",
                    format!("node {} relay refused its core's stream: {err}", i + 1),
                ));
            }
        }
        let dropped = fanout.take_disconnected();
        for (id, why) in dropped {
            if why == Disconnect::TooSlow {
                self.report.too_slow += 1;
            }
            self.observers[id.0 as usize].master = None;
        }
        Ok(())
    }

    /// Node `i`'s batch of outputs is handled: build its relay if it started
    /// serving, from its core's state now (what `subscribe` returns atomically
    /// in the tokio relay).
    pub(crate) fn after_batch(&mut self, i: usize, peer: &Peer) {
        if !std::mem::take(&mut self.build[i]) || !self.enabled() {
            return;
        }
        let (committed, pending) = peer.relay_snapshot();
        let snapshot = SourceSnapshot {
            committed,
            pending: pending
                .into_iter()
                .map(|e| Txn::new(e.zxid, e.payload))
                .collect(),
        };
        match Fanout::new(snapshot, self.config.clone()) {
            Ok(f) => {
                self.fanouts[i] = Some(f);
                self.report.relays_built += 1;
            }
            // Not contiguous: the core's own log says otherwise; the checker's
            // LogContiguity reports that. No relay for this node.
            Err(_) => self.fanouts[i] = None,
        }
    }

    /// Node `i` stops serving or crashed: its relay and its observers' streams end.
    pub(crate) fn drop_relay(&mut self, i: usize) {
        self.build[i] = false;
        if self.fanouts[i].take().is_none() {
            return;
        }
        for o in &mut self.observers {
            if o.master == Some(i) {
                o.master = None;
            }
        }
    }

    /// Every observer reads some of its stream, or syncs and attaches when it
    /// has no relay. `roles[i]` is node `i`'s role (None when down), `sms[i]`
    /// its applied sequence, `global` the committed sequence.
    pub(crate) fn read(
        &mut self,
        roles: &[Option<Role>],
        sms: &[&[(Zxid, u64)]],
        global: &[(Zxid, u64)],
        all: bool,
    ) -> Result<(), Violation> {
        for k in 0..self.observers.len() {
            match self.observers[k].master {
                None => self.attach(k, roles, sms)?,
                Some(m) => self.read_one(k, m, global, all)?,
            }
        }
        Ok(())
    }

    /// Observer `k` syncs from a serving node (followers first, as an observer
    /// with `observerMasterPort` does, the leader as fallback) and attaches.
    fn attach(
        &mut self,
        k: usize,
        roles: &[Option<Role>],
        sms: &[&[(Zxid, u64)]],
    ) -> Result<(), Violation> {
        let have = self.observers[k].applied;
        // A sync never takes an observer back: only nodes at least as far.
        let usable = |role: Role| -> Vec<usize> {
            (0..roles.len())
                .filter(|&i| roles[i] == Some(role))
                .filter(|&i| self.fanouts[i].is_some() && sms[i].len() >= have)
                .collect()
        };
        let mut candidates = usable(Role::Follower);
        if candidates.is_empty() {
            candidates = usable(Role::Leader);
        }
        if candidates.is_empty() {
            return Ok(());
        }
        let m = candidates[self.rng.random_range(0..candidates.len())];
        let fanout = self.fanouts[m].as_mut().expect("filtered");
        let synced_to = fanout.committed();
        let sm_last = sms[m].last().map_or(Zxid::ZERO, |s| s.0);
        if synced_to != sm_last {
            return Err(violation(
                "RelaySource",
                format!(
                    "node {} relay committed {synced_to} but its state machine is at {sm_last}",
                    m + 1
                ),
            ));
        }
        let id = ObserverId(k as u64);
        fanout.detach(id);
        let _ = fanout.take_disconnected();
        fanout.attach(id, synced_to).map_err(|e| {
            violation(
                "RelaySource",
                format!("attach at the relay's own committed zxid: {e}"),
            )
        })?;
        let o = &mut self.observers[k];
        o.master = Some(m);
        o.applied = sms[m].len();
        o.check = Contiguity::after_sync(synced_to);
        self.report.attaches += 1;
        Ok(())
    }

    /// Observer `k` reads from node `m`'s relay.
    fn read_one(
        &mut self,
        k: usize,
        m: usize,
        global: &[(Zxid, u64)],
        all: bool,
    ) -> Result<(), Violation> {
        // At random paces: an observer skips most reads, so queues fill up
        // and the TooSlow path runs too.
        if !all && self.rng.random_bool(0.7) {
            return Ok(());
        }
        let max = if all {
            usize::MAX
        } else {
            self.rng.random_range(1..=32)
        };
        let fanout = self.fanouts[m]
            .as_mut()
            .expect("attached observers have a relay");
        let batch = fanout.pop(ObserverId(k as u64), max);
        let o = &mut self.observers[k];
        for inform in batch {
            let zxid = inform.zxid();
            if let Err(e) = o.check.accept(inform.prev, zxid) {
                return Err(violation(
                    "ObserverContiguity",
                    format!("observer {k} on node {}: {e}", m + 1),
                ));
            }
            let id = payload_id(&Entry {
                zxid,
                payload: inform.txn.payload.clone(),
            });
            if global.get(o.applied) != Some(&(zxid, id)) {
                return Err(violation(
                    "ObserverPrefix",
                    format!(
                        "observer {k} applied {zxid}={id} as txn {} of the committed sequence, which has {:?}",
                        o.applied,
                        global.get(o.applied)
                    ),
                ));
            }
            o.applied += 1;
            self.report.applied += 1;
        }
        Ok(())
    }

    /// Whether every observer is attached and holds `target` transactions.
    pub(crate) fn caught_up(&self, target: usize) -> bool {
        self.observers
            .iter()
            .all(|o| o.master.is_some() && o.applied == target)
    }
}

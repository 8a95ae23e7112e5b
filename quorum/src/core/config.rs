//! A peer's configuration: its membership, its timeouts (in ticks) and its
//! limits, plus the test-only switches that re-introduce known bugs.

use std::collections::BTreeSet;

use rzk_zxid::CounterLimit;

use super::CoreError;
use crate::message::LearnerKind;
use crate::PeerId;

/// Switches that re-introduce known bugs, for the simulation's regression proofs.
/// All off by default; never turn one on outside a test.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TestBugs {
    /// ZOOKEEPER-5094: after an interrupted TRUNC sync, keep the proposals received
    /// in memory and treat them as if they were durable.
    pub keep_memory_after_interrupted_trunc: bool,
}

/// Configuration of one peer.
#[derive(Clone, Debug)]
pub struct Config {
    /// This peer.
    pub id: PeerId,
    /// The voting members (participants). Includes this peer unless it is an
    /// observer. Only voters count towards any quorum (election, epoch
    /// acceptance, NEWLEADER acknowledgements, proposal acknowledgements, the
    /// leadership check of a `sync`).
    pub voters: BTreeSet<PeerId>,
    /// The non-voting members (observers, ZooKeeper's `server.N=...:observer`),
    /// this peer included if it is one. Disjoint from `voters`. An observer
    /// never votes and is never counted in a quorum; it learns the leader from
    /// the voters, syncs from it like a follower and then receives committed
    /// transactions (INFORM) only. Empty by default.
    pub observers: BTreeSet<PeerId>,
    /// The highest zxid counter a leader assigns in one epoch. The proposal that
    /// gets it is the epoch's *rollover proposal* R: every peer that makes R
    /// durable persists acceptedEpoch and currentEpoch = epoch(R)+1 before it
    /// acknowledges R, and no peer writes a proposal of the next epoch before it
    /// knows R committed. The leader carries on in the next epoch, counter 1,
    /// without an election (I3; docs/zab.md, "Rollover without an election").
    pub counter_limit: CounterLimit,
    /// The quiet period after a quorum agrees on a vote (ZooKeeper's finalizeWait).
    pub finalize_wait_ticks: u64,
    /// First interval between re-sent election notifications; doubles up to
    /// `notification_interval_ticks_max`.
    pub notification_interval_ticks_min: u64,
    /// Cap of the notification interval.
    pub notification_interval_ticks_max: u64,
    /// How often the leader pings its learners.
    pub ping_interval_ticks: u64,
    /// Limit for discovery and synchronisation (ZooKeeper's initLimit × tickTime).
    pub init_limit_ticks: u64,
    /// Silence after which a learner drops its leader, and a leader a learner
    /// (syncLimit × tickTime).
    pub sync_limit_ticks: u64,
    /// Maximum proposals per PROPOSAL message.
    pub batch_entries_max: usize,
    /// Maximum size of one proposal's payload.
    pub proposal_bytes_max: usize,
    /// How many log entries at or below the latest snapshot are kept in memory for
    /// DIFF synchronisation; a learner further behind gets SNAP.
    pub log_retained_below_snapshot_max: usize,
    /// The in-memory log window, in entries: entries beyond it that are
    /// durable, committed and applied are dropped from memory (the oldest
    /// first). A learner that needs older ones gets them read from the durable
    /// log ([`ReadCmd::Log`](super::ReadCmd::Log)). Entries not yet applied are never dropped.
    pub log_window_entries_max: usize,
    /// The same bound in payload bytes.
    pub log_window_bytes_max: u64,
    /// Largest chunk of a snapshot file in one SNAP message.
    pub snap_chunk_bytes_max: usize,
    /// Snapshot bytes a leader has read or sent to one learner and the learner
    /// has not yet acknowledged as stored: bounds the memory a SNAP sync takes
    /// on both sides, whatever the snapshot's size.
    pub snap_in_flight_bytes_max: u64,
    /// Committed transactions the leader has sent (INFORM) to one observer and
    /// the observer has not yet acknowledged as durable. Beyond it the observer
    /// is dropped and syncs again: a slow observer never holds the leader's
    /// memory or the voters back (ZooKeeper's observers can lag without
    /// bound; here the bound is explicit).
    pub observer_lag_entries_max: usize,
    /// Set by the driver, different at every start (for example a boot counter);
    /// makes session ids unique across restarts.
    pub incarnation: u64,
    /// Test-only bug switches.
    pub test_bugs: TestBugs,
}

impl Config {
    /// A configuration with ZooKeeper-like timing for one tick = 1 ms.
    pub fn new(id: PeerId, voters: impl IntoIterator<Item = PeerId>) -> Config {
        Config {
            id,
            voters: voters.into_iter().collect(),
            observers: BTreeSet::new(),
            counter_limit: CounterLimit::DEFAULT,
            finalize_wait_ticks: 200,
            notification_interval_ticks_min: 200,
            notification_interval_ticks_max: 60_000,
            ping_interval_ticks: 1_000,
            init_limit_ticks: 20_000,
            sync_limit_ticks: 10_000,
            batch_entries_max: 512,
            proposal_bytes_max: 1 << 20,
            log_retained_below_snapshot_max: 500,
            log_window_entries_max: 10_000,
            log_window_bytes_max: 64 << 20,
            snap_chunk_bytes_max: 1 << 20,
            snap_in_flight_bytes_max: 8 << 20,
            observer_lag_entries_max: 10_000,
            incarnation: 0,
            test_bugs: TestBugs::default(),
        }
    }

    /// The same configuration with these non-voting members (observers).
    pub fn with_observers(mut self, observers: impl IntoIterator<Item = PeerId>) -> Config {
        self.observers = observers.into_iter().collect();
        self
    }

    /// The role member `id` has in this configuration, if it is a member.
    pub fn member_kind(&self, id: PeerId) -> Option<LearnerKind> {
        if self.voters.contains(&id) {
            Some(LearnerKind::Participant)
        } else if self.observers.contains(&id) {
            Some(LearnerKind::Observer)
        } else {
            None
        }
    }

    /// Whether this peer is an observer.
    pub fn is_observer(&self) -> bool {
        self.observers.contains(&self.id)
    }

    /// Checks the membership: at least one voter, voters and observers
    /// disjoint, this peer one of them.
    pub fn validate(&self) -> Result<(), CoreError> {
        if self.voters.is_empty() {
            return Err(CoreError::InvalidConfig("no voting member".into()));
        }
        if let Some(both) = self.voters.intersection(&self.observers).next() {
            return Err(CoreError::InvalidConfig(format!(
                "server {} is both a voter and an observer",
                both.0
            )));
        }
        if self.member_kind(self.id).is_none() {
            return Err(CoreError::InvalidConfig(format!(
                "peer {} is neither a voter nor an observer",
                self.id.0
            )));
        }
        Ok(())
    }

    pub(super) fn quorum(&self) -> usize {
        self.voters.len() / 2 + 1
    }
}

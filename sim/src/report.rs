//! What a run reports: [`Report`] when every property held, [`Failure`]
//! when one did not, [`FailoverReport`] for [`crate::failover`].

use crate::{ObserverReport, ServerReport, Violation};

/// What a passing run did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Report {
    /// A hash of the whole event trace; equal for two runs of one seed.
    pub trace_hash: u64,
    /// Simulated milliseconds run.
    pub sim_ms: u64,
    /// Transactions acknowledged to clients.
    pub acked: usize,
    /// Crashes injected.
    pub crashes: u64,
    /// Partitions injected.
    pub partitions: u64,
    /// Sync modes seen: DIFF, TRUNC, SNAP.
    pub syncs: [u64; 3],
    /// Epoch rollovers committed.
    pub rollovers: u64,
    /// Sync barriers completed.
    pub sync_barriers: u64,
    /// Connection losses reported to peers (`Input::PeerDisconnected`).
    pub link_downs: u64,
    /// SNAP chunks sent in all.
    pub snap_chunks: u64,
    /// Received snapshots storage refused (a chunk corrupted on the way).
    pub snaps_refused: u64,
    /// Peer messages refused by a core (`Output::Refused`): stale sessions,
    /// broken streams, and the bad input the faults produce.
    pub refused: u64,
    /// What the simulated observers did.
    pub observers: ObserverReport,
    /// Transactions applied by observer members, all together.
    pub member_applied: u64,
    /// INFORM messages delivered to observer members.
    pub informs: u64,
    /// Times an observer member became `Role::Observer` (a completed sync).
    pub member_syncs: u64,
    /// Reads of the durable log for a DIFF below a leader's in-memory window
    /// (`ReadCmd::Log`), and the entries they returned.
    pub log_reads: u64,
    /// Entries those reads returned.
    pub log_read_entries: u64,
    /// SNAP transfers that went on past a newer snapshot of their leader
    /// (counted per snapshot), that read their tail from the durable log,
    /// and that were dropped because storage purged their tail.
    pub snaps_outlived_snapshot: u64,
    /// See `snaps_outlived_snapshot`.
    pub snap_tails_from_disk: u64,
    /// See `snaps_outlived_snapshot`.
    pub snaps_purged: u64,
    /// What the server-level simulation did (with `Options::server`).
    pub server: Option<ServerReport>,
}

/// A failing run: the seed, the property, and the last events.
#[derive(Clone, Debug)]
pub struct Failure {
    /// The seed that fails.
    pub seed: u64,
    /// The violated property.
    pub violation: Violation,
    /// The simulated time of the violation.
    pub at_ms: u64,
    /// The last events before it, and each peer's state.
    pub trace: Vec<String>,
    /// The command that replays this run.
    pub replay: String,
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "seed {} violated {} at {} ms: {}",
            self.seed, self.violation.property, self.at_ms, self.violation.detail
        )?;
        for line in &self.trace {
            writeln!(f, "  {line}")?;
        }
        write!(f, "replay: {}", self.replay)
    }
}

/// What [`crate::failover`] measured.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FailoverReport {
    /// For each kill, simulated milliseconds from the kill of the established
    /// leader to the first write a new leader got acknowledged.
    pub times_ms: Vec<u64>,
    /// A hash of the whole event trace; equal for two runs of one seed.
    pub trace_hash: u64,
}

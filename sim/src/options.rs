//! What a run simulates ([`Options`]), and the command line that replays a
//! run with the same options (`src/main.rs` reads it).

use rzk_quorum::core::TestBugs;

use crate::ServerOptions;

/// What a run simulates.
#[derive(Clone, Debug)]
pub struct Options {
    /// Number of peers.
    pub nodes: usize,
    /// Simulated milliseconds with faults and client load.
    pub fault_ms: u64,
    /// Bound for convergence after the faults stop (Liveness).
    pub settle_ms: u64,
    /// The zxid counter limit; `None` lets each seed pick (mostly the default,
    /// sometimes a low one so the epoch rollover runs).
    pub counter_limit: Option<u32>,
    /// Bug switches to re-introduce (regression proofs).
    pub bugs: TestBugs,
    /// Probability that a message is lost.
    pub loss: f64,
    /// Probability that a message is delivered twice.
    pub duplicate: f64,
    /// Probability that a message overtakes earlier ones on its link (links are
    /// otherwise FIFO, like the gRPC streams they stand for).
    pub reorder: f64,
    /// Whether to crash and restart peers.
    pub crashes: bool,
    /// Whether to partition the network.
    pub partitions: bool,
    /// Probability that a peer is told (`Input::PeerDisconnected`) when another
    /// peer it can reach crashes, as a killed process's connections are reset
    /// by its kernel. The rest of the time the crash is silent (a power loss, a
    /// frozen machine) and only timeouts find it.
    pub disconnect_notice: f64,
    /// Whether connections are reset at random (both ends are told; what was
    /// in flight on the link is lost).
    pub link_resets: bool,
    /// How many trace lines a failure report keeps.
    pub trace_lines: usize,
    /// Whether to check I1 on every message (AdvertisedDurable). Turned off only
    /// to show what a violation leads to further on (a log gap, a lost txn).
    pub check_claims: bool,
    /// Simulated observers following the relays (`rzk-observer-master`) that
    /// the leader and every follower run; 0 runs none.
    pub observers: usize,
    /// Regression switch for ZOOKEEPER-5088: relays start from the committed
    /// zxid only, without the proposals in flight, and skip unmatched commits.
    pub bug_5088: bool,
    /// Observer *members*: non-voting peers of the quorum core that sync from
    /// the leader and receive INFORM, besides the `nodes` voters. `None` lets
    /// each seed pick 0, 1 or 2 (from its own RNG, so a seed that picks 0 runs
    /// exactly as without them).
    pub observer_members: Option<usize>,
    /// Snapshots each peer's storage retains (`snapRetainCount`): the log is
    /// kept after the oldest of them, as `rzk-wal` keeps it.
    pub snap_retain_count: usize,
    /// Simulated milliseconds between two snapshots (of a random peer),
    /// drawn from `lo..hi`.
    pub snapshot_interval_ms: (u64, u64),
    /// Whether storage keeps the log a leader's sync in progress still reads
    /// (`Peer::log_needed_after`) when it purges, as `rzk-wal` does. Off, a
    /// SNAP transfer lasting longer than `snap_retain_count` snapshots starts
    /// over.
    pub hold_log_for_syncs: bool,
    /// Simulated milliseconds between two crashes, drawn from `lo..hi`.
    pub crash_interval_ms: (u64, u64),
    /// Probability of a crash right after a step of a learner's sync.
    pub sync_crash: f64,
    /// Simulated milliseconds from a partition's heal to the next partition,
    /// drawn from `lo..hi`.
    pub partition_gap_ms: (u64, u64),
    /// Simulated milliseconds between two connection resets, drawn from
    /// `lo..hi`.
    pub link_reset_interval_ms: (u64, u64),
    /// The server-level simulation: every peer also runs rzk's server core,
    /// and simulated ZooKeeper clients keep sessions on them (`None`: the
    /// quorum alone, with its own simulated clients).
    pub server: Option<ServerOptions>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            nodes: 3,
            fault_ms: 20_000,
            settle_ms: 20_000,
            counter_limit: None,
            bugs: TestBugs::default(),
            loss: 0.01,
            duplicate: 0.005,
            reorder: 0.01,
            crashes: true,
            partitions: true,
            disconnect_notice: 0.8,
            link_resets: true,
            trace_lines: 60,
            check_claims: true,
            observers: 2,
            bug_5088: false,
            observer_members: None,
            snap_retain_count: 3,
            snapshot_interval_ms: (100, 800),
            hold_log_for_syncs: true,
            crash_interval_ms: (500, 2500),
            sync_crash: 0.02,
            partition_gap_ms: (200, 2000),
            link_reset_interval_ms: (300, 3000),
            server: None,
        }
    }
}

impl Options {
    /// The `rzk-sim` command that replays seed `seed` with these options;
    /// `mode` is appended before the trace length (`--failover N`).
    pub(crate) fn replay_command(&self, seed: u64, mode: &str) -> String {
        let opts = self;
        let mut replay = format!(
            "cargo run -p rzk-sim --release -- --seed {seed} --nodes {} --fault-ms {}{mode}",
            opts.nodes, opts.fault_ms
        );
        if opts.settle_ms != Options::default().settle_ms {
            replay.push_str(&format!(" --settle-ms {}", opts.settle_ms));
        }
        if let Some(l) = opts.counter_limit {
            replay.push_str(&format!(" --limit {l}"));
        }
        if opts.bugs.keep_memory_after_interrupted_trunc {
            replay.push_str(" --bug-5094");
        }
        if !opts.check_claims {
            replay.push_str(" --no-claims-check");
        }
        if opts.observers != Options::default().observers {
            replay.push_str(&format!(" --observers {}", opts.observers));
        }
        if opts.bug_5088 {
            replay.push_str(" --bug-5088");
        }
        if let Some(m) = opts.observer_members {
            replay.push_str(&format!(" --observer-members {m}"));
        }
        if opts.disconnect_notice == 0.0 && !opts.link_resets {
            replay.push_str(" --no-disconnects");
        }
        if let Some(s) = &opts.server {
            replay.push_str(&format!(" --server --clients {}", s.clients));
            if s.bugs.answer_sync_before_apply {
                replay.push_str(" --bug-sync-before-apply");
            }
            if s.bugs.apply_out_of_order {
                replay.push_str(" --bug-apply-out-of-order");
            }
        }
        replay.push_str(" --trace 5000");
        replay
    }
}

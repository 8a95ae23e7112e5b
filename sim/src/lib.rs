//! `rzk-sim`: deterministic simulation of `rzk-quorum`.
//!
//! N peers (3 or 5) run the sans-IO core ([`rzk_quorum::core::Peer`]) under a
//! simulated network (delay, loss, reordering, duplication, partitions and
//! healing), a simulated disk (only completed writes are durable; on a crash a
//! random prefix of the uncompleted ones survives, the last record possibly torn
//! off), a simulated clock, and clients that propose and `sync`. Peers crash and
//! restart at random points, including right after each step of every sync mode.
//!
//! After every step a checker asserts ZAB's safety properties by their
//! specification names — PrefixConsistency, Integrity, Agreement, TotalOrder,
//! LocalPrimaryOrder, GlobalPrimaryOrder, PrimaryIntegrity, Leadership — plus:
//! no acknowledged proposal is lost, zxids strictly increase in every log
//! (LogContiguity), nothing a peer advertised was beyond its durable log (I1),
//! epochs never go back and never trail the log (EpochMonotonicity, EpochFence),
//! a truncation never removes a committed txn (CommittedLogDurability), and a
//! sync barrier covers every write acknowledged before it (SyncLinearizable, I6b).
//! When faults stop, a leader must be elected and every peer must converge within
//! a bounded simulated time (Liveness).
//!
//! With [`Options::server`] every peer also runs rzk-server's core over its
//! quorum core, and simulated ZooKeeper clients check what they see on every
//! reply (session order, reads against the committed history, writes,
//! `sync`, watches before replies, ephemerals with their sessions): see the
//! `server` module and [`ServerOptions`].
//!
//! Every run is a pure function of its seed (ChaCha RNG, no wall clock, no hash
//! map iteration), so a failure replays exactly:
//!
//! ```
//! let opts = rzk_sim::Options::default();
//! let report = rzk_sim::run(7, &opts).expect("seed 7 passes");
//! assert_eq!(report.trace_hash, rzk_sim::run(7, &opts).unwrap().trace_hash);
//! ```

#![deny(missing_docs)]

mod checker;
mod relays;
mod server;

use std::collections::{BTreeMap, VecDeque};

use bytes::Bytes;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rzk_quorum::core::{
    Config, Input, OpId, Output, Peer, ReadCmd, ReadData, ReadId, Recovered, SnapshotRef,
    StorageCmd, TestBugs, Tick,
};
use rzk_quorum::message::{Entry, Message, PeerState, SessionMsg};
use rzk_quorum::{PeerId, Role};
use rzk_zxid::{CounterLimit, Zxid};

pub use checker::Violation;
use checker::{payload_id, violation, Checker, Disk};
pub use relays::ObserverReport;
pub use rzk_server::core::CoreBugs;
pub use server::{ServerOptions, ServerReport};

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
    /// the leader and every follower run (issue 12); 0 runs none.
    pub observers: usize,
    /// Regression switch for ZOOKEEPER-5088: relays start from the committed
    /// zxid only, without the proposals in flight, and skip unmatched commits.
    pub bug_5088: bool,
    /// Observer *members* (issue 12): non-voting peers of the quorum core that
    /// sync from the leader and receive INFORM, besides the `nodes` voters.
    /// `None` lets each seed pick 0, 1 or 2 (from its own RNG, so a seed that
    /// picks 0 runs exactly as without them).
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
    /// Transactions applied by observer members (issue 12), all together.
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

#[derive(Clone, Debug)]
enum Event {
    Deliver {
        to: usize,
        from: usize,
        msg: Message,
    },
    StorageDone {
        node: usize,
        incarnation: u64,
    },
    Tick {
        node: usize,
        incarnation: u64,
    },
    Client,
    Crash {
        node: usize,
    },
    Restart {
        node: usize,
    },
    Partition,
    Heal,
    Snapshot,
    ClientSync,
    /// A storage read of `node` completes.
    ReadDone {
        node: usize,
        incarnation: u64,
        id: ReadId,
        result: Result<ReadData, String>,
    },
    /// The transport of `to` reports that its connection to `peer` ended.
    LinkDown {
        to: usize,
        peer: usize,
        incarnation: u64,
    },
    /// A random connection is reset.
    LinkReset,
    /// An event of the server-level simulation.
    Server(server::ServerEvent),
}

struct Node {
    id: PeerId,
    peer: Option<Peer>,
    incarnation: u64,
    disk: Disk,
    /// Commands issued and not yet completed (not durable).
    inflight: VecDeque<(OpId, StorageCmd)>,
    done_scheduled: bool,
    /// The state machine: the delivered sequence.
    sm: Vec<(Zxid, u64)>,
    /// Proposal ids this node proposed as leader: request id → (zxid, payload).
    proposed: BTreeMap<u64, u64>,
    /// Pending client syncs: id → max acked zxid when issued.
    syncs: BTreeMap<u64, Zxid>,
    /// The epoch this node is the established leader of, if it leads.
    leading: Option<rzk_zxid::Epoch>,
    /// Client writes this node acknowledged as leader (all incarnations).
    acks: u64,
}

struct World {
    opts: Options,
    rng: ChaCha8Rng,
    /// The sizes of the batches a restart replays its log in: their own RNG,
    /// so a seed's run is what it was before the replay was batched.
    replay_rng: ChaCha8Rng,
    now: u64,
    seq: u64,
    events: BTreeMap<(u64, u64), Event>,
    nodes: Vec<Node>,
    /// Partition groups: node → group; messages cross groups only when equal.
    group: Vec<u8>,
    /// Latest scheduled delivery per link (from, to), for FIFO order.
    link_last: BTreeMap<(usize, usize), u64>,
    checker: Checker,
    hash: u64,
    ring: VecDeque<String>,
    next_payload: u64,
    next_request: u64,
    report: Report,
    limit: CounterLimit,
    faults_on: bool,
    events_since_check: u64,
    /// SNAP chunk size and in-flight limit of this seed's peers.
    snap_chunk: usize,
    snap_window: u64,
    /// The nodes' observer relays and the simulated observers.
    relays: relays::Relays,
    /// Voting members: nodes `0..voters`; the rest are observer members.
    voters: usize,
    /// This seed's `observer_lag_entries_max` (sometimes small, so slow
    /// observers are dropped and resync).
    observer_lag: usize,
    /// This seed's in-memory log window (entries, payload bytes): small, so
    /// entries leave memory and DIFFs are read from the durable log.
    window: (usize, u64),
    /// The server-level simulation, with `Options::server`.
    server: Option<Box<server::ServerMode>>,
}

const TICK_MS: u64 = 10;

fn fnv(h: u64, x: u64) -> u64 {
    let mut h = h;
    for b in x.to_le_bytes() {
        h ^= b as u64;
        h = h.wrapping_mul(0x100000001b3);
    }
    h
}

fn sm_encode(sm: &[(Zxid, u64)]) -> Bytes {
    let mut v = Vec::with_capacity(sm.len() * 16);
    for (z, id) in sm {
        v.extend_from_slice(&z.as_u64().to_le_bytes());
        v.extend_from_slice(&id.to_le_bytes());
    }
    Bytes::from(v)
}

/// The simulated storage's file checksum (FNV-1a, 32 bits).
fn checksum(b: &[u8]) -> u32 {
    b.iter().fold(0x811c9dc5u32, |h, x| {
        (h ^ *x as u32).wrapping_mul(0x01000193)
    })
}

fn sm_decode(b: &[u8]) -> Vec<(Zxid, u64)> {
    b.chunks_exact(16)
        .map(|c| {
            let z = u64::from_le_bytes(c[..8].try_into().expect("8 bytes"));
            let id = u64::from_le_bytes(c[8..].try_into().expect("8 bytes"));
            (Zxid::from_u64(z), id)
        })
        .collect()
}

/// Runs one seed. `Ok` if every property held and the peers converged.
pub fn run(seed: u64, opts: &Options) -> Result<Report, Box<Failure>> {
    let mut w = World::new(seed, opts.clone());
    match guarded(&mut w, World::run) {
        Ok(()) => {
            for i in 0..w.nodes.len() {
                w.harvest(i);
            }
            let mut r = w.report.clone();
            r.trace_hash = w.hash;
            r.sim_ms = w.now;
            r.acked = w.checker.acked.len();
            r.observers = w.relays.report.clone();
            r.server = w.server.as_ref().map(|s| s.report());
            Ok(r)
        }
        Err(v) => Err(w.failure(seed, v, "")),
    }
}

/// What [`failover`] measured.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FailoverReport {
    /// For each kill, simulated milliseconds from the kill of the established
    /// leader to the first write a new leader got acknowledged.
    pub times_ms: Vec<u64>,
    /// A hash of the whole event trace; equal for two runs of one seed.
    pub trace_hash: u64,
}

/// Kills the established leader `kills` times, with no other fault (no loss,
/// partition or random crash, whatever `opts` says), and measures in simulated
/// time how long each takes from the kill to the first write acknowledged by
/// the next leader. The killed peer restarts 50 ms after that and the next kill
/// waits for the ensemble to converge. `opts.disconnect_notice` says whether
/// the survivors' transports report the lost connection (1.0: a killed
/// process; 0.0: a silent failure only `sync_limit_ticks` finds). Every property is
/// checked as in [`run`].
pub fn failover(seed: u64, opts: &Options, kills: usize) -> Result<FailoverReport, Box<Failure>> {
    let mut o = opts.clone();
    o.loss = 0.0;
    o.duplicate = 0.0;
    o.reorder = 0.0;
    o.crashes = false;
    o.partitions = false;
    o.link_resets = false;
    let mut w = World::new(seed, o);
    match guarded(&mut w, |w| w.run_failover(kills)) {
        Ok(times_ms) => Ok(FailoverReport {
            times_ms,
            trace_hash: w.hash,
        }),
        Err(v) => Err(w.failure(seed, v, &format!(" --failover {kills}"))),
    }
}

/// Runs `f`, turning an assertion inside the core (STYLE rule 2) into a
/// failure of the seed too.
fn guarded<T>(
    w: &mut World,
    f: impl FnOnce(&mut World) -> Result<T, Violation>,
) -> Result<T, Violation> {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(w))) {
        Ok(r) => r,
        Err(p) => {
            let msg = p
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "panic".into());
            Err(violation("CoreAssertion", msg))
        }
    }
}

impl World {
    fn new(seed: u64, opts: Options) -> World {
        let _ = seed;
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let limit = match opts.counter_limit {
            Some(l) => CounterLimit::new(l),
            None if rng.random_bool(0.25) => CounterLimit::new(rng.random_range(3..40)),
            None => CounterLimit::DEFAULT,
        };
        // Observer members come from their own RNG: a seed without them draws
        // exactly what it drew before they existed.
        let mut side = ChaCha8Rng::seed_from_u64(seed ^ 0x0b5e_12ee_0b5e_12ee);
        let members = opts
            .observer_members
            .unwrap_or(match side.random_range(0..4) {
                0 | 1 => 0,
                2 => 1,
                _ => 2,
            });
        let observer_lag = if side.random_bool(0.3) {
            side.random_range(4..64)
        } else {
            Config::new(PeerId(1), [PeerId(1)]).observer_lag_entries_max
        };
        let voters = opts.nodes;
        let total = voters + members;
        let nodes = (0..total)
            .map(|i| Node {
                id: PeerId(i as u64 + 1),
                peer: None,
                incarnation: 0,
                disk: Disk::default(),
                inflight: VecDeque::new(),
                done_scheduled: false,
                sm: Vec::new(),
                proposed: BTreeMap::new(),
                syncs: BTreeMap::new(),
                leading: None,
                acks: 0,
            })
            .collect();
        let snap_chunk = rng.random_range(16..512);
        let snap_window = (snap_chunk * rng.random_range(1..5)) as u64;
        let window = (rng.random_range(2..48), rng.random_range(64..2048));
        let server = opts
            .server
            .clone()
            .map(|o| Box::new(server::ServerMode::new(seed, o, total)));
        World {
            server,
            replay_rng: ChaCha8Rng::seed_from_u64(seed ^ 0x7e91_a700_7e91_a700),
            window,
            snap_chunk,
            snap_window,
            relays: relays::Relays::new(seed, total, opts.observers, opts.bug_5088),
            group: vec![0; total],
            voters,
            observer_lag,
            link_last: BTreeMap::new(),
            opts,
            rng,
            now: 0,
            seq: 0,
            events: BTreeMap::new(),
            nodes,
            checker: Checker::default(),
            hash: 0xcbf29ce484222325,
            ring: VecDeque::new(),
            next_payload: 1,
            next_request: 1,
            report: Report::default(),
            limit,
            faults_on: true,
            events_since_check: 0,
        }
    }

    fn failure(&self, seed: u64, v: Violation, mode: &str) -> Box<Failure> {
        let opts = &self.opts;
        let mut trace: Vec<String> = self.ring.iter().cloned().collect();
        for n in &self.nodes {
            trace.push(match &n.peer {
                Some(p) => format!("state {}", p.describe()),
                None => format!("state {:?} down, disk last {}", n.id, n.disk.last()),
            });
        }
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
        Box::new(Failure {
            seed,
            violation: v,
            at_ms: self.now,
            trace,
            replay,
        })
    }

    fn schedule(&mut self, at: u64, ev: Event) {
        self.seq += 1;
        self.events.insert((at, self.seq), ev);
    }

    fn note(&mut self, line: impl FnOnce() -> String) {
        if self.ring.len() >= self.opts.trace_lines {
            self.ring.pop_front();
        }
        let now = self.now;
        self.ring.push_back(format!("{now:>6} {}", line()));
    }

    fn config(&self, i: usize) -> Config {
        let ids = self.nodes.iter().map(|n| n.id);
        let mut cfg = Config::new(self.nodes[i].id, ids.clone().take(self.voters))
            .with_observers(ids.skip(self.voters));
        cfg.observer_lag_entries_max = self.observer_lag;
        cfg.counter_limit = self.limit;
        cfg.finalize_wait_ticks = 20;
        cfg.notification_interval_ticks_min = 20;
        cfg.notification_interval_ticks_max = 400;
        cfg.ping_interval_ticks = 30;
        cfg.init_limit_ticks = 600;
        cfg.sync_limit_ticks = 200;
        cfg.batch_entries_max = 16;
        cfg.log_retained_below_snapshot_max = 8;
        cfg.snap_chunk_bytes_max = self.snap_chunk;
        cfg.snap_in_flight_bytes_max = self.snap_window;
        (cfg.log_window_entries_max, cfg.log_window_bytes_max) = self.window;
        cfg.incarnation = self.nodes[i].incarnation;
        cfg.test_bugs = self.opts.bugs;
        cfg
    }

    fn start(&mut self, i: usize) -> Result<(), Violation> {
        let n = &mut self.nodes[i];
        n.incarnation += 1;
        n.inflight.clear();
        n.done_scheduled = false;
        n.sm.clear();
        n.proposed.clear();
        n.syncs.clear();
        n.leading = None;
        // Temporary files and open descriptors are gone with the process.
        n.disk.incoming = None;
        n.disk.retained.clear();
        let rec = Recovered {
            epochs: n.disk.epochs,
            snapshot: n.disk.snapshot.as_ref().map(|s| s.0),
            log: Vec::new(),
            sync_in_progress: n.disk.marker,
        };
        let log = n.disk.log.clone();
        let cfg = self.config(i);
        let cannot = |id: PeerId, e: rzk_quorum::core::CoreError| {
            violation("Recovery", format!("{id:?} cannot restart: {e}"))
        };
        let id = self.nodes[i].id;
        let mut peer = Peer::recover(cfg, rec, Tick(self.now)).map_err(|e| cannot(id, e))?;
        // The log is replayed in batches of a random size, as the driver
        // streams it from storage, so every restart exercises the batching.
        let batch_max = self.replay_rng.random_range(1..=8usize);
        let mut out = Vec::new();
        let mut rest = log.into_iter().peekable();
        while rest.peek().is_some() {
            let n = self.replay_rng.random_range(1..=batch_max);
            let batch: Vec<_> = rest.by_ref().take(n).collect();
            out.extend(peer.replay(batch).map_err(|e| cannot(id, e))?);
        }
        out.extend(peer.finish_recovery());
        self.nodes[i].peer = Some(peer);
        if self.server.is_some() {
            self.server_start(i);
        }
        let inc = self.nodes[i].incarnation;
        let at = self.now + 1 + self.rng.random_range(0..TICK_MS);
        self.schedule(
            at,
            Event::Tick {
                node: i,
                incarnation: inc,
            },
        );
        self.handle_outputs(i, out)
    }

    fn run(&mut self) -> Result<(), Violation> {
        for i in 0..self.nodes.len() {
            self.start(i)?;
        }
        if self.server.is_some() {
            // The server cores make their own snapshots; the clients are
            // ZooKeeper sessions on them.
            self.server_begin();
        } else {
            self.schedule(50, Event::Client);
            self.schedule(300, Event::Snapshot);
            self.schedule(200, Event::ClientSync);
        }
        if self.opts.crashes {
            let at = self.rng.random_range(200..1500);
            let node = self.rng.random_range(0..self.nodes.len());
            self.schedule(at, Event::Crash { node });
        }
        if self.opts.partitions {
            let at = self.rng.random_range(300..2000);
            self.schedule(at, Event::Partition);
        }
        if self.opts.link_resets {
            let at = self.rng.random_range(300..3000);
            self.schedule(at, Event::LinkReset);
        }
        let fault_end = self.opts.fault_ms;
        let end = fault_end + self.opts.settle_ms;
        let mut next_converge_check = fault_end;
        while let Some((&(at, seq), _)) = self.events.iter().next() {
            if at > end {
                break;
            }
            let ev = self.events.remove(&(at, seq)).expect("present");
            self.now = at;
            if self.faults_on && at >= fault_end {
                self.stop_faults()?;
            }
            self.dispatch(ev)?;
            self.events_since_check += 1;
            if self.events_since_check >= 500 {
                self.events_since_check = 0;
                self.check_acked_durable()?;
            }
            if !self.faults_on && at >= next_converge_check {
                next_converge_check = at + 100;
                if self.converged() {
                    return self.final_checks();
                }
            }
        }
        Err(violation(
            "Liveness",
            format!(
                "no convergence within {} ms after faults stopped",
                self.opts.settle_ms
            ),
        ))
    }

    /// See [`failover`].
    fn run_failover(&mut self, kills: usize) -> Result<Vec<u64>, Violation> {
        for i in 0..self.nodes.len() {
            self.start(i)?;
        }
        self.schedule(50, Event::Client);
        self.schedule(300, Event::Snapshot);
        self.schedule(200, Event::ClientSync);
        let mut times = Vec::new();
        // (killed node, when, writes acknowledged by the others until then)
        let mut killed: Option<(usize, u64, u64)> = None;
        let mut next_kill = 500;
        let end = 60_000 * (kills as u64 + 1);
        let others_acks = |w: &World, k: usize| -> u64 {
            (0..w.nodes.len())
                .filter(|i| *i != k)
                .map(|i| w.nodes[i].acks)
                .sum()
        };
        while let Some((&(at, seq), _)) = self.events.iter().next() {
            if at > end {
                break;
            }
            let ev = self.events.remove(&(at, seq)).expect("present");
            self.now = at;
            self.dispatch(ev)?;
            match killed {
                None if self.now >= next_kill && self.converged() => {
                    let l = (0..self.nodes.len())
                        .find(|i| self.nodes[*i].leading.is_some())
                        .expect("converged under a leader");
                    let before = others_acks(self, l);
                    killed = Some((l, self.now, before));
                    self.note(|| format!("failover: kill the leader {}", l + 1));
                    self.kill(l)?;
                }
                Some((l, t0, before)) if others_acks(self, l) > before => {
                    let took = self.now - t0;
                    self.note(|| {
                        format!("failover: a new leader acknowledged a write after {took} ms")
                    });
                    times.push(took);
                    if took > 500 && std::env::var("SIMDBG").is_ok() {
                        for l in &self.ring {
                            eprintln!("{l}");
                        }
                    }
                    if times.len() == kills {
                        self.check_acked_durable()?;
                        return Ok(times);
                    }
                    killed = None;
                    self.schedule(self.now + 50, Event::Restart { node: l });
                    next_kill = self.now + 200;
                }
                _ => {}
            }
        }
        Err(violation(
            "Liveness",
            format!("{} of {kills} failovers completed", times.len()),
        ))
    }

    fn stop_faults(&mut self) -> Result<(), Violation> {
        self.faults_on = false;
        self.note(|| "faults stop; heal and restart all".into());
        self.group.iter_mut().for_each(|g| *g = 0);
        for i in 0..self.nodes.len() {
            if self.nodes[i].peer.is_none() {
                self.start(i)?;
            }
        }
        Ok(())
    }

    /// The simulated observers read their relays (everything when `all`).
    fn observers_read(&mut self, all: bool) -> Result<(), Violation> {
        let roles: Vec<Option<Role>> = self
            .nodes
            .iter()
            .map(|n| n.peer.as_ref().map(|p| p.role()))
            .collect();
        let sms: Vec<&[(Zxid, u64)]> = self.nodes.iter().map(|n| n.sm.as_slice()).collect();
        self.relays.read(&roles, &sms, &self.checker.global, all)
    }

    fn converged(&self) -> bool {
        let mut leader = None;
        for n in &self.nodes {
            let Some(p) = &n.peer else { return false };
            if p.role() == Role::Leader {
                if leader.is_some() {
                    return false;
                }
                leader = Some(p);
            }
        }
        let Some(l) = leader else { return false };
        let target = l.commit_known();
        let target_len = self
            .nodes
            .iter()
            .find(|n| n.peer.as_ref().is_some_and(|p| p.role() == Role::Leader))
            .map_or(0, |n| n.sm.len());
        if !self.relays.caught_up(target_len) {
            return false;
        }
        self.nodes.iter().all(|n| {
            let p = n.peer.as_ref().expect("all up");
            p.leader() == Some(l.id())
                && p.applied() == target
                && n.sm.last().map(|s| s.0).unwrap_or(Zxid::ZERO) == target
        }) && self.server_converged(target)
    }

    fn final_checks(&mut self) -> Result<(), Violation> {
        self.check_acked_durable()?;
        self.server_final_checks()?;
        // Agreement at the end: everyone delivered the same sequence, and it holds
        // every acknowledged transaction (no acknowledged proposal is lost).
        let first = self.nodes[0].sm.clone();
        for n in &self.nodes {
            if n.sm != first {
                return Err(violation(
                    "Agreement",
                    format!(
                        "{:?} delivered {} txns, {:?} {}",
                        n.id,
                        n.sm.len(),
                        self.nodes[0].id,
                        first.len()
                    ),
                ));
            }
        }
        let delivered: BTreeMap<Zxid, u64> = first.iter().copied().collect();
        for (z, id) in &self.checker.acked {
            if delivered.get(z) != Some(id) {
                return Err(violation(
                    "AckedNotLost",
                    format!("acknowledged {z}={id} is not in the converged history"),
                ));
            }
        }
        Ok(())
    }

    /// Every acknowledged txn is on at least one disk at all times, and on a
    /// quorum of disks when it is acknowledged (checked in `on_ack`).
    fn check_acked_durable(&self) -> Result<(), Violation> {
        for (z, id) in &self.checker.acked {
            if !self.nodes.iter().any(|n| n.disk.holds(*z, *id)) {
                return Err(violation(
                    "AckedNotLost",
                    format!("acknowledged {z}={id} is on no disk"),
                ));
            }
        }
        Ok(())
    }

    fn dispatch(&mut self, ev: Event) -> Result<(), Violation> {
        match ev {
            Event::Deliver { to, from, msg } => {
                self.hash = fnv(fnv(self.hash, self.now), (to * 16 + from) as u64);
                self.deliver(to, from, msg)
            }
            Event::StorageDone { node, incarnation } => {
                if self.nodes[node].incarnation != incarnation || self.nodes[node].peer.is_none() {
                    return Ok(());
                }
                self.nodes[node].done_scheduled = false;
                self.complete_storage(node)
            }
            Event::Tick { node, incarnation } => {
                if self.nodes[node].incarnation != incarnation || self.nodes[node].peer.is_none() {
                    return Ok(());
                }
                self.schedule(self.now + TICK_MS, Event::Tick { node, incarnation });
                self.step(node, Input::Tick)?;
                if self.server.is_some() {
                    self.server_tick(node)?;
                }
                self.observers_read(!self.faults_on)
            }
            Event::Client => self.client(),
            Event::ClientSync => self.client_sync(),
            Event::Crash { node } => self.crash(node),
            Event::Restart { node } => {
                if self.nodes[node].peer.is_none() {
                    self.note(|| format!("restart {}", node + 1));
                    self.start(node)?;
                }
                Ok(())
            }
            Event::Partition => self.partition(),
            Event::Heal => {
                self.group.iter_mut().for_each(|g| *g = 0);
                self.note(|| "heal".into());
                Ok(())
            }
            Event::Snapshot => self.snapshot(),
            Event::LinkDown {
                to,
                peer,
                incarnation,
            } => {
                if self.nodes[to].incarnation != incarnation || self.nodes[to].peer.is_none() {
                    return Ok(());
                }
                let (id, p) = (self.nodes[to].id, self.nodes[peer].id);
                self.note(|| format!("{id:?} told: link to {p:?} down"));
                self.report.link_downs += 1;
                self.hash = fnv(
                    fnv(self.hash, self.now),
                    0xd0_0000 + (to * 16 + peer) as u64,
                );
                self.step(to, Input::PeerDisconnected { peer: p })
            }
            Event::LinkReset => self.link_reset(),
            Event::Server(ev) => self.server_event(ev),
            Event::ReadDone {
                node,
                incarnation,
                id,
                result,
            } => {
                if self.nodes[node].incarnation != incarnation || self.nodes[node].peer.is_none() {
                    return Ok(());
                }
                self.step(node, Input::ReadDone { id, result })
            }
        }
    }

    /// Tells `to` that its connection to `peer` ended, after everything already
    /// on its way from `peer` (a stream's end follows its data), and before
    /// anything `peer` sends later (which travels on a new connection).
    fn schedule_link_down(&mut self, to: usize, peer: usize) {
        let at = self.now + self.rng.random_range(1..5);
        let last = self.link_last.entry((peer, to)).or_insert(0);
        let at = at.max(*last);
        *last = at;
        let incarnation = self.nodes[to].incarnation;
        self.schedule(
            at,
            Event::LinkDown {
                to,
                peer,
                incarnation,
            },
        );
    }

    /// Resets the connection between two random peers: what is in flight on it
    /// is lost and both ends are told. A lone peer (a single voter without
    /// observer members, as standalone rzk runs) has no connection to reset.
    fn link_reset(&mut self) -> Result<(), Violation> {
        if !self.faults_on {
            return Ok(());
        }
        let (lo, hi) = self.opts.link_reset_interval_ms;
        let at = self.now + self.rng.random_range(lo..hi);
        self.schedule(at, Event::LinkReset);
        let n = self.nodes.len();
        if n < 2 {
            // Checked after the draws every run makes, so runs of two or more
            // peers draw exactly what they drew before single peers ran.
            return Ok(());
        }
        let a = self.rng.random_range(0..n);
        let b = (a + self.rng.random_range(1..n)) % n;
        let lost: Vec<(u64, u64)> = self
            .events
            .iter()
            .filter(|(_, ev)| {
                matches!(ev, Event::Deliver { to, from, .. }
                    if (*to, *from) == (a, b) || (*to, *from) == (b, a))
            })
            .map(|(k, _)| *k)
            .collect();
        let (ia, ib) = (self.nodes[a].id, self.nodes[b].id);
        let count = lost.len();
        self.note(|| format!("link {ia:?}-{ib:?} reset ({count} messages lost)"));
        for k in lost {
            self.events.remove(&k);
        }
        for (to, peer) in [(a, b), (b, a)] {
            if self.nodes[to].peer.is_some() {
                self.schedule_link_down(to, peer);
            }
        }
        Ok(())
    }

    fn deliver(&mut self, to: usize, from: usize, msg: Message) -> Result<(), Violation> {
        if self.nodes[to].peer.is_none() || self.group[to] != self.group[from] {
            return Ok(());
        }
        let sync_step = match &msg {
            Message::Session { msg, .. } => match msg {
                SessionMsg::Diff { .. } => Some(0),
                SessionMsg::Trunc { .. } => Some(1),
                SessionMsg::Snap { .. } => Some(2),
                SessionMsg::SnapChunk { .. } => Some(4),
                SessionMsg::NewLeader { .. } | SessionMsg::Proposal { .. } => Some(3),
                SessionMsg::Inform { .. } => {
                    self.report.informs += 1;
                    None
                }
                _ => None,
            },
            Message::Notification(_) => None,
        };
        if let Some(k) = sync_step {
            if k < 3 {
                self.report.syncs[k] += 1;
            }
            if k == 4 && !self.rng.random_bool(0.1) {
                // Crashes mid-transfer, but not at every chunk.
                return self.step_deliver(to, from, msg);
            }
            // Crash right after a sync step, before its writes complete: covers
            // an interruption at each step of every sync mode.
            if self.faults_on && self.opts.crashes && self.rng.random_bool(self.opts.sync_crash) {
                let at = self.now + self.rng.random_range(0..3);
                self.schedule(at, Event::Crash { node: to });
            }
        }
        self.step_deliver(to, from, msg)
    }

    fn step_deliver(&mut self, to: usize, from: usize, msg: Message) -> Result<(), Violation> {
        let from_id = self.nodes[from].id;
        if self.opts.trace_lines > 1000 {
            // Long traces (replays) show every delivered message.
            let to_id = self.nodes[to].id;
            self.note(|| match &msg {
                Message::Notification(n) => format!(
                    "{from_id:?}->{to_id:?} {:?} vote {:?} {} e{} round {}",
                    n.state, n.vote.leader, n.vote.zxid, n.vote.peer_epoch, n.round
                ),
                Message::Session { session, seq, msg } => {
                    format!(
                        "{from_id:?}->{to_id:?} s{} #{seq} {}",
                        session.0,
                        msg.name()
                    )
                }
            });
        }
        self.step(to, Input::Message { from: from_id, msg })
    }

    fn step(&mut self, i: usize, input: Input) -> Result<(), Violation> {
        let now = Tick(self.now);
        let Some(peer) = self.nodes[i].peer.as_mut() else {
            return Ok(());
        };
        let out = peer.step(now, input);
        self.handle_outputs(i, out)
    }

    fn handle_outputs(&mut self, i: usize, out: Vec<Output>) -> Result<(), Violation> {
        for o in out {
            self.relays.on_output(i, &o)?;
            self.handle_output(i, o)?;
        }
        if let Some(peer) = self.nodes[i].peer.as_ref() {
            self.relays.after_batch(i, peer);
        }
        Ok(())
    }

    fn handle_output(&mut self, i: usize, o: Output) -> Result<(), Violation> {
        if self.server.is_some() {
            self.server_on_output(i, &o)?;
        }
        match o {
            Output::Send { to, msg } => self.send(i, to, msg),
            Output::Refused { peer, msg, reason } => {
                self.report.refused += 1;
                let id = self.nodes[i].id;
                self.note(|| format!("{id:?} refused {msg} from {peer:?}: {reason}"));
                Ok(())
            }
            Output::Storage { op, cmd } => {
                self.hash = fnv(self.hash, op.0);
                self.nodes[i].inflight.push_back((op, cmd));
                if !self.nodes[i].done_scheduled {
                    self.nodes[i].done_scheduled = true;
                    let at = self.now + self.rng.random_range(1..6);
                    let incarnation = self.nodes[i].incarnation;
                    self.schedule(
                        at,
                        Event::StorageDone {
                            node: i,
                            incarnation,
                        },
                    );
                }
                Ok(())
            }
            Output::ApplySnapshot { snapshot } => {
                let zxid = snapshot.zxid;
                let Some(data) = self.nodes[i].disk.snapshot_bytes(&snapshot) else {
                    return Err(violation(
                        "SnapshotIntegrity",
                        format!(
                            "{:?} applies snapshot {zxid}, not on its disk",
                            self.nodes[i].id
                        ),
                    ));
                };
                // A server-level snapshot file holds the server's tree too.
                let data = if self.server.is_some() {
                    server::sm_part(&data)
                } else {
                    data
                };
                let seq = sm_decode(&data);
                if seq.last().map(|s| s.0).unwrap_or(Zxid::ZERO) != zxid {
                    return Err(violation(
                        "SnapshotIntegrity",
                        format!("snapshot named {zxid} holds {:?}", seq.last()),
                    ));
                }
                self.checker.on_snapshot(self.nodes[i].id, &seq)?;
                self.nodes[i].sm = seq;
                Ok(())
            }
            Output::Apply(entries) => self.apply(i, entries),
            Output::Read { id, cmd } => {
                let result = match cmd.clone() {
                    ReadCmd::SnapshotChunk {
                        snapshot,
                        offset,
                        len,
                    } => match self.nodes[i].disk.snapshot_bytes(&snapshot) {
                        Some(b) => {
                            self.nodes[i].disk.touch_open(&snapshot);
                            let start = (offset as usize).min(b.len());
                            let end = (start + len).min(b.len());
                            Ok(ReadData::SnapshotChunk(b.slice(start..end)))
                        }
                        None => Err(format!("snapshot {} is gone", snapshot.zxid)),
                    },
                    ReadCmd::Log {
                        after,
                        entries_max,
                        bytes_max,
                    } => self.read_log(i, after, entries_max, bytes_max),
                };
                let pid = self.nodes[i].id;
                self.note(|| {
                    let what = match &result {
                        Ok(ReadData::Log(es)) => format!(
                            "{} entries, {:?} to {:?}",
                            es.len(),
                            es.first().map(|e| e.zxid),
                            es.last().map(|e| e.zxid)
                        ),
                        Ok(ReadData::SnapshotChunk(b)) => format!("{} bytes", b.len()),
                        Err(e) => format!("error: {e}"),
                    };
                    format!("{pid:?} read {cmd:?}: {what}")
                });
                let at = self.now + self.rng.random_range(0..4);
                let incarnation = self.nodes[i].incarnation;
                self.schedule(
                    at,
                    Event::ReadDone {
                        node: i,
                        incarnation,
                        id,
                        result,
                    },
                );
                Ok(())
            }
            Output::Proposed { id, zxid } => {
                let payload = self.nodes[i].proposed.get(&id).copied().unwrap_or(0);
                let who = self.nodes[i].id;
                self.note(|| format!("{who:?} proposed {zxid}={payload}"));
                let delivered = self.nodes[i].sm.len();
                // A proposal of an epoch after an uncommitted rollover proposal is
                // tentative (never written until the rollover commits); it is a
                // primary's broadcast only within the established epoch.
                let primary = self.nodes[i].leading.is_some_and(|e| zxid.epoch() <= e);
                self.checker.on_broadcast(
                    self.nodes[i].id,
                    zxid,
                    payload,
                    primary.then_some(delivered),
                )
            }
            Output::ProposeFailed { id, .. } => {
                self.nodes[i].proposed.remove(&id);
                Ok(())
            }
            Output::SyncDone { id, zxid } => {
                let Some(before) = self.nodes[i].syncs.remove(&id) else {
                    return Ok(());
                };
                let applied = self.nodes[i].sm.last().map(|s| s.0).unwrap_or(Zxid::ZERO);
                if zxid < before || applied < zxid {
                    return Err(violation(
                        "SyncLinearizable",
                        format!(
                            "{:?} sync barrier {zxid}, applied {applied}, but {before} was acknowledged before the sync",
                            self.nodes[i].id
                        ),
                    ));
                }
                self.report.sync_barriers += 1;
                Ok(())
            }
            Output::SyncFailed { id, .. } => {
                self.nodes[i].syncs.remove(&id);
                Ok(())
            }
            // The simulated clients do not forward messages (yet).
            Output::Forwarded { .. } => Ok(()),
            Output::RoleChanged { role, epoch, .. } => {
                let id = self.nodes[i].id;
                let last = self.nodes[i].disk.last();
                self.note(|| format!("{id:?} role {role:?} epoch {epoch} disk {last}"));
                let fresh = self.nodes[i].leading.is_none();
                self.nodes[i].leading = (role == Role::Leader).then_some(epoch);
                // ObserverRole: an observer member is only ever an observer (or
                // looking), a voter never one.
                let observer = i >= self.voters;
                if role == Role::Observer {
                    self.report.member_syncs += 1;
                }
                let fits = match role {
                    Role::Looking => true,
                    Role::Observer => observer,
                    Role::Leader | Role::Follower => !observer,
                };
                if !fits {
                    return Err(violation(
                        "ObserverRole",
                        format!("{id:?} (observer member: {observer}) became {role:?}"),
                    ));
                }
                if role == Role::Leader {
                    self.check_voter_quorum_for(i, epoch, fresh)?;
                    self.checker.on_established(id, epoch)?;
                    // LeaderLogCompleteness (§8.4): an established leader's durable
                    // history holds every acknowledged transaction.
                    let disk = &self.nodes[i].disk;
                    if let Some((z, v)) = self
                        .checker
                        .acked
                        .iter()
                        .find(|(z, v)| !disk.holds(**z, **v))
                    {
                        return Err(violation(
                            "LeaderLogCompleteness",
                            format!("{id:?} established epoch {epoch} without acknowledged {z}={v} (disk ends at {})", disk.last()),
                        ));
                    }
                }
                Ok(())
            }
        }
    }

    fn apply(&mut self, i: usize, entries: Vec<Entry>) -> Result<(), Violation> {
        let id = self.nodes[i].id;
        for e in entries {
            let pid = payload_id(&e);
            let prev = self.nodes[i].sm.last().map(|s| s.0).unwrap_or(Zxid::ZERO);
            let index = self.nodes[i].sm.len();
            self.checker.on_deliver(id, index, prev, e.zxid, pid)?;
            if e.zxid.is_last_with(self.limit) {
                self.report.rollovers += u64::from(index + 1 == self.checker.global.len());
            }
            self.nodes[i].sm.push((e.zxid, pid));
            if i >= self.voters {
                self.report.member_applied += 1;
            }
            // The client of a proposal this peer made as leader gets its answer:
            // the txn is committed and applied here (I6).
            let mine = self.nodes[i]
                .peer
                .as_ref()
                .is_some_and(|p| p.role() == Role::Leader)
                && self.nodes[i].proposed.values().any(|v| *v == pid);
            if mine {
                // Only voters' disks count: an observer's copy is no part of a
                // quorum (ObserversNotCounted, issue 12).
                let holders = self.nodes[..self.voters]
                    .iter()
                    .filter(|n| n.disk.holds(e.zxid, pid))
                    .count();
                let quorum = self.voters / 2 + 1;
                if holders < quorum {
                    return Err(violation(
                        "DurableBeforeAck",
                        format!(
                            "{id:?} acknowledged {} with {holders} durable copies",
                            e.zxid
                        ),
                    ));
                }
                self.nodes[i].proposed.retain(|_, v| *v != pid);
                self.nodes[i].acks += 1;
                self.checker.on_ack(e.zxid, pid);
            }
        }
        Ok(())
    }

    /// A leader is established only with a quorum of *voters* behind its
    /// epoch: at a fresh establishment a quorum of voters' disks hold
    /// currentEpoch >= epoch (their NEWLEADER acks); at a rollover, acceptedEpoch
    /// >= epoch (the fence). Observers' disks never count (ObserversNotCounted).
    fn check_voter_quorum_for(
        &self,
        i: usize,
        epoch: rzk_zxid::Epoch,
        fresh: bool,
    ) -> Result<(), Violation> {
        let behind = self.nodes[..self.voters]
            .iter()
            .filter(|n| {
                let ep = n.disk.epochs;
                if fresh {
                    ep.current >= epoch
                } else {
                    ep.accepted >= epoch
                }
            })
            .count();
        if behind < self.voters / 2 + 1 {
            return Err(violation(
                "ObserversNotCounted",
                format!(
                    "{:?} established epoch {epoch} with {behind} of {} voters behind it",
                    self.nodes[i].id, self.voters
                ),
            ));
        }
        Ok(())
    }

    /// I1: what a message claims about the sender's history is on its disk.
    fn check_claims(&self, i: usize, msg: &Message) -> Result<(), Violation> {
        let n = &self.nodes[i];
        let disk_last = n.disk.last();
        let ep = n.disk.epochs;
        let bad = |what: String| Err(violation("AdvertisedDurable", format!("{:?} {what}", n.id)));
        match msg {
            Message::Notification(nt) => {
                if nt.state == PeerState::Looking
                    && nt.vote.leader == n.id
                    && (nt.vote.zxid > disk_last || nt.vote.peer_epoch > ep.current)
                {
                    return bad(format!(
                        "voted for itself with {} / epoch {} but its disk ends at {disk_last} / epoch {}",
                        nt.vote.zxid, nt.vote.peer_epoch, ep.current
                    ));
                }
                Ok(())
            }
            Message::Session { msg, .. } => match msg {
                SessionMsg::FollowerInfo { accepted_epoch, .. } if *accepted_epoch > ep.accepted => {
                    bad(format!("FOLLOWERINFO with acceptedEpoch {accepted_epoch} > disk {}", ep.accepted))
                }
                SessionMsg::AckEpoch {
                    current_epoch,
                    last_zxid,
                    ..
                } if *last_zxid != disk_last || *current_epoch > ep.current => bad(format!(
                    "ACKEPOCH claims {last_zxid} / epoch {current_epoch}, disk has {disk_last} / epoch {}",
                    ep.current
                )),
                SessionMsg::Ack { upto } if *upto > disk_last => {
                    bad(format!("ACK {upto} beyond its disk {disk_last}"))
                }
                SessionMsg::AckNewLeader { epoch } if *epoch > ep.current => bad(format!(
                    "NEWLEADER ACK for epoch {epoch} with currentEpoch {} on disk",
                    ep.current
                )),
                _ => Ok(()),
            },
        }
    }

    fn send(&mut self, i: usize, to: PeerId, mut msg: Message) -> Result<(), Violation> {
        if self.opts.check_claims {
            self.check_claims(i, &msg)?;
        }
        if let Message::Session {
            msg: SessionMsg::SnapChunk { data, .. },
            ..
        } = &mut msg
        {
            self.report.snap_chunks += 1;
            if self.faults_on && self.rng.random_bool(0.01) {
                // A chunk corrupted on the way: the learner's storage must
                // refuse the file, and nothing of it may be installed.
                let mut bad = data.to_vec();
                let k = self.rng.random_range(0..bad.len());
                bad[k] ^= 0x5a;
                *data = Bytes::from(bad);
                self.note(|| "a SNAP chunk corrupted in flight".into());
            }
        }
        let to = (to.0 - 1) as usize;
        if self.faults_on && self.rng.random_bool(self.opts.loss) {
            return Ok(());
        }
        let mut at = self.now + self.rng.random_range(1..8);
        if self.faults_on && self.rng.random_bool(0.03) {
            at += self.rng.random_range(10..60);
        }
        let reorder = self.faults_on && self.rng.random_bool(self.opts.reorder);
        let last = self.link_last.entry((i, to)).or_insert(0);
        if !reorder {
            at = at.max(*last);
            *last = at;
        }
        let copies = if self.faults_on && self.rng.random_bool(self.opts.duplicate) {
            2
        } else {
            1
        };
        for c in 0..copies {
            let at = at + c * self.rng.random_range(0..20);
            self.schedule(
                at,
                Event::Deliver {
                    to,
                    from: i,
                    msg: msg.clone(),
                },
            );
        }
        Ok(())
    }

    /// Group commit: every command issued so far becomes durable.
    fn complete_storage(&mut self, i: usize) -> Result<(), Violation> {
        let cmds: Vec<(OpId, StorageCmd)> = self.nodes[i].inflight.drain(..).collect();
        let mut done = None;
        for (op, cmd) in cmds {
            if self.apply_to_disk(i, cmd, usize::MAX)? {
                done = Some(op);
                continue;
            }
            // Refused (a received snapshot that does not verify): what came
            // before is done, this one changed nothing.
            self.report.snaps_refused += 1;
            if let Some(d) = done.take() {
                self.step(i, Input::StorageDone { op: d })?;
            }
            self.step(i, Input::StorageRefused { op })?;
        }
        match done {
            Some(op) => self.step(i, Input::StorageDone { op }),
            None => Ok(()),
        }
    }

    /// Applies a command to the disk, checking the disk-level properties;
    /// `false` if storage refuses it (a received snapshot that does not
    /// verify: nothing changes). `keep` limits how many entries of an append
    /// reach the disk (a torn write).
    fn apply_to_disk(&mut self, i: usize, cmd: StorageCmd, keep: usize) -> Result<bool, Violation> {
        let id = self.nodes[i].id;
        let checker = &mut self.checker;
        let disk = &mut self.nodes[i].disk;
        match cmd {
            StorageCmd::Append(entries) => {
                for e in entries.into_iter().take(keep) {
                    if !e.zxid.is_next(disk.last()) {
                        return Err(violation(
                            "LogContiguity",
                            format!("{id:?} appended {} after {}: zxids must strictly increase without gaps (I3)", e.zxid, disk.last()),
                        ));
                    }
                    if e.zxid.epoch() > disk.epochs.accepted {
                        return Err(violation(
                            "EpochFence",
                            format!(
                                "{id:?} wrote {} with acceptedEpoch {}",
                                e.zxid, disk.epochs.accepted
                            ),
                        ));
                    }
                    checker.on_write(id, e.zxid, payload_id(&e))?;
                    disk.log.push(e);
                }
            }
            StorageCmd::TruncateAfter(z) => {
                for e in disk.log.iter().filter(|e| e.zxid > z) {
                    if checker.acked.get(&e.zxid) == Some(&payload_id(e)) {
                        return Err(violation(
                            "CommittedLogDurability",
                            format!("{id:?} truncated acknowledged {}", e.zxid),
                        ));
                    }
                }
                disk.log.retain(|e| e.zxid <= z);
            }
            StorageCmd::ReceiveSnapshot(r) => disk.incoming = Some((r, Vec::new())),
            StorageCmd::SnapshotChunk { offset, data } => match disk.incoming.as_mut() {
                Some((_, buf)) if offset == buf.len() as u64 => buf.extend_from_slice(&data),
                _ => return Ok(false),
            },
            StorageCmd::AbortSnapshot => disk.incoming = None,
            StorageCmd::InstallSnapshot(r) => {
                let zxid = r.zxid;
                let data = match disk.incoming.take() {
                    Some((s, buf)) if s == r => buf,
                    _ if r.size_bytes == 0 => Vec::new(),
                    _ => return Ok(false),
                };
                if data.len() as u64 != r.size_bytes || checksum(&data) != r.crc {
                    return Ok(false);
                }
                if zxid.epoch() > disk.epochs.accepted {
                    return Err(violation(
                        "EpochFence",
                        format!(
                            "{id:?} installed a snapshot at {zxid} with acceptedEpoch {}",
                            disk.epochs.accepted
                        ),
                    ));
                }
                disk.install_snapshot(r, Bytes::from(data));
            }
            StorageCmd::SaveEpochs(ep) => {
                let old = disk.epochs;
                if self.opts.trace_lines > 1000 {
                    let line = format!(
                        "{:>6} {id:?} epochs {:?} disk last {}",
                        self.now,
                        ep,
                        disk.last()
                    );
                    self.ring.push_back(line);
                }
                if ep.accepted < old.accepted
                    || ep.current < old.current
                    || ep.current > ep.accepted
                {
                    return Err(violation(
                        "EpochMonotonicity",
                        format!("{id:?} epochs {old:?} -> {ep:?}"),
                    ));
                }
                disk.epochs = ep;
            }
            StorageCmd::BeginSync { .. } => disk.marker = true,
            StorageCmd::EndSync => disk.marker = false,
        }
        Ok(true)
    }

    fn crash(&mut self, i: usize) -> Result<(), Violation> {
        if self.faults_on {
            let (lo, hi) = self.opts.crash_interval_ms;
            let at = self.now + self.rng.random_range(lo..hi);
            let node = self.rng.random_range(0..self.nodes.len());
            self.schedule(at, Event::Crash { node });
        }
        if self.nodes[i].peer.is_none() || !self.faults_on {
            return Ok(());
        }
        self.kill(i)?;
        let at = self.now + self.rng.random_range(50..800);
        self.schedule(at, Event::Restart { node: i });
        Ok(())
    }

    /// Adds peer `i`'s SNAP figures to the report (before it stops).
    fn harvest(&mut self, i: usize) {
        let Some(peer) = self.nodes[i].peer.as_ref() else {
            return;
        };
        let w = peer.window_counts();
        self.report.snaps_outlived_snapshot += w.snaps_outlived_snapshot;
        self.report.snap_tails_from_disk += w.snap_tails_from_disk;
        self.report.snaps_purged += w.snaps_purged;
    }

    /// Stops peer `i` as a kill -9 or a power loss does.
    fn kill(&mut self, i: usize) -> Result<(), Violation> {
        self.report.crashes += 1;
        // A prefix of the commands not yet completed survives; the last surviving
        // append may be torn (only some of its records made it).
        let cmds: Vec<(OpId, StorageCmd)> = self.nodes[i].inflight.drain(..).collect();
        let survive = self.rng.random_range(0..=cmds.len());
        let torn = self.rng.random_range(0..4);
        let n = cmds.len();
        self.note(|| {
            format!(
                "crash {} ({survive} of {n} unsynced commands survive)",
                i + 1
            )
        });
        for (k, (_, cmd)) in cmds.into_iter().take(survive).enumerate() {
            let keep = if k + 1 == survive { torn } else { usize::MAX };
            self.apply_to_disk(i, cmd, keep)?;
        }
        self.harvest(i);
        self.nodes[i].peer = None;
        if self.server.is_some() {
            self.server_kill(i);
        }
        self.relays.drop_relay(i);
        self.notice_crash(i);
        Ok(())
    }

    /// The peers that can reach crashed `i` learn of it from their transport
    /// (most of the time: a crash can also be silent).
    fn notice_crash(&mut self, i: usize) {
        for j in 0..self.nodes.len() {
            if j == i || self.nodes[j].peer.is_none() || self.group[j] != self.group[i] {
                continue;
            }
            if self.rng.random_bool(self.opts.disconnect_notice) {
                self.schedule_link_down(j, i);
            }
        }
    }

    fn partition(&mut self) -> Result<(), Violation> {
        if !self.faults_on {
            return Ok(());
        }
        self.report.partitions += 1;
        for g in self.group.iter_mut() {
            *g = self.rng.random_range(0..2);
        }
        let groups = self.group.clone();
        self.note(|| format!("partition {groups:?}"));
        let heal = self.now + self.rng.random_range(100..1500);
        self.schedule(heal, Event::Heal);
        let (lo, hi) = self.opts.partition_gap_ms;
        let next = heal + self.rng.random_range(lo..hi);
        self.schedule(next, Event::Partition);
        Ok(())
    }

    fn client(&mut self) -> Result<(), Violation> {
        if !self.faults_on {
            return Ok(());
        }
        let at = self.now + self.rng.random_range(2..25);
        self.schedule(at, Event::Client);
        let leaders: Vec<usize> = (0..self.nodes.len())
            .filter(|i| {
                self.nodes[*i]
                    .peer
                    .as_ref()
                    .is_some_and(|p| p.role() == Role::Leader)
            })
            .collect();
        for i in leaders {
            let k = self.rng.random_range(1..4);
            let mut batch = Vec::new();
            for _ in 0..k {
                let pid = self.next_payload;
                self.next_payload += 1;
                let rid = self.next_request;
                self.next_request += 1;
                self.nodes[i].proposed.insert(rid, pid);
                batch.push((rid, Bytes::copy_from_slice(&pid.to_le_bytes())));
            }
            self.step(i, Input::Propose(batch))?;
        }
        Ok(())
    }

    fn client_sync(&mut self) -> Result<(), Violation> {
        if !self.faults_on {
            return Ok(());
        }
        let at = self.now + self.rng.random_range(20..200);
        self.schedule(at, Event::ClientSync);
        let i = self.rng.random_range(0..self.nodes.len());
        if self.nodes[i].peer.is_none() {
            return Ok(());
        }
        let rid = self.next_request;
        self.next_request += 1;
        let before = self.checker.acked_max;
        self.nodes[i].syncs.insert(rid, before);
        self.step(i, Input::Sync { id: rid })
    }

    /// A `ReadCmd::Log`: the durable entries after `after`, bounded like the
    /// driver's. A zxid the disk no longer holds (purged by a snapshot) is an
    /// error, as in `rzk-wal`.
    fn read_log(
        &mut self,
        i: usize,
        after: Zxid,
        entries_max: usize,
        bytes_max: usize,
    ) -> Result<ReadData, String> {
        let disk = &self.nodes[i].disk;
        if after < disk.log_start {
            return Err(format!(
                "{after} is purged (the log starts at {})",
                disk.log_start
            ));
        }
        let from = disk.log.partition_point(|e| e.zxid <= after);
        let (mut out, mut bytes) = (Vec::new(), 0usize);
        for e in &disk.log[from..] {
            if out.len() >= entries_max || (!out.is_empty() && bytes >= bytes_max) {
                break;
            }
            bytes += e.payload.len();
            out.push(e.clone());
        }
        self.report.log_reads += 1;
        self.report.log_read_entries += out.len() as u64;
        Ok(ReadData::Log(out))
    }

    fn snapshot(&mut self) -> Result<(), Violation> {
        let (lo, hi) = self.opts.snapshot_interval_ms;
        let at = self.now + self.rng.random_range(lo..hi.max(lo + 1));
        self.schedule(at, Event::Snapshot);
        let i = self.rng.random_range(0..self.nodes.len());
        let n = &mut self.nodes[i];
        let Some(peer) = n.peer.as_mut() else {
            return Ok(());
        };
        let Some(&(zxid, _)) = n.sm.last() else {
            return Ok(());
        };
        if zxid <= n.disk.base() || zxid > n.disk.last() {
            return Ok(());
        }
        // The state machine's snapshot is durable at once (the driver's job);
        // retention then purges the log no retained snapshot needs.
        let data = sm_encode(&n.sm);
        let snapshot = SnapshotRef {
            zxid,
            size_bytes: data.len() as u64,
            crc: checksum(&data),
        };
        // As the driver does: what syncs in progress still read is held.
        let hold = if self.opts.hold_log_for_syncs {
            peer.log_needed_after()
        } else {
            None
        };
        let log_start = n
            .disk
            .save_snapshot(snapshot, data, self.opts.snap_retain_count, hold);
        let out = peer.step(
            Tick(self.now),
            Input::SnapshotSaved {
                snapshot,
                log_start,
            },
        );
        let (id, size) = (n.id, snapshot.size_bytes);
        self.note(|| {
            format!("{id:?} snapshot at {zxid} ({size} bytes), log purged up to {log_start}")
        });
        self.handle_outputs(i, out)
    }
}

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
//! The pieces: [`network::Network`] carries the peers' messages (generic
//! over them, and public, for any world that needs one); `disk` is a quorum
//! peer's simulated disk; `clients` the quorum simulation's clients; `faults`
//! the crashes, partitions and connection resets; `checker` the properties;
//! `relays` the observer masters and observers; `server` the server-level
//! simulation; `World`, in this file, schedules everything in one order and
//! carries out each core's outputs.
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
mod clients;
mod disk;
mod faults;
pub mod network;
mod options;
mod relays;
mod report;
mod server;

use std::collections::{BTreeMap, VecDeque};

use bytes::Bytes;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rzk_quorum::core::{
    Config, Input, OpId, Output, Peer, ReadCmd, ReadData, ReadId, Recovered, Refusal, SnapshotRef,
    StorageCmd, Tick,
};
use rzk_quorum::message::{Entry, Message, SessionMsg};
use rzk_quorum::{PeerId, Role};
use rzk_zxid::{CounterLimit, Epoch, Zxid};

pub use checker::Violation;
use checker::{payload_id, violation, Checker};
use clients::Clients;
use disk::{checksum, Disk};
use network::{LinkFaults, Network, Packet, Sequence, Slot};
pub use options::Options;
pub use relays::ObserverReport;
pub use report::{FailoverReport, Failure, Report};
pub use rzk_server::core::CoreBugs;
pub use server::{ServerOptions, ServerReport};

/// What the world schedules besides the network's deliveries.
#[derive(Clone, Debug)]
enum Event {
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

/// What happens next in a world: one of its events, or a message arriving.
enum Happening {
    Event(Event),
    Delivery(Packet<Message>),
}

/// One ZAB peer of the world, with what outlives its restarts (its disk).
struct Node {
    id: PeerId,
    peer: Option<Peer>,
    incarnation: u64,
    disk: Disk,
    /// The state machine: the delivered sequence.
    sm: Vec<(Zxid, u64)>,
    /// Proposal ids this node proposed as leader: request id → (zxid, payload).
    proposed: BTreeMap<u64, u64>,
    /// The epoch this node is the established leader of, if it leads.
    leading: Option<Epoch>,
    /// Client writes this node acknowledged as leader (all incarnations).
    acks: u64,
}

/// One run: the nodes, the network between them, the events scheduled,
/// the checker and the trace.
struct World {
    opts: Options,
    rng: ChaCha8Rng,
    /// The sizes of the batches a restart replays its log in: their own RNG,
    /// so a seed's run is what it was before the replay was batched.
    replay_rng: ChaCha8Rng,
    now: u64,
    /// The order of everything scheduled: `events` and the network's
    /// deliveries share it.
    seq: Sequence,
    events: BTreeMap<Slot, Event>,
    /// The peers' network: their messages on their way.
    net: Network<Message>,
    nodes: Vec<Node>,
    checker: Checker,
    hash: u64,
    ring: VecDeque<String>,
    /// The quorum simulation's clients.
    clients: Clients,
    /// The next request id of a `Propose` or `Sync` input (the quorum
    /// simulation's clients and the server cores draw from it).
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

/// Which step of a learner's sync a message is: DIFF, TRUNC, SNAP (counted
/// in `Report::syncs`), a NEWLEADER or proposal (3), a SNAP chunk (4).
fn sync_step(msg: &Message) -> Option<usize> {
    let Message::Session { msg, .. } = msg else {
        return None;
    };
    match msg {
        SessionMsg::Diff { .. } => Some(0),
        SessionMsg::Trunc { .. } => Some(1),
        SessionMsg::Snap { .. } => Some(2),
        SessionMsg::SnapChunk { .. } => Some(4),
        SessionMsg::NewLeader { .. } | SessionMsg::Proposal { .. } => Some(3),
        SessionMsg::FollowerInfo { .. }
        | SessionMsg::LeaderInfo { .. }
        | SessionMsg::AckEpoch { .. }
        | SessionMsg::SnapAck { .. }
        | SessionMsg::Commit { .. }
        | SessionMsg::AckNewLeader { .. }
        | SessionMsg::UpToDate { .. }
        | SessionMsg::Ack { .. }
        | SessionMsg::Inform { .. }
        | SessionMsg::Ping { .. }
        | SessionMsg::Pong { .. }
        | SessionMsg::SyncRequest { .. }
        | SessionMsg::SyncReply { .. }
        | SessionMsg::Forward { .. }
        | SessionMsg::Relayed
        | SessionMsg::Reject { .. } => None,
    }
}

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
                sm: Vec::new(),
                proposed: BTreeMap::new(),
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
            net: Network::new(
                total,
                LinkFaults::new(opts.loss, opts.duplicate, opts.reorder),
            ),
            voters,
            observer_lag,
            opts,
            rng,
            now: 0,
            seq: Sequence::default(),
            events: BTreeMap::new(),
            nodes,
            checker: Checker::default(),
            hash: 0xcbf29ce484222325,
            ring: VecDeque::new(),
            clients: Clients::new(total),
            next_request: 1,
            report: Report::default(),
            limit,
            faults_on: true,
            events_since_check: 0,
        }
    }

    fn failure(&self, seed: u64, v: Violation, mode: &str) -> Box<Failure> {
        let mut trace: Vec<String> = self.ring.iter().cloned().collect();
        for n in &self.nodes {
            trace.push(match &n.peer {
                Some(p) => format!("state {}", p.describe()),
                None => format!("state {:?} down, disk last {}", n.id, n.disk.last()),
            });
        }
        let replay = self.opts.replay_command(seed, mode);
        Box::new(Failure {
            seed,
            violation: v,
            at_ms: self.now,
            trace,
            replay,
        })
    }

    fn schedule(&mut self, at: u64, ev: Event) {
        self.events.insert((at, self.seq.take()), ev);
    }

    /// Takes what happens next, events and deliveries in their one order, if
    /// it happens by `end`, and moves the clock to it.
    fn next_happening(&mut self, end: u64) -> Option<Happening> {
        let event = self.events.keys().next().copied();
        let packet = self.net.next_slot();
        let next = match (event, packet) {
            (Some(e), Some(p)) => e.min(p),
            (Some(e), None) => e,
            (None, Some(p)) => p,
            (None, None) => return None,
        };
        if next.0 > end {
            return None;
        }
        self.now = next.0;
        if event == Some(next) {
            let ev = self.events.remove(&next).expect("present");
            return Some(Happening::Event(ev));
        }
        let (_, packet) = self.net.pop().expect("present");
        Some(Happening::Delivery(packet))
    }

    /// Carries out what [`World::next_happening`] took.
    fn happen(&mut self, h: Happening) -> Result<(), Violation> {
        match h {
            Happening::Event(ev) => self.dispatch(ev),
            Happening::Delivery(p) => self.deliver(p),
        }
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
        n.sm.clear();
        n.proposed.clear();
        n.leading = None;
        n.disk.restart();
        self.clients.restart(i);
        let n = &self.nodes[i];
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
        while let Some(h) = self.next_happening(end) {
            let at = self.now;
            if self.faults_on && at >= fault_end {
                self.stop_faults()?;
            }
            self.happen(h)?;
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
        while let Some(h) = self.next_happening(end) {
            self.happen(h)?;
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
        let delivered: Vec<(PeerId, &[(Zxid, u64)])> =
            self.nodes.iter().map(|n| (n.id, n.sm.as_slice())).collect();
        self.checker.converged_history(&delivered)
    }

    /// Every acknowledged txn is on at least one disk at all times, and on a
    /// quorum of disks when it is acknowledged (checked in `apply`).
    fn check_acked_durable(&self) -> Result<(), Violation> {
        self.checker
            .acked_on_some_disk(self.nodes.iter().map(|n| &n.disk))
    }

    fn dispatch(&mut self, ev: Event) -> Result<(), Violation> {
        match ev {
            Event::StorageDone { node, incarnation } => {
                if self.nodes[node].incarnation != incarnation || self.nodes[node].peer.is_none() {
                    return Ok(());
                }
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
                self.net.heal();
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

    /// A message arrives at its node: it is taken if the node is up and the
    /// network lets it through. A sync step may crash its learner right
    /// after (covering an interruption at each step of every sync mode).
    fn deliver(&mut self, p: Packet<Message>) -> Result<(), Violation> {
        let Packet { from, to, msg } = p;
        self.hash = fnv(fnv(self.hash, self.now), (to * 16 + from) as u64);
        if self.nodes[to].peer.is_none() || !self.net.reaches(from, to) {
            return Ok(());
        }
        if let Message::Session {
            msg: SessionMsg::Inform { .. },
            ..
        } = &msg
        {
            self.report.informs += 1;
        }
        let Some(k) = sync_step(&msg) else {
            return self.step_deliver(to, from, msg);
        };
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

    /// Carries out one output of node `i`'s core (the server core sees the
    /// output first in server-level runs).
    fn handle_output(&mut self, i: usize, o: Output) -> Result<(), Violation> {
        if self.server.is_some() {
            self.server_on_output(i, &o)?;
        }
        match o {
            Output::Send { to, msg } => self.send(i, to, msg),
            Output::Refused { peer, msg, reason } => self.on_refused(i, peer, msg, reason),
            Output::Storage { op, cmd } => self.on_storage(i, op, cmd),
            Output::ApplySnapshot { snapshot } => self.on_apply_snapshot(i, snapshot),
            Output::Apply(entries) => self.apply(i, entries),
            Output::Read { id, cmd } => self.on_read(i, id, cmd),
            Output::Proposed { id, zxid } => self.on_proposed(i, id, zxid),
            Output::ProposeFailed { id, .. } => {
                self.nodes[i].proposed.remove(&id);
                Ok(())
            }
            Output::SyncDone { id, zxid } => self.on_sync_done(i, id, zxid),
            Output::SyncFailed { id, .. } => {
                self.clients.sync_failed(i, id);
                Ok(())
            }
            // The simulated clients do not forward messages (yet).
            Output::Forwarded { .. } => Ok(()),
            Output::RoleChanged { role, epoch, .. } => self.on_role_changed(i, role, epoch),
        }
    }

    fn on_refused(
        &mut self,
        i: usize,
        peer: PeerId,
        msg: &'static str,
        reason: Refusal,
    ) -> Result<(), Violation> {
        self.report.refused += 1;
        let id = self.nodes[i].id;
        self.note(|| format!("{id:?} refused {msg} from {peer:?}: {reason}"));
        Ok(())
    }

    /// A storage command is issued; the first one since the last completion
    /// schedules the next completion (group commit).
    fn on_storage(&mut self, i: usize, op: OpId, cmd: StorageCmd) -> Result<(), Violation> {
        self.hash = fnv(self.hash, op.0);
        if self.nodes[i].disk.issue(op, cmd) {
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

    /// The state machine loads a snapshot from the disk: it must be there,
    /// and hold a prefix of the delivered history ending at its zxid.
    fn on_apply_snapshot(&mut self, i: usize, snapshot: SnapshotRef) -> Result<(), Violation> {
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

    /// A read of the disk, answered a little later (reads complete in any
    /// order).
    fn on_read(&mut self, i: usize, id: ReadId, cmd: ReadCmd) -> Result<(), Violation> {
        let disk = &mut self.nodes[i].disk;
        let result = match cmd.clone() {
            ReadCmd::SnapshotChunk {
                snapshot,
                offset,
                len,
            } => disk
                .read_snapshot_chunk(&snapshot, offset, len)
                .map(ReadData::SnapshotChunk),
            ReadCmd::Log {
                after,
                entries_max,
                bytes_max,
            } => disk.read_log(after, entries_max, bytes_max).map(|out| {
                self.report.log_reads += 1;
                self.report.log_read_entries += out.len() as u64;
                ReadData::Log(out)
            }),
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

    /// A leader gave a proposal its zxid: a primary's broadcast.
    fn on_proposed(&mut self, i: usize, id: u64, zxid: Zxid) -> Result<(), Violation> {
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

    /// A core changed role: an observer member only ever observes, and an
    /// established leader has a quorum of voters behind its epoch and every
    /// acknowledged transaction on its disk.
    fn on_role_changed(&mut self, i: usize, role: Role, epoch: Epoch) -> Result<(), Violation> {
        let id = self.nodes[i].id;
        let last = self.nodes[i].disk.last();
        self.note(|| format!("{id:?} role {role:?} epoch {epoch} disk {last}"));
        let fresh = self.nodes[i].leading.is_none();
        self.nodes[i].leading = (role == Role::Leader).then_some(epoch);
        let observer = i >= self.voters;
        if role == Role::Observer {
            self.report.member_syncs += 1;
        }
        checker::role_fits(id, observer, role)?;
        if role != Role::Leader {
            return Ok(());
        }
        let voter_disks = self.nodes[..self.voters].iter().map(|n| &n.disk);
        checker::voter_quorum_behind(id, epoch, fresh, voter_disks)?;
        self.checker.on_established(id, epoch)?;
        self.checker
            .leader_log_complete(id, epoch, &self.nodes[i].disk)
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
                let voter_disks = self.nodes[..self.voters].iter().map(|n| &n.disk);
                checker::durable_on_quorum(id, e.zxid, pid, voter_disks)?;
                self.nodes[i].proposed.retain(|_, v| *v != pid);
                self.nodes[i].acks += 1;
                self.checker.on_ack(e.zxid, pid);
            }
        }
        Ok(())
    }

    /// Node `i` sends a message: I1 is checked against its disk, a SNAP chunk
    /// may be corrupted on the way, and the network carries it.
    fn send(&mut self, i: usize, to: PeerId, mut msg: Message) -> Result<(), Violation> {
        if self.opts.check_claims {
            checker::claims_on_disk(self.nodes[i].id, &self.nodes[i].disk, &msg)?;
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
        let packet = Packet { from: i, to, msg };
        let faulty = self.faults_on;
        self.net
            .send(&mut self.rng, &mut self.seq, self.now, faulty, packet);
        Ok(())
    }

    /// Group commit: every command issued so far becomes durable.
    fn complete_storage(&mut self, i: usize) -> Result<(), Violation> {
        let cmds = self.nodes[i].disk.take_unsynced();
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

    /// Executes a command on node `i`'s disk ([`Disk::execute`]); a long
    /// trace shows every change of epochs.
    fn apply_to_disk(&mut self, i: usize, cmd: StorageCmd, keep: usize) -> Result<bool, Violation> {
        let id = self.nodes[i].id;
        if let StorageCmd::SaveEpochs(ep) = &cmd {
            if self.opts.trace_lines > 1000 {
                let line = format!(
                    "{:>6} {id:?} epochs {:?} disk last {}",
                    self.now,
                    ep,
                    self.nodes[i].disk.last()
                );
                self.ring.push_back(line);
            }
        }
        self.nodes[i].disk.execute(id, cmd, keep, &mut self.checker)
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

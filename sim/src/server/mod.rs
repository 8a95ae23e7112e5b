//! The server-level simulation: every peer of the world also runs rzk's
//! server core (`rzk_server::core::Core`) over its quorum core, fed the way
//! the tokio shell feeds it in production, and simulated ZooKeeper clients
//! keep sessions on the members: they connect, read and write a small
//! keyspace, set watches, `sync`, lose their connection when a member
//! crashes or stops serving, and resume their session on another member.
//!
//! How a member's two cores are wired (what `rzk_quorum`'s driver and the
//! server's shell do with real IO):
//! - the quorum core's `Apply`, `ApplySnapshot`, `RoleChanged` and
//!   `Forwarded` outputs form the member's *commit stream*, one FIFO handed to
//!   the server core after a random delay (in production a channel the core
//!   task drains when it gets to it);
//! - sync barriers and failed proposals come back out of band, each after a
//!   delay of its own (a oneshot in production), so a barrier can overtake
//!   the txns it covers, as it can in production;
//! - the server core's effects become quorum inputs (`Propose`, `Forward`,
//!   `Sync`); the snapshots it streams are saved on the simulated disk with
//!   the sequence the quorum checker tracks, and a learner's SNAP installs
//!   them on another member.
//!
//! What is checked, besides every ZAB property the quorum simulation checks:
//! the client properties of `client.rs` on every reply, the core's own
//! invariants (`Core::check_invariants`: every ephemeral belongs to a live
//! session) after every step, and at the end every member's tree equal to
//! the committed history's.

mod client;
mod history;

use std::collections::{BTreeMap, VecDeque};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::task::{Context, Waker};

use bytes::{Bytes, BytesMut};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rzk_quorum::core::{Input as QInput, Output, SnapshotRef, Tick};
use rzk_quorum::{PeerId, ReplicateError, Role};
use rzk_server::acl::AuthInfo;
use rzk_server::config::ServerConfig;
use rzk_server::core::{
    Core, CoreBugs, CoreConfig, Due, Effect, Input, Permit, Req, RequestId, SnapshotChunk,
    SyncToken, Time, SNAPSHOT_QUEUE_SLOTS,
};
use rzk_server::outbox::{Next, Outbox};
use rzk_server::tree::{DataTree, SessionRecord};
use rzk_wire::client::{ClientCodec, Incoming};
use rzk_wire::{ConnectRequest, RequestFrame, SessionId};
use rzk_zxid::{Epoch, Zxid};
use tokio::sync::{mpsc, Semaphore};
use tokio_util::codec::Decoder;

use crate::checker::{violation, Violation};
use crate::{checksum, sm_encode, Event, World};
use client::Client;
use history::History;

/// What the server-level simulation runs.
#[derive(Clone, Debug)]
pub struct ServerOptions {
    /// Simulated client sessions.
    pub clients: usize,
    /// Known bugs of the server core to switch back on (each must be caught).
    pub bugs: CoreBugs,
    /// The server's `snapCount` (small, so snapshots are streamed, saved,
    /// sent by SNAP and loaded often).
    pub snap_count: u64,
    /// How long the commit stream takes from the quorum core to the server
    /// core, drawn from `lo..hi` simulated milliseconds.
    pub commit_delay_ms: (u64, u64),
}

impl ServerOptions {
    /// `base` with this server-level simulation and its fault rates: fewer
    /// crashes, partitions, connection resets and lost messages than the quorum
    /// simulation's, so that clients get stretches of service between faults
    /// (and sessions can expire between two elections) to do what the checks
    /// look at.
    pub fn apply_to(self, base: crate::Options) -> crate::Options {
        crate::Options {
            crash_interval_ms: (1_500, 5_000),
            sync_crash: 0.005,
            partition_gap_ms: (1_500, 5_000),
            link_reset_interval_ms: (1_500, 6_000),
            loss: 0.002,
            duplicate: 0.001,
            reorder: 0.002,
            server: Some(self),
            ..base
        }
    }
}

impl Default for ServerOptions {
    fn default() -> Self {
        ServerOptions {
            clients: 8,
            bugs: CoreBugs::default(),
            snap_count: 60,
            commit_delay_ms: (0, 10),
        }
    }
}

/// What the server-level simulation did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ServerReport {
    /// Connections clients opened.
    pub connects: u64,
    /// Sessions established (new ones).
    pub sessions: u64,
    /// Sessions resumed on a member (the same one or another).
    pub resumes: u64,
    /// Replies clients received and checked.
    pub replies: u64,
    /// Writes acknowledged to clients.
    pub acks: u64,
    /// Watch notifications received.
    pub notifications: u64,
    /// Sessions found expired when their client came back.
    pub expired: u64,
    /// Sessions the leader expired (committed closes of its own).
    pub expirations: u64,
    /// Snapshots the server cores streamed and saved.
    pub snapshots: u64,
    /// Snapshots server cores loaded (recovery and SNAP).
    pub loads: u64,
}

/// A member's commit stream item.
enum Item {
    Loaded(Box<(DataTree, Vec<SessionRecord>, Zxid)>),
    Txn(Zxid, Bytes),
    Role(Role, Option<PeerId>, Epoch),
    Forwarded(PeerId, Bytes),
}

/// An answer the server core gets out of band.
#[derive(Clone, Debug)]
pub(crate) enum Answer {
    Sync(u64, SyncToken, Result<Zxid, ReplicateError>),
    ProposalFailed(PeerId, RequestId, ReplicateError),
    ForwardFailed(u64),
}

/// Events of the server-level simulation.
#[derive(Clone, Debug)]
pub(crate) enum ServerEvent {
    /// A member's server core takes what its commit stream holds.
    Deliver { node: usize, incarnation: u64 },
    /// A member's server core gets an answer.
    Answer {
        node: usize,
        incarnation: u64,
        answer: Answer,
    },
    /// A client acts.
    Client { client: usize },
}

/// A snapshot the server core is streaming.
struct Streaming {
    zxid: Zxid,
    /// The quorum checker's sequence up to `zxid`, stored with it.
    sm: Bytes,
    rx: mpsc::Receiver<SnapshotChunk>,
    buf: Vec<u8>,
}

/// One member's server side.
struct Member {
    core: Option<Core>,
    incarnation: u64,
    stream: VecDeque<Item>,
    delivering: bool,
    proposals: BTreeMap<u64, (PeerId, RequestId)>,
    syncs: BTreeMap<u64, (u64, SyncToken)>,
    /// Connections of clients: connection id → client.
    conns: BTreeMap<u64, usize>,
    streaming: Option<Streaming>,
    /// When the periodic jobs are next due (simulated ms).
    due: [u64; 3],
}

/// A client and its connection.
struct Slot {
    client: Client,
    /// The member, connection id, outbox and decoder of its connection.
    conn: Option<(usize, u64, Arc<Outbox>, ClientCodec, BytesMut)>,
    /// The session is established on the connection.
    connected: bool,
    /// When the connection was opened or the oldest request sent (ms).
    waiting_since: u64,
    /// When it last sent anything (ms), for pings.
    last_sent: u64,
    /// Until when the client is silent (a paused or partitioned client: its
    /// session expires without it).
    silent_until: u64,
}

/// The state of the server-level simulation.
pub(crate) struct ServerMode {
    opts: ServerOptions,
    rng: ChaCha8Rng,
    members: Vec<Member>,
    slots: Vec<Slot>,
    history: History,
    next_conn: u64,
    global: Arc<Semaphore>,
    pub(crate) report: ServerReport,
}

/// The simulated wall clock starts here (ms since the epoch).
const WALL_START_MS: i64 = 1_700_000_000_000;
/// The server cores' tick (ms): expiry every tick, touches every half tick.
const SERVER_TICK_MS: u64 = 50;
/// The reaper's period (ms).
const REAP_MS: u64 = 400;
/// How long a client waits for its ConnectResponse before it tries another
/// member (ms).
const CONNECT_WAIT_MS: u64 = 300;

impl ServerMode {
    pub(crate) fn new(seed: u64, opts: ServerOptions, nodes: usize) -> ServerMode {
        let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x5e7e_e75e_5e7e_e75e);
        let slots = (0..opts.clients)
            .map(|c| Slot {
                client: Client::new(c, rng.random_range(400..4000)),
                conn: None,
                connected: false,
                waiting_since: 0,
                last_sent: 0,
                silent_until: 0,
            })
            .collect();
        ServerMode {
            members: (0..nodes)
                .map(|_| Member {
                    core: None,
                    incarnation: 0,
                    stream: VecDeque::new(),
                    delivering: false,
                    proposals: BTreeMap::new(),
                    syncs: BTreeMap::new(),
                    conns: BTreeMap::new(),
                    streaming: None,
                    due: [0; 3],
                })
                .collect(),
            slots,
            history: History::new(),
            next_conn: 1,
            global: Arc::new(Semaphore::new(1 << 20)),
            report: ServerReport::default(),
            opts,
            rng,
        }
    }
}

impl ServerMode {
    /// What the run did.
    pub(crate) fn report(&self) -> ServerReport {
        ServerReport {
            acks: self.history.acks,
            expirations: self.history.expirations,
            ..self.report.clone()
        }
    }
}

/// The quorum checker's part of a snapshot file of the server-level
/// simulation: `u64 length | the checker's sequence | the server's snapshot`.
pub(crate) fn sm_part(file: &Bytes) -> Bytes {
    split_file(file).0
}

fn split_file(file: &Bytes) -> (Bytes, Bytes) {
    if file.len() < 8 {
        return (Bytes::new(), Bytes::new());
    }
    let n = u64::from_le_bytes(file[..8].try_into().expect("8 bytes")) as usize;
    let n = n.min(file.len() - 8);
    (file.slice(8..8 + n), file.slice(8 + n..))
}

fn time(now_ms: u64) -> Time {
    Time {
        mono_us: now_ms * 1000,
        wall_ms: WALL_START_MS + now_ms as i64,
    }
}

fn server_config(opts: &ServerOptions) -> ServerConfig {
    ServerConfig {
        tick_time_ms: SERVER_TICK_MS as u32,
        min_session_timeout_ms: 2 * SERVER_TICK_MS as u32,
        max_session_timeout_ms: 20_000,
        snap_count: opts.snap_count,
        container_check_interval_ms: REAP_MS,
        ..ServerConfig::default()
    }
}

impl World {
    fn sv(&mut self) -> &mut ServerMode {
        self.server.as_mut().expect("server mode")
    }

    /// Schedules the clients' first actions.
    pub(crate) fn server_begin(&mut self) {
        let clients = self.sv().slots.len();
        for client in 0..clients {
            let at = 50 + self.sv().rng.random_range(0..50);
            self.schedule(at, Event::Server(ServerEvent::Client { client }));
        }
    }

    /// Peer `i` (re)starts: a new server core over it.
    pub(crate) fn server_start(&mut self, i: usize) {
        let now = self.now;
        let id = self.nodes[i].id;
        let sv = self.sv();
        let cfg = CoreConfig {
            test_bugs: sv.opts.bugs,
            ..CoreConfig::new(server_config(&sv.opts), id)
        };
        let seed = sv.rng.random();
        let m = &mut sv.members[i];
        m.core = Some(Core::new(
            cfg,
            rand::rngs::StdRng::seed_from_u64(seed),
            time(now),
        ));
        m.incarnation += 1;
        m.stream.clear();
        m.delivering = false;
        m.proposals.clear();
        m.syncs.clear();
        m.conns.clear();
        m.streaming = None;
        m.due = [now, now, now + REAP_MS];
    }

    /// Peer `i` crashed: its server core and every connection to it are gone.
    pub(crate) fn server_kill(&mut self, i: usize) {
        let sv = self.sv();
        let m = &mut sv.members[i];
        m.core = None;
        m.streaming = None;
        let conns: Vec<usize> = m.conns.values().copied().collect();
        m.conns.clear();
        for c in conns {
            let slot = &mut sv.slots[c];
            slot.conn = None;
            slot.connected = false;
            slot.client.disconnected();
        }
    }

    /// What a quorum output means for the server side of member `i`.
    pub(crate) fn server_on_output(&mut self, i: usize, o: &Output) -> Result<(), Violation> {
        let item = match o {
            Output::Apply(entries) => {
                for e in entries {
                    self.sv().history.on_commit(e.zxid, &e.payload)?;
                    let item = Item::Txn(e.zxid, e.payload.clone());
                    self.sv().members[i].stream.push_back(item);
                }
                None
            }
            Output::ApplySnapshot { snapshot } => Some(self.server_snapshot_item(i, snapshot)?),
            Output::RoleChanged {
                role,
                leader,
                epoch,
            } => Some(Item::Role(*role, *leader, *epoch)),
            Output::Forwarded { from, payload } => Some(Item::Forwarded(*from, payload.clone())),
            Output::SyncDone { id, zxid } => {
                return self.server_answer_sync(i, *id, Ok(*zxid));
            }
            Output::SyncFailed { id, error } => {
                return self.server_answer_sync(i, *id, Err(error.clone()));
            }
            Output::ProposeFailed { id, error } => {
                if let Some((origin, request)) = self.sv().members[i].proposals.remove(id) {
                    let answer = Answer::ProposalFailed(origin, request, error.clone());
                    self.server_schedule_answer(i, answer);
                }
                return Ok(());
            }
            Output::Proposed { id, .. } => {
                // From here on its outcome comes with the commit stream.
                self.sv().members[i].proposals.remove(id);
                return Ok(());
            }
            Output::Send { .. }
            | Output::Storage { .. }
            | Output::Read { .. }
            | Output::Refused { .. } => return Ok(()),
        };
        if let Some(item) = item {
            self.sv().members[i].stream.push_back(item);
        }
        if !self.sv().members[i].delivering && !self.sv().members[i].stream.is_empty() {
            let (lo, hi) = self.sv().opts.commit_delay_ms;
            let at = self.now + self.sv().rng.random_range(lo..hi.max(lo + 1));
            let sv = self.sv();
            let m = &mut sv.members[i];
            m.delivering = true;
            let incarnation = m.incarnation;
            self.schedule(
                at,
                Event::Server(ServerEvent::Deliver {
                    node: i,
                    incarnation,
                }),
            );
        }
        Ok(())
    }

    /// The snapshot the quorum core tells the state machine to load: empty
    /// on a new member, else the server's part of the file on this disk.
    fn server_snapshot_item(&mut self, i: usize, r: &SnapshotRef) -> Result<Item, Violation> {
        if r.size_bytes == 0 {
            return Ok(Item::Loaded(Box::new((
                DataTree::new(),
                Vec::new(),
                Zxid::ZERO,
            ))));
        }
        let Some(file) = self.nodes[i].disk.snapshot_bytes(r) else {
            return Err(violation(
                "SnapshotIntegrity",
                format!(
                    "{:?} loads snapshot {}, not on its disk",
                    self.nodes[i].id, r.zxid
                ),
            ));
        };
        let (_, server) = split_file(&file);
        let (tree, sessions, zxid) = DataTree::load_snapshot(&server).map_err(|e| {
            violation(
                "ServerSnapshotLoads",
                format!("the server snapshot at {} does not load: {e}", r.zxid),
            )
        })?;
        if zxid != r.zxid {
            return Err(violation(
                "ServerSnapshotLoads",
                format!("snapshot file {} holds a tree at {zxid}", r.zxid),
            ));
        }
        self.sv().report.loads += 1;
        Ok(Item::Loaded(Box::new((tree, sessions, zxid))))
    }

    fn server_answer_sync(
        &mut self,
        i: usize,
        id: u64,
        result: Result<Zxid, ReplicateError>,
    ) -> Result<(), Violation> {
        if let Some((conn, token)) = self.sv().members[i].syncs.remove(&id) {
            let answer = Answer::Sync(conn, token, result);
            self.server_schedule_answer(i, answer);
        }
        Ok(())
    }

    fn server_schedule_answer(&mut self, i: usize, answer: Answer) {
        let at = self.now + self.sv().rng.random_range(0..4);
        let incarnation = self.sv().members[i].incarnation;
        self.schedule(
            at,
            Event::Server(ServerEvent::Answer {
                node: i,
                incarnation,
                answer,
            }),
        );
    }

    /// An event of the server-level simulation.
    pub(crate) fn server_event(&mut self, ev: ServerEvent) -> Result<(), Violation> {
        match ev {
            ServerEvent::Deliver { node, incarnation } => {
                let m = &mut self.sv().members[node];
                if m.incarnation != incarnation || m.core.is_none() {
                    return Ok(());
                }
                m.delivering = false;
                while let Some(item) = self.sv().members[node].stream.pop_front() {
                    let input = match item {
                        Item::Loaded(loaded) => {
                            let (tree, sessions, zxid) = *loaded;
                            Input::Loaded {
                                tree: Box::new(tree),
                                sessions,
                                zxid,
                            }
                        }
                        Item::Txn(zxid, payload) => Input::Txn { zxid, payload },
                        Item::Role(role, leader, epoch) => Input::Role {
                            role,
                            leader,
                            epoch,
                        },
                        Item::Forwarded(from, payload) => Input::Forwarded { from, payload },
                    };
                    self.server_step(node, input)?;
                }
                Ok(())
            }
            ServerEvent::Answer {
                node,
                incarnation,
                answer,
            } => {
                let m = &self.sv().members[node];
                if m.incarnation != incarnation || m.core.is_none() {
                    return Ok(());
                }
                let input = match answer {
                    Answer::Sync(conn, token, result) => Input::SyncDone {
                        conn,
                        token,
                        result,
                    },
                    Answer::ProposalFailed(origin, request, error) => Input::ProposalFailed {
                        origin,
                        request,
                        error,
                    },
                    Answer::ForwardFailed(conn) => Input::ForwardFailed { conn },
                };
                self.server_step(node, input)
            }
            ServerEvent::Client { client } => self.client_act(client),
        }
    }

    /// Every quorum tick of peer `i`: the server core's periodic jobs that are
    /// due, and an idle step of a snapshot in progress.
    pub(crate) fn server_tick(&mut self, i: usize) -> Result<(), Violation> {
        let now = self.now;
        let m = &mut self.sv().members[i];
        let Some(core) = m.core.as_mut() else {
            return Ok(());
        };
        let every = [SERVER_TICK_MS, SERVER_TICK_MS / 2, REAP_MS];
        let mut due = [false; 3];
        for k in 0..3 {
            if m.due[k] <= now {
                due[k] = true;
                m.due[k] = now + every[k];
            }
        }
        if core.snapshot_in_progress() {
            let room = m
                .streaming
                .as_ref()
                .is_some_and(|s| s.rx.len() + 2 <= SNAPSHOT_QUEUE_SLOTS);
            if room {
                core.snapshot_idle_step();
            }
        }
        if due.iter().any(|d| *d) {
            let [expiry, touches, reap] = due;
            self.server_step(
                i,
                Input::Tick(Due {
                    expiry,
                    touches,
                    reap,
                }),
            )?;
        } else {
            self.server_pump(i)?;
        }
        Ok(())
    }

    /// One input to member `i`'s server core, then its effects, its outboxes
    /// and its invariants.
    fn server_step(&mut self, i: usize, input: Input) -> Result<(), Violation> {
        let now = time(self.now);
        let id = self.nodes[i].id;
        let m = &mut self.sv().members[i];
        let Some(core) = m.core.as_mut() else {
            return Ok(());
        };
        if let Err(e) = core.step(now, input) {
            return Err(violation(
                "ServerCoreStopped",
                format!("{id:?}'s server core stopped: {e}"),
            ));
        }
        let mut effects = Vec::new();
        core.take_effects(&mut effects);
        for e in effects {
            self.server_effect(i, e)?;
        }
        self.server_pump(i)?;
        let m = &self.sv().members[i];
        if let Some(core) = m.core.as_ref() {
            core.check_invariants()
                .map_err(|e| violation("ServerInvariant", format!("{id:?}: {e}")))?;
        }
        Ok(())
    }

    fn server_effect(&mut self, i: usize, e: Effect) -> Result<(), Violation> {
        match e {
            Effect::Propose {
                origin,
                request,
                txn,
            } => {
                let rid = self.next_request;
                self.next_request += 1;
                self.nodes[i]
                    .proposed
                    .insert(rid, crate::checker::payload_id_of(&txn));
                self.sv().members[i]
                    .proposals
                    .insert(rid, (origin, request));
                self.step(i, QInput::Propose(vec![(rid, txn)]))
            }
            Effect::Forward { conn, msg } => {
                let looking = self.nodes[i]
                    .peer
                    .as_ref()
                    .is_none_or(|p| p.role() == Role::Looking);
                if looking {
                    if let Some(conn) = conn {
                        self.server_schedule_answer(i, Answer::ForwardFailed(conn));
                    }
                    return Ok(());
                }
                self.step(i, QInput::Forward(msg))
            }
            Effect::Sync { conn, token } => {
                let rid = self.next_request;
                self.next_request += 1;
                self.sv().members[i].syncs.insert(rid, (conn, token));
                self.step(i, QInput::Sync { id: rid })
            }
            Effect::BeginSnapshot { zxid } => {
                let sm = &self.nodes[i].sm;
                let Some(pos) = sm.iter().position(|(z, _)| *z == zxid) else {
                    return Err(violation(
                        "ServerSnapshot",
                        format!(
                            "{:?}'s server began a snapshot at {zxid}, which its quorum core never delivered",
                            self.nodes[i].id
                        ),
                    ));
                };
                let sm = sm_encode(&sm[..=pos]);
                let (tx, rx) = mpsc::channel(SNAPSHOT_QUEUE_SLOTS);
                let m = &mut self.sv().members[i];
                if let Some(core) = m.core.as_mut() {
                    core.snapshot_into(tx);
                }
                m.streaming = Some(Streaming {
                    zxid,
                    sm,
                    rx,
                    buf: Vec::new(),
                });
                Ok(())
            }
        }
    }

    /// Moves what member `i`'s server wrote: snapshot chunks to its disk,
    /// replies and notifications to its clients.
    fn server_pump(&mut self, i: usize) -> Result<(), Violation> {
        self.server_take_chunks(i)?;
        let conns: Vec<(u64, usize)> = self.sv().members[i]
            .conns
            .iter()
            .map(|(k, v)| (*k, *v))
            .collect();
        for (conn, c) in conns {
            self.client_read(i, conn, c)?;
        }
        Ok(())
    }

    fn server_take_chunks(&mut self, i: usize) -> Result<(), Violation> {
        let m = &mut self.sv().members[i];
        let Some(s) = m.streaming.as_mut() else {
            return Ok(());
        };
        let mut done = false;
        loop {
            match s.rx.try_recv() {
                Ok(chunk) => {
                    s.buf.extend_from_slice(&chunk.data);
                    if chunk.last {
                        done = true;
                        break;
                    }
                }
                Err(mpsc::error::TryRecvError::Empty) => break,
                // Abandoned (a snapshot loaded meanwhile replaced the tree).
                Err(mpsc::error::TryRecvError::Disconnected) => {
                    m.streaming = None;
                    return Ok(());
                }
            }
        }
        if !done {
            return Ok(());
        }
        let s = m.streaming.take().expect("checked above");
        let mut file = Vec::with_capacity(8 + s.sm.len() + s.buf.len());
        file.extend_from_slice(&(s.sm.len() as u64).to_le_bytes());
        file.extend_from_slice(&s.sm);
        file.extend_from_slice(&s.buf);
        self.server_save_snapshot(i, s.zxid, Bytes::from(file))
    }

    /// A snapshot the server core finished is made durable, as the driver
    /// makes it: the newest on the disk, retention purges the log.
    fn server_save_snapshot(&mut self, i: usize, zxid: Zxid, file: Bytes) -> Result<(), Violation> {
        let retain = self.opts.snap_retain_count;
        let hold_log = self.opts.hold_log_for_syncs;
        let n = &mut self.nodes[i];
        let Some(peer) = n.peer.as_mut() else {
            return Ok(());
        };
        if zxid <= n.disk.base() || zxid > n.disk.last() {
            // A newer snapshot was installed meanwhile (a SNAP): this one is
            // of no use, as the driver finds.
            return Ok(());
        }
        let snapshot = SnapshotRef {
            zxid,
            size_bytes: file.len() as u64,
            crc: checksum(&file),
        };
        let hold = if hold_log {
            peer.log_needed_after()
        } else {
            None
        };
        let log_start = n.disk.save_snapshot(snapshot, file, retain, hold);
        let out = peer.step(
            Tick(self.now),
            QInput::SnapshotSaved {
                snapshot,
                log_start,
            },
        );
        let id = n.id;
        self.note(|| format!("{id:?} server snapshot at {zxid}, log purged up to {log_start}"));
        self.sv().report.snapshots += 1;
        self.handle_outputs(i, out)
    }

    // ---- clients ----

    fn schedule_client(&mut self, client: usize, lo: u64, hi: u64) {
        let at = self.now + self.sv().rng.random_range(lo..hi);
        self.schedule(at, Event::Server(ServerEvent::Client { client }));
    }

    /// Client `c` acts: connects, sends requests, pings, or gives up on a
    /// connection that does not answer.
    fn client_act(&mut self, c: usize) -> Result<(), Violation> {
        self.schedule_client(c, 5, 25);
        let now = self.now;
        let faults_on = self.faults_on;
        let slot = &self.sv().slots[c];
        let timeout = slot.client.timeout_ms as u64;
        if slot.silent_until > now {
            return Ok(());
        }
        let idle = slot.connected && slot.client.in_flight.is_empty();
        if faults_on && idle && self.sv().rng.random_bool(0.002) {
            // The client pauses for longer than its session timeout: the
            // leader expires the session and deletes its ephemerals.
            self.sv().slots[c].silent_until = now + timeout * 4;
            return Ok(());
        }
        let slot = &self.sv().slots[c];
        match &slot.conn {
            None => {
                if faults_on || slot.client.session != SessionId::NONE {
                    self.client_connect(c)?;
                }
                Ok(())
            }
            Some((member, conn, ..)) => {
                let (member, conn) = (*member, *conn);
                // A connect not answered soon is given up (the member is not
                // serving); a request, after two thirds of the session timeout.
                let limit = if slot.connected {
                    timeout * 2 / 3
                } else {
                    CONNECT_WAIT_MS
                };
                let waiting = !slot.connected || !slot.client.in_flight.is_empty();
                if waiting && now.saturating_sub(slot.waiting_since) > limit {
                    // No answer for too long: the client gives up on this
                    // connection and tries another member.
                    return self.client_drop(c, member, conn, true);
                }
                if !slot.connected || !slot.client.in_flight.is_empty() || slot.client.closing {
                    return Ok(());
                }
                if faults_on {
                    self.client_send_ops(c, member, conn)
                } else if now.saturating_sub(slot.last_sent) > timeout / 3 {
                    let acked = self.sv().history.acked_max;
                    let req = self.sv().slots[c].client.ping(acked);
                    self.client_send(c, member, conn, req)
                } else {
                    Ok(())
                }
            }
        }
    }

    fn client_connect(&mut self, c: usize) -> Result<(), Violation> {
        let live: Vec<usize> = (0..self.nodes.len())
            .filter(|i| self.sv().members[*i].core.is_some())
            .collect();
        if live.is_empty() {
            return Ok(());
        }
        let member = live[self.sv().rng.random_range(0..live.len())];
        let now = self.now;
        let sv = self.sv();
        let conn = sv.next_conn;
        sv.next_conn += 1;
        let peer = SocketAddr::new(
            IpAddr::V4(Ipv4Addr::new(10, 0, (c / 250) as u8, (c % 250) as u8 + 1)),
            40_000 + (conn % 20_000) as u16,
        );
        let outbox = Arc::new(Outbox::new(conn, peer, 1 << 22, 1024));
        let client = &sv.slots[c].client;
        let req = ConnectRequest {
            protocol_version: 0,
            last_zxid_seen: client.last_zxid,
            timeout_ms: client.timeout_ms,
            session_id: client.session,
            passwd: client.password.clone(),
            read_only: None,
        };
        sv.members[member].conns.insert(conn, c);
        let slot = &mut sv.slots[c];
        slot.conn = Some((
            member,
            conn,
            outbox.clone(),
            ClientCodec::new(),
            BytesMut::new(),
        ));
        slot.connected = false;
        slot.waiting_since = now;
        sv.report.connects += 1;
        let input = Input::Connect {
            conn,
            peer,
            auth: AuthInfo::for_peer(peer.ip()),
            outbox,
            req,
        };
        self.server_step(member, input)
    }

    /// Client `c` leaves its connection (tells the server when it gave up).
    fn client_drop(
        &mut self,
        c: usize,
        member: usize,
        conn: u64,
        tell: bool,
    ) -> Result<(), Violation> {
        let sv = self.sv();
        sv.members[member].conns.remove(&conn);
        let slot = &mut sv.slots[c];
        slot.conn = None;
        slot.connected = false;
        if slot.client.closing {
            slot.client.session_lost();
        } else {
            slot.client.disconnected();
        }
        if tell {
            self.server_step(member, Input::Closed { conn })?;
        }
        Ok(())
    }

    fn client_send_ops(&mut self, c: usize, member: usize, conn: u64) -> Result<(), Violation> {
        let count = self.sv().rng.random_range(1..4);
        for _ in 0..count {
            let (choice, value) = (self.sv().rng.random(), self.sv().rng.random());
            let acked = self.sv().history.acked_max;
            let sv = self.sv();
            let client = &mut sv.slots[c].client;
            if client.closing {
                break;
            }
            let req = client.next_request(choice, value, acked);
            let was_sync = matches!(req, rzk_wire::Request::Sync(_));
            self.client_send(c, member, conn, req)?;
            if was_sync {
                // A read right behind the sync: it must see what the sync saw.
                let acked = self.sv().history.acked_max;
                let req = self.sv().slots[c].client.read_after_sync(value, acked);
                self.client_send(c, member, conn, req)?;
            }
            if self.sv().slots[c].conn.is_none() {
                break;
            }
        }
        Ok(())
    }

    fn client_send(
        &mut self,
        c: usize,
        member: usize,
        conn: u64,
        request: rzk_wire::Request,
    ) -> Result<(), Violation> {
        let now = self.now;
        let sv = self.sv();
        let slot = &mut sv.slots[c];
        let Some((_, _, outbox, ..)) = slot.conn.as_ref() else {
            return Ok(());
        };
        let xid = slot.client.last_xid();
        let (Some(conn_slot), Ok(global)) =
            (outbox.try_slot(), sv.global.clone().try_acquire_owned())
        else {
            return Err(violation(
                "ServerSim",
                format!("client {c} found no request slot"),
            ));
        };
        if slot.client.in_flight.len() == 1 {
            slot.waiting_since = now;
        }
        slot.last_sent = now;
        let input = Input::Request {
            conn,
            req: Req::Frame(RequestFrame { xid, request }),
            permit: Permit {
                conn: conn_slot,
                global,
            },
        };
        self.server_step(member, input)
    }

    /// Reads what member `i` wrote on client `c`'s connection `conn`.
    fn client_read(&mut self, i: usize, conn: u64, c: usize) -> Result<(), Violation> {
        loop {
            let sv = self.sv();
            let slot = &mut sv.slots[c];
            let Some((_, _, outbox, _, buf)) = slot.conn.as_mut() else {
                return Ok(());
            };
            match outbox.poll_next(&mut Context::from_waker(Waker::noop())) {
                Next::Wait => return Ok(()),
                Next::Close => return self.client_drop(c, i, conn, true),
                Next::Write(bytes) => {
                    buf.extend_from_slice(&bytes);
                    self.client_decode(c)?;
                }
            }
        }
    }

    fn client_decode(&mut self, c: usize) -> Result<(), Violation> {
        let now = self.now;
        loop {
            let sv = self.sv();
            let slot = &mut sv.slots[c];
            let Some((_, _, _, codec, buf)) = slot.conn.as_mut() else {
                return Ok(());
            };
            let item = codec.decode(buf).map_err(|e| {
                violation(
                    "ServerReplyDecodes",
                    format!("client {c}: the server sent bytes that do not decode: {e}"),
                )
            })?;
            let Some(item) = item else {
                return Ok(());
            };
            match item {
                Incoming::Connect(resp) => {
                    let client = &mut slot.client;
                    if resp.session_id == SessionId::NONE || resp.timeout_ms == 0 {
                        if client.session != SessionId::NONE {
                            sv.report.expired += 1;
                        }
                        client.session_lost();
                    } else {
                        if resp.session_id == client.session {
                            sv.report.resumes += 1;
                        } else {
                            if client.session != SessionId::NONE {
                                return Err(violation(
                                    "ServerSessionOrder",
                                    format!(
                                        "client {c} resumed {} and got {}",
                                        client.session, resp.session_id
                                    ),
                                ));
                            }
                            sv.report.sessions += 1;
                        }
                        client.session = resp.session_id;
                        client.password = resp.passwd;
                        slot.connected = true;
                    }
                }
                Incoming::Notification(n) => {
                    sv.report.notifications += 1;
                    slot.client
                        .on_notification(n.event.event_type, &n.event.path);
                }
                Incoming::Reply(raw) => {
                    let ServerMode {
                        slots,
                        history,
                        report,
                        ..
                    } = sv;
                    let slot = &mut slots[c];
                    slot.client.on_reply(&raw, history)?;
                    report.replies += 1;
                    slot.waiting_since = now;
                }
            }
        }
    }

    /// Whether every server core has taken its whole commit stream and is
    /// at the history's last zxid, `target`.
    pub(crate) fn server_converged(&self, target: Zxid) -> bool {
        let Some(sv) = self.server.as_ref() else {
            return true;
        };
        sv.members
            .iter()
            .all(|m| m.stream.is_empty() && m.core.as_ref().is_some_and(|c| c.applied() == target))
    }

    /// At the end: every member's tree is the committed history's.
    pub(crate) fn server_final_checks(&mut self) -> Result<(), Violation> {
        let Some(sv) = self.server.as_ref() else {
            return Ok(());
        };
        let want = sv.history.shadow().dump();
        for (i, m) in sv.members.iter().enumerate() {
            let Some(core) = m.core.as_ref() else {
                continue;
            };
            if core.applied() != sv.history.last() {
                return Err(violation(
                    "ServerConverged",
                    format!(
                        "{:?} applied {}, the history ends at {}",
                        self.nodes[i].id,
                        core.applied(),
                        sv.history.last()
                    ),
                ));
            }
            let got = core.tree().dump();
            if got != want {
                let differ = want
                    .iter()
                    .find(|(p, v)| got.get(*p) != Some(v))
                    .map(|(p, _)| p.clone())
                    .or_else(|| got.keys().find(|p| !want.contains_key(*p)).cloned());
                return Err(violation(
                    "ServerTreesEqual",
                    format!(
                        "{:?}'s tree differs from the committed history's (first at {differ:?})",
                        self.nodes[i].id
                    ),
                ));
            }
        }
        Ok(())
    }
}

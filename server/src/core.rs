//! The core: one task owns the tree, the sessions, the watches and the
//! outstanding changes, and runs the pipeline of DESIGN.md:
//! prep → txn → replicate → apply → reply.
//!
//! - **Writes** are prepped in arrival order, proposed to the [`Replicator`],
//!   and applied when they come back on the commit stream, in zxid order. The
//!   reply is sent when the txn is applied (I6). Replay at start comes through
//!   the same commit stream and the same `apply`.
//! - **Per-session order**: each connection has a queue of requests not yet
//!   answered. A read is answered at once only if nothing is queued before it;
//!   otherwise it waits behind the session's pending writes and is served from
//!   the tree right after the write before it is applied. Replies therefore go
//!   out in request order (doc §4.3, §15.1).
//! - **Notifications before replies**: applying a txn fires its watches into
//!   every watcher's outbox *before* the txn's reply is queued, and the core is
//!   the only writer of outboxes, so on every connection the events of a write
//!   come before the reply to that write and before any later reply (§10.3).

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::{Bytes, BytesMut};
use foldhash::{HashMap, HashMapExt};
use futures::stream::FuturesUnordered;
use futures::StreamExt;
use rzk_quorum::{CommitStream, Committed, Proposal, ReplicateError, Replicator};
use rzk_wire::multi::MultiResult;
use rzk_wire::{
    frame, ConnectRequest, Create2Response, CreateResponse, ErrorCode, EventType, FourLetterWord,
    GetAclResponse, GetAllChildrenNumberResponse, GetChildren2Response, GetChildrenResponse,
    GetDataResponse, GetEphemeralsResponse, KeeperState, MultiReadOp, MultiResponse, Notification,
    OpCode, Perms, Record, Reply, Request, RequestFrame, Response, SetSaslResponse, SyncResponse,
    WatcherEvent, WhoAmIResponse, Xid,
};
use rzk_zxid::Zxid;
use tokio::sync::{mpsc, oneshot, OwnedSemaphorePermit};

use crate::acl::{self, AuthInfo, AuthOutcome};
use crate::apply::{self, Applied, Event, OpOutcome};
use crate::config::ServerConfig;
use crate::outbox::Outbox;
use crate::prep::{Caller, Prep, Write};
use crate::tree::{self, DataTree, SessionRecord};
use crate::txn::{Txn, TxnBody, TxnHeader};
use crate::watch::{ConnId, WatchKind, WatchManager};

/// The largest frame the server writes (a length prefix is an i32).
const REPLY_FRAME_BYTES_MAX: usize = i32::MAX as usize;
/// Nodes a snapshot writes per step when the core is otherwise idle.
const SNAPSHOT_STEP_NODES: usize = 4096;
/// Nodes a snapshot writes per applied txn, so that it finishes under a
/// load that never leaves the core idle.
const SNAPSHOT_NODES_PER_TXN: usize = 64;

/// Permits a request holds until it is answered: one of its connection's
/// outstanding slots and one of the server's (backpressure, I7).
#[derive(Debug)]
pub(crate) struct Permit {
    pub(crate) _conn: OwnedSemaphorePermit,
    pub(crate) _global: OwnedSemaphorePermit,
}

/// A request as the connection task hands it over.
#[derive(Debug)]
pub(crate) enum Req {
    /// A decoded request.
    Frame(RequestFrame),
    /// A request whose record could not be decoded: MARSHALLINGERROR.
    Malformed { xid: Xid, opcode: OpCode },
    /// An unknown opcode: UNIMPLEMENTED, then close.
    Unknown { xid: Xid },
}

/// Messages to the core.
#[derive(Debug)]
pub(crate) enum CoreMsg {
    /// A connection sent its ConnectRequest.
    Connect {
        conn: ConnId,
        peer: SocketAddr,
        /// What the connection holds before any auth packet (its address; a
        /// TLS client certificate's `x509` subject).
        auth: AuthInfo,
        outbox: Arc<Outbox>,
        req: ConnectRequest,
    },
    /// A request on a connection.
    Request {
        conn: ConnId,
        req: Req,
        permit: Permit,
    },
    /// The connection is gone.
    Closed { conn: ConnId },
    /// A four-letter word to answer.
    FourLetter {
        word: FourLetterWord,
        reply: oneshot::Sender<String>,
    },
    /// An owned stats snapshot (AdminServer, metrics); `details` adds watch,
    /// session and ephemeral lists and directory sizes.
    Stats {
        details: bool,
        reply: oneshot::Sender<crate::stats::ServerStats>,
    },
    /// Graceful shutdown: finish in-flight writes, then close everything.
    Shutdown,
}

/// The core's configuration, taken from [`ServerConfig`].
#[derive(Debug, Clone)]
pub(crate) struct CoreConfig {
    pub(crate) server: ServerConfig,
    pub(crate) server_id: u64,
}

/// A session.
#[derive(Debug)]
pub(crate) struct Session {
    pub(crate) timeout_ms: i32,
    pub(crate) password: [u8; 16],
    /// The connection attached to it, if any.
    pub(crate) conn: Option<ConnId>,
    /// When it expires without traffic.
    pub(crate) deadline: Instant,
    /// A closeSession is in flight: further writes get SESSIONEXPIRED.
    pub(crate) closing: bool,
}

#[derive(Debug)]
pub(crate) enum ConnState {
    /// Its session is being created (a txn in flight); requests wait.
    Connecting,
    /// Serving this session.
    Connected(i64),
    /// Being closed; requests are ignored.
    Closing,
}

/// How a write's reply is built once applied.
#[derive(Debug)]
enum ReplyAs {
    Op(OpCode),
    Multi(Vec<OpCode>),
    CloseSession,
}

/// A request of a connection that is not answered yet.
#[derive(Debug)]
enum Pending {
    /// A write in flight; answered when txn `seq` is applied.
    Write {
        seq: u64,
        xid: Xid,
        reply_as: ReplyAs,
        started: Instant,
        _permit: Permit,
    },
    /// A read (or other ordered request) waiting behind a write.
    Read {
        frame: RequestFrame,
        started: Instant,
        _permit: Permit,
    },
    /// A read that is already an error (malformed), waiting its turn.
    Error {
        xid: Xid,
        code: ErrorCode,
        started: Instant,
        _permit: Permit,
    },
    /// A sync waiting for its barrier and for the tree to reach it.
    Sync {
        token: u64,
        xid: Xid,
        path: rzk_wire::ByteString,
        barrier: Option<Zxid>,
        started: Instant,
        _permit: Permit,
    },
}

/// Per-connection statistics (cons, stat).
#[derive(Debug, Default, Clone)]
pub(crate) struct ConnStats {
    pub(crate) received: u64,
    pub(crate) sent: u64,
    pub(crate) last_op: &'static str,
    pub(crate) last_cxid: i32,
    pub(crate) last_zxid: i64,
    pub(crate) last_latency_ms: u64,
    pub(crate) min_latency_ms: u64,
    pub(crate) max_latency_ms: u64,
    pub(crate) total_latency_ms: u64,
    pub(crate) replies: u64,
    pub(crate) last_response: Option<Instant>,
}

/// A client connection as the core sees it.
#[derive(Debug)]
pub(crate) struct Conn {
    pub(crate) outbox: Arc<Outbox>,
    pub(crate) peer: SocketAddr,
    pub(crate) auth: AuthInfo,
    pub(crate) state: ConnState,
    /// Requests that arrived while the session was being created.
    backlog: VecDeque<(Req, Permit)>,
    /// Requests not yet answered, in arrival order.
    queue: VecDeque<Pending>,
    /// Whether the ConnectRequest carried the readOnly byte: the
    /// ConnectResponse carries it exactly then (doc §3.2).
    read_only_byte: bool,
    pub(crate) established_ms: i64,
    pub(crate) stats: ConnStats,
}

impl Conn {
    pub(crate) fn session(&self) -> Option<i64> {
        match self.state {
            ConnState::Connected(s) => Some(s),
            ConnState::Connecting | ConnState::Closing => None,
        }
    }

    pub(crate) fn queued(&self) -> usize {
        self.queue.len() + self.backlog.len()
    }
}

/// What a txn in flight is for.
#[derive(Debug)]
enum Origin {
    /// A client write; the reply goes to this connection.
    Client(ConnId),
    /// A new session for this connection.
    Connect(ConnId),
    /// Session expiry, container or TTL deletion: nobody to answer.
    Server,
}

/// A txn proposed and not yet applied.
#[derive(Debug)]
struct InFlight {
    seq: u64,
    session: i64,
    cxid: i32,
    origin: Origin,
    touched: Vec<String>,
}

/// A sync barrier resolved: the connection, the sync's token, the barrier.
type SyncDone = (ConnId, u64, Result<Zxid, ReplicateError>);

/// Server-wide statistics (srvr, mntr).
#[derive(Debug, Default)]
pub(crate) struct Stats {
    pub(crate) packets_received: u64,
    pub(crate) packets_sent: u64,
    pub(crate) min_latency_ms: u64,
    pub(crate) max_latency_ms: u64,
    pub(crate) total_latency_ms: u64,
    pub(crate) replies: u64,
    pub(crate) auth_failed: u64,
    pub(crate) last_response_bytes: usize,
    pub(crate) min_response_bytes: usize,
    pub(crate) max_response_bytes: usize,
    /// ZooKeeper's `readlatency` and `updatelatency` summaries.
    pub(crate) read_latency: crate::stats::Latency,
    pub(crate) update_latency: crate::stats::Latency,
}

/// The core task's state.
pub(crate) struct Core {
    pub(crate) cfg: CoreConfig,
    pub(crate) replicator: Arc<dyn Replicator>,
    commits: CommitStream,
    pub(crate) tree: DataTree,
    prep: Prep,
    pub(crate) watches: WatchManager,
    pub(crate) sessions: HashMap<i64, Session>,
    pub(crate) conns: HashMap<ConnId, Conn>,
    in_flight: VecDeque<InFlight>,
    next_seq: u64,
    /// The last applied zxid.
    pub(crate) applied: Zxid,
    next_session_id: i64,
    txns_since_snapshot: u64,
    /// Applied txns after which the next snapshot starts: between half of
    /// snapCount and snapCount, drawn again after each snapshot.
    snapshot_after_txns: u64,
    /// Proposals not yet resolved: watched only for failures, since the commit
    /// stream delivers the successes.
    proposals: FuturesUnordered<Proposal>,
    snapshot_saves: FuturesUnordered<Proposal>,
    syncs: FuturesUnordered<tokio::task::JoinHandle<SyncDone>>,
    next_sync_token: u64,
    pub(crate) stats: Stats,
    pub(crate) started: Instant,
    shutting_down: bool,
}

/// Wall-clock ms since the epoch: ZooKeeper's ctime/mtime.
/// When the next snapshot starts, in applied txns: as ZooKeeper does,
/// snapCount/2 plus a random share of snapCount/2, so that the members of an
/// ensemble (which apply the same txns) do not all snapshot at once.
fn snapshot_trigger(snap_count: u64) -> u64 {
    let half = snap_count / 2;
    (half + rand::random_range(0..=snap_count - half)).max(1)
}

pub(crate) fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

fn is_write(op: OpCode) -> bool {
    matches!(
        op,
        OpCode::Create
            | OpCode::Create2
            | OpCode::CreateContainer
            | OpCode::CreateTtl
            | OpCode::Delete
            | OpCode::SetData
            | OpCode::SetAcl
            | OpCode::Check
            | OpCode::Multi
            | OpCode::CloseSession
    )
}

/// Why the core stopped.
#[derive(Debug, thiserror::Error)]
pub enum CoreError {
    /// The commit stream ended or was taken.
    #[error("the commit stream is unavailable: {0}")]
    Commits(String),
    /// A committed txn or snapshot could not be decoded.
    #[error("corrupt history: {0}")]
    Corrupt(String),
    /// The replicator failed.
    #[error("replication failed: {0}")]
    Replicate(#[from] ReplicateError),
}

impl Core {
    /// Takes the commit stream and applies the start-up replay (snapshot + log)
    /// until the first serving [`Committed::Role`]. Clients are served only after this.
    pub(crate) async fn recover(
        cfg: CoreConfig,
        replicator: Arc<dyn Replicator>,
    ) -> Result<Core, CoreError> {
        let mut commits = replicator
            .take_commits()
            .ok_or_else(|| CoreError::Commits("already taken".into()))?;
        let base = ((cfg.server_id as i64) << 56) | (((now_ms() << 24) as u64) >> 8) as i64;
        let snapshot_after_txns = snapshot_trigger(cfg.server.snap_count);
        let mut core = Core {
            prep: Prep::new(cfg.server.extended_types_enabled),
            cfg,
            replicator,
            commits: CommitStream::new(mpsc::channel(1).1),
            tree: DataTree::new(),
            watches: WatchManager::default(),
            sessions: HashMap::new(),
            conns: HashMap::new(),
            in_flight: VecDeque::new(),
            next_seq: 1,
            applied: Zxid::ZERO,
            next_session_id: base,
            txns_since_snapshot: 0,
            snapshot_after_txns,
            proposals: FuturesUnordered::new(),
            snapshot_saves: FuturesUnordered::new(),
            syncs: FuturesUnordered::new(),
            next_sync_token: 1,
            stats: Stats::default(),
            started: Instant::now(),
            shutting_down: false,
        };
        let mut replayed = 0u64;
        loop {
            match commits.next().await {
                None => return Err(CoreError::Commits("ended during recovery".into())),
                Some(Committed::Role {
                    role:
                        rzk_quorum::Role::Leader
                        | rzk_quorum::Role::Follower
                        | rzk_quorum::Role::Observer,
                    zxid,
                    ..
                }) => {
                    tracing::info!(
                        last_zxid = %zxid,
                        replayed,
                        nodes = core.tree.node_count(),
                        sessions = core.sessions.len(),
                        "recovered from snapshot and log"
                    );
                    break;
                }
                Some(item) => {
                    core.on_committed(item)?;
                    replayed += 1;
                }
            }
        }
        core.commits = commits;
        // ZooKeeper restarts every recovered session's timer at load: a client
        // that reconnects within its timeout keeps its session.
        let now = Instant::now();
        for s in core.sessions.values_mut() {
            s.deadline = now + Duration::from_millis(s.timeout_ms.max(0) as u64);
        }
        Ok(core)
    }

    /// The main loop: runs until shutdown or a fatal replication error.
    pub(crate) async fn run(mut self, mut rx: mpsc::Receiver<CoreMsg>) -> Result<(), CoreError> {
        let tick = Duration::from_millis(u64::from(self.cfg.server.tick_time_ms).max(1));
        let mut expiry = tokio::time::interval(tick);
        expiry.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let reap_every = Duration::from_millis(self.cfg.server.container_check_interval_ms.max(1));
        let mut reaper =
            tokio::time::interval_at(tokio::time::Instant::now() + reap_every, reap_every);
        reaper.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut rx_open = true;
        loop {
            if self.shutting_down && self.in_flight.is_empty() {
                break;
            }
            tokio::select! {
                biased;
                item = self.commits.next() => match item {
                    Some(item) => self.on_committed(item)?,
                    None => return Err(CoreError::Commits("the replicator stopped".into())),
                },
                Some(result) = self.proposals.next(), if !self.proposals.is_empty() => {
                    if let Err(e) = result {
                        tracing::error!(error = %e, "a proposal failed; the server stops");
                        return Err(e.into());
                    }
                }
                Some(joined) = self.syncs.next(), if !self.syncs.is_empty() => {
                    if let Ok((conn, token, result)) = joined {
                        let zxid = result?;
                        self.on_sync_ready(conn, token, zxid);
                    }
                }
                _ = expiry.tick() => self.expire_sessions(),
                _ = reaper.tick() => self.reap(),
                Some(saved) = self.snapshot_saves.next(), if !self.snapshot_saves.is_empty() => {
                    match saved {
                        Ok(z) => tracing::info!(zxid = %z, "snapshot saved"),
                        Err(e) => tracing::error!(error = %e, "saving a snapshot failed"),
                    }
                }
                msg = rx.recv(), if rx_open => match msg {
                    Some(msg) => self.on_msg(msg),
                    None => { rx_open = false; self.begin_shutdown(); }
                },
                _ = std::future::ready(()), if self.tree.snapshot_in_progress() => {
                    self.snapshot_step();
                }
            }
        }
        for conn in self.conns.values() {
            conn.outbox.close_after_flush();
        }
        // Let snapshot saves already handed over finish.
        while let Some(saved) = self.snapshot_saves.next().await {
            if let Err(e) = saved {
                tracing::error!(error = %e, "saving a snapshot failed");
            }
        }
        Ok(())
    }

    fn begin_shutdown(&mut self) {
        if !self.shutting_down {
            tracing::info!(
                in_flight = self.in_flight.len(),
                "shutting down: finishing in-flight writes"
            );
            self.shutting_down = true;
        }
    }

    fn on_msg(&mut self, msg: CoreMsg) {
        match msg {
            CoreMsg::Connect {
                conn,
                peer,
                auth,
                outbox,
                req,
            } => self.on_connect(conn, peer, auth, outbox, req),
            CoreMsg::Request { conn, req, permit } => self.on_request(conn, req, permit),
            CoreMsg::Closed { conn } => self.on_closed(conn),
            CoreMsg::FourLetter { word, reply } => {
                let _ = reply.send(self.four_letter(word));
            }
            CoreMsg::Stats { details, reply } => {
                let _ = reply.send(self.stats_snapshot(details));
            }
            CoreMsg::Shutdown => self.begin_shutdown(),
        }
    }

    // ---- sessions and connections ----

    fn negotiate(&self, requested: i32) -> i32 {
        let min = self.cfg.server.min_session_timeout_ms as i32;
        let max = self.cfg.server.max_session_timeout_ms as i32;
        requested.clamp(min, max)
    }

    fn on_connect(
        &mut self,
        id: ConnId,
        peer: SocketAddr,
        auth: AuthInfo,
        outbox: Arc<Outbox>,
        req: ConnectRequest,
    ) {
        if self.shutting_down {
            outbox.close_now();
            return;
        }
        // doc §3.6: a client that has seen more than this server has applied
        // must not go back in time here.
        if req.last_zxid_seen > self.applied {
            tracing::info!(
                %peer,
                client_last_zxid = %req.last_zxid_seen,
                server_last_zxid = %self.applied,
                "refusing a client that has seen a later zxid than this server"
            );
            outbox.close_now();
            return;
        }
        let negotiated = self.negotiate(req.timeout_ms);
        let mut conn = Conn {
            outbox,
            peer,
            auth,
            state: ConnState::Connecting,
            backlog: VecDeque::new(),
            queue: VecDeque::new(),
            read_only_byte: req.read_only.is_some(),
            established_ms: now_ms(),
            stats: ConnStats::default(),
        };
        conn.stats.received = 1;
        self.stats.packets_received += 1;
        if req.session_id.0 == 0 {
            let session = self.allocate_session_id();
            let password: [u8; 16] = rand::random();
            self.conns.insert(id, conn);
            let seq = self.take_seq();
            let txn = Txn {
                header: self.header(session, 0),
                body: TxnBody::CreateSession {
                    timeout_ms: negotiated,
                    password,
                },
            };
            self.propose(txn, seq, Origin::Connect(id), Vec::new());
            return;
        }
        let sid = req.session_id.0;
        // doc §3.5 step 1: any other connection of this session is closed
        // first, even if the password turns out wrong.
        if let Some(old) = self.sessions.get_mut(&sid).and_then(|s| s.conn.take()) {
            if old != id {
                if let Some(c) = self.conns.get_mut(&old) {
                    c.state = ConnState::Closing;
                    c.outbox.close_now();
                }
            }
        }
        let valid = self
            .sessions
            .get(&sid)
            .is_some_and(|s| !s.closing && s.password[..] == req.passwd[..]);
        if !valid {
            tracing::info!(session = %format_sid(sid), %peer, "refusing to resume an expired session or a wrong password");
            push_frame(&conn.outbox, |b| req.reject().encode(b));
            conn.outbox.close_after_flush();
            return;
        }
        let s = self.sessions.get_mut(&sid).expect("checked above");
        s.conn = Some(id);
        s.timeout_ms = negotiated;
        s.deadline = Instant::now() + Duration::from_millis(negotiated as u64);
        let resp = req.accept(
            negotiated,
            rzk_wire::SessionId(sid),
            Bytes::copy_from_slice(&s.password),
        );
        push_frame(&conn.outbox, |b| resp.encode(b));
        conn.state = ConnState::Connected(sid);
        conn.stats.sent += 1;
        self.stats.packets_sent += 1;
        tracing::info!(session = %format_sid(sid), %peer, timeout_ms = negotiated, "session resumed");
        self.conns.insert(id, conn);
    }

    fn allocate_session_id(&mut self) -> i64 {
        loop {
            let id = self.next_session_id;
            self.next_session_id = self.next_session_id.wrapping_add(1);
            // Keep ids positive and clear of the container/TTL owner encodings.
            if id > 0 && !self.sessions.contains_key(&id) && tree::owner_is_session(id) {
                return id;
            }
        }
    }

    fn on_closed(&mut self, id: ConnId) {
        let Some(conn) = self.conns.remove(&id) else {
            return;
        };
        self.watches.remove_conn(id);
        if let Some(sid) = conn.session() {
            if let Some(s) = self.sessions.get_mut(&sid) {
                if s.conn == Some(id) {
                    s.conn = None;
                }
            }
            tracing::debug!(session = %format_sid(sid), peer = %conn.peer, "connection closed");
        }
    }

    fn touch(&mut self, sid: i64) {
        if let Some(s) = self.sessions.get_mut(&sid) {
            s.deadline = Instant::now() + Duration::from_millis(s.timeout_ms.max(0) as u64);
        }
    }

    fn expire_sessions(&mut self) {
        if self.shutting_down {
            return;
        }
        let now = Instant::now();
        let expired: Vec<i64> = self
            .sessions
            .iter()
            .filter(|(_, s)| !s.closing && s.deadline <= now)
            .map(|(id, _)| *id)
            .collect();
        for sid in expired {
            tracing::info!(session = %format_sid(sid), "session expired");
            self.close_session(sid, 0, Origin::Server);
        }
    }

    fn close_session(&mut self, sid: i64, cxid: i32, origin: Origin) -> u64 {
        if let Some(s) = self.sessions.get_mut(&sid) {
            s.closing = true;
        }
        let seq = self.take_seq();
        let prepped = self.prep.prep_close_session(&self.tree, seq, sid);
        let txn = Txn {
            header: self.header(sid, cxid),
            body: prepped.body,
        };
        self.propose(txn, seq, origin, prepped.touched);
        seq
    }

    // ---- requests ----

    fn on_request(&mut self, id: ConnId, req: Req, permit: Permit) {
        self.stats.packets_received += 1;
        let Some(conn) = self.conns.get_mut(&id) else {
            return;
        };
        conn.stats.received += 1;
        match conn.state {
            ConnState::Connecting => conn.backlog.push_back((req, permit)),
            ConnState::Closing => {}
            ConnState::Connected(sid) => {
                if self.shutting_down {
                    return;
                }
                self.touch(sid);
                self.process(id, sid, req, permit);
            }
        }
    }

    fn process(&mut self, id: ConnId, sid: i64, req: Req, permit: Permit) {
        let now = Instant::now();
        let frame = match req {
            Req::Unknown { xid } => {
                if let Some(conn) = self.conns.get_mut(&id) {
                    tracing::info!(peer = %conn.peer, "unknown opcode: closing the connection");
                    let reply = Reply::unimplemented(xid);
                    self.stats.packets_sent += 1;
                    push_frame(&conn.outbox, |b| reply.encode_payload(b));
                    conn.outbox.close_after_flush();
                    conn.state = ConnState::Closing;
                }
                return;
            }
            Req::Malformed { xid, opcode } => {
                if is_write(opcode) {
                    self.propose_write(
                        id,
                        sid,
                        xid,
                        ReplyAs::Op(opcode),
                        TxnBody::Error(ErrorCode::MarshallingError),
                        Vec::new(),
                        permit,
                    );
                } else {
                    self.enqueue_or_answer(
                        id,
                        Pending::Error {
                            xid,
                            code: ErrorCode::MarshallingError,
                            started: now,
                            _permit: permit,
                        },
                    );
                }
                return;
            }
            Req::Frame(frame) => frame,
        };
        let xid = frame.xid;
        let op = frame.request.opcode();
        // Prep borrows the connection's identities in place: no per-request
        // copy of them on the hot path.
        let prepped = {
            let Some(conn) = self.conns.get(&id) else {
                return;
            };
            let caller = Caller {
                session: sid,
                auth: &conn.auth,
                session_valid: self.sessions.get(&sid).is_some_and(|s| !s.closing),
            };
            let seq = self.next_seq;
            let (prep, tree) = (&mut self.prep, &self.tree);
            match &frame.request {
                Request::Create(r) | Request::Create2(r) | Request::CreateContainer(r) => Some((
                    ReplyAs::Op(op),
                    prep.prep(tree, seq, caller, Write::Create(op, r)),
                )),
                Request::CreateTtl(r) => Some((
                    ReplyAs::Op(op),
                    prep.prep(tree, seq, caller, Write::CreateTtl(r)),
                )),
                Request::Delete(r) => Some((
                    ReplyAs::Op(op),
                    prep.prep(tree, seq, caller, Write::Delete(r)),
                )),
                Request::SetData(r) => Some((
                    ReplyAs::Op(op),
                    prep.prep(tree, seq, caller, Write::SetData(r)),
                )),
                Request::SetAcl(r) => Some((
                    ReplyAs::Op(op),
                    prep.prep(tree, seq, caller, Write::SetAcl(r)),
                )),
                Request::Check(r) => Some((
                    ReplyAs::Op(op),
                    prep.prep(tree, seq, caller, Write::Check(r)),
                )),
                Request::Multi(m) => {
                    let ops: Vec<OpCode> = m.ops.iter().map(|o| o.opcode()).collect();
                    Some((
                        ReplyAs::Multi(ops),
                        prep.prep_multi(tree, seq, caller, &m.ops),
                    ))
                }
                Request::Exists(_)
                | Request::GetData(_)
                | Request::GetAcl(_)
                | Request::GetChildren(_)
                | Request::Sync(_)
                | Request::Ping
                | Request::GetChildren2(_)
                | Request::Reconfig(_)
                | Request::CheckWatches(_)
                | Request::RemoveWatches(_)
                | Request::MultiRead(_)
                | Request::Auth(_)
                | Request::SetWatches(_)
                | Request::Sasl(_)
                | Request::GetEphemerals(_)
                | Request::GetAllChildrenNumber(_)
                | Request::SetWatches2(_)
                | Request::AddWatch(_)
                | Request::WhoAmI
                | Request::CloseSession => None,
            }
        };
        if let Some((reply_as, p)) = prepped {
            self.propose_write(id, sid, xid, reply_as, p.body, p.touched, permit);
            return;
        }
        match &frame.request {
            Request::Auth(packet) => {
                self.on_auth(id, &packet.scheme, &packet.auth);
            }
            Request::Create(_)
            | Request::Create2(_)
            | Request::CreateContainer(_)
            | Request::CreateTtl(_)
            | Request::Delete(_)
            | Request::SetData(_)
            | Request::SetAcl(_)
            | Request::Check(_)
            | Request::Multi(_) => {}
            Request::CloseSession => {
                tracing::info!(session = %format_sid(sid), "session closing at the client's request");
                let seq = self.close_session(sid, xid.0, Origin::Client(id));
                if let Some(conn) = self.conns.get_mut(&id) {
                    conn.stats.last_op = "CLOS";
                    conn.queue.push_back(Pending::Write {
                        seq,
                        xid,
                        reply_as: ReplyAs::CloseSession,
                        started: now,
                        _permit: permit,
                    });
                }
            }
            Request::Sync(r) => {
                let token = self.next_sync_token;
                self.next_sync_token += 1;
                let barrier = self.replicator.sync();
                self.syncs
                    .push(tokio::spawn(async move { (id, token, barrier.await) }));
                if let Some(conn) = self.conns.get_mut(&id) {
                    conn.queue.push_back(Pending::Sync {
                        token,
                        xid,
                        path: r.path.clone(),
                        barrier: None,
                        started: now,
                        _permit: permit,
                    });
                }
            }
            Request::Exists(_)
            | Request::GetData(_)
            | Request::GetAcl(_)
            | Request::GetChildren(_)
            | Request::GetChildren2(_)
            | Request::Ping
            | Request::Reconfig(_)
            | Request::CheckWatches(_)
            | Request::RemoveWatches(_)
            | Request::MultiRead(_)
            | Request::SetWatches(_)
            | Request::Sasl(_)
            | Request::GetEphemerals(_)
            | Request::GetAllChildrenNumber(_)
            | Request::SetWatches2(_)
            | Request::AddWatch(_)
            | Request::WhoAmI => {
                self.enqueue_or_answer(
                    id,
                    Pending::Read {
                        frame,
                        started: now,
                        _permit: permit,
                    },
                );
            }
        }
    }

    fn on_auth(&mut self, id: ConnId, scheme: &str, auth: &[u8]) {
        let super_digest = self.cfg.server.super_digest.clone();
        let Some(conn) = self.conns.get_mut(&id) else {
            return;
        };
        let outcome = acl::authenticate(
            &mut conn.auth,
            scheme,
            auth,
            conn.peer.ip(),
            super_digest.as_deref(),
        );
        // doc §12.6: auth is answered at once, outside the ordered pipeline,
        // with zxid 0.
        let reply = match outcome {
            AuthOutcome::Added => Reply::ok(Xid::AUTH, Zxid::ZERO, Response::Empty),
            AuthOutcome::Failed => Reply::error(Xid::AUTH, Zxid::ZERO, ErrorCode::AuthFailed),
        };
        conn.stats.sent += 1;
        self.stats.packets_sent += 1;
        push_frame(&conn.outbox, |b| reply.encode_payload(b));
        if outcome == AuthOutcome::Failed {
            self.stats.auth_failed += 1;
            tracing::info!(peer = %conn.peer, scheme, "auth with an unknown scheme: closing the connection");
            conn.outbox.close_after_flush();
            conn.state = ConnState::Closing;
        }
    }

    fn take_seq(&mut self) -> u64 {
        let s = self.next_seq;
        self.next_seq += 1;
        s
    }

    fn header(&self, session: i64, cxid: i32) -> TxnHeader {
        TxnHeader {
            session,
            cxid,
            time_ms: now_ms(),
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn propose_write(
        &mut self,
        id: ConnId,
        sid: i64,
        xid: Xid,
        reply_as: ReplyAs,
        body: TxnBody,
        touched: Vec<String>,
        permit: Permit,
    ) {
        let seq = self.take_seq();
        let txn = Txn {
            header: self.header(sid, xid.0),
            body,
        };
        if let Some(conn) = self.conns.get_mut(&id) {
            conn.stats.last_op = op_abbrev(&reply_as);
            conn.stats.last_cxid = xid.0;
            conn.queue.push_back(Pending::Write {
                seq,
                xid,
                reply_as,
                started: Instant::now(),
                _permit: permit,
            });
        }
        self.propose(txn, seq, Origin::Client(id), touched);
    }

    fn propose(&mut self, txn: Txn, seq: u64, origin: Origin, touched: Vec<String>) {
        self.in_flight.push_back(InFlight {
            seq,
            session: txn.header.session,
            cxid: txn.header.cxid,
            origin,
            touched,
        });
        self.proposals.push(self.replicator.propose(txn.encode()));
    }

    fn enqueue_or_answer(&mut self, id: ConnId, pending: Pending) {
        let Some(conn) = self.conns.get_mut(&id) else {
            return;
        };
        conn.queue.push_back(pending);
        self.drain(id);
    }

    /// Answers the connection's queued requests that can be answered now: reads
    /// up to the first write still in flight or sync still waiting.
    fn drain(&mut self, id: ConnId) {
        loop {
            let Some(conn) = self.conns.get_mut(&id) else {
                return;
            };
            let ready = match conn.queue.front() {
                None | Some(Pending::Write { .. }) => false,
                Some(Pending::Sync { barrier, .. }) => barrier.is_some_and(|b| b <= self.applied),
                Some(Pending::Read { .. }) | Some(Pending::Error { .. }) => true,
            };
            if !ready {
                return;
            }
            let item = conn.queue.pop_front().expect("front checked");
            match item {
                Pending::Read { frame, started, .. } => {
                    let reply = self.serve_read(id, &frame);
                    self.send_reply(id, &reply, started);
                    self.stats.read_latency.record_since(started);
                }
                Pending::Error {
                    xid, code, started, ..
                } => {
                    let reply = Reply::error(xid, self.applied, code);
                    self.send_reply(id, &reply, started);
                }
                Pending::Sync {
                    xid, path, started, ..
                } => {
                    let reply = Reply::ok(xid, self.applied, Response::Sync(SyncResponse { path }));
                    self.send_reply(id, &reply, started);
                }
                Pending::Write { .. } => unreachable!("writes are not ready here"),
            }
        }
    }

    fn on_sync_ready(&mut self, id: ConnId, token: u64, zxid: Zxid) {
        let Some(conn) = self.conns.get_mut(&id) else {
            return;
        };
        for p in conn.queue.iter_mut() {
            if let Pending::Sync {
                token: t, barrier, ..
            } = p
            {
                if *t == token {
                    *barrier = Some(zxid);
                }
            }
        }
        self.drain(id);
    }

    fn send_reply(&mut self, id: ConnId, reply: &Reply, started: Instant) {
        let Some(conn) = self.conns.get_mut(&id) else {
            return;
        };
        let latency = started.elapsed().as_millis() as u64;
        let s = &mut conn.stats;
        s.sent += 1;
        s.last_zxid = reply.zxid.as_i64();
        s.last_latency_ms = latency;
        s.min_latency_ms = if s.replies == 0 {
            latency
        } else {
            s.min_latency_ms.min(latency)
        };
        s.max_latency_ms = s.max_latency_ms.max(latency);
        s.total_latency_ms += latency;
        s.replies += 1;
        s.last_response = Some(Instant::now());
        let g = &mut self.stats;
        g.packets_sent += 1;
        g.min_latency_ms = if g.replies == 0 {
            latency
        } else {
            g.min_latency_ms.min(latency)
        };
        g.max_latency_ms = g.max_latency_ms.max(latency);
        g.total_latency_ms += latency;
        g.replies += 1;
        let before = conn.outbox.queued_bytes();
        if !push_frame(&conn.outbox, |b| reply.encode_payload(b)) {
            tracing::warn!(peer = %conn.peer, "client does not read its replies: closing the connection");
            conn.state = ConnState::Closing;
            return;
        }
        let size = conn.outbox.queued_bytes().saturating_sub(before);
        g.last_response_bytes = size;
        g.min_response_bytes = if g.min_response_bytes == 0 {
            size
        } else {
            g.min_response_bytes.min(size)
        };
        g.max_response_bytes = g.max_response_bytes.max(size);
    }

    // ---- reads ----

    fn serve_read(&mut self, id: ConnId, frame: &RequestFrame) -> Reply {
        let xid = frame.xid;
        let zxid = self.applied;
        let result = self.read_result(id, &frame.request);
        // doc §4.4: a sasl reply carries zxid 0.
        let zxid = if frame.request.opcode() == OpCode::Sasl {
            Zxid::ZERO
        } else {
            zxid
        };
        Reply { xid, zxid, result }
    }

    fn read_result(&mut self, id: ConnId, request: &Request) -> Result<Response, ErrorCode> {
        let Some(conn) = self.conns.get(&id) else {
            return Err(ErrorCode::ConnectionLoss);
        };
        let auth = &conn.auth;
        match request {
            Request::Ping => Ok(Response::Empty),
            Request::Exists(r) => {
                if r.path.contains('\0') {
                    return Err(ErrorCode::BadArguments);
                }
                let stat = self.tree.get(&r.path).map(|n| n.stat());
                if r.watch {
                    self.watches.add(id, &r.path, WatchKind::Data);
                }
                stat.map(Response::Stat).ok_or(ErrorCode::NoNode)
            }
            Request::GetData(r) => {
                let node = self.tree.get(&r.path).ok_or(ErrorCode::NoNode)?;
                acl::check(&node.acl, auth, Perms::READ)?;
                let resp = GetDataResponse {
                    data: node.data.clone(),
                    stat: node.stat(),
                };
                if r.watch {
                    self.watches.add(id, &r.path, WatchKind::Data);
                }
                Ok(Response::GetData(resp))
            }
            Request::GetChildren(r) => {
                let node = self.tree.get(&r.path).ok_or(ErrorCode::NoNode)?;
                acl::check(&node.acl, auth, Perms::READ)?;
                let children = node.child_names();
                if r.watch {
                    self.watches.add(id, &r.path, WatchKind::Child);
                }
                Ok(Response::GetChildren(GetChildrenResponse { children }))
            }
            Request::GetChildren2(r) => {
                let node = self.tree.get(&r.path).ok_or(ErrorCode::NoNode)?;
                acl::check(&node.acl, auth, Perms::READ)?;
                let resp = GetChildren2Response {
                    children: node.child_names(),
                    stat: node.stat(),
                };
                if r.watch {
                    self.watches.add(id, &r.path, WatchKind::Child);
                }
                Ok(Response::GetChildren2(resp))
            }
            Request::GetAcl(r) => {
                let node = self.tree.get(&r.path).ok_or(ErrorCode::NoNode)?;
                acl::check(&node.acl, auth, Perms(Perms::READ.0 | Perms::ADMIN.0))?;
                let list = if acl::allowed(&node.acl, auth, Perms::ADMIN) {
                    node.acl.to_vec()
                } else {
                    acl::masked(&node.acl)
                };
                Ok(Response::GetAcl(GetAclResponse {
                    acl: list,
                    stat: node.stat(),
                }))
            }
            Request::GetAllChildrenNumber(r) => {
                let idx = self.tree.lookup(&r.path).ok_or(ErrorCode::NoNode)?;
                let node = self.tree.get(&r.path).ok_or(ErrorCode::NoNode)?;
                acl::check(&node.acl, auth, Perms::READ)?;
                let n = self.tree.descendant_count(idx);
                Ok(Response::GetAllChildrenNumber(
                    GetAllChildrenNumberResponse {
                        total_number: n.min(i64::from(i32::MAX)) as i32,
                    },
                ))
            }
            Request::GetEphemerals(r) => {
                let sid = conn.session().unwrap_or(0);
                let ephemerals = self
                    .tree
                    .ephemerals_of(sid)
                    .map(|set| {
                        set.iter()
                            .filter(|p| p.starts_with(&*r.prefix_path))
                            .map(|p| rzk_wire::ByteString::from(p.as_str()))
                            .collect()
                    })
                    .unwrap_or_default();
                Ok(Response::GetEphemerals(GetEphemeralsResponse {
                    ephemerals,
                }))
            }
            Request::WhoAmI => Ok(Response::WhoAmI(WhoAmIResponse {
                client_info: auth.client_infos(),
            })),
            Request::AddWatch(r) => {
                let kind = match r.mode {
                    rzk_wire::AddWatchMode::Persistent => WatchKind::Persistent,
                    rzk_wire::AddWatchMode::PersistentRecursive => WatchKind::Recursive,
                };
                self.watches.add(id, &r.path, kind);
                Ok(Response::AddWatch)
            }
            Request::CheckWatches(r) => {
                if self.watches.has(id, &r.path, r.watcher_type) {
                    Ok(Response::Empty)
                } else {
                    Err(ErrorCode::NoWatcher)
                }
            }
            Request::RemoveWatches(r) => {
                if self.watches.remove(id, &r.path, r.watcher_type) {
                    Ok(Response::Empty)
                } else {
                    Err(ErrorCode::NoWatcher)
                }
            }
            Request::MultiRead(m) => {
                let auth = auth.clone();
                let results = m
                    .ops
                    .iter()
                    .map(|op| self.multi_read_op(id, &auth, op))
                    .collect();
                Ok(Response::Multi(MultiResponse { results }))
            }
            Request::SetWatches(w) => {
                self.set_watches(
                    id,
                    w.relative_zxid,
                    &w.data_watches,
                    &w.exist_watches,
                    &w.child_watches,
                    &[],
                    &[],
                );
                Ok(Response::Empty)
            }
            Request::SetWatches2(w) => {
                self.set_watches(
                    id,
                    w.relative_zxid,
                    &w.data_watches,
                    &w.exist_watches,
                    &w.child_watches,
                    &w.persistent_watches,
                    &w.persistent_recursive_watches,
                );
                Ok(Response::Empty)
            }
            // doc §7.13: without SASL configured, OK with a null token.
            Request::Sasl(_) => Ok(Response::Sasl(SetSaslResponse { token: None })),
            // doc §7.14: reconfig is disabled.
            Request::Reconfig(_) => Err(ErrorCode::ReconfigDisabled),
            Request::Create(_)
            | Request::Create2(_)
            | Request::CreateContainer(_)
            | Request::CreateTtl(_)
            | Request::Delete(_)
            | Request::SetData(_)
            | Request::SetAcl(_)
            | Request::Check(_)
            | Request::Multi(_)
            | Request::Sync(_)
            | Request::Auth(_)
            | Request::CloseSession => Err(ErrorCode::SystemError),
        }
    }

    fn multi_read_op(&mut self, id: ConnId, auth: &AuthInfo, op: &MultiReadOp) -> MultiResult {
        let result = match op {
            MultiReadOp::GetData(r) => {
                self.tree
                    .get(&r.path)
                    .ok_or(ErrorCode::NoNode)
                    .and_then(|n| {
                        acl::check(&n.acl, auth, Perms::READ)?;
                        Ok(MultiResult::GetData(GetDataResponse {
                            data: n.data.clone(),
                            stat: n.stat(),
                        }))
                    })
            }
            MultiReadOp::GetChildren(r) => self
                .tree
                .get(&r.path)
                .ok_or(ErrorCode::NoNode)
                .and_then(|n| {
                    acl::check(&n.acl, auth, Perms::READ)?;
                    Ok(MultiResult::GetChildren(GetChildrenResponse {
                        children: n.child_names(),
                    }))
                }),
        };
        let watch = match op {
            MultiReadOp::GetData(r) => r.watch.then_some((&r.path, WatchKind::Data)),
            MultiReadOp::GetChildren(r) => r.watch.then_some((&r.path, WatchKind::Child)),
        };
        if let (Ok(_), Some((p, kind))) = (&result, watch) {
            self.watches.add(id, p, kind);
        }
        result.unwrap_or_else(MultiResult::Error)
    }

    /// doc §10.7: re-arms watches after a reconnect, firing at once what
    /// changed since the client's `relative` zxid.
    #[allow(clippy::too_many_arguments)]
    fn set_watches(
        &mut self,
        id: ConnId,
        relative: Zxid,
        data: &[rzk_wire::ByteString],
        exist: &[rzk_wire::ByteString],
        child: &[rzk_wire::ByteString],
        persistent: &[rzk_wire::ByteString],
        recursive: &[rzk_wire::ByteString],
    ) {
        let rel = relative.as_u64();
        let mut fire: Vec<(EventType, &str)> = Vec::new();
        for p in data {
            match self.tree.get(p) {
                None => fire.push((EventType::NodeDeleted, p)),
                Some(n) if n.mzxid > rel => fire.push((EventType::NodeDataChanged, p)),
                Some(_) => self.watches.add(id, p, WatchKind::Data),
            }
        }
        for p in exist {
            match self.tree.get(p) {
                Some(_) => fire.push((EventType::NodeCreated, p)),
                None => self.watches.add(id, p, WatchKind::Data),
            }
        }
        for p in child {
            match self.tree.get(p) {
                None => fire.push((EventType::NodeDeleted, p)),
                Some(n) if n.pzxid > rel => fire.push((EventType::NodeChildrenChanged, p)),
                Some(_) => self.watches.add(id, p, WatchKind::Child),
            }
        }
        for p in persistent {
            self.watches.add(id, p, WatchKind::Persistent);
        }
        for p in recursive {
            self.watches.add(id, p, WatchKind::Recursive);
        }
        if let Some(conn) = self.conns.get(&id) {
            for (kind, p) in fire {
                notify(&conn.outbox, kind, p);
            }
        }
    }

    // ---- commits ----

    fn on_committed(&mut self, item: Committed) -> Result<(), CoreError> {
        match item {
            Committed::Snapshot { zxid, data } => {
                let (tree, sessions, at) = DataTree::load_snapshot(&data)
                    .map_err(|e| CoreError::Corrupt(format!("snapshot at {zxid}: {e}")))?;
                self.tree = tree;
                self.sessions.clear();
                let now = Instant::now();
                for s in sessions {
                    self.sessions.insert(
                        s.id,
                        Session {
                            timeout_ms: s.timeout_ms,
                            password: s.password,
                            conn: None,
                            deadline: now + Duration::from_millis(s.timeout_ms.max(0) as u64),
                            closing: false,
                        },
                    );
                }
                self.applied = at;
                self.prep.clear();
                tracing::info!(zxid = %at, nodes = self.tree.node_count(), "snapshot loaded");
                Ok(())
            }
            Committed::Role { .. } | Committed::Forwarded { .. } => Ok(()),
            Committed::Txn { zxid, payload } => self.apply_committed(zxid, &payload),
        }
    }

    fn apply_committed(&mut self, zxid: Zxid, payload: &[u8]) -> Result<(), CoreError> {
        let txn =
            Txn::decode(payload).map_err(|e| CoreError::Corrupt(format!("txn {zxid}: {e}")))?;
        let mut events = Vec::new();
        let applied = apply::apply(&mut self.tree, zxid, &txn, &mut events);
        self.applied = zxid;
        let sid = txn.header.session;
        match &applied {
            Applied::SessionCreated {
                timeout_ms,
                password,
            } => {
                self.sessions.insert(
                    sid,
                    Session {
                        timeout_ms: *timeout_ms,
                        password: *password,
                        conn: None,
                        deadline: Instant::now()
                            + Duration::from_millis((*timeout_ms).max(0) as u64),
                        closing: false,
                    },
                );
                if sid >= self.next_session_id && (sid >> 56) == (self.next_session_id >> 56) {
                    self.next_session_id = sid + 1;
                }
            }
            Applied::SessionClosed => {}
            Applied::Op(_) | Applied::Multi(_) | Applied::Error(_) | Applied::MultiError { .. } => {
            }
        }
        self.fire(zxid, &events);
        let mine = self
            .in_flight
            .front()
            .is_some_and(|f| f.session == sid && f.cxid == txn.header.cxid);
        if mine {
            let f = self.in_flight.pop_front().expect("front checked");
            self.prep.applied(f.seq, &f.touched);
            match f.origin {
                Origin::Client(id) => self.reply_write(id, f.seq, zxid, &applied),
                Origin::Connect(id) => self.connected(id, sid),
                Origin::Server => {}
            }
        }
        if let Applied::SessionClosed = applied {
            if let Some(s) = self.sessions.remove(&sid) {
                if let Some(cid) = s.conn {
                    if let Some(c) = self.conns.get_mut(&cid) {
                        c.state = ConnState::Closing;
                        c.outbox.close_after_flush();
                    }
                }
            }
        }
        if self.tree.snapshot_in_progress() {
            // A snapshot progresses with the writes too, not only when idle.
            self.snapshot_step_nodes(SNAPSHOT_NODES_PER_TXN);
        }
        self.txns_since_snapshot += 1;
        if self.txns_since_snapshot >= self.snapshot_after_txns && !self.tree.snapshot_in_progress()
        {
            self.begin_snapshot();
        }
        Ok(())
    }

    fn fire(&mut self, zxid: Zxid, events: &[Event]) {
        let _ = zxid;
        for ev in events {
            let conns = match ev.kind {
                EventType::NodeChildrenChanged => self.watches.trigger_children(&ev.path),
                EventType::NodeDeleted => self.watches.trigger_node(&ev.path, true),
                EventType::NodeCreated | EventType::NodeDataChanged => {
                    self.watches.trigger_node(&ev.path, false)
                }
                // Apply never produces these; they are client-side events.
                EventType::None
                | EventType::DataWatchRemoved
                | EventType::ChildWatchRemoved
                | EventType::PersistentWatchRemoved => continue,
            };
            for cid in conns {
                let Some(conn) = self.conns.get(&cid) else {
                    continue;
                };
                // 3.8.4+/3.9.2+ (CVE-2024-23944): only to those who may READ.
                if !acl::allowed(&ev.acl, &conn.auth, Perms::READ) {
                    continue;
                }
                self.stats.packets_sent += 1;
                notify(&conn.outbox, ev.kind, &ev.path);
            }
        }
    }

    fn connected(&mut self, id: ConnId, sid: i64) {
        let Some(conn) = self.conns.get_mut(&id) else {
            return;
        };
        let Some(s) = self.sessions.get_mut(&sid) else {
            return;
        };
        s.conn = Some(id);
        let resp = rzk_wire::ConnectResponse {
            protocol_version: 0,
            timeout_ms: s.timeout_ms,
            session_id: rzk_wire::SessionId(sid),
            passwd: Bytes::copy_from_slice(&s.password),
            read_only: None,
        };
        tracing::info!(session = %format_sid(sid), peer = %conn.peer, timeout_ms = s.timeout_ms, "session established");
        // The ConnectResponse carries the readOnly byte exactly when the
        // request did; the outbox encodes it as the codec would.
        let resp = rzk_wire::ConnectResponse {
            read_only: conn.read_only_byte.then_some(false),
            ..resp
        };
        push_frame(&conn.outbox, |b| resp.encode(b));
        conn.stats.sent += 1;
        self.stats.packets_sent += 1;
        conn.state = ConnState::Connected(sid);
        let backlog = std::mem::take(&mut conn.backlog);
        for (req, permit) in backlog {
            self.process(id, sid, req, permit);
        }
    }

    fn reply_write(&mut self, id: ConnId, seq: u64, zxid: Zxid, applied: &Applied) {
        let Some(conn) = self.conns.get_mut(&id) else {
            return;
        };
        let Some(Pending::Write { seq: s, .. }) = conn.queue.front() else {
            tracing::error!(
                seq,
                "no pending write at the head of the connection's queue"
            );
            return;
        };
        if *s != seq {
            tracing::error!(seq, head = *s, "applied write is not the connection's next");
            return;
        }
        let Some(Pending::Write {
            xid,
            reply_as,
            started,
            ..
        }) = conn.queue.pop_front()
        else {
            return;
        };
        let result = write_result(&reply_as, applied);
        let reply = Reply { xid, zxid, result };
        self.send_reply(id, &reply, started);
        self.stats.update_latency.record_since(started);
        if let ReplyAs::CloseSession = reply_as {
            if let Some(conn) = self.conns.get_mut(&id) {
                conn.state = ConnState::Closing;
                conn.outbox.close_after_flush();
            }
            return;
        }
        self.drain(id);
    }

    // ---- snapshots, containers, TTL ----

    fn session_records(&self) -> Vec<SessionRecord> {
        self.sessions
            .iter()
            .map(|(id, s)| SessionRecord {
                id: *id,
                timeout_ms: s.timeout_ms,
                password: s.password,
            })
            .collect()
    }

    fn begin_snapshot(&mut self) {
        let sessions = self.session_records();
        if self.tree.begin_snapshot(self.applied, &sessions) {
            tracing::info!(zxid = %self.applied, nodes = self.tree.node_count(), "snapshot started");
            self.txns_since_snapshot = 0;
            self.snapshot_after_txns = snapshot_trigger(self.cfg.server.snap_count);
        }
    }

    fn snapshot_step(&mut self) {
        self.snapshot_step_nodes(SNAPSHOT_STEP_NODES);
    }

    fn snapshot_step_nodes(&mut self, budget: usize) {
        if let Some((zxid, data)) = self.tree.snapshot_step(budget) {
            tracing::info!(%zxid, bytes = data.len(), "snapshot written; saving");
            self.snapshot_saves
                .push(self.replicator.save_snapshot(zxid, data));
            self.tree.collect_acl_garbage();
        }
    }

    /// Deletes empty containers that have had children and expired TTL nodes
    /// without children, as ordinary delete txns (doc §8.5, §8.6).
    fn reap(&mut self) {
        if self.shutting_down {
            return;
        }
        let now = now_ms();
        let budget = self.cfg.server.container_max_per_minute as usize;
        let mut doomed = Vec::new();
        for p in self.tree.containers() {
            if let Some(n) = self.tree.get(p) {
                if n.ccount > 0 && n.num_children() == 0 {
                    doomed.push(p.clone());
                }
            }
        }
        for p in self.tree.ttl_nodes() {
            if let Some(n) = self.tree.get(p) {
                let ttl = tree::owner_ttl(n.owner).unwrap_or(i64::MAX);
                if n.num_children() == 0 && now.saturating_sub(n.mtime) > ttl {
                    doomed.push(p.clone());
                }
            }
        }
        let system = AuthInfo::system();
        for p in doomed.into_iter().take(budget) {
            let seq = self.next_seq;
            let req = rzk_wire::DeleteRequest {
                path: rzk_wire::ByteString::from(p.as_str()),
                version: -1,
            };
            let caller = Caller {
                session: 0,
                auth: &system,
                session_valid: true,
            };
            let prepped = self.prep.prep(&self.tree, seq, caller, Write::Delete(&req));
            if let TxnBody::Error(_) = prepped.body {
                continue; // it has children again, or a delete is already in flight
            }
            tracing::debug!(path = %p, "reaping a container or TTL node");
            self.take_seq();
            let txn = Txn {
                header: self.header(0, 0),
                body: prepped.body,
            };
            self.propose(txn, seq, Origin::Server, prepped.touched);
        }
    }

    pub(crate) fn outstanding(&self) -> usize {
        self.conns.values().map(Conn::queued).sum()
    }
}

fn op_abbrev(r: &ReplyAs) -> &'static str {
    match r {
        ReplyAs::Op(
            OpCode::Create | OpCode::Create2 | OpCode::CreateContainer | OpCode::CreateTtl,
        ) => "CREA",
        ReplyAs::Op(OpCode::Delete) => "DELE",
        ReplyAs::Op(OpCode::SetData) => "SETD",
        ReplyAs::Op(OpCode::SetAcl) => "SETA",
        ReplyAs::Op(_) => "CHEC",
        ReplyAs::Multi(_) => "MULT",
        ReplyAs::CloseSession => "CLOS",
    }
}

/// The reply body of an applied write.
fn write_result(reply_as: &ReplyAs, applied: &Applied) -> Result<Response, ErrorCode> {
    match (reply_as, applied) {
        (_, Applied::Error(code)) => Err(*code),
        (
            ReplyAs::Multi(_),
            Applied::MultiError {
                op_count,
                failed_index,
                code,
            },
        ) => Ok(Response::Multi(MultiResponse::failed(
            *op_count as usize,
            *failed_index as usize,
            *code,
        ))),
        (ReplyAs::Multi(ops), Applied::Multi(outcomes)) => Ok(Response::Multi(MultiResponse {
            results: ops
                .iter()
                .zip(outcomes)
                .map(|(op, o)| multi_result(*op, o))
                .collect(),
        })),
        (ReplyAs::Op(op), Applied::Op(o)) => Ok(single_result(*op, o)),
        (ReplyAs::CloseSession, Applied::SessionClosed) => Ok(Response::Empty),
        _ => Err(ErrorCode::SystemError),
    }
}

fn single_result(op: OpCode, o: &OpOutcome) -> Response {
    match o {
        // Op 1 answers with the path alone; 15, 19 and 21 with path and Stat.
        OpOutcome::Created { path, stat } if op != OpCode::Create => {
            Response::Create2(Create2Response {
                path: path.as_str().into(),
                stat: *stat,
            })
        }
        OpOutcome::Created { path, .. } => Response::Create(CreateResponse {
            path: path.as_str().into(),
        }),
        OpOutcome::Deleted | OpOutcome::Check => Response::Empty,
        OpOutcome::SetData(stat) | OpOutcome::SetAcl(stat) => Response::Stat(*stat),
    }
}

/// doc §11.3: create and create2 answer as type 1, containers and TTL nodes
/// as type 15.
fn multi_result(op: OpCode, o: &OpOutcome) -> MultiResult {
    match o {
        OpOutcome::Created { path, stat }
            if op == OpCode::CreateContainer || op == OpCode::CreateTtl =>
        {
            MultiResult::Create2(Create2Response {
                path: path.as_str().into(),
                stat: *stat,
            })
        }
        OpOutcome::Created { path, .. } => MultiResult::Create(CreateResponse {
            path: path.as_str().into(),
        }),
        OpOutcome::Deleted => MultiResult::Delete,
        OpOutcome::SetData(stat) | OpOutcome::SetAcl(stat) => MultiResult::SetData(*stat),
        OpOutcome::Check => MultiResult::Check,
    }
}

/// Writes one length-prefixed frame into an outbox.
pub(crate) fn push_frame(outbox: &Outbox, write: impl FnOnce(&mut BytesMut)) -> bool {
    outbox.push(|b| {
        // Cannot fail: the limit is the largest length prefix there is.
        let _ = frame::write_frame(b, REPLY_FRAME_BYTES_MAX, write);
    })
}

fn notify(outbox: &Outbox, kind: EventType, path: &str) {
    let n = Notification {
        zxid: Zxid::from_i64(-1),
        event: WatcherEvent {
            event_type: kind,
            state: KeeperState::SyncConnected,
            path: path.into(),
        },
    };
    push_frame(outbox, |b| n.encode_payload(b));
}

/// `0x` + lowercase hex, as ZooKeeper prints session ids.
pub(crate) fn format_sid(sid: i64) -> String {
    format!("0x{:x}", sid as u64)
}

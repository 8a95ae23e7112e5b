//! The core: one task owns the tree, the sessions, the watches and this
//! member's requests in flight, and runs the pipeline of DESIGN.md:
//! prep (on the leader) → txn → replicate → apply (on every member) → reply
//! (on the member holding the connection).
//!
//! The stages live in their own files, each an `impl Core` block that reads top
//! to bottom:
//! - here: the task's state, its select loop, connections entering the
//!   pipeline ([`Core::process`], routed by [`crate::route`]) and the role
//!   transitions the commit stream announces;
//! - `sessions.rs`: connects, resumes, closes, session activity;
//! - `leader.rs`: the leader-only stage — prep of local and forwarded
//!   requests against the tree plus outstanding changes, the expiry tracker,
//!   the container/TTL reaper;
//! - `commit.rs`: the commit stream — apply, watches, answering this member's
//!   requests by `(origin, request)`, snapshots to load;
//! - `read.rs`: reads, served from the local tree in order with the session's
//!   writes; `snapshot.rs`: writing snapshots in steps.
//!
//! - **Writes** go to the leader (a local call when this member leads, a
//!   forward otherwise) and are answered when their txn is applied here (I6).
//! - **Per-session order**: each connection has a queue of requests not yet
//!   answered. A read is answered at once only if nothing is queued before it;
//!   otherwise it waits behind the session's pending writes and is served from
//!   the tree right after the write before it is applied. Replies therefore go
//!   out in request order (doc §4.3, §15.1).
//! - **Notifications before replies**: applying a txn fires its watches into
//!   every watcher's outbox *before* the txn's reply is queued, and the core is
//!   the only writer of outboxes, so on every connection the events of a write
//!   come before the reply to that write and before any later reply (§10.3).
//! - **Roles** are events of the commit stream: a member serves clients only
//!   while it is a current leader or follower; when it loses its leader it
//!   closes every client connection (the clients reconnect, to it or another
//!   member, and keep their sessions), as ZooKeeper's members do.

use std::collections::VecDeque;
use std::future::Future;
use std::net::SocketAddr;
use std::num::NonZeroU64;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::BytesMut;
use foldhash::{HashMap, HashMapExt, HashSet, HashSetExt};
use futures::stream::FuturesUnordered;
use futures::StreamExt;
use rzk_quorum::{CommitStream, PeerId, Proposal, ReplicateError, Replicator, Role};
use rzk_wire::{
    frame, ConnectRequest, ErrorCode, EventType, FourLetterWord, KeeperState, Notification, OpCode,
    Reply, Request, RequestFrame, Response, SyncResponse, WatcherEvent, Xid,
};
use rzk_zxid::{Epoch, Zxid};
use tokio::sync::{mpsc, oneshot, OwnedSemaphorePermit};

use crate::acl::{self, AuthInfo, AuthOutcome};
use crate::config::ServerConfig;
use crate::forward::ForwardMsg;
use crate::leader::{LeaderStage, Submit, TaggedProposal};
use crate::outbox::Outbox;
use crate::route::{route, Route};
use crate::tree::DataTree;
use crate::watch::{ConnId, WatchManager};

/// The largest frame the server writes (a length prefix is an i32).
const REPLY_FRAME_BYTES_MAX: usize = i32::MAX as usize;
/// The most messages from connections the core handles in one turn of its
/// loop: commits, which answer writes, wait at most this many requests.
const MSGS_PER_TURN_MAX: usize = 32;

/// Permits a request holds until it is answered: one of its connection's
/// outstanding slots and one of the server's (backpressure, I7).
#[derive(Debug)]
pub(crate) struct Permit {
    pub(crate) _conn: crate::outbox::ConnSlot,
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
    /// This member's id (1 standalone): the top byte of the session ids it
    /// allocates and the `origin` of the txns its clients cause.
    pub(crate) server_id: u64,
}

/// A session of the replicated session table, with this member's attachment.
#[derive(Debug)]
pub(crate) struct Session {
    pub(crate) timeout_ms: i32,
    pub(crate) password: [u8; 16],
    /// The connection of this member attached to it, if any. Connection ids
    /// start at 1, so `None` takes no room of its own: a `Session` is 32
    /// bytes, not 40 (a table entry with its id 40, not 48), in a table with
    /// a bucket for every session (issue 15).
    pub(crate) conn: Option<NonZeroU64>,
}

/// A connection id as a [`Session::conn`].
pub(crate) fn session_conn(id: ConnId) -> Option<NonZeroU64> {
    let conn = NonZeroU64::new(id);
    debug_assert!(conn.is_some(), "connection ids start at 1");
    conn
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
pub(crate) enum ReplyAs {
    Op(OpCode),
    Multi(Vec<OpCode>),
    CloseSession,
}

/// A request of a connection that is not answered yet.
#[derive(Debug)]
pub(crate) enum Pending {
    /// A write in flight; answered when the txn of `request` is applied.
    Write {
        request: u64,
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
    /// Milliseconds, saturating at `u32::MAX` (49 days): 12 bytes less in
    /// every connection than `u64`s (issue 15).
    pub(crate) last_latency_ms: u32,
    pub(crate) min_latency_ms: u32,
    pub(crate) max_latency_ms: u32,
    pub(crate) total_latency_ms: u64,
    pub(crate) replies: u64,
    pub(crate) last_response: Option<Instant>,
}

/// A client connection as the core sees it.
#[derive(Debug)]
pub(crate) struct Conn {
    /// Also where the client's address is (see [`Conn::peer`]).
    pub(crate) outbox: Arc<Outbox>,
    pub(crate) auth: AuthInfo,
    pub(crate) state: ConnState,
    /// Requests that arrived while the session was being created.
    pub(crate) backlog: Backlog,
    /// Requests not yet answered, in arrival order.
    pub(crate) queue: ReplyQueue<Pending>,
    /// Whether the ConnectRequest carried the readOnly byte: the
    /// ConnectResponse carries it exactly then (doc §3.2).
    pub(crate) read_only_byte: bool,
    pub(crate) established_ms: i64,
    pub(crate) stats: ConnStats,
}

impl Conn {
    /// The client's address (kept once per connection, in its outbox).
    pub(crate) fn peer(&self) -> SocketAddr {
        self.outbox.peer()
    }

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

/// Requests that arrived while a connection's session was being created
/// (pipelined behind its ConnectRequest). Rare, so one pointer in every
/// connection until the first one (issue 15: a `Vec` is 24 bytes of every
/// idle connection); pushed to, then drained whole.
// The box is the point: 8 bytes in every connection instead of a `Vec`'s 24.
#[allow(clippy::box_collection)]
#[derive(Debug, Default)]
pub(crate) struct Backlog(Option<Box<Vec<(Req, Permit)>>>);

impl Backlog {
    pub(crate) fn push(&mut self, item: (Req, Permit)) {
        self.0.get_or_insert_with(Box::default).push(item);
    }

    pub(crate) fn len(&self) -> usize {
        self.0.as_ref().map_or(0, |b| b.len())
    }

    /// Everything waiting, in arrival order; the backlog is empty after it.
    pub(crate) fn take(&mut self) -> Vec<(Req, Permit)> {
        self.0.take().map(|b| *b).unwrap_or_default()
    }
}

/// A connection's requests not yet answered, in arrival order. It holds no
/// memory while empty: a `VecDeque` keeps the room of its longest queue, and
/// every session that had one request answered kept room for four `Pending`s
/// (736 bytes) for as long as it lived, idle or not (issue 15). A client with
/// one request in flight pays one allocation per queued request for it.
#[derive(Debug)]
pub(crate) struct ReplyQueue<T>(VecDeque<T>);

impl<T> Default for ReplyQueue<T> {
    fn default() -> Self {
        ReplyQueue(VecDeque::new())
    }
}

impl<T> ReplyQueue<T> {
    pub(crate) fn push_back(&mut self, item: T) {
        self.0.push_back(item);
    }

    /// The oldest request; the queue's memory is released when it empties.
    pub(crate) fn pop_front(&mut self) -> Option<T> {
        let item = self.0.pop_front();
        if self.0.is_empty() && self.0.capacity() > 0 {
            self.0 = VecDeque::new();
        }
        item
    }

    pub(crate) fn front(&self) -> Option<&T> {
        self.0.front()
    }

    pub(crate) fn iter_mut(&mut self) -> impl Iterator<Item = &mut T> {
        self.0.iter_mut()
    }

    pub(crate) fn len(&self) -> usize {
        self.0.len()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    #[cfg(test)]
    fn capacity(&self) -> usize {
        self.0.capacity()
    }
}

/// What one of this member's requests in flight is waiting for.
#[derive(Debug, Clone, Copy)]
pub(crate) enum InFlight {
    /// A write or a close; its reply is at the head of the connection's queue
    /// when its txn applies.
    Write(ConnId),
    /// A new session for this connection.
    Connect(ConnId),
}

/// A client resuming its session on this member, waiting for the member to be
/// current before the session table decides (`sessions.rs`).
#[derive(Debug)]
pub(crate) struct Revalidation {
    /// The token of the sync barrier it waits for.
    pub(crate) token: u64,
    pub(crate) req: ConnectRequest,
    /// The session timeout negotiated for this connection.
    pub(crate) negotiated: i32,
    /// The barrier, once the leader gave it; decided when applied reaches it.
    pub(crate) barrier: Option<Zxid>,
}

/// A connection that sent its ConnectRequest while this member was not
/// serving: it is answered once the member serves again.
#[derive(Debug)]
pub(crate) struct HeldConnect {
    pub(crate) conn: ConnId,
    pub(crate) peer: SocketAddr,
    pub(crate) auth: AuthInfo,
    pub(crate) outbox: Arc<Outbox>,
    pub(crate) req: ConnectRequest,
    /// Requests the client pipelined behind its ConnectRequest.
    pub(crate) backlog: Vec<(Req, Permit)>,
}

/// Whether, and as what, this member serves clients.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Serving {
    /// Recovering or electing: connects wait, nothing else is served.
    No,
    /// A current leader or follower of `leader` in `epoch`.
    Yes {
        role: Role,
        leader: PeerId,
        epoch: Epoch,
    },
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
    /// The tree loaded from the newest snapshot while the replicator opened,
    /// for the first snapshot the core is told to load (crate::preload).
    pub(crate) preloaded: Option<crate::preload::Preloaded>,
    pub(crate) replicator: Arc<dyn Replicator>,
    pub(crate) commits: CommitStream,
    pub(crate) tree: DataTree,
    pub(crate) watches: WatchManager,
    /// The replicated session table (built only by apply), with attachments.
    pub(crate) sessions: HashMap<i64, Session>,
    /// Boxed: a hash map holds its values inline in a table kept between
    /// half full and full, so an inline `Conn` (272 bytes) cost each
    /// connection up to twice its size (issue 15).
    pub(crate) conns: HashMap<ConnId, Box<Conn>>,
    /// This member's requests in flight, by request id.
    pub(crate) in_flight: HashMap<u64, InFlight>,
    /// The next request id. Starts at a random point so that a txn of an
    /// earlier incarnation of this member can never answer a request of this one.
    pub(crate) next_request: u64,
    /// The last applied zxid.
    pub(crate) applied: Zxid,
    pub(crate) serving: Serving,
    /// The leader-only stage, while this member leads.
    pub(crate) leader: Option<LeaderStage>,
    /// The leader's proposals not yet resolved: watched only for failures, since
    /// the commit stream delivers the successes.
    pub(crate) proposals: FuturesUnordered<TaggedProposal>,
    pub(crate) held_connects: VecDeque<HeldConnect>,
    /// Sessions with traffic on this member since the last touch batch (a
    /// follower sends them to the leader every half tick).
    pub(crate) touched: HashSet<i64>,
    pub(crate) next_session_id: i64,
    pub(crate) txns_since_snapshot: u64,
    /// Applied txns after which the next snapshot starts: between half of
    /// snapCount and snapCount, drawn again after each snapshot.
    pub(crate) snapshot_after_txns: u64,
    pub(crate) snapshot_saves: FuturesUnordered<Proposal>,
    /// The snapshot in progress, streamed in chunks to the replicator's writer.
    pub(crate) snapshot_out: Option<crate::snapshot::SnapshotStream>,
    pub(crate) syncs: FuturesUnordered<tokio::task::JoinHandle<SyncDone>>,
    pub(crate) next_sync_token: u64,
    /// Resumes waiting for their barrier, by connection (at most one each).
    pub(crate) revalidating: HashMap<ConnId, Revalidation>,
    pub(crate) stats: Stats,
    pub(crate) started: Instant,
    pub(crate) shutting_down: bool,
    /// Since when this member has not served, and when it last said so in
    /// the log (a member without a quorum keeps trying and says so).
    pub(crate) not_serving_since: Instant,
    pub(crate) not_serving_logged: Instant,
}

/// When the next snapshot starts, in applied txns: as ZooKeeper does,
/// snapCount/2 plus a random share of snapCount/2, so that the members of an
/// ensemble (which apply the same txns) do not all snapshot at once.
pub(crate) fn snapshot_trigger(snap_count: u64) -> u64 {
    let half = snap_count / 2;
    (half + rand::random_range(0..=snap_count - half)).max(1)
}

/// Wall-clock ms since the epoch: ZooKeeper's ctime/mtime.
pub(crate) fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
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
    /// Takes the commit stream. The replay of snapshot and log, and every later
    /// role change, arrive on it; clients are served from the first serving role.
    pub(crate) fn new(cfg: CoreConfig, replicator: Arc<dyn Replicator>) -> Result<Core, CoreError> {
        let commits = replicator
            .take_commits()
            .ok_or_else(|| CoreError::Commits("already taken".into()))?;
        let base = ((cfg.server_id as i64) << 56) | (((now_ms() << 24) as u64) >> 8) as i64;
        let snapshot_after_txns = snapshot_trigger(cfg.server.snap_count);
        Ok(Core {
            cfg,
            preloaded: None,
            replicator,
            commits,
            tree: DataTree::new(),
            watches: WatchManager::default(),
            sessions: HashMap::new(),
            conns: HashMap::new(),
            in_flight: HashMap::new(),
            next_request: rand::random::<u64>() >> 1,
            applied: Zxid::ZERO,
            serving: Serving::No,
            leader: None,
            proposals: FuturesUnordered::new(),
            held_connects: VecDeque::new(),
            touched: HashSet::new(),
            next_session_id: base,
            txns_since_snapshot: 0,
            snapshot_after_txns,
            snapshot_saves: FuturesUnordered::new(),
            snapshot_out: None,
            syncs: FuturesUnordered::new(),
            next_sync_token: 1,
            revalidating: HashMap::new(),
            stats: Stats::default(),
            started: Instant::now(),
            shutting_down: false,
            not_serving_since: Instant::now(),
            not_serving_logged: Instant::now(),
        })
    }

    /// The main loop: runs until shutdown or a fatal replication error.
    pub(crate) async fn run(mut self, mut rx: mpsc::Receiver<CoreMsg>) -> Result<(), CoreError> {
        let tick = Duration::from_millis(u64::from(self.cfg.server.tick_time_ms).max(1));
        let reap_every = Duration::from_millis(self.cfg.server.container_check_interval_ms.max(1));
        let start = tokio::time::Instant::now();
        // Expiry every tick and touches every half tick from the start (members
        // report their sessions' activity to the leader every half tick, as
        // ZooKeeper's learners do in their pings); the reaper after a period.
        let mut periodic = Periodic::new(
            [tick, (tick / 2).max(Duration::from_millis(1)), reap_every],
            [start, start, start + reap_every],
        );
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
                Some((origin, request, result)) = self.proposals.next(), if !self.proposals.is_empty() => {
                    self.on_proposal_failed(origin, request, result)?;
                }
                Some(joined) = self.syncs.next(), if !self.syncs.is_empty() => {
                    if let Ok((conn, token, result)) = joined {
                        self.on_sync_ready(conn, token, result)?;
                    }
                }
                () = periodic.timer.as_mut() => {
                    let [expiry, touches, reap] = periodic.take_due(tokio::time::Instant::now());
                    if expiry {
                        self.expire_sessions();
                        self.report_not_serving();
                    }
                    if touches {
                        self.send_touches();
                    }
                    if reap {
                        self.reap();
                    }
                }
                Some(saved) = self.snapshot_saves.next(), if !self.snapshot_saves.is_empty() => {
                    match saved {
                        Ok(z) => {
                            tracing::info!(zxid = %z, "snapshot saved");
                            // The snapshot's freed output chunks left holes
                            // among the znodes: give their pages back.
                            let started = std::time::Instant::now();
                            let released = crate::malloc::trim();
                            tracing::debug!(released, elapsed_us = started.elapsed().as_micros() as u64, "malloc trimmed after a snapshot");
                        }
                        Err(ReplicateError::Storage(e)) => {
                            tracing::error!(error = %e, "saving a snapshot failed; the server stops");
                            return Err(ReplicateError::Storage(e).into());
                        }
                        Err(e) => tracing::warn!(error = %e, "saving a snapshot failed"),
                    }
                }
                msg = rx.recv(), if rx_open => match msg {
                    Some(msg) => {
                        self.on_msg(msg);
                        self.on_queued_msgs(&mut rx);
                    }
                    None => { rx_open = false; self.begin_shutdown(); }
                },
                // Idle: a step of the snapshot in progress, once its writer has room.
                _ = crate::snapshot::snapshot_room(&self.snapshot_out), if self.tree.snapshot_in_progress() => {
                    self.snapshot_step();
                }
            }
        }
        for conn in self.conns.values() {
            conn.outbox.close_after_flush();
        }
        // A snapshot still being serialised is fed only by this loop's steps:
        // waiting for its save would wait forever (a graceful stop hung so, seen
        // in CI). It is abandoned (its writer deletes the partial file); the log
        // holds everything it would have.
        if self.abandon_snapshot() {
            tracing::info!("shutting down: the snapshot in progress is abandoned");
        }
        // Let snapshot saves already handed over finish.
        while let Some(saved) = self.snapshot_saves.next().await {
            match saved {
                Ok(_) | Err(ReplicateError::Shutdown) => {}
                Err(e) => tracing::error!(error = %e, "saving a snapshot failed"),
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
            for held in self.held_connects.drain(..) {
                held.outbox.close_now();
            }
        }
    }

    /// Handles up to [`MSGS_PER_TURN_MAX`] more messages that wait in the
    /// queue, without going round the select loop for each: a turn of the
    /// loop polls the commit stream and three timers first, a tenth of the
    /// instructions of a get (issue 15, callgrind). Stops once shutting down,
    /// so that the loop sees it before the next message, as it did.
    fn on_queued_msgs(&mut self, rx: &mut mpsc::Receiver<CoreMsg>) {
        for _ in 1..MSGS_PER_TURN_MAX {
            if self.shutting_down {
                return;
            }
            match rx.try_recv() {
                Ok(msg) => self.on_msg(msg),
                // Empty; or closed, which the next `recv` reports.
                Err(_) => return,
            }
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

    // ---- roles ----

    /// The commit stream says this member is current as `role` of `leader`.
    pub(crate) fn on_serving(&mut self, role: Role, leader: PeerId, epoch: Epoch) {
        let was = self.serving;
        if let Serving::Yes {
            role: r, leader: l, ..
        } = was
        {
            if r == role && l == leader {
                // The same leadership in a new epoch (a rollover): nothing
                // changes for clients.
                self.serving = Serving::Yes {
                    role,
                    leader,
                    epoch,
                };
                return;
            }
            self.stop_serving("the leader changed");
        }
        self.serving = Serving::Yes {
            role,
            leader,
            epoch,
        };
        tracing::info!(
            ?role,
            leader = leader.0,
            %epoch,
            last_zxid = %self.applied,
            nodes = self.tree.node_count(),
            sessions = self.sessions.len(),
            "serving"
        );
        if role == Role::Leader {
            let me = self.cfg.server_id;
            self.leader = Some(LeaderStage::new(
                self.cfg.server.extended_types_enabled,
                &self.sessions,
                me,
            ));
        }
        let held: Vec<HeldConnect> = self.held_connects.drain(..).collect();
        for h in held {
            let id = h.conn;
            self.on_connect(id, h.peer, h.auth, h.outbox, h.req);
            for (req, permit) in h.backlog {
                self.on_request(id, req, permit);
            }
        }
    }

    /// The member lost its leader (or its leadership): every client connection
    /// is closed, as ZooKeeper's members do; the clients reconnect and keep their
    /// sessions. Requests in flight are dropped with their connections.
    pub(crate) fn stop_serving(&mut self, why: &str) {
        if self.serving == Serving::No {
            return;
        }
        tracing::info!(
            connections = self.conns.len(),
            in_flight = self.in_flight.len(),
            "not serving: {why}; closing client connections"
        );
        self.serving = Serving::No;
        self.not_serving_since = Instant::now();
        self.not_serving_logged = Instant::now();
        self.leader = None;
        self.proposals = FuturesUnordered::new();
        self.touched.clear();
        self.in_flight.clear();
        self.revalidating.clear();
        for (id, conn) in self.conns.drain() {
            conn.outbox.close_now();
            self.watches.remove_conn(id);
        }
        for s in self.sessions.values_mut() {
            s.conn = None;
        }
    }

    /// While it cannot serve (no leader: the members it can reach are no
    /// quorum), a member keeps trying and says so every few seconds.
    fn report_not_serving(&mut self) {
        const EVERY: Duration = Duration::from_secs(5);
        if self.serving != Serving::No || self.not_serving_logged.elapsed() < EVERY {
            return;
        }
        self.not_serving_logged = Instant::now();
        let q = self.replicator.stats();
        tracing::warn!(
            for_secs = self.not_serving_since.elapsed().as_secs(),
            voters = q.voters,
            elections = q.elections,
            last_zxid = %q.last_durable,
            held_connects = self.held_connects.len(),
            "no leader yet: looking for a quorum of the voters (still trying)"
        );
    }

    // ---- requests ----

    fn on_request(&mut self, id: ConnId, req: Req, permit: Permit) {
        let Some(conn) = self.conns.get_mut(&id) else {
            if let Some(h) = self.held_connects.iter_mut().find(|h| h.conn == id) {
                h.backlog.push((req, permit));
            }
            return;
        };
        self.stats.packets_received += 1;
        conn.stats.received += 1;
        match conn.state {
            ConnState::Connecting => conn.backlog.push((req, permit)),
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

    pub(crate) fn process(&mut self, id: ConnId, sid: i64, req: Req, permit: Permit) {
        let now = Instant::now();
        let frame = match req {
            Req::Unknown { xid } => {
                if let Some(conn) = self.conns.get_mut(&id) {
                    tracing::info!(peer = %conn.peer(), "unknown opcode: closing the connection");
                    let reply = Reply::unimplemented(xid);
                    self.stats.packets_sent += 1;
                    push_frame(&conn.outbox, |b| reply.encode_payload(b));
                    conn.outbox.close_after_flush();
                    conn.state = ConnState::Closing;
                }
                return;
            }
            Req::Malformed { xid, opcode } => {
                if crate::route::is_write(opcode) {
                    let request = self.queue_write(id, xid, ReplyAs::Op(opcode), permit);
                    self.submit(
                        id,
                        Submit::Error {
                            request,
                            session: sid,
                            cxid: xid.0,
                            code: ErrorCode::MarshallingError,
                        },
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
        match route(&frame.request) {
            Route::Write(reply_as) => {
                let request = self.queue_write(id, xid, reply_as, permit);
                self.submit_write(id, request, sid, frame);
            }
            Route::Auth => {
                if let Request::Auth(packet) = &frame.request {
                    self.on_auth(id, xid, &packet.scheme, &packet.auth);
                }
            }
            Route::Close => {
                tracing::info!(session = %format_sid(sid), "session closing at the client's request");
                let request = self.queue_write(id, xid, ReplyAs::CloseSession, permit);
                self.submit(
                    id,
                    Submit::CloseSession {
                        request,
                        session: sid,
                        cxid: xid.0,
                    },
                );
            }
            Route::Sync => {
                let Request::Sync(r) = &frame.request else {
                    return;
                };
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
            Route::Read => self.enqueue_or_answer(
                id,
                Pending::Read {
                    frame,
                    started: now,
                    _permit: permit,
                },
            ),
        }
    }

    fn on_auth(&mut self, id: ConnId, xid: Xid, scheme: &str, auth: &[u8]) {
        let super_digest = self.cfg.server.super_digest.clone();
        let Some(conn) = self.conns.get_mut(&id) else {
            return;
        };
        let ip = conn.peer().ip();
        let outcome = acl::authenticate(&mut conn.auth, scheme, auth, ip, super_digest.as_deref());
        // doc §12.6: auth is answered at once, outside the ordered pipeline,
        // with zxid 0 and the request's own xid: Java clients send -4, but
        // ZooKeeper echoes whatever came, and the `zookeeper-client` crate
        // numbers its auth packets like any request and matches the reply by
        // that number (a reply with -4 made it drop the connection, forever).
        let reply = match outcome {
            AuthOutcome::Added => Reply::ok(xid, Zxid::ZERO, Response::Empty),
            AuthOutcome::Failed => Reply::error(xid, Zxid::ZERO, ErrorCode::AuthFailed),
        };
        conn.stats.sent += 1;
        self.stats.packets_sent += 1;
        push_frame(&conn.outbox, |b| reply.encode_payload(b));
        if outcome == AuthOutcome::Failed {
            self.stats.auth_failed += 1;
            tracing::info!(peer = %conn.peer(), scheme, "auth with an unknown scheme: closing the connection");
            conn.outbox.close_after_flush();
            conn.state = ConnState::Closing;
        }
    }

    pub(crate) fn take_request(&mut self) -> u64 {
        let r = self.next_request;
        self.next_request = self.next_request.wrapping_add(1);
        r
    }

    /// Queues a write's reply slot on its connection and records the request
    /// in flight; returns the request id.
    fn queue_write(&mut self, id: ConnId, xid: Xid, reply_as: ReplyAs, permit: Permit) -> u64 {
        let request = self.take_request();
        if let Some(conn) = self.conns.get_mut(&id) {
            conn.stats.last_op = op_abbrev(&reply_as);
            conn.stats.last_cxid = xid.0;
            conn.queue.push_back(Pending::Write {
                request,
                xid,
                reply_as,
                started: Instant::now(),
                _permit: permit,
            });
        }
        self.in_flight.insert(request, InFlight::Write(id));
        request
    }

    /// Hands a client write to the leader: prepped in place when this member
    /// leads (borrowing the connection's identities), forwarded otherwise.
    fn submit_write(&mut self, id: ConnId, request: u64, sid: i64, frame: RequestFrame) {
        if let Some(leader) = self.leader.as_mut() {
            let Some(conn) = self.conns.get(&id) else {
                return;
            };
            leader.submit(
                &self.tree,
                &self.sessions,
                self.replicator.as_ref(),
                &mut self.proposals,
                self.cfg.server_id,
                Submit::Write {
                    request,
                    session: sid,
                    cxid: frame.xid.0,
                    auth: &conn.auth,
                    request_body: &frame.request,
                },
            );
            return;
        }
        let Some(conn) = self.conns.get(&id) else {
            return;
        };
        let mut payload = BytesMut::new();
        frame.encode_payload(&mut payload);
        let msg = ForwardMsg::Write {
            request,
            session: sid,
            cxid: frame.xid.0,
            auth: conn.auth.clone(),
            frame: payload.freeze(),
        };
        self.forward(id, msg);
    }

    /// Hands a session record to the leader: a local call when leading, a
    /// forward otherwise. `id` is the connection that waits for the outcome.
    pub(crate) fn submit(&mut self, id: ConnId, msg: Submit<'_>) {
        if let Some(leader) = self.leader.as_mut() {
            leader.submit(
                &self.tree,
                &self.sessions,
                self.replicator.as_ref(),
                &mut self.proposals,
                self.cfg.server_id,
                msg,
            );
            return;
        }
        self.forward(id, msg.to_forward());
    }

    /// Forwards to the leader; a member that has no leader closes the
    /// connection (its client reconnects, here or elsewhere).
    pub(crate) fn forward(&mut self, id: ConnId, msg: ForwardMsg) {
        if let Err(e) = self.replicator.forward(msg.encode()) {
            tracing::debug!(error = %e, "cannot reach the leader: closing the connection");
            self.fail_conn(id);
        }
    }

    /// Closes a connection whose request cannot be completed here: its client
    /// sees a connection loss and retries (on this member or another).
    pub(crate) fn fail_conn(&mut self, id: ConnId) {
        if let Some(conn) = self.conns.get_mut(&id) {
            conn.state = ConnState::Closing;
            conn.outbox.close_now();
        }
        self.in_flight
            .retain(|_, f| !matches!(f, InFlight::Write(c) | InFlight::Connect(c) if *c == id));
    }

    /// A leader's proposal failed. Routine unless storage failed: when the
    /// leadership is ending, a role item follows and closes the clients.
    fn on_proposal_failed(
        &mut self,
        origin: u64,
        request: u64,
        result: Result<Zxid, ReplicateError>,
    ) -> Result<(), CoreError> {
        let Err(e) = result else {
            return Ok(());
        };
        match e {
            ReplicateError::Storage(_) => {
                tracing::error!(error = %e, "the log failed; the server stops");
                Err(e.into())
            }
            ReplicateError::NotLeader { .. }
            | ReplicateError::LostQuorum
            | ReplicateError::Shutdown => {
                tracing::debug!(error = %e, origin, request, "a proposal failed");
                Ok(())
            }
            ReplicateError::TooLarge { .. } | ReplicateError::Overloaded { .. } => {
                tracing::warn!(error = %e, origin, request, "a proposal was refused; answering with an error");
                if let Some(leader) = self.leader.as_mut() {
                    leader.refused(
                        &self.tree,
                        self.replicator.as_ref(),
                        &mut self.proposals,
                        origin,
                        request,
                    );
                }
                Ok(())
            }
        }
    }

    pub(crate) fn enqueue_or_answer(&mut self, id: ConnId, pending: Pending) {
        let Some(conn) = self.conns.get_mut(&id) else {
            return;
        };
        if conn.queue.is_empty() && matches!(pending, Pending::Read { .. } | Pending::Error { .. })
        {
            // Nothing before it: answered at once, without a trip through
            // the queue (and without giving the queue memory, issue 15).
            self.answer(id, pending);
            return;
        }
        conn.queue.push_back(pending);
        self.drain(id);
    }

    /// Answers the connection's queued requests that can be answered now: reads
    /// up to the first write still in flight or sync still waiting.
    pub(crate) fn drain(&mut self, id: ConnId) {
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
            self.answer(id, item);
        }
    }

    /// Answers a request that is ready (a read, an error, a sync whose
    /// barrier has been applied).
    fn answer(&mut self, id: ConnId, item: Pending) {
        match item {
            Pending::Read { frame, started, .. } => {
                let reply = self.serve_read(id, &frame);
                let now = Instant::now();
                self.send_reply_at(id, &reply, started, now);
                self.stats
                    .read_latency
                    .record(now.saturating_duration_since(started));
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

    fn on_sync_ready(
        &mut self,
        id: ConnId,
        token: u64,
        result: Result<Zxid, ReplicateError>,
    ) -> Result<(), CoreError> {
        if self.revalidating.get(&id).is_some_and(|r| r.token == token) {
            return self.on_revalidated(id, result);
        }
        let zxid = match result {
            Ok(z) => z,
            Err(ReplicateError::Storage(e)) => return Err(ReplicateError::Storage(e).into()),
            Err(e) => {
                // I6b cannot be promised without the leader: the client retries.
                tracing::debug!(error = %e, "a sync failed: closing the connection");
                self.fail_conn(id);
                return Ok(());
            }
        };
        let Some(conn) = self.conns.get_mut(&id) else {
            return Ok(());
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
        Ok(())
    }

    pub(crate) fn send_reply(&mut self, id: ConnId, reply: &Reply, started: Instant) {
        self.send_reply_at(id, reply, started, Instant::now());
    }

    /// [`Core::send_reply`] at `now` (read once per reply: a read records
    /// its latency twice).
    fn send_reply_at(&mut self, id: ConnId, reply: &Reply, started: Instant, now: Instant) {
        let Some(conn) = self.conns.get_mut(&id) else {
            return;
        };
        let latency = now.saturating_duration_since(started).as_millis() as u64;
        let latency_u32 = u32::try_from(latency).unwrap_or(u32::MAX);
        let s = &mut conn.stats;
        s.sent += 1;
        s.last_zxid = reply.zxid.as_i64();
        s.last_latency_ms = latency_u32;
        s.min_latency_ms = if s.replies == 0 {
            latency_u32
        } else {
            s.min_latency_ms.min(latency_u32)
        };
        s.max_latency_ms = s.max_latency_ms.max(latency_u32);
        s.total_latency_ms += latency;
        s.replies += 1;
        s.last_response = Some(now);
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
        let Some(size) = push_frame_len(&conn.outbox, |b| reply.encode_payload(b)) else {
            tracing::warn!(peer = %conn.peer(), "client does not read its replies: closing the connection");
            conn.state = ConnState::Closing;
            return;
        };
        g.last_response_bytes = size;
        g.min_response_bytes = if g.min_response_bytes == 0 {
            size
        } else {
            g.min_response_bytes.min(size)
        };
        g.max_response_bytes = g.max_response_bytes.max(size);
    }

    pub(crate) fn outstanding(&self) -> usize {
        self.conns.values().map(|c| c.queued()).sum()
    }
}

/// The core's periodic work (session expiry, touches, the container/TTL
/// reaper) on one timer. Issue 15: three `Interval`s were polled, and their
/// wakers registered, at every turn of the core's loop, two turns per
/// request (one that finds it, one that finds nothing and parks): 885 of a
/// get's instructions (callgrind). One timer, set to the earliest of the
/// three, is polled once per turn.
struct Periodic {
    /// Each job's period.
    every: [Duration; 3],
    /// When each job is next due.
    due: [tokio::time::Instant; 3],
    /// Fires at the earliest of `due`.
    timer: Pin<Box<tokio::time::Sleep>>,
}

impl Periodic {
    fn new(every: [Duration; 3], due: [tokio::time::Instant; 3]) -> Periodic {
        let first = due.iter().copied().min().expect("three jobs");
        Periodic {
            every,
            due,
            timer: Box::pin(tokio::time::sleep_until(first)),
        }
    }

    /// Which jobs are due at `now`. Each due job is next due one period
    /// after it was due, or one period from now if it ran late (as an
    /// `Interval` with `MissedTickBehavior::Delay`); the timer is set to
    /// the earliest.
    fn take_due(&mut self, now: tokio::time::Instant) -> [bool; 3] {
        let mut ran = [false; 3];
        for (i, ran) in ran.iter_mut().enumerate() {
            if self.due[i] <= now {
                *ran = true;
                let next = self.due[i] + self.every[i];
                self.due[i] = if next > now {
                    next
                } else {
                    now + self.every[i]
                };
            }
        }
        let first = self.due.iter().copied().min().expect("three jobs");
        self.timer.as_mut().reset(first);
        ran
    }
}

/// A leader's proposal, tagged with the request it carries.
impl Future for TaggedProposal {
    type Output = (u64, u64, Result<Zxid, ReplicateError>);

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let (origin, request) = (self.origin, self.request);
        Pin::new(&mut self.proposal)
            .poll(cx)
            .map(|r| (origin, request, r))
    }
}

pub(crate) fn op_abbrev(r: &ReplyAs) -> &'static str {
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

/// Writes one length-prefixed frame into an outbox.
pub(crate) fn push_frame(outbox: &Outbox, write: impl FnOnce(&mut BytesMut)) -> bool {
    push_frame_len(outbox, write).is_some()
}

/// [`push_frame`], returning the frame's size (see [`Outbox::push_len`]).
pub(crate) fn push_frame_len(outbox: &Outbox, write: impl FnOnce(&mut BytesMut)) -> Option<usize> {
    outbox.push_len(|b| {
        // Cannot fail: the limit is the largest length prefix there is.
        let _ = frame::write_frame(b, REPLY_FRAME_BYTES_MAX, write);
    })
}

pub(crate) fn notify(outbox: &Outbox, kind: EventType, path: &str) {
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

#[cfg(test)]
mod tests {
    use super::{Conn, Periodic, ReplyQueue, Session};
    use std::time::Duration;

    /// Issue 15: the replicated session table has a bucket for every
    /// session (and room for more); an entry is the id and a `Session`.
    /// Checked by hand: with the connection an `Option<u64>` the entry is
    /// 48 bytes and this fails.
    #[test]
    fn a_session_entry_is_40_bytes() {
        let bytes = std::mem::size_of::<(i64, Session)>();
        assert!(bytes <= 40, "a session table entry is {bytes} bytes");
    }

    /// Issue 15: every connection's `Conn` is boxed in the core's table for
    /// as long as it lives; glibc serves a box as a chunk of its size plus
    /// 8, rounded up to 16: at 216 bytes or less the chunk is 224 bytes.
    /// Checked by hand: with the backlog a `Vec` and the latencies `u64`s
    /// the `Conn` is 248 bytes (with the address identity kept as an address)
    /// and this fails.
    #[test]
    fn a_conn_fits_a_224_byte_chunk() {
        let bytes = std::mem::size_of::<Conn>();
        assert!(bytes <= 216, "a Conn is {bytes} bytes");
    }

    /// The one timer of the core's periodic work runs each job on its own
    /// period and, late, one period from now (`MissedTickBehavior::Delay`).
    #[tokio::test]
    async fn periodic_work_runs_each_job_on_its_own_period() {
        let t0 = tokio::time::Instant::now();
        let ms = Duration::from_millis;
        let mut p = Periodic::new([ms(10), ms(5), ms(30)], [t0, t0, t0 + ms(30)]);
        assert_eq!(
            p.take_due(t0),
            [true, true, false],
            "expiry and touches at once"
        );
        assert_eq!(p.take_due(t0 + ms(4)), [false, false, false]);
        assert_eq!(
            p.timer.deadline(),
            t0 + ms(5),
            "the timer is at the earliest"
        );
        assert_eq!(p.take_due(t0 + ms(5)), [false, true, false]);
        assert_eq!(p.take_due(t0 + ms(10)), [true, true, false]);
        // Late by more than a period: next due one period from now.
        assert_eq!(p.take_due(t0 + ms(31)), [true, true, true]);
        assert_eq!(p.due, [t0 + ms(41), t0 + ms(36), t0 + ms(60)]);
        assert_eq!(p.timer.deadline(), t0 + ms(36));
    }

    #[test]
    fn a_reply_queue_keeps_order_and_releases_its_memory_once_empty() {
        let mut q = ReplyQueue::default();
        for i in 0..5 {
            q.push_back(i);
        }
        assert_eq!(q.front(), Some(&0));
        assert_eq!(q.pop_front(), Some(0));
        assert!(q.capacity() >= 4, "room is kept while requests wait");
        q.push_back(5);
        let rest: Vec<i32> = std::iter::from_fn(|| q.pop_front()).collect();
        assert_eq!(rest, [1, 2, 3, 4, 5], "answered in arrival order");
        assert!(q.is_empty());
        assert_eq!(q.capacity(), 0, "an empty queue holds no memory");
    }
}

//! The server core: a state machine over this member's clients, its share of
//! the replicated state and, while it leads, the leader's prep. It does no
//! IO: [`Core::step`] takes one [`Input`] at the [`Time`] the caller read,
//! and leaves what it asks for in its [`Effect`]s; the tokio shell
//! (`crate::shell`) or the simulator carries them out and feeds the outcomes
//! back. Randomness comes from a generator seeded by the caller.
//!
//! The pipeline of a request, stage by stage (each stage owns its state and
//! is a file of its own; this file is the only one that sees them all and
//! routes between them):
//!
//! 1. `route.rs` — what the request is: a write, a close, a sync, an auth
//!    packet or a read ([`route::route`]).
//! 2. `conns.rs` — the connection's queue keeps the session's order: a read
//!    waits behind the writes before it.
//! 3. `write.rs` — a write becomes one owned [`write::WriteRequest`]; on a
//!    follower it is forwarded to the leader in that form.
//! 4. `leader.rs` — the leader preps it against its tree plus the outstanding
//!    changes and returns the txn to propose ([`Effect::Propose`]).
//! 5. (replication: `rzk_quorum`; the txn comes back as [`Input::Txn`] once
//!    committed, on every member, in zxid order)
//! 6. `data.rs` — every member applies it to its tree, checked: it must
//!    follow the last zxid applied and the tree must accept it.
//! 7. `conns.rs` — watches fire into the watchers' outboxes, then the member
//!    holding the connection answers (I6: only now, after quorum durability
//!    and apply); reads queued behind the write follow (`read.rs`).
//!
//! `sessions.rs` keeps the replicated session table and the resumes;
//! `snapshot.rs` writes snapshots in steps between requests.
//!
//! Guarantees:
//! - **Per-session order**: replies go out in request order (a read is
//!   answered at once only if nothing is queued before it).
//! - **Notifications before replies**: applying a txn fires its watches into
//!   every watcher's outbox *before* the txn's reply is queued, and the core
//!   is the only writer of outboxes, so on every connection the events of a
//!   write come before the reply to that write and before any later reply.
//! - **Sync (I6b)**: a sync is answered only once this member has applied
//!   everything committed before the sync reached the leader.
//! - **Roles**: a member serves clients only while it is a current leader or
//!   follower; when it loses its leader it closes every client connection
//!   (the clients reconnect, to it or another member, and keep their
//!   sessions), as ZooKeeper's members do.

pub(crate) mod conns;
pub(crate) mod data;
pub mod io;
pub(crate) mod leader;
pub(crate) mod read;
pub(crate) mod route;
pub(crate) mod sessions;
pub mod snapshot;
pub mod write;

use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use rand::rngs::StdRng;
use rand::Rng;
use rzk_quorum::{PeerId, QuorumStats, ReplicateError, Role};
use rzk_wire::{
    ConnectRequest, ErrorCode, FourLetterWord, MultiResponse, Record, Reply, Response, SessionId,
    SyncResponse, Xid,
};
use rzk_zxid::{Epoch, Zxid};

use crate::acl::{self, AuthInfo, AuthOutcome};
use crate::apply::{Applied, OpOutcome};
use crate::outbox::Outbox;
use crate::stats::{ConnView, Details, QuorumView, ServerStats};
use crate::tree::{DataTree, SessionRecord};
use crate::txn::Txn;
use crate::watch::ConnId;

use conns::{Conn, ConnState, Conns, HeldConnect, InFlight, Pending, HELD_CONNECTS_MAX};
use data::Data;
use leader::{LeaderStage, Proposed};
use route::{route, ReplyAs, Route};
use sessions::{Revalidation, Sessions};
pub use snapshot::{Chunk as SnapshotChunk, SNAPSHOT_QUEUE_SLOTS};
use snapshot::{SnapshotStream, Snapshots};
use write::{ToLeader, WriteKind, WriteRequest};

pub(crate) use io::CoreMsg;
pub use io::{
    CoreBugs, CoreConfig, CoreError, Due, Effect, Input, Permit, Req, RequestId, SyncToken, Time,
};

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

/// The core's state: its stages, and what routes between them.
pub struct Core {
    cfg: CoreConfig,
    /// The apply stage: tree, watches, applied zxid.
    data: Data,
    /// The replicated session table, attachments, resumes, touches.
    sessions: Sessions,
    /// Connections, their reply queues, this member's requests in flight.
    conns: Conns,
    /// The leader-only stage, while this member leads.
    leader: Option<LeaderStage>,
    snapshots: Snapshots,
    serving: Serving,
    /// Session passwords, the first request id, snapshot triggers.
    rng: StdRng,
    /// When the core started (monotonic µs).
    started_us: u64,
    shutting_down: bool,
    /// Since when this member has not served, and when it last said so in
    /// the log (monotonic µs).
    not_serving_since_us: u64,
    not_serving_logged_us: u64,
    /// What the steps so far ask for, in order.
    effects: Vec<Effect>,
    /// `CoreBugs::apply_out_of_order`: the txn held back until the next.
    held_txn: Option<(Zxid, Bytes)>,
}

impl Core {
    /// A core that has loaded nothing yet: the commit stream's first item is
    /// a snapshot (an empty one on a new member). `rng` draws the session
    /// passwords: seed it from the operating system outside tests.
    pub fn new(cfg: CoreConfig, mut rng: StdRng, now: Time) -> Core {
        let snapshots = Snapshots::new(cfg.server.snap_count, &mut rng);
        // A random start, so that a txn of an earlier incarnation of this
        // member can never answer a request of this one.
        let first_request = rng.random::<u64>() >> 1;
        Core {
            sessions: Sessions::new(cfg.server_id, now),
            cfg,
            data: Data::new(),
            conns: Conns::new(first_request),
            leader: None,
            snapshots,
            serving: Serving::No,
            rng,
            started_us: now.mono_us,
            shutting_down: false,
            not_serving_since_us: now.mono_us,
            not_serving_logged_us: now.mono_us,
            effects: Vec::new(),
            held_txn: None,
        }
    }

    /// Handles one input. An error is fatal: the member must stop (a storage
    /// failure, or state that no longer fits the committed history).
    pub fn step(&mut self, now: Time, input: Input) -> Result<(), CoreError> {
        match input {
            Input::Connect {
                conn,
                peer,
                auth,
                outbox,
                req,
            } => self.on_connect(conn, peer, auth, outbox, req, now),
            Input::Request { conn, req, permit } => self.on_request(conn, req, permit, now),
            Input::Closed { conn } => self.on_closed(conn),
            Input::Shutdown => self.begin_shutdown(),
            Input::Loaded {
                tree,
                sessions,
                zxid,
            } => self.on_loaded(tree, sessions, zxid, now),
            Input::Txn { zxid, payload } => return self.on_txn(zxid, payload, now),
            Input::Role {
                role,
                leader,
                epoch,
            } => match (role, leader) {
                (Role::Leader | Role::Follower | Role::Observer, Some(l)) => {
                    self.on_serving(role, l, epoch, now)
                }
                (Role::Looking, _) | (_, None) => {
                    self.stop_serving("the member is electing a leader", now)
                }
            },
            Input::Forwarded { from, payload } => self.on_forwarded(from, &payload, now),
            Input::ProposalFailed {
                origin,
                request,
                error,
            } => return self.on_proposal_failed(origin, request, error, now),
            Input::SyncDone {
                conn,
                token,
                result,
            } => return self.on_sync_done(conn, token, result, now),
            Input::ForwardFailed { conn } => {
                tracing::debug!("cannot reach the leader: closing the connection");
                self.conns.fail(conn);
            }
            Input::Tick(due) => self.on_tick(due, now),
        }
        Ok(())
    }

    /// Moves the effects asked for so far into `out` (which should be empty:
    /// its buffer is kept for the next call, so that steps do not allocate).
    pub fn take_effects(&mut self, out: &mut Vec<Effect>) {
        debug_assert!(out.is_empty());
        std::mem::swap(&mut self.effects, out);
    }

    /// The stream to the writer of the snapshot [`Effect::BeginSnapshot`]
    /// asked for.
    pub(crate) fn snapshot_stream(&mut self, stream: SnapshotStream) {
        self.snapshots.set_stream(stream);
    }

    /// The stream of the snapshot in progress, if any (its room is what an
    /// idle step waits for).
    pub(crate) fn snapshot_out(&self) -> Option<&SnapshotStream> {
        self.snapshots.stream()
    }

    /// Whether a snapshot is being written.
    pub fn snapshot_in_progress(&self) -> bool {
        self.data.tree.snapshot_in_progress()
    }

    /// One step of the snapshot in progress, when the core is idle.
    pub fn snapshot_idle_step(&mut self) {
        self.snapshots.idle_step(&mut self.data.tree);
    }

    /// Stops a snapshot still being serialised (a graceful stop: only the
    /// core's steps feed it); true if there was one.
    pub fn abandon_snapshot(&mut self) -> bool {
        let abandoned = self.snapshots.abandon();
        if abandoned {
            self.data.tree.abort_snapshot();
        }
        abandoned
    }

    /// Whether the core has finished: shut down and nothing in flight.
    pub fn finished(&self) -> bool {
        self.shutting_down && self.conns.in_flight_len() == 0
    }

    /// After a graceful stop: closes every connection once its queued bytes
    /// are written.
    pub fn close_connections(&mut self) {
        for conn in self.conns.iter_mut() {
            conn.outbox.close_after_flush();
        }
    }

    /// The last applied zxid.
    pub fn applied(&self) -> Zxid {
        self.data.applied()
    }

    /// Whether this member serves clients now.
    pub fn serving(&self) -> bool {
        self.serving != Serving::No
    }

    /// The tree (the simulator compares members' trees).
    pub fn tree(&self) -> &DataTree {
        &self.data.tree
    }

    /// Whether `sid` is in the replicated session table.
    pub fn has_session(&self, sid: SessionId) -> bool {
        self.sessions.contains(sid)
    }

    /// Checks what must hold between the stages after every step: every
    /// ephemeral node belongs to a session of the table (a session's
    /// ephemerals go in the txn that closes it), and nothing is in flight
    /// while the member does not serve.
    pub fn check_invariants(&self) -> Result<(), String> {
        for (sid, paths) in self.data.tree.all_ephemerals() {
            if !paths.is_empty() && !self.sessions.contains(SessionId(*sid)) {
                return Err(format!(
                    "{} ephemeral nodes (e.g. {:?}) of session {} not in the session table at {}",
                    paths.len(),
                    paths.iter().next(),
                    SessionId(*sid),
                    self.data.applied()
                ));
            }
        }
        if self.serving == Serving::No && self.conns.in_flight_len() > 0 {
            return Err(format!(
                "{} requests in flight while not serving",
                self.conns.in_flight_len()
            ));
        }
        Ok(())
    }

    /// Hands the core the queue to stream the snapshot it asked for
    /// ([`Effect::BeginSnapshot`]) into; make it with
    /// [`snapshot::SNAPSHOT_QUEUE_SLOTS`] slots and take [`SnapshotChunk`]s
    /// from it until the one marked `last`.
    pub fn snapshot_into(&mut self, chunks: tokio::sync::mpsc::Sender<SnapshotChunk>) {
        self.snapshots.set_stream(SnapshotStream::new(chunks));
    }

    /// While it cannot serve (no leader: the members it can reach are no
    /// quorum), a member keeps trying and says so every few seconds: how long
    /// it has not served (ms) and how many connections wait, when it is time
    /// to say so again.
    pub(crate) fn not_serving_report(&mut self, now: Time) -> Option<(u64, usize)> {
        const EVERY_MS: u64 = 5_000;
        if self.serving != Serving::No || now.ms_since(self.not_serving_logged_us) < EVERY_MS {
            return None;
        }
        self.not_serving_logged_us = now.mono_us;
        let for_ms = now.ms_since(self.not_serving_since_us);
        Some((for_ms, self.conns.held.len()))
    }

    fn begin_shutdown(&mut self) {
        if self.shutting_down {
            return;
        }
        tracing::info!(
            in_flight = self.conns.in_flight_len(),
            "shutting down: finishing in-flight writes"
        );
        self.shutting_down = true;
        for held in self.conns.held.drain(..) {
            held.outbox.close_now();
        }
    }

    // ---- the commit stream: snapshots, txns, roles ----

    /// I2: everything derived from the state is rebuilt from the snapshot (a
    /// start-up recovery or a learner's SNAP sync). A member loads a snapshot
    /// only while it is not serving, so it has no clients to keep.
    fn on_loaded(
        &mut self,
        tree: Box<DataTree>,
        sessions: Vec<SessionRecord>,
        at: Zxid,
        now: Time,
    ) {
        self.stop_serving("a snapshot is loaded", now);
        // A snapshot of the old tree in progress is abandoned (its writer
        // aborts when its stream ends unfinished).
        self.snapshots.abandon();
        self.data.reset(*tree, at);
        self.show_membership(now);
        self.sessions.reset(sessions);
        tracing::info!(zxid = %at, nodes = self.data.tree.node_count(), "snapshot loaded");
    }

    /// An ensemble member shows the membership in `/zookeeper/config`, as
    /// ZooKeeper's do (zkCli's `config` and Curator's ensemble tracker read
    /// it). A local value, not a txn: set on every tree this member loads
    /// (the replay at start-up begins with a snapshot, an empty one on a new
    /// member, so every tree passes here).
    fn show_membership(&mut self, now: Time) {
        let membership = self.cfg.server.membership_text();
        if !membership.is_empty() {
            self.data
                .tree
                .set_config_node(membership.as_bytes(), now.wall_ms);
        }
    }

    /// A committed txn, in zxid order.
    fn on_txn(&mut self, zxid: Zxid, payload: Bytes, now: Time) -> Result<(), CoreError> {
        if !self.cfg.test_bugs.apply_out_of_order {
            return self.apply_txn(zxid, &payload, true, now);
        }
        // The bug: every txn with an odd counter waits for the next one.
        match self.held_txn.take() {
            Some((held, held_payload)) => {
                self.apply_txn(zxid, &payload, false, now)?;
                self.apply_txn(held, &held_payload, false, now)
            }
            None if zxid.counter().0 % 2 == 1 => {
                self.held_txn = Some((zxid, payload));
                Ok(())
            }
            None => self.apply_txn(zxid, &payload, false, now),
        }
    }

    /// Applies a committed txn, fires its watches and answers this member's
    /// request. `in_order`: check that it follows the last one applied.
    fn apply_txn(
        &mut self,
        zxid: Zxid,
        payload: &[u8],
        in_order: bool,
        now: Time,
    ) -> Result<(), CoreError> {
        let txn =
            Txn::decode(payload).map_err(|e| CoreError::Corrupt(format!("txn {zxid}: {e}")))?;
        let mut events = Vec::new();
        let applied = match self.data.apply(zxid, &txn, &mut events, in_order) {
            Ok(a) => a,
            Err(e) => {
                tracing::error!(error = %e, "the state diverged from the committed history; the member stops serving");
                self.stop_serving("the state diverged", now);
                return Err(e);
            }
        };
        let sid = SessionId(txn.header.session);
        if let Applied::SessionCreated {
            timeout_ms,
            password,
        } = &applied
        {
            self.sessions.created(sid, *timeout_ms, *password);
        }
        if let Some(leader) = self.leader.as_mut() {
            leader.on_applied(&txn.header, &applied, now);
        }
        data::fire(&mut self.data.watches, &mut self.conns, &events);
        if PeerId(txn.header.origin) == self.cfg.server_id {
            match self.conns.finish(RequestId(txn.header.request)) {
                Some(InFlight::Write(id)) => {
                    self.reply_write(id, RequestId(txn.header.request), zxid, &applied, now)
                }
                Some(InFlight::Connect(id)) => self.connected(id, sid, now),
                None => {}
            }
        }
        if let Applied::SessionClosed = applied {
            if let Some(id) = self.sessions.closed(sid) {
                if let Some(c) = self.conns.get_mut(id) {
                    c.close_after_flush();
                }
            }
        }
        if self
            .snapshots
            .after_apply(&mut self.data.tree, self.serving != Serving::No)
        {
            self.begin_snapshot();
        }
        self.revalidations_ready(now);
        Ok(())
    }

    fn begin_snapshot(&mut self) {
        let zxid = self.data.applied();
        let records = self.sessions.records();
        if self
            .snapshots
            .begin(&mut self.data.tree, zxid, &records, &mut self.rng)
        {
            self.effects.push(Effect::BeginSnapshot { zxid });
        }
    }

    /// Answers this member's write `request` on connection `id`. Per session,
    /// writes are forwarded in order and committed in order, so it is the head
    /// of the connection's queue; anything else is a bug, and the connection is
    /// closed rather than left waiting.
    fn reply_write(
        &mut self,
        id: ConnId,
        request: RequestId,
        zxid: Zxid,
        applied: &Applied,
        now: Time,
    ) {
        let Some(conn) = self.conns.get_mut(id) else {
            return;
        };
        let head = match conn.queue.front() {
            Some(Pending::Write { request: r, .. }) => Some(*r),
            _ => None,
        };
        if head != Some(request) {
            tracing::error!(
                ?request,
                ?head,
                "an applied write is not its connection's next: closing the connection"
            );
            self.conns.fail(id);
            return;
        }
        let Some(Pending::Write {
            xid,
            reply_as,
            started_us,
            ..
        }) = conn.queue.pop_front()
        else {
            return;
        };
        if let Applied::Error(ErrorCode::SessionMoved) = applied {
            // ZOOKEEPER-710: SESSIONMOVED is a connection-level error. The
            // leader thinks another member holds the session (a client that
            // gave up on a member whose Attach reached the leader late, after
            // the client's Attach through this member): answering the error
            // on an open connection would fail every write of a live client
            // until it happens to reconnect. Closing it, as ZooKeeper does,
            // makes the client reconnect, and its Attach makes this member the
            // owner again. The write was not applied.
            tracing::info!(
                ?request,
                "a write of a session another member owns: closing the connection (SESSIONMOVED)"
            );
            self.conns.fail(id);
            return;
        }
        let result = write_result(&reply_as, applied);
        let reply = Reply { xid, zxid, result };
        self.conns.send_reply(id, &reply, started_us, now);
        self.conns
            .stats
            .update_latency
            .record_ms(now.ms_since(started_us));
        if let ReplyAs::CloseSession = reply_as {
            if let Some(conn) = self.conns.get_mut(id) {
                conn.close_after_flush();
            }
            return;
        }
        self.drain(id, now);
    }

    /// The commit stream says this member is current as `role` of `leader`.
    fn on_serving(&mut self, role: Role, leader: PeerId, epoch: Epoch, now: Time) {
        if let Serving::Yes {
            role: r, leader: l, ..
        } = self.serving
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
            self.stop_serving("the leader changed", now);
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
            last_zxid = %self.data.applied(),
            nodes = self.data.tree.node_count(),
            sessions = self.sessions.len(),
            "serving"
        );
        if role == Role::Leader {
            self.leader = Some(LeaderStage::new(
                self.cfg.server.extended_types_enabled,
                &self.sessions,
                self.cfg.server_id,
                now,
            ));
        }
        let held: Vec<HeldConnect> = self.conns.held.drain(..).collect();
        for h in held {
            let id = h.conn;
            self.on_connect(id, h.peer, h.auth, h.outbox, h.req, now);
            for (req, permit) in h.backlog {
                self.on_request(id, req, permit, now);
            }
        }
    }

    /// The member lost its leader (or its leadership): every client connection
    /// is closed, as ZooKeeper's members do; the clients reconnect and keep their
    /// sessions. Requests in flight are dropped with their connections.
    fn stop_serving(&mut self, why: &str, now: Time) {
        if self.serving == Serving::No {
            return;
        }
        tracing::info!(
            connections = self.conns.len(),
            in_flight = self.conns.in_flight_len(),
            "not serving: {why}; closing client connections"
        );
        self.serving = Serving::No;
        self.not_serving_since_us = now.mono_us;
        self.not_serving_logged_us = now.mono_us;
        self.leader = None;
        for id in self.conns.close_all() {
            self.data.watches.remove_conn(id);
        }
        self.sessions.detach_all();
    }

    // ---- connects ----

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
        now: Time,
    ) {
        if self.shutting_down {
            outbox.close_now();
            return;
        }
        if self.serving == Serving::No {
            // Recovering or electing: the client waits (its connect timeout
            // bounds how long) and is served as soon as this member serves.
            if self.conns.held.len() >= HELD_CONNECTS_MAX {
                outbox.close_now();
                return;
            }
            self.conns.held.push_back(HeldConnect {
                conn: id,
                peer,
                auth,
                outbox,
                req,
                backlog: Vec::new(),
            });
            return;
        }
        // A client that has seen more than this server has applied must not
        // go back in time here; it tries another member.
        if req.last_zxid_seen > self.data.applied() {
            tracing::info!(
                %peer,
                client_last_zxid = %req.last_zxid_seen,
                server_last_zxid = %self.data.applied(),
                "refusing a client that has seen a later zxid than this server"
            );
            outbox.close_now();
            return;
        }
        let negotiated = self.negotiate(req.timeout_ms);
        let conn = Box::new(Conn::new(outbox, auth, req.read_only.is_some(), now));
        self.conns.stats.packets_received += 1;
        if req.session_id.0 == 0 {
            let session = self.sessions.allocate();
            let password: [u8; 16] = self.rng.random();
            self.conns.insert(id, conn);
            let request = self.conns.begin(InFlight::Connect(id));
            let w = WriteRequest {
                origin: self.cfg.server_id,
                request,
                session,
                cxid: Xid(0),
                kind: WriteKind::CreateSession {
                    timeout_ms: negotiated,
                    password,
                },
            };
            self.submit(Some(id), w, now);
            return;
        }
        self.resume(id, conn, req, negotiated, now);
    }

    /// A client comes back with its session id and password.
    fn resume(
        &mut self,
        id: ConnId,
        conn: Box<Conn>,
        req: ConnectRequest,
        negotiated: i32,
        now: Time,
    ) {
        let sid = req.session_id;
        // Any other connection of this session is closed first, even if the
        // password turns out wrong (ZooKeeper's reconnect does the same).
        if let Some(old) = self.sessions.detach(sid) {
            if old != id {
                if let Some(c) = self.conns.get_mut(old) {
                    c.close_now();
                }
            }
        }
        // The leader decides from its own table, as ZooKeeper's leader does
        // (its revalidation touches its own session tracker): every committed
        // create and close is applied here or still tracked as proposed, so a
        // session neither being created nor closed is live here exactly when
        // it is in the table. No quorum round: a leader that has not noticed
        // yet that it is cut off from its followers still resumes its clients
        // and serves their reads, as ZooKeeper's does (found by rzk-chaos
        // `--schedule partition-leader`: every resume waited for the heal).
        if self.leader.as_ref().is_some_and(|l| l.decides_resume(sid)) {
            self.finish_resume(id, conn, &req, negotiated, now);
            return;
        }
        // A follower's session table may be behind the ensemble's either way:
        // a session created (or closed, or expired) through another member is
        // applied here a moment after that member answered its client. So a
        // member does not decide from its table at once: ZooKeeper's learners
        // ask the leader (REVALIDATE); here the I6b barrier gives the same
        // answer. Once this member has applied everything committed before the
        // sync reached the leader, its table holds the session exactly when the
        // ensemble does. Requests pipelined behind the ConnectRequest wait in
        // the connection's backlog meanwhile.
        let token = self.conns.take_sync_token();
        self.effects.push(Effect::Sync { conn: id, token });
        self.sessions.revalidate(
            id,
            Revalidation {
                token,
                req,
                negotiated,
                barrier: None,
            },
        );
        self.conns.insert(id, conn);
    }

    /// Decides the resumes whose barrier this member has applied.
    fn revalidations_ready(&mut self, now: Time) {
        for (id, r) in self.sessions.revalidations_ready(self.data.applied()) {
            let Some(conn) = self.conns.remove(id) else {
                continue;
            };
            if matches!(conn.state, ConnState::Closing) {
                continue;
            }
            self.finish_resume(id, conn, &r.req, r.negotiated, now);
        }
    }

    /// Answers a resume from this member's (current) session table.
    fn finish_resume(
        &mut self,
        id: ConnId,
        mut conn: Box<Conn>,
        req: &ConnectRequest,
        negotiated: i32,
        now: Time,
    ) {
        let sid = req.session_id;
        let password = match self.sessions.get(sid) {
            Some(s) if s.password[..] == req.passwd[..] => s.password,
            _ => {
                tracing::info!(session = %sid, peer = %conn.peer(), "refusing to resume an expired session or a wrong password");
                conns::push_frame(&conn.outbox, |b| req.reject().encode(b));
                conn.outbox.close_after_flush();
                return;
            }
        };
        // Another connection may have resumed the session meanwhile: the
        // newer one wins, as above.
        if let Some(old) = self.sessions.attach(sid, id, negotiated) {
            if let Some(c) = self.conns.get_mut(old) {
                c.close_now();
            }
        }
        let resp = req.accept(negotiated, sid, Bytes::copy_from_slice(&password));
        conns::push_frame(&conn.outbox, |b| resp.encode(b));
        conn.state = ConnState::Connected(sid);
        conn.stats.sent += 1;
        self.conns.stats.packets_sent += 1;
        tracing::info!(session = %sid, peer = %conn.peer(), timeout_ms = negotiated, "session resumed");
        let backlog = conn.backlog.take();
        self.conns.insert(id, conn);
        // The leader makes this member the session's owner (a write through
        // another member's stale connection then gets SESSIONMOVED).
        let me = self.cfg.server_id;
        match self.leader.as_mut() {
            Some(l) => l.attach(&self.sessions, sid, me, now),
            None => self.forward(Some(id), ToLeader::Attach(sid)),
        }
        for (req, permit) in backlog {
            self.process(id, sid, req, permit, now);
        }
    }

    /// The session created for connection `id` is applied: answer its
    /// ConnectRequest and serve the requests that waited for it.
    fn connected(&mut self, id: ConnId, sid: SessionId, now: Time) {
        let Some(conn) = self.conns.get_mut(id) else {
            return;
        };
        let Some(s) = self.sessions.attach_new(sid, id) else {
            return;
        };
        tracing::info!(session = %sid, peer = %conn.peer(), timeout_ms = s.timeout_ms, "session established");
        // The ConnectResponse carries the readOnly byte exactly when the
        // request did; the outbox encodes it as the codec would.
        let resp = rzk_wire::ConnectResponse {
            protocol_version: 0,
            timeout_ms: s.timeout_ms,
            session_id: sid,
            passwd: Bytes::copy_from_slice(&s.password),
            read_only: conn.read_only_byte.then_some(false),
        };
        conns::push_frame(&conn.outbox, |b| resp.encode(b));
        conn.stats.sent += 1;
        conn.state = ConnState::Connected(sid);
        let backlog = conn.backlog.take();
        self.conns.stats.packets_sent += 1;
        for (req, permit) in backlog {
            self.process(id, sid, req, permit, now);
        }
    }

    fn on_closed(&mut self, id: ConnId) {
        self.conns.held.retain(|h| h.conn != id);
        self.sessions.cancel_revalidation(id);
        let Some(conn) = self.conns.remove(id) else {
            return;
        };
        self.data.watches.remove_conn(id);
        if let Some(sid) = conn.session() {
            self.sessions.conn_closed(sid, id);
            tracing::debug!(session = %sid, peer = %conn.peer(), "connection closed");
        }
    }

    // ---- requests ----

    fn on_request(&mut self, id: ConnId, req: Req, permit: Permit, now: Time) {
        let Some(conn) = self.conns.get_mut(id) else {
            if let Some(h) = self.conns.held.iter_mut().find(|h| h.conn == id) {
                h.backlog.push((req, permit));
            }
            return;
        };
        conn.stats.received += 1;
        let sid = match conn.state {
            ConnState::Connecting => {
                conn.backlog.push((req, permit));
                self.conns.stats.packets_received += 1;
                return;
            }
            ConnState::Closing => {
                self.conns.stats.packets_received += 1;
                return;
            }
            ConnState::Connected(sid) => sid,
        };
        self.conns.stats.packets_received += 1;
        if self.shutting_down {
            return;
        }
        self.touch(sid, now);
        self.process(id, sid, req, permit, now);
    }

    fn process(&mut self, id: ConnId, sid: SessionId, req: Req, permit: Permit, now: Time) {
        let frame = match req {
            Req::Unknown { xid } => {
                if let Some(conn) = self.conns.get_mut(id) {
                    tracing::info!(peer = %conn.peer(), "unknown opcode: closing the connection");
                    let reply = Reply::unimplemented(xid);
                    conns::push_frame(&conn.outbox, |b| reply.encode_payload(b));
                    conn.close_after_flush();
                    self.conns.stats.packets_sent += 1;
                }
                return;
            }
            Req::Malformed { xid, opcode } => {
                if route::is_write(opcode) {
                    let request = self
                        .conns
                        .queue_write(id, xid, ReplyAs::Op(opcode), permit, now);
                    let w = self.write_request(
                        request,
                        sid,
                        xid,
                        WriteKind::Error(ErrorCode::MarshallingError),
                    );
                    self.submit(Some(id), w, now);
                } else {
                    let pending = Pending::Error {
                        xid,
                        code: ErrorCode::MarshallingError,
                        started_us: now.mono_us,
                        _permit: permit,
                    };
                    self.enqueue_or_answer(id, pending, now);
                }
                return;
            }
            Req::Frame(frame) => frame,
        };
        match route(frame) {
            Route::Write(xid, op) => {
                let request = self.conns.queue_write(id, xid, op.reply_as(), permit, now);
                let Some(conn) = self.conns.get(id) else {
                    return;
                };
                let auth = conn.auth.clone();
                let w = self.write_request(request, sid, xid, WriteKind::Op { auth, op });
                self.submit(Some(id), w, now);
            }
            Route::Auth(xid, packet) => self.on_auth(id, xid, &packet.scheme, &packet.auth),
            Route::Close(xid) => {
                tracing::info!(session = %sid, "session closing at the client's request");
                let request = self
                    .conns
                    .queue_write(id, xid, ReplyAs::CloseSession, permit, now);
                let w = self.write_request(request, sid, xid, WriteKind::CloseSession);
                self.submit(Some(id), w, now);
            }
            Route::Sync(xid, path) => {
                let token = self.conns.take_sync_token();
                self.effects.push(Effect::Sync { conn: id, token });
                if let Some(conn) = self.conns.get_mut(id) {
                    conn.queue.push_back(Pending::Sync {
                        token,
                        xid,
                        path,
                        barrier: None,
                        started_us: now.mono_us,
                        _permit: permit,
                    });
                }
            }
            Route::Read(frame) => self.enqueue_or_answer(
                id,
                Pending::Read {
                    frame,
                    started_us: now.mono_us,
                    _permit: permit,
                },
                now,
            ),
        }
    }

    /// A write of one of this member's sessions.
    fn write_request(
        &self,
        request: RequestId,
        session: SessionId,
        cxid: Xid,
        kind: WriteKind,
    ) -> WriteRequest {
        WriteRequest {
            origin: self.cfg.server_id,
            request,
            session,
            cxid,
            kind,
        }
    }

    fn on_auth(&mut self, id: ConnId, xid: Xid, scheme: &str, auth: &[u8]) {
        let super_digest = self.cfg.server.super_digest.as_deref();
        let Some(conn) = self.conns.get_mut(id) else {
            return;
        };
        let ip = conn.peer().ip();
        let outcome = acl::authenticate(&mut conn.auth, scheme, auth, ip, super_digest);
        // Auth is answered at once, outside the ordered pipeline, with zxid 0
        // and the request's own xid: Java clients send -4, but ZooKeeper
        // echoes whatever came, and the `zookeeper-client` crate numbers its
        // auth packets like any request and matches the reply by that number
        // (a reply with -4 made it drop the connection, forever).
        let reply = match outcome {
            AuthOutcome::Added => Reply::ok(xid, Zxid::ZERO, Response::Empty),
            AuthOutcome::Failed => Reply::error(xid, Zxid::ZERO, ErrorCode::AuthFailed),
        };
        self.conns.send_frame(id, |b| reply.encode_payload(b));
        if outcome == AuthOutcome::Failed {
            self.conns.stats.auth_failed += 1;
            if let Some(conn) = self.conns.get_mut(id) {
                tracing::info!(peer = %conn.peer(), scheme, "auth with an unknown scheme: closing the connection");
                conn.close_after_flush();
            }
        }
    }

    /// Hands a write to the leader: prepped in place when this member leads,
    /// forwarded otherwise. `conn` is the connection that waits for it.
    fn submit(&mut self, conn: Option<ConnId>, w: WriteRequest, now: Time) {
        match self.leader.as_mut() {
            Some(leader) => {
                let p = leader.submit(&self.data.tree, &self.sessions, w, now);
                self.propose(p);
            }
            None => self.forward(conn, ToLeader::Write(w)),
        }
    }

    fn propose(&mut self, p: Proposed) {
        self.effects.push(Effect::Propose {
            origin: p.origin,
            request: p.request,
            txn: p.txn.encode(),
        });
    }

    /// Forwards to the leader; a member that cannot reach one closes the
    /// connection (its client reconnects, here or elsewhere).
    fn forward(&mut self, conn: Option<ConnId>, msg: ToLeader) {
        self.effects.push(Effect::Forward {
            conn,
            msg: msg.encode(),
        });
    }

    /// A leader's proposal failed. Routine unless storage failed: when the
    /// leadership is ending, a role item follows and closes the clients.
    fn on_proposal_failed(
        &mut self,
        origin: PeerId,
        request: RequestId,
        e: ReplicateError,
        now: Time,
    ) -> Result<(), CoreError> {
        match e {
            ReplicateError::Storage(_) => {
                tracing::error!(error = %e, "the log failed; the server stops");
                Err(e.into())
            }
            ReplicateError::NotLeader { .. }
            | ReplicateError::LostQuorum
            | ReplicateError::Shutdown => {
                tracing::debug!(error = %e, origin = origin.0, ?request, "a proposal failed");
                Ok(())
            }
            ReplicateError::TooLarge { .. } | ReplicateError::Overloaded { .. } => {
                tracing::warn!(error = %e, origin = origin.0, ?request, "a proposal was refused; answering with an error");
                if let Some(p) = self
                    .leader
                    .as_mut()
                    .and_then(|l| l.refused(origin, request, now))
                {
                    self.propose(p);
                }
                Ok(())
            }
        }
    }

    /// A member's forwarded record reached this leader.
    fn on_forwarded(&mut self, from: PeerId, payload: &Bytes, now: Time) {
        if self.leader.is_none() {
            // Sent to an earlier leadership of this member: nobody waits for
            // it (the sender closed its clients when that leadership ended).
            tracing::debug!(
                from = from.0,
                "a forwarded record while not leading: dropped"
            );
            return;
        }
        let msg = match ToLeader::decode(from, payload) {
            Ok(m) => m,
            Err(e) => {
                // I7: a bad record from a peer is refused with a log line naming it.
                tracing::warn!(peer = from.0, error = %e, "dropped a forwarded record");
                return;
            }
        };
        let Some(leader) = self.leader.as_mut() else {
            return;
        };
        match msg {
            ToLeader::Write(w) => {
                let p = leader.submit(&self.data.tree, &self.sessions, w, now);
                self.propose(p);
            }
            ToLeader::Attach(sid) => leader.attach(&self.sessions, sid, from, now),
            ToLeader::Touch(sessions) => {
                for sid in sessions {
                    leader.touch(&self.sessions, sid, now);
                }
            }
        }
    }

    /// Session activity: the leader refreshes the deadline at once, a follower
    /// reports it in its next touch batch.
    fn touch(&mut self, sid: SessionId, now: Time) {
        match self.leader.as_mut() {
            Some(l) => l.touch(&self.sessions, sid, now),
            None => self.sessions.touched(sid),
        }
    }

    // ---- periodic work ----

    fn on_tick(&mut self, due: Due, now: Time) {
        if due.expiry {
            self.expire_sessions(now);
        }
        if due.touches {
            self.send_touches();
        }
        if due.reap {
            self.reap(now);
        }
    }

    /// A follower's touch batch (ZooKeeper's learner ping).
    fn send_touches(&mut self) {
        if self.leader.is_some() {
            self.sessions.clear_touches();
            return;
        }
        for mut batch in self.sessions.take_touches() {
            batch.sort_unstable();
            // Without a leader there is nobody to tell; the next leader gives
            // every session a full timeout anyway.
            self.forward(None, ToLeader::Touch(batch));
        }
    }

    /// Leader only: proposes the close of every session past its deadline.
    fn expire_sessions(&mut self, now: Time) {
        if self.shutting_down {
            return;
        }
        let Some(leader) = self.leader.as_mut() else {
            return;
        };
        for p in leader.expire(&self.data.tree, &self.sessions, now) {
            self.propose(p);
        }
    }

    /// Leader only: deletes empty containers that have had children and
    /// expired TTL nodes without children, as ordinary delete txns.
    fn reap(&mut self, now: Time) {
        if self.shutting_down {
            return;
        }
        let Some(leader) = self.leader.as_mut() else {
            return;
        };
        let budget = self.cfg.server.container_max_per_minute as usize;
        for p in leader.reap(&self.data.tree, budget, now) {
            self.propose(p);
        }
    }

    // ---- replies ----

    fn enqueue_or_answer(&mut self, id: ConnId, pending: Pending, now: Time) {
        let Some(conn) = self.conns.get_mut(id) else {
            return;
        };
        if conn.queue.is_empty() && matches!(pending, Pending::Read { .. } | Pending::Error { .. })
        {
            // Nothing before it: answered at once, without a trip through
            // the queue (and without giving the queue memory).
            self.answer(id, pending, now);
            return;
        }
        conn.queue.push_back(pending);
        self.drain(id, now);
    }

    /// Answers the connection's queued requests that can be answered now: reads
    /// up to the first write still in flight or sync still waiting.
    fn drain(&mut self, id: ConnId, now: Time) {
        let applied = self.data.applied();
        while let Some(item) = self.conns.get_mut(id).and_then(|c| c.pop_ready(applied)) {
            self.answer(id, item, now);
        }
    }

    /// Answers a request that is ready (a read, an error, a sync whose
    /// barrier has been applied).
    fn answer(&mut self, id: ConnId, item: Pending, now: Time) {
        let applied = self.data.applied();
        match item {
            Pending::Read {
                frame, started_us, ..
            } => {
                let Some(conn) = self.conns.get(id) else {
                    return;
                };
                let reply = read::serve(&mut self.data, id, conn, &frame);
                self.conns.send_reply(id, &reply, started_us, now);
                self.conns
                    .stats
                    .read_latency
                    .record_ms(now.ms_since(started_us));
            }
            Pending::Error {
                xid,
                code,
                started_us,
                ..
            } => {
                let reply = Reply::error(xid, applied, code);
                self.conns.send_reply(id, &reply, started_us, now);
            }
            Pending::Sync {
                xid,
                path,
                started_us,
                ..
            } => {
                let reply = Reply::ok(xid, applied, Response::Sync(SyncResponse { path }));
                self.conns.send_reply(id, &reply, started_us, now);
            }
            Pending::Write { request, .. } => {
                // `pop_ready` never yields a write: it is answered when its
                // txn applies. Closing is the safe answer to a broken rule.
                tracing::error!(
                    ?request,
                    "a write was taken as ready: closing the connection"
                );
                self.conns.fail(id);
            }
        }
    }

    fn on_sync_done(
        &mut self,
        id: ConnId,
        token: SyncToken,
        result: Result<Zxid, ReplicateError>,
        now: Time,
    ) -> Result<(), CoreError> {
        let resume = self.sessions.is_revalidation(id, token);
        let zxid = match result {
            Ok(z) => z,
            Err(ReplicateError::Storage(e)) => return Err(ReplicateError::Storage(e).into()),
            Err(e) => {
                // I6b cannot be promised without the leader, nor a resume
                // vouched for: the client retries.
                tracing::debug!(error = %e, resume, "a sync failed: closing the connection");
                if resume {
                    self.sessions.cancel_revalidation(id);
                }
                self.conns.fail(id);
                return Ok(());
            }
        };
        // The bug: the barrier taken as reached at once.
        let zxid = if self.cfg.test_bugs.answer_sync_before_apply {
            zxid.min(self.data.applied())
        } else {
            zxid
        };
        if resume {
            self.sessions.revalidation_barrier(id, zxid);
            self.revalidations_ready(now);
            return Ok(());
        }
        if let Some(conn) = self.conns.get_mut(id) {
            conn.sync_barrier(token, zxid);
        }
        self.drain(id, now);
        Ok(())
    }

    // ---- what the operations surface reads ----

    /// The output of a four-letter word (already whitelisted): the two that
    /// reset counters act here, the rest format a stats snapshot.
    pub(crate) fn four_letter(
        &mut self,
        word: FourLetterWord,
        quorum: &QuorumStats,
        now: Time,
    ) -> String {
        match word {
            FourLetterWord::Crst => {
                for c in self.conns.iter_mut() {
                    c.stats = Default::default();
                }
                crate::fourlw::CONN_STATS_RESET.into()
            }
            FourLetterWord::Srst => {
                self.conns.stats = Default::default();
                crate::fourlw::SERVER_STATS_RESET.into()
            }
            _ => crate::fourlw::format(
                word,
                &self.stats(
                    crate::commands::of_word(word).word_needs_details(),
                    quorum,
                    now,
                ),
            ),
        }
    }

    /// Everything the server reports about itself; `details` adds the parts
    /// that grow with the data.
    pub(crate) fn stats(&self, details: bool, q: &QuorumStats, now: Time) -> ServerStats {
        let cfg = &self.cfg.server;
        let st = &self.conns.stats;
        ServerStats {
            version: crate::stats::version(),
            server_id: if cfg.servers.is_empty() {
                0
            } else {
                self.cfg.server_id.0
            },
            config: cfg.clone(),
            quorum: self.quorum_view(q),
            uptime_ms: now.ms_since(self.started_us),
            node_count: self.data.tree.node_count(),
            approximate_data_size: self.data.tree.approximate_data_size(),
            ephemerals_count: self.data.tree.ephemeral_count(),
            watch_count: self.data.watches.watch_count(),
            watched_paths: self.data.watches.path_count(),
            watching_connections: self.data.watches.conn_count(),
            global_sessions: self.sessions.len(),
            outstanding_requests: self.conns.outstanding(),
            packets_received: st.packets_received,
            packets_sent: st.packets_sent,
            min_latency_ms: st.min_latency_ms,
            avg_latency_ms: if st.replies == 0 {
                0.0
            } else {
                st.total_latency_ms as f64 / st.replies as f64
            },
            max_latency_ms: st.max_latency_ms,
            auth_failed: st.auth_failed,
            last_response_bytes: st.last_response_bytes,
            min_response_bytes: st.min_response_bytes,
            max_response_bytes: st.max_response_bytes,
            read_latency: st.read_latency.snapshot(),
            update_latency: st.update_latency.snapshot(),
            open_file_descriptors: crate::stats::open_fds(),
            max_file_descriptors: crate::stats::max_fds(),
            connections: self.conn_views(now),
            details: details.then(|| self.details(now)),
        }
    }

    fn conn_views(&self, now: Time) -> Vec<ConnView> {
        let mut connections: Vec<(ConnId, ConnView)> = self
            .conns
            .iter()
            .map(|(id, c)| {
                let s = &c.stats;
                let session = c.session();
                let view = ConnView {
                    peer: c.peer(),
                    session: session.map(|s| s.0),
                    session_timeout_ms: session
                        .and_then(|sid| self.sessions.get(sid))
                        .map_or(0, |x| x.timeout_ms),
                    queued: c.queued(),
                    received: s.received,
                    sent: s.sent,
                    established_ms: c.established_ms,
                    last_op: if s.last_op.is_empty() {
                        "NA"
                    } else {
                        s.last_op
                    },
                    last_cxid: s.last_cxid,
                    last_zxid: s.last_zxid,
                    last_response_ms: s
                        .last_response_us
                        .map_or(0, |t| now.wall_ms - now.ms_since(t) as i64),
                    last_latency_ms: s.last_latency_ms.into(),
                    min_latency_ms: s.min_latency_ms.into(),
                    avg_latency_ms: s.total_latency_ms.checked_div(s.replies).unwrap_or(0),
                    max_latency_ms: s.max_latency_ms.into(),
                };
                (id, view)
            })
            .collect();
        connections.sort_unstable_by_key(|(id, _)| *id);
        connections.into_iter().map(|(_, v)| v).collect()
    }

    fn details(&self, now: Time) -> Details {
        let cfg = &self.cfg.server;
        let sid_of = |c: ConnId| {
            self.conns
                .get(c)
                .and_then(|c| c.session())
                .map_or(0, |s| s.0)
        };
        let watches = &self.data.watches;
        let mut by_path: Vec<(String, Vec<i64>)> = watches
            .by_path()
            .map(|(p, conns)| (p.to_owned(), conns.into_iter().map(sid_of).collect()))
            .collect();
        by_path.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        let mut by_conn: Vec<(ConnId, Vec<String>)> = watches
            .by_conn()
            .map(|(c, paths)| (c, paths.into_iter().map(str::to_owned).collect()))
            .collect();
        by_conn.sort_unstable_by_key(|(c, _)| *c);
        let mut sessions: Vec<(i64, i32, i64)> = self
            .sessions
            .iter()
            .map(|(id, s)| {
                // The leader's deadline; a follower, which does not track
                // expiry, says a full timeout from now.
                let deadline_us = self
                    .leader
                    .as_ref()
                    .and_then(|l| l.deadline(id))
                    .unwrap_or_else(|| now.plus_ms(s.timeout_ms.max(0) as u64));
                let left_ms = deadline_us.saturating_sub(now.mono_us) / 1000;
                (id.0, s.timeout_ms, now.wall_ms + left_ms as i64)
            })
            .collect();
        sessions.sort_unstable();
        let mut ephemerals: Vec<(i64, Vec<String>)> = self
            .data
            .tree
            .all_ephemerals()
            .iter()
            .map(|(id, paths)| (*id, paths.iter().cloned().collect()))
            .collect();
        ephemerals.sort_unstable_by_key(|(id, _)| *id);
        Details {
            watches_by_path: by_path,
            watches_by_session: by_conn.into_iter().map(|(c, p)| (sid_of(c), p)).collect(),
            sessions,
            ephemerals,
            data_dir_bytes: crate::stats::dir_size(&cfg.data_dir),
            data_log_dir_bytes: crate::stats::dir_size(&cfg.data_log_dir),
        }
    }

    fn quorum_view(&self, q: &QuorumStats) -> QuorumView {
        let cfg = &self.cfg.server;
        let voters = cfg
            .servers
            .values()
            .filter(|p| p.role == crate::config::PeerRole::Participant)
            .count();
        let (serving, role) = match self.serving {
            Serving::No => (false, Role::Looking),
            Serving::Yes { role, .. } => (true, role),
        };
        let leading = self.leader.is_some();
        let count = |f: &dyn Fn(&rzk_quorum::LearnerStats) -> bool| {
            if leading {
                q.learners.iter().filter(|l| f(l)).count()
            } else {
                0
            }
        };
        let applied = self.data.applied();
        QuorumView {
            mode: crate::stats::ServerMode::of(cfg, role),
            leader: q.leader.map(|p| p.0),
            quorum_size: voters.max(1),
            serving,
            learners: count(&|_| true),
            followers: count(&|l| l.voting),
            synced_followers: count(&|l| l.voting && l.synced),
            synced_non_voting_followers: 0,
            // ZooKeeper's leader counts the observers it feeds; one on a
            // follower's relay is that follower's (`relayed_observers`).
            synced_observers: count(&|l| !l.voting && l.synced && !l.relayed),
            pending_syncs: if leading { q.pending_syncs } else { 0 },
            relayed_observers: crate::stats::serves_observers(cfg, self.cfg.server_id.0).then(
                || {
                    q.relayed_observers
                        .iter()
                        .map(|(id, queued)| (id.0, *queued))
                        .collect()
                },
            ),
            leader_observers: if leading {
                q.learners
                    .iter()
                    .filter(|l| !l.voting && l.synced && !l.relayed)
                    .map(|l| (l.id.0, l.acked))
                    .collect()
            } else {
                Vec::new()
            },
            observer_master_id: (role == Role::Observer)
                .then(|| q.observer_master.or(q.leader).map(|p| p.0))
                .flatten(),
            last_zxid: applied,
            looking_count: q.elections,
            last_durable: q.last_durable,
            accepted_epoch: q.accepted_epoch,
            commit_lag: if q.applied.epoch() == applied.epoch() {
                u64::from(q.applied.counter().0.saturating_sub(applied.counter().0))
            } else {
                0
            },
            replication: q.metrics.clone(),
            learner_syncs: q.syncs,
            window: q.window,
        }
    }
}

/// The reply body of an applied write.
fn write_result(reply_as: &ReplyAs, applied: &Applied) -> Result<Response, ErrorCode> {
    use rzk_wire::multi::MultiResult;
    use rzk_wire::{Create2Response, CreateResponse, OpCode};
    let single = |op: OpCode, o: &OpOutcome| match o {
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
    };
    // Inside a multi, create and create2 answer as type 1, containers and TTL
    // nodes as type 15 (as ZooKeeper 3.8 does).
    let in_multi = |op: OpCode, o: &OpOutcome| match o {
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
    };
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
                .map(|(op, o)| in_multi(*op, o))
                .collect(),
        })),
        (ReplyAs::Op(op), Applied::Op(o)) => Ok(single(*op, o)),
        (ReplyAs::CloseSession, Applied::SessionClosed) => Ok(Response::Empty),
        _ => Err(ErrorCode::SystemError),
    }
}

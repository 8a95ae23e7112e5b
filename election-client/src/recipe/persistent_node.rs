//! [`PersistentNode`] (Curator's `PersistentNode` / `PersistentTtlNode`): a node the
//! recipe keeps on the server, re-created after every session loss with its current
//! data: the service-registration primitive.
//!
//! # Guarantees across connection states
//! - `SUSPENDED` / `READ_ONLY`: [`NodeEvent::Absent`]`(Suspended)` at once (the recipe can
//!   no longer vouch for the node); nothing is deleted or re-created.
//! - `RECONNECTED` on the same session: the node is re-read; present and ours →
//!   [`NodeEvent::Present`] again; missing → re-created.
//! - `LOST`: `Absent(Lost)` at once. On the next session the node is created afresh. An
//!   ephemeral left by one of *our* dead sessions (a client-side `LOST` while the server
//!   still holds the session) is deleted and replaced, never adopted (CURATOR-696's
//!   lesson: a node of a dead session vanishes later, unnoticed); a protected
//!   sequential node gets a new prefix and the old one is deleted.
//! - Present means proven on the current session: created by it, or read back with
//!   `ephemeralOwner == current session` (for TTL nodes, which have no owner: read back).
//! - Never idle while connected: a watch on the node (a read with a watch) and a
//!   periodic self-check are always armed; every failure is retried with backoff. A
//!   fixed path held by someone else's live session is watched until it goes.
//! - TTL nodes are touched (setData) every third of their TTL while connected, so the
//!   server reaps them only after the owner is gone for longer than the TTL.

use std::sync::Arc;

use bytes::Bytes;
use rzk_wire::CreateMode;
use tokio::sync::watch;

use super::engine::{Backoff, Call, Ids, Input, Machine, Output, Reply, Running};
use super::ids::{join_path, name_of, OpId};
use super::latch::rand_nonce;
use super::ops::RecipeOps;
use crate::error::Error;
use crate::state::ConnectionState;
use crate::types::SessionId;

/// What kind of node to keep.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeKind {
    /// An ephemeral node at exactly the configured path.
    Ephemeral,
    /// A protected ephemeral-sequential node: the configured path is `parent/name`, the
    /// node is `parent/_c_<nonce>-<attempt>-name<seq>` (a create whose reply was lost is
    /// found again by its prefix instead of duplicated).
    ProtectedSequential,
    /// A persistent node with a TTL (ZooKeeper 3.5.3+, `extendedTypesEnabled`): it
    /// outlives sessions and is reaped once untouched for `ttl_ms` and childless.
    Ttl {
        /// The TTL, ms.
        ttl_ms: u64,
    },
}

/// Settings of a [`PersistentNode`].
#[derive(Debug, Clone)]
pub struct NodeConfig {
    /// The node (for [`NodeKind::ProtectedSequential`], `parent/name`).
    pub path: String,
    /// Its data.
    pub data: Bytes,
    /// Ephemeral, protected sequential or TTL.
    pub kind: NodeKind,
    /// Missing parents are created as containers (default) or persistent nodes.
    pub parents: CreateMode,
    /// First retry delay, ms.
    pub backoff_min_ms: u64,
    /// Largest retry delay, ms.
    pub backoff_max_ms: u64,
    /// Self-check period, ms (re-read the node even without a watch event).
    pub recheck_ms: u64,
    /// Makes protected names unique and seeds the jitter.
    pub nonce: u64,
}

impl NodeConfig {
    /// An ephemeral node at `path` with `data`.
    pub fn ephemeral(path: impl Into<String>, data: impl Into<Bytes>) -> NodeConfig {
        NodeConfig {
            path: path.into(),
            data: data.into(),
            kind: NodeKind::Ephemeral,
            parents: CreateMode::Container,
            backoff_min_ms: 20,
            backoff_max_ms: 2_000,
            recheck_ms: 10_000,
            nonce: rand_nonce(),
        }
    }

    /// A protected ephemeral-sequential node `parent/_c_…-name<seq>`.
    pub fn protected_sequential(parent: &str, name: &str, data: impl Into<Bytes>) -> NodeConfig {
        NodeConfig {
            kind: NodeKind::ProtectedSequential,
            ..NodeConfig::ephemeral(join_path(parent, name), data)
        }
    }

    /// A TTL node at `path`.
    pub fn ttl(path: impl Into<String>, data: impl Into<Bytes>, ttl_ms: u64) -> NodeConfig {
        NodeConfig {
            kind: NodeKind::Ttl { ttl_ms },
            ..NodeConfig::ephemeral(path, data)
        }
    }
}

/// Why the node cannot be vouched for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Absence {
    /// The connection is suspended (or read-only).
    Suspended,
    /// The session is lost; a new node comes with the next session.
    Lost,
    /// The node was deleted (by someone else, or reaped); it is being re-created.
    Deleted,
    /// The fixed path is held by another live session; the recipe waits for it to go.
    Taken {
        /// The session that holds it.
        owner: SessionId,
    },
    /// The recipe was closed (its node deleted).
    Closed,
}

/// What a [`PersistentNode`] reports, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NodeEvent {
    /// The node is on the server, proven on the current session.
    Present {
        /// Its full path (with the sequence suffix for sequential nodes).
        path: String,
        /// The session that proved it.
        session: SessionId,
    },
    /// The node can no longer be vouched for.
    Absent(Absence),
}

/// Commands to the machine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NodeCommand {
    /// Replace the data (now, and for every re-creation).
    SetData(Bytes),
}

/// What the machine waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    /// Not started, or not connected.
    Idle,
    Creating {
        op: OpId,
    },
    /// Listing the parent for our protected prefix after a lost create reply.
    Finding {
        op: OpId,
    },
    /// Reading our node with a watch.
    Checking {
        op: OpId,
    },
    /// Deleting a node of one of our dead sessions at the fixed path.
    Replacing {
        op: OpId,
    },
    /// Present; `watch` is the read that armed the data watch.
    Present {
        watch: OpId,
        timer: OpId,
    },
    /// The fixed path is someone else's; `watch` is an exists watch on it.
    Blocked {
        watch: OpId,
        timer: OpId,
    },
    Backoff {
        timer: OpId,
        then: Then,
    },
    Ended,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Then {
    Create,
    Check,
}

/// Our dead sessions remembered to recognise their nodes; older ones have long expired.
const DEAD_SESSIONS_MAX: usize = 16;

/// The machine of a [`PersistentNode`]. Public so its transitions can be tested and
/// driven without a server; see the module docs.
#[derive(Debug)]
pub struct NodeMachine {
    cfg: NodeConfig,
    ids: Ids,
    backoff: Backoff,
    started: bool,
    closed: bool,
    conn: Option<SessionId>,
    step: Step,
    /// The node's full path once created (or found), and the session that created it.
    node: Option<(String, SessionId)>,
    /// Whether `Present` is the last thing reported.
    present: bool,
    /// Protected-name attempt counter.
    attempt: u64,
    dead_sessions: Vec<SessionId>,
    /// Sequential nodes of dead sessions, deleted once connected.
    stale_nodes: Vec<String>,
    /// A setData in flight (data change or TTL touch), its id.
    setting: Option<OpId>,
    /// The last session connected with.
    seen: Option<SessionId>,
    /// After close: what is left to delete.
    closing: Option<Cleanup>,
}

/// What a closed [`NodeMachine`] still has to remove from the server before it ends
/// (docs/recipes.md, "The lifecycle", rule 16: close is final and clean, and a
/// create that lands after close is deleted, CURATOR-18).
#[derive(Debug, Default)]
struct Cleanup {
    /// The session whose ephemerals are ours to remove; once it is gone (`LOST`, or a
    /// new session) they died with it.
    session: Option<SessionId>,
    /// Nodes to delete whatever their version: ours by construction.
    delete: Vec<(String, Lifetime)>,
    /// A fixed path whose create may have landed: read it, delete it if `session` owns it.
    verify: Option<String>,
    /// A protected prefix whose create may have landed: list, delete what matches.
    find: Option<String>,
    /// The create that was in flight at close; its answer says what to remove.
    create: Option<OpId>,
    /// Cleanup calls in flight.
    inflight: Vec<(OpId, CleanupCall)>,
    /// A retry timer after a failed cleanup call.
    retry: Option<OpId>,
}

/// Whether a node to clean up dies with its session anyway.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Lifetime {
    Ephemeral,
    /// A TTL node outlives the session: deleted on the next one too.
    Durable,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum CleanupCall {
    Delete(String, Lifetime),
    Verify(String),
    Find(String),
}

impl NodeMachine {
    /// A machine for `cfg`, not started.
    pub fn new(cfg: NodeConfig) -> NodeMachine {
        let backoff = Backoff::new(cfg.backoff_min_ms, cfg.backoff_max_ms, cfg.nonce);
        NodeMachine {
            cfg,
            ids: Ids::default(),
            backoff,
            started: false,
            closed: false,
            conn: None,
            step: Step::Idle,
            node: None,
            present: false,
            attempt: 0,
            dead_sessions: Vec::new(),
            stale_nodes: Vec::new(),
            setting: None,
            seen: None,
            closing: None,
        }
    }

    /// True while `Present` is the last thing reported.
    pub fn is_present(&self) -> bool {
        self.present
    }

    /// The "never idle" check: false would mean started, connected and stuck.
    pub fn is_progressing(&self) -> bool {
        match self.step {
            Step::Idle => !self.started || self.closed || self.conn.is_none(),
            Step::Creating { .. }
            | Step::Finding { .. }
            | Step::Checking { .. }
            | Step::Replacing { .. }
            | Step::Present { .. }
            | Step::Blocked { .. }
            | Step::Backoff { .. }
            | Step::Ended => true,
        }
    }

    fn parent(&self) -> &str {
        match self.cfg.path.rfind('/') {
            Some(0) | None => "/",
            Some(i) => &self.cfg.path[..i],
        }
    }

    fn prefix(&self) -> String {
        format!("_c_{:016x}-{:x}-", self.cfg.nonce, self.attempt)
    }

    fn is_sequential(&self) -> bool {
        self.cfg.kind == NodeKind::ProtectedSequential
    }

    fn is_ttl(&self) -> bool {
        matches!(self.cfg.kind, NodeKind::Ttl { .. })
    }

    fn period_ms(&self) -> u64 {
        match self.cfg.kind {
            NodeKind::Ttl { ttl_ms } => (ttl_ms / 3).clamp(1, self.cfg.recheck_ms.max(1)),
            NodeKind::Ephemeral | NodeKind::ProtectedSequential => self.cfg.recheck_ms.max(1),
        }
    }

    fn absent(&mut self, why: Absence, out: &mut Vec<Output<NodeEvent>>) {
        if self.present {
            self.present = false;
            out.push(Output::Emit(NodeEvent::Absent(why)));
        } else if matches!(why, Absence::Taken { .. }) {
            out.push(Output::Emit(NodeEvent::Absent(why)));
        }
    }

    fn announce(&mut self, out: &mut Vec<Output<NodeEvent>>) {
        let (Some((path, _)), Some(session)) = (self.node.clone(), self.conn) else {
            return;
        };
        if !self.present {
            self.present = true;
            out.push(Output::Emit(NodeEvent::Present { path, session }));
        }
    }

    // ----- actions -------------------------------------------------------------------

    fn create(&mut self, out: &mut Vec<Output<NodeEvent>>) {
        let (path, mode, ttl_ms) = match self.cfg.kind {
            NodeKind::Ephemeral => (self.cfg.path.clone(), CreateMode::Ephemeral, None),
            NodeKind::ProtectedSequential => {
                let name = format!("{}{}", self.prefix(), name_of(&self.cfg.path));
                (
                    join_path(self.parent(), &name),
                    CreateMode::EphemeralSequential,
                    None,
                )
            }
            NodeKind::Ttl { ttl_ms } => (
                self.cfg.path.clone(),
                CreateMode::PersistentWithTtl,
                Some(ttl_ms),
            ),
        };
        let op = self.ids.call(
            Call::Create {
                path,
                data: self.cfg.data.clone(),
                mode,
                ttl_ms,
                parents: Some(self.cfg.parents),
            },
            out,
        );
        self.step = Step::Creating { op };
    }

    /// Read our node with a watch (or, before it is known, the fixed path).
    fn check(&mut self, out: &mut Vec<Output<NodeEvent>>) {
        let path = match &self.node {
            Some((p, _)) => p.clone(),
            None if self.is_sequential() => {
                self.create(out);
                return;
            }
            None => self.cfg.path.clone(),
        };
        let op = self.ids.call(Call::GetData { path, watch: true }, out);
        self.step = Step::Checking { op };
    }

    fn backoff(&mut self, now_ms: u64, then: Then, out: &mut Vec<Output<NodeEvent>>) {
        let delay = self.backoff.next_delay_ms();
        let timer = self.ids.timer(now_ms + delay, out);
        self.step = Step::Backoff { timer, then };
    }

    /// Start a fresh node on the current session.
    fn fresh(&mut self, out: &mut Vec<Output<NodeEvent>>) {
        self.attempt += 1;
        if self.is_sequential() {
            if let Some((path, _)) = self.node.take() {
                self.stale_nodes.push(path);
            }
        } else if !self.is_ttl() {
            // The fixed path: the node (if any) is recognised by its owner.
            self.node = None;
        }
        self.flush_stale(out);
        match (&self.node, self.is_ttl()) {
            // A TTL node outlives sessions: read it back first.
            (_, true) => self.check(out),
            (None, false) => self.create(out),
            (Some(_), false) => self.check(out),
        }
    }

    fn flush_stale(&mut self, out: &mut Vec<Output<NodeEvent>>) {
        if self.conn.is_none() {
            return;
        }
        for path in std::mem::take(&mut self.stale_nodes) {
            self.ids.call(Call::Delete { path, version: -1 }, out);
        }
    }

    fn hold(&mut self, now_ms: u64, watch: OpId, out: &mut Vec<Output<NodeEvent>>) {
        self.backoff.reset();
        self.announce(out);
        let timer = self.ids.timer(now_ms + self.period_ms(), out);
        self.step = Step::Present { watch, timer };
    }

    fn end(&mut self, out: &mut Vec<Output<NodeEvent>>) {
        if self.step != Step::Ended {
            self.step = Step::Ended;
            out.push(Output::Ended);
        }
    }

    // ----- inputs --------------------------------------------------------------------

    fn on_conn(&mut self, state: ConnectionState, out: &mut Vec<Output<NodeEvent>>) {
        match state {
            ConnectionState::Connected { session } | ConnectionState::Reconnected { session } => {
                let new_session = self.conn_session_changed(session);
                self.conn = Some(session);
                if !self.started || self.closed {
                    return;
                }
                if new_session {
                    self.fresh(out);
                } else if self.node.is_none() && self.is_sequential() {
                    // Same session, node unknown: a create may have landed unseen; look
                    // for its prefix before creating another.
                    self.flush_stale(out);
                    let op = self.ids.call(
                        Call::Children {
                            path: self.parent().to_owned(),
                            watch: false,
                        },
                        out,
                    );
                    self.step = Step::Finding { op };
                } else {
                    self.flush_stale(out);
                    self.check(out);
                }
            }
            ConnectionState::Suspended | ConnectionState::ReadOnly { .. } => {
                self.conn = None;
                self.absent(Absence::Suspended, out);
                if self.step != Step::Ended {
                    self.step = Step::Idle;
                }
            }
            ConnectionState::Lost => {
                self.conn = None;
                self.absent(Absence::Lost, out);
                self.retire_session();
                if self.step != Step::Ended {
                    self.step = Step::Idle;
                }
            }
        }
    }

    /// Whether `session` differs from the last session seen. A `LOST` always comes
    /// first; this also covers a missed one.
    fn conn_session_changed(&mut self, session: SessionId) -> bool {
        let last = self.seen.replace(session);
        match last {
            Some(s) if s != session => {
                self.retire_session_id(s);
                true
            }
            Some(_) => false,
            None => true,
        }
    }

    fn retire_session(&mut self) {
        if let Some(s) = self.seen {
            self.retire_session_id(s);
        }
    }

    fn retire_session_id(&mut self, s: SessionId) {
        if s == SessionId::NONE || self.dead_sessions.contains(&s) {
            return;
        }
        if self.dead_sessions.len() == DEAD_SESSIONS_MAX {
            self.dead_sessions.remove(0);
        }
        self.dead_sessions.push(s);
    }

    fn on_done(&mut self, now_ms: u64, id: OpId, reply: Reply, out: &mut Vec<Output<NodeEvent>>) {
        if self.setting == Some(id) {
            self.setting = None;
            self.on_set(now_ms, reply, out);
            return;
        }
        match (self.step, reply) {
            (Step::Creating { op }, Reply::Created(r)) if op == id => {
                self.on_created(now_ms, r, out)
            }
            (Step::Finding { op }, Reply::Children(r)) if op == id => self.on_found(now_ms, r, out),
            (Step::Checking { op }, Reply::Data(r)) if op == id => {
                self.on_checked(now_ms, id, r, out)
            }
            (Step::Replacing { op }, Reply::Deleted(r)) if op == id => match r {
                Ok(()) | Err(Error::NoNode { .. }) => self.create(out),
                Err(Error::BadVersion { .. }) => self.check(out),
                Err(_) => self.backoff(now_ms, Then::Check, out),
            },
            (Step::Blocked { watch, .. }, Reply::Exists(r)) if watch == id => match r {
                // Gone already: take it.
                Ok(None) => self.create(out),
                Ok(Some(_)) => {}
                Err(_) => self.backoff(now_ms, Then::Create, out),
            },
            (_, Reply::Created(Ok((path, _)))) => self.on_stale_create(path, out),
            _ => {}
        }
    }

    /// A create that succeeded after its attempt was given up: its node is nobody's.
    fn on_stale_create(&mut self, path: String, out: &mut Vec<Output<NodeEvent>>) {
        // Only sequential names are unique to the attempt; a fixed path may hold our
        // current node by now, so it is left to the owner check.
        let current = self.node.as_ref().is_some_and(|(p, _)| *p == path);
        if self.is_sequential() && !current {
            self.ids.call(Call::Delete { path, version: -1 }, out);
        }
    }

    fn on_created(
        &mut self,
        now_ms: u64,
        r: crate::Result<(String, crate::Stat)>,
        out: &mut Vec<Output<NodeEvent>>,
    ) {
        let Some(session) = self.conn else { return };
        match r {
            Ok((path, _)) => {
                self.node = Some((path.clone(), session));
                // Arm the watch on it; it is present from now.
                let op = self.ids.call(Call::GetData { path, watch: true }, out);
                self.announce(out);
                self.step = Step::Checking { op };
            }
            Err(Error::NodeExists { .. }) => {
                // Fixed path: whose is it? (Ours after a lost reply, a dead session's, or
                // someone else's.)
                self.node = None;
                self.check(out);
            }
            Err(e) if e.is_connection_loss() && self.is_sequential() => {
                let op = self.ids.call(
                    Call::Children {
                        path: self.parent().to_owned(),
                        watch: false,
                    },
                    out,
                );
                self.step = Step::Finding { op };
            }
            Err(e) if e.is_connection_loss() => self.backoff(now_ms, Then::Check, out),
            // NONODE: a parent vanished between its creation and ours (container GC).
            Err(_) => self.backoff(now_ms, Then::Create, out),
        }
    }

    fn on_found(
        &mut self,
        now_ms: u64,
        r: crate::Result<Vec<String>>,
        out: &mut Vec<Output<NodeEvent>>,
    ) {
        let Some(session) = self.conn else { return };
        match r {
            Ok(children) => {
                let prefix = self.prefix();
                match children.iter().find(|c| c.starts_with(&prefix)) {
                    Some(c) => {
                        self.node = Some((join_path(self.parent(), c), session));
                        self.check(out);
                    }
                    None => self.create(out),
                }
            }
            Err(Error::NoNode { .. }) => self.create(out),
            Err(_) => self.backoff(now_ms, Then::Create, out),
        }
    }

    fn on_checked(
        &mut self,
        now_ms: u64,
        id: OpId,
        r: crate::Result<(Bytes, crate::Stat)>,
        out: &mut Vec<Output<NodeEvent>>,
    ) {
        let Some(session) = self.conn else { return };
        let (data, stat) = match r {
            Ok(v) => v,
            Err(Error::NoNode { .. }) => {
                self.absent(Absence::Deleted, out);
                if self.is_sequential() {
                    self.node = None;
                    self.attempt += 1;
                }
                self.create(out);
                return;
            }
            Err(_) => {
                self.backoff(now_ms, Then::Check, out);
                return;
            }
        };
        let owner = stat.ephemeral_owner;
        let ours = if self.is_ttl() {
            true
        } else {
            owner == session
        };
        if ours {
            let path = match &self.node {
                Some((p, _)) => p.clone(),
                None => self.cfg.path.clone(),
            };
            self.node = Some((path.clone(), session));
            if data != self.cfg.data {
                // Our data is the truth (a change made while suspended, or overwritten).
                self.set_data(path, out);
            }
            self.hold(now_ms, id, out);
            return;
        }
        // An ephemeral of another session.
        self.absent(Absence::Deleted, out);
        if self.dead_sessions.contains(&owner) {
            // One of ours that the server has not expired yet: replace it now rather
            // than wait (never adopt it: it vanishes when its session expires).
            let path = self.cfg.path.clone();
            let op = self.ids.call(
                Call::Delete {
                    path,
                    version: stat.version,
                },
                out,
            );
            self.step = Step::Replacing { op };
            return;
        }
        if self.is_sequential() {
            // Our sequential node cannot belong to another session unless the name was
            // reused: start over with a new name.
            self.node = None;
            self.attempt += 1;
            self.create(out);
            return;
        }
        out.push(Output::Emit(NodeEvent::Absent(Absence::Taken { owner })));
        let watch = self.ids.call(
            Call::Exists {
                path: self.cfg.path.clone(),
                watch: true,
            },
            out,
        );
        let timer = self.ids.timer(now_ms + self.period_ms(), out);
        self.step = Step::Blocked { watch, timer };
    }

    fn set_data(&mut self, path: String, out: &mut Vec<Output<NodeEvent>>) {
        let op = self.ids.call(
            Call::SetData {
                path,
                data: self.cfg.data.clone(),
                version: -1,
            },
            out,
        );
        self.setting = Some(op);
    }

    fn on_set(&mut self, now_ms: u64, reply: Reply, out: &mut Vec<Output<NodeEvent>>) {
        match reply {
            Reply::Stat(Ok(_)) => {}
            // Gone: the watch (or the check below) re-creates it.
            Reply::Stat(Err(Error::NoNode { .. })) if matches!(self.step, Step::Present { .. }) => {
                self.check(out)
            }
            Reply::Stat(Err(_)) if matches!(self.step, Step::Present { .. }) => {
                self.backoff(now_ms, Then::Check, out)
            }
            _ => {}
        }
    }

    fn on_fired(&mut self, id: OpId, out: &mut Vec<Output<NodeEvent>>) {
        match self.step {
            Step::Present { watch, .. } if watch == id => self.check(out),
            Step::Blocked { watch, .. } if watch == id => self.create(out),
            _ => {}
        }
    }

    fn on_timer(&mut self, now_ms: u64, id: OpId, out: &mut Vec<Output<NodeEvent>>) {
        match self.step {
            Step::Backoff { timer, then } if timer == id => match then {
                Then::Create => self.create(out),
                Then::Check => self.check(out),
            },
            Step::Present { watch, timer } if timer == id => {
                if self.is_ttl() && self.setting.is_none() {
                    // Touch: a setData refreshes mtime, which the TTL is counted from.
                    if let Some((path, _)) = self.node.clone() {
                        self.set_data(path, out);
                    }
                    let timer = self.ids.timer(now_ms + self.period_ms(), out);
                    self.step = Step::Present { watch, timer };
                } else {
                    // Self-check: re-read (and re-arm the watch) even without an event.
                    out.push(Output::Unwatch { id: watch });
                    self.check(out);
                }
            }
            Step::Blocked { watch, timer } if timer == id => {
                out.push(Output::Unwatch { id: watch });
                self.create(out);
            }
            _ => {}
        }
    }

    fn on_close(&mut self, out: &mut Vec<Output<NodeEvent>>) {
        if self.closed {
            return;
        }
        self.closed = true;
        if self.present {
            self.present = false;
            out.push(Output::Emit(NodeEvent::Absent(Absence::Closed)));
        }
        let mut c = Cleanup {
            session: self.conn.or(self.seen),
            ..Cleanup::default()
        };
        let lifetime = if self.is_ttl() {
            Lifetime::Durable
        } else {
            Lifetime::Ephemeral
        };
        if let Some((path, session)) = self.node.take() {
            // Only what is ours: a TTL node, or an ephemeral of the session we hold.
            if self.is_ttl() || Some(session) == c.session {
                c.delete.push((path, lifetime));
            }
        } else if self.seen.is_some() {
            // The node is not known, but a create may have landed (its answer lost in
            // a suspension, or still to come): a fixed path is read and deleted only if
            // our session owns it; a protected name is found by its prefix.
            if self.is_sequential() {
                c.find = Some(self.prefix());
            } else {
                c.verify = Some(self.cfg.path.clone());
            }
        }
        if let Step::Creating { op } = self.step {
            c.create = Some(op);
        }
        // Sequential nodes of dead sessions: they die anyway, but may linger after a
        // client-side LOST; deleting them is harmless (their names are ours alone).
        for path in std::mem::take(&mut self.stale_nodes) {
            c.delete.push((path, Lifetime::Durable));
        }
        self.step = Step::Idle;
        self.closing = Some(c);
        self.progress_cleanup(0, out);
    }

    /// Issue what can be issued now; end once nothing is left.
    fn progress_cleanup(&mut self, _now_ms: u64, out: &mut Vec<Output<NodeEvent>>) {
        let Some(mut c) = self.closing.take() else {
            return;
        };
        if self.conn.is_some() && c.retry.is_none() {
            for (path, life) in std::mem::take(&mut c.delete) {
                let id = self.ids.call(
                    Call::Delete {
                        path: path.clone(),
                        version: -1,
                    },
                    out,
                );
                c.inflight.push((id, CleanupCall::Delete(path, life)));
            }
            if let Some(path) = c.verify.take() {
                let id = self.ids.call(
                    Call::GetData {
                        path: path.clone(),
                        watch: false,
                    },
                    out,
                );
                c.inflight.push((id, CleanupCall::Verify(path)));
            }
            if let Some(prefix) = c.find.take() {
                let id = self.ids.call(
                    Call::Children {
                        path: self.parent().to_owned(),
                        watch: false,
                    },
                    out,
                );
                c.inflight.push((id, CleanupCall::Find(prefix)));
            }
        }
        let done = c.delete.is_empty()
            && c.verify.is_none()
            && c.find.is_none()
            && c.create.is_none()
            && c.inflight.is_empty();
        self.closing = Some(c);
        if done {
            self.end(out);
        }
    }

    /// The session at close is gone: its ephemerals died with it; what outlives it (a
    /// TTL node) is still to be removed on the next session.
    fn cleanup_session_gone(&mut self) {
        let ttl = self.is_ttl();
        let path = self.cfg.path.clone();
        let Some(c) = self.closing.as_mut() else {
            return;
        };
        c.session = None;
        c.retry = None;
        let create_pending = c.create.take().is_some();
        for (_, call) in std::mem::take(&mut c.inflight) {
            match call {
                CleanupCall::Delete(p, Lifetime::Durable) => c.delete.push((p, Lifetime::Durable)),
                CleanupCall::Verify(p) if ttl => c.verify = Some(p),
                CleanupCall::Delete(_, Lifetime::Ephemeral)
                | CleanupCall::Verify(_)
                | CleanupCall::Find(_) => {}
            }
        }
        c.delete.retain(|(_, life)| *life == Lifetime::Durable);
        c.find = None;
        if !ttl {
            c.verify = None;
        } else if create_pending {
            c.verify = Some(path);
        }
    }

    fn on_closing_input(
        &mut self,
        now_ms: u64,
        input: Input<NodeCommand>,
        out: &mut Vec<Output<NodeEvent>>,
    ) {
        match input {
            Input::Conn(state) => match state {
                ConnectionState::Connected { session }
                | ConnectionState::Reconnected { session } => {
                    let same = self.closing.as_ref().and_then(|c| c.session) == Some(session);
                    if !same {
                        self.cleanup_session_gone();
                    }
                    self.conn = Some(session);
                    if let Some(c) = self.closing.as_mut() {
                        // Whatever was in flight on the old connection is answered (or
                        // lost) there; re-issue it.
                        for (_, call) in std::mem::take(&mut c.inflight) {
                            match call {
                                CleanupCall::Delete(p, l) => c.delete.push((p, l)),
                                CleanupCall::Verify(p) => c.verify = Some(p),
                                CleanupCall::Find(p) => c.find = Some(p),
                            }
                        }
                        c.retry = None;
                    }
                }
                ConnectionState::Suspended | ConnectionState::ReadOnly { .. } => {
                    self.conn = None;
                }
                ConnectionState::Lost => {
                    self.conn = None;
                    self.cleanup_session_gone();
                }
            },
            Input::Done { id, reply } => self.on_cleanup_done(now_ms, id, reply, out),
            Input::Timer { id } => {
                if let Some(c) = self.closing.as_mut() {
                    if c.retry == Some(id) {
                        c.retry = None;
                    }
                }
            }
            Input::Start
            | Input::Close
            | Input::Fired { .. }
            | Input::Event { .. }
            | Input::StreamEnded { .. }
            | Input::Command(_) => {}
        }
        self.progress_cleanup(now_ms, out);
    }

    fn on_cleanup_done(
        &mut self,
        now_ms: u64,
        id: OpId,
        reply: Reply,
        out: &mut Vec<Output<NodeEvent>>,
    ) {
        let Some(mut c) = self.closing.take() else {
            return;
        };
        let mut failed = false;
        if c.create == Some(id) {
            c.create = None;
            match reply {
                Reply::Created(Ok((path, _))) => c.delete.push((
                    path,
                    if self.is_ttl() {
                        Lifetime::Durable
                    } else {
                        Lifetime::Ephemeral
                    },
                )),
                Reply::Created(Err(e)) if e.is_connection_loss() => {
                    if self.is_sequential() {
                        c.find = Some(self.prefix());
                    } else {
                        c.verify = Some(self.cfg.path.clone());
                    }
                }
                _ => {}
            }
        } else if let Some(i) = c.inflight.iter().position(|(k, _)| *k == id) {
            let (_, call) = c.inflight.remove(i);
            match (call, reply) {
                (CleanupCall::Delete(..), Reply::Deleted(Ok(()) | Err(Error::NoNode { .. }))) => {}
                (CleanupCall::Delete(p, l), Reply::Deleted(Err(e))) if retryable(&e) => {
                    c.delete.push((p, l));
                    failed = true;
                }
                (CleanupCall::Delete(p, _), Reply::Deleted(Err(e))) => {
                    tracing::warn!(path = %p, error = %e, "could not delete the node on close");
                }
                (CleanupCall::Verify(p), Reply::Data(Ok((_, stat)))) => {
                    if c.session.is_some() && Some(stat.ephemeral_owner) == c.session {
                        let id = self.ids.call(
                            Call::Delete {
                                path: p.clone(),
                                version: stat.version,
                            },
                            out,
                        );
                        c.inflight
                            .push((id, CleanupCall::Delete(p, Lifetime::Ephemeral)));
                    } else if self.is_ttl() {
                        c.delete.push((p, Lifetime::Durable));
                    }
                }
                (CleanupCall::Verify(_), Reply::Data(Err(Error::NoNode { .. }))) => {}
                (CleanupCall::Verify(p), Reply::Data(Err(e))) if retryable(&e) => {
                    c.verify = Some(p);
                    failed = true;
                }
                (CleanupCall::Find(prefix), Reply::Children(Ok(children))) => {
                    for child in children.iter().filter(|n| n.starts_with(&prefix)) {
                        c.delete
                            .push((join_path(self.parent(), child), Lifetime::Ephemeral));
                    }
                }
                (CleanupCall::Find(_), Reply::Children(Err(Error::NoNode { .. }))) => {}
                (CleanupCall::Find(prefix), Reply::Children(Err(e))) if retryable(&e) => {
                    c.find = Some(prefix);
                    failed = true;
                }
                (call, reply) => {
                    tracing::warn!(?call, ?reply, "cleanup after close gave up");
                }
            }
        }
        if failed && self.conn.is_some() && c.retry.is_none() {
            let delay = self.backoff.next_delay_ms();
            c.retry = Some(self.ids.timer(now_ms + delay, out));
        }
        self.closing = Some(c);
    }

    fn on_command(&mut self, c: NodeCommand, out: &mut Vec<Output<NodeEvent>>) {
        match c {
            NodeCommand::SetData(data) => {
                self.cfg.data = data;
                if let (Step::Present { .. }, Some((path, _))) = (self.step, self.node.clone()) {
                    self.set_data(path, out);
                }
            }
        }
    }
}

/// Errors after which a cleanup call is worth repeating on the next connection.
fn retryable(e: &Error) -> bool {
    e.is_connection_loss() || matches!(e, Error::SessionExpired)
}

impl Machine for NodeMachine {
    type Command = NodeCommand;
    type Event = NodeEvent;

    fn step(&mut self, now_ms: u64, input: Input<NodeCommand>) -> Vec<Output<NodeEvent>> {
        let mut out = Vec::new();
        if self.step == Step::Ended {
            return out;
        }
        if self.closing.is_some() {
            self.on_closing_input(now_ms, input, &mut out);
            return out;
        }
        match input {
            Input::Start => {
                if !self.started {
                    self.started = true;
                    if let Some(s) = self.conn {
                        self.seen = None;
                        self.on_conn(ConnectionState::Connected { session: s }, &mut out);
                    }
                }
            }
            Input::Close => self.on_close(&mut out),
            Input::Conn(state) => self.on_conn(state, &mut out),
            Input::Done { id, reply } => self.on_done(now_ms, id, reply, &mut out),
            Input::Fired { id } => self.on_fired(id, &mut out),
            // No persistent watches here.
            Input::Event { .. } | Input::StreamEnded { .. } => {}
            Input::Timer { id } => self.on_timer(now_ms, id, &mut out),
            Input::Command(c) => self.on_command(c, &mut out),
        }
        out
    }
}

/// A node kept on the server across session loss (see the module docs).
///
/// ```no_run
/// # async fn demo<O: rzk_election_client::recipe::RecipeOps>(client: std::sync::Arc<O>) {
/// use rzk_election_client::recipe::{NodeConfig, PersistentNode};
/// let mut node = PersistentNode::start(client, NodeConfig::ephemeral("/services/api/host-1", "10.0.0.1:8080"));
/// let path = node.wait_present().await.expect("registered");
/// println!("registered at {path}");
/// node.close().await; // deleted
/// # }
/// ```
#[derive(Debug)]
pub struct PersistentNode {
    running: Running<NodeMachine>,
    current: watch::Receiver<Option<String>>,
}

impl PersistentNode {
    /// Start keeping the node (created once the client is connected).
    pub fn start<O: RecipeOps>(ops: Arc<O>, cfg: NodeConfig) -> PersistentNode {
        let (tx, rx) = watch::channel(None);
        let running = Running::spawn_with(ops, NodeMachine::new(cfg), move |e: &NodeEvent| {
            match e {
                NodeEvent::Present { path, .. } => tx.send_replace(Some(path.clone())),
                NodeEvent::Absent(_) => tx.send_replace(None),
            };
        });
        PersistentNode {
            running,
            current: rx,
        }
    }

    /// The node's path while it is proven present.
    pub fn path(&self) -> Option<String> {
        self.current.borrow().clone()
    }

    /// Wait until the node is present; its path.
    pub async fn wait_present(&mut self) -> crate::Result<String> {
        let mut current = self.current.clone();
        let p = current
            .wait_for(|p| p.is_some())
            .await
            .map_err(|_| Error::Closed)?;
        p.clone().ok_or(Error::Closed)
    }

    /// The next report, in order; `None` once closed and drained.
    pub async fn next_event(&mut self) -> Option<NodeEvent> {
        self.running.events.recv().await
    }

    /// Replace the data, now and for every re-creation.
    pub fn set_data(&self, data: impl Into<Bytes>) {
        self.running.command(NodeCommand::SetData(data.into()));
    }

    /// Delete the node and stop. Idempotent.
    pub async fn close(&self) {
        self.running.close().await;
    }
}

#[cfg(test)]
#[path = "persistent_node_tests.rs"]
mod tests;

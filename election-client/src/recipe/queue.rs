//! The queue machine behind [`ReadWriteLock`](super::ReadWriteLock) and
//! [`Semaphore`](super::Semaphore): one protected ephemeral-sequential node under a lock
//! path, admitted by an [`Admission`] rule over the nodes queued before it.
//!
//! Nodes are ordered by their sequence number, and a new node always queues behind every
//! existing one. Each rule only looks at the nodes *before* a node, so a node that is
//! admitted stays admitted while it exists, whatever the interleaving:
//! - [`Admission::First`] (a writer): no node of any kind before it; it watches its
//!   immediate predecessor (one waiter woken per departure).
//! - [`Admission::NoneBefore`] (a reader): no node named `blocker` (a writer) before it;
//!   it watches the nearest such node.
//! - [`Admission::Within`] (a lease of a semaphore of `n`): fewer than `n` nodes before
//!   it; it watches the lock path's children (any departure before it may admit it).
//!
//! # The lifecycle (ARCHITECTURE.md I5; docs/recipes.md, "The lifecycle")
//! - A grant needs proof on the current session: admitted in a listing **and** a read of
//!   the node showing `ephemeralOwner == current session` (CURATOR-696). Then, with
//!   [`Fence::Bump`], the epoch znode is incremented by a multi that also checks the node
//!   exists (a [`FencingToken`] no other grant shares); with [`Fence::Observe`] the epoch
//!   is read (the token of the last fenced writer before this grant).
//! - `SUSPENDED` / `READ_ONLY`: revoked at once ([`Revoked::Suspended`]); the node is kept.
//!   `RECONNECTED` on the same session: the same node is re-proven (and re-fenced).
//! - `LOST` while granted (or after a grant): revoked ([`Revoked::Lost`]) and the machine
//!   ends: the holder acquires again. `LOST` while waiting: the old node is retired
//!   (deleted once connected) and a fresh one queued on the next session.
//! - `NONODE` on a create, a listing or the epoch is retried (parents recreated as
//!   containers), never ignored (CURATOR-724); every failure is retried with backoff;
//!   while started and connected something is always pending.
//! - Release and close delete the node; a create answered after that is deleted too
//!   (CURATOR-18), a create whose answer was lost is found by its protected prefix.
//!
//! [`FencingToken`]: crate::FencingToken

use bytes::Bytes;

use super::engine::{Backoff, Call, Ids, Input, Machine, Output, Reply};
pub use super::fence::Fence;
use super::fence::FenceNext;
use super::ids::{join_path, OpId};
use super::position::{Grant, Listed, Position, Proof, Revoked, Step, Then};
use crate::error::Error;
use crate::state::ConnectionState;
use crate::types::{FencingToken, SessionId, Stat};

/// When a queued node is admitted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Admission {
    /// No node before it (an exclusive holder: a writer, a mutex).
    First,
    /// No node whose name contains `blocker` before it (a reader, blocked by writers).
    NoneBefore {
        /// The name of the nodes that block (`write-`).
        blocker: String,
    },
    /// Fewer than `n` nodes before it (a lease of a semaphore of `n`).
    Within {
        /// The number of leases.
        n: u32,
    },
}

/// Settings of a [`QueueMachine`].
#[derive(Debug, Clone)]
pub struct QueueConfig {
    /// The lock path (created as a container if missing).
    pub path: String,
    /// The node name before the sequence number (`write-`, `read-`, `lease-`).
    pub name: String,
    /// The admission rule.
    pub admission: Admission,
    /// The node's data.
    pub data: Bytes,
    /// Fencing.
    pub fence: Fence,
    /// First retry delay, ms.
    pub backoff_min_ms: u64,
    /// Largest retry delay, ms.
    pub backoff_max_ms: u64,
    /// Re-check the position this long after each evaluation (repairs a lost watch).
    pub recheck_ms: u64,
    /// Makes the protected prefix unique and seeds the jitter.
    pub nonce: u64,
}

impl QueueConfig {
    /// A queue node `name` under `path`, admitted by `admission`, unfenced.
    pub fn new(
        path: impl Into<String>,
        name: impl Into<String>,
        admission: Admission,
        nonce: u64,
    ) -> QueueConfig {
        QueueConfig {
            path: path.into(),
            name: name.into(),
            admission,
            data: Bytes::new(),
            fence: Fence::None,
            backoff_min_ms: 20,
            backoff_max_ms: 2_000,
            recheck_ms: 10_000,
            nonce,
        }
    }
}

/// What a [`QueueMachine`] reports, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum QueueEvent {
    /// Admitted and proven on the current session (and fenced, if configured).
    Granted(Grant),
    /// The grant reported before is gone. Exactly one per `Granted`.
    Revoked(Revoked),
}

/// Commands to a [`QueueMachine`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum QueueCommand {
    /// Give the grant back (or stop waiting): delete the node and end.
    Release,
}

/// Cleanup after release or close; while there is one, the machine is closing: it
/// removes its node before ending.
#[derive(Debug, Default)]
struct Cleanup {
    /// The session whose nodes are ours; once it is gone they died with it.
    session: Option<SessionId>,
    /// The released position's protected prefix.
    prefix: Option<String>,
    delete: Vec<String>,
    /// List the lock path for `prefix` (a create whose answer was lost may have landed).
    find: bool,
    /// The create in flight at release; its answer says what to delete.
    create: Option<OpId>,
    inflight: Vec<(OpId, CleanupCall)>,
    /// A retry timer after a failed call.
    retry: Option<OpId>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum CleanupCall {
    Delete(String),
    Find,
}

/// The queue state machine (see the module docs). Public so its transitions can be
/// tested and driven without a server.
#[derive(Debug)]
pub struct QueueMachine {
    cfg: QueueConfig,
    ids: Ids,
    backoff: Backoff,
    started: bool,
    /// The session while connected read-write.
    conn: Option<SessionId>,
    /// Our node: its attempt, and the retired ones still to clean up.
    pos: Position,
    step: Step,
    granted: Option<Grant>,
    /// This position has been granted once (a later loss ends the machine).
    was_granted: bool,
    cleanup: Option<Cleanup>,
}

impl QueueMachine {
    /// A machine for `cfg`, not started.
    pub fn new(cfg: QueueConfig) -> QueueMachine {
        let backoff = Backoff::new(cfg.backoff_min_ms, cfg.backoff_max_ms, cfg.nonce);
        let pos = Position::new(
            cfg.path.clone(),
            cfg.name.clone(),
            cfg.data.clone(),
            cfg.nonce,
        );
        QueueMachine {
            cfg,
            ids: Ids::default(),
            backoff,
            started: false,
            conn: None,
            pos,
            step: Step::Idle,
            granted: None,
            was_granted: false,
            cleanup: None,
        }
    }

    /// The grant currently held.
    pub fn granted(&self) -> Option<&Grant> {
        self.granted.as_ref()
    }

    /// True once ended.
    pub fn is_ended(&self) -> bool {
        self.step == Step::Ended
    }

    /// The full path of the current node, if known.
    pub fn node_path(&self) -> Option<String> {
        self.pos.node_path()
    }

    /// The "never idle" check: false would mean started, connected and stuck.
    pub fn is_progressing(&self) -> bool {
        self.cleanup.is_some() || self.step.is_progressing(self.started, self.conn.is_some())
    }

    // ----- inputs --------------------------------------------------------------------

    fn on_conn(&mut self, state: ConnectionState, out: &mut Vec<Output<QueueEvent>>) {
        match state {
            ConnectionState::Connected { session } | ConnectionState::Reconnected { session } => {
                self.conn = Some(session);
                // A position from another session never carries over (I5); LOST always
                // comes first, this covers a missed one.
                if self.pos.current().is_some_and(|a| a.session != session) {
                    self.lost(out);
                    if self.step == Step::Ended {
                        return;
                    }
                }
                self.flush_stale(out);
                if !self.started {
                    return;
                }
                match self.pos.current() {
                    // Same session: the same node, re-proven (CURATOR-645: no reset).
                    Some(_) => self.list(out),
                    None => self.join(out),
                }
            }
            ConnectionState::Suspended | ConnectionState::ReadOnly { .. } => {
                // Stop acting at once; a read-only server cannot fence.
                self.conn = None;
                self.revoke(Revoked::Suspended, out);
                self.step = Step::Idle;
            }
            ConnectionState::Lost => {
                self.conn = None;
                self.lost(out);
                if self.step != Step::Ended {
                    self.step = Step::Idle;
                }
            }
        }
    }

    /// The session of the current position is gone.
    fn lost(&mut self, out: &mut Vec<Output<QueueEvent>>) {
        let had = self.revoke(Revoked::Lost, out) || self.was_granted;
        self.pos.retire();
        if had && self.started {
            // A lock lost with its session is gone for good: the holder acquires again.
            self.end(out);
        }
    }

    fn on_done(&mut self, now_ms: u64, id: OpId, reply: Reply, out: &mut Vec<Output<QueueEvent>>) {
        if !self.step.waits_for(id) {
            self.on_stale(reply, out);
            return;
        }
        match (self.step, reply) {
            (Step::Creating { .. }, Reply::Created(r)) => self.on_created(now_ms, r, out),
            (Step::Listing { .. }, Reply::Children(r)) => self.on_children(now_ms, r, out),
            (Step::Waiting { .. }, Reply::Children(r)) => self.on_children(now_ms, r, out),
            (Step::Waiting { .. }, Reply::Data(r)) => match r {
                Ok(_) => self.arm(now_ms, out),
                // The predecessor is already gone: re-list (CURATOR-645: no reset).
                Err(Error::NoNode { .. }) => self.list(out),
                Err(_) => self.backoff(now_ms, Then::List, out),
            },
            (Step::Verifying { .. }, Reply::Data(r)) => self.on_verified(now_ms, r, out),
            (Step::Holding { .. }, Reply::Data(r)) => match r {
                Ok(_) => self.arm(now_ms, out),
                // Our node vanished while held: the grant is gone.
                Err(Error::NoNode { .. }) => {
                    self.revoke(Revoked::NotProven, out);
                    self.node_gone(out);
                }
                Err(_) => self.backoff(now_ms, Then::List, out),
            },
            (Step::Fencing { step, .. }, reply) => {
                let next = self
                    .cfg
                    .fence
                    .on_reply(step, || self.pos.node_path(), reply);
                self.fence(now_ms, next, out);
            }
            // A reply of the wrong shape cannot happen; start the evaluation over.
            (_, _) => self.backoff(now_ms, Then::List, out),
        }
    }

    fn on_fired(&mut self, id: OpId, out: &mut Vec<Output<QueueEvent>>) {
        match self.step {
            Step::Waiting { watch, .. } | Step::Holding { watch, .. } if watch == id => {
                self.list(out)
            }
            _ => {}
        }
    }

    fn on_timer(&mut self, id: OpId, out: &mut Vec<Output<QueueEvent>>) {
        match self.step {
            Step::Backoff { timer, then } if timer == id => match then {
                Then::Create => self.create(out),
                Then::List => self.list(out),
            },
            // The self-check: re-list even without an event.
            Step::Waiting {
                watch,
                timer: Some(timer),
            }
            | Step::Holding {
                watch,
                timer: Some(timer),
            } if timer == id => {
                out.push(Output::Unwatch { id: watch });
                self.list(out);
            }
            _ => {}
        }
    }

    fn on_stale(&mut self, reply: Reply, out: &mut Vec<Output<QueueEvent>>) {
        // A create that succeeded after its attempt was given up leaves a node nobody
        // owns: delete it (CURATOR-18, CURATOR-498). One of the current position is
        // adopted by the next listing through its prefix.
        let Reply::Created(Ok((path, _))) = reply else {
            return;
        };
        if !self.pos.owns_late_create(&path, self.conn) {
            self.ids.call(Call::Delete { path, version: -1 }, out);
        }
    }

    fn on_created(
        &mut self,
        now_ms: u64,
        r: crate::Result<(String, Stat)>,
        out: &mut Vec<Output<QueueEvent>>,
    ) {
        match self.pos.on_created(r) {
            Ok(()) => self.list(out),
            Err(then) => self.backoff(now_ms, then, out),
        }
    }

    fn on_children(
        &mut self,
        now_ms: u64,
        r: crate::Result<Vec<String>>,
        out: &mut Vec<Output<QueueEvent>>,
    ) {
        let (listed, stale) = self.pos.on_listed(r);
        for path in stale {
            self.ids.call(Call::Delete { path, version: -1 }, out);
        }
        let (me, children) = match listed {
            Listed::Found { me, children } => (me, children),
            Listed::Missing => return self.create(out),
            // The lock path is gone, and our node with it (CURATOR-724).
            Listed::ParentGone => {
                self.revoke(Revoked::NotProven, out);
                return self.node_gone(out);
            }
            Listed::Failed => return self.backoff(now_ms, Then::List, out),
            Listed::NoAttempt => return,
        };
        let queue = sorted(&children);
        let Some(pos) = queue.iter().position(|c| *c == me) else {
            // Our node is gone (deleted, or its session ended).
            self.revoke(Revoked::NotProven, out);
            self.node_gone(out);
            return;
        };
        let before = &queue[..pos];
        let blocker: Option<&str> = match &self.cfg.admission {
            Admission::First => before.last().map(|s| s.as_str()),
            Admission::NoneBefore { blocker } => before
                .iter()
                .rev()
                .find(|c| c.contains(blocker.as_str()) || !is_known_name(c))
                .map(|s| s.as_str()),
            Admission::Within { n } => {
                if before.len() < *n as usize {
                    None
                } else {
                    Some("")
                }
            }
        };
        let Some(blocker) = blocker else {
            if let Step::Waiting { watch, .. } = self.step {
                out.push(Output::Unwatch { id: watch });
            }
            let path = self.pos.child_path(&me);
            let op = self.ids.call(Call::GetData { path, watch: false }, out);
            self.step = Step::Verifying { op };
            return;
        };
        // Not admitted: any grant is not proven any more (CURATOR-653).
        self.revoke(Revoked::NotProven, out);
        if self.was_granted {
            // Cannot happen (nodes only queue behind us); if it does, the lock is not ours.
            self.node_gone(out);
            return;
        }
        if let Step::Waiting { timer: None, .. } = self.step {
            // This listing was the one that armed the children watch: keep it.
            self.arm(now_ms, out);
            return;
        }
        let call = match self.cfg.admission {
            Admission::Within { .. } => self.pos.list_call(true),
            Admission::First | Admission::NoneBefore { .. } => Call::GetData {
                path: self.pos.child_path(blocker),
                watch: true,
            },
        };
        let watch = self.ids.call(call, out);
        self.step = Step::Waiting { watch, timer: None };
    }

    fn on_verified(
        &mut self,
        now_ms: u64,
        r: crate::Result<(Bytes, Stat)>,
        out: &mut Vec<Output<QueueEvent>>,
    ) {
        match self.pos.prove(self.conn, &r) {
            Proof::Owned => {}
            Proof::Gone => {
                self.revoke(Revoked::NotProven, out);
                self.node_gone(out);
                return;
            }
            // CURATOR-696: the position proves nothing about the session.
            Proof::Foreign => {
                self.revoke(Revoked::NotProven, out);
                self.join(out);
                return;
            }
            Proof::Retry => {
                self.backoff(now_ms, Then::List, out);
                return;
            }
        }
        if self.granted.is_some() {
            // Still proven (a watch event or self-check): keep the grant and its token.
            self.hold(out);
            return;
        }
        let next = self.cfg.fence.start();
        self.fence(now_ms, next, out);
    }

    /// Carry out the next fencing step.
    fn fence(&mut self, now_ms: u64, next: FenceNext, out: &mut Vec<Output<QueueEvent>>) {
        match next {
            FenceNext::Call(call, step) => {
                let op = self.ids.call(call, out);
                self.step = Step::Fencing { op, step };
            }
            FenceNext::Grant(token) => self.grant(token, out),
            FenceNext::NodeGone => {
                self.revoke(Revoked::NotProven, out);
                self.node_gone(out);
            }
            // Moved (another holder of the same epoch znode fenced in between), or
            // anything else: evaluate again after a pause.
            FenceNext::Retry => self.backoff(now_ms, Then::List, out),
        }
    }

    // ----- actions -------------------------------------------------------------------

    /// A new position on the current session.
    fn join(&mut self, out: &mut Vec<Output<QueueEvent>>) {
        let Some(session) = self.conn else {
            self.step = Step::Idle;
            return;
        };
        self.pos.join(session);
        self.create(out);
    }

    /// Our node is gone while the session lives.
    fn node_gone(&mut self, out: &mut Vec<Output<QueueEvent>>) {
        self.pos.forget();
        if self.was_granted {
            self.end(out);
            return;
        }
        self.join(out);
    }

    fn create(&mut self, out: &mut Vec<Output<QueueEvent>>) {
        let Some(call) = self.pos.create_call() else {
            self.join(out);
            return;
        };
        let op = self.ids.call(call, out);
        self.step = Step::Creating { op };
    }

    fn list(&mut self, out: &mut Vec<Output<QueueEvent>>) {
        if self.pos.current().is_none() {
            self.join(out);
            return;
        }
        // A lease may be admitted by any departure before it: its listing also arms the
        // children watch it waits on (dropped again if it is admitted).
        let watch = matches!(self.cfg.admission, Admission::Within { .. });
        let op = self.ids.call(self.pos.list_call(watch), out);
        self.step = if watch {
            Step::Waiting {
                watch: op,
                timer: None,
            }
        } else {
            Step::Listing { op }
        };
    }

    /// The watch of `Waiting`/`Holding` is armed: start the self-check timer.
    fn arm(&mut self, now_ms: u64, out: &mut Vec<Output<QueueEvent>>) {
        self.backoff.reset();
        let t = self.ids.timer(now_ms + self.cfg.recheck_ms.max(1), out);
        self.step.set_recheck(t);
    }

    fn hold(&mut self, out: &mut Vec<Output<QueueEvent>>) {
        let Some(path) = self.node_path() else {
            return;
        };
        let watch = self.ids.call(Call::GetData { path, watch: true }, out);
        self.step = Step::Holding { watch, timer: None };
    }

    fn grant(&mut self, token: Option<FencingToken>, out: &mut Vec<Output<QueueEvent>>) {
        let (Some(session), Some(node)) = (self.conn, self.node_path()) else {
            return;
        };
        self.was_granted = true;
        let grant = Grant {
            node,
            session,
            token,
        };
        self.granted = Some(grant.clone());
        out.push(Output::Emit(QueueEvent::Granted(grant)));
        self.hold(out);
    }

    fn revoke(&mut self, why: Revoked, out: &mut Vec<Output<QueueEvent>>) -> bool {
        if self.granted.take().is_some() {
            out.push(Output::Emit(QueueEvent::Revoked(why)));
            return true;
        }
        false
    }

    fn backoff(&mut self, now_ms: u64, then: Then, out: &mut Vec<Output<QueueEvent>>) {
        let delay = self.backoff.next_delay_ms();
        let timer = self.ids.timer(now_ms + delay, out);
        self.step = Step::Backoff { timer, then };
    }

    fn flush_stale(&mut self, out: &mut Vec<Output<QueueEvent>>) {
        if self.conn.is_none() {
            return;
        }
        for path in self.pos.take_stale_nodes() {
            self.ids.call(Call::Delete { path, version: -1 }, out);
        }
    }

    fn end(&mut self, out: &mut Vec<Output<QueueEvent>>) {
        if self.step != Step::Ended {
            self.step = Step::Ended;
            out.push(Output::Ended);
        }
    }

    // ----- release and close ---------------------------------------------------------

    /// Give the position up: revoke (as `why`), delete the node, then end.
    fn release(&mut self, why: Revoked, out: &mut Vec<Output<QueueEvent>>) {
        self.revoke(why, out);
        let mut c = Cleanup::default();
        if let Some(attempt) = self.pos.take() {
            // Only while that session can still be ours; on another one the node died.
            if self.conn.is_none() || self.conn == Some(attempt.session) {
                c.session = Some(attempt.session);
                match attempt.node {
                    Some(node) => c.delete.push(self.pos.child_path(&node)),
                    // A create may have landed with its answer lost: find it by prefix.
                    None => c.find = true,
                }
                c.prefix = Some(attempt.prefix);
                if let Step::Creating { op } = self.step {
                    c.create = Some(op);
                }
            }
        }
        c.delete.append(&mut self.pos.take_stale_nodes());
        self.cleanup = Some(c);
        // Whatever was pending is stale now: only the cleanup's calls count.
        self.step = Step::Idle;
        self.progress_cleanup(out);
    }

    fn progress_cleanup(&mut self, out: &mut Vec<Output<QueueEvent>>) {
        let Some(mut c) = self.cleanup.take() else {
            return;
        };
        if self.conn.is_some() && c.retry.is_none() {
            for path in std::mem::take(&mut c.delete) {
                let id = self.ids.call(
                    Call::Delete {
                        path: path.clone(),
                        version: -1,
                    },
                    out,
                );
                c.inflight.push((id, CleanupCall::Delete(path)));
            }
            let finding = c.inflight.iter().any(|(_, k)| *k == CleanupCall::Find);
            if c.find && !finding {
                let id = self.ids.call(
                    Call::Children {
                        path: self.cfg.path.clone(),
                        watch: false,
                    },
                    out,
                );
                c.inflight.push((id, CleanupCall::Find));
            }
        }
        let done = c.delete.is_empty() && !c.find && c.create.is_none() && c.inflight.is_empty();
        self.cleanup = Some(c);
        if done {
            self.end(out);
        }
    }

    fn on_closing_input(
        &mut self,
        now_ms: u64,
        input: Input<QueueCommand>,
        out: &mut Vec<Output<QueueEvent>>,
    ) {
        match input {
            Input::Conn(state) => match state {
                ConnectionState::Connected { session }
                | ConnectionState::Reconnected { session } => {
                    self.conn = Some(session);
                    let same = self.cleanup.as_ref().and_then(|c| c.session) == Some(session);
                    let c = self.cleanup.get_or_insert_with(Cleanup::default);
                    if same {
                        // What was in flight on the old connection: issue it again.
                        for (_, call) in std::mem::take(&mut c.inflight) {
                            match call {
                                CleanupCall::Delete(p) => c.delete.push(p),
                                CleanupCall::Find => c.find = true,
                            }
                        }
                        c.retry = None;
                    } else {
                        // Another session: the old one's ephemerals died with it.
                        *c = Cleanup::default();
                    }
                }
                ConnectionState::Suspended | ConnectionState::ReadOnly { .. } => self.conn = None,
                ConnectionState::Lost => {
                    self.conn = None;
                    self.cleanup = Some(Cleanup::default());
                }
            },
            Input::Done { id, reply } => self.on_cleanup_done(now_ms, id, reply, out),
            Input::Timer { id } => {
                if let Some(c) = self.cleanup.as_mut() {
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
        self.progress_cleanup(out);
    }

    fn on_cleanup_done(
        &mut self,
        now_ms: u64,
        id: OpId,
        reply: Reply,
        out: &mut Vec<Output<QueueEvent>>,
    ) {
        let path = self.cfg.path.clone();
        let Some(c) = self.cleanup.as_mut() else {
            return;
        };
        let mut failed = false;
        if c.create == Some(id) {
            c.create = None;
            match reply {
                Reply::Created(Ok((p, _))) => c.delete.push(p),
                Reply::Created(Err(e)) if e.is_connection_loss() => c.find = true,
                _ => {}
            }
        } else if let Some(i) = c.inflight.iter().position(|(k, _)| *k == id) {
            let (_, call) = c.inflight.remove(i);
            match (call, reply) {
                (CleanupCall::Delete(_), Reply::Deleted(Ok(()) | Err(Error::NoNode { .. }))) => {}
                (CleanupCall::Delete(p), Reply::Deleted(Err(e))) if e.is_connection_loss() => {
                    c.delete.push(p);
                    failed = true;
                }
                (CleanupCall::Find, Reply::Children(Ok(children))) => {
                    c.find = false;
                    if let Some(prefix) = &c.prefix {
                        for child in children.iter().filter(|n| n.starts_with(prefix.as_str())) {
                            c.delete.push(join_path(&path, child));
                        }
                    }
                }
                (CleanupCall::Find, Reply::Children(Err(e))) if e.is_connection_loss() => {
                    failed = true
                }
                (call, reply) => {
                    tracing::warn!(?call, ?reply, "queue cleanup gave up");
                    if call == CleanupCall::Find {
                        c.find = false;
                    }
                }
            }
        } else if let Reply::Created(Ok((p, _))) = reply {
            // A stale create of an earlier position: delete what it made.
            c.delete.push(p);
        }
        if failed && c.retry.is_none() {
            let delay = self.backoff.next_delay_ms();
            let t = self.ids.timer(now_ms + delay, out);
            if let Some(c) = self.cleanup.as_mut() {
                c.retry = Some(t);
            }
        }
    }
}

impl Machine for QueueMachine {
    type Command = QueueCommand;
    type Event = QueueEvent;

    fn step(&mut self, now_ms: u64, input: Input<QueueCommand>) -> Vec<Output<QueueEvent>> {
        let mut out = Vec::new();
        if self.step == Step::Ended {
            return out;
        }
        if self.cleanup.is_some() {
            self.on_closing_input(now_ms, input, &mut out);
            return out;
        }
        match input {
            Input::Start => {
                if !self.started {
                    self.started = true;
                    if self.conn.is_some() {
                        self.join(&mut out);
                    }
                }
            }
            Input::Close => self.release(Revoked::Closed, &mut out),
            Input::Command(QueueCommand::Release) => self.release(Revoked::Released, &mut out),
            Input::Conn(state) => self.on_conn(state, &mut out),
            Input::Done { id, reply } => self.on_done(now_ms, id, reply, &mut out),
            Input::Fired { id } => self.on_fired(id, &mut out),
            Input::Event { .. } | Input::StreamEnded { .. } => {}
            Input::Timer { id } => self.on_timer(id, &mut out),
        }
        out
    }
}

/// The children in queue order: by the 10-digit sequence suffix ZooKeeper appends, then
/// by name. Children without one (not queue nodes) are left out.
fn sorted(children: &[String]) -> Vec<String> {
    let mut q: Vec<(&str, &String)> = children
        .iter()
        .filter_map(|c| sequence(c).map(|s| (s, c)))
        .collect();
    q.sort();
    q.into_iter().map(|(_, c)| c.clone()).collect()
}

/// The sequence suffix of a queue node: its last 10 characters, all digits.
fn sequence(name: &str) -> Option<&str> {
    let s = name.get(name.len().checked_sub(10)?..)?;
    s.bytes().all(|b| b.is_ascii_digit()).then_some(s)
}

/// Queue nodes whose kind this crate knows; anything else blocks readers (a writer of
/// another kind is the conservative guess).
fn is_known_name(name: &str) -> bool {
    name.contains(super::rwlock::READ_NAME)
        || name.contains(super::rwlock::WRITE_NAME)
        || name.contains(super::rwlock::LEASE_NAME)
}

#[cfg(test)]
#[path = "queue_tests.rs"]
mod tests;

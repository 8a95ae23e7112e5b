//! [`Barrier`] (Curator's `DistributedBarrier`) and [`DoubleBarrier`] (Curator's
//! `DistributedDoubleBarrier`, the double barrier of the ZooKeeper recipes page).
//!
//! # Barrier
//! A persistent node at the barrier path: [`Barrier::set`] creates it,
//! [`Barrier::remove`] deletes it, [`Barrier::wait`] returns once it does not exist.
//! Waiting survives every connection state: while `SUSPENDED` it waits; on `RECONNECTED`
//! (same session or a new one, whose watches are new) it checks again with a fresh
//! `exists` watch, so a removal during the outage is not missed. `set` and `remove` are
//! idempotent and retried with backoff across disconnections.
//!
//! # Double barrier
//! `n` members: [`DoubleBarrier::enter`] returns once `n` members have entered,
//! [`DoubleBarrier::leave`] once every member has left. Each member is an ephemeral node
//! `<path>/<id>`; the member that sees `n` creates `<path>/ready`, whose creation every
//! member waits for (with a children watch as well, so a member on a lagging server
//! still sees the count grow). Leaving follows the recipe: the lowest member waits for
//! the highest to go, every other member deletes its node and waits for the lowest; the
//! last member deletes its node and `ready` in one multi, so the path can be used again.
//!
//! Across connection states:
//! - While entering, `SUSPENDED` waits and `RECONNECTED` checks again (a create whose
//!   reply was lost is recognised by its owner). `LOST` fails the entry with
//!   [`Error::SessionExpired`]: the member node died, and the others may already have
//!   counted it, opened the barrier and be about to leave, so coming back quietly could
//!   wait forever for a round that is over. The caller decides (a new member with a new
//!   id, a new round). A node left by one of this member's dead sessions is never taken
//!   for a live member of ours.
//! - After entering, `LOST` removes the member from the barrier (its node died): the
//!   others may leave without it. [`DoubleBarrier::leave`] then waits for the others and
//!   fails with [`Error::SessionExpired`], so the member knows its work may not have been
//!   waited for.
//! - While leaving, a lost session only speeds things up (our node is gone): leaving goes
//!   on with the new session.
//! - Every failure is retried with backoff; while started and connected a call, a watch
//!   or a timer is always pending.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use rzk_wire::CreateMode;
use tokio::sync::watch;

use super::engine::{Backoff, Call, Ids, Input, Machine, Output, Reply, Running};
use super::ids::{join_path, OpId};
use super::latch::rand_nonce;
use super::ops::RecipeOps;
use crate::client::Op as MultiOp;
use crate::error::{Error, Result};
use crate::state::ConnectionState;
use crate::types::SessionId;

// ----- Barrier ---------------------------------------------------------------------------

/// The wait of a [`Barrier`]: `exists` with a watch until the node is gone.
#[derive(Debug)]
pub struct BarrierMachine {
    path: String,
    ids: Ids,
    backoff: Backoff,
    started: bool,
    connected: bool,
    /// The `exists` call (its watch) or the backoff timer currently relied on.
    waiting: Option<OpId>,
    open: bool,
}

/// What a [`BarrierMachine`] reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BarrierEvent {
    /// The barrier node does not exist.
    Open,
}

impl BarrierMachine {
    /// A wait on the barrier at `path`.
    pub fn new(path: impl Into<String>, nonce: u64) -> BarrierMachine {
        BarrierMachine {
            path: path.into(),
            ids: Ids::default(),
            backoff: Backoff::new(20, 2_000, nonce),
            started: false,
            connected: false,
            waiting: None,
            open: false,
        }
    }

    /// The "never idle" check.
    pub fn is_progressing(&self) -> bool {
        !self.started || !self.connected || self.open || self.waiting.is_some()
    }

    fn check(&mut self, out: &mut Vec<Output<BarrierEvent>>) {
        if let Some(id) = self.waiting.take() {
            out.push(Output::Unwatch { id });
        }
        let id = self.ids.call(
            Call::Exists {
                path: self.path.clone(),
                watch: true,
            },
            out,
        );
        self.waiting = Some(id);
    }
}

impl Machine for BarrierMachine {
    type Command = ();
    type Event = BarrierEvent;

    fn step(&mut self, now_ms: u64, input: Input<()>) -> Vec<Output<BarrierEvent>> {
        let mut out = Vec::new();
        if self.open {
            return out;
        }
        match input {
            Input::Start => {
                self.started = true;
                if self.connected {
                    self.check(&mut out);
                }
            }
            Input::Close => out.push(Output::Ended),
            Input::Conn(state) => {
                self.connected = matches!(
                    state,
                    ConnectionState::Connected { .. } | ConnectionState::Reconnected { .. }
                );
                if !self.connected {
                    self.waiting = None;
                } else if self.started {
                    self.check(&mut out);
                }
            }
            Input::Done { id, reply } if self.waiting == Some(id) => match reply {
                Reply::Exists(Ok(None)) => {
                    self.open = true;
                    out.push(Output::Emit(BarrierEvent::Open));
                    out.push(Output::Ended);
                }
                // Armed: wait for the watch.
                Reply::Exists(Ok(Some(_))) => self.backoff.reset(),
                _ => {
                    let delay = self.backoff.next_delay_ms();
                    self.waiting = Some(self.ids.timer(now_ms + delay, &mut out));
                }
            },
            Input::Fired { id } | Input::Timer { id } if self.waiting == Some(id) => {
                self.waiting = None;
                if self.connected {
                    self.check(&mut out);
                }
            }
            Input::Done { .. }
            | Input::Fired { .. }
            | Input::Timer { .. }
            | Input::Event { .. }
            | Input::StreamEnded { .. }
            | Input::Command(()) => {}
        }
        out
    }
}

/// A barrier: a node that blocks waiters while it exists (see the module docs).
///
/// ```no_run
/// # async fn demo<O: rzk_election_client::recipe::RecipeOps>(client: std::sync::Arc<O>) -> rzk_election_client::Result<()> {
/// use rzk_election_client::recipe::Barrier;
/// let gate = Barrier::new(client, "/deploy/gate");
/// gate.set().await?;     // the coordinator closes the gate
/// // ... workers call gate.wait().await? and block ...
/// gate.remove().await?;  // and opens it
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct Barrier<O: RecipeOps> {
    ops: Arc<O>,
    path: String,
}

impl<O: RecipeOps> Clone for Barrier<O> {
    fn clone(&self) -> Barrier<O> {
        Barrier {
            ops: self.ops.clone(),
            path: self.path.clone(),
        }
    }
}

/// How long an idempotent call of [`Barrier`] is retried across disconnections.
const BARRIER_CALL_PATIENCE: Duration = Duration::from_secs(60);

impl<O: RecipeOps> Barrier<O> {
    /// A barrier at `path`.
    pub fn new(ops: Arc<O>, path: impl Into<String>) -> Barrier<O> {
        Barrier {
            ops,
            path: path.into(),
        }
    }

    /// Retry an idempotent call while the failure is transient (the connection).
    async fn retry(&self, call: Call, done: impl Fn(&Reply) -> Option<Result<()>>) -> Result<()> {
        let mut backoff = Backoff::new(20, 1_000, rand_nonce());
        let deadline = tokio::time::Instant::now() + BARRIER_CALL_PATIENCE;
        loop {
            let (reply, _) = self.ops.call(call.clone()).await;
            if let Some(r) = done(&reply) {
                return r;
            }
            let e = reply.error().cloned().unwrap_or(Error::ConnectionLoss);
            if tokio::time::Instant::now() >= deadline {
                return Err(e);
            }
            tokio::time::sleep(Duration::from_millis(backoff.next_delay_ms())).await;
        }
    }

    /// Close the barrier (create its node, parents as containers). Already set is fine.
    pub async fn set(&self) -> Result<()> {
        let call = Call::Create {
            path: self.path.clone(),
            data: Bytes::new(),
            mode: CreateMode::Persistent,
            ttl_ms: None,
            parents: Some(CreateMode::Container),
        };
        self.retry(call, |r| match r {
            Reply::Created(Ok(_)) | Reply::Created(Err(Error::NodeExists { .. })) => Some(Ok(())),
            Reply::Created(Err(e)) if transient(e) => None,
            Reply::Created(Err(e)) => Some(Err(e.clone())),
            _ => Some(Err(Error::Transport("unexpected reply".into()))),
        })
        .await
    }

    /// Open the barrier (delete its node). Already open is fine.
    pub async fn remove(&self) -> Result<()> {
        let call = Call::Delete {
            path: self.path.clone(),
            version: -1,
        };
        self.retry(call, |r| match r {
            Reply::Deleted(Ok(())) | Reply::Deleted(Err(Error::NoNode { .. })) => Some(Ok(())),
            Reply::Deleted(Err(e)) if transient(e) => None,
            Reply::Deleted(Err(e)) => Some(Err(e.clone())),
            _ => Some(Err(Error::Transport("unexpected reply".into()))),
        })
        .await
    }

    /// Wait until the barrier is open (its node does not exist).
    pub async fn wait(&self) -> Result<()> {
        let mut running = Running::spawn_with(
            self.ops.clone(),
            BarrierMachine::new(self.path.clone(), rand_nonce()),
            |_| {},
        );
        match running.events.recv().await {
            Some(BarrierEvent::Open) => Ok(()),
            None => Err(Error::Closed),
        }
    }
}

/// Transient failures: the connection (the session may still be alive, or a new one
/// comes).
fn transient(e: &Error) -> bool {
    e.is_connection_loss() || matches!(e, Error::SessionExpired)
}

// ----- DoubleBarrier ---------------------------------------------------------------------

/// The node every member waits for once `n` have entered.
pub const READY_NODE: &str = "ready";

/// Settings of a [`DoubleBarrier`].
#[derive(Debug, Clone)]
pub struct DoubleBarrierConfig {
    /// The barrier's path.
    pub path: String,
    /// How many members must enter.
    pub members: u32,
    /// This member's node name (unique among the members).
    pub id: String,
    /// Seeds the jitter.
    pub nonce: u64,
}

impl DoubleBarrierConfig {
    /// A barrier of `members` at `path`; the member id is random.
    pub fn new(path: impl Into<String>, members: u32) -> DoubleBarrierConfig {
        let nonce = rand_nonce();
        DoubleBarrierConfig {
            path: path.into(),
            members: members.max(1),
            id: format!("m-{nonce:016x}"),
            nonce,
        }
    }
}

/// Commands to a [`DoubleBarrierMachine`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DoubleBarrierCommand {
    /// Enter (once).
    Enter,
    /// Leave (after entering).
    Leave,
}

/// What a [`DoubleBarrierMachine`] reports, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DoubleBarrierEvent {
    /// `n` members have entered.
    Entered,
    /// The session was lost after entering: this member's node died, the others may
    /// leave without it.
    MembershipLost,
    /// Every member has left.
    Left,
    /// A command that cannot be carried out (leave before enter, an id used by another
    /// live session, an ACL).
    Failed(Error),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Idle,
    Entering,
    Entered,
    Leaving,
    Done,
}

/// What the machine waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Wait {
    Nothing,
    /// Create our node.
    Creating(OpId),
    /// Our node existed: read its owner.
    Owner(OpId),
    /// Delete a node of one of our dead sessions (then create).
    Replacing(OpId),
    /// `exists` on ready with a watch.
    Ready(OpId),
    /// List the members with a children watch.
    Counting(OpId),
    /// Create ready.
    MakingReady(OpId),
    /// Leaving: list the members.
    Listing(OpId),
    /// Leaving: delete our node (and ready, when last).
    Deleting(OpId),
    /// Leaving: an exists watch on another member.
    Watching(OpId),
    Backoff(OpId),
}

/// Dead sessions remembered to recognise their nodes.
const DEAD_SESSIONS_MAX: usize = 16;

/// The double barrier's machine (see the module docs).
#[derive(Debug)]
pub struct DoubleBarrierMachine {
    cfg: DoubleBarrierConfig,
    ids: Ids,
    backoff: Backoff,
    conn: Option<SessionId>,
    seen: Option<SessionId>,
    dead: Vec<SessionId>,
    phase: Phase,
    wait: Wait,
    /// Watches armed while entering (ready and the children), so both are dropped once
    /// entered.
    armed: Vec<OpId>,
    /// Our node exists on the current session (as far as we know).
    have_node: bool,
    /// Leave asked while the membership was lost.
    lost_membership: bool,
}

impl DoubleBarrierMachine {
    /// A member, not entered.
    pub fn new(cfg: DoubleBarrierConfig) -> DoubleBarrierMachine {
        let backoff = Backoff::new(20, 2_000, cfg.nonce);
        DoubleBarrierMachine {
            cfg,
            ids: Ids::default(),
            backoff,
            conn: None,
            seen: None,
            dead: Vec::new(),
            phase: Phase::Idle,
            wait: Wait::Nothing,
            armed: Vec::new(),
            have_node: false,
            lost_membership: false,
        }
    }

    /// The "never idle" check: false would mean connected, entering or leaving, and
    /// stuck.
    pub fn is_progressing(&self) -> bool {
        match self.phase {
            Phase::Entering | Phase::Leaving => {
                self.conn.is_none() || self.wait != Wait::Nothing || !self.armed.is_empty()
            }
            Phase::Idle | Phase::Entered | Phase::Done => true,
        }
    }

    fn me(&self) -> String {
        join_path(&self.cfg.path, &self.cfg.id)
    }

    fn ready(&self) -> String {
        join_path(&self.cfg.path, READY_NODE)
    }

    fn emit(&mut self, e: DoubleBarrierEvent, out: &mut Vec<Output<DoubleBarrierEvent>>) {
        out.push(Output::Emit(e));
    }

    fn drop_watches(&mut self, out: &mut Vec<Output<DoubleBarrierEvent>>) {
        for id in self.armed.drain(..) {
            out.push(Output::Unwatch { id });
        }
        if let Wait::Watching(id) = self.wait {
            out.push(Output::Unwatch { id });
        }
    }

    fn backoff(&mut self, now_ms: u64, out: &mut Vec<Output<DoubleBarrierEvent>>) {
        let delay = self.backoff.next_delay_ms();
        self.wait = Wait::Backoff(self.ids.timer(now_ms + delay, out));
    }

    /// Take the next step of the current phase (on a connection, a watch, a timer).
    fn next(&mut self, out: &mut Vec<Output<DoubleBarrierEvent>>) {
        if self.conn.is_none() {
            return;
        }
        self.drop_watches(out);
        match self.phase {
            Phase::Entering if !self.have_node => {
                let op = self.ids.call(
                    Call::Create {
                        path: self.me(),
                        data: Bytes::new(),
                        mode: CreateMode::Ephemeral,
                        ttl_ms: None,
                        parents: Some(CreateMode::Container),
                    },
                    out,
                );
                self.wait = Wait::Creating(op);
            }
            Phase::Entering => {
                let op = self.ids.call(
                    Call::Exists {
                        path: self.ready(),
                        watch: true,
                    },
                    out,
                );
                self.wait = Wait::Ready(op);
            }
            Phase::Leaving => {
                let op = self.ids.call(
                    Call::Children {
                        path: self.cfg.path.clone(),
                        watch: false,
                    },
                    out,
                );
                self.wait = Wait::Listing(op);
            }
            Phase::Idle | Phase::Entered | Phase::Done => self.wait = Wait::Nothing,
        }
    }

    fn entered(&mut self, out: &mut Vec<Output<DoubleBarrierEvent>>) {
        self.drop_watches(out);
        self.wait = Wait::Nothing;
        self.phase = Phase::Entered;
        self.backoff.reset();
        self.emit(DoubleBarrierEvent::Entered, out);
    }

    fn left(&mut self, out: &mut Vec<Output<DoubleBarrierEvent>>) {
        self.drop_watches(out);
        self.wait = Wait::Nothing;
        self.phase = Phase::Done;
        if self.lost_membership {
            self.emit(DoubleBarrierEvent::Failed(Error::SessionExpired), out);
        } else {
            self.emit(DoubleBarrierEvent::Left, out);
        }
    }

    fn on_conn(&mut self, state: ConnectionState, out: &mut Vec<Output<DoubleBarrierEvent>>) {
        match state {
            ConnectionState::Connected { session } | ConnectionState::Reconnected { session } => {
                if let Some(old) = self.seen.replace(session) {
                    if old != session {
                        self.session_gone(old, out);
                    }
                }
                self.conn = Some(session);
                if matches!(self.phase, Phase::Entering | Phase::Leaving) {
                    self.next(out);
                }
            }
            ConnectionState::Suspended | ConnectionState::ReadOnly { .. } => {
                self.conn = None;
                self.wait = Wait::Nothing;
            }
            ConnectionState::Lost => {
                self.conn = None;
                self.wait = Wait::Nothing;
                if let Some(old) = self.seen {
                    self.session_gone(old, out);
                }
            }
        }
    }

    /// A session of ours ended: its member node died (or will, once the server expires
    /// it).
    fn session_gone(&mut self, old: SessionId, out: &mut Vec<Output<DoubleBarrierEvent>>) {
        if !self.dead.contains(&old) {
            if self.dead.len() == DEAD_SESSIONS_MAX {
                self.dead.remove(0);
            }
            self.dead.push(old);
        }
        let had_node = std::mem::replace(&mut self.have_node, false);
        if self.phase == Phase::Entering {
            // Others may have counted the node that died, opened the barrier and be
            // about to leave without us; coming back quietly could wait forever for a
            // round that is over. The caller decides (a new member, a new round).
            self.fail(Error::SessionExpired, out);
            return;
        }
        if !had_node {
            return;
        }
        if self.phase == Phase::Entered {
            self.lost_membership = true;
            self.emit(DoubleBarrierEvent::MembershipLost, out);
        }
    }

    fn on_done(
        &mut self,
        now_ms: u64,
        id: OpId,
        reply: Reply,
        out: &mut Vec<Output<DoubleBarrierEvent>>,
    ) {
        let current = match self.wait {
            Wait::Creating(op)
            | Wait::Owner(op)
            | Wait::Replacing(op)
            | Wait::Ready(op)
            | Wait::Counting(op)
            | Wait::MakingReady(op)
            | Wait::Listing(op)
            | Wait::Deleting(op)
            | Wait::Watching(op) => op == id,
            Wait::Nothing | Wait::Backoff(_) => false,
        };
        if !current {
            return;
        }
        match (self.wait, reply) {
            (Wait::Creating(_), Reply::Created(r)) => match r {
                Ok(_) => {
                    self.have_node = true;
                    self.next(out);
                }
                Err(Error::NodeExists { .. }) => {
                    let op = self.ids.call(
                        Call::GetData {
                            path: self.me(),
                            watch: false,
                        },
                        out,
                    );
                    self.wait = Wait::Owner(op);
                }
                Err(e) if transient(&e) || matches!(e, Error::NoNode { .. }) => {
                    self.backoff(now_ms, out)
                }
                Err(e) => self.fail(e, out),
            },
            (Wait::Owner(_), Reply::Data(r)) => match r {
                Ok((_, stat)) if Some(stat.ephemeral_owner) == self.conn => {
                    // Ours: a create whose reply was lost.
                    self.have_node = true;
                    self.next(out);
                }
                Ok((_, stat)) if self.dead.contains(&stat.ephemeral_owner) => {
                    // One of our dead sessions: it must not count as a member.
                    let op = self.ids.call(
                        Call::Delete {
                            path: self.me(),
                            version: stat.version,
                        },
                        out,
                    );
                    self.wait = Wait::Replacing(op);
                }
                Ok(_) => self.fail(
                    Error::Config(format!(
                        "member id {} is used by another live session",
                        self.cfg.id
                    )),
                    out,
                ),
                Err(Error::NoNode { .. }) => self.next(out),
                Err(_) => self.backoff(now_ms, out),
            },
            (Wait::Replacing(_), Reply::Deleted(r)) => match r {
                Ok(()) | Err(Error::NoNode { .. }) | Err(Error::BadVersion { .. }) => {
                    self.next(out)
                }
                Err(_) => self.backoff(now_ms, out),
            },
            (Wait::Ready(op), Reply::Exists(r)) => match r {
                Ok(Some(_)) => self.entered(out),
                Ok(None) => {
                    // Armed on ready; count the members too (with a children watch).
                    self.armed.push(op);
                    let count = self.ids.call(
                        Call::Children {
                            path: self.cfg.path.clone(),
                            watch: true,
                        },
                        out,
                    );
                    self.wait = Wait::Counting(count);
                }
                Err(_) => self.backoff(now_ms, out),
            },
            (Wait::Counting(op), Reply::Children(r)) => match r {
                Ok(children) => {
                    let members = children.iter().filter(|c| c.as_str() != READY_NODE).count();
                    if !children.contains(&self.cfg.id) {
                        // Our node is gone (deleted by hand): create it again.
                        self.have_node = false;
                        self.next(out);
                    } else if members >= self.cfg.members as usize {
                        let make = self.ids.call(
                            Call::Create {
                                path: self.ready(),
                                data: Bytes::new(),
                                mode: CreateMode::Persistent,
                                ttl_ms: None,
                                parents: None,
                            },
                            out,
                        );
                        self.armed.push(op);
                        self.wait = Wait::MakingReady(make);
                    } else {
                        // Both watches armed: wait for ready or another member.
                        self.armed.push(op);
                        self.wait = Wait::Nothing;
                        self.backoff.reset();
                    }
                }
                Err(_) => self.backoff(now_ms, out),
            },
            (Wait::MakingReady(_), Reply::Created(r)) => match r {
                Ok(_) | Err(Error::NodeExists { .. }) => self.entered(out),
                Err(_) => self.backoff(now_ms, out),
            },
            (Wait::Listing(_), Reply::Children(r)) => match r {
                Ok(children) => self.on_listed(children, out),
                Err(Error::NoNode { .. }) => self.left(out),
                Err(_) => self.backoff(now_ms, out),
            },
            (Wait::Deleting(_), Reply::Deleted(r)) => match r {
                Ok(()) | Err(Error::NoNode { .. }) => {
                    self.have_node = false;
                    self.next(out);
                }
                Err(_) => self.backoff(now_ms, out),
            },
            (Wait::Deleting(_), Reply::Multi(r)) => match r {
                Ok(_) => {
                    self.have_node = false;
                    self.left(out);
                }
                // Someone else deleted ready, or our node is already gone: list again.
                Err(Error::MultiFailed { .. }) => self.next(out),
                Err(_) => self.backoff(now_ms, out),
            },
            (Wait::Watching(_), Reply::Exists(r)) => match r {
                Ok(Some(_)) => self.backoff.reset(),
                Ok(None) => self.next(out),
                Err(_) => self.backoff(now_ms, out),
            },
            (_, _) => self.backoff(now_ms, out),
        }
    }

    /// Leaving: the recipe's step for this listing.
    fn on_listed(&mut self, children: Vec<String>, out: &mut Vec<Output<DoubleBarrierEvent>>) {
        let mut members: Vec<String> = children.into_iter().filter(|c| c != READY_NODE).collect();
        members.sort();
        let me = self.cfg.id.clone();
        let mine = members.contains(&me);
        if members.is_empty() {
            self.left(out);
            return;
        }
        if mine && members.len() == 1 {
            // The last one: our node and ready go together, so the path can be reused.
            let op = self.ids.call(
                Call::Multi {
                    ops: vec![
                        MultiOp::Delete {
                            path: self.me(),
                            version: -1,
                        },
                        MultiOp::Delete {
                            path: self.ready(),
                            version: -1,
                        },
                    ],
                },
                out,
            );
            self.wait = Wait::Deleting(op);
            return;
        }
        if mine && members[0] != me {
            let op = self.ids.call(
                Call::Delete {
                    path: self.me(),
                    version: -1,
                },
                out,
            );
            self.wait = Wait::Deleting(op);
            return;
        }
        // The lowest waits for the highest; one without a node waits for the lowest.
        let target = if mine {
            &members[members.len() - 1]
        } else {
            &members[0]
        };
        let op = self.ids.call(
            Call::Exists {
                path: join_path(&self.cfg.path, target),
                watch: true,
            },
            out,
        );
        self.wait = Wait::Watching(op);
    }

    fn fail(&mut self, e: Error, out: &mut Vec<Output<DoubleBarrierEvent>>) {
        self.drop_watches(out);
        self.wait = Wait::Nothing;
        self.phase = Phase::Done;
        self.emit(DoubleBarrierEvent::Failed(e), out);
    }

    fn on_wake(&mut self, id: OpId, out: &mut Vec<Output<DoubleBarrierEvent>>) {
        let ours = match self.wait {
            Wait::Watching(op) | Wait::Backoff(op) => op == id,
            _ => false,
        } || self.armed.contains(&id);
        if ours && matches!(self.phase, Phase::Entering | Phase::Leaving) {
            self.armed.retain(|a| *a != id);
            self.wait = Wait::Nothing;
            self.next(out);
        }
    }

    fn on_command(&mut self, c: DoubleBarrierCommand, out: &mut Vec<Output<DoubleBarrierEvent>>) {
        match (c, self.phase) {
            (DoubleBarrierCommand::Enter, Phase::Idle) => {
                self.phase = Phase::Entering;
                self.next(out);
            }
            (DoubleBarrierCommand::Leave, Phase::Entered) => {
                self.phase = Phase::Leaving;
                self.next(out);
            }
            (c, _) => self.emit(
                DoubleBarrierEvent::Failed(Error::Config(format!(
                    "{c:?} in phase {:?}",
                    self.phase
                ))),
                out,
            ),
        }
    }
}

impl Machine for DoubleBarrierMachine {
    type Command = DoubleBarrierCommand;
    type Event = DoubleBarrierEvent;

    fn step(
        &mut self,
        now_ms: u64,
        input: Input<DoubleBarrierCommand>,
    ) -> Vec<Output<DoubleBarrierEvent>> {
        let mut out = Vec::new();
        match input {
            Input::Start => {}
            Input::Close => {
                // Our ephemeral node (if any) is deleted best effort; it dies with the
                // session anyway.
                if self.have_node && self.conn.is_some() {
                    self.ids.call(
                        Call::Delete {
                            path: self.me(),
                            version: -1,
                        },
                        &mut out,
                    );
                }
                out.push(Output::Ended);
            }
            Input::Conn(state) => self.on_conn(state, &mut out),
            Input::Done { id, reply } => self.on_done(now_ms, id, reply, &mut out),
            Input::Fired { id } | Input::Timer { id } => self.on_wake(id, &mut out),
            Input::Event { .. } | Input::StreamEnded { .. } => {}
            Input::Command(c) => self.on_command(c, &mut out),
        }
        out
    }
}

/// A double barrier of `n` members (see the module docs).
///
/// ```no_run
/// # async fn demo<O: rzk_election_client::recipe::RecipeOps>(client: std::sync::Arc<O>) -> rzk_election_client::Result<()> {
/// use rzk_election_client::recipe::{DoubleBarrier, DoubleBarrierConfig};
/// let mut b = DoubleBarrier::new(client, DoubleBarrierConfig::new("/jobs/42/barrier", 3));
/// b.enter().await?; // all 3 are here
/// // ... the computation ...
/// b.leave().await?; // all 3 are done
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct DoubleBarrier {
    running: Running<DoubleBarrierMachine>,
    lost: watch::Receiver<bool>,
}

impl DoubleBarrier {
    /// A member of the barrier described by `cfg` (nothing happens before `enter`).
    pub fn new<O: RecipeOps>(ops: Arc<O>, cfg: DoubleBarrierConfig) -> DoubleBarrier {
        let (tx, lost) = watch::channel(false);
        let running = Running::spawn_with(
            ops,
            DoubleBarrierMachine::new(cfg),
            move |e: &DoubleBarrierEvent| {
                if *e == DoubleBarrierEvent::MembershipLost {
                    tx.send_replace(true);
                }
            },
        );
        DoubleBarrier { running, lost }
    }

    async fn until(&mut self, want: DoubleBarrierEvent) -> Result<()> {
        loop {
            match self.running.events.recv().await {
                Some(e) if e == want => return Ok(()),
                Some(DoubleBarrierEvent::Failed(e)) => return Err(e),
                Some(_) => continue,
                None => return Err(Error::Closed),
            }
        }
    }

    /// Enter; returns once `n` members have entered.
    pub async fn enter(&mut self) -> Result<()> {
        self.running.command(DoubleBarrierCommand::Enter);
        self.until(DoubleBarrierEvent::Entered).await
    }

    /// True once the session was lost after entering (see the module docs).
    pub fn membership_lost(&self) -> bool {
        *self.lost.borrow()
    }

    /// Leave; returns once every member has left. Fails with [`Error::SessionExpired`]
    /// if this member's session was lost after entering.
    pub async fn leave(&mut self) -> Result<()> {
        self.running.command(DoubleBarrierCommand::Leave);
        self.until(DoubleBarrierEvent::Left).await
    }

    /// Stop (this member's node is deleted).
    pub async fn close(&self) {
        self.running.close().await;
    }
}

#[cfg(test)]
#[path = "barrier_tests.rs"]
mod tests;

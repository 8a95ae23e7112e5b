//! The candidacy machine shared by [`LeaderLatch`](super::LeaderLatch),
//! [`LeaderSelector`](super::LeaderSelector) and [`Mutex`](super::Mutex).
//!
//! A candidacy is a position under a parent znode (`position.rs`): a protected
//! ephemeral-sequential child (so a create whose reply was lost is found again instead
//! of duplicated). The first child in sequence order holds the grant; every other
//! child watches only its immediate predecessor, so a departure wakes one waiter (no
//! herd effect).
//!
//! [`Candidacy`] is a [`Machine`] of the engine: sans-IO, it takes the time and one
//! [`Input`] and returns the [`Output`]s to carry out (calls tagged with an [`OpId`],
//! timers, watches to drop, deletes to run in the background, and grant / revoke events
//! for the holder). The engine's driver runs it on one task, so only the current attempt
//! can grant or revoke (docs/recipes.md, "The lifecycle", rule 1); answers and watch
//! events tagged with any other id are stale and ignored (rule 2), except that a stale
//! successful create deletes its node (CURATOR-18, CURATOR-498).
//!
//! # The lifecycle
//! - `SUSPENDED` / `READ_ONLY`: revoke at once; keep the candidate node.
//! - `RECONNECTED` on the same session: re-list and re-prove with the same node.
//! - `LOST`: revoke first, then retire the participation; its node belongs to a dead
//!   session and is deleted (best effort) once connected again.
//! - Connected on a new session: a fresh candidate, parents created if missing. `NONODE`
//!   on the create, on the listing or on the epoch is retried, never ignored
//!   (CURATOR-724).
//! - Another candidate wins: stay a candidate, watch the predecessor.
//! - Grant requires proof on the current session: first in the listing **and** a read of
//!   the node showing `ephemeralOwner == current session` (CURATOR-696), then, when
//!   fencing is configured, a conditional increment of the epoch znode in a multi that
//!   also checks the candidate node still exists ([`super::fence`]). Any failure returns
//!   to candidacy with backoff; nothing ends in idle (rule 12).

use std::sync::Arc;

use bytes::Bytes;
use tokio::sync::watch;

use super::engine::{self, Backoff, Call, Ids, Machine, Reply};
use super::fence::{Fence, FenceNext};
use super::ops::RecipeOps;
use super::position::{Listed, Position, Proof, Step, Then};
use crate::error::Error;
use crate::state::ConnectionState;
use crate::types::{FencingToken, SessionId, Stat};

pub use super::fence::{parse_epoch, BumpError};
pub use super::ids::{join_path, name_of, OpId};
pub use super::position::{Grant, Revoked};

/// Whether a candidacy rejoins after losing a grant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Leader latch: participate until closed; after `LOST` always rejoin.
    Latch,
    /// Lock: a grant lost with its session ends the candidacy (the holder must acquire
    /// again). While waiting, a lost session is replaced by a fresh candidate.
    Lock,
}

/// Configuration of a [`Candidacy`].
#[derive(Debug, Clone)]
pub struct CandidacyConfig {
    /// The parent znode under which candidates queue (created as a container if missing).
    pub path: String,
    /// The name of each candidate before its sequence number (`latch-`, `lock-`).
    pub name: String,
    /// Data of each candidate node (the participant id).
    pub data: Bytes,
    /// The epoch znode to increment before a grant; `None` for an unfenced lock.
    pub epoch_path: Option<String>,
    /// Latch or lock behaviour.
    pub mode: Mode,
    /// First retry delay after a failure.
    pub backoff_min_ms: u64,
    /// Largest retry delay.
    pub backoff_max_ms: u64,
    /// Re-check the position this long after each evaluation (a self-check that repairs a
    /// lost watch), or never.
    pub recheck_ms: Option<u64>,
    /// A random value: it makes candidate names unique to this candidacy and seeds the
    /// backoff jitter.
    pub nonce: u64,
}

impl CandidacyConfig {
    /// A latch-mode configuration with the default timings.
    pub fn new(path: impl Into<String>, name: impl Into<String>, nonce: u64) -> CandidacyConfig {
        CandidacyConfig {
            path: path.into(),
            name: name.into(),
            data: Bytes::new(),
            epoch_path: None,
            mode: Mode::Latch,
            backoff_min_ms: 20,
            backoff_max_ms: 2_000,
            recheck_ms: Some(10_000),
            nonce,
        }
    }
}

/// A transition reported to the holder, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RecipeEvent {
    /// The grant is proven and fenced: act as leader / lock holder.
    Granted(Grant),
    /// Stop acting: the grant reported before is gone. Exactly one per `Granted`.
    Revoked(Revoked),
    /// The candidacy is over (closed, released without rejoin, or a lock lost with its
    /// session). Nothing more will be granted.
    Ended,
}

/// A command of the holder.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CandidacyCommand {
    /// Give the grant back: delete the candidate node; with `rejoin`, queue again with a
    /// fresh candidate (LeaderSelector's requeue), else end.
    Release {
        /// Queue again after releasing.
        rejoin: bool,
    },
}

/// One input of a [`Candidacy`].
pub type Input = engine::Input<CandidacyCommand>;

/// One thing for the driver to do, in order.
pub type Output = engine::Output<RecipeEvent>;

/// The candidacy state machine. See the module docs.
#[derive(Debug)]
pub struct Candidacy {
    /// Latch or lock behaviour.
    mode: Mode,
    /// The self-check period, if any.
    recheck_ms: Option<u64>,
    fence: Fence,
    ids: Ids,
    backoff: Backoff,
    started: bool,
    closed: bool,
    /// The session while connected read-write; `None` while suspended, lost or read-only.
    conn: Option<SessionId>,
    /// Our candidate node: its attempt, and the retired ones still to clean up.
    pos: Position,
    step: Step,
    /// The grant currently reported to the holder.
    granted: Option<Grant>,
    /// In lock mode, this participation has been granted once.
    was_granted: bool,
    /// The watch call whose watch may still be set: one at a time, an older one is
    /// dropped when a newer one is asked for.
    armed: Option<OpId>,
}

impl Candidacy {
    /// A new, not yet started candidacy.
    pub fn new(cfg: CandidacyConfig) -> Candidacy {
        let fence = match cfg.epoch_path {
            Some(path) => Fence::Bump(path),
            None => Fence::None,
        };
        Candidacy {
            mode: cfg.mode,
            recheck_ms: cfg.recheck_ms,
            fence,
            ids: Ids::default(),
            backoff: Backoff::new(cfg.backoff_min_ms, cfg.backoff_max_ms, cfg.nonce),
            started: false,
            closed: false,
            conn: None,
            pos: Position::new(cfg.path, cfg.name, cfg.data, cfg.nonce),
            step: Step::Idle,
            granted: None,
            was_granted: false,
            armed: None,
        }
    }

    /// The grant currently held, if any.
    pub fn granted(&self) -> Option<&Grant> {
        self.granted.as_ref()
    }

    /// The full path of the current candidate node, if known.
    pub fn node_path(&self) -> Option<String> {
        self.pos.node_path()
    }

    /// True once the candidacy has ended.
    pub fn is_ended(&self) -> bool {
        self.step == Step::Ended
    }

    /// True while something is pending (a call, a watch or a timer), or the machine
    /// waits for a connection, or it has ended. The "no permanent idle" check: false
    /// would mean started, connected and stuck.
    pub fn is_progressing(&self) -> bool {
        self.step.is_progressing(self.started, self.conn.is_some())
    }

    // ----- inputs -------------------------------------------------------------------

    fn on_start(&mut self, out: &mut Vec<Output>) {
        if self.started || self.closed {
            return;
        }
        self.started = true;
        if self.conn.is_some() {
            self.join(out);
        }
    }

    fn on_close(&mut self, out: &mut Vec<Output>) {
        if self.closed {
            return;
        }
        self.closed = true;
        self.revoke(Revoked::Closed, out);
        self.discard_participation(out);
        self.end(out);
    }

    fn on_release(&mut self, rejoin: bool, out: &mut Vec<Output>) {
        if self.closed || !self.started || self.step == Step::Ended {
            return;
        }
        self.revoke(Revoked::Released, out);
        self.discard_participation(out);
        if rejoin {
            self.step = Step::Idle;
            if self.conn.is_some() {
                self.join(out);
            }
        } else {
            self.end(out);
        }
    }

    fn on_conn(&mut self, state: ConnectionState, out: &mut Vec<Output>) {
        match state {
            ConnectionState::Connected { session } | ConnectionState::Reconnected { session } => {
                self.conn = Some(session);
                // A participation from another session never carries over (I5). The
                // tracker always posts LOST first; this is the belt to its braces.
                if self.pos.current().is_some_and(|a| a.session != session) {
                    self.revoke(Revoked::Lost, out);
                    self.pos.retire();
                }
                self.flush_stale_nodes(out);
                if !self.started || self.closed || self.step == Step::Ended {
                    return;
                }
                match self.pos.current() {
                    // SUSPENDED -> RECONNECTED on the same session: same node, re-prove
                    // it (rule 6; no reset, CURATOR-645).
                    Some(_) => self.list(out),
                    None => self.join(out),
                }
            }
            ConnectionState::Suspended | ConnectionState::ReadOnly { .. } => {
                // Stop acting at once; a read-only server cannot fence (rule 15).
                self.conn = None;
                self.revoke(Revoked::Suspended, out);
                self.wait_for_connection();
            }
            ConnectionState::Lost => {
                // I5: authority dies with its session. The grant is revoked first (the
                // holder stops acting), then the participation is discarded: its node
                // belongs to a dead session and is only ever deleted, never adopted or
                // led through. The next session gets a fresh candidate (`join`).
                self.conn = None;
                let had_grant = self.revoke(Revoked::Lost, out) || self.was_granted;
                self.pos.retire();
                self.wait_for_connection();
                if self.mode == Mode::Lock && had_grant && self.started {
                    self.end(out);
                }
            }
        }
    }

    fn on_done(&mut self, now_ms: u64, id: OpId, reply: Reply, out: &mut Vec<Output>) {
        if !self.step.waits_for(id) {
            self.on_stale(id, reply, out);
            return;
        }
        match (self.step, reply) {
            (Step::Creating { .. }, Reply::Created(r)) => self.on_created(now_ms, r, out),
            (Step::Listing { .. }, Reply::Children(r)) => self.on_children(now_ms, r, out),
            (Step::Verifying { .. }, Reply::Data(r)) => self.on_verified(now_ms, r, out),
            (Step::Waiting { .. } | Step::Holding { .. }, Reply::Data(r)) => {
                self.on_watching(now_ms, r, out)
            }
            (Step::Fencing { step, .. }, reply) => {
                let next = self.fence.on_reply(step, || self.pos.node_path(), reply);
                self.fence(now_ms, next, out);
            }
            // An answer of the wrong shape cannot happen; evaluate again.
            (_, _) => self.backoff(now_ms, Then::List, out),
        }
    }

    fn on_fired(&mut self, id: OpId, out: &mut Vec<Output>) {
        if self.armed == Some(id) {
            self.armed = None;
        }
        match self.step {
            Step::Waiting { watch, .. } | Step::Holding { watch, .. } if watch == id => {
                self.list(out)
            }
            _ => {}
        }
    }

    fn on_timer(&mut self, id: OpId, out: &mut Vec<Output>) {
        match self.step {
            Step::Backoff { timer, then } if timer == id => match then {
                Then::Create => self.create(out),
                Then::List => self.list(out),
            },
            // The periodic self-check (rule 12): the watch it replaces is dropped.
            Step::Waiting {
                timer: Some(timer), ..
            }
            | Step::Holding {
                timer: Some(timer), ..
            } if timer == id => {
                self.unwatch(out);
                self.list(out);
            }
            _ => {}
        }
    }

    // ----- call results -------------------------------------------------------------

    fn on_stale(&mut self, id: OpId, reply: Reply, out: &mut Vec<Output>) {
        match reply {
            // A create that succeeded after its attempt was retired leaves a node nobody
            // owns: delete it (CURATOR-18, CURATOR-498). A stale create of the *current*
            // participation is left alone: the next listing adopts it by its prefix.
            Reply::Created(Ok((path, _)))
                if self.closed || !self.pos.owns_late_create(&path, self.conn) =>
            {
                out.push(Output::BackgroundDelete { path });
            }
            // A watch left by a call we no longer wait for: drop it (one at a time).
            Reply::Data(Ok(_)) if self.armed == Some(id) => self.unwatch(out),
            _ => {}
        }
    }

    fn on_created(&mut self, now_ms: u64, r: crate::Result<(String, Stat)>, out: &mut Vec<Output>) {
        match self.pos.on_created(r) {
            Ok(()) => {
                self.backoff.reset();
                self.list(out);
            }
            Err(then) => self.backoff(now_ms, then, out),
        }
    }

    fn on_children(&mut self, now_ms: u64, r: crate::Result<Vec<String>>, out: &mut Vec<Output>) {
        let (listed, stale) = self.pos.on_listed(r);
        for path in stale {
            out.push(Output::BackgroundDelete { path });
        }
        let (me, children) = match listed {
            Listed::Found { me, children } => (me, children),
            Listed::Missing => return self.create(out),
            // The parent is gone, so our node is gone with it: a fresh candidate, parents
            // recreated (CURATOR-724).
            Listed::ParentGone => {
                self.revoke(Revoked::NotProven, out);
                return self.rejoin_same_session(out);
            }
            Listed::Failed => return self.backoff(now_ms, Then::List, out),
            Listed::NoAttempt => return,
        };
        let mut sorted: Vec<&String> = children.iter().collect();
        let name = self.pos.name();
        sorted.sort_by(|a, b| (sequence_of(a, name), *a).cmp(&(sequence_of(b, name), *b)));
        match sorted.iter().position(|c| **c == me) {
            None => {
                // Our node is gone (deleted, or its session ended): a new one. Another
                // node vanishing never leads here (CURATOR-645).
                self.revoke(Revoked::NotProven, out);
                self.rejoin_same_session(out);
            }
            Some(0) => {
                let path = self.pos.child_path(&me);
                let op = self.ids.call(Call::GetData { path, watch: false }, out);
                self.step = Step::Verifying { op };
            }
            Some(i) => {
                // Not first: any grant is not proven any more (CURATOR-653).
                self.revoke(Revoked::NotProven, out);
                let path = self.pos.child_path(sorted[i - 1]);
                let watch = self.watch(path, out);
                self.step = Step::Waiting { watch, timer: None };
            }
        }
    }

    fn on_verified(&mut self, now_ms: u64, r: crate::Result<(Bytes, Stat)>, out: &mut Vec<Output>) {
        match self.pos.prove(self.conn, &r) {
            Proof::Owned => {}
            Proof::Gone => {
                self.revoke(Revoked::NotProven, out);
                self.rejoin_same_session(out);
                return;
            }
            Proof::Retry => {
                self.backoff(now_ms, Then::List, out);
                return;
            }
            // CURATOR-696: sorting first proves nothing about the session; the node
            // must be owned by the session we are connected with.
            Proof::Foreign => {
                self.revoke(Revoked::NotProven, out);
                self.join(out);
                return;
            }
        }
        if let Some(g) = &self.granted {
            if Some(&g.node) == self.node_path().as_ref() && Some(g.session) == self.conn {
                // Still proven: keep the grant and its token.
                self.hold(out);
                return;
            }
        }
        let next = self.fence.start();
        self.fence(now_ms, next, out);
    }

    /// Carry out the next fencing step: leadership is usable only once it succeeded.
    fn fence(&mut self, now_ms: u64, next: FenceNext, out: &mut Vec<Output>) {
        match next {
            FenceNext::Call(call, step) => {
                let op = self.ids.call(call, out);
                self.step = Step::Fencing { op, step };
            }
            FenceNext::Grant(token) => self.grant(token, out),
            FenceNext::NodeGone => self.rejoin_same_session(out),
            // Someone else fenced in between, or a call failed: stay a candidate, look
            // again later (any failure returns to candidacy, with backoff).
            FenceNext::Retry => self.backoff(now_ms, Then::List, out),
        }
    }

    fn on_watching(&mut self, now_ms: u64, r: crate::Result<(Bytes, Stat)>, out: &mut Vec<Output>) {
        let holding = matches!(self.step, Step::Holding { .. });
        match r {
            Ok(_) => {
                self.backoff.reset();
                if let Some(recheck) = self.recheck_ms {
                    let timer = self.ids.timer(now_ms + recheck, out);
                    self.step.set_recheck(timer);
                }
            }
            // Our own node vanished while holding: the grant is gone.
            Err(Error::NoNode { .. }) if holding => {
                self.revoke(Revoked::NotProven, out);
                self.rejoin_same_session(out);
            }
            // The predecessor is already gone: re-list, do not reset (CURATOR-645).
            Err(Error::NoNode { .. }) => self.list(out),
            Err(_) => self.backoff(now_ms, Then::List, out),
        }
    }

    // ----- actions -------------------------------------------------------------------

    /// Begin a participation on the current session: reuse nothing from another session.
    fn join(&mut self, out: &mut Vec<Output>) {
        let Some(session) = self.conn else {
            self.step = Step::Idle;
            return;
        };
        self.was_granted = false;
        self.pos.join(session);
        self.create(out);
    }

    /// Our node is gone while the session lives: a new candidate on the same session.
    fn rejoin_same_session(&mut self, out: &mut Vec<Output>) {
        self.pos.forget();
        if self.mode == Mode::Lock && self.was_granted {
            self.end(out);
            return;
        }
        self.join(out);
    }

    fn create(&mut self, out: &mut Vec<Output>) {
        let Some(call) = self.pos.create_call() else {
            self.join(out);
            return;
        };
        let op = self.ids.call(call, out);
        self.step = Step::Creating { op };
    }

    fn list(&mut self, out: &mut Vec<Output>) {
        if self.pos.current().is_none() {
            self.join(out);
            return;
        }
        let op = self.ids.call(self.pos.list_call(false), out);
        self.step = Step::Listing { op };
    }

    /// Read `path` and leave a watch on it, dropping the previous watch.
    fn watch(&mut self, path: String, out: &mut Vec<Output>) -> OpId {
        self.unwatch(out);
        let id = self.ids.call(Call::GetData { path, watch: true }, out);
        self.armed = Some(id);
        id
    }

    fn unwatch(&mut self, out: &mut Vec<Output>) {
        if let Some(id) = self.armed.take() {
            out.push(Output::Unwatch { id });
        }
    }

    fn hold(&mut self, out: &mut Vec<Output>) {
        let Some(path) = self.node_path() else {
            return;
        };
        let watch = self.watch(path, out);
        self.step = Step::Holding { watch, timer: None };
    }

    /// Report the grant: only after the node is proven ours on this session and,
    /// when configured, the fencing step succeeded (I5).
    fn grant(&mut self, token: Option<FencingToken>, out: &mut Vec<Output>) {
        let (Some(session), Some(node)) = (self.conn, self.node_path()) else {
            return;
        };
        self.backoff.reset();
        self.was_granted = true;
        let grant = Grant {
            node,
            session,
            token,
        };
        self.granted = Some(grant.clone());
        out.push(Output::Emit(RecipeEvent::Granted(grant)));
        self.hold(out);
    }

    /// Revoke the grant if there is one; true if there was.
    fn revoke(&mut self, why: Revoked, out: &mut Vec<Output>) -> bool {
        if self.granted.take().is_some() {
            out.push(Output::Emit(RecipeEvent::Revoked(why)));
            return true;
        }
        false
    }

    fn backoff(&mut self, now_ms: u64, then: Then, out: &mut Vec<Output>) {
        let delay = self.backoff.next_delay_ms();
        let timer = self.ids.timer(now_ms + delay, out);
        self.step = Step::Backoff { timer, then };
    }

    /// Forget in-flight work; everything tagged before now is stale.
    fn wait_for_connection(&mut self) {
        if self.step != Step::Ended {
            self.step = Step::Idle;
        }
    }

    /// Give up the participation now (release or close): delete its node.
    fn discard_participation(&mut self, out: &mut Vec<Output>) {
        self.pos.retire();
        self.flush_stale_nodes(out);
    }

    /// Delete the nodes of retired participations, in the background: nothing waits
    /// for them, and a closed candidacy deletes even while disconnected (the delete is
    /// retried until the connection is back, for a bounded time).
    fn flush_stale_nodes(&mut self, out: &mut Vec<Output>) {
        if self.conn.is_none() && !self.closed {
            return;
        }
        for path in self.pos.take_stale_nodes() {
            out.push(Output::BackgroundDelete { path });
        }
    }

    fn end(&mut self, out: &mut Vec<Output>) {
        if self.step == Step::Ended {
            return;
        }
        self.step = Step::Ended;
        out.push(Output::Emit(RecipeEvent::Ended));
        out.push(Output::Ended);
    }

    /// The own-node watch while holding (tests deliver its event).
    #[cfg(test)]
    fn step_snapshot(&self) -> Option<OpId> {
        match self.step {
            Step::Holding { watch, .. } => Some(watch),
            _ => None,
        }
    }
}

impl Machine for Candidacy {
    type Command = CandidacyCommand;
    type Event = RecipeEvent;

    fn step(&mut self, now_ms: u64, input: Input) -> Vec<Output> {
        let mut out = Vec::new();
        match input {
            Input::Start => self.on_start(&mut out),
            Input::Close => self.on_close(&mut out),
            Input::Command(CandidacyCommand::Release { rejoin }) => {
                self.on_release(rejoin, &mut out)
            }
            Input::Conn(state) => self.on_conn(state, &mut out),
            Input::Done { id, reply } => self.on_done(now_ms, id, reply, &mut out),
            Input::Fired { id } => self.on_fired(id, &mut out),
            Input::Timer { id } => self.on_timer(id, &mut out),
            // No persistent watches here.
            Input::Event { .. } | Input::StreamEnded { .. } => {}
        }
        out
    }
}

/// The sort key of a candidate: the part after the last occurrence of `name`, which is
/// the zero-padded sequence number; a foreign child sorts by its whole name.
pub fn sequence_of<'a>(child: &'a str, name: &str) -> &'a str {
    match child.rfind(name) {
        Some(i) => &child[i + name.len()..],
        None => child,
    }
}

/// The holder's side of a candidacy that the engine's driver runs on its own task:
/// transitions in order, and the grant held right now. The holder's code runs on its
/// own task, never on the driver's (rule 13).
#[derive(Debug)]
pub(crate) struct CandidacyHandle {
    running: engine::Running<Candidacy>,
    /// The grant held right now (`None` while not granted).
    pub(crate) current: watch::Receiver<Option<Grant>>,
}

impl CandidacyHandle {
    /// Start a candidacy on `ops`.
    pub(crate) fn spawn<O: RecipeOps>(ops: Arc<O>, cfg: CandidacyConfig) -> CandidacyHandle {
        let (current_tx, current) = watch::channel(None);
        let running = engine::Running::spawn_with(ops, Candidacy::new(cfg), move |e| match e {
            RecipeEvent::Granted(grant) => {
                tracing::info!(node = %grant.node, session = %grant.session, token = ?grant.token, "granted");
                current_tx.send_replace(Some(grant.clone()));
            }
            RecipeEvent::Revoked(why) => {
                tracing::info!(?why, "revoked");
                current_tx.send_replace(None);
            }
            RecipeEvent::Ended => {}
        });
        CandidacyHandle { running, current }
    }

    /// The next transition; `None` once the candidacy has ended and all were read.
    pub(crate) async fn next_event(&mut self) -> Option<RecipeEvent> {
        self.running.events.recv().await
    }

    /// Give the grant back (and with `rejoin`, queue again).
    pub(crate) fn release(&self, rejoin: bool) {
        self.running.command(CandidacyCommand::Release { rejoin });
    }

    /// Close the candidacy and wait for its task to finish.
    pub(crate) async fn close(&self) {
        self.running.close().await;
    }
}

#[cfg(test)]
#[path = "candidacy_tests.rs"]
mod tests;

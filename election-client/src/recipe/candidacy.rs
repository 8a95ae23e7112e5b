//! The candidacy state machine shared by [`LeaderLatch`](super::LeaderLatch),
//! [`LeaderSelector`](super::LeaderSelector) and [`Mutex`](super::Mutex).
//!
//! A candidacy is a queue position under a parent znode: an ephemeral-sequential child
//! whose name carries a random per-attempt prefix ("protected mode", so a create whose
//! reply was lost is found again instead of duplicated). The first child in sequence
//! order holds the grant; every other child watches only its immediate predecessor, so a
//! departure wakes one waiter (no herd effect).
//!
//! The machine is sans-IO (STYLE.md rule 1): [`Candidacy::step`] takes the time and one
//! [`Input`] and returns the [`Output`]s to carry out: operations to run (each tagged with
//! an [`OpId`]), timers to set, and grant / revoke notifications. The driver
//! ([`super::driver`]) runs it on a single task, so only the current attempt can grant or
//! revoke (invariant 1 of docs/curator-recipes.md §7); results and watch events tagged with
//! any other id are stale and ignored (invariant 2), except that a stale successful create
//! deletes its node (CURATOR-18, CURATOR-498).
//!
//! # The lifecycle (the seed `leader-latch-session-expiry.txt`, DESIGN.md I5)
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
//!   also checks the candidate node still exists. Any failure returns to candidacy with
//!   backoff; nothing ends in idle (invariant 12).

use bytes::Bytes;

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

/// An operation the driver must run and answer with [`Input::Done`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    /// Create an `EPHEMERAL_SEQUENTIAL` child `name` of `parent`, creating missing
    /// parents as containers. Answer: [`OpResult::Created`] with the full path.
    CreateCandidate {
        /// The parent path.
        parent: String,
        /// The requested name (the server appends the sequence number).
        name: String,
        /// The node's data.
        data: Bytes,
    },
    /// List the children of `path`. Answer: [`OpResult::Children`].
    ListChildren {
        /// The parent path.
        path: String,
    },
    /// Read a node without a watch. Answer: [`OpResult::Read`].
    Read {
        /// The node.
        path: String,
    },
    /// Read a node and leave a one-shot watch on it. Answer: [`OpResult::Watching`];
    /// later, when the watch fires, [`Input::Watched`] with the same id.
    Watch {
        /// The node.
        path: String,
    },
    /// Create the epoch znode with data `0`, parents as persistent nodes. Answer:
    /// [`OpResult::EpochCreated`].
    CreateEpoch {
        /// The epoch znode.
        path: String,
    },
    /// In one multi: check that `candidate` exists, and set `epoch_path` to `value` if
    /// its version is `version`. Answer: [`OpResult::Bumped`].
    BumpEpoch {
        /// The candidate node that must still exist.
        candidate: String,
        /// The epoch znode.
        epoch_path: String,
        /// The version read before.
        version: i32,
        /// The new epoch.
        value: u64,
    },
    /// Delete a node, best effort (retry while connected; a missing node is success).
    /// No answer is expected.
    Delete {
        /// The node.
        path: String,
    },
}

/// The answer to an [`Op`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OpResult {
    /// For [`Op::CreateCandidate`]: the full path created.
    Created(Result<String, Error>),
    /// For [`Op::ListChildren`]: child names.
    Children(Result<Vec<String>, Error>),
    /// For [`Op::Read`].
    Read(Result<(Bytes, Stat), Error>),
    /// For [`Op::Watch`]: the node exists and the watch is armed.
    Watching(Result<Stat, Error>),
    /// For [`Op::CreateEpoch`].
    EpochCreated(Result<(), Error>),
    /// For [`Op::BumpEpoch`]: the epoch znode's stat after the increment.
    Bumped(Result<Stat, BumpError>),
}

/// One event for [`Candidacy::step`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Input {
    /// Begin participating (once).
    Start,
    /// Stop for good: revoke, delete the candidate node.
    Close,
    /// Give the grant back: delete the candidate node; with `rejoin`, queue again with a
    /// fresh candidate (LeaderSelector's requeue), else end.
    Release {
        /// Queue again after releasing.
        rejoin: bool,
    },
    /// A connection-state event, in the order the client published them.
    Conn(ConnectionState),
    /// The answer to the operation `id`.
    Done {
        /// The operation.
        id: OpId,
        /// Its result.
        result: OpResult,
    },
    /// The watch armed by the operation `id` fired.
    Watched {
        /// The operation that armed the watch.
        id: OpId,
    },
    /// The timer `id` expired.
    Timer {
        /// The timer.
        id: OpId,
    },
}

/// One thing for the driver to do, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Output {
    /// Run an operation.
    Op {
        /// Its id, to tag the answer.
        id: OpId,
        /// The operation.
        op: Op,
    },
    /// Feed [`Input::Timer`] with this id at `at_ms` (same clock as `now_ms`).
    Timer {
        /// The timer's id.
        id: OpId,
        /// When it expires.
        at_ms: u64,
    },
    /// The grant is proven (and fenced, if configured).
    Granted(Grant),
    /// The grant held since the last `Granted` is gone. Exactly one per `Granted`.
    Revoked(Revoked),
    /// The candidacy is over (closed, released without rejoin, or a lock lost with its
    /// session). Nothing more will be granted.
    Ended,
}

/// The candidate of one attempt: one node, one session.
#[derive(Debug, Clone)]
struct Participation {
    /// The session the node was (or is being) created under.
    session: SessionId,
    /// `_c_<nonce>-<attempt>-`: finds our node after a lost create reply.
    prefix: String,
    /// The child name once known.
    node: Option<String>,
}

/// What to do when a backoff timer fires.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Retry {
    Create,
    List,
}

/// What the machine is waiting for. Every variant but `Idle` and `Ended` has something
/// pending, which is what makes "idle while started and connected" impossible.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Step {
    /// Not started, or waiting for a connection.
    Idle,
    Creating {
        op: OpId,
    },
    Listing {
        op: OpId,
    },
    /// Reading our own node to prove ownership (we sorted first).
    Verifying {
        op: OpId,
    },
    /// Watching the predecessor (armed once its `Watching` answer came).
    Watching {
        watch: OpId,
        timer: Option<OpId>,
    },
    ReadingEpoch {
        op: OpId,
    },
    CreatingEpoch {
        op: OpId,
    },
    Bumping {
        op: OpId,
        value: u64,
    },
    /// Granted; watching our own node (CURATOR-171).
    Holding {
        watch: OpId,
        timer: Option<OpId>,
    },
    Backoff {
        timer: OpId,
        then: Retry,
    },
    Ended,
}

/// Stale prefixes kept for cleanup after a session loss; older ones are forgotten (their
/// nodes die with their session anyway).
const STALE_PREFIXES_MAX: usize = 16;

/// The candidacy state machine. See the module docs.
#[derive(Debug)]
pub struct Candidacy {
    cfg: CandidacyConfig,
    started: bool,
    closed: bool,
    /// The session while connected read-write; `None` while suspended, lost or read-only.
    conn: Option<SessionId>,
    part: Option<Participation>,
    step: Step,
    /// The grant currently reported to the holder.
    granted: Option<Grant>,
    /// In lock mode, this participation has been granted once.
    was_granted: bool,
    /// Nodes of retired participations, deleted once connected.
    stale_nodes: Vec<String>,
    /// Prefixes of retired participations whose node name was never learned.
    stale_prefixes: Vec<String>,
    next_id: u64,
    attempt: u64,
    failures: u32,
    rng: u64,
}

impl Candidacy {
    /// A new, not yet started candidacy.
    pub fn new(cfg: CandidacyConfig) -> Candidacy {
        let rng = cfg.nonce | 1;
        Candidacy {
            cfg,
            started: false,
            closed: false,
            conn: None,
            part: None,
            step: Step::Idle,
            granted: None,
            was_granted: false,
            stale_nodes: Vec::new(),
            stale_prefixes: Vec::new(),
            next_id: 0,
            attempt: 0,
            failures: 0,
            rng,
        }
    }

    /// The grant currently held, if any.
    pub fn granted(&self) -> Option<&Grant> {
        self.granted.as_ref()
    }

    /// The full path of the current candidate node, if known.
    pub fn node_path(&self) -> Option<String> {
        let part = self.part.as_ref()?;
        part.node.as_ref().map(|n| self.child_path(n))
    }

    /// True once the candidacy has ended.
    pub fn is_ended(&self) -> bool {
        self.step == Step::Ended
    }

    /// True while something is pending (an operation, a watch or a timer), or the
    /// machine waits for a connection, or it has ended. The "no permanent idle" check:
    /// false would mean started, connected and stuck.
    pub fn is_progressing(&self) -> bool {
        match self.step {
            Step::Idle => !self.started || self.conn.is_none(),
            Step::Creating { .. }
            | Step::Listing { .. }
            | Step::Verifying { .. }
            | Step::Watching { .. }
            | Step::ReadingEpoch { .. }
            | Step::CreatingEpoch { .. }
            | Step::Bumping { .. }
            | Step::Holding { .. }
            | Step::Backoff { .. }
            | Step::Ended => true,
        }
    }

    /// Process one input at time `now_ms`; returns what to do, in order.
    pub fn step(&mut self, now_ms: u64, input: Input) -> Vec<Output> {
        let mut out = Vec::new();
        match input {
            Input::Start => self.on_start(&mut out),
            Input::Close => self.on_close(&mut out),
            Input::Release { rejoin } => self.on_release(rejoin, &mut out),
            Input::Conn(state) => self.on_conn(state, &mut out),
            Input::Done { id, result } => self.on_done(now_ms, id, result, &mut out),
            Input::Watched { id } => self.on_watched(id, &mut out),
            Input::Timer { id } => self.on_timer(now_ms, id, &mut out),
        }
        out
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
                if self.part.as_ref().is_some_and(|p| p.session != session) {
                    self.revoke(Revoked::Lost, out);
                    self.retire_participation();
                }
                self.flush_stale_nodes(out);
                if !self.started || self.closed || self.step == Step::Ended {
                    return;
                }
                match &self.part {
                    // SUSPENDED -> RECONNECTED on the same session: same node, re-prove it
                    // (invariant 6; no reset, CURATOR-645).
                    Some(_) => self.list(out),
                    None => self.join(out),
                }
            }
            ConnectionState::Suspended | ConnectionState::ReadOnly { .. } => {
                // Stop acting at once; a read-only server cannot fence (invariant 15).
                self.conn = None;
                self.revoke(Revoked::Suspended, out);
                self.wait_for_connection();
            }
            ConnectionState::Lost => {
                self.conn = None;
                // Revoke first, then discard: the old node belongs to a dead session.
                let had_grant = self.revoke(Revoked::Lost, out) || self.was_granted;
                self.retire_participation();
                self.wait_for_connection();
                if self.cfg.mode == Mode::Lock && had_grant && self.started {
                    self.end(out);
                }
            }
        }
    }

    fn on_done(&mut self, now_ms: u64, id: OpId, result: OpResult, out: &mut Vec<Output>) {
        if !self.is_pending(id) {
            self.on_stale(result, out);
            return;
        }
        match result {
            OpResult::Created(r) => self.on_created(now_ms, r, out),
            OpResult::Children(r) => self.on_children(now_ms, r, out),
            OpResult::Read(r) => self.on_read(now_ms, r, out),
            OpResult::Watching(r) => self.on_watching(now_ms, r, out),
            OpResult::EpochCreated(r) => self.on_epoch_created(now_ms, r, out),
            OpResult::Bumped(r) => self.on_bumped(now_ms, r, out),
        }
    }

    fn on_watched(&mut self, id: OpId, out: &mut Vec<Output>) {
        match self.step {
            Step::Watching { watch, .. } | Step::Holding { watch, .. } if watch == id => {
                self.list(out)
            }
            _ => {}
        }
    }

    fn on_timer(&mut self, now_ms: u64, id: OpId, out: &mut Vec<Output>) {
        let _ = now_ms;
        match self.step {
            Step::Backoff { timer, then } if timer == id => match then {
                Retry::Create => self.create(out),
                Retry::List => self.list(out),
            },
            // The periodic self-check (invariant 12).
            Step::Watching {
                timer: Some(timer), ..
            }
            | Step::Holding {
                timer: Some(timer), ..
            } if timer == id => self.list(out),
            _ => {}
        }
    }

    // ----- operation results ---------------------------------------------------------

    fn on_stale(&mut self, result: OpResult, out: &mut Vec<Output>) {
        // A create that succeeded after its attempt was retired leaves a node nobody
        // owns: delete it (CURATOR-18, CURATOR-498). A stale create of the *current*
        // participation is left alone: the next listing adopts it by its prefix.
        let OpResult::Created(Ok(path)) = result else {
            return;
        };
        let current = self.part.as_ref().is_some_and(|p| {
            !self.closed && Some(p.session) == self.conn && name_of(&path).starts_with(&p.prefix)
        });
        if !current {
            self.push_op(Op::Delete { path }, out);
        }
    }

    fn on_created(&mut self, now_ms: u64, r: Result<String, Error>, out: &mut Vec<Output>) {
        match r {
            Ok(path) => {
                self.failures = 0;
                if let Some(part) = self.part.as_mut() {
                    part.node = Some(name_of(&path).to_owned());
                }
                self.list(out);
            }
            // The parent vanished between its creation and ours (container GC): retry,
            // never ignore (CURATOR-724, the seed's check-then-GC race).
            Err(Error::NoNode { .. }) => self.backoff(now_ms, Retry::Create, out),
            // The reply was lost: the node may exist. Find it by prefix before creating.
            Err(e) if e.is_connection_loss() => self.backoff(now_ms, Retry::List, out),
            Err(_) => self.backoff(now_ms, Retry::Create, out),
        }
    }

    fn on_children(&mut self, now_ms: u64, r: Result<Vec<String>, Error>, out: &mut Vec<Output>) {
        let children = match r {
            Ok(children) => children,
            // The parent is gone, so our node is gone with it: a fresh candidate, parents
            // recreated (CURATOR-724).
            Err(Error::NoNode { .. }) => {
                self.revoke(Revoked::NotProven, out);
                self.rejoin_same_session(out);
                return;
            }
            Err(_) => {
                self.backoff(now_ms, Retry::List, out);
                return;
            }
        };
        self.cleanup_stale_prefixes(&children, out);
        let Some(part) = self.part.as_mut() else {
            return;
        };
        if part.node.is_none() {
            // Adopt the node of a create whose reply was lost (protected mode).
            part.node = children
                .iter()
                .find(|c| c.starts_with(&part.prefix))
                .cloned();
        }
        let Some(me) = part.node.clone() else {
            // Our create never happened: create it now, same attempt.
            self.create(out);
            return;
        };
        let mut sorted: Vec<&String> = children.iter().collect();
        let name = self.cfg.name.as_str();
        sorted.sort_by(|a, b| (sequence_of(a, name), *a).cmp(&(sequence_of(b, name), *b)));
        match sorted.iter().position(|c| **c == me) {
            None => {
                // Our node is gone (deleted, or its session ended): a new one. Another
                // node vanishing never leads here (CURATOR-645).
                self.revoke(Revoked::NotProven, out);
                self.rejoin_same_session(out);
            }
            Some(0) => {
                let path = self.child_path(&me);
                let op = self.push_op(Op::Read { path }, out);
                self.step = Step::Verifying { op };
            }
            Some(i) => {
                // Not first: any grant is not proven any more (CURATOR-653).
                self.revoke(Revoked::NotProven, out);
                let path = self.child_path(sorted[i - 1]);
                let watch = self.push_op(Op::Watch { path }, out);
                self.step = Step::Watching { watch, timer: None };
            }
        }
    }

    fn on_verified(&mut self, now_ms: u64, r: Result<(Bytes, Stat), Error>, out: &mut Vec<Output>) {
        let stat = match r {
            Ok((_, stat)) => stat,
            Err(Error::NoNode { .. }) => {
                self.revoke(Revoked::NotProven, out);
                self.rejoin_same_session(out);
                return;
            }
            Err(_) => {
                self.backoff(now_ms, Retry::List, out);
                return;
            }
        };
        let (Some(session), Some(part)) = (self.conn, self.part.as_ref()) else {
            return;
        };
        // CURATOR-696: sorting first proves nothing about the session; the node must be
        // owned by the session we are connected with.
        if stat.ephemeral_owner != session || part.session != session {
            self.revoke(Revoked::NotProven, out);
            self.retire_participation();
            self.join(out);
            return;
        }
        let node = self.node_path().unwrap_or_default();
        if let Some(g) = &self.granted {
            if g.node == node && g.session == session {
                // Still proven: keep the grant and its token.
                self.hold(now_ms, out);
                return;
            }
        }
        match self.cfg.epoch_path.clone() {
            Some(path) => {
                let op = self.push_op(Op::Read { path }, out);
                self.step = Step::ReadingEpoch { op };
            }
            None => self.grant(now_ms, session, node, None, out),
        }
    }

    fn on_watching(&mut self, now_ms: u64, r: Result<Stat, Error>, out: &mut Vec<Output>) {
        let holding = matches!(self.step, Step::Holding { .. });
        match r {
            Ok(_) => {
                self.failures = 0;
                if let Some(recheck) = self.cfg.recheck_ms {
                    let timer = self.push_timer(now_ms + recheck, out);
                    match &mut self.step {
                        Step::Watching { timer: t, .. } | Step::Holding { timer: t, .. } => {
                            *t = Some(timer)
                        }
                        _ => {}
                    }
                }
            }
            // Our own node vanished while holding: the grant is gone.
            Err(Error::NoNode { .. }) if holding => {
                self.revoke(Revoked::NotProven, out);
                self.rejoin_same_session(out);
            }
            // The predecessor is already gone: re-list, do not reset (CURATOR-645).
            Err(Error::NoNode { .. }) => self.list(out),
            Err(_) => self.backoff(now_ms, Retry::List, out),
        }
    }

    fn on_epoch_read(
        &mut self,
        now_ms: u64,
        r: Result<(Bytes, Stat), Error>,
        out: &mut Vec<Output>,
    ) {
        let epoch_path = self.cfg.epoch_path.clone().unwrap_or_default();
        let (data, stat) = match r {
            Ok(v) => v,
            Err(Error::NoNode { .. }) => {
                let op = self.push_op(Op::CreateEpoch { path: epoch_path }, out);
                self.step = Step::CreatingEpoch { op };
                return;
            }
            Err(_) => {
                self.backoff(now_ms, Retry::List, out);
                return;
            }
        };
        let Some(current) = parse_epoch(&data) else {
            // Not ours to repair: keep retrying (visible in the driver's log) rather than
            // overwrite someone's data or panic.
            self.backoff(now_ms, Retry::List, out);
            return;
        };
        let Some(candidate) = self.node_path() else {
            self.rejoin_same_session(out);
            return;
        };
        let value = current.saturating_add(1);
        let op = self.push_op(
            Op::BumpEpoch {
                candidate,
                epoch_path,
                version: stat.version,
                value,
            },
            out,
        );
        self.step = Step::Bumping { op, value };
    }

    fn on_epoch_created(&mut self, now_ms: u64, r: Result<(), Error>, out: &mut Vec<Output>) {
        match r {
            Ok(()) | Err(Error::NodeExists { .. }) => {
                let path = self.cfg.epoch_path.clone().unwrap_or_default();
                let op = self.push_op(Op::Read { path }, out);
                self.step = Step::ReadingEpoch { op };
            }
            Err(_) => self.backoff(now_ms, Retry::List, out),
        }
    }

    fn on_bumped(&mut self, now_ms: u64, r: Result<Stat, BumpError>, out: &mut Vec<Output>) {
        let Step::Bumping { value, .. } = self.step else {
            return;
        };
        match r {
            Ok(stat) => {
                let (Some(session), Some(node)) = (self.conn, self.node_path()) else {
                    return;
                };
                let token = FencingToken {
                    epoch: value,
                    zxid: stat.mzxid,
                };
                self.grant(now_ms, session, node, Some(token), out);
            }
            // Someone else fenced in between: stay a candidate, look again later.
            Err(BumpError::EpochMoved) => self.backoff(now_ms, Retry::List, out),
            Err(BumpError::EpochMissing) => {
                let path = self.cfg.epoch_path.clone().unwrap_or_default();
                let op = self.push_op(Op::CreateEpoch { path }, out);
                self.step = Step::CreatingEpoch { op };
            }
            Err(BumpError::CandidateGone) => self.rejoin_same_session(out),
            Err(BumpError::Other(_)) => self.backoff(now_ms, Retry::List, out),
        }
    }

    // ----- actions -------------------------------------------------------------------

    /// Begin a participation on the current session: reuse nothing from another session.
    fn join(&mut self, out: &mut Vec<Output>) {
        let Some(session) = self.conn else {
            self.step = Step::Idle;
            return;
        };
        self.attempt += 1;
        self.was_granted = false;
        self.part = Some(Participation {
            session,
            prefix: format!("_c_{:016x}-{:x}-", self.cfg.nonce, self.attempt),
            node: None,
        });
        self.create(out);
    }

    /// Our node is gone while the session lives: a new candidate on the same session.
    fn rejoin_same_session(&mut self, out: &mut Vec<Output>) {
        self.part = None;
        if self.cfg.mode == Mode::Lock && self.was_granted {
            self.end(out);
            return;
        }
        self.join(out);
    }

    fn create(&mut self, out: &mut Vec<Output>) {
        let Some(part) = self.part.as_ref() else {
            self.join(out);
            return;
        };
        let op = Op::CreateCandidate {
            parent: self.cfg.path.clone(),
            name: format!("{}{}", part.prefix, self.cfg.name),
            data: self.cfg.data.clone(),
        };
        let op = self.push_op(op, out);
        self.step = Step::Creating { op };
    }

    fn list(&mut self, out: &mut Vec<Output>) {
        if self.part.is_none() {
            self.join(out);
            return;
        }
        let op = self.push_op(
            Op::ListChildren {
                path: self.cfg.path.clone(),
            },
            out,
        );
        self.step = Step::Listing { op };
    }

    fn hold(&mut self, _now_ms: u64, out: &mut Vec<Output>) {
        let Some(path) = self.node_path() else {
            return;
        };
        let watch = self.push_op(Op::Watch { path }, out);
        self.step = Step::Holding { watch, timer: None };
    }

    fn grant(
        &mut self,
        now_ms: u64,
        session: SessionId,
        node: String,
        token: Option<FencingToken>,
        out: &mut Vec<Output>,
    ) {
        self.failures = 0;
        self.was_granted = true;
        let grant = Grant {
            node,
            session,
            token,
        };
        self.granted = Some(grant.clone());
        out.push(Output::Granted(grant));
        self.hold(now_ms, out);
    }

    /// Revoke the grant if there is one; true if there was.
    fn revoke(&mut self, why: Revoked, out: &mut Vec<Output>) -> bool {
        if self.granted.take().is_some() {
            out.push(Output::Revoked(why));
            return true;
        }
        false
    }

    fn backoff(&mut self, now_ms: u64, then: Retry, out: &mut Vec<Output>) {
        let exp = self.failures.min(16);
        self.failures = self.failures.saturating_add(1);
        let base = self
            .cfg
            .backoff_min_ms
            .saturating_mul(1u64 << exp)
            .min(self.cfg.backoff_max_ms);
        let delay = base + self.jitter(base / 2 + 1);
        let timer = self.push_timer(now_ms + delay, out);
        self.step = Step::Backoff { timer, then };
    }

    /// Forget in-flight work; everything tagged before now is stale.
    fn wait_for_connection(&mut self) {
        if self.step != Step::Ended {
            self.step = Step::Idle;
        }
    }

    /// Retire the participation of a dead session: its node is deleted once connected.
    fn retire_participation(&mut self) {
        let Some(part) = self.part.take() else {
            return;
        };
        match part.node {
            Some(node) => {
                let path = self.child_path(&node);
                self.stale_nodes.push(path);
            }
            None => {
                if self.stale_prefixes.len() == STALE_PREFIXES_MAX {
                    self.stale_prefixes.remove(0);
                }
                self.stale_prefixes.push(part.prefix);
            }
        }
    }

    /// Give up the participation now (release or close): delete its node.
    fn discard_participation(&mut self, out: &mut Vec<Output>) {
        self.retire_participation();
        self.flush_stale_nodes(out);
    }

    fn flush_stale_nodes(&mut self, out: &mut Vec<Output>) {
        if self.conn.is_none() && !self.closed {
            return;
        }
        for path in std::mem::take(&mut self.stale_nodes) {
            self.push_op(Op::Delete { path }, out);
        }
    }

    fn cleanup_stale_prefixes(&mut self, children: &[String], out: &mut Vec<Output>) {
        if self.stale_prefixes.is_empty() {
            return;
        }
        let stale: Vec<String> = children
            .iter()
            .filter(|c| {
                self.stale_prefixes
                    .iter()
                    .any(|p| c.starts_with(p.as_str()))
            })
            .cloned()
            .collect();
        for child in stale {
            self.stale_prefixes
                .retain(|p| !child.starts_with(p.as_str()));
            let path = self.child_path(&child);
            self.push_op(Op::Delete { path }, out);
        }
    }

    fn end(&mut self, out: &mut Vec<Output>) {
        if self.step == Step::Ended {
            return;
        }
        self.step = Step::Ended;
        out.push(Output::Ended);
    }

    // ----- helpers -------------------------------------------------------------------

    fn is_pending(&self, id: OpId) -> bool {
        match self.step {
            Step::Creating { op }
            | Step::Listing { op }
            | Step::Verifying { op }
            | Step::ReadingEpoch { op }
            | Step::CreatingEpoch { op }
            | Step::Bumping { op, .. } => op == id,
            Step::Watching { watch, .. } | Step::Holding { watch, .. } => watch == id,
            Step::Idle | Step::Backoff { .. } | Step::Ended => false,
        }
    }

    fn push_op(&mut self, op: Op, out: &mut Vec<Output>) -> OpId {
        let id = self.next_op_id();
        out.push(Output::Op { id, op });
        id
    }

    fn push_timer(&mut self, at_ms: u64, out: &mut Vec<Output>) -> OpId {
        let id = self.next_op_id();
        out.push(Output::Timer { id, at_ms });
        id
    }

    fn next_op_id(&mut self) -> OpId {
        self.next_id += 1;
        OpId(self.next_id)
    }

    fn jitter(&mut self, bound: u64) -> u64 {
        // xorshift64: deterministic per nonce, so every test replays.
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        self.rng % bound.max(1)
    }

    fn child_path(&self, child: &str) -> String {
        join_path(&self.cfg.path, child)
    }
}

impl Candidacy {
    /// The own-node watch while holding (tests deliver its event).
    #[cfg(test)]
    fn step_snapshot(&self) -> Option<OpId> {
        match self.step {
            Step::Holding { watch, .. } => Some(watch),
            _ => None,
        }
    }

    // `Read` answers both the ownership check and the epoch read; route by step.
    fn on_read(&mut self, now_ms: u64, r: Result<(Bytes, Stat), Error>, out: &mut Vec<Output>) {
        if matches!(self.step, Step::ReadingEpoch { .. }) {
            self.on_epoch_read(now_ms, r, out);
        } else {
            self.on_verified(now_ms, r, out);
        }
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

#[cfg(test)]
#[path = "candidacy_tests.rs"]
mod tests;

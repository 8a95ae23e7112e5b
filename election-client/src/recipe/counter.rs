//! [`SharedCounter`] (Curator's `SharedCount` / `DistributedAtomicLong`): a 64-bit counter
//! in one znode, changed by compare-and-set on its version, with a stream of the values
//! it takes.
//!
//! The value is 8 bytes, big-endian (empty data counts as 0), the layout of Curator's
//! `DistributedAtomicLong`, so both can share a counter.
//!
//! # Exactly once
//! A write whose reply is lost (`CONNECTIONLOSS`, a suspension, a session loss) may or
//! may not have been applied. Curator's `DistributedAtomicLong` retries it or reports a
//! failure, so an increment can be counted twice or reported lost although applied.
//! Here every write is a multi that also creates a marker child of the counter node
//! (`_op-<nonce>-<n>`, persistent, deleted by the next write of the same handle); when the
//! outcome is unknown, the machine syncs and looks for the marker on the next connection:
//! present means applied, absent means not (and then it retries). [`SharedCounter::add`]
//! therefore returns only after its increment is applied exactly once, and says so. A
//! handle that is closed deletes its last marker; a process that dies leaves at most one
//! empty marker behind.
//!
//! # Across connection states
//! - `SUSPENDED` / `READ_ONLY` / `LOST`: [`CounterEvent::Stale`] at once: the value may be
//!   behind. Commands wait (they are not failed); an unknown outcome is resolved as above.
//! - `RECONNECTED` (same session or a new one): the counter is read again (a new watch),
//!   [`CounterEvent::Changed`] if it moved, then [`CounterEvent::Synced`].
//! - The change stream reports every version this handle observes, in order; ZooKeeper
//!   watches are one-shot, so updates by others in quick succession can be coalesced
//!   (the version tells how many there were). The counter's own writes are reported
//!   when applied.
//! - A missing counter node is created with the initial value (parents persistent);
//!   every failure is retried with backoff; while started and connected a watch, a call
//!   or a timer is always pending.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex as StdMutex};

use bytes::Bytes;
use rzk_wire::CreateMode;
use rzk_zxid::Zxid;
use tokio::sync::{oneshot, watch};

use super::engine::{Backoff, Call, Ids, Input, Machine, Output, Reply, Running};
use super::ids::{join_path, OpId};
use super::latch::rand_nonce;
use super::ops::RecipeOps;
use crate::client::{Op as MultiOp, OpResult as MultiResult};
use crate::error::{Error, Result};
use crate::state::ConnectionState;
use crate::types::Stat;

/// Settings of a [`SharedCounter`].
#[derive(Debug, Clone)]
pub struct CounterConfig {
    /// The counter's znode.
    pub path: String,
    /// The value it is created with when missing.
    pub initial: i64,
    /// First retry delay, ms.
    pub backoff_min_ms: u64,
    /// Largest retry delay, ms.
    pub backoff_max_ms: u64,
    /// Re-read this long after each read even without a watch event (self-check), ms.
    pub recheck_ms: u64,
    /// Makes marker names unique to this handle and seeds the jitter.
    pub nonce: u64,
}

impl CounterConfig {
    /// A counter at `path`, created as 0 when missing.
    pub fn new(path: impl Into<String>) -> CounterConfig {
        CounterConfig {
            path: path.into(),
            initial: 0,
            backoff_min_ms: 20,
            backoff_max_ms: 2_000,
            recheck_ms: 10_000,
            nonce: rand_nonce(),
        }
    }

    /// The value the counter is created with when missing.
    pub fn initial(mut self, value: i64) -> CounterConfig {
        self.initial = value;
        self
    }
}

/// One observed value of the counter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CounterValue {
    /// The value.
    pub value: i64,
    /// The znode's version: compare-and-set against it.
    pub version: i32,
    /// The znode's creation zxid (versions restart if it is deleted and re-created).
    pub czxid: Zxid,
    /// The zxid of the write that produced this value.
    pub mzxid: Zxid,
}

impl CounterValue {
    fn from_stat(value: i64, stat: &Stat) -> CounterValue {
        CounterValue {
            value,
            version: stat.version,
            czxid: stat.czxid,
            mzxid: stat.mzxid,
        }
    }

    fn is_newer_than(&self, other: &CounterValue) -> bool {
        self.czxid != other.czxid || self.mzxid > other.mzxid
    }
}

/// What the counter reports, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CounterEvent {
    /// A new value was observed (or written by this handle).
    Changed(CounterValue),
    /// Disconnected: the last value may be behind.
    Stale,
    /// Read again after a reconnect; every change up to this value has been reported.
    Synced(CounterValue),
}

/// A write asked of the machine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CounterWrite {
    /// Add `delta` (retried on conflicts until applied).
    Add(i64),
    /// Set `value` if the version is still `version` (no retry on a conflict).
    CompareAndSet {
        /// The version the caller saw.
        version: i32,
        /// The new value.
        value: i64,
    },
    /// Set `value` whatever the version.
    Set(i64),
}

/// Commands to a [`CounterMachine`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CounterCommand {
    /// Echoed in the answer.
    pub request: u64,
    /// The write.
    pub write: CounterWrite,
}

/// What a [`CounterMachine`] emits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CounterOutput {
    /// For the holder's stream.
    Event(CounterEvent),
    /// The answer to a command: the value after the write, `None` for a compare-and-set
    /// whose version had moved.
    Answer {
        /// The command's request number.
        request: u64,
        /// Its outcome.
        result: Result<Option<CounterValue>>,
    },
}

/// The observer: a read with a watch, re-armed after every event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Observe {
    Idle,
    Reading { op: OpId },
    Armed { watch: OpId, timer: OpId },
    Creating { op: OpId },
    Backoff { timer: OpId },
}

/// The command being carried out.
#[derive(Debug, Clone)]
struct Writing {
    cmd: CounterCommand,
    phase: Phase,
    /// Conflicts in a row (an add under contention).
    conflicts: u32,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Phase {
    /// Waiting for a connection (or a backoff) before reading.
    Ready,
    /// Reading the current value and version.
    Reading {
        op: OpId,
    },
    /// Creating the missing counter node.
    Creating {
        op: OpId,
    },
    /// The multi is in flight.
    Sending {
        op: OpId,
        marker: String,
        new: i64,
    },
    /// The multi's outcome is unknown: on the next connection, sync, then look for the
    /// marker.
    Unsure {
        marker: String,
        new: i64,
    },
    Syncing {
        op: OpId,
        marker: String,
        new: i64,
    },
    Checking {
        op: OpId,
        marker: String,
        new: i64,
    },
    /// A pause after a failure; then `resume`.
    Backoff {
        timer: OpId,
        resume: Box<Phase>,
    },
}

impl Phase {
    /// What this phase becomes when the connection drops: whatever was in flight is
    /// lost with it; a sent write's outcome is unknown.
    fn on_disconnect(self) -> Phase {
        match self {
            Phase::Ready | Phase::Reading { .. } | Phase::Creating { .. } => Phase::Ready,
            Phase::Sending { marker, new, .. }
            | Phase::Unsure { marker, new }
            | Phase::Syncing { marker, new, .. }
            | Phase::Checking { marker, new, .. } => Phase::Unsure { marker, new },
            Phase::Backoff { resume, .. } => *resume,
        }
    }

    /// The call or timer this phase waits for.
    fn waits_for(&self) -> Option<OpId> {
        match self {
            Phase::Reading { op }
            | Phase::Creating { op }
            | Phase::Sending { op, .. }
            | Phase::Syncing { op, .. }
            | Phase::Checking { op, .. } => Some(*op),
            Phase::Backoff { timer, .. } => Some(*timer),
            Phase::Ready | Phase::Unsure { .. } => None,
        }
    }
}

/// The counter's state machine (see the module docs). Public so its transitions can be
/// tested and driven without a server.
#[derive(Debug)]
pub struct CounterMachine {
    cfg: CounterConfig,
    ids: Ids,
    backoff: Backoff,
    started: bool,
    closed: bool,
    conn: Option<bool>,
    observe: Observe,
    /// The last value reported.
    last: Option<CounterValue>,
    stale: bool,
    queue: VecDeque<CounterCommand>,
    writing: Option<Writing>,
    /// The marker of this handle's last applied write (deleted by the next one).
    marker: Option<String>,
    markers_made: u64,
    /// On close: the last marker's delete.
    closing: Option<OpId>,
}

impl CounterMachine {
    /// A machine for `cfg`, not started.
    pub fn new(cfg: CounterConfig) -> CounterMachine {
        let backoff = Backoff::new(cfg.backoff_min_ms, cfg.backoff_max_ms, cfg.nonce);
        CounterMachine {
            cfg,
            ids: Ids::default(),
            backoff,
            started: false,
            closed: false,
            conn: None,
            observe: Observe::Idle,
            last: None,
            stale: false,
            queue: VecDeque::new(),
            writing: None,
            marker: None,
            markers_made: 0,
            closing: None,
        }
    }

    /// The last value reported.
    pub fn last(&self) -> Option<CounterValue> {
        self.last
    }

    /// True while connected and the last read is current (no resync pending).
    pub fn is_synced(&self) -> bool {
        self.conn == Some(true) && !self.stale && matches!(self.observe, Observe::Armed { .. })
    }

    /// The "never idle" check: false would mean started, connected and stuck.
    pub fn is_progressing(&self) -> bool {
        if !self.started || self.closed || self.conn != Some(true) {
            return true;
        }
        let observing = !matches!(self.observe, Observe::Idle);
        let writing_ok = match &self.writing {
            None => self.queue.is_empty(),
            Some(w) => !matches!(w.phase, Phase::Ready | Phase::Unsure { .. }),
        };
        observing && writing_ok
    }

    fn connected(&self) -> bool {
        self.conn == Some(true)
    }

    fn event(&mut self, e: CounterEvent, out: &mut Vec<Output<CounterOutput>>) {
        out.push(Output::Emit(CounterOutput::Event(e)));
    }

    /// A value seen (read or written): report it if it is newer.
    fn observed(&mut self, v: CounterValue, out: &mut Vec<Output<CounterOutput>>) {
        let newer = self.last.is_none_or(|l| v.is_newer_than(&l));
        if newer {
            self.last = Some(v);
            self.event(CounterEvent::Changed(v), out);
        }
    }

    // ----- the observer ----------------------------------------------------------------

    fn read(&mut self, out: &mut Vec<Output<CounterOutput>>) {
        let op = self.ids.call(
            Call::GetData {
                path: self.cfg.path.clone(),
                watch: true,
            },
            out,
        );
        self.observe = Observe::Reading { op };
    }

    fn create_node(&mut self, out: &mut Vec<Output<CounterOutput>>) -> OpId {
        self.ids.call(
            Call::Create {
                path: self.cfg.path.clone(),
                data: encode(self.cfg.initial),
                mode: CreateMode::Persistent,
                ttl_ms: None,
                parents: Some(CreateMode::Persistent),
            },
            out,
        )
    }

    fn on_read(
        &mut self,
        now_ms: u64,
        id: OpId,
        r: Result<(Bytes, Stat)>,
        out: &mut Vec<Output<CounterOutput>>,
    ) {
        match r {
            Ok((data, stat)) => match decode(&self.cfg.path, &data) {
                Ok(value) => {
                    self.backoff.reset();
                    self.observed(CounterValue::from_stat(value, &stat), out);
                    let timer = self.ids.timer(now_ms + self.cfg.recheck_ms.max(1), out);
                    self.observe = Observe::Armed { watch: id, timer };
                    if self.stale {
                        self.stale = false;
                        if let Some(v) = self.last {
                            self.event(CounterEvent::Synced(v), out);
                        }
                    }
                }
                Err(e) => {
                    // Not a counter: keep looking (visible in the log), never overwrite.
                    tracing::warn!(error = %e, "the counter znode does not hold a counter");
                    out.push(Output::Unwatch { id });
                    self.observe_backoff(now_ms, out);
                }
            },
            Err(Error::NoNode { .. }) => {
                let op = self.create_node(out);
                self.observe = Observe::Creating { op };
            }
            Err(_) => self.observe_backoff(now_ms, out),
        }
    }

    fn observe_backoff(&mut self, now_ms: u64, out: &mut Vec<Output<CounterOutput>>) {
        let delay = self.backoff.next_delay_ms();
        let timer = self.ids.timer(now_ms + delay, out);
        self.observe = Observe::Backoff { timer };
    }

    // ----- the writer ------------------------------------------------------------------

    /// Start the next command if none is running.
    fn next_write(&mut self, out: &mut Vec<Output<CounterOutput>>) {
        if self.writing.is_none() {
            if let Some(cmd) = self.queue.pop_front() {
                self.writing = Some(Writing {
                    cmd,
                    phase: Phase::Ready,
                    conflicts: 0,
                });
            }
        }
        self.pump_write(out);
    }

    /// Move the current command forward if it is waiting for a connection.
    fn pump_write(&mut self, out: &mut Vec<Output<CounterOutput>>) {
        if !self.connected() {
            return;
        }
        let Some(w) = self.writing.as_ref() else {
            return;
        };
        if self.closed && w.phase == Phase::Ready {
            // Resolved as not applied after close: not sent again.
            self.answer(Err(Error::Closed), out);
            return;
        }
        match w.phase.clone() {
            Phase::Ready => match (w.cmd.write, self.last) {
                // A known version: send at once; a conflict re-reads.
                (CounterWrite::Add(delta), Some(v)) if !self.stale && w.conflicts == 0 => {
                    self.send(Some(v), v.value.wrapping_add(delta), out)
                }
                (CounterWrite::CompareAndSet { version, value }, _) => {
                    let v = CounterValue {
                        value,
                        version,
                        czxid: Zxid::from_u64(0),
                        mzxid: Zxid::from_u64(0),
                    };
                    self.send(Some(v), value, out)
                }
                (CounterWrite::Set(value), _) => self.send(None, value, out),
                (CounterWrite::Add(_), _) => {
                    let op = self.ids.call(
                        Call::GetData {
                            path: self.cfg.path.clone(),
                            watch: false,
                        },
                        out,
                    );
                    self.set_phase(Phase::Reading { op });
                }
            },
            Phase::Unsure { marker, new } => {
                // ZK-read-your-writes across servers: a reconnect may land on a member
                // that has not applied our write yet; sync first.
                let op = self.ids.call(
                    Call::Sync {
                        path: self.cfg.path.clone(),
                    },
                    out,
                );
                self.set_phase(Phase::Syncing { op, marker, new });
            }
            Phase::Reading { .. }
            | Phase::Creating { .. }
            | Phase::Sending { .. }
            | Phase::Syncing { .. }
            | Phase::Checking { .. }
            | Phase::Backoff { .. } => {}
        }
    }

    fn set_phase(&mut self, phase: Phase) {
        if let Some(w) = self.writing.as_mut() {
            w.phase = phase;
        }
    }

    /// The multi: set the value (at the version for an add or a compare-and-set), create
    /// this write's marker, delete the previous one.
    fn send(&mut self, at: Option<CounterValue>, new: i64, out: &mut Vec<Output<CounterOutput>>) {
        self.markers_made += 1;
        let marker = join_path(
            &self.cfg.path,
            &format!("_op-{:016x}-{}", self.cfg.nonce, self.markers_made),
        );
        let mut ops = vec![
            MultiOp::SetData {
                path: self.cfg.path.clone(),
                data: encode(new),
                version: at.map(|v| v.version).unwrap_or(-1),
            },
            MultiOp::Create {
                path: marker.clone(),
                data: Bytes::new(),
                mode: CreateMode::Persistent,
            },
        ];
        if let Some(prev) = self.marker.clone() {
            ops.push(MultiOp::Delete {
                path: prev,
                version: -1,
            });
        }
        let op = self.ids.call(Call::Multi { ops }, out);
        self.set_phase(Phase::Sending { op, marker, new });
    }

    fn answer(
        &mut self,
        result: Result<Option<CounterValue>>,
        out: &mut Vec<Output<CounterOutput>>,
    ) {
        if let Some(w) = self.writing.take() {
            out.push(Output::Emit(CounterOutput::Answer {
                request: w.cmd.request,
                result,
            }));
        }
        self.next_write(out);
    }

    fn write_backoff(&mut self, now_ms: u64, resume: Phase, out: &mut Vec<Output<CounterOutput>>) {
        let delay = self.backoff.next_delay_ms();
        let timer = self.ids.timer(now_ms + delay, out);
        self.set_phase(Phase::Backoff {
            timer,
            resume: Box::new(resume),
        });
    }

    fn on_write_done(&mut self, now_ms: u64, reply: Reply, out: &mut Vec<Output<CounterOutput>>) {
        let Some(w) = self.writing.clone() else {
            return;
        };
        match (w.phase, reply) {
            (Phase::Reading { .. }, Reply::Data(r)) => match r {
                Ok((data, stat)) => match decode(&self.cfg.path, &data) {
                    Ok(value) => {
                        let v = CounterValue::from_stat(value, &stat);
                        self.observed(v, out);
                        let delta = match w.cmd.write {
                            CounterWrite::Add(d) => d,
                            CounterWrite::CompareAndSet { .. } | CounterWrite::Set(_) => 0,
                        };
                        self.send(Some(v), value.wrapping_add(delta), out);
                    }
                    Err(e) => self.answer(Err(e), out),
                },
                Err(Error::NoNode { .. }) => {
                    let op = self.create_node(out);
                    self.set_phase(Phase::Creating { op });
                }
                Err(e) if transient(&e) => self.write_backoff(now_ms, Phase::Ready, out),
                Err(e) => self.answer(Err(e), out),
            },
            (Phase::Creating { .. }, Reply::Created(r)) => match r {
                Ok(_) | Err(Error::NodeExists { .. }) => {
                    self.set_phase(Phase::Ready);
                    if let Some(w) = self.writing.as_mut() {
                        // The version is unknown now: read it first.
                        w.conflicts = w.conflicts.max(1);
                    }
                    self.pump_write(out);
                }
                Err(e) if transient(&e) => self.write_backoff(now_ms, Phase::Ready, out),
                Err(e) => self.answer(Err(e), out),
            },
            (Phase::Sending { marker, new, .. }, Reply::Multi(r)) => {
                self.on_sent(now_ms, w.cmd, marker, new, r, out)
            }
            (Phase::Syncing { marker, new, .. }, Reply::Synced(r)) => match r {
                Ok(()) => {
                    let op = self.ids.call(
                        Call::Exists {
                            path: marker.clone(),
                            watch: false,
                        },
                        out,
                    );
                    self.set_phase(Phase::Checking { op, marker, new });
                }
                Err(_) => self.unsure_later(now_ms, marker, new, out),
            },
            (Phase::Checking { marker, new, .. }, Reply::Exists(r)) => match r {
                // Applied: the marker exists only if the whole multi did.
                Ok(Some(_)) => {
                    self.marker = Some(marker);
                    // The version it produced is not known; the observer reads it.
                    let v = CounterValue {
                        value: new,
                        version: -1,
                        czxid: Zxid::from_u64(0),
                        mzxid: Zxid::from_u64(0),
                    };
                    self.answer(Ok(Some(v)), out);
                }
                // Not applied: do it again (a compare-and-set re-checks its version).
                Ok(None) => {
                    self.set_phase(Phase::Ready);
                    if let Some(w) = self.writing.as_mut() {
                        w.conflicts = w.conflicts.max(1);
                    }
                    self.pump_write(out);
                }
                Err(_) => self.unsure_later(now_ms, marker, new, out),
            },
            // A reply of the wrong shape cannot happen: start the command over.
            (_, _) => self.write_backoff(now_ms, Phase::Ready, out),
        }
    }

    fn on_sent(
        &mut self,
        now_ms: u64,
        cmd: CounterCommand,
        marker: String,
        new: i64,
        r: Result<Vec<MultiResult>>,
        out: &mut Vec<Output<CounterOutput>>,
    ) {
        match r {
            Ok(results) => {
                self.marker = Some(marker);
                self.backoff.reset();
                let stat = results.first().and_then(|r| match r {
                    MultiResult::SetData(s) => Some(*s),
                    MultiResult::Created(_) | MultiResult::Deleted | MultiResult::Checked => None,
                });
                let v = stat.map(|s| CounterValue::from_stat(new, &s));
                if let Some(v) = v {
                    self.observed(v, out);
                }
                self.answer(Ok(v), out);
            }
            Err(Error::MultiFailed { index, source }) => match (index, *source) {
                (0, Error::BadVersion { .. }) => match cmd.write {
                    CounterWrite::CompareAndSet { .. } => self.answer(Ok(None), out),
                    CounterWrite::Add(_) | CounterWrite::Set(_) => {
                        // Someone else wrote first: read and try again, pausing after a
                        // few conflicts in a row.
                        let conflicts = self.writing.as_ref().map(|w| w.conflicts).unwrap_or(0) + 1;
                        if let Some(w) = self.writing.as_mut() {
                            w.conflicts = conflicts;
                        }
                        if conflicts > 3 {
                            self.write_backoff(now_ms, Phase::Ready, out);
                        } else {
                            self.set_phase(Phase::Ready);
                            self.pump_write(out);
                        }
                    }
                },
                // The counter node is gone: create it, then try again.
                (0, Error::NoNode { .. }) | (1, Error::NoNode { .. }) => {
                    let op = self.create_node(out);
                    self.set_phase(Phase::Creating { op });
                }
                // Our marker name exists: a previous write of this name was applied
                // (cannot happen: names are unique per handle). Use the next name.
                (1, Error::NodeExists { .. }) => {
                    self.set_phase(Phase::Ready);
                    self.pump_write(out);
                }
                // The previous marker is gone (deleted by hand): forget it.
                (2, Error::NoNode { .. }) => {
                    self.marker = None;
                    self.set_phase(Phase::Ready);
                    self.pump_write(out);
                }
                (_, e) if transient(&e) => self.write_backoff(now_ms, Phase::Ready, out),
                (_, e) => self.answer(Err(e), out),
            },
            // The outcome is unknown.
            Err(e) if e.is_connection_loss() || matches!(e, Error::SessionExpired) => {
                self.set_phase(Phase::Unsure { marker, new });
                self.pump_write(out);
            }
            Err(e) if transient(&e) => self.write_backoff(now_ms, Phase::Ready, out),
            Err(e) => self.answer(Err(e), out),
        }
    }

    fn unsure_later(
        &mut self,
        now_ms: u64,
        marker: String,
        new: i64,
        out: &mut Vec<Output<CounterOutput>>,
    ) {
        self.write_backoff(now_ms, Phase::Unsure { marker, new }, out);
    }

    // ----- inputs ----------------------------------------------------------------------

    fn on_conn(&mut self, state: ConnectionState, out: &mut Vec<Output<CounterOutput>>) {
        match state {
            ConnectionState::Connected { .. } | ConnectionState::Reconnected { .. } => {
                self.conn = Some(true);
                if !self.started {
                    return;
                }
                // A fresh read and watch (the old watch may be gone with a session).
                if let Observe::Armed { watch, .. } = self.observe {
                    out.push(Output::Unwatch { id: watch });
                }
                self.read(out);
                self.pump_write(out);
            }
            ConnectionState::Suspended
            | ConnectionState::ReadOnly { .. }
            | ConnectionState::Lost => {
                self.conn = Some(false);
                if let Observe::Armed { watch, .. } = self.observe {
                    out.push(Output::Unwatch { id: watch });
                }
                self.observe = Observe::Idle;
                if let Some(w) = self.writing.as_mut() {
                    w.phase = std::mem::replace(&mut w.phase, Phase::Ready).on_disconnect();
                }
                if self.started && !self.stale && self.last.is_some() {
                    self.stale = true;
                    self.event(CounterEvent::Stale, out);
                }
            }
        }
    }

    fn on_done(
        &mut self,
        now_ms: u64,
        id: OpId,
        reply: Reply,
        out: &mut Vec<Output<CounterOutput>>,
    ) {
        match self.observe {
            Observe::Reading { op } if op == id => {
                if let Reply::Data(r) = reply {
                    self.on_read(now_ms, id, r, out);
                }
                return;
            }
            Observe::Creating { op } if op == id => {
                match reply {
                    Reply::Created(Ok(_) | Err(Error::NodeExists { .. })) => self.read(out),
                    _ => self.observe_backoff(now_ms, out),
                }
                return;
            }
            Observe::Idle
            | Observe::Reading { .. }
            | Observe::Armed { .. }
            | Observe::Creating { .. }
            | Observe::Backoff { .. } => {}
        }
        let current = self.writing.as_ref().and_then(|w| w.phase.waits_for());
        if current == Some(id) {
            self.on_write_done(now_ms, reply, out);
        }
    }

    fn on_fired(&mut self, id: OpId, out: &mut Vec<Output<CounterOutput>>) {
        if let Observe::Armed { watch, .. } = self.observe {
            if watch == id && self.connected() {
                self.read(out);
            }
        }
    }

    fn on_timer(&mut self, id: OpId, out: &mut Vec<Output<CounterOutput>>) {
        match self.observe {
            Observe::Backoff { timer } if timer == id && self.connected() => self.read(out),
            Observe::Armed { watch, timer } if timer == id => {
                // Self-check: read again even without an event.
                out.push(Output::Unwatch { id: watch });
                self.read(out);
            }
            _ => {}
        }
        let resume = match self.writing.as_ref().map(|w| &w.phase) {
            Some(Phase::Backoff { timer, resume }) if *timer == id => Some((**resume).clone()),
            _ => None,
        };
        if let Some(resume) = resume {
            self.set_phase(resume);
            self.pump_write(out);
        }
    }

    fn on_command(&mut self, cmd: CounterCommand, out: &mut Vec<Output<CounterOutput>>) {
        self.queue.push_back(cmd);
        self.next_write(out);
    }

    fn on_close(&mut self, out: &mut Vec<Output<CounterOutput>>) {
        if self.closed {
            return;
        }
        self.closed = true;
        // Commands not started fail: closed.
        for cmd in std::mem::take(&mut self.queue) {
            out.push(Output::Emit(CounterOutput::Answer {
                request: cmd.request,
                result: Err(Error::Closed),
            }));
        }
        if let Observe::Armed { watch, .. } = self.observe {
            out.push(Output::Unwatch { id: watch });
        }
        self.observe = Observe::Idle;
        // A write that may have reached the server is finished (its outcome resolved
        // and answered) before the end; one that cannot have fails now.
        let sent = self
            .writing
            .as_ref()
            .is_some_and(|w| w.phase.clone().on_disconnect() != Phase::Ready);
        if !sent {
            if let Some(w) = self.writing.take() {
                out.push(Output::Emit(CounterOutput::Answer {
                    request: w.cmd.request,
                    result: Err(Error::Closed),
                }));
            }
        }
        self.finish_close(out);
    }

    /// Once no write is left: delete the last marker (best effort), then end.
    fn finish_close(&mut self, out: &mut Vec<Output<CounterOutput>>) {
        if self.writing.is_some() || self.closing.is_some() {
            return;
        }
        match (self.marker.take(), self.connected()) {
            (Some(path), true) => {
                self.closing = Some(self.ids.call(Call::Delete { path, version: -1 }, out));
            }
            _ => out.push(Output::Ended),
        }
    }

    fn on_closing_input(
        &mut self,
        now_ms: u64,
        input: Input<CounterCommand>,
        out: &mut Vec<Output<CounterOutput>>,
    ) {
        if self.writing.is_some() {
            match input {
                Input::Conn(state) => match state {
                    ConnectionState::Connected { .. } | ConnectionState::Reconnected { .. } => {
                        self.conn = Some(true);
                        self.pump_write(out);
                    }
                    ConnectionState::Suspended
                    | ConnectionState::ReadOnly { .. }
                    | ConnectionState::Lost => {
                        self.conn = Some(false);
                        if let Some(w) = self.writing.as_mut() {
                            w.phase = std::mem::replace(&mut w.phase, Phase::Ready).on_disconnect();
                        }
                    }
                },
                Input::Done { id, reply } => {
                    if self.writing.as_ref().and_then(|w| w.phase.waits_for()) == Some(id) {
                        self.on_write_done(now_ms, reply, out);
                    }
                }
                Input::Timer { id } => self.on_timer(id, out),
                Input::Command(cmd) => out.push(Output::Emit(CounterOutput::Answer {
                    request: cmd.request,
                    result: Err(Error::Closed),
                })),
                Input::Start
                | Input::Close
                | Input::Fired { .. }
                | Input::Event { .. }
                | Input::StreamEnded { .. } => {}
            }
            self.finish_close(out);
            return;
        }
        // Waiting for the last marker's delete (or giving up on a disconnection).
        let done = match input {
            Input::Done { id, .. } => self.closing == Some(id),
            Input::Conn(state) => !state.is_connected(),
            Input::Command(cmd) => {
                out.push(Output::Emit(CounterOutput::Answer {
                    request: cmd.request,
                    result: Err(Error::Closed),
                }));
                false
            }
            _ => false,
        };
        if done && self.closing.take().is_some() {
            out.push(Output::Ended);
        }
    }
}

impl Machine for CounterMachine {
    type Command = CounterCommand;
    type Event = CounterOutput;

    fn step(&mut self, now_ms: u64, input: Input<CounterCommand>) -> Vec<Output<CounterOutput>> {
        let mut out = Vec::new();
        if self.closed {
            self.on_closing_input(now_ms, input, &mut out);
            return out;
        }
        match input {
            Input::Start => {
                if !self.started {
                    self.started = true;
                    if self.connected() {
                        self.read(&mut out);
                        self.next_write(&mut out);
                    }
                }
            }
            Input::Close => self.on_close(&mut out),
            Input::Conn(state) => self.on_conn(state, &mut out),
            Input::Done { id, reply } => self.on_done(now_ms, id, reply, &mut out),
            Input::Fired { id } => self.on_fired(id, &mut out),
            Input::Event { .. } | Input::StreamEnded { .. } => {}
            Input::Timer { id } => self.on_timer(id, &mut out),
            Input::Command(cmd) => self.on_command(cmd, &mut out),
        }
        out
    }
}

/// 8 bytes, big-endian (Curator's `DistributedAtomicLong`).
fn encode(v: i64) -> Bytes {
    Bytes::copy_from_slice(&v.to_be_bytes())
}

/// Empty data is 0; anything but 8 bytes is not a counter.
fn decode(path: &str, data: &[u8]) -> Result<i64> {
    if data.is_empty() {
        return Ok(0);
    }
    let bytes: [u8; 8] = data.try_into().map_err(|_| Error::BadData {
        path: path.to_owned(),
        reason: format!("{} bytes, a counter has 8 (big-endian i64)", data.len()),
    })?;
    Ok(i64::from_be_bytes(bytes))
}

/// Errors worth retrying after a pause (the connection, a busy server).
fn transient(e: &Error) -> bool {
    e.is_connection_loss() || matches!(e, Error::SessionExpired | Error::Server { .. })
}

/// The holder's view of the machine: answers by request, the last value.
#[derive(Debug, Default)]
struct Waiters {
    next: AtomicU64,
    waiting: StdMutex<HashMap<u64, oneshot::Sender<Result<Option<CounterValue>>>>>,
}

/// A shared counter (see the module docs).
///
/// ```no_run
/// # async fn demo<O: rzk_election_client::recipe::RecipeOps>(client: std::sync::Arc<O>) -> rzk_election_client::Result<()> {
/// use rzk_election_client::recipe::{CounterConfig, SharedCounter};
/// let mut hits = SharedCounter::start(client, CounterConfig::new("/stats/hits"));
/// let after = hits.add(1).await?; // applied exactly once
/// println!("hits = {}", after.value);
/// while let Some(event) = hits.next_event().await {
///     println!("{event:?}"); // Changed(value), Stale, Synced(value)
/// }
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct SharedCounter {
    running: Running<CounterMachine>,
    waiters: Arc<Waiters>,
    /// The last value, and whether it is current.
    state: watch::Receiver<(Option<CounterValue>, bool)>,
}

impl SharedCounter {
    /// Start the counter (created with the initial value when missing, once connected).
    pub fn start<O: RecipeOps>(ops: Arc<O>, cfg: CounterConfig) -> SharedCounter {
        let waiters = Arc::new(Waiters::default());
        let w = waiters.clone();
        let (tx, state) = watch::channel((None, false));
        let running = Running::spawn_with(
            ops,
            CounterMachine::new(cfg),
            move |o: &CounterOutput| match o {
                CounterOutput::Event(CounterEvent::Changed(v)) => {
                    tx.send_modify(|s| s.0 = Some(*v));
                }
                CounterOutput::Event(CounterEvent::Synced(v)) => {
                    tx.send_replace((Some(*v), true));
                }
                CounterOutput::Event(CounterEvent::Stale) => {
                    tx.send_modify(|s| s.1 = false);
                }
                CounterOutput::Answer { request, result } => {
                    let waiter = w
                        .waiting
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .remove(request);
                    if let Some(waiter) = waiter {
                        let _ = waiter.send(result.clone());
                    }
                }
            },
        );
        SharedCounter {
            running,
            waiters,
            state,
        }
    }

    async fn write(&self, write: CounterWrite) -> Result<Option<CounterValue>> {
        let request = self.waiters.next.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        self.waiters
            .waiting
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(request, tx);
        self.running.command(CounterCommand { request, write });
        rx.await.map_err(|_| Error::Closed)?
    }

    /// Add `delta` (negative to subtract); returns the value right after this increment.
    /// Retried on conflicts and across disconnections until applied, exactly once.
    pub async fn add(&self, delta: i64) -> Result<CounterValue> {
        self.write(CounterWrite::Add(delta))
            .await?
            .ok_or(Error::Closed)
    }

    /// Set `value` if the counter is still at `seen.version`; `None` if it moved.
    pub async fn compare_and_set(
        &self,
        seen: &CounterValue,
        value: i64,
    ) -> Result<Option<CounterValue>> {
        self.write(CounterWrite::CompareAndSet {
            version: seen.version,
            value,
        })
        .await
    }

    /// Set `value` whatever the version.
    pub async fn set(&self, value: i64) -> Result<CounterValue> {
        self.write(CounterWrite::Set(value))
            .await?
            .ok_or(Error::Closed)
    }

    /// The last value observed, current or not (see [`SharedCounter::is_synced`]).
    pub fn get(&self) -> Option<CounterValue> {
        self.state.borrow().0
    }

    /// True while connected and the value read since the last reconnect.
    pub fn is_synced(&self) -> bool {
        self.state.borrow().1
    }

    /// Wait for a current value.
    pub async fn wait_synced(&self) -> Result<CounterValue> {
        let mut s = self.state.clone();
        let v = s
            .wait_for(|(v, synced)| *synced && v.is_some())
            .await
            .map_err(|_| Error::Closed)?;
        v.0.ok_or(Error::Closed)
    }

    /// The next event, in order; `None` once closed.
    pub async fn next_event(&mut self) -> Option<CounterEvent> {
        loop {
            match self.running.events.recv().await? {
                CounterOutput::Event(e) => return Some(e),
                CounterOutput::Answer { .. } => continue,
            }
        }
    }

    /// Stop (the last marker is deleted); writes not yet carried out fail with
    /// [`Error::Closed`].
    pub async fn close(&self) {
        self.running.close().await;
    }
}

#[cfg(test)]
#[path = "counter_tests.rs"]
mod tests;

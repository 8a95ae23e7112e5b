//! A synchronous harness for the engine machines (tests only): it answers each call
//! from the fake server's tree at the moment the call is taken, delivers watch events
//! before the answer that follows them (ZooKeeper's order), fires timers in the order
//! they were set (time is an argument), and lets a test disturb the connection between
//! any two steps.

use std::collections::VecDeque;

use futures::FutureExt;
use futures::StreamExt;

use super::engine::{Call, EventStream, Input, Machine, Output, Reply, Watch};
use super::fake::{fake_call, FakeServer};
use super::ids::OpId;
use super::ops::WatchFired;
use crate::error::Error;
use crate::state::ConnectionState;
use crate::types::SessionId;

/// An invariant checked after every step.
pub(crate) type Check<M> = Box<dyn FnMut(&M, &FakeServer)>;
/// Picks calls (whose reply is lost).
pub(crate) type CallFilter = Box<dyn FnMut(&Call) -> bool>;

pub(crate) struct Harness<M: Machine> {
    pub(crate) m: M,
    pub(crate) server: FakeServer,
    /// The session while connected.
    pub(crate) conn: Option<SessionId>,
    /// The session the client holds (also while suspended).
    pub(crate) session: SessionId,
    pub(crate) now: u64,
    pub(crate) pending: VecDeque<Output<M::Event>>,
    watches: Vec<(OpId, WatchFired)>,
    streams: Vec<(OpId, EventStream)>,
    pub(crate) events: Vec<M::Event>,
    pub(crate) ended: bool,
    /// Called after every step (invariants).
    pub(crate) check: Option<Check<M>>,
    /// Applies a matching call but answers CONNECTIONLOSS (the reply was lost), once.
    pub(crate) lose_reply_if: Option<CallFilter>,
    /// Take pending calls in a seeded random order instead of issue order (a server or
    /// driver that does not keep the order in which reads were issued).
    pub(crate) shuffle: Option<rand_chacha::ChaCha8Rng>,
}

impl<M: Machine> Harness<M> {
    pub(crate) fn new(m: M, server: FakeServer) -> Harness<M> {
        let session = server.new_session();
        Harness {
            m,
            server,
            conn: None,
            session,
            now: 0,
            pending: VecDeque::new(),
            watches: Vec::new(),
            streams: Vec::new(),
            events: Vec::new(),
            ended: false,
            check: None,
            lose_reply_if: None,
            shuffle: None,
        }
    }

    pub(crate) fn feed(&mut self, input: Input<M::Command>) {
        self.now += 1;
        let out = self.m.step(self.now, input);
        for o in out {
            match o {
                Output::Emit(e) => self.events.push(e),
                Output::Ended => self.ended = true,
                Output::Unwatch { id } => {
                    self.watches.retain(|(w, _)| *w != id);
                    self.streams.retain(|(w, _)| *w != id);
                }
                o @ (Output::Call { .. }
                | Output::Timer { .. }
                | Output::BackgroundDelete { .. }) => self.pending.push_back(o),
            }
        }
        if let Some(mut check) = self.check.take() {
            check(&self.m, &self.server);
            self.check = Some(check);
        }
    }

    /// Start and connect (first connection).
    pub(crate) fn start(&mut self) {
        self.feed(Input::Start);
        self.conn = Some(self.session);
        self.feed(Input::Conn(ConnectionState::Connected {
            session: self.session,
        }));
    }

    pub(crate) fn suspend(&mut self) {
        self.conn = None;
        self.server.with(|t| t.set_offline(self.session, true));
        self.feed(Input::Conn(ConnectionState::Suspended));
    }

    pub(crate) fn reconnect_same(&mut self) {
        self.conn = Some(self.session);
        self.server.with(|t| t.set_offline(self.session, false));
        self.feed(Input::Conn(ConnectionState::Reconnected {
            session: self.session,
        }));
    }

    /// LOST, then a new session. With `expire`, the server ends the old session first;
    /// without, it still holds it (a client-side LOST).
    pub(crate) fn lose(&mut self, expire: bool) -> SessionId {
        self.conn = None;
        let old = self.session;
        self.server.with(|t| t.set_offline(old, true));
        self.feed(Input::Conn(ConnectionState::Lost));
        if expire {
            self.server.with(|t| t.end_session(old));
        }
        // Watches of the old session are gone for this client.
        self.watches.clear();
        self.streams.clear();
        self.session = self.server.new_session();
        self.conn = Some(self.session);
        self.feed(Input::Conn(ConnectionState::Reconnected {
            session: self.session,
        }));
        self.drain_watches();
        self.session
    }

    /// Deliver fired one-shot watches and persistent-watch events.
    pub(crate) fn drain_watches(&mut self) {
        loop {
            let mut fed = false;
            let mut i = 0;
            while i < self.streams.len() {
                match self.streams[i].1.next().now_or_never() {
                    Some(Some(event)) => {
                        let id = self.streams[i].0;
                        self.feed(Input::Event { id, event });
                        fed = true;
                        i = 0;
                        continue;
                    }
                    Some(None) => {
                        let (id, _) = self.streams.remove(i);
                        self.feed(Input::StreamEnded { id });
                        fed = true;
                        i = 0;
                        continue;
                    }
                    None => i += 1,
                }
            }
            let mut j = 0;
            while j < self.watches.len() {
                if (&mut self.watches[j].1).now_or_never().is_some() {
                    let (id, _) = self.watches.remove(j);
                    self.feed(Input::Fired { id });
                    fed = true;
                } else {
                    j += 1;
                }
            }
            if !fed {
                return;
            }
        }
    }

    fn answer(&mut self, call: Call) -> (Reply, Option<Watch>) {
        let Some(s) = self.conn else {
            return (
                super::fake::fail_reply_pub(&call, Error::ConnectionLoss),
                None,
            );
        };
        if !self.server.with(|t| t.is_live(s)) {
            return (
                super::fake::fail_reply_pub(&call, Error::SessionExpired),
                None,
            );
        }
        self.server.with(|t| fake_call(t, s, call))
    }

    /// Take the next pending call or timer; false when nothing is pending.
    pub(crate) fn run_one(&mut self) -> bool {
        self.drain_watches();
        let next = match self.shuffle.as_mut() {
            Some(rng) if !self.pending.is_empty() => {
                use rand::Rng;
                let i = rng.random_range(0..self.pending.len());
                self.pending.remove(i)
            }
            _ => self.pending.pop_front(),
        };
        let Some(next) = next else {
            return false;
        };
        match next {
            Output::Call { id, call } => {
                let lose = match self.lose_reply_if.as_mut() {
                    Some(f) => f(&call),
                    None => false,
                };
                let failed = super::fake::fail_reply_pub(&call, Error::ConnectionLoss);
                let (reply, watch) = self.answer(call);
                let (reply, watch) = if lose {
                    self.lose_reply_if = None;
                    (failed, None)
                } else {
                    (reply, watch)
                };
                match watch {
                    Some(Watch::Once(f)) => self.watches.push((id, f)),
                    Some(Watch::Stream(s)) => self.streams.push((id, s)),
                    None => {}
                }
                // Events queued before this answer first.
                self.drain_watches();
                self.feed(Input::Done { id, reply });
            }
            Output::Timer { id, at_ms } => {
                self.now = self.now.max(at_ms);
                self.feed(Input::Timer { id });
            }
            // Tried once when taken: the driver's retries are tested with the driver.
            Output::BackgroundDelete { path } => {
                let call = Call::Delete { path, version: -1 };
                let _ = self.answer(call);
            }
            Output::Emit(_) | Output::Ended | Output::Unwatch { .. } => {}
        }
        self.drain_watches();
        true
    }

    /// Run up to `steps` pending items.
    pub(crate) fn run(&mut self, steps: usize) {
        for _ in 0..steps {
            if !self.run_one() {
                return;
            }
        }
    }

    /// Run until `f` holds (checked after every step) or `steps` pass.
    pub(crate) fn run_until(&mut self, steps: usize, mut f: impl FnMut(&Self) -> bool) -> bool {
        for _ in 0..steps {
            if f(self) {
                return true;
            }
            if !self.run_one() {
                return f(self);
            }
        }
        f(self)
    }

    /// Drop every pending call and timer without answering (lost in a disconnection).
    pub(crate) fn drop_pending(&mut self) {
        self.pending.clear();
    }
}

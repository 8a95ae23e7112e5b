//! The plumbing every recipe runs on: one set of ZooKeeper calls ([`Call`] /
//! [`Reply`]), one sans-IO [`Machine`] trait, a seeded [`Backoff`], and one driver that
//! runs a machine on one tokio task over a [`RecipeOps`].
//!
//! The rules (docs/recipes.md, "The lifecycle", rules 1 and 2): every input (connection
//! state, call result, watch event, timer, the holder's command) is fed to the machine
//! from one task, one at a time; each call, watch and timer carries an [`OpId`], and a
//! machine ignores ids it is no longer waiting for (stale results). Time is an argument
//! (`now_ms`), so the machines are tested without a server and without a clock.
//!
//! # Ordering (what the tree cache relies on)
//! ZooKeeper delivers a watch event before the reply of any read that sees the change
//! (docs/client-protocol.md, "Notifications before replies"). The driver keeps that
//! order: in its select loop, watch streams and one-shot watches are polled before
//! call results, so an event that the client queued before a reply reaches the machine
//! first.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::future::{AbortHandle, Abortable, BoxFuture};
use futures::stream::{BoxStream, FuturesUnordered, SelectAll, StreamExt};
use rzk_wire::{Acl, CreateMode};
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

pub use super::ids::OpId;
use super::ops::{RecipeOps, WatchFired};
use crate::client::watches::{PersistentMode, WatchEvent};
use crate::client::{Client, Op, OpResult};
use crate::error::{Error, Result};
use crate::state::ConnectionState;
use crate::types::Stat;

/// Events of a persistent (recursive) watch, until its session ends or its reader falls
/// too far behind; either way the stream ends and the recipe re-reads.
pub type EventStream = BoxStream<'static, WatchEvent>;

/// One ZooKeeper call a recipe machine asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Call {
    /// create / create2 / createContainer / createTTL. With `parents`, missing parents
    /// are created in that mode (persistent or container) and the create is retried once.
    /// Answer: [`Reply::Created`].
    Create {
        /// The path (the server appends a sequence suffix for sequential modes).
        path: String,
        /// The data.
        data: Bytes,
        /// The mode; TTL modes need `ttl_ms`.
        mode: CreateMode,
        /// The TTL of a TTL mode, ms.
        ttl_ms: Option<u64>,
        /// Create missing parents in this mode.
        parents: Option<CreateMode>,
    },
    /// getData, with a one-shot data watch if `watch`. Answer: [`Reply::Data`].
    GetData {
        /// The node.
        path: String,
        /// Leave a watch.
        watch: bool,
    },
    /// exists, with a watch if `watch` (also on a missing node). Answer: [`Reply::Exists`].
    Exists {
        /// The node.
        path: String,
        /// Leave a watch.
        watch: bool,
    },
    /// getChildren, with a one-shot child watch if `watch`. Answer: [`Reply::Children`].
    Children {
        /// The parent.
        path: String,
        /// Leave a watch.
        watch: bool,
    },
    /// setData at `version` (−1: any). Answer: [`Reply::Stat`].
    SetData {
        /// The node.
        path: String,
        /// The data.
        data: Bytes,
        /// Expected version.
        version: i32,
    },
    /// delete at `version` (−1: any). Answer: [`Reply::Deleted`].
    Delete {
        /// The node.
        path: String,
        /// Expected version.
        version: i32,
    },
    /// addWatch, persistent or persistent-recursive. Answer: [`Reply::Watching`] and an
    /// event stream.
    AddWatch {
        /// The node (and, recursive, its subtree).
        path: String,
        /// Recursive.
        recursive: bool,
    },
    /// multi: all or nothing. Answer: [`Reply::Multi`].
    Multi {
        /// The ops.
        ops: Vec<Op>,
    },
    /// sync: the next read on this session sees everything committed before it, also on
    /// a server that lags (after a reconnect to another member). Answer:
    /// [`Reply::Synced`].
    Sync {
        /// The path (any; ZooKeeper syncs the whole tree).
        path: String,
    },
}

/// The answer to a [`Call`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// For [`Call::Create`]: the path created and its stat.
    Created(Result<(String, Stat)>),
    /// For [`Call::GetData`].
    Data(Result<(Bytes, Stat)>),
    /// For [`Call::Exists`]: `None` when missing.
    Exists(Result<Option<Stat>>),
    /// For [`Call::Children`]: child names.
    Children(Result<Vec<String>>),
    /// For [`Call::SetData`].
    Stat(Result<Stat>),
    /// For [`Call::Delete`].
    Deleted(Result<()>),
    /// For [`Call::AddWatch`].
    Watching(Result<()>),
    /// For [`Call::Multi`].
    Multi(Result<Vec<OpResult>>),
    /// For [`Call::Sync`].
    Synced(Result<()>),
}

impl Reply {
    /// The error of a failed call, if it failed.
    pub fn error(&self) -> Option<&Error> {
        match self {
            Reply::Created(Err(e))
            | Reply::Data(Err(e))
            | Reply::Exists(Err(e))
            | Reply::Children(Err(e))
            | Reply::Stat(Err(e))
            | Reply::Deleted(Err(e))
            | Reply::Watching(Err(e))
            | Reply::Multi(Err(e))
            | Reply::Synced(Err(e)) => Some(e),
            Reply::Created(Ok(_))
            | Reply::Data(Ok(_))
            | Reply::Exists(Ok(_))
            | Reply::Children(Ok(_))
            | Reply::Stat(Ok(_))
            | Reply::Deleted(Ok(_))
            | Reply::Watching(Ok(_))
            | Reply::Multi(Ok(_))
            | Reply::Synced(Ok(_)) => None,
        }
    }
}

/// A watch left by a successful call.
pub enum Watch {
    /// A one-shot watch (getData / exists / getChildren with `watch`).
    Once(WatchFired),
    /// A persistent watch (addWatch).
    Stream(EventStream),
}

impl std::fmt::Debug for Watch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Watch::Once(_) => f.write_str("Watch::Once"),
            Watch::Stream(_) => f.write_str("Watch::Stream"),
        }
    }
}

/// One input of a [`Machine`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Input<C> {
    /// Begin (once).
    Start,
    /// Stop for good.
    Close,
    /// A connection-state event, in the client's order.
    Conn(ConnectionState),
    /// The answer to call `id`.
    Done {
        /// The call.
        id: OpId,
        /// Its answer.
        reply: Reply,
    },
    /// The one-shot watch left by call `id` fired (or its session ended).
    Fired {
        /// The call that left the watch.
        id: OpId,
    },
    /// An event of the persistent watch added by call `id`.
    Event {
        /// The addWatch call.
        id: OpId,
        /// The event.
        event: WatchEvent,
    },
    /// The persistent watch added by call `id` ended (session gone, reader lagged).
    StreamEnded {
        /// The addWatch call.
        id: OpId,
    },
    /// Timer `id` expired.
    Timer {
        /// The timer.
        id: OpId,
    },
    /// A command of the holder.
    Command(C),
}

/// One thing a [`Machine`] asks the driver to do, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Output<E> {
    /// Run a call; answer with [`Input::Done`] (and later watch inputs) tagged `id`.
    Call {
        /// Its id.
        id: OpId,
        /// The call.
        call: Call,
    },
    /// Feed [`Input::Timer`] with this id at `at_ms`.
    Timer {
        /// The timer.
        id: OpId,
        /// When.
        at_ms: u64,
    },
    /// Forget the watch left by call `id` (so the client's watch table forgets it too).
    Unwatch {
        /// The call that left it.
        id: OpId,
    },
    /// Delete `path` off the machine, without an answer: a node nobody waits for (one of
    /// a retired attempt). The driver retries it while the connection is down, a
    /// missing node counting as done, and gives up after a bounded number of attempts
    /// (the node is ephemeral: it dies with its session anyway). It may outlive the
    /// machine, so a closing recipe does not wait for a connection to come back.
    BackgroundDelete {
        /// The node.
        path: String,
    },
    /// Report to the holder.
    Emit(E),
    /// The machine is done; nothing more will be emitted.
    Ended,
}

/// A recipe state machine: sans-IO, time is an argument and every effect is an
/// [`Output`] for the driver to carry out.
pub trait Machine: Send + 'static {
    /// Commands from the holder.
    type Command: Send + std::fmt::Debug + 'static;
    /// What it reports.
    type Event: Send + std::fmt::Debug + 'static;
    /// Process one input at `now_ms`; returns what to do, in order.
    fn step(&mut self, now_ms: u64, input: Input<Self::Command>) -> Vec<Output<Self::Event>>;
}

/// Hands out [`OpId`]s, strictly increasing.
#[derive(Debug, Default, Clone)]
pub struct Ids(u64);

impl Ids {
    /// The next id.
    pub fn next_id(&mut self) -> OpId {
        self.0 += 1;
        OpId(self.0)
    }

    /// Push a call and return its id.
    pub fn call<E>(&mut self, call: Call, out: &mut Vec<Output<E>>) -> OpId {
        let id = self.next_id();
        out.push(Output::Call { id, call });
        id
    }

    /// Push a timer and return its id.
    pub fn timer<E>(&mut self, at_ms: u64, out: &mut Vec<Output<E>>) -> OpId {
        let id = self.next_id();
        out.push(Output::Timer { id, at_ms });
        id
    }
}

/// Exponential backoff with seeded jitter: `min × 2^failures`, capped at `max`, plus up
/// to half of that at random. Deterministic per seed, so every test replays.
#[derive(Debug, Clone)]
pub struct Backoff {
    /// First delay, ms.
    pub min_ms: u64,
    /// Largest delay (before jitter), ms.
    pub max_ms: u64,
    failures: u32,
    rng: u64,
}

impl Backoff {
    /// A backoff from `min_ms` to `max_ms`, jitter seeded by `seed`.
    pub fn new(min_ms: u64, max_ms: u64, seed: u64) -> Backoff {
        Backoff {
            min_ms: min_ms.max(1),
            max_ms: max_ms.max(min_ms.max(1)),
            failures: 0,
            rng: seed | 1,
        }
    }

    /// The delay before the next retry; counts one more failure.
    pub fn next_delay_ms(&mut self) -> u64 {
        let exp = self.failures.min(16);
        self.failures = self.failures.saturating_add(1);
        let base = self.min_ms.saturating_mul(1u64 << exp).min(self.max_ms);
        // xorshift64
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        base + self.rng % (base / 2 + 1)
    }

    /// A success: the next delay starts from `min_ms` again.
    pub fn reset(&mut self) {
        self.failures = 0;
    }

    /// Failures since the last success.
    pub fn failures(&self) -> u32 {
        self.failures
    }
}

/// Run one [`Call`] on a [`Client`]. The [`RecipeOps::call`] of the network client.
pub(crate) async fn client_call(client: &Client, call: Call) -> (Reply, Option<Watch>) {
    match call {
        Call::Create {
            path,
            data,
            mode,
            ttl_ms,
            parents,
        } => {
            let r = match client_create(client, &path, data.clone(), mode, ttl_ms).await {
                Err(Error::NoNode { .. }) if parents.is_some() => {
                    match create_parents(client, &path, parents.unwrap_or(CreateMode::Persistent))
                        .await
                    {
                        Ok(()) => client_create(client, &path, data, mode, ttl_ms).await,
                        Err(e) => Err(e),
                    }
                }
                other => other,
            };
            (Reply::Created(r), None)
        }
        Call::GetData { path, watch: false } => (Reply::Data(client.get_data(&path).await), None),
        Call::GetData { path, watch: true } => match client.get_data_watch(&path).await {
            Ok((data, stat, w)) => (
                Reply::Data(Ok((data, stat))),
                Some(Watch::Once(Box::pin(async move {
                    let _ = w.changed().await;
                }))),
            ),
            Err(e) => (Reply::Data(Err(e)), None),
        },
        Call::Exists { path, watch: false } => (Reply::Exists(client.exists(&path).await), None),
        Call::Exists { path, watch: true } => match client.exists_watch(&path).await {
            Ok((stat, w)) => (
                Reply::Exists(Ok(stat)),
                Some(Watch::Once(Box::pin(async move {
                    let _ = w.changed().await;
                }))),
            ),
            Err(e) => (Reply::Exists(Err(e)), None),
        },
        Call::Children { path, watch: false } => {
            (Reply::Children(client.get_children(&path).await), None)
        }
        Call::Children { path, watch: true } => match client.get_children_watch(&path).await {
            Ok((children, w)) => (
                Reply::Children(Ok(children)),
                Some(Watch::Once(Box::pin(async move {
                    let _ = w.changed().await;
                }))),
            ),
            Err(e) => (Reply::Children(Err(e)), None),
        },
        Call::SetData {
            path,
            data,
            version,
        } => (
            Reply::Stat(client.set_data(&path, data, version).await),
            None,
        ),
        Call::Delete { path, version } => {
            (Reply::Deleted(client.delete(&path, version).await), None)
        }
        Call::AddWatch { path, recursive } => {
            let mode = if recursive {
                PersistentMode::Recursive
            } else {
                PersistentMode::Persistent
            };
            match client.add_watch(&path, mode).await {
                Ok(w) => {
                    // A lagged reader ends the stream: the recipe re-reads instead of
                    // carrying on with a gap.
                    let stream = futures::stream::unfold(w, |mut w| async move {
                        match w.next().await {
                            Some(Ok(event)) => Some((event, w)),
                            Some(Err(_)) | None => None,
                        }
                    });
                    (Reply::Watching(Ok(())), Some(Watch::Stream(stream.boxed())))
                }
                Err(e) => (Reply::Watching(Err(e)), None),
            }
        }
        Call::Multi { ops } => (Reply::Multi(client.multi(ops).await), None),
        Call::Sync { path } => (Reply::Synced(client.sync(&path).await.map(|_| ())), None),
    }
}

async fn client_create(
    client: &Client,
    path: &str,
    data: Bytes,
    mode: CreateMode,
    ttl_ms: Option<u64>,
) -> Result<(String, Stat)> {
    match mode {
        CreateMode::PersistentWithTtl | CreateMode::PersistentSequentialWithTtl => {
            let ttl = Duration::from_millis(ttl_ms.unwrap_or(0));
            client
                .create_ttl(
                    path,
                    data,
                    mode == CreateMode::PersistentSequentialWithTtl,
                    ttl,
                )
                .await
        }
        CreateMode::Persistent
        | CreateMode::Ephemeral
        | CreateMode::PersistentSequential
        | CreateMode::EphemeralSequential
        | CreateMode::Container => client.create2(path, data, Acl::open_unsafe(), mode).await,
    }
}

/// Create every missing ancestor of `path` in `mode`; `NODEEXISTS` is fine, a
/// grandparent that vanished meanwhile leaves the retry to the caller.
async fn create_parents(client: &Client, path: &str, mode: CreateMode) -> Result<()> {
    let parts: Vec<&str> = path.split('/').filter(|p| !p.is_empty()).collect();
    let mut at = String::new();
    for part in &parts[..parts.len().saturating_sub(1)] {
        at.push('/');
        at.push_str(part);
        match client
            .create(&at, Bytes::new(), Acl::open_unsafe(), mode)
            .await
        {
            Ok(_) | Err(Error::NodeExists { .. }) | Err(Error::NoNode { .. }) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

// ----- the driver ----------------------------------------------------------------------

/// The holder's side of a running machine.
#[derive(Debug)]
pub(crate) struct Running<M: Machine> {
    pub(crate) commands: mpsc::UnboundedSender<Ctl<M::Command>>,
    pub(crate) events: mpsc::UnboundedReceiver<M::Event>,
}

/// What the holder sends to the driver task.
#[derive(Debug)]
pub(crate) enum Ctl<C> {
    Command(C),
    Close(oneshot::Sender<()>),
}

impl<M: Machine> Running<M> {
    /// Spawn the machine's task; `on_event` sees each event before the holder does (to
    /// keep a `watch` of the current state).
    pub(crate) fn spawn_with<O: RecipeOps>(
        ops: Arc<O>,
        machine: M,
        on_event: impl FnMut(&M::Event) + Send + 'static,
    ) -> Running<M> {
        let (cmd_tx, cmd_rx) = mpsc::unbounded_channel();
        // Unbounded but not without limit: a machine emits at most a bounded number of
        // events per input, and the holder reads them in order.
        let (ev_tx, ev_rx) = mpsc::unbounded_channel();
        tokio::spawn(drive(ops, machine, cmd_rx, ev_tx, Box::new(on_event)));
        Running {
            commands: cmd_tx,
            events: ev_rx,
        }
    }

    /// Send a command (ignored once the machine has ended).
    pub(crate) fn command(&self, c: M::Command) {
        let _ = self.commands.send(Ctl::Command(c));
    }

    /// Close the machine and wait for its task to finish.
    pub(crate) async fn close(&self) {
        let (tx, rx) = oneshot::channel();
        if self.commands.send(Ctl::Close(tx)).is_ok() {
            let _ = rx.await;
        }
    }
}

/// The holder's hook on each event (see [`Running::spawn_with`]).
type OnEvent<E> = Box<dyn FnMut(&E) + Send>;

type CallFuture = BoxFuture<'static, (OpId, Reply, Option<Watch>)>;

struct Driver<O: RecipeOps, M: Machine> {
    ops: Arc<O>,
    machine: M,
    epoch: Instant,
    inflight: FuturesUnordered<CallFuture>,
    fired: FuturesUnordered<BoxFuture<'static, Option<OpId>>>,
    streams: SelectAll<BoxStream<'static, (OpId, Option<WatchEvent>)>>,
    aborts: HashMap<OpId, AbortHandle>,
    timers: BTreeMap<(u64, OpId), ()>,
    events: mpsc::UnboundedSender<M::Event>,
    on_event: OnEvent<M::Event>,
    ended: bool,
}

/// How long [`Running::close`] waits for a closing machine to finish its cleanup (its
/// last deletes). A machine that needs longer (its connection is suspended) goes on in
/// the background until it ends, its session is lost or the client closes.
const CLOSE_DRAIN: Duration = Duration::from_secs(5);

/// How long a closing machine may go on in the background before it is stopped anyway
/// (its ephemeral nodes die with the session; this bounds the task's life).
const CLOSE_GIVE_UP: Duration = Duration::from_secs(600);

async fn drive<O: RecipeOps, M: Machine>(
    ops: Arc<O>,
    machine: M,
    mut commands: mpsc::UnboundedReceiver<Ctl<M::Command>>,
    events: mpsc::UnboundedSender<M::Event>,
    on_event: OnEvent<M::Event>,
) {
    let (state, mut states) = ops.subscribe();
    let mut d = Driver {
        ops,
        machine,
        epoch: Instant::now(),
        inflight: FuturesUnordered::new(),
        fired: FuturesUnordered::new(),
        streams: SelectAll::new(),
        aborts: HashMap::new(),
        timers: BTreeMap::new(),
        events,
        on_event,
        ended: false,
    };
    d.feed(Input::Start);
    if let Some(state) = state {
        d.feed(Input::Conn(state));
    }
    // Holders waiting in close(); answered when the machine ends, or at the drain
    // deadline, whichever comes first.
    let mut close_waiters: Vec<oneshot::Sender<()>> = Vec::new();
    let mut closing = false;
    let mut drain_deadline: Option<Instant> = None;
    let mut gave_waiters_up = false;
    let mut commands_open = true;
    let mut states_open = true;
    while !d.ended {
        let next_timer = d.timers.keys().next().map(|(at, _)| *at);
        let epoch = d.epoch;
        let sleep = async move {
            match next_timer {
                Some(at) => tokio::time::sleep_until(epoch + Duration::from_millis(at)).await,
                None => futures::future::pending::<()>().await,
            }
        };
        let drain = async move {
            match drain_deadline {
                Some(at) => tokio::time::sleep_until(at).await,
                None => futures::future::pending::<()>().await,
            }
        };
        tokio::select! {
            biased;
            cmd = commands.recv(), if commands_open => {
                let close = match cmd {
                    Some(Ctl::Command(c)) => {
                        if !closing {
                            d.feed(Input::Command(c));
                        }
                        false
                    }
                    Some(Ctl::Close(done)) => {
                        if gave_waiters_up {
                            // A second close() after the first stopped waiting.
                            let _ = done.send(());
                        } else {
                            close_waiters.push(done);
                        }
                        true
                    }
                    // Every handle is gone: close, as if asked.
                    None => {
                        commands_open = false;
                        true
                    }
                };
                if close && !closing {
                    closing = true;
                    drain_deadline = Some(Instant::now() + CLOSE_DRAIN);
                    d.feed(Input::Close);
                }
            },
            state = states.next(), if states_open => match state {
                Some(Ok(state)) => d.feed(Input::Conn(state)),
                Some(Err(lagged)) => {
                    // What was missed is unknown: assume the session is gone, then take
                    // the current state afresh.
                    tracing::warn!(error = %lagged, "connection-state stream lagged; treating as LOST");
                    d.feed(Input::Conn(ConnectionState::Lost));
                    let (state, fresh) = d.ops.subscribe();
                    states = fresh;
                    if let Some(state) = state {
                        d.feed(Input::Conn(state));
                    }
                }
                // The client is closed: nothing more can be done on the server.
                None => {
                    states_open = false;
                    if !closing {
                        closing = true;
                        d.feed(Input::Close);
                    }
                    d.ended = true;
                }
            },
            // Watch events before call results: ZooKeeper sends an event before the
            // reply of a read that sees its change, and the machines rely on seeing
            // them in that order.
            Some((id, event)) = d.streams.next() => match event {
                Some(event) => d.feed(Input::Event { id, event }),
                None => {
                    d.aborts.remove(&id);
                    d.feed(Input::StreamEnded { id });
                }
            },
            Some(fired) = d.fired.next() => {
                if let Some(id) = fired {
                    d.aborts.remove(&id);
                    d.feed(Input::Fired { id });
                }
            }
            Some((id, reply, watch)) = d.inflight.next() => {
                match watch {
                    Some(Watch::Once(fut)) => {
                        let (h, reg) = AbortHandle::new_pair();
                        d.aborts.insert(id, h);
                        d.fired.push(Box::pin(async move {
                            Abortable::new(fut, reg).await.ok().map(|()| id)
                        }));
                    }
                    Some(Watch::Stream(stream)) => {
                        let (h, reg) = AbortHandle::new_pair();
                        d.aborts.insert(id, h.clone());
                        // The end of the stream is reported as one `None`, unless the
                        // machine dropped the watch itself (then nothing is reported).
                        let aborted = h.clone();
                        let tagged = Abortable::new(stream.map(move |e| (id, Some(e))), reg)
                            .chain(futures::stream::once(async move { (id, None) })
                                .filter(move |_| futures::future::ready(!aborted.is_aborted())));
                        d.streams.push(tagged.boxed());
                    }
                    None => {}
                }
                d.feed(Input::Done { id, reply });
            }
            () = sleep => {
                let now = d.now_ms();
                let due: Vec<(u64, OpId)> = d.timers.range(..=(now, OpId(u64::MAX))).map(|(k, _)| *k).collect();
                for key in due {
                    d.timers.remove(&key);
                    d.feed(Input::Timer { id: key.1 });
                }
            }
            () = drain => {
                if close_waiters.is_empty() && gave_waiters_up {
                    tracing::warn!("a closing recipe did not finish its cleanup; stopping it");
                    d.ended = true;
                }
                // The holder stops waiting; the cleanup goes on in the background, for
                // a bounded time.
                gave_waiters_up = true;
                drain_deadline = Some(Instant::now() + CLOSE_GIVE_UP);
                for done in close_waiters.drain(..) {
                    let _ = done.send(());
                }
            }
        }
    }
    for (_, h) in d.aborts.drain() {
        h.abort();
    }
    // Calls issued together with the end (a last delete) finish before close() returns;
    // their answers go nowhere.
    let drain = async { while d.inflight.next().await.is_some() {} };
    let _ = tokio::time::timeout(CLOSE_DRAIN, drain).await;
    for done in close_waiters {
        let _ = done.send(());
    }
}

impl<O: RecipeOps, M: Machine> Driver<O, M> {
    fn now_ms(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    fn feed(&mut self, input: Input<M::Command>) {
        let now = self.now_ms();
        tracing::trace!(?input, "recipe input");
        for output in self.machine.step(now, input) {
            match output {
                Output::Call { id, call } => {
                    let ops = self.ops.clone();
                    self.inflight.push(Box::pin(async move {
                        let (reply, watch) = ops.call(call).await;
                        (id, reply, watch)
                    }));
                }
                Output::Timer { id, at_ms } => {
                    self.timers.insert((at_ms, id), ());
                }
                Output::Unwatch { id } => {
                    if let Some(h) = self.aborts.remove(&id) {
                        h.abort();
                    }
                }
                Output::BackgroundDelete { path } => {
                    tokio::spawn(background_delete(self.ops.clone(), path));
                }
                Output::Emit(e) => {
                    (self.on_event)(&e);
                    let _ = self.events.send(e);
                }
                Output::Ended => self.ended = true,
            }
        }
    }
}

/// How many times a [`Output::BackgroundDelete`] is tried before it is given up.
const BACKGROUND_DELETE_ATTEMPTS_MAX: u32 = 20;

/// The pause between two tries of a [`Output::BackgroundDelete`].
const BACKGROUND_DELETE_RETRY: Duration = Duration::from_millis(250);

/// Carry out a [`Output::BackgroundDelete`]; returns whether the node is gone.
async fn background_delete<O: RecipeOps>(ops: Arc<O>, path: String) -> bool {
    for _ in 0..BACKGROUND_DELETE_ATTEMPTS_MAX {
        let call = Call::Delete {
            path: path.clone(),
            version: -1,
        };
        match ops.call(call).await.0 {
            Reply::Deleted(Ok(()) | Err(Error::NoNode { .. })) => return true,
            // The client is closed: its session, and the node with it, are gone.
            Reply::Deleted(Err(Error::Closed)) => return false,
            Reply::Deleted(Err(e)) => {
                tracing::debug!(%path, error = %e, "background delete failed; retrying")
            }
            other => {
                tracing::warn!(%path, reply = ?other, "background delete answered by a wrong reply");
                return false;
            }
        }
        tokio::time::sleep(BACKGROUND_DELETE_RETRY).await;
    }
    tracing::warn!(%path, "gave up deleting a node in the background");
    false
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU32, Ordering};

    use super::*;
    use crate::recipe::fake::{FakeClient, FakeServer, Kind};

    #[test]
    fn backoff_grows_to_its_cap_and_resets() {
        let mut b = Backoff::new(10, 100, 7);
        let d: Vec<u64> = (0..8).map(|_| b.next_delay_ms()).collect();
        for (i, d) in d.iter().enumerate() {
            let base = (10u64 << i.min(16)).min(100);
            assert!(*d >= base && *d <= base + base / 2, "{i}: {d}");
        }
        assert_eq!(b.failures(), 8);
        b.reset();
        let first = b.next_delay_ms();
        assert!((10..=15).contains(&first));
    }

    #[test]
    fn backoff_is_deterministic_per_seed() {
        let mut a = Backoff::new(20, 2000, 42);
        let mut b = Backoff::new(20, 2000, 42);
        for _ in 0..20 {
            assert_eq!(a.next_delay_ms(), b.next_delay_ms());
        }
    }

    /// A node `/bg/n` to delete, and a client whose next `failures` calls fail with a
    /// connection loss (counted).
    fn failing(failures: u32) -> (FakeServer, Arc<FakeClient>, String, Arc<AtomicU32>) {
        let server = FakeServer::default();
        let client = server.client();
        let node = server.with(|t| {
            t.put("/bg", b"").expect("parent");
            t.put("/bg/n", b"").expect("node")
        });
        let tries = Arc::new(AtomicU32::new(0));
        for _ in 0..failures {
            let tries = tries.clone();
            server.before(Kind::Call, move |_| {
                tries.fetch_add(1, Ordering::SeqCst);
                Some(Error::ConnectionLoss)
            });
        }
        (server, client, node, tries)
    }

    #[tokio::test(start_paused = true)]
    async fn background_delete_retries_until_the_connection_is_back() {
        let (server, client, node, tries) = failing(3);
        assert!(background_delete(client, node.clone()).await);
        assert_eq!(tries.load(Ordering::SeqCst), 3);
        assert!(!server.with(|t| t.exists(&node)));
    }

    #[tokio::test(start_paused = true)]
    async fn background_delete_gives_up_after_its_limit() {
        let limit = BACKGROUND_DELETE_ATTEMPTS_MAX;
        let (server, client, node, tries) = failing(limit + 1);
        let started = Instant::now();
        assert!(!background_delete(client, node.clone()).await);
        assert_eq!(tries.load(Ordering::SeqCst), limit);
        assert!(started.elapsed() >= BACKGROUND_DELETE_RETRY * (limit - 1));
        assert!(
            server.with(|t| t.exists(&node)),
            "the node is left to its session"
        );
    }
}

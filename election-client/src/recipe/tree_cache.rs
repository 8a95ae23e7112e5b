//! [`TreeCache`] (Curator 5's `CuratorCache`): a local copy of a subtree, kept by a
//! persistent recursive watch (addWatch, ZooKeeper 3.6+), with one-shot watches as the
//! fallback for older servers. [`NodeCache`] and [`ChildrenCache`] are views of it.
//!
//! # What it guarantees
//! - **One initial snapshot**: [`CacheEvent::Initialized`] once the whole subtree has
//!   been read; no per-node event before it.
//! - **Events in zxid order, each the real state**: every watch event makes the cache
//!   read that node; a read is applied only if no later event for the same node arrived
//!   before its reply (ZooKeeper sends an event before the reply of any read that sees
//!   its change, so an applied read shows exactly the state after the latest event), and
//!   reads are applied in the order they were issued, which is the order of the events.
//!   A node created and changed before its read returns is reported once, with the
//!   state after the change.
//! - **SUSPENDED / LOST**: [`CacheEvent::Stale`] at once: the copy may be behind. It is
//!   kept (readable), never silently trusted.
//! - **RECONNECTED (same session or a new one)**: events missed while disconnected are
//!   not replayed by the server for persistent watches, so the cache re-reads the whole
//!   subtree and emits exactly the differences (each `Created`, `Changed`, `Deleted` once,
//!   none for an unchanged node), then [`CacheEvent::Synced`]. After a session loss the
//!   recursive watch is added again first, so nothing between the watch and the reads is
//!   missed.
//! - A watch stream that ends while connected (its reader lagged) triggers the same
//!   resync; a failed read retries the resync with backoff. Never idle while connected.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, RwLock};

use bytes::Bytes;
use rzk_wire::ErrorCode;
use tokio::sync::watch;

use super::engine::{Backoff, Call, Ids, Input, Machine, Output, Reply, Running};
use super::ids::{join_path, OpId};
use super::latch::rand_nonce;
use super::ops::RecipeOps;
use crate::client::watches::{EventKind, WatchEvent};
use crate::error::{Error, Result};
use crate::state::ConnectionState;
use crate::types::Stat;

/// One cached znode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CachedNode {
    /// Its data.
    pub data: Bytes,
    /// Its stat when read.
    pub stat: Stat,
}

/// The cached subtree, by full path.
pub type CacheMap = BTreeMap<String, CachedNode>;

/// How the cache learns of changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WatchStrategy {
    /// A persistent recursive watch; one-shot watches if the server answers
    /// `UNIMPLEMENTED` (older than 3.6).
    Auto,
    /// A persistent recursive watch only.
    Persistent,
    /// One-shot data and child watches on every node (what Curator's TreeCache does).
    OneShot,
}

/// Settings of a [`TreeCache`].
#[derive(Debug, Clone)]
pub struct CacheConfig {
    /// The subtree's root (need not exist yet).
    pub root: String,
    /// How deep below the root to cache: 0 = the root only, 1 = root and children;
    /// `None`: everything.
    pub max_depth: Option<usize>,
    /// How changes are learned.
    pub strategy: WatchStrategy,
    /// Reads in flight during a (re)load.
    pub reads_in_flight_max: usize,
    /// First retry delay, ms.
    pub backoff_min_ms: u64,
    /// Largest retry delay, ms.
    pub backoff_max_ms: u64,
    /// Seeds the jitter.
    pub nonce: u64,
}

impl CacheConfig {
    /// A cache of the whole subtree at `root`.
    pub fn new(root: impl Into<String>) -> CacheConfig {
        CacheConfig {
            root: root.into(),
            max_depth: None,
            strategy: WatchStrategy::Auto,
            reads_in_flight_max: 256,
            backoff_min_ms: 20,
            backoff_max_ms: 2_000,
            nonce: rand_nonce(),
        }
    }

    /// Limit the depth.
    pub fn max_depth(mut self, depth: usize) -> CacheConfig {
        self.max_depth = Some(depth);
        self
    }

    /// Choose the watch strategy.
    pub fn strategy(mut self, strategy: WatchStrategy) -> CacheConfig {
        self.strategy = strategy;
        self
    }
}

/// What the cache reports, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CacheEvent {
    /// The first complete load: the cache holds the whole subtree.
    Initialized {
        /// Nodes cached.
        nodes: usize,
    },
    /// A node appeared.
    Created {
        /// Its path.
        path: String,
        /// Its state.
        node: CachedNode,
    },
    /// A node's data or stat changed.
    Changed {
        /// Its path.
        path: String,
        /// Before.
        old: CachedNode,
        /// After.
        new: CachedNode,
    },
    /// A node went.
    Deleted {
        /// Its path.
        path: String,
        /// Its last cached state.
        old: CachedNode,
    },
    /// The connection is suspended or the session lost: the copy may be behind.
    Stale,
    /// A re-read after a reconnect (or a lagged watch) is complete: every difference has
    /// been reported; the cache equals the server's subtree as read.
    Synced,
}

/// What a pending call is for.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Purpose {
    /// getData of a node (`walk`: part of a load, which then lists its children).
    Read { path: String, walk: bool },
    /// getChildren of a node during a load (`walk`) or, one-shot, after a child watch.
    List { path: String, walk: bool },
    /// addWatch on the root.
    AddWatch,
    /// exists with a watch on the missing root (one-shot strategy).
    WaitRoot,
}

#[derive(Debug)]
struct Pending {
    purpose: Purpose,
    /// The event counter when issued: a later event for the same path makes it stale.
    seq: u64,
    generation: u64,
}

/// A result waiting for its turn (results are applied in issue order).
#[derive(Debug)]
enum Ready {
    Read {
        path: String,
        walk: bool,
        seq: u64,
        r: Result<(Bytes, Stat)>,
    },
    List {
        path: String,
        walk: bool,
        r: Result<Vec<String>>,
    },
    /// A NodeDeleted event (no read needed: a re-creation brings its own event).
    Deleted { path: String },
    /// Applied already (addWatch, root wait) or stale.
    Nothing,
}

/// Per-path bookkeeping while events for it are being resolved.
#[derive(Debug, Clone, Copy)]
struct Dirty {
    last_event: u64,
    outstanding: u32,
}

/// The tree cache's state machine. Public so it can be tested and driven without a
/// server; see the module docs.
#[derive(Debug)]
pub struct CacheMachine {
    cfg: CacheConfig,
    ids: Ids,
    backoff: Backoff,
    started: bool,
    closed: bool,
    connected: bool,
    /// Using one-shot watches (configured, or the server lacks addWatch).
    one_shot: bool,
    /// Bumped on every disconnection: results of an older generation are dropped.
    generation: u64,
    nodes: Arc<RwLock<CacheMap>>,
    initialized: bool,
    /// A load is running; `walk_outstanding` of its reads/listings are not applied yet.
    loading: bool,
    walk_outstanding: usize,
    /// Load calls not yet issued (bounded in flight).
    walk_queue: VecDeque<Purpose>,
    walk_in_flight: usize,
    /// The addWatch call whose stream is current.
    stream: Option<OpId>,
    /// Waiting for addWatch's answer before loading.
    adding_watch: Option<OpId>,
    event_seq: u64,
    dirty: HashMap<String, Dirty>,
    pending: HashMap<OpId, Pending>,
    /// Results in issue order (call ids increase).
    slots: VecDeque<(OpId, Option<Ready>)>,
    /// One-shot watches: the call that left each, and on what.
    data_watches: HashMap<OpId, String>,
    child_watches: HashMap<OpId, String>,
    /// A backoff timer before the next load.
    retry: Option<OpId>,
    /// One-shot: the exists watch on a missing root.
    root_wait: Option<OpId>,
    /// Stale was reported and not yet followed by Synced/Initialized.
    stale: bool,
}

impl CacheMachine {
    /// A machine for `cfg`, not started.
    pub fn new(cfg: CacheConfig) -> CacheMachine {
        let backoff = Backoff::new(cfg.backoff_min_ms, cfg.backoff_max_ms, cfg.nonce);
        CacheMachine {
            one_shot: cfg.strategy == WatchStrategy::OneShot,
            cfg,
            ids: Ids::default(),
            backoff,
            started: false,
            closed: false,
            connected: false,
            generation: 0,
            nodes: Arc::new(RwLock::new(BTreeMap::new())),
            initialized: false,
            loading: false,
            walk_outstanding: 0,
            walk_queue: VecDeque::new(),
            walk_in_flight: 0,
            stream: None,
            adding_watch: None,
            event_seq: 0,
            dirty: HashMap::new(),
            pending: HashMap::new(),
            slots: VecDeque::new(),
            data_watches: HashMap::new(),
            child_watches: HashMap::new(),
            retry: None,
            root_wait: None,
            stale: false,
        }
    }

    /// The shared cache (the handle reads it).
    pub fn shared(&self) -> Arc<RwLock<CacheMap>> {
        self.nodes.clone()
    }

    /// A copy of the cache.
    pub fn snapshot(&self) -> CacheMap {
        read(&self.nodes).clone()
    }

    /// True once the first load completed and no resync is running or pending: the
    /// cache is believed equal to the server.
    pub fn is_synced(&self) -> bool {
        self.initialized && !self.loading && !self.stale && self.connected && self.retry.is_none()
    }

    /// True when one-shot watches are in use.
    pub fn uses_one_shot_watches(&self) -> bool {
        self.one_shot
    }

    /// The "never idle" check: false would mean started, connected and stuck.
    pub fn is_progressing(&self) -> bool {
        if !self.started || self.closed || !self.connected {
            return true;
        }
        self.loading
            || self.adding_watch.is_some()
            || self.retry.is_some()
            || self.stream.is_some()
            || (self.one_shot
                && (!self.data_watches.is_empty()
                    || !self.pending.is_empty()
                    || self.root_wait.is_some()))
    }

    fn depth(&self, path: &str) -> Option<usize> {
        let root = self.cfg.root.as_str();
        if path == root {
            return Some(0);
        }
        let rest = if root == "/" {
            path.strip_prefix('/')?
        } else {
            path.strip_prefix(root)?.strip_prefix('/')?
        };
        Some(rest.split('/').count())
    }

    fn in_scope(&self, path: &str) -> bool {
        match (self.depth(path), self.cfg.max_depth) {
            (None, _) => false,
            (Some(_), None) => true,
            (Some(d), Some(max)) => d <= max,
        }
    }

    fn may_have_children_cached(&self, path: &str) -> bool {
        match (self.depth(path), self.cfg.max_depth) {
            (Some(d), Some(max)) => d < max,
            (Some(_), None) => true,
            (None, _) => false,
        }
    }

    // ----- issuing -------------------------------------------------------------------

    fn issue(&mut self, purpose: Purpose, out: &mut Vec<Output<CacheEvent>>) -> OpId {
        let call = match &purpose {
            Purpose::Read { path, .. } => Call::GetData {
                path: path.clone(),
                watch: self.one_shot,
            },
            Purpose::List { path, .. } => Call::Children {
                path: path.clone(),
                watch: self.one_shot,
            },
            Purpose::AddWatch => Call::AddWatch {
                path: self.cfg.root.clone(),
                recursive: true,
            },
            Purpose::WaitRoot => Call::Exists {
                path: self.cfg.root.clone(),
                watch: true,
            },
        };
        let id = self.ids.call(call, out);
        self.slots.push_back((id, None));
        self.pending.insert(
            id,
            Pending {
                purpose,
                seq: self.event_seq,
                generation: self.generation,
            },
        );
        id
    }

    /// Queue a call of the load; issued while fewer than the limit are in flight.
    fn walk(&mut self, purpose: Purpose, out: &mut Vec<Output<CacheEvent>>) {
        self.walk_outstanding += 1;
        self.walk_queue.push_back(purpose);
        self.pump(out);
    }

    fn pump(&mut self, out: &mut Vec<Output<CacheEvent>>) {
        while self.walk_in_flight < self.cfg.reads_in_flight_max.max(1) {
            let Some(p) = self.walk_queue.pop_front() else {
                return;
            };
            self.walk_in_flight += 1;
            self.issue(p, out);
        }
    }

    /// (Re)load: add the watch first if needed, then read the whole subtree.
    fn load(&mut self, out: &mut Vec<Output<CacheEvent>>) {
        if !self.connected || self.closed {
            return;
        }
        self.retry = None;
        if self.one_shot {
            // A full re-read arms fresh watches; the old ones would double every event.
            let ids: Vec<OpId> = self
                .data_watches
                .drain()
                .chain(self.child_watches.drain())
                .map(|(id, _)| id)
                .chain(self.root_wait.take())
                .collect();
            for id in ids {
                out.push(Output::Unwatch { id });
            }
        }
        if !self.one_shot && self.stream.is_none() {
            let id = self.issue(Purpose::AddWatch, out);
            self.adding_watch = Some(id);
            return;
        }
        self.loading = true;
        let root = self.cfg.root.clone();
        self.walk(
            Purpose::Read {
                path: root,
                walk: true,
            },
            out,
        );
    }

    fn retry_later(&mut self, now_ms: u64, out: &mut Vec<Output<CacheEvent>>) {
        // Everything in flight belongs to the abandoned attempt.
        self.abandon();
        self.mark_stale(out);
        let delay = self.backoff.next_delay_ms();
        self.retry = Some(self.ids.timer(now_ms + delay, out));
    }

    /// Forget every call in flight and every queued result (a disconnection, or a
    /// load that is restarted).
    fn abandon(&mut self) {
        self.generation += 1;
        self.pending.clear();
        self.slots.clear();
        self.dirty.clear();
        self.walk_queue.clear();
        self.walk_in_flight = 0;
        self.walk_outstanding = 0;
        self.loading = false;
        self.adding_watch = None;
        self.root_wait = None;
    }

    fn mark_stale(&mut self, out: &mut Vec<Output<CacheEvent>>) {
        if self.initialized && !self.stale {
            self.stale = true;
            out.push(Output::Emit(CacheEvent::Stale));
        }
    }

    // ----- inputs --------------------------------------------------------------------

    fn on_conn(&mut self, state: ConnectionState, out: &mut Vec<Output<CacheEvent>>) {
        match state {
            ConnectionState::Connected { .. } | ConnectionState::Reconnected { .. } => {
                self.connected = true;
                if self.started && !self.closed && self.retry.is_none() {
                    self.abandon();
                    self.load(out);
                }
            }
            // A read-only server can serve reads, but to keep one rule the cache treats it
            // like a suspension until a read-write connection returns.
            ConnectionState::Suspended | ConnectionState::ReadOnly { .. } => {
                self.connected = false;
                self.abandon();
                self.retry = None;
                self.mark_stale(out);
            }
            ConnectionState::Lost => {
                self.connected = false;
                self.abandon();
                self.retry = None;
                // The session's watches died with it.
                self.stream = None;
                self.data_watches.clear();
                self.child_watches.clear();
                self.mark_stale(out);
            }
        }
    }

    fn on_event(&mut self, id: OpId, event: WatchEvent, out: &mut Vec<Output<CacheEvent>>) {
        if self.stream != Some(id) || !self.connected || !self.in_scope(&event.path) {
            return;
        }
        match event.kind {
            EventKind::NodeCreated | EventKind::NodeDataChanged => {
                let path = event.path;
                self.touch(&path);
                self.issue(Purpose::Read { path, walk: false }, out);
            }
            EventKind::NodeDeleted => {
                let path = event.path;
                self.touch(&path);
                let id = self.ids.next_id();
                self.slots.push_back((id, Some(Ready::Deleted { path })));
                self.drain(0, out);
            }
            // Not sent for recursive watches.
            EventKind::NodeChildrenChanged => {}
        }
    }

    /// An event for `path`: reads of it issued before now are stale.
    fn touch(&mut self, path: &str) {
        self.event_seq += 1;
        let seq = self.event_seq;
        let d = self.dirty.entry(path.to_owned()).or_insert(Dirty {
            last_event: seq,
            outstanding: 0,
        });
        d.last_event = seq;
        d.outstanding += 1;
    }

    fn untouch(&mut self, path: &str) {
        if let Some(d) = self.dirty.get_mut(path) {
            d.outstanding = d.outstanding.saturating_sub(1);
            if d.outstanding == 0 {
                self.dirty.remove(path);
            }
        }
    }

    fn on_fired(&mut self, id: OpId, out: &mut Vec<Output<CacheEvent>>) {
        if !self.connected {
            return;
        }
        if let Some(path) = self.data_watches.remove(&id) {
            self.touch(&path);
            self.issue(Purpose::Read { path, walk: false }, out);
        } else if let Some(path) = self.child_watches.remove(&id) {
            // A child watch also fires when its node is deleted; the listing then fails
            // with NONODE and the data watch's read removes the node.
            self.issue(Purpose::List { path, walk: false }, out);
        }
    }

    fn on_done(&mut self, now_ms: u64, id: OpId, reply: Reply, out: &mut Vec<Output<CacheEvent>>) {
        let Some(p) = self.pending.remove(&id) else {
            return;
        };
        if p.generation != self.generation {
            return;
        }
        let walk = match &p.purpose {
            Purpose::Read { walk, .. } => *walk,
            Purpose::List { walk, .. } => *walk,
            Purpose::AddWatch | Purpose::WaitRoot => false,
        };
        if walk {
            self.walk_in_flight = self.walk_in_flight.saturating_sub(1);
        }
        let ready = match (p.purpose, reply) {
            (Purpose::AddWatch, Reply::Watching(r)) => {
                self.adding_watch = None;
                match r {
                    Ok(()) => {
                        self.stream = Some(id);
                        self.loading = true;
                        let root = self.cfg.root.clone();
                        self.walk(
                            Purpose::Read {
                                path: root,
                                walk: true,
                            },
                            out,
                        );
                    }
                    Err(Error::Server {
                        code: ErrorCode::Unimplemented,
                        ..
                    }) if self.cfg.strategy == WatchStrategy::Auto => {
                        tracing::info!(root = %self.cfg.root, "server lacks addWatch; using one-shot watches");
                        self.one_shot = true;
                        self.load(out);
                    }
                    Err(_) => {
                        self.retry_later(now_ms, out);
                        return;
                    }
                }
                Ready::Nothing
            }
            (Purpose::WaitRoot, Reply::Exists(r)) => {
                match r {
                    // Created meanwhile: load it.
                    Ok(Some(_)) => {
                        self.loading = true;
                        let root = self.cfg.root.clone();
                        self.walk(
                            Purpose::Read {
                                path: root,
                                walk: true,
                            },
                            out,
                        );
                    }
                    Ok(None) => {
                        self.root_wait = Some(id);
                    }
                    Err(_) => {
                        self.retry_later(now_ms, out);
                        return;
                    }
                }
                Ready::Nothing
            }
            (Purpose::Read { path, walk }, Reply::Data(r)) => {
                if let (Ok(_), true) = (&r, self.one_shot) {
                    self.data_watches.insert(id, path.clone());
                }
                Ready::Read {
                    path,
                    walk,
                    seq: p.seq,
                    r,
                }
            }
            (Purpose::List { path, walk }, Reply::Children(r)) => {
                if let (Ok(_), true) = (&r, self.one_shot) {
                    self.child_watches.insert(id, path.clone());
                }
                Ready::List { path, walk, r }
            }
            // A reply of the wrong shape cannot happen; treat it as a failed read.
            (_, _) => {
                self.retry_later(now_ms, out);
                return;
            }
        };
        if let Ok(i) = self.slots.binary_search_by_key(&id, |(k, _)| *k) {
            self.slots[i].1 = Some(ready);
        }
        self.drain(now_ms, out);
        self.pump(out);
        self.finish_load(out);
    }

    /// Apply results from the front while they are there.
    fn drain(&mut self, now_ms: u64, out: &mut Vec<Output<CacheEvent>>) {
        while let Some((_, Some(_))) = self.slots.front() {
            let Some((_, Some(ready))) = self.slots.pop_front() else {
                break;
            };
            let generation = self.generation;
            self.apply(now_ms, ready, out);
            if generation != self.generation {
                // The apply restarted the load: what was queued is void.
                return;
            }
        }
    }

    fn apply(&mut self, now_ms: u64, ready: Ready, out: &mut Vec<Output<CacheEvent>>) {
        match ready {
            Ready::Nothing => {}
            Ready::Deleted { path } => {
                self.untouch(&path);
                self.remove_subtree(&path, out);
            }
            Ready::Read { path, walk, seq, r } => {
                let stale = self.dirty.get(&path).is_some_and(|d| d.last_event > seq);
                if !walk {
                    self.untouch(&path);
                } else {
                    self.walk_outstanding = self.walk_outstanding.saturating_sub(1);
                }
                if stale {
                    // A later event's read brings the state; the load still owes the
                    // listing of this node's children (events report none of them).
                    if walk && self.may_have_children_cached(&path) {
                        self.walk(Purpose::List { path, walk: true }, out);
                    }
                    return;
                }
                match r {
                    Ok((data, stat)) => {
                        let children = stat.num_children;
                        self.upsert(&path, CachedNode { data, stat }, out);
                        let list =
                            self.may_have_children_cached(&path) && (children > 0 || self.one_shot);
                        if walk && list {
                            self.walk(Purpose::List { path, walk: true }, out);
                        } else if walk && self.may_have_children_cached(&path) {
                            // No children now: any cached below are gone.
                            self.remove_descendants(&path, out);
                        } else if !walk && self.one_shot && list {
                            // A node created under one-shot watches: list it too.
                            self.issue(Purpose::List { path, walk: false }, out);
                        }
                    }
                    Err(Error::NoNode { .. }) => {
                        self.remove_subtree(&path, out);
                        if path == self.cfg.root && self.one_shot {
                            self.issue(Purpose::WaitRoot, out);
                        }
                    }
                    Err(_) => self.retry_later(now_ms, out),
                }
            }
            Ready::List { path, walk, r } => {
                if walk {
                    self.walk_outstanding = self.walk_outstanding.saturating_sub(1);
                }
                match r {
                    Ok(children) => {
                        let listed: Vec<String> =
                            children.iter().map(|c| join_path(&path, c)).collect();
                        let cached = self.cached_children(&path);
                        for c in cached {
                            // Not listed: gone before the listing (a re-creation brings
                            // its own event or watch).
                            if !listed.contains(&c) && !self.dirty.contains_key(&c) {
                                self.remove_subtree(&c, out);
                            }
                        }
                        let known: Vec<bool> = {
                            let nodes = read(&self.nodes);
                            listed.iter().map(|c| nodes.contains_key(c)).collect()
                        };
                        for (c, known) in listed.into_iter().zip(known) {
                            if walk {
                                self.walk(
                                    Purpose::Read {
                                        path: c,
                                        walk: true,
                                    },
                                    out,
                                );
                            } else if !known && !self.dirty.contains_key(&c) {
                                // One-shot: a new child; read (and watch) it.
                                self.touch(&c);
                                self.issue(
                                    Purpose::Read {
                                        path: c,
                                        walk: false,
                                    },
                                    out,
                                );
                            }
                        }
                    }
                    // The node went; its data read (or watch) removes it.
                    Err(Error::NoNode { .. }) => {}
                    Err(_) => self.retry_later(now_ms, out),
                }
            }
        }
    }

    fn finish_load(&mut self, out: &mut Vec<Output<CacheEvent>>) {
        if !self.loading || self.walk_outstanding > 0 {
            return;
        }
        self.loading = false;
        self.backoff.reset();
        if !self.initialized {
            self.initialized = true;
            let nodes = read(&self.nodes).len();
            out.push(Output::Emit(CacheEvent::Initialized { nodes }));
        } else if self.stale {
            self.stale = false;
            out.push(Output::Emit(CacheEvent::Synced));
        }
    }

    fn emit(&self, e: CacheEvent, out: &mut Vec<Output<CacheEvent>>) {
        if self.initialized {
            out.push(Output::Emit(e));
        }
    }

    fn upsert(&mut self, path: &str, mut node: CachedNode, out: &mut Vec<Output<CacheEvent>>) {
        // The data arrives as a slice of the connection's read buffer; kept as is, every
        // cached node would pin a piece of that buffer for as long as it is cached.
        node.data = Bytes::copy_from_slice(&node.data);
        let replaced = read(&self.nodes)
            .get(path)
            .is_some_and(|old| old.stat.czxid != node.stat.czxid);
        if replaced {
            // A new incarnation: whatever was cached below the old one is gone with it.
            self.remove_descendants(path, out);
        }
        let old = write(&self.nodes).insert(path.to_owned(), node.clone());
        match old {
            None => self.emit(
                CacheEvent::Created {
                    path: path.to_owned(),
                    node,
                },
                out,
            ),
            Some(old) if old.stat.czxid != node.stat.czxid => {
                // Deleted and re-created in between (missed while disconnected, or with
                // one-shot watches): report both.
                self.emit(
                    CacheEvent::Deleted {
                        path: path.to_owned(),
                        old,
                    },
                    out,
                );
                self.emit(
                    CacheEvent::Created {
                        path: path.to_owned(),
                        node,
                    },
                    out,
                );
            }
            Some(old) if old.stat.mzxid != node.stat.mzxid || old.data != node.data => self.emit(
                CacheEvent::Changed {
                    path: path.to_owned(),
                    old,
                    new: node,
                },
                out,
            ),
            // Same node, same version (a child count or pzxid may differ): nothing
            // that a user sees changed; keep the newer stat quietly.
            Some(_) => {}
        }
    }

    fn cached_children(&self, path: &str) -> Vec<String> {
        let prefix = join_path(path, "");
        read(&self.nodes)
            .range(prefix.clone()..)
            .take_while(|(k, _)| k.starts_with(&prefix))
            .filter(|(k, _)| !k[prefix.len()..].contains('/'))
            .map(|(k, _)| k.clone())
            .collect()
    }

    fn remove_descendants(&mut self, path: &str, out: &mut Vec<Output<CacheEvent>>) {
        let prefix = join_path(path, "");
        let doomed: Vec<String> = read(&self.nodes)
            .range(prefix.clone()..)
            .take_while(|(k, _)| k.starts_with(&prefix))
            .map(|(k, _)| k.clone())
            .collect();
        // Deepest first, as ZooKeeper deletes them.
        for p in doomed.into_iter().rev() {
            if let Some(old) = write(&self.nodes).remove(&p) {
                self.emit(CacheEvent::Deleted { path: p, old }, out);
            }
        }
    }

    fn remove_subtree(&mut self, path: &str, out: &mut Vec<Output<CacheEvent>>) {
        self.remove_descendants(path, out);
        if let Some(old) = write(&self.nodes).remove(path) {
            self.emit(
                CacheEvent::Deleted {
                    path: path.to_owned(),
                    old,
                },
                out,
            );
        }
    }
}

impl Machine for CacheMachine {
    type Command = ();
    type Event = CacheEvent;

    fn step(&mut self, now_ms: u64, input: Input<()>) -> Vec<Output<CacheEvent>> {
        let mut out = Vec::new();
        if self.closed {
            return out;
        }
        match input {
            Input::Start => {
                if !self.started {
                    self.started = true;
                    self.load(&mut out);
                }
            }
            Input::Close => {
                self.closed = true;
                self.abandon();
                if let Some(id) = self.stream.take() {
                    out.push(Output::Unwatch { id });
                }
                out.push(Output::Ended);
            }
            Input::Conn(state) => self.on_conn(state, &mut out),
            Input::Done { id, reply } => self.on_done(now_ms, id, reply, &mut out),
            Input::Fired { id } => {
                if self.root_wait == Some(id) {
                    self.root_wait = None;
                    if self.connected {
                        self.abandon();
                        self.load(&mut out);
                    }
                } else {
                    self.on_fired(id, &mut out);
                }
            }
            Input::Event { id, event } => self.on_event(id, event, &mut out),
            Input::StreamEnded { id } => {
                if self.stream == Some(id) {
                    self.stream = None;
                    if self.connected {
                        // Lagged, or the session ended: re-add and re-read.
                        self.abandon();
                        self.mark_stale(&mut out);
                        self.load(&mut out);
                    }
                }
            }
            Input::Timer { id } => {
                if self.retry == Some(id) {
                    self.retry = None;
                    self.load(&mut out);
                }
            }
            Input::Command(()) => {}
        }
        out
    }
}

fn read(m: &RwLock<CacheMap>) -> std::sync::RwLockReadGuard<'_, CacheMap> {
    // Only the machine writes, in short sections that cannot leave the map torn.
    m.read().unwrap_or_else(|e| e.into_inner())
}

fn write(m: &RwLock<CacheMap>) -> std::sync::RwLockWriteGuard<'_, CacheMap> {
    m.write().unwrap_or_else(|e| e.into_inner())
}

/// A local copy of a subtree (see the module docs).
///
/// ```no_run
/// # async fn demo<O: rzk_election_client::recipe::RecipeOps>(client: std::sync::Arc<O>) {
/// use rzk_election_client::recipe::{CacheConfig, CacheEvent, TreeCache};
/// let mut cache = TreeCache::start(client, CacheConfig::new("/config"));
/// while let Some(event) = cache.next_event().await {
///     match event {
///         CacheEvent::Initialized { nodes } => println!("{nodes} nodes loaded"),
///         CacheEvent::Changed { path, new, .. } => println!("{path} is now {:?}", new.data),
///         CacheEvent::Stale => println!("disconnected: the copy may be behind"),
///         other => println!("{other:?}"),
///     }
/// }
/// # }
/// ```
#[derive(Debug)]
pub struct TreeCache {
    running: Running<CacheMachine>,
    nodes: Arc<RwLock<CacheMap>>,
    synced: watch::Receiver<bool>,
}

impl TreeCache {
    /// Start caching (the load begins once the client is connected).
    pub fn start<O: RecipeOps>(ops: Arc<O>, cfg: CacheConfig) -> TreeCache {
        let machine = CacheMachine::new(cfg);
        let nodes = machine.shared();
        let (tx, rx) = watch::channel(false);
        let running = Running::spawn_with(ops, machine, move |e: &CacheEvent| match e {
            CacheEvent::Initialized { .. } | CacheEvent::Synced => {
                tx.send_replace(true);
            }
            CacheEvent::Stale => {
                tx.send_replace(false);
            }
            CacheEvent::Created { .. }
            | CacheEvent::Changed { .. }
            | CacheEvent::Deleted { .. } => {}
        });
        TreeCache {
            running,
            nodes,
            synced: rx,
        }
    }

    /// The next event, in order; `None` once closed and drained.
    pub async fn next_event(&mut self) -> Option<CacheEvent> {
        self.running.events.recv().await
    }

    /// Wait until the cache is loaded (or re-synced after a disconnection).
    pub async fn wait_synced(&self) -> Result<()> {
        let mut s = self.synced.clone();
        s.wait_for(|s| *s)
            .await
            .map(|_| ())
            .map_err(|_| Error::Closed)
    }

    /// True between a completed (re)load and the next disconnection.
    pub fn is_synced(&self) -> bool {
        *self.synced.borrow()
    }

    /// One node.
    pub fn get(&self, path: &str) -> Option<CachedNode> {
        read(&self.nodes).get(path).cloned()
    }

    /// The cached children of `path`, by name.
    pub fn children(&self, path: &str) -> BTreeMap<String, CachedNode> {
        let prefix = join_path(path, "");
        read(&self.nodes)
            .range(prefix.clone()..)
            .take_while(|(k, _)| k.starts_with(&prefix))
            .filter(|(k, _)| !k[prefix.len()..].contains('/'))
            .map(|(k, v)| (k[prefix.len()..].to_owned(), v.clone()))
            .collect()
    }

    /// A copy of the whole cache.
    pub fn snapshot(&self) -> CacheMap {
        read(&self.nodes).clone()
    }

    /// Nodes cached.
    pub fn len(&self) -> usize {
        read(&self.nodes).len()
    }

    /// True when nothing is cached.
    pub fn is_empty(&self) -> bool {
        read(&self.nodes).is_empty()
    }

    /// Stop (the watch is dropped).
    pub async fn close(&self) {
        self.running.close().await;
    }
}

/// Curator's `NodeCache`: one node, as a [`TreeCache`] of depth 0.
#[derive(Debug)]
pub struct NodeCache {
    cache: TreeCache,
    path: String,
}

impl NodeCache {
    /// Cache the node at `path`.
    pub fn start<O: RecipeOps>(ops: Arc<O>, path: impl Into<String>) -> NodeCache {
        let path = path.into();
        NodeCache {
            cache: TreeCache::start(ops, CacheConfig::new(path.clone()).max_depth(0)),
            path,
        }
    }

    /// The node, if it exists (as last cached).
    pub fn get(&self) -> Option<CachedNode> {
        self.cache.get(&self.path)
    }

    /// The underlying cache (events, sync state).
    pub fn cache(&mut self) -> &mut TreeCache {
        &mut self.cache
    }
}

/// Curator's `PathChildrenCache`: a node's children, as a [`TreeCache`] of depth 1.
#[derive(Debug)]
pub struct ChildrenCache {
    cache: TreeCache,
    path: String,
}

impl ChildrenCache {
    /// Cache the children of `path`.
    pub fn start<O: RecipeOps>(ops: Arc<O>, path: impl Into<String>) -> ChildrenCache {
        let path = path.into();
        ChildrenCache {
            cache: TreeCache::start(ops, CacheConfig::new(path.clone()).max_depth(1)),
            path,
        }
    }

    /// The children, by name (as last cached).
    pub fn children(&self) -> BTreeMap<String, CachedNode> {
        self.cache.children(&self.path)
    }

    /// The underlying cache (events, sync state).
    pub fn cache(&mut self) -> &mut TreeCache {
        &mut self.cache
    }
}

#[cfg(test)]
#[path = "tree_cache_tests.rs"]
mod tests;

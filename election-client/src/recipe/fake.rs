//! An in-memory ZooKeeper for the recipe tests: a shared tree with sessions,
//! ephemerals, containers and one-shot watches, and clients whose connection state the
//! test controls. Faults are injected with hooks that run before a chosen operation.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex as StdMutex};

use bytes::Bytes;
use futures::FutureExt;
use rzk_zxid::Zxid;
use tokio::sync::oneshot;

use super::engine::{Call, Reply, Watch};
use super::ids::join_path;
use super::ops::RecipeOps;
use crate::client::watches::{EventKind, WatchEvent};
use crate::client::{Op as MultiOp, OpResult as MultiOpResult};
use crate::error::{Error, Result};
use crate::state::{ConnectionState, StateHub, StateStream};
use crate::types::{SessionId, Stat};
use rzk_wire::CreateMode;
use tokio::sync::mpsc;

#[derive(Debug, Clone)]
struct Node {
    data: Bytes,
    stat: Stat,
    container: bool,
    /// Child create counter: the next sequence number.
    seq: u32,
}

/// Which operation a hook applies to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// An ephemeral-sequential create (a candidate's or a queue node's).
    Create,
    /// A listing.
    Children,
    /// A getData without a watch.
    Read,
    /// A multi (the fencing step).
    Bump,
    /// Any other call.
    Call,
}

type Hook = Box<dyn FnOnce(&mut Tree) -> Option<Error> + Send>;

/// A persistent recursive watch of one session.
struct Recursive {
    root: String,
    session: SessionId,
    tx: mpsc::UnboundedSender<WatchEvent>,
}

#[derive(Default)]
pub(crate) struct Tree {
    nodes: BTreeMap<String, Node>,
    zxid: u64,
    watches: HashMap<String, Vec<oneshot::Sender<()>>>,
    /// One-shot child watches (getChildren with watch).
    child_watches: HashMap<String, Vec<oneshot::Sender<()>>>,
    /// Persistent recursive watches (addWatch).
    recursive: Vec<Recursive>,
    /// Sessions whose connection is down: events of persistent watches are lost for
    /// them, as on a real server (setWatches2 replays nothing for persistent watches).
    offline: Vec<SessionId>,
    /// Answer addWatch with UNIMPLEMENTED, like a server older than 3.6.
    pub(crate) no_add_watch: bool,
    live: Vec<SessionId>,
    hooks: VecDeque<(Kind, Hook)>,
}

fn parent_of(path: &str) -> &str {
    match path.rfind('/') {
        Some(0) => "/",
        Some(i) => &path[..i],
        None => "/",
    }
}

impl Tree {
    fn next_zxid(&mut self) -> Zxid {
        self.zxid += 1;
        Zxid::from_u64(self.zxid)
    }

    fn fire(&mut self, path: &str) {
        for tx in self.watches.remove(path).unwrap_or_default() {
            let _ = tx.send(());
        }
    }

    fn fire_children(&mut self, parent: &str) {
        for tx in self.child_watches.remove(parent).unwrap_or_default() {
            let _ = tx.send(());
        }
    }

    fn notify(&mut self, kind: EventKind, path: &str) {
        let offline = self.offline.clone();
        self.recursive.retain(|r| {
            let under = r.root == "/"
                || path == r.root
                || (path.starts_with(&r.root) && path.as_bytes().get(r.root.len()) == Some(&b'/'));
            if !under || offline.contains(&r.session) {
                return !r.tx.is_closed();
            }
            r.tx.send(WatchEvent {
                kind,
                path: path.to_owned(),
            })
            .is_ok()
        });
    }

    /// End every persistent recursive watch (their streams end), as when a reader
    /// lagged and the client dropped it.
    pub(crate) fn drop_recursive_watches(&mut self) {
        self.recursive.clear();
    }

    /// setData at `version` (−1: any).
    pub(crate) fn set_data(&mut self, path: &str, data: Bytes, version: i32) -> Result<Stat> {
        let Some(n) = self.nodes.get(path) else {
            return Err(Error::NoNode { path: path.into() });
        };
        if version != -1 && n.stat.version != version {
            return Err(Error::BadVersion { path: path.into() });
        }
        let zxid = self.next_zxid();
        let n = self.nodes.get_mut(path).expect("present");
        n.stat.data_length = data.len() as i32;
        n.data = data;
        n.stat.version += 1;
        n.stat.mzxid = zxid;
        let stat = n.stat;
        self.fire(path);
        self.notify(EventKind::NodeDataChanged, path);
        Ok(stat)
    }

    /// Create a persistent node (tests set up trees with it).
    pub(crate) fn put(&mut self, path: &str, data: &'static [u8]) -> Result<String> {
        self.create(
            path,
            Bytes::from_static(data),
            SessionId::NONE,
            false,
            false,
        )
    }

    /// The data of `path`, if it exists.
    pub(crate) fn data(&self, path: &str) -> Option<Bytes> {
        self.nodes.get(path).map(|n| n.data.clone())
    }

    /// The stat of `path` with its child count filled in.
    pub(crate) fn stat(&self, path: &str) -> Option<Stat> {
        let n = self.nodes.get(path)?;
        let mut stat = n.stat;
        stat.num_children = self.children_of(path).map(|c| c.len()).unwrap_or(0) as i32;
        Some(stat)
    }

    /// Every node under `root` (inclusive) with its data and stat: what a fresh read of
    /// the subtree returns.
    pub(crate) fn subtree(&self, root: &str) -> BTreeMap<String, (Bytes, Stat)> {
        self.nodes
            .iter()
            .filter(|(p, _)| {
                p.as_str() == root
                    || root == "/"
                    || (p.starts_with(root) && p.as_bytes().get(root.len()) == Some(&b'/'))
            })
            .map(|(p, n)| (p.clone(), (n.data.clone(), self.stat(p).unwrap_or(n.stat))))
            .collect()
    }

    /// Sessions whose connection is down (persistent-watch events are lost for them).
    pub(crate) fn set_offline(&mut self, session: SessionId, offline: bool) {
        self.offline.retain(|s| *s != session);
        if offline {
            self.offline.push(session);
        }
    }

    fn create(
        &mut self,
        path: &str,
        data: Bytes,
        owner: SessionId,
        container: bool,
        sequential: bool,
    ) -> Result<String> {
        let parent = parent_of(path).to_owned();
        if parent != "/" && !self.nodes.contains_key(&parent) {
            return Err(Error::NoNode { path: path.into() });
        }
        let mut full = path.to_owned();
        if let Some(p) = self.nodes.get_mut(&parent) {
            if sequential {
                full = format!("{path}{:010}", p.seq);
            }
            p.seq += 1;
        }
        if self.nodes.contains_key(&full) {
            return Err(Error::NodeExists { path: full });
        }
        let zxid = self.next_zxid();
        let stat = Stat {
            czxid: zxid,
            mzxid: zxid,
            ephemeral_owner: owner,
            data_length: data.len() as i32,
            ..Stat::default()
        };
        self.nodes.insert(
            full.clone(),
            Node {
                data,
                stat,
                container,
                seq: 0,
            },
        );
        if let Some(p) = self.nodes.get_mut(&parent) {
            p.stat.cversion += 1;
            p.stat.pzxid = zxid;
        }
        self.fire(&full);
        self.fire_children(&parent);
        self.notify(EventKind::NodeCreated, &full);
        Ok(full)
    }

    pub(crate) fn delete(&mut self, path: &str) -> Result<()> {
        if !self.nodes.contains_key(path) {
            return Err(Error::NoNode { path: path.into() });
        }
        let prefix = format!("{path}/");
        if self.nodes.keys().any(|k| k.starts_with(&prefix)) {
            return Err(Error::NotEmpty { path: path.into() });
        }
        self.nodes.remove(path);
        let zxid = self.next_zxid();
        let parent = parent_of(path).to_owned();
        if let Some(p) = self.nodes.get_mut(&parent) {
            p.stat.cversion += 1;
            p.stat.pzxid = zxid;
        }
        self.fire(path);
        self.fire_children(&parent);
        self.notify(EventKind::NodeDeleted, path);
        Ok(())
    }

    fn has_children(&self, path: &str) -> bool {
        let prefix = join_path(path, "");
        self.nodes
            .keys()
            .any(|k| k.starts_with(&prefix) && k.len() > prefix.len())
    }

    /// The container reaper: delete every empty container that has had a child.
    pub(crate) fn gc_containers(&mut self) {
        let doomed: Vec<String> = self
            .nodes
            .iter()
            .filter(|(p, n)| n.container && n.seq > 0 && !self.has_children(p))
            .map(|(p, _)| p.clone())
            .collect();
        for p in doomed {
            let _ = self.delete(&p);
        }
    }

    /// The server expires (or closes) a session: its ephemerals go.
    pub(crate) fn end_session(&mut self, session: SessionId) {
        self.live.retain(|s| *s != session);
        // Its persistent watches die with it.
        self.recursive.retain(|r| r.session != session);
        let doomed: Vec<String> = self
            .nodes
            .iter()
            .filter(|(_, n)| n.stat.ephemeral_owner == session)
            .map(|(p, _)| p.clone())
            .collect();
        for p in doomed {
            let _ = self.delete(&p);
        }
    }

    pub(crate) fn children_of(&self, path: &str) -> Option<Vec<String>> {
        if path != "/" && !self.nodes.contains_key(path) {
            return None;
        }
        let prefix = join_path(path, "");
        Some(
            self.nodes
                .keys()
                .filter(|k| {
                    k.starts_with(&prefix)
                        && !k[prefix.len()..].contains('/')
                        && k.len() > prefix.len()
                })
                .map(|k| k[prefix.len()..].to_owned())
                .collect(),
        )
    }

    pub(crate) fn is_live(&self, session: SessionId) -> bool {
        self.live.contains(&session)
    }

    pub(crate) fn exists(&self, path: &str) -> bool {
        self.nodes.contains_key(path)
    }

    pub(crate) fn epoch(&self, path: &str) -> Option<u64> {
        let n = self.nodes.get(path)?;
        std::str::from_utf8(&n.data).ok()?.parse().ok()
    }
}

/// The shared server.
#[derive(Clone, Default)]
pub(crate) struct FakeServer {
    pub(crate) tree: Arc<StdMutex<Tree>>,
    next_session: Arc<StdMutex<i64>>,
}

impl FakeServer {
    pub(crate) fn with<T>(&self, f: impl FnOnce(&mut Tree) -> T) -> T {
        f(&mut self.tree.lock().expect("tree"))
    }

    /// Run `hook` just before the next operation of `kind` (from any client); if it
    /// returns an error, the operation fails with it.
    pub(crate) fn before(
        &self,
        kind: Kind,
        hook: impl FnOnce(&mut Tree) -> Option<Error> + Send + 'static,
    ) {
        self.with(|t| t.hooks.push_back((kind, Box::new(hook))));
    }

    pub(crate) fn client(&self) -> Arc<FakeClient> {
        let c = Arc::new(FakeClient {
            server: self.clone(),
            session: StdMutex::new(None),
            last: StdMutex::new(SessionId::NONE),
            hub: StateHub::default(),
        });
        c.connect_new();
        c
    }

    pub(crate) fn new_session(&self) -> SessionId {
        let mut n = self.next_session.lock().expect("sessions");
        *n += 1;
        let s = SessionId(0x100 + *n);
        self.with(|t| t.live.push(s));
        s
    }
}

/// A client of the fake server; the test drives its connection.
pub(crate) struct FakeClient {
    server: FakeServer,
    /// The session while connected; `None` while disconnected.
    session: StdMutex<Option<SessionId>>,
    /// The session last connected with.
    last: StdMutex<SessionId>,
    hub: StateHub,
}

impl FakeClient {
    fn current(&self) -> Result<SessionId> {
        let s = (*self.session.lock().expect("session")).ok_or(Error::ConnectionLoss)?;
        if self.server.with(|t| t.live.contains(&s)) {
            Ok(s)
        } else {
            Err(Error::SessionExpired)
        }
    }

    pub(crate) fn session(&self) -> Option<SessionId> {
        *self.session.lock().expect("session")
    }

    fn run_hook(&self, kind: Kind) -> Result<()> {
        let hook = self.server.with(|t| {
            let pos = t.hooks.iter().position(|(k, _)| *k == kind)?;
            t.hooks.remove(pos)
        });
        match hook {
            Some((_, hook)) => match self.server.with(hook) {
                Some(e) => Err(e),
                None => Ok(()),
            },
            None => Ok(()),
        }
    }

    /// First connection, or a new session after a loss.
    pub(crate) fn connect_new(&self) -> SessionId {
        let s = self.server.new_session();
        let first = self.session.lock().expect("session").replace(s).is_none();
        let _ = first;
        *self.last.lock().expect("last") = s;
        s
    }

    pub(crate) fn publish(&self, states: &[ConnectionState]) {
        self.hub.publish(states);
    }

    /// The connection drops (session alive on the server).
    /// The session last connected with (also while suspended).
    pub(crate) fn last_session(&self) -> SessionId {
        *self.last.lock().expect("last")
    }

    /// Same as [`FakeClient::last_session`], named for readability in tests.
    pub(crate) fn session_before_suspend(&self) -> SessionId {
        self.last_session()
    }

    pub(crate) fn suspend(&self) {
        if let Some(s) = self.session.lock().expect("session").take() {
            self.server.with(|t| t.set_offline(s, true));
        }
        self.publish(&[ConnectionState::Suspended]);
    }

    /// Reconnect to `session`.
    pub(crate) fn resume(&self, session: SessionId) {
        *self.session.lock().expect("session") = Some(session);
        self.server.with(|t| t.set_offline(session, false));
        self.publish(&[ConnectionState::Reconnected { session }]);
    }

    pub(crate) fn close(&self) {
        self.hub.close();
    }
}

impl RecipeOps for FakeClient {
    fn subscribe(&self) -> (Option<ConnectionState>, StateStream) {
        self.hub.subscribe()
    }

    async fn call(&self, call: Call) -> (Reply, Option<Watch>) {
        let fail =
            |e: Error, call: &Call| -> (Reply, Option<Watch>) { (fail_reply(call, e), None) };
        let s = match self.current() {
            Ok(s) => s,
            Err(e) => return fail(e, &call),
        };
        let kind = hook_kind(&call);
        // Missing parents are made before the hook runs, as the real client's repair
        // would have made them: a hook that removes them again makes the create fail
        // NONODE (the container collection racing the create).
        let call = match call {
            Call::Create {
                path,
                data,
                mode,
                ttl_ms,
                parents: Some(parents),
            } => {
                self.server.with(|t| make_parents(t, &path, parents));
                Call::Create {
                    path,
                    data,
                    mode,
                    ttl_ms,
                    parents: None,
                }
            }
            call => call,
        };
        if let Err(e) = self.run_hook(kind) {
            return fail(e, &call);
        }
        self.server.with(|t| fake_call(t, s, call))
    }
}

pub(crate) fn fail_reply_pub(call: &Call, e: Error) -> Reply {
    fail_reply(call, e)
}

/// The hooks a call runs: the candidate's create, listings, plain reads and multis
/// (the fencing step) each have their own kind, every other call is [`Kind::Call`].
fn hook_kind(call: &Call) -> Kind {
    match call {
        Call::Create {
            mode: CreateMode::EphemeralSequential,
            ..
        } => Kind::Create,
        Call::Children { .. } => Kind::Children,
        Call::GetData { watch: false, .. } => Kind::Read,
        Call::Multi { .. } => Kind::Bump,
        Call::Create { .. }
        | Call::GetData { watch: true, .. }
        | Call::Exists { .. }
        | Call::SetData { .. }
        | Call::Delete { .. }
        | Call::AddWatch { .. }
        | Call::Sync { .. } => Kind::Call,
    }
}

/// Create every missing ancestor of `path`, as containers or persistent nodes.
fn make_parents(t: &mut Tree, path: &str, mode: CreateMode) {
    let parts: Vec<&str> = path.split('/').filter(|p| !p.is_empty()).collect();
    let mut p = String::new();
    for part in &parts[..parts.len().saturating_sub(1)] {
        p.push('/');
        p.push_str(part);
        if !t.exists(&p) {
            let _ = t.create(
                &p,
                Bytes::new(),
                SessionId::NONE,
                mode == CreateMode::Container,
                false,
            );
        }
    }
}

fn fail_reply(call: &Call, e: Error) -> Reply {
    match call {
        Call::Create { .. } => Reply::Created(Err(e)),
        Call::GetData { .. } => Reply::Data(Err(e)),
        Call::Exists { .. } => Reply::Exists(Err(e)),
        Call::Children { .. } => Reply::Children(Err(e)),
        Call::SetData { .. } => Reply::Stat(Err(e)),
        Call::Delete { .. } => Reply::Deleted(Err(e)),
        Call::AddWatch { .. } => Reply::Watching(Err(e)),
        Call::Multi { .. } => Reply::Multi(Err(e)),
        Call::Sync { .. } => Reply::Synced(Err(e)),
    }
}

fn once(rx: oneshot::Receiver<()>) -> Watch {
    Watch::Once(rx.map(|_| ()).boxed())
}

fn fake_create(
    t: &mut Tree,
    s: SessionId,
    path: &str,
    data: Bytes,
    mode: CreateMode,
    parents: Option<CreateMode>,
) -> Result<(String, Stat)> {
    let owner = if mode.is_ephemeral() {
        s
    } else {
        SessionId::NONE
    };
    let container = mode == CreateMode::Container;
    let seq = mode.is_sequential();
    let r = t.create(path, data.clone(), owner, container, seq);
    let r = match (r, parents) {
        (Err(Error::NoNode { .. }), Some(pm)) => {
            make_parents(t, path, pm);
            t.create(path, data, owner, container, seq)
        }
        (r, _) => r,
    };
    r.map(|full| {
        let stat = t.stat(&full).unwrap_or_default();
        (full, stat)
    })
}

pub(crate) fn fake_call(t: &mut Tree, s: SessionId, call: Call) -> (Reply, Option<Watch>) {
    match call {
        Call::Create {
            path,
            data,
            mode,
            parents,
            ..
        } => (
            Reply::Created(fake_create(t, s, &path, data, mode, parents)),
            None,
        ),
        Call::GetData { path, watch } => match t.nodes.get(&path).map(|n| n.data.clone()) {
            Some(data) => {
                let stat = t.stat(&path).unwrap_or_default();
                let w = watch.then(|| {
                    let (tx, rx) = oneshot::channel();
                    t.watches.entry(path.clone()).or_default().push(tx);
                    once(rx)
                });
                (Reply::Data(Ok((data, stat))), w)
            }
            None => (Reply::Data(Err(Error::NoNode { path })), None),
        },
        Call::Exists { path, watch } => {
            let stat = t.stat(&path);
            let w = watch.then(|| {
                let (tx, rx) = oneshot::channel();
                t.watches.entry(path.clone()).or_default().push(tx);
                once(rx)
            });
            (Reply::Exists(Ok(stat)), w)
        }
        Call::Children { path, watch } => match t.children_of(&path) {
            Some(children) => {
                let w = watch.then(|| {
                    let (tx, rx) = oneshot::channel();
                    t.child_watches.entry(path.clone()).or_default().push(tx);
                    // A child watch also fires when the node itself is deleted.
                    once(rx)
                });
                (Reply::Children(Ok(children)), w)
            }
            None => (Reply::Children(Err(Error::NoNode { path })), None),
        },
        Call::SetData {
            path,
            data,
            version,
        } => (Reply::Stat(t.set_data(&path, data, version)), None),
        Call::Delete { path, version } => {
            let r = match t.nodes.get(&path) {
                None => Err(Error::NoNode { path }),
                Some(n) if version != -1 && n.stat.version != version => {
                    Err(Error::BadVersion { path })
                }
                Some(_) => t.delete(&path),
            };
            (Reply::Deleted(r), None)
        }
        Call::AddWatch { path, recursive } => {
            if t.no_add_watch {
                return (
                    Reply::Watching(Err(Error::Server {
                        code: rzk_wire::ErrorCode::Unimplemented,
                        path,
                    })),
                    None,
                );
            }
            assert!(recursive, "the fake supports recursive watches only");
            let (tx, rx) = mpsc::unbounded_channel();
            t.recursive.push(Recursive {
                root: path,
                session: s,
                tx,
            });
            let stream =
                futures::stream::unfold(
                    rx,
                    |mut rx| async move { rx.recv().await.map(|e| (e, rx)) },
                );
            (
                Reply::Watching(Ok(())),
                Some(Watch::Stream(futures::StreamExt::boxed(stream))),
            )
        }
        Call::Multi { ops } => (Reply::Multi(fake_multi(t, s, ops)), None),
        // One tree: every read already sees every write.
        Call::Sync { .. } => (Reply::Synced(Ok(())), None),
    }
}

/// A multi: every check first (the fake applies nothing unless all pass), then the
/// writes in order.
fn fake_multi(t: &mut Tree, s: SessionId, ops: Vec<MultiOp>) -> Result<Vec<MultiOpResult>> {
    for (index, op) in ops.iter().enumerate() {
        let err = match op {
            MultiOp::Check { path, version }
            | MultiOp::SetData { path, version, .. }
            | MultiOp::Delete { path, version } => match t.nodes.get(path) {
                None => Some(Error::NoNode { path: path.clone() }),
                Some(n) if *version != -1 && n.stat.version != *version => {
                    Some(Error::BadVersion { path: path.clone() })
                }
                Some(_) => None,
            },
            MultiOp::Create { path, .. } => {
                let parent = parent_of(path);
                if t.exists(path) {
                    Some(Error::NodeExists { path: path.clone() })
                } else if parent != "/" && !t.exists(parent) {
                    Some(Error::NoNode { path: path.clone() })
                } else {
                    None
                }
            }
        };
        // A delete of a node with children fails too (NOTEMPTY), before anything applies.
        let err = match (err, op) {
            (None, MultiOp::Delete { path, .. }) if t.has_children(path) => {
                Some(Error::NotEmpty { path: path.clone() })
            }
            (err, _) => err,
        };
        if let Some(e) = err {
            return Err(Error::MultiFailed {
                index,
                source: Box::new(e),
            });
        }
    }
    let mut results = Vec::new();
    for op in ops {
        results.push(match op {
            MultiOp::Check { .. } => MultiOpResult::Checked,
            MultiOp::SetData {
                path,
                data,
                version,
            } => MultiOpResult::SetData(t.set_data(&path, data, version)?),
            MultiOp::Delete { path, .. } => {
                t.delete(&path)?;
                MultiOpResult::Deleted
            }
            MultiOp::Create { path, data, mode } => {
                MultiOpResult::Created(fake_create(t, s, &path, data, mode, None)?.0)
            }
        });
    }
    Ok(results)
}

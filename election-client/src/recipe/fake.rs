//! An in-memory ZooKeeper for the recipe tests: a shared tree with sessions,
//! ephemerals, containers and one-shot watches, and clients whose connection state the
//! test controls. Faults are injected with hooks that run before a chosen operation.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex as StdMutex};

use bytes::Bytes;
use futures::FutureExt;
use rzk_zxid::Zxid;
use tokio::sync::oneshot;

use super::candidacy::{join_path, BumpError};
use super::ops::{RecipeOps, WatchFired};
use crate::error::{Error, Result};
use crate::state::{ConnectionState, StateHub, StateStream};
use crate::types::{SessionId, Stat};

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
    Create,
    Children,
    Read,
    Bump,
}

type Hook = Box<dyn FnOnce(&mut Tree) -> Option<Error> + Send>;

#[derive(Default)]
pub(crate) struct Tree {
    nodes: BTreeMap<String, Node>,
    zxid: u64,
    watches: HashMap<String, Vec<oneshot::Sender<()>>>,
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
        self.fire(&full);
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
        self.next_zxid();
        self.fire(path);
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
            hub: StateHub::default(),
        });
        c.connect_new();
        c
    }

    fn new_session(&self) -> SessionId {
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
        s
    }

    pub(crate) fn publish(&self, states: &[ConnectionState]) {
        self.hub.publish(states);
    }

    /// The connection drops (session alive on the server).
    pub(crate) fn suspend(&self) {
        *self.session.lock().expect("session") = None;
        self.publish(&[ConnectionState::Suspended]);
    }

    /// Reconnect to `session`.
    pub(crate) fn resume(&self, session: SessionId) {
        *self.session.lock().expect("session") = Some(session);
        self.publish(&[ConnectionState::Reconnected { session }]);
    }

    pub(crate) fn close(&self) {
        self.hub.close();
    }
}

impl RecipeOps for FakeClient {
    async fn create_candidate(&self, parent: &str, name: &str, data: Bytes) -> Result<String> {
        let s = self.current()?;
        // Parents as containers, like creatingParentContainersIfNeeded.
        self.server.with(|t| {
            let mut p = String::new();
            for part in parent.split('/').filter(|p| !p.is_empty()) {
                p.push('/');
                p.push_str(part);
                if !t.exists(&p) {
                    let _ = t.create(&p, Bytes::new(), SessionId::NONE, true, false);
                }
            }
        });
        self.run_hook(Kind::Create)?;
        self.server
            .with(|t| t.create(&join_path(parent, name), data, s, false, true))
    }

    async fn children(&self, path: &str) -> Result<Vec<String>> {
        self.current()?;
        self.run_hook(Kind::Children)?;
        self.server
            .with(|t| t.children_of(path))
            .ok_or(Error::NoNode { path: path.into() })
    }

    async fn read(&self, path: &str) -> Result<(Bytes, Stat)> {
        self.current()?;
        self.run_hook(Kind::Read)?;
        self.server.with(|t| {
            t.nodes
                .get(path)
                .map(|n| (n.data.clone(), n.stat))
                .ok_or(Error::NoNode { path: path.into() })
        })
    }

    async fn watch(&self, path: &str) -> Result<(Stat, WatchFired)> {
        self.current()?;
        let (tx, rx) = oneshot::channel();
        let stat = self.server.with(|t| {
            let stat = t
                .nodes
                .get(path)
                .map(|n| n.stat)
                .ok_or(Error::NoNode { path: path.into() })?;
            t.watches.entry(path.to_owned()).or_default().push(tx);
            Ok::<_, Error>(stat)
        })?;
        Ok((stat, rx.map(|_| ()).boxed()))
    }

    async fn create_epoch(&self, path: &str) -> Result<()> {
        let s = self.current()?;
        let _ = s;
        self.server
            .with(|t| {
                t.create(
                    path,
                    Bytes::from_static(b"0"),
                    SessionId::NONE,
                    false,
                    false,
                )
            })
            .map(|_| ())
    }

    async fn bump_epoch(
        &self,
        candidate: &str,
        epoch_path: &str,
        version: i32,
        value: u64,
    ) -> std::result::Result<Stat, BumpError> {
        self.current().map_err(BumpError::Other)?;
        self.run_hook(Kind::Bump).map_err(BumpError::Other)?;
        self.server.with(|t| {
            if !t.exists(candidate) {
                return Err(BumpError::CandidateGone);
            }
            let zxid = t.next_zxid();
            let n = t.nodes.get_mut(epoch_path).ok_or(BumpError::EpochMissing)?;
            if n.stat.version != version {
                return Err(BumpError::EpochMoved);
            }
            n.data = Bytes::from(value.to_string());
            n.stat.version += 1;
            n.stat.mzxid = zxid;
            Ok(n.stat)
        })
    }

    async fn delete(&self, path: &str) -> Result<()> {
        self.current()?;
        self.server.with(|t| t.delete(path))
    }

    fn subscribe(&self) -> (Option<ConnectionState>, StateStream) {
        self.hub.subscribe()
    }
}

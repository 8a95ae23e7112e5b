//! The network client: [`Client`] and its typed operations.

pub mod config;
mod conn;
pub mod watches;

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use rzk_wire::{
    Acl, AddWatchRequest, CheckVersionRequest, CheckWatchesRequest, ClientInfo, CreateMode,
    CreateRequest, CreateTtlRequest, DeleteRequest, ErrorCode, ExistsRequest, GetAclRequest,
    GetAllChildrenNumberRequest, GetChildren2Request, GetChildrenRequest, GetDataRequest,
    GetEphemeralsRequest, MultiOp, MultiReadOp, MultiReadRequest, MultiRequest, MultiResult,
    ReconfigRequest, RemoveWatchesRequest, Request, Response, SetAclRequest, SetDataRequest,
    SyncRequest, WatcherType,
};
use tokio::sync::{mpsc, oneshot, Semaphore};

use self::config::{validate_path, Chroot, ClientConfig};
use self::conn::{add_watch_mode, Answer, Call, Conn, Control, Shared, WatchHandle, WatchSpec};
use self::watches::{PersistentMode, WatchEvent, WatchLagged};
use crate::error::{Error, Result};
use crate::recipe::ops::RecipeOps;
use crate::state::{ConnectionState, StateStream};
use crate::types::{SessionId, Stat};

/// A one-shot watch: resolves with the first event on its node.
#[derive(Debug)]
pub struct OneShotWatch(oneshot::Receiver<WatchEvent>);

impl OneShotWatch {
    /// The event; `Err(SessionExpired)` if the session ended first (its watches died
    /// with it), `Err(Closed)` if the client closed.
    pub async fn changed(self) -> Result<WatchEvent> {
        self.0.await.map_err(|_| Error::SessionExpired)
    }
}

/// A persistent (or recursive) watch: every event until the session ends.
#[derive(Debug)]
pub struct PersistentWatch(mpsc::Receiver<Result<WatchEvent, WatchLagged>>);

impl PersistentWatch {
    /// The next event; `None` once the session (or the client) is gone.
    pub async fn next(&mut self) -> Option<Result<WatchEvent, WatchLagged>> {
        self.0.recv().await
    }
}

/// One write of a [`Client::multi`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    /// Create a node (open ACL).
    Create {
        /// Path.
        path: String,
        /// Data.
        data: Bytes,
        /// Mode (not TTL).
        mode: CreateMode,
    },
    /// Delete a node at `version` (−1: any).
    Delete {
        /// Path.
        path: String,
        /// Expected version.
        version: i32,
    },
    /// Set data at `version` (−1: any).
    SetData {
        /// Path.
        path: String,
        /// Data.
        data: Bytes,
        /// Expected version.
        version: i32,
    },
    /// Check that the node exists at `version` (−1: any).
    Check {
        /// Path.
        path: String,
        /// Expected version.
        version: i32,
    },
}

/// The result of one op of a successful multi.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OpResult {
    /// The path created.
    Created(String),
    /// Deleted.
    Deleted,
    /// The stat after setData.
    SetData(Stat),
    /// The check passed.
    Checked,
}

/// One read of a [`Client::multi_read`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReadOp {
    /// getData.
    GetData(String),
    /// getChildren.
    GetChildren(String),
}

/// The result of one op of a multiRead; each op succeeds or fails alone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReadResult {
    /// Data and stat.
    Data(Bytes, Stat),
    /// Child names.
    Children(Vec<String>),
    /// This op failed.
    Error(Error),
}

/// An async ZooKeeper client: one session at a time over one TCP connection, moving
/// across the hosts of its connect string, re-establishing the session (id and
/// password), replaying auth and re-arming watches after each reconnect, and
/// publishing Curator's connection states ([`Client::subscribe`]).
///
/// Cloning is cheap; all clones share the session. The session is closed by
/// [`Client::close`], or when the last clone is dropped.
#[derive(Debug, Clone)]
pub struct Client {
    calls: mpsc::Sender<Call>,
    control: mpsc::UnboundedSender<Control>,
    shared: Arc<Shared>,
    permits: Arc<Semaphore>,
    chroot: Chroot,
}

impl Client {
    /// Start the client: the connection task runs in the background; requests wait
    /// for a connection.
    pub fn start(cfg: ClientConfig) -> Client {
        let outstanding_max = cfg.outstanding_max.max(1);
        let (calls_tx, calls_rx) = mpsc::channel(outstanding_max);
        let (control_tx, control_rx) = mpsc::unbounded_channel();
        let shared = Arc::new(Shared::default());
        let chroot = Chroot::new(cfg.chroot.clone());
        tokio::spawn(Conn::new(cfg, calls_rx, control_rx, shared.clone()).run());
        Client {
            calls: calls_tx,
            control: control_tx,
            shared,
            permits: Arc::new(Semaphore::new(outstanding_max)),
            chroot,
        }
    }

    /// Start and wait for the first session, at most `cfg.first_connect_timeout`.
    pub async fn connect(cfg: ClientConfig) -> Result<Client> {
        let wait = cfg.first_connect_timeout;
        let client = Client::start(cfg);
        let (mut current, mut states) = client.subscribe();
        let connected = async {
            loop {
                if current.is_some_and(|s| s.is_connected()) {
                    return true;
                }
                match states.next().await {
                    Some(Ok(s)) => current = Some(s),
                    Some(Err(_)) | None => return false,
                }
            }
        };
        match tokio::time::timeout(wait, connected).await {
            Ok(true) => Ok(client),
            Ok(false) => Err(Error::Closed),
            Err(_) => {
                client.close().await;
                Err(Error::ConnectionLoss)
            }
        }
    }

    /// A client for `connect_string` with the given session timeout, connected.
    pub async fn connect_to(connect_string: &str, session_timeout: Duration) -> Result<Client> {
        Client::connect(ClientConfig::new(connect_string)?.session_timeout(session_timeout)).await
    }

    /// The current connection state and every later one, in order.
    pub fn subscribe(&self) -> (Option<ConnectionState>, StateStream) {
        self.shared.hub.subscribe()
    }

    /// The session while connected.
    pub fn session_id(&self) -> Option<SessionId> {
        self.shared
            .session
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .map(|s| s.0)
    }

    /// The session id and password while connected (to hand to another process, or to
    /// expire the session in a test).
    pub fn session_credentials(&self) -> Option<(SessionId, Bytes)> {
        self.shared
            .session
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .map(|s| (s.0, s.1.clone()))
    }

    /// The negotiated session timeout while connected.
    pub fn negotiated_timeout(&self) -> Option<Duration> {
        self.shared
            .session
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .map(|s| Duration::from_millis(s.2))
    }

    /// Requests that may still be submitted before callers wait (bounded outstanding
    /// requests).
    pub fn available_request_slots(&self) -> usize {
        self.permits.available_permits()
    }

    /// Drop the TCP connection; the client reconnects and resumes the session.
    pub fn drop_connection(&self) {
        let _ = self.control.send(Control::DropConnection);
    }

    /// Close the session (its ephemerals go) and stop. Idempotent.
    pub async fn close(&self) {
        let (tx, rx) = oneshot::channel();
        if self.control.send(Control::Close(tx)).is_ok() {
            let _ = rx.await;
        }
    }

    /// Add an auth identity now and after every reconnect (`digest`, `user:password`).
    pub fn add_auth(&self, scheme: &str, auth: impl Into<Bytes>) -> Result<()> {
        self.control
            .send(Control::AddAuth(scheme.to_owned(), auth.into()))
            .map_err(|_| Error::Closed)
    }

    // ----- the request path ------------------------------------------------------------

    fn server_path(&self, path: &str) -> Result<String> {
        validate_path(path)?;
        Ok(self.chroot.to_server(path))
    }

    fn user_path(&self, server_path: &str) -> String {
        self.chroot
            .to_user(server_path)
            .unwrap_or_else(|| server_path.to_owned())
    }

    async fn call(&self, request: Request, watch: Option<WatchSpec>) -> Answer {
        let permit = match self.permits.clone().acquire_owned().await {
            Ok(p) => p,
            Err(_) => return closed(),
        };
        let (tx, rx) = oneshot::channel();
        let call = Call {
            request,
            watch,
            reply: tx,
            _permit: permit,
        };
        if self.calls.send(call).await.is_err() {
            return closed();
        }
        rx.await.unwrap_or_else(|_| closed())
    }

    async fn request(&self, request: Request) -> Result<Response> {
        self.call(request, None).await.result
    }

    // ----- operations --------------------------------------------------------------------

    /// create (1): returns the path created (with its sequence suffix).
    pub async fn create(
        &self,
        path: &str,
        data: impl Into<Bytes>,
        acl: Vec<Acl>,
        mode: CreateMode,
    ) -> Result<String> {
        let req = create_request(self.server_path(path)?, data.into(), acl, mode);
        let request = match mode {
            CreateMode::Container => Request::CreateContainer(req),
            CreateMode::PersistentWithTtl | CreateMode::PersistentSequentialWithTtl => {
                return Err(Error::Config("TTL modes need create_ttl".into()))
            }
            CreateMode::Persistent
            | CreateMode::Ephemeral
            | CreateMode::PersistentSequential
            | CreateMode::EphemeralSequential => Request::Create(req),
        };
        match self.request(request).await? {
            Response::Create(r) => Ok(self.user_path(&r.path)),
            Response::Create2(r) => Ok(self.user_path(&r.path)),
            other => Err(unexpected(&other)),
        }
    }

    /// create2 (15): the path created and its stat.
    pub async fn create2(
        &self,
        path: &str,
        data: impl Into<Bytes>,
        acl: Vec<Acl>,
        mode: CreateMode,
    ) -> Result<(String, Stat)> {
        let req = create_request(self.server_path(path)?, data.into(), acl, mode);
        let request = if mode == CreateMode::Container {
            Request::CreateContainer(req)
        } else {
            Request::Create2(req)
        };
        match self.request(request).await? {
            Response::Create2(r) => Ok((self.user_path(&r.path), r.stat)),
            other => Err(unexpected(&other)),
        }
    }

    /// createContainer (19).
    pub async fn create_container(
        &self,
        path: &str,
        data: impl Into<Bytes>,
    ) -> Result<(String, Stat)> {
        self.create2(path, data, Acl::open_unsafe(), CreateMode::Container)
            .await
    }

    /// createTTL (21): a persistent node deleted once empty and older than `ttl`
    /// (the server must run with TTL support enabled).
    pub async fn create_ttl(
        &self,
        path: &str,
        data: impl Into<Bytes>,
        sequential: bool,
        ttl: Duration,
    ) -> Result<(String, Stat)> {
        let mode = if sequential {
            CreateMode::PersistentSequentialWithTtl
        } else {
            CreateMode::PersistentWithTtl
        };
        let request = Request::CreateTtl(CreateTtlRequest {
            path: self.server_path(path)?.into(),
            data: Some(data.into()),
            acl: Acl::open_unsafe(),
            flags: mode.as_i32(),
            ttl_ms: i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX),
        });
        match self.request(request).await? {
            Response::Create2(r) => Ok((self.user_path(&r.path), r.stat)),
            other => Err(unexpected(&other)),
        }
    }

    /// Create `path` and every missing parent (parents as `parent_mode`: persistent or
    /// container). `NODEEXISTS` on a parent is fine; `NONODE` (a parent collected in
    /// between) is retried a few times.
    pub async fn create_with_parents(
        &self,
        path: &str,
        data: impl Into<Bytes>,
        mode: CreateMode,
        parent_mode: CreateMode,
    ) -> Result<String> {
        let data = data.into();
        let mut last = Error::NoNode {
            path: path.to_owned(),
        };
        for _ in 0..PARENT_RETRIES_MAX {
            match self
                .create(path, data.clone(), Acl::open_unsafe(), mode)
                .await
            {
                Err(Error::NoNode { .. }) => {}
                other => return other,
            }
            self.create_parents(path, parent_mode).await?;
            last = Error::NoNode {
                path: path.to_owned(),
            };
        }
        Err(last)
    }

    async fn create_parents(&self, path: &str, mode: CreateMode) -> Result<()> {
        let mut at = String::new();
        let parts: Vec<&str> = path.split('/').filter(|p| !p.is_empty()).collect();
        for part in &parts[..parts.len().saturating_sub(1)] {
            at.push('/');
            at.push_str(part);
            match self
                .create(&at, Bytes::new(), Acl::open_unsafe(), mode)
                .await
            {
                Ok(_) | Err(Error::NodeExists { .. }) => {}
                // A grandparent vanished meanwhile: the caller's retry starts over.
                Err(Error::NoNode { .. }) => return Ok(()),
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// delete (2) at `version` (−1: any).
    pub async fn delete(&self, path: &str, version: i32) -> Result<()> {
        let request = Request::Delete(DeleteRequest {
            path: self.server_path(path)?.into(),
            version,
        });
        self.request(request).await.map(|_| ())
    }

    /// exists (3): the stat, or `None` if the node is missing.
    pub async fn exists(&self, path: &str) -> Result<Option<Stat>> {
        let request = Request::Exists(ExistsRequest {
            path: self.server_path(path)?.into(),
            watch: false,
        });
        match self.request(request).await {
            Ok(Response::Stat(s)) => Ok(Some(s)),
            Ok(other) => Err(unexpected(&other)),
            Err(Error::NoNode { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// exists (3) with a watch: fires on creation, deletion or data change.
    pub async fn exists_watch(&self, path: &str) -> Result<(Option<Stat>, OneShotWatch)> {
        let request = Request::Exists(ExistsRequest {
            path: self.server_path(path)?.into(),
            watch: true,
        });
        let answer = self.call(request, Some(WatchSpec::Exists)).await;
        let watch = one_shot(answer.watch)?;
        match answer.result {
            Ok(Response::Stat(s)) => Ok((Some(s), watch)),
            Ok(other) => Err(unexpected(&other)),
            Err(Error::NoNode { .. }) => Ok((None, watch)),
            Err(e) => Err(e),
        }
    }

    /// getData (4).
    pub async fn get_data(&self, path: &str) -> Result<(Bytes, Stat)> {
        let request = Request::GetData(GetDataRequest {
            path: self.server_path(path)?.into(),
            watch: false,
        });
        match self.request(request).await? {
            Response::GetData(r) => Ok((r.data.unwrap_or_default(), r.stat)),
            other => Err(unexpected(&other)),
        }
    }

    /// getData (4) with a watch.
    pub async fn get_data_watch(&self, path: &str) -> Result<(Bytes, Stat, OneShotWatch)> {
        let request = Request::GetData(GetDataRequest {
            path: self.server_path(path)?.into(),
            watch: true,
        });
        let answer = self.call(request, Some(WatchSpec::Data)).await;
        match answer.result? {
            Response::GetData(r) => {
                Ok((r.data.unwrap_or_default(), r.stat, one_shot(answer.watch)?))
            }
            other => Err(unexpected(&other)),
        }
    }

    /// setData (5) at `version` (−1: any).
    pub async fn set_data(&self, path: &str, data: impl Into<Bytes>, version: i32) -> Result<Stat> {
        let request = Request::SetData(SetDataRequest {
            path: self.server_path(path)?.into(),
            data: Some(data.into()),
            version,
        });
        match self.request(request).await? {
            Response::Stat(s) => Ok(s),
            other => Err(unexpected(&other)),
        }
    }

    /// getACL (6).
    pub async fn get_acl(&self, path: &str) -> Result<(Vec<Acl>, Stat)> {
        let request = Request::GetAcl(GetAclRequest {
            path: self.server_path(path)?.into(),
        });
        match self.request(request).await? {
            Response::GetAcl(r) => Ok((r.acl, r.stat)),
            other => Err(unexpected(&other)),
        }
    }

    /// setACL (7) at ACL version `version` (−1: any).
    pub async fn set_acl(&self, path: &str, acl: Vec<Acl>, version: i32) -> Result<Stat> {
        let request = Request::SetAcl(SetAclRequest {
            path: self.server_path(path)?.into(),
            acl,
            version,
        });
        match self.request(request).await? {
            Response::Stat(s) => Ok(s),
            other => Err(unexpected(&other)),
        }
    }

    /// getChildren (8): child names, in the server's (undefined) order.
    pub async fn get_children(&self, path: &str) -> Result<Vec<String>> {
        let request = Request::GetChildren(GetChildrenRequest {
            path: self.server_path(path)?.into(),
            watch: false,
        });
        match self.request(request).await? {
            Response::GetChildren(r) => Ok(r.children.iter().map(|c| c.to_string()).collect()),
            other => Err(unexpected(&other)),
        }
    }

    /// getChildren (8) with a watch.
    pub async fn get_children_watch(&self, path: &str) -> Result<(Vec<String>, OneShotWatch)> {
        let request = Request::GetChildren(GetChildrenRequest {
            path: self.server_path(path)?.into(),
            watch: true,
        });
        let answer = self.call(request, Some(WatchSpec::Child)).await;
        match answer.result? {
            Response::GetChildren(r) => Ok((
                r.children.iter().map(|c| c.to_string()).collect(),
                one_shot(answer.watch)?,
            )),
            other => Err(unexpected(&other)),
        }
    }

    /// getChildren2 (12): child names and the parent's stat.
    pub async fn get_children2(&self, path: &str) -> Result<(Vec<String>, Stat)> {
        let request = Request::GetChildren2(GetChildren2Request {
            path: self.server_path(path)?.into(),
            watch: false,
        });
        match self.request(request).await? {
            Response::GetChildren2(r) => {
                Ok((r.children.iter().map(|c| c.to_string()).collect(), r.stat))
            }
            other => Err(unexpected(&other)),
        }
    }

    /// sync (9): a following read on this session sees everything committed before.
    pub async fn sync(&self, path: &str) -> Result<String> {
        let request = Request::Sync(SyncRequest {
            path: self.server_path(path)?.into(),
        });
        match self.request(request).await? {
            Response::Sync(r) => Ok(self.user_path(&r.path)),
            other => Err(unexpected(&other)),
        }
    }

    /// multi (14): all ops or none. On failure, [`Error::MultiFailed`] names the first
    /// failing op.
    pub async fn multi(&self, ops: Vec<Op>) -> Result<Vec<OpResult>> {
        let mut wire_ops = Vec::with_capacity(ops.len());
        let mut paths = Vec::with_capacity(ops.len());
        for op in &ops {
            let (wire, path) = self.multi_op(op)?;
            wire_ops.push(wire);
            paths.push(path);
        }
        let response = match self
            .request(Request::Multi(MultiRequest { ops: wire_ops }))
            .await?
        {
            Response::Multi(r) => r,
            other => return Err(unexpected(&other)),
        };
        // The first result with a real error code; the others of a failed multi are
        // 0 (rolled back) or RUNTIMEINCONSISTENCY (not evaluated).
        let failed = response
            .results
            .iter()
            .enumerate()
            .find_map(|(i, r)| match r {
                MultiResult::Error(code)
                    if *code != ErrorCode::Ok && *code != ErrorCode::RuntimeInconsistency =>
                {
                    Some((i, *code))
                }
                MultiResult::Error(_)
                | MultiResult::Create(_)
                | MultiResult::Create2(_)
                | MultiResult::Delete
                | MultiResult::SetData(_)
                | MultiResult::Check
                | MultiResult::GetChildren(_)
                | MultiResult::GetData(_) => None,
            });
        if let Some((index, code)) = failed {
            return Err(Error::MultiFailed {
                index,
                source: Box::new(Error::from_code(
                    code,
                    paths.get(index).map(String::as_str).unwrap_or_default(),
                )),
            });
        }
        response
            .results
            .into_iter()
            .map(|r| self.op_result(r))
            .collect()
    }

    fn multi_op(&self, op: &Op) -> Result<(MultiOp, String)> {
        Ok(match op {
            Op::Create { path, data, mode } => {
                let req = create_request(
                    self.server_path(path)?,
                    data.clone(),
                    Acl::open_unsafe(),
                    *mode,
                );
                let wire = if *mode == CreateMode::Container {
                    MultiOp::CreateContainer(req)
                } else {
                    MultiOp::Create(req)
                };
                (wire, path.clone())
            }
            Op::Delete { path, version } => (
                MultiOp::Delete(DeleteRequest {
                    path: self.server_path(path)?.into(),
                    version: *version,
                }),
                path.clone(),
            ),
            Op::SetData {
                path,
                data,
                version,
            } => (
                MultiOp::SetData(SetDataRequest {
                    path: self.server_path(path)?.into(),
                    data: Some(data.clone()),
                    version: *version,
                }),
                path.clone(),
            ),
            Op::Check { path, version } => (
                MultiOp::Check(CheckVersionRequest {
                    path: self.server_path(path)?.into(),
                    version: *version,
                }),
                path.clone(),
            ),
        })
    }

    fn op_result(&self, r: MultiResult) -> Result<OpResult> {
        Ok(match r {
            MultiResult::Create(c) => OpResult::Created(self.user_path(&c.path)),
            MultiResult::Create2(c) => OpResult::Created(self.user_path(&c.path)),
            MultiResult::Delete => OpResult::Deleted,
            MultiResult::SetData(s) => OpResult::SetData(s),
            MultiResult::Check => OpResult::Checked,
            MultiResult::GetChildren(_) | MultiResult::GetData(_) | MultiResult::Error(_) => {
                return Err(Error::Transport(format!("unexpected multi result {r:?}")))
            }
        })
    }

    /// multiRead (22): each read evaluated on its own.
    pub async fn multi_read(&self, ops: Vec<ReadOp>) -> Result<Vec<ReadResult>> {
        let mut wire_ops = Vec::with_capacity(ops.len());
        for op in &ops {
            wire_ops.push(match op {
                ReadOp::GetData(p) => MultiReadOp::GetData(GetDataRequest {
                    path: self.server_path(p)?.into(),
                    watch: false,
                }),
                ReadOp::GetChildren(p) => MultiReadOp::GetChildren(GetChildrenRequest {
                    path: self.server_path(p)?.into(),
                    watch: false,
                }),
            });
        }
        let response = match self
            .request(Request::MultiRead(MultiReadRequest { ops: wire_ops }))
            .await?
        {
            Response::Multi(r) => r,
            other => return Err(unexpected(&other)),
        };
        Ok(response
            .results
            .into_iter()
            .zip(ops.iter())
            .map(|(r, op)| {
                let path = match op {
                    ReadOp::GetData(p) | ReadOp::GetChildren(p) => p.as_str(),
                };
                match r {
                    MultiResult::GetData(d) => ReadResult::Data(d.data.unwrap_or_default(), d.stat),
                    MultiResult::GetChildren(c) => {
                        ReadResult::Children(c.children.iter().map(|c| c.to_string()).collect())
                    }
                    MultiResult::Error(code) => ReadResult::Error(Error::from_code(code, path)),
                    other @ (MultiResult::Create(_)
                    | MultiResult::Create2(_)
                    | MultiResult::Delete
                    | MultiResult::SetData(_)
                    | MultiResult::Check) => ReadResult::Error(Error::Transport(format!(
                        "unexpected multiRead result {other:?}"
                    ))),
                }
            })
            .collect())
    }

    /// reconfig (16): the new configuration data and stat. Standalone servers answer
    /// `RECONFIGDISABLED`.
    pub async fn reconfig(
        &self,
        joining: Option<&str>,
        leaving: Option<&str>,
        new_members: Option<&str>,
        from_config: i64,
    ) -> Result<(Bytes, Stat)> {
        let request = Request::Reconfig(ReconfigRequest {
            joining_servers: joining.map(Into::into),
            leaving_servers: leaving.map(Into::into),
            new_members: new_members.map(Into::into),
            cur_config_id: from_config,
        });
        match self.request(request).await? {
            Response::GetData(r) => Ok((r.data.unwrap_or_default(), r.stat)),
            other => Err(unexpected(&other)),
        }
    }

    /// checkWatches (17): OK if this connection has a watch of `kind` on `path`.
    pub async fn check_watches(&self, path: &str, kind: WatcherType) -> Result<()> {
        let request = Request::CheckWatches(CheckWatchesRequest {
            path: self.server_path(path)?.into(),
            watcher_type: kind,
        });
        self.request(request).await.map(|_| ())
    }

    /// removeWatches (18): remove this connection's watches of `kind` on `path`.
    pub async fn remove_watches(&self, path: &str, kind: WatcherType) -> Result<()> {
        let server_path = self.server_path(path)?;
        let request = Request::RemoveWatches(RemoveWatchesRequest {
            path: server_path.into(),
            watcher_type: kind,
        });
        self.request(request).await.map(|_| ())
    }

    /// addWatch (106): a persistent or recursive watch, kept across reconnects of the
    /// same session.
    pub async fn add_watch(&self, path: &str, mode: PersistentMode) -> Result<PersistentWatch> {
        let request = Request::AddWatch(AddWatchRequest {
            path: self.server_path(path)?.into(),
            mode: add_watch_mode(mode),
        });
        let answer = self.call(request, Some(WatchSpec::Persistent(mode))).await;
        answer.result?;
        match answer.watch {
            Some(WatchHandle::Persistent(rx)) => Ok(PersistentWatch(rx)),
            Some(WatchHandle::OneShot(_)) | None => {
                Err(Error::Transport("addWatch left no watch".into()))
            }
        }
    }

    /// getEphemerals (103): this session's ephemerals under `prefix` (a string prefix).
    pub async fn get_ephemerals(&self, prefix: &str) -> Result<Vec<String>> {
        let request = Request::GetEphemerals(GetEphemeralsRequest {
            prefix_path: self.chroot.to_server(prefix).into(),
        });
        match self.request(request).await? {
            Response::GetEphemerals(r) => Ok(r
                .ephemerals
                .iter()
                .filter_map(|p| self.chroot.to_user(p))
                .collect()),
            other => Err(unexpected(&other)),
        }
    }

    /// getAllChildrenNumber (104): the number of descendants.
    pub async fn get_all_children_number(&self, path: &str) -> Result<i32> {
        let request = Request::GetAllChildrenNumber(GetAllChildrenNumberRequest {
            path: self.server_path(path)?.into(),
        });
        match self.request(request).await? {
            Response::GetAllChildrenNumber(r) => Ok(r.total_number),
            other => Err(unexpected(&other)),
        }
    }

    /// whoAmI (107): the identities of this connection.
    pub async fn who_am_i(&self) -> Result<Vec<ClientInfo>> {
        match self.request(Request::WhoAmI).await? {
            Response::WhoAmI(r) => Ok(r.client_info),
            other => Err(unexpected(&other)),
        }
    }
}

/// How often [`Client::create_with_parents`] recreates vanished parents.
const PARENT_RETRIES_MAX: usize = 8;

fn create_request(path: String, data: Bytes, acl: Vec<Acl>, mode: CreateMode) -> CreateRequest {
    CreateRequest {
        path: path.into(),
        data: Some(data),
        acl,
        flags: mode.as_i32(),
    }
}

fn closed() -> Answer {
    Answer {
        result: Err(Error::Closed),
        watch: None,
    }
}

/// A reply whose body does not fit its request. Each typed operation matches the one
/// `Response` shape its opcode can have and sends every other variant here: whatever a
/// future variant is, it is a protocol violation for that request, so this catch-all is
/// the meaning we want, not the gap that "no wildcard arm on a protocol enum" guards
/// against (ARCHITECTURE.md, "How the code is written").
fn unexpected(response: &Response) -> Error {
    Error::Transport(format!("unexpected response {response:?}"))
}

fn one_shot(watch: Option<WatchHandle>) -> Result<OneShotWatch> {
    match watch {
        Some(WatchHandle::OneShot(rx)) => Ok(OneShotWatch(rx)),
        Some(WatchHandle::Persistent(_)) | None => {
            Err(Error::Transport("no watch was registered".into()))
        }
    }
}

impl RecipeOps for Client {
    fn subscribe(&self) -> (Option<ConnectionState>, StateStream) {
        Client::subscribe(self)
    }

    async fn call(
        &self,
        call: crate::recipe::engine::Call,
    ) -> (
        crate::recipe::engine::Reply,
        Option<crate::recipe::engine::Watch>,
    ) {
        crate::recipe::engine::client_call(self, call).await
    }
}

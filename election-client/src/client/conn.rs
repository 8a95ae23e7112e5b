//! The connection task: one per client. It owns the socket, the session, the FIFO of
//! outstanding requests, the watch table and the connection-state tracker; the
//! [`Client`](super::Client) handle talks to it through channels.
//!
//! Per connection: TCP connect to the next host (shuffled list, moving on after a
//! failure), ConnectRequest with the session id and password (0 for a new session),
//! then the auth packets and `setWatches2` for the watches to re-arm, then requests,
//! pings at a third of the read timeout (the read timeout is 2/3 of the negotiated
//! session timeout, like the Java client), and a read deadline. Replies must come in
//! request order (docs/client-protocol.md, "Reply order"); anything else is a
//! protocol error that drops the connection.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex as StdMutex};
use std::time::Duration;

use bytes::Bytes;
use futures::{SinkExt, StreamExt};
use rand::seq::SliceRandom;
use rzk_wire::client::{Incoming, Outgoing};
use rzk_wire::{
    AddWatchMode, AuthPacket, ClientCodec, ConnectRequest, ErrorCode, EventType, OpCode, Request,
    RequestFrame, Response, SetWatches2, Xid,
};
use rzk_zxid::Zxid;
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot, OwnedSemaphorePermit};
use tokio::time::Instant;
use tokio_util::codec::Framed;

use super::config::{Chroot, ClientConfig};
use super::watches::{
    EventKind, OneShotKind, PersistentMode, WatchEvent, WatchLagged, WatchRegistry,
};
use crate::error::Error;
use crate::state::{LinkEvent, StateHub, StateTracker};
use crate::types::SessionId;

/// Which watch a request leaves when it succeeds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum WatchSpec {
    /// getData with watch.
    Data,
    /// exists with watch: a data watch if the node exists, an exist watch if not.
    Exists,
    /// getChildren(2) with watch.
    Child,
    /// addWatch.
    Persistent(PersistentMode),
}

/// A watch handed back with a reply.
#[derive(Debug)]
pub(crate) enum WatchHandle {
    OneShot(oneshot::Receiver<WatchEvent>),
    Persistent(mpsc::Receiver<Result<WatchEvent, WatchLagged>>),
}

/// What the connection task answers to a call.
#[derive(Debug)]
pub(crate) struct Answer {
    pub(crate) result: Result<Response, Error>,
    pub(crate) watch: Option<WatchHandle>,
}

/// A request from the handle. It holds an outstanding-request permit until answered.
#[derive(Debug)]
pub(crate) struct Call {
    pub(crate) request: Request,
    pub(crate) watch: Option<WatchSpec>,
    pub(crate) reply: oneshot::Sender<Answer>,
    pub(crate) _permit: OwnedSemaphorePermit,
}

/// Commands that are not requests.
#[derive(Debug)]
pub(crate) enum Control {
    /// Close the session and stop.
    Close(oneshot::Sender<()>),
    /// Send an auth packet now and after every reconnect.
    AddAuth(String, Bytes),
    /// Drop the TCP connection (tests and operators: forces a reconnect).
    DropConnection,
}

/// State the handle may read.
#[derive(Debug, Default)]
pub(crate) struct Shared {
    pub(crate) hub: StateHub,
    /// The session and negotiated timeout while connected.
    pub(crate) session: StdMutex<Option<(SessionId, Bytes, u64)>>,
}

/// Why a connection ended.
enum End {
    Closed,
    Broken(String),
}

/// One request sent and not yet answered.
struct Pending {
    xid: Xid,
    op: OpCode,
    path: String,
    watch: Option<WatchSpec>,
    reply: Option<oneshot::Sender<Answer>>,
}

const RECONNECT_PAUSE_MIN: Duration = Duration::from_millis(20);
const RECONNECT_PAUSE_MAX: Duration = Duration::from_millis(1000);
const CLOSE_WAIT: Duration = Duration::from_secs(2);

pub(crate) struct Conn {
    cfg: ClientConfig,
    chroot: Chroot,
    calls: mpsc::Receiver<Call>,
    control: mpsc::UnboundedReceiver<Control>,
    shared: Arc<Shared>,
    hosts: Vec<String>,
    next_host: usize,
    /// The session to resume: id, password.
    session: Option<(SessionId, Bytes)>,
    last_zxid: Zxid,
    tracker: StateTracker,
    watches: WatchRegistry,
    epoch: Instant,
    next_xid: i32,
    closing: Option<oneshot::Sender<()>>,
}

impl Conn {
    pub(crate) fn new(
        cfg: ClientConfig,
        calls: mpsc::Receiver<Call>,
        control: mpsc::UnboundedReceiver<Control>,
        shared: Arc<Shared>,
    ) -> Conn {
        let mut hosts = cfg.hosts.clone();
        if cfg.shuffle_hosts {
            hosts.shuffle(&mut rand::rng());
        }
        let timeout_ms = u64::try_from(cfg.session_timeout.as_millis()).unwrap_or(u64::MAX);
        let cfg_resume = cfg.resume.clone();
        Conn {
            chroot: Chroot::new(cfg.chroot.clone()),
            tracker: StateTracker::new(timeout_ms, cfg.deadline_percent),
            cfg,
            calls,
            control,
            shared,
            hosts,
            next_host: 0,
            session: cfg_resume,
            last_zxid: Zxid::ZERO,
            watches: WatchRegistry::default(),
            epoch: Instant::now(),
            next_xid: 0,
            closing: None,
        }
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    pub(crate) async fn run(mut self) {
        let mut failures: u32 = 0;
        if self.hosts.is_empty() {
            // Only reachable by building a ClientConfig by hand: parsing rejects it.
            tracing::error!("no host to connect to; the client is closed");
            self.shutdown();
            return;
        }
        loop {
            if self.closing.is_some() {
                break;
            }
            if !self.drain_control_while_down() {
                break;
            }
            let host = self.hosts[self.next_host % self.hosts.len()].clone();
            self.next_host += 1;
            let wake = self
                .tracker
                .deadline_ms()
                .map(|at| self.epoch + Duration::from_millis(at));
            let attempt = tokio::time::timeout(self.cfg.connect_timeout, self.handshake(&host));
            let outcome = match wake {
                Some(wake) => {
                    tokio::select! {
                        r = attempt => Some(r),
                        () = tokio::time::sleep_until(wake) => None,
                    }
                }
                None => Some(attempt.await),
            };
            let Some(outcome) = outcome else {
                self.check_deadline();
                continue;
            };
            match outcome {
                Ok(Ok(Handshake::Established(framed))) => {
                    failures = 0;
                    match self.serve(framed).await {
                        End::Closed => break,
                        End::Broken(why) => {
                            tracing::info!(%host, %why, "connection lost");
                            self.connection_lost();
                        }
                    }
                }
                Ok(Ok(Handshake::Expired)) => {
                    tracing::info!(%host, "session expired");
                    self.session_gone(LinkEvent::Expired);
                }
                Ok(Err(e)) => {
                    tracing::debug!(%host, error = %e, "connect failed");
                    failures += 1;
                }
                Err(_) => {
                    tracing::debug!(%host, "connect timed out");
                    failures += 1;
                }
            }
            self.check_deadline();
            if failures > 0 && failures as usize % self.hosts.len() == 0 {
                // A whole round of hosts failed: pause before the next round.
                let exp = (failures as usize / self.hosts.len()).min(6) as u32;
                // Never more than an eighth of the session timeout: a pause must not
                // be what makes a session expire.
                let cap = RECONNECT_PAUSE_MAX
                    .min(self.cfg.session_timeout / 8)
                    .max(RECONNECT_PAUSE_MIN);
                let pause = (RECONNECT_PAUSE_MIN * 2u32.pow(exp)).min(cap);
                self.pause(pause).await;
            }
        }
        self.shutdown();
    }

    /// Wait `pause`, still honouring the session deadline and close requests.
    async fn pause(&mut self, pause: Duration) {
        let until = Instant::now() + pause;
        loop {
            let deadline = self
                .tracker
                .deadline_ms()
                .map(|at| self.epoch + Duration::from_millis(at));
            let wake = deadline.map_or(until, |d| d.min(until));
            tokio::select! {
                () = tokio::time::sleep_until(wake) => {}
                ctl = self.control.recv() => self.on_control_down(ctl),
            }
            self.check_deadline();
            if Instant::now() >= until || self.closing.is_some() {
                return;
            }
        }
    }

    fn on_control_down(&mut self, ctl: Option<Control>) {
        match ctl {
            Some(Control::Close(done)) => self.closing = Some(done),
            None => self.closing = Some(oneshot::channel().0),
            Some(Control::AddAuth(scheme, auth)) => self.cfg.auth.push((scheme, auth)),
            Some(Control::DropConnection) => {}
        }
    }

    /// Handle control messages that arrived while no connection was up; false to stop.
    fn drain_control_while_down(&mut self) -> bool {
        loop {
            match self.control.try_recv() {
                Ok(ctl) => self.on_control_down(Some(ctl)),
                Err(mpsc::error::TryRecvError::Empty) => break,
                // Every handle is gone: stop instead of reconnecting for nobody.
                Err(mpsc::error::TryRecvError::Disconnected) => {
                    self.on_control_down(None);
                    break;
                }
            }
        }
        self.closing.is_none()
    }

    /// The client-side session deadline (Curator's simulated expiry).
    fn check_deadline(&mut self) {
        let outcome = self.tracker.on_tick(self.now_ms());
        self.shared.hub.publish(&outcome.states);
        if outcome.abandon_session {
            tracing::warn!("session timeout passed without reconnecting; starting a new session");
            self.drop_session();
        }
    }

    fn connection_lost(&mut self) {
        *self
            .shared
            .session
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = None;
        let states = self.tracker.on_link(self.now_ms(), LinkEvent::Disconnected);
        self.shared.hub.publish(&states);
    }

    fn session_gone(&mut self, event: LinkEvent) {
        let states = self.tracker.on_link(self.now_ms(), event);
        self.shared.hub.publish(&states);
        self.drop_session();
    }

    /// Forget the session: its watches are gone and queued calls fail (they were meant
    /// for the old session; an ephemeral create must not land on a new one unasked).
    fn drop_session(&mut self) {
        self.session = None;
        self.watches.clear();
        *self
            .shared
            .session
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = None;
        while let Ok(call) = self.calls.try_recv() {
            let _ = call.reply.send(Answer {
                result: Err(Error::SessionExpired),
                watch: None,
            });
        }
    }

    fn shutdown(&mut self) {
        *self
            .shared
            .session
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = None;
        self.watches.clear();
        self.calls.close();
        while let Ok(call) = self.calls.try_recv() {
            let _ = call.reply.send(Answer {
                result: Err(Error::Closed),
                watch: None,
            });
        }
        self.shared.hub.close();
        if let Some(done) = self.closing.take() {
            let _ = done.send(());
        }
    }

    fn xid(&mut self) -> Xid {
        // Count up from 1 and wrap back to 1, like the Java client.
        self.next_xid = if self.next_xid == i32::MAX {
            1
        } else {
            self.next_xid + 1
        };
        Xid(self.next_xid)
    }

    async fn handshake(&mut self, host: &str) -> Result<Handshake, Error> {
        let stream = TcpStream::connect(host)
            .await
            .map_err(|e| Error::Transport(format!("connect {host}: {e}")))?;
        let _ = stream.set_nodelay(true);
        let mut framed = Framed::new(stream, ClientCodec::new());
        let (session_id, passwd) = match &self.session {
            Some((id, pw)) => (*id, pw.clone()),
            None => (SessionId::NONE, Bytes::from_static(&[0; 16])),
        };
        let timeout_ms = i32::try_from(self.cfg.session_timeout.as_millis()).unwrap_or(i32::MAX);
        let request = ConnectRequest {
            protocol_version: 0,
            last_zxid_seen: self.last_zxid,
            timeout_ms,
            session_id,
            passwd,
            read_only: Some(self.cfg.read_only_allowed),
        };
        framed
            .send(Outgoing::Connect(request))
            .await
            .map_err(|e| Error::Transport(e.to_string()))?;
        let response = match framed.next().await {
            Some(Ok(Incoming::Connect(r))) => r,
            Some(Ok(other)) => {
                return Err(Error::Transport(format!(
                    "expected ConnectResponse, got {other:?}"
                )))
            }
            Some(Err(e)) => return Err(Error::Transport(e.to_string())),
            // Refused without a response: e.g. our lastZxidSeen is ahead of this server.
            None => {
                return Err(Error::Transport(format!(
                    "{host} closed the connection during the handshake"
                )))
            }
        };
        if response.timeout_ms <= 0 || response.session_id == SessionId::NONE {
            if self.session.is_some() {
                return Ok(Handshake::Expired);
            }
            return Err(Error::Transport(format!("{host} refused a new session")));
        }
        let negotiated = u64::try_from(response.timeout_ms).unwrap_or(0);
        let new_session = self.session.as_ref().map(|(id, _)| *id) != Some(response.session_id);
        if new_session {
            // Watches belong to the old session; nothing can re-arm them.
            self.watches.clear();
        }
        self.session = Some((response.session_id, response.passwd.clone()));
        *self
            .shared
            .session
            .lock()
            .unwrap_or_else(|e| e.into_inner()) =
            Some((response.session_id, response.passwd.clone(), negotiated));
        let states = self.tracker.on_link(
            self.now_ms(),
            LinkEvent::Established {
                session: response.session_id,
                timeout_ms: negotiated,
                read_only: response.read_only == Some(true),
            },
        );
        tracing::info!(%host, session = %response.session_id, timeout_ms = negotiated, "connected");
        Ok(Handshake::Established(Box::new(Established {
            framed,
            states,
            negotiated,
        })))
    }

    async fn serve(&mut self, est: Box<Established>) -> End {
        let Established {
            mut framed,
            states,
            negotiated,
        } = *est;
        let mut pending: VecDeque<Pending> = VecDeque::new();
        // Auth first, then re-arm watches: both before any new request.
        for (scheme, auth) in self.cfg.auth.clone() {
            let frame = RequestFrame {
                xid: Xid::AUTH,
                request: Request::Auth(AuthPacket {
                    auth_type: 0,
                    scheme: scheme.into(),
                    auth,
                }),
            };
            if let Err(e) = framed.send(Outgoing::Request(frame)).await {
                return End::Broken(e.to_string());
            }
        }
        let rearm = self.watches.rearm();
        if !rearm.is_empty() {
            let frame = RequestFrame {
                xid: Xid::SET_WATCHES,
                request: Request::SetWatches2(SetWatches2 {
                    relative_zxid: self.last_zxid,
                    data_watches: rearm.data.into_iter().map(Into::into).collect(),
                    exist_watches: rearm.exist.into_iter().map(Into::into).collect(),
                    child_watches: rearm.child.into_iter().map(Into::into).collect(),
                    persistent_watches: rearm.persistent.into_iter().map(Into::into).collect(),
                    persistent_recursive_watches: rearm
                        .recursive
                        .into_iter()
                        .map(Into::into)
                        .collect(),
                }),
            };
            if let Err(e) = framed.send(Outgoing::Request(frame)).await {
                return End::Broken(e.to_string());
            }
            pending.push_back(Pending {
                xid: Xid::SET_WATCHES,
                op: OpCode::SetWatches2,
                path: String::new(),
                watch: None,
                reply: None,
            });
        }
        // Publish only now, so a subscriber that reacts to RECONNECTED sends its
        // requests after the re-armed watches.
        self.shared.hub.publish(&states);

        let read_timeout = Duration::from_millis(negotiated * 2 / 3);
        let ping_every = read_timeout / 3;
        let mut last_recv = Instant::now();
        let mut last_send = Instant::now();
        let end = loop {
            let room = pending.len() < self.cfg.outstanding_max;
            tokio::select! {
                biased;
                ctl = self.control.recv() => match ctl {
                    Some(Control::Close(done)) => {
                        self.closing = Some(done);
                        self.close_session(&mut framed, &mut pending).await;
                        break End::Closed;
                    }
                    None => {
                        self.closing = Some(oneshot::channel().0);
                        self.close_session(&mut framed, &mut pending).await;
                        break End::Closed;
                    }
                    Some(Control::AddAuth(scheme, auth)) => {
                        self.cfg.auth.push((scheme.clone(), auth.clone()));
                        let frame = RequestFrame { xid: Xid::AUTH, request: Request::Auth(AuthPacket { auth_type: 0, scheme: scheme.into(), auth }) };
                        if let Err(e) = framed.send(Outgoing::Request(frame)).await {
                            break End::Broken(e.to_string());
                        }
                        last_send = Instant::now();
                    }
                    Some(Control::DropConnection) => break End::Broken("dropped on request".into()),
                },
                frame = framed.next() => {
                    last_recv = Instant::now();
                    match frame {
                        Some(Ok(Incoming::Reply(raw))) => {
                            if let Err(why) = self.on_reply(raw, &mut pending) {
                                break End::Broken(why);
                            }
                        }
                        Some(Ok(Incoming::Notification(n))) => self.on_notification(n.event.event_type, &n.event.path),
                        Some(Ok(Incoming::Connect(_))) => break End::Broken("unexpected ConnectResponse".into()),
                        Some(Err(e)) => break End::Broken(format!("bad frame: {e}")),
                        None => break End::Broken("server closed the connection".into()),
                    }
                }
                call = self.calls.recv(), if room => {
                    let Some(call) = call else {
                        self.closing = Some(oneshot::channel().0);
                        self.close_session(&mut framed, &mut pending).await;
                        break End::Closed;
                    };
                    let xid = self.xid();
                    let op = call.request.opcode();
                    let path = call.request.path().unwrap_or_default().to_owned();
                    let frame = RequestFrame { xid, request: call.request };
                    if let Err(e) = framed.send(Outgoing::Request(frame)).await {
                        let _ = call.reply.send(Answer { result: Err(Error::Transport(e.to_string())), watch: None });
                        if matches!(e, rzk_wire::WireError::FrameTooLarge { .. }) {
                            // The request alone was refused; the connection is fine.
                            continue;
                        }
                        break End::Broken("send failed".into());
                    }
                    last_send = Instant::now();
                    pending.push_back(Pending { xid, op, path, watch: call.watch, reply: Some(call.reply) });
                }
                () = tokio::time::sleep_until(last_send + ping_every) => {
                    let frame = RequestFrame::ping();
                    if let Err(e) = framed.send(Outgoing::Request(frame)).await {
                        break End::Broken(e.to_string());
                    }
                    last_send = Instant::now();
                    pending.push_back(Pending { xid: Xid::PING, op: OpCode::Ping, path: String::new(), watch: None, reply: None });
                }
                () = tokio::time::sleep_until(last_recv + read_timeout) => {
                    break End::Broken(format!("nothing heard for {read_timeout:?}"));
                }
            }
        };
        for p in pending.drain(..) {
            if let Some(reply) = p.reply {
                let _ = reply.send(Answer {
                    result: Err(if matches!(end, End::Closed) {
                        Error::Closed
                    } else {
                        Error::ConnectionLoss
                    }),
                    watch: None,
                });
            }
        }
        end
    }

    async fn close_session(
        &mut self,
        framed: &mut Framed<TcpStream, ClientCodec>,
        pending: &mut VecDeque<Pending>,
    ) {
        let xid = self.xid();
        let frame = RequestFrame {
            xid,
            request: Request::CloseSession,
        };
        if framed.send(Outgoing::Request(frame)).await.is_err() {
            return;
        }
        // Wait for the close reply (the server answers everything before it first).
        let wait = async {
            while let Some(Ok(frame)) = framed.next().await {
                if let Incoming::Reply(raw) = frame {
                    if raw.header.xid == xid {
                        return;
                    }
                    let _ = self.on_reply(raw, pending);
                }
            }
        };
        let _ = tokio::time::timeout(CLOSE_WAIT, wait).await;
    }

    fn on_reply(
        &mut self,
        raw: rzk_wire::RawReply,
        pending: &mut VecDeque<Pending>,
    ) -> Result<(), String> {
        let xid = raw.header.xid;
        if xid == Xid::AUTH {
            if raw.header.err != ErrorCode::Ok {
                tracing::warn!(err = %raw.header.err, "auth rejected");
            }
            return Ok(());
        }
        let Some(front) = pending.pop_front() else {
            return Err(format!("reply xid {} with nothing outstanding", xid.0));
        };
        if front.xid != xid {
            return Err(format!(
                "xid out of order: got {}, expected {}",
                xid.0, front.xid.0
            ));
        }
        if raw.header.zxid.as_i64() > 0 && raw.header.zxid > self.last_zxid {
            self.last_zxid = raw.header.zxid;
        }
        let reply = raw
            .decode(front.op)
            .map_err(|e| format!("bad reply to {:?}: {e}", front.op))?;
        let Some(tx) = front.reply else {
            return Ok(());
        };
        let user_path = self
            .chroot
            .to_user(&front.path)
            .unwrap_or(front.path.clone());
        let (result, watch) = match reply.result {
            Ok(response) => {
                let watch = front
                    .watch
                    .map(|spec| self.register(spec, &front.path, true));
                (Ok(response), watch)
            }
            Err(ErrorCode::NoNode) if front.watch == Some(WatchSpec::Exists) => {
                let watch = self.register(WatchSpec::Exists, &front.path, false);
                (
                    Err(Error::from_code(ErrorCode::NoNode, &user_path)),
                    Some(watch),
                )
            }
            Err(code) => (Err(Error::from_code(code, &user_path)), None),
        };
        let _ = tx.send(Answer { result, watch });
        Ok(())
    }

    fn register(&mut self, spec: WatchSpec, server_path: &str, exists: bool) -> WatchHandle {
        match spec {
            WatchSpec::Data => {
                WatchHandle::OneShot(self.watches.add_one_shot(OneShotKind::Data, server_path))
            }
            WatchSpec::Exists if exists => {
                WatchHandle::OneShot(self.watches.add_one_shot(OneShotKind::Data, server_path))
            }
            WatchSpec::Exists => {
                WatchHandle::OneShot(self.watches.add_one_shot(OneShotKind::Exist, server_path))
            }
            WatchSpec::Child => {
                WatchHandle::OneShot(self.watches.add_one_shot(OneShotKind::Child, server_path))
            }
            WatchSpec::Persistent(mode) => {
                WatchHandle::Persistent(self.watches.add_persistent(mode, server_path))
            }
        }
    }

    fn on_notification(&mut self, event_type: EventType, server_path: &str) {
        let kind = match event_type {
            EventType::NodeCreated => EventKind::NodeCreated,
            EventType::NodeDeleted => EventKind::NodeDeleted,
            EventType::NodeDataChanged => EventKind::NodeDataChanged,
            EventType::NodeChildrenChanged => EventKind::NodeChildrenChanged,
            // Client-side or state events; the server never sends these for a node.
            EventType::None
            | EventType::DataWatchRemoved
            | EventType::ChildWatchRemoved
            | EventType::PersistentWatchRemoved => return,
        };
        let Some(user_path) = self.chroot.to_user(server_path) else {
            return;
        };
        self.watches.dispatch(kind, server_path, &user_path);
    }
}

/// Re-export for [`WatchSpec::Persistent`] users.
pub(crate) fn add_watch_mode(mode: PersistentMode) -> AddWatchMode {
    match mode {
        PersistentMode::Persistent => AddWatchMode::Persistent,
        PersistentMode::Recursive => AddWatchMode::PersistentRecursive,
    }
}

struct Established {
    framed: Framed<TcpStream, ClientCodec>,
    states: Vec<crate::state::ConnectionState>,
    negotiated: u64,
}

enum Handshake {
    Established(Box<Established>),
    Expired,
}

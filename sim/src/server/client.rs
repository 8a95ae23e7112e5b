//! A simulated ZooKeeper client session: it connects to a member, keeps a
//! few requests in flight on a small keyspace (registers with conditional
//! sets, ephemerals, sequential nodes, watches, `sync` then read, multi),
//! reconnects to another member with its session when its connection is
//! lost, and checks every reply against the committed history.
//!
//! What it checks (each a property by name):
//! - **ServerSessionOrder**: replies come in request order, and the zxids a
//!   session sees never go back, across reconnects too.
//! - **ServerReadConsistent**: a read answered at zxid `R` shows the
//!   committed state at `R` (data, every Stat field, the children).
//! - **ServerWriteAcked**: a write's reply names its own committed txn (its
//!   session and xid at that zxid) and what it did there.
//! - **ServerWriteLinearizable**: a write commits after every write that was
//!   acknowledged before it was sent.
//! - **ServerSyncLinearizable** (I6b): a `sync`, and the read after it, see
//!   every write acknowledged before the sync was sent.
//! - **ServerWatchBeforeReply**: a watch that a committed txn fired is
//!   notified before any reply at or after that txn.

use std::collections::{BTreeMap, VecDeque};

use bytes::Bytes;
use rzk_server::txn::TxnBody;
use rzk_wire::{
    CheckVersionRequest, CreateRequest, DeleteRequest, ErrorCode, EventType, ExistsRequest,
    GetChildrenRequest, GetDataRequest, MultiOp, MultiRequest, OpCode, Reply, Request, Response,
    SessionId, SetDataRequest, SyncRequest, Xid,
};
use rzk_zxid::Zxid;

use super::history::{History, NodeState, WatchKind};
use crate::checker::{violation, Violation};

/// The registers clients read and set.
const REGISTERS: usize = 4;

/// What a request in flight was, to check its reply.
#[derive(Clone, Debug)]
pub(crate) enum Sent {
    GetData { path: String, watch: bool },
    Exists { path: String, watch: bool },
    Children { path: String, watch: bool },
    Create { path: String, flags: i32 },
    SetData { path: String },
    Delete { path: String },
    Multi { path: String },
    Sync,
    Ping,
    Close,
}

impl Sent {
    fn opcode(&self) -> OpCode {
        match self {
            Sent::GetData { .. } => OpCode::GetData,
            Sent::Exists { .. } => OpCode::Exists,
            Sent::Children { .. } => OpCode::GetChildren,
            Sent::Create { .. } => OpCode::Create2,
            Sent::SetData { .. } => OpCode::SetData,
            Sent::Delete { .. } => OpCode::Delete,
            Sent::Multi { .. } => OpCode::Multi,
            Sent::Sync => OpCode::Sync,
            Sent::Ping => OpCode::Ping,
            Sent::Close => OpCode::CloseSession,
        }
    }

    fn is_write(&self) -> bool {
        matches!(
            self,
            Sent::Create { .. } | Sent::SetData { .. } | Sent::Delete { .. } | Sent::Multi { .. }
        )
    }
}

/// A request in flight.
#[derive(Debug)]
pub(crate) struct InFlight {
    xid: Xid,
    sent: Sent,
    /// The highest write acknowledged to any client when it was sent.
    acked_before: Zxid,
}

/// One simulated client.
#[derive(Debug)]
pub(crate) struct Client {
    pub(crate) id: usize,
    /// The session, once the server gave one.
    pub(crate) session: SessionId,
    pub(crate) password: Bytes,
    pub(crate) timeout_ms: i32,
    /// The highest zxid this session has seen.
    pub(crate) last_zxid: Zxid,
    next_xid: i32,
    pub(crate) in_flight: VecDeque<InFlight>,
    /// Watches set and not yet notified: what, and the zxid of the reply
    /// that set them.
    watches: BTreeMap<(String, WatchKind), Zxid>,
    /// Sequential nodes this client created (deleted again now and then).
    pub(crate) sequentials: Vec<String>,
    /// The last data version this client read of each register (for
    /// conditional sets).
    versions: BTreeMap<String, i32>,
    /// The session is closing at the client's request.
    pub(crate) closing: bool,
    /// Replies received.
    pub(crate) replies: u64,
}

impl Client {
    pub(crate) fn new(id: usize, timeout_ms: i32) -> Client {
        Client {
            id,
            session: SessionId::NONE,
            password: Bytes::new(),
            timeout_ms,
            last_zxid: Zxid::ZERO,
            next_xid: 1,
            in_flight: VecDeque::new(),
            watches: BTreeMap::new(),
            sequentials: Vec::new(),
            versions: BTreeMap::new(),
            closing: false,
            replies: 0,
        }
    }

    /// The connection is gone: what was in flight has an unknown outcome,
    /// and its watches went with it.
    pub(crate) fn disconnected(&mut self) {
        self.in_flight.clear();
        self.watches.clear();
    }

    /// The session is gone (expired, closed, or refused): start afresh.
    pub(crate) fn session_lost(&mut self) {
        self.session = SessionId::NONE;
        self.password = Bytes::new();
        self.sequentials.clear();
        self.closing = false;
        self.disconnected();
    }

    /// The next request to send: `choice` and `value` are the caller's draws.
    pub(crate) fn next_request(&mut self, choice: u32, value: u64, acked_max: Zxid) -> Request {
        let reg = |k: u64| format!("/k{}", k % REGISTERS as u64);
        let data = |v: u64| Some(Bytes::from(format!("{v}")));
        let mine = format!("/e/c{}", self.id);
        let (sent, request) = match choice % 100 {
            0..=19 => {
                let path = reg(value);
                let watch = value % 3 == 0;
                (
                    Sent::GetData {
                        path: path.clone(),
                        watch,
                    },
                    Request::GetData(GetDataRequest {
                        path: path.into(),
                        watch,
                    }),
                )
            }
            20..=27 => {
                let path = if value % 2 == 0 { reg(value / 2) } else { mine };
                let watch = value % 4 < 2;
                (
                    Sent::Exists {
                        path: path.clone(),
                        watch,
                    },
                    Request::Exists(ExistsRequest {
                        path: path.into(),
                        watch,
                    }),
                )
            }
            28..=32 => {
                let watch = value % 2 == 0;
                (
                    Sent::Children {
                        path: "/e".into(),
                        watch,
                    },
                    Request::GetChildren(GetChildrenRequest {
                        path: "/e".into(),
                        watch,
                    }),
                )
            }
            33..=42 => {
                let path = match value % 4 {
                    0 => "/e".to_string(),
                    1 => "/s".to_string(),
                    _ => reg(value / 4),
                };
                self.create(path, 0, data(value))
            }
            43..=52 => self.create(mine, 1, data(value)),
            53..=57 => self.create("/s/q-".into(), 2, data(value)),
            58..=72 => {
                let path = reg(value);
                let version = if value % 2 == 0 {
                    -1
                } else {
                    self.versions.get(&path).copied().unwrap_or(0)
                };
                (
                    Sent::SetData { path: path.clone() },
                    Request::SetData(SetDataRequest {
                        path: path.into(),
                        data: data(value),
                        version,
                    }),
                )
            }
            73..=77 => {
                let path = if value % 3 == 0 {
                    reg(value)
                } else if let Some(p) = self.sequentials.pop() {
                    p
                } else {
                    mine
                };
                (
                    Sent::Delete { path: path.clone() },
                    Request::Delete(DeleteRequest {
                        path: path.into(),
                        version: -1,
                    }),
                )
            }
            78..=82 => {
                let path = reg(value);
                let version = self.versions.get(&path).copied().unwrap_or(0);
                let ops = vec![
                    MultiOp::Check(CheckVersionRequest {
                        path: path.clone().into(),
                        version,
                    }),
                    MultiOp::SetData(SetDataRequest {
                        path: path.clone().into(),
                        data: data(value),
                        version: -1,
                    }),
                ];
                (Sent::Multi { path }, Request::Multi(MultiRequest { ops }))
            }
            83..=93 => (
                Sent::Sync,
                Request::Sync(SyncRequest {
                    path: reg(value).into(),
                }),
            ),
            94..=98 => (Sent::Ping, Request::Ping),
            _ => {
                self.closing = true;
                (Sent::Close, Request::CloseSession)
            }
        };
        self.push(sent, acked_max);
        request
    }

    fn create(&mut self, path: String, flags: i32, data: Option<Bytes>) -> (Sent, Request) {
        (
            Sent::Create {
                path: path.clone(),
                flags,
            },
            Request::Create2(CreateRequest {
                path: path.into(),
                data,
                acl: rzk_wire::Acl::open_unsafe(),
                flags,
            }),
        )
    }

    /// A read of a register after a sync (pipelined behind it).
    pub(crate) fn read_after_sync(&mut self, value: u64, acked_max: Zxid) -> Request {
        let path = format!("/k{}", value % REGISTERS as u64);
        self.push(
            Sent::GetData {
                path: path.clone(),
                watch: false,
            },
            acked_max,
        );
        Request::GetData(GetDataRequest {
            path: path.into(),
            watch: false,
        })
    }

    /// A ping (keeps the session alive while idle).
    pub(crate) fn ping(&mut self, acked_max: Zxid) -> Request {
        self.push(Sent::Ping, acked_max);
        Request::Ping
    }

    fn push(&mut self, sent: Sent, acked_before: Zxid) {
        let xid = match sent {
            Sent::Ping => Xid::PING,
            _ => {
                let x = Xid(self.next_xid);
                self.next_xid += 1;
                x
            }
        };
        self.in_flight.push_back(InFlight {
            xid,
            sent,
            acked_before,
        });
    }

    /// The xid of the request just pushed.
    pub(crate) fn last_xid(&self) -> Xid {
        self.in_flight.back().map_or(Xid(0), |f| f.xid)
    }

    /// A watch notification arrived.
    pub(crate) fn on_notification(&mut self, t: EventType, path: &str) {
        self.watches
            .retain(|(p, kind), _| !(p == path && kind.fired_by(t)));
    }

    /// A reply arrived: it must answer the oldest request in flight; it is
    /// checked against the history.
    pub(crate) fn on_reply(
        &mut self,
        raw: &rzk_wire::RawReply,
        h: &mut History,
    ) -> Result<(), Violation> {
        let who = format!("client {} (session {})", self.id, self.session);
        let Some(f) = self.in_flight.pop_front() else {
            return Err(violation(
                "ServerSessionOrder",
                format!(
                    "{who}: a reply (xid {}) with nothing in flight",
                    raw.header.xid.0
                ),
            ));
        };
        if raw.header.xid != f.xid {
            return Err(violation(
                "ServerSessionOrder",
                format!(
                    "{who}: a reply for xid {} while xid {} is the oldest in flight",
                    raw.header.xid.0, f.xid.0
                ),
            ));
        }
        let reply = raw.decode(f.sent.opcode()).map_err(|e| {
            violation(
                "ServerReplyDecodes",
                format!("{who}: the reply to {:?} does not decode: {e}", f.sent),
            )
        })?;
        self.replies += 1;
        let zxid = reply.zxid;
        if zxid < self.last_zxid {
            return Err(violation(
                "ServerSessionOrder",
                format!(
                    "{who}: a reply at {zxid} after one at {} ({:?})",
                    self.last_zxid, f.sent
                ),
            ));
        }
        self.last_zxid = zxid;
        self.check_watches(zxid, h, &who)?;
        if f.sent.is_write() && reply.result != Err(ErrorCode::ConnectionLoss) {
            self.check_write(&f, &reply, h, &who)?;
        } else {
            self.check_read(&f, &reply, h, &who)?;
        }
        Ok(())
    }

    /// ServerWatchBeforeReply: every watch a txn at or below `zxid` fired
    /// must have been notified before this reply.
    fn check_watches(&self, zxid: Zxid, h: &History, who: &str) -> Result<(), Violation> {
        for ((path, kind), set_at) in &self.watches {
            if let Some(z) = h.fired_between(path, *kind, *set_at, zxid) {
                return Err(violation(
                    "ServerWatchBeforeReply",
                    format!(
                        "{who}: a reply at {zxid} before the notification of its {kind:?} watch on {path} (set at {set_at}) that {z} fired"
                    ),
                ));
            }
        }
        Ok(())
    }

    fn check_read(
        &mut self,
        f: &InFlight,
        reply: &Reply,
        h: &History,
        who: &str,
    ) -> Result<(), Violation> {
        let zxid = reply.zxid;
        let mismatch = |what: String| {
            Err(violation(
                "ServerReadConsistent",
                format!("{who}: {what} at {zxid}"),
            ))
        };
        match (&f.sent, &reply.result) {
            (Sent::GetData { path, watch }, r) => {
                let want = h.state_at(path, zxid)?;
                match (r, want) {
                    (Ok(Response::GetData(got)), Some(w)) => {
                        if got.data != w.data || got.stat != w.stat {
                            return mismatch(format!(
                                "getData {path} read {:?} {:?}, the history has {:?} {:?}",
                                got.data, got.stat, w.data, w.stat
                            ));
                        }
                        self.versions.insert(path.clone(), got.stat.version);
                        if *watch {
                            self.watches.insert((path.clone(), WatchKind::Data), zxid);
                        }
                    }
                    (Err(ErrorCode::NoNode), None) => {}
                    (r, w) => {
                        return mismatch(format!(
                            "getData {path} answered {r:?}, the history has {w:?}"
                        ))
                    }
                }
            }
            (Sent::Exists { path, watch }, r) => {
                let want = h.state_at(path, zxid)?;
                match (r, want) {
                    (Ok(Response::Stat(got)), Some(w)) if *got == w.stat => {
                        if *watch {
                            self.watches.insert((path.clone(), WatchKind::Data), zxid);
                        }
                    }
                    (Err(ErrorCode::NoNode), None) => {
                        if *watch {
                            self.watches.insert((path.clone(), WatchKind::Exist), zxid);
                        }
                    }
                    (r, w) => {
                        return mismatch(format!(
                            "exists {path} answered {r:?}, the history has {w:?}"
                        ))
                    }
                }
            }
            (Sent::Children { path, watch }, r) => {
                let want = h.state_at(path, zxid)?;
                match (r, want) {
                    (Ok(Response::GetChildren(got)), Some(w)) => {
                        let mut names: Vec<String> =
                            got.children.iter().map(|c| c.to_string()).collect();
                        names.sort();
                        if names != w.children {
                            return mismatch(format!(
                                "getChildren {path} listed {names:?}, the history has {:?}",
                                w.children
                            ));
                        }
                        if *watch {
                            self.watches.insert((path.clone(), WatchKind::Child), zxid);
                        }
                    }
                    (Err(ErrorCode::NoNode), None) => {}
                    (r, w) => {
                        return mismatch(format!(
                            "getChildren {path} answered {r:?}, the history has {w:?}"
                        ))
                    }
                }
            }
            (Sent::Sync, r) => {
                if r.is_err() {
                    return mismatch(format!("sync answered {r:?}"));
                }
                if zxid < f.acked_before {
                    return Err(violation(
                        "ServerSyncLinearizable",
                        format!(
                            "{who}: a sync answered at {zxid}, but {} was acknowledged before it was sent",
                            f.acked_before
                        ),
                    ));
                }
            }
            (Sent::Ping, Ok(Response::Empty)) => {}
            (Sent::Close, Ok(Response::Empty)) => {}
            (sent, r) => return mismatch(format!("{sent:?} answered {r:?}")),
        }
        Ok(())
    }

    fn check_write(
        &mut self,
        f: &InFlight,
        reply: &Reply,
        h: &mut History,
        who: &str,
    ) -> Result<(), Violation> {
        let zxid = reply.zxid;
        let bad = |what: String| Err(violation("ServerWriteAcked", format!("{who}: {what}")));
        let Some(txn) = h.txns.get(&zxid) else {
            return bad(format!(
                "{:?} answered at {zxid}, which is no committed txn (last {})",
                f.sent,
                h.last()
            ));
        };
        if txn.header.session != self.session.0 || txn.header.cxid != f.xid.0 {
            return bad(format!(
                "{:?} (xid {}) answered at {zxid}, whose txn is session {:#x} xid {}",
                f.sent, f.xid.0, txn.header.session, txn.header.cxid
            ));
        }
        if zxid <= f.acked_before {
            return Err(violation(
                "ServerWriteLinearizable",
                format!(
                    "{who}: {:?} committed at {zxid}, before {} which was acknowledged before it was sent",
                    f.sent, f.acked_before
                ),
            ));
        }
        h.acks += 1;
        h.acked_max = h.acked_max.max(zxid);
        let state = |p: &str| h.state_at(p, zxid);
        let same_stat =
            |got: &rzk_wire::Stat, want: Option<&NodeState>| want.is_some_and(|w| w.stat == *got);
        match (&f.sent, &reply.result) {
            (Sent::Create { path: asked, flags }, Ok(Response::Create2(r))) => {
                let path = r.path.to_string();
                let named = if *flags & 2 == 0 {
                    path == *asked
                } else {
                    path.len() == asked.len() + 10 && path.starts_with(asked.as_str())
                };
                if !named {
                    return bad(format!("create {asked} (flags {flags}) answered {path}"));
                }
                if !same_stat(&r.stat, state(&path)?) {
                    return bad(format!(
                        "create answered {path} {:?}, the history disagrees",
                        r.stat
                    ));
                }
                if *flags == 2 {
                    self.sequentials.push(path);
                }
            }
            (Sent::SetData { path }, Ok(Response::Stat(stat))) => {
                if !same_stat(stat, state(path)?) {
                    return bad(format!(
                        "setData {path} answered {stat:?}, the history disagrees"
                    ));
                }
                self.versions.insert(path.clone(), stat.version);
            }
            (Sent::Delete { path }, Ok(Response::Empty)) => {
                if state(path)?.is_some() {
                    return bad(format!(
                        "delete {path} answered OK, the node is still there at {zxid}"
                    ));
                }
            }
            (Sent::Multi { path }, Ok(Response::Multi(m))) => match m.results.as_slice() {
                [rzk_wire::multi::MultiResult::Check, rzk_wire::multi::MultiResult::SetData(stat)] => {
                    if !same_stat(stat, state(path)?) {
                        return bad(format!(
                            "multi on {path} answered {stat:?}, the history disagrees"
                        ));
                    }
                }
                _ => {
                    let failed = m
                        .results
                        .iter()
                        .all(|r| matches!(r, rzk_wire::multi::MultiResult::Error(_)));
                    let txn_failed = matches!(txn.body, TxnBody::MultiError { .. });
                    if !failed || !txn_failed {
                        return bad(format!(
                            "multi on {path} answered {:?}, its txn is {:?}",
                            m.results, txn.body
                        ));
                    }
                }
            },
            (sent, Err(code)) => {
                let logged = match &txn.body {
                    TxnBody::Error(c) => Some(*c),
                    TxnBody::MultiError { code, .. } => Some(*code),
                    TxnBody::CreateSession { .. }
                    | TxnBody::CloseSession
                    | TxnBody::Op(_)
                    | TxnBody::Multi(_) => None,
                };
                if logged != Some(*code) {
                    return bad(format!(
                        "{sent:?} answered {code:?}, its txn is {:?}",
                        txn.body
                    ));
                }
            }
            (sent, r) => return bad(format!("{sent:?} answered {r:?}")),
        }
        Ok(())
    }
}

//! The leader-only stage: it exists while this member leads, and is rebuilt
//! from the replicated state each time it starts leading.
//!
//! - **Prep** of every member's writes (its own connections' by a local call,
//!   the others' from [`rzk_quorum::Committed::Forwarded`]) against the tree
//!   plus the outstanding changes of txns proposed and not yet applied; the
//!   txn header names the origin member and its request id.
//! - **Sessions**: the expiry tracker (deadlines refreshed by local traffic
//!   and by the members' batched touches), each session's owner member
//!   (SESSIONMOVED for a write that comes through another member), closes.
//! - **Containers and TTL nodes**: the reaper proposes their deletion.
//!
//! A new leader knows nothing of the previous leader's deadlines: every
//! session gets a full timeout from the moment it starts leading, as with
//! ZooKeeper, so a client has its whole timeout to find the new leader.

use std::collections::HashMap as StdHashMap;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use foldhash::{HashMap, HashMapExt, HashSet, HashSetExt};
use futures::stream::FuturesUnordered;
use rzk_quorum::{PeerId, Proposal, Replicator};
use rzk_wire::{ErrorCode, Request, RequestFrame, Xid};

use crate::acl::AuthInfo;
use crate::apply::Applied;
use crate::core::{now_ms, Core, Session};
use crate::forward::{ForwardMsg, TOUCH_BATCH_MAX};
use crate::prep::{Caller, Prep, Write};
use crate::tree::{self, DataTree};
use crate::txn::{Txn, TxnBody, TxnHeader};

/// A leader's proposal, tagged with the request it carries (see `core.rs`).
pub(crate) struct TaggedProposal {
    pub(crate) origin: u64,
    pub(crate) request: u64,
    pub(crate) proposal: Proposal,
}

/// Something for the leader's prep, from this member or another.
#[derive(Debug)]
pub(crate) enum Submit<'a> {
    /// A client write.
    Write {
        request: u64,
        session: i64,
        cxid: i32,
        auth: &'a AuthInfo,
        request_body: &'a Request,
    },
    /// A new session.
    CreateSession {
        request: u64,
        session: i64,
        timeout_ms: i32,
        password: [u8; 16],
    },
    /// A client closes its session.
    CloseSession {
        request: u64,
        session: i64,
        cxid: i32,
    },
    /// A write that is an error already (undecodable).
    Error {
        request: u64,
        session: i64,
        cxid: i32,
        code: ErrorCode,
    },
}

impl Submit<'_> {
    /// The record that carries it to the leader from another member.
    pub(crate) fn to_forward(&self) -> ForwardMsg {
        match self {
            Submit::Write {
                request,
                session,
                cxid,
                auth,
                request_body,
            } => {
                let mut frame = BytesMut::new();
                RequestFrame {
                    xid: Xid(*cxid),
                    request: (*request_body).clone(),
                }
                .encode_payload(&mut frame);
                ForwardMsg::Write {
                    request: *request,
                    session: *session,
                    cxid: *cxid,
                    auth: (*auth).clone(),
                    frame: frame.freeze(),
                }
            }
            Submit::CreateSession {
                request,
                session,
                timeout_ms,
                password,
            } => ForwardMsg::CreateSession {
                request: *request,
                session: *session,
                timeout_ms: *timeout_ms,
                password: *password,
            },
            Submit::CloseSession {
                request,
                session,
                cxid,
            } => ForwardMsg::CloseSession {
                request: *request,
                session: *session,
                cxid: *cxid,
            },
            Submit::Error {
                request,
                session,
                cxid,
                code,
            } => ForwardMsg::Error {
                request: *request,
                session: *session,
                cxid: *cxid,
                code: *code,
            },
        }
    }
}

/// A txn this leader proposed and has not applied yet.
#[derive(Debug)]
struct PendingTxn {
    /// Prep's sequence number for its outstanding changes.
    seq: u64,
    /// Paths whose outstanding change it set.
    touched: Vec<String>,
    session: i64,
    cxid: i32,
}

/// The leader-only state.
pub(crate) struct LeaderStage {
    prep: Prep,
    next_seq: u64,
    /// Txns proposed in this leadership and not yet applied, by
    /// `(origin, request)`: their outstanding changes are released when they
    /// apply (or when their proposal is refused).
    pending: StdHashMap<(u64, u64), PendingTxn>,
    /// Request ids of the leader's own txns (origin 0).
    next_own_request: u64,
    /// Each live session's expiry deadline.
    deadlines: HashMap<i64, Instant>,
    /// The member each session last attached to, when known.
    owners: HashMap<i64, u64>,
    /// Sessions whose close is proposed: their writes get SESSIONEXPIRED.
    closing: HashSet<i64>,
    /// Sessions whose creation is proposed and not yet applied here. A leader
    /// can apply a txn after its followers (they may form the quorum before
    /// the leader's own fsync returns), so a client may already write through
    /// a follower: the session is valid for prep from its proposal on, as its
    /// tree changes are (outstanding changes).
    creating: HashSet<i64>,
}

impl LeaderStage {
    /// A new leadership over the replicated `sessions`; sessions attached to
    /// this member (`me`) are owned by it, the others' owners are learned as
    /// their clients write or reattach.
    pub(crate) fn new(
        extended_types: bool,
        sessions: &HashMap<i64, Session>,
        me: u64,
    ) -> LeaderStage {
        let now = Instant::now();
        let mut deadlines = HashMap::with_capacity(sessions.len());
        let mut owners = HashMap::new();
        for (sid, s) in sessions {
            deadlines.insert(*sid, now + timeout(s.timeout_ms));
            if s.conn.is_some() {
                owners.insert(*sid, me);
            }
        }
        LeaderStage {
            prep: Prep::new(extended_types),
            next_seq: 1,
            pending: StdHashMap::new(),
            next_own_request: 1,
            deadlines,
            owners,
            closing: HashSet::new(),
            creating: HashSet::new(),
        }
    }

    /// When `sid` expires without more activity, if it is tracked.
    pub(crate) fn deadline(&self, sid: i64) -> Option<Instant> {
        self.deadlines.get(&sid).copied()
    }

    fn take_seq(&mut self) -> u64 {
        let s = self.next_seq;
        self.next_seq += 1;
        s
    }

    /// Refreshes a session's deadline: its client was heard from.
    pub(crate) fn touch(&mut self, sessions: &HashMap<i64, Session>, sid: i64) {
        if let Some(s) = sessions.get(&sid) {
            self.deadlines
                .insert(sid, Instant::now() + timeout(s.timeout_ms));
        }
    }

    /// A client (re)connected to member `origin` with this session.
    pub(crate) fn attach(&mut self, sessions: &HashMap<i64, Session>, sid: i64, origin: u64) {
        if sessions.contains_key(&sid) {
            self.owners.insert(sid, origin);
            self.touch(sessions, sid);
        }
    }

    /// Whether the applied session table answers a resume of `sid` as the
    /// ensemble would: not when its create or close is proposed and not yet
    /// applied here (the barrier of a sync settles those).
    pub(crate) fn decides_resume(&self, sid: i64) -> bool {
        !self.creating.contains(&sid) && !self.closing.contains(&sid)
    }

    /// Preps a request and proposes its txn.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn submit(
        &mut self,
        tree: &DataTree,
        sessions: &HashMap<i64, Session>,
        replicator: &dyn Replicator,
        proposals: &mut FuturesUnordered<TaggedProposal>,
        origin: u64,
        msg: Submit<'_>,
    ) {
        match msg {
            Submit::Write {
                request,
                session,
                cxid,
                auth,
                request_body,
            } => {
                self.touch(sessions, session);
                let known = sessions.contains_key(&session) || self.creating.contains(&session);
                let valid = known && !self.closing.contains(&session);
                let seq = self.take_seq();
                let moved = valid
                    && match self.owners.get(&session) {
                        Some(o) => *o != origin,
                        None => {
                            self.owners.insert(session, origin);
                            false
                        }
                    };
                let (body, touched) = if moved {
                    // The session's client now talks to another member: this
                    // write came through a stale connection (ZooKeeper's
                    // SESSIONMOVED).
                    (TxnBody::Error(ErrorCode::SessionMoved), Vec::new())
                } else {
                    let caller = Caller {
                        session,
                        auth,
                        session_valid: valid,
                    };
                    self.prep_write(tree, seq, caller, request_body)
                };
                self.propose(
                    replicator, proposals, origin, request, session, cxid, seq, body, touched,
                );
            }
            Submit::CreateSession {
                request,
                session,
                timeout_ms,
                password,
            } => {
                let seq = self.take_seq();
                self.creating.insert(session);
                self.owners.insert(session, origin);
                let body = TxnBody::CreateSession {
                    timeout_ms,
                    password,
                };
                self.propose(
                    replicator,
                    proposals,
                    origin,
                    request,
                    session,
                    0,
                    seq,
                    body,
                    Vec::new(),
                );
            }
            Submit::CloseSession {
                request,
                session,
                cxid,
            } => self.propose_close(tree, replicator, proposals, origin, request, session, cxid),
            Submit::Error {
                request,
                session,
                cxid,
                code,
            } => {
                let seq = self.take_seq();
                self.propose(
                    replicator,
                    proposals,
                    origin,
                    request,
                    session,
                    cxid,
                    seq,
                    TxnBody::Error(code),
                    Vec::new(),
                );
            }
        }
    }

    fn prep_write(
        &mut self,
        tree: &DataTree,
        seq: u64,
        caller: Caller<'_>,
        request: &Request,
    ) -> (TxnBody, Vec<String>) {
        let op = request.opcode();
        let prep = &mut self.prep;
        let p = match request {
            Request::Create(r) | Request::Create2(r) | Request::CreateContainer(r) => {
                prep.prep(tree, seq, caller, Write::Create(op, r))
            }
            Request::CreateTtl(r) => prep.prep(tree, seq, caller, Write::CreateTtl(r)),
            Request::Delete(r) => prep.prep(tree, seq, caller, Write::Delete(r)),
            Request::SetData(r) => prep.prep(tree, seq, caller, Write::SetData(r)),
            Request::SetAcl(r) => prep.prep(tree, seq, caller, Write::SetAcl(r)),
            Request::Check(r) => prep.prep(tree, seq, caller, Write::Check(r)),
            Request::Multi(m) => prep.prep_multi(tree, seq, caller, &m.ops),
            // A member forwards only writes; anything else is a bug there, and
            // its client gets an error instead of a hang.
            Request::Exists(_)
            | Request::GetData(_)
            | Request::GetAcl(_)
            | Request::GetChildren(_)
            | Request::GetChildren2(_)
            | Request::Sync(_)
            | Request::Ping
            | Request::Reconfig(_)
            | Request::CheckWatches(_)
            | Request::RemoveWatches(_)
            | Request::MultiRead(_)
            | Request::Auth(_)
            | Request::SetWatches(_)
            | Request::Sasl(_)
            | Request::GetEphemerals(_)
            | Request::GetAllChildrenNumber(_)
            | Request::SetWatches2(_)
            | Request::AddWatch(_)
            | Request::WhoAmI
            | Request::CloseSession => {
                tracing::error!(?op, "a non-write reached the leader's prep");
                return (TxnBody::Error(ErrorCode::SystemError), Vec::new());
            }
        };
        (p.body, p.touched)
    }

    #[allow(clippy::too_many_arguments)]
    fn propose_close(
        &mut self,
        tree: &DataTree,
        replicator: &dyn Replicator,
        proposals: &mut FuturesUnordered<TaggedProposal>,
        origin: u64,
        request: u64,
        session: i64,
        cxid: i32,
    ) {
        self.closing.insert(session);
        let seq = self.take_seq();
        let p = self.prep.prep_close_session(tree, seq, session);
        self.propose(
            replicator, proposals, origin, request, session, cxid, seq, p.body, p.touched,
        );
    }

    #[allow(clippy::too_many_arguments)]
    fn propose(
        &mut self,
        replicator: &dyn Replicator,
        proposals: &mut FuturesUnordered<TaggedProposal>,
        origin: u64,
        request: u64,
        session: i64,
        cxid: i32,
        seq: u64,
        body: TxnBody,
        touched: Vec<String>,
    ) {
        let txn = Txn {
            header: TxnHeader {
                origin,
                request,
                session,
                cxid,
                time_ms: now_ms(),
            },
            body,
        };
        self.pending.insert(
            (origin, request),
            PendingTxn {
                seq,
                touched,
                session,
                cxid,
            },
        );
        proposals.push(TaggedProposal {
            origin,
            request,
            proposal: replicator.propose(txn.encode()),
        });
    }

    /// A proposal was refused (too large, overloaded): its outstanding changes
    /// are rolled back and its client is answered with an error txn, so it is
    /// never left waiting.
    pub(crate) fn refused(
        &mut self,
        tree: &DataTree,
        replicator: &dyn Replicator,
        proposals: &mut FuturesUnordered<TaggedProposal>,
        origin: u64,
        request: u64,
    ) {
        let _ = tree;
        let Some(p) = self.pending.remove(&(origin, request)) else {
            return;
        };
        self.prep.applied(p.seq, &p.touched);
        if origin == 0 {
            return; // the leader's own txn: it is tried again when due
        }
        let seq = self.take_seq();
        self.propose(
            replicator,
            proposals,
            origin,
            request,
            p.session,
            p.cxid,
            seq,
            TxnBody::Error(ErrorCode::ThrottledOp),
            Vec::new(),
        );
    }

    /// A txn was applied: release its outstanding changes and follow the
    /// sessions it created or closed.
    pub(crate) fn on_applied(&mut self, header: &TxnHeader, applied: &Applied) {
        if let Some(p) = self.pending.remove(&(header.origin, header.request)) {
            self.prep.applied(p.seq, &p.touched);
        }
        let sid = header.session;
        match applied {
            Applied::SessionCreated { timeout_ms, .. } => {
                self.creating.remove(&sid);
                self.deadlines
                    .insert(sid, Instant::now() + timeout(*timeout_ms));
                if header.origin != 0 {
                    self.owners.insert(sid, header.origin);
                }
            }
            Applied::SessionClosed => {
                self.deadlines.remove(&sid);
                self.owners.remove(&sid);
                self.closing.remove(&sid);
            }
            Applied::Op(_) | Applied::Multi(_) | Applied::Error(_) | Applied::MultiError { .. } => {
            }
        }
    }

    /// Sessions past their deadline and not closing yet.
    fn expired(&self, now: Instant) -> Vec<i64> {
        let mut out: Vec<i64> = self
            .deadlines
            .iter()
            .filter(|(sid, d)| **d <= now && !self.closing.contains(sid))
            .map(|(sid, _)| *sid)
            .collect();
        out.sort_unstable();
        out
    }

    fn take_own_request(&mut self) -> u64 {
        let r = self.next_own_request;
        self.next_own_request += 1;
        r
    }
}

fn timeout(ms: i32) -> Duration {
    Duration::from_millis(ms.max(0) as u64)
}

impl Core {
    /// When a session expires without more activity: the leader's deadline,
    /// or (on a follower, which does not track expiry) a full timeout from now.
    pub(crate) fn session_deadline(&self, sid: i64, timeout_ms: i32) -> Instant {
        self.leader
            .as_ref()
            .and_then(|l| l.deadline(sid))
            .unwrap_or_else(|| Instant::now() + timeout(timeout_ms))
    }

    /// A member's forwarded record reached this leader.
    pub(crate) fn on_forwarded(&mut self, from: PeerId, payload: Bytes) {
        let Some(leader) = self.leader.as_mut() else {
            // Sent to an earlier leadership of this member: nobody waits for
            // it (the sender closed its clients when that leadership ended).
            tracing::debug!(
                from = from.0,
                "a forwarded record while not leading: dropped"
            );
            return;
        };
        let msg = match ForwardMsg::decode(&payload) {
            Ok(m) => m,
            Err(e) => {
                // I7: a bad record from a peer is refused with a log line naming it.
                tracing::warn!(peer = from.0, error = %e, "dropped a forwarded record");
                return;
            }
        };
        let origin = from.0;
        let (tree, sessions) = (&self.tree, &self.sessions);
        let (replicator, proposals) = (self.replicator.as_ref(), &mut self.proposals);
        // Owns what a forwarded write's Submit borrows, for as long as the call.
        let held: (AuthInfo, RequestFrame);
        let submit = match msg {
            ForwardMsg::Write {
                request,
                session,
                cxid,
                auth,
                frame,
            } => match RequestFrame::decode_payload(&frame) {
                Ok(rf) => {
                    held = (auth, rf);
                    Submit::Write {
                        request,
                        session,
                        cxid,
                        auth: &held.0,
                        request_body: &held.1.request,
                    }
                }
                Err(e) => {
                    tracing::warn!(peer = from.0, error = %e, "a forwarded request does not decode");
                    Submit::Error {
                        request,
                        session,
                        cxid,
                        code: ErrorCode::MarshallingError,
                    }
                }
            },
            ForwardMsg::CreateSession {
                request,
                session,
                timeout_ms,
                password,
            } => Submit::CreateSession {
                request,
                session,
                timeout_ms,
                password,
            },
            ForwardMsg::CloseSession {
                request,
                session,
                cxid,
            } => Submit::CloseSession {
                request,
                session,
                cxid,
            },
            ForwardMsg::Error {
                request,
                session,
                cxid,
                code,
            } => Submit::Error {
                request,
                session,
                cxid,
                code,
            },
            ForwardMsg::Attach { session } => return leader.attach(sessions, session, origin),
            ForwardMsg::Touch { sessions: touched } => {
                for sid in touched {
                    leader.touch(sessions, sid);
                }
                return;
            }
        };
        leader.submit(tree, sessions, replicator, proposals, origin, submit);
    }

    /// Session activity: the leader refreshes the deadline at once, a follower
    /// reports it in its next touch batch.
    pub(crate) fn touch(&mut self, sid: i64) {
        match self.leader.as_mut() {
            Some(l) => l.touch(&self.sessions, sid),
            None => {
                self.touched.insert(sid);
            }
        }
    }

    /// A follower's touch batch (ZooKeeper's learner ping).
    pub(crate) fn send_touches(&mut self) {
        if self.touched.is_empty() || self.leader.is_some() {
            self.touched.clear();
            return;
        }
        let all: Vec<i64> = self.touched.drain().collect();
        for chunk in all.chunks(TOUCH_BATCH_MAX) {
            let msg = ForwardMsg::Touch {
                sessions: chunk.to_vec(),
            };
            // Without a leader there is nobody to tell; the next leader gives
            // every session a full timeout anyway.
            let _ = self.replicator.forward(msg.encode());
        }
    }

    /// Leader only: proposes the close of every session past its deadline.
    pub(crate) fn expire_sessions(&mut self) {
        if self.shutting_down {
            return;
        }
        let Some(leader) = self.leader.as_mut() else {
            return;
        };
        for sid in leader.expired(Instant::now()) {
            if !self.sessions.contains_key(&sid) {
                leader.deadlines.remove(&sid);
                continue;
            }
            tracing::info!(session = %crate::core::format_sid(sid), "session expired");
            let request = leader.take_own_request();
            leader.propose_close(
                &self.tree,
                self.replicator.as_ref(),
                &mut self.proposals,
                0,
                request,
                sid,
                0,
            );
        }
    }

    /// Leader only: deletes empty containers that have had children and
    /// expired TTL nodes without children, as ordinary delete txns (doc §8.5,
    /// §8.6).
    pub(crate) fn reap(&mut self) {
        if self.shutting_down {
            return;
        }
        let Some(leader) = self.leader.as_mut() else {
            return;
        };
        let now = now_ms();
        let budget = self.cfg.server.container_max_per_minute as usize;
        let mut doomed = Vec::new();
        for p in self.tree.containers() {
            if let Some(n) = self.tree.get(p) {
                if n.ccount > 0 && n.num_children() == 0 {
                    doomed.push(p.clone());
                }
            }
        }
        for p in self.tree.ttl_nodes() {
            if let Some(n) = self.tree.get(p) {
                let ttl = tree::owner_ttl(n.owner).unwrap_or(i64::MAX);
                if n.num_children() == 0 && now.saturating_sub(n.mtime) > ttl {
                    doomed.push(p.clone());
                }
            }
        }
        let system = AuthInfo::system();
        for p in doomed.into_iter().take(budget) {
            let req = rzk_wire::DeleteRequest {
                path: rzk_wire::ByteString::from(p.as_str()),
                version: -1,
            };
            let caller = Caller {
                session: 0,
                auth: &system,
                session_valid: true,
            };
            let seq = leader.next_seq;
            let prepped = leader
                .prep
                .prep(&self.tree, seq, caller, Write::Delete(&req));
            if let TxnBody::Error(_) = prepped.body {
                continue; // it has children again, or a delete is already in flight
            }
            leader.take_seq();
            tracing::debug!(path = %p, "reaping a container or TTL node");
            let request = leader.take_own_request();
            leader.propose(
                self.replicator.as_ref(),
                &mut self.proposals,
                0,
                request,
                0,
                0,
                seq,
                prepped.body,
                prepped.touched,
            );
        }
    }
}

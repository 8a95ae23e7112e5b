//! The leader-only stage: it exists while this member leads, is rebuilt from
//! the replicated state each time it starts leading, and returns the txns to
//! propose ([`Proposed`]); it never calls the replicator itself.
//!
//! - **Prep** of every member's writes ([`WriteRequest`]: this member's own
//!   by a local call, the others' from their forwarded records) against the
//!   tree plus the outstanding changes of txns proposed and not yet applied;
//!   the txn header names the origin member and its request id.
//! - **Sessions**: the expiry tracker (deadlines refreshed by local traffic
//!   and by the members' batched touches), each session's owner member
//!   (SESSIONMOVED for a write that comes through another member), closes.
//! - **Containers and TTL nodes**: the reaper proposes their deletion.
//!
//! A new leader knows nothing of the previous leader's deadlines: every
//! session gets a full timeout from the moment it starts leading, as with
//! ZooKeeper, so a client has its whole timeout to find the new leader.

use std::collections::HashMap as StdHashMap;

use foldhash::{HashMap, HashMapExt, HashSet, HashSetExt};
use rzk_quorum::PeerId;
use rzk_wire::{ErrorCode, SessionId, Xid};

use crate::acl::AuthInfo;
use crate::apply::Applied;
use crate::core::io::{RequestId, Time};
use crate::core::route::WriteOp;
use crate::core::sessions::Sessions;
use crate::core::write::{WriteKind, WriteRequest};
use crate::prep::{Caller, Prep, Prepped, Write};
use crate::tree::{self, DataTree};
use crate::txn::{Txn, TxnBody, TxnHeader};

/// The origin of the leader's own txns (expiry, container and TTL deletion).
pub(crate) const OWN: PeerId = PeerId(0);

/// A txn for the replicator to propose, with the request it answers.
#[derive(Debug)]
pub(crate) struct Proposed {
    /// The member whose request it answers ([`OWN`] for the leader's own).
    pub(crate) origin: PeerId,
    /// That member's request id.
    pub(crate) request: RequestId,
    /// The txn.
    pub(crate) txn: Txn,
}

/// A txn this leader proposed and has not applied yet.
#[derive(Debug)]
struct PendingTxn {
    /// Prep's sequence number for its outstanding changes.
    seq: u64,
    /// Paths whose outstanding change it set.
    touched: Vec<String>,
    session: SessionId,
    cxid: Xid,
}

/// The leader-only state.
pub(crate) struct LeaderStage {
    prep: Prep,
    next_seq: u64,
    /// Txns proposed in this leadership and not yet applied, by
    /// `(origin, request)`: their outstanding changes are released when they
    /// apply (or when their proposal is refused).
    pending: StdHashMap<(PeerId, RequestId), PendingTxn>,
    /// Request ids of the leader's own txns (origin [`OWN`]).
    next_own_request: u64,
    /// Each live session's expiry deadline (monotonic µs).
    deadlines: HashMap<SessionId, u64>,
    /// The member each session last attached to, when known.
    owners: HashMap<SessionId, PeerId>,
    /// Sessions whose close is proposed: their writes get SESSIONEXPIRED.
    closing: HashSet<SessionId>,
    /// Sessions whose creation is proposed and not yet applied here. A leader
    /// can apply a txn after its followers (they may form the quorum before
    /// the leader's own fsync returns), so a client may already write through
    /// a follower: the session is valid for prep from its proposal on, as its
    /// tree changes are (outstanding changes).
    creating: HashSet<SessionId>,
}

impl LeaderStage {
    /// A new leadership over the replicated `sessions`; sessions attached to
    /// this member (`me`) are owned by it, the others' owners are learned as
    /// their clients write or reattach.
    pub(crate) fn new(
        extended_types: bool,
        sessions: &Sessions,
        me: PeerId,
        now: Time,
    ) -> LeaderStage {
        let mut deadlines = HashMap::with_capacity(sessions.len());
        let mut owners = HashMap::new();
        for (sid, s) in sessions.iter() {
            deadlines.insert(sid, deadline(now, s.timeout_ms));
            if s.conn.is_some() {
                owners.insert(sid, me);
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

    /// When `sid` expires without more activity (monotonic µs), if tracked.
    pub(crate) fn deadline(&self, sid: SessionId) -> Option<u64> {
        self.deadlines.get(&sid).copied()
    }

    fn take_seq(&mut self) -> u64 {
        let s = self.next_seq;
        self.next_seq += 1;
        s
    }

    /// Refreshes a session's deadline: its client was heard from.
    pub(crate) fn touch(&mut self, sessions: &Sessions, sid: SessionId, now: Time) {
        if let Some(s) = sessions.get(sid) {
            self.deadlines.insert(sid, deadline(now, s.timeout_ms));
        }
    }

    /// A client (re)connected to member `origin` with this session.
    pub(crate) fn attach(
        &mut self,
        sessions: &Sessions,
        sid: SessionId,
        origin: PeerId,
        now: Time,
    ) {
        if sessions.contains(sid) {
            self.owners.insert(sid, origin);
            self.touch(sessions, sid, now);
        }
    }

    /// Whether the applied session table answers a resume of `sid` as the
    /// ensemble would: not when its create or close is proposed and not yet
    /// applied here (the barrier of a sync settles those).
    pub(crate) fn decides_resume(&self, sid: SessionId) -> bool {
        !self.creating.contains(&sid) && !self.closing.contains(&sid)
    }

    /// Preps a request: the txn to propose.
    pub(crate) fn submit(
        &mut self,
        tree: &DataTree,
        sessions: &Sessions,
        w: WriteRequest,
        now: Time,
    ) -> Proposed {
        let WriteRequest {
            origin,
            request,
            session,
            cxid,
            kind,
        } = w;
        let seq = self.take_seq();
        let (body, touched) = match kind {
            WriteKind::Op { auth, op } => {
                self.touch(sessions, session, now);
                self.prep_op(tree, sessions, seq, origin, session, &auth, &op)
            }
            WriteKind::CreateSession {
                timeout_ms,
                password,
            } => {
                self.creating.insert(session);
                self.owners.insert(session, origin);
                let body = TxnBody::CreateSession {
                    timeout_ms,
                    password,
                };
                (body, Vec::new())
            }
            WriteKind::CloseSession => {
                self.closing.insert(session);
                let p = self.prep.prep_close_session(tree, seq, session.0);
                (p.body, p.touched)
            }
            WriteKind::Error(code) => (TxnBody::Error(code), Vec::new()),
        };
        self.proposed(origin, request, session, cxid, seq, body, touched, now)
    }

    /// Preps a client's change: SESSIONEXPIRED for a session gone or
    /// closing, SESSIONMOVED for one whose client now talks to another member.
    #[allow(clippy::too_many_arguments)]
    fn prep_op(
        &mut self,
        tree: &DataTree,
        sessions: &Sessions,
        seq: u64,
        origin: PeerId,
        session: SessionId,
        auth: &AuthInfo,
        op: &WriteOp,
    ) -> (TxnBody, Vec<String>) {
        let known = sessions.contains(session) || self.creating.contains(&session);
        let valid = known && !self.closing.contains(&session);
        let moved = valid
            && match self.owners.get(&session) {
                Some(o) => *o != origin,
                None => {
                    self.owners.insert(session, origin);
                    false
                }
            };
        if moved {
            // The session's client now talks to another member: this write
            // came through a stale connection (ZooKeeper's SESSIONMOVED).
            return (TxnBody::Error(ErrorCode::SessionMoved), Vec::new());
        }
        let caller = Caller {
            session: session.0,
            auth,
            session_valid: valid,
        };
        let prep = &mut self.prep;
        let p: Prepped = match op {
            WriteOp::Create(code, r) => prep.prep(tree, seq, caller, Write::Create(*code, r)),
            WriteOp::CreateTtl(r) => prep.prep(tree, seq, caller, Write::CreateTtl(r)),
            WriteOp::Delete(r) => prep.prep(tree, seq, caller, Write::Delete(r)),
            WriteOp::SetData(r) => prep.prep(tree, seq, caller, Write::SetData(r)),
            WriteOp::SetAcl(r) => prep.prep(tree, seq, caller, Write::SetAcl(r)),
            WriteOp::Check(r) => prep.prep(tree, seq, caller, Write::Check(r)),
            WriteOp::Multi(m) => prep.prep_multi(tree, seq, caller, &m.ops),
        };
        (p.body, p.touched)
    }

    /// Records a txn as proposed and returns it.
    #[allow(clippy::too_many_arguments)]
    fn proposed(
        &mut self,
        origin: PeerId,
        request: RequestId,
        session: SessionId,
        cxid: Xid,
        seq: u64,
        body: TxnBody,
        touched: Vec<String>,
        now: Time,
    ) -> Proposed {
        let txn = Txn {
            header: TxnHeader {
                origin: origin.0,
                request: request.0,
                session: session.0,
                cxid: cxid.0,
                time_ms: now.wall_ms,
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
        Proposed {
            origin,
            request,
            txn,
        }
    }

    /// A proposal was refused (too large, overloaded): its outstanding changes
    /// are rolled back and its client is answered with an error txn, so it is
    /// never left waiting.
    pub(crate) fn refused(
        &mut self,
        origin: PeerId,
        request: RequestId,
        now: Time,
    ) -> Option<Proposed> {
        let p = self.pending.remove(&(origin, request))?;
        self.prep.applied(p.seq, &p.touched);
        if origin == OWN {
            return None; // the leader's own txn: it is tried again when due
        }
        let seq = self.take_seq();
        let body = TxnBody::Error(ErrorCode::ThrottledOp);
        Some(self.proposed(
            origin,
            request,
            p.session,
            p.cxid,
            seq,
            body,
            Vec::new(),
            now,
        ))
    }

    /// A txn was applied: release its outstanding changes and follow the
    /// sessions it created or closed.
    pub(crate) fn on_applied(&mut self, header: &TxnHeader, applied: &Applied, now: Time) {
        let origin = PeerId(header.origin);
        if let Some(p) = self.pending.remove(&(origin, RequestId(header.request))) {
            self.prep.applied(p.seq, &p.touched);
        }
        let sid = SessionId(header.session);
        match applied {
            Applied::SessionCreated { timeout_ms, .. } => {
                self.creating.remove(&sid);
                self.deadlines.insert(sid, deadline(now, *timeout_ms));
                if origin != OWN {
                    self.owners.insert(sid, origin);
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

    /// Proposes the close of every session past its deadline, in id order.
    pub(crate) fn expire(
        &mut self,
        tree: &DataTree,
        sessions: &Sessions,
        now: Time,
    ) -> Vec<Proposed> {
        let mut expired: Vec<SessionId> = self
            .deadlines
            .iter()
            .filter(|(sid, d)| **d <= now.mono_us && !self.closing.contains(sid))
            .map(|(sid, _)| *sid)
            .collect();
        expired.sort_unstable();
        let mut out = Vec::with_capacity(expired.len());
        for sid in expired {
            if !sessions.contains(sid) {
                self.deadlines.remove(&sid);
                continue;
            }
            tracing::info!(session = %sid, "session expired");
            let request = self.take_own_request();
            let w = WriteRequest {
                origin: OWN,
                request,
                session: sid,
                cxid: Xid(0),
                kind: WriteKind::CloseSession,
            };
            out.push(self.submit(tree, sessions, w, now));
        }
        out
    }

    /// Deletes empty containers that have had children and expired TTL nodes
    /// without children, as ordinary delete txns, at most `budget` of them.
    pub(crate) fn reap(&mut self, tree: &DataTree, budget: usize, now: Time) -> Vec<Proposed> {
        let mut doomed = Vec::new();
        for p in tree.containers() {
            if let Some(n) = tree.get(p) {
                if n.ccount > 0 && n.num_children() == 0 {
                    doomed.push(p.clone());
                }
            }
        }
        for p in tree.ttl_nodes() {
            if let Some(n) = tree.get(p) {
                let ttl = tree::owner_ttl(n.owner).unwrap_or(i64::MAX);
                if n.num_children() == 0 && now.wall_ms.saturating_sub(n.mtime) > ttl {
                    doomed.push(p.clone());
                }
            }
        }
        let system = AuthInfo::system();
        let mut out = Vec::new();
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
            let seq = self.next_seq;
            let prepped = self.prep.prep(tree, seq, caller, Write::Delete(&req));
            if let TxnBody::Error(_) = prepped.body {
                continue; // it has children again, or a delete is already in flight
            }
            self.take_seq();
            tracing::debug!(path = %p, "reaping a container or TTL node");
            let request = self.take_own_request();
            out.push(self.proposed(
                OWN,
                request,
                SessionId::NONE,
                Xid(0),
                seq,
                prepped.body,
                prepped.touched,
                now,
            ));
        }
        out
    }

    fn take_own_request(&mut self) -> RequestId {
        let r = self.next_own_request;
        self.next_own_request += 1;
        RequestId(r)
    }
}

/// When a session of `timeout_ms` expires without activity after `now`.
fn deadline(now: Time, timeout_ms: i32) -> u64 {
    now.plus_ms(timeout_ms.max(0) as u64)
}

//! Sessions on this member: connects (a new session is a txn the leader
//! proposes; a resumed one is checked against the replicated session table and
//! announced to the leader), the connection a session is attached to here, and
//! session ids.
//!
//! The session table itself is replicated: only apply adds or removes a
//! session (`commit.rs`); expiry belongs to the leader (`leader.rs`).

use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use rzk_quorum::ReplicateError;
use rzk_wire::{ConnectRequest, Record};
use rzk_zxid::Zxid;

use crate::acl::AuthInfo;
use crate::core::{
    format_sid, now_ms, push_frame, session_conn, Backlog, Conn, ConnState, ConnStats, Core,
    CoreError, HeldConnect, InFlight, ReplyQueue, Revalidation, Serving,
};
use crate::forward::ForwardMsg;
use crate::leader::Submit;
use crate::outbox::Outbox;
use crate::tree;
use crate::watch::ConnId;

/// Connections that may wait for this member to serve (recovering, electing).
/// Beyond it new ones are closed at once, as ZooKeeper closes them all.
pub(crate) const HELD_CONNECTS_MAX: usize = 10_000;

impl Core {
    fn negotiate(&self, requested: i32) -> i32 {
        let min = self.cfg.server.min_session_timeout_ms as i32;
        let max = self.cfg.server.max_session_timeout_ms as i32;
        requested.clamp(min, max)
    }

    pub(crate) fn on_connect(
        &mut self,
        id: ConnId,
        peer: SocketAddr,
        auth: AuthInfo,
        outbox: Arc<Outbox>,
        req: ConnectRequest,
    ) {
        if self.shutting_down {
            outbox.close_now();
            return;
        }
        if self.serving == Serving::No {
            // Recovering or electing: the client waits (its connect timeout
            // bounds how long) and is served as soon as this member serves.
            if self.held_connects.len() >= HELD_CONNECTS_MAX {
                outbox.close_now();
                return;
            }
            self.held_connects.push_back(HeldConnect {
                conn: id,
                peer,
                auth,
                outbox,
                req,
                backlog: Vec::new(),
            });
            return;
        }
        // doc §3.6: a client that has seen more than this server has applied
        // must not go back in time here; it tries another member.
        if req.last_zxid_seen > self.applied {
            tracing::info!(
                %peer,
                client_last_zxid = %req.last_zxid_seen,
                server_last_zxid = %self.applied,
                "refusing a client that has seen a later zxid than this server"
            );
            outbox.close_now();
            return;
        }
        let negotiated = self.negotiate(req.timeout_ms);
        let mut conn = Box::new(Conn {
            outbox,
            auth,
            state: ConnState::Connecting,
            backlog: Backlog::default(),
            queue: ReplyQueue::default(),
            read_only_byte: req.read_only.is_some(),
            established_ms: now_ms(),
            stats: ConnStats::default(),
        });
        conn.stats.received = 1;
        self.stats.packets_received += 1;
        if req.session_id.0 == 0 {
            let session = self.allocate_session_id();
            let password: [u8; 16] = rand::random();
            self.conns.insert(id, conn);
            let request = self.take_request();
            self.in_flight.insert(request, InFlight::Connect(id));
            self.submit(
                id,
                Submit::CreateSession {
                    request,
                    session,
                    timeout_ms: negotiated,
                    password,
                },
            );
            return;
        }
        self.resume(id, conn, &req, negotiated);
    }

    /// A client comes back with its session id and password.
    fn resume(&mut self, id: ConnId, conn: Box<Conn>, req: &ConnectRequest, negotiated: i32) {
        let sid = req.session_id.0;
        // doc §3.5 step 1: any other connection of this session is closed
        // first, even if the password turns out wrong.
        if let Some(old) = self.sessions.get_mut(&sid).and_then(|s| s.conn.take()) {
            let old = old.get();
            if old != id {
                if let Some(c) = self.conns.get_mut(&old) {
                    c.state = ConnState::Closing;
                    c.outbox.close_now();
                }
            }
        }
        // The leader decides from its own table, as ZooKeeper's leader does
        // (its revalidation touches its own session tracker): every committed
        // create and close is applied here or still tracked as proposed, so a
        // session neither being created nor closed is live here exactly when
        // it is in the table. No quorum round: a leader that has not noticed
        // yet that it is cut off from its followers still resumes its clients
        // and serves their reads, as ZooKeeper's does (found by rzk-chaos
        // `--schedule partition-leader`: every resume waited for the heal).
        if self.leader.as_ref().is_some_and(|l| l.decides_resume(sid)) {
            self.finish_resume(id, conn, req, negotiated);
            return;
        }
        // A follower's session table may be behind the ensemble's either way:
        // a session created (or closed, or expired) through another member is
        // applied here a moment after that member answered its client. So a
        // member does not decide from its table at once: ZooKeeper's learners
        // ask the leader (REVALIDATE); here the I6b barrier gives the same
        // answer. Once this member has applied everything committed before the
        // sync reached the leader, its table holds the session exactly when the
        // ensemble does. Requests pipelined behind the ConnectRequest wait in
        // the connection's backlog meanwhile.
        let token = self.next_sync_token;
        self.next_sync_token += 1;
        let barrier = self.replicator.sync();
        self.syncs
            .push(tokio::spawn(async move { (id, token, barrier.await) }));
        self.revalidating.insert(
            id,
            Revalidation {
                token,
                req: req.clone(),
                negotiated,
                barrier: None,
            },
        );
        self.conns.insert(id, conn);
    }

    /// The barrier of a resume arrived (or the sync failed: without a leader
    /// the session cannot be vouched for, and the client tries again).
    pub(crate) fn on_revalidated(
        &mut self,
        id: ConnId,
        result: Result<Zxid, ReplicateError>,
    ) -> Result<(), CoreError> {
        match result {
            Ok(zxid) => {
                if let Some(r) = self.revalidating.get_mut(&id) {
                    r.barrier = Some(zxid);
                }
                self.revalidations_ready();
                Ok(())
            }
            Err(ReplicateError::Storage(e)) => Err(ReplicateError::Storage(e).into()),
            Err(e) => {
                tracing::debug!(error = %e, "cannot revalidate a session: closing the connection");
                self.revalidating.remove(&id);
                self.fail_conn(id);
                Ok(())
            }
        }
    }

    /// Decides the resumes whose barrier this member has applied.
    pub(crate) fn revalidations_ready(&mut self) {
        if self.revalidating.is_empty() {
            return;
        }
        let applied = self.applied;
        let ready: Vec<ConnId> = self
            .revalidating
            .iter()
            .filter(|(_, r)| r.barrier.is_some_and(|b| b <= applied))
            .map(|(id, _)| *id)
            .collect();
        for id in ready {
            let r = self.revalidating.remove(&id).expect("listed above");
            let Some(conn) = self.conns.remove(&id) else {
                continue;
            };
            if matches!(conn.state, ConnState::Closing) {
                continue;
            }
            self.finish_resume(id, conn, &r.req, r.negotiated);
        }
    }

    /// Answers a resume from this member's (current) session table.
    fn finish_resume(
        &mut self,
        id: ConnId,
        mut conn: Box<Conn>,
        req: &ConnectRequest,
        negotiated: i32,
    ) {
        let sid = req.session_id.0;
        let valid = self
            .sessions
            .get(&sid)
            .is_some_and(|s| s.password[..] == req.passwd[..]);
        if !valid {
            tracing::info!(session = %format_sid(sid), peer = %conn.peer(), "refusing to resume an expired session or a wrong password");
            push_frame(&conn.outbox, |b| req.reject().encode(b));
            conn.outbox.close_after_flush();
            return;
        }
        let s = self.sessions.get_mut(&sid).expect("checked above");
        // Another connection may have resumed the session meanwhile: the newer
        // one wins, as at step 1.
        if let Some(old) = std::mem::replace(&mut s.conn, session_conn(id)) {
            let old = old.get();
            if old != id {
                if let Some(c) = self.conns.get_mut(&old) {
                    c.state = ConnState::Closing;
                    c.outbox.close_now();
                }
            }
        }
        let s = self.sessions.get_mut(&sid).expect("checked above");
        s.timeout_ms = negotiated;
        let resp = req.accept(
            negotiated,
            rzk_wire::SessionId(sid),
            Bytes::copy_from_slice(&s.password),
        );
        push_frame(&conn.outbox, |b| resp.encode(b));
        conn.state = ConnState::Connected(sid);
        conn.stats.sent += 1;
        self.stats.packets_sent += 1;
        tracing::info!(session = %format_sid(sid), peer = %conn.peer(), timeout_ms = negotiated, "session resumed");
        let backlog = conn.backlog.take();
        self.conns.insert(id, conn);
        // The leader makes this member the session's owner (a write through
        // another member's stale connection then gets SESSIONMOVED).
        let me = self.cfg.server_id;
        match self.leader.as_mut() {
            Some(l) => l.attach(&self.sessions, sid, me),
            None => self.forward(id, ForwardMsg::Attach { session: sid }),
        }
        for (req, permit) in backlog {
            self.process(id, sid, req, permit);
        }
    }

    fn allocate_session_id(&mut self) -> i64 {
        loop {
            let id = self.next_session_id;
            self.next_session_id = self.next_session_id.wrapping_add(1);
            // Keep ids positive and clear of the container/TTL owner encodings.
            if id > 0 && !self.sessions.contains_key(&id) && tree::owner_is_session(id) {
                return id;
            }
        }
    }

    pub(crate) fn on_closed(&mut self, id: ConnId) {
        self.held_connects.retain(|h| h.conn != id);
        self.revalidating.remove(&id);
        let Some(conn) = self.conns.remove(&id) else {
            return;
        };
        self.watches.remove_conn(id);
        if let Some(sid) = conn.session() {
            if let Some(s) = self.sessions.get_mut(&sid) {
                if s.conn == session_conn(id) {
                    s.conn = None;
                }
            }
            tracing::debug!(session = %format_sid(sid), peer = %conn.peer(), "connection closed");
        }
    }

    /// The session created for connection `id` is applied: answer its
    /// ConnectRequest and serve the requests that waited for it.
    pub(crate) fn connected(&mut self, id: ConnId, sid: i64) {
        let Some(conn) = self.conns.get_mut(&id) else {
            return;
        };
        let Some(s) = self.sessions.get_mut(&sid) else {
            return;
        };
        s.conn = session_conn(id);
        tracing::info!(session = %format_sid(sid), peer = %conn.peer(), timeout_ms = s.timeout_ms, "session established");
        // The ConnectResponse carries the readOnly byte exactly when the
        // request did; the outbox encodes it as the codec would.
        let resp = rzk_wire::ConnectResponse {
            protocol_version: 0,
            timeout_ms: s.timeout_ms,
            session_id: rzk_wire::SessionId(sid),
            passwd: Bytes::copy_from_slice(&s.password),
            read_only: conn.read_only_byte.then_some(false),
        };
        push_frame(&conn.outbox, |b| resp.encode(b));
        conn.stats.sent += 1;
        self.stats.packets_sent += 1;
        conn.state = ConnState::Connected(sid);
        let backlog = conn.backlog.take();
        for (req, permit) in backlog {
            self.process(id, sid, req, permit);
        }
    }
}

//! The sessions stage: the replicated session table (only applied txns add
//! or remove a session, so every member's table is the same at the same
//! zxid), which of this member's connections each session is attached to,
//! the ids of the sessions this member creates, the resumes waiting for a
//! barrier before the table may decide them, and a follower's batch of
//! session activity for the leader. Expiry belongs to the leader
//! (`leader.rs`).

use std::num::NonZeroU64;

use foldhash::{HashMap, HashMapExt, HashSet, HashSetExt};
use rzk_quorum::PeerId;
use rzk_wire::{ConnectRequest, SessionId};
use rzk_zxid::Zxid;

use crate::core::conns::session_conn;
use crate::core::io::{SyncToken, Time};
use crate::core::write::TOUCH_BATCH_MAX;
use crate::tree::{self, SessionRecord};
use crate::watch::ConnId;

/// A session of the replicated session table, with this member's attachment.
#[derive(Debug)]
pub(crate) struct Session {
    pub(crate) timeout_ms: i32,
    pub(crate) password: [u8; 16],
    /// The connection of this member attached to it, if any. Connection ids
    /// start at 1, so `None` takes no room of its own: a `Session` is 32
    /// bytes, not 40 (a table entry with its id 40, not 48), in a table with
    /// a bucket for every session.
    pub(crate) conn: Option<NonZeroU64>,
}

/// A client resuming its session on this member, waiting for the member to be
/// current before the session table decides.
#[derive(Debug)]
pub(crate) struct Revalidation {
    /// The token of the sync barrier it waits for.
    pub(crate) token: SyncToken,
    pub(crate) req: ConnectRequest,
    /// The session timeout negotiated for this connection.
    pub(crate) negotiated: i32,
    /// The barrier, once the leader gave it; decided when applied reaches it.
    pub(crate) barrier: Option<Zxid>,
}

/// The sessions stage's state.
#[derive(Debug)]
pub(crate) struct Sessions {
    /// The replicated session table, with attachments.
    table: HashMap<SessionId, Session>,
    /// The next session id this member allocates: its server id in the top
    /// byte, then a time part, so that ids of restarts do not collide.
    next_id: i64,
    /// Sessions with traffic on this member since the last touch batch (a
    /// follower sends them to the leader every half tick).
    touched: HashSet<SessionId>,
    /// Resumes waiting for their barrier, by connection (at most one each).
    revalidating: HashMap<ConnId, Revalidation>,
}

impl Sessions {
    /// An empty table; this member is `me`, starting at `now`.
    pub(crate) fn new(me: PeerId, now: Time) -> Sessions {
        let base = ((me.0 as i64) << 56) | (((now.wall_ms << 24) as u64) >> 8) as i64;
        Sessions {
            table: HashMap::new(),
            next_id: base,
            touched: HashSet::new(),
            revalidating: HashMap::new(),
        }
    }

    /// I2: the table of a loaded snapshot replaces everything.
    pub(crate) fn reset(&mut self, records: Vec<SessionRecord>) {
        self.table.clear();
        for s in records {
            self.table.insert(
                SessionId(s.id),
                Session {
                    timeout_ms: s.timeout_ms,
                    password: s.password,
                    conn: None,
                },
            );
        }
        self.touched.clear();
        self.revalidating.clear();
    }

    /// The table as a snapshot holds it.
    pub(crate) fn records(&self) -> Vec<SessionRecord> {
        self.table
            .iter()
            .map(|(id, s)| SessionRecord {
                id: id.0,
                timeout_ms: s.timeout_ms,
                password: s.password,
            })
            .collect()
    }

    pub(crate) fn get(&self, sid: SessionId) -> Option<&Session> {
        self.table.get(&sid)
    }

    pub(crate) fn contains(&self, sid: SessionId) -> bool {
        self.table.contains_key(&sid)
    }

    pub(crate) fn len(&self) -> usize {
        self.table.len()
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = (SessionId, &Session)> {
        self.table.iter().map(|(id, s)| (*id, s))
    }

    /// An applied CreateSession.
    pub(crate) fn created(&mut self, sid: SessionId, timeout_ms: i32, password: [u8; 16]) {
        self.table.insert(
            sid,
            Session {
                timeout_ms,
                password,
                conn: None,
            },
        );
        // Ids this member allocated before a restart come back in the log:
        // the next one allocated is above them.
        if sid.0 >= self.next_id && (sid.0 >> 56) == (self.next_id >> 56) {
            self.next_id = sid.0 + 1;
        }
    }

    /// An applied CloseSession: the connection it was attached to, if any.
    pub(crate) fn closed(&mut self, sid: SessionId) -> Option<ConnId> {
        self.touched.remove(&sid);
        self.table.remove(&sid)?.conn.map(NonZeroU64::get)
    }

    /// A new session id of this member's.
    pub(crate) fn allocate(&mut self) -> SessionId {
        loop {
            let id = self.next_id;
            self.next_id = self.next_id.wrapping_add(1);
            // Keep ids positive and clear of the container/TTL owner encodings.
            if id > 0 && !self.table.contains_key(&SessionId(id)) && tree::owner_is_session(id) {
                return SessionId(id);
            }
        }
    }

    /// Detaches the session from the connection it is attached to here, if
    /// any; that connection is returned (the caller closes it).
    pub(crate) fn detach(&mut self, sid: SessionId) -> Option<ConnId> {
        self.table.get_mut(&sid)?.conn.take().map(NonZeroU64::get)
    }

    /// Attaches the session to connection `id` with the timeout negotiated
    /// for it; the connection it was attached to before, if another.
    pub(crate) fn attach(&mut self, sid: SessionId, id: ConnId, timeout_ms: i32) -> Option<ConnId> {
        let s = self.table.get_mut(&sid)?;
        s.timeout_ms = timeout_ms;
        let old = std::mem::replace(&mut s.conn, session_conn(id))?.get();
        (old != id).then_some(old)
    }

    /// Attaches a newly created session to connection `id`.
    pub(crate) fn attach_new(&mut self, sid: SessionId, id: ConnId) -> Option<&Session> {
        let s = self.table.get_mut(&sid)?;
        s.conn = session_conn(id);
        Some(s)
    }

    /// Connection `id` closed: the session it held is no longer attached here.
    pub(crate) fn conn_closed(&mut self, sid: SessionId, id: ConnId) {
        if let Some(s) = self.table.get_mut(&sid) {
            if s.conn == session_conn(id) {
                s.conn = None;
            }
        }
    }

    /// The member stopped serving: no session is attached here any more, and
    /// nothing waits.
    pub(crate) fn detach_all(&mut self) {
        for s in self.table.values_mut() {
            s.conn = None;
        }
        self.touched.clear();
        self.revalidating.clear();
    }

    /// Session activity to report to the leader in the next batch.
    pub(crate) fn touched(&mut self, sid: SessionId) {
        self.touched.insert(sid);
    }

    /// The activity since the last batch, in batches of at most
    /// [`TOUCH_BATCH_MAX`]; none is kept.
    pub(crate) fn take_touches(&mut self) -> Vec<Vec<SessionId>> {
        if self.touched.is_empty() {
            return Vec::new();
        }
        let all: Vec<SessionId> = self.touched.drain().collect();
        all.chunks(TOUCH_BATCH_MAX).map(<[_]>::to_vec).collect()
    }

    /// Forgets the activity since the last batch (a leader has no one to tell).
    pub(crate) fn clear_touches(&mut self) {
        self.touched.clear();
    }

    /// A resume on connection `id` waits for barrier `token`.
    pub(crate) fn revalidate(&mut self, id: ConnId, r: Revalidation) {
        self.revalidating.insert(id, r);
    }

    /// Whether sync `token` of connection `id` is a resume's barrier.
    pub(crate) fn is_revalidation(&self, id: ConnId, token: SyncToken) -> bool {
        self.revalidating.get(&id).is_some_and(|r| r.token == token)
    }

    /// The barrier of connection `id`'s resume arrived.
    pub(crate) fn revalidation_barrier(&mut self, id: ConnId, zxid: Zxid) {
        if let Some(r) = self.revalidating.get_mut(&id) {
            r.barrier = Some(zxid);
        }
    }

    /// Forgets connection `id`'s resume.
    pub(crate) fn cancel_revalidation(&mut self, id: ConnId) {
        self.revalidating.remove(&id);
    }

    /// The resumes whose barrier is applied, taken out, in connection order
    /// (deterministic).
    pub(crate) fn revalidations_ready(&mut self, applied: Zxid) -> Vec<(ConnId, Revalidation)> {
        if self.revalidating.is_empty() {
            return Vec::new();
        }
        let mut ready: Vec<ConnId> = self
            .revalidating
            .iter()
            .filter(|(_, r)| r.barrier.is_some_and(|b| b <= applied))
            .map(|(id, _)| *id)
            .collect();
        ready.sort_unstable();
        ready
            .into_iter()
            .filter_map(|id| self.revalidating.remove(&id).map(|r| (id, r)))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The replicated session table has a bucket for every session (and room
    /// for more); an entry is the id and a `Session`. Checked by hand: with
    /// the connection an `Option<u64>` the entry is 48 bytes and this fails.
    #[test]
    fn a_session_entry_is_40_bytes() {
        let bytes = std::mem::size_of::<(SessionId, Session)>();
        assert!(bytes <= 40, "a session table entry is {bytes} bytes");
    }

    #[test]
    fn allocated_ids_carry_the_member_and_skip_ids_the_log_brought_back() {
        let now = Time {
            mono_us: 0,
            wall_ms: 1_700_000_000_000,
        };
        let mut s = Sessions::new(PeerId(3), now);
        let a = s.allocate();
        assert_eq!(a.0 >> 56, 3);
        s.created(SessionId(a.0 + 5), 4000, [0; 16]);
        let b = s.allocate();
        assert_eq!(b.0, a.0 + 6, "above the id an applied create brought back");
        assert_eq!(s.attach(SessionId(a.0 + 5), 7, 5000), None);
        assert_eq!(s.attach(SessionId(a.0 + 5), 8, 5000), Some(7));
        assert_eq!(s.closed(SessionId(a.0 + 5)), Some(8));
        assert!(!s.contains(SessionId(a.0 + 5)));
    }
}

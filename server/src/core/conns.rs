//! The connections stage: this member's client connections, each with its
//! queue of requests not yet answered (per-session order), the requests of
//! this member in flight (answered by `(origin, request)` when their txn
//! applies), the connections held while the member does not serve, and the
//! counters `cons`, `stat` and `mntr` report. It writes every byte a client
//! receives: replies and notifications go into the connection's outbox, and
//! nothing else writes there, which is what makes a write's notifications
//! come before its reply.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::num::NonZeroU64;
use std::sync::Arc;

use bytes::BytesMut;
use foldhash::{HashMap, HashMapExt};
use rzk_wire::{
    frame, ConnectRequest, ErrorCode, EventType, KeeperState, Notification, Reply, RequestFrame,
    SessionId, WatcherEvent, Xid,
};
use rzk_zxid::Zxid;

use crate::acl::AuthInfo;
use crate::core::io::{Permit, Req, RequestId, SyncToken, Time};
use crate::core::route::ReplyAs;
use crate::outbox::Outbox;
use crate::watch::ConnId;

/// The largest frame the server writes (a length prefix is an i32).
const REPLY_FRAME_BYTES_MAX: usize = i32::MAX as usize;

/// Connections that may wait for this member to serve (recovering, electing).
/// Beyond it new ones are closed at once, as ZooKeeper closes them all.
pub(crate) const HELD_CONNECTS_MAX: usize = 10_000;

/// A connection id as a session's attachment (see `sessions.rs`). Connection
/// ids start at 1, so `None` takes no room of its own.
pub(crate) fn session_conn(id: ConnId) -> Option<NonZeroU64> {
    let conn = NonZeroU64::new(id);
    debug_assert!(conn.is_some(), "connection ids start at 1");
    conn
}

/// Where a connection is in its life.
#[derive(Debug)]
pub(crate) enum ConnState {
    /// Its session is being created (a txn in flight) or resumed (waiting
    /// for a barrier); requests wait.
    Connecting,
    /// Serving this session.
    Connected(SessionId),
    /// Being closed; requests are ignored.
    Closing,
}

/// A request of a connection that is not answered yet.
#[derive(Debug)]
pub(crate) enum Pending {
    /// A write in flight; answered when the txn of `request` is applied.
    Write {
        request: RequestId,
        xid: Xid,
        reply_as: ReplyAs,
        started_us: u64,
        _permit: Permit,
    },
    /// A read (or other ordered request) waiting behind a write.
    Read {
        frame: RequestFrame,
        started_us: u64,
        _permit: Permit,
    },
    /// A read that is already an error (malformed), waiting its turn.
    Error {
        xid: Xid,
        code: ErrorCode,
        started_us: u64,
        _permit: Permit,
    },
    /// A sync waiting for its barrier and for the tree to reach it.
    Sync {
        token: SyncToken,
        xid: Xid,
        path: rzk_wire::ByteString,
        barrier: Option<Zxid>,
        started_us: u64,
        _permit: Permit,
    },
}

/// Per-connection statistics (cons, stat).
#[derive(Debug, Default, Clone)]
pub(crate) struct ConnStats {
    pub(crate) received: u64,
    pub(crate) sent: u64,
    pub(crate) last_op: &'static str,
    pub(crate) last_cxid: i32,
    pub(crate) last_zxid: i64,
    /// Milliseconds, saturating at `u32::MAX` (49 days): 12 bytes less in
    /// every connection than `u64`s.
    pub(crate) last_latency_ms: u32,
    pub(crate) min_latency_ms: u32,
    pub(crate) max_latency_ms: u32,
    pub(crate) total_latency_ms: u64,
    pub(crate) replies: u64,
    /// When the last response went out (monotonic µs), if any.
    pub(crate) last_response_us: Option<u64>,
}

/// A client connection as the core sees it.
#[derive(Debug)]
pub(crate) struct Conn {
    /// Also where the client's address is (see [`Conn::peer`]).
    pub(crate) outbox: Arc<Outbox>,
    pub(crate) auth: AuthInfo,
    pub(crate) state: ConnState,
    /// Requests that arrived while the session was being created.
    pub(crate) backlog: Backlog,
    /// Requests not yet answered, in arrival order.
    pub(crate) queue: ReplyQueue<Pending>,
    /// Whether the ConnectRequest carried the readOnly byte: the
    /// ConnectResponse carries it exactly then.
    pub(crate) read_only_byte: bool,
    pub(crate) established_ms: i64,
    pub(crate) stats: ConnStats,
}

impl Conn {
    /// A connection whose ConnectRequest is being answered.
    pub(crate) fn new(
        outbox: Arc<Outbox>,
        auth: AuthInfo,
        read_only_byte: bool,
        now: Time,
    ) -> Conn {
        Conn {
            outbox,
            auth,
            state: ConnState::Connecting,
            backlog: Backlog::default(),
            queue: ReplyQueue::default(),
            read_only_byte,
            established_ms: now.wall_ms,
            stats: ConnStats {
                received: 1,
                ..ConnStats::default()
            },
        }
    }

    /// The client's address (kept once per connection, in its outbox).
    pub(crate) fn peer(&self) -> SocketAddr {
        self.outbox.peer()
    }

    pub(crate) fn session(&self) -> Option<SessionId> {
        match self.state {
            ConnState::Connected(s) => Some(s),
            ConnState::Connecting | ConnState::Closing => None,
        }
    }

    pub(crate) fn queued(&self) -> usize {
        self.queue.len() + self.backlog.len()
    }

    /// Closes the connection once what is queued is written.
    pub(crate) fn close_after_flush(&mut self) {
        self.state = ConnState::Closing;
        self.outbox.close_after_flush();
    }

    /// Closes the connection now: the client sees a connection loss.
    pub(crate) fn close_now(&mut self) {
        self.state = ConnState::Closing;
        self.outbox.close_now();
    }

    /// The request at the head of the queue, if it can be answered now (a
    /// read or an error, or a sync whose barrier is applied): reads wait for
    /// the first write still in flight or sync still waiting before them.
    pub(crate) fn pop_ready(&mut self, applied: Zxid) -> Option<Pending> {
        let ready = match self.queue.front()? {
            Pending::Write { .. } => false,
            Pending::Sync { barrier, .. } => barrier.is_some_and(|b| b <= applied),
            Pending::Read { .. } | Pending::Error { .. } => true,
        };
        if ready {
            self.queue.pop_front()
        } else {
            None
        }
    }

    /// Sets the barrier of sync `token`.
    pub(crate) fn sync_barrier(&mut self, token: SyncToken, zxid: Zxid) {
        for p in self.queue.iter_mut() {
            if let Pending::Sync {
                token: t, barrier, ..
            } = p
            {
                if *t == token {
                    *barrier = Some(zxid);
                }
            }
        }
    }
}

/// Requests that arrived while a connection's session was being created
/// (pipelined behind its ConnectRequest). Rare, so one pointer in every
/// connection until the first one (a `Vec` is 24 bytes of every idle
/// connection); pushed to, then drained whole.
// The box is the point: 8 bytes in every connection instead of a `Vec`'s 24.
#[allow(clippy::box_collection)]
#[derive(Debug, Default)]
pub(crate) struct Backlog(Option<Box<Vec<(Req, Permit)>>>);

impl Backlog {
    pub(crate) fn push(&mut self, item: (Req, Permit)) {
        self.0.get_or_insert_with(Box::default).push(item);
    }

    pub(crate) fn len(&self) -> usize {
        self.0.as_ref().map_or(0, |b| b.len())
    }

    /// Everything waiting, in arrival order; the backlog is empty after it.
    pub(crate) fn take(&mut self) -> Vec<(Req, Permit)> {
        self.0.take().map(|b| *b).unwrap_or_default()
    }
}

/// A connection's requests not yet answered, in arrival order. It holds no
/// memory while empty: a `VecDeque` keeps the room of its longest queue, and
/// every session that had one request answered kept room for four `Pending`s
/// for as long as it lived, idle or not. A client with one request in flight
/// pays one allocation per queued request for it.
#[derive(Debug)]
pub(crate) struct ReplyQueue<T>(VecDeque<T>);

impl<T> Default for ReplyQueue<T> {
    fn default() -> Self {
        ReplyQueue(VecDeque::new())
    }
}

impl<T> ReplyQueue<T> {
    pub(crate) fn push_back(&mut self, item: T) {
        self.0.push_back(item);
    }

    /// The oldest request; the queue's memory is released when it empties.
    pub(crate) fn pop_front(&mut self) -> Option<T> {
        let item = self.0.pop_front();
        if self.0.is_empty() && self.0.capacity() > 0 {
            self.0 = VecDeque::new();
        }
        item
    }

    pub(crate) fn front(&self) -> Option<&T> {
        self.0.front()
    }

    pub(crate) fn iter_mut(&mut self) -> impl Iterator<Item = &mut T> {
        self.0.iter_mut()
    }

    pub(crate) fn len(&self) -> usize {
        self.0.len()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    #[cfg(test)]
    fn capacity(&self) -> usize {
        self.0.capacity()
    }
}

/// What one of this member's requests in flight is waiting for.
#[derive(Debug, Clone, Copy)]
pub(crate) enum InFlight {
    /// A write or a close; its reply is at the head of the connection's queue
    /// when its txn applies.
    Write(ConnId),
    /// A new session for this connection.
    Connect(ConnId),
}

/// A connection that sent its ConnectRequest while this member was not
/// serving: it is answered once the member serves again.
#[derive(Debug)]
pub(crate) struct HeldConnect {
    pub(crate) conn: ConnId,
    pub(crate) peer: SocketAddr,
    pub(crate) auth: AuthInfo,
    pub(crate) outbox: Arc<Outbox>,
    pub(crate) req: ConnectRequest,
    /// Requests the client pipelined behind its ConnectRequest.
    pub(crate) backlog: Vec<(Req, Permit)>,
}

/// Server-wide statistics (srvr, mntr).
#[derive(Debug, Default)]
pub(crate) struct Stats {
    pub(crate) packets_received: u64,
    pub(crate) packets_sent: u64,
    pub(crate) min_latency_ms: u64,
    pub(crate) max_latency_ms: u64,
    pub(crate) total_latency_ms: u64,
    pub(crate) replies: u64,
    pub(crate) auth_failed: u64,
    pub(crate) last_response_bytes: usize,
    pub(crate) min_response_bytes: usize,
    pub(crate) max_response_bytes: usize,
    /// ZooKeeper's `readlatency` and `updatelatency` summaries.
    pub(crate) read_latency: crate::stats::Latency,
    pub(crate) update_latency: crate::stats::Latency,
}

/// The connections stage's state.
#[derive(Debug)]
pub(crate) struct Conns {
    /// Boxed: a hash map holds its values inline in a table kept between
    /// half full and full, so an inline `Conn` would cost each connection up
    /// to twice its size.
    table: HashMap<ConnId, Box<Conn>>,
    /// Connections waiting for this member to serve.
    pub(crate) held: VecDeque<HeldConnect>,
    /// This member's requests in flight, by request id.
    in_flight: HashMap<RequestId, InFlight>,
    /// The next request id. Starts at a random point so that a txn of an
    /// earlier incarnation of this member can never answer a request of this one.
    next_request: u64,
    next_sync_token: u64,
    pub(crate) stats: Stats,
}

impl Conns {
    /// No connections; request ids from `first_request`.
    pub(crate) fn new(first_request: u64) -> Conns {
        Conns {
            table: HashMap::new(),
            held: VecDeque::new(),
            in_flight: HashMap::new(),
            next_request: first_request,
            next_sync_token: 1,
            stats: Stats::default(),
        }
    }

    pub(crate) fn get(&self, id: ConnId) -> Option<&Conn> {
        self.table.get(&id).map(|c| &**c)
    }

    pub(crate) fn get_mut(&mut self, id: ConnId) -> Option<&mut Conn> {
        self.table.get_mut(&id).map(|c| &mut **c)
    }

    pub(crate) fn insert(&mut self, id: ConnId, conn: Box<Conn>) {
        self.table.insert(id, conn);
    }

    pub(crate) fn remove(&mut self, id: ConnId) -> Option<Box<Conn>> {
        self.table.remove(&id)
    }

    pub(crate) fn len(&self) -> usize {
        self.table.len()
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = (ConnId, &Conn)> {
        self.table.iter().map(|(id, c)| (*id, &**c))
    }

    pub(crate) fn iter_mut(&mut self) -> impl Iterator<Item = &mut Conn> {
        self.table.values_mut().map(|c| &mut **c)
    }

    /// Requests queued on every connection.
    pub(crate) fn outstanding(&self) -> usize {
        self.table.values().map(|c| c.queued()).sum()
    }

    pub(crate) fn in_flight_len(&self) -> usize {
        self.in_flight.len()
    }

    /// A new request id, recorded as in flight for `what`.
    pub(crate) fn begin(&mut self, what: InFlight) -> RequestId {
        let r = RequestId(self.next_request);
        self.next_request = self.next_request.wrapping_add(1);
        self.in_flight.insert(r, what);
        r
    }

    /// The request a txn of this member's answers, no longer in flight.
    pub(crate) fn finish(&mut self, request: RequestId) -> Option<InFlight> {
        self.in_flight.remove(&request)
    }

    pub(crate) fn take_sync_token(&mut self) -> SyncToken {
        let t = SyncToken(self.next_sync_token);
        self.next_sync_token += 1;
        t
    }

    /// Queues a write's reply slot on its connection and records the request
    /// in flight; returns the request id.
    pub(crate) fn queue_write(
        &mut self,
        id: ConnId,
        xid: Xid,
        reply_as: ReplyAs,
        permit: Permit,
        now: Time,
    ) -> RequestId {
        let request = self.begin(InFlight::Write(id));
        if let Some(conn) = self.get_mut(id) {
            conn.stats.last_op = reply_as.abbrev();
            conn.stats.last_cxid = xid.0;
            conn.queue.push_back(Pending::Write {
                request,
                xid,
                reply_as,
                started_us: now.mono_us,
                _permit: permit,
            });
        }
        request
    }

    /// Closes a connection whose request cannot be completed here: its client
    /// sees a connection loss and retries (on this member or another).
    pub(crate) fn fail(&mut self, id: ConnId) {
        if let Some(conn) = self.get_mut(id) {
            conn.close_now();
        }
        self.in_flight
            .retain(|_, f| !matches!(f, InFlight::Write(c) | InFlight::Connect(c) if *c == id));
    }

    /// Closes every connection now and forgets every request in flight (the
    /// member stopped serving); returns the ids closed.
    pub(crate) fn close_all(&mut self) -> Vec<ConnId> {
        self.in_flight.clear();
        self.table
            .drain()
            .map(|(id, conn)| {
                conn.outbox.close_now();
                id
            })
            .collect()
    }

    /// Sends a reply on connection `id`, for a request that arrived at
    /// `started_us`, and counts it.
    pub(crate) fn send_reply(&mut self, id: ConnId, reply: &Reply, started_us: u64, now: Time) {
        let Some(conn) = self.table.get_mut(&id) else {
            return;
        };
        let latency = now.ms_since(started_us);
        let latency_u32 = u32::try_from(latency).unwrap_or(u32::MAX);
        let s = &mut conn.stats;
        s.sent += 1;
        s.last_zxid = reply.zxid.as_i64();
        s.last_latency_ms = latency_u32;
        s.min_latency_ms = if s.replies == 0 {
            latency_u32
        } else {
            s.min_latency_ms.min(latency_u32)
        };
        s.max_latency_ms = s.max_latency_ms.max(latency_u32);
        s.total_latency_ms += latency;
        s.replies += 1;
        s.last_response_us = Some(now.mono_us);
        let g = &mut self.stats;
        g.packets_sent += 1;
        g.min_latency_ms = if g.replies == 0 {
            latency
        } else {
            g.min_latency_ms.min(latency)
        };
        g.max_latency_ms = g.max_latency_ms.max(latency);
        g.total_latency_ms += latency;
        g.replies += 1;
        let Some(size) = push_frame_len(&conn.outbox, |b| reply.encode_payload(b)) else {
            tracing::warn!(peer = %conn.peer(), "client does not read its replies: closing the connection");
            conn.state = ConnState::Closing;
            return;
        };
        g.last_response_bytes = size;
        g.min_response_bytes = if g.min_response_bytes == 0 {
            size
        } else {
            g.min_response_bytes.min(size)
        };
        g.max_response_bytes = g.max_response_bytes.max(size);
    }

    /// Sends a frame outside the reply accounting (a ConnectResponse, an
    /// auth answer, UNIMPLEMENTED) and counts it as sent.
    pub(crate) fn send_frame(&mut self, id: ConnId, write: impl FnOnce(&mut BytesMut)) {
        let Some(conn) = self.table.get_mut(&id) else {
            return;
        };
        conn.stats.sent += 1;
        self.stats.packets_sent += 1;
        push_frame(&conn.outbox, write);
    }

    /// A watch notification to connection `id`.
    pub(crate) fn notify(&mut self, id: ConnId, kind: EventType, path: &str) {
        let Some(conn) = self.table.get(&id) else {
            return;
        };
        self.stats.packets_sent += 1;
        notify(&conn.outbox, kind, path);
    }
}

/// Writes one length-prefixed frame into an outbox.
pub(crate) fn push_frame(outbox: &Outbox, write: impl FnOnce(&mut BytesMut)) -> bool {
    push_frame_len(outbox, write).is_some()
}

/// [`push_frame`], returning the frame's size (see [`Outbox::push_len`]).
pub(crate) fn push_frame_len(outbox: &Outbox, write: impl FnOnce(&mut BytesMut)) -> Option<usize> {
    outbox.push_len(|b| {
        // Cannot fail: the limit is the largest length prefix there is.
        let _ = frame::write_frame(b, REPLY_FRAME_BYTES_MAX, write);
    })
}

/// A watch notification (xid -1, zxid -1) into an outbox.
pub(crate) fn notify(outbox: &Outbox, kind: EventType, path: &str) {
    let n = Notification {
        zxid: Zxid::from_i64(-1),
        event: WatcherEvent {
            event_type: kind,
            state: KeeperState::SyncConnected,
            path: path.into(),
        },
    };
    push_frame(outbox, |b| n.encode_payload(b));
}

#[cfg(test)]
mod tests {
    use super::{Conn, ReplyQueue};

    /// Every connection's `Conn` is boxed in the core's table for as long as
    /// it lives; glibc serves a box as a chunk of its size plus 8, rounded up
    /// to 16: at 216 bytes or less the chunk is 224 bytes. Checked by hand:
    /// with the backlog a `Vec` and the latencies `u64`s the `Conn` is 248
    /// bytes (with the address identity kept as an address) and this fails.
    #[test]
    fn a_conn_fits_a_224_byte_chunk() {
        let bytes = std::mem::size_of::<Conn>();
        assert!(bytes <= 216, "a Conn is {bytes} bytes");
    }

    #[test]
    fn a_reply_queue_keeps_order_and_releases_its_memory_once_empty() {
        let mut q = ReplyQueue::default();
        for i in 0..5 {
            q.push_back(i);
        }
        assert_eq!(q.front(), Some(&0));
        assert_eq!(q.pop_front(), Some(0));
        assert!(q.capacity() >= 4, "room is kept while requests wait");
        q.push_back(5);
        let rest: Vec<i32> = std::iter::from_fn(|| q.pop_front()).collect();
        assert_eq!(rest, [1, 2, 3, 4, 5], "answered in arrival order");
        assert!(q.is_empty());
        assert_eq!(q.capacity(), 0, "an empty queue holds no memory");
    }
}

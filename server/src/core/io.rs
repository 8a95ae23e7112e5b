//! The core's vocabulary: what goes in ([`Input`]), what comes out
//! ([`Effect`]), the clock reading every input carries ([`Time`]) and the ids
//! the stages share. The core does no IO of its own: the tokio shell
//! (`crate::shell`) or the simulator turns effects into calls on the
//! replicator and feeds their outcomes back as inputs.

use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use rzk_quorum::{PeerId, ReplicateError, Role};
use rzk_wire::{ConnectRequest, OpCode, RequestFrame, Xid};
use rzk_zxid::{Epoch, Zxid};
use tokio::sync::{oneshot, OwnedSemaphorePermit};

use crate::acl::AuthInfo;
use crate::config::ServerConfig;
use crate::outbox::Outbox;
use crate::tree::{DataTree, SessionRecord};
use crate::watch::ConnId;

/// A clock reading, taken by the shell for each input: the core never reads
/// a clock itself, so a simulation runs it on simulated time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Time {
    /// Monotonic microseconds since an origin the caller chose (the shell:
    /// its start). Deadlines, latencies and "since when" are measured on it.
    pub mono_us: u64,
    /// Wall-clock milliseconds since the Unix epoch: znodes' ctime/mtime,
    /// session ids' time part, what the four-letter words print.
    pub wall_ms: i64,
}

impl Time {
    /// `ms` milliseconds later on the monotonic clock.
    pub fn plus_ms(self, ms: u64) -> u64 {
        self.mono_us.saturating_add(ms.saturating_mul(1000))
    }

    /// Milliseconds from `since_us` to this reading, 0 if it is later.
    pub fn ms_since(self, since_us: u64) -> u64 {
        self.mono_us.saturating_sub(since_us) / 1000
    }
}

/// This member's id for one of its requests in flight: the txn that answers
/// it carries `(origin, request)`, so the origin member finds its request by
/// id, never by position in a queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RequestId(pub u64);

/// A `sync` barrier asked of the replicator, as the core tells them apart.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SyncToken(pub u64);

/// Permits a request holds until it is answered: one of its connection's
/// outstanding slots and one of the server's (backpressure, I7).
#[derive(Debug)]
pub struct Permit {
    /// The connection's slot.
    pub conn: crate::outbox::ConnSlot,
    /// The server-wide slot (`globalOutstandingLimit`).
    pub global: OwnedSemaphorePermit,
}

/// A request as the connection task hands it over.
#[derive(Debug)]
pub enum Req {
    /// A decoded request.
    Frame(RequestFrame),
    /// A request whose record could not be decoded: MARSHALLINGERROR.
    Malformed {
        /// Its xid.
        xid: Xid,
        /// Its opcode (known: an unknown one is [`Req::Unknown`]).
        opcode: OpCode,
    },
    /// An unknown opcode: UNIMPLEMENTED, then close.
    Unknown {
        /// Its xid.
        xid: Xid,
    },
}

/// Messages from the connections and the HTTP endpoints to the core's task:
/// inputs for the core, and the queries the shell answers from it.
#[derive(Debug)]
pub(crate) enum CoreMsg {
    /// An input (a connect, a request, a closed connection, shutdown).
    Input(Input),
    /// A four-letter word to answer.
    FourLetter {
        /// The word.
        word: rzk_wire::FourLetterWord,
        /// Where the text goes.
        reply: oneshot::Sender<String>,
    },
    /// An owned stats snapshot (AdminServer, metrics); `details` adds watch,
    /// session and ephemeral lists and directory sizes.
    Stats {
        /// Whether to add the parts that grow with the data.
        details: bool,
        /// Where the snapshot goes.
        reply: oneshot::Sender<crate::stats::ServerStats>,
    },
}

/// What the core reacts to. Each is handled in one step
/// ([`crate::core::Core::step`]); what the step asks for is left in the
/// core's effects.
#[derive(Debug)]
pub enum Input {
    /// A connection sent its ConnectRequest.
    Connect {
        /// The connection.
        conn: ConnId,
        /// The client's address.
        peer: SocketAddr,
        /// Its identities so far.
        auth: AuthInfo,
        /// Where its replies go.
        outbox: Arc<Outbox>,
        /// The request.
        req: ConnectRequest,
    },
    /// A request on a connection.
    Request {
        /// The connection.
        conn: ConnId,
        /// The request.
        req: Req,
        /// Its permits.
        permit: Permit,
    },
    /// The connection is gone.
    Closed {
        /// The connection.
        conn: ConnId,
    },
    /// Graceful shutdown.
    Shutdown,
    /// A snapshot of the commit stream, loaded by the caller (the core reads
    /// no files): everything derived is rebuilt from it (I2).
    Loaded {
        /// The tree (boxed: inputs travel through the core's queue, whose
        /// every slot is as large as the largest input).
        tree: Box<DataTree>,
        /// The replicated session table it holds.
        sessions: Vec<SessionRecord>,
        /// The last txn it includes.
        zxid: Zxid,
    },
    /// A committed txn, to apply in zxid order.
    Txn {
        /// Its zxid.
        zxid: Zxid,
        /// The txn as the leader's prep encoded it.
        payload: Bytes,
    },
    /// The replicator's role changed (the commit stream's `Role` item).
    Role {
        /// The new role.
        role: Role,
        /// The leader, when one is established.
        leader: Option<PeerId>,
        /// The established epoch.
        epoch: Epoch,
    },
    /// Leader only: a record a member forwarded ([`crate::core::write`]).
    Forwarded {
        /// The member.
        from: PeerId,
        /// The record.
        payload: Bytes,
    },
    /// A proposal of this leader failed.
    ProposalFailed {
        /// The txn's origin member.
        origin: PeerId,
        /// The origin's request id.
        request: RequestId,
        /// Why.
        error: ReplicateError,
    },
    /// A sync barrier resolved.
    SyncDone {
        /// The connection that waits for it.
        conn: ConnId,
        /// Which of its syncs.
        token: SyncToken,
        /// The barrier: every txn committed before the sync reached the
        /// leader is at or below it.
        result: Result<Zxid, ReplicateError>,
    },
    /// A forward of this connection's could not be sent (no leader).
    ForwardFailed {
        /// The connection.
        conn: ConnId,
    },
    /// Periodic work that is due.
    Tick(Due),
}

/// Which periodic jobs are due (see the shell's timer).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Due {
    /// Session expiry (leader), every tick.
    pub expiry: bool,
    /// The follower's batch of session activity, every half tick.
    pub touches: bool,
    /// The container/TTL reaper (leader).
    pub reap: bool,
}

/// What a step asks the caller to do, in order.
#[derive(Debug)]
pub enum Effect {
    /// Propose this txn (leader).
    Propose {
        /// The member whose request it answers (0: the leader's own).
        origin: PeerId,
        /// The origin's request id.
        request: RequestId,
        /// The encoded txn.
        txn: Bytes,
    },
    /// Send a record to the leader; if it cannot be sent, answer with
    /// [`Input::ForwardFailed`] for `conn` (when one waits).
    Forward {
        /// The connection whose request it carries, if any.
        conn: Option<ConnId>,
        /// The record ([`crate::core::write::ToLeader::encode`]).
        msg: Bytes,
    },
    /// Ask the replicator for a sync barrier; answer with
    /// [`Input::SyncDone`].
    Sync {
        /// The connection that waits.
        conn: ConnId,
        /// Its token.
        token: SyncToken,
    },
    /// A snapshot of the tree began at `zxid`: open the replicator's writer
    /// and hand the core the stream to it
    /// ([`crate::core::Core::snapshot_stream`]).
    BeginSnapshot {
        /// The zxid the snapshot is consistent at.
        zxid: Zxid,
    },
}

/// The core's configuration, taken from [`ServerConfig`].
#[derive(Debug, Clone)]
pub struct CoreConfig {
    /// The server's configuration.
    pub server: ServerConfig,
    /// This member's id (1 standalone): the top byte of the session ids it
    /// allocates and the `origin` of the txns its clients cause.
    pub server_id: PeerId,
    /// Known bugs to switch back on (regression proofs of the simulation);
    /// all off outside tests.
    pub test_bugs: CoreBugs,
}

impl CoreConfig {
    /// The core of member `server_id` with `server`'s settings, no bug on.
    pub fn new(server: ServerConfig, server_id: PeerId) -> CoreConfig {
        CoreConfig {
            server,
            server_id,
            test_bugs: CoreBugs::default(),
        }
    }
}

/// Bugs the simulation must catch, switched back on one at a time to show
/// that it does (each is a mistake a server core can make and still pass a
/// test that does not look for it).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CoreBugs {
    /// Answer a `sync` as soon as the leader gave its barrier, without
    /// waiting until this member has applied up to it (Apache ZooKeeper 3.8's
    /// leader answers its own syncs so: I6b is then broken).
    pub answer_sync_before_apply: bool,
    /// Apply a committed txn after the one that follows it (held back one
    /// step), without the check that each applied zxid follows the last:
    /// the member's tree then differs from its peers'.
    pub apply_out_of_order: bool,
}

/// Why the core stopped.
#[derive(Debug, thiserror::Error)]
pub enum CoreError {
    /// The commit stream ended or was taken.
    #[error("the commit stream is unavailable: {0}")]
    Commits(String),
    /// A committed txn or snapshot could not be decoded.
    #[error("corrupt history: {0}")]
    Corrupt(String),
    /// The committed history does not fit the state this member holds: a txn
    /// that does not apply to its tree, or a zxid that does not follow the
    /// last one applied. The member stops serving rather than serve a tree
    /// that differs from its peers'.
    #[error("the state diverged from the committed history: {0}")]
    Diverged(String),
    /// The replicator failed.
    #[error("replication failed: {0}")]
    Replicate(#[from] ReplicateError),
}

#[cfg(test)]
mod tests {
    use super::{CoreMsg, Input};

    /// Every message to the core is moved through its queue, whose slots are
    /// as large as the largest message: a snapshot's tree is boxed so that a
    /// request does not move hundreds of bytes. Checked by hand: with the
    /// tree inline an `Input` is 368 bytes and this fails.
    #[test]
    fn a_message_to_the_core_stays_small() {
        let input = std::mem::size_of::<Input>();
        let msg = std::mem::size_of::<CoreMsg>();
        assert!(input <= 176, "an Input is {input} bytes");
        assert!(msg <= 176, "a CoreMsg is {msg} bytes");
    }
}

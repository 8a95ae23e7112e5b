//! The messages peers exchange: election notifications and the leader–learner
//! session stream (discovery, synchronisation, broadcast).
//!
//! The names follow ZooKeeper's quorum packets (docs/zab.md, "Messages") so a
//! reader who knows ZAB recognises them; the encoding is ours (protobuf over
//! gRPC, or plain values in memory). Unlike ZooKeeper there are no counter-0
//! marker zxids: the NEWLEADER acknowledgement is its own message, so no ACK is
//! ever confused with another (ZOOKEEPER-4685).

use bytes::Bytes;
use rzk_zxid::{Epoch, Zxid};

use crate::PeerId;

/// The most epoch ends an ACKEPOCH carries.
pub const EPOCH_ENDS_MAX: usize = 64;

/// One transaction of the replicated log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// Its position in the history.
    pub zxid: Zxid,
    /// The transaction bytes, opaque to replication.
    pub payload: Bytes,
}

/// Identifies one leader–learner link: what ZAB calls a learner's session
/// with its leader, named a link here so that it is never taken for a
/// client's session. The learner picks it when it sends FOLLOWERINFO; every
/// later message of the link carries it, so messages of an older link (a
/// reconnect, a restart) are recognised and dropped.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct LinkId(pub u64);

/// A peer's state as it reports it in election notifications.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PeerState {
    /// Electing.
    Looking,
    /// Following an elected leader.
    Following,
    /// Leading.
    Leading,
    /// A non-voting learner asking the voters who leads; never a vote.
    Observing,
}

/// A vote of fast leader election: the proposed leader and what it claims to hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Vote {
    /// The proposed leader.
    pub leader: PeerId,
    /// The proposed leader's last *durable* zxid (I1).
    pub zxid: Zxid,
    /// The proposed leader's durable currentEpoch.
    pub peer_epoch: Epoch,
}

impl Vote {
    /// The total order of votes (docs/zab.md, "Votes and their order"):
    /// currentEpoch first, then zxid, then server id.
    pub fn beats(&self, other: &Vote) -> bool {
        (self.peer_epoch, self.zxid, self.leader) > (other.peer_epoch, other.zxid, other.leader)
    }
}

/// An election notification.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Notification {
    /// The sender's state.
    pub state: PeerState,
    /// The sender's current vote.
    pub vote: Vote,
    /// The sender's election round (ZooKeeper's `electionEpoch` / logical clock).
    pub round: u64,
}

/// What kind of learner opens a session.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LearnerKind {
    /// A voting follower.
    Participant,
    /// A non-voting observer: synchronised like a follower, then sent committed
    /// transactions only ([`SessionMsg::Inform`]); counted in no quorum.
    Observer,
}

/// Why a leader refused a learner's session.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RejectReason {
    /// The learner's history is more recent than the leader's (docs/zab.md, "The
    /// leader's side").
    AheadOfLeader,
    /// The peer is not (or no longer) leading.
    NotLeading,
    /// The learner kind is not supported (kept for the wire format; a leader
    /// now refuses a kind that disagrees with its configuration with
    /// `Protocol`).
    Unsupported,
    /// A message broke the session's order or the protocol.
    Protocol,
}

/// A message of a leader–learner session. Both directions share the enum; each
/// variant says who sends it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SessionMsg {
    /// Learner → leader, opens the session: the learner's durable acceptedEpoch.
    FollowerInfo {
        /// Follower or observer.
        kind: LearnerKind,
        /// The learner's durable acceptedEpoch.
        accepted_epoch: Epoch,
    },
    /// Leader → learner: the epoch the leader proposes (ZAB NEWEPOCH).
    LeaderInfo {
        /// The new epoch.
        epoch: Epoch,
        /// Whether the leader is already established in `epoch` (the learner is a
        /// late joiner and cannot count towards establishing it).
        established: bool,
    },
    /// Learner → leader: the learner accepted the epoch; its state summary, from
    /// its durable log and metadata only (I1).
    AckEpoch {
        /// The learner's durable currentEpoch.
        current_epoch: Epoch,
        /// The learner's last durable zxid.
        last_zxid: Zxid,
        /// The last zxid of each epoch in the learner's durable log, newest
        /// first, ending with the log's base (snapshot) zxid; at most
        /// [`EPOCH_ENDS_MAX`] items. Lets the leader find where the two histories
        /// diverge and TRUNC exactly there, instead of replacing a history that
        /// may hold committed transactions with an older snapshot.
        epoch_ends: Vec<Zxid>,
    },
    /// Leader → learner: synchronise by appending the proposals that follow.
    Diff {
        /// The leader's last zxid at the time (informational; ZOOKEEPER-2355).
        leader_last: Zxid,
    },
    /// Leader → learner: cut the log back so its last zxid is `to`, then append.
    Trunc {
        /// The last zxid to keep.
        to: Zxid,
    },
    /// Leader → learner: replace everything with this snapshot, then append.
    /// The snapshot's file follows in [`SessionMsg::SnapChunk`]s (none if it
    /// is empty), then the proposals after it.
    Snap {
        /// The last transaction the snapshot includes.
        zxid: Zxid,
        /// The size of the snapshot's file.
        size_bytes: u64,
        /// The file's checksum (the leader storage's; the learner's checks it).
        crc: u32,
    },
    /// Leader → learner: the next bytes of the snapshot file, in order.
    SnapChunk {
        /// Where in the file.
        offset: u64,
        /// The bytes (at most `snap_chunk_bytes_max`).
        data: Bytes,
    },
    /// Learner → leader: the snapshot file is stored up to `received` bytes
    /// (flow control: the leader keeps at most `snap_in_flight_bytes_max`
    /// beyond it).
    SnapAck {
        /// Bytes of the file stored.
        received: u64,
    },
    /// Leader → learner: proposals, in zxid order, contiguous with what came before.
    Proposal {
        /// The proposals (a batch).
        entries: Vec<Entry>,
    },
    /// Leader → learner: everything up to `upto` is committed.
    Commit {
        /// The highest committed zxid.
        upto: Zxid,
    },
    /// Leader → learner: the synchronisation data is complete.
    NewLeader {
        /// The leader's epoch.
        epoch: Epoch,
    },
    /// Learner → leader: everything received before NEWLEADER is durable and
    /// currentEpoch is persisted.
    AckNewLeader {
        /// The epoch of the NEWLEADER acknowledged.
        epoch: Epoch,
    },
    /// Leader → learner: the leader is established; `committed` is its commit point
    /// (COMMIT-LD carries the latest committed zxid, as the model checking of the
    /// Zab specification showed it must: docs/zab.md, "What the leader sends").
    UpToDate {
        /// The leader's commit point.
        committed: Zxid,
    },
    /// Learner → leader: everything up to `upto` is durable here (cumulative).
    Ack {
        /// The highest durable zxid acknowledged.
        upto: Zxid,
    },
    /// Leader → observer: committed transactions, after the synchronisation.
    Inform {
        /// The committed zxid these follow in the leader's history (the last
        /// one the observer was sent): lets the observer see a gap that ends at
        /// an epoch boundary, which `Zxid::is_next` alone cannot.
        prev: Zxid,
        /// The committed transactions, contiguous.
        entries: Vec<Entry>,
    },
    /// Leader → learner: liveness and the leadership check of a `sync`.
    Ping {
        /// The ping round.
        id: u64,
    },
    /// Learner → leader: answer to a ping.
    Pong {
        /// The round answered.
        id: u64,
    },
    /// Learner → leader: a client `sync` reached this learner.
    SyncRequest {
        /// The learner's request id.
        id: u64,
    },
    /// Leader → learner: the sync barrier: apply up to `zxid`, then answer.
    SyncReply {
        /// The learner's request id.
        id: u64,
        /// Everything committed before the sync reached the leader is ≤ this.
        zxid: Zxid,
    },
    /// Learner → leader: a message of the learner's state machine for the
    /// leader's (a client write, a session's activity), opaque to replication.
    Forward {
        /// The message.
        payload: Bytes,
    },
    /// Observer → leader: from now on in this session the observer takes its
    /// committed transactions from an observer master (a follower's
    /// `observerMasterPort`); the leader sends it no more INFORMs.
    /// The session stays for forwarding, pings and `sync`; when the relay ends
    /// the observer ends the session and syncs again.
    Relayed,
    /// Leader → learner: the session is refused or ended.
    Reject {
        /// Why.
        reason: RejectReason,
    },
}

impl SessionMsg {
    /// A short name for logs and traces.
    pub fn name(&self) -> &'static str {
        match self {
            SessionMsg::FollowerInfo { .. } => "FOLLOWERINFO",
            SessionMsg::LeaderInfo { .. } => "LEADERINFO",
            SessionMsg::AckEpoch { .. } => "ACKEPOCH",
            SessionMsg::Diff { .. } => "DIFF",
            SessionMsg::Trunc { .. } => "TRUNC",
            SessionMsg::Snap { .. } => "SNAP",
            SessionMsg::SnapChunk { .. } => "SNAPCHUNK",
            SessionMsg::SnapAck { .. } => "SNAPACK",
            SessionMsg::Proposal { .. } => "PROPOSAL",
            SessionMsg::Commit { .. } => "COMMIT",
            SessionMsg::NewLeader { .. } => "NEWLEADER",
            SessionMsg::AckNewLeader { .. } => "ACKNEWLEADER",
            SessionMsg::UpToDate { .. } => "UPTODATE",
            SessionMsg::Ack { .. } => "ACK",
            SessionMsg::Inform { .. } => "INFORM",
            SessionMsg::Ping { .. } => "PING",
            SessionMsg::Pong { .. } => "PONG",
            SessionMsg::SyncRequest { .. } => "SYNCREQ",
            SessionMsg::SyncReply { .. } => "SYNCREPLY",
            SessionMsg::Forward { .. } => "FORWARD",
            SessionMsg::Relayed => "RELAYED",
            SessionMsg::Reject { .. } => "REJECT",
        }
    }
}

/// Everything one peer sends another.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Message {
    /// Fast leader election.
    Notification(Notification),
    /// One message of a leader–learner session. `seq` counts the messages of one
    /// direction of the session from 0; a receiver that sees anything but the next
    /// `seq` ends the session (a gap, a duplicate or a reordering means the stream
    /// can no longer be trusted; the learner resynchronises, it never skips).
    Session {
        /// The session.
        session: LinkId,
        /// The position of this message in its direction of the session.
        seq: u64,
        /// The message.
        msg: SessionMsg,
    },
}

impl Message {
    /// Approximate encoded size, for batching and the message size limit.
    pub fn size_bytes(&self) -> usize {
        match self {
            Message::Notification(_) => 48,
            Message::Session { msg, .. } => {
                32 + match msg {
                    SessionMsg::Proposal { entries } | SessionMsg::Inform { entries, .. } => {
                        entries.iter().map(|e| e.payload.len() + 16).sum()
                    }
                    SessionMsg::SnapChunk { data, .. } => data.len() + 16,
                    SessionMsg::Forward { payload } => payload.len(),
                    SessionMsg::FollowerInfo { .. }
                    | SessionMsg::LeaderInfo { .. }
                    | SessionMsg::AckEpoch { .. }
                    | SessionMsg::Diff { .. }
                    | SessionMsg::Trunc { .. }
                    | SessionMsg::Snap { .. }
                    | SessionMsg::SnapAck { .. }
                    | SessionMsg::Commit { .. }
                    | SessionMsg::NewLeader { .. }
                    | SessionMsg::AckNewLeader { .. }
                    | SessionMsg::UpToDate { .. }
                    | SessionMsg::Ack { .. }
                    | SessionMsg::Ping { .. }
                    | SessionMsg::Pong { .. }
                    | SessionMsg::SyncRequest { .. }
                    | SessionMsg::SyncReply { .. }
                    | SessionMsg::Relayed
                    | SessionMsg::Reject { .. } => 16,
                }
            }
        }
    }
}

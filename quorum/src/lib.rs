//! `rzk-quorum`: replication for rzk.
//!
//! What the server sees of replication is the [`Replicator`] trait: it proposes
//! transactions, consumes the committed ones in zxid order, asks for a `sync`
//! barrier and hands over snapshots. Standalone mode is a quorum of one behind the
//! same trait; ZAB replication over gRPC replaces it without touching the server.
//!
//! Implementations: [`standalone::QuorumOfOne`], standalone mode on `rzk-wal`
//! (commit = durable in the local log, group-committed). The ZAB core with its
//! transports is being built (issue 7).

#![deny(missing_docs)]

mod replicator;
pub mod standalone;

pub use replicator::{
    CommitStream, Committed, PeerId, Proposal, ReplicateError, Replicator, Role, SyncBarrier,
};
pub use standalone::{QuorumOfOne, StandaloneError, StandaloneOptions};

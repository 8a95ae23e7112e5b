//! `rzk-quorum`: replication for rzk.
//!
//! What the server sees of replication is the [`Replicator`] trait: it proposes
//! transactions, consumes the committed ones in zxid order, asks for a `sync`
//! barrier and hands over snapshots. Standalone mode is a quorum of one behind the
//! same trait; ZAB replication over gRPC replaces it without touching the server.
//!
//! Status: the trait is defined. Its implementations (the quorum of one on
//! `rzk-wal`, and the ZAB core with its transports) are being built (issues 4
//! and 7); nothing in this crate implements replication yet.

#![deny(missing_docs)]

mod replicator;

pub use replicator::{
    CommitStream, Committed, PeerId, Proposal, ReplicateError, Replicator, Role, SyncBarrier,
};

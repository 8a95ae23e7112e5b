//! `rzk-quorum`: ZAB-style replication for rzk.
//!
//! What the server sees of replication is the [`Replicator`] trait: it proposes
//! transactions, consumes the committed ones in zxid order, asks for a `sync`
//! barrier and hands over snapshots.
//!
//! Inside, replication is a sans-IO state machine, [`core::Peer`]
//! (`step(now, input) -> outputs`, in the style of raft-rs / etcd-raft /
//! openraft): fast leader election, discovery, synchronisation (DIFF, TRUNC,
//! SNAP) and broadcast (PROPOSAL / ACK / COMMIT, pipelined and batched), plus the
//! epoch rollover of invariant I3. It owns no socket, file or clock, which is what
//! lets `rzk-sim` run it under a simulated network, disk and clock.
//!
//! Around it: [`driver::ZabReplicator`] runs a peer on tokio and implements
//! [`Replicator`]; [`transport`] has the [`transport::Transport`] trait and an
//! in-memory network; [`grpc`] the tonic transport; [`storage`] the storage trait
//! the driver needs, implemented on `rzk-wal` by [`wal_storage::WalStorage`].
//! Standalone is an ensemble of one: a [`ZabReplicator`] with a single voter (no
//! second code path: ARCHITECTURE.md, "Crates").
//!
//! ```
//! use rzk_quorum::core::{Config, Input, Output, Peer, Recovered, Tick};
//! use rzk_quorum::PeerId;
//!
//! // A single-voter ensemble elects itself; every storage command it emits is
//! // reported back as done, as a driver would after the fsync.
//! let cfg = Config::new(PeerId(1), [PeerId(1)]);
//! let (mut peer, mut out) = Peer::new(cfg, Recovered::default(), Tick(0)).unwrap();
//! for t in 1..2_000 {
//!     let done: Vec<_> = out.iter().filter_map(|o| match o {
//!         Output::Storage { op, .. } => Some(*op),
//!         _ => None,
//!     }).collect();
//!     out = match done.last() {
//!         Some(op) => peer.step(Tick(t), Input::StorageDone { op: *op }),
//!         None => peer.step(Tick(t), Input::Tick),
//!     };
//! }
//! assert_eq!(peer.role(), rzk_quorum::Role::Leader);
//! ```

#![deny(missing_docs)]

pub mod core;
pub mod driver;
pub mod grpc;
pub mod message;
mod relay;
mod replicator;
pub mod storage;
pub mod tls;
pub mod transport;
pub mod wal_storage;

pub use driver::{DriverConfig, ZabReplicator};
pub use replicator::{
    CommitStream, Committed, LastSnapshot, LearnerStats, PeerId, Proposal, QuorumStats,
    ReplicateError, Replicator, ReplicatorMetrics, Role, SnapshotSource, SnapshotWriteError,
    SnapshotWriter, SummaryStats, SyncBarrier, SUMMARY_RECENT_MAX,
};

/// The log's options, re-exported so that a server configures its storage
/// (fsync, log directory, segment sizes) without depending on `rzk-wal` itself:
/// the server never touches the durable log except through a [`Replicator`].
pub use rzk_wal::{LogOptions, WalOptions};

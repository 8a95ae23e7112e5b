//! `rzk-observer-master`: the fan-out of committed transactions from a follower
//! (or the leader) to observers, and the observer's contiguity check.
//!
//! ZooKeeper's ZOOKEEPER-5088 (ARCHITECTURE.md, "The four failures"): a
//! follower's observer fan-out started after its sync with an empty queue, so a
//! proposal in flight during the sync was never relayed, the observer saw a gap
//! and its commit thread died. This crate rules that out by construction (I4):
//!
//! - a [`Fanout`] has one constructor, from a [`SourceSnapshot`]: the source's
//!   pending proposals and last committed zxid, taken by
//!   [`RelaySource::subscribe`] atomically with the live stream that continues
//!   it;
//! - every commit must match the oldest pending proposal; anything else is a
//!   [`FanoutError`], and the fan-out is rebuilt, never patched;
//! - each observer has its own bounded relay queue; one that falls behind is
//!   disconnected ([`Disconnect::TooSlow`]) and resyncs; the source never waits;
//! - an observer checks every transaction with [`Contiguity::accept`]
//!   ([`rzk_zxid::Zxid::is_next`], rollover rule included, plus the link to the
//!   zxid before it at the source, see [`Inform`]) before applying it; a
//!   gap or a reordering drops the connection for a resync, never a skip, never
//!   a panic.
//!
//! ```
//! use rzk_observer_master::{Contiguity, Fanout, FanoutConfig, ObserverId, RelayHub, RelaySource, Txn};
//! use rzk_zxid::{Epoch, Zxid};
//! let z = |c: u32| Zxid::new(Epoch(1), c.into());
//!
//! let hub = RelayHub::new(z(2), 1024); // the follower has committed Z2 ...
//! hub.proposed(Txn::new(z(3), "set /a")).unwrap(); // ... and Z3 is in flight
//! let mut sub = hub.subscribe(); // pending [Z3], committed Z2, and the stream after
//! let mut fanout = Fanout::new(sub.snapshot, FanoutConfig::default()).unwrap();
//! fanout.attach(ObserverId(7), z(2)).unwrap();
//! hub.committed(z(3)).unwrap();
//! while let Some(event) = sub.live.try_next().unwrap() {
//!     fanout.apply(event).unwrap();
//! }
//! let mut check = Contiguity::after_sync(z(2));
//! for inform in fanout.pop(ObserverId(7), 16) {
//!     check.accept(inform.prev, inform.zxid()).unwrap(); // Z3 after Z2: no gap
//! }
//! ```
//!
//! The IO side, [`ObserverMaster`], runs a tokio task that keeps the fan-out fed
//! from its source and gives each observer a [`RelayStream`]; [`grpc`] serves
//! those streams to observers over gRPC ([`grpc::RelayService`]) and gives the
//! observer a client that checks every transaction ([`grpc::RelayClient`]).

#![deny(missing_docs)]

mod error;
mod fanout;
pub mod grpc;
mod master;
mod receiver;
mod source;

use std::fmt;

pub use error::{AttachError, FanoutError, StreamError};
pub use fanout::{Disconnect, Fanout, FanoutConfig, Inform, Txn};
pub use master::{MasterStats, ObserverMaster, RelayStream};
pub use receiver::Contiguity;
pub use source::{
    HubError, LiveEnd, LiveEvents, RelayHub, RelaySource, SourceEvent, SourceSnapshot, Subscription,
};

/// The server id of an observer (its `myid`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ObserverId(pub u64);

impl fmt::Display for ObserverId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

//! Recipes, each a sans-IO state machine ([`engine::Machine`]) that the [`engine`]'s
//! driver runs on one task over [`RecipeOps`]:
//! - [`LeaderLatch`], [`LeaderSelector`], [`Mutex`]: the [`candidacy`] machine, fenced;
//! - [`ReadWriteLock`], [`Semaphore`]: the [`queue`] machine;
//! - [`TreeCache`] ([`NodeCache`], [`ChildrenCache`]), [`PersistentNode`],
//!   [`SharedCounter`], [`Barrier`], [`DoubleBarrier`]: their own machines.
//!
//! The candidacy and queue machines hold a protected ephemeral-sequential position
//! (`position.rs`: create, adoption of a create whose reply was lost, the proof of
//! ownership, cleanup after a lost session) and fence their grants ([`fence`]) with the
//! same code; [`ids`] holds what every machine shares.

pub mod barrier;
pub mod candidacy;
pub mod counter;
pub mod engine;
pub mod fence;
pub mod ids;
mod latch;
mod mutex;
pub mod ops;
mod selector;

#[cfg(test)]
mod fake;
#[cfg(test)]
mod harness;
mod persistent_node;
pub(crate) mod position;
pub mod queue;
mod rwlock;
mod tree_cache;

pub use barrier::{Barrier, DoubleBarrier, DoubleBarrierConfig};
pub use candidacy::RecipeEvent;
pub use counter::{CounterConfig, CounterEvent, CounterValue, SharedCounter};
pub use latch::{LatchConfig, LeaderLatch};
pub use mutex::{Mutex, MutexGuard};
pub use ops::{RecipeOps, WatchFired};
pub use persistent_node::{
    Absence, NodeCommand, NodeConfig, NodeEvent, NodeKind, NodeMachine, PersistentNode,
};
pub use position::{Grant, Revoked};
pub use rwlock::{LockGuard, ReadWriteLock, Semaphore, LEASE_NAME, READ_NAME, WRITE_NAME};
pub use selector::{LeaderSelector, Leadership, CALLBACK_GRACE};
pub use tree_cache::{
    CacheConfig, CacheEvent, CacheMachine, CacheMap, CachedNode, ChildrenCache, NodeCache,
    TreeCache, WatchStrategy,
};

#[cfg(test)]
mod recipe_tests;

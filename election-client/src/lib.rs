//! `rzk-election-client`: an async ZooKeeper client with Curator-style recipes that
//! survive session loss: leader latch and selector, mutex, read-write lock, semaphore,
//! tree cache (node and children views), persistent node, shared counter, barriers.
//!
//! - [`Client`]: sessions across several hosts (shuffled, moving on after a failure)
//!   with an optional chroot; session re-establishment with id and password; pings at a
//!   third of the read timeout; every client operation of `rzk-wire` with typed results
//!   and errors; one-shot, persistent and recursive watches re-armed after reconnect
//!   with `setWatches2`; digest auth replayed after reconnect; a bound on outstanding
//!   requests. Its connection-state stream ([`Client::subscribe`]) has Curator's
//!   semantics (`CONNECTED`, `SUSPENDED`, `RECONNECTED`, `LOST`, `READ_ONLY`) and never
//!   drops or reorders an event.
//! - The [`recipe`] module: [`LeaderLatch`](recipe::LeaderLatch),
//!   [`LeaderSelector`](recipe::LeaderSelector) and [`Mutex`](recipe::Mutex) on the
//!   [`recipe::candidacy`] machine; [`ReadWriteLock`](recipe::ReadWriteLock) and
//!   [`Semaphore`](recipe::Semaphore) on [`recipe::queue`];
//!   [`TreeCache`](recipe::TreeCache) (with [`NodeCache`](recipe::NodeCache) and
//!   [`ChildrenCache`](recipe::ChildrenCache) views), [`PersistentNode`](recipe::PersistentNode),
//!   [`SharedCounter`](recipe::SharedCounter), [`Barrier`](recipe::Barrier) and
//!   [`DoubleBarrier`](recipe::DoubleBarrier) on the generic [`recipe::engine`]. Each is
//!   an explicit sans-IO state machine run on one task over the small
//!   [`RecipeOps`](recipe::RecipeOps) trait.
//!
//! ```no_run
//! use std::{sync::Arc, time::Duration};
//! use rzk_election_client::{Client, recipe::{LatchConfig, LeaderLatch, RecipeEvent}};
//! # async fn demo() -> rzk_election_client::Result<()> {
//! let client = Client::connect_to("127.0.0.1:2181", Duration::from_secs(6)).await?;
//! let mut latch = LeaderLatch::start(Arc::new(client), LatchConfig::new("/app/leader").id("node-1"));
//! while let Some(event) = latch.next_event().await {
//!     match event {
//!         RecipeEvent::Granted(g) => println!("leader, fencing epoch {:?}", g.token.map(|t| t.epoch)),
//!         RecipeEvent::Revoked(why) => println!("stop acting as leader: {why:?}"),
//!         RecipeEvent::Ended => break,
//!     }
//! }
//! # Ok(()) }
//! ```
//!
//! # What it guarantees (I5)
//! - Leadership is reported only after the candidate node is first **and** proven to
//!   belong to the current session (its `ephemeralOwner`), and after the epoch znode was
//!   bumped by a conditional write checked together with the candidate node: no two
//!   grants ever carry the same fencing epoch (CURATOR-696 cannot happen).
//! - `SUSPENDED` revokes at once and keeps the node; `RECONNECTED` on the same session
//!   re-proves the same node. `LOST` revokes first, then discards the participation; the
//!   next connection registers a fresh candidate, creating missing parents; `NONODE` on
//!   a create or a listing is retried, never ignored (the seed's idle-forever latch,
//!   CURATOR-724, cannot happen).
//! - While started and connected, a recipe always has something pending (an operation,
//!   a watch or a backoff timer): it never idles.
//! - Every other recipe follows the same rules: what it vouches for (a lock, a node, a
//!   cache, a counter value) is withdrawn at `SUSPENDED`, re-proven on the same session,
//!   rebuilt on a new one after `LOST`, never carried over from a dead session; each
//!   recipe's docs say what that means for it.

#![deny(missing_docs)]

pub mod client;
pub mod error;
pub mod recipe;
pub mod state;
pub mod types;

pub use client::config::ClientConfig;
pub use client::watches::{EventKind, PersistentMode, WatchEvent};
pub use client::{Client, OneShotWatch, Op, OpResult, PersistentWatch, ReadOp, ReadResult};
pub use error::{Error, Result};
pub use rzk_wire::{Acl, ClientInfo, CreateMode, ErrorCode, Id, Perms, WatcherType};
pub use state::{ConnectionState, StateStream};
pub use types::{FencingToken, SessionId, Stat};

//! The small set of ZooKeeper operations the recipes need.
//!
//! [`crate::Client`] implements it over the network; the unit tests implement it with an
//! in-memory fake that can inject faults (NONODE races, expiry mid-operation, lost
//! replies). Keeping the recipes on this trait is what lets every transition be tested
//! without a server.

use std::future::Future;

use bytes::Bytes;
use futures::future::BoxFuture;

use super::engine::{Call, Reply, Watch};
use super::fence::BumpError;
use crate::error::Result;
use crate::state::{ConnectionState, StateStream};
use crate::types::Stat;

/// Resolves when a one-shot watch fires, or when the watch can no longer fire (its
/// session ended, the client closed). Either way the recipe re-reads.
pub type WatchFired = BoxFuture<'static, ()>;

/// The operations a recipe runs.
///
/// # Correctness
/// - Operations of one implementation run on one session at a time, and each result
///   belongs to the session that was current when the request was sent.
/// - `subscribe` returns the current state and every later state, in order, none
///   dropped (see [`StateStream`]).
/// - A one-shot watch set by [`RecipeOps::watch`] must fire (resolve) on any event of
///   the node, and must resolve rather than hang forever once the session that set it
///   is gone.
pub trait RecipeOps: Send + Sync + 'static {
    /// Create an `EPHEMERAL_SEQUENTIAL` node `parent/name<seq>` with `data`, creating
    /// missing parents as container nodes. Returns the full path created. `NONODE` may
    /// still come back if a parent vanishes between its creation and the create.
    fn create_candidate(
        &self,
        parent: &str,
        name: &str,
        data: Bytes,
    ) -> impl Future<Output = Result<String>> + Send;

    /// The child names of `path`.
    fn children(&self, path: &str) -> impl Future<Output = Result<Vec<String>>> + Send;

    /// The data and stat of `path`, without a watch.
    fn read(&self, path: &str) -> impl Future<Output = Result<(Bytes, Stat)>> + Send;

    /// Read `path` and leave a one-shot watch on it (getData with watch, so no watch is
    /// left on a missing node).
    fn watch(&self, path: &str) -> impl Future<Output = Result<(Stat, WatchFired)>> + Send;

    /// Create the persistent epoch node `path` with data `0`, parents as persistent
    /// nodes. `NODEEXISTS` when it already exists.
    fn create_epoch(&self, path: &str) -> impl Future<Output = Result<()>> + Send;

    /// Atomically (one multi): check that `candidate` exists, and set `epoch_path` to
    /// `value` (decimal) if its version is `version`.
    fn bump_epoch(
        &self,
        candidate: &str,
        epoch_path: &str,
        version: i32,
        value: u64,
    ) -> impl Future<Output = std::result::Result<Stat, BumpError>> + Send;

    /// Delete `path` whatever its version. `NONODE` is an error the caller may ignore.
    fn delete(&self, path: &str) -> impl Future<Output = Result<()>> + Send;

    /// The current connection state and every later one.
    fn subscribe(&self) -> (Option<ConnectionState>, StateStream);

    /// Run one [`Call`] (the recipes of [`super::engine`]); a successful call that
    /// leaves a watch hands it back with the reply.
    fn call(&self, call: Call) -> impl Future<Output = (Reply, Option<Watch>)> + Send;
}

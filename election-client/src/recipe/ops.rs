//! The small set of ZooKeeper operations the recipes need: one [`Call`] at a time, and
//! the connection-state stream.
//!
//! [`crate::Client`] implements it over the network; the unit tests implement it with an
//! in-memory fake that can inject faults (NONODE races, expiry mid-operation, lost
//! replies). Keeping the recipes on this trait is what lets every transition be tested
//! without a server.

use std::future::Future;

use bytes::Bytes;
use futures::future::BoxFuture;
use rzk_wire::CreateMode;

use super::engine::{Call, Reply, Watch};
use super::fence::{bump_call, bump_result, create_epoch_call, BumpError};
use super::ids::join_path;
use crate::error::{Error, Result};
use crate::state::{ConnectionState, StateStream};
use crate::types::Stat;

/// Resolves when a one-shot watch fires, or when the watch can no longer fire (its
/// session ended, the client closed). Either way the recipe re-reads.
pub type WatchFired = BoxFuture<'static, ()>;

/// The operations a recipe runs.
///
/// An implementation provides [`call`](RecipeOps::call) and
/// [`subscribe`](RecipeOps::subscribe); the other methods are conveniences built on
/// `call` (the recipes use `call` directly).
///
/// # Correctness
/// - Calls of one implementation run on one session at a time, and each answer
///   belongs to the session that was current when the request was sent.
/// - `subscribe` returns the current state and every later state, in order, none
///   dropped (see [`StateStream`]).
/// - A one-shot watch handed back by `call` must fire (resolve) on any event of the
///   node, and must resolve rather than hang forever once the session that set it is
///   gone.
/// - A create with `parents` makes the missing parents and tries once more; `NONODE`
///   may still come back if a parent vanishes in between (the recipe retries).
pub trait RecipeOps: Send + Sync + 'static {
    /// The current connection state and every later one.
    fn subscribe(&self) -> (Option<ConnectionState>, StateStream);

    /// Run one [`Call`]; a successful call that leaves a watch hands it back with the
    /// reply.
    fn call(&self, call: Call) -> impl Future<Output = (Reply, Option<Watch>)> + Send;

    /// Create an `EPHEMERAL_SEQUENTIAL` node `parent/name<seq>` with `data`, creating
    /// missing parents as container nodes. Returns the full path created.
    fn create_candidate(
        &self,
        parent: &str,
        name: &str,
        data: Bytes,
    ) -> impl Future<Output = Result<String>> + Send {
        let call = Call::Create {
            path: join_path(parent, name),
            data,
            mode: CreateMode::EphemeralSequential,
            ttl_ms: None,
            parents: Some(CreateMode::Container),
        };
        answer(self, call, |reply| match reply {
            (Reply::Created(r), _) => Ok(r.map(|(path, _)| path)),
            (other, _) => Err(other),
        })
    }

    /// The child names of `path`.
    fn children(&self, path: &str) -> impl Future<Output = Result<Vec<String>>> + Send {
        let path = path.to_owned();
        answer(
            self,
            Call::Children { path, watch: false },
            |reply| match reply {
                (Reply::Children(r), _) => Ok(r),
                (other, _) => Err(other),
            },
        )
    }

    /// The data and stat of `path`, without a watch.
    fn read(&self, path: &str) -> impl Future<Output = Result<(Bytes, Stat)>> + Send {
        let path = path.to_owned();
        answer(
            self,
            Call::GetData { path, watch: false },
            |reply| match reply {
                (Reply::Data(r), _) => Ok(r),
                (other, _) => Err(other),
            },
        )
    }

    /// Read `path` and leave a one-shot watch on it (getData with watch, so no watch is
    /// left on a missing node).
    fn watch(&self, path: &str) -> impl Future<Output = Result<(Stat, WatchFired)>> + Send {
        let path = path.to_owned();
        answer(
            self,
            Call::GetData { path, watch: true },
            |reply| match reply {
                (Reply::Data(Ok((_, stat))), Some(Watch::Once(fired))) => Ok(Ok((stat, fired))),
                (Reply::Data(Err(e)), _) => Ok(Err(e)),
                (other, _) => Err(other),
            },
        )
    }

    /// Create the persistent epoch node `path` with data `0`, parents as persistent
    /// nodes. `NODEEXISTS` when it already exists.
    fn create_epoch(&self, path: &str) -> impl Future<Output = Result<()>> + Send {
        answer(self, create_epoch_call(path), |reply| match reply {
            (Reply::Created(r), _) => Ok(r.map(|_| ())),
            (other, _) => Err(other),
        })
    }

    /// Atomically (one multi): check that `candidate` exists, and set `epoch_path` to
    /// `value` (decimal) if its version is `version`.
    fn bump_epoch(
        &self,
        candidate: &str,
        epoch_path: &str,
        version: i32,
        value: u64,
    ) -> impl Future<Output = std::result::Result<Stat, BumpError>> + Send {
        let call = bump_call(candidate.to_owned(), epoch_path, version, value);
        let multi = answer(self, call, |reply| match reply {
            (Reply::Multi(r), _) => Ok(r),
            (other, _) => Err(other),
        });
        async move { bump_result(multi.await) }
    }

    /// Delete `path` whatever its version. `NONODE` is an error the caller may ignore.
    fn delete(&self, path: &str) -> impl Future<Output = Result<()>> + Send {
        let path = path.to_owned();
        answer(
            self,
            Call::Delete { path, version: -1 },
            |reply| match reply {
                (Reply::Deleted(r), _) => Ok(r),
                (other, _) => Err(other),
            },
        )
    }
}

/// Run `call` on `ops` and take the answer apart with `take`, which hands back the
/// reply of another kind of call (an error of the implementation).
async fn answer<O: RecipeOps + ?Sized, T>(
    ops: &O,
    call: Call,
    take: impl FnOnce((Reply, Option<Watch>)) -> std::result::Result<Result<T>, Reply>,
) -> Result<T> {
    take(ops.call(call).await).unwrap_or_else(|other| {
        Err(Error::Transport(format!(
            "a recipe call answered with {other:?}"
        )))
    })
}

#[cfg(test)]
mod tests {
    use futures::FutureExt;

    use super::*;
    use crate::recipe::fake::FakeServer;

    #[tokio::test]
    async fn the_conveniences_run_their_call() {
        let server = FakeServer::default();
        let client = server.client();
        let node = client
            .create_candidate("/e/l", "_c_x-latch-", Bytes::from_static(b"me"))
            .await
            .expect("created with its parents");
        assert_eq!(node, "/e/l/_c_x-latch-0000000000");
        assert_eq!(
            client.children("/e/l").await,
            Ok(vec!["_c_x-latch-0000000000".to_owned()])
        );
        let (data, stat) = client.read(&node).await.expect("read");
        assert_eq!(data, Bytes::from_static(b"me"));
        assert_eq!(Some(stat.ephemeral_owner), client.session());
        let (_, fired) = client.watch(&node).await.expect("watch");
        client
            .create_epoch("/ep/e")
            .await
            .expect("epoch and parent");
        assert!(matches!(
            client.create_epoch("/ep/e").await,
            Err(Error::NodeExists { .. })
        ));
        let bumped = client.bump_epoch(&node, "/ep/e", 0, 1).await.expect("bump");
        assert_eq!(bumped.version, 1);
        assert_eq!(
            client.bump_epoch(&node, "/ep/e", 0, 2).await,
            Err(BumpError::EpochMoved)
        );
        client.delete(&node).await.expect("delete");
        assert!(
            fired.now_or_never().is_some(),
            "the watch fired on the delete"
        );
        assert_eq!(
            client.bump_epoch(&node, "/ep/e", 1, 2).await,
            Err(BumpError::CandidateGone)
        );
        assert!(matches!(
            client.delete(&node).await,
            Err(Error::NoNode { .. })
        ));
    }
}

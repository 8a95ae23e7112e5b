//! [`LeaderLatch`]: contend for leadership until closed.

use std::sync::Arc;

use bytes::Bytes;

use super::candidacy::{CandidacyConfig, CandidacyHandle, Grant, Mode, RecipeEvent};
use super::ops::RecipeOps;
use crate::error::{Error, Result};

/// Settings of a [`LeaderLatch`].
#[derive(Debug, Clone)]
pub struct LatchConfig {
    /// The election parent; candidates are its children. Created as a container.
    pub path: String,
    /// The epoch znode bumped before each grant. Must not be under `path` (it would keep
    /// the container from ever being collected) and must never be deleted.
    pub epoch_path: String,
    /// This participant's id, stored in its candidate node.
    pub id: Bytes,
    /// First retry delay after a failure, ms.
    pub backoff_min_ms: u64,
    /// Largest retry delay, ms.
    pub backoff_max_ms: u64,
    /// Self-check period, ms (re-list while waiting, re-verify while leading).
    pub recheck_ms: u64,
}

impl LatchConfig {
    /// A latch on `path` with the epoch znode `<path>-epoch`.
    pub fn new(path: impl Into<String>) -> LatchConfig {
        let path = path.into();
        LatchConfig {
            epoch_path: format!("{path}-epoch"),
            path,
            id: Bytes::new(),
            backoff_min_ms: 20,
            backoff_max_ms: 2_000,
            recheck_ms: 10_000,
        }
    }

    /// Set the participant id.
    pub fn id(mut self, id: impl Into<Bytes>) -> LatchConfig {
        self.id = id.into();
        self
    }

    /// Set the epoch znode.
    pub fn epoch_path(mut self, path: impl Into<String>) -> LatchConfig {
        self.epoch_path = path.into();
        self
    }

    pub(crate) fn candidacy(&self, name: &str, mode: Mode) -> CandidacyConfig {
        CandidacyConfig {
            path: self.path.clone(),
            name: name.to_owned(),
            data: self.id.clone(),
            epoch_path: Some(self.epoch_path.clone()),
            mode,
            backoff_min_ms: self.backoff_min_ms,
            backoff_max_ms: self.backoff_max_ms,
            recheck_ms: Some(self.recheck_ms),
            nonce: rand_nonce(),
        }
    }
}

/// A random nonce for protected node names, without a dependency: the std hasher's
/// random keys mixed with the time.
pub(crate) fn rand_nonce() -> u64 {
    use std::collections::hash_map::RandomState;
    use std::hash::{BuildHasher, Hasher};
    let mut h = RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default(),
    );
    h.finish()
}

/// A leader latch: an ephemeral-sequential candidate under a container parent, each
/// candidate watching only its predecessor. Leadership is reported only once the
/// candidate is proven first *on the current session* and the epoch znode has been
/// bumped with a conditional write; the [`FencingToken`](crate::FencingToken) in the
/// [`Grant`] is what the leader stamps on its writes.
///
/// The latch never idles: after `LOST` it registers a fresh candidate for the new
/// session (parents recreated), and every failure is retried with backoff.
///
/// ```no_run
/// # async fn demo<O: rzk_election_client::recipe::RecipeOps>(client: std::sync::Arc<O>) -> rzk_election_client::Result<()> {
/// use rzk_election_client::recipe::{LatchConfig, LeaderLatch, RecipeEvent};
/// let mut latch = LeaderLatch::start(client, LatchConfig::new("/app/leader").id("node-1"));
/// while let Some(event) = latch.next_event().await {
///     match event {
///         RecipeEvent::Granted(g) => println!("leader with {:?}", g.token),
///         RecipeEvent::Revoked(why) => println!("not leader: {why:?}"),
///         RecipeEvent::Ended => break,
///     }
/// }
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct LeaderLatch {
    driver: CandidacyHandle,
}

impl LeaderLatch {
    /// Start contending (the candidate is created once the client is connected).
    pub fn start<O: RecipeOps>(ops: Arc<O>, cfg: LatchConfig) -> LeaderLatch {
        LeaderLatch {
            driver: CandidacyHandle::spawn(ops, cfg.candidacy("latch-", Mode::Latch)),
        }
    }

    /// The current grant, if this participant leads right now.
    pub fn leadership(&self) -> Option<Grant> {
        self.driver.current.borrow().clone()
    }

    /// True while this participant leads.
    pub fn is_leader(&self) -> bool {
        self.driver.current.borrow().is_some()
    }

    /// The next transition, in order; `None` once the latch is closed and drained.
    pub async fn next_event(&mut self) -> Option<RecipeEvent> {
        self.driver.next_event().await
    }

    /// Wait until this participant leads; returns the grant.
    pub async fn wait_leader(&mut self) -> Result<Grant> {
        let mut current = self.driver.current.clone();
        let grant = current
            .wait_for(|g| g.is_some())
            .await
            .map_err(|_| Error::Closed)?;
        grant.clone().ok_or(Error::Closed)
    }

    /// Stop contending: leadership is revoked (a `Revoked(Closed)` event) and the
    /// candidate node deleted. Idempotent.
    pub async fn close(&self) {
        self.driver.close().await;
    }
}

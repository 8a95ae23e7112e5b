//! [`ReadWriteLock`] (Curator's `InterProcessReadWriteLock`) and [`Semaphore`]
//! (Curator's `InterProcessSemaphoreV2`): queue recipes on the candidacy machine with a
//! different admission [`Rule`].
//!
//! Every acquirer queues a protected ephemeral-sequential node under the lock path;
//! nodes are ordered by their sequence number:
//! - a **writer** (`write-`) holds when no node of any kind precedes it, and watches its
//!   immediate predecessor;
//! - a **reader** (`read-`) holds when no writer node precedes it, and watches the
//!   nearest preceding writer;
//! - a **lease** of a semaphore of `n` holds when fewer than `n` nodes precede it, and
//!   watches the parent's children.
//!
//! Since new nodes only ever queue behind existing ones, a node that is admitted stays
//! admitted while it exists: at most one writer and no reader beside it, at most `n`
//! leases, whatever the interleaving. Fair: admission is in sequence order.
//!
//! # Across connection states (the same lifecycle as [`Mutex`](super::Mutex))
//! - Admission needs proof on the current session: the node is admitted in the listing
//!   **and** a read shows `ephemeralOwner == current session` (CURATOR-696); with an
//!   epoch path, a writer (or a lease) is also fenced with a conditional increment of
//!   the epoch znode checked together with its node, and gets a [`FencingToken`].
//! - `SUSPENDED` / `READ_ONLY`: the guard reports not held at once; `RECONNECTED` on the
//!   same session re-proves the same node (and re-fences).
//! - `LOST` while held: the guard is lost for good ([`LockGuard::lost`] resolves with
//!   [`Revoked::Lost`]); acquire again. `LOST` while waiting: a fresh node on the new
//!   session, parents recreated; every failure retried with backoff.
//!
//! # Re-entrancy
//! Per [`ReadWriteLock`] (or [`Semaphore`]) handle, the holder in this process: while
//! a handle holds the write lock, further `write()` and `read()` calls on it return at
//! once with guards sharing that acquisition (a read guard taken under the write lock
//! keeps the write lock until it is dropped); further `read()` calls while it holds a
//! read lock share it. `write()` while holding only a read lock is refused (an upgrade
//! would wait for itself).
//!
//! [`FencingToken`]: crate::FencingToken

use std::sync::{Arc, Mutex as StdMutex, Weak};
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::Mutex as AsyncMutex;

use super::candidacy::{CandidacyConfig, Grant, Mode, Revoked, Rule, SortKey};
use super::driver::{Driver, RecipeEvent};
use super::latch::rand_nonce;
use super::ops::RecipeOps;
use crate::error::{Error, Result};
use crate::types::FencingToken;

/// The name of writer nodes (before their sequence number).
pub const WRITE_NAME: &str = "write-";
/// The name of reader nodes.
pub const READ_NAME: &str = "read-";
/// The name of semaphore lease nodes.
pub const LEASE_NAME: &str = "lease-";

/// One acquisition: its driver and its grant. Dropping it releases the node.
#[derive(Debug)]
struct Held {
    driver: AsyncMutex<Driver>,
    grant: StdMutex<Grant>,
    current: tokio::sync::watch::Receiver<Option<Grant>>,
    commands: tokio::sync::mpsc::UnboundedSender<super::driver::Command>,
}

impl Drop for Held {
    fn drop(&mut self) {
        let _ = self
            .commands
            .send(super::driver::Command::Release { rejoin: false });
    }
}

async fn acquire<O: RecipeOps>(
    ops: Arc<O>,
    cfg: CandidacyConfig,
    timeout: Option<Duration>,
) -> Result<Option<Arc<Held>>> {
    let mut driver = Driver::spawn(ops, cfg);
    let wait = async {
        loop {
            match driver.events.recv().await {
                Some(RecipeEvent::Granted(grant)) => return Ok(grant),
                Some(RecipeEvent::Revoked(_)) => continue,
                Some(RecipeEvent::Ended) | None => return Err(Error::Closed),
            }
        }
    };
    let grant = match timeout {
        None => wait.await?,
        Some(t) => match tokio::time::timeout(t, wait).await {
            Ok(g) => g?,
            Err(_) => {
                driver.close().await;
                return Ok(None);
            }
        },
    };
    let current = driver.current.clone();
    let commands = driver.commands.clone();
    Ok(Some(Arc::new(Held {
        driver: AsyncMutex::new(driver),
        grant: StdMutex::new(grant),
        current,
        commands,
    })))
}

/// A held read lock, write lock or lease. Cloning shares the acquisition; the node is
/// deleted when the last clone is dropped (or on [`LockGuard::release`]).
#[derive(Debug, Clone)]
pub struct LockGuard {
    held: Arc<Held>,
}

impl LockGuard {
    /// The grant at acquisition (or at the last re-proof after a suspension).
    pub fn grant(&self) -> Grant {
        self.held
            .grant
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The fencing token, when the lock is fenced.
    pub fn token(&self) -> Option<FencingToken> {
        self.held
            .current
            .borrow()
            .as_ref()
            .and_then(|g| g.token)
            .or(self.grant().token)
    }

    /// True while the lock is proven held (false while suspended; false for good after
    /// `LOST`).
    pub fn is_held(&self) -> bool {
        self.held.current.borrow().is_some()
    }

    /// Resolves at the next revocation (suspension, loss). After [`Revoked::Lost`] the
    /// lock will not come back.
    pub async fn lost(&self) -> Revoked {
        let mut driver = self.held.driver.lock().await;
        loop {
            match driver.events.recv().await {
                Some(RecipeEvent::Revoked(why)) => return why,
                Some(RecipeEvent::Granted(g)) => {
                    *self.held.grant.lock().unwrap_or_else(|e| e.into_inner()) = g;
                }
                Some(RecipeEvent::Ended) | None => return Revoked::Lost,
            }
        }
    }

    /// Release this guard. The node is deleted (and this waits for it) when it was the
    /// last guard of its acquisition.
    pub async fn release(self) {
        if Arc::strong_count(&self.held) == 1 {
            let driver = self.held.driver.lock().await;
            driver.release(false);
            driver.close().await;
        }
    }
}

fn queue_cfg(path: &str, name: &str, rule: Rule, epoch: Option<String>, data: Bytes) -> CandidacyConfig {
    let mut cfg = CandidacyConfig::new(path, name, rand_nonce());
    cfg.mode = Mode::Lock;
    cfg.rule = rule;
    cfg.sort = SortKey::Sequence;
    cfg.epoch_path = epoch;
    cfg.data = data;
    cfg
}

/// An inter-process read-write lock on a path (see the module docs).
///
/// ```no_run
/// # async fn demo<O: rzk_election_client::recipe::RecipeOps>(client: std::sync::Arc<O>) -> rzk_election_client::Result<()> {
/// use rzk_election_client::recipe::ReadWriteLock;
/// let lock = ReadWriteLock::new(client, "/locks/table-1").fenced("/locks/table-1-epoch");
/// let w = lock.write().await?;
/// println!("writing with fencing token {:?}", w.token());
/// w.release().await;
/// let r = lock.read().await?; // shared with other readers
/// r.release().await;
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct ReadWriteLock<O: RecipeOps> {
    ops: Arc<O>,
    path: String,
    epoch_path: Option<String>,
    data: Bytes,
    writing: StdMutex<Weak<Held>>,
    reading: StdMutex<Weak<Held>>,
    /// One acquisition at a time per handle, so re-entrant calls share it.
    gate: AsyncMutex<()>,
}

impl<O: RecipeOps> ReadWriteLock<O> {
    /// A read-write lock on `path` (created as a container if missing).
    pub fn new(ops: Arc<O>, path: impl Into<String>) -> ReadWriteLock<O> {
        ReadWriteLock {
            ops,
            path: path.into(),
            epoch_path: None,
            data: Bytes::new(),
            writing: StdMutex::new(Weak::new()),
            reading: StdMutex::new(Weak::new()),
            gate: AsyncMutex::new(()),
        }
    }

    /// Fence each write acquisition through this epoch znode (outside `path`).
    pub fn fenced(mut self, epoch_path: impl Into<String>) -> ReadWriteLock<O> {
        self.epoch_path = Some(epoch_path.into());
        self
    }

    /// Data stored in this holder's nodes.
    pub fn data(mut self, data: impl Into<Bytes>) -> ReadWriteLock<O> {
        self.data = data.into();
        self
    }

    fn live(slot: &StdMutex<Weak<Held>>) -> Option<Arc<Held>> {
        let held = slot.lock().unwrap_or_else(|e| e.into_inner()).upgrade()?;
        // A lost acquisition is not re-entered: it will not come back.
        (!held.commands.is_closed()).then_some(held)
    }

    /// Wait for the write lock.
    pub async fn write(&self) -> Result<LockGuard> {
        self.write_within(None)
            .await?
            .ok_or(Error::Closed)
    }

    /// Wait for the write lock at most `timeout`; `None` if not acquired.
    pub async fn try_write(&self, timeout: Duration) -> Result<Option<LockGuard>> {
        self.write_within(Some(timeout)).await
    }

    async fn write_within(&self, timeout: Option<Duration>) -> Result<Option<LockGuard>> {
        let _gate = self.gate.lock().await;
        if let Some(held) = Self::live(&self.writing) {
            return Ok(Some(LockGuard { held }));
        }
        if Self::live(&self.reading).is_some() {
            return Err(Error::Config(
                "write() while this handle holds a read lock: an upgrade would wait for itself"
                    .into(),
            ));
        }
        let cfg = queue_cfg(
            &self.path,
            WRITE_NAME,
            Rule::First,
            self.epoch_path.clone(),
            self.data.clone(),
        );
        let Some(held) = acquire(self.ops.clone(), cfg, timeout).await? else {
            return Ok(None);
        };
        *self.writing.lock().unwrap_or_else(|e| e.into_inner()) = Arc::downgrade(&held);
        Ok(Some(LockGuard { held }))
    }

    /// Wait for a read lock.
    pub async fn read(&self) -> Result<LockGuard> {
        self.read_within(None).await?.ok_or(Error::Closed)
    }

    /// Wait for a read lock at most `timeout`; `None` if not acquired.
    pub async fn try_read(&self, timeout: Duration) -> Result<Option<LockGuard>> {
        self.read_within(Some(timeout)).await
    }

    async fn read_within(&self, timeout: Option<Duration>) -> Result<Option<LockGuard>> {
        let _gate = self.gate.lock().await;
        if let Some(held) = Self::live(&self.writing).or_else(|| Self::live(&self.reading)) {
            return Ok(Some(LockGuard { held }));
        }
        let cfg = queue_cfg(
            &self.path,
            READ_NAME,
            Rule::NoneBefore {
                blocker: WRITE_NAME.into(),
            },
            None,
            self.data.clone(),
        );
        let Some(held) = acquire(self.ops.clone(), cfg, timeout).await? else {
            return Ok(None);
        };
        *self.reading.lock().unwrap_or_else(|e| e.into_inner()) = Arc::downgrade(&held);
        Ok(Some(LockGuard { held }))
    }
}

/// A counting semaphore of `max_leases` (see the module docs). Every participant must
/// use the same `max_leases` for a path. Leases die with their session.
///
/// ```no_run
/// # async fn demo<O: rzk_election_client::recipe::RecipeOps>(client: std::sync::Arc<O>) -> rzk_election_client::Result<()> {
/// use rzk_election_client::recipe::Semaphore;
/// let sem = Semaphore::new(client, "/quota/exports", 3);
/// let lease = sem.acquire().await?; // at most 3 holders at any time
/// lease.release().await;
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct Semaphore<O: RecipeOps> {
    ops: Arc<O>,
    path: String,
    max_leases: u32,
    epoch_path: Option<String>,
    data: Bytes,
}

impl<O: RecipeOps> Semaphore<O> {
    /// A semaphore of `max_leases` (at least 1) on `path`.
    pub fn new(ops: Arc<O>, path: impl Into<String>, max_leases: u32) -> Semaphore<O> {
        Semaphore {
            ops,
            path: path.into(),
            max_leases: max_leases.max(1),
            epoch_path: None,
            data: Bytes::new(),
        }
    }

    /// Fence each lease through this epoch znode.
    pub fn fenced(mut self, epoch_path: impl Into<String>) -> Semaphore<O> {
        self.epoch_path = Some(epoch_path.into());
        self
    }

    /// Data stored in each lease node.
    pub fn data(mut self, data: impl Into<Bytes>) -> Semaphore<O> {
        self.data = data.into();
        self
    }

    fn cfg(&self) -> CandidacyConfig {
        queue_cfg(
            &self.path,
            LEASE_NAME,
            Rule::Within {
                n: self.max_leases,
            },
            self.epoch_path.clone(),
            self.data.clone(),
        )
    }

    /// Wait for one lease.
    pub async fn acquire(&self) -> Result<LockGuard> {
        let held = acquire(self.ops.clone(), self.cfg(), None)
            .await?
            .ok_or(Error::Closed)?;
        Ok(LockGuard { held })
    }

    /// Wait for one lease at most `timeout`; `None` if not acquired (the queued node is
    /// deleted).
    pub async fn try_acquire(&self, timeout: Duration) -> Result<Option<LockGuard>> {
        Ok(acquire(self.ops.clone(), self.cfg(), Some(timeout))
            .await?
            .map(|held| LockGuard { held }))
    }
}

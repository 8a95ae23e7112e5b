//! [`ReadWriteLock`] (Curator's `InterProcessReadWriteLock`) and [`Semaphore`] (Curator's
//! `InterProcessSemaphoreV2`): the [`queue`](super::queue) machine with a different
//! admission rule each.
//!
//! Every acquisition queues a protected ephemeral-sequential node under the lock path, in
//! sequence order (fair: first come, first served):
//! - a **writer** (`write-`) holds when no node of any kind precedes it;
//! - a **reader** (`read-`) holds when no writer precedes it;
//! - a **lease** (`lease-`) of a semaphore of `n` holds when fewer than `n` nodes precede
//!   it.
//!
//! New nodes only queue behind existing ones, so an admitted node stays admitted while it
//! exists: never two writers, never a reader beside a writer, never more than `n` leases
//! (when every participant uses the same `n`), whatever the interleaving.
//!
//! # Across connection states (the lifecycle of [`Mutex`](super::Mutex))
//! - A grant needs proof on the current session (admitted in a listing, and the node's
//!   `ephemeralOwner` is the current session: CURATOR-696). A fenced writer (or lease)
//!   then increments the epoch znode in a multi that checks its node: its
//!   [`FencingToken`] is shared with no other grant. A reader of a fenced lock reads the
//!   epoch: its token is the last writer's, so a resource that has seen a larger epoch
//!   can refuse a reader that outlived its lock.
//! - `SUSPENDED` / `READ_ONLY`: [`LockGuard::is_held`] turns false at once (the holder
//!   cannot be sure); `RECONNECTED` on the same session re-proves the same node (a writer
//!   is re-fenced with a larger token) and it turns true again.
//! - `LOST`: the lock is gone for good: [`LockGuard::lost`] resolves with
//!   [`Revoked::Lost`]; acquire again. While still waiting, `LOST` queues a fresh node on
//!   the next session (the old one is deleted); `NONODE` (the container parent was
//!   collected) is retried, never ignored.
//! - Release (or dropping the last guard) deletes the node, also one whose create was
//!   answered late or not at all (found by its protected prefix).
//!
//! # Re-entrancy
//! Per handle ([`ReadWriteLock`] value): while it holds the write lock, further `write()`
//! and `read()` calls on it return at once with guards sharing that acquisition (a read
//! guard taken under the write lock keeps the write lock until it is dropped: this is not
//! a downgrade); further `read()` calls while it holds a read lock share that one.
//! `write()` while holding only a read lock is refused: the upgrade would wait for itself.
//! (Curator counts re-entrancy per thread and grants a read to the thread that holds
//! the write lock whatever the read node's position, its downgrade; a writer queued
//! before that read node is admitted once the write lock is released, beside the
//! downgraded reader. This follows from its read predicate; not exercised here.)
//!
//! [`FencingToken`]: crate::FencingToken

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex as StdMutex, Weak};
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::{watch, Mutex as AsyncMutex};

use super::engine::Running;
use super::latch::rand_nonce;
use super::ops::RecipeOps;
use super::position::{Grant, Revoked};
use super::queue::{Admission, Fence, QueueCommand, QueueConfig, QueueEvent, QueueMachine};
use crate::error::{Error, Result};
use crate::types::FencingToken;

/// The name of writer nodes (before their sequence number).
pub const WRITE_NAME: &str = "write-";
/// The name of reader nodes.
pub const READ_NAME: &str = "read-";
/// The name of semaphore lease nodes.
pub const LEASE_NAME: &str = "lease-";

/// One acquisition: its machine and its grant. Dropped with its last guard, which
/// releases the node.
#[derive(Debug)]
struct Held {
    running: Running<QueueMachine>,
    /// Acquisitions not yet released: 1, plus one per re-entrant `write()`/`read()` of
    /// the handle that shares this one. Clones of a guard are views and do not count.
    holds: std::sync::atomic::AtomicUsize,
    /// The grant at acquisition.
    grant: Grant,
    /// The current grant, or why there is none.
    current: watch::Receiver<Current>,
}

/// The current grant, or the last revocation.
type Current = (Option<Grant>, Option<Revoked>);

impl Drop for Held {
    fn drop(&mut self) {
        // The driver deletes the node in the background.
        self.running.command(QueueCommand::Release);
    }
}

/// Spawn a queue machine and wait for its first grant (or `timeout`).
async fn acquire<O: RecipeOps>(
    ops: Arc<O>,
    cfg: QueueConfig,
    timeout: Option<Duration>,
) -> Result<Option<Arc<Held>>> {
    let (tx, current) = watch::channel((None, None));
    let mut running = Running::spawn_with(ops, QueueMachine::new(cfg), move |e: &QueueEvent| {
        match e {
            QueueEvent::Granted(g) => tx.send_replace((Some(g.clone()), None)),
            QueueEvent::Revoked(why) => tx.send_replace((None, Some(*why))),
        };
    });
    let wait = async {
        loop {
            match running.events.recv().await {
                Some(QueueEvent::Granted(g)) => return Ok(g),
                Some(QueueEvent::Revoked(_)) => continue,
                None => return Err(Error::Closed),
            }
        }
    };
    let grant = match timeout {
        None => wait.await?,
        Some(t) => match tokio::time::timeout(t, wait).await {
            Ok(g) => g?,
            Err(_) => {
                // Not acquired in time: the queued node is deleted.
                running.command(QueueCommand::Release);
                running.close().await;
                return Ok(None);
            }
        },
    };
    Ok(Some(Arc::new(Held {
        running,
        holds: std::sync::atomic::AtomicUsize::new(1),
        grant,
        current,
    })))
}

/// A held write lock, read lock or lease.
///
/// [`LockGuard::release`] gives one acquisition back; the node is deleted when the last
/// acquisition sharing it (re-entrant calls on one handle share one node) is released,
/// or when every guard and clone is dropped. Clones are views of the same acquisition
/// (to watch it from another task): they do not hold it, and see it released.
#[derive(Debug, Clone)]
pub struct LockGuard {
    held: Arc<Held>,
}

impl LockGuard {
    /// The current grant (after a suspension, the re-proven one, with a new token for
    /// a fenced writer), or the grant at acquisition while not held.
    pub fn grant(&self) -> Grant {
        self.held
            .current
            .borrow()
            .0
            .clone()
            .unwrap_or_else(|| self.held.grant.clone())
    }

    /// The fencing token of [`LockGuard::grant`], when the lock is fenced.
    pub fn token(&self) -> Option<FencingToken> {
        self.grant().token
    }

    /// True while the lock is proven held: false while suspended, false for good after
    /// `LOST`.
    pub fn is_held(&self) -> bool {
        self.held.current.borrow().0.is_some()
    }

    /// Resolves when the lock is not held (at once if it is not held now), with why:
    /// [`Revoked::Suspended`] while it may come back ([`LockGuard::regained`]),
    /// [`Revoked::Lost`] once it will not.
    pub async fn lost(&self) -> Revoked {
        let mut current = self.held.current.clone();
        let why = match current.wait_for(|(g, _)| g.is_none()).await {
            Ok(state) => state.1.unwrap_or(Revoked::Lost),
            Err(_) => Revoked::Lost,
        };
        // The machine has ended (the sender is gone): whatever the last revocation
        // said, the lock is not coming back.
        if current.has_changed().is_err() {
            return Revoked::Lost;
        }
        why
    }

    /// Resolves once the lock is held again after a suspension; `Err` once it will not
    /// be (lost with its session, its node deleted, released).
    pub async fn regained(&self) -> Result<Grant> {
        let mut current = self.held.current.clone();
        let state = current
            .wait_for(|(g, _)| g.is_some())
            .await
            .map_err(|_| Error::Closed)?;
        state.0.clone().ok_or(Error::Closed)
    }

    /// Give this acquisition back; when it is the last one sharing the node, delete the
    /// node and wait for that. Views (clones) of it see it released.
    pub async fn release(self) {
        let before = self
            .held
            .holds
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .unwrap_or(0);
        if before == 1 {
            self.held.running.command(QueueCommand::Release);
            self.held.running.close().await;
        }
    }
}

fn queue_cfg(
    path: &str,
    name: &str,
    admission: Admission,
    fence: Fence,
    data: Bytes,
) -> QueueConfig {
    let mut cfg = QueueConfig::new(path, name, admission, rand_nonce());
    cfg.fence = fence;
    cfg.data = data;
    cfg
}

/// An inter-process read-write lock (see the module docs).
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
    /// A read-write lock on `path` (created as a container when missing).
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

    /// Fence every write acquisition through this epoch znode (outside `path`); readers
    /// get the epoch of the last writer.
    pub fn fenced(mut self, epoch_path: impl Into<String>) -> ReadWriteLock<O> {
        self.epoch_path = Some(epoch_path.into());
        self
    }

    /// Data stored in this holder's nodes (an id, for operators).
    pub fn data(mut self, data: impl Into<Bytes>) -> ReadWriteLock<O> {
        self.data = data.into();
        self
    }

    /// The handle's acquisition in `slot`, if it is still held (not released, not
    /// lost): a re-entrant call shares it, counting one more hold.
    fn reenter(slot: &StdMutex<Weak<Held>>) -> Option<Arc<Held>> {
        let held = Self::live(slot)?;
        held.holds
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
                (n > 0).then_some(n + 1)
            })
            .ok()?;
        Some(held)
    }

    fn live(slot: &StdMutex<Weak<Held>>) -> Option<Arc<Held>> {
        let held = slot.lock().unwrap_or_else(|e| e.into_inner()).upgrade()?;
        // A released acquisition, or one whose machine ended (lost), is not re-entered.
        let open = held.holds.load(Ordering::SeqCst) > 0 && !held.running.commands.is_closed();
        open.then_some(held)
    }

    /// Wait for the write lock.
    pub async fn write(&self) -> Result<LockGuard> {
        self.write_within(None).await?.ok_or(Error::Closed)
    }

    /// Wait for the write lock at most `timeout`; `None` if not acquired (the queued node
    /// is deleted).
    pub async fn try_write(&self, timeout: Duration) -> Result<Option<LockGuard>> {
        self.write_within(Some(timeout)).await
    }

    async fn write_within(&self, timeout: Option<Duration>) -> Result<Option<LockGuard>> {
        let _gate = self.gate.lock().await;
        if let Some(held) = Self::reenter(&self.writing) {
            return Ok(Some(LockGuard { held }));
        }
        if Self::live(&self.reading).is_some() {
            return Err(Error::Config(
                "write() while this handle holds a read lock: the upgrade would wait for itself"
                    .into(),
            ));
        }
        let fence = match &self.epoch_path {
            Some(p) => Fence::Bump(p.clone()),
            None => Fence::None,
        };
        let cfg = queue_cfg(
            &self.path,
            WRITE_NAME,
            Admission::First,
            fence,
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
        if let Some(held) = Self::reenter(&self.writing).or_else(|| Self::reenter(&self.reading)) {
            return Ok(Some(LockGuard { held }));
        }
        let fence = match &self.epoch_path {
            Some(p) => Fence::Observe(p.clone()),
            None => Fence::None,
        };
        let cfg = queue_cfg(
            &self.path,
            READ_NAME,
            Admission::NoneBefore {
                blocker: WRITE_NAME.into(),
            },
            fence,
            self.data.clone(),
        );
        let Some(held) = acquire(self.ops.clone(), cfg, timeout).await? else {
            return Ok(None);
        };
        *self.reading.lock().unwrap_or_else(|e| e.into_inner()) = Arc::downgrade(&held);
        Ok(Some(LockGuard { held }))
    }
}

/// A counting semaphore: at most `max_leases` leases at any time, each an
/// ephemeral-sequential node that dies with its session (see the module docs). Every
/// participant must use the same `max_leases` for a path.
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

impl<O: RecipeOps> Clone for Semaphore<O> {
    fn clone(&self) -> Semaphore<O> {
        Semaphore {
            ops: self.ops.clone(),
            path: self.path.clone(),
            max_leases: self.max_leases,
            epoch_path: self.epoch_path.clone(),
            data: self.data.clone(),
        }
    }
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

    /// Fence each lease through this epoch znode (each lease gets its own token).
    pub fn fenced(mut self, epoch_path: impl Into<String>) -> Semaphore<O> {
        self.epoch_path = Some(epoch_path.into());
        self
    }

    /// Data stored in each lease node.
    pub fn data(mut self, data: impl Into<Bytes>) -> Semaphore<O> {
        self.data = data.into();
        self
    }

    fn cfg(&self) -> QueueConfig {
        let fence = match &self.epoch_path {
            Some(p) => Fence::Bump(p.clone()),
            None => Fence::None,
        };
        queue_cfg(
            &self.path,
            LEASE_NAME,
            Admission::Within { n: self.max_leases },
            fence,
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

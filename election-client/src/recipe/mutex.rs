//! [`Mutex`]: an inter-process lock.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;

use super::candidacy::{CandidacyConfig, CandidacyHandle, Grant, Mode, RecipeEvent, Revoked};
use super::latch::rand_nonce;
use super::ops::RecipeOps;
use crate::error::{Error, Result};

/// An inter-process mutex on a lock path. Each acquisition queues an
/// ephemeral-sequential `lock-` node; the holder is the first node proven to belong to
/// the current session. With an epoch path, each acquisition also gets a fencing token.
///
/// The lock follows the connection: [`MutexGuard::is_held`] turns false on `SUSPENDED`
/// (the holder cannot be sure) and back after the same node is re-proven on
/// `RECONNECTED`; on `LOST` the lock is gone for good ([`MutexGuard::lost`]).
#[derive(Debug, Clone)]
pub struct Mutex<O: RecipeOps> {
    ops: Arc<O>,
    path: String,
    epoch_path: Option<String>,
    data: Bytes,
}

impl<O: RecipeOps> Mutex<O> {
    /// A mutex on `path` (created as a container if missing).
    pub fn new(ops: Arc<O>, path: impl Into<String>) -> Mutex<O> {
        Mutex {
            ops,
            path: path.into(),
            epoch_path: None,
            data: Bytes::new(),
        }
    }

    /// Fence each acquisition through this epoch znode.
    pub fn fenced(mut self, epoch_path: impl Into<String>) -> Mutex<O> {
        self.epoch_path = Some(epoch_path.into());
        self
    }

    /// Data stored in this holder's lock node.
    pub fn data(mut self, data: impl Into<Bytes>) -> Mutex<O> {
        self.data = data.into();
        self
    }

    /// Wait for the lock.
    pub async fn acquire(&self) -> Result<MutexGuard> {
        let mut driver = CandidacyHandle::spawn(self.ops.clone(), self.config());
        loop {
            match driver.next_event().await {
                Some(RecipeEvent::Granted(grant)) => return Ok(MutexGuard { driver, grant }),
                Some(RecipeEvent::Revoked(_)) => continue,
                Some(RecipeEvent::Ended) | None => return Err(Error::Closed),
            }
        }
    }

    /// Wait for the lock at most `timeout`; `None` if it was not acquired (the queued
    /// node is deleted).
    pub async fn try_acquire(&self, timeout: Duration) -> Result<Option<MutexGuard>> {
        let mut driver = CandidacyHandle::spawn(self.ops.clone(), self.config());
        let wait = async {
            loop {
                match driver.next_event().await {
                    Some(RecipeEvent::Granted(grant)) => return Ok(grant),
                    Some(RecipeEvent::Revoked(_)) => continue,
                    Some(RecipeEvent::Ended) | None => return Err(Error::Closed),
                }
            }
        };
        match tokio::time::timeout(timeout, wait).await {
            Ok(Ok(grant)) => Ok(Some(MutexGuard { driver, grant })),
            Ok(Err(e)) => Err(e),
            Err(_) => {
                driver.close().await;
                Ok(None)
            }
        }
    }

    fn config(&self) -> CandidacyConfig {
        let mut cfg = CandidacyConfig::new(self.path.clone(), "lock-", rand_nonce());
        cfg.mode = Mode::Lock;
        cfg.epoch_path = self.epoch_path.clone();
        cfg.data = self.data.clone();
        cfg
    }
}

/// A held lock. Dropping it releases the lock (in the background); prefer
/// [`MutexGuard::release`], which waits for the node to be deleted.
#[derive(Debug)]
pub struct MutexGuard {
    driver: CandidacyHandle,
    grant: Grant,
}

impl MutexGuard {
    /// The grant at acquisition (node, session, fencing token if fenced).
    pub fn grant(&self) -> &Grant {
        &self.grant
    }

    /// True while the lock is proven held (false while suspended).
    pub fn is_held(&self) -> bool {
        self.driver.current.borrow().is_some()
    }

    /// The current grant: after a suspension the same node is re-proven and, when
    /// fenced, gets a new token.
    pub fn current(&self) -> Option<Grant> {
        self.driver.current.borrow().clone()
    }

    /// Resolves when the lock is revoked (suspension, loss). After `Lost` it will not
    /// come back.
    pub async fn lost(&mut self) -> Revoked {
        loop {
            match self.driver.next_event().await {
                Some(RecipeEvent::Revoked(why)) => return why,
                Some(RecipeEvent::Granted(g)) => self.grant = g,
                Some(RecipeEvent::Ended) | None => return Revoked::Lost,
            }
        }
    }

    /// Release the lock and wait until the driver has finished.
    pub async fn release(self) {
        self.driver.release(false);
        self.driver.close().await;
    }
}

impl Drop for MutexGuard {
    fn drop(&mut self) {
        self.driver.release(false);
    }
}

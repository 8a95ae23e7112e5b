//! [`LeaderSelector`]: leadership as a callback that holds it until it returns.

use std::future::Future;
use std::sync::Arc;

use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::candidacy::{CandidacyHandle, Grant, Mode, RecipeEvent, Revoked};
use super::latch::LatchConfig;
use super::ops::RecipeOps;

/// How long [`LeaderSelector::close`] waits for a revoked callback to return before it
/// aborts it.
pub const CALLBACK_GRACE: std::time::Duration = std::time::Duration::from_secs(10);

/// What the leadership callback receives: the grant, and a way to learn that it was
/// revoked (connection suspended or lost, or the selector closed).
#[derive(Debug, Clone)]
pub struct Leadership {
    /// The grant, with its fencing token.
    pub grant: Grant,
    revoked: watch::Receiver<Option<Revoked>>,
}

impl Leadership {
    /// Resolves once leadership is revoked; the callback must then return promptly (its
    /// fencing token is already stale).
    pub async fn revoked(&mut self) -> Revoked {
        match self.revoked.wait_for(|r| r.is_some()).await {
            Ok(r) => r.unwrap_or(Revoked::Closed),
            Err(_) => Revoked::Closed,
        }
    }

    /// True once leadership is revoked.
    pub fn is_revoked(&self) -> bool {
        self.revoked.borrow().is_some()
    }
}

/// Runs `take_leadership` each time this participant becomes leader; leadership lasts
/// until the callback returns, then the candidate node is released and (with
/// `auto_requeue`) a fresh one queues again. A revocation while the callback runs is
/// signalled through [`Leadership::revoked`]. The callback never runs twice at once, and
/// runs on its own task, so it may use the client freely.
///
/// A callback that panics ends that leadership (the candidate is released, and
/// requeued with `auto_requeue`); the panic is not lost: [`close`](LeaderSelector::close)
/// resumes the first one once the selector has stopped, as joining a thread would.
#[derive(Debug)]
pub struct LeaderSelector {
    supervisor: JoinHandle<Option<PanicPayload>>,
    close: watch::Sender<bool>,
}

/// What a panicking callback panicked with.
type PanicPayload = Box<dyn std::any::Any + Send + 'static>;

impl LeaderSelector {
    /// Start contending.
    pub fn start<O, F, Fut>(
        ops: Arc<O>,
        cfg: LatchConfig,
        auto_requeue: bool,
        take_leadership: F,
    ) -> LeaderSelector
    where
        O: RecipeOps,
        F: Fn(Leadership) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let driver = CandidacyHandle::spawn(ops, cfg.candidacy("lock-", Mode::Latch));
        let (close_tx, close_rx) = watch::channel(false);
        let supervisor = tokio::spawn(supervise(driver, auto_requeue, take_leadership, close_rx));
        LeaderSelector {
            supervisor,
            close: close_tx,
        }
    }

    /// Stop: revoke a running leadership, wait for the callback to return (at most
    /// [`CALLBACK_GRACE`], then it is aborted), delete the candidate node.
    ///
    /// # Panics
    /// If a leadership callback panicked while the selector ran, `close` resumes the
    /// first such panic after stopping (a callback's bug must not be lost in a log).
    pub async fn close(self) {
        let _ = self.close.send(true);
        match self.supervisor.await {
            Ok(None) => {}
            Ok(Some(panic)) => std::panic::resume_unwind(panic),
            Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
            Err(_) => {}
        }
    }
}

async fn supervise<F, Fut>(
    mut driver: CandidacyHandle,
    auto_requeue: bool,
    take_leadership: F,
    mut close: watch::Receiver<bool>,
) -> Option<PanicPayload>
where
    F: Fn(Leadership) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    let mut running: Option<(JoinHandle<()>, watch::Sender<Option<Revoked>>)> = None;
    // The first callback panic, resumed by `close`.
    let mut panicked: Option<PanicPayload> = None;
    let mut keep = |r: Result<(), tokio::task::JoinError>| {
        if let Err(e) = r {
            if e.is_panic() {
                tracing::warn!("leadership callback panicked");
                panicked.get_or_insert(e.into_panic());
            }
        }
    };
    loop {
        tokio::select! {
            _ = close.changed() => {
                if let Some((mut task, revoke)) = running.take() {
                    revoke.send_replace(Some(Revoked::Closed));
                    // A callback that ignores its revocation must not hang close().
                    match tokio::time::timeout(CALLBACK_GRACE, &mut task).await {
                        Ok(r) => keep(r),
                        Err(_) => {
                            tracing::warn!("leadership callback ignored its revocation; aborting it");
                            task.abort();
                        }
                    }
                }
                driver.close().await;
                return panicked;
            }
            // The callback returned: leadership ends with it.
            done = async { match running.as_mut() { Some((t, _)) => t.await, None => futures::future::pending().await } } => {
                keep(done);
                running = None;
                driver.release(auto_requeue);
            }
            event = driver.next_event() => match event {
                Some(RecipeEvent::Granted(grant)) => {
                    let (tx, rx) = watch::channel(None);
                    let task = tokio::spawn(take_leadership(Leadership { grant, revoked: rx }));
                    running = Some((task, tx));
                }
                Some(RecipeEvent::Revoked(why)) => {
                    if let Some((_, revoke)) = running.as_ref() {
                        revoke.send_replace(Some(why));
                    }
                }
                Some(RecipeEvent::Ended) | None => {
                    if let Some((task, revoke)) = running.take() {
                        revoke.send_replace(Some(Revoked::Closed));
                        keep(task.await);
                    }
                    return panicked;
                }
            },
        }
    }
}

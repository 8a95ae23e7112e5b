//! The tokio side: a task that keeps a [`Fanout`] fed from its source and
//! rebuilds it whenever it loses the source, and one [`RelayStream`] per observer.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use rzk_zxid::Zxid;
use tokio::sync::Notify;
use tokio::task::JoinHandle;

use crate::error::AttachError;
use crate::fanout::{Disconnect, Fanout, FanoutConfig, Inform};
use crate::source::{LiveEvents, RelaySource, SourceEvent};
use crate::ObserverId;

/// Figures for `mntr` and metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MasterStats {
    /// Observers attached now.
    pub observers: usize,
    /// The source's last committed zxid as the relay knows it.
    pub committed: Zxid,
    /// Proposals pending commit in the relay.
    pub pending: usize,
    /// Times the fan-out was rebuilt from a new subscription (the first build
    /// included).
    pub builds: u64,
    /// Observers dropped because their queue reached a limit.
    pub too_slow: u64,
}

/// What the task and the streams share, under one lock.
#[derive(Debug, Default)]
struct State {
    /// The current fan-out; `None` while it is being rebuilt or after shutdown.
    fanout: Option<Fanout>,
    /// The wake-up of each attached observer's stream.
    wakers: HashMap<ObserverId, Arc<Notify>>,
    /// Observers dropped, with why, until their stream reads it.
    gone: HashMap<ObserverId, Disconnect>,
    /// Counters for [`MasterStats`].
    builds: u64,
    /// Observers dropped as too slow, ever.
    too_slow: u64,
    /// Set by [`ObserverMaster::shutdown`]: no rebuild after this.
    shut: bool,
}

impl State {
    /// Moves the fan-out's dropped observers to `gone` and wakes their streams.
    fn settle(&mut self, dropped: Vec<(ObserverId, Disconnect)>) {
        for (id, why) in dropped {
            if why == Disconnect::TooSlow {
                self.too_slow += 1;
            }
            if let Some(w) = self.wakers.remove(&id) {
                self.gone.insert(id, why);
                w.notify_one();
            }
        }
    }

    /// Drops the current fan-out: every observer is told [`Disconnect::SourceReset`].
    fn reset(&mut self) {
        if let Some(f) = self.fanout.take() {
            let dropped = f.reset();
            self.settle(dropped);
        }
    }
}

/// Shared between the task, the handle and the streams.
#[derive(Debug)]
struct Shared {
    /// The state.
    state: Mutex<State>,
    /// Wakes the task for shutdown.
    stop: Notify,
}

impl Shared {
    /// The lock. Every change under it is a whole step of the fan-out, so a
    /// panic elsewhere cannot leave it half-changed; a poisoned lock is taken over.
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The observer master: relays a source's committed transactions to observers.
///
/// It subscribes to its source ([`RelaySource::subscribe`]) and builds its
/// [`Fanout`] from that subscription only (I4). When the live stream ends (the
/// source reset, or the relay lagged) or the fan-out finds its view of the
/// source wrong, every observer is disconnected and the fan-out is rebuilt from
/// a new subscription. The source never waits for it.
#[derive(Debug)]
pub struct ObserverMaster {
    /// Shared with the task and the streams.
    shared: Arc<Shared>,
    /// The task that feeds the fan-out.
    task: JoinHandle<()>,
}

impl ObserverMaster {
    /// Starts relaying `source` (inside a tokio runtime).
    pub fn spawn<S: RelaySource>(source: Arc<S>, config: FanoutConfig) -> ObserverMaster {
        let shared = Arc::new(Shared {
            state: Mutex::new(State::default()),
            stop: Notify::new(),
        });
        let task = tokio::spawn(run(source, config, shared.clone()));
        ObserverMaster { shared, task }
    }

    /// Attaches `observer`, whose history ends at `synced_to`, and returns its
    /// stream of committed transactions after `synced_to`.
    pub fn attach(
        &self,
        observer: ObserverId,
        synced_to: Zxid,
    ) -> Result<RelayStream, AttachError> {
        let mut state = self.shared.lock();
        let fanout = state.fanout.as_mut().ok_or(AttachError::NoSource)?;
        fanout.attach(observer, synced_to)?;
        let wake = Arc::new(Notify::new());
        // Replayed transactions may be queued already.
        wake.notify_one();
        state.gone.remove(&observer);
        state.wakers.insert(observer, wake.clone());
        Ok(RelayStream {
            shared: self.shared.clone(),
            observer,
            wake,
        })
    }

    /// Waits until the fan-out is built (for callers that attach right after
    /// start-up); `false` after shutdown.
    pub async fn ready(&self) -> bool {
        loop {
            let notified = self.shared.stop.notified();
            {
                let state = self.shared.lock();
                if state.shut {
                    return false;
                }
                if state.fanout.is_some() {
                    return true;
                }
            }
            // The task wakes `stop` waiters (notify_waiters) after each build.
            notified.await;
        }
    }

    /// Figures for `mntr`.
    pub fn stats(&self) -> MasterStats {
        let state = self.shared.lock();
        let (observers, committed, pending) =
            state.fanout.as_ref().map_or((0, Zxid::ZERO, 0), |f| {
                (f.observers().count(), f.committed(), f.pending().count())
            });
        MasterStats {
            observers,
            committed,
            pending,
            builds: state.builds,
            too_slow: state.too_slow,
        }
    }

    /// The observers attached now, each with the transactions queued for it
    /// (for the `observers` admin command).
    pub fn observers(&self) -> Vec<(ObserverId, usize)> {
        let state = self.shared.lock();
        state.fanout.as_ref().map_or_else(Vec::new, |f| {
            f.observers().map(|id| (id, f.queued(id))).collect()
        })
    }

    /// Stops relaying: every observer is disconnected ([`Disconnect::SourceReset`])
    /// and the task ends.
    pub async fn shutdown(self) {
        {
            let mut state = self.shared.lock();
            state.shut = true;
            state.reset();
        }
        self.shared.stop.notify_waiters();
        self.task.abort();
        // A cancelled task is the expected end here.
        let _ = self.task.await;
    }
}

/// The task: subscribe, build, feed, and rebuild on any end of the stream.
async fn run<S: RelaySource>(source: Arc<S>, config: FanoutConfig, shared: Arc<Shared>) {
    loop {
        let sub = source.subscribe();
        let mut live = sub.live;
        match Fanout::new(sub.snapshot, config.clone()) {
            Ok(fanout) => {
                let mut state = shared.lock();
                if state.shut {
                    return;
                }
                state.reset();
                state.fanout = Some(fanout);
                state.builds += 1;
            }
            Err(e) => {
                tracing::warn!(error = %e, "observer master: the source's snapshot is refused; waiting for its next change");
                // Rebuild after the source changes, not in a busy loop.
                let _ = live.next().await;
                continue;
            }
        }
        shared.stop.notify_waiters();
        feed(&mut live, &shared).await;
        let mut state = shared.lock();
        state.reset();
        if state.shut {
            return;
        }
    }
}

/// Feeds live events into the fan-out until the stream ends or an event is refused.
async fn feed(live: &mut LiveEvents, shared: &Shared) {
    loop {
        let first = match live.next().await {
            Ok(event) => event,
            Err(end) => {
                tracing::info!(%end, "observer master: live stream ended; rebuilding");
                return;
            }
        };
        let mut state = shared.lock();
        let mut event = Some(first);
        // Take whatever else is ready under the same lock: one wake-up per batch.
        while let Some(ev) = event.take() {
            if let Err(e) = apply(&mut state, ev) {
                tracing::warn!(error = %e, "observer master: relay disagrees with its source; rebuilding");
                return;
            }
            match live.try_next() {
                Ok(next) => event = next,
                Err(end) => {
                    tracing::info!(%end, "observer master: live stream ended; rebuilding");
                    return;
                }
            }
        }
        let dropped = state
            .fanout
            .as_mut()
            .map(Fanout::take_disconnected)
            .unwrap_or_default();
        state.settle(dropped);
        for w in state.wakers.values() {
            w.notify_one();
        }
    }
}

/// One event into the fan-out.
fn apply(state: &mut State, event: SourceEvent) -> Result<(), crate::FanoutError> {
    let Some(fanout) = state.fanout.as_mut() else {
        return Ok(());
    };
    fanout.apply(event)
}

/// One observer's stream of committed transactions. Dropping it detaches the
/// observer.
#[derive(Debug)]
pub struct RelayStream {
    /// The master's shared state.
    shared: Arc<Shared>,
    /// Whose stream this is.
    observer: ObserverId,
    /// Woken when transactions are queued or the observer is dropped.
    wake: Arc<Notify>,
}

impl RelayStream {
    /// The observer this stream is for.
    pub fn observer(&self) -> ObserverId {
        self.observer
    }

    /// Waits for up to `max` queued transactions, oldest first. `Err` once the
    /// observer was disconnected: it must sync again and attach anew.
    pub async fn next_batch(&mut self, max: usize) -> Result<Vec<Inform>, Disconnect> {
        loop {
            {
                let mut state = self.shared.lock();
                let current = state
                    .wakers
                    .get(&self.observer)
                    .is_some_and(|w| Arc::ptr_eq(w, &self.wake));
                if !current && state.wakers.contains_key(&self.observer) {
                    // The observer attached again with a newer stream.
                    return Err(Disconnect::SourceReset);
                }
                if let Some(why) = state.gone.remove(&self.observer) {
                    return Err(why);
                }
                let Some(fanout) = state.fanout.as_mut() else {
                    return Err(Disconnect::SourceReset);
                };
                if !fanout.is_attached(self.observer) {
                    return Err(Disconnect::SourceReset);
                }
                let batch = fanout.pop(self.observer, max.max(1));
                if !batch.is_empty() {
                    return Ok(batch);
                }
            }
            self.wake.notified().await;
        }
    }
}

impl Drop for RelayStream {
    fn drop(&mut self) {
        let mut state = self.shared.lock();
        let mine = state
            .wakers
            .get(&self.observer)
            .is_some_and(|w| Arc::ptr_eq(w, &self.wake));
        if !mine {
            return;
        }
        state.wakers.remove(&self.observer);
        if let Some(f) = state.fanout.as_mut() {
            f.detach(self.observer);
            // Our own Detached report needs no reader.
            let dropped = f.take_disconnected();
            let others: Vec<_> = dropped
                .into_iter()
                .filter(|(id, _)| *id != self.observer)
                .collect();
            state.settle(others);
        }
    }
}

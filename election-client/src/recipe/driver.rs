//! Runs a [`Candidacy`] on one tokio task over a [`RecipeOps`].
//!
//! Everything that can change the candidacy (connection states, operation results,
//! watch events, timers, the holder's commands) is fed to the machine from this one
//! task, one input at a time, so only the current attempt can grant or revoke
//! (invariant 1 of docs/curator-recipes.md §7). The holder learns of grants and
//! revocations through an ordered channel and a `watch` of the current grant; its own
//! code runs on its own task, never on this one (invariant 13).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use futures::stream::{FuturesUnordered, StreamExt};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::Instant;

use super::candidacy::{
    Candidacy, CandidacyConfig, Grant, Input, Op, OpId, OpResult, Output, Revoked,
};
use super::ops::RecipeOps;
use crate::error::Error;
use crate::state::ConnectionState;

/// A transition reported to the holder, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RecipeEvent {
    /// The grant is proven and fenced: act as leader / lock holder.
    Granted(Grant),
    /// Stop acting: the grant reported before is gone.
    Revoked(Revoked),
    /// The candidacy is over.
    Ended,
}

/// Commands from the holder to the driver task.
#[derive(Debug)]
pub(crate) enum Command {
    Release { rejoin: bool },
    Close { done: oneshot::Sender<()> },
}

/// How often a best-effort delete is retried while the connection is down.
const DELETE_ATTEMPTS_MAX: u32 = 20;
const DELETE_RETRY: Duration = Duration::from_millis(250);

/// The holder's side of a running candidacy.
#[derive(Debug)]
pub(crate) struct Driver {
    pub(crate) commands: mpsc::UnboundedSender<Command>,
    pub(crate) events: mpsc::UnboundedReceiver<RecipeEvent>,
    pub(crate) current: watch::Receiver<Option<Grant>>,
}

impl Driver {
    /// Spawn the task.
    pub(crate) fn spawn<O: RecipeOps>(ops: Arc<O>, cfg: CandidacyConfig) -> Driver {
        let (cmd_tx, cmd_rx) = mpsc::unbounded_channel();
        // Unbounded, but not without limit: the machine reports at most one transition
        // per server round trip, and the holder reads them in order.
        let (ev_tx, ev_rx) = mpsc::unbounded_channel();
        let (cur_tx, cur_rx) = watch::channel(None);
        tokio::spawn(run(ops, cfg, cmd_rx, ev_tx, cur_tx));
        Driver {
            commands: cmd_tx,
            events: ev_rx,
            current: cur_rx,
        }
    }

    pub(crate) fn release(&self, rejoin: bool) {
        let _ = self.commands.send(Command::Release { rejoin });
    }

    pub(crate) async fn close(&self) {
        let (tx, rx) = oneshot::channel();
        if self.commands.send(Command::Close { done: tx }).is_ok() {
            let _ = rx.await;
        }
    }
}

type OpFuture = BoxFuture<'static, (OpId, OpResult, Option<super::ops::WatchFired>)>;

struct Task<O: RecipeOps> {
    ops: Arc<O>,
    machine: Candidacy,
    epoch: Instant,
    inflight: FuturesUnordered<OpFuture>,
    watches: FuturesUnordered<BoxFuture<'static, OpId>>,
    /// The op that armed the watch in `watches`.
    watch_id: Option<OpId>,
    timers: BTreeMap<(u64, OpId), ()>,
    events: mpsc::UnboundedSender<RecipeEvent>,
    current: watch::Sender<Option<Grant>>,
    ended: bool,
}

async fn run<O: RecipeOps>(
    ops: Arc<O>,
    cfg: CandidacyConfig,
    mut commands: mpsc::UnboundedReceiver<Command>,
    events: mpsc::UnboundedSender<RecipeEvent>,
    current: watch::Sender<Option<Grant>>,
) {
    let (state, mut states) = ops.subscribe();
    let mut t = Task {
        ops,
        machine: Candidacy::new(cfg),
        epoch: Instant::now(),
        inflight: FuturesUnordered::new(),
        watches: FuturesUnordered::new(),
        watch_id: None,
        timers: BTreeMap::new(),
        events,
        current,
        ended: false,
    };
    t.feed(Input::Start);
    if let Some(state) = state {
        t.feed(Input::Conn(state));
    }
    let mut close_done: Option<oneshot::Sender<()>> = None;
    while !t.ended {
        let next_timer = t.timers.keys().next().map(|(at, _)| *at);
        let sleep = async {
            match next_timer {
                Some(at) => tokio::time::sleep_until(t.epoch + Duration::from_millis(at)).await,
                None => futures::future::pending::<()>().await,
            }
        };
        tokio::select! {
            biased;
            cmd = commands.recv() => match cmd {
                Some(Command::Release { rejoin }) => t.feed(Input::Release { rejoin }),
                Some(Command::Close { done }) => {
                    close_done = Some(done);
                    t.feed(Input::Close);
                }
                None => t.feed(Input::Close),
            },
            state = states.next() => match state {
                Some(Ok(state)) => t.feed(Input::Conn(state)),
                Some(Err(lagged)) => {
                    // We cannot know what we missed: assume the worst (the session is
                    // gone), then take the current state afresh.
                    tracing::warn!(error = %lagged, "connection-state stream lagged; treating as LOST");
                    t.feed(Input::Conn(ConnectionState::Lost));
                    let (state, fresh) = t.ops.subscribe();
                    states = fresh;
                    if let Some(state) = state {
                        t.feed(Input::Conn(state));
                    }
                }
                // The client is closed.
                None => t.feed(Input::Close),
            },
            Some((id, result, fired)) = t.inflight.next() => {
                if let Some(fired) = fired {
                    // The machine watches one node at a time: a newer watch replaces the
                    // older ones, whose receivers are dropped (so the client's watch
                    // table forgets them) instead of piling up at every re-check.
                    if t.watch_id.is_none_or(|w| id > w) {
                        t.watches = FuturesUnordered::new();
                        t.watch_id = Some(id);
                        t.watches.push(Box::pin(async move {
                            fired.await;
                            id
                        }));
                    }
                }
                t.feed(Input::Done { id, result });
            }
            Some(id) = t.watches.next() => t.feed(Input::Watched { id }),
            () = sleep => {
                let now = t.now_ms();
                let due: Vec<(u64, OpId)> = t.timers.range(..=(now, OpId(u64::MAX))).map(|(k, _)| *k).collect();
                for key in due {
                    t.timers.remove(&key);
                    t.feed(Input::Timer { id: key.1 });
                }
            }
        }
    }
    if let Some(done) = close_done {
        let _ = done.send(());
    }
}

impl<O: RecipeOps> Task<O> {
    fn now_ms(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    fn feed(&mut self, input: Input) {
        let now = self.now_ms();
        tracing::trace!(?input, "candidacy input");
        for output in self.machine.step(now, input) {
            self.carry_out(output);
        }
    }

    fn carry_out(&mut self, output: Output) {
        match output {
            Output::Op { id, op } => self.run_op(id, op),
            Output::Timer { id, at_ms } => {
                self.timers.insert((at_ms, id), ());
            }
            Output::Granted(grant) => {
                tracing::info!(node = %grant.node, session = %grant.session, token = ?grant.token, "granted");
                self.current.send_replace(Some(grant.clone()));
                let _ = self.events.send(RecipeEvent::Granted(grant));
            }
            Output::Revoked(why) => {
                tracing::info!(?why, "revoked");
                self.current.send_replace(None);
                let _ = self.events.send(RecipeEvent::Revoked(why));
            }
            Output::Ended => {
                self.ended = true;
                let _ = self.events.send(RecipeEvent::Ended);
            }
        }
    }

    fn run_op(&mut self, id: OpId, op: Op) {
        let ops = self.ops.clone();
        let fut: OpFuture = match op {
            Op::CreateCandidate { parent, name, data } => Box::pin(async move {
                let r = ops.create_candidate(&parent, &name, data).await;
                log_err("create", &r);
                (id, OpResult::Created(r), None)
            }),
            Op::ListChildren { path } => Box::pin(async move {
                let r = ops.children(&path).await;
                log_err("list", &r);
                (id, OpResult::Children(r), None)
            }),
            Op::Read { path } => Box::pin(async move {
                let r = ops.read(&path).await;
                log_err("read", &r);
                (id, OpResult::Read(r), None)
            }),
            Op::Watch { path } => Box::pin(async move {
                match ops.watch(&path).await {
                    Ok((stat, fired)) => (id, OpResult::Watching(Ok(stat)), Some(fired)),
                    Err(e) => (id, OpResult::Watching(Err(e)), None),
                }
            }),
            Op::CreateEpoch { path } => Box::pin(async move {
                let r = ops.create_epoch(&path).await;
                (id, OpResult::EpochCreated(r), None)
            }),
            Op::BumpEpoch {
                candidate,
                epoch_path,
                version,
                value,
            } => Box::pin(async move {
                let r = ops
                    .bump_epoch(&candidate, &epoch_path, version, value)
                    .await;
                if let Err(e) = &r {
                    tracing::debug!(?e, "fencing failed");
                }
                (id, OpResult::Bumped(r), None)
            }),
            Op::Delete { path } => {
                // Guaranteed delete, off the machine: retried while the connection is
                // down; a missing node counts as done.
                tokio::spawn(async move {
                    for _ in 0..DELETE_ATTEMPTS_MAX {
                        match ops.delete(&path).await {
                            Ok(()) | Err(Error::NoNode { .. }) => return,
                            Err(Error::Closed) => return,
                            Err(e) => tracing::debug!(%path, error = %e, "delete failed; retrying"),
                        }
                        tokio::time::sleep(DELETE_RETRY).await;
                    }
                    tracing::warn!(%path, "gave up deleting a stale candidate node");
                });
                return;
            }
        };
        self.inflight.push(fut);
    }
}

fn log_err<T>(what: &str, r: &Result<T, Error>) {
    if let Err(e) = r {
        tracing::debug!(op = what, error = %e, "recipe operation failed");
    }
}

//! Feeds an observer relay (`rzk-observer-master`'s [`RelayHub`]) from a peer's
//! own outputs (I4).
//!
//! While the peer serves (leader, or follower past UPTODATE), every `Append`
//! is a proposal and every `Apply` a commit, in the order the core emitted
//! them. When it starts serving, the hub is reset from
//! [`Peer::relay_snapshot`] taken after that step: the applied zxid and the
//! entries written after it, so a proposal in flight during the sync is in the
//! relay's pending queue (ZOOKEEPER-5088). Any other role change, a snapshot
//! install or a truncation resets the hub (every relay stream ends; observers
//! sync again), and so does the end of the driver.
//!
//! The observer's side, [`RelayFollow`]: an up-to-date observer with
//! observer-master addresses follows a voter's relay (not the leader's) and
//! feeds the core ([`Input::RelayAttached`], [`Input::Relayed`],
//! [`Input::RelayEnded`]); the core checks the join with its own stream and
//! syncs again from the leader when the relay ends.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use rzk_observer_master::grpc::{RelayClient, RelayService};
use rzk_observer_master::{
    FanoutConfig, ObserverId, ObserverMaster, RelayHub, SourceSnapshot, Txn,
};
use rzk_zxid::Zxid;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::core::{Input, Output, Peer, StorageCmd};
use crate::message::Entry;
use crate::{PeerId, Role};

/// The feeding state of one driver.
pub(crate) struct RelayFeed {
    /// The hub the observer master subscribes to.
    hub: Arc<RelayHub>,
    /// Whether the peer serves and the hub follows its stream.
    serving: bool,
    /// The peer started serving in the current step: reset the hub from its
    /// state once the step's outputs are all seen.
    rebuild: bool,
}

impl RelayFeed {
    pub(crate) fn new(hub: Arc<RelayHub>) -> RelayFeed {
        RelayFeed {
            hub,
            serving: false,
            rebuild: false,
        }
    }

    /// One output of the current step, in order.
    pub(crate) fn on_output(&mut self, o: &Output) {
        match o {
            Output::Storage { cmd, .. } => match cmd {
                StorageCmd::Append(entries) if self.serving => {
                    for e in entries {
                        if let Err(err) = self.hub.proposed(Txn::new(e.zxid, e.payload.clone())) {
                            self.stop(&format!("{err}"));
                            return;
                        }
                    }
                }
                StorageCmd::TruncateAfter(_) | StorageCmd::InstallSnapshot(_) => {
                    self.stop("the log was cut or replaced")
                }
                StorageCmd::Append(_)
                | StorageCmd::SaveEpochs(_)
                | StorageCmd::BeginSync { .. }
                | StorageCmd::EndSync
                | StorageCmd::ReceiveSnapshot(_)
                | StorageCmd::SnapshotChunk { .. }
                | StorageCmd::AbortSnapshot => {}
            },
            Output::Apply(entries) if self.serving => {
                for e in entries {
                    if let Err(err) = self.hub.committed(e.zxid) {
                        self.stop(&format!("{err}"));
                        return;
                    }
                }
            }
            Output::ApplySnapshot { .. } => self.stop("a snapshot was loaded"),
            Output::RoleChanged { role, .. } => {
                self.stop("the role changed");
                self.rebuild = matches!(role, Role::Leader | Role::Follower);
            }
            Output::Apply(_)
            | Output::Read { .. }
            | Output::Send { .. }
            | Output::Proposed { .. }
            | Output::ProposeFailed { .. }
            | Output::SyncDone { .. }
            | Output::SyncFailed { .. }
            | Output::Forwarded { .. }
            | Output::Refused { .. } => {}
        }
    }

    /// The step's outputs are all seen: start following the peer's stream if
    /// it started serving, from its state now.
    pub(crate) fn after_step(&mut self, peer: &Peer) {
        if !std::mem::take(&mut self.rebuild) {
            return;
        }
        let (committed, pending) = peer.relay_snapshot();
        self.hub.reset(SourceSnapshot {
            committed,
            pending: pending
                .into_iter()
                .map(|e| Txn::new(e.zxid, e.payload))
                .collect(),
        });
        self.serving = true;
    }

    /// Stops following: every relay stream ends, the hub keeps its committed
    /// zxid and nothing pending until the peer serves again.
    pub(crate) fn stop(&mut self, why: &str) {
        self.rebuild = false;
        if !self.serving {
            return;
        }
        self.serving = false;
        tracing::debug!(why, "observer relay source reset");
        let committed = self.hub.snapshot().committed;
        self.hub.reset(SourceSnapshot {
            committed,
            pending: Vec::new(),
        });
    }
}

/// What the observer's follow task tells the driver, tagged with the task's
/// generation (events of a task the driver has replaced are dropped).
pub(crate) enum RelayEvent {
    /// Following this master from now on.
    Attached(PeerId),
    /// Committed transactions that passed the contiguity check, after `prev`.
    Batch {
        /// The zxid the master relayed them after.
        prev: Zxid,
        /// The transactions.
        entries: Vec<Entry>,
    },
    /// The relay ended; why.
    Ended(String),
}

/// The observer's side: while this peer is an up-to-date observer, a task
/// follows a follower's observer master and hands its committed transactions to
/// the core ([`crate::core::Input::Relayed`]). Without a master that answers it
/// retries now and then, and meanwhile the leader's INFORMs carry the stream
/// (ZooKeeper's observer falls back to the leader the same way).
pub(crate) struct RelayFollow {
    /// This observer's id.
    me: PeerId,
    /// Every voter's observer-master address (this peer's own excluded).
    masters: Vec<(PeerId, SocketAddr)>,
    /// The current task's generation; events of older ones are dropped.
    generation: u64,
    /// The current task.
    task: Option<JoinHandle<()>>,
    /// Where tasks send their events.
    tx: mpsc::UnboundedSender<(u64, RelayEvent)>,
    /// The master followed now (for `mntr`).
    pub(crate) following: Option<PeerId>,
}

/// How long one attempt to reach a master may take.
const RELAY_CONNECT_MAX: Duration = Duration::from_secs(2);
/// Attempts per master in one round.
const RELAY_ATTEMPTS: usize = 3;
/// Between two attempts on one master.
const RELAY_ATTEMPT_INTERVAL: Duration = Duration::from_millis(50);
/// How long an observer that found no master waits before trying again
/// (it follows the leader meanwhile).
const RELAY_RETRY_INTERVAL: Duration = Duration::from_secs(1);

impl RelayFollow {
    pub(crate) fn new(
        me: PeerId,
        masters: Vec<(PeerId, SocketAddr)>,
        tx: mpsc::UnboundedSender<(u64, RelayEvent)>,
    ) -> RelayFollow {
        RelayFollow {
            me,
            masters: masters.into_iter().filter(|(id, _)| *id != me).collect(),
            generation: 0,
            task: None,
            tx,
            following: None,
        }
    }

    /// The role changed: stop following; as an observer of `leader`, start a
    /// task that follows one of the other voters' masters from the applied
    /// zxid `applied()` reads at each attempt.
    pub(crate) fn on_role(
        &mut self,
        role: Role,
        leader: Option<PeerId>,
        applied: Arc<dyn Fn() -> Zxid + Send + Sync>,
    ) {
        self.stop();
        if role != Role::Observer {
            return;
        }
        let candidates: Vec<_> = self
            .masters
            .iter()
            .filter(|(id, _)| Some(*id) != leader)
            .copied()
            .collect();
        if candidates.is_empty() {
            return;
        }
        let tx = self.tx.clone();
        let generation = self.generation;
        let me = ObserverId(self.me.0);
        self.task = Some(tokio::spawn(async move {
            follow(me, candidates, applied, generation, tx).await
        }));
    }

    /// An event from a task: `Some` with the core's input if it is the
    /// current task's.
    pub(crate) fn on_event(&mut self, generation: u64, event: RelayEvent) -> Option<Input> {
        if generation != self.generation {
            return None;
        }
        Some(match event {
            RelayEvent::Attached(id) => {
                self.following = Some(id);
                Input::RelayAttached
            }
            RelayEvent::Batch { prev, entries } => Input::Relayed { prev, entries },
            RelayEvent::Ended(why) => {
                tracing::info!(why, "observer relay ended; syncing again");
                self.stop();
                Input::RelayEnded
            }
        })
    }

    /// Ends the current task (if any); its events still queued are dropped.
    pub(crate) fn stop(&mut self) {
        self.generation += 1;
        self.following = None;
        if let Some(t) = self.task.take() {
            t.abort();
        }
    }
}

impl Drop for RelayFollow {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Candidates in a random order (ZooKeeper picks a random voter's port).
fn shuffled(mut c: Vec<(PeerId, SocketAddr)>) -> Vec<(PeerId, SocketAddr)> {
    use std::hash::{BuildHasher, Hasher};
    for i in (1..c.len()).rev() {
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_usize(i);
        c.swap(i, (h.finish() % (i as u64 + 1)) as usize);
    }
    c
}

/// Attempts to follow one master from `from`, a few times a short while
/// apart.
async fn attach(me: ObserverId, id: PeerId, addr: SocketAddr, from: Zxid) -> Option<RelayClient> {
    for attempt in 0..RELAY_ATTEMPTS {
        if attempt > 0 {
            tokio::time::sleep(RELAY_ATTEMPT_INTERVAL).await;
        }
        match tokio::time::timeout(RELAY_CONNECT_MAX, RelayClient::follow(addr, me, from)).await {
            Ok(Ok(c)) => return Some(c),
            Ok(Err(e)) => {
                tracing::debug!(master = id.0, error = %e, "observer master refused")
            }
            Err(_) => tracing::debug!(master = id.0, "observer master did not answer"),
        }
    }
    None
}

/// The task: try the candidates in a random order until one attaches, then
/// relay its stream until it ends (once: the core then syncs again and a new
/// task follows). None attaches: wait and try again.
async fn follow(
    me: ObserverId,
    candidates: Vec<(PeerId, SocketAddr)>,
    applied: Arc<dyn Fn() -> Zxid + Send + Sync>,
    generation: u64,
    tx: mpsc::UnboundedSender<(u64, RelayEvent)>,
) {
    loop {
        for (id, addr) in shuffled(candidates.clone()) {
            // Sampled once per master: a follower a few commits behind this
            // observer (AheadOfSource) reaches it in a moment.
            let from = applied();
            let Some(mut client) = attach(me, id, addr, from).await else {
                continue;
            };
            tracing::info!(master = id.0, from = %from, "following an observer master");
            if tx.send((generation, RelayEvent::Attached(id))).is_err() {
                return;
            }
            loop {
                let prev = client.last_applied();
                let event = match client.next().await {
                    Ok(txns) => RelayEvent::Batch {
                        prev,
                        entries: txns
                            .into_iter()
                            .map(|t| Entry {
                                zxid: t.zxid,
                                payload: t.payload,
                            })
                            .collect(),
                    },
                    Err(e) => RelayEvent::Ended(format!("observer master {}: {e}", id.0)),
                };
                let ended = matches!(event, RelayEvent::Ended(_));
                if tx.send((generation, event)).is_err() || ended {
                    return;
                }
            }
        }
        tokio::time::sleep(RELAY_RETRY_INTERVAL).await;
    }
}

/// A member's observer master on its `observerMasterPort`: an
/// [`ObserverMaster`] over the driver's hub, served over gRPC.
pub(crate) struct RelayServer {
    /// The master (for the observer list).
    master: Arc<ObserverMaster>,
    /// The gRPC server task.
    task: JoinHandle<()>,
}

impl RelayServer {
    /// Serves `hub`'s relay on `listener`.
    pub(crate) fn spawn(hub: Arc<RelayHub>, listener: tokio::net::TcpListener) -> RelayServer {
        let master = Arc::new(ObserverMaster::spawn(hub, FanoutConfig::default()));
        let service = RelayService::new(master.clone());
        let incoming = tonic::transport::server::TcpIncoming::from(listener);
        let task = tokio::spawn(async move {
            if let Err(e) = tonic::transport::Server::builder()
                .add_service(service)
                .serve_with_incoming(incoming)
                .await
            {
                tracing::warn!(error = %e, "the observer master port stopped");
            }
        });
        RelayServer { master, task }
    }

    /// The observers attached now, with the transactions queued for each.
    pub(crate) fn observers(&self) -> Vec<(PeerId, usize)> {
        self.master
            .observers()
            .into_iter()
            .map(|(id, queued)| (PeerId(id.0), queued))
            .collect()
    }
}

impl Drop for RelayServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

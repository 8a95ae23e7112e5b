//! The tokio shell around the server core: one task that reads the clock,
//! takes the commit stream, the connections' messages, the outcomes of
//! proposals and syncs, the periodic timer and the snapshot writer's room,
//! hands each to [`Core::step`] as an input, and carries out the effects the
//! core asks for against the [`Replicator`]. Everything the core decides is
//! in `crate::core`; what is here is IO: clocks, futures, files, threads.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use futures::stream::FuturesUnordered;
use futures::{Future, StreamExt};
use rand::rngs::StdRng;
use rand::SeedableRng;
use rzk_quorum::{
    CommitStream, Committed, PeerId, Proposal, ReplicateError, Replicator, SnapshotSource,
    SyncBarrier,
};
use rzk_zxid::Zxid;
use tokio::sync::mpsc;

use crate::core::snapshot::{snapshot_room, SnapshotStream};
use crate::core::{
    Core, CoreConfig, CoreError, CoreMsg, Due, Effect, Input, RequestId, SyncToken, Time,
};
use crate::read_ahead::ReadAhead;
use crate::tree::DataTree;
use crate::watch::ConnId;

/// The target of the shell's log lines about the core's work (snapshots
/// saved, no leader yet): the core's, as they were before the shell was split
/// from it, so that filters and scripts that look for them keep working.
const LOG_TARGET: &str = "rzk_server::core";

/// The most messages from connections the shell hands the core in one turn
/// of its loop: commits, which answer writes, wait at most this many requests.
const MSGS_PER_TURN_MAX: usize = 32;

/// The core's clock: monotonic time since the shell started, and wall time.
struct Clock {
    origin: Instant,
}

impl Clock {
    fn now(&self) -> Time {
        Time {
            mono_us: self.origin.elapsed().as_micros() as u64,
            wall_ms: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as i64),
        }
    }
}

/// A leader's proposal, tagged with the request it carries.
struct TaggedProposal {
    origin: PeerId,
    request: RequestId,
    proposal: Proposal,
}

impl Future for TaggedProposal {
    type Output = (PeerId, RequestId, Result<Zxid, ReplicateError>);

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let (origin, request) = (self.origin, self.request);
        Pin::new(&mut self.proposal)
            .poll(cx)
            .map(|r| (origin, request, r))
    }
}

/// A sync barrier, tagged with the connection and token it answers.
struct TaggedSync {
    conn: ConnId,
    token: SyncToken,
    barrier: SyncBarrier,
}

impl Future for TaggedSync {
    type Output = (ConnId, SyncToken, Result<Zxid, ReplicateError>);

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let (conn, token) = (self.conn, self.token);
        Pin::new(&mut self.barrier)
            .poll(cx)
            .map(|r| (conn, token, r))
    }
}

/// The shell's state: the core, and the IO it waits on for it.
pub(crate) struct Shell {
    core: Core,
    clock: Clock,
    cfg: CoreConfig,
    replicator: Arc<dyn Replicator>,
    commits: CommitStream,
    /// The tree loaded from the newest snapshot while the replicator opened,
    /// for the first snapshot the core is told to load (crate::preload).
    preloaded: Option<crate::preload::Preloaded>,
    /// The leader's proposals not yet resolved: watched only for failures, since
    /// the commit stream delivers the successes.
    proposals: FuturesUnordered<TaggedProposal>,
    syncs: FuturesUnordered<TaggedSync>,
    snapshot_saves: FuturesUnordered<Proposal>,
    /// The effects of the last step, carried out (a buffer kept between steps).
    effects: Vec<Effect>,
}

impl Shell {
    /// Takes the commit stream. The replay of snapshot and log, and every later
    /// role change, arrive on it; clients are served from the first serving role.
    pub(crate) fn new(
        cfg: CoreConfig,
        replicator: Arc<dyn Replicator>,
        preloaded: Option<crate::preload::Preloaded>,
    ) -> Result<Shell, CoreError> {
        let commits = replicator
            .take_commits()
            .ok_or_else(|| CoreError::Commits("already taken".into()))?;
        let clock = Clock {
            origin: Instant::now(),
        };
        let core = Core::new(cfg.clone(), StdRng::from_os_rng(), clock.now());
        Ok(Shell {
            core,
            clock,
            cfg,
            replicator,
            commits,
            preloaded,
            proposals: FuturesUnordered::new(),
            syncs: FuturesUnordered::new(),
            snapshot_saves: FuturesUnordered::new(),
            effects: Vec::new(),
        })
    }

    /// The main loop: runs until shutdown or a fatal error.
    pub(crate) async fn run(mut self, mut rx: mpsc::Receiver<CoreMsg>) -> Result<(), CoreError> {
        let server = &self.cfg.server;
        let tick = Duration::from_millis(u64::from(server.tick_time_ms).max(1));
        let reap_every = Duration::from_millis(server.container_check_interval_ms.max(1));
        let start = tokio::time::Instant::now();
        // Expiry every tick and touches every half tick from the start (members
        // report their sessions' activity to the leader every half tick, as
        // ZooKeeper's learners do in their pings); the reaper after a period.
        let mut periodic = Periodic::new(
            [tick, (tick / 2).max(Duration::from_millis(1)), reap_every],
            [start, start, start + reap_every],
        );
        let mut rx_open = true;
        loop {
            if self.core.finished() {
                break;
            }
            tokio::select! {
                biased;
                item = self.commits.next() => match item {
                    Some(item) => self.on_committed(item)?,
                    None => return Err(CoreError::Commits("the replicator stopped".into())),
                },
                Some((origin, request, result)) = self.proposals.next(), if !self.proposals.is_empty() => {
                    if let Err(error) = result {
                        self.step(Input::ProposalFailed { origin, request, error })?;
                    }
                }
                Some((conn, token, result)) = self.syncs.next(), if !self.syncs.is_empty() => {
                    self.step(Input::SyncDone { conn, token, result })?;
                }
                () = periodic.timer.as_mut() => {
                    let [expiry, touches, reap] = periodic.take_due(tokio::time::Instant::now());
                    self.step(Input::Tick(Due { expiry, touches, reap }))?;
                    if expiry {
                        self.report_not_serving();
                    }
                }
                Some(saved) = self.snapshot_saves.next(), if !self.snapshot_saves.is_empty() => {
                    on_snapshot_saved(saved)?;
                }
                msg = rx.recv(), if rx_open => match msg {
                    Some(msg) => {
                        self.on_msg(msg)?;
                        self.on_queued_msgs(&mut rx)?;
                    }
                    None => { rx_open = false; self.step(Input::Shutdown)?; }
                },
                // Idle: a step of the snapshot in progress, once its writer has room.
                _ = snapshot_room(self.core.snapshot_out()), if self.core.snapshot_in_progress() => {
                    self.core.snapshot_idle_step();
                }
            }
        }
        self.core.close_connections();
        // A snapshot still being serialised is fed only by this loop's steps:
        // waiting for its save would wait forever (a graceful stop hung so, seen
        // in CI). It is abandoned (its writer deletes the partial file); the log
        // holds everything it would have.
        if self.core.abandon_snapshot() {
            tracing::info!("shutting down: the snapshot in progress is abandoned");
        }
        // Let snapshot saves already handed over finish.
        while let Some(saved) = self.snapshot_saves.next().await {
            match saved {
                Ok(_) | Err(ReplicateError::Shutdown) => {}
                Err(e) => tracing::error!(error = %e, "saving a snapshot failed"),
            }
        }
        Ok(())
    }

    /// One input to the core at the current time, then its effects.
    fn step(&mut self, input: Input) -> Result<(), CoreError> {
        let now = self.clock.now();
        self.core.step(now, input)?;
        self.carry_out()
    }

    /// Carries out what the core asked for, in order; outcomes known at once
    /// (a forward that cannot be sent) go back to the core as inputs.
    fn carry_out(&mut self) -> Result<(), CoreError> {
        loop {
            self.core.take_effects(&mut self.effects);
            if self.effects.is_empty() {
                return Ok(());
            }
            let mut effects = std::mem::take(&mut self.effects);
            for effect in effects.drain(..) {
                match effect {
                    Effect::Propose {
                        origin,
                        request,
                        txn,
                    } => self.proposals.push(TaggedProposal {
                        origin,
                        request,
                        proposal: self.replicator.propose(txn),
                    }),
                    Effect::Forward { conn, msg } => {
                        if let Err(e) = self.replicator.forward(msg) {
                            tracing::debug!(error = %e, "cannot reach the leader");
                            if let Some(conn) = conn {
                                let now = self.clock.now();
                                self.core.step(now, Input::ForwardFailed { conn })?;
                            }
                        }
                    }
                    Effect::Sync { conn, token } => self.syncs.push(TaggedSync {
                        conn,
                        token,
                        barrier: self.replicator.sync(),
                    }),
                    Effect::BeginSnapshot { zxid } => {
                        let writer = self.replicator.snapshot_writer(zxid);
                        let (stream, saved) = SnapshotStream::start(writer);
                        self.snapshot_saves.push(saved);
                        self.core.snapshot_stream(stream);
                    }
                }
            }
            // Keep the (now empty) buffer for the next step.
            self.effects = effects;
        }
    }

    fn on_msg(&mut self, msg: CoreMsg) -> Result<(), CoreError> {
        let input = match msg {
            CoreMsg::Input(input) => input,
            CoreMsg::FourLetter { word, reply } => {
                let q = self.replicator.stats();
                let _ = reply.send(self.core.four_letter(word, &q, self.clock.now()));
                return Ok(());
            }
            CoreMsg::Stats { details, reply } => {
                let q = self.replicator.stats();
                let _ = reply.send(self.core.stats(details, &q, self.clock.now()));
                return Ok(());
            }
        };
        self.step(input)
    }

    /// Handles up to [`MSGS_PER_TURN_MAX`] more messages that wait in the
    /// queue, without going round the select loop for each: a turn of the
    /// loop polls the commit stream and three timers first, a tenth of the
    /// instructions of a get (callgrind). Stops once the core finished, so
    /// that the loop sees it before the next message.
    fn on_queued_msgs(&mut self, rx: &mut mpsc::Receiver<CoreMsg>) -> Result<(), CoreError> {
        for _ in 1..MSGS_PER_TURN_MAX {
            if self.core.finished() {
                return Ok(());
            }
            match rx.try_recv() {
                Ok(msg) => self.on_msg(msg)?,
                // Empty; or closed, which the next `recv` reports.
                Err(_) => return Ok(()),
            }
        }
        Ok(())
    }

    /// An item of the commit stream, as an input (a snapshot is loaded here:
    /// the core reads no files).
    fn on_committed(&mut self, item: Committed) -> Result<(), CoreError> {
        let input = match item {
            Committed::Snapshot { zxid, source } => {
                let (tree, sessions, zxid) = self.load(zxid, &source)?;
                Input::Loaded {
                    tree: Box::new(tree),
                    sessions,
                    zxid,
                }
            }
            Committed::Txn { zxid, payload } => Input::Txn { zxid, payload },
            Committed::Role {
                role,
                leader,
                epoch,
                ..
            } => Input::Role {
                role,
                leader,
                epoch,
            },
            Committed::Forwarded { from, payload } => Input::Forwarded { from, payload },
        };
        self.step(input)
    }

    /// Loads a committed snapshot: the preloaded tree if it is this one, else
    /// from its source.
    fn load(
        &mut self,
        zxid: Zxid,
        source: &SnapshotSource,
    ) -> Result<crate::preload::Loaded, CoreError> {
        // Only the first snapshot may have been preloaded.
        let preloaded = self.preloaded.take();
        // Zxid 0 with no bytes is the empty state of a new data directory.
        if zxid == Zxid::ZERO && source.is_empty() {
            return Ok((DataTree::new(), Vec::new(), Zxid::ZERO));
        }
        if let Some(loaded) = preloaded.and_then(|p| p.take(zxid, source.len_bytes())) {
            // The replicator chose this snapshot with the verdict of the very
            // pass that loaded it: its checksum matched.
            return loaded.map_err(|e| CoreError::Corrupt(format!("snapshot at {zxid}: {e}")));
        }
        // The tree loads while the source streams the file (a bounded
        // window, never the whole state in one buffer); the loader reads to
        // the end, where the source checks the file's checksum, and a failure
        // changes nothing. The file is read and its checksum computed on
        // another thread while this one decodes (crate::read_ahead).
        let started = Instant::now();
        let mut reader = source
            .reader()
            .and_then(ReadAhead::new)
            .map_err(|e| CoreError::Corrupt(format!("snapshot at {zxid}: {e}")))?;
        let loaded = DataTree::load_snapshot_from(&mut reader)
            .map_err(|e| CoreError::Corrupt(format!("snapshot at {zxid}: {e}")))?;
        tracing::info!(
            %zxid,
            bytes = source.len_bytes(),
            ms = started.elapsed().as_millis() as u64,
            "snapshot read, checked and loaded"
        );
        Ok(loaded)
    }

    /// While it cannot serve, a member keeps trying and says so every few
    /// seconds.
    fn report_not_serving(&mut self) {
        let Some((for_ms, held_connects)) = self.core.not_serving_report(self.clock.now()) else {
            return;
        };
        let q = self.replicator.stats();
        tracing::warn!(
            target: LOG_TARGET,
            for_secs = for_ms / 1000,
            voters = q.voters,
            elections = q.elections,
            last_zxid = %q.last_durable,
            held_connects,
            "no leader yet: looking for a quorum of the voters (still trying)"
        );
    }
}

fn on_snapshot_saved(saved: Result<Zxid, ReplicateError>) -> Result<(), CoreError> {
    match saved {
        Ok(z) => {
            // Logged as the core's, as before the shell was split from it:
            // operators' scripts look for this line by its target.
            tracing::info!(target: LOG_TARGET, zxid = %z, "snapshot saved");
            // The snapshot's freed output chunks left holes among the znodes:
            // give their pages back.
            let started = Instant::now();
            let released = crate::malloc::trim();
            tracing::debug!(
                released,
                elapsed_us = started.elapsed().as_micros() as u64,
                "malloc trimmed after a snapshot"
            );
            Ok(())
        }
        Err(ReplicateError::Storage(e)) => {
            tracing::error!(target: LOG_TARGET, error = %e, "saving a snapshot failed; the server stops");
            Err(ReplicateError::Storage(e).into())
        }
        Err(e) => {
            tracing::warn!(target: LOG_TARGET, error = %e, "saving a snapshot failed");
            Ok(())
        }
    }
}

/// The core's periodic work (session expiry, touches, the container/TTL
/// reaper) on one timer. Three `Interval`s were polled, and their wakers
/// registered, at every turn of the loop, two turns per request (one that
/// finds it, one that finds nothing and parks): 885 of a get's instructions
/// (callgrind). One timer, set to the earliest of the three, is polled once
/// per turn.
struct Periodic {
    /// Each job's period.
    every: [Duration; 3],
    /// When each job is next due.
    due: [tokio::time::Instant; 3],
    /// Fires at the earliest of `due`.
    timer: Pin<Box<tokio::time::Sleep>>,
}

impl Periodic {
    fn new(every: [Duration; 3], due: [tokio::time::Instant; 3]) -> Periodic {
        let first = due.iter().copied().min().expect("three jobs");
        Periodic {
            every,
            due,
            timer: Box::pin(tokio::time::sleep_until(first)),
        }
    }

    /// Which jobs are due at `now`. Each due job is next due one period
    /// after it was due, or one period from now if it ran late (as an
    /// `Interval` with `MissedTickBehavior::Delay`); the timer is set to
    /// the earliest.
    fn take_due(&mut self, now: tokio::time::Instant) -> [bool; 3] {
        let mut ran = [false; 3];
        for (i, ran) in ran.iter_mut().enumerate() {
            if self.due[i] <= now {
                *ran = true;
                let next = self.due[i] + self.every[i];
                self.due[i] = if next > now {
                    next
                } else {
                    now + self.every[i]
                };
            }
        }
        let first = self.due.iter().copied().min().expect("three jobs");
        self.timer.as_mut().reset(first);
        ran
    }
}

#[cfg(test)]
mod tests {
    use super::Periodic;
    use std::time::Duration;

    /// The one timer of the core's periodic work runs each job on its own
    /// period and, late, one period from now (`MissedTickBehavior::Delay`).
    #[tokio::test]
    async fn periodic_work_runs_each_job_on_its_own_period() {
        let t0 = tokio::time::Instant::now();
        let ms = Duration::from_millis;
        let mut p = Periodic::new([ms(10), ms(5), ms(30)], [t0, t0, t0 + ms(30)]);
        assert_eq!(
            p.take_due(t0),
            [true, true, false],
            "expiry and touches at once"
        );
        assert_eq!(p.take_due(t0 + ms(4)), [false, false, false]);
        assert_eq!(
            p.timer.deadline(),
            t0 + ms(5),
            "the timer is at the earliest"
        );
        assert_eq!(p.take_due(t0 + ms(5)), [false, true, false]);
        assert_eq!(p.take_due(t0 + ms(10)), [true, true, false]);
        // Late by more than a period: next due one period from now.
        assert_eq!(p.take_due(t0 + ms(31)), [true, true, true]);
        assert_eq!(p.due, [t0 + ms(41), t0 + ms(36), t0 + ms(60)]);
        assert_eq!(p.timer.deadline(), t0 + ms(36));
    }
}

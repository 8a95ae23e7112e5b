//! The quorum of one: standalone mode's [`Replicator`] on `rzk-wal`.
//!
//! Standalone is an ensemble of one, so "committed" means "durable in the local
//! log": a proposal gets the next zxid, is appended (group commit shares one
//! fdatasync among every append in flight) and is delivered on the commit stream
//! once durable, in zxid order. At start the stream replays the newest valid
//! snapshot and the log after it, then says [`Committed::UpToDate`]: in-memory state
//! is always rebuilt from disk (I2), by the same code path that applies new
//! transactions.
//!
//! Epochs: every start is an "election" this peer wins alone, so it takes a new
//! epoch (one above everything it has accepted or logged) and persists it before
//! the first transaction of that epoch. When the counter reaches its limit, the
//! transaction at the limit is the epoch's *rollover proposal*: once it is durable
//! (committed, for a quorum of one) the next epoch is persisted, and only then is
//! the first transaction of the next epoch written (I3). No election, no wrap.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use bytes::Bytes;
use rzk_wal::{Append, Wal, WalError, WalOptions};
use rzk_zxid::{CounterLimit, Epoch, Next, Zxid};
use tokio::sync::{mpsc, oneshot, Notify};

use crate::replicator::{
    CommitStream, Committed, PeerId, Proposal, ReplicateError, Replicator, Role, SyncBarrier,
};

/// How a [`QuorumOfOne`] is opened.
#[derive(Debug, Clone)]
pub struct StandaloneOptions {
    /// The durable log's options (fsync, segment size, retention).
    pub wal: WalOptions,
    /// The highest counter of an epoch; lower it in tests to exercise rollover.
    pub counter_limit: CounterLimit,
    /// This server's id (1 in standalone, as ZooKeeper uses).
    pub id: PeerId,
    /// Committed items buffered between the log and the state machine. When the
    /// state machine lags, delivery waits; nothing is dropped.
    pub commit_buffer_max: usize,
    /// Proposals accepted but not yet committed. Beyond it `propose` fails with
    /// [`ReplicateError::Overloaded`]; the server keeps below it with its own
    /// outstanding-request limits.
    pub proposals_in_flight_max: usize,
}

impl Default for StandaloneOptions {
    fn default() -> Self {
        StandaloneOptions {
            wal: WalOptions::default(),
            counter_limit: CounterLimit::DEFAULT,
            id: PeerId(1),
            commit_buffer_max: 4096,
            proposals_in_flight_max: 100_000,
        }
    }
}

/// Why a [`QuorumOfOne`] could not open.
#[derive(Debug, thiserror::Error)]
pub enum StandaloneError {
    /// The durable log could not be opened or recovered.
    #[error("opening the log in {dir}: {source}")]
    Wal {
        /// The data directory.
        dir: PathBuf,
        /// What the log reported.
        source: WalError,
    },
    /// Every epoch number has been used; the history cannot continue.
    #[error("epoch space exhausted after epoch {0}")]
    EpochsExhausted(Epoch),
}

/// The standalone [`Replicator`]: a quorum of one on `rzk-wal`.
pub struct QuorumOfOne {
    id: PeerId,
    /// Proposals and sync barriers, in call order; the order is the zxid order.
    commands: mpsc::UnboundedSender<Command>,
    /// Proposals accepted and not yet resolved, against `proposals_in_flight_max`.
    in_flight: Arc<AtomicUsize>,
    proposals_in_flight_max: usize,
    /// The largest proposal the log accepts.
    record_bytes_max: usize,
    /// The commit stream, until the state machine takes it.
    commits: Mutex<Option<CommitStream>>,
    /// The commit stream's sender, for forwarded messages that loop back.
    forwards: mpsc::Sender<Committed>,
    epoch: Epoch,
    wal: Arc<Wal>,
}

impl std::fmt::Debug for QuorumOfOne {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QuorumOfOne").field("id", &self.id).finish()
    }
}

enum Command {
    Propose {
        payload: Bytes,
        reply: oneshot::Sender<Result<Zxid, ReplicateError>>,
    },
    Sync {
        reply: oneshot::Sender<Result<Zxid, ReplicateError>>,
    },
    Shutdown {
        done: oneshot::Sender<()>,
    },
}

/// What the sequencer hands the committer, in zxid order.
enum Entry {
    Txn {
        zxid: Zxid,
        payload: Bytes,
        durable: Append,
        reply: oneshot::Sender<Result<Zxid, ReplicateError>>,
    },
    Sync {
        reply: oneshot::Sender<Result<Zxid, ReplicateError>>,
    },
    Shutdown {
        done: oneshot::Sender<()>,
    },
}

impl QuorumOfOne {
    /// Opens the log under `dir`, takes a new epoch, and starts replaying snapshot
    /// and log into the commit stream. Must run inside a tokio runtime.
    pub async fn open(
        dir: impl AsRef<Path>,
        options: StandaloneOptions,
    ) -> Result<Arc<QuorumOfOne>, StandaloneError> {
        let dir = dir.as_ref().to_owned();
        let wal_options = options.wal.clone();
        let open_dir = dir.clone();
        let (wal, recovery, epoch) = tokio::task::spawn_blocking(move || {
            let wal_err = |source| StandaloneError::Wal {
                dir: open_dir.clone(),
                source,
            };
            let (wal, recovery) = Wal::open(&open_dir, wal_options).map_err(wal_err)?;
            if let Some(marker) = recovery.sync_in_progress {
                // This directory was a learner's whose sync did not finish. A quorum
                // of one trusts only its durable log, which open has made
                // consistent; memory is rebuilt from it below (I2).
                tracing::warn!(?marker, "clearing an interrupted learner sync marker");
                wal.end_sync(None).map_err(wal_err)?;
            }
            let last = wal.last_durable_zxid();
            let highest = recovery.accepted_epoch.max(last.epoch());
            let epoch = highest
                .next()
                .ok_or(StandaloneError::EpochsExhausted(highest))?;
            // The new epoch is fenced on disk before any of its transactions exists.
            wal.set_epochs(epoch, epoch).map_err(wal_err)?;
            Ok::<_, StandaloneError>((wal, recovery, epoch))
        })
        .await
        .expect("the open task does not panic")?;
        let wal = Arc::new(wal);
        let last = wal.last_durable_zxid();
        tracing::info!(
            dir = %dir.display(),
            last_durable = %last,
            %epoch,
            snapshots = recovery.snapshots.len(),
            "standalone log open"
        );

        let (commit_tx, commit_rx) = mpsc::channel(options.commit_buffer_max.max(1));
        let (command_tx, command_rx) = mpsc::unbounded_channel();
        let (entry_tx, entry_rx) = mpsc::unbounded_channel();
        let in_flight = Arc::new(AtomicUsize::new(0));
        let progress = Arc::new(Notify::new());

        let sequencer = Sequencer {
            wal: wal.clone(),
            limit: options.counter_limit,
            last,
            epoch,
            progress: progress.clone(),
        };
        tokio::spawn(sequencer.run(command_rx, entry_tx));
        let committer = Committer {
            wal: wal.clone(),
            id: options.id,
            epoch,
            commits: commit_tx.clone(),
            in_flight: in_flight.clone(),
            progress,
            failed: None,
        };
        tokio::spawn(committer.run(entry_rx));

        Ok(Arc::new(QuorumOfOne {
            id: options.id,
            commands: command_tx,
            in_flight,
            proposals_in_flight_max: options.proposals_in_flight_max,
            record_bytes_max: options.wal.log.record_bytes_max,
            commits: Mutex::new(Some(CommitStream::new(commit_rx))),
            forwards: commit_tx,
            epoch,
            wal,
        }))
    }

    async fn stop(&self) {
        let (done, rx) = oneshot::channel();
        if self.commands.send(Command::Shutdown { done }).is_ok() {
            let _ = rx.await;
        }
    }

    /// The last zxid durable in the local log (I1).
    pub fn last_durable_zxid(&self) -> Zxid {
        self.wal.last_durable_zxid()
    }

    /// The persisted (acceptedEpoch, currentEpoch).
    pub fn epochs(&self) -> Result<(Epoch, Epoch), ReplicateError> {
        let storage = |e: WalError| ReplicateError::Storage(e.to_string());
        Ok((
            self.wal.accepted_epoch().map_err(storage)?,
            self.wal.current_epoch().map_err(storage)?,
        ))
    }
}

impl Replicator for QuorumOfOne {
    fn propose(&self, txn: Bytes) -> Proposal {
        // The log frames each record with a header; leave room for it.
        let limit_bytes = self.record_bytes_max.saturating_sub(64);
        if txn.len() > limit_bytes {
            return Proposal::failed(ReplicateError::TooLarge {
                size_bytes: txn.len(),
                limit_bytes,
            });
        }
        if self.in_flight.fetch_add(1, Ordering::AcqRel) >= self.proposals_in_flight_max {
            self.in_flight.fetch_sub(1, Ordering::AcqRel);
            return Proposal::failed(ReplicateError::Overloaded {
                in_flight_max: self.proposals_in_flight_max,
            });
        }
        let (reply, rx) = oneshot::channel();
        let command = Command::Propose {
            payload: txn,
            reply,
        };
        if self.commands.send(command).is_err() {
            self.in_flight.fetch_sub(1, Ordering::AcqRel);
            return Proposal::failed(ReplicateError::Shutdown);
        }
        Proposal::new(rx)
    }

    fn take_commits(&self) -> Option<CommitStream> {
        self.commits
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
    }

    fn sync(&self) -> SyncBarrier {
        let (reply, rx) = oneshot::channel();
        if self.commands.send(Command::Sync { reply }).is_err() {
            return Proposal::failed(ReplicateError::Shutdown);
        }
        Proposal::new(rx)
    }

    fn save_snapshot(&self, zxid: Zxid, data: Bytes) -> Proposal {
        let (reply, rx) = oneshot::channel();
        let wal = self.wal.clone();
        tokio::task::spawn_blocking(move || {
            let result = wal
                .save_snapshot(zxid, &mut data.as_ref())
                .and_then(|_| wal.purge())
                .map(|report| {
                    tracing::info!(%zxid, ?report, "snapshot saved, old history purged");
                    zxid
                })
                .map_err(|e| ReplicateError::Storage(e.to_string()));
            // The handle goes before the reply: whoever waits on the reply may shut
            // down and reopen the log next.
            drop(wal);
            let _ = reply.send(result);
        });
        Proposal::new(rx)
    }

    fn role(&self) -> Role {
        Role::Leader
    }

    fn leader(&self) -> Option<PeerId> {
        Some(self.id)
    }

    fn forward(&self, msg: Bytes) -> Result<(), ReplicateError> {
        self.forwards
            .try_send(Committed::Forwarded {
                from: self.id,
                payload: msg,
            })
            .map_err(|_| ReplicateError::Overloaded {
                in_flight_max: self.forwards.max_capacity(),
            })
    }

    fn stats(&self) -> crate::QuorumStats {
        let last = self.wal.last_durable_zxid();
        crate::QuorumStats {
            role: Role::Leader,
            leader: Some(self.id),
            epoch: self.epoch,
            last_durable: last,
            committed: last,
            applied: last,
            learners: Vec::new(),
            pending_syncs: 0,
            syncs: [0; 3],
            elections: 0,
            voters: 1,
        }
    }

    /// Stops taking proposals, lets every proposal already taken commit (or
    /// fail), and stops the tasks. The log closes when the last handle is dropped.
    fn shutdown(&self) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send + '_>> {
        Box::pin(self.stop())
    }

    fn id(&self) -> PeerId {
        self.id
    }
}

/// Assigns zxids in command order and appends to the log.
struct Sequencer {
    wal: Arc<Wal>,
    limit: CounterLimit,
    /// The last zxid handed to the log.
    last: Zxid,
    /// The epoch this peer leads; persisted before any of its transactions.
    epoch: Epoch,
    /// Signalled by the committer after each commit, for waits on the log.
    progress: Arc<Notify>,
}

impl Sequencer {
    async fn run(
        mut self,
        mut commands: mpsc::UnboundedReceiver<Command>,
        entries: mpsc::UnboundedSender<Entry>,
    ) {
        while let Some(command) = commands.recv().await {
            let entry = match command {
                Command::Sync { reply } => Entry::Sync { reply },
                Command::Shutdown { done } => {
                    // Release this task's handle on the log before the committer
                    // reports the shutdown done, so the caller can reopen the log.
                    drop(self);
                    let _ = entries.send(Entry::Shutdown { done });
                    return;
                }
                Command::Propose { payload, reply } => match self.append(payload.clone()).await {
                    Ok((zxid, durable)) => Entry::Txn {
                        zxid,
                        payload,
                        durable,
                        reply,
                    },
                    Err(err) => {
                        tracing::error!(error = %err, "the log refused a proposal; stopping");
                        let _ = reply.send(Err(err));
                        // A storage error that could mean lost data stops the peer.
                        return;
                    }
                },
            };
            if entries.send(entry).is_err() {
                return;
            }
        }
    }

    /// The zxid for the next transaction: the next counter of the current epoch, or
    /// the first of a new epoch after a rollover.
    async fn next_zxid(&mut self) -> Result<Zxid, ReplicateError> {
        let first_of_epoch = Zxid::first_of(self.epoch);
        if self.last < first_of_epoch {
            return Ok(first_of_epoch);
        }
        match self.last.next_with(self.limit) {
            Next::Zxid(z) => Ok(z),
            Next::Rollover { exhausted } => self.roll_over(exhausted).await,
        }
    }

    /// I3: the last transaction of `exhausted` is its rollover proposal. Once it is
    /// durable (committed, in a quorum of one) the next epoch is persisted; only then
    /// may a transaction of the next epoch be written.
    async fn roll_over(&mut self, exhausted: Epoch) -> Result<Zxid, ReplicateError> {
        let next = exhausted.next().ok_or_else(|| {
            ReplicateError::Storage(format!("epoch space exhausted after epoch {exhausted}"))
        })?;
        let wal = self.wal.clone();
        let rollover = self.last;
        tokio::task::spawn_blocking(move || {
            let durable = wal.flush()?;
            assert!(
                durable >= rollover,
                "I3: the rollover proposal {rollover} must be durable before epoch {next} is fenced"
            );
            wal.set_epochs(next, next)
        })
        .await
        .expect("the rollover task does not panic")
        .map_err(|e| ReplicateError::Storage(e.to_string()))?;
        tracing::info!(%exhausted, %next, rollover = %rollover, "zxid counter rolled over to a new epoch");
        self.epoch = next;
        Ok(Zxid::first_of(next))
    }

    async fn append(&mut self, payload: Bytes) -> Result<(Zxid, Append), ReplicateError> {
        let zxid = self.next_zxid().await?;
        loop {
            match self.wal.append(zxid, payload.clone()) {
                Ok(durable) => {
                    self.last = zxid;
                    return Ok((zxid, durable));
                }
                // Too many bytes wait for the disk: wait for a commit, then retry.
                // The refused append had no effect, so the zxid is still free.
                Err(WalError::Overloaded { .. }) => self.progress.notified().await,
                Err(e) => return Err(ReplicateError::Storage(e.to_string())),
            }
        }
    }
}

/// Delivers durable transactions to the commit stream in zxid order and resolves
/// proposals and sync barriers.
struct Committer {
    wal: Arc<Wal>,
    id: PeerId,
    epoch: Epoch,
    commits: mpsc::Sender<Committed>,
    in_flight: Arc<AtomicUsize>,
    progress: Arc<Notify>,
    /// Set once the log has failed: everything after is refused.
    failed: Option<ReplicateError>,
}

impl Committer {
    async fn run(mut self, mut entries: mpsc::UnboundedReceiver<Entry>) {
        let mut last_committed = match self.replay().await {
            Ok(z) => z,
            Err(err) => {
                tracing::error!(error = %err, "replaying the log failed; stopping");
                self.failed = Some(err);
                Zxid::ZERO
            }
        };
        while let Some(entry) = entries.recv().await {
            match entry {
                Entry::Shutdown { done } => {
                    // Every entry before this one has been resolved; dropping self
                    // releases the log and ends the commit stream.
                    drop(self);
                    let _ = done.send(());
                    return;
                }
                Entry::Sync { reply } => {
                    let result = match &self.failed {
                        Some(err) => Err(err.clone()),
                        None => Ok(last_committed),
                    };
                    let _ = reply.send(result);
                }
                Entry::Txn {
                    zxid,
                    payload,
                    durable,
                    reply,
                } => {
                    let result = self.commit(zxid, payload, durable).await;
                    if result.is_ok() {
                        last_committed = zxid;
                    }
                    self.in_flight.fetch_sub(1, Ordering::AcqRel);
                    self.progress.notify_one();
                    let _ = reply.send(result);
                }
            }
        }
    }

    async fn commit(
        &mut self,
        zxid: Zxid,
        payload: Bytes,
        durable: Append,
    ) -> Result<Zxid, ReplicateError> {
        if let Some(err) = &self.failed {
            return Err(err.clone());
        }
        match durable.await {
            Ok(z) => debug_assert_eq!(z, zxid),
            Err(e) => {
                // I7 and the PostgreSQL fsync lesson: a failed fsync is never retried
                // into silence. The log has stopped; so does this replicator.
                let err = ReplicateError::Storage(e.to_string());
                tracing::error!(%zxid, error = %err, "the log failed; no more commits");
                self.failed = Some(err.clone());
                return Err(err);
            }
        }
        if self
            .commits
            .send(Committed::Txn { zxid, payload })
            .await
            .is_err()
        {
            return Err(ReplicateError::Shutdown);
        }
        Ok(zxid)
    }

    /// Streams the newest valid snapshot and the durable log after it into the
    /// commit stream, then [`Committed::UpToDate`]. Returns the last replayed zxid.
    async fn replay(&mut self) -> Result<Zxid, ReplicateError> {
        let wal = self.wal.clone();
        let commits = self.commits.clone();
        let replayed = tokio::task::spawn_blocking(move || -> Result<Zxid, ReplicateError> {
            let storage = |e: WalError| ReplicateError::Storage(e.to_string());
            let rebuild = wal.rebuild().map_err(storage)?;
            let mut last = Zxid::ZERO;
            let send = |item| {
                commits
                    .blocking_send(item)
                    .map_err(|_| ReplicateError::Shutdown)
            };
            if let Some(snapshot) = rebuild.snapshot {
                last = snapshot.zxid;
                send(Committed::Snapshot {
                    zxid: snapshot.zxid,
                    data: snapshot.data,
                })?;
            }
            for record in rebuild.records {
                let record = record.map_err(storage)?;
                assert!(
                    record.zxid.is_next(last) || last == Zxid::ZERO,
                    "the log delivered {} after {last}",
                    record.zxid
                );
                last = record.zxid;
                send(Committed::Txn {
                    zxid: record.zxid,
                    payload: record.payload,
                })?;
            }
            Ok(last)
        })
        .await
        .expect("the replay task does not panic")?;
        self.commits
            .send(Committed::Role {
                role: Role::Leader,
                leader: Some(self.id),
                epoch: self.epoch,
                zxid: replayed,
            })
            .await
            .map_err(|_| ReplicateError::Shutdown)?;
        tracing::info!(last = %replayed, "replay of snapshot and log complete");
        Ok(replayed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rzk_zxid::Counter;

    fn options() -> StandaloneOptions {
        let mut o = StandaloneOptions::default();
        // Small segments so tests do not preallocate 64 MiB files.
        o.wal.log.segment_bytes = 1 << 20;
        o
    }

    async fn drain_until_up_to_date(stream: &mut CommitStream) -> Vec<Committed> {
        let mut items = Vec::new();
        loop {
            let item = stream.next().await.expect("stream open");
            let done = matches!(item, Committed::Role { .. });
            items.push(item);
            if done {
                return items;
            }
        }
    }

    async fn next_txn(stream: &mut CommitStream) -> (Zxid, Bytes) {
        match stream.next().await.expect("stream open") {
            Committed::Txn { zxid, payload } => (zxid, payload),
            other => panic!("expected a txn, got {other:?}"),
        }
    }

    #[tokio::test]
    async fn proposals_commit_in_call_order_with_contiguous_zxids() {
        let dir = tempfile::tempdir().unwrap();
        let r = QuorumOfOne::open(dir.path(), options()).await.unwrap();
        let mut stream = r.take_commits().unwrap();
        assert!(r.take_commits().is_none(), "one consumer only");
        assert_eq!(
            drain_until_up_to_date(&mut stream).await,
            vec![Committed::Role {
                role: Role::Leader,
                leader: Some(PeerId(1)),
                epoch: Epoch(1),
                zxid: Zxid::ZERO
            }]
        );
        let proposals: Vec<_> = (0..200u32)
            .map(|i| r.propose(Bytes::from(i.to_be_bytes().to_vec())))
            .collect();
        let mut prev = Zxid::ZERO;
        for i in 0..200u32 {
            let (zxid, payload) = next_txn(&mut stream).await;
            assert!(zxid.is_next(prev), "{zxid} after {prev}");
            assert_eq!(payload.as_ref(), i.to_be_bytes());
            prev = zxid;
        }
        let mut expected = Zxid::first_of(Epoch(1));
        for p in proposals {
            assert_eq!(p.await.unwrap(), expected);
            expected = match expected.next() {
                Next::Zxid(z) => z,
                Next::Rollover { .. } => unreachable!(),
            };
        }
        assert_eq!(r.last_durable_zxid(), prev);
    }

    #[tokio::test]
    async fn restart_replays_the_log_then_starts_a_new_epoch() {
        let dir = tempfile::tempdir().unwrap();
        {
            let r = QuorumOfOne::open(dir.path(), options()).await.unwrap();
            for i in 0..5u8 {
                r.propose(Bytes::from(vec![i])).await.unwrap();
            }
            r.shutdown().await;
        }
        let r = QuorumOfOne::open(dir.path(), options()).await.unwrap();
        let mut stream = r.take_commits().unwrap();
        let items = drain_until_up_to_date(&mut stream).await;
        let last = Zxid::new(Epoch(1), Counter(5));
        assert_eq!(items.len(), 6);
        assert!(matches!(items[5], Committed::Role { zxid, .. } if zxid == last));
        for (i, item) in items[..5].iter().enumerate() {
            assert_eq!(
                item,
                &Committed::Txn {
                    zxid: Zxid::new(Epoch(1), Counter(i as u32 + 1)),
                    payload: Bytes::from(vec![i as u8]),
                }
            );
        }
        assert_eq!(r.epochs().unwrap(), (Epoch(2), Epoch(2)));
        let z = r
            .propose(Bytes::from_static(b"after restart"))
            .await
            .unwrap();
        assert_eq!(z, Zxid::first_of(Epoch(2)));
        assert!(z.is_next(last));
    }

    #[tokio::test]
    async fn snapshot_then_restart_replays_snapshot_and_the_txns_after_it() {
        let dir = tempfile::tempdir().unwrap();
        let snap_at;
        {
            let r = QuorumOfOne::open(dir.path(), options()).await.unwrap();
            for i in 0..3u8 {
                r.propose(Bytes::from(vec![i])).await.unwrap();
            }
            snap_at = r.last_durable_zxid();
            let saved = r
                .save_snapshot(snap_at, Bytes::from_static(b"state"))
                .await
                .unwrap();
            assert_eq!(saved, snap_at);
            r.propose(Bytes::from_static(b"after snapshot"))
                .await
                .unwrap();
            r.shutdown().await;
        }
        let r = QuorumOfOne::open(dir.path(), options()).await.unwrap();
        let mut stream = r.take_commits().unwrap();
        let items = drain_until_up_to_date(&mut stream).await;
        assert_eq!(
            items,
            vec![
                Committed::Snapshot {
                    zxid: snap_at,
                    data: Bytes::from_static(b"state")
                },
                Committed::Txn {
                    zxid: Zxid::new(Epoch(1), Counter(4)),
                    payload: Bytes::from_static(b"after snapshot")
                },
                Committed::Role {
                    role: Role::Leader,
                    leader: Some(PeerId(1)),
                    epoch: Epoch(2),
                    zxid: Zxid::new(Epoch(1), Counter(4))
                },
            ]
        );
    }

    #[tokio::test]
    async fn counter_limit_rolls_over_to_the_next_epoch_without_restart() {
        let dir = tempfile::tempdir().unwrap();
        let mut o = options();
        o.counter_limit = CounterLimit::new(3);
        let r = QuorumOfOne::open(dir.path(), o.clone()).await.unwrap();
        let mut zxids = Vec::new();
        for i in 0..8u8 {
            zxids.push(r.propose(Bytes::from(vec![i])).await.unwrap());
        }
        let expected: Vec<Zxid> = [
            (1, 1),
            (1, 2),
            (1, 3),
            (2, 1),
            (2, 2),
            (2, 3),
            (3, 1),
            (3, 2),
        ]
        .iter()
        .map(|&(e, c)| Zxid::new(Epoch(e), Counter(c)))
        .collect();
        assert_eq!(zxids, expected);
        assert_eq!(
            r.epochs().unwrap(),
            (Epoch(3), Epoch(3)),
            "each rollover fenced its epoch on disk"
        );
        r.shutdown().await;
        assert_eq!(
            r.propose(Bytes::from_static(b"late")).await,
            Err(ReplicateError::Shutdown)
        );
        drop(r);
        // The history survives a restart intact and contiguous.
        let r = QuorumOfOne::open(dir.path(), o).await.unwrap();
        let mut stream = r.take_commits().unwrap();
        let items = drain_until_up_to_date(&mut stream).await;
        let replayed: Vec<Zxid> = items
            .iter()
            .filter_map(|i| match i {
                Committed::Txn { zxid, .. } => Some(*zxid),
                _ => None,
            })
            .collect();
        assert_eq!(replayed, expected);
    }

    #[tokio::test]
    async fn sync_barrier_covers_every_earlier_proposal() {
        let dir = tempfile::tempdir().unwrap();
        let r = QuorumOfOne::open(dir.path(), options()).await.unwrap();
        let mut stream = r.take_commits().unwrap();
        drain_until_up_to_date(&mut stream).await;
        let writes: Vec<_> = (0..10u8).map(|i| r.propose(Bytes::from(vec![i]))).collect();
        let barrier = r.sync();
        let consumer = tokio::spawn(async move {
            for _ in 0..10 {
                next_txn(&mut stream).await;
            }
        });
        let at = barrier.await.unwrap();
        let mut last = Zxid::ZERO;
        for w in writes {
            last = w.await.unwrap();
        }
        assert_eq!(at, last, "the barrier is the last commit before the sync");
        consumer.await.unwrap();
    }

    #[tokio::test]
    async fn oversized_proposal_is_refused_and_nothing_is_written() {
        let dir = tempfile::tempdir().unwrap();
        let mut o = options();
        o.wal.log.record_bytes_max = 4096;
        let r = QuorumOfOne::open(dir.path(), o).await.unwrap();
        let err = r.propose(Bytes::from(vec![0u8; 8192])).await.unwrap_err();
        assert!(matches!(err, ReplicateError::TooLarge { .. }), "{err}");
        assert_eq!(r.last_durable_zxid(), Zxid::ZERO);
        let z = r.propose(Bytes::from_static(b"small")).await.unwrap();
        assert_eq!(z, Zxid::first_of(Epoch(1)));
    }

    #[tokio::test]
    async fn in_flight_limit_is_an_error_not_a_queue() {
        let dir = tempfile::tempdir().unwrap();
        let mut o = options();
        o.proposals_in_flight_max = 2;
        o.commit_buffer_max = 1;
        let r = QuorumOfOne::open(dir.path(), o).await.unwrap();
        // Nobody consumes the commit stream and it holds one item: the replay's
        // UpToDate fills it, so the first proposal's delivery waits and proposals stay
        // in flight.
        let first = r.propose(Bytes::from_static(b"a"));
        let second = r.propose(Bytes::from_static(b"b"));
        let third = r.propose(Bytes::from_static(b"c")).await.unwrap_err();
        assert_eq!(third, ReplicateError::Overloaded { in_flight_max: 2 });
        let mut stream = r.take_commits().unwrap();
        drain_until_up_to_date(&mut stream).await;
        next_txn(&mut stream).await;
        next_txn(&mut stream).await;
        first.await.unwrap();
        second.await.unwrap();
        r.propose(Bytes::from_static(b"d"));
        next_txn(&mut stream).await;
    }
}

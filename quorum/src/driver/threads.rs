//! The driver's blocking IO, each on a thread of its own so the peer's
//! task never waits on a disk: the storage thread (executes the core's
//! storage commands in order, with one fsync per batch: group commit), the
//! replay reader (reads the recovered log in batches while the core replays
//! the previous one), and the reader (serves the core's reads: SNAP chunks,
//! DIFF entries below the window). Each reports back on a channel the
//! driver's task selects on.

use std::sync::{mpsc as std_mpsc, Arc, Mutex};

use rzk_zxid::Zxid;
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::Reply;
use crate::core::{OpId, ReadCmd, ReadData, ReadId, StorageCmd};
use crate::message::Entry;
use crate::storage::{
    RecoveredLog, SavedSnapshot, Storage, StorageError, StorageReader, WrittenSnapshot,
};

/// What the driver's task gives the storage thread, in the core's order.
pub(super) enum StoreReq {
    Cmd(OpId, StorageCmd),
    /// With the log to keep for syncs in progress (`Peer::log_needed_after`).
    CommitSnapshot(WrittenSnapshot, Option<Zxid>, Reply),
}

/// What the storage thread and the reader report back to the driver's task.
pub(super) enum Done {
    Ops(OpId),
    /// Storage refused this command (a received snapshot that does not
    /// verify); every command before it is done.
    Refused(OpId, String),
    SnapshotCommitted(Zxid, SavedSnapshot, Reply),
    Read(ReadId, Result<ReadData, String>),
    Failed(StorageError),
}

/// Runs storage commands on their own thread: everything waiting is executed,
/// then one sync (group commit), then one completion for the batch.
pub(super) type StorageThread = (
    std_mpsc::Sender<StoreReq>,
    mpsc::UnboundedSender<Done>,
    mpsc::UnboundedReceiver<Done>,
    std::thread::JoinHandle<()>,
);

pub(super) fn spawn_storage<S: Storage>(
    mut storage: S,
    metrics: Arc<Mutex<crate::replicator::MetricsAcc>>,
) -> StorageThread {
    let (tx, rx) = std_mpsc::channel::<StoreReq>();
    let (done_tx, done_rx) = mpsc::unbounded_channel();
    let done = done_tx.clone();
    let thread = std::thread::Builder::new()
        .name("rzk-quorum-storage".into())
        .spawn(move || {
            let mut pending = 0u64;
            let flush = |storage: &mut S,
                         last: &mut Option<OpId>,
                         pending: &mut u64|
             -> Result<(), StorageError> {
                if let Some(op) = last.take() {
                    let started = Instant::now();
                    storage.sync()?;
                    let took = started.elapsed().as_millis() as u64;
                    let mut m = metrics.lock().expect("not poisoned");
                    m.fsync_time.add(took);
                    if *pending > 0 {
                        m.group_commit_size.add(std::mem::take(pending));
                    }
                    drop(m);
                    let _ = done.send(Done::Ops(op));
                }
                Ok(())
            };
            while let Ok(first) = rx.recv() {
                let mut batch = vec![first];
                while let Ok(more) = rx.try_recv() {
                    batch.push(more);
                }
                let mut last = None;
                let mut result = Ok(());
                for req in batch {
                    result = match req {
                        StoreReq::Cmd(op, cmd) => {
                            let txns = match &cmd {
                                StorageCmd::Append(entries) => entries.len() as u64,
                                StorageCmd::TruncateAfter(_)
                                | StorageCmd::ReceiveSnapshot(_)
                                | StorageCmd::SnapshotChunk { .. }
                                | StorageCmd::InstallSnapshot(_)
                                | StorageCmd::AbortSnapshot
                                | StorageCmd::SaveEpochs(_)
                                | StorageCmd::BeginSync { .. }
                                | StorageCmd::EndSync => 0,
                            };
                            match storage.execute(cmd) {
                                Ok(()) => {
                                    last = Some(op);
                                    pending += txns;
                                    Ok(())
                                }
                                // Bad input, nothing changed: the commands before
                                // it are made durable and reported first.
                                Err(StorageError::Refused(why)) => {
                                    flush(&mut storage, &mut last, &mut pending).map(|()| {
                                        let _ = done.send(Done::Refused(op, why));
                                    })
                                }
                                Err(e) => Err(e),
                            }
                        }
                        StoreReq::CommitSnapshot(written, hold, reply) => {
                            let zxid = written.zxid();
                            flush(&mut storage, &mut last, &mut pending)
                                .and_then(|()| storage.commit_snapshot(written, hold))
                                .map(|saved| {
                                    let _ = done.send(Done::SnapshotCommitted(zxid, saved, reply));
                                })
                        }
                    };
                    if result.is_err() {
                        break;
                    }
                }
                if let Err(e) = result.and_then(|()| flush(&mut storage, &mut last, &mut pending)) {
                    let _ = done.send(Done::Failed(e));
                    return;
                }
            }
        })
        .expect("spawn the storage thread");
    (tx, done_tx, done_rx, thread)
}

/// Reads the recovered log in batches on a thread of its own: the channel
/// holds one batch, so the thread reads the next while the core replays one.
/// The channel ends after the last batch, or after an error.
pub(super) fn spawn_log_reader(
    mut log: RecoveredLog,
    entries_max: usize,
    bytes_max: usize,
) -> mpsc::Receiver<Result<Vec<Entry>, StorageError>> {
    let (tx, rx) = mpsc::channel(1);
    std::thread::Builder::new()
        .name("rzk-quorum-replay".into())
        .spawn(move || loop {
            let batch = log.next_batch(entries_max, bytes_max);
            if matches!(&batch, Ok(b) if b.is_empty()) {
                return;
            }
            let failed = batch.is_err();
            if tx.blocking_send(batch).is_err() || failed {
                return;
            }
        })
        .expect("spawn the replay thread");
    rx
}

/// Serves the core's reads (SNAP chunks) on a thread of their own, off the
/// protocol loop and off the storage thread's group commits.
pub(super) fn spawn_reader(
    reader: Arc<dyn StorageReader>,
    done: mpsc::UnboundedSender<Done>,
) -> std_mpsc::Sender<(ReadId, ReadCmd)> {
    let (tx, rx) = std_mpsc::channel::<(ReadId, ReadCmd)>();
    std::thread::Builder::new()
        .name("rzk-quorum-reader".into())
        .spawn(move || {
            while let Ok((id, cmd)) = rx.recv() {
                let result = reader.read(&cmd).map_err(|e| {
                    tracing::warn!(?cmd, error = %e, "a read for the protocol failed");
                    e.to_string()
                });
                if done.send(Done::Read(id, result)).is_err() {
                    return;
                }
            }
        })
        .expect("spawn the reader thread");
    tx
}

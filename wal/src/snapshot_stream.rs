//! Snapshots written as streams of chunks, off the caller's thread.
//!
//! Two writers share one shape: the caller pushes chunks into a bounded queue
//! ([`SnapshotWriter::try_write`] never blocks and gives a chunk back when the
//! queue is full; [`SnapshotWriter::ready`] waits for room), a thread of the
//! writer's own writes them to a temporary file in the snapshot directory, and
//! `finish` resolves once the file is complete and durable. Dropping a writer
//! without `finish` aborts it and removes the temporary file.
//!
//! - [`SnapshotWriter`]: the state machine's bytes of a local snapshot; the
//!   thread adds the header, checksum and trailer, and paces its writes
//!   ([`crate::WalOptions::snapshot_write_bytes_per_sec_max`]).
//! - [`IncomingSnapshot`]: the raw bytes of a snapshot file a learner receives
//!   from its leader; the thread checks the whole file (zxid, length, checksum,
//!   against what the leader announced) before `finish` succeeds.
//!
//! Neither touches the catalog: the result goes to [`crate::Wal::commit_snapshot`]
//! or [`crate::Wal::install_received`] on the thread that owns the [`crate::Wal`].

use std::collections::VecDeque;
use std::fs::{File, OpenOptions};
use std::future::Future;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use rzk_zxid::Zxid;
use tokio::sync::{oneshot, Notify};

use crate::durability::Syncer;
use crate::error::{Result, WalError};
use crate::snapshot::{unique_tmp_path, RawCheck, StateFileWriter, TmpSnapshot, Wait};

/// Bytes a learner's incoming snapshot is made durable at, as it is received
/// (the same reason as for a local snapshot: bound what a log commit waits for).
const INCOMING_SYNC_EVERY_BYTES: u64 = 4 << 20;

/// The default of [`SnapshotDir`]'s `queue_bytes_max`: chunks accepted and not
/// yet written.
pub const SNAPSHOT_QUEUE_BYTES_MAX: usize = 8 << 20;

/// The snapshot directory of a [`crate::Wal`], for writers on other threads.
/// Cheap to clone.
#[derive(Debug, Clone)]
pub struct SnapshotDir {
    pub(crate) dir: PathBuf,
    pub(crate) syncer: Arc<dyn Syncer>,
    pub(crate) write_bytes_per_sec_max: Option<u64>,
    pub(crate) queue_bytes_max: usize,
}

impl SnapshotDir {
    /// The directory.
    pub fn path(&self) -> &Path {
        &self.dir
    }

    /// Starts writing the snapshot at `zxid` from a stream of the state
    /// machine's bytes. Whether `zxid` fits the log is checked when it is
    /// committed ([`crate::Wal::commit_snapshot`]).
    pub fn writer(&self, zxid: Zxid) -> Result<SnapshotWriter> {
        let tmp = unique_tmp_path(&self.dir, zxid, "stream");
        let file = StateFileWriter::create(
            zxid,
            tmp,
            Arc::clone(&self.syncer),
            self.write_bytes_per_sec_max,
        )?;
        let (shared, done) = spawn(
            zxid,
            format!("rzk-snapshot-{zxid:x}"),
            self.queue_bytes_max,
            StateSink { file },
        )?;
        Ok(SnapshotWriter {
            zxid,
            queue: Producer::new(shared),
            done: Some(done),
        })
    }

    /// Starts receiving the snapshot file at `zxid` that a leader announced
    /// with its size and checksum.
    pub fn incoming(&self, zxid: Zxid, size_bytes: u64, crc: u32) -> Result<IncomingSnapshot> {
        let tmp = unique_tmp_path(&self.dir, zxid, "incoming");
        let file = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open(&tmp)
            .map_err(|e| WalError::io("create", &tmp, e))?;
        let sink = RawSink {
            file: Some(file),
            tmp,
            syncer: Arc::clone(&self.syncer),
            check: RawCheck::new(zxid, size_bytes, crc),
            unsynced: 0,
        };
        let (shared, done) = spawn(
            zxid,
            format!("rzk-snap-in-{zxid:x}"),
            self.queue_bytes_max,
            sink,
        )?;
        Ok(IncomingSnapshot {
            zxid,
            size_bytes,
            accepted_bytes: 0,
            queue: Producer::new(shared),
            done: Some(done),
        })
    }
}

/// Why a chunk was not taken.
#[derive(Debug, Clone, thiserror::Error)]
pub enum TryWriteError {
    /// The queue is full: here is the chunk back; try again after `ready`.
    #[error("the snapshot queue is full")]
    Full(Bytes),
    /// The writer failed (or the chunk was refused); nothing more will be
    /// written and `finish` returns this error too.
    #[error(transparent)]
    Failed(WalError),
}

/// A local snapshot being written: a bounded queue to the writer's thread.
///
/// # Correctness
/// - At most `queue_bytes_max` bytes of chunks wait in memory (a chunk larger
///   than that is taken only when the queue is empty).
/// - The snapshot exists only once [`crate::Wal::commit_snapshot`] has put it in
///   the catalog; until then a crash leaves a temporary file that the next open
///   removes.
/// - Dropped without [`SnapshotWriter::finish`], it aborts: the thread stops and
///   removes the temporary file.
#[derive(Debug)]
pub struct SnapshotWriter {
    zxid: Zxid,
    queue: Producer,
    done: Option<oneshot::Receiver<Result<TmpSnapshot>>>,
}

impl SnapshotWriter {
    /// The zxid the snapshot is consistent at.
    pub fn zxid(&self) -> Zxid {
        self.zxid
    }

    /// Queues `chunk` without blocking.
    pub fn try_write(&mut self, chunk: Bytes) -> std::result::Result<(), TryWriteError> {
        self.queue.try_push(chunk)
    }

    /// Resolves once the chunk refused last would be taken (or the writer has
    /// failed, which the next call reports).
    pub async fn ready(&mut self) {
        self.queue.ready().await
    }

    /// Queues `chunk`, blocking the thread while the queue is full. Not for use
    /// inside an async runtime.
    pub fn write(&mut self, chunk: Bytes) -> Result<()> {
        self.queue.push_blocking(chunk)
    }

    /// Ends the stream: resolves once the file is complete and durable under
    /// its temporary name, ready for [`crate::Wal::commit_snapshot`].
    pub fn finish(mut self) -> Finishing<WrittenSnapshot> {
        self.queue.finish();
        Finishing {
            rx: self.done.take().expect("taken only here"),
            wrap: |tmp| WrittenSnapshot { tmp },
        }
    }
}

impl Drop for SnapshotWriter {
    fn drop(&mut self) {
        if self.done.is_some() {
            self.queue.abort();
        }
    }
}

/// A snapshot file a learner receives from its leader: raw chunks in order,
/// into a bounded queue to the writer's thread.
///
/// # Correctness
/// - A chunk that does not start where the last one ended, or that goes past
///   the announced size, is refused at once ([`WalError::SnapshotTransfer`]).
/// - `finish` succeeds only if the whole file arrived and verifies: its
///   header names the announced zxid, its trailer its length, and its checksum
///   matches both the trailer and the announced one. The file is then durable.
/// - Nothing the learner had is touched before [`crate::Wal::install_received`]:
///   an interrupted transfer (drop, crash, corrupt chunk) leaves the previous
///   durable state as it was (I2), and its temporary file is removed (on drop,
///   or by the next open after a crash).
#[derive(Debug)]
pub struct IncomingSnapshot {
    zxid: Zxid,
    size_bytes: u64,
    accepted_bytes: u64,
    queue: Producer,
    done: Option<oneshot::Receiver<Result<TmpSnapshot>>>,
}

impl IncomingSnapshot {
    /// The zxid of the snapshot being received.
    pub fn zxid(&self) -> Zxid {
        self.zxid
    }

    /// Bytes accepted so far: the offset the next chunk must start at.
    pub fn accepted_bytes(&self) -> u64 {
        self.accepted_bytes
    }

    /// Whether every announced byte has been accepted.
    pub fn is_complete(&self) -> bool {
        self.accepted_bytes == self.size_bytes
    }

    fn check_chunk(&self, offset: u64, len: usize) -> Result<()> {
        let reason = if offset != self.accepted_bytes {
            format!(
                "a chunk at offset {offset}, expected {}",
                self.accepted_bytes
            )
        } else if offset + len as u64 > self.size_bytes {
            format!(
                "a chunk of {len} bytes at offset {offset} goes past the announced size {}",
                self.size_bytes
            )
        } else {
            return Ok(());
        };
        Err(WalError::SnapshotTransfer {
            zxid: self.zxid,
            reason,
        })
    }

    /// Queues the chunk of the file at `offset` without blocking.
    pub fn try_write(
        &mut self,
        offset: u64,
        chunk: Bytes,
    ) -> std::result::Result<(), TryWriteError> {
        if let Err(e) = self.check_chunk(offset, chunk.len()) {
            self.queue.fail(e.clone());
            return Err(TryWriteError::Failed(e));
        }
        let len = chunk.len() as u64;
        self.queue.try_push(chunk)?;
        self.accepted_bytes += len;
        Ok(())
    }

    /// Resolves once the chunk refused last would be taken.
    pub async fn ready(&mut self) {
        self.queue.ready().await
    }

    /// Queues the chunk at `offset`, blocking the thread while the queue is
    /// full. Not for use inside an async runtime.
    pub fn write(&mut self, offset: u64, chunk: Bytes) -> Result<()> {
        if let Err(e) = self.check_chunk(offset, chunk.len()) {
            self.queue.fail(e.clone());
            return Err(e);
        }
        let len = chunk.len() as u64;
        self.queue.push_blocking(chunk)?;
        self.accepted_bytes += len;
        Ok(())
    }

    /// Ends the transfer: resolves once the file is verified and durable under
    /// its temporary name, ready for [`crate::Wal::install_received`].
    pub fn finish(mut self) -> Finishing<ReceivedSnapshot> {
        self.queue.finish();
        Finishing {
            rx: self.done.take().expect("taken only here"),
            wrap: |tmp| ReceivedSnapshot { tmp },
        }
    }
}

impl Drop for IncomingSnapshot {
    fn drop(&mut self) {
        if self.done.is_some() {
            self.queue.abort();
        }
    }
}

/// A local snapshot written and durable, not yet in the catalog: give it to
/// [`crate::Wal::commit_snapshot`]. Dropped, it removes its file.
#[derive(Debug)]
pub struct WrittenSnapshot {
    pub(crate) tmp: TmpSnapshot,
}

impl WrittenSnapshot {
    /// The zxid the snapshot is consistent at.
    pub fn zxid(&self) -> Zxid {
        self.tmp.entry.zxid
    }

    /// The file's size.
    pub fn size_bytes(&self) -> u64 {
        self.tmp.entry.size_bytes
    }

    /// The file's checksum.
    pub fn crc(&self) -> u32 {
        self.tmp.entry.crc
    }
}

/// A snapshot received from a leader, verified and durable, not yet
/// installed: give it to [`crate::Wal::install_received`]. Dropped, it removes
/// its file.
#[derive(Debug)]
pub struct ReceivedSnapshot {
    pub(crate) tmp: TmpSnapshot,
}

impl ReceivedSnapshot {
    /// The snapshot's zxid.
    pub fn zxid(&self) -> Zxid {
        self.tmp.entry.zxid
    }

    /// The file's size.
    pub fn size_bytes(&self) -> u64 {
        self.tmp.entry.size_bytes
    }

    /// The file's checksum.
    pub fn crc(&self) -> u32 {
        self.tmp.entry.crc
    }
}

/// A writer's end: a future (or [`Finishing::wait`]) of the finished file.
#[derive(Debug)]
#[must_use = "the snapshot is finished only when this resolves"]
pub struct Finishing<T> {
    rx: oneshot::Receiver<Result<TmpSnapshot>>,
    wrap: fn(TmpSnapshot) -> T,
}

impl<T> Finishing<T> {
    /// Blocks the current thread until the file is finished. Not for use inside
    /// an async runtime (await the `Finishing` there).
    pub fn wait(self) -> Result<T> {
        let wrap = self.wrap;
        self.rx
            .blocking_recv()
            .unwrap_or(Err(WalError::Closed))
            .map(wrap)
    }
}

impl<T> Future for Finishing<T> {
    type Output = Result<T>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let wrap = self.wrap;
        Pin::new(&mut self.rx)
            .poll(cx)
            .map(|r| r.unwrap_or(Err(WalError::Closed)).map(wrap))
    }
}

// ---- the queue and its thread ----

/// What a writer thread does with the chunks.
trait Sink: Send + 'static {
    /// Writes one chunk; false if `wait` said to stop.
    fn write(&mut self, chunk: &[u8], wait: &mut dyn Wait) -> Result<bool>;
    /// Completes the file.
    fn finish(self) -> Result<TmpSnapshot>;
}

struct StateSink {
    file: StateFileWriter,
}

impl Sink for StateSink {
    fn write(&mut self, chunk: &[u8], wait: &mut dyn Wait) -> Result<bool> {
        self.file.write(chunk, wait)
    }

    fn finish(self) -> Result<TmpSnapshot> {
        self.file.finish()
    }
}

struct RawSink {
    file: Option<File>,
    tmp: PathBuf,
    syncer: Arc<dyn Syncer>,
    check: RawCheck,
    unsynced: u64,
}

impl RawSink {
    fn file(&self) -> &File {
        self.file.as_ref().expect("open until finished")
    }
}

impl Sink for RawSink {
    fn write(&mut self, chunk: &[u8], _wait: &mut dyn Wait) -> Result<bool> {
        self.check.update(chunk);
        let mut file = self.file();
        file.write_all(chunk)
            .map_err(|e| WalError::io("write", &self.tmp, e))?;
        self.unsynced += chunk.len() as u64;
        if self.unsynced >= INCOMING_SYNC_EVERY_BYTES {
            self.syncer
                .sync_data(self.file(), &self.tmp)
                .map_err(|e| WalError::io("fsync", &self.tmp, e))?;
            self.unsynced = 0;
        }
        Ok(true)
    }

    fn finish(mut self) -> Result<TmpSnapshot> {
        let entry = self.check.finish(&self.tmp)?;
        self.syncer
            .sync_all(self.file(), &self.tmp)
            .map_err(|e| WalError::io("fsync", &self.tmp, e))?;
        self.file = None;
        Ok(TmpSnapshot::new(entry, std::mem::take(&mut self.tmp)))
    }
}

impl Drop for RawSink {
    fn drop(&mut self) {
        if self.file.take().is_some() {
            crate::snapshot::remove_quietly(&self.tmp);
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum End {
    Open,
    Finish,
    Abort,
}

#[derive(Debug)]
struct Queue {
    chunks: VecDeque<Bytes>,
    /// Bytes queued or being written.
    bytes: usize,
    end: End,
    failed: Option<WalError>,
}

#[derive(Debug)]
struct Shared {
    queue: Mutex<Queue>,
    /// The thread waits here for chunks; blocking producers for room.
    changed: Condvar,
    /// Async producers wait here for room.
    room: Notify,
    queue_bytes_max: usize,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn wake(&self) {
        self.changed.notify_all();
        self.room.notify_waiters();
    }
}

/// The producer's side of a writer's queue.
#[derive(Debug)]
struct Producer {
    shared: Arc<Shared>,
    /// The size of the chunk refused last: `ready` waits for room for it.
    refused_bytes: usize,
}

impl Producer {
    fn new(shared: Arc<Shared>) -> Producer {
        Producer {
            shared,
            refused_bytes: 0,
        }
    }

    /// Whether a chunk of `len` bytes fits now.
    fn fits(&self, q: &Queue, len: usize) -> bool {
        q.bytes == 0 || q.bytes + len <= self.shared.queue_bytes_max
    }

    fn try_push(&mut self, chunk: Bytes) -> std::result::Result<(), TryWriteError> {
        let mut q = self.shared.lock();
        if let Some(e) = &q.failed {
            return Err(TryWriteError::Failed(e.clone()));
        }
        if chunk.is_empty() {
            return Ok(());
        }
        if !self.fits(&q, chunk.len()) {
            self.refused_bytes = chunk.len();
            return Err(TryWriteError::Full(chunk));
        }
        self.refused_bytes = 0;
        q.bytes += chunk.len();
        q.chunks.push_back(chunk);
        drop(q);
        self.shared.wake();
        Ok(())
    }

    fn push_blocking(&mut self, chunk: Bytes) -> Result<()> {
        let mut q = self.shared.lock();
        loop {
            if let Some(e) = &q.failed {
                return Err(e.clone());
            }
            if chunk.is_empty() {
                return Ok(());
            }
            if self.fits(&q, chunk.len()) {
                break;
            }
            q = self
                .shared
                .changed
                .wait(q)
                .unwrap_or_else(PoisonError::into_inner);
        }
        q.bytes += chunk.len();
        q.chunks.push_back(chunk);
        drop(q);
        self.shared.wake();
        Ok(())
    }

    async fn ready(&mut self) {
        loop {
            let notified = self.shared.room.notified();
            tokio::pin!(notified);
            // Registered before the check, so a wake-up in between is not lost.
            notified.as_mut().enable();
            {
                let q = self.shared.lock();
                if q.failed.is_some() || self.fits(&q, self.refused_bytes) {
                    return;
                }
            }
            notified.await;
        }
    }

    /// Refuses everything from now on with `e` (a misused stream).
    fn fail(&self, e: WalError) {
        let mut q = self.shared.lock();
        if q.failed.is_none() {
            q.failed = Some(e);
        }
        q.end = End::Abort;
        drop(q);
        self.shared.wake();
    }

    fn finish(&self) {
        self.set_end(End::Finish);
    }

    fn abort(&self) {
        self.set_end(End::Abort);
    }

    fn set_end(&self, end: End) {
        let mut q = self.shared.lock();
        if q.end == End::Open {
            q.end = end;
        }
        drop(q);
        self.shared.wake();
    }
}

/// Starts a writer thread for `sink`.
fn spawn<S: Sink>(
    zxid: Zxid,
    name: String,
    queue_bytes_max: usize,
    sink: S,
) -> Result<(Arc<Shared>, oneshot::Receiver<Result<TmpSnapshot>>)> {
    let shared = Arc::new(Shared {
        queue: Mutex::new(Queue {
            chunks: VecDeque::new(),
            bytes: 0,
            end: End::Open,
            failed: None,
        }),
        changed: Condvar::new(),
        room: Notify::new(),
        queue_bytes_max: queue_bytes_max.max(1),
    });
    let (tx, rx) = oneshot::channel();
    let thread_shared = Arc::clone(&shared);
    std::thread::Builder::new()
        .name(name.clone())
        .spawn(move || {
            let result = run(zxid, &thread_shared, sink);
            if let Err(e) = &result {
                let mut q = thread_shared.lock();
                if q.failed.is_none() {
                    q.failed = Some(e.clone());
                }
                q.chunks.clear();
                q.bytes = 0;
                drop(q);
                thread_shared.wake();
            }
            // Nobody waits after an abort; the file is already gone then.
            let _ = tx.send(result);
        })
        .map_err(|e| WalError::io("spawn a thread for", PathBuf::from(name), e))?;
    Ok((shared, rx))
}

/// Waits for a pacer's delay on the queue's condition, waking early on abort.
struct AbortableWait<'a> {
    shared: &'a Shared,
}

impl Wait for AbortableWait<'_> {
    fn wait(&mut self, d: Duration) -> bool {
        let deadline = std::time::Instant::now() + d;
        let mut q = self.shared.lock();
        loop {
            if q.end == End::Abort {
                return false;
            }
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                return true;
            }
            q = self
                .shared
                .changed
                .wait_timeout(q, left)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }
}

fn aborted(zxid: Zxid) -> WalError {
    WalError::SnapshotTransfer {
        zxid,
        reason: "the writer was dropped without finish".to_owned(),
    }
}

/// The thread: writes chunks as they come, then finishes the file; on abort
/// (or an error) the sink is dropped, which removes the temporary file.
fn run<S: Sink>(zxid: Zxid, shared: &Shared, mut sink: S) -> Result<TmpSnapshot> {
    loop {
        let chunk = {
            let mut q = shared.lock();
            loop {
                if q.end == End::Abort {
                    return Err(q.failed.clone().unwrap_or_else(|| aborted(zxid)));
                }
                if let Some(c) = q.chunks.pop_front() {
                    break c;
                }
                if q.end == End::Finish {
                    drop(q);
                    return sink.finish();
                }
                q = shared
                    .changed
                    .wait(q)
                    .unwrap_or_else(PoisonError::into_inner);
            }
        };
        let go_on = sink.write(&chunk, &mut AbortableWait { shared })?;
        if !go_on {
            return Err(aborted(zxid));
        }
        let mut q = shared.lock();
        q.bytes -= chunk.len();
        drop(q);
        shared.wake();
    }
}

#[cfg(test)]
#[path = "snapshot_stream_tests.rs"]
mod tests;

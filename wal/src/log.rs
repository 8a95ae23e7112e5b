//! The transaction log: segment files, group commit, recovery, truncation, purge.

use std::fs;
use std::future::Future;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll};
use std::thread;
use std::time::{Duration, Instant};

use bytes::Bytes;
use rzk_zxid::Zxid;
use tokio::sync::oneshot;

use crate::durability::{NoSyncer, OsSyncer, Syncer};
use crate::error::{Result, WalError};
use crate::format::{
    list_dir, open_read, parse_segment_name, read_small_file, record_header, remove_durably,
    write_small_file, SegmentHeader, RECORD_HEADER_BYTES, SEGMENT_HEADER_BYTES, TMP_SUFFIX,
};
use crate::reader::LogReader;
use crate::segment::{
    create_segment, cut_segment, has_nonzero, open_for_append, read_header, Seg, SegmentCursor,
    Step,
};

/// File holding the log's start while it has no segment.
pub(crate) const START_FILE: &str = "log-start";
pub(crate) const START_MAGIC: &[u8; 8] = b"RZKSTART";
/// File holding a rewrite (truncate or reset) in progress: its commit point.
pub(crate) const REWRITE_FILE: &str = "log-rewrite";
pub(crate) const REWRITE_MAGIC: &[u8; 8] = b"RZKREWR1";

/// How the log is opened and written.
#[derive(Debug, Clone)]
pub struct LogOptions {
    /// Size a new segment is preallocated to, and at which the log moves to a new
    /// segment (a single larger record gets a segment of its own size). Default
    /// 64 MiB, like ZooKeeper's `preAllocSize`.
    pub segment_bytes: u64,
    /// Largest encoded record (16-byte header plus payload). Default 16 MiB. A
    /// length field above it on disk is treated as damage.
    pub record_bytes_max: usize,
    /// Most bytes accepted and not yet handed to the writer; beyond it
    /// [`Log::append`] fails with [`WalError::Overloaded`]. Default 64 MiB.
    pub pending_bytes_max: usize,
    /// What to do with a damaged record before the tail. Default
    /// [`RecoveryMode::Strict`].
    pub recovery: RecoveryMode,
    /// **UNSAFE: for benchmarks only.** Never fsync: every append is acknowledged
    /// once written to the page cache, and a power failure loses acknowledged
    /// records. Like ZooKeeper's `forceSync=no`. Default `false`.
    pub unsafe_no_fsync: bool,
}

impl Default for LogOptions {
    fn default() -> Self {
        LogOptions {
            segment_bytes: 64 << 20,
            record_bytes_max: 16 << 20,
            pending_bytes_max: 64 << 20,
            recovery: RecoveryMode::Strict,
            unsafe_no_fsync: false,
        }
    }
}

/// What open does with damage that is not a torn tail.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RecoveryMode {
    /// Refuse to open: [`WalError::Corrupt`] or [`WalError::HistoryGap`] names the
    /// file and offset. The server refuses to start.
    #[default]
    Strict,
    /// Cut the log just before the damage, dropping every record after it, and say
    /// so in [`LogRecovery::repaired`]. The operator's explicit choice (the
    /// server's repair flag); the dropped records must come back from the leader.
    TruncateCorrupt,
}

/// A rewrite of the log's history, recorded in a marker file before it starts so
/// that a crash at any point finishes it on the next open.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rewrite {
    /// Drop every record after `zxid`.
    TruncateAfter {
        /// The last zxid kept.
        zxid: Zxid,
        /// The log's start when the truncation began, in case no segment is left.
        start: Zxid,
    },
    /// Drop every record; the log restarts after `start` (an installed snapshot).
    Reset {
        /// The new start.
        start: Zxid,
    },
}

impl Rewrite {
    fn encode(&self) -> [u8; 17] {
        let (kind, a, b) = match *self {
            Rewrite::TruncateAfter { zxid, start } => (1u8, zxid, start),
            Rewrite::Reset { start } => (2u8, start, start),
        };
        let mut out = [0u8; 17];
        out[0] = kind;
        out[1..9].copy_from_slice(&a.as_u64().to_le_bytes());
        out[9..17].copy_from_slice(&b.as_u64().to_le_bytes());
        out
    }

    pub(crate) fn decode(body: &[u8], path: &Path) -> Result<Rewrite> {
        let corrupt = || WalError::CorruptFile {
            path: path.to_owned(),
            reason: "unknown rewrite marker".to_owned(),
        };
        if body.len() != 17 {
            return Err(corrupt());
        }
        let a = Zxid::from_u64(u64::from_le_bytes(body[1..9].try_into().expect("8 bytes")));
        let b = Zxid::from_u64(u64::from_le_bytes(body[9..17].try_into().expect("8 bytes")));
        match body[0] {
            1 => Ok(Rewrite::TruncateAfter { zxid: a, start: b }),
            2 => Ok(Rewrite::Reset { start: a }),
            _ => Err(corrupt()),
        }
    }
}

/// A torn tail that open cut off.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TailCut {
    /// The last segment.
    pub path: PathBuf,
    /// Where its valid records end; everything from here on was dropped.
    pub offset: u64,
    /// What was found there.
    pub reason: String,
}

/// Damage before the tail that open cut away under [`RecoveryMode::TruncateCorrupt`].
#[derive(Debug, Clone)]
pub struct Repair {
    /// What was found.
    pub damage: WalError,
    /// The last record kept.
    pub kept_through: Zxid,
}

/// What [`Log::open`] found and did.
#[derive(Debug, Clone, Default)]
pub struct LogRecovery {
    /// The log's start: its first record follows this zxid.
    pub start: Zxid,
    /// The last durable record ([`Log::last_durable_zxid`]).
    pub end: Zxid,
    /// Segment files.
    pub segments: usize,
    /// Records, all CRC-checked and contiguous.
    pub records: u64,
    /// Bytes of records scanned.
    pub bytes: u64,
    /// A truncation or reset interrupted by a crash, finished now.
    pub rewrite_completed: Option<Rewrite>,
    /// A torn tail that was cut off.
    pub tail_cut: Option<TailCut>,
    /// Damage cut away on request ([`RecoveryMode::TruncateCorrupt`]).
    pub repaired: Vec<Repair>,
}

/// A segment as listed by [`Log::segments`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SegmentInfo {
    /// The file.
    pub path: PathBuf,
    /// Its first record.
    pub first: Zxid,
    /// Its last durable record.
    pub last: Zxid,
    /// Its durable records.
    pub records: u64,
}

/// What [`Log::purge_before`] removed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PurgeReport {
    /// Removed segment files.
    pub removed: Vec<PathBuf>,
    /// The log's start afterwards.
    pub start: Zxid,
}

/// An append in flight: resolves with the record's zxid once its bytes are
/// durable, or with the error that stopped the log.
#[derive(Debug)]
#[must_use = "an append is durable only when its future resolves"]
pub struct Append {
    rx: oneshot::Receiver<Result<Zxid>>,
}

impl Append {
    /// Blocks the current thread until the append is durable. Not for use inside
    /// an async runtime (await the `Append` there).
    pub fn wait(self) -> Result<Zxid> {
        self.rx.blocking_recv().unwrap_or(Err(WalError::Closed))
    }
}

impl Future for Append {
    type Output = Result<Zxid>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        Pin::new(&mut self.rx)
            .poll(cx)
            .map(|r| r.unwrap_or(Err(WalError::Closed)))
    }
}

/// An accepted record waiting for the writer.
struct Waiter {
    zxid: Zxid,
    len: u32,
    tx: oneshot::Sender<Result<Zxid>>,
}

/// What appenders and the writer share.
struct State {
    /// The last zxid accepted (durable or not). Only the contiguity check reads
    /// it; it is never reported as history (I1).
    accepted: Zxid,
    /// Encoded records not yet taken by the writer.
    pending: Vec<u8>,
    /// One per record in `pending`, in order.
    waiting: Vec<Waiter>,
    /// The writer is writing and syncing a batch.
    in_flight: bool,
    /// The writer sleeps on `work`; appenders wake it only then.
    writer_idle: bool,
    /// While the writer gathers a batch: wake it once this many records wait.
    gather_target: Option<usize>,
    /// The error that stopped the log, if any.
    failed: Option<WalError>,
    /// The log is being dropped.
    shutdown: bool,
}

/// The segment files; locked by the writer for a batch and by rewrites.
struct Io {
    /// Where the history starts when there is no segment; otherwise the first
    /// segment's `prev` (kept equal to it).
    start: Zxid,
    segs: Vec<Seg>,
    /// The last segment, open for writing.
    active: Option<fs::File>,
}

pub(crate) struct Inner {
    dir: PathBuf,
    opts: LogOptions,
    syncer: Arc<dyn Syncer>,
    state: Mutex<State>,
    /// The writer waits here for records.
    work: Condvar,
    /// Flushes wait here for the writer to finish a batch.
    done: Condvar,
    /// The last durable zxid (I1): raised only after fdatasync returned.
    durable: AtomicU64,
    /// Bumped by every truncate and reset, so readers notice.
    generation: AtomicU64,
    io: Mutex<Io>,
    /// Serialises truncate, reset and purge.
    rewrite: Mutex<()>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Inner {
    pub(crate) fn generation(&self) -> u64 {
        self.generation.load(Ordering::SeqCst)
    }

    pub(crate) fn record_bytes_max(&self) -> usize {
        self.opts.record_bytes_max
    }
}

/// The transaction log of one peer.
///
/// # Correctness
/// - [`Log::last_durable_zxid`] moves past a record only after the record's bytes
///   and every record before it are durable (fdatasync returned); it is the only
///   answer to "how far does my history reach" (I1). It goes back only through
///   [`Log::truncate_after`] and [`Log::reset`].
/// - Appends are accepted only in history order: strictly increasing, and
///   contiguous inside an epoch ([`Zxid::is_next`]). A gap is refused with
///   [`WalError::Gap`] naming both zxids, so the log can never hold the history of
///   ZOOKEEPER-5094.
/// - A write or fsync error stops the log for good ([`WalError::Failed`]); nothing
///   is retried. Reopen it to learn what the disk holds.
/// - A crash at any point leaves a log that opens to a prefix of what was appended
///   that contains every acknowledged record. A truncation or reset that a crash
///   interrupts is either not visible at all or finished on the next open.
/// - Segment files are named `log.<hex zxid of their first record>`; the crate
///   assumes single-sector writes are atomic, as every log of this kind does.
pub struct Log {
    inner: Arc<Inner>,
    writer: Option<thread::JoinHandle<()>>,
}

impl std::fmt::Debug for Log {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Log")
            .field("dir", &self.inner.dir)
            .field("last_durable_zxid", &self.last_durable_zxid())
            .finish()
    }
}

impl Log {
    /// Opens (or creates) the log in `dir`, recovering it: CRCs are checked, a torn
    /// tail of the last segment is cut off, an interrupted truncation or reset is
    /// finished. Damage anywhere else fails with the file and offset unless
    /// `options.recovery` asks for a repair.
    pub fn open(dir: impl AsRef<Path>, options: LogOptions) -> Result<(Log, LogRecovery)> {
        let syncer: Arc<dyn Syncer> = if options.unsafe_no_fsync {
            Arc::new(NoSyncer)
        } else {
            Arc::new(OsSyncer)
        };
        Log::open_with(dir.as_ref(), options, syncer)
    }

    pub(crate) fn open_with(
        dir: &Path,
        opts: LogOptions,
        syncer: Arc<dyn Syncer>,
    ) -> Result<(Log, LogRecovery)> {
        crate::format::create_dir_durably(dir, &*syncer)?;
        let (io, report) = recover(dir, &opts, &*syncer)?;
        let end = io.segs.last().map_or(io.start, |s| s.last);
        let inner = Arc::new(Inner {
            dir: dir.to_owned(),
            opts,
            syncer,
            state: Mutex::new(State {
                accepted: end,
                pending: Vec::new(),
                waiting: Vec::new(),
                in_flight: false,
                writer_idle: false,
                gather_target: None,
                failed: None,
                shutdown: false,
            }),
            work: Condvar::new(),
            done: Condvar::new(),
            durable: AtomicU64::new(end.as_u64()),
            generation: AtomicU64::new(0),
            io: Mutex::new(io),
            rewrite: Mutex::new(()),
        });
        let for_writer = Arc::clone(&inner);
        let writer = thread::Builder::new()
            .name("rzk-wal-writer".to_owned())
            .spawn(move || writer_loop(&for_writer))
            .map_err(|e| WalError::io("spawn writer thread for", dir, e))?;
        Ok((
            Log {
                inner,
                writer: Some(writer),
            },
            report,
        ))
    }

    /// The directory of the segment files.
    pub fn dir(&self) -> &Path {
        &self.inner.dir
    }

    /// The zxid of the last record that is durable, or the log's start when it has
    /// none. The one answer to "how far does my history reach" (I1).
    pub fn last_durable_zxid(&self) -> Zxid {
        Zxid::from_u64(self.inner.durable.load(Ordering::SeqCst))
    }

    /// Where the log's history starts: its first record follows this zxid. It is
    /// [`Zxid::ZERO`] for a log that was never purged or reset, otherwise the
    /// snapshot boundary.
    pub fn start(&self) -> Zxid {
        lock(&self.inner.io).start
    }

    /// Appends a record. Returns at once; the [`Append`] resolves once the record
    /// is durable. Many concurrent appends share one fdatasync (group commit).
    ///
    /// Refused without effect: a zxid that is not greater than the last accepted
    /// one ([`WalError::NotIncreasing`]), one that leaves a gap inside an epoch or
    /// starts a new epoch anywhere but counter 1 ([`WalError::Gap`]), a record over
    /// the size limit, too many bytes waiting, a failed or closed log.
    pub fn append(&self, zxid: Zxid, payload: Bytes) -> Result<Append> {
        let total = RECORD_HEADER_BYTES + payload.len();
        if total > self.inner.opts.record_bytes_max {
            return Err(WalError::RecordTooLarge {
                zxid,
                size_bytes: total,
                limit_bytes: self.inner.opts.record_bytes_max,
            });
        }
        // The CRC does not depend on the position, so it is computed before taking
        // the lock that orders appends.
        let header = record_header(zxid, &payload);
        let (tx, rx) = oneshot::channel();
        let mut st = lock(&self.inner.state);
        if let Some(err) = &st.failed {
            return Err(err.clone());
        }
        if st.shutdown {
            return Err(WalError::Closed);
        }
        if zxid <= st.accepted {
            return Err(WalError::NotIncreasing {
                last: st.accepted,
                got: zxid,
            });
        }
        if !zxid.is_next(st.accepted) {
            return Err(WalError::Gap {
                last: st.accepted,
                got: zxid,
            });
        }
        let limit = self.inner.opts.pending_bytes_max;
        if !st.pending.is_empty() && st.pending.len() + total > limit {
            return Err(WalError::Overloaded {
                pending_bytes: st.pending.len(),
                limit_bytes: limit,
            });
        }
        st.pending.extend_from_slice(&header);
        st.pending.extend_from_slice(&payload);
        st.waiting.push(Waiter {
            zxid,
            len: total as u32,
            tx,
        });
        st.accepted = zxid;
        if st.writer_idle {
            st.writer_idle = false;
            self.inner.work.notify_one();
        } else if st.gather_target.is_some_and(|t| st.waiting.len() >= t) {
            st.gather_target = None;
            self.inner.work.notify_one();
        }
        Ok(Append { rx })
    }

    /// Waits until every accepted append is durable; returns the last durable zxid.
    pub fn flush(&self) -> Result<Zxid> {
        let st = self.quiesce()?;
        drop(st);
        Ok(self.last_durable_zxid())
    }

    /// Waits until the writer is idle with nothing pending and returns the state
    /// lock, so no append can start until the guard is dropped.
    fn quiesce(&self) -> Result<MutexGuard<'_, State>> {
        let mut st = lock(&self.inner.state);
        loop {
            if let Some(err) = &st.failed {
                return Err(err.clone());
            }
            if !st.in_flight && st.pending.is_empty() {
                return Ok(st);
            }
            st = self
                .inner
                .done
                .wait(st)
                .unwrap_or_else(PoisonError::into_inner);
        }
    }

    /// The segments, oldest first.
    pub fn segments(&self) -> Vec<SegmentInfo> {
        lock(&self.inner.io)
            .segs
            .iter()
            .map(|s| SegmentInfo {
                path: s.path.clone(),
                first: s.first,
                last: s.last,
                records: s.records,
            })
            .collect()
    }

    /// Whether `zxid` is a position of this log: its start or one of its durable
    /// records.
    pub fn contains(&self, zxid: Zxid) -> Result<bool> {
        match self.read_from(zxid) {
            Ok(_) => Ok(true),
            Err(
                WalError::NotInLog { .. } | WalError::Purged { .. } | WalError::BeyondEnd { .. },
            ) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Streams the durable records that follow `zxid`, in order, for replay after a
    /// snapshot at `zxid` or for a DIFF from a peer that has `zxid`. It reads one
    /// chunk at a time and never loads the log into memory.
    ///
    /// `zxid` must be the log's start or one of its records: below the start fails
    /// with [`WalError::Purged`], past the end with [`WalError::BeyondEnd`], and a
    /// zxid this log does not hold with [`WalError::NotInLog`] (the peer diverged).
    /// The reader sees the records durable when it was created.
    pub fn read_from(&self, zxid: Zxid) -> Result<LogReader> {
        let (start, segs) = {
            let io = lock(&self.inner.io);
            (io.start, io.segs.clone())
        };
        let generation = self.inner.generation();
        let end = segs.last().map_or(start, |s| s.last);
        if zxid < start {
            return Err(WalError::Purged { zxid, start });
        }
        if zxid > end {
            return Err(WalError::BeyondEnd { zxid, end });
        }
        if zxid == start {
            return Ok(LogReader::new(
                Arc::clone(&self.inner),
                generation,
                segs,
                SEGMENT_HEADER_BYTES,
                start,
            ));
        }
        let Some(i) = segs.iter().position(|s| s.first <= zxid && zxid <= s.last) else {
            return Err(WalError::NotInLog { zxid });
        };
        let offset = self.offset_after(&segs[i], zxid)?;
        let segs = segs[i..].to_vec();
        Ok(LogReader::new(
            Arc::clone(&self.inner),
            generation,
            segs,
            offset,
            zxid,
        ))
    }

    /// The offset just after record `zxid` in `seg`.
    fn offset_after(&self, seg: &Seg, zxid: Zxid) -> Result<u64> {
        let file = open_read(&seg.path)?;
        let mut cursor = SegmentCursor::new(
            file,
            seg.path.clone(),
            SEGMENT_HEADER_BYTES,
            seg.end,
            self.inner.opts.record_bytes_max,
        );
        loop {
            match cursor.next_step(false)? {
                Step::Record { zxid: z, next, .. } if z == zxid => return Ok(next),
                Step::Record { zxid: z, .. } if z > zxid => {
                    return Err(WalError::NotInLog { zxid });
                }
                Step::Record { .. } => {}
                Step::End { .. } => return Err(WalError::NotInLog { zxid }),
                Step::Bad { offset, reason } => {
                    return Err(WalError::Corrupt {
                        path: seg.path.clone(),
                        offset,
                        reason,
                    })
                }
            }
        }
    }

    /// Drops every record after `zxid` (TRUNC sync). Waits for appends in flight,
    /// then rewrites the log; durable before it returns. A crash at any point
    /// leaves the log ending at its old end or at `zxid`, never in between: a
    /// marker file is made durable first and the next open finishes the job.
    ///
    /// `zxid` may be any zxid from the log's start on; the log then ends at its last
    /// record at or below `zxid` (or at its start). Below the start it fails with
    /// [`WalError::Purged`]. Returns the new last durable zxid.
    pub fn truncate_after(&self, zxid: Zxid) -> Result<Zxid> {
        let _rewrite = lock(&self.inner.rewrite);
        let mut st = self.quiesce()?;
        let mut io = lock(&self.inner.io);
        if zxid < io.start {
            return Err(WalError::Purged {
                zxid,
                start: io.start,
            });
        }
        let end = io.segs.last().map_or(io.start, |s| s.last);
        if zxid >= end {
            return Ok(end);
        }
        let rewrite = Rewrite::TruncateAfter {
            zxid,
            start: io.start,
        };
        let result = self.rewrite(&mut io, rewrite);
        self.finish_rewrite(&mut st, &mut io, result)
    }

    /// Drops the whole log and restarts it after `start` (after installing a
    /// snapshot taken at `start`, SNAP sync). The next append must follow `start`.
    /// Crash-safe like [`Log::truncate_after`]: the log is either the old one or
    /// empty at `start`.
    pub fn reset(&self, start: Zxid) -> Result<Zxid> {
        self.reset_then(start, || Ok(()))
    }

    /// [`Log::reset`], then `then` before any append can start. If `then` fails,
    /// the log stops: whoever ran the reset could not record that it is done.
    pub(crate) fn reset_then(
        &self,
        start: Zxid,
        then: impl FnOnce() -> Result<()>,
    ) -> Result<Zxid> {
        let _rewrite = lock(&self.inner.rewrite);
        let mut st = self.quiesce()?;
        let mut io = lock(&self.inner.io);
        let result = self
            .rewrite(&mut io, Rewrite::Reset { start })
            .and_then(|()| then());
        self.finish_rewrite(&mut st, &mut io, result)
    }

    /// Runs a rewrite: marker, apply, forget the marker; then reloads the segments.
    fn rewrite(&self, io: &mut Io, rewrite: Rewrite) -> Result<()> {
        let dir = &self.inner.dir;
        let syncer = &*self.inner.syncer;
        write_small_file(dir, REWRITE_FILE, REWRITE_MAGIC, &rewrite.encode(), syncer)?;
        io.active = None;
        let cut = apply_rewrite(dir, rewrite, &self.inner.opts, syncer)?;
        remove_durably(&dir.join(REWRITE_FILE), dir, syncer)?;
        reload_after_rewrite(io, rewrite, cut)
    }

    /// Publishes the log's new end after a rewrite, or stops the log if it failed
    /// half-way (the disk then holds the marker; reopening finishes the rewrite).
    fn finish_rewrite(&self, st: &mut State, io: &mut Io, result: Result<()>) -> Result<Zxid> {
        self.inner.generation.fetch_add(1, Ordering::SeqCst);
        if let Err(err) = result {
            tracing::error!(dir = %self.inner.dir.display(), error = %err, "log rewrite failed; the log stops until reopened");
            st.failed = Some(WalError::Failed {
                cause: Arc::new(err.clone()),
            });
            return Err(err);
        }
        let end = io.segs.last().map_or(io.start, |s| s.last);
        st.accepted = end;
        self.inner.durable.store(end.as_u64(), Ordering::SeqCst);
        Ok(end)
    }

    /// Removes the oldest segments whose records are all at or below `zxid` (the
    /// oldest snapshot that is kept). The segment being written is never removed,
    /// and removal goes oldest first with a directory fsync after each file, so a
    /// crash leaves a log that starts later but has no hole.
    pub fn purge_before(&self, zxid: Zxid) -> Result<PurgeReport> {
        let _rewrite = lock(&self.inner.rewrite);
        let dir = &self.inner.dir;
        let syncer = &*self.inner.syncer;
        let mut report = PurgeReport::default();
        loop {
            let path = {
                let io = lock(&self.inner.io);
                match io.segs.as_slice() {
                    [first, _, ..] if first.last <= zxid => first.path.clone(),
                    _ => {
                        report.start = io.start;
                        return Ok(report);
                    }
                }
            };
            if let Err(e) = remove_durably(&path, dir, syncer) {
                self.fail(e.clone());
                return Err(e);
            }
            let mut io = lock(&self.inner.io);
            io.segs.remove(0);
            io.start = io.segs[0].prev;
            tracing::info!(path = %path.display(), start = %io.start, "purged log segment");
            report.removed.push(path);
        }
    }

    fn fail(&self, err: WalError) {
        let mut st = lock(&self.inner.state);
        if st.failed.is_none() {
            st.failed = Some(WalError::Failed {
                cause: Arc::new(err),
            });
        }
    }
}

impl Drop for Log {
    fn drop(&mut self) {
        {
            let mut st = lock(&self.inner.state);
            st.shutdown = true;
            self.inner.work.notify_one();
        }
        if let Some(writer) = self.writer.take() {
            let _ = writer.join();
        }
    }
}

/// The longest the writer waits to gather a batch (see [`gather`]).
const GATHER_WAIT_MAX: Duration = Duration::from_millis(1);

/// The group-commit writer: takes everything accepted so far, writes it, one
/// fdatasync per segment touched, then resolves every append of the batch.
/// Appends that arrive during the fsync form the next batch.
fn writer_loop(inner: &Inner) {
    let mut spare_buf = Vec::new();
    let mut spare_waiting = Vec::new();
    // Size of the last batch and how long its write + fsync took.
    let mut last_batch = 0usize;
    let mut last_sync = Duration::ZERO;
    loop {
        let (buf, waiting) = {
            let mut st = lock(&inner.state);
            loop {
                if !st.pending.is_empty() && st.failed.is_none() {
                    break;
                }
                if st.shutdown {
                    return;
                }
                st.writer_idle = true;
                st = inner.work.wait(st).unwrap_or_else(PoisonError::into_inner);
            }
            st.writer_idle = false;
            st = gather(inner, st, last_batch, last_sync);
            st.in_flight = true;
            (
                std::mem::replace(&mut st.pending, spare_buf),
                std::mem::replace(&mut st.waiting, spare_waiting),
            )
        };
        let started = Instant::now();
        let result = {
            let mut io = lock(&inner.io);
            write_batch(inner, &mut io, &buf, &waiting)
        };
        last_sync = started.elapsed();
        last_batch = waiting.len();
        let last = waiting.last().map(|w| w.zxid);
        let mut st = lock(&inner.state);
        st.in_flight = false;
        let mut failed_too = Vec::new();
        let outcome = match result {
            Ok(()) => {
                if let Some(last) = last {
                    // I1: only now, after fdatasync returned, may the log claim it.
                    inner.durable.store(last.as_u64(), Ordering::SeqCst);
                }
                Ok(())
            }
            Err(err) => {
                tracing::error!(dir = %inner.dir.display(), error = %err, "log write failed; the log stops until reopened");
                let failed = WalError::Failed {
                    cause: Arc::new(err),
                };
                st.failed = Some(failed.clone());
                failed_too = std::mem::take(&mut st.waiting);
                st.pending.clear();
                Err(failed)
            }
        };
        inner.done.notify_all();
        drop(st);
        spare_waiting = resolve(waiting, &outcome);
        resolve(failed_too, &outcome);
        spare_buf = buf;
        spare_buf.clear();
    }
}

/// Waits briefly for a batch as large as the last one before writing.
///
/// Without this, a writer woken by the first of many appenders (all resolved
/// together by the previous fsync, all coming back within microseconds) syncs a
/// batch of one, and the others wait for a second fsync: batches alternate
/// between tiny and large, and every append pays two fsyncs. So when the last
/// batch had several records, the writer waits until as many are pending, for
/// at most half the last fsync's duration (capped at [`GATHER_WAIT_MAX`]). It is
/// PostgreSQL's `commit_delay`/`commit_siblings`, sized from what the log just
/// saw. A single appender never waits (its last batch had one record).
fn gather<'a>(
    inner: &'a Inner,
    mut st: MutexGuard<'a, State>,
    last_batch: usize,
    last_sync: Duration,
) -> MutexGuard<'a, State> {
    if last_batch <= 1 || st.waiting.len() >= last_batch {
        return st;
    }
    let deadline = Instant::now() + (last_sync / 2).min(GATHER_WAIT_MAX);
    while st.waiting.len() < last_batch && !st.shutdown {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break;
        }
        st.gather_target = Some(last_batch);
        st = inner
            .work
            .wait_timeout(st, left)
            .unwrap_or_else(PoisonError::into_inner)
            .0;
    }
    st.gather_target = None;
    st
}

/// Sends each waiter its outcome and keeps the emptied vector for reuse.
fn resolve(mut waiting: Vec<Waiter>, outcome: &Result<()>) -> Vec<Waiter> {
    for w in waiting.drain(..) {
        let msg = match outcome {
            Ok(()) => Ok(w.zxid),
            Err(e) => Err(e.clone()),
        };
        // A dropped Append is fine: nobody waits for it.
        let _ = w.tx.send(msg);
    }
    waiting
}

/// Writes one batch of encoded records into the segments and makes it durable.
///
/// Why fdatasync and not fsync: a segment's size is fixed when it is created
/// (preallocation, made durable with a full fsync before the segment is renamed
/// into place), so appends never change it. fdatasync flushes the written data and
/// the metadata needed to read it back (block allocation), which is everything a
/// record needs; what it skips (mtime) does not matter. A record that does not fit
/// goes to a new segment instead of growing the file.
///
/// Order when a batch crosses into a new segment: the old segment's part is
/// synced first, then the new segment is created, so a segment that is not the
/// last one is always complete on disk.
fn write_batch(inner: &Inner, io: &mut Io, buf: &[u8], waiting: &[Waiter]) -> Result<()> {
    let syncer = &*inner.syncer;
    let mut pos = 0usize;
    let mut run_start = 0usize;
    let mut prev = io.segs.last().map_or(io.start, |s| s.last);
    let mut run_records = 0u64;
    for w in waiting {
        let len = w.len as usize;
        let fits = match (io.active.as_ref(), io.segs.last()) {
            (Some(_), Some(seg)) => seg.end + (pos - run_start + len) as u64 <= seg.capacity,
            _ => false,
        };
        if !fits {
            flush_run(io, &buf[run_start..pos], prev, run_records, syncer)?;
            let capacity = inner
                .opts
                .segment_bytes
                .max(SEGMENT_HEADER_BYTES + len as u64);
            let header = SegmentHeader {
                first: w.zxid,
                prev,
            };
            let (file, seg) = create_segment(&inner.dir, header, capacity, syncer)?;
            tracing::debug!(path = %seg.path.display(), "new log segment");
            io.segs.push(seg);
            io.active = Some(file);
            run_start = pos;
            run_records = 0;
        }
        pos += len;
        prev = w.zxid;
        run_records += 1;
    }
    flush_run(io, &buf[run_start..pos], prev, run_records, syncer)
}

/// Writes `bytes` at the end of the active segment and fdatasyncs it, then
/// records the new durable end in memory.
fn flush_run(
    io: &mut Io,
    bytes: &[u8],
    last: Zxid,
    records: u64,
    syncer: &dyn Syncer,
) -> Result<()> {
    if bytes.is_empty() {
        return Ok(());
    }
    let (Some(file), Some(seg)) = (io.active.as_ref(), io.segs.last_mut()) else {
        unreachable!("a run is only collected into an open segment");
    };
    file.write_all_at(bytes, seg.end)
        .map_err(|e| WalError::io("write", &seg.path, e))?;
    syncer
        .sync_data(file, &seg.path)
        .map_err(|e| WalError::io("fdatasync", &seg.path, e))?;
    seg.end += bytes.len() as u64;
    seg.last = last;
    seg.records += records;
    Ok(())
}

/// The segment files in `dir`, sorted by first zxid.
fn list_segments(dir: &Path) -> Result<Vec<(Zxid, PathBuf)>> {
    let mut segs: Vec<(Zxid, PathBuf)> = list_dir(dir)?
        .into_iter()
        .filter_map(|(name, path)| parse_segment_name(&name).map(|z| (z, path)))
        .collect();
    segs.sort();
    Ok(segs)
}

fn read_start_file(dir: &Path) -> Result<Zxid> {
    let path = dir.join(START_FILE);
    match read_small_file(&path, START_MAGIC)? {
        None => Ok(Zxid::ZERO),
        Some(body) if body.len() == 8 => Ok(Zxid::from_u64(u64::from_le_bytes(
            body[..8].try_into().expect("8 bytes"),
        ))),
        Some(_) => Err(WalError::CorruptFile {
            path,
            reason: "bad length".to_owned(),
        }),
    }
}

fn write_start_file(dir: &Path, start: Zxid, syncer: &dyn Syncer) -> Result<()> {
    write_small_file(
        dir,
        START_FILE,
        START_MAGIC,
        &start.as_u64().to_le_bytes(),
        syncer,
    )
}

/// Where the records of a segment that are kept by a truncation end.
struct CutPoint {
    /// The segment's first zxid.
    first: Zxid,
    end: u64,
    last: Zxid,
    records: u64,
    file_len: u64,
}

/// Scans segment `path` for the records at or below `keep_through` that are
/// intact and contiguous; says where they end.
fn cut_point(path: &Path, keep_through: Zxid, opts: &LogOptions) -> Result<CutPoint> {
    let file = open_read(path)?;
    let file_len = file
        .metadata()
        .map_err(|e| WalError::io("stat", path, e))?
        .len();
    let header = read_header(&file, path)?;
    let mut prev = header.prev;
    let mut records = 0;
    let mut cursor = SegmentCursor::new(
        file,
        path.to_owned(),
        SEGMENT_HEADER_BYTES,
        file_len,
        opts.record_bytes_max,
    );
    let end = loop {
        match cursor.next_step(false)? {
            Step::Record { zxid, offset, .. } => {
                if zxid > keep_through || !zxid.is_next(prev) {
                    break offset;
                }
                prev = zxid;
                records += 1;
            }
            Step::End { offset } | Step::Bad { offset, .. } => break offset,
        }
    };
    Ok(CutPoint {
        first: header.first,
        end,
        last: prev,
        records,
        file_len,
    })
}

/// Carries out a rewrite on the files. Idempotent: recovery runs it again after a
/// crash, from whatever point the crash left. Returns where the kept records of
/// the last kept segment end, if a segment is kept.
fn apply_rewrite(
    dir: &Path,
    rewrite: Rewrite,
    opts: &LogOptions,
    syncer: &dyn Syncer,
) -> Result<Option<CutPoint>> {
    let (keep_through, start) = match rewrite {
        Rewrite::TruncateAfter { zxid, start } => (Some(zxid), start),
        Rewrite::Reset { start } => (None, start),
    };
    let segs = list_segments(dir)?;
    // Newest first: with the marker durable, any order would do; this one also
    // leaves a plain prefix behind.
    let mut removed = false;
    for (first, path) in segs.iter().rev() {
        if keep_through.is_none_or(|k| *first > k) {
            fs::remove_file(path).map_err(|e| WalError::io("remove", path, e))?;
            removed = true;
        }
    }
    if removed {
        syncer
            .sync_dir(dir)
            .map_err(|e| WalError::io("fsync directory", dir, e))?;
    }
    let mut kept: Vec<_> = segs
        .into_iter()
        .filter(|(first, _)| keep_through.is_some_and(|k| *first <= k))
        .collect();
    let mut cut = None;
    while let (Some(keep), Some((_, path))) = (keep_through, kept.last()) {
        let point = cut_point(path, keep, opts)?;
        if point.records == 0 {
            // Only damage (a repair) can leave a kept segment without a record.
            remove_durably(path, dir, syncer)?;
            kept.pop();
            continue;
        }
        if point.end < point.file_len {
            // Always cut, even if what follows is zeros already: cheaper than
            // reading the rest of the segment to find out.
            cut_segment(path, point.end, point.file_len, syncer)?;
        }
        cut = Some(point);
        break;
    }
    if kept.is_empty() {
        write_start_file(dir, start, syncer)?;
    }
    Ok(cut)
}

/// Brings the in-memory segment list in line with the files after a rewrite.
fn reload_after_rewrite(io: &mut Io, rewrite: Rewrite, cut: Option<CutPoint>) -> Result<()> {
    match (rewrite, cut) {
        (Rewrite::Reset { start }, _) => {
            io.segs.clear();
            io.start = start;
        }
        (Rewrite::TruncateAfter { start, .. }, None) => {
            io.segs.clear();
            io.start = start;
        }
        (Rewrite::TruncateAfter { .. }, Some(cut)) => {
            io.segs.retain(|s| s.first <= cut.first);
            let seg = io.segs.last_mut().expect("a segment was kept");
            seg.end = cut.end;
            seg.last = cut.last;
            seg.records = cut.records;
            seg.capacity = cut.file_len;
        }
    }
    io.active = match io.segs.last() {
        Some(seg) => Some(open_for_append(&seg.path)?),
        None => None,
    };
    Ok(())
}

/// The first damage a scan found.
enum Damage {
    /// In the last segment, from `offset` on: a torn tail to cut.
    Tail { offset: u64, reason: String },
    /// Anywhere else: the log is corrupt; `kept_through` is the last intact record
    /// before it.
    Corrupt { error: WalError, kept_through: Zxid },
}

/// Opens the log's files: finishes an interrupted rewrite, scans every segment,
/// cuts a torn tail, and repairs damage if asked to.
fn recover(dir: &Path, opts: &LogOptions, syncer: &dyn Syncer) -> Result<(Io, LogRecovery)> {
    let mut report = LogRecovery::default();
    for (name, path) in list_dir(dir)? {
        if name.ends_with(TMP_SUFFIX) {
            tracing::info!(path = %path.display(), "removing unfinished file");
            fs::remove_file(&path).map_err(|e| WalError::io("remove", &path, e))?;
        }
    }
    let marker = dir.join(REWRITE_FILE);
    if let Some(body) = read_small_file(&marker, REWRITE_MAGIC)? {
        let rewrite = Rewrite::decode(&body, &marker)?;
        tracing::warn!(?rewrite, "finishing a log rewrite interrupted by a crash");
        let _ = apply_rewrite(dir, rewrite, opts, syncer)?;
        remove_durably(&marker, dir, syncer)?;
        report.rewrite_completed = Some(rewrite);
    }
    // Each repair removes data, so this ends; the bound is a guard.
    for _ in 0..1000 {
        let (mut io, damage) = scan(dir, opts)?;
        match damage {
            None => return finish_recovery(dir, io, report, syncer),
            Some(Damage::Tail { offset, reason }) => {
                let seg = io.segs.last_mut().expect("a tail is in a segment");
                tracing::warn!(path = %seg.path.display(), offset, %reason, "cutting torn tail of the log");
                cut_segment(&seg.path, offset, seg.capacity, syncer)?;
                report.tail_cut = Some(TailCut {
                    path: seg.path.clone(),
                    offset,
                    reason,
                });
                return finish_recovery(dir, io, report, syncer);
            }
            Some(Damage::Corrupt {
                error,
                kept_through,
            }) => {
                if opts.recovery == RecoveryMode::Strict {
                    return Err(error);
                }
                tracing::warn!(%error, %kept_through, "repairing the log: dropping every record after the damage");
                let rewrite = Rewrite::TruncateAfter {
                    zxid: kept_through,
                    start: io.start,
                };
                write_small_file(dir, REWRITE_FILE, REWRITE_MAGIC, &rewrite.encode(), syncer)?;
                let _ = apply_rewrite(dir, rewrite, opts, syncer)?;
                remove_durably(&marker, dir, syncer)?;
                report.repaired.push(Repair {
                    damage: error,
                    kept_through,
                });
                io.segs.clear();
            }
        }
    }
    Err(WalError::Corrupt {
        path: dir.to_owned(),
        offset: 0,
        reason: "repair did not converge".to_owned(),
    })
}

/// Drops an empty last segment (created for a record that never became durable),
/// opens the last one for appending and fills in the report.
fn finish_recovery(
    dir: &Path,
    mut io: Io,
    mut report: LogRecovery,
    syncer: &dyn Syncer,
) -> Result<(Io, LogRecovery)> {
    if io.segs.last().is_some_and(|s| s.records == 0) {
        let seg = io.segs.pop().expect("checked");
        tracing::info!(path = %seg.path.display(), "removing a log segment with no durable record");
        if io.segs.is_empty() {
            write_start_file(dir, seg.prev, syncer)?;
        }
        remove_durably(&seg.path, dir, syncer)?;
    }
    if let Some(seg) = io.segs.last() {
        let file = open_for_append(&seg.path)?;
        // I1: what a crashed process wrote but never synced is in the page cache
        // and reads back like durable data. Sync it before it is reported as
        // durable, or a power failure after this open could take away records
        // this peer has already claimed. Earlier segments were synced before
        // their successor was created.
        syncer
            .sync_all(&file, &seg.path)
            .map_err(|e| WalError::io("fsync", &seg.path, e))?;
        io.active = Some(file);
    }
    syncer
        .sync_dir(dir)
        .map_err(|e| WalError::io("fsync directory", dir, e))?;
    report.start = io.start;
    report.end = io.segs.last().map_or(io.start, |s| s.last);
    report.segments = io.segs.len();
    report.records = io.segs.iter().map(|s| s.records).sum();
    report.bytes = io.segs.iter().map(|s| s.end - SEGMENT_HEADER_BYTES).sum();
    tracing::info!(dir = %dir.display(), start = %report.start, end = %report.end, segments = report.segments, records = report.records, "log recovered");
    Ok((io, report))
}

/// Reads every segment in order, checking headers, CRCs and contiguity. Stops at
/// the first damage.
fn scan(dir: &Path, opts: &LogOptions) -> Result<(Io, Option<Damage>)> {
    let files = list_segments(dir)?;
    let mut io = Io {
        start: Zxid::ZERO,
        segs: Vec::with_capacity(files.len()),
        active: None,
    };
    if files.is_empty() {
        io.start = read_start_file(dir)?;
        return Ok((io, None));
    }
    let count = files.len();
    for (i, (name_first, path)) in files.into_iter().enumerate() {
        let is_last = i + 1 == count;
        let expected_prev = io.segs.last().map(|s| s.last);
        let kept_through = expected_prev.unwrap_or(io.start);
        let corrupt = |error: WalError| Damage::Corrupt {
            error,
            kept_through,
        };
        let file = open_read(&path)?;
        let file_len = file
            .metadata()
            .map_err(|e| WalError::io("stat", &path, e))?
            .len();
        let header = match read_header(&file, &path) {
            Ok(h) => h,
            Err(e) => return Ok((io, Some(corrupt(e)))),
        };
        if i == 0 {
            io.start = header.prev;
        }
        if header.first != name_first {
            let e = WalError::Corrupt {
                path: path.clone(),
                offset: 0,
                reason: format!(
                    "header says first zxid {}, file name says {name_first}",
                    header.first
                ),
            };
            return Ok((io, Some(corrupt(e))));
        }
        if let Some(prev) = expected_prev {
            if header.prev != prev {
                let e = WalError::HistoryGap {
                    path: path.clone(),
                    offset: 0,
                    prev,
                    found: header.first,
                };
                return Ok((io, Some(corrupt(e))));
            }
        }
        let mut seg = Seg {
            path: path.clone(),
            first: header.first,
            prev: header.prev,
            last: header.prev,
            end: SEGMENT_HEADER_BYTES,
            capacity: file_len,
            records: 0,
        };
        let mut cursor = SegmentCursor::new(
            file,
            path.clone(),
            SEGMENT_HEADER_BYTES,
            file_len,
            opts.record_bytes_max,
        );
        let damage = scan_records(&mut cursor, &mut seg)?;
        io.segs.push(seg);
        match damage {
            None => {}
            Some(Damage::Tail { offset, reason }) if is_last => {
                return Ok((io, Some(Damage::Tail { offset, reason })));
            }
            Some(Damage::Tail { offset, reason }) => {
                let s = io.segs.last().expect("just pushed");
                let e = WalError::Corrupt {
                    path,
                    offset,
                    reason,
                };
                let kept_through = s.last;
                return Ok((
                    io,
                    Some(Damage::Corrupt {
                        error: e,
                        kept_through,
                    }),
                ));
            }
            Some(other) => return Ok((io, Some(other))),
        }
        let seg = io.segs.last().expect("just pushed");
        if seg.records == 0 && !is_last {
            let e = WalError::Corrupt {
                path: seg.path.clone(),
                offset: SEGMENT_HEADER_BYTES,
                reason: "a segment that is not the last one has no records".to_owned(),
            };
            return Ok((io, Some(corrupt(e))));
        }
    }
    Ok((io, None))
}

/// Reads the records of one segment into `seg`. Damage is returned as `Tail`
/// (bad bytes where a record should be, or stray bytes after the last record) or
/// as `Corrupt` (intact records that are not contiguous); the caller decides
/// whether a tail is allowed here.
fn scan_records(cursor: &mut SegmentCursor, seg: &mut Seg) -> Result<Option<Damage>> {
    loop {
        match cursor.next_step(false)? {
            Step::Record {
                zxid, offset, next, ..
            } => {
                let contiguous = zxid.is_next(seg.last) && (seg.records > 0 || zxid == seg.first);
                if !contiguous {
                    let error = WalError::HistoryGap {
                        path: cursor.path().to_owned(),
                        offset,
                        prev: seg.last,
                        found: zxid,
                    };
                    return Ok(Some(Damage::Corrupt {
                        error,
                        kept_through: seg.last,
                    }));
                }
                seg.last = zxid;
                seg.end = next;
                seg.records += 1;
            }
            Step::End { offset } => {
                debug_assert_eq!(offset, cursor.offset());
                let file = open_read(cursor.path())?;
                if has_nonzero(&file, cursor.path(), offset, seg.capacity)? {
                    return Ok(Some(Damage::Tail {
                        offset,
                        reason: "non-zero bytes after the last record".to_owned(),
                    }));
                }
                return Ok(None);
            }
            Step::Bad { offset, reason } => return Ok(Some(Damage::Tail { offset, reason })),
        }
    }
}

#[cfg(test)]
#[path = "log_tests.rs"]
mod tests;

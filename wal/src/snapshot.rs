//! Snapshot files: written atomically, checksummed, verified on load.
//!
//! ```text
//! +-------------------+-------------+---------------------------------------+
//! | magic "RZKSNAP1"  | zxid u64    | reserved u64 (0)                      |  header, 24 B
//! +-------------------+-------------+---------------------------------------+
//! | the caller's state, opaque bytes                                        |
//! +-------------------+-------------+---------------------------------------+
//! | data length u64   | crc32c u32  | "RZKE"                                |  trailer, 16 B
//! +-------------------+-------------+---------------------------------------+
//! crc = crc32c(header ++ data ++ data length)
//! ```
//!
//! The file is the unit that moves: a leader sends a learner the file's raw
//! bytes ([`SnapshotFile::read_raw_at`]), the learner verifies the whole file
//! before it installs it, and a state machine streams the state bytes out of it
//! ([`SnapshotFile::state_reader`]) with the checksum checked as it goes. No
//! step needs the whole state in memory.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use bytes::Bytes;
use rzk_zxid::Zxid;

use crate::durability::Syncer;
use crate::error::{Result, WalError};
use crate::format::{snapshot_name, TMP_SUFFIX};
use crate::meta::CatalogEntry;

const MAGIC: &[u8; 8] = b"RZKSNAP1";
const END_MAGIC: &[u8; 4] = b"RZKE";
/// Bytes of a snapshot file's header.
pub(crate) const HEADER_BYTES: usize = 24;
/// Bytes of a snapshot file's trailer.
pub(crate) const TRAILER_BYTES: usize = 16;
/// Header and trailer together: the size of a snapshot of the empty state.
pub(crate) const FRAME_BYTES: u64 = (HEADER_BYTES + TRAILER_BYTES) as u64;
/// A snapshot being written is made durable this many bytes at a time.
///
/// Why: on ext4 (data=ordered, delayed allocation) the blocks of a large file
/// are allocated when it is written back, and the next journal commit must
/// wait for all of that data. A snapshot of hundreds of MB written in one go
/// and synced at the end therefore holds the log's fdatasync (and so every
/// write) for as long as the disk takes to write the whole snapshot, 0.5-0.9 s
/// at 1M nodes. Syncing every few MB bounds what a log commit can wait for.
const SYNC_EVERY_BYTES: u64 = 4 << 20;
/// Bytes a state reader or verification reads per system call.
const READ_CHUNK_BYTES: usize = 1 << 20;

/// A snapshot in the catalog.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotInfo {
    /// The last transaction the snapshot includes.
    pub zxid: Zxid,
    /// Its file.
    pub path: PathBuf,
    /// The file's size.
    pub size_bytes: u64,
    /// The file's checksum (the crc32c its trailer holds).
    pub crc: u32,
}

/// A snapshot read back and verified.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoadedSnapshot {
    /// The last transaction the snapshot includes.
    pub zxid: Zxid,
    /// The caller's state, as it was written.
    pub data: Bytes,
}

/// The path of the snapshot at `zxid` in `dir`.
pub(crate) fn snapshot_path(dir: &Path, zxid: Zxid) -> PathBuf {
    dir.join(snapshot_name(zxid))
}

/// A temporary name for a snapshot at `zxid` that no other writer in this
/// process uses (a streamed snapshot and a SNAP install of the same zxid may
/// be written at once). Files ending in [`TMP_SUFFIX`] are removed on open.
pub(crate) fn unique_tmp_path(dir: &Path, zxid: Zxid, what: &str) -> PathBuf {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    dir.join(format!(
        "{}.{what}-{}-{n}{TMP_SUFFIX}",
        snapshot_name(zxid),
        std::process::id()
    ))
}

fn header(zxid: Zxid) -> [u8; HEADER_BYTES] {
    let mut h = [0u8; HEADER_BYTES];
    h[0..8].copy_from_slice(MAGIC);
    h[8..16].copy_from_slice(&zxid.as_u64().to_le_bytes());
    h
}

/// The limit on how fast a snapshot is written: a token bucket of bytes.
///
/// Why: a snapshot shares the disk with the log, and every log fdatasync ends
/// with a flush of the device's write cache, which then holds whatever the
/// snapshot wrote since the last one. Spreading the snapshot's bytes over time
/// keeps what a log commit waits for small (BENCHMARKS.md, "snapshots never
/// compete with the log").
#[derive(Debug)]
pub(crate) struct Pacer {
    bytes_per_sec: u64,
    /// Bytes that may be written now without waiting (at most one burst).
    allowance: f64,
    burst_bytes: f64,
    last: Instant,
}

impl Pacer {
    /// `None` when there is no limit.
    pub(crate) fn new(bytes_per_sec: Option<u64>) -> Option<Pacer> {
        let bytes_per_sec = bytes_per_sec?.max(1);
        // A tenth of a second of bytes, and at least one write of a MiB, may go
        // out at once: large enough that the limit costs few wake-ups.
        let burst_bytes = (bytes_per_sec as f64 / 10.0).max(f64::from(1u32 << 20));
        Some(Pacer {
            bytes_per_sec,
            allowance: burst_bytes,
            burst_bytes,
            last: Instant::now(),
        })
    }

    /// Takes `n` bytes; returns how long to wait before writing them.
    pub(crate) fn take(&mut self, n: usize) -> Duration {
        let now = Instant::now();
        let earned = now.duration_since(self.last).as_secs_f64() * self.bytes_per_sec as f64;
        self.last = now;
        self.allowance = (self.allowance + earned).min(self.burst_bytes) - n as f64;
        if self.allowance >= 0.0 {
            return Duration::ZERO;
        }
        Duration::from_secs_f64(-self.allowance / self.bytes_per_sec as f64)
    }
}

/// How a snapshot writer waits when its pacer says so. A streamed writer wakes
/// early when it is aborted.
pub(crate) trait Wait {
    /// Waits for `d`; returns false if the write should stop instead.
    fn wait(&mut self, d: Duration) -> bool;
}

/// Waiting by sleeping: for a writer nobody can abort.
pub(crate) struct Sleep;

impl Wait for Sleep {
    fn wait(&mut self, d: Duration) -> bool {
        std::thread::sleep(d);
        true
    }
}

/// Writes one snapshot file of the format above, from the state's bytes, under
/// a temporary name: checksum as written, durable every [`SYNC_EVERY_BYTES`],
/// at the pace of its [`Pacer`]. Dropping it without [`StateFileWriter::finish`]
/// removes the temporary file.
pub(crate) struct StateFileWriter {
    zxid: Zxid,
    tmp: PathBuf,
    file: Option<File>,
    syncer: Arc<dyn Syncer>,
    pacer: Option<Pacer>,
    crc: u32,
    /// State bytes written so far.
    len: u64,
    unsynced: u64,
}

impl StateFileWriter {
    /// Creates the temporary file `tmp` and writes the header.
    pub(crate) fn create(
        zxid: Zxid,
        tmp: PathBuf,
        syncer: Arc<dyn Syncer>,
        bytes_per_sec: Option<u64>,
    ) -> Result<StateFileWriter> {
        let file = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open(&tmp)
            .map_err(|e| WalError::io("create", &tmp, e))?;
        let h = header(zxid);
        let mut w = StateFileWriter {
            zxid,
            tmp,
            file: Some(file),
            syncer,
            pacer: Pacer::new(bytes_per_sec),
            crc: crc32c::crc32c(&h),
            len: 0,
            unsynced: 0,
        };
        w.put(&h)?;
        Ok(w)
    }

    fn file(&self) -> &File {
        self.file.as_ref().expect("open until finished")
    }

    fn put(&mut self, bytes: &[u8]) -> Result<()> {
        let tmp = &self.tmp;
        let mut file = self.file.as_ref().expect("open until finished");
        file.write_all(bytes)
            .map_err(|e| WalError::io("write", tmp, e))
    }

    /// Appends state bytes. Returns false if `wait` said to stop.
    pub(crate) fn write(&mut self, data: &[u8], wait: &mut dyn Wait) -> Result<bool> {
        // Pace in pieces of at most a MiB so a large chunk does not go out as
        // one burst.
        for piece in data.chunks(1 << 20) {
            if let Some(pacer) = &mut self.pacer {
                let d = pacer.take(piece.len());
                if !d.is_zero() && !wait.wait(d) {
                    return Ok(false);
                }
            }
            self.crc = crc32c::crc32c_append(self.crc, piece);
            self.len += piece.len() as u64;
            self.put(piece)?;
            self.unsynced += piece.len() as u64;
            if self.unsynced >= SYNC_EVERY_BYTES {
                self.syncer
                    .sync_data(self.file(), &self.tmp)
                    .map_err(|e| WalError::io("fsync", &self.tmp, e))?;
                self.unsynced = 0;
            }
        }
        Ok(true)
    }

    /// Appends everything `data` yields.
    pub(crate) fn write_from(&mut self, data: &mut dyn Read) -> Result<()> {
        let mut chunk = vec![0u8; 1 << 20];
        loop {
            let n = match data.read(&mut chunk) {
                Ok(0) => return Ok(()),
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(WalError::io("read snapshot data for", &self.tmp, e)),
            };
            self.write(&chunk[..n], &mut Sleep)?;
        }
    }

    /// Writes the trailer and makes the whole file durable (still under its
    /// temporary name).
    pub(crate) fn finish(mut self) -> Result<TmpSnapshot> {
        let len_bytes = self.len.to_le_bytes();
        let crc = crc32c::crc32c_append(self.crc, &len_bytes);
        let mut trailer = [0u8; TRAILER_BYTES];
        trailer[0..8].copy_from_slice(&len_bytes);
        trailer[8..12].copy_from_slice(&crc.to_le_bytes());
        trailer[12..16].copy_from_slice(END_MAGIC);
        self.put(&trailer)?;
        self.syncer
            .sync_all(self.file(), &self.tmp)
            .map_err(|e| WalError::io("fsync", &self.tmp, e))?;
        self.file = None;
        let entry = CatalogEntry {
            zxid: self.zxid,
            size_bytes: FRAME_BYTES + self.len,
            crc,
        };
        Ok(TmpSnapshot::new(entry, std::mem::take(&mut self.tmp)))
    }
}

impl Drop for StateFileWriter {
    fn drop(&mut self) {
        if self.file.take().is_some() {
            remove_quietly(&self.tmp);
        }
    }
}

/// Removes a temporary file nobody will use; a failure only leaves a file that
/// the next open removes.
pub(crate) fn remove_quietly(path: &Path) {
    if let Err(e) = fs::remove_file(path) {
        if e.kind() != io::ErrorKind::NotFound {
            tracing::warn!(path = %path.display(), error = %e, "could not remove a temporary snapshot file; the next open removes it");
        }
    }
}

/// A complete, durable snapshot file under its temporary name, not yet in the
/// catalog. Dropped without being committed, it removes the file.
#[derive(Debug)]
pub(crate) struct TmpSnapshot {
    pub(crate) entry: CatalogEntry,
    tmp: Option<PathBuf>,
}

impl TmpSnapshot {
    /// Takes charge of the complete temporary file `tmp` holding `entry`.
    pub(crate) fn new(entry: CatalogEntry, tmp: PathBuf) -> TmpSnapshot {
        TmpSnapshot {
            entry,
            tmp: Some(tmp),
        }
    }

    /// The temporary file.
    pub(crate) fn path(&self) -> &Path {
        self.tmp.as_deref().expect("present until committed")
    }

    /// Renames the file to `path` and fsyncs `dir`. From then on it is the
    /// caller's (a file not in the catalog is removed on the next open).
    pub(crate) fn rename_to(
        mut self,
        path: &Path,
        dir: &Path,
        syncer: &dyn Syncer,
    ) -> Result<CatalogEntry> {
        let tmp = self.tmp.take().expect("present until committed");
        if let Err(e) = fs::rename(&tmp, path) {
            remove_quietly(&tmp);
            return Err(WalError::io("rename", &tmp, e));
        }
        syncer
            .sync_dir(dir)
            .map_err(|e| WalError::io("fsync directory", dir, e))?;
        Ok(self.entry)
    }
}

impl Drop for TmpSnapshot {
    fn drop(&mut self) {
        if let Some(tmp) = self.tmp.take() {
            remove_quietly(&tmp);
        }
    }
}

/// Writes the snapshot at `zxid` from `data` under a temporary name, fsyncs it,
/// renames it into place and fsyncs the directory. Returns its catalog entry;
/// the snapshot exists for the store only once that entry is committed.
pub(crate) fn write_snapshot(
    dir: &Path,
    zxid: Zxid,
    data: &mut dyn Read,
    syncer: &Arc<dyn Syncer>,
    bytes_per_sec: Option<u64>,
) -> Result<CatalogEntry> {
    let tmp = unique_tmp_path(dir, zxid, "save");
    let mut w = StateFileWriter::create(zxid, tmp, Arc::clone(syncer), bytes_per_sec)?;
    w.write_from(data)?;
    w.finish()?
        .rename_to(&snapshot_path(dir, zxid), dir, &**syncer)
}

fn corrupt(path: &Path, reason: String) -> WalError {
    WalError::CorruptFile {
        path: path.to_owned(),
        reason,
    }
}

/// Reads exactly `buf.len()` bytes at `offset`; a short file is an error.
fn read_exact_at(file: &File, path: &Path, buf: &mut [u8], offset: u64) -> Result<()> {
    file.read_exact_at(buf, offset).map_err(|e| {
        if e.kind() == io::ErrorKind::UnexpectedEof {
            corrupt(
                path,
                format!("ends before offset {}", offset + buf.len() as u64),
            )
        } else {
            WalError::io("read", path, e)
        }
    })
}

/// What a snapshot file's header and trailer say.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Frame {
    pub(crate) zxid: Zxid,
    /// State bytes.
    pub(crate) data_len: u64,
    /// The checksum the trailer holds.
    pub(crate) crc: u32,
}

/// Checks the header and trailer of a file of `size` bytes (not the checksum
/// of the data).
pub(crate) fn decode_frame(
    path: &Path,
    head: &[u8; HEADER_BYTES],
    tail: &[u8; TRAILER_BYTES],
    size: u64,
) -> Result<Frame> {
    if size < FRAME_BYTES || &head[0..8] != MAGIC {
        return Err(corrupt(path, "not a snapshot file".to_owned()));
    }
    let zxid = Zxid::from_u64(u64::from_le_bytes(head[8..16].try_into().expect("8 bytes")));
    let data_len = u64::from_le_bytes(tail[0..8].try_into().expect("8 bytes"));
    let crc = u32::from_le_bytes(tail[8..12].try_into().expect("4 bytes"));
    if &tail[12..16] != END_MAGIC || data_len != size - FRAME_BYTES {
        return Err(corrupt(path, "bad trailer".to_owned()));
    }
    Ok(Frame {
        zxid,
        data_len,
        crc,
    })
}

/// The checksum of everything the trailer's crc covers, given the crc of the
/// header and data.
fn close_crc(crc: u32, data_len: u64) -> u32 {
    crc32c::crc32c_append(crc, &data_len.to_le_bytes())
}

/// Reads the snapshot of `entry` and checks it against its own checksum and the
/// catalog's record of it.
pub(crate) fn load_snapshot(dir: &Path, entry: &CatalogEntry) -> Result<LoadedSnapshot> {
    let file = SnapshotFile::open(snapshot_path(dir, entry.zxid), entry)?;
    let mut data = Vec::with_capacity(file.data_len() as usize);
    file.state_reader()
        .read_to_end(&mut data)
        .map_err(|e| file.read_error(e))?;
    Ok(LoadedSnapshot {
        zxid: entry.zxid,
        data: Bytes::from(data),
    })
}

#[cfg(test)]
thread_local! {
    /// Whole-file verifications run on this thread (tests count them).
    pub(crate) static VERIFY_PASSES: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// An open snapshot file of the catalog: its header, size and trailer were
/// checked when it was opened, the checksum of its data is checked by
/// [`SnapshotFile::verify`] and by every [`SnapshotFile::state_reader`].
///
/// It reads at offsets from one open descriptor, so it keeps working when the
/// file is purged or replaced meanwhile (an open file survives its unlink):
/// a SNAP transfer in progress is never broken by retention. Cloning is cheap
/// (the descriptor is shared).
#[derive(Debug, Clone)]
pub struct SnapshotFile {
    inner: Arc<FileInner>,
}

#[derive(Debug)]
struct FileInner {
    file: File,
    path: PathBuf,
    frame: Frame,
}

impl SnapshotFile {
    /// Opens `path` and checks that it is the snapshot `entry` describes.
    pub(crate) fn open(path: PathBuf, entry: &CatalogEntry) -> Result<SnapshotFile> {
        let file = File::open(&path).map_err(|e| WalError::io("open", &path, e))?;
        let size = file
            .metadata()
            .map_err(|e| WalError::io("stat", &path, e))?
            .len();
        if size != entry.size_bytes {
            return Err(corrupt(
                &path,
                format!(
                    "size is {size} bytes, the catalog says {}",
                    entry.size_bytes
                ),
            ));
        }
        let frame = read_frame(&file, &path, size)?;
        if frame.zxid != entry.zxid {
            return Err(corrupt(
                &path,
                format!("holds zxid {}, expected {}", frame.zxid, entry.zxid),
            ));
        }
        if frame.crc != entry.crc {
            return Err(corrupt(
                &path,
                format!(
                    "crc mismatch: stored {:#010x}, catalog {:#010x}",
                    frame.crc, entry.crc
                ),
            ));
        }
        Ok(SnapshotFile {
            inner: Arc::new(FileInner { file, path, frame }),
        })
    }

    /// The last transaction the snapshot includes.
    pub fn zxid(&self) -> Zxid {
        self.inner.frame.zxid
    }

    /// The size of the whole file (what a learner receives).
    pub fn size_bytes(&self) -> u64 {
        self.inner.frame.data_len + FRAME_BYTES
    }

    /// The size of the state machine's bytes in it.
    pub fn data_len(&self) -> u64 {
        self.inner.frame.data_len
    }

    /// The file's checksum, as its trailer and the catalog hold it.
    pub fn crc(&self) -> u32 {
        self.inner.frame.crc
    }

    /// Where the file was opened (it may have been purged since).
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// Reads the whole file and checks its checksum.
    pub fn verify(&self) -> Result<()> {
        #[cfg(test)]
        VERIFY_PASSES.with(|n| n.set(n.get() + 1));
        let mut reader = self.state_reader();
        let mut buf = vec![0u8; READ_CHUNK_BYTES];
        loop {
            match reader.read(&mut buf) {
                Ok(0) => return Ok(()),
                Ok(_) => {}
                Err(e) => return Err(self.read_error(e)),
            }
        }
    }

    fn read_error(&self, e: io::Error) -> WalError {
        match e.kind() {
            io::ErrorKind::InvalidData => corrupt(&self.inner.path, e.to_string()),
            _ => WalError::io("read", &self.inner.path, e),
        }
    }

    /// The raw bytes of the file at `offset` (header and trailer included), at
    /// most `len_max` of them: what a leader sends a learner, chunk by chunk.
    /// Empty at the end of the file.
    pub fn read_raw_at(&self, offset: u64, len_max: usize) -> Result<Bytes> {
        let size = self.size_bytes();
        let n = size.saturating_sub(offset).min(len_max as u64) as usize;
        let mut buf = vec![0u8; n];
        read_exact_at(&self.inner.file, &self.inner.path, &mut buf, offset)?;
        Ok(Bytes::from(buf))
    }

    /// A reader of the state machine's bytes. It fails (with
    /// [`io::ErrorKind::InvalidData`]) instead of returning the last bytes if
    /// the file's checksum does not match, so whoever reads to the end has
    /// read verified bytes: load into a new state, swap only on success.
    pub fn state_reader(&self) -> StateReader {
        StateReader {
            file: self.clone(),
            offset: HEADER_BYTES as u64,
            crc: crc32c::crc32c(&header(self.zxid())),
            done: false,
            verdict: Verdict::default(),
        }
    }
}

fn read_frame(file: &File, path: &Path, size: u64) -> Result<Frame> {
    if size < FRAME_BYTES {
        return Err(corrupt(path, format!("{size} bytes is too short")));
    }
    let mut head = [0u8; HEADER_BYTES];
    read_exact_at(file, path, &mut head, 0)?;
    let mut tail = [0u8; TRAILER_BYTES];
    read_exact_at(file, path, &mut tail, size - TRAILER_BYTES as u64)?;
    decode_frame(path, &head, &tail, size)
}

/// The state bytes of a [`SnapshotFile`], checksummed as they are read.
#[derive(Debug)]
pub struct StateReader {
    file: SnapshotFile,
    /// The file offset of the next state byte.
    offset: u64,
    /// crc of the header and the state bytes read so far.
    crc: u32,
    done: bool,
    /// What the check found, once every state byte was read; shared with
    /// whoever started the reader (a preload, see `crate::wal`).
    verdict: Verdict,
}

/// Whether a [`StateReader`] found its file's checksum right: unknown until
/// the reader has read every state byte.
#[derive(Debug, Clone, Default)]
pub(crate) struct Verdict(Arc<OnceLock<bool>>);

impl Verdict {
    /// `Some(true)`: every state byte was read and the checksum matched.
    pub(crate) fn get(&self) -> Option<bool> {
        self.0.get().copied()
    }
}

impl StateReader {
    /// State bytes not yet read.
    pub fn remaining_bytes(&self) -> u64 {
        self.end() - self.offset
    }

    /// The last transaction the snapshot includes.
    pub fn zxid(&self) -> Zxid {
        self.file.zxid()
    }

    /// The size of the state machine's bytes (all of them, read or not).
    pub fn data_len(&self) -> u64 {
        self.file.data_len()
    }

    /// The verdict of this reader's check, readable after it is moved away.
    pub(crate) fn verdict(&self) -> Verdict {
        self.verdict.clone()
    }

    fn end(&self) -> u64 {
        HEADER_BYTES as u64 + self.file.data_len()
    }

    /// Checks the checksum once every state byte has been read.
    fn check(&mut self) -> io::Result<()> {
        self.done = true;
        let actual = close_crc(self.crc, self.file.data_len());
        let _ = self.verdict.0.set(actual == self.file.crc());
        if actual == self.file.crc() {
            return Ok(());
        }
        Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!(
                "snapshot {} crc mismatch: stored {:#010x}, computed {actual:#010x}",
                self.file.zxid(),
                self.file.crc()
            ),
        ))
    }
}

impl Read for StateReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.done {
            return Ok(0);
        }
        let left = self.remaining_bytes();
        if left == 0 {
            self.check()?;
            return Ok(0);
        }
        let n = (buf.len() as u64).min(left) as usize;
        if n == 0 {
            return Ok(0);
        }
        self.file
            .inner
            .file
            .read_exact_at(&mut buf[..n], self.offset)
            .map_err(|e| {
                if e.kind() == io::ErrorKind::UnexpectedEof {
                    io::Error::new(io::ErrorKind::InvalidData, "snapshot file cut short")
                } else {
                    e
                }
            })?;
        self.crc = crc32c::crc32c_append(self.crc, &buf[..n]);
        self.offset += n as u64;
        if self.remaining_bytes() == 0 {
            // Checked with the last bytes, not on a later call: a reader that
            // knows where its data ends may never make that call.
            self.check()?;
        }
        Ok(n)
    }
}

/// Verifies, as they arrive in order, the raw bytes of a snapshot file that a
/// learner receives: the header's zxid, the length and checksum the sender
/// announced, and the trailer.
#[derive(Debug)]
pub(crate) struct RawCheck {
    zxid: Zxid,
    size_bytes: u64,
    crc_expected: u32,
    /// crc of the bytes before the last eight (the trailer's crc and end magic).
    crc: u32,
    received: u64,
    head: [u8; HEADER_BYTES],
    tail: [u8; TRAILER_BYTES],
}

impl RawCheck {
    pub(crate) fn new(zxid: Zxid, size_bytes: u64, crc_expected: u32) -> RawCheck {
        RawCheck {
            zxid,
            size_bytes,
            crc_expected,
            crc: 0,
            received: 0,
            head: [0; HEADER_BYTES],
            tail: [0; TRAILER_BYTES],
        }
    }

    /// Takes the next bytes of the file.
    pub(crate) fn update(&mut self, bytes: &[u8]) {
        let start = self.received;
        self.received += bytes.len() as u64;
        let covered_end = self.size_bytes.saturating_sub(8);
        let covered = covered_end.saturating_sub(start).min(bytes.len() as u64) as usize;
        self.crc = crc32c::crc32c_append(self.crc, &bytes[..covered]);
        copy_window(&mut self.head, 0, start, bytes);
        copy_window(
            &mut self.tail,
            self.size_bytes.saturating_sub(TRAILER_BYTES as u64),
            start,
            bytes,
        );
    }

    /// Checks the complete file; `path` names it in the error.
    pub(crate) fn finish(&self, path: &Path) -> Result<CatalogEntry> {
        if self.received != self.size_bytes {
            return Err(corrupt(
                path,
                format!(
                    "received {} bytes of a snapshot of {}",
                    self.received, self.size_bytes
                ),
            ));
        }
        let frame = decode_frame(path, &self.head, &self.tail, self.size_bytes)?;
        if frame.zxid != self.zxid {
            return Err(corrupt(
                path,
                format!("holds zxid {}, expected {}", frame.zxid, self.zxid),
            ));
        }
        if frame.crc != self.crc || frame.crc != self.crc_expected {
            return Err(corrupt(
                path,
                format!(
                    "crc mismatch: trailer {:#010x}, computed {:#010x}, announced {:#010x}",
                    frame.crc, self.crc, self.crc_expected
                ),
            ));
        }
        Ok(CatalogEntry {
            zxid: self.zxid,
            size_bytes: self.size_bytes,
            crc: frame.crc,
        })
    }
}

/// Copies the part of `bytes` (which start at file offset `start`) that falls
/// into `window` (which starts at file offset `at`).
fn copy_window(window: &mut [u8], at: u64, start: u64, bytes: &[u8]) {
    let end = start + bytes.len() as u64;
    let w_end = at + window.len() as u64;
    let lo = start.max(at);
    let hi = end.min(w_end);
    if lo >= hi {
        return;
    }
    let src = &bytes[(lo - start) as usize..(hi - start) as usize];
    window[(lo - at) as usize..(hi - at) as usize].copy_from_slice(src);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::durability::OsSyncer;

    fn written(dir: &Path, zxid: Zxid, data: &[u8]) -> (PathBuf, CatalogEntry) {
        let syncer: Arc<dyn Syncer> = Arc::new(OsSyncer);
        let entry = write_snapshot(dir, zxid, &mut &data[..], &syncer, None).unwrap();
        (snapshot_path(dir, zxid), entry)
    }

    #[test]
    fn state_reader_returns_the_data_and_checks_the_crc_with_the_last_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let z = Zxid::from_u64(0x1_0000_0009);
        let data: Vec<u8> = (0..3_000_000u32).map(|i| (i % 251) as u8).collect();
        let (path, entry) = written(dir.path(), z, &data);
        let file = SnapshotFile::open(path.clone(), &entry).unwrap();
        assert_eq!(file.size_bytes(), data.len() as u64 + FRAME_BYTES);
        let mut back = Vec::new();
        file.state_reader().read_to_end(&mut back).unwrap();
        assert_eq!(back, data);
        file.verify().unwrap();

        // Rot one state byte: the reader fails on the read that would end the data.
        let f = OpenOptions::new().write(true).open(&path).unwrap();
        f.write_all_at(b"\xff", 1000).unwrap();
        let mut reader = file.state_reader();
        let mut buf = vec![0u8; data.len() - 10];
        reader.read_exact(&mut buf).unwrap();
        let mut rest = [0u8; 10];
        let err = reader.read_exact(&mut rest).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidData, "{err}");
        assert!(matches!(file.verify(), Err(WalError::CorruptFile { .. })));
    }

    #[test]
    fn open_checks_size_zxid_and_trailer_against_the_catalog() {
        let dir = tempfile::tempdir().unwrap();
        let z = Zxid::from_u64(0x1_0000_0003);
        let (path, entry) = written(dir.path(), z, b"some state");
        let other = CatalogEntry {
            zxid: Zxid::from_u64(0x1_0000_0004),
            ..entry
        };
        let err = SnapshotFile::open(path.clone(), &other).unwrap_err();
        assert!(err.to_string().contains("holds zxid"), "{err}");
        let bad_crc = CatalogEntry {
            crc: entry.crc ^ 1,
            ..entry
        };
        assert!(SnapshotFile::open(path.clone(), &bad_crc).is_err());
        let f = OpenOptions::new().write(true).open(&path).unwrap();
        f.set_len(entry.size_bytes - 1).unwrap();
        let err = SnapshotFile::open(path, &entry).unwrap_err();
        assert!(err.to_string().contains("size is"), "{err}");
    }

    #[test]
    fn raw_reads_survive_the_unlink_of_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let z = Zxid::from_u64(0x1_0000_0003);
        let data = vec![7u8; 100_000];
        let (path, entry) = written(dir.path(), z, &data);
        let file = SnapshotFile::open(path.clone(), &entry).unwrap();
        let first = file.read_raw_at(0, 4096).unwrap();
        fs::remove_file(&path).unwrap();
        let mut raw = first.to_vec();
        loop {
            let chunk = file.read_raw_at(raw.len() as u64, 4096).unwrap();
            if chunk.is_empty() {
                break;
            }
            raw.extend_from_slice(&chunk);
        }
        assert_eq!(raw.len() as u64, entry.size_bytes);
        let mut check = RawCheck::new(z, entry.size_bytes, entry.crc);
        for piece in raw.chunks(777) {
            check.update(piece);
        }
        assert_eq!(check.finish(&path).unwrap(), entry);
    }

    #[test]
    fn raw_check_refuses_any_flipped_bit_a_short_file_and_another_zxid() {
        let dir = tempfile::tempdir().unwrap();
        let z = Zxid::from_u64(0x2_0000_0001);
        let (path, entry) = written(dir.path(), z, b"0123456789abcdef");
        let raw = fs::read(&path).unwrap();
        for bit in 0..raw.len() * 8 {
            let mut bad = raw.clone();
            bad[bit / 8] ^= 1 << (bit % 8);
            let mut check = RawCheck::new(z, entry.size_bytes, entry.crc);
            check.update(&bad);
            assert!(check.finish(&path).is_err(), "bit {bit} flip accepted");
        }
        let mut short = RawCheck::new(z, entry.size_bytes, entry.crc);
        short.update(&raw[..raw.len() - 1]);
        assert!(short.finish(&path).is_err());
        let mut other = RawCheck::new(Zxid::from_u64(0x2_0000_0002), entry.size_bytes, entry.crc);
        other.update(&raw);
        assert!(other.finish(&path).is_err());
    }

    #[test]
    fn pacer_spreads_bytes_over_time() {
        let mut p = Pacer::new(Some(10 << 20)).unwrap();
        // The burst (a MiB here) goes at once; the next MiB waits ~0.1 s.
        assert_eq!(p.take(1 << 20), Duration::ZERO);
        let d = p.take(1 << 20);
        assert!(
            d > Duration::from_millis(80) && d <= Duration::from_millis(101),
            "{d:?}"
        );
    }
}

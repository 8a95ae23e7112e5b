//! One segment file of the log: creating it and reading records from it.

use std::fs::{self, File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use bytes::{Bytes, BytesMut};
use rzk_zxid::Zxid;

use crate::durability::Syncer;
use crate::error::{Result, WalError};
use crate::format::{
    decode_record, segment_name, Decoded, SegmentHeader, RECORD_HEADER_BYTES, SEGMENT_HEADER_BYTES,
    TMP_SUFFIX,
};

/// How much a cursor reads at once.
const CHUNK_BYTES: usize = 1 << 20;

/// What the log knows about one of its segments.
#[derive(Debug, Clone)]
pub(crate) struct Seg {
    /// The file.
    pub path: PathBuf,
    /// Its first record's zxid (in its name and header).
    pub first: Zxid,
    /// The zxid its first record follows.
    pub prev: Zxid,
    /// Its last durable record's zxid; `prev` while it has none.
    pub last: Zxid,
    /// Byte offset just after its last durable record.
    pub end: u64,
    /// The file's (preallocated) size. Appends never change it, which is what
    /// makes `fdatasync` enough (see `Log::write_batch`).
    pub capacity: u64,
    /// Number of durable records.
    pub records: u64,
}

/// Creates segment `first` in `dir`, preallocated to `capacity` bytes, fully
/// durable (data, size and directory entry) before it is visible under its name.
///
/// It is written as `<name>.tmp` and renamed, so a segment file under its real
/// name always has a valid header; a crash leaves at most a `.tmp` that the next
/// open deletes.
pub(crate) fn create_segment(
    dir: &Path,
    header: SegmentHeader,
    capacity: u64,
    syncer: &dyn Syncer,
) -> Result<(File, Seg)> {
    let name = segment_name(header.first);
    let path = dir.join(&name);
    let tmp = dir.join(format!("{name}{TMP_SUFFIX}"));
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(&tmp)
        .map_err(|e| WalError::io("create", &tmp, e))?;
    file.write_all_at(&header.encode(), 0)
        .map_err(|e| WalError::io("write", &tmp, e))?;
    // Preallocation: the size is set once, here, and made durable with a full
    // fsync before any record is written. The file is sparse; writing into it
    // allocates blocks, which fdatasync does flush (Linux fdatasync(2) flushes
    // "metadata needed to allow a subsequent data retrieval", and block allocation
    // is such metadata; only the size would need fsync, and it never changes).
    file.set_len(capacity)
        .map_err(|e| WalError::io("preallocate", &tmp, e))?;
    syncer
        .sync_all(&file, &tmp)
        .map_err(|e| WalError::io("fsync", &tmp, e))?;
    fs::rename(&tmp, &path).map_err(|e| WalError::io("rename", &tmp, e))?;
    syncer
        .sync_dir(dir)
        .map_err(|e| WalError::io("fsync directory", dir, e))?;
    let seg = Seg {
        path,
        first: header.first,
        prev: header.prev,
        last: header.prev,
        end: SEGMENT_HEADER_BYTES,
        capacity,
        records: 0,
    };
    Ok((file, seg))
}

/// Cuts a segment at `offset`: everything after it becomes zeros, the size stays
/// `capacity`, and both are durable before this returns.
///
/// Shrinking then growing the file (rather than writing zeros) drops the old
/// blocks, so no stale record can ever be read back after a later, shorter write.
pub(crate) fn cut_segment(
    path: &Path,
    offset: u64,
    capacity: u64,
    syncer: &dyn Syncer,
) -> Result<()> {
    let file = OpenOptions::new()
        .write(true)
        .open(path)
        .map_err(|e| WalError::io("open", path, e))?;
    file.set_len(offset)
        .map_err(|e| WalError::io("truncate", path, e))?;
    file.set_len(capacity.max(offset))
        .map_err(|e| WalError::io("preallocate", path, e))?;
    syncer
        .sync_all(&file, path)
        .map_err(|e| WalError::io("fsync", path, e))
}

/// Opens a segment for appending.
pub(crate) fn open_for_append(path: &Path) -> Result<File> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .map_err(|e| WalError::io("open", path, e))
}

/// Reads and checks a segment's header.
pub(crate) fn read_header(file: &File, path: &Path) -> Result<SegmentHeader> {
    let mut h = [0u8; SEGMENT_HEADER_BYTES as usize];
    let n = read_full_at(file, &mut h, 0).map_err(|e| WalError::io("read", path, e))?;
    SegmentHeader::decode(&h[..n]).map_err(|reason| WalError::Corrupt {
        path: path.to_owned(),
        offset: 0,
        reason,
    })
}

fn read_full_at(file: &File, buf: &mut [u8], offset: u64) -> std::io::Result<usize> {
    let mut done = 0;
    while done < buf.len() {
        let n = file.read_at(&mut buf[done..], offset + done as u64)?;
        if n == 0 {
            break;
        }
        done += n;
    }
    Ok(done)
}

/// Whether any byte in `[from, to)` of `file` is not zero.
pub(crate) fn has_nonzero(file: &File, path: &Path, from: u64, to: u64) -> Result<bool> {
    let mut buf = vec![0u8; CHUNK_BYTES];
    let mut pos = from;
    while pos < to {
        let want = ((to - pos) as usize).min(buf.len());
        let n =
            read_full_at(file, &mut buf[..want], pos).map_err(|e| WalError::io("read", path, e))?;
        if buf[..n].iter().any(|&b| b != 0) {
            return Ok(true);
        }
        if n < want {
            return Ok(false);
        }
        pos += n as u64;
    }
    Ok(false)
}

/// One step of reading a segment.
#[derive(Debug)]
pub(crate) enum Step {
    /// A record with a valid CRC.
    Record {
        /// Its zxid.
        zxid: Zxid,
        /// Where it starts.
        offset: u64,
        /// Where the next one starts.
        next: u64,
        /// Its payload, when asked for.
        payload: Option<Bytes>,
    },
    /// No more records: a zero header, or the read limit at a record boundary.
    End {
        /// Where the records end.
        offset: u64,
    },
    /// Damaged or torn bytes where a record should start.
    Bad {
        /// Where.
        offset: u64,
        /// What is wrong.
        reason: String,
    },
}

/// Reads records from a segment, one chunk at a time: the log is never loaded
/// whole into memory.
pub(crate) struct SegmentCursor {
    file: File,
    path: PathBuf,
    /// Bytes read and not yet consumed; `buf[0]` is at file offset `offset`.
    buf: BytesMut,
    offset: u64,
    /// Nothing at or beyond this offset is read.
    limit: u64,
    record_bytes_max: usize,
}

impl SegmentCursor {
    /// A cursor at `offset` that reads no further than `limit`.
    pub(crate) fn new(
        file: File,
        path: PathBuf,
        offset: u64,
        limit: u64,
        record_bytes_max: usize,
    ) -> SegmentCursor {
        SegmentCursor {
            file,
            path,
            buf: BytesMut::new(),
            offset,
            limit,
            record_bytes_max,
        }
    }

    /// The file offset of the next unread record.
    pub(crate) fn offset(&self) -> u64 {
        self.offset
    }

    /// The file.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// Reads more bytes; returns false at the limit or the end of the file.
    fn fill(&mut self, need: usize) -> Result<bool> {
        let read_pos = self.offset + self.buf.len() as u64;
        if read_pos >= self.limit {
            return Ok(false);
        }
        let want = need
            .max(CHUNK_BYTES)
            .min((self.limit - read_pos).min(usize::MAX as u64) as usize);
        let old = self.buf.len();
        self.buf.reserve(want);
        self.buf.resize(old + want, 0);
        let n = read_full_at(&self.file, &mut self.buf[old..], read_pos)
            .map_err(|e| WalError::io("read", &self.path, e))?;
        self.buf.truncate(old + n);
        if n == 0 {
            // The file is shorter than the limit.
            self.limit = read_pos;
        }
        Ok(n > 0)
    }

    /// The next record, or where the records end.
    pub(crate) fn next_step(&mut self, keep_payload: bool) -> Result<Step> {
        loop {
            match decode_record(&self.buf, self.record_bytes_max) {
                Decoded::Record { zxid, total } => {
                    let offset = self.offset;
                    let rec = self.buf.split_to(total);
                    self.offset += total as u64;
                    let payload = keep_payload.then(|| rec.freeze().slice(RECORD_HEADER_BYTES..));
                    return Ok(Step::Record {
                        zxid,
                        offset,
                        next: self.offset,
                        payload,
                    });
                }
                Decoded::End => {
                    return Ok(Step::End {
                        offset: self.offset,
                    })
                }
                Decoded::Bad(reason) => {
                    return Ok(Step::Bad {
                        offset: self.offset,
                        reason,
                    })
                }
                Decoded::Incomplete { total } => {
                    let need = total.unwrap_or(RECORD_HEADER_BYTES) - self.buf.len();
                    if self.fill(need)? {
                        continue;
                    }
                    return Ok(self.at_limit());
                }
            }
        }
    }

    /// The limit was reached inside a record: a clean end if what is left is zeros.
    fn at_limit(&self) -> Step {
        if self.buf.iter().all(|&b| b == 0) {
            return Step::End {
                offset: self.offset,
            };
        }
        Step::Bad {
            offset: self.offset,
            reason: format!(
                "torn record: {} bytes before the end of the readable data at {}",
                self.buf.len(),
                self.limit
            ),
        }
    }
}

//! Streaming the log's records for replay and DIFF sync.

use std::collections::VecDeque;
use std::io;
use std::path::Path;
use std::sync::Arc;

use bytes::Bytes;
use rzk_zxid::Zxid;

use crate::error::{Result, WalError};
use crate::format::SEGMENT_HEADER_BYTES;
use crate::log::Inner;
use crate::segment::{Seg, SegmentCursor, Step};

/// One record of the log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// Its zxid.
    pub zxid: Zxid,
    /// Its payload, as appended.
    pub payload: Bytes,
}

/// An iterator over durable records, in zxid order, from [`crate::Log::read_from`].
///
/// It reads one chunk (1 MiB) at a time. Every record's CRC and its contiguity with
/// the one before are checked again as it is read. If the log is truncated or reset
/// while the reader runs, it ends with [`WalError::Rewritten`]; if a segment it
/// still needs is purged, with [`WalError::Purged`]. After an error it yields
/// nothing more.
pub struct LogReader {
    inner: Arc<Inner>,
    generation: u64,
    segs: VecDeque<Seg>,
    /// Where to start in the first segment.
    first_offset: u64,
    cursor: Option<(SegmentCursor, u64)>,
    /// The last record read from disk.
    prev: Zxid,
    done: bool,
    /// Records (or the error that ended them) read from disk ahead of the
    /// caller ([`LogReader::read_all_ahead`]), yielded first.
    ahead: VecDeque<Result<Record>>,
    /// The last record yielded.
    yielded: Zxid,
}

impl std::fmt::Debug for LogReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LogReader")
            .field("after", &self.prev)
            .field("segments_left", &self.segs.len())
            .finish()
    }
}

impl LogReader {
    pub(crate) fn new(
        inner: Arc<Inner>,
        generation: u64,
        segs: Vec<Seg>,
        first_offset: u64,
        after: Zxid,
    ) -> LogReader {
        LogReader {
            inner,
            generation,
            segs: segs.into(),
            first_offset,
            cursor: None,
            prev: after,
            done: false,
            ahead: VecDeque::new(),
            yielded: after,
        }
    }

    /// The zxid of the last record yielded (the one the reader started after, at
    /// first).
    pub fn position(&self) -> Zxid {
        self.yielded
    }

    /// Reads up to `records_max` records and about `bytes_max` payload bytes
    /// now (at least one record while `records_max > 0`), into memory, to be
    /// yielded first (the rest is read as before): the rebuild reads the
    /// log's tail while a preload still decodes the snapshot.
    pub(crate) fn read_ahead(mut self, records_max: usize, bytes_max: usize) -> LogReader {
        let mut bytes = 0usize;
        while self.ahead.len() < records_max && (self.ahead.is_empty() || bytes < bytes_max) {
            let Some(item) = self.next_from_disk() else {
                break;
            };
            bytes += item.as_ref().map_or(0, |r| r.payload.len());
            self.ahead.push_back(item);
        }
        self
    }

    /// Records read ahead and not yet yielded (tests).
    #[cfg(test)]
    pub(crate) fn read_ahead_len(&self) -> usize {
        self.ahead.len()
    }

    fn next_from_disk(&mut self) -> Option<Result<Record>> {
        if self.done {
            return None;
        }
        match self.step() {
            Ok(Some(r)) => Some(Ok(r)),
            Ok(None) => {
                self.done = true;
                None
            }
            Err(e) => {
                self.done = true;
                Some(Err(e))
            }
        }
    }

    /// An error for bytes that do not read back as they were written: the log
    /// was rewritten under the reader, or the disk is damaged.
    fn damaged(&self, path: &Path, offset: u64, reason: String) -> WalError {
        if self.inner.generation() != self.generation {
            return WalError::Rewritten;
        }
        WalError::Corrupt {
            path: path.to_owned(),
            offset,
            reason,
        }
    }

    fn open_next(&mut self) -> Result<bool> {
        let Some(seg) = self.segs.pop_front() else {
            return Ok(false);
        };
        let offset = std::mem::replace(&mut self.first_offset, SEGMENT_HEADER_BYTES);
        let file = match std::fs::File::open(&seg.path) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                if self.inner.generation() != self.generation {
                    return Err(WalError::Rewritten);
                }
                return Err(WalError::Purged {
                    zxid: self.prev,
                    start: seg.last,
                });
            }
            Err(e) => return Err(WalError::io("open", &seg.path, e)),
        };
        let cursor = SegmentCursor::new(
            file,
            seg.path.clone(),
            offset,
            seg.end,
            self.inner.record_bytes_max(),
        );
        self.cursor = Some((cursor, seg.end));
        Ok(true)
    }

    fn step(&mut self) -> Result<Option<Record>> {
        loop {
            if self.cursor.is_none() && !self.open_next()? {
                return Ok(None);
            }
            let (cursor, end) = self.cursor.as_mut().expect("opened above");
            let end = *end;
            match cursor.next_step(true)? {
                Step::Record {
                    zxid,
                    offset,
                    payload,
                    ..
                } => {
                    if !zxid.is_next(self.prev) {
                        let path = cursor.path().to_owned();
                        let reason = format!("{zxid} does not follow {}", self.prev);
                        return Err(self.damaged(&path, offset, reason));
                    }
                    self.prev = zxid;
                    let payload = payload.expect("asked for the payload");
                    return Ok(Some(Record { zxid, payload }));
                }
                Step::End { offset } if offset == end => self.cursor = None,
                Step::End { offset } => {
                    let path = cursor.path().to_owned();
                    let reason = format!("records end at {offset}, expected {end}");
                    return Err(self.damaged(&path, offset, reason));
                }
                Step::Bad { offset, reason } => {
                    let path = cursor.path().to_owned();
                    return Err(self.damaged(&path, offset, reason));
                }
            }
        }
    }
}

impl Iterator for LogReader {
    type Item = Result<Record>;

    fn next(&mut self) -> Option<Self::Item> {
        let item = match self.ahead.pop_front() {
            Some(item) => item,
            None => self.next_from_disk()?,
        };
        if let Ok(r) = &item {
            self.yielded = r.zxid;
        }
        Some(item)
    }
}

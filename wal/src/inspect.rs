//! Read-only inspection of a log directory and of snapshot files, for tools
//! (`rzk log dump`, `rzk snapshot dump`) and for looking at a copy of a data
//! directory.
//!
//! Nothing here writes: no torn tail is cut, no unfinished rewrite is
//! finished, no temporary file is removed, no directory is created and no
//! lock is taken. Where [`crate::Log::open`] would change something, the
//! inspection says what and where instead ([`LogItem::Damage`],
//! [`LogInspection::pending_rewrite`], [`LogInspection::unfinished_files`]).
//! Run next to a live server, it reads whatever the files hold at that moment.
//!
//! ```no_run
//! use rzk_wal::inspect::{open_snapshot, read_log, LogItem};
//!
//! # fn run() -> rzk_wal::Result<()> {
//! for item in read_log("/var/lib/rzk/log")? {
//!     match item? {
//!         LogItem::Segment { path, first, .. } => println!("{} starts at {first}", path.display()),
//!         LogItem::Record { zxid, payload, .. } => println!("{zxid}: {} bytes", payload.len()),
//!         LogItem::Damage { path, offset, reason, .. } => println!("{}@{offset}: {reason}", path.display()),
//!     }
//! }
//! let snap = open_snapshot("/var/lib/rzk/snap/snapshot.100000005")?;
//! snap.verify()?; // the whole file against its checksum
//! # Ok(()) }
//! ```

use std::collections::VecDeque;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use bytes::Bytes;
use rzk_zxid::Zxid;

use crate::error::{Result, WalError};
use crate::format::{
    list_dir, parse_segment_name, read_small_file, SegmentHeader, SEGMENT_HEADER_BYTES, TMP_SUFFIX,
};
use crate::log::{Rewrite, REWRITE_FILE, REWRITE_MAGIC, START_FILE, START_MAGIC};
use crate::meta::CatalogEntry;
use crate::segment::{has_nonzero, SegmentCursor, Step};
use crate::snapshot::{decode_frame, SnapshotFile, HEADER_BYTES, TRAILER_BYTES};

/// The largest record an inspection accepts: the default of
/// [`crate::LogOptions::record_bytes_max`]. A length field above it is
/// reported as damage, as open would.
const RECORD_BYTES_MAX: usize = 16 << 20;

/// What [`crate::Log::open`] would do about a [`LogItem::Damage`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnOpen {
    /// Cut it off: it is the torn tail of the last segment (a crash while
    /// appending), and the records before it are kept.
    CutTail,
    /// Refuse to open (unless repair is asked for): damage before the tail, or
    /// records that do not follow each other.
    Refuse,
}

/// One thing found while reading a log directory, in file order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LogItem {
    /// A segment file begins (its header was read and checked).
    Segment {
        /// The file.
        path: PathBuf,
        /// The zxid of its first record.
        first: Zxid,
        /// The zxid its first record follows.
        prev: Zxid,
        /// The file's size (segments are preallocated).
        size_bytes: u64,
    },
    /// A record whose CRC matches.
    Record {
        /// Where it starts in its segment.
        offset: u64,
        /// Its zxid.
        zxid: Zxid,
        /// Its payload, as appended.
        payload: Bytes,
    },
    /// Bytes that are not what open accepts. The inspection goes on with the
    /// next segment file.
    Damage {
        /// The file.
        path: PathBuf,
        /// Where in it.
        offset: u64,
        /// What is wrong.
        reason: String,
        /// What open would do about it.
        on_open: OnOpen,
    },
}

/// The items of a log directory ([`read_log`]): an iterator over
/// `Result<LogItem>`; an error is an operating-system error (the files could
/// not be read), after which it yields nothing more.
#[derive(Debug)]
pub struct LogInspection {
    files: VecDeque<(Zxid, PathBuf)>,
    /// The segment being read, its path, whether it is the last one, its size.
    current: Option<Current>,
    /// The last record seen, for the contiguity check.
    prev: Option<Zxid>,
    start: Zxid,
    pending_rewrite: Option<Rewrite>,
    unfinished: Vec<PathBuf>,
    failed: bool,
}

struct Current {
    cursor: SegmentCursor,
    path: PathBuf,
    is_last: bool,
    size_bytes: u64,
    /// The zxid its header says its first record has.
    first: Zxid,
    records: u64,
}

impl std::fmt::Debug for Current {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Current")
            .field("path", &self.path)
            .field("offset", &self.cursor.offset())
            .finish()
    }
}

/// Reads the log directory `dir` (the directory that holds the `log.<zxid>`
/// segments) without changing anything in it.
pub fn read_log(dir: impl AsRef<Path>) -> Result<LogInspection> {
    let dir = dir.as_ref();
    let mut files = Vec::new();
    let mut unfinished = Vec::new();
    for (name, path) in list_dir(dir)? {
        if name.ends_with(TMP_SUFFIX) {
            unfinished.push(path);
        } else if let Some(first) = parse_segment_name(&name) {
            files.push((first, path));
        }
    }
    files.sort();
    unfinished.sort();
    let pending_rewrite = match read_small_file(&dir.join(REWRITE_FILE), REWRITE_MAGIC)? {
        Some(body) => Some(Rewrite::decode(&body, &dir.join(REWRITE_FILE))?),
        None => None,
    };
    let start = match read_small_file(&dir.join(START_FILE), START_MAGIC)? {
        Some(body) if body.len() == 8 => {
            Zxid::from_u64(u64::from_le_bytes(body[..8].try_into().expect("8 bytes")))
        }
        Some(_) => {
            return Err(WalError::CorruptFile {
                path: dir.join(START_FILE),
                reason: "bad length".to_owned(),
            })
        }
        None => Zxid::ZERO,
    };
    Ok(LogInspection {
        files: files.into(),
        current: None,
        prev: None,
        start,
        pending_rewrite,
        unfinished,
        failed: false,
    })
}

impl LogInspection {
    /// Where the log starts when it has no segment (the `log-start` file,
    /// written when an installed snapshot reset the log); zero if absent. With
    /// segments, the first [`LogItem::Segment`]'s `prev` is the start.
    pub fn start_file(&self) -> Zxid {
        self.start
    }

    /// A truncation or reset that a crash interrupted: the next open finishes
    /// it, so the records it drops are still listed here.
    pub fn pending_rewrite(&self) -> Option<Rewrite> {
        self.pending_rewrite
    }

    /// Temporary files the next open removes (never read).
    pub fn unfinished_files(&self) -> &[PathBuf] {
        &self.unfinished
    }

    fn damage(&mut self, offset: u64, reason: String, on_open: OnOpen) -> LogItem {
        let cur = self.current.take().expect("damage is found in a segment");
        // The rest of this segment is not read, so the next one is not
        // checked against where the damage stopped the reading (that would
        // report the same damage again as a gap); it starts after its own
        // header's `prev`.
        self.prev = None;
        LogItem::Damage {
            path: cur.path,
            offset,
            reason,
            on_open,
        }
    }

    /// Opens the next segment and checks its header.
    fn open_next(&mut self) -> Result<Option<LogItem>> {
        let Some((name_first, path)) = self.files.pop_front() else {
            return Ok(None);
        };
        let file = File::open(&path).map_err(|e| WalError::io("open", &path, e))?;
        let size_bytes = file
            .metadata()
            .map_err(|e| WalError::io("stat", &path, e))?
            .len();
        let mut h = [0u8; SEGMENT_HEADER_BYTES as usize];
        let n = read_up_to(&file, &path, &mut h)?;
        let refuse = |reason: String| LogItem::Damage {
            path: path.clone(),
            offset: 0,
            reason,
            on_open: OnOpen::Refuse,
        };
        let header = match SegmentHeader::decode(&h[..n]) {
            Ok(h) => h,
            Err(reason) => return Ok(Some(refuse(reason))),
        };
        if header.first != name_first {
            return Ok(Some(refuse(format!(
                "header says first zxid {}, file name says {name_first}",
                header.first
            ))));
        }
        if let Some(prev) = self.prev {
            if header.prev != prev {
                return Ok(Some(refuse(format!(
                    "the segment follows {}, the previous one ends at {prev}: the log has a gap",
                    header.prev
                ))));
            }
        }
        self.prev = Some(header.prev);
        self.current = Some(Current {
            cursor: SegmentCursor::new(
                file,
                path.clone(),
                SEGMENT_HEADER_BYTES,
                size_bytes,
                RECORD_BYTES_MAX,
            ),
            path: path.clone(),
            is_last: self.files.is_empty(),
            size_bytes,
            first: header.first,
            records: 0,
        });
        Ok(Some(LogItem::Segment {
            path,
            first: header.first,
            prev: header.prev,
            size_bytes,
        }))
    }

    /// The next item of the segment being read.
    fn step(&mut self) -> Result<Option<LogItem>> {
        let cur = self.current.as_mut().expect("a segment is open");
        let tail = if cur.is_last {
            OnOpen::CutTail
        } else {
            OnOpen::Refuse
        };
        match cur.cursor.next_step(true)? {
            Step::Record {
                zxid,
                offset,
                payload,
                ..
            } => {
                let prev = self.prev.unwrap_or(Zxid::ZERO);
                let first_ok = cur.records > 0 || zxid == cur.first;
                if !zxid.is_next(prev) || !first_ok {
                    let reason = format!("{zxid} does not follow {prev}: the log has a gap");
                    return Ok(Some(self.damage(offset, reason, OnOpen::Refuse)));
                }
                cur.records += 1;
                self.prev = Some(zxid);
                Ok(Some(LogItem::Record {
                    offset,
                    zxid,
                    payload: payload.expect("asked for"),
                }))
            }
            Step::End { offset } => {
                let file = File::open(&cur.path).map_err(|e| WalError::io("open", &cur.path, e))?;
                if has_nonzero(&file, &cur.path, offset, cur.size_bytes)? {
                    let reason = "non-zero bytes after the last record".to_owned();
                    return Ok(Some(self.damage(offset, reason, tail)));
                }
                if cur.records == 0 && !cur.is_last {
                    let reason = "a segment that is not the last one has no records".to_owned();
                    return Ok(Some(self.damage(offset, reason, OnOpen::Refuse)));
                }
                self.current = None;
                Ok(None)
            }
            Step::Bad { offset, reason } => Ok(Some(self.damage(offset, reason, tail))),
        }
    }
}

impl Iterator for LogInspection {
    type Item = Result<LogItem>;

    fn next(&mut self) -> Option<Result<LogItem>> {
        if self.failed {
            return None;
        }
        loop {
            let item = if self.current.is_some() {
                self.step()
            } else {
                match self.open_next() {
                    Ok(None) => return None,
                    other => other,
                }
            };
            match item {
                Ok(Some(item)) => return Some(Ok(item)),
                Ok(None) => continue,
                Err(e) => {
                    self.failed = true;
                    return Some(Err(e));
                }
            }
        }
    }
}

fn read_up_to(file: &File, path: &Path, buf: &mut [u8]) -> Result<usize> {
    let mut done = 0;
    while done < buf.len() {
        let n = file
            .read_at(&mut buf[done..], done as u64)
            .map_err(|e| WalError::io("read", path, e))?;
        if n == 0 {
            break;
        }
        done += n;
    }
    Ok(done)
}

/// Opens a snapshot file by its path alone, without the catalog (which lives
/// in sled and cannot be opened without writing): its header and trailer are
/// checked now, its checksum by [`SnapshotFile::verify`] and by every
/// [`SnapshotFile::state_reader`]. Works on a copied file too.
pub fn open_snapshot(path: impl AsRef<Path>) -> Result<SnapshotFile> {
    let path = path.as_ref();
    let file = File::open(path).map_err(|e| WalError::io("open", path, e))?;
    let size = file
        .metadata()
        .map_err(|e| WalError::io("stat", path, e))?
        .len();
    let corrupt = |reason: String| WalError::CorruptFile {
        path: path.to_owned(),
        reason,
    };
    if size < (HEADER_BYTES + TRAILER_BYTES) as u64 {
        return Err(corrupt(format!(
            "{size} bytes is too short for a snapshot file"
        )));
    }
    let mut head = [0u8; HEADER_BYTES];
    file.read_exact_at(&mut head, 0)
        .map_err(|e| WalError::io("read", path, e))?;
    let mut tail = [0u8; TRAILER_BYTES];
    file.read_exact_at(&mut tail, size - TRAILER_BYTES as u64)
        .map_err(|e| WalError::io("read", path, e))?;
    let frame = decode_frame(path, &head, &tail, size)?;
    let entry = CatalogEntry {
        zxid: frame.zxid,
        size_bytes: size,
        crc: frame.crc,
    };
    SnapshotFile::open(path.to_owned(), &entry)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Log, LogOptions, Wal, WalOptions};
    use rzk_zxid::{Counter, Epoch};

    fn z(c: u32) -> Zxid {
        Zxid::new(Epoch(1), Counter(c))
    }

    /// Every file under `dir` with its bytes, to check that nothing changed.
    fn files(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
        let mut out = Vec::new();
        let mut stack = vec![dir.to_owned()];
        while let Some(d) = stack.pop() {
            for e in std::fs::read_dir(&d).unwrap().flatten() {
                let p = e.path();
                if p.is_dir() {
                    stack.push(p);
                } else {
                    out.push((p.clone(), std::fs::read(&p).unwrap()));
                }
            }
        }
        out.sort();
        out
    }

    fn small_log(dir: &Path, n: u32) -> PathBuf {
        let opts = LogOptions {
            segment_bytes: 4096,
            unsafe_no_fsync: true,
            ..LogOptions::default()
        };
        let (log, _) = Log::open(dir, opts).unwrap();
        for c in 1..=n {
            log.append(z(c), Bytes::from(vec![c as u8; 300]))
                .unwrap()
                .wait()
                .unwrap();
        }
        let last = log.segments().last().unwrap().path.clone();
        drop(log);
        last
    }

    fn records(items: &[LogItem]) -> Vec<Zxid> {
        items
            .iter()
            .filter_map(|i| match i {
                LogItem::Record { zxid, .. } => Some(*zxid),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn reads_every_record_of_every_segment() {
        let dir = tempfile::tempdir().unwrap();
        small_log(dir.path(), 30);
        let items: Vec<LogItem> = read_log(dir.path()).unwrap().map(|i| i.unwrap()).collect();
        assert_eq!(records(&items), (1..=30).map(z).collect::<Vec<_>>());
        let segments = items
            .iter()
            .filter(|i| matches!(i, LogItem::Segment { .. }))
            .count();
        assert!(segments > 1, "the test wants several segments");
        assert!(!items.iter().any(|i| matches!(i, LogItem::Damage { .. })));
        match &items[1] {
            LogItem::Record { payload, .. } => assert_eq!(payload[..], [1u8; 300][..]),
            other => panic!("{other:?}"),
        }
    }

    /// A torn tail is reported where open would cut it, and the files stay
    /// as they were (open cuts it: checked by opening afterwards).
    #[test]
    fn a_torn_tail_is_reported_and_left_alone() {
        let dir = tempfile::tempdir().unwrap();
        let last = small_log(dir.path(), 30);
        let f = std::fs::OpenOptions::new().write(true).open(&last).unwrap();
        // Half a record after the last one.
        let end = {
            let items: Vec<LogItem> = read_log(dir.path()).unwrap().map(|i| i.unwrap()).collect();
            match items.last().unwrap() {
                LogItem::Record {
                    offset, payload, ..
                } => offset + 16 + payload.len() as u64,
                other => panic!("{other:?}"),
            }
        };
        f.write_all_at(&[7u8; 9], end).unwrap();
        drop(f);
        let before = files(dir.path());
        let items: Vec<LogItem> = read_log(dir.path()).unwrap().map(|i| i.unwrap()).collect();
        assert_eq!(files(dir.path()), before, "inspection changed a file");
        assert_eq!(records(&items).len(), 30);
        match items.last().unwrap() {
            LogItem::Damage {
                path,
                offset,
                on_open,
                ..
            } => {
                assert_eq!((path, *offset, *on_open), (&last, end, OnOpen::CutTail));
            }
            other => panic!("{other:?}"),
        }
        let (_, rec) = Log::open(dir.path(), LogOptions::default()).unwrap();
        assert_eq!(rec.tail_cut.unwrap().offset, end, "open agrees");
    }

    #[test]
    fn damage_before_the_tail_is_refuse_and_the_next_segment_is_still_read() {
        let dir = tempfile::tempdir().unwrap();
        small_log(dir.path(), 30);
        let first = read_log(dir.path())
            .unwrap()
            .find_map(|i| match i.unwrap() {
                LogItem::Segment { path, .. } => Some(path),
                _ => None,
            })
            .unwrap();
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open(&first)
            .unwrap();
        f.write_all_at(&[0xAB], SEGMENT_HEADER_BYTES + 20).unwrap();
        drop(f);
        let items: Vec<LogItem> = read_log(dir.path()).unwrap().map(|i| i.unwrap()).collect();
        let damage = items
            .iter()
            .find(|i| matches!(i, LogItem::Damage { .. }))
            .unwrap();
        assert!(
            matches!(damage, LogItem::Damage { path, offset, on_open: OnOpen::Refuse, .. }
                if *path == first && *offset == SEGMENT_HEADER_BYTES),
            "{damage:?}"
        );
        assert!(records(&items).contains(&z(30)), "later segments are read");
        assert!(Log::open(dir.path(), LogOptions::default()).is_err());
    }

    #[test]
    fn a_snapshot_opens_by_path_and_a_flipped_byte_fails_verify() {
        let dir = tempfile::tempdir().unwrap();
        let (wal, _) = Wal::open(
            dir.path(),
            WalOptions {
                log: LogOptions {
                    unsafe_no_fsync: true,
                    ..LogOptions::default()
                },
                ..WalOptions::default()
            },
        )
        .unwrap();
        wal.append(z(1), Bytes::from_static(b"x"))
            .unwrap()
            .wait()
            .unwrap();
        let info = wal.save_snapshot(z(1), &mut &b"the state"[..]).unwrap();
        drop(wal);
        let copy = dir.path().join("copy");
        std::fs::copy(&info.path, &copy).unwrap();
        let snap = open_snapshot(&copy).unwrap();
        assert_eq!((snap.zxid(), snap.data_len()), (z(1), 9));
        snap.verify().unwrap();
        let mut bytes = std::fs::read(&copy).unwrap();
        bytes[HEADER_BYTES + 2] ^= 1;
        std::fs::write(&copy, &bytes).unwrap();
        assert!(open_snapshot(&copy).unwrap().verify().is_err());
        std::fs::write(&copy, &bytes[..30]).unwrap();
        let e = open_snapshot(&copy).unwrap_err().to_string();
        assert!(e.contains("copy"), "{e}");
    }
}

//! The snapshot loader: a stream of snapshot bytes into a new tree, on the
//! calling thread or split over two.
//!
//! A load is two halves. The [`Parser`] turns bytes into nodes (paths,
//! stats, data, ACLs, and the hash of each name in its parent's table); it
//! needs nothing of the tree but a copy of its hasher. The [`Inserter`]
//! links those nodes into the tree. On one thread the halves take turns a
//! batch at a time; split, the parser runs on a thread of its own and hands
//! batches over a bounded channel, [`LOAD_BATCHES_IN_FLIGHT`] at most, and
//! gets the emptied ones back to reuse. Both ways give the same tree and the
//! same error for the same bytes: the inserter takes batches in stream
//! order, and a parse error is reported after the records before it.
//!
//! The snapshot is never held whole: [`SnapReader`] reads it into one buffer
//! of [`SNAPSHOT_LOAD_READ_BYTES`] (or of the largest record, if larger).
//! The source is read to its end, so a reader that checks a checksum there
//! gets to fail the load, and bytes after the end marker are an error.
//!
//! Relies on: the record format in `format` (a record's length is known
//! before it is parsed), and on nothing being removed from the tree during a
//! load (so a parent's slab index, once found, stays valid).

use std::sync::mpsc::{sync_channel, Receiver, SyncSender};

use rzk_zxid::Zxid;

use super::format::{
    self, Entry, RecordRef, SessionRecord, SESSION_BYTES, SNAP_MAGIC, SNAP_MAGIC_V1,
};
use crate::acl::{AclInterner, AclRef};
use crate::tree::node::{name_hash, ROOT};
use crate::tree::{DataTree, Node};
use crate::txn::{self, TxnError};

/// How much a snapshot load asks its reader for at a time. The load's buffer
/// is this large, or as large as the largest record if that is larger (a
/// record is one znode: its path, its data, bounded by `jute.maxbuffer`, and
/// its ACL).
pub const SNAPSHOT_LOAD_READ_BYTES: usize = 256 * 1024;
/// A snapshot smaller than this loads on one thread even when asked to split
/// the work: starting a thread costs more than it saves there.
pub const SNAPSHOT_SPLIT_MIN_BYTES: u64 = 4 << 20;
/// Without a node count (version 1), a children map is sized up front for
/// at most this many children; past it, it grows.
const LOAD_CHILDREN_RESERVE_UNKNOWN_MAX: u64 = 1 << 16;
/// Records a load parses before the insert takes them (one batch): enough
/// that handing a batch from one thread to the other costs nothing per
/// record, few enough that the batches in flight stay small (a parsed record
/// is about 130 bytes besides its name and data, which are the tree's).
pub(super) const LOAD_BATCH_RECORDS: usize = 4096;
/// A batch also ends once its paths hold this many bytes.
const LOAD_BATCH_PATH_BYTES: usize = 256 * 1024;
/// Parsed batches waiting for the insert, at most, when a load runs on two
/// threads (besides the one being parsed and the one being inserted).
pub(super) const LOAD_BATCHES_IN_FLIGHT: usize = 2;

impl DataTree {
    /// Loads a snapshot held in one buffer: the tree, the sessions and the
    /// zxid it is consistent at. Same as [`DataTree::load_snapshot_from`].
    pub fn load_snapshot(bytes: &[u8]) -> Result<(DataTree, Vec<SessionRecord>, Zxid), TxnError> {
        DataTree::load_snapshot_from(&mut &bytes[..])
    }

    /// Loads a snapshot while reading it from `source`: the tree, the
    /// sessions and the zxid it is consistent at.
    ///
    /// The snapshot is never held whole: it is read
    /// [`SNAPSHOT_LOAD_READ_BYTES`] at a time into one buffer of that size
    /// (or of the largest record's, if larger). `source` is read to its end (a reader that
    /// verifies a checksum there, such as a SNAP transfer's, gets to fail the
    /// load), and bytes after the snapshot's end marker are an error. Nothing
    /// is changed on failure: load into a new tree and swap it in on success.
    pub fn load_snapshot_from(
        source: &mut dyn std::io::Read,
    ) -> Result<(DataTree, Vec<SessionRecord>, Zxid), TxnError> {
        let mut reader = SnapReader::new(source);
        let loaded = load_from(&mut reader);
        reader.record_peak();
        loaded
    }

    /// [`DataTree::load_snapshot_from`] with the work split over two
    /// threads: one parses the records (paths, stats, data, ACLs, the
    /// names' hashes) while the calling one inserts them into the tree, a
    /// few batches of a few thousand records apart at most. Same tree, same
    /// errors, same reading of `source` to its end; a snapshot of fewer
    /// than [`SNAPSHOT_SPLIT_MIN_BYTES`] (`len_bytes`: its size, as far as
    /// the caller knows it) loads on the calling thread alone.
    pub fn load_snapshot_split(
        source: &mut (dyn std::io::Read + Send),
        len_bytes: u64,
    ) -> Result<(DataTree, Vec<SessionRecord>, Zxid), TxnError> {
        let mut reader = SnapReader::new(source);
        let loaded = if len_bytes < SNAPSHOT_SPLIT_MIN_BYTES {
            load_from(&mut reader)
        } else {
            load_split_from(&mut reader, LOAD_BATCH_RECORDS)
        };
        reader.record_peak();
        loaded
    }

    /// Inserts the nodes of one depth of a snapshot being loaded (copy-on-write
    /// records that came before their parent), each under its parent.
    fn insert_level(&mut self, level: Vec<(String, Node)>) -> Result<(), TxnError> {
        for (p, node) in level {
            let orphan = || TxnError(format!("snapshot node {p} has no parent or is repeated"));
            if p == "/" {
                self.insert_raw(&p, node).ok_or_else(orphan)?;
                continue;
            }
            let parent = crate::path::parent(&p)
                .and_then(|pp| self.lookup(pp))
                .ok_or_else(orphan)?;
            self.insert_child(parent, &p, node).map_err(|()| orphan())?;
        }
        Ok(())
    }
}

/// A snapshot being read: a window on the stream, read
/// [`SNAPSHOT_LOAD_READ_BYTES`] at a time into one buffer, which grows only
/// for a record larger than that.
pub(super) struct SnapReader<'r, R: ?Sized> {
    source: &'r mut R,
    /// Always initialised to its length; `pos..end` is what is unconsumed.
    buf: Vec<u8>,
    pos: usize,
    end: usize,
    eof: bool,
}

#[cfg(test)]
thread_local! {
    /// The largest buffer of the last load on this thread (tests).
    pub(super) static LOAD_BUFFER_PEAK: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

impl<'r, R: std::io::Read + ?Sized> SnapReader<'r, R> {
    pub(super) fn new(source: &'r mut R) -> SnapReader<'r, R> {
        SnapReader {
            source,
            buf: Vec::new(),
            pos: 0,
            end: 0,
            eof: false,
        }
    }

    fn record_peak(&self) {
        #[cfg(test)]
        LOAD_BUFFER_PEAK.with(|p| p.set(self.buf.len()));
    }

    /// The unconsumed bytes.
    fn available(&self) -> &[u8] {
        &self.buf[self.pos..self.end]
    }

    /// Reads until at least `n` bytes are available; false at the end of
    /// the stream.
    fn fill(&mut self, n: usize) -> Result<bool, TxnError> {
        while self.end - self.pos < n {
            if self.eof {
                return Ok(false);
            }
            if self.pos > 0 {
                self.buf.copy_within(self.pos..self.end, 0);
                self.end -= self.pos;
                self.pos = 0;
            }
            let size = n.max(SNAPSHOT_LOAD_READ_BYTES);
            if self.buf.len() < size {
                self.buf.resize(size, 0);
            }
            let got = loop {
                match self.source.read(&mut self.buf[self.end..]) {
                    Ok(got) => break got,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                    Err(e) => return Err(TxnError(format!("reading the snapshot: {e}"))),
                }
            };
            self.end += got;
            self.eof = got == 0;
        }
        Ok(true)
    }

    /// Exactly `n` bytes, consumed; an error if the stream ends first.
    fn take(&mut self, n: usize) -> Result<&[u8], TxnError> {
        if !self.fill(n)? {
            return Err(TxnError(format!(
                "truncated snapshot: {n} bytes needed, {} left",
                self.end - self.pos
            )));
        }
        let at = self.pos;
        self.pos += n;
        Ok(&self.buf[at..at + n])
    }

    /// The length of the next record (or of the end marker), reading as
    /// much as it takes to know it.
    fn next_record_len(&mut self, acls_defined: usize) -> Result<usize, TxnError> {
        let mut want = 1;
        loop {
            if !self.fill(want)? {
                return Err(TxnError(format!(
                    "truncated snapshot: a record needs {want}+ bytes, {} left",
                    self.end - self.pos
                )));
            }
            match format::record_len(self.available(), acls_defined)? {
                Ok(len) => return Ok(len),
                Err(more) => want = more,
            }
        }
    }
}

/// What a snapshot's header says.
struct SnapHeader {
    zxid: Zxid,
    /// The records the header announces (version 2), else none.
    declared: Option<u64>,
    sessions: Vec<SessionRecord>,
}

/// One record, parsed: the node and what its insert needs.
struct ParsedRecord {
    node: Node,
    /// The hash of the node's name (see [`name_hash`]).
    name_hash: u64,
    /// The end of its path in its batch's `paths` (the start is the previous
    /// record's end).
    path_end: u32,
    /// Where the last `/` of its path is.
    slash: u32,
    /// Its parent's path is the previous record's parent's (siblings come
    /// together: the snapshot is a DFS).
    same_parent: bool,
}

/// Parsed records on their way to the insert.
#[derive(Default)]
struct Batch {
    /// The records' paths, back to back.
    paths: String,
    records: Vec<ParsedRecord>,
}

/// The first half of a load: bytes to records. Needs nothing of the tree but
/// its hasher, so it can run on a thread of its own.
struct Parser {
    /// The tree's ACL lists, interned as their definitions come; the tree
    /// takes them at the end.
    acls: AclInterner,
    /// The snapshot's ACL ids.
    acl_table: Vec<AclRef>,
    /// The tree's hasher (a copy).
    hasher: foldhash::fast::RandomState,
    /// The previous record's parent path.
    parent_path: String,
    /// Records parsed so far.
    records: u64,
    /// The records the header announces, if it does.
    declared: Option<u64>,
    /// Records in a batch at most ([`LOAD_BATCH_RECORDS`]; tests use fewer).
    batch_records: usize,
}

/// The second half of a load: records into the tree.
struct Inserter {
    tree: DataTree,
    /// Copy-on-write records that came before their parent, by depth: they go
    /// in after the stream (every parent before its children).
    deferred: Vec<Vec<(String, Node)>>,
    /// The slab index of the previous record's parent, if that record went
    /// in (nothing is removed during a load, so a path keeps its index).
    parent_idx: Option<u32>,
    /// Children maps sized up front, to shrink at the end if oversized.
    sized: Vec<u32>,
    /// Records inserted (or deferred) so far.
    records: u64,
    /// The records the header announces, if it does.
    declared: Option<u64>,
}

fn load_header<R: std::io::Read + ?Sized>(
    r: &mut SnapReader<'_, R>,
) -> Result<SnapHeader, TxnError> {
    let magic = r.take(8)?;
    let v2 = magic == SNAP_MAGIC;
    if !v2 && magic != SNAP_MAGIC_V1 {
        return Err(TxnError("not an rzk snapshot".into()));
    }
    let zxid = Zxid::from_u64(txn::get_i64(&mut r.take(8)?)? as u64);
    let declared = if v2 {
        Some(txn::get_i64(&mut r.take(8)?)? as u64)
    } else {
        None
    };
    if let Some(d) = declared {
        if d > u64::from(u32::MAX) {
            return Err(TxnError(format!(
                "snapshot declares {d} nodes, more than a tree holds"
            )));
        }
    }
    let n = txn::get_u32(&mut r.take(4)?)? as usize;
    let mut sessions = Vec::with_capacity(n.min(1 << 16));
    for _ in 0..n {
        sessions.push(format::read_session(r.take(SESSION_BYTES)?)?);
    }
    Ok(SnapHeader {
        zxid,
        declared,
        sessions,
    })
}

/// The two halves of a load after its header.
fn load_halves(declared: Option<u64>, batch_records: usize) -> (Parser, Inserter) {
    let mut tree = DataTree::empty();
    if let Some(d) = declared {
        // The chunk list at its final size at once (a corrupt count is caught
        // when the records run out).
        tree.nodes.reserve_chunks(d);
    }
    let parser = Parser {
        acls: AclInterner::default(),
        acl_table: Vec::new(),
        hasher: tree.nodes.hasher(),
        parent_path: String::new(),
        records: 0,
        declared,
        batch_records,
    };
    let inserter = Inserter {
        tree,
        deferred: Vec::new(),
        parent_idx: None,
        sized: Vec::new(),
        records: 0,
        declared,
    };
    (parser, inserter)
}

/// Loads on the calling thread.
fn load_from<R: std::io::Read + ?Sized>(
    r: &mut SnapReader<'_, R>,
) -> Result<(DataTree, Vec<SessionRecord>, Zxid), TxnError> {
    let header = load_header(r)?;
    let (mut parser, mut inserter) = load_halves(header.declared, LOAD_BATCH_RECORDS);
    parse_and_insert(&mut parser, r, &mut inserter)?;
    let tree = inserter.finish(parser.acls)?;
    Ok((tree, header.sessions, header.zxid))
}

/// Loads with the parsing on a second thread while the calling thread
/// inserts, [`LOAD_BATCHES_IN_FLIGHT`] batches apart at most. The result,
/// and the error of a bad snapshot, are those of [`load_from`]: the insert
/// takes the batches in stream order, and a parse error comes after the
/// records before it.
pub(super) fn load_split_from<R: std::io::Read + Send + ?Sized>(
    r: &mut SnapReader<'_, R>,
    batch_records: usize,
) -> Result<(DataTree, Vec<SessionRecord>, Zxid), TxnError> {
    let header = load_header(r)?;
    let (parser, mut inserter) = load_halves(header.declared, batch_records);
    // Handed to the thread through a lock, so that a thread that cannot be
    // started leaves them here to load without it.
    let job = std::sync::Mutex::new(Some((parser, r)));
    let acls = std::thread::scope(|s| {
        let (batches_tx, batches) = sync_channel::<Result<Batch, TxnError>>(LOAD_BATCHES_IN_FLIGHT);
        let (spare, spare_rx) = sync_channel::<Batch>(LOAD_BATCHES_IN_FLIGHT + 2);
        let job = &job;
        let thread = std::thread::Builder::new()
            .name("rzk-snapshot-parse".into())
            .spawn_scoped(s, move || {
                let (parser, r) = job.lock().ok()?.take()?;
                parse_batches(parser, r, &batches_tx, &spare_rx)
            });
        let thread = match thread {
            Ok(t) => t,
            Err(_) => {
                let (mut parser, r) = job
                    .lock()
                    .ok()
                    .and_then(|mut j| j.take())
                    .ok_or_else(|| TxnError("the snapshot load lost its reader".into()))?;
                return parse_and_insert(&mut parser, r, &mut inserter).map(|()| parser.acls);
            }
        };
        let inserted = insert_batches(&mut inserter, &batches, &spare);
        // The parser stops at its next batch if the insert stopped first.
        drop(batches);
        let parsed = thread
            .join()
            .map_err(|_| TxnError("the snapshot parsing thread failed".into()))?;
        inserted?;
        parsed.ok_or_else(|| TxnError("the snapshot parsing thread ended early".into()))
    })?;
    let tree = inserter.finish(acls)?;
    Ok((tree, header.sessions, header.zxid))
}

/// The records of a load on the calling thread, each batch parsed, then
/// inserted.
fn parse_and_insert<R: std::io::Read + ?Sized>(
    parser: &mut Parser,
    r: &mut SnapReader<'_, R>,
    inserter: &mut Inserter,
) -> Result<(), TxnError> {
    let mut batch = Batch::default();
    loop {
        let parsed = parser.fill_batch(r, &mut batch);
        // The records before a parse error go in first: an error of theirs
        // comes first in the stream, and is the one reported.
        inserter.insert_batch(&mut batch)?;
        if parsed? {
            return Ok(());
        }
    }
}

/// The parsing thread of a split load: batches to `out` until the end
/// marker (then its ACLs), a parse error (sent after the batch before it),
/// or the insert's end.
fn parse_batches<R: std::io::Read + ?Sized>(
    mut parser: Parser,
    r: &mut SnapReader<'_, R>,
    out: &SyncSender<Result<Batch, TxnError>>,
    spare: &Receiver<Batch>,
) -> Option<AclInterner> {
    loop {
        let mut batch = spare.try_recv().unwrap_or_default();
        let parsed = parser.fill_batch(r, &mut batch);
        if out.send(Ok(batch)).is_err() {
            return None; // the insert failed, and says why
        }
        match parsed {
            Ok(false) => {}
            Ok(true) => return Some(parser.acls),
            Err(e) => {
                let _ = out.send(Err(e));
                return None;
            }
        }
    }
}

/// The insert of a split load: every batch in order until the parser ends
/// (or the first error); emptied batches go back to the parser.
fn insert_batches(
    inserter: &mut Inserter,
    batches: &Receiver<Result<Batch, TxnError>>,
    spare: &SyncSender<Batch>,
) -> Result<(), TxnError> {
    for batch in batches {
        let mut batch = batch?;
        inserter.insert_batch(&mut batch)?;
        // A lost spare is only a new allocation for the parser.
        let _ = spare.try_send(batch);
    }
    Ok(())
}

impl Parser {
    /// Parses records into `batch` until it is full (false) or the stream
    /// has ended at its end marker (true), read to its end.
    fn fill_batch<R: std::io::Read + ?Sized>(
        &mut self,
        r: &mut SnapReader<'_, R>,
        batch: &mut Batch,
    ) -> Result<bool, TxnError> {
        while batch.records.len() < self.batch_records && batch.paths.len() < LOAD_BATCH_PATH_BYTES
        {
            let acls_defined = self.acl_table.len();
            let len = r.next_record_len(acls_defined)?;
            let count = match format::read_entry(r.take(len)?, acls_defined)? {
                Entry::Node(rec) => {
                    self.record(rec, batch)?;
                    continue;
                }
                Entry::End { records } => records,
            };
            if count != self.records || self.declared.is_some_and(|d| d != count) {
                return Err(TxnError(format!(
                    "snapshot declares {count} nodes (header: {:?}), holds {}",
                    self.declared, self.records
                )));
            }
            // Read to the end: a checksumming source verifies there.
            if r.fill(1)? {
                return Err(TxnError("bytes after the snapshot's end".into()));
            }
            return Ok(true);
        }
        Ok(false)
    }

    /// One record, parsed into `batch`.
    fn record(&mut self, rec: RecordRef<'_>, batch: &mut Batch) -> Result<(), TxnError> {
        let p = rec.path;
        if let Some(acl) = rec.acl {
            self.acl_table.push(self.acls.intern(&acl));
        }
        let acl = self
            .acl_table
            .get(rec.acl_id)
            .cloned()
            .ok_or_else(|| TxnError(format!("ACL ref {} undefined", rec.acl_id)))?;
        let Some(slash) = p.rfind('/') else {
            return Err(TxnError(format!(
                "snapshot node {p} is not an absolute path"
            )));
        };
        let name = &p[slash + 1..];
        let mut node = Node::new(name, rec.data, acl, 0, 0, 0);
        rec.stat.set_on(&mut node);
        self.records += 1;
        if self.declared.is_some_and(|d| self.records > d) {
            return Err(TxnError(format!(
                "snapshot holds more nodes than its header's {:?}",
                self.declared
            )));
        }
        let parent_path = if slash == 0 { "/" } else { &p[..slash] };
        let same_parent = self.parent_path == parent_path;
        if !same_parent {
            self.parent_path.clear();
            self.parent_path.push_str(parent_path);
        }
        batch.paths.push_str(p);
        batch.records.push(ParsedRecord {
            name_hash: name_hash(&self.hasher, name.as_bytes()),
            node,
            path_end: batch.paths.len() as u32,
            slash: slash as u32,
            same_parent,
        });
        Ok(())
    }
}

impl Inserter {
    /// Inserts the records of `batch`, in order, and empties it.
    fn insert_batch(&mut self, batch: &mut Batch) -> Result<(), TxnError> {
        let Batch { paths, records } = batch;
        let mut start = 0;
        for rec in records.drain(..) {
            let end = rec.path_end as usize;
            let p = paths.get(start..end).ok_or_else(|| {
                TxnError(format!(
                    "a parsed path at {start}..{end} is out of its batch"
                ))
            })?;
            start = end;
            self.insert(p, rec)?;
        }
        paths.clear();
        Ok(())
    }

    /// One parsed record (path `p`) into the tree, or held back until the
    /// stream's end if its parent is not in yet.
    fn insert(&mut self, p: &str, rec: ParsedRecord) -> Result<(), TxnError> {
        self.records += 1;
        let orphan = || TxnError(format!("snapshot node {p} has no parent or is repeated"));
        if p == "/" {
            self.parent_idx = None;
            self.tree.insert_raw(p, rec.node).ok_or_else(orphan)?;
            return Ok(());
        }
        let slash = rec.slash as usize;
        let found = match self.parent_idx {
            Some(idx) if rec.same_parent => Some(idx),
            _ => self.tree.lookup(if slash == 0 { "/" } else { &p[..slash] }),
        };
        self.parent_idx = found;
        let Some(parent_idx) = found else {
            let depth = p.bytes().filter(|&b| b == b'/').count();
            if self.deferred.len() <= depth {
                self.deferred.resize_with(depth + 1, Vec::new);
            }
            self.deferred[depth].push((p.to_owned(), rec.node));
            return Ok(());
        };
        let pn = self.tree.nodes.node_mut(parent_idx);
        if pn.children.is_none() {
            // Sized once for the children it can have: at most its create
            // count, and at most the records still to come. Too large a guess
            // is given back at the end.
            let left = match self.declared {
                Some(d) => d.saturating_sub(self.records),
                None => LOAD_CHILDREN_RESERVE_UNKNOWN_MAX,
            };
            let room = (pn.ccount.max(0) as u64).min(left);
            if room > 0 {
                self.tree.nodes.reserve_children(parent_idx, room as usize);
                self.sized.push(parent_idx);
            }
        }
        self.tree
            .insert_child_hashed(parent_idx, p, rec.node, rec.name_hash)
            .map(|_| ())
            .map_err(|()| orphan())
    }

    /// Inserts the deferred records, gives back oversized maps, and hands
    /// over the tree with the ACL lists its nodes were given.
    fn finish(mut self, acls: AclInterner) -> Result<DataTree, TxnError> {
        self.tree.acls = acls;
        for level in std::mem::take(&mut self.deferred) {
            self.tree.insert_level(level)?;
        }
        for &idx in &self.sized {
            self.tree.nodes.shrink_children(idx);
        }
        if self.tree.nodes.get(ROOT).is_none() {
            return Err(TxnError("snapshot has no root".into()));
        }
        Ok(self.tree)
    }
}

#[cfg(test)]
#[path = "load_tests.rs"]
mod tests;

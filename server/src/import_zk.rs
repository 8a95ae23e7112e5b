//! Readers for Apache ZooKeeper 3.8's data files, as its `zkSnapShotToolkit`
//! and `zkTxnLogToolkit` read them: `snapshot.<zxid>` and `log.<zxid>` under
//! `version-2/`. Facts of the formats (jute, big-endian):
//!
//! - snapshot: `FileHeader` (magic `ZKSN`, version 2, dbid), the sessions
//!   (count, then id and timeout each), the ACL cache (count, then a ref and
//!   an ACL list each; ref -1 is `world:anyone` with every permission), the
//!   nodes (path, data, ACL ref, `StatPersisted`; the root's path is empty)
//!   until the path `/`, then an Adler-32 of every byte so far and `/`; then,
//!   since 3.6, the tree digest (zxid, version, digest) sealed the same way.
//! - log: `FileHeader` (magic `ZKLG`, version 2, dbid), then records:
//!   Adler-32 of the txn, its length, the txn (`TxnHeader`, the body by type,
//!   since 3.6 a `TxnDigest`), and the byte `B`; a zero length ends the log
//!   (the rest of the file is preallocated zeros).
//!
//! Every read is bounds-checked; corrupt or truncated input is a [`ZkFileError`]
//! naming the file and the byte offset.
//!
//! ```no_run
//! let snap = rzk_server::import_zk::read_snapshot("version-2/snapshot.3e".as_ref()).unwrap();
//! println!("{} nodes, {} sessions", snap.nodes.len(), snap.sessions.len());
//! ```

use std::path::{Path, PathBuf};

use rzk_wire::{Acl, ByteString, Id, Perms};

const SNAP_MAGIC: &[u8; 4] = b"ZKSN";
const LOG_MAGIC: &[u8; 4] = b"ZKLG";
/// The end of record byte after each txn.
const EOR: u8 = b'B';
/// The largest string or buffer accepted (ZooKeeper's jute.maxbuffer is 1 MiB
/// by default; 64 MiB leaves room for raised limits and catches garbage).
const FIELD_BYTES_MAX: usize = 64 << 20;

/// A ZooKeeper file that cannot be read: which file, where, and why.
#[derive(Clone, Debug, thiserror::Error, PartialEq, Eq)]
#[error("{file}: at byte offset {offset}: {reason}")]
pub struct ZkFileError {
    /// The file.
    pub file: PathBuf,
    /// Where in it the problem is.
    pub offset: u64,
    /// What is wrong.
    pub reason: String,
}

/// A node's persisted stat (`StatPersisted`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ZkStat {
    /// Creating zxid.
    pub czxid: i64,
    /// Last modifying zxid.
    pub mzxid: i64,
    /// Creation time (ms since the epoch).
    pub ctime: i64,
    /// Modification time.
    pub mtime: i64,
    /// Data version.
    pub version: i32,
    /// Children version.
    pub cversion: i32,
    /// ACL version.
    pub aversion: i32,
    /// Owner session of an ephemeral (0 otherwise; TTL and container nodes use
    /// ZooKeeper's special values).
    pub ephemeral_owner: i64,
    /// Last zxid that changed the children.
    pub pzxid: i64,
}

/// One node of a snapshot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ZkNode {
    /// Its path (`/` for the root).
    pub path: String,
    /// Its data (`None`: null data, which jute writes as length -1).
    pub data: Option<Vec<u8>>,
    /// Its ACL.
    pub acl: Vec<Acl>,
    /// Its stat.
    pub stat: ZkStat,
}

/// A snapshot file read whole.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ZkSnapshot {
    /// `(session id, timeout ms)`.
    pub sessions: Vec<(i64, i32)>,
    /// The nodes, parents before children.
    pub nodes: Vec<ZkNode>,
    /// The tree digest's zxid, if the file has one (3.6+).
    pub digest_zxid: Option<i64>,
}

/// The zxid in a ZooKeeper file's name (`snapshot.<hex>`, `log.<hex>`): for a
/// snapshot, the last txn applied when it was started (it is fuzzy: later
/// txns may be in it too), for a log, its first txn.
pub fn zxid_of_name(path: &Path, prefix: &str) -> Option<i64> {
    let name = path.file_name()?.to_str()?;
    let hex = name.strip_prefix(prefix)?.strip_prefix('.')?;
    if hex.is_empty() || hex.len() > 16 {
        return None;
    }
    u64::from_str_radix(hex, 16).ok().map(|z| z as i64)
}

/// One txn of a log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ZkTxn {
    /// Where the record starts in its file.
    pub offset: u64,
    /// The session.
    pub session: i64,
    /// The client's cxid.
    pub cxid: i32,
    /// The txn's zxid.
    pub zxid: i64,
    /// Its time (ms since the epoch).
    pub time: i64,
    /// Its type (ZooKeeper's opcode: 1 create, 2 delete, 5 setData, ...).
    pub kind: i32,
    /// The paths it touches (one per op of a multi).
    pub paths: Vec<String>,
    /// What it does.
    pub body: ZkTxnBody,
}

/// What a logged txn does: the jute record of its type (ZooKeeper 3.8's
/// `txn.jute`). Versions and cversions are the values the leader computed,
/// set as they are, which is what makes a replay over a fuzzy snapshot
/// idempotent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ZkTxnBody {
    /// `CreateSessionTxn`.
    CreateSession {
        /// The negotiated timeout.
        timeout_ms: i32,
    },
    /// `CloseSessionTxn` (3.6+; `None` when the txn has no body).
    CloseSession {
        /// The ephemerals the leader saw for the session.
        paths: Option<Vec<String>>,
    },
    /// `CreateTxn` (create, create2), `CreateContainerTxn`, `CreateTTLTxn`.
    Create {
        /// The node.
        path: String,
        /// Its data.
        data: Option<Vec<u8>>,
        /// Its ACL.
        acl: Vec<Acl>,
        /// The owner encoding: 0, the session (ephemeral), `i64::MIN`
        /// (container) or `0xFF..|ttl` (TTL).
        owner: i64,
        /// The parent's create counter after this create (-1: old logs
        /// without it; the parent's own + 1 then).
        parent_cversion: i32,
    },
    /// `DeleteTxn` (delete, deleteContainer).
    Delete {
        /// The node.
        path: String,
    },
    /// `SetDataTxn` (setData, reconfig).
    SetData {
        /// The node.
        path: String,
        /// The new data.
        data: Option<Vec<u8>>,
        /// The new version.
        version: i32,
    },
    /// `SetACLTxn`.
    SetAcl {
        /// The node.
        path: String,
        /// The new ACL.
        acl: Vec<Acl>,
        /// The new aversion.
        version: i32,
    },
    /// `CheckVersionTxn`: no change.
    Check {
        /// The node.
        path: String,
    },
    /// `ErrorTxn`: no change.
    Error {
        /// The error code.
        err: i32,
    },
    /// `MultiTxn`: its ops in order, each with its type.
    Multi(Vec<(i32, ZkTxnBody)>),
}

impl ZkTxnBody {
    fn paths(&self, out: &mut Vec<String>) {
        match self {
            ZkTxnBody::Create { path, .. }
            | ZkTxnBody::Delete { path }
            | ZkTxnBody::SetData { path, .. }
            | ZkTxnBody::SetAcl { path, .. }
            | ZkTxnBody::Check { path } => out.push(path.clone()),
            ZkTxnBody::Multi(ops) => ops.iter().for_each(|(_, o)| o.paths(out)),
            ZkTxnBody::CreateSession { .. }
            | ZkTxnBody::CloseSession { .. }
            | ZkTxnBody::Error { .. } => {}
        }
    }
}

/// The txns of one log file as ZooKeeper reads them: a record torn inside the
/// zero padding (a crash while it was written) ends the file, as ZooKeeper's
/// `FileTxnIterator` ends it, and is reported in `partial_tail`. A record
/// that runs past the end of the file is an error (a truncated copy).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ZkLog {
    /// The complete txns, in file order.
    pub txns: Vec<ZkTxn>,
    /// Where the records end in a partial one, and why.
    pub partial_tail: Option<ZkFileError>,
}

/// ZooKeeper's name for a txn type.
pub fn txn_type_name(kind: i32) -> &'static str {
    match kind {
        -11 => "closeSession",
        -10 => "createSession",
        -1 => "error",
        1 => "create",
        2 => "delete",
        5 => "setData",
        7 => "setACL",
        13 => "check",
        14 => "multi",
        15 => "create2",
        16 => "reconfig",
        19 => "createContainer",
        20 => "deleteContainer",
        21 => "createTTL",
        _ => "unknown",
    }
}

/// A bounds-checked jute reader over a file's bytes.
struct Reader<'a> {
    file: &'a Path,
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn err(&self, at: usize, reason: impl Into<String>) -> ZkFileError {
        ZkFileError {
            file: self.file.to_owned(),
            offset: at as u64,
            reason: reason.into(),
        }
    }

    fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8], ZkFileError> {
        if self.buf.len() - self.pos < n {
            return Err(self.err(
                self.pos,
                format!(
                    "truncated: {what} needs {n} bytes, {} left",
                    self.buf.len() - self.pos
                ),
            ));
        }
        let s = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    fn i32(&mut self, what: &str) -> Result<i32, ZkFileError> {
        let b = self.take(4, what)?;
        Ok(i32::from_be_bytes(b.try_into().expect("4 bytes")))
    }

    fn i64(&mut self, what: &str) -> Result<i64, ZkFileError> {
        let b = self.take(8, what)?;
        Ok(i64::from_be_bytes(b.try_into().expect("8 bytes")))
    }

    fn u8(&mut self, what: &str) -> Result<u8, ZkFileError> {
        Ok(self.take(1, what)?[0])
    }

    fn len(&mut self, what: &str) -> Result<Option<usize>, ZkFileError> {
        let at = self.pos;
        let n = self.i32(what)?;
        if n < 0 {
            return Ok(None);
        }
        let n = n as usize;
        if n > FIELD_BYTES_MAX {
            return Err(self.err(at, format!("{what} claims {n} bytes")));
        }
        Ok(Some(n))
    }

    fn buffer(&mut self, what: &str) -> Result<Vec<u8>, ZkFileError> {
        Ok(self.opt_buffer(what)?.unwrap_or_default())
    }

    fn opt_buffer(&mut self, what: &str) -> Result<Option<Vec<u8>>, ZkFileError> {
        match self.len(what)? {
            None => Ok(None),
            Some(n) => Ok(Some(self.take(n, what)?.to_vec())),
        }
    }

    fn bool(&mut self, what: &str) -> Result<bool, ZkFileError> {
        let at = self.pos;
        match self.u8(what)? {
            0 => Ok(false),
            1 => Ok(true),
            b => Err(self.err(at, format!("{what} is {b:#04x}, not a boolean"))),
        }
    }

    fn string(&mut self, what: &str) -> Result<String, ZkFileError> {
        let at = self.pos;
        let b = self.buffer(what)?;
        String::from_utf8(b).map_err(|_| self.err(at, format!("{what} is not UTF-8")))
    }

    fn acl_list(&mut self) -> Result<Vec<Acl>, ZkFileError> {
        let n = self.len("ACL count")?.unwrap_or(0);
        let mut out = Vec::with_capacity(n.min(64));
        for _ in 0..n {
            let perms = self.i32("ACL perms")?;
            let scheme = self.string("ACL scheme")?;
            let id = self.string("ACL id")?;
            out.push(Acl {
                perms: Perms(perms),
                id: Id {
                    scheme: ByteString::from(scheme),
                    id: ByteString::from(id),
                },
            });
        }
        Ok(out)
    }

    fn at_end(&self) -> bool {
        self.pos == self.buf.len()
    }
}

fn read_file(path: &Path) -> Result<Vec<u8>, ZkFileError> {
    std::fs::read(path).map_err(|e| ZkFileError {
        file: path.to_owned(),
        offset: 0,
        reason: format!("cannot read: {e}"),
    })
}

fn header(r: &mut Reader<'_>, magic: &[u8; 4]) -> Result<(), ZkFileError> {
    let got = r.take(4, "magic")?;
    if got != magic {
        return Err(r.err(
            0,
            format!(
                "not a ZooKeeper {} file (magic {:?}, expected {:?})",
                if magic == SNAP_MAGIC {
                    "snapshot"
                } else {
                    "log"
                },
                String::from_utf8_lossy(got),
                String::from_utf8_lossy(magic)
            ),
        ));
    }
    let version = r.i32("version")?;
    if version != 2 {
        return Err(r.err(4, format!("format version {version}, expected 2")));
    }
    r.i64("dbid")?;
    Ok(())
}

/// Checks a seal: the Adler-32 of every byte before it, then `/`.
fn seal(r: &mut Reader<'_>) -> Result<(), ZkFileError> {
    let at = r.pos;
    let want = adler32(&r.buf[..at]);
    let stored = r.i64("checksum")? as u64;
    if stored != u64::from(want) {
        return Err(r.err(
            at,
            format!("checksum mismatch: stored {stored:#x}, computed {want:#x}"),
        ));
    }
    let slash = r.string("seal path")?;
    if slash != "/" {
        return Err(r.err(
            at + 8,
            format!("expected \"/\" after the checksum, found {slash:?}"),
        ));
    }
    Ok(())
}

fn adler32(bytes: &[u8]) -> u32 {
    let mut a = adler2::Adler32::new();
    a.write_slice(bytes);
    a.checksum()
}

/// Reads a whole `snapshot.<zxid>` file and checks its checksums.
pub fn read_snapshot(path: &Path) -> Result<ZkSnapshot, ZkFileError> {
    let buf = read_file(path)?;
    let mut r = Reader {
        file: path,
        buf: &buf,
        pos: 0,
    };
    header(&mut r, SNAP_MAGIC)?;
    let n = r.len("session count")?.unwrap_or(0);
    let mut sessions = Vec::with_capacity(n.min(1 << 16));
    for _ in 0..n {
        sessions.push((r.i64("session id")?, r.i32("session timeout")?));
    }
    let n = r.len("ACL cache size")?.unwrap_or(0);
    let mut acls = std::collections::HashMap::with_capacity(n.min(1 << 16));
    for _ in 0..n {
        let key = r.i64("ACL ref")?;
        acls.insert(key, r.acl_list()?);
    }
    let mut nodes = Vec::new();
    loop {
        let at = r.pos;
        let path = r.string("node path")?;
        if path == "/" {
            break;
        }
        let data = r.opt_buffer("node data")?;
        let acl_at = r.pos;
        let acl_ref = r.i64("node ACL ref")?;
        let acl = match acl_ref {
            -1 => vec![Acl {
                perms: Perms::ALL,
                id: Id {
                    scheme: ByteString::from_static("world"),
                    id: ByteString::from_static("anyone"),
                },
            }],
            k => acls.get(&k).cloned().ok_or_else(|| {
                r.err(
                    acl_at,
                    format!("node {path:?} uses ACL ref {k}, which is not in the ACL cache"),
                )
            })?,
        };
        let stat = ZkStat {
            czxid: r.i64("czxid")?,
            mzxid: r.i64("mzxid")?,
            ctime: r.i64("ctime")?,
            mtime: r.i64("mtime")?,
            version: r.i32("version")?,
            cversion: r.i32("cversion")?,
            aversion: r.i32("aversion")?,
            ephemeral_owner: r.i64("ephemeralOwner")?,
            pzxid: r.i64("pzxid")?,
        };
        let path = if path.is_empty() {
            "/".to_owned()
        } else {
            path
        };
        if !path.starts_with('/') {
            return Err(r.err(at, format!("node path {path:?} does not start with /")));
        }
        nodes.push(ZkNode {
            path,
            data,
            acl,
            stat,
        });
    }
    seal(&mut r)?;
    let mut digest_zxid = None;
    if !r.at_end() {
        digest_zxid = Some(r.i64("digest zxid")?);
        r.i32("digest version")?;
        r.i64("digest")?;
        seal(&mut r)?;
    }
    if !r.at_end() {
        return Err(r.err(
            r.pos,
            format!("{} unexpected bytes after the snapshot", buf.len() - r.pos),
        ));
    }
    Ok(ZkSnapshot {
        sessions,
        nodes,
        digest_zxid,
    })
}

/// Reads the body of a txn of type `kind` (its jute record).
fn body(r: &mut Reader<'_>, kind: i32, session: i64) -> Result<ZkTxnBody, ZkFileError> {
    let create = |r: &mut Reader<'_>, owner: Option<i64>| -> Result<ZkTxnBody, ZkFileError> {
        let path = r.string("txn path")?;
        let data = r.opt_buffer("txn data")?;
        let acl = r.acl_list()?;
        let owner = match owner {
            Some(o) => o,
            None => {
                if r.bool("ephemeral")? {
                    session
                } else {
                    0
                }
            }
        };
        // CreateTxnV0 (before 3.3) has no parentCVersion.
        let parent_cversion = if r.buf.len() - r.pos >= 4 {
            r.i32("parentCVersion")?
        } else {
            -1
        };
        Ok(ZkTxnBody::Create {
            path,
            data,
            acl,
            owner,
            parent_cversion,
        })
    };
    Ok(match kind {
        -10 => ZkTxnBody::CreateSession {
            timeout_ms: r.i32("session timeout")?,
        },
        -11 => ZkTxnBody::CloseSession {
            paths: close_session_paths(r),
        },
        -1 => ZkTxnBody::Error {
            err: r.i32("error code")?,
        },
        1 | 15 => create(r, None)?,
        19 => {
            let path = r.string("txn path")?;
            let data = r.opt_buffer("txn data")?;
            let acl = r.acl_list()?;
            let parent_cversion = r.i32("parentCVersion")?;
            ZkTxnBody::Create {
                path,
                data,
                acl,
                owner: i64::MIN,
                parent_cversion,
            }
        }
        21 => {
            let path = r.string("txn path")?;
            let data = r.opt_buffer("txn data")?;
            let acl = r.acl_list()?;
            let parent_cversion = r.i32("parentCVersion")?;
            let ttl = r.i64("ttl")?;
            ZkTxnBody::Create {
                path,
                data,
                acl,
                owner: crate::tree::ttl_owner(ttl),
                parent_cversion,
            }
        }
        2 | 20 => ZkTxnBody::Delete {
            path: r.string("txn path")?,
        },
        5 | 16 => ZkTxnBody::SetData {
            path: r.string("txn path")?,
            data: r.opt_buffer("txn data")?,
            version: r.i32("version")?,
        },
        7 => ZkTxnBody::SetAcl {
            path: r.string("txn path")?,
            acl: r.acl_list()?,
            version: r.i32("version")?,
        },
        13 => {
            let path = r.string("txn path")?;
            r.i32("version")?;
            ZkTxnBody::Check { path }
        }
        14 => {
            let n = r.len("multi count")?.unwrap_or(0);
            let mut ops = Vec::with_capacity(n.min(1024));
            for _ in 0..n {
                let sub = r.i32("multi op type")?;
                let at = r.pos;
                let bytes = r.buffer("multi op")?;
                let mut inner = Reader {
                    file: r.file,
                    buf: &bytes,
                    pos: 0,
                };
                let op = match sub {
                    1 | 2 | 5 | 7 | 13 | 15 | 19 | 20 | 21 | -1 => body(&mut inner, sub, session),
                    _ => Err(inner.err(0, format!("multi op of type {sub}"))),
                };
                // Offsets inside a multi are reported at the op.
                let op = op.map_err(|mut e| {
                    e.offset += (at + 4) as u64;
                    e
                })?;
                ops.push((sub, op));
            }
            ZkTxnBody::Multi(ops)
        }
        k => return Err(r.err(0, format!("txn type {k} ({})", txn_type_name(k)))),
    })
}

/// A closeSession's `CloseSessionTxn`, if it has one: written since 3.6
/// (`zookeeper.closeSessionTxn.enabled`, default true); older logs have no
/// body, and what follows may be the txn's digest, which does not read as a
/// list of paths.
fn close_session_paths(r: &mut Reader<'_>) -> Option<Vec<String>> {
    let start = r.pos;
    let read = |r: &mut Reader<'_>| -> Result<Vec<String>, ZkFileError> {
        let n = r.len("path count")?.unwrap_or(0);
        if n > (r.buf.len() - r.pos) / 4 {
            return Err(r.err(start, "not a path list"));
        }
        (0..n).map(|_| r.string("path")).collect()
    };
    match read(r) {
        Ok(paths) if paths.iter().all(|p| p.starts_with('/')) => Some(paths),
        _ => {
            r.pos = start;
            None
        }
    }
}

/// How one record of a log reads.
enum Step {
    Txn(ZkTxn),
    /// Preallocated space: the log ends.
    End,
    /// The record is cut short: what ZooKeeper's reader takes as the end.
    Partial(ZkFileError),
}

fn log_record(r: &mut Reader<'_>, path: &Path) -> Result<Step, ZkFileError> {
    let at = r.pos;
    // ZooKeeper pads a log with zeros before it writes into the padding, so
    // a record of a log it wrote never runs past the end of the file: one
    // that does is a truncated copy, and its txns would be lost (I7: an
    // error, not the end of the log).
    let crc = r.i64("record checksum")?;
    let len_at = r.pos;
    let len = r.i32("record length")?;
    if len == 0 {
        if crc == 0 {
            return Ok(Step::End);
        }
        // A checksum and no length: the header was cut while written.
        return Ok(Step::Partial(
            r.err(at, "truncated: a record with a checksum and no length"),
        ));
    }
    if len < 0 || len as usize > FIELD_BYTES_MAX {
        return Err(r.err(len_at, format!("record length {len}")));
    }
    let body_bytes = r.take(len as usize, "record")?;
    let eor_at = r.pos;
    match r.u8("end of record")? {
        EOR => {}
        eor => {
            return Ok(Step::Partial(r.err(
                eor_at,
                format!("truncated: end-of-record byte {eor:#04x}, expected 'B'"),
            )))
        }
    }
    let want = adler32(body_bytes);
    if crc as u64 != u64::from(want) {
        return Err(r.err(
            at,
            format!("record checksum mismatch: stored {crc:#x}, computed {want:#x}"),
        ));
    }
    let mut t = Reader {
        file: path,
        buf: body_bytes,
        pos: 0,
    };
    let fix = |mut e: ZkFileError| {
        e.offset += (len_at + 4) as u64;
        e
    };
    let session = t.i64("session").map_err(fix)?;
    let cxid = t.i32("cxid").map_err(fix)?;
    let zxid = t.i64("zxid").map_err(fix)?;
    let time = t.i64("time").map_err(fix)?;
    let kind = t.i32("type").map_err(fix)?;
    let body = body(&mut t, kind, session).map_err(fix)?;
    let mut paths = Vec::new();
    body.paths(&mut paths);
    Ok(Step::Txn(ZkTxn {
        offset: at as u64,
        session,
        cxid,
        zxid,
        time,
        kind,
        paths,
        body,
    }))
}

/// Reads one `log.<zxid>` file as ZooKeeper does: each record's Adler-32 and
/// end byte are checked; a zero length ends the log (the rest of the file is
/// preallocated zeros); a record torn inside those zeros ends it too, and is
/// reported; a record cut by the end of the file is an error.
/// A complete record whose checksum does not match, or whose txn does not
/// decode, is an error.
pub fn read_log_file(path: &Path) -> Result<ZkLog, ZkFileError> {
    let buf = read_file(path)?;
    let mut r = Reader {
        file: path,
        buf: &buf,
        pos: 0,
    };
    header(&mut r, LOG_MAGIC)?;
    let mut txns = Vec::new();
    while !r.at_end() {
        match log_record(&mut r, path)? {
            Step::Txn(t) => txns.push(t),
            Step::End => break,
            Step::Partial(e) => {
                return Ok(ZkLog {
                    txns,
                    partial_tail: Some(e),
                })
            }
        }
    }
    Ok(ZkLog {
        txns,
        partial_tail: None,
    })
}

/// Reads every txn of one `log.<zxid>` file; a record cut short is an error
/// here (see [`read_log_file`] for ZooKeeper's reading, which stops there).
pub fn read_log(path: &Path) -> Result<Vec<ZkTxn>, ZkFileError> {
    let log = read_log_file(path)?;
    match log.partial_tail {
        Some(e) => Err(e),
        None => Ok(log.txns),
    }
}

/// The `log.*` files of a ZooKeeper data log directory (or its `version-2`),
/// in zxid order.
pub fn log_files(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    let dir = if dir.join("version-2").is_dir() {
        dir.join("version-2")
    } else {
        dir.to_owned()
    };
    let mut files: Vec<(u64, PathBuf)> = std::fs::read_dir(&dir)?
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let hex = name.strip_prefix("log.")?;
            Some((u64::from_str_radix(hex, 16).ok()?, e.path()))
        })
        .collect();
    files.sort();
    Ok(files.into_iter().map(|(_, p)| p).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A snapshot as ZooKeeper writes it, built by hand from the format facts:
    /// one session, one cached ACL, the root and one node.
    fn snapshot_bytes() -> Vec<u8> {
        let mut b = Vec::new();
        let s = |b: &mut Vec<u8>, t: &str| {
            b.extend((t.len() as i32).to_be_bytes());
            b.extend(t.as_bytes());
        };
        b.extend(SNAP_MAGIC);
        b.extend(2i32.to_be_bytes());
        b.extend((-1i64).to_be_bytes());
        b.extend(1i32.to_be_bytes());
        b.extend(0x100i64.to_be_bytes());
        b.extend(4000i32.to_be_bytes());
        b.extend(1i32.to_be_bytes());
        b.extend(1i64.to_be_bytes());
        b.extend(1i32.to_be_bytes());
        b.extend(1i32.to_be_bytes());
        s(&mut b, "world");
        s(&mut b, "anyone");
        for (path, acl, data) in [("", -1i64, ""), ("/a", 1, "hello")] {
            s(&mut b, path);
            s(&mut b, data);
            b.extend(acl.to_be_bytes());
            for v in [5i64, 6, 7, 8] {
                b.extend(v.to_be_bytes());
            }
            for v in [1i32, 2, 3] {
                b.extend(v.to_be_bytes());
            }
            b.extend(0i64.to_be_bytes());
            b.extend(9i64.to_be_bytes());
        }
        s(&mut b, "/");
        let sum = adler32(&b);
        b.extend(i64::from(sum).to_be_bytes());
        s(&mut b, "/");
        b
    }

    #[test]
    fn reads_a_snapshot_and_its_checksum() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("snapshot.9");
        std::fs::write(&p, snapshot_bytes()).unwrap();
        let snap = read_snapshot(&p).unwrap();
        assert_eq!(snap.sessions, vec![(0x100, 4000)]);
        assert_eq!(snap.nodes.len(), 2);
        assert_eq!(snap.nodes[0].path, "/");
        assert_eq!(snap.nodes[1].path, "/a");
        assert_eq!(snap.nodes[1].data.as_deref(), Some(&b"hello"[..]));
        assert_eq!(snap.nodes[1].acl[0].perms, Perms::READ);
        assert_eq!(snap.nodes[1].stat.pzxid, 9);
        assert_eq!(snap.digest_zxid, None);
    }

    #[test]
    fn every_truncation_and_a_flipped_byte_name_the_file_and_offset() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("snapshot.9");
        let good = snapshot_bytes();
        for cut in 0..good.len() {
            std::fs::write(&p, &good[..cut]).unwrap();
            let e = read_snapshot(&p).unwrap_err();
            assert_eq!(e.file, p);
            assert!(e.offset <= cut as u64, "cut {cut}: {e}");
        }
        let mut bad = good.clone();
        let i = bad.len() - 20;
        bad[i - 5] ^= 0x01;
        std::fs::write(&p, &bad).unwrap();
        let e = read_snapshot(&p).unwrap_err();
        assert!(e.to_string().contains("snapshot.9"), "{e}");
        assert!(e.to_string().contains("offset"), "{e}");
    }
}

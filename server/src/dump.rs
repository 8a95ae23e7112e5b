//! `rzk snapshot dump <file>` and `rzk log dump <dir>`: what ZooKeeper's
//! `zkSnapShotToolkit` and `zkTxnLogToolkit` print, for ZooKeeper 3.8's
//! `snapshot.*` and `log.*` files (an operator checks what is there before
//! moving a data directory over) and for rzk's own (rzk-wal's segments and
//! snapshot files, told apart from ZooKeeper's by their first bytes).
//! Reading ZooKeeper's is in [`crate::import_zk`], rzk's in
//! `rzk_wal::inspect`: every file is only read, nothing is repaired (a torn
//! tail is reported, not cut), no lock is taken.
//!
//! ```no_run
//! let mut out = String::new();
//! rzk_server::dump::snapshot("version-2/snapshot.3e".as_ref(), false, &mut out).unwrap();
//! print!("{out}");
//! ```

use std::fmt::Write as _;
use std::path::Path;

use crate::import_zk::{log_files, read_log, read_snapshot, txn_type_name, ZkFileError};

/// Whether an `ephemeralOwner` is a session: ZooKeeper marks containers with
/// `i64::MIN` and TTL nodes with the top byte 0xFF.
fn is_ephemeral(owner: i64) -> bool {
    owner != 0 && owner != i64::MIN && (owner as u64) >> 56 != 0xff
}

/// Prints a snapshot: a summary, then (unless `summary_only`) one block per
/// node with its stat, data length and ACL.
pub fn snapshot(path: &Path, summary_only: bool, out: &mut String) -> Result<(), ZkFileError> {
    let snap = read_snapshot(path)?;
    let data_bytes: usize = snap
        .nodes
        .iter()
        .map(|n| n.data.as_ref().map_or(0, Vec::len))
        .sum();
    let ephemerals = snap
        .nodes
        .iter()
        .filter(|n| is_ephemeral(n.stat.ephemeral_owner))
        .count();
    let _ = writeln!(out, "ZooKeeper snapshot {}", path.display());
    if let Some(z) = snap.digest_zxid {
        let _ = writeln!(out, "digest zxid: 0x{z:x}");
    }
    let _ = writeln!(out, "znodes: {}", snap.nodes.len());
    let _ = writeln!(out, "data bytes: {data_bytes}");
    let _ = writeln!(out, "ephemerals: {ephemerals}");
    let _ = writeln!(out, "sessions: {}", snap.sessions.len());
    for (id, timeout) in &snap.sessions {
        let _ = writeln!(out, "  session 0x{:x} timeout {timeout} ms", *id as u64);
    }
    if summary_only {
        return Ok(());
    }
    for n in &snap.nodes {
        let s = &n.stat;
        let _ = writeln!(out, "{}", n.path);
        let _ = writeln!(
            out,
            "  cZxid = 0x{:x}\n  ctime = {}\n  mZxid = 0x{:x}\n  mtime = {}\n  pZxid = 0x{:x}\n  cversion = {}\n  dataVersion = {}\n  aclVersion = {}\n  ephemeralOwner = 0x{:x}\n  dataLength = {}",
            s.czxid, s.ctime, s.mzxid, s.mtime, s.pzxid, s.cversion, s.version, s.aversion,
            s.ephemeral_owner as u64, n.data.as_ref().map_or(0, Vec::len)
        );
        for a in &n.acl {
            let _ = writeln!(out, "  acl = {}:{}:{}", a.id.scheme, a.id.id, a.perms.0);
        }
    }
    Ok(())
}

/// Prints every txn of the `log.*` files of `dir` (a ZooKeeper dataLogDir, its
/// `version-2`, or one log file): zxid, time, session, cxid, type and paths.
pub fn log(dir: &Path, out: &mut String) -> Result<(), ZkFileError> {
    let files = if dir.is_file() {
        vec![dir.to_owned()]
    } else {
        log_files(dir).map_err(|e| ZkFileError {
            file: dir.to_owned(),
            offset: 0,
            reason: format!("cannot list: {e}"),
        })?
    };
    let mut count = 0usize;
    for f in &files {
        let _ = writeln!(out, "ZooKeeper transaction log {}", f.display());
        for t in read_log(f)? {
            count += 1;
            let _ = write!(
                out,
                "zxid 0x{:x} time {} session 0x{:x} cxid 0x{:x} {}",
                t.zxid,
                t.time,
                t.session as u64,
                t.cxid as u32,
                txn_type_name(t.kind)
            );
            for p in &t.paths {
                let _ = write!(out, " {p}");
            }
            out.push('\n');
        }
    }
    let _ = writeln!(out, "{count} txns in {} files", files.len());
    Ok(())
}

/// Which files a dump reads.
#[derive(Debug, PartialEq, Eq)]
enum Format {
    /// Apache ZooKeeper's (`ZKLG` / `ZKSN`).
    ZooKeeper,
    /// rzk's (rzk-wal segments and snapshot files), with the log directory.
    Rzk(std::path::PathBuf),
}

/// Why a dump failed.
#[derive(Debug, thiserror::Error)]
pub enum DumpError {
    /// A ZooKeeper file.
    #[error(transparent)]
    Zk(#[from] ZkFileError),
    /// An rzk file (rzk-wal names the file, and the offset where it has one).
    #[error(transparent)]
    Wal(#[from] rzk_wal::WalError),
    /// Something else, with the path it concerns.
    #[error("{path}: {reason}")]
    Other {
        /// The file or directory.
        path: std::path::PathBuf,
        /// What is wrong.
        reason: String,
    },
}

fn other(path: &Path, reason: impl Into<String>) -> DumpError {
    DumpError::Other {
        path: path.to_owned(),
        reason: reason.into(),
    }
}

fn magic(path: &Path) -> Option<[u8; 8]> {
    use std::io::Read;
    let mut m = [0u8; 8];
    std::fs::File::open(path).ok()?.read_exact(&mut m).ok()?;
    Some(m)
}

/// Tells ZooKeeper's log files from rzk's by their first bytes (both are
/// named `log.<zxid>`).
fn log_format(path: &Path) -> Result<Format, DumpError> {
    if path.is_file() {
        return match magic(path) {
            Some(m) if &m[..4] == b"ZKLG" => Ok(Format::ZooKeeper),
            Some(m) if &m == b"RZKLOG01" => Ok(Format::Rzk(
                path.parent().unwrap_or(Path::new(".")).to_owned(),
            )),
            _ => Err(other(path, "neither a ZooKeeper nor an rzk log file")),
        };
    }
    if path.join("version-2").is_dir() {
        return Ok(Format::ZooKeeper);
    }
    if path.join("log").is_dir() && path.join("meta").is_dir() {
        // An rzk dataDir: the log is in log/ (unless dataLogDir moved it).
        return Ok(Format::Rzk(path.join("log")));
    }
    let entries = std::fs::read_dir(path).map_err(|e| other(path, format!("cannot list: {e}")))?;
    let mut rzk_start_file = false;
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        rzk_start_file |= name == "log-start";
        if name.starts_with("log.") && !name.ends_with(".tmp") {
            match magic(&e.path()) {
                Some(m) if &m[..4] == b"ZKLG" => return Ok(Format::ZooKeeper),
                Some(m) if &m == b"RZKLOG01" => return Ok(Format::Rzk(path.to_owned())),
                _ => {}
            }
        }
    }
    if rzk_start_file {
        return Ok(Format::Rzk(path.to_owned()));
    }
    Err(other(path, "no ZooKeeper or rzk log files here"))
}

/// `rzk log dump`: ZooKeeper's logs ([`log`]) or rzk's ([`rzk_log`]), told
/// apart by their contents.
pub fn any_log(path: &Path, out: &mut String) -> Result<(), DumpError> {
    match log_format(path)? {
        Format::ZooKeeper => Ok(log(path, out)?),
        Format::Rzk(dir) => {
            let only = path.is_file().then_some(path);
            rzk_log(&dir, only, out)
        }
    }
}

/// `rzk snapshot dump`: a ZooKeeper snapshot ([`snapshot`]) or an rzk one
/// ([`rzk_snapshot`]), told apart by their first bytes.
pub fn any_snapshot(path: &Path, summary_only: bool, out: &mut String) -> Result<(), DumpError> {
    match magic(path) {
        Some(m) if &m == b"RZKSNAP1" => rzk_snapshot(path, summary_only, out),
        _ => Ok(snapshot(path, summary_only, out)?),
    }
}

/// What an rzk txn is, in ZooKeeper's words, and the paths it touches.
fn rzk_txn_line(t: &crate::txn::Txn, out: &mut String) {
    use crate::txn::{TxnBody, TxnOp};
    let op_name = |op: &TxnOp| match op {
        TxnOp::Create { owner, .. } if *owner == crate::tree::CONTAINER_OWNER => "createContainer",
        TxnOp::Create { owner, .. } if crate::tree::owner_ttl(*owner).is_some() => "createTTL",
        TxnOp::Create { .. } => "create",
        TxnOp::Delete { .. } => "delete",
        TxnOp::SetData { .. } => "setData",
        TxnOp::SetAcl { .. } => "setACL",
        TxnOp::Check { .. } => "check",
    };
    let op_path = |op: &TxnOp| -> String {
        match op {
            TxnOp::Create { path, .. }
            | TxnOp::Delete { path }
            | TxnOp::SetData { path, .. }
            | TxnOp::SetAcl { path, .. }
            | TxnOp::Check { path } => path.clone(),
        }
    };
    match &t.body {
        TxnBody::CreateSession { timeout_ms, .. } => {
            let _ = write!(out, "createSession timeout {timeout_ms}");
        }
        TxnBody::CloseSession => out.push_str("closeSession"),
        TxnBody::Op(op) => {
            let _ = write!(out, "{} {}", op_name(op), op_path(op));
        }
        TxnBody::Multi(ops) => {
            out.push_str("multi");
            for op in ops {
                let _ = write!(out, " {}:{}", op_name(op), op_path(op));
            }
        }
        TxnBody::Error(code) => {
            let _ = write!(out, "error {code:?}");
        }
        TxnBody::MultiError {
            op_count,
            failed_index,
            code,
        } => {
            let _ = write!(out, "multiError op {failed_index} of {op_count}: {code:?}");
        }
    }
}

/// Prints every record of an rzk log directory (a data directory's `log/`,
/// or `dataLogDir`): zxid, time, session, cxid, origin member, type and
/// paths. Read only (rzk-wal's `inspect`): a torn tail is reported, not cut.
/// With `only`, just the records of that segment file.
pub fn rzk_log(dir: &Path, only: Option<&Path>, out: &mut String) -> Result<(), DumpError> {
    use rzk_wal::inspect::{read_log, LogItem, OnOpen};
    let inspection = read_log(dir)?;
    let _ = writeln!(out, "rzk transaction log {}", dir.display());
    if let Some(rw) = inspection.pending_rewrite() {
        let _ = writeln!(
            out,
            "an interrupted rewrite ({rw:?}) is finished by the next start; records it drops are still listed"
        );
    }
    for f in inspection.unfinished_files() {
        let _ = writeln!(
            out,
            "unfinished file {} (removed by the next start)",
            f.display()
        );
    }
    let mut refused = None;
    let (mut count, mut segments) = (0usize, 0usize);
    let (mut first, mut last) = (None, None);
    let mut in_scope = only.is_none();
    let start_file = inspection.start_file();
    for item in inspection {
        match item? {
            LogItem::Segment {
                path,
                first: f,
                prev,
                ..
            } => {
                in_scope = only.is_none_or(|o| o == path);
                if in_scope {
                    segments += 1;
                    let _ = writeln!(
                        out,
                        "segment {} (first {f}, follows {prev})",
                        path.display()
                    );
                }
            }
            LogItem::Record {
                offset,
                zxid,
                payload,
            } => {
                if !in_scope {
                    continue;
                }
                count += 1;
                first.get_or_insert(zxid);
                last = Some(zxid);
                match crate::txn::Txn::decode(&payload) {
                    Ok(t) => {
                        let h = &t.header;
                        let _ = write!(
                            out,
                            "zxid {zxid} time {} session 0x{:x} cxid 0x{:x} origin {} ",
                            h.time_ms, h.session as u64, h.cxid as u32, h.origin
                        );
                        rzk_txn_line(&t, out);
                        out.push('\n');
                    }
                    Err(e) => {
                        let _ = writeln!(
                            out,
                            "zxid {zxid} at offset {offset}: {} bytes, not an rzk txn: {e}",
                            payload.len()
                        );
                    }
                }
            }
            LogItem::Damage {
                path,
                offset,
                reason,
                on_open,
            } => {
                let what = match on_open {
                    OnOpen::CutTail => "a torn tail, which rzk cuts off when it starts",
                    OnOpen::Refuse => "damage, which stops rzk from starting",
                };
                let _ = writeln!(
                    out,
                    "{} at byte offset {offset}: {reason} ({what})",
                    path.display()
                );
                if on_open == OnOpen::Refuse && refused.is_none() {
                    refused = Some(rzk_wal::WalError::Corrupt {
                        path,
                        offset,
                        reason,
                    });
                }
            }
        }
    }
    if segments == 0 && only.is_none() {
        let _ = writeln!(out, "no segment; the log starts after {start_file}");
    }
    match (first, last) {
        (Some(f), Some(l)) => {
            let _ = writeln!(out, "{count} txns in {segments} segments, {f} to {l}");
        }
        _ => {
            let _ = writeln!(out, "{count} txns in {segments} segments");
        }
    }
    match refused {
        Some(e) => Err(e.into()),
        None => Ok(()),
    }
}

/// Prints an rzk snapshot file (`<dataDir>/snap/snapshot.<zxid>`): checks its
/// checksum, then a summary and (unless `summary_only`) every znode with its
/// stat and ACL, in the layout of the ZooKeeper dump.
pub fn rzk_snapshot(path: &Path, summary_only: bool, out: &mut String) -> Result<(), DumpError> {
    let file = rzk_wal::inspect::open_snapshot(path)?;
    let (tree, sessions, zxid) =
        crate::tree::DataTree::load_snapshot_from(&mut file.state_reader())
            .map_err(|e| other(path, e.to_string()))?;
    if zxid != file.zxid() {
        return Err(other(
            path,
            format!("the file says zxid {}, its state {zxid}", file.zxid()),
        ));
    }
    let nodes = tree.dump();
    let _ = writeln!(out, "rzk snapshot {}", path.display());
    let _ = writeln!(out, "zxid: {zxid}");
    let _ = writeln!(out, "znodes: {}", nodes.len());
    let _ = writeln!(out, "data bytes: {}", tree.approximate_data_size());
    let _ = writeln!(out, "ephemerals: {}", tree.ephemeral_count());
    let _ = writeln!(out, "sessions: {}", sessions.len());
    for s in &sessions {
        let _ = writeln!(
            out,
            "  session 0x{:x} timeout {} ms",
            s.id as u64, s.timeout_ms
        );
    }
    if summary_only {
        return Ok(());
    }
    for (p, (data, acl, s)) in &nodes {
        let _ = writeln!(out, "{p}");
        let _ = writeln!(
            out,
            "  cZxid = {}\n  ctime = {}\n  mZxid = {}\n  mtime = {}\n  pZxid = {}\n  cversion = {}\n  dataVersion = {}\n  aclVersion = {}\n  ephemeralOwner = 0x{:x}\n  dataLength = {}\n  numChildren = {}",
            s.czxid, s.ctime, s.mzxid, s.mtime, s.pzxid, s.cversion, s.version, s.aversion,
            s.ephemeral_owner.0 as u64, data.as_ref().map_or(0, |d| d.len()), s.num_children
        );
        for a in acl {
            let _ = writeln!(out, "  acl = {}:{}:{}", a.id.scheme, a.id.id, a.perms.0);
        }
    }
    Ok(())
}

//! `rzk snapshot dump <file>` and `rzk log dump <dir>`: what ZooKeeper's
//! `zkSnapShotToolkit` and `zkTxnLogToolkit` print, for ZooKeeper 3.8's
//! `snapshot.*` and `log.*` files (an operator checks what is there before
//! moving a data directory over). Reading is in [`crate::import_zk`]; every
//! file is only read.
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
    let data_bytes: usize = snap.nodes.iter().map(|n| n.data.len()).sum();
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
            s.ephemeral_owner as u64, n.data.len()
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

//! `rzk import-zookeeper`: moves an Apache ZooKeeper 3.8 data directory over
//! to rzk. It reads ZooKeeper's newest valid `snapshot.*` and replays the
//! `log.*` txns after it, the way ZooKeeper restores itself on start
//! (`FileTxnSnapLog.restore`), and writes an rzk data directory: one rzk-wal
//! snapshot at ZooKeeper's last zxid, and the epochs of that zxid.
//!
//! What it keeps, as ZooKeeper would after a restart:
//! - every znode with its data (null stays null), ACL and stat (czxid, mzxid,
//!   pzxid, ctime, mtime, version, cversion, aversion, ephemeralOwner);
//!   containers and TTL nodes keep their owner encodings;
//! - the sessions with their timeouts, and their ephemerals. On start the
//!   leader gives each session a full timeout: a client that reconnects with
//!   its session id and password (ZooKeeper's password is derived from the
//!   session id, and so is the one written here) resumes it, the others
//!   expire normally and their ephemerals go;
//! - ephemerals whose session is not in the session table are dropped, as
//!   ZooKeeper's `loadData` drops them;
//! - the last zxid: rzk serves from it, and its first own zxid is in the next
//!   epoch, so every zxid a client has seen stays valid.
//!
//! The fuzzy-snapshot rule: a snapshot is written while txns go on, so it may
//! already hold txns after the zxid in its name. The replay starts after that
//! zxid and applies each txn the way ZooKeeper's `DataTree.processTxn` does:
//! versions and cversions are set to the values in the txn (not incremented),
//! a create of a node that exists and a delete of one that does not are
//! ignored (a create's parent cversion and pzxid are still raised, as
//! ZooKeeper raises them), so a txn already in the snapshot applies
//! idempotently.
//!
//! Nothing is written until everything has been read and checked: a corrupt
//! or truncated file is an error naming the file and the byte offset, and the
//! target is left as it was. The rzk directory is written under a temporary
//! name next to the target and renamed at the end.
//!
//! ```no_run
//! use rzk_server::import::{import_zookeeper, ImportOptions};
//! let report = import_zookeeper(&ImportOptions {
//!     from: "/var/lib/zookeeper".into(),
//!     from_log: None,
//!     to: "/var/lib/rzk".into(),
//!     to_log: None,
//! })
//! .unwrap();
//! println!("{report}");
//! ```

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;
use std::path::{Path, PathBuf};

use bytes::Bytes;
use rzk_wal::{SyncMarker, SyncMode, Wal, WalOptions};
use rzk_wire::Acl;
use rzk_zxid::Zxid;

use crate::import_zk::{
    read_log_file, read_snapshot, zxid_of_name, ZkFileError, ZkNode, ZkSnapshot, ZkTxn, ZkTxnBody,
};
use crate::tree::{DataTree, ImportedNode, SessionRecord};

/// Where to read and where to write.
#[derive(Clone, Debug)]
pub struct ImportOptions {
    /// ZooKeeper's `dataDir` (or its `version-2`): the snapshots, and the logs
    /// unless `from_log` is given.
    pub from: PathBuf,
    /// ZooKeeper's `dataLogDir`, when it is not `dataDir`.
    pub from_log: Option<PathBuf>,
    /// rzk's `dataDir`: must not exist, or be an empty directory.
    pub to: PathBuf,
    /// rzk's `dataLogDir`, when it is not `dataDir` (same rule).
    pub to_log: Option<PathBuf>,
}

/// Why an import failed. Nothing was written to the target.
#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    /// A ZooKeeper file could not be read: which, where and why.
    #[error(transparent)]
    File(#[from] ZkFileError),
    /// The source does not hold what an import needs.
    #[error("{dir}: {reason}")]
    Source {
        /// The directory.
        dir: PathBuf,
        /// What is missing or wrong.
        reason: String,
    },
    /// A txn that cannot be replayed (an order ZooKeeper never writes).
    #[error("{file}: at byte offset {offset}: txn 0x{zxid:x}: {reason}")]
    Txn {
        /// The log file.
        file: PathBuf,
        /// Where the txn's record starts.
        offset: u64,
        /// Its zxid.
        zxid: i64,
        /// What is wrong.
        reason: String,
    },
    /// The target cannot be written.
    #[error("{path}: {reason}")]
    Target {
        /// The directory.
        path: PathBuf,
        /// Why.
        reason: String,
    },
}

/// What an import did.
#[derive(Clone, Debug)]
pub struct ImportReport {
    /// The snapshot it started from, and its zxid.
    pub snapshot: PathBuf,
    /// The zxid in the snapshot's name.
    pub snapshot_zxid: i64,
    /// Newer snapshots that could not be read (ZooKeeper skips them too; the
    /// import does only when the log replayed past their zxid).
    pub skipped_snapshots: Vec<ZkFileError>,
    /// The log files read.
    pub log_files: Vec<PathBuf>,
    /// Txns replayed after the snapshot.
    pub txns_replayed: usize,
    /// A record cut short at the end of the newest log (a crash while it was
    /// written): the log ends before it, as ZooKeeper reads it.
    pub partial_tail: Option<ZkFileError>,
    /// The last zxid: rzk continues after it.
    pub last_zxid: i64,
    /// Znodes written.
    pub znodes: usize,
    /// Sessions kept.
    pub sessions: usize,
    /// Ephemerals kept (they go when their session expires).
    pub ephemerals: usize,
    /// Ephemerals dropped because their session was not in the session table.
    pub dropped_ephemerals: Vec<String>,
    /// The rzk data directory written (and its log directory).
    pub to: PathBuf,
    /// The rzk log directory, when separate.
    pub to_log: Option<PathBuf>,
}

impl fmt::Display for ImportReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for e in &self.skipped_snapshots {
            writeln!(f, "skipped an unreadable snapshot (as ZooKeeper does): {e}")?;
        }
        writeln!(
            f,
            "snapshot {} (zxid 0x{:x})",
            self.snapshot.display(),
            self.snapshot_zxid
        )?;
        for l in &self.log_files {
            writeln!(f, "log {}", l.display())?;
        }
        if let Some(e) = &self.partial_tail {
            writeln!(
                f,
                "the newest log ends in a partial txn, not replayed (as ZooKeeper does): {e}"
            )?;
        }
        writeln!(f, "{} txns replayed after the snapshot", self.txns_replayed)?;
        for p in &self.dropped_ephemerals {
            writeln!(f, "dropped ephemeral {p}: its session is gone")?;
        }
        writeln!(
            f,
            "{} znodes, {} sessions, {} ephemerals, last zxid 0x{:x}",
            self.znodes, self.sessions, self.ephemerals, self.last_zxid
        )?;
        write!(f, "wrote {}", self.to.display())?;
        if let Some(l) = &self.to_log {
            write!(f, " (log in {})", l.display())?;
        }
        Ok(())
    }
}

/// Imports a ZooKeeper data directory (see the module docs).
pub fn import_zookeeper(opts: &ImportOptions) -> Result<ImportReport, ImportError> {
    check_target(&opts.to)?;
    if let Some(l) = &opts.to_log {
        check_target(l)?;
    }
    let snap_dir = version_dir(&opts.from);
    let log_dir = version_dir(opts.from_log.as_deref().unwrap_or(&opts.from));
    let (snapshot, snap_zxid, snap, skipped) = newest_valid_snapshot(&snap_dir)?;
    let mut model = Model::from_snapshot(&snap);
    let logs = log_files_after(&log_dir, snap_zxid)?;
    let mut report = ImportReport {
        snapshot,
        snapshot_zxid: snap_zxid,
        skipped_snapshots: skipped,
        log_files: logs.clone(),
        txns_replayed: 0,
        partial_tail: None,
        last_zxid: snap_zxid,
        znodes: 0,
        sessions: 0,
        ephemerals: 0,
        dropped_ephemerals: Vec::new(),
        to: opts.to.clone(),
        to_log: opts.to_log.clone(),
    };
    let mut last = snap_zxid;
    for (i, file) in logs.iter().enumerate() {
        let log = read_log_file(file)?;
        if let Some(tail) = log.partial_tail {
            if i + 1 != logs.len() {
                // Only the log being written when the server stopped can end
                // in a partial record; anywhere else it is damage.
                return Err(tail.into());
            }
            report.partial_tail = Some(tail);
        }
        for t in log.txns {
            if t.zxid <= snap_zxid {
                continue;
            }
            check_order(file, &t, last)?;
            model.apply(file, &t)?;
            last = t.zxid;
            report.txns_replayed += 1;
        }
    }
    // A newer snapshot that does not read is skipped as ZooKeeper skips it,
    // but only when the log replayed past it: otherwise its txns would be
    // lost (I7: refuse instead).
    if let Some(e) = report
        .skipped_snapshots
        .iter()
        .find(|e| snapshot_zxid(&e.file).is_some_and(|z| z as u64 > last as u64))
    {
        return Err(ImportError::Source {
            dir: snap_dir.clone(),
            reason: format!(
                "the newest snapshot does not read and the log does not reach its zxid \
                 (it ends at 0x{last:x}): {e}"
            ),
        });
    }
    report.dropped_ephemerals = model.drop_dead_ephemerals(last);
    report.last_zxid = last;
    let (tree, sessions) = model.into_tree()?;
    report.znodes = tree.node_count();
    report.sessions = sessions.len();
    report.ephemerals = tree.ephemeral_count();
    write_target(opts, tree, &sessions, Zxid::from_i64(last))?;
    Ok(report)
}

/// The zxid in a snapshot's name, compressed or not.
fn snapshot_zxid(path: &Path) -> Option<i64> {
    let name = path.file_name()?.to_str()?;
    let stem = name
        .strip_suffix(".gz")
        .or_else(|| name.strip_suffix(".snappy"))
        .unwrap_or(name);
    zxid_of_name(Path::new(stem), "snapshot")
}

/// ZooKeeper keeps its files under `version-2` of the configured directory.
fn version_dir(dir: &Path) -> PathBuf {
    let v = dir.join("version-2");
    if v.is_dir() {
        v
    } else {
        dir.to_owned()
    }
}

fn list(dir: &Path, prefix: &str) -> Result<Vec<(i64, PathBuf)>, ImportError> {
    let entries = std::fs::read_dir(dir).map_err(|e| ImportError::Source {
        dir: dir.to_owned(),
        reason: format!("cannot list: {e}"),
    })?;
    let mut out = Vec::new();
    for e in entries.flatten() {
        let path = e.path();
        if let Some(z) = zxid_of_name(&path, prefix) {
            out.push((z, path));
        }
    }
    out.sort_by_key(|(z, _)| *z as u64);
    Ok(out)
}

type NewestSnapshot = (PathBuf, i64, ZkSnapshot, Vec<ZkFileError>);

/// The newest snapshot that reads whole, as ZooKeeper's `FileSnap` picks it;
/// the newer ones that do not read are reported.
fn newest_valid_snapshot(dir: &Path) -> Result<NewestSnapshot, ImportError> {
    let snaps = list(dir, "snapshot")?;
    let compressed = std::fs::read_dir(dir)
        .map_err(|e| ImportError::Source {
            dir: dir.to_owned(),
            reason: format!("cannot list: {e}"),
        })?
        .flatten()
        .any(|e| {
            let name = e.file_name();
            let name = name.to_string_lossy();
            name.starts_with("snapshot.") && (name.ends_with(".gz") || name.ends_with(".snappy"))
        });
    let mut skipped = Vec::new();
    for (zxid, path) in snaps.into_iter().rev() {
        match read_snapshot(&path) {
            Ok(s) => {
                skipped.extend(compressed_after(dir, zxid));
                return Ok((path, zxid, s, skipped));
            }
            Err(e) => skipped.push(e),
        }
    }
    if let Some(newest) = skipped.into_iter().next() {
        return Err(newest.into());
    }
    let reason = if compressed {
        "only compressed snapshots (zookeeper.snapshot.compression.method); restart \
         ZooKeeper once without compression to write a plain one"
    } else {
        "no snapshot.* file (is this ZooKeeper's dataDir?)"
    };
    Err(ImportError::Source {
        dir: dir.to_owned(),
        reason: reason.to_owned(),
    })
}

/// Compressed snapshots newer than `zxid`: not read, so they count as
/// unreadable (the import goes on only if the log replays past them).
fn compressed_after(dir: &Path, zxid: i64) -> Vec<ZkFileError> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for e in entries.flatten() {
        let path = e.path();
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(stem) = name
            .strip_suffix(".gz")
            .or_else(|| name.strip_suffix(".snappy"))
        else {
            continue;
        };
        let Some(z) = zxid_of_name(Path::new(stem), "snapshot") else {
            continue;
        };
        if z as u64 > zxid as u64 {
            out.push(ZkFileError {
                file: path,
                offset: 0,
                reason: "a compressed snapshot, which the import does not read".into(),
            });
        }
    }
    out
}

/// The log files that may hold txns after `zxid`: those that start after it
/// and the newest one that starts at or before it (ZooKeeper's
/// `FileTxnLog.getLogFiles`).
fn log_files_after(dir: &Path, zxid: i64) -> Result<Vec<PathBuf>, ImportError> {
    let all = list(dir, "log")?;
    let first = all
        .iter()
        .rposition(|(start, _)| (*start as u64) <= zxid as u64)
        .unwrap_or(0);
    Ok(all.into_iter().skip(first).map(|(_, p)| p).collect())
}

/// Txns after the snapshot must come in zxid order without a hole inside an
/// epoch: a missing log file would otherwise lose writes silently.
fn check_order(file: &Path, t: &ZkTxn, last: i64) -> Result<(), ImportError> {
    let (prev, next) = (Zxid::from_i64(last), Zxid::from_i64(t.zxid));
    if next.is_next(prev) {
        return Ok(());
    }
    Err(ImportError::Txn {
        file: file.to_owned(),
        offset: t.offset,
        zxid: t.zxid,
        reason: format!(
            "does not follow 0x{last:x}: txns are missing between them (a log file \
             missing or purged?)"
        ),
    })
}

/// A znode during the replay.
#[derive(Clone, Debug)]
struct MNode {
    data: Option<Vec<u8>>,
    acl: Vec<Acl>,
    czxid: i64,
    mzxid: i64,
    pzxid: i64,
    ctime: i64,
    mtime: i64,
    version: i32,
    /// ZooKeeper's persisted cversion: the create counter.
    cversion: i32,
    aversion: i32,
    owner: i64,
    children: BTreeSet<String>,
}

/// The tree and sessions as ZooKeeper's `DataTree` holds them while it
/// restores: a replay applies txns with its rules.
struct Model {
    nodes: HashMap<String, MNode>,
    ephemerals: HashMap<i64, BTreeSet<String>>,
    sessions: BTreeMap<i64, i32>,
}

fn parent_of(p: &str) -> Option<&str> {
    if p == "/" || !p.starts_with('/') {
        return None;
    }
    let i = p.rfind('/')?;
    Some(if i == 0 { "/" } else { &p[..i] })
}

fn name_of(p: &str) -> &str {
    &p[p.rfind('/').map_or(0, |i| i + 1)..]
}

impl Model {
    fn from_snapshot(s: &ZkSnapshot) -> Model {
        let mut m = Model {
            nodes: HashMap::with_capacity(s.nodes.len()),
            ephemerals: HashMap::new(),
            sessions: s.sessions.iter().copied().collect(),
        };
        for n in &s.nodes {
            m.insert_snapshot_node(n);
        }
        m
    }

    fn insert_snapshot_node(&mut self, n: &ZkNode) {
        let st = &n.stat;
        if let Some(parent) = parent_of(&n.path) {
            if let Some(p) = self.nodes.get_mut(parent) {
                p.children.insert(name_of(&n.path).to_owned());
            }
        }
        self.index(&n.path, st.ephemeral_owner);
        self.nodes.insert(
            n.path.clone(),
            MNode {
                data: n.data.clone(),
                acl: n.acl.clone(),
                czxid: st.czxid,
                mzxid: st.mzxid,
                pzxid: st.pzxid,
                ctime: st.ctime,
                mtime: st.mtime,
                version: st.version,
                cversion: st.cversion,
                aversion: st.aversion,
                owner: st.ephemeral_owner,
                children: BTreeSet::new(),
            },
        );
    }

    fn index(&mut self, p: &str, owner: i64) {
        if crate::tree::owner_is_session(owner) {
            self.ephemerals
                .entry(owner)
                .or_default()
                .insert(p.to_owned());
        }
    }

    fn unindex(&mut self, p: &str, owner: i64) {
        if let Some(set) = self.ephemerals.get_mut(&owner) {
            set.remove(p);
            if set.is_empty() {
                self.ephemerals.remove(&owner);
            }
        }
    }

    fn apply(&mut self, file: &Path, t: &ZkTxn) -> Result<(), ImportError> {
        for p in &t.paths {
            if !p.starts_with('/') {
                return Err(ImportError::Txn {
                    file: file.to_owned(),
                    offset: t.offset,
                    zxid: t.zxid,
                    reason: format!("path {p:?} does not start with /"),
                });
            }
        }
        match &t.body {
            ZkTxnBody::CreateSession { timeout_ms } => {
                self.sessions.insert(t.session, *timeout_ms);
            }
            ZkTxnBody::CloseSession { paths } => {
                self.sessions.remove(&t.session);
                self.kill_session(t.session, t.zxid, paths.as_deref());
            }
            ZkTxnBody::Multi(ops) => {
                // A failed multi is logged with every op an error: nothing applies.
                if !ops
                    .iter()
                    .any(|(_, o)| matches!(o, ZkTxnBody::Error { .. }))
                {
                    for (kind, op) in ops {
                        self.apply_op(op, *kind, t);
                    }
                }
            }
            op => self.apply_op(op, t.kind, t),
        }
        Ok(())
    }

    /// One change, as `DataTree.processTxn` makes it; a NONODE or NODEEXISTS
    /// (a txn the fuzzy snapshot already holds) changes nothing, except that
    /// a plain create's parent cversion and pzxid still go up.
    fn apply_op(&mut self, op: &ZkTxnBody, kind: i32, t: &ZkTxn) {
        match op {
            ZkTxnBody::Create {
                path,
                data,
                acl,
                owner,
                parent_cversion,
            } => {
                let exists = self.nodes.contains_key(path);
                if exists {
                    if kind == 1 {
                        self.raise_cversion(path, *parent_cversion, t.zxid);
                    }
                    return;
                }
                self.create(path, data, acl, *owner, *parent_cversion, t);
            }
            ZkTxnBody::Delete { path } => self.delete(path, t.zxid),
            ZkTxnBody::SetData {
                path,
                data,
                version,
            } => {
                if let Some(n) = self.nodes.get_mut(path) {
                    n.data = data.clone();
                    n.mtime = t.time;
                    n.mzxid = t.zxid;
                    n.version = *version;
                }
            }
            ZkTxnBody::SetAcl { path, acl, version } => {
                if let Some(n) = self.nodes.get_mut(path) {
                    n.acl = acl.clone();
                    n.aversion = *version;
                }
            }
            ZkTxnBody::CreateSession { .. }
            | ZkTxnBody::CloseSession { .. }
            | ZkTxnBody::Multi(_)
            | ZkTxnBody::Check { .. }
            | ZkTxnBody::Error { .. } => {}
        }
    }

    fn create(
        &mut self,
        path: &str,
        data: &Option<Vec<u8>>,
        acl: &[Acl],
        owner: i64,
        parent_cversion: i32,
        t: &ZkTxn,
    ) {
        let Some(parent_path) = parent_of(path) else {
            return;
        };
        let Some(parent) = self.nodes.get_mut(parent_path) else {
            return;
        };
        let cversion = if parent_cversion == -1 {
            parent.cversion.wrapping_add(1)
        } else {
            parent_cversion
        };
        if cversion > parent.cversion {
            parent.cversion = cversion;
            parent.pzxid = t.zxid;
        }
        parent.children.insert(name_of(path).to_owned());
        self.index(path, owner);
        self.nodes.insert(
            path.to_owned(),
            MNode {
                data: data.clone(),
                acl: acl.to_vec(),
                czxid: t.zxid,
                mzxid: t.zxid,
                pzxid: t.zxid,
                ctime: t.time,
                mtime: t.time,
                version: 0,
                cversion: 0,
                aversion: 0,
                owner,
                children: BTreeSet::new(),
            },
        );
    }

    /// `DataTree.setCversionPzxid`.
    fn raise_cversion(&mut self, path: &str, cversion: i32, zxid: i64) {
        let Some(parent) = parent_of(path).and_then(|p| self.nodes.get_mut(p)) else {
            return;
        };
        let cversion = if cversion == -1 {
            parent.cversion.wrapping_add(1)
        } else {
            cversion
        };
        if cversion > parent.cversion {
            parent.cversion = cversion;
            parent.pzxid = zxid;
        }
    }

    /// `DataTree.deleteNode`: the parent's pzxid goes up to the txn's even if
    /// the child is gone already. ZooKeeper never deletes a node with
    /// children; if a log did, its subtree would be unreachable in ZooKeeper
    /// (and in its next snapshot), so it goes here too.
    fn delete(&mut self, path: &str, zxid: i64) {
        let Some(parent) = parent_of(path).and_then(|p| self.nodes.get_mut(p)) else {
            return;
        };
        parent.children.remove(name_of(path));
        if zxid > parent.pzxid {
            parent.pzxid = zxid;
        }
        let mut stack = vec![path.to_owned()];
        while let Some(p) = stack.pop() {
            let Some(n) = self.nodes.remove(&p) else {
                continue;
            };
            self.unindex(&p, n.owner);
            for c in &n.children {
                stack.push(if p == "/" {
                    format!("/{c}")
                } else {
                    format!("{p}/{c}")
                });
            }
        }
    }

    /// `DataTree.killSession`: the paths the txn lists, then any other
    /// ephemeral of the session.
    fn kill_session(&mut self, session: i64, zxid: i64, listed: Option<&[String]>) {
        let mut local = self.ephemerals.remove(&session).unwrap_or_default();
        for p in listed.unwrap_or_default() {
            local.remove(p);
            self.delete(p, zxid);
        }
        for p in local {
            self.delete(&p, zxid);
        }
    }

    /// ZooKeeper's `loadData`: ephemerals of sessions that are not in the
    /// session table are deleted, at the last zxid.
    fn drop_dead_ephemerals(&mut self, last: i64) -> Vec<String> {
        let dead: Vec<i64> = self
            .ephemerals
            .keys()
            .filter(|s| !self.sessions.contains_key(s))
            .copied()
            .collect();
        let mut dropped = Vec::new();
        for s in dead {
            dropped.extend(self.ephemerals.get(&s).into_iter().flatten().cloned());
            self.kill_session(s, last, None);
        }
        dropped.sort();
        dropped
    }

    /// The rzk tree and session table.
    fn into_tree(self) -> Result<(DataTree, Vec<SessionRecord>), ImportError> {
        // Parents sort before their children (a path is a prefix of its
        // children's).
        let sorted: BTreeMap<String, MNode> = self.nodes.into_iter().collect();
        let nodes = sorted.into_iter().map(|(path, n)| ImportedNode {
            path,
            data: n.data.map(Bytes::from),
            acl: n.acl,
            czxid: n.czxid as u64,
            mzxid: n.mzxid as u64,
            pzxid: n.pzxid as u64,
            ctime: n.ctime,
            mtime: n.mtime,
            version: n.version,
            aversion: n.aversion,
            ccount: n.cversion,
            owner: n.owner,
        });
        let tree = DataTree::from_imported(nodes).map_err(|e| ImportError::Source {
            dir: PathBuf::new(),
            reason: format!("the replayed tree is inconsistent: {e}"),
        })?;
        let sessions = self
            .sessions
            .into_iter()
            .map(|(id, timeout_ms)| SessionRecord {
                id,
                timeout_ms,
                password: zookeeper_password(id),
            })
            .collect();
        Ok((tree, sessions))
    }
}

/// The password ZooKeeper gives session `id`: 16 bytes of
/// `java.util.Random(id ^ 0xB3415C00).nextBytes` (ZooKeeperServer's
/// `generatePasswd`, which `checkPasswd` compares against), so a client that
/// reconnects with the password ZooKeeper gave it resumes its session.
pub fn zookeeper_password(id: i64) -> [u8; 16] {
    const MULTIPLIER: u64 = 0x5DEE_CE66D;
    const MASK: u64 = (1 << 48) - 1;
    let mut seed = ((id ^ 0xB341_5C00) as u64 ^ MULTIPLIER) & MASK;
    let mut next_int = || {
        seed = (seed.wrapping_mul(MULTIPLIER).wrapping_add(0xB)) & MASK;
        (seed >> 16) as u32
    };
    let mut out = [0u8; 16];
    for chunk in out.chunks_mut(4) {
        let mut rnd = next_int();
        for b in chunk {
            *b = rnd as u8;
            rnd >>= 8;
        }
    }
    out
}

/// The target must not exist, or be an empty directory: an import never
/// overwrites data.
fn check_target(to: &Path) -> Result<(), ImportError> {
    let bad = |reason: String| ImportError::Target {
        path: to.to_owned(),
        reason,
    };
    match std::fs::read_dir(to) {
        Ok(mut entries) => {
            if entries.next().is_some() {
                return Err(bad(
                    "exists and is not empty; an import never overwrites".into()
                ));
            }
            Ok(())
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let parent = parent_dir(to);
            if parent.is_dir() {
                Ok(())
            } else {
                Err(bad(format!(
                    "its parent {} is not a directory",
                    parent.display()
                )))
            }
        }
        Err(e) => Err(bad(e.to_string())),
    }
}

fn parent_dir(p: &Path) -> PathBuf {
    match p.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_owned(),
        _ => PathBuf::from("."),
    }
}

/// `<parent>/.<name>.import-<pid>`: on the target's file system, so the
/// final rename is atomic.
fn temporary_for(to: &Path) -> PathBuf {
    let name = to
        .file_name()
        .map_or_else(|| "rzk".into(), |n| n.to_string_lossy().into_owned());
    parent_dir(to).join(format!(".{name}.import-{}", std::process::id()))
}

/// Removes the temporary directories unless the import got to its end.
struct Cleanup(Vec<PathBuf>);

impl Drop for Cleanup {
    fn drop(&mut self) {
        for d in &self.0 {
            let _ = std::fs::remove_dir_all(d);
        }
    }
}

fn sync_dir(d: &Path) -> std::io::Result<()> {
    std::fs::File::open(d)?.sync_all()
}

fn write_target(
    opts: &ImportOptions,
    mut tree: DataTree,
    sessions: &[SessionRecord],
    zxid: Zxid,
) -> Result<(), ImportError> {
    let target = |path: &Path, e: &dyn fmt::Display| ImportError::Target {
        path: path.to_owned(),
        reason: e.to_string(),
    };
    let bytes = tree.snapshot_now(zxid, sessions);
    // What rzk will load must be what was replayed (I7: check before it
    // counts).
    let (back, back_sessions, at) =
        DataTree::load_snapshot(&bytes).map_err(|e| target(&opts.to, &e))?;
    if at != zxid || back.dump() != tree.dump() || back_sessions != sessions {
        return Err(target(&opts.to, &"the written snapshot does not read back"));
    }
    let tmp = temporary_for(&opts.to);
    let tmp_log = opts.to_log.as_deref().map(temporary_for);
    let mut cleanup = Cleanup(vec![tmp.clone()]);
    cleanup.0.extend(tmp_log.clone());
    let wal_opts = WalOptions {
        log_dir: tmp_log.clone(),
        ..WalOptions::default()
    };
    let (wal, _) = Wal::open(&tmp, wal_opts).map_err(|e| target(&tmp, &e))?;
    let epoch = zxid.epoch();
    let install = || -> rzk_wal::Result<()> {
        wal.set_accepted_epoch(epoch)?;
        wal.begin_sync(SyncMarker {
            mode: SyncMode::Snap,
            target: zxid,
        })?;
        wal.install_snapshot(zxid, &mut &bytes[..])?;
        wal.end_sync(Some(epoch))
    };
    install().map_err(|e| target(&tmp, &e))?;
    drop(wal);
    // The log directory first: the data directory's rename is the commit
    // point (without it, the next import finds the log directory taken and
    // stops).
    if let (Some(from), Some(to)) = (&tmp_log, &opts.to_log) {
        rename_dir(from, to)?;
    }
    rename_dir(&tmp, &opts.to)?;
    cleanup.0.clear();
    Ok(())
}

fn rename_dir(from: &Path, to: &Path) -> Result<(), ImportError> {
    let err = |e: std::io::Error| ImportError::Target {
        path: to.to_owned(),
        reason: format!("cannot rename {} here: {e}", from.display()),
    };
    sync_dir(from).map_err(err)?;
    // rename(2) replaces an empty directory.
    std::fs::rename(from, to).map_err(err)?;
    sync_dir(&parent_dir(to)).map_err(err)
}

#[cfg(test)]
#[path = "import_tests.rs"]
mod tests;

//! Imports of ZooKeeper data directories built byte by byte from the format
//! facts (jute, big-endian; see `import_zk.rs`). The test with a real
//! ZooKeeper is `tests/import_zk.rs`.

use super::*;

const WORLD: i64 = -1;

fn jstr(b: &mut Vec<u8>, s: &str) {
    b.extend((s.len() as i32).to_be_bytes());
    b.extend(s.as_bytes());
}

fn jbuf(b: &mut Vec<u8>, d: Option<&[u8]>) {
    match d {
        None => b.extend((-1i32).to_be_bytes()),
        Some(d) => {
            b.extend((d.len() as i32).to_be_bytes());
            b.extend(d);
        }
    }
}

fn world_acl(b: &mut Vec<u8>) {
    b.extend(1i32.to_be_bytes());
    b.extend(31i32.to_be_bytes());
    jstr(b, "world");
    jstr(b, "anyone");
}

fn seal(b: &mut Vec<u8>) {
    let mut a = adler2::Adler32::new();
    a.write_slice(b);
    b.extend(i64::from(a.checksum()).to_be_bytes());
    jstr(b, "/");
}

/// A node of a hand-built snapshot: path, data, czxid, cversion (the
/// create counter), pzxid, owner.
struct SNode(&'static str, Option<&'static [u8]>, i64, i32, i64, i64);

fn snapshot_bytes(sessions: &[(i64, i32)], nodes: &[SNode]) -> Vec<u8> {
    let mut b = Vec::new();
    b.extend(b"ZKSN");
    b.extend(2i32.to_be_bytes());
    b.extend((-1i64).to_be_bytes());
    b.extend((sessions.len() as i32).to_be_bytes());
    for (id, t) in sessions {
        b.extend(id.to_be_bytes());
        b.extend(t.to_be_bytes());
    }
    b.extend(0i32.to_be_bytes()); // ACL cache: only world:anyone (ref -1)
    for SNode(path, data, czxid, cversion, pzxid, owner) in nodes {
        jstr(&mut b, if *path == "/" { "" } else { path });
        jbuf(&mut b, *data);
        b.extend(WORLD.to_be_bytes());
        for v in [*czxid, *czxid, 1000, 1000] {
            b.extend(v.to_be_bytes()); // czxid, mzxid, ctime, mtime
        }
        for v in [0i32, *cversion, 0] {
            b.extend(v.to_be_bytes()); // version, cversion, aversion
        }
        b.extend(owner.to_be_bytes());
        b.extend(pzxid.to_be_bytes());
    }
    jstr(&mut b, "/");
    seal(&mut b);
    b
}

/// A txn: session, zxid, time, type, body.
struct T(i64, i64, i64, i32, Vec<u8>);

fn create_body(path: &str, data: &[u8], ephemeral: bool, parent_cversion: i32) -> Vec<u8> {
    let mut b = Vec::new();
    jstr(&mut b, path);
    jbuf(&mut b, Some(data));
    world_acl(&mut b);
    b.push(u8::from(ephemeral));
    b.extend(parent_cversion.to_be_bytes());
    b
}

fn path_body(path: &str) -> Vec<u8> {
    let mut b = Vec::new();
    jstr(&mut b, path);
    b
}

fn set_data_body(path: &str, data: &[u8], version: i32) -> Vec<u8> {
    let mut b = path_body(path);
    jbuf(&mut b, Some(data));
    b.extend(version.to_be_bytes());
    b
}

fn close_body(paths: &[&str]) -> Vec<u8> {
    let mut b = (paths.len() as i32).to_be_bytes().to_vec();
    for p in paths {
        jstr(&mut b, p);
    }
    b
}

fn multi_body(ops: &[(i32, Vec<u8>)]) -> Vec<u8> {
    let mut b = (ops.len() as i32).to_be_bytes().to_vec();
    for (t, body) in ops {
        b.extend(t.to_be_bytes());
        jbuf(&mut b, Some(body));
    }
    b
}

fn record(t: &T) -> Vec<u8> {
    let mut txn = Vec::new();
    txn.extend(t.0.to_be_bytes());
    txn.extend(7i32.to_be_bytes()); // cxid
    txn.extend(t.1.to_be_bytes());
    txn.extend(t.2.to_be_bytes());
    txn.extend(t.3.to_be_bytes());
    txn.extend(&t.4);
    let mut a = adler2::Adler32::new();
    a.write_slice(&txn);
    let mut r = Vec::new();
    r.extend(i64::from(a.checksum()).to_be_bytes());
    r.extend((txn.len() as i32).to_be_bytes());
    r.extend(txn);
    r.push(b'B');
    r
}

fn log_bytes(txns: &[T]) -> Vec<u8> {
    let mut b = Vec::new();
    b.extend(b"ZKLG");
    b.extend(2i32.to_be_bytes());
    b.extend((-1i64).to_be_bytes());
    for t in txns {
        b.extend(record(t));
    }
    b.extend([0u8; 64]); // preallocated
    b
}

struct Dirs {
    _tmp: tempfile::TempDir,
    zk: PathBuf,
    to: PathBuf,
}

fn dirs() -> Dirs {
    let tmp = tempfile::tempdir().unwrap();
    let zk = tmp.path().join("zk");
    std::fs::create_dir_all(zk.join("version-2")).unwrap();
    let to = tmp.path().join("rzk");
    Dirs { zk, to, _tmp: tmp }
}

impl Dirs {
    fn write(&self, name: &str, bytes: &[u8]) -> PathBuf {
        let p = self.zk.join("version-2").join(name);
        std::fs::write(&p, bytes).unwrap();
        p
    }

    fn opts(&self) -> ImportOptions {
        ImportOptions {
            from: self.zk.clone(),
            from_log: None,
            to: self.to.clone(),
            to_log: None,
        }
    }

    /// The tree, sessions and zxid the written rzk directory holds, read
    /// the way the server reads it (rzk-wal's rebuild).
    fn load(&self) -> (DataTree, Vec<SessionRecord>, Zxid, rzk_zxid::Epoch) {
        let (wal, rec) = Wal::open(&self.to, WalOptions::default()).unwrap();
        assert!(rec.sync_in_progress.is_none());
        let rebuild = wal.rebuild().unwrap();
        assert_eq!(rebuild.records.count(), 0, "an import writes no log record");
        let snap = rebuild.snapshot.expect("a snapshot");
        let (tree, sessions, at) = DataTree::load_snapshot(&snap.data).unwrap();
        assert_eq!(at, snap.zxid);
        assert_eq!(wal.last_durable_zxid(), at);
        assert_eq!(rec.accepted_epoch, rec.current_epoch);
        (tree, sessions, at, rec.current_epoch)
    }
}

const S1: i64 = 0x0100_0000_0000_0001;
const S2: i64 = 0x0100_0000_0000_0002;
const S3: i64 = 0x0100_0000_0000_0003;

/// The base snapshot: `/`, `/zookeeper`, `/app` (created at 0x100000001).
fn base_nodes() -> Vec<SNode> {
    vec![
        SNode("/", Some(b""), 0, 1, 0x1_0000_0001, 0),
        SNode("/zookeeper", Some(b""), 0, 0, 0, 0),
        SNode("/app", Some(b"a"), 0x1_0000_0001, 0, 0x1_0000_0001, 0),
    ]
}

/// Txns after the base: create /app/x (2), setData /app/x (3), create
/// /app/y (4), delete /app/y (5), a multi creating /app/m and setting /app/x
/// (6), create /app/z (7).
fn txns() -> Vec<T> {
    let z = |c: i64| 0x1_0000_0000 + c;
    vec![
        T(S1, z(2), 2000, 1, create_body("/app/x", b"x", false, 1)),
        T(S1, z(3), 3000, 5, set_data_body("/app/x", b"x2", 1)),
        T(S1, z(4), 4000, 15, create_body("/app/y", b"y", false, 2)),
        T(S1, z(5), 5000, 2, path_body("/app/y")),
        T(
            S1,
            z(6),
            6000,
            14,
            multi_body(&[
                (1, create_body("/app/m", b"m", false, 3)),
                (5, set_data_body("/app/x", b"x3", 2)),
            ]),
        ),
        T(S1, z(7), 7000, 1, create_body("/app/z", b"", false, 4)),
    ]
}

#[test]
fn replays_the_log_after_the_snapshot() {
    let d = dirs();
    d.write(
        "snapshot.100000001",
        &snapshot_bytes(&[(S1, 30_000)], &base_nodes()),
    );
    d.write("log.100000002", &log_bytes(&txns()));
    let report = import_zookeeper(&d.opts()).unwrap();
    assert_eq!(report.txns_replayed, 6);
    assert_eq!(report.last_zxid, 0x1_0000_0007);
    let (tree, sessions, at, epoch) = d.load();
    assert_eq!(at, Zxid::from_u64(0x1_0000_0007));
    assert_eq!(epoch, rzk_zxid::Epoch(1));
    assert_eq!(sessions.len(), 1);
    let x = tree.get("/app/x").unwrap();
    assert_eq!(x.data_slice(), Some(&b"x3"[..]));
    let st = x.stat();
    assert_eq!(
        (st.version, st.czxid.as_u64(), st.mzxid.as_u64()),
        (2, 0x1_0000_0002, 0x1_0000_0006)
    );
    assert_eq!((st.ctime, st.mtime), (2000, 6000));
    assert!(tree.get("/app/y").is_none());
    let app = tree.get("/app").unwrap().stat();
    // Creates x, y, m, z (C = 4), y deleted: cversion 2·4 − 3 = 5.
    assert_eq!((app.cversion, app.num_children), (5, 3));
    assert_eq!(app.pzxid.as_u64(), 0x1_0000_0007);
    assert_eq!(tree.get("/app/z").unwrap().data_slice(), Some(&b""[..]));
}

/// The fuzzy-snapshot rule: a snapshot named at 0x100000001 that already
/// holds the effects of txns 2 to 6 gives the same tree as the clean one,
/// because every txn after the name is replayed idempotently.
#[test]
fn a_fuzzy_snapshot_gives_the_same_tree() {
    let clean = dirs();
    clean.write(
        "snapshot.100000001",
        &snapshot_bytes(&[(S1, 30_000)], &base_nodes()),
    );
    clean.write("log.100000002", &log_bytes(&txns()));
    import_zookeeper(&clean.opts()).unwrap();
    let (want, _, _, _) = clean.load();

    // The same state after txn 6, written as ZooKeeper's snapshot writer
    // would have caught it, under the name of txn 1.
    let fuzzy = dirs();
    let mut nodes = base_nodes();
    nodes[2] = SNode("/app", Some(b"a"), 0x1_0000_0001, 3, 0x1_0000_0006, 0);
    nodes.push(SNode(
        "/app/m",
        Some(b"m"),
        0x1_0000_0006,
        0,
        0x1_0000_0006,
        0,
    ));
    nodes.push(SNode(
        "/app/x",
        Some(b"x3"),
        0x1_0000_0002,
        0,
        0x1_0000_0002,
        0,
    ));
    let mut snap = snapshot_bytes(&[(S1, 30_000)], &nodes);
    // Times and versions as the txns left them.
    patch_node(&mut snap, "/app/x", 0x1_0000_0006, 2000, 6000, 2);
    patch_node(&mut snap, "/app/m", 0x1_0000_0006, 6000, 6000, 0);
    fuzzy.write("snapshot.100000001", &snap);
    fuzzy.write("log.100000002", &log_bytes(&txns()));
    import_zookeeper(&fuzzy.opts()).unwrap();
    let (got, _, _, _) = fuzzy.load();
    assert_eq!(got.dump(), want.dump());
}

/// Rewrites mzxid, ctime, mtime and version of `path` in a hand-built
/// snapshot (and reseals it).
fn patch_node(snap: &mut Vec<u8>, path: &str, mzxid: i64, ctime: i64, mtime: i64, version: i32) {
    let mut needle = (path.len() as i32).to_be_bytes().to_vec();
    needle.extend(path.as_bytes());
    let at = snap
        .windows(needle.len())
        .position(|w| w == needle)
        .unwrap();
    let mut i = at + needle.len();
    let data_len = i32::from_be_bytes(snap[i..i + 4].try_into().unwrap()).max(0) as usize;
    i += 4 + data_len + 8 + 8; // data, ACL ref, czxid
    for v in [mzxid, ctime, mtime] {
        snap[i..i + 8].copy_from_slice(&v.to_be_bytes());
        i += 8;
    }
    snap[i..i + 4].copy_from_slice(&version.to_be_bytes());
    // The seal: an i64 checksum and the string "/".
    snap.truncate(snap.len() - 8 - 4 - 1);
    seal(snap);
}

#[test]
fn sessions_and_ephemerals_as_zookeeper_restarts_them() {
    let d = dirs();
    let mut nodes = base_nodes();
    // /app/e1 of S1 (a live session), /app/e2 of S2 (not in the table).
    nodes[2] = SNode("/app", Some(b"a"), 0x1_0000_0001, 2, 0x1_0000_0001, 0);
    nodes.push(SNode(
        "/app/e1",
        Some(b""),
        0x1_0000_0001,
        0,
        0x1_0000_0001,
        S1,
    ));
    nodes.push(SNode(
        "/app/e2",
        Some(b""),
        0x1_0000_0001,
        0,
        0x1_0000_0001,
        S2,
    ));
    d.write(
        "snapshot.100000001",
        &snapshot_bytes(&[(S1, 30_000)], &nodes),
    );
    let z = |c: i64| 0x1_0000_0000 + c;
    let log = [
        T(S3, z(2), 2000, -10, 12_000i32.to_be_bytes().to_vec()),
        T(S3, z(3), 3000, 1, create_body("/app/e3", b"3", true, 3)),
        T(S1, z(4), 4000, -11, close_body(&["/app/e1"])),
    ];
    d.write("log.100000002", &log_bytes(&log));
    let report = import_zookeeper(&d.opts()).unwrap();
    assert_eq!(report.dropped_ephemerals, vec!["/app/e2".to_owned()]);
    let (tree, sessions, _, _) = d.load();
    assert_eq!(
        sessions,
        vec![SessionRecord {
            id: S3,
            timeout_ms: 12_000,
            password: zookeeper_password(S3),
        }]
    );
    assert!(tree.get("/app/e1").is_none(), "closed with its session");
    assert!(tree.get("/app/e2").is_none(), "its session is gone");
    let e3 = tree.get("/app/e3").unwrap().stat();
    assert_eq!(e3.ephemeral_owner.0, S3);
    assert_eq!(tree.ephemeral_count(), 1);
    // The dead session's ephemeral goes at the last zxid, like ZooKeeper's
    // loadData.
    assert_eq!(tree.get("/app").unwrap().stat().pzxid.as_u64(), z(4) as u64);
}

/// ZooKeeper's session password, from java.util.Random (values printed by
/// `new java.util.Random(id ^ 0xB3415C00L).nextBytes(p)` on OpenJDK 17).
#[test]
fn session_passwords_are_zookeepers() {
    let hex = |p: [u8; 16]| p.iter().map(|b| format!("{b:02x}")).collect::<String>();
    assert_eq!(
        hex(zookeeper_password(0x100000abc0000)),
        "86320ae59b18d942d4876f43dc95978f"
    );
    assert_eq!(
        hex(zookeeper_password(1)),
        "054cc74a37327db215e702e20c73f005"
    );
    assert_eq!(
        hex(zookeeper_password(-1)),
        "20f62cb5648dc2d771471c8a2486a9ee"
    );
}

#[test]
fn the_newest_snapshot_that_reads_is_used() {
    let d = dirs();
    d.write("snapshot.100000001", &snapshot_bytes(&[], &base_nodes()));
    let newer = snapshot_bytes(&[], &base_nodes());
    let bad = d.write("snapshot.100000004", &newer[..newer.len() - 3]);
    d.write("log.100000002", &log_bytes(&txns()));
    let report = import_zookeeper(&d.opts()).unwrap();
    assert_eq!(report.snapshot_zxid, 0x1_0000_0001);
    assert_eq!(report.skipped_snapshots.len(), 1);
    assert_eq!(report.skipped_snapshots[0].file, bad);
    assert_eq!(report.txns_replayed, 6);
}

/// A newer snapshot that does not read, past the end of the log: its txns
/// would be lost, so the import is refused (ZooKeeper would start without them).
#[test]
fn an_unreadable_snapshot_past_the_log_is_refused() {
    let d = dirs();
    d.write("snapshot.100000001", &snapshot_bytes(&[], &base_nodes()));
    let newer = snapshot_bytes(&[], &base_nodes());
    let bad = d.write("snapshot.100000009", &newer[..newer.len() - 3]);
    d.write("log.100000002", &log_bytes(&txns()));
    let e = import_zookeeper(&d.opts()).unwrap_err();
    let text = e.to_string();
    assert!(matches!(e, ImportError::Source { .. }), "{text}");
    assert!(text.contains(&bad.display().to_string()), "{text}");
    assert!(text.contains("offset"), "{text}");
    assert_nothing_written(&d);
}

/// A compressed snapshot newer than the log's end is not read: refused; one
/// the log replays past is reported and skipped.
#[test]
fn a_compressed_snapshot_counts_as_unreadable() {
    let d = dirs();
    d.write("snapshot.100000001", &snapshot_bytes(&[], &base_nodes()));
    d.write("log.100000002", &log_bytes(&txns()));
    let gz = d.write("snapshot.100000009.gz", b"\x1f\x8b");
    let e = import_zookeeper(&d.opts()).unwrap_err();
    assert!(e.to_string().contains(&gz.display().to_string()), "{e}");
    assert_nothing_written(&d);
    std::fs::remove_file(&gz).unwrap();
    let older = d.write("snapshot.100000003.gz", b"\x1f\x8b");
    let report = import_zookeeper(&d.opts()).unwrap();
    assert_eq!(report.skipped_snapshots.len(), 1);
    assert_eq!(report.skipped_snapshots[0].file, older);
}

/// A log whose last record runs past the end of the file is a truncated
/// copy (ZooKeeper pads before it writes), not a torn write: refused.
#[test]
fn a_log_cut_by_the_end_of_its_file_is_refused() {
    let d = dirs();
    d.write("snapshot.100000001", &snapshot_bytes(&[], &base_nodes()));
    let all = txns();
    let mut log = log_bytes(&all[..3]);
    log.truncate(log.len() - 64);
    let cut = record(&all[3]);
    let cut_at = log.len();
    log.extend(&cut[..cut.len() - 5]);
    let p = d.write("log.100000002", &log);
    let e = import_zookeeper(&d.opts()).unwrap_err();
    match &e {
        ImportError::File(f) => {
            assert_eq!(f.file, p);
            assert!(f.offset >= cut_at as u64, "{e}");
            assert!(f.reason.contains("truncated"), "{e}");
        }
        other => panic!("{other}"),
    }
    assert_nothing_written(&d);
}

/// Nothing at the target, and no temporary directory left beside it.
fn assert_nothing_written(d: &Dirs) {
    assert!(!d.to.exists(), "the target was written");
    let parent = d.to.parent().unwrap();
    for e in std::fs::read_dir(parent).unwrap().flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        assert!(!name.contains(".import-"), "left behind: {name}");
    }
}

#[test]
fn a_truncated_snapshot_names_the_file_and_offset_and_writes_nothing() {
    let d = dirs();
    let snap = snapshot_bytes(&[], &base_nodes());
    let p = d.write("snapshot.100000001", &snap[..snap.len() / 2]);
    let e = import_zookeeper(&d.opts()).unwrap_err();
    match &e {
        ImportError::File(f) => assert_eq!(f.file, p),
        other => panic!("{other}"),
    }
    let text = e.to_string();
    assert!(
        text.contains("snapshot.100000001") && text.contains("offset"),
        "{text}"
    );
    assert_nothing_written(&d);
}

#[test]
fn a_corrupt_log_record_names_the_file_and_offset_and_writes_nothing() {
    let d = dirs();
    d.write("snapshot.100000001", &snapshot_bytes(&[], &base_nodes()));
    let mut log = log_bytes(&txns());
    let second = 16 + record(&txns()[0]).len();
    log[second + 12 + 10] ^= 0x20; // inside the second record's txn
    let p = d.write("log.100000002", &log);
    let e = import_zookeeper(&d.opts()).unwrap_err();
    match &e {
        ImportError::File(f) => {
            assert_eq!((&f.file, f.offset), (&p, second as u64), "{e}");
            assert!(f.reason.contains("checksum"), "{e}");
        }
        other => panic!("{other}"),
    }
    assert_nothing_written(&d);
}

/// A record cut short at the end of the newest log is what a crash while
/// writing leaves: ZooKeeper stops reading there, and so does the import. In
/// an older log it is damage.
#[test]
fn a_partial_record_ends_only_the_newest_log() {
    let d = dirs();
    d.write("snapshot.100000001", &snapshot_bytes(&[], &base_nodes()));
    let all = txns();
    let (first, rest) = all.split_at(3);
    let mut log = log_bytes(first);
    log.truncate(log.len() - 64);
    let cut = record(&rest[0]);
    let tail_at = log.len();
    log.extend(&cut[..cut.len() - 5]);
    log.extend([0u8; 64]);
    let p = d.write("log.100000002", &log);
    let report = import_zookeeper(&d.opts()).unwrap();
    assert_eq!(report.txns_replayed, 3);
    let tail = report.partial_tail.unwrap();
    assert_eq!(tail.file, p);
    assert!(tail.offset >= tail_at as u64, "{tail}");

    // The same file followed by a newer log: now the cut is a hole.
    let d2 = dirs();
    d2.write("snapshot.100000001", &snapshot_bytes(&[], &base_nodes()));
    let p2 = d2.write("log.100000002", &log);
    d2.write("log.100000005", &log_bytes(&all[3..]));
    let e = import_zookeeper(&d2.opts()).unwrap_err();
    assert!(matches!(&e, ImportError::File(f) if f.file == p2), "{e}");
    assert_nothing_written(&d2);
}

#[test]
fn a_missing_log_file_is_a_gap() {
    let d = dirs();
    d.write("snapshot.100000001", &snapshot_bytes(&[], &base_nodes()));
    let all = txns();
    d.write("log.100000002", &log_bytes(&all[..2]));
    let later = d.write("log.100000005", &log_bytes(&all[3..]));
    let e = import_zookeeper(&d.opts()).unwrap_err();
    match &e {
        ImportError::Txn { file, zxid, .. } => {
            assert_eq!((file, *zxid), (&later, 0x1_0000_0005));
        }
        other => panic!("{other}"),
    }
    assert!(e.to_string().contains("offset 16"), "{e}");
    assert_nothing_written(&d);
}

#[test]
fn a_target_with_data_is_refused() {
    let d = dirs();
    d.write("snapshot.100000001", &snapshot_bytes(&[], &base_nodes()));
    std::fs::create_dir_all(&d.to).unwrap();
    std::fs::write(d.to.join("myid"), "1").unwrap();
    let e = import_zookeeper(&d.opts()).unwrap_err();
    assert!(matches!(e, ImportError::Target { .. }), "{e}");
    assert_eq!(std::fs::read_to_string(d.to.join("myid")).unwrap(), "1");
    // An empty directory is fine (an operator may have created it).
    std::fs::remove_file(d.to.join("myid")).unwrap();
    import_zookeeper(&d.opts()).unwrap();
    d.load();
}

#[test]
fn a_separate_log_directory_is_written_too() {
    let d = dirs();
    d.write("snapshot.100000001", &snapshot_bytes(&[], &base_nodes()));
    let logs = d.zk.join("logs");
    std::fs::create_dir_all(logs.join("version-2")).unwrap();
    std::fs::write(logs.join("version-2/log.100000002"), log_bytes(&txns())).unwrap();
    let to_log = d.to.with_file_name("rzk-log");
    let opts = ImportOptions {
        from_log: Some(logs),
        to_log: Some(to_log.clone()),
        ..d.opts()
    };
    let report = import_zookeeper(&opts).unwrap();
    assert_eq!(report.txns_replayed, 6);
    let wal_opts = WalOptions {
        log_dir: Some(to_log),
        ..WalOptions::default()
    };
    let (wal, _) = Wal::open(&d.to, wal_opts).unwrap();
    assert_eq!(wal.last_durable_zxid(), Zxid::from_u64(0x1_0000_0007));
    assert!(wal.rebuild().unwrap().snapshot.is_some());
}

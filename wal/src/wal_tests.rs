//! Tests of the whole durable state: snapshots, retention, sync markers, and
//! the crash points of a snapshot install.

use super::*;
use crate::durability::fault::FailingSyncer;
use crate::log::LogOptions;
use rzk_zxid::Counter;
use std::fs::OpenOptions;
use std::os::unix::fs::FileExt;

fn z(epoch: u32, counter: u32) -> Zxid {
    Zxid::new(Epoch(epoch), Counter(counter))
}

fn options() -> WalOptions {
    WalOptions {
        log: LogOptions {
            segment_bytes: 256,
            ..LogOptions::default()
        },
        ..WalOptions::default()
    }
}

fn open(dir: &Path) -> (Wal, Recovery) {
    Wal::open(dir, options()).expect("open")
}

fn append_epoch1(wal: &Wal, range: std::ops::RangeInclusive<u32>) {
    let pending: Vec<_> = range
        .map(|c| wal.append(z(1, c), txn(z(1, c))).unwrap())
        .collect();
    for p in pending {
        p.wait().unwrap();
    }
}

fn txn(zxid: Zxid) -> Bytes {
    Bytes::from(format!("txn {zxid}"))
}

fn state(zxid: Zxid) -> Vec<u8> {
    format!("state at {zxid}").into_bytes()
}

fn save(wal: &Wal, zxid: Zxid) -> SnapshotInfo {
    wal.save_snapshot(zxid, &mut &state(zxid)[..]).unwrap()
}

/// What rebuild yields: the snapshot's zxid and the zxids after it.
fn rebuilt(wal: &Wal) -> (Option<Zxid>, Vec<Zxid>) {
    let r = wal.rebuild().unwrap();
    if let Some(s) = &r.snapshot {
        assert_eq!(&s.data[..], &state(s.zxid)[..], "snapshot content");
    }
    let zxids = r
        .records
        .map(|rec| {
            let rec = rec.unwrap();
            assert_eq!(rec.payload, txn(rec.zxid));
            rec.zxid
        })
        .collect();
    (r.snapshot.map(|s| s.zxid), zxids)
}

fn epoch1(range: std::ops::RangeInclusive<u32>) -> Vec<Zxid> {
    range.map(|c| z(1, c)).collect()
}

#[test]
fn rebuild_without_snapshot_replays_the_whole_log() {
    let dir = tempfile::tempdir().unwrap();
    let (wal, rec) = open(dir.path());
    assert!(rec.sync_in_progress.is_none() && rec.snapshots.is_empty());
    assert_eq!(rebuilt(&wal), (None, vec![]));
    append_epoch1(&wal, 1..=10);
    drop(wal);
    let (wal, _) = open(dir.path());
    assert_eq!(rebuilt(&wal), (None, epoch1(1..=10)));
}

#[test]
fn newest_valid_snapshot_is_loaded_and_a_corrupt_one_skipped() {
    let dir = tempfile::tempdir().unwrap();
    let (wal, _) = open(dir.path());
    append_epoch1(&wal, 1..=10);
    save(&wal, z(1, 5));
    let newest = save(&wal, z(1, 8));
    assert_eq!(rebuilt(&wal), (Some(z(1, 8)), epoch1(9..=10)));
    // Rot one byte of the newest snapshot's data.
    let f = OpenOptions::new().write(true).open(&newest.path).unwrap();
    f.write_all_at(b"X", 30).unwrap();
    drop(f);
    drop(wal);
    let (wal, rec) = open(dir.path());
    assert_eq!(rec.snapshots.len(), 2);
    let r = wal.rebuild().unwrap();
    assert_eq!(r.skipped.len(), 1);
    assert_eq!(r.skipped[0].0, z(1, 8));
    assert!(matches!(r.skipped[0].1, WalError::CorruptFile { .. }));
    assert_eq!(rebuilt(&wal), (Some(z(1, 5)), epoch1(6..=10)));
}

/// What a test preload read: the snapshot's zxid, its bytes, how it ended.
type PreloadRead = (Zxid, Vec<u8>, std::io::Result<()>);

/// Opens with a preload that reads `read_bytes_max` bytes of the newest
/// snapshot's state (all with `usize::MAX`); returns what it read.
fn open_preloading(
    dir: &Path,
    read_bytes_max: usize,
) -> (Wal, std::sync::mpsc::Receiver<PreloadRead>) {
    let (tx, rx) = std::sync::mpsc::channel();
    let preload = SnapshotPreload::new(move |reader: StateReader| {
        let zxid = reader.zxid();
        let mut data = Vec::new();
        let read = reader
            .take(read_bytes_max as u64)
            .read_to_end(&mut data)
            .map(|_| ());
        tx.send((zxid, data, read)).unwrap();
    });
    let (wal, _) = Wal::open(
        dir,
        WalOptions {
            preload: Some(preload),
            ..options()
        },
    )
    .expect("open");
    (wal, rx)
}

fn verify_passes() -> usize {
    crate::snapshot::VERIFY_PASSES.with(|n| n.get())
}

#[test]
fn a_preloaded_snapshot_is_verified_once_by_its_preload() {
    let dir = tempfile::tempdir().unwrap();
    let (wal, _) = open(dir.path());
    append_epoch1(&wal, 1..=10);
    save(&wal, z(1, 5));
    save(&wal, z(1, 8));
    drop(wal);
    let (wal, preloaded) = open_preloading(dir.path(), usize::MAX);
    let before = verify_passes();
    let r = wal.rebuild_from_file().unwrap();
    assert_eq!(verify_passes(), before, "the rebuild read the file again");
    assert_eq!(r.snapshot.as_ref().map(SnapshotFile::zxid), Some(z(1, 8)));
    assert!(r.skipped.is_empty());
    // The tail, read ahead of the join, comes out as a reader would give it.
    let mut records = r.records;
    assert_eq!(records.position(), z(1, 8));
    assert_eq!(records.next().unwrap().unwrap().zxid, z(1, 9));
    assert_eq!(records.position(), z(1, 9));
    let rest: Vec<crate::Record> = records.map(|rec| rec.unwrap()).collect();
    assert_eq!(
        rest,
        vec![crate::Record {
            zxid: z(1, 10),
            payload: txn(z(1, 10))
        }]
    );
    let (zxid, data, read) = preloaded.recv().unwrap();
    assert_eq!((zxid, data), (z(1, 8), state(z(1, 8))));
    read.unwrap();
    // Only the first rebuild uses the preload.
    let before = verify_passes();
    wal.rebuild_from_file().unwrap();
    assert_eq!(verify_passes(), before + 1);
}

/// Txns z(1, 1..=10), snapshots at z(1, 5) and z(1, 8), then one byte of the
/// newest snapshot's state rotten (the wal closed).
fn history_with_a_rotten_newest_snapshot(dir: &Path) {
    let (wal, _) = open(dir);
    append_epoch1(&wal, 1..=10);
    save(&wal, z(1, 5));
    let newest = save(&wal, z(1, 8));
    drop(wal);
    let f = OpenOptions::new().write(true).open(&newest.path).unwrap();
    f.write_all_at(b"X", 30).unwrap();
}

#[test]
fn a_corrupt_newest_snapshot_is_skipped_though_a_preload_read_it() {
    let dir = tempfile::tempdir().unwrap();
    history_with_a_rotten_newest_snapshot(dir.path());
    let (wal, preloaded) = open_preloading(dir.path(), usize::MAX);
    let r = wal.rebuild_from_file().unwrap();
    assert_eq!(r.snapshot.as_ref().map(SnapshotFile::zxid), Some(z(1, 5)));
    assert_eq!(r.skipped.len(), 1, "{:?}", r.skipped);
    assert_eq!(r.skipped[0].0, z(1, 8));
    assert!(
        matches!(r.skipped[0].1, WalError::CorruptFile { .. }),
        "{}",
        r.skipped[0].1
    );
    let records: Vec<Zxid> = r.records.map(|rec| rec.unwrap().zxid).collect();
    assert_eq!(records, epoch1(6..=10));
    // The preload's reader refused the last bytes.
    let (zxid, _, read) = preloaded.recv().unwrap();
    assert_eq!(zxid, z(1, 8));
    let err = read.unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::InvalidData, "{err}");
}

#[test]
fn a_preload_that_stops_early_leaves_the_verification_to_the_wal() {
    let dir = tempfile::tempdir().unwrap();
    history_with_a_rotten_newest_snapshot(dir.path());
    // Reads 3 bytes (before the rotten one): no verdict, so the wal reads the
    // whole file itself and finds the damage.
    let (wal, preloaded) = open_preloading(dir.path(), 3);
    let r = wal.rebuild_from_file().unwrap();
    assert_eq!(r.snapshot.as_ref().map(SnapshotFile::zxid), Some(z(1, 5)));
    assert_eq!(r.skipped.len(), 1);
    let (_, data, read) = preloaded.recv().unwrap();
    read.unwrap();
    assert_eq!(data.len(), 3);
}

#[test]
fn without_a_snapshot_the_preload_is_dropped_unused() {
    let dir = tempfile::tempdir().unwrap();
    let (wal, _) = open(dir.path());
    append_epoch1(&wal, 1..=3);
    drop(wal);
    let (wal, preloaded) = open_preloading(dir.path(), usize::MAX);
    assert!(preloaded.recv().is_err(), "the function was dropped");
    let r = wal.rebuild_from_file().unwrap();
    assert!(r.snapshot.is_none());
}

#[test]
fn a_snapshot_never_claims_history_the_log_does_not_hold() {
    let dir = tempfile::tempdir().unwrap();
    let (wal, _) = open(dir.path());
    append_epoch1(&wal, 1..=3);
    let err = wal.save_snapshot(z(1, 4), &mut &b"ahead"[..]).unwrap_err();
    assert!(matches!(err, WalError::SnapshotBeyondLog { .. }), "{err}");
    assert!(wal.snapshots().unwrap().is_empty());
}

#[test]
fn retention_keeps_three_snapshots_and_the_log_they_need() {
    let dir = tempfile::tempdir().unwrap();
    let (wal, _) = open(dir.path());
    append_epoch1(&wal, 1..=60);
    for c in [5, 10, 20, 40, 55] {
        save(&wal, z(1, c));
    }
    let report = wal.purge().unwrap();
    let kept: Vec<Zxid> = wal.snapshots().unwrap().iter().map(|s| s.zxid).collect();
    assert_eq!(kept, vec![z(1, 20), z(1, 40), z(1, 55)]);
    assert!(!snapshot_path(&wal.snap_dir, z(1, 5)).exists());
    assert!(report.removed.len() > 2, "{report:?}");
    let start = wal.log_start();
    assert!(start > Zxid::ZERO && start <= z(1, 20), "{start}");
    // The oldest kept snapshot still rebuilds: the log reaches back to it.
    let records: Vec<Zxid> = wal
        .read_from(z(1, 20))
        .unwrap()
        .map(|r| r.unwrap().zxid)
        .collect();
    assert_eq!(records, epoch1(21..=60));
    drop(wal);
    let (wal, _) = open(dir.path());
    assert_eq!(rebuilt(&wal), (Some(z(1, 55)), epoch1(56..=60)));
}

#[test]
fn truncate_and_install_run_only_under_their_sync_marker() {
    let dir = tempfile::tempdir().unwrap();
    let (wal, _) = open(dir.path());
    append_epoch1(&wal, 1..=5);
    let err = wal.truncate_after(z(1, 2)).unwrap_err();
    assert!(matches!(err, WalError::SyncMarkerMissing { .. }), "{err}");
    let err = wal.install_snapshot(z(2, 0), &mut &b""[..]).unwrap_err();
    assert!(matches!(err, WalError::SyncMarkerMissing { .. }), "{err}");
    wal.begin_sync(SyncMarker {
        mode: SyncMode::Snap,
        target: z(2, 7),
    })
    .unwrap();
    let err = wal.install_snapshot(z(2, 0), &mut &b""[..]).unwrap_err();
    assert!(err.to_string().contains("0x200000000"), "{err}");
    assert_eq!(wal.last_durable_zxid(), z(1, 5), "nothing changed");
}

#[test]
fn an_interrupted_sync_is_reported_on_open_until_it_is_ended() {
    let dir = tempfile::tempdir().unwrap();
    let marker = SyncMarker {
        mode: SyncMode::Trunc,
        target: z(1, 2),
    };
    {
        let (wal, _) = open(dir.path());
        append_epoch1(&wal, 1..=5);
        wal.set_accepted_epoch(Epoch(2)).unwrap();
        wal.begin_sync(marker).unwrap();
        wal.truncate_after(z(1, 2)).unwrap();
        // The process dies before the sync completes.
    }
    let (wal, rec) = open(dir.path());
    assert_eq!(rec.sync_in_progress, Some(marker));
    assert_eq!(wal.last_durable_zxid(), z(1, 2));
    append_epoch1(&wal, 3..=3);
    wal.end_sync(Some(Epoch(2))).unwrap();
    drop(wal);
    let (_, rec) = open(dir.path());
    assert_eq!(rec.sync_in_progress, None);
    assert_eq!(
        (rec.accepted_epoch, rec.current_epoch),
        (Epoch(2), Epoch(2))
    );
}

#[test]
fn truncation_drops_snapshots_above_the_point() {
    let dir = tempfile::tempdir().unwrap();
    let (wal, _) = open(dir.path());
    append_epoch1(&wal, 1..=10);
    save(&wal, z(1, 3));
    let above = save(&wal, z(1, 9));
    wal.begin_sync(SyncMarker {
        mode: SyncMode::Trunc,
        target: z(1, 6),
    })
    .unwrap();
    assert_eq!(wal.truncate_after(z(1, 6)).unwrap(), z(1, 6));
    let kept: Vec<Zxid> = wal.snapshots().unwrap().iter().map(|s| s.zxid).collect();
    assert_eq!(kept, vec![z(1, 3)]);
    assert!(!above.path.exists());
    assert_eq!(rebuilt(&wal), (Some(z(1, 3)), epoch1(4..=6)));
}

fn install_marker(wal: &Wal, at: Zxid) {
    wal.begin_sync(SyncMarker {
        mode: SyncMode::Snap,
        target: at,
    })
    .unwrap();
}

#[test]
fn installed_snapshot_restarts_the_log_after_it() {
    let dir = tempfile::tempdir().unwrap();
    let (wal, _) = open(dir.path());
    append_epoch1(&wal, 1..=10);
    save(&wal, z(1, 4));
    let at = z(3, 6);
    install_marker(&wal, at);
    wal.install_snapshot(at, &mut &state(at)[..]).unwrap();
    assert_eq!(wal.last_durable_zxid(), at);
    assert_eq!(wal.log_start(), at);
    assert_eq!(rebuilt(&wal), (Some(at), vec![]));
    wal.append(z(3, 7), txn(z(3, 7))).unwrap().wait().unwrap();
    wal.end_sync(None).unwrap();
    drop(wal);
    let (wal, rec) = open(dir.path());
    assert!(rec.sync_in_progress.is_none());
    assert_eq!(rebuilt(&wal), (Some(at), vec![z(3, 7)]));
}

/// Every sync of an install fails in turn; after reopening, the state is the
/// old one (old snapshot + old log) or the new one (installed snapshot + empty
/// log at it), and the SNAP marker is still reported either way.
#[test]
fn snapshot_install_is_atomic_at_every_crash_point() {
    let at = z(2, 3);
    let (mut saw_old, mut saw_new) = (false, false);
    for k in 0..100 {
        let dir = tempfile::tempdir().unwrap();
        let syncer = Arc::new(FailingSyncer::new());
        let result = {
            let (wal, _) = Wal::open_with(dir.path(), options(), syncer.clone()).unwrap();
            append_epoch1(&wal, 1..=30);
            save(&wal, z(1, 10));
            install_marker(&wal, at);
            syncer.fail_after(k);
            wal.install_snapshot(at, &mut &state(at)[..])
        };
        let (wal, rec) = open(dir.path());
        assert_eq!(
            rec.sync_in_progress.map(|m| m.target),
            Some(at),
            "the interrupted sync is reported"
        );
        let got = rebuilt(&wal);
        if result.is_ok() {
            assert_eq!(got, (Some(at), vec![]));
            assert!(saw_old && saw_new, "both outcomes were reached");
            return;
        }
        if got == (Some(z(1, 10)), epoch1(11..=30)) {
            saw_old = true;
            assert_eq!(wal.last_durable_zxid(), z(1, 30));
        } else {
            assert_eq!(got, (Some(at), vec![]), "failing sync {k}: {result:?}");
            assert_eq!(wal.last_durable_zxid(), at);
            saw_new = true;
        }
        for s in wal.snapshots().unwrap() {
            assert!(s.path.exists(), "catalogued snapshot {} has a file", s.zxid);
        }
    }
    panic!("the install never succeeded");
}

#[test]
fn uncommitted_snapshot_files_are_removed_on_open() {
    let dir = tempfile::tempdir().unwrap();
    {
        let (wal, _) = open(dir.path());
        append_epoch1(&wal, 1..=3);
        save(&wal, z(1, 2));
    }
    let snap = dir.path().join("snap");
    std::fs::write(snap.join("snapshot.100000003"), b"never committed").unwrap();
    std::fs::write(snap.join("snapshot.100000003.tmp"), b"half written").unwrap();
    let (wal, rec) = open(dir.path());
    assert_eq!(rec.removed_files.len(), 2, "{rec:?}");
    assert_eq!(rebuilt(&wal), (Some(z(1, 2)), vec![z(1, 3)]));
}

#[test]
fn no_usable_snapshot_is_an_error_once_the_log_was_purged() {
    let dir = tempfile::tempdir().unwrap();
    let (wal, _) = open(dir.path());
    append_epoch1(&wal, 1..=40);
    let s = save(&wal, z(1, 30));
    wal.purge().unwrap();
    assert!(wal.log_start() > Zxid::ZERO);
    std::fs::write(&s.path, b"garbage").unwrap();
    let err = wal.rebuild().unwrap_err();
    assert!(matches!(err, WalError::NoUsableSnapshot { .. }), "{err}");
}

/// A state stream that stops in the middle until told to go on.
struct HeldStream {
    rx: std::sync::mpsc::Receiver<()>,
    started: std::sync::mpsc::Sender<()>,
    sent: usize,
}

impl Read for HeldStream {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.sent == 0 {
            let _ = self.started.send(());
            self.rx.recv().unwrap();
        }
        if self.sent >= 3 {
            return Ok(0);
        }
        self.sent += 1;
        buf[0] = b'x';
        Ok(1)
    }
}

#[test]
fn writing_a_snapshot_does_not_block_appends() {
    let dir = tempfile::tempdir().unwrap();
    let (wal, _) = open(dir.path());
    append_epoch1(&wal, 1..=3);
    let (go, rx) = std::sync::mpsc::channel();
    let (started, is_started) = std::sync::mpsc::channel();
    std::thread::scope(|s| {
        let saving = s.spawn(|| {
            let mut stream = HeldStream {
                rx,
                started,
                sent: 0,
            };
            wal.save_snapshot(z(1, 3), &mut stream)
        });
        is_started
            .recv_timeout(std::time::Duration::from_secs(10))
            .expect("the snapshot writer started");
        // The snapshot is half written and stuck; appends go on and are durable.
        append_epoch1(&wal, 4..=20);
        assert_eq!(wal.last_durable_zxid(), z(1, 20));
        go.send(()).unwrap();
        let info = saving.join().unwrap().unwrap();
        assert_eq!(info.zxid, z(1, 3));
    });
    assert_eq!(&wal.load_snapshot(z(1, 3)).unwrap().data[..], b"xxx");
}

/// Every sync of a TRUNC fails in turn; after reopening, rebuild gives the old
/// history or the truncated one, never a snapshot beyond the log.
#[test]
fn wal_truncation_is_atomic_at_every_crash_point() {
    let old = (Some(z(1, 5)), epoch1(6..=30));
    let new = (Some(z(1, 5)), epoch1(6..=9));
    let (mut saw_old, mut saw_new) = (false, false);
    for k in 0..100 {
        let dir = tempfile::tempdir().unwrap();
        let syncer = Arc::new(FailingSyncer::new());
        let result = {
            let (wal, _) = Wal::open_with(dir.path(), options(), syncer.clone()).unwrap();
            append_epoch1(&wal, 1..=30);
            save(&wal, z(1, 5));
            save(&wal, z(1, 25));
            wal.begin_sync(SyncMarker {
                mode: SyncMode::Trunc,
                target: z(1, 9),
            })
            .unwrap();
            syncer.fail_after(k);
            wal.truncate_after(z(1, 9))
        };
        let (wal, rec) = open(dir.path());
        assert_eq!(rec.sync_in_progress.map(|m| m.mode), Some(SyncMode::Trunc));
        let got = rebuilt(&wal);
        let ctx = format!("failing sync {k}: {result:?}");
        if result.is_ok() {
            assert_eq!(got, new, "{ctx}");
            assert!(saw_old && saw_new, "both outcomes were reached");
            return;
        }
        if got == old {
            saw_old = true;
        } else {
            assert_eq!(got, new, "{ctx}");
            saw_new = true;
        }
        let above: Vec<_> = wal
            .snapshots()
            .unwrap()
            .into_iter()
            .filter(|s| s.zxid > wal.last_durable_zxid())
            .collect();
        assert!(above.is_empty(), "{ctx}: {above:?}");
    }
    panic!("the truncation never succeeded");
}

/// The server's default data directory is the relative `data`; its parent is the
/// empty path, which must mean the current directory, not an error.
#[test]
fn opens_a_relative_one_component_directory() {
    struct Remove(PathBuf);
    impl Drop for Remove {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
    let name = PathBuf::from(format!(".wal-relative-open-test-{}", std::process::id()));
    let _cleanup = Remove(name.clone());
    let (wal, _) = open(&name);
    wal.append(z(1, 1), Bytes::from_static(b"x"))
        .unwrap()
        .wait()
        .unwrap();
    assert_eq!(wal.last_durable_zxid(), z(1, 1));
}

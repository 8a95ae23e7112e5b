//! Tests of streamed snapshots: the local writer, the learner's incoming file,
//! raw reads for a transfer, and their interruption and crash points.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use rzk_zxid::{Counter, Epoch, Zxid};

use crate::durability::fault::FailingSyncer;
use crate::durability::{OsSyncer, Syncer};
use crate::log::LogOptions;
use crate::{
    IncomingSnapshot, SnapshotFile, SyncMarker, SyncMode, TryWriteError, Wal, WalError, WalOptions,
};

fn z(epoch: u32, counter: u32) -> Zxid {
    Zxid::new(Epoch(epoch), Counter(counter))
}

fn options() -> WalOptions {
    WalOptions {
        log: LogOptions {
            segment_bytes: 4096,
            ..LogOptions::default()
        },
        ..WalOptions::default()
    }
}

fn open(dir: &Path) -> Wal {
    Wal::open(dir, options()).expect("open").0
}

fn open_with(dir: &Path, options: WalOptions, syncer: Arc<dyn Syncer>) -> Wal {
    Wal::open_with(dir, options, syncer).expect("open").0
}

fn append(wal: &Wal, epoch: u32, range: std::ops::RangeInclusive<u32>) {
    let pending: Vec<_> = range
        .map(|c| {
            wal.append(z(epoch, c), Bytes::from(format!("txn {c}")))
                .unwrap()
        })
        .collect();
    for p in pending {
        p.wait().unwrap();
    }
}

/// A state of `len` bytes that differs per zxid.
fn state(zxid: Zxid, len: usize) -> Vec<u8> {
    let seed = zxid.as_u64();
    (0..len)
        .map(|i| (seed.wrapping_mul(31).wrapping_add(i as u64 * 7) % 251) as u8)
        .collect()
}

fn read_state(file: &SnapshotFile) -> Vec<u8> {
    let mut out = Vec::new();
    std::io::Read::read_to_end(&mut file.state_reader(), &mut out).unwrap();
    out
}

/// Files left in the snapshot directory with the temporary suffix.
fn tmp_files(wal: &Wal) -> Vec<String> {
    std::fs::read_dir(wal.snapshot_dir().path())
        .unwrap()
        .filter_map(|e| e.unwrap().file_name().into_string().ok())
        .filter(|n| n.ends_with(".tmp"))
        .collect()
}

/// Waits, with a deadline, until no temporary file is left.
fn wait_no_tmp(wal: &Wal) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !tmp_files(wal).is_empty() {
        assert!(
            Instant::now() < deadline,
            "temporary files left: {:?}",
            tmp_files(wal)
        );
        std::thread::yield_now();
    }
}

/// What rebuild gives: the snapshot's zxid and state, and the zxids after it.
fn rebuilt(wal: &Wal) -> (Option<(Zxid, Vec<u8>)>, Vec<Zxid>) {
    let r = wal.rebuild_from_file().unwrap();
    let snap = r.snapshot.map(|f| (f.zxid(), read_state(&f)));
    let zxids = r.records.map(|rec| rec.unwrap().zxid).collect();
    (snap, zxids)
}

/// Streams `data` into a new snapshot at `zxid` in chunks of `chunk` bytes.
fn stream(wal: &Wal, zxid: Zxid, data: &[u8], chunk: usize) -> crate::SnapshotInfo {
    let mut w = wal.snapshot_writer(zxid).unwrap();
    for piece in data.chunks(chunk) {
        w.write(Bytes::copy_from_slice(piece)).unwrap();
    }
    wal.commit_snapshot(w.finish().wait().unwrap()).unwrap()
}

#[test]
fn a_streamed_snapshot_is_committed_and_rebuilt_from_its_file() {
    let dir = tempfile::tempdir().unwrap();
    let wal = open(dir.path());
    append(&wal, 1, 1..=20);
    let data = state(z(1, 12), 5_000_123);
    let info = stream(&wal, z(1, 12), &data, 70_001);
    assert_eq!(info.zxid, z(1, 12));
    assert_eq!(info.size_bytes, data.len() as u64 + 40);
    assert!(tmp_files(&wal).is_empty());
    assert_eq!(
        rebuilt(&wal),
        (
            Some((z(1, 12), data.clone())),
            (13..=20).map(|c| z(1, c)).collect()
        )
    );
    // The same bytes as a snapshot saved in one piece.
    assert_eq!(&wal.load_snapshot(z(1, 12)).unwrap().data[..], &data[..]);
    drop(wal);
    let wal = open(dir.path());
    assert_eq!(rebuilt(&wal).0, Some((z(1, 12), data)));
}

#[test]
fn dropping_a_writer_or_its_unfinished_result_removes_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let wal = open(dir.path());
    append(&wal, 1, 1..=5);
    let mut w = wal.snapshot_writer(z(1, 5)).unwrap();
    w.write(Bytes::from(vec![1u8; 1 << 20])).unwrap();
    assert_eq!(tmp_files(&wal).len(), 1);
    drop(w);
    wait_no_tmp(&wal);
    let mut w = wal.snapshot_writer(z(1, 5)).unwrap();
    w.write(Bytes::from_static(b"state")).unwrap();
    let written = w.finish().wait().unwrap();
    assert_eq!(tmp_files(&wal).len(), 1);
    drop(written);
    assert!(tmp_files(&wal).is_empty());
    assert!(wal.snapshots().unwrap().is_empty(), "nothing was committed");
}

/// An abort stops the writer where it is: the chunks still queued are not
/// written and the file is never finished (no trailer, no final fsync).
#[test]
fn an_aborted_writer_writes_nothing_more() {
    let dir = tempfile::tempdir().unwrap();
    let syncer = Arc::new(FailingSyncer::new());
    let wal = open_with(dir.path(), options(), syncer.clone());
    append(&wal, 1, 1..=3);
    let mut w = wal.snapshot_writer(z(1, 3)).unwrap();
    syncer.close_gate();
    w.write(Bytes::from(vec![1u8; 4 << 20])).unwrap();
    syncer.wait_until_held();
    w.write(Bytes::from(vec![2u8; 4 << 20])).unwrap();
    let (calls, data_calls) = (syncer.calls(), syncer.data_calls());
    drop(w);
    syncer.open_gate();
    wait_no_tmp(&wal);
    // Only the held fdatasync ran: not the one of the second 4 MiB, nor the
    // fsync of a finished file.
    assert_eq!(syncer.calls(), calls + 1);
    assert_eq!(syncer.data_calls(), data_calls + 1);
}

#[test]
fn try_write_gives_the_chunk_back_when_the_queue_is_full_and_ready_waits_for_room() {
    let dir = tempfile::tempdir().unwrap();
    let syncer = Arc::new(FailingSyncer::new());
    let opts = WalOptions {
        snapshot_queue_bytes_max: 1 << 20,
        ..options()
    };
    let wal = open_with(dir.path(), opts, syncer.clone());
    append(&wal, 1, 1..=3);
    let mut w = wal.snapshot_writer(z(1, 3)).unwrap();
    // 4 MiB reach the writer's first fdatasync, held at the gate: the writer
    // is stuck with the chunk, the queue counts it.
    syncer.close_gate();
    let big = Bytes::from(vec![9u8; 4 << 20]);
    w.try_write(big)
        .expect("an empty queue takes a chunk of any size");
    syncer.wait_until_held();
    let chunk = Bytes::from(vec![8u8; 1000]);
    let back = match w.try_write(chunk.clone()) {
        Err(TryWriteError::Full(back)) => back,
        other => panic!("expected Full, got {other:?}"),
    };
    assert_eq!(back, chunk, "the refused chunk comes back whole");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let mut ready = std::pin::pin!(w.ready());
        assert!(
            futures_poll_once(ready.as_mut()).is_pending(),
            "no room while the writer holds 4 MiB"
        );
        syncer.open_gate();
        tokio::time::timeout(Duration::from_secs(10), ready)
            .await
            .expect("ready once the writer took the chunk");
    });
    w.try_write(back).expect("room after ready");
    let info = wal.commit_snapshot(w.finish().wait().unwrap()).unwrap();
    assert_eq!(info.size_bytes, (4 << 20) + 1000 + 40);
}

/// Polls a future once with a waker that does nothing.
fn futures_poll_once<F: std::future::Future>(
    f: std::pin::Pin<&mut F>,
) -> std::task::Poll<F::Output> {
    let waker = std::task::Waker::noop();
    f.poll(&mut std::task::Context::from_waker(waker))
}

#[test]
fn a_failed_fsync_fails_the_writer_and_leaves_no_file() {
    let dir = tempfile::tempdir().unwrap();
    let syncer = Arc::new(FailingSyncer::new());
    let wal = open_with(dir.path(), options(), syncer.clone());
    append(&wal, 1, 1..=3);
    let before = wal.snapshots().unwrap();
    let mut w = wal.snapshot_writer(z(1, 3)).unwrap();
    syncer.fail_after(0);
    let mut failed = None;
    for _ in 0..8 {
        // The first 4 MiB fail their fdatasync; a later write reports it.
        match w.try_write(Bytes::from(vec![1u8; 1 << 20])) {
            Ok(()) | Err(TryWriteError::Full(_)) => std::thread::yield_now(),
            Err(TryWriteError::Failed(e)) => {
                failed = Some(e);
                break;
            }
        }
    }
    let err = w.finish().wait().unwrap_err();
    assert!(err.to_string().contains("injected"), "{err}");
    if let Some(e) = failed {
        assert!(e.to_string().contains("injected"), "{e}");
    }
    wait_no_tmp(&wal);
    assert_eq!(wal.snapshots().unwrap(), before);
}

#[test]
fn a_writer_paces_its_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let opts = WalOptions {
        snapshot_write_bytes_per_sec_max: Some(10 << 20),
        ..options()
    };
    let wal = open_with(dir.path(), opts, Arc::new(OsSyncer));
    append(&wal, 1, 1..=3);
    let started = Instant::now();
    // 4 MiB at 10 MiB/s with a burst of 1 MiB: at least 0.3 s.
    let info = stream(&wal, z(1, 3), &vec![5u8; 4 << 20], 256 << 10);
    assert!(
        started.elapsed() >= Duration::from_millis(290),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(info.size_bytes, (4 << 20) + 40);
}

#[test]
fn commit_refuses_a_snapshot_the_log_no_longer_holds() {
    let dir = tempfile::tempdir().unwrap();
    let wal = open(dir.path());
    append(&wal, 1, 1..=10);
    let mut w = wal.snapshot_writer(z(1, 8)).unwrap();
    w.write(Bytes::from_static(b"state at 8")).unwrap();
    wal.begin_sync(SyncMarker {
        mode: SyncMode::Trunc,
        target: z(1, 5),
    })
    .unwrap();
    wal.truncate_after(z(1, 5)).unwrap();
    let err = wal.commit_snapshot(w.finish().wait().unwrap()).unwrap_err();
    assert!(matches!(err, WalError::SnapshotBeyondLog { .. }), "{err}");
    assert!(tmp_files(&wal).is_empty());
    assert!(wal.snapshots().unwrap().is_empty());
    assert!(matches!(
        wal.snapshot_writer(z(1, 8)),
        Err(WalError::SnapshotBeyondLog { .. })
    ));
}

/// A crash after the file is complete and before its commit: the next open
/// removes it and rebuilds from the older snapshot.
#[test]
fn a_crash_before_the_commit_leaves_the_older_snapshot() {
    let dir = tempfile::tempdir().unwrap();
    let old = state(z(1, 4), 1000);
    {
        let wal = open(dir.path());
        append(&wal, 1, 1..=10);
        stream(&wal, z(1, 4), &old, 100);
        let mut w = wal.snapshot_writer(z(1, 9)).unwrap();
        w.write(Bytes::from(state(z(1, 9), 1000))).unwrap();
        let written = w.finish().wait().unwrap();
        // The process dies here: nothing removes the file.
        std::mem::forget(written);
    }
    let (wal, rec) = Wal::open(dir.path(), options()).unwrap();
    assert_eq!(rec.removed_files.len(), 1, "{rec:?}");
    assert_eq!(
        rebuilt(&wal),
        (Some((z(1, 4), old)), (5..=10).map(|c| z(1, c)).collect())
    );
}

/// Every sync of a commit fails in turn: after reopening, the catalog holds the
/// new snapshot with its file, or not at all; never an entry without a file.
#[test]
fn a_commit_is_atomic_at_every_crash_point() {
    let (mut saw_old, mut saw_new) = (false, false);
    for k in 0..20 {
        let dir = tempfile::tempdir().unwrap();
        let syncer = Arc::new(FailingSyncer::new());
        let result = {
            let wal = open_with(dir.path(), options(), syncer.clone());
            append(&wal, 1, 1..=10);
            let mut w = wal.snapshot_writer(z(1, 7)).unwrap();
            w.write(Bytes::from(state(z(1, 7), 300))).unwrap();
            let written = w.finish().wait().unwrap();
            syncer.fail_after(k);
            wal.commit_snapshot(written)
        };
        let wal = open(dir.path());
        let got = rebuilt(&wal);
        if result.is_ok() {
            assert_eq!(got.0, Some((z(1, 7), state(z(1, 7), 300))));
            assert!(saw_old, "a failing sync left the old state at least once");
            let _ = saw_new;
            return;
        }
        match got.0 {
            None => saw_old = true,
            Some((zxid, data)) => {
                assert_eq!((zxid, data), (z(1, 7), state(z(1, 7), 300)), "sync {k}");
                saw_new = true;
            }
        }
        assert!(tmp_files(&wal).is_empty());
    }
    panic!("the commit never succeeded");
}

// ---- the learner's side ----

/// A leader with a snapshot at `at` of `len` bytes, in its own directory.
fn leader(dir: &Path, at: Zxid, len: usize) -> (Wal, SnapshotFile) {
    let wal = open(dir);
    append(&wal, at.epoch().0, 1..=at.counter().0);
    stream(&wal, at, &state(at, len), 64 << 10);
    let file = wal.open_snapshot(at).unwrap();
    (wal, file)
}

/// A learner with its own history: a snapshot at 1:4 and records to 1:10.
fn learner(dir: &Path) -> Wal {
    let wal = open(dir);
    append(&wal, 1, 1..=10);
    stream(&wal, z(1, 4), &state(z(1, 4), 500), 100);
    wal
}

fn learner_before() -> (Option<(Zxid, Vec<u8>)>, Vec<Zxid>) {
    (
        Some((z(1, 4), state(z(1, 4), 500))),
        (5..=10).map(|c| z(1, c)).collect(),
    )
}

fn snap_marker(wal: &Wal, at: Zxid) {
    wal.begin_sync(SyncMarker {
        mode: SyncMode::Snap,
        target: at,
    })
    .unwrap();
}

/// Sends the leader's file to `incoming` in chunks of `chunk` bytes, with
/// `damage` applied to each chunk first.
fn transfer(
    file: &SnapshotFile,
    incoming: &mut IncomingSnapshot,
    chunk: usize,
    damage: impl Fn(u64, &mut Vec<u8>),
) {
    loop {
        let offset = incoming.accepted_bytes();
        let bytes = file.read_raw_at(offset, chunk).unwrap();
        if bytes.is_empty() {
            break;
        }
        let mut bytes = bytes.to_vec();
        damage(offset, &mut bytes);
        incoming.write(offset, Bytes::from(bytes)).unwrap();
    }
}

#[test]
fn a_received_snapshot_is_verified_and_installed_by_rename() {
    let (ldir, fdir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let at = z(3, 40);
    let (_leader, file) = leader(ldir.path(), at, 3_000_000);
    let wal = learner(fdir.path());
    snap_marker(&wal, at);
    let mut incoming = wal
        .incoming_snapshot(at, file.size_bytes(), file.crc())
        .unwrap();
    transfer(&file, &mut incoming, 256 << 10, |_, _| {});
    assert!(incoming.is_complete());
    let received = incoming.finish().wait().unwrap();
    assert_eq!((received.zxid(), received.crc()), (at, file.crc()));
    let info = wal.install_received(received).unwrap();
    assert_eq!(
        (info.zxid, info.size_bytes, info.crc),
        (at, file.size_bytes(), file.crc())
    );
    assert_eq!(wal.last_durable_zxid(), at);
    assert_eq!(wal.log_start(), at);
    assert_eq!(rebuilt(&wal), (Some((at, state(at, 3_000_000))), vec![]));
    assert!(tmp_files(&wal).is_empty());
    append(&wal, 3, 41..=42);
    wal.end_sync(None).unwrap();
    drop(wal);
    let (wal, rec) = Wal::open(fdir.path(), options()).unwrap();
    assert!(rec.sync_in_progress.is_none());
    assert_eq!(rebuilt(&wal).1, vec![z(3, 41), z(3, 42)]);
}

#[test]
fn a_corrupt_chunk_fails_the_transfer_and_leaves_the_learner_as_it_was() {
    let (ldir, fdir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let at = z(2, 30);
    let (_leader, file) = leader(ldir.path(), at, 1_000_000);
    let wal = learner(fdir.path());
    snap_marker(&wal, at);
    // One flipped bit in the third chunk, wherever it falls: state, header or
    // trailer.
    for flip_at in [3 * 65_536 + 17, 5, file.size_bytes() - 6] {
        let mut incoming = wal
            .incoming_snapshot(at, file.size_bytes(), file.crc())
            .unwrap();
        transfer(&file, &mut incoming, 65_536, |offset, bytes| {
            if (offset..offset + bytes.len() as u64).contains(&flip_at) {
                bytes[(flip_at - offset) as usize] ^= 0x10;
            }
        });
        let err = incoming.finish().wait().unwrap_err();
        assert!(matches!(err, WalError::CorruptFile { .. }), "{err}");
        assert!(tmp_files(&wal).is_empty());
        assert_eq!(rebuilt(&wal), learner_before(), "flip at {flip_at}");
        assert_eq!(wal.last_durable_zxid(), z(1, 10));
    }
    // A snapshot that is intact but not the one announced is refused too.
    let mut incoming = wal
        .incoming_snapshot(at, file.size_bytes(), file.crc() ^ 1)
        .unwrap();
    transfer(&file, &mut incoming, 1 << 20, |_, _| {});
    assert!(incoming.finish().wait().is_err());
    assert_eq!(rebuilt(&wal), learner_before());
}

#[test]
fn chunks_out_of_order_or_past_the_announced_size_are_refused_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let wal = learner(dir.path());
    let at = z(2, 1);
    let mut incoming = wal.incoming_snapshot(at, 100, 0).unwrap();
    incoming.write(0, Bytes::from(vec![0u8; 60])).unwrap();
    let err = incoming.write(50, Bytes::from(vec![0u8; 10])).unwrap_err();
    assert!(err.to_string().contains("offset 50, expected 60"), "{err}");
    assert!(incoming.finish().wait().is_err());
    let mut incoming = wal.incoming_snapshot(at, 100, 0).unwrap();
    let err = incoming
        .try_write(0, Bytes::from(vec![0u8; 101]))
        .unwrap_err();
    assert!(err.to_string().contains("past the announced size"), "{err}");
    assert!(matches!(
        incoming.try_write(0, Bytes::from(vec![0u8; 10])),
        Err(TryWriteError::Failed(_))
    ));
    drop(incoming);
    wait_no_tmp(&wal);
    // A short transfer fails at finish.
    let mut incoming = wal.incoming_snapshot(at, 100, 0).unwrap();
    incoming.write(0, Bytes::from(vec![0u8; 99])).unwrap();
    let err = incoming.finish().wait().unwrap_err();
    assert!(
        err.to_string()
            .contains("received 99 bytes of a snapshot of 100"),
        "{err}"
    );
    assert_eq!(rebuilt(&wal), learner_before());
}

#[test]
fn an_interrupted_transfer_leaves_the_previous_durable_state() {
    let (ldir, fdir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let at = z(2, 30);
    let (_leader, file) = leader(ldir.path(), at, 2_000_000);
    {
        let wal = learner(fdir.path());
        snap_marker(&wal, at);
        let mut incoming = wal
            .incoming_snapshot(at, file.size_bytes(), file.crc())
            .unwrap();
        let half = file.read_raw_at(0, 1 << 20).unwrap();
        incoming.write(0, half).unwrap();
        // The connection to the leader breaks: the transfer is dropped.
        drop(incoming);
        wait_no_tmp(&wal);
        assert_eq!(rebuilt(&wal), learner_before());
    }
    let (wal, rec) = Wal::open(fdir.path(), options()).unwrap();
    assert_eq!(
        rec.sync_in_progress.map(|m| m.target),
        Some(at),
        "I2: reported"
    );
    assert_eq!(rebuilt(&wal), learner_before());
}

/// Every sync of an install of a received file fails in turn; after reopening,
/// the learner has its old state or the new one, and the marker either way.
#[test]
fn installing_a_received_snapshot_is_atomic_at_every_crash_point() {
    let ldir = tempfile::tempdir().unwrap();
    let at = z(2, 30);
    let (_leader, file) = leader(ldir.path(), at, 20_000);
    let (mut saw_old, mut saw_new) = (false, false);
    for k in 0..100 {
        let dir = tempfile::tempdir().unwrap();
        let syncer = Arc::new(FailingSyncer::new());
        let result = {
            let wal = open_with(dir.path(), options(), syncer.clone());
            append(&wal, 1, 1..=10);
            stream(&wal, z(1, 4), &state(z(1, 4), 500), 100);
            snap_marker(&wal, at);
            let mut incoming = wal
                .incoming_snapshot(at, file.size_bytes(), file.crc())
                .unwrap();
            transfer(&file, &mut incoming, 4096, |_, _| {});
            let received = incoming.finish().wait().unwrap();
            syncer.fail_after(k);
            wal.install_received(received)
        };
        let (wal, rec) = Wal::open(dir.path(), options()).unwrap();
        assert_eq!(rec.sync_in_progress.map(|m| m.target), Some(at));
        let got = rebuilt(&wal);
        let new = (Some((at, state(at, 20_000))), vec![]);
        if result.is_ok() {
            assert_eq!(got, new);
            assert!(saw_old && saw_new, "both outcomes were reached");
            return;
        }
        if got == learner_before() {
            saw_old = true;
        } else {
            assert_eq!(got, new, "failing sync {k}: {result:?}");
            saw_new = true;
        }
        for s in wal.snapshots().unwrap() {
            assert!(s.path.exists(), "catalogued snapshot {} has a file", s.zxid);
        }
        assert!(tmp_files(&wal).is_empty());
    }
    panic!("the install never succeeded");
}

#[test]
fn a_purge_during_a_transfer_does_not_break_it() {
    let (ldir, fdir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let leader_wal = open(ldir.path());
    append(&leader_wal, 1, 1..=50);
    let at = z(1, 10);
    stream(&leader_wal, at, &state(at, 500_000), 64 << 10);
    let file = leader_wal.open_snapshot(at).unwrap();
    let wal = learner(fdir.path());
    snap_marker(&wal, at);
    let mut incoming = wal
        .incoming_snapshot(at, file.size_bytes(), file.crc())
        .unwrap();
    incoming
        .write(0, file.read_raw_at(0, 100_000).unwrap())
        .unwrap();
    // Retention removes the snapshot being sent.
    for c in [20, 30, 40, 50] {
        stream(&leader_wal, z(1, c), &state(z(1, c), 100), 100);
    }
    leader_wal.purge().unwrap();
    assert!(!file.path().exists(), "the file was purged");
    transfer(&file, &mut incoming, 100_000, |_, _| {});
    wal.install_received(incoming.finish().wait().unwrap())
        .unwrap();
    assert_eq!(rebuilt(&wal), (Some((at, state(at, 500_000))), vec![]));
}

#[test]
fn installing_a_zxid_already_catalogued_keeps_the_intact_file() {
    let (ldir, fdir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let at = z(1, 4);
    let (_leader, file) = leader(ldir.path(), at, 500);
    let wal = learner(fdir.path());
    let before = wal.snapshots().unwrap();
    snap_marker(&wal, at);
    let mut incoming = wal
        .incoming_snapshot(at, file.size_bytes(), file.crc())
        .unwrap();
    transfer(&file, &mut incoming, 100, |_, _| {});
    let info = wal
        .install_received(incoming.finish().wait().unwrap())
        .unwrap();
    assert_eq!(vec![info], before, "the catalogued file is kept");
    assert_eq!(wal.log_start(), at);
    assert_eq!(rebuilt(&wal), (Some((at, state(at, 500))), vec![]));
    assert!(tmp_files(&wal).is_empty());
}

#[test]
fn a_received_snapshot_needs_the_snap_marker_for_its_zxid() {
    let (ldir, fdir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let at = z(2, 9);
    let (_leader, file) = leader(ldir.path(), at, 500);
    let wal = learner(fdir.path());
    snap_marker(&wal, z(2, 8));
    let mut incoming = wal
        .incoming_snapshot(at, file.size_bytes(), file.crc())
        .unwrap();
    transfer(&file, &mut incoming, 100, |_, _| {});
    let err = wal
        .install_received(incoming.finish().wait().unwrap())
        .unwrap_err();
    assert!(matches!(err, WalError::SyncMarkerMissing { .. }), "{err}");
    assert!(tmp_files(&wal).is_empty());
    assert_eq!(rebuilt(&wal), learner_before());
}

//! Tests of the log that need its insides: injected fsync failures, crash points
//! between syncs, group commit with a held fsync, torn tails at every offset.

use super::*;
use crate::durability::fault::FailingSyncer;
use crate::reader::Record;
use rzk_zxid::{Counter, Epoch};
use std::fs::OpenOptions;

fn z(epoch: u32, counter: u32) -> Zxid {
    Zxid::new(Epoch(epoch), Counter(counter))
}

/// A payload whose content and length depend on the zxid, so a record read
/// back under the wrong zxid or cut short is noticed.
fn payload(zxid: Zxid) -> Bytes {
    let n = 5 + (zxid.counter().0 as usize * 7) % 40;
    Bytes::from(
        (0..n)
            .map(|i| (zxid.as_u64() as u8).wrapping_add(i as u8))
            .collect::<Vec<u8>>(),
    )
}

fn small_segments() -> LogOptions {
    LogOptions {
        segment_bytes: 256,
        ..LogOptions::default()
    }
}

fn open(dir: &Path, opts: LogOptions) -> (Log, LogRecovery) {
    Log::open(dir, opts).expect("open")
}

fn open_faulty(dir: &Path, opts: LogOptions) -> (Log, Arc<FailingSyncer>) {
    let syncer = Arc::new(FailingSyncer::new());
    let (log, _) = Log::open_with(dir, opts, syncer.clone()).expect("open");
    (log, syncer)
}

fn append_all(log: &Log, zxids: impl IntoIterator<Item = Zxid>) {
    let pending: Vec<Append> = zxids
        .into_iter()
        .map(|z| log.append(z, payload(z)).expect("append accepted"))
        .collect();
    for p in pending {
        p.wait().expect("durable");
    }
}

fn read_all(log: &Log) -> Vec<Record> {
    log.read_from(log.start())
        .expect("reader")
        .collect::<Result<Vec<_>>>()
        .expect("every record reads back")
}

/// The log holds exactly `expected`, each with its payload, and says so.
fn assert_holds(log: &Log, expected: &[Zxid]) {
    let got = read_all(log);
    let zxids: Vec<Zxid> = got.iter().map(|r| r.zxid).collect();
    assert_eq!(zxids, expected);
    for r in &got {
        assert_eq!(r.payload, payload(r.zxid), "payload of {}", r.zxid);
    }
    let end = expected.last().copied().unwrap_or(log.start());
    assert_eq!(log.last_durable_zxid(), end);
}

fn epoch1(range: std::ops::RangeInclusive<u32>) -> Vec<Zxid> {
    range.map(|c| z(1, c)).collect()
}

#[test]
fn appended_records_survive_reopen_across_segments() {
    let dir = tempfile::tempdir().unwrap();
    let expected: Vec<Zxid> = epoch1(1..=20)
        .into_iter()
        .chain([z(2, 1), z(2, 2)])
        .collect();
    {
        let (log, _) = open(dir.path(), small_segments());
        assert_eq!(log.last_durable_zxid(), Zxid::ZERO);
        append_all(&log, expected.clone());
        assert_holds(&log, &expected);
        assert!(log.segments().len() > 3, "small segments roll");
    }
    let (log, rec) = open(dir.path(), small_segments());
    assert!(rec.tail_cut.is_none());
    assert_eq!(rec.records, expected.len() as u64);
    assert_holds(&log, &expected);
    for s in log.segments() {
        let name = s.path.file_name().unwrap().to_str().unwrap().to_owned();
        assert_eq!(name, format!("log.{:x}", s.first), "named by first zxid");
    }
    // Reading from the middle streams exactly the suffix.
    let tail: Vec<Zxid> = log
        .read_from(z(1, 17))
        .unwrap()
        .map(|r| r.unwrap().zxid)
        .collect();
    assert_eq!(tail, &expected[17..]);
}

#[test]
fn a_reader_that_read_ahead_yields_what_it_would_have_read() {
    let dir = tempfile::tempdir().unwrap();
    let (log, _) = open(dir.path(), small_segments());
    append_all(&log, epoch1(1..=20));
    let plain: Vec<Record> = log
        .read_from(z(1, 3))
        .unwrap()
        .map(|r| r.unwrap())
        .collect();
    let one = payload(z(1, 4)).len();
    for (ahead, bytes) in [
        (0, 0),
        (1, 0),
        (5, usize::MAX),
        (17, 3 * one),
        (18, usize::MAX),
        (100, usize::MAX),
    ] {
        let mut reader = log.read_from(z(1, 3)).unwrap().read_ahead(ahead, bytes);
        // As many as the bounds allow: at least one, then while under the bytes.
        let (mut expected, mut read) = (0, 0);
        while expected < ahead.min(plain.len()) && (expected == 0 || read < bytes) {
            read += plain[expected].payload.len();
            expected += 1;
        }
        assert_eq!(
            reader.read_ahead_len(),
            expected,
            "{ahead} / {bytes} B ahead"
        );
        // The position is that of what was yielded, not of what was read.
        assert_eq!(reader.position(), z(1, 3), "{ahead} ahead");
        let first = reader.next().unwrap().unwrap();
        assert_eq!(reader.position(), first.zxid, "{ahead} ahead");
        let mut got = vec![first];
        got.extend(reader.map(|r| r.unwrap()));
        assert_eq!(got, plain, "{ahead} read ahead");
    }
}

#[test]
fn appends_must_increase_and_be_contiguous_inside_an_epoch() {
    let dir = tempfile::tempdir().unwrap();
    let (log, _) = open(dir.path(), LogOptions::default());
    append_all(&log, epoch1(1..=3));
    let err = log.append(z(1, 5), payload(z(1, 5))).unwrap_err();
    assert!(matches!(err, WalError::Gap { last, got } if last == z(1, 3) && got == z(1, 5)));
    let msg = err.to_string();
    assert!(
        msg.contains("0x100000003") && msg.contains("0x100000005"),
        "{msg}"
    );
    assert!(matches!(
        log.append(z(1, 3), payload(z(1, 3))),
        Err(WalError::NotIncreasing { .. })
    ));
    assert!(matches!(
        log.append(z(1, 2), payload(z(1, 2))),
        Err(WalError::NotIncreasing { .. })
    ));
    assert!(
        matches!(
            log.append(z(2, 2), payload(z(2, 2))),
            Err(WalError::Gap { .. })
        ),
        "a new epoch starts at counter 1"
    );
    // A new leader's epoch (rollover, election) may start: counter 1 of any later epoch.
    append_all(&log, [z(4, 1), z(4, 2)]);
    assert_holds(&log, &[z(1, 1), z(1, 2), z(1, 3), z(4, 1), z(4, 2)]);
}

/// ZOOKEEPER-5094 (ARCHITECTURE.md, "The four failures"): a follower
/// interrupted in a TRUNC sync had Z1 on disk and Z2 only in memory, reported
/// Z2, received Z3, and wrote it: its log read Z1 -> Z3 and the node could not
/// restart. Here the same history is offered to the log, which refuses Z3 and
/// keeps reporting Z1.
#[test]
fn interrupted_trunc_sync_history_with_a_gap_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (z1, z2, z3) = (z(1, 1), z(1, 2), z(1, 3));
    {
        let (log, _) = open(dir.path(), LogOptions::default());
        append_all(&log, [z1]); // Z1: durable.
                                // Z2 was applied to memory only: it is never appended here.
        assert_eq!(
            log.last_durable_zxid(),
            z1,
            "the log reports Z1, not Z2 (I1)"
        );
        let err = log
            .append(z3, payload(z3))
            .expect_err("Z3 after Z1 is a gap");
        assert!(
            matches!(err, WalError::Gap { last, got } if last == z1 && got == z3),
            "{err}"
        );
        assert_eq!(log.last_durable_zxid(), z1);
    }
    let (log, _) = open(dir.path(), LogOptions::default());
    assert_holds(&log, &[z1]);
    // The follower that reports Z1 gets Z2 and Z3 from the leader: no gap.
    append_all(&log, [z2, z3]);
    assert_holds(&log, &[z1, z2, z3]);
}

#[test]
fn group_commit_shares_one_fdatasync_and_durable_waits_for_it() {
    let dir = tempfile::tempdir().unwrap();
    let (log, syncer) = open_faulty(dir.path(), LogOptions::default());
    syncer.close_gate();
    let first = log.append(z(1, 1), payload(z(1, 1))).unwrap();
    syncer.wait_until_held();
    // The writer is inside the fsync of the first batch; these queue up behind it.
    let rest: Vec<Append> = (2..=101)
        .map(|c| log.append(z(1, c), payload(z(1, c))).unwrap())
        .collect();
    assert_eq!(
        log.last_durable_zxid(),
        Zxid::ZERO,
        "nothing is durable before its fdatasync returns (I1)"
    );
    syncer.open_gate();
    assert_eq!(first.wait().unwrap(), z(1, 1));
    for (i, a) in rest.into_iter().enumerate() {
        assert_eq!(a.wait().unwrap(), z(1, i as u32 + 2));
    }
    assert_eq!(log.last_durable_zxid(), z(1, 101));
    assert_eq!(
        syncer.data_calls(),
        2,
        "101 appends, two batches, two fdatasyncs"
    );
}

#[test]
fn fsync_failure_stops_the_log_and_loses_nothing_acknowledged() {
    let dir = tempfile::tempdir().unwrap();
    {
        let (log, syncer) = open_faulty(dir.path(), LogOptions::default());
        append_all(&log, epoch1(1..=5));
        syncer.fail_after(0);
        let a = log.append(z(1, 6), payload(z(1, 6))).unwrap();
        let err = a.wait().unwrap_err();
        assert!(matches!(err, WalError::Failed { .. }), "{err}");
        assert!(err.to_string().contains("injected fsync failure"), "{err}");
        assert_eq!(
            log.last_durable_zxid(),
            z(1, 5),
            "never claims the failed batch"
        );
        // Stopped for good: no retry that could hide lost data.
        assert!(matches!(
            log.append(z(1, 7), payload(z(1, 7))),
            Err(WalError::Failed { .. })
        ));
        assert!(matches!(log.flush(), Err(WalError::Failed { .. })));
        assert!(matches!(
            log.truncate_after(z(1, 2)),
            Err(WalError::Failed { .. })
        ));
    }
    // Reopening reads what the disk holds: every acknowledged record, CRCs valid,
    // no gap. (Record 6 was written and may be there: it was never acknowledged.)
    let (log, _) = open(dir.path(), LogOptions::default());
    let got: Vec<Zxid> = read_all(&log).iter().map(|r| r.zxid).collect();
    assert!(got == epoch1(1..=5) || got == epoch1(1..=6), "{got:?}");
}

#[test]
fn fsync_failure_while_creating_a_segment_stops_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let seg_bytes = small_segments().segment_bytes;
    let record_bytes = |z: Zxid| (RECORD_HEADER_BYTES + payload(z).len()) as u64;
    {
        let (log, syncer) = open_faulty(dir.path(), small_segments());
        append_all(&log, epoch1(1..=3));
        // Fill the active segment up to the record that no longer fits.
        let mut c = 4;
        loop {
            let seg = log.segments().pop().unwrap();
            let used: u64 = SEGMENT_HEADER_BYTES
                + (seg.first.counter().0..=seg.last.counter().0)
                    .map(|k| record_bytes(z(1, k)))
                    .sum::<u64>();
            if used + record_bytes(z(1, c)) > seg_bytes {
                break;
            }
            append_all(&log, [z(1, c)]);
            c += 1;
        }
        let acked = z(1, c - 1);
        syncer.fail_after(0);
        let data_calls = syncer.data_calls();
        let err = log
            .append(z(1, c), payload(z(1, c)))
            .unwrap()
            .wait()
            .unwrap_err();
        assert!(matches!(err, WalError::Failed { .. }), "{err}");
        assert_eq!(
            syncer.data_calls(),
            data_calls,
            "it failed creating the segment, before any fdatasync"
        );
        let tmp = dir.path().join(format!("log.{:x}{TMP_SUFFIX}", z(1, c)));
        assert!(tmp.exists(), "the new segment never got its name");
        assert_eq!(log.last_durable_zxid(), acked);
        assert!(matches!(
            log.append(z(1, c + 1), payload(z(1, c + 1))),
            Err(WalError::Failed { .. })
        ));
    }
    let (log, _) = open(dir.path(), small_segments());
    let got: Vec<Zxid> = read_all(&log).iter().map(|r| r.zxid).collect();
    assert_eq!(got, epoch1(1..=got.len() as u32));
    assert!(got.len() >= 4, "{got:?}");
    for (name, _) in list_dir(dir.path()).unwrap() {
        assert!(!name.ends_with(TMP_SUFFIX), "leftover {name}");
    }
}

/// Copies the flat directory `from` into a new temporary directory.
fn copy_dir(from: &Path) -> tempfile::TempDir {
    let to = tempfile::tempdir().unwrap();
    for (name, path) in list_dir(from).unwrap() {
        fs::copy(&path, to.path().join(name)).unwrap();
    }
    to
}

#[derive(Clone, Copy, Debug)]
enum Tear {
    /// The file ends at the offset (a write that never extended it).
    Shrink,
    /// Zeros from the offset on (preallocated space never written).
    Zeros,
    /// Garbage from the offset to the end of the last record (a torn write).
    Garbage,
}

/// Cuts the last segment at every byte offset inside its last three records,
/// three ways, and reopens: the log holds exactly the records that end before
/// the cut, reports a cut tail whenever bytes were dropped, and appends and
/// reopens cleanly afterwards.
#[test]
fn torn_tail_is_cut_at_every_byte_offset_of_the_last_records() {
    let src = tempfile::tempdir().unwrap();
    let all = epoch1(1..=8);
    // What this checks is the scan and the cut, not the disk, so the hundreds of
    // opens below skip fsync to keep the test fast on a slow shared disk.
    let opts = LogOptions {
        segment_bytes: 4096,
        unsafe_no_fsync: true,
        ..LogOptions::default()
    };
    {
        let (log, _) = open(src.path(), opts.clone());
        append_all(&log, all.clone());
    }
    // Record boundaries in the single segment.
    let mut ends = vec![SEGMENT_HEADER_BYTES];
    for zx in &all {
        let last = *ends.last().unwrap();
        ends.push(last + (RECORD_HEADER_BYTES + payload(*zx).len()) as u64);
    }
    let seg_name = format!("log.{:x}", z(1, 1));
    let from = ends[all.len() - 3];
    let to = ends[all.len()];
    let mut cases = 0;
    for offset in from..=to {
        for tear in [Tear::Shrink, Tear::Zeros, Tear::Garbage] {
            let dir = copy_dir(src.path());
            let path = dir.path().join(&seg_name);
            let f = OpenOptions::new().write(true).open(&path).unwrap();
            let capacity = f.metadata().unwrap().len();
            match tear {
                Tear::Shrink => f.set_len(offset).unwrap(),
                Tear::Zeros => {
                    f.set_len(offset).unwrap();
                    f.set_len(capacity).unwrap();
                }
                Tear::Garbage => {
                    let junk = vec![0xa5u8; (to - offset) as usize];
                    f.write_all_at(&junk, offset).unwrap();
                }
            }
            drop(f);
            let kept = ends.iter().filter(|&&e| e <= offset).count() - 1;
            let at_boundary = ends.contains(&offset);
            let dropped_bytes = match tear {
                Tear::Garbage => offset < to,
                Tear::Shrink | Tear::Zeros => !at_boundary,
            };
            let ctx = format!("offset {offset}, {tear:?}");
            let (log, rec) = open(dir.path(), opts.clone());
            assert_holds(&log, &all[..kept]);
            assert_eq!(rec.tail_cut.is_some(), dropped_bytes, "{ctx}: {rec:?}");
            if let Some(cut) = &rec.tail_cut {
                assert_eq!(cut.offset, ends[kept], "{ctx}");
                assert_eq!(cut.path, path, "{ctx}");
            }
            // The log goes on from the last intact record, and stays clean.
            let next = z(1, kept as u32 + 1);
            append_all(&log, [next]);
            drop(log);
            let (log, rec) = open(dir.path(), opts.clone());
            assert!(rec.tail_cut.is_none(), "{ctx}: {rec:?}");
            let mut expected = all[..kept].to_vec();
            expected.push(next);
            assert_holds(&log, &expected);
            cases += 1;
        }
    }
    assert!(cases > 100);
}

#[test]
fn damage_before_the_tail_is_a_hard_error_unless_repair_is_asked_for() {
    let dir = tempfile::tempdir().unwrap();
    let all = epoch1(1..=30);
    {
        let (log, _) = open(dir.path(), small_segments());
        append_all(&log, all.clone());
    }
    let segs = list_segments(dir.path()).unwrap();
    assert!(segs.len() >= 4);
    let (victim_first, victim) = segs[1].clone();
    // Flip a byte inside the second record of the second segment.
    let second = SEGMENT_HEADER_BYTES + (RECORD_HEADER_BYTES + payload(victim_first).len()) as u64;
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .open(&victim)
        .unwrap();
    let mut b = [0u8; 1];
    f.read_at(&mut b, second + 20).unwrap();
    f.write_all_at(&[b[0] ^ 0x10], second + 20).unwrap();
    drop(f);

    let err = Log::open(dir.path(), small_segments()).unwrap_err();
    match &err {
        WalError::Corrupt { path, offset, .. } => {
            assert_eq!(path, &victim);
            assert_eq!(*offset, second);
        }
        other => panic!("expected Corrupt, got {other}"),
    }
    let msg = err.to_string();
    assert!(
        msg.contains(&victim.display().to_string()) && msg.contains(&second.to_string()),
        "{msg}"
    );

    // The operator's explicit choice: cut the log at the damage.
    let opts = LogOptions {
        recovery: RecoveryMode::TruncateCorrupt,
        ..small_segments()
    };
    let (log, rec) = open(dir.path(), opts);
    assert_eq!(rec.repaired.len(), 1, "{rec:?}");
    assert_eq!(rec.repaired[0].kept_through, victim_first);
    let kept: Vec<Zxid> = all.iter().copied().filter(|z| *z <= victim_first).collect();
    assert_holds(&log, &kept);
    drop(log);
    let (log, rec) = open(dir.path(), small_segments());
    assert!(rec.repaired.is_empty() && rec.tail_cut.is_none());
    assert_holds(&log, &kept);
}

#[test]
fn a_missing_middle_segment_is_a_gap_not_a_shorter_log() {
    let dir = tempfile::tempdir().unwrap();
    {
        let (log, _) = open(dir.path(), small_segments());
        append_all(&log, epoch1(1..=30));
    }
    let segs = list_segments(dir.path()).unwrap();
    fs::remove_file(&segs[2].1).unwrap();
    let err = Log::open(dir.path(), small_segments()).unwrap_err();
    assert!(matches!(err, WalError::HistoryGap { .. }), "{err}");
}

#[test]
fn truncate_after_spans_segments_and_moves_durable_back() {
    let dir = tempfile::tempdir().unwrap();
    let (log, _) = open(dir.path(), small_segments());
    append_all(&log, epoch1(1..=30));
    assert_eq!(log.truncate_after(z(1, 7)).unwrap(), z(1, 7));
    assert_holds(&log, &epoch1(1..=7));
    // A diverged tail is replaced by the leader's history.
    append_all(&log, [z(2, 1), z(2, 2)]);
    assert_holds(&log, &[epoch1(1..=7), vec![z(2, 1), z(2, 2)]].concat());
    // Truncating to a zxid between records ends at the last record below it.
    assert_eq!(log.truncate_after(z(1, 9)).unwrap(), z(1, 7));
    // Truncating everything keeps the start.
    assert_eq!(log.truncate_after(Zxid::ZERO).unwrap(), Zxid::ZERO);
    assert_holds(&log, &[]);
    append_all(&log, [z(3, 1)]);
    drop(log);
    let (log, _) = open(dir.path(), small_segments());
    assert_holds(&log, &[z(3, 1)]);
}

#[test]
fn readers_check_their_bounds() {
    let dir = tempfile::tempdir().unwrap();
    let (log, _) = open(dir.path(), small_segments());
    append_all(&log, epoch1(1..=30));
    assert!(matches!(
        log.read_from(z(1, 31)),
        Err(WalError::BeyondEnd { .. })
    ));
    assert!(matches!(
        log.read_from(z(0, 5)),
        Err(WalError::NotInLog { .. })
    ));
    log.purge_before(z(1, 12)).unwrap();
    let start = log.start();
    assert!(start > Zxid::ZERO && start <= z(1, 12));
    assert!(matches!(
        log.read_from(z(1, 1)),
        Err(WalError::Purged { .. })
    ));
    assert!(log.contains(start).unwrap());
    assert!(!log.contains(z(1, 1)).unwrap());
    // A reader that outlives a truncation says so instead of inventing data.
    let mut reader = log.read_from(start).unwrap();
    log.truncate_after(start).unwrap();
    append_all(&log, [z(2, 1)]);
    let results: Vec<_> = reader.by_ref().collect();
    assert!(
        results
            .iter()
            .any(|r| matches!(r, Err(WalError::Rewritten))),
        "{results:?}"
    );
}

/// Crash points of a rewrite: every sync of it fails in turn (the process stops
/// there, with everything before it done), then the log is reopened. It must
/// hold the old history or the new one, never a mix.
fn rewrite_crash_points(
    opts: LogOptions,
    setup: impl Fn(&Log),
    rewrite: impl Fn(&Log) -> Result<Zxid>,
    before: &[Zxid],
    after: &[Zxid],
) {
    let (mut saw_before, mut saw_after) = (false, false);
    for k in 0..100 {
        let dir = tempfile::tempdir().unwrap();
        let (log, syncer) = open_faulty(dir.path(), opts.clone());
        setup(&log);
        syncer.fail_after(k);
        let calls = syncer.calls();
        let result = rewrite(&log);
        drop(log);
        let (log, _) = open(dir.path(), opts.clone());
        let got: Vec<Zxid> = read_all(&log).iter().map(|r| r.zxid).collect();
        let ctx = format!("failing sync {k} after {calls}: {result:?}");
        if result.is_ok() {
            assert_eq!(got, after, "{ctx}");
            assert!(saw_before && saw_after, "both outcomes were reached");
            return;
        }
        if got == before {
            saw_before = true;
        } else {
            assert_eq!(got, after, "{ctx}");
            saw_after = true;
        }
        assert_eq!(log.last_durable_zxid(), *got.last().unwrap_or(&log.start()));
    }
    panic!("the rewrite never succeeded");
}

#[test]
fn truncate_after_is_atomic_at_every_crash_point() {
    let all = epoch1(1..=30);
    rewrite_crash_points(
        small_segments(),
        |log| append_all(log, all.clone()),
        |log| log.truncate_after(z(1, 9)),
        &all,
        &epoch1(1..=9),
    );
}

#[test]
fn reset_is_atomic_at_every_crash_point() {
    let all = epoch1(1..=30);
    rewrite_crash_points(
        small_segments(),
        |log| append_all(log, all.clone()),
        |log| log.reset(Zxid::epoch_start(Epoch(5))),
        &all,
        &[],
    );
    let dir = tempfile::tempdir().unwrap();
    let (log, _) = open(dir.path(), small_segments());
    append_all(&log, all.clone());
    log.reset(z(5, 0)).unwrap();
    assert!(matches!(
        log.append(z(5, 2), payload(z(5, 2))),
        Err(WalError::Gap { .. })
    ));
    append_all(&log, [z(5, 1)]);
    drop(log);
    let (log, _) = open(dir.path(), small_segments());
    assert_eq!(log.start(), z(5, 0));
    assert_holds(&log, &[z(5, 1)]);
}

#[test]
fn purge_is_a_prefix_at_every_crash_point() {
    for k in 0..20 {
        let dir = tempfile::tempdir().unwrap();
        let (log, syncer) = open_faulty(dir.path(), small_segments());
        append_all(&log, epoch1(1..=30));
        syncer.fail_after(k);
        let result = log.purge_before(z(1, 20));
        drop(log);
        let (log, _) = open(dir.path(), small_segments());
        let start = log.start();
        let got: Vec<Zxid> = read_all(&log).iter().map(|r| r.zxid).collect();
        let expected: Vec<Zxid> = epoch1(1..=30).into_iter().filter(|z| *z > start).collect();
        assert_eq!(got, expected, "failing sync {k}: {result:?}");
        assert!(start <= z(1, 20));
        if result.is_ok() {
            assert!(start > Zxid::ZERO);
            return;
        }
    }
    panic!("purge never succeeded");
}

#[test]
fn record_size_limit_is_enforced_and_a_big_record_gets_its_own_segment() {
    let dir = tempfile::tempdir().unwrap();
    let opts = LogOptions {
        segment_bytes: 256,
        record_bytes_max: 1024,
        ..LogOptions::default()
    };
    let (log, _) = open(dir.path(), opts.clone());
    append_all(&log, [z(1, 1)]);
    let too_big = Bytes::from(vec![0u8; 1024 - RECORD_HEADER_BYTES + 1]);
    let err = log.append(z(1, 2), too_big).unwrap_err();
    assert!(
        matches!(
            err,
            WalError::RecordTooLarge {
                size_bytes: 1025,
                limit_bytes: 1024,
                ..
            }
        ),
        "{err}"
    );
    // Larger than a segment but within the limit: a segment of its own size.
    let big = Bytes::from(vec![9u8; 1000]);
    log.append(z(1, 2), big.clone()).unwrap().wait().unwrap();
    drop(log);
    let (log, _) = open(dir.path(), opts);
    let got = read_all(&log);
    assert_eq!(got.len(), 2);
    assert_eq!(got[1].payload, big);
    assert_eq!(log.segments().len(), 2);
}

#[test]
fn pending_bytes_limit_refuses_appends_until_the_writer_catches_up() {
    let dir = tempfile::tempdir().unwrap();
    let opts = LogOptions {
        pending_bytes_max: 1000,
        ..LogOptions::default()
    };
    let (log, syncer) = open_faulty(dir.path(), opts);
    syncer.close_gate();
    let first = log.append(z(1, 1), payload(z(1, 1))).unwrap();
    syncer.wait_until_held();
    let mut queued = Vec::new();
    let mut c = 2;
    let err = loop {
        match log.append(z(1, c), payload(z(1, c))) {
            Ok(a) => queued.push(a),
            Err(e) => break e,
        }
        c += 1;
    };
    assert!(
        matches!(err, WalError::Overloaded { limit_bytes: 1000, pending_bytes } if pending_bytes <= 1000),
        "{err}"
    );
    assert!(queued.len() > 10);
    syncer.open_gate();
    first.wait().unwrap();
    for a in queued {
        a.wait().unwrap();
    }
    // Nothing was accepted from the refused append: the same zxid goes in now.
    append_all(&log, [z(1, c)]);
    assert_holds(&log, &epoch1(1..=c));
}

#[test]
fn open_syncs_what_a_crashed_process_left_unsynced() {
    let dir = tempfile::tempdir().unwrap();
    {
        let (log, _) = open(dir.path(), LogOptions::default());
        append_all(&log, epoch1(1..=3));
    }
    // Reopen with every sync failing: open must not report anything as durable
    // without having synced it.
    let syncer = Arc::new(FailingSyncer::new());
    syncer.fail_after(0);
    let err = Log::open_with(dir.path(), LogOptions::default(), syncer).unwrap_err();
    assert!(err.to_string().contains("injected fsync failure"), "{err}");
}

#[test]
fn the_durable_state_can_be_shared_between_threads() {
    fn shared<T: Send + Sync>() {}
    shared::<Log>();
    shared::<crate::Wal>();
    shared::<Append>();
}

#[test]
fn a_last_segment_whose_only_record_is_torn_is_removed() {
    let dir = tempfile::tempdir().unwrap();
    let mut acked = Vec::new();
    {
        let (log, _) = open(dir.path(), small_segments());
        let mut c = 1;
        // Append until the newest segment holds exactly one record.
        loop {
            append_all(&log, [z(1, c)]);
            acked.push(z(1, c));
            c += 1;
            let segs = log.segments();
            if segs.len() >= 3 && segs.last().unwrap().records == 1 {
                break;
            }
        }
    }
    let (first, path) = list_segments(dir.path()).unwrap().pop().unwrap();
    let torn = acked.pop().unwrap();
    assert_eq!(first, torn);
    // The record's bytes never reached the disk: zeros after a valid header.
    let f = OpenOptions::new().write(true).open(&path).unwrap();
    f.write_all_at(&[0u8; 20], SEGMENT_HEADER_BYTES + 4)
        .unwrap();
    drop(f);
    let (log, rec) = open(dir.path(), small_segments());
    assert!(rec.tail_cut.is_some(), "{rec:?}");
    assert!(!path.exists(), "the empty segment is gone");
    assert_holds(&log, &acked);
    append_all(&log, [torn]);
    drop(log);
    let (log, _) = open(dir.path(), small_segments());
    acked.push(torn);
    assert_holds(&log, &acked);
}

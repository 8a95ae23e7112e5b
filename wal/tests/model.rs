//! Random sequences of append / truncate / purge / reset / reopen, checked after
//! every step against an in-memory model of the history.
//!
//! The log runs with `unsafe_no_fsync` here: this test checks the log's logic
//! (segments, rewrites, purge, reopen), not the disk; durability has its own
//! crash and fault-injection tests.

use bytes::Bytes;
use proptest::prelude::*;
use rzk_wal::{Log, LogOptions, WalError};
use rzk_zxid::{Counter, Epoch, Next, Zxid};

#[derive(Debug, Clone)]
enum Op {
    /// Append `n` records, the first in a new epoch if `new_epoch`.
    Append {
        n: usize,
        new_epoch: bool,
        size: usize,
    },
    /// Truncate after the record `back` places before the end (or the start).
    Truncate { back: usize },
    /// Purge before the record at `frac` of the way through the history.
    Purge { frac: f64 },
    /// Reset to start after a snapshot at the start of a later epoch.
    Reset,
    /// Close and open again.
    Reopen,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (1usize..12, prop::bool::weighted(0.2), 0usize..120)
            .prop_map(|(n, new_epoch, size)| Op::Append { n, new_epoch, size }),
        2 => (0usize..15).prop_map(|back| Op::Truncate { back }),
        1 => (0.0f64..1.0).prop_map(|frac| Op::Purge { frac }),
        1 => Just(Op::Reset),
        2 => Just(Op::Reopen),
    ]
}

struct Model {
    start: Zxid,
    records: Vec<(Zxid, Bytes)>,
    /// The highest epoch used so far, so a new epoch is always higher.
    epoch: u32,
}

impl Model {
    fn end(&self) -> Zxid {
        self.records.last().map_or(self.start, |r| r.0)
    }

    fn next(&mut self, new_epoch: bool) -> Zxid {
        let end = self.end();
        if new_epoch || end.epoch().0 < self.epoch || end == Zxid::ZERO {
            self.epoch += 1;
            return Zxid::first_of(Epoch(self.epoch));
        }
        match end.next() {
            Next::Zxid(z) => z,
            Next::Rollover { .. } => unreachable!("counters stay small here"),
        }
    }
}

fn payload(zxid: Zxid, size: usize) -> Bytes {
    Bytes::from(
        (0..size)
            .map(|i| (zxid.counter().0 as usize + i) as u8)
            .collect::<Vec<u8>>(),
    )
}

fn options() -> LogOptions {
    LogOptions {
        segment_bytes: 400,
        unsafe_no_fsync: true,
        ..LogOptions::default()
    }
}

fn check(log: &Log, model: &Model) -> Result<(), TestCaseError> {
    prop_assert_eq!(log.start(), model.start);
    prop_assert_eq!(log.last_durable_zxid(), model.end());
    let got: Vec<(Zxid, Bytes)> = log
        .read_from(model.start)
        .map_err(|e| TestCaseError::fail(e.to_string()))?
        .map(|r| r.map(|r| (r.zxid, r.payload)))
        .collect::<Result<_, WalError>>()
        .map_err(|e| TestCaseError::fail(e.to_string()))?;
    prop_assert_eq!(&got, &model.records);
    if let Some(mid) = model.records.get(model.records.len() / 2) {
        let suffix: Vec<Zxid> = log
            .read_from(mid.0)
            .map_err(|e| TestCaseError::fail(e.to_string()))?
            .map(|r| r.map(|r| r.zxid))
            .collect::<Result<_, WalError>>()
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
        let expected: Vec<Zxid> = model
            .records
            .iter()
            .map(|r| r.0)
            .filter(|z| *z > mid.0)
            .collect();
        prop_assert_eq!(suffix, expected);
    }
    Ok(())
}

fn run(ops: Vec<Op>) -> Result<(), TestCaseError> {
    let dir = tempfile::tempdir().unwrap();
    let mut log = Some(Log::open(dir.path(), options()).unwrap().0);
    let mut model = Model {
        start: Zxid::ZERO,
        records: Vec::new(),
        epoch: 0,
    };
    for op in ops {
        let l = log.as_ref().unwrap();
        match op {
            Op::Append { n, new_epoch, size } => {
                let mut pending = Vec::new();
                for i in 0..n {
                    let z = model.next(new_epoch && i == 0);
                    let p = payload(z, size);
                    pending.push(l.append(z, p.clone()).unwrap());
                    model.records.push((z, p));
                }
                for p in pending {
                    p.wait().unwrap();
                }
            }
            Op::Truncate { back } => {
                let target = match model.records.len().checked_sub(back + 1) {
                    Some(i) => model.records[i].0,
                    None => model.start,
                };
                prop_assert_eq!(l.truncate_after(target).unwrap(), target);
                model.records.retain(|r| r.0 <= target);
            }
            Op::Purge { frac } => {
                let i = (model.records.len() as f64 * frac) as usize;
                let Some(&(at, _)) = model.records.get(i) else {
                    continue;
                };
                let report = l.purge_before(at).unwrap();
                // Which segments go depends on where they end; what must hold:
                // the new start is a record at or below `at` (or the old start),
                // and everything after it is still there.
                prop_assert!(report.start <= at);
                prop_assert!(
                    report.start == model.start
                        || model.records.iter().any(|r| r.0 == report.start)
                );
                model.start = report.start;
                model.records.retain(|r| r.0 > report.start);
            }
            Op::Reset => {
                model.epoch += 1;
                let s = Zxid::epoch_start(Epoch(model.epoch));
                l.reset(s).unwrap();
                model.start = s;
                model.records.clear();
            }
            Op::Reopen => {
                drop(log.take());
                let (l, rec) = Log::open(dir.path(), options()).unwrap();
                prop_assert!(rec.tail_cut.is_none(), "clean shutdown leaves no torn tail");
                log = Some(l);
            }
        }
        check(log.as_ref().unwrap(), &model)?;
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 48,
        rng_seed: proptest::test_runner::RngSeed::Fixed(0x5eed_0001),
        ..ProptestConfig::default()
    })]

    #[test]
    fn log_matches_the_model(ops in prop::collection::vec(op(), 1..40)) {
        run(ops)?;
    }
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 2000,
        ..ProptestConfig::default()
    })]

    #[test]
    #[ignore = "needs a long run"]
    fn log_matches_the_model_long(ops in prop::collection::vec(op(), 1..120)) {
        run(ops)?;
    }
}

#[test]
fn gap_refused_by_the_model_too() {
    // A sanity check of the model's own zxid rule against the log's.
    let dir = tempfile::tempdir().unwrap();
    let (log, _) = Log::open(dir.path(), options()).unwrap();
    let a = Zxid::new(Epoch(1), Counter(1));
    log.append(a, Bytes::new()).unwrap().wait().unwrap();
    let err = log
        .append(Zxid::new(Epoch(1), Counter(3)), Bytes::new())
        .unwrap_err();
    assert!(matches!(err, WalError::Gap { .. }));
}

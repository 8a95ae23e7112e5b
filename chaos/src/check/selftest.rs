//! The checker's self-tests: recorded-style histories that are linearizable,
//! and mutations of them that are not (a lost write, a stale read, a read of a
//! value never written, ...). Each must be classified exactly.

use super::{analyze, Budget, FindingKind};
use crate::history::{Call, Op, Outcome, Ret, Time, FINAL_PROCESS, NEVER};

/// Builds histories op by op; times in milliseconds.
struct H {
    ops: Vec<Op>,
}

impl H {
    fn new() -> H {
        H { ops: Vec::new() }
    }

    fn push(
        &mut self,
        process: u32,
        session: i64,
        t0: u64,
        t1: Time,
        call: Call,
        outcome: Outcome,
    ) -> &mut Op {
        let id = self.ops.len() as u64;
        let complete = if t1 == NEVER { NEVER } else { t1 * 1_000_000 };
        self.ops.push(Op {
            id,
            process,
            session,
            member: Some(process % 3 + 1),
            invoke: t0 * 1_000_000,
            complete,
            call,
            outcome,
            zxid: None,
        });
        self.ops.last_mut().unwrap()
    }

    fn write(
        &mut self,
        p: u32,
        t0: u64,
        t1: u64,
        key: u32,
        value: &str,
        version: i32,
    ) -> &mut Self {
        self.push(
            p,
            0x100 + p as i64,
            t0,
            t1,
            Call::Write {
                key,
                value: value.into(),
            },
            Outcome::Ok(Ret::Version { version }),
        );
        self
    }

    fn write_info(&mut self, p: u32, t0: u64, key: u32, value: &str) -> &mut Self {
        self.push(
            p,
            0x100 + p as i64,
            t0,
            NEVER,
            Call::Write {
                key,
                value: value.into(),
            },
            Outcome::Info {
                reason: "connection lost".into(),
            },
        );
        self
    }

    #[allow(clippy::too_many_arguments)] // a test builder: one argument per field of the op
    fn cas(
        &mut self,
        p: u32,
        t0: u64,
        t1: u64,
        key: u32,
        expected: i32,
        value: &str,
        result: Result<i32, &str>,
    ) -> &mut Self {
        let outcome = match result {
            Ok(version) => Outcome::Ok(Ret::Version { version }),
            Err(e) => Outcome::Fail { error: e.into() },
        };
        self.push(
            p,
            0x100 + p as i64,
            t0,
            t1,
            Call::Cas {
                key,
                expected,
                value: value.into(),
            },
            outcome,
        );
        self
    }

    fn read(&mut self, p: u32, t0: u64, t1: u64, key: u32, value: &str, version: i32) -> &mut Self {
        self.push(
            p,
            0x100 + p as i64,
            t0,
            t1,
            Call::Read { key },
            Outcome::Ok(Ret::Data {
                value: value.into(),
                version,
            }),
        );
        self
    }

    fn sync_read(
        &mut self,
        p: u32,
        t0: u64,
        t1: u64,
        key: u32,
        value: &str,
        version: i32,
    ) -> &mut Self {
        self.push(
            p,
            0x100 + p as i64,
            t0,
            t1,
            Call::SyncRead { key },
            Outcome::Ok(Ret::Data {
                value: value.into(),
                version,
            }),
        );
        self
    }

    fn final_read(
        &mut self,
        member: u32,
        t0: u64,
        key: u32,
        value: &str,
        version: i32,
    ) -> &mut Self {
        let op = self.push(
            FINAL_PROCESS,
            0x900 + member as i64,
            t0,
            t0 + 1,
            Call::SyncRead { key },
            Outcome::Ok(Ret::Data {
                value: value.into(),
                version,
            }),
        );
        op.member = Some(member);
        self
    }

    fn kinds(&self) -> Vec<FindingKind> {
        let a = analyze(&self.ops, Budget::default());
        let mut k: Vec<FindingKind> = a.findings.iter().map(|f| f.kind).collect();
        k.dedup();
        k
    }
}

/// A linearizable history with concurrency, CAS success and failure, an
/// indeterminate write that took effect and one that did not, plain reads
/// that are stale (allowed in ZooKeeper) and final reads on three members.
fn linearizable() -> H {
    let mut h = H::new();
    h.write(0, 0, 10, 1, "a", 1)
        .read(1, 5, 8, 1, "init", 0) // concurrent with the write: old value is fine
        .sync_read(2, 12, 20, 1, "a", 1)
        .cas(1, 21, 30, 1, 1, "b", Ok(2))
        .cas(2, 22, 31, 1, 1, "c", Err("BADVERSION"))
        .read(0, 32, 33, 1, "a", 1) // plain read from a lagging member: allowed (sequential)
        .write_info(0, 40, 1, "d") // took effect: read below
        .sync_read(1, 60, 70, 1, "d", 3)
        .write_info(2, 80, 1, "e") // did not take effect: "f" is version 4
        .write(1, 90, 100, 1, "f", 4)
        .sync_read(0, 110, 120, 1, "f", 4)
        .final_read(1, 200, 1, "f", 4)
        .final_read(2, 200, 1, "f", 4)
        .final_read(3, 200, 1, "f", 4);
    h
}

#[test]
fn a_linearizable_history_has_no_findings() {
    let h = linearizable();
    let a = analyze(&h.ops, Budget::default());
    assert!(a.findings.is_empty(), "{:#?}", a.findings);
    assert_eq!(a.keys_checked, 1);
    assert_eq!(a.keys_linearizable, 1);
    assert_eq!(a.acked_writes, 3);
    assert_eq!(a.acked_lost, 0);
}

#[test]
fn a_lost_write_is_found_by_the_search_and_the_final_state() {
    // Mutation: the final state lost "f" (v=4) on member 3, which still has "d".
    let mut h = linearizable();
    let last = h.ops.len() - 1;
    h.ops[last].outcome = Outcome::Ok(Ret::Data {
        value: "d".into(),
        version: 3,
    });
    let a = analyze(&h.ops, Budget::default());
    let kinds: Vec<_> = a.findings.iter().map(|f| f.kind).collect();
    assert!(kinds.contains(&FindingKind::NotLinearizable), "{kinds:?}");
    assert!(kinds.contains(&FindingKind::AckedLost), "{kinds:?}");
    assert!(kinds.contains(&FindingKind::Divergence), "{kinds:?}");
    assert!(
        kinds.contains(&FindingKind::StaleReadAfterSync),
        "{kinds:?}"
    );
    assert_eq!(a.acked_lost, 1);
    // The window is short and ends at the bad final read.
    let nl = a
        .findings
        .iter()
        .find(|f| f.kind == FindingKind::NotLinearizable)
        .unwrap();
    assert!(nl.ops.len() <= 6, "{}", nl.describe());
    assert_eq!(
        nl.ops.last().unwrap().id,
        h.ops[last].id,
        "{}",
        nl.describe()
    );
}

#[test]
fn a_lost_write_in_the_middle_is_not_linearizable() {
    // Mutation: a sync+read after the acknowledged "b" (v=2) returns "a" again
    // with version 1, and a later write builds on version 2: "b" vanished and
    // came back: a stale read after sync.
    let mut h = H::new();
    h.write(0, 0, 10, 1, "a", 1)
        .cas(1, 20, 30, 1, 1, "b", Ok(2))
        .sync_read(2, 40, 50, 1, "a", 1);
    assert_eq!(
        h.kinds(),
        vec![
            FindingKind::NotLinearizable,
            FindingKind::StaleReadAfterSync
        ]
    );
}

#[test]
fn a_stale_read_after_sync_is_found_but_a_stale_plain_read_is_allowed() {
    let mut h = H::new();
    h.write(0, 0, 10, 1, "a", 1).read(1, 20, 30, 1, "init", 0);
    assert_eq!(
        h.kinds(),
        vec![],
        "a plain read may lag (sequential consistency)"
    );
    let mut h = H::new();
    h.write(0, 0, 10, 1, "a", 1)
        .sync_read(1, 20, 30, 1, "init", 0);
    assert_eq!(
        h.kinds(),
        vec![
            FindingKind::NotLinearizable,
            FindingKind::StaleReadAfterSync
        ]
    );
}

#[test]
fn a_read_of_a_value_never_written_is_found() {
    let mut h = H::new();
    h.write(0, 0, 10, 1, "a", 1).read(1, 20, 30, 1, "zzz", 1);
    // "zzz" at v=1 also means the acknowledged "a" (v=1) is gone.
    assert_eq!(
        h.kinds(),
        vec![
            FindingKind::NeverWritten,
            FindingKind::VersionConflict,
            FindingKind::AckedLost
        ]
    );
    // A value whose write definitely failed is never written too.
    let mut h = H::new();
    h.cas(0, 0, 10, 1, 5, "x", Err("BADVERSION"))
        .sync_read(1, 20, 30, 1, "x", 1);
    let kinds = h.kinds();
    assert!(kinds.contains(&FindingKind::NeverWritten), "{kinds:?}");
    assert!(kinds.contains(&FindingKind::NotLinearizable), "{kinds:?}");
}

#[test]
fn a_read_from_the_future_is_found() {
    let mut h = H::new();
    h.read(1, 0, 10, 1, "a", 1).write(0, 20, 30, 1, "a", 1);
    assert_eq!(h.kinds(), vec![FindingKind::NeverWritten]);
}

#[test]
fn a_session_reading_older_than_it_wrote_is_found() {
    let mut h = H::new();
    h.write(0, 0, 10, 1, "a", 1).read(0, 20, 30, 1, "init", 0);
    assert_eq!(h.kinds(), vec![FindingKind::SessionWentBack]);
}

#[test]
fn zxids_going_backwards_in_a_session_are_found() {
    let mut h = H::new();
    h.write(0, 0, 10, 1, "a", 1).read(0, 20, 30, 1, "a", 1);
    h.ops[0].zxid = Some(0x1_0000_0005);
    h.ops[1].zxid = Some(0x1_0000_0004);
    assert_eq!(h.kinds(), vec![FindingKind::ZxidBackwards]);
    h.ops[1].zxid = Some(0x2_0000_0000);
    assert_eq!(h.kinds(), vec![]);
}

#[test]
fn an_ephemeral_must_vanish_with_its_session_and_stay_while_it_lives() {
    let eph = |h: &mut H, p: u32, t0: u64, t1: u64, call: Call, outcome: Outcome| {
        h.push(p, 0x100 + p as i64, t0, t1, call, outcome);
    };
    let names = |v: &[&str]| {
        Outcome::Ok(Ret::Names {
            names: v.iter().map(|s| s.to_string()).collect(),
        })
    };
    let create = Call::CreateEphemeral { name: "e1".into() };
    // Alive: created, listed, owner still active later.
    let mut ok = H::new();
    eph(&mut ok, 0, 0, 10, create.clone(), Outcome::Ok(Ret::Unit));
    eph(&mut ok, 1, 20, 30, Call::SyncList, names(&["e1"]));
    ok.read(0, 40, 50, 1, "init", 0);
    eph(&mut ok, 0, 60, 70, Call::Close, Outcome::Ok(Ret::Unit));
    eph(&mut ok, 1, 80, 90, Call::SyncList, names(&[]));
    assert_eq!(ok.kinds(), vec![]);
    // Mutation 1: listed after the close was acknowledged.
    let mut outlived = H::new();
    eph(
        &mut outlived,
        0,
        0,
        10,
        create.clone(),
        Outcome::Ok(Ret::Unit),
    );
    eph(
        &mut outlived,
        0,
        60,
        70,
        Call::Close,
        Outcome::Ok(Ret::Unit),
    );
    eph(&mut outlived, 1, 80, 90, Call::SyncList, names(&["e1"]));
    assert_eq!(outlived.kinds(), vec![FindingKind::EphemeralOutlived]);
    // Mutation 2: missing while the owner was provably alive.
    let mut missing = H::new();
    eph(&mut missing, 0, 0, 10, create, Outcome::Ok(Ret::Unit));
    eph(&mut missing, 1, 20, 30, Call::SyncList, names(&[]));
    missing.read(0, 40, 50, 1, "init", 0);
    assert_eq!(missing.kinds(), vec![FindingKind::EphemeralMissing]);
}

#[test]
fn a_long_history_is_decided_quickly() {
    // 8 processes, 4000 ops on one key, with indeterminate writes sprinkled
    // in: decided (not "could not decide") within the default budget.
    let mut h = H::new();
    let mut version = 0;
    let mut t = 0u64;
    for i in 0..4000u32 {
        let p = i % 8;
        match i % 5 {
            0 | 1 => {
                version += 1;
                h.write(p, t, t + 3, 1, &format!("v{i}"), version);
            }
            2 => {
                h.sync_read(p, t, t + 3, 1, &format!("v{}", i - 1), version);
            }
            3 if i % 40 == 3 => {
                h.write_info(p, t, 1, &format!("lost{i}"));
            }
            _ => {
                h.cas(
                    p,
                    t,
                    t + 3,
                    1,
                    version - 1,
                    &format!("c{i}"),
                    Err("BADVERSION"),
                );
            }
        }
        t += 2;
    }
    let a = analyze(&h.ops, Budget::default());
    assert!(
        a.findings.is_empty(),
        "{:#?}",
        &a.findings[..a.findings.len().min(3)]
    );
    assert_eq!(a.keys_linearizable, 1);
}

/// Many writes with unknown outcome, each still open when the next acknowledged
/// ones arrive: decided (both ways) with a small state budget, because reads
/// and final reads settle which of them took effect.
#[test]
fn open_indeterminate_writes_are_settled_by_what_was_read() {
    let build = |stale_final: bool| {
        let mut h = H::new();
        let mut version = 0;
        for i in 0..40u64 {
            let t = i * 10;
            h.write_info((i % 4) as u32, t, 1, &format!("lost{i}"));
            if i % 10 == 5 {
                // This one took effect: a later read sees it.
                version += 1;
                h.sync_read(5, t + 5, t + 8, 1, &format!("lost{i}"), version);
            } else {
                version += 1;
                h.write(6, t + 1, t + 4, 1, &format!("v{i}"), version);
            }
        }
        let (value, v) = if stale_final {
            ("v38".to_string(), version - 1)
        } else {
            ("v39".to_string(), version)
        };
        for m in 1..=3 {
            h.final_read(m, 1000, 1, &value, v);
        }
        h
    };
    let small = Budget {
        states_max: 20_000,
        ..Budget::default()
    };
    let ok = analyze(&build(false).ops, small);
    assert!(ok.findings.is_empty(), "{:#?}", ok.findings);
    let bad = analyze(&build(true).ops, small);
    let kinds: Vec<_> = bad.findings.iter().map(|f| f.kind).collect();
    assert!(kinds.contains(&FindingKind::NotLinearizable), "{kinds:?}");
    assert!(!kinds.contains(&FindingKind::Undecided), "{kinds:?}");
}

#[test]
fn an_unread_indeterminate_write_may_fill_a_version_gap() {
    // Version 2 was produced by the write whose outcome is unknown.
    let mut h = H::new();
    h.write(0, 0, 10, 1, "a", 1)
        .write_info(1, 20, 1, "b")
        .write(2, 40, 50, 1, "c", 3)
        .sync_read(0, 60, 70, 1, "c", 3);
    assert_eq!(h.kinds(), vec![]);
    // A write read at a version it cannot have produced (its CAS expected 0).
    let mut h = H::new();
    h.write(0, 0, 10, 1, "a", 1);
    h.push(
        1,
        0x101,
        20,
        NEVER,
        Call::Cas {
            key: 1,
            expected: 0,
            value: "b".into(),
        },
        Outcome::Info {
            reason: "lost".into(),
        },
    );
    h.sync_read(2, 40, 50, 1, "b", 2);
    assert!(
        h.kinds().contains(&FindingKind::NotLinearizable),
        "{:?}",
        h.kinds()
    );
}

#[test]
fn a_rolled_back_write_is_lost_even_if_later_versions_pass_it() {
    // "b" was acknowledged at v=2; later the ensemble wrote v=2 again with "c"
    // and went on to v=3: the final state is past v=2, but "b" is gone.
    let mut h = H::new();
    h.write(0, 0, 10, 1, "a", 1)
        .write(1, 20, 30, 1, "b", 2)
        .write(2, 40, 50, 1, "c", 2)
        .write(0, 60, 70, 1, "d", 3)
        .final_read(1, 100, 1, "d", 3);
    let a = analyze(&h.ops, Budget::default());
    let kinds: Vec<_> = a.findings.iter().map(|f| f.kind).collect();
    assert!(kinds.contains(&FindingKind::AckedLost), "{kinds:?}");
    assert!(kinds.contains(&FindingKind::VersionConflict), "{kinds:?}");
    assert!(kinds.contains(&FindingKind::NotLinearizable), "{kinds:?}");
    assert_eq!(a.acked_lost, 1);
}

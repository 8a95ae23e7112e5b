//! Findings that need no search: each is a direct consequence of a guarantee
//! ZooKeeper documents (or rzk adds, I6b), checked in one pass over the history.

use std::collections::{BTreeMap, HashMap};

use super::linear::INITIAL_VALUE;
use super::{Finding, FindingKind};
use crate::history::{Call, Op, Outcome, Ret, Time, FINAL_PROCESS, NEVER};

/// What the direct checks found.
#[derive(Debug, Default)]
pub struct Direct {
    /// The findings.
    pub findings: Vec<Finding>,
    /// Acknowledged writes missing from some member's final state.
    pub acked_lost: usize,
    /// Acknowledged register writes.
    pub acked_writes: usize,
}

/// Runs every direct check.
pub fn check(ops: &[Op]) -> Direct {
    let mut out = Direct::default();
    let mut by_key: BTreeMap<u32, Vec<&Op>> = BTreeMap::new();
    for op in ops {
        if let Some(key) = op.call.key() {
            by_key.entry(key).or_default().push(op);
        }
    }
    for (&key, key_ops) in &by_key {
        registers(key, key_ops, &mut out);
    }
    zxids(ops, &mut out);
    ephemerals(ops, &mut out);
    out
}

/// An ok read of a register: (value, version), for plain and sync reads.
fn read_result(op: &Op) -> Option<(&str, i32)> {
    match (&op.call, &op.outcome) {
        (Call::Read { .. } | Call::SyncRead { .. }, Outcome::Ok(Ret::Data { value, version })) => {
            Some((value, *version))
        }
        _ => None,
    }
}

/// An ok write or CAS: (value, version produced).
fn write_result(op: &Op) -> Option<(&str, i32)> {
    match (&op.call, &op.outcome) {
        (
            Call::Write { value, .. } | Call::Cas { value, .. },
            Outcome::Ok(Ret::Version { version }),
        ) => Some((value, *version)),
        _ => None,
    }
}

fn written_value(op: &Op) -> Option<&str> {
    match &op.call {
        Call::Write { value, .. } | Call::Cas { value, .. } => Some(value),
        _ => None,
    }
}

fn registers(key: u32, ops: &[&Op], out: &mut Direct) {
    // Every write of a value (values are unique per write in a run).
    let mut writer: HashMap<&str, &Op> = HashMap::new();
    for op in ops {
        if let Some(v) = written_value(op) {
            writer.insert(v, op);
        }
    }
    // Version -> (value, first op that showed it); reports conflicts.
    let mut at_version: HashMap<i32, (&str, &Op)> = HashMap::new();
    at_version.insert(0, (INITIAL_VALUE, ops[0]));
    let mut conflicts = 0;
    for op in ops {
        let Some((value, version)) = read_result(op).or_else(|| write_result(op)) else {
            continue;
        };
        match at_version.get(&version) {
            Some(&(seen, first)) if seen != value => {
                conflicts += 1;
                if conflicts <= 3 {
                    let mut shown = vec![(*op).clone()];
                    if version != 0 || first.id != ops[0].id {
                        shown.insert(0, first.clone());
                    }
                    out.findings.push(Finding {
                        kind: FindingKind::VersionConflict,
                        key: Some(key),
                        message: format!(
                            "k{key} version {version} seen with {seen:?} and with {value:?}"
                        ),
                        ops: shown,
                    });
                }
            }
            Some(_) => {}
            None => {
                at_version.insert(version, (value, op));
            }
        }
    }
    never_written(key, ops, &writer, out);
    stale_after_sync(key, ops, out);
    session_went_back(key, ops, out);
    final_state(key, ops, out);
}

fn never_written(key: u32, ops: &[&Op], writer: &HashMap<&str, &Op>, out: &mut Direct) {
    for op in ops {
        let Some((value, version)) = read_result(op) else {
            continue;
        };
        if value == INITIAL_VALUE && version == 0 {
            continue;
        }
        let why = match writer.get(value) {
            None => "no write carried it".to_string(),
            Some(w)
                if w.outcome.server_error().is_some()
                    || matches!(&w.outcome, Outcome::Fail { .. }) =>
            {
                format!("its write failed ({})", w.describe())
            }
            Some(w) if w.invoke > op.complete => {
                "its write was invoked after the read completed".into()
            }
            Some(_) => continue,
        };
        let mut shown = vec![(*op).clone()];
        if let Some(w) = writer.get(value) {
            shown.insert(0, (*w).clone());
        }
        out.findings.push(Finding {
            kind: FindingKind::NeverWritten,
            key: Some(key),
            message: format!("k{key} read {value:?} (v={version}): {why}"),
            ops: shown,
        });
    }
}

/// I6b: a read after `sync` sees at least every version acknowledged (or
/// read) before the sync was sent.
fn stale_after_sync(key: u32, ops: &[&Op], out: &mut Direct) {
    // Known versions by completion time: (complete, version, op).
    let mut known: Vec<(Time, i32, &Op)> = ops
        .iter()
        .filter_map(|op| {
            let (_, version) = read_result(op).or_else(|| write_result(op))?;
            Some((op.complete, version, *op))
        })
        .collect();
    known.sort_by_key(|k| k.0);
    // Prefix maxima over completion time.
    let mut best: Vec<(Time, i32, &Op)> = Vec::with_capacity(known.len());
    let mut newest: Option<(i32, &Op)> = None;
    for (t, v, op) in known {
        if newest.is_none_or(|(bv, _)| v > bv) {
            newest = Some((v, op));
        }
        if let Some((bv, bop)) = newest {
            best.push((t, bv, bop));
        }
    }
    for op in ops {
        if !matches!(op.call, Call::SyncRead { .. }) {
            continue;
        }
        let Some((value, version)) = read_result(op) else {
            continue;
        };
        // The newest version known strictly before the sync was invoked.
        let idx = best.partition_point(|&(t, _, _)| t < op.invoke);
        if idx == 0 {
            continue;
        }
        let (_, newest, witness) = best[idx - 1];
        if newest > version {
            out.findings.push(Finding {
                kind: FindingKind::StaleReadAfterSync,
                key: Some(key),
                message: format!(
                    "k{key}: sync+read on {} returned {value:?} v={version}, but v={newest} was acknowledged or read before the sync began",
                    op.member.map(|m| format!("member {m}")).unwrap_or_else(|| "?".into())
                ),
                ops: vec![witness.clone(), (*op).clone()],
            });
        }
    }
}

/// ZooKeeper orders each session: a read never returns an older version than
/// the session already wrote or read.
fn session_went_back(key: u32, ops: &[&Op], out: &mut Direct) {
    let mut seen: HashMap<i64, (i32, &Op)> = HashMap::new();
    let mut sorted: Vec<&&Op> = ops.iter().filter(|o| o.session != 0).collect();
    sorted.sort_by_key(|o| (o.invoke, o.id));
    for op in sorted {
        let Some((_, version)) = read_result(op).or_else(|| write_result(op)) else {
            continue;
        };
        match seen.get(&op.session) {
            Some(&(before, witness)) if version < before && read_result(op).is_some() => {
                out.findings.push(Finding {
                    kind: FindingKind::SessionWentBack,
                    key: Some(key),
                    message: format!(
                        "k{key}: session {:#x} read v={version} after it had seen v={before}",
                        op.session
                    ),
                    ops: vec![witness.clone(), (*op).clone()],
                });
            }
            Some(&(before, _)) if before >= version => {}
            _ => {
                seen.insert(op.session, (version, op));
            }
        }
    }
}

/// The final reads (one per member, after heal) against acknowledged writes.
fn final_state(key: u32, ops: &[&Op], out: &mut Direct) {
    let acked: Vec<(&str, i32, &Op)> = ops
        .iter()
        .filter_map(|op| write_result(op).map(|(v, ver)| (v, ver, *op)))
        .collect();
    out.acked_writes += acked.len();
    let finals: Vec<&Op> = ops
        .iter()
        .copied()
        .filter(|o| o.process == FINAL_PROCESS)
        .collect();
    let mut lost: BTreeMap<u64, &Op> = BTreeMap::new();
    // Rolled back: an acknowledged write whose version was later seen holding
    // another value (the ensemble went back and wrote that version again).
    let mut rolled_back = 0;
    for &(wv, wver, w) in &acked {
        let later = ops.iter().find(|o| {
            o.invoke > w.complete
                && read_result(o)
                    .or_else(|| write_result(o))
                    .is_some_and(|(v, ver)| ver == wver && v != wv)
        });
        if let Some(later) = later {
            if lost.insert(w.id, w).is_none() {
                rolled_back += 1;
                if rolled_back <= 3 {
                    out.findings.push(Finding {
                        kind: FindingKind::AckedLost,
                        key: Some(key),
                        message: format!(
                            "k{key}: acknowledged write {wv:?} (v={wver}) was rolled back: v={wver} later held another value"
                        ),
                        ops: vec![w.clone(), (*later).clone()],
                    });
                }
            }
        }
    }
    let mut states: BTreeMap<(i32, String), Vec<&Op>> = BTreeMap::new();
    for f in &finals {
        let Some((value, version)) = read_result(f) else {
            out.findings.push(Finding {
                kind: FindingKind::FinalReadFailed,
                key: Some(key),
                message: format!(
                    "k{key}: the final read on member {} failed after heal",
                    f.member
                        .map(|m| m.to_string())
                        .unwrap_or_else(|| "?".into())
                ),
                ops: vec![(*f).clone()],
            });
            continue;
        };
        states
            .entry((version, value.to_string()))
            .or_default()
            .push(f);
        for &(wv, wver, w) in &acked {
            let missing = wver > version || (wver == version && wv != value);
            if missing {
                lost.insert(w.id, w);
            }
        }
    }
    let at_end = lost.len() - rolled_back;
    out.acked_lost += lost.len();
    if at_end > 0 {
        let mut shown: Vec<Op> = lost.values().map(|o| (*o).clone()).take(5).collect();
        shown.extend(finals.iter().map(|o| (*o).clone()));
        out.findings.push(Finding {
            kind: FindingKind::AckedLost,
            key: Some(key),
            message: format!(
                "k{key}: {at_end} acknowledged write(s) missing from the final state of some member"
            ),
            ops: shown,
        });
    }
    if states.len() > 1 {
        out.findings.push(Finding {
            kind: FindingKind::Divergence,
            key: Some(key),
            message: format!(
                "k{key}: members disagree after heal: {}",
                states
                    .keys()
                    .map(|(ver, v)| format!("{v:?} v={ver}"))
                    .collect::<Vec<_>>()
                    .join(" / ")
            ),
            ops: finals.iter().map(|o| (*o).clone()).collect(),
        });
    }
}

/// Within a session, reply zxids never decrease (ZooKeeper refuses a
/// reconnect to a member behind the session's last seen zxid).
fn zxids(ops: &[Op], out: &mut Direct) {
    let mut by_session: HashMap<i64, Vec<&Op>> = HashMap::new();
    for op in ops {
        if op.session != 0 && op.zxid.is_some() && op.complete != NEVER {
            by_session.entry(op.session).or_default().push(op);
        }
    }
    let mut sessions: Vec<_> = by_session.into_iter().collect();
    sessions.sort_by_key(|(s, _)| *s);
    for (session, mut list) in sessions {
        list.sort_by_key(|o| (o.complete, o.id));
        let mut high: Option<&Op> = None;
        for op in list {
            let z = op.zxid.unwrap_or(0);
            match high {
                Some(h) if z < h.zxid.unwrap_or(0) => {
                    out.findings.push(Finding {
                        kind: FindingKind::ZxidBackwards,
                        key: op.call.key(),
                        message: format!(
                            "session {session:#x}: reply zxid {z:#x} after {:#x}",
                            h.zxid.unwrap_or(0)
                        ),
                        ops: vec![h.clone(), op.clone()],
                    });
                }
                Some(h) if h.zxid >= op.zxid => {}
                _ => high = Some(op),
            }
        }
    }
}

/// An ephemeral is visible iff its session is alive (and it was created and
/// not deleted): checked on every ok sync+getChildren.
fn ephemerals(ops: &[Op], out: &mut Direct) {
    // When each session is known dead: closed ok, or a resume answered expired.
    let mut dead_at: HashMap<i64, (Time, &Op)> = HashMap::new();
    // The latest invocation of an ok op of each session (alive at or after it).
    let mut alive_after: HashMap<i64, Time> = HashMap::new();
    for op in ops {
        let died = match (&op.call, &op.outcome) {
            (Call::Close, Outcome::Ok(_)) => Some((op.session, op.complete)),
            (Call::Connect { resume }, Outcome::Fail { error }) if error == "SESSIONEXPIRED" => {
                Some((*resume, op.complete))
            }
            _ => None,
        };
        if let Some((session, t)) = died {
            let e = dead_at.entry(session).or_insert((t, op));
            if t < e.0 {
                *e = (t, op);
            }
        }
        if op.outcome.is_ok() && op.session != 0 && !matches!(op.call, Call::Close) {
            let a = alive_after.entry(op.session).or_insert(op.invoke);
            *a = (*a).max(op.invoke);
        }
    }
    // Each ephemeral: its create and (first) delete.
    let mut created: HashMap<&str, &Op> = HashMap::new();
    let mut deleted: HashMap<&str, &Op> = HashMap::new();
    for op in ops {
        match &op.call {
            Call::CreateEphemeral { name } => {
                created.insert(name, op);
            }
            Call::DeleteEphemeral { name } if !matches!(op.outcome, Outcome::Fail { .. }) => {
                let d = deleted.entry(name).or_insert(op);
                if op.invoke < d.invoke {
                    *d = op;
                }
            }
            _ => {}
        }
    }
    let mut reported = 0;
    let mut report = |f: Finding, out: &mut Direct| {
        reported += 1;
        if reported <= 20 {
            out.findings.push(f);
        }
    };
    for list in ops {
        let (Call::SyncList, Outcome::Ok(Ret::Names { names })) = (&list.call, &list.outcome)
        else {
            continue;
        };
        for name in names {
            let Some(c) = created.get(name.as_str()) else {
                report(
                    Finding {
                        kind: FindingKind::NeverWritten,
                        key: None,
                        message: format!("ephemeral {name} listed but never created"),
                        ops: vec![list.clone()],
                    },
                    out,
                );
                continue;
            };
            if matches!(c.outcome, Outcome::Fail { .. }) || c.invoke > list.complete {
                report(
                    Finding {
                        kind: FindingKind::NeverWritten,
                        key: None,
                        message: format!(
                            "ephemeral {name} listed but its create failed or came later"
                        ),
                        ops: vec![(*c).clone(), list.clone()],
                    },
                    out,
                );
                continue;
            }
            if let Some(&(t, death)) = dead_at.get(&c.session) {
                if t < list.invoke {
                    report(
                        Finding {
                            kind: FindingKind::EphemeralOutlived,
                            key: None,
                            message: format!(
                                "ephemeral {name} listed after its session {:#x} ended",
                                c.session
                            ),
                            ops: vec![(*c).clone(), death.clone(), list.clone()],
                        },
                        out,
                    );
                    continue;
                }
            }
            if let Some(d) = deleted.get(name.as_str()) {
                if d.outcome.is_ok() && d.complete < list.invoke {
                    report(
                        Finding {
                            kind: FindingKind::EphemeralOutlived,
                            key: None,
                            message: format!(
                                "ephemeral {name} listed after its delete was acknowledged"
                            ),
                            ops: vec![(*d).clone(), list.clone()],
                        },
                        out,
                    );
                }
            }
        }
        for (name, c) in &created {
            if !c.outcome.is_ok() || c.complete >= list.invoke || names.iter().any(|n| n == name) {
                continue;
            }
            if deleted.get(name).is_some_and(|d| d.invoke <= list.complete) {
                continue;
            }
            let alive = alive_after
                .get(&c.session)
                .is_some_and(|&t| t > list.complete);
            if !alive {
                continue;
            }
            report(
                Finding {
                    kind: FindingKind::EphemeralMissing,
                    key: None,
                    message: format!(
                        "ephemeral {name} missing while its session {:#x} was alive",
                        c.session
                    ),
                    ops: vec![(*c).clone(), list.clone()],
                },
                out,
            );
        }
    }
}

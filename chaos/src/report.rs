//! The run's report: operations by result, availability per phase, anomalies
//! with their shortest sub-histories, acknowledged writes lost, leader
//! failover times, and one JSON line for machines.

use std::collections::BTreeMap;

use serde_json::json;

use crate::nemesis::Timeline;
use rzk_chaos::check::Analysis;
use rzk_chaos::history::{Call, Op, Outcome, Time, FINAL_PROCESS};

/// Counts of one group of operations.
#[derive(Clone, Copy, Debug, Default)]
pub struct Counts {
    /// Acknowledged.
    pub ok: u64,
    /// Definitely failed with a server error (BADVERSION, NODEEXISTS, ...).
    pub fail: u64,
    /// Not sent: no member could be reached.
    pub unavailable: u64,
    /// Outcome unknown.
    pub info: u64,
}

impl Counts {
    fn add(&mut self, op: &Op) {
        match &op.outcome {
            Outcome::Ok(_) => self.ok += 1,
            Outcome::Info { .. } => self.info += 1,
            Outcome::Fail { .. } if op.outcome.server_error().is_some() => self.fail += 1,
            Outcome::Fail { .. } => self.unavailable += 1,
        }
    }

    /// All of them.
    pub fn total(&self) -> u64 {
        self.ok + self.fail + self.unavailable + self.info
    }

    /// Share of operations the ensemble answered (ok or a definite error).
    pub fn availability(&self) -> f64 {
        if self.total() == 0 {
            return 1.0;
        }
        (self.ok + self.fail) as f64 / self.total() as f64
    }
}

/// Leader kill to the next acknowledged write invoked after it, in ms.
pub fn failover_ms(ops: &[Op], kills: &[Time]) -> Vec<Option<f64>> {
    kills
        .iter()
        .map(|&k| {
            ops.iter()
                .filter(|o| o.process != FINAL_PROCESS && o.invoke >= k && o.outcome.is_ok())
                .filter(|o| {
                    o.call.is_register_write()
                        || matches!(
                            o.call,
                            Call::CreateEphemeral { .. } | Call::DeleteEphemeral { .. }
                        )
                })
                .map(|o| o.complete)
                .min()
                .map(|c| (c - k) as f64 / 1e6)
        })
        .collect()
}

fn percentile(sorted: &[f64], p: f64) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    // Nearest rank: the smallest value with at least p of the values at or below it.
    let rank = (sorted.len() as f64 * p).ceil().max(1.0) as usize;
    Some(sorted[rank - 1])
}

/// Everything a run reports.
pub struct RunReport<'a> {
    /// The ensemble kind.
    pub server: &'a str,
    /// The seed.
    pub seed: u64,
    /// The schedule's name.
    pub schedule: &'a str,
    /// Seconds of faults.
    pub duration_s: u64,
    /// The history.
    pub ops: &'a [Op],
    /// What the nemesis did.
    pub timeline: &'a Timeline,
    /// What the checker found.
    pub analysis: &'a Analysis,
}

impl RunReport<'_> {
    /// Ops invoked during each fault (by fault name), and outside faults ("quiet").
    pub fn phases(&self) -> BTreeMap<String, Counts> {
        let mut m: BTreeMap<String, Counts> = BTreeMap::new();
        for op in self.ops.iter().filter(|o| {
            o.process != FINAL_PROCESS && !matches!(o.call, Call::Connect { .. } | Call::Close)
        }) {
            let phase = self
                .timeline
                .phases
                .iter()
                .find(|p| op.invoke >= p.start && op.invoke < p.end)
                .map(|p| p.fault.to_string())
                .unwrap_or_else(|| "quiet".into());
            m.entry(phase).or_default().add(op);
            m.entry("all".into()).or_default().add(op);
        }
        m
    }

    /// Ops by call and result.
    pub fn by_call(&self) -> BTreeMap<&'static str, Counts> {
        let mut m: BTreeMap<&'static str, Counts> = BTreeMap::new();
        for op in self.ops.iter().filter(|o| o.process != FINAL_PROCESS) {
            m.entry(op.call.name()).or_default().add(op);
        }
        m
    }

    /// Failover figures: (p50, max, measured kills, kills without a write).
    pub fn failover(&self) -> (Option<f64>, Option<f64>, usize, usize) {
        let all = failover_ms(self.ops, &self.timeline.leader_kills);
        let mut v: Vec<f64> = all.iter().flatten().copied().collect();
        v.sort_by(|a, b| a.total_cmp(b));
        (
            percentile(&v, 0.5),
            v.last().copied(),
            v.len(),
            all.len() - v.len(),
        )
    }

    /// Register writes acknowledged through a member while its disk was full
    /// (invoked during that member's disk-full fault, answered ok).
    pub fn disk_full_writes(&self) -> u64 {
        let mut n = 0;
        for p in self
            .timeline
            .phases
            .iter()
            .filter(|p| p.fault == "disk-full")
        {
            n += self
                .ops
                .iter()
                .filter(|o| o.invoke >= p.start && o.invoke < p.end && o.outcome.is_ok())
                .filter(|o| {
                    o.call.is_register_write() && o.member.is_some_and(|m| p.members.contains(&m))
                })
                .count() as u64;
        }
        n
    }

    /// Whether the run passes: no anomaly, nothing acknowledged lost.
    pub fn passed(&self) -> bool {
        self.analysis.anomalies() == 0 && self.analysis.acked_lost == 0
    }

    /// The human-readable report.
    pub fn text(&self, findings_max: usize) -> String {
        let mut s = String::new();
        s.push_str(&format!(
            "rzk-chaos: {} seed={} schedule={} duration={}s: {}\n",
            self.server,
            self.seed,
            self.schedule,
            self.duration_s,
            if self.passed() { "PASS" } else { "FAIL" }
        ));
        s.push_str("operations        ok   fail  unavail  unknown\n");
        for (name, c) in self.by_call() {
            s.push_str(&format!(
                "  {name:<16}{:>6} {:>6} {:>8} {:>8}\n",
                c.ok, c.fail, c.unavailable, c.info
            ));
        }
        s.push_str("availability (answered / all, by the fault active at invocation)\n");
        for (phase, c) in self.phases() {
            s.push_str(&format!(
                "  {phase:<24}{:>7.2}% of {}\n",
                100.0 * c.availability(),
                c.total()
            ));
        }
        let (p50, max, n, missing) = self.failover();
        s.push_str(&format!(
            "leader kill -> next acknowledged write: p50 {} ms, max {} ms over {n} kills{}\n",
            p50.map(|v| format!("{v:.0}")).unwrap_or("-".into()),
            max.map(|v| format!("{v:.0}")).unwrap_or("-".into()),
            if missing > 0 {
                format!(" ({missing} kills with no write after them)")
            } else {
                String::new()
            }
        ));
        s.push_str(&format!(
            "checker: {} registers, {} linearizable; {} acknowledged writes, {} lost; {} anomalies\n",
            self.analysis.keys_checked,
            self.analysis.keys_linearizable,
            self.analysis.acked_writes,
            self.analysis.acked_lost,
            self.analysis.anomalies()
        ));
        for (kind, n) in self.analysis.by_kind() {
            s.push_str(&format!("  {kind:?}: {n}\n"));
        }
        for f in self.analysis.findings.iter().take(findings_max) {
            s.push_str(&f.describe());
            s.push('\n');
        }
        for p in &self.timeline.phases {
            s.push_str(&format!(
                "  fault {:<22} members {:?} [{:.1}s, {:.1}s]\n",
                p.fault,
                p.members,
                p.start as f64 / 1e9,
                p.end as f64 / 1e9
            ));
        }
        if self.timeline.phases.iter().any(|p| p.fault == "disk-full") {
            s.push_str(&format!(
                "  disk full: {} register writes acknowledged through a member while its disk was full\n",
                self.disk_full_writes()
            ));
        }
        for n in &self.timeline.notes {
            s.push_str(&format!("  note: {n}\n"));
        }
        if !self.passed() {
            s.push_str(&format!("replay with --seed {}\n", self.seed));
        }
        s
    }

    /// The one JSON line.
    pub fn json(&self) -> serde_json::Value {
        let counts = |c: &Counts| json!({"ok": c.ok, "fail": c.fail, "unavailable": c.unavailable, "unknown": c.info, "availability": c.availability()});
        let (p50, max, n, missing) = self.failover();
        json!({
            "server": self.server,
            "seed": self.seed,
            "schedule": self.schedule,
            "duration_s": self.duration_s,
            "pass": self.passed(),
            "ops": self.by_call().iter().map(|(k, c)| (k.to_string(), counts(c))).collect::<serde_json::Map<_, _>>(),
            "phases": self.phases().iter().map(|(k, c)| (k.clone(), counts(c))).collect::<serde_json::Map<_, _>>(),
            "anomalies": self.analysis.anomalies(),
            "anomalies_by_kind": self.analysis.by_kind().iter().map(|(k, n)| (serde_json::to_value(k).ok().and_then(|v| v.as_str().map(String::from)).unwrap_or_default(), json!(n))).collect::<serde_json::Map<_, _>>(),
            "acked_writes": self.analysis.acked_writes,
            "acked_lost": self.analysis.acked_lost,
            "registers": self.analysis.keys_checked,
            "registers_linearizable": self.analysis.keys_linearizable,
            "failover_ms": {"p50": p50, "max": max, "kills": n, "kills_without_write": missing,
                "samples": failover_ms(self.ops, &self.timeline.leader_kills)},
            "disk_full_writes_acked_through_full_member": self.disk_full_writes(),
            "faults": self.timeline.phases.len(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rzk_chaos::history::{Outcome, Ret, NEVER};

    fn op(id: u64, invoke_ms: u64, complete_ms: u64, call: Call, ok: bool) -> Op {
        Op {
            id,
            process: 0,
            session: 1,
            member: Some(1),
            invoke: invoke_ms * 1_000_000,
            complete: if ok { complete_ms * 1_000_000 } else { NEVER },
            call,
            outcome: if ok {
                Outcome::Ok(Ret::Version { version: 1 })
            } else {
                Outcome::Info {
                    reason: "lost".into(),
                }
            },
            zxid: None,
        }
    }

    #[test]
    fn failover_is_the_first_acknowledged_write_invoked_after_the_kill() {
        let w = |key| Call::Write {
            key,
            value: "v".into(),
        };
        let ops = vec![
            op(0, 90, 1100, w(1), true), // invoked before the kill: not counted
            op(1, 120, 0, w(1), false),  // unknown: not acknowledged
            op(2, 130, 700, Call::Read { key: 1 }, true), // a read is not a write
            op(3, 140, 900, w(2), true), // the first: 900 - 100 = 800 ms
            op(4, 150, 850, w(2), true), // completes earlier: 750 ms
        ];
        assert_eq!(
            failover_ms(&ops, &[100_000_000, 5_000_000_000]),
            vec![Some(750.0), None]
        );
    }

    #[test]
    fn percentiles_are_nearest_rank() {
        assert_eq!(percentile(&[1.0, 2.0], 0.5), Some(1.0));
        assert_eq!(percentile(&[1.0, 2.0, 3.0], 0.5), Some(2.0));
        assert_eq!(percentile(&[], 0.5), None);
    }
}

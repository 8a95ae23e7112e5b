//! `rzk-chaos summarize`: the side-by-side table of RELIABILITY.md from the
//! JSON report lines of many runs.

use std::collections::BTreeMap;
use std::path::PathBuf;

use anyhow::{Context, Result};
use serde_json::Value;

/// Anomaly columns: (header, kinds counted).
const COLUMNS: [(&str, &[&str]); 6] = [
    (
        "linearizability",
        &["not-linearizable", "never-written", "version-conflict"],
    ),
    ("sync+read stale", &["stale-read-after-sync"]),
    ("session order", &["session-went-back", "zxid-backwards"]),
    ("ephemerals", &["ephemeral-outlived", "ephemeral-missing"]),
    (
        "final state",
        &["acked-lost", "divergence", "final-read-failed"],
    ),
    ("undecided", &["undecided"]),
];

#[derive(Default)]
struct Row {
    runs: u64,
    seconds: u64,
    ops: u64,
    answered: u64,
    fault_ops: u64,
    fault_answered: u64,
    anomalies: BTreeMap<&'static str, u64>,
    acked: u64,
    lost: u64,
    failover: Vec<f64>,
    kills_without_write: u64,
    passed: u64,
}

fn counts(v: &Value) -> (u64, u64) {
    let g = |k: &str| v.get(k).and_then(Value::as_u64).unwrap_or(0);
    let total = g("ok") + g("fail") + g("unavailable") + g("unknown");
    (total, g("ok") + g("fail"))
}

/// Prints the table; returns the exit code.
pub fn summarize(files: &[PathBuf]) -> Result<i32> {
    let mut rows: BTreeMap<String, Row> = BTreeMap::new();
    for f in files {
        let text =
            std::fs::read_to_string(f).with_context(|| format!("reading {}", f.display()))?;
        for (n, line) in text
            .lines()
            .enumerate()
            .filter(|(_, l)| !l.trim().is_empty())
        {
            let v: Value =
                serde_json::from_str(line).with_context(|| format!("{}:{}", f.display(), n + 1))?;
            let key = format!(
                "{} ({})",
                v["server"].as_str().unwrap_or("?"),
                v["schedule"].as_str().unwrap_or("?")
            );
            let row = rows.entry(key).or_default();
            row.runs += 1;
            row.seconds += v["duration_s"].as_u64().unwrap_or(0);
            row.passed += u64::from(v["pass"].as_bool().unwrap_or(false));
            if let Some(phases) = v["phases"].as_object() {
                for (name, c) in phases {
                    let (total, answered) = counts(c);
                    if name == "all" {
                        row.ops += total;
                        row.answered += answered;
                    } else if name != "quiet" {
                        row.fault_ops += total;
                        row.fault_answered += answered;
                    }
                }
            }
            for (header, kinds) in COLUMNS {
                let n: u64 = kinds
                    .iter()
                    .map(|k| v["anomalies_by_kind"][*k].as_u64().unwrap_or(0))
                    .sum();
                *row.anomalies.entry(header).or_insert(0) += n;
            }
            row.acked += v["acked_writes"].as_u64().unwrap_or(0);
            row.lost += v["acked_lost"].as_u64().unwrap_or(0);
            for s in v["failover_ms"]["samples"].as_array().into_iter().flatten() {
                match s.as_f64() {
                    Some(ms) => row.failover.push(ms),
                    None => row.kills_without_write += 1,
                }
            }
        }
    }
    let pct = |a: u64, t: u64| {
        if t == 0 {
            "-".to_string()
        } else {
            format!("{:.2} %", 100.0 * a as f64 / t as f64)
        }
    };
    print!("| server (schedule) | runs (passed) | seconds | operations | availability | during faults |");
    for (h, _) in COLUMNS {
        print!(" {h} |");
    }
    println!(" acknowledged writes | lost | failover p50 / max (kills) |");
    print!("|---|---|---|---|---|---|");
    for _ in COLUMNS {
        print!("---|");
    }
    println!("---|---|---|");
    for (key, mut r) in rows {
        r.failover.sort_by(|a, b| a.total_cmp(b));
        let failover = if r.failover.is_empty() {
            "-".to_string()
        } else {
            let rank = (r.failover.len() as f64 * 0.5).ceil().max(1.0) as usize;
            format!(
                "{:.0} / {:.0} ms ({}{})",
                r.failover[rank - 1],
                r.failover[r.failover.len() - 1],
                r.failover.len(),
                if r.kills_without_write > 0 {
                    format!(", {} without a write", r.kills_without_write)
                } else {
                    String::new()
                }
            )
        };
        print!(
            "| {key} | {} ({}) | {} | {} | {} | {} |",
            r.runs,
            r.passed,
            r.seconds,
            r.ops,
            pct(r.answered, r.ops),
            pct(r.fault_answered, r.fault_ops)
        );
        for (h, _) in COLUMNS {
            print!(" {} |", r.anomalies.get(h).copied().unwrap_or(0));
        }
        println!(" {} | {} | {failover} |", r.acked, r.lost);
    }
    Ok(0)
}

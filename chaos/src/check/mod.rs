//! The checker: decides what a recorded history says about the ensemble.
//!
//! - **Linearizability** of each register ([`linear`]): writes, CAS and
//!   sync+read, indeterminate operations optional, with a budget and an
//!   explicit "could not decide".
//! - **Direct findings** ([`direct`]), each cheaper and more specific than the
//!   search: stale reads after `sync` (I6b), plain reads going backwards for
//!   their session, reads of values never written, two values for one
//!   version, acknowledged writes missing from the final state or members that
//!   disagree at the end, zxids going backwards within a session, ephemerals
//!   outliving their session or missing while it lives.

pub mod direct;
pub mod linear;

use std::collections::BTreeMap;

use serde::Serialize;

use crate::history::Op;
pub use linear::{Budget, Verdict};

/// What kind of anomaly a finding is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum FindingKind {
    /// A register's history has no linearization.
    NotLinearizable,
    /// The search ran out of budget for a register ("could not decide").
    Undecided,
    /// A read after `sync` returned an older version than one already
    /// acknowledged or read before the sync began (I6b).
    StaleReadAfterSync,
    /// A plain read returned an older version than its own session had
    /// already seen (ZooKeeper's per-session ordering).
    SessionWentBack,
    /// A read returned a value no write ever carried (or one whose write
    /// definitely failed, or was invoked only after the read completed).
    NeverWritten,
    /// Two different values were seen with the same version.
    VersionConflict,
    /// An acknowledged write is missing from a member's final state.
    AckedLost,
    /// Members disagree on a register's final state.
    Divergence,
    /// A member could not be read once faults stopped and the ensemble healed.
    FinalReadFailed,
    /// A reply carried a lower zxid than an earlier reply of the same session.
    ZxidBackwards,
    /// An ephemeral was visible after its session ended (or after its delete).
    EphemeralOutlived,
    /// An ephemeral was missing while its session was alive.
    EphemeralMissing,
}

impl FindingKind {
    /// True for every kind except [`FindingKind::Undecided`].
    pub fn is_anomaly(self) -> bool {
        self != FindingKind::Undecided
    }
}

/// Ops of a finding printed by [`Finding::describe`].
pub const DESCRIBE_OPS_MAX: usize = 40;

/// One thing the checker found, with the shortest sub-history that shows it.
#[derive(Clone, Debug, Serialize)]
pub struct Finding {
    /// The kind.
    pub kind: FindingKind,
    /// The register, if the finding is about one.
    pub key: Option<u32>,
    /// One sentence.
    pub message: String,
    /// The offending sub-history.
    pub ops: Vec<Op>,
}

impl Finding {
    /// The finding with its sub-history, one op per line (at most
    /// [`DESCRIBE_OPS_MAX`]; the JSON history has them all).
    pub fn describe(&self) -> String {
        let mut s = format!("{:?}: {}", self.kind, self.message);
        for op in self.ops.iter().take(DESCRIBE_OPS_MAX) {
            s.push_str("\n    ");
            s.push_str(&op.describe());
        }
        if self.ops.len() > DESCRIBE_OPS_MAX {
            s.push_str(&format!(
                "\n    ... {} more ops",
                self.ops.len() - DESCRIBE_OPS_MAX
            ));
        }
        s
    }
}

/// Everything the checker concluded.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Analysis {
    /// All findings, anomalies first by kind.
    pub findings: Vec<Finding>,
    /// Registers whose history was searched.
    pub keys_checked: usize,
    /// Registers found linearizable.
    pub keys_linearizable: usize,
    /// Acknowledged writes missing from some member's final state.
    pub acked_lost: usize,
    /// Acknowledged register writes in the history.
    pub acked_writes: usize,
}

impl Analysis {
    /// Number of anomalies (findings other than "could not decide").
    pub fn anomalies(&self) -> usize {
        self.findings.iter().filter(|f| f.kind.is_anomaly()).count()
    }

    /// Anomalies by kind, for the report.
    pub fn by_kind(&self) -> BTreeMap<FindingKind, usize> {
        let mut m = BTreeMap::new();
        for f in &self.findings {
            *m.entry(f.kind).or_insert(0) += 1;
        }
        m
    }
}

/// Runs every check on `ops`.
pub fn analyze(ops: &[Op], budget: Budget) -> Analysis {
    let mut analysis = Analysis::default();
    let mut by_key: BTreeMap<u32, Vec<&Op>> = BTreeMap::new();
    for op in ops {
        if let Some(key) = op.call.key() {
            by_key.entry(key).or_default().push(op);
        }
    }
    for (&key, key_ops) in &by_key {
        let history = linear::KeyHistory::build(key_ops);
        analysis.keys_checked += 1;
        let result = linear::check_key(&history, budget);
        match result.verdict {
            Verdict::Linearizable => analysis.keys_linearizable += 1,
            Verdict::NotLinearizable => analysis.findings.push(Finding {
                kind: FindingKind::NotLinearizable,
                key: Some(key),
                message: format!(
                    "register k{key} ({} ops checked) has no linearization; shortest window found: {} ops",
                    history.ops.len(),
                    result.window.len()
                ),
                ops: result
                    .window
                    .iter()
                    .map(|&i| history.sources[i].clone())
                    .collect(),
            }),
            Verdict::Undecided { why } => analysis.findings.push(Finding {
                kind: FindingKind::Undecided,
                key: Some(key),
                message: format!("could not decide register k{key}: {why}"),
                ops: Vec::new(),
            }),
        }
    }
    let direct = direct::check(ops);
    analysis.acked_lost = direct.acked_lost;
    analysis.acked_writes = direct.acked_writes;
    analysis.findings.extend(direct.findings);
    analysis.findings.sort_by_key(|f| (f.kind, f.key));
    analysis
}

#[cfg(test)]
mod selftest;

//! Snapshots of the state machine, written in steps between other work
//! (copy-on-write, so writes go on while it is written) and handed to the
//! replicator, which makes them durable and purges the history they cover.

use crate::core::{snapshot_trigger, Core};
use crate::tree::SessionRecord;

/// Nodes a snapshot writes per step when the core is otherwise idle.
const SNAPSHOT_STEP_NODES: usize = 4096;
/// Nodes a snapshot writes per applied txn, so that it finishes under a
/// load that never leaves the core idle.
const SNAPSHOT_NODES_PER_TXN: usize = 64;

impl Core {
    /// After each applied txn: a snapshot in progress moves on with the
    /// writes (not only when idle), and a new one starts every
    /// `snapshot_after_txns` txns.
    pub(crate) fn after_apply(&mut self) {
        if self.tree.snapshot_in_progress() {
            self.snapshot_step_nodes(SNAPSHOT_NODES_PER_TXN);
        }
        self.txns_since_snapshot += 1;
        if self.txns_since_snapshot >= self.snapshot_after_txns && !self.tree.snapshot_in_progress()
        {
            self.begin_snapshot();
        }
    }

    fn session_records(&self) -> Vec<SessionRecord> {
        self.sessions
            .iter()
            .map(|(id, s)| SessionRecord {
                id: *id,
                timeout_ms: s.timeout_ms,
                password: s.password,
            })
            .collect()
    }

    fn begin_snapshot(&mut self) {
        let sessions = self.session_records();
        if self.tree.begin_snapshot(self.applied, &sessions) {
            tracing::info!(zxid = %self.applied, nodes = self.tree.node_count(), "snapshot started");
            self.txns_since_snapshot = 0;
            self.snapshot_after_txns = snapshot_trigger(self.cfg.server.snap_count);
        }
    }

    pub(crate) fn snapshot_step(&mut self) {
        self.snapshot_step_nodes(SNAPSHOT_STEP_NODES);
    }

    fn snapshot_step_nodes(&mut self, budget: usize) {
        if let Some((zxid, data)) = self.tree.snapshot_step(budget) {
            tracing::info!(%zxid, bytes = data.len(), "snapshot written; saving");
            self.snapshot_saves
                .push(self.replicator.save_snapshot(zxid, data));
            self.tree.collect_acl_garbage();
        }
    }
}

//! Snapshots of the state machine, written in steps between other work
//! (copy-on-write, so writes go on while it is written) and handed to the
//! replicator, which makes them durable and purges the history they cover.

use bytes::Bytes;
use rzk_quorum::{Proposal, ReplicateError, SnapshotWriteError, SnapshotWriter};
use tokio::sync::mpsc;

use crate::core::{snapshot_trigger, Core, Serving};
use crate::tree::{DataTree, SessionRecord};

/// Nodes a snapshot writes per step when the core is otherwise idle. Small,
/// because a request that arrives during a step waits for it: at 1 request in
/// flight per session every such wait is lost throughput (4096 nodes, about a
/// millisecond, cost creates a quarter of their rate while snapshots ran;
/// BENCHMARKS.md, "rzk-server restart and snapshots").
const SNAPSHOT_STEP_NODES: usize = 256;
/// Nodes a snapshot writes per applied txn, so that it finishes under a
/// load that never leaves the core idle.
const SNAPSHOT_NODES_PER_TXN: usize = 64;
/// The snapshot leaves the tree in chunks of about this size.
const SNAPSHOT_CHUNK_BYTES: usize = 1 << 20;
/// Chunks queued between the core and the task that feeds the replicator's
/// writer. The core takes output from the tree only while there is room, so
/// the snapshot in memory is about this many chunks plus what the tree
/// produced while the writer was behind; never the whole state in one buffer.
const SNAPSHOT_CHUNKS_QUEUED_MAX: usize = 4;

/// A chunk of the snapshot in progress; `last` ends it.
struct Chunk {
    data: Bytes,
    last: bool,
}

/// The core's end of the snapshot being streamed to the replicator.
pub(crate) struct SnapshotStream {
    chunks: mpsc::Sender<Chunk>,
}

impl Core {
    /// After each applied txn: a snapshot in progress moves on with the
    /// writes (not only when idle), and a new one starts every
    /// `snapshot_after_txns` txns, once the member serves.
    ///
    /// Not before: while the log is replayed at start-up (or a learner applies
    /// its sync) the history is already durable in the log, and a snapshot
    /// begun then would only slow the replay, and so the first answered
    /// read, by serialising the tree beside it. The count goes on, so the
    /// first txn applied while serving begins the snapshot that is due.
    pub(crate) fn after_apply(&mut self) {
        if self.tree.snapshot_in_progress() {
            self.snapshot_step_nodes(SNAPSHOT_NODES_PER_TXN);
        }
        self.txns_since_snapshot += 1;
        if self.txns_since_snapshot >= self.snapshot_after_txns
            && !self.tree.snapshot_in_progress()
            && self.serving != Serving::No
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
        if !self.tree.begin_snapshot(self.applied, &sessions) {
            return;
        }
        tracing::info!(zxid = %self.applied, nodes = self.tree.node_count(), "snapshot started");
        self.txns_since_snapshot = 0;
        self.snapshot_after_txns = snapshot_trigger(self.cfg.server.snap_count);
        let (stream, saved) = SnapshotStream::start(self.replicator.snapshot_writer(self.applied));
        self.snapshot_saves.push(saved);
        self.snapshot_out = Some(stream);
    }

    /// Drops the stream of a snapshot still being serialised, so its save ends
    /// (with `Shutdown`) instead of waiting for steps that will not come. True if
    /// there was one.
    pub(crate) fn abandon_snapshot(&mut self) -> bool {
        self.snapshot_out.take().is_some()
    }

    pub(crate) fn snapshot_step(&mut self) {
        self.snapshot_step_nodes(SNAPSHOT_STEP_NODES);
    }

    fn snapshot_step_nodes(&mut self, budget: usize) {
        if stream_step(
            &mut self.tree,
            &mut self.snapshot_out,
            budget,
            SNAPSHOT_CHUNK_BYTES,
        ) {
            self.tree.collect_acl_garbage();
        }
    }
}

impl SnapshotStream {
    /// Starts feeding `writer` from a task; the proposal resolves when the
    /// snapshot is saved (or failed).
    fn start(writer: SnapshotWriter) -> (SnapshotStream, Proposal) {
        let (tx, rx) = mpsc::channel(SNAPSHOT_CHUNKS_QUEUED_MAX);
        let (done_tx, done_rx) = tokio::sync::oneshot::channel();
        tokio::spawn(async move {
            let _ = done_tx.send(write_chunks(writer, rx).await);
        });
        (SnapshotStream { chunks: tx }, Proposal::new(done_rx))
    }
}

/// Writes up to `budget` nodes of the tree's snapshot in progress and hands
/// what it produced to `out` in chunks of about `chunk_bytes`, while the queue
/// has room. True when the snapshot is complete (its last chunk is on its way
/// and `out` is `None`).
fn stream_step(
    tree: &mut DataTree,
    out: &mut Option<SnapshotStream>,
    budget: usize,
    chunk_bytes: usize,
) -> bool {
    let Some(stream) = out.as_ref() else {
        // No stream (a snapshot loaded meanwhile replaced the tree).
        return false;
    };
    let room = stream.chunks.capacity() > 0;
    if let Some((zxid, rest)) = tree.snapshot_step(budget) {
        tracing::info!(%zxid, "snapshot written; saving");
        let chunks = out.take().expect("checked above").chunks;
        // The last chunk may have to wait for room; the core does not.
        tokio::spawn(async move {
            let _ = chunks
                .send(Chunk {
                    data: rest,
                    last: true,
                })
                .await;
        });
        return true;
    }
    if !room {
        return false;
    }
    if let Some(data) = tree.take_snapshot_output(chunk_bytes) {
        if stream.chunks.try_send(Chunk { data, last: false }).is_err() {
            // Room was checked and only the core sends: the writer task is
            // gone (the replicator failed). Its result says why; this
            // snapshot is dropped.
            *out = None;
        }
    }
    false
}

/// Feeds the replicator's writer in order and finishes it on the last chunk.
/// A stream that ends without its last chunk (the tree was replaced by a
/// loaded snapshot) drops the writer, which aborts the snapshot.
async fn write_chunks(
    mut writer: SnapshotWriter,
    mut chunks: mpsc::Receiver<Chunk>,
) -> Result<rzk_zxid::Zxid, ReplicateError> {
    while let Some(Chunk { mut data, last }) = chunks.recv().await {
        loop {
            match writer.try_write(data) {
                Ok(()) => break,
                Err(SnapshotWriteError::Full(back)) => {
                    data = back;
                    writer.ready().await;
                }
                Err(SnapshotWriteError::Failed(e)) => return Err(e),
            }
        }
        if last {
            return writer.finish().await;
        }
    }
    Err(ReplicateError::Shutdown)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use bytes::Bytes;
    use rzk_quorum::core::Config;
    use rzk_quorum::storage::MemStorage;
    use rzk_quorum::transport::MemNetwork;
    use rzk_quorum::{Committed, DriverConfig, PeerId, Replicator, ZabReplicator};
    use rzk_wire::Acl;
    use rzk_zxid::Zxid;

    use super::*;

    fn tree_of(nodes: usize) -> DataTree {
        let mut t = DataTree::new();
        for i in 0..nodes {
            let path = format!("/n{i:05}");
            let acl = Acl::open_unsafe();
            t.create(
                &path,
                Some(Bytes::from(vec![b'x'; 128])),
                &acl,
                0,
                i as u64 + 1,
                1,
            )
            .unwrap();
        }
        t
    }

    /// A replicator of one voter on in-memory storage, once it leads (so a
    /// snapshot written through it is known to it), with that storage.
    async fn leading_replicator() -> (ZabReplicator, MemStorage) {
        let (transport, inbox) = MemNetwork::new().join(PeerId(1));
        let storage = MemStorage::new();
        let cfg = DriverConfig::new(Config::new(PeerId(1), [PeerId(1)]));
        let rep = ZabReplicator::start(cfg, storage.clone(), transport, inbox)
            .await
            .unwrap();
        let mut commits = rep.take_commits().unwrap();
        while let Some(c) = commits.next().await {
            if matches!(c, Committed::Role { .. }) {
                break;
            }
        }
        (rep, storage)
    }

    /// A snapshot streamed in many small chunks through a bounded queue is
    /// byte for byte the one-buffer snapshot, and loads back into the tree.
    #[tokio::test]
    async fn a_snapshot_streamed_in_chunks_is_the_whole_snapshot() {
        let nodes = 2000;
        let at = Zxid::from_u64(nodes as u64);
        let mut streamed = tree_of(nodes);
        let mut whole = tree_of(nodes);
        assert!(whole.begin_snapshot(at, &[]));
        let (_, expected) = whole.snapshot_step(usize::MAX).expect("done in one step");

        let (rep, storage) = leading_replicator().await;
        assert!(streamed.begin_snapshot(at, &[]));
        let (stream, saved) = SnapshotStream::start(rep.snapshot_writer(at));
        let mut out = Some(stream);
        let mut steps = 0;
        // 10 nodes a step, 512-byte chunks: hundreds of chunks, and the queue
        // is full at times (the task runs only when this one yields).
        while !stream_step(&mut streamed, &mut out, 10, 512) {
            steps += 1;
            assert!(out.is_some(), "the stream was dropped at step {steps}");
            assert!(steps < 10 * nodes, "the snapshot never ends");
            if steps % 7 == 0 {
                tokio::task::yield_now().await;
            }
        }
        let saved = tokio::time::timeout(Duration::from_secs(10), saved)
            .await
            .expect("saved in time");
        assert_eq!(saved.unwrap(), at);
        let (r, data) = storage.snapshot_state().snapshot.expect("a snapshot");
        assert_eq!(r.zxid, at);
        assert!(data.len() > 200 * 512, "{} bytes", data.len());
        // Children are walked in the tree's own order, which two trees built
        // alike need not share: same length, and the same tree once loaded.
        assert_eq!(data.len(), expected.len(), "every byte of the snapshot");
        let (loaded, _, z) = DataTree::load_snapshot(&data).unwrap();
        assert_eq!(z, at);
        assert_eq!(loaded.dump(), whole.dump());
        rep.shutdown().await;
    }

    /// What a graceful stop relies on (`Core::abandon_snapshot`): a snapshot
    /// whose stream is dropped half-way ends its save with `Shutdown` at once
    /// and leaves no snapshot behind, instead of waiting for the rest.
    #[tokio::test]
    async fn an_abandoned_snapshot_stream_ends_its_save() {
        let nodes = 2000;
        let at = Zxid::from_u64(nodes as u64);
        let mut tree = tree_of(nodes);
        let (rep, storage) = leading_replicator().await;
        assert!(tree.begin_snapshot(at, &[]));
        let (stream, saved) = SnapshotStream::start(rep.snapshot_writer(at));
        let mut out = Some(stream);
        for _ in 0..20 {
            assert!(!stream_step(&mut tree, &mut out, 10, 512), "not done yet");
            tokio::task::yield_now().await;
        }
        assert!(tree.snapshot_in_progress());
        drop(out);
        let saved = tokio::time::timeout(Duration::from_secs(10), saved)
            .await
            .expect("the save ends once its stream is dropped");
        assert!(matches!(saved, Err(ReplicateError::Shutdown)), "{saved:?}");
        assert!(storage.snapshot_state().snapshot.is_none());
        rep.shutdown().await;
    }
}

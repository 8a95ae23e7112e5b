//! Snapshots of the state machine, written in steps between other work
//! (copy-on-write, so writes go on while it is written) and handed to the
//! replicator, which makes them durable and purges the history they cover.

use bytes::Bytes;
use rand::Rng;
use rzk_quorum::{Proposal, ReplicateError, SnapshotWriteError, SnapshotWriter};
use rzk_zxid::Zxid;
use tokio::sync::mpsc;

use crate::tree::{DataTree, SessionRecord};

/// Nodes a snapshot writes per step when the core is otherwise idle. Small,
/// because a request that arrives during a step waits for it: at 1 request in
/// flight per session every such wait is lost throughput (4096 nodes, about a
/// millisecond, cost creates a quarter of their rate while snapshots ran;
/// BENCHMARKS.md, "rzk-server restart and snapshots").
const SNAPSHOT_STEP_NODES: usize = 256;
/// Nodes a snapshot owes per applied txn, so that it finishes under a load
/// that never leaves the core idle (at most [`SNAPSHOT_OWED_NODES_MAX`] behind
/// 64 nodes per txn).
const SNAPSHOT_NODES_PER_TXN: usize = 64;
/// The most nodes a snapshot may owe before an applied txn pays them all at
/// once (about a millisecond of serialisation).
///
/// Why owe at all: the nodes were written right after each applied txn, so
/// inside a commit group of 32 txns (32 sessions at 1 in flight) each txn's
/// reply waited for the steps of the txns before it, 32 × 64 nodes (about
/// 0.8 ms) at the group's end, while the core sat idle for most of the log's
/// fdatasync that followed. Owed, they are written in the core's idle steps,
/// after the group's replies; a core that is never idle pays them here.
const SNAPSHOT_OWED_NODES_MAX: usize = 2048;
/// The snapshot leaves the tree in chunks of about this size.
const SNAPSHOT_CHUNK_BYTES: usize = 1 << 20;
/// Chunks queued between the core and the task that feeds the replicator's
/// writer. The core takes output from the tree only while there is room, so
/// the snapshot in memory is about this many chunks plus what the tree
/// produced while the writer was behind; never the whole state in one buffer.
const SNAPSHOT_CHUNKS_QUEUED_MAX: usize = 4;
/// The queue holds one more slot than the chunks it queues: it is kept for
/// the last chunk, so that the core can always end a snapshot without
/// waiting (and without a task of its own to wait in).
pub const SNAPSHOT_QUEUE_SLOTS: usize = SNAPSHOT_CHUNKS_QUEUED_MAX + 1;

/// A chunk of the snapshot in progress; `last` ends it.
#[derive(Debug)]
pub struct Chunk {
    /// The bytes.
    pub data: Bytes,
    /// Whether it is the last.
    pub last: bool,
}

/// The core's end of the snapshot being streamed to the replicator.
pub(crate) struct SnapshotStream {
    chunks: mpsc::Sender<Chunk>,
    /// How many nodes to write when.
    pace: SnapshotPace,
}

/// When the core writes the nodes of a snapshot in progress: each applied
/// txn owes [`SNAPSHOT_NODES_PER_TXN`], paid by the steps the core takes when
/// it is idle ([`SNAPSHOT_STEP_NODES`] each), or at once by the applied txn
/// that brings the debt to [`SNAPSHOT_OWED_NODES_MAX`].
#[derive(Debug, Default)]
pub(crate) struct SnapshotPace {
    owed: usize,
}

impl SnapshotPace {
    /// After an applied txn: the nodes to write now. None until the debt is
    /// at its maximum, then the maximum; none while the writer has no `room`
    /// (the debt waits for it: the core does not serialise ahead of the disk).
    pub(crate) fn applied(&mut self, room: bool) -> usize {
        self.owed += SNAPSHOT_NODES_PER_TXN;
        if self.owed < SNAPSHOT_OWED_NODES_MAX || !room {
            return 0;
        }
        self.owed -= SNAPSHOT_OWED_NODES_MAX;
        SNAPSHOT_OWED_NODES_MAX
    }

    /// When the core is idle: the nodes of one step, which pay the debt.
    pub(crate) fn idle(&mut self) -> usize {
        self.owed = self.owed.saturating_sub(SNAPSHOT_STEP_NODES);
        SNAPSHOT_STEP_NODES
    }
}

/// When the next snapshot starts, in applied txns: as ZooKeeper does,
/// snapCount/2 plus a random share of snapCount/2, so that the members of an
/// ensemble (which apply the same txns) do not all snapshot at once.
pub(crate) fn snapshot_trigger(snap_count: u64, rng: &mut impl Rng) -> u64 {
    let half = snap_count / 2;
    (half + rng.random_range(0..=snap_count - half)).max(1)
}

/// The snapshot stage: when the next snapshot begins, and the one in
/// progress, streamed in steps to the replicator's writer.
pub(crate) struct Snapshots {
    snap_count: u64,
    txns_since: u64,
    /// Applied txns after which the next snapshot starts: between half of
    /// snapCount and snapCount, drawn again after each snapshot.
    after_txns: u64,
    /// The snapshot in progress, streamed in chunks to the replicator's
    /// writer; `None` before its stream is handed over, or when there is none.
    out: Option<SnapshotStream>,
}

impl Snapshots {
    /// A snapshot every `snap_count` applied txns (or so: see
    /// [`snapshot_trigger`]).
    pub(crate) fn new(snap_count: u64, rng: &mut impl Rng) -> Snapshots {
        Snapshots {
            snap_count,
            txns_since: 0,
            after_txns: snapshot_trigger(snap_count, rng),
            out: None,
        }
    }

    /// After each applied txn: a snapshot in progress moves on with the
    /// writes (not only when idle); true when a new one is due.
    ///
    /// Not due before the member serves: while the log is replayed at
    /// start-up (or a learner applies its sync) the history is already
    /// durable in the log, and a snapshot begun then would only slow the
    /// replay, and so the first answered read, by serialising the tree beside
    /// it. The count goes on, so the first txn applied while serving begins
    /// the snapshot that is due.
    pub(crate) fn after_apply(&mut self, tree: &mut DataTree, serving: bool) -> bool {
        if tree.snapshot_in_progress() {
            let now = self.out.as_mut().map_or(0, |s| {
                let room = s.has_room();
                s.pace.applied(room)
            });
            if now > 0 {
                self.step(tree, now);
            }
        }
        self.txns_since += 1;
        self.txns_since >= self.after_txns && !tree.snapshot_in_progress() && serving
    }

    /// Begins a snapshot of `tree` at `zxid` with the session table
    /// `sessions`; true if it began (the caller then opens the writer and
    /// hands its stream over with [`Snapshots::set_stream`]).
    pub(crate) fn begin(
        &mut self,
        tree: &mut DataTree,
        zxid: Zxid,
        sessions: &[SessionRecord],
        rng: &mut impl Rng,
    ) -> bool {
        if !tree.begin_snapshot(zxid, sessions) {
            return false;
        }
        tracing::info!(%zxid, nodes = tree.node_count(), "snapshot started");
        self.txns_since = 0;
        self.after_txns = snapshot_trigger(self.snap_count, rng);
        self.out = None;
        true
    }

    /// The stream to the writer of the snapshot just begun.
    pub(crate) fn set_stream(&mut self, stream: SnapshotStream) {
        self.out = Some(stream);
    }

    /// The stream of the snapshot in progress (the shell waits on its room).
    pub(crate) fn stream(&self) -> Option<&SnapshotStream> {
        self.out.as_ref()
    }

    /// Drops the stream of a snapshot still being serialised, so its save ends
    /// (with `Shutdown`) instead of waiting for steps that will not come (or,
    /// when a loaded snapshot replaced the tree, so its writer aborts). True if
    /// there was one.
    pub(crate) fn abandon(&mut self) -> bool {
        self.out.take().is_some()
    }

    /// One step of the snapshot in progress, when the core is idle.
    pub(crate) fn idle_step(&mut self, tree: &mut DataTree) {
        let nodes = self
            .out
            .as_mut()
            .map_or(SNAPSHOT_STEP_NODES, |s| s.pace.idle());
        self.step(tree, nodes);
    }

    fn step(&mut self, tree: &mut DataTree, budget: usize) {
        if stream_step(tree, &mut self.out, budget, SNAPSHOT_CHUNK_BYTES) {
            tree.collect_acl_garbage();
        }
    }
}

/// Resolves when the core may take an idle step of the snapshot in progress:
/// when the queue to its writer has room. While the writer is behind (a slow
/// or busy disk), the core waits here instead of serialising the tree ahead
/// of it into a buffer that grows (and is copied as it grows) without bound.
/// Never, without a stream (its writer failed: there is nothing to write to).
pub(crate) async fn snapshot_room(out: Option<&SnapshotStream>) {
    match out {
        // A closed queue resolves at once; the step then drops the stream.
        // Two slots: one for the step's chunk, one kept for the last chunk.
        Some(s) => drop(s.chunks.reserve_many(2).await),
        None => std::future::pending().await,
    }
}

impl SnapshotStream {
    /// A stream into `chunks`, a queue of [`SNAPSHOT_QUEUE_SLOTS`] (the
    /// simulator's end of a snapshot; the shell uses [`SnapshotStream::start`]).
    pub(crate) fn new(chunks: mpsc::Sender<Chunk>) -> SnapshotStream {
        debug_assert_eq!(chunks.max_capacity(), SNAPSHOT_QUEUE_SLOTS);
        SnapshotStream {
            chunks,
            pace: SnapshotPace::default(),
        }
    }

    /// Whether an ordinary chunk can be queued now (one slot stays free for
    /// the last chunk).
    fn has_room(&self) -> bool {
        self.chunks.capacity() > 1
    }

    /// Starts feeding `writer` from a task; the proposal resolves when the
    /// snapshot is saved (or failed).
    pub(crate) fn start(writer: SnapshotWriter) -> (SnapshotStream, Proposal) {
        let (tx, rx) = mpsc::channel(SNAPSHOT_QUEUE_SLOTS);
        let (done_tx, done_rx) = tokio::sync::oneshot::channel();
        tokio::spawn(async move {
            let _ = done_tx.send(write_chunks(writer, rx).await);
        });
        let stream = SnapshotStream {
            chunks: tx,
            pace: SnapshotPace::default(),
        };
        (stream, Proposal::new(done_rx))
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
    if stream.chunks.is_closed() {
        // The writer task is gone: its save failed (the core logs why when
        // the save resolves). This snapshot can no longer be written; ending
        // it stops the copy-on-write of changed nodes into a buffer nobody
        // takes, and lets the next snapshot begin.
        tree.abort_snapshot();
        *out = None;
        return false;
    }
    if !stream.has_room() {
        // The writer is behind: no step (what it would produce could only
        // wait in memory); the txns' debt waits too.
        return false;
    }
    if let Some((zxid, rest)) = tree.snapshot_step(budget) {
        tracing::info!(%zxid, "snapshot written; saving");
        let chunks = out.take().expect("checked above").chunks;
        // The slot kept for the last chunk is free: ordinary chunks are
        // queued only while two are. It fails only if the writer is gone,
        // whose result says why.
        let _ = chunks.try_send(Chunk {
            data: rest,
            last: true,
        });
        return true;
    }
    if let Some(data) = tree.take_snapshot_output(chunk_bytes) {
        if stream.chunks.try_send(Chunk { data, last: false }).is_err() {
            // Room was checked and only the core sends: the writer task is
            // gone (the replicator failed). Its result says why; this
            // snapshot is dropped.
            tree.abort_snapshot();
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
    use rand::{Rng, SeedableRng};
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
    /// A tree of `nodes` nodes whose snapshot has begun at its last txn, with
    /// the stream to a leading replicator's writer, the save, the replicator
    /// and its storage.
    async fn snapshot_begun(
        nodes: usize,
    ) -> (
        DataTree,
        Option<SnapshotStream>,
        Proposal,
        ZabReplicator,
        MemStorage,
    ) {
        let at = Zxid::from_u64(nodes as u64);
        let mut tree = tree_of(nodes);
        let (rep, storage) = leading_replicator().await;
        assert!(tree.begin_snapshot(at, &[]));
        let (stream, saved) = SnapshotStream::start(rep.snapshot_writer(at));
        (tree, Some(stream), saved, rep, storage)
    }

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

    /// The pace of a snapshot in progress: an applied txn writes nothing
    /// until 2048 nodes are owed, then all of them; idle steps pay the debt;
    /// and however the two mix, the nodes written keep up with 64 per
    /// applied txn to within the debt's maximum (a core that is never idle
    /// still finishes a snapshot).
    #[test]
    fn snapshot_nodes_are_owed_by_txns_and_paid_when_idle_or_at_the_max() {
        let mut p = SnapshotPace::default();
        for _ in 0..(SNAPSHOT_OWED_NODES_MAX / SNAPSHOT_NODES_PER_TXN - 1) {
            assert_eq!(
                p.applied(true),
                0,
                "a txn inside a commit group writes nothing"
            );
        }
        assert_eq!(
            p.applied(true),
            SNAPSHOT_OWED_NODES_MAX,
            "the debt at its max"
        );
        assert_eq!(p.applied(true), 0, "paid");
        assert_eq!(p.idle(), SNAPSHOT_STEP_NODES);
        assert_eq!(p.owed, 0, "an idle step paid the one txn's 64 nodes");
        for _ in 0..(SNAPSHOT_OWED_NODES_MAX / SNAPSHOT_NODES_PER_TXN - 1) {
            assert_eq!(p.applied(true), 0, "an idle step reset the count");
        }

        // No room at the writer: nothing now, the debt waits for room.
        let mut p = SnapshotPace::default();
        for _ in 0..100 {
            assert_eq!(
                p.applied(false),
                0,
                "the core does not serialise ahead of the disk"
            );
        }
        assert_eq!(
            p.applied(true),
            SNAPSHOT_OWED_NODES_MAX,
            "at most the max at once"
        );
        assert_eq!(
            p.owed,
            101 * SNAPSHOT_NODES_PER_TXN - SNAPSHOT_OWED_NODES_MAX
        );

        // Any mix of applied txns and idle steps (seeded): the nodes written
        // never fall more than the maximum behind 64 per txn.
        let seed = 0x5eed_u64;
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
        let mut p = SnapshotPace::default();
        let (mut txns, mut written) = (0usize, 0usize);
        for i in 0..100_000 {
            if rng.random_bool(0.9) {
                txns += 1;
                written += p.applied(true);
            } else {
                written += p.idle();
            }
            assert!(
                written + SNAPSHOT_OWED_NODES_MAX > txns * SNAPSHOT_NODES_PER_TXN,
                "seed {seed:#x}, step {i}: {written} nodes after {txns} txns"
            );
        }
    }

    /// Backpressure: while the writer is behind (its queue full: here its
    /// task never runs, as this test never yields), steps serialise nothing
    /// more, so the snapshot in memory stays at the queued chunks plus less
    /// than a chunk, instead of the rest of the tree.
    #[tokio::test]
    async fn the_core_does_not_serialise_ahead_of_a_writer_that_is_behind() {
        let (mut tree, mut out, saved, rep, _storage) = snapshot_begun(2000).await;
        for step in 0..1000 {
            assert!(!stream_step(&mut tree, &mut out, 10, 512), "step {step}");
        }
        let stream = out.as_ref().expect("the stream is kept");
        assert_eq!(
            stream.chunks.capacity(),
            1,
            "the queue is full but for the slot kept for the last chunk"
        );
        let ahead = tree.take_snapshot_output(0).map_or(0, |b| b.len());
        assert!(
            ahead < 2 * 512,
            "{ahead} bytes serialised ahead of a writer that is behind"
        );
        assert!(tree.snapshot_in_progress());
        drop(out);
        let saved = tokio::time::timeout(Duration::from_secs(10), saved)
            .await
            .expect("the save ends once its stream is dropped");
        assert!(saved.is_err());
        rep.shutdown().await;
    }

    /// A snapshot whose writer is gone (its save failed without stopping the
    /// server) is ended by the next step: nothing is left in progress, so
    /// changed nodes are no longer copied for it and the next snapshot can
    /// begin. Before, the tree kept it in progress forever: no snapshot was
    /// ever taken again and every txn copied nodes into a buffer nobody took.
    #[tokio::test]
    async fn a_snapshot_whose_writer_is_gone_ends_and_the_next_can_begin() {
        let nodes = 2000;
        let at = Zxid::from_u64(nodes as u64);
        let mut tree = tree_of(nodes);
        assert!(tree.begin_snapshot(at, &[]));
        let (tx, rx) = mpsc::channel(SNAPSHOT_QUEUE_SLOTS);
        drop(rx);
        let mut out = Some(SnapshotStream::new(tx));
        assert!(!stream_step(&mut tree, &mut out, 10, 512));
        assert!(
            out.is_none(),
            "the stream of a writer that is gone is dropped"
        );
        assert!(!tree.snapshot_in_progress(), "the snapshot is ended");
        assert!(tree.begin_snapshot(at, &[]), "the next snapshot can begin");
    }

    /// What a graceful stop relies on (`Core::abandon_snapshot`): a snapshot
    /// whose stream is dropped half-way ends its save with `Shutdown` at once
    /// and leaves no snapshot behind, instead of waiting for the rest.
    #[tokio::test]
    async fn an_abandoned_snapshot_stream_ends_its_save() {
        let (mut tree, mut out, saved, rep, storage) = snapshot_begun(2000).await;
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

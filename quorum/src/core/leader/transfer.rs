//! Sync data the leader reads from storage rather than memory, streamed to a
//! learner in bounded pieces: a SNAP's snapshot file in chunks, at most
//! `snap_in_flight_bytes_max` ahead of what the learner has stored, and the
//! entries of a DIFF below the in-memory window, one bounded read at a time.
//! Both end in the tail that `sync` sends from memory.

use rzk_zxid::Zxid;

use super::HPhase;
use crate::core::{Peer, ReadCmd, ReadData, ReadFor, Refusal, SnapRead};
use crate::message::{Entry, LinkId, RejectReason, SessionMsg};
use crate::PeerId;

impl Peer {
    /// Asks storage for the next chunks of a learner's SNAP, up to the
    /// in-flight limit (what is read or sent and not yet stored by the learner).
    pub(super) fn leader_snap_pump(&mut self, id: PeerId) {
        let (chunk, window) = (
            self.cfg.snap_chunk_bytes_max.max(1) as u64,
            self.cfg.snap_in_flight_bytes_max,
        );
        loop {
            let Some(h) = self.ld().learners.get_mut(&id) else {
                return;
            };
            let session = h.session;
            let Some(s) = h.snap.as_mut() else {
                return;
            };
            let size = s.snapshot.size_bytes;
            if s.read >= size || s.read - s.acked >= window {
                return;
            }
            let offset = s.read;
            let len = chunk.min(size - offset);
            s.read += len;
            let cmd = ReadCmd::SnapshotChunk {
                snapshot: s.snapshot,
                offset,
                len: len as usize,
            };
            let read = SnapRead {
                peer: id,
                session,
                offset,
            };
            self.issue_read(ReadFor::Snap(read), cmd);
        }
    }

    /// A chunk of a learner's SNAP came back from storage: chunks go out in
    /// file order; after the last, the rest of the sync.
    pub(in crate::core) fn leader_on_snap_read(
        &mut self,
        read: SnapRead,
        result: Result<ReadData, String>,
    ) {
        let id = read.peer;
        let Some(h) = self.ld().learners.get_mut(&id) else {
            return;
        };
        if h.session != read.session {
            return;
        }
        let Some(s) = h.snap.as_mut() else {
            return;
        };
        let size = s.snapshot.size_bytes;
        let data = match result {
            Ok(ReadData::SnapshotChunk(data)) if !data.is_empty() => data,
            // Our own snapshot cannot be read (the driver logs why): this
            // learner starts over, by then perhaps from a newer snapshot.
            Ok(ReadData::SnapshotChunk(_) | ReadData::Log(_)) | Err(_) => {
                self.drop_learner(id, RejectReason::Protocol);
                return;
            }
        };
        s.ready.insert(read.offset, data);
        let mut out = Vec::new();
        while let Some(data) = s.ready.remove(&s.sent) {
            let offset = s.sent;
            s.sent += data.len() as u64;
            out.push(SessionMsg::SnapChunk { offset, data });
        }
        let done = s.sent >= size;
        let after = s.snapshot.zxid;
        for msg in out {
            self.send_learner(id, msg);
        }
        if !done {
            self.leader_snap_pump(id);
            return;
        }
        if let Some(h) = self.ld().learners.get_mut(&id) {
            h.snap = None;
        }
        if after < self.log_start {
            // Storage purged the entries after this snapshot during the
            // transfer (`leader_drop_snaps_below` drops such a transfer as
            // soon as it learns of it, so this is a safety net): the learner
            // starts over from the newer one.
            self.drop_learner(id, RejectReason::Protocol);
            return;
        }
        // The tail after the snapshot: what the window dropped from memory
        // is read from the durable log in bounded batches, the rest follows
        // from memory (I4), as for a DIFF from disk.
        if after < self.log_base {
            self.window_counts.snap_tails_from_disk += 1;
        }
        self.leader_sync_from(id, after);
    }

    /// Storage purged its log and the available log now starts at `log_start`:
    /// a SNAP transfer of a snapshot below it can no longer end in a sync (the
    /// entries after its snapshot are gone from memory and disk);
    /// `leader_on_snap_read` would drop its learner after the last chunk. It is
    /// dropped now, so the learner starts over from the newest snapshot at once
    /// instead of after sending the rest of the old file in vain. Storage keeps
    /// the log after the *oldest* snapshot it retains (`Input::SnapshotSaved`),
    /// so a transfer survives newer snapshots while its own is retained (a
    /// transfer longer than the leader's snapshot interval used to start over
    /// at every snapshot). `saved` is the snapshot just saved: the transfers of
    /// older ones that go on are counted.
    pub(in crate::core) fn leader_drop_snaps_below(&mut self, log_start: Zxid, saved: Zxid) {
        let stale: Vec<PeerId> = self
            .ld_ref()
            .learners
            .iter()
            .filter(|(_, h)| h.snap.as_ref().is_some_and(|s| s.snapshot.zxid < log_start))
            .map(|(id, _)| *id)
            .collect();
        let outlived = self
            .ld_ref()
            .learners
            .values()
            .filter_map(|h| h.snap.as_ref())
            .filter(|s| s.snapshot.zxid >= log_start && s.snapshot.zxid < saved)
            .count();
        self.window_counts.snaps_outlived_snapshot += outlived as u64;
        for id in stale {
            self.window_counts.snaps_purged += 1;
            self.drop_learner(id, RejectReason::Protocol);
        }
    }

    pub(super) fn leader_diff_read_next(&mut self, id: PeerId) {
        let Some(h) = self.ld_ref().learners.get(&id) else {
            return;
        };
        let (session, after) = (h.session, h.diff_sent);
        let cmd = ReadCmd::Log {
            after,
            entries_max: self.cfg.batch_entries_max.max(1),
            bytes_max: self.cfg.snap_chunk_bytes_max.max(1),
        };
        self.window_counts.log_reads += 1;
        self.issue_read(ReadFor::Diff { peer: id, session }, cmd);
    }

    /// Entries of a DIFF below the window came back from storage: they go to
    /// the learner as PROPOSALs; once the learner's position reaches the
    /// window, the rest of the sync follows from memory.
    pub(in crate::core) fn leader_on_diff_read(
        &mut self,
        id: PeerId,
        session: LinkId,
        result: Result<ReadData, String>,
    ) {
        let Some(h) = self.ld_ref().learners.get(&id) else {
            return;
        };
        if h.session != session || h.phase != HPhase::DiffReading {
            return;
        }
        let (after, observer) = (h.diff_sent, h.observer);
        let entries = match result {
            Ok(ReadData::Log(entries)) => entries,
            // Our own log cannot be read (the driver logs why), or the read
            // came back as something else: this learner starts over.
            Ok(ReadData::SnapshotChunk(_)) | Err(_) => {
                self.drop_learner(id, RejectReason::Protocol);
                return;
            }
        };
        // Only what the window dropped is used (a bounded read may run on
        // into entries still in memory, which may not be committed yet: they
        // follow from memory), and it is applied (committed): the entries
        // must continue the learner's position exactly (I4).
        let base = self.log_base;
        let entries: Vec<Entry> = entries.into_iter().take_while(|e| e.zxid <= base).collect();
        let fits = entries.first().is_some_and(|e| e.zxid.is_next(after))
            && entries.windows(2).all(|w| w[1].zxid.is_next(w[0].zxid))
            && entries.last().is_some_and(|e| e.zxid <= self.applied);
        if !fits {
            // The durable log below the window is not what the core knew (a
            // purge raced the read; the next plan knows of the snapshot that
            // caused it): the learner starts over.
            self.drop_learner(id, RejectReason::Protocol);
            return;
        }
        let last = entries.last().expect("checked non-empty").zxid;
        let end = if observer {
            self.ld_ref().commit
        } else {
            Zxid::from_u64(u64::MAX)
        };
        debug_assert!(last <= end, "what the window dropped is committed");
        for chunk in entries.chunks(self.cfg.batch_entries_max.max(1)) {
            self.send_learner(
                id,
                SessionMsg::Proposal {
                    entries: chunk.to_vec(),
                },
            );
        }
        if let Some(h) = self.ld().learners.get_mut(&id) {
            h.diff_sent = last;
        }
        if last >= self.log_base {
            self.leader_sync_tail(id, last);
        } else {
            self.leader_diff_read_next(id);
        }
    }

    /// The learner stored its SNAP up to `received`: more may be read.
    pub(super) fn leader_on_snap_ack(&mut self, from: PeerId, received: u64) {
        let Some(h) = self.ld().learners.get_mut(&from) else {
            return;
        };
        let Some(s) = h.snap.as_mut() else {
            // The transfer is complete; a late acknowledgement says nothing.
            return;
        };
        if received > s.sent {
            self.refuse_learner(from, "SNAPACK", Refusal::Unexpected);
            return;
        }
        s.acked = s.acked.max(received);
        self.leader_snap_pump(from);
    }
}

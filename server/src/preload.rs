//! The tree loaded from the newest snapshot while the log is recovered.
//!
//! At start-up the replicator opens the log (recovery scans every segment),
//! chooses the newest snapshot whose checksum matches and that the log
//! connects to, reads the log after it, and only then hands the server the
//! snapshot to load. The load is the longest of these steps and needs none
//! of the others, so [`preload`] starts it as soon as the snapshot catalog
//! is read (`rzk_wal::WalOptions::preload`): the tree is decoded on threads
//! of its own (one parses the records, one inserts them: see
//! `DataTree::load_snapshot_split`) from the same pass that checks the
//! file's checksum, which the replicator then uses to choose the snapshot
//! instead of reading the file a second time.
//!
//! The core uses the preloaded tree only for the first snapshot it is told to
//! load, and only if it is that snapshot (same zxid and size); otherwise it
//! drops it and loads as it always did. A snapshot whose checksum fails is
//! never chosen, so a tree decoded from it is never used.

use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::time::Instant;

use rzk_wal::{SnapshotPreload, StateReader};
use rzk_zxid::Zxid;

use crate::read_ahead::ReadAhead;
use crate::tree::{DataTree, SessionRecord};

/// A loaded snapshot: the tree, the sessions it holds and its zxid.
pub(crate) type Loaded = (DataTree, Vec<SessionRecord>, Zxid);

/// What the preload thread reports, in this order.
enum Report {
    /// The snapshot it reads.
    Started { zxid: Zxid, len_bytes: u64 },
    /// The load ended (an error says why, the checksum's included).
    Done {
        /// Boxed: the tree is large and moves through the channel.
        loaded: Result<Box<Loaded>, String>,
        ms: u64,
    },
}

/// The core's end of a preload.
pub(crate) struct Preloaded {
    reports: Receiver<Report>,
}

/// A preload for the wal, and the end the core takes its tree from.
pub(crate) fn preload() -> (SnapshotPreload, Preloaded) {
    // Two reports at most: the thread never waits on the core.
    let (tx, reports) = sync_channel(2);
    let hook = SnapshotPreload::new(move |reader: StateReader| run(reader, &tx));
    (hook, Preloaded { reports })
}

fn run(reader: StateReader, tx: &SyncSender<Report>) {
    let started = Instant::now();
    let zxid = reader.zxid();
    let len_bytes = reader.data_len();
    if tx.send(Report::Started { zxid, len_bytes }).is_err() {
        return; // the core has gone; the wal verifies the file itself
    }
    // The file is read, and its checksum computed, on another thread
    // (crate::read_ahead) while a third parses the records and this one
    // inserts them into the tree (DataTree::load_snapshot_split); the loader
    // reads to the end, where the checksum is checked.
    let loaded = ReadAhead::new(Box::new(reader))
        .map_err(|e| e.to_string())
        .and_then(|mut r| {
            DataTree::load_snapshot_split(&mut r, len_bytes).map_err(|e| e.to_string())
        })
        .map(Box::new);
    let ms = started.elapsed().as_millis() as u64;
    let _ = tx.send(Report::Done { loaded, ms });
}

impl Preloaded {
    /// The tree preloaded from the snapshot at `zxid` of `len_bytes` state
    /// bytes, waiting for its load to end; `None` if the preload read another
    /// snapshot or none at all (then the caller loads the snapshot itself).
    pub(crate) fn take(self, zxid: Zxid, len_bytes: u64) -> Option<Result<Loaded, String>> {
        let Ok(Report::Started {
            zxid: read,
            len_bytes: len,
        }) = self.reports.recv()
        else {
            return None;
        };
        if (read, len) != (zxid, len_bytes) {
            return None;
        }
        match self.reports.recv() {
            Ok(Report::Done { loaded, ms }) => {
                tracing::info!(%zxid, bytes = len_bytes, ms, preloaded = true, "snapshot read, checked and loaded");
                Some(loaded.map(|b| *b))
            }
            Ok(Report::Started { .. }) | Err(_) => None,
        }
    }
}

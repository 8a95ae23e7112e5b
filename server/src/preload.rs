//! The tree loaded from the newest snapshot while the log is recovered.
//!
//! At start-up the replicator opens the log (recovery scans every segment),
//! chooses the newest snapshot whose checksum matches and that the log
//! connects to, reads the log after it, and only then hands the server the
//! snapshot to load. The load is the longest of these steps and needs none
//! of the others, so [`preload`] starts it as soon as the snapshot catalog
//! is read (`rzk_wal::WalOptions::preload`): the tree is decoded on a thread
//! of its own from the same pass that checks the file's checksum, which the
//! replicator then uses to choose the snapshot instead of reading the file
//! a second time.
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
    // The file is read, and its checksum computed, on another thread while
    // this one decodes (crate::read_ahead); the loader reads to the end,
    // where the checksum is checked.
    // The tree is built on a thread started once the heaps grow in large
    // steps (see `heap`): its first allocation makes its arena, whose first
    // heap is then made usable whole too. Only that thread's allocations
    // happen in the window, and what the load freed goes back before the
    // tree is handed over.
    let growth = heap::GrowInLargeSteps::begin();
    let loaded = std::thread::scope(|scope| {
        std::thread::Builder::new()
            .name("rzk-snapshot-load".into())
            .spawn_scoped(scope, move || {
                ReadAhead::new(Box::new(reader))
                    .map_err(|e| e.to_string())
                    .and_then(|mut r| {
                        DataTree::load_snapshot_from(&mut r).map_err(|e| e.to_string())
                    })
                    .map(Box::new)
            })
            .map_err(|e| format!("cannot start the snapshot load's thread: {e}"))
            .and_then(|t| {
                t.join()
                    .unwrap_or_else(|_| Err("the snapshot load panicked".to_owned()))
            })
    });
    drop(growth);
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

/// How the C allocator grows its heaps while the snapshot loads.
///
/// glibc's malloc gives every thread but the main one an arena of its own,
/// made of heaps of at most 64 MiB, and grows a heap's usable part by the
/// bytes an allocation needs, rounded to a page, one `mprotect` each. A load
/// of 1M znodes makes ~1M small allocations on its thread: measured with
/// `strace -f -e mprotect`, 34,494 calls of 4 KiB each (35,800 in the
/// process), about a tenth of the decoding thread's time in `sysmalloc`,
/// `mprotect` and the kernel's VMA updates (`perf record`). With the top pad
/// at 64 MiB (a heap's maximum), a heap is made usable whole when it is
/// created: about 1,100 calls in the process (the pad is set before the
/// loading thread starts, so its first heap is made whole too). The pad is
/// set back afterwards, so memory freed later is given back to the system as
/// before, and `malloc_trim` returns what was freed during the load.
///
/// Not done when `GLIBC_TUNABLES` sets `glibc.malloc.top_pad` (the operator
/// chose one). One lasting effect: glibc stops adapting its mmap threshold
/// once `M_TOP_PAD` is set, so it stays where the process start left it.
/// Another allocator (a `#[global_allocator]`) does not go through this.
///
/// The workspace denies `unsafe`; these two calls are the exception: the
/// setting exists only as a C function, neither call touches memory Rust
/// owns, and the gain is measured (BENCHMARKS.md, "rzk-server restart and
/// snapshots").
#[allow(unsafe_code)]
mod heap {
    /// Sets the top pad for as long as it lives.
    pub(super) struct GrowInLargeSteps {
        /// The pad was set (and is set back on drop).
        pub(super) active: bool,
    }

    /// glibc's heap size limit on 64-bit targets (`HEAP_MAX_SIZE`).
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    const LOAD_TOP_PAD_BYTES: libc::c_int = 64 << 20;
    /// glibc's default top pad (`DEFAULT_TOP_PAD`, mallopt(3)).
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    const DEFAULT_TOP_PAD_BYTES: libc::c_int = 128 << 10;

    impl GrowInLargeSteps {
        pub(super) fn begin() -> GrowInLargeSteps {
            GrowInLargeSteps::begin_unless(std::env::var("GLIBC_TUNABLES").ok().as_deref())
        }

        /// As [`GrowInLargeSteps::begin`], given the value of
        /// `GLIBC_TUNABLES`.
        pub(super) fn begin_unless(tunables: Option<&str>) -> GrowInLargeSteps {
            let chosen = tunables.is_some_and(|t| t.contains("glibc.malloc.top_pad"));
            #[cfg(all(target_os = "linux", target_env = "gnu"))]
            if !chosen {
                // SAFETY: mallopt only sets a parameter of the allocator,
                // under the allocator's own lock.
                let set = unsafe { libc::mallopt(libc::M_TOP_PAD, LOAD_TOP_PAD_BYTES) } == 1;
                return GrowInLargeSteps { active: set };
            }
            let _ = chosen;
            GrowInLargeSteps { active: false }
        }
    }

    impl Drop for GrowInLargeSteps {
        fn drop(&mut self) {
            #[cfg(all(target_os = "linux", target_env = "gnu"))]
            if self.active {
                // SAFETY: as above; malloc_trim only gives free pages back.
                unsafe {
                    libc::mallopt(libc::M_TOP_PAD, DEFAULT_TOP_PAD_BYTES);
                    libc::malloc_trim(0);
                }
            }
        }
    }

    #[cfg(test)]
    mod tests {
        use super::GrowInLargeSteps;

        #[test]
        #[cfg(all(target_os = "linux", target_env = "gnu"))]
        fn the_load_sets_the_top_pad_on_glibc() {
            assert!(GrowInLargeSteps::begin_unless(None).active);
            assert!(GrowInLargeSteps::begin_unless(Some("glibc.malloc.hugetlb=1")).active);
        }

        #[test]
        fn a_top_pad_the_operator_chose_is_left_alone() {
            let t = "glibc.malloc.top_pad=1048576:glibc.malloc.hugetlb=1";
            assert!(!GrowInLargeSteps::begin_unless(Some(t)).active);
        }
    }
}

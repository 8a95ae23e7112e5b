//! How bytes are made durable: the only place that calls fsync.
//!
//! Everything in this crate syncs through a [`Syncer`], so tests can make a sync
//! fail at an exact call and check that nothing acknowledged is lost. The trait is
//! crate-private on purpose: the only public way to turn syncing off is the option
//! whose name says it is unsafe ([`crate::LogOptions::unsafe_no_fsync`]).

use std::fmt;
use std::fs::File;
use std::io;
use std::path::Path;

/// Makes file data, file metadata and directory entries durable.
pub(crate) trait Syncer: Send + Sync + fmt::Debug {
    /// `fdatasync(2)`: the file's data and the metadata needed to read it back.
    fn sync_data(&self, file: &File, path: &Path) -> io::Result<()>;
    /// `fsync(2)`: the file's data and all of its metadata (its size).
    fn sync_all(&self, file: &File, path: &Path) -> io::Result<()>;
    /// fsync of a directory, so created, renamed and removed entries are durable.
    fn sync_dir(&self, dir: &Path) -> io::Result<()>;
}

/// The real thing.
#[derive(Debug, Default)]
pub(crate) struct OsSyncer;

impl Syncer for OsSyncer {
    fn sync_data(&self, file: &File, _path: &Path) -> io::Result<()> {
        file.sync_data()
    }

    fn sync_all(&self, file: &File, _path: &Path) -> io::Result<()> {
        file.sync_all()
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        File::open(dir)?.sync_all()
    }
}

/// No syncing at all: what `unsafe_no_fsync` selects, for benchmarks only. Every
/// acknowledgement it produces is a lie after a power failure.
#[derive(Debug, Default)]
pub(crate) struct NoSyncer;

impl Syncer for NoSyncer {
    fn sync_data(&self, _file: &File, _path: &Path) -> io::Result<()> {
        Ok(())
    }

    fn sync_all(&self, _file: &File, _path: &Path) -> io::Result<()> {
        Ok(())
    }

    fn sync_dir(&self, _dir: &Path) -> io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
pub(crate) mod fault {
    //! A syncer that fails or holds on command, for deterministic tests of fsync
    //! failures, of crash points between syncs, and of group commit.

    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::{Condvar, Mutex};
    use std::time::{Duration, Instant};

    /// Counts sync calls; fails every call from number `fail_from` on (1-based);
    /// can hold the next `sync_data` until released.
    #[derive(Debug)]
    pub(crate) struct FailingSyncer {
        calls: AtomicU64,
        data_calls: AtomicU64,
        fail_from: AtomicU64,
        gate: Mutex<Gate>,
        gate_cv: Condvar,
    }

    #[derive(Debug, Default)]
    struct Gate {
        /// The next sync_data blocks until this is false.
        closed: bool,
        /// A sync_data is blocked at the gate.
        waiting: bool,
    }

    impl FailingSyncer {
        /// A syncer that succeeds until [`FailingSyncer::fail_after`] is called.
        pub(crate) fn new() -> FailingSyncer {
            FailingSyncer {
                calls: AtomicU64::new(0),
                data_calls: AtomicU64::new(0),
                fail_from: AtomicU64::new(u64::MAX),
                gate: Mutex::new(Gate::default()),
                gate_cv: Condvar::new(),
            }
        }

        /// From now on, let `ok_calls` more syncs succeed, then fail all others.
        pub(crate) fn fail_after(&self, ok_calls: u64) {
            let now = self.calls.load(Ordering::SeqCst);
            self.fail_from.store(now + ok_calls + 1, Ordering::SeqCst);
        }

        /// Number of sync calls so far (all kinds).
        pub(crate) fn calls(&self) -> u64 {
            self.calls.load(Ordering::SeqCst)
        }

        /// Number of fdatasync calls so far.
        pub(crate) fn data_calls(&self) -> u64 {
            self.data_calls.load(Ordering::SeqCst)
        }

        /// Makes the next fdatasync wait until [`FailingSyncer::open_gate`].
        pub(crate) fn close_gate(&self) {
            self.gate.lock().unwrap().closed = true;
        }

        /// Releases a held fdatasync.
        pub(crate) fn open_gate(&self) {
            self.gate.lock().unwrap().closed = false;
            self.gate_cv.notify_all();
        }

        /// Waits (with a deadline) until an fdatasync is held at the gate.
        pub(crate) fn wait_until_held(&self) {
            let deadline = Instant::now() + Duration::from_secs(10);
            let mut g = self.gate.lock().unwrap();
            while !g.waiting {
                let left = deadline.saturating_duration_since(Instant::now());
                assert!(!left.is_zero(), "no fdatasync reached the gate");
                g = self.gate_cv.wait_timeout(g, left).unwrap().0;
            }
        }

        fn check(&self) -> io::Result<()> {
            let n = self.calls.fetch_add(1, Ordering::SeqCst) + 1;
            if n >= self.fail_from.load(Ordering::SeqCst) {
                return Err(io::Error::other("injected fsync failure (EIO)"));
            }
            Ok(())
        }

        fn pass_gate(&self) {
            let mut g = self.gate.lock().unwrap();
            if !g.closed {
                return;
            }
            g.waiting = true;
            self.gate_cv.notify_all();
            while g.closed {
                g = self.gate_cv.wait(g).unwrap();
            }
            g.waiting = false;
        }
    }

    impl Syncer for FailingSyncer {
        fn sync_data(&self, file: &File, path: &Path) -> io::Result<()> {
            self.pass_gate();
            self.data_calls.fetch_add(1, Ordering::SeqCst);
            self.check()?;
            OsSyncer.sync_data(file, path)
        }

        fn sync_all(&self, file: &File, path: &Path) -> io::Result<()> {
            self.check()?;
            OsSyncer.sync_all(file, path)
        }

        fn sync_dir(&self, dir: &Path) -> io::Result<()> {
            self.check()?;
            OsSyncer.sync_dir(dir)
        }
    }
}

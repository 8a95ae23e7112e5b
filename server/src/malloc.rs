//! The process allocator's one tunable that rzk sets: glibc malloc's mmap
//! threshold, fixed at start (the `rzk` binary calls [`fix_mmap_threshold`]
//! first thing).
//!
//! Why: glibc serves a block of at least the threshold (128 KiB at start) with
//! its own `mmap`, returned to the system when freed. But each time such a
//! block is freed, glibc raises the threshold to that block's size (up to
//! 32 MiB), so that later blocks of that size come from the heap instead. rzk
//! frees a very large block early in its life: a snapshot's first output
//! buffer is sized for the whole tree (tens of MiB, mostly never touched) and
//! given up with the first chunk. After the first snapshot every block below
//! that size comes from the heap, and when it is freed it leaves a hole among
//! the znodes allocated around it that the heap can neither return nor fill
//! with blocks as large. Measured with `benches/run znode-rss` (200,000 znodes
//! of 128 B, 2026-12-05, load average 7–10): 188–220 B of RSS per znode
//! beyond its path and data with the dynamic threshold, 154–159 B with it
//! fixed at 128 KiB, 2 MiB or 4 MiB; with 1,000,000 znodes 194 → 136 B.
//!
//! Why 4 MiB and not glibc's 128 KiB: a snapshot streams its output in chunks
//! of 1.25 MiB (`snapshot.rs`), and with the threshold below that each chunk
//! is a fresh `mmap` whose pages fault in one by one: a snapshot of 1,000,000
//! znodes cost 0.59–0.61 s of server CPU instead of 0.46–0.48 s. At 4 MiB the
//! chunks reuse the heap (0.51–0.53 s against 0.48–0.52 s in the same
//! minutes) and the RSS is the same as at 128 KiB. A fixed threshold turns the
//! dynamic adjustment off (glibc's documented behaviour of
//! `M_MMAP_THRESHOLD`).
//!
//! The environment wins: with `MALLOC_MMAP_THRESHOLD_` set, glibc has already
//! taken that value and nothing is changed here.

/// The threshold rzk fixes: above the snapshot's output chunks (1.25 MiB),
/// below a snapshot's first buffer (the size of the tree's data).
pub const MMAP_THRESHOLD_BYTES: usize = 4 << 20;

/// What [`fix_mmap_threshold`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MmapThreshold {
    /// The threshold is fixed at this many bytes.
    Fixed(usize),
    /// `MALLOC_MMAP_THRESHOLD_` is set: glibc uses that value, left alone.
    FromEnvironment,
    /// Not glibc: nothing to do.
    NotGlibc,
    /// glibc refused the value (mallopt returned 0).
    Refused,
}

/// Fixes glibc malloc's mmap threshold at [`MMAP_THRESHOLD_BYTES`], which
/// also turns off its dynamic raising (see the module docs). Call it once,
/// early; calling it again is harmless.
pub fn fix_mmap_threshold() -> MmapThreshold {
    if std::env::var_os("MALLOC_MMAP_THRESHOLD_").is_some() {
        return MmapThreshold::FromEnvironment;
    }
    set_threshold(MMAP_THRESHOLD_BYTES)
}

/// Gives the free memory inside malloc's heaps back to the system (glibc's
/// `malloc_trim(0)`, which also releases the pages of free chunks between
/// live ones, not only the heap's top). The core calls it once a snapshot is
/// saved: the snapshot's output chunks (1.25 MiB each, below the threshold)
/// were freed by then, and left a hole of up to a few MiB among the znodes
/// allocated meanwhile (`benches/run znode-rss` with 200,000 znodes read
/// 150 B per znode without such a hole and 172–208 B with one, 2026-12-05).
/// Returns whether memory was released; a no-op where malloc is not glibc's.
pub fn trim() -> bool {
    trim_heaps()
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[allow(unsafe_code)]
fn trim_heaps() -> bool {
    // SAFETY: malloc_trim works on glibc's own free lists under its locks.
    unsafe { libc::malloc_trim(0) == 1 }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn trim_heaps() -> bool {
    false
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[allow(unsafe_code)]
fn set_threshold(bytes: usize) -> MmapThreshold {
    let value = libc::c_int::try_from(bytes).expect("the threshold fits a C int");
    // SAFETY: mallopt changes a tunable of glibc's allocator under its own
    // locks; it takes two integers and touches no memory of ours.
    let ok = unsafe { libc::mallopt(libc::M_MMAP_THRESHOLD, value) };
    if ok == 1 {
        MmapThreshold::Fixed(bytes)
    } else {
        MmapThreshold::Refused
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn set_threshold(_bytes: usize) -> MmapThreshold {
    MmapThreshold::NotGlibc
}

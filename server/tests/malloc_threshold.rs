//! `rzk_server::malloc::fix_mmap_threshold` keeps glibc from raising its mmap
//! threshold when a large block is freed (a test file of its own: it reads
//! the process's malloc counters, which other tests' threads would move).

#![allow(unsafe_code)] // mallinfo2: glibc's counters, read only.
#![cfg(all(target_os = "linux", target_env = "gnu"))]

use rzk_server::malloc::{fix_mmap_threshold, MmapThreshold, MMAP_THRESHOLD_BYTES};

/// Blocks served by their own mmap right now.
fn mmapped_blocks() -> usize {
    // SAFETY: mallinfo2 only reads glibc's counters into a struct it returns.
    unsafe { libc::mallinfo2() }.hblks
}

/// Whether a fresh block of `bytes` is served by its own mmap.
fn is_mmapped(bytes: usize) -> bool {
    let before = mmapped_blocks();
    let block = std::hint::black_box(vec![1u8; bytes]);
    let mmapped = mmapped_blocks() > before;
    drop(block);
    mmapped
}

#[test]
fn freeing_a_large_block_does_not_raise_the_mmap_threshold() {
    if std::env::var_os("MALLOC_MMAP_THRESHOLD_").is_some() {
        assert_eq!(fix_mmap_threshold(), MmapThreshold::FromEnvironment);
        return;
    }
    assert_eq!(
        fix_mmap_threshold(),
        MmapThreshold::Fixed(MMAP_THRESHOLD_BYTES)
    );
    // What a snapshot's first buffer does: a block of 24 MiB, mmapped, freed.
    // glibc's dynamic threshold would now be 24 MiB, and the block below would
    // come from the heap.
    assert!(is_mmapped(24 << 20), "a 24 MiB block is mmapped");
    assert!(
        is_mmapped(2 * MMAP_THRESHOLD_BYTES),
        "a block of twice the threshold is still mmapped after a 24 MiB block was freed"
    );
    assert!(
        !is_mmapped(MMAP_THRESHOLD_BYTES / 4),
        "a block below the threshold comes from the heap"
    );
}

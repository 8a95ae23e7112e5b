//! `rzk_server::malloc::trim` gives back the pages of a free block that sits
//! below a live one (a test file of its own: it reads the process's RSS,
//! which other tests' threads would move).

#![cfg(all(target_os = "linux", target_env = "gnu"))]

use rzk_server::malloc::{fix_mmap_threshold, trim, MMAP_THRESHOLD_BYTES};

fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .expect("/proc/self/status")
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .expect("VmRSS")
}

#[test]
fn trim_releases_a_free_block_below_a_live_one() {
    fix_mmap_threshold();
    // Half the threshold: from the heap, as a snapshot's output chunk is.
    let hole_bytes = MMAP_THRESHOLD_BYTES / 2;
    let hole = std::hint::black_box(vec![1u8; hole_bytes]);
    // A live block above it, so that the heap's top cannot simply shrink.
    let above = std::hint::black_box(vec![2u8; 64 * 1024]);
    drop(hole);
    let before = rss_kib();
    assert!(trim(), "malloc_trim released nothing");
    let after = rss_kib();
    assert!(
        before - after >= (hole_bytes / 2 / 1024) as u64,
        "VmRSS {before} -> {after} KiB after freeing {hole_bytes} bytes"
    );
    drop(above);
}

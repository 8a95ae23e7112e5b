//! Memory of the data tree per znode, measured as the process's RSS growth
//! (`/proc/self/status`) while a tree of N znodes of 128 bytes is built, the
//! shape `benches/run compare` populates (children `n0`, `n1`, ... of
//! `/rzk-populate-0`, `-1`, ..., 100,000 per parent), each znode's data
//! handed over as the server's apply does; then the time to write and to load
//! its snapshot. Not criterion: one run, one figure each.
//!
//! ```sh
//! cargo bench -p rzk-server --bench tree_memory            # 200,000 znodes
//! cargo bench -p rzk-server --bench tree_memory -- 1000000
//! ```

use std::time::Instant;

use bytes::Bytes;
use rzk_server::tree::DataTree;
use rzk_wire::Acl;
use rzk_zxid::Zxid;

const VALUE_BYTES: usize = 128;
const PER_PARENT: u64 = 100_000;

fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))?
                .split_whitespace()
                .nth(1)?
                .parse()
                .ok()
        })
        .unwrap_or(0)
}

fn main() {
    let n: u64 = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(200_000);
    let acl = Acl::open_unsafe();
    let value = Bytes::from(vec![7u8; VALUE_BYTES]);
    let before = rss_kib();
    let mut t = DataTree::new();
    let mut zxid = 1;
    let mut path_bytes = 0u64;
    for i in 0..n {
        if i % PER_PARENT == 0 {
            let parent = format!("/rzk-populate-{}", i / PER_PARENT);
            t.create(&parent, None, &acl, 0, zxid, 1).unwrap();
            zxid += 1;
        }
        let p = format!("/rzk-populate-{}/n{}", i / PER_PARENT, i % PER_PARENT);
        path_bytes += p.len() as u64;
        // As the server applies a create: the data decoded from the txn (its
        // own buffer), handed over as a clone, the txn then dropped.
        let decoded = Bytes::copy_from_slice(&value);
        t.create(&p, Some(decoded.clone()), &acl, 0, zxid, 1)
            .unwrap();
        drop(decoded);
        zxid += 1;
    }
    let per = (rss_kib() - before) as f64 * 1024.0 / n as f64;
    let path = path_bytes as f64 / n as f64;
    println!(
        "{n} znodes of {VALUE_BYTES} B: {per:.1} B of RSS each, {:.1} B beyond the path ({path:.1} B) and the data",
        per - path - VALUE_BYTES as f64
    );
    let started = Instant::now();
    let snap = t.snapshot_now(Zxid::from_u64(zxid), &[]);
    println!(
        "snapshot written in {:?} ({} bytes)",
        started.elapsed(),
        snap.len()
    );
    drop(t);
    let started = Instant::now();
    let (loaded, _, _) = DataTree::load_snapshot(&snap).unwrap();
    println!(
        "snapshot loaded in {:?} ({} nodes)",
        started.elapsed(),
        loaded.node_count()
    );
}

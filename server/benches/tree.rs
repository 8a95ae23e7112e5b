//! Benchmarks of the server's in-memory structures, without network or disk:
//! the data tree (create, get, setData, delete), watch trigger fan-out, and
//! snapshot serialise/load.
//!
//! ```sh
//! cargo bench -p rzk-server --bench tree
//! cargo bench -p rzk-server --bench tree -- snapshot   # one group
//! ```
//!
//! Values are 128 bytes, as in the end-to-end figures. Node paths are
//! `/bench/n{i}` under one parent (the shape rzk-bench uses), so a create or a
//! lookup hashes a name in a parent map holding every node.

use std::hint::black_box;

use bytes::Bytes;
use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use rzk_server::tree::DataTree;
use rzk_server::watch::{WatchKind, WatchManager};
use rzk_wire::Acl;
use rzk_zxid::Zxid;

const VALUE_BYTES: usize = 128;

fn value() -> Bytes {
    Bytes::from(vec![0x5a; VALUE_BYTES])
}

fn paths(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("/bench/n{i:010}")).collect()
}

/// A tree with `/bench` and `n` children of 128 bytes under it.
fn tree_with(n: usize) -> (DataTree, u64) {
    let mut t = DataTree::new();
    let acl = Acl::open_unsafe();
    t.create("/bench", None, &acl, 0, 1, 1).unwrap();
    let v = value();
    let mut zxid = 2;
    for p in paths(n) {
        t.create(&p, Some(v.clone()), &acl, 0, zxid, 1).unwrap();
        zxid += 1;
    }
    (t, zxid)
}

fn tree_ops(c: &mut Criterion) {
    const N: usize = 100_000;
    let acl = Acl::open_unsafe();
    let ps = paths(N);
    let mut g = c.benchmark_group("tree");
    g.throughput(Throughput::Elements(N as u64));
    g.sample_size(10);

    g.bench_function("create_100k", |b| {
        b.iter_batched(
            || {
                let mut t = DataTree::new();
                t.create("/bench", None, &acl, 0, 1, 1).unwrap();
                t
            },
            |mut t| {
                for (i, p) in ps.iter().enumerate() {
                    t.create(p, Some(value()), &acl, 0, i as u64 + 2, 1)
                        .unwrap();
                }
                t
            },
            BatchSize::PerIteration,
        )
    });

    let (mut t, mut zxid) = tree_with(N);
    g.bench_function("get_100k", |b| {
        b.iter(|| {
            for p in &ps {
                let n = t.get(black_box(p)).unwrap();
                black_box(n.stat());
            }
        })
    });
    g.bench_function("set_100k", |b| {
        let v = value();
        b.iter(|| {
            for p in &ps {
                black_box(t.set_data(p, Some(v.clone()), zxid, 2).unwrap());
                zxid += 1;
            }
        })
    });
    g.bench_function("delete_100k", |b| {
        b.iter_batched(
            || tree_with(N),
            |(mut t, zxid)| {
                for p in &ps {
                    black_box(t.delete(p, zxid).unwrap());
                }
                t
            },
            BatchSize::PerIteration,
        )
    });
    g.finish();
}

fn watch_fanout(c: &mut Criterion) {
    let mut g = c.benchmark_group("watch");
    for watchers in [1u64, 100, 10_000] {
        // Persistent watches stay registered, so one manager serves every
        // iteration: this is the cost of finding and listing the watchers.
        let mut w = WatchManager::default();
        for conn in 0..watchers {
            w.add(conn, "/app/config", WatchKind::Persistent);
        }
        g.throughput(Throughput::Elements(watchers));
        g.bench_function(format!("persistent_fanout_{watchers}"), |b| {
            b.iter(|| black_box(w.trigger_node(black_box("/app/config"), false)))
        });
        // One-shot data watches are consumed by the trigger: register again
        // (outside the timing) before each one.
        g.bench_function(format!("oneshot_fanout_{watchers}"), |b| {
            b.iter_batched(
                || {
                    let mut w = WatchManager::default();
                    for conn in 0..watchers {
                        w.add(conn, "/app/config", WatchKind::Data);
                    }
                    w
                },
                |mut w| {
                    black_box(w.trigger_node("/app/config", false));
                    w
                },
                BatchSize::LargeInput,
            )
        });
    }
    // Recursive watches: `watchers` connections watch `/app` recursively; a
    // change 4 levels below fires all of them, and a change elsewhere walks
    // the ancestors and finds none.
    for watchers in [1u64, 100, 10_000] {
        let mut w = WatchManager::default();
        for conn in 0..watchers {
            w.add(conn, "/app", WatchKind::Recursive);
        }
        g.throughput(Throughput::Elements(watchers));
        g.bench_function(format!("recursive_fanout_{watchers}"), |b| {
            b.iter(|| black_box(w.trigger_node(black_box("/app/a/b/c/d"), false)))
        });
        g.bench_function(format!("recursive_miss_{watchers}"), |b| {
            b.iter(|| black_box(w.trigger_node(black_box("/other/a/b/c/d"), false)))
        });
    }
    g.finish();
}

fn snapshot(c: &mut Criterion) {
    let mut g = c.benchmark_group("snapshot");
    g.sample_size(10);
    for n in [100_000usize, 1_000_000] {
        let (mut t, zxid) = tree_with(n);
        let at = Zxid::from_u64(zxid - 1);
        let bytes = t.snapshot_now(at, &[]);
        g.throughput(Throughput::Elements(n as u64));
        g.bench_function(format!("serialise_{}k", n / 1000), |b| {
            b.iter(|| black_box(t.snapshot_now(at, &[]).len()))
        });
        // The longest single step of a snapshot in progress (64 nodes, what
        // the core does per applied txn): how long one write waits for it.
        g.bench_function(format!("step64_max_{}k", n / 1000), |b| {
            b.iter_custom(|iters| {
                let mut total = std::time::Duration::ZERO;
                for _ in 0..iters {
                    assert!(t.begin_snapshot(at, &[]));
                    let mut max = std::time::Duration::ZERO;
                    loop {
                        let start = std::time::Instant::now();
                        let done = t.snapshot_step(64);
                        max = max.max(start.elapsed());
                        if done.is_some() {
                            break;
                        }
                    }
                    total += max;
                }
                total
            })
        });
        g.bench_function(format!("load_{}k", n / 1000), |b| {
            b.iter_with_large_drop(|| DataTree::load_snapshot(&bytes).unwrap().0)
        });
    }
    g.finish();
}

criterion_group!(benches, tree_ops, watch_fanout, snapshot);
criterion_main!(benches);

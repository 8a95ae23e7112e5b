//! Criterion benchmarks of rzk-wal: durable appends (one, and a group of 64
//! sharing an fsync), the CPU cost of the append path without fsync, recovery of
//! a 64 MiB log, and truncate_after.
//!
//! Kept short (small samples) because the machine is shared; `wal-bench` in
//! `rzk-benches` gives the throughput/latency report with the raw fsync ratio.

use std::time::{Duration, Instant};

use bytes::Bytes;
use criterion::{criterion_group, criterion_main, Criterion};
use rzk_wal::{Append, Log, LogOptions};
use rzk_zxid::{Epoch, Next, Zxid};

fn next(z: Zxid) -> Zxid {
    match z.next() {
        Next::Zxid(n) => n,
        Next::Rollover { .. } => unreachable!("benchmarks stay far below the counter limit"),
    }
}

fn open(dir: &std::path::Path, unsafe_no_fsync: bool) -> Log {
    let options = LogOptions {
        unsafe_no_fsync,
        ..LogOptions::default()
    };
    Log::open(dir, options).unwrap().0
}

fn appends(c: &mut Criterion) {
    let mut g = c.benchmark_group("append");
    g.sample_size(20).measurement_time(Duration::from_secs(3));
    let payload = Bytes::from(vec![1u8; 128]);

    let dir = tempfile::tempdir_in(".").unwrap();
    let log = open(dir.path(), false);
    let mut z = Zxid::first_of(Epoch(1));
    g.bench_function("durable_1x128B", |b| {
        b.iter(|| {
            log.append(z, payload.clone()).unwrap().wait().unwrap();
            z = next(z);
        })
    });
    g.bench_function("durable_group_64x128B", |b| {
        b.iter_custom(|iters| {
            let start = Instant::now();
            for _ in 0..iters {
                let group: Vec<Append> = (0..64)
                    .map(|_| {
                        let a = log.append(z, payload.clone()).unwrap();
                        z = next(z);
                        a
                    })
                    .collect();
                for a in group {
                    a.wait().unwrap();
                }
            }
            start.elapsed()
        })
    });
    drop(log);

    let dir = tempfile::tempdir_in(".").unwrap();
    let log = open(dir.path(), true);
    let mut z = Zxid::first_of(Epoch(1));
    g.bench_function("UNSAFE_no_fsync_group_64x128B", |b| {
        b.iter_custom(|iters| {
            let start = Instant::now();
            for _ in 0..iters {
                let group: Vec<Append> = (0..64)
                    .map(|_| {
                        let a = log.append(z, payload.clone()).unwrap();
                        z = next(z);
                        a
                    })
                    .collect();
                for a in group {
                    a.wait().unwrap();
                }
            }
            start.elapsed()
        })
    });
    g.finish();
}

fn recovery_and_truncate(c: &mut Criterion) {
    let mut g = c.benchmark_group("log");
    g.sample_size(10).measurement_time(Duration::from_secs(3));
    let dir = tempfile::tempdir_in(".").unwrap();
    let payload = Bytes::from(vec![2u8; 4096 - 16]);
    let mut z = Zxid::first_of(Epoch(1));
    {
        let log = open(dir.path(), true);
        let pending: Vec<Append> = (0..(64 << 20) / 4096 - 1)
            .map(|_| {
                let a = log.append(z, payload.clone()).unwrap();
                z = next(z);
                a
            })
            .collect();
        for a in pending {
            a.wait().unwrap();
        }
    }
    g.bench_function("open_64MiB_of_4KiB_records", |b| {
        b.iter(|| Log::open(dir.path(), LogOptions::default()).unwrap())
    });

    let dir = tempfile::tempdir_in(".").unwrap();
    let log = open(dir.path(), false);
    let payload = Bytes::from(vec![3u8; 1024 - 16]);
    let mut z = Zxid::first_of(Epoch(1));
    let append = |n: usize, z: &mut Zxid| {
        let pending: Vec<Append> = (0..n)
            .map(|_| {
                let a = log.append(*z, payload.clone()).unwrap();
                *z = next(*z);
                a
            })
            .collect();
        for a in pending {
            a.wait().unwrap();
        }
    };
    append(1000, &mut z);
    let keep = log.last_durable_zxid();
    g.bench_function("truncate_after_100x1KiB", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                append(100, &mut z);
                let start = Instant::now();
                log.truncate_after(keep).unwrap();
                total += start.elapsed();
                z = Zxid::first_of(Epoch(z.epoch().0 + 1));
            }
            total
        })
    });
    g.finish();
}

criterion_group!(benches, appends, recovery_and_truncate);
criterion_main!(benches);

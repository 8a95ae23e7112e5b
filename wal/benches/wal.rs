//! Criterion benchmarks of rzk-wal: durable appends (one, and a group of 64
//! sharing an fsync), the CPU cost of the append path without fsync, recovery of
//! a 64 MiB log, truncate_after, and a 64 MiB snapshot streamed, read back
//! and transferred.
//!
//! Kept short (small samples) because the machine is shared; `wal-bench` in
//! `rzk-benches` gives the throughput/latency report with the raw fsync ratio.

use std::time::{Duration, Instant};

use bytes::Bytes;
use criterion::{criterion_group, criterion_main, Criterion};
use rzk_wal::{Append, Log, LogOptions, Wal, WalOptions};
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

/// A 64 MiB snapshot streamed in 256 KiB chunks (written, fsynced,
/// committed), read back through the verifying reader, and sent raw to a
/// learner's incoming file (verified, fsynced; not installed).
fn snapshots(c: &mut Criterion) {
    let mut g = c.benchmark_group("snapshot");
    g.sample_size(10).measurement_time(Duration::from_secs(5));
    g.throughput(criterion::Throughput::Bytes(64 << 20));
    let dir = tempfile::tempdir_in(".").unwrap();
    let (wal, _) = Wal::open(dir.path(), WalOptions::default()).unwrap();
    let z = Zxid::first_of(Epoch(1));
    wal.append(z, Bytes::from_static(b"txn"))
        .unwrap()
        .wait()
        .unwrap();
    let chunk = Bytes::from(vec![4u8; 256 << 10]);
    g.bench_function("stream_write_commit_64MiB", |b| {
        b.iter(|| {
            let mut w = wal.snapshot_dir().writer(z).unwrap();
            for _ in 0..256 {
                w.write(chunk.clone()).unwrap();
            }
            let written = w.finish().wait().unwrap();
            // Committing again at the same zxid keeps the first file: this
            // measures the write and the commit's checks.
            wal.commit_snapshot(written).unwrap()
        })
    });
    let file = wal.open_snapshot(z).unwrap();
    g.bench_function("state_reader_64MiB", |b| {
        b.iter(|| {
            let mut reader = file.state_reader();
            let mut buf = vec![0u8; 1 << 20];
            while std::io::Read::read(&mut reader, &mut buf).unwrap() > 0 {}
        })
    });
    g.bench_function("raw_transfer_to_incoming_64MiB", |b| {
        b.iter(|| {
            let mut incoming = wal
                .incoming_snapshot(z, file.size_bytes(), file.crc())
                .unwrap();
            while !incoming.is_complete() {
                let offset = incoming.accepted_bytes();
                incoming
                    .write(offset, file.read_raw_at(offset, 1 << 20).unwrap())
                    .unwrap();
            }
            incoming.finish().wait().unwrap()
        })
    });
    g.finish();
}

criterion_group!(benches, appends, recovery_and_truncate, snapshots);
criterion_main!(benches);

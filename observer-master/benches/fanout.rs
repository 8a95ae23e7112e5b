//! Criterion benchmarks of the relay hot paths: a proposal and its commit
//! through a fan-out with 0, 2 and 8 observers (each commit queued for every
//! observer, then drained as a sender would), and the observer's contiguity check.

use std::hint::black_box;

use bytes::Bytes;
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use rzk_observer_master::{Contiguity, Fanout, FanoutConfig, ObserverId, SourceSnapshot, Txn};
use rzk_zxid::{Epoch, Zxid};

fn bench(c: &mut Criterion) {
    let payload = Bytes::from(vec![7u8; 128]);
    let mut group = c.benchmark_group("fanout/propose_commit_128B");
    group.throughput(Throughput::Elements(1));
    for observers in [0u64, 2, 8] {
        group.bench_with_input(
            BenchmarkId::from_parameter(observers),
            &observers,
            |b, &n| {
                let mut fanout = Fanout::new(SourceSnapshot::default(), FanoutConfig::default())
                    .expect("an empty snapshot is contiguous");
                for id in 0..n {
                    fanout
                        .attach(ObserverId(id), Zxid::ZERO)
                        .expect("attach at 0");
                }
                let mut counter = 0u32;
                b.iter(|| {
                    counter += 1;
                    let zxid = Zxid::new(Epoch(1), counter.into());
                    fanout
                        .on_proposal(Txn {
                            zxid,
                            payload: payload.clone(),
                        })
                        .expect("contiguous");
                    fanout.on_commit(zxid).expect("matches");
                    for id in 0..n {
                        black_box(fanout.pop(ObserverId(id), 64));
                    }
                });
            },
        );
    }
    group.finish();

    c.bench_function("contiguity/accept", |b| {
        let mut check = Contiguity::after_sync(Zxid::ZERO);
        let mut prev = Zxid::ZERO;
        let mut counter = 0u32;
        b.iter(|| {
            counter += 1;
            let zxid = Zxid::new(Epoch(1), counter.into());
            check
                .accept(black_box(prev), black_box(zxid))
                .expect("contiguous");
            prev = zxid;
        });
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);

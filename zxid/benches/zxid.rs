//! Criterion benchmarks of the zxid hot paths: next, contiguity, display, parse.

use criterion::{criterion_group, criterion_main, Criterion};
use rzk_zxid::{Counter, Epoch, Next, Zxid};
use std::hint::black_box;

fn bench(c: &mut Criterion) {
    let z = Zxid::new(Epoch(3), Counter(41));
    c.bench_function("zxid/next", |b| {
        b.iter(|| match black_box(z).next() {
            Next::Zxid(n) => n,
            Next::Rollover { .. } => unreachable!("counter 41 is far below the limit"),
        })
    });
    let n = Zxid::new(Epoch(3), Counter(42));
    c.bench_function("zxid/is_next", |b| {
        b.iter(|| black_box(n).is_next(black_box(z)))
    });
    c.bench_function("zxid/display", |b| b.iter(|| black_box(z).to_string()));
    c.bench_function("zxid/parse_hex", |b| {
        b.iter(|| black_box("0x300000029").parse::<Zxid>().unwrap())
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);

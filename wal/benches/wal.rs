//! Criterion benchmarks of rzk-wal (filled in below).

fn main() {}

//! `rzk-benches`: Benchmarks of every rzk crate and rzk-bench, a load generator for any ZooKeeper-protocol endpoint.
//!
//! The load generator `rzk-bench` is not built yet (issue 5). Built so far: the
//! binary `wal-bench` (benchmarks of `rzk-wal` against the disk's raw fsync rate).

#![deny(missing_docs)]

//! `rzk-benches`: Benchmarks of every rzk crate and rzk-bench, a load generator for any ZooKeeper-protocol endpoint.
//!
//! Not built yet: this crate is an empty library that compiles, so the workspace
//! has its final shape. Its work is tracked in issue 5; nothing here claims a
//! feature it lacks.

#![deny(missing_docs)]

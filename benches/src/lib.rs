//! `rzk-benches`: benchmarks of rzk's crates, and `rzk-bench`, a load
//! generator for any ZooKeeper-protocol endpoint (Apache ZooKeeper 3.8, rzk).
//!
//! Binaries:
//! - `rzk-bench` (this library's front end; command line in [`cli`]): `run`
//!   one of eleven workloads with pipelined sessions and checked answers,
//!   `populate` a tree, hold `idle-sessions`, `wait-serving`, and
//!   `connect-storm` (N sessions established K at a time, new or resumed).
//! - `wal-bench`: benchmarks of `rzk-wal` against the disk's raw fsync rate.
//!
//! `rzk-bench` speaks the client protocol through `rzk-wire`'s `ClientCodec`.
//! A session is one TCP connection ([`conn::Conn`]); in the timed phase its
//! writer half and reader half run concurrently with up to K requests in
//! flight ([`pipeline::drive`]), every reply is matched to its request by xid
//! and checked against what the run wrote ([`workload::check`]), and latency
//! goes into an HDR histogram.
//!
//! ```no_run
//! # async fn demo() -> Result<(), rzk_benches::BenchError> {
//! use rzk_benches::run::{run, Limit, RunOptions};
//! use rzk_benches::workload::WorkloadKind;
//!
//! let opts = RunOptions {
//!     server: "127.0.0.1:2181".into(), workload: WorkloadKind::Get, sessions: 4,
//!     inflight: 8, value_bytes: 128, limit: Limit::Ops(10_000), read_ratio: 0.9,
//!     watchers: 10, namespace: rzk_benches::run::fresh_namespace(),
//!     session_timeout_ms: 30_000, progress_seconds: 0.0, seed: 1, keys_per_session: 64,
//!     server_pids: Vec::new(), rate: None,
//! };
//! let report = run(&opts, tokio_util::sync::CancellationToken::new()).await?;
//! assert_eq!(report.errors, 0);
//! println!("{}", report.to_json());
//! # Ok(()) }
//! ```
//!
//! What it guarantees: a run counts an operation only when its reply says
//! what the run expects (the bytes and version it last wrote, the children it
//! created, the paths a multi created, the right watch event); anything else
//! is counted in `errors` with a message naming the op and path, and the
//! binary exits non-zero.

#![deny(missing_docs)]

pub mod cli;
pub mod conn;
pub mod connect_storm;
mod error;
pub mod idle;
pub mod pipeline;
pub mod populate;
pub mod report;
pub mod run;
pub mod storm;
pub mod wait;
pub mod watch;
pub mod workload;

pub use error::BenchError;

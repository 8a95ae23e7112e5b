//! rzk-chaos: fault injection and linearizability checking against real
//! ZooKeeper-protocol ensembles (rzk, Apache ZooKeeper).
//!
//! The library holds the parts that are worth testing on their own: the
//! recorded [`history`], the [`check`]er (per-key linearizability plus direct
//! findings), and the partitioning TCP [`proxy`]. The binary `rzk-chaos`
//! starts an ensemble from a config file, runs a workload and a nemesis
//! schedule against it, and checks and reports the history.
//!
//! ```
//! use rzk_chaos::check::{analyze, Budget};
//! use rzk_chaos::history::{Call, Op, Outcome, Ret};
//!
//! let op = |id, invoke, complete, call, outcome| Op {
//!     id, process: 0, session: 1, member: None, invoke, complete, call, outcome, zxid: None,
//! };
//! let ops = vec![
//!     op(0, 0, 10, Call::Write { key: 1, value: "a".into() }, Outcome::Ok(Ret::Version { version: 1 })),
//!     op(1, 20, 30, Call::SyncRead { key: 1 }, Outcome::Ok(Ret::Data { value: "init".into(), version: 0 })),
//! ];
//! let analysis = analyze(&ops, Budget::default());
//! // Not linearizable, a stale read after sync, and the session read older than it wrote.
//! assert_eq!(analysis.anomalies(), 3);
//! ```

#![deny(missing_docs)]

pub mod check;
pub mod history;
pub mod proxy;

//! `rzk-wal`: A peer's durable history: transaction log, snapshots and epoch metadata.
//!
//! Not built yet: this crate is an empty library that compiles, so the workspace
//! has its final shape. Its work is tracked in issue 3; nothing here claims a
//! feature it lacks.

#![deny(missing_docs)]

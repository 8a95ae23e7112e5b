//! `rzk-sim`: Deterministic simulation of rzk-quorum: simulated network, disk and clock, seeded faults, a ZAB invariant checker.
//!
//! Not built yet: this crate is an empty library that compiles, so the workspace
//! has its final shape. Its work is tracked in issue 7; nothing here claims a
//! feature it lacks.

#![deny(missing_docs)]

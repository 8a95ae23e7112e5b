//! `rzk-observer-master`: Fan-out of committed transactions to observers, built from an atomic snapshot of its source.
//!
//! Not built yet: this crate is an empty library that compiles, so the workspace
//! has its final shape. Its work is tracked in issue for observers (not filed yet); nothing here claims a
//! feature it lacks.

#![deny(missing_docs)]

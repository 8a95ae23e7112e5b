//! `rzk-quorum`: ZAB-style replication: a sans-IO core, a Replicator for the server, a gRPC transport.
//!
//! Not built yet: this crate is an empty library that compiles, so the workspace
//! has its final shape. Its work is tracked in issue 7; nothing here claims a
//! feature it lacks.

#![deny(missing_docs)]

//! `rzk-wire`: The ZooKeeper client wire protocol: jute records, opcodes, error codes, framing codec.
//!
//! Not built yet: this crate is an empty library that compiles, so the workspace
//! has its final shape. Its work is tracked in issue 2; nothing here claims a
//! feature it lacks.

#![deny(missing_docs)]

//! `rzk-election-client`: An async ZooKeeper client with Curator-style recipes (leader latch, selector, mutex) that survive session loss.
//!
//! Not built yet: this crate is an empty library that compiles, so the workspace
//! has its final shape. Its work is tracked in issue 6; nothing here claims a
//! feature it lacks.

#![deny(missing_docs)]

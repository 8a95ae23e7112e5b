//! `rzk-server`: The rzk server: data tree, sessions, watches, ACLs and the request pipeline over the ZooKeeper client protocol.
//!
//! Not built yet: this crate is an empty library that compiles, so the workspace
//! has its final shape. Its work is tracked in issue 4; nothing here claims a
//! feature it lacks.

#![deny(missing_docs)]

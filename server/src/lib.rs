//! `rzk-server`: the rzk server (binary `rzk`).
//!
//! Status: being built (issue 4). What exists so far is the configuration
//! ([`config`]): a `zoo.cfg`-compatible file, command-line overrides and the
//! embedded default. There is no server binary yet.

#![deny(missing_docs)]

pub mod config;

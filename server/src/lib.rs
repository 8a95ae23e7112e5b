//! `rzk-server`: the rzk server (binary `rzk`): a ZooKeeper-compatible server
//! on the request pipeline of ARCHITECTURE.md — prep → txn → replicate → apply
//! → reply — with replication behind `rzk_quorum::Replicator` (standalone: the
//! quorum of one).
//!
//! ```no_run
//! # async fn example() -> Result<(), rzk_server::ServerError> {
//! let config = rzk_server::config::ServerConfig::default();
//! let listener = tokio::net::TcpListener::bind(config.client_addr).await.unwrap();
//! rzk_server::serve(config, vec![listener], async {
//!     let _ = tokio::signal::ctrl_c().await;
//! })
//! .await
//! # }
//! ```
//!
//! Modules: [`config`] (zoo.cfg), [`path`] (ZooKeeper's path rules), [`acl`]
//! (identities, ACL fixup and checks), [`tree`] (the data tree and its
//! copy-on-write snapshots), [`txn`] (the transaction format), [`prep`]
//! (request → txn against tree + outstanding changes), [`apply`] (txn →
//! tree, in zxid order), [`watch`] (watch tables), and the private core
//! (the task that owns all of it), connections and four-letter words.
//!
//! Guarantees: a write is answered only once durable through the replicator and
//! applied (I6); per connection, replies come in request order and the
//! notifications a write causes come before its reply (docs/client-protocol.md,
//! "Notifications before replies"); every limit is explicit (frame size,
//! connections per IP, requests in flight per connection and in total, bytes
//! queued to a slow reader, the sessionless timeout), and bad client input
//! never panics (I7).

#![deny(missing_docs)]

pub mod acl;
mod admin;
pub mod apply;
mod commands;
pub mod config;
mod conn;
pub mod core;
pub mod dump;
mod fourlw;
pub mod import;
pub mod import_zk;
pub mod logging;
pub mod malloc;
mod metric_table;
mod metrics;
pub mod outbox;
pub mod path;
mod preload;
pub mod prep;
pub mod read_ahead;
pub mod replication;
mod server;
mod shell;
mod stats;
pub mod tls;
pub mod tree;
pub mod txn;
pub mod watch;

#[cfg(test)]
mod replay_tests;

pub use crate::core::CoreError;
pub use replication::{open_replicator, server_id, Membership, ReplicationError};
pub use server::{
    run, run_listeners, serve, serve_listeners, serve_member, Listeners, ServerError,
};

/// The README's example is compiled as a doctest so that it cannot rot.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

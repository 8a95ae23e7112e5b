//! `rzk-election-client`: an async ZooKeeper client with Curator-style recipes (leader
//! latch, leader selector, mutex) that survive session loss.
//!
//! Work in progress: the connection-state machine and the recipe state machines.

#![deny(missing_docs)]

pub mod client;
pub mod error;
pub mod recipe;
pub mod state;
pub mod types;

pub use client::config::ClientConfig;
pub use client::watches::{EventKind, PersistentMode, WatchEvent};
pub use client::{Client, OneShotWatch, Op, OpResult, PersistentWatch, ReadOp, ReadResult};
pub use error::{Error, Result};
pub use rzk_wire::{Acl, ClientInfo, CreateMode, ErrorCode, Id, Perms, WatcherType};
pub use state::{ConnectionState, StateStream};
pub use types::{FencingToken, SessionId, Stat};

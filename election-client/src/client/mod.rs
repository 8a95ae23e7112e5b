//! The network client.

pub mod config;
pub mod watches;

//! Helpers shared by the process tests (`mod support;`): [`procs`] starts,
//! kills and restarts real `rzk` processes; [`client`] is the client side
//! they share.
#![allow(dead_code)]

pub mod client;
pub mod procs;

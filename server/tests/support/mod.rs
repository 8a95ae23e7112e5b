//! Helpers shared by the process tests (`mod support;`): [`procs`] starts,
//! kills and restarts real `rzk` processes.
#![allow(dead_code)]

pub mod procs;

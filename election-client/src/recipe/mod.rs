//! Recipes: leader latch, leader selector, inter-process mutex, all built on one
//! [`candidacy`] state machine with fencing.

pub mod candidacy;

//! Recipes: [`LeaderLatch`], [`LeaderSelector`], [`Mutex`], all built on one
//! [`candidacy`] state machine with fencing, run by one task each over [`RecipeOps`].

pub mod candidacy;
pub(crate) mod driver;
mod latch;
mod mutex;
pub mod ops;
mod selector;

#[cfg(test)]
mod fake;

pub use candidacy::{Grant, Revoked};
pub use driver::RecipeEvent;
pub use latch::{LatchConfig, LeaderLatch};
pub use mutex::{Mutex, MutexGuard};
pub use ops::{RecipeOps, WatchFired};
pub use selector::{LeaderSelector, Leadership, CALLBACK_GRACE};

#[cfg(test)]
mod recipe_tests;

//! Snapshots of the tree: consistent at one zxid, written while writes go
//! on, loaded from a stream.
//!
//! - `format`: the bytes of a snapshot (header, records, end marker), the
//!   writer and reader of a record side by side;
//! - `write`: the copy-on-write writer
//!   ([`DataTree::begin_snapshot`](super::DataTree::begin_snapshot),
//!   [`DataTree::snapshot_step`](super::DataTree::snapshot_step));
//! - `load`: the loader, on one thread or two
//!   ([`DataTree::load_snapshot_from`](super::DataTree::load_snapshot_from),
//!   [`DataTree::load_snapshot_split`](super::DataTree::load_snapshot_split)).
//!
//! Relies on the tree for its nodes and their generation marks (see
//! `write`), and on nothing else of it.

mod format;
mod load;
mod write;

pub use format::SessionRecord;
pub use load::{SNAPSHOT_LOAD_READ_BYTES, SNAPSHOT_SPLIT_MIN_BYTES};
pub(super) use write::SnapWriter;

#[cfg(test)]
mod tests;

//! Small protocol newtypes shared by the client and the recipes.

use std::fmt;

use rzk_zxid::Zxid;

pub use rzk_wire::{SessionId, Stat};

/// The fencing token a leader (or lock holder) stamps on its writes.
///
/// `epoch` is the value of the epoch znode after this holder's conditional increment;
/// no two successful increments produce the same value, so no two leaders ever hold the
/// same epoch. `zxid` is the zxid of that increment: it orders tokens even across a
/// deletion and re-creation of the epoch znode, which would restart `epoch`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FencingToken {
    /// The epoch counter after the increment.
    pub epoch: u64,
    /// The zxid of the increment (the epoch znode's `mzxid` after it).
    pub zxid: Zxid,
}

impl fmt::Display for FencingToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "epoch {} (zxid {})", self.epoch, self.zxid)
    }
}

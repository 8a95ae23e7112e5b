//! Small protocol newtypes shared by the client and the recipes.

use std::fmt;

use rzk_zxid::Zxid;

/// A ZooKeeper session id, as assigned by the server. Opaque; displayed in hex like
/// ZooKeeper's own logs (`0x1000006ed6f0024`).
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct SessionId(pub i64);

impl SessionId {
    /// The value a node's `ephemeralOwner` has when it is not an ephemeral.
    pub const NONE: SessionId = SessionId(0);
}

impl fmt::Display for SessionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#x}", self.0)
    }
}

impl fmt::Debug for SessionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SessionId({:#x})", self.0)
    }
}

/// The metadata of a znode (ZooKeeper's `Stat`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Stat {
    /// Zxid of the create.
    pub czxid: Zxid,
    /// Zxid of the last setData.
    pub mzxid: Zxid,
    /// Creation time, ms since the Unix epoch (server clock).
    pub ctime_ms: i64,
    /// Last modification time, ms since the Unix epoch (server clock).
    pub mtime_ms: i64,
    /// Data version, +1 per setData.
    pub version: i32,
    /// Child version, +1 per child create or delete.
    pub cversion: i32,
    /// ACL version, +1 per setACL.
    pub aversion: i32,
    /// The owning session of an ephemeral node; [`SessionId::NONE`] otherwise.
    pub ephemeral_owner: SessionId,
    /// Length of the data in bytes.
    pub data_length: i32,
    /// Number of children.
    pub num_children: i32,
    /// Zxid of the last child create or delete.
    pub pzxid: Zxid,
}

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

//! What a node's owner value means, and the indexes of nodes by owner:
//! ephemerals per session, containers and TTL nodes.
//!
//! A znode's `ephemeralOwner` field carries one of four things, encoded as
//! ZooKeeper encodes them: 0 (a persistent node), a session id (an
//! ephemeral), `Long.MIN_VALUE` (a container), or a TTL with its top byte
//! tagged `0xFF` (a TTL node). Only a session id is shown to clients.
//!
//! Owns the sets of paths that session close and expiry (ephemerals) and
//! the reaper (containers, TTL nodes) walk, so that neither has to scan the
//! tree. Relies on the tree to call [`OwnerIndex::insert`] for every node it
//! links and [`OwnerIndex::remove`] for every node it unlinks, with the
//! node's full path.

use std::collections::BTreeSet;

use foldhash::HashMap;

/// The owner value ZooKeeper gives containers (`Long.MIN_VALUE`).
pub const CONTAINER_OWNER: i64 = i64::MIN;
/// The top byte of a TTL node's owner value.
const TTL_OWNER_TAG: u64 = 0xFF00_0000_0000_0000;
/// The largest TTL ZooKeeper accepts: 2^40 − 1 ms.
pub const TTL_MAX_MS: i64 = (1 << 40) - 1;

/// The owner value of a TTL node with `ttl_ms`.
pub fn ttl_owner(ttl_ms: i64) -> i64 {
    (TTL_OWNER_TAG | (ttl_ms as u64 & TTL_MAX_MS as u64)) as i64
}

/// The TTL encoded in an owner value, if it is a TTL node's.
pub fn owner_ttl(owner: i64) -> Option<i64> {
    ((owner as u64) & TTL_OWNER_TAG == TTL_OWNER_TAG).then_some(owner & TTL_MAX_MS)
}

/// Whether an owner value is a session (a real ephemeral).
pub fn owner_is_session(owner: i64) -> bool {
    owner != 0 && owner != CONTAINER_OWNER && owner_ttl(owner).is_none()
}

/// The paths of the nodes whose owner value is not 0, by kind.
#[derive(Debug, Default)]
#[cfg_attr(test, derive(Clone))]
pub(super) struct OwnerIndex {
    /// Ephemeral paths per owning session (getEphemerals, close/expiry).
    ephemerals: HashMap<i64, BTreeSet<String>>,
    /// Containers by path, for the reaper.
    containers: BTreeSet<String>,
    /// TTL nodes by path, for the reaper.
    ttls: BTreeSet<String>,
}

impl OwnerIndex {
    /// Indexes the node at `p` with owner value `owner`.
    #[inline]
    pub(super) fn insert(&mut self, p: &str, owner: i64) {
        if owner == CONTAINER_OWNER {
            self.containers.insert(p.to_owned());
        } else if owner_ttl(owner).is_some() {
            self.ttls.insert(p.to_owned());
        } else if owner != 0 {
            self.ephemerals
                .entry(owner)
                .or_default()
                .insert(p.to_owned());
        }
    }

    /// Drops the node at `p` with owner value `owner` from the index (a
    /// session with no ephemeral left is dropped too).
    #[inline]
    pub(super) fn remove(&mut self, p: &str, owner: i64) {
        if owner == CONTAINER_OWNER {
            self.containers.remove(p);
        } else if owner_ttl(owner).is_some() {
            self.ttls.remove(p);
        } else if owner != 0 {
            if let Some(set) = self.ephemerals.get_mut(&owner) {
                set.remove(p);
                if set.is_empty() {
                    self.ephemerals.remove(&owner);
                }
            }
        }
    }

    /// The ephemeral paths of `session`.
    pub(super) fn ephemerals_of(&self, session: i64) -> Option<&BTreeSet<String>> {
        self.ephemerals.get(&session)
    }

    /// Every session that owns ephemerals, with its paths.
    pub(super) fn all_ephemerals(&self) -> &HashMap<i64, BTreeSet<String>> {
        &self.ephemerals
    }

    /// Ephemeral node count.
    pub(super) fn ephemeral_count(&self) -> usize {
        self.ephemerals.values().map(BTreeSet::len).sum()
    }

    /// Paths of containers.
    pub(super) fn containers(&self) -> &BTreeSet<String> {
        &self.containers
    }

    /// Paths of TTL nodes.
    pub(super) fn ttls(&self) -> &BTreeSet<String> {
        &self.ttls
    }
}

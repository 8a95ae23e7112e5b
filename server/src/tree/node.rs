//! One znode, and the slab the tree keeps its znodes in.
//!
//! Owns the node's in-memory form (its stored Stat fields and one
//! `[name | data]` allocation), the slab of fixed-size chunks the nodes live
//! in, and the children tables through which a path is walked. Every other
//! part of the tree reaches a node through a slab index ([`Slab::get`],
//! [`Slab::child`]); nothing here knows paths, owners or snapshots beyond
//! the generation mark a snapshot leaves on a node it has written.
//!
//! Relies on: the ACL interner for a node's thin ACL pointer, and on its
//! callers to keep a parent's table and its children's slots in step (a
//! table holds the indices of live nodes only).

use std::hash::BuildHasher;

use bytes::Bytes;
use hashbrown::HashTable;
use rzk_wire::{SessionId, Stat};
use rzk_zxid::Zxid;

use super::index::owner_is_session;
use crate::acl::AclRef;

/// The slab index of the root, `/`: the first slot handed out.
pub(super) const ROOT: u32 = 0;
/// Slots per slab chunk (a power of two): 1024 nodes, 104 KiB.
const SLAB_CHUNK_SHIFT: u32 = 10;
const SLAB_CHUNK: usize = 1 << SLAB_CHUNK_SHIFT;

/// `name_len`'s top bit: the data is null (kazoo's empty data is an empty
/// buffer, not null: the two stay apart).
const NULL_DATA: u32 = 1 << 31;

/// A node's children: their slab indices, hashed by their names (which the
/// children store).
pub(super) type Children = HashTable<u32>;

/// One znode: 104 bytes plus one allocation for its name and data, and 4
/// bytes (with the table's overhead, about 7) in its parent's children table.
#[derive(Clone, Debug)]
pub struct Node {
    /// The ACL (interned; a thin pointer).
    pub acl: AclRef,
    /// Stat fields that are stored (the others are derived).
    pub czxid: u64,
    /// Zxid of the last setData.
    pub mzxid: u64,
    /// Zxid of the last child create or delete.
    pub pzxid: u64,
    /// Creation time (ms).
    pub ctime: i64,
    /// Last setData time (ms).
    pub mtime: i64,
    /// Data version.
    pub version: i32,
    /// ACL version.
    pub aversion: i32,
    /// The create counter C: successful child creates ever. Sequence numbers
    /// and cversion derive from it.
    pub ccount: i32,
    /// Ephemeral owner, container or TTL encoding, or 0.
    pub owner: i64,
    /// The snapshot generation that has written this node already.
    pub(super) snap_gen: u32,
    /// The length of the name at the start of `blob`, and [`NULL_DATA`].
    name_len: u32,
    /// The node's name (the last component of its path), then its data.
    blob: Box<[u8]>,
    /// The children; `None` for a leaf (8 bytes instead of an empty table).
    pub(super) children: Option<Box<Children>>,
}

/// `[name | data]` in one allocation of exactly that size.
fn make_blob(name: &[u8], data: Option<&[u8]>) -> Box<[u8]> {
    let data = data.unwrap_or_default();
    let mut v = Vec::with_capacity(name.len() + data.len());
    v.extend_from_slice(name);
    v.extend_from_slice(data);
    v.into_boxed_slice()
}

impl Node {
    /// A node named `name` (the last component of its path), created at
    /// `zxid` and `time`, with no children.
    #[inline]
    pub(super) fn new(
        name: &str,
        data: Option<&[u8]>,
        acl: AclRef,
        owner: i64,
        zxid: u64,
        time: i64,
    ) -> Node {
        Node {
            acl,
            czxid: zxid,
            mzxid: zxid,
            pzxid: zxid,
            ctime: time,
            mtime: time,
            version: 0,
            aversion: 0,
            ccount: 0,
            owner,
            snap_gen: 0,
            name_len: name.len() as u32 | if data.is_none() { NULL_DATA } else { 0 },
            blob: make_blob(name.as_bytes(), data),
            children: None,
        }
    }

    /// The node's name: the last component of its path (empty for `/`).
    #[inline]
    pub(super) fn name(&self) -> &[u8] {
        &self.blob[..(self.name_len & !NULL_DATA) as usize]
    }

    /// The data, borrowed; `None` for null data.
    #[inline]
    pub fn data_slice(&self) -> Option<&[u8]> {
        if self.name_len & NULL_DATA != 0 {
            return None;
        }
        Some(&self.blob[(self.name_len & !NULL_DATA) as usize..])
    }

    /// The data, copied into a buffer a reply can own; `None` for null data.
    /// (The tree keeps one exact allocation per node, not a shared buffer
    /// whose header would cost every node read 32 bytes more.)
    pub fn data(&self) -> Option<Bytes> {
        self.data_slice().map(Bytes::copy_from_slice)
    }

    /// The length of the data (0 for null data).
    #[inline]
    pub fn data_len(&self) -> usize {
        self.data_slice().map_or(0, <[u8]>::len)
    }

    /// Replaces the data, keeping the name.
    #[inline]
    pub(super) fn set_data(&mut self, data: Option<&[u8]>) {
        let name_len = self.name_len & !NULL_DATA;
        self.blob = make_blob(&self.blob[..name_len as usize], data);
        self.name_len = name_len | if data.is_none() { NULL_DATA } else { 0 };
    }

    /// How many children the node has.
    #[inline]
    pub fn num_children(&self) -> i32 {
        self.children.as_ref().map_or(0, |c| c.len() as i32)
    }

    /// The reported cversion: `2·C − numChildren`. ZooKeeper adds one to a
    /// parent's cversion for every child created and every child deleted;
    /// C counts the creates, and the deletes are the creates whose child is
    /// gone, `C − numChildren`. So nothing but C is stored.
    pub fn cversion(&self) -> i32 {
        self.ccount
            .wrapping_mul(2)
            .wrapping_sub(self.num_children())
    }

    /// The node's Stat as clients see it.
    pub fn stat(&self) -> Stat {
        Stat {
            czxid: Zxid::from_u64(self.czxid),
            mzxid: Zxid::from_u64(self.mzxid),
            ctime: self.ctime,
            mtime: self.mtime,
            version: self.version,
            cversion: self.cversion(),
            aversion: self.aversion,
            ephemeral_owner: SessionId(if owner_is_session(self.owner) {
                self.owner
            } else {
                0
            }),
            data_length: self.data_len() as i32,
            num_children: self.num_children(),
            pzxid: Zxid::from_u64(self.pzxid),
        }
    }
}

/// Where the nodes live: chunks of [`SLAB_CHUNK`] slots (no slack of a
/// doubling vector, no copy when it grows; freed slots are reused), and the
/// hasher of the children tables that link them.
#[derive(Debug)]
#[cfg_attr(test, derive(Clone))]
pub(super) struct Slab {
    /// Slot `i` is `chunks[i / SLAB_CHUNK][i % SLAB_CHUNK]`.
    chunks: Vec<Box<[Option<Node>]>>,
    /// Slots handed out so far (the next fresh index).
    slots: u32,
    /// Freed slots, reused first.
    free: Vec<u32>,
    /// Hashes children's names; one seed per tree (random per process:
    /// names are chosen by clients, so an unseeded hash would let one make
    /// many names collide under a parent).
    hasher: foldhash::fast::RandomState,
}

impl Slab {
    /// A slab with no slot handed out.
    pub(super) fn new() -> Slab {
        Slab {
            chunks: Vec::new(),
            slots: 0,
            free: Vec::new(),
            hasher: foldhash::fast::RandomState::default(),
        }
    }

    /// Whether no slot was ever handed out (the root's is the first).
    #[inline]
    pub(super) fn is_unused(&self) -> bool {
        self.slots == 0
    }

    /// The chunk list at the size `nodes` slots take, at once (a snapshot
    /// load that knows its node count). A reservation that cannot be had is
    /// simply not made.
    pub(super) fn reserve_chunks(&mut self, nodes: u64) {
        let _ = self
            .chunks
            .try_reserve_exact((nodes as usize).div_ceil(SLAB_CHUNK));
    }

    /// The hasher of the children tables (a snapshot load's parsing thread
    /// hashes names with a copy).
    pub(super) fn hasher(&self) -> foldhash::fast::RandomState {
        self.hasher
    }

    /// A free slot: a freed one, or the next fresh one (a new chunk when the
    /// last is full).
    #[inline]
    pub(super) fn alloc(&mut self) -> u32 {
        if let Some(i) = self.free.pop() {
            return i;
        }
        let idx = self.slots;
        if idx as usize == self.chunks.len() * SLAB_CHUNK {
            let chunk: Vec<Option<Node>> = (0..SLAB_CHUNK).map(|_| None).collect();
            self.chunks.push(chunk.into_boxed_slice());
        }
        self.slots += 1;
        idx
    }

    /// Stores `node` in the slot `idx` (from [`Slab::alloc`]).
    #[inline]
    pub(super) fn put(&mut self, idx: u32, node: Node) {
        *self.slot_mut(idx) = Some(node);
    }

    /// Empties the slot `idx`, which the caller knows is live, and frees it
    /// for reuse; the node it held.
    #[inline]
    pub(super) fn remove(&mut self, idx: u32) -> Node {
        let node = self
            .slot_mut(idx)
            .take()
            .expect("a live index names a live node");
        self.free.push(idx);
        node
    }

    #[inline]
    fn slot(&self, idx: u32) -> Option<&Option<Node>> {
        self.chunks
            .get((idx >> SLAB_CHUNK_SHIFT) as usize)
            .map(|c| &c[idx as usize & (SLAB_CHUNK - 1)])
    }

    #[inline]
    fn slot_mut(&mut self, idx: u32) -> &mut Option<Node> {
        &mut self.chunks[(idx >> SLAB_CHUNK_SHIFT) as usize][idx as usize & (SLAB_CHUNK - 1)]
    }

    /// The live node at `idx`, if any.
    #[inline]
    pub(super) fn get(&self, idx: u32) -> Option<&Node> {
        self.slot(idx)?.as_ref()
    }

    /// The live node at `idx`, if any, to change.
    #[inline]
    pub(super) fn get_mut(&mut self, idx: u32) -> Option<&mut Node> {
        self.chunks
            .get_mut((idx >> SLAB_CHUNK_SHIFT) as usize)
            .map(|c| &mut c[idx as usize & (SLAB_CHUNK - 1)])?
            .as_mut()
    }

    /// The node at `idx`, which the caller knows is live.
    #[inline]
    pub(super) fn node_mut(&mut self, idx: u32) -> &mut Node {
        self.slot_mut(idx)
            .as_mut()
            .expect("a live index names a live node")
    }

    /// The hash of a child's name in its parent's table.
    #[inline]
    pub(super) fn hash(&self, name: &[u8]) -> u64 {
        name_hash(&self.hasher, name)
    }

    /// The hash of the name of the node at `idx` (a table's rehash).
    #[inline]
    fn hash_of(&self, idx: u32) -> u64 {
        self.hash(self.get(idx).map_or(&[][..], Node::name))
    }

    /// The child of `parent` named `name`.
    #[inline]
    pub(super) fn child(&self, parent: &Node, name: &[u8]) -> Option<u32> {
        let children = parent.children.as_ref()?;
        children
            .find(self.hash(name), |&i| {
                self.get(i).is_some_and(|n| n.name() == name)
            })
            .copied()
    }

    /// Adds the node at `idx` (in the slab already, with its name, whose
    /// hash is `hash`) to the children of `parent`; false if `parent` has a
    /// child of that name.
    #[inline]
    pub(super) fn link_child(&mut self, parent: u32, idx: u32, hash: u64) -> bool {
        // The table is taken out of its node while it may rehash: rehashing
        // reads the children's names from the slab.
        let mut table = self.node_mut(parent).children.take().unwrap_or_default();
        let name = self.get(idx).map_or(&[][..], Node::name);
        let added = match table.entry(
            hash,
            |&i| self.get(i).is_some_and(|n| n.name() == name),
            |&i| self.hash_of(i),
        ) {
            hashbrown::hash_table::Entry::Occupied(_) => false,
            hashbrown::hash_table::Entry::Vacant(v) => {
                v.insert(idx);
                true
            }
        };
        self.node_mut(parent).children = (!table.is_empty()).then_some(table);
        added
    }

    /// Removes the child named `name` from `parent`'s table; its index.
    #[inline]
    pub(super) fn unlink_child(&mut self, parent: u32, name: &[u8]) -> Option<u32> {
        let mut table = self.node_mut(parent).children.take()?;
        let found = table
            .find_entry(self.hash(name), |&i| {
                self.get(i).is_some_and(|n| n.name() == name)
            })
            .ok()
            .map(|e| e.remove().0);
        self.node_mut(parent).children = (!table.is_empty()).then_some(table);
        found
    }

    /// Sizes `parent`'s table for `additional` more children (snapshot load);
    /// a reservation that cannot be had is not made (the table grows).
    pub(super) fn reserve_children(&mut self, parent: u32, additional: usize) {
        let mut table = self.node_mut(parent).children.take().unwrap_or_default();
        let _ = table.try_reserve(additional, |&i| self.hash_of(i));
        self.node_mut(parent).children = Some(table);
    }

    /// Gives back a table's room if it is much larger than its children.
    pub(super) fn shrink_children(&mut self, parent: u32) {
        let Some(mut table) = self.node_mut(parent).children.take() else {
            return;
        };
        if table.capacity() > 2 * table.len() + 16 {
            table.shrink_to_fit(|&i| self.hash_of(i));
        }
        self.node_mut(parent).children = (!table.is_empty()).then_some(table);
    }
}

/// The hash of a child's name in its parent's table (one function, so the
/// parsing thread of a load hashes exactly as the tree does).
#[inline]
pub(super) fn name_hash(hasher: &foldhash::fast::RandomState, name: &[u8]) -> u64 {
    hasher.hash_one(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_node_stays_compact() {
        // The memory goal (200k znodes at a tenth of ZooKeeper's RSS) rests on
        // this: no path, no name and no derived field stored per node.
        assert!(
            std::mem::size_of::<Node>() <= 104,
            "{}",
            std::mem::size_of::<Node>()
        );
        assert_eq!(
            std::mem::size_of::<Option<Node>>(),
            std::mem::size_of::<Node>()
        );
    }
}

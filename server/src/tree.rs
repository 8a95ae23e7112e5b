//! The data tree: znodes, their Stat, the per-session ephemeral index, and
//! copy-on-write snapshots that never pause writes.
//!
//! Representation: nodes live in a slab of fixed-size chunks (no slack of a
//! doubling vector, no copy when it grows; freed slots are reused) and are
//! found by walking the path from the root through each node's children
//! table. A node stores its own name and its data in one allocation
//! (`[name | data]`), and a children table holds only the children's slab
//! indices (4 bytes each), hashed by the name each index points to. Neither
//! the path nor any derived field is stored: `dataLength`, `numChildren` and
//! `cversion` are derived (`cversion` is `2·C − numChildren`, with C the
//! node's create counter, doc §8.1). ACL lists are interned: nodes that share
//! a list share one allocation. A znode of 128 bytes of data costs about 104
//! bytes of node, its name and data in one malloc chunk, and about 7 bytes in
//! its parent's table.
//!
//! Snapshots (see [`DataTree::begin_snapshot`]): a snapshot is consistent at
//! the zxid it starts at and is written a few thousand nodes at a time between
//! transactions. Before a transaction changes a node the snapshot has not yet
//! written, the node's old state is written first (copy-on-write, node by node),
//! so the snapshot is exactly the tree at its zxid while writes go on.

use std::collections::BTreeSet;
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::Arc;

use std::hash::BuildHasher;

use bytes::{BufMut, Bytes, BytesMut};
use foldhash::{HashMap, HashMapExt};
use hashbrown::HashTable;
use rzk_wire::{Acl, ByteString, ErrorCode, SessionId, Stat};
use rzk_zxid::Zxid;

use crate::acl::{AclInterner, AclRef};
use crate::path;
use crate::txn::{self, TxnError};

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

/// `name_len`'s top bit: the data is null (kazoo's empty data is an empty
/// buffer, not null: the two stay apart).
const NULL_DATA: u32 = 1 << 31;

/// A node's children: their slab indices, hashed by their names (which the
/// children store).
type Children = HashTable<u32>;

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
    snap_gen: u32,
    /// The length of the name at the start of `blob`, and [`NULL_DATA`].
    name_len: u32,
    /// The node's name (the last component of its path), then its data.
    blob: Box<[u8]>,
    /// The children; `None` for a leaf (8 bytes instead of an empty table).
    children: Option<Box<Children>>,
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
    fn new(name: &str, data: Option<&[u8]>, acl: AclRef, owner: i64, zxid: u64, time: i64) -> Node {
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
    fn name(&self) -> &[u8] {
        &self.blob[..(self.name_len & !NULL_DATA) as usize]
    }

    /// The data, borrowed; `None` for null data.
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
    pub fn data_len(&self) -> usize {
        self.data_slice().map_or(0, <[u8]>::len)
    }

    /// Replaces the data, keeping the name.
    fn set_data(&mut self, data: Option<&[u8]>) {
        let name_len = self.name_len & !NULL_DATA;
        self.blob = make_blob(&self.blob[..name_len as usize], data);
        self.name_len = name_len | if data.is_none() { NULL_DATA } else { 0 };
    }

    /// How many children the node has.
    pub fn num_children(&self) -> i32 {
        self.children.as_ref().map_or(0, |c| c.len() as i32)
    }

    /// The reported cversion: `2·C − numChildren` (doc §8.1).
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

/// A session as snapshots record it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SessionRecord {
    /// The session id.
    pub id: i64,
    /// Its timeout (as logged at creation).
    pub timeout_ms: i32,
    /// Its password.
    pub password: [u8; 16],
}

/// A node as an import restores it: every stored field given as the source
/// had it (ZooKeeper persists the create counter as `cversion`: doc §8.1).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ImportedNode {
    /// Its path.
    pub path: String,
    /// Its data (`None`: null).
    pub data: Option<Bytes>,
    /// Its ACL.
    pub acl: Vec<Acl>,
    /// Creating zxid.
    pub czxid: u64,
    /// Last setData zxid.
    pub mzxid: u64,
    /// Last child create or delete zxid.
    pub pzxid: u64,
    /// Creation time (ms).
    pub ctime: i64,
    /// Last setData time (ms).
    pub mtime: i64,
    /// Data version.
    pub version: i32,
    /// ACL version.
    pub aversion: i32,
    /// The create counter C (the reported cversion is `2·C − numChildren`).
    pub ccount: i32,
    /// Ephemeral owner, container or TTL encoding, or 0.
    pub owner: i64,
}

/// A snapshot being written.
#[derive(Debug)]
#[cfg_attr(test, derive(Clone))]
struct SnapWriter {
    gen: u32,
    /// The zxid the snapshot is consistent at.
    zxid: u64,
    /// The DFS from the root: one frame per node whose children are still
    /// being visited.
    frames: Vec<SnapFrame>,
    /// Whether the DFS has started (visited the root).
    root_visited: bool,
    /// Bytes produced and not yet taken.
    out: BytesMut,
    /// ACL lists written so far, by their address, and their snapshot ids.
    acl_refs: HashMap<usize, u32>,
    records: u64,
    /// The capacity of a fresh output buffer once the caller takes the
    /// output in chunks ([`DataTree::take_snapshot_output`]); 0 until then.
    chunk_bytes: usize,
}

/// A node whose children a snapshot is visiting.
///
/// The children's names are copied into one buffer when the frame is made
/// (one allocation, not one `String` per child): a parent with a million
/// children costs one pass over its table, and each later step takes a few
/// children off the end.
#[derive(Debug)]
#[cfg_attr(test, derive(Clone))]
struct SnapFrame {
    /// The parent's path.
    path: Vec<u8>,
    /// The children's names, back to back.
    names: Vec<u8>,
    /// Each child's slab index and the end of its name in `names` (its start
    /// is the previous child's end).
    kids: Vec<(u32, u32)>,
}

impl SnapFrame {
    /// The next child to visit and its path, written into `path`.
    fn pop(&mut self, path: &mut Vec<u8>) -> Option<u32> {
        let (idx, end) = self.kids.pop()?;
        let start = self.kids.last().map_or(0, |k| k.1);
        path.clear();
        path.extend_from_slice(&self.path);
        if self.path != b"/" {
            path.push(b'/');
        }
        path.extend_from_slice(&self.names[start as usize..end as usize]);
        self.names.truncate(start as usize);
        Some(idx)
    }
}

/// The data tree.
#[derive(Debug)]
#[cfg_attr(test, derive(Clone))]
pub struct DataTree {
    /// The slab: chunks of [`SLAB_CHUNK`] slots; slot `i` is
    /// `chunks[i / SLAB_CHUNK][i % SLAB_CHUNK]`.
    chunks: Vec<Box<[Option<Node>]>>,
    /// Slots handed out so far (the next fresh index).
    slots: u32,
    /// Freed slots, reused first.
    free: Vec<u32>,
    /// Hashes children's names; one seed per tree (random per process:
    /// names are chosen by clients, so an unseeded hash would let one make
    /// many names collide under a parent).
    hasher: foldhash::fast::RandomState,
    acls: AclInterner,
    /// Ephemeral paths per owning session (getEphemerals, close/expiry).
    ephemerals: HashMap<i64, BTreeSet<String>>,
    /// Containers and TTL nodes by path, for the reaper.
    containers: BTreeSet<String>,
    ttls: BTreeSet<String>,
    /// Sum of path and data lengths, ZooKeeper's approximate_data_size.
    data_bytes: u64,
    node_count: usize,
    snap_gen: u32,
    snap: Option<SnapWriter>,
}

const ROOT: u32 = 0;
/// Slots per slab chunk (a power of two): 1024 nodes, 104 KiB.
const SLAB_CHUNK_SHIFT: u32 = 10;
const SLAB_CHUNK: usize = 1 << SLAB_CHUNK_SHIFT;
/// The tree's snapshot format, version 2: the header carries the node count.
const SNAP_MAGIC: &[u8; 8] = b"RZKTREE2";
/// Version 1 (no node count in the header): still loaded.
const SNAP_MAGIC_V1: &[u8; 8] = b"RZKSNAP1";
/// Magic, zxid, node count, session count and the end marker.
const SNAP_HEADER_BYTES: usize = 8 + 8 + 8 + 4 + 9;
/// A session in a snapshot: id, timeout, password.
const SNAP_SESSION_BYTES: usize = 8 + 4 + 16;
/// How much a snapshot load asks its reader for at a time. The load's buffer
/// is this large, or as large as the largest record if that is larger (a
/// record is one znode: its path, its data, bounded by `jute.maxbuffer`, and
/// its ACL).
pub const SNAPSHOT_LOAD_READ_BYTES: usize = 256 * 1024;
/// Without a node count (version 1), a children map is sized up front for
/// at most this many children; past it, it grows.
const LOAD_CHILDREN_RESERVE_UNKNOWN_MAX: u64 = 1 << 16;
/// A record's bytes besides its path and data: tag, two lengths, ACL ref and
/// the stored Stat fields.
const SNAP_RECORD_FIXED_BYTES: usize = 1 + 4 + 4 + 4 + 5 * 8 + 3 * 4 + 8;

impl Default for DataTree {
    fn default() -> Self {
        DataTree::new()
    }
}

impl DataTree {
    /// The initial tree of doc §8.2: `/`, `/zookeeper`, `/zookeeper/quota`,
    /// `/zookeeper/config` (READ-only to the world, aversion −1).
    pub fn new() -> DataTree {
        let mut t = DataTree::empty();
        let open = t.acls.intern(&Acl::open_unsafe());
        for p in ["/", "/zookeeper", "/zookeeper/quota"] {
            let node = Node::new(path::name(p), Some(&[]), open.clone(), 0, 0, 0);
            t.insert_raw(p, node);
        }
        let read = t.acls.intern(&Acl::read_unsafe());
        let mut config = Node::new("config", Some(&[]), read, 0, 0, 0);
        config.aversion = -1;
        t.insert_raw("/zookeeper/config", config);
        t
    }

    fn empty() -> DataTree {
        DataTree {
            chunks: Vec::new(),
            slots: 0,
            free: Vec::new(),
            hasher: foldhash::fast::RandomState::default(),
            acls: AclInterner::default(),
            ephemerals: HashMap::new(),
            containers: BTreeSet::new(),
            ttls: BTreeSet::new(),
            data_bytes: 0,
            node_count: 0,
            snap_gen: 0,
            snap: None,
        }
    }

    /// Inserts a node without touching its parent's counters (initial tree and
    /// snapshot load). The parent must exist, except for `/`; `node` carries
    /// the last component of `p` as its name.
    fn insert_raw(&mut self, p: &str, node: Node) -> Option<u32> {
        if p == "/" {
            if self.slots != 0 {
                return None;
            }
            let idx = self.alloc();
            debug_assert_eq!(idx, ROOT);
            self.account(p, &node);
            *self.slot_mut(idx) = Some(node);
            return Some(idx);
        }
        let parent = self.lookup(path::parent(p)?)?;
        self.insert_child(parent, p, node).ok()
    }

    /// Inserts the nodes of one depth of a snapshot being loaded (copy-on-write
    /// records that came before their parent), each under its parent.
    fn insert_level(&mut self, level: Vec<(String, Node)>) -> Result<(), TxnError> {
        for (p, node) in level {
            let orphan = || TxnError(format!("snapshot node {p} has no parent or is repeated"));
            if p == "/" {
                self.insert_raw(&p, node).ok_or_else(orphan)?;
                continue;
            }
            let parent = path::parent(&p)
                .and_then(|pp| self.lookup(pp))
                .ok_or_else(orphan)?;
            self.insert_child(parent, &p, node).map_err(|()| orphan())?;
        }
        Ok(())
    }

    /// Inserts `node` (path `p`; its name is the last component) under the
    /// node at `parent_idx`, without touching the parent's counters. Fails,
    /// changing nothing, if the parent has a child of that name.
    fn insert_child(&mut self, parent_idx: u32, p: &str, node: Node) -> Result<u32, ()> {
        let hash = self.hash(node.name());
        self.insert_child_hashed(parent_idx, p, node, hash)
    }

    /// [`DataTree::insert_child`] with the hash of the node's name given
    /// (a snapshot load hashes the names on its parsing thread).
    fn insert_child_hashed(
        &mut self,
        parent_idx: u32,
        p: &str,
        node: Node,
        hash: u64,
    ) -> Result<u32, ()> {
        debug_assert_eq!(hash, self.hash(node.name()), "hashed with another seed");
        let idx = self.alloc();
        *self.slot_mut(idx) = Some(node);
        if !self.link_child(parent_idx, idx, hash) {
            *self.slot_mut(idx) = None;
            self.free.push(idx);
            return Err(());
        }
        let node = self.node(idx).expect("just stored");
        let (owner, len) = (node.owner, node.data_len());
        self.index_owner(p, owner);
        self.data_bytes += (p.len() + len) as u64;
        self.node_count += 1;
        Ok(idx)
    }

    /// Counts the root in (the other nodes are counted by `insert_child`).
    fn account(&mut self, p: &str, node: &Node) {
        self.index_owner(p, node.owner);
        self.data_bytes += (p.len() + node.data_len()) as u64;
        self.node_count += 1;
    }

    /// Counts a removed node out.
    fn unaccount(&mut self, p: &str, node: &Node) {
        self.unindex_owner(p, node.owner);
        self.data_bytes = self
            .data_bytes
            .saturating_sub((p.len() + node.data_len()) as u64);
        self.node_count -= 1;
    }

    /// A free slot: a freed one, or the next fresh one (a new chunk when the
    /// last is full).
    fn alloc(&mut self) -> u32 {
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

    fn slot(&self, idx: u32) -> Option<&Option<Node>> {
        self.chunks
            .get((idx >> SLAB_CHUNK_SHIFT) as usize)
            .map(|c| &c[idx as usize & (SLAB_CHUNK - 1)])
    }

    fn slot_mut(&mut self, idx: u32) -> &mut Option<Node> {
        &mut self.chunks[(idx >> SLAB_CHUNK_SHIFT) as usize][idx as usize & (SLAB_CHUNK - 1)]
    }

    /// The live node at `idx`, if any.
    fn node(&self, idx: u32) -> Option<&Node> {
        self.slot(idx)?.as_ref()
    }

    fn hash(&self, name: &[u8]) -> u64 {
        name_hash(&self.hasher, name)
    }

    /// The hash of the name of the node at `idx` (a table's rehash).
    fn hash_of(&self, idx: u32) -> u64 {
        self.hash(self.node(idx).map_or(&[][..], Node::name))
    }

    /// The child of `parent` named `name`.
    fn child(&self, parent: &Node, name: &[u8]) -> Option<u32> {
        let children = parent.children.as_ref()?;
        children
            .find(self.hash(name), |&i| {
                self.node(i).is_some_and(|n| n.name() == name)
            })
            .copied()
    }

    /// Adds the node at `idx` (in the slab already, with its name, whose
    /// hash is `hash`) to the children of `parent`; false if `parent` has a
    /// child of that name.
    fn link_child(&mut self, parent: u32, idx: u32, hash: u64) -> bool {
        // The table is taken out of its node while it may rehash: rehashing
        // reads the children's names from the slab.
        let mut table = self.node_mut(parent).children.take().unwrap_or_default();
        let name = self.node(idx).map_or(&[][..], Node::name);
        let added = match table.entry(
            hash,
            |&i| self.node(i).is_some_and(|n| n.name() == name),
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
    fn unlink_child(&mut self, parent: u32, name: &[u8]) -> Option<u32> {
        let mut table = self.node_mut(parent).children.take()?;
        let found = table
            .find_entry(self.hash(name), |&i| {
                self.node(i).is_some_and(|n| n.name() == name)
            })
            .ok()
            .map(|e| e.remove().0);
        self.node_mut(parent).children = (!table.is_empty()).then_some(table);
        found
    }

    /// Sizes `parent`'s table for `additional` more children (snapshot load);
    /// a reservation that cannot be had is not made (the table grows).
    fn reserve_children(&mut self, parent: u32, additional: usize) {
        let mut table = self.node_mut(parent).children.take().unwrap_or_default();
        let _ = table.try_reserve(additional, |&i| self.hash_of(i));
        self.node_mut(parent).children = Some(table);
    }

    /// Gives back a table's room if it is much larger than its children.
    fn shrink_children(&mut self, parent: u32) {
        let Some(mut table) = self.node_mut(parent).children.take() else {
            return;
        };
        if table.capacity() > 2 * table.len() + 16 {
            table.shrink_to_fit(|&i| self.hash_of(i));
        }
        self.node_mut(parent).children = (!table.is_empty()).then_some(table);
    }

    fn index_owner(&mut self, p: &str, owner: i64) {
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

    fn unindex_owner(&mut self, p: &str, owner: i64) {
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

    fn node_mut(&mut self, idx: u32) -> &mut Node {
        self.slot_mut(idx)
            .as_mut()
            .expect("a live index names a live node")
    }

    /// The slab index of the node at `path`. Any string is accepted: a malformed
    /// path simply finds nothing.
    pub fn lookup(&self, p: &str) -> Option<u32> {
        if !p.starts_with('/') {
            return None;
        }
        let mut idx = ROOT;
        self.node(ROOT)?;
        if p.len() == 1 {
            return Some(ROOT);
        }
        for name in p[1..].split('/') {
            idx = self.child(self.node(idx)?, name.as_bytes())?;
        }
        Some(idx)
    }

    /// The node at `path`.
    pub fn get(&self, p: &str) -> Option<&Node> {
        self.lookup(p).and_then(|i| self.node(i))
    }

    /// The names of `node`'s children (a node of this tree), in no order.
    pub fn child_names(&self, node: &Node) -> Vec<ByteString> {
        node.children.as_ref().map_or_else(Vec::new, |c| {
            c.iter()
                .filter_map(|&i| self.node(i))
                .map(|n| ByteString::from(String::from_utf8_lossy(n.name()).as_ref()))
                .collect()
        })
    }

    /// How many nodes the tree has.
    pub fn node_count(&self) -> usize {
        self.node_count
    }

    /// Sum of path and data lengths (ZooKeeper's approximate data size).
    pub fn approximate_data_size(&self) -> u64 {
        self.data_bytes
    }

    /// The ephemeral paths of `session`.
    pub fn ephemerals_of(&self, session: i64) -> Option<&BTreeSet<String>> {
        self.ephemerals.get(&session)
    }

    /// Every session that owns ephemerals, with its paths.
    pub fn all_ephemerals(&self) -> &HashMap<i64, BTreeSet<String>> {
        &self.ephemerals
    }

    /// Ephemeral node count.
    pub fn ephemeral_count(&self) -> usize {
        self.ephemerals.values().map(BTreeSet::len).sum()
    }

    /// Paths of containers.
    pub fn containers(&self) -> &BTreeSet<String> {
        &self.containers
    }

    /// Paths of TTL nodes.
    pub fn ttl_nodes(&self) -> &BTreeSet<String> {
        &self.ttls
    }

    /// The number of descendants of the node at `idx` (not counting itself).
    pub fn descendant_count(&self, idx: u32) -> i64 {
        let mut count = 0i64;
        let mut stack = vec![idx];
        while let Some(i) = stack.pop() {
            if let Some(children) = self.node(i).and_then(|n| n.children.as_ref()) {
                count += children.len() as i64;
                stack.extend(children.iter().copied());
            }
        }
        count
    }

    /// Interns an ACL list.
    pub fn intern_acl(&mut self, acl: &[Acl]) -> AclRef {
        self.acls.intern(acl)
    }

    // ---- changes, applied from committed txns ----

    /// Creates the node at `p`: the parent's C goes up by 1 and its pzxid
    /// becomes `zxid`. Fails (without change) if the parent is missing or the
    /// node exists: prep has checked both, so a failure here is a bug the
    /// caller logs.
    pub fn create(
        &mut self,
        p: &str,
        data: Option<Bytes>,
        acl: &[Acl],
        owner: i64,
        zxid: u64,
        time: i64,
    ) -> Result<u32, ErrorCode> {
        let parent_path = path::parent(p).ok_or(ErrorCode::BadArguments)?;
        let parent = self.lookup(parent_path).ok_or(ErrorCode::NoNode)?;
        let name = path::name(p);
        if self
            .node(parent)
            .and_then(|n| self.child(n, name.as_bytes()))
            .is_some()
        {
            return Err(ErrorCode::NodeExists);
        }
        self.cow(parent, parent_path);
        let acl = self.acls.intern(acl);
        let mut node = Node::new(name, data.as_deref(), acl, owner, zxid, time);
        node.snap_gen = self.snap_gen;
        let idx = self
            .insert_child(parent, p, node)
            .map_err(|()| ErrorCode::NodeExists)?;
        let pn = self.node_mut(parent);
        pn.ccount = pn.ccount.wrapping_add(1);
        pn.pzxid = zxid;
        Ok(idx)
    }

    /// Deletes the leaf at `p`; the parent's pzxid becomes `zxid`. Returns the
    /// deleted node (its ACL decides who may see the deletion's events).
    pub fn delete(&mut self, p: &str, zxid: u64) -> Result<Node, ErrorCode> {
        let parent_path = path::parent(p).ok_or(ErrorCode::BadArguments)?;
        let parent = self.lookup(parent_path).ok_or(ErrorCode::NoNode)?;
        let name = path::name(p);
        let idx = self
            .node(parent)
            .and_then(|n| self.child(n, name.as_bytes()))
            .ok_or(ErrorCode::NoNode)?;
        if self.node(idx).is_some_and(|n| n.num_children() > 0) {
            return Err(ErrorCode::NotEmpty);
        }
        self.cow(idx, p);
        self.cow(parent, parent_path);
        self.unlink_child(parent, name.as_bytes());
        self.node_mut(parent).pzxid = zxid;
        let node = self.slot_mut(idx).take().expect("child index is live");
        self.free.push(idx);
        self.unaccount(p, &node);
        Ok(node)
    }

    /// Replaces the data at `p`: version + 1, mzxid and mtime updated.
    pub fn set_data(
        &mut self,
        p: &str,
        data: Option<Bytes>,
        zxid: u64,
        time: i64,
    ) -> Result<Stat, ErrorCode> {
        let idx = self.lookup(p).ok_or(ErrorCode::NoNode)?;
        self.cow(idx, p);
        let n = self.node_mut(idx);
        let old = n.data_len() as u64;
        let new = data.as_ref().map_or(0, |d| d.len() as u64);
        n.set_data(data.as_deref());
        n.version = n.version.wrapping_add(1);
        n.mzxid = zxid;
        n.mtime = time;
        let stat = n.stat();
        self.data_bytes = (self.data_bytes + new).saturating_sub(old);
        Ok(stat)
    }

    /// Sets `/zookeeper/config` to `data`, this member's view of the ensemble,
    /// as ZooKeeper's quorum peers do when they load their database
    /// (`ZKDatabase.initConfigInZKDatabase`): a local write, not a txn, with
    /// version −1, mzxid 0 (the configuration's version) and mtime `time_ms`.
    pub fn set_config_node(&mut self, data: &[u8], time_ms: i64) {
        const CONFIG: &str = "/zookeeper/config";
        let Some(idx) = self.lookup(CONFIG) else {
            return;
        };
        self.cow(idx, CONFIG);
        let n = self.node_mut(idx);
        let old = n.data_len() as u64;
        n.set_data(Some(data));
        n.version = -1;
        n.mzxid = 0;
        n.mtime = time_ms;
        self.data_bytes = (self.data_bytes + data.len() as u64).saturating_sub(old);
    }

    /// Replaces the ACL at `p`: aversion + 1.
    pub fn set_acl(&mut self, p: &str, acl: &[Acl]) -> Result<Stat, ErrorCode> {
        let idx = self.lookup(p).ok_or(ErrorCode::NoNode)?;
        self.cow(idx, p);
        let acl = self.acls.intern(acl);
        let n = self.node_mut(idx);
        n.acl = acl;
        n.aversion = n.aversion.wrapping_add(1);
        Ok(n.stat())
    }

    /// Drops interned ACL lists that no node uses.
    pub fn collect_acl_garbage(&mut self) {
        self.acls.collect_garbage();
    }

    // ---- snapshots ----

    /// Whether a snapshot is being written.
    pub fn snapshot_in_progress(&self) -> bool {
        self.snap.is_some()
    }

    /// Abandons the snapshot in progress, if any (its writer failed): what it
    /// produced is dropped, changed nodes are no longer copied for it, and a
    /// new one can begin.
    pub fn abort_snapshot(&mut self) {
        self.snap = None;
    }

    /// Starts a snapshot consistent at `zxid` (the last applied txn) with these
    /// sessions. Returns false if one is already being written.
    ///
    /// The snapshot is then produced by [`DataTree::snapshot_step`] and by
    /// copy-on-write as txns change nodes it has not written yet. Its bytes
    /// come either in one buffer (the last `snapshot_step` returns them all)
    /// or in chunks: [`DataTree::take_snapshot_output`] hands over what has
    /// been produced so far, and the last `snapshot_step` returns the rest.
    pub fn begin_snapshot(&mut self, zxid: Zxid, sessions: &[SessionRecord]) -> bool {
        if self.snap.is_some() {
            return false;
        }
        self.snap_gen = self.snap_gen.wrapping_add(1);
        // Sized once from the tree (a record is its path, its data and about
        // 70 bytes): the buffer does not grow by copies while nodes are written,
        // and the pages it does not use are never touched. A caller that takes
        // the output in chunks gives this buffer up with its first chunk.
        let estimate = SNAP_HEADER_BYTES
            + sessions.len() * SNAP_SESSION_BYTES
            + self.data_bytes as usize
            + self.node_count * SNAP_RECORD_FIXED_BYTES;
        let mut out = BytesMut::with_capacity(estimate + estimate / 16);
        out.put_slice(SNAP_MAGIC);
        out.put_u64(zxid.as_u64());
        // Exactly the records to come: one per node at `zxid` (the walk writes
        // those it reaches, copy-on-write those changed or deleted first).
        out.put_u64(self.node_count as u64);
        out.put_u32(sessions.len() as u32);
        for s in sessions {
            out.put_i64(s.id);
            out.put_i32(s.timeout_ms);
            out.put_slice(&s.password);
        }
        self.snap = Some(SnapWriter {
            gen: self.snap_gen,
            zxid: zxid.as_u64(),
            frames: Vec::new(),
            root_visited: false,
            out,
            acl_refs: HashMap::new(),
            records: 0,
            chunk_bytes: 0,
        });
        true
    }

    /// The bytes of the snapshot in progress produced so far (by steps and by
    /// copy-on-write) and not taken yet, if at least `min_bytes` of them are
    /// buffered; `None` otherwise, or when no snapshot is in progress.
    ///
    /// For streaming a snapshot in bounded chunks: call it after steps and
    /// after applying txns, write what it returns in order, and finish with
    /// the rest that the last [`DataTree::snapshot_step`] returns. The chunks
    /// and that rest, concatenated, are byte for byte what the one-buffer form
    /// would have returned. Once a chunk has been taken, the snapshot buffers
    /// at most about `min_bytes` plus one step's output (each chunk is its own
    /// allocation, freed when the caller drops it).
    pub fn take_snapshot_output(&mut self, min_bytes: usize) -> Option<Bytes> {
        let snap = self.snap.as_mut()?;
        if snap.out.is_empty() || snap.out.len() < min_bytes {
            return None;
        }
        if snap.chunk_bytes == 0 {
            snap.chunk_bytes = (min_bytes + min_bytes / 4).max(4096);
        }
        let fresh = BytesMut::with_capacity(snap.chunk_bytes);
        Some(std::mem::replace(&mut snap.out, fresh).freeze())
    }

    /// Writes up to `budget` nodes of the snapshot in progress. Returns the
    /// finished snapshot (its zxid and bytes) when the last node is written.
    pub fn snapshot_step(&mut self, budget: usize) -> Option<(Zxid, Bytes)> {
        let mut snap = self.snap.take()?;
        let mut p = Vec::new();
        for _ in 0..budget {
            let idx = if !snap.root_visited {
                snap.root_visited = true;
                p.clear();
                p.push(b'/');
                ROOT
            } else {
                let Some(frame) = snap.frames.last_mut() else {
                    break;
                };
                match frame.pop(&mut p) {
                    Some(idx) => idx,
                    None => {
                        snap.frames.pop();
                        continue;
                    }
                }
            };
            let Some(Some(node)) = self
                .chunks
                .get_mut((idx >> SLAB_CHUNK_SHIFT) as usize)
                .map(|c| &mut c[idx as usize & (SLAB_CHUNK - 1)])
            else {
                continue; // deleted since its parent was visited (its old state is written)
            };
            if node.czxid > snap.zxid {
                continue; // created after the snapshot's zxid, and so is all below it
            }
            if node.snap_gen != snap.gen {
                node.snap_gen = snap.gen;
                write_record(&mut snap, &p, node);
            }
            if let Some(frame) = self.frame(idx, &p) {
                snap.frames.push(frame);
            }
        }
        if !snap.frames.is_empty() || !snap.root_visited {
            self.snap = Some(snap);
            return None;
        }
        snap.out.put_u8(0);
        snap.out.put_u64(snap.records);
        Some((Zxid::from_u64(snap.zxid), snap.out.freeze()))
    }

    /// Writes the whole snapshot at once (tests and shutdown).
    pub fn snapshot_now(&mut self, zxid: Zxid, sessions: &[SessionRecord]) -> Bytes {
        if self.snap.is_none() {
            self.begin_snapshot(zxid, sessions);
        }
        loop {
            if let Some((_, bytes)) = self.snapshot_step(usize::MAX) {
                return bytes;
            }
        }
    }

    /// The frame of a snapshot's walk for the children of the node at `idx`
    /// (path `p`), if it has any: their indices and names, copied at once.
    fn frame(&self, idx: u32, p: &[u8]) -> Option<SnapFrame> {
        let children = self.node(idx)?.children.as_ref()?;
        let mut names = Vec::new();
        let mut kids = Vec::with_capacity(children.len());
        for &child in children.iter() {
            let Some(n) = self.node(child) else { continue };
            names.extend_from_slice(n.name());
            kids.push((child, names.len() as u32));
        }
        Some(SnapFrame {
            path: p.to_vec(),
            names,
            kids,
        })
    }

    /// Copy-on-write: before the node at `idx` (path `p`) changes, a snapshot
    /// in progress that has not written it yet writes its current state.
    fn cow(&mut self, idx: u32, p: &str) {
        let Some(snap) = self.snap.as_mut() else {
            return;
        };
        let Some(Some(node)) = self
            .chunks
            .get_mut((idx >> SLAB_CHUNK_SHIFT) as usize)
            .map(|c| &mut c[idx as usize & (SLAB_CHUNK - 1)])
        else {
            return;
        };
        if node.snap_gen == snap.gen || node.czxid > snap.zxid {
            return;
        }
        node.snap_gen = snap.gen;
        write_record(snap, p.as_bytes(), node);
    }

    /// Loads a snapshot held in one buffer: the tree, the sessions and the
    /// zxid it is consistent at. Same as [`DataTree::load_snapshot_from`].
    pub fn load_snapshot(bytes: &[u8]) -> Result<(DataTree, Vec<SessionRecord>, Zxid), TxnError> {
        DataTree::load_snapshot_from(&mut &bytes[..])
    }

    /// Loads a snapshot while reading it from `source`: the tree, the
    /// sessions and the zxid it is consistent at.
    ///
    /// The snapshot is never held whole: it is read
    /// [`SNAPSHOT_LOAD_READ_BYTES`] at a time into one buffer of that size
    /// (or of the largest record's, if larger). `source` is read to its end (a reader that
    /// verifies a checksum there, such as a SNAP transfer's, gets to fail the
    /// load), and bytes after the snapshot's end marker are an error. Nothing
    /// is changed on failure: load into a new tree and swap it in on success.
    pub fn load_snapshot_from(
        source: &mut dyn std::io::Read,
    ) -> Result<(DataTree, Vec<SessionRecord>, Zxid), TxnError> {
        let mut reader = SnapReader::new(source);
        let loaded = load_from(&mut reader);
        reader.record_peak();
        loaded
    }

    /// [`DataTree::load_snapshot_from`] with the work split over two
    /// threads: one parses the records (paths, stats, data, ACLs, the
    /// names' hashes) while the calling one inserts them into the tree, a
    /// few batches of a few thousand records apart at most. Same tree, same
    /// errors, same reading of `source` to its end; a snapshot of fewer
    /// than [`SNAPSHOT_SPLIT_MIN_BYTES`] (`len_bytes`: its size, as far as
    /// the caller knows it) loads on the calling thread alone.
    pub fn load_snapshot_split(
        source: &mut (dyn std::io::Read + Send),
        len_bytes: u64,
    ) -> Result<(DataTree, Vec<SessionRecord>, Zxid), TxnError> {
        let mut reader = SnapReader::new(source);
        let loaded = if len_bytes < SNAPSHOT_SPLIT_MIN_BYTES {
            load_from(&mut reader)
        } else {
            load_split_from(&mut reader, LOAD_BATCH_RECORDS)
        };
        reader.record_peak();
        loaded
    }

    /// A tree of exactly these nodes, each parent before its children (an
    /// import from another store). Fails on a node whose parent is missing,
    /// a node given twice, or no root.
    pub fn from_imported(
        nodes: impl IntoIterator<Item = ImportedNode>,
    ) -> Result<DataTree, TxnError> {
        let mut t = DataTree::empty();
        for n in nodes {
            let acl = t.acls.intern(&n.acl);
            let name = n.path.rsplit('/').next().unwrap_or_default();
            let mut node = Node::new(name, n.data.as_deref(), acl, n.owner, n.czxid, n.ctime);
            node.mzxid = n.mzxid;
            node.pzxid = n.pzxid;
            node.mtime = n.mtime;
            node.version = n.version;
            node.aversion = n.aversion;
            node.ccount = n.ccount;
            let p = n.path;
            if !p.starts_with('/') || t.insert_raw(&p, node).is_none() {
                return Err(TxnError(format!(
                    "imported node {p} has no parent or is repeated"
                )));
            }
        }
        if t.node_count == 0 {
            return Err(TxnError("imported tree has no root".into()));
        }
        Ok(t)
    }

    /// Every node by path with its data, ACL and Stat: a canonical dump for
    /// comparing trees in tests.
    pub fn dump(&self) -> std::collections::BTreeMap<String, (Option<Bytes>, Vec<Acl>, Stat)> {
        let mut out = std::collections::BTreeMap::new();
        let mut stack = vec![(ROOT, "/".to_owned())];
        while let Some((idx, p)) = stack.pop() {
            let Some(n) = self.node(idx) else {
                continue;
            };
            if let Some(children) = n.children.as_ref() {
                for &child in children.iter() {
                    if let Some(c) = self.node(child) {
                        let name = String::from_utf8_lossy(c.name());
                        stack.push((child, path::join(&p, &name)));
                    }
                }
            }
            out.insert(p, (n.data(), n.acl.to_vec(), n.stat()));
        }
        out
    }
}

/// A snapshot being read: a window on the stream, read
/// [`SNAPSHOT_LOAD_READ_BYTES`] at a time into one buffer, which grows only
/// for a record larger than that.
struct SnapReader<'r, R: ?Sized> {
    source: &'r mut R,
    /// Always initialised to its length; `pos..end` is what is unconsumed.
    buf: Vec<u8>,
    pos: usize,
    end: usize,
    eof: bool,
}

#[cfg(test)]
thread_local! {
    /// The largest buffer of the last load on this thread (tests).
    static LOAD_BUFFER_PEAK: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

impl<'r, R: std::io::Read + ?Sized> SnapReader<'r, R> {
    fn new(source: &'r mut R) -> SnapReader<'r, R> {
        SnapReader {
            source,
            buf: Vec::new(),
            pos: 0,
            end: 0,
            eof: false,
        }
    }

    fn record_peak(&self) {
        #[cfg(test)]
        LOAD_BUFFER_PEAK.with(|p| p.set(self.buf.len()));
    }

    /// The unconsumed bytes.
    fn available(&self) -> &[u8] {
        &self.buf[self.pos..self.end]
    }

    /// Reads until at least `n` bytes are available; false at the end of
    /// the stream.
    fn fill(&mut self, n: usize) -> Result<bool, TxnError> {
        while self.end - self.pos < n {
            if self.eof {
                return Ok(false);
            }
            if self.pos > 0 {
                self.buf.copy_within(self.pos..self.end, 0);
                self.end -= self.pos;
                self.pos = 0;
            }
            let size = n.max(SNAPSHOT_LOAD_READ_BYTES);
            if self.buf.len() < size {
                self.buf.resize(size, 0);
            }
            let got = loop {
                match self.source.read(&mut self.buf[self.end..]) {
                    Ok(got) => break got,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                    Err(e) => return Err(TxnError(format!("reading the snapshot: {e}"))),
                }
            };
            self.end += got;
            self.eof = got == 0;
        }
        Ok(true)
    }

    /// Exactly `n` bytes, consumed; an error if the stream ends first.
    fn take(&mut self, n: usize) -> Result<&[u8], TxnError> {
        if !self.fill(n)? {
            return Err(TxnError(format!(
                "truncated snapshot: {n} bytes needed, {} left",
                self.end - self.pos
            )));
        }
        let at = self.pos;
        self.pos += n;
        Ok(&self.buf[at..at + n])
    }

    /// The length of the next record (or of the end marker), reading as
    /// much as it takes to know it.
    fn next_record_len(&mut self, acls_defined: usize) -> Result<usize, TxnError> {
        let mut want = 1;
        loop {
            if !self.fill(want)? {
                return Err(TxnError(format!(
                    "truncated snapshot: a record needs {want}+ bytes, {} left",
                    self.end - self.pos
                )));
            }
            match record_len(self.available(), acls_defined)? {
                Ok(len) => return Ok(len),
                Err(more) => want = more,
            }
        }
    }
}

/// A snapshot record's fixed part after its ACL: czxid, mzxid, pzxid, ctime,
/// mtime, version, aversion, ccount, owner.
const SNAP_RECORD_STAT_BYTES: usize = 5 * 8 + 3 * 4 + 8;

/// The length of the record at the start of `b`: `Ok(len)`, or `Err(n)` when
/// `b` is too short to tell and at least `n` bytes are needed to go on. An
/// unknown tag is an error. `acls_defined`: ACL ids defined so far (a record
/// whose ACL id is the next one carries the ACL inline).
fn record_len(b: &[u8], acls_defined: usize) -> Result<Result<usize, usize>, TxnError> {
    let u32_at = |at: usize| -> Option<u32> {
        b.get(at..at + 4)
            .map(|x| u32::from_be_bytes(x.try_into().expect("4 bytes")))
    };
    match b.first() {
        None => return Ok(Err(1)),
        Some(0) => return Ok(Ok(9)), // end marker and record count
        Some(1) => {}
        Some(t) => return Err(TxnError(format!("unknown snapshot record {t}"))),
    }
    let mut at = 1usize;
    // path
    let Some(n) = u32_at(at) else {
        return Ok(Err(at + 4));
    };
    at += 4 + n as usize;
    // data (-1: null)
    let Some(n) = u32_at(at) else {
        return Ok(Err(at + 4));
    };
    at += 4 + (n as i32).max(0) as usize;
    // ACL id, and the ACL itself when it is defined here
    let Some(acl_ref) = u32_at(at) else {
        return Ok(Err(at + 4));
    };
    at += 4;
    if acl_ref as usize == acls_defined {
        let Some(count) = u32_at(at) else {
            return Ok(Err(at + 4));
        };
        at += 4;
        for _ in 0..count {
            at += 4; // perms
            for _ in 0..2 {
                // scheme, id
                let Some(n) = u32_at(at) else {
                    return Ok(Err(at + 4));
                };
                at += 4 + n as usize;
            }
        }
    }
    Ok(Ok(at + SNAP_RECORD_STAT_BYTES))
}

/// Records a load parses before the insert takes them (one batch): enough
/// that handing a batch from one thread to the other costs nothing per
/// record, few enough that the batches in flight stay small (a parsed record
/// is about 130 bytes besides its name and data, which are the tree's).
const LOAD_BATCH_RECORDS: usize = 4096;
/// A batch also ends once its paths hold this many bytes.
const LOAD_BATCH_PATH_BYTES: usize = 256 * 1024;
/// Parsed batches waiting for the insert, at most, when a load runs on two
/// threads (besides the one being parsed and the one being inserted).
const LOAD_BATCHES_IN_FLIGHT: usize = 2;
/// A snapshot smaller than this loads on one thread even when asked to split
/// the work: starting a thread costs more than it saves there.
pub const SNAPSHOT_SPLIT_MIN_BYTES: u64 = 4 << 20;

/// The hash of a child's name in its parent's table (one function, so the
/// parsing thread of a load hashes exactly as the tree does).
fn name_hash(hasher: &foldhash::fast::RandomState, name: &[u8]) -> u64 {
    hasher.hash_one(name)
}

/// What a snapshot's header says.
struct SnapHeader {
    zxid: Zxid,
    /// The records the header announces (version 2), else none.
    declared: Option<u64>,
    sessions: Vec<SessionRecord>,
}

/// One record, parsed: the node and what its insert needs.
struct ParsedRecord {
    node: Node,
    /// The hash of the node's name (see [`name_hash`]).
    name_hash: u64,
    /// The end of its path in its batch's `paths` (the start is the previous
    /// record's end).
    path_end: u32,
    /// Where the last `/` of its path is.
    slash: u32,
    /// Its parent's path is the previous record's parent's (siblings come
    /// together: the snapshot is a DFS).
    same_parent: bool,
}

/// Parsed records on their way to the insert.
#[derive(Default)]
struct Batch {
    /// The records' paths, back to back.
    paths: String,
    records: Vec<ParsedRecord>,
}

/// The first half of a load: bytes to records. Needs nothing of the tree but
/// its hasher, so it can run on a thread of its own.
struct Parser {
    /// The tree's ACL lists, interned as their definitions come; the tree
    /// takes them at the end.
    acls: AclInterner,
    /// The snapshot's ACL ids.
    acl_table: Vec<AclRef>,
    /// The tree's hasher (a copy).
    hasher: foldhash::fast::RandomState,
    /// The previous record's parent path.
    parent_path: String,
    records: u64,
    declared: Option<u64>,
    /// Records in a batch at most ([`LOAD_BATCH_RECORDS`]; tests use fewer).
    batch_records: usize,
}

/// The second half of a load: records into the tree.
struct Inserter {
    tree: DataTree,
    /// Copy-on-write records that came before their parent, by depth: they go
    /// in after the stream (every parent before its children).
    deferred: Vec<Vec<(String, Node)>>,
    /// The slab index of the previous record's parent, if that record went
    /// in (nothing is removed during a load, so a path keeps its index).
    parent_idx: Option<u32>,
    /// Children maps sized up front, to shrink at the end if oversized.
    sized: Vec<u32>,
    records: u64,
    declared: Option<u64>,
}

fn load_header<R: std::io::Read + ?Sized>(
    r: &mut SnapReader<'_, R>,
) -> Result<SnapHeader, TxnError> {
    let magic = r.take(8)?;
    let v2 = magic == SNAP_MAGIC;
    if !v2 && magic != SNAP_MAGIC_V1 {
        return Err(TxnError("not an rzk snapshot".into()));
    }
    let zxid = Zxid::from_u64(txn::get_i64(&mut r.take(8)?)? as u64);
    let declared = if v2 {
        Some(txn::get_i64(&mut r.take(8)?)? as u64)
    } else {
        None
    };
    if let Some(d) = declared {
        if d > u64::from(u32::MAX) {
            return Err(TxnError(format!(
                "snapshot declares {d} nodes, more than a tree holds"
            )));
        }
    }
    let n = txn::get_u32(&mut r.take(4)?)? as usize;
    let mut sessions = Vec::with_capacity(n.min(1 << 16));
    for _ in 0..n {
        let mut b = r.take(SNAP_SESSION_BYTES)?;
        let id = txn::get_i64(&mut b)?;
        let timeout_ms = txn::get_i32(&mut b)?;
        let mut password = [0u8; 16];
        password.copy_from_slice(b);
        sessions.push(SessionRecord {
            id,
            timeout_ms,
            password,
        });
    }
    Ok(SnapHeader {
        zxid,
        declared,
        sessions,
    })
}

/// The two halves of a load after its header.
fn load_halves(declared: Option<u64>, batch_records: usize) -> (Parser, Inserter) {
    let mut tree = DataTree::empty();
    if let Some(d) = declared {
        // The chunk list at its final size at once (a corrupt count is caught
        // when the records run out; a reservation that cannot be had is simply
        // not made).
        let _ = tree
            .chunks
            .try_reserve_exact((d as usize).div_ceil(SLAB_CHUNK));
    }
    let parser = Parser {
        acls: AclInterner::default(),
        acl_table: Vec::new(),
        hasher: tree.hasher,
        parent_path: String::new(),
        records: 0,
        declared,
        batch_records,
    };
    let inserter = Inserter {
        tree,
        deferred: Vec::new(),
        parent_idx: None,
        sized: Vec::new(),
        records: 0,
        declared,
    };
    (parser, inserter)
}

/// Loads on the calling thread.
fn load_from<R: std::io::Read + ?Sized>(
    r: &mut SnapReader<'_, R>,
) -> Result<(DataTree, Vec<SessionRecord>, Zxid), TxnError> {
    let header = load_header(r)?;
    let (mut parser, mut inserter) = load_halves(header.declared, LOAD_BATCH_RECORDS);
    parse_and_insert(&mut parser, r, &mut inserter)?;
    let tree = inserter.finish(parser.acls)?;
    Ok((tree, header.sessions, header.zxid))
}

/// Loads with the parsing on a second thread while the calling thread
/// inserts, [`LOAD_BATCHES_IN_FLIGHT`] batches apart at most. The result,
/// and the error of a bad snapshot, are those of [`load_from`]: the insert
/// takes the batches in stream order, and a parse error comes after the
/// records before it.
fn load_split_from<R: std::io::Read + Send + ?Sized>(
    r: &mut SnapReader<'_, R>,
    batch_records: usize,
) -> Result<(DataTree, Vec<SessionRecord>, Zxid), TxnError> {
    let header = load_header(r)?;
    let (parser, mut inserter) = load_halves(header.declared, batch_records);
    // Handed to the thread through a lock, so that a thread that cannot be
    // started leaves them here to load without it.
    let job = std::sync::Mutex::new(Some((parser, r)));
    let acls = std::thread::scope(|s| {
        let (batches_tx, batches) = sync_channel::<Result<Batch, TxnError>>(LOAD_BATCHES_IN_FLIGHT);
        let (spare, spare_rx) = sync_channel::<Batch>(LOAD_BATCHES_IN_FLIGHT + 2);
        let job = &job;
        let thread = std::thread::Builder::new()
            .name("rzk-snapshot-parse".into())
            .spawn_scoped(s, move || {
                let (parser, r) = job.lock().ok()?.take()?;
                parse_batches(parser, r, &batches_tx, &spare_rx)
            });
        let thread = match thread {
            Ok(t) => t,
            Err(_) => {
                let (mut parser, r) = job
                    .lock()
                    .ok()
                    .and_then(|mut j| j.take())
                    .ok_or_else(|| TxnError("the snapshot load lost its reader".into()))?;
                return parse_and_insert(&mut parser, r, &mut inserter).map(|()| parser.acls);
            }
        };
        let inserted = insert_batches(&mut inserter, &batches, &spare);
        // The parser stops at its next batch if the insert stopped first.
        drop(batches);
        let parsed = thread
            .join()
            .map_err(|_| TxnError("the snapshot parsing thread failed".into()))?;
        inserted?;
        parsed.ok_or_else(|| TxnError("the snapshot parsing thread ended early".into()))
    })?;
    let tree = inserter.finish(acls)?;
    Ok((tree, header.sessions, header.zxid))
}

/// The records of a load on the calling thread, each batch parsed, then
/// inserted.
fn parse_and_insert<R: std::io::Read + ?Sized>(
    parser: &mut Parser,
    r: &mut SnapReader<'_, R>,
    inserter: &mut Inserter,
) -> Result<(), TxnError> {
    let mut batch = Batch::default();
    loop {
        let parsed = parser.fill_batch(r, &mut batch);
        // The records before a parse error go in first: an error of theirs
        // comes first in the stream, and is the one reported.
        inserter.insert_batch(&mut batch)?;
        if parsed? {
            return Ok(());
        }
    }
}

/// The parsing thread of a split load: batches to `out` until the end
/// marker (then its ACLs), a parse error (sent after the batch before it),
/// or the insert's end.
fn parse_batches<R: std::io::Read + ?Sized>(
    mut parser: Parser,
    r: &mut SnapReader<'_, R>,
    out: &SyncSender<Result<Batch, TxnError>>,
    spare: &Receiver<Batch>,
) -> Option<AclInterner> {
    loop {
        let mut batch = spare.try_recv().unwrap_or_default();
        let parsed = parser.fill_batch(r, &mut batch);
        if out.send(Ok(batch)).is_err() {
            return None; // the insert failed, and says why
        }
        match parsed {
            Ok(false) => {}
            Ok(true) => return Some(parser.acls),
            Err(e) => {
                let _ = out.send(Err(e));
                return None;
            }
        }
    }
}

/// The insert of a split load: every batch in order until the parser ends
/// (or the first error); emptied batches go back to the parser.
fn insert_batches(
    inserter: &mut Inserter,
    batches: &Receiver<Result<Batch, TxnError>>,
    spare: &SyncSender<Batch>,
) -> Result<(), TxnError> {
    for batch in batches {
        let mut batch = batch?;
        inserter.insert_batch(&mut batch)?;
        // A lost spare is only a new allocation for the parser.
        let _ = spare.try_send(batch);
    }
    Ok(())
}

impl Parser {
    /// Parses records into `batch` until it is full (false) or the stream
    /// has ended at its end marker (true), read to its end.
    fn fill_batch<R: std::io::Read + ?Sized>(
        &mut self,
        r: &mut SnapReader<'_, R>,
        batch: &mut Batch,
    ) -> Result<bool, TxnError> {
        while batch.records.len() < self.batch_records && batch.paths.len() < LOAD_BATCH_PATH_BYTES
        {
            let len = r.next_record_len(self.acl_table.len())?;
            let mut b = r.take(len)?;
            if txn::get_u8(&mut b)? != 0 {
                self.record(b, batch)?;
                continue;
            }
            let count = txn::get_i64(&mut b)? as u64;
            if count != self.records || self.declared.is_some_and(|d| d != count) {
                return Err(TxnError(format!(
                    "snapshot declares {count} nodes (header: {:?}), holds {}",
                    self.declared, self.records
                )));
            }
            // Read to the end: a checksumming source verifies there.
            if r.fill(1)? {
                return Err(TxnError("bytes after the snapshot's end".into()));
            }
            return Ok(true);
        }
        Ok(false)
    }

    /// One record (after its tag), parsed into `batch`.
    fn record(&mut self, mut b: &[u8], batch: &mut Batch) -> Result<(), TxnError> {
        let r = &mut b;
        let p = txn::get_str_ref(r)?;
        let data = get_buf_ref(r)?;
        let acl_ref = txn::get_u32(r)? as usize;
        if acl_ref == self.acl_table.len() {
            let acl = txn::get_acl(r)?;
            self.acl_table.push(self.acls.intern(&acl));
        }
        let acl = self
            .acl_table
            .get(acl_ref)
            .cloned()
            .ok_or_else(|| TxnError(format!("ACL ref {acl_ref} undefined")))?;
        let Some(slash) = p.rfind('/') else {
            return Err(TxnError(format!(
                "snapshot node {p} is not an absolute path"
            )));
        };
        let name = &p[slash + 1..];
        let mut node = Node::new(name, data, acl, 0, 0, 0);
        node.czxid = txn::get_i64(r)? as u64;
        node.mzxid = txn::get_i64(r)? as u64;
        node.pzxid = txn::get_i64(r)? as u64;
        node.ctime = txn::get_i64(r)?;
        node.mtime = txn::get_i64(r)?;
        node.version = txn::get_i32(r)?;
        node.aversion = txn::get_i32(r)?;
        node.ccount = txn::get_i32(r)?;
        node.owner = txn::get_i64(r)?;
        self.records += 1;
        if self.declared.is_some_and(|d| self.records > d) {
            return Err(TxnError(format!(
                "snapshot holds more nodes than its header's {:?}",
                self.declared
            )));
        }
        let parent_path = if slash == 0 { "/" } else { &p[..slash] };
        let same_parent = self.parent_path == parent_path;
        if !same_parent {
            self.parent_path.clear();
            self.parent_path.push_str(parent_path);
        }
        batch.paths.push_str(p);
        batch.records.push(ParsedRecord {
            name_hash: name_hash(&self.hasher, name.as_bytes()),
            node,
            path_end: batch.paths.len() as u32,
            slash: slash as u32,
            same_parent,
        });
        Ok(())
    }
}

impl Inserter {
    /// Inserts the records of `batch`, in order, and empties it.
    fn insert_batch(&mut self, batch: &mut Batch) -> Result<(), TxnError> {
        let Batch { paths, records } = batch;
        let mut start = 0;
        for rec in records.drain(..) {
            let end = rec.path_end as usize;
            let p = paths.get(start..end).ok_or_else(|| {
                TxnError(format!(
                    "a parsed path at {start}..{end} is out of its batch"
                ))
            })?;
            start = end;
            self.insert(p, rec)?;
        }
        paths.clear();
        Ok(())
    }

    /// One parsed record (path `p`) into the tree, or held back until the
    /// stream's end if its parent is not in yet.
    fn insert(&mut self, p: &str, rec: ParsedRecord) -> Result<(), TxnError> {
        self.records += 1;
        let orphan = || TxnError(format!("snapshot node {p} has no parent or is repeated"));
        if p == "/" {
            self.parent_idx = None;
            self.tree.insert_raw(p, rec.node).ok_or_else(orphan)?;
            return Ok(());
        }
        let slash = rec.slash as usize;
        let found = match self.parent_idx {
            Some(idx) if rec.same_parent => Some(idx),
            _ => self.tree.lookup(if slash == 0 { "/" } else { &p[..slash] }),
        };
        self.parent_idx = found;
        let Some(parent_idx) = found else {
            let depth = p.bytes().filter(|&b| b == b'/').count();
            if self.deferred.len() <= depth {
                self.deferred.resize_with(depth + 1, Vec::new);
            }
            self.deferred[depth].push((p.to_owned(), rec.node));
            return Ok(());
        };
        let pn = self.tree.node_mut(parent_idx);
        if pn.children.is_none() {
            // Sized once for the children it can have: at most its create
            // count, and at most the records still to come. Too large a guess
            // is given back at the end.
            let left = match self.declared {
                Some(d) => d.saturating_sub(self.records),
                None => LOAD_CHILDREN_RESERVE_UNKNOWN_MAX,
            };
            let room = (pn.ccount.max(0) as u64).min(left);
            if room > 0 {
                self.tree.reserve_children(parent_idx, room as usize);
                self.sized.push(parent_idx);
            }
        }
        self.tree
            .insert_child_hashed(parent_idx, p, rec.node, rec.name_hash)
            .map(|_| ())
            .map_err(|()| orphan())
    }

    /// Inserts the deferred records, gives back oversized maps, and hands
    /// over the tree with the ACL lists its nodes were given.
    fn finish(mut self, acls: AclInterner) -> Result<DataTree, TxnError> {
        self.tree.acls = acls;
        for level in std::mem::take(&mut self.deferred) {
            self.tree.insert_level(level)?;
        }
        for &idx in &self.sized {
            self.tree.shrink_children(idx);
        }
        if self.tree.node(ROOT).is_none() {
            return Err(TxnError("snapshot has no root".into()));
        }
        Ok(self.tree)
    }
}

/// A buffer borrowed from the input (`i32` length, −1 = null).
fn get_buf_ref<'a>(r: &mut &'a [u8]) -> Result<Option<&'a [u8]>, TxnError> {
    let n = txn::get_i32(r)?;
    if n < 0 {
        return Ok(None);
    }
    let n = n as usize;
    if r.len() < n {
        return Err(TxnError(format!(
            "truncated: {n} bytes of data needed, {} left",
            r.len()
        )));
    }
    let (data, rest) = r.split_at(n);
    *r = rest;
    Ok(Some(data))
}

fn write_record(snap: &mut SnapWriter, p: &[u8], node: &Node) {
    let out = &mut snap.out;
    out.put_u8(1);
    out.put_u32(p.len() as u32);
    out.put_slice(p);
    txn::put_buf(out, node.data_slice());

    let key = Arc::as_ptr(&node.acl) as usize;
    let next = snap.acl_refs.len() as u32;
    match snap.acl_refs.get(&key) {
        Some(id) => out.put_u32(*id),
        None => {
            snap.acl_refs.insert(key, next);
            out.put_u32(next);
            txn::put_acl(out, &node.acl);
        }
    }
    out.put_u64(node.czxid);
    out.put_u64(node.mzxid);
    out.put_u64(node.pzxid);
    out.put_i64(node.ctime);
    out.put_i64(node.mtime);
    out.put_i32(node.version);
    out.put_i32(node.aversion);
    out.put_i32(node.ccount);
    out.put_i64(node.owner);
    snap.records += 1;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn open() -> Vec<Acl> {
        Acl::open_unsafe()
    }

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

    #[test]
    fn initial_tree_matches_zookeeper() {
        let t = DataTree::new();
        let root = t.get("/").unwrap().stat();
        assert_eq!((root.cversion, root.num_children), (-1, 1));
        assert_eq!(t.get("/zookeeper").unwrap().stat().cversion, -2);
        let config = t.get("/zookeeper/config").unwrap();
        assert_eq!(config.stat().aversion, -1);
        assert_eq!(&config.acl[..], &Acl::read_unsafe()[..]);
        assert_eq!(t.node_count(), 4);
    }

    #[test]
    fn cversion_counts_creates_and_deletes() {
        let mut t = DataTree::new();
        t.create("/p", None, &open(), 0, 1, 10).unwrap();
        t.create("/p/a", None, &open(), 0, 2, 11).unwrap();
        t.delete("/p/a", 3).unwrap();
        let p = t.get("/p").unwrap();
        assert_eq!(
            (p.stat().cversion, p.ccount, p.stat().pzxid.as_u64()),
            (2, 1, 3)
        );
        for (i, z) in (4..8).enumerate() {
            t.create(&format!("/p/c{i}"), None, &open(), 0, z, 12)
                .unwrap();
        }
        t.delete("/p/c0", 8).unwrap();
        // 5 creates + 2 deletes
        assert_eq!(t.get("/p").unwrap().stat().cversion, 7);
        assert_eq!(t.get("/p").unwrap().stat().num_children, 3);
    }

    #[test]
    fn stat_changes_only_where_zookeeper_changes_it() {
        let mut t = DataTree::new();
        t.create("/n", Some(Bytes::from_static(b"hi")), &open(), 0, 5, 100)
            .unwrap();
        let s = t
            .set_data("/n", Some(Bytes::from_static(b"ho!")), 6, 200)
            .unwrap();
        assert_eq!(
            (s.version, s.mzxid.as_u64(), s.mtime, s.data_length),
            (1, 6, 200, 3)
        );
        assert_eq!((s.czxid.as_u64(), s.ctime, s.pzxid.as_u64()), (5, 100, 5));
        let a = t.set_acl("/n", &Acl::read_unsafe()).unwrap();
        assert_eq!((a.aversion, a.version, a.mzxid.as_u64()), (1, 1, 6));
        t.create("/n/c", None, &open(), 0, 7, 300).unwrap();
        t.set_data("/n/c", None, 8, 400).unwrap();
        let n = t.get("/n").unwrap().stat();
        assert_eq!((n.pzxid.as_u64(), n.mzxid.as_u64(), n.cversion), (7, 6, 1));
        assert_eq!(t.get("/n/c").unwrap().data(), None);
    }

    #[test]
    fn owners_are_indexed_and_reported() {
        let mut t = DataTree::new();
        t.create("/e", None, &open(), 0x42, 1, 1).unwrap();
        t.create("/c", None, &open(), CONTAINER_OWNER, 2, 1)
            .unwrap();
        t.create("/t", None, &open(), ttl_owner(5000), 3, 1)
            .unwrap();
        assert_eq!(t.get("/e").unwrap().stat().ephemeral_owner, SessionId(0x42));
        assert_eq!(t.get("/c").unwrap().stat().ephemeral_owner, SessionId(0));
        assert_eq!(t.get("/t").unwrap().stat().ephemeral_owner, SessionId(0));
        assert_eq!(owner_ttl(t.get("/t").unwrap().owner), Some(5000));
        assert!(t.ephemerals_of(0x42).unwrap().contains("/e"));
        assert!(t.containers().contains("/c"));
        assert!(t.ttl_nodes().contains("/t"));
        t.delete("/e", 4).unwrap();
        assert!(t.ephemerals_of(0x42).is_none());
    }

    #[test]
    fn delete_refuses_a_node_with_children() {
        let mut t = DataTree::new();
        t.create("/a", None, &open(), 0, 1, 1).unwrap();
        t.create("/a/b", None, &open(), 0, 2, 1).unwrap();
        assert_eq!(t.delete("/a", 3).unwrap_err(), ErrorCode::NotEmpty);
        assert_eq!(
            t.create("/a/b", None, &open(), 0, 3, 1).unwrap_err(),
            ErrorCode::NodeExists
        );
        assert_eq!(
            t.create("/x/y", None, &open(), 0, 3, 1).unwrap_err(),
            ErrorCode::NoNode
        );
        assert_eq!(t.descendant_count(t.lookup("/").unwrap()), 5);
    }

    #[test]
    fn snapshot_round_trip() {
        let mut t = DataTree::new();
        t.create("/a", Some(Bytes::from_static(b"1")), &open(), 0, 1, 1)
            .unwrap();
        t.create("/a/b", Some(Bytes::new()), &Acl::read_unsafe(), 0x77, 2, 2)
            .unwrap();
        t.create("/a/c", None, &open(), CONTAINER_OWNER, 3, 3)
            .unwrap();
        t.delete("/a/c", 4).unwrap();
        let sessions = vec![SessionRecord {
            id: 0x77,
            timeout_ms: 4000,
            password: [3; 16],
        }];
        let bytes = t.snapshot_now(Zxid::from_u64(4), &sessions);
        let (loaded, s, z) = DataTree::load_snapshot(&bytes).unwrap();
        assert_eq!(z.as_u64(), 4);
        assert_eq!(s, sessions);
        assert_eq!(loaded.dump(), t.dump());
        assert!(loaded.ephemerals_of(0x77).unwrap().contains("/a/b"));
        for cut in 0..bytes.len() {
            assert!(DataTree::load_snapshot(&bytes[..cut]).is_err());
        }
    }

    /// A tree of `n` nodes under a few directories, with data of `data_bytes`.
    fn sample_tree(n: u64, data_bytes: usize) -> DataTree {
        let mut t = DataTree::new();
        for d in 0..8u64 {
            t.create(&format!("/d{d}"), None, &open(), 0, d + 1, 1)
                .unwrap();
        }
        for i in 0..n {
            let data = Bytes::from(vec![(i % 251) as u8; data_bytes]);
            let acl = if i % 3 == 0 {
                Acl::read_unsafe()
            } else {
                open()
            };
            t.create(
                &format!("/d{}/n{i}", i % 8),
                Some(data),
                &acl,
                0,
                100 + i,
                2,
            )
            .unwrap();
        }
        t
    }

    #[test]
    fn streamed_snapshot_equals_the_one_buffer_form_byte_for_byte() {
        use rand::{Rng, SeedableRng};
        const MIN_BYTES: usize = 4096;
        let mut a = sample_tree(2000, 100);
        // A copy with the same maps (same iteration order): the same steps and
        // writes on both must give the same bytes, in chunks or in one buffer.
        let mut b = a.clone();
        let sessions = vec![SessionRecord {
            id: 9,
            timeout_ms: 30_000,
            password: [7; 16],
        }];
        let at = Zxid::from_u64(2099);
        assert!(a.begin_snapshot(at, &sessions));
        assert!(b.begin_snapshot(at, &sessions));
        let seed = 0x5eed_u64;
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
        let (mut chunks, mut rest) = (Vec::new(), None);
        let mut zxid = 3000;
        for _ in 0..100_000 {
            // Writes that copy-on-write nodes the walk has or has not reached.
            for _ in 0..3 {
                let i = rng.random_range(0..2000u64);
                let p = format!("/d{}/n{i}", i % 8);
                zxid += 1;
                for t in [&mut a, &mut b] {
                    if t.get(&p).is_some() {
                        if zxid % 4 == 0 {
                            t.delete(&p, zxid).unwrap();
                        } else {
                            t.set_data(&p, None, zxid, 3).unwrap();
                        }
                    } else {
                        t.create(&p, None, &open(), 0, zxid, 3).unwrap();
                    }
                }
            }
            if let Some(chunk) = a.take_snapshot_output(MIN_BYTES) {
                assert!(chunk.len() >= MIN_BYTES, "seed {seed}");
                chunks.push(chunk);
            }
            let (ra, rb) = (a.snapshot_step(7), b.snapshot_step(7));
            assert_eq!(
                ra.is_some(),
                rb.is_some(),
                "seed {seed}: both finish together"
            );
            if let (Some((za, ra)), Some((zb, rb))) = (ra, rb) {
                assert_eq!((za, zb), (at, at));
                rest = Some((ra, rb));
                break;
            }
            // Bounded: what is buffered is at most the minimum plus one step
            // and three writes (records of about 250 B here).
            let buffered = a.snap.as_ref().unwrap().out.len();
            assert!(
                buffered < MIN_BYTES + 10 * 250,
                "seed {seed}: {buffered} B buffered"
            );
        }
        let (rest_a, whole) = rest.expect("the snapshot finishes");
        assert!(chunks.len() > 20, "{} chunks", chunks.len());
        let mut streamed = Vec::new();
        for c in &chunks {
            streamed.extend_from_slice(c);
        }
        streamed.extend_from_slice(&rest_a);
        assert_eq!(streamed.len(), whole.len(), "seed {seed}");
        assert!(streamed == whole[..], "seed {seed}: streamed bytes differ");
        let (loaded, s, z) = DataTree::load_snapshot(&streamed).unwrap();
        assert_eq!((s, z), (sessions, at));
        assert_eq!(loaded.node_count(), 2000 + 8 + 4);
    }

    #[test]
    fn take_snapshot_output_waits_for_min_bytes_and_for_a_snapshot() {
        let mut t = sample_tree(100, 10);
        assert!(
            t.take_snapshot_output(0).is_none(),
            "no snapshot in progress"
        );
        assert!(t.begin_snapshot(Zxid::from_u64(199), &[]));
        let header = t.take_snapshot_output(0).expect("the header is buffered");
        assert_eq!(&header[..8], SNAP_MAGIC);
        assert!(t.take_snapshot_output(0).is_none(), "nothing new");
        assert!(t.snapshot_step(5).is_none());
        assert!(t.take_snapshot_output(1 << 20).is_none(), "less than asked");
        let some = t.take_snapshot_output(1).expect("five records");
        let mut all = header.to_vec();
        all.extend_from_slice(&some);
        let rest = loop {
            if let Some((_, rest)) = t.snapshot_step(usize::MAX) {
                break rest;
            }
        };
        all.extend_from_slice(&rest);
        assert_eq!(DataTree::load_snapshot(&all).unwrap().0.dump(), t.dump());
    }

    /// Hands out at most `step` bytes per read and remembers the largest read
    /// asked for.
    struct Trickle<'a> {
        data: &'a [u8],
        step: usize,
        asked_max: usize,
        fail_at_end: bool,
    }

    impl std::io::Read for Trickle<'_> {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            self.asked_max = self.asked_max.max(buf.len());
            if self.data.is_empty() && self.fail_at_end {
                return Err(std::io::Error::other("checksum mismatch"));
            }
            let n = buf.len().min(self.step).min(self.data.len());
            buf[..n].copy_from_slice(&self.data[..n]);
            self.data = &self.data[n..];
            Ok(n)
        }
    }

    #[test]
    fn snapshot_loads_from_a_reader_with_a_bounded_buffer() {
        // 3000 nodes of 1 KiB and one of 600 KiB: about 3.8 MB, fifteen times
        // the read size.
        let mut t = sample_tree(3000, 1024);
        let big = Bytes::from(vec![1u8; 600 * 1024]);
        t.create("/big", Some(big), &open(), 0, 9000, 4).unwrap();
        let bytes = t.snapshot_now(Zxid::from_u64(9000), &[]);
        assert!(bytes.len() > 14 * SNAPSHOT_LOAD_READ_BYTES);
        for step in [1000, 4093, usize::MAX] {
            let mut src = Trickle {
                data: &bytes,
                step,
                asked_max: 0,
                fail_at_end: false,
            };
            let (loaded, _, z) = DataTree::load_snapshot_from(&mut src).unwrap();
            assert_eq!(z.as_u64(), 9000);
            assert_eq!(loaded.dump(), t.dump(), "reads of {step} bytes");
            let peak = LOAD_BUFFER_PEAK.with(|p| p.get());
            // The read size, or the largest record (600 KiB + ~100 B).
            let bound = SNAPSHOT_LOAD_READ_BYTES.max(600 * 1024 + 256);
            assert!(peak <= bound, "buffer peak {peak} with reads of {step}");
            assert!(src.asked_max <= bound, "asked for {}", src.asked_max);
        }
    }

    #[test]
    fn snapshot_load_reads_its_source_to_the_end() {
        let t = sample_tree(50, 10);
        let bytes = t.clone().snapshot_now(Zxid::from_u64(149), &[]);
        // A source that fails at its end (a checksum that does not match).
        let mut src = Trickle {
            data: &bytes,
            step: 100,
            asked_max: 0,
            fail_at_end: true,
        };
        let err = DataTree::load_snapshot_from(&mut src).unwrap_err();
        assert!(err.0.contains("checksum mismatch"), "{err}");
        // Bytes after the end marker.
        let mut longer = bytes.to_vec();
        longer.push(0);
        assert!(DataTree::load_snapshot(&longer).is_err());
    }

    #[test]
    fn version_1_snapshots_still_load() {
        let mut t = sample_tree(300, 10);
        let v2 = t.snapshot_now(Zxid::from_u64(399), &[]);
        // Version 1: the old magic and no node count after the zxid.
        let mut v1 = SNAP_MAGIC_V1.to_vec();
        v1.extend_from_slice(&v2[8..16]);
        v1.extend_from_slice(&v2[24..]);
        let (loaded, _, z) = DataTree::load_snapshot(&v1).unwrap();
        assert_eq!((z.as_u64(), loaded.dump()), (399, t.dump()));
    }

    #[test]
    fn a_wrong_node_count_in_the_header_is_refused() {
        let mut t = sample_tree(30, 10);
        let bytes = t.snapshot_now(Zxid::from_u64(129), &[]);
        for declared in [0u64, 41, 43, u64::from(u32::MAX) + 1, u64::MAX] {
            let mut b = bytes.to_vec();
            b[16..24].copy_from_slice(&declared.to_be_bytes());
            assert!(DataTree::load_snapshot(&b).is_err(), "{declared}");
        }
    }

    #[test]
    fn snapshot_load_takes_records_that_come_before_their_parent() {
        // Copy-on-write writes a node when it changes, which can be before the
        // walk has reached its parent: the loader must hold such records back
        // until the parent is in (it inserts the others as they come).
        let mut t = DataTree::new();
        t.create("/a", None, &open(), 0, 1, 1).unwrap();
        t.create("/a/b", None, &open(), 0, 2, 1).unwrap();
        t.create("/a/b/c", Some(Bytes::from_static(b"c")), &open(), 0, 3, 1)
            .unwrap();
        let expected = t.dump();
        assert!(t.begin_snapshot(Zxid::from_u64(3), &[]));
        t.set_data("/a/b/c", None, 4, 2).unwrap(); // written first, parent unknown
        t.set_data("/a/b", None, 5, 2).unwrap();
        let bytes = t.snapshot_now(Zxid::from_u64(3), &[]);
        let (loaded, _, _) = DataTree::load_snapshot(&bytes).unwrap();
        assert_eq!(loaded.dump(), expected);
        assert_eq!(loaded.node_count(), expected.len());
    }

    #[test]
    fn snapshot_is_consistent_at_its_zxid_while_writes_go_on() {
        let mut t = DataTree::new();
        for i in 0..50u64 {
            t.create(
                &format!("/n{i}"),
                Some(Bytes::from(vec![i as u8])),
                &open(),
                0,
                i + 1,
                1,
            )
            .unwrap();
        }
        let expected = t.dump();
        assert!(t.begin_snapshot(Zxid::from_u64(50), &[]));
        let mut zxid = 51;
        let mut done = None;
        #[allow(clippy::explicit_counter_loop)]
        for round in 0..1000u64 {
            // change things the snapshot may or may not have written yet
            let i = round % 50;
            let p = format!("/n{i}");
            if t.get(&p).is_some() {
                if round % 3 == 0 {
                    t.delete(&p, zxid).unwrap();
                } else {
                    t.set_data(&p, None, zxid, 2).unwrap();
                }
            } else {
                t.create(&p, None, &open(), 0, zxid, 2).unwrap();
            }
            t.create(&format!("/new{round}"), None, &open(), 0, zxid, 2)
                .unwrap();
            zxid += 1;
            if let Some(s) = t.snapshot_step(2) {
                done = Some(s);
                break;
            }
        }
        let (z, bytes) = done.expect("snapshot finishes");
        assert_eq!(z.as_u64(), 50);
        let (loaded, _, _) = DataTree::load_snapshot(&bytes).unwrap();
        assert_eq!(loaded.dump(), expected);
    }
}

#[cfg(test)]
#[path = "tree_load_tests.rs"]
mod load_tests;

//! The data tree: znodes, their Stat, the per-session ephemeral index, and
//! copy-on-write snapshots that never pause writes.
//!
//! Representation: nodes live in a slab (`Vec<Option<Node>>` plus a free
//! list) and are found by walking the path from the root through each node's
//! children map (name → slab index). A node does not store its own name or
//! path: a name is stored once, as the key in its parent's map. `dataLength`,
//! `numChildren` and `cversion` are derived, not stored (`cversion` is
//! `2·C − numChildren`, with C the node's create counter, doc §8.1). ACL lists
//! are interned: nodes that share a list share one allocation.
//!
//! Snapshots (see [`DataTree::begin_snapshot`]): a snapshot is consistent at
//! the zxid it starts at and is written a few thousand nodes at a time between
//! transactions. Before a transaction changes a node the snapshot has not yet
//! written, the node's old state is written first (copy-on-write, node by node),
//! so the snapshot is exactly the tree at its zxid while writes go on.

use std::collections::BTreeSet;
use std::sync::Arc;

use bytes::{BufMut, Bytes, BytesMut};
use foldhash::{HashMap, HashMapExt};
use rzk_wire::{Acl, ByteString, ErrorCode, SessionId, Stat};
use rzk_zxid::Zxid;

use crate::acl::AclInterner;
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

/// One znode. About 120 bytes plus its data and its children map; its name
/// is stored once, in the parent's map.
#[derive(Clone, Debug)]
pub struct Node {
    /// The data; `None` for null data (kazoo's empty data is an empty buffer,
    /// not null: the two stay apart).
    pub data: Option<Bytes>,
    /// The ACL (interned).
    pub acl: Arc<[Acl]>,
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
    /// Children by name; `None` for a leaf (8 bytes instead of an empty map).
    #[allow(clippy::box_collection)]
    children: Option<Box<HashMap<Box<str>, u32>>>,
}

impl Node {
    fn new(data: Option<Bytes>, acl: Arc<[Acl]>, owner: i64, zxid: u64, time: i64) -> Node {
        Node {
            data,
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
            children: None,
        }
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
            data_length: self.data.as_ref().map_or(0, |d| d.len() as i32),
            num_children: self.num_children(),
            pzxid: Zxid::from_u64(self.pzxid),
        }
    }

    /// The children's names.
    pub fn child_names(&self) -> Vec<ByteString> {
        self.children.as_ref().map_or_else(Vec::new, |c| {
            c.keys().map(|k| ByteString::from(&**k)).collect()
        })
    }

    fn child(&self, name: &str) -> Option<u32> {
        self.children.as_ref()?.get(name).copied()
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

/// A snapshot being written.
#[derive(Debug)]
struct SnapWriter {
    gen: u32,
    /// The zxid the snapshot is consistent at.
    zxid: u64,
    /// The DFS from the root: one frame per node whose children are still
    /// being visited.
    frames: Vec<SnapFrame>,
    /// Whether the DFS has started (visited the root).
    root_visited: bool,
    out: BytesMut,
    /// ACL lists written so far, by their address, and their snapshot ids.
    acl_refs: HashMap<usize, u32>,
    records: u64,
}

/// A node whose children a snapshot is visiting.
///
/// The children's names are copied into one buffer when the frame is made
/// (one allocation, not one `String` per child): a parent with a million
/// children costs one pass over its map, and each later step takes a few
/// children off the end.
#[derive(Debug)]
struct SnapFrame {
    /// The parent's path.
    path: String,
    /// The children's names, back to back.
    names: String,
    /// Each child's slab index and the end of its name in `names` (its start
    /// is the previous child's end).
    kids: Vec<(u32, u32)>,
}

impl SnapFrame {
    fn new(path: String, children: &HashMap<Box<str>, u32>) -> SnapFrame {
        let mut names = String::with_capacity(children.keys().map(|k| k.len()).sum());
        let mut kids = Vec::with_capacity(children.len());
        for (name, idx) in children {
            names.push_str(name);
            kids.push((*idx, names.len() as u32));
        }
        SnapFrame { path, names, kids }
    }

    /// The next child to visit and its path, written into `path`.
    fn pop(&mut self, path: &mut String) -> Option<u32> {
        let (idx, end) = self.kids.pop()?;
        let start = self.kids.last().map_or(0, |k| k.1);
        path.clear();
        path.push_str(&self.path);
        if self.path != "/" {
            path.push('/');
        }
        path.push_str(&self.names[start as usize..end as usize]);
        self.names.truncate(start as usize);
        Some(idx)
    }
}

/// The data tree.
#[derive(Debug)]
pub struct DataTree {
    nodes: Vec<Option<Node>>,
    free: Vec<u32>,
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
const SNAP_MAGIC: &[u8; 8] = b"RZKSNAP1";
/// Magic, zxid, session count and the end marker.
const SNAP_HEADER_BYTES: usize = 8 + 8 + 4 + 9;
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
        t.insert_raw("/", Node::new(Some(Bytes::new()), open.clone(), 0, 0, 0));
        for p in ["/zookeeper", "/zookeeper/quota"] {
            t.insert_raw(p, Node::new(Some(Bytes::new()), open.clone(), 0, 0, 0));
        }
        let read = t.acls.intern(&Acl::read_unsafe());
        let mut config = Node::new(Some(Bytes::new()), read, 0, 0, 0);
        config.aversion = -1;
        t.insert_raw("/zookeeper/config", config);
        t
    }

    fn empty() -> DataTree {
        DataTree {
            nodes: Vec::new(),
            free: Vec::new(),
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
    /// snapshot load). The parent must exist, except for `/`.
    fn insert_raw(&mut self, p: &str, node: Node) -> Option<u32> {
        let idx = if p == "/" {
            if !self.nodes.is_empty() {
                return None;
            }
            self.nodes.push(None);
            ROOT
        } else {
            let parent = self.lookup(path::parent(p)?)?;
            let name = path::name(p);
            if self.nodes[parent as usize].as_ref()?.child(name).is_some() {
                return None;
            }
            let idx = self.alloc();
            self.node_mut(parent)
                .children
                .get_or_insert_with(Default::default)
                .insert(name.into(), idx);
            idx
        };
        self.index_owner(p, node.owner);
        self.data_bytes += p.len() as u64 + node.data.as_ref().map_or(0, |d| d.len() as u64);
        self.node_count += 1;
        self.nodes[idx as usize] = Some(node);
        Some(idx)
    }

    /// Inserts the nodes of one depth of a snapshot being loaded. Siblings
    /// come together (the snapshot is a DFS), so the parent is looked up once
    /// per run of siblings and its children map is sized for the run at once.
    fn insert_level(&mut self, level: Vec<(&str, Node)>) -> Result<(), TxnError> {
        let paths: Vec<&str> = level.iter().map(|(p, _)| *p).collect();
        let mut parent: Option<(&str, u32)> = None;
        for (i, (p, node)) in level.into_iter().enumerate() {
            let orphan = || TxnError(format!("snapshot node {p} has no parent or is repeated"));
            if p == "/" {
                self.insert_raw(p, node).ok_or_else(orphan)?;
                continue;
            }
            let slash = p.rfind('/').ok_or_else(orphan)?;
            let (parent_path, name) = (if slash == 0 { "/" } else { &p[..slash] }, &p[slash + 1..]);
            let parent_idx = match parent {
                Some((pp, idx)) if pp == parent_path => idx,
                _ => {
                    let idx = self.lookup(parent_path).ok_or_else(orphan)?;
                    let run = paths[i..]
                        .iter()
                        .take_while(|q| path::parent(q) == Some(parent_path))
                        .count();
                    self.node_mut(idx)
                        .children
                        .get_or_insert_with(Default::default)
                        .reserve(run);
                    parent = Some((parent_path, idx));
                    idx
                }
            };
            self.insert_child(parent_idx, p, name, node)
                .map_err(|()| orphan())?;
        }
        Ok(())
    }

    /// Inserts `node` (path `p`, last component `name`) under the node at
    /// `parent_idx`, without touching the parent's counters (snapshot load).
    /// Fails if the parent has a child of that name.
    fn insert_child(&mut self, parent_idx: u32, p: &str, name: &str, node: Node) -> Result<(), ()> {
        // One hash of the name: the slot is taken first, and given back if the
        // name is a repeat.
        let idx = self.alloc();
        let children = self
            .node_mut(parent_idx)
            .children
            .get_or_insert_with(Default::default);
        match children.entry(name.into()) {
            std::collections::hash_map::Entry::Occupied(_) => {
                self.free.push(idx);
                return Err(());
            }
            std::collections::hash_map::Entry::Vacant(v) => {
                v.insert(idx);
            }
        }
        self.index_owner(p, node.owner);
        self.data_bytes += p.len() as u64 + node.data.as_ref().map_or(0, |d| d.len() as u64);
        self.node_count += 1;
        self.nodes[idx as usize] = Some(node);
        Ok(())
    }

    fn alloc(&mut self) -> u32 {
        if let Some(i) = self.free.pop() {
            return i;
        }
        self.nodes.push(None);
        (self.nodes.len() - 1) as u32
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
        self.nodes[idx as usize]
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
        self.nodes.first()?.as_ref()?;
        if p.len() == 1 {
            return Some(ROOT);
        }
        for name in p[1..].split('/') {
            idx = self.nodes[idx as usize].as_ref()?.child(name)?;
        }
        Some(idx)
    }

    /// The node at `path`.
    pub fn get(&self, p: &str) -> Option<&Node> {
        self.lookup(p).and_then(|i| self.nodes[i as usize].as_ref())
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
            if let Some(children) = self.nodes[i as usize]
                .as_ref()
                .and_then(|n| n.children.as_ref())
            {
                count += children.len() as i64;
                stack.extend(children.values().copied());
            }
        }
        count
    }

    /// Interns an ACL list.
    pub fn intern_acl(&mut self, acl: &[Acl]) -> Arc<[Acl]> {
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
        if self.nodes[parent as usize]
            .as_ref()
            .and_then(|n| n.child(name))
            .is_some()
        {
            return Err(ErrorCode::NodeExists);
        }
        self.cow(parent, parent_path);
        let acl = self.acls.intern(acl);
        let mut node = Node::new(data, acl, owner, zxid, time);
        node.snap_gen = self.snap_gen;
        let idx = self.alloc();
        let pn = self.node_mut(parent);
        pn.children
            .get_or_insert_with(Default::default)
            .insert(name.into(), idx);
        pn.ccount = pn.ccount.wrapping_add(1);
        pn.pzxid = zxid;
        self.index_owner(p, owner);
        self.data_bytes += p.len() as u64 + node.data.as_ref().map_or(0, |d| d.len() as u64);
        self.node_count += 1;
        self.nodes[idx as usize] = Some(node);
        Ok(idx)
    }

    /// Deletes the leaf at `p`; the parent's pzxid becomes `zxid`. Returns the
    /// deleted node (its ACL decides who may see the deletion's events).
    pub fn delete(&mut self, p: &str, zxid: u64) -> Result<Node, ErrorCode> {
        let parent_path = path::parent(p).ok_or(ErrorCode::BadArguments)?;
        let parent = self.lookup(parent_path).ok_or(ErrorCode::NoNode)?;
        let name = path::name(p);
        let idx = self.nodes[parent as usize]
            .as_ref()
            .and_then(|n| n.child(name))
            .ok_or(ErrorCode::NoNode)?;
        if self.nodes[idx as usize]
            .as_ref()
            .is_some_and(|n| n.num_children() > 0)
        {
            return Err(ErrorCode::NotEmpty);
        }
        self.cow(idx, p);
        self.cow(parent, parent_path);
        let pn = self.node_mut(parent);
        if let Some(children) = pn.children.as_mut() {
            children.remove(name);
            if children.is_empty() {
                pn.children = None;
            }
        }
        pn.pzxid = zxid;
        let node = self.nodes[idx as usize]
            .take()
            .expect("child index is live");
        self.free.push(idx);
        self.unindex_owner(p, node.owner);
        self.data_bytes = self
            .data_bytes
            .saturating_sub(p.len() as u64 + node.data.as_ref().map_or(0, |d| d.len() as u64));
        self.node_count -= 1;
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
        let old = n.data.as_ref().map_or(0, |d| d.len() as u64);
        let new = data.as_ref().map_or(0, |d| d.len() as u64);
        n.data = data;
        n.version = n.version.wrapping_add(1);
        n.mzxid = zxid;
        n.mtime = time;
        let stat = n.stat();
        self.data_bytes = (self.data_bytes + new).saturating_sub(old);
        Ok(stat)
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

    /// Starts a snapshot consistent at `zxid` (the last applied txn) with these
    /// sessions. Returns false if one is already being written.
    pub fn begin_snapshot(&mut self, zxid: Zxid, sessions: &[SessionRecord]) -> bool {
        if self.snap.is_some() {
            return false;
        }
        self.snap_gen = self.snap_gen.wrapping_add(1);
        // Sized once from the tree (a record is its path, its data and about
        // 70 bytes): the buffer does not grow by copies while nodes are written,
        // and the pages it does not use are never touched.
        let estimate = SNAP_HEADER_BYTES
            + sessions.len() * 28
            + self.data_bytes as usize
            + self.node_count * SNAP_RECORD_FIXED_BYTES;
        let mut out = BytesMut::with_capacity(estimate + estimate / 16);
        out.put_slice(SNAP_MAGIC);
        out.put_u64(zxid.as_u64());
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
        });
        true
    }

    /// Writes up to `budget` nodes of the snapshot in progress. Returns the
    /// finished snapshot (its zxid and bytes) when the last node is written.
    pub fn snapshot_step(&mut self, budget: usize) -> Option<(Zxid, Bytes)> {
        let mut snap = self.snap.take()?;
        let mut p = String::new();
        for _ in 0..budget {
            let idx = if !snap.root_visited {
                snap.root_visited = true;
                p.clear();
                p.push('/');
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
            let Some(node) = self.nodes.get_mut(idx as usize).and_then(Option::as_mut) else {
                continue; // deleted since its parent was visited (its old state is written)
            };
            if node.czxid > snap.zxid {
                continue; // created after the snapshot's zxid, and so is all below it
            }
            if node.snap_gen != snap.gen {
                node.snap_gen = snap.gen;
                write_record(&mut snap, &p, node);
            }
            if let Some(children) = node.children.as_ref() {
                snap.frames.push(SnapFrame::new(p.clone(), children));
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

    /// Copy-on-write: before the node at `idx` (path `p`) changes, a snapshot
    /// in progress that has not written it yet writes its current state.
    fn cow(&mut self, idx: u32, p: &str) {
        let Some(snap) = self.snap.as_mut() else {
            return;
        };
        let Some(node) = self.nodes[idx as usize].as_mut() else {
            return;
        };
        if node.snap_gen == snap.gen || node.czxid > snap.zxid {
            return;
        }
        node.snap_gen = snap.gen;
        write_record(snap, p, node);
    }

    /// Loads a snapshot: the tree, the sessions and the zxid it is
    /// consistent at.
    pub fn load_snapshot(bytes: &[u8]) -> Result<(DataTree, Vec<SessionRecord>, Zxid), TxnError> {
        let mut r = bytes;
        if r.len() < 8 || &r[..8] != SNAP_MAGIC {
            return Err(TxnError("not an rzk snapshot".into()));
        }
        r = &r[8..];
        let zxid = Zxid::from_u64(txn::get_i64(&mut r)? as u64);
        let n = txn::get_u32(&mut r)? as usize;
        let mut sessions = Vec::with_capacity(n.min(r.len() / 28));
        for _ in 0..n {
            let id = txn::get_i64(&mut r)?;
            let timeout_ms = txn::get_i32(&mut r)?;
            if r.len() < 16 {
                return Err(TxnError("truncated session".into()));
            }
            let mut password = [0u8; 16];
            password.copy_from_slice(&r[..16]);
            r = &r[16..];
            sessions.push(SessionRecord {
                id,
                timeout_ms,
                password,
            });
        }
        let mut tree = DataTree::empty();
        let mut acl_table: Vec<Arc<[Acl]>> = Vec::new();
        // Records come in DFS order, so a node's parent is almost always in
        // the tree already: insert it at once. Copy-on-write records can come
        // before their parent; they wait, by depth, and go in after the
        // stream (every parent before its children). Paths are borrowed from
        // `bytes`, not copied.
        let declared_hint = bytes.len().checked_sub(8).map_or(0, |at| {
            u64::from_be_bytes(bytes[at..].try_into().expect("8 bytes"))
        });
        tree.nodes
            .reserve_exact(declared_hint.min(bytes.len() as u64 / 64) as usize);
        let mut deferred: Vec<Vec<(&str, Node)>> = Vec::new();
        let mut parent: Option<(&str, u32)> = None;
        let mut sized = Vec::new();
        let mut records = 0u64;
        loop {
            match txn::get_u8(&mut r)? {
                0 => break,
                1 => {}
                t => return Err(TxnError(format!("unknown snapshot record {t}"))),
            }
            let p = txn::get_str_ref(&mut r)?;
            let data = txn::get_buf(&mut r)?;
            let acl_ref = txn::get_u32(&mut r)? as usize;
            if acl_ref == acl_table.len() {
                let acl = txn::get_acl(&mut r)?;
                acl_table.push(tree.acls.intern(&acl));
            }
            let acl = acl_table
                .get(acl_ref)
                .cloned()
                .ok_or_else(|| TxnError(format!("ACL ref {acl_ref} undefined")))?;
            let mut node = Node::new(data, acl, 0, 0, 0);
            node.czxid = txn::get_i64(&mut r)? as u64;
            node.mzxid = txn::get_i64(&mut r)? as u64;
            node.pzxid = txn::get_i64(&mut r)? as u64;
            node.ctime = txn::get_i64(&mut r)?;
            node.mtime = txn::get_i64(&mut r)?;
            node.version = txn::get_i32(&mut r)?;
            node.aversion = txn::get_i32(&mut r)?;
            node.ccount = txn::get_i32(&mut r)?;
            node.owner = txn::get_i64(&mut r)?;
            records += 1;
            let orphan = || TxnError(format!("snapshot node {p} has no parent or is repeated"));
            let Some(slash) = p.rfind('/') else {
                return Err(orphan());
            };
            if p == "/" {
                tree.insert_raw(p, node).ok_or_else(orphan)?;
                continue;
            }
            let parent_path = if slash == 0 { "/" } else { &p[..slash] };
            let found = match parent {
                Some((pp, idx)) if pp == parent_path => Some(idx),
                _ => tree.lookup(parent_path),
            };
            let Some(parent_idx) = found else {
                let depth = p.bytes().filter(|&b| b == b'/').count();
                if deferred.len() <= depth {
                    deferred.resize_with(depth + 1, Vec::new);
                }
                deferred[depth].push((p, node));
                continue;
            };
            parent = Some((parent_path, parent_idx));
            let pn = tree.node_mut(parent_idx);
            if pn.children.is_none() {
                // Sized once for the children it can have: at most its create
                // count, and at most the records still to come. Too large a
                // guess is given back below.
                let room = (pn.ccount.max(0) as u64).min(declared_hint.saturating_sub(records));
                if room > 0 {
                    let mut map = HashMap::new();
                    map.reserve(room as usize);
                    pn.children = Some(Box::new(map));
                    sized.push(parent_idx);
                }
            }
            tree.insert_child(parent_idx, p, &p[slash + 1..], node)
                .map_err(|()| orphan())?;
        }
        let declared = txn::get_i64(&mut r)? as u64;
        if declared != records {
            return Err(TxnError(format!(
                "snapshot declares {declared} nodes, holds {records}"
            )));
        }
        for level in deferred {
            tree.insert_level(level)?;
        }
        for idx in sized {
            if let Some(children) = tree.node_mut(idx).children.as_mut() {
                if children.capacity() > 2 * children.len() + 16 {
                    children.shrink_to_fit();
                }
            }
        }
        if tree.nodes.is_empty() {
            return Err(TxnError("snapshot has no root".into()));
        }
        Ok((tree, sessions, zxid))
    }

    /// Every node by path with its data, ACL and Stat: a canonical dump for
    /// comparing trees in tests.
    pub fn dump(&self) -> std::collections::BTreeMap<String, (Option<Bytes>, Vec<Acl>, Stat)> {
        let mut out = std::collections::BTreeMap::new();
        let mut stack = vec![(ROOT, "/".to_owned())];
        while let Some((idx, p)) = stack.pop() {
            let Some(n) = self.nodes.get(idx as usize).and_then(Option::as_ref) else {
                continue;
            };
            if let Some(children) = n.children.as_ref() {
                for (name, child) in children.iter() {
                    stack.push((*child, path::join(&p, name)));
                }
            }
            out.insert(p, (n.data.clone(), n.acl.to_vec(), n.stat()));
        }
        out
    }
}

fn write_record(snap: &mut SnapWriter, p: &str, node: &Node) {
    let out = &mut snap.out;
    out.put_u8(1);
    txn::put_str(out, p);
    txn::put_buf(out, node.data.as_deref());
    let key = node.acl.as_ptr() as usize;
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
            std::mem::size_of::<Node>() <= 128,
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
        assert_eq!(&*config.acl, &Acl::read_unsafe()[..]);
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
        assert_eq!(t.get("/n/c").unwrap().data, None);
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

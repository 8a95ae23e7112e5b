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
//! node's create counter: see [`Node::cversion`]). ACL lists are interned:
//! nodes that share a list share one allocation. A znode of 128 bytes of
//! data costs about 104 bytes of node, its name and data in one malloc
//! chunk, and about 7 bytes in its parent's table.
//!
//! Snapshots (see [`DataTree::begin_snapshot`]): a snapshot is consistent at
//! the zxid it starts at and is written a few thousand nodes at a time between
//! transactions. Before a transaction changes a node the snapshot has not yet
//! written, the node's old state is written first (copy-on-write, node by node),
//! so the snapshot is exactly the tree at its zxid while writes go on.
//!
//! The parts, each in its own file:
//! - this file: [`DataTree`] and its operations (lookup, create, delete,
//!   setData, setACL, import, counters);
//! - `node`: the node, its `[name | data]` blob, the slab and the children
//!   tables;
//! - `index`: what an owner value means, and the ephemeral, container and
//!   TTL indexes;
//! - `snapshot`: the snapshot format, the copy-on-write writer and the
//!   loader.
//!
//! Relies on: prep having checked a change before it is applied (a change
//! that does not apply fails without changing anything, and the caller
//! logs it as a bug), and on the path rules of [`crate::path`] (a path that
//! breaks them is simply not found).

mod index;
mod node;
mod snapshot;

use std::collections::BTreeSet;

use bytes::Bytes;
use foldhash::HashMap;
use rzk_wire::{Acl, ByteString, ErrorCode, Stat};

use crate::acl::{AclInterner, AclRef};
use crate::path;
use crate::txn::TxnError;

pub use index::{owner_is_session, owner_ttl, ttl_owner, CONTAINER_OWNER, TTL_MAX_MS};
pub use node::Node;
pub use snapshot::{SessionRecord, SNAPSHOT_LOAD_READ_BYTES, SNAPSHOT_SPLIT_MIN_BYTES};

use index::OwnerIndex;
use node::{Slab, ROOT};
use snapshot::SnapWriter;

/// A node as an import restores it: every stored field given as the source
/// had it (ZooKeeper persists the create counter C as `cversion`).
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

/// The data tree.
#[derive(Debug)]
#[cfg_attr(test, derive(Clone))]
pub struct DataTree {
    /// The nodes, and the children tables that link them.
    nodes: Slab,
    /// The ACL lists the nodes point at, one allocation per distinct list.
    acls: AclInterner,
    /// Ephemerals per session, containers and TTL nodes.
    owners: OwnerIndex,
    /// Sum of path and data lengths, ZooKeeper's approximate_data_size.
    data_bytes: u64,
    /// Live nodes.
    node_count: usize,
    /// The generation of the latest snapshot; a node marked with it has been
    /// written by that snapshot.
    snap_gen: u32,
    /// The snapshot being written, if any.
    snap: Option<SnapWriter>,
}

impl Default for DataTree {
    fn default() -> Self {
        DataTree::new()
    }
}

impl DataTree {
    /// ZooKeeper's initial tree: `/`, `/zookeeper`, `/zookeeper/quota` and
    /// `/zookeeper/config` (READ-only to the world, aversion −1), as a fresh
    /// ZooKeeper shows them.
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

    /// A tree without even a root (a load or an import fills it).
    fn empty() -> DataTree {
        DataTree {
            nodes: Slab::new(),
            acls: AclInterner::default(),
            owners: OwnerIndex::default(),
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
            if !self.nodes.is_unused() {
                return None;
            }
            let idx = self.nodes.alloc();
            debug_assert_eq!(idx, ROOT);
            self.account(p, &node);
            self.nodes.put(idx, node);
            return Some(idx);
        }
        let parent = self.lookup(path::parent(p)?)?;
        self.insert_child(parent, p, node).ok()
    }

    /// Inserts `node` (path `p`; its name is the last component) under the
    /// node at `parent_idx`, without touching the parent's counters. Fails,
    /// changing nothing, if the parent has a child of that name.
    fn insert_child(&mut self, parent_idx: u32, p: &str, node: Node) -> Result<u32, ()> {
        let hash = self.nodes.hash(node.name());
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
        debug_assert_eq!(
            hash,
            self.nodes.hash(node.name()),
            "hashed with another seed"
        );
        let idx = self.nodes.alloc();
        self.nodes.put(idx, node);
        if !self.nodes.link_child(parent_idx, idx, hash) {
            self.nodes.remove(idx);
            return Err(());
        }
        let node = self.nodes.get(idx).expect("just stored");
        let (owner, len) = (node.owner, node.data_len());
        self.owners.insert(p, owner);
        self.data_bytes += (p.len() + len) as u64;
        self.node_count += 1;
        Ok(idx)
    }

    /// Counts the root in (the other nodes are counted by `insert_child`).
    fn account(&mut self, p: &str, node: &Node) {
        self.owners.insert(p, node.owner);
        self.data_bytes += (p.len() + node.data_len()) as u64;
        self.node_count += 1;
    }

    /// Counts a removed node out.
    fn unaccount(&mut self, p: &str, node: &Node) {
        self.owners.remove(p, node.owner);
        self.data_bytes = self
            .data_bytes
            .saturating_sub((p.len() + node.data_len()) as u64);
        self.node_count -= 1;
    }

    /// The slab index of the node at `path`. Any string is accepted: a malformed
    /// path simply finds nothing.
    pub fn lookup(&self, p: &str) -> Option<u32> {
        if !p.starts_with('/') {
            return None;
        }
        let mut idx = ROOT;
        self.nodes.get(ROOT)?;
        if p.len() == 1 {
            return Some(ROOT);
        }
        for name in p[1..].split('/') {
            idx = self.nodes.child(self.nodes.get(idx)?, name.as_bytes())?;
        }
        Some(idx)
    }

    /// The node at `path`.
    pub fn get(&self, p: &str) -> Option<&Node> {
        self.lookup(p).and_then(|i| self.nodes.get(i))
    }

    /// The names of `node`'s children (a node of this tree), in no order.
    pub fn child_names(&self, node: &Node) -> Vec<ByteString> {
        node.children.as_ref().map_or_else(Vec::new, |c| {
            c.iter()
                .filter_map(|&i| self.nodes.get(i))
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
        self.owners.ephemerals_of(session)
    }

    /// Every session that owns ephemerals, with its paths.
    pub fn all_ephemerals(&self) -> &HashMap<i64, BTreeSet<String>> {
        self.owners.all_ephemerals()
    }

    /// Ephemeral node count.
    pub fn ephemeral_count(&self) -> usize {
        self.owners.ephemeral_count()
    }

    /// Paths of containers.
    pub fn containers(&self) -> &BTreeSet<String> {
        self.owners.containers()
    }

    /// Paths of TTL nodes.
    pub fn ttl_nodes(&self) -> &BTreeSet<String> {
        self.owners.ttls()
    }

    /// The number of descendants of the node at `idx` (not counting itself).
    pub fn descendant_count(&self, idx: u32) -> i64 {
        let mut count = 0i64;
        let mut stack = vec![idx];
        while let Some(i) = stack.pop() {
            if let Some(children) = self.nodes.get(i).and_then(|n| n.children.as_ref()) {
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
            .nodes
            .get(parent)
            .and_then(|n| self.nodes.child(n, name.as_bytes()))
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
        let pn = self.nodes.node_mut(parent);
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
            .nodes
            .get(parent)
            .and_then(|n| self.nodes.child(n, name.as_bytes()))
            .ok_or(ErrorCode::NoNode)?;
        if self.nodes.get(idx).is_some_and(|n| n.num_children() > 0) {
            return Err(ErrorCode::NotEmpty);
        }
        self.cow(idx, p);
        self.cow(parent, parent_path);
        self.nodes.unlink_child(parent, name.as_bytes());
        self.nodes.node_mut(parent).pzxid = zxid;
        let node = self.nodes.remove(idx);
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
        let n = self.nodes.node_mut(idx);
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
        let n = self.nodes.node_mut(idx);
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
        let n = self.nodes.node_mut(idx);
        n.acl = acl;
        n.aversion = n.aversion.wrapping_add(1);
        Ok(n.stat())
    }

    /// Drops interned ACL lists that no node uses.
    pub fn collect_acl_garbage(&mut self) {
        self.acls.collect_garbage();
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
            let Some(n) = self.nodes.get(idx) else {
                continue;
            };
            if let Some(children) = n.children.as_ref() {
                for &child in children.iter() {
                    if let Some(c) = self.nodes.get(child) {
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

#[cfg(test)]
mod tests {
    use rzk_wire::SessionId;

    use super::*;

    fn open() -> Vec<Acl> {
        Acl::open_unsafe()
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
}

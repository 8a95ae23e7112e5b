//! Watches (docs/client-protocol.md, "Watches"): one-shot data/exist and child
//! watches, persistent and persistent-recursive watches (addWatch), with the
//! 3.9 behaviour where the modes coexist on one connection and path.
//!
//! Storage is interned on both sides, so that one watch costs few bytes (the
//! goal is ≤ 48 B; `benches/run watch-rss` measured 25.5 B of the server's RSS
//! per watch with 1M watches on 100k znodes, 55.9 B before):
//! - every watched path is stored once, in a slot of `paths` numbered by a
//!   `PathId` and found by its text through a table of 4-byte ids;
//! - every connection with a watch has a slot of `conns`, and the path's
//!   watcher list holds one `u32` per watching connection: its slot number
//!   and the kinds it holds there as four bits;
//! - the connection's slot holds the set of path ids it watches, so closing a
//!   connection drops its watches without a scan.

use std::hash::BuildHasher;

use foldhash::{HashMap, HashSet};
use hashbrown::HashTable;

use rzk_wire::WatcherType;

use crate::path;

/// A connection, as the core numbers them.
pub type ConnId = u64;

/// What a watch is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum WatchKind {
    /// One-shot data or exist watch (getData, exists).
    Data,
    /// One-shot child watch (getChildren).
    Child,
    /// addWatch mode 0.
    Persistent,
    /// addWatch mode 1.
    Recursive,
}

/// The kinds a connection holds on a path, as bits.
type Kinds = u32;
const DATA: Kinds = 1;
const CHILD: Kinds = 2;
const PERSISTENT: Kinds = 4;
const RECURSIVE: Kinds = 8;
const KIND_BITS: u32 = 4;
const KINDS_MASK: Kinds = (1 << KIND_BITS) - 1;

impl WatchKind {
    fn bit(self) -> Kinds {
        match self {
            WatchKind::Data => DATA,
            WatchKind::Child => CHILD,
            WatchKind::Persistent => PERSISTENT,
            WatchKind::Recursive => RECURSIVE,
        }
    }
}

/// The number of a watched path's slot in `WatchManager::paths`.
type PathId = u32;

/// The number of a watching connection's slot in `WatchManager::conns`.
type ConnSlot = u32;

/// Connection slots are reused, so their number is bounded by the connections
/// that hold a watch at one time; 2^28 is far beyond any file descriptor limit.
const CONN_SLOTS_MAX: usize = 1 << (32 - KIND_BITS);

/// One watching connection on one path: `slot << 4 | kinds`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Watcher(u32);

impl Watcher {
    fn new(slot: ConnSlot, kinds: Kinds) -> Watcher {
        Watcher(slot << KIND_BITS | kinds)
    }

    fn slot(self) -> ConnSlot {
        self.0 >> KIND_BITS
    }

    fn kinds(self) -> Kinds {
        self.0 & KINDS_MASK
    }
}

/// A watched path (or a free slot: empty text, no watchers).
#[derive(Debug, Default)]
struct PathEntry {
    path: Box<str>,
    /// At most one per connection slot.
    watchers: Vec<Watcher>,
}

impl PathEntry {
    fn position(&self, slot: ConnSlot) -> Option<usize> {
        self.watchers.iter().position(|w| w.slot() == slot)
    }

    fn kinds_of(&self, slot: ConnSlot) -> Kinds {
        self.position(slot).map_or(0, |i| self.watchers[i].kinds())
    }
}

/// A connection with at least one watch (or a free slot: id 0, no paths).
#[derive(Debug, Default)]
struct ConnEntry {
    id: ConnId,
    /// The paths where it holds at least one kind.
    paths: HashSet<PathId>,
}

/// Every watch of the server.
#[derive(Debug, Default)]
pub struct WatchManager {
    /// Watched paths by id; ids in `free_paths` are unused.
    paths: Vec<PathEntry>,
    free_paths: Vec<PathId>,
    /// Ids of the used slots of `paths`, hashed by their path's text.
    by_path: HashTable<PathId>,
    hasher: foldhash::fast::RandomState,
    /// Watching connections by slot; slots in `free_conns` are unused.
    conns: Vec<ConnEntry>,
    free_conns: Vec<ConnSlot>,
    conn_slots: HashMap<ConnId, ConnSlot>,
    /// Recursive registrations in total: when 0, events skip the ancestor walk.
    recursive_count: usize,
}

impl WatchManager {
    fn find(&self, p: &str) -> Option<PathId> {
        let hash = self.hasher.hash_one(p);
        let paths = &self.paths;
        self.by_path
            .find(hash, |id| &*paths[*id as usize].path == p)
            .copied()
    }

    fn intern(&mut self, p: &str) -> PathId {
        if let Some(id) = self.find(p) {
            return id;
        }
        let entry = PathEntry {
            path: p.into(),
            watchers: Vec::new(),
        };
        let id = match self.free_paths.pop() {
            Some(id) => {
                self.paths[id as usize] = entry;
                id
            }
            None => {
                self.paths.push(entry);
                PathId::try_from(self.paths.len() - 1).expect("fewer than 2^32 watched paths")
            }
        };
        let (hasher, paths) = (&self.hasher, &self.paths);
        self.by_path.insert_unique(hasher.hash_one(p), id, |id| {
            hasher.hash_one(&*paths[*id as usize].path)
        });
        id
    }

    /// Frees the path's slot if nobody watches it any more.
    fn release_path_if_unwatched(&mut self, id: PathId) {
        let entry = &self.paths[id as usize];
        if !entry.watchers.is_empty() {
            return;
        }
        let hash = self.hasher.hash_one(&*entry.path);
        if let Ok(found) = self.by_path.find_entry(hash, |x| *x == id) {
            found.remove();
        }
        self.paths[id as usize] = PathEntry::default();
        self.free_paths.push(id);
    }

    fn slot_of(&mut self, conn: ConnId) -> ConnSlot {
        if let Some(slot) = self.conn_slots.get(&conn) {
            return *slot;
        }
        let entry = ConnEntry {
            id: conn,
            paths: HashSet::default(),
        };
        let slot = match self.free_conns.pop() {
            Some(slot) => {
                self.conns[slot as usize] = entry;
                slot
            }
            None => {
                assert!(
                    self.conns.len() < CONN_SLOTS_MAX,
                    "2^28 watching connections"
                );
                self.conns.push(entry);
                (self.conns.len() - 1) as ConnSlot
            }
        };
        self.conn_slots.insert(conn, slot);
        slot
    }

    /// Forgets that the connection in `slot` watches `id` (it holds no kind
    /// there any more), and frees the slot if that was its last path.
    fn unlink(&mut self, slot: ConnSlot, id: PathId) {
        let entry = &mut self.conns[slot as usize];
        entry.paths.remove(&id);
        if entry.paths.is_empty() {
            self.conn_slots.remove(&entry.id);
            self.conns[slot as usize] = ConnEntry::default();
            self.free_conns.push(slot);
        }
    }

    /// Registers a watch (a no-op if it exists).
    pub fn add(&mut self, conn: ConnId, p: &str, kind: WatchKind) {
        let id = self.intern(p);
        let slot = self.slot_of(conn);
        let bit = kind.bit();
        let entry = &mut self.paths[id as usize];
        match entry.position(slot) {
            Some(i) => {
                let w = entry.watchers[i];
                if w.kinds() & bit != 0 {
                    return;
                }
                entry.watchers[i] = Watcher::new(slot, w.kinds() | bit);
            }
            None => {
                entry.watchers.push(Watcher::new(slot, bit));
                self.conns[slot as usize].paths.insert(id);
            }
        }
        if kind == WatchKind::Recursive {
            self.recursive_count += 1;
        }
    }

    /// Clears `consumed` kinds of every watcher of `id`; a watcher left with
    /// none is removed. Appends to `out` the connections that held any of
    /// `told` before, and frees the path if nobody watches it any more.
    fn fire(&mut self, id: PathId, told: Kinds, consumed: Kinds, out: &mut Vec<ConnId>) {
        let mut i = 0;
        while i < self.paths[id as usize].watchers.len() {
            let w = self.paths[id as usize].watchers[i];
            if w.kinds() & told != 0 {
                out.push(self.conns[w.slot() as usize].id);
            }
            let left = w.kinds() & !consumed;
            if left == w.kinds() {
                i += 1;
                continue;
            }
            if left != 0 {
                self.paths[id as usize].watchers[i] = Watcher::new(w.slot(), left);
                i += 1;
                continue;
            }
            self.paths[id as usize].watchers.swap_remove(i);
            self.unlink(w.slot(), id);
        }
        self.release_path_if_unwatched(id);
    }

    /// The connections to tell about a NodeCreated, NodeDeleted or
    /// NodeDataChanged of `p`: one-shot data watches on `p` (consumed; for a
    /// deletion also the one-shot child watches on `p`), persistent watches on
    /// `p`, recursive watches on `p` and its ancestors. Each connection once.
    pub fn trigger_node(&mut self, p: &str, deleted: bool) -> Vec<ConnId> {
        let mut out = Vec::new();
        if let Some(id) = self.find(p) {
            let consumed = if deleted { DATA | CHILD } else { DATA };
            self.fire(id, consumed | PERSISTENT | RECURSIVE, consumed, &mut out);
        }
        if self.recursive_count > 0 {
            let mut at = p;
            while let Some(parent) = path::parent(at) {
                if let Some(id) = self.find(parent) {
                    let entry = &self.paths[id as usize];
                    for w in &entry.watchers {
                        if w.kinds() & RECURSIVE != 0 {
                            out.push(self.conns[w.slot() as usize].id);
                        }
                    }
                }
                if parent == "/" {
                    break;
                }
                at = parent;
            }
        }
        out.sort_unstable();
        out.dedup();
        out
    }

    /// The connections to tell about a NodeChildrenChanged of `p`: one-shot
    /// child watches (consumed) and persistent watches on `p`. Recursive
    /// watches never get NodeChildrenChanged.
    pub fn trigger_children(&mut self, p: &str) -> Vec<ConnId> {
        let Some(id) = self.find(p) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        self.fire(id, CHILD | PERSISTENT, CHILD, &mut out);
        out.sort_unstable();
        out.dedup();
        out
    }

    /// Drops every watch of a closed connection.
    pub fn remove_conn(&mut self, conn: ConnId) {
        let Some(slot) = self.conn_slots.remove(&conn) else {
            return;
        };
        let paths = std::mem::take(&mut self.conns[slot as usize].paths);
        self.conns[slot as usize] = ConnEntry::default();
        self.free_conns.push(slot);
        for id in paths {
            let entry = &mut self.paths[id as usize];
            if let Some(i) = entry.position(slot) {
                if entry.watchers[i].kinds() & RECURSIVE != 0 {
                    self.recursive_count -= 1;
                }
                entry.watchers.swap_remove(i);
            }
            self.release_path_if_unwatched(id);
        }
    }

    /// The kinds that a watcher type names for a connection holding `held`.
    fn kinds(t: WatcherType, held: Kinds) -> Kinds {
        let one_shot_or_persistent = |one: Kinds| {
            if held & one != 0 {
                one
            } else {
                held & PERSISTENT
            }
        };
        match t {
            WatcherType::Children => one_shot_or_persistent(CHILD),
            WatcherType::Data => match one_shot_or_persistent(DATA) {
                0 => held & RECURSIVE,
                k => k,
            },
            WatcherType::Any => held,
            WatcherType::Persistent => held & PERSISTENT,
            WatcherType::PersistentRecursive => held & RECURSIVE,
        }
    }

    /// checkWatches: whether `conn` has a watch of type `t` at `p`.
    pub fn has(&self, conn: ConnId, p: &str, t: WatcherType) -> bool {
        let (Some(id), Some(slot)) = (self.find(p), self.conn_slots.get(&conn)) else {
            return false;
        };
        Self::kinds(t, self.paths[id as usize].kinds_of(*slot)) != 0
    }

    /// removeWatches: removes `conn`'s watches of type `t` at `p`; false if
    /// there were none.
    pub fn remove(&mut self, conn: ConnId, p: &str, t: WatcherType) -> bool {
        let (Some(id), Some(&slot)) = (self.find(p), self.conn_slots.get(&conn)) else {
            return false;
        };
        let entry = &mut self.paths[id as usize];
        let Some(i) = entry.position(slot) else {
            return false;
        };
        let held = entry.watchers[i].kinds();
        let removed = Self::kinds(t, held);
        if removed == 0 {
            return false;
        }
        if removed & RECURSIVE != 0 {
            self.recursive_count -= 1;
        }
        let left = held & !removed;
        if left != 0 {
            entry.watchers[i] = Watcher::new(slot, left);
            return true;
        }
        entry.watchers.swap_remove(i);
        self.unlink(slot, id);
        self.release_path_if_unwatched(id);
        true
    }

    fn live_paths(&self) -> impl Iterator<Item = &PathEntry> {
        self.by_path.iter().map(|id| &self.paths[*id as usize])
    }

    /// Total registrations.
    pub fn watch_count(&self) -> usize {
        self.live_paths()
            .flat_map(|e| &e.watchers)
            .map(|w| w.kinds().count_ones() as usize)
            .sum()
    }

    /// Watched paths.
    pub fn path_count(&self) -> usize {
        self.by_path.len()
    }

    /// Connections with at least one watch.
    pub fn conn_count(&self) -> usize {
        self.conn_slots.len()
    }

    /// Paths watched by each connection (wchc).
    pub fn by_conn(&self) -> impl Iterator<Item = (ConnId, Vec<&str>)> {
        self.conn_slots.iter().map(|(c, slot)| {
            let mut v: Vec<&str> = self.conns[*slot as usize]
                .paths
                .iter()
                .map(|id| &*self.paths[*id as usize].path)
                .collect();
            v.sort_unstable();
            (*c, v)
        })
    }

    /// Connections watching each path (wchp).
    pub fn by_path(&self) -> impl Iterator<Item = (&str, Vec<ConnId>)> {
        self.live_paths().map(|e| {
            let mut v: Vec<ConnId> = e
                .watchers
                .iter()
                .map(|w| self.conns[w.slot() as usize].id)
                .collect();
            v.sort_unstable();
            (&*e.path, v)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_shot_watches_fire_once() {
        let mut w = WatchManager::default();
        w.add(1, "/a", WatchKind::Data);
        w.add(2, "/a", WatchKind::Data);
        w.add(1, "/a", WatchKind::Data);
        assert_eq!(w.watch_count(), 2);
        assert_eq!(w.trigger_node("/a", false), vec![1, 2]);
        assert!(w.trigger_node("/a", false).is_empty());
        assert_eq!(w.watch_count(), 0);
        assert_eq!(w.conn_count(), 0);
    }

    #[test]
    fn delete_fires_data_and_child_watches_once_per_connection() {
        let mut w = WatchManager::default();
        w.add(1, "/a", WatchKind::Data);
        w.add(1, "/a", WatchKind::Child);
        w.add(2, "/a", WatchKind::Child);
        assert_eq!(w.trigger_node("/a", true), vec![1, 2]);
        assert_eq!(w.watch_count(), 0);
    }

    #[test]
    fn persistent_and_recursive_follow_the_observed_table() {
        let mut w = WatchManager::default();
        w.add(1, "/pr", WatchKind::Recursive);
        w.add(2, "/pr", WatchKind::Persistent);
        w.add(3, "/pr", WatchKind::Data);
        w.add(3, "/pr", WatchKind::Child);
        // create /pr/c
        assert_eq!(w.trigger_node("/pr/c", false), vec![1]);
        assert_eq!(w.trigger_children("/pr"), vec![2, 3]);
        // create /pr/c/d
        assert_eq!(w.trigger_node("/pr/c/d", false), vec![1]);
        assert!(w.trigger_children("/pr/c").is_empty());
        // setData /pr
        assert_eq!(w.trigger_node("/pr", false), vec![1, 2, 3]);
        // delete /pr/c: S was consumed
        assert_eq!(w.trigger_node("/pr/c", true), vec![1]);
        assert_eq!(w.trigger_children("/pr"), vec![2]);
        assert_eq!(w.trigger_node("/pr", true), vec![1, 2]);
        assert_eq!(w.trigger_node("/pr", false), vec![1, 2]);
    }

    #[test]
    fn modes_coexist_on_one_connection() {
        let mut w = WatchManager::default();
        w.add(1, "/x", WatchKind::Persistent);
        w.add(1, "/x", WatchKind::Data);
        assert_eq!(w.trigger_node("/x", false), vec![1]);
        assert_eq!(
            w.trigger_node("/x", false),
            vec![1],
            "the persistent watch stays"
        );
    }

    #[test]
    fn check_and_remove_by_type() {
        let mut w = WatchManager::default();
        w.add(1, "/a", WatchKind::Data);
        w.add(1, "/a", WatchKind::Child);
        assert!(w.has(1, "/a", WatcherType::Data));
        assert!(
            !w.has(2, "/a", WatcherType::Data),
            "only this connection's watches"
        );
        assert!(w.remove(1, "/a", WatcherType::Data));
        assert!(!w.has(1, "/a", WatcherType::Data));
        assert!(w.has(1, "/a", WatcherType::Children));
        assert!(w.remove(1, "/a", WatcherType::Any));
        assert!(!w.remove(1, "/a", WatcherType::Any));
        w.add(1, "/r", WatchKind::Recursive);
        assert!(w.remove(1, "/r", WatcherType::PersistentRecursive));
        assert_eq!(w.recursive_count, 0);
    }

    #[test]
    fn closing_a_connection_drops_its_watches() {
        let mut w = WatchManager::default();
        for i in 0..100 {
            w.add(7, &format!("/p{i}"), WatchKind::Data);
        }
        w.add(8, "/p1", WatchKind::Recursive);
        w.remove_conn(7);
        assert_eq!(w.watch_count(), 1);
        assert_eq!(w.path_count(), 1);
        w.remove_conn(8);
        assert_eq!(w.path_count(), 0);
        assert_eq!(w.recursive_count, 0);
    }

    /// A plain model of the watch semantics: (path, connection) → kinds held.
    #[derive(Default)]
    struct Model {
        held: std::collections::BTreeMap<(String, ConnId), [bool; 4]>,
    }

    const KINDS: [WatchKind; 4] = [
        WatchKind::Data,
        WatchKind::Child,
        WatchKind::Persistent,
        WatchKind::Recursive,
    ];

    fn is_ancestor(a: &str, p: &str) -> bool {
        a != p && (a == "/" || (p.starts_with(a) && p[a.len()..].starts_with('/')))
    }

    impl Model {
        fn add(&mut self, c: ConnId, p: &str, k: WatchKind) {
            self.held.entry((p.to_string(), c)).or_default()[k as usize] = true;
        }

        fn settle(&mut self, mut out: Vec<ConnId>) -> Vec<ConnId> {
            self.held.retain(|_, k| k.iter().any(|b| *b));
            out.sort_unstable();
            out.dedup();
            out
        }

        fn trigger_node(&mut self, p: &str, deleted: bool) -> Vec<ConnId> {
            let mut out = Vec::new();
            for ((q, c), k) in self.held.iter_mut() {
                if q == p {
                    if k[0] || (deleted && k[1]) || k[2] || k[3] {
                        out.push(*c);
                    }
                    k[0] = false;
                    if deleted {
                        k[1] = false;
                    }
                } else if is_ancestor(q, p) && k[3] {
                    out.push(*c);
                }
            }
            self.settle(out)
        }

        fn trigger_children(&mut self, p: &str) -> Vec<ConnId> {
            let mut out = Vec::new();
            for ((q, c), k) in self.held.iter_mut() {
                if q == p {
                    if k[1] || k[2] {
                        out.push(*c);
                    }
                    k[1] = false;
                }
            }
            self.settle(out)
        }

        /// Which kinds removeWatches / checkWatches of type `t` name.
        fn named(t: WatcherType, k: [bool; 4]) -> [bool; 4] {
            let [d, c, p, r] = k;
            match t {
                WatcherType::Children if c => [false, true, false, false],
                WatcherType::Children => [false, false, p, false],
                WatcherType::Data if d => [true, false, false, false],
                WatcherType::Data if p => [false, false, true, false],
                WatcherType::Data => [false, false, false, r],
                WatcherType::Any => k,
                WatcherType::Persistent => [false, false, p, false],
                WatcherType::PersistentRecursive => [false, false, false, r],
            }
        }

        fn has(&self, c: ConnId, p: &str, t: WatcherType) -> bool {
            let k = self
                .held
                .get(&(p.to_string(), c))
                .copied()
                .unwrap_or_default();
            Self::named(t, k).iter().any(|b| *b)
        }

        fn remove(&mut self, c: ConnId, p: &str, t: WatcherType) -> bool {
            let Some(k) = self.held.get_mut(&(p.to_string(), c)) else {
                return false;
            };
            let named = Self::named(t, *k);
            for i in 0..4 {
                k[i] &= !named[i];
            }
            self.settle(Vec::new());
            named.iter().any(|b| *b)
        }

        fn remove_conn(&mut self, conn: ConnId) {
            self.held.retain(|(_, c), _| *c != conn);
        }

        fn by_path(&self) -> Vec<(String, Vec<ConnId>)> {
            let mut m: std::collections::BTreeMap<String, Vec<ConnId>> = Default::default();
            for (p, c) in self.held.keys() {
                m.entry(p.clone()).or_default().push(*c);
            }
            m.into_iter().collect()
        }

        fn by_conn(&self) -> Vec<(ConnId, Vec<String>)> {
            let mut m: std::collections::BTreeMap<ConnId, Vec<String>> = Default::default();
            for (p, c) in self.held.keys() {
                m.entry(*c).or_default().push(p.clone());
            }
            m.into_iter()
                .map(|(c, mut v)| {
                    v.sort();
                    (c, v)
                })
                .collect()
        }
    }

    /// wchp and wchc, sorted: (path, its connections), (connection, its paths).
    type Listed = (Vec<(String, Vec<ConnId>)>, Vec<(ConnId, Vec<String>)>);

    fn listed(w: &WatchManager) -> Listed {
        let mut paths: Vec<_> = w.by_path().map(|(p, c)| (p.to_string(), c)).collect();
        paths.sort();
        let mut conns: Vec<_> = w
            .by_conn()
            .map(|(c, ps)| (c, ps.into_iter().map(str::to_string).collect()))
            .collect();
        conns.sort();
        (paths, conns)
    }

    /// Random operations on few paths and connections, compared after each
    /// with the model: which connections each event tells, checkWatches,
    /// removeWatches, and the counts and lists of the four-letter words.
    #[test]
    fn the_manager_agrees_with_a_plain_model_of_the_semantics() {
        use rand_chacha::rand_core::{RngCore, SeedableRng};
        const PATHS: [&str; 6] = ["/", "/a", "/a/b", "/a/b/c", "/ab", "/a/c"];
        const TYPES: [WatcherType; 5] = [
            WatcherType::Children,
            WatcherType::Data,
            WatcherType::Any,
            WatcherType::Persistent,
            WatcherType::PersistentRecursive,
        ];
        for seed in 0..300u64 {
            let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
            let mut pick = |n: usize| (rng.next_u32() as usize) % n;
            let (mut w, mut m) = (WatchManager::default(), Model::default());
            for step in 0..400 {
                let p = PATHS[pick(PATHS.len())];
                let c = 1 + pick(5) as ConnId;
                let at = format!("seed {seed} step {step}");
                match pick(10) {
                    0..=3 => {
                        let k = KINDS[pick(4)];
                        w.add(c, p, k);
                        m.add(c, p, k);
                    }
                    4 | 5 => {
                        let deleted = pick(2) == 0;
                        assert_eq!(
                            w.trigger_node(p, deleted),
                            m.trigger_node(p, deleted),
                            "{at}"
                        );
                    }
                    6 => assert_eq!(w.trigger_children(p), m.trigger_children(p), "{at}"),
                    7 => {
                        let t = TYPES[pick(5)];
                        assert_eq!(w.has(c, p, t), m.has(c, p, t), "{at}: has {t:?}");
                        assert_eq!(w.remove(c, p, t), m.remove(c, p, t), "{at}: remove {t:?}");
                    }
                    8 => {
                        let t = TYPES[pick(5)];
                        assert_eq!(w.has(c, p, t), m.has(c, p, t), "{at}: has {t:?}");
                    }
                    _ => {
                        if pick(4) == 0 {
                            w.remove_conn(c);
                            m.remove_conn(c);
                        }
                    }
                }
                let held: usize = m
                    .held
                    .values()
                    .flat_map(|k| k.iter())
                    .filter(|b| **b)
                    .count();
                assert_eq!(w.watch_count(), held, "{at}");
                assert_eq!(listed(&w), (m.by_path(), m.by_conn()), "{at}");
                assert_eq!(w.path_count(), m.by_path().len(), "{at}");
                assert_eq!(w.conn_count(), m.by_conn().len(), "{at}");
                let recursive = m.held.values().filter(|k| k[3]).count();
                assert_eq!(w.recursive_count, recursive, "{at}");
            }
        }
    }
}

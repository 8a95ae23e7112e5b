//! Watches (doc §10): one-shot data/exist and child watches, persistent and
//! persistent-recursive watches (addWatch), with the 3.9 behaviour where the
//! modes coexist on one connection and path.
//!
//! Storage is per path: one entry per watched path holds the connection ids of
//! each kind, and each connection keeps the set of paths it watches (shared
//! `Arc<str>`, not copies), so that closing a connection drops its watches
//! without a scan. One watch costs about 36 bytes: 4 bytes for the connection
//! id in the path's list (plus vector slack), and about 24 bytes for the
//! path's pointer in the connection's set (16-byte `Arc<str>` plus hash-table
//! overhead), the path text itself being shared by all watchers of that path.

use foldhash::{HashMap, HashSet};
use std::sync::Arc;

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

#[derive(Debug, Default)]
struct Entry {
    data: Vec<ConnId>,
    child: Vec<ConnId>,
    persistent: Vec<ConnId>,
    recursive: Vec<ConnId>,
}

impl Entry {
    fn list(&mut self, kind: WatchKind) -> &mut Vec<ConnId> {
        match kind {
            WatchKind::Data => &mut self.data,
            WatchKind::Child => &mut self.child,
            WatchKind::Persistent => &mut self.persistent,
            WatchKind::Recursive => &mut self.recursive,
        }
    }

    fn has(&self, conn: ConnId) -> bool {
        self.data.contains(&conn)
            || self.child.contains(&conn)
            || self.persistent.contains(&conn)
            || self.recursive.contains(&conn)
    }

    fn is_empty(&self) -> bool {
        self.data.is_empty()
            && self.child.is_empty()
            && self.persistent.is_empty()
            && self.recursive.is_empty()
    }

    fn count(&self) -> usize {
        self.data.len() + self.child.len() + self.persistent.len() + self.recursive.len()
    }
}

/// Every watch of the server.
#[derive(Debug, Default)]
pub struct WatchManager {
    by_path: HashMap<Arc<str>, Entry>,
    by_conn: HashMap<ConnId, HashSet<Arc<str>>>,
    /// Recursive registrations in total: when 0, events skip the ancestor walk.
    recursive_count: usize,
}

fn remove_from(list: &mut Vec<ConnId>, conn: ConnId) -> bool {
    match list.iter().position(|c| *c == conn) {
        Some(i) => {
            list.swap_remove(i);
            true
        }
        None => false,
    }
}

impl WatchManager {
    /// Registers a watch (a no-op if it exists).
    pub fn add(&mut self, conn: ConnId, p: &str, kind: WatchKind) {
        let key = match self.by_path.get_key_value(p) {
            Some((k, _)) => k.clone(),
            None => {
                let k: Arc<str> = Arc::from(p);
                self.by_path.insert(k.clone(), Entry::default());
                k
            }
        };
        let entry = self.by_path.get_mut(p).expect("inserted above");
        let list = entry.list(kind);
        if list.contains(&conn) {
            return;
        }
        list.push(conn);
        if kind == WatchKind::Recursive {
            self.recursive_count += 1;
        }
        self.by_conn.entry(conn).or_default().insert(key);
    }

    fn forget_if_unwatched(&mut self, conn: ConnId, p: &str) {
        let (watched, empty) = match self.by_path.get(p) {
            Some(entry) => (entry.has(conn), entry.is_empty()),
            None => (false, true),
        };
        if !watched {
            if let Some(set) = self.by_conn.get_mut(&conn) {
                set.remove(p);
                if set.is_empty() {
                    self.by_conn.remove(&conn);
                }
            }
        }
        if empty {
            self.by_path.remove(p);
        }
    }

    /// The connections to tell about a NodeCreated, NodeDeleted or
    /// NodeDataChanged of `p`: one-shot data watches on `p` (consumed; for a
    /// deletion also the one-shot child watches on `p`), persistent watches on
    /// `p`, recursive watches on `p` and its ancestors. Each connection once.
    pub fn trigger_node(&mut self, p: &str, deleted: bool) -> Vec<ConnId> {
        let mut out = Vec::new();
        let mut consumed = Vec::new();
        if let Some(entry) = self.by_path.get_mut(p) {
            consumed.append(&mut entry.data);
            if deleted {
                consumed.append(&mut entry.child);
            }
            out.extend_from_slice(&consumed);
            out.extend_from_slice(&entry.persistent);
            out.extend_from_slice(&entry.recursive);
        }
        if self.recursive_count > 0 {
            let mut at = p;
            while let Some(parent) = path::parent(at) {
                if let Some(entry) = self.by_path.get(parent) {
                    out.extend_from_slice(&entry.recursive);
                }
                if parent == "/" {
                    break;
                }
                at = parent;
            }
        }
        for conn in consumed {
            self.forget_if_unwatched(conn, p);
        }
        out.sort_unstable();
        out.dedup();
        out
    }

    /// The connections to tell about a NodeChildrenChanged of `p`: one-shot
    /// child watches (consumed) and persistent watches on `p`. Recursive
    /// watches never get NodeChildrenChanged.
    pub fn trigger_children(&mut self, p: &str) -> Vec<ConnId> {
        let Some(entry) = self.by_path.get_mut(p) else {
            return Vec::new();
        };
        let consumed = std::mem::take(&mut entry.child);
        let mut out = consumed.clone();
        out.extend_from_slice(&entry.persistent);
        for conn in consumed {
            self.forget_if_unwatched(conn, p);
        }
        out.sort_unstable();
        out.dedup();
        out
    }

    /// Drops every watch of a closed connection.
    pub fn remove_conn(&mut self, conn: ConnId) {
        let Some(paths) = self.by_conn.remove(&conn) else {
            return;
        };
        for p in paths {
            if let Some(entry) = self.by_path.get_mut(&*p) {
                remove_from(&mut entry.data, conn);
                remove_from(&mut entry.child, conn);
                remove_from(&mut entry.persistent, conn);
                if remove_from(&mut entry.recursive, conn) {
                    self.recursive_count -= 1;
                }
                if entry.is_empty() {
                    self.by_path.remove(&*p);
                }
            }
        }
    }

    fn kinds(t: WatcherType, entry: &Entry, conn: ConnId) -> Vec<WatchKind> {
        let one_shot_or_persistent = |one: WatchKind, list: &Vec<ConnId>| {
            if list.contains(&conn) {
                vec![one]
            } else if entry.persistent.contains(&conn) {
                vec![WatchKind::Persistent]
            } else {
                Vec::new()
            }
        };
        match t {
            WatcherType::Children => one_shot_or_persistent(WatchKind::Child, &entry.child),
            WatcherType::Data => {
                let mut k = one_shot_or_persistent(WatchKind::Data, &entry.data);
                if k.is_empty() && entry.recursive.contains(&conn) {
                    k.push(WatchKind::Recursive);
                }
                k
            }
            WatcherType::Any => [
                WatchKind::Data,
                WatchKind::Child,
                WatchKind::Persistent,
                WatchKind::Recursive,
            ]
            .into_iter()
            .filter(|k| match k {
                WatchKind::Data => entry.data.contains(&conn),
                WatchKind::Child => entry.child.contains(&conn),
                WatchKind::Persistent => entry.persistent.contains(&conn),
                WatchKind::Recursive => entry.recursive.contains(&conn),
            })
            .collect(),
            WatcherType::Persistent => {
                if entry.persistent.contains(&conn) {
                    vec![WatchKind::Persistent]
                } else {
                    Vec::new()
                }
            }
            WatcherType::PersistentRecursive => {
                if entry.recursive.contains(&conn) {
                    vec![WatchKind::Recursive]
                } else {
                    Vec::new()
                }
            }
        }
    }

    /// checkWatches: whether `conn` has a watch of type `t` at `p`.
    pub fn has(&self, conn: ConnId, p: &str, t: WatcherType) -> bool {
        self.by_path
            .get(p)
            .is_some_and(|e| !Self::kinds(t, e, conn).is_empty())
    }

    /// removeWatches: removes `conn`'s watches of type `t` at `p`; false if
    /// there were none.
    pub fn remove(&mut self, conn: ConnId, p: &str, t: WatcherType) -> bool {
        let Some(entry) = self.by_path.get_mut(p) else {
            return false;
        };
        let kinds = Self::kinds(t, entry, conn);
        for k in &kinds {
            if remove_from(entry.list(*k), conn) && *k == WatchKind::Recursive {
                self.recursive_count -= 1;
            }
        }
        self.forget_if_unwatched(conn, p);
        !kinds.is_empty()
    }

    /// Total registrations.
    pub fn watch_count(&self) -> usize {
        self.by_path.values().map(Entry::count).sum()
    }

    /// Watched paths.
    pub fn path_count(&self) -> usize {
        self.by_path.len()
    }

    /// Connections with at least one watch.
    pub fn conn_count(&self) -> usize {
        self.by_conn.len()
    }

    /// Paths watched by each connection (wchc).
    pub fn by_conn(&self) -> impl Iterator<Item = (ConnId, Vec<&str>)> {
        self.by_conn.iter().map(|(c, paths)| {
            let mut v: Vec<&str> = paths.iter().map(|p| &**p).collect();
            v.sort_unstable();
            (*c, v)
        })
    }

    /// Connections watching each path (wchp).
    pub fn by_path(&self) -> impl Iterator<Item = (&str, Vec<ConnId>)> {
        self.by_path.iter().map(|(p, e)| {
            let mut v: Vec<ConnId> = e
                .data
                .iter()
                .chain(&e.child)
                .chain(&e.persistent)
                .chain(&e.recursive)
                .copied()
                .collect();
            v.sort_unstable();
            v.dedup();
            (&**p, v)
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
}

//! The client's table of watches: which local watcher gets which server notification,
//! and what to re-register with `setWatches2` after a reconnect.
//!
//! Keys are server paths (chroot included). One-shot watches are removed when they fire;
//! persistent and recursive ones stay until the session ends. Dispatch follows the
//! server's rules (docs/client-protocol.md, "What fires what" and "Persistent and
//! recursive watches"): data and exist watches see NodeCreated / NodeDataChanged /
//! NodeDeleted of their node, child watches see NodeChildrenChanged and NodeDeleted,
//! persistent watches see everything on their node, recursive watches see everything but
//! NodeChildrenChanged on their subtree.

use std::collections::HashMap;

use tokio::sync::{mpsc, oneshot};

/// What happened to a watched node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EventKind {
    /// The node was created.
    NodeCreated,
    /// The node was deleted.
    NodeDeleted,
    /// The node's data changed.
    NodeDataChanged,
    /// A child was created or deleted.
    NodeChildrenChanged,
}

/// A watch notification, with the path as the user sees it (chroot stripped).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WatchEvent {
    /// What happened.
    pub kind: EventKind,
    /// To which node.
    pub path: String,
}

/// The kind of one-shot watch a read leaves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OneShotKind {
    /// getData, or exists on an existing node.
    Data,
    /// exists on a missing node.
    Exist,
    /// getChildren.
    Child,
}

/// Persistent watch modes (addWatch).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PersistentMode {
    /// Every event on exactly this node.
    Persistent,
    /// Every event but NodeChildrenChanged on this node and all its descendants.
    Recursive,
}

/// How many undelivered events a persistent watch may hold before it is ended with
/// [`WatchLagged`] (its reader stopped reading).
pub const PERSISTENT_EVENTS_MAX: usize = 4096;

/// A persistent watch's reader fell [`PERSISTENT_EVENTS_MAX`] events behind; the watch
/// ended rather than drop events.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("persistent watch reader fell {PERSISTENT_EVENTS_MAX} events behind")]
pub struct WatchLagged;

type Persistent = mpsc::Sender<Result<WatchEvent, WatchLagged>>;

/// The lists to send in setWatches2, server paths.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Rearm {
    /// Data watches.
    pub data: Vec<String>,
    /// Exist watches.
    pub exist: Vec<String>,
    /// Child watches.
    pub child: Vec<String>,
    /// Persistent watches.
    pub persistent: Vec<String>,
    /// Recursive watches.
    pub recursive: Vec<String>,
}

impl Rearm {
    /// True when there is nothing to re-register.
    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
            && self.exist.is_empty()
            && self.child.is_empty()
            && self.persistent.is_empty()
            && self.recursive.is_empty()
    }
}

/// The watch table. See the module docs.
#[derive(Debug, Default)]
pub struct WatchRegistry {
    data: HashMap<String, Vec<oneshot::Sender<WatchEvent>>>,
    exist: HashMap<String, Vec<oneshot::Sender<WatchEvent>>>,
    child: HashMap<String, Vec<oneshot::Sender<WatchEvent>>>,
    persistent: HashMap<String, Vec<Persistent>>,
    recursive: HashMap<String, Vec<Persistent>>,
}

impl WatchRegistry {
    /// Register a one-shot watch on `server_path`.
    pub fn add_one_shot(
        &mut self,
        kind: OneShotKind,
        server_path: &str,
    ) -> oneshot::Receiver<WatchEvent> {
        let (tx, rx) = oneshot::channel();
        let table = match kind {
            OneShotKind::Data => &mut self.data,
            OneShotKind::Exist => &mut self.exist,
            OneShotKind::Child => &mut self.child,
        };
        let list = table.entry(server_path.to_owned()).or_default();
        // Watchers whose receiver was dropped are forgotten here, so re-watching a
        // node that never changes does not grow the table.
        list.retain(|tx| !tx.is_closed());
        list.push(tx);
        rx
    }

    /// Register a persistent watch on `server_path`.
    pub fn add_persistent(
        &mut self,
        mode: PersistentMode,
        server_path: &str,
    ) -> mpsc::Receiver<Result<WatchEvent, WatchLagged>> {
        let (tx, rx) = mpsc::channel(PERSISTENT_EVENTS_MAX);
        let table = match mode {
            PersistentMode::Persistent => &mut self.persistent,
            PersistentMode::Recursive => &mut self.recursive,
        };
        table.entry(server_path.to_owned()).or_default().push(tx);
        rx
    }

    /// Deliver a notification for `server_path`; `user_path` is what watchers see.
    pub fn dispatch(&mut self, kind: EventKind, server_path: &str, user_path: &str) {
        let event = WatchEvent {
            kind,
            path: user_path.to_owned(),
        };
        let fire = |table: &mut HashMap<String, Vec<oneshot::Sender<WatchEvent>>>| {
            for tx in table.remove(server_path).unwrap_or_default() {
                let _ = tx.send(event.clone());
            }
        };
        match kind {
            EventKind::NodeCreated | EventKind::NodeDataChanged => {
                fire(&mut self.data);
                fire(&mut self.exist);
            }
            EventKind::NodeDeleted => {
                fire(&mut self.data);
                fire(&mut self.exist);
                fire(&mut self.child);
            }
            EventKind::NodeChildrenChanged => fire(&mut self.child),
        }
        if let Some(list) = self.persistent.get_mut(server_path) {
            deliver(list, &event);
        }
        if kind != EventKind::NodeChildrenChanged {
            let mut at = server_path;
            loop {
                if let Some(list) = self.recursive.get_mut(at) {
                    deliver(list, &event);
                }
                if at == "/" {
                    break;
                }
                at = match at.rfind('/') {
                    Some(0) => "/",
                    Some(i) => &at[..i],
                    None => break,
                };
            }
        }
        self.persistent.retain(|_, l| !l.is_empty());
        self.recursive.retain(|_, l| !l.is_empty());
    }

    /// What to re-register after a reconnect on the same session (closed watchers are
    /// forgotten first). Sorted, for stable frames.
    pub fn rearm(&mut self) -> Rearm {
        fn live_once(t: &mut HashMap<String, Vec<oneshot::Sender<WatchEvent>>>) -> Vec<String> {
            t.retain(|_, l| {
                l.retain(|tx| !tx.is_closed());
                !l.is_empty()
            });
            let mut v: Vec<String> = t.keys().cloned().collect();
            v.sort();
            v
        }
        fn live_persistent(t: &mut HashMap<String, Vec<Persistent>>) -> Vec<String> {
            t.retain(|_, l| {
                l.retain(|tx| !tx.is_closed());
                !l.is_empty()
            });
            let mut v: Vec<String> = t.keys().cloned().collect();
            v.sort();
            v
        }
        Rearm {
            data: live_once(&mut self.data),
            exist: live_once(&mut self.exist),
            child: live_once(&mut self.child),
            persistent: live_persistent(&mut self.persistent),
            recursive: live_persistent(&mut self.recursive),
        }
    }

    /// The session ended: every watch is gone with it (the receivers see the channel
    /// close).
    pub fn clear(&mut self) {
        self.data.clear();
        self.exist.clear();
        self.child.clear();
        self.persistent.clear();
        self.recursive.clear();
    }

    /// Forget local watchers of `server_path` (after removeWatches).
    pub fn remove(&mut self, server_path: &str, data: bool, child: bool) {
        if data {
            self.data.remove(server_path);
            self.exist.remove(server_path);
        }
        if child {
            self.child.remove(server_path);
        }
        if data && child {
            self.persistent.remove(server_path);
            self.recursive.remove(server_path);
        }
    }
}

fn deliver(list: &mut Vec<Persistent>, event: &WatchEvent) {
    list.retain(|tx| {
        if tx.is_closed() {
            return false;
        }
        // Keep the last slot for the lag marker, so the reader learns where events
        // stopped instead of missing them silently.
        if tx.capacity() <= 1 {
            let _ = tx.try_send(Err(WatchLagged));
            return false;
        }
        tx.try_send(Ok(event.clone())).is_ok()
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_shot_watches_fire_once_by_kind() {
        let mut w = WatchRegistry::default();
        let mut data = w.add_one_shot(OneShotKind::Data, "/a");
        let mut child = w.add_one_shot(OneShotKind::Child, "/a");
        w.dispatch(EventKind::NodeDataChanged, "/a", "/a");
        assert_eq!(
            data.try_recv().map(|e| e.kind),
            Ok(EventKind::NodeDataChanged)
        );
        assert!(
            child.try_recv().is_err(),
            "child watch must not see a data change"
        );
        w.dispatch(EventKind::NodeChildrenChanged, "/a", "/a");
        assert_eq!(
            child.try_recv().map(|e| e.kind),
            Ok(EventKind::NodeChildrenChanged)
        );
        assert!(w.rearm().is_empty());
    }

    #[test]
    fn delete_fires_data_exist_and_child_watches() {
        let mut w = WatchRegistry::default();
        let mut d = w.add_one_shot(OneShotKind::Data, "/a");
        let mut c = w.add_one_shot(OneShotKind::Child, "/a");
        w.dispatch(EventKind::NodeDeleted, "/a", "/a");
        assert!(d.try_recv().is_ok() && c.try_recv().is_ok());
    }

    #[test]
    fn persistent_and_recursive_follow_server_rules() {
        let mut w = WatchRegistry::default();
        let mut p = w.add_persistent(PersistentMode::Persistent, "/pr");
        let mut r = w.add_persistent(PersistentMode::Recursive, "/pr");
        w.dispatch(EventKind::NodeCreated, "/pr/c", "/pr/c");
        w.dispatch(EventKind::NodeChildrenChanged, "/pr", "/pr");
        w.dispatch(EventKind::NodeDataChanged, "/pr/c/d", "/pr/c/d");
        w.dispatch(EventKind::NodeDeleted, "/pr", "/pr");
        let got_p: Vec<_> = std::iter::from_fn(|| p.try_recv().ok())
            .map(|e| e.expect("not lagged").kind)
            .collect();
        let got_r: Vec<_> = std::iter::from_fn(|| r.try_recv().ok())
            .map(|e| e.expect("not lagged").path)
            .collect();
        assert_eq!(
            got_p,
            vec![EventKind::NodeChildrenChanged, EventKind::NodeDeleted]
        );
        assert_eq!(got_r, vec!["/pr/c", "/pr/c/d", "/pr"]);
        let rearm = w.rearm();
        assert_eq!(rearm.persistent, vec!["/pr"]);
        assert_eq!(rearm.recursive, vec!["/pr"]);
    }

    #[test]
    fn recursive_on_root_sees_everything() {
        let mut w = WatchRegistry::default();
        let mut r = w.add_persistent(PersistentMode::Recursive, "/");
        w.dispatch(EventKind::NodeCreated, "/x/y", "/x/y");
        assert!(r.try_recv().is_ok());
    }

    #[test]
    fn rearm_lists_live_watches_only() {
        let mut w = WatchRegistry::default();
        let _keep = w.add_one_shot(OneShotKind::Data, "/d");
        drop(w.add_one_shot(OneShotKind::Child, "/gone"));
        let _e = w.add_one_shot(OneShotKind::Exist, "/e");
        let r = w.rearm();
        assert_eq!(r.data, vec!["/d"]);
        assert_eq!(r.exist, vec!["/e"]);
        assert!(r.child.is_empty());
    }

    #[test]
    fn a_reader_that_stops_gets_a_lag_marker_not_silence() {
        let mut w = WatchRegistry::default();
        let mut p = w.add_persistent(PersistentMode::Persistent, "/p");
        for _ in 0..PERSISTENT_EVENTS_MAX + 10 {
            w.dispatch(EventKind::NodeDataChanged, "/p", "/p");
        }
        let mut n = 0;
        let mut last = None;
        while let Ok(e) = p.try_recv() {
            n += 1;
            last = Some(e);
        }
        assert_eq!(n, PERSISTENT_EVENTS_MAX);
        assert_eq!(last, Some(Err(WatchLagged)));
        assert!(w.rearm().persistent.is_empty());
    }

    #[test]
    fn re_watching_an_unchanged_node_does_not_grow_the_table() {
        let mut w = WatchRegistry::default();
        for _ in 0..1000 {
            drop(w.add_one_shot(OneShotKind::Data, "/quiet"));
        }
        let _live = w.add_one_shot(OneShotKind::Data, "/quiet");
        assert_eq!(w.data.get("/quiet").map(Vec::len), Some(1));
    }

    #[test]
    fn clear_closes_every_watcher() {
        let mut w = WatchRegistry::default();
        let mut d = w.add_one_shot(OneShotKind::Data, "/a");
        let mut p = w.add_persistent(PersistentMode::Persistent, "/a");
        w.clear();
        assert!(matches!(
            d.try_recv(),
            Err(oneshot::error::TryRecvError::Closed)
        ));
        assert!(matches!(
            p.try_recv(),
            Err(mpsc::error::TryRecvError::Disconnected)
        ));
    }
}

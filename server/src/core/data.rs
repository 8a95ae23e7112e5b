//! The apply stage: the data tree, the watches set on it, and the zxid it is
//! at. Committed txns change it in zxid order ([`Data::apply`]); a snapshot
//! replaces it whole ([`Data::reset`]). Two checks guard it, one on each side
//! of the step: a txn must follow the last one applied (the next counter of
//! the epoch, or the first of a later one), and the tree must accept every op
//! prep decided. Either failing means this member's state and the committed
//! history disagree, and the member stops serving ([`CoreError::Diverged`]).

use rzk_wire::{EventType, Perms};
use rzk_zxid::Zxid;

use crate::acl;
use crate::apply::{self, Applied, Event};
use crate::core::conns::Conns;
use crate::core::io::CoreError;
use crate::tree::DataTree;
use crate::txn::Txn;
use crate::watch::WatchManager;

/// The apply stage's state.
pub(crate) struct Data {
    pub(crate) tree: DataTree,
    pub(crate) watches: WatchManager,
    /// The last applied zxid.
    applied: Zxid,
}

impl Data {
    /// An empty tree at zxid 0.
    pub(crate) fn new() -> Data {
        Data {
            tree: DataTree::new(),
            watches: WatchManager::default(),
            applied: Zxid::ZERO,
        }
    }

    /// The last applied zxid.
    pub(crate) fn applied(&self) -> Zxid {
        self.applied
    }

    /// I2: a loaded snapshot replaces the tree; its watches went with the
    /// connections (a member loads a snapshot only while it does not serve).
    pub(crate) fn reset(&mut self, tree: DataTree, at: Zxid) {
        self.tree = tree;
        self.watches = WatchManager::default();
        self.applied = at;
    }

    /// Applies the committed txn at `zxid`; the watch events it causes are
    /// appended to `events`. `in_order` is false only under a bug switch of
    /// the simulation (`CoreBugs::apply_out_of_order`).
    pub(crate) fn apply(
        &mut self,
        zxid: Zxid,
        txn: &Txn,
        events: &mut Vec<Event>,
        in_order: bool,
    ) -> Result<Applied, CoreError> {
        if in_order && !zxid.is_next(self.applied) {
            return Err(CoreError::Diverged(format!(
                "txn {zxid} does not follow the last applied {}",
                self.applied
            )));
        }
        let applied = apply::apply(&mut self.tree, zxid, txn, events)
            .map_err(|e| CoreError::Diverged(e.to_string()))?;
        self.applied = zxid;
        Ok(applied)
    }
}

/// Fires the watches `events` trigger: a notification to every watching
/// connection that may READ the node (ZooKeeper 3.8.4+/3.9.2+,
/// CVE-2024-23944), before anything else is written to it.
pub(crate) fn fire(watches: &mut WatchManager, conns: &mut Conns, events: &[Event]) {
    for ev in events {
        let watchers = match ev.kind {
            EventType::NodeChildrenChanged => watches.trigger_children(&ev.path),
            EventType::NodeDeleted => watches.trigger_node(&ev.path, true),
            EventType::NodeCreated | EventType::NodeDataChanged => {
                watches.trigger_node(&ev.path, false)
            }
            // Apply never produces these; they are client-side events.
            EventType::None
            | EventType::DataWatchRemoved
            | EventType::ChildWatchRemoved
            | EventType::PersistentWatchRemoved => continue,
        };
        for id in watchers {
            let may_read = conns
                .get(id)
                .is_some_and(|c| acl::allowed(&ev.acl, &c.auth, Perms::READ));
            if may_read {
                conns.notify(id, ev.kind, &ev.path);
            }
        }
    }
}

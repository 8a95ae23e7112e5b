//! The committed history as clients may observe it, and the checks of what
//! they did observe.
//!
//! Every txn any member delivers is recorded once, by zxid; a shadow tree
//! applies them in zxid order with the server's own apply, and keeps, for
//! every path, the node's state after each txn that touched it. A reply at
//! zxid `R` must then show the state of the committed history at `R`: a read
//! is answered from a tree that applied exactly the txns up to `R`, and a
//! write's reply carries its own txn's zxid.

use std::collections::BTreeMap;

use bytes::Bytes;
use rzk_server::apply::{self, Event};
use rzk_server::tree::DataTree;
use rzk_server::txn::{Txn, TxnBody, TxnOp};
use rzk_wire::{EventType, Stat};
use rzk_zxid::Zxid;

use crate::checker::{violation, Violation};

/// A node's state after a txn: its data, Stat and children's names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct NodeState {
    pub(crate) data: Option<Bytes>,
    pub(crate) stat: Stat,
    pub(crate) children: Vec<String>,
}

/// What one txn changed, for the watch checks: the events it fires.
pub(crate) type Triggers = Vec<(EventType, String)>;

/// The committed history and its shadow tree.
pub(crate) struct History {
    /// Committed txns not yet applied to the shadow (they wait for the ones
    /// before them), by zxid.
    waiting: BTreeMap<Zxid, Bytes>,
    /// Every committed txn's payload, to check that all members agree.
    payloads: BTreeMap<Zxid, Bytes>,
    /// The decoded txns the shadow applied.
    pub(crate) txns: BTreeMap<Zxid, Txn>,
    shadow: DataTree,
    /// The last zxid the shadow applied.
    shadow_at: Zxid,
    /// Each path's states: `(zxid, state after it)`, in zxid order; `None`
    /// where the txn deleted it.
    paths: BTreeMap<String, Vec<(Zxid, Option<NodeState>)>>,
    /// The watch events each txn fires.
    pub(crate) triggers: BTreeMap<Zxid, Triggers>,
    /// The highest zxid a write was acknowledged at, to any client.
    pub(crate) acked_max: Zxid,
    /// Write acknowledgements received.
    pub(crate) acks: u64,
    /// Sessions the leader expired (closes of its own, origin 0).
    pub(crate) expirations: u64,
}

impl History {
    pub(crate) fn new() -> History {
        History {
            waiting: BTreeMap::new(),
            payloads: BTreeMap::new(),
            txns: BTreeMap::new(),
            shadow: DataTree::new(),
            shadow_at: Zxid::ZERO,
            paths: BTreeMap::new(),
            triggers: BTreeMap::new(),
            acked_max: Zxid::ZERO,
            acks: 0,
            expirations: 0,
        }
    }

    /// The last zxid of the history the shadow holds.
    pub(crate) fn last(&self) -> Zxid {
        self.shadow_at
    }

    /// The shadow tree (the state every converged member must hold).
    pub(crate) fn shadow(&self) -> &DataTree {
        &self.shadow
    }

    /// A member delivered the committed txn at `zxid`.
    pub(crate) fn on_commit(&mut self, zxid: Zxid, payload: &Bytes) -> Result<(), Violation> {
        if let Some(known) = self.payloads.get(&zxid) {
            if known != payload {
                return Err(violation(
                    "ServerAgreement",
                    format!("two members delivered different txns at {zxid}"),
                ));
            }
            return Ok(());
        }
        self.payloads.insert(zxid, payload.clone());
        self.waiting.insert(zxid, payload.clone());
        self.advance()
    }

    /// Applies to the shadow every waiting txn that follows it.
    fn advance(&mut self) -> Result<(), Violation> {
        while let Some((&zxid, _)) = self.waiting.iter().next() {
            if !zxid.is_next(self.shadow_at) {
                return Ok(());
            }
            let payload = self.waiting.remove(&zxid).expect("present");
            let txn = Txn::decode(&payload)
                .map_err(|e| violation("ServerTxn", format!("txn {zxid} does not decode: {e}")))?;
            let mut events: Vec<Event> = Vec::new();
            apply::apply(&mut self.shadow, zxid, &txn, &mut events).map_err(|e| {
                violation(
                    "ServerTxnApplies",
                    format!("the committed history does not apply: {e}"),
                )
            })?;
            let mut touched: Vec<String> = ops_paths(&txn.body);
            for ev in &events {
                touched.push(ev.path.clone());
            }
            touched.sort();
            touched.dedup();
            for p in touched {
                let state = self.state_now(&p);
                self.paths.entry(p).or_default().push((zxid, state));
            }
            self.triggers
                .insert(zxid, events.into_iter().map(|e| (e.kind, e.path)).collect());
            if txn.header.origin == 0 && txn.body == TxnBody::CloseSession {
                self.expirations += 1;
            }
            self.txns.insert(zxid, txn);
            self.shadow_at = zxid;
        }
        Ok(())
    }

    fn state_now(&self, p: &str) -> Option<NodeState> {
        let n = self.shadow.get(p)?;
        let mut children: Vec<String> = self
            .shadow
            .child_names(n)
            .into_iter()
            .map(|c| c.to_string())
            .collect();
        children.sort();
        Some(NodeState {
            data: n.data(),
            stat: n.stat(),
            children,
        })
    }

    /// The state of `p` in the committed history at `zxid` (after the txn
    /// at `zxid`, if any). `Err` if the shadow has not reached `zxid`.
    pub(crate) fn state_at(&self, p: &str, zxid: Zxid) -> Result<Option<&NodeState>, Violation> {
        if zxid > self.shadow_at {
            return Err(violation(
                "ServerReplyAhead",
                format!(
                    "a reply at {zxid} is ahead of every committed txn (last {})",
                    self.shadow_at
                ),
            ));
        }
        let Some(states) = self.paths.get(p) else {
            return Ok(None);
        };
        let i = states.partition_point(|(z, _)| *z <= zxid);
        Ok(if i == 0 {
            None
        } else {
            states[i - 1].1.as_ref()
        })
    }

    /// Whether a txn in `(after, through]` fires a watch of `kind` on `p`.
    pub(crate) fn fired_between(
        &self,
        p: &str,
        kind: WatchKind,
        after: Zxid,
        through: Zxid,
    ) -> Option<Zxid> {
        use std::ops::Bound::{Excluded, Included};
        for (z, evs) in self.triggers.range((Excluded(after), Included(through))) {
            if evs.iter().any(|(t, q)| q == p && kind.fired_by(*t)) {
                return Some(*z);
            }
        }
        None
    }
}

/// A watch a client set, by what fires it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum WatchKind {
    /// getData, or exists on a node that exists: changed or deleted.
    Data,
    /// exists on a node that does not: created.
    Exist,
    /// getChildren: a child created or deleted, or the node deleted.
    Child,
}

impl WatchKind {
    /// Whether an event of type `t` on the watched path fires it.
    pub(crate) fn fired_by(self, t: EventType) -> bool {
        match self {
            WatchKind::Data => matches!(t, EventType::NodeDataChanged | EventType::NodeDeleted),
            WatchKind::Exist => matches!(
                t,
                EventType::NodeCreated | EventType::NodeDataChanged | EventType::NodeDeleted
            ),
            WatchKind::Child => {
                matches!(t, EventType::NodeChildrenChanged | EventType::NodeDeleted)
            }
        }
    }
}

/// The paths a txn's ops name.
fn ops_paths(body: &TxnBody) -> Vec<String> {
    let op_path = |op: &TxnOp| match op {
        TxnOp::Create { path, .. }
        | TxnOp::Delete { path }
        | TxnOp::SetData { path, .. }
        | TxnOp::SetAcl { path, .. }
        | TxnOp::Check { path } => path.clone(),
    };
    match body {
        TxnBody::Op(op) => vec![op_path(op)],
        TxnBody::Multi(ops) => ops.iter().map(op_path).collect(),
        TxnBody::CreateSession { .. }
        | TxnBody::CloseSession
        | TxnBody::Error(_)
        | TxnBody::MultiError { .. } => Vec::new(),
    }
}

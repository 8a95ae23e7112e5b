//! Apply: a committed txn changes the tree, in zxid order, on every server.
//! Recovery (replay of snapshot + log) and normal operation both come here.
//!
//! Prep checked every op against the tree plus every txn before it, so the
//! tree must accept each one. If it does not, the tree and the committed
//! history disagree; [`apply`] says so ([`NotApplied`]) and the caller must
//! stop serving that tree (it never goes on with a tree that differs from
//! its peers').

use rzk_wire::{ErrorCode, EventType, Stat};
use rzk_zxid::Zxid;

use crate::acl::AclRef;
use crate::path;
use crate::tree::DataTree;
use crate::txn::{Txn, TxnBody, TxnOp};

/// A watch event a change causes, with the ACL that decides who may see it
/// (READ on the node; on the parent for NodeChildrenChanged).
#[derive(Clone, Debug)]
pub struct Event {
    /// The event type.
    pub kind: EventType,
    /// The path it names.
    pub path: String,
    /// The ACL of the node it is about.
    pub acl: AclRef,
}

/// The outcome of one op.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OpOutcome {
    /// A node was created.
    Created {
        /// Its final path.
        path: String,
        /// Its Stat right after.
        stat: Stat,
    },
    /// A node was deleted.
    Deleted,
    /// Data was set; the Stat after.
    SetData(Stat),
    /// The ACL was set; the Stat after.
    SetAcl(Stat),
    /// A check passed.
    Check,
}

/// What applying a txn did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Applied {
    /// A session was created.
    SessionCreated {
        /// Timeout.
        timeout_ms: i32,
        /// Password.
        password: [u8; 16],
    },
    /// A session was closed; its ephemerals were deleted.
    SessionClosed,
    /// A single op.
    Op(OpOutcome),
    /// A multi's ops, in order.
    Multi(Vec<OpOutcome>),
    /// An error txn: nothing changed.
    Error(ErrorCode),
    /// A failed multi: nothing changed.
    MultiError {
        /// Ops in the multi.
        op_count: u32,
        /// The failing op.
        failed_index: u32,
        /// Its error.
        code: ErrorCode,
    },
}

/// A committed op the tree refused: the tree has diverged from the history.
/// The tree may hold the ops of the txn before it (a multi's), so it must not
/// be served any more.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("txn {zxid} does not apply to the tree: {op} answered {code:?}")]
pub struct NotApplied {
    /// The txn.
    pub zxid: Zxid,
    /// The op that failed, as text.
    pub op: String,
    /// What the tree answered.
    pub code: ErrorCode,
}

/// Applies `txn` at `zxid`, appending the watch events it causes to `events`
/// in ZooKeeper's order (per op: the node's event, then the parent's
/// NodeChildrenChanged).
pub fn apply(
    tree: &mut DataTree,
    zxid: Zxid,
    txn: &Txn,
    events: &mut Vec<Event>,
) -> Result<Applied, NotApplied> {
    let z = zxid.as_u64();
    let time = txn.header.time_ms;
    Ok(match &txn.body {
        TxnBody::CreateSession {
            timeout_ms,
            password,
        } => Applied::SessionCreated {
            timeout_ms: *timeout_ms,
            password: *password,
        },
        TxnBody::CloseSession => {
            let paths: Vec<String> = tree
                .ephemerals_of(txn.header.session)
                .map(|s| s.iter().cloned().collect())
                .unwrap_or_default();
            for p in paths {
                apply_op(tree, z, time, &TxnOp::Delete { path: p }, events)?;
            }
            Applied::SessionClosed
        }
        TxnBody::Op(op) => Applied::Op(apply_op(tree, z, time, op, events)?),
        TxnBody::Multi(ops) => Applied::Multi(
            ops.iter()
                .map(|op| apply_op(tree, z, time, op, events))
                .collect::<Result<_, _>>()?,
        ),
        TxnBody::Error(code) => Applied::Error(*code),
        TxnBody::MultiError {
            op_count,
            failed_index,
            code,
        } => Applied::MultiError {
            op_count: *op_count,
            failed_index: *failed_index,
            code: *code,
        },
    })
}

fn not_applied(zxid: u64, op: &TxnOp, code: ErrorCode) -> NotApplied {
    NotApplied {
        zxid: Zxid::from_u64(zxid),
        op: format!("{op:?}"),
        code,
    }
}

fn apply_op(
    tree: &mut DataTree,
    z: u64,
    time: i64,
    op: &TxnOp,
    events: &mut Vec<Event>,
) -> Result<OpOutcome, NotApplied> {
    Ok(match op {
        TxnOp::Create {
            path: p,
            data,
            acl,
            owner,
        } => match tree.create(p, data.clone(), acl, *owner, z, time) {
            Ok(_) => {
                let node = tree.get(p).expect("just created");
                let stat = node.stat();
                events.push(Event {
                    kind: EventType::NodeCreated,
                    path: p.clone(),
                    acl: node.acl.clone(),
                });
                push_children_changed(tree, p, events);
                OpOutcome::Created {
                    path: p.clone(),
                    stat,
                }
            }
            Err(code) => return Err(not_applied(z, op, code)),
        },
        TxnOp::Delete { path: p } => {
            match tree.delete(p, z) {
                Ok(node) => {
                    events.push(Event {
                        kind: EventType::NodeDeleted,
                        path: p.clone(),
                        acl: node.acl,
                    });
                    push_children_changed(tree, p, events);
                }
                Err(code) => return Err(not_applied(z, op, code)),
            }
            OpOutcome::Deleted
        }
        TxnOp::SetData { path: p, data } => match tree.set_data(p, data.clone(), z, time) {
            Ok(stat) => {
                let acl = tree.get(p).expect("just set").acl.clone();
                events.push(Event {
                    kind: EventType::NodeDataChanged,
                    path: p.clone(),
                    acl,
                });
                OpOutcome::SetData(stat)
            }
            Err(code) => return Err(not_applied(z, op, code)),
        },
        TxnOp::SetAcl { path: p, acl } => match tree.set_acl(p, acl) {
            Ok(stat) => OpOutcome::SetAcl(stat),
            Err(code) => return Err(not_applied(z, op, code)),
        },
        TxnOp::Check { .. } => OpOutcome::Check,
    })
}

fn push_children_changed(tree: &DataTree, p: &str, events: &mut Vec<Event>) {
    if let Some(parent) = path::parent(p) {
        if let Some(pn) = tree.get(parent) {
            events.push(Event {
                kind: EventType::NodeChildrenChanged,
                path: parent.to_owned(),
                acl: pn.acl.clone(),
            });
        }
    }
}

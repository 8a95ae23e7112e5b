//! Property tests of the pipeline's core promise: prepping against
//! outstanding changes gives the same txns as prepping against an up-to-date
//! tree, and snapshot + log replay rebuilds exactly the tree that was served.

use bytes::Bytes;
use proptest::prelude::*;
use rzk_wire::{
    Acl, CheckVersionRequest, CreateRequest, DeleteRequest, ErrorCode, Id, MultiOp, OpCode, Perms,
    SetAclRequest, SetDataRequest,
};
use rzk_zxid::Zxid;

use crate::acl::AuthInfo;
use crate::apply::apply;
use crate::prep::{Caller, Prep, Write};
use crate::tree::DataTree;
use crate::txn::{Txn, TxnBody, TxnHeader};

const PATHS: [&str; 7] = ["/a", "/b", "/a/x", "/a/y", "/b/z", "/a/x/q", "/a/"];
const SESSIONS: [i64; 2] = [0x0100_0000_0000_0001, 0x0100_0000_0000_0002];

/// One random request: (kind, path index, flag/version selector, byte).
type Spec = (u8, u8, u8, u8);

#[derive(Debug, Clone)]
enum Op {
    Create(CreateRequest),
    Delete(DeleteRequest),
    SetData(SetDataRequest),
    SetAcl(SetAclRequest),
    Multi(Vec<MultiOp>),
    Close(i64),
}

fn acl_of(b: u8) -> Vec<Acl> {
    if b % 5 == 0 {
        vec![Acl {
            perms: Perms(Perms::ALL.0 & !Perms::DELETE.0),
            id: Id::anyone(),
        }]
    } else {
        Acl::open_unsafe()
    }
}

fn op_of(spec: Spec) -> Op {
    let (kind, p, sel, b) = spec;
    let path = PATHS[p as usize % PATHS.len()].to_owned();
    let version = match sel % 3 {
        0 => -1,
        1 => 0,
        _ => i32::from(sel % 4),
    };
    let create = || CreateRequest {
        path: path.clone().into(),
        data: if b % 3 == 0 {
            None
        } else {
            Some(Bytes::from(vec![b; (b % 7) as usize]))
        },
        acl: acl_of(b),
        flags: i32::from(sel % 5),
    };
    match kind % 7 {
        0 | 1 => Op::Create(create()),
        2 => Op::Delete(DeleteRequest {
            path: path.clone().into(),
            version,
        }),
        3 => Op::SetData(SetDataRequest {
            path: path.clone().into(),
            data: Some(Bytes::from(vec![b])),
            version,
        }),
        4 => Op::SetAcl(SetAclRequest {
            path: path.clone().into(),
            acl: acl_of(b.wrapping_add(1)),
            version,
        }),
        5 => {
            let other = PATHS[(p as usize + 1) % PATHS.len()];
            Op::Multi(vec![
                MultiOp::Create(create()),
                MultiOp::SetData(SetDataRequest {
                    path: other.into(),
                    data: None,
                    version: -1,
                }),
                MultiOp::Check(CheckVersionRequest {
                    path: path.clone().into(),
                    version,
                }),
            ])
        }
        _ => Op::Close(SESSIONS[b as usize % 2]),
    }
}

fn prep_one(
    prep: &mut Prep,
    tree: &DataTree,
    seq: u64,
    session: i64,
    op: &Op,
) -> (TxnBody, Vec<String>) {
    let auth = AuthInfo::for_peer("127.0.0.1".parse().unwrap());
    let caller = Caller {
        session,
        auth: &auth,
        session_valid: true,
    };
    let p = match op {
        Op::Create(r) => prep.prep(tree, seq, caller, Write::Create(OpCode::Create, r)),
        Op::Delete(r) => prep.prep(tree, seq, caller, Write::Delete(r)),
        Op::SetData(r) => prep.prep(tree, seq, caller, Write::SetData(r)),
        Op::SetAcl(r) => prep.prep(tree, seq, caller, Write::SetAcl(r)),
        Op::Multi(ops) => prep.prep_multi(tree, seq, caller, ops),
        Op::Close(s) => prep.prep_close_session(tree, seq, *s),
    };
    (p.body, p.touched)
}

fn txn(session: i64, i: usize, body: TxnBody) -> Txn {
    Txn {
        header: TxnHeader {
            origin: 1,
            request: i as u64,
            session,
            cxid: i as i32,
            time_ms: 1_000 + i as i64,
        },
        body,
    }
}

fn session_of(op: &Op, i: usize) -> i64 {
    match op {
        Op::Close(s) => *s,
        _ => SESSIONS[i % 2],
    }
}

/// The log, the tree and the snapshot of a run.
type Run = (Vec<(Zxid, Bytes)>, DataTree, Option<(Zxid, Bytes)>);

/// Runs `ops` preparing `batch` at a time before applying them (so later
/// ones are prepped against outstanding changes); snapshots at `snap_at`
/// with a few nodes written per txn. Returns the log, the tree and the
/// snapshot.
fn run_batched(ops: &[Op], batch: usize, snap_at: usize) -> Run {
    let mut tree = DataTree::new();
    let mut prep = Prep::new(true);
    let mut log = Vec::new();
    let mut pending: Vec<(u64, Txn, Vec<String>)> = Vec::new();
    let mut zxid = 0u64;
    let mut snapshot = None;
    let mut i = 0;
    while i < ops.len() {
        for (j, op) in ops.iter().enumerate().skip(i).take(batch) {
            let session = session_of(op, j);
            let (body, touched) = prep_one(&mut prep, &tree, j as u64 + 1, session, op);
            pending.push((j as u64 + 1, txn(session, j, body), touched));
        }
        i += batch;
        for (seq, t, touched) in pending.drain(..) {
            zxid += 1;
            let z = Zxid::from_u64(zxid);
            let bytes = t.encode();
            let decoded = Txn::decode(&bytes).unwrap();
            apply(&mut tree, z, &decoded, &mut Vec::new()).unwrap();
            prep.applied(seq, &touched);
            log.push((z, bytes));
            if zxid as usize == snap_at {
                assert!(tree.begin_snapshot(z, &[]));
            }
            if tree.snapshot_in_progress() {
                if let Some(done) = tree.snapshot_step(2) {
                    snapshot = Some(done);
                }
            }
        }
    }
    if tree.snapshot_in_progress() {
        snapshot = tree.snapshot_step(usize::MAX);
    }
    assert_eq!(
        prep.outstanding_len(),
        0,
        "every outstanding change is cleared once applied"
    );
    (log, tree, snapshot)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, rng_seed: proptest::test_runner::RngSeed::Fixed(0x5eed), ..ProptestConfig::default() })]

    /// Prep against tree + outstanding changes decides exactly what prep
    /// against the applied tree decides, txn by txn.
    #[test]
    fn prep_against_outstanding_changes_equals_prep_against_the_tree(
        specs in prop::collection::vec((any::<u8>(), any::<u8>(), any::<u8>(), any::<u8>()), 1..60),
        batch in 2usize..8,
    ) {
        let ops: Vec<Op> = specs.into_iter().map(op_of).collect();
        let (one_by_one, tree_a, _) = run_batched(&ops, 1, usize::MAX);
        let (batched, tree_b, _) = run_batched(&ops, batch, usize::MAX);
        let a: Vec<Txn> = one_by_one.iter().map(|(_, b)| Txn::decode(b).unwrap()).collect();
        let b: Vec<Txn> = batched.iter().map(|(_, b)| Txn::decode(b).unwrap()).collect();
        prop_assert_eq!(a, b);
        prop_assert_eq!(tree_a.dump(), tree_b.dump());
    }

    /// Snapshot (taken while txns keep applying) + the log after it replays
    /// to the same tree; and so does the whole log from an empty tree.
    #[test]
    fn snapshot_plus_log_replays_to_the_same_tree(
        specs in prop::collection::vec((any::<u8>(), any::<u8>(), any::<u8>(), any::<u8>()), 1..80),
        batch in 1usize..5,
        snap_frac in 0usize..100,
    ) {
        let ops: Vec<Op> = specs.into_iter().map(op_of).collect();
        let snap_at = (ops.len() * snap_frac / 100).max(1);
        let (log, tree, snapshot) = run_batched(&ops, batch, snap_at);
        let (snap_zxid, bytes) = snapshot.expect("the snapshot finishes");
        let (mut replayed, _, at) = DataTree::load_snapshot(&bytes).unwrap();
        prop_assert_eq!(at, snap_zxid);
        for (z, t) in log.iter().filter(|(z, _)| *z > snap_zxid) {
            apply(&mut replayed, *z, &Txn::decode(t).unwrap(), &mut Vec::new()).unwrap();
        }
        prop_assert_eq!(replayed.dump(), tree.dump());
        prop_assert_eq!(replayed.all_ephemerals(), tree.all_ephemerals());
        let mut from_scratch = DataTree::new();
        for (z, t) in &log {
            apply(&mut from_scratch, *z, &Txn::decode(t).unwrap(), &mut Vec::new()).unwrap();
        }
        prop_assert_eq!(from_scratch.dump(), tree.dump());
    }
}

#[test]
fn prep_sees_outstanding_creates_deletes_and_versions() {
    let tree = DataTree::new();
    let mut prep = Prep::new(false);
    let auth = AuthInfo::for_peer("127.0.0.1".parse().unwrap());
    let caller = Caller {
        session: 7,
        auth: &auth,
        session_valid: true,
    };
    let mk = |p: &str, flags| CreateRequest {
        path: p.into(),
        data: None,
        acl: Acl::open_unsafe(),
        flags,
    };
    let c1 = prep.prep(
        &tree,
        1,
        caller,
        Write::Create(OpCode::Create, &mk("/p", 0)),
    );
    assert!(matches!(c1.body, TxnBody::Op(_)));
    // Not applied yet: a second create of /p already fails, a child can be made.
    let c2 = prep.prep(
        &tree,
        2,
        caller,
        Write::Create(OpCode::Create, &mk("/p", 0)),
    );
    assert_eq!(c2.body, TxnBody::Error(ErrorCode::NodeExists));
    let s1 = prep.prep(
        &tree,
        3,
        caller,
        Write::Create(OpCode::Create, &mk("/p/s-", 2)),
    );
    let s2 = prep.prep(
        &tree,
        4,
        caller,
        Write::Create(OpCode::Create, &mk("/p/s-", 2)),
    );
    let name = |b: &TxnBody| match b {
        TxnBody::Op(crate::txn::TxnOp::Create { path, .. }) => path.clone(),
        other => panic!("{other:?}"),
    };
    assert_eq!(
        (name(&s1.body), name(&s2.body)),
        ("/p/s-0000000000".into(), "/p/s-0000000001".into())
    );
    let set = SetDataRequest {
        path: "/p".into(),
        data: None,
        version: 0,
    };
    assert!(matches!(
        prep.prep(&tree, 5, caller, Write::SetData(&set)).body,
        TxnBody::Op(_)
    ));
    assert_eq!(
        prep.prep(&tree, 6, caller, Write::SetData(&set)).body,
        TxnBody::Error(ErrorCode::BadVersion),
        "version 1 is outstanding"
    );
    let del = DeleteRequest {
        path: "/p".into(),
        version: -1,
    };
    assert_eq!(
        prep.prep(&tree, 7, caller, Write::Delete(&del)).body,
        TxnBody::Error(ErrorCode::NotEmpty)
    );
    let eph = prep.prep(
        &tree,
        8,
        caller,
        Write::Create(OpCode::Create, &mk("/e", 1)),
    );
    assert!(matches!(eph.body, TxnBody::Op(_)));
    let under = prep.prep(
        &tree,
        9,
        caller,
        Write::Create(OpCode::Create, &mk("/e/c", 0)),
    );
    assert_eq!(
        under.body,
        TxnBody::Error(ErrorCode::NoChildrenForEphemerals)
    );
    let _ = prep.prep_close_session(&tree, 10, 7);
    let again = prep.prep(
        &tree,
        11,
        caller,
        Write::Create(OpCode::Create, &mk("/e", 0)),
    );
    assert!(
        matches!(again.body, TxnBody::Op(_)),
        "the close made /e free: {:?}",
        again.body
    );
    let expired = Caller {
        session_valid: false,
        ..caller
    };
    assert_eq!(
        prep.prep(
            &tree,
            12,
            expired,
            Write::Create(OpCode::Create, &mk("/z", 0))
        )
        .body,
        TxnBody::Error(ErrorCode::SessionExpired)
    );
}

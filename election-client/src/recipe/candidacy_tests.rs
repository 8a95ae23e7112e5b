//! Unit tests of the candidacy machine: exact outputs for each transition, then every
//! input in every reachable step against a small scripted server model.

use std::collections::BTreeMap;

use bytes::Bytes;
use rzk_zxid::Zxid;

use super::*;

const S1: SessionId = SessionId(0x1001);
const S2: SessionId = SessionId(0x1002);
const FOREIGN: SessionId = SessionId(0x9999);
const PARENT: &str = "/election";
const EPOCH: &str = "/election-epoch";

fn latch_cfg() -> CandidacyConfig {
    let mut cfg = CandidacyConfig::new(PARENT, "latch-", 0xabc);
    cfg.epoch_path = Some(EPOCH.into());
    cfg.data = Bytes::from_static(b"me");
    cfg
}

fn lock_cfg() -> CandidacyConfig {
    let mut cfg = CandidacyConfig::new("/lock", "lock-", 0xdef);
    cfg.mode = Mode::Lock;
    cfg
}

fn stat_owned(owner: SessionId) -> Stat {
    Stat {
        ephemeral_owner: owner,
        ..Stat::default()
    }
}

fn connected(session: SessionId) -> Input {
    Input::Conn(ConnectionState::Connected { session })
}

fn reconnected(session: SessionId) -> Input {
    Input::Conn(ConnectionState::Reconnected { session })
}

fn nonode(path: &str) -> Error {
    Error::NoNode { path: path.into() }
}

/// Drives a machine and checks, after every step, that grants and revocations alternate
/// (exactly one `Revoked` per `Granted`) and that a started, connected machine always
/// has something pending.
struct H {
    m: Candidacy,
    now: u64,
    granted: bool,
    grants: Vec<Grant>,
}

impl H {
    fn new(cfg: CandidacyConfig) -> H {
        H {
            m: Candidacy::new(cfg),
            now: 0,
            granted: false,
            grants: Vec::new(),
        }
    }

    fn step(&mut self, input: Input) -> Vec<Output> {
        self.now += 1;
        let out = self.m.step(self.now, input);
        for o in &out {
            match o {
                Output::Granted(g) => {
                    assert!(!self.granted, "granted twice without a revoke: {out:?}");
                    self.granted = true;
                    self.grants.push(g.clone());
                }
                Output::Revoked(_) => {
                    assert!(self.granted, "revoked without a grant: {out:?}");
                    self.granted = false;
                }
                Output::Op { .. } | Output::Timer { .. } | Output::Ended => {}
            }
        }
        assert_eq!(self.granted, self.m.granted().is_some());
        assert!(
            self.m.is_progressing(),
            "idle while started and connected: {:?}",
            self.m
        );
        out
    }

    /// The one operation (other than best-effort deletes) in `out`.
    fn op(out: &[Output]) -> (OpId, Op) {
        let ops: Vec<_> = out
            .iter()
            .filter_map(|o| match o {
                Output::Op { id, op } if !matches!(op, Op::Delete { .. }) => {
                    Some((*id, op.clone()))
                }
                _ => None,
            })
            .collect();
        assert_eq!(ops.len(), 1, "expected one operation in {out:?}");
        ops[0].clone()
    }

    fn timer(out: &[Output]) -> OpId {
        out.iter()
            .find_map(|o| match o {
                Output::Timer { id, .. } => Some(*id),
                _ => None,
            })
            .unwrap_or_else(|| panic!("expected a timer in {out:?}"))
    }

    fn deletes(out: &[Output]) -> Vec<String> {
        out.iter()
            .filter_map(|o| match o {
                Output::Op {
                    op: Op::Delete { path },
                    ..
                } => Some(path.clone()),
                _ => None,
            })
            .collect()
    }

    fn done(&mut self, id: OpId, result: OpResult) -> Vec<Output> {
        self.step(Input::Done { id, result })
    }

    /// Start and connect; returns the create.
    fn start(&mut self, session: SessionId) -> (OpId, Op) {
        assert_eq!(self.step(Input::Start), vec![]);
        H::op(&self.step(connected(session)))
    }

    /// Answer a create with `seq`; returns the listing op and our node's child name.
    fn created(&mut self, create: (OpId, Op), seq: u32) -> ((OpId, Op), String) {
        let Op::CreateCandidate { name, parent, .. } = create.1 else {
            panic!("not a create: {create:?}")
        };
        let child = format!("{name}{seq:010}");
        let out = self.done(create.0, OpResult::Created(Ok(join_path(&parent, &child))));
        (H::op(&out), child)
    }

    /// From a fresh start to a fenced grant with the epoch going `from` → `from + 1`.
    fn lead(&mut self, session: SessionId, from: u64) -> String {
        let create = self.start(session);
        let (list, me) = self.created(create, 0);
        self.prove_first(list, &me, session, from);
        me
    }

    /// From a listing in which we are first to a fenced grant.
    fn prove_first(&mut self, list: (OpId, Op), me: &str, owner: SessionId, from: u64) {
        let read = H::op(&self.done(list.0, OpResult::Children(Ok(vec![me.to_owned()]))));
        assert_eq!(
            read.1,
            Op::Read {
                path: join_path(PARENT, me)
            }
        );
        let epoch = H::op(&self.done(
            read.0,
            OpResult::Read(Ok((Bytes::new(), stat_owned(owner)))),
        ));
        assert_eq!(epoch.1, Op::Read { path: EPOCH.into() });
        let version = from as i32;
        let stat = Stat {
            version,
            ..Stat::default()
        };
        let bump = H::op(&self.done(
            epoch.0,
            OpResult::Read(Ok((Bytes::from(from.to_string()), stat))),
        ));
        assert_eq!(
            bump.1,
            Op::BumpEpoch {
                candidate: join_path(PARENT, me),
                epoch_path: EPOCH.into(),
                version,
                value: from + 1,
            }
        );
        let out = self.done(
            bump.0,
            OpResult::Bumped(Ok(Stat {
                mzxid: Zxid::from_u64(100 + from),
                ..Stat::default()
            })),
        );
        assert_eq!(
            out[0],
            Output::Granted(Grant {
                node: join_path(PARENT, me),
                session: owner,
                token: Some(FencingToken {
                    epoch: from + 1,
                    zxid: Zxid::from_u64(100 + from),
                }),
            })
        );
        assert_eq!(
            H::op(&out).1,
            Op::Watch {
                path: join_path(PARENT, me)
            }
        );
    }
}

// ----- exact transitions --------------------------------------------------------------

#[test]
fn leader_only_after_ownership_proof_and_fencing() {
    let mut h = H::new(latch_cfg());
    let create = h.start(S1);
    let Op::CreateCandidate { parent, name, data } = &create.1 else {
        panic!("{create:?}")
    };
    assert_eq!(parent, PARENT);
    assert!(
        name.starts_with("_c_") && name.ends_with("latch-"),
        "{name}"
    );
    assert_eq!(data, &Bytes::from_static(b"me"));
    let (list, me) = h.created(create, 3);
    assert_eq!(
        list.1,
        Op::ListChildren {
            path: PARENT.into()
        }
    );
    h.prove_first(list, &me, S1, 41);
    assert_eq!(h.grants.len(), 1);
}

#[test]
fn nothing_happens_before_start_or_connection() {
    let mut h = H::new(latch_cfg());
    assert_eq!(h.step(connected(S1)), vec![]);
    assert_eq!(h.step(Input::Conn(ConnectionState::Suspended)), vec![]);
    // Started while suspended: waits for the connection.
    assert_eq!(h.step(Input::Start), vec![]);
    assert!(matches!(
        H::op(&h.step(reconnected(S1))).1,
        Op::CreateCandidate { .. }
    ));
}

#[test]
fn second_candidate_watches_only_its_predecessor() {
    let mut h = H::new(latch_cfg());
    let create = h.start(S1);
    let (list, me) = h.created(create, 7);
    // Unsorted, with a foreign-prefixed name and sequence numbers around ours.
    let children = vec![
        "_c_x-latch-0000000009".to_owned(),
        me.clone(),
        "_c_y-latch-0000000002".to_owned(),
        "_c_z-latch-0000000005".to_owned(),
    ];
    let watch = H::op(&h.done(list.0, OpResult::Children(Ok(children))));
    assert_eq!(
        watch.1,
        Op::Watch {
            path: "/election/_c_z-latch-0000000005".into()
        }
    );
    let out = h.done(watch.0, OpResult::Watching(Ok(Stat::default())));
    H::timer(&out); // the self-check
    assert!(h.grants.is_empty());
}

#[test]
fn predecessor_deleted_relists_and_keeps_our_node() {
    // CURATOR-645: another node vanishing never makes us recreate our own.
    let mut h = H::new(latch_cfg());
    let create = h.start(S1);
    let (list, me) = h.created(create, 1);
    let pred = "_c_p-latch-0000000000".to_owned();
    let watch = H::op(&h.done(list.0, OpResult::Children(Ok(vec![pred, me.clone()]))));
    h.done(watch.0, OpResult::Watching(Ok(Stat::default())));
    let list = H::op(&h.step(Input::Watched { id: watch.0 }));
    assert_eq!(
        list.1,
        Op::ListChildren {
            path: PARENT.into()
        }
    );
    h.prove_first(list, &me, S1, 0);
}

#[test]
fn predecessor_already_gone_relists() {
    let mut h = H::new(latch_cfg());
    let create = h.start(S1);
    let (list, me) = h.created(create, 1);
    let watch = H::op(&h.done(
        list.0,
        OpResult::Children(Ok(vec!["_c_p-latch-0000000000".into(), me])),
    ));
    let out = h.done(
        watch.0,
        OpResult::Watching(Err(nonode("/election/_c_p-latch-0000000000"))),
    );
    assert_eq!(
        H::op(&out).1,
        Op::ListChildren {
            path: PARENT.into()
        }
    );
}

#[test]
fn nonode_on_create_is_retried_never_ignored() {
    // The seed's check-then-GC race: the parent is collected between its creation and
    // our create, over and over; every NONODE leads to another create.
    let mut h = H::new(latch_cfg());
    let mut create = h.start(S1);
    let first_name = create.1.clone();
    for _ in 0..5 {
        let out = h.done(create.0, OpResult::Created(Err(nonode(PARENT))));
        let timer = H::timer(&out);
        create = H::op(&h.step(Input::Timer { id: timer }));
        // Same attempt, same protected name: a retry, not a new participation.
        assert_eq!(create.1, first_name);
    }
    let (list, me) = h.created(create, 0);
    h.prove_first(list, &me, S1, 0);
}

#[test]
fn nonode_on_listing_creates_a_fresh_candidate() {
    // CURATOR-724: the parent (a container) was collected with our node in it.
    let mut h = H::new(latch_cfg());
    let create = h.start(S1);
    let (list, _me) = h.created(create.clone(), 0);
    let out = h.done(list.0, OpResult::Children(Err(nonode(PARENT))));
    let again = H::op(&out);
    let (Op::CreateCandidate { name: old, .. }, Op::CreateCandidate { name: new, .. }) =
        (&create.1, &again.1)
    else {
        panic!("{out:?}")
    };
    assert_ne!(old, new, "a fresh candidate gets a fresh protected prefix");
}

#[test]
fn nonode_on_listing_while_leading_revokes_then_rejoins() {
    let mut h = H::new(latch_cfg());
    h.lead(S1, 0);
    let w = h.m.step_snapshot().expect("holding");
    let list = H::op(&h.step(Input::Watched { id: w }));
    let out = h.done(list.0, OpResult::Children(Err(nonode(PARENT))));
    assert_eq!(out[0], Output::Revoked(Revoked::NotProven));
    assert!(matches!(H::op(&out).1, Op::CreateCandidate { .. }));
}

#[test]
fn lost_create_reply_is_found_by_prefix() {
    let mut h = H::new(latch_cfg());
    let create = h.start(S1);
    let Op::CreateCandidate { name, .. } = create.1.clone() else {
        panic!()
    };
    let out = h.done(create.0, OpResult::Created(Err(Error::ConnectionLoss)));
    let list = H::op(&h.step(Input::Timer { id: H::timer(&out) }));
    assert_eq!(
        list.1,
        Op::ListChildren {
            path: PARENT.into()
        }
    );
    // The create did happen: the listing adopts it instead of creating a duplicate.
    let me = format!("{name}0000000004");
    let read = H::op(&h.done(list.0, OpResult::Children(Ok(vec![me.clone()]))));
    assert_eq!(
        read.1,
        Op::Read {
            path: join_path(PARENT, &me)
        }
    );
}

#[test]
fn lost_create_reply_that_did_not_happen_creates_again() {
    let mut h = H::new(latch_cfg());
    let create = h.start(S1);
    let out = h.done(create.0, OpResult::Created(Err(Error::ConnectionLoss)));
    let list = H::op(&h.step(Input::Timer { id: H::timer(&out) }));
    let again = H::op(&h.done(
        list.0,
        OpResult::Children(Ok(vec!["_c_o-latch-0000000000".into()])),
    ));
    assert_eq!(again.1, create.1);
}

#[test]
fn suspended_revokes_and_reconnect_on_same_session_keeps_the_node() {
    let mut h = H::new(latch_cfg());
    let me = h.lead(S1, 4);
    let out = h.step(Input::Conn(ConnectionState::Suspended));
    assert_eq!(out, vec![Output::Revoked(Revoked::Suspended)]);
    let list = H::op(&h.step(reconnected(S1)));
    assert_eq!(
        list.1,
        Op::ListChildren {
            path: PARENT.into()
        }
    );
    // Same node, proven again; the grant gets a new, larger epoch.
    h.prove_first(list, &me, S1, 5);
    assert_eq!(h.grants[0].node, h.grants[1].node);
    assert!(h.grants[1].token > h.grants[0].token);
}

#[test]
fn results_in_flight_across_a_suspension_are_stale() {
    let mut h = H::new(latch_cfg());
    let create = h.start(S1);
    let (list, me) = h.created(create, 0);
    h.step(Input::Conn(ConnectionState::Suspended));
    // The listing answered after SUSPENDED is ignored; RECONNECTED re-lists.
    assert_eq!(
        h.done(list.0, OpResult::Children(Ok(vec![me.clone()]))),
        vec![]
    );
    let list = H::op(&h.step(reconnected(S1)));
    h.prove_first(list, &me, S1, 0);
}

#[test]
fn lost_revokes_first_then_discards_the_participation() {
    let mut h = H::new(latch_cfg());
    let me = h.lead(S1, 0);
    let out = h.step(Input::Conn(ConnectionState::Lost));
    assert_eq!(out, vec![Output::Revoked(Revoked::Lost)]);
    assert_eq!(h.m.node_path(), None);
    // The new session: delete the old node (best effort), then a fresh candidate.
    let out = h.step(reconnected(S2));
    assert_eq!(H::deletes(&out), vec![join_path(PARENT, &me)]);
    let create = H::op(&out);
    let (list, me2) = h.created(create, 1);
    assert_ne!(me, me2);
    h.prove_first(list, &me2, S2, 1);
    assert_eq!(h.grants[1].session, S2);
}

#[test]
fn old_session_node_sorting_first_is_never_led() {
    // CURATOR-696: after a client-side LOST the old session's node still exists on the
    // server and sorts first. We queue behind it until the server expires it.
    let mut h = H::new(latch_cfg());
    let old = h.lead(S1, 0);
    h.step(Input::Conn(ConnectionState::Lost));
    let out = h.step(reconnected(S2));
    let create = H::op(&out);
    let (list, me) = h.created(create, 1);
    let watch = H::op(&h.done(
        list.0,
        OpResult::Children(Ok(vec![old.clone(), me.clone()])),
    ));
    assert_eq!(
        watch.1,
        Op::Watch {
            path: join_path(PARENT, &old)
        }
    );
    assert_eq!(h.grants.len(), 1);
    // The server expires S1: its node goes, we lead on S2.
    h.done(watch.0, OpResult::Watching(Ok(stat_owned(S1))));
    let list = H::op(&h.step(Input::Watched { id: watch.0 }));
    h.prove_first(list, &me, S2, 1);
}

#[test]
fn first_node_owned_by_another_session_is_not_led() {
    let mut h = H::new(latch_cfg());
    let create = h.start(S1);
    let (list, me) = h.created(create, 0);
    let read = H::op(&h.done(list.0, OpResult::Children(Ok(vec![me.clone()]))));
    let out = h.done(
        read.0,
        OpResult::Read(Ok((Bytes::new(), stat_owned(FOREIGN)))),
    );
    assert!(h.grants.is_empty());
    // The node is retired (deleted: it is ours from a dead session) and a fresh one made.
    assert!(matches!(H::op(&out).1, Op::CreateCandidate { .. }));
    let out = h.step(Input::Conn(ConnectionState::Suspended));
    assert_eq!(out, vec![]);
    let out = h.step(reconnected(S1));
    assert!(H::deletes(&out).is_empty() || H::deletes(&out) == vec![join_path(PARENT, &me)]);
}

#[test]
fn new_session_without_lost_never_reuses_the_old_node() {
    let mut h = H::new(latch_cfg());
    let me = h.lead(S1, 0);
    h.step(Input::Conn(ConnectionState::Suspended));
    let out = h.step(reconnected(S2));
    assert_eq!(H::deletes(&out), vec![join_path(PARENT, &me)]);
    assert!(matches!(H::op(&out).1, Op::CreateCandidate { .. }));
}

#[test]
fn expiry_while_fencing_never_grants_and_the_next_epoch_is_larger() {
    let mut h = H::new(latch_cfg());
    let create = h.start(S1);
    let (list, me) = h.created(create, 0);
    let read = H::op(&h.done(list.0, OpResult::Children(Ok(vec![me.clone()]))));
    let epoch = H::op(&h.done(read.0, OpResult::Read(Ok((Bytes::new(), stat_owned(S1))))));
    let bump = H::op(&h.done(
        epoch.0,
        OpResult::Read(Ok((Bytes::from_static(b"7"), Stat::default()))),
    ));
    assert_eq!(h.step(Input::Conn(ConnectionState::Lost)), vec![]);
    // The bump was applied on the server before the session died: the late success
    // must not grant anything.
    assert_eq!(
        h.done(bump.0, OpResult::Bumped(Ok(Stat::default()))),
        vec![]
    );
    assert!(h.grants.is_empty());
    let create = H::op(&h.step(reconnected(S2)));
    let (list, me2) = h.created(create, 1);
    h.prove_first(list, &me2, S2, 8);
    assert_eq!(h.grants[0].token.map(|t| t.epoch), Some(9));
}

#[test]
fn fencing_conflict_returns_to_candidacy_with_backoff() {
    let mut h = H::new(latch_cfg());
    let create = h.start(S1);
    let (list, me) = h.created(create, 0);
    let read = H::op(&h.done(list.0, OpResult::Children(Ok(vec![me.clone()]))));
    let epoch = H::op(&h.done(read.0, OpResult::Read(Ok((Bytes::new(), stat_owned(S1))))));
    let bump = H::op(&h.done(
        epoch.0,
        OpResult::Read(Ok((Bytes::from_static(b"1"), Stat::default()))),
    ));
    let out = h.done(bump.0, OpResult::Bumped(Err(BumpError::EpochMoved)));
    let timer = H::timer(&out);
    assert!(h.grants.is_empty());
    let list = H::op(&h.step(Input::Timer { id: timer }));
    h.prove_first(list, &me, S1, 2);
}

#[test]
fn backoff_grows_and_is_capped() {
    let mut h = H::new(latch_cfg());
    let mut create = h.start(S1);
    let mut delays = Vec::new();
    for _ in 0..12 {
        let now = h.now;
        let out = h.done(
            create.0,
            OpResult::Created(Err(Error::Server {
                code: rzk_wire::ErrorCode::SystemError,
                path: PARENT.into(),
            })),
        );
        let at = out
            .iter()
            .find_map(|o| match o {
                Output::Timer { at_ms, .. } => Some(*at_ms),
                _ => None,
            })
            .expect("timer");
        delays.push(at - now - 1);
        create = H::op(&h.step(Input::Timer { id: H::timer(&out) }));
    }
    assert!(delays[0] >= 20 && delays[0] < 40, "{delays:?}");
    assert!(delays[5] > delays[1], "{delays:?}");
    assert!(delays.iter().all(|d| *d <= 3_000), "{delays:?}");
}

#[test]
fn epoch_node_missing_is_created_and_races_are_fine() {
    let mut h = H::new(latch_cfg());
    let create = h.start(S1);
    let (list, me) = h.created(create, 0);
    let read = H::op(&h.done(list.0, OpResult::Children(Ok(vec![me.clone()]))));
    let epoch = H::op(&h.done(read.0, OpResult::Read(Ok((Bytes::new(), stat_owned(S1))))));
    let mk = H::op(&h.done(epoch.0, OpResult::Read(Err(nonode(EPOCH)))));
    assert_eq!(mk.1, Op::CreateEpoch { path: EPOCH.into() });
    let epoch = H::op(&h.done(
        mk.0,
        OpResult::EpochCreated(Err(Error::NodeExists { path: EPOCH.into() })),
    ));
    assert_eq!(epoch.1, Op::Read { path: EPOCH.into() });
    let bump = H::op(&h.done(
        epoch.0,
        OpResult::Read(Ok((Bytes::from_static(b"0"), Stat::default()))),
    ));
    let mk = H::op(&h.done(bump.0, OpResult::Bumped(Err(BumpError::EpochMissing))));
    assert_eq!(mk.1, Op::CreateEpoch { path: EPOCH.into() });
}

#[test]
fn candidate_gone_during_fencing_makes_a_fresh_candidate() {
    let mut h = H::new(latch_cfg());
    let create = h.start(S1);
    let (list, me) = h.created(create, 0);
    let read = H::op(&h.done(list.0, OpResult::Children(Ok(vec![me]))));
    let epoch = H::op(&h.done(read.0, OpResult::Read(Ok((Bytes::new(), stat_owned(S1))))));
    let bump = H::op(&h.done(epoch.0, OpResult::Read(Ok((Bytes::new(), Stat::default())))));
    let out = h.done(bump.0, OpResult::Bumped(Err(BumpError::CandidateGone)));
    assert!(matches!(H::op(&out).1, Op::CreateCandidate { .. }));
}

#[test]
fn garbage_in_the_epoch_node_backs_off_without_panicking() {
    let mut h = H::new(latch_cfg());
    let create = h.start(S1);
    let (list, me) = h.created(create, 0);
    let read = H::op(&h.done(list.0, OpResult::Children(Ok(vec![me]))));
    let epoch = H::op(&h.done(read.0, OpResult::Read(Ok((Bytes::new(), stat_owned(S1))))));
    let out = h.done(
        epoch.0,
        OpResult::Read(Ok((Bytes::from_static(b"\xff-x"), Stat::default()))),
    );
    H::timer(&out);
    assert!(h.grants.is_empty());
}

#[test]
fn own_node_deleted_while_leading_revokes_and_rejoins() {
    // CURATOR-171: the leader watches its own node.
    let mut h = H::new(latch_cfg());
    h.lead(S1, 0);
    let w = h.m.step_snapshot().expect("holding");
    let list = H::op(&h.step(Input::Watched { id: w }));
    let out = h.done(
        list.0,
        OpResult::Children(Ok(vec!["_c_other-latch-0000000009".into()])),
    );
    assert_eq!(out[0], Output::Revoked(Revoked::NotProven));
    assert!(matches!(H::op(&out).1, Op::CreateCandidate { .. }));
}

#[test]
fn own_node_watch_finding_it_gone_revokes() {
    let mut h = H::new(latch_cfg());
    let create = h.start(S1);
    let (list, me) = h.created(create, 0);
    let read = H::op(&h.done(list.0, OpResult::Children(Ok(vec![me.clone()]))));
    let epoch = H::op(&h.done(read.0, OpResult::Read(Ok((Bytes::new(), stat_owned(S1))))));
    let bump = H::op(&h.done(epoch.0, OpResult::Read(Ok((Bytes::new(), Stat::default())))));
    let out = h.done(bump.0, OpResult::Bumped(Ok(Stat::default())));
    let watch = H::op(&out);
    let out = h.done(
        watch.0,
        OpResult::Watching(Err(nonode(&join_path(PARENT, &me)))),
    );
    assert_eq!(out[0], Output::Revoked(Revoked::NotProven));
    assert!(matches!(H::op(&out).1, Op::CreateCandidate { .. }));
}

#[test]
fn leader_relisting_keeps_its_grant_and_token() {
    let mut h = H::new(latch_cfg());
    let me = h.lead(S1, 0);
    let watch_id = h.m.step_snapshot().expect("holding");
    let list = H::op(&h.step(Input::Watched { id: watch_id }));
    let read = H::op(&h.done(list.0, OpResult::Children(Ok(vec![me.clone()]))));
    let out = h.done(read.0, OpResult::Read(Ok((Bytes::new(), stat_owned(S1)))));
    // Proven again: no revoke, no new fencing, the watch is re-armed.
    assert_eq!(
        H::op(&out).1,
        Op::Watch {
            path: join_path(PARENT, &me)
        }
    );
    assert_eq!(h.grants.len(), 1);
    assert!(h.granted);
}

#[test]
fn read_only_is_not_leadership() {
    let mut h = H::new(latch_cfg());
    h.lead(S1, 0);
    let out = h.step(Input::Conn(ConnectionState::ReadOnly { session: S1 }));
    assert_eq!(out, vec![Output::Revoked(Revoked::Suspended)]);
}

#[test]
fn stale_create_success_is_deleted() {
    let mut h = H::new(latch_cfg());
    let create = h.start(S1);
    h.step(Input::Conn(ConnectionState::Lost));
    let path = "/election/_c_old-latch-0000000000".to_owned();
    let out = h.done(create.0, OpResult::Created(Ok(path.clone())));
    assert_eq!(H::deletes(&out), vec![path]);
}

#[test]
fn close_revokes_deletes_and_ends() {
    let mut h = H::new(latch_cfg());
    let me = h.lead(S1, 0);
    let out = h.step(Input::Close);
    assert_eq!(
        out,
        vec![
            Output::Revoked(Revoked::Closed),
            Output::Op {
                id: match &out[1] {
                    Output::Op { id, .. } => *id,
                    other => panic!("{other:?}"),
                },
                op: Op::Delete {
                    path: join_path(PARENT, &me)
                }
            },
            Output::Ended,
        ]
    );
    // After close: nothing but cleanup.
    assert_eq!(h.step(reconnected(S1)), vec![]);
    assert_eq!(h.step(Input::Close), vec![]);
    assert_eq!(h.step(Input::Start), vec![]);
    let late = h.done(OpId(1), OpResult::Created(Ok("/election/x".into())));
    assert_eq!(H::deletes(&late), vec!["/election/x".to_owned()]);
}

#[test]
fn close_with_a_create_in_flight_deletes_its_node_when_it_lands() {
    let mut h = H::new(latch_cfg());
    let create = h.start(S1);
    assert_eq!(h.step(Input::Close), vec![Output::Ended]);
    let out = h.done(
        create.0,
        OpResult::Created(Ok("/election/_c_a-latch-0000000000".into())),
    );
    assert_eq!(H::deletes(&out).len(), 1);
}

// ----- lock mode and the selector's release ----------------------------------------------

fn grant_lock(h: &mut H, session: SessionId) -> String {
    let create = h.start(session);
    let Op::CreateCandidate { name, .. } = &create.1 else {
        panic!()
    };
    let me = format!("{name}0000000000");
    let list = H::op(&h.done(create.0, OpResult::Created(Ok(format!("/lock/{me}")))));
    let read = H::op(&h.done(list.0, OpResult::Children(Ok(vec![me.clone()]))));
    let out = h.done(
        read.0,
        OpResult::Read(Ok((Bytes::new(), stat_owned(session)))),
    );
    assert_eq!(
        out[0],
        Output::Granted(Grant {
            node: format!("/lock/{me}"),
            session,
            token: None
        })
    );
    me
}

#[test]
fn lock_release_deletes_and_ends() {
    let mut h = H::new(lock_cfg());
    let me = grant_lock(&mut h, S1);
    let out = h.step(Input::Release { rejoin: false });
    assert_eq!(out[0], Output::Revoked(Revoked::Released));
    assert_eq!(H::deletes(&out), vec![format!("/lock/{me}")]);
    assert_eq!(out.last(), Some(&Output::Ended));
    assert!(h.m.is_ended());
}

#[test]
fn lock_lost_with_its_session_ends() {
    let mut h = H::new(lock_cfg());
    grant_lock(&mut h, S1);
    let out = h.step(Input::Conn(ConnectionState::Lost));
    assert_eq!(out, vec![Output::Revoked(Revoked::Lost), Output::Ended]);
    // Reconnecting deletes the dead node but does not re-acquire.
    let out = h.step(reconnected(S2));
    assert_eq!(H::deletes(&out).len(), 1);
    assert_eq!(out.len(), 1);
}

#[test]
fn lock_waiter_survives_a_lost_session() {
    let mut h = H::new(lock_cfg());
    let create = h.start(S1);
    h.step(Input::Conn(ConnectionState::Lost));
    let out = h.step(reconnected(S2));
    assert!(matches!(H::op(&out).1, Op::CreateCandidate { .. }));
    let _ = create;
}

#[test]
fn selector_release_with_rejoin_queues_a_fresh_candidate() {
    let mut h = H::new(latch_cfg());
    let me = h.lead(S1, 0);
    let out = h.step(Input::Release { rejoin: true });
    assert_eq!(out[0], Output::Revoked(Revoked::Released));
    assert_eq!(H::deletes(&out), vec![join_path(PARENT, &me)]);
    assert!(matches!(H::op(&out).1, Op::CreateCandidate { .. }));
}

// ----- every input in every step ---------------------------------------------------------

/// A scripted server: answers the machine's operations from a tiny znode model, so a run
/// can be carried to the end after any perturbation.
#[derive(Default)]
struct Model {
    /// child name → owner session.
    children: BTreeMap<String, SessionId>,
    parent_exists: bool,
    seq: u32,
    epoch: Option<(u64, i32)>,
    /// Sessions the server still considers alive.
    alive: Vec<SessionId>,
}

impl Model {
    fn answer(&mut self, session: SessionId, op: &Op) -> Option<OpResult> {
        Some(match op {
            Op::CreateCandidate { name, .. } => {
                self.parent_exists = true;
                let child = format!("{name}{:010}", self.seq);
                self.seq += 1;
                self.children.insert(child.clone(), session);
                OpResult::Created(Ok(join_path(PARENT, &child)))
            }
            Op::ListChildren { .. } => {
                if self.parent_exists {
                    OpResult::Children(Ok(self.children.keys().cloned().collect()))
                } else {
                    OpResult::Children(Err(nonode(PARENT)))
                }
            }
            Op::Read { path } if path == EPOCH => match self.epoch {
                Some((v, ver)) => OpResult::Read(Ok((
                    Bytes::from(v.to_string()),
                    Stat {
                        version: ver,
                        ..Stat::default()
                    },
                ))),
                None => OpResult::Read(Err(nonode(EPOCH))),
            },
            Op::Read { path } => match self.children.get(name_of(path)) {
                Some(owner) => OpResult::Read(Ok((Bytes::new(), stat_owned(*owner)))),
                None => OpResult::Read(Err(nonode(path))),
            },
            Op::Watch { path } => match self.children.get(name_of(path)) {
                Some(owner) => OpResult::Watching(Ok(stat_owned(*owner))),
                None => OpResult::Watching(Err(nonode(path))),
            },
            Op::CreateEpoch { .. } => {
                if self.epoch.is_some() {
                    OpResult::EpochCreated(Err(Error::NodeExists { path: EPOCH.into() }))
                } else {
                    self.epoch = Some((0, 0));
                    OpResult::EpochCreated(Ok(()))
                }
            }
            Op::BumpEpoch {
                candidate,
                version,
                value,
                ..
            } => {
                if !self.children.contains_key(name_of(candidate)) {
                    OpResult::Bumped(Err(BumpError::CandidateGone))
                } else {
                    match self.epoch {
                        None => OpResult::Bumped(Err(BumpError::EpochMissing)),
                        Some((_, ver)) if ver != *version => {
                            OpResult::Bumped(Err(BumpError::EpochMoved))
                        }
                        Some((_, ver)) => {
                            self.epoch = Some((*value, ver + 1));
                            OpResult::Bumped(Ok(Stat {
                                mzxid: Zxid::from_u64(*value),
                                ..Stat::default()
                            }))
                        }
                    }
                }
            }
            Op::Delete { path } => {
                self.children.remove(name_of(path));
                return None;
            }
        })
    }

    fn expire(&mut self, session: SessionId) {
        self.children.retain(|_, owner| *owner != session);
        self.alive.retain(|s| *s != session);
        if self.children.is_empty() {
            // Container GC: an empty, used parent goes.
            self.parent_exists = false;
        }
    }
}

/// Run the machine against the model until it is granted (or `limit` steps pass).
/// Pending work is taken in order; timers fire at once (time is an argument).
fn run_to_grant(
    h: &mut H,
    model: &mut Model,
    pending: &mut Vec<Output>,
    session: SessionId,
    limit: usize,
) -> bool {
    // Run a fixed number of steps (the self-check timers keep a holder busy forever),
    // then look at where it ended.
    for _ in 0..limit {
        if pending.is_empty() {
            break;
        }
        let next = pending.remove(0);
        let out = match next {
            Output::Op { id, op } => match model.answer(session, &op) {
                Some(result) => h.done(id, result),
                None => Vec::new(),
            },
            Output::Timer { id, .. } => h.step(Input::Timer { id }),
            Output::Granted(_) | Output::Revoked(_) | Output::Ended => Vec::new(),
        };
        pending.extend(out);
    }
    h.granted
}

#[derive(Debug, Clone, Copy)]
enum Poke {
    Suspend,
    ReconnectSame,
    Lose,
    ReconnectNew,
    ReadOnly,
    StaleDone,
    StaleWatch,
    StaleTimer,
    ParentGc,
}

const POKES: [Poke; 9] = [
    Poke::Suspend,
    Poke::ReconnectSame,
    Poke::Lose,
    Poke::ReconnectNew,
    Poke::ReadOnly,
    Poke::StaleDone,
    Poke::StaleWatch,
    Poke::StaleTimer,
    Poke::ParentGc,
];

#[test]
fn every_input_in_every_step_still_ends_in_exactly_one_grant() {
    // Walk a single candidate from start to grant; before answering the k-th pending
    // output, inject one perturbation. Whatever it is, the candidacy must end granted
    // on a live session with a node owned by that session, the grant must come from a
    // successful fencing step, and no epoch may be granted twice.
    for k in 0..12 {
        for poke in POKES {
            let mut h = H::new(latch_cfg());
            let mut model = Model {
                alive: vec![S1],
                ..Model::default()
            };
            let mut session = S1;
            h.step(Input::Start);
            let mut pending = h.step(connected(S1));
            // Advance k outputs.
            for _ in 0..k {
                if pending.is_empty() || h.granted {
                    break;
                }
                let next = pending.remove(0);
                let out = match next {
                    Output::Op { id, op } => match model.answer(session, &op) {
                        Some(r) => h.done(id, r),
                        None => Vec::new(),
                    },
                    Output::Timer { id, .. } => h.step(Input::Timer { id }),
                    Output::Granted(_) | Output::Revoked(_) | Output::Ended => Vec::new(),
                };
                pending.extend(out);
            }
            let ctx = format!("k={k} poke={poke:?}");
            match poke {
                Poke::Suspend => {
                    pending.extend(h.step(Input::Conn(ConnectionState::Suspended)));
                    pending.retain(|o| {
                        matches!(
                            o,
                            Output::Op {
                                op: Op::Delete { .. },
                                ..
                            }
                        )
                    });
                    pending.extend(h.step(reconnected(session)));
                }
                Poke::ReadOnly => {
                    pending.extend(h.step(Input::Conn(ConnectionState::ReadOnly { session })));
                    pending.clear();
                    pending.extend(h.step(reconnected(session)));
                }
                Poke::ReconnectSame => {
                    pending.clear();
                    pending.extend(h.step(reconnected(session)));
                }
                Poke::Lose | Poke::ReconnectNew => {
                    if matches!(poke, Poke::Lose) {
                        pending.extend(h.step(Input::Conn(ConnectionState::Lost)));
                    }
                    // The server expires the old session (deleting its node, and the
                    // parent if that leaves it empty) before we come back.
                    model.expire(session);
                    session = S2;
                    model.alive.push(S2);
                    pending.clear();
                    pending.extend(h.step(reconnected(session)));
                }
                Poke::StaleDone => {
                    pending.extend(h.done(OpId(0), OpResult::Children(Ok(vec![]))));
                    pending.extend(h.done(OpId(0), OpResult::Bumped(Ok(Stat::default()))));
                }
                Poke::StaleWatch => pending.extend(h.step(Input::Watched { id: OpId(0) })),
                Poke::StaleTimer => pending.extend(h.step(Input::Timer { id: OpId(0) })),
                Poke::ParentGc => {
                    // Everything vanished under us while connected (ensemble wiped).
                    model.children.clear();
                    model.parent_exists = false;
                    if h.granted {
                        // The own-node watch fires.
                        let w = h.m.step_snapshot().expect("holding");
                        pending.extend(h.step(Input::Watched { id: w }));
                    }
                }
            }
            assert!(
                run_to_grant(&mut h, &mut model, &mut pending, session, 200),
                "{ctx}: never granted; machine {:?}",
                h.m
            );
            let g = h.m.granted().cloned().expect("granted");
            assert_eq!(g.session, session, "{ctx}: granted on a dead session");
            assert_eq!(
                model.children.get(name_of(&g.node)),
                Some(&session),
                "{ctx}: grant without a live node of the current session"
            );
            let epochs: Vec<u64> = h
                .grants
                .iter()
                .filter_map(|g| g.token.map(|t| t.epoch))
                .collect();
            let mut dedup = epochs.clone();
            dedup.dedup();
            assert_eq!(epochs, dedup, "{ctx}: an epoch granted twice");
            assert!(
                epochs.windows(2).all(|w| w[0] < w[1]),
                "{ctx}: epochs not increasing"
            );
            assert_eq!(
                Some(g.token.expect("fenced").epoch),
                model.epoch.map(|e| e.0)
            );
        }
    }
}

#[test]
fn creates_lost_with_their_session_are_cleaned_up_by_prefix_within_a_limit() {
    // Each LOST retires a participation whose create may have landed unseen; the next
    // listing deletes children carrying those prefixes. Only the latest
    // STALE_PREFIXES_MAX are remembered (older nodes die with their sessions anyway).
    let mut h = H::new(latch_cfg());
    let mut names = Vec::new();
    let mut create = h.start(S1);
    for i in 0..(STALE_PREFIXES_MAX + 4) {
        let Op::CreateCandidate { name, .. } = create.1.clone() else {
            panic!("{create:?}")
        };
        names.push(format!("{name}{i:010}"));
        h.step(Input::Conn(ConnectionState::Lost));
        create = H::op(&h.step(reconnected(SessionId(0x2000 + i as i64))));
    }
    let (list, me) = h.created(create, 999);
    let mut children = names.clone();
    children.push(me);
    let out = h.done(list.0, OpResult::Children(Ok(children)));
    let deleted = H::deletes(&out);
    assert_eq!(deleted.len(), STALE_PREFIXES_MAX);
    let expected: Vec<String> = names[4..].iter().map(|n| join_path(PARENT, n)).collect();
    assert_eq!(deleted, expected);
}

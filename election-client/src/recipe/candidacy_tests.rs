//! Unit tests of the candidacy machine: exact outputs for each transition, then every
//! input in every reachable step against a small scripted server model.

use std::collections::BTreeMap;

use bytes::Bytes;
use rzk_wire::CreateMode;
use rzk_zxid::Zxid;

use super::*;
use crate::client::{Op as MultiOp, OpResult as MultiResult};
use crate::recipe::position::STALE_PREFIXES_MAX;

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

/// The listing of the election parent.
fn list_call() -> Call {
    Call::Children {
        path: PARENT.into(),
        watch: false,
    }
}

/// A read of `path` without a watch.
fn read_call(path: impl Into<String>) -> Call {
    Call::GetData {
        path: path.into(),
        watch: false,
    }
}

/// A read of `path` that leaves a watch.
fn watch_call(path: impl Into<String>) -> Call {
    Call::GetData {
        path: path.into(),
        watch: true,
    }
}

/// The create of the missing epoch znode.
fn create_epoch_call() -> Call {
    Call::Create {
        path: EPOCH.into(),
        data: Bytes::from_static(b"0"),
        mode: CreateMode::Persistent,
        ttl_ms: None,
        parents: Some(CreateMode::Persistent),
    }
}

fn is_candidate_create(call: &Call) -> bool {
    matches!(
        call,
        Call::Create {
            mode: CreateMode::EphemeralSequential,
            parents: Some(CreateMode::Container),
            ..
        }
    )
}

/// The answer to a create that made `path`.
fn created(path: impl Into<String>) -> Reply {
    Reply::Created(Ok((path.into(), Stat::default())))
}

/// A watch armed on a node owned by `owner`.
fn watching(stat: Stat) -> Reply {
    Reply::Data(Ok((Bytes::new(), stat)))
}

/// A successful fencing multi; the epoch znode's stat after it.
fn bumped(stat: Stat) -> Reply {
    Reply::Multi(Ok(vec![MultiResult::Checked, MultiResult::SetData(stat)]))
}

/// A failed fencing multi, as the server reports each kind of failure.
fn bump_failed(e: BumpError) -> Reply {
    let (index, source) = match e {
        BumpError::CandidateGone => (0, nonode("/candidate")),
        BumpError::EpochMoved => (1, Error::BadVersion { path: EPOCH.into() }),
        BumpError::EpochMissing => (1, nonode(EPOCH)),
        BumpError::Other(e) => return Reply::Multi(Err(e)),
    };
    Reply::Multi(Err(Error::MultiFailed {
        index,
        source: Box::new(source),
    }))
}

fn granted(g: Grant) -> Output {
    Output::Emit(RecipeEvent::Granted(g))
}

fn revoked(why: Revoked) -> Output {
    Output::Emit(RecipeEvent::Revoked(why))
}

fn release(rejoin: bool) -> Input {
    Input::Command(CandidacyCommand::Release { rejoin })
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
                Output::Emit(RecipeEvent::Granted(g)) => {
                    assert!(!self.granted, "granted twice without a revoke: {out:?}");
                    self.granted = true;
                    self.grants.push(g.clone());
                }
                Output::Emit(RecipeEvent::Revoked(_)) => {
                    assert!(self.granted, "revoked without a grant: {out:?}");
                    self.granted = false;
                }
                Output::Emit(RecipeEvent::Ended)
                | Output::Call { .. }
                | Output::Timer { .. }
                | Output::Unwatch { .. }
                | Output::BackgroundDelete { .. }
                | Output::Ended => {}
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

    /// The one call in `out` (best-effort deletes run in the background, not as calls).
    fn op(out: &[Output]) -> (OpId, Call) {
        let ops: Vec<_> = out
            .iter()
            .filter_map(|o| match o {
                Output::Call { id, call } => Some((*id, call.clone())),
                _ => None,
            })
            .collect();
        assert_eq!(ops.len(), 1, "expected one call in {out:?}");
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
                Output::BackgroundDelete { path } => Some(path.clone()),
                _ => None,
            })
            .collect()
    }

    fn done(&mut self, id: OpId, reply: Reply) -> Vec<Output> {
        self.step(Input::Done { id, reply })
    }

    /// Start and connect; returns the create.
    fn start(&mut self, session: SessionId) -> (OpId, Call) {
        assert_eq!(self.step(Input::Start), vec![]);
        H::op(&self.step(connected(session)))
    }

    /// Answer a create with `seq`; returns the listing call and our node's child name.
    fn created(&mut self, create: (OpId, Call), seq: u32) -> ((OpId, Call), String) {
        let Call::Create { path, .. } = &create.1 else {
            panic!("not a create: {create:?}")
        };
        let child = format!("{}{seq:010}", name_of(path));
        let out = self.done(create.0, created(format!("{path}{seq:010}")));
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
    fn prove_first(&mut self, list: (OpId, Call), me: &str, owner: SessionId, from: u64) {
        let read = H::op(&self.done(list.0, Reply::Children(Ok(vec![me.to_owned()]))));
        assert_eq!(read.1, read_call(join_path(PARENT, me)));
        let epoch = H::op(&self.done(read.0, Reply::Data(Ok((Bytes::new(), stat_owned(owner))))));
        assert_eq!(epoch.1, read_call(EPOCH));
        let version = from as i32;
        let stat = Stat {
            version,
            ..Stat::default()
        };
        let bump = H::op(&self.done(
            epoch.0,
            Reply::Data(Ok((Bytes::from(from.to_string()), stat))),
        ));
        assert_eq!(
            bump.1,
            Call::Multi {
                ops: vec![
                    MultiOp::Check {
                        path: join_path(PARENT, me),
                        version: -1,
                    },
                    MultiOp::SetData {
                        path: EPOCH.into(),
                        data: Bytes::from((from + 1).to_string()),
                        version,
                    },
                ],
            }
        );
        let out = self.done(
            bump.0,
            bumped(Stat {
                mzxid: Zxid::from_u64(100 + from),
                ..Stat::default()
            }),
        );
        assert_eq!(
            out[0],
            granted(Grant {
                node: join_path(PARENT, me),
                session: owner,
                token: Some(FencingToken {
                    epoch: from + 1,
                    zxid: Zxid::from_u64(100 + from),
                }),
            })
        );
        assert_eq!(H::op(&out).1, watch_call(join_path(PARENT, me)));
    }
}

// ----- exact transitions --------------------------------------------------------------

#[test]
fn leader_only_after_ownership_proof_and_fencing() {
    let mut h = H::new(latch_cfg());
    let create = h.start(S1);
    let Call::Create {
        path,
        data,
        mode,
        ttl_ms,
        parents,
    } = &create.1
    else {
        panic!("{create:?}")
    };
    let name = path.strip_prefix("/election/").expect("under the parent");
    assert!(
        name.starts_with("_c_") && name.ends_with("latch-"),
        "{name}"
    );
    assert_eq!(data, &Bytes::from_static(b"me"));
    assert_eq!(*mode, CreateMode::EphemeralSequential);
    assert_eq!(*ttl_ms, None);
    assert_eq!(*parents, Some(CreateMode::Container));
    let (list, me) = h.created(create, 3);
    assert_eq!(list.1, list_call());
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
    assert!(is_candidate_create(&H::op(&h.step(reconnected(S1))).1));
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
    let watch = H::op(&h.done(list.0, Reply::Children(Ok(children))));
    assert_eq!(watch.1, watch_call("/election/_c_z-latch-0000000005"));
    let out = h.done(watch.0, watching(Stat::default()));
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
    let watch = H::op(&h.done(list.0, Reply::Children(Ok(vec![pred, me.clone()]))));
    h.done(watch.0, watching(Stat::default()));
    let list = H::op(&h.step(Input::Fired { id: watch.0 }));
    assert_eq!(list.1, list_call());
    h.prove_first(list, &me, S1, 0);
}

#[test]
fn predecessor_already_gone_relists() {
    let mut h = H::new(latch_cfg());
    let create = h.start(S1);
    let (list, me) = h.created(create, 1);
    let watch = H::op(&h.done(
        list.0,
        Reply::Children(Ok(vec!["_c_p-latch-0000000000".into(), me])),
    ));
    let out = h.done(
        watch.0,
        Reply::Data(Err(nonode("/election/_c_p-latch-0000000000"))),
    );
    assert_eq!(H::op(&out).1, list_call());
}

/// The predecessor of the candidate made by [`waiting_behind`].
const PRED: &str = "_c_p-latch-0000000000";

/// A candidate second in line, its watch on the predecessor armed; returns the
/// watch's id, the listing and what the arming answer asked for.
fn waiting_behind(h: &mut H) -> (OpId, Vec<String>, Vec<Output>) {
    let create = h.start(S1);
    let (list, me) = h.created(create, 1);
    let children = vec![PRED.to_owned(), me];
    let watch = H::op(&h.done(list.0, Reply::Children(Ok(children.clone()))));
    assert_eq!(watch.1, watch_call(join_path(PARENT, PRED)));
    let out = h.done(watch.0, watching(Stat::default()));
    (watch.0, children, out)
}

#[test]
fn self_check_drops_the_watch_it_replaces() {
    // One watch at a time: the periodic re-check re-lists and forgets the watch it no
    // longer waits on, so re-checks do not pile watches up in the client.
    let mut h = H::new(latch_cfg());
    let (watch, _, armed) = waiting_behind(&mut h);
    let out = h.step(Input::Timer {
        id: H::timer(&armed),
    });
    assert_eq!(out[0], Output::Unwatch { id: watch });
    assert_eq!(H::op(&out).1, list_call());
    assert_eq!(out.len(), 2);
}

#[test]
fn a_new_watch_replaces_one_left_from_before_a_suspension() {
    let mut h = H::new(latch_cfg());
    let (watch, children, _) = waiting_behind(&mut h);
    h.step(Input::Conn(ConnectionState::Suspended));
    let list = H::op(&h.step(reconnected(S1)));
    let out = h.done(list.0, Reply::Children(Ok(children)));
    assert_eq!(out[0], Output::Unwatch { id: watch });
    assert_eq!(H::op(&out).1, watch_call(join_path(PARENT, PRED)));
    // A watch answered after its call went stale is dropped at once.
    h.step(Input::Conn(ConnectionState::Suspended));
    let again = H::op(&out).0;
    assert_eq!(
        h.done(again, watching(Stat::default())),
        vec![Output::Unwatch { id: again }]
    );
}

#[test]
fn nonode_on_create_is_retried_never_ignored() {
    // The check-then-collect race: the parent is collected between its creation and
    // our create, over and over; every NONODE leads to another create.
    let mut h = H::new(latch_cfg());
    let mut create = h.start(S1);
    let first_name = create.1.clone();
    for _ in 0..5 {
        let out = h.done(create.0, Reply::Created(Err(nonode(PARENT))));
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
    let out = h.done(list.0, Reply::Children(Err(nonode(PARENT))));
    let again = H::op(&out);
    assert!(is_candidate_create(&again.1), "{out:?}");
    assert_ne!(
        create.1, again.1,
        "a fresh candidate gets a fresh protected prefix"
    );
}

#[test]
fn nonode_on_listing_while_leading_revokes_then_rejoins() {
    let mut h = H::new(latch_cfg());
    h.lead(S1, 0);
    let w = h.m.step_snapshot().expect("holding");
    let list = H::op(&h.step(Input::Fired { id: w }));
    let out = h.done(list.0, Reply::Children(Err(nonode(PARENT))));
    assert_eq!(out[0], revoked(Revoked::NotProven));
    assert!(is_candidate_create(&H::op(&out).1));
}

#[test]
fn lost_create_reply_is_found_by_prefix() {
    let mut h = H::new(latch_cfg());
    let create = h.start(S1);
    let Call::Create { path, .. } = create.1.clone() else {
        panic!()
    };
    let out = h.done(create.0, Reply::Created(Err(Error::ConnectionLoss)));
    let list = H::op(&h.step(Input::Timer { id: H::timer(&out) }));
    assert_eq!(list.1, list_call());
    // The create did happen: the listing adopts it instead of creating a duplicate.
    let me = format!("{}0000000004", name_of(&path));
    let read = H::op(&h.done(list.0, Reply::Children(Ok(vec![me.clone()]))));
    assert_eq!(read.1, read_call(join_path(PARENT, &me)));
}

#[test]
fn lost_create_reply_that_did_not_happen_creates_again() {
    let mut h = H::new(latch_cfg());
    let create = h.start(S1);
    let out = h.done(create.0, Reply::Created(Err(Error::ConnectionLoss)));
    let list = H::op(&h.step(Input::Timer { id: H::timer(&out) }));
    let again = H::op(&h.done(
        list.0,
        Reply::Children(Ok(vec!["_c_o-latch-0000000000".into()])),
    ));
    assert_eq!(again.1, create.1);
}

#[test]
fn suspended_revokes_and_reconnect_on_same_session_keeps_the_node() {
    let mut h = H::new(latch_cfg());
    let me = h.lead(S1, 4);
    let out = h.step(Input::Conn(ConnectionState::Suspended));
    assert_eq!(out, vec![revoked(Revoked::Suspended)]);
    let list = H::op(&h.step(reconnected(S1)));
    assert_eq!(list.1, list_call());
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
        h.done(list.0, Reply::Children(Ok(vec![me.clone()]))),
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
    assert_eq!(out, vec![revoked(Revoked::Lost)]);
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
    let out = h.done(list.0, Reply::Children(Ok(vec![old.clone(), me.clone()])));
    let watch = H::op(&out);
    assert_eq!(watch.1, watch_call(join_path(PARENT, &old)));
    assert_eq!(h.grants.len(), 1);
    // The server expires S1: its node goes, we lead on S2.
    h.done(watch.0, watching(stat_owned(S1)));
    let list = H::op(&h.step(Input::Fired { id: watch.0 }));
    h.prove_first(list, &me, S2, 1);
}

#[test]
fn first_node_owned_by_another_session_is_not_led() {
    let mut h = H::new(latch_cfg());
    let create = h.start(S1);
    let (list, me) = h.created(create, 0);
    let read = H::op(&h.done(list.0, Reply::Children(Ok(vec![me.clone()]))));
    let out = h.done(read.0, Reply::Data(Ok((Bytes::new(), stat_owned(FOREIGN)))));
    assert!(h.grants.is_empty());
    // The node is retired (deleted: it is ours from a dead session) and a fresh one made.
    assert!(is_candidate_create(&H::op(&out).1));
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
    assert!(is_candidate_create(&H::op(&out).1));
}

#[test]
fn expiry_while_fencing_never_grants_and_the_next_epoch_is_larger() {
    let mut h = H::new(latch_cfg());
    let create = h.start(S1);
    let (list, me) = h.created(create, 0);
    let read = H::op(&h.done(list.0, Reply::Children(Ok(vec![me.clone()]))));
    let epoch = H::op(&h.done(read.0, Reply::Data(Ok((Bytes::new(), stat_owned(S1))))));
    let bump = H::op(&h.done(
        epoch.0,
        Reply::Data(Ok((Bytes::from_static(b"7"), Stat::default()))),
    ));
    assert_eq!(h.step(Input::Conn(ConnectionState::Lost)), vec![]);
    // The bump was applied on the server before the session died: the late success
    // must not grant anything.
    assert_eq!(h.done(bump.0, bumped(Stat::default())), vec![]);
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
    let read = H::op(&h.done(list.0, Reply::Children(Ok(vec![me.clone()]))));
    let epoch = H::op(&h.done(read.0, Reply::Data(Ok((Bytes::new(), stat_owned(S1))))));
    let bump = H::op(&h.done(
        epoch.0,
        Reply::Data(Ok((Bytes::from_static(b"1"), Stat::default()))),
    ));
    let out = h.done(bump.0, bump_failed(BumpError::EpochMoved));
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
            Reply::Created(Err(Error::Server {
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
    let read = H::op(&h.done(list.0, Reply::Children(Ok(vec![me.clone()]))));
    let epoch = H::op(&h.done(read.0, Reply::Data(Ok((Bytes::new(), stat_owned(S1))))));
    let mk = H::op(&h.done(epoch.0, Reply::Data(Err(nonode(EPOCH)))));
    assert_eq!(mk.1, create_epoch_call());
    let epoch = H::op(&h.done(
        mk.0,
        Reply::Created(Err(Error::NodeExists { path: EPOCH.into() })),
    ));
    assert_eq!(epoch.1, read_call(EPOCH));
    let bump = H::op(&h.done(
        epoch.0,
        Reply::Data(Ok((Bytes::from_static(b"0"), Stat::default()))),
    ));
    let mk = H::op(&h.done(bump.0, bump_failed(BumpError::EpochMissing)));
    assert_eq!(mk.1, create_epoch_call());
}

#[test]
fn candidate_gone_during_fencing_makes_a_fresh_candidate() {
    let mut h = H::new(latch_cfg());
    let create = h.start(S1);
    let (list, me) = h.created(create, 0);
    let read = H::op(&h.done(list.0, Reply::Children(Ok(vec![me]))));
    let epoch = H::op(&h.done(read.0, Reply::Data(Ok((Bytes::new(), stat_owned(S1))))));
    let bump = H::op(&h.done(epoch.0, Reply::Data(Ok((Bytes::new(), Stat::default())))));
    let out = h.done(bump.0, bump_failed(BumpError::CandidateGone));
    assert!(is_candidate_create(&H::op(&out).1));
}

#[test]
fn garbage_in_the_epoch_node_backs_off_without_panicking() {
    let mut h = H::new(latch_cfg());
    let create = h.start(S1);
    let (list, me) = h.created(create, 0);
    let read = H::op(&h.done(list.0, Reply::Children(Ok(vec![me]))));
    let epoch = H::op(&h.done(read.0, Reply::Data(Ok((Bytes::new(), stat_owned(S1))))));
    let out = h.done(
        epoch.0,
        Reply::Data(Ok((Bytes::from_static(b"\xff-x"), Stat::default()))),
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
    let list = H::op(&h.step(Input::Fired { id: w }));
    let out = h.done(
        list.0,
        Reply::Children(Ok(vec!["_c_other-latch-0000000009".into()])),
    );
    assert_eq!(out[0], revoked(Revoked::NotProven));
    assert!(is_candidate_create(&H::op(&out).1));
}

#[test]
fn own_node_watch_finding_it_gone_revokes() {
    let mut h = H::new(latch_cfg());
    let create = h.start(S1);
    let (list, me) = h.created(create, 0);
    let read = H::op(&h.done(list.0, Reply::Children(Ok(vec![me.clone()]))));
    let epoch = H::op(&h.done(read.0, Reply::Data(Ok((Bytes::new(), stat_owned(S1))))));
    let bump = H::op(&h.done(epoch.0, Reply::Data(Ok((Bytes::new(), Stat::default())))));
    let out = h.done(bump.0, bumped(Stat::default()));
    let watch = H::op(&out);
    let out = h.done(watch.0, Reply::Data(Err(nonode(&join_path(PARENT, &me)))));
    assert_eq!(out[0], revoked(Revoked::NotProven));
    assert!(is_candidate_create(&H::op(&out).1));
}

#[test]
fn leader_relisting_keeps_its_grant_and_token() {
    let mut h = H::new(latch_cfg());
    let me = h.lead(S1, 0);
    let watch_id = h.m.step_snapshot().expect("holding");
    let list = H::op(&h.step(Input::Fired { id: watch_id }));
    let read = H::op(&h.done(list.0, Reply::Children(Ok(vec![me.clone()]))));
    let out = h.done(read.0, Reply::Data(Ok((Bytes::new(), stat_owned(S1)))));
    // Proven again: no revoke, no new fencing, the watch is re-armed.
    assert_eq!(H::op(&out).1, watch_call(join_path(PARENT, &me)));
    assert_eq!(h.grants.len(), 1);
    assert!(h.granted);
}

#[test]
fn read_only_is_not_leadership() {
    let mut h = H::new(latch_cfg());
    h.lead(S1, 0);
    let out = h.step(Input::Conn(ConnectionState::ReadOnly { session: S1 }));
    assert_eq!(out, vec![revoked(Revoked::Suspended)]);
}

#[test]
fn stale_create_success_is_deleted() {
    let mut h = H::new(latch_cfg());
    let create = h.start(S1);
    h.step(Input::Conn(ConnectionState::Lost));
    let path = "/election/_c_old-latch-0000000000".to_owned();
    let out = h.done(create.0, created(path.clone()));
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
            revoked(Revoked::Closed),
            Output::BackgroundDelete {
                path: join_path(PARENT, &me)
            },
            Output::Emit(RecipeEvent::Ended),
            Output::Ended,
        ]
    );
    // After close: nothing but cleanup.
    assert_eq!(h.step(reconnected(S1)), vec![]);
    assert_eq!(h.step(Input::Close), vec![]);
    assert_eq!(h.step(Input::Start), vec![]);
    let late = h.done(OpId(1), created("/election/x"));
    assert_eq!(H::deletes(&late), vec!["/election/x".to_owned()]);
}

#[test]
fn close_with_a_create_in_flight_deletes_its_node_when_it_lands() {
    let mut h = H::new(latch_cfg());
    let create = h.start(S1);
    assert_eq!(
        h.step(Input::Close),
        vec![Output::Emit(RecipeEvent::Ended), Output::Ended]
    );
    let out = h.done(create.0, created("/election/_c_a-latch-0000000000"));
    assert_eq!(H::deletes(&out).len(), 1);
}

// ----- lock mode and the selector's release ----------------------------------------------

fn grant_lock(h: &mut H, session: SessionId) -> String {
    let create = h.start(session);
    let Call::Create { path, .. } = &create.1 else {
        panic!()
    };
    let me = format!("{}0000000000", name_of(path));
    let list = H::op(&h.done(create.0, created(format!("/lock/{me}"))));
    let read = H::op(&h.done(list.0, Reply::Children(Ok(vec![me.clone()]))));
    let out = h.done(read.0, Reply::Data(Ok((Bytes::new(), stat_owned(session)))));
    assert_eq!(
        out[0],
        granted(Grant {
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
    let out = h.step(release(false));
    assert_eq!(out[0], revoked(Revoked::Released));
    assert_eq!(H::deletes(&out), vec![format!("/lock/{me}")]);
    assert_eq!(out.last(), Some(&Output::Ended));
    assert!(h.m.is_ended());
}

#[test]
fn lock_lost_with_its_session_ends() {
    let mut h = H::new(lock_cfg());
    grant_lock(&mut h, S1);
    let out = h.step(Input::Conn(ConnectionState::Lost));
    assert_eq!(
        out,
        vec![
            revoked(Revoked::Lost),
            Output::Emit(RecipeEvent::Ended),
            Output::Ended
        ]
    );
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
    assert!(is_candidate_create(&H::op(&out).1));
    let _ = create;
}

#[test]
fn selector_release_with_rejoin_queues_a_fresh_candidate() {
    let mut h = H::new(latch_cfg());
    let me = h.lead(S1, 0);
    let out = h.step(release(true));
    assert_eq!(out[0], revoked(Revoked::Released));
    assert_eq!(H::deletes(&out), vec![join_path(PARENT, &me)]);
    assert!(is_candidate_create(&H::op(&out).1));
}

// ----- every input in every step ---------------------------------------------------------

/// A scripted server: answers the machine's calls from a tiny znode model, so a run can
/// be carried to the end after any perturbation.
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
    fn answer(&mut self, session: SessionId, call: &Call) -> Reply {
        match call {
            Call::Create { path, .. } if path == EPOCH => {
                if self.epoch.is_some() {
                    Reply::Created(Err(Error::NodeExists { path: EPOCH.into() }))
                } else {
                    self.epoch = Some((0, 0));
                    created(EPOCH)
                }
            }
            Call::Create { path, .. } => {
                self.parent_exists = true;
                let child = format!("{}{:010}", name_of(path), self.seq);
                self.seq += 1;
                self.children.insert(child.clone(), session);
                created(join_path(PARENT, &child))
            }
            Call::Children { .. } => {
                if self.parent_exists {
                    Reply::Children(Ok(self.children.keys().cloned().collect()))
                } else {
                    Reply::Children(Err(nonode(PARENT)))
                }
            }
            Call::GetData { path, .. } if path == EPOCH => match self.epoch {
                Some((v, ver)) => Reply::Data(Ok((
                    Bytes::from(v.to_string()),
                    Stat {
                        version: ver,
                        ..Stat::default()
                    },
                ))),
                None => Reply::Data(Err(nonode(EPOCH))),
            },
            Call::GetData { path, .. } => match self.children.get(name_of(path)) {
                Some(owner) => Reply::Data(Ok((Bytes::new(), stat_owned(*owner)))),
                None => Reply::Data(Err(nonode(path))),
            },
            Call::Multi { ops } => self.bump(ops),
            other => panic!("the candidacy does not make {other:?}"),
        }
    }

    fn bump(&mut self, ops: &[MultiOp]) -> Reply {
        let [MultiOp::Check {
            path: candidate, ..
        }, MultiOp::SetData { data, version, .. }] = ops
        else {
            panic!("not a fencing multi: {ops:?}")
        };
        if !self.children.contains_key(name_of(candidate)) {
            return bump_failed(BumpError::CandidateGone);
        }
        let value: u64 = std::str::from_utf8(data)
            .expect("utf-8")
            .parse()
            .expect("a number");
        match self.epoch {
            None => bump_failed(BumpError::EpochMissing),
            Some((_, ver)) if ver != *version => bump_failed(BumpError::EpochMoved),
            Some((_, ver)) => {
                self.epoch = Some((value, ver + 1));
                bumped(Stat {
                    mzxid: Zxid::from_u64(value),
                    ..Stat::default()
                })
            }
        }
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

/// Carry out one output of the machine against the model; returns what followed.
fn carry_out(h: &mut H, model: &mut Model, session: SessionId, next: Output) -> Vec<Output> {
    match next {
        Output::Call { id, call } => {
            let reply = model.answer(session, &call);
            h.done(id, reply)
        }
        Output::Timer { id, .. } => h.step(Input::Timer { id }),
        Output::BackgroundDelete { path } => {
            model.children.remove(name_of(&path));
            Vec::new()
        }
        Output::Emit(_) | Output::Unwatch { .. } | Output::Ended => Vec::new(),
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
        let out = carry_out(h, model, session, next);
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
                let out = carry_out(&mut h, &mut model, session, next);
                pending.extend(out);
            }
            let ctx = format!("k={k} poke={poke:?}");
            match poke {
                Poke::Suspend => {
                    pending.extend(h.step(Input::Conn(ConnectionState::Suspended)));
                    pending.retain(|o| matches!(o, Output::BackgroundDelete { .. }));
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
                    pending.extend(h.done(OpId(0), Reply::Children(Ok(vec![]))));
                    pending.extend(h.done(OpId(0), bumped(Stat::default())));
                }
                Poke::StaleWatch => pending.extend(h.step(Input::Fired { id: OpId(0) })),
                Poke::StaleTimer => pending.extend(h.step(Input::Timer { id: OpId(0) })),
                Poke::ParentGc => {
                    // Everything vanished under us while connected (ensemble wiped).
                    model.children.clear();
                    model.parent_exists = false;
                    if h.granted {
                        // The own-node watch fires.
                        let w = h.m.step_snapshot().expect("holding");
                        pending.extend(h.step(Input::Fired { id: w }));
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
        let Call::Create { path, .. } = create.1.clone() else {
            panic!("{create:?}")
        };
        names.push(format!("{}{i:010}", name_of(&path)));
        h.step(Input::Conn(ConnectionState::Lost));
        create = H::op(&h.step(reconnected(SessionId(0x2000 + i as i64))));
    }
    let (list, me) = h.created(create, 999);
    let mut children = names.clone();
    children.push(me);
    let out = h.done(list.0, Reply::Children(Ok(children)));
    let deleted = H::deletes(&out);
    assert_eq!(deleted.len(), STALE_PREFIXES_MAX);
    let expected: Vec<String> = names[4..].iter().map(|n| join_path(PARENT, n)).collect();
    assert_eq!(deleted, expected);
}

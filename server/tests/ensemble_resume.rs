//! A client that resumes its session on another member right after the
//! session was created or closed through a first member. The member it moves
//! to may not have applied that create or close yet (a member answers its own
//! client once *it* has applied; the others apply a moment later), so its
//! session table alone cannot decide: ZooKeeper's learners ask the leader
//! (REVALIDATE). rzk decides after an I6b sync barrier. Without it the moved
//! client was told "expired" for a live session, or was let into a closed one
//! (found by the interop suite on a 3-member ensemble:
//! `test_expired_session_cannot_be_resumed`).
mod support;

use rzk_wire::client::Incoming;
use rzk_wire::Request;
use support::server::Ensemble;
use support::{run_trapped, Raw};

/// How many create → move → close → move rounds: each round is a chance for
/// the member the client moves to to lag; without the barrier a few rounds
/// are enough to see one (checked by hand: the test failed within its first
/// rounds with the barrier removed).
const ROUNDS: usize = 30;

#[test]
fn a_resume_on_another_member_is_judged_by_the_ensemble_not_its_lagging_table() {
    run_trapped(async {
        let dir = tempfile::tempdir().unwrap();
        let mut e = Ensemble::start(dir.path(), 3, &[]).await;
        e.wait_settled().await;
        for round in 0..ROUNDS {
            let (a, b, c) = (
                e.members[round % 3].client,
                e.members[(round + 1) % 3].client,
                e.members[(round + 2) % 3].client,
            );
            // A new session through member a: acknowledged once a applied it.
            let (first, created) = Raw::connect(a, 6000).await;
            assert!(created.timeout_ms > 0, "round {round}: session refused");
            // At once to member b, with its id and password: the session is live
            // in the ensemble, so b must take it, whether or not b applied it yet.
            let mut req = Raw::new_session(6000);
            req.session_id = created.session_id;
            req.passwd = created.passwd.clone();
            let mut moved = Raw::open(b, req.clone()).await;
            match moved.recv().await {
                Some(Incoming::Connect(ok)) => {
                    assert_eq!(
                        (ok.session_id, ok.timeout_ms > 0),
                        (created.session_id, true),
                        "round {round}: a live session was refused on the member it moved to"
                    );
                }
                other => panic!("round {round}: no ConnectResponse on member b: {other:?}"),
            }
            drop(first);
            // Closed through b: acknowledged once b applied the close.
            let r = moved.call(Request::CloseSession).await;
            assert!(r.result.is_ok(), "round {round}: {r:?}");
            // At once to member c: the session is gone from the ensemble, so c
            // must refuse it (timeOut 0), whether or not c applied the close yet.
            let mut late = Raw::open(c, req).await;
            match late.recv().await {
                Some(Incoming::Connect(refused)) => assert_eq!(
                    (refused.timeout_ms, refused.session_id.0),
                    (0, 0),
                    "round {round}: a closed session was resumed on a member that lagged"
                ),
                // A member that cannot vouch for the session may also close the
                // connection; the client then tries elsewhere. Not the case here:
                // every member has a leader.
                other => panic!("round {round}: no ConnectResponse on member c: {other:?}"),
            }
        }
        e.stop_all().await;
    })
}

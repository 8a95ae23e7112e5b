//! SESSIONMOVED closes the connection that provoked it (ZOOKEEPER-710), so that
//! a live client whose session the leader believes to be elsewhere reconnects
//! and takes its session back, instead of failing every write on an open
//! connection.
//!
//! Found by rzk-chaos (`--schedule partition,partition-leader --seed 1`, 90 s):
//! a client resumed its session on a follower whose link to the leader was cut,
//! gave up on it after 3 s and resumed on the leader; when the partition
//! healed, the follower's Attach reached the leader last, and every write the
//! client made through the leader failed with SESSIONMOVED for 30 s, until a
//! later fault happened to move it (2,496 writes and 877 creates refused in
//! that run). ZooKeeper tears the connection down on SESSIONMOVED for exactly
//! this race.
mod support;

use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use rzk_wire::client::Incoming;
use rzk_wire::Request;
use support::server::Ensemble;
use support::{create_req, run_trapped, Raw};

fn set_data(path: &str, data: &'static [u8]) -> Request {
    Request::SetData(rzk_wire::SetDataRequest {
        path: path.into(),
        data: Some(Bytes::from_static(data)),
        version: -1,
    })
}

/// Resumes `session` on `addr` and waits for the answer.
async fn resume(addr: std::net::SocketAddr, session: &rzk_wire::ConnectResponse) -> Raw {
    let mut req = Raw::new_session(6000);
    req.session_id = session.session_id;
    req.passwd = session.passwd.clone();
    let mut raw = Raw::open(addr, req).await;
    match raw.recv().await {
        Some(Incoming::Connect(ok)) => assert_eq!(ok.session_id, session.session_id),
        other => panic!("expected the session resumed on {addr}, got {other:?}"),
    }
    raw
}

#[test]
fn a_write_through_a_member_that_no_longer_owns_the_session_closes_its_connection() {
    run_trapped(async {
        let dir = tempfile::tempdir().unwrap();
        let mut e = Ensemble::start(dir.path(), 3, &[]).await;
        e.wait_settled().await;
        let (a, b) = (e.members[0].client, e.members[1].client);

        // The session starts on member 1 (connection `stale`).
        let (mut stale, session) = Raw::connect(a, 6000).await;
        let r = stale.call(create_req("/r", b"0", 0)).await;
        assert!(r.result.is_ok(), "{r:?}");

        // It is resumed on member 2 while the connection to member 1 stays open.
        // A write through member 2 that succeeds shows that member 2's Attach has
        // reached the leader (a member forwards in order), so the leader now
        // holds member 2 as the owner.
        let mut current = resume(b, &session).await;
        let r = current.call(set_data("/r", b"1")).await;
        assert!(r.result.is_ok(), "a write through the owner: {r:?}");

        // A write through member 1's connection: the leader refuses it
        // (SESSIONMOVED) and member 1 closes that connection without an answer,
        // as ZooKeeper does; before the fix it answered the error and kept the
        // connection, so a client there would fail write after write.
        stale.send(set_data("/r", b"stale")).await;
        match tokio::time::timeout(Duration::from_secs(10), stale.framed.next()).await {
            Ok(None) | Ok(Some(Err(_))) => {}
            Ok(Some(Ok(frame))) => panic!("expected the connection closed, got {frame:?}"),
            Err(_) => panic!("neither an answer nor a close within 10 s"),
        }

        // The client of the closed connection reconnects to member 1 and takes
        // its session back: its writes succeed again, and the refused write was
        // not applied.
        let mut back = resume(a, &session).await;
        let r = back.call(set_data("/r", b"2")).await;
        assert!(r.result.is_ok(), "after reconnecting: {r:?}");
        let r = back
            .call(Request::GetData(rzk_wire::GetDataRequest {
                path: "/r".into(),
                watch: false,
            }))
            .await;
        match r.result {
            Ok(rzk_wire::Response::GetData(d)) => {
                assert_eq!(d.data.as_deref(), Some(&b"2"[..]));
                assert_eq!(d.stat.version, 2, "the stale write was not applied");
            }
            other => panic!("getData: {other:?}"),
        }
        drop((stale, current, back));
        e.stop_all().await;
    })
}

//! Unit tests of the persistent-node machine: exact transitions, then every
//! disturbance at every step against the fake server.

use bytes::Bytes;

use super::*;
use crate::recipe::engine::Call;
use crate::recipe::fake::FakeServer;
use crate::recipe::harness::Harness;

const PATH: &str = "/svc/api/host-1";

fn h(cfg: NodeConfig) -> Harness<NodeMachine> {
    let server = FakeServer::default();
    let mut h = Harness::new(NodeMachine::new(cfg), server);
    h.check = Some(Box::new(|m: &NodeMachine, _| {
        assert!(
            m.is_progressing(),
            "idle while started and connected: {m:?}"
        );
    }));
    h
}

fn cfg(kind: NodeKind) -> NodeConfig {
    let mut c = match kind {
        NodeKind::Ephemeral => NodeConfig::ephemeral(PATH, "v1"),
        NodeKind::ProtectedSequential => {
            NodeConfig::protected_sequential("/svc/api", "member-", "v1")
        }
        NodeKind::Ttl { ttl_ms } => NodeConfig::ttl(PATH, "v1", ttl_ms),
    };
    c.nonce = 0x5eed;
    c
}

/// The nodes that hold our data under the parent, with their owners.
fn ours(h: &Harness<NodeMachine>, data: &[u8]) -> Vec<(String, SessionId)> {
    h.server.with(|t| {
        t.subtree("/svc/api")
            .into_iter()
            .filter(|(p, (d, _))| p != "/svc/api" && d.as_ref() == data)
            .map(|(p, (_, s))| (p, s.ephemeral_owner))
            .collect()
    })
}

fn last_present(h: &Harness<NodeMachine>) -> Option<(String, SessionId)> {
    match h.events.last() {
        Some(NodeEvent::Present { path, session }) => Some((path.clone(), *session)),
        _ => None,
    }
}

#[test]
fn ephemeral_is_created_with_container_parents_and_reported_present() {
    let mut h = h(cfg(NodeKind::Ephemeral));
    h.start();
    match h.pending.front() {
        Some(Output::Call {
            call:
                Call::Create {
                    path,
                    mode,
                    parents,
                    ..
                },
            ..
        }) => {
            assert_eq!(path, PATH);
            assert_eq!(*mode, CreateMode::Ephemeral);
            assert_eq!(*parents, Some(CreateMode::Container));
        }
        other => panic!("expected the create first, got {other:?}"),
    }
    h.run(2);
    assert_eq!(
        h.events,
        vec![NodeEvent::Present {
            path: PATH.into(),
            session: h.session
        }]
    );
    assert!(h.m.is_present());
    assert_eq!(ours(&h, b"v1"), vec![(PATH.to_owned(), h.session)]);
}

#[test]
fn suspension_reports_absent_and_the_same_session_keeps_the_same_node() {
    let mut h = h(cfg(NodeKind::Ephemeral));
    h.start();
    h.run(2);
    let czxid = h.server.with(|t| t.stat(PATH).expect("node").czxid);
    h.suspend();
    assert_eq!(
        h.events.last(),
        Some(&NodeEvent::Absent(Absence::Suspended))
    );
    h.drop_pending();
    h.reconnect_same();
    assert!(h.run_until(10, |h| h.m.is_present()));
    assert_eq!(
        h.server.with(|t| t.stat(PATH).expect("node").czxid),
        czxid,
        "not re-created"
    );
    assert_eq!(h.events.len(), 3);
}

#[test]
fn lost_with_the_session_expired_recreates_on_the_new_session() {
    let mut h = h(cfg(NodeKind::Ephemeral));
    h.start();
    h.run(2);
    let s2 = h.lose(true);
    assert_eq!(h.events[1], NodeEvent::Absent(Absence::Lost));
    assert!(h.run_until(10, |h| h.m.is_present()));
    assert_eq!(last_present(&h), Some((PATH.into(), s2)));
    assert_eq!(ours(&h, b"v1"), vec![(PATH.to_owned(), s2)]);
}

#[test]
fn client_side_lost_replaces_the_old_sessions_node_instead_of_adopting_it() {
    // CURATOR-696's lesson for registrations: after a client-side LOST the server still
    // holds the old session and its ephemeral. Adopting it would report a node that
    // vanishes when the server expires that session.
    let mut h = h(cfg(NodeKind::Ephemeral));
    h.start();
    h.run(2);
    let s1 = h.session;
    let s2 = h.lose(false);
    assert!(h.server.with(|t| t.is_live(s1)), "old session still alive");
    assert!(h.run_until(20, |h| h.m.is_present()));
    assert_eq!(
        ours(&h, b"v1"),
        vec![(PATH.to_owned(), s2)],
        "owned by the new session"
    );
    // When the server finally expires the old session, nothing happens to ours.
    h.server.with(|t| t.end_session(s1));
    h.run(5);
    assert!(h.m.is_present());
    assert_eq!(ours(&h, b"v1"), vec![(PATH.to_owned(), s2)]);
}

#[test]
fn a_path_held_by_another_live_session_is_watched_until_it_goes() {
    let mut h = h(cfg(NodeKind::Ephemeral));
    let other = h.server.new_session();
    h.server.with(|t| {
        t.put("/svc", b"").expect("svc");
        t.put("/svc/api", b"").expect("api");
        super::super::fake::fake_call(
            t,
            other,
            Call::Create {
                path: PATH.into(),
                data: Bytes::from_static(b"theirs"),
                mode: CreateMode::Ephemeral,
                ttl_ms: None,
                parents: None,
            },
        );
    });
    h.start();
    h.run(6);
    assert!(!h.m.is_present());
    assert!(h
        .events
        .contains(&NodeEvent::Absent(Absence::Taken { owner: other })));
    h.server.with(|t| t.end_session(other));
    assert!(h.run_until(10, |h| h.m.is_present()));
    assert_eq!(ours(&h, b"v1"), vec![(PATH.to_owned(), h.session)]);
}

#[test]
fn an_external_delete_is_repaired_at_once() {
    let mut h = h(cfg(NodeKind::Ephemeral));
    h.start();
    h.run(2);
    h.server.with(|t| t.delete(PATH)).expect("delete");
    assert!(h.run_until(5, |h| h
        .events
        .contains(&NodeEvent::Absent(Absence::Deleted))));
    assert!(h.run_until(5, |h| h.m.is_present()));
    assert_eq!(ours(&h, b"v1").len(), 1);
}

#[test]
fn protected_sequential_finds_a_create_whose_reply_was_lost() {
    let mut h = h(cfg(NodeKind::ProtectedSequential));
    h.lose_reply_if = Some(Box::new(|c| matches!(c, Call::Create { .. })));
    h.start();
    assert!(h.run_until(10, |h| h.m.is_present()));
    let nodes = ours(&h, b"v1");
    assert_eq!(nodes.len(), 1, "no duplicate: {nodes:?}");
    assert!(nodes[0].0.contains("_c_") && nodes[0].0.ends_with("0000000000"));
}

#[test]
fn protected_sequential_after_lost_gets_a_new_name_and_deletes_the_old_node() {
    let mut h = h(cfg(NodeKind::ProtectedSequential));
    h.start();
    assert!(h.run_until(10, |h| h.m.is_present()));
    let (first, _) = last_present(&h).expect("present");
    let s2 = h.lose(false);
    assert!(h.run_until(20, |h| h.m.is_present()));
    let (second, owner) = last_present(&h).expect("present");
    assert_ne!(first, second);
    assert_eq!(owner, s2);
    assert_eq!(
        ours(&h, b"v1"),
        vec![(second, s2)],
        "the old node was deleted"
    );
}

#[test]
fn ttl_node_is_touched_while_connected_and_survives_a_session_loss() {
    let mut h = h(cfg(NodeKind::Ttl { ttl_ms: 3_000 }));
    h.start();
    assert!(h.run_until(10, |h| h.m.is_present()));
    let v0 = h.server.with(|t| t.stat(PATH).expect("node").version);
    // The touch timer (ttl / 3) fires: a setData.
    assert!(
        h.run_until(10, |h| h.server.with(|t| t.stat(PATH).map(|s| s.version))
            > Some(v0))
    );
    let czxid = h.server.with(|t| t.stat(PATH).expect("node").czxid);
    h.lose(true);
    assert!(h.run_until(10, |h| h.m.is_present()));
    assert_eq!(
        h.server.with(|t| t.stat(PATH).expect("node").czxid),
        czxid,
        "a TTL node outlives the session: read back, not re-created"
    );
}

#[test]
fn set_data_applies_now_and_to_every_recreation() {
    let mut h = h(cfg(NodeKind::Ephemeral));
    h.start();
    h.run(2);
    h.feed(Input::Command(NodeCommand::SetData(Bytes::from_static(
        b"v2",
    ))));
    h.run(3);
    assert_eq!(
        h.server.with(|t| t.data(PATH)),
        Some(Bytes::from_static(b"v2"))
    );
    h.lose(true);
    assert!(h.run_until(10, |h| h.m.is_present()));
    assert_eq!(
        h.server.with(|t| t.data(PATH)),
        Some(Bytes::from_static(b"v2"))
    );
}

#[test]
fn data_set_while_suspended_is_written_on_reconnect() {
    let mut h = h(cfg(NodeKind::Ephemeral));
    h.start();
    h.run(2);
    h.suspend();
    h.feed(Input::Command(NodeCommand::SetData(Bytes::from_static(
        b"v3",
    ))));
    h.drop_pending();
    h.reconnect_same();
    h.run(6);
    assert_eq!(
        h.server.with(|t| t.data(PATH)),
        Some(Bytes::from_static(b"v3"))
    );
}

#[test]
fn close_deletes_the_node_and_reports_it() {
    let mut h = h(cfg(NodeKind::Ephemeral));
    h.start();
    h.run(2);
    h.feed(Input::Close);
    assert_eq!(h.events.last(), Some(&NodeEvent::Absent(Absence::Closed)));
    assert!(!h.ended, "ends once the delete is answered");
    h.run(3);
    assert!(h.ended);
    assert!(!h.server.with(|t| t.exists(PATH)));
}

/// How the connection behaves right after a close.
#[derive(Debug, Clone, Copy)]
enum AfterClose {
    Connected,
    /// Suspended at the close, back on the same session later.
    SuspendedThenBack,
    /// Suspended at the close, then the session is lost (and expired on the server).
    SuspendedThenLost,
    /// The close comes while a create is in flight and its reply is lost.
    LostReply,
}

#[test]
fn close_at_every_step_leaves_nothing_of_ours_and_ends() {
    // docs/recipes.md, "The lifecycle", rule 16, and CURATOR-18: a create answered
    // after close is deleted; a close while suspended deletes once reconnected.
    // Checked to fail: with the old close (delete the known node, end at once, later
    // answers dropped), a create that landed before a suspension stayed on the server
    // after close (first failure: Ephemeral k=0 SuspendedThenBack).
    for kind in [
        NodeKind::Ephemeral,
        NodeKind::ProtectedSequential,
        NodeKind::Ttl { ttl_ms: 3_000 },
    ] {
        for k in 0..8 {
            for after in [
                AfterClose::Connected,
                AfterClose::SuspendedThenBack,
                AfterClose::SuspendedThenLost,
                AfterClose::LostReply,
            ] {
                let ctx = format!("{kind:?} k={k} {after:?}");
                let mut h = h(cfg(kind));
                h.start();
                h.run(k);
                // Calls already issued are answered by the server as it is now; the
                // close comes before their answers.
                match after {
                    AfterClose::Connected => h.feed(Input::Close),
                    AfterClose::LostReply => {
                        h.lose_reply_if = Some(Box::new(|c| matches!(c, Call::Create { .. })));
                        h.feed(Input::Close);
                    }
                    AfterClose::SuspendedThenBack | AfterClose::SuspendedThenLost => {
                        // The pending calls reach the server; their answers are lost.
                        let calls = h.pending.len();
                        h.lose_reply_if = None;
                        for _ in 0..calls {
                            if let Some(Output::Call { call, .. }) = h.pending.front().cloned() {
                                let s = h.session;
                                h.server.with(|t| super::super::fake::fake_call(t, s, call));
                            }
                            h.pending.pop_front();
                        }
                        h.suspend();
                        h.feed(Input::Close);
                        h.drop_pending();
                        if matches!(after, AfterClose::SuspendedThenBack) {
                            h.reconnect_same();
                        } else {
                            h.lose(true);
                        }
                    }
                }
                assert!(
                    h.run_until(60, |h| h.ended),
                    "{ctx}: never ended: {:?}",
                    h.m
                );
                assert!(
                    !h.events
                        .iter()
                        .skip_while(|e| **e != NodeEvent::Absent(Absence::Closed))
                        .any(|e| matches!(e, NodeEvent::Present { .. })),
                    "{ctx}: present after close: {:?}",
                    h.events
                );
                let left = ours(&h, b"v1");
                let live: Vec<_> = left
                    .iter()
                    .filter(|(_, owner)| {
                        *owner == SessionId::NONE || h.server.with(|t| t.is_live(*owner))
                    })
                    .collect();
                assert!(live.is_empty(), "{ctx}: left behind: {live:?}");
            }
        }
    }
}

#[derive(Debug, Clone, Copy)]
enum Poke {
    Suspend,
    ReconnectSame,
    Lose,
    LocalLose,
    ReadOnly,
    StaleDone,
    StaleFired,
    StaleTimer,
    ExternalDelete,
    ParentWiped,
    LostReply,
}

const POKES: [Poke; 11] = [
    Poke::Suspend,
    Poke::ReconnectSame,
    Poke::Lose,
    Poke::LocalLose,
    Poke::ReadOnly,
    Poke::StaleDone,
    Poke::StaleFired,
    Poke::StaleTimer,
    Poke::ExternalDelete,
    Poke::ParentWiped,
    Poke::LostReply,
];

#[test]
fn every_disturbance_at_every_step_ends_present_on_the_live_session() {
    for kind in [
        NodeKind::Ephemeral,
        NodeKind::ProtectedSequential,
        NodeKind::Ttl { ttl_ms: 3_000 },
    ] {
        for k in 0..8 {
            for poke in POKES {
                let ctx = format!("{kind:?} k={k} poke={poke:?}");
                let mut h = h(cfg(kind));
                h.start();
                h.run(k);
                match poke {
                    Poke::Suspend => {
                        h.suspend();
                        h.drop_pending();
                        h.reconnect_same();
                    }
                    Poke::ReconnectSame => {
                        h.drop_pending();
                        h.reconnect_same();
                    }
                    Poke::ReadOnly => {
                        h.conn = None;
                        h.feed(Input::Conn(ConnectionState::ReadOnly {
                            session: h.session,
                        }));
                        h.drop_pending();
                        h.reconnect_same();
                    }
                    Poke::Lose => {
                        h.drop_pending();
                        h.lose(true);
                    }
                    Poke::LocalLose => {
                        h.drop_pending();
                        h.lose(false);
                    }
                    Poke::StaleDone => {
                        h.feed(Input::Done {
                            id: OpId(0),
                            reply: Reply::Created(Ok(("/svc/api/x".into(), Default::default()))),
                        });
                        h.feed(Input::Done {
                            id: OpId(0),
                            reply: Reply::Data(Err(Error::NoNode { path: PATH.into() })),
                        });
                    }
                    Poke::StaleFired => h.feed(Input::Fired { id: OpId(0) }),
                    Poke::StaleTimer => h.feed(Input::Timer { id: OpId(0) }),
                    Poke::ExternalDelete => {
                        let nodes: Vec<String> = ours(&h, b"v1").into_iter().map(|n| n.0).collect();
                        for n in nodes {
                            let _ = h.server.with(|t| t.delete(&n));
                        }
                    }
                    Poke::ParentWiped => {
                        let nodes: Vec<String> = ours(&h, b"v1").into_iter().map(|n| n.0).collect();
                        for n in nodes {
                            let _ = h.server.with(|t| t.delete(&n));
                        }
                        let _ = h.server.with(|t| t.delete("/svc/api"));
                        let _ = h.server.with(|t| t.delete("/svc"));
                    }
                    Poke::LostReply => {
                        h.lose_reply_if = Some(Box::new(|_| true));
                    }
                }
                // The old session (if any) expires on the server eventually.
                let live = h.session;
                let stale: Vec<SessionId> = h.server.with(|t| {
                    t.subtree("/svc")
                        .values()
                        .map(|(_, s)| s.ephemeral_owner)
                        .filter(|o| *o != SessionId::NONE && *o != live)
                        .collect()
                });
                assert!(
                    h.run_until(60, |h| h.m.is_present()),
                    "{ctx}: never present; {:?}",
                    h.m
                );
                for s in stale {
                    h.server.with(|t| t.end_session(s));
                }
                h.run(20);
                assert!(
                    h.m.is_present(),
                    "{ctx}: not present after the old session ended"
                );
                let nodes = ours(&h, b"v1");
                assert_eq!(nodes.len(), 1, "{ctx}: exactly one node: {nodes:?}");
                let (path, session) = last_present(&h)
                    .unwrap_or_else(|| panic!("{ctx}: last event {:?}", h.events.last()));
                assert_eq!(nodes[0].0, path, "{ctx}");
                assert_eq!(session, h.session, "{ctx}: proven on the live session");
                if !matches!(kind, NodeKind::Ttl { .. }) {
                    assert_eq!(nodes[0].1, h.session, "{ctx}: owned by the live session");
                }
                // Present and Absent alternate.
                let mut present = false;
                for e in &h.events {
                    match e {
                        NodeEvent::Present { .. } => {
                            assert!(!present, "{ctx}: Present twice in a row: {:?}", h.events);
                            present = true;
                        }
                        NodeEvent::Absent(Absence::Taken { .. }) => {}
                        NodeEvent::Absent(_) => {
                            assert!(present, "{ctx}: Absent without Present: {:?}", h.events);
                            present = false;
                        }
                    }
                }
            }
        }
    }
}

#[tokio::test(start_paused = true)]
async fn the_driver_runs_the_node_over_a_client_and_close_deletes_it() {
    let _trap = rzk_testkit::PanicTrap::new();
    let server = FakeServer::default();
    let client = server.client();
    client.publish(&[ConnectionState::Connected {
        session: client.last_session(),
    }]);
    let mut node = PersistentNode::start(client.clone(), cfg(NodeKind::Ephemeral));
    assert_eq!(node.wait_present().await.expect("present"), PATH);
    client.suspend();
    assert_eq!(
        node.next_event().await,
        Some(NodeEvent::Present {
            path: PATH.into(),
            session: client.session_before_suspend()
        })
    );
    assert_eq!(
        node.next_event().await,
        Some(NodeEvent::Absent(Absence::Suspended))
    );
    assert_eq!(node.path(), None);
    let s = client.last_session();
    client.resume(s);
    assert_eq!(node.wait_present().await.expect("present"), PATH);
    node.set_data("v9");
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(5);
    while server.with(|t| t.data(PATH)) != Some(Bytes::from_static(b"v9")) {
        assert!(tokio::time::Instant::now() < deadline, "data not written");
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    node.close().await;
    assert!(!server.with(|t| t.exists(PATH)), "close deleted the node");
}

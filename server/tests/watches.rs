//! Watches (issue item 4): event types and paths, notification before reply,
//! persistent and recursive watches, checkWatches/removeWatches, setWatches
//! catch-up after a reconnect.
mod support;

use std::time::Duration;

use rzk_wire::client::Incoming;
use rzk_wire::{
    AddWatchMode, AddWatchRequest, ErrorCode, EventType, ExistsRequest, GetChildrenRequest,
    GetDataRequest, OpCode, Request, SetDataRequest, WatcherType,
};
use support::*;
use zookeeper_client as zk;

fn get_data(p: &str, watch: bool) -> Request {
    Request::GetData(GetDataRequest {
        path: p.into(),
        watch,
    })
}

#[tokio::test]
async fn notification_comes_before_the_reply_of_the_write_that_caused_it() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(dir.path(), &[]).await;
    let (mut raw, _) = Raw::connect(server.addr, 4000).await;
    assert!(raw.call(create_req("/a", b"1", 0)).await.result.is_ok());
    assert!(raw.call(get_data("/a", true)).await.result.is_ok());
    raw.send(Request::SetData(SetDataRequest {
        path: "/a".into(),
        data: None,
        version: -1,
    }))
    .await;
    let Some(Incoming::Notification(n)) = raw.recv().await else {
        panic!("the event must come first")
    };
    assert_eq!(
        (n.event.event_type, &*n.event.path),
        (EventType::NodeDataChanged, "/a")
    );
    assert_eq!(
        n.zxid.as_i64(),
        -1,
        "3.8 sends -1 as the notification's zxid"
    );
    let Some(Incoming::Reply(r)) = raw.recv().await else {
        panic!()
    };
    assert_eq!(r.header.xid, rzk_wire::Xid(3));
    server.stop().await.unwrap();
}

#[tokio::test]
async fn one_shot_events_match_zookeeper() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(dir.path(), &[]).await;
    let (mut w, _) = Raw::connect(server.addr, 4000).await;
    let (mut c, _) = Raw::connect(server.addr, 4000).await;
    // exist watch on a missing node, child watch on the parent
    assert_eq!(
        w.call(Request::Exists(ExistsRequest {
            path: "/n".into(),
            watch: true
        }))
        .await
        .result,
        Err(ErrorCode::NoNode)
    );
    assert!(w
        .call(Request::GetChildren(GetChildrenRequest {
            path: "/".into(),
            watch: true
        }))
        .await
        .result
        .is_ok());
    assert!(c.call(create_req("/n", b"", 0)).await.result.is_ok());
    let mut got = Vec::new();
    for _ in 0..2 {
        let Some(Incoming::Notification(n)) = w.recv().await else {
            panic!()
        };
        got.push((n.event.event_type, n.event.path.to_string()));
    }
    assert_eq!(
        got,
        vec![
            (EventType::NodeCreated, "/n".into()),
            (EventType::NodeChildrenChanged, "/".into())
        ]
    );
    // data + child watch on /n: one NodeDeleted for both
    assert!(w.call(get_data("/n", true)).await.result.is_ok());
    assert!(w
        .call(Request::GetChildren(GetChildrenRequest {
            path: "/n".into(),
            watch: true
        }))
        .await
        .result
        .is_ok());
    assert!(c
        .call(Request::Delete(rzk_wire::DeleteRequest {
            path: "/n".into(),
            version: -1
        }))
        .await
        .result
        .is_ok());
    let Some(Incoming::Notification(n)) = w.recv().await else {
        panic!()
    };
    assert_eq!(
        (n.event.event_type, &*n.event.path),
        (EventType::NodeDeleted, "/n")
    );
    // Nothing else is pending: the next frame is the ping's reply, not a second
    // event (recv, unlike call, does not skip notifications).
    w.send_with_xid(rzk_wire::Xid::PING, Request::Ping).await;
    match w.recv().await {
        Some(Incoming::Reply(r)) => assert_eq!(r.header.xid, rzk_wire::Xid::PING),
        other => panic!("expected the ping's reply, got {other:?}"),
    }
    // getData on a missing node sets no watch.
    assert_eq!(
        w.call(get_data("/n", true)).await.result,
        Err(ErrorCode::NoNode)
    );
    assert!(c.call(create_req("/n", b"", 0)).await.result.is_ok());
    w.send_with_xid(rzk_wire::Xid::PING, Request::Ping).await;
    match w.recv().await {
        Some(Incoming::Reply(r)) => assert_eq!(r.header.xid, rzk_wire::Xid::PING),
        other => panic!("no event for /n expected, got {other:?}"),
    }
    server.stop().await.unwrap();
}

#[tokio::test]
async fn persistent_and_recursive_watches() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(dir.path(), &[]).await;
    let c = client(&server).await;
    let opts = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
    c.create("/pr", b"", &opts).await.unwrap();
    let mut rec = c
        .watch("/pr", zk::AddWatchMode::PersistentRecursive)
        .await
        .unwrap();
    let mut per = c.watch("/pr", zk::AddWatchMode::Persistent).await.unwrap();
    c.create("/pr/c", b"", &opts).await.unwrap();
    c.create("/pr/c/d", b"", &opts).await.unwrap();
    c.set_data("/pr", b"x", None).await.unwrap();
    c.delete("/pr/c/d", None).await.unwrap();
    c.delete("/pr/c", None).await.unwrap();
    use zk::EventType as E;
    for want in [
        (E::NodeCreated, "/pr/c"),
        (E::NodeCreated, "/pr/c/d"),
        (E::NodeDataChanged, "/pr"),
        (E::NodeDeleted, "/pr/c/d"),
        (E::NodeDeleted, "/pr/c"),
    ] {
        assert_eq!(next_event(&mut rec).await, (want.0, want.1.to_string()));
    }
    for want in [
        (E::NodeChildrenChanged, "/pr"),
        (E::NodeDataChanged, "/pr"),
        (E::NodeChildrenChanged, "/pr"),
    ] {
        assert_eq!(next_event(&mut per).await, (want.0, want.1.to_string()));
    }
    server.stop().await.unwrap();
}

#[tokio::test]
async fn check_and_remove_watches() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(dir.path(), &[]).await;
    let (mut raw, _) = Raw::connect(server.addr, 4000).await;
    let (mut other, _) = Raw::connect(server.addr, 4000).await;
    assert!(raw.call(create_req("/w", b"", 0)).await.result.is_ok());
    assert!(raw.call(get_data("/w", true)).await.result.is_ok());
    let check = |t| {
        Request::CheckWatches(rzk_wire::CheckWatchesRequest {
            path: "/w".into(),
            watcher_type: t,
        })
    };
    let remove = |t| {
        Request::RemoveWatches(rzk_wire::RemoveWatchesRequest {
            path: "/w".into(),
            watcher_type: t,
        })
    };
    assert!(raw.call(check(WatcherType::Data)).await.result.is_ok());
    assert_eq!(
        raw.call(check(WatcherType::Children)).await.result,
        Err(ErrorCode::NoWatcher)
    );
    assert_eq!(
        other.call(check(WatcherType::Data)).await.result,
        Err(ErrorCode::NoWatcher),
        "only this connection's watches"
    );
    assert!(raw.call(remove(WatcherType::Any)).await.result.is_ok());
    assert_eq!(
        raw.call(remove(WatcherType::Any)).await.result,
        Err(ErrorCode::NoWatcher)
    );
    let add = Request::AddWatch(AddWatchRequest {
        path: "/w".into(),
        mode: AddWatchMode::Persistent,
    });
    let r = raw.call(add).await;
    assert!(r.result.is_ok());
    assert!(raw
        .call(check(WatcherType::Persistent))
        .await
        .result
        .is_ok());
    assert!(raw
        .call(remove(WatcherType::Persistent))
        .await
        .result
        .is_ok());
    // Removed: a change sends nothing.
    assert!(other
        .call(Request::SetData(SetDataRequest {
            path: "/w".into(),
            data: None,
            version: -1
        }))
        .await
        .result
        .is_ok());
    raw.send(Request::Ping).await;
    assert!(matches!(raw.recv().await, Some(Incoming::Reply(_))));
    server.stop().await.unwrap();
}

#[tokio::test]
async fn set_watches_catches_up_on_what_changed_while_away() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(dir.path(), &[]).await;
    let (mut raw, _) = Raw::connect(server.addr, 4000).await;
    for p in ["/same", "/changed", "/gone", "/kids"] {
        assert!(raw.call(create_req(p, b"", 0)).await.result.is_ok());
    }
    let rel = raw.call(Request::Ping).await.zxid;
    assert!(raw
        .call(Request::SetData(SetDataRequest {
            path: "/changed".into(),
            data: None,
            version: -1
        }))
        .await
        .result
        .is_ok());
    assert!(raw
        .call(Request::Delete(rzk_wire::DeleteRequest {
            path: "/gone".into(),
            version: -1
        }))
        .await
        .result
        .is_ok());
    assert!(raw.call(create_req("/kids/k", b"", 0)).await.result.is_ok());
    assert!(raw.call(create_req("/born", b"", 0)).await.result.is_ok());
    let (mut fresh, _) = Raw::connect(server.addr, 4000).await;
    let sw = rzk_wire::SetWatches {
        relative_zxid: rel,
        data_watches: vec!["/same".into(), "/changed".into(), "/gone".into()],
        exist_watches: vec!["/born".into(), "/unborn".into()],
        child_watches: vec!["/kids".into(), "/same".into()],
    };
    fresh
        .send_with_xid(rzk_wire::Xid::SET_WATCHES, Request::SetWatches(sw))
        .await;
    let mut events = Vec::new();
    loop {
        match fresh.recv().await {
            Some(Incoming::Notification(n)) => {
                events.push((n.event.event_type, n.event.path.to_string()))
            }
            Some(Incoming::Reply(r)) => {
                assert_eq!(r.header.xid, rzk_wire::Xid::SET_WATCHES);
                break;
            }
            other => panic!("{other:?}"),
        }
    }
    events.sort_by_key(|e| e.1.clone());
    assert_eq!(
        events,
        vec![
            (EventType::NodeCreated, "/born".into()),
            (EventType::NodeDataChanged, "/changed".into()),
            (EventType::NodeDeleted, "/gone".into()),
            (EventType::NodeChildrenChanged, "/kids".into()),
        ]
    );
    // The unchanged ones were registered.
    assert!(raw
        .call(Request::SetData(SetDataRequest {
            path: "/same".into(),
            data: None,
            version: -1
        }))
        .await
        .result
        .is_ok());
    let Some(Incoming::Notification(n)) = fresh.recv().await else {
        panic!()
    };
    assert_eq!(
        (n.event.event_type, &*n.event.path),
        (EventType::NodeDataChanged, "/same")
    );
    assert!(raw.call(create_req("/unborn", b"", 0)).await.result.is_ok());
    let Some(Incoming::Notification(n)) = fresh.recv().await else {
        panic!()
    };
    assert_eq!(
        (n.event.event_type, &*n.event.path),
        (EventType::NodeCreated, "/unborn")
    );
    let _ = OpCode::SetWatches;
    server.stop().await.unwrap();
}

#[tokio::test]
async fn events_need_read_permission() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(dir.path(), &[]).await;
    let (mut w, _) = Raw::connect(server.addr, 4000).await;
    let (mut c, _) = Raw::connect(server.addr, 4000).await;
    assert!(w
        .call(Request::AddWatch(AddWatchRequest {
            path: "/".into(),
            mode: AddWatchMode::PersistentRecursive
        }))
        .await
        .result
        .is_ok());
    let secret = vec![rzk_wire::Acl {
        perms: rzk_wire::Perms::ALL,
        id: rzk_wire::Id {
            scheme: "digest".into(),
            id: rzk_server::acl::digest_identity(b"x:y").into(),
        },
    }];
    let req = Request::Create(rzk_wire::CreateRequest {
        path: "/secret".into(),
        data: None,
        acl: secret,
        flags: 0,
    });
    assert!(c.call(req).await.result.is_ok());
    assert!(c.call(create_req("/public", b"", 0)).await.result.is_ok());
    let Some(Incoming::Notification(n)) = w.recv().await else {
        panic!()
    };
    assert_eq!(
        &*n.event.path, "/public",
        "no event about a node the watcher cannot read"
    );
    server.stop().await.unwrap();
}

async fn next_event(w: &mut zk::PersistentWatcher) -> (zk::EventType, String) {
    let e = tokio::time::timeout(Duration::from_secs(5), w.changed())
        .await
        .expect("event");
    (e.event_type, e.path)
}

//! Sessions (issue item 1): handshake and timeout negotiation, resume with
//! the password, expiry with ephemerals and watches, closeSession, the
//! lastZxidSeen check, pipelining behind the ConnectRequest.
mod support;

use std::time::Duration;

use rzk_wire::client::Incoming;
use rzk_wire::{ErrorCode, EventType, OpCode, Request, Response};
use support::*;
use zookeeper_client as zk;

#[tokio::test]
async fn timeout_is_clamped_and_ids_carry_the_server_id() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(
        dir.path(),
        &[("minSessionTimeout", "1000"), ("maxSessionTimeout", "5000")],
    )
    .await;
    for (asked, got) in [(10, 1000), (3000, 3000), (99999, 5000), (-5, 1000)] {
        let (_raw, resp) = Raw::connect(server.addr, asked).await;
        assert_eq!(resp.timeout_ms, got, "asked {asked}");
        assert_eq!(resp.session_id.0 >> 56, 1, "server id 1 in the top byte");
        assert_eq!(resp.passwd.len(), 16);
        assert_eq!(resp.read_only, Some(false));
    }
    server.stop().await.unwrap();
}

#[tokio::test]
async fn resume_with_password_and_reject_wrong_or_expired() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(dir.path(), &[]).await;
    let (mut a, resp) = Raw::connect(server.addr, 4000).await;
    let r = a.call(create_req("/eph", b"", 1)).await;
    assert!(r.result.is_ok());
    // Resume on a second connection: the first one is closed by the server.
    let mut req = Raw::new_session(4000);
    req.session_id = resp.session_id;
    req.passwd = resp.passwd.clone();
    let mut b = Raw::open(server.addr, req.clone()).await;
    let Some(Incoming::Connect(again)) = b.recv().await else {
        panic!("no response")
    };
    assert_eq!(again.session_id, resp.session_id);
    assert!(
        a.closed().await,
        "the older connection of the session is closed"
    );
    // A wrong password gets the invalid-session answer and a close; it also
    // kills the live connection (docs/client-protocol.md, "Resuming a session",
    // step 1).
    let mut bad = req.clone();
    bad.passwd = vec![1u8; 16].into();
    let mut c = Raw::open(server.addr, bad).await;
    let Some(Incoming::Connect(rej)) = c.recv().await else {
        panic!("no response")
    };
    assert_eq!((rej.timeout_ms, rej.session_id.0), (0, 0));
    assert!(c.closed().await);
    assert!(b.closed().await);
    // The session itself survived: resume once more, the ephemeral is there.
    let mut d = Raw::open(server.addr, req.clone()).await;
    let Some(Incoming::Connect(ok)) = d.recv().await else {
        panic!()
    };
    assert_eq!(ok.session_id, resp.session_id);
    let r = d
        .call(Request::Exists(rzk_wire::ExistsRequest {
            path: "/eph".into(),
            watch: false,
        }))
        .await;
    let Ok(Response::Stat(stat)) = r.result else {
        panic!("{r:?}")
    };
    assert_eq!(stat.ephemeral_owner, resp.session_id);
    // closeSession: reply, ephemerals gone, connection closed, resume refused.
    let r = d.call(Request::CloseSession).await;
    assert!(r.result.is_ok());
    assert!(d.closed().await);
    let mut e = Raw::open(server.addr, req).await;
    let Some(Incoming::Connect(rej)) = e.recv().await else {
        panic!()
    };
    assert_eq!(rej.timeout_ms, 0);
    let c = client(&server).await;
    assert_eq!(c.check_stat("/eph").await.unwrap(), None);
    server.stop().await.unwrap();
}

#[tokio::test]
async fn expiry_deletes_ephemerals_and_fires_watches() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(dir.path(), &[]).await;
    let (mut doomed, resp) = Raw::connect(server.addr, 600).await;
    assert!(doomed.call(create_req("/e1", b"x", 1)).await.result.is_ok());
    let watcher = client(&server).await;
    let (_, _, w) = watcher.get_and_watch_data("/e1").await.unwrap();
    let started = std::time::Instant::now();
    // No more traffic from `doomed`: it expires after 600 ms (+ one tick).
    let event = tokio::time::timeout(Duration::from_secs(10), w.changed())
        .await
        .unwrap();
    assert_eq!(event.event_type, zk::EventType::NodeDeleted);
    assert!(
        started.elapsed() >= Duration::from_millis(400),
        "{:?}",
        started.elapsed()
    );
    assert!(
        doomed.closed().await,
        "the expired session's connection is closed"
    );
    let mut req = Raw::new_session(600);
    req.session_id = resp.session_id;
    req.passwd = resp.passwd;
    let mut again = Raw::open(server.addr, req).await;
    let Some(Incoming::Connect(rej)) = again.recv().await else {
        panic!()
    };
    assert_eq!((rej.timeout_ms, rej.session_id.0), (0, 0));
    server.stop().await.unwrap();
}

#[tokio::test]
async fn pings_keep_a_session_alive() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(dir.path(), &[]).await;
    let (mut raw, _) = Raw::connect(server.addr, 600).await;
    assert!(raw.call(create_req("/alive", b"", 1)).await.result.is_ok());
    for _ in 0..10 {
        tokio::time::sleep(Duration::from_millis(200)).await;
        // A ping as clients send it, with its reserved xid: the reply carries it back.
        raw.send_with_xid(rzk_wire::Xid::PING, Request::Ping).await;
        let r = raw.reply(rzk_wire::OpCode::Ping).await;
        assert_eq!(r.xid, rzk_wire::Xid::PING);
        assert!(r.result.is_ok());
    }
    let c = client(&server).await;
    assert!(
        c.check_stat("/alive").await.unwrap().is_some(),
        "2 s of pings kept the 600 ms session"
    );
    server.stop().await.unwrap();
}

#[tokio::test]
async fn a_client_ahead_of_the_server_is_refused_without_reply() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(dir.path(), &[]).await;
    let mut req = Raw::new_session(4000);
    req.last_zxid_seen = rzk_zxid::Zxid::from_u64(u64::MAX >> 2);
    let mut raw = Raw::open(server.addr, req).await;
    assert!(raw.closed().await);
    server.stop().await.unwrap();
}

#[tokio::test]
async fn requests_pipelined_behind_the_connect_request_are_served_in_order() {
    use futures::SinkExt;
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(dir.path(), &[]).await;
    let mut raw = Raw::open(server.addr, Raw::new_session(4000)).await;
    // auth, a create, a read and a ping, all before the ConnectResponse.
    let frames = vec![
        rzk_wire::RequestFrame {
            xid: rzk_wire::Xid::AUTH,
            request: Request::Auth(rzk_wire::AuthPacket {
                auth_type: 0,
                scheme: "digest".into(),
                auth: "u:p".into(),
            }),
        },
        rzk_wire::RequestFrame {
            xid: rzk_wire::Xid(1),
            request: create_req("/pipe", b"v", 0),
        },
        rzk_wire::RequestFrame {
            xid: rzk_wire::Xid(2),
            request: Request::GetData(rzk_wire::GetDataRequest {
                path: "/pipe".into(),
                watch: false,
            }),
        },
        rzk_wire::RequestFrame {
            xid: rzk_wire::Xid::PING,
            request: Request::Ping,
        },
    ];
    for f in frames {
        raw.framed.feed(f).await.unwrap();
    }
    SinkExt::<rzk_wire::RequestFrame>::flush(&mut raw.framed)
        .await
        .unwrap();
    assert!(matches!(raw.recv().await, Some(Incoming::Connect(_))));
    let auth = raw.reply(OpCode::Auth).await;
    assert_eq!((auth.xid, auth.zxid.as_u64()), (rzk_wire::Xid::AUTH, 0));
    let create = raw.reply(OpCode::Create).await;
    assert_eq!(create.xid, rzk_wire::Xid(1));
    let get = raw.reply(OpCode::GetData).await;
    assert_eq!(get.xid, rzk_wire::Xid(2));
    let Ok(Response::GetData(d)) = get.result else {
        panic!("{get:?}")
    };
    assert_eq!(d.data.as_deref(), Some(&b"v"[..]));
    let ping = raw.reply(OpCode::Ping).await;
    assert_eq!(ping.xid, rzk_wire::Xid::PING);
    assert_eq!(
        ping.zxid, create.zxid,
        "ping carries the last processed zxid"
    );
    server.stop().await.unwrap();
}

#[tokio::test]
async fn auth_with_an_unknown_scheme_fails_and_closes() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(dir.path(), &[]).await;
    let (mut raw, _) = Raw::connect(server.addr, 4000).await;
    raw.framed_send_auth("kerberos", b"x").await;
    let r = raw.reply(OpCode::Auth).await;
    assert_eq!(r.result, Err(ErrorCode::AuthFailed));
    assert!(raw.closed().await);
    server.stop().await.unwrap();
}

#[tokio::test]
async fn sessions_survive_a_restart_and_expire_if_not_resumed() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(dir.path(), &[]).await;
    let (mut keep, keep_resp) = Raw::connect(server.addr, 3000).await;
    assert!(keep.call(create_req("/keep", b"", 1)).await.result.is_ok());
    let (mut lose, _) = Raw::connect(server.addr, 600).await;
    assert!(lose.call(create_req("/lose", b"", 1)).await.result.is_ok());
    // Kill the server without closing the sessions (no closeSession sent).
    server.stop().await.unwrap();
    drop((keep, lose));
    let server = TestServer::start(dir.path(), &[]).await;
    let mut req = Raw::new_session(3000);
    req.session_id = keep_resp.session_id;
    req.passwd = keep_resp.passwd.clone();
    let mut again = Raw::open(server.addr, req).await;
    let Some(Incoming::Connect(ok)) = again.recv().await else {
        panic!()
    };
    assert_eq!(
        ok.session_id, keep_resp.session_id,
        "a recovered session can be resumed"
    );
    let c = client(&server).await;
    eventually(
        Duration::from_secs(10),
        "/lose expires after the restart",
        || async { c.check_stat("/lose").await.unwrap().is_none() },
    )
    .await;
    assert!(again.call(Request::Ping).await.result.is_ok());
    assert!(c.check_stat("/keep").await.unwrap().is_some());
    server.stop().await.unwrap();
}

trait AuthExt {
    async fn framed_send_auth(&mut self, scheme: &str, auth: &[u8]);
}

impl AuthExt for Raw {
    async fn framed_send_auth(&mut self, scheme: &str, auth: &[u8]) {
        use futures::SinkExt;
        self.framed
            .send(rzk_wire::RequestFrame {
                xid: rzk_wire::Xid::AUTH,
                request: Request::Auth(rzk_wire::AuthPacket {
                    auth_type: 0,
                    scheme: scheme.into(),
                    auth: bytes::Bytes::copy_from_slice(auth),
                }),
            })
            .await
            .unwrap();
    }
}

#[test]
fn event_types_exist() {
    // The wire crate's event numbers are the ones the doc lists.
    assert_eq!(EventType::NodeDeleted.as_i32(), 2);
}

//! The defect this pins: idle sessions must not hold request permits.
//!
//! `globalOutstandingLimit` counts requests in flight, never connections (as
//! ZooKeeper's does). A server that took its permit before reading made every
//! idle connection hold one, so once as many sessions as the limit were open,
//! a new session's first request waited for another session's ping. The
//! `zookeeper-client` crate counts a session as connected only once the ping
//! it sends right after the ConnectResponse is answered, so each new `connect`
//! stalled for a ping interval of the idle ones (12 s with a 60 s session
//! timeout, measured before the fix).
mod support;

use std::time::{Duration, Instant};

use support::*;
use zookeeper_client as zk;

/// Three times the limit below.
const SESSIONS: usize = 6;
/// Far below the crate's ping interval with a 60 s session timeout (9 s), so
/// a session that could only get a permit from another session's ping cannot
/// make it, and far above what opening six sessions takes on a loaded machine.
const ALL_MAX: Duration = Duration::from_secs(6);

#[tokio::test]
async fn idle_sessions_hold_no_global_request_permit() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(
        dir.path(),
        &[
            ("globalOutstandingLimit", "2"),
            ("maxSessionTimeout", "60000"),
        ],
    )
    .await;
    let deadline = Instant::now() + ALL_MAX;
    let left = || deadline.saturating_duration_since(Instant::now());
    let open = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
    let mut clients = Vec::new();
    let address = server.connect_string();
    // One after another: each new session arrives while all the others idle.
    for i in 0..SESSIONS {
        let connect = zk::Client::connector()
            .with_session_timeout(Duration::from_secs(60))
            .connect(&address);
        let client = tokio::time::timeout(left(), connect)
            .await
            .unwrap_or_else(|_| {
                panic!(
                    "session {i} of {SESSIONS} (globalOutstandingLimit=2) not connected within \
                     {ALL_MAX:?} of the first: idle sessions are holding request permits"
                )
            })
            .expect("connect");
        clients.push(client);
    }
    // Every session is usable, each while the others stay idle.
    for (i, client) in clients.iter().enumerate() {
        let path = format!("/s{i}");
        tokio::time::timeout(left(), client.create(&path, b"x", &open))
            .await
            .unwrap_or_else(|_| panic!("session {i}: create {path} not answered while others idle"))
            .expect("create");
    }
    drop(clients);
    server.stop().await.unwrap();
}

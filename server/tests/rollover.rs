//! Epoch rollover in the running server (I3; docs/zab.md, "Rollover without an
//! election"; the rollover failure of ARCHITECTURE.md, "The four failures"):
//! with `rzk.zxid.counterLimit` low, the leader rolls to the next epoch every
//! few dozen writes, and clients see nothing but larger zxids: no error, no
//! lost connection, no election.
//!
//! In-process members (real gRPC between them on loopback) and an
//! independent client, the `zookeeper-client` crate.
mod support;

use std::sync::Arc;
use std::time::Duration;

use rzk_zxid::{CounterLimit, Zxid};
use support::rollover::{
    summarize, verify, wait_for_epoch, wait_for_epoch_clean, Phase, Progress, Workload,
};
use support::server::{Ensemble, Standalone};

/// A value of a `mntr` row.
fn mntr_value(mntr: &str, key: &str) -> Option<String> {
    mntr.lines()
        .find_map(|l| l.strip_prefix(&format!("zk_{key}\t")))
        .map(str::to_owned)
}

/// `srvr`'s zxid.
fn srvr_zxid(srvr: &str) -> Zxid {
    srvr.lines()
        .find_map(|l| l.strip_prefix("Zxid: "))
        .and_then(|z| z.trim().parse().ok())
        .unwrap_or_else(|| panic!("no Zxid in srvr:\n{srvr}"))
}

async fn looking_counts(e: &Ensemble) -> Vec<u64> {
    let mut out = Vec::new();
    for i in 0..e.members.len() {
        let mntr = e.four_letter(i, "mntr").await;
        let v = mntr_value(&mntr, "looking_count")
            .unwrap_or_else(|| panic!("no looking_count in mntr of member {i}:\n{mntr}"));
        out.push(v.parse().unwrap());
    }
    out
}

const LIMIT: u32 = 64;

/// 32 sessions write across 20 rollovers of a 3-member ensemble: 0 errors, 0
/// lost connections, the same leader and no election on any member, zxids
/// strictly increasing per session, every acknowledged write on every member.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ensemble_rolls_over_twenty_epochs_without_election_or_client_error() {
    let dir = tempfile::tempdir().unwrap();
    let limit = LIMIT.to_string();
    let mut e = Ensemble::start(dir.path(), 3, &[("rzk.zxid.counterLimit", &limit)]).await;
    let leader = e.wait_settled().await;
    let elections = looking_counts(&e).await;

    let progress = Arc::new(Progress::default());
    let running = Workload::new(&e.connect_string(), 32)
        .start(progress.clone())
        .await;
    let start = running.start;
    wait_for_epoch_clean(&progress, start.epoch(), 20, Duration::from_secs(120)).await;
    progress.stop();
    let logs = running.join().await;
    let s = summarize(&logs, CounterLimit::new(LIMIT));
    eprintln!("{s:?}");

    assert!(s.errors.is_empty(), "client errors: {:?}", s.errors);
    assert_eq!(s.disconnects, 0, "lost connections");
    assert_eq!(s.order_violations, 0, "zxids not increasing on a session");
    assert!(s.last.epoch().0 >= start.epoch().0 + 20, "{s:?}");
    assert!(
        s.rollover_zxids >= 19,
        "rollover proposals acknowledged: {s:?}"
    );
    assert_eq!(e.wait_settled().await, leader, "the leader changed");
    assert_eq!(looking_counts(&e).await, elections, "an election happened");
    let srvr = e.four_letter(leader, "srvr").await;
    assert!(srvr.contains("Mode: leader"), "{srvr}");
    assert!(srvr_zxid(&srvr).epoch().0 >= start.epoch().0 + 20, "{srvr}");
    for m in &e.members {
        let problems = verify(&m.client.to_string(), "/rollover", &logs).await;
        assert!(problems.is_empty(), "member {}: {problems:?}", m.id);
    }
    e.stop_all().await;
}

/// Standalone is an ensemble of one: it rolls over the same way. 32 sessions
/// write across 10 rollovers, the server restarts (the sessions wait,
/// connected, and reconnect), and they write across 10 more: no operation
/// fails, each session loses its connection once (the restart) and never
/// otherwise, zxids only grow on every session across the restart, and every
/// acknowledged write is there. One election per start.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn standalone_rolls_over_across_a_restart_without_client_error() {
    let dir = tempfile::tempdir().unwrap();
    let limit = LIMIT.to_string();
    let mut server = Standalone::start(dir.path(), &[("rzk.zxid.counterLimit", &limit)]).await;
    let progress = Arc::new(Progress::default());
    let running = Workload::new(&server.addr.to_string(), 32)
        .start(progress.clone())
        .await;
    let start = running.start;
    wait_for_epoch_clean(&progress, start.epoch(), 10, Duration::from_secs(120)).await;
    assert_eq!(server.looking_count().await, 1, "the first election only");

    progress.pause(32).await;
    server.restart().await;
    let resumed_at = progress.max_zxid();
    progress.set(Phase::Run);
    wait_for_epoch(&progress, resumed_at.epoch(), 10, Duration::from_secs(120)).await;
    progress.stop();
    let logs = running.join().await;
    let s = summarize(&logs, CounterLimit::new(LIMIT));
    eprintln!("{s:?}");
    assert!(s.errors.is_empty(), "client errors: {:?}", s.errors);
    assert_eq!(s.order_violations, 0, "zxids not increasing on a session");
    for l in &logs {
        assert_eq!(l.disconnects, 1, "session {}: the restart only", l.index);
    }
    assert!(s.last.epoch().0 >= start.epoch().0 + 20, "{s:?}");
    assert_eq!(
        server.looking_count().await,
        1,
        "the restart's election only"
    );
    let problems = verify(&server.addr.to_string(), "/rollover", &logs).await;
    assert!(problems.is_empty(), "{problems:?}");
    server.stop().await;
}

/// ZooKeeper's rule across the boundary (docs/client-protocol.md, "Clients that
/// are ahead"): a member refuses a client that has seen a later zxid than it
/// has applied, and the client tries another. A session that claims the first
/// zxid of the next epoch is refused by every member while the ensemble is
/// still in this epoch, and accepted by each once it has applied the rollover;
/// its next write gets a larger zxid.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_ahead_of_a_member_across_the_rollover_is_refused_until_the_member_applies_it() {
    use rzk_wire::client::Incoming;
    use support::{create_req, Raw};

    let dir = tempfile::tempdir().unwrap();
    let limit = LIMIT.to_string();
    let mut e = Ensemble::start(dir.path(), 3, &[("rzk.zxid.counterLimit", &limit)]).await;
    let leader = e.wait_settled().await;
    // Nobody else writes: the next epoch begins only with this test's writes.
    let (mut raw, session) = Raw::connect(e.members[leader].client, 10_000).await;
    let r = raw.call(create_req("/probe", b"", 0)).await;
    assert!(r.result.is_ok(), "{r:?}");
    let now = r.zxid;
    let ahead = Zxid::first_of(now.epoch().next().unwrap());
    drop(raw);
    let reconnect = |addr| {
        let mut req = Raw::new_session(10_000);
        req.session_id = session.session_id;
        req.passwd = session.passwd.clone();
        req.last_zxid_seen = ahead;
        Raw::open(addr, req)
    };
    for m in &e.members {
        let mut c = reconnect(m.client).await;
        assert!(
            c.recv().await.is_none(),
            "member {} is at {now} and must refuse a client that saw {ahead}",
            m.id
        );
    }
    // Another session writes across the rollover.
    let (mut writer, _) = Raw::connect(e.members[leader].client, 10_000).await;
    let mut last = now;
    let mut k = 0;
    while last < ahead {
        k += 1;
        let r = writer.call(create_req(&format!("/w{k}"), b"", 0)).await;
        assert!(r.result.is_ok(), "{r:?}");
        assert!(r.zxid > last, "{} after {last}", r.zxid);
        last = r.zxid;
    }
    assert_eq!(last, ahead, "the write after the rollover proposal");
    // Each member accepts the session once it has applied the rollover (a
    // follower may still be applying it: the client tries again).
    for m in &e.members {
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        let mut c = loop {
            let mut c = reconnect(m.client).await;
            match c.recv().await {
                Some(Incoming::Connect(ok)) => {
                    assert_eq!(ok.session_id, session.session_id);
                    break c;
                }
                other => {
                    assert!(other.is_none(), "{other:?}");
                    assert!(
                        std::time::Instant::now() < deadline,
                        "member {} never accepts",
                        m.id
                    );
                }
            }
        };
        let r = c
            .call(create_req(&format!("/after-{}", m.id), b"", 0))
            .await;
        assert!(r.result.is_ok(), "{r:?}");
        assert!(r.zxid > ahead, "member {}: {} after {ahead}", m.id, r.zxid);
    }
    assert_eq!(e.wait_settled().await, leader);
    e.stop_all().await;
}

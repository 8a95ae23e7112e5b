//! Observer relays fed by real drivers: three ZabReplicators on the in-memory
//! network, each feeding a RelayHub that an ObserverMaster serves over gRPC on
//! 127.0.0.1. An observer follows a follower's relay (the leader's when no
//! follower serves), checks every txn, and when its master is killed follows
//! another member from where it stopped. Every write arrives, in order, exactly
//! as the leader committed it.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use rzk_observer_master::grpc::{RelayClient, RelayService};
use rzk_observer_master::{FanoutConfig, ObserverId, ObserverMaster, RelayHub};
use rzk_quorum::core::Config;
use rzk_quorum::storage::MemStorage;
use rzk_quorum::transport::MemNetwork;
use rzk_quorum::{DriverConfig, PeerId, Replicator, Role, ZabReplicator};
use rzk_zxid::Zxid;

const IDS: [PeerId; 3] = [PeerId(1), PeerId(2), PeerId(3)];
const DEADLINE: Duration = Duration::from_secs(30);

struct Member {
    id: PeerId,
    rep: Arc<ZabReplicator>,
    addr: SocketAddr,
    server: tokio::task::JoinHandle<()>,
}

async fn start(net: &MemNetwork, id: PeerId) -> Member {
    let mut c = Config::new(id, IDS);
    c.finalize_wait_ticks = 20;
    c.notification_interval_ticks_min = 20;
    c.notification_interval_ticks_max = 200;
    c.ping_interval_ticks = 20;
    c.init_limit_ticks = 1_000;
    c.sync_limit_ticks = 300;
    c.incarnation = id.0;
    let hub = Arc::new(RelayHub::new(Zxid::ZERO, 4096));
    let mut cfg = DriverConfig::new(c);
    cfg.tick_interval = Duration::from_millis(5);
    cfg.observer_relay = Some(hub.clone());
    let (t, inbox) = net.join(id);
    let rep = Arc::new(
        ZabReplicator::start(cfg, MemStorage::default(), t, inbox)
            .await
            .expect("starts"),
    );
    // The state machine is not needed here; drain the stream.
    let mut commits = rep.take_commits().expect("first take");
    tokio::spawn(async move { while commits.next().await.is_some() {} });
    let master = Arc::new(ObserverMaster::spawn(hub, FanoutConfig::default()));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let incoming = tonic::transport::server::TcpIncoming::from(listener);
    let server = tokio::spawn(async move {
        let _ = tonic::transport::Server::builder()
            .add_service(RelayService::new(master))
            .serve_with_incoming(incoming)
            .await;
    });
    Member {
        id,
        rep,
        addr,
        server,
    }
}

async fn wait_for(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + DEADLINE;
    while !cond() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// What the observer has applied, and whose relay it follows.
#[derive(Default)]
struct ObserverState {
    applied: Vec<(Zxid, Bytes)>,
    master: Option<PeerId>,
    follows: usize,
}

/// The observer: follows a serving follower's relay (the leader's if none),
/// from its own last applied zxid; any end of the stream means: pick again,
/// cycling past members that did not answer (a dead process still looks like
/// a follower to a stale view), as ZooKeeper's observer cycles its masters.
async fn observe(
    members: Vec<(PeerId, SocketAddr, Arc<ZabReplicator>)>,
    state: Arc<Mutex<ObserverState>>,
) {
    let mut failed: Vec<PeerId> = Vec::new();
    loop {
        let serving = |role: Role| {
            members
                .iter()
                .filter(|(id, _, r)| r.role() == role && !failed.contains(id))
                .map(|(id, addr, _)| (*id, *addr))
                .collect::<Vec<_>>()
        };
        let mut pick = serving(Role::Follower);
        if pick.is_empty() {
            pick = serving(Role::Leader);
        }
        let Some(&(id, addr)) = pick.first() else {
            tokio::time::sleep(Duration::from_millis(5)).await;
            continue;
        };
        let last = state
            .lock()
            .unwrap()
            .applied
            .last()
            .map_or(Zxid::ZERO, |t| t.0);
        let Ok(mut client) = RelayClient::follow(addr, ObserverId(100), last).await else {
            tokio::time::sleep(Duration::from_millis(5)).await;
            continue;
        };
        {
            let mut s = state.lock().unwrap();
            s.master = Some(id);
            s.follows += 1;
        }
        while let Ok(batch) = client.next().await {
            let mut s = state.lock().unwrap();
            s.applied
                .extend(batch.into_iter().map(|t| (t.zxid, t.payload)));
        }
        state.lock().unwrap().master = None;
        // This member's stream ended: try the others first.
        failed.push(id);
    }
}

async fn write(leader: &ZabReplicator, range: std::ops::Range<u32>) {
    for i in range {
        leader
            .propose(Bytes::from(format!("txn {i}")))
            .await
            .expect("committed");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn observer_follows_a_follower_and_falls_back_when_it_dies() {
    let net = MemNetwork::new();
    let mut members = Vec::new();
    for id in IDS {
        members.push(start(&net, id).await);
    }
    wait_for("a leader and two followers", || {
        let leaders = members
            .iter()
            .filter(|m| m.rep.role() == Role::Leader)
            .count();
        let followers = members
            .iter()
            .filter(|m| m.rep.role() == Role::Follower)
            .count();
        leaders == 1 && followers == 2
    })
    .await;
    let leader = members
        .iter()
        .find(|m| m.rep.role() == Role::Leader)
        .unwrap()
        .rep
        .clone();
    let state = Arc::new(Mutex::new(ObserverState::default()));
    let view = members
        .iter()
        .map(|m| (m.id, m.addr, m.rep.clone()))
        .collect();
    let observer = tokio::spawn(observe(view, state.clone()));
    wait_for("the observer follows a follower", || {
        state.lock().unwrap().master.is_some()
    })
    .await;
    write(&leader, 0..50).await;
    wait_for("50 txns at the observer", || {
        state.lock().unwrap().applied.len() >= 50
    })
    .await;

    // Kill the member the observer follows.
    let victim = state.lock().unwrap().master.expect("following");
    assert_ne!(victim, leader.id(), "a follower is preferred");
    let m = members.iter().find(|m| m.id == victim).unwrap();
    m.rep.abort();
    m.server.abort();
    let follows_before = state.lock().unwrap().follows;
    wait_for("the observer follows another member", || {
        let s = state.lock().unwrap();
        s.follows > follows_before && s.master.is_some_and(|p| p != victim)
    })
    .await;
    write(&leader, 50..100).await;
    wait_for("100 txns at the observer", || {
        state.lock().unwrap().applied.len() >= 100
    })
    .await;
    observer.abort();

    // Exactly the leader's committed sequence: 100 writes, in order, each once.
    let s = state.lock().unwrap();
    let payloads: Vec<String> = s
        .applied
        .iter()
        .map(|(_, p)| String::from_utf8(p.to_vec()).unwrap())
        .collect();
    let expected: Vec<String> = (0..100).map(|i| format!("txn {i}")).collect();
    assert_eq!(payloads, expected);
    assert!(s.applied.windows(2).all(|w| w[1].0.is_next(w[0].0)));
    for m in &members {
        m.server.abort();
    }
}

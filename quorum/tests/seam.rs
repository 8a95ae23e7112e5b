//! The server-facing seam of `ZabReplicator` beyond propose/commit: role items in
//! the commit stream, messages forwarded to the leader, operator stats and a
//! graceful shutdown that releases the log.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use rzk_quorum::core::Config;
use rzk_quorum::storage::MemStorage;
use rzk_quorum::transport::MemNetwork;
use rzk_quorum::wal_storage::WalStorage;
use rzk_quorum::{
    Committed, DriverConfig, PeerId, ReplicateError, Replicator, Role, ZabReplicator,
};
use rzk_wal::WalOptions;

const IDS: [PeerId; 3] = [PeerId(1), PeerId(2), PeerId(3)];

fn config(id: PeerId, voters: &[PeerId]) -> DriverConfig {
    let mut c = Config::new(id, voters.iter().copied());
    c.finalize_wait_ticks = 20;
    c.notification_interval_ticks_min = 20;
    c.notification_interval_ticks_max = 200;
    c.ping_interval_ticks = 20;
    c.init_limit_ticks = 1_000;
    c.sync_limit_ticks = 300;
    let mut d = DriverConfig::new(c);
    d.tick_interval = Duration::from_millis(5);
    d
}

struct Node {
    rep: Arc<ZabReplicator>,
    seen: Arc<Mutex<Vec<Committed>>>,
}

async fn start(net: &MemNetwork, id: PeerId) -> Node {
    let (t, inbox) = net.join(id);
    let rep = Arc::new(
        ZabReplicator::start(config(id, &IDS), MemStorage::new(), t, inbox)
            .await
            .expect("starts"),
    );
    let seen = Arc::new(Mutex::new(Vec::new()));
    let mut stream = rep.take_commits().expect("first take");
    let s2 = seen.clone();
    tokio::spawn(async move {
        while let Some(c) = stream.next().await {
            s2.lock().unwrap().push(c);
        }
    });
    Node { rep, seen }
}

async fn wait_for(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while !cond() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

async fn ensemble() -> Vec<Node> {
    let net = MemNetwork::new();
    let mut nodes = Vec::new();
    for id in IDS {
        nodes.push(start(&net, id).await);
    }
    wait_for("a leader followed by both others", || {
        let leaders: Vec<_> = nodes
            .iter()
            .filter(|n| n.rep.role() == Role::Leader)
            .collect();
        leaders.len() == 1
            && nodes
                .iter()
                .all(|n| n.rep.leader() == Some(leaders[0].rep.id()))
    })
    .await;
    nodes
}

fn forwarded(n: &Node) -> Vec<(PeerId, Bytes)> {
    n.seen
        .lock()
        .unwrap()
        .iter()
        .filter_map(|c| match c {
            Committed::Forwarded { from, payload } => Some((*from, payload.clone())),
            _ => None,
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forwarded_messages_reach_the_leader_in_each_senders_order() {
    let nodes = ensemble().await;
    let l = nodes
        .iter()
        .position(|n| n.rep.role() == Role::Leader)
        .unwrap();
    let followers: Vec<usize> = (0..3).filter(|i| *i != l).collect();
    wait_for("followers serving", || {
        followers
            .iter()
            .all(|f| nodes[*f].rep.role() == Role::Follower)
    })
    .await;
    for i in 0..50u32 {
        for f in &followers {
            let msg = format!("{}:{i}", nodes[*f].rep.id().0);
            nodes[*f].rep.forward(Bytes::from(msg)).unwrap();
        }
        nodes[l]
            .rep
            .forward(Bytes::from(format!("self:{i}")))
            .unwrap();
    }
    wait_for("150 forwarded messages on the leader", || {
        forwarded(&nodes[l]).len() == 150
    })
    .await;
    let got = forwarded(&nodes[l]);
    for n in &nodes {
        let id = n.rep.id();
        let mine: Vec<String> = got
            .iter()
            .filter(|(from, _)| *from == id)
            .map(|(_, p)| String::from_utf8(p.to_vec()).unwrap())
            .collect();
        let prefix = if id == nodes[l].rep.id() {
            "self".to_string()
        } else {
            id.0.to_string()
        };
        let want: Vec<String> = (0..50).map(|i| format!("{prefix}:{i}")).collect();
        assert_eq!(mine, want, "messages of {id:?} in send order");
    }
    for f in followers {
        assert!(forwarded(&nodes[f]).is_empty(), "only the leader receives");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_stream_reports_roles_after_the_history_they_cover() {
    let nodes = ensemble().await;
    for n in &nodes {
        wait_for("a serving role item", || {
            n.seen.lock().unwrap().iter().any(|c| {
                matches!(
                    c,
                    Committed::Role {
                        role: Role::Leader | Role::Follower,
                        ..
                    }
                )
            })
        })
        .await;
        let seen = n.seen.lock().unwrap();
        assert!(
            matches!(seen[0], Committed::Snapshot { .. }),
            "the snapshot comes first"
        );
        assert!(
            matches!(
                seen[1],
                Committed::Role {
                    role: Role::Looking,
                    leader: None,
                    ..
                }
            ),
            "a peer starts looking: {:?}",
            seen[1]
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_without_a_leader_refuses_to_forward() {
    let net = MemNetwork::new();
    // One of three voters alone can never elect a leader.
    let lonely = start(&net, PeerId(1)).await;
    let err = lonely.rep.forward(Bytes::from_static(b"x")).unwrap_err();
    assert_eq!(err, ReplicateError::NotLeader { leader: None });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stats_show_the_leaders_learners() {
    let nodes = ensemble().await;
    let l = nodes
        .iter()
        .position(|n| n.rep.role() == Role::Leader)
        .unwrap();
    wait_for("both learners synced in the leader's stats", || {
        let s = nodes[l].rep.stats();
        s.learners.len() == 2 && s.learners.iter().all(|x| x.synced && x.voting)
    })
    .await;
    let s = nodes[l].rep.stats();
    assert_eq!(s.role, Role::Leader);
    assert_eq!(s.leader, Some(nodes[l].rep.id()));
    assert_eq!(s.voters, 3);
    assert!(s.elections >= 1);
    let z = nodes[l]
        .rep
        .propose(Bytes::from_static(b"p"))
        .await
        .unwrap();
    wait_for("the commit in every peer's stats", || {
        nodes.iter().all(|n| n.rep.stats().committed >= z)
    })
    .await;
    for (i, n) in nodes.iter().enumerate() {
        if i != l {
            let s = n.rep.stats();
            assert_eq!(s.role, Role::Follower);
            assert!(s.learners.is_empty(), "a follower has no learners");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn graceful_shutdown_commits_what_it_took_and_releases_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let mut wal = WalOptions::default();
    wal.log.segment_bytes = 1 << 20;
    let open = || WalStorage::open(dir.path(), wal.clone()).expect("opens");
    let net = MemNetwork::new();
    let (t, inbox) = net.join(PeerId(1));
    let rep = ZabReplicator::start(config(PeerId(1), &[PeerId(1)]), open(), t, inbox)
        .await
        .unwrap();
    let mut stream = rep.take_commits().unwrap();
    wait_for("a leader of one", || rep.role() == Role::Leader).await;
    let taken: Vec<_> = (0..100u32)
        .map(|i| rep.propose(Bytes::from(i.to_be_bytes().to_vec())))
        .collect();
    rep.shutdown().await;
    let mut last = None;
    for p in taken {
        last = Some(p.await.expect("a proposal taken before shutdown commits"));
    }
    assert!(matches!(
        rep.propose(Bytes::from_static(b"late")).await,
        Err(ReplicateError::Shutdown)
    ));
    let mut delivered = 0;
    while let Ok(Some(item)) = tokio::time::timeout(Duration::from_secs(5), stream.next()).await {
        if matches!(item, Committed::Txn { .. }) {
            delivered += 1;
        }
    }
    assert_eq!(delivered, 100, "every committed txn was delivered");
    drop(rep);
    // The log was released: the directory opens again at once, with everything.
    let reopened = open();
    let last = last.unwrap();
    assert_eq!(reopened.wal().last_durable_zxid(), last);
    // A restarted peer replays its history, then says it serves: the role item
    // comes after every txn it covers.
    let (t, inbox) = net.join(PeerId(1));
    let rep = ZabReplicator::start(config(PeerId(1), &[PeerId(1)]), reopened, t, inbox)
        .await
        .unwrap();
    let mut stream = rep.take_commits().unwrap();
    let mut txns = 0;
    loop {
        let item = tokio::time::timeout(Duration::from_secs(10), stream.next())
            .await
            .expect("the replay goes on")
            .expect("stream open");
        match item {
            Committed::Txn { .. } => txns += 1,
            Committed::Role {
                role: Role::Leader,
                zxid,
                ..
            } => {
                assert_eq!(txns, 100, "every txn before the serving role");
                assert_eq!(zxid, last);
                break;
            }
            Committed::Role { .. } | Committed::Snapshot { .. } | Committed::Forwarded { .. } => {}
        }
    }
}

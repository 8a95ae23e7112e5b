//! The tokio driver over the in-memory network: election, commit order,
//! failover, catch-up after restart, SNAP to a new peer, sync barriers.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use rzk_quorum::core::Config;
use rzk_quorum::storage::MemStorage;
use rzk_quorum::transport::MemNetwork;
use rzk_quorum::{
    Committed, DriverConfig, PeerId, ReplicateError, Replicator, Role, ZabReplicator,
};
use rzk_zxid::Zxid;

const IDS: [PeerId; 3] = [PeerId(1), PeerId(2), PeerId(3)];

fn config(id: PeerId) -> DriverConfig {
    let mut c = Config::new(id, IDS);
    c.finalize_wait_ticks = 20;
    c.notification_interval_ticks_min = 20;
    c.notification_interval_ticks_max = 200;
    c.ping_interval_ticks = 20;
    c.init_limit_ticks = 1_000;
    c.sync_limit_ticks = 300;
    c.log_retained_below_snapshot_max = 0;
    c.incarnation = next_incarnation(id);
    let mut d = DriverConfig::new(c);
    d.tick_interval = Duration::from_millis(5);
    d
}

fn next_incarnation(id: PeerId) -> u64 {
    // Distinct per start, like a boot counter.
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed) * 16 + id.0
}

struct Node {
    rep: Arc<ZabReplicator>,
    storage: MemStorage,
    seen: Arc<Mutex<Vec<Committed>>>,
}

async fn start(net: &MemNetwork, id: PeerId, storage: MemStorage) -> Node {
    let (t, inbox) = net.join(id);
    let rep = Arc::new(
        ZabReplicator::start(config(id), storage.clone(), t, inbox)
            .await
            .expect("starts"),
    );
    let seen = Arc::new(Mutex::new(Vec::new()));
    let mut stream = rep.take_commits().expect("first take");
    assert!(rep.take_commits().is_none(), "one consumer only");
    let s2 = seen.clone();
    tokio::spawn(async move {
        while let Some(c) = stream.next().await {
            s2.lock().unwrap().push(c);
        }
    });
    Node { rep, storage, seen }
}

/// Waits for `cond` with a deadline (no sleeps used to synchronise).
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

fn leader_of(nodes: &[&Node]) -> Option<usize> {
    let leaders: Vec<usize> = (0..nodes.len())
        .filter(|i| nodes[*i].rep.role() == Role::Leader)
        .collect();
    let all_follow = leaders.len() == 1
        && nodes
            .iter()
            .all(|n| n.rep.leader() == Some(nodes[leaders[0]].rep.id()));
    all_follow.then(|| leaders[0])
}

/// The transactions a node applied, replaying snapshots as the state machine
/// would (a snapshot's bytes here are the list of payloads it covers).
fn applied(n: &Node) -> Vec<(Zxid, Bytes)> {
    let mut state: Vec<(Zxid, Bytes)> = Vec::new();
    for c in n.seen.lock().unwrap().iter() {
        match c {
            Committed::Snapshot { zxid, source } => {
                let mut data = Vec::new();
                source
                    .reader()
                    .and_then(|mut r| std::io::Read::read_to_end(&mut r, &mut data))
                    .expect("the snapshot reads back");
                state = decode(&data);
                assert_eq!(state.last().map(|s| s.0).unwrap_or(Zxid::ZERO), *zxid);
            }
            Committed::Role { zxid, .. } => {
                assert_eq!(state.last().map(|s| s.0).unwrap_or(Zxid::ZERO), *zxid);
            }
            Committed::Forwarded { .. } => {}
            Committed::Txn { zxid, payload } => {
                if let Some(last) = state.last() {
                    assert!(zxid.is_next(last.0), "{zxid} after {}", last.0);
                }
                state.push((*zxid, payload.clone()));
            }
        }
    }
    state
}

fn encode(state: &[(Zxid, Bytes)]) -> Bytes {
    let mut v = Vec::new();
    for (z, p) in state {
        v.extend_from_slice(&z.as_u64().to_le_bytes());
        v.extend_from_slice(&(p.len() as u32).to_le_bytes());
        v.extend_from_slice(p);
    }
    Bytes::from(v)
}

fn decode(b: &[u8]) -> Vec<(Zxid, Bytes)> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let z = Zxid::from_u64(u64::from_le_bytes(b[i..i + 8].try_into().unwrap()));
        let n = u32::from_le_bytes(b[i + 8..i + 12].try_into().unwrap()) as usize;
        out.push((z, Bytes::copy_from_slice(&b[i + 12..i + 12 + n])));
        i += 12 + n;
    }
    out
}

/// Writes a snapshot through the replicator's writer, in small chunks.
async fn save(r: &ZabReplicator, at: Zxid, data: Bytes) -> Result<Zxid, ReplicateError> {
    let mut w = r.snapshot_writer(at);
    for i in (0..data.len()).step_by(7) {
        let mut chunk = data.slice(i..(i + 7).min(data.len()));
        while let Err(e) = w.try_write(chunk) {
            match e {
                rzk_quorum::SnapshotWriteError::Full(c) => {
                    chunk = c;
                    w.ready().await;
                }
                rzk_quorum::SnapshotWriteError::Failed(e) => return Err(e),
            }
        }
    }
    w.finish().await
}

async fn propose_many(r: &ZabReplicator, prefix: &str, n: usize) -> Vec<Zxid> {
    let futs: Vec<_> = (0..n)
        .map(|i| r.propose(Bytes::from(format!("{prefix}-{i}"))))
        .collect();
    let mut zxids = Vec::new();
    for f in futs {
        zxids.push(f.await.expect("committed"));
    }
    zxids
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_replicas_commit_in_order_and_survive_failover() {
    let net = MemNetwork::new();
    let mut nodes = Vec::new();
    for id in IDS {
        nodes.push(start(&net, id, MemStorage::new()).await);
    }
    wait_for("a leader", || {
        leader_of(&nodes.iter().collect::<Vec<_>>()).is_some()
    })
    .await;
    let l = leader_of(&nodes.iter().collect::<Vec<_>>()).unwrap();

    // Pipelined proposals get increasing zxids in call order.
    let zxids = propose_many(&nodes[l].rep, "a", 200).await;
    assert!(zxids.windows(2).all(|w| w[1].is_next(w[0])), "{zxids:?}");
    let f = (l + 1) % 3;
    assert_eq!(
        nodes[f].rep.propose(Bytes::from_static(b"x")).await,
        Err(ReplicateError::NotLeader {
            leader: Some(nodes[l].rep.id())
        })
    );
    wait_for("all apply 200", || {
        nodes.iter().all(|n| applied(n).len() == 200)
    })
    .await;
    assert_eq!(applied(&nodes[0]), applied(&nodes[1]));
    assert_eq!(applied(&nodes[1]), applied(&nodes[2]));

    // Kill the leader: a new one is elected among the survivors.
    let old = nodes.remove(l);
    old.rep.abort();
    net.isolate(old.rep.id());
    wait_for("a new leader", || {
        leader_of(&nodes.iter().collect::<Vec<_>>()).is_some()
    })
    .await;
    let l2 = leader_of(&nodes.iter().collect::<Vec<_>>()).unwrap();
    let more = propose_many(&nodes[l2].rep, "b", 50).await;
    assert!(
        more[0] > *zxids.last().unwrap(),
        "a new epoch continues after the old"
    );

    // The old leader restarts from its storage and catches up.
    net.heal();
    let id = old.rep.id();
    let storage = old.storage.clone();
    drop(old);
    let back = start(&net, id, storage).await;
    nodes.push(back);
    wait_for("the restarted peer catches up", || {
        nodes.iter().all(|n| applied(n).len() == 250)
    })
    .await;
    let a = applied(&nodes[0]);
    assert!(nodes.iter().all(|n| applied(n) == a));
    for z in zxids.iter().chain(more.iter()) {
        assert!(a.iter().any(|(x, _)| x == z), "acknowledged {z} survived");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn new_peer_gets_a_snapshot_and_sync_is_a_barrier() {
    let net = MemNetwork::new();
    let mut nodes = Vec::new();
    for id in &IDS[..2] {
        nodes.push(start(&net, *id, MemStorage::new()).await);
    }
    wait_for("a leader of two", || {
        leader_of(&nodes.iter().collect::<Vec<_>>()).is_some()
    })
    .await;
    let l = leader_of(&nodes.iter().collect::<Vec<_>>()).unwrap();
    let zxids = propose_many(&nodes[l].rep, "s", 30).await;
    wait_for("leader applied", || applied(&nodes[l]).len() == 30).await;
    // The state machine snapshots; the log it covers may be purged.
    let state = applied(&nodes[l]);
    let at = state.last().unwrap().0;
    assert_eq!(save(&nodes[l].rep, at, encode(&state)).await, Ok(at));
    let more = propose_many(&nodes[l].rep, "t", 5).await;

    // A third peer with empty storage joins: SNAP, then the rest.
    nodes.push(start(&net, IDS[2], MemStorage::new()).await);
    wait_for("the new peer converges", || applied(&nodes[2]).len() == 35).await;
    assert!(
        nodes[2]
            .seen
            .lock()
            .unwrap()
            .iter()
            .any(|c| matches!(c, Committed::Snapshot { zxid, .. } if *zxid == at)),
        "the new peer was synchronised by SNAP"
    );
    assert_eq!(applied(&nodes[2]), applied(&nodes[l]));

    // I6b: a sync on a follower returns a barrier covering every acknowledged
    // write, and the follower has applied it when the barrier resolves.
    let last = propose_many(&nodes[l].rep, "u", 3).await;
    let f = (0..3).find(|i| *i != l).unwrap();
    let barrier = nodes[f].rep.sync().await.expect("sync");
    assert!(barrier >= *last.last().unwrap());
    // The commit stream is read by another task; the items are already in it.
    wait_for("follower applied up to the barrier", || {
        applied(&nodes[f]).last().unwrap().0 >= barrier
    })
    .await;
    // Every acknowledged write is in the follower's applied history at its zxid,
    // with the payload that was proposed.
    let history = applied(&nodes[f]);
    let acked = [("s", &zxids), ("t", &more), ("u", &last)];
    for (prefix, zs) in acked {
        for (i, z) in zs.iter().enumerate() {
            let (_, payload) = history
                .iter()
                .find(|(x, _)| x == z)
                .unwrap_or_else(|| panic!("acknowledged {z} missing on the follower"));
            assert_eq!(payload, &Bytes::from(format!("{prefix}-{i}")), "at {z}");
        }
    }
}

#[tokio::test]
async fn oversized_proposal_is_refused() {
    let net = MemNetwork::new();
    let (t, inbox) = net.join(PeerId(1));
    let mut c = Config::new(PeerId(1), [PeerId(1)]);
    c.finalize_wait_ticks = 0;
    c.proposal_bytes_max = 16;
    let rep = ZabReplicator::start(DriverConfig::new(c), MemStorage::new(), t, inbox)
        .await
        .unwrap();
    wait_for("single-voter leader", || rep.role() == Role::Leader).await;
    assert_eq!(
        rep.propose(Bytes::from(vec![0u8; 17])).await,
        Err(ReplicateError::TooLarge {
            size_bytes: 17,
            limit_bytes: 16
        })
    );
    assert!(rep.propose(Bytes::from(vec![0u8; 16])).await.is_ok());
}

#[tokio::test]
async fn proposals_beyond_the_in_flight_limit_are_refused() {
    let net = MemNetwork::new();
    let (t, inbox) = net.join(PeerId(1));
    // Three voters of which only one runs: nothing can commit.
    let mut d = config(PeerId(1));
    d.proposals_in_flight_max = 2;
    d.propose_batch_max = 1;
    let rep = ZabReplicator::start(d, MemStorage::new(), t, inbox)
        .await
        .unwrap();
    let a = rep.propose(Bytes::from_static(b"a"));
    let b = rep.propose(Bytes::from_static(b"b"));
    assert_eq!(
        rep.propose(Bytes::from_static(b"c")).await,
        Err(ReplicateError::Overloaded { in_flight_max: 2 })
    );
    // Not a leader: the two in flight fail, and the slots are free again.
    assert!(a.await.is_err() && b.await.is_err());
    assert!(matches!(
        rep.propose(Bytes::from_static(b"d")).await,
        Err(ReplicateError::NotLeader { .. })
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_stream_says_up_to_date_after_the_synced_history() {
    let net = MemNetwork::new();
    let mut nodes = Vec::new();
    for id in IDS {
        nodes.push(start(&net, id, MemStorage::new()).await);
    }
    wait_for("a leader", || {
        leader_of(&nodes.iter().collect::<Vec<_>>()).is_some()
    })
    .await;
    for n in &nodes {
        wait_for("a serving Role on every peer", || {
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
        assert!(matches!(
            n.seen.lock().unwrap()[0],
            Committed::Snapshot { .. }
        ));
    }
}

/// The survivors of a leader whose connections are reset (a killed process)
/// leave it at once. The sync limit here is a minute, longer than `wait_for`'s
/// deadline, so only the transport's notice can elect the next leader in time
/// (checked: without `MemNetwork::reset` this test times out).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn survivors_of_a_reset_leader_elect_without_waiting_for_the_sync_limit() {
    let net = MemNetwork::new();
    let mut nodes = Vec::new();
    for id in IDS {
        let (t, inbox) = net.join(id);
        let mut d = config(id);
        d.core.sync_limit_ticks = 60_000;
        d.core.init_limit_ticks = 120_000;
        let rep = Arc::new(
            ZabReplicator::start(d, MemStorage::new(), t, inbox)
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
        nodes.push(Node {
            rep,
            storage: MemStorage::new(),
            seen,
        });
    }
    wait_for("a leader", || {
        leader_of(&nodes.iter().collect::<Vec<_>>()).is_some()
    })
    .await;
    let l = leader_of(&nodes.iter().collect::<Vec<_>>()).unwrap();
    let before = propose_many(&nodes[l].rep, "a", 10).await;
    let old = nodes.remove(l);
    old.rep.abort();
    net.isolate(old.rep.id());
    net.reset(old.rep.id());
    wait_for("a new leader", || {
        leader_of(&nodes.iter().collect::<Vec<_>>()).is_some()
    })
    .await;
    let l2 = leader_of(&nodes.iter().collect::<Vec<_>>()).unwrap();
    let after = propose_many(&nodes[l2].rep, "b", 1).await;
    assert!(after[0] > *before.last().unwrap());
}

/// `Committed::Role { Leader }` says the state machine is current: a restarted
/// peer's recovered log is in the stream before it (checked to fail when the
/// core reports the role before applying the initial history).
#[tokio::test]
async fn a_restarted_leader_replays_its_log_before_its_role() {
    let net = MemNetwork::new();
    let storage = MemStorage::new();
    let single = || {
        let mut c = Config::new(PeerId(1), [PeerId(1)]);
        c.finalize_wait_ticks = 0;
        DriverConfig::new(c)
    };
    let (t, inbox) = net.join(PeerId(1));
    let rep = ZabReplicator::start(single(), storage.clone(), t, inbox)
        .await
        .unwrap();
    wait_for("single-voter leader", || rep.role() == Role::Leader).await;
    let zxids = propose_many(&rep, "r", 3).await;
    rep.abort();
    drop(rep);
    let (t, inbox) = net.join(PeerId(1));
    let rep = ZabReplicator::start(single(), storage, t, inbox)
        .await
        .unwrap();
    let mut stream = rep.take_commits().unwrap();
    let mut txns = Vec::new();
    loop {
        match tokio::time::timeout(Duration::from_secs(20), stream.next())
            .await
            .expect("the stream goes on")
            .expect("open")
        {
            Committed::Txn { zxid, .. } => txns.push(zxid),
            Committed::Role {
                role: Role::Leader,
                zxid,
                ..
            } => {
                assert_eq!(txns, zxids, "the whole log before the role");
                assert_eq!(zxid, *zxids.last().unwrap());
                break;
            }
            Committed::Snapshot { .. } | Committed::Role { .. } | Committed::Forwarded { .. } => {}
        }
    }
}

//! The driver on `rzk-wal`: commits are durable across a restart of every peer.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use rzk_quorum::core::Config;
use rzk_quorum::transport::MemNetwork;
use rzk_quorum::wal_storage::WalStorage;
use rzk_quorum::{Committed, DriverConfig, PeerId, Replicator, Role, ZabReplicator};
use rzk_wal::WalOptions;
use rzk_zxid::Zxid;

const IDS: [PeerId; 3] = [PeerId(1), PeerId(2), PeerId(3)];

/// A running peer and the zxids its state machine received.
type Running = (Arc<ZabReplicator>, Arc<Mutex<Vec<Zxid>>>);

async fn wait_for(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while !cond() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

async fn start_all(net: &MemNetwork, dirs: &[tempfile::TempDir], boot: u64) -> Vec<Running> {
    let mut out = Vec::new();
    for i in 0..IDS.len() {
        out.push(start_one(net, dirs, i, boot, None).await);
    }
    out
}

/// Starts peer `i` on its directory; `window` bounds its in-memory log.
async fn start_one(
    net: &MemNetwork,
    dirs: &[tempfile::TempDir],
    i: usize,
    boot: u64,
    window: Option<usize>,
) -> Running {
    let id = &IDS[i];
    {
        let mut c = Config::new(*id, IDS);
        if let Some(w) = window {
            c.log_window_entries_max = w;
            c.batch_entries_max = 3;
        }
        c.finalize_wait_ticks = 20;
        c.notification_interval_ticks_min = 20;
        c.ping_interval_ticks = 20;
        c.sync_limit_ticks = 500;
        c.init_limit_ticks = 2_000;
        c.incarnation = boot;
        // The previous process's storage thread may still be closing the log.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        let storage = loop {
            match WalStorage::open(dirs[i].path(), WalOptions::default()) {
                Ok(s) => break s,
                Err(e) => {
                    assert!(tokio::time::Instant::now() < deadline, "open: {e}");
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
        };
        let (t, inbox) = net.join(*id);
        let rep = Arc::new(
            ZabReplicator::start(DriverConfig::new(c), storage, t, inbox)
                .await
                .unwrap(),
        );
        let seen = Arc::new(Mutex::new(Vec::new()));
        let mut s = rep.take_commits().unwrap();
        let s2 = seen.clone();
        tokio::spawn(async move {
            while let Some(c) = s.next().await {
                match c {
                    Committed::Txn { zxid, .. } => s2.lock().unwrap().push(zxid),
                    Committed::Snapshot { zxid, .. } => {
                        let mut v = s2.lock().unwrap();
                        v.clear();
                        if zxid != Zxid::ZERO {
                            v.push(zxid);
                        }
                    }
                    Committed::Role { .. } | Committed::Forwarded { .. } => {}
                }
            }
        });
        (rep, seen)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commits_survive_a_restart_of_every_peer() {
    let dirs: Vec<tempfile::TempDir> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let net = MemNetwork::new();
    let peers = start_all(&net, &dirs, 1).await;
    let leader = |ps: &[Running]| ps.iter().position(|(r, _)| r.role() == Role::Leader);
    wait_for("a leader", || leader(&peers).is_some()).await;
    let l = leader(&peers).unwrap();
    let futs: Vec<_> = (0..50)
        .map(|i| peers[l].0.propose(Bytes::from(format!("x{i}"))))
        .collect();
    let mut acked = Vec::new();
    for f in futs {
        acked.push(f.await.expect("committed"));
    }
    for (r, _) in &peers {
        r.abort();
    }
    drop(peers);

    let net = MemNetwork::new();
    let peers = start_all(&net, &dirs, 2).await;
    wait_for("a leader after restart", || leader(&peers).is_some()).await;
    let l = leader(&peers).unwrap();
    let z = peers[l]
        .0
        .propose(Bytes::from_static(b"after"))
        .await
        .expect("committed");
    assert!(
        z.epoch() > acked[0].epoch(),
        "a new epoch after the restart"
    );
    wait_for("every peer replays the history and the new txn", || {
        peers
            .iter()
            .all(|(_, s)| s.lock().unwrap().last() == Some(&z))
    })
    .await;
    for (_, s) in &peers {
        let seen = s.lock().unwrap();
        for a in &acked {
            assert!(seen.contains(a), "acknowledged {a} survived the restart");
        }
    }
}

/// A leader whose in-memory window holds 4 entries serves a learner that is 60
/// entries behind from its durable log (`rzk-wal`'s reader, in reads of at most
/// 3 entries), and the learner ends with every entry.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_learner_behind_the_window_catches_up_from_the_leaders_log() {
    let dirs: Vec<tempfile::TempDir> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let net = MemNetwork::new();
    let mut peers = Vec::new();
    for i in 0..3 {
        peers.push(start_one(&net, &dirs, i, 1, Some(4)).await);
    }
    let leader = |ps: &[Running]| ps.iter().position(|(r, _)| r.role() == Role::Leader);
    wait_for("a leader", || leader(&peers).is_some()).await;
    let l = leader(&peers).unwrap();
    let first = peers[l]
        .0
        .propose(Bytes::from_static(b"first"))
        .await
        .unwrap();
    wait_for("all have the first txn", || {
        peers
            .iter()
            .all(|(_, s)| s.lock().unwrap().contains(&first))
    })
    .await;
    // A follower stops; the other two go on for 60 txns.
    let f = (0..3).find(|i| *i != l).unwrap();
    peers[f].0.abort();
    let futs: Vec<_> = (0..60)
        .map(|i| peers[l].0.propose(Bytes::from(format!("x{i}"))))
        .collect();
    let mut acked = Vec::new();
    for fut in futs {
        acked.push(fut.await.expect("committed by the other two"));
    }
    let last = *acked.last().unwrap();
    // Its log is released once the replicator is dropped.
    drop(peers.remove(f));
    peers.insert(f, start_one(&net, &dirs, f, 2, Some(4)).await);
    wait_for("the restarted follower catches up", || {
        peers[f].1.lock().unwrap().last() == Some(&last)
    })
    .await;
    let seen = peers[f].1.lock().unwrap().clone();
    for a in &acked {
        assert!(seen.contains(a), "{a} reached the restarted follower");
    }
    let stats = peers[l].0.stats();
    assert!(
        stats.window.diffs_from_disk >= 1 && stats.window.log_reads >= 10,
        "the DIFF was read from the leader's log: {:?}",
        stats.window
    );
    assert_eq!(stats.syncs, [0, 0, 0], "the leader itself never synced");
    for (r, _) in &peers {
        r.abort();
    }
}

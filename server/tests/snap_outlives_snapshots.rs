//! A leader's SNAP transfer outlives the snapshots the leader saves while it
//! runs, with three real `rzk` processes.
//!
//! The quorum core keeps the log a transfer still reads (`hold_after`,
//! `Wal::purge_holding`) and forgets only what storage really purged, so a
//! newer snapshot saved during a transfer does not cut it short; the
//! transfer then reads what follows its snapshot from the durable log
//! (docs/quorum-internals.md, "Snapshots, retention and the log a SNAP
//! needs"). Here a follower is stopped, the leader moves its newest snapshot
//! and its in-memory log window past it (so it must get SNAP, not DIFF), and
//! the follower restarts while writes go on: with `snapCount=2` the leader
//! snapshots back to back, and the follower is stopped (SIGSTOP) once its
//! SNAP has begun and continued once the leader saved a newer snapshot, so
//! the overlap is certain whatever the two speeds. The leader's `mntr` must show a transfer
//! that outlived a newer snapshot, none dropped for a purge, and the follower
//! must end with every acknowledged write and the others' zxid.
mod support;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use support::clients::{assert_acked_on_every_member, connect, open, Acked};
use support::procs::{field, procs, row, Ensemble, Layout};
use zookeeper_client as zk;

/// The state the follower is sent: `BIG_NODES` znodes of `BIG_NODE_BYTES`.
/// Large znodes make a snapshot cheap per byte (a copy, not per-node work)
/// while the transfer costs one message per 4 KiB.
const BIG_NODES: usize = 24;
const BIG_NODE_BYTES: usize = 1_000_000;

/// Every wait's deadline.
const WITHIN: Duration = Duration::from_secs(30);

/// A numeric `mntr` row of a member (0 when it does not answer).
async fn mntr_num(p: &support::procs::Member, key: &str) -> u64 {
    let mntr = p.four_letter("mntr").await;
    match row(&mntr, key) {
        Some(v) => v.trim().parse().unwrap_or_else(|_| panic!("zk_{key}: {v}")),
        None if mntr.is_empty() => 0,
        None => panic!("no zk_{key} in mntr of member {}:\n{mntr}", p.id),
    }
}

/// A member's last zxid (`srvr`), if it answers.
async fn zxid(p: &support::procs::Member) -> Option<u64> {
    let srvr = p.four_letter("srvr").await;
    let hex = field(&srvr, "Zxid:")?.strip_prefix("0x")?;
    u64::from_str_radix(hex, 16).ok()
}

/// The zxid of a member's newest snapshot (`mntr`), if it has one.
async fn last_snapshot_zxid(p: &support::procs::Member) -> Option<u64> {
    let mntr = p.four_letter("mntr").await;
    let hex = row(&mntr, "rzk_last_snapshot_zxid")?
        .trim()
        .strip_prefix("0x")?;
    u64::from_str_radix(hex, 16).ok()
}

/// Waits until `cond` holds, up to [`WITHIN`]; panics naming `what`, with
/// every member's log tail.
async fn until<F, Fut>(ens: &Ensemble, what: &str, mut cond: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + WITHIN;
    while !cond().await {
        if Instant::now() > deadline {
            for m in &ens.members {
                eprintln!("--- member {} log tail:\n{}", m.id, m.log_tail(30));
            }
            panic!("{what}: not within {WITHIN:?}");
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// A writer of small znodes under `/w` on `connect_string` until `stop`; a
/// create counts as acknowledged only once its reply arrived.
fn writer(
    connect_string: String,
    stop: Arc<AtomicBool>,
    acked: Acked,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let c = connect(&connect_string).await;
        let opts = zk::CreateMode::PersistentSequential.with_acls(zk::Acls::anyone_all());
        let mut i = 0u32;
        while !stop.load(Ordering::Relaxed) {
            let data = format!("v{i}").into_bytes();
            i += 1;
            match c.create("/w/n-", &data, &opts).await {
                Ok((_, seq)) => acked.lock().unwrap().push((format!("/w/n-{seq}"), data)),
                // No answer: the create may or may not have applied, so it
                // is not acknowledged; the next one goes on after a pause
                // (not to spin while the connection is re-established).
                Err(zk::Error::ConnectionLoss | zk::Error::Timeout | zk::Error::NoHosts) => {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
                Err(e) => panic!("writer: unexpected {e}"),
            }
        }
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_snap_transfer_outlives_the_leaders_newer_snapshots() {
    let root = tempfile::tempdir().unwrap();
    let layout = Layout::voters(3)
        // A snapshot every 1-2 txns: the leader saves them back to back.
        .set("snapCount", 2)
        // The smallest chunk: the transfer takes one message per 4 KiB.
        .set("rzk.snap.chunkBytesMax", 4096)
        // The smallest window: everything applied but 2 entries leaves
        // memory, so a follower behind the newest snapshot gets SNAP, and
        // the entries after a SNAP's snapshot are read from disk.
        .set("rzk.log.windowEntriesMax", 2)
        // The follower's sync (loading its own state, then the SNAP) has
        // 10 s before the leader gives up on it.
        .set("initLimit", 50);
    let mut ens = procs(root.path(), &layout);
    ens.spawn_all();
    let leader = ens.settled().await;
    let f = (leader + 1) % 3;
    let other = 3 - leader - f;
    let live = format!(
        "{},{}",
        ens.members[leader].addr(),
        ens.members[other].addr()
    );

    // The state, on all three members.
    let c = connect(&ens.members[leader].addr()).await;
    c.create("/big", b"", &open()).await.unwrap();
    c.create("/w", b"", &open()).await.unwrap();
    let data = vec![b'x'; BIG_NODE_BYTES];
    for i in 0..BIG_NODES {
        c.create(&format!("/big/n{i}"), &data, &open())
            .await
            .unwrap();
    }
    let synced = zxid(&ens.members[leader]).await.expect("leader zxid");
    until(&ens, "the follower holds the state", || {
        let m = &ens.members[f];
        async move { zxid(m).await >= Some(synced) }
    })
    .await;

    // The follower stops; the leader writes on until its newest snapshot is
    // past the follower's last zxid (and its window far past it): a DIFF is
    // no longer possible.
    let behind = zxid(&ens.members[f]).await.expect("follower zxid");
    ens.members[f].kill9();
    let stop = Arc::new(AtomicBool::new(false));
    let acked: Acked = Arc::default();
    let writers: Vec<_> = (0..2)
        .map(|_| writer(live.clone(), stop.clone(), acked.clone()))
        .collect();
    until(&ens, "a leader snapshot past the stopped follower", || {
        let m = &ens.members[leader];
        // A margin of a few txns: the core's DIFF floor is the lower of the
        // snapshot and the oldest entry its window keeps (2 here).
        async move { last_snapshot_zxid(m).await.is_some_and(|z| z > behind + 8) }
    })
    .await;

    // The follower comes back while the writes (and snapshots) go on: its
    // SNAP transfer must outlive a snapshot the leader saves meanwhile. So
    // that the overlap does not depend on the two speeds, the follower is
    // stopped (SIGSTOP) once the leader has begun its SNAP: the leader sends
    // at most 8 MiB beyond what the learner stored, far less than the
    // state, so the transfer cannot end before the follower is continued
    // (well inside initLimit), after the leader saved a newer snapshot.
    let snaps_sent = mntr_num(&ens.members[leader], "snap_count").await;
    ens.members[f].spawn();
    until(&ens, "the leader begins a SNAP to the follower", || {
        let m = &ens.members[leader];
        async move { mntr_num(m, "snap_count").await > snaps_sent }
    })
    .await;
    ens.members[f].pause();
    until(&ens, "a SNAP transfer outlived a newer snapshot", || {
        let m = &ens.members[leader];
        async move { mntr_num(m, "rzk_snap_outlived_snapshot_count").await >= 1 }
    })
    .await;
    ens.members[f].resume();
    stop.store(true, Ordering::Relaxed);
    for w in writers {
        w.await.expect("a writer panicked");
    }
    let acked = acked.lock().unwrap().clone();
    assert!(!acked.is_empty(), "no write was acknowledged");

    // Every member converges on one zxid.
    ens.settled().await;
    until(&ens, "one zxid on all three members", || {
        let ms = &ens.members;
        async move {
            let z = zxid(&ms[leader]).await;
            z.is_some() && zxid(&ms[f]).await == z && zxid(&ms[other]).await == z
        }
    })
    .await;
    let l = &ens.members[leader];
    assert!(mntr_num(l, "snap_count").await > snaps_sent, "no SNAP sent");
    assert_eq!(mntr_num(l, "rzk_snap_purged_count").await, 0);
    assert!(mntr_num(l, "rzk_snap_tail_from_disk_count").await >= 1);
    assert!(mntr_num(&ens.members[f], "rzk_learner_snap_count").await >= 1);

    // Every acknowledged write, and the state, on every member.
    assert_acked_on_every_member(&ens.members, &acked).await;
    for m in &ens.members {
        let c = connect(&m.addr()).await;
        c.sync("/").await.unwrap();
        let (children, _) = c.get_children("/big").await.unwrap();
        assert_eq!(children.len(), BIG_NODES, "member {}", m.id);
    }
}

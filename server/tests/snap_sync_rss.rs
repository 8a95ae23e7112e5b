//! A follower joins, by SNAP, a leader holding 1M znodes of 128 B (about 200 MB
//! of state), with real `rzk` processes. The leader streams its snapshot file
//! in bounded chunks and the follower writes them to a file and loads its tree
//! while reading that file, so neither side holds the state twice more in
//! memory. This measurement prints the peak RSS of both during the sync (run by
//! hand, release build, about two minutes):
//!
//! `cargo test -p rzk-server --release --test snap_sync_rss -- --ignored --nocapture`
//!
//! `RZK_SNAP_ZNODES` sets the number of znodes (default 1,000,000).

mod support;

use std::time::{Duration, Instant};

use futures::stream::{self, StreamExt};
use support::procs::{field, procs, Layout};
use zookeeper_client as zk;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "measurement: run by hand, see the crate doc"]
async fn snap_sync_of_a_million_znodes_peak_rss() {
    let znodes: usize = std::env::var("RZK_SNAP_ZNODES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000);
    let root = tempfile::tempdir().unwrap();
    let layout = Layout::voters(3)
        .set("tickTime", 500)
        .set("initLimit", 60)
        .set("syncLimit", 20)
        .set("minSessionTimeout", 1000)
        .set("snapCount", 400_000);
    let mut ens = procs(root.path(), &layout);
    let ms = &mut ens.members;
    // Two of three members form the quorum; the third joins later, empty.
    ms[0].spawn();
    ms[1].spawn();
    let leader = tokio::select! {
        _ = ms[0].wait_mode("leader", Duration::from_secs(60)) => 0,
        _ = ms[1].wait_mode("leader", Duration::from_secs(60)) => 1,
    };

    let t = Instant::now();
    let client = zk::Client::connector()
        .with_session_timeout(Duration::from_secs(30))
        .connect(&ms[leader].addr())
        .await
        .expect("connect");
    let open = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
    let parents = znodes.div_ceil(1000);
    for p in 0..parents {
        client.create(&format!("/p{p}"), b"", &open).await.unwrap();
    }
    let data = [b'x'; 128];
    let mut created = stream::iter(0..znodes)
        .map(|i| {
            let c = client.clone();
            let open = &open;
            let data = &data;
            async move {
                c.create(&format!("/p{}/n{}", i / 1000, i % 1000), data, open)
                    .await
                    .map(|_| ())
            }
        })
        .buffer_unordered(256);
    let mut n = 0usize;
    while let Some(r) = created.next().await {
        r.expect("create");
        n += 1;
    }
    drop(created);
    assert_eq!(n, znodes);
    let mntr = ms[leader].four_letter("mntr").await;
    let count: usize = field(&mntr, "zk_znode_count").unwrap().parse().unwrap();
    assert!(count > znodes, "{count} znodes");
    println!(
        "loaded {znodes} znodes of 128 B in {:.1} s; the leader holds {count}",
        t.elapsed().as_secs_f64()
    );
    let zxid = field(&ms[leader].four_letter("srvr").await, "Zxid:")
        .unwrap()
        .to_owned();
    let snap_bytes: u64 = std::fs::read_dir(ms[leader].dir.join("data").join("snap"))
        .map(|d| {
            d.flatten()
                .filter_map(|e| e.metadata().ok())
                .map(|m| m.len())
                .max()
                .unwrap_or(0)
        })
        .unwrap_or(0);
    let leader_rss_before = ms[leader].status_kib("VmRSS");
    let leader_hwm_before = ms[leader].status_kib("VmHWM");

    // The third member starts empty and must sync by SNAP: sample both
    // processes' RSS until it follows with the leader's zxid.
    let t = Instant::now();
    ms[2].spawn();
    let (mut leader_max, mut follower_max) = (0u64, 0u64);
    let deadline = Instant::now() + Duration::from_secs(600);
    loop {
        leader_max = leader_max.max(ms[leader].status_kib("VmRSS"));
        follower_max = follower_max.max(ms[2].status_kib("VmRSS"));
        let srvr = ms[2].four_letter("srvr").await;
        if field(&srvr, "Mode:") == Some("follower") && field(&srvr, "Zxid:") == Some(&zxid) {
            break;
        }
        assert!(Instant::now() < deadline, "the third member did not sync");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let took = t.elapsed();
    let mntr = ms[2].four_letter("mntr").await;
    let follower_count: usize = field(&mntr, "zk_znode_count").unwrap().parse().unwrap();
    assert_eq!(follower_count, count, "the follower holds every znode");
    // The member's empty start-up state is a "snapshot loaded" too: the SNAP
    // is the one with most of the znodes (the txns after the leader's last
    // snapshot follow it as proposals).
    let log = ms[2].log();
    let loads: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("snapshot loaded"))
        .collect();
    let snap_nodes = loads
        .iter()
        .filter_map(|l| l.split("nodes=").nth(1)?.trim().parse::<usize>().ok())
        .max()
        .unwrap_or(0);
    assert!(
        snap_nodes >= znodes / 2,
        "the follower loaded the leader's snapshot (SNAP): {loads:?}"
    );
    println!("the follower loaded a snapshot of {snap_nodes} znodes by SNAP");
    let mib = |k: u64| k as f64 / 1024.0;
    println!(
        "leader snapshot file {:.1} MiB; the third member synced by SNAP in {:.1} s",
        snap_bytes as f64 / (1 << 20) as f64,
        took.as_secs_f64()
    );
    println!(
        "leader: RSS {:.0} MiB before the sync, at most {:.0} MiB during it (sampled every 20 ms); \
         VmHWM {:.0} MiB before, {:.0} MiB after",
        mib(leader_rss_before),
        mib(leader_max),
        mib(leader_hwm_before),
        mib(ms[leader].status_kib("VmHWM"))
    );
    println!(
        "follower: RSS at most {:.0} MiB during the sync (sampled), {:.0} MiB after; VmHWM {:.0} MiB",
        mib(follower_max),
        mib(ms[2].status_kib("VmRSS")),
        mib(ms[2].status_kib("VmHWM"))
    );
    drop(client);
}

//! Replication metrics: ZooKeeper 3.8's `ServerMetrics` names for elections,
//! learner syncs, fsyncs and snapshots, and rzk's own, move when their event
//! happens, in `mntr`, in the Prometheus `/metrics` and in the AdminServer
//! (`monitor`, `last_snapshot`).
mod support;

use std::time::{Duration, Instant};

use support::clients::{client_at, http_get};
use support::procs::{free_port, Rzk};
use support::server::Ensemble;
use support::{four_letter, run_trapped};
use zookeeper_client as zk;

fn open() -> zk::CreateOptions<'static> {
    zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all())
}

/// A numeric `mntr` row (`zk_` prefix added), 0 when absent.
fn mntr_num(text: &str, key: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("zk_{key}\t")))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no numeric zk_{key} in mntr:\n{text}"))
}

/// A sample of the exposition text (`name value`).
fn sample(body: &str, name: &str) -> f64 {
    body.lines()
        .find_map(|l| l.strip_prefix(&format!("{name} ")))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no sample {name}:\n{body}"))
}

/// A standalone server (an ensemble of one) through the binary: its election,
/// its log's fsyncs and a snapshot show in `/metrics`, `mntr` and the
/// AdminServer.
#[tokio::test]
async fn standalone_election_fsync_and_snapshot_are_counted_everywhere() {
    let dir = tempfile::tempdir().unwrap();
    let (mport, aport) = (free_port(), free_port());
    let mut server = Rzk::spawn(
        dir.path(),
        &[
            "metricsProvider.className=org.apache.zookeeper.metrics.prometheus.PrometheusMetricsProvider"
                .into(),
            "metricsProvider.httpHost=127.0.0.1".into(),
            format!("metricsProvider.httpPort={mport}"),
            "admin.serverAddress=127.0.0.1".into(),
            format!("admin.serverPort={aport}"),
            "snapCount=20".into(),
        ],
    );
    server.wait_ready().await;
    let maddr = format!("127.0.0.1:{mport}");
    let aaddr = format!("127.0.0.1:{aport}");
    // Before any snapshot since the start: ZooKeeper's "none" answer.
    let (_, _, body) = http_get(&aaddr, "/commands/last_snapshot").await;
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["zxid"], "ffffffffffffffff", "{body}");
    assert_eq!(v["timestamp"], -1, "{body}");

    let c = zk::Client::connector()
        .with_session_timeout(Duration::from_secs(10))
        .connect(&server.addr())
        .await
        .unwrap();
    for i in 0..60 {
        c.create(&format!("/n{i}"), b"x", &open()).await.unwrap();
    }
    // snapCount=20: a snapshot is due; wait until it is durable.
    let deadline = Instant::now() + Duration::from_secs(30);
    let body = loop {
        let (status, _, body) = http_get(&maddr, "/metrics").await;
        assert_eq!(status, 200, "{body}");
        if sample(&body, "snapshottime_count") >= 1.0 {
            break body;
        }
        assert!(Instant::now() < deadline, "no snapshot counted:\n{body}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    for (name, kind) in [
        ("election_time", "summary"),
        ("follower_sync_time", "summary"),
        ("fsynctime", "summary"),
        ("snapshottime", "summary"),
        ("diff_count", "counter"),
        ("snap_count", "counter"),
        ("proposal_count", "counter"),
        ("learner_commit_received_count", "counter"),
        ("rzk_group_commit_size", "summary"),
        ("rzk_commit_stream_lag", "gauge"),
        ("rzk_last_snapshot_bytes", "gauge"),
        ("rzk_snap_outlived_snapshot_count", "counter"),
        ("rzk_snap_tail_from_disk_count", "counter"),
        ("rzk_snap_purged_count", "counter"),
    ] {
        assert!(
            body.contains(&format!("# TYPE {name} {kind}\n")),
            "{name} {kind} missing:\n{body}"
        );
    }
    assert!(sample(&body, "election_time_count") >= 1.0, "{body}");
    assert!(body.contains("election_time{quantile=\"0.5\"}"), "{body}");
    // 60 creates and a session: every txn was made durable by some fsync.
    assert!(sample(&body, "fsynctime_count") >= 1.0, "{body}");
    assert!(sample(&body, "rzk_group_commit_size_sum") >= 61.0, "{body}");
    assert!(sample(&body, "proposal_count") >= 61.0, "{body}");
    assert!(sample(&body, "rzk_last_snapshot_bytes") > 0.0, "{body}");

    // mntr and the AdminServer's monitor carry the same rows.
    let mntr = four_letter(&server.addr(), "mntr").await;
    assert!(mntr_num(&mntr, "cnt_snapshottime") >= 1.0, "{mntr}");
    assert!(mntr_num(&mntr, "cnt_election_time") >= 1.0, "{mntr}");
    assert!(mntr_num(&mntr, "cnt_fsynctime") >= 1.0, "{mntr}");
    let (_, _, monitor) = http_get(&aaddr, "/commands/monitor").await;
    let m: serde_json::Value = serde_json::from_str(&monitor).unwrap();
    assert!(m["cnt_snapshottime"].as_i64().unwrap() >= 1, "{monitor}");
    assert!(m["cnt_election_time"].as_i64().unwrap() >= 1, "{monitor}");
    let (_, _, body) = http_get(&aaddr, "/commands/lsnp").await;
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    let zxid = u64::from_str_radix(v["zxid"].as_str().unwrap(), 16).unwrap();
    assert!(zxid > 0 && zxid != u64::MAX, "{body}");
    assert!(v["timestamp"].as_i64().unwrap() > 1_600_000_000, "{body}");
}

async fn mntr(e: &Ensemble, i: usize) -> String {
    e.four_letter(i, "mntr").await
}

/// Waits until `cond` holds for member `i`'s mntr; returns that mntr.
async fn wait_mntr(e: &Ensemble, i: usize, what: &str, cond: impl Fn(&str) -> bool) -> String {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let text = mntr(e, i).await;
        if text.contains("zk_version") && cond(&text) {
            return text;
        }
        assert!(
            Instant::now() < deadline,
            "member {i}: {what} not within 30 s:\n{text}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Every member of an ensemble counts its election; a member that joins
/// empty after the leader's snapshot is synced by SNAP, which the leader
/// counts as sent (`snap_count`) and the learner as gone through, with its
/// sync time; COMMITs reaching followers are counted.
#[test]
fn ensemble_counts_elections_snap_syncs_and_commits() {
    run_trapped(async {
        let root = tempfile::tempdir().unwrap();
        let mut e = Ensemble::start(
            root.path(),
            3,
            &[("snapCount", "40"), ("admin.enableServer", "false")],
        )
        .await;
        let leader = e.wait_settled().await;
        for i in 0..3 {
            let m = wait_mntr(&e, i, "an election counted", |t| {
                mntr_num(t, "cnt_election_time") >= 1.0
            })
            .await;
            if i != leader {
                assert!(mntr_num(&m, "cnt_follower_sync_time") >= 1.0, "{m}");
            }
        }
        let joiner = (leader + 1) % 3;
        e.stop(joiner).await;
        // The joiner comes back empty (its myid kept).
        for entry in std::fs::read_dir(&e.members[joiner].dir).unwrap() {
            let path = entry.unwrap().path();
            if path.file_name().unwrap() == "myid" {
                continue;
            }
            if path.is_dir() {
                std::fs::remove_dir_all(&path).unwrap();
            } else {
                std::fs::remove_file(&path).unwrap();
            }
        }
        let c = client_at(
            &e.members[leader].client.to_string(),
            Duration::from_secs(10),
        )
        .await;
        // The leader keeps 500 txns below its newest snapshot for DIFF
        // (rzk-quorum's log_retained_below_snapshot_max): write past that.
        for i in 0..700 {
            c.create(&format!("/s{i}"), b"x", &open()).await.unwrap();
        }
        let before = wait_mntr(&e, leader, "a snapshot past the window", |t| {
            t.lines()
                .find_map(|l| l.strip_prefix("zk_rzk_last_snapshot_zxid\t0x"))
                .and_then(|h| u64::from_str_radix(h.trim(), 16).ok())
                .is_some_and(|z| z & 0xffff_ffff > 560)
        })
        .await;
        let snaps_sent = mntr_num(&before, "snap_count");
        e.restart(joiner).await;
        e.wait_settled().await;
        let after = wait_mntr(&e, leader, "a SNAP sent", |t| {
            mntr_num(t, "snap_count") > snaps_sent
        })
        .await;
        assert!(mntr_num(&after, "proposal_count") >= 700.0, "{after}");
        // The SNAP's transfer counters are in the leader's mntr; rzk-wal
        // holds the log a transfer reads, so none was dropped for a purge
        // (server/tests/snap_outlives_snapshots.rs makes them move).
        // (`mntr_num` fails on a missing row.)
        assert_eq!(mntr_num(&after, "rzk_snap_purged_count"), 0.0, "{after}");
        for name in [
            "rzk_snap_outlived_snapshot_count",
            "rzk_snap_tail_from_disk_count",
        ] {
            mntr_num(&after, name);
        }
        let j = wait_mntr(&e, joiner, "a SNAP gone through", |t| {
            mntr_num(t, "rzk_learner_snap_count") >= 1.0
        })
        .await;
        assert!(mntr_num(&j, "cnt_follower_sync_time") >= 1.0, "{j}");
        assert!(mntr_num(&j, "cnt_election_time") >= 1.0, "{j}");
        // A write after the sync reaches the joiner as a COMMIT.
        let commits = mntr_num(&j, "learner_commit_received_count");
        c.create("/after", b"x", &open()).await.unwrap();
        wait_mntr(&e, joiner, "a COMMIT counted", |t| {
            mntr_num(t, "learner_commit_received_count") > commits
        })
        .await;
        e.stop_all().await;
    });
}

/// `rzk.log.windowEntriesMax` reaches the quorum core: with a window of 100
/// entries, 300 creates leave at most 100 applied entries in memory and the
/// rest are counted as dropped (`rzk_log_window_dropped`, in mntr and
/// `/metrics`); the default window (10,000) drops none of them.
#[tokio::test]
async fn the_log_window_from_zoo_cfg_bounds_the_entries_held() {
    let mut dropped = Vec::new();
    for window in [Some(100), None] {
        let dir = tempfile::tempdir().unwrap();
        let mport = free_port();
        let mut lines = vec![
            "metricsProvider.className=org.apache.zookeeper.metrics.prometheus.PrometheusMetricsProvider"
                .to_owned(),
            "metricsProvider.httpHost=127.0.0.1".into(),
            format!("metricsProvider.httpPort={mport}"),
        ];
        if let Some(w) = window {
            lines.push(format!("rzk.log.windowEntriesMax={w}"));
        }
        let mut server = Rzk::spawn(dir.path(), &lines);
        server.wait_ready().await;
        let c = client_at(&server.addr(), Duration::from_secs(10)).await;
        for i in 0..300 {
            c.create(&format!("/w{i}"), b"x", &open()).await.unwrap();
        }
        // Every create was answered, so applied: the window has been trimmed.
        let mntr = four_letter(&server.addr(), "mntr").await;
        let (_, _, body) = http_get(&format!("127.0.0.1:{mport}"), "/metrics").await;
        assert!(
            body.contains("# TYPE rzk_log_window_dropped counter\n"),
            "{body}"
        );
        let n = mntr_num(&mntr, "rzk_log_window_dropped");
        assert_eq!(sample(&body, "rzk_log_window_dropped"), n, "{body}");
        assert_eq!(mntr_num(&mntr, "rzk_diff_from_disk_count"), 0.0, "{mntr}");
        // Nobody to send a SNAP to: the transfer counters are there, at 0,
        // the same in mntr and /metrics.
        for name in [
            "rzk_snap_outlived_snapshot_count",
            "rzk_snap_tail_from_disk_count",
            "rzk_snap_purged_count",
        ] {
            assert_eq!(mntr_num(&mntr, name), 0.0, "{mntr}");
            assert_eq!(sample(&body, name), 0.0, "{body}");
        }
        dropped.push(n);
    }
    // 300 creates and the session's create: 301 txns (an election's
    // rollover may add one), of which at most 100 stay.
    assert!(dropped[0] >= 201.0, "window 100 dropped {}", dropped[0]);
    assert_eq!(dropped[1], 0.0, "the default window dropped {}", dropped[1]);
}

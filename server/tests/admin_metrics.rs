//! The AdminServer and the Prometheus endpoint through the `rzk` binary
//! ZooKeeper's paths, names and types, and the same numbers as `mntr` (one
//! stats snapshot behind all three). The comparison of every command's JSON
//! keys with Apache ZooKeeper 3.8's AdminServer is
//! `admin_json_keys_match_apache_zookeeper` (ignored here; run by
//! `.ci/stages/45-ops.sh`).
mod support;

use std::collections::BTreeSet;
use std::time::Duration;

use serde_json::Value;
use support::clients::{http_get, http_status};
use support::four_letter;
use support::procs::{free_port, Rzk};
use zookeeper_client as zk;

const PROMETHEUS: &str =
    "metricsProvider.className=org.apache.zookeeper.metrics.prometheus.PrometheusMetricsProvider";

/// Every command rzk serves, by canonical name.
const COMMANDS: &[&str] = &[
    "configuration",
    "connection_stat_reset",
    "connections",
    "dirs",
    "dump",
    "environment",
    "get_trace_mask",
    "hash",
    "initial_configuration",
    "is_read_only",
    "last_snapshot",
    "leader",
    "monitor",
    "observer_connection_stat_reset",
    "observers",
    "ruok",
    "server_stats",
    "stat_reset",
    "stats",
    "voting_view",
    "watch_summary",
    "watches",
    "watches_by_path",
    "zabstate",
];

fn mntr_value(text: &str, key: &str) -> String {
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("zk_{key}\t")))
        .unwrap_or_else(|| panic!("no zk_{key} in mntr:\n{text}"))
        .to_owned()
}

/// A client with an ephemeral under /w and a data and a child watch on /w;
/// the watchers are returned because dropping one removes its watch.
async fn some_state(addr: &str) -> (zk::Client, Vec<zk::OneshotWatcher>) {
    let c = zk::Client::connector()
        .with_session_timeout(Duration::from_secs(10))
        .connect(addr)
        .await
        .unwrap();
    let opts = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
    c.create("/w", b"x", &opts).await.unwrap();
    let eph = zk::CreateMode::Ephemeral.with_acls(zk::Acls::anyone_all());
    c.create("/w/e", b"y", &eph).await.unwrap();
    let (_, _, w1) = c.get_and_watch_data("/w").await.unwrap();
    let (_, _, w2) = c.get_and_watch_children("/w").await.unwrap();
    (c, vec![w1, w2])
}

#[tokio::test]
async fn metrics_endpoint_serves_zookeepers_names_and_types() {
    let dir = tempfile::tempdir().unwrap();
    let mport = free_port();
    let mut server = Rzk::spawn(
        dir.path(),
        &[
            PROMETHEUS.into(),
            "metricsProvider.httpHost=127.0.0.1".into(),
            format!("metricsProvider.httpPort={mport}"),
            "admin.enableServer=false".into(),
        ],
    );
    server.wait_ready().await;
    let (c, _watchers) = some_state(&server.addr()).await;
    for i in 0..20 {
        c.get_data("/w").await.unwrap();
        c.set_data("/w", format!("{i}").as_bytes(), None)
            .await
            .unwrap();
    }
    let maddr = format!("127.0.0.1:{mport}");
    let (status, ctype, body) = http_get(&maddr, "/metrics").await;
    assert_eq!(status, 200, "{body}");
    assert!(ctype.starts_with("text/plain; version=0.0.4"), "{ctype}");
    for (name, kind) in [
        ("znode_count", "gauge"),
        ("approximate_data_size", "gauge"),
        ("num_alive_connections", "gauge"),
        ("outstanding_requests", "gauge"),
        ("watch_count", "gauge"),
        ("ephemerals_count", "gauge"),
        ("global_sessions", "gauge"),
        ("avg_latency", "gauge"),
        ("min_latency", "gauge"),
        ("max_latency", "gauge"),
        ("packets_received", "gauge"),
        ("packets_sent", "gauge"),
        ("readlatency", "summary"),
        ("updatelatency", "summary"),
    ] {
        assert!(
            body.contains(&format!("# TYPE {name} {kind}\n")),
            "{name} {kind} missing:\n{body}"
        );
    }
    // One snapshot behind both: the figures that did not move agree with mntr.
    let mntr = four_letter(&server.addr(), "mntr").await;
    let value = |name: &str| -> String {
        body.lines()
            .find_map(|l| l.strip_prefix(&format!("{name} ")))
            .unwrap_or_else(|| panic!("no {name} sample:\n{body}"))
            .to_owned()
    };
    for key in [
        "znode_count",
        "ephemerals_count",
        "watch_count",
        "global_sessions",
    ] {
        assert_eq!(value(key), mntr_value(&mntr, key), "{key}");
    }
    // 2 creates and 20 setData.
    assert_eq!(value("updatelatency_count"), "22");
    assert!(body.contains("readlatency{quantile=\"0.99\"}"), "{body}");
    assert!(body.contains("rzk_last_applied_zxid "), "{body}");
    // Standalone: no quorum gauges, as ZooKeeper registers them only in an ensemble.
    assert!(!body.contains("quorum_size"), "{body}");
    let (status, _, _) = http_get(&maddr, "/nothing").await;
    assert_eq!(status, 404);
}

#[tokio::test]
async fn admin_commands_answer_json_from_the_same_snapshot() {
    let dir = tempfile::tempdir().unwrap();
    let aport = free_port();
    let mut server = Rzk::spawn(
        dir.path(),
        &[
            "admin.serverAddress=127.0.0.1".into(),
            format!("admin.serverPort={aport}"),
        ],
    );
    server.wait_ready().await;
    let (c, _watchers) = some_state(&server.addr()).await;
    let sid = c.session_id().0;
    let aaddr = format!("127.0.0.1:{aport}");
    let get = |cmd: String| {
        let aaddr = aaddr.clone();
        async move {
            let (status, ctype, body) = http_get(&aaddr, &format!("/commands/{cmd}")).await;
            let v: Value = serde_json::from_str(&body)
                .unwrap_or_else(|e| panic!("{cmd}: not JSON ({e}): {body}"));
            (status, ctype, v)
        }
    };
    for cmd in COMMANDS {
        let (status, ctype, v) = get(cmd.to_string()).await;
        assert_eq!(status, 200, "{cmd}: {v}");
        assert_eq!(ctype, "application/json", "{cmd}");
        assert_eq!(v["command"], *cmd, "{v}");
        if *cmd == "leader" {
            // ZooKeeper's answer on a standalone server.
            assert_eq!(v["error"], "server is not initialized", "{v}");
        } else {
            assert!(v["error"].is_null(), "{cmd}: {v}");
        }
    }
    let (_, _, monitor) = get("mntr".into()).await;
    assert_eq!(monitor["command"], "monitor");
    let mntr = four_letter(&server.addr(), "mntr").await;
    for key in [
        "znode_count",
        "ephemerals_count",
        "watch_count",
        "global_sessions",
    ] {
        assert_eq!(monitor[key].to_string(), mntr_value(&mntr, key), "{key}");
    }
    assert_eq!(monitor["server_state"], "standalone");
    let (_, _, watches) = get("watches".into()).await;
    let paths = &watches["session_id_to_watched_paths"][sid.to_string()];
    assert_eq!(paths, &serde_json::json!(["/w"]), "{watches}");
    let (_, _, by_path) = get("wchp".into()).await;
    assert_eq!(
        by_path["path_to_session_ids"]["/w"],
        serde_json::json!([sid])
    );
    let (_, _, dump) = get("dump".into()).await;
    assert_eq!(
        dump["session_id_to_ephemeral_paths"][sid.to_string()],
        serde_json::json!(["/w/e"])
    );
    let (_, _, cons) = get("cons".into()).await;
    assert_eq!(cons["connections"][0]["session_id"], sid);
    let (_, _, conf) = get("conf".into()).await;
    assert_eq!(conf["client_port"], server.port);
    let (_, _, icfg) = get("initial_configuration".into()).await;
    assert!(
        icfg["initial_configuration"]
            .as_str()
            .unwrap()
            .contains(&format!("admin.serverPort={aport}")),
        "{icfg}"
    );
    // stat_reset acts on the counters every surface reads (the loop above
    // ran it once already).
    c.get_data("/w").await.unwrap();
    let (_, _, before) = get("srvr".into()).await;
    assert!(before["server_stats"]["packets_received"].as_u64().unwrap() > 0);
    get("stat_reset".into()).await;
    let (_, _, after) = get("srvr".into()).await;
    assert_eq!(after["server_stats"]["packets_received"], 0, "{after}");
    let (status, _, missing) = get("no_such_command".into()).await;
    assert_eq!(status, 404);
    assert!(missing["error"]
        .as_str()
        .unwrap()
        .contains("no_such_command"));
    let (status, _, index) = http_get(&aaddr, "/commands").await;
    assert_eq!(status, 200);
    for cmd in COMMANDS {
        assert!(
            index.contains(&format!("/commands/{cmd}\"")),
            "{cmd}: {index}"
        );
    }
    drop(c);
}

/// The keys of a JSON value, as paths (`server_stats.packets_sent`,
/// `connections[].session_id`); the entries of maps keyed by data (session
/// ids, paths, expiry times, environment) are left out.
fn key_paths(v: &Value, prefix: &str, out: &mut BTreeSet<String>) {
    const DATA_KEYED: &[&str] = &[
        "expiry_time_to_session_ids",
        "session_id_to_ephemeral_paths",
        "session_id_to_watched_paths",
        "path_to_session_ids",
        "current_config",
    ];
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                let p = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                out.insert(p.clone());
                if !DATA_KEYED.contains(&k.as_str()) {
                    key_paths(x, &p, out);
                }
            }
        }
        Value::Array(items) => {
            for x in items {
                key_paths(x, &format!("{prefix}[]"), out);
            }
        }
        _ => {}
    }
}

/// Keys ZooKeeper has and rzk does not, with the reason (the report lists them).
fn allowed_missing(command: &str, key: &str) -> bool {
    // ZooKeeper's monitor adds every ServerMetrics counter and summary
    // (request processor queues, fsync/snapshot times, JVM pauses, ...):
    // rzk reports the gauges mntr has, the rest are not measured.
    if command == "monitor" {
        return true;
    }
    match (command, key) {
        // Java/JVM facts rzk does not have.
        ("environment", k) => {
            k.starts_with("java.")
                || k.starts_with("os.memory")
                || k == "user.name"
                || k == "user.home"
                || k == "os.version"
        }
        // NIO selector interest set: rzk has no selector.
        (_, k) if k.ends_with("interest_ops") => true,
        // Not measured by rzk: fsyncs over fsync.warningthresholdms, and
        // ZooKeeper's "metrics provider is null" flag.
        (_, k) if k.ends_with("fsync_threshold_exceed_count") || k.ends_with("provider_null") => {
            true
        }
        _ => false,
    }
}

#[tokio::test]
#[ignore = "needs Apache ZooKeeper 3.8 (Debian package zookeeper) and Java"]
async fn admin_json_keys_match_apache_zookeeper() {
    let dir = tempfile::tempdir().unwrap();
    let zk_dir = dir.path().join("zk");
    let rzk_dir = dir.path().join("rzk");
    std::fs::create_dir_all(&zk_dir).unwrap();
    std::fs::create_dir_all(&rzk_dir).unwrap();
    let (zk_port, zk_admin, rzk_admin) = (free_port(), free_port(), free_port());
    let zk_cfg = zk_dir.join("zoo.cfg");
    std::fs::write(
        &zk_cfg,
        format!(
            "tickTime=2000\ndataDir={}\nclientPort={zk_port}\nclientPortAddress=127.0.0.1\n\
             admin.serverAddress=127.0.0.1\nadmin.serverPort={zk_admin}\n4lw.commands.whitelist=*\n",
            zk_dir.join("data").display()
        ),
    )
    .unwrap();
    // The zookeeper jar's manifest names Jetty but not the servlet API it
    // needs, nor a log binding.
    let cp = [
        "/usr/share/java/zookeeper.jar",
        "/usr/share/java/servlet-api.jar",
        "/usr/share/java/slf4j-simple.jar",
    ]
    .join(":");
    struct Kill(std::process::Child);
    impl Drop for Kill {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let zk_log = std::fs::File::create(zk_dir.join("zk.log")).unwrap();
    let zk_guard = Kill(
        std::process::Command::new("java")
            .args([
                "-Xmx256m",
                "-cp",
                &cp,
                "org.apache.zookeeper.server.ZooKeeperServerMain",
            ])
            .arg(&zk_cfg)
            .stdout(zk_log.try_clone().unwrap())
            .stderr(zk_log)
            .spawn()
            .expect("java"),
    );
    let mut rzk = Rzk::spawn(
        &rzk_dir,
        &[
            "admin.serverAddress=127.0.0.1".into(),
            format!("admin.serverPort={rzk_admin}"),
        ],
    );
    rzk.wait_ready().await;
    let zk_addr = format!("127.0.0.1:{zk_port}");
    let zk_admin_addr = format!("127.0.0.1:{zk_admin}");
    let zk_log = || std::fs::read_to_string(zk_dir.join("zk.log")).unwrap_or_default();
    let mut ready = false;
    for _ in 0..900 {
        if four_letter(&zk_addr, "ruok").await == "imok"
            && http_status(&zk_admin_addr, "/commands/ruok").await == Some(200)
        {
            ready = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(ready, "Apache ZooKeeper did not start:\n{}", zk_log());
    // The same state on both: a session with an ephemeral and two watches.
    let _zc = some_state(&zk_addr).await;
    let _rc = some_state(&rzk.addr()).await;
    let rzk_admin_addr = format!("127.0.0.1:{rzk_admin}");
    let mut report = Vec::new();
    for cmd in COMMANDS {
        let (zs, _, zbody) = http_get(&zk_admin_addr, &format!("/commands/{cmd}")).await;
        let (rs, _, rbody) = http_get(&rzk_admin_addr, &format!("/commands/{cmd}")).await;
        assert_eq!(zs, 200, "ZooKeeper {cmd}: {zbody}");
        assert_eq!(rs, 200, "rzk {cmd}: {rbody}");
        let zv: Value = serde_json::from_str(&zbody).unwrap();
        let rv: Value = serde_json::from_str(&rbody).unwrap();
        let (mut zkeys, mut rkeys) = (BTreeSet::new(), BTreeSet::new());
        key_paths(&zv, "", &mut zkeys);
        key_paths(&rv, "", &mut rkeys);
        // rzk's own figures carry the `rzk_` prefix (as its Prometheus metrics
        // do), so a dashboard keyed on ZooKeeper's names never meets them; any
        // other key ZooKeeper lacks is invented and fails the test.
        let invented: Vec<_> = rkeys
            .difference(&zkeys)
            .filter(|k| !k.rsplit('.').next().unwrap_or(k).starts_with("rzk_"))
            .collect();
        let missing: Vec<_> = zkeys
            .difference(&rkeys)
            .filter(|k| !allowed_missing(cmd, k))
            .collect();
        if !invented.is_empty() || !missing.is_empty() {
            report.push(format!(
                "{cmd}: keys only rzk has {invented:?}; keys only ZooKeeper has {missing:?}"
            ));
        }
    }
    drop(zk_guard);
    assert!(report.is_empty(), "{}", report.join("\n"));
}

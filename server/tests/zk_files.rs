//! `rzk snapshot dump` and `rzk log dump` on a data directory written by a
//! real Apache ZooKeeper 3.8 under a load with every node type (ignored here:
//! it needs Java and Debian's zookeeper package; `.ci/stages/45-ops.sh` runs
//! it), and their errors on truncated and corrupted copies.
mod support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use support::four_letter;
use support::procs::free_port;
use zookeeper_client as zk;

fn rzk(args: &[&std::ffi::OsStr]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_rzk"))
        .args(args)
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

async fn load(addr: &str) {
    let c = zk::Client::connector()
        .with_session_timeout(Duration::from_secs(10))
        .connect(addr)
        .await
        .unwrap();
    let open = zk::Acls::anyone_all();
    let persistent = zk::CreateMode::Persistent.with_acls(open);
    c.create("/app", b"root", &persistent).await.unwrap();
    for i in 0..40 {
        let p = format!("/app/n{i}");
        c.create(&p, b"v", &persistent).await.unwrap();
        c.set_data(&p, format!("w{i}").as_bytes(), None)
            .await
            .unwrap();
    }
    let seq = zk::CreateMode::PersistentSequential.with_acls(open);
    c.create("/app/seq-", b"s", &seq).await.unwrap();
    let eph = zk::CreateMode::Ephemeral.with_acls(open);
    c.create("/app/eph", b"e", &eph).await.unwrap();
    let cont = zk::CreateMode::Container.with_acls(open);
    c.create("/cont", b"", &cont).await.unwrap();
    c.create("/cont/child", b"", &persistent).await.unwrap();
    let ttl = zk::CreateMode::Persistent
        .with_acls(open)
        .with_ttl(Duration::from_secs(3600));
    c.create("/ttl", b"t", &ttl).await.unwrap();
    c.delete("/app/n0", None).await.unwrap();
    let read_only = [zk::Acl::new(zk::Permission::READ, zk::AuthId::anyone())];
    c.set_acl("/app/n1", &read_only, None).await.unwrap();
    let mut m = c.new_multi_writer();
    m.add_create("/app/m1", b"m", &persistent).unwrap();
    m.add_set_data("/app/n2", b"mm", None).unwrap();
    m.commit().await.unwrap();
    drop(c);
}

fn zk_dir_files(dir: &Path, prefix: &str) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir.join("version-2"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.file_name().unwrap().to_str().unwrap().starts_with(prefix))
        .collect();
    v.sort();
    v
}

#[tokio::test]
#[ignore = "needs Apache ZooKeeper 3.8 (Debian package zookeeper) and Java"]
async fn dumps_read_a_data_dir_written_by_apache_zookeeper() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let port = free_port();
    let cfg = dir.path().join("zoo.cfg");
    std::fs::write(
        &cfg,
        format!(
            "tickTime=2000\ndataDir={}\nclientPort={port}\nclientPortAddress=127.0.0.1\n\
             admin.enableServer=false\nsnapCount=20\n4lw.commands.whitelist=*\n",
            data.display()
        ),
    )
    .unwrap();
    let mut java = Command::new("java")
        .args([
            "-Xmx256m",
            "-Dzookeeper.extendedTypesEnabled=true",
            "-Dzookeeper.snapCount=20",
            "-cp",
            "/usr/share/java/zookeeper.jar:/usr/share/java/slf4j-nop.jar",
            "org.apache.zookeeper.server.ZooKeeperServerMain",
        ])
        .arg(&cfg)
        .spawn()
        .expect("java");
    let addr = format!("127.0.0.1:{port}");
    let mut up = false;
    for _ in 0..900 {
        if four_letter(&addr, "ruok").await == "imok" {
            up = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    if !up {
        let _ = java.kill();
        panic!("Apache ZooKeeper did not start");
    }
    let loaded = tokio::time::timeout(Duration::from_secs(60), load(&addr)).await;
    // The dropped client's closeSession reaches the log: no session is left.
    let mut closed = false;
    for _ in 0..300 {
        if four_letter(&addr, "mntr")
            .await
            .contains("zk_global_sessions\t0\n")
        {
            closed = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let _ = java.kill();
    let _ = java.wait();
    assert!(loaded.is_ok(), "the load did not finish in 60 s");
    assert!(closed, "the session was not closed");

    let (ok, out, err) = rzk(&["log".as_ref(), "dump".as_ref(), data.as_os_str()]);
    assert!(ok, "{err}");
    let txns: Vec<&str> = out.lines().filter(|l| l.starts_with("zxid ")).collect();
    // Contiguous zxids from 1: nothing skipped across files.
    for (i, l) in txns.iter().enumerate() {
        let zxid = l.split_whitespace().nth(1).unwrap();
        assert_eq!(zxid, format!("0x{:x}", i + 1), "{l}");
    }
    for (kind, path) in [
        ("createSession", ""),
        ("create2", "/app/n39"),
        ("setData", "/app/n39"),
        ("delete", "/app/n0"),
        ("setACL", "/app/n1"),
        ("createContainer", "/cont"),
        ("createTTL", "/ttl"),
        ("multi", "/app/m1 /app/n2"),
        ("closeSession", ""),
    ] {
        let needle = format!(" {kind}{}{path}", if path.is_empty() { "" } else { " " });
        assert!(
            txns.iter().any(|l| l.contains(&needle)),
            "no {needle:?} in\n{out}"
        );
    }
    let snaps = zk_dir_files(&data, "snapshot.");
    assert!(snaps.len() >= 3, "{snaps:?}");
    for s in &snaps {
        let (ok, out, err) = rzk(&["snapshot".as_ref(), "dump".as_ref(), s.as_os_str()]);
        assert!(ok, "{}: {err}", s.display());
        assert!(out.contains("\n/zookeeper\n"), "{out}");
    }
    let (_, first, _) = rzk(&[
        "snapshot".as_ref(),
        "dump".as_ref(),
        "--summary".as_ref(),
        snaps[0].as_os_str(),
    ]);
    assert!(first.contains("znodes: 4"), "{first}");

    // A log cut inside its second record, and one with a flipped byte.
    let log = &zk_dir_files(&data, "log.")[0];
    let bytes = std::fs::read(log).unwrap();
    let cut = dir.path().join("log.1");
    std::fs::write(&cut, &bytes[..16 + 8 + 4 + 60]).unwrap();
    let (ok, _, err) = rzk(&["log".as_ref(), "dump".as_ref(), cut.as_os_str()]);
    assert!(!ok);
    assert!(
        err.contains("log.1") && err.contains("offset") && err.contains("truncated"),
        "{err}"
    );
    let mut flipped = bytes.clone();
    flipped[16 + 12 + 20] ^= 0x40;
    std::fs::write(&cut, &flipped).unwrap();
    let (ok, _, err) = rzk(&["log".as_ref(), "dump".as_ref(), cut.as_os_str()]);
    assert!(!ok);
    assert!(
        err.contains("offset 16") && err.contains("checksum"),
        "{err}"
    );
    let snap = std::fs::read(snaps.last().unwrap()).unwrap();
    let bad = dir.path().join("snapshot.bad");
    std::fs::write(&bad, &snap[..snap.len() / 2]).unwrap();
    let (ok, _, err) = rzk(&["snapshot".as_ref(), "dump".as_ref(), bad.as_os_str()]);
    assert!(!ok);
    assert!(
        err.contains("snapshot.bad") && err.contains("offset"),
        "{err}"
    );
}

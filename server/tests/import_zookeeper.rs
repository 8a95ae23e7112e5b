//! `rzk import-zookeeper` on a data directory written by a real Apache
//! ZooKeeper 3.8 (ignored here: it needs Java and Debian's zookeeper package;
//! `.ci/stages/45-ops.sh` runs it). Every znode is read through a client from
//! ZooKeeper before it stops and from rzk after the import: data, ACL and
//! stat must be the same, ephemerals of a live session kept (and the session
//! resumable with ZooKeeper's password), those of a closed one gone.
mod support;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use support::four_letter;
use support::procs::{free_port, Rzk};
use zookeeper_client as zk;

/// Every znode by path: data, ACL, stat.
type Snapshot = BTreeMap<String, (Vec<u8>, Vec<zk::Acl>, zk::Stat)>;

/// A digest identity (`ops:secret`, hashed as ZooKeeper's
/// DigestAuthenticationProvider does), so an ACL with a digest id is carried
/// over too.
const DIGEST_ID: &str = "ops:w4PIv8/Wzcq4qj4/MfEQ8pvUSS4=";

async fn read_all(c: &zk::Client) -> Snapshot {
    let mut out = BTreeMap::new();
    let mut stack = vec!["/".to_owned()];
    while let Some(p) = stack.pop() {
        let (data, stat) = c.get_data(&p).await.unwrap();
        let (acl, _) = c.get_acl(&p).await.unwrap();
        for child in c.list_children(&p).await.unwrap() {
            stack.push(if p == "/" {
                format!("/{child}")
            } else {
                format!("{p}/{child}")
            });
        }
        out.insert(p, (data, acl, stat));
    }
    out
}

/// A load with every node type; leaves `owner`'s session open with its
/// ephemerals, and closes another session that had ephemerals.
async fn load(owner: &zk::Client, addr: &str) {
    let open = zk::Acls::anyone_all();
    let persistent = zk::CreateMode::Persistent.with_acls(open);
    owner.create("/app", b"root", &persistent).await.unwrap();
    for i in 0..60 {
        let p = format!("/app/n{i}");
        owner.create(&p, b"v", &persistent).await.unwrap();
        owner
            .set_data(&p, format!("w{i}").as_bytes(), None)
            .await
            .unwrap();
    }
    let seq = zk::CreateMode::PersistentSequential.with_acls(open);
    for _ in 0..3 {
        owner.create("/app/seq-", b"s", &seq).await.unwrap();
    }
    let eph = zk::CreateMode::Ephemeral.with_acls(open);
    owner.create("/app/eph", b"e", &eph).await.unwrap();
    let eph_seq = zk::CreateMode::EphemeralSequential.with_acls(open);
    owner.create("/app/eseq-", b"", &eph_seq).await.unwrap();
    let cont = zk::CreateMode::Container.with_acls(open);
    owner.create("/cont", b"", &cont).await.unwrap();
    owner
        .create("/cont/child", b"c", &persistent)
        .await
        .unwrap();
    let ttl = zk::CreateMode::Persistent
        .with_acls(open)
        .with_ttl(Duration::from_secs(3600));
    owner.create("/ttl", b"t", &ttl).await.unwrap();
    let ttl_seq = zk::CreateMode::PersistentSequential
        .with_acls(open)
        .with_ttl(Duration::from_secs(3600));
    owner.create("/app/tseq-", b"", &ttl_seq).await.unwrap();
    owner.delete("/app/n0", None).await.unwrap();
    let read_only = [zk::Acl::new(zk::Permission::READ, zk::AuthId::anyone())];
    owner.set_acl("/app/n1", &read_only, None).await.unwrap();
    let digest = [
        zk::Acl::new(zk::Permission::ALL, zk::AuthId::new("digest", DIGEST_ID)),
        zk::Acl::new(zk::Permission::READ, zk::AuthId::anyone()),
    ];
    let digest = zk::CreateMode::Persistent.with_acls(zk::Acls::new(&digest));
    owner.create("/secret", b"s", &digest).await.unwrap();
    owner.set_data("/app/n5", b"s1", None).await.unwrap();
    let mut m = owner.new_multi_writer();
    m.add_create("/app/m1", b"m", &persistent).unwrap();
    m.add_set_data("/app/n2", b"mm", None).unwrap();
    m.add_delete("/app/n3", None).unwrap();
    m.commit().await.unwrap();
    // A failed multi is logged too (as an error txn): it changes nothing.
    let mut m = owner.new_multi_writer();
    m.add_create("/app/m2", b"m", &persistent).unwrap();
    m.add_delete("/absent", None).unwrap();
    assert!(m.commit().await.is_err());

    // A second session with ephemerals, closed: they go with it.
    let other = zk::Client::connector()
        .with_session_timeout(Duration::from_secs(10))
        .connect(addr)
        .await
        .unwrap();
    other.create("/app/gone", b"", &eph).await.unwrap();
    drop(other);
    // More writes after the last snapshot (snapCount=20), so the import
    // replays the log after it.
    for i in 0..5 {
        owner
            .set_data("/app/n4", format!("late{i}").as_bytes(), None)
            .await
            .unwrap();
    }
}

/// The ZooKeeper process, killed when the test ends however it ends.
/// ZooKeeper's process and its client port, held while it runs.
struct Java {
    child: std::process::Child,
    _port: rzk_testkit::ports::Port,
}

impl Drop for Java {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn zookeeper(dir: &Path) -> (Java, String) {
    let port = free_port();
    let cfg = dir.join("zoo.cfg");
    std::fs::write(
        &cfg,
        format!(
            "tickTime=2000\ndataDir={}\nclientPort={port}\nclientPortAddress=127.0.0.1\n\
             admin.enableServer=false\nsnapCount=20\n4lw.commands.whitelist=*\n",
            dir.join("zk").display()
        ),
    )
    .unwrap();
    let java = Command::new("java")
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
    (
        Java {
            child: java,
            _port: port,
        },
        addr,
    )
}

async fn wait_ruok(addr: &str) -> bool {
    for _ in 0..900 {
        if four_letter(addr, "ruok").await == "imok" {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    false
}

async fn wait_gone(c: &zk::Client, path: &str) -> bool {
    for _ in 0..300 {
        if c.check_stat(path).await.unwrap().is_none() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    false
}

#[tokio::test]
#[ignore = "needs zookeeper: Apache ZooKeeper 3.8 (Debian package zookeeper) and Java"]
async fn import_keeps_every_znode_of_a_real_zookeeper_data_dir() {
    let dir = tempfile::tempdir().unwrap();
    let (java, addr) = zookeeper(dir.path());
    assert!(wait_ruok(&addr).await, "Apache ZooKeeper did not start");
    let owner = zk::Client::connector()
        .with_session_timeout(Duration::from_secs(20))
        .with_detached()
        .connect(&addr);
    let owner = tokio::time::timeout(Duration::from_secs(30), owner)
        .await
        .expect("no session with ZooKeeper in 30 s")
        .unwrap();
    let loaded = tokio::time::timeout(Duration::from_secs(60), load(&owner, &addr)).await;
    let gone = wait_gone(&owner, "/app/gone").await;
    let before = tokio::time::timeout(Duration::from_secs(60), read_all(&owner))
        .await
        .expect("reading ZooKeeper's tree took over 60 s");
    let session = owner.session().clone();
    // kill -9: ZooKeeper acknowledged every write after its fsync, so its
    // files hold them all; the owner's session stays in them, open.
    drop(java);
    drop(owner);
    assert!(loaded.is_ok(), "the load did not finish in 60 s");
    assert!(gone, "the closed session's ephemeral stayed");
    assert!(before.contains_key("/app/eph"), "{before:?}");

    // A target that is not empty is refused, and keeps what it had.
    let taken = dir.path().join("taken");
    std::fs::create_dir(&taken).unwrap();
    std::fs::write(taken.join("keep"), b"x").unwrap();
    let zk_data = dir.path().join("zk");
    let import = |to: &Path| {
        Command::new(env!("CARGO_BIN_EXE_rzk"))
            .args(["import-zookeeper", "--from"])
            .arg(&zk_data)
            .arg("--to")
            .arg(to)
            .output()
            .unwrap()
    };
    let out = import(&taken);
    assert!(!out.status.success());
    assert_eq!(std::fs::read(taken.join("keep")).unwrap(), b"x");

    let rzk_dir = dir.path().join("rzk");
    std::fs::create_dir(&rzk_dir).unwrap();
    let out = import(&rzk_dir.join("data"));
    let report = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{report}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(report.contains("txns replayed"), "{report}");

    let mut rzk = Rzk::spawn(&rzk_dir, &[]);
    rzk.wait_ready().await;
    let reader = zk::Client::connector()
        .connect(&rzk.addr())
        .await
        .unwrap_or_else(|e| panic!("{e}: {}", rzk.log_text()));
    let after = tokio::time::timeout(Duration::from_secs(60), read_all(&reader))
        .await
        .expect("reading rzk's tree took over 60 s");
    let paths = |s: &Snapshot| s.keys().cloned().collect::<Vec<_>>();
    assert_eq!(paths(&after), paths(&before), "{}", rzk.log_text());
    for (p, want) in &before {
        assert_eq!(&after[p], want, "{p}");
    }
    // The session ZooKeeper gave the owner resumes on rzk with its password.
    let resumed = zk::Client::connector()
        .with_session(session.clone())
        .connect(&rzk.addr())
        .await
        .unwrap();
    assert_eq!(resumed.session_id(), session.id());
    resumed.delete("/app/eph", None).await.unwrap();
    // New writes get zxids after every imported one.
    let last = before.values().map(|(_, _, s)| s.mzxid.max(s.pzxid)).max();
    let (stat, _) = reader
        .create(
            "/after",
            b"",
            &zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all()),
        )
        .await
        .unwrap();
    assert!(Some(stat.czxid) > last, "{stat:?} {last:?}");
}

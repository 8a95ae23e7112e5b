//! Restart and snapshots: a server that replays its log at start-up does not
//! begin a snapshot before it serves (the replay, and so the first answered
//! read, is not slowed by serialising the tree beside it), and begins the
//! snapshot that is due with the first write once it serves. The newest
//! snapshot is loaded while the log is recovered, from the pass that checks its
//! checksum; one whose checksum fails is never loaded: the member falls back to
//! the snapshot before it and the log after that.
mod support;

use rzk_testkit::ports::{reserve, Port};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use support::*;
use zookeeper_client as zk;

/// An `rzk` child process on `dir/data`, its log in `dir/<log_name>`.
struct Rzk {
    child: Child,
    port: Port,
    log: PathBuf,
}

impl Rzk {
    fn spawn(dir: &Path, log_name: &str, snap_count: u64) -> Rzk {
        let port = reserve();
        let log = dir.join(log_name);
        let child = Command::new(env!("CARGO_BIN_EXE_rzk"))
            .args(["--client-port", &port.to_string()])
            .args(["--client-port-address", "127.0.0.1"])
            .arg("--data-dir")
            .arg(dir.join("data"))
            .args(["--set", &format!("snapCount={snap_count}")])
            .args(["--set", "4lw.commands.whitelist=ruok"])
            .env_remove("RUST_LOG")
            .stdout(Stdio::null())
            .stderr(Stdio::from(std::fs::File::create(&log).unwrap()))
            .spawn()
            .unwrap();
        Rzk { child, port, log }
    }

    fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    async fn wait_ready(&self) {
        let addr = self.addr();
        eventually(Duration::from_secs(60), "rzk answers ruok", || {
            let addr = addr.clone();
            async move {
                use tokio::io::{AsyncReadExt, AsyncWriteExt};
                let Ok(mut s) = tokio::net::TcpStream::connect(&addr).await else {
                    return false;
                };
                let _ = s.write_all(b"ruok").await;
                let mut out = String::new();
                let _ = s.read_to_string(&mut out).await;
                out == "imok"
            }
        })
        .await;
    }

    fn log_text(&self) -> String {
        String::from_utf8_lossy(&std::fs::read(&self.log).unwrap()).into_owned()
    }

    /// Waits until the member's log says it serves (the listener answers
    /// ruok before that).
    async fn wait_serving(&self) {
        self.wait_for_log(
            Duration::from_secs(60),
            "the member serves",
            "serving role=",
            1,
        )
        .await;
    }

    /// Waits until the member's log holds `count` lines with `needle`.
    async fn wait_for_log(&self, max: Duration, what: &str, needle: &str, count: usize) {
        let path = self.log.clone();
        eventually(max, what, || {
            let path = path.clone();
            async move {
                let text = String::from_utf8_lossy(&std::fs::read(&path).unwrap()).into_owned();
                text.matches(needle).count() >= count
            }
        })
        .await;
    }

    /// kill -9: the log holds everything, no snapshot was written at exit.
    fn kill(mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }
}

impl Drop for Rzk {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn connect(addr: &str) -> zk::Client {
    zk::Client::connector()
        .with_session_timeout(Duration::from_secs(10))
        .connect(addr)
        .await
        .expect("connect")
}

#[tokio::test]
async fn log_replay_at_start_up_begins_no_snapshot_before_serving() {
    let dir = tempfile::tempdir().unwrap();
    // A history of 200 creates and no snapshot (snapCount far above it).
    let first = Rzk::spawn(dir.path(), "first.log", 1_000_000);
    first.wait_ready().await;
    let c = connect(&first.addr()).await;
    let opts = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
    for i in 0..200 {
        c.create(&format!("/n{i}"), b"x", &opts).await.unwrap();
    }
    drop(c);
    first.kill();

    // Restarted with snapCount=2: a snapshot is due after every 1 or 2 txns,
    // so replaying 200 would begin one if the replay could.
    let second = Rzk::spawn(dir.path(), "second.log", 2);
    // The listener answers ruok before the member serves: wait for the line.
    second.wait_serving().await;
    let log = second.log_text();
    let serving = log.find("serving role=").expect("waited for it");
    assert!(
        !log[..serving].contains("snapshot started"),
        "a snapshot began during the replay:\n{log}"
    );

    // Serving, with the history replayed; the first write begins the
    // snapshot that is due.
    let c = connect(&second.addr()).await;
    assert_eq!(
        c.list_children("/").await.unwrap().len(),
        201,
        "200 and /zookeeper"
    );
    c.create("/after", b"x", &opts).await.unwrap();
    second
        .wait_for_log(
            Duration::from_secs(30),
            "a snapshot begins",
            "snapshot started",
            1,
        )
        .await;
    assert_eq!(c.list_children("/").await.unwrap().len(), 202);
}

/// Writes 300 nodes with snapCount=50 until at least two snapshots are
/// saved, then kills the member; returns the newest snapshot file.
async fn history_with_snapshots(dir: &Path) -> PathBuf {
    let first = Rzk::spawn(dir, "first.log", 50);
    first.wait_ready().await;
    let c = connect(&first.addr()).await;
    let opts = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
    for i in 0..300 {
        c.create(&format!("/n{i}"), &[7u8; 64], &opts)
            .await
            .unwrap();
    }
    first
        .wait_for_log(
            Duration::from_secs(60),
            "two snapshots are saved",
            "rzk_server::core: snapshot saved",
            2,
        )
        .await;
    drop(c);
    first.kill();
    let snap = dir.join("data/snap");
    std::fs::read_dir(&snap)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter_map(|p| {
            let name = p.file_name()?.to_str()?.to_owned();
            let zxid = u64::from_str_radix(name.strip_prefix("snapshot.")?, 16).ok()?;
            Some((zxid, p))
        })
        .max()
        .expect("a snapshot file")
        .1
}

/// Restarts on `dir` and waits until it serves; returns its log.
async fn restart_and_count_nodes(dir: &Path) -> (String, usize) {
    let second = Rzk::spawn(dir, "second.log", 1_000_000);
    second.wait_serving().await;
    let c = connect(&second.addr()).await;
    let nodes = c.list_children("/").await.unwrap().len();
    (second.log_text(), nodes)
}

#[tokio::test]
async fn the_newest_snapshot_is_loaded_while_the_log_is_recovered() {
    let dir = tempfile::tempdir().unwrap();
    history_with_snapshots(dir.path()).await;
    let (log, nodes) = restart_and_count_nodes(dir.path()).await;
    assert_eq!(nodes, 301, "300 and /zookeeper");
    assert!(log.contains("preloaded=true"), "not preloaded:\n{log}");
    assert!(!log.contains("skipping"), "{log}");
}

#[tokio::test]
async fn a_corrupt_newest_snapshot_is_never_loaded_the_older_one_is() {
    let dir = tempfile::tempdir().unwrap();
    let newest = history_with_snapshots(dir.path()).await;
    // Rot one byte in the middle of the newest snapshot's state.
    let mut bytes = std::fs::read(&newest).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0x5a;
    std::fs::write(&newest, &bytes).unwrap();
    let (log, nodes) = restart_and_count_nodes(dir.path()).await;
    assert_eq!(nodes, 301, "the older snapshot and the log after it");
    assert!(
        log.contains("skipping corrupt snapshot"),
        "the damage went unnoticed:\n{log}"
    );
    assert!(
        !log.contains("preloaded=true"),
        "the preloaded tree of the corrupt snapshot was used:\n{log}"
    );
}

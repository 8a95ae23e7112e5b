//! The `rzk` binary as a child process: configuration and CLI, four-letter
//! words and the whitelist, SIGTERM, and kill -9 durability under load.
mod support;

use rzk_testkit::ports::{reserve, Port};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use support::*;
use zookeeper_client as zk;

/// Writes the server acknowledged: (path, data).
type Acked = Arc<Mutex<Vec<(String, Vec<u8>)>>>;

struct Rzk {
    child: Child,
    port: u16,
}

impl Rzk {
    fn spawn(dir: &Path, port: &Port, extra: &str) -> Rzk {
        let cfg = dir.join("zoo.cfg");
        std::fs::write(
            &cfg,
            format!(
                "tickTime=200\nminSessionTimeout=400\ndataDir={}\nclientPort={port}\nclientPortAddress=127.0.0.1\n{extra}",
                dir.join("data").display()
            ),
        )
        .unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_rzk"))
            .arg(&cfg)
            .stdout(Stdio::null())
            .stderr(Stdio::from(
                std::fs::File::create(dir.join("rzk.log")).unwrap(),
            ))
            .spawn()
            .unwrap();
        Rzk {
            child,
            port: port.get(),
        }
    }

    fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    async fn wait_ready(&self) {
        let addr: std::net::SocketAddr = self.addr().parse().unwrap();
        eventually(Duration::from_secs(30), "rzk answers srvr", || async move {
            match tokio::net::TcpStream::connect(addr).await {
                Ok(mut s) => {
                    use tokio::io::{AsyncReadExt, AsyncWriteExt};
                    let _ = s.write_all(b"srvr").await;
                    let mut out = String::new();
                    let _ = s.read_to_string(&mut out).await;
                    out.contains("Mode: standalone")
                }
                Err(_) => false,
            }
        })
        .await;
    }

    fn kill9(mut self) {
        self.child.kill().unwrap(); // SIGKILL
        self.child.wait().unwrap();
    }
}

impl Drop for Rzk {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn connect(addr: &str, timeout: Duration) -> zk::Client {
    zk::Client::connector()
        .with_session_timeout(timeout)
        .connect(addr)
        .await
        .unwrap()
}

#[tokio::test]
async fn kill_9_under_load_loses_no_acknowledged_write() {
    let _trap = rzk_testkit::PanicTrap::new();
    let dir = tempfile::tempdir().unwrap();
    let port = reserve();
    let server = Rzk::spawn(dir.path(), &port, "snapCount=200\n");
    server.wait_ready().await;
    let addr = server.addr();
    let setup = connect(&addr, Duration::from_secs(10)).await;
    let opts = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
    setup.create("/load", b"", &opts).await.unwrap();
    // A session with an ephemeral that will not come back after the crash.
    let doomed = connect(&addr, Duration::from_millis(800)).await;
    doomed
        .create(
            "/load-eph",
            b"",
            &zk::CreateMode::Ephemeral.with_acls(zk::Acls::anyone_all()),
        )
        .await
        .unwrap();
    let acked: Acked = Arc::default();
    let mut writers = Vec::new();
    for w in 0..4 {
        // Connected here, before the load starts, so a writer can only end by the
        // kill (an error reply), never by failing to connect after it.
        let c = connect(&addr, Duration::from_secs(10)).await;
        let acked = acked.clone();
        writers.push(tokio::spawn(async move {
            let opts = zk::CreateMode::PersistentSequential.with_acls(zk::Acls::anyone_all());
            for i in 0u32.. {
                let data = format!("w{w}-{i}").into_bytes();
                match c.create(&format!("/load/w{w}-"), &data, &opts).await {
                    Ok((_, seq)) => acked
                        .lock()
                        .unwrap()
                        .push((format!("/load/w{w}-{seq}"), data)),
                    Err(_) => return,
                }
            }
        }));
    }
    let acked2 = acked.clone();
    eventually(Duration::from_secs(30), "writes under load", || {
        let n = acked2.lock().unwrap().len();
        async move { n >= 600 }
    })
    .await;
    server.kill9();
    // A writer's panic (a bad sequence number, a poisoned lock) fails the test here.
    for w in writers {
        w.await.expect("writer task");
    }
    drop((setup, doomed));
    let acked = acked.lock().unwrap().clone();
    assert!(acked.len() >= 600);
    let server = Rzk::spawn(dir.path(), &port, "snapCount=200\n");
    server.wait_ready().await;
    let c = connect(&server.addr(), Duration::from_secs(10)).await;
    for (path, data) in &acked {
        let (got, _) = c
            .get_data(path)
            .await
            .unwrap_or_else(|e| panic!("{path} lost: {e}"));
        assert_eq!(&got, data, "{path}");
    }
    // The crashed session's timer restarted at load; nobody resumes it.
    eventually(
        Duration::from_secs(10),
        "the dead session's ephemeral is deleted",
        || async { c.check_stat("/load-eph").await.unwrap().is_none() },
    )
    .await;
    let snaps = walk(&dir.path().join("data").join("snap")).len();
    assert!(snaps > 0, "snapshots were taken every 200 txns");
}

fn walk(p: &Path) -> Vec<String> {
    let mut out = Vec::new();
    if let Ok(rd) = std::fs::read_dir(p) {
        for e in rd.flatten() {
            out.push(e.path().display().to_string());
            if e.path().is_dir() {
                out.extend(walk(&e.path()));
            }
        }
    }
    out
}

#[tokio::test]
async fn sigterm_stops_gracefully() {
    let dir = tempfile::tempdir().unwrap();
    let port = reserve();
    let mut server = Rzk::spawn(dir.path(), &port, "");
    server.wait_ready().await;
    let c = connect(&server.addr(), Duration::from_secs(10)).await;
    let opts = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
    c.create("/before-term", b"x", &opts).await.unwrap();
    let status = Command::new("kill")
        .args(["-TERM", &server.child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let mut exited = None;
    for _ in 0..200 {
        if let Some(s) = server.child.try_wait().unwrap() {
            exited = Some(s);
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(exited.expect("exits within 10 s").code(), Some(0));
}

#[tokio::test]
async fn four_letter_words_and_whitelist() {
    let dir = tempfile::tempdir().unwrap();
    let port = reserve();
    let server = Rzk::spawn(dir.path(), &port, "");
    server.wait_ready().await;
    let addr: std::net::SocketAddr = server.addr().parse().unwrap();
    let srvr = four_letter(addr, "srvr").await;
    for label in [
        "Zookeeper version: ",
        "Latency min/avg/max: ",
        "Received: ",
        "Sent: ",
        "Connections: ",
        "Outstanding: ",
        "Zxid: 0x",
        "Mode: standalone",
        "Node count: 4",
    ] {
        assert!(srvr.contains(label), "{srvr}");
    }
    assert_eq!(
        four_letter(addr, "mntr").await,
        "mntr is not executed because it is not in the whitelist."
    );
    drop(server);
    let dir = tempfile::tempdir().unwrap();
    let port = reserve();
    let server = Rzk::spawn(dir.path(), &port, "4lw.commands.whitelist=*\n");
    server.wait_ready().await;
    let addr: std::net::SocketAddr = server.addr().parse().unwrap();
    let c = connect(&server.addr(), Duration::from_secs(10)).await;
    let (_, _, _w) = c.get_and_watch_data("/zookeeper").await.unwrap();
    assert_eq!(four_letter(addr, "ruok").await, "imok");
    assert_eq!(four_letter(addr, "isro").await, "rw");
    let mntr = four_letter(addr, "mntr").await;
    for line in mntr.lines() {
        assert!(line.starts_with("zk_") && line.contains('\t'), "{line:?}");
    }
    for key in [
        "zk_version\t",
        "zk_server_state\tstandalone",
        "zk_znode_count\t4",
        "zk_watch_count\t1",
        "zk_num_alive_connections\t1",
        "zk_avg_latency\t",
        "zk_packets_received\t",
        "zk_outstanding_requests\t",
        "zk_ephemerals_count\t0",
        "zk_approximate_data_size\t",
    ] {
        assert!(mntr.contains(key), "{key}: {mntr}");
    }
    assert_eq!(
        four_letter(addr, "wchs").await,
        "1 connections watching 1 paths\nTotal watches:1\n"
    );
    let sid = format!("0x{:x}", c.session_id().0);
    assert_eq!(
        four_letter(addr, "wchc").await,
        format!("{sid}\n\t/zookeeper\n\n")
    );
    assert_eq!(
        four_letter(addr, "wchp").await,
        format!("/zookeeper\n\t{sid}\n\n")
    );
    let conf = four_letter(addr, "conf").await;
    assert!(
        conf.contains(&format!("clientPort={}\n", server.port)) && conf.contains("tickTime=200\n"),
        "{conf}"
    );
    let cons = four_letter(addr, "cons").await;
    assert!(cons.contains(&format!("sid={sid}")), "{cons}");
    let stat = four_letter(addr, "stat").await;
    assert!(stat.contains("Clients:\n /127.0.0.1:"), "{stat}");
    assert!(four_letter(addr, "dump")
        .await
        .starts_with("SessionTracker dump:\n"));
    assert!(four_letter(addr, "envi")
        .await
        .starts_with("Environment:\n"));
    assert!(four_letter(addr, "dirs")
        .await
        .starts_with("datadir_size: "));
    assert_eq!(four_letter(addr, "crst").await, "Connection stats reset.\n");
    assert_eq!(four_letter(addr, "srst").await, "Server stats reset.\n");
}

#[test]
fn invalid_config_exits_2_with_a_clear_message_and_unknown_keys_warn() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("zoo.cfg");
    std::fs::write(&cfg, "tickTime=soon\n").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_rzk"))
        .arg(&cfg)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("tickTime") && err.contains("line 1"), "{err}");
    let out = Command::new(env!("CARGO_BIN_EXE_rzk"))
        .args(["--set", "maxClientCnxns=-3"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let out = Command::new(env!("CARGO_BIN_EXE_rzk"))
        .args(["--set", "novalue"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}

#[tokio::test]
async fn no_file_serves_with_data_in_dot_data_and_flags_override() {
    let dir = tempfile::tempdir().unwrap();
    let port = reserve();
    let child = Command::new(env!("CARGO_BIN_EXE_rzk"))
        .args([
            "--client-port",
            &port.to_string(),
            "--tick-time",
            "300",
            "--set",
            "fancy.unknown=1",
        ])
        .current_dir(dir.path())
        .stdout(Stdio::null())
        .stderr(Stdio::from(
            std::fs::File::create(dir.path().join("log")).unwrap(),
        ))
        .spawn()
        .unwrap();
    let server = Rzk {
        child,
        port: port.get(),
    };
    server.wait_ready().await;
    assert!(dir.path().join("data").is_dir(), "data in ./data");
    let c = connect(&server.addr(), Duration::from_secs(100)).await;
    assert_eq!(
        c.session_timeout(),
        Duration::from_millis(6000),
        "max = 20 ticks of 300 ms"
    );
    drop(server);
    let log = std::fs::read_to_string(dir.path().join("log")).unwrap();
    assert!(
        log.contains("fancy.unknown"),
        "unknown keys are a warning: {log}"
    );
}

//! Three `rzk` processes on loopback under a write load from an independent
//! client (the `zookeeper-client` crate, connected to all three): kill -9 of the
//! leader, then of a follower, each restarted while the load runs. Every write
//! the client saw acknowledged must be on every member at the end (I6; the
//! restarted members rejoin by DIFF, TRUNC or SNAP).
mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::eventually;
use zookeeper_client as zk;

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

struct Member {
    id: u64,
    client_port: u16,
    cfg: PathBuf,
    dir: PathBuf,
    child: Option<Child>,
}

impl Member {
    fn spawn(&mut self) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join("rzk.log"))
            .unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_rzk"))
            .arg(&self.cfg)
            .stdout(Stdio::null())
            .stderr(Stdio::from(log))
            .spawn()
            .unwrap();
        self.child = Some(child);
    }

    fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            c.kill().unwrap(); // SIGKILL
            c.wait().unwrap();
        }
    }

    fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.client_port)
    }
}

impl Drop for Member {
    fn drop(&mut self) {
        self.kill9();
    }
}

fn start(root: &Path) -> Vec<Member> {
    let ids = [1u64, 2, 3];
    let ports: Vec<(u16, u16, u16)> = ids
        .iter()
        .map(|_| (free_port(), free_port(), free_port()))
        .collect();
    let servers: String = ids
        .iter()
        .zip(&ports)
        .map(|(id, (c, q, e))| format!("server.{id}=127.0.0.1:{q}:{e};127.0.0.1:{c}\n"))
        .collect();
    let mut members = Vec::new();
    for (id, (c, _, _)) in ids.iter().zip(&ports) {
        let dir = root.join(format!("m{id}"));
        std::fs::create_dir_all(dir.join("data")).unwrap();
        std::fs::write(dir.join("data").join("myid"), format!("{id}\n")).unwrap();
        let cfg = dir.join("zoo.cfg");
        std::fs::write(
            &cfg,
            format!(
                "tickTime=200\ninitLimit=10\nsyncLimit=5\nminSessionTimeout=400\n\
                 dataDir={}\nclientPort={c}\nclientPortAddress=127.0.0.1\n\
                 maxClientCnxns=0\n4lw.commands.whitelist=*\nadmin.enableServer=false\n\
                 snapCount=400\n{servers}",
                dir.join("data").display()
            ),
        )
        .unwrap();
        let mut m = Member {
            id: *id,
            client_port: *c,
            cfg,
            dir,
            child: None,
        };
        m.spawn();
        members.push(m);
    }
    members
}

async fn mode(m: &Member) -> Option<String> {
    m.child.as_ref()?;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let attempt = async {
        let mut s = tokio::net::TcpStream::connect(m.addr()).await.ok()?;
        s.write_all(b"srvr").await.ok()?;
        let mut out = String::new();
        s.read_to_string(&mut out).await.ok()?;
        out.lines()
            .find_map(|l| l.strip_prefix("Mode: "))
            .map(str::to_owned)
    };
    tokio::time::timeout(Duration::from_secs(2), attempt)
        .await
        .ok()
        .flatten()
}

/// Waits until one running member leads and the other running ones follow.
async fn settled(members: &[Member]) -> usize {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let mut leaders = Vec::new();
        let mut ok = true;
        for (i, m) in members.iter().enumerate() {
            if m.child.is_none() {
                continue;
            }
            match mode(m).await.as_deref() {
                Some("leader") => leaders.push(i),
                Some("follower") => {}
                _ => ok = false,
            }
        }
        if ok && leaders.len() == 1 {
            return leaders[0];
        }
        if Instant::now() > deadline {
            for m in members {
                let log = std::fs::read_to_string(m.dir.join("rzk.log")).unwrap_or_default();
                let tail: Vec<&str> = log.lines().rev().take(30).collect();
                eprintln!("--- member {} log tail:\n{}", m.id, tail.join("\n"));
            }
            panic!("no settled ensemble within 60 s (leaders {leaders:?})");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn connect(connect: &str) -> zk::Client {
    zk::Client::connector()
        .with_session_timeout(Duration::from_secs(10))
        .connect(connect)
        .await
        .expect("connect")
}

type Acked = Arc<Mutex<Vec<(String, Vec<u8>)>>>;

/// Writers on sessions spread over all members; a create is acknowledged only
/// when the client got its reply (a connection loss is not an answer).
fn load(
    connect_string: String,
    stop: Arc<AtomicBool>,
    acked: Acked,
) -> Vec<tokio::task::JoinHandle<()>> {
    (0..4)
        .map(|w| {
            let (cs, stop, acked) = (connect_string.clone(), stop.clone(), acked.clone());
            tokio::spawn(async move {
                let c = connect(&cs).await;
                let opts = zk::CreateMode::PersistentSequential.with_acls(zk::Acls::anyone_all());
                let mut i = 0u32;
                while !stop.load(Ordering::Relaxed) {
                    let data = format!("w{w}-{i}").into_bytes();
                    i += 1;
                    match c.create(&format!("/load/w{w}-"), &data, &opts).await {
                        Ok((_, seq)) => acked
                            .lock()
                            .unwrap()
                            .push((format!("/load/w{w}-{seq}"), data)),
                        // No answer (the connection broke or reset): the
                        // create may or may not have applied; it does not
                        // count as acknowledged, and the next one goes on.
                        Err(
                            zk::Error::ConnectionLoss
                            | zk::Error::Timeout
                            | zk::Error::NoHosts
                            | zk::Error::UnexpectedError(_)
                            | zk::Error::Custom(_),
                        ) => {
                            tokio::time::sleep(Duration::from_millis(10)).await;
                        }
                        Err(zk::Error::SessionExpired | zk::Error::ClientClosed) => return,
                        Err(e) => panic!("writer {w}: unexpected {e}"),
                    }
                }
            })
        })
        .collect()
}

async fn grows_by(acked: &Acked, n: usize, what: &str) {
    let start = acked.lock().unwrap().len();
    eventually(Duration::from_secs(60), what, || {
        let len = acked.lock().unwrap().len();
        async move { len >= start + n }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_of_leader_and_follower_under_load_loses_no_acknowledged_write() {
    let dir = tempfile::tempdir().unwrap();
    let mut members = start(dir.path());
    settled(&members).await;
    let all = members
        .iter()
        .map(Member::addr)
        .collect::<Vec<_>>()
        .join(",");
    let setup = connect(&all).await;
    let opts = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
    setup.create("/load", b"", &opts).await.unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let acked: Acked = Arc::default();
    let writers = load(all.clone(), stop.clone(), acked.clone());
    grows_by(&acked, 300, "writes under load").await;

    // The leader dies; the survivors elect and the load goes on; the old leader
    // comes back while it runs.
    let leader = settled(&members).await;
    members[leader].kill9();
    grows_by(&acked, 300, "writes after the leader's death").await;
    members[leader].spawn();
    grows_by(&acked, 300, "writes while the old leader rejoins").await;
    settled(&members).await;

    // The same for a follower.
    let leader = settled(&members).await;
    let follower = (leader + 1) % 3;
    members[follower].kill9();
    grows_by(&acked, 300, "writes after a follower's death").await;
    members[follower].spawn();
    grows_by(&acked, 300, "writes while the follower rejoins").await;
    settled(&members).await;

    stop.store(true, Ordering::Relaxed);
    for w in writers {
        w.await.expect("a writer panicked");
    }
    let acked = acked.lock().unwrap().clone();
    for m in &members {
        let c = connect(&m.addr()).await;
        c.sync("/").await.unwrap();
        for (path, data) in &acked {
            let (got, _) = c
                .get_data(path)
                .await
                .unwrap_or_else(|e| panic!("{path} lost on member {}: {e}", m.id));
            assert_eq!(&got, data, "{path} on member {}", m.id);
        }
    }
    drop(setup);
}

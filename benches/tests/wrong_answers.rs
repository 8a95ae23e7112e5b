//! rzk-bench must notice a server that lies. A small fake ZooKeeper server
//! (rzk-wire's ServerCodec over an in-memory tree) answers correctly except
//! for one deliberate lie per test; the built binary must report the error,
//! naming the op, and exit non-zero. The honest fake must pass, which shows
//! that each failure comes from its lie and not from the fake.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use futures::{SinkExt, StreamExt};
use rzk_wire::server::Incoming;
use rzk_wire::{
    ByteString, CreateResponse, ErrorCode, EventType, GetAllChildrenNumberResponse,
    GetChildrenResponse, GetDataResponse, KeeperState, MultiOp, MultiResponse, MultiResult,
    Notification, Reply, Request, Response, ServerCodec, SessionId, Stat, WatcherEvent, Xid,
};
use rzk_zxid::Zxid;
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio_util::codec::Framed;

/// The one thing the fake gets wrong.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Lie {
    /// None: the honest server.
    Honest,
    /// getData returns other bytes than the last ones written.
    GetDataBytes,
    /// getChildren leaves out one child.
    MissingChild,
    /// A multi of 10 creates reports 9 results.
    NineResults,
    /// setData answers BADVERSION although the version is -1.
    ErrorOnSet,
    /// Replies carry an xid one higher than the request's.
    WrongXid,
    /// Watch notifications name another path.
    WatchPath,
    /// setData's stat does not count the write (version stays the same).
    StaleVersion,
    /// getData is never answered (the connection stays open).
    Silent,
}

#[derive(Debug, Default)]
struct Node {
    data: Bytes,
    version: i32,
    children: BTreeSet<String>,
}

/// The fake's state: the tree, data watches and each connection's outbox for
/// notifications.
#[derive(Default)]
struct Tree {
    nodes: BTreeMap<String, Node>,
    watches: HashMap<String, Vec<u64>>,
    outboxes: HashMap<u64, mpsc::UnboundedSender<Notification>>,
    next_conn: u64,
}

fn parent_of(path: &str) -> (&str, &str) {
    let i = path.rfind('/').unwrap();
    (if i == 0 { "/" } else { &path[..i] }, &path[i + 1..])
}

impl Tree {
    fn new() -> Tree {
        let mut tree = Tree::default();
        tree.nodes.insert("/".into(), Node::default());
        tree
    }

    fn stat(node: &Node) -> Stat {
        Stat {
            version: node.version,
            data_length: node.data.len() as i32,
            num_children: node.children.len() as i32,
            ..Stat::default()
        }
    }

    fn create(&mut self, path: &str, data: Option<Bytes>) -> Result<(), ErrorCode> {
        if self.nodes.contains_key(path) {
            return Err(ErrorCode::NodeExists);
        }
        let (parent, name) = parent_of(path);
        let Some(p) = self.nodes.get_mut(parent) else {
            return Err(ErrorCode::NoNode);
        };
        p.children.insert(name.to_string());
        self.nodes.insert(
            path.into(),
            Node {
                data: data.unwrap_or_default(),
                ..Node::default()
            },
        );
        Ok(())
    }

    fn descendants(&self, path: &str) -> i32 {
        let node = &self.nodes[path];
        node.children
            .iter()
            .map(|c| {
                let child = if path == "/" {
                    format!("/{c}")
                } else {
                    format!("{path}/{c}")
                };
                1 + self.descendants(&child)
            })
            .sum()
    }

    /// The honest answer, then the lie applied to it.
    fn answer(&mut self, conn: u64, request: &Request, lie: Lie) -> Result<Response, ErrorCode> {
        match request {
            Request::Create(r) => {
                self.create(&r.path, r.data.clone())?;
                Ok(Response::Create(CreateResponse {
                    path: r.path.clone(),
                }))
            }
            Request::Delete(r) => {
                let node = self.nodes.get(&*r.path).ok_or(ErrorCode::NoNode)?;
                if !node.children.is_empty() {
                    return Err(ErrorCode::NotEmpty);
                }
                self.nodes.remove(&*r.path);
                let (parent, name) = parent_of(&r.path);
                self.nodes.get_mut(parent).unwrap().children.remove(name);
                Ok(Response::Empty)
            }
            Request::Exists(r) => Ok(Response::Stat(Tree::stat(
                self.nodes.get(&*r.path).ok_or(ErrorCode::NoNode)?,
            ))),
            Request::GetData(r) => {
                let node = self.nodes.get(&*r.path).ok_or(ErrorCode::NoNode)?;
                let mut data = node.data.clone();
                if lie == Lie::GetDataBytes && !data.is_empty() {
                    let mut v = data.to_vec();
                    v[0] ^= 1;
                    data = v.into();
                }
                let stat = Tree::stat(node);
                if r.watch {
                    self.watches
                        .entry(r.path.to_string())
                        .or_default()
                        .push(conn);
                }
                Ok(Response::GetData(GetDataResponse {
                    data: Some(data),
                    stat,
                }))
            }
            Request::SetData(r) => {
                if lie == Lie::ErrorOnSet {
                    return Err(ErrorCode::BadVersion);
                }
                let node = self.nodes.get_mut(&*r.path).ok_or(ErrorCode::NoNode)?;
                node.data = r.data.clone().unwrap_or_default();
                node.version += 1;
                let mut stat = Tree::stat(node);
                if lie == Lie::StaleVersion {
                    stat.version -= 1;
                }
                self.fire(&r.path, lie);
                Ok(Response::Stat(stat))
            }
            Request::GetChildren(r) => {
                let node = self.nodes.get(&*r.path).ok_or(ErrorCode::NoNode)?;
                let mut children: Vec<ByteString> =
                    node.children.iter().map(|c| c.as_str().into()).collect();
                if lie == Lie::MissingChild {
                    children.pop();
                }
                Ok(Response::GetChildren(GetChildrenResponse { children }))
            }
            Request::GetAllChildrenNumber(r) => {
                if !self.nodes.contains_key(&*r.path) {
                    return Err(ErrorCode::NoNode);
                }
                Ok(Response::GetAllChildrenNumber(
                    GetAllChildrenNumberResponse {
                        total_number: self.descendants(&r.path),
                    },
                ))
            }
            Request::Multi(m) => {
                let mut results = Vec::new();
                for op in &m.ops {
                    let MultiOp::Create(c) = op else {
                        return Err(ErrorCode::Unimplemented);
                    };
                    self.create(&c.path, c.data.clone())?;
                    results.push(MultiResult::Create(CreateResponse {
                        path: c.path.clone(),
                    }));
                }
                if lie == Lie::NineResults {
                    results.pop();
                }
                Ok(Response::Multi(MultiResponse { results }))
            }
            Request::CloseSession | Request::Ping => Ok(Response::Empty),
            _ => Err(ErrorCode::Unimplemented),
        }
    }

    fn fire(&mut self, path: &str, lie: Lie) {
        let Some(conns) = self.watches.remove(path) else {
            return;
        };
        let path: ByteString = if lie == Lie::WatchPath {
            format!("{path}-elsewhere").into()
        } else {
            path.into()
        };
        for conn in conns {
            if let Some(outbox) = self.outboxes.get(&conn) {
                let _ = outbox.send(Notification {
                    zxid: Zxid::from_i64(-1),
                    event: WatcherEvent {
                        event_type: EventType::NodeDataChanged,
                        state: KeeperState::SyncConnected,
                        path: path.clone(),
                    },
                });
            }
        }
    }
}

/// Starts the fake on 127.0.0.1:0 and returns its address.
async fn fake(lie: Lie) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let tree = Arc::new(Mutex::new(Tree::new()));
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            tokio::spawn(serve(stream, tree.clone(), lie));
        }
    });
    addr
}

async fn serve(stream: tokio::net::TcpStream, tree: Arc<Mutex<Tree>>, lie: Lie) {
    let mut framed = Framed::new(stream, ServerCodec::new());
    let (tx, mut notifications) = mpsc::unbounded_channel();
    let conn = {
        let mut t = tree.lock().unwrap();
        t.next_conn += 1;
        let id = t.next_conn;
        t.outboxes.insert(id, tx);
        id
    };
    loop {
        let incoming = tokio::select! {
            incoming = framed.next() => incoming,
            Some(n) = notifications.recv() => {
                if framed.send(n).await.is_err() { return }
                continue;
            }
        };
        let Some(Ok(incoming)) = incoming else { return };
        match incoming {
            Incoming::Connect(req) => {
                let response =
                    req.accept(req.timeout_ms, SessionId(conn as i64), vec![0; 16].into());
                if framed.send(response).await.is_err() {
                    return;
                }
            }
            Incoming::Request(frame) => {
                if lie == Lie::Silent && matches!(frame.request, Request::GetData(_)) {
                    continue;
                }
                let result = tree.lock().unwrap().answer(conn, &frame.request, lie);
                let xid = if lie == Lie::WrongXid && frame.xid.0 > 0 {
                    Xid(frame.xid.0 + 1)
                } else {
                    frame.xid
                };
                let close = frame.request == Request::CloseSession;
                let reply = Reply {
                    xid,
                    zxid: Zxid::from_i64(1),
                    result,
                };
                if framed.send(reply).await.is_err() || close {
                    return;
                }
            }
            Incoming::FourLetterWord(_)
            | Incoming::Malformed { .. }
            | Incoming::UnknownOpCode { .. } => return,
        }
    }
}

struct Outcome {
    success: bool,
    stdout: String,
    stderr: String,
}

async fn bench(lie: Lie, workload: &str) -> Outcome {
    bench_with_timeout(lie, workload, "4000").await
}

async fn bench_with_timeout(lie: Lie, workload: &str, timeout_ms: &str) -> Outcome {
    let addr = fake(lie).await;
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_rzk-bench"))
        .args([
            "run",
            "--server",
            &addr,
            "--workload",
            workload,
            "--ops",
            "40",
            "--sessions",
            "2",
            "--inflight",
            "4",
            "--watchers",
            "2",
            "--json",
            "--progress-seconds",
            "0",
            "--seed",
            "5",
            "--session-timeout-ms",
            timeout_ms,
        ])
        .kill_on_drop(true)
        .output()
        .await
        .unwrap();
    Outcome {
        success: out.status.success(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// The run must fail, and stderr must name `op` and say `what`.
fn assert_caught(outcome: &Outcome, op: &str, what: &str) {
    assert!(
        !outcome.success,
        "the lie went unnoticed: {} {}",
        outcome.stdout, outcome.stderr
    );
    assert!(
        outcome.stderr.contains(op) && outcome.stderr.contains(what),
        "stderr does not name {op:?} and {what:?}: {}",
        outcome.stderr
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_honest_fake_passes_every_workload_it_serves() {
    for workload in [
        "create", "set", "get", "exists", "children", "delete", "mixed", "mix", "multi", "watch",
    ] {
        let outcome = bench(Lie::Honest, workload).await;
        assert!(
            outcome.success,
            "{workload}: {} {}",
            outcome.stdout, outcome.stderr
        );
        let v: serde_json::Value = serde_json::from_str(outcome.stdout.trim()).unwrap();
        assert_eq!(v["errors"], 0, "{workload}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_data_with_other_bytes_is_caught() {
    let outcome = bench(Lie::GetDataBytes, "get").await;
    assert_caught(&outcome, "getData /", "last written by this run");
    let v: serde_json::Value = serde_json::from_str(outcome.stdout.trim()).unwrap();
    assert_eq!(v["errors"], 40, "every read is wrong");
    assert_eq!(v["ops"], 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_child_is_caught() {
    assert_caught(
        &bench(Lie::MissingChild, "children").await,
        "getChildren /",
        "15 children, expected 16",
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_multi_with_nine_results_is_caught() {
    assert_caught(
        &bench(Lie::NineResults, "multi").await,
        "multi /",
        "9 results, expected 10",
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_error_code_where_success_is_due_is_caught() {
    assert_caught(
        &bench(Lie::ErrorOnSet, "set").await,
        "setData /",
        "BADVERSION",
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_version_after_set_is_caught() {
    assert_caught(
        &bench(Lie::StaleVersion, "mixed").await,
        "setData /",
        "expected version",
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reply_with_the_wrong_xid_is_caught() {
    // The first create of the namespace already gets a wrong xid: the run
    // cannot even start, and says why.
    assert_caught(&bench(Lie::WrongXid, "get").await, "create /", "xid");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_notification_for_another_path_is_caught() {
    assert_caught(
        &bench(Lie::WatchPath, "watch").await,
        "watch on /",
        "NodeDataChanged",
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_stops_answering_ends_the_run_with_an_error() {
    // Sessions of 600 ms: each reader gives up after that much silence.
    // The fake answers pings, so only a deadline on the oldest request (not
    // on any bytes arriving) ends the run; before that fix it hung.
    let outcome = tokio::time::timeout(
        std::time::Duration::from_secs(30),
        bench_with_timeout(Lie::Silent, "get", "600"),
    )
    .await
    .expect("the run ends instead of hanging");
    assert_caught(
        &outcome,
        "no reply for 600 ms to getData /",
        "requests unanswered",
    );
}

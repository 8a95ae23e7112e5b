//! End to end: every workload, populate, wait-serving and idle-sessions
//! against an rzk server started in this test's runtime (127.0.0.1:0), through
//! the library and through the built binary. Every run must finish with zero
//! errors, the exact op count, and its namespace removed.

use std::process::Stdio;
use std::time::Duration;

use rzk_benches::conn::Conn;
use rzk_benches::run::{run, Limit, RunOptions};
use rzk_benches::workload::WorkloadKind;
use rzk_server::config::ServerConfig;
use rzk_wire::{ErrorCode, ExistsRequest, Request};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

/// An rzk server in this runtime.
struct Server {
    addr: String,
    stop: Option<oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<Result<(), rzk_server::ServerError>>,
    _dir: tempfile::TempDir,
}

impl Server {
    async fn start() -> Server {
        let dir = tempfile::tempdir().unwrap();
        let settings: Vec<(String, String)> = vec![
            ("dataDir".into(), dir.path().display().to_string()),
            ("clientPortAddress".into(), "127.0.0.1".into()),
            ("maxClientCnxns".into(), "0".into()),
            ("4lw.commands.whitelist".into(), "*".into()),
        ];
        let config = ServerConfig::load(None, &settings).expect("valid config");
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(rzk_server::serve(config, vec![listener], async move {
            let _ = stopped.await;
        }));
        Server {
            addr,
            stop: Some(stop),
            task,
            _dir: dir,
        }
    }

    async fn stop(mut self) {
        let _ = self.stop.take().unwrap().send(());
        self.task.await.unwrap().expect("server stopped cleanly");
    }
}

fn options(server: &Server, workload: WorkloadKind, ops: u64) -> RunOptions {
    RunOptions {
        server: server.addr.clone(),
        workload,
        sessions: 3,
        inflight: 4,
        value_bytes: 40,
        limit: Limit::Ops(ops),
        read_ratio: 0.5,
        watchers: 4,
        namespace: format!("/e2e-{}", workload.name()),
        session_timeout_ms: 30_000,
        progress_seconds: 0.0,
        seed: 11,
        keys_per_session: 8,
        server_pids: Vec::new(),
        rate: None,
    }
}

/// Whether `path` exists, asked on a fresh session.
async fn exists(server: &Server, path: &str) -> bool {
    let mut conn = Conn::connect(&server.addr, 30_000, Duration::from_secs(10))
        .await
        .unwrap();
    let result = conn
        .call(&Request::Exists(ExistsRequest {
            path: path.into(),
            watch: false,
        }))
        .await
        .unwrap();
    conn.close().await.unwrap();
    match result {
        Ok(_) => true,
        Err(ErrorCode::NoNode) => false,
        Err(code) => panic!("exists {path}: {code}"),
    }
}

async fn run_clean(workload: WorkloadKind, ops: u64, expected_ops: u64) {
    let server = Server::start().await;
    let opts = options(&server, workload, ops);
    let report = run(&opts, CancellationToken::new())
        .await
        .expect("run completes");
    assert_eq!(report.errors, 0, "{workload:?}: {:?}", report.messages);
    assert_eq!(report.ops, expected_ops, "{workload:?}");
    assert_eq!(report.workload, workload.name());
    assert!(report.latency.p50_us > 0 && report.latency.max_us >= report.latency.p99_us);
    assert!(
        !exists(&server, &opts.namespace).await,
        "{workload:?} left its namespace behind"
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_runs_clean() {
    run_clean(WorkloadKind::Create, 300, 300).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn set_runs_clean() {
    run_clean(WorkloadKind::Set, 300, 300).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_runs_clean() {
    run_clean(WorkloadKind::Get, 300, 300).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exists_runs_clean() {
    run_clean(WorkloadKind::Exists, 300, 300).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn children_runs_clean() {
    run_clean(WorkloadKind::Children, 300, 300).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_runs_clean() {
    // keys_per_session 8 × 3 sessions = 24 znodes to delete: the run ends
    // when they are gone, before the budget of 300.
    run_clean(WorkloadKind::Delete, 300, 24).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mixed_runs_clean() {
    run_clean(WorkloadKind::Mixed, 300, 300).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mix_runs_clean() {
    run_clean(WorkloadKind::Mix, 400, 400).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multi_runs_clean() {
    run_clean(WorkloadKind::Multi, 50, 50).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_runs_clean() {
    // 4 watchers: 10 rounds of one setData and 4 notifications each.
    run_clean(WorkloadKind::Watch, 40, 40).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_servers_cpu_time_is_reported_with_its_pid() {
    let server = Server::start().await;
    let mut opts = options(&server, WorkloadKind::Get, 3000);
    // The server runs in this process.
    opts.server_pids = vec![std::process::id()];
    let report = run(&opts, CancellationToken::new()).await.unwrap();
    assert_eq!(report.errors, 0, "{:?}", report.messages);
    let cpu = report.server_cpu.expect("the server's CPU time");
    assert!(cpu.user_s + cpu.sys_s >= 0.0);
    assert!(report.to_json().contains("\"server_cpu_us_per_op\":"));
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn storm_runs_clean() {
    run_clean(WorkloadKind::Storm, 60, 60).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_open_loop_run_keeps_to_its_schedule() {
    // 3 sessions offering 300 ops/s together: the 120th operation is due
    // 0.4 s after the first (each session's 40th, 10 ms apart), so the run
    // cannot end sooner, however fast the server answers; closed loop the
    // same 120 gets take a few milliseconds.
    let server = Server::start().await;
    let mut opts = options(&server, WorkloadKind::Get, 120);
    opts.rate = Some(300.0);
    let report = run(&opts, CancellationToken::new()).await.unwrap();
    assert_eq!(report.errors, 0, "{:?}", report.messages);
    assert_eq!(report.ops, 120);
    assert!(report.seconds >= 0.38, "{} s", report.seconds);
    assert_eq!(report.offered_rate, Some(300.0));
    assert!(
        report
            .to_json()
            .ends_with(",\"offered_ops_per_sec\":300.0}"),
        "{}",
        report.to_json()
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timed_run_stops_on_time() {
    let server = Server::start().await;
    let mut opts = options(&server, WorkloadKind::Mixed, 0);
    opts.limit = Limit::Seconds(0.5);
    let report = run(&opts, CancellationToken::new()).await.unwrap();
    assert_eq!(report.errors, 0, "{:?}", report.messages);
    assert!(report.ops > 0);
    assert!(
        report.seconds >= 0.5 && report.seconds < 10.0,
        "{}",
        report.seconds
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_existing_namespace_is_refused() {
    let server = Server::start().await;
    let opts = options(&server, WorkloadKind::Get, 10);
    let mut conn = Conn::connect(&server.addr, 30_000, Duration::from_secs(10))
        .await
        .unwrap();
    conn.call_ok(&rzk_benches::workload::create_request(
        opts.namespace.as_str().into(),
        bytes::Bytes::new(),
        &rzk_benches::workload::open_acl(),
    ))
    .await
    .unwrap();
    let err = run(&opts, CancellationToken::new()).await.unwrap_err();
    assert!(err.to_string().contains("exists already"), "{err}");
    conn.close().await.unwrap();
    server.stop().await;
}

const BIN: &str = env!("CARGO_BIN_EXE_rzk-bench");

async fn bin(args: &[&str]) -> std::process::Output {
    tokio::process::Command::new(BIN)
        .args(args)
        .kill_on_drop(true)
        .output()
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_binary_prints_one_json_line_and_exits_zero() {
    let server = Server::start().await;
    let out = bin(&[
        "run",
        "--server",
        &server.addr,
        "--workload",
        "get",
        "--ops",
        "5000",
        "--sessions",
        "2",
        "--json",
        "--progress-seconds",
        "0",
        "--seed",
        "3",
    ])
    .await;
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(
        out.status.success(),
        "{stdout} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(stdout.lines().count(), 1, "{stdout}");
    let v: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap();
    assert_eq!(v["workload"], "get");
    assert_eq!(v["ops"], 5000);
    assert_eq!(v["errors"], 0);
    assert_eq!(v["sessions"], 2);
    // cpu_share is the generator's CPU time over the timed phase's wall time on all
    // cores (the same cores this test sees), within the JSON's rounding.
    let f = |k: &str| {
        v[k].as_f64()
            .unwrap_or_else(|| panic!("{k} is a number: {v}"))
    };
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
    let share = f("cpu_share");
    let expected = (f("cpu_user_s") + f("cpu_sys_s")) / (f("seconds") * cores);
    assert!(
        (share - expected).abs() <= 0.0005 + 0.01 / (f("seconds") * cores) + expected * 0.01,
        "cpu_share {share} but (user + sys) / (seconds x {cores} cores) = {expected}: {v}"
    );
    assert!(share <= 1.0, "{v}");
    // 5000 requests cost the generator measurable CPU time (the clock ticks are
    // 10 ms), so the figures above are not all zero.
    assert!(
        f("cpu_user_s") + f("cpu_sys_s") > 0.0,
        "no CPU time measured: {v}"
    );
    println!("{v}");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn populate_then_wait_serving_sees_the_children() {
    let server = Server::start().await;
    let out = bin(&[
        "populate",
        "--server",
        &server.addr,
        "--znodes",
        "500",
        "--sessions",
        "3",
        "--json",
    ])
    .await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["znodes"], 500);

    let ok = bin(&[
        "wait-serving",
        "--server",
        &server.addr,
        "--check-path",
        "/rzk-populate",
        "--expect-children",
        "500",
    ])
    .await;
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    let ms: u64 = String::from_utf8(ok.stdout)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(ms < 10_000);

    // A count that never comes: non-zero exit after the timeout.
    let wrong = bin(&[
        "wait-serving",
        "--server",
        &server.addr,
        "--check-path",
        "/rzk-populate",
        "--expect-children",
        "501",
        "--timeout-seconds",
        "1",
    ])
    .await;
    assert!(!wrong.status.success());
    assert!(String::from_utf8_lossy(&wrong.stderr).contains("500 children"));
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_serving_times_out_without_a_server() {
    // A port nobody listens on: bind, note it, drop.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let addr = format!("127.0.0.1:{port}");
    let out = bin(&[
        "wait-serving",
        "--server",
        &addr,
        "--timeout-seconds",
        "0.2",
    ])
    .await;
    assert!(!out.status.success());
    assert!(out.stdout.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_sessions_report_ready_and_close_when_stdin_closes() {
    let server = Server::start().await;
    let mut child = tokio::process::Command::new(BIN)
        .args([
            "idle-sessions",
            "--server",
            &server.addr,
            "--sessions",
            "20",
            "--hold-seconds",
            "60",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let line = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(line.as_deref(), Some("READY 20"));
    let mut stdin = child.stdin.take().unwrap();
    stdin.flush().await.unwrap();
    drop(stdin);
    let status = tokio::time::timeout(Duration::from_secs(30), child.wait())
        .await
        .unwrap()
        .unwrap();
    assert!(status.success());
    server.stop().await;
}

#[tokio::test]
async fn connect_storm_opens_keeps_resumes_and_closes_sessions() {
    use rzk_benches::connect_storm::{connect_storm, StormOptions};
    let server = Server::start().await;
    let mut opts = StormOptions {
        server: server.addr.clone(),
        sessions: 40,
        connect_parallelism: 8,
        session_timeout_ms: 30_000,
        resume: None,
        keep_open: true,
    };
    let opened = connect_storm(&opts).await;
    assert_eq!(
        (opened.established, opened.errors),
        (40, 0),
        "{:?}",
        opened.messages
    );
    assert_eq!((opened.mode, opened.saved.len()), ("new", 40));
    assert!(opened.latency.p50_us > 0 && opened.seconds > 0.0);
    // Left open: every one can be resumed, under its own id, and is then closed.
    opts.resume = Some(opened.saved.clone());
    opts.keep_open = false;
    let resumed = connect_storm(&opts).await;
    assert_eq!(
        (resumed.established, resumed.errors),
        (40, 0),
        "{:?}",
        resumed.messages
    );
    assert_eq!(resumed.mode, "resume");
    assert!(resumed.saved.is_empty());
    // Closed: resuming them again is refused, one error each.
    let again = connect_storm(&opts).await;
    assert_eq!((again.established, again.errors), (0, 40));
    server.stop().await;
}

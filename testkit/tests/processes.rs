//! The launcher and the `rzk-ensemble` CLI against real processes: this test
//! binary, started again with `RZK_TESTKIT_FAKE_MEMBER` set, is a fake server
//! that reads the zoo.cfg it is given (clientPort, dataDir/myid, server.N
//! lines, peerType) and answers `ruok` and `srvr` on its client port. Its mode
//! follows the `server.N` lines: `standalone` without any, `observer` with
//! peerType=observer, else `leader` when no voter of a lower id answers on its
//! client port, `follower` when one does. `fake.exit=N` in its zoo.cfg makes it
//! exit at once with status N.
//!
//! The harness is this file's `main` (`harness = false`): the same binary must
//! be the fake server when the variable is set.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use rzk_testkit::ensemble::{Ensemble, Layout, Program, Role};
use serde_json::Value;

const FAKE: &str = "RZK_TESTKIT_FAKE_MEMBER";

fn main() {
    if std::env::var_os(FAKE).is_some() {
        let cfg = std::env::args().nth(1).expect("a zoo.cfg");
        fake_member(Path::new(&cfg));
    }
    let tests: [(&str, fn()); 4] = [
        (
            "members_start_settle_die_and_come_back_on_their_ports",
            members_start_settle_die_and_come_back_on_their_ports,
        ),
        (
            "a_paused_member_answers_nothing_until_resumed",
            a_paused_member_answers_nothing_until_resumed,
        ),
        (
            "a_member_that_exits_fails_the_wait_at_once",
            a_member_that_exits_fails_the_wait_at_once,
        ),
        (
            "the_cli_starts_reports_kills_restarts_and_stops",
            the_cli_starts_reports_kills_restarts_and_stops,
        ),
    ];
    let filter: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    for (name, test) in tests {
        if !filter.is_empty() && !filter.iter().any(|f| name.contains(f.as_str())) {
            continue;
        }
        println!("test {name} ...");
        test();
        println!("test {name} ... ok");
    }
}

fn fake() -> Program {
    Program::rzk(std::env::current_exe().unwrap()).env(FAKE, "1")
}

fn members_start_settle_die_and_come_back_on_their_ports() {
    let root = tempfile::tempdir().unwrap();
    let mut e = Ensemble::new(fake(), root.path(), &Layout::voters(3).observers(1));
    e.spawn_all();
    assert_eq!(e.wait_settled_blocking(Duration::from_secs(30)), Ok(0));
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    assert_eq!(rt.block_on(e.settled()), 0);
    assert_eq!(e.members[3].mode_blocking().as_deref(), Some("observer"));
    assert_eq!(e.members[3].role, Role::Observer);

    let port = e.members[0].client;
    e.members[0].kill9();
    assert!(!e.members[0].running());
    assert_eq!(e.members[0].mode_blocking(), None);
    assert_eq!(
        rt.block_on(e.settled()),
        1,
        "member 2 leads without member 1"
    );

    e.members[0].spawn();
    assert_eq!(e.members[0].client, port);
    assert_eq!(e.wait_settled_blocking(Duration::from_secs(30)), Ok(0));
    assert_eq!(e.leader_blocking(), Some(0));
    assert_eq!(
        e.members[0].log().matches("fake member 1 serving").count(),
        2,
        "one log across restarts"
    );

    e.members[2].term(Duration::from_secs(10));
    assert!(!e.members[2].is_alive());
    e.stop_all(Duration::from_secs(10));
    for m in &mut e.members {
        assert!(!m.is_alive());
    }
}

fn a_paused_member_answers_nothing_until_resumed() {
    let root = tempfile::tempdir().unwrap();
    let mut e = Ensemble::new(fake(), root.path(), &Layout::standalone());
    e.spawn_all();
    assert_eq!(e.wait_settled_blocking(Duration::from_secs(30)), Ok(0));
    let m = &e.members[0];
    assert_eq!(m.mode_blocking().as_deref(), Some("standalone"));
    m.pause();
    assert!(rzk_testkit::procs::all_threads_stopped(m.pid()));
    assert_eq!(
        m.four_letter_blocking("ruok"),
        "",
        "a stopped member answers nothing"
    );
    m.resume();
    assert_eq!(m.four_letter_blocking("ruok"), "imok");
}

fn a_member_that_exits_fails_the_wait_at_once() {
    let root = tempfile::tempdir().unwrap();
    let layout = Layout::voters(3).set_for(2, "fake.exit", 3);
    let mut e = Ensemble::new(fake(), root.path(), &layout);
    e.spawn_all();
    let t = Instant::now();
    let err = e
        .wait_settled_blocking(Duration::from_secs(60))
        .expect_err("member 2 exits");
    assert!(err.contains("member 2 exited"), "{err}");
    assert!(err.contains("exit status: 3"), "{err}");
    assert!(err.contains("fake member 2 exits"), "with its log: {err}");
    assert!(
        t.elapsed() < Duration::from_secs(30),
        "at once, not at the deadline"
    );
}

fn cli(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_rzk-ensemble"))
        .args(args)
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn status(dir: &str) -> Value {
    let (ok, out, err) = cli(&["status", "--dir", dir, "--json"]);
    assert!(ok, "{err}");
    serde_json::from_str(&out).unwrap()
}

fn the_cli_starts_reports_kills_restarts_and_stops() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("e");
    let dir = dir.to_str().unwrap();
    let exe = std::env::current_exe().unwrap();
    let env = format!("{FAKE}=1");
    let (ok, out, err) = cli(&[
        "start",
        "--dir",
        dir,
        "--rzk",
        exe.to_str().unwrap(),
        "--env",
        &env,
        "--voters",
        "3",
        "--set",
        "snapCount=7",
        "--timeout",
        "30",
    ]);
    assert!(ok, "{err}");
    let connect = out.trim().to_owned();
    assert_eq!(connect.split(',').count(), 3, "{out}");
    let cfg = std::fs::read_to_string(root.path().join("e/m2/zoo.cfg")).unwrap();
    assert!(cfg.contains("snapCount=7\n"), "{cfg}");

    let s = status(dir);
    assert_eq!(s["leader"], 1);
    assert_eq!(s["connect"], connect.as_str());
    let pids: Vec<u64> = s["members"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["pid"].as_u64().unwrap())
        .collect();
    let (ok, out, _) = cli(&["pids", "--dir", dir]);
    assert!(ok);
    assert_eq!(
        out.trim(),
        pids.iter()
            .map(u64::to_string)
            .collect::<Vec<_>>()
            .join(",")
    );
    let (again, _, err) = cli(&["start", "--dir", dir, "--rzk", "/bin/true"]);
    assert!(!again && err.contains("is running"), "{err}");

    let (ok, _, err) = cli(&["kill", "--dir", dir, "leader"]);
    assert!(ok, "{err}");
    assert!(!Path::new(&format!("/proc/{}/stat", pids[0])).exists() || gone(pids[0]));
    let (ok, _, err) = cli(&["wait", "--dir", dir, "--timeout", "30"]);
    assert!(ok, "{err}");
    let (ok, _, err) = cli(&["status", "--dir", dir, "--require-running"]);
    assert!(!ok && err.contains("members not running: 1"), "{err}");
    let s = status(dir);
    assert_eq!(s["leader"], 2);
    assert_eq!(s["members"][0]["alive"], false);
    let (ok, out, _) = cli(&["leader", "--dir", dir]);
    assert!(ok);
    assert_eq!(out.trim(), "2");

    let (ok, _, err) = cli(&["restart", "--dir", dir, "1", "--until", "settled"]);
    assert!(ok, "{err}");
    let (ok, _, err) = cli(&["status", "--dir", dir, "--require-running"]);
    assert!(ok, "{err}");
    let s = status(dir);
    assert_eq!(s["leader"], 1);
    assert_ne!(s["members"][0]["pid"].as_u64().unwrap(), pids[0]);
    let (ok, out, _) = cli(&["connect", "--dir", dir, "2", "3"]);
    assert!(ok);
    assert_eq!(
        out.trim(),
        connect.split(',').skip(1).collect::<Vec<_>>().join(",")
    );

    let (ok, _, err) = cli(&["pause", "--dir", dir, "3"]);
    assert!(ok, "{err}");
    let pid3 = s["members"][2]["pid"].as_u64().unwrap() as u32;
    assert!(rzk_testkit::procs::all_threads_stopped(pid3));
    let (ok, _, err) = cli(&["resume", "--dir", dir, "3"]);
    assert!(ok, "{err}");

    let (ok, _, err) = cli(&["stop", "--dir", dir]);
    assert!(ok, "{err}");
    let s = status(dir);
    for m in s["members"].as_array().unwrap() {
        assert_eq!(m["alive"], false, "{m}");
    }
}

/// Whether `pid` has exited (a zombie, waiting for a parent that is gone).
fn gone(pid: u64) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| s.rsplit_once(')').unwrap().1.trim_start().starts_with('Z'))
        .unwrap_or(true)
}

// ---- the fake member -------------------------------------------------------

fn fake_member(cfg: &Path) -> ! {
    let text = std::fs::read_to_string(cfg).unwrap();
    let get = |k: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(k)?.strip_prefix('='))
            .map(str::to_owned)
    };
    let lines: Vec<(u64, bool, Option<SocketAddr>)> = text
        .lines()
        .filter_map(|l| {
            let (key, value) = l.strip_prefix("server.")?.split_once('=')?;
            let client = value.split_once(';').and_then(|(_, c)| c.parse().ok());
            Some((key.parse().ok()?, value.contains(":observer"), client))
        })
        .collect();
    let data = get("dataDir").unwrap();
    let me: u64 = std::fs::read_to_string(Path::new(&data).join("myid"))
        .map(|s| s.trim().parse().unwrap())
        .unwrap_or(0);
    if let Some(code) = get("fake.exit") {
        println!("fake member {me} exits");
        std::process::exit(code.parse().unwrap());
    }
    let addr = format!(
        "{}:{}",
        get("clientPortAddress").unwrap(),
        get("clientPort").unwrap()
    );
    let listener = TcpListener::bind(&addr).unwrap();
    println!("fake member {me} serving on {addr}");
    for conn in listener.incoming() {
        let Ok(mut s) = conn else { continue };
        let mut word = [0u8; 4];
        if s.read_exact(&mut word).is_err() {
            continue;
        }
        let answer = match &word {
            b"ruok" => "imok".to_owned(),
            b"srvr" => format!(
                "Zookeeper version: fake\nMode: {}\n",
                mode(me, &lines, &get)
            ),
            _ => String::new(),
        };
        let _ = s.write_all(answer.as_bytes());
    }
    unreachable!("a listener's incoming() never ends")
}

fn mode(
    me: u64,
    lines: &[(u64, bool, Option<SocketAddr>)],
    get: &dyn Fn(&str) -> Option<String>,
) -> &'static str {
    if lines.is_empty() {
        return "standalone";
    }
    if get("peerType").as_deref() == Some("observer") {
        return "observer";
    }
    let lower_voter_up = lines.iter().any(|(id, observer, client)| {
        *id < me
            && !observer
            && client
                .is_some_and(|c| TcpStream::connect_timeout(&c, Duration::from_millis(500)).is_ok())
    });
    if lower_voter_up {
        "follower"
    } else {
        "leader"
    }
}

//! The `rzk` binary's log as an operator reads it: no colour codes when stderr
//! is a file, `--log-format json` gives one JSON object per line, and at `info`
//! there is one line per session opened, closed or expired and nothing per
//! request.
mod support;

use rzk_testkit::ports::{reserve, Port};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use support::*;
use zookeeper_client as zk;

/// An `rzk` child process whose stderr goes to a file (not a terminal).
struct Rzk {
    child: Child,
    port: Port,
    log: PathBuf,
}

impl Rzk {
    fn spawn(dir: &Path, args: &[&str]) -> Rzk {
        let port = reserve();
        let log = dir.join("rzk.log");
        let child = Command::new(env!("CARGO_BIN_EXE_rzk"))
            .args(["--client-port", &port.to_string()])
            .args(["--client-port-address", "127.0.0.1"])
            .arg("--data-dir")
            .arg(dir.join("data"))
            .args(["--tick-time", "200", "--set", "minSessionTimeout=400"])
            // No snapshot during the test: its lines are not the subject here.
            .args([
                "--set",
                "snapCount=1000000",
                "--set",
                "4lw.commands.whitelist=ruok",
            ])
            .args(args)
            .env_remove("RUST_LOG")
            .env_remove("NO_COLOR")
            .stdout(Stdio::null())
            .stderr(Stdio::from(std::fs::File::create(&log).unwrap()))
            .spawn()
            .unwrap();
        Rzk { child, port, log }
    }

    fn addr(&self) -> std::net::SocketAddr {
        format!("127.0.0.1:{}", self.port).parse().unwrap()
    }

    async fn wait_ready(&self) {
        let addr = self.addr();
        eventually(Duration::from_secs(30), "rzk answers ruok", || async move {
            use tokio::io::{AsyncReadExt, AsyncWriteExt};
            let Ok(mut s) = tokio::net::TcpStream::connect(addr).await else {
                return false;
            };
            let _ = s.write_all(b"ruok").await;
            let mut out = String::new();
            let _ = s.read_to_string(&mut out).await;
            out == "imok"
        })
        .await;
    }

    fn log_text(&self) -> String {
        String::from_utf8(std::fs::read(&self.log).unwrap()).unwrap()
    }

    /// SIGTERM, then waits for the exit (the log is complete after).
    async fn stop(mut self) -> String {
        let status = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while self.child.try_wait().unwrap().is_none() {
            assert!(std::time::Instant::now() < deadline, "rzk did not stop");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        self.log_text()
    }
}

impl Drop for Rzk {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn connect(addr: std::net::SocketAddr) -> zk::Client {
    zk::Client::connector()
        .with_session_timeout(Duration::from_secs(10))
        .connect(&addr.to_string())
        .await
        .expect("connect")
}

/// Some of every kind of request a client sends.
async fn requests(c: &zk::Client, n: usize) {
    let opts = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
    for i in 0..n {
        let p = format!("/n{i}");
        c.create(&p, b"x", &opts).await.unwrap();
        c.get_data(&p).await.unwrap();
        c.set_data(&p, b"y", None).await.unwrap();
        c.list_children("/").await.unwrap();
        c.check_stat(&p).await.unwrap();
        c.delete(&p, None).await.unwrap();
    }
    // and failing ones
    assert!(c.get_data("/missing").await.is_err());
    assert!(c.create("/a/b/c", b"", &opts).await.is_err());
}

#[tokio::test]
async fn text_log_has_no_colour_codes_when_stderr_is_a_file() {
    let dir = tempfile::tempdir().unwrap();
    let server = Rzk::spawn(dir.path(), &[]);
    server.wait_ready().await;
    let c = connect(server.addr()).await;
    requests(&c, 3).await;
    drop(c);
    let log = server.stop().await;
    assert!(log.contains("INFO"), "{log}");
    assert!(log.contains("session established"), "{log}");
    assert!(
        !log.contains('\u{1b}'),
        "escape codes in a redirected log:\n{log:?}"
    );
}

#[tokio::test]
async fn json_log_is_one_object_per_line() {
    let dir = tempfile::tempdir().unwrap();
    // The zoo.cfg key and the flag are the same setting; the key is tested here.
    let server = Rzk::spawn(dir.path(), &["--set", "rzk.log.format=json"]);
    server.wait_ready().await;
    let c = connect(server.addr()).await;
    requests(&c, 2).await;
    drop(c);
    let log = server.stop().await;
    let mut levels = std::collections::BTreeSet::new();
    for line in log.lines() {
        let v: serde_json::Value = serde_json::from_str(line)
            .unwrap_or_else(|e| panic!("not a JSON object ({e}): {line:?}"));
        let level = v["level"].as_str().expect("level");
        assert!(v["timestamp"].is_string(), "{line}");
        assert!(v["target"].is_string(), "{line}");
        assert!(v["fields"]["message"].is_string(), "{line}");
        levels.insert(level.to_owned());
    }
    assert!(levels.contains("INFO"), "{log}");
    assert!(log.contains("\"message\":\"session established\""), "{log}");
    assert!(!log.contains('\u{1b}'), "{log:?}");
}

/// The info lines of a JSON log, as (message, session field).
fn info_lines(log: &str) -> Vec<(String, Option<String>)> {
    log.lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v["level"] == "INFO")
        .map(|v| {
            (
                v["fields"]["message"].as_str().unwrap_or("").to_owned(),
                v["fields"]["session"].as_str().map(str::to_owned),
            )
        })
        .collect()
}

#[tokio::test]
async fn one_info_line_per_session_event_and_none_per_request() {
    let dir = tempfile::tempdir().unwrap();
    let server = Rzk::spawn(dir.path(), &["--log-format", "json"]);
    server.wait_ready().await;
    let addr = server.addr();

    // A session that closes.
    let c = connect(addr).await;
    let closed = format!("{:#x}", c.session_id().0);
    let before = info_lines(&server.log_text()).len();
    requests(&c, 20).await;
    let during = info_lines(&server.log_text()).len();
    // Dropping the last handle closes the session (closeSession request).
    drop(c);

    // A session that expires: it stops pinging and its socket goes away.
    let (raw, resp) = Raw::connect(addr, 400).await;
    let expired = format!("{:#x}", resp.session_id.0);
    drop(raw);
    let sids = [closed.clone(), expired.clone()];
    let log_path = server.log.clone();
    eventually(
        Duration::from_secs(10),
        "one session closes, one expires",
        || {
            let log = std::fs::read_to_string(&log_path).unwrap();
            let lines = info_lines(&log);
            let done = sids.iter().all(|sid| {
                lines
                    .iter()
                    .filter(|(_, s)| s.as_deref() == Some(sid.as_str()))
                    .count()
                    >= 2
            });
            async move { done }
        },
    )
    .await;
    let log = server.stop().await;
    let lines = info_lines(&log);

    // 120 requests, including failing ones, and not one info line for them.
    assert_eq!(
        during,
        before,
        "info lines while requests ran:\n{:#?}",
        &lines[before..during]
    );
    for sid in [&closed, &expired] {
        let about: Vec<&str> = lines
            .iter()
            .filter(|(_, s)| s.as_deref() == Some(sid.as_str()))
            .map(|(m, _)| m.as_str())
            .collect();
        assert_eq!(about.len(), 2, "info lines of session {sid}: {about:?}");
        assert!(about[0].contains("established"), "{about:?}");
    }
    let of = |sid: &str| -> Vec<String> {
        lines
            .iter()
            .filter(|(_, s)| s.as_deref() == Some(sid))
            .map(|(m, _)| m.clone())
            .collect()
    };
    assert!(of(&closed)[1].contains("clos"), "{:?}", of(&closed));
    assert!(of(&expired)[1].contains("expired"), "{:?}", of(&expired));
}

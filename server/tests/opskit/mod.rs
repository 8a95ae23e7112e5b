//! Helpers for the operations tests: an `rzk` child process with a zoo.cfg,
//! free ports, plain HTTP GETs and four-letter words.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use rzk_testkit::ports::Port;

/// A port for a server the test starts, held until the `Port` drops
/// (`rzk_testkit::ports`): keep it alive as long as the server runs.
pub fn free_port() -> Port {
    rzk_testkit::ports::reserve()
}

/// An `rzk` child process started with `zoo.cfg` lines; its log is a file.
pub struct Rzk {
    pub child: Child,
    pub port: u16,
    pub log: PathBuf,
    _port: Port,
}

impl Rzk {
    pub fn spawn(dir: &Path, lines: &[String]) -> Rzk {
        let reserved = free_port();
        let port = reserved.get();
        let cfg = dir.join("zoo.cfg");
        let mut text = format!(
            "tickTime=200\ndataDir={}\nclientPort={port}\nclientPortAddress=127.0.0.1\n\
             4lw.commands.whitelist=*\n",
            dir.join("data").display(),
        );
        for l in lines {
            text.push_str(l);
            text.push('\n');
        }
        std::fs::write(&cfg, text).unwrap();
        let log = dir.join("rzk.log");
        let child = Command::new(env!("CARGO_BIN_EXE_rzk"))
            .arg(&cfg)
            .env_remove("RUST_LOG")
            .stdout(Stdio::null())
            .stderr(Stdio::from(std::fs::File::create(&log).unwrap()))
            .spawn()
            .unwrap();
        Rzk {
            child,
            port,
            log,
            _port: reserved,
        }
    }

    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Waits (30 s at most) until rzk answers `ruok`; panics with its log if it
    /// exits or does not answer.
    pub async fn wait_ready(&mut self) {
        for _ in 0..600 {
            if let Some(status) = self.child.try_wait().unwrap() {
                panic!("rzk exited with {status}:\n{}", self.log_text());
            }
            if four_letter(&self.addr(), "ruok").await == "imok" {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("rzk did not start:\n{}", self.log_text());
    }
}

impl Drop for Rzk {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A four-letter word's answer (empty when the server cannot be reached).
///
/// The whole exchange is bounded (10 s): a server that accepts and never answers or
/// closes (a JVM still starting, a wedged process) gives an empty answer, so callers
/// that poll keep polling against their own deadline instead of hanging.
pub async fn four_letter(addr: &str, word: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let exchange = async {
        let Ok(mut s) = tokio::net::TcpStream::connect(addr).await else {
            return String::new();
        };
        let _ = s.write_all(word.as_bytes()).await;
        let mut out = String::new();
        let _ = s.read_to_string(&mut out).await;
        out
    };
    tokio::time::timeout(Duration::from_secs(10), exchange)
        .await
        .unwrap_or_default()
}

/// `GET path` over HTTP/1.0 (no chunked bodies): (status, content type, body).
pub async fn http_get(addr: &str, path: &str) -> (u16, String, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let req = format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    s.write_all(req.as_bytes()).await.unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).await.unwrap();
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let ctype = head
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("content-type")
                .then(|| v.trim().to_owned())
        })
        .unwrap_or_default();
    (status, ctype, body.to_owned())
}

/// The status of `GET path`, or `None` if nothing answers.
pub async fn http_status(addr: &str, path: &str) -> Option<u16> {
    if tokio::net::TcpStream::connect(addr).await.is_err() {
        return None;
    }
    Some(http_get(addr, path).await.0)
}

//! `rzk-bench wait-serving`: polls until the server establishes a session and
//! answers a read (and, if asked, a path has the expected number of children).

use std::time::{Duration, Instant};

use rzk_wire::{ExistsRequest, Request, Response};

use crate::conn::Conn;
use crate::error::BenchError;

/// Pause between attempts.
pub const RETRY_PAUSE: Duration = Duration::from_millis(5);

/// Longest a single attempt may take before the next one starts.
pub const ATTEMPT_LIMIT: Duration = Duration::from_secs(2);

/// Options of `rzk-bench wait-serving`.
#[derive(Clone, Debug)]
pub struct WaitOptions {
    /// `host:port` of the server.
    pub server: String,
    /// Give up after this long.
    pub timeout: Duration,
    /// A path and how many children it must have.
    pub check: Option<(String, u64)>,
}

/// Waits until the server serves; returns the time it took. On timeout the
/// error says what the last attempt saw.
pub async fn wait_serving(opts: &WaitOptions) -> Result<Duration, BenchError> {
    let started = Instant::now();
    let deadline = started + opts.timeout;
    // The most telling failure: an attempt cut short by the deadline says
    // less than the answer before it ("has 500 children, waiting for 501").
    let mut telling: Option<BenchError> = None;
    loop {
        let remaining = deadline.saturating_duration_since(Instant::now());
        match attempt(opts, remaining.min(ATTEMPT_LIMIT)).await {
            Ok(()) => return Ok(started.elapsed()),
            Err(BenchError::Timeout { .. } | BenchError::Options(_)) if telling.is_some() => {}
            Err(e) => telling = Some(e),
        }
        if Instant::now() + RETRY_PAUSE >= deadline {
            let last = telling.map(|e| e.to_string()).unwrap_or_default();
            return Err(BenchError::Timeout {
                what: format!("wait-serving (last failure: {last})"),
                server: opts.server.clone(),
                after: opts.timeout,
            });
        }
        tokio::time::sleep(RETRY_PAUSE).await;
    }
}

async fn attempt(opts: &WaitOptions, limit: Duration) -> Result<(), BenchError> {
    if limit.is_zero() {
        return Err(BenchError::Options("no time left".into()));
    }
    let work = async {
        let mut conn = Conn::connect(&opts.server, 30_000, limit).await?;
        let (path, expected) = match &opts.check {
            Some((path, n)) => (path.as_str(), Some(*n)),
            None => ("/", None),
        };
        let exists = Request::Exists(ExistsRequest {
            path: path.into(),
            watch: false,
        });
        let response = conn.call_ok(&exists).await?;
        let _ = conn.close().await;
        let Response::Stat(stat) = response else {
            return Err(BenchError::WrongAnswer(format!(
                "exists {path}: reply body {response:?}"
            )));
        };
        match expected {
            Some(n) if stat.num_children as u64 != n => Err(BenchError::WrongAnswer(format!(
                "{path} has {} children, waiting for {n}",
                stat.num_children
            ))),
            _ => Ok(()),
        }
    };
    match tokio::time::timeout(limit, work).await {
        Ok(result) => result,
        Err(_) => Err(BenchError::Timeout {
            what: "attempt".into(),
            server: opts.server.clone(),
            after: limit,
        }),
    }
}

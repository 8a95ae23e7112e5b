//! `rzk-bench connect-storm`: N sessions established K at a time, as the
//! clients of a restarted or failed server all come back at once.
//!
//! One session is one TCP connect, the ConnectRequest (a new session, or with
//! `resume` the id and password of a saved one), its ConnectResponse, and one
//! ping answered: the `zookeeper-client` crate counts a connection as
//! established only then, and a server that gives the ping no request slot
//! shows up here. Its latency is measured from the TCP connect to the ping's
//! reply; the rate is sessions over the wall time from the first connect to the
//! last session established.
//!
//! Established sessions stay open (pinged every third of their timeout) until
//! all are established, so that the server holds all N at the end. Then they
//! are closed with closeSession (untimed), or, with `keep_open`, left open on
//! the server (the connections are dropped) so that a later `resume` run can
//! come back to them, typically after the server was restarted.

use std::fmt::Write as _;
use std::time::Instant;

use bytes::Bytes;
use futures::StreamExt;
use rzk_wire::SessionId;
use tokio_util::sync::CancellationToken;

use crate::conn::Conn;
use crate::error::BenchError;
use crate::pipeline::{micros_since, new_histogram, ERROR_MESSAGES_MAX};
use crate::report::{cores, CpuTime, Percentiles};
use crate::run::CONNECT_LIMIT;

/// A session to come back to: what a ConnectRequest needs to resume it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SavedSession {
    /// The session id.
    pub id: SessionId,
    /// Its password.
    pub passwd: Bytes,
    /// Its negotiated timeout.
    pub timeout_ms: i32,
}

impl SavedSession {
    /// One line of a sessions file: `0x<id> <password hex> <timeout ms>`.
    pub fn to_line(&self) -> String {
        let mut line = format!("{} ", self.id);
        for b in self.passwd.iter() {
            let _ = write!(line, "{b:02x}");
        }
        let _ = write!(line, " {}", self.timeout_ms);
        line
    }

    /// Parses [`SavedSession::to_line`]'s form.
    pub fn parse_line(line: &str) -> Result<SavedSession, BenchError> {
        let bad = || BenchError::Options(format!("bad sessions-file line {line:?}"));
        let mut fields = line.split_whitespace();
        let id = fields.next().ok_or_else(bad)?;
        let id = i64::from_str_radix(id.strip_prefix("0x").ok_or_else(bad)?, 16)
            .or_else(|_| u64::from_str_radix(&id[2..], 16).map(|v| v as i64))
            .map_err(|_| bad())?;
        let hex = fields.next().ok_or_else(bad)?;
        if hex.len() % 2 != 0 {
            return Err(bad());
        }
        let passwd = (0..hex.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&hex[i..i + 2], 16))
            .collect::<Result<Vec<u8>, _>>()
            .map_err(|_| bad())?;
        let timeout_ms = fields.next().ok_or_else(bad)?.parse().map_err(|_| bad())?;
        if fields.next().is_some() {
            return Err(bad());
        }
        Ok(SavedSession {
            id: SessionId(id),
            passwd: passwd.into(),
            timeout_ms,
        })
    }
}

/// Options of `rzk-bench connect-storm`.
#[derive(Clone, Debug)]
pub struct StormOptions {
    /// `host:port` of the server.
    pub server: String,
    /// Sessions to establish (ignored with `resume`: one per saved session).
    pub sessions: usize,
    /// Connects in progress at once.
    pub connect_parallelism: usize,
    /// Session timeout asked for (new sessions).
    pub session_timeout_ms: i32,
    /// Resume these sessions instead of creating new ones.
    pub resume: Option<Vec<SavedSession>>,
    /// Leave the sessions open on the server at the end (drop the connections
    /// without closeSession) and report them in [`StormReport::saved`].
    pub keep_open: bool,
}

/// What a storm measured.
#[derive(Clone, Debug, PartialEq)]
pub struct StormReport {
    /// `"new"` or `"resume"`.
    pub mode: &'static str,
    /// The server as given.
    pub server: String,
    /// Sessions attempted.
    pub sessions: usize,
    /// Connects in progress at once.
    pub parallelism: usize,
    /// Sessions established (connected and pinged).
    pub established: u64,
    /// Failures: connects, pings, keep-alives, closes.
    pub errors: u64,
    /// Wall time from the first connect to the last session established.
    pub seconds: f64,
    /// Connect-to-ping-reply latency of the established sessions.
    pub latency: Percentiles,
    /// The generator's CPU time during the storm.
    pub cpu: CpuTime,
    /// Cores available, for the CPU share.
    pub cores: usize,
    /// The first error messages.
    pub messages: Vec<String>,
    /// With `keep_open`: the sessions left open, to resume later.
    pub saved: Vec<SavedSession>,
}

impl StormReport {
    /// Sessions established per second.
    pub fn sessions_per_sec(&self) -> f64 {
        if self.seconds > 0.0 {
            self.established as f64 / self.seconds
        } else {
            0.0
        }
    }

    /// One JSON line.
    pub fn to_json(&self) -> String {
        let ms = |us: u64| us as f64 / 1000.0;
        serde_json::json!({
            "command": "connect-storm",
            "mode": self.mode,
            "server": self.server,
            "sessions": self.sessions,
            "parallelism": self.parallelism,
            "established": self.established,
            "errors": self.errors,
            "seconds": self.seconds,
            "sessions_per_sec": self.sessions_per_sec(),
            "p50_ms": ms(self.latency.p50_us),
            "p90_ms": ms(self.latency.p90_us),
            "p99_ms": ms(self.latency.p99_us),
            "p999_ms": ms(self.latency.p999_us),
            "max_ms": ms(self.latency.max_us),
            "cpu_user_s": self.cpu.user_s,
            "cpu_sys_s": self.cpu.sys_s,
            "cores": self.cores,
        })
        .to_string()
    }
}

/// One session: connect (or resume) and a ping answered.
async fn establish(
    server: &str,
    timeout_ms: i32,
    saved: Option<SavedSession>,
) -> Result<Conn, BenchError> {
    let mut conn = match saved {
        None => Conn::connect(server, timeout_ms, CONNECT_LIMIT).await?,
        Some(s) => Conn::resume(server, s.id, s.passwd, s.timeout_ms, CONNECT_LIMIT).await?,
    };
    if conn.session_id() == SessionId::NONE {
        return Err(BenchError::WrongAnswer(format!(
            "{server}: ConnectResponse with session id 0"
        )));
    }
    conn.ping().await?;
    Ok(conn)
}

/// Runs the storm.
pub async fn connect_storm(opts: &StormOptions) -> StormReport {
    let targets: Vec<Option<SavedSession>> = match &opts.resume {
        Some(saved) => saved.iter().cloned().map(Some).collect(),
        None => vec![None; opts.sessions],
    };
    let parallelism = opts.connect_parallelism.max(1);
    let mut report = StormReport {
        mode: if opts.resume.is_some() {
            "resume"
        } else {
            "new"
        },
        server: opts.server.clone(),
        sessions: targets.len(),
        parallelism,
        established: 0,
        errors: 0,
        seconds: 0.0,
        latency: Percentiles::default(),
        cpu: CpuTime::default(),
        cores: cores(),
        messages: Vec::new(),
        saved: Vec::new(),
    };
    let note = |report: &mut StormReport, message: String| {
        report.errors += 1;
        if report.messages.len() < ERROR_MESSAGES_MAX {
            report.messages.push(message);
        }
    };
    let hold_end = CancellationToken::new();
    let mut latency = new_histogram();
    let mut holders = Vec::with_capacity(targets.len());
    let cpu0 = CpuTime::now();
    let t0 = Instant::now();
    let mut connects = futures::stream::iter(targets)
        .map(|saved| async {
            let started = Instant::now();
            let outcome = establish(&opts.server, opts.session_timeout_ms, saved).await;
            (outcome, micros_since(started))
        })
        .buffer_unordered(parallelism);
    while let Some((outcome, us)) = connects.next().await {
        let mut conn = match outcome {
            Ok(conn) => conn,
            Err(e) => {
                note(&mut report, format!("connect: {e}"));
                continue;
            }
        };
        latency.saturating_record(us);
        report.established += 1;
        if opts.keep_open {
            report.saved.push(SavedSession {
                id: conn.session_id(),
                passwd: conn.passwd().clone(),
                timeout_ms: conn.timeout_ms(),
            });
        }
        let (hold_end, keep_open) = (hold_end.clone(), opts.keep_open);
        holders.push(tokio::spawn(async move {
            conn.keep_alive(hold_end.cancelled()).await?;
            if keep_open {
                return Ok(());
            }
            conn.close().await
        }));
    }
    drop(connects);
    report.seconds = t0.elapsed().as_secs_f64();
    report.cpu = CpuTime::now().since(cpu0);
    report.latency = Percentiles::of(&latency);
    hold_end.cancel();
    for joined in futures::future::join_all(holders).await {
        match joined {
            Ok(Ok(())) => {}
            Ok(Err(e)) => note(&mut report, format!("keep-alive or close: {e}")),
            Err(e) => note(&mut report, format!("session task failed: {e}")),
        }
    }
    report
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn saved_sessions_round_trip_through_their_line() {
        let s = SavedSession {
            id: SessionId(0x0100_0000_0000_002a),
            passwd: Bytes::from_static(&[0, 1, 0xfe, 0xff]),
            timeout_ms: 30_000,
        };
        assert_eq!(s.to_line(), "0x10000000000002a 0001feff 30000");
        assert_eq!(SavedSession::parse_line(&s.to_line()).unwrap(), s);
        let negative = SavedSession {
            id: SessionId(-2),
            ..s.clone()
        };
        assert_eq!(
            SavedSession::parse_line(&negative.to_line()).unwrap(),
            negative
        );
        for bad in [
            "",
            "42 00 1",
            "0x2a 0 1",
            "0x2a zz 1",
            "0x2a 00",
            "0x2a 00 1 x",
        ] {
            assert!(SavedSession::parse_line(bad).is_err(), "{bad:?}");
        }
    }
}

//! The hot path: one session driven with up to K requests in flight.
//!
//! The connection is split into a writer half and a reader half, run
//! concurrently inside the session's task. The writer takes a credit (a
//! semaphore of K permits), asks the [`Workload`] for a request, records it as
//! pending (xid, opcode, send time, [`Expect`]) *before* writing it, and
//! batches as many requests as it has credits into one write. It pings when it
//! has written nothing for a third of the session timeout. The reader decodes
//! replies; ZooKeeper answers a session's requests in order, so each reply must
//! carry the xid of the oldest pending request (checked), skips ping replies
//! (xid -2), counts unexpected notifications (xid -1) as errors, checks each
//! reply with [`check`], records its latency and returns the credit.
//!
//! Open loop ([`Pace`]): the writer also waits for each operation's due time
//! and sends it then, whether or not earlier ones were answered (within the
//! K credits); its latency counts from the due time, so a server that falls
//! behind its offered load shows the queue in the percentiles instead of
//! slowing the generator down (no coordinated omission).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use hdrhistogram::Histogram;
use rzk_wire::client::Incoming;
use rzk_wire::{ClientCodec, OpCode, RequestFrame, Xid};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::{Notify, Semaphore};
use tokio_util::codec::{Decoder, Encoder};

use crate::conn::{ping_interval, ConnParts};
use crate::error::BenchError;
use crate::workload::{check, Expect, Workload};

/// At most this many error messages are kept per session (all are counted).
pub const ERROR_MESSAGES_MAX: usize = 10;

/// Highest latency the histograms track: 10 minutes, in microseconds.
pub const LATENCY_US_MAX: u64 = 600_000_000;

/// A latency histogram in microseconds, 3 significant digits.
pub fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, LATENCY_US_MAX, 3).expect("static histogram bounds are valid")
}

/// Microseconds since `since`, at least 1 (the histogram's lowest value).
pub fn micros_since(since: Instant) -> u64 {
    (since.elapsed().as_micros() as u64).max(1)
}

/// An open-loop schedule for one session: operation `k` is due at
/// `first + k × interval`, whether or not the earlier ones were answered.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Pace {
    /// When the session's first operation is due.
    pub first: Instant,
    /// Between two of the session's operations.
    pub interval: Duration,
}

impl Pace {
    /// Session `s` of `sessions` offering, together, `rate` operations per
    /// second from `start`: each session offers `rate / sessions`, and their
    /// schedules interleave evenly (session `s` starts `s / sessions` of an
    /// interval after session 0), so the server sees an even stream.
    pub fn for_session(start: Instant, rate: f64, sessions: usize, s: usize) -> Pace {
        let interval = Duration::from_secs_f64(sessions as f64 / rate);
        Pace {
            first: start + interval.mul_f64(s as f64 / sessions as f64),
            interval,
        }
    }

    /// When operation `k` (from 0) is due.
    pub fn due(&self, k: u64) -> Instant {
        self.first + self.interval.mul_f64(k as f64)
    }
}

/// Decides, across all sessions of a run, whether another operation may
/// start: a stop flag (time is up, Ctrl-C, a fatal error) and an optional
/// shared op budget.
#[derive(Debug)]
pub struct Budget {
    stopped: AtomicBool,
    /// Operations left to start, or `None` for a timed run.
    remaining: Option<AtomicU64>,
}

impl Budget {
    /// A budget of `ops` operations, or unlimited (until [`Budget::stop`]).
    pub fn new(ops: Option<u64>) -> Budget {
        Budget {
            stopped: AtomicBool::new(false),
            remaining: ops.map(AtomicU64::new),
        }
    }

    /// Takes one operation; false once stopped or exhausted.
    pub fn take(&self) -> bool {
        if self.stopped.load(Ordering::Relaxed) {
            return false;
        }
        match &self.remaining {
            None => true,
            Some(r) => r
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1))
                .is_ok(),
        }
    }

    /// No operation starts after this.
    pub fn stop(&self) {
        self.stopped.store(true, Ordering::Relaxed);
    }

    /// Whether [`Budget::stop`] was called.
    pub fn is_stopped(&self) -> bool {
        self.stopped.load(Ordering::Relaxed)
    }
}

/// Counters every session updates as replies arrive, read by the progress
/// line.
#[derive(Debug, Default)]
pub struct LiveCounters {
    /// Operations answered as expected.
    pub ops: AtomicU64,
    /// Wrong answers and failures.
    pub errors: AtomicU64,
}

/// What one session's drive produced.
#[derive(Debug)]
pub struct DriveStats {
    /// Latency of every checked operation, µs.
    pub latency_us: Histogram<u64>,
    /// Operations answered as expected.
    pub ops: u64,
    /// Wrong answers, unexpected notifications and connection failures.
    pub errors: u64,
    /// The first [`ERROR_MESSAGES_MAX`] error messages.
    pub messages: Vec<String>,
    /// Whether the connection broke (it cannot be used any more).
    pub broken: bool,
}

impl DriveStats {
    fn new() -> DriveStats {
        DriveStats {
            latency_us: new_histogram(),
            ops: 0,
            errors: 0,
            messages: Vec::new(),
            broken: false,
        }
    }

    /// Counts one error and keeps its message if there is room.
    pub fn error(&mut self, message: String) {
        self.errors += 1;
        if self.messages.len() < ERROR_MESSAGES_MAX {
            self.messages.push(message);
        }
    }
}

/// One request on the wire, waiting for its reply.
#[derive(Debug)]
struct Pending {
    xid: Xid,
    opcode: OpCode,
    sent: Instant,
    expect: Expect,
}

/// State shared by the two halves of one session (both run in the same task).
struct Shared {
    pending: Mutex<VecDeque<Pending>>,
    credits: Semaphore,
    /// The writer sent its last request.
    writer_done: AtomicBool,
    /// The writer failed; the reader must stop.
    writer_failed: AtomicBool,
    wake_reader: Notify,
}

/// Runs `work` on the session until it is exhausted or `budget` says stop,
/// with up to `inflight` requests outstanding, and waits for every reply.
/// With `pace`, each operation waits for its due time as well (open loop).
///
/// `server` is only used in messages.
pub async fn drive<W: Workload>(
    parts: &mut ConnParts,
    work: &mut W,
    inflight: usize,
    pace: Option<Pace>,
    budget: &Budget,
    live: &LiveCounters,
    server: &str,
) -> DriveStats {
    let shared = Shared {
        pending: Mutex::new(VecDeque::with_capacity(inflight)),
        credits: Semaphore::new(inflight.max(1)),
        writer_done: AtomicBool::new(false),
        writer_failed: AtomicBool::new(false),
        wake_reader: Notify::new(),
    };
    let ConnParts {
        reader,
        writer,
        codec,
        rbuf,
        next_xid,
        timeout_ms,
    } = parts;
    let timeout_ms = *timeout_ms;
    let write_half = write_loop(
        writer, next_xid, timeout_ms, work, pace, budget, &shared, server,
    );
    let read_half = read_loop(reader, codec, rbuf, timeout_ms, &shared, live, server);
    let (write_result, mut stats) = tokio::join!(write_half, read_half);
    if let Err(e) = write_result {
        stats.broken = true;
        stats.error(format!("session writer: {e}"));
        live.errors.fetch_add(1, Ordering::Relaxed);
    }
    stats
}

#[allow(clippy::too_many_arguments)]
async fn write_loop<W: Workload>(
    writer: &mut tokio::net::tcp::OwnedWriteHalf,
    next_xid: &mut i32,
    timeout_ms: i32,
    work: &mut W,
    pace: Option<Pace>,
    budget: &Budget,
    shared: &Shared,
    server: &str,
) -> Result<(), BenchError> {
    let result = write_requests(
        writer, next_xid, timeout_ms, work, pace, budget, shared, server,
    )
    .await;
    if result.is_err() {
        shared.writer_failed.store(true, Ordering::Release);
    }
    shared.writer_done.store(true, Ordering::Release);
    shared.wake_reader.notify_one();
    result
}

#[allow(clippy::too_many_arguments)]
async fn write_requests<W: Workload>(
    writer: &mut tokio::net::tcp::OwnedWriteHalf,
    next_xid: &mut i32,
    timeout_ms: i32,
    work: &mut W,
    pace: Option<Pace>,
    budget: &Budget,
    shared: &Shared,
    server: &str,
) -> Result<(), BenchError> {
    // Encoding does not depend on the codec's connection state.
    let mut codec = ClientCodec::new();
    let mut wbuf = BytesMut::with_capacity(8 * 1024);
    let idle = ping_interval(timeout_ms);
    let stall_max = Duration::from_millis(timeout_ms.max(1) as u64);
    let wire_error = |source| BenchError::Wire {
        server: server.into(),
        source,
    };
    // Operations sent so far (the next one's index in `pace`).
    let mut k: u64 = 0;
    loop {
        // Open loop: when the generator was ready to send operation k — its
        // due time, or when the timer woke it if it had to sleep (tokio's
        // timer wakes up to a millisecond late: the generator's delay, not
        // the server's, so it is not counted).
        let mut ready = None;
        if let Some(pace) = pace {
            // Wait for the next due time, pinging if that is far off.
            let due = pace.due(k);
            ready = Some(due);
            while Instant::now() < due {
                let wake = due.min(Instant::now() + idle);
                tokio::time::sleep_until(wake.into()).await;
                if Instant::now() < due {
                    codec
                        .encode(&RequestFrame::ping(), &mut wbuf)
                        .map_err(wire_error)?;
                    write_within(writer, &wbuf, stall_max, server).await?;
                    wbuf.clear();
                }
                ready = Some(Instant::now());
            }
        }
        let permit = tokio::select! {
            biased;
            permit = shared.credits.acquire() => permit,
            _ = tokio::time::sleep(idle) => {
                codec.encode(&RequestFrame::ping(), &mut wbuf).map_err(wire_error)?;
                write_within(writer, &wbuf, stall_max, server).await?;
                wbuf.clear();
                continue;
            }
        };
        let Ok(permit) = permit else {
            // The reader closed the semaphore: the connection is broken.
            return Ok(());
        };
        permit.forget();
        let mut finished = false;
        loop {
            // One credit is in hand here.
            let op = if !work.exhausted() && budget.take() {
                work.next_op()
            } else {
                None
            };
            let Some(op) = op else {
                shared.credits.add_permits(1);
                finished = true;
                break;
            };
            let xid = Xid(*next_xid);
            *next_xid += 1;
            let opcode = op.request.opcode();
            let frame = RequestFrame {
                xid,
                request: op.request,
            };
            codec.encode(&frame, &mut wbuf).map_err(wire_error)?;
            shared
                .pending
                .lock()
                .expect("pending lock")
                .push_back(Pending {
                    xid,
                    opcode,
                    // Open loop: from when it was due (a request sent late
                    // because the server held every credit waited too), but
                    // not before the generator was ready.
                    sent: match (pace, ready) {
                        (Some(p), Some(r)) => p.due(k).max(r),
                        _ => Instant::now(),
                    },
                    expect: op.expect,
                });
            k += 1;
            if pace.is_some_and(|p| p.due(k) > Instant::now()) {
                break;
            }
            match shared.credits.try_acquire() {
                Ok(p) => p.forget(),
                Err(_) => break,
            }
        }
        if !wbuf.is_empty() {
            write_within(writer, &wbuf, stall_max, server).await?;
            wbuf.clear();
        }
        if finished {
            return Ok(());
        }
    }
}

/// Writes `bytes`, failing if the server has not taken them within
/// `stall_max` (a server that stops reading must not hang the run).
async fn write_within(
    writer: &mut tokio::net::tcp::OwnedWriteHalf,
    bytes: &[u8],
    stall_max: Duration,
    server: &str,
) -> Result<(), BenchError> {
    match tokio::time::timeout(stall_max, writer.write_all(bytes)).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(source)) => Err(BenchError::Io {
            what: "write to",
            server: server.into(),
            source,
        }),
        Err(_) => Err(BenchError::Timeout {
            what: "write".into(),
            server: server.into(),
            after: stall_max,
        }),
    }
}

async fn read_loop(
    reader: &mut tokio::net::tcp::OwnedReadHalf,
    codec: &mut ClientCodec,
    rbuf: &mut BytesMut,
    timeout_ms: i32,
    shared: &Shared,
    live: &LiveCounters,
    server: &str,
) -> DriveStats {
    let mut stats = DriveStats::new();
    if let Err(message) =
        read_replies(reader, codec, rbuf, timeout_ms, shared, live, &mut stats).await
    {
        let outstanding = shared.pending.lock().expect("pending lock").len();
        stats.broken = true;
        stats.error(format!(
            "{server}: {message} ({outstanding} requests unanswered)"
        ));
        live.errors.fetch_add(1, Ordering::Relaxed);
        // Stop the writer: its acquire fails from now on.
        shared.credits.close();
    }
    stats
}

async fn read_replies(
    reader: &mut tokio::net::tcp::OwnedReadHalf,
    codec: &mut ClientCodec,
    rbuf: &mut BytesMut,
    timeout_ms: i32,
    shared: &Shared,
    live: &LiveCounters,
    stats: &mut DriveStats,
) -> Result<(), String> {
    let silence_max = Duration::from_millis(timeout_ms.max(1) as u64);
    loop {
        let mut answered = 0;
        loop {
            let incoming = match codec.decode(rbuf) {
                Ok(Some(incoming)) => incoming,
                Ok(None) => break,
                Err(e) => return Err(format!("bad frame: {e}")),
            };
            if handle(incoming, shared, live, stats)? {
                answered += 1;
            }
        }
        if answered > 0 {
            shared.credits.add_permits(answered);
        }
        if shared.writer_failed.load(Ordering::Acquire) {
            return Ok(());
        }
        // The oldest request must be answered within the session timeout;
        // ping replies do not count (a server that answers pings but not
        // requests must not hang the run).
        let oldest = shared
            .pending
            .lock()
            .expect("pending lock")
            .front()
            .map(|p| p.sent);
        if oldest.is_none() && shared.writer_done.load(Ordering::Acquire) {
            return Ok(());
        }
        let deadline = oldest.unwrap_or_else(Instant::now) + silence_max;
        rbuf.reserve(64 * 1024);
        tokio::select! {
            biased;
            read = tokio::time::timeout_at(deadline.into(), reader.read_buf(rbuf)) => match read {
                // With nothing outstanding, nothing is late.
                Err(_) => if oldest.is_some() {
                    return Err(late_message(shared, silence_max));
                },
                Ok(Err(e)) => return Err(format!("read failed: {e}")),
                Ok(Ok(0)) => return Err("the server closed the connection".into()),
                Ok(Ok(_)) => {}
            },
            _ = shared.wake_reader.notified() => {}
        }
    }
}

/// The message for a request left unanswered for `silence_max` (built only
/// then: the hot path formats nothing).
fn late_message(shared: &Shared, silence_max: Duration) -> String {
    let pending = shared.pending.lock().expect("pending lock");
    match pending.front() {
        Some(p) => format!(
            "no reply for {} ms to {} {}",
            silence_max.as_millis(),
            p.opcode.zk_name(),
            p.expect.path()
        ),
        None => format!("no reply for {} ms", silence_max.as_millis()),
    }
}

/// Handles one decoded frame; true if it answered a pending request. `Err`
/// is a protocol violation that ends the session.
fn handle(
    incoming: Incoming,
    shared: &Shared,
    live: &LiveCounters,
    stats: &mut DriveStats,
) -> Result<bool, String> {
    let raw = match incoming {
        Incoming::Reply(raw) => raw,
        Incoming::Notification(n) => {
            stats.error(format!(
                "unexpected notification {} {} {:?}",
                n.event.event_type.zk_name(),
                n.event.state.zk_name(),
                &*n.event.path
            ));
            live.errors.fetch_add(1, Ordering::Relaxed);
            return Ok(false);
        }
        Incoming::Connect(_) => return Err("a second ConnectResponse arrived".into()),
    };
    if raw.header.xid == Xid::PING {
        return Ok(false);
    }
    let Some(pending) = shared.pending.lock().expect("pending lock").pop_front() else {
        return Err(format!(
            "reply with xid {} while no request was outstanding",
            raw.header.xid
        ));
    };
    let name = pending.opcode.zk_name();
    let path = pending.expect.path();
    if raw.header.xid != pending.xid {
        return Err(format!(
            "{name} {path}: reply carries xid {} but the oldest outstanding request has xid {}",
            raw.header.xid, pending.xid
        ));
    }
    let reply = raw
        .decode(pending.opcode)
        .map_err(|e| format!("{name} {path}: undecodable reply: {e}"))?;
    match check(pending.opcode, &pending.expect, &reply.result) {
        Ok(()) => {
            stats
                .latency_us
                .saturating_record(micros_since(pending.sent));
            stats.ops += 1;
            live.ops.fetch_add(1, Ordering::Relaxed);
        }
        Err(message) => {
            stats.error(message);
            live.errors.fetch_add(1, Ordering::Relaxed);
        }
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sessions_share_the_rate_and_interleave_evenly() {
        let start = Instant::now();
        let ms = Duration::from_millis;
        // 400 ops/s over 4 sessions: each every 10 ms, 2.5 ms apart.
        let paces: Vec<Pace> = (0..4)
            .map(|s| Pace::for_session(start, 400.0, 4, s))
            .collect();
        assert!(paces.iter().all(|p| p.interval == ms(10)));
        assert_eq!(paces[0].due(0), start);
        assert_eq!(paces[1].due(0), start + Duration::from_micros(2500));
        assert_eq!(paces[3].due(0), start + Duration::from_micros(7500));
        assert_eq!(paces[1].due(3), start + Duration::from_micros(32_500));
    }
}

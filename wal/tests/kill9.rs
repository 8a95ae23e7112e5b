//! kill -9 of a process that is appending, then reopen: no acknowledged record
//! is lost, the log has no gap, and every CRC checks.
//!
//! The child is this test binary itself, re-run with the ignored test
//! `kill9_child_appends` selected and the log directory in an environment
//! variable. It prints `acked <zxid>` only after the append's future resolved;
//! the parent kills it once enough acknowledgements have been read, without any
//! sleep: it waits on the child's output with a deadline.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use rzk_wal::{Append, Log, LogOptions};
use rzk_zxid::{Epoch, Next, Zxid};

const CHILD_DIR: &str = "RZK_WAL_KILL9_CHILD_DIR";

fn options() -> LogOptions {
    LogOptions {
        // Small segments, so kills also land around segment creation.
        segment_bytes: 64 << 10,
        ..LogOptions::default()
    }
}

fn payload(zxid: Zxid) -> Bytes {
    let n = 100 + (zxid.counter().0 as usize * 389) % 3000;
    Bytes::from(vec![zxid.counter().0 as u8; n])
}

#[test]
#[ignore = "child process of kill9_while_appending_loses_no_acknowledged_record"]
fn kill9_child_appends() {
    // Run any other way (`cargo test -- --ignored`), it fails rather than pass
    // without having checked anything.
    let dir = std::env::var_os(CHILD_DIR).unwrap_or_else(|| {
        panic!("{CHILD_DIR} is not set: this is the child process of kill9_while_appending_loses_no_acknowledged_record, started by it")
    });
    let (log, _) = Log::open(&dir, options()).expect("child opens the log");
    let mut next = match log.last_durable_zxid() {
        z if z == Zxid::ZERO => Zxid::first_of(Epoch(1)),
        z => match z.next() {
            Next::Zxid(n) => n,
            Next::Rollover { .. } => unreachable!("small counters"),
        },
    };
    let (tx, rx) = mpsc::sync_channel::<Append>(256);
    let deadline = Instant::now() + Duration::from_secs(120);
    std::thread::scope(|s| {
        s.spawn(|| {
            // Acknowledge strictly after durability, in order.
            for a in rx {
                let z = a.wait().expect("append durable");
                println!("acked {z}");
            }
        });
        // Bounded: the parent kills it long before, but it stops by itself.
        while Instant::now() < deadline {
            let a = log.append(next, payload(next)).expect("append accepted");
            if tx.send(a).is_err() {
                break;
            }
            next = match next.next() {
                Next::Zxid(n) => n,
                Next::Rollover { .. } => unreachable!("small counters"),
            };
        }
        drop(tx);
    });
}

/// Reopens the log and checks it: contiguous from the start, CRCs valid (the
/// reader checks both), and reaching at least `acked`.
fn check_log(dir: &std::path::Path, acked: Zxid) -> Zxid {
    let (log, rec) = Log::open(dir, options()).expect("reopen after kill -9");
    let mut prev = log.start();
    let mut count = 0u64;
    for r in log.read_from(log.start()).expect("reader") {
        let r = r.expect("every record reads back with a valid CRC");
        assert!(r.zxid.is_next(prev), "gap: {} after {prev}", r.zxid);
        assert_eq!(r.payload, payload(r.zxid), "payload of {}", r.zxid);
        prev = r.zxid;
        count += 1;
    }
    assert_eq!(prev, log.last_durable_zxid());
    assert!(
        prev >= acked,
        "acknowledged {acked} but the log ends at {prev} ({count} records, {rec:?})"
    );
    prev
}

#[test]
fn kill9_while_appending_loses_no_acknowledged_record() {
    let dir = tempfile::tempdir().unwrap();
    let exe = std::env::current_exe().unwrap();
    let mut acked = Zxid::ZERO;
    for round in 0..4 {
        let mut child = Command::new(&exe)
            .args(["--exact", "kill9_child_appends", "--ignored", "--nocapture"])
            .args(["--test-threads", "1"])
            .env(CHILD_DIR, dir.path())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn child");
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = mpsc::channel();
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if let Some(z) = line.strip_prefix("acked ") {
                    if tx.send(z.parse::<Zxid>().unwrap()).is_err() {
                        break;
                    }
                }
            }
        });
        // Wait for a number of acknowledgements that differs per round, so the
        // kill lands at different points.
        let wanted = 300 + round * 437;
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut seen = 0;
        while seen < wanted {
            let left = deadline.saturating_duration_since(Instant::now());
            let z = rx
                .recv_timeout(left)
                .unwrap_or_else(|e| panic!("round {round}: child stopped acknowledging: {e}"));
            acked = acked.max(z);
            seen += 1;
        }
        child.kill().expect("kill -9"); // SIGKILL on unix
        child.wait().unwrap();
        // Acknowledgements printed before the kill count too.
        reader.join().unwrap();
        while let Ok(z) = rx.try_recv() {
            acked = acked.max(z);
        }
        let end = check_log(dir.path(), acked);
        assert!(end >= acked, "round {round}");
    }
}

//! `wal-bench`: throughput and latency of `rzk-wal` on this machine's disk.
//!
//! Every append figure is reported next to the disk's raw fsync rate, measured
//! in the same run just before it (one small write + fdatasync in a loop, one
//! writer), because absolute numbers drift between machines and runs; the
//! ratio is what carries over.
//!
//! ```sh
//! cargo run --release -p rzk-benches --bin wal-bench -- all
//! cargo run --release -p rzk-benches --bin wal-bench -- append --appenders 64 --record-bytes 128
//! cargo run --release -p rzk-benches --bin wal-bench -- recovery --log-mib 1024 --drop-caches
//! ```

use std::fs::OpenOptions;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use bytes::Bytes;
use clap::{Parser, Subcommand};
use hdrhistogram::Histogram;
use rzk_wal::{Log, LogOptions};
use rzk_zxid::{Epoch, Next, Zxid};

#[derive(Parser)]
#[command(about = "Benchmarks of rzk-wal: group-commit appends, recovery scan, truncate")]
struct Cli {
    /// Directory for the benchmark's files (default: a temporary directory in
    /// the current directory, so it is on the same disk as the build).
    #[arg(long, global = true)]
    dir: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Raw fsync rate: one writer, one small write + fdatasync per iteration.
    Fsync {
        /// How long to measure.
        #[arg(long, default_value_t = 2.0)]
        seconds: f64,
    },
    /// Append throughput and latency with concurrent appenders (fsync on).
    Append {
        /// Concurrent appenders, comma-separated.
        #[arg(long, value_delimiter = ',', default_value = "1,8,64")]
        appenders: Vec<usize>,
        /// Payload bytes per record, comma-separated.
        #[arg(long, value_delimiter = ',', default_value = "128,4096")]
        record_bytes: Vec<usize>,
        /// How long to measure each combination.
        #[arg(long, default_value_t = 3.0)]
        seconds: f64,
        /// UNSAFE, for comparison only: never fsync.
        #[arg(long)]
        unsafe_no_fsync: bool,
    },
    /// Open (recovery scan) of a log of the given size.
    Recovery {
        /// Log size in MiB.
        #[arg(long, default_value_t = 1024)]
        log_mib: u64,
        /// Payload bytes per record.
        #[arg(long, default_value_t = 4096)]
        record_bytes: usize,
        /// Also measure with a cold page cache (writes /proc/sys/vm/drop_caches:
        /// root only, and it empties the cache of the whole machine).
        #[arg(long)]
        drop_caches: bool,
    },
    /// Latency of truncate_after within the last segment and across segments.
    Truncate {
        /// Iterations per case.
        #[arg(long, default_value_t = 20)]
        iterations: usize,
    },
    /// Everything above with short defaults, as a Markdown report.
    All {
        /// Seconds per append combination.
        #[arg(long, default_value_t = 3.0)]
        seconds: f64,
        /// Recovery log size in MiB.
        #[arg(long, default_value_t = 1024)]
        log_mib: u64,
        /// Cold-cache recovery too (see `recovery --drop-caches`).
        #[arg(long)]
        drop_caches: bool,
    },
}

fn main() -> Result<()> {
    let cli = Cli::parse();
    let base = match &cli.dir {
        Some(d) => {
            std::fs::create_dir_all(d)?;
            tempfile::tempdir_in(d)?
        }
        None => tempfile::tempdir_in(".")?,
    };
    let dir = base.path();
    match cli.command {
        Command::Fsync { seconds } => {
            let raw = raw_fsync(dir, Duration::from_secs_f64(seconds))?;
            println!("{raw}");
        }
        Command::Append {
            appenders,
            record_bytes,
            seconds,
            unsafe_no_fsync,
        } => {
            print_append_header();
            for &size in &record_bytes {
                for &n in &appenders {
                    let r = append_case(dir, n, size, seconds, unsafe_no_fsync)?;
                    println!("{r}");
                }
            }
        }
        Command::Recovery {
            log_mib,
            record_bytes,
            drop_caches,
        } => {
            print_recovery_header();
            for r in recovery(dir, log_mib, record_bytes, drop_caches)? {
                println!("{r}");
            }
        }
        Command::Truncate { iterations } => {
            print_truncate_header();
            for r in truncate(dir, iterations)? {
                println!("{r}");
            }
        }
        Command::All {
            seconds,
            log_mib,
            drop_caches,
        } => {
            print_append_header();
            for size in [128, 4096] {
                for n in [1, 8, 64] {
                    println!("{}", append_case(dir, n, size, seconds, false)?);
                }
            }
            println!();
            print_recovery_header();
            for r in recovery(dir, log_mib, 4096, drop_caches)? {
                println!("{r}");
            }
            for r in recovery(dir, log_mib.min(256), 128, false)? {
                println!("{r}");
            }
            println!();
            print_truncate_header();
            for r in truncate(dir, 20)? {
                println!("{r}");
            }
        }
    }
    Ok(())
}

/// The disk's raw durable-write rate: one writer, a 128-byte write at the next
/// offset of a preallocated file, then fdatasync; as many as fit in `duration`.
struct RawFsync {
    ops_per_sec: f64,
    mean: Duration,
    p50: Duration,
    p99: Duration,
}

impl RawFsync {
    /// Two measurements (before and after a case) as one: the rates averaged,
    /// the percentiles of the worse.
    fn merge(a: RawFsync, b: RawFsync) -> RawFsync {
        let ops_per_sec = (a.ops_per_sec + b.ops_per_sec) / 2.0;
        RawFsync {
            ops_per_sec,
            mean: Duration::from_secs_f64(1.0 / ops_per_sec),
            p50: a.p50.max(b.p50),
            p99: a.p99.max(b.p99),
        }
    }
}

impl std::fmt::Display for RawFsync {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "raw fsync: {:.0}/s, mean {:.0} µs, p50 {:.0} µs, p99 {:.0} µs",
            self.ops_per_sec,
            self.mean.as_secs_f64() * 1e6,
            self.p50.as_secs_f64() * 1e6,
            self.p99.as_secs_f64() * 1e6,
        )
    }
}

fn raw_fsync(dir: &Path, duration: Duration) -> Result<RawFsync> {
    let path = dir.join("raw-fsync");
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(&path)?;
    // Preallocated the way the log's segments are (sparse, size made durable once).
    file.set_len(64 << 20)?;
    file.sync_all()?;
    let buf = [0x5au8; 128];
    let mut h = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).unwrap();
    let start = Instant::now();
    let mut ops = 0u64;
    let mut offset = 0u64;
    while start.elapsed() < duration {
        let t = Instant::now();
        file.write_all_at(&buf, offset)?;
        file.sync_data()?;
        h.record(t.elapsed().as_micros().max(1) as u64).unwrap();
        offset = (offset + 128) % (64 << 20);
        ops += 1;
    }
    let elapsed = start.elapsed();
    drop(file);
    std::fs::remove_file(&path)?;
    Ok(RawFsync {
        ops_per_sec: ops as f64 / elapsed.as_secs_f64(),
        mean: elapsed / ops.max(1) as u32,
        p50: Duration::from_micros(h.value_at_quantile(0.5)),
        p99: Duration::from_micros(h.value_at_quantile(0.99)),
    })
}

struct AppendResult {
    appenders: usize,
    record_bytes: usize,
    raw: RawFsync,
    appends_per_sec: f64,
    p50: Duration,
    p99: Duration,
    max: Duration,
    syncs_hint: String,
}

fn print_append_header() {
    println!("| appenders | payload | appends/s | raw fsync/s | ratio to raw | p50 | p99 | max | raw fsync mean / p50 / p99 | p99 / raw mean |");
    println!("|---|---|---|---|---|---|---|---|---|---|");
}

impl std::fmt::Display for AppendResult {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let us = |d: Duration| d.as_secs_f64() * 1e6;
        write!(
            f,
            "| {} | {} B | {:.0} | {:.0} | {:.1}× | {:.0} µs | {:.0} µs | {:.0} µs | {:.0} / {:.0} / {:.0} µs | {:.1} |{}",
            self.appenders,
            self.record_bytes,
            self.appends_per_sec,
            self.raw.ops_per_sec,
            self.appends_per_sec / self.raw.ops_per_sec,
            us(self.p50),
            us(self.p99),
            us(self.max),
            us(self.raw.mean),
            us(self.raw.p50),
            us(self.raw.p99),
            us(self.p99) / us(self.raw.mean),
            self.syncs_hint,
        )
    }
}

fn next_of(z: Zxid) -> Zxid {
    match z.next() {
        Next::Zxid(n) => n,
        Next::Rollover { .. } => panic!("counter exhausted in a benchmark"),
    }
}

/// `appenders` tasks append records of `record_bytes` for `seconds`, each waiting
/// for its append to be durable before the next. Zxids are assigned under one
/// lock, in call order, as a leader assigns them to proposals.
fn append_case(
    dir: &Path,
    appenders: usize,
    record_bytes: usize,
    seconds: f64,
    unsafe_no_fsync: bool,
) -> Result<AppendResult> {
    let raw_before = raw_fsync(dir, Duration::from_secs(1))?;
    let log_dir = dir.join(format!("append-{appenders}-{record_bytes}"));
    let options = LogOptions {
        unsafe_no_fsync,
        ..LogOptions::default()
    };
    let (log, _) = Log::open(&log_dir, options)?;
    let log = Arc::new(log);
    let next = Arc::new(Mutex::new(Zxid::first_of(Epoch(1))));
    let payload = Bytes::from(vec![0xabu8; record_bytes]);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let warmup = Duration::from_millis(300);
    let measure = Duration::from_secs_f64(seconds);
    let histograms = runtime.block_on(async {
        let begin = Instant::now();
        let mut tasks = Vec::new();
        for _ in 0..appenders {
            let (log, next, payload) = (log.clone(), next.clone(), payload.clone());
            tasks.push(tokio::spawn(async move {
                let mut h = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).unwrap();
                let mut count = 0u64;
                loop {
                    let now = Instant::now();
                    if now - begin > warmup + measure {
                        break;
                    }
                    let append = {
                        let mut n = next.lock().unwrap();
                        let z = *n;
                        *n = next_of(z);
                        log.append(z, payload.clone())
                    };
                    append?.await?;
                    if now - begin >= warmup {
                        h.record(now.elapsed().as_micros().max(1) as u64).unwrap();
                        count += 1;
                    }
                }
                anyhow::Ok((h, count))
            }));
        }
        let mut all = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).unwrap();
        let mut total = 0u64;
        for t in tasks {
            let (h, c) = t.await??;
            all.add(h).unwrap();
            total += c;
        }
        anyhow::Ok((all, total))
    })?;
    let (h, total) = histograms;
    let last = log.last_durable_zxid();
    drop(log);
    std::fs::remove_dir_all(&log_dir)?;
    let raw = RawFsync::merge(raw_before, raw_fsync(dir, Duration::from_secs(1))?);
    if total == 0 {
        bail!("no append completed");
    }
    Ok(AppendResult {
        appenders,
        record_bytes,
        raw,
        appends_per_sec: total as f64 / seconds,
        p50: Duration::from_micros(h.value_at_quantile(0.50)),
        p99: Duration::from_micros(h.value_at_quantile(0.99)),
        max: Duration::from_micros(h.max()),
        syncs_hint: if unsafe_no_fsync {
            format!(" UNSAFE no fsync, last {last}")
        } else {
            String::new()
        },
    })
}

struct RecoveryResult {
    log_bytes: u64,
    record_bytes: usize,
    records: u64,
    cache: &'static str,
    elapsed: Duration,
}

fn print_recovery_header() {
    println!("| log | payload | records | page cache | open (scan) time | MB/s |");
    println!("|---|---|---|---|---|---|");
}

impl std::fmt::Display for RecoveryResult {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "| {} MiB | {} B | {} | {} | {:.0} ms | {:.0} |",
            self.log_bytes >> 20,
            self.record_bytes,
            self.records,
            self.cache,
            self.elapsed.as_secs_f64() * 1e3,
            self.log_bytes as f64 / 1e6 / self.elapsed.as_secs_f64()
        )
    }
}

/// Writes a log of `log_mib` MiB (fsync off while writing: only the reading is
/// measured), then times `Log::open`, which CRC-checks every record.
fn recovery(
    dir: &Path,
    log_mib: u64,
    record_bytes: usize,
    drop_caches: bool,
) -> Result<Vec<RecoveryResult>> {
    let log_dir = dir.join(format!("recovery-{record_bytes}"));
    let target = log_mib << 20;
    {
        let options = LogOptions {
            unsafe_no_fsync: true,
            ..LogOptions::default()
        };
        let (log, _) = Log::open(&log_dir, options)?;
        let payload = Bytes::from(vec![0x3cu8; record_bytes]);
        let mut z = Zxid::first_of(Epoch(1));
        let mut written = 0u64;
        let mut pending = Vec::with_capacity(4096);
        while written < target {
            pending.push(log.append(z, payload.clone())?);
            z = next_of(z);
            written += 16 + record_bytes as u64;
            if pending.len() == 4096 {
                for p in pending.drain(..) {
                    p.wait()?;
                }
            }
        }
        for p in pending.drain(..) {
            p.wait()?;
        }
    }
    // Make the files durable so a cache drop really reads from the disk.
    std::process::Command::new("sync")
        .status()
        .context("sync")?;
    let mut out = Vec::new();
    let mut cases = vec![("warm", false)];
    if drop_caches {
        cases.push(("cold", true));
    }
    for (cache, drop) in cases {
        if drop {
            std::fs::write("/proc/sys/vm/drop_caches", "1\n")
                .context("drop caches (needs root)")?;
        } else {
            // Warm the cache with one open first.
            drop_log(Log::open(&log_dir, LogOptions::default())?.0);
        }
        let start = Instant::now();
        let (log, rec) = Log::open(&log_dir, LogOptions::default())?;
        let elapsed = start.elapsed();
        drop_log(log);
        out.push(RecoveryResult {
            log_bytes: rec.bytes,
            record_bytes,
            records: rec.records,
            cache,
            elapsed,
        });
    }
    std::fs::remove_dir_all(&log_dir)?;
    Ok(out)
}

fn drop_log(log: Log) {
    drop(log);
}

struct TruncateResult {
    case: &'static str,
    p50: Duration,
    max: Duration,
    raw: RawFsync,
}

fn print_truncate_header() {
    println!("| truncate_after (fsync on) | p50 | max | raw fsync mean / p50 | p50 / raw mean |");
    println!("|---|---|---|---|---|");
}

impl std::fmt::Display for TruncateResult {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "| {} | {:.2} ms | {:.2} ms | {:.0} / {:.0} µs | {:.1} |",
            self.case,
            self.p50.as_secs_f64() * 1e3,
            self.max.as_secs_f64() * 1e3,
            self.raw.mean.as_secs_f64() * 1e6,
            self.raw.p50.as_secs_f64() * 1e6,
            self.p50.as_secs_f64() / self.raw.mean.as_secs_f64(),
        )
    }
}

/// Times `truncate_after` (fsync on) for two shapes: the last 100 records of a
/// 64 MiB segment, and the last 3 segments of 1 MiB each.
fn truncate(dir: &Path, iterations: usize) -> Result<Vec<TruncateResult>> {
    let mut out = Vec::new();
    let cases: [(&'static str, u64, usize, usize); 2] = [
        (
            "100 records of 1 KiB inside a 64 MiB segment",
            64 << 20,
            1000,
            100,
        ),
        (
            "3 whole segments of 1 MiB (3000 records of 1 KiB)",
            1 << 20,
            4000,
            3000,
        ),
    ];
    // Earlier cases leave dirty pages whose writeback slows every fsync.
    std::process::Command::new("sync")
        .status()
        .context("sync")?;
    for (case, segment_bytes, keep_records, cut_records) in cases {
        let raw_before = raw_fsync(dir, Duration::from_secs(1))?;
        let log_dir = dir.join("truncate");
        let options = LogOptions {
            segment_bytes,
            ..LogOptions::default()
        };
        let (log, _) = Log::open(&log_dir, options)?;
        let payload = Bytes::from(vec![7u8; 1024 - 16]);
        let mut z = Zxid::first_of(Epoch(1));
        let append = |n: usize, z: &mut Zxid| -> Result<()> {
            let pending: Vec<_> = (0..n)
                .map(|_| {
                    let a = log.append(*z, payload.clone());
                    *z = next_of(*z);
                    a
                })
                .collect::<Result<_, _>>()?;
            for p in pending {
                p.wait()?;
            }
            Ok(())
        };
        append(keep_records, &mut z)?;
        let keep = log.last_durable_zxid();
        let mut h = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).unwrap();
        for _ in 0..iterations {
            append(cut_records, &mut z)?;
            let start = Instant::now();
            let end = log.truncate_after(keep)?;
            h.record(start.elapsed().as_micros().max(1) as u64).unwrap();
            assert_eq!(end, keep);
            // Continue in a new epoch: the truncated zxids belong to a dead leader.
            z = Zxid::first_of(Epoch(z.epoch().0 + 1));
        }
        drop(log);
        std::fs::remove_dir_all(&log_dir)?;
        out.push(TruncateResult {
            case,
            p50: Duration::from_micros(h.value_at_quantile(0.5)),
            max: Duration::from_micros(h.max()),
            raw: RawFsync::merge(raw_before, raw_fsync(dir, Duration::from_secs(1))?),
        });
    }
    Ok(out)
}

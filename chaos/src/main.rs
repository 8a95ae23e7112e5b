//! `rzk-chaos`: starts a ZooKeeper-protocol ensemble from a chaos config,
//! runs a recorded workload under a seeded nemesis schedule, heals, reads the
//! final state from every member, checks the history and reports.
//!
//! ```text
//! rzk-chaos run --config chaos/configs/zookeeper.toml --seed 1 --duration 120 --schedule mixed
//! rzk-chaos run --config chaos/configs/zookeeper.toml --schedule failover --duration 120
//! rzk-chaos check history.jsonl
//! ```
//!
//! Exit status: 0 pass, 1 anomalies or lost writes (the seed is printed),
//! 2 the run itself failed, 3 a register could not be decided (with
//! `--fail-on-undecided`).
//!
//! The runtime modules use `anyhow`: this is a tool whose errors end the run
//! with a message; the library part (`rzk_chaos`) is what other code uses.

mod client;
mod cluster;
mod config;
mod nemesis;
mod report;
#[cfg(test)]
mod scenarios;
mod summarize;
mod workload;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};
use tokio::sync::{watch, Mutex};

use rzk_chaos::check::{analyze, Budget, FindingKind};
use rzk_chaos::history::{read_jsonl, write_jsonl};

#[derive(Parser)]
#[command(
    name = "rzk-chaos",
    about = "Fault injection and linearizability checking against ZooKeeper-protocol ensembles"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Start an ensemble, run workload and nemesis, check and report.
    Run(RunArgs),
    /// Check a recorded history (JSON lines) again.
    Check {
        /// The history file.
        history: PathBuf,
        /// Seconds the search may spend on one register.
        #[arg(long, default_value_t = 120)]
        budget_seconds: u64,
    },
    /// Summarize report lines (--json-out files) as a markdown table, one row per server.
    Summarize {
        /// Files of JSON report lines.
        files: Vec<PathBuf>,
    },
}

#[derive(Parser)]
struct RunArgs {
    /// The chaos config (chaos/configs/*.toml).
    #[arg(long)]
    config: PathBuf,
    /// Seed of the schedule and the workload (random if not given; printed).
    #[arg(long)]
    seed: Option<u64>,
    /// Seconds of workload under faults.
    #[arg(long, default_value_t = 120)]
    duration: u64,
    /// none | mixed | failover | a comma-separated list of faults
    /// (kill, kill-leader, pause, pause-leader, partition, partition-leader,
    /// disk-full, kill-leader+partition).
    #[arg(long, default_value = "mixed")]
    schedule: String,
    /// Workload processes (one session each at a time).
    #[arg(long, default_value_t = 8)]
    processes: u32,
    /// Registers.
    #[arg(long, default_value_t = 8)]
    keys: u32,
    /// Think time between a process's operations, "min-max" ms.
    #[arg(long, default_value = "2-10")]
    think_ms: String,
    /// How long an operation waits for its answer before it is indeterminate, ms.
    #[arg(long, default_value_t = 3000)]
    op_timeout_ms: u64,
    /// Give each member a tmpfs of this many MiB as its disk (root; enables disk-full in mixed).
    #[arg(long)]
    disk_mb: Option<u64>,
    /// Work directory (default: a new temporary directory, removed on success).
    #[arg(long)]
    work_dir: Option<PathBuf>,
    /// Write the history here (JSON lines).
    #[arg(long)]
    history: Option<PathBuf>,
    /// Append the JSON report line to this file.
    #[arg(long)]
    json_out: Option<PathBuf>,
    /// Seconds the search may spend on one register.
    #[arg(long, default_value_t = 60)]
    budget_seconds: u64,
    /// Exit 3 if a register could not be decided.
    #[arg(long)]
    fail_on_undecided: bool,
}

fn main() {
    let cli = Cli::parse();
    let code = match cli.cmd {
        Cmd::Check {
            history,
            budget_seconds,
        } => check_file(&history, budget_seconds),
        Cmd::Summarize { files } => summarize::summarize(&files),
        Cmd::Run(args) => {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()
                .expect("tokio runtime");
            rt.block_on(run(args))
        }
    };
    std::process::exit(code.unwrap_or_else(|e| {
        eprintln!("rzk-chaos: error: {e:#}");
        2
    }));
}

fn budget(seconds: u64) -> Budget {
    Budget {
        time: Duration::from_secs(seconds),
        ..Budget::default()
    }
}

fn check_file(path: &PathBuf, budget_seconds: u64) -> Result<i32> {
    let f = std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?;
    let ops = read_jsonl(&mut std::io::BufReader::new(f))?;
    let analysis = analyze(&ops, budget(budget_seconds));
    for f in &analysis.findings {
        println!("{}", f.describe());
    }
    println!(
        "{} ops, {} registers ({} linearizable), {} acknowledged writes, {} lost, {} anomalies",
        ops.len(),
        analysis.keys_checked,
        analysis.keys_linearizable,
        analysis.acked_writes,
        analysis.acked_lost,
        analysis.anomalies()
    );
    Ok(if analysis.anomalies() > 0 || analysis.acked_lost > 0 {
        1
    } else {
        0
    })
}

async fn run(args: RunArgs) -> Result<i32> {
    let cfg = config::Config::load(&args.config)?;
    let seed = args.seed.unwrap_or_else(rand::random);
    let mut schedule: nemesis::Schedule = args.schedule.parse()?;
    if let (nemesis::Schedule::Mixed(faults), Some(_), "mixed") =
        (&mut schedule, args.disk_mb, args.schedule.as_str())
    {
        faults.push(nemesis::Fault::DiskFull);
    }
    let (think_lo, think_hi) = args
        .think_ms
        .split_once('-')
        .and_then(|(a, b)| Some((a.parse().ok()?, b.parse().ok()?)))
        .context("--think-ms must be min-max")?;
    let (work, temp) = match &args.work_dir {
        Some(d) => {
            std::fs::create_dir_all(d)?;
            (d.clone(), None)
        }
        None => {
            let t = tempfile::Builder::new().prefix("rzk-chaos-").tempdir()?;
            (t.path().to_path_buf(), Some(t))
        }
    };
    eprintln!(
        "rzk-chaos: {} seed={seed} schedule={} duration={}s work={}",
        cfg.name,
        args.schedule,
        args.duration,
        work.display()
    );
    let timeout_ms = cfg.session_timeout_ms;
    let server = cfg.name.clone();
    let cluster = Arc::new(Mutex::new(
        cluster::Cluster::create(cfg, &work, args.disk_mb).await?,
    ));
    let result = drive(
        &cluster,
        &args,
        seed,
        schedule,
        (think_lo, think_hi),
        timeout_ms,
        &server,
        &work,
    )
    .await;
    cluster.lock().await.shutdown().await;
    let code = result?;
    if code == 0 {
        drop(temp);
    } else if let Some(t) = temp {
        eprintln!("rzk-chaos: keeping {} for inspection", t.path().display());
        let _ = t.keep();
    }
    Ok(code)
}

#[allow(clippy::too_many_arguments)]
async fn drive(
    shared: &Arc<Mutex<cluster::Cluster>>,
    args: &RunArgs,
    seed: u64,
    schedule: nemesis::Schedule,
    think: (u64, u64),
    timeout_ms: i32,
    server: &str,
    work: &std::path::Path,
) -> Result<i32> {
    let members: Vec<(u32, std::net::SocketAddr)> = {
        let mut cluster = shared.lock().await;
        let ids: Vec<u32> = cluster.members.iter().map(|m| m.id).collect();
        for &id in &ids {
            cluster.start(id)?;
        }
        cluster.wait_serving(Duration::from_secs(120)).await?;
        ids.iter()
            .map(|&id| (id, cluster.client_addr(id)))
            .collect()
    };
    workload::setup(members[0].1, args.keys, timeout_ms).await?;
    let rec = Arc::new(workload::Recorder::new());
    let settings = workload::Settings {
        processes: args.processes,
        keys: args.keys,
        think_ms: think,
        op_timeout: Duration::from_millis(args.op_timeout_ms),
        session_timeout_ms: timeout_ms,
        seed,
    };
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut procs = Vec::new();
    for p in 0..settings.processes {
        procs.push(tokio::spawn(workload::process(
            p,
            members.clone(),
            settings.clone(),
            rec.clone(),
            stop_rx.clone(),
        )));
    }
    let timeline = nemesis::run(
        shared.clone(),
        schedule,
        Duration::from_secs(args.duration),
        seed,
        rec.clone(),
    )
    .await;
    // Let the healed ensemble settle under load for a few seconds, then stop.
    tokio::time::sleep(Duration::from_secs(3)).await;
    stop_tx.send_replace(true);
    for p in procs {
        let _ = p.await;
    }
    let timeline = timeline?;
    shared
        .lock()
        .await
        .wait_serving(Duration::from_secs(120))
        .await?;
    workload::final_reads(
        members.clone(),
        args.keys,
        timeout_ms,
        rec.clone(),
        Duration::from_secs(60),
    )
    .await;
    let ops = rec.ops();
    if let Some(path) = &args.history {
        let mut f = std::io::BufWriter::new(std::fs::File::create(path)?);
        write_jsonl(&ops, &mut f)?;
    } else {
        let mut f = std::io::BufWriter::new(std::fs::File::create(work.join("history.jsonl"))?);
        write_jsonl(&ops, &mut f)?;
    }
    let mut timeline = timeline;
    for m in &shared.lock().await.members {
        for line in disk_lines(&m.log) {
            timeline.notes.push(format!("member {} log: {line}", m.id));
        }
    }
    let analysis = analyze(&ops, budget(args.budget_seconds));
    let report = report::RunReport {
        server,
        seed,
        schedule: &args.schedule,
        duration_s: args.duration,
        ops: &ops,
        timeline: &timeline,
        analysis: &analysis,
    };
    print!("{}", report.text(10));
    let line = report.json().to_string();
    println!("{line}");
    if let Some(path) = &args.json_out {
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)?;
        writeln!(f, "{line}")?;
    }
    if !report.passed() {
        eprintln!("rzk-chaos: FAIL; replay with: rzk-chaos run --config {} --seed {seed} --duration {} --schedule {}", args.config.display(), args.duration, args.schedule);
        return Ok(1);
    }
    let undecided = analysis
        .findings
        .iter()
        .any(|f| f.kind == FindingKind::Undecided);
    if undecided && args.fail_on_undecided {
        return Ok(3);
    }
    Ok(0)
}

/// Log lines that mention a full disk (for the disk-full report).
fn disk_lines(log: &std::path::Path) -> Vec<String> {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let mut out: Vec<String> = text
        .lines()
        .filter(|l| {
            let l = l.to_ascii_lowercase();
            l.contains("no space left")
                || l.contains("enospc")
                || l.contains("disk full")
                || l.contains("disk is full")
        })
        .map(|l| l.chars().take(240).collect())
        .collect();
    out.dedup();
    out.truncate(3);
    out
}

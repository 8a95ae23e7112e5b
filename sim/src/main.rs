//! Long simulation runs: `cargo run -p rzk-sim --release -- --seeds 100000`.
//!
//! Flags: `--seeds N` (default 1000), `--start S` (first seed, default 0),
//! `--seed S` (run one seed and print its report or failure), `--nodes N`
//! (voters, 1 or more; default alternates 3 and 5 per seed; 1 is standalone
//! rzk's ensemble of one), `--limit C` (zxid counter limit),
//! `--bug-5094` (re-introduce ZOOKEEPER-5094), `--bug-5088` (relays start
//! without the proposals in flight, ZOOKEEPER-5088), `--observers N` (simulated
//! observers, default 2), `--observer-members N` (non-voting members of the
//! quorum, default: each seed picks 0, 1 or 2), `--no-claims-check` (skip the
//! I1 message check, to see what a violation leads to), `--fault-ms MS`,
//! `--settle-ms MS` (the Liveness bound after the faults stop, default
//! 20000), `--trace LINES`, `--snap-retain N` (snapshots each peer's storage
//! retains, default 3), `--snapshot-every LO HI` (simulated milliseconds
//! between snapshots, drawn from LO..HI; default 100 800), `--no-log-hold`
//! (storage purges the log a SNAP or DIFF in progress still reads).
//! `--server` runs rzk's server core on every peer with simulated ZooKeeper
//! clients (`--clients N`, default 6), and `--bug-sync-before-apply` /
//! `--bug-apply-out-of-order` switch a known server bug back on.

use rzk_quorum::core::TestBugs;
use rzk_sim::{failover, run, Options};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let get = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .and_then(|v| v.parse::<u64>().ok())
    };
    let mut opts = Options::default();
    if let Some(l) = get("--limit") {
        opts.counter_limit = Some(l as u32);
    }
    if args.iter().any(|a| a == "--bug-5094") {
        opts.bugs = TestBugs {
            keep_memory_after_interrupted_trunc: true,
        };
    }
    if args.iter().any(|a| a == "--bug-5088") {
        opts.bug_5088 = true;
    }
    if let Some(n) = get("--observers") {
        opts.observers = n as usize;
    }
    if let Some(n) = get("--observer-members") {
        opts.observer_members = Some(n as usize);
    }
    if args.iter().any(|a| a == "--no-claims-check") {
        opts.check_claims = false;
    }
    if let Some(ms) = get("--fault-ms") {
        opts.fault_ms = ms;
    }
    if let Some(ms) = get("--settle-ms") {
        opts.settle_ms = ms;
    }
    if args.iter().any(|a| a == "--no-disconnects") {
        opts.disconnect_notice = 0.0;
        opts.link_resets = false;
    }
    if let Some(n) = get("--snap-retain") {
        opts.snap_retain_count = n as usize;
    }
    if let Some(i) = args.iter().position(|a| a == "--snapshot-every") {
        let at = |k: usize| args.get(i + k).and_then(|v| v.parse::<u64>().ok());
        if let (Some(lo), Some(hi)) = (at(1), at(2)) {
            opts.snapshot_interval_ms = (lo, hi);
        }
    }
    if args.iter().any(|a| a == "--no-log-hold") {
        opts.hold_log_for_syncs = false;
    }
    if args.iter().any(|a| a == "--server") {
        let mut s = rzk_sim::ServerOptions::default();
        if let Some(n) = get("--clients") {
            s.clients = n as usize;
        }
        s.bugs.answer_sync_before_apply = args.iter().any(|a| a == "--bug-sync-before-apply");
        s.bugs.apply_out_of_order = args.iter().any(|a| a == "--bug-apply-out-of-order");
        opts = s.apply_to(opts);
    }
    let nodes = get("--nodes");
    if let Some(t) = get("--trace") {
        opts.trace_lines = t as usize;
    }
    let one = get("--seed");
    let start = one.or(get("--start")).unwrap_or(0);
    let count = if one.is_some() {
        1
    } else {
        get("--seeds").unwrap_or(1000)
    };
    if let Some(kills) = get("--failover") {
        opts.disconnect_notice = if args.iter().any(|a| a == "--no-disconnects") {
            0.0
        } else {
            1.0
        };
        run_failovers(start, count, nodes, kills as usize, &mut opts);
        return;
    }
    let mut passed = 0u64;
    let mut failed = 0u64;
    let mut sim_ms = 0u64;
    let mut acked = 0usize;
    let (mut syncs, mut log_reads, mut log_read_entries) = ([0u64; 3], 0u64, 0u64);
    let mut snaps = [0u64; 3];
    for seed in start..start + count {
        opts.nodes = nodes.unwrap_or(if seed % 2 == 0 { 3 } else { 5 }) as usize;
        match run(seed, &opts) {
            Ok(r) => {
                passed += 1;
                sim_ms += r.sim_ms;
                acked += r.acked;
                for (k, n) in r.syncs.iter().enumerate() {
                    syncs[k] += n;
                }
                log_reads += r.log_reads;
                log_read_entries += r.log_read_entries;
                snaps[0] += r.snaps_outlived_snapshot;
                snaps[1] += r.snap_tails_from_disk;
                snaps[2] += r.snaps_purged;
                if one.is_some() {
                    println!("{r:?}");
                }
            }
            Err(f) => {
                failed += 1;
                eprintln!("{f}");
                if one.is_none() && failed >= 5 {
                    break;
                }
            }
        }
    }
    // Counted, not derived from `count`: after 5 failures the rest is not run.
    let not_run = count - passed - failed;
    println!(
        "{passed} passed, {failed} failed{} ({} simulated hours, {} acknowledged txns)",
        if not_run > 0 {
            format!(", {not_run} not run (stopped after {failed} failures)")
        } else {
            String::new()
        },
        sim_ms as f64 / 3_600_000.0,
        acked
    );
    println!(
        "syncs: {} DIFF, {} TRUNC, {} SNAP; DIFF below the log window: {log_reads} reads of the durable log, {log_read_entries} entries",
        syncs[0], syncs[1], syncs[2]
    );
    println!(
        "SNAP transfers: {} went on past a newer snapshot, {} read their tail from the durable log, {} dropped (tail purged)",
        snaps[0], snaps[1], snaps[2]
    );
    if failed > 0 {
        std::process::exit(1);
    }
}

fn run_failovers(start: u64, count: u64, nodes: Option<u64>, kills: usize, opts: &mut Options) {
    let mut times = Vec::new();
    for seed in start..start + count {
        opts.nodes = nodes.unwrap_or(if seed % 2 == 0 { 3 } else { 5 }) as usize;
        match failover(seed, opts, kills) {
            Ok(r) => times.extend(r.times_ms),
            Err(f) => {
                eprintln!("{f}");
                std::process::exit(1);
            }
        }
    }
    times.sort_unstable();
    println!(
        "{} failovers in {count} seeds: p50 {} ms, max {} ms (simulated)",
        times.len(),
        times[times.len() / 2],
        times[times.len() - 1]
    );
}

//! The `storm` workload: `--sessions` tasks open and close sessions as fast as
//! they can. One op is one TCP connect + ConnectRequest/Response +
//! closeSession and its reply.

use std::sync::Arc;
use std::time::Instant;

use futures::future::join_all;
use tokio_util::sync::CancellationToken;

use crate::conn::Conn;
use crate::error::BenchError;
use crate::pipeline::{micros_since, Budget, DriveStats, LiveCounters};
use crate::report::Report;
use crate::run::{empty_stats, merge, Limit, Measured, RunOptions, TimedPhase, CONNECT_LIMIT};

/// Runs the storm workload.
pub async fn run(opts: &RunOptions, cancel: &CancellationToken) -> Result<Report, BenchError> {
    let budget = Arc::new(Budget::new(match opts.limit {
        Limit::Ops(n) => Some(n),
        Limit::Seconds(_) => None,
    }));
    let live = Arc::new(LiveCounters::default());
    let phase = TimedPhase::start(opts, &budget, &live, cancel);
    let tasks: Vec<_> = (0..opts.sessions.max(1))
        .map(|s| {
            let (budget, live, server, timeout_ms) = (
                budget.clone(),
                live.clone(),
                opts.member(s).to_owned(),
                opts.session_timeout_ms,
            );
            tokio::spawn(async move { storm_task(&server, timeout_ms, &budget, &live).await })
        })
        .collect();
    let mut total = empty_stats();
    for joined in join_all(tasks).await {
        match joined {
            Ok(stats) => merge(&mut total, stats),
            Err(e) => total.error(format!("storm task failed: {e}")),
        }
    }
    let end = phase.finish();
    Ok(Measured {
        stats: total,
        seconds: end.seconds,
        cpu: end.cpu,
        server_cpu: end.server_cpu,
        sessions: opts.sessions.max(1),
    }
    .into_report(opts))
}

async fn storm_task(
    server: &str,
    timeout_ms: i32,
    budget: &Budget,
    live: &LiveCounters,
) -> DriveStats {
    let mut stats = empty_stats();
    while budget.take() {
        let started = Instant::now();
        let outcome = async {
            let conn = Conn::connect(server, timeout_ms, CONNECT_LIMIT).await?;
            if conn.session_id().0 == 0 {
                return Err(BenchError::WrongAnswer(format!(
                    "{server}: ConnectResponse with session id 0"
                )));
            }
            conn.close().await
        }
        .await;
        match outcome {
            Ok(()) => {
                stats.latency_us.saturating_record(micros_since(started));
                stats.ops += 1;
                live.ops.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
            Err(e) => {
                stats.error(format!("connect + closeSession: {e}"));
                live.errors
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
        }
    }
    stats
}

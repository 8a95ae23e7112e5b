//! `rzk-bench run`: namespace, pre-population, the timed phase, verification,
//! cleanup, and the report.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::future::join_all;
use rzk_wire::{
    ByteString, DeleteRequest, ErrorCode, GetAllChildrenNumberRequest, GetChildren2Request,
    GetChildrenRequest, Request, Response, SyncRequest,
};
use tokio_util::sync::CancellationToken;

use crate::conn::Conn;
use crate::error::BenchError;
use crate::pipeline::{drive, new_histogram, Budget, DriveStats, LiveCounters, Pace};
use crate::report::{cores, CpuTime, Percentiles, Report};
use crate::workload::{create_request, open_acl, SessionWork, Shape, ValuePool, WorkloadKind};

/// How long a connect handshake may take during a run.
pub const CONNECT_LIMIT: Duration = Duration::from_secs(30);

/// When the timed phase ends.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Limit {
    /// After this many seconds.
    Seconds(f64),
    /// After this many operations (in total over all sessions).
    Ops(u64),
}

/// Everything `rzk-bench run` needs (the command line, parsed and checked).
#[derive(Clone, Debug)]
pub struct RunOptions {
    /// `host:port` of the server under test, or the connect string of an
    /// ensemble (`host:port,host:port,...`): session `i` then connects to
    /// member `i` modulo the number of members ([`RunOptions::member`]).
    pub server: String,
    /// The workload.
    pub workload: WorkloadKind,
    /// Parallel sessions.
    pub sessions: usize,
    /// Requests in flight per session.
    pub inflight: usize,
    /// Size of every value written.
    pub value_bytes: usize,
    /// When the timed phase ends.
    pub limit: Limit,
    /// Probability of a read in `mixed`.
    pub read_ratio: f64,
    /// Watching sessions in `watch`.
    pub watchers: usize,
    /// The run's namespace znode; must not exist yet.
    pub namespace: String,
    /// Session timeout asked for.
    pub session_timeout_ms: i32,
    /// Seconds between progress lines on stderr (0: none).
    pub progress_seconds: f64,
    /// Seed of the workload's random choices.
    pub seed: u64,
    /// Keys each session owns (get, set, exists, mixed, mix; the pool of
    /// `delete` in a timed run).
    pub keys_per_session: usize,
    /// The server's process ids (one per member of an ensemble), when it
    /// runs on this machine: their CPU time during the timed phase, summed,
    /// is then reported (`server_cpu_*` in the JSON). Empty: not measured.
    pub server_pids: Vec<u32>,
    /// Open loop: operations per second offered in total, spread evenly over
    /// the sessions ([`crate::pipeline::Pace`]); `None`: closed loop (each
    /// session sends as soon as it has a credit).
    pub rate: Option<f64>,
}

impl RunOptions {
    /// The member of [`RunOptions::server`] that session `i` connects to:
    /// sessions are spread round-robin over the members, so a run with as
    /// many sessions as members (or a multiple) loads each equally. The
    /// run's own bookkeeping connections (namespace, count check, cleanup)
    /// use member 0.
    pub fn member(&self, i: usize) -> &str {
        let members: Vec<&str> = self.server.split(',').map(str::trim).collect();
        members[i % members.len()]
    }

    /// How many members [`RunOptions::server`] names.
    pub fn members(&self) -> usize {
        self.server.split(',').count()
    }
}

/// A namespace nobody else uses: `/rzk-bench-<pid>-<nanoseconds>` in hex.
pub fn fresh_namespace() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    format!("/rzk-bench-{:x}-{:x}", std::process::id(), nanos)
}

/// Runs a benchmark. Wrong answers are counted in the report (check
/// `errors`); `Err` is a failure that stopped the run (it could not connect,
/// set up or measure).
///
/// `cancel` ends the timed phase early (Ctrl-C); the namespace is still
/// cleaned up.
pub async fn run(opts: &RunOptions, cancel: CancellationToken) -> Result<Report, BenchError> {
    let mut admin = Conn::connect(opts.member(0), opts.session_timeout_ms, CONNECT_LIMIT).await?;
    let ns: ByteString = opts.namespace.as_str().into();
    admin
        .call_ok(&create_request(
            ns.clone(),
            bytes::Bytes::new(),
            &open_acl(),
        ))
        .await
        .map_err(|e| match e {
            BenchError::Unexpected {
                code: ErrorCode::NodeExists,
                ..
            } => BenchError::Options(format!(
                "namespace {} exists already; every run needs its own",
                opts.namespace
            )),
            other => other,
        })?;
    // Not kept open during the run: an unpinged session would expire in a
    // run longer than its timeout.
    let _ = admin.close().await;
    let measured = match opts.workload {
        WorkloadKind::Watch => crate::watch::run(opts, &cancel).await,
        WorkloadKind::Storm => crate::storm::run(opts, &cancel).await,
        _ => run_pipelined(opts, &cancel).await,
    };
    // Clean up whatever happened, then report the first failure.
    let cleanup = async {
        let mut conn = connect_synced(opts).await?;
        delete_tree(&mut conn, &ns).await?;
        conn.close().await
    }
    .await;
    let mut report = measured?;
    if let Err(e) = cleanup {
        report.errors += 1;
        report
            .messages
            .push(format!("cleanup of {}: {e}", opts.namespace));
    }
    Ok(report)
}

/// What the timed phase of any workload measured, before it becomes a
/// [`Report`].
#[derive(Debug)]
pub struct Measured {
    /// Merged statistics of every session.
    pub stats: DriveStats,
    /// Wall time of the timed phase.
    pub seconds: f64,
    /// CPU time of the generator during it.
    pub cpu: CpuTime,
    /// CPU time of the server during it, if its process id was given.
    pub server_cpu: Option<CpuTime>,
    /// Sessions used.
    pub sessions: usize,
}

impl Measured {
    /// The report of `opts`'s run.
    pub fn into_report(self, opts: &RunOptions) -> Report {
        Report {
            workload: opts.workload.name(),
            server: opts.server.clone(),
            sessions: self.sessions,
            inflight: opts.inflight,
            value_bytes: opts.value_bytes,
            ops: self.stats.ops,
            errors: self.stats.errors,
            seconds: self.seconds,
            latency: Percentiles::of(&self.stats.latency_us),
            cpu: self.cpu,
            server_cpu: self.server_cpu,
            cores: cores(),
            messages: self.stats.messages,
            namespace: opts.namespace.clone(),
            seed: opts.seed,
            offered_rate: opts.rate,
        }
    }
}

/// Adds `other` into `into`.
pub fn merge(into: &mut DriveStats, other: DriveStats) {
    into.latency_us
        .add(&other.latency_us)
        .expect("all histograms share the same bounds");
    into.ops += other.ops;
    into.errors += other.errors;
    into.broken |= other.broken;
    for m in other.messages {
        if into.messages.len() < 2 * crate::pipeline::ERROR_MESSAGES_MAX {
            into.messages.push(m);
        }
    }
}

/// An empty [`DriveStats`].
pub fn empty_stats() -> DriveStats {
    DriveStats {
        latency_us: new_histogram(),
        ops: 0,
        errors: 0,
        messages: Vec::new(),
        broken: false,
    }
}

/// The timed phase of a run: the clock task (time limit, progress lines), the
/// generator's CPU time and the wall time, started together and read together.
#[derive(Debug)]
pub struct TimedPhase {
    /// Cancels the clock task.
    clock: CancellationToken,
    /// The generator's CPU time when the phase began.
    cpu_start: CpuTime,
    /// The server's processes and their CPU time when the phase began (none
    /// if a process id was not given or not readable).
    server_start: Option<Vec<(u32, CpuTime)>>,
    /// When the phase began.
    started: Instant,
}

/// What a timed phase measured.
#[derive(Clone, Copy, Debug)]
pub struct PhaseEnd {
    /// Wall time, seconds.
    pub seconds: f64,
    /// The generator's CPU time.
    pub cpu: CpuTime,
    /// The server's CPU time (summed over its processes), if their process
    /// ids were given and readable.
    pub server_cpu: Option<CpuTime>,
}

impl TimedPhase {
    /// Starts the clock of `opts` over `budget` and the CPU and wall timers.
    pub fn start(
        opts: &RunOptions,
        budget: &Arc<Budget>,
        live: &Arc<LiveCounters>,
        cancel: &CancellationToken,
    ) -> TimedPhase {
        let clock = start_clock(
            opts.limit,
            budget.clone(),
            live.clone(),
            opts.progress_seconds,
            cancel.clone(),
        );
        TimedPhase {
            clock,
            cpu_start: CpuTime::now(),
            server_start: (!opts.server_pids.is_empty())
                .then(|| {
                    opts.server_pids
                        .iter()
                        .map(|&pid| Some((pid, CpuTime::of_pid(pid)?)))
                        .collect::<Option<Vec<_>>>()
                })
                .flatten(),
            started: Instant::now(),
        }
    }

    /// Stops the clock; returns the elapsed seconds and the CPU time used.
    pub fn finish(self) -> PhaseEnd {
        let seconds = self.started.elapsed().as_secs_f64();
        let cpu = CpuTime::now().since(self.cpu_start);
        let server_cpu = self.server_start.and_then(|starts| {
            starts
                .into_iter()
                .map(|(pid, start)| Some(CpuTime::of_pid(pid)?.since(start)))
                .sum::<Option<CpuTime>>()
        });
        self.clock.cancel();
        PhaseEnd {
            seconds,
            cpu,
            server_cpu,
        }
    }
}

/// Starts the task that ends the timed phase (time up or cancelled) and the
/// progress line; returns a handle that stops both.
fn start_clock(
    limit: Limit,
    budget: Arc<Budget>,
    live: Arc<LiveCounters>,
    progress_seconds: f64,
    cancel: CancellationToken,
) -> CancellationToken {
    let done = CancellationToken::new();
    let stop_on = done.clone();
    let started = Instant::now();
    let b = budget.clone();
    tokio::spawn(async move {
        let time_up = async {
            match limit {
                Limit::Seconds(s) => tokio::time::sleep(Duration::from_secs_f64(s)).await,
                Limit::Ops(_) => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = time_up => {}
            _ = cancel.cancelled() => {}
            _ = stop_on.cancelled() => {}
        }
        b.stop();
    });
    if progress_seconds > 0.0 {
        let stop_on = done.clone();
        tokio::spawn(async move {
            let period = Duration::from_secs_f64(progress_seconds);
            let mut ticker = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
            let mut last_ops = 0;
            loop {
                tokio::select! {
                    _ = ticker.tick() => {}
                    _ = stop_on.cancelled() => return,
                }
                let ops = live.ops.load(std::sync::atomic::Ordering::Relaxed);
                let errors = live.errors.load(std::sync::atomic::Ordering::Relaxed);
                eprintln!(
                    "rzk-bench: {:.1} s  ops {ops}  {:.0} ops/s  errors {errors}",
                    started.elapsed().as_secs_f64(),
                    (ops - last_ops) as f64 / progress_seconds,
                );
                last_ops = ops;
            }
        });
    }
    done
}

/// One pipelined session: its connection (split) and its work.
struct Session {
    parts: crate::conn::ConnParts,
    session_id: rzk_wire::SessionId,
    work: SessionWork,
}

async fn run_pipelined(
    opts: &RunOptions,
    cancel: &CancellationToken,
) -> Result<Report, BenchError> {
    let shape = Shape {
        kind: opts.workload,
        namespace: opts.namespace.clone(),
        keys_per_session: opts.keys_per_session,
        read_ratio: opts.read_ratio,
        seed: opts.seed,
    };
    let pool = Arc::new(ValuePool::new(opts.value_bytes));
    let conns = join_all(
        (0..opts.sessions)
            .map(|s| Conn::connect(opts.member(s), opts.session_timeout_ms, CONNECT_LIMIT)),
    )
    .await;
    let mut sessions = Vec::with_capacity(opts.sessions);
    for (s, conn) in conns.into_iter().enumerate() {
        let conn = conn?;
        let session_id = conn.session_id();
        sessions.push(Session {
            parts: conn.into_parts(),
            session_id,
            work: SessionWork::new(&shape, s as u64, pool.clone()),
        });
    }
    prepopulate(&mut sessions, opts).await?;

    let budget = Arc::new(Budget::new(match opts.limit {
        Limit::Ops(n) => Some(n),
        Limit::Seconds(_) => None,
    }));
    let live = Arc::new(LiveCounters::default());
    let phase = TimedPhase::start(opts, &budget, &live, cancel);
    let start = Instant::now();
    let tasks: Vec<_> = sessions
        .into_iter()
        .enumerate()
        .map(|(s, mut session)| {
            let (budget, live, server, inflight) = (
                budget.clone(),
                live.clone(),
                opts.member(s).to_owned(),
                opts.inflight,
            );
            let pace = opts
                .rate
                .map(|rate| Pace::for_session(start, rate, opts.sessions, s));
            tokio::spawn(async move {
                let stats = drive(
                    &mut session.parts,
                    &mut session.work,
                    inflight,
                    pace,
                    &budget,
                    &live,
                    &server,
                )
                .await;
                (session, stats)
            })
        })
        .collect();
    let finished = join_all(tasks).await;
    let end = phase.finish();

    let mut total = empty_stats();
    let mut live_znodes = 1; // the namespace itself
    let mut closers = Vec::new();
    for (s, joined) in finished.into_iter().enumerate() {
        let (session, stats) =
            joined.map_err(|e| BenchError::WrongAnswer(format!("session task failed: {e}")))?;
        let broken = stats.broken;
        merge(&mut total, stats);
        live_znodes += session.work.live_znodes();
        if !broken {
            let server = opts.member(s).to_owned();
            closers.push(async move {
                let conn = Conn::from_parts(session.parts, &server, session.session_id)?;
                conn.close().await
            });
        }
    }
    for closed in join_all(closers).await {
        if let Err(e) = closed {
            total.error(format!("closeSession: {e}"));
        }
    }
    if total.errors == 0 {
        verify_count(opts, live_znodes, &mut total).await;
    }
    Ok(Measured {
        stats: total,
        seconds: end.seconds,
        cpu: end.cpu,
        server_cpu: end.server_cpu,
        sessions: opts.sessions,
    }
    .into_report(opts))
}

/// Runs every session's pre-population (untimed) and fails on any error.
async fn prepopulate(sessions: &mut [Session], opts: &RunOptions) -> Result<(), BenchError> {
    let budget = Budget::new(None);
    let live = LiveCounters::default();
    let results = join_all(sessions.iter_mut().enumerate().map(|(s, session)| {
        let mut script = session.work.prepopulate();
        let (budget, live, server) = (&budget, &live, opts.member(s));
        async move {
            drive(
                &mut session.parts,
                &mut script,
                opts.inflight,
                None,
                budget,
                live,
                server,
            )
            .await
        }
    }))
    .await;
    for stats in results {
        if stats.errors > 0 {
            return Err(BenchError::WrongAnswer(format!(
                "pre-population failed: {}",
                stats.messages.join("; ")
            )));
        }
    }
    Ok(())
}

/// After the timed phase: the namespace must hold exactly the znodes the
/// sessions' work says it left (creates, multis and mix add, deletes remove).
async fn verify_count(opts: &RunOptions, expected: u64, total: &mut DriveStats) {
    if matches!(opts.workload, WorkloadKind::Watch | WorkloadKind::Storm) {
        return;
    }
    let counted = async {
        let mut conn = connect_synced(opts).await?;
        let n = count_descendants(&mut conn, &opts.namespace).await?;
        let _ = conn.close().await;
        Ok::<u64, BenchError>(n + 1)
    }
    .await;
    match counted {
        Ok(n) if n == expected => {}
        Ok(n) => total.error(format!(
            "count check {}: the namespace holds {n} znodes (itself included), this run left {expected}",
            opts.namespace
        )),
        Err(e) => total.error(format!("count check {}: {e}", opts.namespace)),
    }
}

/// A connection to member 0 that has seen every write acknowledged before
/// it was opened, on whichever member (a `sync` of the namespace first: an
/// ensemble member may not have applied what another member acknowledged).
/// With one server every write was acknowledged by it: no sync, so a server
/// (or test fake) without `sync` is measured as before.
async fn connect_synced(opts: &RunOptions) -> Result<Conn, BenchError> {
    let mut conn = Conn::connect(opts.member(0), opts.session_timeout_ms, CONNECT_LIMIT).await?;
    if opts.members() == 1 {
        return Ok(conn);
    }
    let sync = Request::Sync(SyncRequest {
        path: opts.namespace.as_str().into(),
    });
    conn.call_ok(&sync).await?;
    Ok(conn)
}

/// The number of descendants of `path` (getAllChildrenNumber; on a server
/// without it, the children of getChildren2, recursively).
pub async fn count_descendants(conn: &mut Conn, path: &str) -> Result<u64, BenchError> {
    let request = Request::GetAllChildrenNumber(GetAllChildrenNumberRequest { path: path.into() });
    match conn.call(&request).await? {
        Ok(Response::GetAllChildrenNumber(r)) => return Ok(r.total_number.max(0) as u64),
        Ok(other) => {
            return Err(BenchError::WrongAnswer(format!(
                "getAllChildrenNumber {path}: reply body {other:?}"
            )))
        }
        Err(ErrorCode::Unimplemented) => {}
        Err(code) => {
            return Err(BenchError::Unexpected {
                op: "getAllChildrenNumber",
                path: path.into(),
                code,
            })
        }
    }
    let request = Request::GetChildren2(GetChildren2Request {
        path: path.into(),
        watch: false,
    });
    let Response::GetChildren2(r) = conn.call_ok(&request).await? else {
        return Err(BenchError::WrongAnswer(format!(
            "getChildren2 {path}: wrong reply body"
        )));
    };
    let mut n = r.children.len() as u64;
    for child in &r.children {
        let child_path = format!("{path}/{child}");
        n += Box::pin(count_descendants(conn, &child_path)).await?;
    }
    Ok(n)
}

/// Deletes `path` and everything under it, pipelined. A znode that is gone
/// already is fine (NONODE).
pub async fn delete_tree(conn: &mut Conn, path: &str) -> Result<(), BenchError> {
    let list = Request::GetChildren(GetChildrenRequest {
        path: path.into(),
        watch: false,
    });
    let children = match conn.call(&list).await? {
        Ok(Response::GetChildren(r)) => r.children,
        Ok(other) => {
            return Err(BenchError::WrongAnswer(format!(
                "getChildren {path}: reply body {other:?}"
            )))
        }
        Err(ErrorCode::NoNode) => return Ok(()),
        Err(code) => {
            return Err(BenchError::Unexpected {
                op: "getChildren",
                path: path.into(),
                code,
            })
        }
    };
    let paths: Vec<String> = children.iter().map(|c| format!("{path}/{c}")).collect();
    let deletes: Vec<Request> = paths
        .iter()
        .map(|p| {
            Request::Delete(DeleteRequest {
                path: p.as_str().into(),
                version: -1,
            })
        })
        .collect();
    let results = conn.call_many(&deletes).await?;
    for (child, result) in paths.iter().zip(results) {
        match result {
            Ok(_) | Err(ErrorCode::NoNode) => {}
            Err(ErrorCode::NotEmpty) => Box::pin(delete_tree(conn, child)).await?,
            Err(code) => {
                return Err(BenchError::Unexpected {
                    op: "delete",
                    path: child.clone(),
                    code,
                })
            }
        }
    }
    match conn
        .call(&Request::Delete(DeleteRequest {
            path: path.into(),
            version: -1,
        }))
        .await?
    {
        Ok(_) | Err(ErrorCode::NoNode) => Ok(()),
        Err(code) => Err(BenchError::Unexpected {
            op: "delete",
            path: path.into(),
            code,
        }),
    }
}

/// Whether the workload works on `Workload` sessions (not watch or storm).
pub fn is_pipelined(kind: WorkloadKind) -> bool {
    !matches!(kind, WorkloadKind::Watch | WorkloadKind::Storm)
}

//! `rzk-bench populate`: creates N persistent children under a parent,
//! pipelined over several sessions, then checks the count.

use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use futures::future::join_all;
use rzk_wire::{Acl, ErrorCode};

use crate::conn::Conn;
use crate::error::BenchError;
use crate::pipeline::{drive, Budget, LiveCounters};
use crate::run::{count_descendants, CONNECT_LIMIT};
use crate::workload::{create_request, open_acl, Expect, Op, PathBuilder, ValuePool, Workload};

/// Options of `rzk-bench populate`.
#[derive(Clone, Debug)]
pub struct PopulateOptions {
    /// `host:port` of the server.
    pub server: String,
    /// How many children to create.
    pub znodes: u64,
    /// Size of each child's value.
    pub value_bytes: usize,
    /// The parent (created if missing).
    pub path: String,
    /// Parallel sessions.
    pub sessions: usize,
    /// Requests in flight per session.
    pub inflight: usize,
    /// Session timeout asked for.
    pub session_timeout_ms: i32,
}

/// What `populate` did.
#[derive(Clone, Debug, PartialEq)]
pub struct PopulateReport {
    /// Children created as expected.
    pub znodes: u64,
    /// Wall time of the creates and the count check.
    pub seconds: f64,
    /// Failed creates, plus one if the count check failed.
    pub errors: u64,
    /// The first error messages.
    pub messages: Vec<String>,
}

impl PopulateReport {
    /// Creates per second.
    pub fn ops_per_sec(&self) -> f64 {
        if self.seconds > 0.0 {
            self.znodes as f64 / self.seconds
        } else {
            0.0
        }
    }

    /// `{"znodes":N,"seconds":..,"ops_per_sec":..}`.
    pub fn to_json(&self) -> String {
        // By hand, to keep the contract's key order.
        let number = |x: f64| {
            serde_json::Number::from_f64(x)
                .map(serde_json::Value::Number)
                .unwrap_or(serde_json::Value::from(0))
        };
        format!(
            "{{\"znodes\":{},\"seconds\":{},\"ops_per_sec\":{}}}",
            self.znodes,
            number((self.seconds * 1000.0).round() / 1000.0),
            number((self.ops_per_sec() * 10.0).round() / 10.0),
        )
    }
}

/// The creates of one populating session: children `n<i>` for every `i` in
/// `first, first + step, ...` below `end`.
struct Children {
    prefix: Bytes,
    next: u64,
    step: u64,
    end: u64,
    value: Bytes,
    acl: Vec<Acl>,
    paths: PathBuilder,
}

impl Workload for Children {
    fn next_op(&mut self) -> Option<Op> {
        if self.next >= self.end {
            return None;
        }
        let path = self.paths.build(&self.prefix, self.next, None);
        self.next += self.step;
        Some(Op {
            request: create_request(path.clone(), self.value.clone(), &self.acl),
            expect: Expect::Created { path },
        })
    }

    fn exhausted(&self) -> bool {
        self.next >= self.end
    }
}

/// Creates the parent if missing and `znodes` children, then checks that the
/// parent has exactly that many descendants. Create failures and a count
/// mismatch are counted in the report's `errors`.
pub async fn populate(opts: &PopulateOptions) -> Result<PopulateReport, BenchError> {
    let mut admin = Conn::connect(&opts.server, opts.session_timeout_ms, CONNECT_LIMIT).await?;
    match admin
        .call(&create_request(
            opts.path.as_str().into(),
            Bytes::new(),
            &open_acl(),
        ))
        .await?
    {
        Ok(_) | Err(ErrorCode::NodeExists) => {}
        Err(code) => {
            return Err(BenchError::Unexpected {
                op: "create",
                path: opts.path.clone(),
                code,
            })
        }
    }
    let _ = admin.close().await;
    let sessions = opts.sessions.max(1);
    let value = ValuePool::new(opts.value_bytes).get(0).clone();
    let prefix: Bytes = format!("{}/n", opts.path.trim_end_matches('/'))
        .into_bytes()
        .into();
    let conns = join_all(
        (0..sessions).map(|_| Conn::connect(&opts.server, opts.session_timeout_ms, CONNECT_LIMIT)),
    )
    .await;
    let budget = Arc::new(Budget::new(None));
    let live = Arc::new(LiveCounters::default());
    let started = Instant::now();
    let mut tasks = Vec::with_capacity(sessions);
    for (s, conn) in conns.into_iter().enumerate() {
        let conn = conn?;
        let session_id = conn.session_id();
        let mut work = Children {
            prefix: prefix.clone(),
            next: s as u64,
            step: sessions as u64,
            end: opts.znodes,
            value: value.clone(),
            acl: open_acl(),
            paths: PathBuilder::default(),
        };
        let (budget, live, server, inflight) = (
            budget.clone(),
            live.clone(),
            opts.server.clone(),
            opts.inflight,
        );
        tasks.push(tokio::spawn(async move {
            let mut parts = conn.into_parts();
            let stats = drive(
                &mut parts, &mut work, inflight, None, &budget, &live, &server,
            )
            .await;
            if !stats.broken {
                if let Ok(conn) = Conn::from_parts(parts, &server, session_id) {
                    let _ = conn.close().await;
                }
            }
            stats
        }));
    }
    let mut report = PopulateReport {
        znodes: 0,
        seconds: 0.0,
        errors: 0,
        messages: Vec::new(),
    };
    for joined in join_all(tasks).await {
        let stats =
            joined.map_err(|e| BenchError::WrongAnswer(format!("populate task failed: {e}")))?;
        report.znodes += stats.ops;
        report.errors += stats.errors;
        report.messages.extend(stats.messages);
    }
    // A fresh session: the first one sat unpinged through the creates.
    let mut checker = Conn::connect(&opts.server, opts.session_timeout_ms, CONNECT_LIMIT).await?;
    let counted = count_descendants(&mut checker, &opts.path).await?;
    report.seconds = started.elapsed().as_secs_f64();
    let _ = checker.close().await;
    if counted != opts.znodes {
        report.errors += 1;
        report.messages.push(format!(
            "count check {}: {counted} descendants, expected {}",
            opts.path, opts.znodes
        ));
    }
    Ok(report)
}

//! `rzk-bench idle-sessions`: opens N sessions, each on its own connection,
//! keeps them alive with pings, holds them, then closes them all. With
//! `--watch-parent`, each session first leaves exist watches on children of
//! that parent (a server's memory per watch: `benches/run watch-rss`).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use rzk_wire::{ExistsRequest, Request, Response};
use tokio_util::sync::CancellationToken;

use crate::conn::Conn;
use crate::error::BenchError;
use crate::run::CONNECT_LIMIT;

/// Options of `rzk-bench idle-sessions`.
#[derive(Clone, Debug)]
pub struct IdleOptions {
    /// `host:port` of the server.
    pub server: String,
    /// Sessions to open.
    pub sessions: usize,
    /// Session timeout asked for.
    pub session_timeout_ms: i32,
    /// How long to hold them once all are open.
    pub hold: Duration,
    /// Connects in progress at once.
    pub connect_parallelism: usize,
    /// Watches each session leaves once it is open, if any.
    pub watches: Option<WatchSpread>,
}

/// Which watches the idle sessions leave: session `i` sends
/// `exists(watch=true)` for the children `n{(i * per_session + k) % znodes}`,
/// `k < per_session`, of `parent` (the names `rzk-bench populate` creates), so
/// every child is watched by about `sessions * per_session / znodes` sessions.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WatchSpread {
    /// The parent of the watched children.
    pub parent: String,
    /// Its children `n0` .. `n{znodes - 1}`, which must exist.
    pub znodes: u64,
    /// Watches per session.
    pub per_session: u64,
}

/// Leaves session `i`'s watches of `spread`; each child must exist (a watch
/// on a missing node would be an exist watch too, but not the one measured).
async fn leave_watches(conn: &mut Conn, i: u64, spread: &WatchSpread) -> Result<(), BenchError> {
    let parent = spread.parent.trim_end_matches('/');
    for k in 0..spread.per_session {
        let child = (i * spread.per_session + k) % spread.znodes.max(1);
        let exists = Request::Exists(ExistsRequest {
            path: format!("{parent}/n{child}").into(),
            watch: true,
        });
        match conn.call_ok(&exists).await? {
            Response::Stat(_) => {}
            other => {
                return Err(BenchError::WrongAnswer(format!(
                    "exists {parent}/n{child}: reply {other:?}"
                )))
            }
        }
    }
    Ok(())
}

/// What happened to the sessions.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IdleReport {
    /// Sessions established.
    pub established: usize,
    /// Sessions that failed (ping unanswered, connection lost, close failed).
    pub errors: u64,
    /// The first error messages.
    pub messages: Vec<String>,
}

/// Opens the sessions, calls `ready(n)` once all `n` are established, holds
/// them for `opts.hold` or until `release` completes, then closes them all.
/// Failing to open any session is an `Err` (the others are closed first).
pub async fn idle_sessions(
    opts: &IdleOptions,
    ready: impl FnOnce(usize),
    release: impl std::future::Future<Output = ()>,
) -> Result<IdleReport, BenchError> {
    let hold_end = CancellationToken::new();
    let errors = Arc::new(AtomicU64::new(0));
    let messages = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut tasks = Vec::with_capacity(opts.sessions);
    let mut connects = futures::stream::iter(0..opts.sessions as u64)
        .map(|i| async move {
            let mut conn =
                Conn::connect(&opts.server, opts.session_timeout_ms, CONNECT_LIMIT).await?;
            if let Some(spread) = &opts.watches {
                leave_watches(&mut conn, i, spread).await?;
            }
            Ok::<Conn, BenchError>(conn)
        })
        .buffer_unordered(opts.connect_parallelism.max(1));
    let mut failure = None;
    while let Some(conn) = connects.next().await {
        let mut conn = match conn {
            Ok(conn) => conn,
            Err(e) => {
                failure = Some(e);
                break;
            }
        };
        let (hold_end, errors, messages) = (hold_end.clone(), errors.clone(), messages.clone());
        tasks.push(tokio::spawn(async move {
            let kept = conn.keep_alive(hold_end.cancelled()).await;
            let outcome = match kept {
                Ok(()) => conn.close().await,
                Err(e) => Err(e),
            };
            if let Err(e) = outcome {
                errors.fetch_add(1, Ordering::Relaxed);
                eprintln!("rzk-bench: idle session: {e}");
                let mut m = messages.lock().expect("messages lock");
                if m.len() < 10 {
                    m.push(e.to_string());
                }
            }
        }));
    }
    drop(connects);
    let established = tasks.len();
    if failure.is_none() {
        ready(established);
        tokio::select! {
            _ = tokio::time::sleep(opts.hold) => {}
            _ = release => {}
        }
    }
    hold_end.cancel();
    futures::future::join_all(tasks).await;
    if let Some(e) = failure {
        return Err(e);
    }
    let messages = messages.lock().expect("messages lock").clone();
    Ok(IdleReport {
        established,
        errors: errors.load(Ordering::Relaxed),
        messages,
    })
}

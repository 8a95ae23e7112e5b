//! The `watch` workload: `--watchers` sessions each hold a data watch on one
//! znode; one writer session sets its data and waits until every watcher has
//! received the NodeDataChanged notification and set its watch again, then
//! writes the next value. Latency is per watcher: setData sent → notification
//! received. One op is one notification.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::future::join_all;
use rzk_wire::{
    ByteString, EventType, GetDataRequest, KeeperState, Request, Response, SetDataRequest,
};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::conn::Conn;
use crate::error::BenchError;
use crate::pipeline::{micros_since, Budget, DriveStats, LiveCounters};
use crate::report::Report;
use crate::run::{empty_stats, merge, Limit, Measured, RunOptions, TimedPhase, CONNECT_LIMIT};
use crate::workload::{create_request, open_acl, ValuePool};

/// What a watcher tells the writer after each notification round.
type Armed = Result<(), String>;

/// Runs the watch workload under `opts.namespace`.
pub async fn run(opts: &RunOptions, cancel: &CancellationToken) -> Result<Report, BenchError> {
    let path: ByteString = format!("{}/watched", opts.namespace).into();
    let pool = Arc::new(ValuePool::new(opts.value_bytes));
    let mut writer = Conn::connect(opts.member(0), opts.session_timeout_ms, CONNECT_LIMIT).await?;
    writer
        .call_ok(&create_request(
            path.clone(),
            pool.get(0).clone(),
            &open_acl(),
        ))
        .await?;
    let watchers = opts.watchers.max(1);
    let conns = join_all(
        // Watcher w on the member after the writer's, round-robin: on an
        // ensemble, most notifications come from members the writer is not on.
        (0..watchers)
            .map(|w| Conn::connect(opts.member(w + 1), opts.session_timeout_ms, CONNECT_LIMIT)),
    )
    .await;
    let sent_at = Arc::new(Mutex::new(Instant::now()));
    let stop = CancellationToken::new();
    let (armed_tx, mut armed_rx) = mpsc::unbounded_channel::<Armed>();
    let live = Arc::new(LiveCounters::default());
    let mut tasks = Vec::with_capacity(watchers);
    for conn in conns {
        let watcher = Watcher {
            conn: conn?,
            path: path.clone(),
            pool: pool.clone(),
            sent_at: sent_at.clone(),
            armed: armed_tx.clone(),
            stop: stop.clone(),
            live: live.clone(),
        };
        tasks.push(tokio::spawn(watcher.run()));
    }
    drop(armed_tx);
    let limit = Duration::from_millis(opts.session_timeout_ms.max(1) as u64);
    let mut total = empty_stats();
    // Round 0: every watcher has read version 0 and set its watch.
    if let Err(message) = wait_armed(&mut armed_rx, watchers, limit).await {
        total.error(message);
    }
    let rounds = match opts.limit {
        Limit::Ops(n) => Some(n.div_ceil(watchers as u64)),
        Limit::Seconds(_) => None,
    };
    let budget = Arc::new(Budget::new(rounds));
    let phase = TimedPhase::start(opts, &budget, &live, cancel);
    let mut round: i32 = 0;
    while total.errors == 0 && budget.take() {
        round += 1;
        let set = Request::SetData(SetDataRequest {
            path: path.clone(),
            data: Some(pool.get(round as usize).clone()),
            version: -1,
        });
        *sent_at.lock().expect("sent_at lock") = Instant::now();
        match writer.call_ok(&set).await {
            Ok(Response::Stat(stat)) if stat.version == round => {}
            Ok(other) => total.error(format!(
                "setData {path}: reply {other:?}, expected version {round}"
            )),
            Err(e) => total.error(e.to_string()),
        }
        if let Err(message) = wait_armed(&mut armed_rx, watchers, limit).await {
            total.error(message);
        }
    }
    let end = phase.finish();
    stop.cancel();
    for joined in join_all(tasks).await {
        match joined {
            Ok(stats) => merge(&mut total, stats),
            Err(e) => total.error(format!("watcher task failed: {e}")),
        }
    }
    if let Err(e) = writer.close().await {
        total.error(format!("closeSession: {e}"));
    }
    Ok(Measured {
        stats: total,
        seconds: end.seconds,
        cpu: end.cpu,
        server_cpu: end.server_cpu,
        sessions: watchers + 1,
    }
    .into_report(opts))
}

/// Waits until `n` watchers report this round, or one fails, or `limit`.
async fn wait_armed(
    rx: &mut mpsc::UnboundedReceiver<Armed>,
    n: usize,
    limit: Duration,
) -> Result<(), String> {
    let deadline = tokio::time::Instant::now() + limit;
    for _ in 0..n {
        match tokio::time::timeout_at(deadline, rx.recv()).await {
            Ok(Some(Ok(()))) => {}
            Ok(Some(Err(message))) => return Err(message),
            Ok(None) => return Err("every watcher has stopped".into()),
            Err(_) => {
                return Err(format!(
                    "watchers did not all report within {} ms",
                    limit.as_millis()
                ))
            }
        }
    }
    Ok(())
}

/// One watching session.
struct Watcher {
    conn: Conn,
    path: ByteString,
    pool: Arc<ValuePool>,
    /// When the writer sent the current round's setData.
    sent_at: Arc<Mutex<Instant>>,
    armed: mpsc::UnboundedSender<Armed>,
    stop: CancellationToken,
    live: Arc<LiveCounters>,
}

impl Watcher {
    async fn run(mut self) -> DriveStats {
        let mut stats = empty_stats();
        let mut round = 0;
        if let Err(message) = self.arm(round).await {
            stats.error(message.clone());
            let _ = self.armed.send(Err(message));
            return stats;
        }
        let _ = self.armed.send(Ok(()));
        let limit = self.conn.reply_timeout();
        loop {
            let notification = tokio::select! {
                n = self.conn.next_notification(limit) => n,
                _ = self.stop.cancelled() => break,
            };
            let outcome = match notification {
                Ok(n) => {
                    let sent = *self.sent_at.lock().expect("sent_at lock");
                    round += 1;
                    self.check_event(&n.event).map(|()| micros_since(sent))
                }
                Err(e) => Err(format!("waiting for NodeDataChanged {}: {e}", &*self.path)),
            };
            let outcome = match outcome {
                Ok(latency_us) => {
                    stats.latency_us.saturating_record(latency_us);
                    stats.ops += 1;
                    self.live
                        .ops
                        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    self.arm(round).await
                }
                Err(message) => Err(message),
            };
            match outcome {
                Ok(()) => {
                    let _ = self.armed.send(Ok(()));
                }
                Err(message) => {
                    stats.error(message.clone());
                    self.live
                        .errors
                        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let _ = self.armed.send(Err(message));
                    return stats;
                }
            }
        }
        if let Err(e) = self.conn.close().await {
            stats.error(format!("closeSession: {e}"));
        }
        stats
    }

    fn check_event(&self, event: &rzk_wire::WatcherEvent) -> Result<(), String> {
        if event.event_type != EventType::NodeDataChanged
            || event.state != KeeperState::SyncConnected
            || event.path != self.path
        {
            return Err(format!(
                "watch on {}: got {} {} {:?}, expected NodeDataChanged SyncConnected on it",
                &*self.path,
                event.event_type.zk_name(),
                event.state.zk_name(),
                &*event.path
            ));
        }
        Ok(())
    }

    /// getData with a watch; the data must be round `round`'s value.
    async fn arm(&mut self, round: i32) -> Result<(), String> {
        let get = Request::GetData(GetDataRequest {
            path: self.path.clone(),
            watch: true,
        });
        let reply = self.conn.call_ok(&get).await.map_err(|e| e.to_string())?;
        let expected = self.pool.get(round as usize);
        match reply {
            Response::GetData(r) if r.data.as_deref() == Some(&expected[..]) && r.stat.version == round => Ok(()),
            Response::GetData(r) => Err(format!(
                "getData {}: version {} with {} bytes, expected version {round} with the value this run wrote",
                &*self.path,
                r.stat.version,
                r.data.map(|d| d.len()).unwrap_or(0)
            )),
            other => Err(format!("getData {}: reply body {other:?}", &*self.path)),
        }
    }
}
